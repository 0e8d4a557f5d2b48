/* tokenizer.c — the public dt_tok API: loading a tokenizer.json, the encoding pipeline, decoding,
 * vocabulary queries. The components live in the other files of this folder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "internal.h"
#include "tokenizer/tok.h"

#define TOKENIZER_MAX_BYTES ((size_t)1 << 30)

/* ---------------------------------------------------------------- context */

int tk_ctx_init(tk_ctx *c) {
    memset(c, 0, sizeof *c);
    if (tk_matcher_init(&c->m) != 0) return -1;
    c->cache = tk_word_cache_new();
    if (!c->cache) {
        tk_matcher_free(&c->m);
        return -1;
    }
    return 0;
}

/* Decoding runs once per streamed token in the server: no word cache (a megabyte to clear) and no
 * matcher until a regex needs one (a JIT stack to map and unmap). With them a one-token decode
 * took 29 µs in a loop (1.3 without), and in the server's connection threads, where the freed
 * megabyte went back to the system, page faults on top: 4.5% of a serving profile, 2% after. */
void tk_ctx_init_decoding(tk_ctx *c) {
    memset(c, 0, sizeof *c);
}

void tk_ctx_free(tk_ctx *c) {
    tk_matcher_free(&c->m);
    free(c->spans.v);
    tk_pieces_free(&c->a);
    tk_pieces_free(&c->b);
    tk_buf_free(&c->t1);
    tk_buf_free(&c->t2);
    free(c->hits.v);
    tk_word_cache_free(c->cache);
    free(c->ids);
    tk_bpe_scratch_free(c->bpe_scratch);
    memset(c, 0, sizeof *c);
}

int tk_ids_push(tk_ctx *c, int32_t id) {
    if (grow_array(&c->ids, &c->cap_ids, c->n_ids + 1, sizeof *c->ids, 1024) != 0) return -1;
    c->ids[c->n_ids++] = id;
    return 0;
}

/* ---------------------------------------------------------------- loading */

/* tokenizer.json / tokenizer_config.json: the shared bounded reader (size checked before
 * allocating, short reads, read errors and a file that grows while read are reported). */
static int read_file(const char *path, const char *what, char **out, size_t *len, dt_error *err) {
    return read_text_file(path, TOKENIZER_MAX_BYTES, what, out, len, err);
}

static int32_t token_to_id(const dt_tok *tok, const char *s, size_t n) {
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].len == n && !memcmp(tok->added[i].content, s, n)) return tok->added[i].id;
    return tk_bpe_lookup(&tok->model, s, n);
}

static const char *const KEYS_ADDED[] = {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special",
                                         NULL};

/* AddedVocabulary::add_tokens: a token already in the model keeps the model's id; a new one gets
 * the number of vocabulary entries, or one past the largest added id once that reaches it (with a
 * vocabulary that has holes, the entry count can be below the largest model id); ids written in
 * the file must agree. */
