/* generate.c — sampling, and the generation loop every user of a model calls (the CLI's
 * `generate`, the server): a prompt through the KV cache, then one sampled token at a time until a
 * stop id, the length limit, the caller's callback or a cancellation ends it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "base/base.h"

static int by_prob_desc(const void *a, const void *b) {
    const dt_prob_index *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id; /* ties broken by id so sampling is deterministic */
}

/* The first index of the largest of x[0..n) (0 when none is a number: NaN never wins). The
 * largest so far is kept in a register: comparing with x[best] made every step wait on a load
 * whose address the step before chose (145 µs for 32000 logits, a serial part of every batched
 * step, against 25). */
static int argmax(const float *x, int n) {
    int best = 0;
    float top = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > top) {
            top = x[i];
            best = i;
        }
    return best;
}

/* 1 when no x[i] is inf or NaN: the largest exponent field over x, an integer reduction the
 * compiler vectorises (an early-exit isfinite loop cost ~10 µs a step over 32000 logits) */
static int all_finite(const float *x, int n) {
    uint32_t top = 0;
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        u &= 0x7f800000u;
        top = u > top ? u : top;
    }
    return top != 0x7f800000u;
}

int logits_check_finite(const float *logits, int V, int position, dt_error *err) {
    if (all_finite(logits, V)) return 0;
    int bad = 0;
    while (isfinite(logits[bad])) bad++;
    return dt_fail_format(err, "logit %d at position %d is %g: the model's weights overflow float32", bad, position,
                          isnan(logits[bad]) ? NAN : (double)logits[bad]);
}

int dt_sample(float *logits, int V, const dt_sampler *s, uint64_t *rng, dt_prob_index *scratch) {
    const int best = argmax(logits, V);
    if (s->temperature <= 0.0f) return best;

    /* weights relative to the top token's (1), so that min-p's bound is min_p itself; 0 keeps them all */
    float sum = 0;
    int n = 0;
    for (int i = 0; i < V; i++) {
        const float p = expf((logits[i] - logits[best]) / s->temperature);
        if (p < s->min_p) continue;
        scratch[n].p = p;
        scratch[n].id = i;
        sum += p;
        n++;
    }
    if ((s->top_k > 0 && s->top_k < n) || s->top_p < 1.0f) {
        qsort(scratch, (size_t)n, sizeof *scratch, by_prob_desc);
        if (s->top_k > 0 && s->top_k < n) {
            n = s->top_k;
            /* top-p counts the top-k tokens' probabilities renormalised, as transformers and vLLM do */
            sum = 0;
            for (int i = 0; i < n; i++) sum += scratch[i].p;
        }
        if (s->top_p < 1.0f) {
            float cum = 0;
            for (int i = 0; i < n; i++) {
                cum += scratch[i].p / sum;
                if (cum >= s->top_p) {
                    n = i + 1;
                    break;
                }
            }
        }
        sum = 0;
        for (int i = 0; i < n; i++) sum += scratch[i].p;
    }
    for (int i = 0; i < V; i++) logits[i] = 0;
    for (int i = 0; i < n; i++) logits[scratch[i].id] = scratch[i].p / sum;
    float r = dt_rng_uniform(rng) * sum, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += scratch[i].p;
        if (r < cum) return scratch[i].id;
    }
    return scratch[n - 1].id;
}

void dt_generate_defaults(dt_generate_options *o) {
    memset(o, 0, sizeof *o);
    o->max_new_tokens = 200;
    o->sampler = (dt_sampler){.temperature = 0.8f, .top_k = 0, .top_p = 0.95f};
    o->seed = 42;
    o->kv_cache = DT_KV_F32;
    o->n_stop = -1;
}

int dt_model_stop_ids(const dt_model *m, int *ids) {
    const dt_special_ids *s = &m->cfg.special;
    int n = 0;
    for (int i = 0; i < s->n_eos; i++) ids[n++] = s->eos_token_id[i];
    if (n == 0 && m->vocab.tok && dt_tok_eos_id(m->vocab.tok) >= 0) ids[n++] = dt_tok_eos_id(m->vocab.tok);
    return n;
}

