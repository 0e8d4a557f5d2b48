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

float grad_norm(const float *g, size_t n) {
    double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; i++) sum += (double)g[i] * g[i];
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
