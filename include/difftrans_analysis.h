/* difftrans_analysis.h — the analysis toolkit of libdifftrans: the paper's measurements on
 * trained models (activation outliers, attention-logit quantisation, attention allocation on
 * retrieval, training dynamics, in-context learning and its order sensitivity, scaling), the
 * quality of post-training quantisation, the multi-needle retrieval task, the synthetic tasks
 * small models learn in a short budget, the statistics a comparison draws its verdicts from,
 * and `difftrans compare` as one library call.
 *
 * Conventions (those of difftrans.h, which this header includes):
 *   - Every function that can fail returns 0 or -1 with a message in *err naming the file,
 *     sample or argument (the library's own names: a field of an options struct, a parameter).
 *   - Every struct a function fills has a matching _free that is safe on a zeroed struct. A
 *     function overwrites its output struct (free an earlier result first) and leaves it zeroed
 *     when it fails.
 *   - A model reads text as bytes (tok NULL, a byte-level model) or through its tokenizer
 *     (dt_model_tok); lengths, windows and positions count the model's tokens.
 *   - No global state; everything is deterministic from the seeds given.
 *   - The *_json functions build cJSON objects (<cjson/cJSON.h>); the caller owns what they
 *     return and frees it with cJSON_Delete.
 * The exact definitions of every measurement are written out at the top of the source files
 * in src/analysis/.
 */
#ifndef DIFFTRANS_ANALYSIS_H
#define DIFFTRANS_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#include "difftrans.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* ---------------------------------------------------------------- statistics
 *
 * Means with 95% confidence intervals and the verdict a comparison may draw from them.
 * Intervals use Student's t with n − 1 degrees of freedom (n ≥ 2); NaN values are skipped. A
 * comparison of two models is paired (the same seeds, or the same examples): the interval is
 * that of the mean of the differences a_i − b_i. */

typedef struct {
    int n;          /* values used (NaN skipped) */
    double mean;    /* NAN when n = 0 */
    double half;    /* 95% half-width; NAN when n < 2 */
    double lo, hi;  /* mean ∓ half (NAN when half is) */
} dt_stats_interval;

/* The 0.975 quantile of Student's t with df degrees of freedom (df ≥ 1). */
double dt_stats_t975(int df);
/* The mean of x[0, n) and its 95% interval. */
dt_stats_interval dt_stats_mean_ci(const double *x, int n);
/* Paired: the interval of mean(a_i − b_i) over the i where both are numbers. */
dt_stats_interval dt_stats_paired_diff_ci(const double *a, const double *b, int n);

typedef enum {
    DT_STATS_UNRESOLVED = 0, /* "no difference this run can resolve" */
    DT_STATS_A_BETTER = 1,
    DT_STATS_B_BETTER = 2,
} dt_stats_verdict;

/* From the paired difference a − b: A is better when the whole interval lies on A's side
 * (below 0 when lower is better, above 0 otherwise), B likewise; anything else, including a
 * missing interval, is unresolved. So is an interval of width 0 over fewer than
 * DT_STATS_MIN_EQUAL_PAIRS pairs: two runs whose counts happen to differ by the same amount
 * measure no spread, not a certain difference. */
#define DT_STATS_MIN_EQUAL_PAIRS 3
dt_stats_verdict dt_stats_verdict_of(const dt_stats_interval *diff, int lower_better);

/* ---------------------------------------------------------------- multi-needle retrieval
 *
 * The paper's multi-needle retrieval task: N needles — "The magic number of <key> is <value>."
 * with distinct keys and values — hidden in filler text cut from a corpus, R of them queried
 * after the context. Text is placed by byte offsets. The exact sample format and the placement
 * rule are written out at the top of src/analysis/needle_generate.c, the files and their JSON
 * layout at the top of needle_io.c; needle_score.c scores a model.
 *
 *   dt_needle_params_default / dt_needle_params_validate   what to generate
 *   dt_needle_corpus_load / dt_needle_corpus_from_bytes    filler source (cleaned once)
 *   dt_needle_generate_sample                           one sample from a 64-bit seed
 *   dt_needle_write_dataset(_for)                       DIR/train.txt, DIR/test.jsonl, DIR/needle.json
 *   dt_needle_sized_for                                 the model a set's needle.json says it was sized for
 *   dt_needle_load_testset                              test.jsonl back, every offset re-checked
 *   dt_needle_eval                                      greedy exact-match accuracy per cell */

#define DT_NEEDLE_GENERATOR_VERSION 1
#define DT_NEEDLE_MAX_NEEDLES 64        /* needles (and so queries) per sample */
#define DT_NEEDLE_MAX_LIST 32           /* context lengths, and depths, per data set */
#define DT_NEEDLE_MIN_KEY 4             /* generated keys: lowercase words of 4..8 letters */
#define DT_NEEDLE_MAX_KEY 8
#define DT_NEEDLE_VALUE_DIGITS 5        /* generated values: 10000..99999 */
#define DT_NEEDLE_KEY_CAP 64            /* longest key a loaded test set may hold (bytes) */
#define DT_NEEDLE_VALUE_CAP 32          /* longest value a loaded test set may hold (bytes; and tokens of an answer) */
#define DT_NEEDLE_MAX_CONTEXT (1 << 20) /* bytes of context per sample */
#define DT_NEEDLE_MAX_SAMPLES 10000000  /* samples per set */

/* The fixed text of a needle sentence and of a question (see "the sample format" in needle_generate.c) */
#define DT_NEEDLE_SENTENCE_HEAD "The magic number of "
#define DT_NEEDLE_SENTENCE_MID " is "
#define DT_NEEDLE_QUESTION_HEAD "\nQuestion: What is the magic number of "
#define DT_NEEDLE_QUESTION_TAIL "?\nAnswer: "

/* Bytes one inserted needle takes in the context at most: the sentence with the longest key,
 * plus its one separator byte. A context must hold `needles` of these. */
#define DT_NEEDLE_SENTENCE_FIXED 25     /* strlen("The magic number of ") + strlen(" is ") + strlen(".") */
#define DT_NEEDLE_UNIT_MAX (DT_NEEDLE_SENTENCE_FIXED + DT_NEEDLE_MAX_KEY + DT_NEEDLE_VALUE_DIGITS + 1)

/* What to generate; [defaults of dt_needle_params_default]. */
typedef struct {
    int n_contexts;
    int contexts[DT_NEEDLE_MAX_LIST];   /* context lengths in bytes [512, 1024] */
    int n_depths;
    double depths[DT_NEEDLE_MAX_LIST];  /* depths of the first queried needle, each in [0, 1] [0,.25,.5,.75,1] */
    int needles;                     /* N [6] */
    int queries;                     /* R ≤ N [2] */
    int n_train, n_test;             /* samples per set, spread round-robin over the cells [1000, 100] */
    uint64_t seed;                   /* [42] */
} dt_needle_params;

/* Fills p with the defaults above. */
void dt_needle_params_default(dt_needle_params *p);
/* Ranges and consistency: R ≤ N, depths in [0, 1], every context ≥ N·DT_NEEDLE_UNIT_MAX, ...;
 * a refusal names the field (contexts, depths, needles, queries, n_train, n_test). */
int dt_needle_params_validate(const dt_needle_params *p, dt_error *err);

/* The filler source, cleaned (see "Corpus" in needle_generate.c); never empty. Owns bytes. */
typedef struct {
    unsigned char *bytes;
    size_t n;
    int has_newline;
} dt_needle_corpus;

/* Reads and cleans the text file at path (a regular file). */
int dt_needle_corpus_load(dt_needle_corpus *c, const char *path, dt_error *err);
/* The same from n bytes in memory (copied); `what` names the source in messages (a path, or
 * e.g. "corpus"). */
