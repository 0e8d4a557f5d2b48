/* bpe.c — the BPE model: vocabulary and merges from tokenizer.json, and the tokenization of one
 * piece (initial symbols with unk / byte_fallback, then merges in rank order exactly as the Rust
 * library's priority queue applies them), behind a per-context cache of recent pieces.
 *
 * A merge's rank is its index in model.merges, unless model.difftrans_merge_ranks gives the ranks
 * (tied ones, for a vocabulary read from a GGUF SentencePiece file: see parse_ranks). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tokenizer/tok.h"

#define VOCAB_HOLE_SLACK 1024 /* unused ids allowed beyond twice the number of vocab entries */

/* ---------------------------------------------------------------- vocabulary map */

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

static const char *tok_str(const tk_bpe *m, int32_t id) { return m->strings + m->tok_off[id]; }

int32_t tk_bpe_lookup(const tk_bpe *m, const char *s, size_t n) {
    if (!m->map_slots) return -1;
    size_t mask = m->map_cap - 1, i = (size_t)tk_hash(s, n) & mask;
    for (;;) {
        int32_t id = m->map_slots[i];
        if (id < 0) return -1;
        if (m->tok_len[id] == n && !memcmp(tok_str(m, id), s, n)) return id;
        i = (i + 1) & mask;
    }
}

/* ---------------------------------------------------------------- merges map */

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static size_t pair_slot(uint64_t k, size_t mask) {
    uint64_t h = k * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h ^ (h >> 31)) & mask;
}

int tk_bpe_merge(const tk_bpe *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    if (!m->merge_cap) return 0;
    uint64_t k = pair_key(a, b);
    size_t mask = m->merge_cap - 1, i = pair_slot(k, mask);
    for (;;) {
        if (m->merge_new[i] < 0) return 0;
        if (m->merge_keys[i] == k) {
            *rank = m->merge_rank[i];
            *new_id = m->merge_new[i];
            return 1;
        }
        i = (i + 1) & mask;
    }
}

/* A later duplicate of a merge replaces the earlier one (the Rust library collects them into a
 * hash map in file order). */
static void merge_insert(tk_bpe *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
    uint64_t k = pair_key(a, b);
    size_t mask = m->merge_cap - 1, i = pair_slot(k, mask);
    while (m->merge_new[i] >= 0 && m->merge_keys[i] != k) i = (i + 1) & mask;
    if (m->merge_new[i] < 0) m->n_merges++;
    m->merge_keys[i] = k;
    m->merge_rank[i] = rank;
    m->merge_new[i] = new_id;
}

/* ---------------------------------------------------------------- parsing */

static const char *const KEYS_BPE[] = {"type", "dropout", "unk_token", "continuing_subword_prefix",
                                       "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
                                       "vocab", "merges", "difftrans_merge_ranks", NULL};

static int dup_opt(const cJSON *j, const char *key, char **out, const char *path, dt_error *err) {
    const char *s = NULL;
    if (tk_json_string(j, key, &s, "model", path, err) != 0) return -1;
    if (s && !(*out = tk_strdup(s))) return dt_fail_oom(err, "%s: out of memory", path);
    return 0;
}

