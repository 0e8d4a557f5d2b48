/* text.c — the server's text plumbing: growable strings, UTF-8 that is sent only in whole
 * characters and always valid, and stop strings (matching, and holding back what could still
 * become one). Pure functions: tests/test_server.c checks them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* ---------------------------------------------------------------- srv_buf */

static int buf_reserve(srv_buf *b, size_t extra) {
    if (b->failed) return -1;
    if (extra > (size_t)-1 / 2 - b->n) return b->failed = 1, -1;
    if (dt_grow(&b->p, &b->cap, b->n + extra + 1, 1, 256) != 0) return b->failed = 1, -1;
    return 0;
}

void srv_buf_put(srv_buf *b, const char *s, size_t n) {
    if (buf_reserve(b, n) != 0) return;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void srv_buf_puts(srv_buf *b, const char *s) {
    srv_buf_put(b, s, strlen(s));
}

void srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (w < 0 || buf_reserve(b, (size_t)w) != 0) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)w + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)w;
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

char *srv_buf_take(srv_buf *b, size_t *len) {
    if (!b->failed && !b->p) srv_buf_put(b, "", 0);
    if (b->failed) {
        srv_buf_free(b);
        return NULL;
    }
    char *p = b->p;
    if (len) *len = b->n;
    memset(b, 0, sizeof *b);
    return p;
}

/* ---------------------------------------------------------------- UTF-8 */

/* The well-formed sequence starting at s[0] (n ≥ 1 bytes there): returns its length, or 0 when
 * it is ill-formed, with *part = the bytes of its maximal subpart (≥ 1: what one U+FFFD
 * replaces) and *cut = 1 when it ran into the end of the text while still well-formed so far
 * (more bytes could complete it). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *part, int *cut) {
    *cut = 0;
    *part = 1;
    const unsigned char b = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else return 0;
    for (size_t i = 1; i < len; i++) {
        if (i >= n) {
            *part = i;
            *cut = 1;
            return 0;
        }
        const unsigned char c = s[i];
        const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (c < l || c > h) {
            *part = i;
            return 0;
        }
    }
    return len;
}

size_t srv_utf8_whole(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    /* the last sequence starts at most 3 bytes before the end */
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        const size_t i = n - back;
        if ((u[i] & 0xC0) == 0x80) continue;
        size_t part;
        int cut;
        if (utf8_seq(u + i, back, &part, &cut) == 0 && cut && part == back) return i;
        return n;
    }
    return n;
}

char *srv_utf8_repair(const char *s, size_t n, size_t *out_len) {
    const unsigned char *u = (const unsigned char *)s;
    srv_buf b = {0};
    size_t i = 0, run = 0; /* run: start of the valid bytes not yet copied */
    while (i < n) {
        size_t part = 1;
        int cut;
        const size_t len = u[i] ? utf8_seq(u + i, n - i, &part, &cut) : 0; /* NUL: see server.h */
        if (len) {
            i += len;
            continue;
        }
        srv_buf_put(&b, s + run, i - run);
        srv_buf_put(&b, "\xEF\xBF\xBD", 3);
        i += part;
        run = i;
    }
    srv_buf_put(&b, s + run, n - run);
    return srv_buf_take(&b, out_len);
}

int srv_json_has_nul(const char *body, size_t n) {
    int in_string = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in_string) {
            in_string = body[i] == '"';
            continue;
        }
        if (body[i] == '"') in_string = 0;
        else if (body[i] == '\\' && i + 1 < n) {
            if (n - i >= 6 && body[i + 1] == 'u' && !memcmp(body + i + 2, "0000", 4)) return 1;
            i++; /* the escaped character */
        }
    }
    return 0;
}

size_t srv_utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

size_t srv_utf8_common(const char *a, size_t na, const char *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    /* the texts part inside a character: it is not common to them */
    const unsigned char *ua = (const unsigned char *)a, *ub = (const unsigned char *)b;
    while (k > 0 && ((k < na && (ua[k] & 0xC0) == 0x80) || (k < nb && (ub[k] & 0xC0) == 0x80))) k--;
    return k;
}

