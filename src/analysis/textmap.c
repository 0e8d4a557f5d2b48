/* textmap.c — task text to token ids with the byte offset where each token ends (textmap.h). */
#include "analysis/textmap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void an_tokens_free(an_tokens *t) {
    free(t->ids);
    free(t->end);
    memset(t, 0, sizeof *t);
}

/* end[i] for every token: decode growing prefixes of the ids and keep those that decode to a
 * prefix of the text. Quadratic in the tokens, which is fine at the lengths of a model's context
 * (and needs nothing from the tokenizer but its decoder, whatever components it has). */
static int token_ends(const dt_tok *tok, const char *text, int len, const char *what, an_tokens *t, dt_error *err) {
    int pending = 0; /* tokens whose end is not yet known */
    for (int k = 1; k <= t->n; k++) {
        char *dec = NULL;
        size_t n = 0;
        if (dt_tok_decode(tok, (const int32_t *)t->ids, (size_t)k, 0, &dec, &n, err) != 0) return -1;
        int is_prefix = n <= (size_t)len && memcmp(dec, text, n) == 0;
        int whole = is_prefix && n == (size_t)len;
        free(dec);
        if (k == t->n && !whole)
            return dt_fail(err, "%s: the tokenizer %s does not decode its encoding of the text back to the same "
                                "bytes (a normalizer changes the text), so the task's byte offsets cannot be placed "
                                "in its tokens", what, dt_tok_path(tok));
        pending++;
        if (!is_prefix) continue;
        for (int i = k - pending; i < k; i++) t->end[i] = (int)n;
        pending = 0;
    }
    return 0;
}

int an_tokens_encode(const dt_tok *tok, const char *text, int len, const char *what, an_tokens *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    if (len < 0) return dt_fail(err, "%s: negative text length", what);
    int32_t *ids = NULL;
    size_t n = (size_t)len;
    if (tok) {
        if (dt_tok_encode(tok, text, (size_t)len, 0, &ids, &n, err) != 0) {
            char keep[sizeof err->msg];
            snprintf(keep, sizeof keep, "%s", err->msg);
            return dt_fail_code(err, err->code, "%s: %s", what, keep);
        }
        if (n > (size_t)len * 4 + 16) { /* cannot happen for a sane tokenizer; keeps the int arithmetic safe */
            free(ids);
            return dt_fail(err, "%s: %zu tokens for %d bytes", what, n, len);
        }
    }
    out->ids = malloc((n ? n : 1) * sizeof *out->ids);
    out->end = malloc((n ? n : 1) * sizeof *out->end);
    if (!out->ids || !out->end) {
        free(ids);
        an_tokens_free(out);
        return dt_fail_oom(err, "%s: out of memory for %zu tokens", what, n);
    }
    out->n = (int)n;
    if (!tok) {
        for (int i = 0; i < len; i++) {
            out->ids[i] = (unsigned char)text[i];
            out->end[i] = i + 1;
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++) out->ids[i] = ids[i];
    free(ids);
    if (token_ends(tok, text, len, what, out, err) != 0) {
        an_tokens_free(out);
        return -1;
    }
    return 0;
}

int an_tokens_before(const an_tokens *t, int b) {
    int lo = 0, hi = t->n; /* the first token ending after b */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (t->end[mid] <= b) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int an_tokens_covering(const an_tokens *t, int b) {
    if (b <= 0) return 0;
    int lo = 0, hi = t->n; /* the first token ending at or after b */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (t->end[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->n ? lo + 1 : t->n;
}
