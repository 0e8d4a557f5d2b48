/* icl.c — the in-context classification task of icl.h and its order-robustness measurement. */
#include "difftrans_analysis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/textmap.h"

static const char *const label_names[2] = {"red", "blue"};

void dt_icl_params_default(dt_icl_params *p) { *p = (dt_icl_params){.shots = 8, .permutations = 6, .queries = 32, .seed = 1}; }

int dt_icl_label_of(const char *word) { return word[0] <= 'm' ? 0 : 1; }
const char *dt_icl_label_name(int label) { return label_names[label & 1]; }

/* A word of the given label, 3–7 letters. */
static void make_word(uint64_t *rng, int label, char *w) {
    int len = 3 + (int)(dt_rng_next(rng) % 5);
    w[0] = (char)((label ? 'n' : 'a') + dt_rng_next(rng) % 13);
    for (int i = 1; i < len; i++) w[i] = (char)('a' + dt_rng_next(rng) % 26);
    w[len] = '\0';
}

/* Demonstration d (0..shots) or query q of the task: alternate labels so each half is balanced;
 * every item has its own random stream derived from the seed. The seed is mixed first: a stream
 * starting at seed·φ (splitmix's own step) made seed s + 1's draws seed s's shifted by one. */
static void item(const dt_icl_params *p, int kind, int index, char *w, int *label) {
    uint64_t mix = p->seed, rng = dt_rng_next(&mix) + (uint64_t)kind * 1000003u + (uint64_t)index;
    dt_rng_next(&rng);
    *label = index & 1;
    make_word(&rng, *label, w);
}

