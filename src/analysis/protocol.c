/* protocol.c — the measurements the failed small-scale reproductions of the paper lacked, on one model and one
 * text: loss overall and by position in the context, attention-sink mass per layer, and the RMS of each head's
 * context before its per-head norm.
 *
 * ---------------------------------------------------------------- definitions
 *
 * Windows. W = min(windows, ⌊n / (seq + 1)⌋) windows of seq + 1 tokens (at least one: n ≥ seq + 1 is
 * required), spread evenly over tokens[0, n): window w starts at ⌊w·(n − seq − 1) / (W − 1)⌋ (0 when W = 1), so
 * the first starts at 0, the last ends at n, and no two overlap (W ≤ n / (seq + 1) keeps the starts at least
 * seq + 1 apart). Evenly spread rather than consecutive from the start: the training text's windows sample the
 * whole of it, not only its first part. Each window is one forward (B = 1, T = seq) of its first seq tokens with
 * the reference attention kernel; position t (0..seq−1) predicts the window's token t + 1.
 *
 * Loss. The next-token cross-entropy at position t is −log softmax(logits_t)[target], computed in double
 * (log-sum-exp with the row's maximum); `loss` is its mean over the W·seq predictions, in nats per token.
 *
 * Position bins. n_bins bins of equal width over positions 0..seq−1: bin k holds positions [bin_start[k],
 * bin_start[k + 1]) with bin_start[k] = ⌊k·seq / n_bins⌋ (bin_start[n_bins] = seq); bin_loss[k] is the mean
 * cross-entropy over the W predictions at each of its positions. Equal width, not log-spaced: every bin then
 * holds the same number of predictions (± one position), so each bin's mean is about equally precise; and the
 * question the bins answer — does the gap between training-text and held-out loss grow late in the context, the
 * memorisation signature — is about the later positions, which log spacing would lump into one or two bins
 * while spending most bins on the first few (noisy, context-free) positions.
 *
 * Attention-sink mass. For each layer, the mean over output heads j, windows and query positions t = 1..seq−1
 * of the weight the head's attention row t puts on position 0 (the window's first token):
 *   Transformer:  W_j[t, 0] = A_j[t, 0], the softmax map of head j (H heads);
 *   DIFF:         W_j[t, 0] = A_j[t, 0] − λ·A_{j+H/2}[t, 0], the differential map (H/2 heads; λ the layer's);
 *   DIFF V2:      W_j[t, 0] = A_p[t, 0] − λ_{t,j}·A_q[t, 0], the combined output head's map with the per-token
 *                 λ of that row (h = H/2 heads; (p, q) = (2j, 2j + 1), or (j, j + h) with v2_pairs "j,j+h";
 *                 λ = 1 where the model has no W_λ).
 * Position t = 0 is left out: there a causal softmax row has one entry, so every map puts exactly 1 on position 0
 * and that would say nothing about the model. For DIFF and DIFF V2 the two softmax maps' own means (of A_j and
 * A_{j+H/2}, or A_p and A_q) are reported too (sink_mass_map1, sink_mass_map2; NAN for the Transformer): a
 * differential row sums to 1 − λ, not 1, so the maps' figures are the ones comparable with the Transformer's.
 *
 * Head-context RMS. For each layer and output head j, sqrt of the mean over windows, positions 0..seq−1 and
 * channels of the squared context vector before any per-head norm (dt_runstate_head_context):
 *   DIFF:         u_j = (A_j − λ·A_{j+H/2})·V_j (2·hd channels), the differential head's output before the
 *                 RMSNorm and the (1 − λinit) scale — what the RMSNorm divides by, per position;
 *   DIFF V2:      o_j = a_p − λ_{t,j}·a_q (hd channels), the combined head's output: V2 has no per-head norm;
 *   Transformer:  the softmax head's output (hd channels), which has no norm either.
 * The mean of squares (not the mean of per-position RMS) so that it is the RMS of all the head's entries.
 *
 * λ. lambda[l] is the λ the maps used: DIFF the layer's λ (dt_model_lambda), DIFF V2 the mean over windows,
 * positions and heads of λ_{t,j}, NAN for the Transformer.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans_analysis.h"

void dt_an_protocol_free(dt_an_protocol *p) {
    free(p->lambda);
    free(p->sink_mass);
    free(p->sink_mass_map1);
    free(p->sink_mass_map2);
    free(p->head_rms);
    memset(p, 0, sizeof *p);
}

/* −log softmax(row)[target] in double */
static double cross_entropy(const float *row, int V, int target) {
    double mx = row[0];
    for (int i = 1; i < V; i++) mx = row[i] > mx ? row[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)row[i] - mx);
    return mx + log(sum) - (double)row[target];
}

