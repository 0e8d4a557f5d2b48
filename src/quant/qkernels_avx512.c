/* qkernels_avx512.c — the quant.h kernels with AVX-512 (F, BW, VL), in two sets: with VNNI and
 * without (only the integer step differs); compiled with those instruction sets and called only
 * when the CPU has them (qkernels_for). */
#include <immintrin.h>

#include "quant/qact_expand.h"
#include "quant/quant.h"

/* Lanes [0, n) of a 16-lane vector, n ≤ 16 (none when n ≤ 0). */
static inline __mmask16 lanes16(int n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }
/* Bytes [0, n) of a 64-byte vector, n ≤ 64 (negative: none). */
static inline __mmask64 lanes64(int n) { return n >= 64 ? ~(__mmask64)0 : (__mmask64)((1ull << n) - 1); }

/* 16 int8 → 16 floats */
static inline __m512 i8x16_ps(const int8_t *q) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))); }

/* ---------------------------------------------------------------- Q8_0 / Q4_0 × 8-bit activations
 *
 * Two blocks per 512-bit vector: lanes 0–7 sum block b's products, lanes 8–15 block b + 1's. One W
 * row against up to 8 rows of x at a time (the weights loaded once for all), two float accumulators
 * per output (even and odd pairs); per pair of blocks: the integer dot products into 16 int32
 * lanes, converted, multiplied by [d_w·d_x of b ×8 | of b + 1 ×8] and added. An odd last block
 * pairs with zeros.
 * Every output goes through the same steps in the same order whatever the tile, so a row's
 * result does not depend on its batch.
 *
 * The integer step is vpdpbusd (VNNI) or vpmaddubsw + vpmaddwd (AVX-512 BW), both unsigned ×
 * signed bytes. Q8_0: |w| is the unsigned side and x takes w's sign (a vpmaddubsw pair is then at
 * most 2·127·127 = 32258: no saturation). Q4_0: the stored nibbles u = q + 8 ∈ [0, 15] are the
 * unsigned side as they are (a pair at most 2·15·127), and x's offset lanes (qact.off, −8 × each
 * lane's Σx) start the sum: Σ u·x − 8·Σ x = Σ q·x, exactly, in integers. */

/* [v0 ×8 | v1 ×8] from the first two lanes of v */
static inline __m512 pair_lanes(__m128 v) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/* The two blocks' half scales as floats in lanes 0 and 1 (the second 0 when there is no second). */
static inline __m128 half_pair(uint16_t d0, uint16_t d1) { return _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)d1 << 16 | d0))); }

/* Blocks b and b + 1 of a W row as 64 bytes in element order (the second half 0 when two = 0):
 * Q8_0 signed, Q4_0 the stored nibbles u = q + 8, [b low, b high | b+1 low, b+1 high]. */
static inline __m512i q8_pair(const block_q8_0 *w, int b, int two) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)w[b].qs);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), two ? _mm256_loadu_si256((const __m256i *)w[b + 1].qs)
                                                                : _mm256_setzero_si256(), 1);
}

static inline __m512i q4_pair(const block_q4_0 *w, int b, int two) {
    const __m128i first = _mm_loadu_si128((const __m128i *)w[b].qs);
    const __m128i second = two ? _mm_loadu_si128((const __m128i *)w[b + 1].qs) : _mm_set1_epi8(0x08);
    const __m256i both = _mm256_set_m128i(second, first), low = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(both, low), hi = _mm256_and_si256(_mm256_srli_epi16(both, 4), low);
    /* [lo first, lo second, hi first, hi second] → [lo first, hi first, lo second, hi second] */
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

/* Blocks b and b + 1 of x's row as 64 bytes (the second half 0 when two = 0). */
static inline __m512i x_pair(const int8_t *q, int two) {
    return two ? _mm512_loadu_si512(q) : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)q));
}

static inline __attribute__((always_inline)) __m512i dot_bytes(int vnni, __m512i u, __m512i s) {
    if (vnni) return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
}

/* A tile is one row of W × NR rows of x (8, 4 or 1), the weights' unpacking shared by the tile's
 * rows of x. Each output has two accumulators, for the even and the odd block pairs, added at the
 * end: with one, a lone row of x (decoding) waited on its multiply-add's latency every pair. (Four
 * rows of W against it at a time did the same in the cache, but decoding from memory ran at 0.64×
 * the speed: the row read front to back is what the hardware prefetcher follows best.) The
 * weights are asked for QWEIGHTS_AHEAD bytes ahead as well: Q8_0 decoding from the L3 (one [2816,
 * 1024] layer after another, Emerald Rapids, 2 threads) 18 → 41–46 GB/s. */
