/* attention.c — POST /v1/difftrans/attention: the attention maps of a prompt, for the page.
 * The forward runs on the engine thread between two steps (dt_engine_exclusive), with the
 * reference kernel that keeps every softmax map; only the lower triangles of the heads asked for
 * are copied out, and the reply is written after the engine has gone back to decoding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server.h"

typedef struct {
    const dt_model *m;
    const int *ids;
    int T;
    int l0, l1, h0, h1;          /* layers [l0, l1), output heads [h0, h1) */
    int maps_per_head;           /* 2 (DIFF, V2) or 1 (llama) */
    float *tri;                  /* [layers][heads][maps_per_head][T(T+1)/2] */
    float *tok_lambda;           /* V2: [layers][T][h] */
    float *lambda;               /* DIFF: [L] */
    dt_error err;
} att_job;

static size_t tri_len(int T) {
    return (size_t)T * (size_t)(T + 1) / 2;
}

static int att_run(void *ctx) {
    att_job *a = ctx;
    const dt_config *c = &a->m->cfg;
    dt_run_options ro = {0};
    ro.kernel = DT_ATTENTION_REFERENCE;
    dt_runstate *rs = dt_runstate_create_with(a->m, 1, a->T, &ro, &a->err);
    if (!rs) return -1;
    if (dt_forward(a->m, rs, a->ids, NULL, 1, a->T, NULL, &a->err) != 0) {
        dt_runstate_free(rs);
        return -1;
    }
    const int T = a->T, H = c->num_attention_heads, nh = a->h1 - a->h0, h = H / 2;
    const size_t tl = tri_len(T);
    for (int l = a->l0; l < a->l1; l++) {
        const float *p = dt_runstate_attention(rs, l); /* [1, H, T, T] */
        if (!p) {
            dt_runstate_free(rs);
            return dt_fail(&a->err, "attention: the run state kept no maps");
        }
        for (int j = a->h0; j < a->h1; j++)
            for (int w = 0; w < a->maps_per_head; w++) {
                const float *map = p + (size_t)dt_config_query_head(c, j, w) * T * T;
                float *dst = a->tri + (((size_t)(l - a->l0) * nh + (j - a->h0)) * a->maps_per_head + w) * tl;
                for (int t = 0; t < T; t++) {
                    memcpy(dst, map + (size_t)t * T, (size_t)(t + 1) * sizeof *dst);
                    dst += t + 1;
                }
            }
        if (c->arch == DT_ARCH_DIFF_V2) {
            size_t n = 0;
            const float *lam = dt_runstate_token_lambda(rs, l, &n);
            if (!lam || n != (size_t)T * h) {
                dt_runstate_free(rs);
                return dt_fail(&a->err, "attention: no per-token lambda for layer %d", l);
            }
            memcpy(a->tok_lambda + (size_t)(l - a->l0) * T * h, lam, n * sizeof *lam);
        }
    }
    dt_runstate_free(rs);
    return 0;
}

static int run_exclusive(srv *s, void *ctx) {
    return dt_engine_exclusive(s->engine, att_run, ctx);
}

/* rows of a lower-triangular map as JSON text, 4 significant digits: [[a00],[a10,a11],...] */
static void put_rows(srv_buf *b, const float *x, const float *y, const float *lambda, int lambda_stride, int T) {
    srv_buf_put(b, "[", 1);
    for (int t = 0; t < T; t++) {
        srv_buf_puts(b, t ? ",[" : "[");
        const float lam = lambda ? lambda[(size_t)t * lambda_stride] : 0;
        for (int k = 0; k <= t; k++) {
            const double v = y ? (double)x[k] - (double)lam * y[k] : x[k];
            if (isfinite(v)) srv_buf_printf(b, k ? ",%.4g" : "%.4g", v);
            else srv_buf_puts(b, k ? ",null" : "null");
        }
        srv_buf_put(b, "]", 1);
        x += t + 1;
        if (y) y += t + 1;
    }
    srv_buf_put(b, "]", 1);
}

