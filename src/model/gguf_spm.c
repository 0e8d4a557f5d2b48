/* gguf_spm.c — SentencePiece ("llama") vocabularies of GGUF files as BPE tokenizers and back
 * (gguf_spm.h; README "GGUF").
 *
 * Both engines grow pieces from the characters of a text by joining two neighbours at a time, the
 * best pair first, ties to the leftmost: llama.cpp's SentencePiece takes any pair whose
 * concatenation is a token, best by that token's score; a BPE takes the pairs its merges list,
 * best by rank. They give the same ids when the merges are exactly the pairs llama.cpp can meet,
 * ranked as the merged tokens' scores rank them:
 *   - reading, the merges are every cut of every token into two tokens, by score, and merges of
 *     equal scores share a rank (model.difftrans_merge_ranks beside the list, which orders them by
 *     id as Hugging Face's converter does): a tie goes to the leftmost pair in difftrans as in
 *     llama.cpp, where a plain Hugging Face tokenizer takes the first in the list. A file where
 *     llama.cpp could join a piece the BPE cannot hold (a character outside the vocabulary, a byte
 *     token) is refused;
 *   - writing, a token's score is the rank of the merges that make it (tied ranks, tied scores),
 *     and every cut of a token into two pieces the BPE can make must be a merge, unless llama.cpp
 *     can never meet the two pieces side by side (below, never_neighbours). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/gguf_spm.h"

#define SPACE_MARK "\xe2\x96\x81" /* "▁" (U+2581), SentencePiece's stand-in for a space */
#define ARROW "\xe2\x86\x92"      /* "→" */
#define NORMALIZER_TEXT "Prepend \"" SPACE_MARK "\" + Replace \" \" " ARROW " \"" SPACE_MARK "\""
#define DECODER_TEXT "Replace \"" SPACE_MARK "\" " ARROW " \" \", ByteFallback, Fuse"

int spm_byte_token(const char *s, size_t len, int *byte) {
    static const char hex[] = "0123456789ABCDEF";
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || !s[3] || !s[4]) return 0;
    const char *hi = memchr(hex, s[3], 16), *lo = memchr(hex, s[4], 16);
    if (!hi || !lo) return 0;
    *byte = (int)((hi - hex) * 16 + (lo - hex));
    return 1;
}

static int is_byte_token(const gguf_str *t) {
    int b;
    return spm_byte_token(t->p, t->len, &b);
}

/* Bytes of the character at s (valid UTF-8). */
static size_t char_len(const char *s) { return (size_t)tk_utf8_len((unsigned char)s[0]); }

/* Characters of valid UTF-8. */
static size_t n_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* Bytes of the last character of valid UTF-8 s[0..n), n > 0. */
static size_t last_char_len(const char *s, size_t n) {
    size_t start = n - 1;
    while (start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80) start--;
    return n - start;
}

/* The cuts of a token s[0..len) into a prefix s[0..k) and a suffix s[k..len), k rising, with the
 * two pieces' tokset hashes in O(1) a cut: looking each piece up by its own hash made a token of
 * L bytes cost O(L²), and a GGUF file with one token of 300 KB took most of a minute to load. */
typedef struct {
    const char *s;
    size_t len, k;
    uint64_t whole, pre;         /* the token's hash, the prefix's */
    uint64_t pw, inv, inv_mul;   /* TOKSET_MUL^k, its inverse, TOKSET_MUL's inverse */
} cut_walk;

static uint64_t mul_inverse(void) {
    uint64_t x = TOKSET_MUL; /* right to 3 bits (an odd number squared is 1 mod 8); Newton doubles them */
    for (int i = 0; i < 5; i++) x *= 2 - TOKSET_MUL * x;
    return x;
}

static void walk_start(cut_walk *w, const char *s, size_t len) {
    *w = (cut_walk){.s = s, .len = len, .whole = tokset_hash(s, len), .pw = 1, .inv = 1, .inv_mul = mul_inverse()};
}

/* Moves the cut on to k (>= the current one). */
static void walk_to(cut_walk *w, size_t k) {
    for (; w->k < k; w->k++) {
        w->pre += (unsigned char)w->s[w->k] * w->pw;
        w->pw *= TOKSET_MUL;
        w->inv *= w->inv_mul;
    }
}

