/* study.c — `difftrans study` as a library call: the scaling study of difftrans_analysis.h.
 *
 * A study is a set of runs, each a size × variant × seed, trained on one token dataset with the
 * same number of training tokens per parameter at every size. Layout of the study directory:
 *   study.json              the plan: every option that fixes what the runs are (checked on resume)
 *   runs/SIZE-VARIANT-sK/   one run: a `difftrans train` checkpoint directory (metrics.jsonl, the
 *                           model, its optimizer state while it trains) and, once it is finished and
 *                           measured, run.json (written last, atomically: its presence means done)
 *   REPORT.md, report.json, plots/   written by study_report.c from the run.json files
 *
 * Resuming: a run with run.json is done; a run with a checkpoint (dt_train_checkpoint: one whose
 * commit a kill interrupted counts) continues from it exactly (dt_train's resume); any other run
 * starts afresh. Runs save a checkpoint every
 * tenth of their steps, so a killed study loses at most that much of the run it was in.
 *
 * Runs are independent, so parallelism is over runs: `jobs` at once in this process (each on
 * threads / jobs OpenMP threads), and over MPI ranks (each rank its share, assigned largest
 * first to the rank with the least work; the study directory must be one every rank sees). The
 * models are small, so one data-parallel run over ranks would spend more time summing gradients
 * than computing them; independent runs need no communication until the report. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "analysis/plan.h"
#include "analysis/study.h"
#include "base/base.h"
#include "dist/comm.h"
#include "internal.h"

/* ---------------------------------------------------------------- sizes
 *
 * F ≈ 8/3·C rounded up to a multiple of 16, 4 query heads (2 differential heads), so the matched
 * Transformer has 4 heads of C/4. Non-embedding parameters of the Transformer: s1 55.5K, s2 150K,
 * s3 332K, s4 804K (14.5× s1), s5 1.55M. */
static const dt_study_size SIZES[] = {
    {"s1", 48, 2, 4, 128}, {"s2", 64, 3, 4, 176}, {"s3", 96, 3, 4, 256}, {"s4", 128, 4, 4, 352}, {"s5", 160, 5, 4, 432},
};
#define N_SIZES ((int)(sizeof SIZES / sizeof *SIZES))

const char *dt_study_size_names(void) { return "s1,s2,s3,s4,s5 (or HIDDENxLAYERS, e.g. 80x2)"; }

static int parse_size(const char *name, dt_study_size *out, dt_error *err) {
    for (int i = 0; i < N_SIZES; i++)
        if (strcmp(SIZES[i].name, name) == 0) return *out = SIZES[i], 0;
    int c = 0, l = 0, used = 0;
    if (sscanf(name, "%dx%d%n", &c, &l, &used) == 2 && name[used] == '\0') {
        if (c < 8 || c > 4096 || c % 8 != 0)
            return dt_fail(err, "size '%s': hidden size %d must be a multiple of 8 in 8..4096", name, c);
        if (l < 1 || l > 64) return dt_fail(err, "size '%s': %d layers must be in 1..64", name, l);
        memset(out, 0, sizeof *out);
        snprintf(out->name, sizeof out->name, "%dx%d", c, l);
        out->hidden = c, out->layers = l, out->heads = 4;
        out->intermediate = (8 * c / 3 + 15) / 16 * 16;
        return 0;
    }
    return dt_fail(err, "size '%s': unknown (known: %s)", name, dt_study_size_names());
}

int dt_study_parse_sizes(const char *list, dt_study_size *out, int *n, dt_error *err) {
    *n = 0;
    const char *p = list;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char name[32];
        if (len == 0 || len >= sizeof name) return dt_fail(err, "sizes '%s': an empty or overlong name", list);
        if (*n >= DT_STUDY_MAX_SIZES) return dt_fail(err, "sizes '%s': more than %d sizes", list, DT_STUDY_MAX_SIZES);
        memcpy(name, p, len);
        name[len] = '\0';
        if (parse_size(name, &out[*n], err) != 0) return -1;
        for (int i = 0; i < *n; i++)
            if (strcmp(out[i].name, out[*n].name) == 0) return dt_fail(err, "sizes '%s': '%s' twice", list, name);
        (*n)++;
        p = comma ? comma + 1 : NULL;
    }
    if (*n == 0) return dt_fail(err, "sizes: none given");
    return 0;
}

