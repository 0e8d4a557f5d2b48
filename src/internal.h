/* internal.h — helpers shared inside the library, not part of the public API. */
#ifndef DT_INTERNAL_H
#define DT_INTERNAL_H
#include "difftrans.h"

/* Writes text plus a newline to path through a temporary file and a rename. */
int write_text_atomic(const char *path, const char *text, dt_error *err);

/* dt_backward that tells `ready` as it goes which gradients are final: after ready(ctx, from), the
 * gradients of every parameter at offset >= from will not change any more in this backward. The
 * layout puts layers in order and the final norm and lm_head last, so `from` only decreases, to
 * 0 at the end. Lets a data-parallel step reduce gradients while the backward still runs. */
typedef void (*dt_grads_ready_fn)(void *ctx, size_t from);
void dt_backward_notify(const dt_model *m, dt_runstate *rs, float *grads, dt_grads_ready_fn ready, void *ctx);
#endif
