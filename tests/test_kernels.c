/* test_kernels.c — every kernel path this CPU supports (portable, AVX2, AVX-512) against the
 * plain scalar reference kernels (layers/elementwise_ref.c), for the elementwise kernels that
 * layers/kernels.h dispatches: RMSNorm (with and without weight), the fused residual add +
 * RMSNorm, its backward and weight gradient, SwiGLU forward and backward, RoPE, AdamW, the
 * few-row matrix product (linear_rows) and a query against a KV cache (cache_dots, cache_axpy). The
 * attention kernels' paths are held against attention.c in test_flash_attention.c.
 *
 * Row lengths cover every tail a vector of 4, 8 or 16 floats leaves (1..17, 31, 33), the model
 * widths (64..1408) and a long row; inputs are random normal, plus SwiGLU gates far in both
 * tails (where exp over- or underflows). Tolerances, relative to the larger magnitude (floor
 * 1e-30):
 *   - RoPE, AdamW, the residual sum and the weight-gradient row keep the reference's float
 *     operations one for one: ≤ 2^-23 (one rounding), which in practice is exact;
 *   - RMSNorm forward: the double sum of squares is reordered, which can move r by one float
 *     rounding: ≤ 4·2^-24 per element;
 *   - RMSNorm backward: Σ w·dy·x in float, reordered: the error of that sum (≤ C·2^-24 of Σ|terms|)
 *     enters through k·x, so dx is compared against C·2^-24·Σ|w·dy·x|·r³/C·max|x| + 4 ulp;
 *   - SwiGLU: the vector exp is within 2 ulp of expf: ≤ 2^-20 per element (a few roundings),
 *     relative to at least 1e-20: for g < −88 the reference's e^−g overflows to inf and gives
 *     −0, the kernels clamp the exponent and give g/(1 + e^88) ≈ −1e-36. The gate gradient has
 *     s·(1 + g·(1 − s)): 1 − s cancels for large g, which multiplies the error of s by |g|
 *     (up to ~20 with these gates): ≤ 2^-16 there.
 * The accumulating kernels start from random values so that "+=" is checked; their outputs are
 * compared relative to |start| + |term| (the sum may cancel). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "layers/kernels.h"
#include "testutil.h"

static const int lengths[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 256, 704, 1408, 4099};
#define NLEN (int)(sizeof lengths / sizeof lengths[0])

static void expect_close_floor(const char *what, const char *path, int n, const float *got, const float *ref,
                               float tol, float floor) {
    float err = tu_max_rel_diff(got, ref, (size_t)n, floor);
    if (!(err <= tol)) {
        fprintf(stderr, "%s [%s, n %d]: max relative difference %g > %g\n", what, path, n, err, tol);
        fail();
    }
}

static void expect_close(const char *what, const char *path, int n, const float *got, const float *ref, float tol) {
    expect_close_floor(what, path, n, got, ref, tol, 1e-30f);
}

/* each supported path, with its name */
#define FOR_EACH_PATH(k)                                                                                         \
    for (int isa_ = 0; isa_ < DT_ISA_COUNT; isa_++)                                                              \
        for (const dt_kernels *k = kernels_for((dt_isa)isa_); k; k = NULL)

static void test_paths_exist(void **state) {
    (void)state;
    /* the portable path always runs, and every path the CPU supports has a table */
    assert_non_null(kernels_for(DT_ISA_PORTABLE));
    for (int i = 0; i < DT_ISA_COUNT; i++)
        if (dt_isa_supported((dt_isa)i)) {
            assert_non_null(kernels_for((dt_isa)i));
            assert_int_equal(kernels_for((dt_isa)i)->isa, i);
        }
    assert_true(dt_isa_supported(kernels_active()->isa));
    fprintf(stderr, "CPU %s; best path %s; in use %s\n", dt_cpu()->model, dt_isa_name(dt_isa_best()),
            dt_isa_name(kernels_active()->isa));
}

