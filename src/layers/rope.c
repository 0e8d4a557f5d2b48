/* rope.c — rotary position embedding, Hugging Face Llama "rotate_half" (non-interleaved) layout:
 * channel i pairs with channel i + hd/2, both rotated by the angle pos·inv_freq[i].
 *
 * The angles depend on the position only, so each position's cos / sin are computed once (in
 * chunks of ROPE_CHUNK channels, on the stack) and applied to every sequence and head at that
 * position by the path's kernel (kernels.h); training takes them from tables made once per run
 * state (rope_tables, rope_apply_table). */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "layers/kernels.h"
#include "layers/layers.h"

#define ROPE_CHUNK 64

/* the angle of channel i at position pos: position × inv_freq in float32, as HF's outer product
 * rounds it */
static inline float rope_angle(int pos, const float *inv_freq, int i) { return (float)pos * inv_freq[i]; }

/* in place on x[B, T, nh, hd]; row t has position pos0 + t; inv_freq [hd/2] (dt_rope_inv_freq);
 * sign = −1 rotates back (backward) */
void rope_apply(float *x, int B, int T, int nh, int hd, int pos0, const float *inv_freq, int sign) {
    const dt_kernels *k = kernels_active();
    const int half = hd / 2;
#pragma omp parallel for if ((size_t)B * T * nh * hd >= LAYER_PARALLEL_MIN)
    for (int t = 0; t < T; t++) {
        for (int i0 = 0; i0 < half; i0 += ROPE_CHUNK) {
            const int n = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
            float cs[ROPE_CHUNK], sn[ROPE_CHUNK];
            for (int i = 0; i < n; i++) {
                const float angle = rope_angle(pos0 + t, inv_freq, i0 + i);
                cs[i] = cosf(angle);
                /* the inverse rotation is the rotation by −angle: same cos, negated sin */
                sn[i] = sign < 0 ? -sinf(angle) : sinf(angle);
            }
            for (int b = 0; b < B; b++)
                k->rope_span(x + ((size_t)b * T + t) * (size_t)nh * hd, nh, hd, i0, n, cs, sn);
        }
    }
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

/* Row n of qkv is [q_n | k_n | v_n]; RoPE (cos ≠ NULL) rotates the q and k parts of the row in
 * place, by +angle after they are copied out (forward) or by −angle after they are copied in
 * (backward), while the row is in L1. */
void rope_qkv_table(float *qkv, float *q, float *k, float *v, int B, int T, int H, int KV, int hd, const float *cos,
                    const float *sin, int to_parts) {
    const dt_kernels *kern = kernels_active();
    const int half = hd / 2;
    const size_t qdim = (size_t)H * hd, kvdim = (size_t)KV * hd, width = qdim + 2 * kvdim;
#pragma omp parallel for if ((size_t)B * T * width >= LAYER_PARALLEL_MIN)
    for (int t = 0; t < T; t++) {
        float neg[ROPE_CHUNK];
        for (int b = 0; b < B; b++) {
            const size_t n = (size_t)b * T + t;
            float *row = qkv + n * width, *qn = q + n * qdim, *kn = k + n * kvdim, *vn = v + n * kvdim;
            if (to_parts) {
                memcpy(qn, row, qdim * sizeof(float));
                memcpy(kn, row + qdim, kvdim * sizeof(float));
                memcpy(vn, row + qdim + kvdim, kvdim * sizeof(float));
            }
            /* rotate the separate q, k rows (forward) or the fused row's parts (backward) */
            float *rq = to_parts ? qn : row, *rk = to_parts ? kn : row + qdim;
            if (!to_parts) {
                memcpy(rq, qn, qdim * sizeof(float));
                memcpy(rk, kn, kvdim * sizeof(float));
                memcpy(row + qdim + kvdim, vn, kvdim * sizeof(float));
            }
            for (int i0 = 0; cos && i0 < half; i0 += ROPE_CHUNK) {
                const int len = half - i0 < ROPE_CHUNK ? half - i0 : ROPE_CHUNK;
                const float *cs = cos + (size_t)t * half + i0, *sn = sin + (size_t)t * half + i0;
                if (!to_parts) {
                    for (int i = 0; i < len; i++) neg[i] = -sn[i];
                    sn = neg;
                }
                kern->rope_span(rq, H, hd, i0, len, cs, sn);
                kern->rope_span(rk, KV, hd, i0, len, cs, sn);
            }
        }
    }
}
