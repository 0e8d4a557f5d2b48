/* engine.c — continuous batching: one engine thread, a pool of KV-cache slots, requests that
 * join and leave between steps.
 *
 * Every step takes one row for each request that is decoding (its newest token) and then prompt
 * rows of requests still prefilling, oldest first, up to a budget, and runs them as one
 * dt_batch_step. The budget keeps the prefill rows of a step within 0.6 of a decode-only step's
 * time (both measured as the engine runs), so a long prompt arriving mid-stream stretches the
 * other streams' token intervals to about 1.6 while it is prefilled; with nothing decoding,
 * prompts go in chunks as large as the batch allows.
 *
 * Locking: one mutex guards the queue, every request's event queue and flags, and the stats;
 * the engine thread drops it while it computes. A request is shared by its caller and the engine
 * (two references); whoever lets go last frees it.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "difftrans_serve.h"
#include "base/base.h"
#include "internal.h"
#include "prefill_budget.h"

/* Steps after which the time of a decode-only step is measured again when prompts wait and no
 * such step came by itself: the decoding rows' positions, and so their attention, grow. */
#define DECODE_REFRESH 64

typedef enum { REQ_QUEUED, REQ_PREFILL, REQ_DECODE, REQ_DONE } req_state;

struct dt_engine_request {
    dt_engine *e;
    int refs;                    /* caller + engine */
    req_state state;
    int cancel;
    /* the request */
    dt_engine_request_options o;
    int *seq;                    /* [n_prompt + max_new_tokens]: the prompt, then what is generated */
    int n_seq, n_fed;            /* tokens in seq, and how many of them the slot's cache holds */
    int stop_ids[DT_ENGINE_MAX_STOP_IDS], n_stop;
    uint64_t rng;
    int slot;
    double t_submit, t_first;
    int queued_reported;
    double queued_s;
    /* events not yet read */
    dt_event *events;
    size_t n_events, cap_events, read;
    int done_read;
    dt_error error;              /* why it ended with DT_STOP_ERROR */
    pthread_cond_t cond;
    dt_engine_request *next;     /* the queue, or the engine's list of running requests */
};

typedef struct exclusive_job {
    int (*fn)(void *);
    void *ctx;
    int rc, done;
    struct exclusive_job *next;
} exclusive_job;

struct dt_engine {
    const dt_model *m;
    dt_engine_options o;
    dt_batch *batch;
    dt_batch_row *rows;          /* [max_rows] */
    dt_engine_request **row_req; /* [max_rows] the request of each row */
    float *logits;               /* [max_rows, V] */
    dt_prob_index *scratch;      /* [V] sampling */
    float *sample_logits;        /* [V] the copy dt_sample consumes when log-probabilities are wanted */
    int *slot_free;              /* [n_slots] */
    dt_engine_request **running; /* [n_slots] by slot, NULL when free */
    dt_engine_request *queue_head, *queue_tail;
    dt_engine_request *finished; /* ended, the engine's reference not yet dropped */
    int queue_depth;
    exclusive_job *jobs;
    pthread_mutex_t mu;
    pthread_cond_t work;         /* the engine thread waits on it */
    pthread_cond_t job_done;
    pthread_t thread;
    int stopping, joined;
    dt_engine_stats stats;
    /* the adaptive prefill budget (prefill_chunk 0, prefill_budget.h) */
    decode_reference *decode_ref; /* [n_slots + 1] by the number of decoding rows */
    prefill_budget budget;
};

void dt_engine_defaults(dt_engine_options *o) {
    memset(o, 0, sizeof *o);
    o->n_slots = 4;
    o->ctx = 0;
    o->kv_cache = DT_KV_F32;
    o->max_queue = 64;
    o->prefill_chunk = 0;
    o->max_rows = 0;
}

/* ---------------------------------------------------------------- requests */

void dt_engine_request_defaults(dt_engine_request_options *r) {
    dt_generate_options g;
    dt_generate_defaults(&g);
    memset(r, 0, sizeof *r);
    r->max_new_tokens = g.max_new_tokens;
    r->sampler = g.sampler;
    r->seed = g.seed;
    r->n_stop = g.n_stop;
    r->top_logprobs = -1;
}

