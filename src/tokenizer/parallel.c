/* parallel.c — encoding a large text on several threads with exactly the ids of one thread.
 *
 * The text is checked, cut around added tokens and normalised (every part of it that is a pure
 * function of a position runs on the threads: the UTF-8 check, the search for added tokens; what
 * stays on one thread — the automaton's walk over the found tokens, a normaliser that cannot be
 * cut — touches only a few bytes or is absent from byte-level tokenizers). The resulting segments
 * are independent. A large segment whose pre-tokenizer starts with a regex scan (Split,
 * ByteLevel's regex) is cut: chunk k scans from its cut point q_k over the whole segment (so
 * look-ahead sees past the cut) until a match ends at or after q_{k+1}. The match iteration's
 * state after a match is just the match's end, so once the scan that came from the left accepts a
 * match ending where chunk k's scan also had a match end, everything after is identical: the
 * chunks are spliced there, and where no such point exists the left scan simply goes on (on one
 * thread) until it finds one. The result is the sequential scan's list of matches, whatever the
 * cut points: a list of runs (chunk k's matches from the splice point on, or the ones the left
 * scan found), each of which becomes a unit of work.
 *
 * A unit turns its stretch of the match list into pieces, takes them through the rest of the
 * pre-tokenizer and the model, into its own ids. The stage's behaviour may merge a span with its
 * neighbour (MergedWithPrevious, MergedWithNext, Contiguous), so a unit starts and ends where the
 * sequential pieces are cut anyway (tk_pre_stage_cut_ok): at the first such place at or after
 * the end of the previous run's last match. Pieces are independent of each other from there on,
 * so the units' ids, concatenated in order, are the sequential ids. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tokenizer/tok.h"

void tk_par_defaults(tk_par *p) {
    p->chunk_bytes = (size_t)1 << 18;  /* a segment is cut into chunks of about this size */
    p->parallel_min = (size_t)1 << 16; /* below this, one thread */
}

/* q[0..n_chunks]: cut points of s[0..n) about chunk_bytes apart, moved forward to the start of a
 * character (for valid UTF-8); q[0] = 0, q[n_chunks] = n, non-decreasing. */
static size_t *cut_points(const char *s, size_t n, size_t chunk_bytes, size_t *n_chunks) {
    size_t nc = n / chunk_bytes + 1;
    size_t *q = malloc((nc + 1) * sizeof *q);
    if (!q) return NULL;
    for (size_t k = 0; k < nc; k++) {
        size_t p = n * k / nc;
        while (p < n && ((unsigned char)s[p] & 0xC0) == 0x80) p++;
        q[k] = p;
    }
    q[nc] = n;
    *n_chunks = nc;
    return q;
}

/* tk_utf8_check on the threads: valid pieces concatenate to valid text; when a chunk is not
 * valid, the sequential check finds the first bad byte. */
static size_t utf8_check(const char *s, size_t n, const size_t *q, size_t n_chunks, int n_threads) {
    int bad = 0;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1) reduction(| : bad)
    for (long k = 0; k < (long)n_chunks; k++)
        if (tk_utf8_check(s + q[k], q[k + 1] - q[k]) != q[k + 1] - q[k]) bad = 1;
    return bad ? tk_utf8_check(s, n) : n;
}

/* ---------------------------------------------------------------- segments */

/* A part of the text after added tokens and normalisation: a view into the input or into a
 * normalised copy, or an added token (id >= 0). */
typedef struct {
    const char *s;
    size_t len;
    int32_t id;
    int origin;
} segment;

typedef struct {
    segment *v;
    size_t n, cap;
} segments;

static int segment_push(void *sink, const char *s, size_t n, int32_t id, int origin) {
    segments *g = sink;
    if (grow_array(&g->v, &g->cap, g->n + 1, sizeof *g->v, 64) != 0) return -1;
    g->v[g->n++] = (segment){s, n, id, origin};
    return 0;
}

/* The shared state of one encoding. */
typedef struct {
    const dt_tok *tok;
    int n_threads;
    tk_par par;
    tk_ctx *ctxs;         /* [n_threads] */
    char **owned;         /* normalised copies the segments point into */
    size_t n_owned, cap_owned;
} job;

static int own(job *jb, char *p) {
    if (grow_array(&jb->owned, &jb->cap_owned, jb->n_owned + 1, sizeof *jb->owned, 64) != 0) return -1;
    jb->owned[jb->n_owned++] = p;
    return 0;
}

/* Cuts the text segments of `in` around the added tokens of `set` into out. The search runs on
 * the threads over chunks of a large segment. */
