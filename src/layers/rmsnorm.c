/* rmsnorm.c — y = x / sqrt(mean(x²) + eps) · w, the Llama RMSNorm (no mean subtraction): the
 * loops over rows; each row is a kernel of the path in use (kernels.h, elementwise_body.h). */
#include <omp.h>
#include <stddef.h>
#include <string.h>

#include "layers/kernels.h"
#include "layers/layers.h"

/* Widest row whose dw partial goes on a thread's stack (64 KiB); wider rows take the serial dw. */
#define RMSNORM_PARTIAL_MAX 16384

/* out[N, C] = x · rstd · w; rstd[N] saved for the backward pass. w may be NULL (no weight). */
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
    const dt_kernels *k = kernels_active();
    if ((size_t)N * C < LAYER_PARALLEL_MIN) {
        for (int n = 0; n < N; n++) rstd[n] = k->rmsnorm_row(out + (size_t)n * C, x + (size_t)n * C, w, C, eps);
        return;
    }
#pragma omp parallel for
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

/* dx[N, C] += ..., dw[C] += ... (the formulas are at elementwise_ref.c's definitions).
 * One pass over the rows: each thread takes a contiguous range of rows, adds their dx and sums
 * their dw into a partial of its own (C floats on its stack), and the partials are then added
 * into dw column by column in thread order — deterministic for a given thread count. */
void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *rstd, const float *w,
                      int N, int C) {
    const dt_kernels *k = kernels_active();
    if ((size_t)N * C < LAYER_PARALLEL_MIN || C > RMSNORM_PARTIAL_MAX) {
        /* small (or extremely wide) rows: one thread, dw summed over the rows in place */
        if (dx)
#pragma omp parallel for if ((size_t)N * C >= LAYER_PARALLEL_MIN)
            for (int n = 0; n < N; n++) {
                const size_t o = (size_t)n * C;
                k->rmsnorm_backward_row(dx + o, dout + o, x + o, rstd[n], w, C);
            }
        if (dw)
            for (int n = 0; n < N; n++) {
                const size_t o = (size_t)n * C;
                k->rmsnorm_dw_row(dw, dout + o, x + o, rstd[n], C);
            }
        return;
    }
    const int nt = omp_get_max_threads();
    float *partial[nt]; /* each thread's dw partial, on its own stack until the region ends */
#pragma omp parallel num_threads(nt)
    {
        const int id = omp_get_thread_num(), team = omp_get_num_threads();
        const int lo = (int)((long long)N * id / team), hi = (int)((long long)N * (id + 1) / team);
        float part[C];
        partial[id] = part;
        if (dw) memset(part, 0, sizeof part);
        for (int n = lo; n < hi; n++) {
            const size_t o = (size_t)n * C;
            if (dx) k->rmsnorm_backward_row(dx + o, dout + o, x + o, rstd[n], w, C);
            if (dw) k->rmsnorm_dw_row(part, dout + o, x + o, rstd[n], C);
        }
        if (dw) {
#pragma omp barrier
            /* this thread's columns of dw: the partials added in thread order */
            const int c0 = (int)((long long)C * id / team), c1 = (int)((long long)C * (id + 1) / team);
            for (int t = 0; t < team; t++)
                for (int c = c0; c < c1; c++) dw[c] += partial[t][c];
#pragma omp barrier /* the partials live on the threads' stacks: keep them until all are added */
        }
    }
}
