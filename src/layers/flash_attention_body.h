/* flash_attention_body.h — the fused attention kernels, written once in the vector type of
 * simd.h and compiled once per kernel path: flash_attention_portable.c, flash_attention_avx2.c,
 * flash_attention_avx512.c include this file (internal; the algorithm, the tiles, the parallel
 * schemes and the accuracy are described in flash_attention.c, which also picks the path).
 *
 * Defines, with the path's suffix (DT_KSFX): flash_attention_forward_*, flash_attention_backward_*
 * and flash_attention_exp_* (the vector exp alone, for the tests).
 *
 * Vectors of VW floats: the softmax statistics of VW queries at a time (one vector per column of
 * the transposed score tile), the rows of hd or 2·hd floats. The product micro-kernel is a block
 * of MR rows × 2 vectors: 6 × 8 with SSE2 (12 accumulators + 2 B vectors + 1 broadcast of the 16
 * registers), 6 × 16 with AVX2 (the same count), 12 × 32 with AVX-512 (24 + 3 of 32).
 */
#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "layers/flash_attention_tiles.h"
#include "layers/layers.h"
#include "layers/simd.h"

#if VW == 16
#define MR 12
#else
#define MR 6
#endif
#define NR (2 * VW)
#if BQ % VW != 0 || BQ % MR != 0 || BK % MR != 0
#error "BQ and BK must be multiples of the vector width and of the micro-kernel's rows"
#endif

/* ------------------------------------------------------------------ the product micro-kernel */

/* mm() for the edges: blocks of 4 rows × 2 / 1 vectors of columns, then single rows and columns */
static void mm_edge(float *restrict C, ptrdiff_t ldc, const float *restrict A, ptrdiff_t am, ptrdiff_t ak,
                    const float *restrict B, ptrdiff_t ldb, int M, int N, int K, float alpha, int acc) {
    const vf va = vbc(alpha);
    int m = 0;
    for (; m + 4 <= M; m += 4) {
        const float *a0 = A + m * am;
        float *c0 = C + m * ldc;
        int n = 0;
        for (; n + NR <= N; n += NR) {
            vf x[4][2];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) x[i][0] = x[i][1] = (vf){0};
            const float *b = B + n;
            for (int kk = 0; kk < K; kk++, b += ldb) {
                const vf b0 = vld(b), b1 = vld(b + VW);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    const vf s = vbc(a0[i * am + kk * ak]);
                    x[i][0] = vfma(s, b0, x[i][0]);
                    x[i][1] = vfma(s, b1, x[i][1]);
                }
            }
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                float *c = c0 + i * ldc + n;
                vst(c, acc ? vfma(va, x[i][0], vld(c)) : va * x[i][0]);
                vst(c + VW, acc ? vfma(va, x[i][1], vld(c + VW)) : va * x[i][1]);
            }
        }
        for (; n + VW <= N; n += VW) {
            vf x[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) x[i] = (vf){0};
            const float *b = B + n;
            for (int kk = 0; kk < K; kk++, b += ldb) {
                const vf b0 = vld(b);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) x[i] = vfma(vbc(a0[i * am + kk * ak]), b0, x[i]);
            }
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                float *c = c0 + i * ldc + n;
                vst(c, acc ? vfma(va, x[i], vld(c)) : va * x[i]);
            }
        }
        for (; n < N; n++)
            for (int i = 0; i < 4; i++) {
                float x = 0;
                for (int kk = 0; kk < K; kk++) x += a0[i * am + kk * ak] * B[kk * ldb + n];
                float *c = c0 + i * ldc + n;
                *c = (acc ? *c : 0.0f) + alpha * x;
            }
    }
    for (; m < M; m++) {
        const float *a0 = A + m * am;
        float *c0 = C + m * ldc;
        int n = 0;
        for (; n + VW <= N; n += VW) {
            vf x0 = {0};
            const float *b = B + n;
            for (int kk = 0; kk < K; kk++, b += ldb) x0 = vfma(vbc(a0[kk * ak]), vld(b), x0);
            vst(c0 + n, acc ? vfma(va, x0, vld(c0 + n)) : va * x0);
        }
        for (; n < N; n++) {
            float x0 = 0;
            for (int kk = 0; kk < K; kk++) x0 += a0[kk * ak] * B[kk * ldb + n];
            c0[n] = (acc ? c0[n] : 0.0f) + alpha * x0;
        }
    }
}

/* Causal structure of a product on a tile that straddles the diagonal, which lets mm() skip the
 * MR-row blocks' parts that are masked (m, n, k are the indices of mm; off is set by the caller):
 *   CZ_COLS: C[m][n] is only needed for n ≥ m + off (scores: key m, query n); other blocks of
 *            NR columns may be left unwritten, and the caller masks them;
 *   CZ_KLO:  A(m, k) = 0 for k < m + off, so the k loop of a row block starts there;
 *   CZ_KHI:  A(m, k) = 0 for k > m + off, so the k loop of a row block stops there.
 * Skipping zero terms changes nothing (they add exact zeros). Off a diagonal tile, no block
 * qualifies and everything is computed. */
enum { CZ_NONE, CZ_COLS, CZ_KLO, CZ_KHI };

/* C[m][n] = (acc ? C[m][n] : 0) + alpha · Σ_k A[m·am + k·ak] · B[k·ldb + n]   (m < M, n < N, k < K).
 * B and C are row-major; A is read through two strides (am = lda, ak = 1: A; am = 1, ak = lda:
 * Aᵀ). C must not overlap A or B. The core is an MR × NR block held in 2·MR accumulators (see
 * the top of this file; on AVX2, 6 × 16 measured 75–90 GFLOP/s on one core for these tiles,
 * against ~40 for 4 × 16 and ~62 for OpenBLAS sgemm on 64³ tiles). The edges (fewer than MR rows
 * or NR columns left) take mm_edge(), which ignores cz (it only saves work). */
static inline __attribute__((always_inline)) void mm_blocks(float *restrict C, ptrdiff_t ldc, const float *restrict A,
                                                            const ptrdiff_t am, const ptrdiff_t ak,
                                                            const float *restrict B, ptrdiff_t ldb, int M, int N,
                                                            int K, float alpha, int acc, int cz, int off) {
    const vf va = vbc(alpha);
    int m = 0;
    for (; m + MR <= M; m += MR) {
        const float *a0 = A + m * am;
        float *c0 = C + m * ldc;
        int n = 0, kb = 0, ke = K;
        if (cz == CZ_COLS && m + off > 0) n = (m + off) / NR * NR;
        if (cz == CZ_KLO && m + off > 0) kb = m + off < K ? m + off : K;
        if (cz == CZ_KHI && m + MR + off < K) ke = m + MR + off > 0 ? m + MR + off : 0;
        if (n >= N) continue;
        for (; n + NR <= N; n += NR) {
            vf x[MR][2];
#pragma GCC unroll 16
            for (int i = 0; i < MR; i++) x[i][0] = x[i][1] = (vf){0};
            const float *b = B + kb * ldb + n, *a = a0 + kb * ak;
            for (int kk = kb; kk < ke; kk++, b += ldb, a += ak) {
                const vf b0 = vld(b), b1 = vld(b + VW);
#pragma GCC unroll 16
                for (int i = 0; i < MR; i++) {
                    const vf t = vbc(a[i * am]);
                    x[i][0] = vfma(t, b0, x[i][0]);
                    x[i][1] = vfma(t, b1, x[i][1]);
                }
            }
#pragma GCC unroll 16
            for (int i = 0; i < MR; i++) {
                float *c = c0 + i * ldc + n;
                if (acc) {
                    vst(c, vfma(va, x[i][0], vld(c)));
                    vst(c + VW, vfma(va, x[i][1], vld(c + VW)));
                } else {
                    vst(c, va * x[i][0]);
                    vst(c + VW, va * x[i][1]);
                }
            }
        }
        if (n < N) mm_edge(c0 + n, ldc, a0, am, ak, B + n, ldb, MR, N - n, K, alpha, acc);
    }
    if (m < M) mm_edge(C + m * ldc, ldc, A + m * am, am, ak, B, ldb, M - m, N, K, alpha, acc);
}

