/* server.h — `difftrans serve`: the OpenAI-compatible HTTP front end of the serving engine
 * (include/difftrans_serve.h). A client of the public API alone (difftrans.h, difftrans_serve.h),
 * linked into the difftrans binary only: the library never sees libmicrohttpd.
 *
 *   text.c         growable strings, UTF-8 repair, a sequence's text as its tokens come, stop strings
 *   chat.c         chat templates: ChatML, Llama 3, Llama 2, Mistral (detection and rendering)
 *   completions.c  /v1/completions and /v1/chat/completions: request → engine requests → reply
 *   attention.c    /v1/difftrans/attention: the softmax maps of a prompt
 *   metrics.c      /metrics: Prometheus text
 *   http.c         the libmicrohttpd daemon: routing, auth, limits, streaming, shutdown
 */
#ifndef DT_SERVER_H
#define DT_SERVER_H
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "difftrans.h"
#include "difftrans_serve.h"

/* ---------------------------------------------------------------- text (text.c) */

typedef struct {
    char *p;                     /* NUL-terminated when n > 0 or after any put */
    size_t n, cap;
    int failed;                  /* an allocation failed: the contents are incomplete */
} srv_buf;

void srv_buf_put(srv_buf *b, const char *s, size_t n);
void srv_buf_puts(srv_buf *b, const char *s);
void srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void srv_buf_free(srv_buf *b);
/* The contents (malloc'd, the buffer emptied), or NULL when an allocation failed. */
char *srv_buf_take(srv_buf *b, size_t *len);

/* s[0..n) as valid UTF-8, every ill-formed sequence replaced by U+FFFD (the maximal-subpart rule
 * of Unicode §3.9, as the tokenizer's decoder does), and every NUL byte too: cJSON's strings end
 * at the first NUL, so a NUL in a reply would cut its text short (its bytes stay in logprobs'
 * `bytes`). malloc'd, NUL-terminated; NULL when out of memory. */
char *srv_utf8_repair(const char *s, size_t n, size_t *out_len);
/* The same, appended to b. */
void srv_buf_put_utf8(srv_buf *b, const char *s, size_t n);
/* 1 when s[0..n) is well-formed UTF-8 (what JSON text must be, RFC 8259 §8.1). */
int srv_utf8_valid(const char *s, size_t n);
/* 1 when a string of the JSON text body[0..n) holds the escape \u0000, which cJSON would cut the
 * string at: such requests are refused rather than read short. */
int srv_json_has_nul(const char *body, size_t n);
#define SRV_NUL_REFUSED "a string in the request holds a NUL character (\\u0000), which this server does not take"
/* Characters (code points) in valid UTF-8 s[0..n). */
size_t srv_utf8_chars(const char *s, size_t n);

/* Bytes of the longest common prefix of a[0..na) and b[0..nb) (valid UTF-8) that ends where a
 * character ends in both. */
size_t srv_utf8_common(const char *a, size_t na, const char *b, size_t nb);

/* The character a token's first byte is in, from prev[0..n_prev), the text decoded before it, and
 * cur[0..n_cur), with it: the first character the token changed, or, when it changed none, the
 * U+FFFD at prev's end (a character cut short, which the token goes on) or prev's end. */
size_t srv_token_start(const char *prev, size_t n_prev, const char *cur, size_t n_cur);

/* A token sequence's text as its tokens come (a prompt's, then a completion's), through the
 * model's dt_tok_stream (special tokens left out; ids that are no token add none): after each token
 * cur holds the text it made final (n_fresh bytes), then the rest as the text would end if the
 * tokens ended there, both valid UTF-8 (srv_utf8_repair: a byte-level model's bytes, NULs). So a
 * token costs its own text, not the sequence's. Its offset (logprobs' text_offset, as OpenAI and
 * vLLM count it) is the character of the sequence's text its first byte is in: a token that
 * completes or goes on with a character begins where that character does, one that writes nothing
 * at the end, and a token whose text depends on those before it (Metaspace's ▁, a space only after
 * the first token) is placed by the text they make together, not its own alone. A token whose own
 * bytes (dt_tok_token_bytes) go on with a character the tokens before it left open begins where
 * that character does even while the text cannot show it yet.
 * A run of ByteFallback tokens (<0xXX>) is placed by its bytes, not by the text while it lasts: it
 * decodes as its characters when its bytes are valid UTF-8 and as one U+FFFD a token when they are
 * not, which only the token that ends it (or the end) decides. Until then its tokens are placed as
 * if it stayed valid (the character their byte is in; a token that writes nothing inside it where
 * the next byte goes); when it ends, every token pushed since it began is placed again, and
 * revised_first, n_revised, revised say where (an invalid run: its k-th byte at its k-th U+FFFD). */
