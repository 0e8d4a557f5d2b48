/* needle.h — the paper's multi-needle retrieval task (internal): text placed by byte offsets,
 * read by a model as bytes or through its tokenizer (textmap.h).
 *
 * N needles — "The magic number of <key> is <value>." with distinct keys and values — are hidden
 * in filler text cut from a corpus, and R of them are queried after the context. The exact sample
 * format and the placement rule are written out at the top of needle_generate.c, the files and
 * their JSON layout at the top of needle_io.c; needle_score.c scores a model.
 *
 * Plain functions without global state, so that `difftrans needle` and a future `difftrans
 * compare` can both generate, load and score data sets:
 *
 *   needle_params_default / needle_params_validate   what to generate
 *   needle_corpus_load / needle_corpus_from_bytes    filler source (cleaned once, see needle_generate.c)
 *   needle_generate_sample                           one sample from a 64-bit seed
 *   needle_write_dataset                             DIR/train.txt, DIR/test.jsonl, DIR/needle.json
 *   needle_load_testset                              test.jsonl back, every offset re-checked
 *   needle_eval                                      greedy exact-match accuracy per cell
 *
 * Every function that can fail returns 0 or -1 with a message in *err naming the file, sample or
 * parameter; everything a function allocates has a matching _free, safe on a zeroed struct.
 */
#ifndef DT_NEEDLE_H
#define DT_NEEDLE_H
#include <stddef.h>
#include <stdint.h>

#include "analysis/textmap.h"
#include "difftrans.h"

#define NEEDLE_GENERATOR_VERSION 1
#define NEEDLE_MAX_NEEDLES 64        /* needles (and so queries) per sample */
#define NEEDLE_MAX_LIST 32           /* context lengths, and depths, per data set */
#define NEEDLE_MIN_KEY 4             /* generated keys: lowercase words of 4..8 letters */
#define NEEDLE_MAX_KEY 8
#define NEEDLE_VALUE_DIGITS 5        /* generated values: 10000..99999 */
#define NEEDLE_KEY_CAP 64            /* longest key a loaded test set may hold */
#define NEEDLE_VALUE_CAP 32          /* longest value a loaded test set may hold */
#define NEEDLE_MAX_CONTEXT (1 << 20) /* bytes of context per sample */
#define NEEDLE_MAX_SAMPLES 10000000

/* The fixed text of a needle sentence and of a question (see "the sample format" in needle_generate.c) */
#define NEEDLE_SENTENCE_HEAD "The magic number of "
#define NEEDLE_SENTENCE_MID " is "
#define NEEDLE_QUESTION_HEAD "\nQuestion: What is the magic number of "
#define NEEDLE_QUESTION_TAIL "?\nAnswer: "

/* Bytes one inserted needle takes in the context at most: the sentence with the longest key,
 * plus its one separator byte. A context must hold `needles` of these. */
#define NEEDLE_SENTENCE_FIXED 25     /* strlen("The magic number of ") + strlen(" is ") + strlen(".") */
#define NEEDLE_UNIT_MAX (NEEDLE_SENTENCE_FIXED + NEEDLE_MAX_KEY + NEEDLE_VALUE_DIGITS + 1)

typedef struct {
    int n_contexts;
    int contexts[NEEDLE_MAX_LIST];   /* context lengths in bytes [512, 1024] */
    int n_depths;
    double depths[NEEDLE_MAX_LIST];  /* depths of the first queried needle, each in [0, 1] [0,.25,.5,.75,1] */
    int needles;                     /* N [6] */
    int queries;                     /* R ≤ N [2] */
    int n_train, n_test;             /* samples per set, spread round-robin over the cells [1000, 100] */
    uint64_t seed;                   /* [42] */
} needle_params;

void needle_params_default(needle_params *p);
/* Ranges and consistency: R ≤ N, depths in [0, 1], every context ≥ N·NEEDLE_UNIT_MAX, ... */
int needle_params_validate(const needle_params *p, dt_error *err);

/* The filler source, cleaned (see "Corpus" in needle_generate.c); never empty. */
typedef struct {
    unsigned char *bytes;
    size_t n;
    int has_newline;
} needle_corpus;

int needle_corpus_load(needle_corpus *c, const char *path, dt_error *err);
/* `what` names the source in messages (a path, or e.g. "corpus"). */
int needle_corpus_from_bytes(needle_corpus *c, const void *data, size_t n, const char *what, dt_error *err);
void needle_corpus_free(needle_corpus *c);

typedef struct {
    char key[NEEDLE_KEY_CAP + 1];
    char value[NEEDLE_VALUE_CAP + 1];
    int offset, length;              /* the sentence "The magic number of K is V." in text */
    int value_offset, value_length;  /* V inside that sentence: the answer span */
} needle_needle;

typedef struct {
    int needle;                      /* index into needle_sample.needles */
    int question_offset;             /* the 'Q' of "Question: " */
    int prompt_end_offset;           /* where the answer (the value) begins: the prompt is text[0, this) */
    int answer_length;               /* bytes of the answer (= the needle's value_length) */
} needle_query;

