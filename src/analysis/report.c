/* report.c — collects the analyses of analyze.h for two models and writes the comparison report.
 * See report.h. Conventions of the written files:
 *   REPORT.md     the command line and seed first, then one table per measurement with the columns
 *                 "paper DIFF | paper Transformer | ours DIFF | ours Transformer" ("—" where the paper
 *                 has no figure), each followed by one plain sentence naming the model that did better
 *                 on our data (lower is better for losses, outliers, spikes; higher for accuracy and
 *                 answer share), worded the same way whichever model it is.
 *   report.json   every number the tables show, plus per-layer and per-cell details.
 *   plots/        NAME.dat data, plots.gp script, NAME.png (gnuplot writes NAME.png.tmp; renamed here).
 */
#include "analysis/report.h"
#include "analysis/scaling.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- collecting */

void rp_model_free(rp_model *m) {
    free(m->lambda);
    an_training_free(&m->training);
    an_outliers_free(&m->outliers);
    needle_results_free(&m->needle);
    an_allocation_free(&m->allocation);
    icl_result_free(&m->icl);
    memset(m, 0, sizeof *m);
}

int rp_analyze_model(rp_model *out, const char *dir, const char *name, const rp_analysis_options *o, dt_error *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    snprintf(out->dir, sizeof out->dir, "%s", dir);
    if (o->n_bits < 0 || o->n_bits > RP_MAX_BITS) return dt_fail(err, "report: %d bit widths (at most %d)", o->n_bits, RP_MAX_BITS);
    dt_model m;
    if (dt_model_load(&m, dir, err) != 0) return -1;
    out->cfg = m.cfg;
    out->n_params = m.n_params;
    const int L = m.cfg.num_hidden_layers;
    int rc = 0;
    if (m.cfg.arch == DT_ARCH_DIFF) {
        out->lambda = calloc((size_t)L, sizeof *out->lambda);
        if (!out->lambda) rc = dt_fail(err, "%s: out of memory", dir);
        for (int l = 0; l < L && rc == 0; l++) out->lambda[l] = dt_model_lambda(&m, l);
    }
    if (rc == 0 && !o->quiet) fprintf(stderr, "compare: %s: training statistics\n", name);
    if (rc == 0) rc = an_training_load(dir, &out->training, err);
    if (rc == 0 && !o->quiet) fprintf(stderr, "compare: %s: outliers (%d window(s) of %d bytes)\n", name, o->windows, o->seq);
    if (rc == 0) rc = an_outliers_run(&m, o->tokens, o->n, o->seq, o->windows, &out->outliers, err);
    if (rc == 0 && !o->quiet) fprintf(stderr, "compare: %s: attention-logit quantisation\n", name);
    for (int b = 0; b <= o->n_bits && rc == 0; b++) {
        an_quant_row *q = &out->quant[b];
        q->bits = b == 0 ? 0 : o->bits[b - 1];
        q->needle_total = q->needle_correct = -1;
        dt_run_options ro = {.kernel = DT_ATTENTION_REFERENCE, .logit_bits = q->bits};
        rc = an_eval_text(&m, &ro, o->tokens, o->n, o->seq, o->windows, &q->loss, &q->accuracy, &q->count, err);
        if (rc == 0 && o->needle)
            rc = an_needle_exact(&m, &ro, o->needle, o->allocation_samples, &q->needle_correct, &q->needle_total, err);
        if (rc == 0) out->n_quant = b + 1;
    }
    if (rc == 0 && o->needle) {
        out->have_needle = 1;
        if (!o->quiet) fprintf(stderr, "compare: %s: needle retrieval (greedy) and attention allocation\n", name);
        rc = needle_eval(&m, o->needle, &out->needle, NULL, NULL, err);
        if (rc == 0) rc = an_allocation_run(&m, o->needle, o->allocation_samples, &out->allocation, err);
    }
    if (rc == 0) {
        /* as many demonstrations (up to 8) as the model's context holds */
        icl_params_default(&out->icl_setup);
        while (out->icl_setup.shots > 2 && out->icl_setup.shots * 28 + 26 > m.cfg.max_position_embeddings)
            out->icl_setup.shots -= 2;
        if (!o->quiet)
            fprintf(stderr, "compare: %s: in-context classification, %d orders of %d examples\n", name,
                    out->icl_setup.permutations, out->icl_setup.shots);
        rc = icl_run(&m, &out->icl_setup, &out->icl, err);
    }
    dt_model_free(&m);
    if (rc != 0) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        rp_model_free(out);
        return dt_fail(err, "%s (%s): %s", dir, name, msg);
    }
    return 0;
}

/* ---------------------------------------------------------------- small helpers */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && (size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n <= (size_t)k) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
}

static int write_file(const char *path, const char *text, size_t len, dt_error *err) {
    dt_atomic_file f;
    if (dt_atomic_open(&f, path, err) != 0) return -1;
    if (fwrite(text, 1, len, (FILE *)f.fp) != len) {
        dt_atomic_abort(&f);
        return dt_fail(err, "%s: write failed: %s", path, strerror(errno));
    }
    return dt_atomic_commit(&f, err);
}

