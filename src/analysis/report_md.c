/* report_md.c — REPORT.md of a comparison (see report.h).
 *
 * Every figure is a mean over the runs of a variant with its 95% confidence interval ("m ± h";
 * one run: the number alone). Each comparison of a variant with the Transformer ends in one
 * sentence that starts "X better" or "No difference this run can resolve", drawn from the 95%
 * interval of the paired difference (over seeds; with one seed, over the examples of a task where
 * those are the unit) and worded the same way whichever model wins. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/plots.h"
#include "analysis/report.h"
#include "difftrans_analysis.h"
#include "analysis/textbuf.h"

/* ---------------------------------------------------------------- measures */

/* A number read from one run; arg selects a layer, a bit width row, a task or a cell. */
typedef double (*getter)(const rp_model *m, int arg);

static double g_final_val(const rp_model *m, int a) { return m->training.final_val_loss; }
static double g_final_bpb(const rp_model *m, int a) { /* nats per token over bytes per token, in bits */
    return m->bytes_per_token > 0 ? m->training.final_val_loss / (M_LN2 * m->bytes_per_token) : NAN;
}
static double g_quant_loss(const rp_model *m, int row) { return row < m->n_quant ? m->quant[row].loss : NAN; }
static double g_quant_acc(const rp_model *m, int row) { return row < m->n_quant ? m->quant[row].accuracy : NAN; }
static double g_quant_delta(const rp_model *m, int row) {
    return row < m->n_quant && m->n_quant ? m->quant[row].loss - m->quant[0].loss : NAN;
}
static double g_quant_needle(const rp_model *m, int row) {
    return row < m->n_quant && m->quant[row].needle_total > 0
               ? (double)m->quant[row].needle_correct / m->quant[row].needle_total
               : NAN;
}
static double g_wq_delta(const rp_model *m, int row) { return row < m->n_wq ? m->wq[row].loss_delta : NAN; }
static double g_wq_kl(const rp_model *m, int row) { return row < m->n_wq ? m->wq[row].kl : NAN; }
static double g_wq_top1(const rp_model *m, int row) { return row < m->n_wq ? m->wq[row].top1_agree : NAN; }
static double g_wq_needle(const rp_model *m, int row) {
    return row < m->n_wq && m->wq[row].needle_total > 0 ? (double)m->wq[row].needle_correct / m->wq[row].needle_total
                                                         : NAN;
}
static double g_lambda(const rp_model *m, int l) { return m->lambda && l < m->cfg.num_hidden_layers ? m->lambda[l] : NAN; }
static double g_logit_top1(const rp_model *m, int a) { return m->outliers.logits.top1; }
static double g_logit_top10(const rp_model *m, int a) { return m->outliers.logits.top10; }
static double g_logit_median(const rp_model *m, int a) { return m->outliers.logits.median; }
static double g_hidden_top1(const rp_model *m, int a) { return m->outliers.hidden.top1; }
static double g_hidden_top10(const rp_model *m, int a) { return m->outliers.hidden.top10; }
static double g_hidden_median(const rp_model *m, int a) { return m->outliers.hidden.median; }
static double g_icl_mean(const rp_model *m, int a) { return m->icl.mean; }
static double g_icl_std(const rp_model *m, int a) { return m->icl.std; }
static double g_icl_range(const rp_model *m, int a) { return m->icl.max - m->icl.min; }
static double g_gn_mean(const rp_model *m, int a) { return m->training.gn_mean; }
static double g_gn_std(const rp_model *m, int a) { return m->training.gn_std; }
static double g_gn_max(const rp_model *m, int a) { return m->training.gn_max; }
static double g_spikes(const rp_model *m, int a) { return m->training.spikes; }
static double g_task(const rp_model *m, int k) { return m->tasks & (1 << k) ? m->task[k].accuracy : NAN; }
static double g_task_cell(const rp_model *m, int kc) {
    int k = kc / DT_TASK_MAX_CELLS, c = kc % DT_TASK_MAX_CELLS;
    return m->tasks & (1 << k) && c < m->task[k].n_cells ? m->task[k].cells[c].accuracy : NAN;
}
static double g_order_std(const rp_model *m, int k) { return m->tasks & (1 << k) ? m->task[k].order_std : NAN; }
static double g_needle(const rp_model *m, int a) {
    return m->have_needle && m->needle.total ? (double)m->needle.correct / m->needle.total : NAN;
}
static double g_needle_cell(const rp_model *m, int c) {
    return m->have_needle && c < m->needle.n_cells && m->needle.cells[c].n
               ? (double)m->needle.cells[c].correct / m->needle.cells[c].n
               : NAN;
}
static double g_answer_share(const rp_model *m, int a) { return m->have_needle ? m->allocation.mean_answer_share : NAN; }
static double g_noise_share(const rp_model *m, int a) { return m->have_needle ? m->allocation.mean_noise_share : NAN; }
static double g_layer_share(const rp_model *m, int l) {
    return m->have_needle && l < m->allocation.n_layers ? m->allocation.answer_share[l] : NAN;
}

/* the reproduction protocol: NAN where it was not run or does not apply */
static double g_p_held(const rp_model *m, int a) { return m->protocol.n_bins ? m->protocol.loss : NAN; }
static double g_p_train(const rp_model *m, int a) { return m->protocol_train.n_bins ? m->protocol_train.loss : NAN; }
static double g_p_gap(const rp_model *m, int a) { return g_p_held(m, a) - g_p_train(m, a); }
static double g_p_bin(const rp_model *m, int k) { return k < m->protocol.n_bins ? m->protocol.bin_loss[k] : NAN; }
static double g_p_bin_train(const rp_model *m, int k) {
    return k < m->protocol_train.n_bins ? m->protocol_train.bin_loss[k] : NAN;
}
static double g_p_bin_gap(const rp_model *m, int k) { return g_p_bin(m, k) - g_p_bin_train(m, k); }
static double layer_of(const double *v, const dt_an_protocol *p, int l) { return v && l < p->n_layers ? v[l] : NAN; }
static double g_sink(const rp_model *m, int l) { return layer_of(m->protocol.sink_mass, &m->protocol, l); }
static double g_sink1(const rp_model *m, int l) { return layer_of(m->protocol.sink_mass_map1, &m->protocol, l); }
static double g_sink2(const rp_model *m, int l) { return layer_of(m->protocol.sink_mass_map2, &m->protocol, l); }
/* layer l's head-context RMS over its heads: 0 the mean, 1 the smallest, 2 the largest */
static double head_rms_stat(const rp_model *m, int l, int which) {
    const dt_an_protocol *p = &m->protocol;
    if (!p->head_rms || l >= p->n_layers || p->n_heads < 1) return NAN;
    const double *x = p->head_rms + (size_t)l * p->n_heads;
    double mean = 0, lo = x[0], hi = x[0];
    for (int j = 0; j < p->n_heads; j++) {
        mean += x[j] / p->n_heads;
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    return which == 0 ? mean : which == 1 ? lo : hi;
}
static double g_rms_mean(const rp_model *m, int l) { return head_rms_stat(m, l, 0); }
static double g_rms_min(const rp_model *m, int l) { return head_rms_stat(m, l, 1); }
static double g_rms_max(const rp_model *m, int l) { return head_rms_stat(m, l, 2); }
/* λ of layer arg % 1024 at the run's λ point arg / 1024 */
static double g_lambda_at(const rp_model *m, int arg) {
    const dt_an_training *t = &m->training;
    const int k = arg / 1024, l = arg % 1024;
    return t->lambda_at && k < t->n_lambda_points && l < t->n_layers ? t->lambda_at[(size_t)k * t->n_layers + l] : NAN;
}

typedef struct {
    const char *label, *paper_diff, *paper_base;
    getter get;
    int arg;
    const char *fmt;
    int lower_better;
    const char *what;  /* non-NULL: a verdict sentence follows the table, about `what` */
    int task;          /* ≥ 0: a task's overall accuracy (examples are the unit when there is one run) */
} measure;

static measure M(const char *label, const char *pd, const char *pt, getter g, int arg, const char *fmt, int lower,
                 const char *what) {
    return (measure){label, pd ? pd : "—", pt ? pt : "—", g, arg, fmt, lower, what, -1};
}

/* Three rows per layer l < L, "layer l: NAME" read by get[i](run, l); returns the rows written. */
static int per_layer_rows(measure *ms, char (*labels)[80], int L, const char *const names[3], const getter get[3],
                          const char *fmt, int lower_better) {
    int n = 0;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 3; i++, n++) {
            snprintf(labels[n], sizeof labels[n], "layer %d: %s", l, names[i]);
            ms[n] = M(labels[n], NULL, NULL, get[i], l, fmt, lower_better, NULL);
        }
    return n;
}

