/* parallel.c — encoding a large text on several threads with exactly the ids of one thread.
 *
 * Added tokens and normalisation run first, on one thread (they are cheap). Then each text piece
 * goes through the pre-tokenizer and the model; pieces are independent, so they are shared out.
 * A large piece whose pre-tokenizer starts with a regex scan (Split, ByteLevel's regex) is cut:
 * chunk k scans from its cut point q_k over the whole piece (so look-ahead sees past the cut)
 * until a match ends at or after q_{k+1}. The match iteration's state after a match is just the
 * match's end, so once the scan that came from the left accepts a match ending where chunk k's
 * scan also had a match end, everything after is identical: the chunks are spliced there, and
 * where no such point exists the left scan simply goes on (on one thread) until it finds one.
 * The result is the sequential scan's list of matches, whatever the cut points. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok.h"

#define CHUNK_BYTES ((size_t)1 << 18)   /* a piece is cut into chunks of about this size */
#define PARALLEL_MIN ((size_t)1 << 16)  /* below this, one thread */

typedef struct {
    size_t start;                /* q_k */
    size_t *ms, *me;             /* accepted matches */
    size_t n, cap;
    int ran_out;                 /* the scan reached the end of the subject */
    int failed;
} chunk;

static int chunk_push(chunk *c, size_t ms, size_t me) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        size_t *a = realloc(c->ms, cap * sizeof *a);
        if (a) c->ms = a;
        size_t *b = realloc(c->me, cap * sizeof *b);
        if (b) c->me = b;
        if (!a || !b) return -1;
        c->cap = cap;
    }
    c->ms[c->n] = ms;
    c->me[c->n] = me;
    c->n++;
    return 0;
}

/* Phase 1: chunk k's own scan, from q_k until a match ends at or after `until`. */
static void scan_chunk(const tk_regex *re, tk_matcher *m, const char *s, size_t n, chunk *c, size_t until) {
    tk_scan st = {c->start, (size_t)-1};
    size_t ms, me;
    for (;;) {
        int rc = tk_regex_next(re, m, s, n, &st, &ms, &me);
        if (rc < 0 || (rc == 1 && chunk_push(c, ms, me) != 0)) {
            c->failed = 1;
            return;
        }
        if (rc == 0) {
            c->ran_out = 1;
            return;
        }
        if (me >= until) return;
    }
}

/* The index after which chunk c's matches continue the scan that has just accepted a match
 * ending at e (with last_match_end == e), or -1. A scan that starts at q_k differs from one that
 * arrives at q_k only in whether an empty match at q_k is taken. */
static long sync_index(const chunk *c, size_t e) {
    if (e == c->start && !(c->n > 0 && c->ms[0] == e && c->me[0] == e)) return 0;
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->me[mid] < e) lo = mid + 1;
        else hi = mid;
    }
    return lo < c->n && c->me[lo] == e ? (long)lo + 1 : -1;
}

/* The sequential scan's spans of subject s[0..n), computed on n_threads threads. */
static int parallel_spans(const tk_regex *re, const char *s, size_t n, int n_threads, tk_ctx *ctxs, tk_spans *out) {
    size_t n_chunks = n / CHUNK_BYTES + 1;
    chunk *ch = calloc(n_chunks, sizeof *ch);
    if (!ch) return -1;
    for (size_t k = 0; k < n_chunks; k++) {
        size_t q = n * k / n_chunks;
        while (q < n && ((unsigned char)s[q] & 0xC0) == 0x80) q++;
        ch[k].start = q;
    }
    int failed = 0;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1) reduction(| : failed)
    for (long k = 0; k < (long)n_chunks; k++) {
        tk_ctx *c = &ctxs[omp_get_thread_num()];
        scan_chunk(re, &c->m, s, n, &ch[k], k + 1 < (long)n_chunks ? ch[k + 1].start : n + 1);
        failed |= ch[k].failed;
    }
    /* Phase 2: splice, scanning on where a chunk does not continue the scan from the left. */
    int rc = failed ? -1 : 0;
    tk_scan st = {0, (size_t)-1};
    size_t prev = 0, ms, me;
    out->n = 0;
    int done = 0;
    /* emits the matches idx.. of chunk k and moves the state to their end */
