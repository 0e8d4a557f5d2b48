/* analyze.c — the paper's analyses of trained models: the computations behind `difftrans analyze`.
 *
 * ---------------------------------------------------------------- outliers
 *
 * Text windows: up to W consecutive, non-overlapping windows of T bytes from the start of the file,
 * one forward (B = 1) each, with the reference attention kernel keeping the scaled pre-softmax
 * scores (q·kᵀ/√hd, after RoPE, before the mask/softmax and before ALiBi's bias: −m·(t − c) is a
 * fixed function of the distance, 64 at 256 positions for a slope of 1/4, not an activation).
 *   attention logits: every causal entry (column ≤ row) of every layer, every query head (for DIFF
 *                     both maps of each differential head), every window;
 *   hidden states:    every entry of the residual stream entering layers 0 .. L (layer 0 = the
 *                     token embeddings, layer L = the input of the final norm), every window.
 * Of the absolute values: top-1 (largest), top-10 (the 10th largest) and the median (the middle
 * value, the mean of the two middle ones for an even count). Exact: every |x| is kept (4 bytes each).
 *
 * ---------------------------------------------------------------- quantisation
 *
 * dt_run_options.logit_bits = b fake-quantises the scaled scores before the softmax: symmetric,
 * x → round(x / s)·s with s = absmax / (2^(b−1) − 1), absmax over the causal scores of one head map
 * (one query head, one sequence) by default or of one query row (logit_per_row). The per-map
 * absmax looks at all rows of the window, so per-map quantisation is not causal (a later query's
 * score sets the step of earlier rows); per-row quantisation is. Loss = mean next-byte cross-
 * entropy over windows of T + 1 bytes; accuracy = fraction of positions whose argmax (lowest id
 * on a tie) equals the next byte. The unquantised row (bits 0) runs the same reference kernel.
 *
 * Needle exact match, teacher-forced: a sample's whole text (context, then every question with its
 * true answer) goes through one causal forward; query r is correct when, for every i < answer
 * length, the argmax of the logits at position prompt_end − 1 + i is the answer's byte i. This is
 * exactly greedy decoding's exact match (what `difftrans needle eval` scores): by induction on i,
 * if the first i greedy bytes equal the answer, greedy decoding's next input prefix equals the
 * teacher-forced prefix, so its next byte is the teacher-forced argmax; hence greedy reproduces the
 * whole answer iff every teacher-forced argmax matches. The positions after the answer cannot
 * influence it (causal). Caveats: ties and float rounding (KV-cache kernel vs. the reference
 * kernel here) can flip a near-tie; with per-map quantisation the step depends on the whole
 * sample's text, which a KV-cache decode could not know (the equivalence is then to greedy
 * decoding under that same fixed step).
 *
 * ---------------------------------------------------------------- allocation
 *
 * For each test sample and each of its queries, one query row: the position that predicts the
 * first answer byte, i.e. prompt_end_offset − 1 (the space ending "Answer: "). Context = bytes
 * [0, context_length); answer span = the queried needle's value bytes [value_offset,
 * value_offset + value_length) inside the context. For a model with a real vocabulary these are
 * token positions (textmap.h): the row is the last token ending at or before prompt_end_offset,
 * the context the tokens ending within context_length bytes, the span the tokens overlapping the
 * value's bytes (" 12345" counts whole when the value is "12345"). For each layer and head, the signed weight of
 * column j is
 *     baseline:   w_j = A_i[row, j]                    (softmax of query head i; row sums to 1)
 *     DIFF:       w_j = A_i[row, j] − λ·A_{i+H/2}[row, j]   (differential head i < H/2; row sums to 1 − λ)
 * with λ = dt_model_lambda of the layer. From the raw sums
 *     span = Σ_span w,  span_abs = Σ_span |w|,  context = Σ_ctx w,  context_abs = Σ_ctx |w|,
 *     row = Σ_{j ≤ row} w,
 * answer share = span / context_abs and noise share = (context_abs − span_abs) / context_abs. So
 * every negative weight counts by its magnitude in the denominator (a negative weight is as much
 * "attention on the context" as a positive one — it moves the output just as much), a negative
 * weight inside the span lowers the answer share, and a negative weight outside it counts as noise.
 * For the baseline (w ≥ 0) the shares are the span's and the rest of the context's fraction of the
 * context's attention mass, summing to 1; for DIFF answer + noise = 1 − 2·(negative span mass) /
 * context_abs ≤ 1. Per layer the shares and raw sums are averaged with equal weight over heads,
 * queries and samples; the overall figures are the means over layers.
 *
 * ---------------------------------------------------------------- training dynamics
 *
 * metrics.jsonl (one object per step: step, train_loss, optional val_loss, grad_norm, lambda[L]).
 * λ: per layer the value of the first and the last line and the min/max over all lines.
 * Gradient norm: mean, population std and max over all lines. Spike: line i (with at least
 * DT_AN_SPIKE_MIN_HISTORY = 10 earlier lines) whose grad_norm exceeds mean + 3·std of the preceding
 * min(i, 50) lines, or exceeds 3× their median. Every flagged line counts (a spike lasting two steps
 * counts twice). Final train loss = the last line's; final val loss = the last line carrying one.
 * λ over training: the λ of P = min(DT_AN_LAMBDA_POINTS, lines) lines, line k·(n − 1)/(P − 1)
 * rounded to nearest (k = 0..P−1; the first and the last line among them), with their steps.
 */
