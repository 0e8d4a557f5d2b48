/* report_json.c — report.json of a comparison: the setup, every run with every number measured on
 * it (per layer, per cell, per bit width, learning curves), and a summary of the headline measures
 * per variant (mean, 95% interval over runs) with the verdict against the Transformer. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analysis/report.h"
#include "difftrans_analysis.h"

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
    dt_an_training_add_json(cJSON_AddObjectToObject(e, "training"), &m->training);
    /* a loss every vocabulary shares: nats per token over bytes per token, in bits */
    add_num(e, "final_val_bits_per_byte", m->bytes_per_token > 0
                                              ? m->training.final_val_loss / (M_LN2 * m->bytes_per_token) : NAN);
    cJSON *ic = cJSON_AddObjectToObject(e, "icl");
    cJSON_AddNumberToObject(ic, "shots", m->icl_setup.shots);
    cJSON_AddNumberToObject(ic, "queries", m->icl_setup.queries);
    dt_icl_result_add_json(ic, &m->icl);
    dt_an_outliers_add_json(cJSON_AddObjectToObject(e, "outliers"), &m->outliers);
    if (m->protocol.n_bins) { /* the reproduction protocol: each text, and the gap overall and per bin */
        cJSON *p = cJSON_AddObjectToObject(e, "protocol");
        dt_an_protocol_add_json(cJSON_AddObjectToObject(p, "heldout"), &m->protocol);
        if (m->protocol_train.n_bins) {
            dt_an_protocol_add_json(cJSON_AddObjectToObject(p, "train"), &m->protocol_train);
            add_num(p, "gap", m->protocol.loss - m->protocol_train.loss);
            cJSON *g = cJSON_AddArrayToObject(p, "bin_gap");
            for (int k = 0; k < m->protocol.n_bins && k < m->protocol_train.n_bins; k++) {
                const double x = m->protocol.bin_loss[k] - m->protocol_train.bin_loss[k];
                cJSON_AddItemToArray(g, isnan(x) ? cJSON_CreateNull() : cJSON_CreateNumber(x));
            }
        }
    }
    if (m->n_wq) cJSON_AddItemToObject(e, "weight_quantisation", dt_an_wq_rows_json(m->wq, m->n_wq - 1));
    cJSON_AddItemToObject(e, "quantisation", dt_an_quant_rows_json(m->quant, m->n_quant));
    if (m->have_needle) {
        cJSON *n = cJSON_AddObjectToObject(e, "needle");
        cJSON_AddNumberToObject(n, "correct", m->needle.correct);
        cJSON_AddNumberToObject(n, "total", m->needle.total);
        add_num(n, "accuracy", m->needle.total ? (double)m->needle.correct / m->needle.total : NAN);
        cJSON *cells = cJSON_AddArrayToObject(n, "cells");
        for (int c = 0; c < m->needle.n_cells; c++) {
            const dt_needle_cell *nc = &m->needle.cells[c];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToArray(cells, o);
            cJSON_AddNumberToObject(o, "context_length", nc->context_length);
            cJSON_AddNumberToObject(o, "depth", nc->depth);
            cJSON_AddNumberToObject(o, "samples", nc->samples);
            cJSON_AddNumberToObject(o, "n", nc->n);
            cJSON_AddNumberToObject(o, "correct", nc->correct);
            cJSON_AddNumberToObject(o, "first_correct", nc->first_correct);
        }
        dt_an_allocation_add_json(cJSON_AddObjectToObject(e, "allocation"), &m->allocation);
    }
    return e;
}

static cJSON *task_json(const dt_task_result *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "task", dt_task_name(t->kind));
    cJSON_AddNumberToObject(o, "correct", t->correct);
    cJSON_AddNumberToObject(o, "total", t->total);
    add_num(o, "accuracy", t->accuracy);
    if (t->kind == DT_TASK_ICL) add_num(o, "order_std", t->order_std);
    cJSON *cells = cJSON_AddArrayToObject(o, "cells");
    for (int c = 0; c < t->n_cells; c++) {
        const dt_task_cell *tc = &t->cells[c];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(cells, e);
        cJSON_AddNumberToObject(e, "length", tc->length);
        if (t->kind == DT_TASK_RECALL) cJSON_AddNumberToObject(e, "pairs", tc->pairs);
        if (t->kind == DT_TASK_DEPTH) cJSON_AddNumberToObject(e, "depth", tc->depth), cJSON_AddNumberToObject(e, "needles", tc->pairs);
        if (t->kind == DT_TASK_ICL) cJSON_AddNumberToObject(e, "order", tc->order), cJSON_AddNumberToObject(e, "shots", tc->pairs);
        cJSON_AddNumberToObject(e, "examples", tc->examples);
        cJSON_AddNumberToObject(e, "correct", tc->correct);
        cJSON_AddNumberToObject(e, "total", tc->total);
        add_num(e, "accuracy", tc->accuracy);
    }
    return o;
}

