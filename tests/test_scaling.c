/* test_scaling.c — the power-law fit on exact power laws, and the size DIFF needs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "difftrans_analysis.h"

static void test_exact_power_law(void **state) {
    (void)state;
    /* loss = 5·N^−0.1 for the baseline; DIFF reaches the same loss with 65% of the parameters,
     * i.e. loss_diff(N) = 5·(N / 0.65)^−0.1 */
    const double n[3] = {1e5, 1e6, 1e7};
    double base[3], diff[3];
    for (int i = 0; i < 3; i++) {
        base[i] = 5 * pow(n[i], -0.1);
        diff[i] = 5 * pow(n[i] / 0.65, -0.1);
    }
    dt_scaling_fit fb = dt_scaling_fit_power_law(n, base, 3), fd = dt_scaling_fit_power_law(n, diff, 3);
    assert_float_equal(fb.b, -0.1, 1e-12);
    assert_float_equal(exp(fb.a), 5, 1e-9);
    double need = dt_scaling_params_for_loss(&fd, base[2]);
    assert_float_equal(need / n[2], 0.65, 1e-9);
}

/* dt_scaling_compare on interleaved runs of both kinds finds the planted 65% and the largest baseline. */
static void test_compare_mixed_runs(void **state) {
    (void)state;
    double n[6] = {4e6, 1e6, 2e6, 1e6, 4e6, 2e6}, loss[6];
    int is_diff[6] = {0, 1, 1, 0, 1, 0};
    for (int i = 0; i < 6; i++) loss[i] = is_diff[i] ? 5 * pow(n[i] / 0.65, -0.1) : 5 * pow(n[i], -0.1);
    dt_scaling_comparison c = dt_scaling_compare(n, loss, is_diff, 6);
    assert_int_equal(c.fit[1].n, 3);
    assert_int_equal(c.fit[0].n, 3);
    assert_float_equal(c.base_params, 4e6, 0);
    assert_float_equal(c.fraction, 0.65, 1e-9);
    assert_float_equal(c.diff_params, 0.65 * 4e6, 1e-3);
    /* no baseline run: no fraction */
    int all_diff[6] = {1, 1, 1, 1, 1, 1};
    assert_true(isnan(dt_scaling_compare(n, loss, all_diff, 6).fraction));
}

/* Two seeds of the baseline's largest size: the fraction is taken at their mean loss, so giving the runs
 * in another order gives the same answer (it took whichever run came first). */
static void test_compare_seeds_at_largest(void **state) {
    (void)state;
    double n[6] = {1e6, 4e6, 1e6, 4e6, 4e6, 1e6}, loss[6];
    int is_diff[6] = {1, 1, 0, 0, 0, 0};
    for (int i = 0; i < 6; i++) loss[i] = is_diff[i] ? 5 * pow(n[i] / 0.65, -0.1) : 5 * pow(n[i], -0.1);
    loss[3] *= 1.01, loss[4] *= 0.99; /* the two largest baseline runs straddle the curve */
    dt_scaling_comparison c = dt_scaling_compare(n, loss, is_diff, 6);
    assert_int_equal(c.base_runs, 2);
    assert_float_equal(c.base_loss, 5 * pow(4e6, -0.1), 1e-12);
    assert_float_equal(c.fraction, 0.65, 1e-9);
    double n2[6] = {1e6, 4e6, 1e6, 4e6, 4e6, 1e6}, loss2[6] = {loss[0], loss[1], loss[2], loss[4], loss[3], loss[5]};
    dt_scaling_comparison c2 = dt_scaling_compare(n2, loss2, is_diff, 6);
    assert_float_equal(c2.fraction, c.fraction, 1e-12);
}

static void test_degenerate(void **state) {
    (void)state;
    const double n[2] = {1e6, 1e6}, l[2] = {2, 2.1}, up[2] = {1, 2};
    assert_true(isnan(dt_scaling_fit_power_law(n, l, 2).b));   /* one size only */
    assert_true(isnan(dt_scaling_fit_power_law(n, l, 1).b));   /* one run */
    const double m[2] = {1e5, 1e6};
    dt_scaling_fit rising = dt_scaling_fit_power_law(m, up, 2);        /* loss grows with size */
    assert_true(rising.b > 0);
    assert_true(isnan(dt_scaling_params_for_loss(&rising, 1.5)));
}


