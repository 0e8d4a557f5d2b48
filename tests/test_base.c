/* test_base.c — the base layer's utilities (src/base/base.h): the half and bfloat16 codecs bit for
 * bit, round trips over every 16-bit pattern and every rounding tie, and, where this CPU has them,
 * against the x86 conversion instructions; growable arrays; paths that do not fit; what a signal
 * handler removes of unfinished outputs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <immintrin.h>

#include "base/base.h"
#include "cpu/cpu.h"
#include "internal.h"
#include "testutil.h"

static float f_of(uint32_t u) { return base_bits_float(u); }

/* ---------------------------------------------------------------- half */

typedef struct {
    uint32_t in;   /* float bits */
    uint16_t want; /* half bits */
    const char *what;
} half_case;

static void test_half_exact(void **state) {
    (void)state;
    static const half_case cases[] = {
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0 keeps its sign"},
        {0x3F800000u, 0x3C00, "1"},
        {0xC0000000u, 0xC000, "-2"},
        {0x477FE000u, 0x7BFF, "65504, the largest finite half"},
        {0xC77FE000u, 0xFBFF, "-65504"},
        {0x477FEFFFu, 0x7BFF, "just below 65520 rounds down to 65504"},
        {0x477FF000u, 0x7C00, "65520, halfway past 65504: the tie goes to even, which is inf (as in torch)"},
        {0xC77FF000u, 0xFC00, "-65520 overflows to -inf"},
        {0x47800000u, 0x7C00, "65536"},
        {0x7F7FFFFFu, 0x7C00, "FLT_MAX"},
        {0x7F800000u, 0x7C00, "inf"},
        {0xFF800000u, 0xFC00, "-inf"},
        {0x33800000u, 0x0001, "2^-24, the smallest subnormal"},
        {0xB3800000u, 0x8001, "-2^-24"},
        {0x33000000u, 0x0000, "2^-25, halfway to the smallest subnormal: to even, 0"},
        {0x33000001u, 0x0001, "just above 2^-25"},
        {0xB3000000u, 0x8000, "-2^-25 gives -0"},
        {0x33C00000u, 0x0002, "1.5·2^-24, halfway between subnormals 1 and 2: to even, 2"},
        {0x34200000u, 0x0002, "2.5·2^-24, halfway between 2 and 3: to even, 2"},
        {0x34300000u, 0x0003, "2.75·2^-24 rounds up to 3"},
        {0x34400000u, 0x0003, "3·2^-24 exactly"},
        {0x387FC000u, 0x03FF, "1023·2^-24, the largest subnormal"},
        {0x387FE000u, 0x0400, "1023.5·2^-24: the tie goes to even, the smallest normal"},
        {0x38800000u, 0x0400, "2^-14, the smallest normal"},
        {0x2EDBE6FFu, 0x0000, "1e-10 underflows to 0"},
        {0x00000001u, 0x0000, "the smallest float subnormal"},
        {0x80000001u, 0x8000, "its negative"},
        {0x3F801000u, 0x3C00, "1 + 2^-11, halfway between 1 and its successor: to even"},
        {0x3F803000u, 0x3C02, "1 + 3·2^-11, halfway between 0x3C01 and 0x3C02: to even"},
        {0x3F801001u, 0x3C01, "just above the tie rounds up"},
        {0x3F802FFFu, 0x3C01, "just below the next tie rounds down"},
        {0x3FFFF000u, 0x4000, "2 - 2^-11, a tie above the odd 0x3FFF: the carry moves the exponent up"},
        {0x3FFFEFFFu, 0x3FFF, "just below that tie"},
        {0x3FFFE000u, 0x3FFF, "2 - 2^-10, the largest half below 2"},
        {0x3EAAAAABu, 0x3555, "1/3"},
        {0x7FC00000u, 0x7E00, "the default quiet NaN"},
        {0xFFC00000u, 0xFE00, "a negative NaN keeps its sign"},
        {0x7F800001u, 0x7E00, "a signalling NaN whose payload is below the half's: quiet, still a NaN"},
        /* decode.c's F16 KV cache codec gave 0x7E00 here, safetensors.c's this: the one codec keeps
         * the payload's top bits, as vcvtps2ph does */
        {0x7FA12345u, 0x7F09, "a NaN's payload: its top 10 bits, with the quiet bit"},
        {0xFF812345u, 0xFE09, "a negative signalling NaN's payload"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = float_to_half(f_of(cases[i].in));
        if (got != cases[i].want)
            fail_msg("float 0x%08x (%s): half 0x%04x, want 0x%04x", cases[i].in, cases[i].what, got, cases[i].want);
    }
}

static void test_half_widen_exact(void **state) {
    (void)state;
    static const struct {
        uint16_t in;
        uint32_t want;
    } cases[] = {
        {0x0000, 0x00000000u}, {0x8000, 0x80000000u}, {0x0001, 0x33800000u}, {0x8001, 0xB3800000u},
        {0x03FF, 0x387FC000u}, {0x0400, 0x38800000u}, {0x3C00, 0x3F800000u}, {0x7BFF, 0x477FE000u},
        {0xFBFF, 0xC77FE000u}, {0x7C00, 0x7F800000u}, {0xFC00, 0xFF800000u}, {0x7E00, 0x7FC00000u},
        {0xFE00, 0xFFC00000u},
        /* a signalling half NaN comes back quiet with its payload (both old readers kept it
         * signalling: 0x7F802000), as vcvtph2ps and torch's scalar cast give it */
        {0x7C01, 0x7FC02000u}, {0xFF09, 0xFFE12000u},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint32_t got = base_float_bits(half_to_float(cases[i].in));
        if (got != cases[i].want) fail_msg("half 0x%04x: float 0x%08x, want 0x%08x", cases[i].in, got, cases[i].want);
    }
}

/* The value of a finite half from its fields, in double: an independent formula. */
static double half_value(uint16_t h) {
    int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}

/* Every half widens to its exact value and comes back as itself; a NaN comes back a quiet NaN
 * with its sign and payload. */
static void test_half_round_trip_all(void **state) {
    (void)state;
    int nans = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = half_to_float((uint16_t)h);
        const uint16_t back = float_to_half(f);
        if (((h >> 10) & 0x1F) == 0x1F && (h & 0x3FF)) {
            nans++;
            if (!isnan(f) || back != (h | 0x200))
                fail_msg("NaN half 0x%04x: float 0x%08x, back 0x%04x (want 0x%04x)", h, base_float_bits(f), back,
                         h | 0x200);
            continue;
        }
        if (((h >> 10) & 0x1F) == 0x1F) {
            if (!isinf(f) || (signbit(f) != 0) != ((h & 0x8000) != 0)) fail_msg("half 0x%04x is not ±inf", h);
        } else if ((double)f != half_value((uint16_t)h) || (signbit(f) != 0) != ((h & 0x8000) != 0)) {
            fail_msg("half 0x%04x: %a, want %a", h, (double)f, half_value((uint16_t)h));
        }
        if (back != h) fail_msg("half 0x%04x: back 0x%04x after the round trip", h, back);
    }
    assert_int_equal(nans, 2 * 1023);
}

