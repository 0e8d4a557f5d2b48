/* wquant.c — post-training quantisation quality of one model (see difftrans_analysis.h).
 *
 * Definitions, over every position t of the held-out windows (input tokens ≤ t, target t + 1):
 *   loss        mean −log q(target), q the quantised model's softmax; loss_delta = loss − F32's loss
 *   kl          mean Σ_v p(v) (log p(v) − log q(v)), p the F32 model's distribution (nats)
 *   top1_agree  fraction of positions where argmax q = argmax p
 *   accuracy    fraction of positions where argmax q = target
 * The quantised model shares the float model's parameters (a shallow copy with its own
 * quantised layers), so F32 and each scheme see the very same windows one after the other.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "difftrans_analysis.h"

static const char *const type_names[8] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                                          "lm_head"};

int dt_an_wq_parse_schemes(const char *list, float alpha, dt_an_wq_scheme *out, int *n, dt_error *err) {
    *n = 0;
    const char *p = list;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item) return dt_fail(err, "schemes '%s': empty or overlong item", list);
        if (*n == DT_AN_WQ_MAX_SCHEMES) return dt_fail(err, "schemes '%s': more than %d", list, DT_AN_WQ_MAX_SCHEMES);
        memcpy(item, p, len);
        item[len] = '\0';
        dt_an_wq_scheme *s = &out[*n];
        dt_quant_defaults(&s->opt);
        snprintf(s->name, sizeof s->name, "%s", item);
        char base[32];
        snprintf(base, sizeof base, "%s", item);
        char *dash = strchr(base, '-');
        if (dash) *dash = '\0';
        if (dt_quant_scheme_parse(base, &s->opt.scheme, err) != 0)
            return dt_fail(err, "unknown quantisation scheme '%s' (expected q8_0, q4_0, w8a8, w8a8-dynamic, "
                                "w8a8-smooth or w8a8-dynamic-smooth)",
                           item);
        if (dash) {
            const char *mod = item + (dash - base);
            if (s->opt.scheme != DT_QUANT_W8A8 ||
                (strcmp(mod, "-dynamic") && strcmp(mod, "-smooth") && strcmp(mod, "-dynamic-smooth")))
                return dt_fail(err, "scheme '%s': only w8a8 takes -dynamic, -smooth or -dynamic-smooth", item);
            s->opt.dynamic_activations = strstr(mod, "dynamic") != NULL;
            if (strstr(mod, "smooth")) s->opt.smooth_alpha = alpha;
        }
        (*n)++;
        p = comma ? comma + 1 : NULL;
        if (comma && !*p) return dt_fail(err, "schemes '%s': empty item at the end", list);
    }
    if (*n == 0) return dt_fail(err, "schemes: empty list");
    return 0;
}

/* log-softmax of one row into out[V] */
static void log_softmax(float *out, const float *x, int V) {
    float mx = x[0];
    for (int v = 1; v < V; v++) mx = fmaxf(mx, x[v]);
    double s = 0;
    for (int v = 0; v < V; v++) s += exp((double)x[v] - mx);
    const float lse = mx + (float)log(s);
    for (int v = 0; v < V; v++) out[v] = x[v] - lse;
}

static int argmax_row(const float *x, int V) {
    int b = 0;
    for (int v = 1; v < V; v++)
        if (x[v] > x[b]) b = v;
    return b;
}

typedef struct {
    double loss, kl;
    size_t agree, correct, count;
} sums;

/* Runs every held-out window through the float model f and (when q != NULL) the quantised q. */
static int score(const dt_model *f, const dt_model *q, const dt_an_wq_params *p, sums *fs, sums *qs, dt_error *err) {
    const int T = p->seq, V = f->cfg.vocab_size;
    size_t nw = (p->eval_n - 1) / (size_t)T;
    if ((size_t)p->windows < nw) nw = (size_t)p->windows;
    if (nw == 0) return dt_fail(err, "held-out text of %zu tokens is shorter than one window of %d + 1", p->eval_n, T);
    dt_runstate *rf = dt_runstate_create(f, 1, T, err), *rq = q ? dt_runstate_create(q, 1, T, err) : NULL;
    float *lp = malloc((size_t)V * sizeof(float)), *lq = malloc((size_t)V * sizeof(float));
    int rc = rf && (!q || rq) ? 0 : -1;
    if (rc == 0 && (!lp || !lq)) rc = dt_fail_oom(err, "out of memory");
    memset(fs, 0, sizeof *fs);
    if (qs) memset(qs, 0, sizeof *qs);
    for (size_t w = 0; rc == 0 && w < nw; w++) {
        const int *tok = p->eval_tokens + w * T;
        rc = dt_forward(f, rf, tok, NULL, 1, T, NULL, err);
        if (rc == 0 && q) rc = dt_forward(q, rq, tok, NULL, 1, T, NULL, err);
        for (int t = 0; rc == 0 && t < T; t++) {
            const int target = tok[t + 1];
            log_softmax(lp, dt_runstate_logits(rf) + (size_t)t * V, V);
            const int af = argmax_row(lp, V);
            fs->loss -= lp[target];
            fs->correct += af == target;
            fs->count++;
            if (!q) continue;
            log_softmax(lq, dt_runstate_logits(rq) + (size_t)t * V, V);
            const int aq = argmax_row(lq, V);
            double kl = 0;
            for (int v = 0; v < V; v++) kl += exp((double)lp[v]) * ((double)lp[v] - lq[v]);
            qs->kl += kl;
            qs->loss -= lq[target];
            qs->correct += aq == target;
            qs->agree += aq == af;
            qs->count++;
        }
    }
    dt_runstate_free(rf);
    dt_runstate_free(rq);
    free(lp);
    free(lq);
    return rc;
}

