/* postprocessors.c — the special tokens added around an encoded sequence when special tokens are
 * requested: TemplateProcessing (its "single" template), BertProcessing / RobertaProcessing
 * (cls … sep), ByteLevel (offsets only: no ids), Sequence. All reduce to ids before and after. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok.h"

static int push(int32_t **v, int *n, int32_t id) {
    int32_t *p = realloc(*v, (size_t)(*n + 1) * sizeof *p);
    if (!p) return -1;
    p[(*n)++] = id;
    *v = p;
    return 0;
}

static int template_ids(const cJSON *specials, const char *name, tk_post *p, int before, const char *path,
                        dt_error *err) {
    const cJSON *sp = cJSON_IsObject(specials) ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL;
    const cJSON *ids = cJSON_IsObject(sp) ? cJSON_GetObjectItemCaseSensitive(sp, "ids") : NULL;
    if (!cJSON_IsArray(ids))
        return dt_fail_format(
            err, "%s: post_processor TemplateProcessing: special token \"%.100s\" is not in special_tokens", path,
            name);
    const cJSON *e;
    cJSON_ArrayForEach(e, ids) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 2147483647.0)
            return dt_fail_format(err, "%s: post_processor TemplateProcessing: special token \"%.100s\" has a bad id",
                                  path, name);
        int rc = before ? push(&p->prefix, &p->n_prefix, (int32_t)e->valuedouble)
                        : push(&p->suffix, &p->n_suffix, (int32_t)e->valuedouble);
        if (rc != 0) return dt_fail_oom(err, "%s: out of memory", path);
    }
    return 0;
}

static int parse_template(tk_post *p, const cJSON *j, const char *path, dt_error *err) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
    if (!cJSON_IsArray(single))
        return dt_fail_format(err, "%s: post_processor TemplateProcessing lacks the \"single\" template", path);
    int seen_a = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, single) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(item, "SpecialToken");
        const cJSON *sq = cJSON_GetObjectItemCaseSensitive(item, "Sequence");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(st ? st : sq, "id");
        if (!cJSON_IsString(id))
            return dt_fail_format(err,
                                  "%s: post_processor TemplateProcessing: a \"single\" item is neither "
                                  "SpecialToken nor Sequence",
                                  path);
        if (sq) {
            if (strcmp(id->valuestring, "A") != 0 || seen_a)
                return dt_fail_format(err,
                                      "%s: post_processor TemplateProcessing: the \"single\" template must hold "
                                      "sequence A once",
                                      path);
            seen_a = 1;
        } else if (template_ids(specials, id->valuestring, p, !seen_a, path, err) != 0)
            return -1;
    }
    if (!seen_a)
        return dt_fail_format(err, "%s: post_processor TemplateProcessing: the \"single\" template lacks sequence A",
                              path);
    return 0;
}

/* "cls": ["<s>", 0] */
static int pair_id(const cJSON *j, const char *key, int32_t *id, const char *what, const char *path, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !cJSON_IsNumber(v->child->next) ||
        v->child->next->valuedouble < 0)
        return dt_fail_format(err, "%s: %s: \"%s\" must be [token, id]", path, what, key);
    *id = (int32_t)v->child->next->valuedouble;
    return 0;
}

int tk_post_parse(tk_post *p, const cJSON *j, const char *path, dt_error *err) {
    const char *type = tk_json_type(j, "post_processor", path, err);
    if (!type) return -1;
    if (!strcmp(type, "TemplateProcessing")) {
        /* applied on top of what earlier processors of a Sequence added */
        tk_post t = {0};
        if (parse_template(&t, j, path, err) != 0) {
            tk_post_free(&t);
            return -1;
        }
        int rc = 0;
        for (int i = 0; rc == 0 && i < p->n_prefix; i++) rc = push(&t.prefix, &t.n_prefix, p->prefix[i]);
        for (int i = 0; rc == 0 && i < t.n_suffix; i++) rc = push(&p->suffix, &p->n_suffix, t.suffix[i]);
        if (rc == 0) {
            free(p->prefix);
            p->prefix = t.prefix;
            p->n_prefix = t.n_prefix;
            t.prefix = NULL;
        }
        tk_post_free(&t);
        return rc == 0 ? 0 : dt_fail_oom(err, "%s: out of memory", path);
    }
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        int32_t cls, sep;
        char what[64];
        snprintf(what, sizeof what, "post_processor %s", type);
        if (pair_id(j, "cls", &cls, what, path, err) != 0 || pair_id(j, "sep", &sep, what, path, err) != 0) return -1;
        int32_t *v = realloc(p->prefix, (size_t)(p->n_prefix + 1) * sizeof *v);
        if (!v) return dt_fail_oom(err, "%s: out of memory", path);
        memmove(v + 1, v, (size_t)p->n_prefix * sizeof *v);
        v[0] = cls;
        p->prefix = v;
        p->n_prefix++;
        if (push(&p->suffix, &p->n_suffix, sep) != 0) return dt_fail_oom(err, "%s: out of memory", path);
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "processors");
        if (!cJSON_IsArray(arr)) return dt_fail_format(err, "%s: post_processor Sequence lacks \"processors\"", path);
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            if (tk_post_parse(p, it, path, err) != 0) return -1;
        }
        return 0;
    }
    return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                        "%s: post_processor \"%s\" is not supported (supported: TemplateProcessing, BertProcessing, "
                        "RobertaProcessing, ByteLevel, Sequence)",
                        path, type);
}

void tk_post_free(tk_post *p) {
    free(p->prefix);
    free(p->suffix);
    memset(p, 0, sizeof *p);
}
