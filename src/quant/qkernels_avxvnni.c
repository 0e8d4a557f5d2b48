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
    const __m256i low = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m256i z = _mm256_load_si256((const __m256i *)(v + 64 * k));
        w[k] = _mm256_and_si256(z, low);
        w[k + 4] = _mm256_and_si256(_mm256_srli_epi16(z, 4), low);
    }
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
 * and 128·Σ_j w[o, j] (the layer's row sums) comes off after, exactly. The tail past the last full
 * vector adds its (x + 128)·w in C so that the row sum covers the same terms. Against the plain
 * AVX2 product (Emerald Rapids, 2 threads, [2816, 1024] layers): 128 rows 1.42× (35.6 → 25.1 ms
 * for eight), one row 32–33 → 37–40 GB/s from the L3; the same bits (exact integer sums). */

static inline int32_t tail_dot(const int8_t *x, const int8_t *w, int k, int in) {
    int32_t dot = 0;
    for (; k < in; k++) dot += ((int32_t)x[k] + 128) * w[k];
    return dot;
}

/* One row of x against one row of W (decoding): the row read front to back into 4 accumulators. */
static inline int32_t vnni_row(const int8_t *w, const int8_t *x, int in) {
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    int k = 0;
    for (; k + 128 <= in; k += 128) {
        qweights_prefetch(w + k, 128);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[u] = _mm256_dpbusd_avx_epi32(acc[u], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + k + 32 * u)), bias),
                                             _mm256_loadu_si256((const __m256i *)(w + k + 32 * u)));
    }
    for (; k + 32 <= in; k += 32)
        acc[0] = _mm256_dpbusd_avx_epi32(acc[0], _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + k)), bias),
                                         _mm256_loadu_si256((const __m256i *)(w + k)));
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3]));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(h) + tail_dot(x, w, k, in);
}

/* An MR × NR tile of y from MR rows of xq and NR rows of wq (each vector of W meets MR rows of x). */
static inline __attribute__((always_inline)) void vnni_tile(float *y, const int8_t *xq, const float *xs,
                                                            const int8_t *wq, const float *ws, const int32_t *rs,
                                                            int n0, int o0, int MR, int NR, int in, int out) {
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    __m256i acc[2][4];
#pragma GCC unroll 2
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) acc[i][r] = _mm256_setzero_si256();
    const int full = in / 32 * 32;
    for (int k = 0; k < full; k += 32) {
        __m256i wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) wv[r] = _mm256_loadu_si256((const __m256i *)(wq + (size_t)(o0 + r) * in + k));
#pragma GCC unroll 2
        for (int i = 0; i < MR; i++) {
            const __m256i xv = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(xq + (size_t)(n0 + i) * in + k)), bias);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) acc[i][r] = _mm256_dpbusd_avx_epi32(acc[i][r], xv, wv[r]);
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const int8_t *x = xq + (size_t)(n0 + i) * in, *w = wq + (size_t)(o0 + r) * in;
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(acc[i][r]), _mm256_extracti128_si256(acc[i][r], 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
            const int32_t dot = _mm_cvtsi128_si32(h) + tail_dot(x, w, full, in) - 128 * rs[o0 + r];
            y[(size_t)(n0 + i) * out + o0 + r] = (float)dot * xs[n0 + i] * ws[o0 + r];
        }
}

void i8_gemm_avxvnni(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws,
                     const int32_t *rs, int out, int in) {
    if (N == 1) {
#pragma omp parallel for schedule(static) if ((size_t)out * in > 262144)
        for (int o = 0; o < out; o++)
            y[o] = (float)(vnni_row(wq + (size_t)o * in, xq, in) - 128 * rs[o]) * xs[0] * ws[o];
        return;
    }
    const int oblocks = (out + 3) / 4;
#pragma omp parallel for schedule(static) if ((size_t)N * out * in > 262144)
    for (int ob = 0; ob < oblocks; ob++) {
        const int o0 = 4 * ob;
        if (o0 + 4 <= out) {
            int n0 = 0;
            for (; n0 + 2 <= N; n0 += 2) vnni_tile(y, xq, xs, wq, ws, rs, n0, o0, 2, 4, in, out);
            for (; n0 < N; n0++) vnni_tile(y, xq, xs, wq, ws, rs, n0, o0, 1, 4, in, out);
        } else {
            for (int o = o0; o < out; o++)
                for (int n0 = 0; n0 < N; n0++) vnni_tile(y, xq, xs, wq, ws, rs, n0, o, 1, 1, in, out);
        }
    }
}