static int parse_vocab(tk_bpe *m, const cJSON *vocab, const char *path, dt_error *err) {
    if (!cJSON_IsObject(vocab)) return dt_fail_format(err, "%s: model.vocab is missing or not an object", path);
    int32_t n = 0, max_id = -1;
    size_t bytes = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!cJSON_IsNumber(e) || v < 0 || v > INT_MAX - 1 || v != (double)(int32_t)v)
            return dt_fail_format(err, "%s: model.vocab: token \"%.100s\" has an invalid id (ids are integers >= 0)",
                                  path, e->string);
        if ((int32_t)v > max_id) max_id = (int32_t)v;
        bytes += strlen(e->string) + 1;
        n++;
    }
    if (n == 0) return dt_fail_format(err, "%s: model.vocab is empty", path);
    /* Published vocabularies may leave ids unused (cl100k and o200k have holes below their special
     * tokens), and the reference accepts them; the id table is sized by the largest id, so a few
     * entries must not be able to claim gigabytes of it. */
    const int64_t max_allowed = 2 * (int64_t)n + VOCAB_HOLE_SLACK;
    if (max_id > max_allowed)
        return dt_fail_format(
            err,
            "%s: model.vocab: id %d is past the vocabulary of %d tokens (ids may leave holes, but must "
            "stay below 2 x %d + %d = %lld)",
            path, max_id, n, n, VOCAB_HOLE_SLACK, (long long)max_allowed + 1);
    m->n_vocab = max_id + 1;
    m->n_entries = n;
    m->strings = malloc(bytes);
    m->tok_off = malloc((size_t)m->n_vocab * sizeof *m->tok_off);
    m->tok_len = calloc((size_t)m->n_vocab, sizeof *m->tok_len);
    m->map_cap = pow2_at_least(2 * (size_t)n);
    m->map_slots = malloc(m->map_cap * sizeof *m->map_slots);
    if (!m->strings || !m->tok_off || !m->tok_len || !m->map_slots) return dt_fail_oom(err, "%s: out of memory", path);
    memset(m->tok_off, 0xFF, (size_t)m->n_vocab * sizeof *m->tok_off);
    memset(m->map_slots, 0xFF, m->map_cap * sizeof *m->map_slots);
    size_t off = 0;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = (int32_t)e->valuedouble;
        size_t len = strlen(e->string);
        if (m->tok_off[id] != UINT64_MAX)
            return dt_fail_format(err, "%s: model.vocab: duplicate id %d (tokens \"%.100s\" and \"%.100s\")", path, id,
                                  tok_str(m, id), e->string);
        if (tk_bpe_lookup(m, e->string, len) >= 0)
            return dt_fail_format(err, "%s: model.vocab: token \"%.100s\" appears twice", path, e->string);
        memcpy(m->strings + off, e->string, len + 1);
        m->tok_off[id] = off;
        m->tok_len[id] = (uint32_t)len;
        off += len + 1;
        size_t mask = m->map_cap - 1, i = (size_t)tk_hash(e->string, len) & mask;
        while (m->map_slots[i] >= 0) i = (i + 1) & mask;
        m->map_slots[i] = id;
    }
    m->strings_len = off;
    return 0;
}

static int lookup_or_fail(const tk_bpe *m, const char *s, size_t n, int32_t *id, int rank, const char *path,
                          dt_error *err) {
    *id = tk_bpe_lookup(m, s, n);
    if (*id < 0)
        return dt_fail_format(err, "%s: model.merges[%d] names \"%.*s\", which is not in the vocabulary", path, rank,
                              (int)(n > 100 ? 100 : n), s);
    return 0;
}

/* model.difftrans_merge_ranks: one rank per merge, nondecreasing from 0, where equal ranks tie and
 * a tie goes to the leftmost pair. llama.cpp's SentencePiece joins pieces so: best score first,
 * at equal scores the leftmost, whichever tokens they make. A merges list cannot say it (its
 * order is total), so the GGUF reader writes the ranks beside it, under a name that the Rust
 * library ignores (it then ranks tied merges by their place in the list). ranks[k] on success
 * (malloc'd), or NULL without the key. */
static int parse_ranks(const cJSON *j, int n_merges, uint32_t **ranks, const char *path, dt_error *err) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "difftrans_merge_ranks");
    *ranks = NULL;
    if (!r || cJSON_IsNull(r)) return 0;
    if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) != n_merges)
        return dt_fail_format(err, "%s: model.difftrans_merge_ranks must be an array of %d ranks, one per merge", path,
                              n_merges);
    *ranks = malloc((size_t)(n_merges ? n_merges : 1) * sizeof **ranks);
    if (!*ranks) return dt_fail_oom(err, "%s: out of memory", path);
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, r) {
        const double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        const double prev = k ? (double)(*ranks)[k - 1] : 0;
        /* the range first: only then is v a value uint32_t holds */
        if (!cJSON_IsNumber(e) || v < prev || v > (k ? prev + 1 : 0) || v != (double)(uint32_t)v) {
            free(*ranks);
            *ranks = NULL;
            return dt_fail_format(err, "%s: model.difftrans_merge_ranks[%d] is not %s", path, k,
                                  k ? "the rank before it or the next integer (ranks run 0, 1, ... in the merges' "
                                      "order)"
                                    : "0");
        }
        (*ranks)[k++] = (uint32_t)v;
    }
    return 0;
}

