/* qi8_avx2_body.h — w8a8's product (int8 rows of x against int8 rows of W, one float scale each)
 * in 256-bit vectors, written once for the two AVX2 kernel sets (internal): qkernels_avx2.c
 * (vpmaddubsw with the sign trick) and qkernels_avxvnni.c (vpdpbusd with x offset by 128). The
 * includer defines, before including this file, I8_GEMM (the name of the i8_gemm it defines) and
 * I8_X_OFFSET (what its products add to each byte of x: 0, or 128 taken off afterwards with the
 * layer's row sums), and after it
 *   i8_pair(acc, xv, wv): acc + the products of 32 bytes of x and of W, in 8 int32 lanes, exact.
 * Every output is an exact integer sum scaled once, so both sets give the same bits. */
#include <immintrin.h>
#include <stdint.h>

#include "quant/quant.h"

static inline __attribute__((always_inline)) __m256i i8_pair(__m256i acc, __m256i xv, __m256i wv);

static inline int32_t i8_hsum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* the bytes past the last full vector, as the vectors count them (x offset by I8_X_OFFSET) */
static inline int32_t i8_tail(const int8_t *x, const int8_t *w, int k, int in) {
    int32_t dot = 0;
    for (; k < in; k++) dot += ((int32_t)x[k] + I8_X_OFFSET) * w[k];
    return dot;
}

/* An MR × NR tile of y from MR rows of xq and NR rows of wq: each vector of W meets MR rows of x,
 * each vector of x NR rows of W. */
static inline __attribute__((always_inline)) void i8_tile(float *y, const int8_t *xq, const float *xs,
                                                          const int8_t *wq, const float *ws, const int32_t *rs,
                                                          int n0, int o0, int MR, int NR, int in, int out) {
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
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + (size_t)(n0 + i) * in + k));
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) acc[i][r] = i8_pair(acc[i][r], xv, wv[r]);
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const int8_t *x = xq + (size_t)(n0 + i) * in, *w = wq + (size_t)(o0 + r) * in;
            const int32_t dot = i8_hsum(acc[i][r]) + i8_tail(x, w, full, in) - I8_X_OFFSET * rs[o0 + r];
            y[(size_t)(n0 + i) * out + o0 + r] = (float)dot * xs[n0 + i] * ws[o0 + r];
        }
}

/* One row of x against one row of W for decoding: the row read front to back into 4 accumulators
 * in turn (as the float matrix-vector products; the 1 × 4 tile reads 4 rows interleaved), its
 * weights asked for ahead. */
static inline int32_t i8_row(const int8_t *w, const int8_t *x, int in) {
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    int k = 0;
    for (; k + 128 <= in; k += 128) {
        qweights_prefetch(w + k, 128);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[u] = i8_pair(acc[u], _mm256_loadu_si256((const __m256i *)(x + k + 32 * u)),
                             _mm256_loadu_si256((const __m256i *)(w + k + 32 * u)));
    }
    return i8_hsum(_mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3]))) +
           i8_tail(x, w, k, in);
}

static void I8_GEMM(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws,
                    const int32_t *rs, int out, int in) {
    if (N == 1) {
#pragma omp parallel for schedule(static) if ((size_t)out * in > 262144)
        for (int o = 0; o < out; o++)
            y[o] = (float)(i8_row(wq + (size_t)o * in, xq, in) - I8_X_OFFSET * rs[o]) * xs[0] * ws[o];
        return;
    }
    const int oblocks = (out + 3) / 4;
#pragma omp parallel for schedule(static) if ((size_t)N * out * in > 262144)
    for (int ob = 0; ob < oblocks; ob++) {
        const int o0 = 4 * ob;
        if (o0 + 4 <= out) {
            int n0 = 0;
            for (; n0 + 2 <= N; n0 += 2) i8_tile(y, xq, xs, wq, ws, rs, n0, o0, 2, 4, in, out);
            for (; n0 < N; n0++) i8_tile(y, xq, xs, wq, ws, rs, n0, o0, 1, 4, in, out);
        } else {
            for (int o = o0; o < out; o++)
                for (int n0 = 0; n0 < N; n0++) i8_tile(y, xq, xs, wq, ws, rs, n0, o, 1, 1, in, out);
        }
    }
}