static void test_rmsnorm(void **state) {
    (void)state;
    const dt_kernels *ref = kernels_reference();
    uint64_t rng = 17;
    for (int li = 0; li < NLEN; li++) {
        const int C = lengths[li];
        float *x = frand(C, 1.5f, &rng), *w = frand(C, 1.0f, &rng), *delta = frand(C, 1.0f, &rng);
        float *out_r = fnew(C), *sum_r = fnew(C), *out2_r = fnew(C);
        for (int weighted = 0; weighted <= 1; weighted++) {
            const float *wt = weighted ? w : NULL;
            float r_ref = ref->rmsnorm_row(out_r, x, wt, C, 1e-5f);
            float r2_ref = ref->residual_rmsnorm_row(sum_r, out2_r, x, delta, wt, C, 1e-5f);
            FOR_EACH_PATH(k) {
                const char *p = dt_isa_name(k->isa);
                float *out = fnan(C), *sum = fnan(C), *out2 = fnan(C);
                float r = k->rmsnorm_row(out, x, wt, C, 1e-5f);
                expect_close("rmsnorm_row rstd", p, 1, &r, &r_ref, 0x1p-22f);
                expect_close("rmsnorm_row", p, C, out, out_r, 0x1p-22f);
                float r2 = k->residual_rmsnorm_row(sum, out2, x, delta, wt, C, 1e-5f);
                expect_close("residual_rmsnorm_row sum", p, C, sum, sum_r, 0x1p-23f);
                expect_close("residual_rmsnorm_row rstd", p, 1, &r2, &r2_ref, 0x1p-22f);
                expect_close("residual_rmsnorm_row", p, C, out2, out2_r, 0x1p-22f);
                /* sum may alias x (the model adds the residual in place) */
                float *xs = fcopy(x, C);
                k->residual_rmsnorm_row(xs, out2, xs, delta, wt, C, 1e-5f);
                expect_close("residual_rmsnorm_row in place", p, C, xs, sum_r, 0x1p-23f);
                free(xs), free(out), free(sum), free(out2);
            }
        }
        free(x), free(w), free(delta), free(out_r), free(sum_r), free(out2_r);
    }
}

static void test_rmsnorm_backward(void **state) {
    (void)state;
    const dt_kernels *ref = kernels_reference();
    uint64_t rng = 29;
    for (int li = 0; li < NLEN; li++) {
        const int C = lengths[li];
        float *x = frand(C, 1.5f, &rng), *w = frand(C, 1.0f, &rng), *dy = frand(C, 1.0f, &rng);
        float *dx0 = frand(C, 1.0f, &rng), *dw0 = frand(C, 1.0f, &rng);
        const float r = 0.7f;
        for (int weighted = 0; weighted <= 1; weighted++) {
            const float *wt = weighted ? w : NULL;
            float *dx_r = fcopy(dx0, C), *dw_r = fcopy(dw0, C);
            ref->rmsnorm_backward_row(dx_r, dy, x, r, wt, C);
            ref->rmsnorm_dw_row(dw_r, dy, x, r, C);
            /* the bound on |dx − dx_ref| from the reordered float sum m = Σ w·dy·x */
            double terms = 0.0, xmax = 0.0;
            for (int c = 0; c < C; c++) {
                terms += fabs((wt ? wt[c] : 1.0) * dy[c] * x[c]);
                xmax = fmax(xmax, fabs(x[c]));
            }
            const double sum_err = C * 0x1p-24 * terms * r * r * r / C * xmax;
            FOR_EACH_PATH(k) {
                float *dx = fcopy(dx0, C), *dw = fcopy(dw0, C);
                k->rmsnorm_backward_row(dx, dy, x, r, wt, C);
                k->rmsnorm_dw_row(dw, dy, x, r, C);
                for (int c = 0; c < C; c++) {
                    double err = fabs((double)dx[c] - dx_r[c]);
                    double tol = sum_err + 4 * 0x1p-24 * (fabs(dx_r[c]) + fabs(dx0[c]) + 1e-30);
                    if (!(err <= tol)) {
                        fprintf(stderr, "rmsnorm_backward_row [%s, C %d] element %d: %g vs %g (tol %g)\n",
                                dt_isa_name(k->isa), C, c, dx[c], dx_r[c], tol);
                        fail();
                    }
                }
                expect_close("rmsnorm_dw_row", dt_isa_name(k->isa), C, dw, dw_r, 0x1p-23f);
                free(dx), free(dw);
            }
            free(dx_r), free(dw_r);
        }
        free(x), free(w), free(dy), free(dx0), free(dw0);
    }
}