/* Around every tie: the midpoint of two neighbouring halves (exact in a float) goes to the one
 * with the even significand, a float either side of it to the nearer one. 0x7C00 stands for
 * 65536, the half after the largest, so the overflow boundary is one of the ties. */
static void test_half_every_tie(void **state) {
    (void)state;
    for (uint32_t a = 0; a < 0x7C00; a++) {
        const uint32_t b = a + 1;
        const double va = half_value((uint16_t)a), vb = b == 0x7C00 ? 65536.0 : half_value((uint16_t)b);
        const float mid = (float)((va + vb) / 2);
        assert_true((double)mid == (va + vb) / 2);
        const uint16_t even = (a & 1) ? (uint16_t)b : (uint16_t)a;
        for (int sign = 0; sign < 2; sign++) {
            const uint16_t s = sign ? 0x8000 : 0;
            const float m = sign ? -mid : mid;
            const float below = nextafterf(m, 0.0f), above = nextafterf(m, sign ? -INFINITY : INFINITY);
            if (float_to_half(m) != (s | even) || float_to_half(below) != (s | a) || float_to_half(above) != (s | b))
                fail_msg("halves 0x%04x / 0x%04x (sign %d): tie 0x%04x, below 0x%04x, above 0x%04x", a, b, sign,
                         float_to_half(m), float_to_half(below), float_to_half(above));
        }
    }
}

