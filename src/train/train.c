/* train.c — the training loop: batches from a byte-level text file, AdamW with warm-up and
 * cosine decay, gradient clipping, held-out validation, JSONL metrics, atomic checkpoints and
 * exact resume (the optimizer state and the data RNG are saved with the model).
 *
 * Files in the output directory:
 *   config.json, model.safetensors, difftrans_tokenizer.json  the model (a normal checkpoint)
 *   optimizer.safetensors                                     AdamW moments "adam.m", "adam.v"
 *   train_state.json                                          step, RNG and hyper-parameters
 *   metrics.jsonl                                             one line per step
 * A checkpoint replaces the previous one as a whole (checkpoint.h).
 *
 * Data parallel (a dt_comm of N ranks): every rank draws the same global batch and computes its
 * rows of it; train_step_run() sums the gradients over the ranks. Rank 0 alone writes the output
 * directory, after gathering the sharded optimizer state (ZeRO-1), so a checkpoint does not
 * depend on N and resumes on any N. Every failure that could leave a rank waiting for the others
 * is agreed on by all ranks (comm_agree), so that they stop together.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "difftrans.h"
#include "model/model_quant.h"
#include "internal.h"
#include "base/base.h"
#include "dist/comm.h"
#include "train/checkpoint.h"
#include "train/optim.h"

/* train_state.json is about 600 bytes; the data path in it is at most 4 KiB. */
#define MAX_TRAIN_STATE_BYTES (64u << 10)
#include "train/step.h"

void dt_train_defaults(dt_train_options *o) {
    memset(o, 0, sizeof *o);
    o->steps = 1000;
    o->batch = 8;
    o->grad_accum = 1;
    o->seq = 128;
    o->lr = 1e-3f;
    o->min_lr_ratio = 0.1f;
    o->warmup = 50;
    o->weight_decay = 0.1f;
    o->grad_clip = 1.0f;
    o->beta1 = 0.9f;
    o->beta2 = 0.95f;
    o->adam_eps = 1e-8f;
    o->seed = 1337;
    o->eval_interval = 100;
    o->eval_batches = 8;
    o->save_interval = 500;
    o->val_fraction = 0.1f;
}

void dt_train_resume_defaults(dt_train_options *o) {
    dt_train_defaults(o);
    o->resume = 1;
    o->steps = 0;      /* the saved run's (load_train_state) */
    o->grad_accum = 0; /* the saved run's */
}

size_t dt_train_split(size_t n, float val_fraction) { return n - (size_t)((double)n * val_fraction); }

typedef struct {
    dt_model model;
    train_step ts;               /* gradients, optimizer state and the micro-batch run state */
    dt_comm *comm;
    int rank, ranks;
    int step;                    /* steps done */
    uint64_t rng;                /* data sampling state */
    int *tokens;
    size_t n_tokens, n_train;    /* tokens [0, n_train) train, [n_train, n_tokens) validation */
    const char *tokenizer_dir;   /* the tokenizer a fresh run gives its model (NULL: bytes); the train
                                    state records it */
    char tokenizer_buf[4200];
    int *in, *tg;                /* [B/N · T] this rank's rows of the batch */
    double elapsed;              /* seconds of training so far (for the metrics) */
    /* what the state file records of the data, so that a resume on other data is refused */
    uint64_t data_fingerprint, saved_fingerprint;
    size_t saved_n_tokens;       /* 0: a state file from before the fingerprint */
    char data_abs[4096];         /* the data's absolute path, which the state file records */
    int lock_fd;                 /* rank 0: holds the output directory's lock (checkpoint_lock); -1: none */
    /* sums over the timed steps (all but the first) for the closing summary */
    int timed;
    double step_s, compute_s, wait_s, exposed_s, comm_s, spread;
} trainer;

/* ---------------------------------------------------------------- state files */

