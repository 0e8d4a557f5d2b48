/* completions.c — POST /v1/completions and /v1/chat/completions: the request's JSON into engine
 * requests (one per prompt and choice), their events into text, log-probabilities and the reply,
 * whole or as server-sent events.
 *
 * A choice's text is the text of its sequence (prompt + generated, special tokens left out) past
 * the prompt's, which the library's dt_tok_stream gives as the tokens come (a token's text can
 * depend on its neighbours), so that it equals what `difftrans generate` prints: only its final
 * text is looked at for stop strings and streamed (whole characters; a character whose bytes are
 * not all generated yet waits), holding back what could still become a stop string. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "server.h"

#define MAX_N 16

typedef struct {
    int id;
    int has_lp;                  /* 0: the first prompt token, which has no log-probability */
    float logprob;
    int n_top;
    int top_ids[DT_MAX_TOP_LOGPROBS];
    float top_lp[DT_MAX_TOP_LOGPROBS];
    size_t offset;               /* the character of the sequence's text its first byte is in (srv_text);
                                    text_offset is that in the choice's text (text_offset) */
    int generated;               /* 0: a prompt token (echo) */
} lp_entry;

typedef struct {
    int index, prompt;
    dt_engine_request *q;
    double submit_t, last_t;
    int got_token;
    int ended;                   /* no more events are read */
    int finish_stop;             /* "stop" (an end token or a stop string), else "length" */
    int stop_cut;                /* a stop string cut the text */
    size_t n_gen;                /* tokens generated */
    lp_entry *lp;
    size_t n_lp, cap_lp, lp_sent;
    size_t *prompt_offsets;      /* echo with logprobs: the prompt's tokens' offsets */
    size_t *sent_offsets;        /* and when the prompt was text: theirs in it (srv_text_place) */
    size_t sent_chars;           /* a text prompt's characters when it is echoed (as sent) */
    size_t gen_offset;           /* the newest generated token's (update_text) */
    size_t n_prompt;             /* the prompt's tokens: the sequence's tokens before the generated ones */
    size_t first_offset;         /* the first generated token's offset, when there is one */
    int prompt_run;              /* the prompt ended inside a ByteFallback run (srv_text) */
    srv_text seq;                /* the prompt's tokens, then the generated ones, as text */
    srv_buf text;                /* echo prefix + completion so far, valid UTF-8 */
    size_t pre, pre_chars;       /* the echo prefix: bytes, characters */
    size_t pre_final;            /* its bytes that are the prompt's final text (the rest is the prompt's
                                    only once the completion's start is settled) */
    size_t fixed, fixed_chars;   /* text's bytes that are final (the rest the next token may change),
                                    and their characters */
    /* The completion is the sequence's text past what it shares with the prompt's: past the
     * prompt's final text, and past the rest it had (prompt_rest) as far as the sequence's text
     * goes on with it. Until that is settled (the prompt's rest was not final, and the text after
     * its final text is still shorter or the same), head keeps the final text after it. */
    srv_buf prompt_rest, head;
    int settled;
    size_t prompt_chars;         /* characters of the prompt's final text */
    size_t base_chars;           /* characters of the sequence's text before the completion (with echo,
                                    the prompt's part of the text once settled) */
    size_t stop_from;            /* completion bytes before it hold no stop string */
    size_t sent;                 /* bytes streamed */
    int end_sent;
} choice;

typedef struct {
    int *ids;
    size_t n;
    char *text;                  /* a text prompt with echo: the text, echoed as sent (NULL: ids) */
    size_t len;
} prompt_t;

struct srv_job {
    srv *s;
    srv_job_kind kind;
    char id[64];
    long created;
    char *model;
    prompt_t *prompts;
    int n_prompts;
    int n, max_tokens;
    dt_sampler sampler;
    uint64_t seed;
    uint64_t serial;             /* the server's count of requests (from a random start): the id's */
    char *stops[DT_MAX_STOP_STRINGS + 1];
    int n_stops;
    int echo;
    int logprobs;                /* alternatives per token; −1: no log-probabilities */
    int stream;
    int include_usage;           /* a stream ends with a usage chunk (stream_options.include_usage) */
    int stop_ids[DT_MAX_EOS + 1]; /* the model's EOS ids and the chat template's end token */
    int n_stop_ids;              /* −1: the model's own */
    choice *c;
    int n_choices;
    int head_sent, done_sent;
    int failed;                  /* a decode failed (out of memory): the reply is an error */
    int cancelled;               /* srv_job_cancel: its requests' ends are ours, not the engine's */
    srv_err model_error;         /* status 0, or a choice the engine ended with DT_STOP_ERROR: the reply is
                                    this error */
};
_Static_assert(DT_MAX_EOS + 1 <= DT_ENGINE_MAX_STOP_IDS, "the engine takes a request's stop ids");

/* The choice echoes its prompt's tokens decoded (a prompt of ids; a text prompt is echoed as sent). */
static int echo_decoded(const srv_job *j, const choice *c) {
    return j->echo && !j->prompts[c->prompt].text;
}

/* ---------------------------------------------------------------- errors */

static int vfail(srv_err *e, int status, const char *type, const char *code, const char *param, const char *fmt,
                 va_list ap) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    return -1;
}

int srv_fail(srv_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(e, status, type, code, param, fmt, ap);
    va_end(ap);
    return -1;
}

int srv_bad(srv_err *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(e, 400, "invalid_request_error", NULL, param, fmt, ap);
    va_end(ap);
    return -1;
}

int srv_fail_dt(srv_err *e, const dt_error *err, const char *param) {
    switch (err->code) {
    case DT_ERR_INVALID: return srv_fail(e, 400, "invalid_request_error", NULL, param, "%s", err->msg);
    case DT_ERR_BUSY:
        return srv_fail(e, 503, "server_error", "queue_full", NULL, "the server is busy: %s", err->msg);
    default: return srv_fail(e, 500, "server_error", NULL, NULL, "%s", err->msg);
    }
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Refuses an object that holds a key twice, anywhere in v (path: where v is, "" at the top). cJSON
 * keeps both members and its lookups find the first, where JSON.parse and Python's json keep the
 * last: a body built by one of them (or by a proxy that checked the other value) would mean one
 * thing to its sender and another here, so neither is taken. Sorted, not compared in pairs: a
 * body of max_body bytes may hold 10^5 keys. */
static int check_dup_keys(const cJSON *v, char *path, size_t cap, srv_err *e) {
    const size_t at = strlen(path);
    if (cJSON_IsArray(v)) {
        int i = 0;
        for (const cJSON *c = v->child; c; c = c->next, i++) {
            snprintf(path + at, cap - at, "[%d]", i);
            if (check_dup_keys(c, path, cap, e) != 0) return -1;
        }
        path[at] = '\0';
        return 0;
    }
    if (!cJSON_IsObject(v)) return 0;
    size_t n = 0;
    for (const cJSON *c = v->child; c; c = c->next) n++;
    if (n > 1) {
        const char **names = malloc(n * sizeof *names);
        if (!names) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        size_t k = 0;
        for (const cJSON *c = v->child; c; c = c->next) names[k++] = c->string ? c->string : "";
        qsort(names, n, sizeof *names, cmp_names);
        const char *dup = NULL;
        for (k = 1; k < n && !dup; k++)
            if (!strcmp(names[k - 1], names[k])) dup = names[k];
        if (dup) {
            const char *where = at ? path : "the request body";
            /* the key goes into the reply's JSON: only when it is text, and whole */
            const size_t dn = strlen(dup);
            if (dn > 200 || at > 200 || !srv_utf8_valid(dup, dn) || !srv_utf8_valid(path, at))
                srv_bad(e, NULL, "a key appears twice in an object of the request body");
            else {
                char param[sizeof e->param];
                snprintf(param, sizeof param, "%s%s%s", path, at ? "." : "", dup);
                /* cut short, it may end inside a character */
                srv_bad(e, srv_utf8_valid(param, strlen(param)) ? param : NULL,
                        "duplicate key '%s' in %s: JSON parsers disagree on which value counts, so this server takes "
                        "neither", dup, where);
            }
            free(names);
            return -1;
        }
        free(names);
    }
    for (const cJSON *c = v->child; c; c = c->next) {
        snprintf(path + at, cap - at, "%s%s", at ? "." : "", c->string ? c->string : "");
        if (check_dup_keys(c, path, cap, e) != 0) return -1;
    }
    path[at] = '\0';
    return 0;
}

cJSON *srv_json_parse(const char *body, size_t len, srv_err *e) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        srv_bad(e, NULL, "the request body is not valid JSON");
        return NULL;
    }
    /* cJSON stops after the first value: what follows it would be dropped unread */
    for (; end && end < body + len; end++)
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            srv_bad(e, NULL, "the request body is not valid JSON: byte %zu follows its value", (size_t)(end - body));
            cJSON_Delete(root);
            return NULL;
        }
    char path[256] = "";
    if (check_dup_keys(root, path, sizeof path, e) != 0) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

