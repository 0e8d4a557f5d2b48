/* normalizers.c — NFC/NFD/NFKC/NFKD (utf8proc), Lowercase, Strip, Prepend, Replace, Sequence. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tokenizer/tok.h"

static const char *const KEYS_TYPE[] = {"type", NULL};
static const char *const KEYS_STRIP[] = {"type", "strip_left", "strip_right", NULL};
static const char *const KEYS_PREPEND[] = {"type", "prepend", NULL};
static const char *const KEYS_REPLACE[] = {"type", "pattern", "content", NULL};
static const char *const KEYS_SEQUENCE[] = {"type", "normalizers", NULL};

int tk_norm_parse(tk_norm *n, const cJSON *j, const char *path, dt_error *err) {
    memset(n, 0, sizeof *n);
    const char *type = tk_json_type(j, "normalizer", path, err);
    if (!type) return -1;
    char what[96];
    snprintf(what, sizeof what, "normalizer %s", type);
    const char *const *keys = KEYS_TYPE;
    if (!strcmp(type, "NFC")) n->kind = TK_NORM_NFC;
    else if (!strcmp(type, "NFD")) n->kind = TK_NORM_NFD;
    else if (!strcmp(type, "NFKC")) n->kind = TK_NORM_NFKC;
    else if (!strcmp(type, "NFKD")) n->kind = TK_NORM_NFKD;
    else if (!strcmp(type, "Lowercase")) n->kind = TK_NORM_LOWERCASE;
    else if (!strcmp(type, "Strip")) {
        n->kind = TK_NORM_STRIP;
        keys = KEYS_STRIP;
        n->strip_left = n->strip_right = 1;
        if (tk_json_bool(j, "strip_left", &n->strip_left, what, path, err) != 0 ||
            tk_json_bool(j, "strip_right", &n->strip_right, what, path, err) != 0)
            return -1;
    } else if (!strcmp(type, "Prepend") || !strcmp(type, "Replace")) {
        int prepend = !strcmp(type, "Prepend");
        n->kind = prepend ? TK_NORM_PREPEND : TK_NORM_REPLACE;
        keys = prepend ? KEYS_PREPEND : KEYS_REPLACE;
        const char *content = NULL;
        if (tk_json_string(j, prepend ? "prepend" : "content", &content, what, path, err) != 0) return -1;
        if (!content) return dt_fail_format(err, "%s: %s lacks \"%s\"", path, what, prepend ? "prepend" : "content");
        n->content = tk_strdup(content);
        if (!n->content) return dt_fail_oom(err, "%s: out of memory", path);
        n->content_len = strlen(content);
        if (!prepend && tk_json_pattern(j, &n->re, what, path, err) != 0) return -1;
    } else if (!strcmp(type, "Sequence")) {
        n->kind = TK_NORM_SEQUENCE;
        keys = KEYS_SEQUENCE;
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "normalizers");
        if (!cJSON_IsArray(arr))
            return dt_fail_format(err, "%s: normalizer Sequence lacks the \"normalizers\" array", path);
        int cnt = cJSON_GetArraySize(arr);
        n->items = calloc(cnt ? (size_t)cnt : 1, sizeof *n->items);
        if (!n->items) return dt_fail_oom(err, "%s: out of memory", path);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            if (tk_norm_parse(&n->items[n->n_items++], it, path, err) != 0) return -1;
        }
    } else
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: normalizer \"%s\" is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, "
                            "Strip, Prepend, Replace, Sequence)",
                            path, type);
    return tk_json_only(j, keys, what, path, err);
}

void tk_norm_free(tk_norm *n) {
    for (int i = 0; i < n->n_items; i++) tk_norm_free(&n->items[i]);
    free(n->items);
    free(n->content);
    tk_regex_free(&n->re);
    memset(n, 0, sizeof *n);
}

static int is_ascii(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

static int unicode_form(tk_norm_kind kind, const char *s, size_t len, tk_buf *out) {
    if (is_ascii(s, len)) return tk_buf_put(out, s, len); /* every form leaves ASCII alone */
    utf8proc_option_t opt = UTF8PROC_STABLE;
    if (kind == TK_NORM_NFC || kind == TK_NORM_NFKC) opt |= UTF8PROC_COMPOSE;
    else opt |= UTF8PROC_DECOMPOSE;
    if (kind == TK_NORM_NFKC || kind == TK_NORM_NFKD) opt |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst, opt);
    if (n < 0) return -1;
    int rc = tk_buf_put(out, dst, (size_t)n);
    free(dst);
    return rc;
}

/* Rust's char::to_lowercase: the simple mapping, except U+0130 whose full mapping is two
 * characters (the only unconditional multi-character lowercase mapping in SpecialCasing). */
