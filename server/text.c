/* text.c — the server's text plumbing: growable strings, UTF-8 that is always valid, a sequence's
 * text as its tokens come (the library's dt_tok_stream) with where each token begins, and stop
 * strings (matching, and holding back what could still become one). tests/test_server.c checks
 * them. */
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
 * it is ill-formed (or cut short by the end), with *part = the bytes of its maximal subpart (≥ 1:
 * what one U+FFFD replaces). */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *part) {
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
        const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (i >= n || s[i] < l || s[i] > h) {
            *part = i;
            return 0;
        }
    }
    return len;
}

void srv_buf_put_utf8(srv_buf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: start of the valid bytes not yet copied */
    while (i < n) {
        size_t part = 1;
        const size_t len = u[i] ? utf8_seq(u + i, n - i, &part) : 0; /* NUL: see server.h */
        if (len) {
            i += len;
            continue;
        }
        srv_buf_put(b, s + run, i - run);
        srv_buf_put(b, "\xEF\xBF\xBD", 3);
        i += part;
        run = i;
    }
    srv_buf_put(b, s + run, n - run);
}

char *srv_utf8_repair(const char *s, size_t n, size_t *out_len) {
    srv_buf b = {0};
    srv_buf_put_utf8(&b, s, n);
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

/* ---------------------------------------------------------------- a sequence's text */

size_t srv_token_start(const char *prev, size_t n_prev, const char *cur, size_t n_cur) {
    size_t k = srv_utf8_common(prev, n_prev, cur, n_cur);
    /* the same text: the token's bytes went into the character cut short at its end, whose
     * stand-in they do not change (E6 and E6 97 both decode as one U+FFFD) */
    if (k == n_prev && n_cur == n_prev && k >= 3 && !memcmp(prev + k - 3, "\xEF\xBF\xBD", 3)) k -= 3;
    return srv_utf8_chars(cur, k);
}

int srv_text_init(srv_text *t, const dt_model *m, dt_error *err) {
    memset(t, 0, sizeof *t);
    t->tok = dt_model_tok(m);
    return dt_model_tok_stream(m, 1, &t->ts, err);
}

void srv_text_free(srv_text *t) {
    dt_tok_stream_free(t->ts);
    srv_buf_free(&t->cur);
    srv_buf_free(&t->prev);
    srv_buf_free(&t->run);
    free(t->run_at);
    free(t->revised);
    memset(t, 0, sizeof *t);
}

/* cur = the stream's final text, then (when not the end) its pending rest, both valid UTF-8. */
static int text_update(srv_text *t, int rc, const char *fresh, size_t n, int end, dt_error *err) {
    t->cur.n = 0;
    if (rc == 0) {
        srv_buf_put_utf8(&t->cur, fresh, n);
        srv_buf_put(&t->cur, "", 0); /* a buffer even when empty */
        t->n_fresh = t->cur.n;
        if (!end) {
            const char *rest;
            size_t n_rest;
            rc = dt_tok_stream_pending(t->ts, &rest, &n_rest, err);
            if (rc == 0) srv_buf_put_utf8(&t->cur, rest, n_rest);
        }
    }
    if (rc == 0 && (t->cur.failed || t->prev.failed)) rc = dt_fail_oom(err, "decode: out of memory");
    if (rc != 0) return -1;
    t->chars += srv_utf8_chars(t->cur.p, t->n_fresh);
    return 0;
}

typedef enum { OWN_NONE = 0, OWN_BYTE, OWN_TEXT } own_kind;

/* The token's own bytes (*own malloc'd; none for an id that is no token, or a special one: they add
 * no text, the stream leaving special tokens out), and what kind of token it is: a ByteFallback
 * <0xXX> (the decoder gave its one byte) or another that writes text. -1 only when out of memory. */
static int own_bytes(const srv_text *t, int id, char **own, size_t *n, own_kind *kind, dt_error *err) {
    *own = NULL;
    *n = 0;
    *kind = OWN_NONE;
    if (t->tok && dt_tok_is_special(t->tok, id)) return 0;
    if (!t->tok) { /* a byte-level model: ids 0..255 are the bytes */
        if (id < 0 || id > 255) return 0;
        if (!(*own = malloc(1))) return dt_fail_oom(err, "decode: out of memory");
        (*own)[0] = (char)id;
        *n = 1;
        *kind = OWN_TEXT;
        return 0;
    }
    if (dt_tok_token_bytes(t->tok, id, own, n, err) != 0) return err->code == DT_ERR_NOMEM ? -1 : 0;
    size_t len;
    const char *s = dt_tok_id_to_token(t->tok, id, &len);
    *kind = *n == 1 && s && len == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' ? OWN_BYTE : OWN_TEXT;
    return 0;
}

/* The character the token's own bytes b[0..n) leave open at their end, the token beginning at
 * character `offset`: its offset and the continuation bytes it lacks (0: none open). Bytes that go
 * on with the character left open before (the token began inside it, at its offset) begin no
 * character. */
static void track_open_char(srv_text *t, const unsigned char *b, size_t n, size_t offset) {
    size_t begun = 0; /* characters the bytes so far began */
    size_t i = 0;
    if (t->utf8_need > 0)
        for (; i < n && (b[i] & 0xC0) == 0x80 && t->utf8_need > 0; i++) t->utf8_need--;
    if (i > 0) begun = 1; /* the character it went on with, at offset */
    for (; i < n; i++) {
        if ((b[i] & 0xC0) == 0x80 && t->utf8_need > 0) {
            t->utf8_need--;
            continue;
        }
        /* a lead byte opens a character of 2-4 bytes; anything else is a character of its own */
        const int need = b[i] >= 0xC2 && b[i] <= 0xDF ? 1 : b[i] >= 0xE0 && b[i] <= 0xEF ? 2
                                                       : b[i] >= 0xF0 && b[i] <= 0xF4 ? 3 : 0;
        t->utf8_need = need;
        t->open_char = offset + begun;
        begun++;
    }
}

/* Whether a run's bytes s[0..n) can still decode as UTF-8 (1: complete, 2: ending inside a
 * character that later bytes may complete) or can no longer (0). */
static int run_validity(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t part;
        const size_t len = utf8_seq(s + i, n - i, &part);
        if (len) {
            i += len;
            continue;
        }
        /* cut short by the end, not ill-formed: the lead byte and all that follows fit */
        return s[i] >= 0xC2 && s[i] <= 0xF4 && i + part == n ? 2 : 0;
    }
    return 1;
}

