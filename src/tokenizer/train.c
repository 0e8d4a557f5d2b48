/* train.c — learning a byte-level BPE tokenizer (`difftrans tokenizer train`).
 *
 * The text is pre-tokenized by the same pipeline encoding uses (GPT-2's ByteLevel regex, or the
 * Llama-3 Split pattern followed by ByteLevel), so the words counted are exactly the pieces the
 * finished tokenizer will see. Then the classic algorithm: start from the 256 byte symbols, merge
 * the most frequent adjacent pair (ties: the smaller left id, then the smaller right id), update
 * the counts of only the words that hold the pair. The result is a tokenizer.json (and a
 * tokenizer_config.json for AutoTokenizer) that the Rust library loads and encodes identically. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/base.h"
#include "internal.h"
#include "tokenizer/tok.h"

#define LLAMA3_PATTERN                                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"       \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define CHUNK_BYTES ((size_t)4 << 20)

/* ---------------------------------------------------------------- word counting */

typedef struct {
    int32_t *sym;                /* symbol ids */
    int32_t len;
    int64_t count;
} word;

typedef struct {
    /* unique pieces: hash → index into words; the piece bytes live in keys */
    int32_t *slots;
    size_t cap;
    tk_buf keys;
    uint64_t *key_off;           /* per word */
    uint32_t *key_len;
    word *w;
    size_t n, cap_w;
} word_table;