static void request_unref_locked(dt_engine_request *q) {
    if (--q->refs > 0) return;
    pthread_cond_destroy(&q->cond);
    free(q->events);
    free(q->seq);
    free(q);
}

/* Appends an event for the request's reader; -1 when out of memory (the request is then ended). */
static int push_event_locked(dt_engine_request *q, const dt_event *ev) {
    if (q->read == q->n_events) q->read = q->n_events = 0; /* everything read: start over */
    if (dt_grow(&q->events, &q->cap_events, q->n_events + 1, sizeof *q->events, 16) != 0) return -1;
    q->events[q->n_events] = *ev;
    q->events[q->n_events].t = dt_seconds();
    q->n_events++;
    pthread_cond_broadcast(&q->cond);
    return 0;
}

/* The request ends: DONE is its last event, its slot is free for the next step. */
static void finish_locked(dt_engine *e, dt_engine_request *q, dt_stop_reason why, int stop_token) {
    dt_event ev = {.type = DT_EVENT_DONE, .stop = why, .stop_token = stop_token, .token = -1,
                   .error = why == DT_STOP_ERROR ? q->error.msg : NULL,
                   .n_prompt = q->o.n_prompt, .n_generated = q->n_seq - q->o.n_prompt,
                   .queued_s = q->queued_s, .first_token_s = q->t_first > 0 ? q->t_first - q->t_submit : 0};
    if (push_event_locked(q, &ev) != 0) {
        /* no room even for DONE: the reader sees the request end with what it has */
        q->n_events = q->read = 0;
    }
    if (q->slot >= 0) {
        e->running[q->slot] = NULL;
        e->slot_free[q->slot] = 1;
        e->stats.slots_in_use--;
        q->slot = -1;
    }
    q->state = REQ_DONE;
    if (why == DT_STOP_CANCELLED) e->stats.requests_cancelled++;
    else if (why == DT_STOP_ERROR) e->stats.requests_failed++;
    else e->stats.requests_done++;
    /* the engine's reference goes in reap_locked, after the step's rows no longer point at it */
    q->next = e->finished;
    e->finished = q;
}

/* The request ends with DT_STOP_ERROR and err's message. */
static void fail_locked(dt_engine *e, dt_engine_request *q, const dt_error *err) {
    q->error = *err;
    finish_locked(e, q, DT_STOP_ERROR, -1);
}

static void reap_locked(dt_engine *e) {
    while (e->finished) {
        dt_engine_request *q = e->finished;
        e->finished = q->next;
        request_unref_locked(q);
    }
}

static int check_request(const dt_engine *e, const dt_engine_request_options *r, dt_error *err) {
    const dt_config *c = &e->m->cfg;
    if (!r->prompt || r->n_prompt < 1) return dt_fail(err, "engine: the prompt has no tokens (at least one is needed)");
    if (r->max_new_tokens < 0) return dt_fail(err, "engine: max_new_tokens %d is negative", r->max_new_tokens);
    if ((long)r->n_prompt + r->max_new_tokens > e->o.ctx)
        return dt_fail(err, "engine: the prompt has %d tokens and max_new_tokens is %d: %ld exceeds the context of %d "
                            "tokens",
                       r->n_prompt, r->max_new_tokens, (long)r->n_prompt + r->max_new_tokens, e->o.ctx);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= c->vocab_size)
            return dt_fail(err, "engine: prompt token %d at position %d is outside the vocabulary [0, %d)",
                           r->prompt[i], i, c->vocab_size);
    if (r->n_stop > DT_ENGINE_MAX_STOP_IDS)
        return dt_fail(err, "engine: %d stop ids (at most %d)", r->n_stop, DT_ENGINE_MAX_STOP_IDS);
    if (r->n_stop > 0 && !r->stop_ids) return dt_fail(err, "engine: n_stop %d but no stop_ids", r->n_stop);
    if (r->top_logprobs > DT_MAX_TOP_LOGPROBS)
        return dt_fail(err, "engine: top_logprobs %d (at most %d)", r->top_logprobs, DT_MAX_TOP_LOGPROBS);
    const dt_sampler *s = &r->sampler;
    if (!(s->temperature >= 0) || !(s->top_p > 0 && s->top_p <= 1) || s->top_k < 0 || !(s->min_p >= 0 && s->min_p <= 1))
        return dt_fail(err, "engine: sampler temperature %g, top_p %g, top_k %d, min_p %g: need temperature >= 0, "
                            "top_p in (0, 1], top_k >= 0, min_p in [0, 1]",
                       (double)s->temperature, (double)s->top_p, s->top_k, (double)s->min_p);
    return 0;
}

