/* needle_generate.c — the multi-needle retrieval task of the paper, byte-level: its parameters, the
 * corpus cleaning, one sample from a seed, and the consistency check of a sample. Writing and
 * reading data sets: needle_io.c; scoring a model: needle_score.c.
 *
 * ---------------------------------------------------------------- the sample format
 *
 * A sample is one string (token id = byte), a context of exactly context_length bytes followed by
 * one question per queried needle:
 *
 *   text = CONTEXT
 *        + for each query r = 0 .. R−1, in order:
 *              "\nQuestion: What is the magic number of " KEY_r "?\nAnswer: " VALUE_r
 *
 * so text_length = context_length + Σ_r (49 + len(KEY_r) + len(VALUE_r)). Earlier questions come
 * with their true answers; the prompt of query r is text[0, prompt_end_offset_r) and its answer is
 * the next value_length bytes. The text itself ends right after the last value; train.txt adds
 * "\n\n" after every sample.
 *
 * CONTEXT = filler text with N needles inserted. A needle is the sentence
 *
 *   "The magic number of " KEY " is " VALUE "."
 *
 * plus one separator byte (see "Placement"), so it takes 26 + len(KEY) + len(VALUE) bytes of the
 * context, at most DT_NEEDLE_UNIT_MAX = 39. The filler is the other F = context_length − Σ needle
 * bytes: consecutive corpus bytes (see "Corpus").
 *
 * Keys: lowercase ASCII words of 4..8 letters (length and letters uniform) from the sample's
 * seeded generator — not corpus words — distinct within a sample. Values: 5-digit decimal numbers
 * 10000..99999 (no leading zero), distinct within a sample. Nothing keeps a test key out of the
 * training set: keys are random and retrieval needs no memorised key.
 *
 * Queries: needles 0 .. R−1 of the generation order are asked, in that order; needle 0 is the
 * needle of interest, the one placed at the requested depth. The others sit at uniformly random
 * depths (and a queried one among them may come before or after it).
 *
 * ---------------------------------------------------------------- placement (the depth rule)
 *
 * Positions are counted in the filler: p ∈ [0, F] means "after p filler bytes". A position is a
 * boundary when p = 0, p = F, the filler byte before it is '\n', or the two bytes before it are
 * one of ".!?" and a space (a sentence start). Needles go at boundaries only:
 *
 *   - every needle but the needle of interest at the boundary nearest to a uniform integer in
 *     [0, F] (the smaller on a tie); needles sharing a boundary keep generation order;
 *   - then the needle of interest at depth d: its sentence offset in the context is, of all the
 *     offsets it can take (any boundary, before, between or after the needles already there),
 *     the one nearest to round(d · (context_length − L)), L its sentence length (the smaller on
 *     a tie). So d = 0 puts the sentence at byte 0 and d = 1 makes it end at the last context
 *     byte (or one separator byte before it, when the filler ends with ' ' or '\n'); in between
 *     it misses the goal by at most half the gap between neighbouring boundaries, or half a
 *     needle when the goal falls inside another needle.
 *
 * The recorded needle_depth is where it landed: offset / (context_length − L).
 *
 * Separator: a needle inserted at a line start (p = 0 or after '\n') is followed by '\n'; at a
 * sentence start by ' '; at the end of a filler that ends with neither ' ' nor '\n' it is preceded
 * by ' ' instead (so it never glues onto a word).
 *
 * ---------------------------------------------------------------- corpus
 *
 * The corpus is read once and cleaned: NUL and '\r' bytes are dropped (CRLF → LF; a NUL could
 * not live in a JSON string), other control bytes except '\t' and '\n', and DEL, become ' ', and
 * every byte that is not part of a well-formed UTF-8 sequence becomes ' '. The filler of a sample
 * starts at a uniform random byte moved forward to the next line start (when the corpus has a
 * newline) and runs on for F bytes, wrapping around to the corpus start if needed (a corpus
 * shorter than F repeats); UTF-8 sequences cut at the edges or the wrap become ' '. The whole text
 * is therefore valid UTF-8 and all offsets are byte offsets of that UTF-8 string. The filler is
 * not searched for needle-like sentences: use a corpus that does not talk about magic numbers.
 * Train and test samples draw filler from the same corpus (the task measures retrieval).
 *
 * ---------------------------------------------------------------- randomness
 *
 * splitmix64 (dt_rng_next) throughout. From --seed S: train_seed, test_seed = the first two
 * outputs of a stream at S. Sample i of a set gets seed_i = output i of its set's stream, and
 * dt_needle_generate_sample(p, context, depth, seed_i, corpus) rebuilds it from that seed alone
 * (draw order: keys, values, filler start, positions of needles 1..N−1; the needle of interest is
 * placed without drawing). Sample i of a set has
 * the cell (contexts[i / n_depths mod n_contexts], depths[i mod n_depths]): round-robin over the
 * cells, so a set of k · cells samples has k per cell. Seeds are written as decimal strings in
 * JSON (a double cannot hold 64 bits).
 *
 */
