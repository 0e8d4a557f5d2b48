/* test_stats.c — means, 95% intervals and verdicts of difftrans_analysis.h on planted numbers worked out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>

#include "difftrans_analysis.h"

static void near(double got, double want, double tol) {
    if (!(fabs(got - want) <= tol)) fail_msg("got %.6f, want %.6f", got, want);
}

static void test_t_quantiles(void **state) {
    (void)state;
    near(dt_stats_t975(1), 12.706, 1e-3);
    near(dt_stats_t975(2), 4.303, 1e-3);
    near(dt_stats_t975(10), 2.228, 1e-3);
    near(dt_stats_t975(30), 2.042, 1e-3);
    /* past the table, R's qt(0.975, df) to 6 decimals: the intervals over a task's examples use these */
    near(dt_stats_t975(31), 2.039513, 1e-5);
    near(dt_stats_t975(45), 2.014103, 1e-5);
    near(dt_stats_t975(60), 2.000298, 1e-5);
    near(dt_stats_t975(121), 1.979764, 1e-5);
    near(dt_stats_t975(200), 1.971896, 1e-5);
    near(dt_stats_t975(1000), 1.962339, 1e-5);
    near(dt_stats_t975(1000000), 1.959966, 1e-5);
    for (int df = 1; df < 3000; df++) assert_true(dt_stats_t975(df + 1) < dt_stats_t975(df));
    assert_true(isnan(dt_stats_t975(0)));
}

static void test_mean_ci(void **state) {
    (void)state;
    /* 1, 2, 3: mean 2, sd 1, se 1/√3, half = 4.303/√3 = 2.4843 */
    double x[] = {1, 2, 3};
    dt_stats_interval iv = dt_stats_mean_ci(x, 3);
    assert_int_equal(iv.n, 3);
    near(iv.mean, 2, 1e-12);
    near(iv.half, 4.303 / sqrt(3), 1e-9);
    near(iv.lo, 2 - 4.303 / sqrt(3), 1e-9);
    /* NaN is skipped, not propagated and not counted */
    double y[] = {1, NAN, 2, 3};
    dt_stats_interval iy = dt_stats_mean_ci(y, 4);
    assert_int_equal(iy.n, 3);
    near(iy.half, iv.half, 1e-12);
    /* one value: a mean, no interval; none: nothing */
    dt_stats_interval one = dt_stats_mean_ci(x, 1);
    near(one.mean, 1, 0);
    assert_true(isnan(one.half) && isnan(one.lo) && isnan(one.hi));
    double z[] = {NAN, NAN};
    assert_true(isnan(dt_stats_mean_ci(z, 2).mean));
    /* equal values: zero width */
    double w[] = {0.5, 0.5, 0.5};
    near(dt_stats_mean_ci(w, 3).half, 0, 0);
}

static void test_paired(void **state) {
    (void)state;
    /* differences -1.0, -1.2, -0.9: mean -1.0333, sd 0.15275, half 4.303·0.15275/√3 = 0.37948 */
    double a[] = {1.0, 1.1, 0.9}, b[] = {2.0, 2.3, 1.8};
    dt_stats_interval d = dt_stats_paired_diff_ci(a, b, 3);
    near(d.mean, -1.033333, 1e-5);
    near(d.half, 0.37948, 1e-4);
    assert_int_equal(dt_stats_verdict_of(&d, 1), DT_STATS_A_BETTER);  /* lower is better: a's side */
    assert_int_equal(dt_stats_verdict_of(&d, 0), DT_STATS_B_BETTER);  /* higher is better: b's side */
    dt_stats_interval e = dt_stats_paired_diff_ci(b, a, 3);
    assert_int_equal(dt_stats_verdict_of(&e, 1), DT_STATS_B_BETTER);
    assert_int_equal(dt_stats_verdict_of(&e, 0), DT_STATS_A_BETTER);
    /* an interval across zero: unresolved either way */
    double c[] = {1.0, 2.0, 1.5}, f[] = {1.5, 1.5, 1.5};
    dt_stats_interval g = dt_stats_paired_diff_ci(c, f, 3);
    assert_true(g.lo < 0 && g.hi > 0);
    assert_int_equal(dt_stats_verdict_of(&g, 1), DT_STATS_UNRESOLVED);
    assert_int_equal(dt_stats_verdict_of(&g, 0), DT_STATS_UNRESOLVED);
    /* one pair: no interval, no verdict however large the difference */
    dt_stats_interval h = dt_stats_paired_diff_ci(a, b, 1);
    assert_int_equal(dt_stats_verdict_of(&h, 1), DT_STATS_UNRESOLVED);
    /* a pair with a NaN side is dropped from the pairing */
    double p[] = {1.0, NAN, 0.9, 1.1}, q[] = {2.0, 2.3, 1.8, 2.3};
    dt_stats_interval k = dt_stats_paired_diff_ci(p, q, 4);
    assert_int_equal(k.n, 3);
    assert_int_equal(dt_stats_verdict_of(&k, 1), DT_STATS_A_BETTER);
    /* all differences equal and zero: a zero-width interval on 0 is not a win */
    dt_stats_interval z = dt_stats_paired_diff_ci(f, f, 3);
    assert_int_equal(dt_stats_verdict_of(&z, 1), DT_STATS_UNRESOLVED);
    /* two runs whose counts differ by the same amount (4 vs 3 and 8 vs 7 correct answers): a
     * zero-width interval off zero measures no spread, so no verdict; three such pairs give one */
    double hits_a[] = {4, 8, 6}, hits_b[] = {3, 7, 5};
    dt_stats_interval two = dt_stats_paired_diff_ci(hits_a, hits_b, 2);
    assert_true(two.half == 0 && two.lo == 1 && two.hi == 1);
    assert_int_equal(dt_stats_verdict_of(&two, 0), DT_STATS_UNRESOLVED);
    dt_stats_interval three = dt_stats_paired_diff_ci(hits_a, hits_b, 3);
    assert_int_equal(three.n, DT_STATS_MIN_EQUAL_PAIRS);
    assert_int_equal(dt_stats_verdict_of(&three, 0), DT_STATS_A_BETTER);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t_quantiles),
        cmocka_unit_test(test_mean_ci),
        cmocka_unit_test(test_paired),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
