/* forward.c — the whole model, forward and backward, over batches [B, T].
 *
 * Every activation the backward pass needs is kept in a dt_runstate allocated once for the
 * largest batch; nothing is allocated inside a step. The layer functions live in src/layers/.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "internal.h"
#include "layers/layers.h"
#include "model/model_quant.h"
#include "model/profile.h"

/* Rows per chunk of the LM head + cross-entropy with chunked_loss, unless the options say: as many
 * as LOSS_CHUNK_FLOATS logits hold (one big product runs faster than many small ones; with a
 * byte vocabulary a whole batch is one chunk), at least LOSS_CHUNK_MIN. */
#define LOSS_CHUNK_FLOATS (1 << 21)
#define LOSS_CHUNK_MIN 256

typedef struct {
    float *ln1, *ln1_rstd;       /* [N, C], [N] */
    float *q, *k, *v;            /* [N, H·hd], [N, KV·hd], [N, KV·hd]; q, k after RoPE */
    float *att;                  /* reference kernel: [B, H, T, T] softmax maps */
    float *logits;               /* keep_logits: [B, H, T, T] scaled attention scores */
    float *lse;                  /* fused kernel: [B, H, T] log-sum-exp of every score row */
    float *o12;                  /* fused kernel, DIFF: [N, H/2, 2, 2·hd] the two maps' outputs */
    float *pre, *head_rstd;      /* DIFF: [N, H/2, 2·hd], [N, H/2]; DIFF V2: pre [N, H, hd] the query
                                    heads' softmax attention before they are combined */
    float *vlam;                 /* DIFF V2: [N, H/2] the per-token λ */
    float *atty;                 /* [N, H·hd] attention output before o_proj (DIFF V2: [N, H/2·hd]) */
    float *resid_mid;            /* [N, C] residual after attention */
    float *ln2, *ln2_rstd;       /* [N, C], [N] */
    float *gate, *up, *hact;     /* [N, F] each */
} layer_acts;

struct dt_runstate {
    int Bmax, Tmax;
    int L;                       /* the model's layers: the accessors below answer NULL past them */
    dt_attention_kernel kernel;
    dt_run_options opt;
    int threads;                 /* OpenMP threads the fused kernel's scratch was sized for */
    size_t qscratch_bytes;
    int B, T, has_targets, count;
    int heads_out;               /* DIFF V2: h, the output heads (the width of its token λ) */
    int ctx_heads, ctx_width;    /* dt_runstate_head_context's heads and width */
    int *tokens, *targets;       /* [N] */
    float **resid;               /* [L+1] × [N, C]: input of each layer; resid[L] feeds the final norm */
    layer_acts *acts;            /* [L] */
    float *lnf, *lnf_rstd;       /* [N, C], [N] */
    int loss_chunk;              /* chunked_loss: rows per chunk */
    int logits_kept;             /* chunked_loss: the forward was one chunk and its logits are intact */
    int rope_built;              /* rope_cos / rope_sin hold the tables of rope_inv_freq */
    float *logits;               /* [N, V], or [loss_chunk, V] with chunked_loss; the backward turns
                                    it into d(loss)/d(logits) */
    /* backward scratch */
    float *dresid, *dln;         /* [N, C] */
    float *datty, *dq, *dk, *dv; /* [N, H·hd], [N, H·hd], [N, KV·hd] × 2 */
    float *dgate, *dup, *dh;     /* [N, F] */
    float *attn_scratch;         /* reference: [B, H, T, T]; fused: per-thread tiles */
    float *dpre, *dz;            /* DIFF V2: [N, H·hd], [N, H/2] */
    float *slopes;               /* ALiBi: [H] slope of every query head */
    float *lambdas;              /* [L] λ used by the last forward */
    float *rope_cos, *rope_sin;  /* [Tmax, hd/2] for positions 0..Tmax−1 (rope_tables) */
    float *rope_inv_freq;        /* [hd/2] the frequencies the tables were made from */
    void *qscratch;              /* quantised linear layers' scratch (model_linear_scratch_bytes) */
    dt_layer_weights *grad_layers; /* [L] views into the caller's gradient buffer */
    float *block;                /* the single allocation all float buffers live in */
    dt_profile *prof;            /* bench --profile: where the step's time goes, or NULL */
};

/* Carves float buffers out of one block: first pass counts, second pass assigns. The count
 * saturates: a layout whose size does not fit in size_t sets `overflow` instead of wrapping. */
typedef struct {
    float *base;
    size_t used;
    int overflow;
} carver;

