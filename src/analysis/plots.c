/* plots.c — see plots.h. Files in out_dir/plots: metrics_KEY.dat and val_KEY.dat (the first run of
 * each variant: step, train loss, gradient norm, λ per layer; step, validation loss), quant_KEY.dat
 * and curve_TASK.dat (means over runs), outliers.dat, and with the reproduction protocol position.dat
 * (loss by position bin) and layers.dat (sink mass and head-context RMS per layer), means over runs;
 * plots.gp; gnuplot writes NAME.png.tmp, renamed here to NAME.png. A number that does not apply is
 * written NaN, which gnuplot leaves out. */
#include "analysis/plots.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "difftrans_analysis.h"
#include "analysis/textbuf.h"
#include "internal.h"

static int have_gnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

/* 1 when variant v's models have a λ (DIFF and DIFF V2, not the Transformer) */
static int has_lambda(const rp_report *r, int v) { return rp_run(r, v, 0)->cfg.arch != DT_ARCH_LLAMA; }

/* The first run with the reproduction protocol, or NULL. */
static const rp_model *protocol_run(const rp_report *r) {
    for (int v = 0; v < r->n_variants; v++)
        if (rp_run(r, v, 0)->protocol.n_bins) return rp_run(r, v, 0);
    return NULL;
}

int pl_names(const rp_report *r, const char **names, int cap) {
    static const char *fixed[] = {"loss", "lambda", "grad_norm", "quantisation", "outliers"};
    static const char *proto[] = {"loss_by_position", "sink_mass", "head_rms"};
    static const char *curves[DT_N_TASKS] = {"curve_recall", "curve_depth", "curve_icl"};
    int n = 0, lambda = 0;
    for (int v = 0; v < r->n_variants; v++) lambda |= has_lambda(r, v);
    for (int i = 0; i < 5 && n < cap; i++)
        if (i != 1 || lambda) names[n++] = fixed[i];
    for (int i = 0; i < 3 && n < cap && protocol_run(r); i++) names[n++] = proto[i];
    for (int k = 0; k < DT_N_TASKS && n < cap; k++)
        if (r->tasks & (1 << k)) names[n++] = curves[k];
    return n;
}

/* metrics.jsonl of a run → plots/metrics_KEY.dat and plots/val_KEY.dat */
static int metrics_dat(const rp_model *m, const char *key, const char *plots, int *n_lambda, dt_error *err) {
    char path[4200], name[128], mpath[4400], vpath[4400];
    if (dt_pathf(path, sizeof path, err, "%s/metrics.jsonl", m->dir)) return -1;
    snprintf(name, sizeof name, "metrics_%s.dat", key);
    if (dt_pathf(mpath, sizeof mpath, err, "%s/%s", plots, name)) return -1;
    snprintf(name, sizeof name, "val_%s.dat", key);
    if (dt_pathf(vpath, sizeof vpath, err, "%s/%s", plots, name)) return -1;
    FILE *f = open_regular_file(path, err);
    if (!f) return -1;
    textbuf a = {0}, v = {0};
    char line[65536];
    *n_lambda = 0;
    tb_printf(&a, "# step train_loss grad_norm lambda_0..\n");
    tb_printf(&v, "# step val_loss\n");
    while (fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        cJSON *st = cJSON_GetObjectItem(j, "step"), *tl = cJSON_GetObjectItem(j, "train_loss"),
              *gn = cJSON_GetObjectItem(j, "grad_norm"), *vl = cJSON_GetObjectItem(j, "val_loss"),
              *lam = cJSON_GetObjectItem(j, "lambda");
        if (cJSON_IsNumber(st) && cJSON_IsNumber(tl) && cJSON_IsNumber(gn)) {
            tb_printf(&a, "%d %.6g %.6g", st->valueint, tl->valuedouble, gn->valuedouble);
            int k = 0;
            cJSON *e;
            cJSON_ArrayForEach(e, lam) {
                if (cJSON_IsNumber(e)) tb_printf(&a, " %.6g", e->valuedouble), k++;
            }
            *n_lambda = k;
            tb_printf(&a, "\n");
            if (cJSON_IsNumber(vl)) tb_printf(&v, "%d %.6g\n", st->valueint, vl->valuedouble);
        }
        cJSON_Delete(j);
    }
    int bad = ferror(f);
    fclose(f);
    int rc = bad ? dt_fail_io(err, "%s: read error", path) : tb_write(mpath, &a, err);
    if (rc == 0) rc = tb_write(vpath, &v, err);
    free(a.s);
    free(v.s);
    return rc;
}

static int write_dat(const char *plots, const char *name, textbuf *b, dt_error *err) {
    char path[4400];
    int rc = dt_pathf(path, sizeof path, err, "%s/%s", plots, name);
    if (rc == 0) rc = tb_write(path, b, err);
    free(b->s);
    *b = (textbuf){0};
    return rc;
}