int dt_needle_corpus_from_bytes(dt_needle_corpus *c, const void *data, size_t n, const char *what, dt_error *err);
/* Frees the bytes; safe on a zeroed corpus. */
void dt_needle_corpus_free(dt_needle_corpus *c);

typedef struct {
    char key[DT_NEEDLE_KEY_CAP + 1];
    char value[DT_NEEDLE_VALUE_CAP + 1];
    int offset, length;              /* the sentence "The magic number of K is V." in text (bytes) */
    int value_offset, value_length;  /* V inside that sentence: the answer span (bytes) */
} dt_needle_needle;

typedef struct {
    int needle;                      /* index into dt_needle_sample.needles */
    int question_offset;             /* the 'Q' of "Question: " (byte offset) */
    int prompt_end_offset;           /* where the answer (the value) begins: the prompt is text[0, this) */
    int answer_length;               /* bytes of the answer (= the needle's value_length) */
} dt_needle_query;

/* One sample: its text (owned) and where everything sits in it. */
typedef struct {
    long id;                         /* index within its set */
    int context_length;              /* bytes */
    double depth;                    /* requested depth of the first queried needle */
    double needle_depth;             /* where it landed: its sentence offset / (context_length − sentence length) */
    uint64_t seed;                   /* dt_needle_generate_sample(…, seed, …) rebuilds this sample */
    int n_needles;
    dt_needle_needle needles[DT_NEEDLE_MAX_NEEDLES]; /* in order of offset */
    int n_queries;
    dt_needle_query queries[DT_NEEDLE_MAX_NEEDLES];  /* in the order they are asked; queries[0] is at `depth` */
    char *text;                      /* text_length bytes + a NUL (no NUL inside) */
    int text_length;
    int line;                        /* loaded samples: line in the .jsonl file, else 0 */
} dt_needle_sample;

/* Builds one sample of context_length bytes with its first queried needle at `depth`, drawing
 * everything from a splitmix64 stream started at `seed`. p supplies needles and queries. */
int dt_needle_generate_sample(const dt_needle_params *p, int context_length, double depth, uint64_t seed,
                           const dt_needle_corpus *corpus, dt_needle_sample *out, dt_error *err);
/* Frees the text; safe on a zeroed sample. */
void dt_needle_sample_free(dt_needle_sample *s);
/* Re-checks a sample's internal consistency (every offset, the sentence and answer bytes);
 * `where` prefixes messages (e.g. "test.jsonl:3"). */
int dt_needle_sample_check(const dt_needle_sample *s, const char *where, dt_error *err);
/* One line of test.jsonl (no newline); the caller frees it with free(). NULL when out of memory. */
char *dt_needle_sample_to_json(const dt_needle_sample *s);

/* The two streams train and test samples draw their seeds from (different, both from seed). */
void dt_needle_stream_seeds(uint64_t seed, uint64_t *train_seed, uint64_t *test_seed);
/* The cell (context length, depth) of sample i of a set: round-robin, depths varying fastest. */
void dt_needle_cell_of(const dt_needle_params *p, long i, int *context_length, double *depth);
/* The most tokens a sample of p's test set (its train set when p->n_test is 0) takes at a context of
 * `context` bytes, read as dt_needle_eval reads it (tok: the model's tokenizer, no special tokens
 * added; NULL: bytes). Sample i's text at one length depends on its seed and depth alone, so this
 * bounds the set's samples of that length whatever else p->contexts lists. */
int dt_needle_most_tokens(const dt_needle_params *p, const dt_needle_corpus *corpus, const dt_tok *tok, int context,
                          int *most, dt_error *err);
/* Context lengths for a model of max_tokens positions that reads text through tok (NULL: bytes):
 * p->contexts becomes the longest context in bytes at which every sample of the test set is at most
 * max_tokens tokens (dt_needle_most_tokens), preceded by the longest at most max_tokens / 2 when that
 * one holds p->needles. most (may be NULL; room for 2) gets each context's most tokens. Returns the
 * number of contexts set; 0, p unchanged, when not even the shortest context holding p->needles fits
 * max_tokens (fewer needles or queries may); -1 on error. */
int dt_needle_fit_contexts(dt_needle_params *p, const dt_needle_corpus *corpus, const dt_tok *tok, int max_tokens,
                           int *most, dt_error *err);

/* Writes dir/train.txt, dir/test.jsonl and dir/needle.json (each atomically; dir is created if
 * missing). corpus_path is only recorded in needle.json. */
int dt_needle_write_dataset(const dt_needle_params *p, const dt_needle_corpus *corpus, const char *corpus_path,
                         const char *dir, dt_error *err);

/* The model a set was sized for: its samples fit its positions in its tokens (dt_needle_fit_contexts),
 * which another tokenizer reads as other numbers of tokens. */
typedef struct {
    char path[4096];                 /* the model's directory as given */
    int max_position_embeddings;
    char tokenizer[17];              /* dt_vocab_fingerprint of its vocabulary; "" for a byte-level model */
} dt_needle_model;
/* *out for the model m loaded from path; a model of token ids only is refused (it reads no text). */
int dt_needle_model_of(const dt_model *m, const char *path, dt_needle_model *out, dt_error *err);
/* dt_needle_write_dataset recording in needle.json ("model") the model the set was sized for
 * (NULL: none). */
int dt_needle_write_dataset_for(const dt_needle_params *p, const dt_needle_corpus *corpus, const char *corpus_path,
                                const dt_needle_model *model, const char *dir, dt_error *err);
/* The model the needle.json beside the test set at path (a directory, or its test.jsonl) records:
 * 1 with *model; 0 when it records none (a set sized for no model, one written before needle.json
 * recorded it, or a test.jsonl without needle.json); -1 (DT_ERR_FORMAT naming the file) when
 * needle.json is not JSON or its "model" is not what dt_needle_write_dataset_for writes. */
int dt_needle_sized_for(const char *path, dt_needle_model *model, dt_error *err);

/* A loaded test set; owns its samples. */
typedef struct {
    char path[4096];                 /* the test.jsonl read */
    int n;
    dt_needle_sample *samples;
} dt_needle_testset;

/* path: a test.jsonl file, or a directory holding one. Every sample is re-checked. */
int dt_needle_load_testset(dt_needle_testset *ts, const char *path, dt_error *err);
/* Frees every sample; safe on a zeroed set. */
void dt_needle_testset_free(dt_needle_testset *ts);

/* One cell of the evaluation grid. */
typedef struct {
    int context_length;
    double depth;
    int samples;                     /* samples in the cell */
    int n, correct;                  /* queries scored (all of every sample), and answered exactly */
    int first_correct;               /* samples whose first query (the one at `depth`) was answered exactly */
} dt_needle_cell;

/* One scored query. */
typedef struct {
    int sample, query;               /* indices into the test set and into the sample's queries */
    int correct;
    int n_predicted;
    int predicted[DT_NEEDLE_VALUE_CAP]; /* the greedy token ids (as many as the answer has tokens) */
} dt_needle_item;

/* What dt_needle_eval measured; owns cells and items. */
typedef struct {
    int n_cells;
    dt_needle_cell *cells;              /* sorted by context length, then depth */
    int n_items;
    dt_needle_item *items;              /* every (sample, query), in test-set order */
    int total, correct;
} dt_needle_results;

/* Called after each sample: samples done of total, queries correct and scored so far. */
typedef void (*dt_needle_progress_fn)(void *ctx, int done, int total, int correct_so_far, int scored_so_far);

