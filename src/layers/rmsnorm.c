/* rmsnorm.c — y = x / sqrt(mean(x²) + eps) · w, the Llama RMSNorm (no mean subtraction): the
 * loops over rows; each row is a kernel of the path in use (kernels.h, elementwise_body.h). */
#include <stddef.h>

#include "layers/kernels.h"
#include "layers/layers.h"

/* out[N, C] = x · rstd · w; rstd[N] saved for the backward pass. w may be NULL (no weight). */
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
    const dt_kernels *k = kernels_active();
#pragma omp parallel for if ((size_t)N * C >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) rstd[n] = k->rmsnorm_row(out + (size_t)n * C, x + (size_t)n * C, w, C, eps);
}

/* sum[N, C] = x + delta (the residual add), then out = RMSNorm(sum) — one pass over the rows. */
void residual_rmsnorm_forward(float *sum, float *out, float *rstd, const float *x, const float *delta,
                              const float *w, int N, int C, float eps) {
    const dt_kernels *k = kernels_active();
#pragma omp parallel for if ((size_t)N * C >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        const size_t o = (size_t)n * C;
        rstd[n] = k->residual_rmsnorm_row(sum + o, out + o, x + o, delta + o, w, C, eps);
    }
}

/* dx[N, C] += ..., dw[C] += ... (the formulas are at elementwise_ref.c's definitions) */
void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *rstd, const float *w,
                      int N, int C) {
    const dt_kernels *k = kernels_active();
    if (dx) {
#pragma omp parallel for if ((size_t)N * C >= LAYER_PARALLEL_MIN)
        for (int n = 0; n < N; n++) {
            const size_t o = (size_t)n * C;
            k->rmsnorm_backward_row(dx + o, dout + o, x + o, rstd[n], w, C);
        }
    }
    if (dw) {
        /* every row adds into the same dw, so parallelise over blocks of columns instead of rows:
         * each thread owns its columns and still reads contiguous runs of each row */
        const int BLK = 64;
        int nblk = (C + BLK - 1) / BLK;
#pragma omp parallel for if ((size_t)N * C >= LAYER_PARALLEL_MIN)
        for (int blk = 0; blk < nblk; blk++) {
            int c0 = blk * BLK, c1 = c0 + BLK < C ? c0 + BLK : C;
            for (int n = 0; n < N; n++) {
                const size_t o = (size_t)n * C + c0;
                k->rmsnorm_dw_row(dw + c0, dout + o, x + o, rstd[n], c1 - c0);
            }
        }
    }
}
