/* flash_attention.c — fused causal attention (softmax and differential) with FlashAttention-style
 * online softmax, forward and backward, never forming a [T, T] map.
 *
 * Same results as the reference kernel in attention.c up to float rounding (layers.h has the
 * contract; tests/test_flash_attention.c the comparison). Memory: besides the caller's tensors,
 * only `scratch`, which holds per thread a few BK × BQ and BQ × hd tiles
 * (flash_attention_scratch_floats); nothing depends on T.
 *
 * Tiles. Queries are cut into aligned blocks of BQ rows, keys into aligned tiles of BK rows
 * (BK divides BQ; the last block/tile may be short). Query block [q0, q0 + nq) visits the key
 * tiles that start before q0 + nq, in increasing order; only tiles reaching past q0 (the last
 * BQ/BK of them) need the causal mask, every later tile is skipped. Key tile 0 is visible to
 * every query, so after the first tile every running max is finite and a row that a later tile
 * masks completely just gets weight 0 and correction 1.
 * Scores are computed TRANSPOSED, St[key c][query r] = k_c · q_r (row stride BQ), so that
 *   - the softmax statistics of a query (running max, sum, lse, δ) are per COLUMN of St: the
 *     online softmax and the softmax backward vectorise across 8 queries, with no horizontal
 *     reductions;
 *   - the query side is transposed once per query block (q, dO or dU) and reused over all its
 *     key tiles, while K and V tiles are only copied row by row (pack_rows: their rows are
 *     strided by KV·hd floats, which maps a tile onto a few L1 sets; packed, they stay in L1),
 *     and the next key tile is prefetched while the current one is computed.
 * Every product is one call of mm(), a register-blocked 6 × 16 broadcast-FMA micro-kernel,
 * C (+)= α·A·B with B row-major and A addressed through two strides, so that A or Aᵀ is read
 * without copying it (a broadcast scalar costs the same from any address). BQ = 96 and BK = 48
 * are multiples of both 6 and 16, so full tiles never take the slower edge code. On one core of
 * the build machine mm() runs at 75–90 GFLOP/s on these tiles (OpenBLAS sgemm: ~62 on 64³
 * tiles, ~88 on 512³). On the tiles that straddle the diagonal, mm() also skips the 6-row
 * blocks' masked parts (CZ_* below), so the causal half is all that is computed, up to blocks.
 *
 * exp: exp8() below, a vector exp (Cody–Waite range reduction to |r| ≤ ln2/2, degree-7 Taylor
 * polynomial, 2^n through the exponent bits). Truncation error ≤ 0.347^8/8! ≈ 5e-9, so the result
 * is within ~1 ulp of expf (measured: relative error ≤ 7.6e-8 against exact exp over
 * [−87.3, 1]); inputs below ln(FLT_MIN) give 0, where expf gives a subnormal < 1.2e-38 that no
 * sum here can see. The probabilities of the backward are recomputed as exp(s·scale − lse).
 *
 * Parallel schemes (OpenMP; each thread uses its own slice of scratch, picked by thread number):
 *   - forward: one task per (b, head, query block) — for DIFF, per (b, differential head, query
 *     block), so that both maps of the head share the pass over K/V. Tasks write disjoint rows
 *     of out / lse / o12 / pre / rstd: nothing is shared. Dynamic schedule, longest tasks (the
 *     last query blocks, which see the most keys) first.
 *   - backward: one task per (b, ownership group). A group is a set of query heads together with
 *     EVERY kv head they read, closed so that no other group touches those kv heads:
 *       baseline: kv head g and its G = H/KV query heads;
 *       DIFF with KV even: kv heads g and g + KV/2 and the differential heads j ∈ [gG, (g+1)G)
 *         (their query heads j and j + H/2 read exactly kv heads g and g + KV/2, and V_j is made
 *         of those two heads);
 *       DIFF with KV odd: everything of batch b (one group).
 *     A task therefore owns dq of its query heads and dk, dv of its kv heads (rows of batch b):
 *     it is their only writer and adds into them in place, with no atomics or locks. Within a
 *     task, a query block's dq is summed over its key tiles in scratch and added to dq once.
 *     dλ and dsubln are sums over all tasks: each thread adds into its own partial in scratch,
 *     and the partials are added up in thread order after the parallel loop (static schedule:
 *     deterministic for a given thread count). Tasks are all the same size; with fewer tasks
 *     than threads (B = 1 and one group) the backward runs on one thread.
 * The kernels run on omp_get_max_threads() threads (they must not be called from inside a
 * parallel region), so scratch must be sized for at least that many.
 */
#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__FMA__) || defined(__AVX__)
#include <immintrin.h>
#endif

#include "layers/layers.h"

#ifndef BQ
#define BQ 96 /* query block (rows); a multiple of 8 and of BK */
#endif
#ifndef BK
#define BK 48 /* key tile (rows) */
#endif
#if BQ % 8 != 0 || BQ % BK != 0
#error "BQ must be a multiple of 8 and of BK"
#endif

/* ------------------------------------------------------------------ 8-wide float vectors */

typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8 ld8(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void st8(float *p, v8 v) { memcpy(p, &v, sizeof v); }
static inline v8 bc8(float x) { return (v8){x, x, x, x, x, x, x, x}; }
/* a·b + c; fused when the target has FMA (the build is ISO C, where GCC never contracts) */
static inline v8 fma8(v8 a, v8 b, v8 c) {
#if defined(__FMA__)
    return (v8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}
static inline v8 sel8(v8i mask, v8 a, v8 b) { return (v8)(((v8i)a & mask) | ((v8i)b & ~mask)); }
static inline v8 max8(v8 a, v8 b) {
#if defined(__AVX__)
    return (v8)_mm256_max_ps((__m256)a, (__m256)b);
#else
    return sel8(a > b, a, b);
#endif
}

typedef uint32_t v8u __attribute__((vector_size(32)));

/* exp(x), vectorised; see the header comment for its accuracy. Defined for x ≤ 88; below
 * ln(FLT_MIN) (and for −inf) it returns +0. Larger x (only masked scores can be that large, and
 * those are replaced by 0 afterwards) give garbage. No clamping: the intermediate garbage of
 * out-of-range lanes is discarded by the final mask, and the exponent arithmetic is unsigned. */
static inline v8 exp8(v8 x) {
    const v8 magic = bc8(12582912.0f); /* 1.5·2^23: adding it rounds to an integer */
    v8i keep = x >= bc8(-87.33654475f);
    v8 t = fma8(x, bc8(1.44269504088896341f), magic);
    v8 n = t - magic;
    v8 r = fma8(n, bc8(-0.693359375f), x); /* ln2 high part: n·hi is exact for |n| ≤ 128 */
    r = fma8(n, bc8(2.12194440e-4f), r);    /* − n·ln2 low part */
    v8 p = bc8(1.0f / 5040.0f);
    p = fma8(p, r, bc8(1.0f / 720.0f));
    p = fma8(p, r, bc8(1.0f / 120.0f));
    p = fma8(p, r, bc8(1.0f / 24.0f));
    p = fma8(p, r, bc8(1.0f / 6.0f));
    p = fma8(p, r, bc8(0.5f));
    p = fma8(p, r, bc8(1.0f));
    p = fma8(p, r, bc8(1.0f));
    v8u e = ((v8u)t - 0x4B400000u + 127u) << 23; /* the low bits of t hold n: 2^n as float bits */
    p = p * (v8)e;
    return (v8)((v8i)p & keep);
}

/* ------------------------------------------------------------------ the product micro-kernel */

/* mm() for the edges: blocks of 4 rows × 16 / 8 columns, then single rows and columns */
static void mm_edge(float *restrict C, ptrdiff_t ldc, const float *restrict A, ptrdiff_t am, ptrdiff_t ak,
               const float *restrict B, ptrdiff_t ldb, int M, int N, int K, float alpha, int acc) {
    const v8 va = bc8(alpha);
    int m = 0;
    for (; m + 4 <= M; m += 4) {
        const float *a0 = A + m * am, *a1 = a0 + am, *a2 = a1 + am, *a3 = a2 + am;
        float *c0 = C + m * ldc, *c1 = c0 + ldc, *c2 = c1 + ldc, *c3 = c2 + ldc;
        int n = 0;
        for (; n + 16 <= N; n += 16) {
            v8 x00 = {0}, x01 = {0}, x10 = {0}, x11 = {0}, x20 = {0}, x21 = {0}, x30 = {0}, x31 = {0};
            const float *b = B + n;
            for (int kk = 0; kk < K; kk++, b += ldb) {
                v8 b0 = ld8(b), b1 = ld8(b + 8), s;
                ptrdiff_t o = kk * ak;
                s = bc8(a0[o]);
                x00 = fma8(s, b0, x00);
                x01 = fma8(s, b1, x01);
                s = bc8(a1[o]);
                x10 = fma8(s, b0, x10);
                x11 = fma8(s, b1, x11);
                s = bc8(a2[o]);
                x20 = fma8(s, b0, x20);
                x21 = fma8(s, b1, x21);
                s = bc8(a3[o]);
                x30 = fma8(s, b0, x30);
                x31 = fma8(s, b1, x31);
            }
            if (acc) {
                st8(c0 + n, fma8(va, x00, ld8(c0 + n)));
                st8(c0 + n + 8, fma8(va, x01, ld8(c0 + n + 8)));
                st8(c1 + n, fma8(va, x10, ld8(c1 + n)));
                st8(c1 + n + 8, fma8(va, x11, ld8(c1 + n + 8)));
                st8(c2 + n, fma8(va, x20, ld8(c2 + n)));
                st8(c2 + n + 8, fma8(va, x21, ld8(c2 + n + 8)));
                st8(c3 + n, fma8(va, x30, ld8(c3 + n)));
                st8(c3 + n + 8, fma8(va, x31, ld8(c3 + n + 8)));
            } else {
                st8(c0 + n, va * x00);
                st8(c0 + n + 8, va * x01);
                st8(c1 + n, va * x10);
                st8(c1 + n + 8, va * x11);
                st8(c2 + n, va * x20);
                st8(c2 + n + 8, va * x21);
                st8(c3 + n, va * x30);
                st8(c3 + n + 8, va * x31);
            }
        }
        for (; n + 8 <= N; n += 8) {
            v8 x0 = {0}, x1 = {0}, x2 = {0}, x3 = {0};
            const float *b = B + n;
            for (int kk = 0; kk < K; kk++, b += ldb) {
                v8 b0 = ld8(b);
                ptrdiff_t o = kk * ak;
                x0 = fma8(bc8(a0[o]), b0, x0);
                x1 = fma8(bc8(a1[o]), b0, x1);
                x2 = fma8(bc8(a2[o]), b0, x2);
                x3 = fma8(bc8(a3[o]), b0, x3);
            }
            if (acc) {
                st8(c0 + n, fma8(va, x0, ld8(c0 + n)));
                st8(c1 + n, fma8(va, x1, ld8(c1 + n)));
                st8(c2 + n, fma8(va, x2, ld8(c2 + n)));
                st8(c3 + n, fma8(va, x3, ld8(c3 + n)));
            } else {
                st8(c0 + n, va * x0);
                st8(c1 + n, va * x1);
                st8(c2 + n, va * x2);
                st8(c3 + n, va * x3);
            }
        }
        for (; n < N; n++) {
            float x0 = 0, x1 = 0, x2 = 0, x3 = 0;
            for (int kk = 0; kk < K; kk++) {
                float bv = B[kk * ldb + n];
                ptrdiff_t o = kk * ak;
                x0 += a0[o] * bv;
                x1 += a1[o] * bv;
                x2 += a2[o] * bv;
                x3 += a3[o] * bv;
            }
            c0[n] = (acc ? c0[n] : 0.0f) + alpha * x0;
            c1[n] = (acc ? c1[n] : 0.0f) + alpha * x1;
            c2[n] = (acc ? c2[n] : 0.0f) + alpha * x2;
            c3[n] = (acc ? c3[n] : 0.0f) + alpha * x3;
        }
    }
    for (; m < M; m++) {
        const float *a0 = A + m * am;
        float *c0 = C + m * ldc;
        int n = 0;
        for (; n + 8 <= N; n += 8) {
            v8 x0 = {0};
            const float *b = B + n;
            for (int kk = 0; kk < K; kk++, b += ldb) x0 = fma8(bc8(a0[kk * ak]), ld8(b), x0);
            st8(c0 + n, acc ? fma8(va, x0, ld8(c0 + n)) : va * x0);
        }
        for (; n < N; n++) {
            float x0 = 0;
            for (int kk = 0; kk < K; kk++) x0 += a0[kk * ak] * B[kk * ldb + n];
            c0[n] = (acc ? c0[n] : 0.0f) + alpha * x0;
        }
    }
}

/* Causal structure of a product on a tile that straddles the diagonal, which lets mm() skip the
 * 6-row blocks' parts that are masked (m, n, k are the indices of mm; off is set by the caller):
 *   CZ_COLS: C[m][n] is only needed for n ≥ m + off (scores: key m, query n); other blocks of
 *            16 columns may be left unwritten, and the caller masks them;
 *   CZ_KLO:  A(m, k) = 0 for k < m + off, so the k loop of a row block starts there;
 *   CZ_KHI:  A(m, k) = 0 for k > m + off, so the k loop of a row block stops there.
 * Skipping zero terms changes nothing (they add exact zeros). Off a diagonal tile, no block
 * qualifies and everything is computed. */
enum { CZ_NONE, CZ_COLS, CZ_KLO, CZ_KHI };

/* C[m][n] = (acc ? C[m][n] : 0) + alpha · Σ_k A[m·am + k·ak] · B[k·ldb + n]   (m < M, n < N, k < K).
 * B and C are row-major; A is read through two strides (am = lda, ak = 1: A; am = 1, ak = lda:
 * Aᵀ). C must not overlap A or B. The core is a 6 × 16 block: 12 accumulators, two B vectors
 * and one broadcast in the 16 AVX registers (measured 75–90 GFLOP/s on one core for these tiles,
 * against ~40 for 4 × 16 and ~62 for OpenBLAS sgemm on 64³ tiles). The edges (fewer than 6 rows
 * or 16 columns left) take mm_edge(), which ignores cz (it only saves work). */
static void mm(float *restrict C, ptrdiff_t ldc, const float *restrict A, ptrdiff_t am, ptrdiff_t ak,
               const float *restrict B, ptrdiff_t ldb, int M, int N, int K, float alpha, int acc, int cz, int off) {
    const v8 va = bc8(alpha);
    int m = 0;
    for (; m + 6 <= M; m += 6) {
        const float *a0 = A + m * am;
        float *c0 = C + m * ldc;
        int n = 0, kb = 0, ke = K;
        if (cz == CZ_COLS && m + off > 0) n = (m + off) / 16 * 16;
        if (cz == CZ_KLO && m + off > 0) kb = m + off < K ? m + off : K;
        if (cz == CZ_KHI && m + 5 + off + 1 < K) ke = m + 5 + off + 1 > 0 ? m + 5 + off + 1 : 0;
        if (n >= N) continue;
        for (; n + 16 <= N; n += 16) {
            v8 x00 = {0}, x01 = {0}, x10 = {0}, x11 = {0}, x20 = {0}, x21 = {0};
            v8 x30 = {0}, x31 = {0}, x40 = {0}, x41 = {0}, x50 = {0}, x51 = {0};
            const float *b = B + kb * ldb + n, *a = a0 + kb * ak;
            for (int kk = kb; kk < ke; kk++, b += ldb, a += ak) {
                v8 b0 = ld8(b), b1 = ld8(b + 8), t;
                t = bc8(a[0]);
                x00 = fma8(t, b0, x00);
                x01 = fma8(t, b1, x01);
                t = bc8(a[am]);
                x10 = fma8(t, b0, x10);
                x11 = fma8(t, b1, x11);
                t = bc8(a[2 * am]);
                x20 = fma8(t, b0, x20);
                x21 = fma8(t, b1, x21);
                t = bc8(a[3 * am]);
                x30 = fma8(t, b0, x30);
                x31 = fma8(t, b1, x31);
                t = bc8(a[4 * am]);
                x40 = fma8(t, b0, x40);
                x41 = fma8(t, b1, x41);
                t = bc8(a[5 * am]);
                x50 = fma8(t, b0, x50);
                x51 = fma8(t, b1, x51);
            }
            const v8 x[6][2] = {{x00, x01}, {x10, x11}, {x20, x21}, {x30, x31}, {x40, x41}, {x50, x51}};
            for (int i = 0; i < 6; i++) {
                float *c = c0 + i * ldc + n;
                if (acc) {
                    st8(c, fma8(va, x[i][0], ld8(c)));
                    st8(c + 8, fma8(va, x[i][1], ld8(c + 8)));
                } else {
                    st8(c, va * x[i][0]);
                    st8(c + 8, va * x[i][1]);
                }
            }
        }
        if (n < N) mm_edge(c0 + n, ldc, a0, am, ak, B + n, ldb, 6, N - n, K, alpha, acc);
    }
    if (m < M) mm_edge(C + m * ldc, ldc, A + m * am, am, ak, B, ldb, M - m, N, K, alpha, acc);
}

/* ------------------------------------------------------------------ tile helpers */

#if defined(__AVX__)
/* dst[i·ldd + j] = src[j·lds + i] for i, j < 8 */
static inline void transpose8(float *restrict dst, ptrdiff_t ldd, const float *restrict src, ptrdiff_t lds) {
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds), r2 = _mm256_loadu_ps(src + 2 * lds),
           r3 = _mm256_loadu_ps(src + 3 * lds), r4 = _mm256_loadu_ps(src + 4 * lds),
           r5 = _mm256_loadu_ps(src + 5 * lds), r6 = _mm256_loadu_ps(src + 6 * lds),
           r7 = _mm256_loadu_ps(src + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
           t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
           t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
           u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2)),
           u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2)),
           u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