int dt_engine_submit(dt_engine *e, const dt_engine_request_options *r, dt_engine_request **out, dt_error *err) {
    *out = NULL;
    if (check_request(e, r, err) != 0) return -1;
    dt_engine_request *q = calloc(1, sizeof *q);
    const size_t total = (size_t)r->n_prompt + (size_t)r->max_new_tokens;
    if (!q || !(q->seq = malloc(total * sizeof *q->seq))) {
        free(q);
        return dt_fail_oom(err, "engine: out of memory for a request of %zu tokens", total);
    }
    q->e = e;
    q->refs = 2;
    q->o = *r;
    q->o.prompt = NULL;
    q->o.stop_ids = NULL;
    memcpy(q->seq, r->prompt, (size_t)r->n_prompt * sizeof *q->seq);
    q->n_seq = r->n_prompt;
    if (r->n_stop < 0) q->n_stop = dt_model_stop_ids(e->m, q->stop_ids);
    else {
        q->n_stop = r->n_stop;
        if (r->n_stop > 0) memcpy(q->stop_ids, r->stop_ids, (size_t)r->n_stop * sizeof *q->stop_ids);
    }
    q->rng = r->seed;
    q->slot = -1;
    q->t_submit = dt_seconds();
    pthread_cond_init(&q->cond, NULL);

    pthread_mutex_lock(&e->mu);
    int free_slots = 0;
    for (int s = 0; s < e->o.n_slots; s++) free_slots += e->slot_free[s];
    if (e->stopping || e->queue_depth - free_slots >= e->o.max_queue) {
        const int stopping = e->stopping, queue_depth = e->queue_depth;
        pthread_mutex_unlock(&e->mu);
        pthread_cond_destroy(&q->cond);
        free(q->seq);
        free(q);
        if (stopping) return dt_fail_code(err, DT_ERR_BUSY, "engine: shutting down, no new requests are taken");
        /* the first queued requests take the free slots at the next step: they do not wait for one, and
         * do not count against max_queue */
        const int running = e->o.n_slots - free_slots, waiting = queue_depth - free_slots;
        if (free_slots > 0)
            return dt_fail_code(err, DT_ERR_BUSY, "engine: no slot is free (%d running, %d about to start) and the "
                                                  "queue is full (%d waiting, it holds %d): try again later",
                                running, free_slots, waiting, e->o.max_queue);
        return dt_fail_code(err, DT_ERR_BUSY, "engine: no slot is free (%d running) and the queue is full (%d "
                                              "waiting, it holds %d): try again later",
                            running, waiting, e->o.max_queue);
    }
    q->state = REQ_QUEUED;
    if (e->queue_tail) e->queue_tail->next = q;
    else e->queue_head = q;
    e->queue_tail = q;
    e->queue_depth++;
    e->stats.queue_depth = e->queue_depth;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    *out = q;
    return 0;
}

