/* needle_io.c — the multi-needle task's files: the corpus file, samples as JSON, writing a data
 * set, loading a test set back (every sample re-checked by dt_needle_sample_check). The format of a
 * sample is described in needle_generate.c.
 *
 * ---------------------------------------------------------------- files
 *
 * DIR/train.txt   the training samples' text, each followed by "\n\n" (for `difftrans train --data`).
 * DIR/test.jsonl  one JSON object a line per test sample:
 *     {"id", "context_length", "depth", "needle_depth", "seed" (string), "text_length",
 *      "needles": [{"key", "value", "offset", "length", "value_offset", "value_length"}] by offset,
 *      "queries": [{"key", "value", "needle" (index into needles), "question_offset",
 *                   "prompt_end_offset", "answer_length"}] in asking order,
 *      "text"}
 *   offset/length: the needle sentence; value_offset/value_length: the value inside it, the
 *   answer span for attention analyses; question_offset: the 'Q' of "Question:";
 *   prompt_end_offset: where the expected answer begins.
 * DIR/needle.json the parameters, the seeds, the generator version, the format strings and "model":
 *                 what the set was sized for (needle generate --model): {"path", "max_position_embeddings",
 *                 "tokenizer_fingerprint" (dt_vocab_fingerprint; null: bytes)}, or null.
 */
#include "analysis/needle.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "base/base.h"

/* ---------------------------------------------------------------- corpus file */

int dt_needle_corpus_load(dt_needle_corpus *c, const char *path, dt_error *err) {
    memset(c, 0, sizeof *c);
    struct stat sb;
    dt_error why;
    int fd = open_regular_fd(path, &sb, &why);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) close(fd);
        if (e == EINVAL) return *err = why, -1; /* not a regular file */
        return dt_fail_io(err, "%s: cannot open corpus: %s", path, strerror(e));
    }
    const size_t size = (size_t)sb.st_size;
    unsigned char *raw = malloc(size ? size : 1);
    if (!raw) {
        fclose(f);
        return dt_fail_oom(err, "%s: out of memory reading %zu bytes", path, size);
    }
    if (size && fread(raw, 1, size, f) != size) {
        int saved = errno;
        free(raw);
        fclose(f);
        return dt_fail_io(err, "%s: cannot read %zu bytes: %s", path, size, strerror(saved));
    }
    fclose(f);
    int rc = dt_needle_corpus_from_bytes(c, raw, size, path, err);
    free(raw);
    return rc;
}

/* ---------------------------------------------------------------- JSON */

/* 64-bit seeds go into JSON as decimal strings. Returns 1 when added. */
static int add_seed(cJSON *o, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return cJSON_AddStringToObject(o, key, buf) != NULL;
}

char *dt_needle_sample_to_json(const dt_needle_sample *s) {
    cJSON *o = cJSON_CreateObject(), *needles = NULL, *queries = NULL;
    int ok = o && cJSON_AddNumberToObject(o, "id", (double)s->id) &&
             cJSON_AddNumberToObject(o, "context_length", s->context_length) &&
             cJSON_AddNumberToObject(o, "depth", s->depth) &&
             cJSON_AddNumberToObject(o, "needle_depth", s->needle_depth) && add_seed(o, "seed", s->seed) &&
             cJSON_AddNumberToObject(o, "text_length", s->text_length) &&
         (needles = cJSON_AddArrayToObject(o, "needles")) && (queries = cJSON_AddArrayToObject(o, "queries"));
    for (int i = 0; ok && i < s->n_needles; i++) {
        const dt_needle_needle *nd = &s->needles[i];
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddItemToArray(needles, e);
        if (!ok) cJSON_Delete(e);
        ok = ok && cJSON_AddStringToObject(e, "key", nd->key) && cJSON_AddStringToObject(e, "value", nd->value) &&
             cJSON_AddNumberToObject(e, "offset", nd->offset) && cJSON_AddNumberToObject(e, "length", nd->length) &&
             cJSON_AddNumberToObject(e, "value_offset", nd->value_offset) &&
             cJSON_AddNumberToObject(e, "value_length", nd->value_length);
    }
    for (int r = 0; ok && r < s->n_queries; r++) {
        const dt_needle_query *q = &s->queries[r];
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddItemToArray(queries, e);
        if (!ok) cJSON_Delete(e);
        ok = ok && cJSON_AddStringToObject(e, "key", s->needles[q->needle].key) &&
             cJSON_AddStringToObject(e, "value", s->needles[q->needle].value) &&
             cJSON_AddNumberToObject(e, "needle", q->needle) &&
             cJSON_AddNumberToObject(e, "question_offset", q->question_offset) &&
             cJSON_AddNumberToObject(e, "prompt_end_offset", q->prompt_end_offset) &&
             cJSON_AddNumberToObject(e, "answer_length", q->answer_length);
    }
    ok = ok && cJSON_AddStringToObject(o, "text", s->text);
    char *line = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return line;
}