static uint64_t walk_suffix(const cut_walk *w) { return (w->whole - w->pre) * w->inv; }

/* ================================================================ writing */

/* ---------------------------------------------------------------- the tokenizer.json's form */

static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "type") : NULL;
    return cJSON_IsString(t) ? t->valuestring : "";
}

static int str_is(const cJSON *o, const char *key, const char *want) {
    const cJSON *j = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsString(j) && !strcmp(j->valuestring, want);
}

static int num_is(const cJSON *o, const char *key, double want) {
    const cJSON *j = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsNumber(j) && j->valuedouble == want;
}

/* {"type": "Replace", "pattern": {"String": from}, "content": to} */
static int is_replace(const cJSON *o, const char *from, const char *to) {
    return !strcmp(type_of(o), "Replace") && str_is(cJSON_GetObjectItemCaseSensitive(o, "pattern"), "String", from) &&
           str_is(o, "content", to);
}

/* 1: Prepend "▁" then Replace " " → "▁" (add_space_prefix), 0: the Replace alone, -1: other. */
static int spm_normalizer(const cJSON *norm) {
    if (is_replace(norm, " ", SPACE_MARK)) return 0;
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
    if (strcmp(type_of(norm), "Sequence") != 0 || !cJSON_IsArray(items)) return -1;
    const int n = cJSON_GetArraySize(items);
    const cJSON *first = cJSON_GetArrayItem(items, 0), *last = cJSON_GetArrayItem(items, n - 1);
    if (n == 1 && is_replace(first, " ", SPACE_MARK)) return 0;
    if (n == 2 && !strcmp(type_of(first), "Prepend") && str_is(first, "prepend", SPACE_MARK) &&
        is_replace(last, " ", SPACE_MARK))
        return 1;
    return -1;
}

/* Replace "▁" → " ", ByteFallback, Fuse, and Strip " " (start 1) when the normalizer prepends:
 * what llama.cpp's detokenizer does (a space for "▁", bytes for byte tokens, the first space
 * dropped when it added one). */
static int spm_decoder(const cJSON *dec, int add_space_prefix) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(dec, "decoders");
    if (strcmp(type_of(dec), "Sequence") != 0 || !cJSON_IsArray(items) ||
        cJSON_GetArraySize(items) != 3 + add_space_prefix)
        return 0;
    const cJSON *strip = cJSON_GetArrayItem(items, 3);
    return is_replace(cJSON_GetArrayItem(items, 0), SPACE_MARK, " ") &&
           !strcmp(type_of(cJSON_GetArrayItem(items, 1)), "ByteFallback") &&
           !strcmp(type_of(cJSON_GetArrayItem(items, 2)), "Fuse") &&
           (!add_space_prefix || (!strcmp(type_of(strip), "Strip") && str_is(strip, "content", " ") &&
                                  num_is(strip, "start", 1) && num_is(strip, "stop", 0)));
}

static int json_unset(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return !j || cJSON_IsNull(j) || (cJSON_IsString(j) && !*j->valuestring);
}

static int refuse(const char *path, dt_error *err, const char *what) {
    return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                        "%s: the model's tokenizer.json has %s, which llama.cpp's SentencePiece (\"llama\") cannot "
                        "reproduce",
                        path, what);
}

int spm_export_wanted(const dt_tok *tok, const cJSON *root) {
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    return tok->model.byte_fallback || !pre || cJSON_IsNull(pre) || !strcmp(type_of(pre), "Metaspace");
}

