/* test_flash_attention.c — the fused kernels (flash_attention.c) against the reference kernel
 * (attention.c) on random shapes: forward out / pre / rstd, lse against a double-precision
 * log-sum-exp of the scores, o12 against the reference maps times V, and every gradient.
 *
 * Tolerances. Both kernels compute the same sums in float, in different orders (tiles, online
 * softmax rescaling, exp of s − lse instead of exp(s − max)/sum), so they differ by float
 * rounding, which grows with the length of the sums and with |lse| (P is recomputed as
 * exp(s·scale − lse), and lse carries an absolute rounding error ~|lse|·2^-24):
 *   - forward values (out, pre, rstd, o12, lse): max |fused − ref| ≤ 1e-5·(1 + max |ref|),
 *     i.e. ~100 float ulps of the largest value (measured errors are ~1e-7..1e-6);
 *   - gradients (what was added on top of a random start): max |fused − ref| ≤ 1e-4·max |ref|
 *     (relative to the largest gradient element, since single elements can cancel to ~0), plus
 *     2^-20·max|start| for the rounding of start + gradient itself;
 *     dλ, one long sum that can cancel: 1e-4·Σ|its terms|.
 * Gradient buffers start from random values, identical for both kernels, which checks that the
 * fused backward ACCUMULATES; outputs and scratch start as NaN so that anything read before it is
 * written shows up; scratch is allocated at exactly flash_attention_scratch_floats(s, threads);
 * dout is checked to be unchanged; NULL gradient outputs are left alone. Every case runs the
 * fused kernel with 1 and with 2 OpenMP threads (up to 4 in test_more_threads_than_groups, where
 * the backward splits query blocks over threads), and the runs are also compared with the
 * 1-thread one, on every kernel path this CPU supports (portable, AVX2, AVX-512: layers/kernels.h).
 * Each test prints its worst error/tolerance ratio (the margin left); FA_VERBOSE=1 prints them
 * all. */
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "difftrans.h"
#include "layers/flash_attention_tiles.h"
#include "layers/kernels.h"
#include "layers/layers.h"
#include "testutil.h"


/* ------------------------------------------------------------------ helpers */

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* max |a − b| (NaN counts as infinite) */
static float max_diff(const float *a, const float *b, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (d != d) return INFINITY;
        m = fmaxf(m, d);
    }
    return m;
}

/* run_case_with runs every case on 1 .. this many OpenMP threads */
static int max_threads_tested = 2;

/* worst err / tol seen, forward and backward, printed by each test (how much margin is left) */
static double worst_fwd, worst_bwd;

static void report_margin(const char *test) {
    fprintf(stderr, "  %s: worst error / tolerance: forward %.3g, backward %.3g\n", test, worst_fwd, worst_bwd);
    worst_fwd = worst_bwd = 0.0;
}

static void check_forward_tensor(const char *what, const char *label, const float *got, const float *ref,
                                 size_t n) {
    float err = max_diff(got, ref, n), tol = 1e-5f * (1.0f + max_abs(ref, n));
    if (err / tol > worst_fwd) worst_fwd = err / tol;
    if (getenv("FA_VERBOSE")) fprintf(stderr, "%s: %s ratio %g\n", label, what, err / tol);
    if (!(err <= tol)) {
        fprintf(stderr, "%s: %s max|diff| %g > tol %g\n", label, what, err, tol);
        fail();
    }
}

/* gradients: compare what each kernel ADDED to the same random start. The floor 2^-20·max|start|
 * is the rounding of start + added itself (a few ulps of the start), which subtracting the start
 * back cannot undo: it matters only where the true gradient is ~0 (T = 1, where dq = dk = 0). */
static void check_grad(const char *what, const char *label, const float *got, const float *ref, const float *start,
                       size_t n) {
    float *g = fcopy(got, n), *r = fcopy(ref, n);
    for (size_t i = 0; i < n; i++) g[i] -= start[i], r[i] -= start[i];
    float err = max_diff(g, r, n), tol = 1e-4f * max_abs(r, n) + 0x1p-20f * max_abs(start, n);
    if (err / tol > worst_bwd) worst_bwd = err / tol;
    if (getenv("FA_VERBOSE")) fprintf(stderr, "%s: %s ratio %g\n", label, what, err / tol);
    if (!(err <= tol)) {
        fprintf(stderr, "%s: %s max|diff| %g > tol %g (max|ref| %g)\n", label, what, err, tol, max_abs(r, n));
        fail();
    }
    free(g);
    free(r);
}

typedef struct {
    int B, T, H, KV, hd, diff, subln;
    float lambda, lambda_init;
    float qk_std; /* std of q and k: larger → peakier maps */
    int null_grads; /* 1: dq and dk NULL; 2: dv NULL */
} fcase;

/* the ablations of a case (no_norm: DIFF only) */
typedef struct {
    int alibi, softmax1, no_norm;
} fablation;