/* ---------------------------------------------------------------- bfloat16 */

static void test_bf16_exact(void **state) {
    (void)state;
    static const half_case cases[] = {
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0"},
        {0x3F800000u, 0x3F80, "1"},
        {0x3F808000u, 0x3F80, "halfway between 1 and its successor: to even"},
        {0x3F818000u, 0x3F82, "halfway between 0x3F81 and 0x3F82: to even"},
        {0x3F808001u, 0x3F81, "just above the tie"},
        {0x3F80FFFFu, 0x3F81, "just below the next tie"},
        {0x7F7F0000u, 0x7F7F, "the largest finite bfloat16"},
        {0x7F7F7FFFu, 0x7F7F, "just below halfway past it"},
        {0x7F7F8000u, 0x7F80, "halfway past the largest: to even, inf"},
        {0x7F7FFFFFu, 0x7F80, "FLT_MAX overflows to inf"},
        {0xFF7FFFFFu, 0xFF80, "-FLT_MAX to -inf"},
        {0x7F800000u, 0x7F80, "inf"},
        {0xFF800000u, 0xFF80, "-inf"},
        {0x00010000u, 0x0001, "the smallest bfloat16 subnormal"},
        {0x00008000u, 0x0000, "halfway to it: to even, 0"},
        {0x00018000u, 0x0002, "halfway between subnormals 1 and 2: to even, 2"},
        {0x80000001u, 0x8000, "a tiny negative float gives -0"},
        {0x7FC00000u, 0x7FC0, "the default quiet NaN"},
        {0xFFC00000u, 0xFFC0, "a negative NaN keeps its sign (torch's scalar cast gives 0x7FC0)"},
        {0x7F800001u, 0x7FC0, "a NaN whose payload is below bfloat16's: quiet, not inf"},
        {0x7FA12345u, 0x7FE1, "a NaN's payload: its top 7 bits, with the quiet bit"},
        {0xFF812345u, 0xFFC1, "a negative signalling NaN"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t got = float_to_bf16(f_of(cases[i].in));
        if (got != cases[i].want)
            fail_msg("float 0x%08x (%s): bf16 0x%04x, want 0x%04x", cases[i].in, cases[i].what, got, cases[i].want);
    }
}

/* Widening is the top half of a float (a NaN quiet), and every bfloat16 comes back as itself;
 * around every tie, as for the half. */
static void test_bf16_round_trip_and_ties(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        const int nan = (b & 0x7FFF) > 0x7F80;
        const uint32_t want = nan ? (b << 16) | 0x400000u : b << 16;
        const float f = bf16_to_float((uint16_t)b);
        if (base_float_bits(f) != want) fail_msg("bf16 0x%04x: float 0x%08x, want 0x%08x", b, base_float_bits(f), want);
        const uint16_t back = float_to_bf16(f);
        if (back != (nan ? (b | 0x40) : b)) fail_msg("bf16 0x%04x: back 0x%04x after the round trip", b, back);
    }
    for (uint32_t a = 0; a < 0x7F80; a++) {
        for (uint32_t s = 0; s < 2; s++) {
            const uint32_t sign = s << 31, mid = sign | (a << 16) | 0x8000u; /* exactly halfway to a + 1 */
            const uint16_t even = (uint16_t)((s << 15) | ((a & 1) ? a + 1 : a));
            const uint16_t at = float_to_bf16(f_of(mid)), below = float_to_bf16(f_of(mid - 1)),
                           above = float_to_bf16(f_of(mid + 1));
            if (at != even || below != ((s << 15) | a) || above != ((s << 15) | (a + 1)))
                fail_msg("bf16 0x%04x (sign %u): tie 0x%04x, below 0x%04x, above 0x%04x", a, s, at, below, above);
        }
    }
}

/* ---------------------------------------------------------------- against the instructions */

/* The x86 conversions, which torch's vectorised casts use: F16C's vcvtps2ph (round to nearest
 * even) and AVX512-BF16's vcvtneps2bf16, over a stride through every float bit pattern (the
 * stride is odd, so every exponent and low-bit pattern comes up). vcvtneps2bf16 treats subnormal
 * inputs as zero, unlike torch's scalar cast and ours: those are left out for bfloat16. */
