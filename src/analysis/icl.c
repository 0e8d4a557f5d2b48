/* icl.c — the in-context classification task of icl.h and its order-robustness measurement. */
#include "analysis/icl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const label_names[2] = {"red", "blue"};

void icl_params_default(icl_params *p) { *p = (icl_params){.shots = 8, .permutations = 6, .queries = 32, .seed = 1}; }

int icl_label_of(const char *word) { return word[0] <= 'm' ? 0 : 1; }
const char *icl_label_name(int label) { return label_names[label & 1]; }

/* A word of the given label, 3–7 letters. */
static void make_word(uint64_t *rng, int label, char *w) {
    int len = 3 + (int)(dt_rng_next(rng) % 5);
    w[0] = (char)((label ? 'n' : 'a') + dt_rng_next(rng) % 13);
    for (int i = 1; i < len; i++) w[i] = (char)('a' + dt_rng_next(rng) % 26);
    w[len] = '\0';
}

/* Demonstration d (0..shots) or query q of the task: alternate labels so each half is balanced;
 * every item has its own random stream derived from the seed. */
static void item(const icl_params *p, int kind, int index, char *w, int *label) {
    uint64_t rng = p->seed * 0x9E3779B97F4A7C15ull + (uint64_t)kind * 1000003u + (uint64_t)index;
    dt_rng_next(&rng);
    *label = index & 1;
    make_word(&rng, *label, w);
}

/* order[0..shots) of permutation perm: Fisher–Yates from the permutation's own stream. */
static void order_of(const icl_params *p, int perm, int *order) {
    uint64_t rng = p->seed ^ (0xC0FFEEull + 7919u * (uint64_t)perm);
    for (int i = 0; i < p->shots; i++) order[i] = i;
    for (int i = p->shots - 1; i > 0; i--) {
        int j = (int)(dt_rng_next(&rng) % (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

int icl_prompt(const icl_params *p, int perm, int q, char *out, int cap, int *query_label) {
    int order[256], len = 0, label;
    char w[ICL_MAX_WORD];
    if (p->shots > 256) return -1;
    order_of(p, perm, order);
    for (int i = 0; i < p->shots; i++) {
        item(p, 0, order[i], w, &label);
        int k = snprintf(out + len, (size_t)(cap - len), "Input: %s\nLabel: %s\n\n", w, icl_label_name(label));
        if (k < 0 || k >= cap - len) return -1;
        len += k;
    }
    item(p, 1, q, w, query_label);
    int k = snprintf(out + len, (size_t)(cap - len), "Input: %s\nLabel: ", w);
    if (k < 0 || k >= cap - len) return -1;
    return len + k;
}

void icl_summarize(const double *acc, int n, double *mean, double *std, double *min, double *max) {
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

/* Σ log p(label bytes | prompt) from logits of a [T] sequence: positions len−1+i predict byte i. */
static double label_logprob(const float *logits, int V, int len, const char *label) {
    double total = 0;
    for (int i = 0; label[i]; i++) {
        const float *row = logits + (size_t)(len - 1 + i) * V;
        float mx = row[0];
        for (int v = 1; v < V; v++) mx = fmaxf(mx, row[v]);
        double z = 0;
        for (int v = 0; v < V; v++) z += exp((double)row[v] - mx);
        total += (double)row[(unsigned char)label[i]] - mx - log(z);
    }
    return total;
}

int icl_run(const dt_model *m, const icl_params *p, icl_result *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    if (p->shots < 2 || p->shots > 256 || p->shots % 2)
        return dt_fail(err, "--shots %d: must be even, in 2..256", p->shots);
    if (p->queries < 2 || p->queries % 2) return dt_fail(err, "--queries %d: must be even and >= 2", p->queries);
    if (p->permutations < 1) return dt_fail(err, "--permutations %d: must be positive", p->permutations);
    if (m->cfg.vocab_size < 256) return dt_fail(err, "the task needs a byte-level vocabulary (>= 256 tokens)");
    /* a demonstration takes at most 7 + 7 + 8 + 4 + 2 = 28 bytes, the query 7 + 7 + 8 = 22 */
    const int longest = p->shots * 28 + 22, cap = longest + 1, V = m->cfg.vocab_size;
    const int T = longest + 4; /* plus the longer label ("blue") */
    if (T > m->cfg.max_position_embeddings)
        return dt_fail(err, "--shots %d makes prompts of up to %d tokens, more than max_position_embeddings %d",
                       p->shots, T, m->cfg.max_position_embeddings);
    char *text = malloc((size_t)cap);
    int *tokens = malloc(sizeof(int) * 2 * T);
    out->accuracy = calloc((size_t)p->permutations, sizeof(double));
    dt_runstate *rs = NULL;
    int rc = 0;
    if (!text || !tokens || !out->accuracy) rc = dt_fail(err, "out of memory");
    for (int perm = 0; rc == 0 && perm < p->permutations; perm++) {
        int correct = 0;
        for (int q = 0; rc == 0 && q < p->queries; q++) {
            int truth, len = icl_prompt(p, perm, q, text, cap, &truth);
            if (len < 0) {
                rc = dt_fail(err, "internal: prompt longer than %d bytes", cap);
                break;
            }
            /* both candidate labels in one batch of two sequences; the shorter one is padded with
             * a space after its label, which no scored position can see (causal) */
            const int Tq = len + 4;
            if (!rs && !(rs = dt_runstate_create(m, 2, T, err))) {
                rc = -1;
                break;
            }
            for (int b = 0; b < 2; b++) {
                const char *lab = icl_label_name(b);
                for (int t = 0; t < Tq; t++) {
                    int li = t - len;
                    tokens[b * Tq + t] = t < len ? (unsigned char)text[t] : li < (int)strlen(lab) ? (unsigned char)lab[li] : ' ';
                }
            }
            if (dt_forward(m, rs, tokens, NULL, 2, Tq, NULL, err) != 0) {
                rc = -1;
                break;
            }
            if (out->prompt_tokens < Tq) out->prompt_tokens = Tq;
            const float *logits = dt_runstate_logits(rs);
            double lp_red = label_logprob(logits, V, len, label_names[0]);
            double lp_blue = label_logprob(logits + (size_t)Tq * V, V, len, label_names[1]);
            correct += (lp_blue > lp_red ? 1 : 0) == truth;
        }
        out->accuracy[perm] = (double)correct / p->queries;
    }
    dt_runstate_free(rs);
    free(text);
    free(tokens);
    if (rc != 0) {
        icl_result_free(out);
        return -1;
    }
    out->permutations = p->permutations;
    out->queries = p->queries;
    icl_summarize(out->accuracy, out->permutations, &out->mean, &out->std, &out->min, &out->max);
    return 0;
}

void icl_result_free(icl_result *r) {
    free(r->accuracy);
    r->accuracy = NULL;
}