char *srv_err_json(const srv_err *e) {
    cJSON *root = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(root, "error");
    if (!o) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "server_error");
    if (e->param[0]) cJSON_AddStringToObject(o, "param", e->param);
    else cJSON_AddNullToObject(o, "param");
    if (e->code) cJSON_AddStringToObject(o, "code", e->code);
    else cJSON_AddNullToObject(o, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

void srv_set_fingerprint(srv *s) {
    const dt_config *c = &s->m->cfg;
    char what[256];
    snprintf(what, sizeof what, "%s|%s|kv%d|%dx%d|%.0f|%d|%d", dt_arch_name(c->arch),
             dt_quant_scheme_name(dt_model_quant_scheme(s->m, NULL)), (int)s->opt.kv_cache, s->n_slots, s->ctx,
             (double)dt_config_param_count(c), c->vocab_size, c->num_hidden_layers);
    uint64_t h = 1469598103934665603ULL; /* FNV-1a: stable across builds and machines, unlike a pointer */
    for (const char *p = what; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    snprintf(s->fingerprint, sizeof s->fingerprint, "fp_%016llx", (unsigned long long)h);
}

/* The tokenizer's string of id into out[0..n) ("" when none, or too long for out). */
static void token_text(const dt_tok *tok, int id, char *out, size_t n) {
    out[0] = '\0';
    size_t len;
    const char *t = tok && id >= 0 ? dt_tok_id_to_token(tok, id, &len) : NULL;
    if (t && len < n) snprintf(out, n, "%.*s", (int)len, t);
}

void srv_set_vocab_texts(srv *s) {
    const dt_tok *tok = dt_model_tok(s->m);
    const char *end = s->chat != SRV_CHAT_NONE ? srv_chat_end_token(s->chat) : NULL;
    s->chat_end_id = tok && end ? dt_tok_token_to_id(tok, end, strlen(end)) : -1;
    token_text(tok, tok ? dt_tok_bos_id(tok) : -1, s->bos, sizeof s->bos);
    token_text(tok, tok ? dt_tok_eos_id(tok) : -1, s->eos, sizeof s->eos);
}

int srv_with_engine(srv *s, int (*fn)(srv *s, void *ctx), void *ctx, srv_err *e) {
    pthread_rwlock_rdlock(&s->engine_lock);
    int rc;
    if (s->engine_closed)
        rc = srv_fail(e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
    else rc = fn(s, ctx);
    pthread_rwlock_unlock(&s->engine_lock);
    return rc;
}

/* ---------------------------------------------------------------- tokens as text */

/* A tokenizer model's id that is no token (an embedding padded past the tokenizer) or a
 * byte-level model's id past 255: nothing in the text. */
static int has_text(const dt_model *m, int id) {
    const dt_tok *tok = dt_model_tok(m);
    if (!tok) return id >= 0 && id < 256;
    size_t len;
    return dt_tok_id_to_token(tok, id, &len) != NULL;
}

static char *no_token(int id, size_t *len) {
    char buf[32];
    *len = (size_t)snprintf(buf, sizeof buf, "<%d>", id);
    return strdup(buf);
}

/* The token's own bytes (logprobs' bytes; malloc'd): dt_tok_token_bytes's (the first byte of a
 * character for a token that holds it, not U+FFFD's), a byte-level model's byte, "<id>" for an id
 * that is no token. */
static char *token_bytes(const dt_model *m, int id, size_t *len) {
    if (!has_text(m, id)) return no_token(id, len);
    const dt_tok *tok = dt_model_tok(m);
    if (tok) {
        char *bytes;
        dt_error err;
        return dt_tok_token_bytes(tok, id, &bytes, len, &err) == 0 ? bytes : NULL;
    }
    char *b = malloc(2);
    if (b) b[0] = (char)id, b[1] = '\0', *len = 1;
    return b;
}

/* A token's text in logprobs and on the page: its own bytes (a Metaspace token's ▁ a space, which
 * decoding it alone would strip as the text's first), made valid UTF-8. */
char *srv_token_text(const dt_model *m, int id) {
    size_t len;
    char *raw = token_bytes(m, id, &len);
    if (!raw) return NULL;
    char *t = srv_utf8_repair(raw, len, &len);
    free(raw);
    return t;
}

/* ---------------------------------------------------------------- parsing */

static const cJSON *field(const cJSON *root, const char *name) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, name);
    return f && !cJSON_IsNull(f) ? f : NULL;
}

static int is_integer(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble);
}

static int get_int(const cJSON *root, const char *name, long lo, long hi, long *out, srv_err *e) {
    const cJSON *f = field(root, name);
    if (!f) return 0;
    if (!is_integer(f)) return srv_bad(e, name, "%s: expected an integer", name);
    if (f->valuedouble < (double)lo || f->valuedouble > (double)hi)
        return srv_bad(e, name, "%s %.0f: must be in %ld..%ld", name, f->valuedouble, lo, hi);
    *out = (long)f->valuedouble;
    return 0;
}

static int get_num(const cJSON *root, const char *name, double lo, double hi, double *out, srv_err *e) {
    const cJSON *f = field(root, name);
    if (!f) return 0;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble)) return srv_bad(e, name, "%s: expected a number", name);
    if (f->valuedouble < lo || f->valuedouble > hi)
        return srv_bad(e, name, "%s %g: must be in [%g, %g]", name, f->valuedouble, lo, hi);
    *out = f->valuedouble;
    return 0;
}

static int get_bool(const cJSON *root, const char *name, int *out, srv_err *e) {
    const cJSON *f = field(root, name);
    if (!f) return 0;
    if (!cJSON_IsBool(f)) return srv_bad(e, name, "%s: expected true or false", name);
    *out = cJSON_IsTrue(f);
    return 0;
}

/* Token ids given by number: each an integer inside the vocabulary. */
static int parse_ids(srv *s, const cJSON *arr, const char *where, prompt_t *p, srv_err *e) {
    const int V = s->m->cfg.vocab_size;
    const int n = cJSON_GetArraySize(arr);
    if (n == 0) return srv_bad(e, "prompt", "%s: an empty list of token ids", where);
    p->ids = malloc((size_t)n * sizeof *p->ids);
    if (!p->ids) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory for %d token ids", n);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!is_integer(it)) return srv_bad(e, "prompt", "%s[%d]: expected a token id (an integer)", where, i);
        if (it->valuedouble < 0 || it->valuedouble >= V)
            return srv_fail(e, 400, "invalid_request_error", "invalid_token", "prompt",
                            "%s: token id %.0f at index %d is outside the vocabulary of %d tokens", where,
                            it->valuedouble, i, V);
        p->ids[i++] = (int)it->valuedouble;
    }
    p->n = (size_t)n;
    return 0;
}

