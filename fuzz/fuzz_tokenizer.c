/* fuzz_tokenizer.c — a tokenizer.json from anyone (and the tokenizer_config.json beside it, after
 * FUZZ_TOKCFG_SEP when the input has one). dt_tok_load must refuse it or give a tokenizer that
 * encodes a few texts into ids of its vocabulary, the same ids through a reusable encoder, and
 * decodes every id it produced; ids outside the vocabulary are refused by decode. The parallel
 * encoder, with chunks of a few bytes, gives the ids of one thread. The ids streamed one at a time
 * (dt_tok_stream) give the decode's bytes, and every one of them has its bytes (dt_tok_token_bytes).
 * The same file with every added token's "normalized" flipped is, without a normalizer, the same
 * vocabulary to dt_vocab_same (GGUF keeps no such flag); and where it says so, the ids either gives
 * a text decode to the text of the other's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "difftrans.h"
#include "fuzz_seps.h"
#include "fuzz_util.h"
#include "tokenizer/tok.h"

static const char *const texts[] = {
    "",
    "Hello world! It's 2025: the DIFF Transformer.",
    "  leading spaces,\ttabs\nand\n\nnewlines   ",
    "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82 \xd0\x9f\xd1\x80\xd0\xb8",
    "<|endoftext|><s></s>[CLS] 12345 ...!!! aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
};

static void check_decodes(const dt_tok *tok, const int32_t *ids, size_t n) {
    dt_error err;
    for (size_t i = 0; i < n; i++) {
        char *bytes;
        size_t len;
        if (dt_tok_token_bytes(tok, ids[i], &bytes, &len, &err) != 0) abort();
        free(bytes);
    }
    for (int skip = 0; skip < 2; skip++) {
        char *text = NULL;
        size_t len = 0;
        if (dt_tok_decode(tok, ids, n, skip, &text, &len, &err) != 0) abort(); /* its own ids are tokens */
        if (strlen(text) > len) abort();                                       /* NUL-terminated at len */
        dt_tok_stream *s = dt_tok_stream_new(tok, skip);
        if (!s) abort();
        size_t got = 0;
        for (size_t i = 0; i <= n; i++) {
            const char *t;
            size_t tl;
            if ((i < n ? dt_tok_stream_push(s, ids[i], &t, &tl, &err) : dt_tok_stream_flush(s, &t, &tl, &err)) != 0)
                abort();
            if (tl > len - got || memcmp(text + got, t, tl) != 0) abort();
            got += tl;
        }
        if (got != len) abort();
        dt_tok_stream_free(s);
        free(text);
    }
}

static void write_file(const char *path, const char *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) abort(); /* the harness's own files */
}

/* decode(ids[0..n)) by tok, malloc'd */
static char *decoded(const dt_tok *tok, const int32_t *ids, size_t n) {
    char *text = NULL;
    size_t len;
    dt_error err;
    if (dt_tok_decode(tok, ids, n, 0, &text, &len, &err) != 0) abort();
    return text;
}

