/* decoders.c — ids back to text: the decoder chain over the token strings (ByteLevel, Metaspace,
 * ByteFallback, Fuse, Strip, Replace, Sequence), as the Rust library's decode_chain runs it. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok.h"

static const char *const KEYS_BYTELEVEL[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
static const char *const KEYS_METASPACE[] = {"type", "replacement", "prepend_scheme", "split", "add_prefix_space",
                                             "str_rep", NULL};
static const char *const KEYS_STRIP[] = {"type", "content", "start", "stop", NULL};
static const char *const KEYS_REPLACE[] = {"type", "pattern", "content", NULL};
static const char *const KEYS_SEQ[] = {"type", "decoders", NULL};
static const char *const KEYS_TYPE[] = {"type", NULL};

static int json_count(const cJSON *j, const char *key, int *out, const char *path, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e6 || v->valuedouble != (int)v->valuedouble)
        return dt_fail_format(err, "%s: decoder Strip: \"%s\" must be a count", path, key);
    *out = (int)v->valuedouble;
    return 0;
}

static int one_char(const cJSON *j, const char *key, uint32_t *cp, const char *what, const char *path, dt_error *err) {
    const char *s = NULL;
    if (tk_json_string(j, key, &s, what, path, err) != 0) return -1;
    int k = 0;
    if (s && *s) *cp = tk_utf8_decode(s, &k);
    if (!s || !*s || s[k]) return dt_fail_format(err, "%s: %s: \"%s\" must be one character", path, what, key);
    return 0;
}

int tk_dec_parse(tk_dec *d, const cJSON *j, const char *path, dt_error *err) {
    memset(d, 0, sizeof *d);
    const char *type = tk_json_type(j, "decoder", path, err);
    if (!type) return -1;
    char what[96];
    snprintf(what, sizeof what, "decoder %s", type);
    const char *const *keys = KEYS_TYPE;
    if (!strcmp(type, "ByteLevel")) {
        d->kind = TK_DEC_BYTELEVEL;
        keys = KEYS_BYTELEVEL;
    } else if (!strcmp(type, "Metaspace")) {
        d->kind = TK_DEC_METASPACE;
        keys = KEYS_METASPACE;
        const char *scheme = NULL;
        int add_prefix_space = -1;
        if (one_char(j, "replacement", &d->replacement, what, path, err) != 0 ||
            tk_json_string(j, "prepend_scheme", &scheme, what, path, err) != 0 ||
            tk_json_bool(j, "add_prefix_space", &add_prefix_space, what, path, err) != 0)
            return -1;
        if (scheme && strcmp(scheme, "always") && strcmp(scheme, "first") && strcmp(scheme, "never"))
            return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: %s: prepend_scheme \"%s\" is not supported", path, what,
                                scheme);
        d->prepend_never = (scheme && !strcmp(scheme, "never")) || add_prefix_space == 0;
    } else if (!strcmp(type, "ByteFallback")) {
        d->kind = TK_DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d->kind = TK_DEC_FUSE;
    } else if (!strcmp(type, "Strip")) {
        d->kind = TK_DEC_STRIP;
        keys = KEYS_STRIP;
        if (one_char(j, "content", &d->strip_char, what, path, err) != 0 ||
            json_count(j, "start", &d->strip_start, path, err) != 0 || json_count(j, "stop", &d->strip_stop, path, err) != 0)
            return -1;
    } else if (!strcmp(type, "Replace")) {
        d->kind = TK_DEC_REPLACE;
        keys = KEYS_REPLACE;
        const char *content = NULL;
        if (tk_json_string(j, "content", &content, what, path, err) != 0) return -1;
        if (!content) return dt_fail_format(err, "%s: %s lacks \"content\"", path, what);
        if (!(d->content = tk_strdup(content))) return dt_fail_oom(err, "%s: out of memory", path);
        d->content_len = strlen(content);
        if (tk_json_pattern(j, &d->re, what, path, err) != 0) return -1;
        const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        d->literal = cJSON_GetObjectItemCaseSensitive(pattern, "String") != NULL;
    } else if (!strcmp(type, "Sequence")) {
        d->kind = TK_DEC_SEQUENCE;
        keys = KEYS_SEQ;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "decoders");
        if (!cJSON_IsArray(arr)) return dt_fail_format(err, "%s: decoder Sequence lacks the \"decoders\" array", path);
        int cnt = cJSON_GetArraySize(arr);
        d->items = calloc(cnt ? (size_t)cnt : 1, sizeof *d->items);
        if (!d->items) return dt_fail_oom(err, "%s: out of memory", path);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            if (tk_dec_parse(&d->items[d->n_items++], it, path, err) != 0) return -1;
        }
    } else
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: decoder \"%s\" is not supported (supported: ByteLevel, Metaspace, ByteFallback, "
                            "Fuse, Strip, Replace, Sequence)",
                            path, type);
    return tk_json_only(j, keys, what, path, err);
}

void tk_dec_free(tk_dec *d) {
    for (int i = 0; i < d->n_items; i++) tk_dec_free(&d->items[i]);
    free(d->items);
    free(d->content);
    tk_regex_free(&d->re);
    memset(d, 0, sizeof *d);
}

/* ---------------------------------------------------------------- applying */