static void test_swiglu(void **state) {
    (void)state;
    const dt_kernels *ref = kernels_reference();
    uint64_t rng = 31;
    for (int li = 0; li < NLEN; li++) {
        const int n = lengths[li];
        float *g = frand(n, 4.0f, &rng), *u = frand(n, 1.0f, &rng), *dh = frand(n, 1.0f, &rng);
        /* the tails of the exp: overflow of e^−g (g ≪ 0) and underflow (g ≫ 0) */
        static const float extreme[] = {-200.0f, -89.0f, -88.5f, -87.0f, 87.0f, 88.5f, 104.0f, 300.0f};
        for (int i = 0; i < n && i < 8; i++) g[n - 1 - i] = extreme[i];
        /* the backward writes its outputs (never reads them): they start as NaN */
        float *h_r = fnew(n), *dg_r = fnan(n), *du_r = fnan(n);
        ref->swiglu_forward(h_r, g, u, (size_t)n);
        ref->swiglu_backward(dg_r, du_r, dh, g, u, (size_t)n);
        FOR_EACH_PATH(k) {
            const char *p = dt_isa_name(k->isa);
            float *h = fnan(n), *dg = fnan(n), *du = fnan(n);
            k->swiglu_forward(h, g, u, (size_t)n);
            expect_close_floor("swiglu_forward", p, n, h, h_r, 0x1p-20f, 1e-20f);
            k->swiglu_backward(dg, du, dh, g, u, (size_t)n);
            /* relative to the terms' size, |dh·up| ≤ 1 (silu' crosses zero near g = −1.28) */
            expect_close_floor("swiglu_backward dgate", p, n, dg, dg_r, 0x1p-16f, 1.0f);
            expect_close_floor("swiglu_backward dup", p, n, du, du_r, 0x1p-20f, 1.0f);
            /* a NULL output is skipped, the other still right */
            float *du2 = fnan(n);
            k->swiglu_backward(NULL, du2, dh, g, u, (size_t)n);
            expect_close_floor("swiglu_backward dup alone", p, n, du2, du_r, 0x1p-20f, 1.0f);
            free(h), free(dg), free(du), free(du2);
        }
        free(g), free(u), free(dh), free(h_r), free(dg_r), free(du_r);
    }
}

static void test_rope(void **state) {
    (void)state;
    const dt_kernels *ref = kernels_reference();
    uint64_t rng = 43;
    static const int hds[] = {2, 6, 8, 16, 30, 32, 34, 64, 128, 256};
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        const int hd = hds[hi], half = hd / 2, nh = 3;
        float *row = frand((size_t)nh * hd, 1.0f, &rng), *cs = frand(half, 1.0f, &rng), *sn = frand(half, 1.0f, &rng);
        /* the whole half, and a span that starts inside it */
        for (int i0 = 0; i0 < half; i0 += half > 1 ? half / 2 + 1 : 1) {
            const int n = half - i0;
            float *r_ref = fcopy(row, (size_t)nh * hd);
            ref->rope_span(r_ref, nh, hd, i0, n, cs, sn);
            FOR_EACH_PATH(k) {
                float *r = fcopy(row, (size_t)nh * hd);
                k->rope_span(r, nh, hd, i0, n, cs, sn);
                expect_close("rope_span", dt_isa_name(k->isa), nh * hd, r, r_ref, 0x1p-23f);
                free(r);
            }
            free(r_ref);
        }
        free(row), free(cs), free(sn);
    }
}