static float *carve(carver *cv, size_t n) {
    float *p = cv->base ? cv->base + cv->used : NULL;
    size_t slice;
    if (n > SIZE_MAX - 15 || __builtin_add_overflow(cv->used, (n + 15) & ~(size_t)15, &slice)) { /* 64-byte slices */
        cv->overflow = 1;
        return NULL;
    }
    cv->used = slice;
    return p;
}

static void layout_runstate(dt_runstate *rs, const dt_config *c, carver *cv) {
    const size_t N = (size_t)rs->Bmax * rs->Tmax, C = c->hidden_size, F = c->intermediate_size;
    const size_t H = c->num_attention_heads, KV = c->num_key_value_heads, hd = c->head_dim;
    const int diff = c->arch == DT_ARCH_DIFF, v2 = c->arch == DT_ARCH_DIFF_V2, fused = rs->kernel == DT_ATTENTION_FUSED;
    const size_t maps = fused ? 0 : (size_t)rs->Bmax * H * rs->Tmax * rs->Tmax;
    const attention_shape longest = {.B = rs->Bmax, .T = rs->Tmax, .H = (int)H, .KV = (int)KV, .hd = (int)hd,
                                     .diff = diff};
    /* o12 only for DIFF on the fused kernels' online path (a T above their row-block limit) */
    const int keep_o12 = fused && flash_attention_uses_o12(&longest);
    for (int l = 0; l <= c->num_hidden_layers; l++) rs->resid[l] = carve(cv, N * C);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        layer_acts *a = &rs->acts[l];
        a->ln1 = carve(cv, N * C);
        a->ln1_rstd = carve(cv, N);
        a->q = carve(cv, N * H * hd);
        a->k = carve(cv, N * KV * hd);
        a->v = carve(cv, N * KV * hd);
        a->att = fused ? NULL : carve(cv, maps);
        a->logits = rs->opt.keep_logits ? carve(cv, maps) : NULL;
        a->lse = fused ? carve(cv, N * H) : NULL;
        a->o12 = keep_o12 ? carve(cv, 2 * N * H * hd) : NULL;
        a->pre = diff || v2 ? carve(cv, N * H * hd) : NULL;
        a->head_rstd = diff ? carve(cv, N * H / 2) : NULL;
        a->vlam = v2 ? carve(cv, N * H / 2) : NULL;
        a->atty = carve(cv, N * H * hd);
        a->resid_mid = carve(cv, N * C);
        a->ln2 = carve(cv, N * C);
        a->ln2_rstd = carve(cv, N);
        a->gate = carve(cv, N * F);
        a->up = carve(cv, N * F);
        a->hact = carve(cv, N * F);
    }
    rs->lnf = carve(cv, N * C);
    rs->lnf_rstd = carve(cv, N);
    rs->logits = carve(cv, (rs->opt.chunked_loss && N > (size_t)rs->loss_chunk ? (size_t)rs->loss_chunk : N) *
                               c->vocab_size);
    rs->dresid = carve(cv, N * C);
    rs->dln = carve(cv, N * C);
    rs->datty = carve(cv, N * H * hd);
    rs->dq = carve(cv, N * H * hd);
    rs->dk = carve(cv, N * KV * hd);
    rs->dv = carve(cv, N * KV * hd);
    rs->dgate = carve(cv, N * F);
    rs->dup = carve(cv, N * F);
    rs->dh = carve(cv, N * F);
    if (fused) {
        rs->attn_scratch = carve(cv, flash_attention_scratch_floats(&longest, rs->threads));
    } else {
        rs->attn_scratch = carve(cv, maps);
    }
    rs->lambdas = carve(cv, c->num_hidden_layers);
    rs->rope_cos = carve(cv, (size_t)rs->Tmax * (hd / 2));
    rs->rope_sin = carve(cv, (size_t)rs->Tmax * (hd / 2));
    rs->rope_inv_freq = carve(cv, hd / 2);
    rs->qscratch = carve(cv, (rs->qscratch_bytes + sizeof(float) - 1) / sizeof(float));
    rs->dpre = v2 ? carve(cv, N * H * hd) : NULL;
    rs->dz = v2 ? carve(cv, N * H / 2) : NULL;
    rs->slopes = c->position == DT_POS_ALIBI ? carve(cv, H) : NULL;
}

/* The RoPE tables for m's frequencies: made with the run state, and again if it is used with a
 * model whose frequencies differ (a run state belongs to a config, not to one model). */