/* Where a token of the run goes that has k of its bytes before it (a byte token: the k-th; one that
 * writes nothing: where the next byte goes), while the run's n bytes so far decode as `validity`
 * says: the character that byte is in (past the last: after them, or in the one still open), or
 * when invalid its k-th U+FFFD. */
static size_t run_offset(const srv_text *t, size_t k, size_t n, int validity) {
    if (!validity) return t->run_start + k;
    const unsigned char *u = (const unsigned char *)t->run.p;
    size_t begun = 0;
    for (size_t i = 0; i < k && i < n; i++) begun += (u[i] & 0xC0) != 0x80;
    const int inside = k < n ? (u[k] & 0xC0) == 0x80 : validity == 2;
    return t->run_start + begun - (inside && begun > 0);
}

/* The run ends (a token that is not a byte, or the end): every token since it began placed again. */
static int run_end(srv_text *t, dt_error *err) {
    if (!t->run_open) return 0;
    const size_t n = t->n_pushed - t->run_first;
    if (dt_grow(&t->revised, &t->cap_revised, n + 1, sizeof *t->revised, 16) != 0)
        return dt_fail_oom(err, "decode: out of memory");
    const int validity = run_validity((const unsigned char *)t->run.p, t->run.n) == 1;
    for (size_t i = 0; i < n; i++) t->revised[i] = run_offset(t, t->run_at[i], t->run.n, validity);
    t->revised_first = t->run_first;
    t->n_revised = n;
    t->run_open = 0;
    t->run.n = 0;
    return 0;
}

void srv_text_revise(const srv_text *t, size_t *off, size_t n) {
    for (size_t i = 0; i < t->n_revised && t->revised_first + i < n; i++) off[t->revised_first + i] = t->revised[i];
}

