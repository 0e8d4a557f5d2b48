/* decode.c — one-token-at-a-time decoding over a KV cache.
 *
 * The decode step is written independently of the batched forward (one position, plain loops
 * over the cache) and a test holds the two together: feeding tokens 0..T−1 one at a time gives
 * the logits of the full forward.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "internal.h"
#include "base/base.h"
#include "layers/kernels.h"
#include "layers/layers.h"
#include "model/model_quant.h"
#include "model/profile.h"

struct dt_kvcache {
    int max_tokens;
    int fed;                     /* positions 0..fed − 1 hold the sequence being fed: a step may go on
                                    from fed or go back (rewrite from an earlier position), never skip */
    dt_kv_dtype dtype;
    size_t bytes;                /* of the cached keys and values (and their scales) */
    float *k, *v;                /* F32: [L, max_tokens, KV·hd] each, after RoPE for k */
    uint16_t *kh, *vh;           /* F16: the same as IEEE half floats */
    int8_t *kq, *vq;             /* INT8: the same, symmetric with one scale per position and kv head */
    float *kscale, *vscale;      /* INT8: [L, max_tokens, KV] */
    float *knew;                 /* F16 / INT8: [2·KV·hd] this position's k and v before they are stored */
    float *x, *xn;               /* [C] residual stream and its normalised copy */
    float *q;                    /* [H·hd + 2·KV·hd]: q, k, v of the current position */
    float *scores;               /* [H, max_tokens] softmax maps of the current position */
    float *atty;                 /* [H·hd] */
    float *gate, *up;            /* [F] each, one block */
    float *tmp;                  /* [max(C, H·hd)] */
    void *qscratch;              /* quantised linear layers' scratch for one row */
    float *vlam;                 /* DIFF V2: [H/2] this position's λ */
    float *slopes;               /* ALiBi: [H] slope of every query head */
    dt_decode_profile *prof;     /* bench --profile: where a step's time goes (NULL: off) */
};

int kvcache_profile_enable(dt_kvcache *kc, dt_error *err) {
    if (!kc->prof && !(kc->prof = malloc(sizeof *kc->prof)))
        return dt_fail_oom(err, "out of memory for a decode profile");
    *kc->prof = (dt_decode_profile){{0}};
    return 0;
}

dt_decode_profile *kvcache_profile(dt_kvcache *kc) { return kc->prof; }

dt_kvcache *dt_kvcache_create(const dt_model *m, int max_tokens, dt_error *err) {
    return dt_kvcache_create_with(m, max_tokens, DT_KV_F32, err);
}

size_t dt_kvcache_bytes(const dt_kvcache *c) { return c->bytes; }

int kvcache_size(const dt_config *c, int max_tokens, dt_kv_dtype dtype, size_t *cells, size_t *scales, size_t *bytes) {
    const size_t per_cell = dtype == DT_KV_F32 ? sizeof(float) : dtype == DT_KV_F16 ? sizeof(uint16_t) : 1;
    size_t rows, kvdim, data, scale_bytes = 0;
    if (c->num_hidden_layers < 0 || max_tokens < 0 || c->num_key_value_heads < 0 || c->head_dim < 0) return -1;
    if (__builtin_mul_overflow((size_t)c->num_hidden_layers, (size_t)max_tokens, &rows) ||
        __builtin_mul_overflow((size_t)c->num_key_value_heads, (size_t)c->head_dim, &kvdim) ||
        __builtin_mul_overflow(rows, kvdim, cells) || __builtin_mul_overflow(rows, (size_t)c->num_key_value_heads, scales) ||
        __builtin_mul_overflow(*cells, 2 * per_cell, &data) ||
        (dtype == DT_KV_INT8 && __builtin_mul_overflow(*scales, 2 * sizeof(float), &scale_bytes)) ||
        __builtin_add_overflow(data, scale_bytes, bytes))
        return -1;
    return 0;
}

size_t decode_head_work(int n, int hd) { return (size_t)n * (size_t)hd; }

