/* step.c — one optimizer step (see step.h for the sequence). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "dist/comm.h"
#include "layers/kernels.h"
#include "internal.h"
#include "model/profile.h"
#include "train/step.h"

/* What every rank tells the others after its backward. */
struct rank_report {
    double loss;                 /* mean over the rank's K micro-batches */
    double compute_s;
    double shard_norm;           /* ZeRO: norm of the rank's shard of the summed gradient */
    int stop, pad;
};

/* Buckets of about P/8 parameters (64 Ki .. 4 Mi floats), cut from the end of the layout (the
 * backward finishes the parameters in that order) and at the shard boundaries (ZeRO), so that
 * each bucket has one owner. Fixed at init: the same cuts on every rank, every step. */
/* x[0..n) = 0, each thread writing the span adamw_step gives it (see train_step_create) */
static void touch_zeros(float *x, size_t n) {
#pragma omp parallel
    {
        size_t lo, hi;
        kernels_span(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (hi > lo) memset(x + lo, 0, (hi - lo) * sizeof *x);
    }
}

static int build_buckets(train_step *s, dt_error *err) {
    const size_t P = s->model->n_params, ranks = (size_t)dt_comm_size(s->comm);
    size_t target = P / 8;
    if (target < ((size_t)1 << 16)) target = (size_t)1 << 16;
    if (target > ((size_t)1 << 22)) target = (size_t)1 << 22;
    const size_t cap = P / target + 2 + ranks;
    s->buckets = malloc(cap * sizeof *s->buckets);
    if (!s->buckets) return dt_fail_oom(err, "out of memory");
    int owner = (int)ranks - 1;
    for (size_t end = P; end > 0;) {
        while (s->opt.zero && s->bounds[owner] >= end) owner--; /* skips empty shards */
        size_t begin = end > target ? end - target : 0;
        if (s->opt.zero && begin < s->bounds[owner]) begin = s->bounds[owner];
        s->buckets[s->n_buckets++] = (grad_bucket){begin, end, s->opt.zero ? owner : -1};
        end = begin;
    }
    return 0;
}

int train_step_init(train_step *s, dt_model *m, dt_comm *comm, const train_step_options *o, dt_error *err) {
    memset(s, 0, sizeof *s);
    if (o->micro_batch <= 0 || o->seq <= 0 || o->accum <= 0)
        return dt_fail(err, "training step: micro-batch %d, sequence %d and accumulation %d must be positive",
                       o->micro_batch, o->seq, o->accum);
    const size_t P = m->n_params;
    const int ranks = dt_comm_size(comm), rank = dt_comm_rank(comm);
    if (comm_check_count(comm, P, err) != 0) return -1;
    s->model = m;
    s->comm = comm;
    s->opt = *o;
    if (ranks == 1) s->opt.zero = 0;
    s->bounds = malloc(((size_t)ranks + 1) * sizeof *s->bounds);
    s->reports = calloc((size_t)ranks, sizeof *s->reports);
    if (!s->bounds || !s->reports) goto oom;
    if (s->opt.zero) {
        comm_bounds(comm, P, s->bounds);
    } else {
        for (int r = 0; r <= ranks; r++) s->bounds[r] = r ? P : 0; /* rank 0's "shard" is everything */
    }
    s->shard_begin = s->opt.zero ? s->bounds[rank] : 0;
    s->shard_end = s->opt.zero ? s->bounds[rank + 1] : P;
    const size_t shard = s->shard_end - s->shard_begin;
    s->grads = calloc(P, sizeof(float));
    s->adam_m = calloc(shard ? shard : 1, sizeof(float));
    s->adam_v = calloc(shard ? shard : 1, sizeof(float));
    s->decay = calloc(P, 1);
    if (!s->grads || !s->adam_m || !s->adam_v || !s->decay) goto oom;
    /* AdamW reads a moment before it writes it: on calloc's untouched pages the read maps the
     * shared zero page and the write then faults again to replace it, flushing the other CPUs'
     * TLBs (an IPI each, dear in a VM). Writing the zeros now gives each page its own frame in one
     * fault, by the threads that will update it. */
    touch_zeros(s->adam_m, shard);
    touch_zeros(s->adam_v, shard);
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].decay) memset(s->decay + m->tensors[i].offset, 1, m->tensors[i].numel);
    if (build_buckets(s, err) != 0) {
        train_step_free(s);
        return -1;
    }
    s->rs = dt_runstate_create_with(m, o->micro_batch, o->seq, &(dt_run_options){.chunked_loss = 1}, err);
    if (!s->rs) {
        train_step_free(s);
        return -1;
    }
    return 0;
oom:
    train_step_free(s);
    return dt_fail_oom(err, "out of memory for the gradients and optimizer state of %zu parameters", P);
}

void train_step_free(train_step *s) {
    dt_runstate_free(s->rs);
    free(s->grads);
    free(s->adam_m);
    free(s->adam_v);
    free(s->decay);
    free(s->bounds);
    free(s->buckets);
    free(s->reports);
    memset(s, 0, sizeof *s);
}

size_t train_step_optimizer_bytes(const train_step *s) { return 2 * (s->shard_end - s->shard_begin) * sizeof(float); }

double train_step_comm_bytes(const train_step *s) {
    const double N = dt_comm_size(s->comm);
    return 2 * (N - 1) / N * 4.0 * (double)s->model->n_params;
}

