/* step.c — one optimizer step (see step.h for the sequence). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "train/step.h"

int train_step_init(train_step *s, dt_model *m, const train_step_options *o, dt_error *err) {
    memset(s, 0, sizeof *s);
    if (o->micro_batch <= 0 || o->seq <= 0 || o->accum <= 0)
        return dt_fail(err, "training step: micro-batch %d, sequence %d and accumulation %d must be positive",
                       o->micro_batch, o->seq, o->accum);
    s->model = m;
    s->opt = *o;
    const size_t P = m->n_params;
    s->grads = calloc(P, sizeof(float));
    s->adam_m = calloc(P, sizeof(float));
    s->adam_v = calloc(P, sizeof(float));
    s->decay = calloc(P, 1);
    if (!s->grads || !s->adam_m || !s->adam_v || !s->decay) {
        train_step_free(s);
        return dt_fail(err, "out of memory for the gradients and optimizer state of %zu parameters", P);
    }
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].decay) memset(s->decay + m->tensors[i].offset, 1, m->tensors[i].numel);
    s->rs = dt_runstate_create_with(m, o->micro_batch, o->seq, &(dt_run_options){.chunked_loss = 1}, err);
    if (!s->rs) {
        train_step_free(s);
        return -1;
    }
    return 0;
}

void train_step_free(train_step *s) {
    dt_runstate_free(s->rs);
    free(s->grads);
    free(s->adam_m);
    free(s->adam_v);
    free(s->decay);
    memset(s, 0, sizeof *s);
}

int train_step_run(train_step *s, const int *in, const int *tg, int t, float lr, train_step_stats *st,
                   dt_error *err) {
    dt_model *m = s->model;
    const size_t P = m->n_params, rows = (size_t)s->opt.micro_batch * s->opt.seq;
    const int K = s->opt.accum;

    memset(s->grads, 0, P * sizeof(float));
    double loss_sum = 0;
    for (int k = 0; k < K; k++) {
        float loss;
        if (dt_forward(m, s->rs, in + k * rows, tg + k * rows, s->opt.micro_batch, s->opt.seq, &loss, err) != 0)
            return -1;
        dt_backward(m, s->rs, s->grads);
        loss_sum += loss;
    }
    /* Each backward adds the gradient of its micro-batch's mean loss: the step's mean is 1/K of the
     * sum (every micro-batch counts the same b·T tokens). The averaging and the clipping are one
     * scaling of the gradient. */
    const float loss = (float)(loss_sum / K);
    const float gnorm = grad_norm(s->grads, P) / (float)K;
    st->loss = loss;
    st->grad_norm = gnorm;
    if (!isfinite(loss) || !isfinite(gnorm))
        return dt_fail(err, "step %d: loss %g, gradient norm %g — training diverged (try a lower --lr)", t,
                       (double)loss, (double)gnorm);
    float scale = 1.0f / (float)K;
    if (s->opt.grad_clip > 0 && gnorm > s->opt.grad_clip) scale *= s->opt.grad_clip / gnorm;
    if (scale != 1.0f) grad_scale(s->grads, P, scale);
    adamw_step(m->params, s->grads, s->adam_m, s->adam_v, s->decay, P, t, &s->opt.hp, lr);
    return 0;
}
