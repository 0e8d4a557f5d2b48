/* tasks.h — synthetic tasks small byte-level models learn within a short training budget, their
 * scorers and the training mix that teaches them (internal).
 *
 * Three tasks, each a deterministic generator (everything drawn from a splitmix64 stream started at
 * the example's seed), one teacher-forced scorer, and a place in the training mix:
 *
 *   recall  multi-query associative recall. K pairs "kv " (k one of the 16 TK_KEY_SYMBOLS,
 *           distinct; v a digit) scattered among distractor items "Xd " (X an uppercase letter, d a
 *           digit), then ';' and queries "kv ": each pair once in random order, then (more queries
 *           than pairs) any. Answer: v after its key. Chance 0.1.
 *   depth   retrieval at depth. N needles "@kv" (distinct keys from TK_KEY_SYMBOLS, digit values) in
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
 * vocabulary reads each as one token of it (tk_symbols_from_tokenizer), so lengths, positions and
 * answers count tokens either way, and depth's filler is the training text's own tokens. */
#ifndef DT_TASKS_H
#define DT_TASKS_H
#include <stddef.h>
#include <stdint.h>

#include "difftrans.h"

#define TK_GENERATOR_VERSION 2
#define TK_MAX_LEN 4096     /* tokens of one example */
#define TK_MAX_QUERIES 64
#define TK_KEYS 16          /* recall / depth keys: 'a' .. 'p' */
#define TK_MAX_PAIRS TK_KEYS
/* the keys of recall and depth: symbols, taken out of depth's filler so that a key occurs only in
 * its needle (with letters for keys, every copy of the letter in the text matched the query too);
 * one alphabet for both, so that both train one key-matching circuit */
#define TK_KEY_SYMBOLS "#$%&*+<=>[]^_{|}"
#define TK_MIX_PAIRS 8      /* recall: most pairs of a training example */

typedef enum { TK_RECALL = 0, TK_DEPTH = 1, TK_ICL = 2, TK_N_TASKS = 3 } tk_kind;

/* Every symbol the formats use. */
#define TK_SYMBOLS " \n;:@" TK_KEY_SYMBOLS "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

/* The tasks' symbols as token ids of a vocabulary. */
typedef struct {
    int id[128];            /* the token of each symbol of TK_SYMBOLS; -1 for other characters */
    int vocab;              /* the tokenizer's ids are 0..vocab-1 */
    unsigned char *no_filler; /* [vocab]: 1 for the tokens whose text holds '@', a key symbol or NUL
                             * (and ids that are no token): depth's filler has the space's token instead */
} tk_symbols;

/* Each symbol's token is one that stands for exactly that character (three of it decode to two of
 * it and the character): the vocabulary's token spelled as the character, else one of the tokens
 * the tokenizer makes of the character alone (a prefix space may come before it), else its
 * byte-fallback token <0xNN>. A symbol without one, or two symbols on one token, is refused naming
 * the symbol and the tokenizer file. Free with tk_symbols_free. */
int tk_symbols_from_tokenizer(tk_symbols *s, const dt_tok *tok, dt_error *err);
void tk_symbols_free(tk_symbols *s);

const char *tk_name(tk_kind k);              /* "recall", "depth", "icl" */
int tk_kind_parse(const char *name);         /* -1 when unknown */

typedef struct {
    int pos;        /* the answer is tokens[pos + 1], predicted from tokens[0..pos] */
    int answer;
    int n_candidates; /* 0: argmax over the vocabulary; else argmax over candidates[] */
    int candidates[2];
} tk_query;

typedef struct {
    tk_kind kind;
    int length;     /* tokens */
    int pairs;      /* recall: K; depth: needles; icl: demonstrations */
    double depth;   /* depth: requested depth of the queried needle; else 0 */
    int order;      /* icl: which order of the demonstrations; else 0 */
    int n_queries;
    tk_query q[TK_MAX_QUERIES];
    int tokens[TK_MAX_LEN];
} tk_example;

/* The generators write tokens of `sym` (NULL: bytes; the same rows as before symbols existed).
 *
 * K pairs, n_queries of them queried (≤ K), `length` tokens in all (enough for the pairs and the
 * queries: 3·(K + n_queries) + 1 ≤ length). distractors < 0: fill the context with distractor items;
 * else exactly that many (length is then 3·(K + distractors + n_queries) + 1, whatever `length` says). */
int tk_recall(const tk_symbols *sym, uint64_t seed, int length, int pairs, int n_queries, int distractors,
              tk_example *ex, dt_error *err);