static int parse_added(dt_tok *tok, const cJSON *arr, tk_ctx *c, const char *path, dt_error *err) {
    if (!arr || cJSON_IsNull(arr)) return 0;
    if (!cJSON_IsArray(arr)) return dt_fail_format(err, "%s: \"added_tokens\" is not an array", path);
    int cnt = cJSON_GetArraySize(arr);
    tok->added = calloc(cnt ? (size_t)cnt : 1, sizeof *tok->added);
    if (!tok->added) return dt_fail_oom(err, "%s: out of memory", path);
    const int32_t entries = tok->model.n_entries;
    int32_t max_added = -1;
    int index = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        char what[64];
        snprintf(what, sizeof what, "added_tokens[%d]", index++);
        if (!cJSON_IsObject(e)) return dt_fail_format(err, "%s: %s is not an object", path, what);
        if (tk_json_only(e, KEYS_ADDED, what, path, err) != 0) return -1;
        const char *content = NULL;
        tk_added t = {0};
        t.normalized = 1;
        if (tk_json_string(e, "content", &content, what, path, err) != 0 ||
            tk_json_bool(e, "single_word", &t.single_word, what, path, err) != 0 ||
            tk_json_bool(e, "lstrip", &t.lstrip, what, path, err) != 0 ||
            tk_json_bool(e, "rstrip", &t.rstrip, what, path, err) != 0 ||
            tk_json_bool(e, "normalized", &t.normalized, what, path, err) != 0 ||
            tk_json_bool(e, "special", &t.special, what, path, err) != 0)
            return -1;
        if (!content) return dt_fail_format(err, "%s: %s lacks \"content\"", path, what);
        if (!*content) continue; /* the Rust library ignores empty added tokens */
        size_t len = strlen(content);
        if (tk_utf8_check(content, len) != len) return dt_fail_format(err, "%s: %s is not valid UTF-8", path, what);
        int existing = -1;
        for (int i = 0; i < tok->n_added && existing < 0; i++)
            if (tok->added[i].len == len && !memcmp(tok->added[i].content, content, len)) existing = i;
        int32_t id = existing >= 0 ? tok->added[existing].id : tk_bpe_lookup(&tok->model, content, len);
        if (id < 0) {
            id = max_added >= entries ? max_added + 1 : entries;
            if (id < tok->model.n_vocab && tok->model.tok_off[id] != UINT64_MAX)
                return dt_fail_format(err,
                                      "%s: %s \"%.100s\" would get id %d, which the vocabulary gives to another token",
                                      path, what, content, id);
        }
        if (id > max_added) max_added = id;
        const cJSON *declared = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (declared && (!cJSON_IsNumber(declared) || declared->valuedouble != (double)id))
            return dt_fail_format(err, "%s: %s \"%.100s\" declares id %.0f, but its id is %d (%s)", path, what, content,
                                  cJSON_IsNumber(declared) ? declared->valuedouble : -1.0, id,
                                  existing >= 0 ? "it is listed twice"
                                  : tk_bpe_lookup(&tok->model, content, len) >= 0
                                      ? "the model's vocabulary has it"
                                      : "ids after the vocabulary go in order");
        t.id = id;
        t.len = len;
        t.content = tk_strdup(content);
        if (!t.content) return dt_fail_oom(err, "%s: out of memory", path);
        if (t.normalized && tok->normalizer) {
            tk_buf nb = {0};
            if (tk_norm_apply(tok->normalizer, c, content, len, &nb) != 0 || tk_buf_put(&nb, "", 1) != 0) {
                free(t.content);
                tk_buf_free(&nb);
                return dt_fail_format(err, "%s: %s: normalising \"%.100s\" failed", path, what, content);
            }
            t.match = nb.p;
            t.match_len = nb.n - 1;
        } else {
            t.match = t.content;
            t.match_len = len;
        }
        if (existing >= 0) {
            tk_added *old = &tok->added[existing];
            if (old->match != old->content) free(old->match);
            free(old->content);
            *old = t;
        } else
            tok->added[tok->n_added++] = t;
    }
    return 0;
}

/* tokenizer_config.json beside the tokenizer: "bos_token": "<s>" or {"content": "<s>", ...}. */
static int32_t config_token(const dt_tok *tok, const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v)) return -1;
    return token_to_id(tok, v->valuestring, strlen(v->valuestring));
}

static int read_special_ids(dt_tok *tok, dt_error *err) {
    tok->bos_id = tok->post.n_prefix > 0 ? tok->post.prefix[0] : -1;
    tok->eos_id = tok->post.n_suffix > 0 ? tok->post.suffix[tok->post.n_suffix - 1] : -1;
    tok->pad_id = -1;
    char cfg_path[4096 + 32];
    const char *slash = strrchr(tok->path, '/');
    int dir_len = slash ? (int)(slash - tok->path) : 1;
    if (dt_pathf(cfg_path, sizeof cfg_path, err, "%.*s/tokenizer_config.json", dir_len, slash ? tok->path : ".") != 0)
        return -1;
    struct stat sb;
    if (stat(cfg_path, &sb) != 0) return 0;
    char *text = NULL;
    size_t len = 0;
    if (read_file(cfg_path, "a tokenizer config", &text, &len, err) != 0) return -1;
    cJSON *cfg = cJSON_ParseWithLength(text, len);
    const int oom = !cfg && json_text_valid(text, len);
    free(text);
    if (oom) return dt_fail_oom(err, "%s: out of memory parsing its JSON", cfg_path);
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return dt_fail_format(err, "%s: not a JSON object", cfg_path);
    }
    int32_t id;
    if ((id = config_token(tok, cfg, "bos_token")) >= 0) tok->bos_id = id;
    if ((id = config_token(tok, cfg, "eos_token")) >= 0) tok->eos_id = id;
    if ((id = config_token(tok, cfg, "pad_token")) >= 0) tok->pad_id = id;
    cJSON_Delete(cfg);
    return 0;
}

