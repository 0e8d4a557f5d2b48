/* rope.c — rotary position embedding, Hugging Face Llama "rotate_half" (non-interleaved) layout:
 * channel i pairs with channel i + hd/2, both rotated by the angle pos·inv_freq[i].
 *
 * The angles depend on the position only, so each position's cos / sin are computed once (in
 * chunks of ROPE_CHUNK channels, on the stack) and applied to every sequence and head at that
 * position by the path's kernel (kernels.h). */
#include <math.h>
#include <stddef.h>

#include "layers/kernels.h"
#include "layers/layers.h"

#define ROPE_CHUNK 64

/* in place on x[B, T, nh, hd]; row t has position pos0 + t; sign = −1 rotates back (backward) */
void rope_apply(float *x, int B, int T, int nh, int hd, int pos0, float theta, int sign) {
    const dt_kernels *k = kernels_active();
    const int half = hd / 2;
#pragma omp parallel for if ((size_t)B * T * nh * hd >= LAYER_PARALLEL_MIN)
    for (int t = 0; t < T; t++) {
        const float pos = (float)(pos0 + t);
        for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
            const int n = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
            float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
            for (int i = 0; i < n; i++) {
                /* every step in float32, in the order HF takes: (2i/hd) as float, theta^that,
                 * its reciprocal, then position × inv_freq — so the angles round the same way */
                float inv_freq = 1.0f / powf(theta, (float)(2 * (i0 + i)) / (float)hd);
                float angle = pos * inv_freq;
                cs[i] = cosf(angle);
                /* the inverse rotation is the rotation by −angle: same cos, negated sin */
                sn[i] = sign < 0 ? -sinf(angle) : sinf(angle);
            }
            for (int b = 0; b < B; b++)
                k->rope_span(x + ((size_t)b * T + t) * (size_t)nh * hd, nh, hd, i0, n, cs, sn);
        }
    }
}
