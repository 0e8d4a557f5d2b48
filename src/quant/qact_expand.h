/* qact_expand.h — qact_expand_row for one full block on x86 (included by the AVX2 and AVX-512
 * kernel files, compiled with their flags; SSSE3 is all it needs): the 32 q of the block, in two
 * 16-byte registers, to its 8 lanes of de and off and its sum. The scalar loop it replaces was a
 * serial part of every batched decoding step (7 activations per layer, each row's blocks). */
#ifndef DT_QACT_EXPAND_H
#define DT_QACT_EXPAND_H

#include <immintrin.h>

#include "quant/quant.h"

static inline void qact_expand_block_x86(const qact *a, int n, int b, __m128i q_lo, __m128i q_hi, float d) {
    /* the sums of each 4 consecutive q: maddubs adds pairs (1 as the unsigned side, so no
     * saturation: |pair| ≤ 254), madd the pairs of pairs */
    const __m128i ones8 = _mm_set1_epi8(1), ones16 = _mm_set1_epi16(1);
    const __m128i s_lo = _mm_madd_epi16(_mm_maddubs_epi16(ones8, q_lo), ones16);
    const __m128i s_hi = _mm_madd_epi16(_mm_maddubs_epi16(ones8, q_hi), ones16);
    const size_t lanes = (size_t)n * qact_pairs(a->nb) * 16 + (size_t)b * 8;
    const __m128i zero = _mm_setzero_si128();
    _mm_storeu_si128((__m128i *)(a->off + lanes), _mm_sub_epi32(zero, _mm_slli_epi32(s_lo, 3)));
    _mm_storeu_si128((__m128i *)(a->off + lanes + 4), _mm_sub_epi32(zero, _mm_slli_epi32(s_hi, 3)));
    const __m128 vd = _mm_set1_ps(d);
    _mm_storeu_ps(a->de + lanes, vd);
    _mm_storeu_ps(a->de + lanes + 4, vd);
    __m128i s = _mm_add_epi32(s_lo, s_hi);
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    a->sum[(size_t)n * a->nb + b] = _mm_cvtsi128_si32(s);
}

#endif