void dt_study_options_default(dt_study_options *o) {
    memset(o, 0, sizeof *o);
    static const char *const sizes[] = {"s1", "s2", "s3", "s4"};
    o->n_sizes = 4;
    for (int i = 0; i < 4; i++) parse_size(sizes[i], &o->sizes[i], NULL);
    o->n_variants = 2;
    o->variants[0] = "diff";
    o->variants[1] = "transformer";
    o->seeds = 3;
    o->seed = 1337;
    o->tokens_per_param = 10;
    o->batch = 8;
    o->seq = 256;
    o->lr = 2e-3f;
    o->eval_windows = 64;
    o->n_bins = 8;
    o->resamples = 2000;
    o->jobs = 2;
}

/* ---------------------------------------------------------------- the plan */

size_t dt_study_nonembedding_params(const dt_config *c) {
    return dt_config_nonembedding_param_count(c);
}

/* The DIFF config of a size: the base every variant of that size is built on. */
static int size_config(const dt_study_size *s, const dt_config *vocab, int seq, dt_config *out, dt_error *err) {
    dt_config c;
    if (dt_config_preset(&c, "tiny", DT_ARCH_DIFF, err) != 0) return -1;
    c.hidden_size = s->hidden;
    c.num_hidden_layers = s->layers;
    c.num_attention_heads = c.num_key_value_heads = s->heads;
    c.head_dim = s->hidden / s->heads;
    c.intermediate_size = s->intermediate;
    c.max_position_embeddings = seq;
    c.vocab_size = vocab->vocab_size;
    c.special = vocab->special;
    if (dt_config_validate(&c, s->name, err) != 0) return -1;
    *out = c;
    return 0;
}

int study_plan(const dt_study_options *o, const dt_config *vocab, study_run **runs, int *n_runs, dt_error *err) {
    *runs = NULL, *n_runs = 0;
    const int n = o->n_sizes * o->n_variants * o->seeds;
    study_run *r = calloc((size_t)(n > 0 ? n : 1), sizeof *r);
    if (!r) return dt_fail_oom(err, "out of memory for %d runs", n);
    int k = 0;
    size_t before = 0; /* the previous size's DIFF non-embedding parameters */
    for (int i = 0; i < o->n_sizes; i++) {
        dt_config base;
        if (size_config(&o->sizes[i], vocab, o->seq, &base, err) != 0) goto fail;
        /* the report reads the first size as the smallest and the last as the largest (its range, its
         * per-layer and by-position tables, whether the fits cross inside the sizes) */
        const size_t nonembedding = dt_study_nonembedding_params(&base);
        if (i > 0 && nonembedding <= before) {
            dt_fail(err, "sizes: %s (%zu non-embedding parameters) after %s (%zu): list the sizes from the smallest "
                         "to the largest",
                    o->sizes[i].name, nonembedding, o->sizes[i - 1].name, before);
            goto fail;
        }
        before = nonembedding;
        /* the same tokens for every variant of a size: per non-embedding parameter of its DIFF model */
        const double tokens = o->tokens_per_param * (double)dt_study_nonembedding_params(&base);
        const double per_step = (double)o->batch * o->seq;
        const int steps = (int)fmax(1, floor(tokens / per_step + 0.5));
        for (int v = 0; v < o->n_variants; v++) {
            dt_config cfg;
            if (dt_cmp_variant_config_base(o->variants[v], &base, &cfg, err) != 0) goto fail;
            for (int s = 0; s < o->seeds; s++, k++) {
                study_run *x = &r[k];
                x->size = i, x->variant = v, x->seed_index = s;
                x->cfg = cfg;
                x->seed = o->seed + (uint64_t)s;
                x->steps = steps;
                x->params = dt_config_param_count(&cfg);
                x->nonembedding = dt_study_nonembedding_params(&cfg);
                /* forward + backward ≈ 6 FLOPs per weight per token, the LM head a matrix product too */
                x->cost = 6.0 * steps * per_step * (double)(x->nonembedding + (size_t)cfg.vocab_size * cfg.hidden_size);
                if (dt_pathf(x->dir, sizeof x->dir, err, "%s/runs/%s-%s-s%d", o->out, o->sizes[i].name,
                             o->variants[v], s))
                    goto fail;
            }
        }
    }
    *runs = r, *n_runs = n;
    return 0;
fail:
    free(r);
    return -1;
}