/* Getters: each names where and which key went wrong. */
static int get_int(const cJSON *o, const char *key, long lo, long hi, long *out, const char *where, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return dt_fail_format(err, "%s: missing key '%s'", where, key);
    if (!cJSON_IsNumber(v)) return dt_fail_format(err, "%s: key '%s' must be a number", where, key);
    const double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return dt_fail_format(err, "%s: key '%s' must be an integer (got %g)", where, key, d);
    if (d < (double)lo || d > (double)hi)
        return dt_fail_format(err, "%s: key '%s' = %.0f: must be in %ld..%ld", where, key, d, lo, hi);
    *out = (long)d;
    return 0;
}

static int get_i(const cJSON *o, const char *key, long lo, long hi, int *out, const char *where, dt_error *err) {
    long v;
    if (get_int(o, key, lo, hi, &v, where, err) != 0) return -1;
    *out = (int)v;
    return 0;
}

static int get_str(const cJSON *o, const char *key, char *out, size_t cap, const char *where, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return dt_fail_format(err, "%s: missing key '%s'", where, key);
    if (!cJSON_IsString(v) || !v->valuestring) return dt_fail_format(err, "%s: key '%s' must be a string", where, key);
    const size_t len = strlen(v->valuestring);
    if (len == 0 || len >= cap)
        return dt_fail_format(err, "%s: key '%s': %zu bytes, must be 1..%zu", where, key, len, cap - 1);
    memcpy(out, v->valuestring, len + 1);
    return 0;
}