static int parse_tokenizer(dt_tok *tok, const cJSON *root, tk_ctx *c, dt_error *err) {
    const char *path = tok->path;
    if (!cJSON_IsObject(root)) return dt_fail_format(err, "%s: not a JSON object", path);
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (version && !(cJSON_IsString(version) && !strcmp(version->valuestring, "1.0")))
        return dt_fail_format(err, "%s: unknown tokenizer version (expected \"1.0\")", path);
    const char *off[] = {"truncation", "padding"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, off[i]);
        if (v && !cJSON_IsNull(v))
            return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: \"%s\" is set; it is not supported (make it null)", path,
                                off[i]);
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model) return dt_fail_format(err, "%s: no \"model\"", path);
    if (tk_bpe_parse(&tok->model, model, path, err) != 0) return -1;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (j && !cJSON_IsNull(j)) {
        if (!(tok->normalizer = calloc(1, sizeof *tok->normalizer))) return dt_fail_oom(err, "%s: out of memory", path);
        if (tk_norm_parse(tok->normalizer, j, path, err) != 0) return -1;
    }
    j = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (j && !cJSON_IsNull(j)) {
        if (!(tok->pre = calloc(1, sizeof *tok->pre))) return dt_fail_oom(err, "%s: out of memory", path);
        if (tk_pre_parse(tok->pre, j, path, err) != 0) return -1;
    }
    j = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    if (j && !cJSON_IsNull(j) && tk_post_parse(&tok->post, j, path, err) != 0) return -1;
    j = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (j && !cJSON_IsNull(j)) {
        if (!(tok->decoder = calloc(1, sizeof *tok->decoder))) return dt_fail_oom(err, "%s: out of memory", path);
        if (tk_dec_parse(tok->decoder, j, path, err) != 0) return -1;
    }
    if (parse_added(tok, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), c, path, err) != 0) return -1;
    if (tk_added_set_build(&tok->raw_set, tok->added, tok->n_added, 0) != 0 ||
        tk_added_set_build(&tok->norm_set, tok->added, tok->n_added, 1) != 0)
        return dt_fail_oom(err, "%s: out of memory", path);
    tok->vocab_size = tok->model.n_vocab;
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].id >= tok->vocab_size) tok->vocab_size = tok->added[i].id + 1;
    tok->added_of_id = malloc((size_t)tok->vocab_size * sizeof *tok->added_of_id);
    if (!tok->added_of_id) return dt_fail_oom(err, "%s: out of memory", path);
    memset(tok->added_of_id, 0xFF, (size_t)tok->vocab_size * sizeof *tok->added_of_id);
    for (int i = 0; i < tok->n_added; i++) tok->added_of_id[tok->added[i].id] = i;
    /* ids in the post-processor must exist */
    for (int k = 0; k < 2; k++) {
        const int32_t *v = k ? tok->post.suffix : tok->post.prefix;
        for (int i = 0; i < (k ? tok->post.n_suffix : tok->post.n_prefix); i++)
            if (v[i] >= tok->vocab_size)
                return dt_fail_format(err, "%s: post_processor adds id %d, past the vocabulary of %d", path, v[i],
                                      tok->vocab_size);
            else if (!dt_tok_id_to_token(tok, v[i], NULL)) /* found by fuzz_tokenizer */
                return dt_fail_format(err, "%s: post_processor adds id %d, which is not a token", path, v[i]);
    }
    return read_special_ids(tok, err);
}

/* A regular file beginning with GGUF's magic (the model files of llama.cpp and `export --gguf`). */
static int is_gguf(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0; /* read_file says why */
    char magic[4];
    const int yes = fread(magic, 1, 4, fp) == 4 && memcmp(magic, "GGUF", 4) == 0;
    fclose(fp);
    return yes;
}