/* mm_blocks with A's strides as constants where the kernels' calls have them (Aᵀ of a score
 * tile: 1, BQ; a score tile: BQ, 1; a packed K / V tile: hd or 2·hd, 1, for head widths 32, 64
 * and 128): the MR broadcasts of a step then address A at fixed offsets from one pointer, where a
 * stride in a register needs one register per row, more than the 16 general registers hold with
 * the loop's own (measured: register spills in the inner loop on AVX-512). */
static void mm(float *restrict C, ptrdiff_t ldc, const float *restrict A, ptrdiff_t am, ptrdiff_t ak,
               const float *restrict B, ptrdiff_t ldb, int M, int N, int K, float alpha, int acc, int cz, int off) {
    if (am == 1 && ak == BQ)
        mm_blocks(C, ldc, A, 1, BQ, B, ldb, M, N, K, alpha, acc, cz, off);
    else if (ak == 1 && am == BQ)
        mm_blocks(C, ldc, A, BQ, 1, B, ldb, M, N, K, alpha, acc, cz, off);
    else if (ak == 1 && am == 32)
        mm_blocks(C, ldc, A, 32, 1, B, ldb, M, N, K, alpha, acc, cz, off);
    else if (ak == 1 && am == 64)
        mm_blocks(C, ldc, A, 64, 1, B, ldb, M, N, K, alpha, acc, cz, off);
    else if (ak == 1 && am == 128)
        mm_blocks(C, ldc, A, 128, 1, B, ldb, M, N, K, alpha, acc, cz, off);
    else if (ak == 1 && am == 256)
        mm_blocks(C, ldc, A, 256, 1, B, ldb, M, N, K, alpha, acc, cz, off);
    else
        mm_blocks(C, ldc, A, am, ak, B, ldb, M, N, K, alpha, acc, cz, off);
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

/* dst[d·BQ + r] = src[r·ld + d] for r < rows, d < w; columns r ∈ [rows, rows rounded up to VW)
 * get 0, so the padded queries of a short block have finite (zero) scores. */
static void load_transposed(float *restrict dst, const float *restrict src, ptrdiff_t ld, int rows, int w) {
    int rows_v = (rows + VW - 1) & ~(VW - 1);
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
    if (rows_v > rows)
        for (int d = 0; d < w; d++)
            for (int r = rows; r < rows_v; r++) dst[(size_t)d * BQ + r] = 0.0f;
}

/* The max over the tile's keys c < nk of St[c][r .. r + VW) (raw dots), keys past the queries
 * qg = q0 + r + lane masked out when diag */
static inline vf column_max(const float *restrict St, int nk, int r, vi qg, int k0, int diag) {
    const vf ninf = vbc(-INFINITY);
    vf mraw = ninf;
    for (int c = 0; c < nk; c++) {
        vf x = vld(St + (size_t)c * BQ + r);
        if (diag) x = vsel(vbci(k0 + c) > qg, ninf, x);
        mraw = vmax(mraw, x);
    }
    return mraw;
}

/* One key tile of the online softmax, in place on St[c][r] (raw dots k_c·q_r, c < nk, r < nqv):
 * St becomes exp(scale·St − m_new), with m_new the running max including this tile; m, l
 * (running sum) are updated and corr[r] = exp(m_old − m_new) is what earlier accumulators must be
 * multiplied by. diag: mask key k0 + c > query q0 + r. */
static void softmax_tile(float *restrict St, int nk, int nqv, int q0, int k0, int diag, float scale,
                         float *restrict m, float *restrict l, float *restrict corr) {
    const vf vs = vbc(scale);
    for (int r = 0; r < nqv; r += VW) {
        const vi qg = viota(q0 + r);
        /* max of the raw dots, then scaled: scale > 0 and rounding is monotonic, so this is
         * exactly the max of the scaled scores */
        const vf mraw = column_max(St, nk, r, qg, k0, diag);
        const vf mo = vld(m + r), mx = vmax(mo, mraw * vs);
        vf sum = {0};
        for (int c = 0; c < nk; c++) {
            vf p = vexp(vld(St + (size_t)c * BQ + r) * vs - mx);
            if (diag) p = vsel(vbci(k0 + c) > qg, (vf){0}, p);
            vst(St + (size_t)c * BQ + r, p);
            sum += p;
        }
        vf cr = vexp(mo - mx); /* mo = −inf on the first tile: 0 */
        vst(l + r, vfma(vld(l + r), cr, sum));
        vst(m + r, mx);
        vst(corr + r, cr);
    }
}

/* ALiBi, in place on a raw score tile: St[c][r] = scale·St[c][r] − slope·(q0 + r − k0 − c), the
 * biased scores softmax_tile / probs_tile then take with scale 1. The distances are integers,
 * exact in float, so every score rounds as the reference kernel's (q·k)·scale − slope·(t − s).
 * Masked entries get garbage as before, which the diag masks discard. */
static void alibi_tile(float *restrict St, int nk, int nqv, int q0, int k0, float scale, float slope) {
    vf lane;
    for (int e = 0; e < VW; e++) lane[e] = (float)e;
    const vf vs = vbc(scale), vm = vbc(slope);
    for (int c = 0; c < nk; c++)
        for (int r = 0; r < nqv; r += VW) {
            float *p = St + (size_t)c * BQ + r;
            vst(p, vld(p) * vs - vm * (vbc((float)(q0 + r - k0 - c)) + lane));
        }
}

/* The online softmax of one key tile with the optional ALiBi slope (0: none). */
static void softmax_tile(float *restrict St, int nk, int nqv, int q0, int k0, int diag, float scale,
                         float *restrict m, float *restrict l, float *restrict corr);
static void scores_softmax_tile(float *restrict St, int nk, int nqv, int q0, int k0, int diag, float scale,
                                float slope, float *restrict m, float *restrict l, float *restrict corr) {
    if (slope != 0.0f) {
        alibi_tile(St, nk, nqv, q0, k0, scale, slope);
        scale = 1.0f;
    }
    softmax_tile(St, nk, nqv, q0, k0, diag, scale, m, l, corr);
}

/* Backward: St[c][r] = exp(scale·St − lse[r]), 0 where masked (diag). */
static void probs_tile(float *restrict St, int nk, int nqv, int q0, int k0, int diag, float scale,
                       const float *restrict lse) {
    const vf vs = vbc(scale);
    for (int r = 0; r < nqv; r += VW) {
        vf ls = vld(lse + r);
        vi qg = viota(q0 + r);
        for (int c = 0; c < nk; c++) {
            vf p = vexp(vld(St + (size_t)c * BQ + r) * vs - ls);
            if (diag) p = vsel(vbci(k0 + c) > qg, (vf){0}, p);
            vst(St + (size_t)c * BQ + r, p);
        }
    }
}

/* probs_tile with the optional ALiBi slope (0: none) */
static void scores_probs_tile(float *restrict St, int nk, int nqv, int q0, int k0, int diag, float scale, float slope,
                              const float *restrict lse) {
    if (slope != 0.0f) {
        alibi_tile(St, nk, nqv, q0, k0, scale, slope);
        scale = 1.0f;
    }
    probs_tile(St, nk, nqv, q0, k0, diag, scale, lse);
}

/* dSt[c][r] = mult · Pt[c][r] · (dPt[c][r] − delta[r]) (dst may be Pt or dPt), and exactly 0
 * where P = 0: that covers the masked entries, where mm(CZ_COLS) may have left dPt unwritten. */
static void dscores_tile(float *dst, const float *Pt, const float *restrict delta, int nk, int nqv, float mult,
                         const float *dPt) {
    const vf vm = vbc(mult);
    for (int c = 0; c < nk; c++)
        for (int r = 0; r < nqv; r += VW) {
            size_t o = (size_t)c * BQ + r;
            vf p = vld(Pt + o);
            vst(dst + o, (vf)((vi)(vm * p * (vld(dPt + o) - vld(delta + r))) & (p != (vf){0})));
        }
}

/* Row-block path (diff_rows): m[r] = max(m[r], scale · the max of column r over the tile's
 * visible keys) — as softmax_tile's max, without touching St */
static void tile_max(const float *restrict St, int nk, int nqv, int q0, int k0, int diag, float scale,
                     float *restrict m) {
    const vf vs = vbc(scale);
    for (int r = 0; r < nqv; r += VW)
        vst(m + r, vmax(vld(m + r), column_max(St, nk, r, viota(q0 + r), k0, diag) * vs));
}

/* Row-block path: St = exp(scale·St − m[r]) (0 where masked) in place, l[r] += its column sums */
static void tile_exp_sum(float *restrict St, int nk, int nqv, int q0, int k0, int diag, float scale,
                         const float *restrict m, float *restrict l) {
    const vf vs = vbc(scale);
    for (int r = 0; r < nqv; r += VW) {
        const vi qg = viota(q0 + r);
        const vf mx = vld(m + r);
        vf sum = {0};
        for (int c = 0; c < nk; c++) {
            vf p = vexp(vld(St + (size_t)c * BQ + r) * vs - mx);
            if (diag) p = vsel(vbci(k0 + c) > qg, (vf){0}, p);
            vst(St + (size_t)c * BQ + r, p);
            sum += p;
        }
        vst(l + r, vld(l + r) + sum);
    }
}

/* Row-block path: E1 = E1 / l1[r] − λ·E2 / l2[r] in place (the two maps' exponentials: the
 * combined map A1 − λ·A2; masked entries stay exactly 0) */
static void combine_tile(float *restrict E1, const float *restrict E2, int nk, int nqv, const float *restrict l1,
                         const float *restrict l2, float lambda) {
    const vf vl = vbc(lambda);
    for (int r = 0; r < nqv; r += VW) {
        const vf i1 = vbc(1.0f) / vld(l1 + r), i2 = vl / vld(l2 + r);
        for (int c = 0; c < nk; c++) {
            const size_t o = (size_t)c * BQ + r;
            vst(E1 + o, vld(E1 + o) * i1 - vld(E2 + o) * i2);
        }
    }
}

/* Row-block path: δ[r] += Σ_c Pt[c][r]·dPt[c][r], counting only entries with P ≠ 0 (dPt may be
 * unwritten where masked: mm(CZ_COLS)) — rowsum(P ⊙ dP) = dU·(P·V), which the online path reads
 * from o12 */
static void delta_tile(float *restrict delta, const float *restrict Pt, const float *restrict dPt, int nk, int nqv) {
    for (int r = 0; r < nqv; r += VW) {
        vf acc = vld(delta + r);
        for (int c = 0; c < nk; c++) {
            const size_t o = (size_t)c * BQ + r;
            const vf p = vld(Pt + o);
            acc += (vf)((vi)(p * vld(dPt + o)) & (p != (vf){0}));
        }
        vst(delta + r, acc);
    }
}

/* Row helpers, 8 lanes at a time then the tail (GCC's -O2 cost model leaves loops of unknown
 * length scalar, and never reorders a float reduction). */
static inline void scal_row(float *restrict y, float a, int n) { /* y *= a */
    int d = 0;
    for (; d + VW <= n; d += VW) vst(y + d, vld(y + d) * vbc(a));
    for (; d < n; d++) y[d] *= a;
}
static inline void axpy_row(float *restrict y, float a, const float *restrict x, int n) { /* y += a·x */
    int d = 0;
    for (; d + VW <= n; d += VW) vst(y + d, vfma(vbc(a), vld(x + d), vld(y + d)));
    for (; d < n; d++) y[d] += a * x[d];
}
/* y = a·x when `set` (the first writer of y: the same bits as axpy_row onto zeros), else y += a·x */
static inline void put_row(float *restrict y, float a, const float *restrict x, int n, int set) {
    if (!set) {
        axpy_row(y, a, x, n);
        return;
    }
    int d = 0;
    for (; d + VW <= n; d += VW) vst(y + d, vbc(a) * vld(x + d));
    for (; d < n; d++) y[d] = a * x[d];
}
static inline float dot_row(const float *restrict x, const float *restrict y, int n) { /* Σ x·y */
    vf acc = {0};
    int d = 0;
    for (; d + VW <= n; d += VW) acc = vfma(vld(x + d), vld(y + d), acc);
    float t = vsum(acc);
    for (; d < n; d++) t += x[d] * y[d];
    return t;
}

/* O[r][0:w] *= corr[r] for r < nq (row stride ldo) */
static void rescale_rows(float *restrict O, int ldo, int w, int nq, const float *restrict corr) {
    for (int r = 0; r < nq; r++)
        if (corr[r] != 1.0f) scal_row(O + (size_t)r * ldo, corr[r], w);
}

/* y[i] = exp(x[i]) with the kernels' vector exp (for the tests: its accuracy against expf) */
void DT_KSFX(flash_attention_exp)(float *y, const float *x, int n) {
    int i = 0;
    for (; i + VW <= n; i += VW) vst(y + i, vexp(vld(x + i)));
    if (i < n) vst_part(y + i, vexp(vld_part(x + i, n - i)), n - i);
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
    for (; d + VW <= w; d += VW) {
        vf t = vld(src + d);
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
        /* an empty asm on the value, so that GCC does not turn this loop into a call of
         * memcpy (a library call per row of hd floats costs more than the copy) */
        __asm__("" : "+v"(t));
#endif
        vst(dst + d, t);
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

/* profiling (attention_shape.busy): this thread's time since t0, added to *busy */
static void add_busy(double *busy, double t0) {
    if (!busy) return;
    const double dt = omp_get_wtime() - t0;
#pragma omp atomic
    *busy += dt;
}

/* ------------------------------------------------------------------ forward */

/* The DIFF output of one row from u = o1 − λ·o2 (2hd floats): the per-head RMSNorm as
 * attention_forward (Σu² in double, then the same float steps) times subln and α = 1 − λ_init,
 * its 1/rms into *rstd; the no_norm ablation: α·u, *rstd = 1. */
static void diff_norm_row(const attention_shape *s, float *restrict ot, float *restrict rstd, const float *restrict u,
                          int w2, float alpha) {
    int c;
    if (s->no_norm) {
        *rstd = 1.0f;
        for (c = 0; c < w2; c++) ot[c] = alpha * u[c];
        return;
    }
    const float rs = 1.0f / sqrtf((float)(vsumsq_double(u, w2) / w2) + s->eps);
    *rstd = rs;
    for (c = 0; c + VW <= w2; c += VW) {
        vf y = vld(u + c) * vbc(rs);
        if (s->subln) y *= vld(s->subln + c);
        vst(ot + c, vbc(alpha) * y);
    }
    for (; c < w2; c++) {
        float y = u[c] * rs;
        if (s->subln) y *= s->subln[c];
        ot[c] = alpha * y;
    }
}

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
    const int q0 = qt * BQ, nq = T - q0 < BQ ? T - q0 : BQ, nqv = (nq + VW - 1) & ~(VW - 1);
    const float *qi = x->q + ((size_t)b * T + q0) * ldq + (size_t)i * hd;
    const float *kg = x->k + (size_t)b * T * ldk + (size_t)(i / x->G) * hd;
    const float *vg = x->v + (size_t)b * T * ldk + (size_t)(i / x->G) * hd;
    float *Qt = take(&ws, (size_t)BQ * hd), *Kp = take(&ws, (size_t)BK * hd), *Vp = take(&ws, (size_t)BK * hd);
    float *O = take(&ws, (size_t)BQ * hd), *St = take(&ws, BK * BQ);
    float *m = take(&ws, BQ), *l = take(&ws, BQ), *corr = take(&ws, BQ);
    assert(ws <= ws0 + per_thread_floats(s));

    load_transposed(Qt, qi, ldq, nq, hd);
    /* softmax1: the virtual key of score 0 (and value 0) is in the running max and sum from the start */
    const float m_init = s->softmax1 ? 0.0f : -INFINITY, l_init = s->softmax1 ? 1.0f : 0.0f;
    const float slope = s->alibi ? s->alibi[i] : 0.0f;
    for (int r = 0; r < BQ; r++) m[r] = m_init, l[r] = l_init;
    memset(O, 0, sizeof(float) * (size_t)nq * hd);
    for (int kt = 0; kt * BK < q0 + nq; kt++) {
        const int k0 = kt * BK, nk = q0 + nq - k0 < BK ? q0 + nq - k0 : BK, diag = k0 + nk - 1 > q0;
        pack_rows(Kp, kg + (size_t)k0 * ldk, ldk, nk, hd);
        pack_rows(Vp, vg + (size_t)k0 * ldk, ldk, nk, hd);
        prefetch_tile(kg, ldk, k0 + BK, q0 + nq, hd);
        prefetch_tile(vg, ldk, k0 + BK, q0 + nq, hd);
        mm(St, BQ, Kp, hd, 1, Qt, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
        scores_softmax_tile(St, nk, nqv, q0, k0, diag, x->scale, slope, m, l, corr);
        if (kt) rescale_rows(O, hd, hd, nq, corr);
        mm(O, hd, St, 1, BQ, Vp, hd, nq, hd, nk, 1.0f, 1, CZ_KHI, q0 - k0);
    }
    float *lsei = x->lse + ((size_t)b * H + i) * T + q0;
    for (int r = 0; r < nq; r++) {
        float *o = x->out + ((size_t)b * T + q0 + r) * ldq + (size_t)i * hd;
        const float *a = O + (size_t)r * hd;
        const float li = l[r];
        int d = 0;
        for (; d + VW <= hd; d += VW) vst(o + d, vld(a + d) / vbc(li));
        for (; d < hd; d++) o[d] = a[d] / li;
        lsei[r] = m[r] + logf(li);
    }
}

/* DIFF: differential head j (query heads j and j + Hd), query block qt of batch b */
static void fwd_diff_task(const fwd_ctx *x, int b, int j, int qt, float *ws) {
    float *const ws0 = ws;
    const attention_shape *s = x->s;
    const int T = s->T, H = s->H, hd = s->hd, ldq = x->ldq, ldk = x->ldk, Hd = H / 2, w2 = 2 * hd;
    const int q0 = qt * BQ, nq = T - q0 < BQ ? T - q0 : BQ, nqv = (nq + VW - 1) & ~(VW - 1);
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
    const float m_init = s->softmax1 ? 0.0f : -INFINITY, l_init = s->softmax1 ? 1.0f : 0.0f; /* as fwd_base_task */
    const float slope1 = s->alibi ? s->alibi[j] : 0.0f, slope2 = s->alibi ? s->alibi[j + Hd] : 0.0f;
    for (int r = 0; r < BQ; r++) m1[r] = m2[r] = m_init, l1[r] = l2[r] = l_init;
    memset(O1, 0, sizeof(float) * (size_t)nq * w2);
    memset(O2, 0, sizeof(float) * (size_t)nq * w2);
    for (int kt = 0; kt * BK < q0 + nq; kt++) {
        const int k0 = kt * BK, nk = q0 + nq - k0 < BK ? q0 + nq - k0 : BK, diag = k0 + nk - 1 > q0;
        load_diff_kv_tile(Ka, Kb, Vj, ka, kb, va, vb, gb == ga, ldk, hd, k0, nk, q0 + nq);
        mm(S1, BQ, Ka, hd, 1, Q1t, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
        mm(S2, BQ, Kb, hd, 1, Q2t, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
        scores_softmax_tile(S1, nk, nqv, q0, k0, diag, x->scale, slope1, m1, l1, c1);
        scores_softmax_tile(S2, nk, nqv, q0, k0, diag, x->scale, slope2, m2, l2, c2);
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
        const float *a1 = O1 + (size_t)r * w2, *a2 = O2 + (size_t)r * w2;
        const float li1 = l1[r], li2 = l2[r];
        int c = 0;
        for (; c + VW <= w2; c += VW) {
            vf e1 = vld(a1 + c) / vbc(li1), e2 = vld(a2 + c) / vbc(li2);
            vst(o1 + c, e1);
            vst(o2 + c, e2);
            vst(u + c, e1 - vbc(lambda) * e2);
        }
        for (; c < w2; c++) {
            o1[c] = a1[c] / li1;
            o2[c] = a2[c] / li2;
            u[c] = o1[c] - lambda * o2[c];
        }
        diff_norm_row(s, x->out + row * ldq + (size_t)j * w2, x->rstd + row * Hd + j, u, w2, alpha);
        lse1[r] = m1[r] + logf(li1);
        lse2[r] = m2[r] + logf(li2);
    }
}

/* DIFF, row-block path (diff_rows: T ≤ DIFF_ROWS_MAX_T): differential head j, query block qt of
 * batch b. The scores of both maps against every visible key come first (R1, R2: [keys, BQ], key
 * tile kt at row k0, transposed as everywhere), so that each map's max and sum are exact before
 * any product with V; then P = A1 − λ·A2 is formed once and u = P·V_j is ONE product of width
 * 2·hd, where the online path (fwd_diff_task) needs two, P1·V_j and P2·V_j, and saves them as o12.
 * The backward of this path gets rowsum(A_m ⊙ dA) from its own row blocks, so o12 is not written. */
static void fwd_diff_rows_task(const fwd_ctx *x, int b, int j, int qt, float *ws) {
    float *const ws0 = ws;
    const attention_shape *s = x->s;
    const int T = s->T, H = s->H, hd = s->hd, ldq = x->ldq, ldk = x->ldk, Hd = H / 2, w2 = 2 * hd;
    const int q0 = qt * BQ, nq = T - q0 < BQ ? T - q0 : BQ, nqv = (nq + VW - 1) & ~(VW - 1), kend = q0 + nq;
    const int ga = j / x->G, gb = (j + Hd) / x->G; /* kv heads of map 1 and map 2 (and V_j's halves) */
    const size_t kvo = (size_t)b * T * ldk;
    const float *q1 = x->q + ((size_t)b * T + q0) * ldq + (size_t)j * hd, *q2 = q1 + (size_t)Hd * hd;
    const float *ka = x->k + kvo + (size_t)ga * hd, *kb = x->k + kvo + (size_t)gb * hd;
    const float *va = x->v + kvo + (size_t)ga * hd, *vb = x->v + kvo + (size_t)gb * hd;
    float *Q1t = take(&ws, (size_t)BQ * hd), *Q2t = take(&ws, (size_t)BQ * hd);
    float *Ka = take(&ws, (size_t)BK * hd), *Kb = take(&ws, (size_t)BK * hd), *Vj = take(&ws, (size_t)BK * w2);
    float *O = take(&ws, (size_t)BQ * w2);
    float *m1 = take(&ws, BQ), *l1 = take(&ws, BQ), *m2 = take(&ws, BQ), *l2 = take(&ws, BQ);
    float *R1 = take(&ws, (size_t)T * BQ), *R2 = take(&ws, (size_t)T * BQ);
    assert(ws <= ws0 + per_thread_floats(s));
    if (ga == gb) Kb = Ka; /* one kv head for both maps (KV = 1): pack it once */

    load_transposed(Q1t, q1, ldq, nq, hd);
    load_transposed(Q2t, q2, ldq, nq, hd);
    const float m_init = s->softmax1 ? 0.0f : -INFINITY, l_init = s->softmax1 ? 1.0f : 0.0f; /* as fwd_base_task */
    const float slope1 = s->alibi ? s->alibi[j] : 0.0f, slope2 = s->alibi ? s->alibi[j + Hd] : 0.0f;
    /* ALiBi scales the scores itself (alibi_tile), the statistics then take them with scale 1 */
    const float sc1 = slope1 != 0.0f ? 1.0f : x->scale, sc2 = slope2 != 0.0f ? 1.0f : x->scale;
    for (int r = 0; r < BQ; r++) m1[r] = m2[r] = m_init;
    for (int kt = 0; kt * BK < kend; kt++) {
        const int k0 = kt * BK, nk = kend - k0 < BK ? kend - k0 : BK, diag = k0 + nk - 1 > q0;
        float *s1 = R1 + (size_t)k0 * BQ, *s2 = R2 + (size_t)k0 * BQ;
        pack_rows(Ka, ka + (size_t)k0 * ldk, ldk, nk, hd);
        if (Kb != Ka) pack_rows(Kb, kb + (size_t)k0 * ldk, ldk, nk, hd);
        prefetch_tile(ka, ldk, k0 + BK, kend, hd);
        if (Kb != Ka) prefetch_tile(kb, ldk, k0 + BK, kend, hd);
        mm(s1, BQ, Ka, hd, 1, Q1t, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
        mm(s2, BQ, Kb, hd, 1, Q2t, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
        if (slope1 != 0.0f) alibi_tile(s1, nk, nqv, q0, k0, x->scale, slope1);
        if (slope2 != 0.0f) alibi_tile(s2, nk, nqv, q0, k0, x->scale, slope2);
        tile_max(s1, nk, nqv, q0, k0, diag, sc1, m1);
        tile_max(s2, nk, nqv, q0, k0, diag, sc2, m2);
    }
    /* softmax1's virtual key (score 0, value 0) enters the sums only */
    for (int r = 0; r < nqv; r++) l1[r] = l_init * expf(m_init - m1[r]), l2[r] = l_init * expf(m_init - m2[r]);
    for (int kt = 0; kt * BK < kend; kt++) {
        const int k0 = kt * BK, nk = kend - k0 < BK ? kend - k0 : BK, diag = k0 + nk - 1 > q0;
        tile_exp_sum(R1 + (size_t)k0 * BQ, nk, nqv, q0, k0, diag, sc1, m1, l1);
        tile_exp_sum(R2 + (size_t)k0 * BQ, nk, nqv, q0, k0, diag, sc2, m2, l2);
    }
    const float lambda = s->lambda, alpha = 1.0f - s->lambda_init;
    memset(O, 0, sizeof(float) * (size_t)nq * w2);
    for (int kt = 0; kt * BK < kend; kt++) {
        const int k0 = kt * BK, nk = kend - k0 < BK ? kend - k0 : BK;
        const size_t ko = (size_t)k0 * ldk;
        float *p = R1 + (size_t)k0 * BQ;
        for (int c = 0; c < nk; c++) {
            copy_row(Vj + (size_t)c * w2, va + ko + (size_t)c * ldk, hd);
            copy_row(Vj + (size_t)c * w2 + hd, vb + ko + (size_t)c * ldk, hd);
        }
        prefetch_tile(va, ldk, k0 + BK, kend, hd);
        prefetch_tile(vb, ldk, k0 + BK, kend, hd);
        combine_tile(p, R2 + (size_t)k0 * BQ, nk, nqv, l1, l2, lambda);
        /* u += (A1 − λ·A2)·V_j */
        mm(O, w2, p, 1, BQ, Vj, w2, nq, w2, nk, 1.0f, 1, CZ_KHI, q0 - k0);
    }
    float *lse1 = x->lse + ((size_t)b * H + j) * T + q0, *lse2 = x->lse + ((size_t)b * H + j + Hd) * T + q0;
    for (int r = 0; r < nq; r++) {
        const size_t row = (size_t)b * T + q0 + r;
        float *u = x->pre + row * ldq + (size_t)j * w2;
        memcpy(u, O + (size_t)r * w2, sizeof(float) * (size_t)w2);
        diff_norm_row(s, x->out + row * ldq + (size_t)j * w2, x->rstd + row * Hd + j, u, w2, alpha);
        lse1[r] = m1[r] + logf(l1[r]);
        lse2[r] = m2[r] + logf(l2[r]);
    }
}

void DT_KSFX(flash_attention_forward)(float *out, float *lse, float *o12, float *pre, float *rstd, const float *q,
                             const float *k, const float *v, float *scratch, const attention_shape *s) {
    assert(s->H % s->KV == 0);
    assert(!s->diff || (s->H % 2 == 0 && (o12 || diff_rows(s)) && pre && rstd));
    if (s->B <= 0 || s->T <= 0) return;
    fwd_ctx x = {.s = s, .q = q, .k = k, .v = v, .out = out, .lse = lse, .o12 = o12, .pre = pre, .rstd = rstd,
                 .G = s->H / s->KV, .ldq = s->H * s->hd, .ldk = s->KV * s->hd, .scale = attn_scale(s->hd)};
    const size_t pt = per_thread_floats(s);
    const int nqt = ntiles(s->T), heads = s->diff ? s->H / 2 : s->H;
    const int nbh = s->B * heads, ntask = nbh * nqt;
#pragma omp parallel
    {
        float *ws = scratch + (size_t)omp_get_thread_num() * pt;
        const double t0 = s->busy ? omp_get_wtime() : 0.0;
#pragma omp for schedule(dynamic, 1) nowait
        for (int t = 0; t < ntask; t++) {
            /* longest tasks (last query blocks) first */
            int qt = nqt - 1 - t / nbh, bh = t % nbh, b = bh / heads, h = bh % heads;
            if (s->diff && diff_rows(s))
                fwd_diff_rows_task(&x, b, h, qt, ws);
            else if (s->diff)
                fwd_diff_task(&x, b, h, qt, ws);
            else
                fwd_base_task(&x, b, h, qt, ws);
        }
        add_busy(s->busy, t0);
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

/* Where a backward task adds dk and dv: kv head h's columns start at dk + ((h − base) / div)·hd,
 * rows ld floats apart. Either dk, dv themselves (batch b's rows; base 0, div 1, ld KV·hd) or a
 * split task's private slot holding only its group's columns (flash_attention.c). */
typedef struct {
    float *dk, *dv; /* NULL when that gradient is not wanted */
    int ld, base, div;
} kv_dst;

static float *kv_col(float *p, const kv_dst *d, int h, int hd) {
    return p ? p + (size_t)((h - d->base) / d->div) * hd : NULL;
}

/* Group g's kv heads are base + c·div for c < bwd_group_width / hd */
static void group_heads(const attention_shape *s, int g, int *base, int *div) {
    *base = g, *div = 1;
    if (s->diff && s->KV % 2 == 0) *div = s->KV / 2; /* kv heads g and g + KV/2 */
    else if (s->diff) *base = 0;                    /* KV odd: every kv head */
}

/* the destination of task (b, group g): dk/dv, or (split) the private slot, zeroed by the caller */
static kv_dst task_dst(const bwd_ctx *x, int b, int g, float *slot) {
    const attention_shape *s = x->s;
    if (!slot) {
        const size_t o = (size_t)b * s->T * x->ldk;
        return (kv_dst){x->dk ? x->dk + o : NULL, x->dv ? x->dv + o : NULL, x->ldk, 0, 1};
    }
    const size_t half = (size_t)s->T * bwd_group_width(s);
    kv_dst d = {x->dk ? slot : NULL, x->dv ? slot + half : NULL, bwd_group_width(s), 0, 1};
    group_heads(s, g, &d.base, &d.div);
    return d;
}

/* set_grads: zero the dk, dv columns of group g in batch b's rows, which the task then adds into
 * (done by the task itself, so that the rows are still in its cache when it adds) */
static void zero_group_rows(const bwd_ctx *x, int b, int g) {
    const attention_shape *s = x->s;
    const int hd = s->hd, heads = bwd_group_width(s) / hd;
    int base, div;
    group_heads(s, g, &base, &div);
    for (int t = 0; t < s->T; t++)
        for (int c = 0; c < heads; c++) {
            const size_t at = ((size_t)b * s->T + t) * x->ldk + (size_t)(base + c * div) * hd;
            if (x->dk) memset(x->dk + at, 0, sizeof(float) * (size_t)hd);
            if (x->dv) memset(x->dv + at, 0, sizeof(float) * (size_t)hd);
        }
}

/* The n-th query block of part p of `parts`: rounds of `parts` blocks, taken in alternating
 * directions so that the parts' work (block qt sees qt + 1 blocks of keys) is balanced. */
static int part_block(int n, int p, int parts) { return n * parts + (n % 2 ? parts - 1 - p : p); }

/* baseline: all query heads of kv head g, batch b, query blocks of part p (the task owns dq of
 * those heads and blocks; it adds dk/dv of g into d) */
static void bwd_base_task(const bwd_ctx *x, int b, int g, int p, int parts, const kv_dst *d, float *ws) {
    float *const ws0 = ws;
    const attention_shape *s = x->s;
    const int T = s->T, H = s->H, hd = s->hd, ldq = x->ldq, ldk = x->ldk, G = x->G;
    const float scale = x->scale;
    const float *kg = x->k + (size_t)b * T * ldk + (size_t)g * hd;
    const float *vg = x->v + (size_t)b * T * ldk + (size_t)g * hd;
    float *dkg = kv_col(d->dk, d, g, hd), *dvg = kv_col(d->dv, d, g, hd);
    const ptrdiff_t ldd = d->ld;
    const int need_ds = x->dq || x->dk;
    const size_t th = (size_t)BQ * hd;
    float *Qt = take(&ws, th), *dOt = take(&ws, th), *Qp = take(&ws, th), *dOp = take(&ws, th);
    float *Kp = take(&ws, th), *Vp = take(&ws, th), *dQ = take(&ws, th);
    float *St = take(&ws, BK * BQ), *dPt = take(&ws, BK * BQ);
    float *ls = take(&ws, BQ), *delta = take(&ws, BQ);
    assert(ws <= ws0 + per_thread_floats(s) - PARTIALS(2 * hd));

    for (int i = g * G; i < (g + 1) * G; i++) {
        for (int n = 0; n * parts < ntiles(T); n++) {
            const int qt = part_block(n, p, parts);
            if (qt >= ntiles(T)) continue;
            const int q0 = qt * BQ, nq = T - q0 < BQ ? T - q0 : BQ, nqv = (nq + VW - 1) & ~(VW - 1);
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
                const size_t ko = (size_t)k0 * ldk, kd = (size_t)k0 * ldd;
                pack_rows(Kp, kg + ko, ldk, nk, hd);
                prefetch_tile(kg, ldk, k0 + BK, q0 + nq, hd);
                if (need_ds) prefetch_tile(vg, ldk, k0 + BK, q0 + nq, hd);
                mm(St, BQ, Kp, hd, 1, Qt, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
                scores_probs_tile(St, nk, nqv, q0, k0, diag, scale, s->alibi ? s->alibi[i] : 0.0f, ls);
                /* dv_g += Pᵀ·dO_i */
                if (dvg) mm(dvg + kd, ldd, St, BQ, 1, dOp, hd, nk, hd, nq, 1.0f, 1, CZ_KLO, k0 - q0);
                if (!need_ds) continue;
                /* dPᵀ = v_g·dO_iᵀ, then dSᵀ = Pᵀ ⊙ (dPᵀ − δ) */
                pack_rows(Vp, vg + ko, ldk, nk, hd);
                mm(dPt, BQ, Vp, hd, 1, dOt, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);
                dscores_tile(dPt, St, delta, nk, nqv, 1.0f, dPt);
                /* S = scale·q·kᵀ: dq_i += scale·dS·k_g (summed over key tiles in dQ first),
                 * dk_g += scale·dSᵀ·q_i */
                if (x->dq) mm(dQ, hd, dPt, 1, BQ, Kp, hd, nq, hd, nk, 1.0f, 1, CZ_KHI, q0 - k0);
                if (dkg) mm(dkg + kd, ldd, dPt, BQ, 1, Qp, hd, nk, hd, nq, scale, 1, CZ_KLO, k0 - q0);
            }
            if (x->dq)
                for (int r = 0; r < nq; r++)
                    put_row(x->dq + qo + (size_t)r * ldq, scale, dQ + (size_t)r * hd, hd, s->set_grads);
        }
    }
}

/* DIFF: differential heads [j0, j1) of batch b, closed over their kv heads (see the header), query
 * blocks of part p; dk/dv go into d */
static void bwd_diff_task(const bwd_ctx *x, int b, int j0, int j1, int p, int parts, const kv_dst *d, float *ws,
                          double *dl, float *dsub) {
    float *const ws0 = ws;
    const attention_shape *s = x->s;
    const int T = s->T, H = s->H, hd = s->hd, ldq = x->ldq, ldk = x->ldk, G = x->G, Hd = H / 2, w2 = 2 * hd;
    const float scale = x->scale, lambda = s->lambda, alpha = 1.0f - s->lambda_init;
    const float *w = s->subln;
    const int need_ds = x->dq || x->dk, need_tiles = need_ds || x->dv;
    /* row-block path (fwd_diff_rows_task): no o12; a first pass over a query block's keys keeps
     * P1, P2 and dP in R1, R2, RP ([keys, BQ]) and sums the δs from them, the second takes them
     * from there instead of recomputing */
    const int rows = diff_rows(s);
    const size_t th = (size_t)BQ * hd;
    float *Q1t = take(&ws, th), *Q2t = take(&ws, th), *Q1p = take(&ws, th), *Q2p = take(&ws, th);
    float *dU = take(&ws, 2 * th), *dUt = take(&ws, 2 * th);
    float *Ka = take(&ws, th), *Kb0 = take(&ws, th), *Vj = take(&ws, 2 * th);
    float *dQ1 = take(&ws, th), *dQ2 = take(&ws, th);
    float *S1b = take(&ws, BK * BQ), *S2b = take(&ws, BK * BQ), *dPb = take(&ws, BK * BQ),
          *Dt = take(&ws, BK * BQ);
    float *ls1 = take(&ws, BQ), *ls2 = take(&ws, BQ), *d1 = take(&ws, BQ), *d2 = take(&ws, BQ);
    float *R1 = rows ? take(&ws, (size_t)T * BQ) : NULL, *R2 = rows ? take(&ws, (size_t)T * BQ) : NULL,
          *RP = rows ? take(&ws, (size_t)T * BQ) : NULL;
    assert(ws <= ws0 + per_thread_floats(s) - PARTIALS(w2));

    for (int j = j0; j < j1; j++) {
        const int ga = j / G, gb = (j + Hd) / G;
        const size_t kvo = (size_t)b * T * ldk;
        const float *ka = x->k + kvo + (size_t)ga * hd, *kb = x->k + kvo + (size_t)gb * hd;
        const float *va = x->v + kvo + (size_t)ga * hd, *vb = x->v + kvo + (size_t)gb * hd;
        float *dka = kv_col(d->dk, d, ga, hd), *dkb = kv_col(d->dk, d, gb, hd);
        float *dva = kv_col(d->dv, d, ga, hd), *dvb = kv_col(d->dv, d, gb, hd);
        const ptrdiff_t ldd = d->ld;
        float *Kb = ga == gb ? Ka : Kb0;
        for (int n = 0; n * parts < ntiles(T); n++) {
            const int qt = part_block(n, p, parts);
            if (qt >= ntiles(T)) continue;
            const int q0 = qt * BQ, nq = T - q0 < BQ ? T - q0 : BQ, nqv = (nq + VW - 1) & ~(VW - 1);
            const size_t qo = ((size_t)b * T + q0) * ldq + (size_t)j * hd;
            const float *q1 = x->q + qo, *q2 = q1 + (size_t)Hd * hd;
            /* dU rows from the per-head norm backward (as diff_du_block), dsubln, and (online
             * path) the δs and dλ */
            for (int r = 0; r < nq; r++) {
                const size_t row = (size_t)b * T + q0 + r;
                const float *ut = x->pre + row * ldq + (size_t)j * w2;
                const float *dy = x->dout + row * ldq + (size_t)j * w2;
                const float rr = x->rstd[row * Hd + j];
                float *du = dU + (size_t)r * w2;
                /* m = Σ w·dy·u; dU = α·r·(w·dy − (r²·m/2hd)·u); δ1 = dU·o1, δ2 = dU·o2 */
                vf vm = {0};
                int c = 0;
                for (; c + VW <= w2; c += VW) vm = vfma(w ? vld(w + c) * vld(dy + c) : vld(dy + c), vld(ut + c), vm);
                float msum = vsum(vm);
                for (; c < w2; c++) msum += (w ? w[c] : 1.0f) * dy[c] * ut[c];
                /* without the norm (s->no_norm) y = α·u: dU = α·dy */
                const float kk = s->no_norm ? 0.0f : rr * rr * msum / (float)w2, ar = s->no_norm ? alpha : alpha * rr;
                for (c = 0; c + VW <= w2; c += VW) {
                    vf wdy = w ? vld(w + c) * vld(dy + c) : vld(dy + c);
                    vst(du + c, vbc(ar) * (wdy - vbc(kk) * vld(ut + c)));
                }
                for (; c < w2; c++) du[c] = ar * ((w ? w[c] : 1.0f) * dy[c] - kk * ut[c]);
                if (!rows) {
                    const float *o1 = x->o12 + (row * Hd + j) * 2 * w2, *o2 = o1 + w2;
                    d1[r] = dot_row(du, o1, w2);
                    d2[r] = dot_row(du, o2, w2);
                    *dl -= d2[r]; /* u = o1 − λ·o2: ∂L/∂λ = −Σ dU·o2 */
                }
                if (dsub) {
                    for (c = 0; c + VW <= w2; c += VW)
                        vst(dsub + c, vfma(vld(dy + c) * vld(ut + c), vbc(rr), vld(dsub + c)));
                    for (; c < w2; c++) dsub[c] += dy[c] * ut[c] * rr;
                }
            }
            if (!need_tiles && !rows) continue;
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
            /* the maps and dP of one key tile (into R1, R2, RP at row k0 on the row-block path,
             * else into the tile buffers) */
#define DIFF_BWD_TILE(S1, S2, dPt)                                                                                     \
    do {                                                                                                               \
        load_diff_kv_tile(Ka, Kb, Vj, ka, kb, va, vb, gb == ga, ldk, hd, k0, nk, q0 + nq);                             \
        mm(S1, BQ, Ka, hd, 1, Q1t, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);                                        \
        mm(S2, BQ, Kb, hd, 1, Q2t, BQ, nk, nqv, hd, 1.0f, 0, CZ_COLS, k0 - q0);                                        \
        scores_probs_tile(S1, nk, nqv, q0, k0, diag, scale, s->alibi ? s->alibi[j] : 0.0f, ls1);                       \
        scores_probs_tile(S2, nk, nqv, q0, k0, diag, scale, s->alibi ? s->alibi[j + Hd] : 0.0f, ls2);                  \
        /* dPᵀ = V_j·dUᵀ (shared by both maps: dA1 = dP, dA2 = −λ·dP) */                                              \
        mm(dPt, BQ, Vj, w2, 1, dUt, BQ, nk, nqv, w2, 1.0f, 0, CZ_COLS, k0 - q0);                                       \
    } while (0)
            /* dV_j += (A1 − λ·A2)ᵀ·dU, its halves to kv heads ga and gb */
#define DIFF_BWD_DV(S1, S2)                                                                                            \
    do {                                                                                                               \
        if (!dva) break;                                                                                               \
        const vf vl = vbc(lambda);                                                                                     \
        for (int c = 0; c < nk; c++)                                                                                   \
            for (int r = 0; r < nqv; r += VW) {                                                                        \
                size_t o_ = (size_t)c * BQ + r;                                                                        \
                vst(Dt + o_, vld((S1) + o_) - vl * vld((S2) + o_));                                                    \
            }                                                                                                          \
        mm(dva + kd, ldd, Dt, BQ, 1, dU, w2, nk, hd, nq, 1.0f, 1, CZ_KLO, k0 - q0);                                    \
        mm(dvb + kd, ldd, Dt, BQ, 1, dU + hd, w2, nk, hd, nq, 1.0f, 1, CZ_KLO, k0 - q0);                               \
    } while (0)
            if (rows) {
                for (int r = 0; r < nqv; r++) d1[r] = d2[r] = 0.0f;
                for (int kt = 0; kt * BK < q0 + nq; kt++) {
                    const int k0 = kt * BK, nk = q0 + nq - k0 < BK ? q0 + nq - k0 : BK, diag = k0 + nk - 1 > q0;
                    const size_t o = (size_t)k0 * BQ, kd = (size_t)k0 * ldd;
                    DIFF_BWD_TILE(R1 + o, R2 + o, RP + o);
                    DIFF_BWD_DV(R1 + o, R2 + o); /* while the maps are in L1 */
                    delta_tile(d1, R1 + o, RP + o, nk, nqv);
                    delta_tile(d2, R2 + o, RP + o, nk, nqv);
                }
                for (int r = 0; r < nq; r++) *dl -= d2[r]; /* ∂L/∂λ = −Σ dU·o2 = −Σ rowsum(A2 ⊙ dP) */
                for (int r = nq; r < nqv; r++) d1[r] = d2[r] = 0.0f;
                if (!need_tiles) continue;
            }
            for (int kt = 0; kt * BK < q0 + nq; kt++) {
                const int k0 = kt * BK, nk = q0 + nq - k0 < BK ? q0 + nq - k0 : BK, diag = k0 + nk - 1 > q0;
                const size_t kd = (size_t)k0 * ldd, o = (size_t)k0 * BQ;
                float *S1 = rows ? R1 + o : S1b, *S2 = rows ? R2 + o : S2b, *dPt = rows ? RP + o : dPb;
                if (!rows)
                    DIFF_BWD_TILE(S1, S2, dPt);
                else if (x->dq) { /* dQ needs the key tiles again */
                    pack_rows(Ka, ka + (size_t)k0 * ldk, ldk, nk, hd);
                    if (Kb != Ka) pack_rows(Kb, kb + (size_t)k0 * ldk, ldk, nk, hd);
                    prefetch_tile(ka, ldk, k0 + BK, q0 + nq, hd);
                    if (Kb != Ka) prefetch_tile(kb, ldk, k0 + BK, q0 + nq, hd);
                }
                if (!rows) DIFF_BWD_DV(S1, S2);
                if (!need_ds) continue;
                /* dS1 = P1 ⊙ (dP − dU·o1); dS2 = −λ·P2 ⊙ (dP − dU·o2) — written over P1, P2 */
                dscores_tile(S1, S1, d1, nk, nqv, 1.0f, dPt);
                dscores_tile(S2, S2, d2, nk, nqv, -lambda, dPt);
                if (x->dq) {
                    mm(dQ1, hd, S1, 1, BQ, Ka, hd, nq, hd, nk, 1.0f, 1, CZ_KHI, q0 - k0);
                    mm(dQ2, hd, S2, 1, BQ, Kb, hd, nq, hd, nk, 1.0f, 1, CZ_KHI, q0 - k0);
                }
                if (dka) {
                    mm(dka + kd, ldd, S1, BQ, 1, Q1p, hd, nk, hd, nq, scale, 1, CZ_KLO, k0 - q0);
                    mm(dkb + kd, ldd, S2, BQ, 1, Q2p, hd, nk, hd, nq, scale, 1, CZ_KLO, k0 - q0);
                }
            }
#undef DIFF_BWD_TILE
#undef DIFF_BWD_DV
            if (x->dq)
                for (int r = 0; r < nq; r++) {
                    float *e1 = x->dq + qo + (size_t)r * ldq;
                    put_row(e1, scale, dQ1 + (size_t)r * hd, hd, s->set_grads);
                    put_row(e1 + (size_t)Hd * hd, scale, dQ2 + (size_t)r * hd, hd, s->set_grads);
                }
        }
    }
}

/* Split tasks (parts > 1): each group's private slots, added into dk and dv row by row in part
 * order (set_grads: the first part's written). Called by every thread of the team after the tasks (an orphaned worksharing loop). */
static void add_slots(const bwd_ctx *x, float *slots, int ntask, int parts) {
    const attention_shape *s = x->s;
    const int T = s->T, hd = s->hd, groups = bwd_groups(s), width = bwd_group_width(s);
    const size_t slot = bwd_slot_floats(s), half = (size_t)T * width;
#pragma omp for schedule(static)
    for (long r = 0; r < (long)ntask * T; r++) {
        const int bg = (int)(r / T), row = (int)(r % T), b = bg / groups;
        const kv_dst d = task_dst(x, b, bg % groups, slots); /* for its column map */
        for (int c = 0; c < width; c += hd) {
            const size_t at = ((size_t)b * T + row) * x->ldk + (size_t)(d.base + c / hd * d.div) * hd;
            for (int p = 0; p < parts; p++) {
                const float *src = slots + ((size_t)bg * parts + p) * slot + (size_t)row * width + c;
                const int set = s->set_grads && p == 0;
                if (x->dk) put_row(x->dk + at, 1.0f, src, hd, set);
                if (x->dv) put_row(x->dv + at, 1.0f, src + half, hd, set);
            }
        }
    }
}

/* task t of ntask·parts: its destination, with its private slot zeroed when split (and its own
 * rows of dk, dv when not split and they are to be written) */
static kv_dst split_dst(const bwd_ctx *x, int b, int g, int parts, float *slots, int t) {
    if (parts == 1) {
        if (x->s->set_grads) zero_group_rows(x, b, g);
        return task_dst(x, b, g, NULL);
    }
    kv_dst d = task_dst(x, b, g, slots + (size_t)t * bwd_slot_floats(x->s));
    const size_t half = (size_t)x->s->T * bwd_group_width(x->s);
    if (d.dk) memset(d.dk, 0, sizeof(float) * half);
    if (d.dv) memset(d.dv, 0, sizeof(float) * half);
    return d;
}

void DT_KSFX(flash_attention_backward)(float *dq, float *dk, float *dv, float *dlambda, float *dsubln, const float *dout,
                              const float *out, const float *lse, const float *o12, const float *pre,
                              const float *rstd, const float *q, const float *k, const float *v, float *scratch,
                              const attention_shape *s) {
    assert(s->H % s->KV == 0);
    assert(!s->diff || (s->H % 2 == 0 && (o12 || diff_rows(s)) && pre && rstd));
    if (s->B <= 0 || s->T <= 0) return;
    bwd_ctx x = {.s = s, .dq = dq, .dk = dk, .dv = dv, .dout = dout, .out = out, .lse = lse, .o12 = o12,
                 .pre = pre, .rstd = rstd, .q = q, .k = k, .v = v, .G = s->H / s->KV, .ldq = s->H * s->hd,
                 .ldk = s->KV * s->hd, .scale = attn_scale(s->hd)};
    const size_t pt = per_thread_floats(s);
    const int w2 = 2 * s->hd;
    /* fewer (b, group) tasks than threads: split each task's query blocks into parts (flash_attention.c) */
    const int max_threads = omp_get_max_threads(), groups = bwd_groups(s), ntask = s->B * groups;
    int parts = ntask < max_threads ? max_threads / ntask : 1;
    if (parts > ntiles(s->T)) parts = ntiles(s->T);
    const int nwork = ntask * parts;
    float *slots = scratch + (size_t)max_threads * pt; /* sized by flash_attention_scratch_floats */

    if (!s->diff) {
        if (!dq && !dk && !dv) return;
#pragma omp parallel
        {
            float *ws = scratch + (size_t)omp_get_thread_num() * pt;
            const double t0 = s->busy ? omp_get_wtime() : 0.0;
#pragma omp for schedule(static) nowait
            for (int t = 0; t < nwork; t++) {
                const int bg = t / parts, b = bg / groups, g = bg % groups;
                const kv_dst d = split_dst(&x, b, g, parts, slots, t);
                bwd_base_task(&x, b, g, t % parts, parts, &d, ws + PARTIALS(w2));
            }
            if (parts > 1) {
#pragma omp barrier
                add_slots(&x, slots, ntask, parts);
            }
            add_busy(s->busy, t0);
        }
        return;
    }

    const int Hd = s->H / 2, per_group = Hd / groups;
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
        const double t0 = s->busy ? omp_get_wtime() : 0.0;
        if (want_sub) memset(dsub, 0, sizeof(float) * w2);
#pragma omp for schedule(static) nowait
        for (int t = 0; t < nwork; t++) {
            const int bg = t / parts, b = bg / groups, g = bg % groups;
            const kv_dst d = split_dst(&x, b, g, parts, slots, t);
            bwd_diff_task(&x, b, g * per_group, (g + 1) * per_group, t % parts, parts, &d, ws + PARTIALS(w2), &dl,
                          want_sub ? dsub : NULL);
        }
        memcpy(ws, &dl, sizeof dl);
        if (parts > 1) {
#pragma omp barrier
            add_slots(&x, slots, ntask, parts);
        }
        add_busy(s->busy, t0);
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
