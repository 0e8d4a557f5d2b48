/* qkernels_avx2.c — the quant.h kernels with AVX2 and FMA; compiled with those instruction sets
 * and called only when the CPU has them (qkernels_for). */
#include <immintrin.h>

#include "quant/quant.h"

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* 8 int8 → 8 floats */
static inline __m256 load8_i8(const int8_t *q) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q)));
}

/* Σ q·x over one block of 32, as 8 float lanes. */
static inline __m256 q8_block(const int8_t *q, const float *x) {
    __m256 s = _mm256_mul_ps(load8_i8(q), _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(load8_i8(q + 8), _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(load8_i8(q + 16), _mm256_loadu_ps(x + 16), s);
    return _mm256_fmadd_ps(load8_i8(q + 24), _mm256_loadu_ps(x + 24), s);
}

/* The same for Q4_0: byte j of the block holds element j (low nibble) and j + 16 (high). */
static inline __m256 q4_block(const uint8_t *qb, const float *x) {
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    const __m128i bytes = _mm_loadu_si128((const __m128i *)qb);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, low), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight);
    __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), _mm256_loadu_ps(x + 16), s);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), _mm256_loadu_ps(x + 24), s);
}

/* Full blocks are summed into 4 accumulators in turn, so consecutive blocks' multiply-adds by
 * their scales do not wait for each other (one accumulator was bound by that latency); the row
 * is still read front to back, one stream for the prefetcher. The short last block, if any, in
 * plain C. */
static void q8_0_matvec_avx2(float *y, const int8_t *q, const float *scales, const float *x, int out, int in) {
    const int nb = q_blocks(in), full = in / QK;
#pragma omp parallel for schedule(static) if ((size_t)out * in > 262144)
    for (int o = 0; o < out; o++) {
        const int8_t *row = q + (size_t)o * in;
        const float *d = scales + (size_t)o * nb;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        int b = 0;
        for (; b + 4 <= full; b += 4)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                acc[u] = _mm256_fmadd_ps(q8_block(row + (b + u) * QK, x + (b + u) * QK), _mm256_set1_ps(d[b + u]), acc[u]);
        for (; b < full; b++) acc[0] = _mm256_fmadd_ps(q8_block(row + b * QK, x + b * QK), _mm256_set1_ps(d[b]), acc[0]);
        float total = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))), tail = 0;
        for (int j = full * QK; j < in; j++) tail += (float)row[j] * x[j];
        y[o] = total + (nb > full ? tail * d[full] : 0.0f);
    }
}

static void q4_0_matvec_avx2(float *y, const uint8_t *q, const float *scales, const float *x, int out, int in) {
    const int nb = q_blocks(in), full = in / QK;
#pragma omp parallel for schedule(static) if ((size_t)out * in > 262144)
    for (int o = 0; o < out; o++) {
        const uint8_t *row = q + (size_t)o * nb * (QK / 2);
        const float *d = scales + (size_t)o * nb;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        int b = 0;
        for (; b + 4 <= full; b += 4)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                acc[u] = _mm256_fmadd_ps(q4_block(row + (size_t)(b + u) * (QK / 2), x + (b + u) * QK),
                                         _mm256_set1_ps(d[b + u]), acc[u]);
        for (; b < full; b++)
            acc[0] = _mm256_fmadd_ps(q4_block(row + (size_t)b * (QK / 2), x + b * QK), _mm256_set1_ps(d[b]), acc[0]);
        float total = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))), tail = 0;
        const uint8_t *qb = row + (size_t)full * (QK / 2);
        for (int j = full * QK; j < in; j++) {
            const int r = j - full * QK;
            tail += (float)((r < QK / 2 ? qb[r] & 0x0F : qb[r - QK / 2] >> 4) - 8) * x[j];
        }
        y[o] = total + (nb > full ? tail * d[full] : 0.0f);
    }
}

/* An MR × NR tile. maddubs multiplies unsigned by signed bytes into saturating int16 pairs: with
 * |x| as the unsigned side and w carrying x's sign, a pair is at most 2·127·127 = 32258, which
 * never saturates (x and w are clamped to ±127). */
static inline __attribute__((always_inline)) void avx2_tile(float *y, const int8_t *xq, const float *xs,
                                                            const int8_t *wq, const float *ws, int n0, int o0,
                                                            int MR, int NR, int in, int out) {
    __m256i acc[2][4];
    const __m256i ones = _mm256_set1_epi16(1);
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
            const __m256i ax = _mm256_abs_epi8(xv);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                const __m256i p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv[r], xv));
                acc[i][r] = _mm256_add_epi32(acc[i][r], _mm256_madd_epi16(p16, ones));
            }
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const int8_t *x = xq + (size_t)(n0 + i) * in, *w = wq + (size_t)(o0 + r) * in;
            int32_t dot = hsum_epi32(acc[i][r]);
            for (int k = full; k < in; k++) dot += (int32_t)x[k] * w[k];
            y[(size_t)(n0 + i) * out + o0 + r] = (float)dot * xs[n0 + i] * ws[o0 + r];
        }
}