/* mean over the runs of a variant of f(run) */
static double mean_over_seeds(const rp_report *r, int v, double (*f)(const rp_model *, int), int arg) {
    double x[RP_MAX_SEEDS];
    for (int s = 0; s < r->n_seeds; s++) x[s] = f(rp_run(r, v, s), arg);
    return dt_stats_mean_ci(x, r->n_seeds).mean;
}
static double quant_loss(const rp_model *m, int row) { return row < m->n_quant ? m->quant[row].loss : NAN; }
static double logit_top1(const rp_model *m, int unused) { return m->outliers.logits.top1; }
static double logit_top10(const rp_model *m, int unused) { return m->outliers.logits.top10; }
static double hidden_top1(const rp_model *m, int unused) { return m->outliers.hidden.top1; }
static double hidden_top10(const rp_model *m, int unused) { return m->outliers.hidden.top10; }
static double bin_held(const rp_model *m, int k) { return k < m->protocol.n_bins ? m->protocol.bin_loss[k] : NAN; }
static double bin_train(const rp_model *m, int k) {
    return k < m->protocol_train.n_bins ? m->protocol_train.bin_loss[k] : NAN;
}
static double layer_of(const double *v, const dt_an_protocol *p, int l) { return v && l < p->n_layers ? v[l] : NAN; }
static double sink(const rp_model *m, int l) { return layer_of(m->protocol.sink_mass, &m->protocol, l); }
static double sink1(const rp_model *m, int l) { return layer_of(m->protocol.sink_mass_map1, &m->protocol, l); }
static double rms_mean(const rp_model *m, int l) {
    const dt_an_protocol *p = &m->protocol;
    if (!p->head_rms || l >= p->n_layers || p->n_heads < 1) return NAN;
    double s = 0;
    for (int j = 0; j < p->n_heads; j++) s += p->head_rms[(size_t)l * p->n_heads + j] / p->n_heads;
    return s;
}

/* " %.6g", or " NaN" (gnuplot skips it; printf's "nan" it would not read as a number) */
static void dat_num(textbuf *b, double x) {
    if (isnan(x)) tb_printf(b, " NaN");
    else tb_printf(b, " %.6g", x);
}

/* position.dat and layers.dat of the reproduction protocol: means over runs. */
static int protocol_dat(const rp_report *r, const char *plots, dt_error *err) {
    const rp_model *p0 = protocol_run(r);
    textbuf b = {0};
    tb_printf(&b, "# middle position of the bin, then per variant the held-out and the training-text loss (means over runs)\n");
    for (int k = 0; k < p0->protocol.n_bins; k++) {
        tb_printf(&b, "%.1f", 0.5 * (p0->protocol.bin_start[k] + p0->protocol.bin_start[k + 1] - 1));
        for (int v = 0; v < r->n_variants; v++) {
            dat_num(&b, mean_over_seeds(r, v, bin_held, k));
            dat_num(&b, mean_over_seeds(r, v, bin_train, k));
        }
        tb_printf(&b, "\n");
    }
    if (write_dat(plots, "position.dat", &b, err)) return -1;
    int L = 0;
    for (int v = 0; v < r->n_variants; v++)
        if (rp_run(r, v, 0)->protocol.n_layers > L) L = rp_run(r, v, 0)->protocol.n_layers;
    tb_printf(&b, "# layer, then per variant the sink mass of the head maps, of the first softmax map (NaN: the "
                  "Transformer) and the mean head-context RMS (means over runs)\n");
    for (int l = 0; l < L; l++) {
        tb_printf(&b, "%d", l);
        for (int v = 0; v < r->n_variants; v++) {
            dat_num(&b, mean_over_seeds(r, v, sink, l));
            dat_num(&b, mean_over_seeds(r, v, sink1, l));
            dat_num(&b, mean_over_seeds(r, v, rms_mean, l));
        }
        tb_printf(&b, "\n");
    }
    return write_dat(plots, "layers.dat", &b, err);
}

