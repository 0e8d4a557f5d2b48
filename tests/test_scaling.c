/* test_scaling.c — the power-law fit on exact power laws, and the size DIFF needs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_power_law),
        cmocka_unit_test(test_compare_mixed_runs),
        cmocka_unit_test(test_degenerate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