int spm_export_form(const dt_tok *tok, const cJSON *root, const char *path, int *add_space_prefix, dt_error *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    char what[200];
    if (!tok->model.byte_fallback)
        return refuse(path, err, "byte_fallback off (llama.cpp gives a character outside the vocabulary as the <0xNN> "
                                 "tokens of its bytes)");
    if (!json_unset(model, "continuing_subword_prefix") || !json_unset(model, "end_of_word_suffix"))
        return refuse(path, err, "a continuing_subword_prefix or end_of_word_suffix");
    if (tok->model.ignore_merges) return refuse(path, err, "ignore_merges (a text that is a token taken whole)");
    if (!strcmp(type_of(pre), "Metaspace"))
        return refuse(path, err,
                      "a Metaspace pre-tokenizer: it puts no \"" SPACE_MARK "\" before a text that begins with a "
                      "space, nor before the text after an added token, where llama.cpp does (its form is Llama 2's "
                      "normalizer, " NORMALIZER_TEXT ")");
    if (pre && !cJSON_IsNull(pre)) {
        snprintf(what, sizeof what, "a pre-tokenizer (%s): llama.cpp's SentencePiece cuts the text nowhere",
                 type_of(pre));
        return refuse(path, err, what);
    }
    *add_space_prefix = spm_normalizer(cJSON_GetObjectItemCaseSensitive(root, "normalizer"));
    if (*add_space_prefix < 0)
        return refuse(path, err, "a normalizer other than " NORMALIZER_TEXT " (or that Replace alone)");
    if (!spm_decoder(cJSON_GetObjectItemCaseSensitive(root, "decoder"), *add_space_prefix))
        return refuse(path, err, *add_space_prefix ? "a decoder other than " DECODER_TEXT ", Strip \" \" (1, 0)"
                                                   : "a decoder other than " DECODER_TEXT);
    for (int b = 0; b < 256; b++) {
        const int32_t id = tok->model.byte_ids[b];
        if (id < 0 || tok->added_of_id[id] >= 0) {
            snprintf(what, sizeof what, "%s <0x%02X> (llama.cpp gives a character outside the vocabulary as its bytes' "
                                        "tokens)",
                     id < 0 ? "no byte token" : "an added token for the byte", b);
            return refuse(path, err, what);
        }
    }
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].normalized) {
            snprintf(what, sizeof what, "an added token (%.60s) found in the normalised text (normalized: true; "
                                        "llama.cpp finds it in the raw text)",
                     tok->added[i].content);
            return refuse(path, err, what);
        }
    return 0;
}

/* ---------------------------------------------------------------- scores */

typedef struct {
    uint32_t rank;
    int32_t a, b, t;             /* left, right, merged token */
} merge_rec;

/* By rank, then (within a tie) by merged token: a token's merges side by side. */
static int by_rank(const void *x, const void *y) {
    const merge_rec *p = x, *q = y;
    if (p->rank != q->rank) return (p->rank > q->rank) - (p->rank < q->rank);
    return (p->t > q->t) - (p->t < q->t);
}

typedef struct {
    const tk_bpe *bpe;
    const gguf_str *tok;
    int64_t n;
    tokset set;
    unsigned char *made;         /* [n] a piece the BPE can make: a character of its vocabulary, or merges of such */
    float *score;
    float *best_first, *best_last; /* [n] for a one-character token c: the best score of a token cut as c + piece,
                                      and as piece + c (-inf when none) */
    const char *path;
    dt_error *err;
} export_ctx;

/* A piece llama.cpp can hold: any one character (its pieces start as the characters), or a token
 * the BPE can make (llama.cpp can too: it joins at least the pairs the merges join). *id: the
 * token, or -1. */
static int usable(const export_ctx *x, const char *s, size_t len, uint64_t hash, int single, int64_t *id) {
    *id = tokset_find_hashed(&x->set, x->tok, s, len, hash);
    return single || (*id >= 0 && x->made[*id]);
}

/* The BPE's merge of tokens a and b, or -1. */
static int64_t merge_of(const tk_bpe *bpe, int64_t a, int64_t b) {
    uint32_t rank;
    int32_t t;
    if (a < 0 || b < 0 || a > INT32_MAX || b > INT32_MAX) return -1;
    return tk_bpe_merge(bpe, (int32_t)a, (int32_t)b, &rank, &t) ? t : -1;
}

/* Whether llama.cpp can never meet pieces l and r side by side, where one of them is a single
 * character present from the start:
 *   - l one character, r longer, starting with character c: l + c is a merge, and better than
 *     every token c + piece. c cannot grow while l stands to its left, so the two are joined (or l
 *     is joined to its own left neighbour) before r can form;
 *   - r one character, l longer, ending with character c: c + r is a merge, and better than every
 *     token piece + c (strictly: at equal scores llama.cpp takes the leftmost pair, piece + c).
 * The same holds in the BPE: the ranks follow the scores. */
