/* rmsnorm.c — y = x / sqrt(mean(x²) + eps) · w, the Llama RMSNorm (no mean subtraction). */
#include <math.h>
#include <stddef.h>

#include "layers/layers.h"

/* One row: out[C] = x · r · w with r = 1/sqrt(mean(x²) + eps), returned. The sum of squares
 * is taken in double so a long row does not lose low bits; then HF's float order: variance +
 * eps, rsqrt, x·r, and the weight last. */
static inline float rmsnorm_row(float *restrict out, const float *restrict x, const float *restrict w, int C,
                                float eps) {
    double ss = 0.0;
    for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
    const float r = 1.0f / sqrtf((float)(ss / C) + eps);
    if (w) {
        for (int c = 0; c < C; c++) out[c] = (x[c] * r) * w[c];
    } else {
        for (int c = 0; c < C; c++) out[c] = x[c] * r;
    }
    return r;
}

/* out[N, C] = x · rstd · w; rstd[N] saved for the backward pass. w may be NULL (no weight). */
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
#pragma omp parallel for if ((size_t)N * C >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) rstd[n] = rmsnorm_row(out + (size_t)n * C, x + (size_t)n * C, w, C, eps);
}

/* sum[N, C] = x + delta (the residual add), then out = RMSNorm(sum) — one pass over the rows. */
void residual_rmsnorm_forward(float *sum, float *out, float *rstd, const float *x, const float *delta,
                              const float *w, int N, int C, float eps) {
#pragma omp parallel for if ((size_t)N * C >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        float *restrict sn = sum + (size_t)n * C;
        const float *restrict xn = x + (size_t)n * C, *restrict dn = delta + (size_t)n * C;
        for (int c = 0; c < C; c++) sn[c] = xn[c] + dn[c];
        rstd[n] = rmsnorm_row(out + (size_t)n * C, sn, w, C, eps);
    }
}

/* dx[N, C] += ..., dw[C] += ...
 * With y_c = w_c·x_c·r and r = (Σx²/C + eps)^(-1/2), ∂r/∂x_k = −r³·x_k/C, so
 *   dx_k = r·w_k·dy_k − (r³/C)·x_k·Σ_c w_c·dy_c·x_c,   dw_c = Σ_n dy_c·x_c·r. */
void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *rstd, const float *w,
                      int N, int C) {
    if (dx) {
#pragma omp parallel for if ((size_t)N * C >= LAYER_PARALLEL_MIN)
        for (int n = 0; n < N; n++) {
            const float *xn = x + (size_t)n * C;
            const float *dy = dout + (size_t)n * C;
            float *dxn = dx + (size_t)n * C;
            float r = rstd[n];
            float m = 0.0f; /* Σ w·dy·x: how much the row's scale moves the loss */
            for (int c = 0; c < C; c++) m += (w ? w[c] : 1.0f) * dy[c] * xn[c];
            float k = r * r * r * m / (float)C;
            for (int c = 0; c < C; c++) dxn[c] += r * (w ? w[c] : 1.0f) * dy[c] - k * xn[c];
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
                const float *xn = x + (size_t)n * C;
                const float *dy = dout + (size_t)n * C;
                float r = rstd[n];
                for (int c = c0; c < c1; c++) dw[c] += dy[c] * xn[c] * r;
            }
        }
    }
}