static int encode_text(srv *s, const char *text, int add_special, const char *where, prompt_t *p, srv_err *e) {
    dt_error err;
    size_t n;
    const int rc = add_special ? dt_model_encode_prompt(s->m, text, &p->ids, &n, &err)
                               : dt_model_encode(s->m, text, strlen(text), 0, &p->ids, &n, &err);
    if (rc != 0) {
        dt_fail_prefix(&err, "%s", where);
        return srv_fail_dt(e, &err, where);
    }
    p->n = n;
    return 0;
}

/* A text prompt: its tokens, and with echo the text, which the echo is (as OpenAI's and vLLM's: its
 * decoding would leave its special tokens out). */
static int prompt_text(srv_job *j, const char *text, const char *where, prompt_t *p, srv_err *e) {
    if (encode_text(j->s, text, 1, where, p, e) != 0) return -1;
    if (!j->echo) return 0;
    p->len = strlen(text);
    if (!(p->text = strdup(text))) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    return 0;
}

static int parse_prompts(srv_job *j, const cJSON *root, srv_err *e) {
    const cJSON *p = field(root, "prompt");
    if (!p) return srv_bad(e, "prompt", "prompt: required (a string, a list of strings, a list of token ids or a "
                                        "list of lists of token ids)");
    int n = 1;
    if (cJSON_IsArray(p)) {
        n = cJSON_GetArraySize(p);
        if (n == 0) return srv_bad(e, "prompt", "prompt: an empty list");
        if (cJSON_IsNumber(p->child)) n = 1;
    } else if (!cJSON_IsString(p))
        return srv_bad(e, "prompt", "prompt: expected a string, a list of strings or token ids");
    if (n > 1024) return srv_bad(e, "prompt", "prompt: %d prompts, more than 1024 in one request", n);
    j->prompts = calloc((size_t)n, sizeof *j->prompts);
    if (!j->prompts) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    j->n_prompts = n;
    if (cJSON_IsString(p)) return prompt_text(j, p->valuestring, "prompt", &j->prompts[0], e);
    if (cJSON_IsNumber(p->child)) return parse_ids(j->s, p, "prompt", &j->prompts[0], e);
    int i = 0;
    const cJSON *it;
    const int strings = cJSON_IsString(p->child);
    cJSON_ArrayForEach(it, p) {
        char where[32];
        snprintf(where, sizeof where, "prompt[%d]", i);
        if (strings && cJSON_IsString(it)) {
            if (prompt_text(j, it->valuestring, where, &j->prompts[i], e) != 0) return -1;
        } else if (!strings && cJSON_IsArray(it)) {
            if (parse_ids(j->s, it, where, &j->prompts[i], e) != 0) return -1;
        } else
            return srv_bad(e, "prompt", "%s: expected %s like the first", where,
                           strings ? "a string" : "a list of token ids");
        i++;
    }
    return 0;
}

static int parse_messages(srv_job *j, const cJSON *root, srv_err *e) {
    srv *s = j->s;
    const cJSON *msgs = field(root, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return srv_bad(e, "messages", "messages: required, a non-empty list of {role, content}");
    if (s->chat == SRV_CHAT_NONE)
        return srv_fail(e, 400, "invalid_request_error", "unsupported_chat_template", "messages",
                        "this model's chat template is not one of ChatML, Llama 3, Llama 2 / Mistral (or it has "
                        "none): use /v1/completions with your own prompt, or start the server with "
                        "--chat-template chatml|llama3|llama2|mistral");
    const int n = cJSON_GetArraySize(msgs);
    srv_chat_msg *m = calloc((size_t)n, sizeof *m);
    srv_buf *parts = calloc((size_t)n, sizeof *parts); /* content given as a list of text parts */
    int rc = m && parts ? 0 : srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, msgs) {
        if (rc != 0) break;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsObject(it) || !cJSON_IsString(role)) {
            rc = srv_bad(e, "messages", "messages[%d]: expected {\"role\": ..., \"content\": ...}", i);
            break;
        }
        if (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "developer") &&
            strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")) {
            rc = srv_bad(e, "messages", "messages[%d].role '%s': expected system, developer, user or assistant", i,
                         role->valuestring);
            break;
        }
        /* OpenAI's newer name of the system message (the SDKs' examples send it): the templates
         * know system */
        m[i].role = strcmp(role->valuestring, "developer") ? role->valuestring : "system";
        if (cJSON_IsString(content)) {
            m[i].content = content->valuestring;
            m[i].len = strlen(content->valuestring);
        } else if (cJSON_IsArray(content)) {
            const cJSON *part;
            cJSON_ArrayForEach(part, content) {
                const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
                const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
                    rc = srv_bad(e, "messages", "messages[%d].content: only text parts are supported", i);
                    break;
                }
                srv_buf_puts(&parts[i], text->valuestring);
            }
            srv_buf_put(&parts[i], "", 0);
            m[i].content = parts[i].p ? parts[i].p : "";
            m[i].len = parts[i].n;
        } else if (!content && !strcmp(role->valuestring, "assistant")) {
            m[i].content = "";
        } else rc = srv_bad(e, "messages", "messages[%d].content: expected a string", i);
        i++;
    }
    srv_buf prompt = {0};
    char msg[256];
    if (rc == 0 && srv_chat_render(s->chat, m, n, s->bos, s->eos, &prompt, msg, sizeof msg) != 0)
        rc = srv_bad(e, "messages", "%s", msg);
    if (rc == 0 && prompt.failed) rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (rc == 0) {
        j->prompts = calloc(1, sizeof *j->prompts);
        if (!j->prompts) rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        else {
            j->n_prompts = 1;
            /* the template writes the special tokens itself (transformers' apply_chat_template
             * encodes without add_special_tokens) */
            rc = encode_text(s, prompt.p, 0, "messages", &j->prompts[0], e);
        }
    }
    srv_buf_free(&prompt);
    for (int k = 0; parts && k < n; k++) srv_buf_free(&parts[k]);
    free(parts);
    free(m);
    return rc;
}

/* OpenAI parameters this server cannot honour, refused when they would change the reply (they were
 * read past, so a logit_bias banning a token, best_of 4, a suffix, a tool list or a JSON
 * response_format came back as if never asked for); their neutral values pass, as clients send
 * them. */
static int refuse_unsupported(const cJSON *root, int chat, long n, srv_err *e) {
    const cJSON *lb = field(root, "logit_bias");
    if (lb && (!cJSON_IsObject(lb) || lb->child))
        return srv_bad(e, "logit_bias", "logit_bias: not supported (only {} or null)");
    if (!chat) {
        const cJSON *bo = field(root, "best_of"), *sfx = field(root, "suffix");
        if (bo && (!is_integer(bo) || (bo->valuedouble != 1 && bo->valuedouble != (double)n)))
            return srv_bad(e, "best_of", "best_of %g: not supported (only 1, or n = %ld)",
                           cJSON_IsNumber(bo) ? bo->valuedouble : 0.0, n);
        if (sfx && (!cJSON_IsString(sfx) || sfx->valuestring[0]))
            return srv_bad(e, "suffix", "suffix: not supported (only \"\" or null)");
        return 0;
    }
    const cJSON *tools = field(root, "tools"), *fns = field(root, "functions"), *rf = field(root, "response_format");
    if (tools && (!cJSON_IsArray(tools) || tools->child))
        return srv_bad(e, "tools", "tools: not supported (this server has no tool calling; only [] or null)");
    if (fns && (!cJSON_IsArray(fns) || fns->child))
        return srv_bad(e, "functions", "functions: not supported (this server has no function calling)");
    const cJSON *tc = field(root, "tool_choice");
    if (tc && !(cJSON_IsString(tc) && (!strcmp(tc->valuestring, "none") || !strcmp(tc->valuestring, "auto"))))
        return srv_bad(e, "tool_choice", "tool_choice: not supported (only \"none\" or \"auto\" without tools)");
    if (rf) {
        const cJSON *type = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text"))
            return srv_bad(e, "response_format", "response_format: only {\"type\": \"text\"} (this server does not "
                                                 "constrain replies to JSON)");
    }
    return 0;
}