/* order[0..shots) of permutation perm: Fisher–Yates from the permutation's own stream. */
static void order_of(const dt_icl_params *p, int perm, int *order) {
    uint64_t rng = p->seed ^ (0xC0FFEEull + 7919u * (uint64_t)perm);
    for (int i = 0; i < p->shots; i++) order[i] = i;
    for (int i = p->shots - 1; i > 0; i--) {
        int j = (int)(dt_rng_next(&rng) % (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

int dt_icl_prompt(const dt_icl_params *p, int perm, int q, char *out, int cap, int *query_label) {
    int order[DT_ICL_MAX_SHOTS], len = 0, label;
    char w[DT_ICL_MAX_WORD];
    if (p->shots > DT_ICL_MAX_SHOTS) return -1;
    order_of(p, perm, order);
    for (int i = 0; i < p->shots; i++) {
        item(p, 0, order[i], w, &label);
        int k = snprintf(out + len, (size_t)(cap - len), "Input: %s\nLabel: %s\n\n", w, dt_icl_label_name(label));
        if (k < 0 || k >= cap - len) return -1;
        len += k;
    }
    item(p, 1, q, w, query_label);
    int k = snprintf(out + len, (size_t)(cap - len), "Input: %s\nLabel: ", w);
    if (k < 0 || k >= cap - len) return -1;
    return len + k;
}

void dt_icl_summarize(const double *acc, int n, double *mean, double *std, double *min, double *max) {
    double s = 0, ss = 0, lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        s += acc[i];
        lo = fmin(lo, acc[i]);
        hi = fmax(hi, acc[i]);
    }
    *mean = n ? s / n : NAN;
    for (int i = 0; i < n; i++) ss += (acc[i] - *mean) * (acc[i] - *mean);
    *std = n ? sqrt(ss / n) : NAN;
    *min = n ? lo : NAN;
    *max = n ? hi : NAN;
}

/* Σ log p(ids[i + 1] | ids[0..i]) for i in [from - 1, n - 1) from the logits of a [T] sequence. */
static double continuation_logprob(const float *logits, int V, const int *ids, int from, int n) {
    double total = 0;
    for (int i = from - 1; i < n - 1; i++) {
        const float *row = logits + (size_t)i * V;
        float mx = row[0];
        for (int v = 1; v < V; v++) mx = fmaxf(mx, row[v]);
        double z = 0;
        for (int v = 0; v < V; v++) z += exp((double)row[v] - mx);
        total += (double)row[ids[i + 1]] - mx - log(z);
    }
    return total;
}

/* The prompt followed by each label, as the model reads it (textmap.h); *common gets the tokens
 * the two share (for bytes: the prompt), after which each label's own tokens are scored. */
static int encode_candidates(const dt_model *m, const dt_tok *tok, const char *text, int len, an_tokens cand[2],
                             int *common, dt_error *err) {
    char buf[DT_ICL_MAX_PROMPT + 8];
    for (int b = 0; b < 2; b++) {
        const char *lab = dt_icl_label_name(b);
        int n = snprintf(buf, sizeof buf, "%.*s%s", len, text, lab);
        if (n < 0 || n >= (int)sizeof buf) return dt_fail(err, "internal: prompt longer than %d bytes", DT_ICL_MAX_PROMPT);
        if (an_tokens_encode(tok, buf, n, "the in-context prompt", &cand[b], err) != 0) return -1;
        for (int i = 0; i < cand[b].n; i++)
            if (cand[b].ids[i] >= m->cfg.vocab_size)
                return dt_fail(err, "the in-context prompt: token %d is outside the model's vocabulary of %d",
                               cand[b].ids[i], m->cfg.vocab_size);
    }
    int c = 0;
    while (c < cand[0].n && c < cand[1].n && cand[0].ids[c] == cand[1].ids[c]) c++;
    if (c < 1 || c == cand[0].n || c == cand[1].n)
        return dt_fail(err, "the in-context prompt: the tokenizer leaves no shared prompt before the labels");
    *common = c;
    return 0;
}

int dt_icl_run(const dt_model *m, const dt_tok *tok, const dt_icl_params *p, dt_icl_result *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    if (p->shots < 2 || p->shots > DT_ICL_MAX_SHOTS || p->shots % 2)
        return dt_fail(err, "shots %d: must be even, in 2..%d", p->shots, DT_ICL_MAX_SHOTS);
    if (p->queries < 2 || p->queries % 2) return dt_fail(err, "queries %d: must be even and >= 2", p->queries);
    if (p->permutations < 1) return dt_fail(err, "permutations %d: must be positive", p->permutations);
    if (!tok && m->cfg.vocab_size < 256) return dt_fail(err, "the task needs a byte-level vocabulary (>= 256 tokens)");
    /* a demonstration takes at most 7 + 7 + 8 + 4 + 2 = 28 bytes, the query 7 + 7 + 8 = 22 */
    const int longest = p->shots * 28 + 22, cap = longest + 1, V = m->cfg.vocab_size;
    const int max_pos = m->cfg.max_position_embeddings;
    if (!tok && longest + 4 > max_pos)
        return dt_fail(err, "shots %d makes prompts of up to %d tokens, more than max_position_embeddings %d",
                       p->shots, longest + 4, max_pos);
    char *text = malloc((size_t)cap);
    int *tokens = NULL, T = 0;
    out->accuracy = calloc((size_t)p->permutations, sizeof(double));
    dt_runstate *rs = NULL;
    int rc = 0;
    if (!text || !out->accuracy) rc = dt_fail_oom(err, "out of memory");
    for (int perm = 0; rc == 0 && perm < p->permutations; perm++) {
        int correct = 0;
        for (int q = 0; rc == 0 && q < p->queries; q++) {
            int truth, len = dt_icl_prompt(p, perm, q, text, cap, &truth), common = 0;
            if (len < 0) {
                rc = dt_fail(err, "internal: prompt longer than %d bytes", cap);
                break;
            }
            an_tokens cand[2] = {{0}, {0}};
            if (encode_candidates(m, tok, text, len, cand, &common, err) != 0) {
                an_tokens_free(&cand[0]);
                an_tokens_free(&cand[1]);
                rc = -1;
                break;
            }
            /* both candidates in one batch of two sequences; the shorter one is padded by repeating
             * its last token, which no scored position can see (causal) */
            const int Tq = cand[0].n > cand[1].n ? cand[0].n : cand[1].n;
            if (Tq > max_pos)
                rc = dt_fail(err, "shots %d makes prompts of %d tokens, more than max_position_embeddings %d",
                             p->shots, Tq, max_pos);
            if (rc == 0 && Tq > T) { /* the runstate grows with the longest prompt so far */
                dt_runstate_free(rs);
                free(tokens);
                T = tok ? (Tq + 16 < max_pos ? Tq + 16 : max_pos) : longest + 4;
                tokens = malloc(sizeof(int) * 2 * (size_t)T);
                if (!tokens) rc = dt_fail_oom(err, "out of memory");
                else if (!(rs = dt_runstate_create(m, 2, T, err))) rc = -1;
            }
            for (int b = 0; rc == 0 && b < 2; b++)
                for (int t = 0; t < Tq; t++)
                    tokens[b * Tq + t] = cand[b].ids[t < cand[b].n ? t : cand[b].n - 1];
            if (rc == 0 && dt_forward(m, rs, tokens, NULL, 2, Tq, NULL, err) != 0) rc = -1;
            if (rc == 0) {
                if (out->prompt_tokens < Tq) out->prompt_tokens = Tq;
                const float *logits = dt_runstate_logits(rs);
                double lp_red = continuation_logprob(logits, V, cand[0].ids, common, cand[0].n);
                double lp_blue = continuation_logprob(logits + (size_t)Tq * V, V, cand[1].ids, common, cand[1].n);
                correct += (lp_blue > lp_red ? 1 : 0) == truth;
            }
            an_tokens_free(&cand[0]);
            an_tokens_free(&cand[1]);
        }
        out->accuracy[perm] = (double)correct / p->queries;
    }
    dt_runstate_free(rs);
    free(text);
    free(tokens);
    if (rc != 0) {
        dt_icl_result_free(out);
        return -1;
    }
    out->permutations = p->permutations;
    out->queries = p->queries;
    dt_icl_summarize(out->accuracy, out->permutations, &out->mean, &out->std, &out->min, &out->max);
    return 0;
}

void dt_icl_result_free(dt_icl_result *r) {
    free(r->accuracy);
    r->accuracy = NULL;
}