dt_kvcache *dt_kvcache_create_with(const dt_model *m, int max_tokens, dt_kv_dtype dtype, dt_error *err) {
    const dt_config *c = &m->cfg;
    if (dtype != DT_KV_F32 && dtype != DT_KV_F16 && dtype != DT_KV_INT8) {
        dt_fail(err, "KV cache dtype %d: expected f32, f16 or int8", (int)dtype);
        return NULL;
    }
    if (max_tokens <= 0 || max_tokens > c->max_position_embeddings) {
        dt_fail(err, "cache of %d tokens: must be in 1..max_position_embeddings (%d)", max_tokens,
                c->max_position_embeddings);
        return NULL;
    }
    const size_t kvdim = (size_t)c->num_key_value_heads * c->head_dim, qdim = (size_t)c->num_attention_heads * c->head_dim;
    const size_t C = c->hidden_size, F = c->intermediate_size;
    size_t cells, scales, bytes;
    if (kvcache_size(c, max_tokens, dtype, &cells, &scales, &bytes) != 0) {
        dt_fail_oom(err, "a KV cache of %d tokens for this model does not fit in the address space", max_tokens);
        return NULL;
    }
    dt_kvcache *kc = calloc(1, sizeof *kc);
    if (!kc) goto oom;
    kc->max_tokens = max_tokens;
    kc->dtype = dtype;
    kc->bytes = bytes;
    int cache_ok;
    if (dtype == DT_KV_F32) {
        kc->k = calloc_aligned(cells, sizeof(float));
        kc->v = calloc_aligned(cells, sizeof(float));
        cache_ok = kc->k && kc->v;
    } else if (dtype == DT_KV_F16) {
        kc->kh = calloc(cells, sizeof(uint16_t));
        kc->vh = calloc(cells, sizeof(uint16_t));
        kc->knew = calloc(2 * kvdim, sizeof(float));
        cache_ok = kc->kh && kc->vh && kc->knew;
    } else {
        kc->kq = calloc(cells, 1);
        kc->vq = calloc(cells, 1);
        kc->kscale = calloc(scales, sizeof(float));
        kc->vscale = calloc(scales, sizeof(float));
        kc->knew = calloc(2 * kvdim, sizeof(float));
        cache_ok = kc->kq && kc->vq && kc->kscale && kc->vscale && kc->knew;
    }
    kc->x = calloc(C, sizeof(float));
    kc->xn = calloc(C, sizeof(float));
    kc->q = calloc(qdim + 2 * kvdim, sizeof(float)); /* q, then this position's k and v */
    kc->scores = calloc((size_t)c->num_attention_heads * max_tokens, sizeof(float));
    kc->atty = calloc(qdim, sizeof(float));
    kc->gate = calloc(2 * F, sizeof(float)); /* gate, then up */
    kc->up = kc->gate + F;
    kc->tmp = calloc(C > qdim ? C : qdim, sizeof(float)); /* o_proj output, or per-head norm outputs */
    kc->qscratch = malloc(model_linear_scratch_bytes(m, 1));
    kc->vlam = calloc((size_t)c->num_attention_heads, sizeof(float));
    kc->slopes = calloc((size_t)c->num_attention_heads, sizeof(float));
    if (!cache_ok || !kc->x || !kc->xn || !kc->q || !kc->scores || !kc->atty || !kc->gate ||
        !kc->tmp || !kc->qscratch || !kc->vlam || !kc->slopes)
        goto oom;
    if (c->position == DT_POS_ALIBI) alibi_query_slopes(kc->slopes, config_head_pairing(c), c->num_attention_heads);
    return kc;
oom:
    dt_kvcache_free(kc);
    dt_fail_oom(err, "out of memory allocating a KV cache of %d tokens", max_tokens);
    return NULL;
}