/* Greedy decoding through a KV cache. The model reads each sample's text as its tokens (tok: the
 * model's tokenizer, NULL for a byte-level model): for each query the prompt is the tokens that
 * end at or before prompt_end_offset (earlier questions come with their true answers), the
 * answer the tokens that overlap the value's bytes (for bytes: exactly them, answer_length of
 * them). The argmax continuation of that many tokens is correct when it is exactly those tokens
 * (so it decodes to the answer text). Refuses (before decoding anything) any sample longer than
 * the model's max_position_embeddings, naming the file and the sample. progress may be NULL. */
int dt_needle_eval(const dt_model *m, const dt_tok *tok, const dt_needle_testset *ts, dt_needle_results *r,
                dt_needle_progress_fn progress, void *progress_ctx, dt_error *err);
/* Frees cells and items; safe on zeroed results. */
void dt_needle_results_free(dt_needle_results *r);

/* ---------------------------------------------------------------- |x| statistics */

/* top1 = largest |x|, top10 = the 10th largest |x| (the smallest |x| when fewer than 10 values),
 * median = the middle |x| (mean of the two middle values for an even count). Exact. */
typedef struct {
    double top1, top10, median;
    size_t count;
} dt_an_abs_stats;

/* A growing collection of |x| values (exact statistics; 4 bytes per value); owns v. */
typedef struct {
    float *v;
    size_t n, cap;
} dt_an_abs_acc;

/* Adds |x[i]| for i in [0, n); -1 when out of memory or past 2^30 values. */
int dt_an_abs_acc_add(dt_an_abs_acc *a, const float *x, size_t n, dt_error *err);
/* Statistics of everything added; reorders the stored values. count = 0 gives all zeros. */
void dt_an_abs_acc_stats(dt_an_abs_acc *a, dt_an_abs_stats *out);
/* Frees the values; safe on a zeroed accumulator. */
void dt_an_abs_acc_free(dt_an_abs_acc *a);
/* Statistics of one array (x is not modified). */
int dt_an_abs_stats_of(const float *x, size_t n, dt_an_abs_stats *out, dt_error *err);
/* {"top1", "top10", "median", "count"}; NULL when out of memory. The one JSON form of each
 * analysis (like every *_json below), for `analyze --json` and the compare report. */
struct cJSON *dt_an_abs_stats_json(const dt_an_abs_stats *s);

/* ---------------------------------------------------------------- outliers */

/* Activation outliers of a model; owns the per-layer arrays. */
typedef struct {
    int n_layers;             /* L */
    int windows, seq;         /* windows of `seq` tokens that were run */
    dt_an_abs_stats logits;      /* |scaled attention scores|, causal entries, all layers and heads */
    dt_an_abs_stats hidden;      /* |residual stream|, layers 0..L (L = the final norm's input) */
    double *layer_logit_max;  /* [L] */
    double *layer_hidden_max; /* [L + 1] */
} dt_an_outliers;

/* Runs up to `windows` consecutive, non-overlapping windows of `seq` tokens from the start of
 * tokens[0, n) (as many as fit, at least one: n >= seq is required) one per forward. */
int dt_an_outliers_run(const dt_model *m, const int *tokens, size_t n, int seq, int windows, dt_an_outliers *out,
                    dt_error *err);
/* Frees the per-layer arrays; safe on a zeroed struct. */
void dt_an_outliers_free(dt_an_outliers *o);
/* Adds windows, seq, attention_logits, hidden_states, layer_logit_max, layer_hidden_max to o;
 * 0, or -1 when out of memory. */
int dt_an_outliers_add_json(struct cJSON *o, const dt_an_outliers *r);

/* ---------------------------------------------------------------- attention-logit quantisation */

/* One row of the attention-logit quantisation table. */
typedef struct {
    int bits;                         /* 0 = unquantised */
    double loss;                      /* mean next-token cross-entropy (nats) */
    double accuracy;                  /* fraction of positions where argmax(logits) = target */
    size_t count;                     /* predictions scored */
    int needle_total, needle_correct; /* -1 / -1 when no needle set was given */
} dt_an_quant_row;

/* rows[0..n) as a JSON array: bits, loss, accuracy, count (and needle_correct, needle_total,
 * needle_accuracy when a needle set was scored); NULL when out of memory. */
struct cJSON *dt_an_quant_rows_json(const dt_an_quant_row *rows, int n);

/* Loss and next-token accuracy over up to `windows` consecutive windows of seq + 1 tokens (input
 * seq, targets shifted by one), one window per forward, with the run options `opt` (the reference
 * kernel is always used, so bits = 0 and bits > 0 share one code path). */
int dt_an_eval_text(const dt_model *m, const dt_run_options *opt, const int *tokens, size_t n, int seq, int windows,
                 double *loss, double *accuracy, size_t *count, dt_error *err);

/* Teacher-forced exact match on a needle test set: each sample's whole text (every question with its
 * true answer) goes through one forward as the model reads it (tok: its tokenizer, NULL for bytes;
 * the prompt and answer tokens of dt_needle_eval); query r is correct when the argmax at every position
 * from the prompt's last token on predicts the answer's next token — the same verdict as greedy
 * decoding. max_samples <= 0: all. */
int dt_an_needle_exact(const dt_model *m, const dt_tok *tok, const dt_run_options *opt, const dt_needle_testset *ts,
                    int max_samples, int *correct, int *total, dt_error *err);

/* What dt_an_quant_run measures on; the arrays are the caller's. */
typedef struct {
    const int *tokens;               /* the text as the model's tokens */
    size_t n;
    int seq, windows;                /* up to `windows` windows of seq + 1 tokens, as dt_an_eval_text */
    int n_bits;                      /* bit widths bits[0, n_bits), each 2..24 */
    const int *bits;
    int per_row;                     /* absmax scale per query row instead of per head map */
    const dt_needle_testset *needle; /* NULL: no needle accuracy */
    const dt_tok *needle_tok;        /* the model's tokenizer the needle texts are read with; NULL: bytes */
    int max_samples;                 /* needle samples; <= 0: all */
} dt_an_quant_params;

/* The attention-logit quantisation table: rows[0] unquantised (bits 0), rows[1 + i] with the
 * attention logits fake-quantised (symmetric, absmax scale) to p->bits[i]; each row the loss and
 * accuracy of dt_an_eval_text and, with a needle set, the exact match of dt_an_needle_exact
 * (else -1 / -1). rows has p->n_bits + 1 entries. */
int dt_an_quant_run(const dt_model *m, const dt_an_quant_params *p, dt_an_quant_row *rows, dt_error *err);

/* ---------------------------------------------------------------- attention allocation */

/* Sums of one attention row over the context (signed weights w: A for the baseline, A1 − λ·A2 for
 * a differential head). */
typedef struct {
    double span;        /* Σ over the answer span of w */
    double span_abs;    /* Σ over the answer span of |w| */
    double context;     /* Σ over the whole context of w */
    double context_abs; /* Σ over the whole context of |w| */
    double row;         /* Σ over the whole row (0 .. query position) of w */
} dt_an_alloc_sums;

/* One query row `row` of a [T, T] map `a1` (and, for DIFF, its partner map `a2` and λ; a2 = NULL
 * for the baseline). Context = columns [0, ctx_len), answer span = [span0, span0 + span_len). */
void dt_an_alloc_row(const float *a1, const float *a2, float lambda, int T, int row, int ctx_len, int span0, int span_len,
                  dt_an_alloc_sums *out);
/* answer share = span / context_abs; noise share = (context_abs − span_abs) / context_abs
 * (both 0 when context_abs = 0). */
double dt_an_alloc_answer_share(const dt_an_alloc_sums *s);
double dt_an_alloc_noise_share(const dt_an_alloc_sums *s);