static void post_bucket(train_step *s, const grad_bucket *b) {
    if (b->owner < 0) comm_iallreduce_sum(s->comm, s->grads + b->begin, b->end - b->begin);
    else comm_ireduce_sum(s->comm, s->grads + b->begin, b->end - b->begin, b->owner);
}

/* dt_backward_notify's callback: posts every bucket the backward has finished. */
static void on_grads_ready(void *ctx, size_t from) {
    train_step *s = ctx;
    while (s->posted < s->n_buckets && s->buckets[s->posted].begin >= from) post_bucket(s, &s->buckets[s->posted++]);
    comm_progress(s->comm);
}

int train_step_run(train_step *s, const int *in, const int *tg, int t, float lr, int stop, train_step_stats *st,
                   dt_error *err) {
    dt_model *m = s->model;
    const size_t P = m->n_params, rows = (size_t)s->opt.micro_batch * s->opt.seq;
    const int K = s->opt.accum, ranks = dt_comm_size(s->comm), rank = dt_comm_rank(s->comm);
    const int reduce = ranks > 1;
    memset(st, 0, sizeof *st);
    comm_set_step(s->comm, t);

    double t0 = monotonic_seconds();
    dt_profile *prof = runstate_profile(s->rs);
    double clk = profile_start(prof);
    memset(s->grads, 0, P * sizeof(float));
    profile_lap(prof, PROF_ZERO, 0, &clk);
    double loss_sum = 0;
    s->posted = 0;
    for (int k = 0; k < K; k++) {
        float loss;
        if (dt_forward(m, s->rs, in + k * rows, tg + k * rows, s->opt.micro_batch, s->opt.seq, &loss, err) != 0)
            return -1;
        const int hook = reduce && k == K - 1 && !s->opt.no_overlap;
        dt_backward_notify(m, s->rs, s->grads, hook ? on_grads_ready : NULL, s);
        loss_sum += loss;
    }
    st->compute_s = monotonic_seconds() - t0;
    if (reduce) {
        while (s->posted < s->n_buckets) post_bucket(s, &s->buckets[s->posted++]);
        st->wait_s = comm_wait(s->comm, "the gradient reduction");
    }

    /* Each backward adds the gradient of its micro-batch's mean loss: every micro-batch on every
     * rank counts the same b·T tokens, so the step's mean gradient is the sum over K·N of them
     * divided by K·N. The averaging and the clipping are one scaling. */
    clk = profile_start(prof);
    const float KN = (float)K * (float)ranks;
    float *g = s->grads + s->shard_begin;
    const size_t shard = s->shard_end - s->shard_begin;
    rank_report *me = &s->reports[rank];
    me->loss = loss_sum / K;
    me->compute_s = st->compute_s;
    me->shard_norm = s->opt.zero ? grad_norm(g, shard) : 0;
    me->stop = stop != 0;
    if (reduce) {
        double t1 = monotonic_seconds();
        rank_report mine = *me;
        comm_allgather(s->comm, &mine, s->reports, sizeof mine, "the exchange of losses");
        st->comm_s += monotonic_seconds() - t1;
    }
    double loss = 0, norm2 = 0;
    st->compute_min_s = st->compute_max_s = s->reports[0].compute_s;
    for (int r = 0; r < ranks; r++) { /* in rank order: the same bits on every rank */
        const rank_report *q = &s->reports[r];
        loss += q->loss;
        norm2 += q->shard_norm * q->shard_norm;
        st->stop |= q->stop;
        if (q->compute_s < st->compute_min_s) st->compute_min_s = q->compute_s;
        if (q->compute_s > st->compute_max_s) st->compute_max_s = q->compute_s;
    }
    const double behind = st->compute_max_s - st->compute_s;
    st->exposed_s = st->wait_s > behind ? st->wait_s - behind : 0;
    const float gnorm = (s->opt.zero ? (float)sqrt(norm2) : grad_norm(s->grads, P)) / KN;
    st->loss = (float)(loss / ranks);
    st->grad_norm = gnorm;
    if (!isfinite(st->loss) || !isfinite(gnorm))
        return dt_fail_code(err, DT_ERR_DIVERGED,
                            "step %d: loss %g, gradient norm %g — training diverged (try a lower lr)", t,
                            /* NAN, not the sign bit's "-nan" */
                            isnan(st->loss) ? NAN : (double)st->loss, isnan(gnorm) ? NAN : (double)gnorm);
    float scale = 1.0f / KN;
    if (s->opt.grad_clip > 0 && gnorm > s->opt.grad_clip) scale *= s->opt.grad_clip / gnorm;
    if (scale != 1.0f) grad_scale(g, shard, scale);
    profile_lap(prof, PROF_GRAD_NORM, scale != 1.0f ? 2 : 1, &clk);
    adamw_step(m->params + s->shard_begin, g, s->adam_m, s->adam_v, s->decay + s->shard_begin, shard, t,
               &s->opt.hp, lr);
    profile_lap(prof, PROF_ADAMW, 1, &clk);
    if (s->opt.zero) {
        double t1 = monotonic_seconds();
        comm_allgatherv_f32(s->comm, m->params, s->bounds, "the all-gather of the parameters");
        st->comm_s += monotonic_seconds() - t1;
    }
    st->comm_s += st->wait_s;
    return 0;
}