static void refresh_rope_tables(const dt_model *m, dt_runstate *rs) {
    const size_t half = (size_t)m->cfg.head_dim / 2, bytes = half * sizeof(float);
    if (rs->rope_built && memcmp(rs->rope_inv_freq, m->rope_inv_freq, bytes) == 0) return;
    rope_tables(rs->rope_cos, rs->rope_sin, rs->Tmax, m->cfg.head_dim, m->rope_inv_freq);
    memcpy(rs->rope_inv_freq, m->rope_inv_freq, bytes);
    rs->rope_built = 1;
}

dt_runstate *dt_runstate_create(const dt_model *m, int B, int T, dt_error *err) {
    return dt_runstate_create_with(m, B, T, NULL, err);
}

dt_runstate *dt_runstate_create_with(const dt_model *m, int B, int T, const dt_run_options *opt, dt_error *err) {
    const dt_config *c = &m->cfg;
    if (B <= 0 || T <= 0) {
        dt_fail(err, "batch %d × sequence %d: both must be positive", B, T);
        return NULL;
    }
    if (T > c->max_position_embeddings) {
        dt_fail(err, "sequence length %d exceeds max_position_embeddings %d", T, c->max_position_embeddings);
        return NULL;
    }
    /* B·T indexes rows as int throughout the forward and backward: cap it where it is chosen */
    if ((int64_t)B * T > DT_MAX_BATCH_TOKENS) {
        dt_fail(err, "batch %d × sequence %d = %lld tokens: more than one run state holds (limit %d)", B, T,
                (long long)B * T, DT_MAX_BATCH_TOKENS);
        return NULL;
    }
    dt_runstate *rs = calloc(1, sizeof *rs);
    if (!rs) goto oom;
    rs->Bmax = B;
    rs->Tmax = T;
    rs->L = m->cfg.num_hidden_layers;
    rs->heads_out = c->num_attention_heads / 2;
    rs->ctx_heads = c->arch == DT_ARCH_LLAMA ? c->num_attention_heads : c->num_attention_heads / 2;
    rs->ctx_width = c->arch == DT_ARCH_DIFF ? 2 * c->head_dim : c->head_dim;
    if (opt) rs->opt = *opt;
    if (rs->opt.logit_bits < 0 || rs->opt.logit_bits == 1 || rs->opt.logit_bits > 24) { /* 1 bit: zero alone */
        dt_fail(err, "attention logit quantisation to %d bits: must be 0 (off) or 2..24", rs->opt.logit_bits);
        dt_runstate_free(rs);
        return NULL;
    }
    rs->kernel = rs->opt.keep_logits || rs->opt.logit_bits ? DT_ATTENTION_REFERENCE : rs->opt.kernel;
    rs->threads = omp_get_max_threads();
    rs->loss_chunk = rs->opt.loss_chunk_rows > 0 ? rs->opt.loss_chunk_rows : LOSS_CHUNK_FLOATS / m->cfg.vocab_size;
    if (rs->opt.loss_chunk_rows <= 0 && rs->loss_chunk < LOSS_CHUNK_MIN) rs->loss_chunk = LOSS_CHUNK_MIN;
    /* sized for any quantisation, so that a model quantised after this was made can still run */
    rs->qscratch_bytes = model_linear_scratch_bytes(m, B * T);
    rs->resid = calloc((size_t)c->num_hidden_layers + 1, sizeof *rs->resid);
    rs->acts = calloc((size_t)c->num_hidden_layers, sizeof *rs->acts);
    rs->tokens = calloc((size_t)B * T, sizeof(int));
    rs->targets = calloc((size_t)B * T, sizeof(int));
    rs->grad_layers = calloc((size_t)c->num_hidden_layers, sizeof *rs->grad_layers);
    if (!rs->resid || !rs->acts || !rs->tokens || !rs->targets || !rs->grad_layers) goto oom;
    carver cv = {0};
    layout_runstate(rs, c, &cv);
    size_t total = cv.used;
    if (cv.overflow || total > SIZE_MAX / sizeof(float)) {
        dt_runstate_free(rs);
        dt_fail_oom(err, "activations for batch %d × %d do not fit in memory's address space", B, T);
        return NULL;
    }
    rs->block = aligned_alloc(64, total * sizeof(float));
    if (!rs->block) {
        dt_runstate_free(rs);
        dt_fail_oom(err, "out of memory: activations for batch %d × %d need %.1f MB", B, T, (double)total * 4 / 1e6);
        return NULL;
    }
    memset(rs->block, 0, total * sizeof(float));
    cv = (carver){.base = rs->block};
    layout_runstate(rs, c, &cv);
    refresh_rope_tables(m, rs);
    if (rs->slopes) alibi_query_slopes(rs->slopes, config_head_pairing(c), c->num_attention_heads);
    return rs;
oom:
    dt_runstate_free(rs);
    dt_fail_oom(err, "out of memory allocating the run state");
    return NULL;
}