/* ---------------------------------------------------------------- the study's bootstrap */

static const double study_sizes[4] = {1e5, 2e5, 4e5, 8e5};

/* baseline loss = 5·N^−0.1; DIFF = the baseline at N / fraction (fraction of the parameters for
 * the same loss), plus per-seed offsets: shared[s] moves both kinds (a seed's data order), own[s]
 * DIFF alone. */
static void plant(dt_scaling_runs *r, int seeds, double fraction, const double *shared, const double *own) {
    memset(r, 0, sizeof *r);
    r->n_sizes = 4, r->n_seeds = seeds;
    for (int i = 0; i < 4; i++) {
        r->params[0][i] = study_sizes[i] * 1.01; /* DIFF's λ vectors: a few more parameters */
        r->params[1][i] = study_sizes[i];
        for (int s = 0; s < seeds; s++) {
            r->loss[1][i][s] = 5 * pow(study_sizes[i], -0.1) + shared[s];
            r->loss[0][i][s] = 5 * pow(r->params[0][i] / fraction, -0.1) + shared[s] + own[s];
        }
    }
}

static void test_study_exact(void **state) {
    (void)state;
    const double zero[3] = {0, 0, 0};
    dt_scaling_runs r;
    plant(&r, 3, 0.65, zero, zero);
    dt_scaling_study st;
    dt_error err;
    assert_int_equal(dt_scaling_study_fit(&r, 200, 7, &st, &err), 0);
    assert_float_equal(st.fraction_at, 8e5, 0);
    assert_float_equal(st.fraction.value, 0.65, 1e-9);
    assert_float_equal(st.fraction.lo, 0.65, 1e-9); /* every resample is the same runs */
    assert_float_equal(st.fraction.hi, 0.65, 1e-9);
    assert_int_equal(st.fraction.n, 200);
    assert_float_equal(st.b[1].value, -0.1, 1e-12);
    assert_float_equal(st.b[0].value, -0.1, 1e-12);
    /* equal slopes: the fits never cross */
    assert_true(isnan(st.crossing.value));
    assert_int_equal(st.crossing_in_range, 0);
    assert_float_equal(st.crossing_share, 0, 0);
    for (int i = 0; i < 4; i++) {
        assert_true(st.diff[i].mean < 0); /* DIFF below at every size */
        assert_float_equal(st.diff[i].half, 0, 1e-12);
    }
}

/* DIFF's curve is steeper and crosses the baseline's at a planted size inside the range. */
static void test_study_crossing(void **state) {
    (void)state;
    dt_scaling_runs r;
    memset(&r, 0, sizeof r);
    r.n_sizes = 4, r.n_seeds = 3;
    const double cross = 3e5, bd = -0.14, bt = -0.1;
    const double ad = log(5) + (bt - bd) * log(cross); /* equal at `cross` */
    for (int i = 0; i < 4; i++) {
        r.params[0][i] = r.params[1][i] = study_sizes[i];
        for (int s = 0; s < 3; s++) {
            r.loss[1][i][s] = 5 * pow(study_sizes[i], bt);
            r.loss[0][i][s] = exp(ad) * pow(study_sizes[i], bd);
        }
    }
    dt_scaling_study st;
    dt_error err;
    assert_int_equal(dt_scaling_study_fit(&r, 100, 1, &st, &err), 0);
    assert_float_equal(st.crossing.value / cross, 1, 1e-9);
    assert_int_equal(st.crossing_in_range, 1);
    assert_float_equal(st.crossing_share, 1, 0);
    assert_true(st.diff[0].mean > 0); /* baseline better below the crossing */
    assert_true(st.diff[3].mean < 0); /* DIFF better above it */
    /* moved outside the range, the crossing is still found but not in range */
    for (int i = 0; i < 4; i++)
        for (int s = 0; s < 3; s++) r.loss[0][i][s] = exp(log(5) + (bt - bd) * log(2e4)) * pow(study_sizes[i], bd);
    assert_int_equal(dt_scaling_study_fit(&r, 100, 1, &st, &err), 0);
    assert_float_equal(st.crossing.value / 2e4, 1, 1e-9);
    assert_int_equal(st.crossing_in_range, 0);
}