#define TILE_ROWS 8

static inline __attribute__((always_inline)) void pair_step(int vnni, qformat fmt, __m512 *acc, const void *w,
                                                            const qact *x, int n0, int NR, int b) {
    const int nb = x->nb, two = b + 1 < nb;
    const size_t pairs = qact_pairs(nb);
    const block_q8_0 *w8 = w;
    const block_q4_0 *w4 = w;
    const __m512 dw = pair_lanes(fmt == QFMT_Q8_0 ? half_pair(w8[b].d, two ? w8[b + 1].d : 0)
                                                  : half_pair(w4[b].d, two ? w4[b + 1].d : 0));
    if (fmt == QFMT_Q4_0) { /* unsigned nibbles × x, plus x's offset lanes */
        const __m512i u = q4_pair(w4, b, two);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const size_t xb = (size_t)(n0 + r) * nb + b, lanes = ((size_t)(n0 + r) * pairs + b / 2) * 16;
            const __m512i xv = x_pair(x->q + xb * QK, two), off = _mm512_loadu_si512(x->off + lanes);
            const __m512i dot = vnni ? _mm512_dpbusd_epi32(off, u, xv) : _mm512_add_epi32(dot_bytes(0, u, xv), off);
            const __m512 scale = _mm512_mul_ps(dw, _mm512_loadu_ps(x->de + lanes));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);
        }
        return;
    }
    const __m512i wv = q8_pair(w8, b, two), abs_w = _mm512_abs_epi8(wv);
    const __mmask64 negative = _mm512_movepi8_mask(wv);
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        const size_t xb = (size_t)(n0 + r) * nb + b;
        const __m512i xv = x_pair(x->q + xb * QK, two);
        const __m512i signed_x = _mm512_mask_sub_epi8(xv, negative, _mm512_setzero_si512(), xv);
        /* x's scales of the pair, already in the pair's lanes (qact.de) */
        const __m512 scale = _mm512_mul_ps(dw, _mm512_loadu_ps(x->de + ((size_t)(n0 + r) * pairs + b / 2) * 16));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot_bytes(vnni, abs_w, signed_x)), scale, acc[r]);
    }
}

static inline __attribute__((always_inline)) void dot_tile(int vnni, qformat fmt, float *y, size_t ldy, const void *w,
                                                           const qact *x, int n0, int NR) {
    const int nb = x->nb;
    __m512 even[TILE_ROWS], odd[TILE_ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) even[r] = odd[r] = _mm512_setzero_ps();
    const size_t bsz = qblock_bytes(fmt);
    int b = 0;
    for (; b + 2 < nb; b += 4) {
        qweights_prefetch((const char *)w + b * bsz, 4 * bsz);
        pair_step(vnni, fmt, even, w, x, n0, NR, b);
        pair_step(vnni, fmt, odd, w, x, n0, NR, b + 2);
    }
    if (b < nb) pair_step(vnni, fmt, even, w, x, n0, NR, b);
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) y[(size_t)(n0 + r) * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(even[r], odd[r]));
}

/* Tiles of 8 (then 4, then 1) rows of x, each through every row of W (which stays in the cache: a
 * task has few). */
static inline __attribute__((always_inline)) void dot_rows(int vnni, qformat fmt, float *y, size_t ldy, const void *w,
                                                           int rows, const qact *x, int N) {
    const size_t row_bytes = (size_t)x->nb * qblock_bytes(fmt);
    int n0 = 0;
    for (; n0 + TILE_ROWS <= N; n0 += TILE_ROWS)
        for (int o = 0; o < rows; o++) dot_tile(vnni, fmt, y + o, ldy, (const char *)w + o * row_bytes, x, n0, TILE_ROWS);
    for (; n0 + 4 <= N; n0 += 4)
        for (int o = 0; o < rows; o++) dot_tile(vnni, fmt, y + o, ldy, (const char *)w + o * row_bytes, x, n0, 4);
    for (; n0 < N; n0++)
        for (int o = 0; o < rows; o++) dot_tile(vnni, fmt, y + o, ldy, (const char *)w + o * row_bytes, x, n0, 1);
}