static int parse_stop(srv_job *j, const cJSON *root, srv_err *e) {
    const cJSON *st = field(root, "stop");
    if (!st) return 0;
    if (cJSON_IsString(st)) {
        if (st->valuestring[0] && !(j->stops[j->n_stops++] = strdup(st->valuestring)))
            return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        if (!st->valuestring[0]) j->n_stops--;
        return 0;
    }
    if (!cJSON_IsArray(st)) return srv_bad(e, "stop", "stop: expected a string or a list of strings");
    if (cJSON_GetArraySize(st) > DT_MAX_STOP_STRINGS)
        return srv_bad(e, "stop", "stop: %d strings, at most %d", cJSON_GetArraySize(st), DT_MAX_STOP_STRINGS);
    const cJSON *it;
    cJSON_ArrayForEach(it, st) {
        if (!cJSON_IsString(it)) return srv_bad(e, "stop", "stop: expected strings");
        if (!it->valuestring[0]) continue;
        if (!(j->stops[j->n_stops] = strdup(it->valuestring)))
            return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        j->n_stops++;
    }
    return 0;
}

/* splitmix64's finaliser: nearby inputs give seeds that share no bits */
static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int parse_request(srv_job *j, const cJSON *root, srv_err *e) {
    srv *s = j->s;
    const int chat = j->kind == SRV_JOB_CHAT;
    const cJSON *model = field(root, "model");
    if (model && !cJSON_IsString(model)) return srv_bad(e, "model", "model: expected a string");
    j->model = strdup(model ? model->valuestring : s->name);
    if (!j->model) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");

    long max_tokens = chat ? -1 : 16, n = 1, top_k = 0, logprobs = -1, top_logprobs = 0, seed = 0;
    double temperature = 1.0, top_p = 1.0, min_p = 0.0;
    int stream = 0, echo = 0, want_lp = 0;
    if (get_int(root, "max_tokens", 0, 1L << 30, &max_tokens, e) != 0) return -1;
    if (chat && get_int(root, "max_completion_tokens", 0, 1L << 30, &max_tokens, e) != 0) return -1;
    if (get_num(root, "temperature", 0, 100, &temperature, e) != 0) return -1;
    if (get_num(root, "top_p", 0, 1, &top_p, e) != 0) return -1;
    if (field(root, "top_p") && top_p <= 0) return srv_bad(e, "top_p", "top_p 0: must be in (0, 1]");
    if (get_int(root, "top_k", 0, s->m->cfg.vocab_size, &top_k, e) != 0) return -1;
    /* vLLM's and llama.cpp's server's field (not OpenAI's): read, where it was ignored */
    if (get_num(root, "min_p", 0, 1, &min_p, e) != 0) return -1;
    if (get_int(root, "seed", -(1L << 62), 1L << 62, &seed, e) != 0) return -1;
    if (get_int(root, "n", 1, MAX_N, &n, e) != 0) return -1;
    if (get_bool(root, "stream", &stream, e) != 0) return -1;
    const cJSON *so = field(root, "stream_options");
    if (so && !cJSON_IsObject(so)) return srv_bad(e, "stream_options", "stream_options: expected an object");
    /* as OpenAI: a client that sets it believes it streams, and would wait for a usage chunk */
    if (so && !stream) return srv_bad(e, "stream_options", "stream_options: only allowed when stream is true");
    int include_usage = 0; /* as OpenAI: a stream's usage chunk ("choices": []) only when asked for, since
                              the usual loop over chunk.choices[0] fails on it */
    if (so && get_bool(so, "include_usage", &include_usage, e) != 0) return -1;
    if (chat) {
        if (get_bool(root, "logprobs", &want_lp, e) != 0) return -1;
        if (get_int(root, "top_logprobs", 0, DT_MAX_TOP_LOGPROBS, &top_logprobs, e) != 0) return -1;
        if (field(root, "top_logprobs") && !want_lp)
            return srv_bad(e, "top_logprobs", "top_logprobs: needs logprobs true");
        logprobs = want_lp ? top_logprobs : -1;
    } else {
        if (get_bool(root, "echo", &echo, e) != 0) return -1;
        const cJSON *lp = field(root, "logprobs");
        if (lp && cJSON_IsBool(lp)) return srv_bad(e, "logprobs", "logprobs: expected an integer 0..%d (the "
                                                                  "alternatives per token) or null",
                                                   DT_MAX_TOP_LOGPROBS);
        if (get_int(root, "logprobs", 0, DT_MAX_TOP_LOGPROBS, &logprobs, e) != 0) return -1;
    }
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (int i = 0; i < 2; i++) {
        double v = 0;
        if (get_num(root, penalties[i], -2, 2, &v, e) != 0) return -1;
        if (v != 0) return srv_bad(e, penalties[i], "%s %g: not supported (only 0)", penalties[i], v);
    }
    if (refuse_unsupported(root, chat, n, e) != 0) return -1;
    if (parse_stop(j, root, e) != 0) return -1;
    j->n = (int)n;
    j->sampler.temperature = (float)temperature;
    j->sampler.top_p = (float)top_p;
    j->sampler.top_k = (int)top_k;
    j->sampler.min_p = (float)min_p;
    /* without a seed every request draws its own (as OpenAI's: the same request twice at a
     * temperature gave the same text, a fixed default seed): the request's serial, mixed */
    j->seed = field(root, "seed") ? (uint64_t)seed : mix64(j->serial);
    j->stream = stream;
    j->include_usage = include_usage;
    j->echo = echo;
    j->logprobs = (int)logprobs;
    if (chat ? parse_messages(j, root, e) : parse_prompts(j, root, e)) return -1;

    /* the context: every prompt with its max_tokens must fit a slot */
    for (int i = 0; i < j->n_prompts; i++) {
        const long P = (long)j->prompts[i].n;
        const long M = max_tokens >= 0 ? max_tokens : (s->ctx > P ? s->ctx - P : 1);
        if (P + M > s->ctx)
            return srv_fail(e, 400, "invalid_request_error", "context_length_exceeded", chat ? "messages" : "prompt",
                            "the prompt has %ld tokens and max_tokens is %ld: %ld + %ld = %ld exceeds the context "
                            "of %d tokens", P, M, P, M, P + M, s->ctx);
    }
    j->max_tokens = (int)max_tokens; /* −1 (chat): the rest of the context */

    /* the end of generation: the model's ids, and for chat the template's end token */
    j->n_stop_ids = -1;
    if (chat) {
        int ids[DT_MAX_EOS];
        const int k = dt_model_stop_ids(s->m, ids);
        memcpy(j->stop_ids, ids, (size_t)k * sizeof *ids);
        j->n_stop_ids = k;
        int dup = 0;
        for (int i = 0; i < k; i++) dup |= ids[i] == s->chat_end_id;
        if (s->chat_end_id >= 0 && !dup) j->stop_ids[j->n_stop_ids++] = s->chat_end_id;
        if (s->chat_end_id < 0) {
            /* not one token of this vocabulary: its text ends the reply */
            if (!(j->stops[j->n_stops] = strdup(srv_chat_end_token(s->chat))))
                return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            j->n_stops++;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- submitting */

/* A log-probability entry. Its offset (srv_text's: the character of the sequence's text its first
 * byte is in, so a token that goes on with a character cut short begins where that character does,
 * and one whose text depends on the tokens before it is placed by their text together): a
 * generated token's from update_text, a prompt token's from choice_start; both placed again when a
 * ByteFallback run they are in ends (apply_revised). */
static void add_lp(choice *c, int id, int has_lp, const dt_event *ev, int *failed) {
    const int generated = ev && ev->type == DT_EVENT_TOKEN;
    if (dt_grow(&c->lp, &c->cap_lp, c->n_lp + 1, sizeof *c->lp, 64) != 0) {
        *failed = 1;
        return;
    }
    const size_t k = c->n_lp++; /* the prompt's entries come first, one a token */
    lp_entry *l = &c->lp[k];
    memset(l, 0, sizeof *l);
    l->id = id;
    l->has_lp = has_lp;
    l->generated = generated;
    if (has_lp && ev) {
        l->logprob = ev->logprob;
        l->n_top = ev->n_top;
        memcpy(l->top_ids, ev->top_ids, sizeof l->top_ids);
        memcpy(l->top_lp, ev->top_logprobs, sizeof l->top_lp);
    }
    l->offset = generated ? c->gen_offset : c->prompt_offsets[k];
    if (k > 0 && l->offset < l[-1].offset) l->offset = l[-1].offset; /* never back */
}

/* The choice's sequence fed its prompt: the echo's prefix (the prompt as sent, or its tokens' text),
 * the prompt's tokens' offsets when they are reported, and where the completion starts. */
static int choice_start(srv_job *j, choice *c, const prompt_t *p, srv_err *e) {
    dt_error err;
    if (srv_text_init(&c->seq, j->s->m, &err) != 0) return srv_fail_dt(e, &err, NULL);
    const int offsets = j->echo && j->logprobs >= 0, decoded = echo_decoded(j, c);
    if (offsets && !(c->prompt_offsets = malloc(p->n * sizeof *c->prompt_offsets)))
        return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < p->n; i++) {
        size_t at;
        if (srv_text_push(&c->seq, p->ids[i], &at, &err) != 0) return srv_fail_dt(e, &err, NULL);
        if (offsets) {
            c->prompt_offsets[i] = at;
            srv_text_revise(&c->seq, c->prompt_offsets, i); /* a ByteFallback run it ended */
        }
        if (decoded) srv_buf_put(&c->text, c->seq.cur.p, c->seq.n_fresh);
    }
    if (j->echo && p->text) {
        srv_buf_put(&c->text, p->text, p->len);
        c->sent_chars = srv_utf8_chars(p->text, p->len);
        if (offsets && !(c->sent_offsets = malloc(p->n * sizeof *c->sent_offsets)))
            return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        if (offsets && srv_text_place(j->s->m, p->text, p->len, p->ids, p->n, c->sent_offsets, &err) != 0)
            return srv_fail_dt(e, &err, NULL);
    }
    c->n_prompt = p->n;
    c->prompt_run = c->seq.run_open;
    c->pre_final = c->text.n;
    const char *rest = srv_text_rest(&c->seq);
    const size_t n_rest = srv_text_rest_len(&c->seq);
    if (decoded) srv_buf_put(&c->text, rest, n_rest);
    srv_buf_put(&c->text, "", 0);
    srv_buf_put(&c->prompt_rest, rest, n_rest);
    if (c->text.failed || c->prompt_rest.failed) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    c->pre = c->fixed = c->text.n;
    c->pre_chars = c->fixed_chars = decoded ? c->seq.chars + srv_utf8_chars(rest, n_rest) : c->sent_chars;
    c->prompt_chars = c->base_chars = c->seq.chars;
    c->settled = n_rest == 0; /* the prompt's text is final: the completion is what follows it */
    return 0;
}

typedef struct {
    srv_job *j;
    srv_err *e;
} submit_ctx;

static int submit_all(srv *s, void *ctx) {
    submit_ctx *sc = ctx;
    srv_job *j = sc->j;
    for (int i = 0; i < j->n_choices; i++) {
        choice *c = &j->c[i];
        const prompt_t *p = &j->prompts[c->prompt];
        dt_engine_request_options r;
        dt_engine_request_defaults(&r);
        r.prompt = p->ids;
        r.n_prompt = (int)p->n;
        r.max_new_tokens = j->max_tokens >= 0 ? j->max_tokens : s->ctx - (int)p->n;
        r.sampler = j->sampler;
        /* the n choices of a prompt differ: the first draws with the seed itself (as generate --seed
         * does), the others with the seed mixed with their index; seed + index was another request's
         * seed, so that seeds 5 and 6 with n 2 shared a choice */
        const int jc = c->index % j->n;
        r.seed = jc == 0 ? j->seed : mix64(j->seed ^ mix64((uint64_t)jc));
        r.stop_ids = j->n_stop_ids > 0 ? j->stop_ids : NULL;
        r.n_stop = j->n_stop_ids;
        r.top_logprobs = j->logprobs;
        r.prompt_logprobs = j->echo && j->logprobs >= 0;
        dt_error err;
        c->submit_t = dt_seconds();
        if (dt_engine_submit(s->engine, &r, &c->q, &err) != 0) {
            c->q = NULL;
            return srv_fail_dt(sc->e, &err, j->kind == SRV_JOB_CHAT ? "messages" : "prompt");
        }
    }
    return 0;
}

int srv_job_create(srv *s, srv_job_kind kind, const char *body, size_t len, srv_job **out, srv_err *e) {
    *out = NULL;
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    j->s = s;
    j->kind = kind;
    j->created = (long)time(NULL);
    const unsigned long long id = __atomic_fetch_add(&s->next_id, 1, __ATOMIC_RELAXED);
    j->serial = id;
    snprintf(j->id, sizeof j->id, "%s-%08lx%016llx", kind == SRV_JOB_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long)j->created, id);
    cJSON *root = srv_json_has_nul(body, len) ? NULL : srv_json_parse(body, len, e);
    int rc = 0;
    if (!root && srv_json_has_nul(body, len)) rc = srv_bad(e, NULL, SRV_NUL_REFUSED);
    /* every string the reply echoes (model, a role in a message) would be invalid JSON text too */
    else if (root && !srv_utf8_valid(body, len)) rc = srv_bad(e, NULL, "the request body is not valid UTF-8");
    else if (!root) rc = -1; /* srv_json_parse said why */
    else if (!cJSON_IsObject(root)) rc = srv_bad(e, NULL, "the request body must be a JSON object");
    else rc = parse_request(j, root, e);
    cJSON_Delete(root);
    /* the engine takes at most its slots plus its queue at once: more would wait for ever, and a
     * 503 would have the client retry for ever */
    if (rc == 0 && (long)j->n_prompts * j->n > (long)s->opt.queue + s->n_slots)
        rc = srv_bad(e, "n", "%d prompts × n %d = %ld sequences: more than this server takes at once (%d slots and a "
                             "queue of %d; its --parallel and --queue)",
                     j->n_prompts, j->n, (long)j->n_prompts * j->n, s->n_slots, s->opt.queue);
    if (rc == 0) {
        j->n_choices = j->n_prompts * j->n;
        j->c = calloc((size_t)j->n_choices, sizeof *j->c);
        if (!j->c) rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    for (int i = 0; rc == 0 && i < j->n_choices; i++) {
        choice *c = &j->c[i];
        c->index = i;
        c->prompt = i / j->n;
        const prompt_t *p = &j->prompts[c->prompt];
        rc = choice_start(j, c, p, e);
        /* the first prompt token has no log-probability; the engine gives the others */
        if (rc == 0 && j->echo && j->logprobs >= 0) add_lp(c, p->ids[0], 0, NULL, &j->failed);
    }
    if (rc == 0 && j->failed) rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    submit_ctx sc = {j, e};
    if (rc == 0) rc = srv_with_engine(s, submit_all, &sc, e);
    if (rc != 0) {
        srv_job_free(j);
        return -1;
    }
    *out = j;
    return 0;
}

int srv_job_streaming(const srv_job *j) {
    return j->stream;
}

/* ---------------------------------------------------------------- events */

/* Cuts the completion at the first stop string in its final text, looked for from the first byte a
 * stop string not yet seen could begin at: 1 when one was there (finish_reason "stop"). The rest,
 * which the next token may change (a character it may complete, decoded as U+FFFD; an end a
 * decoder may still drop), is not searched: a stop string that begins with the character it
 * becomes must not match the stand-in, nor a "\ufffd" one match it. */
static int cut_at_stop(const srv_job *j, choice *c) {
    const size_t from = c->pre + c->stop_from;
    if (j->n_stops == 0 || c->fixed <= from) return 0;
    const long at = dt_stop_find(c->text.p + from, c->fixed - from, (const char *const *)j->stops, j->n_stops);
    if (at < 0) {
        /* the final text stays as it is: a stop string is one that begins in its last bytes */
        size_t longest = 0;
        for (int i = 0; i < j->n_stops; i++)
            if (strlen(j->stops[i]) > longest) longest = strlen(j->stops[i]);
        const size_t done = c->fixed - c->pre;
        if (c->settled && done >= longest) c->stop_from = done - longest + 1;
        return 0;
    }
    const size_t cut = from + (size_t)at;
    c->fixed_chars -= srv_utf8_chars(c->text.p + cut, c->fixed - cut);
    c->fixed = c->text.n = cut;
    c->text.p[cut] = '\0';
    c->finish_stop = 1;
    c->stop_cut = 1;
    return 1;
}

/* Bytes of the first k characters of valid UTF-8 s[0..n) (all of them when it has fewer). */
static size_t utf8_char_bytes(const char *s, size_t n, size_t k) {
    size_t i = 0;
    for (; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80 && k-- == 0) break;
    return i;
}

/* The completion after its sequence's text changed (a token, or the end): the text that became
 * final joins its final text, and the rest is replaced. Until its start is settled, it is worked
 * out again from the final text after the prompt's (short: the prompt's rest, and a token or two). */
static void update_completion(srv_job *j, choice *c, int end) {
    const srv_text *t = &c->seq;
    const char *rest = srv_text_rest(t);
    const size_t n_rest = srv_text_rest_len(t);
    srv_buf *b = &c->text;
    if (c->settled) {
        b->n = c->fixed;
        srv_buf_put(b, t->cur.p, t->n_fresh);
        c->fixed += t->n_fresh;
        c->fixed_chars += srv_utf8_chars(t->cur.p, t->n_fresh);
        srv_buf_put(b, rest, n_rest);
    } else {
        srv_buf_put(&c->head, t->cur.p, t->n_fresh);
        srv_buf seq = {0}; /* the sequence's text after the prompt's final text */
        srv_buf_put(&seq, c->head.p, c->head.n);
        srv_buf_put(&seq, rest, n_rest);
        size_t base;
        if (c->prompt_run) {
            /* the run's text says nothing of where the prompt's part ends while it lasts (its bytes
             * read as U+FFFDs, one a token when the run ends invalid): the first generated token's
             * place does, once the run has ended */
            const int generated = c->seq.n_pushed > c->n_prompt;
            const int known = generated && !srv_text_provisional(&c->seq, c->n_prompt);
            const size_t first = c->first_offset > c->prompt_chars ? c->first_offset - c->prompt_chars : 0;
            base = !generated ? seq.n : known ? utf8_char_bytes(seq.p, seq.n, first) : 0;
            /* a start inside the rest could still move with it */
            c->settled = end || (known && base <= c->head.n);
        } else {
            base = seq.p ? srv_utf8_common(c->prompt_rest.p, c->prompt_rest.n, seq.p, seq.n) : 0;
            /* past the prompt's rest, or where final text after the prompt's left it: it stays */
            c->settled = end || base < c->head.n || c->head.n >= c->prompt_rest.n;
        }
        const size_t final = c->settled && base < c->head.n ? c->head.n - base : 0;
        /* with echo of ids the text is the sequence's: the prompt's part of it, then the completion
         * (the prompt's rest as it read alone would count a character the completion completes
         * twice); a text prompt's echo is the text as sent, the completion after it */
        const int decoded = echo_decoded(j, c);
        b->n = c->pre_final;
        if (decoded && seq.p) srv_buf_put(b, seq.p, base);
        c->pre = b->n;
        c->pre_chars = decoded ? c->prompt_chars + (seq.p ? srv_utf8_chars(seq.p, base) : 0) : c->sent_chars;
        if (seq.p) srv_buf_put(b, seq.p + base, seq.n - base);
        c->fixed = c->pre + final;
        c->fixed_chars = c->pre_chars + (seq.p ? srv_utf8_chars(seq.p + base, final) : 0);
        c->base_chars = c->prompt_chars + (seq.p ? srv_utf8_chars(seq.p, base) : 0);
        c->stop_from = 0;
        j->failed |= seq.failed;
        srv_buf_free(&seq);
        if (c->settled) srv_buf_free(&c->head);
    }
    srv_buf_put(b, "", 0);
    j->failed |= b->failed || c->head.failed;
}

/* The offsets of the tokens a ByteFallback run that ended has placed again (srv_text): the
 * prompt's, the entries', the first generated token's. */
static void apply_revised(const srv_job *j, choice *c) {
    const srv_text *t = &c->seq;
    const size_t n_prompt_lp = j->echo && j->logprobs >= 0 ? c->n_prompt : 0;
    for (size_t i = 0; i < t->n_revised; i++) {
        const size_t q = t->revised_first + i, at = t->revised[i];
        size_t e; /* its entry */
        if (q < c->n_prompt) {
            if (c->prompt_offsets) c->prompt_offsets[q] = at;
            e = n_prompt_lp ? q : (size_t)-1;
        } else {
            if (q == c->n_prompt) c->first_offset = at;
            e = j->logprobs >= 0 ? n_prompt_lp + (q - c->n_prompt) : (size_t)-1;
        }
        if (e < c->n_lp) c->lp[e].offset = at;
    }
}

/* The completion after a new token, cut at the first stop string (which ends the choice), and the
 * token's offset. */
static void update_text(srv_job *j, choice *c, int token) {
    size_t at;
    dt_error err;
    if (srv_text_push(&c->seq, token, &at, &err) != 0) {
        j->failed = 1;
        return;
    }
    c->gen_offset = at;
    if (c->seq.n_pushed == c->n_prompt + 1) c->first_offset = at;
    apply_revised(j, c);
    update_completion(j, c, 0);
    if (j->failed) return;
    if (cut_at_stop(j, c)) {
        c->ended = 1;
        dt_engine_cancel(c->q); /* its slot is free at the next step */
    }
}

static void on_event(srv_job *j, choice *c, const dt_event *ev) {
    srv *s = j->s;
    switch (ev->type) {
    case DT_EVENT_PROMPT:
        if (j->echo && j->logprobs >= 0 && c->n_lp < j->prompts[c->prompt].n)
            add_lp(c, ev->token, 1, ev, &j->failed);
        break;
    case DT_EVENT_TOKEN:
        if (!c->got_token) srv_metrics_ttft(s->metrics, ev->t - c->submit_t);
        else srv_metrics_token_interval(s->metrics, ev->t - c->last_t);
        c->got_token = 1;
        c->last_t = ev->t;
        if (ev->is_stop) {
            c->finish_stop = 1; /* DONE follows */
            break;
        }
        c->n_gen++;
        update_text(j, c, ev->token); /* first: the entry's offset */
        if (j->logprobs >= 0) add_lp(c, ev->token, 1, ev, &j->failed);
        break;
    case DT_EVENT_DONE:
        c->ended = 1;
        if (!c->stop_cut) {
            /* no token comes: the rest is text, the stop strings looked for in it */
            dt_error err;
            if (srv_text_end(&c->seq, &err) != 0) j->failed = 1;
            else {
                apply_revised(j, c);
                update_completion(j, c, 1);
            }
            if (!j->failed) cut_at_stop(j, c);
        }
        if (ev->stop == DT_STOP_EOS) c->finish_stop = 1;
        if (ev->stop == DT_STOP_ERROR && !j->model_error.status) {
            srv_fail(&j->model_error, 500, "server_error", "model_error", NULL, "%s",
                     ev->error ? ev->error : "the model's step failed");
            srv_job_cancel(j); /* the other choices: the reply is this error */
        }
        /* not a cancel of ours (a stop string, the client gone): the engine stopped under it, the
         * server shutting down past its --drain-timeout. A reply cut there is not one that reached
         * max_tokens, which finish_reason "length" would tell the client */
        if (ev->stop == DT_STOP_CANCELLED && !j->cancelled && !j->model_error.status) {
            srv_fail(&j->model_error, 503, "server_error", "shutting_down", NULL,
                     "the server shut down before the reply was complete (%d tokens generated); send it again",
                     ev->n_generated);
            srv_job_cancel(j);
        }
        break;
    }
}

/* Reads the events that are there (waiting up to timeout for the first). A stream stops after
 * each generated token, so that every token can go out in its own chunk. */
static int drain(srv_job *j, choice *c, double timeout) {
    dt_event ev;
    int got = 0;
    while (!c->ended && dt_engine_next(c->q, &ev, got ? 0 : timeout) == 1) {
        got = 1;
        on_event(j, c, &ev);
        if (j->failed) {
            /* out of memory: end the choice where it is */
            c->ended = 1;
            dt_engine_cancel(c->q);
        }
        if (j->stream && ev.type == DT_EVENT_TOKEN && !ev.is_stop) break;
    }
    return got;
}

int srv_job_pump(srv_job *j, double wait_s) {
    int progress = 0, open = -1, n_open = 0;
    for (int i = 0; i < j->n_choices; i++) {
        if (j->c[i].ended) continue;
        progress |= drain(j, &j->c[i], 0);
        if (!j->c[i].ended && open < 0) open = i;
        n_open += !j->c[i].ended;
    }
    /* one wait on the first open choice: short when others may have events meanwhile */
    if (!progress && open >= 0) drain(j, &j->c[open], n_open > 1 && wait_s > 0.005 ? 0.005 : wait_s);
    for (int i = 0; i < j->n_choices; i++)
        if (!j->c[i].ended) return 0;
    return 1;
}

void srv_job_cancel(srv_job *j) {
    j->cancelled = 1;
    for (int i = 0; i < j->n_choices; i++)
        if (j->c[i].q) dt_engine_cancel(j->c[i].q);
}

/* ---------------------------------------------------------------- replies */

static const char *finish_reason(const choice *c) {
    return c->finish_stop ? "stop" : "length";
}

/* An entry's text_offset: its character in the choice's text, which with echo of ids is the
 * sequence's text, and otherwise the completion (the sequence's text past base_chars) after the
 * text prompt as sent, when echoed (its tokens placed in it by srv_text_place). */
static size_t text_offset(const srv_job *j, const choice *c, const lp_entry *l) {
    if (c->sent_offsets && !l->generated) return c->sent_offsets[l - c->lp];
    if (echo_decoded(j, c)) return l->offset;
    return c->sent_chars + (l->offset > c->base_chars ? l->offset - c->base_chars : 0);
}

/* Completions' logprobs of entries [a, b): tokens, token_logprobs, top_logprobs, text_offset. */
static cJSON *completion_logprobs(const srv_job *j, const choice *c, size_t a, size_t b, size_t max_offset) {
    const dt_model *m = j->s->m;
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    if (!offs) {
        cJSON_Delete(o);
        return NULL;
    }
    for (size_t i = a; i < b; i++) {
        const lp_entry *l = &c->lp[i];
        char *t = srv_token_text(m, l->id);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(t ? t : ""));
        free(t);
        if (!l->has_lp) {
            cJSON_AddItemToArray(lps, cJSON_CreateNull());
            cJSON_AddItemToArray(tops, cJSON_CreateNull());
        } else {
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(l->logprob));
            cJSON *top = cJSON_CreateObject();
            for (int k = 0; k < l->n_top && k < j->logprobs; k++) {
                char *tt = srv_token_text(m, l->top_ids[k]);
                /* two ids with the same text: the more probable one stands for it */
                if (tt && !cJSON_GetObjectItemCaseSensitive(top, tt))
                    cJSON_AddNumberToObject(top, tt, l->top_lp[k]);
                free(tt);
            }
            cJSON_AddItemToArray(tops, top);
        }
        const size_t at = text_offset(j, c, l);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(at < max_offset ? at : max_offset)));
    }
    return o;
}

