/* qkernels_avx2.c — the quant.h kernels with AVX2 and FMA; compiled with those instruction sets
 * and called only when the CPU has them (qkernels_for). */
#include <immintrin.h>

#include "quant/qact_expand.h"
#include "quant/quant.h"

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 int8 → 8 floats */
static inline __m256 load8_i8(const int8_t *q) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q)));
}

/* ---------------------------------------------------------------- Q8_0 / Q4_0 × 8-bit activations
 *
 * One W row against up to 4 rows of x at a time (the weights are loaded once for all of them), two
 * float accumulators of 8 lanes per output (even and odd blocks): per block, its 32 integer products summed into 8 int32
 * lanes, converted, multiplied by d_w · d_x and added. Every output goes through the same steps in
 * the same order whatever the tile, so a row's result does not depend on its batch.
 *
 * maddubs multiplies unsigned by signed bytes into saturating int16 pairs. Q8_0: |w| is the
 * unsigned side and x takes w's sign, so a pair is at most 2·127·127 = 32258 and never saturates
 * (both lie in ±127). Q4_0: the stored nibbles u = q + 8 ∈ [0, 15] are the unsigned side as they
 * are (a pair at most 2·15·127), and x's offset lanes (qact.off, −8 × each lane's Σx) are added:
 * Σ u·x − 8·Σ x = Σ q·x, exactly, in integers. */

/* The 32 values of a block in element order: Q8_0 signed, Q4_0 the stored nibbles u = q + 8. */
static inline __m256i q8_values(const block_q8_0 *b) { return _mm256_loadu_si256((const __m256i *)b->qs); }
static inline __m256i q4_nibbles(const block_q4_0 *b) {
    const __m128i bytes = _mm_loadu_si128((const __m128i *)b->qs), low = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), _mm_and_si128(bytes, low));
}

/* A tile is one row of W × NR rows of x (4 or 1), the weights' unpacking shared by the tile's rows
 * of x. Each output has two accumulators, for the even and the odd blocks, added at the end: with
 * one, a lone row of x (decoding) waited on its multiply-add's latency every block. (Four rows of W
 * against it at a time did the same and decoded from memory slower: the row read front to back is
 * what the hardware prefetcher follows best.) The kernel still asks for the weights
 * QWEIGHTS_AHEAD bytes ahead: without it a decoding step waited on its loads of W (one [2816,
 * 1024] Q8_0 layer after another from the L3, Emerald Rapids, 2 threads: 16–18 GB/s, with it
 * 36–41 GB/s). */
static inline __attribute__((always_inline)) void block_step(qformat fmt, __m256 *acc, const void *w, const qact *x,
                                                             int n0, int NR, int b) {
    const int nb = x->nb;
    const block_q8_0 *b8 = (const block_q8_0 *)w + b;
    const block_q4_0 *b4 = (const block_q4_0 *)w + b;
    const float dw = _cvtsh_ss(fmt == QFMT_Q8_0 ? b8->d : b4->d);
    if (fmt == QFMT_Q4_0) { /* unsigned nibbles × x, plus x's offset lanes */
        const __m256i u = q4_nibbles(b4);
        const size_t pairs = qact_pairs(nb);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const size_t xb = (size_t)(n0 + r) * nb + b;
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(x->q + xb * QK));
            const __m256i off = _mm256_loadu_si256((const __m256i *)(x->off + ((size_t)(n0 + r) * pairs + b / 2) * 16 + b % 2 * 8));
            const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), _mm256_set1_epi16(1)), off);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * x->d[xb]), acc[r]);
        }
        return;
    }
    const __m256i wv = q8_values(b8), abs_w = _mm256_abs_epi8(wv);
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        const size_t xb = (size_t)(n0 + r) * nb + b;
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(x->q + xb * QK));
        const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(xv, wv)), _mm256_set1_epi16(1));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * x->d[xb]), acc[r]);
    }
}

/* Q8_0, blocks b and b + 1 (b even; b + 1 = nb stands for a block of zeros) in one float step: the
 * integer sums of the two blocks folded to 4 lanes each, [block b | block b + 1], so that one
 * conversion, one scaling and one multiply-add serve both blocks; the lanes' scales are x's
 * (qact.de, read 4 floats in: [d_b ×4 | d_b+1 ×4]) times the weights' own. Per row of x and pair of
 * blocks 9 vector-unit operations where two block_step calls take 12, and a batched product (a
 * prompt) is bound by them: eight [2816, 1024] layers against 128 rows, row-major (as AMD CPUs keep
 * Q8_0 here), Emerald Rapids with DT_ISA=avx2, 2 threads: 52–53 → 45–47 ms, alternated. */