void dt_kvcache_free(dt_kvcache *kc) {
    if (!kc) return;
    free(kc->k);
    free(kc->v);
    free(kc->kh);
    free(kc->vh);
    free(kc->kq);
    free(kc->vq);
    free(kc->kscale);
    free(kc->vscale);
    free(kc->knew);
    free(kc->qscratch);
    free(kc->x);
    free(kc->xn);
    free(kc->q);
    free(kc->scores);
    free(kc->atty);
    free(kc->gate); /* up lives in the same block */
    free(kc->tmp);
    free(kc->vlam);
    free(kc->slopes);
    free(kc->prof);
    free(kc);
}

/* The cached rows of one layer and kv head, whatever their storage. */
typedef struct {
    const float *f;              /* F32: row s at f + s·kvdim */
    const uint16_t *h;           /* F16 */
    const int8_t *q;             /* INT8, with scale[s·KV] */
    const float *scale;
    int kvdim, kv_heads;
} kv_view;

static kv_view kv_view_of(const dt_kvcache *kc, int keys, int layer, int head, int kvdim, int kv_heads) {
    const size_t row0 = (size_t)layer * kc->max_tokens * kvdim + (size_t)head * (kvdim / kv_heads);
    const size_t s0 = (size_t)layer * kc->max_tokens * kv_heads + head;
    kv_view v = {.kvdim = kvdim, .kv_heads = kv_heads};
    if (kc->dtype == DT_KV_F32) v.f = (keys ? kc->k : kc->v) + row0;
    else if (kc->dtype == DT_KV_F16) v.h = (keys ? kc->kh : kc->vh) + row0;
    else {
        v.q = (keys ? kc->kq : kc->vq) + row0;
        v.scale = (keys ? kc->kscale : kc->vscale) + s0;
    }
    return v;
}

/* Row s as floats: the cache itself (F32) or converted into tmp[hd]. */
static inline const float *kv_row(const kv_view *v, int s, float *tmp, int hd) {
    if (v->f) return v->f + (size_t)s * v->kvdim;
    if (v->h) {
        const uint16_t *r = v->h + (size_t)s * v->kvdim;
        for (int d = 0; d < hd; d++) tmp[d] = half_to_float(r[d]);
    } else {
        const int8_t *r = v->q + (size_t)s * v->kvdim;
        const float sc = v->scale[(size_t)s * v->kv_heads];
        for (int d = 0; d < hd; d++) tmp[d] = sc * (float)r[d];
    }
    return tmp;
}

/* Stores this position's k and v (kvdim each, from kc->knew) into an F16 or INT8 cache. */
static void store_kv(dt_kvcache *kc, int layer, int pos, int kvdim, int kv_heads) {
    const size_t row = ((size_t)layer * kc->max_tokens + pos) * kvdim;
    const int hd = kvdim / kv_heads;
    for (int which = 0; which < 2; which++) {
        const float *x = kc->knew + (size_t)which * kvdim;
        if (kc->dtype == DT_KV_F16) {
            uint16_t *dst = (which ? kc->vh : kc->kh) + row;
            for (int i = 0; i < kvdim; i++) dst[i] = float_to_half(x[i]);
            continue;
        }
        int8_t *dst = (which ? kc->vq : kc->kq) + row;
        float *scale = (which ? kc->vscale : kc->kscale) + ((size_t)layer * kc->max_tokens + pos) * kv_heads;
        for (int h = 0; h < kv_heads; h++) {
            float mx = 0;
            for (int d = 0; d < hd; d++) mx = fmaxf(mx, fabsf(x[h * hd + d]));
            scale[h] = mx / 127.0f;
            const float inv = mx > 0 ? 127.0f / mx : 0.0f;
            for (int d = 0; d < hd; d++) dst[h * hd + d] = (int8_t)lrintf(fminf(fmaxf(x[h * hd + d] * inv, -127.0f), 127.0f));
        }
    }
}

/* The raw dots q_r · k[s] for R consecutive queries of one head: row r (scores + r·lds, query
 * q + r·ldq) over positions 0..n0 + r − 1. An F32 cache goes through the vector kernel, the first
 * n0 positions for all rows in one pass; other storage is converted a row at a time. */
