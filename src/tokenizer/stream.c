/* stream.c — text from ids as they come (dt_tok_stream): the decoder chain run piece by piece, each
 * step keeping only what a later token can still change, so that a token costs its own length and
 * not the text's.
 *
 * The chain's steps (Sequences flattened) fall in three parts. Before the first Fuse or ByteLevel
 * the steps see one piece per token: Metaspace, Strip and Replace map each piece on its own (a
 * token's text is final once it comes, Metaspace's first piece being the text's first), and
 * ByteFallback joins a run of <0xXX> pieces, which is final when a piece that is not a byte ends it
 * (a later invalid byte turns the whole run into U+FFFDs). Fuse and ByteLevel join every piece into
 * one text: Fuse as it is, ByteLevel as the UTF-8 of its bytes, final up to a character still cut
 * short at the end. The steps after them see that one text as it grows: Metaspace maps characters,
 * Strip drops the text's first characters and holds back the last ones it may drop at the end, and
 * a Replace of a string holds back an end that may begin a match. Without a Fuse or ByteLevel, the
 * pieces are the text (joined by spaces when the tokenizer has no decoder).
 *
 * A Replace with a regex, ByteFallback or ByteLevel after the join could change the whole text at
 * any token: such a chain (no published tokenizer has one) is decoded whole at the flush. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tokenizer/tok.h"

/* What a step keeps between tokens. */
typedef struct {
    size_t n_in;                 /* pieces it has had (a piece step: the first is the text's first) */
    tk_buf held;                 /* ByteFallback: the open run's bytes; Replace after the join: the end
                                    that may begin a match */
    int strip_left;              /* Strip after the join: first characters it may still drop */
    size_t strip_held;           /* Strip after the join: its characters held back at the end */
} step_state;

typedef struct {
    step_state *step;            /* [n_steps] */
    tk_buf bytes;                /* ByteLevel's, or a byte-level model's, bytes of a character cut short */
    size_t n_pieces;             /* pieces given out without a join (a space between them without a
                                    decoder) */
} stream_state;

struct dt_tok_stream {
    const dt_tok *tok;           /* NULL: a byte-level model's bytes */
    int skip_special;
    const tk_dec **steps;        /* the decoder chain, Sequences flattened */
    int n_steps;
    int join;                    /* the Fuse or ByteLevel step that joins the pieces; n_steps: none */
    int whole;                   /* a chain decoded whole at the flush (above) */
    int32_t *ids;                /* whole: the ids that have text */
    size_t n_ids, cap_ids;
    stream_state st;
    stream_state look;           /* a copy of st that dt_tok_stream_pending flushes */
    tk_ctx ctx;                  /* Replace's regex matching */
    tk_buf *scratch;             /* [n_steps + 1] a step's output on its way to the next */
    tk_pieces *runs;             /* [n_steps + 1] a ByteFallback step's ended run, as its pieces */
    tk_buf out;                  /* what the last call gives */
};

/* ---------------------------------------------------------------- the chain */

static int count_steps(const tk_dec *d) {
    if (d->kind != TK_DEC_SEQUENCE) return 1;
    int n = 0;
    for (int i = 0; i < d->n_items; i++) n += count_steps(&d->items[i]);
    return n;
}

static void flatten(const tk_dec *d, const tk_dec **steps, int *n) {
    if (d->kind != TK_DEC_SEQUENCE) {
        steps[(*n)++] = d;
        return;
    }
    for (int i = 0; i < d->n_items; i++) flatten(&d->items[i], steps, n);
}

/* A step after the join that the stream follows character by character. */
static int follows_text(const tk_dec *d) {
    switch (d->kind) {
    case TK_DEC_METASPACE:
    case TK_DEC_STRIP:
    case TK_DEC_FUSE: return 1;
    case TK_DEC_REPLACE: return d->literal && d->re.source[0] != '\0';
    default: return 0;
    }
}

static void state_reset(const dt_tok_stream *s, stream_state *st) {
    for (int k = 0; k < s->n_steps; k++) {
        step_state *t = &st->step[k];
        t->n_in = 0;
        t->held.n = 0;
        t->strip_left = s->steps[k]->kind == TK_DEC_STRIP ? s->steps[k]->strip_start : 0;
        t->strip_held = 0;
    }
    st->bytes.n = 0;
    st->n_pieces = 0;
}

static void state_free(const dt_tok_stream *s, stream_state *st) {
    for (int k = 0; st->step && k < s->n_steps; k++) tk_buf_free(&st->step[k].held);
    free(st->step);
    tk_buf_free(&st->bytes);
}

