/* analyze_json.c — the JSON form of each analysis's result, one function per analysis: what
 * `difftrans analyze ... --json` writes per model and what the compare report (report_json.c)
 * writes per run are the same objects. A NaN (a measure that could not be taken) becomes null.
 * Each function adds to the object it is given and returns 0, or -1 when out of memory.
 * (Weight quantisation's rows have theirs beside the analysis: dt_an_wq_rows_json in wquant.c.) */
#include <cjson/cJSON.h>
#include <math.h>

#include "difftrans_analysis.h"

static int add_num(cJSON *o, const char *k, double v) {
    return (isnan(v) ? cJSON_AddNullToObject(o, k) : cJSON_AddNumberToObject(o, k, v)) != NULL;
}

static int add_array(cJSON *o, const char *k, const double *v, int n) {
    cJSON *a = cJSON_CreateDoubleArray(v, n);
    if (a && cJSON_AddItemToObject(o, k, a)) return 1;
    cJSON_Delete(a);
    return 0;
}

static int add_item(cJSON *o, const char *k, cJSON *item) {
    if (item && cJSON_AddItemToObject(o, k, item)) return 1;
    cJSON_Delete(item);
    return 0;
}

cJSON *dt_an_abs_stats_json(const dt_an_abs_stats *s) {
    cJSON *o = cJSON_CreateObject();
    int ok = o && add_num(o, "top1", s->top1) && add_num(o, "top10", s->top10) && add_num(o, "median", s->median) &&
             cJSON_AddNumberToObject(o, "count", (double)s->count);
    if (!ok) cJSON_Delete(o);
    return ok ? o : NULL;
}

int dt_an_outliers_add_json(cJSON *o, const dt_an_outliers *r) {
    int ok = cJSON_AddNumberToObject(o, "windows", r->windows) && cJSON_AddNumberToObject(o, "seq", r->seq) &&
             add_item(o, "attention_logits", dt_an_abs_stats_json(&r->logits)) &&
             add_item(o, "hidden_states", dt_an_abs_stats_json(&r->hidden));
    if (ok && r->layer_logit_max)
        ok = add_array(o, "layer_logit_max", r->layer_logit_max, r->n_layers) &&
             add_array(o, "layer_hidden_max", r->layer_hidden_max, r->n_layers + 1);
    return ok ? 0 : -1;
}

cJSON *dt_an_quant_rows_json(const dt_an_quant_row *rows, int n) {
    cJSON *a = cJSON_CreateArray();
    int ok = a != NULL;
    for (int i = 0; ok && i < n; i++) {
        const dt_an_quant_row *q = &rows[i];
        cJSON *r = cJSON_CreateObject();
        ok = r && cJSON_AddItemToArray(a, r);
        if (!ok) cJSON_Delete(r);
        ok = ok && cJSON_AddNumberToObject(r, "bits", q->bits) /* 0 = unquantised */ && add_num(r, "loss", q->loss) &&
             add_num(r, "accuracy", q->accuracy) && cJSON_AddNumberToObject(r, "count", (double)q->count);
        if (ok && q->needle_total >= 0)
            ok = cJSON_AddNumberToObject(r, "needle_correct", q->needle_correct) &&
                 cJSON_AddNumberToObject(r, "needle_total", q->needle_total) &&
                 add_num(r, "needle_accuracy", q->needle_total ? (double)q->needle_correct / q->needle_total : NAN);
    }
    if (!ok) cJSON_Delete(a);
    return ok ? a : NULL;
}

int dt_an_allocation_add_json(cJSON *o, const dt_an_allocation *a) {
    int ok = cJSON_AddNumberToObject(o, "heads", a->heads) && cJSON_AddNumberToObject(o, "samples", a->samples) &&
             cJSON_AddNumberToObject(o, "rows", a->rows) && add_num(o, "answer_share", a->mean_answer_share) &&
             add_num(o, "noise_share", a->mean_noise_share);
    if (ok && a->answer_share) {
        const int L = a->n_layers;
        ok = add_array(o, "layer_answer_share", a->answer_share, L) && add_array(o, "layer_noise_share", a->noise_share, L) &&
             add_array(o, "layer_span_sum", a->span, L) && add_array(o, "layer_span_abs_sum", a->span_abs, L) &&
             add_array(o, "layer_context_sum", a->context, L) &&
             add_array(o, "layer_context_abs_sum", a->context_abs, L) && add_array(o, "layer_row_sum", a->row, L);
    }
    return ok ? 0 : -1;
}

int dt_an_training_add_json(cJSON *o, const dt_an_training *t) {
    int ok = cJSON_AddNumberToObject(o, "steps_logged", t->n_steps) &&
             cJSON_AddNumberToObject(o, "first_step", t->first_step) &&
             cJSON_AddNumberToObject(o, "last_step", t->last_step) && add_num(o, "final_train_loss", t->final_train_loss) &&
             add_num(o, "final_val_loss", t->final_val_loss) &&
             cJSON_AddNumberToObject(o, "final_val_step", t->final_val_step) && add_num(o, "grad_norm_mean", t->gn_mean) &&
             add_num(o, "grad_norm_std", t->gn_std) && add_num(o, "grad_norm_max", t->gn_max) &&
             cJSON_AddNumberToObject(o, "spikes", t->spikes) &&
             add_item(o, "spike_steps", cJSON_CreateIntArray(t->spike_steps ? t->spike_steps : (const int[]){0}, t->spikes));
    if (!ok) return -1;
    if (t->n_layers > 0 && t->lambda_first)
        ok = add_array(o, "lambda_first", t->lambda_first, t->n_layers) &&
             add_array(o, "lambda_last", t->lambda_last, t->n_layers) &&
             add_array(o, "lambda_min", t->lambda_min, t->n_layers) && add_array(o, "lambda_max", t->lambda_max, t->n_layers);
    if (ok && t->n_layers > 0 && t->lambda_at) {
        cJSON *pts = cJSON_AddArrayToObject(o, "lambda_points");
        ok = pts != NULL;
        for (int i = 0; ok && i < t->n_lambda_points; i++) {
            cJSON *e = cJSON_CreateObject();
            ok = e && cJSON_AddItemToArray(pts, e);
            if (!ok) cJSON_Delete(e);
            ok = ok && cJSON_AddNumberToObject(e, "step", t->lambda_step[i]) &&
                 add_array(e, "lambda", t->lambda_at + (size_t)i * t->n_layers, t->n_layers);
        }
    }
    return ok ? 0 : -1;
}

int dt_icl_result_add_json(cJSON *o, const dt_icl_result *r) {
    int ok = 1;
    if (r->accuracy) ok = add_array(o, "accuracy", r->accuracy, r->permutations);
    ok = ok && add_num(o, "mean", r->mean) && add_num(o, "std", r->std) && add_num(o, "min", r->min) &&
         add_num(o, "max", r->max) && add_num(o, "spread", r->max - r->min);
    return ok ? 0 : -1;
}
