/* step.h — one optimizer step: the sequence `difftrans train` runs (on one process or on every
 * rank of a data-parallel job) and `difftrans bench` times (internal). In the order
 * train_step_run() does it:
 *
 *   zero the gradients
 *   for each of the K micro-batches: forward (chunked loss), backward (gradients accumulate);
 *     during the last backward, gradient buckets are summed over the ranks as soon as the
 *     backward has finished them (non-blocking all-reduce, or reduce to the shard's owner)
 *   wait for the reductions; exchange each rank's loss and timings (and shard gradient norm)
 *   average the gradients (over micro-batches and ranks), gradient norm, clipping
 *   AdamW update (ZeRO-1: of this rank's shard, then all-gather the parameters)
 *
 * Everything the step needs is allocated once by train_step_init(). */
#ifndef DT_STEP_H
#define DT_STEP_H
#include <stddef.h>

#include "difftrans.h"
#include "train/optim.h"

typedef struct {
    int micro_batch, seq;        /* b, T: the rows of one forward on one rank */
    int accum;                   /* K micro-batches per step (gradient accumulation) */
    float grad_clip;             /* clip the global gradient norm to this, 0 = off */
    adamw_hparams hp;
    int zero;                    /* 1: ZeRO-1, each rank keeps the AdamW moments of its shard only */
    int no_overlap;              /* 1: reduce the gradients after the backward, not during it */
} train_step_options;

typedef struct {
    float loss;                  /* mean cross-entropy over the step's tokens on all ranks */
    float grad_norm;             /* of the averaged gradient, before clipping */
    int stop;                    /* some rank passed stop = 1 */
    double compute_s;            /* this rank: forwards and backwards */
    double compute_min_s, compute_max_s; /* the same over the ranks */
    double wait_s;               /* this rank: waiting for the gradient reduction after its backward */
    double exposed_s;            /* wait_s less the time this rank waited for the slowest rank's
                                    backward (compute_max_s − compute_s): the reduction not hidden */
    double comm_s;               /* this rank: every wait on other ranks in the step (wait_s included) */
} train_step_stats;

typedef struct {
    size_t begin, end;           /* parameters [begin, end) */
    int owner;                   /* ZeRO: the rank whose shard holds them; -1: every rank */
} grad_bucket;

typedef struct rank_report rank_report;

typedef struct {
    dt_model *model;
    dt_comm *comm;               /* NULL or one rank: a single process, no MPI */
    train_step_options opt;
    dt_runstate *rs;             /* one micro-batch, chunked loss (the [b·T, V] logits never exist whole) */
    float *grads;                /* [P] */
    size_t *bounds;              /* [ranks + 1] the parameter shards (ZeRO); one shard without */
    size_t shard_begin, shard_end; /* this rank's: AdamW updates [shard_begin, shard_end) */
    float *adam_m, *adam_v;      /* [shard_end − shard_begin] AdamW moments */
    unsigned char *decay;        /* [P] 1 where weight decay applies */
    grad_bucket *buckets;        /* in the order the backward finishes them (from the end) */
    int n_buckets, posted;
    rank_report *reports;        /* [ranks] */
} train_step;

/* Allocates the gradients, the optimizer state (zeroed) and the run state for model m. */
int train_step_init(train_step *s, dt_model *m, dt_comm *comm, const train_step_options *o, dt_error *err);
void train_step_free(train_step *s);

/* One step numbered t (from 1) at learning rate lr on this rank's rows in, tg [K·b, T]
 * (micro-batch k is rows k·b .. k·b+b−1). stop: this rank wants to stop after the step (every
 * rank learns it in st->stop). A non-finite loss or gradient norm fails on every rank before any
 * parameter changes. */
int train_step_run(train_step *s, const int *in, const int *tg, int t, float lr, int stop, train_step_stats *st,
                   dt_error *err);

/* Bytes of AdamW moments this rank holds. */
size_t train_step_optimizer_bytes(const train_step *s);
/* Bytes each rank sends per step for the gradients and (ZeRO) the parameters, by the textbook
 * ring algorithms: 2·(N−1)/N·4P either way (reduce-scatter + all-gather = all-reduce). */
double train_step_comm_bytes(const train_step *s);
#endif
