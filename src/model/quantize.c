/* quantize.c — a model's linear layers as one abstraction (float or quantised), and the
 * post-training quantisation of a float model: calibration of activation ranges on sample text,
 * SmoothQuant-style scale migration, and the conversion itself. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layers/layers.h"
#include "model/model_quant.h"

static const char *const module_names[LIN_PER_LAYER] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                        "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                        "mlp.down_proj"};

/* ---------------------------------------------------------------- the linear-layer abstraction */

void model_linear_shape(const dt_model *m, int layer, int which, int *out, int *in) {
    config_linear_shape(&m->cfg, layer, which, out, in);
}

void config_linear_shape(const dt_config *c, int layer, int which, int *out, int *in) {
    const int C = c->hidden_size, F = c->intermediate_size;
    const int qdim = c->num_attention_heads * c->head_dim, kvdim = c->num_key_value_heads * c->head_dim;
    if (layer == c->num_hidden_layers) {
        *out = c->vocab_size;
        *in = C;
        return;
    }
    switch (which) {
    case LIN_Q: *out = qdim, *in = C; break;
    case LIN_K:
    case LIN_V: *out = kvdim, *in = C; break;
    case LIN_O: *out = C, *in = c->arch == DT_ARCH_DIFF_V2 ? qdim / 2 : qdim; break; /* V2: h = H/2 heads */
    case LIN_GATE:
    case LIN_UP: *out = F, *in = C; break;
    default: *out = C, *in = F; break; /* LIN_DOWN */
    }
}

void model_linear_name(char *buf, size_t n, int layer, int which, int n_layers) {
    if (layer == n_layers) snprintf(buf, n, "lm_head");
    else snprintf(buf, n, "model.layers.%d.%s", layer, module_names[which]);
}

static const float *float_weight(const dt_model *m, int layer, int which) {
    if (layer == m->cfg.num_hidden_layers) return m->w.lm_head;
    const dt_layer_weights *w = &m->w.layers[layer];
    const float *const ptrs[LIN_PER_LAYER] = {w->q_proj, w->k_proj, w->v_proj, w->o_proj,
                                              w->gate_proj, w->up_proj, w->down_proj};
    return ptrs[which];
}

const qlinear *model_qlinear(const dt_model *m, int layer, int which) {
    const struct dt_quant *q = m->quant;
    if (!q) return NULL;
    const int idx = layer == m->cfg.num_hidden_layers ? layer * LIN_PER_LAYER : layer * LIN_PER_LAYER + which;
    return idx < q->n_linear ? &q->lin[idx] : NULL;
}

void model_linear(const dt_model *m, int layer, int which, float *y, const float *x, int N, void *scratch) {
    const qlinear *q = model_qlinear(m, layer, which);
    if (q) {
        qlinear_forward(q, y, x, N, scratch);
        return;
    }
    int out, in;
    model_linear_shape(m, layer, which, &out, &in);
    linear_forward(y, x, float_weight(m, layer, which), N, in, out);
}

void model_linear_shared(const dt_model *m, int layer, const int *which, float *const *ys, int n, const float *x, int N,
                         void *scratch) {
    const qlinear *q[QLINEAR_SHARED_MAX];
    int all_quantised = n >= 1 && n <= QLINEAR_SHARED_MAX;
    for (int i = 0; all_quantised && i < n; i++) all_quantised = (q[i] = model_qlinear(m, layer, which[i])) != NULL;
    if (all_quantised) {
        qlinear_forward_shared(q, ys, n, x, N, scratch);
        return;
    }
    for (int i = 0; i < n; i++) model_linear(m, layer, which[i], ys[i], x, N, scratch);
}

size_t model_linear_scratch_bytes(const dt_model *m, int N) {
    const dt_config *c = &m->cfg;
    int in = c->hidden_size;
    if (c->intermediate_size > in) in = c->intermediate_size;
    if (c->num_attention_heads * c->head_dim > in) in = c->num_attention_heads * c->head_dim;
    return qlinear_scratch_bytes(N, in, 0);
}

/* ---------------------------------------------------------------- schemes and options */

void dt_quant_defaults(dt_quant_options *o) {
    memset(o, 0, sizeof *o);
    o->smooth_alpha = -1.0f;
    o->calib_samples = 300;
    o->calib_seq = 128;
    o->calib_batch = 8;
    o->seed = 1;
}

