/* bench.c — throughput of training, prefill and decoding for one randomly initialised model,
 * the machine's sgemm peak and memory read bandwidth to compare them with, and a fork helper
 * that runs each measurement in its own process (see difftrans_bench.h for why). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cblas.h>

#include "difftrans_bench.h"
#include "base/base.h"
#include "layers/kernels.h"
#include "layers/layers.h"
#include "model/model_quant.h"
#include "model/profile.h"
#include "train/step.h"

/* ---------------------------------------------------------------- FLOP and byte counts */

double dt_bench_matmul_params(const dt_config *c) {
    /* the shapes the model multiplies with (DIFF V2: o_proj [C, h·hd] of h = H/2 output heads, and
     * its λ projection [h, C]; counting o_proj as [C, H·hd] overstated V2's FLOPs) */
    double n = 0;
    for (int l = 0; l <= c->num_hidden_layers; l++)
        for (int which = 0; which < (l == c->num_hidden_layers ? 1 : LIN_PER_LAYER); which++) {
            int out, in;
            config_linear_shape(c, l, which, &out, &in); /* the last "layer": lm_head, even when tied */
            n += (double)out * in;
        }
    if (c->arch == DT_ARCH_DIFF_V2 && c->v2_lambda != DT_V2_LAMBDA_NONE)
        n += (double)c->num_hidden_layers * (c->num_attention_heads / 2) * c->hidden_size;
    return n;
}

/* Model FLOPs of one training step (forward + backward) on B sequences of T tokens.
 *
 *   FLOPs = 6 · P_mm · B·T  +  3 · L · B · H · a · T(T+1)/2
 *
 * P_mm = dt_bench_matmul_params(): every Linear weight (q, k, v, o, gate, up, down per layer, DIFF
 * V2's λ projection, and lm_head), not the embedding lookup. A product with an [out, in] weight costs 2·out·in FLOPs
 * per token forward and twice that backward (input and weight gradients): 6 per parameter.
 *
 * Attention, per layer, sequence and query head: the causal mask leaves T(T+1)/2 (query, key)
 * pairs; each pair costs, forward,
 *   a = 2·hd (q·k, the QKᵀ product) + 2·hd (the map times an hd-wide v) = 4·hd
 * for both kinds: DIFF's H/2 differential maps D_j = A_j − λ·A_{j+H/2} each multiply a 2·hd-wide
 * V_j, the same FLOPs as H maps times hd-wide values (the paper's matched-FLOPs design); DIFF V2's
 * H query heads are H ordinary maps times hd-wide values, combined in pairs afterwards. These
 * are the model's FLOPs, not a kernel's: a kernel that multiplies both maps by V before
 * subtracting does more work and gets no credit for it. Backward costs twice the forward (two
 * products per forward product), hence the factor 3. Norms, RoPE, softmax, SwiGLU's
 * elementwise work, the cross-entropy and the optimizer are not counted. */
double dt_bench_train_flops(const dt_config *c, int B, int T) {
    const double hd = c->head_dim, H = c->num_attention_heads, L = c->num_hidden_layers;
    const double pairs = (double)T * ((double)T + 1) / 2;
    const double a = 4 * hd;
    return 6 * dt_bench_matmul_params(c) * (double)B * T + 3 * L * (double)B * H * a * pairs;
}

/* Bytes of weights one decode step reads: 4 · (every parameter except the embedding table,
 * which contributes the one row of C floats it looks up). That is all layer weights (norms and
 * λ vectors included), the final norm and lm_head. Tied, lm_head is the table, read in full.
 * The KV cache, activations and logits are not weights and are not counted. */
double dt_bench_decode_weight_bytes(const dt_config *c, size_t n_params) {
    const double C = c->hidden_size, V = c->vocab_size;
    const double floats = c->tie_word_embeddings ? (double)n_params : (double)n_params - V * C + C;
    return 4 * floats;
}

/* ---------------------------------------------------------------- the model and the options */

void dt_bench_sizes_default(dt_bench_sizes *s) {
    *s = (dt_bench_sizes){.hidden_size = 256, .num_hidden_layers = 4, .num_attention_heads = 8,
                          .intermediate_size = 704, .vocab_size = 256};
}