/* dst[d·BQ + r] = src[r·ld + d] for r < rows, d < w; columns r ∈ [rows, round8(rows)) get 0,
 * so the padded queries of a short block have finite (zero) scores. */
static void load_transposed(float *restrict dst, const float *restrict src, ptrdiff_t ld, int rows, int w) {
    int rows8 = (rows + 7) & ~7;
    for (int r0 = 0; r0 < rows; r0 += 8) {
        int rn = rows - r0 < 8 ? rows - r0 : 8, d = 0;
#if defined(__AVX__)
        if (rn == 8)
            for (; d + 8 <= w; d += 8) transpose8(dst + (size_t)d * BQ + r0, BQ, src + r0 * ld + d, ld);
#endif
        for (; d < w; d++) {
            float *o = dst + (size_t)d * BQ + r0;
            for (int r = 0; r < rn; r++) o[r] = src[(r0 + r) * ld + d];
        }
    }
    if (rows8 > rows)
        for (int d = 0; d < w; d++)
            for (int r = rows; r < rows8; r++) dst[(size_t)d * BQ + r] = 0.0f;
}

static inline v8i iota8(int base) {
    return (v8i){base, base + 1, base + 2, base + 3, base + 4, base + 5, base + 6, base + 7};
}

/* One key tile of the online softmax, in place on St[c][r] (raw dots k_c·q_r, c < nk, r < nqv):
 * St becomes exp(scale·St − m_new), with m_new the running max including this tile; m, l
 * (running sum) are updated and corr[r] = exp(m_old − m_new) is what earlier accumulators must be
 * multiplied by. diag: mask key k0 + c > query q0 + r. */
static void softmax_tile(float *restrict St, int nk, int nqv, int q0, int k0, int diag, float scale,
                         float *restrict m, float *restrict l, float *restrict corr) {
    const v8 vs = bc8(scale), ninf = bc8(-INFINITY);
    for (int r = 0; r < nqv; r += 8) {
        const v8i qg = iota8(q0 + r);
        /* max of the raw dots, then scaled: scale > 0 and rounding is monotonic, so this is
         * exactly the max of the scaled scores */
        v8 mraw = ninf;
        for (int c = 0; c < nk; c++) {
            v8 x = ld8(St + (size_t)c * BQ + r);
            if (diag) x = sel8((v8i){0} + (k0 + c) > qg, ninf, x);
            mraw = max8(mraw, x);
        }
        const v8 mo = ld8(m + r), mx = max8(mo, mraw * vs);
        v8 sum = {0};
        for (int c = 0; c < nk; c++) {
            v8 p = exp8(ld8(St + (size_t)c * BQ + r) * vs - mx);
            if (diag) p = sel8((v8i){0} + (k0 + c) > qg, (v8){0}, p);
            st8(St + (size_t)c * BQ + r, p);
            sum += p;
        }
        v8 cr = exp8(mo - mx); /* mo = −inf on the first tile: 0 */
        st8(l + r, fma8(ld8(l + r), cr, sum));
        st8(m + r, mx);
        st8(corr + r, cr);
    }
}