int dt_engine_next(dt_engine_request *q, dt_event *ev, double timeout_s) {
    dt_engine *e = q->e;
    pthread_mutex_lock(&e->mu);
    if (q->read == q->n_events && !q->done_read && timeout_s > 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        const double s = floor(timeout_s);
        until.tv_sec += (time_t)s;
        until.tv_nsec += (long)((timeout_s - s) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (q->read == q->n_events && !q->done_read)
            if (pthread_cond_timedwait(&q->cond, &e->mu, &until) != 0) break;
    }
    int got = 0;
    if (q->read < q->n_events && !q->done_read) {
        *ev = q->events[q->read++];
        if (ev->type == DT_EVENT_DONE) q->done_read = 1;
        got = 1;
    }
    pthread_mutex_unlock(&e->mu);
    return got;
}

void dt_engine_cancel(dt_engine_request *q) {
    dt_engine *e = q->e;
    pthread_mutex_lock(&e->mu);
    if (q->state != REQ_DONE) {
        q->cancel = 1;
        pthread_cond_signal(&e->work);
    }
    pthread_mutex_unlock(&e->mu);
}

void dt_engine_release(dt_engine_request *q) {
    if (!q) return;
    dt_engine *e = q->e;
    pthread_mutex_lock(&e->mu);
    if (q->state != REQ_DONE) {
        q->cancel = 1;
        pthread_cond_signal(&e->work);
    }
    request_unref_locked(q);
    pthread_mutex_unlock(&e->mu);
}

int dt_engine_exclusive(dt_engine *e, int (*fn)(void *ctx), void *ctx) {
    exclusive_job job = {.fn = fn, .ctx = ctx};
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        return -1;
    }
    job.next = e->jobs;
    e->jobs = &job;
    pthread_cond_signal(&e->work);
    while (!job.done) pthread_cond_wait(&e->job_done, &e->mu);
    pthread_mutex_unlock(&e->mu);
    return job.rc;
}

void dt_engine_get_stats(dt_engine *e, dt_engine_stats *s) {
    pthread_mutex_lock(&e->mu);
    *s = e->stats;
    pthread_mutex_unlock(&e->mu);
}

/* ---------------------------------------------------------------- the step */

/* Log-probabilities of logits [V] (before any sampling transform): of `token` into ev->logprob
 * and the n most probable ids into ev->top_*. */
static void fill_logprobs(dt_event *ev, const float *logits, int V, int token, int n) {
    float mx = logits[0];
    for (int i = 1; i < V; i++) mx = fmaxf(mx, logits[i]);
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)(logits[i] - mx));
    const float lse = mx + (float)log(sum);
    ev->logprob = logits[token] - lse;
    ev->n_top = 0;
    for (int i = 0; i < V; i++) { /* insertion into the n best, descending; ties keep the lower id */
        const float x = logits[i];
        int at = ev->n_top;
        while (at > 0 && x > ev->top_logprobs[at - 1]) at--;
        if (at >= n) continue;
        const int last = ev->n_top < n ? ev->n_top : n - 1;
        for (int k = last; k > at; k--) {
            ev->top_ids[k] = ev->top_ids[k - 1];
            ev->top_logprobs[k] = ev->top_logprobs[k - 1];
        }
        ev->top_ids[at] = i;
        ev->top_logprobs[at] = x;
        if (ev->n_top < n) ev->n_top++;
    }
    for (int k = 0; k < ev->n_top; k++) ev->top_logprobs[k] -= lse;
}

/* Ends cancelled requests (running or queued) and admits queued ones into free slots. */
static void admit_locked(dt_engine *e) {
    /* the cancelled free their slots first, for the queue's oldest to take in this same step */
    for (int s = 0; s < e->o.n_slots; s++)
        if (e->running[s] && (e->running[s]->cancel || e->stopping)) finish_locked(e, e->running[s], DT_STOP_CANCELLED, -1);
    for (dt_engine_request **pp = &e->queue_head; *pp;) {
        dt_engine_request *q = *pp;
        int slot = -1;
        if (!q->cancel && !e->stopping)
            for (int s = 0; s < e->o.n_slots && slot < 0; s++)
                if (e->slot_free[s]) slot = s;
        if (!q->cancel && !e->stopping && slot < 0) { /* in order: the oldest waits first */
            pp = &q->next; /* and the cancelled behind it leave the queue now, not when it gets a slot:
                              they counted against max_queue, refusing live requests with BUSY */
            continue;
        }
        *pp = q->next;
        if (e->queue_tail == q) {
            e->queue_tail = NULL;
            for (dt_engine_request *t = e->queue_head; t; t = t->next) e->queue_tail = t;
        }
        q->next = NULL;
        e->queue_depth--;
        if (q->cancel || e->stopping) {
            finish_locked(e, q, DT_STOP_CANCELLED, -1);
            continue;
        }
        e->slot_free[slot] = 0;
        e->running[slot] = q;
        e->stats.slots_in_use++;
        q->slot = slot;
        q->state = REQ_PREFILL;
        q->n_fed = 0;
        q->queued_s = dt_seconds() - q->t_submit;
    }
    e->stats.queue_depth = e->queue_depth;
}