static void q8_0_dot_avx512(float *y, size_t ldy, const block_q8_0 *w, int rows, const qact *x, int N) {
    dot_rows(0, QFMT_Q8_0, y, ldy, w, rows, x, N);
}
static void q4_0_dot_avx512(float *y, size_t ldy, const block_q4_0 *w, int rows, const qact *x, int N) {
    dot_rows(0, QFMT_Q4_0, y, ldy, w, rows, x, N);
}
static void q8_0_dot_vnni(float *y, size_t ldy, const block_q8_0 *w, int rows, const qact *x, int N) {
    dot_rows(1, QFMT_Q8_0, y, ldy, w, rows, x, N);
}
static void q4_0_dot_vnni(float *y, size_t ldy, const block_q4_0 *w, int rows, const qact *x, int N) {
    dot_rows(1, QFMT_Q4_0, y, ldy, w, rows, x, N);
}

/* ---------------------------------------------------------------- float activations (QACT_FLOAT)
 *
 * One row at a time, read front to back (one stream, which the hardware prefetcher follows best,
 * helped by qweights_prefetch: Q8_0 1.5–1.9× faster from the L3 with it; 4 rows interleaved,
 * sharing the loads of x, were slower), the weights widened to float in
 * registers; blocks summed into 4 accumulators in turn, so consecutive blocks' multiply-adds by
 * their scales do not wait for each other. A short last block's x is masked (its stored weights
 * are padded with q = 0). */

static inline __attribute__((always_inline)) __m512 fblock_dot(qformat fmt, const void *row, int b, const float *x,
                                                               int n) {
    const float *xb = x + b * QK;
    const __m512 x0 = n >= QK ? _mm512_loadu_ps(xb) : _mm512_maskz_loadu_ps(lanes16(n), xb);
    const __m512 x1 = n >= QK ? _mm512_loadu_ps(xb + 16) : _mm512_maskz_loadu_ps(lanes16(n - 16), xb + 16);
    __m512 w0, w1;
    if (fmt == QFMT_Q4_0) {
        const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
        const __m128i bytes = _mm_loadu_si128((const __m128i *)((const block_q4_0 *)row)[b].qs);
        w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(bytes, low), eight)));
        w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight)));
    } else {
        const int8_t *q = ((const block_q8_0 *)row)[b].qs;
        w0 = i8x16_ps(q);
        w1 = i8x16_ps(q + 16);
    }
    return _mm512_fmadd_ps(w1, x1, _mm512_mul_ps(w0, x0));
}

static inline __attribute__((always_inline)) void fmatvec(qformat fmt, float *y, const void *w, int rows,
                                                          const float *x, int in) {
    const int nb = q_blocks(in), full = in / QK;
    const size_t row_bytes = (size_t)nb * qblock_bytes(fmt);
    for (int r = 0; r < rows; r++) {
        const void *row = (const char *)w + (size_t)r * row_bytes;
        const block_q8_0 *w8 = row;
        const block_q4_0 *w4 = row;
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        int b = 0;
        for (; b + 4 <= full; b += 4) {
            qweights_prefetch((const char *)row + b * qblock_bytes(fmt), 4 * qblock_bytes(fmt));
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                acc[u] = _mm512_fmadd_ps(fblock_dot(fmt, row, b + u, x, QK),
                                         _mm512_set1_ps(_cvtsh_ss(fmt == QFMT_Q8_0 ? w8[b + u].d : w4[b + u].d)), acc[u]);
        }
        for (; b < nb; b++) /* the last full blocks, and a short one */
            acc[0] = _mm512_fmadd_ps(fblock_dot(fmt, row, b, x, in - b * QK),
                                     _mm512_set1_ps(_cvtsh_ss(fmt == QFMT_Q8_0 ? w8[b].d : w4[b].d)), acc[0]);
        y[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    }
}

static void q8_0_matvec_avx512(float *y, const block_q8_0 *w, int rows, const float *x, int in) {
    fmatvec(QFMT_Q8_0, y, w, rows, x, in);
}

static void q4_0_matvec_avx512(float *y, const block_q4_0 *w, int rows, const float *x, int in) {
    fmatvec(QFMT_Q4_0, y, w, rows, x, in);
}

/* qact_quantize_row with 16 lanes: the absmax, then x · (1 / d) clamped and converted with
 * vcvtps2dq (nearest, ties to even: lrintf's rounding) and narrowed with vpmovsdb (saturating:
 * a no-op after the clamp). A short last block goes through the definition. */
static void quantize_act_avx512(const qact *a, const float *x, int N, int in) {
    const int full = in / QK;
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    for (int n = 0; n < N; n++) {
        const float *row = x + (size_t)n * in;
        if (full < a->nb) qact_quantize_row(a, n, row, in); /* all blocks; the full ones are redone below */
        for (int b = 0; b < full; b++) {
            const __m512 v0 = _mm512_loadu_ps(row + b * QK), v1 = _mm512_loadu_ps(row + b * QK + 16);
            const float m = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            const float d = m / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
            const __m512 vinv = _mm512_set1_ps(inv);
            const __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, vinv), lo), hi)));
            const __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, vinv), lo), hi)));
            const size_t at = (size_t)n * a->nb + b;
            _mm_storeu_si128((__m128i *)(a->q + at * QK), q0);
            _mm_storeu_si128((__m128i *)(a->q + at * QK + 16), q1);
            a->d[at] = d;
            qact_expand_block_x86(a, n, b, q0, q1, d);
        }
        qact_expand_row(a, n, full); /* a short last block, and the padding past an odd count */
    }
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
 * into 4 accumulators in turn (the 1 × 4 tile read 4 rows interleaved and ran at half the speed
 * of one row at a time). Masked lanes of w are 0, as in vnni_tile. */