/* The steps one piece at a time, shared with the streaming decoder (stream.c), which feeds them a
 * piece when its token comes. */

int tk_dec_bytelevel_bytes(const char *s, size_t n, tk_buf *bytes) {
    const size_t mark = bytes->n;
    for (size_t p = 0; p < n;) {
        int k;
        const int b = tk_char_to_byte(tk_utf8_decode(s + p, &k));
        if (b < 0) { /* a token with a character outside the byte map goes in as it is */
            bytes->n = mark;
            return tk_buf_put(bytes, s, n);
        }
        const unsigned char ub = (unsigned char)b;
        if (tk_buf_put(bytes, &ub, 1) != 0) return -1;
        p += (size_t)k;
    }
    return 0;
}

int tk_dec_fallback_flush(tk_buf *bytes, tk_pieces *out) {
    if (bytes->n == 0) return 0;
    int rc = 0;
    if (tk_utf8_check(bytes->p, bytes->n) == bytes->n) rc = tk_pieces_add(out, bytes->p, bytes->n, -1, 0);
    else
        for (size_t i = 0; i < bytes->n && rc == 0; i++) rc = tk_pieces_add(out, "\xEF\xBF\xBD", 3, -1, 0);
    bytes->n = 0;
    return rc;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int tk_dec_fallback_byte(const char *s, size_t n) {
    const int hi = n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' ? hexval(s[3]) : -1;
    const int lo = hi >= 0 ? hexval(s[4]) : -1;
    return lo >= 0 ? hi * 16 + lo : -1;
}

static int metaspace_piece(const tk_dec *d, const char *s, size_t n, int first, tk_buf *out) {
    for (size_t p = 0; p < n;) {
        int k;
        const uint32_t cp = tk_utf8_decode(s + p, &k);
        int rc = 0;
        if (cp != d->replacement) rc = tk_buf_put(out, s + p, (size_t)k);
        else if (!first || d->prepend_never) rc = tk_buf_put(out, " ", 1);
        if (rc != 0) return -1;
        p += (size_t)k;
    }
    return 0;
}

static int strip_piece(const tk_dec *d, const char *s, size_t n, tk_buf *out) {
    char ch[4];
    const size_t cl = (size_t)tk_utf8_encode(d->strip_char, ch);
    size_t a = 0, b = n;
    for (int k = 0; k < d->strip_start && b - a >= cl && !memcmp(s + a, ch, cl); k++) a += cl;
    for (int k = 0; k < d->strip_stop && b - a >= cl && !memcmp(s + b - cl, ch, cl); k++) b -= cl;
    return tk_buf_put(out, s + a, b - a);
}

static int replace_piece(const tk_dec *d, tk_ctx *c, const char *s, size_t n, tk_buf *out) {
    if (tk_regex_find_matches(&d->re, &c->m, s, n, &c->spans) != 0) return -1;
    for (size_t k = 0; k < c->spans.n; k++) {
        const tk_span *sp = &c->spans.v[k];
        const int rc = sp->is_match ? tk_buf_put(out, d->content, d->content_len)
                                    : tk_buf_put(out, s + sp->start, sp->end - sp->start);
        if (rc != 0) return -1;
    }
    return 0;
}

int tk_dec_piece(const tk_dec *d, tk_ctx *c, const char *s, size_t n, int first, tk_buf *out) {
    switch (d->kind) {
    case TK_DEC_METASPACE: return metaspace_piece(d, s, n, first, out);
    case TK_DEC_STRIP: return strip_piece(d, s, n, out);
    case TK_DEC_REPLACE: return replace_piece(d, c, s, n, out);
    case TK_DEC_FUSE: return tk_buf_put(out, s, n); /* one piece is already fused */
    default: return -1; /* ByteFallback and ByteLevel join pieces: their callers run them */
    }
}

static int bytelevel(tk_ctx *c, const tk_pieces *in, tk_pieces *out) {
    tk_buf *bytes = &c->t1;
    bytes->n = 0;
    for (size_t i = 0; i < in->n; i++)
        if (tk_dec_bytelevel_bytes(tk_piece_str(in, i), in->v[i].len, bytes) != 0) return -1;
    tk_buf *text = &c->t2;
    text->n = 0;
    if (tk_utf8_lossy(text, bytes->p ? bytes->p : "", bytes->n) != 0) return -1;
    return tk_pieces_add(out, text->p ? text->p : "", text->n, -1, 0);
}

static int bytefallback(tk_ctx *c, const tk_pieces *in, tk_pieces *out) {
    tk_buf *bytes = &c->t1;
    bytes->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        const char *s = tk_piece_str(in, i);
        const size_t n = in->v[i].len;
        const int b = tk_dec_fallback_byte(s, n);
        if (b >= 0) {
            const unsigned char ub = (unsigned char)b;
            if (tk_buf_put(bytes, &ub, 1) != 0) return -1;
            continue;
        }
        if (tk_dec_fallback_flush(bytes, out) != 0 || tk_pieces_add(out, s, n, -1, 0) != 0) return -1;
    }
    return tk_dec_fallback_flush(bytes, out);
}

