/* fuzz_request.c — a request body from anyone to the server's OpenAI endpoints (server/):
 * /v1/completions, /v1/chat/completions and /v1/difftrans/attention, as http.c drives them. The
 * first byte picks the endpoint, the model (a SentencePiece-like tokenizer, bytes, or a byte-level
 * tokenizer whose special tokens a prompt's text may hold) and the chat template; the rest is the
 * body. A request is refused with an error object of status 400..599, or runs to its end on a small
 * DIFF model through the serving engine: streamed, every server-sent event and the [DONE] that ends
 * it; whole, a reply; either way JSON that parses. A completion's choice has text_offsets that never
 * go back nor past its text, and with echo of a text prompt its text begins with that prompt as sent,
 * the prompt's tokens at their text in it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "difftrans.h"
#include "difftrans_serve.h"
#include "fuzz_util.h"
#include "server.h"

enum { MODELS = 3, CTX = 96, MAX_CHOICES = 64 };

static dt_model models[MODELS]; /* 0: the llama2_like fixture's tokenizer, 1: bytes, 2: llama3_like's */
static srv servers[MODELS][5];  /* by chat template (SRV_CHAT_NONE .. SRV_CHAT_MISTRAL) */
static dt_engine *engines[MODELS];
static srv_metrics *metrics;

static void must(int ok, const char *what, const dt_error *err) {
    if (ok) return;
    fprintf(stderr, "fuzz_request: %s: %s\n", what, err ? err->msg : "failed");
    abort();
}

static void setup(void) {
    dt_error err;
    metrics = srv_metrics_new();
    must(metrics != NULL, "metrics", NULL);
    for (int k = 0; k < MODELS; k++) {
        dt_config c;
        must(dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &err) == 0, "preset", &err);
        c.hidden_size = 32;
        c.num_attention_heads = 4;
        c.num_key_value_heads = 4;
        c.head_dim = 8;
        c.intermediate_size = 48;
        c.num_hidden_layers = 1;
        c.max_position_embeddings = CTX;
        c.vocab_size = k == 1 ? 256 : 600; /* 600: ids past the tokenizers' 592 and 539 */
        dt_model *m = &models[k];
        must(dt_model_create(m, &c, &err) == 0, "model", &err);
        dt_model_init_random(m, 7);
        const char *tokenizer = k == 0 ? FUZZ_TOKENIZERS "/llama2_like.json"
                                : k == 2 ? FUZZ_TOKENIZERS "/llama3_like.json" : NULL;
        if (tokenizer) must(dt_model_set_tokenizer(m, tokenizer, &err) == 0, tokenizer, &err);
        dt_engine_options eo;
        dt_engine_defaults(&eo);
        eo.n_slots = 2;
        eo.ctx = CTX;
        eo.max_queue = 6;
        engines[k] = dt_engine_create(m, &eo, &err);
        must(engines[k] != NULL, "engine", &err);
        for (int chat = 0; chat < 5; chat++) {
            srv *s = &servers[k][chat];
            s->opt.queue = eo.max_queue;
            s->opt.attention_max_tokens = 16;
            s->m = m;
            snprintf(s->name, sizeof s->name, "fuzz");
            s->ctx = CTX;
            s->n_slots = eo.n_slots;
            s->chat = (srv_chat_kind)chat;
            srv_set_vocab_texts(s);
            s->engine = engines[k];
            s->metrics = metrics;
            must(pthread_rwlock_init(&s->engine_lock, NULL) == 0, "lock", NULL);
        }
    }
}

static void expect_json(const char *p, size_t n) {
    cJSON *j = cJSON_ParseWithLength(p, n);
    if (!j) abort();
    cJSON_Delete(j);
}

static void expect_error(const srv_err *e) {
    if (e->status < 400 || e->status > 599) abort();
    char *j = srv_err_json(e);
    if (!j) abort(); /* out of memory: not with these sizes */
    expect_json(j, strlen(j));
    free(j);
}

/* What a completion's choices are held to: per choice (by index), the text so far (a stream's
 * pieces joined), the last text_offset and the largest (checked against the whole text at the end),
 * and the prompt as sent that an echo of a text prompt begins with. */