static void head_dots(float *restrict scores, size_t lds, const float *restrict q, size_t ldq, int R,
                      const kv_view *kv, int n0, int hd) {
    if (kv->f) {
        const dt_kernels *kern = kernels_active();
        kern->cache_dots(scores, lds, q, ldq, R, kv->f, n0, (size_t)kv->kvdim, hd);
        for (int r = 1; r < R; r++) /* each later row's own newer positions */
            kern->cache_dots(scores + r * lds + n0, 0, q + r * ldq, 0, 1, kv->f + (size_t)n0 * kv->kvdim, r,
                             (size_t)kv->kvdim, hd);
        return;
    }
    float tmp[hd];
    for (int s = 0; s < n0 + R - 1; s++) { /* each cached row converted once, for the rows that see it */
        const float *restrict k = kv_row(kv, s, tmp, hd);
        for (int r = s < n0 ? 0 : s - n0 + 1; r < R; r++) {
            float dot = 0;
            for (int d = 0; d < hd; d++) dot += q[r * ldq + d] * k[d];
            scores[r * lds + s] = dot;
        }
    }
}

/* scores[0..n) = softmax(dots[s] / √hd − slope·(n − 1 − s)), in place, for one query over its n
 * cached positions; softmax1 adds 1 to the denominator (a virtual key of score 0). */
static void head_softmax(float *restrict scores, int n, int hd, float slope, int softmax1) {
    const float scale = (float)(1.0 / sqrt((double)hd));
    const dt_kernels *kern = kernels_active();
    float mx = softmax1 ? 0.0f : -INFINITY;
    for (int s = 0; s < n; s++) {
        scores[s] = scores[s] * scale - slope * (float)(n - 1 - s);
        mx = scores[s] > mx ? scores[s] : mx; /* fmaxf's result (it skips a NaN too), without its call */
    }
    /* the kernels' vector exp (the fused attention's): scalar expf was a tenth of a long prompt */
    for (int s = 0; s < n; s++) scores[s] -= mx;
    kern->exp(scores, scores, n);
    float sum = softmax1 ? expf(-mx) : 0.0f;
    for (int s = 0; s < n; s++) sum += scores[s];
    const float inv = 1.0f / sum;
    for (int s = 0; s < n; s++) scores[s] *= inv;
}

/* out_r[0..hd) = Σ_s w_r[s] v[s] for R consecutive queries (out + r·ldo, w + r·lds), row r over
 * positions 0..n0 + r − 1: the first n0 for all rows in one pass, then each row's own newer
 * positions carried on (the kernel's sums are the same bits as one pass over them all). */
static void weighted_values(float *restrict out, size_t ldo, const float *restrict w, size_t lds, int R,
                            const kv_view *kv, int n0, int hd) {
    if (kv->f) { /* F32: the vector kernel, straight from the cache */
        const dt_kernels *kern = kernels_active();
        kern->cache_axpy(out, ldo, w, lds, R, kv->f, n0, (size_t)kv->kvdim, hd, 0);
        for (int r = 1; r < R; r++)
            kern->cache_axpy(out + r * ldo, 0, w + r * lds + n0, 0, 1, kv->f + (size_t)n0 * kv->kvdim, r,
                             (size_t)kv->kvdim, hd, 1);
        return;
    }
    float tmp[hd];
    for (int r = 0; r < R; r++) memset(out + r * ldo, 0, (size_t)hd * sizeof(float));
    for (int s = 0; s < n0 + R - 1; s++) { /* each cached row converted once; every row sums over s in order */
        const float *restrict v = kv_row(kv, s, tmp, hd);
        for (int r = s < n0 ? 0 : s - n0 + 1; r < R; r++) {
            float *restrict o = out + r * ldo;
            for (int d = 0; d < hd; d++) o[d] += w[r * lds + s] * v[d];
        }
    }
}

int kv_attention_tasks(const dt_config *c) { return c->arch == DT_ARCH_DIFF ? c->num_attention_heads / 2 : c->num_attention_heads; }

