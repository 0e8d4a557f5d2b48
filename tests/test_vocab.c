/* test_vocab.c — the model carries its vocabulary (a tokenizer.json, or bytes) through load, save,
 * quantisation and export, text becomes a model's tokens one way, and dt_generate is the decode
 * loop it claims to be. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "difftrans.h"
#include "testutil.h"

static const char *TEXT = "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs.\n"
                          "Another line of text, with words that repeat: the the the fox fox dog.\n";

/* A trained BPE tokenizer of 300 tokens (256 bytes, 41 merges, bos / eos / pad = 297 / 298 / 299)
 * in tmp/tok, and the text it learned from in tmp/text.txt. */
static void make_tokenizer(char *dir, size_t n, char *text_path, size_t tn) {
    tu_path(text_path, tn, "text.txt");
    char text[4096] = "";
    for (int i = 0; i < 20; i++) strcat(text, TEXT);
    tu_write_file(text_path, text, strlen(text));
    tu_path(dir, n, "tok");
    dt_tok_train_options o;
    dt_tok_train_defaults(&o);
    const char *files[] = {text_path};
    o.files = files;
    o.n_files = 1;
    o.vocab_size = 300;
    o.min_frequency = 1;
    o.quiet = 1;
    dt_error err;
    if (dt_tok_train(&o, dir, &err) != 0) fail_msg("%s", err.msg);
}

/* A quantised checkpoint goes to a new directory: clear what an earlier run of the test left. */
static void fresh_dir(char *dir, size_t n, const char *name) {
    tu_path(dir, n, name);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void make_model(dt_model *m, int vocab) {
    dt_config c;
    tu_tiny_diff_config(&c);
    c.vocab_size = vocab;
    c.max_position_embeddings = 64;
    dt_error err;
    assert_int_equal(dt_model_create(m, &c, &err), 0);
    dt_model_init_random(m, 3);
    for (size_t i = 0; i < m->n_params; i++) m->params[i] *= 6.0f; /* attention far from uniform */
}

static void test_byte_level_model(void **state) {
    (void)state;
    dt_model m, back;
    dt_error err;
    char dir[512], hf[512], path[600];
    make_model(&m, 256);
    assert_null(dt_model_tok(&m));
    tu_path(dir, sizeof dir, "bytes");
    assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
    snprintf(path, sizeof path, "%s/difftrans_tokenizer.json", dir);
    assert_true(tu_file_exists(path));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    assert_false(tu_file_exists(path));
    /* the export carries a tokenizer.json of the bytes beside the marker, and loads byte-level */
    tu_path(hf, sizeof hf, "bytes_hf");
    assert_int_equal(dt_model_save(&m, hf, 1, &err), 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", hf);
    assert_true(tu_file_exists(path));
    assert_int_equal(dt_model_load(&back, hf, &err), 0);
    assert_null(dt_model_tok(&back));
    dt_model_free(&back);
    dt_tok *tok;
    assert_int_equal(dt_tok_load(&tok, path, &err), 0);
    const char *s = "h\xC3\xA9llo \xF0\x9F\xA4\x97\n\t~";
    int32_t *ids;
    size_t n;
    assert_int_equal(dt_tok_encode(tok, s, strlen(s), 1, &ids, &n, &err), 0);
    assert_int_equal(n, strlen(s));
    for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], (unsigned char)s[i]);
    char *text;
    size_t len;
    assert_int_equal(dt_tok_decode(tok, ids, n, 0, &text, &len, &err), 0);
    assert_string_equal(text, s);
    free(text);
    free(ids);
    dt_tok_free(tok);
    /* the model's own encoding of text is its bytes, each checked against the embedding */
    int *mids;
    assert_int_equal(dt_model_encode(&m, s, strlen(s), 1, &mids, &n, &err), 0);
    assert_int_equal(n, strlen(s));
    assert_int_equal(mids[1], 0xC3);
    free(mids);
    dt_model_free(&m);
    make_model(&m, 200);
    assert_int_equal(dt_model_encode(&m, s, strlen(s), 1, &mids, &n, &err), -1);
    assert_non_null(strstr(err.msg, "byte 240 at offset 7 is outside the model's vocabulary of 200"));
    dt_model_free(&m);
}