static void test_adamw(void **state) {
    (void)state;
    const dt_kernels *ref = kernels_reference();
    uint64_t rng = 59;
    const adamw_coeffs co = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                             .bc1 = 1.0f - powf(0.9f, 3.0f), .bc2 = 1.0f - powf(0.95f, 3.0f), .lr = 3e-3f};
    for (int li = 0; li < NLEN; li++) {
        const int n = lengths[li];
        float *p = frand(n, 1.0f, &rng), *g = frand(n, 0.1f, &rng), *m = frand(n, 0.01f, &rng);
        float *v = frand(n, 0.01f, &rng);
        for (int i = 0; i < n; i++) v[i] = v[i] * v[i];
        unsigned char *decay = malloc((size_t)n);
        assert_non_null(decay);
        for (int i = 0; i < n; i++) decay[i] = (unsigned char)((i * 7 + n) % 3 != 0);
        float *p_r = fcopy(p, n), *m_r = fcopy(m, n), *v_r = fcopy(v, n);
        ref->adamw(p_r, g, m_r, v_r, decay, (size_t)n, &co);
        FOR_EACH_PATH(k) {
            const char *path = dt_isa_name(k->isa);
            float *pp = fcopy(p, n), *mm = fcopy(m, n), *vv = fcopy(v, n);
            k->adamw(pp, g, mm, vv, decay, (size_t)n, &co);
            expect_close("adamw p", path, n, pp, p_r, 0x1p-23f);
            expect_close("adamw m", path, n, mm, m_r, 0x1p-23f);
            expect_close("adamw v", path, n, vv, v_r, 0x1p-23f);
            free(pp), free(mm), free(vv);
        }
        free(p), free(g), free(m), free(v), free(decay), free(p_r), free(m_r), free(v_r);
    }
}

/* Σ x² (sumsq, the gradient norm) and Σ x (stream_sum, the bandwidth probe's read) against the
 * plain double sums: every length (the vector loops, the tails, several 1024-float blocks), values
 * of both signs over 12 binades, so that a float-only sum of a long span would lose the small ones
 * (and Σ x cancels: its bound is of Σ|x|); NaN propagates */
static double block_sum_of(const dt_kernels *k, int square, const float *x, size_t n) {
    return square ? k->sumsq(x, n) : k->stream_sum(x, n);
}

static void test_block_sums(void **state) {
    (void)state;
    const dt_kernels *ref = kernels_reference();
    uint64_t rng = 67;
    for (int square = 0; square < 2; square++)
        for (int li = 0; li <= NLEN; li++) {
            const int n = li < NLEN ? lengths[li] : (1 << 18) + 13;
            float *x = frand(n, 1.0f, &rng);
            double scale = 0;
            for (int i = 0; i < n; i++) {
                x[i] = ldexpf(x[i], (i * 5) % 12 - 6);
                scale += square ? (double)x[i] * x[i] : fabs((double)x[i]);
            }
            const double want = block_sum_of(ref, square, x, (size_t)n);
            FOR_EACH_PATH(k) {
                const double got = block_sum_of(k, square, x, (size_t)n);
                if (!(fabs(got - want) <= 1e-6 * scale)) {
                    fprintf(stderr, "%s [%s, n %d]: %.17g vs %.17g\n", square ? "sumsq" : "stream_sum",
                            dt_isa_name(k->isa), n, got, want);
                    fail();
                }
                const float keep = x[n / 2];
                x[n / 2] = NAN;
                assert_true(isnan(block_sum_of(k, square, x, (size_t)n)));
                x[n / 2] = keep;
            }
            free(x);
        }
}

/* The few-row matrix product: every row count 1..LINEAR_ROWS_MAX against the double-sum
 * reference, on widths that leave every vector tail, an output range that starts and ends off
 * the block of outputs, and outputs outside [o0, o1) left untouched. Float sums of `in` products
 * in another order: within in·2^-24 of Σ|x·w| (the rounding of a sum of that many terms). */