/* Attention allocation of a model on a needle set; owns the per-layer arrays. */
typedef struct {
    int n_layers, heads;  /* heads: differential heads (H/2) for DIFF, H for the baseline */
    int samples, rows;    /* samples used, query rows averaged (per layer: rows × heads maps) */
    double *answer_share; /* [L] mean over heads and rows of the answer share */
    double *noise_share;  /* [L] mean of the noise share */
    double *span, *span_abs, *context, *context_abs, *row; /* [L] mean raw sums */
    double mean_answer_share, mean_noise_share;            /* means over layers */
} dt_an_allocation;

/* Per sample, one forward over its text as the model reads it (tok: its tokenizer, NULL for bytes):
 * the row is the prompt's last token (it predicts the answer's first token), the context the
 * tokens that end within the sample's context_length bytes, the answer span the tokens that
 * overlap the queried needle's value bytes. max_samples <= 0: all. */
int dt_an_allocation_run(const dt_model *m, const dt_tok *tok, const dt_needle_testset *ts, int max_samples,
                      dt_an_allocation *out, dt_error *err);
/* Frees the per-layer arrays; safe on a zeroed struct. */
void dt_an_allocation_free(dt_an_allocation *a);
/* Adds heads, samples, rows, answer_share, noise_share and the per-layer arrays to o; 0 or -1
 * when out of memory. */
int dt_an_allocation_add_json(struct cJSON *o, const dt_an_allocation *a);

/* ---------------------------------------------------------------- training dynamics */

#define DT_AN_SPIKE_WINDOW 50      /* preceding steps a spike is judged against */
#define DT_AN_SPIKE_MIN_HISTORY 10 /* steps before the first one that can be a spike */

/* flags[i] = 1 when g[i] is a spike: g[i] > mean + 3·std or > 3·median of the preceding
 * (at most DT_AN_SPIKE_WINDOW, at least DT_AN_SPIKE_MIN_HISTORY) values; returns the number of spikes. */
int dt_an_spikes(const double *g, int n, int *flags);

#define DT_AN_LAMBDA_POINTS 5      /* λ is kept at the first, last and three evenly spaced lines between */

/* A training run's metrics.jsonl, summarised; owns the arrays. */
typedef struct {
    char path[4096]; /* the metrics.jsonl read */
    int arch;        /* dt_arch from the run's config.json, -1 when it has none */
    int n_steps;     /* lines read */
    int first_step, last_step;
    int n_layers;                                                 /* λ entries per line */
    double *lambda_first, *lambda_last, *lambda_min, *lambda_max; /* [n_layers] */
    double gn_mean, gn_std, gn_max;                               /* gradient norm */
    int spikes;
    int *spike_steps; /* [spikes] step numbers */
    double final_train_loss;
    double final_val_loss; /* NAN when no line has val_loss */
    int final_val_step;
    /* train_state.json's batch, grad_accum and seq beside a run directory's metrics (a step trains their product
     * of tokens, so final_val_step times it before final_val_loss); all 0 when there is no such file */
    int batch, grad_accum, seq;
    int n_lambda_points;   /* λ at up to DT_AN_LAMBDA_POINTS lines spread over the run (analyze.c) */
    int lambda_step[DT_AN_LAMBDA_POINTS];
    double *lambda_at;     /* [n_lambda_points × n_layers] */
} dt_an_training;

/* path: a training run directory (its metrics.jsonl, and config.json and train_state.json when present) or a
 * metrics file. */
int dt_an_training_load(const char *path, dt_an_training *out, dt_error *err);
/* Frees the arrays; safe on a zeroed struct. */
void dt_an_training_free(dt_an_training *t);
/* Adds steps_logged, first/last step, the final losses, gradient-norm statistics and spikes, and
 * λ per layer (first, last, min, max, and lambda_points [{step, lambda}]; when the run logs λ) to
 * o; 0 or -1 when out of memory. */
int dt_an_training_add_json(struct cJSON *o, const dt_an_training *t);

/* ---------------------------------------------------------------- the reproduction protocol
 *
 * What the failed small-scale reproductions lacked, measured on one model and one text (the exact
 * definitions are at the top of src/analysis/protocol.c): the mean next-token loss overall and in
 * bins of equal width over the position in the context, the attention-sink mass per layer (the
 * weight the heads' rows t ≥ 1 put on the window's first token: DIFF's differential map and each
 * of its softmax maps, DIFF V2's combined heads' maps, the Transformer's softmax maps), and the RMS
 * of each head's context before its per-head norm (DIFF; DIFF V2 and the Transformer have none).
 * Run it on the training text and on held-out text with the same arguments for the two sides of
 * the train / held-out gap. */

#define DT_AN_PROTO_MAX_BINS 16

/* What dt_an_protocol_run measured; owns the per-layer arrays. */
typedef struct {
    int n_layers, n_heads, seq, windows, n_bins; /* n_heads: output heads (DIFF, DIFF V2: H/2; Transformer: H) */
    int head_width;                              /* channels of a head's context: DIFF 2·hd, else hd */
    double loss;                                 /* mean next-token cross-entropy, nats/token */
    int bin_start[DT_AN_PROTO_MAX_BINS + 1];     /* bin k: positions [bin_start[k], bin_start[k + 1]) */
    double bin_loss[DT_AN_PROTO_MAX_BINS];       /* mean cross-entropy of bin k's predictions */
    double *lambda;                              /* [n_layers] the λ the maps used (V2: mean); NAN: none */
    double *sink_mass;                           /* [n_layers] the heads' maps' mean weight on position 0 */
    double *sink_mass_map1, *sink_mass_map2;     /* [n_layers] each softmax map's (DIFF, V2); NAN: Transformer */
    double *head_rms;                            /* [n_layers × n_heads] RMS of each head's context */
} dt_an_protocol;

/* windows (up to; as many as fit without overlap) windows of seq + 1 tokens spread evenly over
 * tokens[0, n), n_bins bins. Refuses, naming the argument, seq < 2 or beyond the model's context,
 * windows < 1, n_bins outside 1..min(DT_AN_PROTO_MAX_BINS, seq), n < seq + 1. */
int dt_an_protocol_run(const dt_model *m, const int *tokens, size_t n, int seq, int windows, int n_bins,
                       dt_an_protocol *out, dt_error *err);
/* Frees the per-layer arrays; safe on a zeroed struct. */
void dt_an_protocol_free(dt_an_protocol *p);
/* Adds seq, windows, heads, head_width, loss, bins [{first, last, loss}], lambda, sink_mass,
 * sink_mass_map1, sink_mass_map2 (NaN as null) and head_rms [layer][head] to o; 0, or -1 when out
 * of memory. */
int dt_an_protocol_add_json(struct cJSON *o, const dt_an_protocol *p);

/* Writes a cJSON tree (a `cJSON *`, not freed) to path atomically, naming path in errors. */
int dt_an_write_json(const char *path, void *json, dt_error *err);

/* ---------------------------------------------------------------- post-training quantisation quality
 *
 * The quality of post-training weight / activation quantisation, DIFF and baseline side by
 * side: held-out loss increase over F32, mean KL divergence of the next-token distribution
 * from F32's, top-1 agreement, needle accuracy, and the activation outlier statistics
 * (per-channel absmax of each quantised layer's input, before and after smoothing). */

#define DT_AN_WQ_MAX_SCHEMES 8

typedef struct {
    char name[32];               /* "q8_0", "q4_0", "w8a8", "w8a8-dynamic", "w8a8-smooth", "w8a8-dynamic-smooth" */
    dt_quant_options opt;        /* scheme, dynamic_activations, smooth_alpha */
} dt_an_wq_scheme;

/* A comma-separated list of the names above (at most DT_AN_WQ_MAX_SCHEMES) into out[*n];
 * smoothing uses strength alpha. */
int dt_an_wq_parse_schemes(const char *list, float alpha, dt_an_wq_scheme *out, int *n, dt_error *err);

