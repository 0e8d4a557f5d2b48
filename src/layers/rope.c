/* rope.c — rotary position embedding, Hugging Face Llama "rotate_half" (non-interleaved) layout:
 * channel i pairs with channel i + hd/2, both rotated by the angle pos·inv_freq[i].
 *
 * The angles depend on the position only, so each position's cos / sin are computed once (in
 * chunks of ROPE_CHUNK channels, on the stack) and applied to every sequence and head at that
 * position by the path's kernel (kernels.h); training takes them from tables made once per run
 * state (rope_tables, rope_apply_table). */
#include <math.h>
#include <stddef.h>

#include "layers/kernels.h"
#include "layers/layers.h"

#define ROPE_CHUNK 64

/* the angle of channel i at position pos: position × inv_freq in float32, as HF's outer product
 * rounds it */
static inline float rope_angle(int pos, const float *inv_freq, int i) { return (float)pos * inv_freq[i]; }

/* row t of every batch row of rope_apply */
static void rope_apply_row(const dt_kernels *k, float *x, int B, int T, int nh, int hd, int pos0, const float *inv_freq,
                           int sign, int t) {
    const int half = hd / 2;
    for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
        const int n = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
        float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
        for (int i = 0; i < n; i++) {
            const float angle = rope_angle(pos0 + t, inv_freq, i0 + i);
            cs[i] = cosf(angle);
            /* the inverse rotation is the rotation by −angle: same cos, negated sin */
            sn[i] = sign < 0 ? -sinf(angle) : sinf(angle);
        }
        for (int b = 0; b < B; b++) k->rope_span(x + ((size_t)b * T + t) * (size_t)nh * hd, nh, hd, i0, n, cs, sn);
    }
}

/* in place on x[B, T, nh, hd]; row t has position pos0 + t; inv_freq [hd/2] (dt_rope_inv_freq);
 * sign = −1 rotates back (backward) */
void rope_apply(float *x, int B, int T, int nh, int hd, int pos0, const float *inv_freq, int sign) {
    const dt_kernels *k = kernels_active();
    if ((size_t)B * T * nh * hd < LAYER_PARALLEL_MIN) {
        for (int t = 0; t < T; t++) rope_apply_row(k, x, B, T, nh, hd, pos0, inv_freq, sign, t);
        return;
    }
#pragma omp parallel for
    for (int t = 0; t < T; t++) rope_apply_row(k, x, B, T, nh, hd, pos0, inv_freq, sign, t);
}

void rope_tables(float *cos, float *sin, int T, int hd, const float *inv_freq) {
    const int half = hd / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const float angle = rope_angle(t, inv_freq, i);
            cos[(size_t)t * half + i] = cosf(angle);
            sin[(size_t)t * half + i] = sinf(angle);
        }
}

void rope_apply_table(float *x, int B, int T, int nh, int hd, const float *cos, const float *sin, int sign) {
    const dt_kernels *k = kernels_active();
    const int half = hd / 2;
#pragma omp parallel for if ((size_t)B * T * nh * hd >= LAYER_PARALLEL_MIN)
    for (int t = 0; t < T; t++) {
        const float *cs = cos + (size_t)t * half, *sn = sin + (size_t)t * half;
        float neg[ROPE_CHUNK];
        for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
            const int n = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
            const float *s = sn + i0;
            if (sign < 0) {
                for (int i = 0; i < n; i++) neg[i] = -s[i];
                s = neg;
            }
            for (int b = 0; b < B; b++)
                k->rope_span(x + ((size_t)b * T + t) * (size_t)nh * hd, nh, hd, i0, n, cs + i0, s);
        }
    }
}
