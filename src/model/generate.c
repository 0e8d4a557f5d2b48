/* generate.c — one-token-at-a-time decoding over a KV cache, and sampling.
 *
 * The decode step is written independently of the batched forward (one position, plain loops
 * over the cache) and a test holds the two together: feeding tokens 0..T−1 one at a time gives
 * the logits of the full forward.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "layers/layers.h"
#include "quant/quant.h"

struct dt_kvcache {
    int max_tokens;
    float *k, *v;                /* [L, max_tokens, KV·hd] each, after RoPE for k */
    float *x, *xn;               /* [C] residual stream and its normalised copy */
    float *q;                    /* [H·hd + 2·KV·hd]: q, k, v of the current position */
    float *scores;               /* [H, max_tokens] softmax maps of the current position */
    float *atty;                 /* [H·hd] */
    float *gate, *up;            /* [F] each, one block */
    float *tmp;                  /* [max(C, H·hd)] */
    void *qscratch;              /* quantised linear layers' scratch for one row */
};

dt_kvcache *dt_kvcache_create(const dt_model *m, int max_tokens, dt_error *err) {
    const dt_config *c = &m->cfg;
    if (max_tokens <= 0 || max_tokens > c->max_position_embeddings) {
        dt_fail(err, "cache of %d tokens: must be in 1..max_position_embeddings (%d)", max_tokens,
                c->max_position_embeddings);
        return NULL;
    }
    const size_t kvdim = (size_t)c->num_key_value_heads * c->head_dim, qdim = (size_t)c->num_attention_heads * c->head_dim;
    const size_t C = c->hidden_size, F = c->intermediate_size;
    dt_kvcache *kc = calloc(1, sizeof *kc);
    if (!kc) goto oom;
    kc->max_tokens = max_tokens;
    kc->k = calloc((size_t)c->num_hidden_layers * max_tokens * kvdim, sizeof(float));
    kc->v = calloc((size_t)c->num_hidden_layers * max_tokens * kvdim, sizeof(float));
    kc->x = calloc(C, sizeof(float));
    kc->xn = calloc(C, sizeof(float));
    kc->q = calloc(qdim + 2 * kvdim, sizeof(float)); /* q, then this position's k and v */
    kc->scores = calloc((size_t)c->num_attention_heads * max_tokens, sizeof(float));
    kc->atty = calloc(qdim, sizeof(float));
    kc->gate = calloc(2 * F, sizeof(float)); /* gate, then up */
    kc->up = kc->gate + F;
    kc->tmp = calloc(C > qdim ? C : qdim, sizeof(float)); /* o_proj output, or per-head norm outputs */
    kc->qscratch = malloc(model_linear_scratch_bytes(m, 1));
    if (!kc->k || !kc->v || !kc->x || !kc->xn || !kc->q || !kc->scores || !kc->atty || !kc->gate ||
        !kc->tmp || !kc->qscratch)
        goto oom;
    return kc;
oom:
    dt_kvcache_free(kc);
    dt_fail(err, "out of memory allocating a KV cache of %d tokens", max_tokens);
    return NULL;
}

void dt_kvcache_free(dt_kvcache *kc) {
    if (!kc) return;
    free(kc->k);
    free(kc->v);
    free(kc->qscratch);
    free(kc->x);
    free(kc->xn);
    free(kc->q);
    free(kc->scores);
    free(kc->atty);
    free(kc->gate); /* up lives in the same block */
    free(kc->tmp);
    free(kc);
}

/* scores[0..n) = softmax(q · k[s] / √hd) for one query head over the cached positions. */
static void head_scores(float *restrict scores, const float *restrict q, const float *restrict kcache, int n,
                        int kvdim, int hd) {
    const float scale = (float)(1.0 / sqrt((double)hd));
    float mx = -INFINITY;
    for (int s = 0; s < n; s++) {
        const float *restrict k = kcache + (size_t)s * kvdim;
        float dot = 0;
        for (int d = 0; d < hd; d++) dot += q[d] * k[d];
        scores[s] = dot * scale;
        mx = fmaxf(mx, scores[s]);
    }
    float sum = 0;
    for (int s = 0; s < n; s++) sum += (scores[s] = expf(scores[s] - mx));
    const float inv = 1.0f / sum;
    for (int s = 0; s < n; s++) scores[s] *= inv;
}