static cJSON *options_to_json(const dt_train_options *o, const trainer *tr) {
    cJSON *j = cJSON_CreateObject();
    char rng[32];
    int ok = j != NULL;
    snprintf(rng, sizeof rng, "%llu", (unsigned long long)tr->rng);
    ok = ok && cJSON_AddNumberToObject(j, "step", tr->step);
    ok = ok && cJSON_AddStringToObject(j, "rng", rng); /* a string: JSON numbers lose 64-bit precision */
    ok = ok && cJSON_AddNumberToObject(j, "elapsed_seconds", tr->elapsed);
    ok = ok && (!o->data_path || cJSON_AddStringToObject(j, "data", o->data_path));
    ok = ok && (!o->tokenizer_path || cJSON_AddStringToObject(j, "tokenizer", o->tokenizer_path));
    ok = ok && (!o->tokens_path || cJSON_AddStringToObject(j, "tokens", o->tokens_path));
    ok = ok && cJSON_AddNumberToObject(j, "steps", o->steps);
    ok = ok && cJSON_AddNumberToObject(j, "batch", o->batch);
    ok = ok && cJSON_AddNumberToObject(j, "grad_accum", o->grad_accum);
    ok = ok && cJSON_AddNumberToObject(j, "seq", o->seq);
    ok = ok && cJSON_AddNumberToObject(j, "lr", o->lr);
    ok = ok && cJSON_AddNumberToObject(j, "min_lr_ratio", o->min_lr_ratio);
    ok = ok && cJSON_AddNumberToObject(j, "warmup", o->warmup);
    ok = ok && cJSON_AddNumberToObject(j, "weight_decay", o->weight_decay);
    ok = ok && cJSON_AddNumberToObject(j, "grad_clip", o->grad_clip);
    ok = ok && cJSON_AddNumberToObject(j, "beta1", o->beta1);
    ok = ok && cJSON_AddNumberToObject(j, "beta2", o->beta2);
    ok = ok && cJSON_AddNumberToObject(j, "adam_eps", o->adam_eps);
    snprintf(rng, sizeof rng, "%llu", (unsigned long long)o->seed);
    ok = ok && cJSON_AddStringToObject(j, "seed", rng);
    ok = ok && cJSON_AddNumberToObject(j, "eval_interval", o->eval_interval);
    ok = ok && cJSON_AddNumberToObject(j, "eval_batches", o->eval_batches);
    ok = ok && cJSON_AddNumberToObject(j, "save_interval", o->save_interval);
    ok = ok && cJSON_AddNumberToObject(j, "val_fraction", o->val_fraction);
    ok = ok && cJSON_AddNumberToObject(j, "data_tokens", (double)tr->n_tokens);
    snprintf(rng, sizeof rng, "%llu", (unsigned long long)tr->data_fingerprint);
    ok = ok && cJSON_AddStringToObject(j, "data_fingerprint", rng);
    if (!ok) { /* a state file without one of its keys would not resume: no file at all */
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static int json_number(const cJSON *j, const char *key, double lo, double hi, double *out, const char *path,
                       dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(v)) return dt_fail_format(err, "%s: missing or non-numeric '%s'", path, key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return dt_fail_format(err, "%s: '%s' is %g, outside [%g, %g]", path, key, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int json_int(const cJSON *j, const char *key, int lo, int hi, int *out, const char *path, dt_error *err) {
    double d = 0;
    if (json_number(j, key, lo, hi, &d, path, err) != 0) return -1;
    if (d != floor(d)) return dt_fail_format(err, "%s: '%s' is %g, not an integer", path, key, d);
    *out = (int)d;
    return 0;
}

static int json_float(const cJSON *j, const char *key, double lo, double hi, float *out, const char *path,
                      dt_error *err) {
    double d = 0;
    if (json_number(j, key, lo, hi, &d, path, err) != 0) return -1;
    *out = (float)d;
    return 0;
}

static int json_u64(const cJSON *j, const char *key, uint64_t *out, const char *path, dt_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    char *end = NULL;
    if (!cJSON_IsString(v) || !*v->valuestring) return dt_fail_format(err, "%s: missing '%s'", path, key);
    errno = 0;
    unsigned long long x = strtoull(v->valuestring, &end, 10);
    if (errno || *end || v->valuestring[0] == '-')
        return dt_fail_format(err, "%s: '%s' is not an unsigned integer", path, key);
    *out = x;
    return 0;
}

/* The range of each option a run records in train_state.json: dt_train refuses a value outside it
 * before the run starts, and a resume refuses a state file holding one, so that every run dt_train
 * starts is one it can continue (the command line's own limits are narrower). A float option's range
 * holds floats: an lr is any positive finite one, a beta below 1 (the update divides by 1 − beta^t). */
typedef struct {
    const char *key;
    double lo, hi;
} run_range;
static const run_range run_ranges[] = {
    {"step", 0, INT_MAX},          {"steps", 1, INT_MAX},          {"batch", 1, 4096},
    {"grad_accum", 1, 4096},       {"seq", 1, 1 << 20},            {"lr", FLT_TRUE_MIN, FLT_MAX},
    {"min_lr_ratio", 0, 1},        {"warmup", 0, INT_MAX},         {"weight_decay", 0, FLT_MAX},
    {"grad_clip", 0, FLT_MAX},     {"beta1", 0, 0.999999},         {"beta2", 0, 0.999999999},
    {"adam_eps", 1e-30, 1},        {"eval_interval", 0, INT_MAX},  {"eval_batches", 1, INT_MAX},
    {"save_interval", 0, INT_MAX}, {"val_fraction", FLT_TRUE_MIN, 1 - 0x1p-24},
};

static const run_range *range_of(const char *key) {
    for (size_t i = 0; i < sizeof run_ranges / sizeof *run_ranges; i++)
        if (strcmp(run_ranges[i].key, key) == 0) return &run_ranges[i];
    return NULL;
}

static int json_run_int(const cJSON *j, const char *key, int *out, const char *path, dt_error *err) {
    const run_range *r = range_of(key);
    return json_int(j, key, (int)r->lo, (int)r->hi, out, path, err);
}

static int json_run_float(const cJSON *j, const char *key, float *out, const char *path, dt_error *err) {
    const run_range *r = range_of(key);
    return json_float(j, key, r->lo, r->hi, out, path, err);
}

/* Restores the hyper-parameters and counters of a run from train_state.json, each checked
 * against its run_ranges entry. `steps` given on the command line (nonzero in
 * *o) overrides the saved one so that a run can be extended. */
static int load_train_state(const char *path, dt_train_options *o, trainer *tr, char *data_path, size_t data_cap,
                            dt_error *err) {
    char *text;
    size_t len;
    if (read_text_file(path, MAX_TRAIN_STATE_BYTES, "a training state", &text, &len, err) != 0) {
        if (access(path, F_OK) != 0)
            dt_fail_io(err, "%s: cannot open (is this a training output directory?): %s", path, strerror(errno));
        return -1;
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    const int oom = !j && json_text_valid(text, len);
    free(text);
    if (oom) return dt_fail_oom(err, "%s: out of memory parsing its JSON", path);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return dt_fail_format(err, "%s: not valid JSON", path);
    }
    int steps = 0;
    double elapsed = 0;
    int bad = json_run_int(j, "step", &tr->step, path, err) || json_run_int(j, "steps", &steps, path, err) ||
              json_run_int(j, "batch", &o->batch, path, err) || json_run_int(j, "seq", &o->seq, path, err) ||
              json_run_float(j, "lr", &o->lr, path, err) ||
              json_run_float(j, "min_lr_ratio", &o->min_lr_ratio, path, err) ||
              json_run_int(j, "warmup", &o->warmup, path, err) ||
              json_run_float(j, "weight_decay", &o->weight_decay, path, err) ||
              json_run_float(j, "grad_clip", &o->grad_clip, path, err) ||
              json_run_float(j, "beta1", &o->beta1, path, err) || json_run_float(j, "beta2", &o->beta2, path, err) ||
              json_run_float(j, "adam_eps", &o->adam_eps, path, err) ||
              json_run_int(j, "eval_interval", &o->eval_interval, path, err) ||
              json_run_int(j, "eval_batches", &o->eval_batches, path, err) ||
              json_run_int(j, "save_interval", &o->save_interval, path, err) ||
              json_run_float(j, "val_fraction", &o->val_fraction, path, err) ||
              json_number(j, "elapsed_seconds", 0, 1e12, &elapsed, path, err) ||
              json_u64(j, "rng", &tr->rng, path, err) || json_u64(j, "seed", &o->seed, path, err);
    int accum = 1; /* absent from runs saved before gradient accumulation existed */
    if (!bad && cJSON_GetObjectItemCaseSensitive(j, "grad_accum"))
        bad = json_run_int(j, "grad_accum", &accum, path, err) != 0;
    if (o->grad_accum <= 0) o->grad_accum = accum; /* given on the command line, it may change */
    /* absent from runs saved before they were recorded: such a resume is not checked */
    if (!bad && cJSON_GetObjectItemCaseSensitive(j, "data_fingerprint")) {
        double n = 0;
        bad = json_number(j, "data_tokens", 1, 1e15, &n, path, err) ||
              json_u64(j, "data_fingerprint", &tr->saved_fingerprint, path, err);
        tr->saved_n_tokens = (size_t)n;
    }
    /* the data: a text file (maybe with a tokenizer) or a token dataset */
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    const cJSON *tokz = cJSON_GetObjectItemCaseSensitive(j, "tokenizer");
    if (!bad && cJSON_IsString(toks) && *toks->valuestring) data = toks;
    if (!bad && (!cJSON_IsString(data) || !*data->valuestring))
        bad = dt_fail_format(err, "%s: missing 'data'", path) != 0;
    if (!bad && tokz && (!cJSON_IsString(tokz) || !*tokz->valuestring))
        bad = dt_fail_format(err, "%s: 'tokenizer' must be a path", path) != 0;
    if (!bad && strlen(data->valuestring) >= data_cap)
        bad = dt_fail_format(err, "%s: 'data' is a path of %zu bytes (limit %zu)", path, strlen(data->valuestring),
                             data_cap - 1) != 0;
    /* where the data is now may be given, not another kind of data */
    const int was_tokens = data == toks;
    if (!bad && (was_tokens ? o->data_path != NULL : o->tokens_path != NULL))
        bad = dt_fail(err, "%s: the run in %s trained on %s; give %s for where it is now",
                      was_tokens ? "data_path" : "tokens_path", path, was_tokens ? "a token dataset" : "a text file",
                      was_tokens ? "tokens_path" : "data_path") != 0;
    if (!bad) {
        snprintf(data_path, data_cap, "%s", data->valuestring);
        /* the tokenizer now lives in the run's directory, beside the model */
        if (data == toks && !o->data_path && !o->tokens_path) o->tokens_path = data_path;
        else if (data != toks && tokz) o->tokenizer_path = o->out_dir;
        tr->elapsed = elapsed;
        if (o->steps <= 0) o->steps = steps;
        if (o->steps < tr->step)
            bad = dt_fail(err, "steps %d: the run in %s is already at step %d", o->steps, path, tr->step) != 0;
        else if (o->stop_at > 0 && o->stop_at <= tr->step)
            bad = dt_fail(err, "stop_at %d: the run in %s is already at step %d", o->stop_at, path, tr->step) != 0;
    }
    cJSON_Delete(j);
    return bad ? -1 : 0;
}

/* Rank 0: the model, the (whole) optimizer state m, v [P] and the train state into DIR/.next. */
static int stage_checkpoint(const dt_train_options *o, trainer *tr, const float *m, const float *v, dt_error *err) {
    char stage[4200], path[4400];
    dt_save_options so = {.dtype = DT_F32}; /* the vocabulary travels with the model */
    if (checkpoint_stage(o->out_dir, stage, sizeof stage, err) || dt_model_save_with(&tr->model, stage, &so, err))
        return -1;
    dt_st_entry e[2] = {
        {.name = "adam.m", .ndim = 1, .shape = {(int64_t)tr->model.n_params}, .data = m},
        {.name = "adam.v", .ndim = 1, .shape = {(int64_t)tr->model.n_params}, .data = v},
    };
    if (dt_pathf(path, sizeof path, err, "%s/optimizer.safetensors", stage) || dt_st_write_f32(path, e, 2, err))
        return -1;
    cJSON *j = options_to_json(o, tr);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return dt_fail_oom(err, "out of memory");
    int rc = dt_pathf(path, sizeof path, err, "%s/train_state.json", stage);
    if (rc == 0) rc = write_text_atomic(path, text, err);
    cJSON_free(text);
    return rc;
}

/* Rank 0: the checkpoint staged, then committed; a stage that could not be completed is removed
 * (DIR keeps the previous checkpoint, and no half-written .next/). */
static int write_checkpoint(const dt_train_options *o, trainer *tr, const float *m, const float *v, dt_error *err) {
    if (stage_checkpoint(o, tr, m, v, err) != 0) {
        checkpoint_discard(o->out_dir);
        return -1;
    }
    return checkpoint_commit(o->out_dir, err);
}

/* Every rank takes part: with ZeRO-1 rank 0 gathers the moments first. Every rank learns
 * whether the checkpoint was written. */
static int save_checkpoint(const dt_train_options *o, trainer *tr, dt_error *err) {
    const size_t P = tr->model.n_params;
    const float *m = tr->ts.adam_m, *v = tr->ts.adam_v;
    float *whole = NULL;
    int rc = 0;
    if (tr->ts.opt.zero) {
        if (tr->rank == 0 && !(whole = malloc(2 * P * sizeof(float))))
            rc = dt_fail_oom(err, "out of memory gathering the optimizer state of %zu parameters", P);
        if (comm_agree(tr->comm, rc, NULL, NULL, 0, err) != 0) return -1;
        comm_gatherv_f32(tr->comm, tr->ts.adam_m, whole, tr->ts.bounds, "gathering the optimizer state");
        /* whole is NULL on the other ranks: no offset from it (NULL + 0 is undefined behaviour) */
        comm_gatherv_f32(tr->comm, tr->ts.adam_v, tr->rank == 0 ? whole + P : NULL, tr->ts.bounds,
                         "gathering the optimizer state");
        m = whole;
        v = whole ? whole + P : NULL;
    }
    if (tr->rank == 0) rc = write_checkpoint(o, tr, m, v, err);
    free(whole);
    return comm_agree(tr->comm, rc, NULL, NULL, 0, err);
}

/* The moments of this rank's shard (all of them without ZeRO) from a checkpoint of any N. */
static int load_optimizer(const char *dir, trainer *tr, dt_error *err) {
    char path[4200];
    dt_safetensors st;
    if (dt_pathf(path, sizeof path, err, "%s/optimizer.safetensors", dir) || dt_st_open(&st, path, err)) return -1;
    const size_t P = tr->model.n_params, begin = tr->ts.shard_begin, len = tr->ts.shard_end - begin;
    const char *names[2] = {"adam.m", "adam.v"};
    float *dst[2] = {tr->ts.adam_m, tr->ts.adam_v};
    float *whole = len == P ? NULL : malloc(P * sizeof(float));
    int rc = len != P && !whole ? dt_fail_oom(err, "out of memory reading %s", path) : 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        const dt_st_tensor *t = dt_st_find(&st, names[i]);
        if (!t) rc = dt_fail_format(err, "%s: missing tensor '%s'", path, names[i]);
        else if (t->numel != P)
            rc = dt_fail_format(err, "%s: '%s' has %zu values but the model has %zu parameters", path, names[i],
                                t->numel, P);
        else {
            float *all = whole ? whole : dst[i];
            dt_st_read_f32(&st, t, all);
            /* a moment estimate that is not finite (or a negative second moment) would pass into
             * the weights at the first step and the next checkpoint would replace the good one */
            for (size_t k = 0; k < P && rc == 0; k++)
                if (!isfinite(all[k]) || (i == 1 && all[k] < 0))
                    rc = dt_fail_format(err, "%s: '%s' holds %g at index %zu (%s)", path, names[i], (double)all[k], k,
                                        i == 1 ? "a second moment must be finite and >= 0" : "must be finite");
            if (whole) memcpy(dst[i], whole + begin, len * sizeof(float));
        }
    }
    free(whole);
    dt_st_close(&st);
    return rc;
}

/* Keeps the metrics lines of steps before `step` (a resumed run rewrites what followed). */
static int truncate_metrics(const char *path, int step, dt_error *err) {
    dt_error why;
    FILE *f = open_regular_file(path, &why);
    if (!f) {
        if (errno == ENOENT) return 0; /* no metrics yet */
        *err = why;
        return -1;
    }
    dt_atomic_file af;
    if (dt_atomic_open(&af, path, err) != 0) {
        fclose(f);
        return -1;
    }
    char line[16384];
    while (fgets(line, sizeof line, f)) {
        int s;
        if (sscanf(line, "{\"step\":%d", &s) == 1 && s < step) fputs(line, af.fp);
    }
    fclose(f);
    return dt_atomic_commit(&af, err);
}

/* ---------------------------------------------------------------- the loop */

/* Every rank draws the whole batch of B windows (so the RNG does not depend on N) and keeps its
 * rows [r·B/N, (r+1)·B/N). */
static void sample_batch(trainer *tr, int B, int T) {
    const size_t span = tr->n_train - (size_t)T; /* start offsets 0 .. n_train − T − 1 */
    const int lo = tr->rank * B / tr->ranks, hi = (tr->rank + 1) * B / tr->ranks;
    for (int b = 0; b < B; b++) {
        size_t off = (size_t)(dt_rng_next(&tr->rng) % span);
        if (b < lo || b >= hi) continue;
        memcpy(tr->in + (size_t)(b - lo) * T, tr->tokens + off, (size_t)T * sizeof(int));
        memcpy(tr->tg + (size_t)(b - lo) * T, tr->tokens + off + 1, (size_t)T * sizeof(int));
    }
}

/* Mean validation loss over the first eval_batches·B windows of the held-out part; rank r scores
 * windows [r·W/N, (r+1)·W/N) in micro-batches and the sums are added in rank order. */
static int evaluate(trainer *tr, const dt_train_options *o, double *val_loss, dt_error *err) {
    const int T = o->seq;
    const int *val = tr->tokens + tr->n_train;
    const size_t W = eval_window_count(tr->n_tokens - tr->n_train, T, (size_t)o->eval_batches * o->batch);
    const size_t first = W * tr->rank / tr->ranks, end = W * (tr->rank + 1) / tr->ranks;
    double mine[2] = {0, 0}, *all = malloc((size_t)tr->ranks * sizeof mine);
    size_t scored = 0;
    int rc = all ? 0 : dt_fail_oom(err, "out of memory");
    if (rc == 0)
        rc = eval_window_range(&tr->model, tr->ts.rs, tr->in, tr->tg, val, tr->ts.opt.micro_batch, T, first, end,
                               &mine[0], &scored, err);
    mine[1] = (double)scored;
    if (comm_agree(tr->comm, rc, NULL, NULL, 0, err) != 0) {
        free(all);
        return -1;
    }
    comm_allgather(tr->comm, mine, all, sizeof mine, "the validation");
    double sum = 0, count = 0;
    for (int r = 0; r < tr->ranks; r++) {
        sum += all[2 * r];
        count += all[2 * r + 1];
    }
    free(all);
    *val_loss = sum / count;
    return 0;
}

/* Every rank holds the same parameters after a step, so every rank decides alike. */
static int lambda_diverged(const dt_model *m, int step, dt_error *err) {
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        const float lambda = dt_model_lambda(m, l);
        if (!isfinite(lambda))
            return dt_fail_code(err, DT_ERR_DIVERGED,
                                "step %d: λ of layer %d is %g after the update — training diverged (try a lower lr)",
                                step, l, isnan(lambda) ? NAN : (double)lambda);
    }
    return 0;
}

static void format_duration(char *out, size_t n, double s) {
    if (s < 0 || !isfinite(s)) snprintf(out, n, "?");
    else if (s < 60) snprintf(out, n, "%.0fs", s);
    else if (s < 3600) snprintf(out, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(out, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* One metrics line; a failed write (a full disk) is an error, not a silently shorter file. */
static int write_metrics(FILE *mf, const char *dir, const trainer *tr, float loss, double val_loss, float lr,
                         float gnorm, double tps, dt_error *err) {
    fprintf(mf, "{\"step\":%d,\"train_loss\":%.6f", tr->step, loss);
    if (!isnan(val_loss)) fprintf(mf, ",\"val_loss\":%.6f", val_loss);
    fprintf(mf, ",\"lr\":%.6g,\"grad_norm\":%.6f,\"tokens_per_s\":%.1f,\"elapsed_s\":%.3f,\"lambda\":[", lr, gnorm,
            tps, tr->elapsed);
    for (int l = 0; l < tr->model.cfg.num_hidden_layers; l++) {
        /* DIFF V2's λ depends on the token: the mean over the last forward's tokens and heads */
        size_t n = 0;
        const float *tl = dt_runstate_token_lambda(tr->ts.rs, l, &n);
        double lam = dt_model_lambda(&tr->model, l);
        if (tl && n) {
            lam = 0;
            for (size_t i = 0; i < n; i++) lam += tl[i];
            lam /= (double)n;
        }
        fprintf(mf, "%s%.6f", l ? "," : "", lam);
    }
    fprintf(mf, "]}\n");
    if (fflush(mf) != 0 || ferror(mf))
        return dt_fail_io(err, "%s/metrics.jsonl: write failed: %s", dir, strerror(errno));
    return 0;
}

/* FNV-1a, 64 bits: fingerprints that tell ranks apart, not a cryptographic hash. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

#define FNV_START 0xcbf29ce484222325ull

static uint64_t file_fingerprint(const char *path) {
    dt_error ignored; /* 0: unreadable, which the data's own loading reports */
    FILE *f = open_regular_file(path, &ignored);
    uint64_t h = FNV_START;
    if (!f) return 0;
    unsigned char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = fnv1a(h, buf, n);
    fclose(f);
    return h;
}

/* The data as the state file records it: a hash of its length and of up to 64 evenly spaced
 * stretches of 4096 tokens (all of a small file), enough to tell other data from the run's
 * without hashing gigabytes at every start. */
static uint64_t data_fingerprint(const int *tokens, size_t n) {
    const size_t span = 4096, parts = 64;
    const uint64_t n64 = n;
    const uint64_t h = fnv1a(FNV_START, &n64, sizeof n64);
    if (n <= span * parts) return fnv1a(h, tokens, n * sizeof *tokens);
    uint64_t sampled = h;
    for (size_t i = 0; i < parts; i++)
        sampled = fnv1a(sampled, tokens + (n - span) / (parts - 1) * i, span * sizeof *tokens);
    return sampled;
}

/* Appends "name value" to the detail lines d[*n..cap) (comm_agree_detail), while they fit. */
static void detail_add(char *d, size_t cap, size_t *n, const char *name, const char *value) {
    const int w = snprintf(d + *n, cap - *n, "%s %s\n", name, value);
    if (w > 0 && (size_t)w < cap - *n) *n += (size_t)w;
    else d[*n] = '\0';
}

static void detail_number(char *d, size_t cap, size_t *n, const char *name, double v) {
    char num[40];
    snprintf(num, sizeof num, "%.7g", v); /* a float's digits: 0.001, not 0.0010000000474974513 */
    detail_add(d, cap, n, name, num);
}

/* What every rank must share: its program, its options and model config, its data; detail[3]
 * gets what each covers as "name value" lines, for the message that names what differs. */
static void fingerprints(const dt_train_options *o, const trainer *tr, uint64_t fp[3],
                         char detail[3][COMM_DETAIL_BYTES]) {
    size_t n = 0;
    fp[0] = file_fingerprint("/proc/self/exe");
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = '\0';
    detail[0][0] = '\0';
    if (len > 0) detail_add(detail[0], COMM_DETAIL_BYTES, &n, "program", exe);
    cJSON *j = options_to_json(o, tr);
    /* the data's and tokenizer's paths may differ between machines (each rank resolves them to
     * absolute ones); their content may not, and fp[2] says so of the data */
    cJSON_DeleteItemFromObject(j, "data");
    cJSON_DeleteItemFromObject(j, "tokens");
    cJSON_DeleteItemFromObject(j, "tokenizer");
    cJSON_DeleteItemFromObject(j, "data_tokens");
    cJSON_DeleteItemFromObject(j, "data_fingerprint");
    char *text = cJSON_PrintUnformatted(j);
    const dt_config *c = &tr->model.cfg;
    const double cfg[] = {c->arch, c->vocab_size, c->hidden_size, c->intermediate_size, c->num_hidden_layers,
                          c->num_attention_heads, c->num_key_value_heads, c->head_dim, c->max_position_embeddings,
                          c->rms_norm_eps, c->rope_theta, c->tie_word_embeddings, c->lambda_std_dev,
                          c->use_subln_weight, c->position, c->softmax1, c->no_head_norm, c->fixed_lambda,
                          o->grad_accum, o->zero};
    static const char *const cfg_names[] = {"arch", "vocab_size", "hidden_size", "intermediate_size",
                                            "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                            "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                                            "tie_word_embeddings", "lambda_std_dev", "use_subln_weight", "position",
                                            "softmax1", "no_head_norm", "fixed_lambda", "grad_accum", "zero"};
    fp[1] = fnv1a(fnv1a(FNV_START, cfg, sizeof cfg), text ? text : "", text ? strlen(text) : 0);
    cJSON_free(text);
    n = 0;
    detail[1][0] = '\0';
    for (const cJSON *it = j ? j->child : NULL; it; it = it->next) {
        if (cJSON_IsNumber(it)) detail_number(detail[1], COMM_DETAIL_BYTES, &n, it->string, it->valuedouble);
        else if (cJSON_IsString(it)) detail_add(detail[1], COMM_DETAIL_BYTES, &n, it->string, it->valuestring);
    }
    cJSON_Delete(j);
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++)
        if (strcmp(cfg_names[i], "grad_accum")) detail_number(detail[1], COMM_DETAIL_BYTES, &n, cfg_names[i], cfg[i]);
    fp[2] = fnv1a(FNV_START, tr->tokens, tr->n_tokens * sizeof(int));
    /* where each rank read its data: the paths that differ are the first thing to look at */
    n = 0;
    detail[2][0] = '\0';
    if (o->data_path) detail_add(detail[2], COMM_DETAIL_BYTES, &n, "data_path", o->data_path);
    if (o->tokens_path) detail_add(detail[2], COMM_DETAIL_BYTES, &n, "tokens_path", o->tokens_path);
    if (o->tokenizer_path) detail_add(detail[2], COMM_DETAIL_BYTES, &n, "tokenizer_path", o->tokenizer_path);
    detail_number(detail[2], COMM_DETAIL_BYTES, &n, "n_tokens", (double)tr->n_tokens);
}

static void trainer_free(trainer *tr) {
    train_step_free(&tr->ts);
    dt_model_free(&tr->model);
    free(tr->tokens);
    free(tr->in);
    free(tr->tg);
    if (tr->lock_fd >= 0) close(tr->lock_fd);
}

static int validate_options(const dt_train_options *o, dt_error *err) {
    if (!o->data_path && !o->tokens_path) return dt_fail(err, "data_path or tokens_path: a training text file or token dataset is required");
    if (o->data_path && o->tokens_path) return dt_fail(err, "data_path and tokens_path: give one of them");
    if (o->tokens_path && o->tokenizer_path)
        return dt_fail(err, "tokenizer_path: a token dataset brings its own (%s/tokenizer.json)", o->tokens_path);
    if (o->tokens_path && tokens_dir_check(o->tokens_path, err) != 0) return -1;
    if (!o->out_dir) return dt_fail(err, "out_dir: an output directory is required");
    if (o->steps <= 0) return dt_fail(err, "steps %d: must be positive", o->steps);
    /* the run ends at steps: a later stop_at was never reached, and the run went on to the end unasked */
    if (o->stop_at > o->steps)
        return dt_fail(err, "stop_at %d: past steps %d, the run's last step (steps %d or more trains that far)",
                       o->stop_at, o->steps, o->stop_at);
    if (o->batch <= 0 || o->batch > 4096) return dt_fail(err, "batch %d: must be in 1..4096", o->batch);
    const int ranks = dt_comm_size(o->comm);
    if (o->grad_accum <= 0 || o->batch % (o->grad_accum * ranks) != 0) {
        /* the batch is the saved run's: say what may change instead (the ranks or grad_accum) */
        if (o->resume && o->batch % ranks != 0)
            return dt_fail(err, "the run in %s has a batch of %d sequences, which %d ranks cannot split: continue it "
                                "on a number of ranks that divides %d", o->out_dir, o->batch, ranks, o->batch);
        if (o->resume)
            return dt_fail(err, "grad_accum %d: must divide the %d sequences per rank of the run in %s (a batch of "
                                "%d on %d rank%s)", o->grad_accum, o->batch / ranks, o->out_dir, o->batch, ranks,
                           ranks > 1 ? "s" : "");
        if (ranks == 1)
            return dt_fail(err, "grad_accum %d: must be positive and divide batch %d", o->grad_accum, o->batch);
        return dt_fail(err, "batch %d: must be a multiple of ranks × grad_accum = %d × %d", o->batch, ranks,
                       o->grad_accum);
    }
    if (o->seq <= 0) return dt_fail(err, "seq %d: must be positive", o->seq);
    if (!(o->lr > 0) || !isfinite(o->lr)) return dt_fail(err, "lr %g: must be a positive number", (double)o->lr);
    if (o->warmup < 0) return dt_fail(err, "warmup %d: must be >= 0", o->warmup);
    if (!(o->weight_decay >= 0)) return dt_fail(err, "weight_decay %g: must be >= 0", (double)o->weight_decay);
    if (!(o->grad_clip >= 0)) return dt_fail(err, "grad_clip %g: must be >= 0 (0 = off)", (double)o->grad_clip);
    if (!(o->val_fraction > 0 && o->val_fraction < 1))
        return dt_fail(err, "val_fraction %g: must be in (0, 1)", (double)o->val_fraction);
    if (o->eval_interval < 0 || o->save_interval < 0 || o->eval_batches <= 0)
        return dt_fail(err, "eval_interval and save_interval must be >= 0 and eval_batches positive");
    /* what the checks above leave open, the ranges a resume holds the run to */
    const struct {
        const char *key;
        double value;
    } given[] = {{"min_lr_ratio", o->min_lr_ratio}, {"weight_decay", o->weight_decay}, {"grad_clip", o->grad_clip},
                 {"beta1", o->beta1},               {"beta2", o->beta2},               {"adam_eps", o->adam_eps}};
    for (size_t i = 0; i < sizeof given / sizeof *given; i++) {
        const run_range *r = range_of(given[i].key);
        if (!(given[i].value >= r->lo && given[i].value <= r->hi))
            return dt_fail(err, "%s %g: must be in [%g, %g]", r->key, given[i].value, r->lo, r->hi);
    }
    return 0;
}

/* Everything before the first step: the run's options (from train_state.json on resume), the
 * model, the data, the step's buffers and (on resume) the optimizer state. Frees nothing on
 * failure (the caller's trainer_free does). */
static int setup(trainer *tr, dt_train_options *o, char *data_path, size_t data_cap, dt_error *err) {
    char path[4200];
    const int data_given = o->data_path || o->tokens_path;
    if (o->resume) {
        if (!o->out_dir) return dt_fail(err, "resume needs out_dir, the directory of the run to continue");
        dt_quant_options q;
        /* (a missing config.json is left to the train-state and model loaders to report) */
        if (dt_pathf(path, sizeof path, err, "%s/config.json", o->out_dir)) return -1;
        if (access(path, F_OK) == 0 && quant_config_read(path, &q, err) != 0) return -1;
        if (access(path, F_OK) == 0 && q.scheme != DT_QUANT_NONE)
            return dt_fail(err, "%s is a quantised checkpoint (%s): quantised weights cannot be trained; train the "
                                "float model it was made from and quantise again", o->out_dir,
                           dt_quant_scheme_name(q.scheme));
        if (dt_pathf(path, sizeof path, err, "%s/train_state.json", o->out_dir) ||
            load_train_state(path, o, tr, data_path, data_cap, err))
            return -1;
        if (!o->data_path && !o->tokens_path) o->data_path = data_path;
        /* the data moved since: said before validate_options, whose check of a dataset's directory
         * does not know that the path came from the state file */
        const char *recorded = o->tokens_path ? o->tokens_path : o->data_path;
        if (!data_given && access(recorded, F_OK) != 0)
            return dt_fail_io(err, "%s: cannot open: %s (the path %s/train_state.json recorded; give %s to say "
                                   "where the data is now)",
                              recorded, strerror(errno), o->out_dir, o->tokens_path ? "tokens_path" : "data_path");
    }
    /* checked before anything is allocated; a resumed run's options came from its state file */
    if (validate_options(o, err) != 0) return -1;
    /* the state file records the data's absolute path: a resume from another directory finds it
     * (a path that does not resolve is left for the loader to report) */
    const char **data = o->tokens_path ? &o->tokens_path : &o->data_path;
    if (realpath(*data, tr->data_abs)) *data = tr->data_abs;
    if (o->tokens_path || o->tokenizer_path) {
        if (dt_pathf(tr->tokenizer_buf, sizeof tr->tokenizer_buf, err, "%s",
                     o->tokens_path ? o->tokens_path : o->tokenizer_path) != 0)
            return -1;
        tr->tokenizer_dir = tr->tokenizer_buf;
    }
    if (o->resume) {
        if (dt_model_load(&tr->model, o->out_dir, err) != 0) return -1;
        /* a dataset's ids mean text through its own tokenizer: the run's must be that one (equal ids
         * made by another tokenizer.json would leave the checkpoint with a tokenizer of other text) */
        if (o->tokens_path && !tr->model.vocab.ids_only_dir) {
            dt_vocab dv;
            if (dt_vocab_load(&dv, o->tokens_path, err) != 0) return -1;
            const int same = dt_vocab_same(&dv, &tr->model.vocab);
            dt_vocab_free(&dv);
            if (!same)
                return dt_fail(err, "tokens_path %s: its ids are another tokenizer's than the run in %s was trained "
                                    "on (%s): continue it on a dataset made with %s/tokenizer.json",
                               o->tokens_path, o->out_dir,
                               tr->model.vocab.tok ? "their tokenizer.json files differ" : "the run is byte-level",
                               o->out_dir);
        }
    } else {
        if (tr->tokenizer_dir && train_vocab_from_tokenizer(&o->cfg, tr->tokenizer_dir, err) != 0) return -1;
        if (dt_model_create(&tr->model, &o->cfg, err) != 0) return -1;
        if (tr->tokenizer_dir && dt_model_set_tokenizer(&tr->model, tr->tokenizer_dir, err) != 0) return -1;
        dt_model_init_random(&tr->model, o->seed);
        tr->rng = o->seed ^ 0xD1FF7A45ull; /* the data order's own stream, apart from the init's */
    }
    const dt_config *c = &tr->model.cfg;
    const int B = o->batch, T = o->seq;
    if (T > c->max_position_embeddings)
        return dt_fail(err, "seq %d exceeds the model's max_position_embeddings %d", T, c->max_position_embeddings);
    if (o->tokens_path) {
        if (train_tokens_load(o->tokens_path, c->vocab_size, T, &tr->tokens, &tr->n_tokens, &tr->n_train, err) != 0)
            return -1;
    } else {
        if (dt_model_text_tokens(&tr->model, o->data_path, &tr->tokens, &tr->n_tokens, NULL, err) != 0) return -1;
        tr->n_train = dt_train_split(tr->n_tokens, o->val_fraction);
    }
    tr->data_fingerprint = data_fingerprint(tr->tokens, tr->n_tokens);
    if (tr->saved_n_tokens && (tr->n_tokens != tr->saved_n_tokens || tr->data_fingerprint != tr->saved_fingerprint))
        return dt_fail(err, "%s %s: %zu tokens, not the data the run in %s was trained on (%zu tokens from %s): "
                            "continue it on the same data",
                       o->tokens_path ? "tokens_path" : "data_path", *data, tr->n_tokens, o->out_dir,
                       tr->saved_n_tokens, data_path);
    if (!o->tokens_path && (tr->n_train < (size_t)T + 2 || tr->n_tokens - tr->n_train < (size_t)T + 1))
        return dt_fail(err, "%s: %zu tokens is too short for seq %d with a %.0f%% validation split (need at least %zu)",
                       o->data_path, tr->n_tokens, T, 100.0 * o->val_fraction,
                       (size_t)((double)(2 * T + 3) / (o->val_fraction < 0.5 ? o->val_fraction : 1 - o->val_fraction)) +
                           1);
    const int rows = B / tr->ranks; /* this rank's */
    const train_step_options so = {.micro_batch = rows / o->grad_accum,
                                   .seq = T,
                                   .accum = o->grad_accum,
                                   .grad_clip = o->grad_clip,
                                   .hp = {o->beta1, o->beta2, o->adam_eps, o->weight_decay},
                                   .zero = o->zero,
                                   .no_overlap = o->no_overlap};
    if (train_step_init(&tr->ts, &tr->model, tr->comm, &so, err) != 0) return -1;
    tr->in = malloc((size_t)rows * T * sizeof(int));
    tr->tg = malloc((size_t)rows * T * sizeof(int));
    if (!tr->in || !tr->tg) return dt_fail_oom(err, "out of memory for a batch of %d × %d tokens", rows, T);
    if (o->resume && load_optimizer(o->out_dir, tr, err) != 0) return -1;
    return 0;
}

/* Rank 0: the output directory, locked, and its metrics file (kept up to the resumed step). */
static FILE *open_metrics(const dt_train_options *o, trainer *tr, dt_error *err) {
    char path[4200];
    if (dir_ensure(o->out_dir, err) != 0) return NULL;
    if (tr->lock_fd < 0 && checkpoint_lock(o->out_dir, &tr->lock_fd, err) != 0) return NULL;
    if (dt_pathf(path, sizeof path, err, "%s/metrics.jsonl", o->out_dir)) return NULL;
    if (o->resume ? truncate_metrics(path, tr->step + 1, err) : (unlink(path), 0)) return NULL;
    FILE *mf = fopen(path, "a");
    if (!mf) dt_fail_io(err, "%s: cannot open for writing: %s", path, strerror(errno));
    return mf;
}

static void print_summary(const dt_train_options *o, const trainer *tr) {
    if (tr->timed == 0) return;
    const double n = tr->timed, step = tr->step_s / n;
    fprintf(stderr,
            "summary: %d rank%s × %d thread%s | step %.1f ms | compute %.1f ms (spread between ranks %.1f%%) | "
            "communication %.2f ms/step = %.1f%% of the step (%.2f ms waiting after the backward, %.2f ms of it "
            "not for a slower rank), %.2f MB sent per rank per step | optimizer state %.2f MB per rank | %.0f tok/s\n",
            tr->ranks, tr->ranks > 1 ? "s" : "", omp_get_max_threads(), omp_get_max_threads() > 1 ? "s" : "",
            1e3 * step, 1e3 * tr->compute_s / n, 100 * tr->spread / n, 1e3 * tr->comm_s / n,
            100 * tr->comm_s / tr->step_s, 1e3 * tr->wait_s / n, 1e3 * tr->exposed_s / n, train_step_comm_bytes(&tr->ts) / 1e6,
            train_step_optimizer_bytes(&tr->ts) / 1e6, (double)o->batch * o->seq / step);
}

static int train_run(dt_train_options *o, dt_error *err);

int dt_train(dt_train_options *o, dt_error *err) {
    /* A resumed run without --data reads its data path into train_run's own buffer: never leave
     * the caller's options pointing at that dead stack memory. */
    const char *caller_data = o->data_path, *caller_tokens = o->tokens_path, *caller_tokenizer = o->tokenizer_path;
    int rc = train_run(o, err);
    o->data_path = caller_data;
    o->tokens_path = caller_tokens;
    o->tokenizer_path = caller_tokenizer;
    return rc;
}

static int train_run(dt_train_options *o, dt_error *err) {
    trainer tr;
    memset(&tr, 0, sizeof tr);
    tr.lock_fd = -1;
    tr.comm = o->comm;
    tr.rank = dt_comm_rank(o->comm);
    tr.ranks = dt_comm_size(o->comm);
    const int quiet = o->quiet || tr.rank != 0; /* rank 0 speaks for the job */
    char data_path[4096] = "";
    /* an interrupted checkpoint commit is finished (or discarded) before any rank reads DIR, and
     * not while another run is writing it (a missing DIR is left to the loaders to report) */
    int rc = 0;
    struct stat sb;
    if (o->resume && o->out_dir && tr.rank == 0 && stat(o->out_dir, &sb) == 0 && S_ISDIR(sb.st_mode))
        rc = checkpoint_lock(o->out_dir, &tr.lock_fd, err);
    if (rc == 0 && o->resume && o->out_dir && tr.rank == 0) rc = checkpoint_recover(o->out_dir, err);
    if (comm_agree(tr.comm, rc, NULL, NULL, 0, err) != 0) {
        if (tr.lock_fd >= 0) close(tr.lock_fd);
        return -1;
    }
    rc = setup(&tr, o, data_path, sizeof data_path, err);
    uint64_t fp[3] = {0, 0, 0};
    static const char *const fp_names[3] = {"the program (binary)", "the options or model config",
                                            "the data file"};
    char detail[3][COMM_DETAIL_BYTES];
    const char *const details[3] = {detail[0], detail[1], detail[2]};
    detail[0][0] = detail[1][0] = detail[2][0] = '\0';
    if (rc == 0 && tr.ranks > 1) fingerprints(o, &tr, fp, detail);
    FILE *mf = NULL;
    /* --out is made only once every rank agreed to run: a job refused for a rank's data or options
     * left a new --out holding an empty metrics.jsonl */
    if (comm_agree_detail(tr.comm, rc, fp, fp_names, details, 3, err) != 0) {
        trainer_free(&tr);
        return -1;
    }
    if (tr.rank == 0 && !(mf = open_metrics(o, &tr, err))) rc = -1;
    if (comm_agree(tr.comm, rc, NULL, NULL, 0, err) != 0) {
        if (mf) fclose(mf);
        trainer_free(&tr);
        return -1;
    }

    const dt_config *c = &tr.model.cfg;
    const int B = o->batch, T = o->seq;
    const int tty = isatty(STDERR_FILENO) && !quiet;
    const int log_every = o->steps / 20 > 0 ? o->steps / 20 : 1;
    if (!quiet) {
        fprintf(stderr, "%s %s: %zu parameters, %zu train / %zu validation tokens, %d steps of %d × %d tokens\n",
                o->resume ? "resuming" : "training", dt_arch_name(c->arch),
                tr.model.n_params, tr.n_train, tr.n_tokens - tr.n_train, o->steps, B, T);
        if (tr.ranks > 1)
            fprintf(stderr, "data parallel: %d ranks × %d rows × %d micro-batch%s%s\n", tr.ranks,
                    tr.ts.opt.micro_batch, o->grad_accum, o->grad_accum > 1 ? "es" : "",
                    tr.ts.opt.zero ? ", ZeRO-1 optimizer shards" : "");
    }
    double tps = 0, t_start = monotonic_seconds();
    int start_step = tr.step, stopped = 0;
    if (tr.step == o->steps && !quiet) fprintf(stderr, "nothing to do: the run is already at step %d\n", tr.step);
    while (tr.step < o->steps) {
        double t0 = monotonic_seconds();
        sample_batch(&tr, B, T);
        if (o->batch_hook) {
            const int lo = tr.rank * B / tr.ranks, hi = (tr.rank + 1) * B / tr.ranks;
            o->batch_hook(o->batch_ctx, tr.step, o->steps, tr.in, tr.tg, lo, hi - lo, B, T, &tr.rng);
        }
        const float lr = lr_schedule(tr.step, o->steps, o->warmup, o->lr, o->min_lr_ratio);
        train_step_stats st;
        if (train_step_run(&tr.ts, tr.in, tr.tg, tr.step + 1, lr, o->stop && *o->stop, &st, err) != 0) {
            rc = -1;
            break;
        }
        const float loss = st.loss, gnorm = st.grad_norm;
        tr.step++;
        /* The step checked its loss and gradient, which were finite; its update can still break the
         * model: λ = exp(λq1·λk1) − exp(λq2·λk2) + λinit overflows while the λ vectors stay finite.
         * Caught here, before the metrics line (JSON has no inf) and before a checkpoint of it. */
        if (lambda_diverged(&tr.model, tr.step, err) != 0) {
            rc = -1;
            break;
        }
        double dt = monotonic_seconds() - t0;
        tr.elapsed += dt;
        tps = (double)B * T / dt;
        if (tr.step > start_step + 1) { /* the first step warms up */
            tr.timed++;
            tr.step_s += dt;
            tr.compute_s += st.compute_s;
            tr.wait_s += st.wait_s;
            tr.exposed_s += st.exposed_s;
            tr.comm_s += st.comm_s;
            tr.spread += st.compute_max_s > 0 ? (st.compute_max_s - st.compute_min_s) / st.compute_max_s : 0;
        }

        double val_loss = NAN;
        int last = tr.step == o->steps;
        if ((o->eval_interval > 0 && tr.step % o->eval_interval == 0) || last || tr.step == 1) {
            if (evaluate(&tr, o, &val_loss, err) != 0) {
                rc = -1;
                break;
            }
            /* the model after the step's update: at the last step no later forward would check it */
            if (!isfinite(val_loss)) {
                rc = dt_fail_code(err, DT_ERR_DIVERGED,
                                  "step %d: validation loss %g after the update — training diverged (try a lower lr)",
                                  tr.step, isnan(val_loss) ? NAN : val_loss);
                break;
            }
            if (o->eval_hook && o->eval_hook(o->eval_ctx, tr.step, &tr.model, err) != 0) {
                rc = -1;
                break;
            }
        }
        if (mf && write_metrics(mf, o->out_dir, &tr, loss, val_loss, lr, gnorm, tps, err) != 0) {
            rc = -1;
            break;
        }
        if (!quiet) {
            double rate = (monotonic_seconds() - t_start) / (tr.step - start_step);
            char eta[32], comm[64] = "";
            format_duration(eta, sizeof eta, rate * (o->steps - tr.step));
            if (tr.ranks > 1) snprintf(comm, sizeof comm, " | comm %.0f%%", 100 * st.comm_s / dt);
            if (tty || !isnan(val_loss) || tr.step % log_every == 0)
                fprintf(stderr, "%sstep %d/%d | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s%s | ETA %s%s",
                        tty ? "\r\033[K" : "", tr.step, o->steps, loss, lr, gnorm, tps, comm, eta, tty ? "" : "\n");
            if (!isnan(val_loss))
                fprintf(stderr, "%s  val loss %.4f (%.3f bits/%s)\n", tty ? "\n" : "", val_loss, val_loss / M_LN2,
                        tr.model.vocab.tok ? "token; `difftrans eval` gives bits per byte" : "byte");
        }
        /* st.stop: a rank was asked to stop (Ctrl-C); every rank stops after the same step */
        stopped = st.stop || (o->stop_at > 0 && tr.step >= o->stop_at && !last);
        if (last || stopped || (o->save_interval > 0 && tr.step % o->save_interval == 0)) {
            if (save_checkpoint(o, &tr, err) != 0) {
                rc = -1;
                break;
            }
        }
        if (stopped) break;
    }
    if (mf && fclose(mf) != 0 && rc == 0)
        rc = dt_fail_io(err, "%s/metrics.jsonl: write failed: %s", o->out_dir, strerror(errno));
    if (rc == 0 && !quiet) {
        if (tty) fputc('\n', stderr);
        print_summary(o, &tr);
        if (stopped && o->stop_at > 0 && tr.step >= o->stop_at)
            fprintf(stderr, "stopped at step %d/%d as asked: checkpoint saved in %s; resuming from it continues the run\n",
                    tr.step, o->steps, o->out_dir);
        else if (stopped)
            fprintf(stderr, "interrupted at step %d/%d: checkpoint saved in %s; resuming from it continues the run\n",
                    tr.step, o->steps, o->out_dir);
        else if (tr.step > start_step) fprintf(stderr, "done: %d steps, model saved in %s\n", tr.step, o->out_dir);
    }
    trainer_free(&tr);
    return rc;
}

int dt_train_window(const char *dir, int *seq, dt_error *err) {
    char path[4400];
    if (!dir) return dt_fail(err, "dir: no run directory given");
    if (!dt_train_checkpoint(dir, path, sizeof path)) return 0; /* its state, staged when a commit was cut */
    cJSON *j = json_load_file(path, err);
    if (!j) return -1;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "seq");
    const int ok = cJSON_IsNumber(s) && s->valuedouble >= 1 && s->valuedouble <= (1 << 20) &&
                   s->valuedouble == (double)(int)s->valuedouble;
    if (ok) *seq = (int)s->valuedouble;
    cJSON_Delete(j);
    return ok ? 1 : dt_fail_format(err, "%s: seq: not a positive integer (the run's training window)", path);
}
