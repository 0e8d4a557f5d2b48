/* linear.c — y = x·Wᵀ, the PyTorch Linear layout without bias.
 *
 * Both passes are single cblas_sgemm calls: W is [out, in] row-major, so "x·Wᵀ" is just the
 * Trans flag on W, and no transposed copy is ever made. OpenBLAS threads the products itself.
 */
#include <cblas.h>

#include "layers/layers.h"

/* y[N, out] = x[N, in] · W[out, in]ᵀ */
void linear_forward(float *y, const float *x, const float *w, int N, int in, int out) {
    /* one row (decoding): a matrix-vector product, which streams W once at memory bandwidth */
    if (N == 1) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, 0.0f, y, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
}

/* dx[N, in] += dy[N, out] · W[out, in];  dw[out, in] += dy[N, out]ᵀ · x[N, in] */
void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int N, int in,
                     int out) {
    /* beta = 1: gradients accumulate (tied weights, residual branches) */
    if (dx) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0f, dy, out, w, in, 1.0f, dx, in);
    if (dw) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1.0f, dy, out, x, in, 1.0f, dw, in);
}