static const char *const scheme_names[] = {"none", "q8_0", "q4_0", "w8a8"};

const char *dt_quant_scheme_name(dt_quant_scheme s) {
    return s >= DT_QUANT_NONE && s <= DT_QUANT_W8A8 ? scheme_names[s] : "?";
}

int dt_quant_scheme_parse(const char *name, dt_quant_scheme *out, dt_error *err) {
    for (int s = DT_QUANT_Q8_0; s <= DT_QUANT_W8A8; s++)
        if (name && strcmp(name, scheme_names[s]) == 0) {
            *out = (dt_quant_scheme)s;
            return 0;
        }
    return dt_fail(err, "unknown quantisation scheme '%s' (expected q8_0, q4_0 or w8a8)", name ? name : "(null)");
}

static qformat scheme_format(dt_quant_scheme s) {
    return s == DT_QUANT_Q8_0 ? QFMT_Q8_0 : s == DT_QUANT_Q4_0 ? QFMT_Q4_0 : QFMT_W8A8;
}

dt_quant_scheme dt_model_quant_scheme(const dt_model *m, dt_quant_options *o) {
    if (!m->quant) {
        if (o) dt_quant_defaults(o);
        return DT_QUANT_NONE;
    }
    if (o) *o = m->quant->opt;
    return m->quant->opt.scheme;
}

const dt_quant_act_stat *dt_model_quant_act_stats(const dt_model *m, int *n) {
    *n = m->quant && m->quant->stats ? m->quant->n_linear : 0;
    return *n ? m->quant->stats : NULL;
}

/* What a decoding step reads besides the products: every parameter outside them but the embedding
 * table (the norms, DIFF's λ vectors and per-head norm, V2's λ projection) and the one row of the
 * table it looks up (tied, the LM head reads the whole table). Counted from the parameters, so that
 * a float model's bytes are dt_bench_decode_weight_bytes' 4 · (parameters − table + one row): the
 * norms alone left DIFF's λ out of a quantised model's count and not of its float copy's. */
static size_t decode_float_bytes(const dt_config *c, size_t n_params) {
    const size_t C = (size_t)c->hidden_size, table = (size_t)c->vocab_size * C;
    size_t linear = 0;
    for (int l = 0; l < c->num_hidden_layers; l++)
        for (int which = 0; which < LIN_PER_LAYER; which++) {
            int out, in;
            config_linear_shape(c, l, which, &out, &in);
            linear += (size_t)out * in;
        }
    const size_t outside = linear + table + (c->tie_word_embeddings ? 0 : table);
    if (n_params < outside) return 0; /* a config dt_config_param_count refused */
    return (n_params - outside + (c->tie_word_embeddings ? 0 : C)) * sizeof(float);
}

size_t dt_model_decode_bytes(const dt_model *m) {
    const int L = m->cfg.num_hidden_layers;
    size_t bytes = decode_float_bytes(&m->cfg, m->n_params);
    for (int l = 0; l <= L; l++)
        for (int which = 0; which < (l == L ? 1 : LIN_PER_LAYER); which++) {
            const qlinear *q = model_qlinear(m, l, which);
            int out, in;
            model_linear_shape(m, l, which, &out, &in);
            bytes += q ? qlinear_weight_bytes(q) : (size_t)out * in * sizeof(float);
        }
    return bytes;
}

size_t dt_config_decode_bytes(const dt_config *c, dt_quant_scheme scheme, int lm_head) {
    const int L = c->num_hidden_layers;
    size_t bytes = decode_float_bytes(c, dt_config_param_count(c));
    for (int l = 0; l <= L; l++)
        for (int which = 0; which < (l == L ? 1 : LIN_PER_LAYER); which++) {
            int out, in;
            config_linear_shape(c, l, which, &out, &in);
            const int quantised = scheme != DT_QUANT_NONE && (l < L || lm_head);
            bytes += qlinear_shape_bytes(quantised ? scheme_format(scheme) : QFMT_F32, out, in, 0);
        }
    return bytes;
}

void model_quant_free(dt_model *m) {
    struct dt_quant *q = m->quant;
    if (!q) return;
    for (int i = 0; i < q->n_linear; i++) qlinear_free(&q->lin[i]);
    free(q->lin);
    free(q->stats);
    free(q);
    m->quant = NULL;
}

