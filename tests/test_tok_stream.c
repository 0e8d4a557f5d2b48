/* test_tok_stream.c — dt_tok_stream (text from ids as they come) against dt_tok_decode of the whole
 * sequence, byte for byte, after every id (what was given, then what is pending) and at the flush:
 * for every tokenizer of tests/tokenizer (and the published ones when installed, $DT_TOKREF), for
 * decoder chains made here to reach the steps the fixtures lack (a Strip of the joined text's end,
 * a Replace of a string and a Metaspace after the join, a chain decoded whole, no decoder), and for
 * a byte-level model. The sequences are random, built to hit what a decoder of a window of recent
 * tokens gets wrong: characters cut across 2-4 byte tokens, a special token (skipped or not)
 * between the halves of one, ByteFallback runs that turn invalid late, ids that are no tokens,
 * Metaspace's first piece. Also dt_tok_token_bytes: a token's own bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "difftrans.h"
#include "testutil.h"
#include "tokenizer/tok.h"

#define FFFD "\xEF\xBF\xBD"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void show(const char *what, const char *s, size_t n) {
    printf("  %s (%zu bytes): \"", what, n);
    for (size_t i = 0; i < n && i < 200; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7F || c == '"') printf("\\x%02x", c);
        else putchar(c);
    }
    printf("\"\n");
}

static void show_ids(const int32_t *ids, size_t n) {
    printf("  ids:");
    for (size_t i = 0; i < n && i < 120; i++) printf(" %d", ids[i]);
    printf("\n");
}

/* The reference: dt_tok_decode of the ids that are tokens (a byte-level model: the bytes). */
static void reference(const dt_tok *tok, const int32_t *ids, size_t n, int skip, buf *out) {
    out->n = 0;
    put(out, "", 0);
    int32_t *kept = malloc((n ? n : 1) * sizeof *kept);
    assert_non_null(kept);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!tok) {
            if (ids[i] >= 0 && ids[i] < 256) {
                const char c = (char)ids[i];
                put(out, &c, 1);
            }
        } else if (dt_tok_id_to_token(tok, ids[i], NULL))
            kept[k++] = ids[i];
    }
    if (tok) {
        char *text;
        size_t len;
        dt_error err;
        if (dt_tok_decode(tok, kept, k, skip, &text, &len, &err) != 0) fail_msg("%s", err.msg);
        put(out, text, len);
        free(text);
    }
    free(kept);
}

static int n_sequences, n_held; /* sequences checked; pushes that held something back */

/* Streams ids[0..n) through s (a new sequence) and checks, after every id, that the text given so
 * far followed by the pending rest is the whole decode of the ids so far, and at the end that the
 * flush completes it; a tokenizer's pieces are whole UTF-8 characters. Returns the streamed text
 * (before the flush) in *given when not NULL. */
static void check_stream(const dt_tok *tok, dt_tok_stream *s, const int32_t *ids, size_t n, int skip, const char *what,
                         buf *given_out) {
    buf given = {0}, ref = {0}, both = {0};
    put(&given, "", 0);
    dt_error err;
    for (size_t i = 0; i < n; i++) {
        const char *t, *p;
        size_t tl, pl;
        if (dt_tok_stream_push(s, ids[i], &t, &tl, &err) != 0) fail_msg("%s: push: %s", what, err.msg);
        if (t[tl] != '\0') fail_msg("%s: the text given is not NUL-terminated", what);
        if (tok && tk_utf8_check(t, tl) != tl) {
            show_ids(ids, i + 1);
            show("given", t, tl);
            fail_msg("%s: id %zu gave text that is not whole UTF-8 characters", what, i);
        }
        put(&given, t, tl);
        if (dt_tok_stream_pending(s, &p, &pl, &err) != 0) fail_msg("%s: pending: %s", what, err.msg);
        n_held += pl > 0;
        reference(tok, ids, i + 1, skip, &ref);
        both.n = 0;
        put(&both, given.p, given.n);
        put(&both, p, pl);
        if (both.n != ref.n || memcmp(both.p, ref.p, ref.n) != 0) {
            show_ids(ids, i + 1);
            show("given", given.p, given.n);
            show("pending", p, pl);
            show("decode", ref.p, ref.n);
            fail_msg("%s (skip_special %d): after id %zu, given + pending is not the decode", what, skip, i);
        }
    }
    const char *f;
    size_t fl;
    if (dt_tok_stream_flush(s, &f, &fl, &err) != 0) fail_msg("%s: flush: %s", what, err.msg);
    both.n = 0;
    put(&both, given.p, given.n);
    put(&both, f, fl);
    reference(tok, ids, n, skip, &ref);
    if (both.n != ref.n || memcmp(both.p, ref.p, ref.n) != 0) {
        show_ids(ids, n);
        show("given", given.p, given.n);
        show("flush", f, fl);
        show("decode", ref.p, ref.n);
        fail_msg("%s (skip_special %d): given + flush is not the decode", what, skip);
    }
    n_sequences++;
    if (given_out) {
        given_out->n = 0;
        put(given_out, given.p, given.n);
    }
    free(given.p);
    free(ref.p);
    free(both.p);
}

