/* skinny_body.h — the products of decoding, written once in the vector type of simd.h and
 * compiled per kernel path by skinny_portable.c, skinny_avx2.c and skinny_avx512.c (internal;
 * kernels.h has the contracts, elementwise_ref.c the plain definitions): y = x·Wᵀ for a few rows
 * of x (a decoding batch, linear_rows), and one query against the rows of a KV cache (cache_dots,
 * cache_axpy: the attention of a decoded or prefilled token over its context).
 *
 * Why not sgemm: OpenBLAS packs both operands before it multiplies, and for a handful of rows the
 * packing of W (read it, write a copy, read the copy) costs more than the product: decoding 2 to 8
 * streams of a 220M-parameter model took 3–5× the time of one. Here each weight row is read once
 * from memory and multiplied into every row of x while it is in registers; x (≤ 8 rows) stays in
 * the cache.
 */
#include <stddef.h>

#include "layers/kernels.h"
#include "layers/simd.h"

/* Outputs per block: the block's NO × NR accumulators and its loads fit the registers (32 on
 * AVX-512, 16 on AVX2 and SSE2). */
#if VW == 16
#define SKINNY_OUTPUTS 4
#else
#define SKINNY_OUTPUTS 2
#endif
#define SKINNY_ROWS 4 /* rows of x per block; LINEAR_ROWS_MAX rows go in blocks of these */

/* Outputs o..o+NO−1 for rows 0..NR−1 of x: every loaded vector of W meets NR rows of x and every
 * loaded vector of x meets NO rows of W. NO and NR are constants at every call, so the
 * accumulators are registers and the loops over them unroll. */
static inline __attribute__((always_inline)) void DT_KSFX(skinny_block)(float *restrict y, int ldy,
                                                                       const float *restrict x, int NR,
                                                                       const float *restrict w, int in, int o,
                                                                       int NO, size_t ahead) {
    vf acc[SKINNY_OUTPUTS][SKINNY_ROWS];
#pragma GCC unroll 4
    for (int j = 0; j < NO; j++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) acc[j][r] = vbc(0.0f);
    int k = 0;
    for (; k + VW <= in; k += VW) {
        vf xv[SKINNY_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) xv[r] = vld(x + (size_t)r * in + k);
#pragma GCC unroll 4
        for (int j = 0; j < NO; j++) {
            const vf wv = vld(w + (size_t)(o + j) * in + k);
            __builtin_prefetch(w + (size_t)(o + j) * in + k + ahead);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) acc[j][r] = vfma(wv, xv[r], acc[j][r]);
        }
    }
    if (k < in) {
        const int n = in - k;
        vf xv[SKINNY_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) xv[r] = vld_part(x + (size_t)r * in + k, n);
#pragma GCC unroll 4
        for (int j = 0; j < NO; j++) {
            const vf wv = vld_part(w + (size_t)(o + j) * in + k, n);
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) acc[j][r] = vfma(wv, xv[r], acc[j][r]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NO; j++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) y[(size_t)r * ldy + o + j] = vsum(acc[j][r]);
}

/* Rows r0.. of x in blocks of SKINNY_ROWS against outputs o..o+NO−1: the block of W stays in the
 * cache while each block of rows passes over it, and the next block (`ahead` floats on: the next
 * NO rows of W, 0 at the last block) is fetched meanwhile. Without that, memory sat idle while
 * the later blocks of rows re-read the block from the cache: 8 rows of the 32000 × 1024 LM head
 * took 1.9× the time of one (a W-sized read), and 1.4× with the next block fetched. */
static inline __attribute__((always_inline)) void DT_KSFX(skinny_outputs)(float *restrict y, int ldy,
                                                                         const float *restrict x, int nr,
                                                                         const float *restrict w, int in, int o,
                                                                         int NO, size_t ahead) {
    for (int r0 = 0; r0 < nr; r0 += SKINNY_ROWS) {
        const int left = nr - r0;
        float *yr = y + (size_t)r0 * ldy;
        const float *xr = x + (size_t)r0 * in;
        switch (left < SKINNY_ROWS ? left : SKINNY_ROWS) {
        case 1: DT_KSFX(skinny_block)(yr, ldy, xr, 1, w, in, o, NO, ahead); break;
        case 2: DT_KSFX(skinny_block)(yr, ldy, xr, 2, w, in, o, NO, ahead); break;
        case 3: DT_KSFX(skinny_block)(yr, ldy, xr, 3, w, in, o, NO, ahead); break;
        default: DT_KSFX(skinny_block)(yr, ldy, xr, 4, w, in, o, NO, ahead); break;
        }
    }
}

void DT_KSFX(linear_rows)(float *restrict y, int ldy, const float *restrict x, int nr, const float *restrict w,
                          int in, int o0, int o1) {
    int o = o0;
    for (; o + SKINNY_OUTPUTS <= o1; o += SKINNY_OUTPUTS) {
        const size_t ahead = o + 2 * SKINNY_OUTPUTS <= o1 ? (size_t)SKINNY_OUTPUTS * in : 0;
        DT_KSFX(skinny_outputs)(y, ldy, x, nr, w, in, o, SKINNY_OUTPUTS, ahead);
    }
    for (; o < o1; o++) DT_KSFX(skinny_outputs)(y, ldy, x, nr, w, in, o, 1, 0);
}

/* out[r·ldo + s] = q_r · k[s·stride .. +hd) for s < n, q_r = q + r·ldq, r < R: each key row
 * loaded once for R queries (the consecutive rows of a prompt chunk), every dot the operations
 * of one query alone, so a row's scores are the same bits in any R. */
