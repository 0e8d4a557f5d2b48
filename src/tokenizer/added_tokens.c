/* added_tokens.c — cutting added tokens (special or not) out of the text: leftmost-longest
 * matching as the Rust library's Aho-Corasick automaton does it, then single_word / lstrip /
 * rstrip exactly as AddedVocabulary::find_matches applies them. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/base.h"
#include "tokenizer/tok.h"

typedef struct {
    unsigned char first;
    size_t len;
    int32_t index;
} sort_key;

static int by_first_then_longest(const void *pa, const void *pb) {
    const sort_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

int tk_added_set_build(tk_added_set *set, const tk_added *added, int n, int normalized) {
    int k = 0;
    set->order = malloc((size_t)(n ? n : 1) * sizeof *set->order);
    sort_key *keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
    if (!set->order || !keys) {
        free(keys);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (added[i].normalized == normalized && added[i].match_len > 0)
            keys[k++] = (sort_key){(unsigned char)added[i].match[0], added[i].match_len, i};
    qsort(keys, (size_t)k, sizeof *keys, by_first_then_longest);
    for (int i = 0; i < k; i++) set->order[i] = keys[i].index;
    free(keys);
    int j = 0;
    for (int b = 0; b < 256; b++) {
        while (j < k && (unsigned char)added[set->order[j]].match[0] < b) j++;
        set->first[b] = j;
    }
    set->first[256] = k;
    set->only_first = -1;
    if (k > 0 && (unsigned char)added[set->order[0]].match[0] == (unsigned char)added[set->order[k - 1]].match[0])
        set->only_first = (unsigned char)added[set->order[0]].match[0];
    return 0;
}

void tk_added_set_free(tk_added_set *set) {
    free(set->order);
    set->order = NULL;
}

/* The Rust regex crate's \w (Alphabetic, M, Nd, Pc, Join_Control), for single_word; utf8proc has
 * no Alphabetic property, so letters and Nl stand for it (they differ only on a few symbols). */
static int is_word_char(uint32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    if (cp == 0x200C || cp == 0x200D) return 1;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
           c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC;
}

static int ends_with_word(const char *s, size_t n) {
    if (n == 0) return 0;
    size_t p = n - 1;
    while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
    int k;
    return is_word_char(tk_utf8_decode(s + p, &k));
}

static int starts_with_word(const char *s, size_t n) {
    if (n == 0) return 0;
    int k;
    return is_word_char(tk_utf8_decode(s, &k));
}

/* Longest added token of the set starting at s[i], or -1. */
static int32_t match_at(const tk_added *added, const tk_added_set *set, const char *s, size_t n, size_t i) {
    unsigned char b = (unsigned char)s[i];
    for (int32_t j = set->first[b]; j < set->first[b + 1]; j++) {
        const tk_added *t = &added[set->order[j]];
        if (t->match_len <= n - i && !memcmp(s + i, t->match, t->match_len)) return set->order[j];
    }
    return -1;
}

/* Candidates: every position of [from, to) where an added token of the set starts, with the
 * longest such token ({start, raw end, index into added}). A pure function of the position, so
 * disjoint ranges can be searched on different threads and concatenated. */
int tk_added_candidates(const tk_added *added, const tk_added_set *set, const char *s, size_t n, size_t from,
                        size_t to, tk_added_hits *out) {
    for (size_t i = from; i < to; i++) {
        if (set->only_first >= 0) { /* all tokens start with one byte (Llama-3: '<'): memchr to it */
            const char *p = memchr(s + i, set->only_first, to - i);
            if (!p) break;
            i = (size_t)(p - s);
        } else if (set->first[(unsigned char)s[i]] == set->first[(unsigned char)s[i] + 1])
            continue;
        int32_t a = match_at(added, set, s, n, i);
        if (a >= 0 && tk_added_hits_push(out, i, i + added[a].match_len, a) != 0) return -1;
    }
    return 0;
}

/* The automaton's walk over the candidates of s[0..n) (in order): it takes a candidate at or
 * after where the previous one it took ended, whether that one is then kept or not; then
 * single_word, lstrip and rstrip as AddedVocabulary::find_matches applies them. Rewrites h in
 * place into the kept tokens ({start, end, token id}). */
void tk_added_resolve(const tk_added *added, const char *s, size_t n, tk_added_hits *h) {
    size_t i = 0, k = 0, start_offset = 0;
    for (size_t c = 0; c < h->n; c++) {
        if (h->v[c].start < i) continue;
        const tk_added *t = &added[h->v[c].id];
        size_t start = h->v[c].start, stop = h->v[c].stop;
        i = stop;
        if (t->single_word) {
            int start_space = start == 0 || !ends_with_word(s, start);
            int stop_space = stop == n || !starts_with_word(s + stop, n - stop);
            if (!start_space || !stop_space) continue;
        }
        if (t->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t p = ns - 1;
                while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
                int len;
                if (!tk_is_white_space(tk_utf8_decode(s + p, &len))) break;
                ns = p;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (t->rstrip) {
            while (stop < n) {
                int len;
                if (!tk_is_white_space(tk_utf8_decode(s + stop, &len))) break;
                stop += (size_t)len;
            }
        }
        h->v[k++] = (tk_added_hit){start, stop, t->id};
        start_offset = stop;
    }
    h->n = k;
}

int tk_added_emit(const tk_added_hits *h, const char *s, size_t n, int origin, tk_emit_fn emit, void *sink) {
    size_t start_offset = 0;
    for (size_t k = 0; k < h->n; k++) {
        size_t start = h->v[k].start, stop = h->v[k].stop;
        if (start_offset < start &&
            emit(sink, s + start_offset, start - start_offset, -1, origin && start_offset == 0) != 0)
            return -1;
        if (emit(sink, s + start, stop - start, h->v[k].id, origin && start == 0) != 0) return -1;
        start_offset = stop;
    }
    if (start_offset < n && emit(sink, s + start_offset, n - start_offset, -1, origin && start_offset == 0) != 0)
        return -1;
    return 0;
}

int tk_added_hits_push(tk_added_hits *h, size_t start, size_t stop, int32_t id) {
    if (grow_array(&h->v, &h->cap, h->n + 1, sizeof *h->v, 64) != 0) return -1;
    h->v[h->n++] = (tk_added_hit){start, stop, id};
    return 0;
}

static int emit_piece(void *sink, const char *s, size_t n, int32_t id, int origin) {
    return tk_pieces_add(sink, s, n, id, origin);
}

int tk_added_split(const tk_added *added, const tk_added_set *set, const tk_pieces *in, tk_pieces *out,
                   tk_added_hits *scratch) {
    tk_pieces_clear(out);
    for (size_t i = 0; i < in->n; i++) {
        const tk_piece *p = &in->v[i];
        const char *s = tk_piece_str(in, i);
        int rc;
        if (p->id >= 0) rc = tk_pieces_add(out, s, p->len, p->id, p->origin);
        else if (set->first[256] == 0) rc = p->len ? tk_pieces_add(out, s, p->len, -1, p->origin) : 0;
        else {
            scratch->n = 0;
            rc = tk_added_candidates(added, set, s, p->len, 0, p->len, scratch);
            if (rc == 0) {
                tk_added_resolve(added, s, p->len, scratch);
                rc = tk_added_emit(scratch, s, p->len, p->origin, emit_piece, out);
            }
        }
        if (rc != 0) return -1;
    }
    return 0;
}