static int sample_from_json(const cJSON *o, dt_needle_sample *s, const char *where, dt_error *err) {
    char at[4300];
    long id;
    if (!cJSON_IsObject(o)) return dt_fail_format(err, "%s: expected a JSON object", where);
    if (get_int(o, "id", 0, LONG_MAX / 2, &id, where, err) ||
        get_i(o, "context_length", 1, DT_NEEDLE_MAX_CONTEXT, &s->context_length, where, err))
        return -1;
    s->id = id;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "depth");
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0.0 && v->valuedouble <= 1.0))
        return dt_fail_format(err, "%s: key 'depth' must be a number in [0, 1]", where);
    s->depth = v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(o, "needle_depth");
    s->needle_depth = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    v = cJSON_GetObjectItemCaseSensitive(o, "seed");
    if (v) {
        const char *str = cJSON_IsString(v) ? v->valuestring : NULL;
        char *end = NULL;
        errno = 0;
        unsigned long long seed = str && *str >= '0' && *str <= '9' ? strtoull(str, &end, 10) : 0;
        if (!str || !end || errno || *end) return dt_fail_format(err, "%s: key 'seed' must be a decimal string", where);
        s->seed = seed;
    }
    v = cJSON_GetObjectItemCaseSensitive(o, "text");
    if (!cJSON_IsString(v) || !v->valuestring) return dt_fail_format(err, "%s: key 'text' must be a string", where);
    const size_t tlen = strlen(v->valuestring);
    if (tlen > (size_t)INT_MAX / 2) return dt_fail_format(err, "%s: text of %zu bytes is too long", where, tlen);
    if (!(s->text = malloc(tlen + 1))) return dt_fail_oom(err, "%s: out of memory (%zu bytes of text)", where, tlen);
    memcpy(s->text, v->valuestring, tlen + 1);
    s->text_length = (int)tlen;
    int declared;
    if (get_i(o, "text_length", 0, INT_MAX, &declared, where, err)) return -1;
    if (declared != s->text_length)
        return dt_fail_format(err, "%s: text is %d bytes, but text_length says %d (a \\u0000 inside?)", where,
                              s->text_length, declared);

    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(o, "needles");
    if (!cJSON_IsArray(arr)) return dt_fail_format(err, "%s: key 'needles' must be an array", where);
    s->n_needles = cJSON_GetArraySize(arr);
    if (s->n_needles < 1 || s->n_needles > DT_NEEDLE_MAX_NEEDLES)
        return dt_fail_format(err, "%s: %d needles: must be 1..%d", where, s->n_needles, DT_NEEDLE_MAX_NEEDLES);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        dt_needle_needle *nd = &s->needles[i];
        snprintf(at, sizeof at, "%s needles[%d]", where, i);
        if (!cJSON_IsObject(e)) return dt_fail_format(err, "%s: expected an object", at);
        if (get_str(e, "key", nd->key, sizeof nd->key, at, err) ||
            get_str(e, "value", nd->value, sizeof nd->value, at, err) ||
            get_i(e, "offset", 0, INT_MAX, &nd->offset, at, err) || get_i(e, "length", 1, INT_MAX, &nd->length, at, err) ||
            get_i(e, "value_offset", 0, INT_MAX, &nd->value_offset, at, err) ||
            get_i(e, "value_length", 1, DT_NEEDLE_VALUE_CAP, &nd->value_length, at, err))
            return -1;
        i++;
    }
    arr = cJSON_GetObjectItemCaseSensitive(o, "queries");
    if (!cJSON_IsArray(arr)) return dt_fail_format(err, "%s: key 'queries' must be an array", where);
    s->n_queries = cJSON_GetArraySize(arr);
    if (s->n_queries < 1 || s->n_queries > s->n_needles)
        return dt_fail_format(err, "%s: %d queries: must be 1..needles (%d)", where, s->n_queries, s->n_needles);
    i = 0;
    cJSON_ArrayForEach(e, arr) {
        dt_needle_query *q = &s->queries[i];
        char key[DT_NEEDLE_KEY_CAP + 1], value[DT_NEEDLE_VALUE_CAP + 1];
        snprintf(at, sizeof at, "%s queries[%d]", where, i);
        if (!cJSON_IsObject(e)) return dt_fail_format(err, "%s: expected an object", at);
        if (get_str(e, "key", key, sizeof key, at, err) || get_str(e, "value", value, sizeof value, at, err) ||
            get_i(e, "needle", 0, s->n_needles - 1, &q->needle, at, err) ||
            get_i(e, "question_offset", 1, INT_MAX, &q->question_offset, at, err) ||
            get_i(e, "prompt_end_offset", 1, INT_MAX, &q->prompt_end_offset, at, err) ||
            get_i(e, "answer_length", 1, DT_NEEDLE_VALUE_CAP, &q->answer_length, at, err))
            return -1;
        if (strcmp(key, s->needles[q->needle].key) || strcmp(value, s->needles[q->needle].value))
            return dt_fail_format(err, "%s: key/value '%s'/'%s' differ from needles[%d] ('%s'/'%s')", at, key, value,
                                  q->needle, s->needles[q->needle].key, s->needles[q->needle].value);
        i++;
    }
    return dt_needle_sample_check(s, where, err);
}

/* ---------------------------------------------------------------- writing a data set */