#include "analysis/needle.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- parameters */

void dt_needle_params_default(dt_needle_params *p) {
    memset(p, 0, sizeof *p);
    p->n_contexts = 2;
    p->contexts[0] = 512;
    p->contexts[1] = 1024;
    p->n_depths = 5;
    for (int i = 0; i < 5; i++) p->depths[i] = 0.25 * i;
    p->needles = 6;
    p->queries = 2;
    p->n_train = 1000;
    p->n_test = 100;
    p->seed = 42;
}

int dt_needle_params_validate(const dt_needle_params *p, dt_error *err) {
    if (p->needles < 1 || p->needles > DT_NEEDLE_MAX_NEEDLES)
        return dt_fail(err, "needles = %d: must be in 1..%d", p->needles, DT_NEEDLE_MAX_NEEDLES);
    if (p->queries < 1 || p->queries > p->needles)
        return dt_fail(err, "queries = %d: must be in 1..needles (%d)", p->queries, p->needles);
    if (p->n_contexts < 1 || p->n_contexts > DT_NEEDLE_MAX_LIST)
        return dt_fail(err, "%d context lengths: must be 1..%d", p->n_contexts, DT_NEEDLE_MAX_LIST);
    if (p->n_depths < 1 || p->n_depths > DT_NEEDLE_MAX_LIST)
        return dt_fail(err, "%d depths: must be 1..%d", p->n_depths, DT_NEEDLE_MAX_LIST);
    const int need = p->needles * DT_NEEDLE_UNIT_MAX;
    for (int i = 0; i < p->n_contexts; i++) {
        if (p->contexts[i] > DT_NEEDLE_MAX_CONTEXT)
            return dt_fail(err, "context length %d: at most %d bytes", p->contexts[i], DT_NEEDLE_MAX_CONTEXT);
        if (p->contexts[i] < need)
            return dt_fail(err, "context length %d is too small to hold %d needle%s of up to %d bytes%s (needs >= %d)",
                           p->contexts[i], p->needles, p->needles == 1 ? "" : "s", DT_NEEDLE_UNIT_MAX,
                           p->needles == 1 ? "" : " each", need);
        for (int j = 0; j < i; j++)
            if (p->contexts[j] == p->contexts[i]) return dt_fail(err, "context length %d is listed twice", p->contexts[i]);
    }
    for (int i = 0; i < p->n_depths; i++) {
        if (!(p->depths[i] >= 0.0 && p->depths[i] <= 1.0))
            return dt_fail(err, "depth %g: must be in [0, 1]", p->depths[i]);
        for (int j = 0; j < i; j++)
            if (p->depths[j] == p->depths[i]) return dt_fail(err, "depth %g is listed twice", p->depths[i]);
    }
    if (p->n_train < 0 || p->n_train > DT_NEEDLE_MAX_SAMPLES)
        return dt_fail(err, "train = %d: must be in 0..%d", p->n_train, DT_NEEDLE_MAX_SAMPLES);
    if (p->n_test < 0 || p->n_test > DT_NEEDLE_MAX_SAMPLES)
        return dt_fail(err, "test = %d: must be in 0..%d", p->n_test, DT_NEEDLE_MAX_SAMPLES);
    if (p->n_train + p->n_test == 0) return dt_fail(err, "train = test = 0: nothing to generate");
    return 0;
}

