/* test_testutil.c — the comparison helpers every other test rests on must fail on NaN and on a
 * real difference, and pass on equal data (including equal infinities). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

static void test_equal_is_zero(void **state) {
    (void)state;
    float a[4] = {1.0f, -2.0f, INFINITY, 0.0f}, b[4] = {1.0f, -2.0f, INFINITY, -0.0f};
    assert_true(tu_max_abs_diff(a, b, 4) == 0.0f);
    assert_true(tu_max_rel_diff(a, b, 4, 1e-6f) == 0.0f);
}

static void test_nan_fails(void **state) {
    (void)state;
    float good[3] = {1.0f, 2.0f, 3.0f}, bad[3] = {1.0f, NAN, 3.0f};
    /* a NaN anywhere, on either side, in any position, makes the difference infinite */
    for (int pos = 0; pos < 3; pos++) {
        float x[3] = {1.0f, 2.0f, 3.0f};
        x[pos] = NAN;
        assert_true(isinf(tu_max_abs_diff(good, x, 3)));
        assert_true(isinf(tu_max_abs_diff(x, good, 3)));
        assert_true(isinf(tu_max_rel_diff(good, x, 3, 1e-6f)));
        assert_true(isinf(tu_max_rel_diff(x, good, 3, 1e-6f)));
    }
    assert_false(tu_max_abs_diff(good, bad, 3) < 1e30f);
    float both[1] = {NAN};
    assert_true(isinf(tu_max_abs_diff(both, both, 1)));
}

static void test_differences_measured(void **state) {
    (void)state;
    float a[3] = {1.0f, 10.0f, 0.0f}, b[3] = {1.5f, 10.0f, 1e-7f};
    assert_true(fabsf(tu_max_abs_diff(a, b, 3) - 0.5f) < 1e-7f);
    /* |1 − 1.5| / 1.5 = 1/3 dominates; the tiny element is measured against the floor */
    assert_true(fabsf(tu_max_rel_diff(a, b, 3, 1.0f) - 1.0f / 3.0f) < 1e-6f);
    float c[1] = {INFINITY}, d[1] = {1.0f};
    assert_true(isinf(tu_max_abs_diff(c, d, 1)));
    float e[1] = {INFINITY}, f[1] = {-INFINITY};
    assert_false(tu_max_abs_diff(e, f, 1) < 1e30f);
    assert_true(isinf(tu_max_rel_diff(c, d, 1, 1e-6f)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_is_zero),
        cmocka_unit_test(test_nan_fails),
        cmocka_unit_test(test_differences_measured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
