/* text.c — byte buffers, UTF-8, the piece lists of the encoding pipeline, JSON helpers. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tokenizer/tok.h"

int tk_buf_reserve(tk_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->n) return -1;
    return grow_array(&b->p, &b->cap, b->n + extra, 1, 256);
}

int tk_buf_put(tk_buf *b, const void *s, size_t n) {
    if (tk_buf_reserve(b, n) != 0) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

int tk_buf_put_cp(tk_buf *b, uint32_t cp) {
    char tmp[4];
    return tk_buf_put(b, tmp, (size_t)tk_utf8_encode(cp, tmp));
}

void tk_buf_free(tk_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

uint32_t tk_utf8_decode(const char *s, int *len) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80) {
        *len = 1;
        return u[0];
    }
    if (u[0] < 0xE0) {
        *len = 2;
        return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    }
    if (u[0] < 0xF0) {
        *len = 3;
        return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    }
    *len = 4;
    return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
           (u[3] & 0x3F);
}

int tk_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* How many bytes at s[0..n) form a valid sequence (*valid = 1), or the length of the longest
 * prefix of one that is there (*valid = 0, at least 1): the unit of U+FFFD substitution. */
static size_t utf8_unit(const unsigned char *s, size_t n, int *valid) {
    unsigned char c = s[0];
    *valid = 0;
    if (c < 0x80) {
        *valid = 1;
        return 1;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 1;
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n) return i;
        unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
        if (s[i] < lo_i || s[i] > hi_i) return i;
    }
    *valid = 1;
    return need;
}

size_t tk_utf8_check(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int valid;
        size_t k = utf8_unit(u + i, n - i, &valid);
        if (!valid) return i;
        i += k;
    }
    return n;
}

size_t dt_utf8_valid_prefix(const char *s, size_t n) { return tk_utf8_check(s, n); }

size_t tk_utf8_complete(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    /* a sequence still open at the end starts at most 3 bytes before it */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const size_t i = n - back;
        if ((u[i] & 0xC0) == 0x80) continue;
        if (u[i] < 0xC2 || u[i] > 0xF4) return n; /* ASCII, or a byte that never starts a character */
        int valid;
        const size_t k = utf8_unit(u + i, back, &valid);
        return !valid && k == back ? i : n; /* well-formed up to the end, and short of a character */
    }
    return n;
}

int tk_utf8_lossy(tk_buf *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        int valid;
        size_t k = u[i] < 0x80 ? (valid = 1, 1) : utf8_unit(u + i, n - i, &valid);
        if (valid) {
            i += k;
            continue;
        }
        if (tk_buf_put(out, s + run, i - run) != 0 || tk_buf_put(out, "\xEF\xBF\xBD", 3) != 0) return -1;
        i += k;
        run = i;
    }
    return tk_buf_put(out, s + run, n - run);
}

int tk_is_white_space(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

void tk_pieces_clear(tk_pieces *p) {
    p->n = 0;
    p->text.n = 0;
}

void tk_pieces_free(tk_pieces *p) {
    tk_buf_free(&p->text);
    free(p->v);
    p->v = NULL;
    p->n = p->cap = 0;
}

int tk_pieces_add(tk_pieces *p, const char *s, size_t n, int32_t id, int origin) {
    if (grow_array(&p->v, &p->cap, p->n + 1, sizeof *p->v, 64) != 0) return -1;
    size_t off = p->text.n;
    if (tk_buf_put(&p->text, s, n) != 0) return -1;
    p->v[p->n++] = (tk_piece){off, n, id, origin};
    return 0;
}

char *tk_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* FNV-1a over 8-byte words: strings here are short (tokens, words). */
uint64_t tk_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, n - i);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 32;
    h *= 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

/* ---------------------------------------------------------------- JSON helpers */

const char *tk_json_type(const cJSON *j, const char *what, const char *path, dt_error *err) {
    if (!cJSON_IsObject(j)) {
        dt_fail_format(err, "%s: %s is not a JSON object", path, what);
        return NULL;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (!cJSON_IsString(t)) {
        dt_fail_format(err, "%s: %s has no \"type\"", path, what);
        return NULL;
    }
    return t->valuestring;
}

int tk_json_bool(const cJSON *obj, const char *key, int *out, const char *what, const char *path, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return dt_fail_format(err, "%s: %s: \"%s\" must be true or false", path, what, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

int tk_json_string(const cJSON *obj, const char *key, const char **out, const char *what, const char *path,
                   dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return dt_fail_format(err, "%s: %s: \"%s\" must be a string", path, what, key);
    /* these strings become text that the regexes scan without a UTF-8 check */
    const size_t len = strlen(v->valuestring), bad_at = tk_utf8_check(v->valuestring, len);
    if (bad_at != len)
        return dt_fail_format(err, "%s: %s: \"%s\" is not valid UTF-8 (byte %zu)", path, what, key, bad_at);
    *out = v->valuestring;
    return 0;
}

int tk_json_only(const cJSON *obj, const char *const *keys, const char *what, const char *path, dt_error *err) {
    for (const cJSON *m = obj->child; m; m = m->next) {
        int known = 0;
        for (int i = 0; keys[i] && !known; i++) known = !strcmp(m->string, keys[i]);
        if (!known)
            return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: %s: option \"%s\" is not supported", path, what,
                                m->string);
    }
    return 0;
}

int tk_json_pattern(const cJSON *obj, tk_regex *re, const char *what, const char *path, dt_error *err) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(obj, "pattern");
    const cJSON *s = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
    const cJSON *r = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
    const cJSON *v = s ? s : r;
    if (!cJSON_IsString(v) || (s && r))
        return dt_fail_format(err, "%s: %s: \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}", path, what);
    char where[512];
    snprintf(where, sizeof where, "%s: %s", path, what);
    return tk_regex_compile(re, v->valuestring, strlen(v->valuestring), s != NULL, where, err);
}