/* ---------------------------------------------------------------- intervals and verdicts */

static dt_stats_interval over_seeds(const rp_report *r, int v, const measure *ms) {
    double x[RP_MAX_SEEDS];
    for (int s = 0; s < r->n_seeds; s++) x[s] = ms->get(rp_run(r, v, s), ms->arg);
    return dt_stats_mean_ci(x, r->n_seeds);
}

/* "m ± h" ("m" with one run); `na` when there is no number */
static const char *cell_na(char *buf, size_t n, const dt_stats_interval *iv, const char *fmt, const char *na) {
    if (isnan(iv->mean)) return snprintf(buf, n, "%s", na), buf;
    char a[48], h[48];
    snprintf(a, sizeof a, fmt, iv->mean);
    if (isnan(iv->half)) return snprintf(buf, n, "%s", a), buf;
    snprintf(h, sizeof h, fmt, iv->half);
    snprintf(buf, n, "%s ± %s", a, h);
    return buf;
}

static const char *cell(char *buf, size_t n, const dt_stats_interval *iv, const char *fmt) {
    return cell_na(buf, n, iv, fmt, "—");
}

/* The paired difference variant − baseline: over seeds, or with one seed over a task's examples. */
static dt_stats_interval paired(const rp_report *r, int v, int b, const measure *ms, char *unit, size_t unit_n) {
    if (r->n_seeds >= 2) {
        double x[RP_MAX_SEEDS], y[RP_MAX_SEEDS];
        for (int s = 0; s < r->n_seeds; s++) x[s] = ms->get(rp_run(r, v, s), ms->arg), y[s] = ms->get(rp_run(r, b, s), ms->arg);
        snprintf(unit, unit_n, "%d paired runs", r->n_seeds);
        return dt_stats_paired_diff_ci(x, y, r->n_seeds);
    }
    const rp_model *a = rp_run(r, v, 0), *c = rp_run(r, b, 0);
    if (ms->task >= 0 && (a->tasks & c->tasks & (1 << ms->task))) {
        const dt_task_result *ta = &a->task[ms->task], *tc = &c->task[ms->task];
        const dt_stats_interval d = dt_task_paired_diff_ci(ta, tc);
        if (d.n > 0) {
            snprintf(unit, unit_n, "%d paired examples of one run each", d.n);
            return d;
        }
    }
    snprintf(unit, unit_n, "one run each, so no interval");
    double x = ms->get(a, ms->arg) - ms->get(c, ms->arg);
    return (dt_stats_interval){isnan(x) ? 0 : 1, x, NAN, NAN, NAN};
}

static void verdict(textbuf *b, const rp_report *r, int v, int base, const measure *ms) {
    const rp_model *mv = rp_run(r, v, 0), *mb = rp_run(r, base, 0);
    char unit[96], x[128], y[128], d[48], lo[48], hi[48];
    dt_stats_interval iv = over_seeds(r, v, ms), ib = over_seeds(r, base, ms);
    dt_stats_interval diff = paired(r, v, base, ms, unit, sizeof unit);
    if (isnan(iv.mean) || isnan(ib.mean)) {
        tb_printf(b, "\nNo difference this run can resolve on %s: a value is missing.\n", ms->what);
        return;
    }
    dt_stats_verdict w = dt_stats_verdict_of(&diff, ms->lower_better);
    cell(x, sizeof x, &iv, ms->fmt);
    cell(y, sizeof y, &ib, ms->fmt);
    snprintf(d, sizeof d, ms->fmt, diff.mean);
    if (w == DT_STATS_UNRESOLVED)
        tb_printf(b, "\nNo difference this run can resolve on %s: %s %s, %s %s", ms->what, mv->name, x, mb->name, y);
    else
        tb_printf(b, "\n%s better on %s: %s against %s for %s", w == DT_STATS_A_BETTER ? mv->name : mb->name, ms->what,
                  w == DT_STATS_A_BETTER ? x : y, w == DT_STATS_A_BETTER ? y : x, w == DT_STATS_A_BETTER ? mb->name : mv->name);
    if (isnan(diff.half))
        tb_printf(b, " (difference %s; %s; %s is better).\n", d, unit, ms->lower_better ? "lower" : "higher");
    else {
        snprintf(lo, sizeof lo, ms->fmt, diff.lo);
        snprintf(hi, sizeof hi, ms->fmt, diff.hi);
        tb_printf(b, " (difference %s, 95%% CI %s to %s, over %s; %s is better).\n", d, lo, hi, unit,
                  ms->lower_better ? "lower" : "higher");
    }
}

/* ---------------------------------------------------------------- tables */

/* A table of measures (rows) by variant (columns), the missing numbers written `na`, then the verdict
 * sentences of the measures that have one. */