static int split_added(job *jb, const tk_added_set *set, const segments *in, segments *out) {
    const dt_tok *tok = jb->tok;
    tk_added_hits *hits = &jb->ctxs[0].hits;
    int rc = 0;
    out->n = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        const segment *g = &in->v[i];
        if (g->id >= 0) {
            rc = segment_push(out, g->s, g->len, g->id, g->origin);
            continue;
        }
        hits->n = 0;
        size_t n_chunks = 1, *q = NULL;
        if (g->len >= jb->par.parallel_min && !(q = cut_points(g->s, g->len, jb->par.chunk_bytes, &n_chunks))) rc = -1;
        if (rc == 0 && n_chunks > 1) {
            tk_added_hits *part = calloc(n_chunks, sizeof *part);
            if (!part) rc = -1;
            int failed = 0;
#pragma omp parallel for num_threads(jb->n_threads) schedule(dynamic, 1) reduction(| : failed)
            for (long k = 0; k < (long)(part ? n_chunks : 0); k++)
                if (tk_added_candidates(tok->added, set, g->s, g->len, q[k], q[k + 1], &part[k]) != 0) failed = 1;
            if (failed) rc = -1;
            for (size_t k = 0; k < (part ? n_chunks : 0); k++) {
                for (size_t j = 0; j < part[k].n && rc == 0; j++)
                    rc = tk_added_hits_push(hits, part[k].v[j].start, part[k].v[j].stop, part[k].v[j].id);
                free(part[k].v);
            }
            free(part);
        } else if (rc == 0)
            rc = tk_added_candidates(tok->added, set, g->s, g->len, 0, g->len, hits);
        free(q);
        if (rc == 0) {
            tk_added_resolve(tok->added, g->s, g->len, hits);
            rc = tk_added_emit(hits, g->s, g->len, g->origin, segment_push, out);
        }
    }
    return rc;
}

/* One part of a text segment for the normaliser: its bytes [a, b), whether it is the segment's
 * first part, and what the normaliser made of it. */
typedef struct {
    size_t seg, a, b;
    int first;
    tk_buf out;
} norm_part;

/* The normaliser over every text segment (segments that become empty are dropped), on the
 * threads: each segment a part, a large one cut into parts where tk_norm_cut_ok says the parts
 * normalise independently (between two ASCII characters). */
static int normalize(job *jb, const segments *in, segments *out) {
    const tk_norm *norm = jb->tok->normalizer;
    int cut_ok = tk_norm_cut_ok(norm);
    norm_part *parts = NULL;
    size_t n_parts = 0, cap = 0;
    int rc = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        const segment *g = &in->v[i];
        if (g->id >= 0) continue;
        size_t nq = 1, *q = NULL;
        if (cut_ok && g->len >= jb->par.parallel_min && !(q = cut_points(g->s, g->len, jb->par.chunk_bytes, &nq)))
            rc = -1;
        size_t from = 0;
        for (size_t j = 1; j <= nq && rc == 0; j++) {
            size_t p = j < nq ? q[j] : g->len, end = j < nq ? q[j + 1] : g->len;
            if (j < nq) { /* a cut between two ASCII characters in [q_j, q_{j+1}), or none */
                if (p <= from) p = from + 1;
                while (p < end && !((unsigned char)g->s[p - 1] < 0x80 && (unsigned char)g->s[p] < 0x80)) p++;
                if (p >= end) continue;
            }
            if (grow_array(&parts, &cap, n_parts + 1, sizeof *parts, 64) != 0) {
                rc = -1;
                break;
            }
            parts[n_parts++] = (norm_part){i, from, p, from == 0, {0}};
            from = p;
        }
        free(q);
    }
    int failed = rc != 0;