static void test_bpe_vocabulary_travels(void **state) {
    (void)state;
    char tokdir[512], text[512], dir[512], qdir[512], path[600];
    make_tokenizer(tokdir, sizeof tokdir, text, sizeof text);
    dt_model m, back, q;
    dt_error err;
    make_model(&m, 300);
    assert_int_equal(dt_model_set_tokenizer(&m, tokdir, &err), 0);
    assert_non_null(dt_model_tok(&m));
    tu_path(dir, sizeof dir, "bpe");
    assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
    size_t n1, n2;
    snprintf(path, sizeof path, "%s/tokenizer.json", tokdir);
    char *a = tu_read_file(path, &n1);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char *b = tu_read_file(path, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1); /* byte for byte what was loaded */
    free(a);
    free(b);
    snprintf(path, sizeof path, "%s/difftrans_tokenizer.json", dir);
    assert_false(tu_file_exists(path));
    assert_int_equal(dt_model_load(&back, dir, &err), 0);
    assert_true(dt_vocab_same(&m.vocab, &back.vocab));
    /* quantised and saved: still this vocabulary, and text reads as the same tokens */
    assert_int_equal(dt_model_load(&q, dir, &err), 0);
    dt_quant_options qo;
    dt_quant_defaults(&qo);
    qo.scheme = DT_QUANT_Q8_0;
    qo.quiet = 1;
    if (dt_model_quantize(&q, &qo, &err) != 0) fail_msg("%s", err.msg);
    fresh_dir(qdir, sizeof qdir, "bpe_q8");
    assert_int_equal(dt_model_save(&q, qdir, 0, &err), 0);
    dt_model_free(&q);
    assert_int_equal(dt_model_load(&q, qdir, &err), 0);
    assert_int_equal(dt_model_quant_scheme(&q, NULL), DT_QUANT_Q8_0);
    assert_non_null(dt_model_tok(&q));
    assert_true(dt_vocab_same(&m.vocab, &q.vocab));
    assert_int_equal(q.cfg.special.bos_token_id, 297);
    assert_int_equal(q.cfg.special.eos_token_id[0], 298);
    int *t1, *t2;
    size_t bytes;
    assert_int_equal(dt_model_text_tokens(&back, text, &t1, &n1, &bytes, &err), 0);
    assert_int_equal(dt_model_text_tokens(&q, text, &t2, &n2, NULL, &err), 0);
    assert_int_equal(n1, n2);
    assert_memory_equal(t1, t2, n1 * sizeof *t1);
    assert_true(n1 < bytes / 2); /* merges were used: these are not bytes */
    free(t1);
    free(t2);
    /* a byte-level model reads differently */
    dt_model bytes_model;
    make_model(&bytes_model, 300);
    assert_false(dt_vocab_same(&m.vocab, &bytes_model.vocab));
    dt_model_free(&bytes_model);
    dt_model_free(&q);
    dt_model_free(&back);
    dt_model_free(&m);
}

/* *out (freed first) = text with the first `from` replaced by `to`; 0 when text has no `from`. */
static int replace_first(const char *text, char **out, const char *from, const char *to) {
    const char *at = strstr(text, from);
    if (!at) return 0;
    const size_t head = (size_t)(at - text), from_len = strlen(from), to_len = strlen(to);
    free(*out);
    *out = malloc(strlen(text) - from_len + to_len + 1);
    assert_non_null(*out);
    memcpy(*out, text, head);
    memcpy(*out + head, to, to_len);
    strcpy(*out + head + to_len, at + from_len);
    return 1;
}

/* dt_vocab_same, also through the fingerprints files record (needle.json): equal exactly when it
 * finds the vocabularies the same. */
static void assert_same(const dt_vocab *a, const dt_vocab *b, int same) {
    char fa[17], fb[17];
    dt_error err;
    assert_int_equal(dt_vocab_same(a, b), same);
    assert_int_equal(dt_vocab_fingerprint(a, fa, &err), 0);
    assert_int_equal(dt_vocab_fingerprint(b, fb, &err), 0);
    assert_int_equal(strcmp(fa, fb) == 0, same);
    assert_true(strlen(fa) == (a->tok ? 16u : 0u));
}

/* Vocabularies are one when their tokenizer.json files hold one JSON value: a model read back from
 * the GGUF it was exported to has the trained tokenizer's file rebuilt without its final newline, and
 * `eval --tokens` refused the dataset made with that very tokenizer. */
