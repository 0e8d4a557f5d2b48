/* test_server.c — the pure parts of `difftrans serve` (server/text.c, server/chat.c): text sent
 * in whole characters and always valid UTF-8, stop strings held back (test_stop has the library's
 * search), and the chat templates written as their published Jinja renders them. The HTTP side is
 * tested through the OpenAI SDK (tests/serve/). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server.h"
#include "testutil.h"

#define FFFD "\xEF\xBF\xBD"

/* ---------------------------------------------------------------- UTF-8 */

static void test_utf8_repair(void **state) {
    (void)state;
    /* the wanted results are Python's bytes.decode("utf-8", "replace"): one U+FFFD per maximal
     * subpart of an ill-formed sequence (Unicode §3.9) */
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"plain", "plain"},
        {"a\xFF" "b", "a" FFFD "b"},
        {"\xE2\x82", FFFD},
        {"\xE0\x80\x80", FFFD FFFD FFFD},
        {"\xF0\x9F\x98" "a", FFFD "a"},
        {"\xED\xA0\x80", FFFD FFFD FFFD},
        {"\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD},
        {"\xC0\xAF", FFFD FFFD},
        {"caf\xC3\xA9 \xF0\x9F\xA4\x97", "caf\xC3\xA9 \xF0\x9F\xA4\x97"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len;
        char *got = srv_utf8_repair(cases[i].in, strlen(cases[i].in), &len);
        assert_non_null(got);
        assert_int_equal(len, strlen(cases[i].want));
        assert_memory_equal(got, cases[i].want, len);
        assert_int_equal(got[len], '\0');
        free(got);
    }
    size_t len;
    /* a NUL would cut a cJSON string (the reply's text) short: it is replaced like a bad byte */
    char *nul = srv_utf8_repair("a\0b\0", 4, &len);
    assert_int_equal(len, 8);
    assert_memory_equal(nul, "a" FFFD "b" FFFD, 8);
    free(nul);
    /* \u0000 in a string of a request body; an escaped backslash before "u0000" is not one, nor is
     * \u0000 outside a string (not JSON, which the parser reports) */
    const char *with[] = {"{\"prompt\":\"a\\u0000b\"}", "[\"\\u0000\"]", "{\"a\":\"x\\\"\\u0000\"}"};
    const char *without[] = {"{\"prompt\":\"a\\\\u0000b\"}", "\\u0000", "{\"p\":\"\\u000\"}"};
    for (size_t i = 0; i < sizeof with / sizeof with[0]; i++) assert_true(srv_json_has_nul(with[i], strlen(with[i])));
    for (size_t i = 0; i < sizeof without / sizeof without[0]; i++)
        assert_false(srv_json_has_nul(without[i], strlen(without[i])));
    assert_int_equal(srv_utf8_chars("caf\xC3\xA9 \xF0\x9F\xA4\x97", 10), 6);
}

/* ---------------------------------------------------------------- stop strings */

static void test_text_sendable(void **state) {
    (void)state;
    /* the final text (what follows it, a character cut short, is the library's to hold back) */
    const char *stops[] = {"END"};
    assert_int_equal(srv_text_sendable("ok ", 3, NULL, 0, 0), 3);
    assert_int_equal(srv_text_sendable("ok E", 4, stops, 1, 0), 3);
    assert_int_equal(srv_text_sendable("ok EN", 5, stops, 1, 1), 5);
    assert_int_equal(srv_text_sendable("ok Ex", 5, stops, 1, 0), 5);
    /* a stop string whose prefix ends inside a character: the cut falls before that character */
    const char *euro[] = {"\xE2\x82\xAC!"};
    assert_int_equal(srv_text_sendable("x\xE2\x82\xAC", 4, euro, 1, 0), 1);
    /* the start of a stop string before a character still coming waits: the stop "ÄÖ" after " ÅÄ" */
    const char *aeoe[] = {"\xC3\x84\xC3\x96"};
    assert_int_equal(srv_text_sendable(" \xC3\x85\xC3\x84", 5, aeoe, 1, 0), 3);
    assert_int_equal(srv_text_sendable(" \xC3\x85\xC3\x84", 5, aeoe, 1, 1), 5);
}

