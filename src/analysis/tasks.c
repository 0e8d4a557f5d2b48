/* tasks.c — the generators of tasks.h: recall, depth, icl. Formats are written out in tasks.h. */
#include "analysis/tasks.h"

#include <string.h>

static const char *const names[TK_N_TASKS] = {"recall", "depth", "icl"};

const char *tk_name(tk_kind k) { return k >= 0 && k < TK_N_TASKS ? names[k] : "?"; }

int tk_kind_parse(const char *name) {
    for (int i = 0; i < TK_N_TASKS; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
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

static void start(tk_example *ex, tk_kind kind, int length) {
    ex->kind = kind;
    ex->length = length;
    ex->pairs = 0;
    ex->depth = 0;
    ex->order = 0;
    ex->n_queries = 0;
}

static void add_query(tk_example *ex, int pos, int answer) {
    tk_query *q = &ex->q[ex->n_queries++];
    q->pos = pos;
    q->answer = answer;
    q->n_candidates = 0;
}

int tk_recall(uint64_t seed, int length, int pairs, int n_queries, int distractors, tk_example *ex, dt_error *err) {
    if (pairs < 1 || pairs > TK_MAX_PAIRS) return dt_fail(err, "recall: %d pairs (1..%d)", pairs, TK_MAX_PAIRS);
    if (n_queries < 1 || n_queries > TK_MAX_QUERIES)
        return dt_fail(err, "recall: %d queries (1..%d)", n_queries, TK_MAX_QUERIES);
    if (distractors >= 0) length = 3 * (pairs + distractors + n_queries) + 1;
    if (length > TK_MAX_LEN || 3 * (pairs + n_queries) + 1 > length)
        return dt_fail(err, "recall: %d tokens cannot hold %d pairs and %d queries (need %d..%d)", length, pairs,
                       n_queries, 3 * (pairs + n_queries) + 1, TK_MAX_LEN);
    uint64_t rng = seed;
    start(ex, TK_RECALL, length);
    ex->pairs = pairs;
    int keys[TK_KEYS], values[TK_KEYS], asked[TK_MAX_QUERIES];
    distinct(&rng, TK_KEYS, pairs, keys);
    for (int i = 0; i < pairs; i++) values[i] = (int)below(&rng, 10);
    /* the context: `items` slots of 3 bytes, `pairs` of them (chosen at random) the pairs, the rest
     * distractors; leading spaces pad it to the exact length */
    const int context = length - 1 - 3 * n_queries, items = context / 3, pad = context - 3 * items;
    int *t = ex->tokens, p = 0;
    for (int i = 0; i < pad; i++) t[p++] = ' ';
    int left = pairs, next = 0;
    for (int s = 0; s < items; s++) {
        int is_pair = (int)below(&rng, (uint64_t)(items - s)) < left;
        if (is_pair) {
            t[p++] = TK_KEY_SYMBOLS[keys[next]];
            t[p++] = '0' + values[next];
            next++;
            left--;
        } else {
            t[p++] = 'A' + (int)below(&rng, 26);
            t[p++] = '0' + (int)below(&rng, 10);
        }
        t[p++] = ' ';
    }
    t[p++] = ';';
    ask(&rng, pairs, 0, n_queries, asked);
    for (int i = 0; i < n_queries; i++) {
        t[p] = TK_KEY_SYMBOLS[keys[asked[i]]];
        add_query(ex, p, '0' + values[asked[i]]);
        t[p + 1] = '0' + values[asked[i]];
        t[p + 2] = ' ';
        p += 3;
    }
    return 0;
}

int tk_depth(uint64_t seed, int length, double depth, int needles, int n_queries, const unsigned char *filler,
             size_t n, tk_example *ex, dt_error *err) {
    enum { NEEDLE = 3, QUERY = 4 }; /* "@kv", "\n@kv" */
    if (!(depth >= 0 && depth <= 1)) return dt_fail(err, "depth: %g is not in [0, 1]", depth);
    if (needles < 2 || needles > TK_KEYS) return dt_fail(err, "depth: %d needles (2..%d)", needles, TK_KEYS);
    if (n_queries < 1 || n_queries > TK_MAX_QUERIES)
        return dt_fail(err, "depth: %d queries (1..%d)", n_queries, TK_MAX_QUERIES);
    const int context = length - QUERY * n_queries; /* filler with the needles inside */
    if (length > TK_MAX_LEN || context < 4 * NEEDLE * needles)
        return dt_fail(err, "depth: %d tokens for %d needles and %d queries (need %d..%d)", length, needles, n_queries,
                       4 * NEEDLE * needles + QUERY * n_queries, TK_MAX_LEN);
    uint64_t rng = seed;
    start(ex, TK_DEPTH, length);
    ex->pairs = needles;
    ex->depth = depth;
    int *t = ex->tokens;
    if (filler && n >= (size_t)context) {
        size_t off = (size_t)below(&rng, (uint64_t)(n - (size_t)context + 1));
        for (int i = 0; i < context; i++) {
            int c = filler[off + (size_t)i];
            t[i] = c == '@' || strchr(TK_KEY_SYMBOLS, c) ? ' ' : c;
        }
    } else
        for (int i = 0; i < context; i++) t[i] = 'a' + (int)below(&rng, 26);
    int keys[TK_KEYS], values[TK_KEYS], where[TK_KEYS], asked[TK_MAX_QUERIES];
    distinct(&rng, TK_KEYS, needles, keys);
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
        t[where[i]] = '@';
        t[where[i] + 1] = TK_KEY_SYMBOLS[keys[i]];
        t[where[i] + 2] = '0' + values[i];
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
        t[p++] = '\n';
        t[p++] = '@';
        t[p] = TK_KEY_SYMBOLS[keys[asked[i]]];
        add_query(ex, p, '0' + values[asked[i]]);
        t[p + 1] = '0' + values[asked[i]];
        p += 2;
    }
    return 0;
}

int tk_icl(uint64_t seed, int shots, int n_queries, int order, tk_example *ex, dt_error *err) {
    if (shots < 2 || shots % 2 || shots > 16) return dt_fail(err, "icl: %d demonstrations (an even number 2..16)", shots);
    if (n_queries < 1 || n_queries > 26 - shots || n_queries > TK_MAX_QUERIES)
        return dt_fail(err, "icl: %d queries (1..%d)", n_queries, 26 - shots);
    if (order < 0) return dt_fail(err, "icl: order %d is negative", order);
    uint64_t rng = seed;
    start(ex, TK_ICL, 4 * (shots + n_queries));
    ex->pairs = shots;
    ex->order = order;
    int labels[2];
    distinct(&rng, 26, 2, labels); /* labels[c] is class c's label letter */
    /* demonstrations: shots/2 letters from each half; queries: from the letters left, alternating classes */
    int half[2][13], letters[16], q_letters[TK_MAX_QUERIES];
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
        t[p++] = 'a' + x;
        t[p++] = ':';
        t[p++] = 'A' + labels[x / 13];
        t[p++] = ' ';
    }
    for (int i = 0; i < n_queries; i++) {
        int y = q_letters[i];
        t[p++] = 'a' + y;
        t[p] = ':';
        add_query(ex, p, 'A' + labels[y / 13]);
        tk_query *q = &ex->q[ex->n_queries - 1];
        q->n_candidates = 2;
        q->candidates[0] = 'A' + labels[0];
        q->candidates[1] = 'A' + labels[1];
        t[p + 1] = 'A' + labels[y / 13];
        t[p + 2] = ' ';
        p += 3;
    }
    return 0;
}