/* `needles` needles (2..TK_KEYS), the first at `depth`; `n_queries` (1..needles) asked, the first
 * the one at depth, then others in random order. filler: text as tokens of `sym` (bytes 0..255 when
 * sym is NULL; '@', the key symbols and any token holding them become spaces); NULL or n < length
 * draws filler from lowercase letters. */
int tk_depth(const tk_symbols *sym, uint64_t seed, int length, double depth, int needles, int n_queries,
             const int *filler, size_t n, tk_example *ex, dt_error *err);
/* `seed` fixes the labels, the demonstrations and the queries; `order` (0 = as drawn) permutes the
 * demonstrations only. n_queries letters not among the demonstrations. */
int tk_icl(const tk_symbols *sym, uint64_t seed, int shots, int n_queries, int order, tk_example *ex, dt_error *err);

/* ---------------------------------------------------------------- scoring */

/* Per example: queries answered (argmax equals the answer) out of n_queries. */
typedef struct {
    int correct, total;
} tk_score;

/* Scores one example from its logits [length, V] (row t predicts token t + 1). */
tk_score tk_score_logits(const tk_example *ex, const float *logits, int V);
/* Teacher-forced: one forward per example (batched by length), fused attention. Fills scores[n]. */
int tk_score_examples(const dt_model *m, const tk_example *ex, int n, tk_score *scores, dt_error *err);

/* ---------------------------------------------------------------- evaluation sets */

#define TK_MAX_CELLS 32

/* One cell of a task's evaluation grid: examples that share length and K / depth / order. */
typedef struct {
    tk_kind kind;
    int length, pairs, order;
    double depth;
    int examples;                   /* in the cell */
    int correct, total;             /* queries */
    double accuracy;                /* correct / total */
} tk_cell;

typedef struct {
    tk_kind kind;
    int n_cells;
    tk_cell cells[TK_MAX_CELLS];
    int correct, total;             /* over all cells */
    double accuracy;
    double *example_accuracy;       /* [n_examples]: per-example fraction correct (for intervals over examples) */
    int n_examples;
    double order_std;               /* icl: std over orders of the per-order accuracy; else NAN */
} tk_result;

void tk_result_free(tk_result *r);

/* What to evaluate: the grid of each task, sized to the model's context and the training length. */
typedef struct {
    int train_len;                  /* T used in training */
    int max_len;                    /* the model's context: no example is longer */
    int per_cell;                   /* examples per cell */
    uint64_t seed;                  /* evaluation seed (apart from the training stream) */
    const int *filler;              /* depth filler text, tokens of `symbols` (may be NULL) */
    size_t filler_n;
    const tk_symbols *symbols;      /* the model's vocabulary; NULL: bytes */
} tk_eval_options;

/* Builds the task's evaluation set (as tk_eval_options says), scores it, fills *r. The grid:
 *   recall: K ∈ {2, 4, 8} × length ∈ {train_len/2, train_len, 2·train_len (if it fits)}
 *   depth:  depth ∈ {0, .25, .5, .75, 1} × the same lengths
 *   icl:    8 shots (fewer if short), 6 orders of the same demonstrations, 4 queries */
int tk_evaluate(const dt_model *m, tk_kind kind, const tk_eval_options *o, tk_result *r, dt_error *err);

/* ---------------------------------------------------------------- the training mix */

typedef struct {
    double ratio;           /* fraction of training steps that are task batches [0.5] */
    int tasks;              /* bit mask of tasks in the mix: 1 << TK_RECALL | ... */
    int curriculum_start;   /* steps with no distractors (recall) and least text (depth); 0: steps / 5; < 0: none */
    int curriculum_steps;   /* then both rise to a full row over these steps; 0: 2·steps / 5 */
    int max_pairs;          /* recall: K drawn from 1..max_pairs in training; 0: TK_MIX_PAIRS */
    const int *filler;      /* depth filler: the training text, tokens of `symbols` */
    size_t filler_n;
    const tk_symbols *symbols; /* the run's vocabulary; NULL: bytes */
} tk_mix;

/* The dt_train batch hook: with probability mix->ratio the step's batch becomes task rows (one
 * example of at most seq + 1 tokens per row, right-aligned after space tokens; tasks taken in
 * turn, recall and depth six rows for each icl row; targets −1 except at answers); otherwise the
 * text batch is left alone. tokens/targets hold rows [row0, row0 + rows) of the B
 * rows; the draws from *rng are those of all B rows. ctx is a const tk_mix *. */
void tk_mix_batch(void *ctx, int step, int total_steps, int *tokens, int *targets, int row0, int rows, int B, int T,
                  uint64_t *rng);
#endif