void dt_bench_defaults(dt_bench_options *o) {
    *o = (dt_bench_options){.batch = 8, .seq = 256, .steps = 5, .decode_tokens = 64, .train = 1, .prefill = 1,
                            .decode = 1, .seed = 1234, .quant = DT_QUANT_NONE};
}

int dt_bench_config(dt_arch arch, const dt_bench_sizes *s, const dt_bench_options *o, dt_config *out, dt_error *err) {
    if (arch != DT_ARCH_DIFF && arch != DT_ARCH_LLAMA && arch != DT_ARCH_DIFF_V2)
        return dt_fail(err, "arch %d: the benchmark builds a diffllama, difftrans_v2 or llama model", (int)arch);
    /* a preset's config with the sizes replaced: every other field is what the presets give */
    if (dt_config_preset(out, "tiny", arch, err) != 0) return -1;
    const int heads = s->num_attention_heads;
    int head_dim = s->head_dim;
    if (head_dim == 0 && heads > 0) {
        if (heads > s->hidden_size)
            return dt_fail(err, "%s model: num_attention_heads %d is more than hidden_size %d: head_dim = hidden_size / "
                                "num_attention_heads would be 0", dt_arch_name(arch), heads, s->hidden_size);
        head_dim = s->hidden_size / heads;
        /* RoPE rotates channel pairs; said here, where head_dim was derived, so that the message names
         * what it was derived from */
        if (head_dim % 2 != 0)
            return dt_fail(err, "%s model: head_dim = hidden_size / num_attention_heads = %d / %d = %d is odd; RoPE "
                                "needs an even head_dim", dt_arch_name(arch), s->hidden_size, heads, head_dim);
    }
    out->hidden_size = s->hidden_size;
    out->num_hidden_layers = s->num_hidden_layers;
    out->num_attention_heads = heads;
    out->num_key_value_heads = s->num_key_value_heads ? s->num_key_value_heads : heads;
    out->head_dim = head_dim;
    out->intermediate_size = s->intermediate_size;
    out->vocab_size = s->vocab_size;
    const long positions = o->seq > (long)o->decode_tokens + 1 ? o->seq : (long)o->decode_tokens + 1;
    out->max_position_embeddings = positions > INT_MAX ? INT_MAX : (int)positions;
    char where[64];
    snprintf(where, sizeof where, "%s model", dt_arch_name(arch));
    if (dt_config_validate(out, where, err) != 0) {
        /* a head_dim nobody gave (too large) comes from the two sizes it was derived from */
        if (s->head_dim == 0 && strstr(err->msg, "head_dim")) {
            const size_t len = strlen(err->msg);
            snprintf(err->msg + len, sizeof err->msg - len, "; head_dim = hidden_size / num_attention_heads = %d / %d",
                     s->hidden_size, heads);
        }
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- one model */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The greedy choice as dt_generate makes it (dt_sample at temperature 0), so that the timed steps
 * are generation's: a plain `x[i] > x[best]` loop waits on a load each step (0.12 ms for 32000
 * logits, 2.5–5% of a quantised config-E step). */
static int argmax(float *x, int n) {
    const dt_sampler greedy = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
    return dt_sample(x, n, &greedy, NULL, NULL); /* at temperature 0 the logits are left as they are */
}

static void progress(const dt_bench_options *o, const char *phase, int done, int total) {
    if (o->progress) o->progress(o->progress_ctx, phase, done, total);
}

/* Everything dt_bench_model allocates, so that one exit path frees it. */
typedef struct {
    dt_model m;
    int have_model;
    dt_runstate *rs;
    dt_kvcache *kv;
    train_step ts;
    int *tokens, *targets;
    float *logits;
    double *times;
} bench_state;

static void bench_state_free(bench_state *s) {
    dt_kvcache_free(s->kv);
    dt_runstate_free(s->rs);
    free(s->tokens);
    free(s->targets);
    train_step_free(&s->ts);
    free(s->logits);
    free(s->times);
    if (s->have_model) dt_model_free(&s->m);
}

/* The internal step profile (model/profile.h) in the public layout of dt_bench_profile. */
static void profile_copy(const dt_profile *p, dt_bench_profile *out) {
    static const struct {
        profile_part from;
        dt_bench_profile_part to;
    } parts[] = {
        {PROF_EMBED, DT_BENCH_PROF_EMBED},       {PROF_NORM, DT_BENCH_PROF_NORM},
        {PROF_ROPE, DT_BENCH_PROF_ROPE},         {PROF_SWIGLU, DT_BENCH_PROF_SWIGLU},
        {PROF_ZERO, DT_BENCH_PROF_ZERO},         {PROF_ATTN_FWD, DT_BENCH_PROF_ATTN_FWD},
        {PROF_ATTN_BWD, DT_BENCH_PROF_ATTN_BWD}, {PROF_LM_HEAD, DT_BENCH_PROF_LM_HEAD},
        {PROF_LOSS, DT_BENCH_PROF_LOSS},         {PROF_GRAD_NORM, DT_BENCH_PROF_GRAD_NORM},
        {PROF_ADAMW, DT_BENCH_PROF_ADAMW},
    };
    static const struct {
        profile_mm_kind from;
        dt_bench_mm_kind to;
    } kinds[] = {{MM_QKV, DT_BENCH_MM_QKV}, {MM_O, DT_BENCH_MM_O}, {MM_GATE_UP, DT_BENCH_MM_GATE_UP}, {MM_DOWN, DT_BENCH_MM_DOWN}};
    _Static_assert(sizeof parts / sizeof parts[0] == PROF_PARTS && (int)PROF_PARTS == (int)DT_BENCH_PROF_PARTS,
                   "every part of the step profile has its public name");
    _Static_assert(sizeof kinds / sizeof kinds[0] == MM_KINDS && (int)MM_KINDS == (int)DT_BENCH_MM_KINDS,
                   "every kind of product has its public name");
    _Static_assert(PROFILE_MAX_LAYERS == DT_BENCH_PROFILE_LAYERS, "the public profile has as many layer rows");
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) out->part[parts[i].to] = p->part[parts[i].from];
    for (int l = 0; l < PROFILE_MAX_LAYERS; l++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            for (int dir = 0; dir < 2; dir++) out->mm[l][kinds[k].to][dir] = p->mm[l][kinds[k].from][dir];
    out->attn_busy[0] = p->attn_busy[0];
    out->attn_busy[1] = p->attn_busy[1];
    out->regions = p->regions;
    out->lm_head_flops = p->lm_head_flops;
}

/* 1 warm-up step, then o->steps timed steps of train_step_run(), the step dt_train runs (with
 * the default optimizer settings of dt_train_defaults and one micro-batch of [B, T]). */
static int measure_train(bench_state *s, const dt_bench_options *o, dt_bench_result *r, dt_error *err) {
    const int B = o->batch, T = o->seq;
    dt_train_options d;
    dt_train_defaults(&d);
    const train_step_options so = {.micro_batch = B, .seq = T, .accum = 1, .grad_clip = d.grad_clip,
                                   .hp = {d.beta1, d.beta2, d.adam_eps, d.weight_decay}};
    if (train_step_init(&s->ts, &s->m, NULL, &so, err) != 0) return -1;
    if (o->profile && runstate_profile_enable(s->ts.rs, err) != 0) return -1;
    progress(o, "training", -1, o->steps);
    for (int step = 0; step <= o->steps; step++) {
        train_step_stats st;
        double t0 = monotonic_seconds();
        if (train_step_run(&s->ts, s->tokens, s->targets, step + 1, 1e-4f, 0, &st, err) != 0) return -1;
        double t1 = monotonic_seconds();
        if (step > 0) s->times[step - 1] = t1 - t0;
        if (step == 0) runstate_profile_reset(s->ts.rs); /* the warm-up step is not profiled */
        progress(o, "training", step, o->steps);
    }
    if (o->profile) {
        profile_copy(runstate_profile(s->ts.rs), &r->prof);
        r->prof_steps = o->steps;
        r->prof_total_s = 0;
        for (int i = 0; i < o->steps; i++) r->prof_total_s += s->times[i];
        r->prof_threads = omp_get_max_threads();
        r->region_us = dt_bench_region_cost_us();
    }
    double t = median(s->times, o->steps);
    r->train_step_ms = 1e3 * t;
    r->train_tokens_per_s = (double)B * T / t;
    r->train_gflops = r->train_flops_per_step / t / 1e9;
    return 0;
}

/* 1 warm-up forward, then o->steps timed forwards without targets on [B, T]. */
static int measure_prefill(bench_state *s, const dt_bench_options *o, dt_bench_result *r, dt_error *err) {
    const int B = o->batch, T = o->seq;
    progress(o, "prefill", -1, o->steps);
    for (int step = 0; step <= o->steps; step++) {
        double t0 = monotonic_seconds();
        if (dt_forward(&s->m, s->rs, s->tokens, NULL, B, T, NULL, err) != 0) return -1;
        double t1 = monotonic_seconds();
        if (step > 0) s->times[step - 1] = t1 - t0;
        progress(o, "prefill", step, o->steps);
    }
    r->prefill_tokens_per_s = (double)B * T / median(s->times, o->steps);
    return 0;
}

/* Untimed steps before the timed ones: a large cache takes a model's weights over several tokens
 * (Emerald Rapids, 260 MiB L3, config E q8_0 = 199 MB a token: the first steps after quantising
 * took 7.0-8.8 ms, from about the eighth 4.0-5.5), which 32 timed tokens would largely measure. */
#define DECODE_WARMUP 8

/* The weight bytes one decode step reads in each product kind of the decode profile. */
static void decode_profile_bytes(const dt_model *m, double *bytes) {
    static const int kind_of[LIN_PER_LAYER] = {DT_BENCH_DEC_QKV, DT_BENCH_DEC_QKV, DT_BENCH_DEC_QKV, DT_BENCH_DEC_O,
                                               DT_BENCH_DEC_GATE_UP, DT_BENCH_DEC_GATE_UP, DT_BENCH_DEC_DOWN};
    const int L = m->cfg.num_hidden_layers;
    for (int l = 0; l <= L; l++)
        for (int which = 0; which < (l == L ? 1 : LIN_PER_LAYER); which++) {
            const qlinear *q = model_qlinear(m, l, which);
            int out, in;
            model_linear_shape(m, l, which, &out, &in);
            bytes[l == L ? DT_BENCH_DEC_LM_HEAD : kind_of[which]] +=
                (double)(q ? qlinear_weight_bytes(q) : (size_t)out * in * sizeof(float));
        }
}

/* The internal decode profile (model/profile.h) in the public layout. */
static void decode_profile_copy(const dt_decode_profile *p, dt_bench_decode_profile *out) {
    static const int to[DPROF_PARTS] = {[DPROF_QKV] = DT_BENCH_DEC_QKV,         [DPROF_O] = DT_BENCH_DEC_O,
                                        [DPROF_GATE_UP] = DT_BENCH_DEC_GATE_UP, [DPROF_DOWN] = DT_BENCH_DEC_DOWN,
                                        [DPROF_LM_HEAD] = DT_BENCH_DEC_LM_HEAD, [DPROF_ATTN] = DT_BENCH_DEC_ATTN,
                                        [DPROF_OTHER] = DT_BENCH_DEC_OTHER};
    _Static_assert((int)DPROF_PARTS == (int)DT_BENCH_DEC_PARTS, "every part of the decode profile has its public name");
    for (int i = 0; i < DPROF_PARTS; i++) out->part[to[i]] = p->part[i];
}

/* One stream: the 1-token prompt at position 0, min(DECODE_WARMUP, decode_tokens) greedy steps
 * at positions 1.., then, from the prompt's token again, o->decode_tokens timed greedy steps at
 * positions 1..decode_tokens, each feeding the argmax of the previous logits: the same tokens and
 * the same work as the warm-up, each step writing its position of the cache before any later one
 * reads it. The cache holds decode_tokens + 1 positions. */
static int measure_decode(bench_state *s, const dt_bench_options *o, dt_bench_result *r, dt_error *err) {
    const dt_model *m = &s->m;
    const int V = m->cfg.vocab_size, N = o->decode_tokens;
    if (!(s->kv = dt_kvcache_create(m, N + 1, err))) return -1;
    if (!(s->logits = malloc((size_t)V * sizeof(float)))) return dt_fail_oom(err, "out of memory for %d logits", V);
    progress(o, "decode", 0, N);
    if (dt_decode_step(m, s->kv, s->tokens[0], 0, s->logits, err) != 0) return -1;
    const int first = argmax(s->logits, V);
    int token = first;
    for (int pos = 1; pos <= N && pos <= DECODE_WARMUP; pos++) {
        if (dt_decode_step(m, s->kv, token, pos, s->logits, err) != 0) return -1;
        token = argmax(s->logits, V);
    }
    token = first;
    if (o->profile && kvcache_profile_enable(s->kv, err) != 0) return -1; /* the warm-up is not profiled */
    double t0 = monotonic_seconds();
    for (int pos = 1; pos <= N; pos++) {
        if (dt_decode_step(m, s->kv, token, pos, s->logits, err) != 0) return -1;
        token = argmax(s->logits, V);
    }
    double t = monotonic_seconds() - t0;
    progress(o, "decode", N, N);
    r->decode_tokens_per_s = (double)N / t;
    if (o->profile) {
        decode_profile_copy(kvcache_profile(s->kv), &r->decode_prof);
        decode_profile_bytes(m, r->decode_prof.bytes);
        r->decode_prof_steps = N;
        r->decode_prof_total_s = t;
    }
    return 0;
}

int dt_bench_model(const dt_config *cfg, const dt_bench_options *o, dt_bench_result *r, dt_error *err) {
    *r = (dt_bench_result){.train_step_ms = NAN,
                        .train_tokens_per_s = NAN,
                        .train_gflops = NAN,
                        .prefill_tokens_per_s = NAN,
                        .decode_tokens_per_s = NAN,
                        .peak_rss_mb = NAN};
    if (o->batch <= 0 || o->seq <= 0 || o->steps <= 0 || o->decode_tokens <= 0)
        return dt_fail(err, "bench: batch %d, seq %d, steps %d and decode tokens %d must all be positive", o->batch,
                       o->seq, o->steps, o->decode_tokens);
    bench_state s = {0};
    if (dt_model_create(&s.m, cfg, err) != 0) return -1;
    s.have_model = 1;
    dt_model_init_random(&s.m, o->seed);
    r->params = s.m.n_params;
    r->train_flops_per_step = dt_bench_train_flops(cfg, o->batch, o->seq);
    r->decode_weight_bytes_per_token = dt_bench_decode_weight_bytes(cfg, s.m.n_params);
    if (o->quant != DT_QUANT_NONE) {
        const int T = cfg->max_position_embeddings < 64 ? cfg->max_position_embeddings : 64, n = 8 * T;
        int *calib = malloc((size_t)n * sizeof(int));
        uint64_t rng = o->seed ^ 0xC0FFEEull;
        for (int i = 0; calib && i < n; i++) calib[i] = (int)(dt_rng_next(&rng) % (uint64_t)cfg->vocab_size);
        dt_quant_options q;
        dt_quant_defaults(&q);
        q.scheme = o->quant;
        q.lm_head = o->quant_lm_head;
        q.calib_tokens = calib;
        q.calib_n = (size_t)n;
        q.calib_samples = 8;
        q.calib_seq = T;
        q.quiet = 1;
        int rc = calib ? dt_model_quantize(&s.m, &q, err) : dt_fail_oom(err, "out of memory");
        free(calib);
        if (rc != 0) {
            bench_state_free(&s);
            return -1;
        }
        r->decode_weight_bytes_per_token = (double)dt_model_decode_bytes(&s.m);
    }

    int rc = 0;
    const size_t N = (size_t)o->batch * o->seq;
    if (o->train || o->prefill) {
        s.tokens = malloc(N * sizeof(int));
        s.targets = malloc(N * sizeof(int));
        s.times = malloc((size_t)o->steps * sizeof(double));
        if (!s.tokens || !s.targets || !s.times) rc = dt_fail_oom(err, "out of memory for a batch of %zu tokens", N);
        uint64_t rng = o->seed ^ 0x9e3779b97f4a7c15ull;
        for (size_t i = 0; rc == 0 && i < N; i++) {
            s.tokens[i] = (int)(dt_rng_next(&rng) % (uint64_t)cfg->vocab_size);
            s.targets[i] = (int)(dt_rng_next(&rng) % (uint64_t)cfg->vocab_size);
        }
        if (rc == 0 && o->prefill && !(s.rs = dt_runstate_create(&s.m, o->batch, o->seq, err))) rc = -1;
    } else if (!(s.tokens = calloc(1, sizeof(int)))) {
        rc = dt_fail_oom(err, "out of memory");
    }
    if (rc == 0 && o->train && o->quant == DT_QUANT_NONE) rc = measure_train(&s, o, r, err);
    if (rc == 0 && o->prefill) rc = measure_prefill(&s, o, r, err);
    if (rc == 0 && o->decode) rc = measure_decode(&s, o, r, err);
    bench_state_free(&s);
    return rc;
}

/* ---------------------------------------------------------------- the machine */

volatile int bench_region_sink; /* keeps the empty regions from being optimised away */

double dt_bench_region_cost_us(void) {
    enum { REGIONS = 2000 };
    double best = INFINITY;
    for (int run = 0; run < 4; run++) { /* the first run warms the thread pool up */
        double t0 = monotonic_seconds();
        for (int i = 0; i < REGIONS; i++) {
#pragma omp parallel
            bench_region_sink = omp_get_thread_num();
        }
        double t = (monotonic_seconds() - t0) / REGIONS;
        if (run > 0 && t < best) best = t;
    }
    return 1e6 * best;
}

static void fill(float *x, size_t n, float v) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = v;
}

