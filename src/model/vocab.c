/* vocab.c — what a model's token ids mean, carried by the model from load to save, and the one
 * way text becomes a model's tokens.
 *
 * A checkpoint directory holds either a Hugging Face tokenizer.json (with its
 * tokenizer_config.json) or the byte-level marker difftrans_tokenizer.json (id = byte value). The
 * model keeps the tokenizer files' bytes as they were loaded: every checkpoint written from it (a
 * training checkpoint, a quantised copy, an export) then carries the same vocabulary without going
 * back to the source directory, which may be gone, or be the directory being written. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "gguf_model.h"
#include "internal.h"

/* Published tokenizer.json files are up to tens of MB (Llama 3: 9 MB); the loader's own limit. */
#define MAX_TOKENIZER_BYTES ((size_t)1 << 30)
#define MAX_TOKENIZER_CONFIG_BYTES ((size_t)64 << 20)

static const char *const BYTES_MARKER = "difftrans_tokenizer.json";

void vocab_free(dt_vocab *v) {
    dt_tok_free(v->tok);
    free(v->tokenizer_json);
    free(v->tokenizer_config);
    free(v->ids_only_dir);
    memset(v, 0, sizeof *v);
}

static int file_exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 || errno != ENOENT;
}

/* The special ids the model's config names must be tokens of its vocabulary. */
static int check_special_ids(const dt_vocab *v, const dt_config *cfg, const char *where, dt_error *err) {
    const dt_special_ids *s = &cfg->special;
    const int limit = v->tok ? (int)dt_tok_vocab_size(v->tok) : cfg->vocab_size;
    struct {
        const char *name;
        int id;
    } ids[2 + DT_MAX_EOS] = {{"bos_token_id", s->bos_token_id}, {"pad_token_id", s->pad_token_id}};
    int n = 2;
    for (int i = 0; i < s->n_eos; i++) ids[n].name = "eos_token_id", ids[n++].id = s->eos_token_id[i];
    for (int i = 0; i < n; i++)
        if (ids[i].id >= limit)
            return dt_fail(err, "%s: %s %d is outside the model's vocabulary of %d tokens%s", where, ids[i].name,
                           ids[i].id, limit, v->tok ? " (its tokenizer.json)" : "");
    return 0;
}

int vocab_load_tokenizer(dt_vocab *v, const char *path, int vocab_size, dt_error *err) {
    memset(v, 0, sizeof *v);
    if (dt_tok_load(&v->tok, path, err) != 0) return -1;
    const char *json = dt_tok_path(v->tok); /* path may be the directory */
    int rc = read_text_file(json, MAX_TOKENIZER_BYTES, "a tokenizer.json", &v->tokenizer_json, &v->tokenizer_json_len,
                            err);
    char cfg[4200];
    if (rc == 0) {
        const char *slash = strrchr(json, '/');
        const int dir_len = slash ? (int)(slash + 1 - json) : 0;
        rc = dt_pathf(cfg, sizeof cfg, err, "%.*stokenizer_config.json", dir_len, json);
    }
    if (rc == 0 && file_exists(cfg))
        rc = read_text_file(cfg, MAX_TOKENIZER_CONFIG_BYTES, "a tokenizer_config.json", &v->tokenizer_config,
                            &v->tokenizer_config_len, err);
    if (rc == 0 && !v->tokenizer_config) { /* transformers wants one: name the special tokens in it */
        char *text = tokenizer_config_text(v->tok);
        if (!text) rc = dt_fail_oom(err, "%s: out of memory", json);
        else if (!(v->tokenizer_config = strdup(text))) rc = dt_fail_oom(err, "%s: out of memory", json);
        else v->tokenizer_config_len = strlen(text);
        cJSON_free(text);
    }
    if (rc == 0 && dt_tok_vocab_size(v->tok) > vocab_size)
        rc = dt_fail(err, "%s: a vocabulary of %d tokens is larger than the model's embedding (vocab_size %d)", json,
                     (int)dt_tok_vocab_size(v->tok), vocab_size);
    if (rc != 0) vocab_free(v);
    return rc;
}

