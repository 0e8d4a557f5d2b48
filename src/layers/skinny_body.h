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
                                                                       int NO) {
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
 * cache while each block of rows passes over it. */
static inline __attribute__((always_inline)) void DT_KSFX(skinny_outputs)(float *restrict y, int ldy,
                                                                         const float *restrict x, int nr,
                                                                         const float *restrict w, int in, int o,
                                                                         int NO) {
    for (int r0 = 0; r0 < nr; r0 += SKINNY_ROWS) {
        const int left = nr - r0;
        float *yr = y + (size_t)r0 * ldy;
        const float *xr = x + (size_t)r0 * in;
        switch (left < SKINNY_ROWS ? left : SKINNY_ROWS) {
        case 1: DT_KSFX(skinny_block)(yr, ldy, xr, 1, w, in, o, NO); break;
        case 2: DT_KSFX(skinny_block)(yr, ldy, xr, 2, w, in, o, NO); break;
        case 3: DT_KSFX(skinny_block)(yr, ldy, xr, 3, w, in, o, NO); break;
        default: DT_KSFX(skinny_block)(yr, ldy, xr, 4, w, in, o, NO); break;
        }
    }
}

void DT_KSFX(linear_rows)(float *restrict y, int ldy, const float *restrict x, int nr, const float *restrict w,
                          int in, int o0, int o1) {
    int o = o0;
    for (; o + SKINNY_OUTPUTS <= o1; o += SKINNY_OUTPUTS) DT_KSFX(skinny_outputs)(y, ldy, x, nr, w, in, o, SKINNY_OUTPUTS);
    for (; o < o1; o++) DT_KSFX(skinny_outputs)(y, ldy, x, nr, w, in, o, 1);
}

/* out[s] = q · k[s·stride .. +hd) for s < n */
void DT_KSFX(cache_dots)(float *restrict out, const float *restrict q, const float *restrict k, int n,
                         size_t stride, int hd) {
    for (int s = 0; s < n; s++) {
        const float *restrict row = k + (size_t)s * stride;
        vf acc = vbc(0.0f);
        int d = 0;
        for (; d + VW <= hd; d += VW) acc = vfma(vld(q + d), vld(row + d), acc);
        if (d < hd) acc = vfma(vld_part(q + d, hd - d), vld_part(row + d, hd - d), acc);
        out[s] = vsum(acc);
    }
}

/* out[0..hd) = Σ_s w[s]·v[s·stride .. +hd), accumulated in registers a vector at a time */
void DT_KSFX(cache_axpy)(float *restrict out, const float *restrict w, const float *restrict v, int n,
                         size_t stride, int hd) {
    for (int d = 0; d < hd; d += VW) {
        const int m = hd - d < VW ? hd - d : VW;
        vf acc = vbc(0.0f);
        if (m == VW)
            for (int s = 0; s < n; s++) acc = vfma(vbc(w[s]), vld(v + (size_t)s * stride + d), acc);
        else
            for (int s = 0; s < n; s++) acc = vfma(vbc(w[s]), vld_part(v + (size_t)s * stride + d, m), acc);
        vst_part(out + d, acc, m);
    }
}