/* out[0..hd) = Σ_s w[s] v[s] */
static void weighted_values(float *restrict out, const float *restrict w, const float *restrict vcache, int n,
                            int kvdim, int hd) {
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int s = 0; s < n; s++) {
        const float *restrict v = vcache + (size_t)s * kvdim;
        for (int d = 0; d < hd; d++) out[d] += w[s] * v[d];
    }
}

/* Attention of the newest position over one layer's cache, straight from the cached K/V (GQA
 * heads share their kv head's rows, nothing is copied). One task per output head: a query head
 * for the baseline, a differential head (both of its maps) for DIFF. */
static void decode_attention(const dt_model *m, dt_kvcache *kc, int layer, int n) {
    const dt_config *c = &m->cfg;
    const int H = c->num_attention_heads, hd = c->head_dim, kvdim = c->num_key_value_heads * hd;
    const int g = H / c->num_key_value_heads;
    const float *kcache = kc->k + (size_t)layer * kc->max_tokens * kvdim;
    const float *vcache = kc->v + (size_t)layer * kc->max_tokens * kvdim;
    const size_t stride = (size_t)kc->max_tokens;
    if (c->arch != DT_ARCH_DIFF) {
#pragma omp parallel for schedule(static) if (n * hd > 4096)
        for (int i = 0; i < H; i++) {
            float *sc = kc->scores + i * stride;
            head_scores(sc, kc->q + (size_t)i * hd, kcache + (size_t)(i / g) * hd, n, kvdim, hd);
            weighted_values(kc->atty + (size_t)i * hd, sc, vcache + (size_t)(i / g) * hd, n, kvdim, hd);
        }
        return;
    }
    const int Hd = H / 2, w2 = 2 * hd;
    const float lambda = dt_model_lambda(m, layer), scale = 1.0f - dt_lambda_init(layer);
    const float *subln = m->w.layers[layer].subln;
#pragma omp parallel for schedule(static) if (n * hd > 4096)
    for (int j = 0; j < Hd; j++) {
        float *d = kc->scores + j * stride, *a2 = kc->scores + (j + Hd) * stride;
        head_scores(d, kc->q + (size_t)j * hd, kcache + (size_t)(j / g) * hd, n, kvdim, hd);
        head_scores(a2, kc->q + (size_t)(j + Hd) * hd, kcache + (size_t)((j + Hd) / g) * hd, n, kvdim, hd);
        for (int s = 0; s < n; s++) d[s] -= lambda * a2[s]; /* D_j = A_j − λ A_{j+Hd}, over A_j's row */
        float *u = kc->atty + (size_t)j * w2, *normed = kc->tmp + (size_t)j * w2;
        weighted_values(u, d, vcache + (size_t)(j / g) * hd, n, kvdim, hd);
        weighted_values(u + hd, d, vcache + (size_t)((j + Hd) / g) * hd, n, kvdim, hd);
        float rstd;
        rmsnorm_forward(normed, &rstd, u, subln, 1, w2, c->rms_norm_eps);
        for (int e = 0; e < w2; e++) u[e] = normed[e] * scale;
    }
}