int dt_tok_load(dt_tok **out, const char *path, dt_error *err) {
    *out = NULL;
    dt_tok *tok = calloc(1, sizeof *tok);
    if (!tok) return dt_fail_oom(err, "%s: out of memory", path);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? dt_pathf(tok->path, sizeof tok->path, err, "%s/tokenizer.json", path)
                                                     : dt_pathf(tok->path, sizeof tok->path, err, "%s", path)) {
        free(tok);
        return -1;
    }
    if (is_gguf(tok->path)) {
        /* a model file holding a vocabulary: say where to get it as a tokenizer.json, not "not JSON" */
        dt_fail_format(err,
                       "%s: a GGUF model file, not a tokenizer: give a tokenizer.json or a checkpoint directory "
                       "holding one (`difftrans export %s DIR` writes the file's vocabulary as DIR/tokenizer.json)",
                       tok->path, tok->path);
        free(tok);
        return -1;
    }
    char *text = NULL;
    size_t len = 0;
    if (read_file(tok->path, "a tokenizer", &text, &len, err) != 0) {
        free(tok);
        return -1;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    const int oom = !root && json_text_valid(text, len);
    free(text);
    tk_ctx c;
    int rc;
    if (oom) rc = dt_fail_oom(err, "%s: out of memory parsing its JSON", tok->path);
    else if (!root) rc = dt_fail_format(err, "%s: not valid JSON", tok->path);
    else if (tk_ctx_init(&c) != 0) rc = dt_fail_oom(err, "%s: out of memory", tok->path);
    else {
        rc = parse_tokenizer(tok, root, &c, err);
        tk_ctx_free(&c);
    }
    cJSON_Delete(root);
    if (rc != 0) {
        dt_tok_free(tok);
        return -1;
    }
    *out = tok;
    return 0;
}

void dt_tok_free(dt_tok *tok) {
    if (!tok) return;
    tk_bpe_free(&tok->model);
    if (tok->normalizer) tk_norm_free(tok->normalizer);
    free(tok->normalizer);
    if (tok->pre) tk_pre_free(tok->pre);
    free(tok->pre);
    tk_post_free(&tok->post);
    if (tok->decoder) tk_dec_free(tok->decoder);
    free(tok->decoder);
    for (int i = 0; i < tok->n_added; i++) {
        if (tok->added[i].match != tok->added[i].content) free(tok->added[i].match);
        free(tok->added[i].content);
    }
    free(tok->added);
    tk_added_set_free(&tok->raw_set);
    tk_added_set_free(&tok->norm_set);
    free(tok->added_of_id);
    free(tok);
}

/* ---------------------------------------------------------------- encoding */

struct dt_tok_encoder {
    const dt_tok *tok;
    tk_ctx c;
};

dt_tok_encoder *dt_tok_encoder_new(const dt_tok *tok) {
    dt_tok_encoder *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->tok = tok;
    if (tk_ctx_init(&e->c) != 0) {
        free(e);
        return NULL;
    }
    return e;
}

void dt_tok_encoder_free(dt_tok_encoder *e) {
    if (!e) return;
    tk_ctx_free(&e->c);
    free(e);
}

static int swap_after(tk_ctx *c) {
    tk_pieces t = c->a;
    c->a = c->b;
    c->b = t;
    return 0;
}

static int normalize_pieces(const tk_norm *n, tk_ctx *c) {
    tk_pieces_clear(&c->b);
    for (size_t i = 0; i < c->a.n; i++) {
        const tk_piece *p = &c->a.v[i];
        const char *s = c->a.text.p + p->off;
        if (p->id >= 0) {
            if (tk_pieces_add(&c->b, s, p->len, p->id, p->origin) != 0) return -1;
            continue;
        }
        if (tk_norm_apply(n, c, s, p->len, &c->t2) != 0) return -1;
        if (c->t2.n && tk_pieces_add(&c->b, c->t2.p, c->t2.n, -1, p->origin) != 0) return -1;
    }
    return swap_after(c);
}