int srv_text_push(srv_text *t, int id, size_t *offset, dt_error *err) {
    t->n_revised = 0;
    t->prev.n = 0;
    srv_buf_put(&t->prev, srv_text_rest(t), srv_text_rest_len(t));
    srv_buf_put(&t->prev, "", 0);
    const size_t before = t->chars;
    char *own;
    size_t n_own;
    own_kind kind;
    if (own_bytes(t, id, &own, &n_own, &kind, err) != 0) return -1;
    /* a token that is not a byte ends the run: the decoder writes the run's text before its own */
    if (kind == OWN_TEXT && run_end(t, err) != 0) {
        free(own);
        return -1;
    }
    const char *fresh;
    size_t n;
    const int rc = dt_tok_stream_push(t->ts, id, &fresh, &n, err);
    if (text_update(t, rc, fresh, n, 0, err) != 0) {
        free(own);
        return -1;
    }
    *offset = before + srv_token_start(t->prev.p, t->prev.n, t->cur.p, t->cur.n);
    const unsigned char *b = (const unsigned char *)own;
    if (kind == OWN_BYTE || (kind == OWN_NONE && t->run_open)) {
        if (!t->run_open) { /* its first byte: where the text changed */
            t->run_open = 1;
            t->run_start = *offset;
            t->run_first = t->n_pushed;
            t->run.n = 0;
            t->utf8_need = 0;
        }
        const size_t k = t->run.n, i = t->n_pushed - t->run_first;
        if (kind == OWN_BYTE) srv_buf_put(&t->run, own, 1);
        if (t->run.failed || dt_grow(&t->run_at, &t->cap_run_at, i + 1, sizeof *t->run_at, 16) != 0) {
            free(own);
            return dt_fail_oom(err, "decode: out of memory");
        }
        t->run_at[i] = k;
        *offset = run_offset(t, k, t->run.n, run_validity((const unsigned char *)t->run.p, t->run.n));
    } else {
        if (n_own > 0 && (b[0] & 0xC0) == 0x80 && t->utf8_need > 0) *offset = t->open_char;
        if (n_own > 0) track_open_char(t, b, n_own, *offset);
    }
    free(own);
    t->n_pushed++;
    return 0;
}

int srv_text_end(srv_text *t, dt_error *err) {
    t->n_revised = 0;
    if (run_end(t, err) != 0) return -1;
    const char *fresh;
    size_t n;
    const int rc = dt_tok_stream_flush(t->ts, &fresh, &n, err);
    return text_update(t, rc, fresh, n, 1, err);
}

/* How many of ids[0..n) are the ids the tokenizer adds before a text (its BOS), all of them or none. */
static int added_prefix(const dt_tok *tok, const int *ids, size_t n, size_t *added, dt_error *err) {
    dt_tok_summary s;
    dt_tok_info(tok, &s);
    *added = 0;
    if (s.n_prefix == 0 || (size_t)s.n_prefix > n) return 0;
    int32_t *pre;
    size_t n_pre;
    if (dt_tok_encode(tok, "", 0, 1, &pre, &n_pre, err) != 0) return -1;
    size_t k = 0;
    while (k < (size_t)s.n_prefix && k < n_pre && pre[k] == ids[k]) k++;
    free(pre);
    if (k == (size_t)s.n_prefix) *added = k;
    return 0;
}

/* The byte at which character c of s[0..n) begins, counting from byte `from` (n past the end). */
static size_t utf8_skip(const char *s, size_t n, size_t from, size_t c) {
    size_t i = from;
    for (; i < n && c > 0; c--)
        for (i++; i < n && ((unsigned char)s[i] & 0xC0) == 0x80; i++) {}
    return i;
}

/* How a segment's decoding d[0..nd) lines up with the segment as sent o[0..no), both valid UTF-8:
 * their common end, and before it, where the decoding is the longer, its extra characters at the
 * start (a Prepend's ▁: where the text it precedes begins) and the rest character by character;
 * where not, their common start, then the decoding's part where the text holds it (what a Strip
 * took away around it) or else character by character (Lowercase, NFC, a Replace the decoder does
 * not undo). In characters: pre the common start, mid_d and mid_o the parts between, extra the
 * decoding's characters more at their start, at where mid_d is in mid_o. */
typedef struct {
    size_t pre, mid_d, mid_o, extra, at;
} seg_align;

static seg_align seg_line_up(const char *d, size_t nd, const char *o, size_t no) {
    size_t suf = 0, pre = 0;
    while (suf < nd && suf < no && d[nd - 1 - suf] == o[no - 1 - suf]) suf++;
    while (suf > 0 && ((unsigned char)d[nd - suf] & 0xC0) == 0x80) suf--;
    seg_align a = {0, srv_utf8_chars(d, nd - suf), srv_utf8_chars(o, no - suf), 0, 0};
    if (a.mid_d > a.mid_o) {
        a.extra = a.mid_d - a.mid_o;
        return a;
    }
    while (pre + suf < nd && pre + suf < no && d[pre] == o[pre]) pre++;
    while (pre > 0 && pre < nd && ((unsigned char)d[pre] & 0xC0) == 0x80) pre--;
    a.pre = srv_utf8_chars(d, pre);
    a.mid_d -= a.pre;
    a.mid_o -= a.pre;
    const size_t md = nd - suf - pre, mo = no - suf - pre;
    const char *in = md > 0 && md < mo ? memmem(o + pre, mo, d + pre, md) : NULL;
    if (in) a.at = srv_utf8_chars(o + pre, (size_t)(in - (o + pre)));
    return a;
}