static void test_vocab_same_by_value(void **state) {
    (void)state;
    char tokdir[512], text[512], path[600];
    make_tokenizer(tokdir, sizeof tokdir, text, sizeof text);
    snprintf(path, sizeof path, "%s/tokenizer.json", tokdir);
    size_t n;
    char *json = tu_read_file(path, &n);
    assert_true(n > 2 && json[n - 1] == '\n');
    char *variant = malloc(n + 2);
    assert_non_null(variant);
    /* laid out otherwise: a leading space and no final newline */
    variant[0] = ' ';
    memcpy(variant + 1, json, n - 1);
    char vpath[640];
    snprintf(vpath, sizeof vpath, "%s.layout.json", path);
    tu_write_file(vpath, variant, n);
    dt_vocab a, b;
    dt_error err;
    assert_int_equal(dt_vocab_load(&a, path, &err), 0);
    assert_int_equal(dt_vocab_load(&b, vpath, &err), 0);
    assert_same(&a, &b, 1);
    dt_vocab_free(&b);
    /* the keys of its objects in another order: the same value */
    char *swapped = NULL;
    assert_true(replace_first(json, &swapped, "\"lstrip\":false,\"rstrip\":false",
                              "\"rstrip\":false,\"lstrip\":false"));
    tu_write_file(vpath, swapped, strlen(swapped));
    free(swapped);
    assert_int_equal(dt_vocab_load(&b, vpath, &err), 0);
    assert_same(&a, &b, 1);
    dt_vocab_free(&b);
    dt_vocab bytes;
    assert_int_equal(dt_vocab_load(&bytes, NULL, &err), 0);
    assert_same(&a, &bytes, 0);
    dt_vocab_free(&bytes);
    /* a value that differs (bos strips the space before it) is another tokenizer */
    memcpy(variant, json, n);
    variant[n] = '\0';
    char *at = strstr(variant, "\"lstrip\":false");
    assert_non_null(at);
    const char *lstrip_true = "\"lstrip\":true";
    const size_t old_len = strlen("\"lstrip\":false"), new_len = strlen(lstrip_true);
    memmove(at + new_len, at + old_len, strlen(at) - old_len + 1);
    memcpy(at, lstrip_true, new_len);
    tu_write_file(vpath, variant, strlen(variant));
    assert_int_equal(dt_vocab_load(&b, vpath, &err), 0);
    assert_same(&a, &b, 0);
    dt_vocab_free(&b);
    /* an added token matched in the normalised text: the same ids without a normaliser (a tokenizer
     * read back from its GGUF file has every such flag false), not with one */
    assert_true(replace_first(json, &variant, "\"normalized\":false", "\"normalized\":true"));
    tu_write_file(vpath, variant, strlen(variant));
    assert_int_equal(dt_vocab_load(&b, vpath, &err), 0);
    assert_same(&a, &b, 1);
    dt_vocab_free(&b);
    char *with_nfc = NULL;
    assert_true(replace_first(variant, &with_nfc, "\"normalizer\":null", "\"normalizer\":{\"type\":\"NFC\"}"));
    tu_write_file(vpath, with_nfc, strlen(with_nfc));
    assert_true(replace_first(json, &variant, "\"normalizer\":null", "\"normalizer\":{\"type\":\"NFC\"}"));
    char npath[700];
    snprintf(npath, sizeof npath, "%s.nfc.json", path);
    tu_write_file(npath, variant, strlen(variant));
    dt_vocab c;
    assert_int_equal(dt_vocab_load(&b, vpath, &err), 0);
    assert_int_equal(dt_vocab_load(&c, npath, &err), 0);
    assert_same(&c, &b, 0);
    dt_vocab_free(&c);
    dt_vocab_free(&b);
    free(with_nfc);
    dt_vocab_free(&a);
    free(variant);
    free(json);
}

/* A checkpoint with neither vocabulary file: bytes while its ids can be bytes; past 256 ids, token ids
 * only — every text function refuses naming it, and a copy of it does not turn into a byte-level
 * model (the marker written into a quantised copy said "bytes" of a BPE model's ids). */