typedef struct {
    dt_tok_stream *ts;
    const dt_tok *tok;           /* the model's tokenizer (NULL: bytes), for the tokens' own bytes */
    srv_buf cur;                 /* the last token's final text (n_fresh bytes), then the rest */
    size_t n_fresh;
    srv_buf prev;                /* the rest before the last token */
    size_t chars;                /* characters of final text so far, the last token's included */
    int utf8_need;               /* continuation bytes the character the tokens' own bytes left open lacks */
    size_t open_char;            /* that character's offset */
    size_t n_pushed;             /* tokens pushed */
    int run_open;                /* a ByteFallback run has begun and no token has ended it */
    srv_buf run;                 /* its bytes */
    size_t run_start;            /* the character it begins at */
    size_t run_first;            /* the first token pushed since it began (an index of the pushes) */
    size_t *run_at;              /* [n_pushed - run_first]: the run's bytes before each of those tokens */
    size_t cap_run_at;
    size_t revised_first, n_revised; /* the tokens the last push or end placed again, and where */
    size_t *revised;
    size_t cap_revised;
} srv_text;
int srv_text_init(srv_text *t, const dt_model *m, dt_error *err);
void srv_text_free(srv_text *t);
/* The next token: *offset its character (for a token of a ByteFallback run, until the run ends).
 * -1 only when out of memory. */
int srv_text_push(srv_text *t, int id, size_t *offset, dt_error *err);
/* The tokens have ended: cur's final text is the rest, and nothing is left (a run still open ends:
 * its tokens are placed again). */
int srv_text_end(srv_text *t, dt_error *err);
static inline const char *srv_text_rest(const srv_text *t) { return t->cur.p ? t->cur.p + t->n_fresh : ""; }
static inline size_t srv_text_rest_len(const srv_text *t) { return t->cur.n - t->n_fresh; }
/* 1 while the offset of push `index` may still change (it is in a ByteFallback run not yet ended). */
static inline int srv_text_provisional(const srv_text *t, size_t index) {
    return t->run_open && index >= t->run_first && index < t->n_pushed;
}
/* The last push's or end's new offsets into off[0..n), indexed by push (those past n left out). */
void srv_text_revise(const srv_text *t, size_t *off, size_t n);
/* Where each of ids[0..n), the tokens of the text prompt text[0..len), begins in that text as it was
 * sent (the echo of a text prompt is the text itself, which its decoding need not be: special
 * tokens are left out of it, and a normalizer may have changed it), in characters. The special
 * tokens the text holds (one the tokenizer added, a BOS, holds none, even where the text begins
 * with its text) are at their text; each piece of text between them, which the encoder normalised
 * on its own, is lined up with its tokens' decoding (seg_line_up): exact where a normalizer added
 * text at its start (Prepend: where the text it precedes begins), took whitespace from its ends
 * (Strip) or changed characters one for one (Lowercase, NFC, a Replace the decoder does not undo);
 * where one changed their number (NFKC's "ﬁ" → "fi"), the piece's tokens up to the change may be off by the
 * difference. Never back, never past the text's end. -1 only when out of memory. */
int srv_text_place(const dt_model *m, const char *text, size_t len, const int *ids, size_t n, size_t *off,
                   dt_error *err);

/* How much of a completion's final text text[0..n) can be sent now: what could not still be the
 * start of a stop string (dt_stop_holdback). final (no token comes): all of it. */
size_t srv_text_sendable(const char *text, size_t n, const char *const *stops, int k, int final);

/* ---------------------------------------------------------------- chat templates (chat.c) */

typedef enum { SRV_CHAT_NONE = 0, SRV_CHAT_CHATML, SRV_CHAT_LLAMA3, SRV_CHAT_LLAMA2, SRV_CHAT_MISTRAL } srv_chat_kind;

typedef struct {
    const char *role;            /* "system" | "user" | "assistant" */
    const char *content;
    size_t len;
} srv_chat_msg;