static void check_normalized_flag(const dt_tok *tok, const uint8_t *json, size_t n, const uint8_t *cfg, size_t n_cfg) {
    cJSON *j = cJSON_ParseWithLength((const char *)json, n);
    if (!j) abort(); /* dt_tok_load took it */
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
    const int has_normalizer = norm && !cJSON_IsNull(norm);
    cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(j, "added_tokens")) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "normalized");
        const int was = !f || cJSON_IsTrue(f); /* true when not given */
        cJSON_DeleteItemFromObjectCaseSensitive(t, "normalized");
        if (!cJSON_AddBoolToObject(t, "normalized", !was)) abort();
    }
    char *flipped = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!flipped) abort();
    char dir[1024], path[1100];
    fz_path(dir, sizeof dir, "flipped");
    if (mkdir(dir, 0700) != 0 && access(dir, F_OK) != 0) abort();
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_file(path, flipped, strlen(flipped));
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (cfg) write_file(path, (const char *)cfg, n_cfg);
    else unlink(path);
    dt_tok *tok2;
    dt_error err;
    if (dt_tok_load(&tok2, dir, &err) != 0) {
        if (!has_normalizer) abort(); /* the flag means nothing to it then */
        cJSON_free(flipped);
        return;
    }
    const dt_vocab a = {.tok = (dt_tok *)tok, .tokenizer_json = (char *)json, .tokenizer_json_len = n};
    const dt_vocab b = {.tok = tok2, .tokenizer_json = flipped, .tokenizer_json_len = strlen(flipped)};
    const int same = dt_vocab_same(&a, &b);
    if (!has_normalizer && !same) abort();
    for (size_t k = 0; same && k < sizeof texts / sizeof texts[0]; k++) {
        int32_t *ids = NULL, *ids2 = NULL;
        size_t n_ids = 0, n_ids2 = 0;
        const size_t len = strlen(texts[k]);
        const int rc = dt_tok_encode(tok, texts[k], len, 0, &ids, &n_ids, &err);
        const int rc2 = dt_tok_encode(tok2, texts[k], len, 0, &ids2, &n_ids2, &err);
        if (rc != rc2) abort();
        if (rc == 0) {
            char *s1 = decoded(tok, ids, n_ids), *s2 = decoded(tok, ids2, n_ids2);
            if (strcmp(s1, s2) != 0) abort();
            free(s1);
            free(s2);
        }
        free(ids);
        free(ids2);
    }
    dt_tok_free(tok2);
    cJSON_free(flipped);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    size_t n1, n2;
    const uint8_t *p2;
    fz_split(data, n, FUZZ_TOKCFG_SEP, sizeof FUZZ_TOKCFG_SEP - 1, &n1, &p2, &n2);
    fz_write("tokenizer.json", data, n1);
    char cfg[1024];
    fz_path(cfg, sizeof cfg, "tokenizer_config.json");
    if (p2 != data + n1) fz_write("tokenizer_config.json", p2, n2);
    else unlink(cfg);
    dt_tok *tok;
    dt_error err;
    if (dt_tok_load(&tok, fz_dir(), &err) != 0) return 0;
    const int32_t vocab = dt_tok_vocab_size(tok);
    if (vocab < 1) abort();
    dt_tok_encoder *enc = dt_tok_encoder_new(tok);
    if (!enc) abort();
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++)
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            size_t n_ids = 0;
            const int32_t *ids2 = NULL;
            size_t n_ids2 = 0;
            const size_t len = strlen(texts[t]);
            /* a tokenizer may be unable to encode a text (no unk token): refused, not a crash */
            const int rc = dt_tok_encode(tok, texts[t], len, special, &ids, &n_ids, &err);
            const int rc2 = dt_tok_encoder_encode(enc, texts[t], len, special, &ids2, &n_ids2, &err);
            if (rc != rc2) abort();
            if (rc != 0) continue;
            if (n_ids != n_ids2 || (n_ids && memcmp(ids, ids2, n_ids * sizeof *ids) != 0)) abort();
            for (size_t i = 0; i < n_ids; i++)
                if (ids[i] < 0 || ids[i] >= vocab || !dt_tok_id_to_token(tok, ids[i], NULL)) abort();
            check_decodes(tok, ids, n_ids);
            for (size_t chunk = 1; chunk <= 4; chunk += 3) {
                const tk_par par = {chunk, 0};
                int32_t *ids3 = NULL;
                size_t n_ids3 = 0;
                if (tk_encode_parallel(tok, texts[t], len, special, 2, &par, &ids3, &n_ids3, &err) != 0) abort();
                if (n_ids3 != n_ids || (n_ids && memcmp(ids, ids3, n_ids * sizeof *ids) != 0)) abort();
                free(ids3);
            }
            free(ids);
        }
    dt_tok_encoder_free(enc);
    /* every id of a small vocabulary (the first 64 of a large one), then ids that are not tokens */
    int32_t all[64];
    size_t n_all = 0;
    for (int32_t id = 0; id < vocab && n_all < 64; id++)
        if (dt_tok_id_to_token(tok, id, NULL)) all[n_all++] = id;
    check_decodes(tok, all, n_all);
    const int32_t bad[] = {-1, vocab};
    for (int i = 0; i < 2; i++) {
        char *text = NULL;
        size_t len;
        if (dt_tok_decode(tok, &bad[i], 1, 0, &text, &len, &err) == 0) abort();
        if (text) abort();
    }
    check_normalized_flag(tok, data, n1, p2 != data + n1 ? p2 : NULL, n2);
    dt_tok_free(tok);
    return 0;
}