/* log-sum-exp of the scaled causal scores, in double from q and k directly */
static void lse_double(float *lse, const float *q, const float *k, const attention_shape *s) {
    const int T = s->T, H = s->H, KV = s->KV, hd = s->hd, G = H / KV;
    const float scale = (float)(1.0 / sqrt((double)hd));
    for (int b = 0; b < s->B; b++)
        for (int i = 0; i < H; i++)
            for (int t = 0; t < T; t++) {
                const float *qt = q + ((size_t)b * T + t) * H * hd + (size_t)i * hd;
                /* softmax1: a virtual key of score 0 joins the max and the sum */
                double mx = s->softmax1 ? 0.0 : -INFINITY, sum = 0.0;
                double *sc = malloc(sizeof(double) * (size_t)(t + 1));
                assert_non_null(sc);
                for (int u = 0; u <= t; u++) {
                    const float *ku = k + ((size_t)b * T + u) * KV * hd + (size_t)(i / G) * hd;
                    double d = 0.0;
                    for (int c = 0; c < hd; c++) d += (double)qt[c] * ku[c];
                    sc[u] = d * scale - (s->alibi ? (double)s->alibi[i] * (t - u) : 0.0);
                    mx = sc[u] > mx ? sc[u] : mx;
                }
                if (s->softmax1) sum = exp(-mx);
                for (int u = 0; u <= t; u++) sum += exp(sc[u] - mx);
                lse[((size_t)b * H + i) * T + t] = (float)(mx + log(sum));
                free(sc);
            }
}

/* o12 from the reference maps: o_m[b, t, j] = A_{j + m·Hd}[t, :]·V_j, in double */
static void o12_from_maps(float *o12, const float *att, const float *v, const attention_shape *s) {
    const int T = s->T, H = s->H, KV = s->KV, hd = s->hd, G = H / KV, Hd = H / 2, w2 = 2 * hd;
    for (int b = 0; b < s->B; b++)
        for (int j = 0; j < Hd; j++)
            for (int m = 0; m < 2; m++)
                for (int t = 0; t < T; t++) {
                    const float *a = att + (((size_t)b * H + j + m * Hd) * T + t) * T;
                    float *o = o12 + ((((size_t)b * T + t) * Hd + j) * 2 + m) * w2;
                    for (int c = 0; c < w2; c++) {
                        int g = (j + (c / hd) * Hd) / G;
                        double acc = 0.0;
                        for (int u = 0; u <= t; u++)
                            acc += (double)a[u] * v[((size_t)b * T + u) * KV * hd + (size_t)g * hd + c % hd];
                        o[c] = (float)acc;
                    }
                }
}

/* a gradient written by set_grads: got + start against ref, which added onto start */
static void check_set_grad(const char *what, const char *label, float *got, const float *ref, const float *start,
                           size_t n) {
    for (size_t i = 0; i < n; i++) got[i] += start[i];
    check_grad(what, label, got, ref, start, n);
}

/* Σ over (b, t, j, c) of |dU_c · o2_c|, with dU from the per-head norm backward (in double) */
static double dlambda_magnitude(const float *dout, const float *pre, const float *rstd, const float *o12,
                                const attention_shape *s) {
    const int T = s->T, Hd = s->H / 2, w2 = 2 * s->hd, ld = s->H * s->hd;
    const double alpha = 1.0 - s->lambda_init;
    double total = 0.0;
    for (size_t n = 0; n < (size_t)s->B * T; n++)
        for (int j = 0; j < Hd; j++) {
            const float *u = pre + n * ld + (size_t)j * w2, *dy = dout + n * ld + (size_t)j * w2;
            const float *o2 = o12 + (n * Hd + j) * 2 * w2 + w2;
            double r = rstd[n * Hd + j], m = 0.0;
            for (int c = 0; c < w2; c++) m += (s->subln ? s->subln[c] : 1.0) * dy[c] * u[c];
            for (int c = 0; c < w2; c++) {
                double du = s->no_norm ? alpha * dy[c]
                                       : alpha * r * ((s->subln ? s->subln[c] : 1.0) * dy[c] - r * r * m / w2 * u[c]);
                total += fabs(du * o2[c]);
            }
        }
    return total;
}