static int lowercase(const char *s, size_t len, tk_buf *out) {
    if (tk_buf_reserve(out, len + 8) != 0) return -1;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            char l = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
            if (tk_buf_put(out, &l, 1) != 0) return -1;
            i++;
            continue;
        }
        int k;
        uint32_t cp = tk_utf8_decode(s + i, &k);
        i += (size_t)k;
        if (cp == 0x130) {
            if (tk_buf_put(out, "i\xCC\x87", 3) != 0) return -1;
        } else if (tk_buf_put_cp(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp)) != 0)
            return -1;
    }
    return 0;
}

static int strip(const tk_norm *n, const char *s, size_t len, tk_buf *out) {
    size_t a = 0, b = len;
    while (n->strip_left && a < b) {
        int k;
        uint32_t cp = tk_utf8_decode(s + a, &k);
        if (!tk_is_white_space(cp)) break;
        a += (size_t)k;
    }
    while (n->strip_right && b > a) {
        size_t p = b - 1;
        while (p > a && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
        int k;
        if (!tk_is_white_space(tk_utf8_decode(s + p, &k))) break;
        b = p;
    }
    return tk_buf_put(out, s + a, b - a);
}

static int replace(const tk_norm *n, tk_ctx *c, const char *s, size_t len, tk_buf *out) {
    if (tk_regex_find_matches(&n->re, &c->m, s, len, &c->spans) != 0) return -1;
    for (size_t i = 0; i < c->spans.n; i++) {
        const tk_span *sp = &c->spans.v[i];
        int rc = sp->is_match ? tk_buf_put(out, n->content, n->content_len)
                              : tk_buf_put(out, s + sp->start, sp->end - sp->start);
        if (rc != 0) return -1;
    }
    return 0;
}

static int apply_one(const tk_norm *n, tk_ctx *c, const char *s, size_t len, int first, tk_buf *out) {
    switch (n->kind) {
    case TK_NORM_NFC: case TK_NORM_NFD: case TK_NORM_NFKC: case TK_NORM_NFKD:
        return unicode_form(n->kind, s, len, out);
    case TK_NORM_LOWERCASE:
        return lowercase(s, len, out);
    case TK_NORM_STRIP:
        return strip(n, s, len, out);
    case TK_NORM_PREPEND:
        if (first && len > 0 && tk_buf_put(out, n->content, n->content_len) != 0) return -1;
        return tk_buf_put(out, s, len);
    case TK_NORM_REPLACE:
        return replace(n, c, s, len, out);
    case TK_NORM_SEQUENCE: {
        /* ping-pong between out and a local buffer */
        tk_buf a = {0}, b = {0};
        int rc = tk_buf_put(&a, s, len);
        for (int i = 0; i < n->n_items && rc == 0; i++) {
            b.n = 0;
            rc = apply_one(&n->items[i], c, a.p ? a.p : "", a.n, first, &b);
            tk_buf t = a;
            a = b;
            b = t;
        }
        if (rc == 0) rc = tk_buf_put(out, a.p, a.n);
        tk_buf_free(&a);
        tk_buf_free(&b);
        return rc;
    }
    }
    return -1;
}

int tk_norm_apply(const tk_norm *n, tk_ctx *c, const char *s, size_t len, tk_buf *out) {
    out->n = 0;
    return apply_one(n, c, s, len, 1, out);
}

int tk_norm_apply_part(const tk_norm *n, tk_ctx *c, const char *s, size_t len, int first, tk_buf *out) {
    out->n = 0;
    return apply_one(n, c, s, len, first, out);
}

/* Between two ASCII characters: the Unicode forms never compose two ASCII characters, an ASCII
 * character (a starter without decomposition) blocks composition and reordering across it, and
 * each of these normalisers maps ASCII to one ASCII character, so after every step of a
 * Sequence the place is again between two ASCII characters; Prepend touches only the start of
 * the first part (no part is empty, before or after these normalisers). Strip and Replace look
 * at more than one character and are not cut. */
int tk_norm_cut_ok(const tk_norm *n) {
    switch (n->kind) {
    case TK_NORM_NFC: case TK_NORM_NFD: case TK_NORM_NFKC: case TK_NORM_NFKD:
    case TK_NORM_LOWERCASE: case TK_NORM_PREPEND:
        return 1;
    case TK_NORM_SEQUENCE:
        for (int i = 0; i < n->n_items; i++)
            if (!tk_norm_cut_ok(&n->items[i])) return 0;
        return 1;
    case TK_NORM_STRIP: case TK_NORM_REPLACE:
        return 0;
    }
    return 0;
}