void dt_runstate_free(dt_runstate *rs) {
    if (!rs) return;
    free(rs->resid);
    free(rs->acts);
    free(rs->tokens);
    free(rs->targets);
    free(rs->grad_layers);
    free(rs->block);
    free(rs->prof);
    free(rs);
}

int runstate_profile_enable(dt_runstate *rs, dt_error *err) {
    if (!rs->prof && !(rs->prof = malloc(sizeof *rs->prof)))
        return dt_fail_oom(err, "out of memory for the step profile");
    runstate_profile_reset(rs);
    return 0;
}
dt_profile *runstate_profile(dt_runstate *rs) { return rs->prof; }
void runstate_profile_reset(dt_runstate *rs) {
    if (rs->prof) memset(rs->prof, 0, sizeof *rs->prof);
}

const float *dt_runstate_logits(const dt_runstate *rs) { return rs->opt.chunked_loss ? NULL : rs->logits; }
static int has_layer(const dt_runstate *rs, int layer) { return layer >= 0 && layer < rs->L; }

const float *dt_runstate_attention(const dt_runstate *rs, int layer) {
    return has_layer(rs, layer) && rs->kernel == DT_ATTENTION_REFERENCE ? rs->acts[layer].att : NULL;
}
const float *dt_runstate_attention_logits(const dt_runstate *rs, int layer) {
    return has_layer(rs, layer) ? rs->acts[layer].logits : NULL;
}
const float *dt_runstate_hidden(const dt_runstate *rs, int layer) {
    return layer >= 0 && layer <= rs->L ? rs->resid[layer] : NULL;
}
const float *dt_runstate_head_context(const dt_runstate *rs, int layer, int *heads, int *width) {
    if (heads) *heads = rs->ctx_heads;
    if (width) *width = rs->ctx_width;
    if (!has_layer(rs, layer)) return NULL;
    /* DIFF keeps u_j (pre) for the norm's backward; the others' head outputs are o_proj's input */
    return rs->acts[layer].head_rstd ? rs->acts[layer].pre : rs->acts[layer].atty;
}
const float *dt_runstate_token_lambda(const dt_runstate *rs, int layer, size_t *n) {
    const float *lam = has_layer(rs, layer) ? rs->acts[layer].vlam : NULL;
    if (n) *n = lam ? (size_t)rs->B * rs->T * rs->heads_out : 0;
    return lam;
}

static attention_shape attention_shape_of(const dt_model *m, const dt_runstate *rs, int layer, int B, int T,
                                          float lambda) {
    const dt_config *c = &m->cfg;
    attention_shape s = {
        .B = B, .T = T, .H = c->num_attention_heads, .KV = c->num_key_value_heads, .hd = c->head_dim,
        .diff = c->arch == DT_ARCH_DIFF, .lambda = lambda, .lambda_init = dt_lambda_init(layer),
        .eps = c->rms_norm_eps, .subln = m->w.layers[layer].subln,
        .alibi = rs->slopes, .softmax1 = c->softmax1, .no_norm = c->no_head_norm,
        .logit_bits = rs->opt.logit_bits, .logit_per_row = rs->opt.logit_per_row, .logits = rs->acts[layer].logits,
    };
    return s;
}

/* The fused kernels give every OpenMP thread its own slice of scratch, sized when the run state
 * was made; if the caller has raised the thread count since, run them on that many threads. */
static int limit_threads(const dt_runstate *rs) {
    int before = omp_get_max_threads();
    if (before > rs->threads) omp_set_num_threads(rs->threads);
    return before;
}

/* The attention kernels' output: DIFF V2 runs them as softmax attention over its 2h query heads
 * into `pre`, and combines the heads afterwards. */
static float *kernel_out(const layer_acts *a, const dt_config *c) { return c->arch == DT_ARCH_DIFF_V2 ? a->pre : a->atty; }

static void fused_attention_forward(dt_runstate *rs, layer_acts *a, float *out, const attention_shape *s) {
    int threads = limit_threads(rs);
    flash_attention_forward(out, a->lse, a->o12, a->pre, a->head_rstd, a->q, a->k, a->v, rs->attn_scratch, s);
    omp_set_num_threads(threads);
}

static void fused_attention_backward(dt_runstate *rs, const layer_acts *a, const float *dout, const float *out,
                                     float *dsubln, float *dlambda, const attention_shape *s) {
    int threads = limit_threads(rs);
    flash_attention_backward(rs->dq, rs->dk, rs->dv, dlambda, dsubln, dout, out, a->lse, a->o12, a->pre,
                             a->head_rstd, a->q, a->k, a->v, rs->attn_scratch, s);
    omp_set_num_threads(threads);
}