#pragma omp parallel for num_threads(jb->n_threads) schedule(dynamic, 1) reduction(| : failed)
    for (long k = 0; k < (long)(rc == 0 ? n_parts : 0); k++) {
        norm_part *p = &parts[k];
        if (tk_norm_apply_part(norm, &jb->ctxs[omp_get_thread_num()], in->v[p->seg].s + p->a, p->b - p->a, p->first,
                               &p->out) != 0)
            failed = 1;
    }
    rc = failed ? -1 : 0;
    /* in order: added tokens as they are, each text segment's parts joined */
    out->n = 0;
    size_t k = 0;
    for (size_t i = 0; i < in->n && rc == 0; i++) {
        const segment *g = &in->v[i];
        if (g->id >= 0) {
            rc = segment_push(out, g->s, g->len, g->id, g->origin);
            continue;
        }
        size_t k_end = k, total = 0;
        for (; k_end < n_parts && parts[k_end].seg == i; k_end++) total += parts[k_end].out.n;
        char *text = NULL;
        if (total > 0 && k_end - k == 1) { /* the normaliser's buffer becomes the segment's text */
            text = parts[k].out.p;
            parts[k].out.p = NULL;
        } else if (total > 0 && (text = malloc(total))) {
            size_t at = 0;
            for (size_t j = k; j < k_end; j++) {
                memcpy(text + at, parts[j].out.p, parts[j].out.n);
                at += parts[j].out.n;
            }
        }
        k = k_end;
        if (total == 0) continue;
        if (!text || own(jb, text) != 0) {
            free(text);
            rc = -1;
        } else
            rc = segment_push(out, text, total, -1, g->origin);
    }
    for (size_t j = 0; j < n_parts; j++) tk_buf_free(&parts[j].out);
    free(parts);
    return rc;
}

/* ---------------------------------------------------------------- the regex stage on chunks */

typedef struct {
    size_t start;                /* q_k */
    size_t *ms, *me;             /* accepted matches */
    size_t n, cap;
    int ran_out;                 /* the scan reached the end of the subject */
    int failed;
} chunk;

