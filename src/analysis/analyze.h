/* analyze.h — the paper's analyses of a trained model (internal): activation outliers,
 * attention-logit quantisation, attention allocation on retrieval and
 * training dynamics (λ, gradient-norm spikes) from metrics.jsonl.
 *
 * Plain functions without global state, used by `difftrans analyze` and meant for a later
 * `difftrans compare` report. Every function that can fail returns 0 or -1 with a message in *err
 * naming the file, sample or argument; every struct a function fills has a matching _free that is
 * safe on a zeroed struct. A function overwrites its output struct (free an earlier result first)
 * and leaves it zeroed when it fails. The exact definitions are written out at the top of analyze.c.
 */
#ifndef DT_ANALYZE_H
#define DT_ANALYZE_H
#include <stddef.h>

#include "analysis/needle.h"
#include "difftrans.h"

struct cJSON;

/* ---------------------------------------------------------------- |x| statistics */

/* top1 = largest |x|, top10 = the 10th largest |x| (the smallest |x| when fewer than 10 values),
 * median = the middle |x| (mean of the two middle values for an even count). Exact. */
typedef struct {
    double top1, top10, median;
    size_t count;
} an_abs_stats;

/* A growing collection of |x| values (exact statistics; 4 bytes per value). */
typedef struct {
    float *v;
    size_t n, cap;
} an_abs_acc;

int an_abs_acc_add(an_abs_acc *a, const float *x, size_t n, dt_error *err);
/* Statistics of everything added; reorders the stored values. count = 0 gives all zeros. */
void an_abs_acc_stats(an_abs_acc *a, an_abs_stats *out);
void an_abs_acc_free(an_abs_acc *a);
/* Convenience: statistics of one array (x is not modified). */
int an_abs_stats_of(const float *x, size_t n, an_abs_stats *out, dt_error *err);
/* {"top1", "top10", "median", "count"} as a cJSON object (analyze_json.c, like every *_json below:
 * the one JSON form of each analysis, for `analyze --json` and the compare report) */
struct cJSON *an_abs_stats_json(const an_abs_stats *s);

/* ---------------------------------------------------------------- outliers */

typedef struct {
    int n_layers;             /* L */
    int windows, seq;         /* windows of `seq` bytes that were run */
    an_abs_stats logits;      /* |scaled attention scores|, causal entries, all layers and heads */
    an_abs_stats hidden;      /* |residual stream|, layers 0..L (L = the final norm's input) */
    double *layer_logit_max;  /* [L] */
    double *layer_hidden_max; /* [L + 1] */
} an_outliers;

/* Runs up to `windows` consecutive, non-overlapping windows of `seq` tokens from the start of
 * tokens[0, n) (as many as fit, at least one: n >= seq is required) one per forward. */
int an_outliers_run(const dt_model *m, const int *tokens, size_t n, int seq, int windows, an_outliers *out,
                    dt_error *err);
void an_outliers_free(an_outliers *o);
/* adds windows, seq, attention_logits, hidden_states, layer_logit_max, layer_hidden_max to o;
 * 0, or -1 when out of memory */
int an_outliers_add_json(struct cJSON *o, const an_outliers *r);

/* ---------------------------------------------------------------- quantisation */

typedef struct {
    int bits;                         /* 0 = unquantised */
    double loss;                      /* mean next-byte cross-entropy (nats) */
    double accuracy;                  /* fraction of positions where argmax(logits) = target */
    size_t count;                     /* predictions scored */
    int needle_total, needle_correct; /* -1 / -1 when no needle set was given */
} an_quant_row;

/* rows[0..n) as a JSON array: bits, loss, accuracy, count (and needle_correct, needle_total,
 * needle_accuracy when a needle set was scored); NULL when out of memory */
struct cJSON *an_quant_rows_json(const an_quant_row *rows, int n);

/* Loss and next-byte accuracy over up to `windows` consecutive windows of seq + 1 tokens (input
 * seq, targets shifted by one), one window per forward, with the run options `opt` (the reference
 * kernel is always used, so bits = 0 and bits > 0 share one code path). */
int an_eval_text(const dt_model *m, const dt_run_options *opt, const int *tokens, size_t n, int seq, int windows,
                 double *loss, double *accuracy, size_t *count, dt_error *err);