/* Backward: St[c][r] = exp(scale·St − lse[r]), 0 where masked (diag). */
static void probs_tile(float *restrict St, int nk, int nqv, int q0, int k0, int diag, float scale,
                       const float *restrict lse) {
    const v8 vs = bc8(scale);
    for (int r = 0; r < nqv; r += 8) {
        v8 ls = ld8(lse + r);
        v8i qg = iota8(q0 + r);
        for (int c = 0; c < nk; c++) {
            v8 p = exp8(ld8(St + (size_t)c * BQ + r) * vs - ls);
            if (diag) p = sel8((v8i){0} + (k0 + c) > qg, (v8){0}, p);
            st8(St + (size_t)c * BQ + r, p);
        }
    }
}

/* dSt[c][r] = mult · Pt[c][r] · (dPt[c][r] − delta[r]) (dst may be Pt or dPt), and exactly 0
 * where P = 0: that covers the masked entries, where mm(CZ_COLS) may have left dPt unwritten. */
static void dscores_tile(float *dst, const float *Pt, const float *restrict delta, int nk, int nqv, float mult,
                         const float *dPt) {
    const v8 vm = bc8(mult);
    for (int c = 0; c < nk; c++)
        for (int r = 0; r < nqv; r += 8) {
            size_t o = (size_t)c * BQ + r;
            v8 p = ld8(Pt + o);
            st8(dst + o, (v8)((v8i)(vm * p * (ld8(dPt + o) - ld8(delta + r))) & (p != (v8){0})));
        }
}

/* Row helpers, 8 lanes at a time then the tail (GCC's -O2 cost model leaves loops of unknown
 * length scalar, and never reorders a float reduction). */
static inline void scal_row(float *restrict y, float a, int n) { /* y *= a */
    int d = 0;
    for (; d + 8 <= n; d += 8) st8(y + d, ld8(y + d) * bc8(a));
    for (; d < n; d++) y[d] *= a;
}
static inline void axpy_row(float *restrict y, float a, const float *restrict x, int n) { /* y += a·x */
    int d = 0;
    for (; d + 8 <= n; d += 8) st8(y + d, fma8(bc8(a), ld8(x + d), ld8(y + d)));
    for (; d < n; d++) y[d] += a * x[d];
}
static inline float dot_row(const float *restrict x, const float *restrict y, int n) { /* Σ x·y */
    v8 acc = {0};
    int d = 0;
    for (; d + 8 <= n; d += 8) acc = fma8(ld8(x + d), ld8(y + d), acc);
    float t = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; d < n; d++) t += x[d] * y[d];
    return t;
}

/* Σ x² in double (every square exact), as the reference's RMSNorm sums it */
static inline double sumsq_double(const float *x, int n) {
    int c = 0;
    double t = 0.0;
#if defined(__AVX__)
    __m256d acc = _mm256_setzero_pd();
    for (; c + 4 <= n; c += 4) {
        __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + c));
        acc = _mm256_add_pd(acc, _mm256_mul_pd(v, v));
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, acc);
    t = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
    for (; c < n; c++) t += (double)x[c] * x[c];
    return t;
}

/* O[r][0:w] *= corr[r] for r < nq (row stride ldo) */
static void rescale_rows(float *restrict O, int ldo, int w, int nq, const float *restrict corr) {
    for (int r = 0; r < nq; r++)
        if (corr[r] != 1.0f) scal_row(O + (size_t)r * ldo, corr[r], w);
}

/* y[i] = exp8(x[i]): the vector exp, exported for tests/test_flash_attention.c only (declared
 * there, not in a header), so its accuracy against expf can be checked directly */
void flash_attention_exp_for_test(float *y, const float *x, int n);
void flash_attention_exp_for_test(float *y, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) st8(y + i, exp8(ld8(x + i)));
    if (i < n) {
        float buf[8] = {0};
        memcpy(buf, x + i, sizeof(float) * (size_t)(n - i));
        st8(buf, exp8(ld8(buf)));
        memcpy(y + i, buf, sizeof(float) * (size_t)(n - i));
    }
}

static float attn_scale(int hd) { return (float)(1.0 / sqrt((double)hd)); }
static int ntiles(int T) { return (T + BQ - 1) / BQ; }

/* Carves a thread's slice of scratch into buffers, each rounded up to 16 floats (64 bytes). */
static float *take(float **p, size_t n) {
    float *r = *p;
    *p += (n + 15) & ~(size_t)15;
    return r;
}

/* dst[r·w + d] = src[r·ld + d]: a tile of rows made contiguous. K, V, Q and dO rows are
 * strided by KV·hd or H·hd floats (kilobytes), which maps a tile's rows onto a few L1 sets;
 * the micro-kernel re-reads its operands once per register block, so packed tiles (copied in
 * O(tile·hd), against O(tile²·hd) of arithmetic) keep them in L1. */
static inline void copy_row(float *restrict dst, const float *restrict src, int w) {
    int d = 0;
    for (; d + 8 <= w; d += 8) {
        v8 t = ld8(src + d);
#if defined(__GNUC__) && defined(__AVX__)
        /* an empty asm on the value, so that GCC does not turn this loop into a call of
         * memcpy (a library call per row of hd floats costs more than the copy) */
        __asm__("" : "+x"(t));
#endif
        st8(dst + d, t);
    }
    for (; d < w; d++) dst[d] = src[d];
}
static void pack_rows(float *restrict dst, const float *restrict src, ptrdiff_t ld, int rows, int w) {
    for (int r = 0; r < rows; r++) copy_row(dst + (size_t)r * w, src + r * ld, w);
}

/* Asks for the rows of the NEXT key tile [k0, k0 + BK) ∩ [k0, kend) while this one is computed:
 * rows kilobytes apart are hard on the hardware prefetchers (a gain of a few percent, measured). */
static void prefetch_tile(const float *src, ptrdiff_t ld, int k0, int kend, int w) {
#if defined(__GNUC__)
    int rows = kend - k0 < BK ? kend - k0 : BK;
    for (int r = 0; r < rows; r++)
        for (int d = 0; d < w; d += 16) __builtin_prefetch(src + (ptrdiff_t)(k0 + r) * ld + d, 0, 3);
#else
    (void)src, (void)ld, (void)k0, (void)kend, (void)w;
#endif
}

/* DIFF: the key tile [k0, k0 + nk) of both query maps' kv heads (ka, kb; packed once when they
 * are the same head) and V_j = [v_ga, v_gb] (rows 2hd wide) into contiguous scratch, and the
 * next tile's rows prefetched. Shared by the forward and the backward pass. */
static void load_diff_kv_tile(float *Ka, float *Kb, float *Vj, const float *ka, const float *kb, const float *va,
                              const float *vb, int same_kv, ptrdiff_t ldk, int hd, int k0, int nk, int kend) {
    const size_t ko = (size_t)k0 * ldk, w2 = 2 * (size_t)hd;
    pack_rows(Ka, ka + ko, ldk, nk, hd);
    if (Kb != Ka) pack_rows(Kb, kb + ko, ldk, nk, hd);
    for (int c = 0; c < nk; c++) {
        copy_row(Vj + (size_t)c * w2, va + ko + (size_t)c * ldk, hd);
        copy_row(Vj + (size_t)c * w2 + hd, vb + ko + (size_t)c * ldk, hd);
    }
    prefetch_tile(ka, ldk, k0 + BK, kend, hd);
    prefetch_tile(va, ldk, k0 + BK, kend, hd);
    if (!same_kv) {
        prefetch_tile(kb, ldk, k0 + BK, kend, hd);
        prefetch_tile(vb, ldk, k0 + BK, kend, hd);
    }
}