/* One task of the attention of R ≤ CACHE_ROWS_MAX consecutive queries of one sequence (row r at
 * position n0 − 1 + r, its query q + r·ldq) over positions 0..n0 − 1 + r of one layer's cache,
 * straight from the cached K/V (GQA heads share their kv head's rows, nothing is copied): query
 * head `task` into out + r·ldo + task·hd for the baseline and DIFF V2 (whose caller combines the
 * pairs), or differential head `task` (both of its maps, then the per-head norm and (1 − λinit))
 * into out + r·ldo + task·2hd for DIFF. sc1, sc2: [R, lds] scratch for the softmax maps, lds ≥
 * n0 − 1 + R. A row's result is the same bits for any R (the kernels' contract), so a prompt chunk
 * and the same rows decoded one at a time agree exactly. */
void kv_attention_task(const dt_model *m, const dt_kvcache *kc, int layer, int task, int n0, int R, const float *q,
                       size_t ldq, float *out, size_t ldo, float *sc1, float *sc2, size_t lds) {
    const dt_config *c = &m->cfg;
    const int H = c->num_attention_heads, hd = c->head_dim, KV = c->num_key_value_heads, kvdim = KV * hd;
    const int g = H / KV;
    const float *slopes = c->position == DT_POS_ALIBI ? kc->slopes : NULL;
    if (c->arch != DT_ARCH_DIFF) {
        const int i = task;
        const kv_view kv = kv_view_of(kc, 1, layer, i / g, kvdim, KV), vv = kv_view_of(kc, 0, layer, i / g, kvdim, KV);
        head_dots(sc1, lds, q + (size_t)i * hd, ldq, R, &kv, n0, hd);
        for (int r = 0; r < R; r++) head_softmax(sc1 + r * lds, n0 + r, hd, slopes ? slopes[i] : 0.0f, c->softmax1);
        weighted_values(out + (size_t)i * hd, ldo, sc1, lds, R, &vv, n0, hd);
        return;
    }
    const int Hd = H / 2, w2 = 2 * hd, j = task;
    const float lambda = dt_model_lambda(m, layer), scale = 1.0f - dt_lambda_init(layer);
    float *d = sc1, *a2 = sc2;
    const kv_view k1 = kv_view_of(kc, 1, layer, j / g, kvdim, KV), k2 = kv_view_of(kc, 1, layer, (j + Hd) / g, kvdim, KV);
    const kv_view v1 = kv_view_of(kc, 0, layer, j / g, kvdim, KV), v2 = kv_view_of(kc, 0, layer, (j + Hd) / g, kvdim, KV);
    head_dots(d, lds, q + (size_t)j * hd, ldq, R, &k1, n0, hd);
    head_dots(a2, lds, q + (size_t)(j + Hd) * hd, ldq, R, &k2, n0, hd);
    for (int r = 0; r < R; r++) {
        float *dr = d + r * lds, *ar = a2 + r * lds;
        const int n = n0 + r;
        head_softmax(dr, n, hd, slopes ? slopes[j] : 0.0f, c->softmax1);
        head_softmax(ar, n, hd, slopes ? slopes[j + Hd] : 0.0f, c->softmax1);
        for (int s = 0; s < n; s++) dr[s] -= lambda * ar[s]; /* D_j = A_j − λ A_{j+Hd}, over A_j's row */
    }
    float *u = out + (size_t)j * w2;
    weighted_values(u, ldo, d, lds, R, &v1, n0, hd);
    weighted_values(u + hd, ldo, d, lds, R, &v2, n0, hd);
    for (int r = 0; r < R; r++) {
        float *ur = u + r * ldo, normed[w2];
        if (c->no_head_norm) {
            for (int e = 0; e < w2; e++) ur[e] *= scale;
            continue;
        }
        float rstd;
        rmsnorm_forward(normed, &rstd, ur, m->w.layers[layer].subln, 1, w2, c->rms_norm_eps);
        for (int e = 0; e < w2; e++) ur[e] = normed[e] * scale;
    }
}

/* Attention of the newest position over one layer's cache, one task per output head (a query
 * head for the baseline, a differential head for DIFF). DIFF V2: the baseline's heads into
 * kc->tmp; the caller combines them. */