#define TAKE(k, idx)                                                                                                   \
    for (size_t i_ = (idx); i_ < ch[k].n && rc == 0; i_++) {                                                          \
        if (prev != ch[k].ms[i_]) rc = tk_spans_push(out, prev, ch[k].ms[i_], 0);                                      \
        if (rc == 0) rc = tk_spans_push(out, ch[k].ms[i_], ch[k].me[i_], 1);                                           \
        prev = ch[k].me[i_];                                                                                           \
        st.last_end = st.last_match_end = prev;                                                                       \
    }                                                                                                                  \
    done = ch[k].ran_out
    TAKE(0, 0);
    for (size_t k = 1; k < n_chunks && !done && rc == 0; k++) {
        for (;;) {
            long idx = sync_index(&ch[k], prev);
            if (idx >= 0) {
                TAKE(k, (size_t)idx);
                break;
            }
            size_t covered = ch[k].n ? ch[k].me[ch[k].n - 1] : ch[k].start;
            if (!ch[k].ran_out && prev >= covered) break; /* chunk k cannot help: try the next one */
            int r = tk_regex_next(re, &ctxs[0].m, s, n, &st, &ms, &me);
            if (r < 0) rc = -1;
            if (r <= 0) {
                done = 1;
                break;
            }
            if (prev != ms) rc = tk_spans_push(out, prev, ms, 0);
            if (rc == 0) rc = tk_spans_push(out, ms, me, 1);
            prev = me;
        }
    }
#undef TAKE
    while (!done && rc == 0) { /* the last chunks were overtaken: finish on this thread */
        int r = tk_regex_next(re, &ctxs[0].m, s, n, &st, &ms, &me);
        if (r <= 0) {
            rc = r < 0 ? -1 : 0;
            break;
        }
        if (prev != ms) rc = tk_spans_push(out, prev, ms, 0);
        if (rc == 0) rc = tk_spans_push(out, ms, me, 1);
        prev = me;
    }
    if (rc == 0 && prev != n) rc = tk_spans_push(out, prev, n, 0);
    if (rc == 0 && n == 0) rc = tk_spans_push(out, 0, 0, 0);
    for (size_t k = 0; k < n_chunks; k++) {
        free(ch[k].ms);
        free(ch[k].me);
    }
    free(ch);
    return rc;
}

/* Work for the threads: pieces in order; `staged` pieces have been through the regex stage. */
typedef struct {
    tk_pieces pieces;
    int *staged;
    size_t cap_staged;
} work;

/* Marks pieces [from, w->pieces.n) as staged or not. */
static int work_mark(work *w, size_t from, int staged) {
    if (w->pieces.n > w->cap_staged) {
        size_t cap = w->cap_staged ? w->cap_staged : 1024;
        while (cap < w->pieces.n) cap *= 2;
        int *v = realloc(w->staged, cap * sizeof *v);
        if (!v) return -1;
        w->staged = v;
        w->cap_staged = cap;
    }
    for (size_t k = from; k < w->pieces.n; k++) w->staged[k] = staged;
    return 0;
}

static int work_add(work *w, const char *s, size_t n, int32_t id, int origin) {
    size_t from = w->pieces.n;
    if (tk_pieces_add(&w->pieces, s, n, id, origin) != 0) return -1;
    return work_mark(w, from, 0);
}

/* One thread's share: pieces [a, b) through the rest of the pre-tokenizer and the model. */
static int encode_range(const dt_tok *tok, const tk_pre *rest, int n_rest, const work *w, size_t a, size_t b,
                        tk_ctx *c) {
    c->n_ids = 0;
    for (size_t i = a; i < b;) {
        /* a run of pieces of the same kind goes through the pipeline together */
        size_t j = i;
        while (j < b && w->staged[j] == w->staged[i]) j++;
        tk_pieces_clear(&c->a);
        for (size_t k = i; k < j; k++)
            if (tk_pieces_add(&c->a, tk_piece_str(&w->pieces, k), w->pieces.v[k].len, w->pieces.v[k].id,
                              w->pieces.v[k].origin) != 0)
                return -1;
        int rc = w->staged[i] ? tk_pre_apply_items(rest, n_rest, c) : tok->pre ? tk_pre_apply(tok->pre, c) : 0;
        if (rc == 0) rc = tk_encode_model(tok, c);
        if (rc != 0) return rc;
        i = j;
    }
    return 0;
}

