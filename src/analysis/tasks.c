/* tasks.c — the generators of the synthetic tasks (recall, depth, icl; formats are written out in
 * difftrans_analysis.h) and the tokens of their symbols in a real vocabulary. */
#include "difftrans_analysis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[DT_N_TASKS] = {"recall", "depth", "icl"};

const char *dt_task_name(dt_task_kind k) { return k >= 0 && k < DT_N_TASKS ? names[k] : "?"; }

int dt_task_kind_parse(const char *name) {
    for (int i = 0; i < DT_N_TASKS; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

/* symbol c as a token of sym (NULL: the byte c) */
static int sym_id(const dt_task_symbols *sym, int c) { return sym ? sym->id[c] : c; }
#define S(c) sym_id(sym, (c))

/* whether a filler token stays in depth's filler ('@', the keys and, as ever, NUL become spaces) */
static int filler_keeps(const dt_task_symbols *sym, int token) {
    if (sym) return token >= 0 && token < sym->vocab && !sym->no_filler[token];
    return token > 0 && token < 256 && token != '@' && !strchr(DT_TASK_KEY_SYMBOLS, token);
}

static uint64_t below(uint64_t *rng, uint64_t n) { return dt_rng_next(rng) % n; }

/* k distinct values from 0..n-1 (k ≤ n ≤ 64) in random order */
static void distinct(uint64_t *rng, int n, int k, int *out) {
    int pool[64];
    for (int i = 0; i < n; i++) pool[i] = i;
    for (int i = 0; i < k; i++) {
        int j = i + (int)below(rng, (uint64_t)(n - i));
        int t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
        out[i] = pool[i];
    }
}

/* n queries over `count` items numbered first..first+count-1: each item once in random order, then
 * (n > count) items drawn at random, repeats allowed */
static void ask(uint64_t *rng, int count, int first, int n, int *out) {
    const int once = n < count ? n : count;
    distinct(rng, count, once, out);
    for (int i = once; i < n; i++) out[i] = (int)below(rng, (uint64_t)count);
    for (int i = 0; i < n; i++) out[i] += first;
}

static void start(dt_task_example *ex, dt_task_kind kind, int length) {
    ex->kind = kind;
    ex->length = length;
    ex->pairs = 0;
    ex->depth = 0;
    ex->order = 0;
    ex->n_queries = 0;
}

static void add_query(dt_task_example *ex, int pos, int answer) {
    dt_task_query *q = &ex->q[ex->n_queries++];
    q->pos = pos;
    q->answer = answer;
    q->n_candidates = 0;
}

int dt_task_recall(const dt_task_symbols *sym, uint64_t seed, int length, int pairs, int n_queries, int distractors,
              dt_task_example *ex, dt_error *err) {
    if (pairs < 1 || pairs > DT_TASK_MAX_PAIRS) return dt_fail(err, "recall: %d pairs (1..%d)", pairs, DT_TASK_MAX_PAIRS);
    if (n_queries < 1 || n_queries > DT_TASK_MAX_QUERIES)
        return dt_fail(err, "recall: %d queries (1..%d)", n_queries, DT_TASK_MAX_QUERIES);
    if (distractors >= 0) length = 3 * (pairs + distractors + n_queries) + 1;
    if (length > DT_TASK_MAX_LEN || 3 * (pairs + n_queries) + 1 > length)
        return dt_fail(err, "recall: %d tokens cannot hold %d pairs and %d queries (need %d..%d)", length, pairs,
                       n_queries, 3 * (pairs + n_queries) + 1, DT_TASK_MAX_LEN);
    uint64_t rng = seed;
    start(ex, DT_TASK_RECALL, length);
    ex->pairs = pairs;
    int keys[DT_TASK_KEYS], values[DT_TASK_KEYS], asked[DT_TASK_MAX_QUERIES];
    distinct(&rng, DT_TASK_KEYS, pairs, keys);
    for (int i = 0; i < pairs; i++) values[i] = (int)below(&rng, 10);
    /* the context: `items` slots of 3 bytes, `pairs` of them (chosen at random) the pairs, the rest
     * distractors; leading spaces pad it to the exact length */
    const int context = length - 1 - 3 * n_queries, items = context / 3, pad = context - 3 * items;
    int *t = ex->tokens, p = 0;
    for (int i = 0; i < pad; i++) t[p++] = S(' ');
    int left = pairs, next = 0;
    for (int s = 0; s < items; s++) {
        int is_pair = (int)below(&rng, (uint64_t)(items - s)) < left;
        if (is_pair) {
            t[p++] = S(DT_TASK_KEY_SYMBOLS[keys[next]]);
            t[p++] = S('0' + values[next]);
            next++;
            left--;
        } else {
            t[p++] = S('A' + (int)below(&rng, 26));
            t[p++] = S('0' + (int)below(&rng, 10));
        }
        t[p++] = S(' ');
    }
    t[p++] = S(';');
    ask(&rng, pairs, 0, n_queries, asked);
    for (int i = 0; i < n_queries; i++) {
        t[p] = S(DT_TASK_KEY_SYMBOLS[keys[asked[i]]]);
        add_query(ex, p, S('0' + values[asked[i]]));
        t[p + 1] = S('0' + values[asked[i]]);
        t[p + 2] = S(' ');
        p += 3;
    }
    return 0;
}

int dt_task_depth(const dt_task_symbols *sym, uint64_t seed, int length, double depth, int needles, int n_queries,
             const int *filler, size_t n, dt_task_example *ex, dt_error *err) {
    enum { NEEDLE = 3, QUERY = 4 }; /* "@kv", "\n@kv" */
    if (!(depth >= 0 && depth <= 1)) return dt_fail(err, "depth: %g is not in [0, 1]", depth);
    if (needles < 2 || needles > DT_TASK_KEYS) return dt_fail(err, "depth: %d needles (2..%d)", needles, DT_TASK_KEYS);
    if (n_queries < 1 || n_queries > DT_TASK_MAX_QUERIES)
        return dt_fail(err, "depth: %d queries (1..%d)", n_queries, DT_TASK_MAX_QUERIES);
    const int context = length - QUERY * n_queries; /* filler with the needles inside */
    if (length > DT_TASK_MAX_LEN || context < 4 * NEEDLE * needles)
        return dt_fail(err, "depth: %d tokens for %d needles and %d queries (need %d..%d)", length, needles, n_queries,
                       4 * NEEDLE * needles + QUERY * n_queries, DT_TASK_MAX_LEN);
    uint64_t rng = seed;
    start(ex, DT_TASK_DEPTH, length);
    ex->pairs = needles;
    ex->depth = depth;
    int *t = ex->tokens;
    if (filler && n >= (size_t)context) {
        size_t off = (size_t)below(&rng, (uint64_t)(n - (size_t)context + 1));
        for (int i = 0; i < context; i++) {
            int c = filler[off + (size_t)i];
            t[i] = filler_keeps(sym, c) ? c : S(' ');
        }
    } else
        for (int i = 0; i < context; i++) t[i] = S('a' + (int)below(&rng, 26));
    int keys[DT_TASK_KEYS], values[DT_TASK_KEYS], where[DT_TASK_KEYS], asked[DT_TASK_MAX_QUERIES];
    distinct(&rng, DT_TASK_KEYS, needles, keys);
    for (int i = 0; i < needles; i++) values[i] = (int)below(&rng, 10);
    /* needle 0 starts at `depth` of the room; the others anywhere they do not touch another */
    const int room = context - NEEDLE;
    where[0] = (int)(depth * room + 0.5);
    for (int i = 1; i < needles; i++) {
        int ok;
        do {
            where[i] = (int)below(&rng, (uint64_t)room + 1);
            ok = 1;
            for (int j = 0; j < i; j++)
                if (where[i] > where[j] - NEEDLE - 1 && where[i] < where[j] + NEEDLE + 1) ok = 0;
        } while (!ok); /* terminates: the needles take at most a third of the room */
    }
    for (int i = 0; i < needles; i++) {
        t[where[i]] = S('@');
        t[where[i] + 1] = S(DT_TASK_KEY_SYMBOLS[keys[i]]);
        t[where[i] + 2] = S('0' + values[i]);
    }
    /* queries: needle 0, then the others in random order, then (more queries than needles) any */
    asked[0] = 0;
    if (n_queries > 1) {
        const int others = n_queries - 1 < needles - 1 ? n_queries - 1 : needles - 1;
        ask(&rng, needles - 1, 1, others, asked + 1);
        for (int i = 1 + others; i < n_queries; i++) asked[i] = (int)below(&rng, (uint64_t)needles);
    }
    int p = context;
    for (int i = 0; i < n_queries; i++) {
        t[p++] = S('\n');
        t[p++] = S('@');
        t[p] = S(DT_TASK_KEY_SYMBOLS[keys[asked[i]]]);
        add_query(ex, p, S('0' + values[asked[i]]));
        t[p + 1] = S('0' + values[asked[i]]);
        p += 2;
    }
    return 0;
}

int dt_task_icl(const dt_task_symbols *sym, uint64_t seed, int shots, int n_queries, int order, dt_task_example *ex, dt_error *err) {
    if (shots < 2 || shots % 2 || shots > 16) return dt_fail(err, "icl: %d demonstrations (an even number 2..16)", shots);
    if (n_queries < 1 || n_queries > 26 - shots || n_queries > DT_TASK_MAX_QUERIES)
        return dt_fail(err, "icl: %d queries (1..%d)", n_queries, 26 - shots);
    if (order < 0) return dt_fail(err, "icl: order %d is negative", order);
    uint64_t rng = seed;
    start(ex, DT_TASK_ICL, 4 * (shots + n_queries));
    ex->pairs = shots;
    ex->order = order;
    int labels[2];
    distinct(&rng, 26, 2, labels); /* labels[c] is class c's label letter */
    /* demonstrations: shots/2 letters from each half; queries: from the letters left, alternating classes */
    int half[2][13], letters[16], q_letters[DT_TASK_MAX_QUERIES];
    distinct(&rng, 13, 13, half[0]);
    distinct(&rng, 13, 13, half[1]);
    for (int i = 0; i < shots; i++) {
        letters[i] = (i & 1) * 13 + half[i & 1][i / 2];
    }
    for (int i = 0, taken[2] = {shots / 2, shots / 2}; i < n_queries; i++) {
        int c = i & 1;
        if (taken[c] >= 13) c ^= 1; /* one half ran out (only with many queries) */
        q_letters[i] = c * 13 + half[c][taken[c]++];
    }
    /* the demonstrations' order: drawn (order 0) or a Fisher–Yates shuffle from the order's stream */
    int perm[16];
    distinct(&rng, shots, shots, perm);
    if (order > 0) {
        uint64_t orng = seed ^ (0x5EEDull * (uint64_t)order + 0x9E3779B97F4A7C15ull);
        dt_rng_next(&orng);
        distinct(&orng, shots, shots, perm);
    }
    int *t = ex->tokens, p = 0;
    for (int i = 0; i < shots; i++) {
        int x = letters[perm[i]];
        t[p++] = S('a' + x);
        t[p++] = S(':');
        t[p++] = S('A' + labels[x / 13]);
        t[p++] = S(' ');
    }
    for (int i = 0; i < n_queries; i++) {
        int y = q_letters[i];
        t[p++] = S('a' + y);
        t[p] = S(':');
        add_query(ex, p, S('A' + labels[y / 13]));
        dt_task_query *q = &ex->q[ex->n_queries - 1];
        q->n_candidates = 2;
        q->candidates[0] = S('A' + labels[0]);
        q->candidates[1] = S('A' + labels[1]);
        t[p + 1] = S('A' + labels[y / 13]);
        t[p + 2] = S(' ');
        p += 3;
    }
    return 0;
}

/* ---------------------------------------------------------------- symbols as tokens */

/* The character token `id` stands for: c when three of it decode to two of it and then c; -1 when
 * it stands for no one character. (Alone is not enough: decoders strip a leading space, and
 * Llama's "▁▁" alone decodes to " ".) One id stands for at most one character, so two symbols
 * never share a token. */
static int stands_for(const dt_tok *tok, int32_t id) {
    if (id < 0) return -1;
    const int32_t ids[3] = {id, id, id};
    char *two = NULL, *three = NULL;
    size_t n2 = 0, n3 = 0;
    dt_error ignored;
    int c = -1;
    if (dt_tok_decode(tok, ids, 2, 0, &two, &n2, &ignored) == 0 &&
        dt_tok_decode(tok, ids, 3, 0, &three, &n3, &ignored) == 0 && n3 == n2 + 1 && memcmp(two, three, n2) == 0)
        c = (unsigned char)three[n2];
    free(two);
    free(three);
    return c;
}

/* The token of symbol c found without a scan of the vocabulary: the token spelled c, one of the
 * tokens of c encoded alone, or <0xNN>; -1 when none stands for c, -2 when encoding failed. */
static int32_t symbol_token(const dt_tok *tok, char c, dt_error *err) {
    int32_t id = dt_tok_token_to_id(tok, &c, 1);
    if (stands_for(tok, id) == c) return id;
    int32_t *ids = NULL;
    size_t n = 0;
    if (dt_tok_encode(tok, &c, 1, 0, &ids, &n, err) != 0) return -2;
    id = -1;
    for (size_t i = 0; i < n && id < 0; i++)
        if (stands_for(tok, ids[i]) == c) id = ids[i];
    free(ids);
    if (id >= 0) return id;
    char byte[8];
    snprintf(byte, sizeof byte, "<0x%02X>", (unsigned char)c);
    id = dt_tok_token_to_id(tok, byte, strlen(byte));
    return stands_for(tok, id) == c ? id : -1;
}

static const char *symbol_name(char c, char *buf, size_t cap) {
    if (c == ' ') return "' ' (space)";
    if (c == '\n') return "'\\n' (newline)";
    snprintf(buf, cap, "'%c'", c);
    return buf;
}

void dt_task_symbols_free(dt_task_symbols *s) {
    free(s->no_filler);
    s->no_filler = NULL;
}

int dt_task_symbols_from_tokenizer(dt_task_symbols *s, const dt_tok *tok, dt_error *err) {
    memset(s, 0, sizeof *s);
    for (int c = 0; c < 128; c++) s->id[c] = -1;
    const char *path = dt_tok_path(tok);
    int missing = 0;
    for (const char *p = DT_TASK_SYMBOLS; *p; p++) {
        const int32_t id = symbol_token(tok, *p, err);
        if (id == -2) return -1;
        s->id[(int)*p] = id;
        missing += id < 0;
    }
    /* one pass over the vocabulary: the filler's excluded tokens, and any token standing for a
     * symbol still without one (a ByteLevel tokenizer whose prefix space merges with "\n") */
    s->vocab = dt_tok_vocab_size(tok);
    s->no_filler = malloc(s->vocab > 0 ? (size_t)s->vocab : 1);
    if (!s->no_filler) return dt_fail_oom(err, "%s: out of memory for %d tokens", path, s->vocab);
    for (int32_t id = 0; id < s->vocab; id++) {
        char *text = NULL;
        size_t len = 0;
        dt_error ignored;
        int out = dt_tok_decode(tok, &id, 1, 0, &text, &len, &ignored) != 0 || memchr(text, '@', len) ||
                  memchr(text, '\0', len);
        for (const char *k = DT_TASK_KEY_SYMBOLS; *k && !out; k++) out = memchr(text, *k, len) != NULL;
        s->no_filler[id] = (unsigned char)out;
        if (missing && text && len <= 1) {
            const int c = stands_for(tok, id);
            if (c > 0 && c < 128 && strchr(DT_TASK_SYMBOLS, c) && s->id[c] < 0) {
                s->id[c] = id;
                missing--;
            }
        }
        free(text);
    }
    for (const char *p = DT_TASK_SYMBOLS; *p && missing; p++)
        if (s->id[(int)*p] < 0) {
            char name[8];
            dt_task_symbols_free(s);
            return dt_fail(err, "%s: the task symbol %s has no token of its own (no token stands for exactly that "
                                "character: none is spelled so, none is <0x%02X>, none comes out of encoding it "
                                "alone or decodes to it); the synthetic tasks need one token per symbol",
                           path, symbol_name(*p, name, sizeof name), (unsigned char)*p);
        }
    return 0;
}
