/* profile.h — where the time of a training step goes (internal; `difftrans bench --profile`).
 *
 * The timers live in the run state (runstate_profile_enable gives it a dt_profile); forward.c,
 * the training step (train/step.c) and the fused attention kernels add into it when it is there
 * and skip every clock read when it is not. Parts are wall-clock seconds summed over the steps
 * profiled; each part is one contiguous stretch of the step, so the parts add up to the step
 * minus the little between them (bench prints the remainder). What each part holds:
 *   matrix products: per layer and kind (q/k/v, o, gate/up, down), forward and backward (the
 *     backward is both the input and the weight gradient), OpenBLAS's threads included;
 *   attention forward / backward: the fused kernels, whole; attn_busy[] is the time summed over
 *     threads inside their tasks, so threads·wall − busy is time threads spent waiting there
 *     (imbalance, start-up);
 *   norms (RMSNorm with its fused residual adds, forward and backward), RoPE, SwiGLU, the
 *     embedding, zeroing of gradient scratch: the elementwise passes;
 *   LM head (its products) and loss (softmax cross-entropy, forward and backward); lm_head_flops
 *     counts the products the LM head part ran: 6·N·C·V a step when the batch's logits fit one
 *     chunk of the chunked loss, 8·N·C·V when the backward recomputes each chunk's logits;
 *   optimizer: gradient norm + clipping, AdamW;
 *   regions: the parallel regions the step starts (each product counts one: OpenBLAS threads
 *     every product of training size; each elementwise pass that goes parallel counts one), which
 *     with the measured cost of an empty region estimates thread start/stop.
 */
#ifndef DT_PROFILE_H
#define DT_PROFILE_H


#include "difftrans.h"
#include "base/base.h"

#define PROFILE_MAX_LAYERS 64 /* layers beyond it are added into the last row */

typedef enum {
    PROF_EMBED,
    PROF_NORM,
    PROF_ROPE,
    PROF_SWIGLU,
    PROF_ZERO,
    PROF_ATTN_FWD,
    PROF_ATTN_BWD,
    PROF_LM_HEAD,
    PROF_LOSS,
    PROF_GRAD_NORM,
    PROF_ADAMW,
    PROF_PARTS
} profile_part;

typedef enum { MM_QKV, MM_O, MM_GATE_UP, MM_DOWN, MM_KINDS } profile_mm_kind;

typedef struct {
    double part[PROF_PARTS];
    double mm[PROFILE_MAX_LAYERS][MM_KINDS][2]; /* [layer][kind][0 forward, 1 backward] */
    double attn_busy[2];                        /* Σ over threads of task time: forward, backward */
    double regions;                             /* parallel regions started */
    double lm_head_flops;                       /* FLOPs of the products timed in PROF_LM_HEAD */
} dt_profile;

/* Gives rs a zeroed profile (or zeroes the one it has); -1 when out of memory. */
int runstate_profile_enable(dt_runstate *rs, dt_error *err);
/* rs's profile, or NULL when profiling is off. */
dt_profile *runstate_profile(dt_runstate *rs);
void runstate_profile_reset(dt_runstate *rs);

static inline double profile_start(const dt_profile *p) { return p ? monotonic_seconds() : 0.0; }

/* With a profile: adds the time since *t to part `part`, counts `regions` parallel regions and
 * moves *t to now. Without one (p NULL): nothing, not even a clock read. */
static inline void profile_lap(dt_profile *p, profile_part part, double regions, double *t) {
    if (!p) return;
    double now = monotonic_seconds();
    p->part[part] += now - *t;
    p->regions += regions;
    *t = now;
}
/* Counts FLOPs of an LM head product [rows, C] × [C, V] that `products` such products cost (1 forward,
 * 2 backward: input and weight gradients). */
static inline void profile_lm_head_flops(dt_profile *p, double products, int rows, int C, int V) {
    if (p) p->lm_head_flops += products * 2.0 * rows * C * V;
}
/* The same for layer l's products of one kind, forward (backward = 0) or backward (1). */
static inline void profile_lap_mm(dt_profile *p, int l, profile_mm_kind kind, int backward, double regions,
                                  double *t) {
    if (!p) return;
    double now = monotonic_seconds();
    p->mm[l < PROFILE_MAX_LAYERS ? l : PROFILE_MAX_LAYERS - 1][kind][backward] += now - *t;
    p->regions += regions;
    *t = now;
}

/* Where the time of a decode step goes (`difftrans bench --profile`, decoding): dt_decode_step adds
 * into its cache's profile when kvcache_profile_enable gave it one, wall-clock seconds summed over
 * the steps: the products by kind (q/k/v, o, gate/up, down over all layers; the LM head), the
 * attention over the cache, and everything else (embedding, norms, RoPE, residual adds, SwiGLU,
 * the cache's conversion, DIFF V2's λ and combination). */
typedef enum {
    DPROF_QKV,
    DPROF_O,
    DPROF_GATE_UP,
    DPROF_DOWN,
    DPROF_LM_HEAD,
    DPROF_ATTN,
    DPROF_OTHER,
    DPROF_PARTS
} decode_profile_part;

typedef struct {
    double part[DPROF_PARTS];
} dt_decode_profile;

/* Gives kc a zeroed profile (or zeroes the one it has); -1 when out of memory. */
int kvcache_profile_enable(dt_kvcache *kc, dt_error *err);
/* kc's profile, or NULL when profiling is off. */
dt_decode_profile *kvcache_profile(dt_kvcache *kc);

/* With a profile: adds the time since *t to part `part` and moves *t to now; without: nothing. */
static inline void decode_lap(dt_decode_profile *p, decode_profile_part part, double *t) {
    if (!p) return;
    double now = monotonic_seconds();
    p->part[part] += now - *t;
    *t = now;
}
#endif