int dt_model_dequantize(dt_model *m, dt_error *err) {
    if (!m->quant) return 0;
    if (!m->quant->floats_kept)
        return dt_fail(err, "the model was loaded from a quantised checkpoint (%s): its float weights are not known; "
                            "load the float model it was made from",
                       dt_quant_scheme_name(m->quant->opt.scheme));
    model_quant_free(m);
    return 0;
}

static int check_options(const dt_model *m, const dt_quant_options *o, dt_error *err) {
    if (m->quant) return dt_fail(err, "the model is already quantised (%s)", dt_quant_scheme_name(m->quant->opt.scheme));
    if (o->scheme < DT_QUANT_Q8_0 || o->scheme > DT_QUANT_W8A8)
        return dt_fail(err, "scheme %d: not a quantisation scheme", (int)o->scheme);
    const int w8a8 = o->scheme == DT_QUANT_W8A8;
    if (!w8a8 && o->dynamic_activations)
        return dt_fail(err, "dynamic_activations: a w8a8 option (%s rounds activations per block of 32)",
                       dt_quant_scheme_name(o->scheme));
    if (w8a8 && o->float_activations)
        return dt_fail(err, "float_activations: w8a8 multiplies int8 activations by definition (q8_0 and q4_0 "
                            "can keep them float)");
    if (!w8a8 && o->smooth_alpha >= 0)
        return dt_fail(err, "smooth_alpha: smoothing moves activation range into the weights, only for w8a8");
    if (o->smooth_alpha > 1 || isnan(o->smooth_alpha))
        return dt_fail(err, "smooth_alpha %g: must lie in [0, 1]", (double)o->smooth_alpha);
    if (!(w8a8 && (!o->dynamic_activations || o->smooth_alpha >= 0))) return 0; /* no calibration to check */
    if (o->calib_samples <= 0) return dt_fail(err, "calib_samples %d: must be positive", o->calib_samples);
    if (o->calib_seq <= 0 || o->calib_seq > m->cfg.max_position_embeddings)
        return dt_fail(err, "calib_seq %d: must lie in [1, max_position_embeddings = %d]", o->calib_seq,
                       m->cfg.max_position_embeddings);
    if (o->calib_batch <= 0) return dt_fail(err, "calib_batch %d: must be positive", o->calib_batch);
    return 0;
}

/* ---------------------------------------------------------------- calibration */

typedef struct {
    const dt_model *m;
    int n_linear;
    float **absmax;              /* [n_linear][in] per input channel, over every calibration token */
} calib_ctx;

static void observe(void *ctx, int layer, int which, const float *x, int N, int in) {
    calib_ctx *c = ctx;
    const int idx = layer * LIN_PER_LAYER + (layer == c->m->cfg.num_hidden_layers ? 0 : which);
    if (idx >= c->n_linear) return;
    float *a = c->absmax[idx];
    for (int n = 0; n < N; n++)
        for (int j = 0; j < in; j++) a[j] = fmaxf(a[j], fabsf(x[(size_t)n * in + j]));
}

/* Window starts: `samples` distinct windows of seq tokens out of the text's n / seq, chosen by a
 * partial Fisher-Yates shuffle from seed (so a fixed seed gives the same calibration). */
static int pick_windows(size_t **starts, size_t n, const dt_quant_options *o, const char *what, dt_error *err) {
    const size_t windows = n / (size_t)o->calib_seq;
    if (windows < (size_t)o->calib_samples)
        return dt_fail(err,
                       "%s: %zu tokens make only %zu calibration windows of %d tokens, fewer than the %d samples "
                       "asked for (give more text, fewer samples or shorter windows)",
                       what, n, windows, o->calib_seq, o->calib_samples);
    size_t *idx = malloc(windows * sizeof *idx);
    if (!idx) return dt_fail_oom(err, "out of memory choosing calibration windows");
    for (size_t i = 0; i < windows; i++) idx[i] = i;
    uint64_t rng = o->seed ^ 0xCA11B8A7Eull;
    for (size_t i = 0; i < (size_t)o->calib_samples; i++) {
        size_t j = i + dt_rng_next(&rng) % (windows - i);
        size_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
        idx[i] *= (size_t)o->calib_seq;
    }
    *starts = idx;
    return 0;
}