static void run_case_with(const fcase *c, const fablation *a, uint64_t seed) {
    uint64_t rng = seed;
    const int B = c->B, T = c->T, H = c->H, KV = c->KV, hd = c->hd, Hd = H / 2, w2 = 2 * hd;
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nmap = (size_t)B * H * T * T;
    const size_t nrs = (size_t)B * T * (H / 2 > 0 ? H / 2 : 1), no12 = (size_t)B * T * Hd * 2 * w2;
    char label[200];
    snprintf(label, sizeof label, "B%d T%d H%d KV%d hd%d %s%s%s%s%s lambda %g init %g qk %g null %d", B, T, H, KV,
             hd, c->diff ? "diff" : "base", c->subln ? " subln" : "", a->alibi ? " alibi" : "",
             a->softmax1 ? " softmax1" : "", a->no_norm ? " no-norm" : "", c->lambda, c->lambda_init, c->qk_std,
             c->null_grads);

    float *q = frand(nq, c->qk_std, &rng), *k = frand(nk, c->qk_std, &rng), *v = frand(nk, 1.0f, &rng);
    float *subln = c->subln ? frand(w2, 0.5f, &rng) : NULL;
    if (subln)
        for (int i = 0; i < w2; i++) subln[i] += 1.0f;
    /* ALiBi: a different slope for every query head (from 2^-8 to 1), so that a wrong index shows */
    float *slopes = a->alibi ? fnew((size_t)H) : NULL;
    for (int i = 0; slopes && i < H; i++) slopes[i] = ldexpf(1.0f, -8 + (8 * i) / (H > 1 ? H - 1 : 1));
    attention_shape s = {.B = B, .T = T, .H = H, .KV = KV, .hd = hd, .diff = c->diff, .lambda = c->lambda,
                         .lambda_init = c->lambda_init, .eps = 1e-5f, .subln = subln, .alibi = slopes,
                         .softmax1 = a->softmax1, .no_norm = a->no_norm};

    /* reference */
    float *out_r = fnan(nq), *att = fnan(nmap), *pre_r = fnan(nq), *rstd_r = fnan(nrs);
    attention_forward(out_r, att, pre_r, rstd_r, q, k, v, &s);
    float *dout = frand(nq, 1.0f, &rng), *dout_copy = fcopy(dout, nq);
    float *dq0 = frand(nq, 1.0f, &rng), *dk0 = frand(nk, 1.0f, &rng), *dv0 = frand(nk, 1.0f, &rng);
    float *dsub0 = frand(w2, 1.0f, &rng);
    const float dl0 = 0.375f;
    float *dq_r = fcopy(dq0, nq), *dk_r = fcopy(dk0, nk), *dv_r = fcopy(dv0, nk), *dsub_r = fcopy(dsub0, w2);
    float dl_r = dl0;
    float *ref_scratch = fnan(nmap);
    const int no_qk = c->null_grads == 1, no_v = c->null_grads == 2;
    attention_backward(no_qk ? NULL : dq_r, no_qk ? NULL : dk_r, no_v ? NULL : dv_r, &dl_r, dsub_r, dout, att,
                       pre_r, rstd_r, q, k, v, ref_scratch, &s);
    free(ref_scratch);
    attention_shape set = s; /* the same with dq, dk, dv written instead of added */
    set.set_grads = 1;

    float *lse_d = fnew((size_t)B * H * T);
    lse_double(lse_d, q, k, &s);
    float *o12_r = NULL;
    if (c->diff) {
        o12_r = fnew(no12);
        o12_from_maps(o12_r, att, v, &s);
    }

    /* DIFF runs the fused kernels' default path for T, and the online path too where the default
     * is the row-block path (T ≤ DIFF_ROWS_MAX_T) */
    const int default_online = flash_attention_uses_o12(&s);
    for (int path = 0; path <= (c->diff && !default_online); path++) {
    s.diff_online = set.diff_online = path;
    const int uses_o12 = flash_attention_uses_o12(&s);
    assert_true(uses_o12 == (c->diff && (path || T > DIFF_ROWS_MAX_T)));
    for (int isa = 0; isa < DT_ISA_COUNT; isa++) {
    const dt_kernels *kern = kernels_for((dt_isa)isa);
    if (!kern) continue;
    float *keep_out = NULL, *keep_dq = NULL, *keep_dk = NULL, *keep_dv = NULL;
    for (int threads = 1; threads <= max_threads_tested; threads++) {
        char lab[320];
        snprintf(lab, sizeof lab, "%s [%s, %d thread%s%s]", label, dt_isa_name((dt_isa)isa), threads,
                 threads > 1 ? "s" : "", !c->diff ? "" : uses_o12 ? ", online" : ", row blocks");
        omp_set_num_threads(threads);
        size_t ns = flash_attention_scratch_floats(&s, threads);
        float *scratch = fnan(ns);
        float *out = fnan(nq), *lse = fnan((size_t)B * H * T);
        float *o12 = c->diff ? fnan(no12) : NULL, *pre = c->diff ? fnan(nq) : NULL, *rstd = c->diff ? fnan(nrs) : NULL;
        kern->attention_forward(out, lse, o12, pre, rstd, q, k, v, scratch, &s);
        check_forward_tensor("out", lab, out, out_r, nq);
        check_forward_tensor("lse", lab, lse, lse_d, (size_t)B * H * T);
        if (c->diff) {
            /* pre is only defined on the Hd·2hd = H·hd columns, the whole row */
            check_forward_tensor("pre", lab, pre, pre_r, nq);
            check_forward_tensor("rstd", lab, rstd, rstd_r, nrs);
            if (uses_o12) {
                check_forward_tensor("o12", lab, o12, o12_r, no12);
            } else { /* the row-block path neither writes o12 nor (NaN gradients otherwise) reads it */
                for (size_t i = 0; i < no12; i++) assert_true(isnan(o12[i]));
            }
        }

        float *dq = fcopy(dq0, nq), *dk = fcopy(dk0, nk), *dv = fcopy(dv0, nk), *dsub = fcopy(dsub0, w2);
        float dl = dl0;
        for (size_t i = 0; i < ns; i++) scratch[i] = NAN;
        kern->attention_backward(no_qk ? NULL : dq, no_qk ? NULL : dk, no_v ? NULL : dv, &dl, dsub, dout, out, lse,
                                 o12, pre, rstd, q, k, v, scratch, &s);
        assert_memory_equal(dout, dout_copy, nq * sizeof(float));
        if (no_qk) {
            assert_memory_equal(dq, dq0, nq * sizeof(float));
            assert_memory_equal(dk, dk0, nk * sizeof(float));
        } else {
            check_grad("dq", lab, dq, dq_r, dq0, nq);
            check_grad("dk", lab, dk, dk_r, dk0, nk);
        }
        if (no_v)
            assert_memory_equal(dv, dv0, nk * sizeof(float));
        else
            check_grad("dv", lab, dv, dv_r, dv0, nk);
        if (c->diff) {
            /* dλ = −Σ over (b, t, j, c) of dU·o2: a long sum that can cancel, so relative to
             * the sum of its terms' magnitudes (each kernel's float error is below ~2hd·2^-24 of
             * it: the per-row dot products, or the reference's dD = dU·Vᵀ) */
            float err = fabsf((dl - dl0) - (dl_r - dl0)), tol = 1e-4f * (float)dlambda_magnitude(dout, pre_r, rstd_r, o12_r, &s);
            if (err / tol > worst_bwd) worst_bwd = err / tol;
            if (getenv("FA_VERBOSE")) fprintf(stderr, "%s: dlambda ratio %g\n", lab, err / tol);
            if (!(err <= tol)) {
                fprintf(stderr, "%s: dlambda %g vs %g (err %g > tol %g)\n", lab, dl - dl0, dl_r - dl0, err, tol);
                fail();
            }
            if (c->subln)
                check_grad("dsubln", lab, dsub, dsub_r, dsub0, w2);
            else
                assert_memory_equal(dsub, dsub0, w2 * sizeof(float)); /* no weight: left alone */
        } else {
            assert_true(dl == dl0);
            assert_memory_equal(dsub, dsub0, w2 * sizeof(float));
        }

        /* set_grads: the same gradients written instead of added (NaN before: every element is
         * written, none read); set + start against the reference's accumulation onto start, so
         * with the same tolerance; dλ and dsubln exactly as without */
        float *dq_s = fnan(nq), *dk_s = fnan(nk), *dv_s = fnan(nk), *dsub_s = fcopy(dsub0, w2);
        float dl_s = dl0;
        for (size_t i = 0; i < ns; i++) scratch[i] = NAN;
        kern->attention_backward(no_qk ? NULL : dq_s, no_qk ? NULL : dk_s, no_v ? NULL : dv_s, &dl_s, dsub_s, dout,
                                 out, lse, o12, pre, rstd, q, k, v, scratch, &set);
        if (!no_qk) {
            check_set_grad("dq (set_grads)", lab, dq_s, dq_r, dq0, nq);
            check_set_grad("dk (set_grads)", lab, dk_s, dk_r, dk0, nk);
        }
        if (!no_v) check_set_grad("dv (set_grads)", lab, dv_s, dv_r, dv0, nk);
        assert_memory_equal(dsub_s, dsub, w2 * sizeof(float));
        assert_true(dl_s == dl);
        free(dq_s), free(dk_s), free(dv_s), free(dsub_s);

        /* 1 and more threads agree with each other to the same tolerance */
        if (threads == 1) {
            keep_out = fcopy(out, nq), keep_dq = fcopy(dq, nq), keep_dk = fcopy(dk, nk), keep_dv = fcopy(dv, nk);
        } else {
            check_forward_tensor("out (vs 1 thread)", lab, out, keep_out, nq);
            if (!no_qk) {
                check_grad("dq (vs 1 thread)", lab, dq, keep_dq, dq0, nq);
                check_grad("dk (vs 1 thread)", lab, dk, keep_dk, dk0, nk);
            }
            if (!no_v) check_grad("dv (vs 1 thread)", lab, dv, keep_dv, dv0, nk);
        }
        free(scratch), free(out), free(lse), free(o12), free(pre), free(rstd);
        free(dq), free(dk), free(dv), free(dsub);
    }
    free(keep_out), free(keep_dq), free(keep_dk), free(keep_dv);
    }
    }
    omp_set_num_threads(2);
    free(slopes);
    free(q), free(k), free(v), free(subln), free(out_r), free(att), free(pre_r), free(rstd_r);
    free(dout), free(dout_copy), free(dq0), free(dk0), free(dv0), free(dsub0);
    free(dq_r), free(dk_r), free(dv_r), free(dsub_r), free(lse_d), free(o12_r);
}