/* What dt_an_wq_run measures on; the token arrays are the caller's. */
typedef struct {
    const int *eval_tokens;      /* held-out text: up to `windows` consecutive windows of seq + 1 */
    size_t eval_n;
    int seq, windows;
    const int *calib_tokens;     /* calibration text (w8a8), disjoint from the held-out text */
    size_t calib_n;
    const char *calib_source;    /* what calib_tokens came from, named in messages (a file); may be NULL */
    int calib_samples, calib_seq;
    uint64_t seed;
    int lm_head;                 /* quantise the LM head too */
    const dt_needle_testset *needle; /* NULL: no needle accuracy */
    const dt_tok *needle_tok;    /* the model's tokenizer the needle texts are read with; NULL: bytes */
    int max_samples;             /* needle samples; <= 0: all */
} dt_an_wq_params;

/* The held-out and calibration texts of p from one text's tokens[0, n): held out is what dt_train
 * holds out of it (the tail after dt_train_split with dt_train_defaults' val_fraction, the last
 * tenth), calibration the part before it, or calib[0, n_calib) when calib is given (another text).
 * The arrays stay the caller's. Refused when the held-out tail is shorter than one window of
 * p->seq + 1 tokens (set seq first). */
int dt_an_wq_split(dt_an_wq_params *p, const int *tokens, size_t n, const int *calib, size_t n_calib, dt_error *err);

/* Activation outliers of one layer type (q, k, v, o, gate, up, down, lm_head) over every layer:
 * the largest per-channel absmax, and the mean over layers of absmax / median channel absmax. */
typedef struct {
    char type[16];
    double absmax, ratio, absmax_smoothed, ratio_smoothed;
} dt_an_wq_outliers;

/* One scheme's row; owns stats. */
typedef struct {
    char name[32];               /* "f32" for row 0 */
    double loss, loss_delta, kl, top1_agree, accuracy; /* nats, nats over F32, nats, fractions */
    size_t count;                /* predictions scored */
    int needle_correct, needle_total; /* -1 without a needle set */
    double decode_mb;            /* weights read per decoded token, MB (1e6 bytes) */
    int n_types;                 /* calibrated w8a8 rows: outliers per layer type (else 0) */
    dt_an_wq_outliers types[8];
    int n_stats;                 /* per quantised layer, from the calibration (else 0) */
    dt_quant_act_stat *stats;
} dt_an_wq_row;

/* rows[0] is F32, rows[1 + i] scheme i (rows has n + 1 entries); the model itself is left
 * unquantised. */
int dt_an_wq_run(const dt_model *m, const dt_an_wq_params *p, const dt_an_wq_scheme *schemes, int n, dt_an_wq_row *rows,
              dt_error *err);
/* Frees rows[0, n] (n + 1 rows, as dt_an_wq_run fills); safe on zeroed rows. */
void dt_an_wq_rows_free(dt_an_wq_row *rows, int n);
/* rows[0, n] as a cJSON array (NULL when out of memory). */
struct cJSON *dt_an_wq_rows_json(const dt_an_wq_row *rows, int n);

/* ---------------------------------------------------------------- in-context learning
 *
 * In-context learning and its sensitivity to the order of the examples, on a synthetic
 * classification task that needs no dataset. Items are random lowercase words of 3–7 letters;
 * the label is "red" when the word's first letter is in a–m and "blue" otherwise — a rule a
 * model can only get from the examples. A prompt holds `shots` demonstrations (half of each
 * label), then one query:
 *     Input: WORD\nLabel: LABEL\n\n   (× shots)   Input: QUERY\nLabel:
 * The model's answer is the label whose tokens have the higher total log-probability after the
 * prompt (teacher-forced; no sampling). A model with a real vocabulary reads prompt + label
 * through its tokenizer; the two encodings share their first tokens, and each label's score is
 * that of its remaining tokens (" red" when the space before it joins the label's token). The
 * same demonstrations are shown in `permutations` random orders, each scored on the same
 * `queries` (half of each label), so chance is 0.5 and the spread of accuracy across orders is
 * the measure of order sensitivity. Everything is deterministic from the seed. */

#define DT_ICL_MAX_WORD 8
#define DT_ICL_MAX_SHOTS 256
#define DT_ICL_MAX_PROMPT (DT_ICL_MAX_SHOTS * 28 + 22) /* bytes: 28 per demonstration at most, 22 for the query */

typedef struct {
    int shots;          /* demonstrations per prompt (even) [8] */
    int permutations;   /* orders of the same demonstrations [6] */
    int queries;        /* scored queries per order (even) [32] */
    uint64_t seed;      /* [1] */
} dt_icl_params;

/* What dt_icl_run measured; owns accuracy. */
typedef struct {
    int permutations, queries, prompt_tokens; /* prompt_tokens: the longest prompt + label */
    double *accuracy;                         /* [permutations] */
    double mean, std, min, max;               /* over the permutations; std is the population std */
} dt_icl_result;

/* Fills p with the defaults above. */
void dt_icl_params_default(dt_icl_params *p);
/* 0 = "red", 1 = "blue" */
int dt_icl_label_of(const char *word);
/* "red" or "blue" */
const char *dt_icl_label_name(int label);
/* Writes the prompt of permutation `perm` for query `q` (without a label) into out (capacity
 * cap bytes); returns its length, or -1 when it does not fit. *query_label gets its label. */
int dt_icl_prompt(const dt_icl_params *p, int perm, int q, char *out, int cap, int *query_label);
/* mean, std, min, max of acc[0..n) */
void dt_icl_summarize(const double *acc, int n, double *mean, double *std, double *min, double *max);
/* Scores the task (tok: the model's tokenizer, NULL for a byte-level model). A refusal names
 * the field of p (shots, queries, permutations) or the model's max_position_embeddings. */
int dt_icl_run(const dt_model *m, const dt_tok *tok, const dt_icl_params *p, dt_icl_result *out, dt_error *err);
/* Frees accuracy; safe on a zeroed result. */
void dt_icl_result_free(dt_icl_result *r);
/* Adds accuracy (per order), mean, std, min, max and spread (max − min) to o; 0, or -1 when out of memory. */
int dt_icl_result_add_json(struct cJSON *o, const dt_icl_result *r);

/* ---------------------------------------------------------------- scaling
 *
 * How much model DIFF needs for the baseline's loss (the paper's "~65% of the parameters"):
 * from runs of both kinds at several sizes, a power law loss = exp(a)·N^b per kind (least
 * squares on log loss against log parameters) and the DIFF size whose fitted loss equals the
 * baseline's at its largest run. */

typedef struct {
    int n;                  /* runs of this kind */
    double a, b;            /* log(loss) = a + b·log(params); NAN when n < 2 or all sizes equal */
} dt_scaling_fit;

/* Least-squares fit of log(loss) on log(params) over n points (n >= 2, distinct sizes). */
dt_scaling_fit dt_scaling_fit_power_law(const double *params, const double *loss, int n);
/* The parameters at which `fit` predicts `loss`; NAN when the fit is missing or flat (b >= 0). */
double dt_scaling_params_for_loss(const dt_scaling_fit *fit, double loss);

typedef struct {
    dt_scaling_fit fit[2];            /* [dt_arch]: fit[DT_ARCH_LLAMA] the baseline's, fit[DT_ARCH_DIFF] DIFF's */
    double base_params;       /* the baseline's largest run */
    double base_loss;         /* its loss, the mean over base_runs runs of that size (NAN without a baseline run) */
    int base_runs;            /* the baseline's runs of that size (seeds) */
    double diff_params;       /* the DIFF size the DIFF fit gives that loss (NAN when it cannot) */
    double fraction;          /* diff_params / base_params: the paper's ~0.65 */
} dt_scaling_comparison;

