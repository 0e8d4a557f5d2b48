/* qkernels_avx512.c — the quant.h kernels with AVX-512 (F, BW, VL) and VNNI; compiled with those
 * instruction sets and called only when the CPU has them (qkernels_for). */
#include <immintrin.h>

#include "quant/quant.h"

/* Lanes [0, n) of a 16-lane vector, n ≤ 16 (negative: none). */
static inline __mmask16 lanes16(int n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }
static inline __mmask64 lanes64(int n) { return n >= 64 ? ~(__mmask64)0 : (__mmask64)((1ull << n) - 1); }

/* 16 int8 → 16 floats; the masked one reads only the first n (n < 16) and makes the rest 0. */
static inline __m512 i8x16_ps(const int8_t *q) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))); }
static inline __m512 i8x16_ps_masked(const int8_t *q, int n) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(lanes16(n), q)));
}

/* The 32 weights of one Q4_0 block as two vectors of floats: elements 0–15, 16–31. */
static inline void q4_block_ps(const uint8_t *qb, __m512 *first, __m512 *second) {
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    const __m128i bytes = _mm_loadu_si128((const __m128i *)qb);
    *first = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(bytes, low), eight)));
    *second = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight)));
}

/* Σ q·x over block b of a Q8_0 or Q4_0 row (16 lanes of float), n ≤ 32 of its elements valid.
 * A short Q4_0 block's bytes are all stored (padded with q = 0), so there only x is masked. */
static inline __attribute__((always_inline)) __m512 block_dot(qformat fmt, const void *row, int b, const float *x,
                                                              int n) {
    const float *xb = x + b * QK;
    const __m512 x0 = n >= QK ? _mm512_loadu_ps(xb) : _mm512_maskz_loadu_ps(lanes16(n), xb);
    const __m512 x1 = n >= QK ? _mm512_loadu_ps(xb + 16) : _mm512_maskz_loadu_ps(lanes16(n - 16), xb + 16);
    __m512 w0, w1;
    if (fmt == QFMT_Q4_0) {
        q4_block_ps((const uint8_t *)row + (size_t)b * (QK / 2), &w0, &w1);
    } else {
        const int8_t *q = (const int8_t *)row + (size_t)b * QK;
        w0 = n >= QK ? i8x16_ps(q) : i8x16_ps_masked(q, n);
        w1 = n >= QK ? i8x16_ps(q + 16) : i8x16_ps_masked(q + 16, n - 16);
    }
    return _mm512_fmadd_ps(w1, x1, _mm512_mul_ps(w0, x0));
}

/* One row's dot product with x, its blocks summed into 4 accumulators in turn: with one
 * accumulator every block waited for the previous block's multiply-add. The row is read front to
 * back, one stream, which the hardware prefetcher follows best (4 rows interleaved, sharing the
 * loads of x, were slower). Per block: its 32 products in float, then one multiply-add by the
 * block's scale d[b]. */
static inline __attribute__((always_inline)) float block_row(qformat fmt, const void *row, const float *d,
                                                             const float *x, int in, int nb) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    const int full = in / QK;
    int b = 0;
    for (; b + 4 <= full; b += 4)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) acc[u] = _mm512_fmadd_ps(block_dot(fmt, row, b + u, x, QK), _mm512_set1_ps(d[b + u]), acc[u]);
    for (; b < nb; b++) /* the last full blocks, and a short one */
        acc[0] = _mm512_fmadd_ps(block_dot(fmt, row, b, x, in - b * QK), _mm512_set1_ps(d[b]), acc[0]);
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

static void q8_0_matvec_avx512(float *y, const int8_t *q, const float *scales, const float *x, int out, int in) {
    const int nb = q_blocks(in);
#pragma omp parallel for schedule(static) if ((size_t)out * in > 262144)
    for (int o = 0; o < out; o++) y[o] = block_row(QFMT_Q8_0, q + (size_t)o * in, scales + (size_t)o * nb, x, in, nb);
}

static void q4_0_matvec_avx512(float *y, const uint8_t *q, const float *scales, const float *x, int out, int in) {
    const int nb = q_blocks(in);
    const size_t row_bytes = (size_t)nb * (QK / 2);
#pragma omp parallel for schedule(static) if ((size_t)out * in > 262144)
    for (int o = 0; o < out; o++) y[o] = block_row(QFMT_Q4_0, q + (size_t)o * row_bytes, scales + (size_t)o * nb, x, in, nb);
}

/* An MR × NR tile of y from MR rows of xq and NR rows of wq. vpdpbusd multiplies unsigned by
 * signed bytes, so x is offset by 128 (x ^ 0x80) and 128·Σ_j w[o, j] taken off afterwards; masked
 * tail lanes of w are 0, so the offset tail lanes of x add nothing. */