/* "chatml" | "llama3" | "llama2" | "mistral"; -1 for anything else. */
int srv_chat_parse_name(const char *name, srv_chat_kind *out);
const char *srv_chat_name(srv_chat_kind k);
/* The form of tokenizer_config.json's chat_template (a string, or a list of named templates whose
 * "default" counts): ChatML (<|im_start|>), Llama 3 (<|start_header_id|>), Llama 2 ([INST] with
 * <<SYS>>) or Mistral ([INST] without); SRV_CHAT_NONE when there is none or it is another form. */
srv_chat_kind srv_chat_detect(const char *tokenizer_config, size_t len);
/* The prompt the template makes of msgs[0..n), ending where the assistant's reply begins. bos /
 * eos: the tokenizer's own strings (for the forms that write them; NULL: "<s>", "</s>").
 * -1 with a message in msg[msg_n] for a conversation the template refuses (Llama 2 / Mistral:
 * roles must alternate user, assistant, ... after an optional system message, ending with user). */
int srv_chat_render(srv_chat_kind k, const srv_chat_msg *msgs, int n, const char *bos, const char *eos,
                    srv_buf *out, char *msg, size_t msg_n);
/* The token that ends an assistant turn ("<|im_end|>", "<|eot_id|>", "</s>"). */
const char *srv_chat_end_token(srv_chat_kind k);

/* ---------------------------------------------------------------- the server */

#define SRV_MAX_CORS 16

typedef struct {
    const char *host;            /* [127.0.0.1] */
    int port;                    /* 0: any free port [8080] */
    int parallel;                /* engine slots [4] */
    int ctx;                     /* tokens per slot [model's max_position_embeddings] */
    dt_kv_dtype kv_cache;
    const char *api_key;         /* NULL: none needed */
    int threads;                 /* 0: OpenMP's default */
    int queue;                   /* [64] */
    const char *chat_template;   /* NULL: detect from tokenizer_config.json */
    size_t max_body;             /* [1 MiB] */
    int attention_max_tokens;    /* [256] */
    const char *model_name;      /* [the directory's basename] */
    int max_connections;         /* 0: max(512, 2·(queue + parallel) + 64) */
    int timeout_s;               /* a connection silent this long is closed [30] */
    int drain_s;                 /* seconds the requests in flight get after SIGINT / SIGTERM [10] */
    /* --cors: the origins whose pages may call the server (each a comma-separated list of
     * scheme://host[:port] or "*"); none: cross-origin requests get no CORS headers */
    const char *cors[SRV_MAX_CORS];
    int n_cors;
    int quiet;
} srv_options;

/* 0 when every element of the comma-separated list is "*" or an origin (http:// or https://, a
 * host, an optional port, nothing after); -1 with what is wrong in msg otherwise. */
int srv_cors_check(const char *list, char *msg, size_t msg_n);

void srv_options_defaults(srv_options *o);

typedef struct srv_metrics srv_metrics;

typedef struct srv {
    const dt_model *m;
    srv_options opt;
    char name[256];              /* the served model name */
    int ctx, n_slots;
    srv_chat_kind chat;          /* SRV_CHAT_NONE: chat requests are refused */
    int chat_end_id;             /* the template's end token in the vocabulary, or -1 */
    char bos[64], eos[64];       /* the tokenizer's strings of them ("" when none) */
    char fingerprint[32];        /* replies' system_fingerprint (srv_set_fingerprint) */
    /* The engine, and whether it may still be used: readers hold engine_lock (shared) around every
     * call that needs the engine alive (submit, stats, exclusive); shutdown takes it exclusively,
     * sets engine_closed and frees the engine. Request handles stay valid after that. */
    dt_engine *engine;
    pthread_rwlock_t engine_lock;
    int engine_closed;
    srv_metrics *metrics;
    uint64_t next_id;            /* request ids (atomic) */
} srv;

/* An error reply: the status and OpenAI's error object. */
typedef struct {
    int status;
    const char *type;            /* "invalid_request_error", "server_error", ... */
    const char *code;            /* NULL: null */
    char param[64];              /* "": null */
    char message[1200];
} srv_err;

