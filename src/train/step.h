/* step.h — one optimizer step: the sequence `difftrans train` runs and `difftrans bench` times
 * (internal). In the order train_step_run() does it:
 *
 *   zero the gradients
 *   for each of the K micro-batches: forward (chunked loss), backward (gradients accumulate)
 *   average the gradients (over micro-batches, and over ranks in a data-parallel job)
 *   gradient norm, clipping
 *   AdamW update
 *
 * Everything the step needs is allocated once by train_step_init(). */
#ifndef DT_STEP_H
#define DT_STEP_H
#include <stddef.h>

#include "difftrans.h"
#include "train/optim.h"

typedef struct {
    int micro_batch, seq;        /* b, T: the rows of one forward */
    int accum;                   /* K micro-batches per step (gradient accumulation) */
    float grad_clip;             /* clip the global gradient norm to this, 0 = off */
    adamw_hparams hp;
} train_step_options;

typedef struct {
    float loss;                  /* mean cross-entropy over the step's K·b·T tokens */
    float grad_norm;             /* of the averaged gradient, before clipping */
} train_step_stats;

typedef struct {
    dt_model *model;
    train_step_options opt;
    dt_runstate *rs;             /* one micro-batch, chunked loss (the [b·T, V] logits never exist whole) */
    float *grads;                /* [P] */
    float *adam_m, *adam_v;      /* [P] AdamW moments */
    unsigned char *decay;        /* [P] 1 where weight decay applies */
} train_step;

/* Allocates the gradients, the optimizer state (zeroed) and the run state for model m. */
int train_step_init(train_step *s, dt_model *m, const train_step_options *o, dt_error *err);
void train_step_free(train_step *s);

/* One step numbered t (from 1) at learning rate lr on in, tg [K·b, T] (micro-batch k is rows
 * k·b .. k·b+b−1). A non-finite loss or gradient norm fails before any parameter changes. */
int train_step_run(train_step *s, const int *in, const int *tg, int t, float lr, train_step_stats *st,
                   dt_error *err);
#endif