/* From n runs of either kind (is_diff[i] nonzero for DIFF): the fit per kind and the fraction of
 * the baseline's parameters DIFF needs for the baseline's loss at its largest size (the mean loss of
 * its runs of that size: the same whatever the order of the runs). */
dt_scaling_comparison dt_scaling_compare(const double *params, const double *loss, const int *is_diff, int n);

/* The scaling study's statistics (`difftrans study`): runs of two kinds (0: DIFF, 1: its
 * baseline) at n_sizes sizes × n_seeds seeds, with intervals from a paired bootstrap over the
 * seeds (scaling.c says exactly how). */
#define DT_SCALING_MAX_SIZES 8
#define DT_SCALING_MAX_SEEDS 16

typedef struct {
    int n_sizes, n_seeds;
    double params[2][DT_SCALING_MAX_SIZES];                      /* [kind][size] parameters fitted against */
    double loss[2][DT_SCALING_MAX_SIZES][DT_SCALING_MAX_SEEDS];  /* held-out loss; NAN: the run is missing */
} dt_scaling_runs;

typedef struct {
    double value;   /* on all runs; NAN when undefined there */
    double lo, hi;  /* 95% percentile interval over the resamples where it is defined (NAN: none) */
    int n;          /* resamples where it is defined */
} dt_estimate;

typedef struct {
    int n_sizes, resamples;
    uint64_t seed;
    dt_stats_interval diff[DT_SCALING_MAX_SIZES]; /* DIFF − baseline per size, paired over seeds (t interval) */
    dt_scaling_fit fit[2];   /* [kind] on all runs: log(loss) = a + b·log(params) */
    dt_estimate a[2], b[2];  /* the same with bootstrap intervals */
    double fraction_at;      /* the baseline's largest size */
    dt_estimate fraction;    /* the parameters at which DIFF's fit reaches the baseline fit's loss at
                                fraction_at, ÷ fraction_at (the paper's ~0.65) */
    dt_estimate crossing;    /* parameters where the two fits cross (NAN: parallel fits) */
    int crossing_in_range;   /* 1 when the fits on all runs cross between the smallest and largest run */
    double crossing_share;   /* fraction of resamples whose fits cross within that range */
} dt_scaling_study;

/* Fills *out from r (resamples ≥ 0, from `seed`); -1 naming the field for r out of range. */
int dt_scaling_study_fit(const dt_scaling_runs *r, int resamples, uint64_t seed, dt_scaling_study *out, dt_error *err);

/* ---------------------------------------------------------------- synthetic tasks
 *
 * Synthetic tasks small models learn within a short training budget, their scorers and the
 * training mix that teaches them. Three tasks, each a deterministic generator (everything drawn
 * from a splitmix64 stream started at the example's seed), one teacher-forced scorer, and a
 * place in the training mix:
 *
 *   recall  multi-query associative recall. K pairs "kv " (k one of the 16 DT_TASK_KEY_SYMBOLS,
 *           distinct; v a digit) scattered among distractor items "Xd " (X an uppercase letter, d a
 *           digit), then ';' and queries "kv ": each pair once in random order, then (more queries
 *           than pairs) any. Answer: v after its key. Chance 0.1.
 *   depth   retrieval at depth. N needles "@kv" (distinct keys from DT_TASK_KEY_SYMBOLS, digit values) in
 *           filler cut from a text corpus ('@' and the key symbols removed from it), the first at
 *           the requested depth, the others anywhere, then queries "\n@kv": first the needle at
 *           depth, then the others, then (more queries than needles) any. Chance 0.1.
 *   icl     in-context classification with label words permuted per prompt: two classes of letters
 *           (a–m, n–z); per prompt two distinct labels drawn from A–Z and assigned at random, so
 *           only the demonstrations "x:L " tell the answer. After `shots` demonstrations (half
 *           of each class), queries "y:L " of letters not among the demonstrations. Scored over
 *           the prompt's two labels: chance 0.5. The same demonstrations in other orders give the
 *           spread over orders.
 *
 * Every answer is one token, predicted at position `pos` (the token before it). In training only
 * the answers carry a loss (every other target is −1).
 *
 * The formats are sequences of symbols (the ASCII characters above), one symbol one position. A
 * byte-level model reads each symbol as its byte (symbols NULL below); a model with a real
 * vocabulary reads each as one token of it (dt_task_symbols_from_tokenizer), so lengths, positions and
 * answers count tokens either way, and depth's filler is the training text's own tokens. */

#define DT_TASK_GENERATOR_VERSION 2
#define DT_TASK_MAX_LEN 4096     /* tokens of one example */
#define DT_TASK_MAX_QUERIES 64
#define DT_TASK_KEYS 16          /* recall / depth keys */
#define DT_TASK_MAX_PAIRS DT_TASK_KEYS
/* the keys of recall and depth: symbols, taken out of depth's filler so that a key occurs only in
 * its needle (with letters for keys, every copy of the letter in the text matched the query too);
 * one alphabet for both, so that both train one key-matching circuit */
#define DT_TASK_KEY_SYMBOLS "#$%&*+<=>[]^_{|}"
#define DT_TASK_MIX_PAIRS 8      /* recall: most pairs of a training example */

typedef enum { DT_TASK_RECALL = 0, DT_TASK_DEPTH = 1, DT_TASK_ICL = 2, DT_N_TASKS = 3 } dt_task_kind;

/* Every symbol the formats use. */
#define DT_TASK_SYMBOLS " \n;:@" DT_TASK_KEY_SYMBOLS "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

/* The tasks' symbols as token ids of a vocabulary; owns no_filler. */
typedef struct {
    int id[128];            /* the token of each symbol of DT_TASK_SYMBOLS; -1 for other characters */
    int vocab;              /* the tokenizer's ids are 0..vocab-1 */
    unsigned char *no_filler; /* [vocab]: 1 for the tokens whose text holds '@', a key symbol or NUL
                             * (and ids that are no token): depth's filler has the space's token instead */
} dt_task_symbols;

/* Each symbol's token is one that stands for exactly that character (three of it decode to two of
 * it and the character): the vocabulary's token spelled as the character, else one of the tokens
 * the tokenizer makes of the character alone (a prefix space may come before it), else its
 * byte-fallback token <0xNN>. A symbol without one, or two symbols on one token, is refused naming
 * the symbol and the tokenizer file. Free with dt_task_symbols_free. */
int dt_task_symbols_from_tokenizer(dt_task_symbols *s, const dt_tok *tok, dt_error *err);
/* Frees no_filler; safe on a zeroed struct. */
void dt_task_symbols_free(dt_task_symbols *s);

/* "recall", "depth", "icl" */
const char *dt_task_name(dt_task_kind k);
/* The dt_task_kind of a name of dt_task_name; -1 when unknown. */
int dt_task_kind_parse(const char *name);

/* One query of an example. */
typedef struct {
    int pos;        /* the answer is tokens[pos + 1], predicted from tokens[0..pos] */
    int answer;
    int n_candidates; /* 0: argmax over the vocabulary; else argmax over candidates[] */
    int candidates[2];
} dt_task_query;

/* One example: its tokens and its queries (no pointers: copy freely). */
typedef struct {
    dt_task_kind kind;
    int length;     /* tokens */
    int pairs;      /* recall: K; depth: needles; icl: demonstrations */
    double depth;   /* depth: requested depth of the queried needle; else 0 */
    int order;      /* icl: which order of the demonstrations; else 0 */
    int n_queries;
    dt_task_query q[DT_TASK_MAX_QUERIES];
    int tokens[DT_TASK_MAX_LEN];
} dt_task_example;