/* ---------------------------------------------------------------- a sequence's text */

static void test_token_start(void **state) {
    (void)state;
    assert_int_equal(srv_utf8_common("ab\xC3\xA9", 4, "ab\xC3\xA5", 4), 2); /* é and å share a byte */
    assert_int_equal(srv_utf8_common("abc", 3, "abd", 3), 2);
    assert_int_equal(srv_utf8_common("ab", 2, "abcd", 4), 2);
    assert_int_equal(srv_utf8_common("", 0, "x", 1), 0);
    /* a token after whole characters begins after them */
    assert_int_equal(srv_token_start("ab", 2, "abc", 3), 2);
    assert_int_equal(srv_token_start("ab", 2, "ab" FFFD, 5), 2);
    /* one that completes a character, or goes on with one, begins where that character does:
     * E6 then E6 97 (both one U+FFFD) then E6 97 A5 (日) */
    assert_int_equal(srv_token_start("a" FFFD, 4, "a" FFFD, 4), 1);
    assert_int_equal(srv_token_start("a" FFFD, 4, "a\xE6\x97\xA5", 4), 1);
    assert_int_equal(srv_token_start("a" FFFD, 4, "a\xE6\x97\xA5" "b", 5), 1);
    /* after a U+FFFD the next character follows (a byte that is never UTF-8, or one that ends a
     * cut one: E6 then 41) */
    assert_int_equal(srv_token_start("a" FFFD, 4, "a" FFFD "b", 5), 2);
    /* a token that writes nothing begins at the end */
    assert_int_equal(srv_token_start("ab", 2, "ab", 2), 2);
}

/* A model of the tiny preset with the tokenizer at path (NULL: byte-level). */
static void tiny_model(dt_model *m, const char *tokenizer) {
    dt_config c;
    dt_error err;
    tu_tiny_diff_config(&c);
    c.vocab_size = 600; /* every fixture's ids, and padding past them */
    assert_int_equal(dt_model_create(m, &c, &err), 0);
    char path[4096];
    if (tokenizer) snprintf(path, sizeof path, "%s/fixtures/%s", getenv("DT_TOKENIZER_TESTS"), tokenizer);
    if (dt_model_set_tokenizer(m, tokenizer ? path : NULL, &err) != 0) fail_msg("%s", err.msg);
}

/* The offsets srv_text gives the ids, and the text they make. */
static void offsets_of(const dt_model *m, const int *ids, size_t n, size_t *off, srv_buf *text) {
    srv_text t;
    dt_error err;
    assert_int_equal(srv_text_init(&t, m, &err), 0);
    for (size_t i = 0; i < n; i++) {
        if (srv_text_push(&t, ids[i], &off[i], &err) != 0) fail_msg("%s", err.msg);
        srv_text_revise(&t, off, i);
        for (size_t j = 0; j < i; j++)
            if (off[j] > off[j + 1]) fail_msg("token %zu at %zu after token %zu at %zu", j + 1, off[j + 1], j, off[j]);
        srv_buf_put(text, t.cur.p, t.n_fresh);
        /* what it made final, then the rest: the decode of the ids so far (as valid UTF-8) */
        char *want, *got_all;
        size_t want_len, n_all;
        int kept[64];
        size_t k = 0;
        for (size_t j = 0; j <= i; j++)
            if (dt_model_tok(m) ? dt_tok_id_to_token(dt_model_tok(m), ids[j], NULL) != NULL : ids[j] < 256)
                kept[k++] = ids[j];
        assert_int_equal(dt_model_decode(m, kept, k, 1, &want, &want_len, &err), 0);
        char *repaired = srv_utf8_repair(want, want_len, &want_len);
        srv_buf all = {0};
        srv_buf_put(&all, text->p, text->n);
        srv_buf_put(&all, srv_text_rest(&t), srv_text_rest_len(&t));
        got_all = srv_buf_take(&all, &n_all);
        assert_int_equal(n_all, want_len);
        assert_memory_equal(got_all, repaired, n_all);
        free(got_all);
        free(repaired);
        free(want);
    }
    assert_int_equal(srv_text_end(&t, &err), 0);
    srv_text_revise(&t, off, n);
    srv_buf_put(text, t.cur.p, t.n_fresh);
    srv_text_free(&t);
}