static void fill_types(dt_an_wq_row *r) {
    int counts[8] = {0};
    memset(r->types, 0, sizeof r->types);
    for (int i = 0; i < r->n_stats; i++) {
        const dt_quant_act_stat *s = &r->stats[i];
        int t = 7;
        for (int k = 0; k < 7; k++)
            if (strstr(s->name, type_names[k])) t = k;
        dt_an_wq_outliers *o = &r->types[t];
        o->absmax = fmax(o->absmax, s->absmax);
        o->absmax_smoothed = fmax(o->absmax_smoothed, s->absmax_smoothed);
        o->ratio += s->median > 0 ? s->absmax / s->median : 0;
        o->ratio_smoothed += s->median_smoothed > 0 ? s->absmax_smoothed / s->median_smoothed : 0;
        counts[t]++;
    }
    r->n_types = 0;
    for (int t = 0; t < 8; t++) {
        if (!counts[t]) continue;
        dt_an_wq_outliers o = r->types[t];
        snprintf(o.type, sizeof o.type, "%s", type_names[t]);
        o.ratio /= counts[t];
        o.ratio_smoothed /= counts[t];
        r->types[r->n_types++] = o;
    }
}

static void fill_row(dt_an_wq_row *r, const sums *s, double f32_loss) {
    r->loss = s->loss / (double)s->count;
    r->loss_delta = r->loss - f32_loss;
    r->kl = s->kl / (double)s->count;
    r->top1_agree = (double)s->agree / (double)s->count;
    r->accuracy = (double)s->correct / (double)s->count;
    r->count = s->count;
}

int dt_an_wq_split(dt_an_wq_params *p, const int *tokens, size_t n, const int *calib, size_t n_calib, dt_error *err) {
    dt_train_options d;
    dt_train_defaults(&d);
    const size_t split = dt_train_split(n, d.val_fraction);
    if (p->seq <= 0) return dt_fail(err, "seq %d: must be positive", p->seq);
    if (n - split < (size_t)p->seq + 1)
        return dt_fail(err, "the held-out part (the last %g) of %zu tokens has %zu, fewer than seq + 1 = %d",
                       (double)d.val_fraction, n, n - split, p->seq + 1);
    p->eval_tokens = tokens + split;
    p->eval_n = n - split;
    p->calib_tokens = calib ? calib : tokens;
    p->calib_n = calib ? n_calib : split;
    return 0;
}

int dt_an_wq_run(const dt_model *m, const dt_an_wq_params *p, const dt_an_wq_scheme *schemes, int n, dt_an_wq_row *rows,
              dt_error *err) {
    memset(rows, 0, (size_t)(n + 1) * sizeof *rows);
    sums fs, qs;
    snprintf(rows[0].name, sizeof rows[0].name, "f32");
    rows[0].needle_correct = rows[0].needle_total = -1;
    if (score(m, NULL, p, &fs, NULL, err) != 0) return -1;
    fill_row(&rows[0], &fs, 0);
    rows[0].loss_delta = 0;
    rows[0].top1_agree = 1;
    rows[0].decode_mb = dt_model_decode_bytes(m) / 1e6;
    const dt_run_options plain = {0};
    if (p->needle && dt_an_needle_exact(m, p->needle_tok, &plain, p->needle, p->max_samples, &rows[0].needle_correct,
                                     &rows[0].needle_total, err) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        dt_an_wq_row *r = &rows[1 + i];
        snprintf(r->name, sizeof r->name, "%s", schemes[i].name);
        r->needle_correct = r->needle_total = -1;
        /* a shallow copy: the same float parameters, its own quantised layers (never dt_model_free it) */
        dt_model q = *m;
        q.quant = NULL;
        dt_quant_options o = schemes[i].opt;
        o.calib_tokens = p->calib_tokens;
        o.calib_n = p->calib_n;
        o.calib_path = p->calib_source;
        o.calib_samples = p->calib_samples;
        o.calib_seq = p->calib_seq;
        o.seed = p->seed;
        o.lm_head = p->lm_head;
        o.quiet = 1;
        if (dt_model_quantize(&q, &o, err) != 0) {
            dt_an_wq_rows_free(rows, i + 1);
            return -1;
        }
        int rc = score(m, &q, p, &fs, &qs, err);
        if (rc == 0) {
            fill_row(r, &qs, rows[0].loss);
            r->decode_mb = dt_model_decode_bytes(&q) / 1e6;
            int ns;
            const dt_quant_act_stat *st = dt_model_quant_act_stats(&q, &ns);
            if (ns > 0 && (r->stats = malloc((size_t)ns * sizeof *st))) {
                memcpy(r->stats, st, (size_t)ns * sizeof *st);
                r->n_stats = ns;
                fill_types(r);
            }
        }
        if (rc == 0 && p->needle)
            rc = dt_an_needle_exact(&q, p->needle_tok, &plain, p->needle, p->max_samples, &r->needle_correct, &r->needle_total, err);
        if (dt_model_dequantize(&q, rc == 0 ? err : NULL) != 0) rc = -1; /* quantised here: cannot fail */
        if (rc != 0) {
            dt_an_wq_rows_free(rows, i + 1);
            return -1;
        }
    }
    return 0;
}

