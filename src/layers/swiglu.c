/* swiglu.c — the gated MLP nonlinearity: h = silu(gate) · up, silu(g) = g·sigmoid(g). */
#include <math.h>
#include <stddef.h>

#include "layers/layers.h"

/* h[N, F] = silu(gate) · up */
void swiglu_forward(float *h, const float *gate, const float *up, int N, int F) {
    size_t n = (size_t)N * F;
#pragma omp parallel for if (n >= LAYER_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        /* g·sigmoid(g) written as g / (1 + e^−g), the form PyTorch's CPU kernel evaluates */
        h[i] = (g / (1.0f + expf(-g))) * up[i];
    }
}

/* dgate[N, F] += dh·up·silu'(g), dup[N, F] += dh·silu(g); silu'(g) = s·(1 + g·(1 − s)), s = sigmoid(g) */
void swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate, const float *up, int N, int F) {
    size_t n = (size_t)N * F;
#pragma omp parallel for if (n >= LAYER_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float s = 1.0f / (1.0f + expf(-g));
        if (dgate) dgate[i] += dh[i] * up[i] * s * (1.0f + g * (1.0f - s));
        if (dup) dup[i] += dh[i] * g * s;
    }
}