/* Seed effects shared by both kinds (a seed's data order) cancel in each size's paired difference:
 * its interval has zero width, while the fraction's interval stays wide, since the resampled slopes
 * turn the same loss gap into different parameter ratios. Noise of DIFF alone widens the per-size
 * intervals; every interval holds the planted fraction. */
static void test_study_paired_noise(void **state) {
    (void)state;
    const double shared[4] = {0.08, -0.05, 0.02, -0.06}, none[4] = {0, 0, 0, 0};
    const double own[4] = {0.01, -0.008, 0.005, -0.009};
    dt_scaling_runs r;
    dt_scaling_study st, noisy;
    dt_error err;
    plant(&r, 4, 0.65, shared, none);
    assert_int_equal(dt_scaling_study_fit(&r, 2000, 3, &st, &err), 0);
    assert_true(st.fraction.lo < 0.65 && st.fraction.hi > 0.65);
    assert_true(st.fraction.hi - st.fraction.lo > 0.01);
    for (int i = 0; i < 4; i++) assert_float_equal(st.diff[i].half, 0, 1e-12);
    plant(&r, 4, 0.65, shared, own);
    assert_int_equal(dt_scaling_study_fit(&r, 2000, 3, &noisy, &err), 0);
    assert_true(noisy.fraction.lo < 0.65 && noisy.fraction.hi > 0.65);
    assert_true(noisy.diff[1].half > 0.005);
    /* the per-size interval is the paired t interval of dt_stats_paired_diff_ci */
    dt_stats_interval d = dt_stats_paired_diff_ci(r.loss[0][2], r.loss[1][2], 4);
    assert_float_equal(noisy.diff[2].mean, d.mean, 1e-15);
    assert_float_equal(noisy.diff[2].half, d.half, 1e-15);
    /* the same seed gives the same intervals; another seed other draws */
    dt_scaling_study again;
    assert_int_equal(dt_scaling_study_fit(&r, 2000, 3, &again, &err), 0);
    assert_true(again.fraction.lo == noisy.fraction.lo && again.fraction.hi == noisy.fraction.hi);
}

/* A missing run (NaN) takes its seed out of that size for both kinds; bad input is refused. */
static void test_study_missing_and_bad(void **state) {
    (void)state;
    const double zero[3] = {0, 0, 0};
    dt_scaling_runs r;
    plant(&r, 3, 0.5, zero, zero);
    r.loss[1][3][1] = NAN;
    r.loss[0][3][1] = 100; /* its pair is gone: must not enter the fit */
    dt_scaling_study st;
    dt_error err;
    assert_int_equal(dt_scaling_study_fit(&r, 50, 1, &st, &err), 0);
    assert_float_equal(st.fraction.value, 0.5, 1e-9);
    assert_int_equal(st.diff[3].n, 2);
    r.n_sizes = 1;
    assert_int_equal(dt_scaling_study_fit(&r, 50, 1, &st, &err), -1);
    assert_non_null(strstr(err.msg, "n_sizes"));
    r.n_sizes = 4;
    r.params[1][2] = 0;
    assert_int_equal(dt_scaling_study_fit(&r, 50, 1, &st, &err), -1);
    assert_non_null(strstr(err.msg, "params[1][2]"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_power_law),
        cmocka_unit_test(test_compare_mixed_runs),
        cmocka_unit_test(test_compare_seeds_at_largest),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_study_exact),
        cmocka_unit_test(test_study_crossing),
        cmocka_unit_test(test_study_paired_noise),
        cmocka_unit_test(test_study_missing_and_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