static inline __attribute__((always_inline)) void vnni_tile(float *y, const int8_t *xq, const float *xs,
                                                            const int8_t *wq, const float *ws, const int32_t *rs,
                                                            int n0, int o0, int MR, int NR, int in, int out) {
    __m512i acc[4][4];
    const __m512i bias = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) acc[i][r] = _mm512_setzero_si512();
    for (int k = 0; k < in; k += 64) {
        const __mmask64 m = lanes64(in - k);
        __m512i wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) wv[r] = _mm512_maskz_loadu_epi8(m, wq + (size_t)(o0 + r) * in + k);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            const __m512i xv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, xq + (size_t)(n0 + i) * in + k), bias);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) acc[i][r] = _mm512_dpbusd_epi32(acc[i][r], xv, wv[r]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const int32_t dot = _mm512_reduce_add_epi32(acc[i][r]) - 128 * rs[o0 + r];
            y[(size_t)(n0 + i) * out + o0 + r] = (float)dot * xs[n0 + i] * ws[o0 + r];
        }
}

/* Σ_j (x_j + 128)·w_j over one row for decoding (one row of x): the row is read front to back
 * into 4 accumulators in turn, as block_row (the 1 × 4 tile read 4 rows interleaved and ran at half
 * the speed of the q8_0 matrix-vector product). Masked lanes of w are 0, as in vnni_tile. */
static inline int32_t vnni_row(const int8_t *w, const int8_t *x, int in) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    int k = 0;
    for (; k + 256 <= in; k += 256)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[u] = _mm512_dpbusd_epi32(acc[u], _mm512_xor_si512(_mm512_loadu_si512(x + k + 64 * u), bias),
                                         _mm512_loadu_si512(w + k + 64 * u));
    for (; k < in; k += 64) {
        const __mmask64 m = lanes64(in - k);
        acc[0] = _mm512_dpbusd_epi32(acc[0], _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, x + k), bias),
                                     _mm512_maskz_loadu_epi8(m, w + k));
    }
    return _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), _mm512_add_epi32(acc[2], acc[3])));
}

static void i8_gemm_avx512(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws,
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
            for (; n0 + 4 <= N; n0 += 4) vnni_tile(y, xq, xs, wq, ws, rs, n0, o0, 4, 4, in, out);
            for (; n0 < N; n0++) vnni_tile(y, xq, xs, wq, ws, rs, n0, o0, 1, 4, in, out);
        } else {
            for (int o = o0; o < out; o++)
                for (int n0 = 0; n0 < N; n0++) vnni_tile(y, xq, xs, wq, ws, rs, n0, o, 1, 1, in, out);
        }
    }
}

/* AVX-512 CPUs without VNNI (Skylake-X) run the AVX2 integer product; the float kernels above
 * need only F / BW / VL. */
static void i8_gemm_avx512_or_avx2(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq,
                                   const float *ws, const int32_t *rs, int out, int in) {
    if (dt_cpu()->avx512vnni) i8_gemm_avx512(y, xq, xs, N, wq, ws, rs, out, in);
    else qkernels_avx2.i8_gemm(y, xq, xs, N, wq, ws, rs, out, in);
}

/* Full blocks 16 lanes at a time, a short last block through the format's definition. */
static void q8_0_dequantize_avx512(float *w, const int8_t *q, const float *scales, int rows, int in) {
    const int nb = q_blocks(in), full = in / QK;
    for (int r = 0; r < rows; r++) {
        const int8_t *qr = q + (size_t)r * in;
        const float *d = scales + (size_t)r * nb;
        float *wr = w + (size_t)r * in;
        for (int b = 0; b < full; b++) {
            const __m512 s = _mm512_set1_ps(d[b]);
            _mm512_storeu_ps(wr + b * QK, _mm512_mul_ps(s, i8x16_ps(qr + b * QK)));
            _mm512_storeu_ps(wr + b * QK + 16, _mm512_mul_ps(s, i8x16_ps(qr + b * QK + 16)));
        }
        for (int j = full * QK; j < in; j++) wr[j] = d[j / QK] * (float)qr[j];
    }
}

static void q4_0_dequantize_avx512(float *w, const uint8_t *q, const float *scales, int rows, int in) {
    const int nb = q_blocks(in), full = in / QK;
    for (int r = 0; r < rows; r++) {
        const uint8_t *qr = q + (size_t)r * nb * (QK / 2);
        const float *d = scales + (size_t)r * nb;
        float *wr = w + (size_t)r * in;
        for (int b = 0; b < full; b++) {
            const __m512 s = _mm512_set1_ps(d[b]);
            __m512 first, second;
            q4_block_ps(qr + (size_t)b * (QK / 2), &first, &second);
            _mm512_storeu_ps(wr + b * QK, _mm512_mul_ps(s, first));
            _mm512_storeu_ps(wr + b * QK + 16, _mm512_mul_ps(s, second));
        }
        if (full < nb) { /* the short last block */
            float tail[QK];
            q4_0_dequantize_row(tail, qr + (size_t)full * (QK / 2), d + full, in - full * QK);
            for (int j = full * QK; j < in; j++) wr[j] = tail[j - full * QK];
        }
    }
}

const qkernels qkernels_avx512 = {q8_0_matvec_avx512, q4_0_matvec_avx512, i8_gemm_avx512_or_avx2,
                                  q8_0_dequantize_avx512, q4_0_dequantize_avx512};