static int parse_merges(tk_bpe *m, const cJSON *merges, const uint32_t *ranks, const char *path, dt_error *err) {
    if (!cJSON_IsArray(merges)) return dt_fail_format(err, "%s: model.merges is missing or not an array", path);
    size_t cnt = (size_t)cJSON_GetArraySize(merges);
    m->merge_cap = pow2_at_least(2 * cnt + 2);
    m->merge_keys = malloc(m->merge_cap * sizeof *m->merge_keys);
    m->merge_rank = malloc(m->merge_cap * sizeof *m->merge_rank);
    m->merge_new = malloc(m->merge_cap * sizeof *m->merge_new);
    if (!m->merge_keys || !m->merge_rank || !m->merge_new) return dt_fail_oom(err, "%s: out of memory", path);
    memset(m->merge_new, 0xFF, m->merge_cap * sizeof *m->merge_new);
    size_t prefix_len = m->prefix ? strlen(m->prefix) : 0;
    tk_buf joined = {0};
    int rank = 0, rc = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(e)) {
            /* "a b": exactly one space (the Rust library splits on ' ' and wants two parts) */
            a = e->valuestring;
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                rc = dt_fail_format(err, "%s: model.merges[%d] \"%.100s\" is not two tokens separated by one space",
                                    path, rank, a);
                break;
            }
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring;
            b = e->child->next->valuestring;
            la = strlen(a);
            lb = strlen(b);
        } else {
            rc = dt_fail_format(err, "%s: model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", path, rank);
            break;
        }
        int32_t ia, ib, inew;
        if (lookup_or_fail(m, a, la, &ia, rank, path, err) != 0 || lookup_or_fail(m, b, lb, &ib, rank, path, err) != 0) {
            rc = -1;
            break;
        }
        if (lb < prefix_len) {
            rc = dt_fail_format(err, "%s: model.merges[%d]: \"%.100s\" is shorter than continuing_subword_prefix", path,
                                rank, b);
            break;
        }
        joined.n = 0;
        if (tk_buf_put(&joined, a, la) != 0 || tk_buf_put(&joined, b + prefix_len, lb - prefix_len) != 0) {
            rc = dt_fail_oom(err, "%s: out of memory", path);
            break;
        }
        if (lookup_or_fail(m, joined.p, joined.n, &inew, rank, path, err) != 0) {
            rc = -1;
            break;
        }
        merge_insert(m, ia, ib, ranks ? ranks[rank] : (uint32_t)rank, inew);
        rank++;
    }
    tk_buf_free(&joined);
    return rc;
}