static void test_checkpoint_without_tokenizer(void **state) {
    (void)state;
    char dir[512], copy[512], path[600], text[512];
    dt_model m, back;
    dt_error err;
    tu_path(text, sizeof text, "ids_only.txt");
    tu_write_file(text, "hello", 5);
    for (int vocab = 256; vocab <= 300; vocab += 44) {
        make_model(&m, vocab);
        tu_path(dir, sizeof dir, vocab == 256 ? "no_vocab_256" : "no_vocab_300");
        assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
        dt_model_free(&m);
        snprintf(path, sizeof path, "%s/difftrans_tokenizer.json", dir);
        assert_int_equal(remove(path), 0);
        assert_int_equal(dt_model_load(&back, dir, &err), 0);
        assert_null(dt_model_tok(&back));
        int *ids = NULL;
        size_t n = 0;
        char *out = NULL;
        size_t len = 0;
        const int one = 65;
        if (vocab == 256) { /* an old byte-level checkpoint, from before the marker */
            assert_null(back.vocab.ids_only_dir);
            assert_int_equal(dt_model_check_text(&back, &err), 0);
            assert_int_equal(dt_model_encode(&back, "hi", 2, 1, &ids, &n, &err), 0);
            assert_int_equal(n, 2);
            free(ids);
            dt_model_free(&back);
            continue;
        }
        assert_string_equal(back.vocab.ids_only_dir, dir);
        assert_int_equal(dt_model_check_text(&back, &err), -1);
        assert_int_equal(err.code, DT_ERR_INVALID);
        assert_non_null(strstr(err.msg, "no_vocab_300: the model has no tokenizer"));
        assert_int_equal(dt_model_encode(&back, "hi", 2, 1, &ids, &n, &err), -1);
        assert_null(ids);
        assert_int_equal(dt_model_encode_prompt(&back, "", &ids, &n, &err), -1);
        assert_int_equal(dt_model_decode(&back, &one, 1, 0, &out, &len, &err), -1);
        assert_null(out);
        assert_int_equal(dt_model_text_tokens(&back, text, &ids, &n, NULL, &err), -1);
        assert_non_null(strstr(err.msg, "token ids only"));
        /* it still computes on ids */
        const int seq[4] = {299, 3, 280, 1};
        double loss = 0;
        size_t scored = 0;
        assert_int_equal(dt_eval_tokens(&back, seq, 4, 1, 4, &loss, &scored, &err), 0);
        assert_true(loss > 0 && loss < 20);
        /* a copy says as little as the source, also where a marker was before */
        tu_path(copy, sizeof copy, "no_vocab_copy");
        assert_int_equal(dt_model_save(&back, copy, 1, &err), 0);
        snprintf(path, sizeof path, "%s/difftrans_tokenizer.json", copy);
        assert_false(tu_file_exists(path));
        snprintf(path, sizeof path, "%s/tokenizer.json", copy);
        assert_false(tu_file_exists(path));
        dt_model copied;
        assert_int_equal(dt_model_load(&copied, copy, &err), 0);
        assert_non_null(copied.vocab.ids_only_dir);
        assert_true(dt_vocab_same(&back.vocab, &copied.vocab));
        dt_model bytes_model;
        make_model(&bytes_model, 300);
        assert_false(dt_vocab_same(&back.vocab, &bytes_model.vocab));
        dt_model_free(&bytes_model);
        dt_model_free(&copied);
        /* given a vocabulary (here: bytes, explicitly), it reads text again */
        assert_int_equal(dt_model_set_tokenizer(&back, NULL, &err), 0);
        assert_null(back.vocab.ids_only_dir);
        assert_int_equal(dt_model_check_text(&back, &err), 0);
        dt_model_free(&back);
    }
}

static void test_vocabulary_must_fit(void **state) {
    (void)state;
    char tokdir[512], text[512];
    make_tokenizer(tokdir, sizeof tokdir, text, sizeof text);
    dt_model m;
    dt_error err;
    make_model(&m, 256);
    assert_int_equal(dt_model_set_tokenizer(&m, tokdir, &err), -1);
    assert_non_null(strstr(err.msg, "tok/tokenizer.json: a vocabulary of 300 tokens is larger than the model's embedding"));
    assert_null(dt_model_tok(&m)); /* unchanged */
    dt_model_free(&m);
    /* a padded embedding is fine, a special id past the tokenizer's vocabulary is not */
    make_model(&m, 320);
    m.cfg.special.n_eos = 1;
    m.cfg.special.eos_token_id[0] = 310;
    assert_int_equal(dt_model_set_tokenizer(&m, tokdir, &err), -1);
    assert_non_null(strstr(err.msg, "eos_token_id 310 is outside the model's vocabulary of 300 tokens"));
    m.cfg.special.eos_token_id[0] = 298;
    assert_int_equal(dt_model_set_tokenizer(&m, tokdir, &err), 0);
    char dir[512], path[600];
    tu_path(dir, sizeof dir, "padded");
    assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
    /* a checkpoint whose generation config names an id the tokenizer lacks is refused at load */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    tu_write_file(path, "{\"eos_token_id\": 305}", 21);
    dt_model back;
    assert_int_equal(dt_model_load(&back, dir, &err), -1);
    assert_non_null(strstr(err.msg, "eos_token_id 305 is outside"));
    dt_model_free(&m);
}