static double time_sgemm(int n, const float *a, const float *b, float *c) {
    double t0 = monotonic_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    return monotonic_seconds() - t0;
}

double dt_bench_sgemm_peak(int *n_out) {
    const int nmax = 2048;
    const size_t sz = (size_t)nmax * nmax;
    float *a = malloc(sz * sizeof(float)), *b = malloc(sz * sizeof(float)), *c = malloc(sz * sizeof(float));
    double best = NAN;
    int n = 0;
    if (a && b && c) {
        fill(a, sz, 0.5f);
        fill(b, sz, 0.25f);
        fill(c, sz, 0.0f);
        /* estimate the rate on 512³ (after one warm-up) and pick the size */
        time_sgemm(512, a, b, c);
        double t512 = time_sgemm(512, a, b, c);
        n = nmax;
        while (n > 512 && t512 * pow(n / 512.0, 3) > 1.0) n /= 2;
        best = INFINITY;
        for (int i = 0; i < 3; i++) {
            double t = time_sgemm(n, a, b, c);
            if (t < best) best = t;
        }
        best = 2.0 * n * (double)n * n / best / 1e9;
    }
    free(a);
    free(b);
    free(c);
    if (n_out) *n_out = n;
    return best;
}

/* Sum of x[0..n) with every thread, each summing one contiguous chunk with the widest loads the
 * CPU has and a prefetch ahead (stream_sum), so that the loop is limited by the loads alone: the
 * baseline x86-64 loop this replaced read 22 GB/s on an Emerald Rapids Xeon where the quantised
 * decoder streamed 41-45 and this reads 52. */