int tk_bpe_parse(tk_bpe *m, const cJSON *j, const char *path, dt_error *err) {
    memset(m, 0, sizeof *m);
    m->unk_id = -1;
    for (int b = 0; b < 256; b++) m->byte_ids[b] = -1;
    if (!cJSON_IsObject(j)) return dt_fail_format(err, "%s: \"model\" is missing or not an object", path);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
    if (type && !cJSON_IsString(type)) return dt_fail_format(err, "%s: model.type is not a string", path);
    if (type && strcmp(type->valuestring, "BPE") != 0)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: model type \"%s\" is not supported (only BPE)", path,
                            type->valuestring);
    if (!type && !cJSON_GetObjectItemCaseSensitive(j, "merges"))
        return dt_fail_format(err, "%s: model has no \"type\" and no merges (only BPE is supported)", path);
    if (tk_json_only(j, KEYS_BPE, "model BPE", path, err) != 0) return -1;
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(j, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: model BPE: dropout is not supported (encoding would be random)", path);
    if (dup_opt(j, "unk_token", &m->unk_token, path, err) != 0 ||
        dup_opt(j, "continuing_subword_prefix", &m->prefix, path, err) != 0 ||
        dup_opt(j, "end_of_word_suffix", &m->suffix, path, err) != 0 ||
        tk_json_bool(j, "fuse_unk", &m->fuse_unk, "model BPE", path, err) != 0 ||
        tk_json_bool(j, "byte_fallback", &m->byte_fallback, "model BPE", path, err) != 0 ||
        tk_json_bool(j, "ignore_merges", &m->ignore_merges, "model BPE", path, err) != 0)
        return -1;
    /* An empty prefix / suffix changes nothing; keep NULL for the fast paths. */
    if (m->prefix && !*m->prefix) {
        free(m->prefix);
        m->prefix = NULL;
    }
    if (m->suffix && !*m->suffix) {
        free(m->suffix);
        m->suffix = NULL;
    }
    if (parse_vocab(m, cJSON_GetObjectItemCaseSensitive(j, "vocab"), path, err) != 0) return -1;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(j, "merges");
    uint32_t *ranks = NULL;
    if (!cJSON_IsArray(merges)) return dt_fail_format(err, "%s: model.merges is missing or not an array", path);
    if (parse_ranks(j, cJSON_GetArraySize(merges), &ranks, path, err) != 0) return -1;
    const int rc = parse_merges(m, merges, ranks, path, err);
    free(ranks);
    if (rc != 0) return -1;
    if (m->unk_token) m->unk_id = tk_bpe_lookup(m, m->unk_token, strlen(m->unk_token));
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = tk_bpe_lookup(m, name, 6);
    }
    return 0;
}