__attribute__((target("avx,f16c"))) static long against_f16c(uint32_t stride) {
    long bad = 0;
    for (uint64_t i = 0; i < (1ull << 32); i += stride) {
        const uint32_t u = (uint32_t)i;
        const __m128i h = _mm_cvtps_ph(_mm_set_ss(f_of(u)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const uint16_t hw = (uint16_t)_mm_extract_epi16(h, 0);
        if (float_to_half(f_of(u)) != hw && bad++ < 5)
            print_message("float 0x%08x: half 0x%04x, vcvtps2ph 0x%04x\n", u, float_to_half(f_of(u)), hw);
    }
    for (uint32_t v = 0; v < 65536; v++) {
        const float hw = _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16((short)v)));
        if (base_float_bits(half_to_float((uint16_t)v)) != base_float_bits(hw) && bad++ < 5)
            print_message("half 0x%04x: float 0x%08x, vcvtph2ps 0x%08x\n", v, base_float_bits(half_to_float((uint16_t)v)),
                          base_float_bits(hw));
    }
    return bad;
}

__attribute__((target("avx512f,avx512vl,avx512bf16"))) static long against_bf16_instruction(uint32_t stride) {
    long bad = 0;
    for (uint64_t i = 0; i < (1ull << 32); i += stride) {
        const uint32_t u = (uint32_t)i;
        if ((u & 0x7F800000u) == 0 && (u & 0x7FFFFFu)) continue; /* a subnormal float */
        const __m128bh r = _mm_cvtneps_pbh(_mm_set1_ps(f_of(u)));
        uint16_t hw;
        memcpy(&hw, &r, sizeof hw);
        if (float_to_bf16(f_of(u)) != hw && bad++ < 5)
            print_message("float 0x%08x: bf16 0x%04x, vcvtneps2bf16 0x%04x\n", u, float_to_bf16(f_of(u)), hw);
    }
    return bad;
}

static void test_codecs_match_the_instructions(void **state) {
    (void)state;
    const dt_cpu_info *c = dt_cpu();
    const uint32_t stride = 997;
    int ran = 0;
    if (c->f16c) {
        assert_int_equal(against_f16c(stride), 0);
        ran++;
    } else {
        print_message("no F16C on this CPU: the half codec checked against the tables and ties only\n");
    }
    if (c->avx512bf16 && c->avx512vl) {
        assert_int_equal(against_bf16_instruction(stride), 0);
        ran++;
    } else {
        print_message("no AVX512-BF16 on this CPU: the bfloat16 codec checked against the tables and ties only\n");
    }
    print_message("%d of 2 codecs compared with the CPU's conversions on every %u-th float\n", ran, stride);
}

/* ---------------------------------------------------------------- grow_array */

static void test_grow_doubles_and_keeps(void **state) {
    (void)state;
    int *a = NULL;
    size_t cap = 0;
    assert_int_equal(grow_array(&a, &cap, 0, sizeof *a, 4), 0); /* nothing needed: nothing allocated */
    assert_null(a);
    assert_int_equal(cap, 0);
    size_t caps_seen = 0;
    for (int i = 0; i < 1000; i++) {
        const size_t before = cap;
        assert_int_equal(grow_array(&a, &cap, (size_t)i + 1, sizeof *a, 4), 0);
        if (cap != before) {
            assert_int_equal(cap, before ? 2 * before : 4); /* the first capacity, then doubling */
            caps_seen++;
        }
        a[i] = 3 * i + 1;
    }
    assert_int_equal(cap, 1024);
    assert_int_equal(caps_seen, 9); /* 4, 8, ..., 1024 */
    for (int i = 0; i < 1000; i++) assert_int_equal(a[i], 3 * i + 1);
    /* room enough: the array is left alone */
    int *same = a;
    assert_int_equal(grow_array(&a, &cap, 1024, sizeof *a, 4), 0);
    assert_ptr_equal(a, same);
    assert_int_equal(cap, 1024);
    /* more than one doubling at once */
    assert_int_equal(grow_array(&a, &cap, 5000, sizeof *a, 4), 0);
    assert_int_equal(cap, 8192);
    for (int i = 0; i < 1000; i++) assert_int_equal(a[i], 3 * i + 1);
    free(a);

    /* first 0 still grows */
    char *s = NULL;
    size_t sc = 0;
    assert_int_equal(grow_array(&s, &sc, 3, 1, 0), 0);
    assert_int_equal(sc, 4);
    free(s);
}