static int add_raw(cJSON *o, const char *name, srv_buf *b) {
    char *s = srv_buf_take(b, NULL);
    if (!s) return -1;
    cJSON *raw = cJSON_CreateRaw(s);
    free(s);
    return raw && cJSON_AddItemToObject(o, name, raw) ? 0 : -1;
}

/* The prompt's text and where each token begins in it (logprobs' text_offset, in characters): a
 * token that holds part of a character reads as U+FFFD in `tokens`, and the page names the
 * character from these. */
static int add_text(cJSON *root, const dt_model *m, const int *ids, int T) {
    srv_text t;
    dt_error err;
    if (srv_text_init(&t, m, &err) != 0) return -1;
    srv_buf text = {0};
    size_t *at = malloc((size_t)(T > 0 ? T : 1) * sizeof *at);
    int rc = at ? 0 : -1;
    for (int i = 0; i < T && rc == 0; i++) {
        rc = srv_text_push(&t, ids[i], &at[i], &err);
        if (rc == 0) srv_buf_put(&text, t.cur.p, t.n_fresh);
        if (rc == 0) srv_text_revise(&t, at, (size_t)i); /* a ByteFallback run the token ended */
    }
    if (rc == 0) rc = srv_text_end(&t, &err);
    if (rc == 0) {
        srv_buf_put(&text, t.cur.p, t.n_fresh);
        srv_text_revise(&t, at, (size_t)T);
    }
    srv_text_free(&t);
    cJSON *off = rc == 0 ? cJSON_CreateArray() : NULL;
    for (int i = 0; off && i < T; i++)
        if (!cJSON_AddItemToArray(off, cJSON_CreateNumber((double)at[i]))) rc = -1;
    free(at);
    char *s = srv_buf_take(&text, NULL);
    if (rc == 0 && (!s || !off || !cJSON_AddStringToObject(root, "text", s))) rc = -1;
    free(s);
    if (rc == 0 && cJSON_AddItemToObject(root, "text_offset", off)) return 0;
    cJSON_Delete(off);
    return -1;
}

