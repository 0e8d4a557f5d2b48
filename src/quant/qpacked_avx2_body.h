/* qpacked_avx2_body.h — the product of the 16-row layout (qpack.c) in 256-bit vectors, written once
 * for the two AVX2 kernel sets (internal): qkernels_avx2.c (vpmaddubsw) and qkernels_avxvnni.c
 * (AVX-VNNI's vpdpbusd), which differ only in how a block's 8 weight vectors are prepared and summed
 * against x. The includer defines, after including this file:
 *   packed_weights(fmt, w, v):  the 8 weight vectors of one half (v: its first 32 bytes in the
 *                               block's values) as its block sum takes them;
 *   packed_block_sum(fmt, w, q, xsum): the exact integer sum Σ q_w·q_x of one block of one row of x
 *                               (q, with Σ q = xsum) against them, one int32 lane per output;
 * and QPACKED_DOT, the name of the qpacked_dot_fn this file defines.
 *
 * The layout read as two halves of 8 rows: bytes 0–31 of each 64-byte vector hold 4 consecutive
 * values of rows 0–7, bytes 32–63 those of rows 8–15; a block of one row of x against 8 outputs is
 * converted and scaled once for all 8 lanes. Each output's integer sum is exact, so its float
 * steps are those of qpack_dot_reference: bit for bit whatever the tile or the batch. */
#include <immintrin.h>
#include <stdint.h>

#include "quant/quant.h"

/* The 4 bytes at q in every 32-bit lane: one vbroadcastss from memory (a load, no shuffle), where
 * a 32-bit load into a general register and vpbroadcastd from it take three. */
static inline __m256i broadcast4(const int8_t *q) {
    __m256 v;
    __asm__("vbroadcastss %1, %0" : "=x"(v) : "m"(*(const int32_t(*)[1])q));
    return _mm256_castps_si256(v);
}

/* Q4_0's 4 stored vectors of a half split into its 8 nibble vectors: w[k] the low nibbles (elements
 * 4k + i), w[k + 4] the high ones (16 + 4k + i), both kernels' Q4_0 weights. */
static inline __attribute__((always_inline)) void q4_nibble_vectors(__m256i *w, const uint8_t *v) {
    const __m256i low = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m256i z = _mm256_load_si256((const __m256i *)(v + 64 * k));
        w[k] = _mm256_and_si256(z, low);
        w[k + 4] = _mm256_and_si256(_mm256_srli_epi16(z, 4), low);
    }
}

static inline __attribute__((always_inline)) void packed_weights(qformat fmt, __m256i *w, const uint8_t *v);
static inline __attribute__((always_inline)) __m256i packed_block_sum(qformat fmt, const __m256i *w, const int8_t *q,
                                                                      int32_t xsum);

/* Halves h0 … h1 − 1 of a group against rows n0 … n0 + NR − 1 of x, in one pass over the blocks;
 * `lanes` of the group's 16 outputs are written. */
static inline __attribute__((always_inline)) void packed_tile(qformat fmt, float *y, size_t ldy, const uint8_t *grp,
                                                              int h0, int h1, const qact *x, int n0, int NR,
                                                              int lanes) {
    const int nb = x->nb, vecs = fmt == QFMT_Q8_0 ? 8 : 4;
    const uint16_t *scales = (const uint16_t *)grp;
    const uint8_t *values = grp + qpack_scales_bytes(nb);
    __m256 acc[2][4];
#pragma GCC unroll 2
    for (int h = h0; h < h1; h++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) acc[h][r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *v = values + (size_t)b * vecs * 64;
        if (h0 == 0) qweights_prefetch(v, (size_t)vecs * 64);
#pragma GCC unroll 2
        for (int h = h0; h < h1; h++) {
            __m256i w[8];
            packed_weights(fmt, w, v + 32 * h);
            const __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(scales + (size_t)b * QPACK_ROWS + 8 * h)));
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                const size_t xb = (size_t)(n0 + r) * nb + b;
                const __m256i s = packed_block_sum(fmt, w, x->q + xb * QK, x->sum[xb]);
                acc[h][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(x->d[xb])), acc[h][r]);
            }
        }
    }
#pragma GCC unroll 2
    for (int h = h0; h < h1; h++) {
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes - 8 * h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) _mm256_maskstore_ps(y + (size_t)(n0 + r) * ldy + 8 * h, mask, acc[h][r]);
    }
}

/* One row of x takes both halves in one pass (each line of the group read once, in order); a tile
 * of 4 rows one half at a time (the weights of both halves and 8 accumulators would not fit the 16
 * registers), the second pass finding the group in the cache. */
static inline __attribute__((always_inline)) void packed_groups(qformat fmt, float *y, size_t ldy, const void *packed,
                                                                int g0, int groups, int out, const qact *x, int N) {
    const size_t group_bytes = qpack_group_bytes(fmt, x->nb * QK);
    for (int g = g0; g < g0 + groups; g++) {
        const uint8_t *grp = (const uint8_t *)packed + (size_t)g * group_bytes;
        float *yg = y + (size_t)g * QPACK_ROWS;
        const int lanes = out - g * QPACK_ROWS;
        int n0 = 0;
        for (; n0 + 4 <= N; n0 += 4) {
            packed_tile(fmt, yg, ldy, grp, 0, 1, x, n0, 4, lanes);
            if (lanes > 8) packed_tile(fmt, yg, ldy, grp, 1, 2, x, n0, 4, lanes);
        }
        for (; n0 < N; n0++) packed_tile(fmt, yg, ldy, grp, 0, 2, x, n0, 1, lanes);
    }
}

static void QPACKED_DOT(float *y, size_t ldy, qformat fmt, const void *packed, int g0, int groups, int out,
                        const qact *x, int N) {
    if (fmt == QFMT_Q8_0) packed_groups(QFMT_Q8_0, y, ldy, packed, g0, groups, out, x, N);
    else packed_groups(QFMT_Q4_0, y, ldy, packed, g0, groups, out, x, N);
}