static int never_neighbours(const export_ctx *x, const char *l, size_t ll, int left_single, const char *r, size_t rl,
                            int right_single) {
    const size_t cl = left_single ? char_len(r) : last_char_len(l, ll);
    const char *c = left_single ? r : l + ll - cl;
    if (left_single ? right_single : !right_single) return 0;
    if ((left_single ? ll : rl) == cl && !memcmp(left_single ? l : r, c, cl)) return 0; /* the same character */
    const int64_t ic = tokset_find(&x->set, x->tok, c, cl);
    const int64_t other = tokset_find(&x->set, x->tok, left_single ? l : r, left_single ? ll : rl);
    const int64_t u = left_single ? merge_of(x->bpe, other, ic) : merge_of(x->bpe, ic, other);
    if (u < 0 || u >= x->n) return 0;
    return x->score[u] > (left_single ? x->best_first[ic] : x->best_last[ic]);
}

/* Every cut of every token into two pieces llama.cpp can hold: first the best scores of the cuts
 * around each character (check 0), then each cut a merge or never met (check 1). */
static int check_cuts(export_ctx *x, int check) {
    for (int64_t i = 0; i < x->n; i++) {
        const char *s = x->tok[i].p;
        const size_t len = x->tok[i].len;
        const size_t first = char_len(s);
        cut_walk w;
        walk_start(&w, s, len);
        for (size_t k = first, next; k < len; k = next) {
            next = k + char_len(s + k);
            walk_to(&w, k);
            const int l_single = k == first, r_single = next == len;
            int64_t ia, ib;
            if (!usable(x, s, k, w.pre, l_single, &ia) || !usable(x, s + k, len - k, walk_suffix(&w), r_single, &ib))
                continue;
            if (!check) {
                if (ia >= 0 && l_single) x->best_first[ia] = fmaxf(x->best_first[ia], x->score[i]);
                if (ib >= 0 && r_single) x->best_last[ib] = fmaxf(x->best_last[ib], x->score[i]);
                continue;
            }
            if (merge_of(x->bpe, ia, ib) == i || never_neighbours(x, s, k, l_single, s + k, len - k, r_single))
                continue;
            return dt_fail_code(x->err, DT_ERR_UNSUPPORTED,
                                "%s: token %lld \"%.*s\" is \"%.*s\" + \"%.*s\", which no merge of the model's "
                                "tokenizer.json joins: llama.cpp's SentencePiece joins any two neighbouring pieces "
                                "that make a token, and could meet these two (a tokenizer.json converted from "
                                "SentencePiece has a merge for every such cut)",
                                x->path, (long long)i, (int)(len > 60 ? 60 : len), s, (int)(k > 60 ? 60 : k), s,
                                (int)(len - k > 60 ? 60 : len - k), s + k);
        }
    }
    return 0;
}

/* The merges in rank order, none joining a byte token, in groups that llama.cpp scores alike:
 * consecutive merges of one token (a tokenizer.json converted from SentencePiece has one for each
 * cut), or merges of one rank (tied: difftrans_merge_ranks). A token's merges all in one group, a
 * group never both; the token's score -(1 + the index of its group), every other token below
 * them all. */