/* y = x·Wᵀ through the model's float or quantised layer `which` of `layer` (layer L: the LM
 * head), shown first to the caller's observer (calibration). */
static void lin(const dt_model *m, dt_runstate *rs, int layer, int which, float *y, const float *x, int N) {
    if (rs->opt.observe_linear) {
        int out, in;
        model_linear_shape(m, layer, which, &out, &in);
        rs->opt.observe_linear(rs->opt.observe_ctx, layer, which, x, N, in);
    }
    model_linear(m, layer, which, y, x, N, rs->qscratch);
}

/* The LM head and the cross-entropy over loss_chunk rows at a time (chunked_loss): the mean over
 * all counted rows, with rs->count set, and only one chunk of logits in memory. */
static float chunked_loss_forward(const dt_model *m, dt_runstate *rs, const int *targets, int N) {
    const int C = m->cfg.hidden_size, V = m->cfg.vocab_size;
    double total = 0, t = profile_start(rs->prof);
    rs->count = 0;
    for (int r0 = 0; r0 < N; r0 += rs->loss_chunk) {
        const int rows = N - r0 < rs->loss_chunk ? N - r0 : rs->loss_chunk;
        int count;
        lin(m, rs, m->cfg.num_hidden_layers, LIN_LM_HEAD, rs->logits, rs->lnf + (size_t)r0 * C, rows);
        profile_lap(rs->prof, PROF_LM_HEAD, 1, &t);
        profile_lm_head_flops(rs->prof, 1, rows, C, V);
        total += (double)crossentropy_forward(rs->logits, targets + r0, rows, V, &count) * count;
        profile_lap(rs->prof, PROF_LOSS, 1, &t);
        rs->count += count;
    }
    rs->logits_kept = N <= rs->loss_chunk; /* crossentropy_forward leaves the logits as they are */
    return rs->count ? (float)(total / rs->count) : 0.0f;
}

/* dln = d(loss)/d(lnf) and g_lm_head += ..., recomputing each chunk's logits. */
static void chunked_loss_backward(const dt_model *m, dt_runstate *rs, float *g_lm_head, int N) {
    const int C = m->cfg.hidden_size, V = m->cfg.vocab_size;
    double t = profile_start(rs->prof);
    for (int r0 = 0; r0 < N; r0 += rs->loss_chunk) {
        const int rows = N - r0 < rs->loss_chunk ? N - r0 : rs->loss_chunk;
        const float *x = rs->lnf + (size_t)r0 * C;
        if (!rs->logits_kept) {
            linear_forward(rs->logits, x, m->w.lm_head, rows, C, V);
            profile_lap(rs->prof, PROF_LM_HEAD, 1, &t);
            profile_lm_head_flops(rs->prof, 1, rows, C, V);
        }
        crossentropy_backward(rs->logits, rs->logits, rs->targets + r0, rows, V, rs->count, 1.0f);
        profile_lap(rs->prof, PROF_LOSS, 1, &t);
        linear_backward(rs->dln + (size_t)r0 * C, g_lm_head, rs->logits, x, m->w.lm_head, rows, C, V, GRAD_SET_DX);
        profile_lap(rs->prof, PROF_LM_HEAD, 2, &t);
        profile_lm_head_flops(rs->prof, 2, rows, C, V);
    }
    rs->logits_kept = 0; /* they are d(loss)/d(logits) now */
}