static int write_bytes(FILE *f, const void *data, size_t n, const char *path, dt_error *err) {
    if (n && fwrite(data, 1, n, f) != n) return dt_fail_io(err, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

/* Generates one set (train or test) into an open file. */
static int write_set(const dt_needle_params *p, const dt_needle_corpus *corpus, uint64_t stream, int n, int jsonl, FILE *f,
                     const char *path, size_t *bytes, dt_error *err) {
    *bytes = 0;
    for (int i = 0; i < n; i++) {
        int context_length;
        double depth;
        dt_needle_cell_of(p, i, &context_length, &depth);
        dt_needle_sample s;
        const uint64_t seed = dt_rng_next(&stream);
        if (dt_needle_generate_sample(p, context_length, depth, seed, corpus, &s, err) != 0) return -1;
        s.id = i;
        int rc;
        if (jsonl) {
            char *line = dt_needle_sample_to_json(&s);
            rc = line ? write_bytes(f, line, strlen(line), path, err) || write_bytes(f, "\n", 1, path, err)
                      : dt_fail_oom(err, "%s: out of memory writing sample %d", path, i);
            if (line) *bytes += strlen(line) + 1;
            free(line);
        } else {
            rc = write_bytes(f, s.text, (size_t)s.text_length, path, err) || write_bytes(f, "\n\n", 2, path, err);
            *bytes += (size_t)s.text_length + 2;
        }
        dt_needle_sample_free(&s);
        if (rc) return -1;
    }
    return 0;
}

/* needle.json's "model": what the set was sized for, null when for no model. */
static int add_model(cJSON *o, const dt_needle_model *m) {
    if (!m) return cJSON_AddNullToObject(o, "model") != NULL;
    cJSON *j = cJSON_AddObjectToObject(o, "model");
    return j && cJSON_AddStringToObject(j, "path", m->path) &&
           cJSON_AddNumberToObject(j, "max_position_embeddings", m->max_position_embeddings) &&
           (m->tokenizer[0] ? cJSON_AddStringToObject(j, "tokenizer_fingerprint", m->tokenizer)
                            : cJSON_AddNullToObject(j, "tokenizer_fingerprint"));
}

static cJSON *params_json(const dt_needle_params *p, const dt_needle_corpus *corpus, const char *corpus_path,
                          const dt_needle_model *model) {
    uint64_t tr, te;
    dt_needle_stream_seeds(p->seed, &tr, &te);
    cJSON *o = cJSON_CreateObject(), *fmt = NULL, *ctx = NULL, *dep = NULL;
    int ok = o && cJSON_AddStringToObject(o, "generator", "difftrans needle") &&
             cJSON_AddNumberToObject(o, "version", DT_NEEDLE_GENERATOR_VERSION) && add_seed(o, "seed", p->seed) &&
             add_seed(o, "train_seed", tr) && add_seed(o, "test_seed", te) && (ctx = cJSON_AddArrayToObject(o, "contexts")) && (dep = cJSON_AddArrayToObject(o, "depths"));
    for (int i = 0; ok && i < p->n_contexts; i++) {
        cJSON *v = cJSON_CreateNumber(p->contexts[i]);
        ok = v && cJSON_AddItemToArray(ctx, v);
        if (!ok) cJSON_Delete(v);
    }
    for (int i = 0; ok && i < p->n_depths; i++) {
        cJSON *v = cJSON_CreateNumber(p->depths[i]);
        ok = v && cJSON_AddItemToArray(dep, v);
        if (!ok) cJSON_Delete(v);
    }
    ok = ok && cJSON_AddNumberToObject(o, "needles", p->needles) && cJSON_AddNumberToObject(o, "queries", p->queries) &&
         cJSON_AddNumberToObject(o, "train", p->n_train) && cJSON_AddNumberToObject(o, "test", p->n_test) &&
         cJSON_AddStringToObject(o, "corpus", corpus_path ? corpus_path : "") &&
         cJSON_AddNumberToObject(o, "corpus_bytes", (double)corpus->n) && add_model(o, model) &&
         (fmt = cJSON_AddObjectToObject(o, "format")) &&
         cJSON_AddStringToObject(fmt, "needle", DT_NEEDLE_SENTENCE_HEAD "{key}" DT_NEEDLE_SENTENCE_MID "{value}.") &&
         cJSON_AddStringToObject(fmt, "query", DT_NEEDLE_QUESTION_HEAD "{key}" DT_NEEDLE_QUESTION_TAIL "{value}") &&
         cJSON_AddStringToObject(fmt, "keys", "lowercase a-z words of 4..8 letters, distinct within a sample") &&
         cJSON_AddStringToObject(fmt, "values", "5-digit numbers 10000..99999, distinct within a sample") &&
         cJSON_AddStringToObject(fmt, "depth",
                                 "the first queried needle's sentence starts at the reachable offset (line or "
                                 "sentence starts of the filler) nearest to round(depth*(context_length - "
                                 "its length)); the other needles at random line or sentence starts") &&
         cJSON_AddStringToObject(fmt, "train.txt", "sample text + \"\\n\\n\" per sample") &&
         cJSON_AddStringToObject(fmt, "cells", "sample i: contexts[i / n_depths % n_contexts], depths[i % n_depths]");
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int dt_needle_write_dataset(const dt_needle_params *p, const dt_needle_corpus *corpus, const char *corpus_path,
                         const char *dir, dt_error *err) {
    return dt_needle_write_dataset_for(p, corpus, corpus_path, NULL, dir, err);
}

int dt_needle_model_of(const dt_model *m, const char *path, dt_needle_model *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    if (!path) return dt_fail(err, "path: the model's directory is required");
    if (snprintf(out->path, sizeof out->path, "%s", path) >= (int)sizeof out->path)
        return dt_fail(err, "%s: path too long", path);
    out->max_position_embeddings = m->cfg.max_position_embeddings;
    return dt_vocab_fingerprint(&m->vocab, out->tokenizer, err);
}

int dt_needle_sized_for(const char *path, dt_needle_model *model, dt_error *err) {
    memset(model, 0, sizeof *model);
    struct stat sb;
    char json[4200];
    const char *slash = strrchr(path, '/');
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) ? dt_pathf(json, sizeof json, err, "%s/needle.json", path)
        : slash ? dt_pathf(json, sizeof json, err, "%.*s/needle.json", (int)(slash - path), path)
                : dt_pathf(json, sizeof json, err, "needle.json"))
        return -1;
    if (access(json, F_OK) != 0) return 0; /* a test.jsonl alone */
    cJSON *o = json_load_file(json, err);
    if (!o) return -1;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "model");
    const cJSON *mp = cJSON_GetObjectItemCaseSensitive(m, "path"),
                *mx = cJSON_GetObjectItemCaseSensitive(m, "max_position_embeddings"),
                *mt = cJSON_GetObjectItemCaseSensitive(m, "tokenizer_fingerprint");
    int rc = 0;
    if (!m || cJSON_IsNull(m)) rc = 0; /* sized for no model, or written before the record */
    else if (!cJSON_IsString(mp) || !cJSON_IsNumber(mx) || !(mx->valuedouble >= 1 && mx->valuedouble <= INT_MAX) ||
             !(cJSON_IsNull(mt) || (cJSON_IsString(mt) && strlen(mt->valuestring) == 16)) ||
             strlen(mp->valuestring) >= sizeof model->path)
        rc = dt_fail_format(err, "%s: model: not a path, max_position_embeddings and tokenizer_fingerprint (16 hex "
                                 "digits or null)", json);
    else {
        snprintf(model->path, sizeof model->path, "%s", mp->valuestring);
        model->max_position_embeddings = (int)mx->valuedouble;
        if (cJSON_IsString(mt)) memcpy(model->tokenizer, mt->valuestring, 17);
        rc = 1;
    }
    cJSON_Delete(o);
    return rc;
}