/* ---------------------------------------------------------------- random sequences */

typedef struct {
    int32_t byte_id[256];        /* a token whose bytes are this one byte (-1: none) */
    int32_t *special, *unused, *text_ids;
    size_t n_special, n_unused, n_text;
    int32_t vocab;
} pool;

static const char *const CHARS[] = {"é", "日", "本", "😀", "€", "ñ", "Ö", "𝄞", "a", " ", "\n"};

static void pool_build(const dt_tok *tok, const char *const *texts, int n_texts, pool *pl) {
    memset(pl, 0, sizeof *pl);
    pl->vocab = dt_tok_vocab_size(tok);
    for (int b = 0; b < 256; b++) pl->byte_id[b] = -1;
    pl->special = malloc(64 * sizeof *pl->special);
    pl->unused = malloc(64 * sizeof *pl->unused);
    assert_true(pl->special && pl->unused);
    for (int32_t id = 0; id < pl->vocab; id++) {
        size_t len;
        if (!dt_tok_id_to_token(tok, id, &len)) {
            if (pl->n_unused < 64) pl->unused[pl->n_unused++] = id;
            continue;
        }
        if (dt_tok_is_special(tok, id) && pl->n_special < 64) pl->special[pl->n_special++] = id;
        char *bytes;
        dt_error err;
        if (dt_tok_token_bytes(tok, id, &bytes, &len, &err) != 0) fail_msg("%s", err.msg);
        if (len == 1 && pl->byte_id[(unsigned char)bytes[0]] < 0) pl->byte_id[(unsigned char)bytes[0]] = id;
        free(bytes);
    }
    size_t cap = 1024;
    pl->text_ids = malloc(cap * sizeof *pl->text_ids);
    assert_non_null(pl->text_ids);
    for (int i = 0; i < n_texts; i++) {
        int32_t *ids;
        size_t n;
        dt_error err;
        if (dt_tok_encode(tok, texts[i], strlen(texts[i]), 1, &ids, &n, &err) != 0) continue; /* e.g. no unk */
        for (size_t k = 0; k < n; k++) {
            if (pl->n_text == cap) {
                cap *= 2;
                pl->text_ids = realloc(pl->text_ids, cap * sizeof *pl->text_ids);
                assert_non_null(pl->text_ids);
            }
            pl->text_ids[pl->n_text++] = ids[k];
        }
        free(ids);
    }
}

static void pool_free(pool *pl) {
    free(pl->special);
    free(pl->unused);
    free(pl->text_ids);
}