static void add_tasks(cJSON *e, const rp_model *m) {
    cJSON *ts = cJSON_AddObjectToObject(e, "tasks");
    for (int k = 0; k < DT_N_TASKS; k++)
        if (m->tasks & (1 << k)) cJSON_AddItemToObject(ts, dt_task_name((dt_task_kind)k), task_json(&m->task[k]));
    cJSON *cv = cJSON_AddArrayToObject(e, "learning_curve");
    for (int p = 0; p < m->n_curve; p++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(cv, o);
        cJSON_AddNumberToObject(o, "step", m->curve[p].step);
        for (int k = 0; k < DT_N_TASKS; k++)
            if (!isnan(m->curve[p].accuracy[k])) cJSON_AddNumberToObject(o, dt_task_name((dt_task_kind)k), m->curve[p].accuracy[k]);
    }
}

/* headline measures of the summary */
static double s_val(const rp_model *m, int a) { return m->training.final_val_loss; }
static double s_logit(const rp_model *m, int a) { return m->outliers.logits.top1; }
static double s_hidden(const rp_model *m, int a) { return m->outliers.hidden.top1; }
static double s_task(const rp_model *m, int k) { return m->tasks & (1 << k) ? m->task[k].accuracy : NAN; }
static double s_icl(const rp_model *m, int a) { return m->icl.mean; }
static double s_needle(const rp_model *m, int a) {
    return m->have_needle && m->needle.total ? (double)m->needle.correct / m->needle.total : NAN;
}
static double s_share(const rp_model *m, int a) { return m->have_needle ? m->allocation.mean_answer_share : NAN; }
static double s_p_held(const rp_model *m, int a) { return m->protocol.n_bins ? m->protocol.loss : NAN; }
static double s_p_train(const rp_model *m, int a) { return m->protocol_train.n_bins ? m->protocol_train.loss : NAN; }
static double s_p_gap(const rp_model *m, int a) { return s_p_held(m, a) - s_p_train(m, a); }
static double s_p_last_bin(const rp_model *m, int a) {
    return m->protocol.n_bins ? m->protocol.bin_loss[m->protocol.n_bins - 1] : NAN;
}
static double s_spikes(const rp_model *m, int a) { return m->training.n_steps ? m->training.spikes : NAN; }
static double s_gn_max(const rp_model *m, int a) { return m->training.n_steps ? m->training.gn_max : NAN; }
static double s_gn_std(const rp_model *m, int a) { return m->training.n_steps ? m->training.gn_std : NAN; }
/* the mean over layers of a per-layer protocol array (NAN entries make it NAN: a measure that does
 * not apply) */
static double layers_mean(const dt_an_protocol *p, const double *v) {
    if (!v || p->n_layers < 1) return NAN;
    double s = 0;
    for (int l = 0; l < p->n_layers; l++) s += v[l] / p->n_layers;
    return s;
}
static double s_sink(const rp_model *m, int a) { return layers_mean(&m->protocol, m->protocol.sink_mass); }
static double s_sink1(const rp_model *m, int a) { return layers_mean(&m->protocol, m->protocol.sink_mass_map1); }
static double s_head_rms(const rp_model *m, int a) {
    const dt_an_protocol *p = &m->protocol;
    if (!p->head_rms || p->n_layers < 1 || p->n_heads < 1) return NAN;
    double s = 0;
    for (int i = 0; i < p->n_layers * p->n_heads; i++) s += p->head_rms[i] / (p->n_layers * p->n_heads);
    return s;
}

static cJSON *interval_json(const dt_stats_interval *iv) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "n", iv->n);
    add_num(o, "mean", iv->mean);
    add_num(o, "ci95_low", iv->lo);
    add_num(o, "ci95_high", iv->hi);
    return o;
}

static double s_wq_needle(const rp_model *m, int row) {
    return row < m->n_wq && m->wq[row].needle_total > 0 ? (double)m->wq[row].needle_correct / m->wq[row].needle_total
                                                         : NAN;
}

/* One measure over the seeds of every variant, and each variant's paired difference to the
 * Transformer with its verdict (lower < 0: a measure with no better direction, no verdict). */