static void run_case(const fcase *c, uint64_t seed) { run_case_with(c, &(fablation){0}, seed); }

static void run_cases(const fcase *cases, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) run_case(&cases[i], seed + 7919u * (uint64_t)i);
}

/* ------------------------------------------------------------------ tests */

/* The vector exp used for the probabilities against libm expf over the whole range that occurs
 * (arguments ≤ 0 down to the underflow threshold, plus a little above 0): relative error within
 * 2 float ulps (2^-22); below ln(FLT_MIN) it returns 0 where expf returns a subnormal < 1.2e-38;
 * −inf gives exactly 0. */
static void exp_accuracy(const dt_kernels *kern) {
    enum { N = 1 << 20 };
    float *x = fnew(N), *y = fnew(N);
    for (int i = 0; i < N; i++) x[i] = -87.3f + 88.3f * (float)i / (float)(N - 1); /* [-87.3, 1] */
    kern->exp(y, x, N);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double ref = exp((double)x[i]);
        double rel = fabs((double)y[i] - ref) / ref;
        worst = rel > worst ? rel : worst;
    }
    /* expf itself is within 0.5 ulp of the exact value; ours within 2 ulp of it */
    fprintf(stderr, "exp [%s]: worst relative error vs exact %.3g (float ulp 1.19e-7)\n", dt_isa_name(kern->isa),
            worst);
    assert_true(worst <= 2.0 * 1.1920929e-7);
    float special[11] = {-INFINITY, -1000.0f, -104.0f, -88.0f, -87.4f, 0.0f, -0.0f, 1e-9f, -1e-9f, 0.5f, -0.5f};
    float ys[11];
    kern->exp(ys, special, 11);
    for (int i = 0; i < 5; i++) assert_true(ys[i] >= 0.0f && ys[i] < 1.2e-38f);
    assert_true(ys[0] == 0.0f);
    assert_true(ys[5] == 1.0f && ys[6] == 1.0f);
    for (int i = 7; i < 11; i++) assert_true(fabsf(ys[i] - expf(special[i])) <= 2.4e-7f * expf(special[i]));
    free(x);
    free(y);
}

