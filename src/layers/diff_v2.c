/* diff_v2.c — DIFF V2's output combination. Its attention is ordinary causal softmax attention
 * over 2h query heads (the baseline kernels); each output head j then subtracts its second query
 * head, scaled by a per-token λ: o_j = a_{2j} − sigmoid(z_j)·a_{2j+1}, z = W_λ x. The V2
 * write-up's ablations change which heads pair (j with j + h: across GQA groups) and what λ is
 * (1, or z itself); see dt_v2_pairs and dt_v2_lambda in difftrans.h. */
#include <math.h>
#include <stddef.h>

#include "layers/layers.h"

/* The two query heads of output head j within a row of 2h heads */
static inline size_t first_head(int j, int pairs) { return pairs == DIFFV2_PAIRS_CROSS ? (size_t)j : 2 * (size_t)j; }
static inline size_t second_head(int j, int h, int pairs) {
    return pairs == DIFFV2_PAIRS_CROSS ? (size_t)j + (size_t)h : 2 * (size_t)j + 1;
}

static inline float lambda_of(const float *z, size_t r, int lambda) {
    if (lambda == DIFFV2_LAMBDA_NONE) return 1.0f;
    if (lambda == DIFFV2_LAMBDA_LINEAR) return z[r];
    return 1.0f / (1.0f + expf(-z[r]));
}

/* row n of diffv2_combine_forward_with */
static void combine_row(float *out, float *lam, const float *z, const float *a, int n, int h, int hd, int pairs,
                        int lambda) {
    const float *row = a + (size_t)n * 2 * h * hd;
    for (int j = 0; j < h; j++) {
        const size_t r = (size_t)n * h + j;
        const float l = lambda_of(z, r, lambda);
        lam[r] = l;
        const float *a1 = row + first_head(j, pairs) * hd, *a2 = row + second_head(j, h, pairs) * hd;
        float *o = out + r * hd;
        for (int e = 0; e < hd; e++) o[e] = a1[e] - l * a2[e];
    }
}

void diffv2_combine_forward_with(float *out, float *lam, const float *z, const float *a, int N, int h, int hd,
                                 int pairs, int lambda) {
    if ((size_t)N * h * hd < LAYER_PARALLEL_MIN) { /* a decode step's row: no region (layers.h) */
        for (int n = 0; n < N; n++) combine_row(out, lam, z, a, n, h, hd, pairs, lambda);
        return;
    }
#pragma omp parallel for
    for (int n = 0; n < N; n++) combine_row(out, lam, z, a, n, h, hd, pairs, lambda);
}

void diffv2_combine_backward_with(float *da, float *dz, const float *dout, const float *a, const float *lam, int N,
                                  int h, int hd, int pairs, int lambda) {
#pragma omp parallel for if ((size_t)N * h * hd >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * 2 * h * hd;
        for (int j = 0; j < h; j++) {
            const size_t r = (size_t)n * h + j;
            const float l = lam[r];
            const float *a2 = a + row + second_head(j, h, pairs) * hd, *dy = dout + r * hd;
            float *da1 = da + row + first_head(j, pairs) * hd, *da2 = da + row + second_head(j, h, pairs) * hd;
            float dl = 0.0f;
            for (int e = 0; e < hd; e++) {
                da1[e] += dy[e];
                da2[e] -= l * dy[e];
                dl -= dy[e] * a2[e];
            }
            /* dλ/dz: sigmoid' = λ(1 − λ); 1 when λ = z; no z without λ */
            if (lambda == DIFFV2_LAMBDA_SIGMOID) dz[r] += dl * l * (1.0f - l);
            else if (lambda == DIFFV2_LAMBDA_LINEAR) dz[r] += dl;
        }
    }
}

void diffv2_combine_forward(float *out, float *lam, const float *z, const float *a, int N, int h, int hd) {
    diffv2_combine_forward_with(out, lam, z, a, N, h, hd, DIFFV2_PAIRS_GROUP, DIFFV2_LAMBDA_SIGMOID);
}

void diffv2_combine_backward(float *da, float *dz, const float *dout, const float *a, const float *lam, int N, int h,
                             int hd) {
    diffv2_combine_backward_with(da, dz, dout, a, lam, N, h, hd, DIFFV2_PAIRS_GROUP, DIFFV2_LAMBDA_SIGMOID);
}