static void test_linear_rows(void **state) {
    (void)state;
    const dt_kernels *ref = kernels_reference();
    uint64_t rng = 77;
    static const int widths[] = {1, 3, 8, 15, 16, 17, 33, 70, 256, 1027};
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        const int in = widths[wi], out = 13, o0 = 1, o1 = 12, ldy = out + 3;
        float *x = frand((size_t)LINEAR_ROWS_MAX * in, 1.0f, &rng), *w = frand((size_t)out * in, 1.0f, &rng);
        float *absx = fnew((size_t)LINEAR_ROWS_MAX * in), *absw = fnew((size_t)out * in);
        for (int i = 0; i < LINEAR_ROWS_MAX * in; i++) absx[i] = fabsf(x[i]);
        for (int i = 0; i < out * in; i++) absw[i] = fabsf(w[i]);
        float *y_ref = fnew((size_t)LINEAR_ROWS_MAX * ldy), *mag = fnew((size_t)LINEAR_ROWS_MAX * ldy);
        ref->linear_rows(y_ref, ldy, x, LINEAR_ROWS_MAX, w, in, o0, o1);
        ref->linear_rows(mag, ldy, absx, LINEAR_ROWS_MAX, absw, in, o0, o1);
        FOR_EACH_PATH(k) {
            for (int nr = 1; nr <= LINEAR_ROWS_MAX; nr++) {
                float *y = fnan((size_t)LINEAR_ROWS_MAX * ldy);
                k->linear_rows(y, ldy, x, nr, w, in, o0, o1);
                for (int r = 0; r < LINEAR_ROWS_MAX; r++)
                    for (int o = 0; o < ldy; o++) {
                        const float got = y[(size_t)r * ldy + o], want = y_ref[(size_t)r * ldy + o];
                        if (r >= nr || o < o0 || o >= o1) {
                            if (!isnan(got)) fail_msg("linear_rows [%s]: wrote row %d output %d outside the range", dt_isa_name(k->isa), r, o);
                            continue;
                        }
                        const float tol = (float)in * 0x1p-24f * mag[(size_t)r * ldy + o] + 1e-30f;
                        if (!(fabsf(got - want) <= tol))
                            fail_msg("linear_rows [%s, in %d, rows %d]: row %d output %d: %g vs %g (tolerance %g)",
                                     dt_isa_name(k->isa), in, nr, r, o, (double)got, (double)want, (double)tol);
                    }
                free(y);
            }
        }
        free(x), free(w), free(absx), free(absw), free(y_ref), free(mag);
    }
}

/* One query against a cache's rows (strided: rows of a head inside [T, KV·hd]), every head width
 * tail: the float sums in another order than the double reference, within hd·2^-24 (dots) or
 * n·2^-24 (the weighted sum) of the sum of the magnitudes; an output beyond n or hd untouched. */