#include "analysis/needle.h"
#include "difftrans_analysis.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "base/base.h"

#define AN_MAX_VALUES ((size_t)1 << 30) /* 4 GB of |x|: refuse beyond (shrink seq / windows) */

/* ---------------------------------------------------------------- |x| statistics */

int dt_an_abs_acc_add(dt_an_abs_acc *a, const float *x, size_t n, dt_error *err) {
    /* the capacity doubles from 4096, a power of two: it stays within the limit exactly when
     * what it must hold does */
    if (n > AN_MAX_VALUES - a->n)
        return dt_fail(err, "outlier statistics: more than %zu values to keep (use a shorter seq or fewer windows)",
                       AN_MAX_VALUES);
    if (grow_array(&a->v, &a->cap, a->n + n, sizeof *a->v, 4096) != 0)
        return dt_fail_oom(err, "out of memory keeping %zu values for the outlier statistics", a->n + n);
    for (size_t i = 0; i < n; i++) a->v[a->n + i] = fabsf(x[i]);
    a->n += n;
    return 0;
}

static void swapf(float *a, float *b) {
    float t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges v[0, n) so that v[k] is the k-th smallest (0-based) with nothing larger before it
 * (quickselect, median-of-three pivot, three-way partition so runs of equal values are cheap). */
static void select_kth(float *v, size_t n, size_t k) {
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
        float x = v[lo], y = v[lo + (hi - lo) / 2], z = v[hi - 1];
        float p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            if (v[i] < p)
                swapf(&v[lt++], &v[i++]);
            else if (v[i] > p)
                swapf(&v[i], &v[--gt]);
            else
                i++;
        }
        if (k < lt)
            hi = lt;
        else if (k >= gt)
            lo = gt;
        else
            return;
    }
}

