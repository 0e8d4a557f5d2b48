/* bench.h — throughput measurements behind `difftrans bench` (internal).
 *
 * Every measurement here that runs OpenMP code is meant to run inside bench_isolated(): GNU
 * libgomp is not fork-safe (a child forked after its parent ran a parallel region hangs at the
 * first parallel region of its own), so the process that forks must never run one itself. The
 * same isolation makes each child's peak resident memory (getrusage RUSAGE_SELF, sent back
 * through a pipe) the footprint of one model alone.
 */
#ifndef DT_BENCH_H
#define DT_BENCH_H
#include <stddef.h>

#include "difftrans.h"
#include "model/profile.h"

typedef struct {
    int batch, seq;              /* B, T of the training and prefill batches */
    int steps;                   /* timed training steps and prefill forwards (after 1 warm-up each) */
    int decode_tokens;           /* timed decode steps (one stream, after the 1-token prompt) */
    int train, prefill, decode;  /* which measurements to run */
    int profile;                 /* train: also where the time of a step goes (bench_result.prof) */
    uint64_t seed;
    /* > DT_QUANT_NONE: quantise the random model with this scheme before measuring (training is
     * then not measured); w8a8 calibrates static scales on a few windows of random tokens. */
    dt_quant_scheme quant;
    int quant_lm_head;           /* quantise the LM head too */
    /* Called outside the timed regions (may be NULL); phase is "training", "prefill" or "decode";
     * done = -1 before the warm-up, then the number of timed steps done out of total. */
    void (*progress)(void *ctx, const char *phase, int done, int total);
    void *progress_ctx;
} bench_options;

/* One model's numbers; a measurement that did not run is NAN. */
typedef struct {
    size_t params;
    double train_step_ms;            /* median over the timed steps */
    double train_tokens_per_s;       /* B·T / median step time */
    double train_flops_per_step;     /* bench_train_flops() */
    double train_gflops;             /* train_flops_per_step / median step time / 1e9 */
    double prefill_tokens_per_s;     /* B·T / median forward time */
    double decode_tokens_per_s;      /* timed decode steps / their total time */
    double decode_weight_bytes_per_token; /* bench_decode_weight_bytes() */
    double peak_rss_mb;              /* ru_maxrss of the measuring process, MiB (filled by the caller) */
    /* with bench_options.profile: the timed steps' profile (sums over prof_steps steps), their
     * total time, the thread count and the cost of one empty parallel region (µs, best of 3) */
    dt_profile prof;
    int prof_steps, prof_threads;
    double prof_total_s, region_us;
} bench_result;

/* The cost of starting and joining one empty OpenMP parallel region on all threads, µs (best of
 * 3 runs of 2000 regions). */
double bench_region_cost_us(void);

/* Parameters that sit in a matrix product: q, k, v, o, gate, up, down of every layer and
 * lm_head (V·C, counted even when tied); not the embedding lookup, norms or λ vectors. */
double bench_matmul_params(const dt_config *c);
/* Model FLOPs of one training step (forward + backward) on B sequences of T tokens; the formula
 * is written out at its definition in bench.c. */
double bench_train_flops(const dt_config *c, int B, int T);
/* Bytes of weights one dt_decode_step reads, 4 per float; the formula is at its definition. */
double bench_decode_weight_bytes(const dt_config *c, size_t n_params);

/* Builds a randomly initialised model for cfg and runs the measurements o asks for.
 * No allocation happens inside the timed loops beyond what the library itself does. */
int bench_model(const dt_config *cfg, const bench_options *o, bench_result *r, dt_error *err);

/* Best-of-3 cblas_sgemm throughput, GFLOP/s (2·n³ per product), on n×n×n with n = 2048 or the
 * largest power of two below it whose product takes about 1 s or less; *n_out gets n. */
double bench_sgemm_peak(int *n_out);
/* Best-of-3 read bandwidth, GB/s (1e9 bytes/s), summing a float array of max(1 GiB, 4 × the
 * last-level cache) (smaller only when free memory is short) with all OpenMP threads;
 * *bytes_out gets the array size. */
double bench_read_bandwidth(size_t *bytes_out);

/* Runs fn(arg, out) in a forked child process and copies its out_size bytes of result back
 * through a pipe, with the child's peak resident set size in MiB in *rss_mb (may be NULL).
 * fn returns 0 or -1 with a message in err; a child that dies or exits early is reported in
 * err too. Returns fn's status. */
int bench_isolated(int (*fn)(void *arg, void *out, dt_error *err), void *arg, void *out, size_t out_size,
                   double *rss_mb, dt_error *err);

/* CLOCK_MONOTONIC in seconds. */
double bench_now(void);
#endif