static void test_exp_accuracy(void **state) {
    (void)state;
    for (int isa = 0; isa < DT_ISA_COUNT; isa++)
        if (kernels_for((dt_isa)isa)) exp_accuracy(kernels_for((dt_isa)isa));
}

static void test_base_small(void **state) {
    (void)state;
    const fcase cases[] = {
        {1, 1, 1, 1, 8, 0, 0, 0, 0, 1.0f, 0},   {1, 2, 2, 1, 16, 0, 0, 0, 0, 1.0f, 0},
        {2, 5, 4, 2, 8, 0, 0, 0, 0, 1.0f, 0},   {3, 17, 3, 3, 32, 0, 0, 0, 0, 1.0f, 0},
        {1, 63, 2, 2, 64, 0, 0, 0, 0, 1.0f, 0}, {2, 64, 4, 1, 16, 0, 0, 0, 0, 1.0f, 0},
        {1, 65, 4, 4, 32, 0, 0, 0, 0, 1.0f, 0}, {2, 130, 6, 2, 8, 0, 0, 0, 0, 1.5f, 0},
        {1, 100, 2, 1, 12, 0, 0, 0, 0, 1.0f, 0}, /* hd not a multiple of 8 */
        {2, 40, 3, 1, 5, 0, 0, 0, 0, 1.0f, 0},   /* hd 5: scalar tails only */
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]), 11);
    report_margin(__func__);
}

static void test_base_gqa_peaky(void **state) {
    (void)state;
    /* qk std 3: scores with std ~9, nearly one-hot maps and large |lse| */
    const fcase cases[] = {
        {2, 150, 8, 2, 32, 0, 0, 0, 0, 3.0f, 0},
        {1, 200, 4, 1, 64, 0, 0, 0, 0, 2.0f, 0},
        {3, 70, 8, 8, 16, 0, 0, 0, 0, 1.0f, 0},
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]), 23);
    report_margin(__func__);
}