static int chunk_push(chunk *c, size_t ms, size_t me) {
    if (c->n == c->cap) { /* two arrays of one capacity: each keeps what it got */
        size_t ca = c->cap, cb = c->cap;
        const int bad_s = grow_array(&c->ms, &ca, c->n + 1, sizeof *c->ms, 256);
        const int bad_e = grow_array(&c->me, &cb, c->n + 1, sizeof *c->me, 256);
        if (bad_s || bad_e) return -1;
        c->cap = ca;
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

/* Consecutive matches of the sequential scan: from chunk `src` (>= 0) or from the left scan's
 * own list (src = -1), starting at index `first` there. */
typedef struct {
    long src;
    size_t first, n;
    const size_t *ms, *me;
} run;

/* A segment through the regex stage: its subject, the sequential list of matches as runs, and
 * where the units start in it. A span id names the spans of the list: 2j is the gap before match
 * j (absent when the match starts where the previous one ended), 2j + 1 is match j, 2M the gap
 * after the last of the M matches (absent when that match ends the subject), 2M + 1 the end. */
typedef struct {
    const char *s;
    size_t n;
    int origin;
    tk_buf copy;                 /* the subject when the stage prepends a space */
    chunk *ch;
    size_t n_chunks;
    chunk own;                   /* matches of the left scan */
    run *runs;
    size_t n_runs, cap_runs;
    size_t *off;                 /* [n_runs + 1] index of each run's first match; off[n_runs] = M */
    size_t *cut;                 /* [n_runs + 1] span id where unit r starts; cut[n_runs] = 2M + 1 */
} staged;

static void staged_free(staged *g) {
    tk_buf_free(&g->copy);
    for (size_t k = 0; k < g->n_chunks; k++) {
        free(g->ch[k].ms);
        free(g->ch[k].me);
    }
    free(g->ch);
    free(g->own.ms);
    free(g->own.me);
    free(g->runs);
    free(g->off);
    free(g->cut);
}

static int add_run(staged *g, long src, size_t first, size_t n) {
    if (n == 0) return 0;
    run *last = g->n_runs ? &g->runs[g->n_runs - 1] : NULL;
    if (last && src < 0 && last->src < 0 && last->first + last->n == first) {
        last->n += n;
        return 0;
    }
    if (grow_array(&g->runs, &g->cap_runs, g->n_runs + 1, sizeof *g->runs, 64) != 0) return -1;
    g->runs[g->n_runs++] = (run){src, first, n, NULL, NULL};
    return 0;
}

/* A match found by the left scan. */
static int add_own(staged *g, size_t ms, size_t me) {
    if (chunk_push(&g->own, ms, me) != 0) return -1;
    return add_run(g, -1, g->own.n - 1, 1);
}

/* Chunk k's matches from idx on join the list; the left scan's state moves to their end. */
static int take(staged *g, size_t k, size_t idx, size_t *prev, tk_scan *st) {
    const chunk *c = &g->ch[k];
    if (idx >= c->n) return 0;
    *prev = c->me[c->n - 1];
    st->last_end = st->last_match_end = *prev;
    return add_run(g, (long)k, idx, c->n - idx);
}

/* Phase 2: the splice, scanning on where a chunk does not continue the scan from the left. Only
 * the places where the runs meet are computed here; the matches stay in the chunks. */
static int splice(const tk_regex *re, tk_matcher *m, staged *g) {
    const char *s = g->s;
    size_t n = g->n, prev = 0, ms, me;
    tk_scan st = {0, (size_t)-1};
    int rc = take(g, 0, 0, &prev, &st), done = g->ch[0].ran_out;
    for (size_t k = 1; k < g->n_chunks && !done && rc == 0; k++) {
        const chunk *c = &g->ch[k];
        for (;;) {
            long idx = sync_index(c, prev);
            if (idx >= 0) {
                rc = take(g, k, (size_t)idx, &prev, &st);
                done = c->ran_out;
                break;
            }
            size_t covered = c->n ? c->me[c->n - 1] : c->start;
            if (!c->ran_out && prev >= covered) break; /* chunk k cannot help: try the next one */
            int r = tk_regex_next(re, m, s, n, &st, &ms, &me);
            if (r < 0) rc = -1;
            if (r <= 0) {
                done = 1;
                break;
            }
            if ((rc = add_own(g, ms, me)) != 0) break;
            prev = me;
        }
    }
    while (!done && rc == 0) { /* the last chunks were overtaken: finish on this thread */
        int r = tk_regex_next(re, m, s, n, &st, &ms, &me);
        if (r <= 0) {
            rc = r < 0 ? -1 : 0;
            break;
        }
        rc = add_own(g, ms, me);
        prev = me;
    }
    return rc;
}

/* Match j of the list is runs[r].ms/me[i]. */
static void locate(const staged *g, size_t j, size_t *r, size_t *i) {
    size_t lo = 0, hi = g->n_runs; /* the last run whose off <= j */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (g->off[mid] <= j) lo = mid;
        else hi = mid;
    }
    *r = lo;
    *i = j - g->off[lo];
}

/* Walks the spans of the list by id: span h exists (1, its kind in *is_match, its bytes in
 * [*a, *b)) or is absent (0). The walker keeps its place in the runs: calls go in order of h. */
typedef struct {
    const staged *g;
    size_t r, i;                 /* the run and index of match h / 2 */
    size_t prev;                 /* end of match h / 2 - 1 */
} walker;

static void walker_at(walker *w, const staged *g, size_t h) {
    w->g = g;
    size_t j = h / 2, M = g->off[g->n_runs];
    w->prev = 0;
    if (j > 0) {
        size_t r, i;
        locate(g, j - 1, &r, &i);
        w->prev = g->runs[r].me[i];
    }
    if (j < M) locate(g, j, &w->r, &w->i);
    else w->r = g->n_runs, w->i = 0;
}

static int walker_span(walker *w, size_t h, size_t *a, size_t *b, int *is_match) {
    const staged *g = w->g;
    if (h / 2 == g->off[g->n_runs]) { /* the gap after the last match, or the end */
        *a = w->prev;
        *b = g->n;
        *is_match = 0;
        return h % 2 == 0 && w->prev != g->n;
    }
    size_t ms = g->runs[w->r].ms[w->i], me = g->runs[w->r].me[w->i];
    if (h % 2 == 0) {
        *a = w->prev;
        *b = ms;
        *is_match = 0;
        return ms != w->prev;
    }
    *a = ms;
    *b = me;
    *is_match = 1;
    w->prev = me;
    if (++w->i == g->runs[w->r].n) {
        w->r++;
        w->i = 0;
    }
    return 1;
}

/* cut[r]: the first place at or after the start of run r where the stage's pieces are cut. The
 * span before the start of run r > 0 is the previous run's last match. */
static void find_cuts(const tk_pre *stage, staged *g) {
    size_t R = g->n_runs ? g->n_runs : 1, end = 2 * g->off[g->n_runs] + 1;
    g->cut[0] = 0;
    g->cut[R] = end;
    for (size_t r = R - 1; r >= 1; r--) {
        size_t h = 2 * g->off[r], stop = r + 1 < R ? 2 * g->off[r + 1] : end;
        walker w;
        walker_at(&w, g, h);
        int left = 1;
        g->cut[r] = g->cut[r + 1]; /* when none is found in run r */
        for (; h < stop; h++) {
            size_t a, b;
            int m;
            if (!walker_span(&w, h, &a, &b, &m)) continue;
            if (tk_pre_stage_cut_ok(stage, left, m)) {
                g->cut[r] = h;
                break;
            }
            left = m;
        }
    }
}

/* The subject of segment seg through phase 1 (threads), phase 2 (this thread) and the cuts. */
static int stage_segment(job *jb, const tk_pre *stage, const segment *seg, staged *g) {
    memset(g, 0, sizeof *g);
    g->origin = seg->origin;
    g->s = tk_pre_stage_subject(stage, seg->s, seg->len, &g->copy, &g->n);
    if (!g->s) return -1;
    size_t *q = cut_points(g->s, g->n, jb->par.chunk_bytes, &g->n_chunks);
    if (!q) return -1;
    g->ch = calloc(g->n_chunks, sizeof *g->ch);
    if (!g->ch) {
        free(q);
        g->n_chunks = 0;
        return -1;
    }
    int failed = 0;
#pragma omp parallel for num_threads(jb->n_threads) schedule(dynamic, 1) reduction(| : failed)
    for (long k = 0; k < (long)g->n_chunks; k++) {
        chunk *c = &g->ch[k];
        c->start = q[k];
        scan_chunk(&stage->re, &jb->ctxs[omp_get_thread_num()].m, g->s, g->n, c,
                   k + 1 < (long)g->n_chunks ? q[k + 1] : g->n + 1);
        failed |= c->failed;
    }
    free(q);
    if (failed || splice(&stage->re, &jb->ctxs[0].m, g) != 0) return -1;
    g->off = malloc((g->n_runs + 2) * sizeof *g->off);
    g->cut = malloc((g->n_runs + 2) * sizeof *g->cut);
    if (!g->off || !g->cut) return -1;
    size_t total = 0;
    for (size_t r = 0; r < g->n_runs; r++) {
        run *u = &g->runs[r];
        const chunk *c = u->src >= 0 ? &g->ch[u->src] : &g->own;
        u->ms = c->ms + u->first;
        u->me = c->me + u->first;
        g->off[r] = total;
        total += u->n;
    }
    g->off[g->n_runs] = total;
    find_cuts(stage, g);
    return 0;
}

/* ---------------------------------------------------------------- units of work */

/* Segments [a, b) through the whole pre-tokenizer, or spans [h0, h1) of a staged segment. */
typedef struct {
    size_t a, b;
    const staged *g;
    size_t h0, h1;
    int32_t *ids;
    size_t n_ids;
} unit;

typedef struct {
    unit *v;
    size_t n, cap;
} units;

static int unit_push(units *u, unit x) {
    if (grow_array(&u->v, &u->cap, u->n + 1, sizeof *u->v, 64) != 0) return -1;
    u->v[u->n++] = x;
    return 0;
}

static int run_unit(const dt_tok *tok, const tk_pre *stage, const tk_pre *rest, int n_rest, const segments *sg,
                    unit *u, tk_ctx *c) {
    c->n_ids = 0;
    tk_pieces_clear(&c->a);
    int rc = 0;
    if (u->g) {
        c->spans.n = 0;
        walker w;
        walker_at(&w, u->g, u->h0);
        for (size_t h = u->h0; h < u->h1 && rc == 0; h++) {
            size_t a, b;
            int m;
            if (walker_span(&w, h, &a, &b, &m)) rc = tk_spans_push(&c->spans, a, b, m);
        }
        if (rc == 0) rc = tk_pre_stage_emit(stage, &c->spans, u->g->s, u->g->origin, &c->a);
        if (rc == 0) rc = tk_pre_apply_items(rest, n_rest, c);
    } else {
        for (size_t i = u->a; i < u->b && rc == 0; i++)
            rc = tk_pieces_add(&c->a, sg->v[i].s, sg->v[i].len, sg->v[i].id, sg->v[i].origin);
        if (rc == 0 && tok->pre) rc = tk_pre_apply(tok->pre, c);
    }
    if (rc == 0) rc = tk_encode_model(tok, c);
    if (rc != 0) return rc;
    u->ids = malloc((c->n_ids ? c->n_ids : 1) * sizeof *u->ids);
    if (!u->ids) return -1;
    if (c->n_ids) memcpy(u->ids, c->ids, c->n_ids * sizeof *u->ids);
    u->n_ids = c->n_ids;
    return 0;
}

/* The segments as units in order: large ones with a regex stage cut into runs (their staged
 * state in stg), the others grouped to about chunk_bytes. */
static int make_units(job *jb, const tk_pre *stage, const segments *sg, staged **stg, size_t *n_stg, units *out) {
    size_t n_big = 0;
    for (size_t i = 0; i < sg->n; i++)
        n_big += stage && sg->v[i].id < 0 && sg->v[i].len >= 2 * jb->par.chunk_bytes;
    *stg = calloc(n_big ? n_big : 1, sizeof **stg);
    if (!*stg) return -1;
    size_t group_bytes = 0;
    for (size_t i = 0; i < sg->n; i++) {
        const segment *seg = &sg->v[i];
        if (!(stage && seg->id < 0 && seg->len >= 2 * jb->par.chunk_bytes)) {
            unit *last = out->n ? &out->v[out->n - 1] : NULL;
            if (last && !last->g && last->b == i && group_bytes < jb->par.chunk_bytes) last->b = i + 1;
            else {
                if (unit_push(out, (unit){i, i + 1, NULL, 0, 0, NULL, 0}) != 0) return -1;
                group_bytes = 0;
            }
            group_bytes += seg->len;
            continue;
        }
        staged *g = &(*stg)[(*n_stg)++];
        if (stage_segment(jb, stage, seg, g) != 0) return -1;
        size_t R = g->n_runs ? g->n_runs : 1;
        for (size_t r = 0; r < R; r++)
            if (g->cut[r] < g->cut[r + 1] && unit_push(out, (unit){0, 0, g, g->cut[r], g->cut[r + 1], NULL, 0}) != 0)
                return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- the encoder */

static int encode(job *jb, const char *text, size_t len, int add_special, int32_t **ids, size_t *n_ids) {
    const dt_tok *tok = jb->tok;
    const tk_pre *rest = NULL;
    int n_rest = 0;
    const tk_pre *stage = tk_pre_regex_stage(tok->pre, &rest, &n_rest);
    segments sa = {0}, sb = {0};
    staged *stg = NULL;
    size_t n_stg = 0;
    units un = {0};
    int rc = 0;
    /* the front: added tokens (raw), the normaliser, added tokens (normalised) */
    if (len) rc = segment_push(&sa, text, len, -1, 1);
    if (rc == 0 && tok->raw_set.first[256]) {
        rc = split_added(jb, &tok->raw_set, &sa, &sb);
        segments t = sa;
        sa = sb;
        sb = t;
    }
    if (rc == 0 && tok->normalizer) {
        rc = normalize(jb, &sa, &sb);
        segments t = sa;
        sa = sb;
        sb = t;
    }
    if (rc == 0 && tok->norm_set.first[256]) {
        rc = split_added(jb, &tok->norm_set, &sa, &sb);
        segments t = sa;
        sa = sb;
        sb = t;
    }
    if (rc == 0) rc = make_units(jb, stage, &sa, &stg, &n_stg, &un);
    if (rc == 0) {
        int failed = 0;
#pragma omp parallel for num_threads(jb->n_threads) schedule(dynamic, 1) reduction(min : failed)
        for (long k = 0; k < (long)un.n; k++) {
            int r = run_unit(tok, stage, rest, n_rest, &sa, &un.v[k], &jb->ctxs[omp_get_thread_num()]);
            if (r < failed) failed = r;
        }
        rc = failed;
    }
    size_t n_pre = add_special ? (size_t)tok->post.n_prefix : 0, n_post = add_special ? (size_t)tok->post.n_suffix : 0;
    size_t *at = rc == 0 ? malloc((un.n + 1) * sizeof *at) : NULL;
    if (rc == 0 && !at) rc = -1;
    if (rc == 0) {
        size_t total = n_pre;
        for (size_t k = 0; k < un.n; k++) {
            at[k] = total;
            total += un.v[k].n_ids;
        }
        at[un.n] = total;
        *ids = malloc((total + n_post ? total + n_post : 1) * sizeof **ids);
        if (!*ids) rc = -1;
        else {
            if (n_pre) memcpy(*ids, tok->post.prefix, n_pre * sizeof **ids);
#pragma omp parallel for num_threads(jb->n_threads) schedule(dynamic, 4)
            for (long k = 0; k < (long)un.n; k++)
                if (un.v[k].n_ids) memcpy(*ids + at[k], un.v[k].ids, un.v[k].n_ids * sizeof **ids);
            if (n_post) memcpy(*ids + total, tok->post.suffix, n_post * sizeof **ids);
            *n_ids = total + n_post;
        }
    }
    free(at);
    for (size_t k = 0; k < un.n; k++) free(un.v[k].ids);
    free(un.v);
    for (size_t k = 0; k < n_stg; k++) staged_free(&stg[k]);
    free(stg);
    free(sa.v);
    free(sb.v);
    return rc;
}

int tk_encode_parallel(const dt_tok *tok, const char *text, size_t len, int add_special, int n_threads,
                       const tk_par *par, int32_t **ids, size_t *n_ids, dt_error *err) {
    /* one thread goes through the units too: each unit's buffers are reused, where the sequential
     * pipeline holds the whole text's pieces at once (522 MB against 182 MB peak for 20 MB) */
    if (len < par->parallel_min) return dt_tok_encode(tok, text, len, add_special, ids, n_ids, err);
    if (n_threads < 1) n_threads = 1;
    *ids = NULL;
    *n_ids = 0;
    job jb = {tok, n_threads, *par, NULL, NULL, 0, 0};
    if (jb.par.chunk_bytes < 1) jb.par.chunk_bytes = 1;
    size_t n_chunks, *q = cut_points(text, len, jb.par.chunk_bytes, &n_chunks);
    if (!q) return dt_fail_oom(err, "%s: out of memory", tok->path);
    size_t bad = utf8_check(text, len, q, n_chunks, n_threads);
    free(q);
    if (bad != len) return dt_fail(err, "text: invalid UTF-8 at byte %zu", bad);
    jb.ctxs = calloc((size_t)n_threads, sizeof *jb.ctxs);
    if (!jb.ctxs) return dt_fail_oom(err, "%s: out of memory", tok->path);
    int rc = 0, n_init = 0;
    for (; n_init < n_threads && rc == 0; n_init++)
        if (tk_ctx_init(&jb.ctxs[n_init]) != 0) rc = -1;
    if (rc == 0) rc = encode(&jb, text, len, add_special, ids, n_ids);
    if (rc != 0) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
    }
    for (size_t k = 0; k < jb.n_owned; k++) free(jb.owned[k]);
    free(jb.owned);
    tk_matcher limited = {0}; /* the first thread's regex that ran into a resource limit, if one did */
    for (int t = 0; t < n_init; t++)
        if (jb.ctxs[t].m.limit && !limited.limit) limited = jb.ctxs[t].m;
    if (rc != 0) rc = tk_encode_error(tok, rc, &limited, err);
    for (int t = 0; t < n_init; t++) tk_ctx_free(&jb.ctxs[t]);
    free(jb.ctxs);
    return rc == 0 ? 0 : -1;
}

int dt_tok_encode_parallel(const dt_tok *tok, const char *text, size_t len, int add_special, int n_threads,
                           int32_t **ids, size_t *n_ids, dt_error *err) {
    tk_par par;
    tk_par_defaults(&par);
    return tk_encode_parallel(tok, text, len, add_special, n_threads, &par, ids, n_ids, err);
}

/* ---------------------------------------------------------------- cutting a stream of text */

/* A normaliser that maps each character on its own, or composes characters that neither a
 * newline nor a space takes part in: the parts of a text cut there normalise to the whole's
 * parts. Prepend, Strip and Replace see the ends of each part. */
static int norm_stream_ok(const tk_norm *n) {
    switch (n->kind) {
    case TK_NORM_NFC: case TK_NORM_NFD: case TK_NORM_NFKC: case TK_NORM_NFKD: case TK_NORM_LOWERCASE:
        return 1;
    case TK_NORM_SEQUENCE:
        for (int i = 0; i < n->n_items; i++)
            if (!norm_stream_ok(&n->items[i])) return 0;
        return 1;
    default:
        return 0;
    }
}

/* The stages after the regex scan work on its pieces one by one; these add to a text's first
 * piece (or to every text), which each part of a cut text would get again. */
static int pre_stream_ok(const tk_pre *p) {
    if (p->kind == TK_PRE_BYTELEVEL) return !p->add_prefix_space;
    if (p->kind == TK_PRE_METASPACE) return p->prepend_scheme == TK_PREPEND_NEVER;
    if (p->kind == TK_PRE_SEQUENCE)
        for (int i = 0; i < p->n_items; i++)
            if (!pre_stream_ok(&p->items[i])) return 0;
    return 1;
}

static int added_stream_ok(const tk_added *a) {
    return !a->lstrip && !a->rstrip && !memchr(a->content, '\n', a->len) && !memchr(a->content, ' ', a->len) &&
           !memchr(a->match, '\n', a->match_len) && !memchr(a->match, ' ', a->match_len);
}

static const tk_pre *stream_stage(const dt_tok *tok) {
    const tk_pre *rest;
    int n_rest;
    const tk_pre *stage = tk_pre_regex_stage(tok->pre, &rest, &n_rest);
    if (!stage || !pre_stream_ok(stage) || (tok->normalizer && !norm_stream_ok(tok->normalizer))) return NULL;
    for (int i = 0; i < n_rest; i++)
        if (!pre_stream_ok(&rest[i])) return NULL;
    for (int i = 0; i < tok->n_added; i++)
        if (!added_stream_ok(&tok->added[i])) return NULL;
    return stage;
}

/* The code point that ends at s + at (valid UTF-8 before it). */
static uint32_t cp_before(const char *s, size_t at) {
    size_t i = at - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    int len;
    return tk_utf8_decode(s + i, &len);
}

#define STREAM_WINDOW ((size_t)16 << 10) /* text scanned on each side of a candidate cut */
#define STREAM_TRIES 16                  /* candidates checked per call */

/* Whether cutting s[w..e) at c leaves the regex scan's spans before c as they are and ends a piece
 * there: the scan of s[w..c) alone (where the text's end stands in for what follows, e.g. for
 * `\s+(?!\S)`) against the scan of s[w..e), both normalised first. The scan from w stands in for
 * the scan from the text's start: the regexes of published tokenizers agree with it from their
 * first match after a newline or a space on. -1: out of memory or a regex failure. */
static int stream_cut_checks(const dt_tok *tok, const tk_pre *stage, tk_ctx *ctx, const char *s, size_t w,
                             size_t c, size_t e) {
    tk_buf whole_n = {0}, left_n = {0};
    tk_spans whole = {0}, left = {0};
    const char *a = s + w;
    size_t na = e - w, nb = c - w;
    int ok = 1;
    if (tok->normalizer) {
        ok = tk_norm_apply(tok->normalizer, ctx, s + w, e - w, &whole_n) == 0 &&
             tk_norm_apply(tok->normalizer, ctx, s + w, c - w, &left_n) == 0 ? 1 : -1;
        if (ok == 1) ok = left_n.n <= whole_n.n && memcmp(left_n.p, whole_n.p, left_n.n) == 0;
        a = whole_n.p;
        na = whole_n.n;
        nb = left_n.n;
    }
    if (ok == 1 && (tk_regex_find_matches(&stage->re, &ctx->m, a, na, &whole) != 0 ||
                    tk_regex_find_matches(&stage->re, &ctx->m, a, nb, &left) != 0))
        ok = -1;
    if (ok == 1) {
        size_t k = 0;
        while (k < whole.n && whole.v[k].end < nb) k++;
        ok = k + 1 < whole.n && whole.v[k].end == nb && left.n == k + 1 &&
             tk_pre_stage_cut_ok(stage, whole.v[k].is_match, whole.v[k + 1].is_match);
        for (size_t i = 0; ok && i <= k; i++)
            ok = left.v[i].start == whole.v[i].start && left.v[i].end == whole.v[i].end &&
                 left.v[i].is_match == whole.v[i].is_match;
    }
    tk_buf_free(&whole_n);
    tk_buf_free(&left_n);
    free(whole.v);
    free(left.v);
    return ok;
}

size_t tk_stream_cut(const dt_tok *tok, const char *s, size_t n, size_t from, size_t to) {
    const tk_pre *stage = stream_stage(tok);
    if (!stage || n <= STREAM_WINDOW) return 0;
    if (to > n - STREAM_WINDOW) to = n - STREAM_WINDOW; /* the scan must see what follows the cut */
    if (from < 2) from = 2;
    tk_ctx ctx;
    tk_ctx_init_decoding(&ctx);
    size_t cut = 0;
    for (size_t c = to, tries = 0; c >= from && tries < STREAM_TRIES && !cut; c--) {
        /* after a newline between two characters that are not spaces, or before a space after one
         * (the bytes are checked for UTF-8 below: until then a character read may be garbage) */
        int len, at_newline = s[c - 1] == '\n';
        if (at_newline ? ((unsigned char)s[c] & 0xC0) == 0x80 || tk_is_white_space(cp_before(s, c - 1)) ||
                             tk_is_white_space(tk_utf8_decode(s + c, &len))
                       : s[c] != ' ' || tk_is_white_space(cp_before(s, c)))
            continue;
        tries++;
        size_t w = c > STREAM_WINDOW ? c - STREAM_WINDOW : 0, e = c + STREAM_WINDOW;
        while (w < c && ((unsigned char)s[w] & 0xC0) == 0x80) w++;
        while (e < n && ((unsigned char)s[e] & 0xC0) == 0x80) e++;
        if (tk_utf8_check(s + w, e - w) != e - w) cut = c; /* refused when it is encoded: any cut will do */
        else if (stream_cut_checks(tok, stage, &ctx, s, w, c, e) == 1) cut = c;
    }
    tk_ctx_free(&ctx);
    return cut;
}
