/* optim.h — optimiser pieces used by train.c (internal). */
#ifndef DT_OPTIM_H
#define DT_OPTIM_H
#include <stddef.h>

#include "difftrans.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
} adamw_hparams;

/* Linear warm-up over `warmup` steps to lr, then cosine decay to lr·min_lr_ratio at `steps`. */
float lr_schedule(int step, int steps, int warmup, float lr, float min_lr_ratio);
/* L2 norm of g[n] (accumulated in double). */
float grad_norm(const float *g, size_t n);
void grad_scale(float *g, size_t n, float s);
/* One AdamW step (t counts from 1); decay[i] marks parameters that get weight decay (decoupled). */
void adamw_step(float *p, const float *g, float *m, float *v, const unsigned char *decay, size_t n, int t,
                const adamw_hparams *h, float lr);
/* Mean loss over consecutive windows of T+1 tokens (at most max_windows, 0 = all), B at a
 * time, reusing a caller's run state and token buffers in, tg [B·T] (data.c); a batch whose loss
 * is not finite fails (DT_ERR_FORMAT) naming its windows. */
int eval_windows(const dt_model *m, dt_runstate *rs, int *in, int *tg, const int *tokens, size_t n, int B, int T,
                 size_t max_windows, double *mean_loss, size_t *count, dt_error *err);
/* Windows eval_windows scores: (n − 1) / T, at most max_windows (0 = all). */
size_t eval_window_count(size_t n, int T, size_t max_windows);
/* The summed loss (*loss_sum, over *scored predictions) of windows [first, end), B at a time. */
int eval_window_range(const dt_model *m, dt_runstate *rs, int *in, int *tg, const int *tokens, int B, int T,
                      size_t first, size_t end, double *loss_sum, size_t *scored, dt_error *err);
#endif
