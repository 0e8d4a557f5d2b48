/* optim.c — AdamW over the whole flat parameter buffer, the learning-rate schedule and
 * gradient-norm clipping. */
#include <math.h>
#include <omp.h>
#include <stddef.h>

#include "layers/kernels.h"
#include "train/optim.h"

float lr_schedule(int step, int steps, int warmup, float lr, float min_lr_ratio) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    if (steps <= warmup) return lr;
    double progress = (double)(step - warmup) / (double)(steps - warmup);
    if (progress > 1) progress = 1;
    double min_lr = (double)lr * min_lr_ratio;
    return (float)(min_lr + 0.5 * (1.0 + cos(M_PI * progress)) * ((double)lr - min_lr));
}

/* Each thread sums the squares of its span with the path's kernel; the partials are added in
 * thread order (the same bits for a given thread count). */
float grad_norm(const float *g, size_t n) {
    const dt_kernels *kern = kernels_active();
    const int nt = omp_get_max_threads();
    double part[nt];
#pragma omp parallel num_threads(nt)
    {
        const int id = omp_get_thread_num(), team = omp_get_num_threads();
        size_t lo, hi;
        kernels_span(n, id, team, &lo, &hi);
        part[id] = hi > lo ? kern->sumsq(g + lo, hi - lo) : 0.0;
        if (id == 0)
            for (int t = team; t < nt; t++) part[t] = 0.0; /* a smaller team than asked for */
    }
    double sum = 0.0;
    for (int t = 0; t < nt; t++) sum += part[t];
    return (float)sqrt(sum);
}

void grad_scale(float *g, size_t n, float s) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) g[i] *= s;
}

void adamw_step(float *p, const float *g, float *m, float *v, const unsigned char *decay, size_t n, int t,
                const adamw_hparams *h, float lr) {
    const adamw_coeffs k = {.beta1 = h->beta1, .beta2 = h->beta2, .eps = h->eps, .weight_decay = h->weight_decay,
                            .bc1 = 1.0f - powf(h->beta1, (float)t), .bc2 = 1.0f - powf(h->beta2, (float)t), .lr = lr};
    const dt_kernels *kern = kernels_active();
#pragma omp parallel
    {
        size_t lo, hi;
        kernels_span(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (hi > lo) kern->adamw(p + lo, g + lo, m + lo, v + lo, decay + lo, hi - lo, &k);
    }
}
