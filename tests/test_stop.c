/* test_stop.c — stop strings (dt_stop_find, dt_stop_holdback, dt_stop_matcher): the earliest one
 * found, the end that could still become one held back while the text comes and given out when it
 * never does; one spanning pieces, one whose first character comes in two tokens, and random
 * texts in random pieces against the whole text searched at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "difftrans.h"
#include "testutil.h"

static void test_stop_find(void **state) {
    (void)state;
    const char *stops[] = {"wor", "lo", ""};
    const char *t = "hello world";
    assert_int_equal(dt_stop_find(t, strlen(t), stops, 3), 3);  /* the first in the text, not in the list */
    assert_int_equal(dt_stop_find(t, strlen(t), stops, 1), 6);
    assert_int_equal(dt_stop_find(t, 4, stops, 3), -1);          /* "lo" is not inside "hell" */
    assert_int_equal(dt_stop_find(t, strlen(t), stops + 2, 1), -1); /* an empty stop never matches */
    const char *nl[] = {"\n\n"};
    assert_int_equal(dt_stop_find("a\nb\n\nc", 6, nl, 1), 3);
    /* the one that ends first: "y" is whole before "xyz" is, wherever the text is cut into pieces */
    const char *nested[] = {"xyz", "y"};
    assert_int_equal(dt_stop_find("axyz", 4, nested, 2), 2);
    /* of two that end together, the longer */
    const char *tails[] = {"z", "yz"};
    assert_int_equal(dt_stop_find("axyz", 4, tails, 2), 2);
}

static void test_stop_holdback(void **state) {
    (void)state;
    const char *stops[] = {"world", "wx", "abc"};
    assert_int_equal(dt_stop_holdback("hello wor", 9, stops, 3), 3);
    assert_int_equal(dt_stop_holdback("hello w", 7, stops, 3), 1);
    assert_int_equal(dt_stop_holdback("hello", 5, stops, 3), 0);
    assert_int_equal(dt_stop_holdback("xxab", 4, stops, 3), 2);
    /* a whole stop string is no prefix still to come (dt_stop_find has it) */
    assert_int_equal(dt_stop_holdback("abc", 3, stops + 2, 1), 0);
    /* the longest over all stops */
    const char *two[] = {"ab", "bab"};
    assert_int_equal(dt_stop_holdback("xba", 3, two, 2), 2);
    /* the text shorter than the stop */
    const char *longer[] = {"hello"};
    assert_int_equal(dt_stop_holdback("he", 2, longer, 1), 2);
}

/* Pushes text into m and appends what it gives to got (NUL-terminated); returns the push's result. */
static int push(dt_stop_matcher *m, const char *text, char *got) {
    const char *out;
    size_t n;
    dt_error err;
    const int r = dt_stop_matcher_push(m, text, strlen(text), &out, &n, &err);
    assert_true(r == 0 || r == 1);
    strncat(got, out, n);
    return r;
}

static void flush(dt_stop_matcher *m, char *got) {
    const char *out;
    size_t n;
    dt_stop_matcher_flush(m, &out, &n);
    strncat(got, out, n);
}

static void test_matcher_spans_pieces(void **state) {
    (void)state;
    const char *stops[] = {"o wor", "zz"};
    dt_stop_matcher *m;
    dt_error err;
    assert_int_equal(dt_stop_matcher_new(&m, stops, 2, &err), 0);
    char got[64] = "";
    assert_int_equal(push(m, "Hello", got), 0);
    assert_string_equal(got, "Hell"); /* "o" could begin "o wor" */
    assert_int_equal(push(m, " wo", got), 0);
    assert_string_equal(got, "Hell");
    assert_int_equal(push(m, "rld", got), 1); /* the stop string ends in the third piece */
    assert_string_equal(got, "Hell");
    assert_int_equal(dt_stop_matcher_stopped(m), 1);
    assert_int_equal(push(m, "more", got), 1); /* nothing after a stop */
    flush(m, got);
    assert_string_equal(got, "Hell");
    dt_stop_matcher_free(m);
}

