/* test_textmap.c — task text as a model reads it (src/analysis/textmap.c): byte offsets of
 * prompts and answers mapped to token positions, on a hand-made byte-level BPE where a byte
 * offset is not a token index (merged tokens before the answer, a two-byte character split over
 * two tokens, a space that joins the answer's first token), and the refusal of a tokenizer that
 * does not decode the text back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "analysis/textmap.h"
#include "testutil.h"

/* Byte-level BPE: id = byte for the 256 bytes, then the merges "Ġ 1" → 256, "Ġ1 2" → 257,
 * "T h" → 258, "Th e" → 259; `normalizer` is a JSON object or NULL. Returns the loaded tokenizer. */
static dt_tok *handmade(const char *name, const char *normalizer) {
    static const char *const merges[][2] = {{"Ġ", "1"}, {"Ġ1", "2"}, {"T", "h"}, {"Th", "e"}};
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddArrayToObject(root, "added_tokens");
    if (normalizer) cJSON_AddItemToObject(root, "normalizer", cJSON_Parse(normalizer));
    else cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer",
                          cJSON_Parse("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                                      "\"use_regex\":true}"));
    cJSON_AddNullToObject(root, "post_processor");
    cJSON_AddItemToObject(root, "decoder",
                          cJSON_Parse("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                                      "\"use_regex\":true}"));
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *ml = cJSON_AddArrayToObject(model, "merges");
    for (int b = 0; b < 256; b++) {
        char c[4];
        tu_bytelevel_char(b, c);
        cJSON_AddNumberToObject(vocab, c, b);
    }
    for (int i = 0; i < 4; i++) {
        char joined[16];
        snprintf(joined, sizeof joined, "%s%s", merges[i][0], merges[i][1]);
        cJSON_AddNumberToObject(vocab, joined, 256 + i);
        char pair[16];
        snprintf(pair, sizeof pair, "%s %s", merges[i][0], merges[i][1]);
        cJSON_AddItemToArray(ml, cJSON_CreateString(pair));
    }
    char *text = cJSON_PrintUnformatted(root);
    assert_non_null(text);
    char path[4096];
    tu_path(path, sizeof path, name);
    tu_write_file(path, text, strlen(text));
    free(text);
    cJSON_Delete(root);
    dt_tok *tok = NULL;
    dt_error err;
    if (dt_tok_load(&tok, path, &err) != 0) fail_msg("%s", err.msg);
    return tok;
}

static const char text[] = "The caf\xc3\xa9: Answer: 12345\n";

static void test_bytes(void **state) {
    (void)state;
    an_tokens t;
    dt_error err;
    const int len = (int)strlen(text);
    assert_int_equal(an_tokens_encode(NULL, text, len, "text", &t, &err), 0);
    assert_int_equal(t.n, len);
    for (int i = 0; i < len; i++) {
        assert_int_equal(t.ids[i], (unsigned char)text[i]);
        assert_int_equal(t.end[i], i + 1);
        assert_int_equal(an_tokens_before(&t, i), i);
        assert_int_equal(an_tokens_covering(&t, i + 1), i + 1);
    }
    assert_int_equal(an_tokens_covering(&t, 0), 0);
    an_tokens_free(&t);
}

static void test_bpe_offsets(void **state) {
    (void)state;
    dt_tok *tok = handmade("handmade.json", NULL);
    an_tokens t;
    dt_error err;
    const int len = (int)strlen(text);
    if (an_tokens_encode(tok, text, len, "text", &t, &err) != 0) fail_msg("%s", err.msg);
    /* "The" | " caf" + é as two byte tokens | ":" | " Answer" | ":" | " 12" "3" "4" "5" | "\n" */
    static const int want[] = {259, ' ', 'c', 'a', 'f', 0xC3, 0xA9, ':', ' ', 'A', 'n', 's', 'w', 'e',
                               'r', ':', 257, '3', '4', '5', '\n'};
    const int n_want = (int)(sizeof want / sizeof want[0]);
    assert_int_equal(t.n, n_want);
    for (int i = 0; i < n_want; i++) assert_int_equal(t.ids[i], want[i]);
    assert_int_equal(t.n, len - 4); /* two merges of three bytes: offsets are not token indices */
    /* é: its first byte token decodes to U+FFFD, so both of its tokens end after the whole character */
    const int e_acute = (int)(strstr(text, "\xc3\xa9") - text);
    assert_int_equal(t.end[5], e_acute + 2);
    assert_int_equal(t.end[6], e_acute + 2);
    assert_int_equal(t.end[0], 3);
    assert_int_equal(t.end[t.n - 1], len);
    for (int i = 1; i < t.n; i++) assert_true(t.end[i] >= t.end[i - 1]);

    /* the answer "12345" after "Answer: ": the prompt stops before " 12", which overlaps it */
    const int v0 = (int)(strstr(text, "12345") - text), v1 = v0 + 5;
    const int first = an_tokens_before(&t, v0), stop = an_tokens_covering(&t, v1);
    assert_int_equal(first, 16);
    assert_int_equal(stop, 20);
    assert_true(first != v0); /* a byte offset would point elsewhere */
    assert_int_equal(t.ids[first], 257);
    char *dec = NULL;
    size_t n = 0;
    if (dt_tok_decode(tok, (const int32_t *)t.ids + first, (size_t)(stop - first), 0, &dec, &n, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(n, 6);
    assert_memory_equal(dec, " 12345", 6);
    free(dec);
    /* the prompt decodes to the text up to "Answer:" (the space went to the answer's token) */
    if (dt_tok_decode(tok, (const int32_t *)t.ids, (size_t)first, 0, &dec, &n, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(n, (size_t)v0 - 1);
    assert_memory_equal(dec, text, n);
    free(dec);
    /* inside é: no token ends between its bytes */
    assert_int_equal(an_tokens_before(&t, e_acute + 1), 5);
    assert_int_equal(an_tokens_covering(&t, e_acute + 1), 6);
    an_tokens_free(&t);

    /* an empty text */
    assert_int_equal(an_tokens_encode(tok, "", 0, "empty", &t, &err), 0);
    assert_int_equal(t.n, 0);
    assert_int_equal(an_tokens_before(&t, 0), 0);
    an_tokens_free(&t);
    dt_tok_free(tok);
}

static void test_refuses_a_changed_text(void **state) {
    (void)state;
    dt_tok *tok = handmade("lower.json", "{\"type\":\"Lowercase\"}");
    an_tokens t;
    dt_error err;
    assert_int_equal(an_tokens_encode(tok, text, (int)strlen(text), "sample 7", &t, &err), -1);
    assert_non_null(strstr(err.msg, "sample 7"));
    assert_non_null(strstr(err.msg, "lower.json"));
    assert_non_null(strstr(err.msg, "does not decode"));
    assert_null(t.ids);
    /* lowercase text is not changed: fine */
    assert_int_equal(an_tokens_encode(tok, "abc 12", 6, "lower text", &t, &err), 0);
    assert_int_equal(t.end[t.n - 1], 6);
    an_tokens_free(&t);
    dt_tok_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_bpe_offsets),
        cmocka_unit_test(test_refuses_a_changed_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