static int write_sb(const char *path, sbuf *b, dt_error *err) {
    if (b->oom) return dt_fail(err, "%s: out of memory building the text", path);
    return write_file(path, b->s ? b->s : "", b->n, err);
}

/* "1.234" or "—" for NaN */
static const char *num(char *buf, size_t n, double v, const char *fmt) {
    if (isnan(v))
        snprintf(buf, n, "—");
    else
        snprintf(buf, n, fmt, v);
    return buf;
}

/* The verdict sentence: same words whichever model wins. */
static void verdict(sbuf *b, const char *what, double d, double t, int lower_better) {
    if (isnan(d) || isnan(t)) {
        sb_printf(b, "\nOn our data, %s could not be compared (a value is missing).\n\n", what);
        return;
    }
    if (d == t) {
        sb_printf(b, "\nOn our data, both models had the same %s (%.4g).\n\n", what, d);
        return;
    }
    int diff_wins = lower_better ? d < t : d > t;
    const char *w = diff_wins ? "DIFF" : "Transformer", *l = diff_wins ? "Transformer" : "DIFF";
    double vw = diff_wins ? d : t, vl = diff_wins ? t : d;
    sb_printf(b, "\nOn our data, %s did better on %s: %.4g against %.4g for %s (%s is better).\n\n", w, what, vw, vl, l,
              lower_better ? "lower" : "higher");
}

static void table_head(sbuf *b, const char *first) {
    sb_printf(b, "| %s | paper DIFF | paper Transformer | ours DIFF | ours Transformer |\n", first);
    sb_printf(b, "| --- | --- | --- | --- | --- |\n");
}

static void row(sbuf *b, const char *label, const char *pd, const char *pt, double d, double t, const char *fmt) {
    char x[64], y[64];
    sb_printf(b, "| %s | %s | %s | %s | %s |\n", label, pd, pt, num(x, sizeof x, d, fmt), num(y, sizeof y, t, fmt));
}

/* "fp32" for the unquantised row, else the bit width */
static void bits_label(char *out, size_t n, int bits) {
    if (bits) snprintf(out, n, "%d", bits);
    else snprintf(out, n, "fp32");
}

static const an_quant_row *quant_row(const rp_model *m, int bits) {
    for (int i = 0; i < m->n_quant; i++)
        if (m->quant[i].bits == bits) return &m->quant[i];
    return NULL;
}

/* ---------------------------------------------------------------- plots */

static int have_gnuplot(void) { return system("command -v gnuplot >/dev/null 2>&1") == 0; }

/* metrics.jsonl → DIR/metrics_NAME.dat (step train grad_norm λ...) and DIR/val_NAME.dat (step val). */
static int metrics_dat(const rp_model *m, const char *plots, int *n_lambda, dt_error *err) {
    char path[4200], mpath[4400], vpath[4400];
    snprintf(path, sizeof path, "%s/metrics.jsonl", m->dir);
    snprintf(mpath, sizeof mpath, "%s/metrics_%s.dat", plots, m->name);
    snprintf(vpath, sizeof vpath, "%s/val_%s.dat", plots, m->name);
    FILE *f = fopen(path, "r");
    if (!f) return dt_fail(err, "%s: cannot open: %s", path, strerror(errno));
    sbuf a = {0}, v = {0};
    char line[65536];
    *n_lambda = 0;
    sb_printf(&a, "# step train_loss grad_norm lambda_0..\n");
    sb_printf(&v, "# step val_loss\n");
    while (fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        cJSON *st = cJSON_GetObjectItem(j, "step"), *tl = cJSON_GetObjectItem(j, "train_loss"),
              *gn = cJSON_GetObjectItem(j, "grad_norm"), *vl = cJSON_GetObjectItem(j, "val_loss"),
              *lam = cJSON_GetObjectItem(j, "lambda");
        if (cJSON_IsNumber(st) && cJSON_IsNumber(tl) && cJSON_IsNumber(gn)) {
            sb_printf(&a, "%d %.6g %.6g", st->valueint, tl->valuedouble, gn->valuedouble);
            int k = 0;
            cJSON *e;
            cJSON_ArrayForEach(e, lam) {
                if (cJSON_IsNumber(e)) sb_printf(&a, " %.6g", e->valuedouble), k++;
            }
            *n_lambda = k;
            sb_printf(&a, "\n");
            if (cJSON_IsNumber(vl)) sb_printf(&v, "%d %.6g\n", st->valueint, vl->valuedouble);
        }
        cJSON_Delete(j);
    }
    fclose(f);
    int rc = write_sb(mpath, &a, err);
    if (rc == 0) rc = write_sb(vpath, &v, err);
    free(a.s);
    free(v.s);
    return rc;
}

static const char *plot_names[] = {"loss", "lambda", "grad_norm", "quantisation", "outliers"};
#define N_PLOTS 5