/* Metaspace, Strip, Replace: each piece on its own (Metaspace's first piece is the text's first). */
static int each_piece(const tk_dec *d, tk_ctx *c, const tk_pieces *in, tk_pieces *out) {
    for (size_t i = 0; i < in->n; i++) {
        const size_t start = out->text.n;
        if (tk_pieces_add(out, "", 0, -1, 0) != 0) return -1;
        if (tk_dec_piece(d, c, tk_piece_str(in, i), in->v[i].len, i == 0, &out->text) != 0) return -1;
        out->v[out->n - 1].len = out->text.n - start;
    }
    return 0;
}

int tk_dec_apply(const tk_dec *d, tk_ctx *c) {
    if (d->kind == TK_DEC_SEQUENCE) {
        for (int i = 0; i < d->n_items; i++)
            if (tk_dec_apply(&d->items[i], c) != 0) return -1;
        return 0;
    }
    tk_pieces *in = &c->a, *out = &c->b;
    tk_pieces_clear(out);
    int rc = 0;
    switch (d->kind) {
    case TK_DEC_BYTELEVEL: rc = bytelevel(c, in, out); break;
    case TK_DEC_METASPACE:
    case TK_DEC_STRIP:
    case TK_DEC_REPLACE: rc = each_piece(d, c, in, out); break;
    case TK_DEC_BYTEFALLBACK: rc = bytefallback(c, in, out); break;
    case TK_DEC_FUSE: {
        size_t start = out->text.n;
        rc = tk_pieces_add(out, "", 0, -1, 0);
        for (size_t i = 0; i < in->n && rc == 0; i++) rc = tk_buf_put(&out->text, tk_piece_str(in, i), in->v[i].len);
        if (rc == 0) out->v[0].len = out->text.n - start;
        break;
    }
    case TK_DEC_SEQUENCE: break;
    }
    if (rc != 0) return -1;
    tk_pieces t = c->a;
    c->a = c->b;
    c->b = t;
    return 0;
}