typedef struct {
    srv_buf text[MAX_CHOICES];
    double last[MAX_CHOICES], max[MAX_CHOICES];
    size_t entries[MAX_CHOICES]; /* logprobs entries so far */
    const cJSON *prompt; /* the request's prompt when it is echoed and text (a string or strings) */
    int n;               /* the request's n: choice i is of prompt i / n */
} oracle;

static void oracle_init(oracle *o, const cJSON *req) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < MAX_CHOICES; i++) o->last[i] = o->max[i] = -1;
    o->n = 1;
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(req, "n"), *echo = cJSON_GetObjectItemCaseSensitive(req, "echo");
    if (cJSON_IsNumber(n) && n->valuedouble >= 1) o->n = (int)n->valuedouble;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(req, "prompt");
    if (cJSON_IsTrue(echo) && (cJSON_IsString(p) || (cJSON_IsArray(p) && cJSON_IsString(p->child)))) o->prompt = p;
}

/* The text prompt choice i echoes, or NULL. */
static const char *oracle_prompt(const oracle *o, int i) {
    const cJSON *p = !o->prompt                 ? NULL
                     : cJSON_IsString(o->prompt) ? o->prompt
                                                 : cJSON_GetArrayItem(o->prompt, i / o->n);
    return cJSON_IsString(p) ? p->valuestring : NULL;
}

/* The bytes of character c of the NUL-terminated s ("" past its end). */
static const char *char_at(const char *s, size_t c, size_t *len) {
    size_t i = 0;
    for (; s[i] && c > 0; c--)
        for (i++; ((unsigned char)s[i] & 0xC0) == 0x80; i++) {}
    size_t n = s[i] ? 1 : 0;
    while (s[i] && ((unsigned char)s[i + n] & 0xC0) == 0x80) n++;
    *len = n;
    return s + i;
}

/* An echoed text prompt's token at an offset inside it is at its own text: a token whose text begins
 * with a character that no normaliser or decoder of these models adds or changes (not a space, which
 * Prepend adds and ▁ decodes as, nor U+FFFD, a piece of a character) finds that character there,
 * unless it is the first, a BOS the tokenizer added where the text may begin with anything. */
static void oracle_place(const oracle *o, int i, const cJSON *token, double offset) {
    const char *sent = oracle_prompt(o, i);
    if (!sent || !cJSON_IsString(token) || o->entries[i] == 0) return;
    const char *t = token->valuestring;
    size_t tl = 0, cl;
    while (t[tl] && (tl == 0 || ((unsigned char)t[tl] & 0xC0) == 0x80)) tl++;
    if (tl == 0 || t[0] == ' ' || (tl == 3 && !memcmp(t, "\xEF\xBF\xBD", 3))) return;
    if (offset >= (double)srv_utf8_chars(sent, strlen(sent))) return; /* the completion's */
    const char *c = char_at(sent, (size_t)offset, &cl);
    if (cl != tl || memcmp(c, t, tl)) abort(); /* a token not where its text is in the prompt */
}

/* One choice object of a reply or a chunk: its text appended, its text_offsets checked in order. */
static void oracle_choice(oracle *o, const cJSON *ch) {
    const cJSON *index = cJSON_GetObjectItemCaseSensitive(ch, "index");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(ch, "text");
    if (!cJSON_IsNumber(index) || !cJSON_IsString(text)) abort();
    const int i = (int)index->valuedouble;
    if (i < 0) abort();
    if (i >= MAX_CHOICES) return;
    srv_buf_puts(&o->text[i], text->valuestring);
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(ch, "logprobs");
    const cJSON *offs = cJSON_IsObject(lp) ? cJSON_GetObjectItemCaseSensitive(lp, "text_offset") : NULL;
    const cJSON *tokens = cJSON_IsObject(lp) ? cJSON_GetObjectItemCaseSensitive(lp, "tokens") : NULL;
    const cJSON *off;
    int k = 0;
    cJSON_ArrayForEach(off, offs) {
        if (!cJSON_IsNumber(off) || !(off->valuedouble >= o->last[i])) abort(); /* never back (NaN: fails) */
        o->last[i] = o->max[i] = off->valuedouble;
        oracle_place(o, i, cJSON_GetArrayItem(tokens, k++), off->valuedouble);
        o->entries[i]++;
    }
}

