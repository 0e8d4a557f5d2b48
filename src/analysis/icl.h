/* icl.h — in-context learning and its sensitivity to the order of the examples (a claim of the
 * paper), on a synthetic classification task that needs no dataset.
 *
 * The task. Items are random lowercase words of 3–7 letters; the label is "red" when the word's
 * first letter is in a–m and "blue" otherwise — a rule a model can only get from the examples.
 * A prompt holds `shots` demonstrations (half of each label), then one query:
 *     Input: WORD\nLabel: LABEL\n\n   (× shots)   Input: QUERY\nLabel: 
 * The model's answer is the label whose bytes have the higher total log-probability after the
 * prompt (teacher-forced; no sampling). A model with a real vocabulary reads prompt + label through
 * its tokenizer (textmap.h); the two encodings share their first tokens, and each label's score is
 * that of its remaining tokens (" red" when the space before it joins the label's token). The same demonstrations are shown in `permutations`
 * random orders, each scored on the same `queries` (half of each label), so chance is 0.5 and
 * the spread of accuracy across orders is the measure of order sensitivity.
 * Everything is deterministic from the seed. */
#ifndef DT_ICL_H
#define DT_ICL_H
#include <stdint.h>

#include "difftrans.h"

struct cJSON;

#define ICL_MAX_WORD 8
#define ICL_MAX_SHOTS 256
#define ICL_MAX_PROMPT (ICL_MAX_SHOTS * 28 + 22) /* bytes: 28 per demonstration at most, 22 for the query */

typedef struct {
    int shots;          /* demonstrations per prompt (even) */
    int permutations;   /* orders of the same demonstrations */
    int queries;        /* scored queries per order (even) */
    uint64_t seed;
} icl_params;

typedef struct {
    int permutations, queries, prompt_tokens; /* prompt_tokens: the longest prompt + label */
    double *accuracy;                         /* [permutations] */
    double mean, std, min, max;               /* over the permutations; std is the population std */
} icl_result;

void icl_params_default(icl_params *p);
/* 0 = "red", 1 = "blue" */
int icl_label_of(const char *word);
const char *icl_label_name(int label);
/* Writes the prompt of permutation `perm` for query `q` (without a label) into out (capacity
 * cap); returns its length, or -1 when it does not fit. */
int icl_prompt(const icl_params *p, int perm, int q, char *out, int cap, int *query_label);
/* mean, std, min, max of acc[0..n) */
void icl_summarize(const double *acc, int n, double *mean, double *std, double *min, double *max);
/* tok: the model's tokenizer, NULL for a byte-level model. */
int icl_run(const dt_model *m, const dt_tok *tok, const icl_params *p, icl_result *out, dt_error *err);
void icl_result_free(icl_result *r);
/* adds accuracy (per order), mean, std, min, max to o (analyze_json.c); 0, or -1 when out of memory */
int icl_result_add_json(struct cJSON *o, const icl_result *r);
#endif