int tk_encode_front(const dt_tok *tok, tk_ctx *c, const char *text, size_t len) {
    tk_pieces_clear(&c->a);
    c->n_ids = 0;
    if (len && tk_pieces_add(&c->a, text, len, -1, 1) != 0) return -1;
    if (tok->raw_set.first[256] &&
        (tk_added_split(tok->added, &tok->raw_set, &c->a, &c->b, &c->hits) != 0 || swap_after(c)))
        return -1;
    if (tok->normalizer && normalize_pieces(tok->normalizer, c) != 0) return -1;
    if (tok->norm_set.first[256] &&
        (tk_added_split(tok->added, &tok->norm_set, &c->a, &c->b, &c->hits) != 0 || swap_after(c)))
        return -1;
    return 0;
}

int tk_encode_model(const dt_tok *tok, tk_ctx *c) {
    for (size_t i = 0; i < c->a.n; i++) {
        const tk_piece *p = &c->a.v[i];
        int rc = p->id >= 0 ? tk_ids_push(c, p->id) : tk_bpe_tokenize(&tok->model, c, c->a.text.p + p->off, p->len);
        if (rc != 0) return rc;
    }
    return 0;
}

int tk_encode_special(const dt_tok *tok, tk_ctx *c, int suffix) {
    const int32_t *v = suffix ? tok->post.suffix : tok->post.prefix;
    int n = suffix ? tok->post.n_suffix : tok->post.n_prefix;
    for (int i = 0; i < n; i++)
        if (tk_ids_push(c, v[i]) != 0) return -1;
    return 0;
}

static int encode_pipeline(const dt_tok *tok, tk_ctx *c, const char *text, size_t len, int add_special) {
    if (tk_encode_front(tok, c, text, len) != 0) return -1;
    if (tok->pre && tk_pre_apply(tok->pre, c) != 0) return -1;
    if (add_special && tk_encode_special(tok, c, 0) != 0) return -1;
    int rc = tk_encode_model(tok, c);
    if (rc != 0) return rc;
    return add_special ? tk_encode_special(tok, c, 1) : 0;
}

int tk_encode_error(const dt_tok *tok, int rc, const tk_matcher *m, dt_error *err) {
    if (rc == -2)
        return dt_fail_format(err, "%s: the model's unk_token \"%s\" is not in its vocabulary", tok->path,
                              tok->model.unk_token);
    if (m && m->limit) {
        PCRE2_UCHAR why[128];
        pcre2_get_error_message(m->limit, why, sizeof why);
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: the regex '%.80s' gave up on this text (%s): a pattern that backtracks without "
                            "bound",
                            tok->path, m->limit_source ? m->limit_source : "?", (const char *)why);
    }
    return dt_fail_oom(err, "%s: encoding failed: out of memory", tok->path);
}

int dt_tok_encoder_encode(dt_tok_encoder *e, const char *text, size_t len, int add_special, const int32_t **ids,
                          size_t *n_ids, dt_error *err) {
    const dt_tok *tok = e->tok;
    size_t bad = tk_utf8_check(text, len);
    if (bad != len) return dt_fail(err, "text: invalid UTF-8 at byte %zu", bad);
    e->c.m.limit = 0;
    int rc = encode_pipeline(tok, &e->c, text, len, add_special);
    if (rc != 0) return tk_encode_error(tok, rc, &e->c.m, err);
    *ids = e->c.ids;
    *n_ids = e->c.n_ids;
    return 0;
}

int dt_tok_encode(const dt_tok *tok, const char *text, size_t len, int add_special, int32_t **ids, size_t *n_ids,
                  dt_error *err) {
    *ids = NULL;
    *n_ids = 0;
    dt_tok_encoder *e = dt_tok_encoder_new(tok);
    if (!e) return dt_fail_oom(err, "%s: out of memory", tok->path);
    const int32_t *v;
    size_t n;
    int rc = dt_tok_encoder_encode(e, text, len, add_special, &v, &n, err);
    if (rc == 0) {
        *ids = malloc((n ? n : 1) * sizeof **ids);
        if (!*ids) rc = dt_fail_oom(err, "%s: out of memory", tok->path);
        else {
            if (n) memcpy(*ids, v, n * sizeof *v);
            *n_ids = n;
        }
    }
    dt_tok_encoder_free(e);
    return rc;
}

/* ---------------------------------------------------------------- decoding and queries */