/* ---------------------------------------------------------------- text offsets */

size_t srv_token_start(const char *prev, size_t n_prev, const char *cur, size_t n_cur) {
    size_t k = srv_utf8_common(prev, n_prev, cur, n_cur);
    /* the same text: the token's bytes went into the character cut short at its end, whose
     * stand-in they do not change (E6 and E6 97 both decode as one U+FFFD) */
    if (k == n_prev && n_cur == n_prev) k -= srv_text_tail(prev, n_prev);
    return srv_utf8_chars(cur, k);
}

int srv_offset_next(srv_offsets *o, size_t i, srv_decode_fn decode, void *ctx, size_t *offset) {
    char *cur = NULL, *prev = NULL;
    size_t n_cur, n_prev = 0;
    if (!o->open) {
        if (decode(ctx, i, i + 1, &cur, &n_cur) != 0) return -1;
        if (!memmem(cur, n_cur, "\xEF\xBF\xBD", 3)) {
            /* whole characters after whole characters: its text alone is its text here */
            *offset = o->chars > o->last ? o->chars : o->last;
            o->last = *offset;
            o->chars += srv_utf8_chars(cur, n_cur);
            free(cur);
            return 0;
        }
        o->open = 1;
        o->run = i;
    } else if (decode(ctx, o->run, i + 1, &cur, &n_cur) != 0)
        return -1;
    if (o->run < i && decode(ctx, o->run, i, &prev, &n_prev) != 0) {
        free(cur);
        return -1;
    }
    const size_t off = o->chars + srv_token_start(prev ? prev : "", n_prev, cur, n_cur);
    *offset = off > o->last ? off : o->last; /* a decoder that rewrites earlier bytes: never back */
    o->last = *offset;
    if (srv_text_tail(cur, n_cur) == 0) {
        o->chars += srv_utf8_chars(cur, n_cur);
        o->open = 0;
    }
    free(cur);
    free(prev);
    return 0;
}

/* ---------------------------------------------------------------- stop strings */

long srv_stop_find(const char *text, size_t n, const char *const *stops, int k) {
    long best = -1;
    for (int i = 0; i < k; i++) {
        const size_t l = strlen(stops[i]);
        if (l == 0 || l > n) continue;
        const char *p = memmem(text, n, stops[i], l);
        if (p && (best < 0 || p - text < best)) best = p - text;
    }
    return best;
}

size_t srv_stop_holdback(const char *text, size_t n, const char *const *stops, int k) {
    size_t best = 0;
    for (int i = 0; i < k; i++) {
        const size_t l = strlen(stops[i]);
        for (size_t h = (l - (l > 0)) < n ? l - (l > 0) : n; h > best; h--)
            if (memcmp(text + n - h, stops[i], h) == 0) {
                best = h;
                break;
            }
    }
    return best;
}

size_t srv_text_tail(const char *s, size_t n) {
    size_t e = srv_utf8_whole(s, n);
    while (e >= 3 && memcmp(s + e - 3, "\xEF\xBF\xBD", 3) == 0) e -= 3;
    return n - e;
}

size_t srv_text_sendable(const char *text, size_t n, const char *const *stops, int k, int final) {
    if (final) return n;
    /* the tail is no text yet: what could start a stop string is looked for before it (a stop's
     * prefix followed by the stand-in for the next character would never match), and whatever
     * the tail becomes, the stop string goes on past what precedes it */
    size_t e = n - srv_text_tail(text, n);
    e -= srv_stop_holdback(text, e, stops, k);
    return srv_utf8_whole(text, e);
}

int srv_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t part;
        int cut;
        const size_t len = utf8_seq(u + i, n - i, &part, &cut);
        if (!len) return 0;
        i += len;
    }
    return 1;
}