typedef struct {
    long id;                         /* index within its set */
    int context_length;
    double depth;                    /* requested depth of the first queried needle */
    double needle_depth;             /* where it landed: its sentence offset / (context_length − sentence length) */
    uint64_t seed;                   /* needle_generate_sample(…, seed, …) rebuilds this sample */
    int n_needles;
    needle_needle needles[NEEDLE_MAX_NEEDLES]; /* in order of offset */
    int n_queries;
    needle_query queries[NEEDLE_MAX_NEEDLES];  /* in the order they are asked; queries[0] is at `depth` */
    char *text;                      /* text_length bytes + a NUL (no NUL inside) */
    int text_length;
    int line;                        /* loaded samples: line in the .jsonl file, else 0 */
} needle_sample;

/* Builds one sample of context_length bytes with its first queried needle at `depth`, drawing
 * everything from a splitmix64 stream started at `seed`. p supplies needles and queries. */
int needle_generate_sample(const needle_params *p, int context_length, double depth, uint64_t seed,
                           const needle_corpus *corpus, needle_sample *out, dt_error *err);
void needle_sample_free(needle_sample *s);
/* Re-checks a sample's internal consistency (every offset, the sentence and answer bytes);
 * `where` prefixes messages (e.g. "test.jsonl:3"). */
int needle_sample_check(const needle_sample *s, const char *where, dt_error *err);
/* One line of test.jsonl (no newline); the caller frees it with free(). NULL when out of memory. */
char *needle_sample_to_json(const needle_sample *s);

/* The two streams train and test samples draw their seeds from (different, both from p->seed). */
void needle_stream_seeds(uint64_t seed, uint64_t *train_seed, uint64_t *test_seed);
/* The cell (context length, depth) of sample i of a set: round-robin, depths varying fastest. */
void needle_cell_of(const needle_params *p, long i, int *context_length, double *depth);

/* Writes dir/train.txt, dir/test.jsonl and dir/needle.json (each atomically; dir is created if
 * missing). corpus_path is only recorded in needle.json. */
int needle_write_dataset(const needle_params *p, const needle_corpus *corpus, const char *corpus_path,
                         const char *dir, dt_error *err);

typedef struct {
    char path[4096];
    int n;
    needle_sample *samples;
} needle_testset;

/* path: a test.jsonl file, or a directory holding one. */
int needle_load_testset(needle_testset *ts, const char *path, dt_error *err);
void needle_testset_free(needle_testset *ts);

typedef struct {
    int context_length;
    double depth;
    int samples;                     /* samples in the cell */
    int n, correct;                  /* queries scored (all of every sample), and answered exactly */
    int first_correct;               /* samples whose first query (the one at `depth`) was answered exactly */
} needle_cell;

typedef struct {
    int sample, query;               /* indices into the test set and into the sample's queries */
    int correct;
    int n_predicted;
    int predicted[NEEDLE_VALUE_CAP]; /* the greedy token ids (as many as the answer has tokens) */
} needle_item;

typedef struct {
    int n_cells;
    needle_cell *cells;              /* sorted by context length, then depth */
    int n_items;
    needle_item *items;              /* every (sample, query), in test-set order */
    int total, correct;
} needle_results;

/* Called after each sample (may be NULL in needle_eval_options). */
typedef void (*needle_progress_fn)(void *ctx, int done, int total, int correct_so_far, int scored_so_far);

/* The first ns samples' texts as the model reads them (tok: its tokenizer, NULL for bytes; see
 * textmap.h) into enc[0, ns) (zeroed by the caller), each checked to fit the model's context and
 * vocabulary and every answer to fit NEEDLE_VALUE_CAP tokens; *longest gets the most tokens.
 * On failure the caller still frees enc with needle_encoded_free. */
int needle_encode_testset(const dt_model *m, const dt_tok *tok, const needle_testset *ts, int ns, an_tokens *enc,
                          int *longest, dt_error *err);
void needle_encoded_free(an_tokens *enc, int n);

/* Greedy decoding through a KV cache. The model reads each sample's text as its tokens (tok: the
 * model's tokenizer, NULL for a byte-level model; see textmap.h): for each query the prompt is the
 * tokens that end at or before prompt_end_offset (earlier questions come with their true answers),
 * the answer the tokens that overlap the value's bytes (for bytes: exactly them, answer_length of
 * them). The argmax continuation of that many tokens is correct when it is exactly those tokens
 * (so it decodes to the answer text). Refuses (before decoding anything) any sample longer than
 * the model's max_position_embeddings, naming the file and the sample. */
int needle_eval(const dt_model *m, const dt_tok *tok, const needle_testset *ts, needle_results *r,
                needle_progress_fn progress, void *progress_ctx, dt_error *err);
void needle_results_free(needle_results *r);
#endif