/* Returns 1 when the PNGs were made, 0 when gnuplot failed (note says why), -1 on a write error. */
static int make_plots(const rp_report *r, const char *out_dir, char *note, size_t note_n, dt_error *err) {
    char plots[4200], path[4300];
    snprintf(plots, sizeof plots, "%s/plots", out_dir);
    if (mkdir(plots, 0755) != 0 && errno != EEXIST) return dt_fail(err, "%s: cannot create: %s", plots, strerror(errno));
    const rp_model *ms[2] = {r->diff, r->base};
    int nlam[2] = {0, 0};
    for (int i = 0; i < 2; i++)
        if (metrics_dat(ms[i], plots, &nlam[i], err) != 0) return -1;
    /* quantisation: bits loss (unquantised as bits 32) */
    for (int i = 0; i < 2; i++) {
        sbuf q = {0};
        sb_printf(&q, "# bits loss (32 = unquantised fp32)\n");
        for (int b = ms[i]->n_quant - 1; b >= 0; b--)
            if (ms[i]->quant[b].bits) sb_printf(&q, "%d %.6g\n", ms[i]->quant[b].bits, ms[i]->quant[b].loss);
        if (ms[i]->n_quant) sb_printf(&q, "32 %.6g\n", ms[i]->quant[0].loss);
        snprintf(path, sizeof path, "%s/quant_%s.dat", plots, ms[i]->name);
        int rc = write_sb(path, &q, err);
        free(q.s);
        if (rc) return -1;
    }
    sbuf o = {0};
    sb_printf(&o, "# measure DIFF Transformer\n");
    sb_printf(&o, "\"logit top-1\" %.6g %.6g\n", r->diff->outliers.logits.top1, r->base->outliers.logits.top1);
    sb_printf(&o, "\"logit top-10\" %.6g %.6g\n", r->diff->outliers.logits.top10, r->base->outliers.logits.top10);
    sb_printf(&o, "\"hidden top-1\" %.6g %.6g\n", r->diff->outliers.hidden.top1, r->base->outliers.hidden.top1);
    sb_printf(&o, "\"hidden top-10\" %.6g %.6g\n", r->diff->outliers.hidden.top10, r->base->outliers.hidden.top10);
    snprintf(path, sizeof path, "%s/outliers.dat", plots);
    int rc = write_sb(path, &o, err);
    free(o.s);
    if (rc) return -1;

    int cairo = system("gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1") == 0;
    sbuf g = {0};
    sb_printf(&g, "# plots.gp — run from this directory: gnuplot plots.gp\n");
    sb_printf(&g, "set terminal %s size 900,540\nset grid\nset key top right\n", cairo ? "pngcairo" : "png");
    sb_printf(&g, "set output 'loss.png.tmp'\nset title 'Loss (nats/byte)'\nset xlabel 'step'\nset ylabel 'loss'\n"
                  "plot 'metrics_DIFF.dat' u 1:2 w l lc 1 t 'DIFF train', 'metrics_Transformer.dat' u 1:2 w l lc 2 "
                  "t 'Transformer train', 'val_DIFF.dat' u 1:2 w lp lc 1 dt 2 pt 7 t 'DIFF val', "
                  "'val_Transformer.dat' u 1:2 w lp lc 2 dt 2 pt 7 t 'Transformer val'\n");
    sb_printf(&g, "set output 'lambda.png.tmp'\nset title 'lambda per layer (DIFF)'\nset ylabel 'lambda'\nplot ");
    for (int l = 0; l < nlam[0]; l++) sb_printf(&g, "%s'metrics_DIFF.dat' u 1:%d w l t 'layer %d'", l ? ", " : "", 4 + l, l);
    if (nlam[0] == 0) sb_printf(&g, "0 t 'no lambda recorded'");
    sb_printf(&g, "\n");
    sb_printf(&g, "set output 'grad_norm.png.tmp'\nset title 'Gradient norm (before clipping)'\nset ylabel 'norm'\n"
                  "plot 'metrics_DIFF.dat' u 1:3 w l lc 1 t 'DIFF', 'metrics_Transformer.dat' u 1:3 w l lc 2 t "
                  "'Transformer'\n");
    sb_printf(&g, "set output 'quantisation.png.tmp'\nset title 'Held-out loss vs attention-logit bits (32 = fp32)'\n"
                  "set xlabel 'bits'\nset ylabel 'loss'\nset logscale x 2\n"
                  "plot 'quant_DIFF.dat' u 1:2 w lp lc 1 pt 7 t 'DIFF', 'quant_Transformer.dat' u 1:2 w lp lc 2 pt 7 "
                  "t 'Transformer'\nunset logscale x\n");
    sb_printf(&g, "set output 'outliers.png.tmp'\nset title 'Largest activations (|x|, log scale)'\nset xlabel ''\n"
                  "set ylabel '|x|'\nset logscale y\nset style data histograms\nset style histogram clustered\n"
                  "set style fill solid 0.8\nset boxwidth 0.9\n"
                  "plot 'outliers.dat' u 2:xtic(1) lc 1 t 'DIFF', '' u 3 lc 2 t 'Transformer'\nunset output\n");
    snprintf(path, sizeof path, "%s/plots.gp", plots);
    rc = write_sb(path, &g, err);
    free(g.s);
    if (rc) return -1;

    /* single-quote the directory for the shell */
    sbuf c = {0};
    sb_printf(&c, "cd '");
    for (const char *p = plots; *p; p++)
        if (*p == '\'')
            sb_printf(&c, "'\\''");
        else
            sb_printf(&c, "%c", *p);
    sb_printf(&c, "' && gnuplot plots.gp >gnuplot.log 2>&1");
    int st = c.oom ? -1 : system(c.s);
    free(c.s);
    if (st != 0) {
        snprintf(note, note_n, "gnuplot failed (status %d); see %s/gnuplot.log — plots skipped", st, plots);
        return 0;
    }
    for (int i = 0; i < N_PLOTS; i++) {
        char tmp[4400], fin[4400];
        snprintf(tmp, sizeof tmp, "%s/%s.png.tmp", plots, plot_names[i]);
        snprintf(fin, sizeof fin, "%s/%s.png", plots, plot_names[i]);
        if (rename(tmp, fin) != 0) {
            snprintf(note, note_n, "gnuplot did not write %s (%s) — plots skipped", tmp, strerror(errno));
            return 0;
        }
    }
    return 1;
}

