/* http.c — the HTTP side of `difftrans serve`, on libmicrohttpd: one thread per connection (a
 * handler may block while the engine works for it), routing to the handful of paths served,
 * the API key, the body limit, server-sent events, noticing a client that went away (its
 * requests are cancelled so that the slots free at the next step), and an orderly shutdown. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "server.h"

/* How long a waiting handler sleeps between looks at its client's socket. */
#define POLL_S 0.05
/* Requests in flight get this long to finish after SIGINT / SIGTERM. */
#define ANSWER_S 2.0 /* then, the engine stopped, for the handlers still running to answer */

typedef struct {
    srv *s;
    struct MHD_Daemon *d;
    int in_flight;               /* requests begun and not completed (atomic) */
    long started;                /* time(): the model's "created" */
    int starting;                /* libmicrohttpd's messages are shown while the daemon starts */
} http;

typedef struct {
    http *h;
    struct MHD_Connection *conn;
    srv_endpoint ep;
    char method[16], path[128];
    double t0;
    srv_buf body;
    int too_large;
    int status;                  /* of the response queued; 0: none yet */
    int client_gone;
    srv_job *job;
    srv_buf pending;             /* streamed bytes not yet handed to libmicrohttpd */
    size_t pending_off;
    int stream_done;
    const char *cors_origin;     /* its Access-Control-Allow-Origin: "*", its Origin, or NULL: none */
} req;

void srv_options_defaults(srv_options *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 4;
    o->kv_cache = DT_KV_F32;
    o->queue = 64;
    o->max_body = (size_t)1 << 20;
    o->attention_max_tokens = 256;
    o->timeout_s = 30;
    o->drain_s = 10;
}

static srv_endpoint endpoint_of(const char *url) {
    if (!strcmp(url, "/")) return SRV_EP_PAGE;
    if (!strcmp(url, "/health")) return SRV_EP_HEALTH;
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11)) return SRV_EP_MODELS;
    if (!strcmp(url, "/metrics")) return SRV_EP_METRICS;
    if (!strcmp(url, "/v1/completions")) return SRV_EP_COMPLETIONS;
    if (!strcmp(url, "/v1/chat/completions")) return SRV_EP_CHAT;
    if (!strcmp(url, "/v1/difftrans/attention")) return SRV_EP_ATTENTION;
    return SRV_EP_OTHER;
}

/* ---------------------------------------------------------------- CORS */

/* scheme://host[:port] and nothing more, as a browser writes an Origin header: a path or a
 * trailing slash would never equal one, and the origin is echoed in a header, so only the
 * characters of a host and a port pass. */
static int origin_ok(const char *p, size_t n) {
    size_t k;
    if (n > 7 && !strncmp(p, "http://", 7)) k = 7;
    else if (n > 8 && !strncmp(p, "https://", 8)) k = 8;
    else return 0;
    for (size_t i = k; i < n; i++) {
        const char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
              c == ':' || c == '[' || c == ']'))
            return 0;
    }
    return 1;
}

/* The next element of a comma-separated list at *p (spaces around it left out); 0 at its end. */
static int next_elem(const char **p, const char **elem, size_t *n) {
    if (!*p) return 0;
    const char *end = strchr(*p, ',');
    const char *a = *p, *b = end ? end : *p + strlen(*p);
    while (a < b && *a == ' ') a++;
    while (b > a && b[-1] == ' ') b--;
    *elem = a;
    *n = (size_t)(b - a);
    *p = end ? end + 1 : NULL;
    return 1;
}

int srv_cors_check(const char *list, char *msg, size_t msg_n) {
    const char *p = list, *o;
    size_t n;
    while (next_elem(&p, &o, &n))
        if (!(n == 1 && *o == '*') && !origin_ok(o, n)) {
            snprintf(msg, msg_n, "'%.*s': expected * or an origin such as http://localhost:3000 (scheme://host[:port], "
                     "no path, no trailing slash)", (int)n, o);
            return -1;
        }
    return 0;
}

/* What Access-Control-Allow-Origin a request from origin gets: "*" when --cors allows any, the
 * origin itself when --cors names it, NULL otherwise (the browser then keeps the reply from the
 * page). */