static inline __attribute__((always_inline)) void q8_pair_step(__m256 *acc, const block_q8_0 *w, const qact *x, int n0,
                                                               int NR, int b) {
    const int nb = x->nb, two = b + 1 < nb;
    const size_t pairs = qact_pairs(nb);
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i w0 = q8_values(w + b), w1 = two ? q8_values(w + b + 1) : _mm256_setzero_si256();
    const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
    const float d0 = _cvtsh_ss(w[b].d), d1 = two ? _cvtsh_ss(w[b + 1].d) : 0.0f;
    const __m256 dw = _mm256_set_m128(_mm_set1_ps(d1), _mm_set1_ps(d0));
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        const size_t xb = (size_t)(n0 + r) * nb + b;
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(x->q + xb * QK));
        const __m256i x1 = two ? _mm256_loadu_si256((const __m256i *)(x->q + (xb + 1) * QK)) : _mm256_setzero_si256();
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(x0, w0)), ones);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(x1, w1)), ones);
        const __m256i s =
            _mm256_add_epi32(_mm256_permute2x128_si256(p0, p1, 0x20), _mm256_permute2x128_si256(p0, p1, 0x31));
        const __m256 dx = _mm256_loadu_ps(x->de + ((size_t)(n0 + r) * pairs + b / 2) * 16 + 4);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, dx), acc[r]);
    }
}

static inline __attribute__((always_inline)) void dot_tile(qformat fmt, float *y, size_t ldy, const void *w,
                                                           const qact *x, int n0, int NR) {
    const int nb = x->nb;
    __m256 even[4], odd[4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) even[r] = odd[r] = _mm256_setzero_ps();
    const size_t bsz = qblock_bytes(fmt);
    int b = 0;
    if (fmt == QFMT_Q8_0) {
        for (; b + 2 < nb; b += 4) {
            qweights_prefetch((const char *)w + b * bsz, 4 * bsz);
            q8_pair_step(even, w, x, n0, NR, b);
            q8_pair_step(odd, w, x, n0, NR, b + 2);
        }
        if (b < nb) q8_pair_step(even, w, x, n0, NR, b);
    } else {
        for (; b + 1 < nb; b += 2) {
            qweights_prefetch((const char *)w + b * bsz, 2 * bsz);
            block_step(fmt, even, w, x, n0, NR, b);
            block_step(fmt, odd, w, x, n0, NR, b + 1);
        }
        if (b < nb) block_step(fmt, even, w, x, n0, NR, b);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) y[(size_t)(n0 + r) * ldy] = hsum_ps(_mm256_add_ps(even[r], odd[r]));
}

/* Tiles of 4 (then 1) rows of x, each through every row of W (which stays in the cache: a task
 * has few). */
static inline __attribute__((always_inline)) void dot_rows(qformat fmt, float *y, size_t ldy, const void *w, int rows,
                                                           const qact *x, int N) {
    const size_t row_bytes = (size_t)x->nb * qblock_bytes(fmt);
    int n0 = 0;
    for (; n0 + 4 <= N; n0 += 4)
        for (int o = 0; o < rows; o++) dot_tile(fmt, y + o, ldy, (const char *)w + o * row_bytes, x, n0, 4);
    for (; n0 < N; n0++)
        for (int o = 0; o < rows; o++) dot_tile(fmt, y + o, ldy, (const char *)w + o * row_bytes, x, n0, 1);
}

static void q8_0_dot_avx2(float *y, size_t ldy, const block_q8_0 *w, int rows, const qact *x, int N) {
    dot_rows(QFMT_Q8_0, y, ldy, w, rows, x, N);
}

static void q4_0_dot_avx2(float *y, size_t ldy, const block_q4_0 *w, int rows, const qact *x, int N) {
    dot_rows(QFMT_Q4_0, y, ldy, w, rows, x, N);
}