/* Teacher-forced exact match on a needle test set: each sample's whole text (every question with its
 * true answer) goes through one forward as the model reads it (tok: its tokenizer, NULL for bytes;
 * the prompt and answer tokens of needle_eval); query r is correct when the argmax at every position
 * from the prompt's last token on predicts the answer's next token — the same verdict as greedy
 * decoding. max_samples <= 0: all. */
int an_needle_exact(const dt_model *m, const dt_tok *tok, const dt_run_options *opt, const needle_testset *ts,
                    int max_samples, int *correct, int *total, dt_error *err);

/* ---------------------------------------------------------------- allocation */

/* Sums of one attention row over the context (signed weights w: A for the baseline, A1 − λ·A2 for
 * a differential head). */
typedef struct {
    double span;        /* Σ over the answer span of w */
    double span_abs;    /* Σ over the answer span of |w| */
    double context;     /* Σ over the whole context of w */
    double context_abs; /* Σ over the whole context of |w| */
    double row;         /* Σ over the whole row (0 .. query position) of w */
} an_alloc_sums;

/* One query row `row` of a [T, T] map `a1` (and, for DIFF, its partner map `a2` and λ; a2 = NULL
 * for the baseline). Context = columns [0, ctx_len), answer span = [span0, span0 + span_len). */
void an_alloc_row(const float *a1, const float *a2, float lambda, int T, int row, int ctx_len, int span0, int span_len,
                  an_alloc_sums *out);
/* answer share = span / context_abs; noise share = (context_abs − span_abs) / context_abs
 * (both 0 when context_abs = 0). */
double an_alloc_answer_share(const an_alloc_sums *s);
double an_alloc_noise_share(const an_alloc_sums *s);

typedef struct {
    int n_layers, heads;  /* heads: differential heads (H/2) for DIFF, H for the baseline */
    int samples, rows;    /* samples used, query rows averaged (per layer: rows × heads maps) */
    double *answer_share; /* [L] mean over heads and rows of the answer share */
    double *noise_share;  /* [L] mean of the noise share */
    double *span, *span_abs, *context, *context_abs, *row; /* [L] mean raw sums */
    double mean_answer_share, mean_noise_share;            /* means over layers */
} an_allocation;

/* Per sample, one forward over its text as the model reads it (tok: its tokenizer, NULL for bytes).
 * In tokens (textmap.h): the row is the prompt's last token (it predicts the answer's first token),
 * the context the tokens that end within the sample's context_length bytes, the answer span the
 * tokens that overlap the queried needle's value bytes. */
int an_allocation_run(const dt_model *m, const dt_tok *tok, const needle_testset *ts, int max_samples,
                      an_allocation *out, dt_error *err);
void an_allocation_free(an_allocation *a);
/* adds heads, samples, rows, answer_share, noise_share and the per-layer arrays to o; 0 or -1 */
int an_allocation_add_json(struct cJSON *o, const an_allocation *a);

/* ---------------------------------------------------------------- training dynamics */

#define AN_SPIKE_WINDOW 50      /* preceding steps a spike is judged against */
#define AN_SPIKE_MIN_HISTORY 10 /* steps before the first one that can be a spike */

/* flags[i] = 1 when g[i] is a spike (see analyze.c); returns the number of spikes. */
int an_spikes(const double *g, int n, int *flags);

typedef struct {
    char path[4096]; /* the metrics.jsonl read */
    int arch;        /* dt_arch from the run's config.json, -1 when it has none */
    int n_steps;     /* lines read */
    int first_step, last_step;
    int n_layers;                                                 /* λ entries per line */
    double *lambda_first, *lambda_last, *lambda_min, *lambda_max; /* [n_layers] */
    double gn_mean, gn_std, gn_max;
    int spikes;
    int *spike_steps; /* [spikes] step numbers */
    double final_train_loss;
    double final_val_loss; /* NAN when no line has val_loss */
    int final_val_step;
} an_training;

/* path: a training run directory (its metrics.jsonl, and config.json when present) or a metrics file. */
int an_training_load(const char *path, an_training *out, dt_error *err);
void an_training_free(an_training *t);
/* adds steps_logged, first/last step, the final losses, gradient-norm statistics and spikes, and
 * λ per layer (first, last, min, max; when the run logs λ) to o; 0 or -1 */
int an_training_add_json(struct cJSON *o, const an_training *t);

/* Writes a cJSON tree (a `cJSON *`, not freed) to path atomically, naming path in errors. */
int an_write_json(const char *path, void *json, dt_error *err);
#endif