static void test_cache_products(void **state) {
    (void)state;
    const dt_kernels *ref = kernels_reference();
    uint64_t rng = 91;
    static const int hds[] = {1, 4, 7, 8, 16, 17, 64, 100, 128};
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        const int hd = hds[hi], n = 37;
        const size_t stride = (size_t)hd * 3 + 5;
        float *q = frand((size_t)hd, 1.0f, &rng), *kv = frand((size_t)n * stride, 1.0f, &rng), *w = frand((size_t)n, 1.0f, &rng);
        float *aq = fnew((size_t)hd), *akv = fnew((size_t)n * stride), *aw = fnew((size_t)n);
        for (int i = 0; i < hd; i++) aq[i] = fabsf(q[i]);
        for (size_t i = 0; i < (size_t)n * stride; i++) akv[i] = fabsf(kv[i]);
        for (int i = 0; i < n; i++) aw[i] = fabsf(w[i]);
        float *dots_ref = fnew((size_t)n), *dots_mag = fnew((size_t)n), *ax_ref = fnew((size_t)hd), *ax_mag = fnew((size_t)hd);
        ref->cache_dots(dots_ref, 0, q, 0, 1, kv, n, stride, hd);
        ref->cache_dots(dots_mag, 0, aq, 0, 1, akv, n, stride, hd);
        ref->cache_axpy(ax_ref, 0, w, 0, 1, kv, n, stride, hd, 0);
        ref->cache_axpy(ax_mag, 0, aw, 0, 1, akv, n, stride, hd, 0);
        FOR_EACH_PATH(k) {
            float *dots = fnan((size_t)n + 1), *ax = fnan((size_t)hd + 1);
            k->cache_dots(dots, 0, q, 0, 1, kv, n, stride, hd);
            k->cache_axpy(ax, 0, w, 0, 1, kv, n, stride, hd, 0);
            if (!isnan(dots[n]) || !isnan(ax[hd])) fail_msg("cache products [%s, hd %d]: wrote past the end", dt_isa_name(k->isa), hd);
            for (int s = 0; s < n; s++)
                if (!(fabsf(dots[s] - dots_ref[s]) <= (float)hd * 0x1p-24f * dots_mag[s] + 1e-30f))
                    fail_msg("cache_dots [%s, hd %d]: row %d: %g vs %g", dt_isa_name(k->isa), hd, s, (double)dots[s], (double)dots_ref[s]);
            for (int d = 0; d < hd; d++)
                if (!(fabsf(ax[d] - ax_ref[d]) <= (float)n * 0x1p-24f * ax_mag[d] + 1e-30f))
                    fail_msg("cache_axpy [%s, hd %d]: lane %d: %g vs %g", dt_isa_name(k->isa), hd, d, (double)ax[d], (double)ax_ref[d]);
            /* and each lane sums the positions in order, one multiply-add each (fused on the AVX
             * paths): however many vectors of the head a pass takes, the bits are those */
            for (int d = 0; d < hd; d++) {
                float in_order = 0;
                for (int s = 0; s < n; s++) {
                    const float v = kv[(size_t)s * stride + d];
                    in_order = k->isa == DT_ISA_PORTABLE ? w[s] * v + in_order : fmaf(w[s], v, in_order);
                }
                if (memcmp(&in_order, &ax[d], sizeof in_order) != 0)
                    fail_msg("cache_axpy [%s, hd %d]: lane %d: %a, the in-order sum %a", dt_isa_name(k->isa), hd, d,
                             (double)ax[d], (double)in_order);
            }
            free(dots), free(ax);
        }
        free(q), free(kv), free(w), free(aq), free(akv), free(aw), free(dots_ref), free(dots_mag), free(ax_ref), free(ax_mag);
    }
}

/* Several queries in one call (a prompt chunk's rows sharing each read of the cache): every row
 * the same bits as the query alone, on every path, for R = 1..CACHE_ROWS_MAX and odd strides; a
 * weighted sum stopped after m rows and carried on (accumulate) the same bits as one pass; the
 * reference's R rows and accumulation within the tolerance above; nothing written between rows. */