static void decode_attention(const dt_model *m, dt_kvcache *kc, int layer, int n) {
    const dt_config *c = &m->cfg;
    const size_t stride = (size_t)kc->max_tokens;
    const int tasks = kv_attention_tasks(c), Hd = c->num_attention_heads / 2;
    float *out = c->arch == DT_ARCH_DIFF_V2 ? kc->tmp : kc->atty;
    /* the same rule as a batch's attention (batch.c): all the tasks' work, not one task's (with
     * one task's, E's 8 heads decoded position 40 on one thread, ~10 µs a layer, where a parallel
     * region costs under 1) */
#pragma omp parallel for schedule(static) if ((size_t)tasks * decode_head_work(n, c->head_dim) > 4096)
    for (int t = 0; t < tasks; t++)
        kv_attention_task(m, kc, layer, t, n, 1, kc->q, 0, out, 0, kc->scores + t * stride,
                          kc->scores + (c->arch == DT_ARCH_DIFF ? t + Hd : t) * stride, stride);
}

/* Stores the k and v rows [KV·hd] of position pos of a layer, converting them for an F16 / INT8
 * cache. k, v may point at the cache's own F32 slot (kv_slot), then there is nothing to copy. */
void kv_store(dt_kvcache *kc, int layer, int pos, int kvdim, int kv_heads, const float *k, const float *v) {
    if (kc->k) {
        float *ks = kc->k + ((size_t)layer * kc->max_tokens + pos) * kvdim, *vs = kc->v + ((size_t)layer * kc->max_tokens + pos) * kvdim;
        if (ks != k) memcpy(ks, k, (size_t)kvdim * sizeof(float));
        if (vs != v) memcpy(vs, v, (size_t)kvdim * sizeof(float));
        return;
    }
    memcpy(kc->knew, k, (size_t)kvdim * sizeof(float));
    memcpy(kc->knew + kvdim, v, (size_t)kvdim * sizeof(float));
    store_kv(kc, layer, pos, kvdim, kv_heads);
}

int kv_max_tokens(const dt_kvcache *kc) { return kc->max_tokens; }
int kv_fed(const dt_kvcache *kc) { return kc->fed; }
void kv_set_fed(dt_kvcache *kc, int fed) { kc->fed = fed; }