static void table_na(textbuf *b, const rp_report *r, const char *first, const measure *ms, int n, const char *na) {
    const int paper = r->diff >= 0 && r->base >= 0;
    tb_printf(b, "| %s |%s", first, paper ? " paper DIFF | paper Transformer |" : "");
    for (int v = 0; v < r->n_variants; v++) tb_printf(b, " %s |", rp_run(r, v, 0)->name);
    tb_printf(b, "\n| --- |%s", paper ? " --- | --- |" : "");
    for (int v = 0; v < r->n_variants; v++) tb_printf(b, " --- |");
    tb_printf(b, "\n");
    for (int i = 0; i < n; i++) {
        tb_printf(b, "| %s |", ms[i].label);
        if (paper) tb_printf(b, " %s | %s |", ms[i].paper_diff, ms[i].paper_base);
        for (int v = 0; v < r->n_variants; v++) {
            char c[128];
            dt_stats_interval iv = over_seeds(r, v, &ms[i]);
            tb_printf(b, " %s |", cell_na(c, sizeof c, &iv, ms[i].fmt, na));
        }
        tb_printf(b, "\n");
    }
    for (int i = 0; i < n; i++) {
        if (!ms[i].what || r->base < 0) continue;
        for (int v = 0; v < r->n_variants; v++)
            if (v != r->base) verdict(b, r, v, r->base, &ms[i]);
    }
    tb_printf(b, "\n");
}

static void table(textbuf *b, const rp_report *r, const char *first, const measure *ms, int n) {
    table_na(b, r, first, ms, n, "—");
}

/* Grid mode: one table per headline measure, the variants as rows with their parameter counts. */
static void measure_table(textbuf *b, const rp_report *r, const measure *ms) {
    tb_printf(b, "### %s\n\n| variant | parameters | mean%s | difference to the Transformer (95%% CI) | verdict |\n"
                 "| --- | --- | --- | --- | --- |\n",
              ms->what, r->n_seeds > 1 ? " ± 95% CI" : "");
    for (int v = 0; v < r->n_variants; v++) {
        char c[128], d[160] = "—", lo[48], hi[48], m[48], unit[96];
        const char *word = "—";
        dt_stats_interval iv = over_seeds(r, v, ms);
        if (r->base >= 0 && v != r->base) {
            dt_stats_interval diff = paired(r, v, r->base, ms, unit, sizeof unit);
            snprintf(m, sizeof m, ms->fmt, diff.mean);
            if (isnan(diff.half)) snprintf(d, sizeof d, "%s", isnan(diff.mean) ? "—" : m);
            else {
                snprintf(lo, sizeof lo, ms->fmt, diff.lo);
                snprintf(hi, sizeof hi, ms->fmt, diff.hi);
                snprintf(d, sizeof d, "%s (%s to %s)", m, lo, hi);
            }
            dt_stats_verdict w = dt_stats_verdict_of(&diff, ms->lower_better);
            word = w == DT_STATS_A_BETTER ? "variant better" : w == DT_STATS_B_BETTER ? "Transformer better" : "no difference resolved";
        }
        tb_printf(b, "| %s | %zu | %s | %s | %s |\n", rp_run(r, v, 0)->name, rp_run(r, v, 0)->n_params,
                  cell(c, sizeof c, &iv, ms->fmt), d, word);
    }
    tb_printf(b, "\n%s is better.\n\n", ms->lower_better ? "Lower" : "Higher");
}

/* ---------------------------------------------------------------- sections */

static const char *task_text[DT_N_TASKS] = {
    "Multi-query associative recall: K pairs `kv ` (key one of the 16 symbols `" DT_TASK_KEY_SYMBOLS "`, digit value) "
    "among distractor items `Xd ` (an uppercase letter and a digit), then `;` and queries `kv `; the value after each "
    "queried key is scored (chance 0.1).",
    "Retrieval at depth: 4 needles `@kv` (key one of the same symbols, which are taken out of the text) in text cut "
    "from the training data, the queried one at the given depth, then `\\n@k`: its value is scored (chance 0.1; copying the value of a random one of the 4 needles, without "
    "matching the key, scores 0.325). Lengths beyond the training length test extrapolation.",
    "In-context classification with labels permuted per prompt: letters a–m are one class and n–z the other; each "
    "prompt draws its own two label letters, so only the demonstrations `x:L ` tell the answer. Scored between the "
    "prompt's two labels (chance 0.5); the same demonstrations in 6 orders."};

static void tasks_section(textbuf *b, const rp_report *r) {
    if (!r->tasks) return;
    tb_printf(b, "## Tasks learned in training\n\n");
    const char *unit = r->task_symbols ? "token" : "byte";
    const int recall = r->tasks & (1 << DT_TASK_RECALL), depth = r->tasks & (1 << DT_TASK_DEPTH),
              icl = r->tasks & (1 << DT_TASK_ICL);
    /* the mix as dt_task_mix_batch draws it: recall and depth rows six times as often as icl rows */
    const char *turn = !icl || !(recall || depth) ? "the tasks in turn"
                       : recall && depth          ? "the tasks in turn, recall and depth six times for each icl row"
                       : recall                   ? "the tasks in turn, recall six times for each icl row"
                                                  : "the tasks in turn, depth six times for each icl row";
    tb_printf(b, "%.0f%% of the training steps were task batches (rows of one task example each, loss on the answers "
                 "only; %s), the others plain text. ",
              100 * r->task_ratio, turn);
    if (recall)
        tb_printf(b, "Recall rows ask a query every 3 %ss to the end of the row (each pair once, then repeats). ",
                  unit);
    if (depth) tb_printf(b, "Depth rows ask 4-%s queries over 3/8 of the row. ", unit);
    if (recall || depth)
        tb_printf(b, "Curriculum: for the first fifth of training %s; %s then grow%s to a full row by three fifths. ",
                  recall && depth ? "recall has no distractors and depth the least text its needles need"
                  : recall        ? "recall has no distractors"
                                  : "depth has the least text its needles need",
                  recall && depth ? "both" : "it", recall && depth ? "" : "s");
    tb_printf(b, "Accuracy is teacher-forced argmax on held-out examples drawn from their own seed.\n\n");
    if (r->task_symbols) {
        const dt_task_symbols *s = r->task_symbols;
        tb_printf(b, "On the BPE vocabulary every symbol of the formats below is one token (the one that stands for "
                     "exactly that character; e.g. space %d, newline %d, `@` %d, `a` %d; report.json lists them all), "
                     "so lengths, positions and answers count tokens; depth's text is the training text's own tokens, "
                     "those holding `@` or a key symbol replaced by the space's token.\n\n",
                  s->id[' '], s->id['\n'], s->id['@'], s->id['a']);
    }
    const rp_model *m0 = rp_run(r, 0, 0);
    char what[DT_N_TASKS][64];
    for (int k = 0; k < DT_N_TASKS; k++) {
        if (!(r->tasks & (1 << k)) || !(m0->tasks & (1 << k))) continue;
        const dt_task_result *t0 = &m0->task[k];
        measure ms[DT_TASK_MAX_CELLS + 2];
        int n = 0;
        char labels[DT_TASK_MAX_CELLS][96];
        ms[n] = M("accuracy, all cells", NULL, NULL, g_task, k, "%.3f", 0, NULL);
        ms[n].task = k;
        snprintf(what[k], sizeof what[k], "%s accuracy", dt_task_name((dt_task_kind)k));
        ms[n++].what = what[k];
        if (k == DT_TASK_ICL)
            ms[n++] = M("std of accuracy over orders", "much smaller", "larger", g_order_std, k, "%.3f", 1,
                        "the spread of icl accuracy over orders");
        for (int c = 0; c < t0->n_cells; c++) {
            const dt_task_cell *tc = &t0->cells[c];
            if (k == DT_TASK_RECALL) snprintf(labels[c], sizeof labels[c], "length %d, K = %d", tc->length, tc->pairs);
            else if (k == DT_TASK_DEPTH) snprintf(labels[c], sizeof labels[c], "length %d, depth %.2f", tc->length, tc->depth);
            else snprintf(labels[c], sizeof labels[c], "order %d", tc->order);
            ms[n++] = M(labels[c], NULL, NULL, g_task_cell, k * DT_TASK_MAX_CELLS + c, "%.3f", 0, NULL);
        }
        tb_printf(b, "### %s\n\n%s %d examples per cell.\n\n", dt_task_name((dt_task_kind)k), task_text[k], t0->cells[0].examples);
        table(b, r, "measure", ms, n);
    }
    /* learning curves: the mean over runs at each measured step */
    if (m0->n_curve > 0) {
        tb_printf(b, "### Learning curves\n\nTask accuracy during training (mean over runs; smaller evaluation sets "
                     "than above).\n\n| step |");
        for (int k = 0; k < DT_N_TASKS; k++)
            if (r->tasks & (1 << k))
                for (int v = 0; v < r->n_variants; v++) tb_printf(b, " %s %s |", dt_task_name((dt_task_kind)k), rp_run(r, v, 0)->name);
        tb_printf(b, "\n| --- |");
        for (int k = 0; k < DT_N_TASKS; k++)
            if (r->tasks & (1 << k))
                for (int v = 0; v < r->n_variants; v++) tb_printf(b, " --- |");
        tb_printf(b, "\n");
        for (int p = 0; p < m0->n_curve; p++) {
            tb_printf(b, "| %d |", m0->curve[p].step);
            for (int k = 0; k < DT_N_TASKS; k++) {
                if (!(r->tasks & (1 << k))) continue;
                for (int v = 0; v < r->n_variants; v++) {
                    double x[RP_MAX_SEEDS];
                    for (int s = 0; s < r->n_seeds; s++) {
                        const rp_model *m = rp_run(r, v, s);
                        x[s] = p < m->n_curve ? m->curve[p].accuracy[k] : NAN;
                    }
                    dt_stats_interval iv = dt_stats_mean_ci(x, r->n_seeds);
                    char c[96];
                    tb_printf(b, " %s |", cell(c, sizeof c, &iv, "%.2f"));
                }
            }
            tb_printf(b, "\n");
        }
        tb_printf(b, "\n");
    }
}

