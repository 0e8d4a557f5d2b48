/* test_tokenizer.c — the tokenizer.json API on small hand-made tokenizers whose answers follow
 * from the BPE rules (rank order of merges, added tokens, post-processor), and the refusals of
 * bad tokenizer.json files. The bit-exact comparison with the Rust library is test_tokenizer_golden. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "difftrans.h"
#include "testutil.h"

/* Byte-level: "abc ab" → pieces "abc", "Ġab". Merge (a,b) has rank 0 and (Ġ,a) rank 2, so "Ġab"
 * must become Ġ + ab = [3, 4]; applying merges left to right instead would give Ġa + b = [6, 1]. */
static const char *TINY =
    "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,"
    " \"added_tokens\": [{\"id\": 7, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false,"
    "   \"rstrip\": false, \"normalized\": false, \"special\": true}],"
    " \"normalizer\": null,"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true,"
    "   \"use_regex\": true},"
    " \"post_processor\": {\"type\": \"TemplateProcessing\","
    "   \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}],"
    "   \"pair\": [], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [7], \"tokens\": [\"<s>\"]}}},"
    " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},"
    " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null,"
    "   \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false,"
    "   \"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"\\u0120\": 3, \"ab\": 4, \"abc\": 5, \"\\u0120a\": 6},"
    "   \"merges\": [\"a b\", [\"ab\", \"c\"], \"\\u0120 a\"]}}";

static char *write_tok(const char *name, const char *json) {
    static char path[1200];
    tu_path(path, sizeof path, name);
    tu_write_file(path, json, strlen(json));
    return path;
}

static void expect_ids(const dt_tok *tok, const char *text, int add_special, const int32_t *want, size_t n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    dt_error err = {0};
    if (dt_tok_encode(tok, text, strlen(text), add_special, &ids, &n, &err) != 0) fail_msg("encode: %s", err.msg);
    if (n != n_want) fail_msg("'%s': %zu ids, want %zu", text, n, n_want);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != want[i]) fail_msg("'%s': ids[%zu] = %d, want %d", text, i, ids[i], want[i]);
    free(ids);
}

static void expect_text(const dt_tok *tok, const int32_t *ids, size_t n, int skip, const char *want) {
    char *text = NULL;
    size_t len = 0;
    dt_error err = {0};
    if (dt_tok_decode(tok, ids, n, skip, &text, &len, &err) != 0) fail_msg("decode: %s", err.msg);
    if (len != strlen(want) || memcmp(text, want, len) != 0) fail_msg("decoded '%s', want '%s'", text, want);
    free(text);
}