static int build_reply(srv *s, att_job *a, char **json, size_t *json_len) {
    const dt_model *m = s->m;
    const dt_config *c = &m->cfg;
    const int T = a->T, nh = a->h1 - a->h0, h = c->num_attention_heads / 2;
    const size_t tl = tri_len(T);
    int bad = 0;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "difftrans.attention");
    cJSON_AddStringToObject(root, "arch", dt_arch_name(c->arch));
    cJSON *tokens = cJSON_AddArrayToObject(root, "tokens"), *ids = cJSON_AddArrayToObject(root, "ids");
    for (int t = 0; t < T && tokens && ids; t++) {
        char *txt = srv_token_text(m, a->ids[t]);
        bad |= !txt;
        cJSON_AddItemToArray(tokens, cJSON_CreateString(txt ? txt : ""));
        free(txt);
        cJSON_AddItemToArray(ids, cJSON_CreateNumber(a->ids[t]));
    }
    bad |= add_text(root, m, a->ids, T) != 0;
    cJSON_AddNumberToObject(root, "n_layers", c->num_hidden_layers);
    cJSON_AddNumberToObject(root, "n_heads", c->arch == DT_ARCH_LLAMA ? c->num_attention_heads : h);
    if (c->arch == DT_ARCH_DIFF) {
        cJSON *lam = cJSON_AddArrayToObject(root, "lambda");
        for (int l = 0; l < c->num_hidden_layers && lam; l++)
            cJSON_AddItemToArray(lam, cJSON_CreateNumber(dt_model_lambda(m, l)));
    } else cJSON_AddNullToObject(root, "lambda");
    if (c->arch == DT_ARCH_DIFF_V2)
        cJSON_AddStringToObject(root, "v2_pairs", c->v2_pairs == DT_V2_PAIRS_CROSS ? "j,j+h" : "2j,2j+1");
    else cJSON_AddNullToObject(root, "v2_pairs");
    cJSON *layers = cJSON_AddArrayToObject(root, "layers");
    for (int l = a->l0; l < a->l1 && layers && !bad; l++) {
        cJSON *lo = cJSON_CreateObject();
        cJSON_AddItemToArray(layers, lo);
        cJSON_AddNumberToObject(lo, "layer", l);
        const float lambda = dt_model_lambda(m, l);
        if (c->arch == DT_ARCH_DIFF) cJSON_AddNumberToObject(lo, "lambda", lambda);
        else cJSON_AddNullToObject(lo, "lambda");
        cJSON *heads = cJSON_AddArrayToObject(lo, "heads");
        for (int j = a->h0; j < a->h1 && heads && !bad; j++) {
            cJSON *ho = cJSON_CreateObject();
            cJSON_AddItemToArray(heads, ho);
            cJSON_AddNumberToObject(ho, "head", j);
            /* which query heads the maps read: the pairing differs between DIFF, DIFF V2 and its
             * v2_pairs "j,j+h" ablation, and the page titles the maps from this, not its own guess */
            cJSON *qh = cJSON_AddArrayToObject(ho, "query_heads");
            for (int w = 0; w < a->maps_per_head && qh; w++)
                cJSON_AddItemToArray(qh, cJSON_CreateNumber(dt_config_query_head(c, j, w)));
            bad |= !qh;
            const float *m1 = a->tri + (((size_t)(l - a->l0) * nh + (j - a->h0)) * a->maps_per_head) * tl;
            srv_buf b = {0};
            if (c->arch == DT_ARCH_LLAMA) {
                put_rows(&b, m1, NULL, NULL, 0, T);
                bad |= add_raw(ho, "map", &b);
                continue;
            }
            const float *m2 = m1 + tl;
            put_rows(&b, m1, NULL, NULL, 0, T);
            bad |= add_raw(ho, "map1", &b);
            put_rows(&b, m2, NULL, NULL, 0, T);
            bad |= add_raw(ho, "map2", &b);
            if (c->arch == DT_ARCH_DIFF) {
                put_rows(&b, m1, m2, &lambda, 0, T);
                bad |= add_raw(ho, "diff", &b);
            } else {
                const float *tok = a->tok_lambda + (size_t)(l - a->l0) * T * h + j;
                put_rows(&b, m1, m2, tok, h, T);
                bad |= add_raw(ho, "diff", &b);
                cJSON *lt = cJSON_AddArrayToObject(ho, "lambda");
                for (int t = 0; t < T && lt; t++) {
                    char num[32];
                    snprintf(num, sizeof num, "%.4g", (double)tok[(size_t)t * h]);
                    cJSON_AddItemToArray(lt, cJSON_CreateRaw(isfinite(tok[(size_t)t * h]) ? num : "null"));
                }
            }
        }
    }
    char *out = bad ? NULL : cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!out) return -1;
    *json = out;
    *json_len = strlen(out);
    return 0;
}