/* The first token of window w of W windows of len tokens spread over n: ⌊w·(n − len) / (W − 1)⌋, without
 * forming the product (n may be large). */
static size_t window_start(size_t n, size_t len, int w, int W) {
    if (W <= 1) return 0;
    const size_t d = n - len, q = d / (size_t)(W - 1), r = d % (size_t)(W - 1);
    return (size_t)w * q + (size_t)w * r / (size_t)(W - 1);
}

/* DIFF V2: the query heads output head j of h subtracts (p − λ·q). */
static void v2_pair(const dt_config *c, int j, int h, int *p, int *q) {
    if (c->v2_pairs == DT_V2_PAIRS_CROSS) {
        *p = j;
        *q = j + h;
    } else {
        *p = 2 * j;
        *q = 2 * j + 1;
    }
}

int dt_an_protocol_run(const dt_model *m, const int *tokens, size_t n, int seq, int windows, int n_bins,
                       dt_an_protocol *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    const dt_config *c = &m->cfg;
    const int L = c->num_hidden_layers, V = c->vocab_size;
    const int diff = c->arch == DT_ARCH_DIFF, v2 = c->arch == DT_ARCH_DIFF_V2;
    if (seq < 2) return dt_fail(err, "protocol: seq %d: must be at least 2 (position 0 is not a sink query)", seq);
    if (seq > c->max_position_embeddings)
        return dt_fail(err, "protocol: seq %d: more than the model's max_position_embeddings %d", seq,
                       c->max_position_embeddings);
    if (windows < 1) return dt_fail(err, "protocol: windows %d: must be positive", windows);
    if (n_bins < 1 || n_bins > DT_AN_PROTO_MAX_BINS || n_bins > seq)
        return dt_fail(err, "protocol: n_bins %d: must be in 1..%d and at most seq %d", n_bins, DT_AN_PROTO_MAX_BINS,
                       seq);
    if (!tokens) return dt_fail(err, "protocol: tokens is NULL");
    if (n < (size_t)seq + 1)
        return dt_fail(err, "protocol: n: the text has %zu tokens, fewer than seq + 1 = %d", n, seq + 1);
    const size_t fit = n / ((size_t)seq + 1);
    const int W = fit < (size_t)windows ? (int)fit : windows;

    dt_run_options opt = {.kernel = DT_ATTENTION_REFERENCE};
    dt_runstate *rs = dt_runstate_create_with(m, 1, seq, &opt, err);
    if (!rs) return -1;
    int heads, width;
    dt_runstate_head_context(rs, 0, &heads, &width);
    out->n_layers = L;
    out->n_heads = heads;
    out->head_width = width;
    out->seq = seq;
    out->windows = W;
    out->n_bins = n_bins;
    for (int k = 0; k <= n_bins; k++) out->bin_start[k] = (int)((long long)k * seq / n_bins);
    const size_t nl = (size_t)(L > 0 ? L : 1);
    out->lambda = calloc(nl, sizeof(double));
    out->sink_mass = calloc(nl, sizeof(double));
    out->sink_mass_map1 = calloc(nl, sizeof(double));
    out->sink_mass_map2 = calloc(nl, sizeof(double));
    out->head_rms = calloc(nl * (size_t)heads, sizeof(double));
    double *pos_loss = calloc((size_t)seq, sizeof(double)); /* Σ over windows of the loss at each position */
    if (!out->lambda || !out->sink_mass || !out->sink_mass_map1 || !out->sink_mass_map2 || !out->head_rms || !pos_loss) {
        dt_fail_oom(err, "protocol: out of memory for %d layers × %d heads", L, heads);
        goto fail;
    }
    for (int w = 0; w < W; w++) {
        const int *tok = tokens + window_start(n, (size_t)seq + 1, w, W);
        if (dt_forward(m, rs, tok, NULL, 1, seq, NULL, err) != 0) goto fail;
        const float *lg = dt_runstate_logits(rs);
        for (int t = 0; t < seq; t++) {
            if (tok[t + 1] < 0 || tok[t + 1] >= V) {
                dt_fail(err, "protocol: token id %d at window %d position %d is out of range [0, %d)", tok[t + 1], w,
                        t + 1, V);
                goto fail;
            }
            pos_loss[t] += cross_entropy(lg + (size_t)t * V, V, tok[t + 1]);
        }
        for (int l = 0; l < L; l++) {
            const float *att = dt_runstate_attention(rs, l);
            const size_t map = (size_t)seq * seq;
            size_t nlam = 0;
            const float *tl = v2 ? dt_runstate_token_lambda(rs, l, &nlam) : NULL; /* [T, h] */
            if (tl && nlam != (size_t)seq * heads) {
                dt_fail(err, "protocol: layer %d: %zu token λ values, expected %d", l, nlam, seq * heads);
                goto fail;
            }
            const double lam_l = diff ? (double)dt_model_lambda(m, l) : 0.0;
            double sink = 0, s1 = 0, s2 = 0, lsum = 0;
            for (int j = 0; j < heads; j++) {
                int p = j, q = j + heads; /* DIFF: j and j + H/2 */
                if (v2) v2_pair(c, j, heads, &p, &q);
                const float *a1 = att + (size_t)p * map, *a2 = diff || v2 ? att + (size_t)q * map : NULL;
                for (int t = 1; t < seq; t++) {
                    const double x1 = a1[(size_t)t * seq];
                    if (!a2) {
                        sink += x1;
                        continue;
                    }
                    const double x2 = a2[(size_t)t * seq];
                    const double lam = v2 ? (tl ? (double)tl[(size_t)t * heads + j] : 1.0) : lam_l;
                    sink += x1 - lam * x2;
                    s1 += x1;
                    s2 += x2;
                }
                if (v2)
                    for (int t = 0; t < seq; t++) lsum += tl ? (double)tl[(size_t)t * heads + j] : 1.0;
            }
            out->sink_mass[l] += sink;
            out->sink_mass_map1[l] += s1;
            out->sink_mass_map2[l] += s2;
            out->lambda[l] += v2 ? lsum : lam_l;
            const float *ctx = dt_runstate_head_context(rs, l, NULL, NULL); /* [T, heads, width] */
            for (int t = 0; t < seq; t++)
                for (int j = 0; j < heads; j++) {
                    const float *x = ctx + ((size_t)t * heads + j) * width;
                    double ss = 0;
                    for (int e = 0; e < width; e++) ss += (double)x[e] * x[e];
                    out->head_rms[(size_t)l * heads + j] += ss;
                }
        }
    }
    double total = 0;
    for (int t = 0; t < seq; t++) total += pos_loss[t];
    out->loss = total / ((double)W * seq);
    for (int k = 0; k < n_bins; k++) {
        double s = 0;
        for (int t = out->bin_start[k]; t < out->bin_start[k + 1]; t++) s += pos_loss[t];
        out->bin_loss[k] = s / ((double)W * (out->bin_start[k + 1] - out->bin_start[k]));
    }
    const double rows = (double)W * heads * (seq - 1);
    for (int l = 0; l < L; l++) {
        out->sink_mass[l] /= rows;
        out->sink_mass_map1[l] = diff || v2 ? out->sink_mass_map1[l] / rows : NAN;
        out->sink_mass_map2[l] = diff || v2 ? out->sink_mass_map2[l] / rows : NAN;
        out->lambda[l] = diff ? out->lambda[l] / W : v2 ? out->lambda[l] / ((double)W * seq * heads) : NAN;
        for (int j = 0; j < heads; j++) {
            double *r = &out->head_rms[(size_t)l * heads + j];
            *r = sqrt(*r / ((double)W * seq * width));
        }
    }
    free(pos_loss);
    dt_runstate_free(rs);
    return 0;
fail:
    free(pos_loss);
    dt_runstate_free(rs);
    dt_an_protocol_free(out);
    return -1;
}