int vocab_load_dir(dt_vocab *v, const char *dir, const dt_config *cfg, dt_error *err) {
    memset(v, 0, sizeof *v);
    char marker[4200], json[4200];
    if (dt_pathf(marker, sizeof marker, err, "%s/%s", dir, BYTES_MARKER) != 0 ||
        dt_pathf(json, sizeof json, err, "%s/tokenizer.json", dir) != 0)
        return -1;
    const int has_marker = file_exists(marker), has_json = file_exists(json);
    /* neither file, and ids that cannot all be bytes: not a byte-level model (which difftrans always
     * saves with the marker) but one whose tokenizer was left behind. Reading it as bytes printed
     * its ids past 255 as "<id>" and wrote the marker into every copy made of it. */
    if (!has_marker && !has_json && cfg->vocab_size > 256) {
        if (!(v->ids_only_dir = strdup(dir))) return dt_fail_oom(err, "%s: out of memory", dir);
        return 0;
    }
    /* the marker wins: a tokenizer.json beside it is the export's view of the same bytes */
    if (has_marker || !has_json) {
        if (dt_tokenizer_check(dir, err) != 0) return -1;
        return check_special_ids(v, cfg, dir, err) != 0 ? fail_as_format(err) : 0;
    }
    /* the checkpoint's own files disagreeing (a vocabulary larger than its embedding, special ids
     * outside its tokenizer) is the checkpoint's fault */
    if (vocab_load_tokenizer(v, json, cfg->vocab_size, err) != 0) return fail_as_format(err);
    if (check_special_ids(v, cfg, json, err) != 0) {
        vocab_free(v);
        return fail_as_format(err);
    }
    return 0;
}

/* Removes path when it exists; a file that cannot be removed would leave the directory saying two
 * things about its vocabulary. */
static int remove_file(const char *path, dt_error *err) {
    if (unlink(path) != 0 && errno != ENOENT) return dt_fail_io(err, "%s: cannot remove: %s", path, strerror(errno));
    return 0;
}

int vocab_save(const dt_vocab *v, const char *dir, int hf_export, dt_error *err) {
    char marker[4200], json[4200], cfg[4200];
    if (dt_pathf(marker, sizeof marker, err, "%s/%s", dir, BYTES_MARKER) != 0 ||
        dt_pathf(json, sizeof json, err, "%s/tokenizer.json", dir) != 0 ||
        dt_pathf(cfg, sizeof cfg, err, "%s/tokenizer_config.json", dir) != 0)
        return -1;
    if (v->ids_only_dir) /* the copy says as little about its vocabulary as the source did */
        return remove_file(marker, err) || remove_file(json, err) || remove_file(cfg, err) ? -1 : 0;
    if (v->tok) {
        if (write_file_atomic(json, v->tokenizer_json, v->tokenizer_json_len, err) != 0 ||
            write_file_atomic(cfg, v->tokenizer_config, v->tokenizer_config_len, err) != 0)
            return -1;
        return remove_file(marker, err);
    }
    if (dt_tokenizer_save(dir, err) != 0) return -1;
    if (!hf_export) return remove_file(json, err) || remove_file(cfg, err) ? -1 : 0;
    char *bytes_json = NULL, *bytes_cfg = NULL;
    if (tokenizer_bytes_json(&bytes_json, &bytes_cfg) != 0) return dt_fail_oom(err, "%s: out of memory", json);
    int rc = write_text_atomic(json, bytes_json, err);
    if (rc == 0) rc = write_text_atomic(cfg, bytes_cfg, err);
    cJSON_free(bytes_json);
    cJSON_free(bytes_cfg);
    return rc;
}

/* ---------------------------------------------------------------- public */

int dt_model_set_tokenizer(dt_model *m, const char *path, dt_error *err) {
    dt_vocab v = {0};
    if (path && vocab_load_tokenizer(&v, path, m->cfg.vocab_size, err) != 0) return -1;
    if (check_special_ids(&v, &m->cfg, path ? dt_tok_path(v.tok) : "the model", err) != 0) {
        vocab_free(&v);
        return -1;
    }
    vocab_free(&m->vocab);
    m->vocab = v;
    /* the ids the config leaves unset are the tokenizer's, as training sets them */
    dt_special_ids *s = &m->cfg.special;
    if (v.tok && s->bos_token_id < 0) s->bos_token_id = dt_tok_bos_id(v.tok);
    if (v.tok && s->pad_token_id < 0) s->pad_token_id = dt_tok_pad_id(v.tok);
    if (v.tok && s->n_eos == 0 && dt_tok_eos_id(v.tok) >= 0) s->eos_token_id[s->n_eos++] = dt_tok_eos_id(v.tok);
    return 0;
}

const dt_tok *dt_model_tok(const dt_model *m) { return m->vocab.tok; }

