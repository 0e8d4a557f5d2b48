/* rmsnorm.c — y = x / sqrt(mean(x²) + eps) · w, the Llama RMSNorm (no mean subtraction). */
#include <math.h>
#include <stddef.h>

#include "layers/layers.h"

/* out[N, C] = x · rstd · w; rstd[N] saved for the backward pass. w may be NULL (no weight). */
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
#pragma omp parallel for if ((size_t)N * C >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        const float *xn = x + (size_t)n * C;
        float *on = out + (size_t)n * C;
        /* sum of squares in double so a long row does not lose low bits; HF then works in float:
         * variance (float) + eps, rsqrt, x·rstd, and the weight last */
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)xn[c] * xn[c];
        float ms = (float)(ss / C);
        float r = 1.0f / sqrtf(ms + eps);
        rstd[n] = r;
        if (w) {
            for (int c = 0; c < C; c++) on[c] = (xn[c] * r) * w[c];
        } else {
            for (int c = 0; c < C; c++) on[c] = xn[c] * r;
        }
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