static float max_of(const float *v, size_t n) {
    float m = v[0];
    for (size_t i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

void dt_an_abs_acc_stats(dt_an_abs_acc *a, dt_an_abs_stats *out) {
    memset(out, 0, sizeof *out);
    size_t n = a->n;
    out->count = n;
    if (n == 0) return;
    float *v = a->v;
    out->top1 = max_of(v, n);
    size_t k10 = n >= 10 ? n - 10 : 0;
    select_kth(v, n, k10);
    out->top10 = v[k10];
    size_t mid = n / 2;
    select_kth(v, n, mid);
    double hi = v[mid];
    if (n % 2 == 0) {
        double lo = max_of(v, mid); /* everything before v[mid] is ≤ it: the largest is the (mid−1)-th */
        out->median = 0.5 * (lo + hi);
    } else {
        out->median = hi;
    }
}

void dt_an_abs_acc_free(dt_an_abs_acc *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

int dt_an_abs_stats_of(const float *x, size_t n, dt_an_abs_stats *out, dt_error *err) {
    dt_an_abs_acc a = {0};
    if (dt_an_abs_acc_add(&a, x, n, err) != 0) return -1;
    dt_an_abs_acc_stats(&a, out);
    dt_an_abs_acc_free(&a);
    return 0;
}

/* ---------------------------------------------------------------- outliers */

void dt_an_outliers_free(dt_an_outliers *o) {
    free(o->layer_logit_max);
    free(o->layer_hidden_max);
    memset(o, 0, sizeof *o);
}

int dt_an_outliers_run(const dt_model *m, const int *tokens, size_t n, int seq, int windows, dt_an_outliers *out,
                    dt_error *err) {
    memset(out, 0, sizeof *out);
    const dt_config *c = &m->cfg;
    const int L = c->num_hidden_layers, H = c->num_attention_heads, C = c->hidden_size;
    if (seq <= 0 || windows <= 0)
        return dt_fail(err, "outliers: seq %d and windows %d must be positive", seq, windows);
    if (n < (size_t)seq) return dt_fail(err, "outliers: the text has %zu tokens, fewer than seq %d", n, seq);
    size_t fit = n / (size_t)seq;
    int W = fit < (size_t)windows ? (int)fit : windows;
    dt_run_options opt = {.kernel = DT_ATTENTION_REFERENCE, .keep_logits = 1};
    dt_runstate *rs = dt_runstate_create_with(m, 1, seq, &opt, err);
    if (!rs) return -1;
    dt_an_abs_acc la = {0}, ha = {0};
    out->n_layers = L;
    out->seq = seq;
    out->windows = W;
    out->layer_logit_max = calloc((size_t)L, sizeof(double));
    out->layer_hidden_max = calloc((size_t)L + 1, sizeof(double));
    if (!out->layer_logit_max || !out->layer_hidden_max) {
        dt_fail_oom(err, "out of memory");
        goto fail;
    }
    for (int w = 0; w < W; w++) {
        const int *tok = tokens + (size_t)w * seq;
        if (dt_forward(m, rs, tok, NULL, 1, seq, NULL, err) != 0) goto fail;
        for (int l = 0; l < L; l++) {
            const float *lg = dt_runstate_attention_logits(rs, l);
            for (int h = 0; h < H; h++)
                for (int t = 0; t < seq; t++) {
                    const float *r = lg + ((size_t)h * seq + t) * seq;
                    for (int j = 0; j <= t; j++) {
                        double v = fabs(r[j]);
                        if (v > out->layer_logit_max[l]) out->layer_logit_max[l] = v;
                    }
                    if (dt_an_abs_acc_add(&la, r, (size_t)t + 1, err) != 0) goto fail;
                }
        }
        for (int l = 0; l <= L; l++) {
            const float *hs = dt_runstate_hidden(rs, l);
            size_t cnt = (size_t)seq * C;
            for (size_t i = 0; i < cnt; i++) {
                double v = fabs(hs[i]);
                if (v > out->layer_hidden_max[l]) out->layer_hidden_max[l] = v;
            }
            if (dt_an_abs_acc_add(&ha, hs, cnt, err) != 0) goto fail;
        }
    }
    dt_an_abs_acc_stats(&la, &out->logits);
    dt_an_abs_acc_stats(&ha, &out->hidden);
    dt_an_abs_acc_free(&la);
    dt_an_abs_acc_free(&ha);
    dt_runstate_free(rs);
    return 0;
fail:
    dt_an_abs_acc_free(&la);
    dt_an_abs_acc_free(&ha);
    dt_runstate_free(rs);
    dt_an_outliers_free(out);
    return -1;
}

/* ---------------------------------------------------------------- quantisation */

static int argmax_of(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int dt_an_eval_text(const dt_model *m, const dt_run_options *opt, const int *tokens, size_t n, int seq, int windows,
                 double *loss, double *accuracy, size_t *count, dt_error *err) {
    const int V = m->cfg.vocab_size;
    if (seq <= 0 || windows <= 0)
        return dt_fail(err, "evaluation: seq %d and windows %d must be positive", seq, windows);
    if (n < (size_t)seq + 1)
        return dt_fail(err, "evaluation: the text has %zu tokens, fewer than seq + 1 = %d", n, seq + 1);
    size_t fit = (n - 1) / (size_t)seq;
    int W = fit < (size_t)windows ? (int)fit : windows;
    dt_run_options o = opt ? *opt : (dt_run_options){0};
    o.kernel = DT_ATTENTION_REFERENCE;
    dt_runstate *rs = dt_runstate_create_with(m, 1, seq, &o, err);
    if (!rs) return -1;
    double sum = 0;
    size_t hits = 0, cnt = 0;
    for (int w = 0; w < W; w++) {
        const int *tok = tokens + (size_t)w * seq;
        float l;
        if (dt_forward(m, rs, tok, tok + 1, 1, seq, &l, err) != 0) {
            dt_runstate_free(rs);
            return -1;
        }
        sum += (double)l * seq;
        const float *lg = dt_runstate_logits(rs);
        for (int t = 0; t < seq; t++) hits += argmax_of(lg + (size_t)t * V, V) == tok[t + 1];
        cnt += (size_t)seq;
    }
    dt_runstate_free(rs);
    *loss = sum / (double)cnt;
    *accuracy = (double)hits / (double)cnt;
    *count = cnt;
    return 0;
}

/* The first ns samples as the model reads them: *enc (free with dt_needle_encoded_free) and the
 * longest in tokens. */
static int encode_needle_set(const dt_model *m, const dt_tok *tok, const dt_needle_testset *ts, int ns, an_tokens **enc,
                             int *tmax, dt_error *err) {
    *enc = calloc((size_t)ns, sizeof **enc);
    if (!*enc) return dt_fail_oom(err, "out of memory for %d samples", ns);
    if (dt_needle_encode_testset(m, tok, ts, ns, *enc, tmax, err) != 0) {
        dt_needle_encoded_free(*enc, ns);
        *enc = NULL;
        return -1;
    }
    if (*tmax < 1) *tmax = 1;
    return 0;
}

int dt_an_needle_exact(const dt_model *m, const dt_tok *tok, const dt_run_options *opt, const dt_needle_testset *ts,
                    int max_samples, int *correct, int *total, dt_error *err) {
    const int V = m->cfg.vocab_size;
    int ns = max_samples > 0 && max_samples < ts->n ? max_samples : ts->n;
    if (ns == 0) return dt_fail_format(err, "%s: no test samples", ts->path);
    int T;
    an_tokens *enc;
    if (encode_needle_set(m, tok, ts, ns, &enc, &T, err) != 0) return -1;
    dt_run_options o = opt ? *opt : (dt_run_options){0};
    o.kernel = DT_ATTENTION_REFERENCE;
    dt_runstate *rs = dt_runstate_create_with(m, 1, T, &o, err);
    if (!rs) {
        dt_needle_encoded_free(enc, ns);
        return -1;
    }
    int ok = 0, all = 0;
    for (int s = 0; s < ns; s++) {
        const dt_needle_sample *sm = &ts->samples[s];
        const an_tokens *e = &enc[s];
        if (dt_forward(m, rs, e->ids, NULL, 1, e->n, NULL, err) != 0) {
            dt_runstate_free(rs);
            dt_needle_encoded_free(enc, ns);
            return -1;
        }
        const float *lg = dt_runstate_logits(rs);
        for (int r = 0; r < sm->n_queries; r++) {
            const dt_needle_query *q = &sm->queries[r];
            int first = an_tokens_before(e, q->prompt_end_offset);
            int stop = an_tokens_covering(e, q->prompt_end_offset + q->answer_length);
            int good = 1;
            for (int pos = first - 1; pos < stop - 1 && good; pos++)
                good = argmax_of(lg + (size_t)pos * V, V) == e->ids[pos + 1];
            ok += good;
            all++;
        }
    }
    dt_runstate_free(rs);
    dt_needle_encoded_free(enc, ns);
    *correct = ok;
    *total = all;
    return 0;
}

int dt_an_quant_run(const dt_model *m, const dt_an_quant_params *p, dt_an_quant_row *rows, dt_error *err) {
    if (p->n_bits < 0 || (p->n_bits > 0 && !p->bits))
        return dt_fail(err, "logit quantisation: n_bits %d with bits %s", p->n_bits, p->bits ? "given" : "NULL");
    /* 1 bit, symmetric, has no level but zero (2^0 − 1 steps): every score would be 0·∞ */
    for (int b = 0; b < p->n_bits; b++)
        if (p->bits[b] < 2 || p->bits[b] > 24)
            return dt_fail(err, "logit quantisation: bits %d: must be in 2..24", p->bits[b]);
    for (int b = 0; b <= p->n_bits; b++) {
        dt_an_quant_row *q = &rows[b];
        memset(q, 0, sizeof *q);
        q->bits = b == 0 ? 0 : p->bits[b - 1];
        q->needle_total = q->needle_correct = -1;
        const dt_run_options o = {.kernel = DT_ATTENTION_REFERENCE, .logit_bits = q->bits, .logit_per_row = p->per_row};
        if (dt_an_eval_text(m, &o, p->tokens, p->n, p->seq, p->windows, &q->loss, &q->accuracy, &q->count, err) != 0 ||
            (p->needle && dt_an_needle_exact(m, p->needle_tok, &o, p->needle, p->max_samples, &q->needle_correct,
                                             &q->needle_total, err) != 0)) {
            memset(rows, 0, (size_t)(p->n_bits + 1) * sizeof *rows);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- allocation */

void dt_an_alloc_row(const float *a1, const float *a2, float lambda, int T, int row, int ctx_len, int span0, int span_len,
                  dt_an_alloc_sums *out) {
    memset(out, 0, sizeof *out);
    const float *r1 = a1 + (size_t)row * T, *r2 = a2 ? a2 + (size_t)row * T : NULL;
    for (int j = 0; j <= row && j < T; j++) {
        double w = r1[j] - (r2 ? (double)lambda * r2[j] : 0.0);
        out->row += w;
        if (j < ctx_len) {
            out->context += w;
            out->context_abs += fabs(w);
            if (j >= span0 && j < span0 + span_len) {
                out->span += w;
                out->span_abs += fabs(w);
            }
        }
    }
}

double dt_an_alloc_answer_share(const dt_an_alloc_sums *s) { return s->context_abs > 0 ? s->span / s->context_abs : 0.0; }
double dt_an_alloc_noise_share(const dt_an_alloc_sums *s) {
    return s->context_abs > 0 ? (s->context_abs - s->span_abs) / s->context_abs : 0.0;
}

void dt_an_allocation_free(dt_an_allocation *a) {
    free(a->answer_share);
    free(a->noise_share);
    free(a->span);
    free(a->span_abs);
    free(a->context);
    free(a->context_abs);
    free(a->row);
    memset(a, 0, sizeof *a);
}

int dt_an_allocation_run(const dt_model *m, const dt_tok *tok, const dt_needle_testset *ts, int max_samples,
                      dt_an_allocation *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    const dt_config *c = &m->cfg;
    const int L = c->num_hidden_layers, H = c->num_attention_heads, diff = c->arch == DT_ARCH_DIFF;
    const int v2 = c->arch == DT_ARCH_DIFF_V2, heads = diff || v2 ? H / 2 : H;
    int ns = max_samples > 0 && max_samples < ts->n ? max_samples : ts->n;
    if (ns == 0) return dt_fail_format(err, "%s: no test samples", ts->path);
    int T;
    an_tokens *enc;
    if (encode_needle_set(m, tok, ts, ns, &enc, &T, err) != 0) return -1;
    dt_run_options o = {.kernel = DT_ATTENTION_REFERENCE};
    dt_runstate *rs = dt_runstate_create_with(m, 1, T, &o, err);
    if (!rs) {
        dt_needle_encoded_free(enc, ns);
        return -1;
    }
    double **fields[] = {&out->answer_share, &out->noise_share, &out->span, &out->span_abs,
                         &out->context,      &out->context_abs, &out->row};
    int bad = 0;
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++)
        bad |= !(*fields[f] = calloc((size_t)L, sizeof(double)));
    if (bad) {
        dt_fail_oom(err, "out of memory");
        goto fail;
    }
    out->n_layers = L;
    out->heads = heads;
    out->samples = ns;
    long nrows = 0;
    for (int s = 0; s < ns; s++) {
        const dt_needle_sample *sm = &ts->samples[s];
        const an_tokens *e = &enc[s];
        const int len = e->n, ctx_len = an_tokens_before(e, sm->context_length);
        if (dt_forward(m, rs, e->ids, NULL, 1, len, NULL, err) != 0) goto fail;
        for (int r = 0; r < sm->n_queries; r++) {
            const dt_needle_query *q = &sm->queries[r];
            const dt_needle_needle *nd = &sm->needles[q->needle];
            /* in tokens: the row predicting the answer's first token, the tokens overlapping the value */
            const int row = an_tokens_before(e, q->prompt_end_offset) - 1;
            const int span0 = an_tokens_before(e, nd->value_offset);
            const int span_len = an_tokens_covering(e, nd->value_offset + nd->value_length) - span0;
            for (int l = 0; l < L; l++) {
                const float *att = dt_runstate_attention(rs, l);
                /* DIFF V2's output head subtracts its second query head's map with the row's own λ; read
                 * as separate softmax maps its heads were a Transformer's */
                size_t nlam = 0;
                const float *tl = v2 ? dt_runstate_token_lambda(rs, l, &nlam) : NULL; /* [T, h] */
                if (tl && nlam != (size_t)len * heads) {
                    dt_fail(err, "allocation: layer %d: %zu token λ values, expected %d", l, nlam, len * heads);
                    goto fail;
                }
                for (int h = 0; h < heads; h++) {
                    const float lambda = v2 ? (tl ? tl[(size_t)row * heads + h] : 1.0f)
                                            : diff ? dt_model_lambda(m, l) : 0.0f;
                    const float *a1 = att + (size_t)dt_config_query_head(c, h, 0) * len * len;
                    const float *a2 = diff || v2 ? att + (size_t)dt_config_query_head(c, h, 1) * len * len : NULL;
                    dt_an_alloc_sums sums;
                    dt_an_alloc_row(a1, a2, lambda, len, row, ctx_len, span0, span_len, &sums);
                    out->answer_share[l] += dt_an_alloc_answer_share(&sums);
                    out->noise_share[l] += dt_an_alloc_noise_share(&sums);
                    out->span[l] += sums.span;
                    out->span_abs[l] += sums.span_abs;
                    out->context[l] += sums.context;
                    out->context_abs[l] += sums.context_abs;
                    out->row[l] += sums.row;
                }
            }
            nrows++;
        }
    }
    out->rows = (int)nrows;
    double denom = (double)nrows * heads;
    for (int l = 0; l < L; l++) {
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) (*fields[f])[l] /= denom > 0 ? denom : 1;
        out->mean_answer_share += out->answer_share[l] / L;
        out->mean_noise_share += out->noise_share[l] / L;
    }
    dt_needle_encoded_free(enc, ns);
    dt_runstate_free(rs);
    return 0;
fail:
    dt_needle_encoded_free(enc, ns);
    dt_runstate_free(rs);
    dt_an_allocation_free(out);
    return -1;
}

/* ---------------------------------------------------------------- training dynamics */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int dt_an_spikes(const double *g, int n, int *flags) {
    double win[DT_AN_SPIKE_WINDOW];
    int count = 0;
    for (int i = 0; i < n; i++) {
        flags[i] = 0;
        if (i < DT_AN_SPIKE_MIN_HISTORY) continue;
        int k = i < DT_AN_SPIKE_WINDOW ? i : DT_AN_SPIKE_WINDOW;
        double mean = 0, var = 0;
        for (int j = 0; j < k; j++) {
            win[j] = g[i - k + j];
            mean += win[j];
        }
        mean /= k;
        for (int j = 0; j < k; j++) var += (win[j] - mean) * (win[j] - mean);
        double sd = sqrt(var / k);
        qsort(win, (size_t)k, sizeof win[0], cmp_double);
        double med = k % 2 ? win[k / 2] : 0.5 * (win[k / 2 - 1] + win[k / 2]);
        if (g[i] > mean + 3 * sd || g[i] > 3 * med) {
            flags[i] = 1;
            count++;
        }
    }
    return count;
}

void dt_an_training_free(dt_an_training *t) {
    free(t->lambda_at);
    free(t->lambda_first);
    free(t->lambda_last);
    free(t->lambda_min);
    free(t->lambda_max);
    free(t->spike_steps);
    memset(t, 0, sizeof *t);
}

static char *read_text(const char *path, dt_error *err) {
    FILE *f = open_regular_file(path, err);
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (grow_array(&buf, &cap, n + 2, 1, 1 << 16) != 0) { /* room for a byte more and the NUL */
            free(buf);
            buf = NULL;
            break;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (!buf) {
        dt_fail_oom(err, "%s: out of memory reading it", path);
        return NULL;
    }
    if (rerr) {
        free(buf);
        dt_fail_io(err, "%s: read error", path);
        return NULL;
    }
    if (memchr(buf, '\0', n)) { /* the lines after it would be silently gone */
        free(buf);
        dt_fail_format(err, "%s: a NUL byte inside (not a metrics.jsonl written by train?)", path);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* a finite number (cJSON reads 1e999 as inf) */
static int get_number(const cJSON *o, const char *name, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) return -1;
    *v = x->valuedouble;
    return 0;
}

/* batch, grad_accum and seq from a run's train_state.json, as train wrote them (grad_accum, newer, may be absent) */
static int load_step_tokens(const char *path, dt_an_training *out, dt_error *err) {
    char *text = read_text(path, err);
    if (!text) return -1;
    cJSON *j = cJSON_Parse(text);
    if (!j) {
        const int oom = json_text_valid(text, strlen(text));
        free(text);
        return oom ? dt_fail_oom(err, "%s: out of memory parsing it", path)
                   : dt_fail_format(err, "%s: not JSON (not a train_state.json written by train?)", path);
    }
    free(text);
    static const char *const keys[] = {"batch", "grad_accum", "seq"};
    int *const dst[] = {&out->batch, &out->grad_accum, &out->seq};
    for (int k = 0; k < 3; k++) {
        const cJSON *x = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, keys[k]) : NULL;
        if (!x && k == 1) {
            out->grad_accum = 1;
            continue;
        }
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= 1 && x->valuedouble <= 1 << 20) ||
            x->valuedouble != floor(x->valuedouble)) {
            cJSON_Delete(j);
            out->batch = out->grad_accum = out->seq = 0;
            return dt_fail_format(err, "%s: \"%s\" is not an integer in 1..%d", path, keys[k], 1 << 20);
        }
        *dst[k] = (int)x->valuedouble;
    }
    cJSON_Delete(j);
    return 0;
}

int dt_an_training_load(const char *path, dt_an_training *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    out->arch = -1;
    out->final_val_loss = NAN;
    struct stat st;
    if (stat(path, &st) != 0) return dt_fail_io(err, "%s: %s", path, strerror(errno));
    char cfgpath[4200] = "", statepath[4200] = "";
    if (S_ISDIR(st.st_mode)) {
        if (dt_pathf(out->path, sizeof out->path, err, "%s/metrics.jsonl", path) ||
            dt_pathf(cfgpath, sizeof cfgpath, err, "%s/config.json", path) ||
            dt_pathf(statepath, sizeof statepath, err, "%s/train_state.json", path))
            return -1;
    } else if (dt_pathf(out->path, sizeof out->path, err, "%s", path)) {
        return -1;
    }
    int cfg_layers = -1; /* λ values a line must hold, when the run's config.json says */
    if (cfgpath[0] && access(cfgpath, F_OK) == 0) {
        dt_config cfg;
        if (dt_config_load(&cfg, cfgpath, err) != 0) return -1;
        out->arch = cfg.arch;
        cfg_layers = cfg.num_hidden_layers;
    }
    if (statepath[0] && access(statepath, F_OK) == 0 && load_step_tokens(statepath, out, err) != 0) return -1;
    char *text = read_text(out->path, err);
    if (!text) return -1;
    size_t cap = 0;
    int n = 0, L = -1;
    double *gn = NULL, *lam_all = NULL; /* lam_all: [lines × L] every λ, for the points over training */
    size_t lam_cap = 0;
    int *steps = NULL;
    char *save = NULL;
    int lineno = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        while (*line == ' ' || *line == '\t' || *line == '\r') line++;
        if (!*line) continue;
        cJSON *o = cJSON_Parse(line);
        if (!o && json_text_valid(line, strlen(line))) {
            dt_fail_oom(err, "%s:%d: out of memory parsing the line", out->path, lineno);
            goto fail;
        }
        double step, loss, g, val;
        const cJSON *lam = o ? cJSON_GetObjectItemCaseSensitive(o, "lambda") : NULL;
        if (!o || !cJSON_IsObject(o) || get_number(o, "step", &step) || get_number(o, "train_loss", &loss) ||
            get_number(o, "grad_norm", &g) || !cJSON_IsArray(lam)) {
            cJSON_Delete(o);
            dt_fail_format(err, "%s:%d: not a metrics line (needs step, train_loss, grad_norm as finite numbers and a "
                                "lambda array)",
                           out->path, lineno);
            goto fail;
        }
        /* steps count up from 1 (a resumed run rewrites what followed its checkpoint) */
        if (step != floor(step) || step < 1 || step > 1e9 || (n > 0 && step <= steps[n - 1]) || !(g >= 0)) {
            cJSON_Delete(o);
            dt_fail_format(err, "%s:%d: step %g, grad_norm %g: steps are integers counting up from 1 and gradient "
                                "norms are >= 0",
                           out->path, lineno, step, g);
            goto fail;
        }
        int nl = cJSON_GetArraySize(lam);
        if (cfg_layers >= 0 && nl != cfg_layers) {
            cJSON_Delete(o);
            dt_fail_format(err, "%s:%d: %d λ values for the %d layers of %s", out->path, lineno, nl, cfg_layers,
                           cfgpath);
            goto fail;
        }
        if (L < 0) {
            L = nl;
            out->n_layers = L;
            size_t sz = (size_t)(L > 0 ? L : 1) * sizeof(double);
            out->lambda_first = malloc(sz);
            out->lambda_last = malloc(sz);
            out->lambda_min = malloc(sz);
            out->lambda_max = malloc(sz);
            if (!out->lambda_first || !out->lambda_last || !out->lambda_min || !out->lambda_max) {
                cJSON_Delete(o);
                dt_fail_oom(err, "out of memory");
                goto fail;
            }
        } else if (nl != L) {
            cJSON_Delete(o);
            dt_fail_format(err, "%s:%d: %d λ values, but earlier lines have %d", out->path, lineno, nl, L);
            goto fail;
        }
        if (L > 0 && grow_array(&lam_all, &lam_cap, ((size_t)n + 1) * (size_t)L, sizeof *lam_all, 256) != 0) {
            cJSON_Delete(o);
            dt_fail_oom(err, "out of memory");
            goto fail;
        }
        for (int l = 0; l < L; l++) {
            const cJSON *x = cJSON_GetArrayItem(lam, l);
            if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) {
                cJSON_Delete(o);
                dt_fail_format(err, "%s:%d: lambda[%d] is not a finite number", out->path, lineno, l);
                goto fail;
            }
            double v = x->valuedouble;
            lam_all[(size_t)n * L + l] = v;
            if (n == 0) out->lambda_first[l] = out->lambda_min[l] = out->lambda_max[l] = v;
            out->lambda_last[l] = v;
            if (v < out->lambda_min[l]) out->lambda_min[l] = v;
            if (v > out->lambda_max[l]) out->lambda_max[l] = v;
        }
        if (get_number(o, "val_loss", &val) == 0) {
            if (!(val > 0) || !(loss >= 0)) { /* cross-entropies; a scaling fit takes the log of them */
                cJSON_Delete(o);
                dt_fail_format(err, "%s:%d: train_loss %g, val_loss %g: a cross-entropy is >= 0, a held-out one > 0",
                               out->path, lineno, loss, val);
                goto fail;
            }
            out->final_val_loss = val;
            out->final_val_step = (int)step;
        }
        cJSON_Delete(o);
        if ((size_t)n == cap) { /* two arrays of one capacity: each keeps what it got */
            size_t cg = cap, cs = cap;
            const int bad_g = grow_array(&gn, &cg, (size_t)n + 1, sizeof *gn, 256);
            const int bad_s = grow_array(&steps, &cs, (size_t)n + 1, sizeof *steps, 256);
            if (bad_g || bad_s) {
                dt_fail_oom(err, "out of memory");
                goto fail;
            }
            cap = cg;
        }
        gn[n] = g;
        steps[n] = (int)step;
        if (n == 0) out->first_step = (int)step;
        out->last_step = (int)step;
        out->final_train_loss = loss;
        n++;
    }
    if (n == 0) {
        dt_fail_format(err, "%s: no metrics lines", out->path);
        goto fail;
    }
    out->n_steps = n;
    double mean = 0, var = 0, mx = gn[0];
    for (int i = 0; i < n; i++) {
        mean += gn[i];
        if (gn[i] > mx) mx = gn[i];
    }
    mean /= n;
    for (int i = 0; i < n; i++) var += (gn[i] - mean) * (gn[i] - mean);
    out->gn_mean = mean;
    out->gn_std = sqrt(var / n);
    out->gn_max = mx;
    int *flags = malloc((size_t)n * sizeof *flags);
    if (!flags) {
        dt_fail_oom(err, "out of memory");
        goto fail;
    }
    out->spikes = dt_an_spikes(gn, n, flags);
    out->spike_steps = malloc((size_t)(out->spikes > 0 ? out->spikes : 1) * sizeof(int));
    if (!out->spike_steps) {
        free(flags);
        dt_fail_oom(err, "out of memory");
        goto fail;
    }
    for (int i = 0, k = 0; i < n; i++)
        if (flags[i]) out->spike_steps[k++] = steps[i];
    free(flags);
    if (L > 0) {
        const int P = n < DT_AN_LAMBDA_POINTS ? n : DT_AN_LAMBDA_POINTS;
        out->lambda_at = malloc((size_t)P * L * sizeof *out->lambda_at);
        if (!out->lambda_at) {
            dt_fail_oom(err, "out of memory");
            goto fail;
        }
        for (int k = 0; k < P; k++) {
            const int i = P > 1 ? (int)(((long long)k * (n - 1) * 2 + (P - 1)) / (2 * (P - 1))) : 0;
            out->lambda_step[k] = steps[i];
            memcpy(out->lambda_at + (size_t)k * L, lam_all + (size_t)i * L, (size_t)L * sizeof *lam_all);
        }
        out->n_lambda_points = P;
    }
    free(lam_all);
    free(gn);
    free(steps);
    free(text);
    return 0;
fail:
    free(lam_all);
    free(gn);
    free(steps);
    free(text);
    dt_an_training_free(out);
    return -1;
}

/* ---------------------------------------------------------------- JSON */

int dt_an_write_json(const char *path, void *json, dt_error *err) {
    char *s = cJSON_Print((cJSON *)json);
    if (!s) return dt_fail_oom(err, "%s: out of memory formatting the JSON", path);
    int rc = write_text_atomic(path, s, err);
    free(s);
    return rc;
}