static int rank_scores(export_ctx *x, merge_rec **out, size_t *n_out) {
    const tk_bpe *bpe = x->bpe;
    merge_rec *v = malloc((bpe->n_merges ? bpe->n_merges : 1) * sizeof *v);
    int64_t *run = malloc((size_t)x->n * sizeof *run);
    *out = v;
    if (!v || !run) {
        free(run);
        return dt_fail_oom(x->err, "%s: out of memory", x->path);
    }
    size_t n = 0;
    for (size_t k = 0; k < bpe->merge_cap; k++)
        if (bpe->merge_new[k] >= 0)
            v[n++] = (merge_rec){bpe->merge_rank[k], (int32_t)(bpe->merge_keys[k] >> 32),
                                 (int32_t)(bpe->merge_keys[k] & 0xFFFFFFFFu), bpe->merge_new[k]};
    qsort(v, n, sizeof *v, by_rank);
    *n_out = n;
    for (int64_t i = 0; i < x->n; i++) run[i] = -1;
    int64_t groups = 0;
    size_t start = 0; /* the group's first merge */
    int many_tokens = 0, many_ranks = 0;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        const merge_rec *e = &v[k];
        const int new_group = k == 0 || (e->rank != v[k - 1].rank && e->t != v[k - 1].t);
        if (new_group) start = k, many_tokens = many_ranks = 0, groups++;
        many_tokens |= e->t != v[start].t;
        many_ranks |= e->rank != v[start].rank;
        if (e->t >= x->n || e->a >= x->n || e->b >= x->n) /* the model's ids are the file's */
            rc = dt_fail(x->err, "%s: merge %u names an id past the vocabulary of %lld", x->path, e->rank,
                         (long long)x->n);
        else if (is_byte_token(&x->tok[e->a]) || is_byte_token(&x->tok[e->b]))
            rc = dt_fail_code(x->err, DT_ERR_UNSUPPORTED,
                              "%s: merge %u of the model's tokenizer.json joins a byte token (\"%.*s\" + \"%.*s\"): "
                              "the BPE can join the bytes it falls back to, which llama.cpp's SentencePiece never does",
                              x->path, e->rank, (int)x->tok[e->a].len, x->tok[e->a].p, (int)x->tok[e->b].len,
                              x->tok[e->b].p);
        else if (many_tokens && many_ranks)
            rc = dt_fail_code(x->err, DT_ERR_UNSUPPORTED,
                              "%s: the merges of the model's tokenizer.json that make token %d \"%.*s\" (rank %u) and "
                              "token %d \"%.*s\" (rank %u) are linked by tied ranks (difftrans_merge_ranks) and by a "
                              "token made at two ranks: llama.cpp scores every way of making a token alike and ties "
                              "equal scores, so it would tie merges that the BPE ranks apart",
                              x->path, v[start].t, (int)(x->tok[v[start].t].len > 60 ? 60 : x->tok[v[start].t].len),
                              x->tok[v[start].t].p, v[start].rank, e->t,
                              (int)(x->tok[e->t].len > 60 ? 60 : x->tok[e->t].len), x->tok[e->t].p, e->rank);
        else if (run[e->t] >= 0 && run[e->t] != groups - 1)
            rc = dt_fail_code(x->err, DT_ERR_UNSUPPORTED,
                              "%s: the merges of the model's tokenizer.json that make token %d \"%.*s\" are not "
                              "consecutive (rank %u comes after other tokens' merges): llama.cpp ranks every way of "
                              "making a token by the token's one score",
                              x->path, e->t, (int)(x->tok[e->t].len > 60 ? 60 : x->tok[e->t].len), x->tok[e->t].p,
                              e->rank);
        else
            run[e->t] = groups - 1;
    }
    for (int64_t i = 0; i < x->n; i++) x->score[i] = -(float)(1 + (run[i] >= 0 ? run[i] : groups));
    free(run);
    return rc;
}

int spm_export_scores(const tk_bpe *bpe, const gguf_str *tok, int64_t n, float *score, const char *path,
                      dt_error *err) {
    export_ctx x = {.bpe = bpe, .tok = tok, .n = n, .score = score, .path = path, .err = err};
    merge_rec *merges = NULL;
    size_t n_merges = 0;
    x.made = calloc((size_t)n, 1);
    x.best_first = malloc((size_t)n * sizeof *x.best_first);
    x.best_last = malloc((size_t)n * sizeof *x.best_last);
    int rc = 0;
    if (!x.made || !x.best_first || !x.best_last || tokset_init(&x.set, n) != 0)
        rc = dt_fail_oom(err, "%s: out of memory", path);
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        tokset_add(&x.set, tok, i); /* distinct: checked by the caller */
        x.best_first[i] = x.best_last[i] = -INFINITY;
        /* a token of the BPE's vocabulary must be the file's token of its id */
        const int in_bpe = i < bpe->n_vocab && bpe->tok_off[i] != UINT64_MAX;
        if (in_bpe && (bpe->tok_len[i] != tok[i].len || memcmp(bpe->strings + bpe->tok_off[i], tok[i].p, tok[i].len)))
            rc = dt_fail_code(err, DT_ERR_UNSUPPORTED,
                              "%s: id %lld is \"%s\" in the model's vocabulary but \"%.*s\" as an added token", path,
                              (long long)i, bpe->strings + bpe->tok_off[i], (int)tok[i].len, tok[i].p);
        /* the BPE starts from the characters of its vocabulary */
        x.made[i] = in_bpe && n_chars(tok[i].p, tok[i].len) == 1;
    }
    if (rc == 0) rc = rank_scores(&x, &merges, &n_merges);
    /* then what their merges make, whatever order the merges come in */
    for (int changed = rc == 0; changed;) {
        changed = 0;
        for (size_t k = 0; k < n_merges; k++)
            if (!x.made[merges[k].t] && x.made[merges[k].a] && x.made[merges[k].b]) x.made[merges[k].t] = changed = 1;
    }
    if (rc == 0) rc = check_cuts(&x, 0);
    if (rc == 0) rc = check_cuts(&x, 1);
    free(merges);
    free(x.made);
    free(x.best_first);
    free(x.best_last);
    free(x.set.slot);
    return rc;
}

