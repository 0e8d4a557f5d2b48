/* qkernels_avxvnni.c — the 16-row layout's product with AVX-VNNI (vpdpbusd on 256-bit vectors,
 * VEX-encoded: Intel since Alder Lake, AMD since Zen 5), for the AVX2 set of CPUs that have it
 * (qkernels_avx2_vnni), and its w8a8 product; compiled with AVX2, FMA, F16C and AVX-VNNI, called only
 * when the CPU has them.
 *
 * vpdpbusd multiplies 4 unsigned bytes by 4 signed ones and adds the four products into a 32-bit
 * lane, without saturating: the stored values go in as they are, Q8_0's q + 128 and Q4_0's
 * nibbles q + 8, against x's signed bytes, and c·Σx (c = 128 or 8, qact.sum) comes off after — one
 * instruction for 32 products where vpmaddubsw takes four (the sign trick, the widening, the add).
 * Each output's integer sum is the exact Σ q_w·q_x, so the float steps, and the bits, are those of
 * the plain AVX2 product and of qpack_dot_reference. */
#include <immintrin.h>

#include "quant/quant.h"

#define QPACKED_DOT qpacked_dot_avxvnni_impl
#include "quant/qpacked_avx2_body.h"

/* The stored bytes as they are; Q4_0's nibbles split into the low (elements 4k + i) and high
 * (16 + 4k + i) vectors. */
static inline __attribute__((always_inline)) void packed_weights(qformat fmt, __m256i *w, const uint8_t *v) {
    if (fmt == QFMT_Q8_0) {
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) w[k] = _mm256_load_si256((const __m256i *)(v + 64 * k));
        return;
    }
    q4_nibble_vectors(w, v);
}

/* Two chains of vpdpbusd (even and odd k), so that each waits on its latency half as often. */
static inline __attribute__((always_inline)) __m256i packed_block_sum(qformat fmt, const __m256i *w, const int8_t *q,
                                                                      int32_t xsum) {
    __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k += 2) {
        even = _mm256_dpbusd_avx_epi32(even, w[k], broadcast4(q + 4 * k));
        odd = _mm256_dpbusd_avx_epi32(odd, w[k + 1], broadcast4(q + 4 * k + 4));
    }
    return _mm256_add_epi32(_mm256_add_epi32(even, odd), _mm256_set1_epi32((fmt == QFMT_Q8_0 ? -128 : -8) * xsum));
}

void qpacked_dot_avxvnni(float *y, size_t ldy, qformat fmt, const void *packed, int g0, int groups, int out,
                         const qact *x, int N) {
    qpacked_dot_avxvnni_impl(y, ldy, fmt, packed, g0, groups, out, x, N);
}

/* ---------------------------------------------------------------- w8a8 (int8 × int8)
 *
 * As the AVX-512 VNNI product, in 256-bit vectors: x offset by 128 (x ^ 0x80) is the unsigned side
 * and 128·Σ_j w[o, j] (the layer's row sums) comes off after, exactly (qi8_avx2_body.h, shared with
 * the plain AVX2 set). Against the plain AVX2 product (Emerald Rapids, 2 threads, [2816, 1024]
 * layers): 128 rows 1.42× (35.6 → 25.1 ms for eight), one row 32–33 → 37–40 GB/s from the L3; the
 * same bits (exact integer sums). */
#define I8_GEMM i8_gemm_avxvnni_impl
#define I8_X_OFFSET 128
#include "quant/qi8_avx2_body.h"

static inline __attribute__((always_inline)) __m256i i8_pair(__m256i acc, __m256i xv, __m256i wv) {
    return _mm256_dpbusd_avx_epi32(acc, _mm256_xor_si256(xv, _mm256_set1_epi8((char)0x80)), wv);
}

void i8_gemm_avxvnni(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws,
                     const int32_t *rs, int out, int in) {
    i8_gemm_avxvnni_impl(y, xq, xs, N, wq, ws, rs, out, in);
}