static void test_offsets(void **state) {
    (void)state;
    /* a byte-level model: ids are bytes, 256 and up no token (no text) */
    static const struct {
        const char *bytes;
        int special_first;
        size_t want[16];
        const char *what;
    } cases[] = {
        {"h\xC3\xA9llo", 0, {0, 1, 1, 2, 3, 4}, "héllo: é's two bytes at 1"},
        {"\xE6\x97\xA5\xE6\x9C\xAC a", 1, {0, 0, 0, 0, 1, 1, 1, 2, 3}, "an id past 255, 日本 a"},
        {"\xF0\x9F\x98\x80!", 0, {0, 0, 0, 0, 1}, "an emoji's four bytes"},
        {"a\xFF" "b", 0, {0, 1, 2}, "a byte that is never UTF-8 is a character"},
        {"a\xE6" "b", 0, {0, 1, 2}, "a character cut short by another is one"},
        {"\xC3\xA9\xC3", 0, {0, 0, 1}, "the last character still cut short"},
    };
    dt_model m;
    tiny_model(&m, NULL);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int ids[16];
        size_t n = 0, off[16];
        if (cases[c].special_first) ids[n++] = 300;
        for (const char *p = cases[c].bytes; *p; p++) ids[n++] = (unsigned char)*p;
        srv_buf text = {0};
        offsets_of(&m, ids, n, off, &text);
        for (size_t i = 0; i < n; i++)
            if (off[i] != cases[c].want[i])
                fail_msg("%s: token %zu at %zu, want %zu", cases[c].what, i, off[i], cases[c].want[i]);
        srv_buf_free(&text);
    }
    dt_model_free(&m);

    /* Metaspace: a token's ▁ is a space after the first token, which a token decoded alone loses:
     * " world" begins at the space, character 5 of "hello world hello" (it came out 4 short, one a
     * word) */
    tiny_model(&m, "metaspace_first.json");
    int *ids;
    size_t n;
    dt_error err;
    assert_int_equal(dt_model_encode(&m, "hello world hello", 17, 0, &ids, &n, &err), 0);
    assert_int_equal(n, 3); /* ▁hello ▁world ▁hello */
    const int bos_first[] = {dt_tok_bos_id(dt_model_tok(&m)), ids[0], ids[1], ids[2]};
    size_t off[4];
    srv_buf text = {0};
    offsets_of(&m, bos_first, 4, off, &text);
    assert_int_equal(text.n, 17);
    assert_memory_equal(text.p, "hello world hello", 17);
    const size_t want_ms[] = {0, 0, 5, 11};
    for (int i = 0; i < 4; i++)
        if (off[i] != want_ms[i]) fail_msg("Metaspace: token %d at %zu, want %zu", i, off[i], want_ms[i]);
    srv_buf_free(&text);
    free(ids);
    dt_model_free(&m);

    /* ByteFallback (and a Strip of the text's first space): 日's byte tokens begin where 日 does,
     * the word after it at its space; a padding id writes nothing. Each byte of a run still open
     * belongs to the character its lead byte began, though the text shows E6 97 as two U+FFFD until
     * A5 comes (the 97 was placed at the second, and with a 4-byte character the word after it one
     * character on, as offsets never go back) */
    tiny_model(&m, "llama2_like.json");
    const dt_tok *tok = dt_model_tok(&m);
    const int a = dt_tok_token_to_id(tok, "\xE2\x96\x81" "a", 4);
    const int seq[] = {1, a, dt_tok_token_to_id(tok, "<0xE6>", 6), dt_tok_token_to_id(tok, "<0x97>", 6), 599,
                       dt_tok_token_to_id(tok, "<0xA5>", 6), a};
    size_t got[7];
    for (int i = 0; i < 7; i++) assert_true(seq[i] >= 0);
    offsets_of(&m, seq, 7, got, &text);
    assert_string_equal(text.p, "a日 a");
    const size_t want_fb[] = {0, 0, 1, 1, 1, 1, 2}; /* the padding id: in 日, still open */
    for (int i = 0; i < 7; i++)
        if (got[i] != want_fb[i]) fail_msg("ByteFallback, 日: token %d at %zu, want %zu", i, got[i], want_fb[i]);
    srv_buf_free(&text);
    /* a special token inside the run writes nothing (the stream leaves it out): the run goes on */
    const int seq_special[] = {1, a, seq[2], 1, seq[3], seq[5], a};
    offsets_of(&m, seq_special, 7, got, &text);
    assert_string_equal(text.p, "a日 a");
    const size_t want_special[] = {0, 0, 1, 1, 1, 1, 2};
    for (int i = 0; i < 7; i++)
        if (got[i] != want_special[i])
            fail_msg("ByteFallback, 日 around <s>: token %d at %zu, want %zu", i, got[i], want_special[i]);
    srv_buf_free(&text);
    /* 𝄞 (F0 9D 84 9E) in four byte tokens between words, then an 'é' (C3 A9) */
    const char *const pieces[] = {"<0xF0>", "<0x9D>", "<0x84>", "<0x9E>", "<0xC3>", "<0xA9>"};
    int seq4[9] = {1, a};
    for (int i = 0; i < 4; i++) seq4[2 + i] = dt_tok_token_to_id(tok, pieces[i], 6);
    seq4[6] = a;
    for (int i = 0; i < 2; i++) seq4[7 + i] = dt_tok_token_to_id(tok, pieces[4 + i], 6);
    for (int i = 0; i < 9; i++) assert_true(seq4[i] >= 0);
    size_t got4[9];
    offsets_of(&m, seq4, 9, got4, &text);
    assert_string_equal(text.p, "a\xF0\x9D\x84\x9E a\xC3\xA9");
    const size_t want4[] = {0, 0, 1, 1, 1, 1, 2, 4, 4};
    for (int i = 0; i < 9; i++)
        if (got4[i] != want4[i]) fail_msg("ByteFallback, U+1D11E: token %d at %zu, want %zu", i, got4[i], want4[i]);
    srv_buf_free(&text);
    /* A run is placed by its bytes: é€ in one run is two characters (<0xE2> began the second, not
     * the first, which the run's text could not show while it read as U+FFFDs); a run that is not
     * valid UTF-8 decodes as one U+FFFD a byte token, each token at its own (they were all put at
     * the first, and the token after the run three on); a run max_tokens cut short likewise; a
     * token that writes nothing inside an invalid run goes where the next byte would */
    const int b_id = dt_tok_token_to_id(tok, "b", 1);
    int fb[6];
    const char *const fbp[] = {"<0xC3>", "<0xA9>", "<0xE2>", "<0x82>", "<0xAC>", "<0x41>"};
    for (int i = 0; i < 6; i++) assert_true((fb[i] = dt_tok_token_to_id(tok, fbp[i], 6)) >= 0);
    assert_true(b_id >= 0);
    static const struct {
        int n, ids[8];
        const char *text;
        size_t want[8];
    } runs[] = {
        {8, {1, -1, 0, 1, 2, 3, 4, -2}, "a\xC3\xA9\xE2\x82\xAC" "b", {0, 0, 1, 1, 2, 2, 2, 3}},
        {6, {1, -1, 0, 1, 2, -2}, "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b", {0, 0, 1, 2, 3, 4}},
        {4, {1, -1, 2, 3}, "a\xEF\xBF\xBD\xEF\xBF\xBD", {0, 0, 1, 2}},
        {5, {1, -1, 2, -3, -2}, "a\xEF\xBF\xBD" "b", {0, 0, 1, 2, 2}},
        {6, {1, -1, 2, 3, 5, 4}, "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", {0, 0, 1, 2, 3, 4}},
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        int ids[8];
        size_t got_r[8];
        for (int i = 0; i < runs[r].n; i++) {
            const int v = runs[r].ids[i];
            ids[i] = i == 0 ? v : v == -1 ? a : v == -2 ? b_id : v == -3 ? 1 : fb[v];
        }
        offsets_of(&m, ids, (size_t)runs[r].n, got_r, &text);
        assert_string_equal(text.p, runs[r].text);
        for (int i = 0; i < runs[r].n; i++)
            if (got_r[i] != runs[r].want[i])
                fail_msg("ByteFallback run %zu: token %d at %zu, want %zu", r, i, got_r[i], runs[r].want[i]);
        srv_buf_free(&text);
    }
    dt_model_free(&m);
}