static const char *cors_allow(const srv_options *opt, const char *origin) {
    const char *match = NULL;
    for (int i = 0; i < opt->n_cors; i++) {
        const char *p = opt->cors[i], *o;
        size_t n;
        while (next_elem(&p, &o, &n)) {
            if (n == 1 && *o == '*') return "*";
            if (origin && strlen(origin) == n && !strncasecmp(o, origin, n)) match = origin;
        }
    }
    return match;
}

static void add_cors(const req *r, struct MHD_Response *resp) {
    if (!r->h->s->opt.n_cors) return;
    if (r->cors_origin) MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->cors_origin);
    /* a reply that depends on the Origin must not be served from a cache to another origin */
    if (!r->cors_origin || strcmp(r->cors_origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
}

/* A list of header names as a preflight asks for them: tokens (RFC 9110 §5.6.2), commas, spaces. */
static int header_list_ok(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        const char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-_.,+ ", c)))
            return 0;
    }
    return n > 0 && n <= 2048;
}

/* The client closed its end (or the connection broke): nothing it asked for is wanted. */
static int client_gone(req *r) {
    if (r->client_gone) return 1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    int rc;
    do rc = poll(&p, 1, 0);
    while (rc < 0 && errno == EINTR);
    if (rc > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) r->client_gone = 1;
    return r->client_gone;
}

/* ---------------------------------------------------------------- responses */

static enum MHD_Result send_buffer(req *r, int status, const char *type, char *body, size_t len,
                                   enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
    if (!resp) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    add_cors(r, resp);
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 405) {
        const int post = r->ep == SRV_EP_COMPLETIONS || r->ep == SRV_EP_CHAT || r->ep == SRV_EP_ATTENTION;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, post ? "POST" : "GET, HEAD");
    }
    const enum MHD_Result rc = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    return rc;
}

static enum MHD_Result send_json(req *r, int status, char *json, size_t len) {
    if (!json) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                  "\"param\":null,\"code\":null}}";
        return send_buffer(r, 500, "application/json", (char *)oom, sizeof oom - 1, MHD_RESPMEM_PERSISTENT);
    }
    return send_buffer(r, status, "application/json", json, len, MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result send_error(req *r, const srv_err *e) {
    char *json = srv_err_json(e);
    return send_json(r, e->status, json, json ? strlen(json) : 0);
}

static enum MHD_Result send_cjson(req *r, int status, cJSON *root) {
    char *json = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return send_json(r, status, json, json ? strlen(json) : 0);
}

/* ---------------------------------------------------------------- the simple endpoints */

static int get_stats(srv *s, void *ctx) {
    dt_engine_get_stats(s->engine, ctx);
    return 0;
}

static enum MHD_Result do_health(req *r) {
    srv *s = r->h->s;
    dt_engine_stats st;
    srv_err e;
    const int up = srv_with_engine(s, get_stats, &st, &e) == 0;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "status", up ? "ok" : "shutting_down");
    if (up) {
        cJSON_AddNumberToObject(root, "slots_in_use", st.slots_in_use);
        cJSON_AddNumberToObject(root, "n_slots", st.n_slots);
        cJSON_AddNumberToObject(root, "queue_depth", st.queue_depth);
    }
    return send_cjson(r, up ? 200 : 503, root);
}