static int table_grow(word_table *t) {
    size_t cap = t->cap ? t->cap * 2 : 1 << 16;
    int32_t *slots = malloc(cap * sizeof *slots);
    if (!slots) return -1;
    memset(slots, 0xFF, cap * sizeof *slots);
    for (size_t i = 0; i < t->n; i++) {
        size_t j = (size_t)tk_hash(t->keys.p + t->key_off[i], t->key_len[i]) & (cap - 1);
        while (slots[j] >= 0) j = (j + 1) & (cap - 1);
        slots[j] = (int32_t)i;
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* Counts one piece (byte-level characters). */
static int table_add(word_table *t, const char *s, size_t n) {
    if (2 * (t->n + 1) > t->cap && table_grow(t) != 0) return -1;
    size_t j = (size_t)tk_hash(s, n) & (t->cap - 1);
    for (;;) {
        int32_t i = t->slots[j];
        if (i < 0) break;
        if (t->key_len[i] == n && !memcmp(t->keys.p + t->key_off[i], s, n)) {
            t->w[i].count++;
            return 0;
        }
        j = (j + 1) & (t->cap - 1);
    }
    if (t->n == t->cap_w) { /* three arrays of one capacity: each keeps what it got */
        size_t cw = t->cap_w, co = t->cap_w, cl = t->cap_w;
        const int bad_w = grow_array(&t->w, &cw, t->n + 1, sizeof *t->w, 4096);
        const int bad_o = grow_array(&t->key_off, &co, t->n + 1, sizeof *t->key_off, 4096);
        const int bad_l = grow_array(&t->key_len, &cl, t->n + 1, sizeof *t->key_len, 4096);
        if (bad_w || bad_o || bad_l) return -1;
        t->cap_w = cw;
    }
    t->key_off[t->n] = t->keys.n;
    t->key_len[t->n] = (uint32_t)n;
    if (tk_buf_put(&t->keys, s, n) != 0) return -1;
    t->w[t->n] = (word){NULL, 0, 1};
    t->slots[j] = (int32_t)t->n++;
    return 0;
}

static void table_free(word_table *t) {
    for (size_t i = 0; i < t->n; i++) free(t->w[i].sym);
    free(t->w);
    free(t->slots);
    free(t->key_off);
    free(t->key_len);
    tk_buf_free(&t->keys);
}

/* Reads the file in chunks that end at a newline and counts its pieces. */
static int count_file(const char *path, const tk_pre *pre, tk_ctx *c, word_table *t, size_t *bytes, dt_error *err) {
    FILE *fp = open_regular_file(path, err);
    if (!fp) return -1;
    char *buf = malloc(CHUNK_BYTES + 1);
    if (!buf) {
        fclose(fp);
        return dt_fail_oom(err, "%s: out of memory", path);
    }
    size_t keep = 0, offset = 0;
    int rc = 0;
    for (;;) {
        size_t got = fread(buf + keep, 1, CHUNK_BYTES - keep, fp);
        size_t have = keep + got;
        int last = got == 0 || feof(fp);
        if (ferror(fp)) {
            rc = dt_fail_io(err, "%s: read failed", path);
            break;
        }
        if (have == 0) break;
        size_t cut = have;
        if (!last) { /* end the chunk after its last newline */
            while (cut > 0 && buf[cut - 1] != '\n') cut--;
            if (cut == 0) cut = have;
            /* never cut inside a UTF-8 sequence */
            while (cut < have && cut > 0 && ((unsigned char)buf[cut] & 0xC0) == 0x80) cut--;
        }
        size_t bad = tk_utf8_check(buf, cut);
        if (bad != cut && (last || cut - bad > 3)) {
            rc = dt_fail_format(err, "%s: invalid UTF-8 at byte %zu", path, offset + bad);
            break;
        }
        if (bad != cut) cut = bad; /* a sequence cut by the chunk end: finish it next round */
        tk_pieces_clear(&c->a);
        if (cut && tk_pieces_add(&c->a, buf, cut, -1, offset == 0) != 0) rc = -1;
        if (rc == 0 && tk_pre_apply(pre, c) != 0) rc = -1;
        for (size_t i = 0; rc == 0 && i < c->a.n; i++) rc = table_add(t, tk_piece_str(&c->a, i), c->a.v[i].len);
        if (rc != 0) {
            rc = dt_fail_oom(err, "%s: out of memory while counting words", path);
            break;
        }
        *bytes += cut;
        offset += cut;
        memmove(buf, buf + cut, have - cut);
        keep = have - cut;
        if (last && keep == 0) break;
        if (last && keep > 0 && got == 0) {
            rc = dt_fail_format(err, "%s: invalid UTF-8 at byte %zu", path, offset);
            break;
        }
    }
    free(buf);
    fclose(fp);
    return rc;
}

/* ---------------------------------------------------------------- pair statistics */

typedef struct {
    uint64_t *key;               /* (a << 32) | b; UINT64_MAX empty */
    int64_t *count;
    int32_t **where;             /* word indices holding the pair (may repeat, may be stale) */
    int32_t *n_where, *cap_where;
    size_t cap, used;
} pair_map;

static size_t pm_slot(const pair_map *m, uint64_t k) {
    uint64_t h = k * 0x9E3779B97F4A7C15ULL;
    size_t i = (size_t)(h ^ (h >> 29)) & (m->cap - 1);
    while (m->key[i] != UINT64_MAX && m->key[i] != k) i = (i + 1) & (m->cap - 1);
    return i;
}

static int pm_init(pair_map *m, size_t cap) {
    memset(m, 0, sizeof *m);
    m->cap = cap;
    m->key = malloc(cap * sizeof *m->key);
    m->count = calloc(cap, sizeof *m->count);
    m->where = calloc(cap, sizeof *m->where);
    m->n_where = calloc(cap, sizeof *m->n_where);
    m->cap_where = calloc(cap, sizeof *m->cap_where);
    if (!m->key || !m->count || !m->where || !m->n_where || !m->cap_where) return -1;
    memset(m->key, 0xFF, cap * sizeof *m->key);
    return 0;
}

static void pm_free(pair_map *m) {
    for (size_t i = 0; i < m->cap && m->where; i++) free(m->where[i]);
    free(m->key);
    free(m->count);
    free(m->where);
    free(m->n_where);
    free(m->cap_where);
}

static int pm_rehash(pair_map *m) {
    pair_map n;
    if (pm_init(&n, m->cap * 2) != 0) {
        pm_free(&n);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->key[i] == UINT64_MAX) continue;
        size_t j = pm_slot(&n, m->key[i]);
        n.key[j] = m->key[i];
        n.count[j] = m->count[i];
        n.where[j] = m->where[i];
        n.n_where[j] = m->n_where[i];
        n.cap_where[j] = m->cap_where[i];
        m->where[i] = NULL;
    }
    n.used = m->used;
    pm_free(m);
    *m = n;
    return 0;
}

/* Adds delta to the pair's count; with word >= 0 also records where it occurs. Returns the slot
 * or -1 when out of memory. */
static long pm_add(pair_map *m, int32_t a, int32_t b, int64_t delta, int32_t w) {
    if (2 * (m->used + 1) > m->cap && pm_rehash(m) != 0) return -1;
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = pm_slot(m, k);
    if (m->key[i] == UINT64_MAX) {
        m->key[i] = k;
        m->used++;
    }
    m->count[i] += delta;
    if (w >= 0) {
        if (m->n_where[i] == m->cap_where[i]) {
            int32_t cap = m->cap_where[i] ? 2 * m->cap_where[i] : 4;
            int32_t *v = realloc(m->where[i], (size_t)cap * sizeof *v);
            if (!v) return -1;
            m->where[i] = v;
            m->cap_where[i] = cap;
        }
        if (m->n_where[i] == 0 || m->where[i][m->n_where[i] - 1] != w) m->where[i][m->n_where[i]++] = w;
    }
    return (long)i;
}

/* max-heap of (count, pair) with lazy invalidation */
typedef struct {
    int64_t count;
    uint64_t key;
} heap_item;

typedef struct {
    heap_item *v;
    size_t n, cap;
} pair_heap;

static int better(const heap_item *x, const heap_item *y) {
    return x->count != y->count ? x->count > y->count : x->key < y->key;
}

static int heap_push(pair_heap *h, int64_t count, uint64_t key) {
    if (grow_array(&h->v, &h->cap, h->n + 1, sizeof *h->v, 1024) != 0) return -1;
    heap_item it = {count, key};
    size_t i = h->n++;
    while (i > 0 && better(&it, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = it;
    return 0;
}

static heap_item heap_pop(pair_heap *h) {
    heap_item top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const heap_item *best = &last;
        if (l < h->n && better(&h->v[l], best)) best = &h->v[m = l];
        if (r < h->n && better(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* ---------------------------------------------------------------- the merges */

typedef struct {
    tk_buf strings;              /* every symbol's byte-level string, back to back */
    uint64_t *off;
    uint32_t *len;
    int32_t n;
    size_t cap;
    int32_t (*merges)[2];
    int32_t n_merges;
} symbols;

static int sym_new(symbols *s, const char *str, size_t n) {
    if ((size_t)s->n == s->cap) { /* two arrays of one capacity: each keeps what it got */
        size_t co = s->cap, cl = s->cap;
        const int bad_o = grow_array(&s->off, &co, (size_t)s->n + 1, sizeof *s->off, 1024);
        const int bad_l = grow_array(&s->len, &cl, (size_t)s->n + 1, sizeof *s->len, 1024);
        if (bad_o || bad_l) return -1;
        s->cap = co;
    }
    s->off[s->n] = s->strings.n;
    s->len[s->n] = (uint32_t)n;
    if (tk_buf_put(&s->strings, str, n) != 0) return -1;
    return s->n++;
}

/* Replaces every (a, b) in word w by m, moving its pair counts. */
static int merge_word(word *w, int32_t wi, int32_t a, int32_t b, int32_t m, pair_map *pm, pair_heap *h) {
    for (int32_t i = 0; i + 1 < w->len; i++)
        if (pm_add(pm, w->sym[i], w->sym[i + 1], -w->count, -1) < 0) return -1;
    int32_t k = 0;
    for (int32_t i = 0; i < w->len; i++) {
        if (i + 1 < w->len && w->sym[i] == a && w->sym[i + 1] == b) {
            w->sym[k++] = m;
            i++;
        } else
            w->sym[k++] = w->sym[i];
    }
    w->len = k;
    for (int32_t i = 0; i + 1 < w->len; i++) {
        long slot = pm_add(pm, w->sym[i], w->sym[i + 1], w->count, wi);
        if (slot < 0) return -1;
        if ((w->sym[i] == m || w->sym[i + 1] == m) && heap_push(h, pm->count[slot], pm->key[slot]) != 0) return -1;
    }
    return 0;
}

static int learn(word_table *t, symbols *s, int32_t n_merges, int64_t min_frequency, int quiet, dt_error *err) {
    pair_map pm;
    pair_heap h = {0};
    int rc = 0;
    if (pm_init(&pm, 1 << 16) != 0) rc = -1;
    for (size_t wi = 0; rc == 0 && wi < t->n; wi++) {
        word *w = &t->w[wi];
        for (int32_t i = 0; rc == 0 && i + 1 < w->len; i++)
            if (pm_add(&pm, w->sym[i], w->sym[i + 1], w->count, (int32_t)wi) < 0) rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < pm.cap; i++)
        if (pm.key[i] != UINT64_MAX && heap_push(&h, pm.count[i], pm.key[i]) != 0) rc = -1;
    s->merges = malloc((size_t)(n_merges ? n_merges : 1) * sizeof *s->merges);
    if (!s->merges) rc = -1;
    time_t start = time(NULL), last_report = start;
    char *seen = calloc(t->n ? t->n : 1, 1);
    if (!seen) rc = -1;
    while (rc == 0 && s->n_merges < n_merges && h.n > 0) {
        heap_item top = heap_pop(&h);
        size_t slot = pm_slot(&pm, top.key);
        int64_t now = pm.key[slot] == top.key ? pm.count[slot] : 0;
        if (now != top.count) { /* stale: requeue with the current count */
            if (now > 0 && heap_push(&h, now, top.key) != 0) rc = -1;
            continue;
        }
        if (now < min_frequency || now <= 0) break;
        int32_t a = (int32_t)(top.key >> 32), b = (int32_t)(uint32_t)top.key;
        size_t la = s->len[a], lb = s->len[b];
        tk_buf joined = {0};
        int32_t m = -1;
        if (tk_buf_put(&joined, s->strings.p + s->off[a], la) == 0 &&
            tk_buf_put(&joined, s->strings.p + s->off[b], lb) == 0)
            m = sym_new(s, joined.p, joined.n);
        tk_buf_free(&joined);
        if (m < 0) {
            rc = -1;
            break;
        }
        s->merges[s->n_merges][0] = a;
        s->merges[s->n_merges][1] = b;
        s->n_merges++;
        /* the word list of this slot may grow while merging: copy it first */
        int32_t nw = pm.n_where[slot];
        int32_t *ws = malloc((size_t)(nw ? nw : 1) * sizeof *ws);
        if (!ws) {
            rc = -1;
            break;
        }
        if (nw) memcpy(ws, pm.where[slot], (size_t)nw * sizeof *ws);
        for (int32_t i = 0; i < nw && rc == 0; i++) {
            int32_t wi = ws[i];
            if (seen[wi]) continue;
            seen[wi] = 1;
            word *w = &t->w[wi];
            int has = 0;
            for (int32_t k = 0; k + 1 < w->len && !has; k++) has = w->sym[k] == a && w->sym[k + 1] == b;
            if (has) rc = merge_word(w, wi, a, b, m, &pm, &h);
        }
        for (int32_t i = 0; i < nw; i++) seen[ws[i]] = 0;
        free(ws);
        time_t now_t = time(NULL);
        if (!quiet && (now_t != last_report || s->n_merges == n_merges)) {
            last_report = now_t;
            double el = difftime(now_t, start);
            fprintf(stderr, "\rmerges %d/%d  (last: count %lld)  %.0fs elapsed  ETA %.0fs   ", s->n_merges, n_merges,
                    (long long)now, el, s->n_merges ? el * (n_merges - s->n_merges) / s->n_merges : 0.0);
        }
    }
    if (!quiet) fprintf(stderr, "\n");
    free(seen);
    free(h.v);
    pm_free(&pm);
    return rc == 0 ? 0 : dt_fail_oom(err, "out of memory while learning merges");
}

/* ---------------------------------------------------------------- writing */

static cJSON *pre_tokenizer_json(const char *pattern) {
    if (!strcmp(pattern, "gpt2"))
        return cJSON_Parse("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}");
    cJSON *root = cJSON_Parse("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{},"
                              "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
                              "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}");
    if (!root) return NULL;
    cJSON *pat = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "pretokenizers"), 0), "pattern");
    if (!cJSON_AddStringToObject(pat, "Regex", LLAMA3_PATTERN)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static cJSON *bytelevel_json(void) {
    return cJSON_Parse("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}");
}

/* Appends {kind: {"id": id, "type_id": type_id}} (a TemplateProcessing item); 0 when out of memory. */
static int add_template_item(cJSON *items, const char *kind, const char *id, int type_id) {
    cJSON *item = cJSON_CreateObject(), *inner = cJSON_CreateObject();
    if (!item || !inner || !cJSON_AddStringToObject(inner, "id", id) ||
        !cJSON_AddNumberToObject(inner, "type_id", type_id) || !cJSON_AddItemToObject(item, kind, inner)) {
        cJSON_Delete(item);
        cJSON_Delete(inner);
        return 0;
    }
    if (cJSON_AddItemToArray(items, item)) return 1;
    cJSON_Delete(item); /* inner with it */
    return 0;
}

static cJSON *tokenizer_json(const symbols *s, const dt_tok_train_options *o, const char *const *specials,
                             int n_specials) {
    cJSON *root = cJSON_CreateObject(), *added = cJSON_CreateArray(), *vocab = cJSON_CreateObject(),
          *merges = cJSON_CreateArray(), *model = cJSON_CreateObject();
    int ok = root && added && vocab && merges && model;
    if (ok) {
        cJSON_AddItemToObject(root, "version", cJSON_CreateString("1.0"));
        cJSON_AddItemToObject(root, "truncation", cJSON_CreateNull());
        cJSON_AddItemToObject(root, "padding", cJSON_CreateNull());
        cJSON_AddItemToObject(root, "added_tokens", added);
        cJSON_AddItemToObject(root, "normalizer", cJSON_CreateNull());
        cJSON_AddItemToObject(root, "pre_tokenizer", pre_tokenizer_json(o->pattern));
    }
    char *name = NULL;
    for (int i = 0; ok && i < n_specials; i++) {
        cJSON *t = cJSON_CreateObject();
        ok = t && cJSON_AddNumberToObject(t, "id", s->n + i) && cJSON_AddStringToObject(t, "content", specials[i]) &&
             cJSON_AddFalseToObject(t, "single_word") && cJSON_AddFalseToObject(t, "lstrip") &&
             cJSON_AddFalseToObject(t, "rstrip") && cJSON_AddFalseToObject(t, "normalized") &&
             cJSON_AddTrueToObject(t, "special");
        if (t) cJSON_AddItemToArray(added, t);
    }
    /* post-processor: the bos token before the text when there is one; a pair as HF's Llama 3
     * tokenizer has it, each sequence after its own bos, the second's of type 1 */
    if (ok && o->bos && *o->bos) {
        cJSON *tp = cJSON_CreateObject(), *single = cJSON_CreateArray(), *pair = cJSON_CreateArray(),
              *st = cJSON_CreateObject(), *entry = cJSON_CreateObject(), *ids = cJSON_CreateArray(),
              *toks = cJSON_CreateArray();
        ok = tp && single && pair && st && entry && ids && toks;
        if (ok) {
            cJSON_AddStringToObject(tp, "type", "TemplateProcessing");
            cJSON_AddItemToObject(tp, "single", single);
            cJSON_AddItemToObject(tp, "pair", pair);
            cJSON_AddItemToObject(tp, "special_tokens", st);
            cJSON_AddStringToObject(entry, "id", o->bos);
            cJSON_AddItemToObject(entry, "ids", ids);
            cJSON_AddItemToObject(entry, "tokens", toks);
            cJSON_AddItemToObject(st, o->bos, entry);
            cJSON_AddItemToObject(root, "post_processor", tp);
            const char *bos = o->bos;
            ok = add_template_item(single, "SpecialToken", bos, 0) && add_template_item(single, "Sequence", "A", 0) &&
                 add_template_item(pair, "SpecialToken", bos, 0) && add_template_item(pair, "Sequence", "A", 0) &&
                 add_template_item(pair, "SpecialToken", bos, 1) && add_template_item(pair, "Sequence", "B", 1) &&
                 cJSON_AddItemToArray(ids, cJSON_CreateNumber(s->n)) &&
                 cJSON_AddItemToArray(toks, cJSON_CreateString(o->bos));
        } else {
            cJSON_Delete(tp), cJSON_Delete(single), cJSON_Delete(pair), cJSON_Delete(st), cJSON_Delete(entry);
            cJSON_Delete(ids), cJSON_Delete(toks);
        }
    } else if (ok)
        cJSON_AddItemToObject(root, "post_processor", cJSON_CreateNull());
    if (ok) {
        cJSON_AddItemToObject(root, "decoder", bytelevel_json());
        cJSON_AddStringToObject(model, "type", "BPE");
        cJSON_AddItemToObject(model, "dropout", cJSON_CreateNull());
        cJSON_AddItemToObject(model, "unk_token", cJSON_CreateNull());
        cJSON_AddItemToObject(model, "continuing_subword_prefix", cJSON_CreateNull());
        cJSON_AddItemToObject(model, "end_of_word_suffix", cJSON_CreateNull());
        cJSON_AddFalseToObject(model, "fuse_unk");
        cJSON_AddFalseToObject(model, "byte_fallback");
        cJSON_AddBoolToObject(model, "ignore_merges", !strcmp(o->pattern, "llama3"));
    }
    for (int32_t i = 0; ok && i < s->n; i++) {
        name = malloc(s->len[i] + 1);
        ok = name != NULL;
        if (ok) {
            memcpy(name, s->strings.p + s->off[i], s->len[i]);
            name[s->len[i]] = '\0';
            ok = cJSON_AddNumberToObject(vocab, name, i) != NULL;
        }
        free(name);
    }
    for (int32_t i = 0; ok && i < s->n_merges; i++) {
        cJSON *pair = cJSON_CreateArray();
        ok = pair != NULL;
        for (int k = 0; ok && k < 2; k++) {
            int32_t id = s->merges[i][k];
            name = malloc(s->len[id] + 1);
            ok = name != NULL;
            if (ok) {
                memcpy(name, s->strings.p + s->off[id], s->len[id]);
                name[s->len[id]] = '\0';
                cJSON *str = cJSON_CreateString(name);
                ok = str != NULL;
                if (ok) cJSON_AddItemToArray(pair, str);
            }
            free(name);
        }
        if (pair) cJSON_AddItemToArray(merges, pair);
    }
    if (ok) {
        cJSON_AddItemToObject(model, "vocab", vocab);
        cJSON_AddItemToObject(model, "merges", merges);
        cJSON_AddItemToObject(root, "model", model);
        return root;
    }
    cJSON_Delete(root);
    cJSON_Delete(vocab);
    cJSON_Delete(merges);
    cJSON_Delete(model);
    return NULL;
}

static int add_token_field(cJSON *cfg, const char *key, const char *value) {
    if (!value || !*value) return cJSON_AddNullToObject(cfg, key) != NULL;
    return cJSON_AddStringToObject(cfg, key, value) != NULL;
}

static int write_json(const char *dir, const char *name, cJSON *j, dt_error *err) {
    char path[4096 + 64];
    if (dt_pathf(path, sizeof path, err, "%s/%s", dir, name) != 0) return -1;
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    if (!text) return dt_fail_oom(err, "%s: out of memory", path);
    int rc = write_text_atomic(path, text, err);
    cJSON_free(text);
    return rc;
}

/* tokenizer_config.json: the class AutoTokenizer needs and the special tokens (NULL / "": none). */
static cJSON *tokenizer_config_json(const char *bos, const char *eos, const char *pad) {
    cJSON *cfg = cJSON_CreateObject();
    int ok = cfg && cJSON_AddStringToObject(cfg, "tokenizer_class", "PreTrainedTokenizerFast") &&
             add_token_field(cfg, "bos_token", bos) && add_token_field(cfg, "eos_token", eos) &&
             add_token_field(cfg, "pad_token", pad) && cJSON_AddFalseToObject(cfg, "clean_up_tokenization_spaces") &&
             cJSON_AddNumberToObject(cfg, "model_max_length", 1e30);
    if (ok) return cfg;
    cJSON_Delete(cfg);
    return NULL;
}

/* The 256 byte symbols first: id = byte value. */
static int add_byte_symbols(symbols *s) {
    for (int b = 0; b < 256; b++) {
        char ch[4];
        if (sym_new(s, ch, (size_t)tk_utf8_encode(tk_byte_to_char[b], ch)) < 0) return -1;
    }
    return 0;
}

static void symbols_free(symbols *s) {
    tk_buf_free(&s->strings);
    free(s->off);
    free(s->len);
    free(s->merges);
}

/* A byte-level model's ids as a tokenizer: what learning no merges from any text gives. */
int tokenizer_bytes_json(char **json_text, char **config_text) {
    *json_text = *config_text = NULL;
    symbols s = {0};
    dt_tok_train_options o;
    dt_tok_train_defaults(&o);
    o.pattern = "gpt2";
    o.bos = o.eos = o.pad = NULL;
    cJSON *tok = add_byte_symbols(&s) == 0 ? tokenizer_json(&s, &o, NULL, 0) : NULL;
    cJSON *cfg = tokenizer_config_json(NULL, NULL, NULL);
    *json_text = tok ? cJSON_PrintUnformatted(tok) : NULL;
    *config_text = cfg ? cJSON_Print(cfg) : NULL;
    cJSON_Delete(tok);
    cJSON_Delete(cfg);
    symbols_free(&s);
    if (*json_text && *config_text) return 0;
    cJSON_free(*json_text);
    cJSON_free(*config_text);
    *json_text = *config_text = NULL;
    return -1;
}

void dt_tok_train_defaults(dt_tok_train_options *o) {
    memset(o, 0, sizeof *o);
    o->vocab_size = 8192;
    o->pattern = "llama3";
    o->bos = "<|begin_of_text|>";
    o->eos = "<|end_of_text|>";
    o->pad = "<|pad|>";
    o->min_frequency = 2;
}

int dt_tok_train(const dt_tok_train_options *o, const char *out_dir, dt_error *err) {
    if (o->n_files < 1) return dt_fail(err, "n_files: no data files");
    if (strcmp(o->pattern, "gpt2") && strcmp(o->pattern, "llama3"))
        return dt_fail(err, "pattern '%s': expected gpt2 or llama3", o->pattern);
    /* below 1 every pair seen once would be merged as if min_frequency were 1: a value nobody means */
    if (o->min_frequency < 1) return dt_fail(err, "min_frequency %d: must be at least 1", o->min_frequency);
    const char *specials[3];
    int n_specials = 0;
    const char *given[3] = {o->bos, o->eos, o->pad};
    static const char *const roles[3] = {"bos", "eos", "pad"};
    for (int i = 0; i < 3; i++) {
        if (!given[i] || !*given[i]) continue;
        size_t len = strlen(given[i]);
        if (tk_utf8_check(given[i], len) != len) return dt_fail(err, "%s: special token is not UTF-8", roles[i]);
        /* one string in two roles is one token serving both, as GPT-2's <|endoftext|> is its bos and
         * eos, and many models pad with their eos */
        int dup = 0;
        for (int k = 0; k < n_specials; k++) dup |= !strcmp(specials[k], given[i]);
        if (!dup) specials[n_specials++] = given[i];
    }
    if (o->vocab_size < 256 + n_specials || o->vocab_size > (1 << 30))
        return dt_fail(err, "vocab_size %d: must be at least 256 bytes + %d special tokens",
                       o->vocab_size, n_specials);
    tk_pre pre;
    cJSON *pj = pre_tokenizer_json(o->pattern);
    if (!pj) return dt_fail_oom(err, "out of memory");
    int rc = tk_pre_parse(&pre, pj, "tokenizer train", err);
    cJSON_Delete(pj);
    if (rc != 0) return -1;
    tk_ctx c;
    word_table t = {0};
    symbols s = {0};
    if (tk_ctx_init(&c) != 0) {
        tk_pre_free(&pre);
        return dt_fail_oom(err, "out of memory");
    }
    size_t bytes = 0;
    for (int f = 0; f < o->n_files && rc == 0; f++) {
        if (!o->quiet) fprintf(stderr, "counting words in %s\n", o->files[f]);
        rc = count_file(o->files[f], &pre, &c, &t, &bytes, err);
    }
    /* as `tokenize` says of it: an empty file among others is taken, and adds nothing */
    for (int f = 0; f < o->n_files && rc == 0 && bytes > 0 && o->n_files > 1; f++) {
        struct stat sb;
        if (stat(o->files[f], &sb) == 0 && sb.st_size == 0)
            fprintf(stderr, "tokenizer train: warning: %s is empty: it adds no text\n", o->files[f]);
    }
    tk_ctx_free(&c);
    tk_pre_free(&pre);
    if (rc == 0 && bytes == 0)
        rc = o->n_files == 1 ? dt_fail_format(err, "%s: no text to learn from (empty data)", o->files[0])
                             : dt_fail_format(err, "%s and every other data file are empty (%d files): no text to "
                                                   "learn from", o->files[0], o->n_files);
    if (rc == 0 && add_byte_symbols(&s) != 0) rc = dt_fail_oom(err, "out of memory");
    for (size_t i = 0; rc == 0 && i < t.n; i++) {
        const char *p = t.keys.p + t.key_off[i];
        size_t n = t.key_len[i], k = 0;
        word *w = &t.w[i];
        w->sym = malloc((n ? n : 1) * sizeof *w->sym);
        if (!w->sym) {
            rc = dt_fail_oom(err, "out of memory");
            break;
        }
        while (k < n) {
            int l;
            w->sym[w->len++] = tk_char_to_byte(tk_utf8_decode(p + k, &l));
            k += (size_t)l;
        }
    }
    if (rc == 0 && !o->quiet)
        fprintf(stderr, "%zu bytes, %zu distinct words; learning %d merges\n", bytes, t.n,
                o->vocab_size - 256 - n_specials);
    if (rc == 0) rc = learn(&t, &s, o->vocab_size - 256 - n_specials, o->min_frequency, o->quiet, err);
    table_free(&t);
    /* a special token that is also a learned (or byte) token would have two ids, and the file would
     * not load: added_tokens must be strings of their own */
    for (int i = 0; i < 3 && rc == 0; i++) {
        if (!given[i] || !*given[i]) continue;
        const size_t len = strlen(given[i]);
        for (int32_t k = 0; k < s.n && rc == 0; k++)
            if (s.len[k] == len && !memcmp(s.strings.p + s.off[k], given[i], len))
                rc = dt_fail(err, "%s '%s': already token %d of the learned vocabulary; a special token must be a "
                                  "string of its own",
                             roles[i], given[i], (int)k);
    }
    if (rc == 0) rc = dir_ensure(out_dir, err);
    if (rc == 0) {
        cJSON *tok = tokenizer_json(&s, o, specials, n_specials);
        rc = write_json(out_dir, "tokenizer.json", tok, err);
        cJSON_Delete(tok);
    }
    if (rc == 0) {
        cJSON *cfg = tokenizer_config_json(o->bos, o->eos, o->pad);
        rc = write_json(out_dir, "tokenizer_config.json", cfg, err);
        cJSON_Delete(cfg);
    }
    if (rc == 0 && !o->quiet)
        fprintf(stderr, "wrote %s/tokenizer.json: %d tokens (%d merges, %d special)\n", out_dir,
                s.n + n_specials, s.n_merges, n_specials);
    symbols_free(&s);
    return rc;
}