/* One random sequence of at most cap ids. */
static size_t random_sequence(const pool *pl, int32_t *ids, size_t cap) {
    size_t n = 0;
    const size_t want = 1 + rnd((uint32_t)cap);
    while (n < want) {
        const uint32_t r = rnd(100);
        if (r < 30 && pl->n_text) { /* a run of encoded text */
            size_t at = rnd((uint32_t)pl->n_text), len = 1 + rnd(6);
            for (size_t k = 0; k < len && at + k < pl->n_text && n < cap; k++) ids[n++] = pl->text_ids[at + k];
        } else if (r < 60) { /* a character's bytes, one token each, maybe cut short, maybe with an id inside */
            const char *c = CHARS[rnd(sizeof CHARS / sizeof CHARS[0])];
            const size_t len = strlen(c), cut = rnd(4) == 0 ? 1 + rnd((uint32_t)len) : len;
            const size_t inside = rnd(5) == 0 ? rnd((uint32_t)len) : len;
            for (size_t k = 0; k < cut && n < cap; k++) {
                if (k == inside && k > 0 && n < cap) {
                    const int32_t between[] = {pl->n_special ? pl->special[rnd((uint32_t)pl->n_special)] : 0,
                                               pl->vocab + (int32_t)rnd(3)};
                    ids[n++] = between[rnd(2)];
                }
                const int32_t b = pl->byte_id[(unsigned char)c[k]];
                if (b >= 0 && n < cap) ids[n++] = b;
            }
        } else if (r < 70) { /* a byte that is never UTF-8 or a lone continuation byte */
            const int32_t b = pl->byte_id[rnd(2) ? 0xFF : 0x80 + rnd(64)];
            if (b >= 0) ids[n++] = b;
        } else if (r < 78 && pl->n_special) {
            ids[n++] = pl->special[rnd((uint32_t)pl->n_special)];
        } else if (r < 84) { /* no token: past the vocabulary (a padded embedding), unused, negative */
            const int32_t none[] = {pl->vocab + (int32_t)rnd(5), pl->n_unused ? pl->unused[0] : pl->vocab, -1};
            ids[n++] = none[rnd(3)];
        } else {
            ids[n++] = (int32_t)rnd((uint32_t)pl->vocab);
        }
    }
    return n;
}

static const char *const TEXTS[] = {
    "Hello world", " leading space", "héllo wörld 日本語 ÅÄÖ привет 😀", "a  b   c\n\nd", "eee ee e",
    "The GNU General Public License", "1234 + 5678 = 6912", "</w>##ab ##cd", "\xF0\x9D\x84\x9E music",
};

static void check_random(const dt_tok *tok, const char *name, int rounds) {
    pool pl;
    pool_build(tok, TEXTS, (int)(sizeof TEXTS / sizeof TEXTS[0]), &pl);
    int32_t ids[80];
    dt_tok_stream *s[2] = {dt_tok_stream_new(tok, 0), dt_tok_stream_new(tok, 1)};
    assert_true(s[0] && s[1]);
    char what[256];
    for (int r = 0; r < rounds; r++) {
        const size_t n = random_sequence(&pl, ids, sizeof ids / sizeof ids[0]);
        snprintf(what, sizeof what, "%s, sequence %d", name, r);
        for (int skip = 0; skip < 2; skip++) check_stream(tok, s[skip], ids, n, skip, what, NULL);
    }
    dt_tok_stream_free(s[0]);
    dt_tok_stream_free(s[1]);
    pool_free(&pl);
}

/* ---------------------------------------------------------------- the tokenizers */

static int32_t id_of(const dt_tok *tok, const char *token) {
    const int32_t id = dt_tok_token_to_id(tok, token, strlen(token));
    if (id < 0) fail_msg("no token \"%s\"", token);
    return id;
}

/* Pushes ids[0..n) and checks what each push gives and what is pending after it. */
static void expect_pushes(dt_tok_stream *s, const int32_t *ids, int n, const char *const *gives,
                          const char *const *pending, const char *what) {
    dt_error err;
    for (int i = 0; i < n; i++) {
        const char *t, *p;
        size_t tl, pl;
        assert_int_equal(dt_tok_stream_push(s, ids[i], &t, &tl, &err), 0);
        if (tl != strlen(gives[i]) || memcmp(t, gives[i], tl)) {
            show("got", t, tl);
            show("want", gives[i], strlen(gives[i]));
            fail_msg("%s: push %d", what, i);
        }
        assert_int_equal(dt_tok_stream_pending(s, &p, &pl, &err), 0);
        if (pl != strlen(pending[i]) || memcmp(p, pending[i], pl)) {
            show("pending", p, pl);
            show("want", pending[i], strlen(pending[i]));
            fail_msg("%s: pending after push %d", what, i);
        }
    }
    const char *f;
    size_t fl;
    assert_int_equal(dt_tok_stream_flush(s, &f, &fl, &err), 0);
    if (fl != strlen(pending[n - 1]) || memcmp(f, pending[n - 1], fl)) fail_msg("%s: the flush", what);
}


static dt_tok *load(const char *path) {
    dt_tok *tok = NULL;
    dt_error err;
    if (dt_tok_load(&tok, path, &err) != 0) fail_msg("%s", err.msg);
    return tok;
}