static void test_cache_products_rows(void **state) {
    (void)state;
    const dt_kernels *ref = kernels_reference();
    uint64_t rng = 93;
    static const int hds[] = {7, 16, 17, 64, 100};
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
        const int hd = hds[hi], n = 29, m = 11;
        const size_t stride = (size_t)hd * 2 + 3, ldq = (size_t)hd + 5, ldw = (size_t)n + 3;
        const size_t ldo_dots = (size_t)n + 2, ldo_ax = (size_t)hd + 2;
        float *q = frand(CACHE_ROWS_MAX * ldq, 1.0f, &rng), *kv = frand((size_t)n * stride, 1.0f, &rng);
        float *w = frand(CACHE_ROWS_MAX * ldw, 1.0f, &rng);
        FOR_EACH_PATH(k) {
            for (int R = 1; R <= CACHE_ROWS_MAX; R++) {
                float *dots = fnan(CACHE_ROWS_MAX * ldo_dots), *ax = fnan(CACHE_ROWS_MAX * ldo_ax);
                float *ax2 = fnan(CACHE_ROWS_MAX * ldo_ax), *dref = fnan(CACHE_ROWS_MAX * ldo_dots);
                float *aref = fnan(CACHE_ROWS_MAX * ldo_ax);
                k->cache_dots(dots, ldo_dots, q, ldq, R, kv, n, stride, hd);
                k->cache_axpy(ax, ldo_ax, w, ldw, R, kv, n, stride, hd, 0);
                /* the first m rows of v, then the other n − m carried on */
                k->cache_axpy(ax2, ldo_ax, w, ldw, R, kv, m, stride, hd, 0);
                k->cache_axpy(ax2, ldo_ax, w + m, ldw, R, kv + (size_t)m * stride, n - m, stride, hd, 1);
                ref->cache_dots(dref, ldo_dots, q, ldq, R, kv, n, stride, hd);
                ref->cache_axpy(aref, ldo_ax, w, ldw, R, kv, m, stride, hd, 0);
                ref->cache_axpy(aref, ldo_ax, w + m, ldw, R, kv + (size_t)m * stride, n - m, stride, hd, 1);
                for (int r = 0; r < R; r++) {
                    float one_d[n + 1], one_a[hd + 1];
                    one_d[n] = one_a[hd] = NAN;
                    k->cache_dots(one_d, 0, q + r * ldq, 0, 1, kv, n, stride, hd);
                    k->cache_axpy(one_a, 0, w + r * ldw, 0, 1, kv, n, stride, hd, 0);
                    if (memcmp(one_d, dots + r * ldo_dots, (size_t)n * sizeof(float)) != 0)
                        fail_msg("cache_dots [%s, hd %d, R %d]: row %d differs from the query alone", dt_isa_name(k->isa), hd, R, r);
                    if (memcmp(one_a, ax + r * ldo_ax, (size_t)hd * sizeof(float)) != 0)
                        fail_msg("cache_axpy [%s, hd %d, R %d]: row %d differs from the weights alone", dt_isa_name(k->isa), hd, R, r);
                    if (memcmp(one_a, ax2 + r * ldo_ax, (size_t)hd * sizeof(float)) != 0)
                        fail_msg("cache_axpy [%s, hd %d, R %d]: row %d carried on after %d rows differs from one pass",
                                 dt_isa_name(k->isa), hd, R, r, m);
                    for (int s = 0; s < n; s++) {
                        const float got = dots[r * ldo_dots + s], want = dref[r * ldo_dots + s];
                        if (!(fabsf(got - want) <= (float)hd * 0x1p-22f * (fabsf(want) + 1.0f) * 4.0f))
                            fail_msg("cache_dots [%s, hd %d, R %d]: [%d, %d] %g vs %g", dt_isa_name(k->isa), hd, R, r, s,
                                     (double)got, (double)want);
                    }
                    for (int d = 0; d < hd; d++) {
                        const float got = ax[r * ldo_ax + d], want = aref[r * ldo_ax + d];
                        if (!(fabsf(got - want) <= (float)n * 0x1p-22f * 8.0f))
                            fail_msg("cache_axpy [%s, hd %d, R %d]: [%d, %d] %g vs %g", dt_isa_name(k->isa), hd, R, r, d,
                                     (double)got, (double)want);
                    }
                    /* the gaps between rows and the rows past R untouched */
                    for (size_t i = (size_t)n; i < ldo_dots; i++)
                        if (!isnan(dots[r * ldo_dots + i])) fail_msg("cache_dots [%s]: wrote between rows", dt_isa_name(k->isa));
                    for (size_t i = (size_t)hd; i < ldo_ax; i++)
                        if (!isnan(ax[r * ldo_ax + i]) || !isnan(ax2[r * ldo_ax + i]))
                            fail_msg("cache_axpy [%s]: wrote between rows", dt_isa_name(k->isa));
                }
                for (size_t i = (size_t)R * ldo_dots; i < CACHE_ROWS_MAX * ldo_dots; i++)
                    if (!isnan(dots[i])) fail_msg("cache_dots [%s, R %d]: wrote past row R", dt_isa_name(k->isa), R);
                for (size_t i = (size_t)R * ldo_ax; i < CACHE_ROWS_MAX * ldo_ax; i++)
                    if (!isnan(ax[i])) fail_msg("cache_axpy [%s, R %d]: wrote past row R", dt_isa_name(k->isa), R);
                free(dots), free(ax), free(ax2), free(dref), free(aref);
            }
        }
        free(q), free(kv), free(w);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_sums), cmocka_unit_test(test_linear_rows), cmocka_unit_test(test_cache_products),
        cmocka_unit_test(test_cache_products_rows),
        cmocka_unit_test(test_paths_exist), cmocka_unit_test(test_rmsnorm), cmocka_unit_test(test_rmsnorm_backward),
        cmocka_unit_test(test_swiglu),      cmocka_unit_test(test_rope),    cmocka_unit_test(test_adamw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