static cJSON *bytes_array(const dt_model *m, int id) {
    size_t len;
    char *raw = token_bytes(m, id, &len);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; raw && i < len; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)raw[i]));
    free(raw);
    return a;
}

/* Chat's logprobs: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}. */
static cJSON *chat_logprobs(const srv_job *j, const choice *c, size_t a, size_t b) {
    const dt_model *m = j->s->m;
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    if (!content) {
        cJSON_Delete(o);
        return NULL;
    }
    for (size_t i = a; i < b; i++) {
        const lp_entry *l = &c->lp[i];
        cJSON *t = cJSON_CreateObject();
        char *s = srv_token_text(m, l->id);
        cJSON_AddStringToObject(t, "token", s ? s : "");
        free(s);
        cJSON_AddNumberToObject(t, "logprob", l->logprob);
        cJSON_AddItemToObject(t, "bytes", bytes_array(m, l->id));
        cJSON *tops = cJSON_AddArrayToObject(t, "top_logprobs");
        for (int k = 0; k < l->n_top && k < j->logprobs; k++) {
            cJSON *alt = cJSON_CreateObject();
            char *as = srv_token_text(m, l->top_ids[k]);
            cJSON_AddStringToObject(alt, "token", as ? as : "");
            free(as);
            cJSON_AddNumberToObject(alt, "logprob", l->top_lp[k]);
            cJSON_AddItemToObject(alt, "bytes", bytes_array(m, l->top_ids[k]));
            cJSON_AddItemToArray(tops, alt);
        }
        cJSON_AddItemToArray(content, t);
    }
    return o;
}