/* DIR/generation_config.json holds every one of want (NULL-terminated), compact-spaced as cJSON
 * prints ("\"key\":\tvalue"). */
static void expect_generation_config(const char *dir, const char *const *want) {
    char path[600];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    char *text = tu_read_file(path, NULL);
    for (int i = 0; want[i]; i++)
        if (!strstr(text, want[i])) fail_msg("%s lacks %s:\n%s", path, want[i], text);
    free(text);
}

/* generation_config.json's other keys (transformers' sampling defaults, its version) go into every
 * checkpoint written from the model: a save, an export for Hugging Face in BF16, a quantised copy
 * (they were dropped: a Hub model exported back lost its do_sample / temperature / top_p); the
 * token ids written are the model's. */
static void test_generation_config_travels(void **state) {
    (void)state;
    dt_model m, back;
    dt_error err;
    char dir[512], path[600];
    make_model(&m, 256);
    tu_path(dir, sizeof dir, "gen_src");
    assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
    dt_model_free(&m);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    const char *gen = "{\"_from_model_config\": false, \"bos_token_id\": 1, \"do_sample\": true, "
                      "\"eos_token_id\": [2, 7], \"temperature\": 0.6, \"top_p\": 0.9, "
                      "\"transformers_version\": \"4.44.0\"}";
    tu_write_file(path, gen, strlen(gen));
    assert_int_equal(dt_model_load(&m, dir, &err), 0);
    assert_int_equal(m.cfg.special.n_eos, 2);
    m.cfg.special.eos_token_id[1] = 9; /* the model's ids are the ones written */
    static const char *const want[] = {"\"_from_model_config\":\tfalse", "\"bos_token_id\":\t1",
                                       "\"do_sample\":\ttrue", "\"eos_token_id\":\t[2, 9]",
                                       "\"temperature\":\t0.6", "\"top_p\":\t0.9",
                                       "\"transformers_version\":\t\"4.44.0\"", NULL};
    char out[512];
    tu_path(out, sizeof out, "gen_saved");
    assert_int_equal(dt_model_save(&m, out, 0, &err), 0);
    expect_generation_config(out, want);
    assert_int_equal(dt_model_load(&back, out, &err), 0); /* and again from the copy */
    tu_path(out, sizeof out, "gen_hf");
    dt_save_options opt = {.hf_export = 1, .dtype = DT_BF16};
    assert_int_equal(dt_model_save_with(&back, out, &opt, &err), 0);
    expect_generation_config(out, want);
    dt_model_free(&back);
    dt_quant_options qo;
    dt_quant_defaults(&qo);
    qo.scheme = DT_QUANT_Q8_0;
    qo.quiet = 1;
    if (dt_model_quantize(&m, &qo, &err) != 0) fail_msg("%s", err.msg);
    fresh_dir(out, sizeof out, "gen_q8");
    assert_int_equal(dt_model_save(&m, out, 0, &err), 0);
    expect_generation_config(out, want);
    dt_model_free(&m);
}

/* A checkpoint with generation_config.json gen ("" for none), loaded; its defaults into o over
 * dt_generate_defaults'; returns dt_model_generation_defaults' result (err's message on -1). */
static int generation_defaults_of(const char *gen, dt_generate_options *o, dt_error *err) {
    dt_model m;
    char dir[512], path[600];
    make_model(&m, 256);
    tu_path(dir, sizeof dir, "gen_defaults");
    assert_int_equal(dt_model_save(&m, dir, 0, err), 0);
    dt_model_free(&m);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (*gen) tu_write_file(path, gen, strlen(gen));
    else assert_int_equal(unlink(path), 0);
    assert_int_equal(dt_model_load(&m, dir, err), 0);
    dt_generate_defaults(o);
    const int rc = dt_model_generation_defaults(&m, o, err);
    dt_model_free(&m);
    return rc;
}