static int vocab_check_text(const dt_vocab *v, dt_error *err) {
    if (!v->ids_only_dir) return 0;
    return dt_fail(err,
                   "%s: the model has no tokenizer (neither tokenizer.json nor difftrans_tokenizer.json), and with a "
                   "vocab_size past 256 its ids are not bytes: it takes token ids only. Copy the tokenizer.json it "
                   "was trained with (and tokenizer_config.json) into it",
                   v->ids_only_dir);
}

int dt_model_check_text(const dt_model *m, dt_error *err) { return vocab_check_text(&m->vocab, err); }

static int has_normalizer(const cJSON *tokenizer) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(tokenizer, "normalizer");
    return n && !cJSON_IsNull(n);
}

static void drop_added_normalized(cJSON *tokenizer) {
    cJSON *t, *added = cJSON_GetObjectItemCaseSensitive(tokenizer, "added_tokens");
    cJSON_ArrayForEach(t, added) {
        if (cJSON_IsObject(t)) cJSON_DeleteItemFromObjectCaseSensitive(t, "normalized");
    }
}

int dt_vocab_same(const dt_vocab *a, const dt_vocab *b) {
    if (a->ids_only_dir || b->ids_only_dir) return a->ids_only_dir && b->ids_only_dir; /* nothing to tell apart */
    if (!a->tok || !b->tok) return !a->tok && !b->tok;
    if (a->tokenizer_json_len == b->tokenizer_json_len &&
        memcmp(a->tokenizer_json, b->tokenizer_json, a->tokenizer_json_len) == 0)
        return 1;
    /* One tokenizer written twice differs in layout alone: the GGUF reader rebuilds a trained tokenizer's
     * file without the newline `tokenizer train` ends it with, a pretty-printer indents it. Its values
     * decide the ids; a file that does not parse here (or memory short) counts as another tokenizer. */
    cJSON *ja = cJSON_ParseWithLength(a->tokenizer_json, a->tokenizer_json_len);
    cJSON *jb = ja ? cJSON_ParseWithLength(b->tokenizer_json, b->tokenizer_json_len) : NULL;
    /* An added token's "normalized" says whether it is matched in the normalised text: without a
     * normaliser that is the text itself (at most overlapping added tokens are matched in another
     * order, and the ids still stand for the same text). GGUF keeps no such flag, so a tokenizer read
     * back from the GGUF file it was exported to (which refuses normalisers) has it false where the
     * original may have it true, as Hugging Face's non-special added tokens do by default. */
    if (ja && jb && !has_normalizer(ja) && !has_normalizer(jb)) {
        drop_added_normalized(ja);
        drop_added_normalized(jb);
    }
    const int same = ja && jb && cJSON_Compare(ja, jb, 1);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    return same;
}

/* FNV-1a over a JSON value as dt_vocab_same compares it: an object's members in the order of their
 * keys, so that a file written with its keys in another order hashes the same. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static int hash_json(const cJSON *j, uint64_t *h) {
    const unsigned char tag = (unsigned char)(j->type & 0xff);
    *h = fnv(*h, &tag, 1);
    if (cJSON_IsString(j)) {
        const size_t n = strlen(j->valuestring);
        *h = fnv(fnv(*h, &n, sizeof n), j->valuestring, n);
    } else if (cJSON_IsNumber(j)) {
        char num[32];
        const int n = snprintf(num, sizeof num, "%.17g", j->valuedouble);
        *h = fnv(*h, num, (size_t)n);
    } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        const size_t n = (size_t)cJSON_GetArraySize(j);
        *h = fnv(*h, &n, sizeof n);
        const cJSON **items = malloc((n ? n : 1) * sizeof *items), *c;
        if (!items) return -1;
        size_t i = 0;
        cJSON_ArrayForEach(c, j) items[i++] = c;
        if (cJSON_IsObject(j)) qsort(items, n, sizeof *items, by_key);
        int rc = 0;
        for (i = 0; rc == 0 && i < n; i++) {
            if (cJSON_IsObject(j)) {
                const size_t k = strlen(items[i]->string);
                *h = fnv(fnv(*h, &k, sizeof k), items[i]->string, k);
            }
            rc = hash_json(items[i], h);
        }
        free(items);
        return rc;
    }
    return 0;
}

int dt_vocab_fingerprint(const dt_vocab *v, char out[17], dt_error *err) {
    out[0] = '\0';
    if (v->ids_only_dir) return vocab_check_text(v, err);
    if (!v->tok) return 0;
    cJSON *j = cJSON_ParseWithLength(v->tokenizer_json, v->tokenizer_json_len);
    if (!j) return dt_fail_oom(err, "%s: out of memory reading the tokenizer", dt_tok_path(v->tok));
    if (!has_normalizer(j)) drop_added_normalized(j);
    uint64_t h = 0xcbf29ce484222325ull;
    const int rc = hash_json(j, &h);
    cJSON_Delete(j);
    if (rc != 0) return dt_fail_oom(err, "%s: out of memory reading the tokenizer", dt_tok_path(v->tok));
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    return 0;
}

/* Bytes as ids, each checked against the vocabulary (a model may have fewer than 256 ids). */
static int bytes_to_ids(const unsigned char *p, size_t n, int vocab_size, const char *what, int **ids,
                        dt_error *err) {
    int *out = malloc((n ? n : 1) * sizeof *out);
    if (!out) return dt_fail_oom(err, "%s: out of memory for %zu tokens", what, n);
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= vocab_size) {
            free(out);
            return dt_fail(err, "%s: byte %d at offset %zu is outside the model's vocabulary of %d", what, p[i], i,
                           vocab_size);
        }
        out[i] = p[i];
    }
    *ids = out;
    return 0;
}