static inline __attribute__((always_inline)) void DT_KSFX(dots_block)(float *restrict out, size_t ldo,
                                                                     const float *restrict q, size_t ldq,
                                                                     const float *restrict k, int n, size_t stride,
                                                                     int hd, int R) {
    for (int s = 0; s < n; s++) {
        const float *restrict row = k + (size_t)s * stride;
        vf acc[CACHE_ROWS_MAX];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) acc[r] = vbc(0.0f);
        int d = 0;
        for (; d + VW <= hd; d += VW) {
            const vf kv = vld(row + d);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r] = vfma(vld(q + r * ldq + d), kv, acc[r]);
        }
        if (d < hd) {
            const vf kv = vld_part(row + d, hd - d);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r] = vfma(vld_part(q + r * ldq + d, hd - d), kv, acc[r]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) out[r * ldo + s] = vsum(acc[r]);
    }
}

void DT_KSFX(cache_dots)(float *restrict out, size_t ldo, const float *restrict q, size_t ldq, int R,
                         const float *restrict k, int n, size_t stride, int hd) {
    switch (R) {
    case 1: DT_KSFX(dots_block)(out, ldo, q, ldq, k, n, stride, hd, 1); break;
    case 2: DT_KSFX(dots_block)(out, ldo, q, ldq, k, n, stride, hd, 2); break;
    case 3: DT_KSFX(dots_block)(out, ldo, q, ldq, k, n, stride, hd, 3); break;
    default: DT_KSFX(dots_block)(out, ldo, q, ldq, k, n, stride, hd, 4); break;
    }
}

/* out_r[0..hd) (+)= Σ_s w_r[s]·v[s·stride .. +hd) for s < n, out_r = out + r·ldo and
 * w_r = w + r·ldw, r < R; `accumulate` starts from out_r's values (the sum carried on over more
 * rows of v), else from 0. In passes of up to AXPY_VECTORS vectors of the head: each cached row's
 * part is read at once (adjacent cache lines) for AXPY_ROWS weight rows, into independent
 * accumulators. One vector per pass (the first version) read the rows 4 KiB apart once per vector
 * and waited on one multiply-add chain: a decoding step at ~800 positions spent 29% of its time
 * here. Every lane still sums over s in order, so the result is the same bits for any pass width,
 * any R, and a sum stopped and carried on. */
#define AXPY_VECTORS 4
#if VW == 16
#define AXPY_ROWS 4 /* 16 accumulators, 4 loaded vectors: the 32 registers */
#else
#define AXPY_ROWS 2 /* 8 and 4 of the 16 */
#endif
static inline __attribute__((always_inline)) void DT_KSFX(axpy_block)(float *restrict out, size_t ldo,
                                                                     const float *restrict w, size_t ldw,
                                                                     const float *restrict v, int n, size_t stride,
                                                                     int hd, int accumulate, int R) {
    for (int d0 = 0; d0 < hd; d0 += AXPY_VECTORS * VW) {
        const int width = hd - d0 < AXPY_VECTORS * VW ? hd - d0 : AXPY_VECTORS * VW;
        const int nv = (width + VW - 1) / VW, last = width - (nv - 1) * VW; /* lanes of the pass's last vector */
        vf acc[AXPY_ROWS][AXPY_VECTORS];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int j = 0; j < AXPY_VECTORS; j++)
                acc[r][j] = !accumulate || j >= nv ? vbc(0.0f)
                            : j == nv - 1       ? vld_part(out + r * ldo + d0 + j * VW, last)
                                                : vld(out + r * ldo + d0 + j * VW);
        if (nv == AXPY_VECTORS && last == VW) {
            for (int s = 0; s < n; s++) {
                const float *row = v + (size_t)s * stride + d0;
                vf vr[AXPY_VECTORS];
#pragma GCC unroll 4
                for (int j = 0; j < AXPY_VECTORS; j++) vr[j] = vld(row + j * VW);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const vf ws = vbc(w[r * ldw + s]);
#pragma GCC unroll 4
                    for (int j = 0; j < AXPY_VECTORS; j++) acc[r][j] = vfma(ws, vr[j], acc[r][j]);
                }
            }
        } else {
            for (int s = 0; s < n; s++) {
                const float *row = v + (size_t)s * stride + d0;
                for (int j = 0; j < nv; j++) {
                    const vf vj = j == nv - 1 ? vld_part(row + j * VW, last) : vld(row + j * VW);
#pragma GCC unroll 4
                    for (int r = 0; r < R; r++) acc[r][j] = vfma(vbc(w[r * ldw + s]), vj, acc[r][j]);
                }
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            for (int j = 0; j < nv - 1; j++) vst(out + r * ldo + d0 + j * VW, acc[r][j]);
            vst_part(out + r * ldo + d0 + (nv - 1) * VW, acc[r][nv - 1], last);
        }
    }
}

void DT_KSFX(cache_axpy)(float *restrict out, size_t ldo, const float *restrict w, size_t ldw, int R,
                         const float *restrict v, int n, size_t stride, int hd, int accumulate) {
    for (int r0 = 0; r0 < R; r0 += AXPY_ROWS) {
        float *o = out + r0 * ldo;
        const float *wr = w + r0 * ldw;
        switch (R - r0 < AXPY_ROWS ? R - r0 : AXPY_ROWS) {
        case 1: DT_KSFX(axpy_block)(o, ldo, wr, ldw, v, n, stride, hd, accumulate, 1); break;
#if AXPY_ROWS > 2
        case 2: DT_KSFX(axpy_block)(o, ldo, wr, ldw, v, n, stride, hd, accumulate, 2); break;
        case 3: DT_KSFX(axpy_block)(o, ldo, wr, ldw, v, n, stride, hd, accumulate, 3); break;
#endif
        default: DT_KSFX(axpy_block)(o, ldo, wr, ldw, v, n, stride, hd, accumulate, AXPY_ROWS); break;
        }
    }
}