static int state_copy(const dt_tok_stream *s, stream_state *to, const stream_state *from) {
    for (int k = 0; k < s->n_steps; k++) {
        step_state *a = &to->step[k];
        const step_state *b = &from->step[k];
        a->n_in = b->n_in;
        a->strip_left = b->strip_left;
        a->strip_held = b->strip_held;
        a->held.n = 0;
        if (tk_buf_put(&a->held, b->held.p, b->held.n) != 0) return -1;
    }
    to->bytes.n = 0;
    to->n_pieces = from->n_pieces;
    return tk_buf_put(&to->bytes, from->bytes.p, from->bytes.n);
}

dt_tok_stream *dt_tok_stream_new(const dt_tok *tok, int skip_special) {
    dt_tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->tok = tok;
    s->skip_special = skip_special;
    tk_ctx_init_decoding(&s->ctx);
    const int n = tok && tok->decoder ? count_steps(tok->decoder) : 0;
    s->steps = calloc((size_t)n + 1, sizeof *s->steps);
    s->scratch = calloc((size_t)n + 1, sizeof *s->scratch);
    s->runs = calloc((size_t)n + 1, sizeof *s->runs);
    s->st.step = calloc((size_t)n + 1, sizeof *s->st.step);
    s->look.step = calloc((size_t)n + 1, sizeof *s->look.step);
    if (!s->steps || !s->scratch || !s->runs || !s->st.step || !s->look.step) {
        dt_tok_stream_free(s);
        return NULL;
    }
    if (n) flatten(tok->decoder, s->steps, &s->n_steps);
    s->join = s->n_steps;
    for (int k = 0; k < s->n_steps && s->join == s->n_steps; k++)
        if (s->steps[k]->kind == TK_DEC_FUSE || s->steps[k]->kind == TK_DEC_BYTELEVEL) s->join = k;
    for (int k = s->join + 1; k < s->n_steps; k++) s->whole |= !follows_text(s->steps[k]);
    state_reset(s, &s->st);
    return s;
}

void dt_tok_stream_free(dt_tok_stream *s) {
    if (!s) return;
    state_free(s, &s->st);
    state_free(s, &s->look);
    for (int k = 0; s->scratch && k <= s->n_steps; k++) tk_buf_free(&s->scratch[k]);
    for (int k = 0; s->runs && k <= s->n_steps; k++) tk_pieces_free(&s->runs[k]);
    free(s->scratch);
    free(s->runs);
    free(s->steps);
    free(s->ids);
    tk_ctx_free(&s->ctx);
    tk_buf_free(&s->out);
    free(s);
}

/* ---------------------------------------------------------------- after the join: one text */

/* Strip after the join: the text's first strip_start strip characters go, and its last
 * strip_stop go at the end, so those are held back until a character that is not one follows. */
static int strip_text(const tk_dec *d, step_state *t, const char *s, size_t n, tk_buf *out) {
    char ch[4];
    const size_t cl = (size_t)tk_utf8_encode(d->strip_char, ch);
    for (size_t p = 0; p < n;) {
        int k;
        tk_utf8_decode(s + p, &k);
        const int is_strip = (size_t)k == cl && !memcmp(s + p, ch, cl);
        if (t->strip_left > 0 && is_strip) {
            t->strip_left--;
        } else if (is_strip && d->strip_stop > 0) {
            t->strip_left = 0;
            if (++t->strip_held > (size_t)d->strip_stop) { /* only the last strip_stop can go */
                t->strip_held--;
                if (tk_buf_put(out, ch, cl) != 0) return -1;
            }
        } else {
            t->strip_left = 0;
            for (; t->strip_held > 0; t->strip_held--)
                if (tk_buf_put(out, ch, cl) != 0) return -1;
            if (tk_buf_put(out, s + p, (size_t)k) != 0) return -1;
        }
        p += (size_t)k;
    }
    return 0;
}

/* Replace of a string after the join: its matches, left to right and not overlapping, as the
 * whole text's; an end of the text that may begin a match is held back. */