/* Rows of the next step: every decoding request's newest token, then prompt rows, oldest request
 * first, within the prefill budget. Returns the row count. */
static int plan_step(dt_engine *e, int *n_decode) {
    int n = 0;
    for (int s = 0; s < e->o.n_slots; s++) {
        dt_engine_request *q = e->running[s];
        if (!q || q->state != REQ_DECODE) continue;
        e->rows[n] = (dt_batch_row){.slot = s, .pos = q->n_fed, .token = q->seq[q->n_fed], .want_logits = 1};
        e->row_req[n++] = q;
    }
    *n_decode = n;
    int budget = e->o.max_rows - n;
    if (n > 0) {
        int chunk = e->o.prefill_chunk;
        if (chunk <= 0) {
            /* without a recent decode-only step of as many rows there is nothing to hold the step
             * to: this one is that measurement (a prompt waits one step) */
            const decode_reference *ref = &e->decode_ref[n];
            const int stale = ref->seen == 0 || e->stats.steps - ref->at_step > DECODE_REFRESH;
            chunk = stale ? 0 : prefill_budget_rows(&e->budget);
            e->stats.prefill_chunk = prefill_budget_rows(&e->budget);
        } else {
            e->stats.prefill_chunk = chunk;
        }
        if (chunk < budget) budget = chunk;
    }
    /* oldest first: requests were admitted in queue order into the lowest free slots, so go by
     * submission time */
    while (budget > 0) {
        dt_engine_request *oldest = NULL;
        for (int s = 0; s < e->o.n_slots; s++) {
            dt_engine_request *q = e->running[s];
            if (!q || q->state != REQ_PREFILL || q->n_fed >= q->o.n_prompt) continue;
            int taken = 0; /* already in this step */
            for (int r = *n_decode; r < n; r++) taken |= e->row_req[r] == q;
            if (taken) continue;
            if (!oldest || q->t_submit < oldest->t_submit) oldest = q;
        }
        if (!oldest) break;
        const int left = oldest->o.n_prompt - oldest->n_fed, take = left < budget ? left : budget;
        for (int i = 0; i < take; i++) {
            const int pos = oldest->n_fed + i;
            const int last = pos == oldest->o.n_prompt - 1;
            e->rows[n] = (dt_batch_row){.slot = oldest->slot, .pos = pos, .token = oldest->seq[pos],
                                        .want_logits = last || oldest->o.prompt_logprobs};
            e->row_req[n++] = oldest;
        }
        budget -= take;
    }
    return n;
}