/* The dataset's identity: FNV-1a of its dataset.json (split sizes, shards) and tokenizer.json. A
 * dataset made again from other text, or with another tokenizer, differs; the runs of a study must
 * all read the same one. */
static int dataset_fingerprint(const char *dir, char out[17], dt_error *err) {
    char a[4200], b[4200];
    if (dt_pathf(a, sizeof a, err, "%s/dataset.json", dir) || dt_pathf(b, sizeof b, err, "%s/tokenizer.json", dir))
        return -1;
    const char *const files[2] = {a, b};
    return plan_fingerprint(files, 2, out, err);
}

/* Everything that fixes what the runs are; a resumed study must have the same. */
static cJSON *plan_json(const dt_study_options *o, const dt_config *vocab, size_t n_train, size_t n_val,
                        const char *fingerprint) {
    cJSON *j = cJSON_CreateObject(), *sizes = cJSON_AddArrayToObject(j, "sizes"),
          *variants = cJSON_AddArrayToObject(j, "variants");
    int ok = j && sizes && variants;
    for (int i = 0; ok && i < o->n_sizes; i++) {
        cJSON *s = cJSON_CreateObject();
        ok = s && cJSON_AddItemToArray(sizes, s) && cJSON_AddStringToObject(s, "name", o->sizes[i].name) &&
             cJSON_AddNumberToObject(s, "hidden", o->sizes[i].hidden) &&
             cJSON_AddNumberToObject(s, "layers", o->sizes[i].layers) &&
             cJSON_AddNumberToObject(s, "heads", o->sizes[i].heads) &&
             cJSON_AddNumberToObject(s, "intermediate", o->sizes[i].intermediate);
    }
    for (int v = 0; ok && v < o->n_variants; v++) ok = cJSON_AddItemToArray(variants, cJSON_CreateString(o->variants[v]));
    ok = ok && cJSON_AddNumberToObject(j, "seeds", o->seeds) && cJSON_AddNumberToObject(j, "seed", (double)o->seed) &&
         cJSON_AddNumberToObject(j, "tokens_per_param", o->tokens_per_param) &&
         cJSON_AddNumberToObject(j, "batch", o->batch) && cJSON_AddNumberToObject(j, "seq", o->seq) &&
         cJSON_AddNumberToObject(j, "lr", plan_float_decimal(o->lr)) &&
         cJSON_AddNumberToObject(j, "vocab_size", vocab->vocab_size) &&
         cJSON_AddNumberToObject(j, "train_tokens", (double)n_train) &&
         cJSON_AddNumberToObject(j, "val_tokens", (double)n_val) &&
         cJSON_AddStringToObject(j, "dataset_fingerprint", fingerprint) &&
         cJSON_AddNumberToObject(j, "eval_windows", o->eval_windows) &&
         cJSON_AddNumberToObject(j, "position_bins", o->n_bins);
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* ---------------------------------------------------------------- one run */

typedef struct study study;

struct study {
    const dt_study_options *o;
    const int *tokens; /* train split then val split */
    size_t n_tokens, n_train;
    study_run *runs;
    int n_runs;
    int *order; /* this rank's runs, largest first */
    int n_order, next;
    int threads_per_job;
    double total_cost, done_cost, t0;
    double start_cost; /* done_cost when this call began (runs finished before): not in the ETA's rate */
    pthread_mutex_t mu;
    volatile int *stop;    /* the caller's, or own_stop: set on a failure, so that the other runs save and stop */
    volatile int own_stop;
    int failed_run;        /* the first run that failed, -1 */
    dt_error failure;      /* its error */
    char fingerprint[17];  /* the dataset's, when the study began */
};

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static void report_progress(study *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_progress(study *st, const char *fmt, ...) {
    const dt_study_options *o = st->o;
    if (!o->progress) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const double frac = st->total_cost > 0 ? st->done_cost / st->total_cost : 0;
    const double now = st->done_cost - st->start_cost, left = st->total_cost - st->done_cost;
    const double eta = now > 0.005 * st->total_cost ? (dt_seconds() - st->t0) * left / now : NAN;
    o->progress(o->progress_ctx, frac, eta, msg);
}

typedef struct {
    study *st;
    int r;
    double last_step;
} run_ctx;

static int on_eval(void *ctx, int step, const dt_model *m, dt_error *err) {
    (void)m, (void)err;
    run_ctx *rc = ctx;
    study *st = rc->st;
    const study_run *x = &st->runs[rc->r];
    pthread_mutex_lock(&st->mu);
    st->done_cost += x->cost * (step - rc->last_step) / x->steps;
    rc->last_step = step;
    report_progress(st, "%s %s seed %d: step %d/%d", st->o->sizes[x->size].name, st->o->variants[x->variant],
                    x->seed_index, step, x->steps);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* Trains run r (or continues it) until its last step: 0, or 1 when the study was told to stop
 * first (the run's checkpoint is saved), or -1. */
static int train_run(study *st, int r, dt_error *err) {
    const dt_study_options *o = st->o;
    study_run *x = &st->runs[r];
    char path[4400];
    dt_train_options t;
    if (dt_train_checkpoint(x->dir, path, sizeof path)) {
        dt_train_resume_defaults(&t);
    } else {
        dt_train_defaults(&t);
        t.tokens_path = o->tokens;
        t.cfg = x->cfg;
        t.batch = o->batch;
        t.seq = o->seq;
        t.seed = x->seed;
        t.lr = o->lr;
        t.warmup = x->steps / 20 > 0 ? x->steps / 20 : 1;
        t.eval_interval = x->steps / 20 > 0 ? x->steps / 20 : 1;
        t.eval_batches = 4;
        t.save_interval = x->steps / 10 > 0 ? x->steps / 10 : 1;
    }
    t.steps = x->steps;
    t.out_dir = x->dir;
    t.quiet = 1;
    t.stop = st->stop;
    run_ctx rc = {.st = st, .r = r, .last_step = 0};
    t.eval_hook = on_eval;
    t.eval_ctx = &rc;
    if (dt_train(&t, err) != 0) return -1;
    if (*st->stop) return 1;
    pthread_mutex_lock(&st->mu);
    st->done_cost += x->cost * (x->steps - rc.last_step) / x->steps;
    pthread_mutex_unlock(&st->mu);
    return 0;
}

/* Measures the run and writes its run.json. A run that diverged (diverged: the training's message)
 * is a result, not a failure of the study: its run.json says so, with the measures of its last
 * checkpoint when it saved one (none before its first tenth). */
static int measure_run(study *st, int r, const char *diverged, dt_error *err) {
    const dt_study_options *o = st->o;
    study_run *x = &st->runs[r];
    dt_model m;
    memset(&m, 0, sizeof m);
    dt_an_protocol held = {0}, train = {0};
    dt_an_training tr = {0};
    cJSON *j = NULL;
    int rc = -1, have_model = 0, measured = 0;
    char path[4400];
    if (dt_pathf(path, sizeof path, err, "%s/model.safetensors", x->dir)) return -1;
    if (!diverged || file_exists(path)) {
        if (dt_model_load(&m, x->dir, err) != 0) return -1;
        have_model = 1;
        if (dt_an_protocol_run(&m, st->tokens + st->n_train, st->n_tokens - st->n_train, o->seq, o->eval_windows,
                               o->n_bins, &held, err) != 0 ||
            dt_an_protocol_run(&m, st->tokens, st->n_train, o->seq, o->eval_windows, o->n_bins, &train, err) != 0)
            goto done;
        measured = 1;
    }
    if (dt_an_training_load(x->dir, &tr, err) != 0) goto done;
    j = cJSON_CreateObject();
    int ok = j && cJSON_AddStringToObject(j, "size", o->sizes[x->size].name) &&
             cJSON_AddStringToObject(j, "variant", o->variants[x->variant]) &&
             cJSON_AddNumberToObject(j, "seed_index", x->seed_index) &&
             cJSON_AddNumberToObject(j, "seed", (double)x->seed) &&
             cJSON_AddStringToObject(j, "arch", dt_arch_name(x->cfg.arch)) &&
             cJSON_AddNumberToObject(j, "params", (double)x->params) &&
             cJSON_AddNumberToObject(j, "nonembedding_params", (double)x->nonembedding) &&
             cJSON_AddNumberToObject(j, "heads", x->cfg.num_attention_heads) &&
             cJSON_AddNumberToObject(j, "head_dim", x->cfg.head_dim) && cJSON_AddNumberToObject(j, "steps", x->steps) &&
             cJSON_AddNumberToObject(j, "tokens", (double)x->steps * o->batch * o->seq) &&
             (!diverged || cJSON_AddStringToObject(j, "diverged", diverged));
    cJSON *h = ok ? cJSON_AddObjectToObject(j, "heldout") : NULL, *t = h ? cJSON_AddObjectToObject(j, "train") : NULL,
          *d = t ? cJSON_AddObjectToObject(j, "training") : NULL;
    if (!d || (measured && (dt_an_protocol_add_json(h, &held) != 0 || dt_an_protocol_add_json(t, &train) != 0)) ||
        (!measured && (!cJSON_AddNullToObject(h, "loss") || !cJSON_AddNullToObject(t, "loss"))) ||
        dt_an_training_add_json(d, &tr) != 0) {
        rc = dt_fail_oom(err, "%s: out of memory for run.json", x->dir);
        goto done;
    }
    if (dt_pathf(path, sizeof path, err, "%s/run.json", x->dir) == 0) rc = dt_an_write_json(path, j, err);
done:
    cJSON_Delete(j);
    dt_an_protocol_free(&held);
    dt_an_protocol_free(&train);
    dt_an_training_free(&tr);
    if (have_model) dt_model_free(&m);
    return rc;
}

/* ---------------------------------------------------------------- running them */

/* Trains (or resumes) and measures run r unless its run.json is there. */
static int do_run(study *st, int r, dt_error *err) {
    study_run *x = &st->runs[r];
    char path[4400];
    if (dt_pathf(path, sizeof path, err, "%s/run.json", x->dir)) return -1;
    if (file_exists(path)) return 0;
    char now[17];
    if (dataset_fingerprint(st->o->tokens, now, err) != 0) return -1;
    if (strcmp(now, st->fingerprint) != 0)
        return dt_fail_format(err, "%s: the dataset changed while the study ran (it was made again?): every run of "
                                   "a study must read the same one; restore it, or start the study afresh in "
                                   "another directory", st->o->tokens);
    int rc = train_run(st, r, err);
    const int diverged = rc < 0 && err->code == DT_ERR_DIVERGED;
    if (rc != 0 && !diverged) return rc;
    pthread_mutex_lock(&st->mu);
    report_progress(st, "%s %s seed %d: %s", st->o->sizes[x->size].name, st->o->variants[x->variant], x->seed_index,
                    diverged ? "diverged; measuring its last checkpoint" : "measuring");
    pthread_mutex_unlock(&st->mu);
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return measure_run(st, r, diverged ? why : NULL, err);
}

static void *worker(void *arg) {
    study *st = arg;
    if (st->threads_per_job > 0) omp_set_num_threads(st->threads_per_job);
    for (;;) {
        pthread_mutex_lock(&st->mu);
        int k = *st->stop ? st->n_order : st->next++;
        pthread_mutex_unlock(&st->mu);
        if (k >= st->n_order) break;
        dt_error e = {0};
        int rc = do_run(st, st->order[k], &e);
        if (rc < 0) {
            pthread_mutex_lock(&st->mu);
            if (st->failed_run < 0) st->failed_run = st->order[k], st->failure = e;
            *st->stop = 1;
            pthread_mutex_unlock(&st->mu);
        }
    }
    return NULL;
}

/* This rank's runs, assigned largest first to the rank with the least work so far (the same on
 * every rank), then ordered largest first: the last runs to start are the small ones. */
static int assign_runs(study *st, int rank, int size, dt_error *err) {
    int *by_cost = malloc((size_t)st->n_runs * sizeof *by_cost);
    double *load = calloc((size_t)size, sizeof *load);
    st->order = malloc((size_t)st->n_runs * sizeof *st->order);
    if (!by_cost || !load || !st->order) {
        free(by_cost);
        free(load);
        return dt_fail_oom(err, "out of memory for %d runs", st->n_runs);
    }
    for (int i = 0; i < st->n_runs; i++) by_cost[i] = i;
    for (int i = 1; i < st->n_runs; i++) /* insertion sort, stable: runs are few */
        for (int j = i; j > 0 && st->runs[by_cost[j]].cost > st->runs[by_cost[j - 1]].cost; j--) {
            int t = by_cost[j];
            by_cost[j] = by_cost[j - 1], by_cost[j - 1] = t;
        }
    st->n_order = 0;
    for (int i = 0; i < st->n_runs; i++) {
        int best = 0;
        for (int q = 1; q < size; q++)
            if (load[q] < load[best]) best = q;
        load[best] += st->runs[by_cost[i]].cost;
        if (best == rank) st->order[st->n_order++] = by_cost[i];
    }
    free(by_cost);
    free(load);
    return 0;
}

static int run_all(study *st, int jobs, int threads, dt_error *err) {
    if (jobs > st->n_order) jobs = st->n_order;
    if (jobs < 1) jobs = 1;
    st->threads_per_job = threads / jobs > 0 ? threads / jobs : 1;
    pthread_t th[64];
    int started = 0;
    for (; jobs > 1 && started < jobs && started < 64; started++)
        if (pthread_create(&th[started], NULL, worker, st) != 0) break;
    if (started == 0) {
        st->threads_per_job = threads;
        worker(st);
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (st->failed_run >= 0) {
        *err = st->failure;
        return -1;
    }
    return 0;
}

static int check_options(const dt_study_options *o, dt_error *err) {
    if (!o->tokens) return dt_fail(err, "tokens: a token dataset is required");
    if (!o->out) return dt_fail(err, "out: a study directory is required");
    if (o->n_sizes < 2 || o->n_sizes > DT_STUDY_MAX_SIZES)
        return dt_fail(err, "n_sizes %d: a study needs 2..%d sizes", o->n_sizes, DT_STUDY_MAX_SIZES);
    if (o->n_variants < 2 || o->n_variants > DT_STUDY_MAX_VARIANTS)
        return dt_fail(err, "n_variants %d: a study needs 2..%d variants (the first two are fitted against each "
                            "other)", o->n_variants, DT_STUDY_MAX_VARIANTS);
    for (int v = 0; v < o->n_variants; v++)
        for (int w = 0; w < v; w++)
            if (strcmp(o->variants[v], o->variants[w]) == 0) return dt_fail(err, "variants: '%s' twice", o->variants[v]);
    if (o->seeds < 1 || o->seeds > DT_STUDY_MAX_SEEDS)
        return dt_fail(err, "seeds %d: must be in 1..%d", o->seeds, DT_STUDY_MAX_SEEDS);
    if (!(o->tokens_per_param > 0 && o->tokens_per_param <= 1e4))
        return dt_fail(err, "tokens_per_param %g: must be in (0, 10000]", o->tokens_per_param);
    if (o->batch < 1 || o->seq < 2) return dt_fail(err, "batch %d, seq %d: must be at least 1 and 2", o->batch, o->seq);
    if (!(o->lr > 0 && o->lr < 1)) return dt_fail(err, "lr %g: must be in (0, 1)", (double)o->lr);
    if (o->eval_windows < 1) return dt_fail(err, "eval_windows %d: must be at least 1", o->eval_windows);
    /* checked here, before study.json is written: a plan the runs cannot measure would be kept */
    if (o->n_bins < 1 || o->n_bins > DT_AN_PROTO_MAX_BINS || o->n_bins > o->seq)
        return dt_fail(err, "n_bins %d: must be in 1..%d and at most seq %d", o->n_bins, DT_AN_PROTO_MAX_BINS, o->seq);
    /* an interval needs resamples; a few hundred make its 2.5th and 97.5th percentiles */
    if (o->resamples < 100) return dt_fail(err, "resamples %d: must be at least 100", o->resamples);
    return 0;
}

int dt_study_run(const dt_study_options *o, dt_error *err) {
    if (check_options(o, err) != 0) return -1;
    const int rank = dt_comm_rank(o->comm), size = dt_comm_size(o->comm);
    dt_config vocab;
    memset(&vocab, 0, sizeof vocab);
    if (tokens_dir_check(o->tokens, err) != 0 || train_vocab_from_tokenizer(&vocab, o->tokens, err) != 0) return -1;
    study st = {.o = o, .failed_run = -1};
    st.stop = o->stop ? o->stop : &st.own_stop;
    int rc = 0;
    cJSON *plan = NULL;
    if (train_tokens_load(o->tokens, vocab.vocab_size, o->seq, (int **)&st.tokens, &st.n_tokens, &st.n_train, err) != 0)
        return -1;
    if (st.n_tokens - st.n_train < (size_t)o->seq + 1) {
        rc = dt_fail(err, "%s: the val split is shorter than one window of %d tokens", o->tokens, o->seq + 1);
        goto done;
    }
    if (study_plan(o, &vocab, &st.runs, &st.n_runs, err) != 0) {
        rc = -1;
        goto done;
    }
    if (dataset_fingerprint(o->tokens, st.fingerprint, err) != 0) {
        rc = -1;
        goto done;
    }
    plan = plan_json(o, &vocab, st.n_train, st.n_tokens - st.n_train, st.fingerprint);
    if (!plan) {
        rc = dt_fail_oom(err, "out of memory for the study's plan");
        goto done;
    }
    /* rank 0 creates the directory and the plan (or checks it); every rank must then see it */
    char path[4200];
    uint64_t nonce = 0;
    if (rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        nonce = ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40);
        rc = dt_pathf(path, sizeof path, err, "%s/study.json", o->out);
        if (rc == 0) rc = dir_ensure(o->out, err);
        if (rc == 0 && file_exists(path)) rc = plan_check(path, plan, "study", err);
        else if (rc == 0) rc = dt_an_write_json(path, plan, err);
        char runs[4200];
        if (rc == 0) rc = dt_pathf(runs, sizeof runs, err, "%s/runs", o->out);
        if (rc == 0) rc = dir_ensure(runs, err);
        if (rc == 0 && size > 1) {
            char mark[4300], text[32];
            snprintf(text, sizeof text, "%016llx", (unsigned long long)nonce);
            rc = dt_pathf(mark, sizeof mark, err, "%s/ranks.check", o->out);
            if (rc == 0) rc = write_text_atomic(mark, text, err);
        }
    }
    if (size > 1) {
        comm_bcast(o->comm, &rc, sizeof rc, "the study's plan");
        if (rc == 0) {
            comm_bcast(o->comm, &nonce, sizeof nonce, "the study's plan");
            dt_error mine = {0};
            int status = 0;
            if (rank != 0) {
                char mark[4300], want[32], *text = NULL;
                size_t len = 0;
                snprintf(want, sizeof want, "%016llx", (unsigned long long)nonce);
                status = dt_pathf(mark, sizeof mark, &mine, "%s/ranks.check", o->out);
                if (status == 0) status = read_text_file(mark, 64, "a check file", &text, &len, &mine);
                if (status == 0 && strncmp(text, want, 16) != 0)
                    status = dt_fail_io(&mine, "%s: another study's file: every rank must see the same study "
                                               "directory (a shared file system)", mark);
                free(text);
            }
            if (comm_agree(o->comm, status, NULL, NULL, 0, &mine) != 0) {
                *err = mine;
                rc = -1;
            }
        } else if (rank != 0) {
            rc = dt_fail(err, "rank 0 could not prepare the study directory %s", o->out);
        }
    }
    if (rc != 0) goto done;
    for (int i = 0; i < st.n_runs; i++) st.total_cost += st.runs[i].cost;
    if (assign_runs(&st, rank, size, err) != 0) {
        rc = -1;
        goto done;
    }
    /* runs already measured count as done */
    for (int i = 0; i < st.n_runs; i++) {
        char done_path[4400];
        snprintf(done_path, sizeof done_path, "%s/run.json", st.runs[i].dir);
        if (file_exists(done_path)) st.done_cost += st.runs[i].cost;
    }
    if (pthread_mutex_init(&st.mu, NULL) != 0) {
        rc = dt_fail_oom(err, "cannot create a mutex");
        goto done;
    }
    st.t0 = dt_seconds();
    st.start_cost = st.done_cost;
    report_progress(&st, "%d runs (%d on this rank), %d at a time", st.n_runs, st.n_order, o->jobs);
    const int threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    rc = run_all(&st, o->jobs, threads, err);
    if (rc == 0 && *st.stop)
        rc = dt_fail_code(err, DT_ERR_INTERRUPTED, "%s: stopped; the finished runs and the checkpoint of each "
                                                   "unfinished one are kept, and the same command resumes the study",
                          o->out);
    /* rank 0 writes the report once every rank's runs are measured (the other ranks may still be
     * training: their run.json files arrive through the shared directory) */
    if (rc == 0 && rank == 0) rc = study_wait_for_runs(st.runs, st.n_runs, st.stop, o, err);
    if (rc == 0 && rank == 0) {
        report_progress(&st, "writing the report");
        rc = study_report_write(o, st.runs, st.n_runs, err);
    }
    pthread_mutex_destroy(&st.mu);
done:
    cJSON_Delete(plan);
    free(st.order);
    free(st.runs);
    free((int *)st.tokens);
    return rc;
}