void tk_bpe_free(tk_bpe *m) {
    free(m->strings);
    free(m->tok_off);
    free(m->tok_len);
    free(m->map_slots);
    free(m->merge_keys);
    free(m->merge_rank);
    free(m->merge_new);
    free(m->unk_token);
    free(m->prefix);
    free(m->suffix);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- merging one word */

typedef struct {
    int32_t c;                   /* token id */
    int32_t prev, next;          /* neighbours, -1 at the ends */
    uint32_t len;                /* bytes of the input covered; 0 = merged away */
} symbol;

typedef struct {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
} merge_item;

typedef struct {
    symbol *sym;
    size_t n_sym, cap_sym;
    merge_item *heap;
    size_t n_heap, cap_heap;
    tk_buf s;                    /* prefix + char + suffix */
} bpe_scratch;

void tk_bpe_scratch_free(void *p) {
    bpe_scratch *s = p;
    if (!s) return;
    free(s->sym);
    free(s->heap);
    tk_buf_free(&s->s);
    free(s);
}

static int sym_add(bpe_scratch *w, int32_t id, uint32_t len) {
    if (grow_array(&w->sym, &w->cap_sym, w->n_sym + 1, sizeof *w->sym, 64) != 0) return -1;
    int32_t i = (int32_t)w->n_sym;
    w->sym[i] = (symbol){id, i - 1, -1, len};
    if (i > 0) w->sym[i - 1].next = i;
    w->n_sym++;
    return 0;
}

/* min-heap on (rank, pos): the Rust library's BinaryHeap with its reversed ordering; with tied
 * ranks (parse_ranks), the leftmost pair first, as llama.cpp's SentencePiece */
static int item_less(const merge_item *a, const merge_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static int heap_push(bpe_scratch *w, merge_item it) {
    if (grow_array(&w->heap, &w->cap_heap, w->n_heap + 1, sizeof *w->heap, 64) != 0) return -1;
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!item_less(&it, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = it;
    return 0;
}

static merge_item heap_pop(bpe_scratch *w) {
    merge_item top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const merge_item *best = &last;
        if (l < n && item_less(&w->heap[l], best)) {
            m = l;
            best = &w->heap[l];
        }
        if (r < n && item_less(&w->heap[r], best)) m = r;
        if (m == i) break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

static int push_pair(const tk_bpe *m, bpe_scratch *w, int32_t pos) {
    int32_t next = w->sym[pos].next;
    if (next < 0) return 0;
    uint32_t rank;
    int32_t new_id;
    if (!tk_bpe_merge(m, w->sym[pos].c, w->sym[next].c, &rank, &new_id)) return 0;
    return heap_push(w, (merge_item){rank, pos, new_id});
}

static int merge_all(const tk_bpe *m, bpe_scratch *w) {
    w->n_heap = 0;
    for (size_t i = 0; i + 1 < w->n_sym; i++)
        if (push_pair(m, w, (int32_t)i) != 0) return -1;
    while (w->n_heap > 0) {
        merge_item top = heap_pop(w);
        symbol *cur = &w->sym[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        int32_t next_pos = cur->next;
        symbol right = w->sym[next_pos];
        uint32_t rank;
        int32_t new_id;
        /* an entry made stale by an earlier merge */
        if (!tk_bpe_merge(m, cur->c, right.c, &rank, &new_id) || new_id != top.new_id) continue;
        cur->c = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        w->sym[next_pos].len = 0;
        if (right.next >= 0) w->sym[right.next].prev = top.pos;
        if (cur->prev >= 0 && push_pair(m, w, cur->prev) != 0) return -1;
        if (push_pair(m, w, top.pos) != 0) return -1;
    }
    return 0;
}

/* The initial symbols of BPE::merge_word: one per character (with the subword prefix after the
 * first and the word suffix on the last), unknown ones as <0xXX> bytes or the unk token. */
static int initial_symbols(const tk_bpe *m, bpe_scratch *w, const char *s, size_t n) {
    w->n_sym = 0;
    int32_t unk_pending = -1;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < n;) {
        size_t k = (size_t)tk_utf8_len((unsigned char)s[i]);
        if (i + k > n) k = n - i;
        const char *sym = s + i;
        size_t sym_len = k;
        if ((m->prefix && i > 0) || (m->suffix && i + k == n)) {
            w->s.n = 0;
            if ((m->prefix && i > 0 && tk_buf_put(&w->s, m->prefix, strlen(m->prefix)) != 0) ||
                tk_buf_put(&w->s, s + i, k) != 0 ||
                (m->suffix && i + k == n && tk_buf_put(&w->s, m->suffix, strlen(m->suffix)) != 0))
                return -1;
            sym = w->s.p;
            sym_len = w->s.n;
        }
        int32_t id = tk_bpe_lookup(m, sym, sym_len);
        if (id >= 0) {
            if (unk_pending >= 0 && sym_add(w, unk_pending, unk_len) != 0) return -1;
            unk_pending = -1;
            if (sym_add(w, id, (uint32_t)k) != 0) return -1;
        } else {
            int fell_back = 0;
            if (m->byte_fallback) {
                fell_back = 1;
                for (size_t b = 0; b < sym_len && fell_back; b++) fell_back = m->byte_ids[(unsigned char)sym[b]] >= 0;
                /* the byte tokens go in before a pending unk, as in the Rust library */
                for (size_t b = 0; b < sym_len && fell_back; b++)
                    if (sym_add(w, m->byte_ids[(unsigned char)sym[b]], 1) != 0) return -1;
            }
            if (!fell_back && m->unk_token) {
                if (m->unk_id < 0) return -2;
                if (unk_pending >= 0 && m->fuse_unk) unk_len += (uint32_t)k;
                else {
                    if (unk_pending >= 0 && sym_add(w, unk_pending, unk_len) != 0) return -1;
                    unk_pending = m->unk_id;
                    unk_len = (uint32_t)k;
                }
            }
        }
        i += k;
    }
    if (unk_pending >= 0 && sym_add(w, unk_pending, unk_len) != 0) return -1;
    return 0;
}

/* ---------------------------------------------------------------- the word cache */

#define CACHE_SLOTS (1u << 16)   /* cleared when half full: bounded memory, hot words stay */

typedef struct {
    uint64_t hash;
    uint32_t key_off, key_len;   /* into keys */
    uint32_t ids_off, n_ids;     /* into ids */
} cache_entry;

struct tk_word_cache {
    cache_entry *slots;          /* [CACHE_SLOTS], key_len == UINT32_MAX: empty */
    size_t used;
    tk_buf keys;
    int32_t *ids;
    size_t n_ids, cap_ids;
};

tk_word_cache *tk_word_cache_new(void) {
    tk_word_cache *wc = calloc(1, sizeof *wc);
    if (!wc) return NULL;
    wc->slots = malloc(CACHE_SLOTS * sizeof *wc->slots);
    if (!wc->slots) {
        free(wc);
        return NULL;
    }
    memset(wc->slots, 0xFF, CACHE_SLOTS * sizeof *wc->slots);
    return wc;
}

void tk_word_cache_free(tk_word_cache *wc) {
    if (!wc) return;
    free(wc->slots);
    tk_buf_free(&wc->keys);
    free(wc->ids);
    free(wc);
}

static void cache_clear(tk_word_cache *wc) {
    memset(wc->slots, 0xFF, CACHE_SLOTS * sizeof *wc->slots);
    wc->used = 0;
    wc->keys.n = 0;
    wc->n_ids = 0;
}

static cache_entry *cache_find(tk_word_cache *wc, const char *s, size_t n, uint64_t h) {
    size_t i = (size_t)h & (CACHE_SLOTS - 1);
    for (;;) {
        cache_entry *e = &wc->slots[i];
        if (e->key_len == UINT32_MAX) return e;
        if (e->hash == h && e->key_len == n && !memcmp(wc->keys.p + e->key_off, s, n)) return e;
        i = (i + 1) & (CACHE_SLOTS - 1);
    }
}

static int cache_store(tk_word_cache *wc, const char *s, size_t n, uint64_t h, const int32_t *ids, size_t k) {
    if (wc->used >= CACHE_SLOTS / 2 || wc->keys.n + n > UINT32_MAX / 2 || wc->n_ids + k > UINT32_MAX / 2)
        cache_clear(wc);
    if (grow_array(&wc->ids, &wc->cap_ids, wc->n_ids + k, sizeof *wc->ids, 4096) != 0) return -1;
    cache_entry *e = cache_find(wc, s, n, h);
    size_t key_off = wc->keys.n;
    if (tk_buf_put(&wc->keys, s, n) != 0) return -1;
    if (k) memcpy(wc->ids + wc->n_ids, ids, k * sizeof *ids);
    *e = (cache_entry){h, (uint32_t)key_off, (uint32_t)n, (uint32_t)wc->n_ids, (uint32_t)k};
    wc->n_ids += k;
    wc->used++;
    return 0;
}

int tk_bpe_tokenize(const tk_bpe *m, tk_ctx *c, const char *s, size_t n) {
    if (n == 0) return 0;
    if (m->ignore_merges) {
        int32_t id = tk_bpe_lookup(m, s, n);
        if (id >= 0) return tk_ids_push(c, id);
    }
    uint64_t h = tk_hash(s, n);
    tk_word_cache *wc = c->cache;
    if (wc) {
        cache_entry *e = cache_find(wc, s, n, h);
        if (e->key_len != UINT32_MAX) {
            for (uint32_t i = 0; i < e->n_ids; i++)
                if (tk_ids_push(c, wc->ids[e->ids_off + i]) != 0) return -1;
            return 0;
        }
    }
    bpe_scratch *w = c->bpe_scratch;
    if (!w) {
        w = calloc(1, sizeof *w);
        if (!w) return -1;
        c->bpe_scratch = w;
    }
    int rc = initial_symbols(m, w, s, n);
    if (rc != 0) return rc;
    if (merge_all(m, w) != 0) return -1;
    size_t first = c->n_ids;
    for (int32_t i = w->n_sym ? 0 : -1; i >= 0; i = w->sym[i].next)
        if (tk_ids_push(c, w->sym[i].c) != 0) return -1;
    /* a word may give no ids at all (characters outside the vocabulary), c->ids then still NULL */
    if (wc && cache_store(wc, s, n, h, c->n_ids > first ? c->ids + first : NULL, c->n_ids - first) != 0) return -1;
    return 0;
}