/* The log-probability entries of a choice's text up to character `chars`: those that begin before
 * it. A finished choice's (chars: all of its text): with a stop string, the generated tokens that
 * begin before the cut (and all of the prompt's), so a token whose bytes straddle the cut is in:
 * every character of the text is in one of the tokens reported, as without the stop string (one
 * left out would leave the text's last characters without a token). A stream sends the entries of
 * the text it has sent, so that it never sends one that the stop string then cuts away. */
static size_t lp_end(const srv_job *j, const choice *c, size_t chars) {
    size_t e = c->n_lp;
    /* a stream holds back the prompt's entries too: those of a ByteFallback run the prompt ends in
     * are placed anew when the run ends */
    while (e > 0 && (!c->ended || (c->stop_cut && c->lp[e - 1].generated)) &&
           text_offset(j, c, &c->lp[e - 1]) >= chars)
        e--;
    return e;
}

static void add_usage(const srv_job *j, cJSON *root) {
    long prompt, completion;
    srv_job_tokens(j, &prompt, &completion);
    cJSON *u = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
}

static cJSON *reply_head(const srv_job *j, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", j->id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)j->created);
    cJSON_AddStringToObject(root, "model", j->model);
    cJSON_AddStringToObject(root, "system_fingerprint", j->s->fingerprint);
    return root;
}

