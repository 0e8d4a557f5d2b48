/* kernels.h — the kernels that exist once per instruction set, and the choice between them
 * (internal).
 *
 * Each kernel body is written once in the vector type of simd.h and compiled three times: in
 * the plain .c file for baseline x86-64 (SSE2, the "portable" path), in *_avx2.c and in
 * *_avx512.c (CMakeLists.txt compiles only those two with the wider instruction sets). A
 * dt_kernels table holds one path's functions; kernels_active() is the table of the path
 * dt_isa_active() names, chosen on first use and fixed for the life of the process, so every
 * caller (all threads, all models) runs the same code. kernels_for() gives any path the CPU
 * supports, for the tests that hold every path against kernels_reference(): the plain scalar
 * loops, kept as the definition of what each kernel computes (elementwise_ref.c; the attention
 * reference is attention.c, whose interface differs because it keeps the maps).
 *
 * Layer code (rmsnorm.c, swiglu.c, rope.c, flash_attention.c, train/optim.c) owns the loops over
 * rows and the OpenMP parallelism; the kernels here work on one row or one contiguous span.
 */
#ifndef DT_KERNELS_H
#define DT_KERNELS_H

#include <stddef.h>

#include "cpu/cpu.h"
#include "layers/layers.h"

/* AdamW's per-step constants: m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g², then
 * p −= lr·((m/bc1) / (sqrt(v/bc2) + eps) + weight_decay·p [decay marked]). */
typedef struct {
    float beta1, beta2, eps, weight_decay, bc1, bc2, lr;
} adamw_coeffs;

typedef struct {
    dt_isa isa;
    /* y[n] = exp(x) with the kernels' vector exp (attention softmax, SwiGLU) */
    void (*exp)(float *y, const float *x, int n);
    /* out[C] = x·r·w (w may be NULL); returns r = 1/sqrt(mean(x²) + eps), Σx² taken in double */
    float (*rmsnorm_row)(float *out, const float *x, const float *w, int C, float eps);
    /* sum[C] = x + delta, then out = RMSNorm(sum) as rmsnorm_row (sum may alias x) */
    float (*residual_rmsnorm_row)(float *sum, float *out, const float *x, const float *delta, const float *w, int C,
                                  float eps);
    /* dx[C] += r·w·dy − (r³/C)·x·Σ w·dy·x  (w may be NULL) */
    void (*rmsnorm_backward_row)(float *dx, const float *dy, const float *x, float r, const float *w, int C);
    /* dw[n] += dy·x·r */
    void (*rmsnorm_dw_row)(float *dw, const float *dy, const float *x, float r, int n);
    /* h[n] = silu(gate)·up */
    void (*swiglu_forward)(float *h, const float *gate, const float *up, size_t n);
    /* dgate[n] = dh·up·silu'(gate), dup[n] = dh·silu(gate) (written, not added); either may be NULL */
    void (*swiglu_backward)(float *dgate, float *dup, const float *dh, const float *gate, const float *up, size_t n);
    /* RoPE on one token's nh heads of width hd, channels [i0, i0 + n) of the first half paired
     * with [half + i0, half + i0 + n): x_i ← x_i·cos − x_{i+half}·sin, x_{i+half} ← x_{i+half}·cos + x_i·sin,
     * with cos[n], sin[n] the angles' values for those channels */
    void (*rope_span)(float *row, int nh, int hd, int i0, int n, const float *cos, const float *sin);
    /* Σ x[i]² of n floats (the gradient norm): in double over blocks whose float partial sums
     * stay short, so within ~1e-6 relative of the exact sum */
    double (*sumsq)(const float *x, size_t n);
    /* Σ x[i] of n floats in one pass as fast as this path's loads go, the data asked for ahead as
     * the quantised decoder asks for its weights: the read-bandwidth probe's plain read (bench.c);
     * float sums per block added in double, as sumsq */
    double (*stream_sum)(const float *x, size_t n);
    /* one AdamW update of n parameters (decay[i]: weight decay on parameter i) */
    void (*adamw)(float *p, const float *g, float *m, float *v, const unsigned char *decay, size_t n,
                  const adamw_coeffs *k);
    /* y[r·ldy + o] = Σ_k x[r·in + k]·w[o·in + k] for rows r < nr ≤ LINEAR_ROWS_MAX of x [nr, in] and
     * outputs o in [o0, o1) of w [out, in]: the matrix product of a few rows (linear.c) */
    void (*linear_rows)(float *y, int ldy, const float *x, int nr, const float *w, int in, int o0, int o1);
    /* rows up to which linear_forward (and a quantised layer's few-row path) use linear_rows rather
     * than sgemm: where it was faster, measured on [2816, 1024] weights from memory, 2 threads
     * (AVX-512, Zen 5: 97 GFLOP/s at 8 rows, 199 at 64, sgemm 36 and 150; AVX2: 54 at 8, sgemm
     * 36, but sgemm ahead from 16 rows) */
    int linear_rows_most;
    /* R ≤ CACHE_ROWS_MAX queries against a KV cache's rows (row s at k + s·stride, hd floats):
     * out[r·ldo + s] = q_r·k_s for s < n, q_r = q + r·ldq (cache_dots); out_r[0..hd) (+)=
     * Σ_s w_r[s]·v_s, out_r = out + r·ldo, w_r = w + r·ldw, from out_r's values when accumulate
     * (cache_axpy). Each row's result is the same bits for any R, and a sum over n rows the same
     * as one over the first m and then, accumulating, the other n − m: what lets a prompt chunk's
     * rows share each read of the cache and still match the row decoded alone. */
    void (*cache_dots)(float *out, size_t ldo, const float *q, size_t ldq, int R, const float *k, int n,
                       size_t stride, int hd);
    void (*cache_axpy)(float *out, size_t ldo, const float *w, size_t ldw, int R, const float *v, int n,
                       size_t stride, int hd, int accumulate);
    /* the fused attention kernels (flash_attention.c documents them) */
    void (*attention_forward)(float *out, float *lse, float *o12, float *pre, float *rstd, const float *q,
                              const float *k, const float *v, float *scratch, const attention_shape *s);
    void (*attention_backward)(float *dq, float *dk, float *dv, float *dlambda, float *dsubln, const float *dout,
                               const float *out, const float *lse, const float *o12, const float *pre,
                               const float *rstd, const float *q, const float *k, const float *v, float *scratch,
                               const attention_shape *s);
} dt_kernels;