/* ---------------------------------------------------------------- REPORT.md */

static void markdown(sbuf *b, const rp_report *r, int plots, const char *plot_note) {
    const rp_model *d = r->diff, *t = r->base;
    sb_printf(b, "# DIFF Transformer vs parameter-matched Transformer\n\n");
    sb_printf(b, "Reproduce this report with:\n\n```\n%s\n```\n\nseed: %llu\n\n", r->command,
              (unsigned long long)r->seed);
    sb_printf(b, "## Setup\n\n");
    sb_printf(b, "- data: `%s`; trained on `%s`\n", r->data, r->train_text);
    sb_printf(b, "- preset `%s`: DIFF (`%s`, %zu parameters, %d differential heads of width %d) vs Transformer "
                 "(`%s`, %zu parameters, %d heads of width %d); %d layers, hidden size %d\n",
              r->preset, d->dir, d->n_params, d->cfg.num_attention_heads / 2, 2 * d->cfg.head_dim, t->dir,
              t->n_params, t->cfg.num_attention_heads, t->cfg.head_dim, d->cfg.num_hidden_layers, d->cfg.hidden_size);
    sb_printf(b, "- same data, seed and token budget: %d steps × batch %d × %d bytes = %lld training tokens each\n",
              r->steps, r->batch, r->seq, (long long)r->steps * r->batch * r->seq);
    sb_printf(b, "- outliers and quantisation: the held-out tail of the training text (the validation split, %zu "
                 "bytes), %d window(s) of %d bytes\n",
              r->heldout_bytes, r->windows, r->seq);
    if (r->needle_dir)
        sb_printf(b, "- needle set: `%s` (context %d bytes, %d needles, %d queries); its train.txt was appended to "
                     "the training text\n",
                  r->needle_dir, r->needle_context, r->needle_needles, r->needle_queries);
    sb_printf(b, "- the paper's figures come from models of up to billions of parameters trained on up to 1T tokens; "
                 "ours are tiny byte-level models, so the columns are not expected to agree in size, only perhaps "
                 "in direction\n\n");

    sb_printf(b, "## Final losses\n\n");
    table_head(b, "measure");
    row(b, "final train loss (nats/byte)", "—", "—", d->training.final_train_loss, t->training.final_train_loss, "%.4f");
    row(b, "final validation loss (nats/byte)", "—", "—", d->training.final_val_loss, t->training.final_val_loss, "%.4f");
    if (d->n_quant && t->n_quant) {
        row(b, "held-out loss, fp32 attention (nats/byte)", "—", "—", d->quant[0].loss, t->quant[0].loss, "%.4f");
        row(b, "held-out next-byte accuracy", "—", "—", d->quant[0].accuracy, t->quant[0].accuracy, "%.4f");
    }
    verdict(b, "the final validation loss", d->training.final_val_loss, t->training.final_val_loss, 1);

    sb_printf(b, "## λ per layer (DIFF)\n\n");
    sb_printf(b, "| layer | λinit | first logged | final | min | max |\n| --- | --- | --- | --- | --- | --- |\n");
    for (int l = 0; l < d->cfg.num_hidden_layers; l++) {
        int has = l < d->training.n_layers;
        char a[64], c[64], e[64], f[64];
        sb_printf(b, "| %d | %.4f | %s | %s | %s | %s |\n", l, (double)dt_lambda_init(l),
                  num(a, sizeof a, has ? d->training.lambda_first[l] : NAN, "%.4f"),
                  num(c, sizeof c, d->lambda ? d->lambda[l] : NAN, "%.4f"),
                  num(e, sizeof e, has ? d->training.lambda_min[l] : NAN, "%.4f"),
                  num(f, sizeof f, has ? d->training.lambda_max[l] : NAN, "%.4f"));
    }
    sb_printf(b, "\nλ exists only in the DIFF model, so this table compares neither model with the other; the paper "
                 "reports no λ values.\n\n");

    sb_printf(b, "## Activation outliers\n\n");
    table_head(b, "measure");
    row(b, "largest attention logit", "38.8", "318.0", d->outliers.logits.top1, t->outliers.logits.top1, "%.4g");
    row(b, "10th largest attention logit", "—", "—", d->outliers.logits.top10, t->outliers.logits.top10, "%.4g");
    row(b, "median \\|attention logit\\|", "—", "—", d->outliers.logits.median, t->outliers.logits.median, "%.4g");
    row(b, "largest hidden-state activation", "1,688", "3,609", d->outliers.hidden.top1, t->outliers.hidden.top1, "%.4g");
    row(b, "10th largest hidden-state activation", "—", "—", d->outliers.hidden.top10, t->outliers.hidden.top10, "%.4g");
    row(b, "median \\|hidden state\\|", "—", "—", d->outliers.hidden.median, t->outliers.hidden.median, "%.4g");
    verdict(b, "the largest attention logit", d->outliers.logits.top1, t->outliers.logits.top1, 1);
    verdict(b, "the largest hidden-state activation", d->outliers.hidden.top1, t->outliers.hidden.top1, 1);

    sb_printf(b, "## Attention-logit quantisation\n\n");
    sb_printf(b, "Held-out loss (nats/byte) with the attention logits fake-quantised (symmetric, absmax per head "
                 "map) before the softmax.\n\n");
    table_head(b, "bits");
    for (int i = 0; i < d->n_quant; i++) {
        const an_quant_row *qd = &d->quant[i], *qt = quant_row(t, qd->bits);
        char label[32];
        bits_label(label, sizeof label, qd->bits);
        const char *pd = qd->bits == 4 ? "≈ Transformer at 6 bits" : "—";
        const char *pt = qd->bits == 4 ? "drops sharply from 6 bits down" : "—";
        row(b, label, pd, pt, qd->loss, qt ? qt->loss : NAN, "%.4f");
    }
    {
        const an_quant_row *d4 = quant_row(d, 4), *t4 = quant_row(t, 4), *t6 = quant_row(t, 6);
        if (d4 && t4 && d->n_quant && t->n_quant) {
            verdict(b, "the loss increase at 4 bits over fp32", d4->loss - d->quant[0].loss, t4->loss - t->quant[0].loss, 1);
            if (t6)
                sb_printf(b, "The paper's comparison: DIFF at 4 bits %.4f, Transformer at 6 bits %.4f.\n\n", d4->loss,
                          t6->loss);
        } else
            sb_printf(b, "\n4 bits was not among the measured widths, so no model is named here.\n\n");
    }

    if (d->n_quant && t->n_quant && d->quant[0].needle_total > 0 && t->quant[0].needle_total > 0) {
        sb_printf(b, "Needle exact match (teacher-forced) with the same quantisation:\n\n");
        table_head(b, "bits");
        for (int i = 0; i < d->n_quant; i++) {
            const an_quant_row *qd = &d->quant[i], *qt = quant_row(t, qd->bits);
            char label[32];
            bits_label(label, sizeof label, qd->bits);
            row(b, label, "—", "—", (double)qd->needle_correct / qd->needle_total,
                qt && qt->needle_total > 0 ? (double)qt->needle_correct / qt->needle_total : NAN, "%.3f");
        }
        const an_quant_row *d4 = quant_row(d, 4), *t4 = quant_row(t, 4);
        if (d4 && t4 && t4->needle_total > 0)
            verdict(b, "needle exact match at 4 bits", (double)d4->needle_correct / d4->needle_total,
                    (double)t4->needle_correct / t4->needle_total, 0);
    }

    sb_printf(b, "## In-context learning and the order of the examples\n\n");
    sb_printf(b, "A synthetic task (words starting a–m are \"red\", n–z \"blue\"; chance 0.5): the same %d "
                 "demonstrations in %d orders, %d queries each (`difftrans analyze icl`).\n\n",
              d->icl_setup.shots, d->icl_setup.permutations, d->icl_setup.queries);
    table_head(b, "measure");
    row(b, "mean accuracy over orders", "—", "—", d->icl.mean, t->icl.mean, "%.3f");
    row(b, "std of accuracy over orders", "much smaller", "larger", d->icl.std, t->icl.std, "%.3f");
    row(b, "max − min over orders", "—", "—", d->icl.max - d->icl.min, t->icl.max - t->icl.min, "%.3f");
    verdict(b, "in-context accuracy", d->icl.mean, t->icl.mean, 0);

    if (r->n_sizes >= 2) {
        double px[RP_MAX_SIZES], ly[RP_MAX_SIZES];
        sc_fit fit[2];
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < r->n_sizes; i++) px[i] = r->size_params[i][k], ly[i] = r->size_loss[i][k];
            fit[k] = sc_fit_power_law(px, ly, r->n_sizes);
        }
        int big = 0;
        for (int i = 1; i < r->n_sizes; i++)
            if (r->size_params[i][1] > r->size_params[big][1]) big = i;
        double need = sc_params_for_loss(&fit[0], r->size_loss[big][1]), fraction = need / r->size_params[big][1];
        sb_printf(b, "## Loss against model size\n\n");
        sb_printf(b, "Both kinds at %d sizes with the same data, seed and token budget; log(final validation loss) = "
                     "a + b·log(parameters) fitted per kind.\n\n",
                  r->n_sizes);
        sb_printf(b, "| preset | DIFF parameters | Transformer parameters | DIFF val loss | Transformer val loss |\n");
        sb_printf(b, "| --- | --- | --- | --- | --- |\n");
        for (int i = 0; i < r->n_sizes; i++) {
            char x[64], y[64];
            sb_printf(b, "| %s | %.0f | %.0f | %s | %s |\n", r->size_names[i], r->size_params[i][0],
                      r->size_params[i][1], num(x, sizeof x, r->size_loss[i][0], "%.4f"),
                      num(y, sizeof y, r->size_loss[i][1], "%.4f"));
        }
        sb_printf(b, "\n");
        table_head(b, "measure");
        row(b, "fitted exponent b", "—", "—", fit[0].b, fit[1].b, "%.4f");
        row(b, "DIFF parameters for the Transformer's loss at its largest size, as a fraction", "~0.65", "1",
            fraction, 1.0, "%.3f");
        if (isnan(fraction))
            sb_printf(b, "\nOn our data the DIFF fit cannot reach the Transformer's loss (its loss does not fall with "
                         "size, or a value is missing), so no fraction is given.\n\n");
        else
            verdict(b, "parameters needed for the Transformer's loss (as a fraction of the Transformer's)", fraction,
                    1.0, 1);
    }

    sb_printf(b, "## Training dynamics\n\n");
    table_head(b, "measure");
    row(b, "gradient norm mean", "—", "—", d->training.gn_mean, t->training.gn_mean, "%.4g");
    row(b, "gradient norm std", "—", "—", d->training.gn_std, t->training.gn_std, "%.4g");
    row(b, "gradient norm max", "—", "—", d->training.gn_max, t->training.gn_max, "%.4g");
    row(b, "gradient-norm spikes", "—", "—", d->training.spikes, t->training.spikes, "%.0f");
    verdict(b, "the largest gradient norm", d->training.gn_max, t->training.gn_max, 1);

    if (d->have_needle && t->have_needle) {
        double ad = d->needle.total ? (double)d->needle.correct / d->needle.total : NAN;
        double at = t->needle.total ? (double)t->needle.correct / t->needle.total : NAN;
        sb_printf(b, "## Multi-needle retrieval\n\n");
        sb_printf(b, "Greedy exact match of every queried value. The paper's figure is for 4K contexts with 6 needles "
                     "and 2 queries; ours uses %d-byte contexts, %d needles, %d %s.\n\n",
                  r->needle_context, r->needle_needles, r->needle_queries, r->needle_queries == 1 ? "query" : "queries");
        table_head(b, "measure");
        row(b, "exact-match accuracy, all queries", "0.85", "0.55", ad, at, "%.3f");
        for (int c = 0; c < d->needle.n_cells && c < t->needle.n_cells; c++) {
            const needle_cell *cd = &d->needle.cells[c], *ct = &t->needle.cells[c];
            char label[96];
            snprintf(label, sizeof label, "context %d, depth %.2f", cd->context_length, cd->depth);
            row(b, label, "—", "—", cd->n ? (double)cd->correct / cd->n : NAN, ct->n ? (double)ct->correct / ct->n : NAN,
                "%.3f");
        }
        verdict(b, "needle exact-match accuracy", ad, at, 0);

        sb_printf(b, "## Attention allocation on retrieval\n\n");
        sb_printf(b, "Attention of the position predicting the first answer byte; w = A (Transformer) or A1 − λ·A2 "
                     "(DIFF). answer share = Σ w over the answer span / Σ |w| over the context; noise share = Σ |w| "
                     "over the rest of the context / Σ |w| over the context.\n\n");
        table_head(b, "measure");
        row(b, "answer share (mean over layers)", "0.27–0.40", "0.03–0.09", d->allocation.mean_answer_share,
            t->allocation.mean_answer_share, "%.4f");
        row(b, "noise share (mean over layers)", "—", "—", d->allocation.mean_noise_share,
            t->allocation.mean_noise_share, "%.4f");
        for (int l = 0; l < d->allocation.n_layers && l < t->allocation.n_layers; l++) {
            char label[64];
            snprintf(label, sizeof label, "answer share, layer %d", l);
            row(b, label, "—", "—", d->allocation.answer_share[l], t->allocation.answer_share[l], "%.4f");
        }
        verdict(b, "the answer share", d->allocation.mean_answer_share, t->allocation.mean_answer_share, 0);
    } else {
        sb_printf(b, "## Retrieval\n\nNo needle set (run with `--needle`): multi-needle accuracy (paper 0.85 vs "
                     "0.55) and attention allocation (paper 0.27–0.40 vs 0.03–0.09) were not measured.\n\n");
    }

    sb_printf(b, "## Plots\n\n");
    if (plots == 1) {
        for (int i = 0; i < N_PLOTS; i++) sb_printf(b, "![%s](plots/%s.png)\n\n", plot_names[i], plot_names[i]);
    } else
        sb_printf(b, "%s\n\n", plot_note);
    sb_printf(b, "All raw numbers: `report.json`.\n");
}