static inline int32_t vnni_row(const int8_t *w, const int8_t *x, int in) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512i acc[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    int k = 0;
    for (; k + 256 <= in; k += 256) {
        qweights_prefetch(w + k, 256);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            acc[u] = _mm512_dpbusd_epi32(acc[u], _mm512_xor_si512(_mm512_loadu_si512(x + k + 64 * u), bias),
                                         _mm512_loadu_si512(w + k + 64 * u));
    }
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

/* AVX-512 CPUs without VNNI (Skylake-X) run the AVX2 integer product for W8A8. */
static void i8_gemm_avx2_for_avx512(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq,
                                    const float *ws, const int32_t *rs, int out, int in) {
    qkernels_avx2.i8_gemm(y, xq, xs, N, wq, ws, rs, out, in);
}

/* Full blocks 16 lanes at a time, a short last block through the format's definition. */
static void q8_0_dequantize_avx512(float *w, const block_q8_0 *blocks, int rows, int in) {
    const int nb = q_blocks(in), full = in / QK;
    for (int r = 0; r < rows; r++) {
        const block_q8_0 *row = blocks + (size_t)r * nb;
        float *wr = w + (size_t)r * in;
        for (int b = 0; b < full; b++) {
            const __m512 s = _mm512_set1_ps(_cvtsh_ss(row[b].d));
            _mm512_storeu_ps(wr + b * QK, _mm512_mul_ps(s, i8x16_ps(row[b].qs)));
            _mm512_storeu_ps(wr + b * QK + 16, _mm512_mul_ps(s, i8x16_ps(row[b].qs + 16)));
        }
        if (full < nb) q8_0_dequantize_row(wr + full * QK, row + full, in - full * QK);
    }
}

static void q4_0_dequantize_avx512(float *w, const block_q4_0 *blocks, int rows, int in) {
    const int nb = q_blocks(in), full = in / QK;
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (int r = 0; r < rows; r++) {
        const block_q4_0 *row = blocks + (size_t)r * nb;
        float *wr = w + (size_t)r * in;
        for (int b = 0; b < full; b++) {
            const __m512 s = _mm512_set1_ps(_cvtsh_ss(row[b].d));
            const __m128i bytes = _mm_loadu_si128((const __m128i *)row[b].qs);
            const __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, low), eight);
            const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight);
            _mm512_storeu_ps(wr + b * QK, _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo))));
            _mm512_storeu_ps(wr + b * QK + 16, _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi))));
        }
        if (full < nb) q4_0_dequantize_row(wr + full * QK, row + full, in - full * QK);
    }
}

/* ---------------------------------------------------------------- the 16-row layout (qpack.c), VNNI
 *
 * A group's 8 vectors of a block (Q8_0; Q4_0's 4, split into their low and high nibbles) hold 4
 * consecutive values of each of its 16 rows; each is multiplied by the same 4 bytes of x,
 * broadcast, so a block of one row of x against 16 outputs is 8 vpdpbusd (in two chains), one
 * conversion and one multiply-add by [d_w of the 16 rows] · d_x: 512 products for 11 operations,
 * where the row-major kernel above spends 7 on 64. The tile's rows of x share the block's loads,
 * and every output is summed in block order whatever the tile (qpack_dot_reference, bit for bit). */