/* Floats of one thread's slice: the largest of the four kernels' layouts (the DIFF backward:
 * at most fourteen BQ × hd tiles, four BK × BQ tiles, four statistics vectors of BQ, and the
 * dλ / dsubln partials in front), with room for the 16-float rounding of every buffer. For hd = 64
 * that is ~105k floats (420 KB) per thread, whatever T and B are. */
#define PARTIALS(w2) (16 + (((size_t)(w2) + 15) & ~(size_t)15))
static size_t per_thread_floats(const attention_shape *s) {
    size_t hd = (size_t)(s->hd > 0 ? s->hd : 1);
    size_t n = PARTIALS(2 * hd) + 14 * BQ * hd + 4 * (size_t)BK * BQ + 8 * BQ + 32 * 16;
    return (n + 15) & ~(size_t)15;
}

size_t flash_attention_scratch_floats(const attention_shape *s, int threads) {
    return (size_t)(threads > 0 ? threads : 1) * per_thread_floats(s);
}

/* ------------------------------------------------------------------ forward */

typedef struct {
    const attention_shape *s;
    const float *q, *k, *v;
    float *out, *lse, *o12, *pre, *rstd;
    int G, ldq, ldk;
    float scale;
} fwd_ctx;

/* baseline: query head i, query block qt of batch b */
static void fwd_base_task(const fwd_ctx *x, int b, int i, int qt, float *ws) {
    float *const ws0 = ws;
    const attention_shape *s = x->s;
    const int T = s->T, H = s->H, hd = s->hd, ldq = x->ldq, ldk = x->ldk;
    const int q0 = qt * BQ, nq = T - q0 < BQ ? T - q0 : BQ, nqv = (nq + 7) & ~7;
    const float *qi = x->q + ((size_t)b * T + q0) * ldq + (size_t)i * hd;
    const float *kg = x->k + (size_t)b * T * ldk + (size_t)(i / x->G) * hd;
    const float *vg = x->v + (size_t)b * T * ldk + (size_t)(i / x->G) * hd;
    float *Qt = take(&ws, (size_t)BQ * hd), *Kp = take(&ws, (size_t)BK * hd), *Vp = take(&ws, (size_t)BK * hd);
    float *O = take(&ws, (size_t)BQ * hd), *St = take(&ws, BK * BQ);
    float *m = take(&ws, BQ), *l = take(&ws, BQ), *corr = take(&ws, BQ);
    assert(ws <= ws0 + per_thread_floats(s));

    load_transposed(Qt, qi, ldq, nq, hd);
    for (int r = 0; r < BQ; r++) m[r] = -INFINITY, l[r] = 0.0f;
    memset(O, 0, sizeof(float) * (size_t)nq * hd);
    for (int kt = 0; kt * BK < q0 + nq; kt++) {
        const int k0 = kt * BK, nk = q0 + nq - k0 < BK ? q0 + nq - k0 : BK, diag = k0 + nk - 1 > q0;
        pack_rows(Kp, kg + (size_t)k0 * ldk, ldk, nk, hd);
        pack_rows(Vp, vg + (size_t)k0 * ldk, ldk, nk, hd);
        prefetch_tile(kg, ldk, k0 + BK, q0 + nq, hd);
        prefetch_tile(vg, ldk, k0 + BK, q0 + nq, hd);
        mm(St, BQ, Kp, hd, 1, Qt, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
        softmax_tile(St, nk, nqv, q0, k0, diag, x->scale, m, l, corr);
        if (kt) rescale_rows(O, hd, hd, nq, corr);
        mm(O, hd, St, 1, BQ, Vp, hd, nq, hd, nk, 1.0f, 1, CZ_KHI, q0 - k0);
    }
    float *lsei = x->lse + ((size_t)b * H + i) * T + q0;
    for (int r = 0; r < nq; r++) {
        float *o = x->out + ((size_t)b * T + q0 + r) * ldq + (size_t)i * hd;
        const float *a = O + (size_t)r * hd;
        const float li = l[r];
        int d = 0;
        for (; d + 8 <= hd; d += 8) st8(o + d, ld8(a + d) / bc8(li));
        for (; d < hd; d++) o[d] = a[d] / li;
        lsei[r] = m[r] + logf(li);
    }
}

/* DIFF: differential head j (query heads j and j + Hd), query block qt of batch b */
static void fwd_diff_task(const fwd_ctx *x, int b, int j, int qt, float *ws) {
    float *const ws0 = ws;
    const attention_shape *s = x->s;
    const int T = s->T, H = s->H, hd = s->hd, ldq = x->ldq, ldk = x->ldk, Hd = H / 2, w2 = 2 * hd;
    const int q0 = qt * BQ, nq = T - q0 < BQ ? T - q0 : BQ, nqv = (nq + 7) & ~7;
    const int ga = j / x->G, gb = (j + Hd) / x->G; /* kv heads of map 1 and map 2 (and V_j's halves) */
    const float *q1 = x->q + ((size_t)b * T + q0) * ldq + (size_t)j * hd;
    const float *q2 = q1 + (size_t)Hd * hd;
    const float *ka = x->k + (size_t)b * T * ldk + (size_t)ga * hd, *kb = x->k + (size_t)b * T * ldk + (size_t)gb * hd;
    const float *va = x->v + (size_t)b * T * ldk + (size_t)ga * hd, *vb = x->v + (size_t)b * T * ldk + (size_t)gb * hd;
    float *Q1t = take(&ws, (size_t)BQ * hd), *Q2t = take(&ws, (size_t)BQ * hd);
    float *Ka = take(&ws, (size_t)BK * hd), *Kb = take(&ws, (size_t)BK * hd), *Vj = take(&ws, (size_t)BK * w2);
    float *O1 = take(&ws, (size_t)BQ * w2), *O2 = take(&ws, (size_t)BQ * w2);
    float *S1 = take(&ws, BK * BQ), *S2 = take(&ws, BK * BQ);
    float *m1 = take(&ws, BQ), *l1 = take(&ws, BQ), *c1 = take(&ws, BQ);
    float *m2 = take(&ws, BQ), *l2 = take(&ws, BQ), *c2 = take(&ws, BQ);
    assert(ws <= ws0 + per_thread_floats(s));
    if (ga == gb) Kb = Ka; /* one kv head for both maps (KV = 1): pack it once */

    load_transposed(Q1t, q1, ldq, nq, hd);
    load_transposed(Q2t, q2, ldq, nq, hd);
    for (int r = 0; r < BQ; r++) m1[r] = m2[r] = -INFINITY, l1[r] = l2[r] = 0.0f;
    memset(O1, 0, sizeof(float) * (size_t)nq * w2);
    memset(O2, 0, sizeof(float) * (size_t)nq * w2);
    for (int kt = 0; kt * BK < q0 + nq; kt++) {
        const int k0 = kt * BK, nk = q0 + nq - k0 < BK ? q0 + nq - k0 : BK, diag = k0 + nk - 1 > q0;
        load_diff_kv_tile(Ka, Kb, Vj, ka, kb, va, vb, gb == ga, ldk, hd, k0, nk, q0 + nq);
        mm(S1, BQ, Ka, hd, 1, Q1t, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
        mm(S2, BQ, Kb, hd, 1, Q2t, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
        softmax_tile(S1, nk, nqv, q0, k0, diag, x->scale, m1, l1, c1);
        softmax_tile(S2, nk, nqv, q0, k0, diag, x->scale, m2, l2, c2);
        if (kt) {
            rescale_rows(O1, w2, w2, nq, c1);
            rescale_rows(O2, w2, w2, nq, c2);
        }
        /* O_m += P_m · V_j */
        mm(O1, w2, S1, 1, BQ, Vj, w2, nq, w2, nk, 1.0f, 1, CZ_KHI, q0 - k0);
        mm(O2, w2, S2, 1, BQ, Vj, w2, nq, w2, nk, 1.0f, 1, CZ_KHI, q0 - k0);
    }
    const float lambda = s->lambda, alpha = 1.0f - s->lambda_init;
    float *lse1 = x->lse + ((size_t)b * H + j) * T + q0, *lse2 = x->lse + ((size_t)b * H + j + Hd) * T + q0;
    for (int r = 0; r < nq; r++) {
        const size_t row = (size_t)b * T + q0 + r;
        float *o1 = x->o12 + (row * Hd + j) * 2 * w2, *o2 = o1 + w2;
        float *u = x->pre + row * ldq + (size_t)j * w2;
        float *ot = x->out + row * ldq + (size_t)j * w2;
        const float *a1 = O1 + (size_t)r * w2, *a2 = O2 + (size_t)r * w2;
        const float li1 = l1[r], li2 = l2[r];
        int c = 0;
        for (; c + 8 <= w2; c += 8) {
            v8 e1 = ld8(a1 + c) / bc8(li1), e2 = ld8(a2 + c) / bc8(li2);
            st8(o1 + c, e1);
            st8(o2 + c, e2);
            st8(u + c, e1 - bc8(lambda) * e2);
        }
        for (; c < w2; c++) {
            o1[c] = a1[c] / li1;
            o2[c] = a2[c] / li2;
            u[c] = o1[c] - lambda * o2[c];
        }
        /* the per-head RMSNorm as attention_forward: Σu² in double, then the same float steps */
        float rs = 1.0f / sqrtf((float)(sumsq_double(u, w2) / w2) + s->eps);
        x->rstd[row * Hd + j] = rs;
        for (c = 0; c + 8 <= w2; c += 8) {
            v8 y = ld8(u + c) * bc8(rs);
            if (s->subln) y *= ld8(s->subln + c);
            st8(ot + c, bc8(alpha) * y);
        }
        for (; c < w2; c++) {
            float y = u[c] * rs;
            if (s->subln) y *= s->subln[c];
            ot[c] = alpha * y;
        }
        lse1[r] = m1[r] + logf(li1);
        lse2[r] = m2[r] + logf(li2);
    }
}

void flash_attention_forward(float *out, float *lse, float *o12, float *pre, float *rstd, const float *q,
                             const float *k, const float *v, float *scratch, const attention_shape *s) {
    assert(s->H % s->KV == 0);
    assert(!s->diff || (s->H % 2 == 0 && o12 && pre && rstd));
    if (s->B <= 0 || s->T <= 0) return;
    fwd_ctx x = {.s = s, .q = q, .k = k, .v = v, .out = out, .lse = lse, .o12 = o12, .pre = pre, .rstd = rstd,
                 .G = s->H / s->KV, .ldq = s->H * s->hd, .ldk = s->KV * s->hd, .scale = attn_scale(s->hd)};
    const size_t pt = per_thread_floats(s);
    const int nqt = ntiles(s->T), heads = s->diff ? s->H / 2 : s->H;
    const int nbh = s->B * heads, ntask = nbh * nqt;
#pragma omp parallel
    {
        float *ws = scratch + (size_t)omp_get_thread_num() * pt;
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < ntask; t++) {
            /* longest tasks (last query blocks) first */
            int qt = nqt - 1 - t / nbh, bh = t % nbh, b = bh / heads, h = bh % heads;
            if (s->diff)
                fwd_diff_task(&x, b, h, qt, ws);
            else
                fwd_base_task(&x, b, h, qt, ws);
        }
    }
}

/* ------------------------------------------------------------------ backward */

typedef struct {
    const attention_shape *s;
    float *dq, *dk, *dv;
    const float *dout, *out, *lse, *o12, *pre, *rstd, *q, *k, *v;
    int G, ldq, ldk;
    float scale;
} bwd_ctx;

/* baseline: all query heads of kv head g, batch b (the task owns dq of those heads, dk/dv of g) */
static void bwd_base_task(const bwd_ctx *x, int b, int g, float *ws) {
    float *const ws0 = ws;
    const attention_shape *s = x->s;
    const int T = s->T, H = s->H, hd = s->hd, ldq = x->ldq, ldk = x->ldk, G = x->G;
    const float scale = x->scale;
    const float *kg = x->k + (size_t)b * T * ldk + (size_t)g * hd;
    const float *vg = x->v + (size_t)b * T * ldk + (size_t)g * hd;
    float *dkg = x->dk ? x->dk + (size_t)b * T * ldk + (size_t)g * hd : NULL;
    float *dvg = x->dv ? x->dv + (size_t)b * T * ldk + (size_t)g * hd : NULL;
    const int need_ds = x->dq || x->dk;
    const size_t th = (size_t)BQ * hd;
    float *Qt = take(&ws, th), *dOt = take(&ws, th), *Qp = take(&ws, th), *dOp = take(&ws, th);
    float *Kp = take(&ws, th), *Vp = take(&ws, th), *dQ = take(&ws, th);
    float *St = take(&ws, BK * BQ), *dPt = take(&ws, BK * BQ);
    float *ls = take(&ws, BQ), *delta = take(&ws, BQ);
    assert(ws <= ws0 + per_thread_floats(s) - PARTIALS(2 * hd));

    for (int i = g * G; i < (g + 1) * G; i++) {
        for (int qt = 0; qt < ntiles(T); qt++) {
            const int q0 = qt * BQ, nq = T - q0 < BQ ? T - q0 : BQ, nqv = (nq + 7) & ~7;
            const size_t qo = ((size_t)b * T + q0) * ldq + (size_t)i * hd;
            const float *qi = x->q + qo, *doi = x->dout + qo, *oi = x->out + qo;
            load_transposed(Qt, qi, ldq, nq, hd);
            load_transposed(dOt, doi, ldq, nq, hd);
            pack_rows(Qp, qi, ldq, nq, hd);
            pack_rows(dOp, doi, ldq, nq, hd);
            const float *lsei = x->lse + ((size_t)b * H + i) * T + q0;
            for (int r = 0; r < nqv; r++) {
                delta[r] = r < nq ? dot_row(dOp + (size_t)r * hd, oi + (size_t)r * ldq, hd) : 0.0f;
                ls[r] = r < nq ? lsei[r] : 0.0f;
            }
            if (x->dq) memset(dQ, 0, sizeof(float) * (size_t)nq * hd);
            for (int kt = 0; kt * BK < q0 + nq; kt++) {
                const int k0 = kt * BK, nk = q0 + nq - k0 < BK ? q0 + nq - k0 : BK, diag = k0 + nk - 1 > q0;
                const size_t ko = (size_t)k0 * ldk;
                pack_rows(Kp, kg + ko, ldk, nk, hd);
                prefetch_tile(kg, ldk, k0 + BK, q0 + nq, hd);
                if (need_ds) prefetch_tile(vg, ldk, k0 + BK, q0 + nq, hd);
                mm(St, BQ, Kp, hd, 1, Qt, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
                probs_tile(St, nk, nqv, q0, k0, diag, scale, ls);
                /* dv_g += Pᵀ·dO_i */
                if (dvg) mm(dvg + ko, ldk, St, BQ, 1, dOp, hd, nk, hd, nq, 1.0f, 1, CZ_KLO, k0 - q0);
                if (!need_ds) continue;
                /* dPᵀ = v_g·dO_iᵀ, then dSᵀ = Pᵀ ⊙ (dPᵀ − δ) */
                pack_rows(Vp, vg + ko, ldk, nk, hd);
                mm(dPt, BQ, Vp, hd, 1, dOt, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
                dscores_tile(dPt, St, delta, nk, nqv, 1.0f, dPt);
                /* S = scale·q·kᵀ: dq_i += scale·dS·k_g (summed over key tiles in dQ first),
                 * dk_g += scale·dSᵀ·q_i */
                if (x->dq) mm(dQ, hd, dPt, 1, BQ, Kp, hd, nq, hd, nk, 1.0f, 1, CZ_KHI, q0 - k0);
                if (dkg) mm(dkg + ko, ldk, dPt, BQ, 1, Qp, hd, nk, hd, nq, scale, 1, CZ_KLO, k0 - q0);
            }
            if (x->dq)
                for (int r = 0; r < nq; r++) axpy_row(x->dq + qo + (size_t)r * ldq, scale, dQ + (size_t)r * hd, hd);
        }
    }
}

/* DIFF: differential heads [j0, j1) of batch b, closed over their kv heads (see the header) */
static void bwd_diff_task(const bwd_ctx *x, int b, int j0, int j1, float *ws, double *dl, float *dsub) {
    float *const ws0 = ws;
    const attention_shape *s = x->s;
    const int T = s->T, H = s->H, hd = s->hd, ldq = x->ldq, ldk = x->ldk, G = x->G, Hd = H / 2, w2 = 2 * hd;
    const float scale = x->scale, lambda = s->lambda, alpha = 1.0f - s->lambda_init;
    const float *w = s->subln;
    const int need_ds = x->dq || x->dk, need_tiles = need_ds || x->dv;
    const size_t th = (size_t)BQ * hd;
    float *Q1t = take(&ws, th), *Q2t = take(&ws, th), *Q1p = take(&ws, th), *Q2p = take(&ws, th);
    float *dU = take(&ws, 2 * th), *dUt = take(&ws, 2 * th);
    float *Ka = take(&ws, th), *Kb0 = take(&ws, th), *Vj = take(&ws, 2 * th);
    float *dQ1 = take(&ws, th), *dQ2 = take(&ws, th);
    float *S1 = take(&ws, BK * BQ), *S2 = take(&ws, BK * BQ), *dPt = take(&ws, BK * BQ),
          *Dt = take(&ws, BK * BQ);
    float *ls1 = take(&ws, BQ), *ls2 = take(&ws, BQ), *d1 = take(&ws, BQ), *d2 = take(&ws, BQ);
    assert(ws <= ws0 + per_thread_floats(s) - PARTIALS(w2));

    for (int j = j0; j < j1; j++) {
        const int ga = j / G, gb = (j + Hd) / G;
        const size_t kvo = (size_t)b * T * ldk;
        const float *ka = x->k + kvo + (size_t)ga * hd, *kb = x->k + kvo + (size_t)gb * hd;
        const float *va = x->v + kvo + (size_t)ga * hd, *vb = x->v + kvo + (size_t)gb * hd;
        float *dka = x->dk ? x->dk + kvo + (size_t)ga * hd : NULL, *dkb = x->dk ? x->dk + kvo + (size_t)gb * hd : NULL;
        float *dva = x->dv ? x->dv + kvo + (size_t)ga * hd : NULL, *dvb = x->dv ? x->dv + kvo + (size_t)gb * hd : NULL;
        float *Kb = ga == gb ? Ka : Kb0;
        for (int qt = 0; qt < ntiles(T); qt++) {
            const int q0 = qt * BQ, nq = T - q0 < BQ ? T - q0 : BQ, nqv = (nq + 7) & ~7;
            const size_t qo = ((size_t)b * T + q0) * ldq + (size_t)j * hd;
            const float *q1 = x->q + qo, *q2 = q1 + (size_t)Hd * hd;
            /* dU rows from the per-head norm backward (as diff_du_block), the δs, dλ, dsubln */
            for (int r = 0; r < nq; r++) {
                const size_t row = (size_t)b * T + q0 + r;
                const float *ut = x->pre + row * ldq + (size_t)j * w2;
                const float *dy = x->dout + row * ldq + (size_t)j * w2;
                const float *o1 = x->o12 + (row * Hd + j) * 2 * w2, *o2 = o1 + w2;
                const float rr = x->rstd[row * Hd + j];
                float *du = dU + (size_t)r * w2;
                /* m = Σ w·dy·u; dU = α·r·(w·dy − (r²·m/2hd)·u); δ1 = dU·o1, δ2 = dU·o2 */
                v8 vm = {0};
                int c = 0;
                for (; c + 8 <= w2; c += 8) vm = fma8(w ? ld8(w + c) * ld8(dy + c) : ld8(dy + c), ld8(ut + c), vm);
                float msum = ((vm[0] + vm[4]) + (vm[1] + vm[5])) + ((vm[2] + vm[6]) + (vm[3] + vm[7]));
                for (; c < w2; c++) msum += (w ? w[c] : 1.0f) * dy[c] * ut[c];
                const float kk = rr * rr * msum / (float)w2, ar = alpha * rr;
                for (c = 0; c + 8 <= w2; c += 8) {
                    v8 wdy = w ? ld8(w + c) * ld8(dy + c) : ld8(dy + c);
                    st8(du + c, bc8(ar) * (wdy - bc8(kk) * ld8(ut + c)));
                }
                for (; c < w2; c++) du[c] = ar * ((w ? w[c] : 1.0f) * dy[c] - kk * ut[c]);
                d1[r] = dot_row(du, o1, w2);
                d2[r] = dot_row(du, o2, w2);
                *dl -= d2[r]; /* u = o1 − λ·o2: ∂L/∂λ = −Σ dU·o2 */
                if (dsub) {
                    for (c = 0; c + 8 <= w2; c += 8)
                        st8(dsub + c, fma8(ld8(dy + c) * ld8(ut + c), bc8(rr), ld8(dsub + c)));
                    for (; c < w2; c++) dsub[c] += dy[c] * ut[c] * rr;
                }
            }
            if (!need_tiles) continue;
            for (int r = nq; r < nqv; r++) d1[r] = d2[r] = 0.0f;
            for (int r = 0; r < nqv; r++) {
                ls1[r] = r < nq ? x->lse[((size_t)b * H + j) * T + q0 + r] : 0.0f;
                ls2[r] = r < nq ? x->lse[((size_t)b * H + j + Hd) * T + q0 + r] : 0.0f;
            }
            load_transposed(Q1t, q1, ldq, nq, hd);
            load_transposed(Q2t, q2, ldq, nq, hd);
            load_transposed(dUt, dU, w2, nq, w2);
            if (x->dk) {
                pack_rows(Q1p, q1, ldq, nq, hd);
                pack_rows(Q2p, q2, ldq, nq, hd);
            }
            if (x->dq) {
                memset(dQ1, 0, sizeof(float) * (size_t)nq * hd);
                memset(dQ2, 0, sizeof(float) * (size_t)nq * hd);
            }
            for (int kt = 0; kt * BK < q0 + nq; kt++) {
                const int k0 = kt * BK, nk = q0 + nq - k0 < BK ? q0 + nq - k0 : BK, diag = k0 + nk - 1 > q0;
                const size_t ko = (size_t)k0 * ldk;
                load_diff_kv_tile(Ka, Kb, Vj, ka, kb, va, vb, gb == ga, ldk, hd, k0, nk, q0 + nq);
                mm(S1, BQ, Ka, hd, 1, Q1t, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
                mm(S2, BQ, Kb, hd, 1, Q2t, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
                probs_tile(S1, nk, nqv, q0, k0, diag, scale, ls1);
                probs_tile(S2, nk, nqv, q0, k0, diag, scale, ls2);
                /* dPᵀ = V_j·dUᵀ (shared by both maps: dA1 = dP, dA2 = −λ·dP) */
                mm(dPt, BQ, Vj, w2, 1, dUt, BQ, nk, nqv, w2, 1.0f, 0, CZ_COLS, k0 - q0);
                if (dva) {
                    /* dV_j += (A1 − λ·A2)ᵀ·dU, its halves to kv heads ga and gb */
                    const v8 vl = bc8(lambda);
                    for (int c = 0; c < nk; c++)
                        for (int r = 0; r < nqv; r += 8) {
                            size_t o = (size_t)c * BQ + r;
                            st8(Dt + o, ld8(S1 + o) - vl * ld8(S2 + o));
                        }
                    mm(dva + ko, ldk, Dt, BQ, 1, dU, w2, nk, hd, nq, 1.0f, 1, CZ_KLO, k0 - q0);
                    mm(dvb + ko, ldk, Dt, BQ, 1, dU + hd, w2, nk, hd, nq, 1.0f, 1, CZ_KLO, k0 - q0);
                }
                if (!need_ds) continue;
                /* dS1 = P1 ⊙ (dP − dU·o1); dS2 = −λ·P2 ⊙ (dP − dU·o2) — written over P1, P2 */
                dscores_tile(S1, S1, d1, nk, nqv, 1.0f, dPt);
                dscores_tile(S2, S2, d2, nk, nqv, -lambda, dPt);
                if (x->dq) {
                    mm(dQ1, hd, S1, 1, BQ, Ka, hd, nq, hd, nk, 1.0f, 1, CZ_KHI, q0 - k0);
                    mm(dQ2, hd, S2, 1, BQ, Kb, hd, nq, hd, nk, 1.0f, 1, CZ_KHI, q0 - k0);
                }
                if (dka) {
                    mm(dka + ko, ldk, S1, BQ, 1, Q1p, hd, nk, hd, nq, scale, 1, CZ_KLO, k0 - q0);
                    mm(dkb + ko, ldk, S2, BQ, 1, Q2p, hd, nk, hd, nq, scale, 1, CZ_KLO, k0 - q0);
                }
            }
            if (x->dq)
                for (int r = 0; r < nq; r++) {
                    float *e1 = x->dq + qo + (size_t)r * ldq;
                    axpy_row(e1, scale, dQ1 + (size_t)r * hd, hd);
                    axpy_row(e1 + (size_t)Hd * hd, scale, dQ2 + (size_t)r * hd, hd);
                }
        }
    }
}

void flash_attention_backward(float *dq, float *dk, float *dv, float *dlambda, float *dsubln, const float *dout,
                              const float *out, const float *lse, const float *o12, const float *pre,
                              const float *rstd, const float *q, const float *k, const float *v, float *scratch,
                              const attention_shape *s) {
    assert(s->H % s->KV == 0);
    assert(!s->diff || (s->H % 2 == 0 && o12 && pre && rstd));
    if (s->B <= 0 || s->T <= 0) return;
    bwd_ctx x = {.s = s, .dq = dq, .dk = dk, .dv = dv, .dout = dout, .out = out, .lse = lse, .o12 = o12,
                 .pre = pre, .rstd = rstd, .q = q, .k = k, .v = v, .G = s->H / s->KV, .ldq = s->H * s->hd,
                 .ldk = s->KV * s->hd, .scale = attn_scale(s->hd)};
    const size_t pt = per_thread_floats(s);
    const int w2 = 2 * s->hd;

    if (!s->diff) {
        if (!dq && !dk && !dv) return;
        const int ntask = s->B * s->KV;
#pragma omp parallel
        {
            float *ws = scratch + (size_t)omp_get_thread_num() * pt;
#pragma omp for schedule(static)
            for (int t = 0; t < ntask; t++) bwd_base_task(&x, t / s->KV, t % s->KV, ws + PARTIALS(w2));
        }
        return;
    }

    const int Hd = s->H / 2;
    const int groups = s->KV % 2 == 0 ? s->KV / 2 : 1, per_group = Hd / groups;
    const int ntask = s->B * groups;
    const int want_sub = dsubln && s->subln;
    int nthreads = 1;
#pragma omp parallel
    {
        const int tid = omp_get_thread_num();
        float *ws = scratch + (size_t)tid * pt;
        float *dsub = ws + 16; /* this thread's dsubln partial; ws[0..1]: its dλ partial */
        double dl = 0.0;
#pragma omp single
        nthreads = omp_get_num_threads();
        if (want_sub) memset(dsub, 0, sizeof(float) * w2);
#pragma omp for schedule(static)
        for (int t = 0; t < ntask; t++) {
            int b = t / groups, g = t % groups;
            bwd_diff_task(&x, b, g * per_group, (g + 1) * per_group, ws + PARTIALS(w2), &dl, want_sub ? dsub : NULL);
        }
        memcpy(ws, &dl, sizeof dl);
    }
    /* the threads' partials, added in thread order */
    double dl = 0.0;
    for (int t = 0; t < nthreads; t++) {
        double p;
        memcpy(&p, scratch + (size_t)t * pt, sizeof p);
        dl += p;
    }
    if (dlambda) *dlambda += (float)dl;
    if (want_sub) {
        const float alpha = 1.0f - s->lambda_init;
        for (int c = 0; c < w2; c++) {
            float acc = 0.0f;
            for (int t = 0; t < nthreads; t++) acc += scratch[(size_t)t * pt + 16 + c];
            dsubln[c] += alpha * acc;
        }
    }
}