/* The data files and plots.gp; returns 0 or -1. */
static int write_data(const rp_report *r, const char *plots, int cairo, dt_error *err) {
    int nlam[RP_MAX_VARIANTS], any_lambda = 0;
    const char *lc[RP_MAX_VARIANTS];
    static const char *colors[RP_MAX_VARIANTS] = {"1", "2", "3", "4", "6", "7", "8", "9"};
    for (int v = 0; v < r->n_variants; v++) {
        lc[v] = colors[v];
        if (metrics_dat(rp_run(r, v, 0), r->variant_key[v], plots, &nlam[v], err) != 0) return -1;
        any_lambda |= has_lambda(r, v);
    }
    const rp_model *proto = protocol_run(r);
    if (proto && protocol_dat(r, plots, err) != 0) return -1;
    textbuf b = {0};
    char name[128];
    for (int v = 0; v < r->n_variants; v++) {
        const rp_model *m0 = rp_run(r, v, 0);
        tb_printf(&b, "# bits loss (32 = unquantised fp32), mean over %d run(s)\n", r->n_seeds);
        for (int i = m0->n_quant - 1; i >= 0; i--)
            tb_printf(&b, "%d %.6g\n", m0->quant[i].bits ? m0->quant[i].bits : 32, mean_over_seeds(r, v, quant_loss, i));
        snprintf(name, sizeof name, "quant_%s.dat", r->variant_key[v]);
        if (write_dat(plots, name, &b, err)) return -1;
    }
    tb_printf(&b, "# measure, then the mean over runs of each variant\n");
    static const char *labels[4] = {"logit top-1", "logit top-10", "hidden top-1", "hidden top-10"};
    double (*fs[4])(const rp_model *, int) = {logit_top1, logit_top10, hidden_top1, hidden_top10};
    for (int i = 0; i < 4; i++) {
        tb_printf(&b, "\"%s\"", labels[i]);
        for (int v = 0; v < r->n_variants; v++) tb_printf(&b, " %.6g", mean_over_seeds(r, v, fs[i], 0));
        tb_printf(&b, "\n");
    }
    if (write_dat(plots, "outliers.dat", &b, err)) return -1;
    for (int k = 0; k < DT_N_TASKS; k++) {
        if (!(r->tasks & (1 << k))) continue;
        tb_printf(&b, "# step, then per variant the mean %s accuracy over runs\n", dt_task_name((dt_task_kind)k));
        const rp_model *m0 = rp_run(r, 0, 0);
        for (int p = 0; p < m0->n_curve; p++) {
            tb_printf(&b, "%d", m0->curve[p].step);
            for (int v = 0; v < r->n_variants; v++) {
                double x[RP_MAX_SEEDS];
                for (int s = 0; s < r->n_seeds; s++) {
                    const rp_model *m = rp_run(r, v, s);
                    x[s] = p < m->n_curve ? m->curve[p].accuracy[k] : NAN;
                }
                tb_printf(&b, " %.6g", dt_stats_mean_ci(x, r->n_seeds).mean);
            }
            tb_printf(&b, "\n");
        }
        snprintf(name, sizeof name, "curve_%s.dat", dt_task_name((dt_task_kind)k));
        if (write_dat(plots, name, &b, err)) return -1;
    }

    textbuf g = {0};
    const char *title[RP_MAX_VARIANTS];
    for (int v = 0; v < r->n_variants; v++) title[v] = rp_run(r, v, 0)->name;
    tb_printf(&g, "# plots.gp — run from this directory: gnuplot plots.gp\n");
    tb_printf(&g, "set terminal %s size 900,540\nset grid\nset key top right\nset datafile missing 'NaN'\n",
              cairo ? "pngcairo" : "png");
    tb_printf(&g, "set output 'loss.png.tmp'\nset title 'Loss (nats/byte), first run of each model'\nset xlabel "
                  "'step'\nset ylabel 'loss'\nplot ");
    for (int v = 0; v < r->n_variants; v++)
        tb_printf(&g, "%s'metrics_%s.dat' u 1:2 w l lc %s t '%s train', 'val_%s.dat' u 1:2 w lp lc %s dt 2 pt 7 t '%s val'",
                  v ? ", " : "", r->variant_key[v], lc[v], title[v], r->variant_key[v], lc[v], title[v]);
    tb_printf(&g, "\n");
    if (any_lambda) { /* one colour per variant, one dash pattern per layer */
        tb_printf(&g, "set output 'lambda.png.tmp'\nset title 'lambda per layer over training (first run; DIFF V2: "
                      "the mean over tokens and heads)'\nset ylabel 'lambda'\nplot ");
        int lines = 0;
        for (int v = 0; v < r->n_variants; v++) {
            if (!has_lambda(r, v)) continue;
            for (int l = 0; l < nlam[v]; l++)
                tb_printf(&g, "%s'metrics_%s.dat' u 1:%d w l lc %s dt %d t '%s layer %d'", lines++ ? ", " : "",
                          r->variant_key[v], 4 + l, lc[v], 1 + l % 5, title[v], l);
        }
        if (lines == 0) tb_printf(&g, "0 t 'no lambda recorded'");
        tb_printf(&g, "\n");
    }
    tb_printf(&g, "set output 'grad_norm.png.tmp'\nset title 'Gradient norm before clipping (first run)'\nset ylabel "
                  "'norm'\nplot ");
    for (int v = 0; v < r->n_variants; v++)
        tb_printf(&g, "%s'metrics_%s.dat' u 1:3 w l lc %s t '%s'", v ? ", " : "", r->variant_key[v], lc[v], title[v]);
    tb_printf(&g, "\nset output 'quantisation.png.tmp'\nset title 'Held-out loss vs attention-logit bits (32 = fp32), "
                  "mean over runs'\nset xlabel 'bits'\nset ylabel 'loss'\nset logscale x 2\nplot ");
    for (int v = 0; v < r->n_variants; v++)
        tb_printf(&g, "%s'quant_%s.dat' u 1:2 w lp lc %s pt 7 t '%s'", v ? ", " : "", r->variant_key[v], lc[v], title[v]);
    tb_printf(&g, "\nunset logscale x\nset output 'outliers.png.tmp'\nset title 'Largest activations (|x|, log scale), "
                  "mean over runs'\nset xlabel ''\nset ylabel '|x|'\nset logscale y\nset style data histograms\n"
                  "set style histogram clustered\nset style fill solid 0.8\nset boxwidth 0.9\nplot ");
    for (int v = 0; v < r->n_variants; v++)
        tb_printf(&g, "%s'outliers.dat' u %d%s lc %s t '%s'", v ? ", " : "", 2 + v, v ? "" : ":xtic(1)", lc[v], title[v]);
    tb_printf(&g, "\nunset logscale y\nset style data lines\n");
    if (proto) {
        tb_printf(&g, "set output 'loss_by_position.png.tmp'\nset title 'Loss by position in the context (solid: "
                      "held-out, dashed: training text; mean over runs)'\nset xlabel 'position'\nset ylabel 'loss'\nplot ");
        for (int v = 0; v < r->n_variants; v++)
            tb_printf(&g, "%s'position.dat' u 1:%d w lp lc %s pt 7 t '%s held-out', 'position.dat' u 1:%d w lp lc %s dt 2 "
                          "pt 6 t '%s training'", v ? ", " : "", 2 + 2 * v, lc[v], title[v], 3 + 2 * v, lc[v], title[v]);
        tb_printf(&g, "\nset output 'sink_mass.png.tmp'\nset title 'Attention-sink mass on the first token (solid: "
                      "head maps, dashed: first softmax map; mean over runs)'\nset xlabel 'layer'\nset ylabel "
                      "'mean weight on position 0'\nset xtics 1\nplot ");
        for (int v = 0; v < r->n_variants; v++)
            tb_printf(&g, "%s'layers.dat' u 1:%d w lp lc %s pt 7 t '%s', 'layers.dat' u 1:%d w lp lc %s dt 2 pt 6 t '%s "
                          "first map'", v ? ", " : "", 2 + 3 * v, lc[v], title[v], 3 + 3 * v, lc[v], title[v]);
        tb_printf(&g, "\nset output 'head_rms.png.tmp'\nset title 'Head-context RMS before the norm (mean over heads "
                      "and runs)'\nset ylabel 'RMS'\nplot ");
        for (int v = 0; v < r->n_variants; v++)
            tb_printf(&g, "%s'layers.dat' u 1:%d w lp lc %s pt 7 t '%s'", v ? ", " : "", 4 + 3 * v, lc[v], title[v]);
        tb_printf(&g, "\nset xtics autofreq\n");
    }
    for (int k = 0; k < DT_N_TASKS; k++) {
        if (!(r->tasks & (1 << k))) continue;
        tb_printf(&g, "set output 'curve_%s.png.tmp'\nset title '%s task accuracy during training (mean over %d "
                      "run(s))'\nset xlabel 'step'\nset ylabel 'accuracy'\nset yrange [0:1]\nset key bottom right\nplot ",
                  dt_task_name((dt_task_kind)k), dt_task_name((dt_task_kind)k), r->n_seeds);
        for (int v = 0; v < r->n_variants; v++)
            tb_printf(&g, "%s'curve_%s.dat' u 1:%d w lp lc %s pt 7 t '%s'", v ? ", " : "", dt_task_name((dt_task_kind)k), 2 + v,
                      lc[v], title[v]);
        tb_printf(&g, "\nset autoscale y\nset key top right\n");
    }
    tb_printf(&g, "unset output\n");
    return write_dat(plots, "plots.gp", &g, err);
}

int pl_write(const rp_report *r, const char *out_dir, char *note, size_t note_n, dt_error *err) {
    char plots[4200];
    if (dt_pathf(plots, sizeof plots, err, "%s/plots", out_dir)) return -1;
    if (dir_ensure(plots, err) != 0) return -1;
    const int gnuplot = have_gnuplot();
    const int cairo = gnuplot && system("gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1") == 0;
    if (write_data(r, plots, cairo, err) != 0) return -1;
    const char *names[16];
    int n = pl_names(r, names, 16);
    return pl_run_gnuplot(plots, names, n, note, note_n, err);
}
