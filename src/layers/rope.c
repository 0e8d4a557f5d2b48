/* rope.c — rotary position embedding, Hugging Face Llama "rotate_half" (non-interleaved) layout:
 * channel i pairs with channel i + hd/2, both rotated by the angle pos·inv_freq[i]. */
#include <math.h>
#include <stddef.h>

#include "layers/layers.h"

/* in place on x[B, T, nh, hd]; row t has position pos0 + t; sign = −1 rotates back (backward) */
void rope_apply(float *x, int B, int T, int nh, int hd, int pos0, float theta, int sign) {
    int half = hd / 2;
#pragma omp parallel for collapse(2) if ((size_t)B * T * nh * hd >= LAYER_PARALLEL_MIN)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *row = x + ((size_t)b * T + t) * (size_t)nh * hd;
            float pos = (float)(pos0 + t);
            for (int i = 0; i < half; i++) {
                /* every step in float32, in the order HF takes: (2i/hd) as float, theta^that,
                 * its reciprocal, then position × inv_freq — so the angles round the same way */
                float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
                float angle = pos * inv_freq;
                float c = cosf(angle);
                /* the inverse rotation is the rotation by −angle: same cos, negated sin */
                float s = sign < 0 ? -sinf(angle) : sinf(angle);
                for (int h = 0; h < nh; h++) {
                    float *p = row + (size_t)h * hd;
                    float x0 = p[i], x1 = p[i + half];
                    /* x·cos + rotate_half(x)·sin, with rotate_half(x) = [−x₂, x₁] */
                    p[i] = x0 * c - x1 * s;
                    p[i + half] = x1 * c + x0 * s;
                }
            }
        }
    }
}
