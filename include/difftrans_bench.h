/* difftrans_bench.h — throughput measurements of libdifftrans (`difftrans bench`): training,
 * prefill and decoding of a randomly initialised model, the FLOP and byte counts they are set
 * against, and the machine's sgemm peak and memory read bandwidth measured the same way.
 *
 * Conventions are those of difftrans.h, which this header includes. Every measurement that runs
 * OpenMP code is meant to run inside dt_bench_isolated(): GNU libgomp is not fork-safe (a child
 * forked after its parent ran a parallel region hangs at the first parallel region of its own),
 * so the process that forks must never run one itself. The same isolation makes each child's
 * peak resident memory the footprint of one model alone.
 */
#ifndef DIFFTRANS_BENCH_H
#define DIFFTRANS_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "difftrans.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the time of a training step goes (dt_bench_options.profile). Each part is one contiguous
 * stretch of the step, wall-clock seconds summed over the profiled steps, so the parts add up to
 * the steps' time minus the little between them:
 *   matrix products: per layer and kind, forward and backward (the backward is both the input
 *     and the weight gradient), OpenBLAS's threads included;
 *   attention forward / backward: the fused kernels, whole; attn_busy[] is the time summed over
 *     threads inside their tasks, so threads·wall − busy is time threads spent waiting there;
 *   norms (with their fused residual adds), RoPE, SwiGLU, the embedding, zeroing of gradient
 *     scratch: the elementwise passes; LM head (its products) and loss (softmax cross-entropy,
 *     forward and backward), with lm_head_flops the FLOPs of the products it ran (6·B·T·C·V a step,
 *     8·B·T·C·V when the chunked loss recomputes the logits in the backward: a batch of more than
 *     max(256, 2^21 / V) rows); optimizer: gradient norm + clipping, AdamW;
 *   regions: the parallel regions the step starts, which with the measured cost of an empty
 *     region (dt_bench_result.region_us) estimates thread start/stop. */
#define DT_BENCH_PROFILE_LAYERS 64 /* layers beyond it are added into the last row */

typedef enum {
    DT_BENCH_PROF_EMBED,
    DT_BENCH_PROF_NORM,
    DT_BENCH_PROF_ROPE,
    DT_BENCH_PROF_SWIGLU,
    DT_BENCH_PROF_ZERO,
    DT_BENCH_PROF_ATTN_FWD,
    DT_BENCH_PROF_ATTN_BWD,
    DT_BENCH_PROF_LM_HEAD,
    DT_BENCH_PROF_LOSS,
    DT_BENCH_PROF_GRAD_NORM,
    DT_BENCH_PROF_ADAMW,
    DT_BENCH_PROF_PARTS
} dt_bench_profile_part;

/* The products of a layer by kind: q/k/v projections, o, gate/up, down. */
typedef enum { DT_BENCH_MM_QKV, DT_BENCH_MM_O, DT_BENCH_MM_GATE_UP, DT_BENCH_MM_DOWN, DT_BENCH_MM_KINDS } dt_bench_mm_kind;

typedef struct {
    double part[DT_BENCH_PROF_PARTS];                     /* seconds */
    double mm[DT_BENCH_PROFILE_LAYERS][DT_BENCH_MM_KINDS][2]; /* seconds, [layer][kind][0 forward, 1 backward] */
    double attn_busy[2];                               /* Σ over threads of task time, s: forward, backward */
    double regions;                                    /* parallel regions started */
    double lm_head_flops;                              /* of the LM head part's products */
} dt_bench_profile;

/* Where the time of a decode step goes (dt_bench_options.profile, decoding), seconds summed over
 * the timed steps: the products by kind over all layers (q/k/v, o, gate/up, down) and the LM head,
 * each with the weight bytes one step reads in it (so the rate it streams them at), the attention
 * over the cache, and the rest (embedding, norms, RoPE, residual adds, SwiGLU, the cache's
 * conversion, DIFF V2's λ and combination). */
typedef enum {
    DT_BENCH_DEC_QKV,
    DT_BENCH_DEC_O,
    DT_BENCH_DEC_GATE_UP,
    DT_BENCH_DEC_DOWN,
    DT_BENCH_DEC_LM_HEAD,
    DT_BENCH_DEC_ATTN,
    DT_BENCH_DEC_OTHER,
    DT_BENCH_DEC_PARTS
} dt_bench_decode_part;