/* The generators write tokens of `sym` (NULL: bytes).
 *
 * K pairs, n_queries of them queried (≤ K), `length` tokens in all (enough for the pairs and the
 * queries: 3·(K + n_queries) + 1 ≤ length). distractors < 0: fill the context with distractor items;
 * else exactly that many (length is then 3·(K + distractors + n_queries) + 1, whatever `length` says). */
int dt_task_recall(const dt_task_symbols *sym, uint64_t seed, int length, int pairs, int n_queries, int distractors,
              dt_task_example *ex, dt_error *err);
/* `needles` needles (2..DT_TASK_KEYS), the first at `depth`; `n_queries` (1..needles) asked, the first
 * the one at depth, then others in random order. filler: text as tokens of `sym` (bytes 0..255 when
 * sym is NULL; '@', the key symbols and any token holding them become spaces); NULL or n < length
 * draws filler from lowercase letters. */
int dt_task_depth(const dt_task_symbols *sym, uint64_t seed, int length, double depth, int needles, int n_queries,
             const int *filler, size_t n, dt_task_example *ex, dt_error *err);
/* `seed` fixes the labels, the demonstrations and the queries; `order` (0 = as drawn) permutes the
 * demonstrations only. n_queries letters not among the demonstrations. */
int dt_task_icl(const dt_task_symbols *sym, uint64_t seed, int shots, int n_queries, int order, dt_task_example *ex, dt_error *err);

/* Per example: queries answered (argmax equals the answer) out of n_queries. */
typedef struct {
    int correct, total;
} dt_task_score;

/* Scores one example from its logits [length, V] (row t predicts token t + 1). */
dt_task_score dt_task_score_logits(const dt_task_example *ex, const float *logits, int V);
/* Teacher-forced: one forward per example (batched by length), fused attention. Fills scores[n]. */
int dt_task_score_examples(const dt_model *m, const dt_task_example *ex, int n, dt_task_score *scores, dt_error *err);

#define DT_TASK_MAX_CELLS 32

/* One cell of a task's evaluation grid: examples that share length and K / depth / order. */
typedef struct {
    dt_task_kind kind;
    int length, pairs, order;
    double depth;
    int examples;                   /* in the cell */
    int correct, total;             /* queries */
    double accuracy;                /* correct / total */
} dt_task_cell;

/* A task's evaluation; owns example_accuracy. */
typedef struct {
    dt_task_kind kind;
    int n_cells;
    dt_task_cell cells[DT_TASK_MAX_CELLS];
    int correct, total;             /* over all cells */
    double accuracy;
    double *example_accuracy;       /* [n_examples]: per-example fraction correct (for intervals over examples) */
    int *example_total;             /* [n_examples]: the queries each example scored */
    int n_examples;
    double order_std;               /* icl: std over orders of the per-order accuracy; else NAN */
} dt_task_result;

/* Frees example_accuracy and example_total; safe on a zeroed result. */
void dt_task_result_free(dt_task_result *r);
/* a->accuracy − b->accuracy with its 95% interval over the examples, for two models scored on the same
 * examples (the same dt_task_eval_options): that difference of pooled accuracies is the mean over the
 * n examples of (correct_a − correct_b)·n / total, each example's queries fixed by the example, so
 * Student's t over those terms. n = 0 and NaNs when the two did not score the same examples. */
dt_stats_interval dt_task_paired_diff_ci(const dt_task_result *a, const dt_task_result *b);

/* What to evaluate: the grid of each task, sized to the model's context and the training length. */
typedef struct {
    int train_len;                  /* T used in training */
    int max_len;                    /* the model's context: no example is longer */
    int per_cell;                   /* examples per cell */
    uint64_t seed;                  /* evaluation seed (apart from the training stream) */
    const int *filler;              /* depth filler text, tokens of `symbols` (may be NULL) */
    size_t filler_n;
    const dt_task_symbols *symbols;      /* the model's vocabulary; NULL: bytes */
} dt_task_eval_options;

/* Builds the task's evaluation set (as dt_task_eval_options says), scores it, fills *r. The grid:
 *   recall: K ∈ {2, 4, 8} × length ∈ {train_len/2, train_len, 2·train_len (if it fits)}
 *   depth:  depth ∈ {0, .25, .5, .75, 1} × the same lengths
 *   icl:    8 shots (fewer if short), 6 orders of the same demonstrations, 4 queries */
int dt_task_evaluate(const dt_model *m, dt_task_kind kind, const dt_task_eval_options *o, dt_task_result *r, dt_error *err);

/* The training mix (the context of dt_task_mix_batch). */
typedef struct {
    double ratio;           /* fraction of training steps that are task batches [0.5] */
    int tasks;              /* bit mask of tasks in the mix: 1 << DT_TASK_RECALL | ... */
    int curriculum_start;   /* steps with no distractors (recall) and least text (depth); 0: steps / 5; < 0: none */
    int curriculum_steps;   /* then both rise to a full row over these steps; 0: 2·steps / 5 */
    int max_pairs;          /* recall: K drawn from 1..max_pairs in training; 0: DT_TASK_MIX_PAIRS */
    const int *filler;      /* depth filler: the training text, tokens of `symbols` */
    size_t filler_n;
    const dt_task_symbols *symbols; /* the run's vocabulary; NULL: bytes */
} dt_task_mix;

/* A dt_train_options.batch_hook: with probability mix->ratio the step's batch becomes task rows
 * (one example of at most seq + 1 tokens per row, right-aligned after space tokens; tasks taken
 * in turn, recall and depth six rows for each icl row; targets −1 except at answers); otherwise
 * the text batch is left alone. tokens/targets hold rows [row0, row0 + rows) of the B rows; the
 * draws from *rng are those of all B rows. ctx is a const dt_task_mix *. */
void dt_task_mix_batch(void *ctx, int step, int total_steps, int *tokens, int *targets, int row0, int rows, int B, int T,
                  uint64_t *rng);

/* ---------------------------------------------------------------- compare
 *
 * `difftrans compare` as a library call: train model variants (by default the DIFF Transformer
 * and its parameter-matched Transformer) on the same data, seeds and token budget, with the
 * synthetic tasks mixed into training, run every analysis on every run and write the report
 * (REPORT.md with means and 95% intervals beside the paper's figures, report.json, plots).
 * The policy lives here: the needle set's size for the model's context, the held-out split (that
 * of dt_train), the task mix and evaluation grid, the scaling runs. Progress goes to a callback. */

#define DT_CMP_MAX_VARIANTS 8      /* models compared side by side */
#define DT_CMP_MAX_SEEDS 16        /* runs per variant */
#define DT_CMP_MAX_SIZES 4         /* scaling presets besides the main one */

/* done/total in "work units" (a training step is one; analyses are counted in steps' worth of
 * time), eta_s from the time taken so far, seconds (NAN before anything is done); msg says what
 * runs now. */
typedef void (*dt_cmp_progress_fn)(void *ctx, double done, double total, double eta_s, const char *msg);

