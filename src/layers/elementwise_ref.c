/* elementwise_ref.c — the plain scalar definitions of the dispatched elementwise kernels
 * (kernels.h): what each computes, in the order of float operations the fast paths keep. Never
 * used by the model; tests/test_kernels.c holds every path against these. */
#include <math.h>
#include <stddef.h>

#include "layers/kernels.h"

static void exp_ref(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] = expf(x[i]);
}

/* The sum of squares is taken in double so a long row does not lose low bits; then HF's float
 * order: variance + eps, rsqrt, x·r, and the weight last. */
static float rmsnorm_row_ref(float *out, const float *x, const float *w, int C, float eps) {
    double ss = 0.0;
    for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
    const float r = 1.0f / sqrtf((float)(ss / C) + eps);
    for (int c = 0; c < C; c++) out[c] = w ? (x[c] * r) * w[c] : x[c] * r;
    return r;
}

static float residual_rmsnorm_row_ref(float *sum, float *out, const float *x, const float *delta, const float *w,
                                      int C, float eps) {
    for (int c = 0; c < C; c++) sum[c] = x[c] + delta[c];
    return rmsnorm_row_ref(out, sum, w, C, eps);
}

/* With y_c = w_c·x_c·r and r = (Σx²/C + eps)^(-1/2), ∂r/∂x_k = −r³·x_k/C, so
 *   dx_k = r·w_k·dy_k − (r³/C)·x_k·Σ_c w_c·dy_c·x_c,   dw_c = Σ_n dy_c·x_c·r. */
static void rmsnorm_backward_row_ref(float *dx, const float *dy, const float *x, float r, const float *w, int C) {
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += (w ? w[c] : 1.0f) * dy[c] * x[c];
    const float k = r * r * r * m / (float)C;
    for (int c = 0; c < C; c++) dx[c] += r * (w ? w[c] : 1.0f) * dy[c] - k * x[c];
}

static void rmsnorm_dw_row_ref(float *dw, const float *dy, const float *x, float r, int n) {
    for (int c = 0; c < n; c++) dw[c] += dy[c] * x[c] * r;
}

/* silu(g) = g·sigmoid(g), written as g / (1 + e^−g), the form PyTorch's CPU kernel evaluates */
static void swiglu_forward_ref(float *h, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) h[i] = (gate[i] / (1.0f + expf(-gate[i]))) * up[i];
}

/* silu'(g) = s·(1 + g·(1 − s)), s = sigmoid(g) */
static void swiglu_backward_ref(float *dgate, float *dup, const float *dh, const float *gate, const float *up,
                                size_t n) {
    for (size_t i = 0; i < n; i++) {
        const float g = gate[i], s = 1.0f / (1.0f + expf(-g));
        if (dgate) dgate[i] = dh[i] * up[i] * s * (1.0f + g * (1.0f - s));
        if (dup) dup[i] = dh[i] * g * s;
    }
}

static void rope_span_ref(float *row, int nh, int hd, int i0, int n, const float *cos, const float *sin) {
    const int half = hd / 2;
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < n; i++) {
            float *p = row + (size_t)h * hd + i0 + i;
            const float x0 = p[0], x1 = p[half];
            p[0] = x0 * cos[i] - x1 * sin[i];
            p[half] = x1 * cos[i] + x0 * sin[i];
        }
}

static double sumsq_ref(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static double stream_sum_ref(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    return s;
}

static void adamw_ref(float *p, const float *g, float *m, float *v, const unsigned char *decay, size_t n,
                      const adamw_coeffs *k) {
    for (size_t i = 0; i < n; i++) {
        m[i] = k->beta1 * m[i] + (1.0f - k->beta1) * g[i];
        v[i] = k->beta2 * v[i] + (1.0f - k->beta2) * g[i] * g[i];
        float update = (m[i] / k->bc1) / (sqrtf(v[i] / k->bc2) + k->eps);
        if (decay[i]) update += k->weight_decay * p[i];
        p[i] -= k->lr * update;
    }
}

/* the sum in double: the definition the vector paths' float sums are held against */
static void linear_rows_ref(float *y, int ldy, const float *x, int nr, const float *w, int in, int o0, int o1) {
    for (int r = 0; r < nr; r++)
        for (int o = o0; o < o1; o++) {
            double t = 0;
            for (int k = 0; k < in; k++) t += (double)x[(size_t)r * in + k] * w[(size_t)o * in + k];
            y[(size_t)r * ldy + o] = (float)t;
        }
}

static void cache_dots_ref(float *out, size_t ldo, const float *q, size_t ldq, int R, const float *k, int n,
                           size_t stride, int hd) {
    for (int r = 0; r < R; r++)
        for (int s = 0; s < n; s++) {
            double t = 0;
            for (int d = 0; d < hd; d++) t += (double)q[r * ldq + d] * k[(size_t)s * stride + d];
            out[r * ldo + s] = (float)t;
        }
}

static void cache_axpy_ref(float *out, size_t ldo, const float *w, size_t ldw, int R, const float *v, int n,
                           size_t stride, int hd, int accumulate) {
    for (int r = 0; r < R; r++)
        for (int d = 0; d < hd; d++) {
            double t = accumulate ? out[r * ldo + d] : 0.0;
            for (int s = 0; s < n; s++) t += (double)w[r * ldw + s] * v[(size_t)s * stride + d];
            out[r * ldo + d] = (float)t;
        }
}

static const dt_kernels reference = {
    .isa = DT_ISA_PORTABLE, .exp = exp_ref, .rmsnorm_row = rmsnorm_row_ref,
    .residual_rmsnorm_row = residual_rmsnorm_row_ref, .rmsnorm_backward_row = rmsnorm_backward_row_ref,
    .rmsnorm_dw_row = rmsnorm_dw_row_ref, .swiglu_forward = swiglu_forward_ref,
    .swiglu_backward = swiglu_backward_ref, .rope_span = rope_span_ref, .adamw = adamw_ref, .sumsq = sumsq_ref,
    .stream_sum = stream_sum_ref,
    .linear_rows = linear_rows_ref, .linear_rows_most = LINEAR_ROWS_MAX,
    .cache_dots = cache_dots_ref, .cache_axpy = cache_axpy_ref,
    .attention_forward = NULL, .attention_backward = NULL,
};

const dt_kernels *kernels_reference(void) { return &reference; }