/* acc + w · (the 4 bytes at x, broadcast), the broadcast folded into the multiply as its memory
 * operand ({1to16}): GCC puts it in a register with a separate vpbroadcastd, one instruction more
 * per 64 weights and row of x. Measured on Zen 5, every product of a config-E step on one core:
 * 8 rows of x 10.2 → 9.5 ms; one row within this host's noise (a [2816, 1024] layer streamed
 * from memory 22 → 28 GB/s in one run, no change in another). */
static inline __attribute__((always_inline)) __m512i dot_broadcast(__m512i acc, __m512i w, const int8_t *x) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t(*)[1])x));
    return acc;
}

static inline __attribute__((always_inline)) void packed_tile(qformat fmt, float *y, size_t ldy, const uint8_t *grp,
                                                              const qact *x, int n0, int NR, __mmask16 keep) {
    const int nb = x->nb, vecs = fmt == QFMT_Q8_0 ? 8 : 4, bias = fmt == QFMT_Q8_0 ? 128 : 8;
    const uint16_t *scales = (const uint16_t *)grp;
    const uint8_t *values = grp + qpack_scales_bytes(nb);
    __m512 acc[TILE_ROWS];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *v = values + (size_t)b * vecs * 64;
        qweights_prefetch(v, (size_t)vecs * 64);
        __m512i w[8];
        if (fmt == QFMT_Q8_0) {
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) w[k] = _mm512_load_si512(v + 64 * k);
        } else {
            const __m512i low = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m512i z = _mm512_load_si512(v + 64 * k);
                w[k] = _mm512_and_si512(z, low);
                w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(z, 4), low);
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(scales + (size_t)b * QPACK_ROWS)));
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            const size_t xb = (size_t)(n0 + r) * nb + b;
            const int8_t *q = x->q + xb * QK;
            __m512i even = _mm512_set1_epi32(-bias * x->sum[xb]), odd = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 8; k += 2) {
                even = dot_broadcast(even, w[k], q + 4 * k);
                odd = dot_broadcast(odd, w[k + 1], q + 4 * k + 4);
            }
            const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x->d[xb]));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(even, odd)), scale, acc[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) _mm512_mask_storeu_ps(y + (size_t)(n0 + r) * ldy, keep, acc[r]);
}

static inline __attribute__((always_inline)) void packed_groups(qformat fmt, float *y, size_t ldy, const void *packed,
                                                                int g0, int groups, int out, const qact *x, int N) {
    const size_t group_bytes = qpack_group_bytes(fmt, x->nb * QK);
    for (int g = g0; g < g0 + groups; g++) {
        const uint8_t *grp = (const uint8_t *)packed + (size_t)g * group_bytes;
        const __mmask16 keep = lanes16(out - g * QPACK_ROWS);
        float *yg = y + (size_t)g * QPACK_ROWS;
        int n0 = 0;
        for (; n0 + TILE_ROWS <= N; n0 += TILE_ROWS) packed_tile(fmt, yg, ldy, grp, x, n0, TILE_ROWS, keep);
        for (; n0 + 4 <= N; n0 += 4) packed_tile(fmt, yg, ldy, grp, x, n0, 4, keep);
        for (; n0 < N; n0++) packed_tile(fmt, yg, ldy, grp, x, n0, 1, keep);
    }
}

static void packed_dot_vnni(float *y, size_t ldy, qformat fmt, const void *packed, int g0, int groups, int out,
                            const qact *x, int N) {
    if (fmt == QFMT_Q8_0) packed_groups(QFMT_Q8_0, y, ldy, packed, g0, groups, out, x, N);
    else packed_groups(QFMT_Q4_0, y, ldy, packed, g0, groups, out, x, N);
}

/* Without VNNI the W8A8 product is the AVX2 one. */
const qkernels qkernels_avx512 = {q8_0_dot_avx512,         q4_0_dot_avx512,        quantize_act_avx512,
                                  q8_0_matvec_avx512,      q4_0_matvec_avx512,     i8_gemm_avx2_for_avx512,
                                  q8_0_dequantize_avx512,  q4_0_dequantize_avx512, NULL, 0, "avx512"};
const qkernels qkernels_avx512_vnni = {q8_0_dot_vnni,          q4_0_dot_vnni,          quantize_act_avx512,
                                       q8_0_matvec_avx512,     q4_0_matvec_avx512,     i8_gemm_avx512,
                                       q8_0_dequantize_avx512, q4_0_dequantize_avx512, packed_dot_vnni,
                                       (1u << QFMT_Q8_0) | (1u << QFMT_Q4_0), "avx512-vnni"};