typedef struct {
    double part[DT_BENCH_DEC_PARTS];  /* seconds */
    double bytes[DT_BENCH_DEC_PARTS]; /* weight bytes one step reads in the part (products; 0 otherwise) */
} dt_bench_decode_profile;

/* What dt_bench_model measures. */
typedef struct {
    int batch, seq;              /* B, T of the training and prefill batches */
    int steps;                   /* timed training steps and prefill forwards (after 1 warm-up each) */
    int decode_tokens;           /* timed decode steps (one stream, after the 1-token prompt) */
    int train, prefill, decode;  /* which measurements to run */
    int profile;                 /* also where the time of a step goes: training (dt_bench_result.prof)
                                    and decoding (dt_bench_result.decode_prof) */
    uint64_t seed;               /* initialisation and token seed */
    /* > DT_QUANT_NONE: quantise the random model with this scheme before measuring (training is
     * then not measured); w8a8 calibrates static scales on a few windows of random tokens. */
    dt_quant_scheme quant;
    int quant_lm_head;           /* quantise the LM head too */
    /* Called outside the timed regions (may be NULL); phase is "training", "prefill" or "decode";
     * done = -1 before the warm-up, then the number of timed steps done out of total. */
    void (*progress)(void *ctx, const char *phase, int done, int total);
    void *progress_ctx;
} dt_bench_options;

/* One model's numbers (no pointers: it crosses a pipe); a measurement that did not run is NAN. */
typedef struct {
    size_t params;
    double train_step_ms;            /* median over the timed steps */
    double train_tokens_per_s;       /* B·T / median step time */
    double train_flops_per_step;     /* dt_bench_train_flops() */
    double train_gflops;             /* train_flops_per_step / median step time / 1e9 */
    double prefill_tokens_per_s;     /* B·T / median forward time */
    double decode_tokens_per_s;      /* timed decode steps / their total time */
    double decode_weight_bytes_per_token; /* dt_bench_decode_weight_bytes(), or the quantised model's */
    double peak_rss_mb;              /* ru_maxrss of the measuring process, MiB (filled by the caller) */
    /* with dt_bench_options.profile: the timed steps' profile (sums over prof_steps steps), their
     * total time (s), the thread count and the cost of one empty parallel region (µs, best of 3) */
    dt_bench_profile prof;
    int prof_steps, prof_threads;
    double prof_total_s, region_us;
    /* with dt_bench_options.profile and decoding: the timed decode steps' profile (sums over
     * decode_prof_steps steps) and their total time (s) */
    dt_bench_decode_profile decode_prof;
    int decode_prof_steps;
    double decode_prof_total_s;
} dt_bench_result;

/* The sizes of the model dt_bench_config builds [defaults of dt_bench_sizes_default]. */
typedef struct {
    int hidden_size;             /* C [256] */
    int num_hidden_layers;       /* L [4] */
    int num_attention_heads;     /* H query heads; DIFF has H/2 differential heads of width 2·head_dim [8] */
    int num_key_value_heads;     /* 0: num_attention_heads [0] */
    int head_dim;                /* 0: hidden_size / num_attention_heads [0] */
    int intermediate_size;       /* SwiGLU width F [704] */
    int vocab_size;              /* [256] */
} dt_bench_sizes;

/* Fills s with the defaults above. */
void dt_bench_sizes_default(dt_bench_sizes *s);
/* The measurements' defaults: batch 8 × seq 256, 5 timed steps, 64 timed decode tokens, training,
 * prefill and decoding all on, no profile, seed 1234, the float model, no progress callback. */