int dt_decode_step(const dt_model *m, dt_kvcache *kc, int token, int pos, float *logits, dt_error *err) {
    const dt_config *c = &m->cfg;
    const int C = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    const int qdim = c->num_attention_heads * hd, kvdim = c->num_key_value_heads * hd;
    const int v2 = c->arch == DT_ARCH_DIFF_V2;
    if (token < 0 || token >= c->vocab_size)
        return dt_fail(err, "token id %d at position %d is out of range [0, %d)", token, pos, c->vocab_size);
    if (pos < 0 || pos >= kc->max_tokens)
        return dt_fail(err, "position %d is outside the context 0..%d", pos, kc->max_tokens - 1);
    /* the attention reads positions 0..pos: ones never fed would be zeros, or another sequence's */
    if (pos > kc->fed)
        return dt_fail(err, "position %d after the %d positions fed so far (a step goes on from position %d, or "
                            "back; 0 starts a new sequence)", pos, kc->fed, kc->fed);
    kc->fed = pos + 1;

    dt_decode_profile *prof = kc->prof;
    double t = prof ? monotonic_seconds() : 0.0;
    memcpy(kc->x, m->w.embed_tokens + (size_t)token * C, (size_t)C * sizeof(float));
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const dt_layer_weights *w = &m->w.layers[l];
        const int fused_qkv = !m->quant && w->k_proj == w->q_proj + (size_t)qdim * C &&
                              w->v_proj == w->k_proj + (size_t)kvdim * C;
        const int fused_gate_up = !m->quant && w->up_proj == w->gate_proj + (size_t)F * C;
        /* F32 writes straight into the cache; F16 / INT8 stage the new row and convert it after RoPE */
        float *kslot = kc->k ? kc->k + ((size_t)l * kc->max_tokens + pos) * kvdim : kc->knew;
        float *vslot = kc->k ? kc->v + ((size_t)l * kc->max_tokens + pos) * kvdim : kc->knew + kvdim;
        float rstd;
        rmsnorm_forward(kc->xn, &rstd, kc->x, w->input_layernorm, 1, C, c->rms_norm_eps);
        decode_lap(prof, DPROF_OTHER, &t);
        /* q_proj, k_proj, v_proj (and gate_proj, up_proj) lie back to back in the parameter buffer
         * (model.c's layout): one matrix-vector product streams all three */
        if (fused_qkv) {
            linear_forward(kc->q, kc->xn, w->q_proj, 1, C, qdim + 2 * kvdim);
            memcpy(kslot, kc->q + qdim, (size_t)kvdim * sizeof(float));
            memcpy(vslot, kc->q + qdim + kvdim, (size_t)kvdim * sizeof(float));
        } else {
            model_linear_shared(m, l, (const int[]){LIN_Q, LIN_K, LIN_V}, (float *const[]){kc->q, kslot, vslot}, 3,
                                kc->xn, 1, kc->qscratch);
        }
        decode_lap(prof, DPROF_QKV, &t);
        if (c->position == DT_POS_ROPE) {
            rope_apply(kc->q, 1, 1, c->num_attention_heads, hd, pos, m->rope_inv_freq, +1);
            rope_apply(kslot, 1, 1, c->num_key_value_heads, hd, pos, m->rope_inv_freq, +1);
        }
        if (!kc->k) store_kv(kc, l, pos, kvdim, c->num_key_value_heads);
        decode_lap(prof, DPROF_OTHER, &t);
        decode_attention(m, kc, l, pos + 1);
        decode_lap(prof, DPROF_ATTN, &t);
        if (v2) {
            if (w->lambda_proj) linear_forward(kc->vlam, kc->xn, w->lambda_proj, 1, C, c->num_attention_heads / 2);
            diffv2_combine_forward_with(kc->atty, kc->vlam, kc->vlam, kc->tmp, 1, c->num_attention_heads / 2, hd,
                                        (int)c->v2_pairs, (int)c->v2_lambda);
        }
        decode_lap(prof, DPROF_OTHER, &t);
        model_linear(m, l, LIN_O, kc->tmp, kc->atty, 1, kc->qscratch);
        decode_lap(prof, DPROF_O, &t);
        for (int i = 0; i < C; i++) kc->x[i] += kc->tmp[i];

        rmsnorm_forward(kc->xn, &rstd, kc->x, w->post_attention_layernorm, 1, C, c->rms_norm_eps);
        decode_lap(prof, DPROF_OTHER, &t);
        if (fused_gate_up) {
            linear_forward(kc->gate, kc->xn, w->gate_proj, 1, C, 2 * F);
        } else {
            model_linear_shared(m, l, (const int[]){LIN_GATE, LIN_UP}, (float *const[]){kc->gate, kc->up}, 2, kc->xn, 1,
                                kc->qscratch);
        }
        decode_lap(prof, DPROF_GATE_UP, &t);
        swiglu_forward(kc->gate, kc->gate, kc->up, 1, F);
        decode_lap(prof, DPROF_OTHER, &t);
        model_linear(m, l, LIN_DOWN, kc->tmp, kc->gate, 1, kc->qscratch);
        decode_lap(prof, DPROF_DOWN, &t);
        for (int i = 0; i < C; i++) kc->x[i] += kc->tmp[i];
    }
    float rstd;
    rmsnorm_forward(kc->xn, &rstd, kc->x, m->w.norm, 1, C, c->rms_norm_eps);
    decode_lap(prof, DPROF_OTHER, &t);
    model_linear(m, c->num_hidden_layers, LIN_LM_HEAD, logits, kc->xn, 1, kc->qscratch);
    decode_lap(prof, DPROF_LM_HEAD, &t);
    return 0;
}