void dt_needle_stream_seeds(uint64_t seed, uint64_t *train_seed, uint64_t *test_seed) {
    uint64_t s = seed;
    *train_seed = dt_rng_next(&s);
    *test_seed = dt_rng_next(&s);
}

void dt_needle_cell_of(const dt_needle_params *p, long i, int *context_length, double *depth) {
    *depth = p->depths[i % p->n_depths];
    *context_length = p->contexts[(i / p->n_depths) % p->n_contexts];
}

int dt_needle_most_tokens(const dt_needle_params *p, const dt_needle_corpus *corpus, const dt_tok *tok, int context,
                          int *most, dt_error *err) {
    if (dt_needle_params_validate(p, err) != 0) return -1;
    uint64_t stream[2];
    dt_needle_stream_seeds(p->seed, &stream[0], &stream[1]);
    const int test = p->n_test > 0, n = test ? p->n_test : p->n_train;
    uint64_t rng = stream[test];
    *most = 0;
    for (int i = 0; i < n; i++) {
        int unused;
        double depth;
        dt_needle_cell_of(p, i, &unused, &depth);
        dt_needle_sample s;
        const uint64_t seed = dt_rng_next(&rng);
        if (dt_needle_generate_sample(p, context, depth, seed, corpus, &s, err) != 0) return -1;
        size_t count = (size_t)s.text_length;
        int rc = 0;
        if (tok) {
            int32_t *ids = NULL;
            rc = dt_tok_encode(tok, s.text, (size_t)s.text_length, 0, &ids, &count, err);
            free(ids);
        }
        dt_needle_sample_free(&s);
        if (rc != 0) return -1;
        if (count > (size_t)*most) *most = count > INT_MAX ? INT_MAX : (int)count;
    }
    return 0;
}

/* The longest context (bytes) whose samples stay within max_tokens, *most their most tokens; 0 when
 * the shortest that holds the needles does not. Doubling, then halving the gap: every length
 * returned was measured, so the promise holds even where a longer context happened to fit. */
static int longest_fit(const dt_needle_params *p, const dt_needle_corpus *corpus, const dt_tok *tok, int max_tokens,
                       int *best, int *most, dt_error *err) {
    int lo = p->needles * DT_NEEDLE_UNIT_MAX, hi = 0, t;
    *best = 0;
    if (dt_needle_most_tokens(p, corpus, tok, lo, &t, err) != 0) return -1;
    if (t > max_tokens) return 0;
    *most = t;
    while (lo < DT_NEEDLE_MAX_CONTEXT) {
        const int next = lo > DT_NEEDLE_MAX_CONTEXT / 2 ? DT_NEEDLE_MAX_CONTEXT : 2 * lo;
        if (dt_needle_most_tokens(p, corpus, tok, next, &t, err) != 0) return -1;
        if (t > max_tokens) {
            hi = next;
            break;
        }
        lo = next, *most = t;
    }
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        if (dt_needle_most_tokens(p, corpus, tok, mid, &t, err) != 0) return -1;
        if (t > max_tokens) hi = mid;
        else lo = mid, *most = t;
    }
    *best = lo;
    return 0;
}

int dt_needle_fit_contexts(dt_needle_params *p, const dt_needle_corpus *corpus, const dt_tok *tok, int max_tokens,
                           int *most, dt_error *err) {
    if (max_tokens < 1) return dt_fail(err, "max_tokens = %d: must be positive", max_tokens);
    if (dt_needle_params_validate(p, err) != 0) return -1;
    int full, half, most_full = 0, most_half = 0;
    if (longest_fit(p, corpus, tok, max_tokens, &full, &most_full, err) != 0) return -1;
    if (full == 0) return 0;
    if (longest_fit(p, corpus, tok, max_tokens / 2, &half, &most_half, err) != 0) return -1;
    p->n_contexts = 0;
    if (half > 0 && half < full) {
        if (most) most[p->n_contexts] = most_half;
        p->contexts[p->n_contexts++] = half;
    }
    if (most) most[p->n_contexts] = most_full;
    p->contexts[p->n_contexts++] = full;
    return p->n_contexts;
}