/* A size that does not fit in size_t, and one that fits but no allocator can give, both fail
 * with the array and its capacity as they were. */
static void test_grow_refuses_and_leaves_untouched(void **state) {
    (void)state;
    double *a = NULL;
    size_t cap = 0;
    assert_int_equal(grow_array(&a, &cap, 10, sizeof *a, 16), 0);
    for (int i = 0; i < 10; i++) a[i] = i * 0.5;
    double *const kept = a;
    /* bytes past SIZE_MAX (also after doubling), and 2^58 doubles: 2 EiB, which realloc refuses */
    const size_t needs[] = {SIZE_MAX / sizeof *a + 1, SIZE_MAX / 2, SIZE_MAX, SIZE_MAX / sizeof *a - 1,
                            SIZE_MAX / 64 + 1};
    for (size_t k = 0; k < sizeof needs / sizeof *needs; k++) {
        assert_int_equal(grow_array(&a, &cap, needs[k], sizeof *a, 16), -1);
        assert_ptr_equal(a, kept);
        assert_int_equal(cap, 16);
        for (int i = 0; i < 10; i++) assert_true(a[i] == i * 0.5);
    }
    assert_int_equal(grow_array(&a, &cap, 1, 0, 16), 0); /* already room: no size is computed */
    size_t zero = 0;
    char *none = NULL;
    assert_int_equal(grow_array(&none, &zero, 1, 0, 16), -1); /* a zero item size is refused */
    assert_null(none);
    free(a);
}

/* ---------------------------------------------------------------- paths */

static void test_path_join_refuses_truncation(void **state) {
    (void)state;
    char out[16];
    dt_error err = {0};
    assert_int_equal(dt_pathf(out, sizeof out, &err, "%s/%s", "0123456", "89abcde"), 0); /* 15 bytes: fits */
    assert_string_equal(out, "0123456/89abcde");
    assert_int_equal(dt_pathf(out, sizeof out, &err, "%s/%s", "0123456", "89abcdef"), -1);
    assert_int_equal(err.code, DT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "path too long"));
    assert_int_equal(dt_pathf(out, sizeof out, NULL, "%s/%s", "0123456", "89abcdef"), -1); /* no dt_error */

    /* a library reader: the directory fits, the manifest's path in it does not. snprintf cut it
     * short and the open failed on the shortened name (DT_ERR_IO, "File name too long") */
    static char dir[4300];
    memset(dir, 'd', 4190);
    dir[0] = '/';
    dir[4190] = '\0';
    dt_tokens_summary s;
    memset(&err, 0, sizeof err);
    assert_int_equal(dt_tokens_info(dir, &s, &err), -1);
    assert_int_equal(err.code, DT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "path too long"));

    /* an atomic file whose name does not fit is refused with nothing left to unlink */
    static char long_path[4200];
    memset(long_path, 'p', 4096);
    long_path[0] = '/';
    long_path[4096] = '\0';
    dt_atomic_file f;
    memset(&f, 0x5A, sizeof f);
    assert_int_equal(dt_atomic_open(&f, long_path, &err), -1);
    assert_int_equal(err.code, DT_ERR_INVALID);
    assert_null(f.fp);
    assert_int_equal(f.tmp[0], '\0');
    dt_atomic_abort(&f);
}

/* ---------------------------------------------------------------- temporaries */

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* Output directories are made like `mkdir -p`: every missing parent, an existing one kept; a file in the
 * way is DT_ERR_IO naming the output and that file; an atomic write makes its file's directories. */