/* ---------------------------------------------------------------- float activations (QACT_FLOAT)
 *
 * One row at a time, read front to back (one stream, which the hardware prefetcher follows best,
 * helped by qweights_prefetch: Q8_0 from the L3 1.5–2× faster with it, Emerald Rapids), the
 * weights widened to float in registers; full blocks summed into 4 accumulators in turn, so
 * consecutive blocks' multiply-adds by their scales do not wait for each other. The short last
 * block, if any, in plain C. */

static inline __m256 fdot_q8(const block_q8_0 *b, const float *x) {
    __m256 s = _mm256_mul_ps(load8_i8(b->qs), _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(load8_i8(b->qs + 8), _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(load8_i8(b->qs + 16), _mm256_loadu_ps(x + 16), s);
    return _mm256_fmadd_ps(load8_i8(b->qs + 24), _mm256_loadu_ps(x + 24), s);
}

static inline __m256 fdot_q4(const block_q4_0 *b, const float *x) {
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    const __m128i bytes = _mm_loadu_si128((const __m128i *)b->qs);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, low), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight);
    __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), _mm256_loadu_ps(x));
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), _mm256_loadu_ps(x + 8), s);
    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), _mm256_loadu_ps(x + 16), s);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), _mm256_loadu_ps(x + 24), s);
}

static inline __attribute__((always_inline)) void fmatvec(qformat fmt, float *y, const void *w, int rows,
                                                          const float *x, int in) {
    const int nb = q_blocks(in), full = in / QK;
    for (int r = 0; r < rows; r++) {
        const block_q8_0 *w8 = (const block_q8_0 *)w + (size_t)r * nb;
        const block_q4_0 *w4 = (const block_q4_0 *)w + (size_t)r * nb;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        int b = 0;
        for (; b + 4 <= full; b += 4) {
            qweights_prefetch((const char *)w + ((size_t)r * nb + b) * qblock_bytes(fmt), 4 * qblock_bytes(fmt));
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const __m256 dot = fmt == QFMT_Q8_0 ? fdot_q8(w8 + b + u, x + (b + u) * QK) : fdot_q4(w4 + b + u, x + (b + u) * QK);
                acc[u] = _mm256_fmadd_ps(dot, _mm256_set1_ps(_cvtsh_ss(fmt == QFMT_Q8_0 ? w8[b + u].d : w4[b + u].d)), acc[u]);
            }
        }
        for (; b < full; b++) {
            const __m256 dot = fmt == QFMT_Q8_0 ? fdot_q8(w8 + b, x + b * QK) : fdot_q4(w4 + b, x + b * QK);
            acc[0] = _mm256_fmadd_ps(dot, _mm256_set1_ps(_cvtsh_ss(fmt == QFMT_Q8_0 ? w8[b].d : w4[b].d)), acc[0]);
        }
        float total = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
        if (full < nb) { /* the short last block */
            float tail;
            if (fmt == QFMT_Q8_0) qkernels_portable.q8_0_matvec(&tail, w8 + full, 1, x + full * QK, in - full * QK);
            else qkernels_portable.q4_0_matvec(&tail, w4 + full, 1, x + full * QK, in - full * QK);
            total += tail;
        }
        y[r] = total;
    }
}

static void q8_0_matvec_avx2(float *y, const block_q8_0 *w, int rows, const float *x, int in) {
    fmatvec(QFMT_Q8_0, y, w, rows, x, in);
}

static void q4_0_matvec_avx2(float *y, const block_q4_0 *w, int rows, const float *x, int in) {
    fmatvec(QFMT_Q4_0, y, w, rows, x, in);
}

/* qact_quantize_row with 8 lanes: the absmax, then x · (1 / d) clamped and converted with
 * cvtps2dq (nearest, ties to even: lrintf's rounding), packed with saturation (a no-op after the
 * clamp). A short last block goes through the definition. */