void dt_an_wq_rows_free(dt_an_wq_row *rows, int n) {
    for (int i = 0; i <= n; i++) {
        free(rows[i].stats);
        rows[i].stats = NULL;
        rows[i].n_stats = 0;
    }
}

cJSON *dt_an_wq_rows_json(const dt_an_wq_row *rows, int n) {
    cJSON *arr = cJSON_CreateArray();
    int ok = arr != NULL;
    for (int i = 0; ok && i <= n; i++) {
        const dt_an_wq_row *r = &rows[i];
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddItemToArray(arr, e) && cJSON_AddStringToObject(e, "scheme", r->name) &&
             cJSON_AddNumberToObject(e, "loss", r->loss) && cJSON_AddNumberToObject(e, "loss_delta", r->loss_delta) &&
             cJSON_AddNumberToObject(e, "kl", r->kl) && cJSON_AddNumberToObject(e, "top1_agreement", r->top1_agree) &&
             cJSON_AddNumberToObject(e, "accuracy", r->accuracy) &&
             cJSON_AddNumberToObject(e, "count", (double)r->count) &&
             cJSON_AddNumberToObject(e, "decode_weight_mb", r->decode_mb);
        if (ok && r->needle_total >= 0)
            ok = cJSON_AddNumberToObject(e, "needle_correct", r->needle_correct) &&
                 cJSON_AddNumberToObject(e, "needle_total", r->needle_total) &&
                 cJSON_AddNumberToObject(e, "needle_accuracy",
                                         r->needle_total > 0 ? (double)r->needle_correct / r->needle_total : 0.0);
        if (ok && r->n_types) {
            cJSON *ty = cJSON_AddArrayToObject(e, "activation_outliers");
            ok = ty != NULL;
            for (int t = 0; ok && t < r->n_types; t++) {
                cJSON *o = cJSON_CreateObject();
                ok = o && cJSON_AddItemToArray(ty, o) && cJSON_AddStringToObject(o, "layer_type", r->types[t].type) &&
                     cJSON_AddNumberToObject(o, "absmax", r->types[t].absmax) &&
                     cJSON_AddNumberToObject(o, "absmax_over_median", r->types[t].ratio) &&
                     cJSON_AddNumberToObject(o, "absmax_smoothed", r->types[t].absmax_smoothed) &&
                     cJSON_AddNumberToObject(o, "absmax_over_median_smoothed", r->types[t].ratio_smoothed);
            }
            cJSON *layers = ok ? cJSON_AddArrayToObject(e, "layers") : NULL;
            ok = layers != NULL;
            for (int s = 0; ok && s < r->n_stats; s++) {
                const dt_quant_act_stat *st = &r->stats[s];
                cJSON *o = cJSON_CreateObject();
                ok = o && cJSON_AddItemToArray(layers, o) && cJSON_AddStringToObject(o, "name", st->name) &&
                     cJSON_AddNumberToObject(o, "channel_absmax_max", st->absmax) &&
                     cJSON_AddNumberToObject(o, "channel_absmax_median", st->median) &&
                     cJSON_AddNumberToObject(o, "smoothed_max", st->absmax_smoothed) &&
                     cJSON_AddNumberToObject(o, "smoothed_median", st->median_smoothed) &&
                     cJSON_AddNumberToObject(o, "input_scale", st->input_scale);
            }
        }
    }
    if (!ok) {
        cJSON_Delete(arr);
        return NULL;
    }
    return arr;
}