int dt_tok_encode_parallel(const dt_tok *tok, const char *text, size_t len, int add_special, int n_threads,
                           int32_t **ids, size_t *n_ids, dt_error *err) {
    if (n_threads <= 1 || len < PARALLEL_MIN) return dt_tok_encode(tok, text, len, add_special, ids, n_ids, err);
    *ids = NULL;
    *n_ids = 0;
    size_t bad = tk_utf8_check(text, len);
    if (bad != len) return dt_fail(err, "text: invalid UTF-8 at byte %zu", bad);
    tk_ctx *ctxs = calloc((size_t)n_threads, sizeof *ctxs);
    if (!ctxs) return dt_fail(err, "%s: out of memory", tok->path);
    int rc = 0, n_init = 0;
    for (; n_init < n_threads && rc == 0; n_init++)
        if (tk_ctx_init(&ctxs[n_init]) != 0) rc = -1;
    const tk_pre *rest = NULL;
    int n_rest = 0;
    const tk_pre *stage = tk_pre_regex_stage(tok->pre, &rest, &n_rest);
    work w = {0};
    tk_buf subject = {0};
    tk_spans spans = {0};
    tk_ctx *c0 = &ctxs[0];
    if (rc == 0) rc = tk_encode_front(tok, c0, text, len);
    /* the front's pieces, with the large ones cut by the regex stage in parallel */
    tk_pieces front = c0->a;
    memset(&c0->a, 0, sizeof c0->a);
    for (size_t i = 0; i < front.n && rc == 0; i++) {
        const tk_piece *p = &front.v[i];
        const char *s = tk_piece_str(&front, i);
        if (p->id >= 0 || !stage || p->len < 2 * CHUNK_BYTES) {
            rc = work_add(&w, s, p->len, p->id, p->origin);
            continue;
        }
        /* the regex stage's pieces go straight into the work list (one copy of the text, not two:
         * this part runs on one thread) */
        size_t from = w.pieces.n;
        rc = tk_pre_stage_subject(stage, s, p->len, &subject);
        if (rc == 0) rc = parallel_spans(&stage->re, subject.p, subject.n, n_threads, ctxs, &spans);
        if (rc == 0) rc = tk_pre_stage_emit(stage, &spans, subject.p, p->origin, &w.pieces);
        if (rc == 0) rc = work_mark(&w, from, 1);
    }
    tk_pieces_free(&front);
    tk_buf_free(&subject);
    free(spans.v);
    /* share the pieces out by bytes, in order */
    size_t *cut = calloc((size_t)n_threads + 1, sizeof *cut);
    if (!cut && rc == 0) rc = -1;
    if (rc == 0) {
        size_t total = w.pieces.text.n, acc = 0, t = 1;
        for (size_t i = 0; i < w.pieces.n && t < (size_t)n_threads; i++) {
            acc += w.pieces.v[i].len;
            while (t < (size_t)n_threads && acc >= total * t / (size_t)n_threads) cut[t++] = i + 1;
        }
        for (; t <= (size_t)n_threads; t++) cut[t] = w.pieces.n;
        int failed = 0;
#pragma omp parallel for num_threads(n_threads) schedule(static, 1) reduction(min : failed)
        for (int t2 = 0; t2 < n_threads; t2++) {
            int r = encode_range(tok, rest, n_rest, &w, cut[t2], cut[t2 + 1], &ctxs[t2]);
            if (r < failed) failed = r;
        }
        rc = failed;
    }
    if (rc == 0) {
        size_t total = 0;
        for (int t = 0; t < n_threads; t++) total += ctxs[t].n_ids;
        total += (size_t)(tok->post.n_prefix + tok->post.n_suffix);
        *ids = malloc((total ? total : 1) * sizeof **ids);
        if (!*ids) rc = -1;
        else {
            size_t k = 0;
            if (add_special && tok->post.n_prefix) {
                memcpy(*ids, tok->post.prefix, (size_t)tok->post.n_prefix * sizeof **ids);
                k += (size_t)tok->post.n_prefix;
            }
            for (int t = 0; t < n_threads; t++) {
                if (ctxs[t].n_ids) memcpy(*ids + k, ctxs[t].ids, ctxs[t].n_ids * sizeof **ids);
                k += ctxs[t].n_ids;
            }
            if (add_special && tok->post.n_suffix) {
                memcpy(*ids + k, tok->post.suffix, (size_t)tok->post.n_suffix * sizeof **ids);
                k += (size_t)tok->post.n_suffix;
            }
            *n_ids = k;
        }
    }
    free(cut);
    tk_pieces_free(&w.pieces);
    free(w.staged);
    for (int t = 0; t < n_init; t++) tk_ctx_free(&ctxs[t]);
    free(ctxs);
    return rc == 0 ? 0 : tk_encode_error(tok, rc, err);
}