static void quantize_act_avx2(const qact *a, const float *x, int N, int in) {
    const int full = in / QK;
    const __m256 sign = _mm256_set1_ps(-0.0f), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    for (int n = 0; n < N; n++) {
        const float *row = x + (size_t)n * in;
        if (full < a->nb) qact_quantize_row(a, n, row, in); /* all blocks; the full ones are redone below */
        for (int b = 0; b < full; b++) {
            const float *xb = row + b * QK;
            __m256 v[4], m = _mm256_setzero_ps();
            for (int k = 0; k < 4; k++) {
                v[k] = _mm256_loadu_ps(xb + 8 * k);
                m = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), m);
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            const float d = _mm_cvtss_f32(m4) / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
            const __m256 vinv = _mm256_set1_ps(inv);
            __m256i q32[4];
            for (int k = 0; k < 4; k++)
                q32[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[k], vinv), lo), hi));
            /* packs work within 128-bit lanes: the permute puts the 32 bytes back in order */
            const __m256i q16a = _mm256_packs_epi32(q32[0], q32[1]), q16b = _mm256_packs_epi32(q32[2], q32[3]);
            const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16a, q16b),
                                                           _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            const size_t at = (size_t)n * a->nb + b;
            _mm256_storeu_si256((__m256i *)(a->q + at * QK), q8);
            a->d[at] = d;
            qact_expand_block_x86(a, n, b, _mm256_castsi256_si128(q8), _mm256_extracti128_si256(q8, 1), d);
        }
        qact_expand_row(a, n, full); /* a short last block, and the padding past an odd count */
    }
}

/* w8a8: maddubs multiplies unsigned by signed bytes into saturating int16 pairs: with |x| as the
 * unsigned side and w carrying x's sign, a pair is at most 2·127·127 = 32258, which never
 * saturates (x and w are clamped to ±127); Σ x·w directly, so no offset. */
#define I8_GEMM i8_gemm_avx2
#define I8_X_OFFSET 0
#include "quant/qi8_avx2_body.h"

static inline __attribute__((always_inline)) __m256i i8_pair(__m256i acc, __m256i xv, __m256i wv) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(wv, xv));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* Full blocks 8 lanes at a time, a short last block through the format's definition. */
static void q8_0_dequantize_avx2(float *w, const block_q8_0 *blocks, int rows, int in) {
    const int nb = q_blocks(in), full = in / QK;
    for (int r = 0; r < rows; r++) {
        const block_q8_0 *row = blocks + (size_t)r * nb;
        float *wr = w + (size_t)r * in;
        for (int b = 0; b < full; b++) {
            const __m256 s = _mm256_set1_ps(_cvtsh_ss(row[b].d));
            for (int j = 0; j < QK; j += 8) _mm256_storeu_ps(wr + b * QK + j, _mm256_mul_ps(s, load8_i8(row[b].qs + j)));
        }
        if (full < nb) q8_0_dequantize_row(wr + full * QK, row + full, in - full * QK);
    }
}

static void q4_0_dequantize_avx2(float *w, const block_q4_0 *blocks, int rows, int in) {
    const int nb = q_blocks(in), full = in / QK;
    const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (int r = 0; r < rows; r++) {
        const block_q4_0 *row = blocks + (size_t)r * nb;
        float *wr = w + (size_t)r * in;
        for (int b = 0; b < full; b++) {
            const __m256 s = _mm256_set1_ps(_cvtsh_ss(row[b].d));
            const __m128i bytes = _mm_loadu_si128((const __m128i *)row[b].qs);
            const __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, low), eight);
            const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight);
            float *o = wr + b * QK;
            _mm256_storeu_ps(o, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
            _mm256_storeu_ps(o + 8, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
            _mm256_storeu_ps(o + 16, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
            _mm256_storeu_ps(o + 24, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
        }
        if (full < nb) q4_0_dequantize_row(wr + full * QK, row + full, in - full * QK);
    }
}

/* ---------------------------------------------------------------- the 16-row layout (qpack.c), AVX2
 *
 * The product itself is qpacked_avx2_body.h's (shared with the AVX-VNNI set); here its block sum
 * with vpmaddubsw, which multiplies a half's 8 rows by the same 4 bytes of x, broadcast: 32
 * products into the 16-bit pair sums of 8 outputs, where the row-major kernel gets 32 products of
 * one output and then converts and scales them.
 *
 * Q4_0: the stored nibbles u = q + 8 ∈ [0, 15] are the unsigned side as they are, and all 8
 * products of a block into one lane's 16-bit pair can be summed before widening: 16 products of
 * at most 15·127 = 1905 in magnitude, 30480 < 2^15, so nothing saturates. Σ u·x − 8·Σ x = Σ q·x
 * exactly, with the block sums of x (qact.sum).
 * Q8_0: stored as q + 128, an unsigned side up to 255 that would saturate a pair (2·255·127); the
 * kernel takes q back (xor 0x80) and multiplies |x| by q with x's sign (a pair at most 2·127·127 =
 * 32258), widening each product vector to 32 bits; Σ q·x directly, so no offset.
 *
 * Q4_0 layers are packed on this path (packed_formats), Q8_0 only on Intel CPUs
 * (qkernels_packed_formats) — and both by the AVX-VNNI set, whose vpdpbusd makes the packed
 * product the faster one everywhere. Q4_0 spends its time unpacking nibbles row-major, which the layout
 * does once for 8 outputs: one [2816, 1024] layer on Zen 4 (DT_ISA=avx2, one thread, from the L3)
 * 2.3× faster at one row of x, 2–2.4× at 8–64 rows from memory; config E decoding 1.0–1.5×, its
 * 128-token prefill 1.7–3.7×. Q8_0 has no nibbles to unpack, and x's 4-byte broadcasts, their
 * absolute values and signs cost per product what the row-major kernel pays once per block. On
 * Zen 4 one row of x decoded 0.55–0.7× as fast packed (8–64 rows 1.1–1.5× faster), so there Q8_0
 * stays row-major; on Intel Emerald Rapids (DT_ISA=avx2, 2026-12-05, 2 threads, 60 [2816, 1024]
 * layers from the L3) packed was faster at every batch, against the row-major kernel with its
 * prefetch: one row 48–51 against 34–41 GB/s, 128 rows 1.48× (35.5 against 52.4 ms). Elsewhere
 * the packed product serves a layer packed under another path. */

#define QPACKED_DOT packed_dot_avx2
#include "quant/qpacked_avx2_body.h"

/* Q8_0: stored as q + 128; q back (xor 0x80) for the sign trick. Q4_0: the nibbles as they are. */
static inline __attribute__((always_inline)) void packed_weights(qformat fmt, __m256i *w, const uint8_t *v) {
    if (fmt == QFMT_Q8_0) {
        const __m256i flip = _mm256_set1_epi8((char)0x80);
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) w[k] = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(v + 64 * k)), flip);
        return;
    }
    q4_nibble_vectors(w, v);
}

