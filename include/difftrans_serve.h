/* difftrans_serve.h — the serving engine of libdifftrans: continuous batching over a pool of
 * KV-cache slots, for many concurrent requests on one model (`difftrans serve` is its HTTP
 * front end). Include after difftrans.h.
 *
 * One engine thread owns the model's compute. Every step it takes one row per decoding request
 * (its newest token) plus prompt rows of requests still prefilling (in chunks, so that a long
 * prompt never stalls the others), and runs them through the model as one batch: one pass over
 * the weights (float or quantised) for all rows. Requests join and leave between steps; each
 * holds one slot of a pool allocated once at dt_engine_create. Callers on any thread submit
 * requests and read their events (a token, its log-probabilities, the end) from a per-request
 * queue.
 */
#ifndef DIFFTRANS_SERVE_H
#define DIFFTRANS_SERVE_H

#include "difftrans.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- the engine */

typedef struct dt_engine dt_engine;

typedef struct {
    int n_slots;                 /* sequences decoded together [4] */
    int ctx;                     /* tokens per slot, prompt and generated [model's max_position_embeddings] */
    dt_kv_dtype kv_cache;        /* [F32] */
    int max_queue;               /* requests waiting for a slot before submit refuses (DT_ERR_BUSY) [64] */
    int prefill_chunk;           /* most prompt rows per step while others decode; 0: adaptive,
                                    as many as keep the step within 1.6 decode-only steps (steered
                                    on the measured step times as it runs) [0] */
    int max_rows;                /* rows per step at most (decode rows + prefill rows) [n_slots + 256] */
} dt_engine_options;

void dt_engine_defaults(dt_engine_options *o);
/* Starts the engine thread. The model must stay alive and unchanged until dt_engine_free. */
dt_engine *dt_engine_create(const dt_model *m, const dt_engine_options *o, dt_error *err);
/* Takes no more requests (submit refuses with DT_ERR_BUSY) and ends every request still queued or
 * running (their last event says DT_STOP_CANCELLED), then joins the engine thread. Handles stay
 * valid for dt_engine_next / dt_engine_release. Idempotent. */
void dt_engine_stop(dt_engine *e);
/* Stops the engine and frees it: every handle must have been released before. */
void dt_engine_free(dt_engine *e);

#define DT_MAX_TOP_LOGPROBS 20
/* Stop ids one request may give: the model's end-of-sequence ids and a chat template's end token. */
#define DT_ENGINE_MAX_STOP_IDS 16

typedef struct {
    const int *prompt;           /* ids, each checked against the vocabulary (copied at submit) */
    int n_prompt;                /* ≥ 1 */
    int max_new_tokens;          /* ≥ 0; prompt + max_new_tokens ≤ the engine's ctx */
    dt_sampler sampler;          /* temperature ≥ 0 (0: greedy), top_k ≥ 0, top_p in (0, 1] (1: off)
                                    even when greedy: a zeroed sampler (top_p 0) is refused */
    uint64_t seed;
    const int *stop_ids;         /* n_stop < 0: the model's own (dt_model_stop_ids); 0: none; at most
                                    DT_ENGINE_MAX_STOP_IDS */
    int n_stop;
    int top_logprobs;            /* 0..DT_MAX_TOP_LOGPROBS alternatives reported with each token;
                                    < 0: no log-probabilities at all (cheaper) */
    int prompt_logprobs;         /* 1: also an event for every prompt token after the first, with
                                    its log-probability given the tokens before it */
} dt_engine_request_options;

/* The defaults, as dt_generate_defaults' for the same fields: no prompt yet, max_new_tokens 200, the
 * sampler at temperature 0.8, top_k 0, top_p 0.95, seed 42, the model's own stop ids, no
 * log-probabilities. A zeroed struct is refused at submit (its top_p 0). */
void dt_engine_request_defaults(dt_engine_request_options *r);

typedef enum {
    DT_EVENT_PROMPT = 0,         /* a prompt token's log-probabilities (prompt_logprobs) */
    DT_EVENT_TOKEN = 1,          /* a generated token */
    DT_EVENT_DONE = 2            /* the end: stop, n_generated; always the last event */
} dt_event_type;

typedef struct {
    dt_event_type type;
    int token;                   /* PROMPT / TOKEN: the token (a stop id is reported as a TOKEN with
                                    is_stop, then DONE) */
    int is_stop;
    int position;                /* its position in the sequence (prompt from 0) */
    float logprob;               /* log p(token | before), from the model's logits before temperature,
                                    top-k or top-p (0 when top_logprobs < 0) */
    int n_top;                   /* alternatives: the most probable ids, descending */
    int top_ids[DT_MAX_TOP_LOGPROBS];
    float top_logprobs[DT_MAX_TOP_LOGPROBS];
    /* DONE */
    dt_stop_reason stop;         /* LENGTH, EOS (stop_token), CANCELLED (dt_engine_cancel, engine freed),
                                    ERROR (error says why: the model's logits not finite, a failed step) */
    int stop_token;
    const char *error;           /* ERROR: the message, valid until dt_engine_release; else NULL */
    int n_prompt, n_generated;
    double queued_s;             /* seconds from submit to the first step that took it */
    double first_token_s;        /* seconds from submit to its first generated token (0: none) */
    double t;                    /* dt_seconds() when the event was made */
} dt_event;

/* A request: dt_engine_request_defaults, then set prompt, n_prompt and what else differs. */
typedef struct dt_engine_request dt_engine_request;

/* Queues a request. Refused with DT_ERR_INVALID (ids outside the vocabulary, a prompt +
 * max_new_tokens past ctx, the message giving the counts; bad sampler values) or DT_ERR_BUSY
 * (no slot is free and max_queue requests wait for one, the message giving the counts; also after
 * dt_engine_stop), with *out set to NULL. On success
 * *out is the caller's handle: read it with dt_engine_next and give it back with dt_engine_release
 * (exactly once, before dt_engine_free). Any thread may submit; a handle's events are for one
 * reader at a time. */
int dt_engine_submit(dt_engine *e, const dt_engine_request_options *r, dt_engine_request **out, dt_error *err);
/* The next event of a request: 1 with *ev filled, 0 when none came within timeout_s (≥ 0), and
 * after DONE has been read, 0 at once. */
int dt_engine_next(dt_engine_request *q, dt_event *ev, double timeout_s);
/* Ends a request at the next step and frees its slot there (a client gone); its DONE says
 * CANCELLED. Idempotent; any thread. */
void dt_engine_cancel(dt_engine_request *q);
/* Gives the handle back (cancelling the request when it has not ended). */
void dt_engine_release(dt_engine_request *q);

/* Runs fn(ctx) on the engine thread between two steps and returns what it returned: for work
 * that should not compete with decoding for the cores (an attention map of a prompt). Blocks. */
int dt_engine_exclusive(dt_engine *e, int (*fn)(void *ctx), void *ctx);

typedef struct {
    int n_slots, slots_in_use;
    int queue_depth;             /* requests waiting for a slot */
    int last_batch_rows;         /* rows of the last step */
    int last_batch_sequences;    /* requests the last step advanced */
    uint64_t steps;
    uint64_t prompt_tokens, generated_tokens; /* fed / generated since the start */
    uint64_t requests_done, requests_cancelled, requests_failed;
    size_t kv_bytes;             /* the pool */
    int prefill_chunk;           /* the chunk in use (adaptive: the latest choice) */
} dt_engine_stats;
void dt_engine_get_stats(dt_engine *e, dt_engine_stats *s);

#ifdef __cplusplus
}
#endif
#endif