static int run_calibration(const dt_model *m, const int *tokens, size_t n, const dt_quant_options *o,
                           const char *what, calib_ctx *ctx, dt_error *err) {
    size_t *starts = NULL;
    if (pick_windows(&starts, n, o, what, err) != 0) return -1;
    const int T = o->calib_seq, B = o->calib_batch < o->calib_samples ? o->calib_batch : o->calib_samples;
    dt_run_options ro = {.observe_linear = observe, .observe_ctx = ctx};
    dt_runstate *rs = dt_runstate_create_with(m, B, T, &ro, err);
    int *batch = malloc((size_t)B * T * sizeof(int));
    int rc = rs && batch ? 0 : -1;
    if (rs && !batch) dt_fail_oom(err, "out of memory");
    const int tty = isatty(STDERR_FILENO);
    for (int s0 = 0; rc == 0 && s0 < o->calib_samples; s0 += B) {
        const int b = o->calib_samples - s0 < B ? o->calib_samples - s0 : B;
        for (int i = 0; i < b; i++) memcpy(batch + (size_t)i * T, tokens + starts[s0 + i], (size_t)T * sizeof(int));
        rc = dt_forward(m, rs, batch, NULL, b, T, NULL, err);
        /* a live line on a terminal; a log gets the last one only */
        if (!o->quiet && (tty || s0 + b == o->calib_samples))
            fprintf(stderr, "%scalibrating: %d/%d samples of %d tokens%s", tty ? "\r" : "", s0 + b, o->calib_samples,
                    T, tty ? "" : "\n");
    }
    if (!o->quiet && tty) fprintf(stderr, "\n");
    free(batch);
    dt_runstate_free(rs);
    free(starts);
    return rc;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median_of(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* s_j = max|X_j|^α / max|W_j|^(1−α) (SmoothQuant): dividing x by s and multiplying W's columns by s
 * leaves x·Wᵀ unchanged while moving range from outlier channels of x into W. Channels never
 * active (or with an all-zero weight column) keep s = 1. */
static void smoothing_factors(float *s, const float *act_absmax, const float *w, int out, int in, float alpha) {
    for (int j = 0; j < in; j++) {
        float wmax = 0;
        for (int o = 0; o < out; o++) wmax = fmaxf(wmax, fabsf(w[(size_t)o * in + j]));
        const float a = act_absmax[j];
        s[j] = a > 0 && wmax > 0 ? powf(a, alpha) / powf(wmax, 1.0f - alpha) : 1.0f;
        if (!(s[j] >= 1e-5f) || !isfinite(s[j])) s[j] = s[j] > 1.0f ? 1e5f : 1e-5f;
    }
}

static void fill_stats(dt_quant_act_stat *st, const float *absmax, const float *smooth, int in, float *tmp) {
    memcpy(tmp, absmax, (size_t)in * sizeof(float));
    st->in = in;
    st->median = median_of(tmp, in);
    st->absmax = tmp[in - 1];
    for (int j = 0; j < in; j++) tmp[j] = smooth ? absmax[j] / smooth[j] : absmax[j];
    st->median_smoothed = median_of(tmp, in);
    st->absmax_smoothed = tmp[in - 1];
}

/* ---------------------------------------------------------------- quantisation */

static int calib_tokens(const dt_model *m, const dt_quant_options *o, int **owned, const int **tokens, size_t *n, const char **what,
                        dt_error *err) {
    *owned = NULL;
    if (o->calib_tokens) {
        *tokens = o->calib_tokens;
        *n = o->calib_n;
        *what = o->calib_path ? o->calib_path : "calibration tokens";
        return 0;
    }
    if (!o->calib_path)
        return dt_fail(err, "w8a8 with %s needs calibration text (calib_path): static activation scales and "
                            "smoothing factors are measured on it",
                       o->dynamic_activations ? "smoothing" : "static activation scales");
    /* a token dataset's directory is what `train --data` also takes; here only text is read, and the
     * reader's "not a regular file" said neither which argument nor what it wants */
    struct stat sb;
    if (stat(o->calib_path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return dt_fail_io(err, "calib_path %s: a directory (a token dataset is not accepted): calibration reads a "
                               "text file",
                          o->calib_path);
    /* through the model's vocabulary: a BPE model's calibration text is its tokens, not bytes */
    if (dt_model_text_tokens(m, o->calib_path, owned, n, NULL, err) != 0) return dt_fail_prefix(err, "calib_path");
    *tokens = *owned;
    *what = o->calib_path;
    return 0;
}

int dt_model_quantize(dt_model *m, const dt_quant_options *o, dt_error *err) {
    if (check_options(m, o, err) != 0) return -1;
    const int L = m->cfg.num_hidden_layers, w8a8 = o->scheme == DT_QUANT_W8A8;
    const int n_linear = L * LIN_PER_LAYER + (o->lm_head ? 1 : 0);
    const int calibrate = w8a8 && (!o->dynamic_activations || o->smooth_alpha >= 0);
    struct dt_quant *q = calloc(1, sizeof *q);
    calib_ctx ctx = {.m = m, .n_linear = n_linear, .absmax = calloc((size_t)n_linear, sizeof(float *))};
    int in_max = 0, rc = 0;
    if (q) q->lin = calloc((size_t)n_linear, sizeof *q->lin);
    if (q && calibrate) q->stats = calloc((size_t)n_linear, sizeof *q->stats);
    if (!q || !q->lin || !ctx.absmax || (calibrate && !q->stats)) rc = dt_fail_oom(err, "out of memory");
    for (int i = 0; rc == 0 && i < n_linear; i++) {
        int out, in;
        model_linear_shape(m, i / LIN_PER_LAYER, i % LIN_PER_LAYER, &out, &in);
        if (in > in_max) in_max = in;
        if (calibrate && !(ctx.absmax[i] = calloc((size_t)in, sizeof(float)))) rc = dt_fail_oom(err, "out of memory");
    }
    if (rc == 0 && calibrate) {
        int *owned = NULL;
        const int *tokens = NULL;
        size_t n = 0;
        const char *what = "";
        rc = calib_tokens(m, o, &owned, &tokens, &n, &what, err);
        for (size_t i = 0; rc == 0 && i < n; i++)
            if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
                rc = dt_fail(err, "%s: token %d at offset %zu is outside the vocabulary of %d", what, tokens[i], i,
                             m->cfg.vocab_size);
        if (rc == 0) rc = run_calibration(m, tokens, n, o, what, &ctx, err);
        free(owned);
    }
    float *smooth = rc == 0 ? malloc((size_t)(in_max > 0 ? in_max : 1) * sizeof(float)) : NULL;
    float *tmp = rc == 0 ? malloc((size_t)(in_max > 0 ? in_max : 1) * sizeof(float)) : NULL;
    if (rc == 0 && (!smooth || !tmp)) rc = dt_fail_oom(err, "out of memory");
    for (int i = 0; rc == 0 && i < n_linear; i++) {
        const int layer = i / LIN_PER_LAYER, which = i % LIN_PER_LAYER;
        int out, in;
        model_linear_shape(m, layer, which, &out, &in);
        const float *w = float_weight(m, layer, which);
        const int smoothing = w8a8 && o->smooth_alpha >= 0;
        if (smoothing) smoothing_factors(smooth, ctx.absmax[i], w, out, in, o->smooth_alpha);
        float input_scale = 0;
        if (w8a8 && !o->dynamic_activations) {
            float range = 0;
            for (int j = 0; j < in; j++) range = fmaxf(range, ctx.absmax[i][j] / (smoothing ? smooth[j] : 1.0f));
            input_scale = range > 0 ? range / 127.0f : 1.0f / 127.0f;
        }
        q->n_linear = i + 1; /* so that model_quant_free frees this one when packing it fails */
        rc = qlinear_create(&q->lin[i], scheme_format(o->scheme), w, out, in, smoothing ? smooth : NULL,
                            input_scale, err);
        if (rc == 0 && o->float_activations) q->lin[i].act = QACT_FLOAT;
        if (rc == 0) rc = qlinear_pack(&q->lin[i], err);
        if (rc == 0 && q->stats) {
            model_linear_name(q->stats[i].name, sizeof q->stats[i].name, layer, which, L);
            fill_stats(&q->stats[i], ctx.absmax[i], smoothing ? smooth : NULL, in, tmp);
            q->stats[i].input_scale = input_scale;
        }
    }
    free(smooth);
    free(tmp);
    for (int i = 0; ctx.absmax && i < n_linear; i++) free(ctx.absmax[i]);
    free(ctx.absmax);
    if (rc != 0) {
        if (q) {
            m->quant = q;
            model_quant_free(m);
        }
        return -1;
    }
    q->floats_kept = 1; /* m->params still holds the float weights */
    q->opt = *o;
    q->opt.calib_path = NULL;
    q->opt.calib_tokens = NULL;
    q->opt.calib_n = 0;
    m->quant = q;
    return 0;
}