static double sum_floats(const float *x, size_t n) {
    const dt_kernels *k = kernels_active();
    double total = 0;
#pragma omp parallel reduction(+ : total)
    {
        const size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        const size_t chunk = n / nt / 64 * 64;
        const size_t lo = id * chunk, hi = id + 1 == nt ? n : lo + chunk;
        total += k->stream_sum(x + lo, hi - lo);
    }
    return total;
}

volatile double bench_sink; /* keeps the sums alive */

/* The decoder's own access over the same buffer: y = W·x with W the buffer as [rows, 4096],
 * through linear_forward, as decoding's one-row products stream weights (the vector paths' own
 * kernel fetching a block ahead, OpenBLAS's sgemv on the portable one). The probe read OpenBLAS's
 * sgemv while decoding did not use it: on Zen 5 F32 decoding then streamed more than the bound. */
#define PROBE_COLS 4096
#define PROBE_ROUNDS 4 /* even: as many runs of each read */
#define PROBE_RUN 6
#define PROBE_SAMPLE_BYTES ((size_t)64 << 20)

int dt_bench_read_bandwidth(dt_bench_bandwidth *out, size_t working_set) {
    memset(out, 0, sizeof *out);
    out->bound_gbs = out->sum_gbs = out->decoder_gbs = NAN;
    size_t bytes = working_set > ((size_t)1 << 20) ? working_set : (size_t)1 << 20;
    if (working_set == 0) {
        bytes = (size_t)1 << 30;
        long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
        if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
        if (llc > 0 && 4 * (size_t)llc > bytes) bytes = 4 * (size_t)llc;
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
        while (bytes > ((size_t)64 << 20) && bytes > (size_t)pages * (size_t)page / 2) bytes /= 2;
    const size_t rows = bytes / sizeof(float) / PROBE_COLS, n = rows * PROBE_COLS;
    bytes = n * sizeof(float);
    float *x = aligned_alloc(64, n * sizeof(float));
    float *v = malloc(PROBE_COLS * sizeof(float)), *y = malloc(rows * sizeof(float));
    if (!x || !v || !y) {
        free(x);
        free(v);
        free(y);
        return -1;
    }
    fill(x, n, 1.0f); /* first touch by the threads that will read it */
    for (int i = 0; i < PROBE_COLS; i++) v[i] = 1.0f;
    /* A buffer that partly fits in a large cache is read faster pass after pass as the cache
     * takes more of it, as decoding's weights are token after token (Emerald Rapids, 260 MiB L3,
     * 199 MB: the sum read 31 GB/s in the first pass, 52 from the tenth), and more slowly when the
     * two reads alternate pass by pass (48 after twenty): so PROBE_ROUNDS rounds of PROBE_RUN
     * samples of one read, then of the other, so that a busy moment does not fall on one only. A
     * small buffer is read several times a sample, so that each sample lasts long enough to time. */
    const int passes = bytes >= PROBE_SAMPLE_BYTES ? 1 : (int)((PROBE_SAMPLE_BYTES + bytes - 1) / bytes);
    double best_sum = INFINITY, best_decoder = INFINITY;
    for (int i = 0; i < PROBE_ROUNDS * PROBE_RUN; i++) {
        const int decoder = (i / PROBE_RUN) % 2 == 1;
        const double t0 = monotonic_seconds();
        for (int p = 0; p < passes; p++) {
            if (decoder) linear_forward(y, v, x, 1, PROBE_COLS, (int)rows);
            else bench_sink = sum_floats(x, n);
        }
        const double t = (monotonic_seconds() - t0) / passes;
        if (decoder) bench_sink = y[rows / 2];
        double *best = decoder ? &best_decoder : &best_sum;
        if (t < *best) *best = t;
    }
    out->bytes = bytes;
    out->sum_gbs = (double)bytes / best_sum / 1e9;
    out->decoder_gbs = (double)bytes / best_decoder / 1e9;
    out->bound_gbs = fmax(out->sum_gbs, out->decoder_gbs);
    free(x);
    free(v);
    free(y);
    return 0;
}

/* ---------------------------------------------------------------- isolation */

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads up to n bytes, stopping early only at end of file; returns the count or -1. */
static ssize_t read_all(int fd, void *buf, size_t n) {
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

typedef struct {
    int status;
    double rss_mb;
    dt_error err;
} child_header;

int dt_bench_isolated(int (*fn)(void *arg, void *out, dt_error *err), void *arg, void *out, size_t out_size,
                   double *rss_mb, dt_error *err) {
    int fd[2];
    if (pipe(fd) != 0) return dt_fail_io(err, "bench: pipe: %s", strerror(errno));
    fflush(NULL); /* the child must not write the parent's buffered output a second time */
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return dt_fail_io(err, "bench: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fd[0]);
        child_header h = {0};
        h.status = fn(arg, out, &h.err);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        h.rss_mb = (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
        int ok = write_all(fd[1], &h, sizeof h) == 0 && write_all(fd[1], out, out_size) == 0;
        _exit(ok ? 0 : 3);
    }
    close(fd[1]);
    child_header h;
    ssize_t got = read_all(fd[0], &h, sizeof h);
    int complete = got == (ssize_t)sizeof h && read_all(fd[0], out, out_size) == (ssize_t)out_size;
    close(fd[0]);
    int ws;
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR) return dt_fail_io(err, "bench: waitpid: %s", strerror(errno));
    if (WIFSIGNALED(ws))
        return dt_fail_code(err, WTERMSIG(ws) == SIGKILL ? DT_ERR_NOMEM : DT_ERR_IO,
                            "bench: the measuring process was killed by signal %d (%s)%s", WTERMSIG(ws),
                            strsignal(WTERMSIG(ws)), WTERMSIG(ws) == SIGKILL ? "; out of memory?" : "");
    if (!complete || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
        return dt_fail_io(err, "bench: the measuring process exited with status %d before reporting",
                          WIFEXITED(ws) ? WEXITSTATUS(ws) : -1);
    if (rss_mb) *rss_mb = h.rss_mb;
    if (h.status != 0) {
        *err = h.err;
        return -1;
    }
    return 0;
}
