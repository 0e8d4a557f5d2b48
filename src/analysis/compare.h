/* compare.h — `difftrans compare` as a library call (internal): train model variants (by default the
 * DIFF Transformer and its parameter-matched Transformer) on the same data, seeds and token budget,
 * with the synthetic tasks of tasks.h mixed into training, run every analysis on every run and
 * write the report of report.h.
 *
 * The policy lives here: the needle set's size for the model's context, the held-out split (that of
 * dt_train), the task mix and evaluation grid, the scaling runs. Progress goes to a callback. */
#ifndef DT_COMPARE_H
#define DT_COMPARE_H
#include <stdint.h>

#include "analysis/report.h"
#include "difftrans.h"

#define CMP_MAX_SIZES (RP_MAX_SIZES - 1)

/* done/total in "work units" (a training step is one; analyses are counted in steps' worth of
 * time), eta_s from the time taken so far (NAN before anything is done); msg says what runs now. */
typedef void (*cmp_progress_fn)(void *ctx, double done, double total, double eta_s, const char *msg);

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
    int seeds;                  /* pairs (runs per variant) */
    int n_variants;
    const char *variants[RP_MAX_VARIANTS]; /* names of cmp_variant_config; default "diff", "transformer" */
    int tasks;                  /* bit mask over tk_kind: mixed into training and evaluated (0: none) */
    double task_ratio;          /* fraction of steps that are task batches */
    int task_examples;          /* evaluation examples per grid cell */
    int curve_points;           /* task accuracy measured at this many points of training */
    int needle;                 /* also the long-form needle set (needle.h) and attention allocation */
    int quick;                  /* fewer evaluation windows and samples */
    int jobs;                   /* trainings run at once (> 1: each on one thread) [2] */
    int n_sizes;
    char sizes[CMP_MAX_SIZES][32]; /* --scaling presets */
    cmp_progress_fn progress;
    void *progress_ctx;
} cmp_options;

/* The defaults of `difftrans compare` (quick: the smoke-test budget). */
void cmp_options_default(cmp_options *o, int quick);

/* The config of a named variant built on the DIFF preset `preset`: "diff", "transformer" (the
 * matched baseline), "diff-subln" (a learnable per-head norm weight). */
int cmp_variant_config(const char *name, const char *preset, dt_config *out, dt_error *err);
/* Comma-separated variant names, for --help. */
const char *cmp_variant_names(void);

/* Checks the options (data readable, sizes fit) before anything is trained, then runs everything
 * and writes out/REPORT.md, out/report.json and out/plots. With a real vocabulary (tokenizer or
 * tokens) the synthetic tasks, which are byte sequences, are refused (tasks must be 0), the needle
 * set is read through the tokenizer and needs the text (data, not tokens). */
int cmp_run(const cmp_options *o, dt_error *err);
#endif