static void test_every_tokenizer(void **state) {
    (void)state;
    char gdir[4096], **names;
    const int n = tu_tokenizer_test_files("golden", &names, gdir, sizeof gdir);
    const char *root = getenv("DT_TOKENIZER_TESTS"), *ref = getenv("DT_TOKREF");
    int checked = 0;
    for (int i = 0; i < n; i++) {
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", gdir, names[i]);
        char *text = tu_read_file(p, NULL);
        cJSON *g = cJSON_Parse(text);
        free(text);
        assert_non_null(g);
        const char *source = cJSON_GetObjectItem(g, "tokenizer")->valuestring;
        char path[8192];
        if (!strncmp(source, "fixture:", 8)) snprintf(path, sizeof path, "%s/fixtures/%s", root, source + 8);
        else snprintf(path, sizeof path, "%s/node_modules/%s", ref ? ref : "", source + 4);
        if (!strncmp(source, "npm:", 4) && (!ref || !tu_file_exists(path))) {
            printf("NOT CHECKED %s: %s is not installed\n", names[i], source + 4);
        } else {
            dt_tok *tok = load(path);
            const int before = n_sequences;
            check_random(tok, names[i], UNDER_ASAN ? 60 : 200);
            printf("%-28s %d sequences: the stream is the decode\n", names[i], (n_sequences - before) / 2);
            dt_tok_free(tok);
            checked++;
        }
        cJSON_Delete(g);
    }
    tu_free_names(names, n);
    assert_true(checked >= 16);
    printf("%d sequences, %d pushes held text back\n", n_sequences, n_held);
    assert_true(n_held > 1000); /* the sequences reached what must wait */
}

/* A fixture's tokenizer with another decoder (JSON text; NULL: none), in the test's folder. */
static dt_tok *with_decoder(const char *fixture, const char *decoder, const char *name) {
    char src[4096], dst[4096];
    snprintf(src, sizeof src, "%s/fixtures/%s", getenv("DT_TOKENIZER_TESTS"), fixture);
    char *text = tu_read_file(src, NULL);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    cJSON_DeleteItemFromObject(j, "decoder");
    cJSON_AddItemToObject(j, "decoder", decoder ? cJSON_Parse(decoder) : cJSON_CreateNull());
    char *out = cJSON_Print(j);
    cJSON_Delete(j);
    tu_path(dst, sizeof dst, name);
    tu_write_file(dst, out, strlen(out));
    free(out);
    return load(dst);
}