static int tok_to_ids(const int32_t *t, size_t n, int **ids, const char *what, dt_error *err) {
    int *out = malloc((n ? n : 1) * sizeof *out);
    if (!out) return dt_fail_oom(err, "%s: out of memory for %zu tokens", what, n);
    for (size_t i = 0; i < n; i++) out[i] = t[i];
    *ids = out;
    return 0;
}

int dt_model_encode(const dt_model *m, const char *text, size_t len, int add_special, int **ids, size_t *n,
                    dt_error *err) {
    *ids = NULL;
    *n = 0;
    if (dt_model_check_text(m, err) != 0) return -1;
    if (!m->vocab.tok) {
        if (bytes_to_ids((const unsigned char *)text, len, m->cfg.vocab_size, "text", ids, err) != 0) return -1;
        *n = len;
        return 0;
    }
    int32_t *t = NULL;
    size_t nt = 0;
    if (dt_tok_encode(m->vocab.tok, text, len, add_special, &t, &nt, err) != 0) return -1;
    int rc = tok_to_ids(t, nt, ids, "text", err);
    free(t);
    if (rc == 0) *n = nt;
    return rc;
}

int dt_model_encode_prompt(const dt_model *m, const char *text, int **ids, size_t *n, dt_error *err) {
    if (!m->vocab.tok && !*text) text = "\n"; /* a byte-level model starts from a line break */
    if (dt_model_encode(m, text, strlen(text), 1, ids, n, err) != 0) return -1;
    if (*n > 0) return 0;
    const int bos = dt_tok_bos_id(m->vocab.tok);
    if (bos < 0) {
        free(*ids);
        *ids = NULL;
        return dt_fail(err, "text: empty, and the tokenizer has no BOS token to start from");
    }
    (*ids)[0] = bos; /* an empty prompt starts from BOS (the buffer holds one id) */
    *n = 1;
    return 0;
}

int dt_model_decode(const dt_model *m, const int *ids, size_t n, int skip_special, char **text, size_t *len,
                    dt_error *err) {
    *text = NULL;
    *len = 0;
    if (dt_model_check_text(m, err) != 0) return -1;
    if (!m->vocab.tok) {
        char *out = malloc(n + 1);
        if (!out) return dt_fail_oom(err, "decode: out of memory for %zu bytes", n);
        for (size_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] > 255) {
                free(out);
                return dt_fail(err, "decode: id %d at position %zu is not a byte (the model is byte-level)", ids[i], i);
            }
            out[i] = (char)ids[i];
        }
        out[n] = '\0';
        *text = out;
        *len = n;
        return 0;
    }
    int32_t *t = malloc((n ? n : 1) * sizeof *t);
    if (!t) return dt_fail_oom(err, "decode: out of memory for %zu ids", n);
    for (size_t i = 0; i < n; i++) t[i] = ids[i];
    int rc = dt_tok_decode(m->vocab.tok, t, n, skip_special, text, len, err);
    free(t);
    return rc;
}

int dt_model_tok_stream(const dt_model *m, int skip_special, dt_tok_stream **s, dt_error *err) {
    *s = NULL;
    if (dt_model_check_text(m, err) != 0) return -1;
    *s = dt_tok_stream_new(m->vocab.tok, skip_special);
    return *s ? 0 : dt_fail_oom(err, "decode: out of memory for a text stream");
}

/* A text file through a vocabulary: bytes (checked against vocab_size), or encoded without special
 * tokens. */