static void test_matcher_never_completes(void **state) {
    (void)state;
    const char *stops[] = {"END"};
    dt_stop_matcher *m;
    dt_error err;
    assert_int_equal(dt_stop_matcher_new(&m, stops, 1, &err), 0);
    char got[64] = "";
    assert_int_equal(push(m, "ok E", got), 0);
    assert_string_equal(got, "ok ");
    assert_int_equal(push(m, "N", got), 0);
    assert_string_equal(got, "ok ");
    flush(m, got); /* the text ended: what was held back is text */
    assert_string_equal(got, "ok EN");
    assert_int_equal(dt_stop_matcher_stopped(m), 0);
    /* a held-back end that the next piece turns away is given with it */
    char again[64] = "";
    assert_int_equal(push(m, "EN", again), 0);
    assert_int_equal(push(m, "x", again), 0);
    assert_string_equal(again, "ENx");
    dt_stop_matcher_free(m);
}

/* A byte-level model's tokens through dt_tok_stream, then the matcher: the stop string's first
 * character "é" comes as two tokens (0xC3, 0xA9), the stream giving it whole once both are there. */
static void run_bytes(const char *const *stops, int k, const unsigned char *ids, int n, char *got, int *stopped) {
    dt_tok_stream *ts = dt_tok_stream_new(NULL, 1);
    assert_non_null(ts);
    dt_stop_matcher *m;
    dt_error err;
    assert_int_equal(dt_stop_matcher_new(&m, stops, k, &err), 0);
    got[0] = '\0';
    *stopped = 0;
    for (int i = 0; i < n && !*stopped; i++) {
        const char *text, *out;
        size_t len, n_out;
        assert_int_equal(dt_tok_stream_push(ts, ids[i], &text, &len, &err), 0);
        *stopped = dt_stop_matcher_push(m, text, len, &out, &n_out, &err);
        assert_true(*stopped == 0 || *stopped == 1);
        strncat(got, out, n_out);
        if (i == 1) assert_string_equal(got, "a"); /* 0xC3 alone is no text yet */
    }
    if (!*stopped) {
        const char *text, *out;
        size_t len, n_out;
        assert_int_equal(dt_tok_stream_flush(ts, &text, &len, &err), 0);
        *stopped = dt_stop_matcher_push(m, text, len, &out, &n_out, &err);
        strncat(got, out, n_out);
        if (!*stopped) {
            dt_stop_matcher_flush(m, &out, &n_out);
            strncat(got, out, n_out);
        }
    }
    dt_stop_matcher_free(m);
    dt_tok_stream_free(ts);
}

static void test_matcher_multibyte(void **state) {
    (void)state;
    const unsigned char ids[] = {'a', 0xC3, 0xA9, '!', 'b'}; /* "aé!b" */
    char got[64];
    int stopped;
    const char *e_bang[] = {"\xC3\xA9!"};
    run_bytes(e_bang, 1, ids, 5, got, &stopped);
    assert_int_equal(stopped, 1);
    assert_string_equal(got, "a");
    /* "é" held back as the start of "éx", given when "!" turns it away */
    const char *e_x[] = {"\xC3\xA9x"};
    run_bytes(e_x, 1, ids, 5, got, &stopped);
    assert_int_equal(stopped, 0);
    assert_string_equal(got, "a\xC3\xA9!b");
    /* "ê" shares its first byte with "é": no match, nothing held */
    const char *e_circ[] = {"\xC3\xAA"};
    run_bytes(e_circ, 1, ids, 5, got, &stopped);
    assert_int_equal(stopped, 0);
    assert_string_equal(got, "a\xC3\xA9!b");
    /* a character cut short at the end: the flush gives its byte as it is (a byte-level model's text),
     * which the held-back start of "é" does not complete */
    const unsigned char cut[] = {'a', 0xC3};
    run_bytes(e_bang, 1, cut, 2, got, &stopped);
    assert_int_equal(stopped, 0);
    assert_string_equal(got, "a\xC3");
}

static void test_matcher_refusals(void **state) {
    (void)state;
    const char *five[] = {"a", "b", "c", "d", "e"};
    dt_stop_matcher *m = (dt_stop_matcher *)1;
    dt_error err;
    assert_int_equal(dt_stop_matcher_new(&m, five, 5, &err), -1);
    assert_null(m);
    assert_non_null(strstr(err.msg, "stops: 5 strings, at most 4"));
    const char *with_null[] = {"a", NULL};
    assert_int_equal(dt_stop_matcher_new(&m, with_null, 2, &err), -1);
    assert_non_null(strstr(err.msg, "stops: string 1 is NULL"));
    /* no stop strings: everything is given at once */
    assert_int_equal(dt_stop_matcher_new(&m, NULL, 0, &err), 0);
    char got[16] = "";
    assert_int_equal(push(m, "abc", got), 0);
    assert_string_equal(got, "abc");
    dt_stop_matcher_free(m);
}