int dt_forward(const dt_model *m, dt_runstate *rs, const int *tokens, const int *targets, int B, int T,
               float *loss, dt_error *err) {
    const dt_config *c = &m->cfg;
    const int C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    const int v2 = c->arch == DT_ARCH_DIFF_V2, h2 = c->num_attention_heads / 2;
    if (B <= 0 || T <= 0 || B > rs->Bmax || T > rs->Tmax)
        return dt_fail(err, "batch %d × %d does not fit the run state (%d × %d)", B, T, rs->Bmax, rs->Tmax);
    const int N = B * T; /* ≤ Bmax·Tmax ≤ DT_MAX_BATCH_TOKENS */
    for (int i = 0; i < N; i++) {
        if (tokens[i] < 0 || tokens[i] >= V)
            return dt_fail(err, "token id %d at sequence %d position %d is out of range [0, %d)", tokens[i], i / T,
                           i % T, V);
        if (targets && (targets[i] < -1 || targets[i] >= V))
            return dt_fail(err, "target id %d at sequence %d position %d is out of range [0, %d)", targets[i],
                           i / T, i % T, V);
    }
    rs->B = B;
    rs->T = T;
    rs->has_targets = targets != NULL;
    rs->logits_kept = 0;
    refresh_rope_tables(m, rs);
    memcpy(rs->tokens, tokens, (size_t)N * sizeof(int));
    if (targets) memcpy(rs->targets, targets, (size_t)N * sizeof(int));

    /* Each residual add is fused with the norm that reads its result: the attention block's with
     * post_attention_layernorm, the MLP block's with the next layer's input_layernorm (or the
     * final norm). rs->dln, the backward's scratch, holds each block's output before the add. */
    const int L = c->num_hidden_layers;
    dt_profile *prof = rs->prof;
    double t = profile_start(prof);
    embedding_forward(rs->resid[0], tokens, m->w.embed_tokens, N, C);
    profile_lap(prof, PROF_EMBED, 0, &t);
    if (L > 0) rmsnorm_forward(rs->acts[0].ln1, rs->acts[0].ln1_rstd, rs->resid[0], m->w.layers[0].input_layernorm, N, C,
                               c->rms_norm_eps);
    else rmsnorm_forward(rs->lnf, rs->lnf_rstd, rs->resid[0], m->w.norm, N, C, c->rms_norm_eps);
    profile_lap(prof, PROF_NORM, 1, &t);
    for (int l = 0; l < L; l++) {
        const dt_layer_weights *w = &m->w.layers[l];
        layer_acts *a = &rs->acts[l];
        rs->lambdas[l] = dt_model_lambda(m, l);
        attention_shape s = attention_shape_of(m, rs, l, B, T, rs->lambdas[l]);
        if (prof) s.busy = &prof->attn_busy[0];

        lin(m, rs, l, LIN_Q, a->q, a->ln1, N);
        lin(m, rs, l, LIN_K, a->k, a->ln1, N);
        lin(m, rs, l, LIN_V, a->v, a->ln1, N);
        profile_lap_mm(prof, l, MM_QKV, 0, 3, &t);
        if (c->position == DT_POS_ROPE) {
            rope_apply_table(a->q, B, T, c->num_attention_heads, c->head_dim, rs->rope_cos, rs->rope_sin, +1);
            rope_apply_table(a->k, B, T, c->num_key_value_heads, c->head_dim, rs->rope_cos, rs->rope_sin, +1);
        }
        profile_lap(prof, PROF_ROPE, 2, &t);
        if (rs->kernel == DT_ATTENTION_FUSED)
            fused_attention_forward(rs, a, kernel_out(a, c), &s);
        else attention_forward(kernel_out(a, c), a->att, a->pre, a->head_rstd, a->q, a->k, a->v, &s);
        if (v2) { /* λ_t = sigmoid(W_λ x_t), then o_j = a_{2j} − λ_{t,j}·a_{2j+1} (or the config's ablation) */
            if (w->lambda_proj) linear_forward(a->vlam, a->ln1, w->lambda_proj, N, C, h2);
            diffv2_combine_forward_with(a->atty, a->vlam, a->vlam, a->pre, N, h2, c->head_dim, (int)c->v2_pairs,
                                        (int)c->v2_lambda);
        }
        profile_lap(prof, PROF_ATTN_FWD, 1, &t);
        lin(m, rs, l, LIN_O, rs->dln, a->atty, N);
        profile_lap_mm(prof, l, MM_O, 0, 1, &t);
        residual_rmsnorm_forward(a->resid_mid, a->ln2, a->ln2_rstd, rs->resid[l], rs->dln,
                                 w->post_attention_layernorm, N, C, c->rms_norm_eps);
        profile_lap(prof, PROF_NORM, 1, &t);

        lin(m, rs, l, LIN_GATE, a->gate, a->ln2, N);
        lin(m, rs, l, LIN_UP, a->up, a->ln2, N);
        profile_lap_mm(prof, l, MM_GATE_UP, 0, 2, &t);
        swiglu_forward(a->hact, a->gate, a->up, N, F);
        profile_lap(prof, PROF_SWIGLU, 1, &t);
        lin(m, rs, l, LIN_DOWN, rs->dln, a->hact, N);
        profile_lap_mm(prof, l, MM_DOWN, 0, 1, &t);
        const int last = l + 1 == L;
        residual_rmsnorm_forward(rs->resid[l + 1], last ? rs->lnf : rs->acts[l + 1].ln1,
                                 last ? rs->lnf_rstd : rs->acts[l + 1].ln1_rstd, a->resid_mid, rs->dln,
                                 last ? m->w.norm : m->w.layers[l + 1].input_layernorm, N, C, c->rms_norm_eps);
        profile_lap(prof, PROF_NORM, 1, &t);
    }
    if (rs->opt.chunked_loss) {
        if (targets) {
            float l = chunked_loss_forward(m, rs, targets, N);
            if (loss) *loss = l;
        }
        return 0;
    }
    t = profile_start(prof);
    lin(m, rs, L, LIN_LM_HEAD, rs->logits, rs->lnf, N);
    profile_lap(prof, PROF_LM_HEAD, 1, &t);
    profile_lm_head_flops(prof, 1, N, C, V);
    if (targets) {
        float l = crossentropy_forward(rs->logits, targets, N, V, &rs->count);
        profile_lap(prof, PROF_LOSS, 1, &t);
        if (loss) *loss = l;
    }
    return 0;
}