const char *dt_tok_id_to_token(const dt_tok *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->vocab_size) return NULL;
    int32_t a = tok->added_of_id[id];
    if (a >= 0) {
        /* the Rust library gives a normalised added token in its normalised form */
        if (len) *len = tok->added[a].match_len;
        return tok->added[a].match;
    }
    if (id >= tok->model.n_vocab || tok->model.tok_off[id] == UINT64_MAX) return NULL;
    if (len) *len = tok->model.tok_len[id];
    return tok->model.strings + tok->model.tok_off[id];
}

int32_t dt_tok_token_to_id(const dt_tok *tok, const char *token, size_t len) { return token_to_id(tok, token, len); }

int dt_tok_is_special(const dt_tok *tok, int32_t id) {
    if (id < 0 || id >= tok->vocab_size) return 0;
    int32_t a = tok->added_of_id[id];
    return a >= 0 && tok->added[a].special;
}

/* What decode(skip_special_tokens) skips in the Rust library: tokens whose string (for an added
 * token, its normalised form) is the content of a special token. */
int tk_skipped_as_special(const dt_tok *tok, const char *s, size_t len) {
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].special && tok->added[i].len == len && !memcmp(tok->added[i].content, s, len)) return 1;
    return 0;
}

int dt_tok_decode(const dt_tok *tok, const int32_t *ids, size_t n, int skip_special, char **text, size_t *len,
                  dt_error *err) {
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->vocab_size || !dt_tok_id_to_token(tok, ids[i], NULL))
            return dt_fail(err, "ids[%zu] = %d: not a token of %s (%s; ids are 0..%d)", i, ids[i], tok->path,
                           ids[i] >= 0 && ids[i] < tok->vocab_size ? "an id the vocabulary leaves unused"
                                                                     : "outside the vocabulary",
                           tok->vocab_size - 1);
    tk_ctx c;
    tk_ctx_init_decoding(&c);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        size_t l;
        const char *s = dt_tok_id_to_token(tok, ids[i], &l);
        if (skip_special && tk_skipped_as_special(tok, s, l)) continue;
        rc = tk_pieces_add(&c.a, s, l, -1, 0);
    }
    tk_buf out = {0};
    if (rc == 0 && tok->decoder) rc = tk_dec_apply(tok->decoder, &c);
    for (size_t i = 0; i < c.a.n && rc == 0; i++) {
        if (!tok->decoder && i > 0) rc = tk_buf_put(&out, " ", 1);
        if (rc == 0) rc = tk_buf_put(&out, tk_piece_str(&c.a, i), c.a.v[i].len);
    }
    if (rc == 0) rc = tk_buf_put(&out, "", 1);
    tk_ctx_free(&c);
    if (rc != 0) {
        tk_buf_free(&out);
        return dt_fail_oom(err, "%s: decoding failed (out of memory)", tok->path);
    }
    *text = out.p;
    *len = out.n - 1;
    return 0;
}

/* A token's bytes through the decoder's steps d (dt_tok_token_bytes): cur holds them, tmp is
 * scratch; joined: a Fuse or ByteLevel came before (the steps after it read the joined text, in
 * which the token is somewhere after the start and before the end). 1 when a step gave the token's
 * raw bytes (ByteFallback's byte, ByteLevel's bytes), which the steps after it never see alone. */
static int token_bytes_steps(const tk_dec *d, tk_ctx *c, tk_buf *cur, tk_buf *tmp, int *joined) {
    switch (d->kind) {
    case TK_DEC_SEQUENCE:
        for (int i = 0; i < d->n_items; i++) {
            const int rc = token_bytes_steps(&d->items[i], c, cur, tmp, joined);
            if (rc != 0) return rc;
        }
        return 0;
    case TK_DEC_BYTEFALLBACK: {
        const int b = tk_dec_fallback_byte(cur->p, cur->n);
        if (b < 0) return 0;
        cur->p[0] = (char)b;
        cur->n = 1;
        return 1;
    }
    case TK_DEC_BYTELEVEL:
        tmp->n = 0;
        if (tk_dec_bytelevel_bytes(cur->p, cur->n, tmp) != 0) return -1;
        break;
    case TK_DEC_FUSE: *joined = 1; return 0;
    default:
        /* Strip of the joined text: its first and last characters are not this token's (a Strip
         * before the join strips each token's piece) */
        if (d->kind == TK_DEC_STRIP && *joined) return 0;
        tmp->n = 0;
        if (tk_dec_piece(d, c, cur->p, cur->n, *joined, tmp) != 0) return -1;
        break;
    }
    const tk_buf t = *cur;
    *cur = *tmp;
    *tmp = t;
    return d->kind == TK_DEC_BYTELEVEL;
}