/* The longest suffix of t[0..n) that is a proper prefix of one of stops, the slow way. */
static size_t naive_holdback(const char *t, size_t n, const char *const *stops, int k) {
    size_t best = 0;
    for (size_t h = 1; h <= n; h++)
        for (int i = 0; i < k; i++)
            if (h < strlen(stops[i]) && !strncmp(t + n - h, stops[i], h) && h > best) best = h;
    return best;
}

/* Where text[0..n) first holds a stop string, the slow way: the first end at which one ends (the
 * longest of those), -1 when none. */
static long naive_find(const char *t, size_t n, const char *const *stops, int k) {
    for (size_t e = 1; e <= n; e++) {
        long best = -1;
        for (int i = 0; i < k; i++) {
            const size_t l = strlen(stops[i]);
            if (l && l <= e && !strncmp(t + e - l, stops[i], l) && (best < 0 || (long)(e - l) < best))
                best = (long)(e - l);
        }
        if (best >= 0) return best;
    }
    return -1;
}

/* Random texts over a small alphabet (so that stop strings occur, and partly occur, often) in random
 * pieces: after every push, what was given is the whole text so far cut where it first held a stop
 * string, or, when it has none, less the longest end that begins one. */
static void test_matcher_random(void **state) {
    (void)state;
    static const char *alpha[] = {"a", "b", "\xC3\xA9", " "};
    uint64_t rng = 0x2545F4914F6CDD1DULL;
#define RND(n) ((rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17), (int)(rng % (uint64_t)(n)))
    for (int trial = 0; trial < 3000; trial++) {
        char stop_buf[DT_MAX_STOP_STRINGS][16];
        const char *stops[DT_MAX_STOP_STRINGS];
        const int k = RND(DT_MAX_STOP_STRINGS + 1);
        for (int i = 0; i < k; i++) {
            stop_buf[i][0] = '\0';
            for (int l = 1 + RND(4); l > 0; l--) strcat(stop_buf[i], alpha[RND(4)]);
            stops[i] = stop_buf[i];
        }
        char text[256] = "", got[256] = "";
        const int n_chars = RND(40);
        for (int c = 0; c < n_chars; c++) strcat(text, alpha[RND(4)]);
        const size_t len = strlen(text);
        dt_stop_matcher *m;
        dt_error err;
        assert_int_equal(dt_stop_matcher_new(&m, stops, k, &err), 0);
        size_t at = 0;
        int stopped = 0;
        while (at < len && !stopped) {
            size_t piece = 1 + (size_t)RND(6);
            if (piece > len - at) piece = len - at;
            const char *out;
            size_t n_out;
            stopped = dt_stop_matcher_push(m, text + at, piece, &out, &n_out, &err);
            assert_true(stopped == 0 || stopped == 1);
            strncat(got, out, n_out);
            at += piece;
            const long found = naive_find(text, at, stops, k);
            const size_t want = found >= 0 ? (size_t)found : at - naive_holdback(text, at, stops, k);
            assert_int_equal(stopped, found >= 0);
            assert_int_equal(strlen(got), want);
            assert_memory_equal(got, text, want);
        }
        const char *out;
        size_t n_out;
        dt_stop_matcher_flush(m, &out, &n_out);
        strncat(got, out, n_out);
        const long found = naive_find(text, len, stops, k);
        if (found >= 0) text[found] = '\0'; /* the pieces do not matter */
        assert_string_equal(got, text);
        dt_stop_matcher_free(m);
    }
#undef RND
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_find),
        cmocka_unit_test(test_stop_holdback),
        cmocka_unit_test(test_matcher_spans_pieces),
        cmocka_unit_test(test_matcher_never_completes),
        cmocka_unit_test(test_matcher_multibyte),
        cmocka_unit_test(test_matcher_refusals),
        cmocka_unit_test(test_matcher_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