/* ---------------------------------------------------------------- JSON */

static int add_num(cJSON *o, const char *k, double v) {
    return (isnan(v) ? cJSON_AddNullToObject(o, k) : cJSON_AddNumberToObject(o, k, v)) != NULL;
}

/* An array of numbers, NaN as null (cJSON_CreateDoubleArray would write NaN as null too, but
 * only by accident of its printer). */
static int add_values(cJSON *o, const char *k, const double *v, int n) {
    cJSON *a = cJSON_CreateArray();
    int ok = a != NULL;
    for (int i = 0; ok && i < n; i++) {
        cJSON *x = isnan(v[i]) ? cJSON_CreateNull() : cJSON_CreateNumber(v[i]);
        ok = x && cJSON_AddItemToArray(a, x);
        if (!ok) cJSON_Delete(x);
    }
    if (ok && cJSON_AddItemToObject(o, k, a)) return 1;
    cJSON_Delete(a);
    return 0;
}

int dt_an_protocol_add_json(cJSON *o, const dt_an_protocol *p) {
    int ok = cJSON_AddNumberToObject(o, "seq", p->seq) && cJSON_AddNumberToObject(o, "windows", p->windows) &&
             cJSON_AddNumberToObject(o, "heads", p->n_heads) && cJSON_AddNumberToObject(o, "head_width", p->head_width) &&
             add_num(o, "loss", p->loss);
    cJSON *bins = ok ? cJSON_AddArrayToObject(o, "bins") : NULL;
    ok = ok && bins;
    for (int k = 0; ok && k < p->n_bins; k++) {
        cJSON *b = cJSON_CreateObject();
        ok = b && cJSON_AddItemToArray(bins, b);
        if (!ok) {
            cJSON_Delete(b);
            break;
        }
        ok = cJSON_AddNumberToObject(b, "first", p->bin_start[k]) &&
             cJSON_AddNumberToObject(b, "last", p->bin_start[k + 1] - 1) && add_num(b, "loss", p->bin_loss[k]);
    }
    if (!ok || !p->sink_mass) return ok ? 0 : -1;
    const int L = p->n_layers;
    ok = add_values(o, "lambda", p->lambda, L) && add_values(o, "sink_mass", p->sink_mass, L) &&
         add_values(o, "sink_mass_map1", p->sink_mass_map1, L) && add_values(o, "sink_mass_map2", p->sink_mass_map2, L);
    cJSON *rms = ok ? cJSON_AddArrayToObject(o, "head_rms") : NULL; /* [layer][head] */
    ok = ok && rms;
    for (int l = 0; ok && l < L; l++) {
        cJSON *row = cJSON_CreateArray();
        ok = row && cJSON_AddItemToArray(rms, row);
        if (!ok) {
            cJSON_Delete(row);
            break;
        }
        for (int j = 0; ok && j < p->n_heads; j++) {
            cJSON *x = cJSON_CreateNumber(p->head_rms[(size_t)l * p->n_heads + j]);
            ok = x && cJSON_AddItemToArray(row, x);
            if (!ok) cJSON_Delete(x);
        }
    }
    return ok ? 0 : -1;
}