/* Uniform in [0, n), n ≥ 1, without modulo bias (rejects the top 2^64 mod n outputs). */
static uint64_t rng_below(uint64_t *s, uint64_t n) {
    const uint64_t r = (UINT64_MAX % n + 1) % n; /* 2^64 mod n */
    uint64_t x;
    do x = dt_rng_next(s);
    while (r != 0 && x > UINT64_MAX - r);
    return x % n;
}

/* ---------------------------------------------------------------- corpus */

/* Length of the well-formed UTF-8 sequence at s[0..n), or 0 when s does not start one. */
static int utf8_len(const unsigned char *s, size_t n) {
    const unsigned char c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F; /* no UTF-16 surrogates */
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else return 0;
    if (n < (size_t)len || s[1] < lo || s[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

/* Every byte that is not part of a well-formed UTF-8 sequence becomes ' '. */
static void utf8_sanitize(unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int len = utf8_len(s + i, n - i);
        if (len == 0) s[i++] = ' ';
        else i += (size_t)len;
    }
}

int dt_needle_corpus_from_bytes(dt_needle_corpus *c, const void *data, size_t n, const char *what, dt_error *err) {
    memset(c, 0, sizeof *c);
    const unsigned char *in = data;
    unsigned char *out = malloc(n ? n : 1);
    if (!out) return dt_fail_oom(err, "%s: out of memory cleaning %zu bytes of corpus", what, n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = in[i];
        if (b == 0 || b == '\r') continue;
        if ((b < 32 && b != '\n' && b != '\t') || b == 127) b = ' ';
        out[m++] = b;
    }
    if (m == 0) {
        free(out);
        return dt_fail_format(err, "%s: corpus is empty%s", what, n ? " (after dropping NUL and CR bytes)" : "");
    }
    utf8_sanitize(out, m);
    c->bytes = out;
    c->n = m;
    c->has_newline = memchr(out, '\n', m) != NULL;
    return 0;
}

void dt_needle_corpus_free(dt_needle_corpus *c) {
    free(c->bytes);
    memset(c, 0, sizeof *c);
}

/* ---------------------------------------------------------------- one sample */

static int is_boundary(const unsigned char *f, int F, int p) {
    if (p == 0 || p == F) return 1;
    if (f[p - 1] == '\n') return 1;
    return p >= 2 && f[p - 1] == ' ' && (f[p - 2] == '.' || f[p - 2] == '!' || f[p - 2] == '?');
}

/* The boundary nearest to t ∈ [0, F]; the smaller one on a tie. Ends: 0 and F are boundaries. */
static int nearest_boundary(const unsigned char *f, int F, int t) {
    for (int k = 0;; k++) {
        if (t - k >= 0 && is_boundary(f, F, t - k)) return t - k;
        if (t + k <= F && is_boundary(f, F, t + k)) return t + k;
    }
}

void dt_needle_sample_free(dt_needle_sample *s) {
    free(s->text);
    memset(s, 0, sizeof *s);
}

static int sentence_length(const char *key, const char *value) {
    return (int)(strlen(DT_NEEDLE_SENTENCE_HEAD) + strlen(key) + strlen(DT_NEEDLE_SENTENCE_MID) + strlen(value) + 1);
}

static int question_length(const char *key) {
    return (int)(strlen(DT_NEEDLE_QUESTION_HEAD) + strlen(key) + strlen(DT_NEEDLE_QUESTION_TAIL));
}

int dt_needle_generate_sample(const dt_needle_params *p, int context_length, double depth, uint64_t seed,
                           const dt_needle_corpus *corpus, dt_needle_sample *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    const int N = p->needles, R = p->queries;
    if (N < 1 || N > DT_NEEDLE_MAX_NEEDLES) return dt_fail(err, "needles = %d: must be in 1..%d", N, DT_NEEDLE_MAX_NEEDLES);
    if (R < 1 || R > N) return dt_fail(err, "queries = %d: must be in 1..needles (%d)", R, N);
    if (!(depth >= 0.0 && depth <= 1.0)) return dt_fail(err, "depth %g: must be in [0, 1]", depth);
    if (context_length < N * DT_NEEDLE_UNIT_MAX || context_length > DT_NEEDLE_MAX_CONTEXT)
        return dt_fail(err, "context length %d: must be in %d..%d for %d needles", context_length,
                       N * DT_NEEDLE_UNIT_MAX, DT_NEEDLE_MAX_CONTEXT, N);
    if (!corpus || !corpus->bytes || corpus->n == 0) return dt_fail(err, "corpus is empty");

    uint64_t rng = seed;
    char keys[DT_NEEDLE_MAX_NEEDLES][DT_NEEDLE_MAX_KEY + 1], values[DT_NEEDLE_MAX_NEEDLES][DT_NEEDLE_VALUE_DIGITS + 1];
    for (int i = 0; i < N; i++) {
        int fresh;
        do {
            int len = DT_NEEDLE_MIN_KEY + (int)rng_below(&rng, DT_NEEDLE_MAX_KEY - DT_NEEDLE_MIN_KEY + 1);
            for (int k = 0; k < len; k++) keys[i][k] = (char)('a' + rng_below(&rng, 26));
            keys[i][len] = '\0';
            fresh = 1;
            for (int j = 0; j < i && fresh; j++) fresh = strcmp(keys[i], keys[j]) != 0;
        } while (!fresh);
    }
    for (int i = 0; i < N; i++) {
        int fresh;
        do {
            snprintf(values[i], sizeof values[i], "%d", 10000 + (int)rng_below(&rng, 90000));
            fresh = 1;
            for (int j = 0; j < i && fresh; j++) fresh = strcmp(values[i], values[j]) != 0;
        } while (!fresh);
    }
    int unit[DT_NEEDLE_MAX_NEEDLES], needle_bytes = 0;
    for (int i = 0; i < N; i++) needle_bytes += unit[i] = sentence_length(keys[i], values[i]) + 1;
    const int F = context_length - needle_bytes; /* ≥ 0: context_length ≥ N · DT_NEEDLE_UNIT_MAX */

    /* Filler: from a uniform start moved to the next line start, F bytes, wrapping around. */
    const size_t n = corpus->n;
    size_t start = (size_t)rng_below(&rng, n);
    if (corpus->has_newline)
        while (corpus->bytes[(start + n - 1) % n] != '\n') start = (start + 1) % n;
    unsigned char *filler = malloc((size_t)F + 1);
    if (!filler) return dt_fail_oom(err, "out of memory building a context of %d bytes", context_length);
    for (int i = 0; i < F; i++) filler[i] = corpus->bytes[(start + (size_t)i) % n];
    utf8_sanitize(filler, (size_t)F);

    /* The other needles: uniform filler positions moved to the nearest boundary, in order of
     * position (generation order on ties). */
    int pos[DT_NEEDLE_MAX_NEEDLES], order[DT_NEEDLE_MAX_NEEDLES], m = 0;
    for (int i = 1; i < N; i++) {
        pos[i] = nearest_boundary(filler, F, (int)rng_below(&rng, (uint64_t)F + 1));
        int j = m++;
        while (j > 0 && pos[order[j - 1]] > pos[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    /* The needle of interest: of every offset its sentence can take — at any boundary, before,
     * between or after the needles already there — the one nearest to the goal (the smaller on a
     * tie; offsets grow along the scan, so the first best is kept). */
    const int glue_end = F > 0 && filler[F - 1] != '\n' && filler[F - 1] != ' ';
    const long goal = (long)floor(depth * (context_length - (unit[0] - 1)) + 0.5);
    long best = -1, before = 0;
    int best_p = 0, best_slot = 0;
    for (int p = 0, j = 0; p <= F; p++) {
        while (j < m && pos[order[j]] < p) before += unit[order[j++]];
        if (!is_boundary(filler, F, p)) continue;
        long off = p + before + (p == F && glue_end);
        for (int k = j;; k++) {
            if (best < 0 || labs(off - goal) < labs(best - goal)) best = off, best_p = p, best_slot = k;
            if (k == m || pos[order[k]] != p) break;
            off += unit[order[k]];
        }
        if (off > goal && off - goal > labs(best - goal)) break; /* only farther from here on */
    }
    pos[0] = best_p;
    memmove(order + best_slot + 1, order + best_slot, (size_t)(m - best_slot) * sizeof order[0]);
    order[best_slot] = 0;

    int text_length = context_length;
    for (int r = 0; r < R; r++) text_length += question_length(keys[r]) + (int)strlen(values[r]);
    char *text = malloc((size_t)text_length + 1);
    if (!text) {
        free(filler);
        return dt_fail_oom(err, "out of memory building a sample of %d bytes", text_length);
    }
    int at = 0, fi = 0, slot_of[DT_NEEDLE_MAX_NEEDLES];
    for (int k = 0; k < N; k++) {
        const int i = order[k], p_i = pos[i];
        memcpy(text + at, filler + fi, (size_t)(p_i - fi));
        at += p_i - fi;
        fi = p_i;
        const int lead = p_i == F && glue_end;
        if (lead) text[at++] = ' ';
        dt_needle_needle *nd = &out->needles[k];
        snprintf(nd->key, sizeof nd->key, "%s", keys[i]);
        snprintf(nd->value, sizeof nd->value, "%s", values[i]);
        nd->offset = at;
        nd->length = unit[i] - 1;
        nd->value_offset = at + (int)(strlen(DT_NEEDLE_SENTENCE_HEAD) + strlen(keys[i]) + strlen(DT_NEEDLE_SENTENCE_MID));
        nd->value_length = (int)strlen(values[i]);
        /* snprintf writes a NUL after the sentence: room is there, the separator overwrites it */
        snprintf(text + at, (size_t)(text_length + 1 - at), DT_NEEDLE_SENTENCE_HEAD "%s" DT_NEEDLE_SENTENCE_MID "%s.", keys[i], values[i]);
        at += nd->length;
        if (!lead) text[at++] = (p_i == 0 || filler[p_i - 1] == '\n') ? '\n' : ' ';
        slot_of[i] = k;
    }
    memcpy(text + at, filler + fi, (size_t)(F - fi));
    at += F - fi;
    free(filler);

    for (int r = 0; r < R; r++) {
        dt_needle_query *q = &out->queries[r];
        q->needle = slot_of[r];
        q->question_offset = at + 1;
        at += snprintf(text + at, (size_t)(text_length + 1 - at), DT_NEEDLE_QUESTION_HEAD "%s" DT_NEEDLE_QUESTION_TAIL, keys[r]);
        q->prompt_end_offset = at;
        q->answer_length = (int)strlen(values[r]);
        memcpy(text + at, values[r], (size_t)q->answer_length);
        at += q->answer_length;
    }
    text[at] = '\0';
    if (at != text_length) { /* cannot happen; guards the arithmetic above */
        free(text);
        return dt_fail(err, "internal error: sample of %d bytes, expected %d", at, text_length);
    }
    out->context_length = context_length;
    out->depth = depth;
    const dt_needle_needle *target = &out->needles[slot_of[0]];
    const int room = context_length - target->length;
    out->needle_depth = room > 0 ? floor((double)target->offset / room * 1e6 + 0.5) / 1e6 : 0.0;
    out->seed = seed;
    out->n_needles = N;
    out->n_queries = R;
    out->text = text;
    out->text_length = text_length;
    return 0;
}

/* ---------------------------------------------------------------- consistency */

int dt_needle_sample_check(const dt_needle_sample *s, const char *where, dt_error *err) {
    if (!s->text) return dt_fail_format(err, "%s: no text", where);
    if (s->text_length != (int)strlen(s->text))
        return dt_fail_format(err, "%s: text is %zu bytes, text_length says %d", where, strlen(s->text),
                              s->text_length);
    if (s->context_length < 1 || s->context_length > s->text_length)
        return dt_fail_format(err, "%s: context_length %d: must be in 1..text length %d", where, s->context_length,
                              s->text_length);
    if (!(s->depth >= 0.0 && s->depth <= 1.0))
        return dt_fail_format(err, "%s: depth %g: must be in [0, 1]", where, s->depth);
    if (s->n_needles < 1 || s->n_needles > DT_NEEDLE_MAX_NEEDLES)
        return dt_fail_format(err, "%s: %d needles: must be 1..%d", where, s->n_needles, DT_NEEDLE_MAX_NEEDLES);
    if (s->n_queries < 1 || s->n_queries > s->n_needles)
        return dt_fail_format(err, "%s: %d queries: must be 1..needles (%d)", where, s->n_queries, s->n_needles);
    char buf[256];
    int prev_end = 0;
    for (int i = 0; i < s->n_needles; i++) {
        const dt_needle_needle *nd = &s->needles[i];
        const size_t klen = strlen(nd->key), vlen = strlen(nd->value);
        if (klen == 0 || vlen == 0) return dt_fail_format(err, "%s: needles[%d]: empty key or value", where, i);
        for (int j = 0; j < i; j++)
            if (!strcmp(s->needles[j].key, nd->key))
                return dt_fail_format(err, "%s: needles[%d] and needles[%d] share the key '%s'", where, j, i, nd->key);
        const int len = snprintf(buf, sizeof buf, DT_NEEDLE_SENTENCE_HEAD "%s" DT_NEEDLE_SENTENCE_MID "%s.", nd->key, nd->value);
        if (nd->length != len)
            return dt_fail_format(err, "%s: needles[%d]: length %d, but its sentence has %d bytes", where, i,
                                  nd->length, len);
        if (nd->offset < prev_end || nd->offset > s->context_length - len)
            return dt_fail_format(
                err, "%s: needles[%d]: offset %d: must be in %d..%d (inside the context, after needles[%d])", where, i,
                nd->offset, prev_end, s->context_length - len, i - 1);
        if (memcmp(s->text + nd->offset, buf, (size_t)len) != 0)
            return dt_fail_format(err, "%s: needles[%d]: the text at offset %d is not \"%s\"", where, i, nd->offset,
                                  buf);
        const int voff = nd->offset + (int)(strlen(DT_NEEDLE_SENTENCE_HEAD) + klen + strlen(DT_NEEDLE_SENTENCE_MID));
        if (nd->value_offset != voff || nd->value_length != (int)vlen)
            return dt_fail_format(err, "%s: needles[%d]: value span %d+%d, but the value '%s' is at %d+%zu", where, i,
                                  nd->value_offset, nd->value_length, nd->value, voff, vlen);
        prev_end = nd->offset + len;
    }
    int prev = s->context_length;
    for (int r = 0; r < s->n_queries; r++) {
        const dt_needle_query *q = &s->queries[r];
        if (q->needle < 0 || q->needle >= s->n_needles)
            return dt_fail_format(err, "%s: queries[%d]: needle %d: must be in 0..%d", where, r, q->needle,
                                  s->n_needles - 1);
        for (int j = 0; j < r; j++)
            if (s->queries[j].needle == q->needle)
                return dt_fail_format(err, "%s: queries[%d] and queries[%d] ask the same needle", where, j, r);
        const dt_needle_needle *nd = &s->needles[q->needle];
        const int len = snprintf(buf, sizeof buf, DT_NEEDLE_QUESTION_HEAD "%s" DT_NEEDLE_QUESTION_TAIL, nd->key);
        if (q->question_offset != prev + 1 || q->question_offset - 1 + len > s->text_length)
            return dt_fail_format(err, "%s: queries[%d]: question_offset %d: expected %d (right after %s)", where, r,
                                  q->question_offset, prev + 1, r ? "the previous answer" : "the context");
        if (memcmp(s->text + q->question_offset - 1, buf, (size_t)len) != 0)
            return dt_fail_format(err, "%s: queries[%d]: the text at %d is not the question for '%s'", where, r,
                                  q->question_offset, nd->key);
        if (q->prompt_end_offset != q->question_offset - 1 + len)
            return dt_fail_format(err, "%s: queries[%d]: prompt_end_offset %d: expected %d (after \"Answer: \")", where,
                                  r, q->prompt_end_offset, q->question_offset - 1 + len);
        if (q->answer_length != nd->value_length || q->prompt_end_offset + q->answer_length > s->text_length ||
            memcmp(s->text + q->prompt_end_offset, nd->value, (size_t)nd->value_length) != 0)
            return dt_fail_format(err, "%s: queries[%d]: the answer at %d is not the value '%s'", where, r,
                                  q->prompt_end_offset, nd->value);
        prev = q->prompt_end_offset + q->answer_length;
    }
    if (prev != s->text_length)
        return dt_fail_format(err, "%s: %d bytes of text after the last answer (the text ends with it)", where,
                              s->text_length - prev);
    return 0;
}