static void test_diff_small(void **state) {
    (void)state;
    const fcase cases[] = {
        {1, 1, 2, 1, 8, 1, 0, 0.8f, 0.8f, 1.0f, 0},     {1, 2, 2, 2, 16, 1, 1, 0.5f, 0.2f, 1.0f, 0},
        {2, 7, 4, 2, 8, 1, 1, -0.3f, 0.2f, 1.0f, 0},    {3, 33, 4, 4, 32, 1, 0, 1.3f, 0.8f, 1.0f, 0},
        {1, 64, 2, 1, 64, 1, 1, 0.8f, 0.5f, 1.0f, 0},   {2, 65, 4, 1, 16, 1, 1, 0.8f, 0.8f, 1.0f, 0},
        {1, 129, 6, 3, 8, 1, 1, 0.6f, 0.4f, 1.0f, 0},   /* KV odd: one ownership group per batch */
        {2, 90, 6, 1, 12, 1, 1, 0.7f, 0.3f, 1.0f, 0},   /* hd not a multiple of 8 */
        {1, 50, 2, 2, 6, 1, 0, 0.9f, 0.1f, 1.0f, 0},    /* hd 6 */
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]), 37);
    report_margin(__func__);
}

static void test_diff_gqa_peaky(void **state) {
    (void)state;
    const fcase cases[] = {
        {2, 150, 8, 2, 32, 1, 1, 0.8f, 0.8f, 3.0f, 0},
        {1, 200, 4, 4, 64, 1, 0, 1.2f, 0.5f, 2.0f, 0},
        {3, 70, 8, 8, 16, 1, 1, -0.5f, 0.2f, 1.0f, 0},
        {1, 100, 8, 4, 32, 1, 1, 0.8f, 0.8f, 1.0f, 0},
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]), 41);
    report_margin(__func__);
}

/* T on both sides of every tile boundary (query blocks of 96, key tiles of 48 in the kernel, and
 * 64 for good measure), and head sizes at the edges of the vector code: 1, 2, 3, 128 */
static void test_tile_boundaries(void **state) {
    (void)state;
    static const int Ts[] = {47, 48, 49, 63, 64, 65, 95, 96, 97, 143, 144, 145, 191, 192, 193, 287, 289};
    int n = 0;
    fcase cases[2 * (int)(sizeof Ts / sizeof Ts[0]) + 6];
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
        cases[n++] = (fcase){1 + (int)(i % 2), Ts[i], 2, 1, 16, 0, 0, 0, 0, 1.0f, 0};
        cases[n++] = (fcase){1, Ts[i], 4, 2, 8, 1, (int)(i % 2), 0.8f, 0.3f, 1.5f, 0};
    }
    cases[n++] = (fcase){2, 50, 2, 1, 1, 0, 0, 0, 0, 1.0f, 0};
    cases[n++] = (fcase){1, 99, 3, 3, 3, 0, 0, 0, 0, 1.0f, 0};
    cases[n++] = (fcase){1, 100, 2, 1, 128, 0, 0, 0, 0, 1.0f, 0};
    cases[n++] = (fcase){1, 100, 2, 1, 2, 1, 1, 0.5f, 0.5f, 1.0f, 0};
    cases[n++] = (fcase){1, 99, 4, 2, 3, 1, 0, 0.5f, 0.5f, 1.0f, 0};
    cases[n++] = (fcase){1, 97, 2, 2, 128, 1, 1, 0.8f, 0.8f, 1.0f, 0};
    run_cases(cases, n, 97);
    report_margin(__func__);
}

/* the ablations: ALiBi, softmax1 and (DIFF) no per-head norm, alone and together, across the
 * tiles, with GQA, peaky maps and a length where ALiBi's biases reach hundreds */
