/* diff_v2.c — DIFF V2's output combination. Its attention is ordinary causal softmax attention
 * over 2h query heads (the baseline kernels); each output head j then subtracts its odd query
 * head, scaled by a per-token λ: o_j = a_{2j} − sigmoid(z_j)·a_{2j+1}, z = W_λ x. */
#include <math.h>
#include <stddef.h>

#include "layers/layers.h"

void diffv2_combine_forward(float *out, float *lam, const float *z, const float *a, int N, int h, int hd) {
#pragma omp parallel for if ((size_t)N * h * hd >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < h; j++) {
            const size_t r = (size_t)n * h + j;
            const float l = 1.0f / (1.0f + expf(-z[r]));
            lam[r] = l;
            const float *a1 = a + ((size_t)n * 2 * h + 2 * j) * hd, *a2 = a1 + hd;
            float *o = out + r * hd;
            for (int e = 0; e < hd; e++) o[e] = a1[e] - l * a2[e];
        }
    }
}

void diffv2_combine_backward(float *da, float *dz, const float *dout, const float *a, const float *lam, int N, int h,
                             int hd) {
#pragma omp parallel for if ((size_t)N * h * hd >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < h; j++) {
            const size_t r = (size_t)n * h + j;
            const float l = lam[r];
            const float *a2 = a + ((size_t)n * 2 * h + 2 * j + 1) * hd, *dy = dout + r * hd;
            float *da1 = da + ((size_t)n * 2 * h + 2 * j) * hd, *da2 = da1 + hd;
            float dl = 0.0f;
            for (int e = 0; e < hd; e++) {
                da1[e] += dy[e];
                da2[e] -= l * dy[e];
                dl -= dy[e] * a2[e];
            }
            /* sigmoid' = λ(1 − λ) */
            dz[r] += dl * l * (1.0f - l);
        }
    }
}