/* After the step: prompt log-probabilities, sampled tokens, requests that end. */
static void take_results(dt_engine *e, int n) {
    const int V = e->m->cfg.vocab_size;
    int row_logits = 0;
    for (int r = 0; r < n; r++) {
        dt_engine_request *q = e->row_req[r];
        const dt_batch_row *row = &e->rows[r];
        float *logits = row->want_logits ? e->logits + (size_t)row_logits++ * V : NULL;
        q->n_fed = row->pos + 1;
        if (q->state == REQ_DONE || q->cancel) continue;
        dt_error err;
        if (logits && logits_check_finite(logits, V, row->pos, &err) != 0) {
            fail_locked(e, q, &err);
            continue;
        }
        const int prompt_row = row->pos < q->o.n_prompt - 1;
        if (prompt_row) {
            if (logits && q->o.prompt_logprobs) { /* these logits predict the next prompt token */
                dt_event ev = {.type = DT_EVENT_PROMPT, .token = q->seq[row->pos + 1], .position = row->pos + 1};
                if (q->o.top_logprobs >= 0) fill_logprobs(&ev, logits, V, ev.token, q->o.top_logprobs);
                if (push_event_locked(q, &ev) != 0) finish_locked(e, q, DT_STOP_CANCELLED, -1);
            }
            continue;
        }
        /* the last prompt row or a decode row: its logits give the next token */
        if (q->n_seq - q->o.n_prompt >= q->o.max_new_tokens) { /* max_new_tokens 0: the prompt alone */
            finish_locked(e, q, DT_STOP_LENGTH, -1);
            continue;
        }
        dt_event ev = {.type = DT_EVENT_TOKEN};
        /* dt_sample turns the logits into probabilities in place: when log-probabilities are
         * wanted too, it samples from a copy */
        float *sample_from = logits;
        if (q->o.top_logprobs >= 0) {
            memcpy(e->sample_logits, logits, (size_t)V * sizeof(float));
            sample_from = e->sample_logits;
        }
        const int token = dt_sample(sample_from, V, &q->o.sampler, &q->rng, e->scratch);
        if (q->o.top_logprobs >= 0) fill_logprobs(&ev, logits, V, token, q->o.top_logprobs);
        int is_stop = 0;
        for (int s = 0; s < q->n_stop; s++) is_stop |= token == q->stop_ids[s];
        ev.token = token;
        ev.is_stop = is_stop;
        ev.position = q->n_seq;
        if (q->t_first == 0) q->t_first = dt_seconds();
        if (!is_stop) {
            q->seq[q->n_seq++] = token;
            e->stats.generated_tokens++;
        }
        if (push_event_locked(q, &ev) != 0) {
            finish_locked(e, q, DT_STOP_CANCELLED, -1);
            continue;
        }
        if (is_stop) finish_locked(e, q, DT_STOP_EOS, token);
        else if (q->n_seq - q->o.n_prompt >= q->o.max_new_tokens) finish_locked(e, q, DT_STOP_LENGTH, -1);
        else q->state = REQ_DECODE;
    }
}

/* The step's time steers the prefill budget: a decode-only step gives the time the others' steps
 * should stay near, a step with prompt rows says whether its rows fitted beside them. */
static void measure_step(dt_engine *e, int n, int n_decode, double seconds) {
    if (n_decode == 0 || e->o.prefill_chunk > 0) return;
    decode_reference *ref = &e->decode_ref[n_decode];
    if (n == n_decode) decode_reference_add(ref, seconds, e->stats.steps);
    else prefill_budget_observe(&e->budget, n - n_decode, ref->seconds, seconds);
}