static void test_dir_ensure_makes_parents(void **state) {
    (void)state;
    char root[1200], deep[1400], again[1400], file[1400], under[1500], out[1600];
    tu_path(root, sizeof root, "mkdirs");
    snprintf(deep, sizeof deep, "%s/a/b//c/", root);
    snprintf(again, sizeof again, "%s/a/b/c", root);
    dt_error err;
    assert_int_equal(dir_ensure(deep, &err), 0);
    assert_int_equal(dir_ensure(again, &err), 0); /* there already */
    struct stat sb;
    assert_true(stat(again, &sb) == 0 && S_ISDIR(sb.st_mode));

    snprintf(file, sizeof file, "%s/a/file", root);
    tu_write_file(file, "x", 1);
    snprintf(under, sizeof under, "%s/x/y", file);
    assert_int_equal(dir_ensure(under, &err), -1);
    assert_int_equal(err.code, DT_ERR_IO);
    assert_non_null(strstr(err.msg, under)); /* the output first, then the part in the way */
    char want[1700];
    snprintf(want, sizeof want, "%s exists and is not a directory", file);
    assert_non_null(strstr(err.msg, want));
    assert_int_equal(dir_ensure(file, &err), -1);
    assert_int_equal(err.code, DT_ERR_IO);
    assert_non_null(strstr(err.msg, "exists and is not a directory"));

    snprintf(out, sizeof out, "%s/d/e/out.json", root);
    dt_atomic_file f;
    assert_int_equal(dt_atomic_open(&f, out, &err), 0);
    assert_true(fputs("{}", f.fp) >= 0);
    assert_int_equal(dt_atomic_commit(&f, &err), 0);
    assert_true(exists(out));
    snprintf(out, sizeof out, "%s/out.json", under);
    assert_int_equal(dt_atomic_open(&f, out, &err), -1);
    assert_int_equal(err.code, DT_ERR_IO);
    assert_non_null(strstr(err.msg, out));
    assert_non_null(strstr(err.msg, want));
    assert_int_equal(dir_ensure_parent("bare-name.json", &err), 0); /* the working directory */
}

/* dt_remove_temporaries, what the CLI's SIGINT / SIGTERM handler runs: this process's temporaries
 * go — an atomic write's file, a quantised checkpoint's directory with its files — and nothing
 * else does: a finished output, another process's temporary, a name that only resembles one. */
static void test_remove_temporaries(void **state) {
    (void)state;
    char dir[1200], done[1400], partial[1400], qdir[1400], qfile[1500], other[1400], like[1400];
    tu_path(dir, sizeof dir, "temporaries");
    mkdir(dir, 0755);
    snprintf(done, sizeof done, "%s/done.txt", dir);
    snprintf(partial, sizeof partial, "%s/out.bin", dir);
    snprintf(qdir, sizeof qdir, "%s/q.tmp.%ld", dir, (long)getpid());
    snprintf(qfile, sizeof qfile, "%s/model.safetensors", qdir);
    snprintf(other, sizeof other, "%s/x.tmp.%ld", dir, (long)getpid() + 1);
    snprintf(like, sizeof like, "%s/y.tmp.%ld0", dir, (long)getpid());
    tu_write_file(done, "x", 1);
    tu_write_file(other, "x", 1);
    tu_write_file(like, "x", 1);
    dt_atomic_file f;
    dt_error err;
    assert_int_equal(dt_atomic_open(&f, partial, &err), 0);
    assert_true(fputs("half of it", f.fp) >= 0 && fflush(f.fp) == 0);
    assert_true(exists(f.tmp));
    char q[1400];
    snprintf(q, sizeof q, "%s/q", dir);
    temp_dir_register(q); /* as quant_save does for its directory dir/q.tmp.<pid> */
    assert_int_equal(mkdir(qdir, 0755), 0);
    tu_write_file(qfile, "x", 1);
    dt_remove_temporaries();
    assert_false(exists(f.tmp));
    assert_false(exists(qfile));
    assert_false(exists(qdir));
    assert_true(exists(done) && exists(other) && exists(like));
    assert_false(exists(partial)); /* never renamed into place */
    dt_atomic_abort(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_exact),
        cmocka_unit_test(test_half_widen_exact),
        cmocka_unit_test(test_half_round_trip_all),
        cmocka_unit_test(test_half_every_tie),
        cmocka_unit_test(test_bf16_exact),
        cmocka_unit_test(test_bf16_round_trip_and_ties),
        cmocka_unit_test(test_codecs_match_the_instructions),
        cmocka_unit_test(test_grow_doubles_and_keeps),
        cmocka_unit_test(test_grow_refuses_and_leaves_untouched),
        cmocka_unit_test(test_path_join_refuses_truncation),
        cmocka_unit_test(test_remove_temporaries),
        cmocka_unit_test(test_dir_ensure_makes_parents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