/* One row of x against one row of W for decoding: the row read front to back into 4 accumulators
 * in turn (as the float matrix-vector products; the 1 × 4 tile reads 4 rows interleaved). */
static inline int32_t avx2_row(const int8_t *w, const int8_t *x, int in) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    int k = 0;
    for (; k + 128 <= in; k += 128)
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(x + k + 32 * u));
            const __m256i wv = _mm256_loadu_si256((const __m256i *)(w + k + 32 * u));
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(wv, xv));
            acc[u] = _mm256_add_epi32(acc[u], _mm256_madd_epi16(p16, ones));
        }
    int32_t dot = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(acc[0], acc[1]), _mm256_add_epi32(acc[2], acc[3])));
    for (; k < in; k++) dot += (int32_t)x[k] * w[k];
    return dot;
}

static void i8_gemm_avx2(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws,
                         const int32_t *rs, int out, int in) {
    (void)rs;
    if (N == 1) {
#pragma omp parallel for schedule(static) if ((size_t)out * in > 262144)
        for (int o = 0; o < out; o++) y[o] = (float)avx2_row(wq + (size_t)o * in, xq, in) * xs[0] * ws[o];
        return;
    }
    const int oblocks = (out + 3) / 4;
#pragma omp parallel for schedule(static) if ((size_t)N * out * in > 262144)
    for (int ob = 0; ob < oblocks; ob++) {
        const int o0 = 4 * ob;
        if (o0 + 4 <= out) {
            int n0 = 0;
            for (; n0 + 2 <= N; n0 += 2) avx2_tile(y, xq, xs, wq, ws, n0, o0, 2, 4, in, out);
            for (; n0 < N; n0++) avx2_tile(y, xq, xs, wq, ws, n0, o0, 1, 4, in, out);
        } else {
            for (int o = o0; o < out; o++)
                for (int n0 = 0; n0 < N; n0++) avx2_tile(y, xq, xs, wq, ws, n0, o, 1, 1, in, out);
        }
    }
}

/* Full blocks 8 lanes at a time, a short last block through the format's definition. */
static void q8_0_dequantize_avx2(float *w, const int8_t *q, const float *scales, int rows, int in) {
    const int nb = q_blocks(in), full = in / QK;
    for (int r = 0; r < rows; r++) {
        const int8_t *qr = q + (size_t)r * in;
        const float *d = scales + (size_t)r * nb;
        float *wr = w + (size_t)r * in;
        for (int b = 0; b < full; b++) {
            const __m256 s = _mm256_set1_ps(d[b]);
            for (int j = 0; j < QK; j += 8) _mm256_storeu_ps(wr + b * QK + j, _mm256_mul_ps(s, load8_i8(qr + b * QK + j)));
        }
        for (int j = full * QK; j < in; j++) wr[j] = d[j / QK] * (float)qr[j];
    }
}

static void q4_0_dequantize_avx2(float *w, const uint8_t *q, const float *scales, int rows, int in) {
    const int nb = q_blocks(in), full = in / QK;
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (int r = 0; r < rows; r++) {
        const uint8_t *qr = q + (size_t)r * nb * (QK / 2);
        const float *d = scales + (size_t)r * nb;
        float *wr = w + (size_t)r * in;
        for (int b = 0; b < full; b++) {
            const __m256 s = _mm256_set1_ps(d[b]);
            const __m128i bytes = _mm_loadu_si128((const __m128i *)(qr + (size_t)b * (QK / 2)));
            const __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, low), eight);
            const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight);
            float *o = wr + b * QK;
            _mm256_storeu_ps(o, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
            _mm256_storeu_ps(o + 8, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
            _mm256_storeu_ps(o + 16, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
            _mm256_storeu_ps(o + 24, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
        }
        if (full < nb) { /* the short last block */
            float tail[QK];
            q4_0_dequantize_row(tail, qr + (size_t)full * (QK / 2), d + full, in - full * QK);
            for (int j = full * QK; j < in; j++) wr[j] = tail[j - full * QK];
        }
    }
}

const qkernels qkernels_avx2 = {q8_0_matvec_avx2, q4_0_matvec_avx2, i8_gemm_avx2, q8_0_dequantize_avx2,
                                q4_0_dequantize_avx2};