/* generation_config.json's sampling is generate's default as transformers' generate reads it (it
 * was ignored: a model published with temperature 0.6 and top_p 0.9 sampled at 0.8 and 0.95). */
static void test_generation_defaults(void **state) {
    (void)state;
    dt_generate_options o;
    dt_error err;
    assert_int_equal(generation_defaults_of("{\"do_sample\": true, \"temperature\": 0.6, \"top_p\": 0.9, "
                                            "\"max_new_tokens\": 33}", &o, &err), 1);
    assert_true(o.sampler.temperature == 0.6f && o.sampler.top_p == 0.9f);
    assert_int_equal(o.sampler.top_k, 50); /* transformers' default top_k */
    assert_int_equal(o.max_new_tokens, 33);
    /* a temperature without do_sample: transformers decodes greedily */
    assert_int_equal(generation_defaults_of("{\"temperature\": 0.6}", &o, &err), 1);
    assert_true(o.sampler.temperature == 0.0f);
    assert_int_equal(generation_defaults_of("{\"do_sample\": true, \"top_k\": 0}", &o, &err), 1);
    assert_true(o.sampler.temperature == 1.0f && o.sampler.top_p == 1.0f);
    assert_int_equal(o.sampler.top_k, 0);
    assert_true(o.sampler.min_p == 0.0f); /* off unless set */
    assert_int_equal(generation_defaults_of("{\"do_sample\": true, \"min_p\": 0.05}", &o, &err), 1);
    assert_true(o.sampler.min_p == 0.05f && o.sampler.temperature == 1.0f);
    /* none set, or no file: difftrans's own defaults stay */
    dt_generate_options d;
    dt_generate_defaults(&d);
    assert_int_equal(generation_defaults_of("{\"bos_token_id\": 1}", &o, &err), 0);
    assert_memory_equal(&o.sampler, &d.sampler, sizeof d.sampler);
    assert_int_equal(o.max_new_tokens, d.max_new_tokens);
    assert_int_equal(generation_defaults_of("", &o, &err), 0);
    assert_memory_equal(&o.sampler, &d.sampler, sizeof d.sampler);
    /* bad values are named */
    assert_int_equal(generation_defaults_of("{\"do_sample\": \"yes\"}", &o, &err), -1);
    assert_non_null(strstr(err.msg, "generation_config.json: key 'do_sample' must be true or false"));
    assert_int_equal(generation_defaults_of("{\"do_sample\": true, \"top_p\": 1.5}", &o, &err), -1);
    assert_non_null(strstr(err.msg, "top_p 1.5 in (0, 1]"));
    assert_int_equal(generation_defaults_of("{\"do_sample\": true, \"min_p\": 2}", &o, &err), -1);
    assert_non_null(strstr(err.msg, "min_p 2 in [0, 1]"));
    assert_int_equal(generation_defaults_of("{\"max_new_tokens\": -2}", &o, &err), -1);
    assert_non_null(strstr(err.msg, "max_new_tokens -2 is negative"));
}

/* w8a8 calibration text goes through the model's tokenizer: calibrating on the file gives the static
 * scales of calibrating on the file's tokens, not those of its bytes (ids 0-255 are valid BPE ids
 * too, so reading bytes would run silently on the wrong inputs). */
static void test_calibration_reads_tokens(void **state) {
    (void)state;
    char tokdir[512], text[512];
    make_tokenizer(tokdir, sizeof tokdir, text, sizeof text);
    dt_error err;
    float scales[3][64];
    int n_stats = 0;
    for (int k = 0; k < 3; k++) { /* the file; its tokens; its bytes */
        dt_model m;
        make_model(&m, 300);
        assert_int_equal(dt_model_set_tokenizer(&m, tokdir, &err), 0);
        int *ids = NULL;
        size_t n = 0;
        if (k == 1) assert_int_equal(dt_model_text_tokens(&m, text, &ids, &n, NULL, &err), 0);
        if (k == 2) assert_int_equal(dt_text_load(text, &ids, &n, &err), 0);
        dt_quant_options qo;
        dt_quant_defaults(&qo);
        qo.scheme = DT_QUANT_W8A8;
        qo.calib_samples = 4;
        qo.calib_seq = 16;
        qo.quiet = 1;
        if (k == 0) qo.calib_path = text;
        else qo.calib_tokens = ids, qo.calib_n = n;
        if (dt_model_quantize(&m, &qo, &err) != 0) fail_msg("%s", err.msg);
        const dt_quant_act_stat *st = dt_model_quant_act_stats(&m, &n_stats);
        assert_true(n_stats > 0 && n_stats <= 64);
        for (int i = 0; i < n_stats; i++) scales[k][i] = st[i].input_scale;
        free(ids);
        dt_model_free(&m);
    }
    assert_memory_equal(scales[0], scales[1], (size_t)n_stats * sizeof(float));
    assert_true(memcmp(scales[0], scales[2], (size_t)n_stats * sizeof(float)) != 0);
}