/* [lo, hi) of n elements for thread id of nt: equal spans cut at multiples of 64 floats (whole
 * cache lines), for the kernels that run on one contiguous span per thread. */
static inline void kernels_span(size_t n, int id, int nt, size_t *lo, size_t *hi) {
    const size_t per = (n / (size_t)nt + 63) & ~(size_t)63;
    *lo = per * (size_t)id < n ? per * (size_t)id : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* The table of path isa, or NULL when this CPU cannot run it. */
const dt_kernels *kernels_for(dt_isa isa);
/* The table of dt_isa_active(), chosen once per process. */
const dt_kernels *kernels_active(void);
/* The plain scalar definitions (attention_forward / attention_backward are NULL: see above). */
const dt_kernels *kernels_reference(void);

/* Queries one cache_dots / cache_axpy call takes at most. */
#define CACHE_ROWS_MAX 4
/* Rows of x one linear_rows call multiplies at most (its accumulators stay in registers). */
#define LINEAR_ROWS_MAX 8
#define LINEAR_ROWS_MOST_portable 12
#define LINEAR_ROWS_MOST_avx2 12
#define LINEAR_ROWS_MOST_avx512 64

/* Every path's functions, defined by the bodies compiled per path (suffix = dt_isa_name). */
#define DT_DECLARE_KERNELS(sfx)                                                                                   \
    void flash_attention_exp_##sfx(float *y, const float *x, int n);                                              \
    float rmsnorm_row_##sfx(float *out, const float *x, const float *w, int C, float eps);                        \
    float residual_rmsnorm_row_##sfx(float *sum, float *out, const float *x, const float *delta, const float *w,  \
                                     int C, float eps);                                                           \
    void rmsnorm_backward_row_##sfx(float *dx, const float *dy, const float *x, float r, const float *w, int C);  \
    void rmsnorm_dw_row_##sfx(float *dw, const float *dy, const float *x, float r, int n);                        \
    void swiglu_forward_##sfx(float *h, const float *gate, const float *up, size_t n);                            \
    void swiglu_backward_##sfx(float *dgate, float *dup, const float *dh, const float *gate, const float *up,     \
                               size_t n);                                                                         \
    void rope_span_##sfx(float *row, int nh, int hd, int i0, int n, const float *cos, const float *sin);          \
    double sumsq_##sfx(const float *x, size_t n);                                                                 \
    double stream_sum_##sfx(const float *x, size_t n);                                                            \
    void linear_rows_##sfx(float *y, int ldy, const float *x, int nr, const float *w, int in, int o0, int o1);    \
    void cache_dots_##sfx(float *out, size_t ldo, const float *q, size_t ldq, int R, const float *k, int n,       \
                          size_t stride, int hd);                                                                 \
    void cache_axpy_##sfx(float *out, size_t ldo, const float *w, size_t ldw, int R, const float *v, int n,       \
                          size_t stride, int hd, int accumulate);                                                 \
    void adamw_##sfx(float *p, const float *g, float *m, float *v, const unsigned char *decay, size_t n,          \
                     const adamw_coeffs *k);                                                                      \
    void flash_attention_forward_##sfx(float *out, float *lse, float *o12, float *pre, float *rstd,               \
                                       const float *q, const float *k, const float *v, float *scratch,            \
                                       const attention_shape *s);                                                 \
    void flash_attention_backward_##sfx(float *dq, float *dk, float *dv, float *dlambda, float *dsubln,           \
                                        const float *dout, const float *out, const float *lse, const float *o12,  \
                                        const float *pre, const float *rstd, const float *q, const float *k,      \
                                        const float *v, float *scratch, const attention_shape *s);
DT_DECLARE_KERNELS(portable)
DT_DECLARE_KERNELS(avx2)
DT_DECLARE_KERNELS(avx512)

#endif