static int bits_row(const rp_model *m, int bits) {
    for (int i = 0; i < m->n_quant; i++)
        if (m->quant[i].bits == bits) return i;
    return -1;
}

static void quant_section(textbuf *b, const rp_report *r) {
    const rp_model *m0 = rp_run(r, 0, 0);
    tb_printf(b, "## Attention-logit quantisation\n\nHeld-out loss (nats/%s) with the attention logits fake-quantised "
                 "(symmetric, absmax per head map) before the softmax.\n\n", r->tokenizer ? "token" : "byte");
    measure ms[RP_MAX_BITS + 2];
    char labels[RP_MAX_BITS + 1][32];
    int n = 0;
    for (int i = 0; i < m0->n_quant; i++) {
        int bits = m0->quant[i].bits;
        if (bits) snprintf(labels[i], sizeof labels[i], "%d bits", bits);
        else snprintf(labels[i], sizeof labels[i], "fp32");
        ms[n++] = M(labels[i], bits == 4 ? "≈ Transformer at 6 bits" : NULL, bits == 4 ? "drops sharply from 6 bits down" : NULL,
                    g_quant_loss, i, "%.4f", 1, NULL);
    }
    int r4 = bits_row(m0, 4);
    if (r4 >= 0) ms[n++] = M("loss increase at 4 bits over fp32", NULL, NULL, g_quant_delta, r4, "%.4f", 1,
                             "the loss increase at 4 bits over fp32");
    table(b, r, "bits", ms, n);
    if (r4 < 0) tb_printf(b, "4 bits was not among the measured widths, so no model is named here.\n\n");
    if (m0->n_quant && m0->quant[0].needle_total > 0) {
        tb_printf(b, "Needle exact match (teacher-forced) with the same quantisation:\n\n");
        n = 0;
        for (int i = 0; i < m0->n_quant; i++)
            ms[n++] = M(labels[i], NULL, NULL, g_quant_needle, i, "%.3f", 0, m0->quant[i].bits == 4 ? "needle exact match at 4 bits" : NULL);
        table(b, r, "bits", ms, n);
    }
}

/* Post-training quantisation of the linear layers (analysis/wquant.c), each run against itself in F32. */
static void wquant_section(textbuf *b, const rp_report *r) {
    const rp_model *m0 = rp_run(r, 0, 0);
    if (!m0->n_wq) return;
    tb_printf(b, "## Post-training quantisation of weights and activations\n\n"
                 "Each model's linear layers quantised as `difftrans quantize` does (calibration: up to 300 windows "
                 "of the training text), scored on the held-out text against the same model in F32: loss increase "
                 "(nats/%s), mean KL divergence of the next-%s distribution from F32's, top-1 agreement "
                 "with F32, and (with a needle set) needle exact match. The paper has no such table; its argument is "
                 "that fewer activation outliers make 8-bit activations cheaper for DIFF.\n\n",
              r->tokenizer ? "token" : "byte", r->tokenizer ? "token" : "byte");
    measure ms[3 * DT_AN_WQ_MAX_SCHEMES];
    char labels[3 * DT_AN_WQ_MAX_SCHEMES][64];
    int n = 0;
    for (int i = 1; i < m0->n_wq && n + 3 <= 3 * DT_AN_WQ_MAX_SCHEMES; i++) {
        const int w8a8 = !strcmp(m0->wq[i].name, "w8a8");
        snprintf(labels[n], sizeof labels[n], "%s: loss increase", m0->wq[i].name);
        ms[n] = M(labels[n], NULL, NULL, g_wq_delta, i, "%.4f", 1,
                  w8a8 ? "the loss increase with static 8-bit activations (w8a8)" : NULL);
        n++;
        snprintf(labels[n], sizeof labels[n], "%s: KL from F32", m0->wq[i].name);
        ms[n] = M(labels[n], NULL, NULL, g_wq_kl, i, "%.5f", 1, NULL);
        n++;
        snprintf(labels[n], sizeof labels[n], "%s: top-1 agreement", m0->wq[i].name);
        ms[n] = M(labels[n], NULL, NULL, g_wq_top1, i, "%.4f", 0, NULL);
        n++;
    }
    table(b, r, "scheme", ms, n);
    if (m0->wq[0].needle_total > 0) {
        tb_printf(b, "Needle exact match (teacher-forced, as in the bit-width table) with each scheme, F32 first:\n\n");
        n = 0;
        for (int i = 0; i < m0->n_wq && i < 3 * DT_AN_WQ_MAX_SCHEMES; i++) {
            const int w8a8 = !strcmp(m0->wq[i].name, "w8a8");
            snprintf(labels[i], sizeof labels[i], "%s: needle exact match", m0->wq[i].name);
            ms[n++] = M(labels[i], NULL, NULL, g_wq_needle, i, "%.3f", 0,
                        w8a8 ? "needle exact match with static 8-bit activations (w8a8)" : NULL);
        }
        table(b, r, "scheme", ms, n);
    }
}