/* What to compare; every string is the caller's. [defaults of dt_cmp_options_default] */
typedef struct {
    const char *data, *out;     /* training text; report directory (created) */
    const char *tokenizer;      /* with data: a tokenizer.json (or its directory) every run reads the text
                                   with (the models' vocabulary is its); NULL: bytes */
    const char *tokens;         /* instead of data: a token dataset (`difftrans tokenize`): its train split
                                   trains, its val split is the held-out text of the analyses */
    const char *command;        /* the command line recorded in the report */
    const char *preset;         /* the DIFF preset every variant starts from */
    int steps, batch, seq;
    float lr;                   /* peak learning rate of every run */
    uint64_t seed;              /* seed of the first pair; pair s uses seed + s */
    int seeds;                  /* pairs (runs per variant), at most DT_CMP_MAX_SEEDS */
    int n_variants;
    const char *variants[DT_CMP_MAX_VARIANTS]; /* names of dt_cmp_variant_config; default "diff", "transformer" */
    int tasks;                  /* bit mask over dt_task_kind: mixed into training and evaluated (0: none) */
    double task_ratio;          /* fraction of steps that are task batches */
    int task_examples;          /* evaluation examples per grid cell */
    int curve_points;           /* task accuracy measured at this many points of training */
    int needle;                 /* also the long-form needle set and attention allocation */
    int quick;                  /* fewer evaluation windows and samples */
    int jobs;                   /* trainings run at once (> 1: each on one thread) [2] */
    int n_sizes;
    char sizes[DT_CMP_MAX_SIZES][32]; /* scaling presets */
    int restart;                /* 1: train every run afresh, whatever out holds; 0: resume (below) */
    volatile int *stop;         /* when it becomes nonzero: every training saves a checkpoint and the call
                                   returns DT_ERR_INTERRUPTED; NULL: never. A failing training sets it too */
    dt_cmp_progress_fn progress;   /* may be NULL */
    void *progress_ctx;
} dt_cmp_options;

/* The defaults of `difftrans compare` (quick: the smoke-test budget). */
void dt_cmp_options_default(dt_cmp_options *o, int quick);

/* The config of a named variant built on the DIFF preset `preset`: "diff", the matched baselines
 * "transformer" (2h heads of hd for a DIFF of h differential heads), "transformer-1.5h" (1.5× the
 * Transformer's heads: the V2 write-up's comparison) and "transformer-2hd" (h heads of 2·hd),
 * "diff-subln" (a learnable per-head norm weight), DIFF V2 "v2" and its ablations "v2-crossgroup",
 * "v2-nolambda", "v2-nosigmoid" (dt_config_ablation says exactly what each is), BASE+A with BASE
 * one of these and A one of dt_ablation_names ("transformer+alibi", "v2+softmax1"), or A alone (an
 * ablation of the DIFF preset). */
int dt_cmp_variant_config(const char *name, const char *preset, dt_config *out, dt_error *err);
/* The same built on a DIFF (diffllama) config of the caller's instead of a preset (a study's own
 * sizes); refuses a base of another architecture or an invalid one. */
int dt_cmp_variant_config_base(const char *name, const dt_config *diff_base, dt_config *out, dt_error *err);
/* The name a report gives a variant: "DIFF", "Transformer", "Transformer 1.5h", "Transformer 2hd",
 * "DIFF+subln", "DIFF V2", "DIFF V2 cross-group", "DIFF V2 no lambda", "DIFF V2 no sigmoid"; any
 * other name as it is. */
const char *dt_cmp_variant_display(const char *name);
/* Comma-separated variant names, for help texts. */
const char *dt_cmp_variant_names(void);

/* Checks the options (data readable, sizes fit) before anything is trained, then runs everything
 * and writes out/REPORT.md, out/report.json and out/plots. With a real vocabulary (tokenizer or
 * tokens) the needle set is read through the tokenizer and needs the text (data, not tokens).
 * With needle, the set's context is the longest whose test samples fit the training window (seq)
 * read as the models read them (dt_needle_fit_contexts), with up to 6 needles and 2 queries; a seq
 * too short for one needle and its question is refused naming the seq that holds one.
 * Resuming: out/compare.json records every option that fixes the runs (and fingerprints of the
 * data and tokenizer, and the needle set, which a resume makes again as recorded: from a
 * compare.json without it, the set of 5/8 of the positions as bytes that preceded it; a recorded
 * set longer than the window is kept, and the report says so); unless
 * restart is set, a call on a directory that holds one refuses other options (DT_ERR_INVALID
 * naming the first that differs), keeps the runs that trained every step,
 * continues each other run from its checkpoint (saved every tenth of the steps) and trains the
 * rest; the analyses and the report are made again from all of them. */
int dt_cmp_run(const dt_cmp_options *o, dt_error *err);

/* ---------------------------------------------------------------- the scaling study
 *
 * `difftrans study` as a library call: DIFF and its baseline (and any other variants) trained at
 * several sizes × seeds on one token dataset, the same number of training tokens per non-embedding
 * parameter at every size, every run measured on the dataset's held-out split with the protocol
 * above (and on its training split, for the gap), then the report: per size the paired DIFF −
 * baseline held-out loss with its 95% interval, the power-law fits and the fraction with bootstrap
 * intervals (dt_scaling_study_fit), where the curves cross, and the protocol's measures. A study is
 * a directory of runs that resumes where it stopped; over MPI the runs are spread over the ranks.
 * The layout and the policy are written out at the top of src/analysis/study.c. */

#define DT_STUDY_MAX_SIZES DT_SCALING_MAX_SIZES
#define DT_STUDY_MAX_VARIANTS 8
#define DT_STUDY_MAX_SEEDS DT_SCALING_MAX_SEEDS

typedef struct {
    char name[16];
    int hidden, layers, heads, intermediate; /* the DIFF model: heads query heads (heads/2 differential heads) */
} dt_study_size;

/* done in [0, 1] of the estimated training work, eta_s NAN until it can be estimated; msg says what runs. */
typedef void (*dt_study_progress_fn)(void *ctx, double done, double eta_s, const char *msg);

/* [defaults of dt_study_options_default] */
typedef struct {
    const char *tokens;         /* a token dataset (`difftrans tokenize`): its train split trains, its val
                                   split is the held-out text every loss is measured on */
    const char *out;            /* the study directory (created; an existing study there is resumed) */
    const char *command;        /* the command line, printed at the top of the report */
    int n_sizes;
    dt_study_size sizes[DT_STUDY_MAX_SIZES];   /* [s1..s4] */
    int n_variants;
    const char *variants[DT_STUDY_MAX_VARIANTS]; /* dt_cmp_variant_config names; the first two are the pair
                                                    fitted against each other [diff, transformer] */
    int seeds;                  /* runs per size and variant; run k uses seed + k [3] */
    uint64_t seed;              /* [1337] */
    double tokens_per_param;    /* training tokens per non-embedding parameter of the size's DIFF model,
                                   the same for every variant of a size [10] */
    int batch, seq;             /* [8, 256] */
    float lr;                   /* peak learning rate of every run [0.002] */
    int eval_windows;           /* windows of seq + 1 tokens for each measured loss [64] */
    int n_bins;                 /* held-out loss by position: bins [8] */
    int resamples;              /* bootstrap resamples [2000] */
    int jobs;                   /* runs at once in this process [2] */
    int threads;                /* OpenMP threads in all (shared by the jobs); 0: all cores */
    dt_comm *comm;              /* NULL: one process; else the runs are spread over its ranks */
    volatile int *stop;         /* when it becomes nonzero: every run saves a checkpoint and the call
                                   returns DT_ERR_INTERRUPTED; NULL: never */
    dt_study_progress_fn progress; /* may be NULL */
    void *progress_ctx;
} dt_study_options;

void dt_study_options_default(dt_study_options *o);
/* "s1,s3,80x2" → sizes (the built-in ones, or HIDDENxLAYERS with 4 heads and F ≈ 8/3·hidden). */
int dt_study_parse_sizes(const char *list, dt_study_size *out, int *n, dt_error *err);
const char *dt_study_size_names(void);
/* Parameters outside the token embedding and the LM head: dt_config_nonembedding_param_count. */
size_t dt_study_nonembedding_params(const dt_config *c);
/* Trains and measures every run not yet done, then (rank 0) writes out/REPORT.md, out/report.json and
 * out/plots/. */
int dt_study_run(const dt_study_options *o, dt_error *err);

#ifdef __cplusplus
}
#endif
#endif