/* d(loss)/dλ → the four λ vectors of λ = exp(q1·k1) − exp(q2·k2) + λinit. */
static void lambda_backward(dt_layer_weights *g, const dt_layer_weights *w, int hd, float dlambda) {
    float d1 = 0, d2 = 0;
    for (int i = 0; i < hd; i++) {
        d1 += w->lambda_q1[i] * w->lambda_k1[i];
        d2 += w->lambda_q2[i] * w->lambda_k2[i];
    }
    const float e1 = dlambda * expf(d1), e2 = -dlambda * expf(d2);
    for (int i = 0; i < hd; i++) {
        g->lambda_q1[i] += e1 * w->lambda_k1[i];
        g->lambda_k1[i] += e1 * w->lambda_q1[i];
        g->lambda_q2[i] += e2 * w->lambda_k2[i];
        g->lambda_k2[i] += e2 * w->lambda_q2[i];
    }
}

void dt_backward(const dt_model *m, dt_runstate *rs, float *grads) { dt_backward_notify(m, rs, grads, NULL, NULL); }

void dt_backward_notify(const dt_model *m, dt_runstate *rs, float *grads, dt_grads_ready_fn ready, void *ctx) {
    const dt_config *c = &m->cfg;
    const int B = rs->B, T = rs->T, N = B * T;
    const int C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    const int qdim = c->num_attention_heads * c->head_dim, kvdim = c->num_key_value_heads * c->head_dim;
    const int v2 = c->arch == DT_ARCH_DIFF_V2, odim = v2 ? qdim / 2 : qdim, h2 = c->num_attention_heads / 2;
    if (!rs->has_targets) return;

    dt_weights g; /* the gradient buffer seen with the weights' layout */
    dt_weights_view(m, grads, &g, rs->grad_layers);
    dt_profile *prof = rs->prof;
    double t = profile_start(prof);

    /* The activation gradients (dln, dh, dgate, dup, datty, dq, dk, dv) are written by their
     * first writer (GRAD_SET_DX, set_grads, swiglu_backward), never zeroed; only dresid, which
     * every norm backward adds into, is. */
    if (rs->opt.chunked_loss) {
        chunked_loss_backward(m, rs, g.lm_head, N);
        t = profile_start(prof);
    } else {
        crossentropy_backward(rs->logits, rs->logits, rs->targets, N, V, rs->count, 1.0f);
        profile_lap(prof, PROF_LOSS, 1, &t);
        linear_backward(rs->dln, g.lm_head, rs->logits, rs->lnf, m->w.lm_head, N, C, V, GRAD_SET_DX);
        profile_lap(prof, PROF_LM_HEAD, 2, &t);
        profile_lm_head_flops(prof, 2, N, C, V);
    }
    memset(rs->dresid, 0, (size_t)N * C * sizeof(float));
    profile_lap(prof, PROF_ZERO, 0, &t);
    rmsnorm_backward(rs->dresid, g.norm, rs->dln, rs->resid[c->num_hidden_layers], rs->lnf_rstd, m->w.norm, N, C);
    profile_lap(prof, PROF_NORM, 2, &t);
    if (ready) ready(ctx, (size_t)(g.norm - grads)); /* the final norm and an untied lm_head follow it */

    for (int l = c->num_hidden_layers - 1; l >= 0; l--) {
        const dt_layer_weights *w = &m->w.layers[l];
        dt_layer_weights *gw = &g.layers[l];
        layer_acts *a = &rs->acts[l];
        attention_shape s = attention_shape_of(m, rs, l, B, T, rs->lambdas[l]);
        if (prof) s.busy = &prof->attn_busy[1];
        s.set_grads = 1;

        /* MLP block: resid[l+1] = resid_mid + down(swiglu(gate(ln2), up(ln2))) */
        linear_backward(rs->dh, gw->down_proj, rs->dresid, a->hact, w->down_proj, N, F, C, GRAD_SET_DX);
        profile_lap_mm(prof, l, MM_DOWN, 1, 2, &t);
        swiglu_backward(rs->dgate, rs->dup, rs->dh, a->gate, a->up, N, F);
        profile_lap(prof, PROF_SWIGLU, 1, &t);
        linear_backward(rs->dln, gw->gate_proj, rs->dgate, a->ln2, w->gate_proj, N, C, F, GRAD_SET_DX);
        linear_backward(rs->dln, gw->up_proj, rs->dup, a->ln2, w->up_proj, N, C, F, GRAD_ADD);
        profile_lap_mm(prof, l, MM_GATE_UP, 1, 4, &t);
        rmsnorm_backward(rs->dresid, gw->post_attention_layernorm, rs->dln, a->resid_mid, a->ln2_rstd,
                         w->post_attention_layernorm, N, C);
        profile_lap(prof, PROF_NORM, 2, &t);

        /* Attention block: resid_mid = resid[l] + o_proj(attention(rope(q), rope(k), v)) */
        linear_backward(rs->datty, gw->o_proj, rs->dresid, a->atty, w->o_proj, N, odim, C, GRAD_SET_DX);
        profile_lap_mm(prof, l, MM_O, 1, 2, &t);
        /* the kernels' output gradient: DIFF V2's goes back through the head combination first */
        const float *dkernel = rs->datty;
        if (v2) {
            memset(rs->dpre, 0, (size_t)N * qdim * sizeof(float));
            memset(rs->dz, 0, (size_t)N * h2 * sizeof(float));
            diffv2_combine_backward_with(rs->dpre, rs->dz, rs->datty, a->pre, a->vlam, N, h2, c->head_dim,
                                         (int)c->v2_pairs, (int)c->v2_lambda);
            dkernel = rs->dpre;
        }
        profile_lap(prof, PROF_ZERO, 0, &t);
        float dlambda = 0; /* dq, dk, dv: written by the kernel (s.set_grads) */
        if (rs->kernel == DT_ATTENTION_FUSED)
            fused_attention_backward(rs, a, dkernel, kernel_out(a, c), gw->subln, &dlambda, &s);
        else
            attention_backward(rs->dq, rs->dk, rs->dv, &dlambda, gw->subln, dkernel, a->att, a->pre, a->head_rstd,
                               a->q, a->k, a->v, rs->attn_scratch, &s);
        if (s.diff && !c->fixed_lambda) lambda_backward(gw, w, c->head_dim, dlambda);
        profile_lap(prof, PROF_ATTN_BWD, 1, &t);
        if (c->position == DT_POS_ROPE) {
            rope_apply_table(rs->dq, B, T, c->num_attention_heads, c->head_dim, rs->rope_cos, rs->rope_sin, -1);
            rope_apply_table(rs->dk, B, T, c->num_key_value_heads, c->head_dim, rs->rope_cos, rs->rope_sin, -1);
        }
        profile_lap(prof, PROF_ROPE, 2, &t);
        const int has_wl = w->lambda_proj != NULL; /* DIFF V2 with a W_λ */
        if (has_wl) linear_backward(rs->dln, gw->lambda_proj, rs->dz, a->ln1, w->lambda_proj, N, C, h2, GRAD_SET_DX);
        linear_backward(rs->dln, gw->q_proj, rs->dq, a->ln1, w->q_proj, N, C, qdim, has_wl ? GRAD_ADD : GRAD_SET_DX);
        linear_backward(rs->dln, gw->k_proj, rs->dk, a->ln1, w->k_proj, N, C, kvdim, GRAD_ADD);
        linear_backward(rs->dln, gw->v_proj, rs->dv, a->ln1, w->v_proj, N, C, kvdim, GRAD_ADD);
        profile_lap_mm(prof, l, MM_QKV, 1, 6, &t);
        rmsnorm_backward(rs->dresid, gw->input_layernorm, rs->dln, rs->resid[l], a->ln1_rstd, w->input_layernorm, N,
                         C);
        profile_lap(prof, PROF_NORM, 2, &t);
        if (ready) ready(ctx, (size_t)(gw->input_layernorm - grads)); /* layer l's first tensor */
        t = profile_start(prof); /* what `ready` does (a data-parallel exchange) is not the backward's */
    }
    embedding_backward(g.embed_tokens, rs->dresid, rs->tokens, N, C);
    profile_lap(prof, PROF_EMBED, 0, &t);
    if (ready) ready(ctx, 0);
}