/* ================================================================ reading */

typedef struct {
    float score;
    int32_t t, a, b;
} scored_merge;

/* Best score first; then as Hugging Face's converter orders equals: by token id, then by the ids
 * of the left and right pieces (the list's order, which only a plain Hugging Face tokenizer
 * follows within a tie). */
static int by_score(const void *x, const void *y) {
    const scored_merge *p = x, *q = y;
    if (p->score != q->score) return p->score < q->score ? 1 : -1;
    if (p->t != q->t) return p->t < q->t ? -1 : 1;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    return (p->b > q->b) - (p->b < q->b);
}

typedef struct {
    size_t len;
    int32_t id;
} sized_token;

static int by_len(const void *x, const void *y) {
    const sized_token *p = x, *q = y;
    return p->len != q->len ? (p->len > q->len) - (p->len < q->len) : (p->id > q->id) - (p->id < q->id);
}

static int unused(const int32_t *type, int64_t id) { return type && type[id] == TT_UNUSED; }

static int read_scores(const gguf_file *f, int64_t n, float *score, dt_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.scores");
    if (!kv)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: no tokenizer.ggml.scores: llama.cpp's SentencePiece would join pieces leftmost first, "
                            "which no BPE reproduces",
                            f->path);
    if (kv->type != GGUF_TYPE_ARRAY || (kv->elem != GGUF_TYPE_FLOAT32 && kv->elem != GGUF_TYPE_INT32) ||
        kv->n != (uint64_t)n)
        return dt_fail_format(err, "%s: tokenizer.ggml.scores must be %lld f32 (or i32) values, one per token; it "
                                   "holds %llu %s",
                              f->path, (long long)n, kv->type == GGUF_TYPE_ARRAY ? (unsigned long long)kv->n : 1ull,
                              gguf_value_type_name(kv->type == GGUF_TYPE_ARRAY ? kv->elem : kv->type));
    for (int64_t i = 0; i < n; i++) {
        const uint64_t k = (uint64_t)i;
        score[i] = kv->elem == GGUF_TYPE_FLOAT32 ? gguf_array_f32(kv, k) : (float)gguf_array_int(kv, k);
        if (!isfinite(score[i]))
            return dt_fail_format(err, "%s: tokenizer.ggml.scores[%lld] is %g", f->path, (long long)i,
                                  (double)score[i]);
    }
    return 0;
}