void dt_bench_defaults(dt_bench_options *o);
/* The config of the model dt_bench_model measures with o: arch (DT_ARCH_DIFF, DT_ARCH_LLAMA or
 * DT_ARCH_DIFF_V2, whose num_attention_heads query heads make H/2 output heads) of sizes s, every
 * other field as the presets have it (dt_config_preset: rms_norm_eps, rope_theta,
 * lambda_std_dev, untied embeddings, no special ids), max_position_embeddings the larger of
 * o->seq and o->decode_tokens + 1 (the decoding stream's prompt and tokens). Refused, naming the
 * config's keys, when head_dim cannot be derived (more heads than hidden_size) or
 * dt_config_validate refuses the result (DIFF and DIFF V2 need an even num_attention_heads, kv
 * heads must divide it, head_dim must be even; a derived head_dim it refuses is said to be hidden_size /
 * num_attention_heads). The baseline of a DIFF config is dt_config_matched of it. */
int dt_bench_config(dt_arch arch, const dt_bench_sizes *s, const dt_bench_options *o, dt_config *out, dt_error *err);

/* The cost of starting and joining one empty OpenMP parallel region on all threads, µs (best of
 * 3 runs of 2000 regions). */
double dt_bench_region_cost_us(void);

/* Parameters that sit in a matrix product: q, k, v, o, gate, up, down of every layer (DIFF V2:
 * o_proj [C, H/2·hd] and its λ projection [H/2, C]) and lm_head (V·C, counted even when tied); not
 * the embedding lookup, norms or λ vectors. */
double dt_bench_matmul_params(const dt_config *c);
/* Model FLOPs of one training step (forward + backward) on B sequences of T tokens:
 * 6·P_mm·B·T + 3·L·B·H·4·hd·T(T+1)/2 (the derivation is at its definition in bench.c). */
double dt_bench_train_flops(const dt_config *c, int B, int T);
/* Bytes of float32 weights one dt_decode_step reads: 4 · (every parameter except the embedding
 * table, which contributes the one row it looks up). */
double dt_bench_decode_weight_bytes(const dt_config *c, size_t n_params);

/* Builds a randomly initialised model for cfg and runs the measurements o asks for; fills *r.
 * No allocation happens inside the timed loops beyond what the library itself does. */
int dt_bench_model(const dt_config *cfg, const dt_bench_options *o, dt_bench_result *r, dt_error *err);

/* Best-of-3 cblas_sgemm throughput, GFLOP/s (2·n³ per product), on n×n×n with n = 2048 or the
 * largest power of two below it whose product takes about 1 s or less; *n_out gets n. NAN when
 * out of memory. */
double dt_bench_sgemm_peak(int *n_out);
/* The read bandwidth decoding can reach, GB/s (1e9 bytes/s), best of 10 alternating rounds of
 * each of two reads with all threads: a plain streaming sum (each thread its chunk, the widest
 * loads, a prefetch ahead as the quantised decoder's) and the decoder's own access, its one-row
 * product (linear_forward) over the buffer as a [rows, 4096] matrix. The bound is the larger: on
 * an Intel Ice Lake the plain sum read 10.8 GB/s where F32 decoding streamed 19.4, which made the
 * decode's "fraction of the bound" 179%. The buffer is working_set bytes (at least 1 MiB), the
 * weights a decoding step reads, read again and again as decoding reads them, so that the bound is
 * that of wherever they live: on an Emerald Rapids Xeon with a 260 MiB L3, q8_0 and q4_0 decoding
 * of config E (199 and 105 MB a token) streamed 1.1-1.4x what a 3-pass read of main memory
 * reached. working_set 0: main memory, max(1 GiB, 4 × the last-level cache). Smaller only when
 * free memory is short. */
typedef struct {
    double bound_gbs;            /* max(sum_gbs, decoder_gbs) */
    double sum_gbs, decoder_gbs;
    size_t bytes;                /* the buffer */
} dt_bench_bandwidth;
/* -1 when out of memory (then every figure is NAN). */
int dt_bench_read_bandwidth(dt_bench_bandwidth *out, size_t working_set);

/* Runs fn(arg, out, err) in a forked child process and copies its out_size bytes of result back
 * through a pipe (out must hold no pointers), with the child's peak resident set size in MiB in
 * *rss_mb (may be NULL). fn returns 0 or -1 with a message in err; a child that dies or exits
 * early is reported in err too. Returns fn's status. */
int dt_bench_isolated(int (*fn)(void *arg, void *out, dt_error *err), void *arg, void *out, size_t out_size,
                   double *rss_mb, dt_error *err);

#ifdef __cplusplus
}
#endif
#endif