char *srv_job_reply(srv_job *j, size_t *len) {
    const int chat = j->kind == SRV_JOB_CHAT;
    cJSON *root = reply_head(j, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    for (int i = 0; i < j->n_choices; i++) {
        const choice *c = &j->c[i];
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", c->index);
        const size_t chars = srv_utf8_chars(c->text.p ? c->text.p : "", c->text.n);
        if (chat) {
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddStringToObject(msg, "content", c->text.p ? c->text.p : "");
            if (j->logprobs >= 0) cJSON_AddItemToObject(ch, "logprobs", chat_logprobs(j, c, 0, lp_end(j, c, chars)));
            else cJSON_AddNullToObject(ch, "logprobs");
        } else {
            cJSON_AddStringToObject(ch, "text", c->text.p ? c->text.p : "");
            if (j->logprobs >= 0)
                cJSON_AddItemToObject(ch, "logprobs", completion_logprobs(j, c, 0, lp_end(j, c, chars), chars));
            else cJSON_AddNullToObject(ch, "logprobs");
        }
        cJSON_AddStringToObject(ch, "finish_reason", finish_reason(c));
        cJSON_AddItemToArray(choices, ch);
    }
    add_usage(j, root);
    char *s = j->failed ? NULL : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (s && len) *len = strlen(s);
    return s;
}

static void sse(srv_buf *out, cJSON *chunk) {
    char *s = cJSON_PrintUnformatted(chunk);
    cJSON_Delete(chunk);
    if (!s) {
        out->failed = 1;
        return;
    }
    srv_buf_puts(out, "data: ");
    srv_buf_puts(out, s);
    srv_buf_puts(out, "\n\n");
    free(s);
}

/* One streamed chunk of a choice: text (may be empty), its log-probabilities, the end. */
static void stream_chunk(srv_job *j, choice *c, size_t from, size_t to, size_t lp_a, size_t lp_b, int end,
                         srv_buf *out) {
    const int chat = j->kind == SRV_JOB_CHAT;
    cJSON *root = reply_head(j, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", c->index);
    char *piece = malloc(to - from + 1);
    if (!piece) {
        cJSON_Delete(ch);
        cJSON_Delete(root);
        out->failed = 1;
        return;
    }
    memcpy(piece, c->text.p + from, to - from);
    piece[to - from] = '\0';
    if (chat) {
        cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
        if (to > from) cJSON_AddStringToObject(delta, "content", piece);
        if (j->logprobs >= 0 && lp_b > lp_a) cJSON_AddItemToObject(ch, "logprobs", chat_logprobs(j, c, lp_a, lp_b));
        else cJSON_AddNullToObject(ch, "logprobs");
    } else {
        cJSON_AddStringToObject(ch, "text", piece);
        if (j->logprobs >= 0)
            cJSON_AddItemToObject(ch, "logprobs", completion_logprobs(j, c, lp_a, lp_b, (size_t)-1));
        else cJSON_AddNullToObject(ch, "logprobs");
    }
    free(piece);
    if (end) cJSON_AddStringToObject(ch, "finish_reason", finish_reason(c));
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    if (j->include_usage) cJSON_AddNullToObject(root, "usage"); /* OpenAI's: null but in the last chunk */
    sse(out, root);
}

int srv_job_error(const srv_job *j, srv_err *e) {
    if (!j->model_error.status) return 0;
    *e = j->model_error;
    return -1;
}

int srv_job_stream(srv_job *j, srv_buf *out) {
    if (j->done_sent) return 1;
    if (j->model_error.status) { /* what was sent stands; the error ends the stream, without [DONE] */
        char *s = srv_err_json(&j->model_error);
        if (!s) {
            out->failed = 1;
            return 1;
        }
        srv_buf_puts(out, "data: ");
        srv_buf_puts(out, s);
        srv_buf_puts(out, "\n\n");
        free(s);
        j->done_sent = 1;
        return 1;
    }
    const int chat = j->kind == SRV_JOB_CHAT;
    if (chat && !j->head_sent) {
        /* chat streams open each choice with the assistant's role */
        for (int i = 0; i < j->n_choices; i++) {
            cJSON *root = reply_head(j, "chat.completion.chunk");
            cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *ch = cJSON_CreateObject();
            cJSON_AddNumberToObject(ch, "index", j->c[i].index);
            cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
            cJSON_AddStringToObject(delta, "role", "assistant");
            cJSON_AddStringToObject(delta, "content", "");
            cJSON_AddNullToObject(ch, "logprobs");
            cJSON_AddNullToObject(ch, "finish_reason");
            cJSON_AddItemToArray(choices, ch);
            if (j->include_usage) cJSON_AddNullToObject(root, "usage");
            sse(out, root);
        }
    }
    j->head_sent = 1;
    int all_ended = 1;
    for (int i = 0; i < j->n_choices; i++) {
        choice *c = &j->c[i];
        if (c->end_sent) continue;
        /* an echo goes out with its tokens' entries, which the engine gives as it reads the prompt:
         * sent before them, the prompt's text came with the first token's entry alone */
        if (j->echo && j->logprobs >= 0 && !c->ended && c->n_lp < c->n_prompt) {
            all_ended = 0;
            continue;
        }
        const char *text = c->text.p ? c->text.p : "";
        /* with echo, the prompt's part of the text is known once the completion's start is */
        const size_t lim = !c->settled && !c->ended ? c->pre_final
                           : c->pre + srv_text_sendable(text + c->pre, c->fixed - c->pre,
                                                        (const char *const *)j->stops, j->n_stops, c->ended);
        /* the characters up to lim: the final text's, less the few held back */
        const size_t chars = c->ended ? c->fixed_chars + srv_utf8_chars(text + c->fixed, c->text.n - c->fixed)
                                      : c->fixed_chars - srv_utf8_chars(text + lim, c->fixed - lim);
        const size_t lp_b = lp_end(j, c, chars);
        if (lim > c->sent || (c->ended && !chat)) {
            stream_chunk(j, c, c->sent, lim > c->sent ? lim : c->sent, c->lp_sent, lp_b > c->lp_sent ? lp_b : c->lp_sent,
                         c->ended && !chat, out);
            if (lim > c->sent) c->sent = lim;
            if (lp_b > c->lp_sent) c->lp_sent = lp_b;
        }
        if (c->ended && chat) stream_chunk(j, c, c->sent, c->sent, c->lp_sent, c->lp_sent, 1, out);
        if (c->ended) c->end_sent = 1;
        else all_ended = 0;
    }
    if (!all_ended) return 0;
    if (j->include_usage) {
        cJSON *root = reply_head(j, chat ? "chat.completion.chunk" : "text_completion");
        cJSON_AddArrayToObject(root, "choices");
        add_usage(j, root);
        sse(out, root);
    }
    srv_buf_puts(out, "data: [DONE]\n\n");
    j->done_sent = 1;
    return 1;
}

void srv_job_tokens(const srv_job *j, long *prompt, long *completion) {
    *prompt = *completion = 0;
    for (int i = 0; i < j->n_prompts; i++) *prompt += (long)j->prompts[i].n;
    for (int i = 0; j->c && i < j->n_choices; i++) *completion += (long)j->c[i].n_gen;
}

void srv_job_free(srv_job *j) {
    if (!j) return;
    int submitted = 0;
    for (int i = 0; j->c && i < j->n_choices; i++) {
        choice *c = &j->c[i];
        if (c->q) {
            submitted = 1;
            dt_engine_release(c->q);
        }
        free(c->lp);
        free(c->prompt_offsets);
        free(c->sent_offsets);
        srv_text_free(&c->seq);
        srv_buf_free(&c->text);
        srv_buf_free(&c->prompt_rest);
        srv_buf_free(&c->head);
    }
    if (submitted) {
        long prompt, completion;
        srv_job_tokens(j, &prompt, &completion);
        srv_metrics_tokens(j->s->metrics, prompt, completion);
    }
    free(j->c);
    for (int i = 0; j->prompts && i < j->n_prompts; i++) {
        free(j->prompts[i].ids);
        free(j->prompts[i].text);
    }
    free(j->prompts);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    free(j->model);
    free(j);
}