int dt_tok_token_bytes(const dt_tok *tok, int32_t id, char **bytes, size_t *len, dt_error *err) {
    *bytes = NULL;
    *len = 0;
    size_t n;
    const char *s = dt_tok_id_to_token(tok, id, &n);
    if (!s)
        return dt_fail(err, "id %d: not a token of %s (%s; ids are 0..%d)", id, tok->path,
                       id >= 0 && id < tok->vocab_size ? "an id the vocabulary leaves unused"
                                                       : "outside the vocabulary",
                       tok->vocab_size - 1);
    tk_ctx c;
    tk_ctx_init_decoding(&c);
    tk_buf cur = {0}, tmp = {0};
    int joined = 0;
    int rc = tk_buf_put(&cur, s, n) != 0 || tk_buf_reserve(&cur, 1) != 0 || tk_buf_reserve(&tmp, 1) != 0 ? -1 : 0;
    if (rc == 0 && tok->decoder) rc = token_bytes_steps(tok->decoder, &c, &cur, &tmp, &joined) < 0 ? -1 : 0;
    if (rc == 0) rc = tk_buf_put(&cur, "", 1);
    tk_ctx_free(&c);
    tk_buf_free(&tmp);
    if (rc != 0) {
        tk_buf_free(&cur);
        return dt_fail_oom(err, "%s: decoding id %d failed (out of memory)", tok->path, id);
    }
    *bytes = cur.p;
    *len = cur.n - 1;
    return 0;
}

int32_t dt_tok_vocab_size(const dt_tok *tok) { return tok->vocab_size; }
int32_t dt_tok_bos_id(const dt_tok *tok) { return tok->bos_id; }
int32_t dt_tok_eos_id(const dt_tok *tok) { return tok->eos_id; }
int32_t dt_tok_pad_id(const dt_tok *tok) { return tok->pad_id; }
const char *dt_tok_path(const dt_tok *tok) { return tok->path; }

static const char *norm_name(const tk_norm *n) {
    static const char *const names[] = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "Prepend", "Replace",
                                        "Sequence"};
    return names[n->kind];
}

static const char *pre_name(const tk_pre *p) {
    static const char *const names[] = {"ByteLevel", "Split", "Metaspace", "Digits", "Whitespace",
                                        "WhitespaceSplit", "Punctuation", "Sequence"};
    return names[p->kind];
}

static const char *dec_name(const tk_dec *d) {
    static const char *const names[] = {"ByteLevel", "Metaspace", "ByteFallback", "Fuse", "Strip", "Replace",
                                        "Sequence"};
    return names[d->kind];
}

void dt_tok_info(const dt_tok *tok, dt_tok_summary *s) {
    memset(s, 0, sizeof *s);
    s->vocab_size = tok->vocab_size;
    s->model_vocab = tok->model.n_entries;
    s->n_merges = (int32_t)tok->model.n_merges;
    s->n_added = tok->n_added;
    for (int i = 0; i < tok->n_added; i++) s->n_special += tok->added[i].special;
    for (int32_t id = 0; id < tok->vocab_size; id++) s->n_unused += !dt_tok_id_to_token(tok, id, NULL);
    s->byte_fallback = tok->model.byte_fallback;
    s->ignore_merges = tok->model.ignore_merges;
    s->unk_token = tok->model.unk_token;
    s->normalizer = tok->normalizer ? norm_name(tok->normalizer) : "none";
    s->pre_tokenizer = tok->pre ? pre_name(tok->pre) : "none";
    s->decoder = tok->decoder ? dec_name(tok->decoder) : "none";
    s->n_prefix = tok->post.n_prefix;
    s->n_suffix = tok->post.n_suffix;
    s->bos_id = tok->bos_id;
    s->eos_id = tok->eos_id;
    s->pad_id = tok->pad_id;
}