static int replace_text(const tk_dec *d, step_state *t, const char *s, size_t n, tk_buf *out) {
    const char *pat = d->re.source;
    const size_t pl = strlen(pat);
    if (tk_buf_put(&t->held, s, n) != 0) return -1;
    const char *w = t->held.p ? t->held.p : "";
    const size_t wn = t->held.n;
    size_t at = 0;
    for (const char *m; (m = memmem(w + at, wn - at, pat, pl)) != NULL; at = (size_t)(m - w) + pl)
        if (tk_buf_put(out, w + at, (size_t)(m - w) - at) != 0 || tk_buf_put(out, d->content, d->content_len) != 0)
            return -1;
    size_t keep = pl - 1 < wn - at ? pl - 1 : wn - at; /* the longest end that is a start of the pattern */
    while (keep > 0 && memcmp(w + wn - keep, pat, keep) != 0) keep--;
    if (tk_buf_put(out, w + at, wn - keep - at) != 0) return -1;
    memmove(t->held.p, w + wn - keep, keep);
    t->held.n = keep;
    return 0;
}

/* Text s[0..n) (whole characters) into the steps from k on, after the join. */
static int text_in(dt_tok_stream *s, stream_state *st, int k, const char *t, size_t n) {
    if (k == s->n_steps) return tk_buf_put(&s->out, t, n);
    if (n == 0) return 0; /* no step makes text of none */
    const tk_dec *d = s->steps[k];
    tk_buf *o = &s->scratch[k];
    o->n = 0;
    int rc;
    switch (d->kind) {
    case TK_DEC_STRIP: rc = strip_text(d, &st->step[k], t, n, o); break;
    case TK_DEC_REPLACE: rc = replace_text(d, &st->step[k], t, n, o); break;
    default: rc = tk_dec_piece(d, &s->ctx, t, n, 1, o); break; /* Metaspace (the one text is the first piece), Fuse */
    }
    return rc != 0 ? -1 : text_in(s, st, k + 1, o->p, o->n);
}