int dt_needle_write_dataset_for(const dt_needle_params *p, const dt_needle_corpus *corpus, const char *corpus_path,
                                const dt_needle_model *model, const char *dir, dt_error *err) {
    if (dt_needle_params_validate(p, err) != 0) return -1;
    if (!corpus || !corpus->bytes || corpus->n == 0) return dt_fail(err, "corpus is empty");
    if (dir_ensure(dir, err) != 0) return -1;

    uint64_t tr, te;
    dt_needle_stream_seeds(p->seed, &tr, &te);
    char path[4200];
    dt_atomic_file f;
    size_t bytes;
    if (dt_pathf(path, sizeof path, err, "%s/train.txt", dir) || dt_atomic_open(&f, path, err) != 0) return -1;
    if (write_set(p, corpus, tr, p->n_train, 0, f.fp, path, &bytes, err) != 0) {
        dt_atomic_abort(&f);
        return -1;
    }
    if (dt_atomic_commit(&f, err) != 0) return -1;
    if (dt_pathf(path, sizeof path, err, "%s/test.jsonl", dir) || dt_atomic_open(&f, path, err) != 0) return -1;
    if (write_set(p, corpus, te, p->n_test, 1, f.fp, path, &bytes, err) != 0) {
        dt_atomic_abort(&f);
        return -1;
    }
    if (dt_atomic_commit(&f, err) != 0) return -1;

    if (dt_pathf(path, sizeof path, err, "%s/needle.json", dir)) return -1;
    cJSON *o = params_json(p, corpus, corpus_path, model);
    char *json = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!json) return dt_fail_oom(err, "%s: out of memory", path);
    if (dt_atomic_open(&f, path, err) != 0) {
        free(json);
        return -1;
    }
    int rc = write_bytes(f.fp, json, strlen(json), path, err) || write_bytes(f.fp, "\n", 1, path, err);
    free(json);
    if (rc) {
        dt_atomic_abort(&f);
        return -1;
    }
    return dt_atomic_commit(&f, err);
}