/* ---------------------------------------------------------------- the reproduction protocol */

/* The first run that measured the protocol (its windows, bins and layers label the tables), or NULL. */
static const rp_model *protocol_run(const rp_report *r) {
    for (int v = 0; v < r->n_variants; v++)
        if (rp_run(r, v, 0)->protocol.n_bins) return rp_run(r, v, 0);
    return NULL;
}

/* The most layers any run's protocol has. */
static int protocol_layers(const rp_report *r) {
    int L = 0;
    for (int v = 0; v < r->n_variants; v++)
        if (rp_run(r, v, 0)->protocol.n_layers > L) L = rp_run(r, v, 0)->protocol.n_layers;
    return L;
}

#define RP_PROTO_ROWS (3 * 64) /* rows of one table: 3 per layer, up to 64 layers */

static void protocol_section(textbuf *b, const rp_report *r) {
    const rp_model *p0 = protocol_run(r);
    const char *unit = r->tokenizer ? "token" : "byte";
    tb_printf(b, "## Reproduction protocol\n\n");
    if (!p0) {
        tb_printf(b, "Not measured in this report.\n\n");
        return;
    }
    const dt_an_protocol *pp = &p0->protocol;
    tb_printf(b, "What the failed small-scale reproductions of the paper lacked, measured on every run. Each measure "
                 "and why it is here:\n\n"
                 "- **Training and held-out loss side by side, and their gap** (held-out − training). Held-out loss "
                 "is the unit of every claim, and a model can lower its training loss by memorising; a gap larger "
                 "than the baseline's is that memorisation signature, which one independent reproduction found for "
                 "DIFF while its held-out loss was the worse.\n"
                 "- **Held-out loss by position in the context**. A gain from attending better should show in the "
                 "late positions, where there is context to attend to; memorisation shows as a training / held-out "
                 "gap that grows late in the context.\n"
                 "- **Loss spikes and the gradient norm's largest value and spread** over training. The DIFF V2 "
                 "write-up drops the per-head norm for stability at scale; spikes and a wide gradient norm are what "
                 "instability looks like at this size.\n"
                 "- **λ per layer over training**. A λ that collapses to 0 leaves a Transformer whose second map "
                 "does nothing, and one above 1 makes every differential row sum below zero; values reported from "
                 "practice (not in the paper's tables) are about 0.8 in deep layers and 0.2–0.4 in early ones.\n"
                 "- **Attention-sink mass on the first token**, per layer: the mean weight the rows t ≥ 1 put on "
                 "position 0. Softmax attention parks the weight it cannot use on the first token — the attention "
                 "noise DIFF claims to cancel — so a differential map that cancels it carries less of it than a "
                 "softmax map.\n"
                 "- **RMS of each head's context before its norm** (DIFF's differential output before the RMSNorm "
                 "and the (1 − λinit) scale; DIFF V2's and the Transformer's head output, which has no norm). The V2 "
                 "write-up removes the norm because a difference of two maps can be small and the norm then "
                 "magnifies it; this shows how small it is.\n\n");
    tb_printf(b, "Both texts are read by the same evaluator: %d window(s) of %d %ss spread evenly over each (the "
                 "training text: the part of the data before the held-out tail; task batches play no part), "
                 "next-%s cross-entropy in nats/%s, the reference attention kernel. Every figure is the mean over "
                 "runs ± its 95%% interval; n/a: the measure does not apply to the model (the Transformer has one "
                 "map per head) or was not taken. src/analysis/protocol.c defines each exactly.\n\n",
              pp->windows, pp->seq, unit, unit, unit);

    measure ms[RP_PROTO_ROWS];
    char labels[RP_PROTO_ROWS][80];
    int n = 0;
    tb_printf(b, "### Training and held-out loss\n\n");
    ms[n++] = M("training-text loss", NULL, NULL, g_p_train, 0, "%.4f", 1, NULL);
    ms[n++] = M("held-out loss", NULL, NULL, g_p_held, 0, "%.4f", 1, "the held-out loss of the protocol's windows");
    ms[n++] = M("gap (held-out − training)", NULL, NULL, g_p_gap, 0, "%.4f", 1, "the held-out − training gap");
    table_na(b, r, "measure", ms, n, "n/a");

    tb_printf(b, "### Held-out loss by position\n\n%d bins of equal width over positions 0..%d (each holds the same "
                 "number of predictions); the gap is held-out − training in the same bin.\n\n",
              pp->n_bins, pp->seq - 1);
    n = 0;
    for (int k = 0; k < pp->n_bins; k++) {
        snprintf(labels[n], sizeof labels[n], "held-out, positions %d–%d", pp->bin_start[k], pp->bin_start[k + 1] - 1);
        ms[n] = M(labels[n], NULL, NULL, g_p_bin, k, "%.4f", 1,
                  k == pp->n_bins - 1 ? "the held-out loss of the last positions" : NULL);
        n++;
    }
    for (int k = 0; k < pp->n_bins; k++) {
        snprintf(labels[n], sizeof labels[n], "gap, positions %d–%d", pp->bin_start[k], pp->bin_start[k + 1] - 1);
        ms[n] = M(labels[n], NULL, NULL, g_p_bin_gap, k, "%.4f", 1, NULL);
        n++;
    }
    table_na(b, r, "measure", ms, n, "n/a");

    tb_printf(b, "### Stability over training\n\nFrom every logged step (metrics.jsonl): a spike is a gradient norm "
                 "above mean + 3·std or 3× the median of the %d steps before it.\n\n", DT_AN_SPIKE_WINDOW);
    n = 0;
    ms[n++] = M("loss spikes (gradient-norm spikes)", NULL, NULL, g_spikes, 0, "%.3g", 1, "the number of spikes");
    ms[n++] = M("gradient norm, largest", NULL, NULL, g_gn_max, 0, "%.4g", 1, NULL);
    ms[n++] = M("gradient norm, std over steps", NULL, NULL, g_gn_std, 0, "%.4g", 1, NULL);
    ms[n++] = M("gradient norm, mean", NULL, NULL, g_gn_mean, 0, "%.4g", 1, NULL);
    table_na(b, r, "measure", ms, n, "n/a");

    tb_printf(b, "### λ per layer over training\n\n");
    int any = 0;
    for (int v = 0; v < r->n_variants; v++) {
        const rp_model *m0 = rp_run(r, v, 0);
        const dt_an_training *t = &m0->training;
        if (m0->cfg.arch == DT_ARCH_LLAMA || !t->lambda_at || t->n_lambda_points < 1) continue;
        any = 1;
        tb_printf(b, "%s (`%s`)%s:\n\n| layer |%s", m0->name, r->variant_key[v],
                  m0->cfg.arch == DT_ARCH_DIFF_V2 ? ", the mean over the step's tokens and heads of λ_{t,j}" : "",
                  m0->cfg.arch == DT_ARCH_DIFF ? " λinit |" : "");
        for (int k = 0; k < t->n_lambda_points; k++) tb_printf(b, " step %d |", t->lambda_step[k]);
        tb_printf(b, "\n| --- |%s", m0->cfg.arch == DT_ARCH_DIFF ? " --- |" : "");
        for (int k = 0; k < t->n_lambda_points; k++) tb_printf(b, " --- |");
        tb_printf(b, "\n");
        for (int l = 0; l < t->n_layers; l++) {
            tb_printf(b, "| %d |", l);
            if (m0->cfg.arch == DT_ARCH_DIFF) tb_printf(b, " %.4f |", (double)dt_lambda_init(l));
            for (int k = 0; k < t->n_lambda_points; k++) {
                const measure ml = M(NULL, NULL, NULL, g_lambda_at, k * 1024 + l, "%.4f", 0, NULL);
                const dt_stats_interval iv = over_seeds(r, v, &ml);
                char c[96];
                tb_printf(b, " %s |", cell_na(c, sizeof c, &iv, "%.4f", "n/a"));
            }
            tb_printf(b, "\n");
        }
        tb_printf(b, "\n");
    }
    tb_printf(b, any ? "The steps are those of the first run; every run of a variant logs the same steps. The whole "
                       "course: `plots/lambda.png`.\n\n"
                     : "No variant here has a λ.\n\n");

    const int L = protocol_layers(r) < 64 ? protocol_layers(r) : 64;
    tb_printf(b, "### Attention-sink mass per layer\n\nThe mean over heads, windows and query positions t ≥ 1 of the "
                 "weight on position 0 (position 0 itself always puts all its weight there). Head maps: A "
                 "(Transformer), A1 − λ·A2 (DIFF, whose rows sum to 1 − λ), A_p − λ_t·A_q (DIFF V2); the two softmax "
                 "maps of a DIFF or V2 head are the ones to set beside the Transformer's.\n\n");
    static const char *const sink_rows[3] = {"head maps", "first softmax map", "second softmax map"};
    const getter sink_get[3] = {g_sink, g_sink1, g_sink2};
    n = per_layer_rows(ms, labels, L, sink_rows, sink_get, "%.4f", 1);
    table_na(b, r, "measure", ms, n, "n/a");

    tb_printf(b, "### Head-context RMS before the norm, per layer\n\nThe RMS over windows, positions and channels of "
                 "each head's context, then its mean, smallest and largest over the layer's heads. DIFF: u = (A1 − "
                 "λ·A2)·V before the RMSNorm and the (1 − λinit) scale (the norm then divides each position by its "
                 "RMS); DIFF V2 and the Transformer: the head's output, which has no norm.\n\n");
    static const char *const rms_rows[3] = {"mean over heads", "smallest head", "largest head"};
    const getter rms_get[3] = {g_rms_mean, g_rms_min, g_rms_max};
    n = per_layer_rows(ms, labels, L, rms_rows, rms_get, "%.4g", 0);
    table_na(b, r, "measure", ms, n, "n/a");
}