static void test_ablations(void **state) {
    (void)state;
    static const struct {
        fcase c;
        fablation a;
    } cases[] = {
        {{2, 130, 4, 2, 16, 0, 0, 0, 0, 1.0f, 0}, {1, 0, 0}},       {{1, 97, 4, 1, 8, 0, 0, 0, 0, 1.0f, 0}, {0, 1, 0}},
        {{2, 150, 8, 2, 32, 0, 0, 0, 0, 3.0f, 0}, {1, 1, 0}},       {{1, 49, 3, 3, 5, 0, 0, 0, 0, 1.0f, 0}, {1, 1, 0}},
        {{2, 130, 4, 2, 16, 1, 1, 0.8f, 0.3f, 1.0f, 0}, {1, 0, 0}}, {{1, 97, 4, 1, 8, 1, 1, 0.5f, 0.5f, 1.0f, 0}, {0, 1, 0}},
        {{2, 100, 4, 2, 16, 1, 0, 0.8f, 0.2f, 1.0f, 0}, {0, 0, 1}}, {{1, 129, 6, 3, 8, 1, 0, 0.6f, 0.4f, 2.0f, 0}, {1, 1, 1}},
        {{2, 70, 4, 2, 12, 1, 0, 0.8f, 0.5f, 1.0f, 1}, {1, 1, 1}},  {{2, 70, 4, 2, 12, 0, 0, 0, 0, 1.0f, 2}, {1, 1, 0}},
        {{1, 1, 2, 1, 8, 1, 0, 0.8f, 0.8f, 1.0f, 0}, {1, 1, 1}},    {{1, 600, 2, 1, 16, 0, 0, 0, 0, 1.0f, 0}, {1, 1, 0}},
        {{1, 400, 2, 2, 16, 1, 0, 0.8f, 0.5f, 1.0f, 0}, {1, 0, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case_with(&cases[i].c, &cases[i].a, 79 + 7919u * i);
    report_margin(__func__);
}

/* gradient outputs that are NULL are skipped, the others still right */
static void test_null_grads(void **state) {
    (void)state;
    const fcase cases[] = {
        {2, 70, 4, 2, 16, 0, 0, 0, 0, 1.0f, 1}, {2, 70, 4, 2, 16, 0, 0, 0, 0, 1.0f, 2},
        {2, 70, 4, 2, 16, 1, 1, 0.8f, 0.5f, 1.0f, 1}, {2, 70, 4, 2, 16, 1, 1, 0.8f, 0.5f, 1.0f, 2},
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]), 53);
    report_margin(__func__);
}

static void test_long(void **state) {
    (void)state;
    const fcase cases[] = {
        {1, 700, 2, 1, 32, 0, 0, 0, 0, 1.0f, 0},
        {1, 700, 2, 2, 64, 1, 1, 0.8f, 0.8f, 1.0f, 0},
        {1, 1500, 2, 1, 16, 0, 0, 0, 0, 1.5f, 0},
        {1, 1500, 2, 1, 32, 1, 1, 0.8f, 0.5f, 1.0f, 0},
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]), 67);
    report_margin(__func__);
}

/* DIFF on both sides of the row-block path's limit (T = DIFF_ROWS_MAX_T: row blocks, and
 * online forced; T + 1: online), with GQA, KV = 1, KV odd, the ablations, peaky maps, T not a
 * multiple of the query block, and null gradients */
static void test_rows_edge(void **state) {
    (void)state;
    const int E = DIFF_ROWS_MAX_T;
    /* (no_norm without subln: the model's configurations never have both) */
    static const fablation none = {0, 0, 0}, all = {1, 1, 1}, alibi = {1, 0, 0}, sm1 = {0, 1, 1};
    const struct {
        fcase c;
        const fablation *a;
    } cases[] = {
        {{1, E, 4, 2, 16, 1, 1, 0.8f, 0.5f, 1.0f, 0}, &none},
        {{1, E + 1, 4, 2, 16, 1, 1, 0.8f, 0.5f, 1.0f, 0}, &none},
        {{1, E, 2, 1, 8, 1, 0, 0.6f, 0.3f, 2.0f, 0}, &all},     {{1, E + 1, 2, 1, 8, 1, 0, 0.6f, 0.3f, 2.0f, 0}, &all},
        {{1, E - 1, 6, 3, 8, 1, 1, 0.7f, 0.2f, 1.0f, 0}, &alibi}, {{1, E, 4, 4, 8, 1, 0, -0.4f, 0.8f, 1.5f, 1}, &sm1},
        {{1, E, 4, 2, 8, 1, 0, 0.8f, 0.8f, 1.0f, 2}, &none},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case_with(&cases[i].c, cases[i].a, 101 + 7919u * i);
    report_margin(__func__);
}

/* Fewer (batch, ownership group) tasks than threads: the backward splits each group's query
 * blocks over threads, with private dK/dV rows added up afterwards. Groups per batch row: the
 * baseline's kv heads, DIFF's KV/2 (KV even) or 1 (KV odd). Run on 1..4 threads, so 2, 3 and 4
 * parts and uneven splits (3 threads over 2 tasks: 1 part each) all occur, with T across several
 * query blocks of 96 and one that is not a multiple of it. */
static void test_more_threads_than_groups(void **state) {
    (void)state;
    const fcase cases[] = {
        {1, 300, 4, 1, 32, 0, 0, 0, 0, 1.0f, 0},         /* baseline, 1 group: up to 4 parts */
        {1, 383, 4, 2, 16, 0, 0, 0, 0, 2.0f, 0},         /* baseline GQA, 2 groups, peaky */
        {1, 300, 4, 2, 32, 1, 1, 0.8f, 0.5f, 1.0f, 0},   /* DIFF KV even: 1 group (kv heads 0, 1) */
        {1, 289, 8, 4, 16, 1, 1, 0.7f, 0.3f, 1.5f, 0},   /* DIFF KV 4: 2 groups of kv heads {g, g + 2} */
        {2, 200, 6, 3, 8, 1, 0, 0.6f, 0.4f, 1.0f, 0},    /* DIFF KV odd: 1 group per batch row, B = 2 */
        {1, 200, 2, 1, 16, 1, 1, 0.8f, 0.8f, 1.0f, 1},   /* only dv wanted */
        {1, 200, 2, 1, 16, 0, 0, 0, 0, 1.0f, 2},         /* only dq, dk wanted */
        {1, 50, 2, 1, 16, 1, 1, 0.8f, 0.8f, 1.0f, 0},    /* one query block: nothing to split */
    };
    max_threads_tested = 4;
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]), 83);
    static const struct {
        fcase c;
        fablation a;
    } ablated[] = {
        {{1, 300, 4, 1, 16, 0, 0, 0, 0, 1.0f, 0}, {1, 1, 0}},
        {{1, 300, 4, 2, 16, 1, 0, 0.8f, 0.3f, 1.0f, 0}, {1, 1, 1}},
    };
    for (size_t i = 0; i < sizeof ablated / sizeof ablated[0]; i++)
        run_case_with(&ablated[i].c, &ablated[i].a, 89 + 7919u * i);
    max_threads_tested = 2;
    report_margin(__func__);
}

