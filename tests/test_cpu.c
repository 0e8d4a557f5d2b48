/* test_cpu.c — kernel-path choice: names round-trip, DT_ISA forces a supported path, and an
 * unknown or unsupported DT_ISA is reported rather than run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/cpu.h"

static void test_names(void **state) {
    (void)state;
    for (int i = 0; i < DT_ISA_COUNT; i++) assert_int_equal(dt_isa_parse(dt_isa_name((dt_isa)i)), i);
    assert_int_equal(dt_isa_parse("sse9"), -1);
    assert_int_equal(dt_isa_parse(NULL), -1);
}

static void test_supported_is_ordered(void **state) {
    (void)state;
    assert_true(dt_isa_supported(DT_ISA_PORTABLE));
    if (dt_isa_supported(DT_ISA_AVX512)) assert_true(dt_isa_supported(DT_ISA_AVX2));
    assert_true(dt_isa_supported(dt_isa_best()));
}

static void test_forcing(void **state) {
    (void)state;
    dt_error err = {0};
    unsetenv("DT_ISA");
    assert_int_equal(dt_isa_check(&err), 0);
    assert_int_equal(dt_isa_active(), dt_isa_best());
    for (int i = 0; i < DT_ISA_COUNT; i++) {
        setenv("DT_ISA", dt_isa_name((dt_isa)i), 1);
        if (dt_isa_supported((dt_isa)i)) {
            assert_int_equal(dt_isa_check(&err), 0);
            assert_int_equal(dt_isa_active(), i);
        } else {
            assert_int_equal(dt_isa_check(&err), -1);
            assert_non_null(strstr(err.msg, "DT_ISA"));
            assert_int_equal(dt_isa_active(), dt_isa_best());
        }
    }
    setenv("DT_ISA", "avx1024", 1);
    assert_int_equal(dt_isa_check(&err), -1);
    assert_non_null(strstr(err.msg, "avx1024"));
    unsetenv("DT_ISA");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_supported_is_ordered),
        cmocka_unit_test(test_forcing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