static void scaling_section(textbuf *b, const rp_report *r) {
    if (r->n_sizes < 2) return;
    double px[2 * RP_MAX_SIZES], ly[2 * RP_MAX_SIZES];
    int kind[2 * RP_MAX_SIZES];
    for (int i = 0; i < r->n_sizes; i++)
        for (int k = 0; k < 2; k++)
            px[2 * i + k] = r->size_params[i][k], ly[2 * i + k] = r->size_loss[i][k], kind[2 * i + k] = k == 0;
    const dt_scaling_comparison sc = dt_scaling_compare(px, ly, kind, 2 * r->n_sizes);
    const dt_scaling_fit fit[2] = {sc.fit[1], sc.fit[0]}; /* [0 = DIFF, 1 = Transformer], as the table */
    const double fraction = sc.fraction;
    tb_printf(b, "## Loss against model size\n\nBoth kinds at %d sizes with the same data, seed and token budget (the "
                 "first seed only: one run per size, so no interval); log(final validation loss) = a + b·log(N) "
                 "fitted per kind, N the non-embedding parameters (all but the token embedding and the LM head, the "
                 "usual size of scaling laws, as `difftrans study` and `analyze scaling` count it).\n\n| preset | "
                 "DIFF N | Transformer N | DIFF all parameters | Transformer all parameters | DIFF val loss | "
                 "Transformer val loss |\n| --- | --- | --- | --- | --- | --- | --- |\n",
              r->n_sizes);
    for (int i = 0; i < r->n_sizes; i++)
        tb_printf(b, "| %s | %.0f | %.0f | %.0f | %.0f | %.4f | %.4f |\n", r->size_names[i], r->size_params[i][0],
                  r->size_params[i][1], r->size_all[i][0], r->size_all[i][1], r->size_loss[i][0], r->size_loss[i][1]);
    tb_printf(b, "\n| measure | paper DIFF | paper Transformer | ours DIFF | ours Transformer |\n| --- | --- | --- | --- | --- |\n");
    tb_printf(b, "| fitted exponent b | — | — | %.4f | %.4f |\n", fit[0].b, fit[1].b);
    tb_printf(b, "| DIFF N for the Transformer's loss at its largest size, as a fraction of its N | ~0.65 | 1 "
                 "| %.3f | 1 |\n\n",
              fraction);
    if (isnan(fraction))
        tb_printf(b, "The DIFF fit cannot reach the Transformer's loss (its loss does not fall with size, or a value is "
                     "missing), so no fraction is given.\n\n");
    else if (!(fit[1].b < 0)) /* the paper's claim compares two falling curves */
        tb_printf(b, "The Transformer's loss did not fall with size (b = %.4f): at this budget its larger model was no "
                     "better, so there is no scaling curve to compare DIFF against, and the fraction says nothing "
                     "about the paper's claim either way.\n\n",
                  fit[1].b);
    else
        tb_printf(b, "From one run per size this fraction has no interval: read it as a point estimate (%s needs %s "
                     "parameters for the same loss by this fit).\n\n",
                  fraction < 1 ? "DIFF" : "the Transformer", fraction < 1 ? "fewer" : "fewer than DIFF");
}

