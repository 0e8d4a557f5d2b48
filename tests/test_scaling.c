/* test_scaling.c — the power-law fit on exact power laws, and the size DIFF needs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "analysis/scaling.h"

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
    sc_fit fb = sc_fit_power_law(n, base, 3), fd = sc_fit_power_law(n, diff, 3);
    assert_float_equal(fb.b, -0.1, 1e-12);
    assert_float_equal(exp(fb.a), 5, 1e-9);
    double need = sc_params_for_loss(&fd, base[2]);
    assert_float_equal(need / n[2], 0.65, 1e-9);
}

static void test_degenerate(void **state) {
    (void)state;
    const double n[2] = {1e6, 1e6}, l[2] = {2, 2.1}, up[2] = {1, 2};
    assert_true(isnan(sc_fit_power_law(n, l, 2).b));   /* one size only */
    assert_true(isnan(sc_fit_power_law(n, l, 1).b));   /* one run */
    const double m[2] = {1e5, 1e6};
    sc_fit rising = sc_fit_power_law(m, up, 2);        /* loss grows with size */
    assert_true(rising.b > 0);
    assert_true(isnan(sc_params_for_loss(&rising, 1.5)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_power_law),
        cmocka_unit_test(test_degenerate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