/* The integer sum of one block of one row of x against the 8 unpacked weight vectors of a half. */
static inline __attribute__((always_inline)) __m256i packed_block_sum(qformat fmt, const __m256i *w, const int8_t *q,
                                                                      int32_t xsum) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (fmt == QFMT_Q4_0) {
        __m256i s16 = _mm256_maddubs_epi16(w[0], broadcast4(q));
#pragma GCC unroll 8
        for (int k = 1; k < 8; k++) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[k], broadcast4(q + 4 * k)));
        return _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(-8 * xsum));
    }
    __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k += 2) {
        const __m256i x0 = broadcast4(q + 4 * k), x1 = broadcast4(q + 4 * k + 4);
        const __m256i p0 = _mm256_maddubs_epi16(_mm256_abs_epi8(x0), _mm256_sign_epi8(w[k], x0));
        const __m256i p1 = _mm256_maddubs_epi16(_mm256_abs_epi8(x1), _mm256_sign_epi8(w[k + 1], x1));
        even = _mm256_add_epi32(even, _mm256_madd_epi16(p0, ones));
        odd = _mm256_add_epi32(odd, _mm256_madd_epi16(p1, ones));
    }
    return _mm256_add_epi32(even, odd);
}

const qkernels qkernels_avx2 = {q8_0_dot_avx2,        q4_0_dot_avx2,        quantize_act_avx2, q8_0_matvec_avx2,
                                q4_0_matvec_avx2,     i8_gemm_avx2,         q8_0_dequantize_avx2,
                                q4_0_dequantize_avx2, packed_dot_avx2,      1u << QFMT_Q4_0, "avx2"};
/* AVX2 with AVX-VNNI (Intel since Alder Lake, AMD since Zen 5): the packed product and w8a8's with
 * vpdpbusd (qkernels_avxvnni.c), both formats packed; the rest as plain AVX2. */
const qkernels qkernels_avx2_vnni = {q8_0_dot_avx2,        q4_0_dot_avx2,       quantize_act_avx2,
                                     q8_0_matvec_avx2,     q4_0_matvec_avx2,    i8_gemm_avxvnni,
                                     q8_0_dequantize_avx2, q4_0_dequantize_avx2, qpacked_dot_avxvnni,
                                     (1u << QFMT_Q8_0) | (1u << QFMT_Q4_0), "avx2-vnni"};