static void test_decoder_chains(void **state) {
    (void)state;
    static const struct {
        const char *fixture, *decoder, *what;
    } chains[] = {
        {"llama2_like.json",
         "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\\u2581\"}, "
         "\"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": "
         "\" \", \"start\": 1, \"stop\": 2}]}",
         "Strip of the joined text's first and last two spaces"},
        {"llama2_like.json",
         "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": "
         "\"Replace\", \"pattern\": {\"String\": \"\\u2581\\u2581\"}, \"content\": \"_\"}, {\"type\": \"Metaspace\", "
         "\"replacement\": \"\\u2581\", \"prepend_scheme\": \"always\", \"split\": true}, {\"type\": \"Replace\", "
         "\"pattern\": {\"String\": \"ab\"}, \"content\": \"[AB]\"}]}",
         "Replace of strings and Metaspace after the join"},
        {"llama2_like.json",
         "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": "
         "\"Replace\", \"pattern\": {\"Regex\": \"\\u2581+\"}, \"content\": \" \"}]}",
         "a Replace regex after the join: decoded whole"},
        {"llama2_like.json", NULL, "no decoder: pieces joined by spaces"},
        {"llama2_like.json",
         "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Strip\", \"content\": \"\\u2581\", \"start\": 0, "
         "\"stop\": 1}, {\"type\": \"ByteFallback\"}, {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
         "\"prepend_scheme\": \"first\", \"split\": true}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, "
         "{\"type\": \"Strip\", \"content\": \"x\", \"start\": 2, \"stop\": 1}]}",
         "pieces stripped, two ByteFallbacks, Metaspace on ByteFallback's pieces"},
        {"bytelevel_gpt2.json",
         "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteLevel\"}, {\"type\": \"Replace\", \"pattern\": "
         "{\"String\": \"ab\"}, \"content\": \"X\"}, {\"type\": \"Strip\", \"content\": \"c\", \"start\": 1, \"stop\": "
         "1}, {\"type\": \"Fuse\"}]}",
         "ByteLevel, then a Replace and a Strip of its text"},
        {"metaspace_first.json",
         "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, {\"type\": \"Metaspace\", \"replacement\": "
         "\"\\u2581\", \"prepend_scheme\": \"never\", \"split\": true}]}",
         "Metaspace (never) after Fuse"},
    };
    dt_tok *toks[sizeof chains / sizeof chains[0]];
    for (size_t i = 0; i < sizeof chains / sizeof chains[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "chain%zu.json", i);
        toks[i] = with_decoder(chains[i].fixture, chains[i].decoder, name);
        check_random(toks[i], chains[i].what, UNDER_ASAN ? 100 : 300);
    }
    /* what is held back is only what may still change: the spaces past the two the Strip may drop
     * go out, and a Replace's match goes out once it is whole */
    const int32_t a = id_of(toks[0], "\xE2\x96\x81" "a"), sp = id_of(toks[0], "\xE2\x96\x81"),
                  b = id_of(toks[0], "b");
    dt_tok_stream *s = dt_tok_stream_new(toks[0], 1);
    {
        const int32_t seq[] = {a, sp, sp, sp, b};
        const char *gives[] = {"a", "", "", " ", "  b"}, *pend[] = {"", "", "", "", ""};
        expect_pushes(s, seq, 5, gives, pend, "Strip of the last two spaces");
    }
    dt_tok_stream_free(s);
    s = dt_tok_stream_new(toks[1], 1);
    {
        const int32_t seq[] = {a, sp, sp, b};
        const char *gives[] = {"", "", "a_", "b"}, *pend[] = {"a", "a", "", ""};
        expect_pushes(s, seq, 4, gives, pend, "Replace of two strings after the join");
    }
    dt_tok_stream_free(s);
    s = dt_tok_stream_new(toks[2], 1);
    {
        const int32_t seq[] = {a, sp, b};
        const char *gives[] = {"", "", ""}, *pend[] = {" a", " a ", " a b"};
        expect_pushes(s, seq, 3, gives, pend, "a chain decoded whole");
    }
    dt_tok_stream_free(s);
    for (size_t i = 0; i < sizeof chains / sizeof chains[0]; i++) dt_tok_free(toks[i]);
}

/* ---------------------------------------------------------------- cases by hand */