/* ---------------------------------------------------------------- report.json */

static void add_num(cJSON *o, const char *k, double v) {
    if (isnan(v))
        cJSON_AddNullToObject(o, k);
    else
        cJSON_AddNumberToObject(o, k, v);
}

static cJSON *model_json(const rp_model *m) {
    cJSON *e = cJSON_CreateObject();
    const int L = m->cfg.num_hidden_layers;
    cJSON_AddStringToObject(e, "name", m->name);
    cJSON_AddStringToObject(e, "dir", m->dir);
    cJSON_AddNumberToObject(e, "parameters", (double)m->n_params);
    cJSON_AddNumberToObject(e, "layers", L);
    cJSON_AddNumberToObject(e, "attention_heads", m->cfg.num_attention_heads);
    cJSON_AddNumberToObject(e, "head_dim", m->cfg.head_dim);
    if (m->lambda) cJSON_AddItemToObject(e, "lambda_final", cJSON_CreateDoubleArray(m->lambda, L));
    cJSON *tr = cJSON_AddObjectToObject(e, "training");
    const an_training *t = &m->training;
    cJSON_AddNumberToObject(tr, "steps_logged", t->n_steps);
    add_num(tr, "final_train_loss", t->final_train_loss);
    add_num(tr, "final_val_loss", t->final_val_loss);
    cJSON_AddNumberToObject(tr, "final_val_step", t->final_val_step);
    add_num(tr, "grad_norm_mean", t->gn_mean);
    add_num(tr, "grad_norm_std", t->gn_std);
    add_num(tr, "grad_norm_max", t->gn_max);
    cJSON_AddNumberToObject(tr, "spikes", t->spikes);
    cJSON_AddItemToObject(tr, "spike_steps", cJSON_CreateIntArray(t->spike_steps ? t->spike_steps : (int[]){0}, t->spikes));
    if (t->n_layers > 0 && t->lambda_first) {
        cJSON_AddItemToObject(tr, "lambda_first", cJSON_CreateDoubleArray(t->lambda_first, t->n_layers));
        cJSON_AddItemToObject(tr, "lambda_last", cJSON_CreateDoubleArray(t->lambda_last, t->n_layers));
        cJSON_AddItemToObject(tr, "lambda_min", cJSON_CreateDoubleArray(t->lambda_min, t->n_layers));
        cJSON_AddItemToObject(tr, "lambda_max", cJSON_CreateDoubleArray(t->lambda_max, t->n_layers));
    }
    cJSON *ic = cJSON_AddObjectToObject(e, "icl");
    cJSON_AddNumberToObject(ic, "shots", m->icl_setup.shots);
    cJSON_AddNumberToObject(ic, "queries", m->icl_setup.queries);
    if (m->icl.accuracy) cJSON_AddItemToObject(ic, "accuracy", cJSON_CreateDoubleArray(m->icl.accuracy, m->icl.permutations));
    add_num(ic, "mean", m->icl.mean);
    add_num(ic, "std", m->icl.std);
    cJSON *ou = cJSON_AddObjectToObject(e, "outliers");
    cJSON_AddNumberToObject(ou, "windows", m->outliers.windows);
    cJSON_AddNumberToObject(ou, "seq", m->outliers.seq);
    cJSON_AddItemToObject(ou, "attention_logits", an_abs_stats_json(&m->outliers.logits));
    cJSON_AddItemToObject(ou, "hidden_states", an_abs_stats_json(&m->outliers.hidden));
    if (m->outliers.layer_logit_max) {
        cJSON_AddItemToObject(ou, "layer_logit_max", cJSON_CreateDoubleArray(m->outliers.layer_logit_max, m->outliers.n_layers));
        cJSON_AddItemToObject(ou, "layer_hidden_max",
                              cJSON_CreateDoubleArray(m->outliers.layer_hidden_max, m->outliers.n_layers + 1));
    }
    cJSON *qa = cJSON_AddArrayToObject(e, "quantisation");
    for (int i = 0; i < m->n_quant; i++) {
        const an_quant_row *q = &m->quant[i];
        cJSON *r = cJSON_CreateObject();
        cJSON_AddItemToArray(qa, r);
        cJSON_AddNumberToObject(r, "bits", q->bits);
        add_num(r, "loss", q->loss);
        add_num(r, "accuracy", q->accuracy);
        cJSON_AddNumberToObject(r, "count", (double)q->count);
        if (q->needle_total >= 0) {
            cJSON_AddNumberToObject(r, "needle_correct", q->needle_correct);
            cJSON_AddNumberToObject(r, "needle_total", q->needle_total);
        }
    }
    if (m->have_needle) {
        cJSON *n = cJSON_AddObjectToObject(e, "needle");
        cJSON_AddNumberToObject(n, "correct", m->needle.correct);
        cJSON_AddNumberToObject(n, "total", m->needle.total);
        add_num(n, "accuracy", m->needle.total ? (double)m->needle.correct / m->needle.total : NAN);
        cJSON *cells = cJSON_AddArrayToObject(n, "cells");
        for (int c = 0; c < m->needle.n_cells; c++) {
            const needle_cell *nc = &m->needle.cells[c];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(cells, o);
            cJSON_AddNumberToObject(o, "context_length", nc->context_length);
            cJSON_AddNumberToObject(o, "depth", nc->depth);
            cJSON_AddNumberToObject(o, "samples", nc->samples);
            cJSON_AddNumberToObject(o, "n", nc->n);
            cJSON_AddNumberToObject(o, "correct", nc->correct);
            cJSON_AddNumberToObject(o, "first_correct", nc->first_correct);
        }
        const an_allocation *a = &m->allocation;
        cJSON *al = cJSON_AddObjectToObject(e, "allocation");
        cJSON_AddNumberToObject(al, "heads", a->heads);
        cJSON_AddNumberToObject(al, "samples", a->samples);
        cJSON_AddNumberToObject(al, "rows", a->rows);
        add_num(al, "answer_share", a->mean_answer_share);
        add_num(al, "noise_share", a->mean_noise_share);
        if (a->answer_share) {
            cJSON_AddItemToObject(al, "layer_answer_share", cJSON_CreateDoubleArray(a->answer_share, a->n_layers));
            cJSON_AddItemToObject(al, "layer_noise_share", cJSON_CreateDoubleArray(a->noise_share, a->n_layers));
            cJSON_AddItemToObject(al, "layer_span_sum", cJSON_CreateDoubleArray(a->span, a->n_layers));
            cJSON_AddItemToObject(al, "layer_span_abs_sum", cJSON_CreateDoubleArray(a->span_abs, a->n_layers));
            cJSON_AddItemToObject(al, "layer_context_sum", cJSON_CreateDoubleArray(a->context, a->n_layers));
            cJSON_AddItemToObject(al, "layer_context_abs_sum", cJSON_CreateDoubleArray(a->context_abs, a->n_layers));
            cJSON_AddItemToObject(al, "layer_row_sum", cJSON_CreateDoubleArray(a->row, a->n_layers));
        }
    }
    return e;
}