static size_t seg_place(const seg_align *a, size_t p) {
    if (p < a->pre) return p;
    if (p >= a->pre + a->mid_d) return p - a->mid_d + a->mid_o;
    size_t q = p - a->pre;
    q = a->extra ? (q > a->extra ? q - a->extra : 0) : q + a->at;
    return a->pre + (q < a->mid_o ? q : a->mid_o);
}

int srv_text_place(const dt_model *m, const char *text, size_t len, const int *ids, size_t n, size_t *off,
                   dt_error *err) {
    srv_text t;
    srv_buf dec = {0}; /* the prompt's decoding, special tokens left out */
    int rc = srv_text_init(&t, m, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = srv_text_push(&t, ids[i], &off[i], err);
        if (rc == 0) srv_text_revise(&t, off, i);
        if (rc == 0) srv_buf_put(&dec, t.cur.p, t.n_fresh);
    }
    /* ended: a ByteFallback run the prompt ends in is placed for good (the text as sent is final) */
    if (rc == 0) rc = srv_text_end(&t, err);
    if (rc == 0) srv_text_revise(&t, off, n);
    if (rc == 0) srv_buf_put(&dec, t.cur.p, t.n_fresh);
    srv_text_free(&t);
    if (rc == 0 && dec.failed) rc = dt_fail_oom(err, "decode: out of memory");
    const dt_tok *tok = dt_model_tok(m);
    /* an added BOS holds no text even where the text begins with its own: "<|begin_of_text|>x" is
     * BOS, BOS, x, and the written one is the second (matched to the text, the added one put it after) */
    size_t added = 0;
    if (rc == 0 && tok && added_prefix(tok, ids, n, &added, err) != 0) rc = -1;
    if (rc != 0) {
        srv_buf_free(&dec);
        return -1;
    }
    /* The text is cut into segments by the special tokens it holds, which the encoder cut out before
     * normalising what lies between; each segment's decoding is lined up with it as sent. */
    const char *d = dec.p ? dec.p : "";
    const size_t nd = dec.n, d_chars = srv_utf8_chars(d, nd);
    size_t first = 0, d_at = 0, d_byte = 0, o_byte = 0, o_chars = 0; /* where the segment begins */
    for (size_t j = 0; j <= n; j++) {
        size_t tl = 0;
        const char *s = j < n && tok && j >= added && dt_tok_is_special(tok, ids[j])
                            ? dt_tok_id_to_token(tok, ids[j], &tl)
                            : NULL;
        const char *in = s && tl > 0 ? memmem(text + o_byte, len - o_byte, s, tl) : NULL;
        if (j < n && !in) continue;
        size_t d_end = j < n ? off[j] : d_chars;
        if (d_end < d_at) d_end = d_at;
        if (d_end > d_chars) d_end = d_chars;
        const size_t d_end_byte = utf8_skip(d, nd, d_byte, d_end - d_at);
        const size_t o_end = in ? (size_t)(in - text) : len;
        const seg_align a = seg_line_up(d + d_byte, d_end_byte - d_byte, text + o_byte, o_end - o_byte);
        for (size_t i = first; i < j; i++) {
            const size_t p = off[i] < d_at ? 0 : off[i] > d_end ? d_end - d_at : off[i] - d_at;
            off[i] = o_chars + seg_place(&a, p);
        }
        o_chars += srv_utf8_chars(text + o_byte, o_end - o_byte);
        if (j < n) {
            off[j] = o_chars;
            o_chars += srv_utf8_chars(s, tl);
            o_byte = o_end + tl;
        }
        first = j + 1;
        d_at = d_end;
        d_byte = d_end_byte;
    }
    srv_buf_free(&dec);
    return 0;
}

/* ---------------------------------------------------------------- stop strings */

size_t srv_text_sendable(const char *text, size_t n, const char *const *stops, int k, int final) {
    return final ? n : n - dt_stop_holdback(text, n, stops, k);
}

int srv_utf8_valid(const char *s, size_t n) { return dt_utf8_valid_prefix(s, n) == n; }