static void test_dequantize(void **state) {
    (void)state;
    dt_model m, q;
    dt_error err;
    make_model(&m, 256);
    dt_quant_options qo;
    dt_quant_defaults(&qo);
    qo.scheme = DT_QUANT_Q4_0;
    qo.quiet = 1;
    if (dt_model_quantize(&m, &qo, &err) != 0) fail_msg("%s", err.msg);
    char dir[512];
    fresh_dir(dir, sizeof dir, "deq_q4");
    assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
    assert_int_equal(dt_model_dequantize(&m, &err), 0); /* quantised here: back to the float weights */
    assert_null(m.quant);
    assert_int_equal(dt_model_load(&q, dir, &err), 0);
    assert_int_equal(dt_model_dequantize(&q, &err), -1);
    assert_non_null(strstr(err.msg, "float weights are not known"));
    assert_non_null(q.quant); /* still the quantised model */
    dt_model_free(&q);
    dt_model_free(&m);
}

/* The greedy continuation by hand: the prompt through the cache, then argmax after argmax. */
static void greedy_by_hand(const dt_model *m, const int *prompt, int np, int n, int *out) {
    dt_error err;
    dt_kvcache *kc = dt_kvcache_create(m, np + n, &err);
    assert_non_null(kc);
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof *logits);
    int token = prompt[0];
    for (int pos = 0; pos < np + n - 1; pos++) {
        assert_int_equal(dt_decode_step(m, kc, token, pos, logits, &err), 0);
        if (pos + 1 < np) {
            token = prompt[pos + 1];
            continue;
        }
        int best = 0;
        for (int v = 1; v < m->cfg.vocab_size; v++)
            if (logits[v] > logits[best]) best = v;
        out[pos + 1 - np] = token = best;
    }
    free(logits);
    dt_kvcache_free(kc);
}

typedef struct {
    int calls, stop_after, last_n_seq;
} counter;

static int count_tokens(void *ctx, int token, int is_stop, const int *seq, int n_seq) {
    counter *c = ctx;
    (void)is_stop;
    assert_int_equal(seq[n_seq - 1], token);
    c->last_n_seq = n_seq;
    return ++c->calls == c->stop_after;
}