int srv_attention(srv *s, const char *body, size_t len, char **json, size_t *json_len, srv_err *e) {
    const dt_model *m = s->m;
    const dt_config *c = &m->cfg;
    const int L = c->num_hidden_layers, Hout = c->arch == DT_ARCH_LLAMA ? c->num_attention_heads
                                                                         : c->num_attention_heads / 2;
    *json = NULL;
    if (srv_json_has_nul(body, len)) return srv_bad(e, NULL, SRV_NUL_REFUSED);
    if (!srv_utf8_valid(body, len)) return srv_bad(e, NULL, "the request body is not valid UTF-8");
    cJSON *root = srv_json_parse(body, len, e);
    if (!root) return -1;
    int rc = 0;
    att_job a = {.m = m, .l0 = 0, .l1 = L, .h0 = 0, .h1 = Hout};
    a.maps_per_head = c->arch == DT_ARCH_LLAMA ? 1 : 2;
    int *ids = NULL;
    size_t n = 0;
    const cJSON *p = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "prompt") : NULL;
    if (!cJSON_IsObject(root)) rc = srv_bad(e, NULL, "the request body must be a JSON object");
    else if (cJSON_IsString(p)) {
        dt_error err;
        if (dt_model_encode_prompt(m, p->valuestring, &ids, &n, &err) != 0) rc = srv_fail_dt(e, &err, "prompt");
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0) {
        n = (size_t)cJSON_GetArraySize(p);
        ids = malloc(n * sizeof *ids);
        if (!ids) rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        size_t i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, p) {
            if (rc != 0) break;
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble))
                rc = srv_bad(e, "prompt", "prompt[%zu]: expected a token id (an integer)", i);
            else if (it->valuedouble < 0 || it->valuedouble >= c->vocab_size)
                rc = srv_fail(e, 400, "invalid_request_error", "invalid_token", "prompt",
                              "prompt: token id %.0f at index %zu is outside the vocabulary of %d tokens",
                              it->valuedouble, i, c->vocab_size);
            else ids[i++] = (int)it->valuedouble;
        }
    } else rc = srv_bad(e, "prompt", "prompt: required, a string or a non-empty list of token ids");
    const int limit = s->opt.attention_max_tokens < c->max_position_embeddings ? s->opt.attention_max_tokens
                                                                               : c->max_position_embeddings;
    if (rc == 0 && n > (size_t)limit)
        rc = srv_bad(e, "prompt", "the prompt has %zu tokens, more than the %d an attention reply may cover (%s)", n,
                     limit, limit == s->opt.attention_max_tokens ? "--attention-max-tokens"
                                                                 : "the model's max_position_embeddings");
    static const char *const names[2] = {"layer", "head"};
    const int bounds[2] = {L, Hout};
    int *lo[2] = {&a.l0, &a.h0}, *hi[2] = {&a.l1, &a.h1};
    for (int k = 0; k < 2 && rc == 0; k++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, names[k]);
        if (!f || cJSON_IsNull(f)) continue;
        if (!cJSON_IsNumber(f) || f->valuedouble != floor(f->valuedouble))
            rc = srv_bad(e, names[k], "%s: expected an integer", names[k]);
        else if (f->valuedouble < 0 || f->valuedouble >= bounds[k])
            rc = srv_bad(e, names[k], "%s %.0f: out of range, the model has %d (0..%d)", names[k], f->valuedouble,
                         bounds[k], bounds[k] - 1);
        else {
            *lo[k] = (int)f->valuedouble;
            *hi[k] = *lo[k] + 1;
        }
    }
    cJSON_Delete(root);
    if (rc == 0) {
        a.ids = ids;
        a.T = (int)n;
        const size_t cells = (size_t)(a.l1 - a.l0) * (a.h1 - a.h0) * a.maps_per_head * tri_len(a.T);
        a.tri = malloc(cells * sizeof *a.tri);
        if (c->arch == DT_ARCH_DIFF_V2) a.tok_lambda = malloc((size_t)(a.l1 - a.l0) * a.T * (Hout) * sizeof(float));
        if (!a.tri || (c->arch == DT_ARCH_DIFF_V2 && !a.tok_lambda))
            rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory for the attention maps");
    }
    if (rc == 0) {
        a.err.msg[0] = '\0';
        a.err.code = DT_ERR_NONE;
        rc = srv_with_engine(s, run_exclusive, &a, e);
        if (rc != 0 && a.err.code != DT_ERR_NONE) srv_fail_dt(e, &a.err, NULL);
    }
    if (rc == 0 && build_reply(s, &a, json, json_len) != 0)
        rc = srv_fail(e, 500, "server_error", NULL, NULL, "out of memory writing the attention reply");
    free(a.tri);
    free(a.tok_lambda);
    free(ids);
    return rc;
}
