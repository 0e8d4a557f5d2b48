/* linear.c — y = x·Wᵀ, the PyTorch Linear layout without bias.
 *
 * Both passes are single cblas_sgemm calls: W is [out, in] row-major, so "x·Wᵀ" is just the
 * Trans flag on W, and no transposed copy is ever made. OpenBLAS threads the products itself.
 */
#include <cblas.h>
#include <omp.h>

#include "layers/kernels.h"
#include "layers/layers.h"

/* y[N, out] = x[N, in] · W[out, in]ᵀ */
void linear_forward(float *y, const float *x, const float *w, int N, int in, int out) {
    const dt_kernels *k = kernels_active();
    /* one row on the portable path (decoding): OpenBLAS's matrix-vector product, which streams W
     * once; the vector paths' linear_rows, fetching a block ahead, streamed W from memory 8–38%
     * faster than it (Zen 5, 2 threads, AVX-512 and AVX2 alike; the SSE2 one 2–10% slower), and
     * gives a row the same bits alone as in a batch */
    if (N == 1 && k->isa == DT_ISA_PORTABLE) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, 0.0f, y, 1);
        return;
    }
    /* a few rows (a batch of decoding streams, a prompt chunk): linear_rows, where sgemm's packing
     * of W would cost more than the product */
    if (N <= LINEAR_ROWS_MAX) {
        /* one contiguous range of W per thread, in one call: the kernel fetches each block of W's
         * rows while it multiplies the one before, which pays only within a call */
#pragma omp parallel
        {
            const int nt = omp_get_num_threads(), t = omp_get_thread_num();
            const int per = ((out + nt - 1) / nt + 15) / 16 * 16;
            const int o0 = t * per, o1 = o0 + per < out ? o0 + per : out;
            if (o0 < o1) k->linear_rows(y, out, x, N, w, in, o0, o1);
        }
        return;
    }
    if (N <= k->linear_rows_most) {
        /* more rows than one call takes: tasks of LINEAR_SKINNY_BLOCK rows of W, which stay in the
         * cache while the calls for the blocks of x pass over them */
#pragma omp parallel for schedule(static)
        for (int o0 = 0; o0 < out; o0 += LINEAR_SKINNY_BLOCK) {
            const int o1 = o0 + LINEAR_SKINNY_BLOCK < out ? o0 + LINEAR_SKINNY_BLOCK : out;
            for (int r0 = 0; r0 < N; r0 += LINEAR_ROWS_MAX) {
                const int nr = N - r0 < LINEAR_ROWS_MAX ? N - r0 : LINEAR_ROWS_MAX;
                k->linear_rows(y + (size_t)r0 * out, out, x + (size_t)r0 * in, nr, w, in, o0, o1);
            }
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
}

/* dx[N, in] (+)= dy[N, out] · W[out, in];  dw[out, in] (+)= dy[N, out]ᵀ · x[N, in] */
void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int N, int in,
                     int out, int set) {
    /* beta = 1: gradients accumulate (tied weights, residual branches); beta = 0 lets the first
     * writer of a buffer skip zeroing it (OpenBLAS never reads C then, so it may hold anything) */
    const float beta_dx = set & GRAD_SET_DX ? 0.0f : 1.0f, beta_dw = set & GRAD_SET_DW ? 0.0f : 1.0f;
    if (dx) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0f, dy, out, w, in, beta_dx, dx, in);
    if (dw) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1.0f, dy, out, x, in, beta_dw, dw, in);
}