static void add_summary(cJSON *sum, const rp_report *r, const char *key, double (*get)(const rp_model *, int), int arg,
                        int lower) {
    cJSON *e = cJSON_AddObjectToObject(sum, key);
    if (lower < 0) cJSON_AddNullToObject(e, "lower_is_better");
    else cJSON_AddBoolToObject(e, "lower_is_better", lower);
    for (int v = 0; v < r->n_variants; v++) {
        double x[RP_MAX_SEEDS], y[RP_MAX_SEEDS];
        for (int s = 0; s < r->n_seeds; s++) {
            x[s] = get(rp_run(r, v, s), arg);
            if (r->base >= 0) y[s] = get(rp_run(r, r->base, s), arg);
        }
        dt_stats_interval iv = dt_stats_mean_ci(x, r->n_seeds);
        cJSON *o = interval_json(&iv);
        cJSON_AddItemToObject(e, r->variant_key[v], o);
        if (r->base >= 0 && v != r->base) {
            dt_stats_interval d = dt_stats_paired_diff_ci(x, y, r->n_seeds);
            /* one run each: a task's examples are the pairs, as REPORT.md's verdict takes them */
            const rp_model *a = rp_run(r, v, 0), *c = rp_run(r, r->base, 0);
            int over_examples = 0;
            if (r->n_seeds < 2 && get == s_task && (a->tasks & c->tasks & (1 << arg))) {
                const dt_stats_interval t = dt_task_paired_diff_ci(&a->task[arg], &c->task[arg]);
                if (t.n > 0) d = t, over_examples = 1;
            }
            cJSON *dj = interval_json(&d);
            cJSON_AddItemToObject(o, "difference_to_transformer", dj);
            cJSON_AddStringToObject(dj, "paired_over", over_examples ? "examples" : "runs");
            if (lower < 0) continue;
            dt_stats_verdict w = dt_stats_verdict_of(&d, lower);
            cJSON_AddStringToObject(o, "verdict", w == DT_STATS_A_BETTER   ? "variant better"
                                                  : w == DT_STATS_B_BETTER ? "Transformer better"
                                                                     : "no difference this run can resolve");
        }
    }
}

static cJSON *summary_json(const rp_report *r) {
    struct {
        const char *key;
        double (*get)(const rp_model *, int);
        int arg, lower;
    } ms[] = {{"final_val_loss", s_val, 0, 1},     {"largest_attention_logit", s_logit, 0, 1},
              {"largest_hidden_activation", s_hidden, 0, 1}, {"recall_accuracy", s_task, DT_TASK_RECALL, 0},
              {"depth_accuracy", s_task, DT_TASK_DEPTH, 0},  {"icl_permuted_accuracy", s_task, DT_TASK_ICL, 0},
              {"icl_fixed_label_accuracy", s_icl, 0, 0}, {"needle_accuracy", s_needle, 0, 0},
              {"answer_share", s_share, 0, 0}, {"protocol_heldout_loss", s_p_held, 0, 1},
              {"protocol_train_loss", s_p_train, 0, 1}, {"protocol_gap", s_p_gap, 0, 1},
              {"protocol_heldout_loss_last_bin", s_p_last_bin, 0, 1}, {"spikes", s_spikes, 0, 1},
              {"grad_norm_max", s_gn_max, 0, 1}, {"grad_norm_std", s_gn_std, 0, 1},
              {"sink_mass", s_sink, 0, 1}, {"sink_mass_first_map", s_sink1, 0, 1},
              {"head_context_rms", s_head_rms, 0, -1}};
    cJSON *sum = cJSON_CreateObject();
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) add_summary(sum, r, ms[i].key, ms[i].get, ms[i].arg, ms[i].lower);
    /* needle accuracy under each post-training quantisation scheme ("needle_accuracy_f32", ..._q8_0, ...) */
    const rp_model *m0 = rp_run(r, 0, 0);
    for (int i = 0; i < m0->n_wq && m0->wq[0].needle_total > 0; i++) {
        char key[64];
        snprintf(key, sizeof key, "needle_accuracy_%s", m0->wq[i].name);
        add_summary(sum, r, key, s_wq_needle, i, 0);
    }
    return sum;
}