static int vocab_text_tokens(const dt_vocab *v, int vocab_size, const char *path, int **tokens, size_t *n,
                             size_t *bytes, dt_error *err) {
    *tokens = NULL;
    *n = 0;
    if (vocab_check_text(v, err) != 0) return -1;
    char *text = NULL;
    size_t size = 0;
    if (read_text_file(path, (size_t)1 << 40, "a data file", &text, &size, err) != 0) return -1;
    int rc = 0;
    if (size == 0) rc = dt_fail_format(err, "%s: data file is empty", path);
    else if (!v->tok) {
        rc = bytes_to_ids((const unsigned char *)text, size, vocab_size, path, tokens, err);
        if (rc == 0) *n = size;
    } else {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        dt_error e;
        rc = dt_tok_encode_parallel(v->tok, text, size, 0, 1, &ids, &n_ids, &e);
        if (rc != 0) {
            dt_fail_code(err, e.code, "%s: %s", path, e.msg);
            fail_as_format(err); /* the encoder refusing its text (invalid UTF-8) is the data file's fault */
        }
        if (rc == 0) rc = tok_to_ids(ids, n_ids, tokens, path, err);
        if (rc == 0) *n = n_ids;
        free(ids);
    }
    free(text);
    if (rc == 0 && bytes) *bytes = size;
    return rc;
}

int dt_model_text_tokens(const dt_model *m, const char *path, int **tokens, size_t *n, size_t *bytes, dt_error *err) {
    return vocab_text_tokens(&m->vocab, m->cfg.vocab_size, path, tokens, n, bytes, err);
}

int dt_vocab_text_tokens(const dt_vocab *v, const char *path, int **tokens, size_t *n, size_t *bytes, dt_error *err) {
    return vocab_text_tokens(v, 256, path, tokens, n, bytes, err);
}

int dt_text_load(const char *path, int **tokens, size_t *n, dt_error *err) {
    const dt_vocab bytes = {0};
    return vocab_text_tokens(&bytes, 256, path, tokens, n, NULL, err);
}

int dt_vocab_load(dt_vocab *v, const char *path, dt_error *err) {
    memset(v, 0, sizeof *v);
    return path ? vocab_load_tokenizer(v, path, INT32_MAX, err) : 0;
}

void dt_vocab_free(dt_vocab *v) { vocab_free(v); }

/* The vocabulary of the models in dirs, into *first, when they all read text alike. */
static int models_vocab(const char *const *dirs, int n, dt_vocab *first, dt_error *err) {
    memset(first, 0, sizeof *first);
    if (n < 1) return dt_fail(err, "no model directories given");
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        char cpath[4200];
        dt_config cfg;
        dt_vocab v;
        if (gguf_model_path(dirs[i])) { /* its vocabulary is in the file, with the weights */
            dt_model gm;
            rc = dt_model_load(&gm, dirs[i], err);
            if (rc != 0) break;
            v = gm.vocab;
            memset(&gm.vocab, 0, sizeof gm.vocab);
            dt_model_free(&gm);
        } else {
            rc = dt_pathf(cpath, sizeof cpath, err, "%s/config.json", dirs[i]);
            if (rc == 0) rc = dt_config_load(&cfg, cpath, err);
            if (rc == 0) rc = vocab_load_dir(&v, dirs[i], &cfg, err);
        }
        if (rc != 0) break;
        if (i == 0) {
            *first = v;
            continue;
        }
        if (!dt_vocab_same(first, &v))
            rc = dt_fail(err, "%s and %s read text differently (%s): the models must share one vocabulary", dirs[0],
                         dirs[i],
                         first->ids_only_dir || v.ids_only_dir ? "one has no vocabulary files and ids past 256"
                         : !first->tok != !v.tok               ? "one has a tokenizer.json, the other is byte-level"
                                                               : "their tokenizer.json files differ");
        vocab_free(&v);
    }
    if (rc != 0) vocab_free(first);
    return rc;
}

int dt_models_same_vocab(const char *const *dirs, int n, dt_error *err) {
    dt_vocab first;
    if (models_vocab(dirs, n, &first, err) != 0) return -1;
    vocab_free(&first);
    return 0;
}

int dt_models_text(const char *const *dirs, int n, const char *path, int **tokens, size_t *count, dt_error *err) {
    dt_vocab first;
    if (models_vocab(dirs, n, &first, err) != 0) return -1;
    /* bytes are checked against the largest id any byte-level model may take; each model's own
     * forward checks its embedding */
    const int rc = vocab_text_tokens(&first, first.tok ? 0 : 256, path, tokens, count, NULL, err);
    vocab_free(&first);
    return rc;
}