static void test_generate(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, 256);
    const int prompt[] = {72, 101, 108, 108, 111}, np = 5, N = 12;
    int want[12], got[12];
    greedy_by_hand(&m, prompt, np, N, want);
    dt_generate_options o;
    dt_generate_defaults(&o);
    o.sampler.temperature = 0;
    o.max_new_tokens = N;
    o.n_stop = 0;
    dt_generate_result r;
    assert_int_equal(dt_generate(&m, prompt, np, &o, got, &r, &err), 0);
    assert_int_equal(r.n_generated, N);
    assert_int_equal(r.stop, DT_STOP_LENGTH);
    assert_memory_equal(got, want, sizeof want);
    /* a stop id ends it before that token is added: take the first token not seen before it */
    int k = 1;
    while (k < N) {
        int seen = 0;
        for (int i = 0; i < k; i++) seen |= want[i] == want[k];
        if (!seen) break;
        k++;
    }
    if (k < N) {
        o.stop_ids = &want[k];
        o.n_stop = 1;
        assert_int_equal(dt_generate(&m, prompt, np, &o, got, &r, &err), 0);
        assert_int_equal(r.n_generated, k);
        assert_int_equal(r.stop, DT_STOP_EOS);
        assert_int_equal(r.stop_token, want[k]);
        assert_memory_equal(got, want, (size_t)k * sizeof *got);
        o.n_stop = 0;
    }
    /* the callback sees every token with the sequence so far, and can end it */
    counter c = {.stop_after = 3};
    o.on_token = count_tokens;
    o.ctx = &c;
    assert_int_equal(dt_generate(&m, prompt, np, &o, got, &r, &err), 0);
    assert_int_equal(c.calls, 3);
    assert_int_equal(c.last_n_seq, np + 3);
    assert_int_equal(r.n_generated, 3);
    assert_int_equal(r.stop, DT_STOP_CALLBACK);
    o.on_token = NULL;
    volatile int cancel = 1;
    o.cancel = &cancel;
    assert_int_equal(dt_generate(&m, prompt, np, &o, got, &r, &err), 0);
    assert_int_equal(r.n_generated, 0);
    assert_int_equal(r.stop, DT_STOP_CANCELLED);
    o.cancel = NULL;
    /* sampling is deterministic for a seed */
    int again[12];
    o.sampler.temperature = 1.0f;
    o.seed = 7;
    assert_int_equal(dt_generate(&m, prompt, np, &o, got, &r, &err), 0);
    assert_int_equal(dt_generate(&m, prompt, np, &o, again, &r, &err), 0);
    assert_memory_equal(got, again, sizeof got);
    /* refusals: each names the argument */
    const int bad[] = {72, 256};
    assert_int_equal(dt_generate(&m, bad, 2, &o, got, &r, &err), -1);
    assert_non_null(strstr(err.msg, "prompt token 256 at position 1 is outside the vocabulary"));
    o.max_new_tokens = 60;
    assert_int_equal(dt_generate(&m, prompt, np, &o, NULL, &r, &err), -1);
    assert_non_null(strstr(err.msg, "(5 tokens) + max_new_tokens 60 exceeds max_position_embeddings 64"));
    assert_int_equal(dt_generate(&m, prompt, 0, &o, NULL, &r, &err), -1);
    o.max_new_tokens = 0;
    assert_int_equal(dt_generate(&m, prompt, np, &o, NULL, &r, &err), 0);
    assert_int_equal(r.n_generated, 0);
    dt_model_free(&m);
}

static void test_prompts_and_stop_ids(void **state) {
    (void)state;
    char tokdir[512], text[512];
    make_tokenizer(tokdir, sizeof tokdir, text, sizeof text);
    dt_model m;
    dt_error err;
    int *ids;
    size_t n;
    make_model(&m, 256);
    assert_int_equal(dt_model_encode_prompt(&m, "", &ids, &n, &err), 0); /* bytes: a line break */
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], '\n');
    free(ids);
    int stop[DT_MAX_EOS];
    assert_int_equal(dt_model_stop_ids(&m, stop), 0);
    dt_model_free(&m);
    make_model(&m, 300);
    assert_int_equal(dt_model_set_tokenizer(&m, tokdir, &err), 0);
    assert_int_equal(dt_model_encode_prompt(&m, "", &ids, &n, &err), 0); /* an empty prompt is BOS */
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 297);
    free(ids);
    assert_int_equal(dt_model_encode_prompt(&m, "The fox", &ids, &n, &err), 0);
    assert_true(n >= 2);
    assert_int_equal(ids[0], 297); /* the post-processor's BOS, as transformers adds it */
    char *back;
    size_t len;
    assert_int_equal(dt_model_decode(&m, ids, n, 1, &back, &len, &err), 0);
    assert_string_equal(back, "The fox");
    free(back);
    free(ids);
    /* no eos in the config: the tokenizer's */
    assert_int_equal(dt_model_stop_ids(&m, stop), 1);
    assert_int_equal(stop[0], 298);
    m.cfg.special.n_eos = 2;
    m.cfg.special.eos_token_id[0] = 5;
    m.cfg.special.eos_token_id[1] = 9;
    assert_int_equal(dt_model_stop_ids(&m, stop), 2); /* the generation config's win */
    assert_int_equal(stop[1], 9);
    dt_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_level_model),    cmocka_unit_test(test_bpe_vocabulary_travels),
        cmocka_unit_test(test_vocab_same_by_value),
        cmocka_unit_test(test_vocabulary_must_fit), cmocka_unit_test(test_generation_config_travels),
        cmocka_unit_test(test_generation_defaults),
        cmocka_unit_test(test_calibration_reads_tokens),
        cmocka_unit_test(test_dequantize),          cmocka_unit_test(test_checkpoint_without_tokenizer),
        cmocka_unit_test(test_generate),            cmocka_unit_test(test_prompts_and_stop_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