int srv_fail(srv_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* 400 invalid_request_error. */
int srv_bad(srv_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The error of a failed library call: INVALID → 400, BUSY → 503 queue_full, NOMEM and the rest →
 * 500. */
int srv_fail_dt(srv_err *e, const dt_error *err, const char *param);
/* A request body as JSON: one value, nothing after it but white space (RFC 8259's JSON-text;
 * cJSON alone takes '{"max_tokens": 5} {"n": 9}' as its first object). NULL with a 400 in e when it
 * is not. */
struct cJSON *srv_json_parse(const char *body, size_t len, srv_err *e);
/* {"error": {...}} (malloc'd; NULL when out of memory). */
char *srv_err_json(const srv_err *e);

/* s->fingerprint from what the server computes with (architecture, quantisation, KV-cache type, slots,
 * context, sizes): OpenAI's system_fingerprint, which tells a client using seed that replies may
 * differ because the backend did. */
void srv_set_fingerprint(srv *s);
/* s->chat_end_id (the end token of s->chat's template, -1 when the vocabulary lacks it or there is no
 * chat), s->bos and s->eos (their texts) from s->m's tokenizer. */
void srv_set_vocab_texts(srv *s);

/* Runs fn with the engine alive (engine_lock held shared): -1 with 503 when the server is
 * shutting down. */
int srv_with_engine(srv *s, int (*fn)(srv *s, void *ctx), void *ctx, srv_err *e);

/* A token's text: its own bytes as dt_tok_token_bytes gives them (a Metaspace token with its
 * space, special tokens written out; an id that is no token, e.g. a byte-level model's past 255,
 * as "<id>"), made valid UTF-8, malloc'd. NULL when out of memory. */
char *srv_token_text(const dt_model *m, int id);

/* ---------------------------------------------------------------- completions (completions.c) */

typedef struct srv_job srv_job;
typedef enum { SRV_JOB_COMPLETION = 0, SRV_JOB_CHAT = 1 } srv_job_kind;

/* Parses a request body, tokenises, checks it and submits its choices to the engine. */
int srv_job_create(srv *s, srv_job_kind kind, const char *body, size_t len, srv_job **out, srv_err *e);
int srv_job_streaming(const srv_job *j);
/* Reads engine events for up to wait_s seconds (returns at the first progress); 1 when every
 * choice has ended. */
int srv_job_pump(srv_job *j, double wait_s);
/* Streaming: the SSE chunks due now (text that became sendable, ends, and after the last choice
 * the usage chunk when asked for, and [DONE]) appended to out; 1 once [DONE] has been written. */
int srv_job_stream(srv_job *j, srv_buf *out);
/* -1 with the error into e when the engine ended one of the job's choices with DT_STOP_ERROR (the
 * model's logits not finite): a reply is that error (streaming: an {"error": ...} event, which the
 * OpenAI SDKs raise, and no [DONE]). */
int srv_job_error(const srv_job *j, srv_err *e);
/* The whole reply of a job that has ended (malloc'd JSON). */
char *srv_job_reply(srv_job *j, size_t *len);
/* Ends the job's requests at the engine's next step (the client went away). */
void srv_job_cancel(srv_job *j);
void srv_job_tokens(const srv_job *j, long *prompt, long *completion);
void srv_job_free(srv_job *j);

/* ---------------------------------------------------------------- attention (attention.c) */

int srv_attention(srv *s, const char *body, size_t len, char **json, size_t *json_len, srv_err *e);

/* ---------------------------------------------------------------- metrics (metrics.c) */

typedef enum {
    SRV_EP_PAGE = 0,
    SRV_EP_HEALTH,
    SRV_EP_MODELS,
    SRV_EP_METRICS,
    SRV_EP_COMPLETIONS,
    SRV_EP_CHAT,
    SRV_EP_ATTENTION,
    SRV_EP_OTHER,
    SRV_EP_COUNT
} srv_endpoint;

srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *mt);
void srv_metrics_request(srv_metrics *mt, srv_endpoint ep, int status);
void srv_metrics_tokens(srv_metrics *mt, long prompt, long generated);
void srv_metrics_ttft(srv_metrics *mt, double seconds);
void srv_metrics_token_interval(srv_metrics *mt, double seconds);
/* The exposition (text format 0.0.4), malloc'd; the engine's gauges from st. */
char *srv_metrics_text(srv_metrics *mt, const dt_engine_stats *st, size_t *len);

/* ---------------------------------------------------------------- http (http.c) */

/* Serves until SIGINT / SIGTERM (which the caller has blocked in every thread: the main thread
 * waits for them with sigwait), then stops accepting, lets requests in flight finish for up to
 * opt.drain_s, frees the engine (ending the rest: 503 shutting_down) and returns 0. -1 with a message in err when the
 * daemon cannot start. The listening line goes to stdout. */
int srv_serve(srv *s, const char *arch, dt_error *err);

/* The page at /, built into the binary from server/page.html. */
extern const unsigned char dt_page_html[];
extern const size_t dt_page_html_len;

#endif