static void test_cases(void **state) {
    (void)state;
    char path[4096];
    const char *root = getenv("DT_TOKENIZER_TESTS");
    /* Metaspace: the text's first ▁ is dropped, every later one is a space (a token decoded alone, or
     * in a window starting at it, loses its space) */
    snprintf(path, sizeof path, "%s/fixtures/metaspace_first.json", root);
    dt_tok *ms = load(path);
    dt_tok_stream *s = dt_tok_stream_new(ms, 1);
    assert_non_null(s);
    int32_t *ids;
    size_t n;
    dt_error err;
    assert_int_equal(dt_tok_encode(ms, "hello world hello", 17, 0, &ids, &n, &err), 0);
    assert_true(n >= 3);
    buf given = {0};
    check_stream(ms, s, ids, n, 1, "metaspace", &given);
    assert_string_equal(given.p, "hello world hello");
    free(ids);
    dt_tok_stream_free(s);
    dt_tok_free(ms);

    /* ByteLevel: 😀 (F0 9F 98 80) one byte a token, with a special token between its halves */
    snprintf(path, sizeof path, "%s/fixtures/bytelevel_gpt2.json", root);
    dt_tok *bl = load(path);
    int32_t b[4];
    for (int k = 0; k < 4; k++) {
        char c[4];
        tu_bytelevel_char((unsigned char)"\xF0\x9F\x98\x80"[k], c);
        b[k] = id_of(bl, c);
    }
    int32_t special = -1;
    for (int32_t id = 0; id < dt_tok_vocab_size(bl) && special < 0; id++)
        if (dt_tok_is_special(bl, id)) special = id;
    assert_true(special >= 0);
    size_t sl;
    const char *st = dt_tok_id_to_token(bl, special, &sl);
    s = dt_tok_stream_new(bl, 1);
    {
        const int32_t seq[] = {b[0], b[1], b[2], b[3]};
        const char *gives[] = {"", "", "", "😀"}, *pend[] = {FFFD, FFFD, FFFD, ""};
        expect_pushes(s, seq, 4, gives, pend, "ByteLevel: an emoji in four tokens");
        /* skipped, the special token leaves the character whole */
        const int32_t seq2[] = {b[0], b[1], special, b[2], b[3]};
        const char *gives2[] = {"", "", "", "", "😀"}, *pend2[] = {FFFD, FFFD, FFFD, FFFD, ""};
        expect_pushes(s, seq2, 5, gives2, pend2, "ByteLevel: a skipped special token inside a character");
    }
    dt_tok_stream_free(s);
    s = dt_tok_stream_new(bl, 0);
    {
        /* written out, it cuts the character: F0 9F before it, 98 80 after, each ill-formed */
        char after[64];
        snprintf(after, sizeof after, FFFD "%.*s", (int)sl, st);
        const int32_t seq[] = {b[0], b[1], special, b[2], b[3]};
        const char *gives[] = {"", "", after, FFFD, FFFD}, *pend[] = {FFFD, FFFD, "", "", ""};
        expect_pushes(s, seq, 5, gives, pend, "ByteLevel: a special token written inside a character");
    }
    dt_tok_stream_free(s);
    /* a token's bytes: the byte map's, not U+FFFD's */
    char *bytes;
    assert_int_equal(dt_tok_token_bytes(bl, b[0], &bytes, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal((unsigned char)bytes[0], 0xF0);
    free(bytes);
    assert_int_equal(dt_tok_token_bytes(bl, dt_tok_vocab_size(bl), &bytes, &n, &err), -1);
    assert_non_null(strstr(err.msg, "not a token"));
    dt_tok_free(bl);

    /* ByteFallback: a run is final only when a token that is not a byte ends it (<0xFF> after 日
     * turns all four bytes into U+FFFD); a special token ends a run when written, not when skipped */
    snprintf(path, sizeof path, "%s/fixtures/llama2_like.json", root);
    dt_tok *ll = load(path);
    const int32_t e6 = id_of(ll, "<0xE6>"), x97 = id_of(ll, "<0x97>"), a5 = id_of(ll, "<0xA5>"),
                  ff = id_of(ll, "<0xFF>"), eos = id_of(ll, "</s>");
    int32_t word;
    assert_int_equal(dt_tok_encode(ll, "a", 1, 0, &ids, &n, &err), 0);
    assert_int_equal(n, 1);
    word = ids[0]; /* "▁a" */
    free(ids);
    s = dt_tok_stream_new(ll, 1);
    {
        const int32_t seq[] = {word, e6, x97, a5, word};
        const char *gives[] = {"a", "", "", "", "日 a"}, *pend[] = {"", FFFD, FFFD FFFD, "日", ""};
        expect_pushes(s, seq, 5, gives, pend, "ByteFallback: 日 in three tokens");
        const int32_t seq2[] = {e6, x97, a5, ff, word};
        const char *gives2[] = {"", "", "", "", FFFD FFFD FFFD FFFD " a"};
        const char *pend2[] = {FFFD, FFFD FFFD, "日", FFFD FFFD FFFD FFFD, ""};
        expect_pushes(s, seq2, 5, gives2, pend2, "ByteFallback: a run that turns invalid after a whole character");
        const int32_t seq3[] = {e6, eos, x97, a5, word};
        const char *gives3[] = {"", "", "", "", "日 a"}, *pend3[] = {FFFD, FFFD, FFFD FFFD, "日", ""};
        expect_pushes(s, seq3, 5, gives3, pend3, "ByteFallback: a skipped special token inside a run");
    }
    dt_tok_stream_free(s);
    s = dt_tok_stream_new(ll, 0);
    {
        const int32_t seq[] = {e6, eos, x97, a5};
        const char *gives[] = {"", FFFD "</s>", "", ""}, *pend[] = {FFFD, "", FFFD, FFFD FFFD};
        expect_pushes(s, seq, 4, gives, pend, "ByteFallback: a written special token ends the run");
    }
    dt_tok_stream_free(s);
    assert_int_equal(dt_tok_token_bytes(ll, e6, &bytes, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal((unsigned char)bytes[0], 0xE6);
    free(bytes);
    assert_int_equal(dt_tok_token_bytes(ll, word, &bytes, &n, &err), 0);
    assert_string_equal(bytes, " a"); /* ▁ a space: the token after others */
    free(bytes);
    dt_tok_free(ll);
    free(given.p);
}

/* A byte-level model: its bytes as they are, whole characters at a time, through dt_model_tok_stream. */
static void test_bytes(void **state) {
    (void)state;
    dt_config c;
    dt_error err;
    tu_tiny_diff_config(&c);
    dt_model m;
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    dt_tok_stream *s;
    assert_int_equal(dt_model_tok_stream(&m, 1, &s, &err), 0);
    {
        const int32_t seq[] = {'h', 0xC3, 0xA9, 0xE6, 0x97, 'x', 0xF0, 0x9F, 0x98, 0x80, 0xFF, 300, 0xE6};
        const char *gives[] = {"h", "", "\xC3\xA9", "", "", "\xE6\x97x", "", "", "", "\xF0\x9F\x98\x80",
                               "\xFF", "", ""};
        const char *pend[] = {"", "\xC3", "", "\xE6", "\xE6\x97", "", "\xF0", "\xF0\x9F", "\xF0\x9F\x98", "", "", "",
                              "\xE6"};
        expect_pushes(s, seq, 13, gives, pend, "bytes");
    }
    int32_t ids[80];
    pool pl;
    memset(&pl, 0, sizeof pl);
    pl.vocab = 256;
    for (int b = 0; b < 256; b++) pl.byte_id[b] = b;
    for (int r = 0; r < 300; r++) {
        const size_t n = random_sequence(&pl, ids, sizeof ids / sizeof ids[0]);
        check_stream(NULL, s, ids, n, 1, "bytes", NULL);
        /* and the model's own decode of them */
        int kept[80];
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < 256) kept[k++] = ids[i];
        char *text;
        size_t len;
        assert_int_equal(dt_model_decode(&m, kept, k, 1, &text, &len, &err), 0);
        buf ref = {0};
        reference(NULL, ids, n, 1, &ref);
        assert_int_equal(len, ref.n);
        assert_memory_equal(text, ref.p, len);
        free(text);
        free(ref.p);
    }
    dt_tok_stream_free(s);
    dt_model_free(&m);
}

/* A long sequence streams in time proportional to it (decoding the whole after every id would take
 * n² / 2 = 2·10¹⁰ token decodes here, hours, where this takes a second): the text is still the
 * whole decode's. */
static void test_long_sequence(void **state) {
    (void)state;
    static const char *const fixtures[] = {"llama2_like.json", "bytelevel_gpt2.json", "metaspace_first.json"};
    enum { N = 200000 };
    int32_t *ids = malloc(N * sizeof *ids);
    assert_non_null(ids);
    for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/fixtures/%s", getenv("DT_TOKENIZER_TESTS"), fixtures[f]);
        dt_tok *tok = load(path);
        pool pl;
        pool_build(tok, TEXTS, (int)(sizeof TEXTS / sizeof TEXTS[0]), &pl);
        size_t n = 0;
        while (n < N) n += random_sequence(&pl, ids + n, N - n < 80 ? N - n : 80);
        dt_tok_stream *s = dt_tok_stream_new(tok, 1);
        assert_non_null(s);
        buf given = {0};
        dt_error err;
        for (size_t i = 0; i <= n; i++) {
            const char *t;
            size_t tl;
            if ((i < n ? dt_tok_stream_push(s, ids[i], &t, &tl, &err) : dt_tok_stream_flush(s, &t, &tl, &err)) != 0)
                fail_msg("%s", err.msg);
            put(&given, t, tl);
        }
        buf ref = {0};
        reference(tok, ids, n, 1, &ref);
        assert_int_equal(given.n, ref.n);
        assert_memory_equal(given.p, ref.p, ref.n);
        free(given.p);
        free(ref.p);
        dt_tok_stream_free(s);
        pool_free(&pl);
        dt_tok_free(tok);
    }
    free(ids);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_decoder_chains),
        cmocka_unit_test(test_every_tokenizer),
        cmocka_unit_test(test_long_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