int dt_decode_step(const dt_model *m, dt_kvcache *kc, int token, int pos, float *logits, dt_error *err) {
    const dt_config *c = &m->cfg;
    const int C = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    const int qdim = c->num_attention_heads * hd, kvdim = c->num_key_value_heads * hd;
    if (token < 0 || token >= c->vocab_size)
        return dt_fail(err, "token id %d at position %d is out of range [0, %d)", token, pos, c->vocab_size);
    if (pos < 0 || pos >= kc->max_tokens)
        return dt_fail(err, "position %d is past the end of the context (%d tokens)", pos, kc->max_tokens);

    memcpy(kc->x, m->w.embed_tokens + (size_t)token * C, (size_t)C * sizeof(float));
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const dt_layer_weights *w = &m->w.layers[l];
        const int fused_qkv = !m->quant && w->k_proj == w->q_proj + (size_t)qdim * C &&
                              w->v_proj == w->k_proj + (size_t)kvdim * C;
        const int fused_gate_up = !m->quant && w->up_proj == w->gate_proj + (size_t)F * C;
        float *kslot = kc->k + ((size_t)l * kc->max_tokens + pos) * kvdim;
        float *vslot = kc->v + ((size_t)l * kc->max_tokens + pos) * kvdim;
        float rstd;
        rmsnorm_forward(kc->xn, &rstd, kc->x, w->input_layernorm, 1, C, c->rms_norm_eps);
        /* q_proj, k_proj, v_proj (and gate_proj, up_proj) lie back to back in the parameter buffer
         * (model.c's layout): one matrix-vector product streams all three */
        if (fused_qkv) {
            linear_forward(kc->q, kc->xn, w->q_proj, 1, C, qdim + 2 * kvdim);
            memcpy(kslot, kc->q + qdim, (size_t)kvdim * sizeof(float));
            memcpy(vslot, kc->q + qdim + kvdim, (size_t)kvdim * sizeof(float));
        } else {
            model_linear(m, l, LIN_Q, kc->q, kc->xn, 1, kc->qscratch);
            model_linear(m, l, LIN_K, kslot, kc->xn, 1, kc->qscratch);
            model_linear(m, l, LIN_V, vslot, kc->xn, 1, kc->qscratch);
        }
        rope_apply(kc->q, 1, 1, c->num_attention_heads, hd, pos, m->rope_inv_freq, +1);
        rope_apply(kslot, 1, 1, c->num_key_value_heads, hd, pos, m->rope_inv_freq, +1);
        decode_attention(m, kc, l, pos + 1);
        model_linear(m, l, LIN_O, kc->tmp, kc->atty, 1, kc->qscratch);
        for (int i = 0; i < C; i++) kc->x[i] += kc->tmp[i];

        rmsnorm_forward(kc->xn, &rstd, kc->x, w->post_attention_layernorm, 1, C, c->rms_norm_eps);
        if (fused_gate_up) {
            linear_forward(kc->gate, kc->xn, w->gate_proj, 1, C, 2 * F);
        } else {
            model_linear(m, l, LIN_GATE, kc->gate, kc->xn, 1, kc->qscratch);
            model_linear(m, l, LIN_UP, kc->up, kc->xn, 1, kc->qscratch);
        }
        swiglu_forward(kc->gate, kc->gate, kc->up, 1, F);
        model_linear(m, l, LIN_DOWN, kc->tmp, kc->gate, 1, kc->qscratch);
        for (int i = 0; i < C; i++) kc->x[i] += kc->tmp[i];
    }
    float rstd;
    rmsnorm_forward(kc->xn, &rstd, kc->x, m->w.norm, 1, C, c->rms_norm_eps);
    model_linear(m, c->num_hidden_layers, LIN_LM_HEAD, logits, kc->xn, 1, kc->qscratch);
    return 0;
}

static int by_prob_desc(const void *a, const void *b) {
    const dt_prob_index *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id; /* ties broken by id so sampling is deterministic */
}

int dt_sample(float *logits, int V, const dt_sampler *s, uint64_t *rng, dt_prob_index *scratch) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (s->temperature <= 0.0f) return best;

    float sum = 0;
    for (int i = 0; i < V; i++) {
        scratch[i].p = expf((logits[i] - logits[best]) / s->temperature);
        scratch[i].id = i;
        sum += scratch[i].p;
    }
    int n = V;
    if ((s->top_k > 0 && s->top_k < V) || s->top_p < 1.0f) {
        qsort(scratch, (size_t)V, sizeof *scratch, by_prob_desc);
        if (s->top_k > 0 && s->top_k < n) n = s->top_k;
        if (s->top_p < 1.0f) {
            float cum = 0;
            for (int i = 0; i < n; i++) {
                cum += scratch[i].p / sum;
                if (cum >= s->top_p) {
                    n = i + 1;
                    break;
                }
            }
        }
        sum = 0;
        for (int i = 0; i < n; i++) sum += scratch[i].p;
    }
    for (int i = 0; i < V; i++) logits[i] = 0;
    for (int i = 0; i < n; i++) logits[scratch[i].id] = scratch[i].p / sum;
    float r = dt_rng_uniform(rng) * sum, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += scratch[i].p;
        if (r < cum) return scratch[i].id;
    }
    return scratch[n - 1].id;
}