static void *engine_main(void *arg) {
    dt_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (e->jobs) { /* exclusive work between steps */
            exclusive_job *job = e->jobs;
            e->jobs = job->next;
            pthread_mutex_unlock(&e->mu);
            const int rc = job->fn(job->ctx);
            pthread_mutex_lock(&e->mu);
            job->rc = rc;
            job->done = 1;
            pthread_cond_broadcast(&e->job_done);
        }
        admit_locked(e);
        reap_locked(e);
        int n_decode;
        const int n = plan_step(e, &n_decode);
        if (n == 0) {
            if (e->stopping && !e->queue_head) break;
            if (!e->jobs) pthread_cond_wait(&e->work, &e->mu);
            continue;
        }
        int sequences = 0;
        for (int r = 0; r < n; r++) sequences += r == 0 || e->row_req[r] != e->row_req[r - 1];
        e->stats.last_batch_rows = n;
        e->stats.last_batch_sequences = sequences;
        pthread_mutex_unlock(&e->mu);

        dt_error err = {0};
        const double t0 = dt_seconds();
        const int rc = dt_batch_step(e->m, e->batch, e->rows, n, e->logits, &err);
        const double took = dt_seconds() - t0;

        pthread_mutex_lock(&e->mu);
        e->stats.steps++;
        e->stats.prompt_tokens += (uint64_t)(n - n_decode);
        if (rc != 0) { /* the rows were checked when their requests were taken: not expected */
            for (int r = 0; r < n; r++)
                if (e->row_req[r]->state != REQ_DONE) fail_locked(e, e->row_req[r], &err);
        } else {
            measure_step(e, n, n_decode, took);
            take_results(e, n);
        }
        reap_locked(e);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* The pool and the step's buffers (what dt_engine_create allocates before the thread starts). */
static void free_buffers(dt_engine *e) {
    dt_batch_free(e->batch);
    free(e->rows);
    free(e->row_req);
    free(e->logits);
    free(e->scratch);
    free(e->sample_logits);
    free(e->slot_free);
    free(e->running);
    free(e->decode_ref);
}

dt_engine *dt_engine_create(const dt_model *m, const dt_engine_options *opt, dt_error *err) {
    dt_engine_options o = *opt;
    const int max_ctx = m->cfg.max_position_embeddings;
    if (o.ctx == 0) o.ctx = max_ctx;
    if (o.n_slots < 1 || o.n_slots > 1024) {
        dt_fail(err, "engine: n_slots %d must be in 1..1024", o.n_slots);
        return NULL;
    }
    if (o.ctx < 1 || o.ctx > max_ctx) {
        dt_fail(err, "engine: ctx %d must be in 1..max_position_embeddings (%d)", o.ctx, max_ctx);
        return NULL;
    }
    if (o.max_queue < 0) {
        dt_fail(err, "engine: max_queue %d is negative", o.max_queue);
        return NULL;
    }
    if (o.prefill_chunk < 0) {
        dt_fail(err, "engine: prefill_chunk %d is negative", o.prefill_chunk);
        return NULL;
    }
    if (o.max_rows == 0) o.max_rows = o.n_slots + 256;
    if (o.max_rows < o.n_slots + 1) {
        dt_fail(err, "engine: max_rows %d must exceed n_slots %d (a row for each decoding slot and one to prefill)",
                o.max_rows, o.n_slots);
        return NULL;
    }
    dt_engine *e = calloc(1, sizeof *e);
    if (!e) {
        dt_fail_oom(err, "engine: out of memory");
        return NULL;
    }
    e->m = m;
    e->o = o;
    const int V = m->cfg.vocab_size;
    if (!(e->batch = dt_batch_create(m, o.n_slots, o.ctx, o.max_rows, o.kv_cache, err))) {
        free(e);
        return NULL;
    }
    e->rows = calloc((size_t)o.max_rows, sizeof *e->rows);
    e->row_req = calloc((size_t)o.max_rows, sizeof *e->row_req);
    e->logits = malloc((size_t)o.max_rows * V * sizeof *e->logits);
    e->scratch = malloc((size_t)V * sizeof *e->scratch);
    e->sample_logits = malloc((size_t)V * sizeof *e->sample_logits);
    e->slot_free = malloc((size_t)o.n_slots * sizeof *e->slot_free);
    e->running = calloc((size_t)o.n_slots, sizeof *e->running);
    e->decode_ref = calloc((size_t)o.n_slots + 1, sizeof *e->decode_ref);
    prefill_budget_init(&e->budget, o.max_rows);
    if (!e->rows || !e->row_req || !e->logits || !e->scratch || !e->sample_logits || !e->slot_free || !e->running ||
        !e->decode_ref) {
        dt_fail_oom(err, "engine: out of memory for %d rows of %d logits", o.max_rows, V);
        goto fail;
    }
    for (int s = 0; s < o.n_slots; s++) e->slot_free[s] = 1;
    e->stats.n_slots = o.n_slots;
    e->stats.kv_bytes = dt_batch_kv_bytes(e->batch);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->job_done, NULL);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->work);
        pthread_cond_destroy(&e->job_done);
        dt_fail_code(err, DT_ERR_IO, "engine: could not start its thread");
        goto fail;
    }
    return e;
fail:
    free_buffers(e);
    free(e);
    return NULL;
}

void dt_engine_stop(dt_engine *e) {
    pthread_mutex_lock(&e->mu);
    const int joined = e->joined;
    e->stopping = 1;
    e->joined = 1;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    if (joined) return;
    pthread_join(e->thread, NULL);
    /* jobs submitted while it stopped are answered with -1 */
    pthread_mutex_lock(&e->mu);
    for (exclusive_job *job = e->jobs; job; job = job->next) {
        job->rc = -1;
        job->done = 1;
    }
    e->jobs = NULL;
    pthread_cond_broadcast(&e->job_done);
    pthread_mutex_unlock(&e->mu);
}

void dt_engine_free(dt_engine *e) {
    if (!e) return;
    dt_engine_stop(e);
    free_buffers(e);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->job_done);
    pthread_mutex_destroy(&e->mu);
    free(e);
}