static void test_tiny_bytelevel(void **state) {
    (void)state;
    dt_tok *tok = NULL;
    dt_error err = {0};
    if (dt_tok_load(&tok, write_tok("tokenizer.json", TINY), &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(dt_tok_vocab_size(tok), 8);
    assert_int_equal(dt_tok_token_to_id(tok, "<s>", 3), 7);
    assert_int_equal(dt_tok_token_to_id(tok, "ab", 2), 4);
    assert_int_equal(dt_tok_token_to_id(tok, "zz", 2), -1);
    assert_true(dt_tok_is_special(tok, 7));
    assert_false(dt_tok_is_special(tok, 4));
    assert_int_equal(dt_tok_bos_id(tok), 7);
    expect_ids(tok, "abc ab", 0, (const int32_t[]){5, 3, 4}, 3);
    expect_ids(tok, "abc ab", 1, (const int32_t[]){7, 5, 3, 4}, 4);
    expect_ids(tok, "<s>abc", 0, (const int32_t[]){7, 5}, 2);
    expect_ids(tok, "", 0, NULL, 0);
    expect_ids(tok, "", 1, (const int32_t[]){7}, 1);
    expect_text(tok, (const int32_t[]){7, 5, 3, 4}, 4, 0, "<s>abc ab");
    expect_text(tok, (const int32_t[]){7, 5, 3, 4}, 4, 1, "abc ab");
    /* only special tokens, skipped: the ByteLevel decoder gets no text at all (found by
     * fuzz_tokenizer: the empty piece's text was read through a null arena, undefined behaviour) */
    expect_text(tok, (const int32_t[]){7, 7}, 2, 1, "");
    expect_text(tok, NULL, 0, 0, "");
    /* a character outside the vocabulary (no unk, no byte_fallback) is dropped, as in Rust */
    expect_ids(tok, "abd", 0, (const int32_t[]){4}, 1);
    /* refusals: invalid UTF-8 to encode, an id outside the vocabulary to decode */
    int32_t *ids = NULL;
    size_t n;
    assert_int_equal(dt_tok_encode(tok, "a\xff", 2, 0, &ids, &n, &err), -1);
    assert_non_null(strstr(err.msg, "invalid UTF-8 at byte 1"));
    char *text = NULL;
    size_t len;
    assert_int_equal(dt_tok_decode(tok, (const int32_t[]){1, 8}, 2, 0, &text, &len, &err), -1);
    assert_non_null(strstr(err.msg, "ids[1] = 8"));
    assert_null(text);
    dt_tok_free(tok);
}

/* Published vocabularies leave ids unused (cl100k, o200k): the reference loads them, the id table
 * spans the largest id, an unused id decodes to nothing and is refused, and an added token that is
 * not in the vocabulary gets the number of entries as its id (Rust's AddedVocabulary), not 1 + the
 * largest id. */
static void test_vocab_with_holes(void **state) {
    (void)state;
    const char *from = "\"c\": 2", *at = strstr(TINY, from);
    assert_non_null(at);
    char json[4096];
    snprintf(json, sizeof json, "%.*s\"c\": 12%s", (int)(at - TINY), TINY, at + strlen(from));
    dt_tok *tok = NULL;
    dt_error err = {0};
    if (dt_tok_load(&tok, write_tok("holes.json", json), &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(dt_tok_vocab_size(tok), 13);
    assert_int_equal(dt_tok_token_to_id(tok, "<s>", 3), 7);
    assert_int_equal(dt_tok_token_to_id(tok, "c", 1), 12);
    expect_ids(tok, "abc ab c", 1, (const int32_t[]){7, 5, 3, 4, 3, 12}, 6);
    expect_text(tok, (const int32_t[]){12, 7, 4}, 3, 0, "c<s>ab");
    char *text = NULL;
    size_t len;
    assert_int_equal(dt_tok_decode(tok, (const int32_t[]){4, 9}, 2, 0, &text, &len, &err), -1);
    assert_non_null(strstr(err.msg, "ids[1] = 9"));
    assert_non_null(strstr(err.msg, "unused"));
    assert_null(text);
    dt_tok_summary sum;
    dt_tok_info(tok, &sum);
    assert_int_equal(sum.n_unused, 13 - 8); /* 8 tokens (7 in the vocabulary, <s>) over ids 0..12 */
    dt_tok_free(tok);
    /* a post-processor that adds an unused id is refused (found by fuzz_tokenizer: encode gave an
     * id that is not a token) */
    char *ids_at = strstr(json, "\"ids\": [7]");
    assert_non_null(ids_at);
    ids_at[8] = '9';
    tok = NULL;
    assert_int_equal(dt_tok_load(&tok, write_tok("holes.json", json), &err), -1);
    assert_null(tok);
    if (!strstr(err.msg, "post_processor adds id 9, which is not a token")) fail_msg("message: %s", err.msg);
}

/* Loads `json` after replacing the first occurrence of `from` in TINY with `to`; expects a
 * refusal whose message names the file and holds `problem`. */
static void expect_refused(const char *from, const char *to, const char *problem) {
    const char *at = strstr(TINY, from);
    if (!at) fail_msg("'%s' not in the template", from);
    size_t n = strlen(TINY) - strlen(from) + strlen(to) + 1;
    char *json = malloc(n);
    assert_non_null(json);
    snprintf(json, n, "%.*s%s%s", (int)(at - TINY), TINY, to, at + strlen(from));
    char *path = write_tok("bad.json", json);
    free(json);
    dt_tok *tok = NULL;
    dt_error err = {0};
    if (dt_tok_load(&tok, path, &err) == 0) fail_msg("loaded although '%s' became '%s'", from, to);
    assert_null(tok);
    if (!strstr(err.msg, path)) fail_msg("message does not name the file: %s", err.msg);
    if (!strstr(err.msg, problem)) fail_msg("expected '%s' in: %s", problem, err.msg);
}

static void test_bad_files(void **state) {
    (void)state;
    expect_refused("{\"version\"", "[\"version\"", "not valid JSON");
    expect_refused("\"model\": {", "\"modelx\": {", "no \"model\"");
    expect_refused("\"a b\"", "\"a q\"", "not in the vocabulary");
    expect_refused("\"c\": 2", "\"c\": 1", "duplicate id 1");
    expect_refused("\"c\": 2", "\"c\": 7000", "past the vocabulary"); /* holes may not outgrow the vocabulary */
    /* with a hole at 2 there are 7 entries, so the new added token <s> gets id 7: c's */
    expect_refused("\"c\": 2", "\"c\": 7", "which the vocabulary gives to another token");
    expect_refused("\"type\": \"BPE\"", "\"type\": \"Unigram\"", "model type \"Unigram\" is not supported");
    expect_refused("\"normalizer\": null", "\"normalizer\": {\"type\": \"BertNormalizer\"}",
                   "normalizer \"BertNormalizer\" is not supported");
    expect_refused("\"pre_tokenizer\": {\"type\": \"ByteLevel\"", "\"pre_tokenizer\": {\"type\": \"UnicodeScripts\"",
                   "pre_tokenizer \"UnicodeScripts\" is not supported");
    expect_refused("\"decoder\": {\"type\": \"ByteLevel\"", "\"decoder\": {\"type\": \"WordPiece\"",
                   "decoder \"WordPiece\" is not supported");
    expect_refused("\"post_processor\": {\"type\": \"TemplateProcessing\"",
                   "\"post_processor\": {\"type\": \"Weird\"", "post_processor \"Weird\" is not supported");
    expect_refused("\"use_regex\": true},", "\"use_regex\": true, \"frobnicate\": 1},", "\"frobnicate\" is not supported");
    expect_refused("\"truncation\": null", "\"truncation\": {\"max_length\": 5}", "\"truncation\" is set");
    expect_refused("\"dropout\": null", "\"dropout\": 0.1", "dropout");
    expect_refused("{\"id\": 7,", "{\"id\": 9,", "declares id 9");
    expect_refused("\"ids\": [7]", "\"ids\": [99]", "past the vocabulary");
    /* a pattern that is not UTF-8 went to pcre2_compile with PCRE2_NO_UTF_CHECK: a crash (found
     * by fuzz_tokenizer); other strings of the file become text the regexes scan unchecked */
    expect_refused("\"normalizer\": null",
                   "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(?i:'s|\xff\xff\xffm)\"},"
                   " \"content\": \"a\"}",
                   "pattern is not valid UTF-8 (byte 7)");
    expect_refused("\"content\": \"<s>\"", "\"content\": \"<s\xc3>\"", "not valid UTF-8");
    dt_tok *tok = NULL;
    dt_error err = {0};
    char path[1200];
    tu_path(path, sizeof path, "missing.json");
    assert_int_equal(dt_tok_load(&tok, path, &err), -1);
    assert_non_null(strstr(err.msg, "missing.json"));
}

/* A directory holding tokenizer.json (+ tokenizer_config.json for bos / eos). */
static void test_directory(void **state) {
    (void)state;
    write_tok("tokenizer.json", TINY);
    write_tok("tokenizer_config.json", "{\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"abc\"}");
    dt_tok *tok = NULL;
    dt_error err = {0};
    if (dt_tok_load(&tok, tu_tmpdir(), &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(dt_tok_bos_id(tok), 7);
    assert_int_equal(dt_tok_eos_id(tok), 5);
    assert_int_equal(dt_tok_pad_id(tok), -1);
    dt_tok_free(tok);
    /* both files go through the shared bounded reader: anything but a regular file is refused by name */
    char dir[1200], path[1300];
    tu_path(dir, sizeof dir, "cfg_is_dir");
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    tu_write_file(path, TINY, strlen(TINY));
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    mkdir(path, 0755);
    tok = NULL;
    assert_int_equal(dt_tok_load(&tok, dir, &err), -1);
    assert_null(tok);
    if (!strstr(err.msg, "tokenizer_config.json: not a regular file")) fail_msg("message: %s", err.msg);
}

static void expect_train_refused(const dt_tok_train_options *o, const char *want) {
    char out[1200];
    tu_path(out, sizeof out, "train_refused");
    char path[1300];
    snprintf(path, sizeof path, "%s/tokenizer.json", out);
    unlink(path); /* what a run of the test without the refusals wrote */
    dt_error err = {0};
    assert_int_equal(dt_tok_train(o, out, &err), -1);
    assert_int_equal(err.code, DT_ERR_INVALID);
    if (!strstr(err.msg, want)) fail_msg("message: %s (wanted %s)", err.msg, want);
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0);
}

/* A min_frequency below 1 (it merged as 1 does) is refused naming the field; one string in two
 * special roles is one token serving both (GPT-2's <|endoftext|>, padding with the eos). */
static void test_train_options_refused(void **state) {
    (void)state;
    char *data = write_tok("train_data.txt", "hello world hello there world\n");
    const char *files[1] = {data};
    dt_tok_train_options o;
    dt_tok_train_defaults(&o);
    o.files = files;
    o.n_files = 1;
    o.vocab_size = 300;
    o.quiet = 1;
    o.min_frequency = -1;
    expect_train_refused(&o, "min_frequency -1: must be at least 1");
    o.min_frequency = 0;
    expect_train_refused(&o, "min_frequency 0: must be at least 1");
    o.min_frequency = 2;
    o.bos = o.eos = o.pad = "<|endoftext|>";
    char out[1200];
    tu_path(out, sizeof out, "train_shared_roles");
    dt_error err = {0};
    if (dt_tok_train(&o, out, &err) != 0) fail_msg("one token in three roles: %s", err.msg);
    dt_tok *tok = NULL;
    if (dt_tok_load(&tok, out, &err) != 0) fail_msg("%s", err.msg);
    /* one special token, the last id, serving all three roles */
    const int32_t V = dt_tok_vocab_size(tok);
    assert_int_equal(dt_tok_token_to_id(tok, "<|endoftext|>", 13), V - 1);
    assert_true(dt_tok_is_special(tok, V - 1));
    assert_false(dt_tok_is_special(tok, V - 2));
    dt_tok_free(tok);
}

/* dt_utf8_valid_prefix: where a text stops being UTF-8, at the byte that begins the bad sequence. */
static void test_utf8_valid_prefix(void **state) {
    (void)state;
    static const struct {
        const char *s;
        size_t n, want;
    } cases[] = {
        {"a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 10, 10}, /* a é € 😀 */
        {"a\0b", 3, 3},                                      /* NUL is a character */
        {"ab\xC0\x80", 4, 2},                                /* overlong NUL */
        {"a\xE0\x80\xAF", 4, 1},                             /* overlong / */
        {"a\xED\xA0\x80", 4, 1},                             /* a surrogate */
        {"a\xF4\x90\x80\x80", 5, 1},                         /* past U+10FFFF */
        {"ab\xE2\x82", 4, 2},                                /* cut short */
        {"\x80" "a", 2, 0},                                 /* a continuation first */
        {"a\xFF", 2, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (dt_utf8_valid_prefix(cases[i].s, cases[i].n) != cases[i].want)
            fail_msg("case %zu: %zu, expected %zu", i, dt_utf8_valid_prefix(cases[i].s, cases[i].n), cases[i].want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_bytelevel),
        cmocka_unit_test(test_utf8_valid_prefix),
        cmocka_unit_test(test_vocab_with_holes),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_directory),
        cmocka_unit_test(test_train_options_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
