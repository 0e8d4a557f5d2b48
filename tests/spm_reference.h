/* spm_reference.h — llama.cpp's SentencePiece joining of one part of a text (llm_tokenizer_spm in
 * llama-vocab.cpp), written from its description: the reference that test_gguf and fuzz_spm hold
 * difftrans's GGUF "llama" vocabularies against. One copy, so that the test and the fuzzer cannot
 * drift apart in what they call llama.cpp's behaviour. */
#ifndef DT_TESTS_SPM_REFERENCE_H
#define DT_TESTS_SPM_REFERENCE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    const void *ctx;
    int64_t (*find)(const void *ctx, const char *s, size_t len); /* the id of the token s, or -1 */
    float (*score)(const void *ctx, int64_t id);
} spm_ref_vocab;

/* The pieces of s[0..n) (its spaces already "▁"): its characters at first, then two neighbours
 * joined at a time, those whose concatenation is the best-scored token first and the leftmost
 * among equals, until no two neighbours make a token. piece(out, id, p, len) gets each piece in
 * order, id -1 for one that is no token (llama.cpp gives its bytes' <0xNN> tokens). 0, or -1 out
 * of memory. */
static inline int spm_ref_pieces(const spm_ref_vocab *v, const char *s, size_t n,
                                 void (*piece)(void *out, int64_t id, const char *p, size_t len), void *out) {
    /* the pieces, linked: [start, start + plen) of s; pair[i] the token of piece i and the next */
    size_t *start = malloc((n + 1) * sizeof *start), *plen = malloc((n + 1) * sizeof *plen);
    int64_t *pair = malloc((n + 1) * sizeof *pair);
    int *next = malloc((n + 1) * sizeof *next);
    const int rc = start && plen && pair && next ? 0 : -1;
    int m = 0;
    for (size_t i = 0; rc == 0 && i < n; m++) {
        start[m] = i;
        plen[m] = 1;
        while (i + plen[m] < n && ((unsigned char)s[i + plen[m]] & 0xC0) == 0x80) plen[m]++;
        i += plen[m];
        next[m] = -1;
        if (m) next[m - 1] = m;
    }
    for (int i = 0; i < m; i++) pair[i] = next[i] < 0 ? -1 : v->find(v->ctx, s + start[i], plen[i] + plen[next[i]]);
    while (m > 0) {
        int best = -1, prev_of_best = -1;
        for (int i = 0, prev = -1; i >= 0; prev = i, i = next[i])
            if (pair[i] >= 0 && (best < 0 || v->score(v->ctx, pair[i]) > v->score(v->ctx, pair[best])))
                best = i, prev_of_best = prev;
        if (best < 0) break;
        plen[best] += plen[next[best]];
        next[best] = next[next[best]];
        pair[best] = next[best] < 0 ? -1 : v->find(v->ctx, s + start[best], plen[best] + plen[next[best]]);
        if (prev_of_best >= 0)
            pair[prev_of_best] = v->find(v->ctx, s + start[prev_of_best], plen[prev_of_best] + plen[best]);
    }
    for (int i = m ? 0 : -1; i >= 0; i = next[i])
        piece(out, v->find(v->ctx, s + start[i], plen[i]), s + start[i], plen[i]);
    free(start);
    free(plen);
    free(pair);
    free(next);
    return rc;
}

#endif