cJSON *rp_json(const rp_report *r, int plots) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "command", r->command);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->seed);
    cJSON_AddStringToObject(root, "seed", seed); /* a string: JSON numbers lose 64-bit precision */
    cJSON_AddNumberToObject(root, "seeds", r->n_seeds);
    cJSON_AddStringToObject(root, "preset", r->preset);
    cJSON_AddStringToObject(root, "data", r->data);
    cJSON_AddStringToObject(root, "train_text", r->train_text);
    cJSON_AddNumberToObject(root, "steps", r->steps);
    cJSON_AddNumberToObject(root, "batch", r->batch);
    cJSON_AddNumberToObject(root, "seq", r->seq);
    /* the held-out text in the unit (tokens for a BPE comparison) and in bytes: before bits per byte,
     * heldout_bytes counted the unit */
    cJSON_AddNumberToObject(root, "heldout_tokens", (double)r->heldout_tokens);
    add_num(root, "heldout_bytes", r->heldout_bytes ? (double)r->heldout_bytes : NAN);
    add_num(root, "bytes_per_token", r->heldout_bytes && r->heldout_tokens
                                         ? (double)r->heldout_bytes / (double)r->heldout_tokens : NAN);
    /* what seq, heldout_tokens, windows and the task lengths count */
    cJSON_AddStringToObject(root, "unit", r->tokenizer ? "token" : "byte");
    if (r->tokenizer) cJSON_AddStringToObject(root, "tokenizer", r->tokenizer);
    cJSON_AddNumberToObject(root, "windows", r->windows);
    cJSON *tm = cJSON_AddArrayToObject(root, "tasks");
    for (int k = 0; k < DT_N_TASKS; k++)
        if (r->tasks & (1 << k)) cJSON_AddItemToArray(tm, cJSON_CreateString(dt_task_name((dt_task_kind)k)));
    cJSON_AddNumberToObject(root, "task_ratio", r->task_ratio);
    if (r->task_symbols) { /* each symbol of the tasks' formats: its token id */
        cJSON *ts = cJSON_AddObjectToObject(root, "task_symbols");
        for (const char *c = DT_TASK_SYMBOLS; *c; c++) {
            const char name[2] = {*c, 0};
            cJSON_AddNumberToObject(ts, name, r->task_symbols->id[(int)*c]);
        }
    }
    if (r->needle_dir) {
        cJSON *n = cJSON_AddObjectToObject(root, "needle_set");
        cJSON_AddStringToObject(n, "dir", r->needle_dir);
        cJSON_AddNumberToObject(n, "context", r->needle_context);
        cJSON_AddNumberToObject(n, "needles", r->needle_needles);
        cJSON_AddNumberToObject(n, "queries", r->needle_queries);
        cJSON_AddNumberToObject(n, "longest_test_sample", r->needle_longest);
        cJSON_AddBoolToObject(n, "within_training_window", r->needle_longest <= r->seq);
    } else
        cJSON_AddNullToObject(root, "needle_set");
    cJSON_AddBoolToObject(root, "plots", plots == 1);
    cJSON *p = cJSON_AddObjectToObject(root, "paper");
    cJSON_AddStringToObject(p, "largest_attention_logit", "DIFF 38.8, Transformer 318.0");
    cJSON_AddStringToObject(p, "largest_hidden_activation", "DIFF 1688, Transformer 3609");
    cJSON_AddStringToObject(p, "answer_span_attention", "DIFF 0.27-0.40, Transformer 0.03-0.09");
    cJSON_AddStringToObject(p, "multi_needle_4k_6n_2q", "DIFF 0.85, Transformer 0.55");
    cJSON_AddStringToObject(p, "logit_quantisation", "DIFF at 4 bits ~ Transformer at 6 bits");
    cJSON *vs = cJSON_AddArrayToObject(root, "variants");
    for (int v = 0; v < r->n_variants; v++) cJSON_AddItemToArray(vs, cJSON_CreateString(r->variant_key[v]));
    cJSON_AddItemToObject(root, "summary", summary_json(r));
    cJSON *ms = cJSON_AddArrayToObject(root, "runs");
    for (int v = 0; v < r->n_variants; v++)
        for (int s = 0; s < r->n_seeds; s++) {
            const rp_model *m = rp_run(r, v, s);
            cJSON *e = model_json(m);
            cJSON_AddStringToObject(e, "variant", r->variant_key[v]);
            snprintf(seed, sizeof seed, "%llu", (unsigned long long)(r->seed + (uint64_t)s));
            cJSON_AddStringToObject(e, "seed", seed);
            add_tasks(e, m);
            cJSON_AddItemToArray(ms, e);
        }
    cJSON *sz = cJSON_AddArrayToObject(root, "sizes"); /* the loss-against-size points (first seed) */
    for (int i = 0; i < r->n_sizes; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(sz, e);
        cJSON_AddStringToObject(e, "preset", r->size_names[i]);
        /* the fit's N is the non-embedding count; *_params keep counting every parameter, as before */
        cJSON_AddNumberToObject(e, "diff_params", r->size_all[i][0]);
        cJSON_AddNumberToObject(e, "transformer_params", r->size_all[i][1]);
        cJSON_AddNumberToObject(e, "diff_nonembedding_params", r->size_params[i][0]);
        cJSON_AddNumberToObject(e, "transformer_nonembedding_params", r->size_params[i][1]);
        add_num(e, "diff_val_loss", r->size_loss[i][0]);
        add_num(e, "transformer_val_loss", r->size_loss[i][1]);
    }
    return root;
}
