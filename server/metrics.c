/* metrics.c — GET /metrics: counters and histograms the request threads update, written in
 * Prometheus' text exposition format 0.0.4 with the engine's gauges. */
#include <stdlib.h>
#include <string.h>

#include "server.h"

static const char *const endpoint_names[SRV_EP_COUNT] = {
    "/", "/health", "/v1/models", "/metrics", "/v1/completions", "/v1/chat/completions", "/v1/difftrans/attention",
    "other",
};

/* Bucket bounds in seconds: time to first token spans a queue wait and a prefill, the interval
 * between tokens one step of a batch. */
static const double ttft_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double tpot_le[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define N_TTFT (int)(sizeof ttft_le / sizeof ttft_le[0])
#define N_TPOT (int)(sizeof tpot_le / sizeof tpot_le[0])
#define MAX_STATUS 16

typedef struct {
    const double *le;
    int n;
    uint64_t counts[16];         /* per bucket (not cumulative); [n] is +Inf */
    double sum;
    uint64_t count;
} histogram;

struct srv_metrics {
    pthread_mutex_t mu;
    struct {
        int status;
        uint64_t count;
    } requests[SRV_EP_COUNT][MAX_STATUS];
    uint64_t prompt_tokens, generated_tokens;
    histogram ttft, tpot;
};

srv_metrics *srv_metrics_new(void) {
    srv_metrics *mt = calloc(1, sizeof *mt);
    if (!mt) return NULL;
    if (pthread_mutex_init(&mt->mu, NULL) != 0) {
        free(mt);
        return NULL;
    }
    mt->ttft.le = ttft_le;
    mt->ttft.n = N_TTFT;
    mt->tpot.le = tpot_le;
    mt->tpot.n = N_TPOT;
    return mt;
}

void srv_metrics_free(srv_metrics *mt) {
    if (!mt) return;
    pthread_mutex_destroy(&mt->mu);
    free(mt);
}

void srv_metrics_request(srv_metrics *mt, srv_endpoint ep, int status) {
    if (ep < 0 || ep >= SRV_EP_COUNT) ep = SRV_EP_OTHER;
    pthread_mutex_lock(&mt->mu);
    for (int i = 0; i < MAX_STATUS; i++) {
        if (mt->requests[ep][i].count == 0) mt->requests[ep][i].status = status;
        if (mt->requests[ep][i].status == status) {
            mt->requests[ep][i].count++;
            break;
        }
    }
    pthread_mutex_unlock(&mt->mu);
}

void srv_metrics_tokens(srv_metrics *mt, long prompt, long generated) {
    pthread_mutex_lock(&mt->mu);
    mt->prompt_tokens += (uint64_t)prompt;
    mt->generated_tokens += (uint64_t)generated;
    pthread_mutex_unlock(&mt->mu);
}

static void observe(histogram *h, double v) {
    int b = 0;
    while (b < h->n && v > h->le[b]) b++;
    h->counts[b]++;
    h->sum += v;
    h->count++;
}

void srv_metrics_ttft(srv_metrics *mt, double seconds) {
    pthread_mutex_lock(&mt->mu);
    observe(&mt->ttft, seconds);
    pthread_mutex_unlock(&mt->mu);
}

void srv_metrics_token_interval(srv_metrics *mt, double seconds) {
    pthread_mutex_lock(&mt->mu);
    observe(&mt->tpot, seconds);
    pthread_mutex_unlock(&mt->mu);
}

static void put_histogram(srv_buf *b, const char *name, const char *help, const histogram *h) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        srv_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->le[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n];
    srv_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    srv_buf_printf(b, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

static void gauge(srv_buf *b, const char *name, const char *help, double v) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

static void counter(srv_buf *b, const char *name, const char *help, uint64_t v) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

char *srv_metrics_text(srv_metrics *mt, const dt_engine_stats *st, size_t *len) {
    srv_buf b = {0};
    pthread_mutex_lock(&mt->mu);
    srv_buf_puts(&b, "# HELP difftrans_requests_total HTTP requests answered, by endpoint and status.\n"
                     "# TYPE difftrans_requests_total counter\n");
    for (int ep = 0; ep < SRV_EP_COUNT; ep++)
        for (int i = 0; i < MAX_STATUS && mt->requests[ep][i].count; i++)
            srv_buf_printf(&b, "difftrans_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", endpoint_names[ep],
                           mt->requests[ep][i].status, (unsigned long long)mt->requests[ep][i].count);
    /* counted as each request the engine took ends: finished, stopped, or its client gone */
    counter(&b, "difftrans_prompt_tokens_total", "Prompt tokens of the requests the engine took (cancelled ones too).",
            mt->prompt_tokens);
    counter(&b, "difftrans_generated_tokens_total",
            "Tokens generated for the requests the engine took (cancelled ones too).", mt->generated_tokens);
    put_histogram(&b, "difftrans_time_to_first_token_seconds", "Seconds from a request's submission to its first token.",
                  &mt->ttft);
    put_histogram(&b, "difftrans_time_per_output_token_seconds", "Seconds between consecutive tokens of a request.",
                  &mt->tpot);
    pthread_mutex_unlock(&mt->mu);
    gauge(&b, "difftrans_queue_depth", "Requests waiting for a KV-cache slot.", st->queue_depth);
    gauge(&b, "difftrans_batch_rows", "Rows (tokens) of the engine's last step.", st->last_batch_rows);
    gauge(&b, "difftrans_batch_sequences", "Requests the engine's last step advanced.", st->last_batch_sequences);
    gauge(&b, "difftrans_kv_slots_in_use", "KV-cache slots holding a request.", st->slots_in_use);
    gauge(&b, "difftrans_kv_slots", "KV-cache slots in the pool.", st->n_slots);
    gauge(&b, "difftrans_kv_cache_bytes", "Bytes of the KV-cache pool.", (double)st->kv_bytes);
    counter(&b, "difftrans_engine_steps_total", "Batched steps the engine ran.", st->steps);
    counter(&b, "difftrans_engine_requests_cancelled_total", "Requests the engine ended early (client gone, stop "
                                                               "string, shutdown).", st->requests_cancelled);
    counter(&b, "difftrans_engine_requests_failed_total",
            "Requests the engine ended with an error (the model's logits not finite, a failed step).",
            st->requests_failed);
    return srv_buf_take(&b, len);
}