int spm_read(const gguf_file *f, const gguf_str *tok, const int32_t *type, int64_t n, float *score, int32_t **pairs,
             uint32_t **ranks, int64_t *n_pairs, dt_error *err) {
    *pairs = NULL;
    *ranks = NULL;
    *n_pairs = 0;
    if (read_scores(f, n, score, err) != 0) return -1;
    tokset set = {0};
    unsigned char *made = calloc((size_t)n, 1);
    sized_token *order = malloc((size_t)n * sizeof *order);
    scored_merge *m = NULL;
    size_t n_m = 0, cap = 0;
    int rc = 0;
    if (!made || !order || tokset_init(&set, n) != 0) rc = dt_fail_oom(err, "%s: out of memory", f->path);
    for (int64_t i = 0; rc == 0 && i < n; i++) {
        tokset_add(&set, tok, i); /* distinct: checked by the caller */
        order[i] = (sized_token){tok[i].len, (int32_t)i};
        int b;
        if (type && type[i] == TT_BYTE && !spm_byte_token(tok[i].p, tok[i].len, &b))
            rc = dt_fail_format(err, "%s: token %lld \"%.*s\" is of type byte but not <0xNN>", f->path, (long long)i,
                                (int)(tok[i].len > 60 ? 60 : tok[i].len), tok[i].p);
    }
    for (int b = 0; rc == 0 && b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        if (tokset_find(&set, tok, name, 6) < 0)
            rc = dt_fail_format(err, "%s: no byte token <0x%02X>: llama.cpp's SentencePiece gives a character outside "
                                     "the vocabulary as its bytes' tokens (and aborts without one)",
                                f->path, b);
    }
    /* shorter tokens first: the pieces of a token are known when it comes */
    if (rc == 0) qsort(order, (size_t)n, sizeof *order, by_len);
    for (int64_t o = 0; rc == 0 && o < n; o++) {
        const int32_t i = order[o].id;
        const char *s = tok[i].p;
        const size_t len = tok[i].len;
        const size_t first = char_len(s);
        made[i] = first == len; /* llama.cpp's pieces start as the characters */
        cut_walk w;
        walk_start(&w, s, len);
        for (size_t k = first, next; rc == 0 && k < len; k = next) {
            next = k + char_len(s + k);
            walk_to(&w, k);
            const gguf_str l = {s, k}, r = {s + k, len - k};
            const int64_t ia = tokset_find_hashed(&set, tok, l.p, l.len, w.pre);
            const int64_t ib = tokset_find_hashed(&set, tok, r.p, r.len, walk_suffix(&w));
            /* pieces llama.cpp can hold: a character, or a token it can make */
            const int ua = k == first || (ia >= 0 && made[ia]);
            const int ub = next == len || (ib >= 0 && made[ib]);
            if (ua && ub) made[i] = 1;
            if (ua && ub && (ia < 0 || ib < 0))
                rc = dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                  "%s: token %d \"%.*s\" joins \"%.*s\", which is no token: llama.cpp's SentencePiece "
                                  "joins a character outside the vocabulary to its neighbour, where a BPE takes the "
                                  "character's bytes",
                                  f->path, i, (int)(len > 60 ? 60 : len), s,
                                  (int)((ia < 0 ? l.len : r.len) > 60 ? 60 : (ia < 0 ? l.len : r.len)),
                                  ia < 0 ? l.p : r.p);
            /* a BPE holds the byte tokens of the characters outside its vocabulary too */
            else if ((ua || is_byte_token(&l)) && (ub || is_byte_token(&r)) && (is_byte_token(&l) || is_byte_token(&r)))
                rc = dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                  "%s: token %d \"%.*s\" joins a byte token: a BPE would join the bytes it falls back "
                                  "to, which llama.cpp's SentencePiece never does",
                                  f->path, i, (int)(len > 60 ? 60 : len), s);
            else if (ia >= 0 && ib >= 0 && !unused(type, i) && !unused(type, ia) && !unused(type, ib)) {
                if (grow_array(&m, &cap, n_m + 1, sizeof *m, 1024) != 0)
                    rc = dt_fail_oom(err, "%s: out of memory", f->path);
                else
                    m[n_m++] = (scored_merge){score[i], i, (int32_t)ia, (int32_t)ib};
            }
        }
        /* the BPE leaves the unused tokens out, as a byte-level one does */
        if (rc == 0 && made[i] && unused(type, i))
            rc = dt_fail_code(err, DT_ERR_UNSUPPORTED,
                              "%s: token %d \"%.*s\" is of type unused, yet llama.cpp's SentencePiece can give it (a "
                              "character, or two pieces joined)",
                              f->path, i, (int)(len > 60 ? 60 : len), s);
    }
    if (rc == 0) {
        if (n_m) qsort(m, n_m, sizeof *m, by_score); /* m is NULL without merges */
        *pairs = malloc((n_m ? n_m : 1) * 2 * sizeof **pairs);
        *ranks = malloc((n_m ? n_m : 1) * sizeof **ranks);
        if (!*pairs || !*ranks) rc = dt_fail_oom(err, "%s: out of memory", f->path);
        for (size_t k = 0; rc == 0 && k < n_m; k++) {
            (*pairs)[2 * k] = m[k].a;
            (*pairs)[2 * k + 1] = m[k].b;
            /* equal scores, one rank: llama.cpp joins the leftmost of them first */
            (*ranks)[k] = k == 0 ? 0 : (*ranks)[k - 1] + (m[k].score != m[k - 1].score);
        }
        *n_pairs = (int64_t)n_m;
    }
    free(m);
    free(made);
    free(order);
    free(set.slot);
    return rc;
}