static cJSON *model_object(http *h) {
    const srv *s = h->s;
    const dt_config *c = &s->m->cfg;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", s->name);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)h->started);
    cJSON_AddStringToObject(o, "owned_by", "difftrans");
    cJSON *d = cJSON_AddObjectToObject(o, "difftrans");
    cJSON_AddStringToObject(d, "arch", dt_arch_name(c->arch));
    cJSON_AddNumberToObject(d, "parameters", (double)dt_config_param_count(c));
    cJSON_AddStringToObject(d, "quantization", dt_quant_scheme_name(dt_model_quant_scheme(s->m, NULL)));
    cJSON_AddNumberToObject(d, "context", s->ctx);
    cJSON_AddNumberToObject(d, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(d, "layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(d, "heads", c->arch == DT_ARCH_LLAMA ? c->num_attention_heads
                                                                 : c->num_attention_heads / 2);
    return o;
}

static enum MHD_Result do_models(req *r, const char *url) {
    srv_err e;
    if (!strncmp(url, "/v1/models/", 11)) {
        if (strcmp(url + 11, r->h->s->name)) {
            /* OpenAI's type and code: the SDKs and clients branch on them, not on the status alone */
            srv_fail(&e, 404, "invalid_request_error", "model_not_found", "model", "The model '%s' does not exist: "
                     "this server serves '%s'", url + 11, r->h->s->name);
            return send_error(r, &e);
        }
        return send_cjson(r, 200, model_object(r->h));
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(root, "data");
    cJSON_AddItemToArray(data, model_object(r->h));
    return send_cjson(r, 200, root);
}

static enum MHD_Result do_metrics(req *r) {
    srv *s = r->h->s;
    dt_engine_stats st;
    srv_err e;
    if (srv_with_engine(s, get_stats, &st, &e) != 0) memset(&st, 0, sizeof st);
    size_t len = 0;
    char *text = srv_metrics_text(s->metrics, &st, &len);
    if (!text) return send_json(r, 500, NULL, 0);
    return send_buffer(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result do_attention(req *r) {
    char *json;
    size_t len;
    srv_err e;
    if (srv_attention(r->h->s, r->body.p ? r->body.p : "", r->body.n, &json, &len, &e) != 0) return send_error(r, &e);
    return send_json(r, 200, json, len);
}

/* ---------------------------------------------------------------- completions */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    req *r = cls;
    (void)pos;
    for (;;) {
        if (r->pending_off < r->pending.n) {
            size_t n = r->pending.n - r->pending_off;
            if (n > max) n = max;
            memcpy(buf, r->pending.p + r->pending_off, n);
            r->pending_off += n;
            return (ssize_t)n;
        }
        r->pending.n = r->pending_off = 0;
        if (r->stream_done) return MHD_CONTENT_READER_END_OF_STREAM;
        if (srv_job_stream(r->job, &r->pending)) r->stream_done = 1;
        if (r->pending.failed) {
            srv_job_cancel(r->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (r->pending.n) continue;
        if (client_gone(r)) {
            srv_job_cancel(r->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        srv_job_pump(r->job, POLL_S);
    }
}

static enum MHD_Result do_completion(req *r, srv_job_kind kind) {
    srv_err e;
    if (srv_job_create(r->h->s, kind, r->body.p ? r->body.p : "", r->body.n, &r->job, &e) != 0)
        return send_error(r, &e);
    if (srv_job_streaming(r->job)) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, r,
                                                                      NULL);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        add_cors(r, resp);
        const enum MHD_Result rc = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        r->status = 200;
        return rc;
    }
    while (!srv_job_pump(r->job, POLL_S))
        if (client_gone(r)) {
            srv_job_cancel(r->job);
            r->status = 499; /* nginx's "client closed request", for the log and the metrics */
            return MHD_NO;
        }
    if (srv_job_error(r->job, &e) != 0) return send_error(r, &e);
    size_t len = 0;
    char *json = srv_job_reply(r->job, &len);
    return send_json(r, 200, json, len);
}

/* ---------------------------------------------------------------- routing */

/* A browser asks before a cross-origin POST with a JSON body or an Authorization header (and the
 * OpenAI SDK's x-stainless-* headers): without a 2xx naming the method and every header, the page
 * never sends the request. The preflight carries no key, so it is answered before the key is
 * checked; the request that follows is checked as any other. */
static enum MHD_Result do_preflight(req *r) {
    if (!r->cors_origin) {
        const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
        srv_err e;
        if (r->h->s->opt.n_cors)
            srv_fail(&e, 403, "invalid_request_error", "origin_not_allowed", NULL,
                     "cross-origin request from '%s': not an origin --cors allows", origin ? origin : "(none)");
        else
            srv_fail(&e, 403, "invalid_request_error", "origin_not_allowed", NULL,
                     "cross-origin request from '%s': this server answers none (start it with --cors ORIGIN)",
                     origin ? origin : "(none)");
        return send_error(r, &e);
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    add_cors(r, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    const char *want = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            want && header_list_ok(want) ? want : "Authorization, Content-Type");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    const enum MHD_Result rc = MHD_queue_response(r->conn, MHD_HTTP_NO_CONTENT, resp);
    MHD_destroy_response(resp);
    r->status = MHD_HTTP_NO_CONTENT;
    return rc;
}

static int authorized(req *r) {
    const char *key = r->h->s->opt.api_key;
    if (!key || !*key) return 1;
    const char *got = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!got || strncasecmp(got, "Bearer ", 7)) return 0; /* the scheme is case-insensitive (RFC 7235 §2.1) */
    got += 7;
    /* compared in time that does not depend on where they differ */
    const size_t n = strlen(key), m = strlen(got);
    unsigned char diff = n != m;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(key[i] ^ (i < m ? got[i] : 0));
    return diff == 0;
}

static enum MHD_Result dispatch(req *r, const char *url) {
    srv_err e;
    if (r->ep == SRV_EP_OTHER) {
        srv_fail(&e, 404, "invalid_request_error", "unknown_url", NULL, "Invalid URL (%s %s): no such path "
                 "(served: /, /health, /metrics, /v1/models, /v1/completions, /v1/chat/completions, "
                 "/v1/difftrans/attention)", r->method, r->path);
        return send_error(r, &e);
    }
    if (!strcmp(r->method, "OPTIONS") &&
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Method"))
        return do_preflight(r);
    const int needs_key = r->ep != SRV_EP_PAGE && r->ep != SRV_EP_HEALTH;
    if (needs_key && !authorized(r)) {
        /* OpenAI's type for a missing or wrong key; the SDKs tell it by the status (AuthenticationError) */
        srv_fail(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                 "a missing or wrong API key: send the server's --api-key as 'Authorization: Bearer KEY'");
        return send_error(r, &e);
    }
    const int post = r->ep == SRV_EP_COMPLETIONS || r->ep == SRV_EP_CHAT || r->ep == SRV_EP_ATTENTION;
    const int method_ok = post ? !strcmp(r->method, "POST") : !strcmp(r->method, "GET") || !strcmp(r->method, "HEAD");
    if (!method_ok) {
        srv_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "Invalid method for URL (%s %s): use %s",
                 r->method, r->path, post ? "POST" : "GET");
        return send_error(r, &e);
    }
    if (r->too_large) {
        srv_fail(&e, 413, "invalid_request_error", "body_too_large", NULL,
                 "the request body is larger than the server's limit of %zu bytes (--max-body)",
                 r->h->s->opt.max_body);
        return send_error(r, &e);
    }
    switch (r->ep) {
    case SRV_EP_PAGE:
        return send_buffer(r, 200, "text/html; charset=utf-8", (char *)dt_page_html, dt_page_html_len,
                           MHD_RESPMEM_PERSISTENT);
    case SRV_EP_HEALTH: return do_health(r);
    case SRV_EP_MODELS: return do_models(r, url);
    case SRV_EP_METRICS: return do_metrics(r);
    case SRV_EP_COMPLETIONS: return do_completion(r, SRV_JOB_COMPLETION);
    case SRV_EP_CHAT: return do_completion(r, SRV_JOB_CHAT);
    case SRV_EP_ATTENTION: return do_attention(r);
    default: return MHD_NO;
    }
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls) {
    http *h = cls;
    req *r = *con_cls;
    (void)version;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->h = h;
        r->conn = conn;
        r->t0 = dt_seconds();
        r->ep = endpoint_of(url);
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%s", url);
        r->cors_origin = cors_allow(&h->s->opt, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"));
        __atomic_add_fetch(&h->in_flight, 1, __ATOMIC_SEQ_CST);
        *con_cls = r;
        /* A body announced larger than the limit is not kept. It is refused before it is sent
         * only to a client that asked "Expect: 100-continue" (and then sends none of it): one
         * that is already sending would find the connection closed under its write and never
         * read the reply, so its body is read and dropped and the 413 comes after it. */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
        if (cl && strtoull(cl, NULL, 10) > h->s->opt.max_body) {
            r->too_large = 1;
            if (expect && !strcasecmp(expect, "100-continue")) return dispatch(r, url);
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!r->too_large) {
            if (r->body.n + *upload_data_size > h->s->opt.max_body) {
                r->too_large = 1;
                srv_buf_free(&r->body);
            } else srv_buf_put(&r->body, upload_data, *upload_data_size);
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->status) return MHD_YES; /* answered already (a body too large) */
    if (r->body.failed) {
        srv_err e;
        srv_fail(&e, 500, "server_error", NULL, NULL, "out of memory for the request body");
        return send_error(r, &e);
    }
    return dispatch(r, url);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    http *h = cls;
    req *r = *con_cls;
    (void)conn;
    if (!r) return;
    long prompt = 0, completion = 0;
    if (r->job) srv_job_tokens(r->job, &prompt, &completion);
    const int gone = r->client_gone || (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && r->status == 200);
    const int status = r->status ? r->status : 499;
    srv_metrics_request(h->s->metrics, r->ep, status);
    if (!h->s->opt.quiet)
        fprintf(stderr, "%s %s %d %ld+%ld tokens %.0f ms%s\n", r->method, r->path, status, prompt, completion,
                (dt_seconds() - r->t0) * 1e3, gone ? " (client gone)" : "");
    srv_job_free(r->job);
    srv_buf_free(&r->body);
    srv_buf_free(&r->pending);
    free(r);
    *con_cls = NULL;
    __atomic_sub_fetch(&h->in_flight, 1, __ATOMIC_SEQ_CST);
}

/* ---------------------------------------------------------------- the daemon */

/* libmicrohttpd's own messages: why the daemon could not start is worth showing; once it runs they
 * are about single connections (a client gone mid-stream), which the request log already says. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const http *h = cls;
    if (!h->starting) return;
    fputs("difftrans serve: libmicrohttpd: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* Waits up to seconds for the requests in flight to end; a second signal ends the wait. */
static void drain(http *h, double seconds, const sigset_t *sigs) {
    const double end = dt_seconds() + seconds;
    while (__atomic_load_n(&h->in_flight, __ATOMIC_SEQ_CST) > 0 && dt_seconds() < end) {
        const struct timespec ts = {0, 20 * 1000 * 1000};
        if (sigtimedwait(sigs, NULL, &ts) > 0) break;
    }
}

int srv_serve(srv *s, const char *arch, dt_error *err) {
    http h = {.s = s, .started = (long)time(NULL)};
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    const int gai = getaddrinfo(s->opt.host, NULL, &hints, &ai);
    if (gai != 0) return dt_fail(err, "host '%s': %s", s->opt.host, gai_strerror(gai));
    struct sockaddr_storage addr;
    memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
    const int v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (v6) ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)s->opt.port);
    else ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)s->opt.port);

    /* every connection is a thread that may wait on the engine: enough for the queue and the
     * slots, with room for health checks and idle keep-alive connections. A thread that waits costs
     * its stack's touched pages, not the 8 MiB reserved: 512 by default, since clients that open
     * connections and send nothing (or a byte at a time) hold one each until --timeout */
    unsigned limit = s->opt.max_connections > 0 ? (unsigned)s->opt.max_connections
                                                 : (unsigned)(s->opt.queue + s->n_slots) * 2 + 64;
    if (s->opt.max_connections <= 0 && limit < 512) limit = 512;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    if (v6) flags |= MHD_USE_IPv6;
    flags |= MHD_USE_ERROR_LOG;
    h.starting = 1;
    h.d = MHD_start_daemon(flags, (uint16_t)s->opt.port, NULL, NULL, handler, &h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                           &h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT, limit,
                           MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->opt.timeout_s, MHD_OPTION_NOTIFY_COMPLETED,
                           completed, &h, MHD_OPTION_END);
    __atomic_store_n(&h.starting, 0, __ATOMIC_SEQ_CST);
    if (!h.d)
        return dt_fail_io(err, "cannot listen on %s port %d (in use, or not an address of this machine?)",
                          s->opt.host, s->opt.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h.d, MHD_DAEMON_INFO_BIND_PORT);
    const int port = di ? di->port : s->opt.port;
    printf("difftrans serve: listening on http://%s%s%s:%d (model %s, %s, %d slots × %d tokens)\n", v6 ? "[" : "",
           s->opt.host, v6 ? "]" : "", port, s->name, arch, s->n_slots, s->ctx);
    fflush(stdout);

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {
    }
    if (!s->opt.quiet)
        fprintf(stderr,
                "difftrans serve: %s: no new connections; finishing the requests in flight (at most %.0f s, then "
                "%.0f s for what is left to answer)\n",
                strsignal(sig), (double)s->opt.drain_s, ANSWER_S);
    const MHD_socket ls = MHD_quiesce_daemon(h.d);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    drain(&h, (double)s->opt.drain_s, &sigs);
    /* what is still running ends now: its last event says cancelled, and its handler answers */
    pthread_rwlock_wrlock(&s->engine_lock);
    s->engine_closed = 1;
    dt_engine_stop(s->engine);
    pthread_rwlock_unlock(&s->engine_lock);
    drain(&h, ANSWER_S, &sigs);
    MHD_stop_daemon(h.d);
    if (!s->opt.quiet) fprintf(stderr, "difftrans serve: stopped\n");
    return 0;
}