static void markdown(textbuf *b, const rp_report *r, int plots, const char *plot_note) {
    const rp_model *d0 = rp_run(r, r->diff >= 0 ? r->diff : 0, 0);
    tb_printf(b, "# %s\n\n", r->n_variants == 2 && r->diff >= 0 && r->base >= 0
                                    ? "DIFF Transformer vs parameter-matched Transformer"
                                    : "Model variants side by side");
    tb_printf(b, "Reproduce this report with:\n\n```\n%s\n```\n\n", r->command);
    tb_printf(b, "## Setup\n\n- data: `%s`; trained on `%s`\n", r->data, r->train_text);
    tb_printf(b, "- preset `%s`: %d layers, hidden size %d\n", r->preset, d0->cfg.num_hidden_layers, d0->cfg.hidden_size);
    for (int v = 0; v < r->n_variants; v++) {
        const rp_model *m = rp_run(r, v, 0);
        tb_printf(b, "- %s (`%s`): %zu parameters, %d %s of width %d\n", m->name, r->variant_key[v], m->n_params,
                  m->cfg.arch == DT_ARCH_DIFF ? m->cfg.num_attention_heads / 2 : m->cfg.num_attention_heads,
                  m->cfg.arch == DT_ARCH_DIFF ? "differential heads" : "heads",
                  m->cfg.arch == DT_ARCH_DIFF ? 2 * m->cfg.head_dim : m->cfg.head_dim);
    }
    tb_printf(b, "- %d run(s) per model with seeds %llu..%llu (initialisation and data order; run s of every model "
                 "shares seed s); every figure is the mean over runs ± the half-width of its 95%% confidence interval "
                 "(Student's t over runs; no ± with one run)\n",
              r->n_seeds, (unsigned long long)r->seed, (unsigned long long)(r->seed + (uint64_t)r->n_seeds - 1));
    const char *unit = r->tokenizer ? "token" : "byte";
    if (r->tokenizer)
        tb_printf(b, "- vocabulary: the BPE tokenizer of `%s` (every run; every text and prompt of the analyses is "
                     "read through it)\n",
                  r->tokenizer);
    tb_printf(b, "- same data and token budget: %d steps × batch %d × %d %ss = %lld training tokens per run\n",
              r->steps, r->batch, r->seq, unit, (long long)r->steps * r->batch * r->seq);
    if (r->tokenizer && r->heldout_bytes)
        tb_printf(b, "- outliers and quantisation: the held-out tail of the training text (the validation split, %zu "
                     "tokens, %zu bytes as the tokenizer decodes them: %.3f bytes per token), %d window(s) of %d "
                     "tokens\n",
                  r->heldout_tokens, r->heldout_bytes, (double)r->heldout_bytes / (double)r->heldout_tokens,
                  r->windows, r->seq);
    else
        tb_printf(b, "- outliers and quantisation: the held-out tail of the training text (the validation split, %zu "
                     "%ss), %d window(s) of %d %ss\n",
                  r->heldout_tokens, unit, r->windows, r->seq, unit);
    if (r->needle_dir) {
        tb_printf(b, "- needle set: `%s` (context %d bytes, %d %s, %d %s); its train.txt is put before the "
                     "training text, so that the held-out tail is the text's alone (the tasks' filler and the "
                     "calibration windows skip it too). ",
                  r->needle_dir, r->needle_context, r->needle_needles, r->needle_needles == 1 ? "needle" : "needles",
                  r->needle_queries, r->needle_queries == 1 ? "query" : "queries");
        /* the paper scores retrieval within the context its models were trained (or extended) to */
        if (r->needle_longest > r->seq)
            tb_printf(b, "Its test samples take up to %d %ss, more than the training window of %d: the positions "
                         "past it were never trained, so its retrieval scores measure extrapolation, which the "
                         "paper's needle test does not (a set planned before sets were sized to the window; "
                         "`--force` starts over with one that fits)\n",
                      r->needle_longest, unit, r->seq);
        else
            tb_printf(b, "Its test samples take up to %d %ss, within the training window of %d, as the paper scores "
                         "retrieval within the context its models were trained to\n",
                      r->needle_longest, unit, r->seq);
    }
    tb_printf(b, "- verdicts: \"X better\" when the 95%% interval of the paired difference (over runs; with one run, "
                 "over a task's examples) excludes zero and is not a point made of fewer than 3 equal "
                 "differences, otherwise \"no difference this run can resolve\"\n");
    tb_printf(b, "- the paper's figures come from models of up to billions of parameters trained on up to 1T tokens; "
                 "ours are tiny %s models, so the columns are not expected to agree in size, only perhaps in "
                 "direction\n\n", r->tokenizer ? "BPE" : "byte-level");

    if (r->n_variants > 2 || r->diff < 0 || r->base < 0) {
        tb_printf(b, "## Every variant, one table per measure\n\n");
        const measure head[] = {
            M(NULL, NULL, NULL, g_final_val, 0, "%.4f", 1,
              r->tokenizer ? "final validation loss (nats/token)" : "final validation loss (nats/byte)"),
            M(NULL, NULL, NULL, g_logit_top1, 0, "%.4g", 1, "largest attention logit"),
            M(NULL, NULL, NULL, g_hidden_top1, 0, "%.4g", 1, "largest hidden-state activation"),
        };
        for (int i = 0; i < 3; i++) measure_table(b, r, &head[i]);
        for (int k = 0; k < DT_N_TASKS; k++)
            if (r->tasks & (1 << k)) {
                char what[64];
                snprintf(what, sizeof what, "%s accuracy", dt_task_name((dt_task_kind)k));
                measure t = M(NULL, NULL, NULL, g_task, k, "%.3f", 0, what);
                t.task = k;
                measure_table(b, r, &t);
            }
    }

    tasks_section(b, r);

    tb_printf(b, "## Final losses\n\n");
    {
        /* no final train loss: with tasks in the mix the last step may be a task batch, whose loss
         * is over its answers only */
        const int bpe = r->tokenizer != NULL;
        measure ms[] = {M(bpe ? "final validation loss (nats/token)" : "final validation loss (nats/byte)", NULL, NULL,
                          g_final_val, 0, "%.4f", 1, "the final validation loss"),
                        M(bpe ? "held-out loss, fp32 attention (nats/token)" : "held-out loss, fp32 attention (nats/byte)",
                          NULL, NULL, g_quant_loss, 0, "%.4f", 1, NULL),
                        M(bpe ? "held-out next-token accuracy" : "held-out next-byte accuracy", NULL, NULL, g_quant_acc, 0,
                          "%.4f", 0, NULL),
                        M("final validation loss (bits/byte)", NULL, NULL, g_final_bpb, 0, "%.4f", 1, NULL)};
        tb_printf(b, "The validation loss is next-%s loss on the held-out text (never on task examples)%s.\n\n",
                  bpe ? "token" : "byte",
                  bpe && r->heldout_bytes ? "; in bits per byte it is divided by the held-out text's bytes per token "
                                            "and by ln 2, a figure runs of other tokenizers share"
                                          : "");
        table(b, r, "measure", ms, bpe && r->heldout_bytes ? 4 : 3);
    }

    protocol_section(b, r);

    if (r->diff >= 0) {
        tb_printf(b, "## λ per layer (DIFF)\n\n| layer | λinit | final |\n| --- | --- | --- |\n");
        for (int l = 0; l < d0->cfg.num_hidden_layers; l++) {
            measure ml = M(NULL, NULL, NULL, g_lambda, l, "%.4f", 0, NULL);
            dt_stats_interval iv = over_seeds(r, r->diff, &ml);
            char c[96];
            tb_printf(b, "| %d | %.4f | %s |\n", l, (double)dt_lambda_init(l), cell(c, sizeof c, &iv, "%.4f"));
        }
        tb_printf(b, "\nλ exists only in the DIFF model, so this table compares neither model with the other; the paper "
                     "reports no λ values. Its course over training: `plots/lambda.png` and report.json.\n\n");
    }

    tb_printf(b, "## Activation outliers\n\n");
    {
        measure ms[] = {
            M("largest attention logit", "38.8", "318.0", g_logit_top1, 0, "%.4g", 1, "the largest attention logit"),
            M("10th largest attention logit", NULL, NULL, g_logit_top10, 0, "%.4g", 1, NULL),
            M("median \\|attention logit\\|", NULL, NULL, g_logit_median, 0, "%.4g", 1, NULL),
            M("largest hidden-state activation", "1,688", "3,609", g_hidden_top1, 0, "%.4g", 1,
              "the largest hidden-state activation"),
            M("10th largest hidden-state activation", NULL, NULL, g_hidden_top10, 0, "%.4g", 1, NULL),
            M("median \\|hidden state\\|", NULL, NULL, g_hidden_median, 0, "%.4g", 1, NULL)};
        table(b, r, "measure", ms, 6);
    }

    quant_section(b, r);
    wquant_section(b, r);

    tb_printf(b, "## In-context learning and the order of the examples (fixed labels)\n\n");
    tb_printf(b, "A synthetic task never seen in training (words starting a–m are \"red\", n–z \"blue\"; chance 0.5): "
                 "the same %d demonstrations in %d orders, %d queries each (`difftrans analyze icl`).\n\n",
              d0->icl_setup.shots, d0->icl_setup.permutations, d0->icl_setup.queries);
    {
        measure ms[] = {M("mean accuracy over orders", NULL, NULL, g_icl_mean, 0, "%.3f", 0, "in-context accuracy"),
                        M("std of accuracy over orders", "much smaller", "larger", g_icl_std, 0, "%.3f", 1, NULL),
                        M("max − min over orders", NULL, NULL, g_icl_range, 0, "%.3f", 1, NULL)};
        table(b, r, "measure", ms, 3);
    }

    scaling_section(b, r);

    tb_printf(b, "## Training dynamics\n\n");
    {
        measure ms[] = {M("gradient norm mean", NULL, NULL, g_gn_mean, 0, "%.4g", 1, NULL),
                        M("gradient norm std", NULL, NULL, g_gn_std, 0, "%.4g", 1, NULL),
                        M("gradient norm max", NULL, NULL, g_gn_max, 0, "%.4g", 1, "the largest gradient norm"),
                        M("gradient-norm spikes", NULL, NULL, g_spikes, 0, "%.3g", 1, NULL)};
        table(b, r, "measure", ms, 4);
    }

    if (d0->have_needle) {
        tb_printf(b, "## Multi-needle retrieval\n\nGreedy exact match of every queried value. The paper's figure is for "
                     "4K contexts with 6 needles and 2 queries; ours uses %d-byte contexts, %d %s, %d %s.\n\n",
                  r->needle_context, r->needle_needles, r->needle_needles == 1 ? "needle" : "needles",
                  r->needle_queries, r->needle_queries == 1 ? "query" : "queries");
        measure ms[DT_NEEDLE_MAX_LIST * DT_NEEDLE_MAX_LIST + 1];
        char labels[DT_NEEDLE_MAX_LIST * DT_NEEDLE_MAX_LIST][64];
        int n = 0;
        ms[n++] = M("exact-match accuracy, all queries", "0.85", "0.55", g_needle, 0, "%.3f", 0,
                    "needle exact-match accuracy");
        for (int c = 0; c < d0->needle.n_cells && n < (int)(sizeof ms / sizeof *ms); c++) {
            snprintf(labels[c], sizeof labels[c], "context %d, depth %.2f", d0->needle.cells[c].context_length,
                     d0->needle.cells[c].depth);
            ms[n++] = M(labels[c], NULL, NULL, g_needle_cell, c, "%.3f", 0, NULL);
        }
        table(b, r, "measure", ms, n);
        tb_printf(b, "## Attention allocation on retrieval\n\nAttention of the position predicting the first answer "
                     "%s; w = A (Transformer) or A1 − λ·A2 (DIFF; DIFF V2: A_p − λ_t·A_q, the row's λ). "
                     "answer share = Σ w over the answer span / Σ |w| over "
                     "the context; noise share = Σ |w| over the rest of the context / Σ |w| over the context.\n\n",
                  r->tokenizer ? "token (the answer span: the tokens overlapping the value)" : "byte");
        n = 0;
        ms[n++] = M("answer share (mean over layers)", "0.27–0.40", "0.03–0.09", g_answer_share, 0, "%.4f", 0,
                    "the answer share");
        ms[n++] = M("noise share (mean over layers)", NULL, NULL, g_noise_share, 0, "%.4f", 1, NULL);
        for (int l = 0; l < d0->allocation.n_layers && n < (int)(sizeof ms / sizeof *ms); l++) {
            snprintf(labels[l], sizeof labels[l], "answer share, layer %d", l);
            ms[n++] = M(labels[l], NULL, NULL, g_layer_share, l, "%.4f", 0, NULL);
        }
        table(b, r, "measure", ms, n);
    } else
        tb_printf(b, "## Long-form needle retrieval\n\nNo needle set (the comparison ran without its needle option): the paper-style multi-needle "
                     "accuracy (paper 0.85 vs 0.55) and attention allocation (paper 0.27–0.40 vs 0.03–0.09) were not "
                     "measured.\n\n");

    tb_printf(b, "## Plots\n\n");
    if (plots == 1) {
        const char *names[16];
        int n = pl_names(r, names, 16);
        for (int i = 0; i < n; i++) tb_printf(b, "![%s](plots/%s.png)\n\n", names[i], names[i]);
    } else
        tb_printf(b, "%s\n\n", plot_note);
    tb_printf(b, "All raw numbers, per run: `report.json`.\n");
}

char *rp_markdown(const rp_report *r, int plots, const char *plot_note) {
    textbuf b = {0};
    markdown(&b, r, plots, plot_note);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
