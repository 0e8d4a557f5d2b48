/* swiglu.c — the gated MLP nonlinearity: h = silu(gate) · up, silu(g) = g·sigmoid(g). Each
 * thread runs the path's kernel (kernels.h) on one contiguous span. */
#include <omp.h>
#include <stddef.h>

#include "layers/kernels.h"
#include "layers/layers.h"

/* h[N, F] = silu(gate) · up */
void swiglu_forward(float *h, const float *gate, const float *up, int N, int F) {
    const dt_kernels *k = kernels_active();
    const size_t n = (size_t)N * F;
    if (n < LAYER_PARALLEL_MIN) {
        k->swiglu_forward(h, gate, up, n);
        return;
    }
#pragma omp parallel
    {
        size_t lo, hi;
        kernels_span(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (hi > lo) k->swiglu_forward(h + lo, gate + lo, up + lo, hi - lo);
    }
}

/* dgate[N, F] = dh·up·silu'(g), dup[N, F] = dh·silu(g): the MLP's backward is their only writer,
 * so they are written, not accumulated, and need no zeroing */
void swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate, const float *up, int N, int F) {
    const dt_kernels *k = kernels_active();
    const size_t n = (size_t)N * F;
#pragma omp parallel if (n >= LAYER_PARALLEL_MIN)
    {
        size_t lo, hi;
        kernels_span(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (hi > lo)
            k->swiglu_backward(dgate ? dgate + lo : NULL, dup ? dup + lo : NULL, dh + lo, gate + lo, up + lo, hi - lo);
    }
}