/* The choices' whole texts checked (when whole: check) and freed. */
static void oracle_end(oracle *o, int check) {
    for (int i = 0; i < MAX_CHOICES; i++) {
        srv_buf *t = &o->text[i];
        if (t->failed) abort();
        if (!check) {
            srv_buf_free(t);
            continue;
        }
        const size_t chars = srv_utf8_chars(t->p ? t->p : "", t->n);
        if (o->max[i] > (double)chars) abort(); /* an offset past the text */
        const char *p = oracle_prompt(o, i);
        if (t->n && p) {
            const size_t l = strlen(p);
            if (t->n < l || memcmp(t->p, p, l)) abort(); /* the echo is the prompt as sent */
        }
        srv_buf_free(t);
    }
}

static void oracle_reply(oracle *o, const char *p, size_t n) {
    cJSON *j = cJSON_ParseWithLength(p, n);
    if (!j) abort();
    const cJSON *ch;
    cJSON_ArrayForEach(ch, cJSON_GetObjectItemCaseSensitive(j, "choices")) oracle_choice(o, ch);
    cJSON_Delete(j);
}

/* The server-sent events in out[0..n): each "data: JSON\n\n", the last possibly "data: [DONE]"; a
 * completion's chunks held to the oracle o (when not NULL). */
static void expect_events(const char *p, size_t n, int *done, oracle *o) {
    while (n > 0) {
        if (*done || n < 8 || memcmp(p, "data: ", 6) != 0) abort();
        const char *end = NULL;
        for (size_t i = 6; i + 1 < n; i++)
            if (p[i] == '\n' && p[i + 1] == '\n') {
                end = p + i;
                break;
            }
        if (!end) abort();
        const size_t len = (size_t)(end - p) - 6;
        if (len == 6 && !memcmp(p + 6, "[DONE]", 6)) *done = 1;
        else if (o) oracle_reply(o, p + 6, len);
        else expect_json(p + 6, len);
        n -= (size_t)(end + 2 - p);
        p = end + 2;
    }
}

static void run_job(srv *s, srv_job_kind kind, const char *body, size_t len) {
    srv_job *j;
    srv_err e;
    if (srv_job_create(s, kind, body, len, &j, &e) != 0) {
        expect_error(&e);
        return;
    }
    /* accepted: the body is a JSON object */
    cJSON *req = cJSON_ParseWithLength(body, len);
    if (!req) abort();
    const int completion = kind == SRV_JOB_COMPLETION;
    oracle o;
    oracle_init(&o, req);
    if (srv_job_streaming(j)) {
        srv_buf out = {0};
        int done = 0, ended = 0;
        while (!ended) {
            ended = srv_job_stream(j, &out);
            if (out.failed) abort();
            expect_events(out.p, out.n, &done, completion ? &o : NULL);
            out.n = 0;
            if (!ended) srv_job_pump(j, 0.05);
        }
        if (!done && srv_job_error(j, &e) == 0) abort(); /* only an error ends a stream without [DONE] */
        srv_buf_free(&out);
        oracle_end(&o, done);
    } else {
        while (!srv_job_pump(j, 0.05)) continue;
        if (srv_job_error(j, &e) != 0) expect_error(&e);
        else {
            size_t n = 0;
            char *reply = srv_job_reply(j, &n);
            if (!reply) abort();
            if (completion) oracle_reply(&o, reply, n);
            else expect_json(reply, n);
            free(reply);
        }
        oracle_end(&o, completion);
    }
    cJSON_Delete(req);
    srv_job_free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, setup);
    if (n < 1) return 0;
    const int endpoint = data[0] % 3, model = (data[0] / 3) % MODELS, chat = (data[0] / 9) % 5;
    srv *s = &servers[model][chat];
    const char *body = (const char *)data + 1;
    const size_t len = n - 1;
    if (endpoint == 2) {
        char *json = NULL;
        size_t json_len = 0;
        srv_err e;
        if (srv_attention(s, body, len, &json, &json_len, &e) != 0) expect_error(&e);
        else expect_json(json, json_len);
        free(json);
    } else
        run_job(s, endpoint ? SRV_JOB_CHAT : SRV_JOB_COMPLETION, body, len);
    return 0;
}