static cJSON *report_json(const rp_report *r, int plots) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "command", r->command);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->seed);
    cJSON_AddStringToObject(root, "seed", seed); /* a string: JSON numbers lose 64-bit precision */
    cJSON_AddStringToObject(root, "preset", r->preset);
    cJSON_AddStringToObject(root, "data", r->data);
    cJSON_AddStringToObject(root, "train_text", r->train_text);
    cJSON_AddNumberToObject(root, "steps", r->steps);
    cJSON_AddNumberToObject(root, "batch", r->batch);
    cJSON_AddNumberToObject(root, "seq", r->seq);
    cJSON_AddNumberToObject(root, "heldout_bytes", (double)r->heldout_bytes);
    cJSON_AddNumberToObject(root, "windows", r->windows);
    if (r->needle_dir) {
        cJSON *n = cJSON_AddObjectToObject(root, "needle_set");
        cJSON_AddStringToObject(n, "dir", r->needle_dir);
        cJSON_AddNumberToObject(n, "context", r->needle_context);
        cJSON_AddNumberToObject(n, "needles", r->needle_needles);
        cJSON_AddNumberToObject(n, "queries", r->needle_queries);
    } else
        cJSON_AddNullToObject(root, "needle_set");
    cJSON_AddBoolToObject(root, "plots", plots == 1);
    cJSON *p = cJSON_AddObjectToObject(root, "paper");
    cJSON_AddStringToObject(p, "largest_attention_logit", "DIFF 38.8, Transformer 318.0");
    cJSON_AddStringToObject(p, "largest_hidden_activation", "DIFF 1688, Transformer 3609");
    cJSON_AddStringToObject(p, "answer_span_attention", "DIFF 0.27-0.40, Transformer 0.03-0.09");
    cJSON_AddStringToObject(p, "multi_needle_4k_6n_2q", "DIFF 0.85, Transformer 0.55");
    cJSON_AddStringToObject(p, "logit_quantisation", "DIFF at 4 bits ~ Transformer at 6 bits");
    cJSON *ms = cJSON_AddArrayToObject(root, "models");
    cJSON_AddItemToArray(ms, model_json(r->diff));
    cJSON_AddItemToArray(ms, model_json(r->base));
    cJSON *sz = cJSON_AddArrayToObject(root, "sizes"); /* the loss-against-size points */
    for (int i = 0; i < r->n_sizes; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(sz, e);
        cJSON_AddStringToObject(e, "preset", r->size_names[i]);
        cJSON_AddNumberToObject(e, "diff_params", r->size_params[i][0]);
        cJSON_AddNumberToObject(e, "transformer_params", r->size_params[i][1]);
        add_num(e, "diff_val_loss", r->size_loss[i][0]);
        add_num(e, "transformer_val_loss", r->size_loss[i][1]);
    }
    return root;
}

/* ---------------------------------------------------------------- writing */

int rp_write(const rp_report *r, const char *out_dir, dt_error *err) {
    char note[4600], path[4200];
    int plots = 0;
    if (have_gnuplot()) {
        plots = make_plots(r, out_dir, note, sizeof note, err);
        if (plots < 0) return -1;
    } else
        snprintf(note, sizeof note, "gnuplot is not on PATH, so no plots were made (install gnuplot, e.g. the "
                                    "Debian package gnuplot-nox, and rerun the command above).");
    cJSON *root = report_json(r, plots);
    snprintf(path, sizeof path, "%s/report.json", out_dir);
    if (!root) return dt_fail(err, "%s: out of memory building the JSON", path);
    int rc = an_write_json(path, root, err);
    cJSON_Delete(root);
    if (rc) return -1;
    sbuf b = {0};
    markdown(&b, r, plots, note);
    snprintf(path, sizeof path, "%s/REPORT.md", out_dir);
    rc = write_sb(path, &b, err);
    free(b.s);
    return rc;
}