/* Scratch: per thread and tile-sized, the same for every T, while a batch row has at least as
 * many ownership groups as threads; with more threads than groups, plus one private [2, T,
 * group width] slot of dK/dV rows per thread, i.e. exactly linear in T. */
static void test_scratch_size(void **state) {
    (void)state;
    for (int diff = 0; diff <= 1; diff++)
        for (int hd = 32; hd <= 128; hd *= 2) {
            /* baseline: 4 groups (kv heads) ≥ 2 threads; DIFF with KV 4: 2 groups ≥ 2 threads */
            attention_shape s = {.B = 8, .T = 8192, .H = 8, .KV = 4, .hd = hd, .diff = diff, .lambda = 0.8f,
                                 .lambda_init = 0.8f, .eps = 1e-5f, .subln = NULL, .diff_online = 1};
            size_t n8192 = flash_attention_scratch_floats(&s, 2);
            s.T = 1;
            size_t n1 = flash_attention_scratch_floats(&s, 2);
            s.T = 100000;
            size_t nbig = flash_attention_scratch_floats(&s, 2);
            assert_true(n8192 == n1 && nbig == n1);
            assert_true(n8192 * sizeof(float) < 8u * 1024 * 1024);
            /* 8 threads > the groups: the slots, 2·T rows of the group's width per thread */
            const size_t width = (size_t)hd * (diff ? 2 : 1); /* DIFF, KV even: kv heads g, g + KV/2 */
            s.T = 1000;
            size_t a = flash_attention_scratch_floats(&s, 8);
            s.T = 2000;
            size_t b = flash_attention_scratch_floats(&s, 8);
            assert_true(b - a == 8 * 2 * 1000 * width);
            s.T = 1;
            assert_true(flash_attention_scratch_floats(&s, 8) >= 4 * n1);
            /* DIFF's row-block path (T ≤ DIFF_ROWS_MAX_T): 3·T·BQ floats more per thread (the
             * maps and dP of a query block against all its keys); above it, the online path's */
            s.diff_online = 0;
            s.T = DIFF_ROWS_MAX_T;
            size_t rows_max = flash_attention_scratch_floats(&s, 2);
            assert_true(rows_max == n1 + (diff ? 2 * 3 * (size_t)DIFF_ROWS_MAX_T * BQ : 0));
            s.T = 1;
            assert_true(flash_attention_scratch_floats(&s, 2) == n1 + (diff ? 2 * 3 * (size_t)BQ : 0));
            /* sized for a longer T (online), it still holds every shorter T's row blocks */
            s.T = DIFF_ROWS_MAX_T + 1;
            assert_true(flash_attention_scratch_floats(&s, 2) == rows_max);
            s.T = 8192;
            assert_true(flash_attention_scratch_floats(&s, 2) == rows_max);
        }
    /* DIFF with KV odd: one group per batch row, so any 2 threads get slots as wide as every kv head */
    attention_shape s = {.B = 8, .T = 1000, .H = 6, .KV = 3, .hd = 16, .diff = 1, .diff_online = 1};
    size_t a = flash_attention_scratch_floats(&s, 2);
    s.T = 2000;
    assert_true(flash_attention_scratch_floats(&s, 2) - a == 2 * 2 * 1000 * 3 * 16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy),   cmocka_unit_test(test_base_small),
        cmocka_unit_test(test_base_gqa_peaky), cmocka_unit_test(test_diff_small),
        cmocka_unit_test(test_diff_gqa_peaky), cmocka_unit_test(test_tile_boundaries),
        cmocka_unit_test(test_null_grads),     cmocka_unit_test(test_ablations),
        cmocka_unit_test(test_long),           cmocka_unit_test(test_rows_edge),
        cmocka_unit_test(test_more_threads_than_groups),
        cmocka_unit_test(test_scratch_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