/* A text prompt's tokens placed in the text as sent, its echo: a special token the text holds at its
 * own text, the text's characters after it moved on by it (its decoding leaves it out: they were
 * the decoding's, "hé\nbye"'s, an echo of ids), a BOS the tokenizer added where the text begins. */
static void test_text_place(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    tiny_model(&m, "llama3_like.json");
    const char *text = "h\xC3\xA9<|eot_id|>\nbye<|eot_id|>";
    int *ids;
    size_t n;
    assert_int_equal(dt_model_encode_prompt(&m, text, &ids, &n, &err), 0);
    assert_int_equal(n, 9); /* <|begin_of_text|> h é <|eot_id|> \n b y e <|eot_id|> */
    size_t off[9];
    assert_int_equal(srv_text_place(&m, text, strlen(text), ids, n, off, &err), 0);
    const size_t want[] = {0, 0, 1, 2, 12, 13, 14, 15, 16};
    for (size_t i = 0; i < n; i++)
        if (off[i] != want[i]) fail_msg("token %zu (id %d) at %zu, want %zu", i, ids[i], off[i], want[i]);
    free(ids);
    /* a text that begins with the BOS's own text: the added BOS holds none of it, the written one
     * is at 0 too (the added one took the text and put the written one after it, at 17) */
    const char *bos_text = "<|begin_of_text|>x";
    assert_int_equal(dt_model_encode_prompt(&m, bos_text, &ids, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], ids[1]);
    assert_int_equal(srv_text_place(&m, bos_text, strlen(bos_text), ids, n, off, &err), 0);
    const size_t want_bos[] = {0, 0, 17};
    for (size_t i = 0; i < n; i++)
        if (off[i] != want_bos[i])
            fail_msg("BOS text: token %zu (id %d) at %zu, want %zu", i, ids[i], off[i], want_bos[i]);
    free(ids);
    /* a text that does not hold the special token where the ids put it (ids and text that are not
     * each other's): its characters are not skipped, the decoding's extra "hh" is taken to be at the
     * start, and no offset passes the text's end */
    const int eot = dt_tok_token_to_id(dt_model_tok(&m), "<|eot_id|>", 10), h = 104;
    const int other[] = {h, eot, h, h, h};
    assert_int_equal(srv_text_place(&m, "hh", 2, other, 5, off, &err), 0);
    const size_t want_other[] = {0, 0, 0, 0, 1};
    for (size_t i = 0; i < 5; i++)
        if (off[i] != want_other[i]) fail_msg("other text: token %zu at %zu, want %zu", i, off[i], want_other[i]);
    dt_model_free(&m);
    /* a normaliser that adds text (Prepend ▁: each piece between special tokens gets one, which the
     * decoder strips only at the decoding's start): the added ▁ is where the text it precedes begins,
     * and the characters after it are not moved by it; ByteFallback pieces of a character are at it */
    tiny_model(&m, "llama2_like.json");
    const char *l2 = "  a<s>b</s> c\xE4\xB8\x96<s>\xE4\xB8\x96</s>  a\xE2\x96\x81 b";
    assert_int_equal(dt_model_encode_prompt(&m, l2, &ids, &n, &err), 0);
    /* <s> ▁▁ ▁a <s> ▁ b </s> ▁▁ c <0xE4> <0xB8> <0x96> <s> ▁ <0xE4> <0xB8> <0x96> </s> ▁▁ ▁a ▁▁ b
     * (the last piece's ▁ as sent decodes as a space: its decoding is not it after the added ▁) */
    const size_t want_l2[] = {0, 0, 1, 3, 6, 6, 7, 11, 12, 13, 13, 13, 14, 17, 17, 17, 17, 18, 22, 23, 25, 27};
    assert_int_equal(n, sizeof want_l2 / sizeof *want_l2);
    size_t l2_off[sizeof want_l2 / sizeof *want_l2];
    assert_int_equal(srv_text_place(&m, l2, strlen(l2), ids, n, l2_off, &err), 0);
    for (size_t i = 0; i < n; i++)
        if (l2_off[i] != want_l2[i])
            fail_msg("Prepend: token %zu (id %d) at %zu, want %zu", i, ids[i], l2_off[i], want_l2[i]);
    free(ids);
    dt_model_free(&m);
}

