/* needle_score.c — scoring a model on a loaded needle test set: greedy exact-match accuracy of
 * every query, per (context length, depth) cell. */
#include "analysis/needle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- evaluation */

void dt_needle_results_free(dt_needle_results *r) {
    free(r->cells);
    free(r->items);
    memset(r, 0, sizeof *r);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int cell_index(const dt_needle_results *r, int context_length, double depth) {
    for (int i = 0; i < r->n_cells; i++)
        if (r->cells[i].context_length == context_length && r->cells[i].depth == depth) return i;
    return -1;
}

static int by_cell(const void *a, const void *b) {
    const dt_needle_cell *x = a, *y = b;
    if (x->context_length != y->context_length) return x->context_length < y->context_length ? -1 : 1;
    return x->depth < y->depth ? -1 : x->depth > y->depth;
}

int dt_needle_encode_testset(const dt_model *m, const dt_tok *tok, const dt_needle_testset *ts, int ns, an_tokens *enc,
                          int *longest, dt_error *err) {
    const int V = m->cfg.vocab_size, max_pos = m->cfg.max_position_embeddings;
    *longest = 0;
    for (int i = 0; i < ns; i++) {
        const dt_needle_sample *s = &ts->samples[i];
        char what[4200];
        snprintf(what, sizeof what, "%s: sample %ld (line %d)", ts->path, s->id, s->line);
        if (an_tokens_encode(tok, s->text, s->text_length, what, &enc[i], err) != 0) return -1;
        const an_tokens *e = &enc[i];
        if (e->n > max_pos)
            return dt_fail(err, "%s is %d %s, longer than the model's max_position_embeddings %d", what, e->n,
                           tok ? "tokens" : "bytes", max_pos);
        for (int k = 0; k < e->n; k++)
            if (e->ids[k] >= V)
                return dt_fail(err, "%s: %s %d at offset %d is outside the model's vocabulary of %d", what,
                               tok ? "token" : "byte", e->ids[k], k, V);
        for (int q = 0; q < s->n_queries; q++) {
            const dt_needle_query *qu = &s->queries[q];
            int first = an_tokens_before(e, qu->prompt_end_offset);
            int stop = an_tokens_covering(e, qu->prompt_end_offset + qu->answer_length);
            if (first < 1 || stop - first > DT_NEEDLE_VALUE_CAP)
                return dt_fail(err, "%s: query %d's answer is %d tokens after a prompt of %d (need 1..%d after a "
                                    "non-empty prompt)", what, q, stop - first, first, DT_NEEDLE_VALUE_CAP);
        }
        if (e->n > *longest) *longest = e->n;
    }
    return 0;
}

void dt_needle_encoded_free(an_tokens *enc, int n) {
    for (int i = 0; enc && i < n; i++) an_tokens_free(&enc[i]);
    free(enc);
}

int dt_needle_eval(const dt_model *m, const dt_tok *tok, const dt_needle_testset *ts, dt_needle_results *r,
                dt_needle_progress_fn progress, void *progress_ctx, dt_error *err) {
    memset(r, 0, sizeof *r);
    const int V = m->cfg.vocab_size;
    int longest = 0, n_items = 0;
    if (ts->n == 0) return dt_fail(err, "%s: no samples to evaluate", ts->path);
    an_tokens *enc = calloc((size_t)ts->n, sizeof *enc);
    if (!enc) return dt_fail_oom(err, "out of memory for %d samples", ts->n);
    if (dt_needle_encode_testset(m, tok, ts, ts->n, enc, &longest, err) != 0) {
        dt_needle_encoded_free(enc, ts->n);
        return -1;
    }
    for (int i = 0; i < ts->n; i++) n_items += ts->samples[i].n_queries;
    if (longest == 0) {
        dt_needle_encoded_free(enc, ts->n);
        return dt_fail(err, "%s: no samples to evaluate", ts->path);
    }

    r->cells = calloc((size_t)ts->n, sizeof *r->cells); /* at most one cell per sample */
    r->items = calloc((size_t)n_items, sizeof *r->items);
    float *logits = malloc((size_t)V * sizeof(float));
    if (!r->cells || !r->items || !logits) {
        free(logits);
        dt_needle_encoded_free(enc, ts->n);
        dt_needle_results_free(r);
        return dt_fail_oom(err, "out of memory for %d samples", ts->n);
    }
    for (int i = 0; i < ts->n; i++) {
        const dt_needle_sample *s = &ts->samples[i];
        if (cell_index(r, s->context_length, s->depth) < 0)
            r->cells[r->n_cells++] = (dt_needle_cell){.context_length = s->context_length, .depth = s->depth};
    }
    qsort(r->cells, (size_t)r->n_cells, sizeof *r->cells, by_cell);

    dt_kvcache *kc = dt_kvcache_create(m, longest, err);
    if (!kc) {
        free(logits);
        dt_needle_encoded_free(enc, ts->n);
        dt_needle_results_free(r);
        return -1;
    }
    int rc = 0;
    for (int i = 0; rc == 0 && i < ts->n; i++) {
        const dt_needle_sample *s = &ts->samples[i];
        const an_tokens *e = &enc[i];
        dt_needle_cell *cell = &r->cells[cell_index(r, s->context_length, s->depth)];
        cell->samples++;
        int cursor = 0; /* the next position to feed with the true text's tokens */
        for (int q = 0; rc == 0 && q < s->n_queries; q++) {
            const dt_needle_query *qu = &s->queries[q];
            /* the prompt: the tokens that end before the answer; the answer: the tokens that overlap it
             * (for bytes, exactly the value's bytes) */
            const int pe = an_tokens_before(e, qu->prompt_end_offset);
            const int len = an_tokens_covering(e, qu->prompt_end_offset + qu->answer_length) - pe;
            for (; cursor < pe; cursor++)
                if (dt_decode_step(m, kc, e->ids[cursor], cursor, logits, err) != 0) {
                    rc = -1;
                    break;
                }
            dt_needle_item *it = &r->items[r->n_items];
            it->sample = i;
            it->query = q;
            it->n_predicted = len;
            for (int k = 0; rc == 0 && k < len; k++) {
                if (k > 0 && dt_decode_step(m, kc, it->predicted[k - 1], pe + k - 1, logits, err) != 0) rc = -1;
                else it->predicted[k] = argmax(logits, V);
            }
            if (rc) break;
            /* The greedy tokens sit in the cache at pe..; the next query's prompt feeds the true answer
             * over them (a decode step at position t only reads positions ≤ t). */
            cursor = pe;
            it->correct = 1;
            for (int k = 0; k < len; k++) it->correct &= it->predicted[k] == e->ids[pe + k];
            r->n_items++;
            r->total++;
            r->correct += it->correct;
            cell->n++;
            cell->correct += it->correct;
            if (q == 0) cell->first_correct += it->correct;
        }
        if (rc) {
            char keep[sizeof err->msg];
            snprintf(keep, sizeof keep, "%s", err->msg);
            dt_fail_code(err, err->code, "%s: sample %ld (line %d): %s", ts->path, s->id, s->line, keep);
            break;
        }
        if (progress) progress(progress_ctx, i + 1, ts->n, r->correct, r->total);
    }
    dt_kvcache_free(kc);
    free(logits);
    dt_needle_encoded_free(enc, ts->n);
    if (rc) dt_needle_results_free(r);
    return rc;
}