static int check_generate(const dt_model *m, const int *prompt, int n_prompt, const dt_generate_options *o,
                          dt_error *err) {
    const dt_config *c = &m->cfg;
    if (n_prompt < 1) return dt_fail(err, "generate: the prompt has no tokens (at least one is needed to start from)");
    if (o->max_new_tokens < 0) return dt_fail(err, "generate: max_new_tokens %d is negative", o->max_new_tokens);
    if (o->n_stop > DT_MAX_EOS) return dt_fail(err, "generate: %d stop ids (at most %d)", o->n_stop, DT_MAX_EOS);
    if (o->n_stop > 0 && !o->stop_ids) return dt_fail(err, "generate: n_stop %d but no stop_ids", o->n_stop);
    if (!(o->sampler.temperature >= 0) || !(o->sampler.top_p > 0 && o->sampler.top_p <= 1) || o->sampler.top_k < 0 ||
        !(o->sampler.min_p >= 0 && o->sampler.min_p <= 1))
        return dt_fail(err, "sampler temperature %g, top_p %g, top_k %d, min_p %g: need temperature >= 0, top_p in "
                            "(0, 1], top_k >= 0, min_p in [0, 1]",
                       (double)o->sampler.temperature, (double)o->sampler.top_p, o->sampler.top_k,
                       (double)o->sampler.min_p);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab_size)
            return dt_fail(err, "generate: prompt token %d at position %d is outside the vocabulary [0, %d)", prompt[i],
                           i, c->vocab_size);
    if ((long)n_prompt + o->max_new_tokens > c->max_position_embeddings)
        return dt_fail(err, "generate: the prompt (%d tokens) + max_new_tokens %d exceeds max_position_embeddings %d",
                       n_prompt, o->max_new_tokens, c->max_position_embeddings);
    return 0;
}

/* Prompt rows per batched step of the prefill: a matrix product over this many rows runs near the
 * machine's compute peak, and the activations stay a few MB for the largest models. */
#define PREFILL_CHUNK 128

int dt_generate(const dt_model *m, const int *prompt, int n_prompt, const dt_generate_options *o, int *out,
                dt_generate_result *res, dt_error *err) {
    dt_generate_result r = {.stop = DT_STOP_LENGTH, .stop_token = -1};
    if (res) *res = r;
    if (check_generate(m, prompt, n_prompt, o, err) != 0) return -1;
    int stop_ids[DT_MAX_EOS], n_stop = o->n_stop;
    if (n_stop < 0) n_stop = dt_model_stop_ids(m, stop_ids);
    else if (n_stop > 0) memcpy(stop_ids, o->stop_ids, (size_t)n_stop * sizeof *stop_ids);
    const int V = m->cfg.vocab_size, total = n_prompt + o->max_new_tokens;
    const int chunk = n_prompt < PREFILL_CHUNK ? n_prompt : PREFILL_CHUNK;
    float *logits = malloc((size_t)V * sizeof *logits);
    dt_prob_index *scratch = malloc((size_t)V * sizeof *scratch);
    int *seq = malloc((size_t)total * sizeof *seq); /* the prompt, then what is generated */
    dt_batch_row *rows = malloc((size_t)chunk * sizeof *rows);
    dt_batch *b = NULL;
    int rc = 0;
    if (!logits || !scratch || !seq || !rows) rc = dt_fail_oom(err, "generate: out of memory for a vocabulary of %d", V);
    else if (o->max_new_tokens > 0 && !(b = dt_batch_create(m, 1, total, chunk, o->kv_cache, err))) rc = -1;
    else if (b) r.kv_cache_bytes = dt_batch_kv_bytes(b);
    if (rc == 0) memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    uint64_t rng = o->seed;
    int n_seq = n_prompt;
    const double t0 = monotonic_seconds();
    /* the prompt in batched chunks (the last row's logits give the first new token), then one row
     * a step; nothing to run when no token is wanted */
    for (int pos = 0; rc == 0 && o->max_new_tokens > 0 && pos < n_seq;) {
        if (o->cancel && *o->cancel) {
            r.stop = DT_STOP_CANCELLED;
            break;
        }
        const int n = pos < n_prompt ? (n_prompt - pos < chunk ? n_prompt - pos : chunk) : 1;
        for (int i = 0; i < n; i++)
            rows[i] = (dt_batch_row){.slot = 0, .pos = pos + i, .token = seq[pos + i], .want_logits = i == n - 1};
        if (dt_batch_step(m, b, rows, n, logits, err) != 0) {
            rc = -1;
            break;
        }
        pos += n;
        if (pos < n_prompt) continue;
        if (pos == n_prompt) r.prefill_s = monotonic_seconds() - t0;
        if (logits_check_finite(logits, V, pos - 1, err) != 0) {
            rc = -1;
            break;
        }
        const int token = dt_sample(logits, V, &o->sampler, &rng, scratch);
        int is_stop = 0;
        for (int e = 0; e < n_stop; e++) is_stop |= token == stop_ids[e];
        if (!is_stop) {
            seq[n_seq++] = token;
            if (out) out[r.n_generated] = token;
            r.n_generated++;
        }
        if (o->on_token && o->on_token(o->ctx, token, is_stop, seq, n_seq) != 0) {
            r.stop = is_stop ? DT_STOP_EOS : DT_STOP_CALLBACK;
            r.stop_token = is_stop ? token : -1;
            break;
        }
        if (is_stop) {
            r.stop = DT_STOP_EOS;
            r.stop_token = token;
            break;
        }
        if (r.n_generated == o->max_new_tokens) break;
    }
    r.decode_s = monotonic_seconds() - t0 - r.prefill_s;
    dt_batch_free(b);
    free(rows);
    free(logits);
    free(scratch);
    free(seq);
    if (res) *res = r;
    return rc;
}