/* ---------------------------------------------------------------- loading a test set */

void dt_needle_testset_free(dt_needle_testset *ts) {
    for (int i = 0; ts->samples && i < ts->n; i++) dt_needle_sample_free(&ts->samples[i]);
    free(ts->samples);
    memset(ts, 0, sizeof *ts);
}

int dt_needle_load_testset(dt_needle_testset *ts, const char *path, dt_error *err) {
    memset(ts, 0, sizeof *ts);
    struct stat sb;
    if (stat(path, &sb) != 0) return dt_fail_io(err, "%s: cannot open test set: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode) ? dt_pathf(ts->path, sizeof ts->path, err, "%s/test.jsonl", path)
                            : dt_pathf(ts->path, sizeof ts->path, err, "%s", path))
        return -1;
    dt_error why;
    FILE *f = open_regular_file(ts->path, &why);
    if (!f) {
        if (errno == EINVAL) return *err = why, -1; /* not a regular file */
        return dt_fail_io(err, "%s: cannot open test set: %s", ts->path, strerror(errno));
    }
    char *line = NULL, where[4200];
    size_t cap_line = 0;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    ssize_t len;
    errno = 0;
    while (rc == 0 && (len = getline(&line, &cap_line, f)) != -1) {
        lineno++;
        ssize_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\n' || line[k] == '\r')) k++;
        if (k == len) continue; /* blank line */
        snprintf(where, sizeof where, "%s:%d", ts->path, lineno);
        /* the JSON parser would stop at a NUL and take the rest of the line (another sample) as gone */
        if (memchr(line, '\0', (size_t)len)) {
            rc = dt_fail_format(err, "%s: a NUL byte inside the line (not a test set written by needle generate?)",
                                where);
            break;
        }
        if (ts->n == DT_NEEDLE_MAX_SAMPLES) {
            rc = dt_fail_format(err, "%s: more than %d samples", where, DT_NEEDLE_MAX_SAMPLES);
            break;
        }
        if (grow_array(&ts->samples, &cap, (size_t)ts->n + 1, sizeof *ts->samples, 64) != 0) {
            rc = dt_fail_oom(err, "%s: out of memory", where);
            break;
        }
        dt_needle_sample *s = &ts->samples[ts->n];
        memset(s, 0, sizeof *s);
        ts->n++; /* counted now so that dt_needle_testset_free releases its text on failure */
        s->line = lineno;
        cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
        if (!o && json_text_valid(line, (size_t)len)) rc = dt_fail_oom(err, "%s: out of memory parsing it", where);
        else if (!o) rc = dt_fail_format(err, "%s: not valid JSON", where);
        else rc = sample_from_json(o, s, where, err);
        cJSON_Delete(o);
    }
    if (rc == 0 && ferror(f)) rc = dt_fail_io(err, "%s: read error: %s", ts->path, strerror(errno));
    free(line);
    fclose(f);
    if (rc == 0 && ts->n == 0) rc = dt_fail_format(err, "%s: no samples", ts->path);
    if (rc != 0) {
        char keep[4096];
        memcpy(keep, ts->path, sizeof keep);
        dt_needle_testset_free(ts);
        memcpy(ts->path, keep, sizeof keep);
        return -1;
    }
    return 0;
}