static void test_buf(void **state) {
    (void)state;
    srv_buf b = {0};
    for (int i = 0; i < 1000; i++) srv_buf_printf(&b, "%d,", i);
    assert_false(b.failed);
    assert_int_equal(b.n, strlen(b.p));
    assert_memory_equal(b.p + b.n - 4, "999,", 4);
    size_t len;
    char *s = srv_buf_take(&b, &len);
    assert_non_null(s);
    assert_null(b.p);
    free(s);
    s = srv_buf_take(&b, &len); /* an empty buffer gives "" */
    assert_string_equal(s, "");
    assert_int_equal(len, 0);
    free(s);
}

/* ---------------------------------------------------------------- chat templates */

static char *render(srv_chat_kind k, const srv_chat_msg *m, int n, const char *bos, const char *eos) {
    srv_buf b = {0};
    char msg[256];
    if (srv_chat_render(k, m, n, bos, eos, &b, msg, sizeof msg) != 0) fail_msg("refused: %s", msg);
    return srv_buf_take(&b, NULL);
}

#define MSG(r, c) {r, c, sizeof c - 1}

static void test_chat_render(void **state) {
    (void)state;
    const srv_chat_msg conv[] = {MSG("system", "Be brief."), MSG("user", " Hi! "), MSG("assistant", "Hello."),
                                 MSG("user", "Why?\n")};
    char *s = render(SRV_CHAT_CHATML, conv, 4, NULL, NULL);
    assert_string_equal(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi! <|im_end|>\n"
                           "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhy?\n<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(s);
    /* Llama 3 trims every message */
    s = render(SRV_CHAT_LLAMA3, conv, 4, "<|begin_of_text|>", "<|end_of_text|>");
    assert_string_equal(s, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                           "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                           "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    free(s);
    /* Llama 2: the system message inside the first [INST], each turn its own <s> ... </s> */
    s = render(SRV_CHAT_LLAMA2, conv, 4, "<s>", "</s>");
    assert_string_equal(s, "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi! [/INST] Hello. </s><s>[INST] Why? [/INST]");
    free(s);
    s = render(SRV_CHAT_MISTRAL, conv + 1, 3, NULL, NULL);
    assert_string_equal(s, "<s>[INST]  Hi!  [/INST]Hello.</s>[INST] Why?\n [/INST]");
    free(s);
    s = render(SRV_CHAT_MISTRAL, conv, 2, "", "");  /* a vocabulary without <s>: none written */
    assert_string_equal(s, "[INST] Be brief.\n\n Hi!  [/INST]");
    free(s);
}

static void test_chat_refusals(void **state) {
    (void)state;
    const srv_chat_msg two_users[] = {MSG("user", "a"), MSG("user", "b")};
    const srv_chat_msg late_system[] = {MSG("user", "a"), MSG("assistant", "b"), MSG("system", "c")};
    const srv_chat_msg only_system[] = {MSG("system", "a")};
    srv_buf b = {0};
    char msg[256];
    for (int k = SRV_CHAT_LLAMA2; k <= SRV_CHAT_MISTRAL; k++) {
        assert_int_equal(srv_chat_render(k, two_users, 2, NULL, NULL, &b, msg, sizeof msg), -1);
        assert_non_null(strstr(msg, "messages[1]"));
        assert_int_equal(srv_chat_render(k, late_system, 3, NULL, NULL, &b, msg, sizeof msg), -1);
        assert_non_null(strstr(msg, "messages[2]"));
        assert_int_equal(srv_chat_render(k, only_system, 1, NULL, NULL, &b, msg, sizeof msg), -1);
        srv_buf_free(&b);
    }
    /* ChatML and Llama 3 take any order */
    assert_int_equal(srv_chat_render(SRV_CHAT_CHATML, two_users, 2, NULL, NULL, &b, msg, sizeof msg), 0);
    srv_buf_free(&b);
}

static void test_chat_detect(void **state) {
    (void)state;
    static const struct {
        const char *json;
        srv_chat_kind want;
    } cases[] = {
        {"{\"chat_template\": \"{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}\"}", SRV_CHAT_CHATML},
        {"{\"chat_template\": \"{{ '<|start_header_id|>' + m['role'] }}\"}", SRV_CHAT_LLAMA3},
        {"{\"chat_template\": \"{{ bos_token + '[INST] <<SYS>>\\\\n' }}\"}", SRV_CHAT_LLAMA2},
        {"{\"chat_template\": \"{{ bos_token }}{{ '[INST] ' + m['content'] + ' [/INST]' }}\"}", SRV_CHAT_MISTRAL},
        {"{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"<|im_start|>\"},"
         " {\"name\": \"default\", \"template\": \"[INST]\"}]}", SRV_CHAT_MISTRAL},
        {"{\"chat_template\": \"{% for m in messages %}### {{ m.role }}: {{ m.content }}{% endfor %}\"}",
         SRV_CHAT_NONE},
        {"{\"bos_token\": \"<s>\"}", SRV_CHAT_NONE},
        {"not json", SRV_CHAT_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const srv_chat_kind got = srv_chat_detect(cases[i].json, strlen(cases[i].json));
        if (got != cases[i].want)
            fail_msg("case %zu: %s, want %s", i, srv_chat_name(got), srv_chat_name(cases[i].want));
    }
    assert_int_equal(srv_chat_detect(NULL, 0), SRV_CHAT_NONE);
    srv_chat_kind k;
    assert_int_equal(srv_chat_parse_name("llama3", &k), 0);
    assert_int_equal(k, SRV_CHAT_LLAMA3);
    assert_int_equal(srv_chat_parse_name("none", &k), -1);
    assert_int_equal(srv_chat_parse_name("ChatML", &k), -1);
    assert_string_equal(srv_chat_end_token(SRV_CHAT_LLAMA3), "<|eot_id|>");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_repair),
        cmocka_unit_test(test_text_sendable),
        cmocka_unit_test(test_token_start),   cmocka_unit_test(test_offsets),
        cmocka_unit_test(test_text_place),
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_chat_render),   cmocka_unit_test(test_chat_refusals),
        cmocka_unit_test(test_chat_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