/* The end of the text: what the steps after the join held back. */
static int text_flush(dt_tok_stream *s, stream_state *st) {
    for (int k = s->join + 1; k < s->n_steps; k++) {
        step_state *t = &st->step[k];
        t->strip_held = 0; /* the last characters Strip drops */
        if (s->steps[k]->kind == TK_DEC_REPLACE && t->held.n) {
            tk_buf *o = &s->scratch[k];
            o->n = 0;
            if (tk_buf_put(o, t->held.p, t->held.n) != 0) return -1;
            t->held.n = 0;
            if (text_in(s, st, k + 1, o->p, o->n) != 0) return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- before the join: pieces */

/* ByteLevel's bytes into text: the characters that are whole (or can never be: U+FFFD), all of them
 * at the end. */
static int bytes_out(dt_tok_stream *s, stream_state *st, int end) {
    tk_buf *b = &st->bytes, *o = &s->scratch[s->join];
    const size_t cut = end ? b->n : tk_utf8_complete(b->p, b->n);
    if (cut == 0) return 0;
    o->n = 0;
    if (tk_utf8_lossy(o, b->p, cut) != 0) return -1;
    memmove(b->p, b->p + cut, b->n - cut);
    b->n -= cut;
    return text_in(s, st, s->join + 1, o->p, o->n);
}

static int piece_in(dt_tok_stream *s, stream_state *st, int k, const char *p, size_t n);

/* A ByteFallback run that has ended, as its pieces, into the steps after k. */
static int run_out(dt_tok_stream *s, stream_state *st, int k) {
    tk_pieces *r = &s->runs[k];
    tk_pieces_clear(r);
    if (tk_dec_fallback_flush(&st->step[k].held, r) != 0) return -1;
    for (size_t i = 0; i < r->n; i++)
        if (piece_in(s, st, k + 1, tk_piece_str(r, i), r->v[i].len) != 0) return -1;
    return 0;
}

/* One piece p[0..n) into the steps from k on, before the join. */
static int piece_in(dt_tok_stream *s, stream_state *st, int k, const char *p, size_t n) {
    if (k == s->n_steps) { /* no join: the pieces are the text */
        const int space = !s->tok->decoder && st->n_pieces > 0;
        st->n_pieces++;
        return (space ? tk_buf_put(&s->out, " ", 1) : 0) || tk_buf_put(&s->out, p, n) ? -1 : 0;
    }
    const tk_dec *d = s->steps[k];
    step_state *t = &st->step[k];
    const int first = t->n_in++ == 0;
    if (k == s->join) {
        if (d->kind == TK_DEC_FUSE) return text_in(s, st, k + 1, p, n);
        return tk_dec_bytelevel_bytes(p, n, &st->bytes) != 0 ? -1 : bytes_out(s, st, 0);
    }
    if (d->kind == TK_DEC_BYTEFALLBACK) {
        const int b = tk_dec_fallback_byte(p, n);
        if (b >= 0) {
            const unsigned char ub = (unsigned char)b;
            return tk_buf_put(&t->held, &ub, 1);
        }
        if (t->held.n && run_out(s, st, k) != 0) return -1;
        return piece_in(s, st, k + 1, p, n);
    }
    tk_buf *o = &s->scratch[k];
    o->n = 0;
    if (tk_dec_piece(d, &s->ctx, p, n, first, o) != 0) return -1;
    return piece_in(s, st, k + 1, o->p ? o->p : "", o->n);
}

/* The end of the ids: the open runs, ByteLevel's last bytes, what the steps after the join hold. */
static int chain_flush(dt_tok_stream *s, stream_state *st) {
    for (int k = 0; k < s->join; k++)
        if (s->steps[k]->kind == TK_DEC_BYTEFALLBACK && st->step[k].held.n && run_out(s, st, k) != 0) return -1;
    if (s->join < s->n_steps && s->steps[s->join]->kind == TK_DEC_BYTELEVEL && bytes_out(s, st, 1) != 0) return -1;
    return text_flush(s, st);
}

/* ---------------------------------------------------------------- public */

static int give(dt_tok_stream *s, int rc, const char **text, size_t *len, dt_error *err) {
    if (rc == 0) rc = tk_buf_put(&s->out, "", 1);
    if (rc != 0) {
        s->out.n = 0;
        *text = "";
        *len = 0;
        return dt_fail_oom(err, "%s: decoding failed (out of memory)", s->tok ? s->tok->path : "byte-level text");
    }
    *text = s->out.p;
    *len = --s->out.n;
    return 0;
}

/* The whole decode of a chain the stream cannot follow: the ids kept, into s->out. */
static int whole_decode(dt_tok_stream *s) {
    char *text;
    size_t len;
    dt_error e;
    if (dt_tok_decode(s->tok, s->ids, s->n_ids, s->skip_special, &text, &len, &e) != 0) return -1;
    const int rc = tk_buf_put(&s->out, text, len);
    free(text);
    return rc;
}

int dt_tok_stream_push(dt_tok_stream *s, int32_t id, const char **text, size_t *len, dt_error *err) {
    s->out.n = 0;
    int rc = 0;
    if (!s->tok) {
        if (id >= 0 && id < 256) {
            const unsigned char b = (unsigned char)id;
            rc = tk_buf_put(&s->st.bytes, &b, 1);
            /* a byte-level model's text is its bytes as they are: whole characters, and bytes that
             * can never be one, go out */
            const size_t cut = rc == 0 ? tk_utf8_complete(s->st.bytes.p, s->st.bytes.n) : 0;
            if (rc == 0 && cut) {
                rc = tk_buf_put(&s->out, s->st.bytes.p, cut);
                memmove(s->st.bytes.p, s->st.bytes.p + cut, s->st.bytes.n - cut);
                s->st.bytes.n -= cut;
            }
        }
        return give(s, rc, text, len, err);
    }
    size_t n;
    const char *p = dt_tok_id_to_token(s->tok, id, &n);
    if (p && !(s->skip_special && tk_skipped_as_special(s->tok, p, n))) {
        if (s->whole) {
            rc = grow_array(&s->ids, &s->cap_ids, s->n_ids + 1, sizeof *s->ids, 64);
            if (rc == 0) s->ids[s->n_ids++] = id;
        } else
            rc = piece_in(s, &s->st, 0, p, n);
    }
    return give(s, rc, text, len, err);
}

int dt_tok_stream_pending(dt_tok_stream *s, const char **text, size_t *len, dt_error *err) {
    s->out.n = 0;
    int rc;
    if (!s->tok) rc = tk_buf_put(&s->out, s->st.bytes.p, s->st.bytes.n);
    else if (s->whole) rc = whole_decode(s);
    else {
        rc = state_copy(s, &s->look, &s->st);
        if (rc == 0) rc = chain_flush(s, &s->look);
    }
    return give(s, rc, text, len, err);
}

int dt_tok_stream_flush(dt_tok_stream *s, const char **text, size_t *len, dt_error *err) {
    s->out.n = 0;
    int rc;
    if (!s->tok) rc = tk_buf_put(&s->out, s->st.bytes.p, s->st.bytes.n);
    else if (s->whole) rc = whole_decode(s);
    else rc = chain_flush(s, &s->st);
    s->n_ids = 0;
    if (s->tok) state_reset(s, &s->st);
    else s->st.bytes.n = 0;
    return give(s, rc, text, len, err);
}
