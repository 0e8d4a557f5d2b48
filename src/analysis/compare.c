/* compare.c — `difftrans compare` as a library call; see difftrans_analysis.h.
 *
 * Layout of the report directory:
 *   needle/             the long-form needle set (with needle only) and train.txt = data + its train.txt
 *   VARIANT/            the first run of each variant (seed 0)
 *   VARIANT-seedS/      run S ≥ 1 of each variant
 *   scaling-PRESET/     diff/ and transformer/ at the other --scaling sizes (first seed)
 *   compare.json        the plan: every option that fixes what the runs are (checked on resume)
 *   REPORT.md, report.json, plots/
 *
 * Resuming, as the study does (study.c): each run directory is a `difftrans train` checkpoint
 * (saved every tenth of the steps) with curve.json beside it, the run's task-accuracy curve so far,
 * rewritten at each point and marked done once the run has trained every step. A resumed call
 * keeps a done run, continues one with a checkpoint (dt_train_checkpoint) from it exactly, with the
 * curve points it had up to there, and trains any other afresh. The analyses, cheap next to the
 * trainings and kept only in the report, run again on every run.
 */
#include "difftrans_analysis.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "analysis/needle.h"
#include "analysis/plan.h"
#include "analysis/report.h"
#include "analysis/textbuf.h"
#include "internal.h"
#include "base/base.h"

void dt_cmp_options_default(dt_cmp_options *o, int quick) {
    memset(o, 0, sizeof *o);
    o->preset = "tiny";
    /* The retrieval tasks are found between steps 1200 and 2700 if at all; at 6000 steps 4 of 8
     * runs of the tiny preset had found them (3 seeds left most runs on one side of that line). */
    o->steps = quick ? 60 : 6000;
    o->batch = quick ? 8 : 16;
    o->seq = quick ? 64 : 128;
    o->lr = 3e-3f;
    o->seed = 1337;
    o->seeds = quick ? 2 : 4;
    o->n_variants = 2;
    o->variants[0] = "diff";
    o->variants[1] = "transformer";
    o->tasks = (1 << DT_TASK_RECALL) | (1 << DT_TASK_DEPTH) | (1 << DT_TASK_ICL);
    o->task_ratio = 0.95;
    o->task_examples = quick ? 4 : 32;
    o->curve_points = quick ? 3 : 10;
    o->quick = quick;
    o->jobs = 2;
}

/* ---------------------------------------------------------------- variants */

typedef struct {
    const char *key, *display;
    const char *ablation; /* dt_config_ablation's name applied to the DIFF base; NULL: the DIFF base */
    void (*modify)(dt_config *c);
} variant;

static void with_subln(dt_config *c) { c->use_subln_weight = 1; }

/* The matched baselines and DIFF V2 with the V2 write-up's ablations (ablation.c says exactly what
 * each is); every other ablation is reached as A or BASE+A. Display names stay ASCII: they go into
 * gnuplot's titles. */
static const variant variants[] = {
    {"diff", "DIFF", NULL, NULL},
    {"transformer", "Transformer", "transformer", NULL},
    {"transformer-1.5h", "Transformer 1.5h", "transformer-1.5h", NULL},
    {"transformer-2hd", "Transformer 2hd", "transformer-2hd", NULL},
    {"diff-subln", "DIFF+subln", NULL, with_subln},
    {"v2", "DIFF V2", "v2", NULL},
    {"v2-crossgroup", "DIFF V2 cross-group", "v2-crossgroup", NULL},
    {"v2-nolambda", "DIFF V2 no lambda", "v2-nolambda", NULL},
    {"v2-nosigmoid", "DIFF V2 no sigmoid", "v2-nosigmoid", NULL},
};
#define N_VARIANTS ((int)(sizeof variants / sizeof *variants))

static const variant *find_variant(const char *name) {
    for (int i = 0; i < N_VARIANTS; i++)
        if (strcmp(variants[i].key, name) == 0) return &variants[i];
    return NULL;
}

const char *dt_cmp_variant_names(void) {
    return "diff, transformer, transformer-1.5h, transformer-2hd, diff-subln, v2, v2-crossgroup, v2-nolambda, "
           "v2-nosigmoid, or BASE+ABLATION (BASE one of those) / ABLATION (on DIFF) with ABLATION one of the "
           "ablations (`difftrans train --help`, --ablation)";
}

const char *dt_cmp_variant_display(const char *name) {
    if (!name) return "";
    const variant *v = find_variant(name);
    return v ? v->display : name;
}

/* The report's name of a variant: the table's, else the name as given. */
static const char *variant_display(const char *name) { return dt_cmp_variant_display(name); }

/* name on the DIFF config c: a table entry, BASE+A (the last '+' splits, so BASE may hold more),
 * or an ablation A of c. */
static int variant_from(const char *name, const dt_config *c, dt_config *out, dt_error *err) {
    const variant *v = find_variant(name);
    if (v) {
        dt_config r = *c;
        if (v->ablation && dt_config_ablation(&r, c, v->ablation, err) != 0)
            return dt_fail_prefix(err, "variant '%s'", name);
        if (v->modify) v->modify(&r);
        if (dt_config_validate(&r, name, err) != 0) return -1;
        *out = r;
        return 0;
    }
    dt_config base = *c;
    const char *ablation = name, *plus = strrchr(name, '+');
    if (plus) {
        char prefix[128];
        const size_t len = (size_t)(plus - name);
        if (len >= sizeof prefix) return dt_fail(err, "variant '%s': name too long", name);
        memcpy(prefix, name, len);
        prefix[len] = '\0';
        dt_error why;
        if (variant_from(prefix, c, &base, &why) != 0)
            return dt_fail(err, "variant '%s': unknown base '%s' before '+' (%s)", name, prefix, why.msg);
        ablation = plus + 1;
    }
    dt_error why;
    dt_config r;
    if (dt_config_ablation(&r, &base, ablation, &why) != 0)
        return dt_fail(err, "variant '%s': unknown (known: %s; ABLATION one of %s): %s", name, dt_cmp_variant_names(),
                       dt_ablation_names(), why.msg);
    if (dt_config_validate(&r, name, err) != 0) return -1;
    *out = r;
    return 0;
}

int dt_cmp_variant_config_base(const char *name, const dt_config *diff_base, dt_config *out, dt_error *err) {
    if (!name) return dt_fail(err, "variant: no name given");
    if (!diff_base) return dt_fail(err, "variant '%s': no base config given", name);
    if (diff_base->arch != DT_ARCH_DIFF)
        return dt_fail(err, "variant '%s': the base config must be a DIFF model (diffllama), not %s", name,
                       dt_arch_name(diff_base->arch));
    if (dt_config_validate(diff_base, "variant base config", err) != 0) return -1;
    return variant_from(name, diff_base, out, err);
}

int dt_cmp_variant_config(const char *name, const char *preset, dt_config *out, dt_error *err) {
    dt_config c;
    if (dt_config_preset(&c, preset, DT_ARCH_DIFF, err) != 0) return -1;
    return dt_cmp_variant_config_base(name, &c, out, err);
}

/* ---------------------------------------------------------------- progress */

/* Shared by concurrent trainings: every field below mu is guarded by it. */
typedef struct {
    const dt_cmp_options *o;
    double total, t0;
    pthread_mutex_t mu;
    double *job_done;    /* [n_jobs] steps done by each training */
    int n_jobs;
    double other_done;   /* analyses */
    double kept;         /* steps of the runs an earlier call trained: not in the ETA's rate */
    char msg[4608];
} progress;

/* Reports the state with msg; call with p->mu held. */
static void report_locked(progress *p) {
    if (!p->o->progress) return;
    double done = p->other_done;
    for (int j = 0; j < p->n_jobs; j++) done += p->job_done[j];
    double el = monotonic_seconds() - p->t0;
    double eta = done - p->kept > 0 ? el / (done - p->kept) * (p->total - done) : NAN;
    p->o->progress(p->o->progress_ctx, done, p->total, eta, p->msg);
}

static void report_progress(progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_progress(progress *p, const char *fmt, ...) {
    pthread_mutex_lock(&p->mu);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof p->msg, fmt, ap);
    va_end(ap);
    report_locked(p);
    pthread_mutex_unlock(&p->mu);
}

/* An analysis pass over one run costs about this many training steps of time; only the ETA
 * depends on it. Measured with the defaults on 2 loaded cores: 60–110 s per analysis against
 * 14 min for 6 × 2000 steps two at a time, i.e. about 1000 steps of 16 × 128 tokens; a step's cost
 * grows with its tokens, the analysis's does not. */
#define ANALYSIS_STEPS(o) ((o)->quick ? 20.0 : 1000.0 * (16.0 * 128.0) / ((double)(o)->batch * (double)(o)->seq))

/* ---------------------------------------------------------------- trainings */

/* One training: a variant × seed of the comparison, or a scaling run (no curve). */
typedef struct {
    dt_config cfg;
    char dir[4400], what[128];
    uint64_t seed;
    int n_curve;
    rp_curve_point curve[RP_MAX_CURVE];
    int want_curve;
    int trained;     /* an earlier call trained it to the last step (its curve.json says done) */
    int resume;      /* an earlier call left a checkpoint of it, at step resume_step: continued from there */
    int resume_step;
    int rc;
    dt_error err;
} job;

typedef struct {
    const dt_cmp_options *o;
    const char *train_path;
    const dt_task_mix *mix;
    progress *p;
    job *jobs;
    int n_jobs, next, threads_per_job;
    volatile int *stop;  /* the caller's, or own_stop; set when a training fails: the others save and stop */
    volatile int own_stop;
} pool;

typedef struct {
    pool *pl;
    int j;
    dt_task_eval_options eval; /* a smaller evaluation set than the final one */
    int every;
} run_ctx;

/* dir/curve.json: the n points of a run's curve, and whether it has trained every step. */
static int curve_save(const job *jb, int done, dt_error *err) {
    char path[4500];
    if (dt_pathf(path, sizeof path, err, "%s/curve.json", jb->dir) != 0) return -1;
    cJSON *j = cJSON_CreateObject(), *pts = cJSON_AddArrayToObject(j, "points");
    int ok = pts && cJSON_AddBoolToObject(j, "done", done);
    for (int i = 0; ok && i < jb->n_curve; i++) {
        cJSON *pt = cJSON_CreateObject(), *acc = cJSON_AddArrayToObject(pt, "accuracy");
        ok = cJSON_AddItemToArray(pts, pt) && acc && cJSON_AddNumberToObject(pt, "step", jb->curve[i].step);
        for (int k = 0; ok && k < DT_N_TASKS; k++) /* NAN (a task not mixed in) is null */
            ok = cJSON_AddItemToArray(acc, isnan(jb->curve[i].accuracy[k])
                                               ? cJSON_CreateNull()
                                               : cJSON_CreateNumber(jb->curve[i].accuracy[k]));
    }
    int rc = ok ? dt_an_write_json(path, j, err) : dt_fail_oom(err, "%s: out of memory", path);
    cJSON_Delete(j);
    return rc;
}

/* The curve an earlier call saved for jb (into jb->curve) and whether it was done; 0 with
 * *done = 0 and no points when there is none. */
static int curve_load(job *jb, int *done, dt_error *err) {
    char path[4500];
    *done = 0;
    jb->n_curve = 0;
    if (dt_pathf(path, sizeof path, err, "%s/curve.json", jb->dir) != 0) return -1;
    if (access(path, F_OK) != 0) return 0;
    cJSON *j = json_load_file(path, err);
    if (!j) return -1;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "done"),
                *pts = cJSON_GetObjectItemCaseSensitive(j, "points"), *pt;
    int ok = cJSON_IsBool(d) && cJSON_IsArray(pts) && cJSON_GetArraySize(pts) <= RP_MAX_CURVE;
    const cJSON *list = ok ? pts : NULL;
    cJSON_ArrayForEach(pt, list) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(pt, "step"),
                    *acc = cJSON_GetObjectItemCaseSensitive(pt, "accuracy");
        rp_curve_point *c = &jb->curve[jb->n_curve];
        ok = ok && cJSON_IsNumber(st) && st->valuedouble >= 1 && cJSON_IsArray(acc) &&
             cJSON_GetArraySize(acc) == DT_N_TASKS;
        for (int k = 0; ok && k < DT_N_TASKS; k++) {
            const cJSON *a = cJSON_GetArrayItem(acc, k);
            ok = cJSON_IsNull(a) || cJSON_IsNumber(a);
            c->accuracy[k] = cJSON_IsNumber(a) ? a->valuedouble : NAN;
        }
        if (ok) c->step = st->valueint, jb->n_curve++;
    }
    if (ok) *done = cJSON_IsTrue(d);
    cJSON_Delete(j);
    if (!ok) jb->n_curve = 0;
    return ok ? 0 : dt_fail_format(err, "%s: not a run's curve (done, points of step and accuracy)", path);
}

static int on_eval(void *ctx, int step, const dt_model *m, dt_error *err) {
    run_ctx *rc = ctx;
    job *jb = &rc->pl->jobs[rc->j];
    progress *p = rc->pl->p;
    pthread_mutex_lock(&p->mu);
    p->job_done[rc->j] = step;
    snprintf(p->msg, sizeof p->msg, "training %s: step %d/%d", jb->what, step, rc->pl->o->steps);
    report_locked(p);
    pthread_mutex_unlock(&p->mu);
    const int tasks = rc->pl->mix ? rc->pl->o->tasks : 0;
    if (!jb->want_curve || !tasks || (step % rc->every != 0 && step != rc->pl->o->steps))
        return 0;
    /* a resumed run measures again the points past its checkpoint that an earlier call had taken */
    while (jb->n_curve > 0 && jb->curve[jb->n_curve - 1].step >= step) jb->n_curve--;
    if (jb->n_curve >= RP_MAX_CURVE) return 0;
    rp_curve_point *pt = &jb->curve[jb->n_curve];
    pt->step = step;
    dt_task_eval_options eo = rc->eval;
    eo.max_len = m->cfg.max_position_embeddings;
    for (int k = 0; k < DT_N_TASKS; k++) {
        pt->accuracy[k] = NAN;
        if (!(tasks & (1 << k))) continue;
        dt_task_result r;
        if (dt_task_evaluate(m, (dt_task_kind)k, &eo, &r, err) != 0) return -1;
        pt->accuracy[k] = r.accuracy;
        dt_task_result_free(&r);
    }
    jb->n_curve++;
    return curve_save(jb, 0, err);
}

static int train_job(pool *pl, int j) {
    const dt_cmp_options *o = pl->o;
    job *jb = &pl->jobs[j];
    if (jb->trained) return 0;
    const int eval_interval = o->steps / 20 > 0 ? o->steps / 20 : 1;
    dt_train_options t;
    if (jb->resume) {
        dt_train_resume_defaults(&t); /* the schedule, seed and model are the checkpoint's */
    } else {
        dt_train_defaults(&t);
        t.tokenizer_path = o->tokenizer;
        t.cfg = jb->cfg;
        t.batch = o->batch;
        t.seq = o->seq;
        t.seed = jb->seed;
        t.lr = o->lr;
        t.warmup = o->steps / 10 < 100 ? o->steps / 10 : 100;
        t.eval_interval = eval_interval;
        t.eval_batches = o->quick ? 2 : 8;
        t.save_interval = o->steps / 10 > 0 ? o->steps / 10 : 1; /* a stopped comparison loses at most a tenth */
        jb->n_curve = 0;
    }
    t.data_path = o->tokens ? NULL : pl->train_path;
    t.tokens_path = o->tokens;
    t.out_dir = jb->dir;
    t.steps = o->steps;
    t.quiet = 1;
    t.stop = pl->stop;
    if (pl->mix && o->tasks) {
        t.batch_hook = dt_task_mix_batch;
        t.batch_ctx = (void *)pl->mix;
    }
    run_ctx rc = {.pl = pl, .j = j};
    int points = o->curve_points > 0 ? o->curve_points : 1;
    int k = (20 + points - 1) / points; /* curve points fall on evaluation steps: every k-th one */
    rc.every = eval_interval * (k > 0 ? k : 1);
    rc.eval = (dt_task_eval_options){.train_len = o->seq, .per_cell = o->quick ? 2 : 8, .seed = o->seed ^ 0xC0A1ull,
                                .filler = pl->mix ? pl->mix->filler : NULL, .filler_n = pl->mix ? pl->mix->filler_n : 0,
                                .symbols = pl->mix ? pl->mix->symbols : NULL};
    t.eval_hook = on_eval;
    t.eval_ctx = &rc;
    if (dt_train(&t, &jb->err) != 0) return -1;
    if (*pl->stop) return 1; /* saved, not finished: the next call continues it */
    return curve_save(jb, 1, &jb->err);
}

static void *worker(void *arg) {
    pool *pl = arg;
    if (pl->threads_per_job > 0) omp_set_num_threads(pl->threads_per_job);
    for (;;) {
        pthread_mutex_lock(&pl->p->mu);
        int j = *pl->stop ? pl->n_jobs : pl->next++;
        pthread_mutex_unlock(&pl->p->mu);
        if (j >= pl->n_jobs) break;
        pl->jobs[j].rc = train_job(pl, j);
        pthread_mutex_lock(&pl->p->mu);
        if (pl->jobs[j].rc == 0) pl->p->job_done[j] = pl->o->steps;
        if (pl->jobs[j].rc < 0) *pl->stop = 1;
        pthread_mutex_unlock(&pl->p->mu);
    }
    return NULL;
}

/* Runs every job, `jobs` at a time (each on one OpenMP thread when more than one runs). Returns the
 * first failure's error. */
static int run_jobs(pool *pl, int jobs, dt_error *err) {
    for (int j = 0; j < pl->n_jobs; j++) pl->jobs[j].rc = -2; /* not run */
    if (jobs > pl->n_jobs) jobs = pl->n_jobs;
    if (jobs <= 1) {
        pl->threads_per_job = 0;
        worker(pl);
    } else {
        pthread_t th[64];
        int started = 0;
        pl->threads_per_job = 1;
        for (; started < jobs && started < 64; started++)
            if (pthread_create(&th[started], NULL, worker, pl) != 0) break;
        if (started == 0) worker(pl); /* no thread could start: run them here */
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    }
    for (int j = 0; j < pl->n_jobs; j++)
        if (pl->jobs[j].rc == -1) return dt_fail_code(err, pl->jobs[j].err.code, "%s", pl->jobs[j].err.msg);
    if (*pl->stop)
        return dt_fail_code(err, DT_ERR_INTERRUPTED, "%s: stopped; the finished runs and the checkpoint of each "
                                                     "unfinished one are kept, and the same options resume the "
                                                     "comparison", pl->o->out);
    for (int j = 0; j < pl->n_jobs; j++)
        if (pl->jobs[j].rc != 0) return dt_fail(err, "%s: training did not run", pl->jobs[j].dir);
    return 0;
}

/* ---------------------------------------------------------------- helpers */

/* out = a then b, written atomically */
static int concat_files(const char *a, const char *b, const char *out, dt_error *err) {
    dt_atomic_file f;
    if (dt_atomic_open(&f, out, err) != 0) return -1;
    const char *src[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        FILE *in = open_regular_file(src[i], err);
        if (!in) {
            dt_atomic_abort(&f);
            return -1;
        }
        char buf[65536];
        size_t got;
        int bad = 0;
        while ((got = fread(buf, 1, sizeof buf, in)) > 0)
            if (fwrite(buf, 1, got, (FILE *)f.fp) != got) bad = 1;
        if (ferror(in)) bad = 2;
        fclose(in);
        if (bad) {
            dt_atomic_abort(&f);
            return dt_fail_io(err, "%s: %s failed", bad == 2 ? src[i] : out, bad == 2 ? "reading" : "writing");
        }
    }
    return dt_atomic_commit(&f, err);
}

/* The needle set of comparisons planned before compare.json recorded it: a context of 5/8 of the
 * preset's positions taken as bytes (at most 4096), up to 6 needles and 2 queries of 64 bytes each
 * in the rest. Their runs trained on it, so a resume of one keeps it. */
static int needle_params_bytes(const dt_cmp_options *o, int maxp, dt_needle_params *np, dt_error *err) {
    int ctx = maxp * 5 / 8;
    if (ctx > 4096) ctx = 4096;
    int needles = ctx / DT_NEEDLE_UNIT_MAX;
    if (needles > 6) needles = 6;
    int queries = (maxp - ctx) / 64;
    if (queries > 2) queries = 2;
    if (queries > needles) queries = needles;
    if (needles < 1 || queries < 1)
        return dt_fail(err, "needle: preset %s's context (%d bytes) is too short for a needle set", o->preset, maxp);
    np->n_contexts = 1;
    np->contexts[0] = ctx;
    np->needles = needles;
    np->queries = queries;
    return dt_needle_params_validate(np, err);
}

/* The needle set for runs trained on windows of o->seq tokens of tok (NULL: bytes), models of maxp
 * positions: the longest context whose test samples all fit the training window, with as many of
 * the paper's 6 needles (2 queries) as fit, *longest their most tokens. The window, not the
 * positions: the paper scores retrieval within the context its models were trained (or extended)
 * to, and positions past the window are never trained here, so a longer sample would measure
 * extrapolation; a window too short for one sample is refused, naming the seq that holds one. One
 * context, the longest: the report's samples are few, and each cell of a second length would get
 * half of them. */
static int needle_params_fit(const dt_cmp_options *o, const dt_needle_corpus *corpus, const dt_tok *tok, int maxp,
                             dt_needle_params *np, int *longest, dt_error *err) {
    int most[2], n = 0;
    for (np->needles = 6; np->needles >= 1; np->needles--) {
        np->queries = np->needles < 2 ? np->needles : 2;
        if ((n = dt_needle_fit_contexts(np, corpus, tok, o->seq, most, err)) != 0) break;
    }
    if (n < 0) return -1;
    if (n == 0) {
        np->needles = np->queries = 1;
        int need = 0;
        const char *unit = tok ? "tokens" : "bytes";
        if (dt_needle_most_tokens(np, corpus, tok, np->needles * DT_NEEDLE_UNIT_MAX, &need, err) != 0) return -1;
        if (need > maxp)
            return dt_fail(err, "needle: preset %s's %d positions cannot hold a test sample of one needle and one "
                                "query (up to %d %s)", o->preset, maxp, need, unit);
        return dt_fail(err, "needle: seq %d cannot hold a test sample of one needle and one query (up to %d %s); the "
                            "runs train on windows of seq %s and retrieval is scored within them, so seq %d or more "
                            "is needed", o->seq, need, unit, unit, need);
    }
    np->contexts[0] = np->contexts[n - 1];
    np->n_contexts = 1;
    *longest = most[n - 1];
    return 0;
}

/* compare.json's "needle_set": what fixes the set beside the plan's seed and data. */
static cJSON *needle_set_json(const dt_needle_params *np) {
    cJSON *j = cJSON_CreateObject(), *ctx = cJSON_AddArrayToObject(j, "contexts");
    int ok = j && ctx;
    for (int i = 0; ok && i < np->n_contexts; i++) ok = cJSON_AddItemToArray(ctx, cJSON_CreateNumber(np->contexts[i]));
    ok = ok && cJSON_AddNumberToObject(j, "needles", np->needles) &&
         cJSON_AddNumberToObject(j, "queries", np->queries) && cJSON_AddNumberToObject(j, "train", np->n_train) &&
         cJSON_AddNumberToObject(j, "test", np->n_test);
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

static int json_int_member(const cJSON *j, const char *name, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= INT_MIN && v->valuedouble <= INT_MAX) ||
        v->valuedouble != (double)(int)v->valuedouble)
        return 0;
    *out = (int)v->valuedouble;
    return 1;
}

/* The needle set a resumed comparison was planned with: its compare.json's needle_set, or, from a
 * compare.json older than that member, the byte sizing its runs trained on (*legacy set). */
static int needle_params_planned(const dt_cmp_options *o, const char *plan_path, int maxp, dt_needle_params *np,
                                 int *legacy, dt_error *err) {
    cJSON *plan = json_load_file(plan_path, err);
    if (!plan) return -1;
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(plan, "needle_set"), *ctx, *c;
    *legacy = ns == NULL;
    int rc = 0;
    if (*legacy) rc = needle_params_bytes(o, maxp, np, err);
    else {
        ctx = cJSON_GetObjectItemCaseSensitive(ns, "contexts");
        int ok = cJSON_IsArray(ctx) && cJSON_GetArraySize(ctx) >= 1 &&
                 cJSON_GetArraySize(ctx) <= DT_NEEDLE_MAX_LIST && json_int_member(ns, "needles", &np->needles) &&
                 json_int_member(ns, "queries", &np->queries) && json_int_member(ns, "train", &np->n_train) &&
                 json_int_member(ns, "test", &np->n_test);
        np->n_contexts = 0;
        const cJSON *list = ok ? ctx : NULL;
        cJSON_ArrayForEach(c, list) {
            ok = ok && cJSON_IsNumber(c) && c->valuedouble >= 1 && c->valuedouble <= DT_NEEDLE_MAX_CONTEXT &&
                 c->valuedouble == (double)(int)c->valuedouble;
            if (ok) np->contexts[np->n_contexts++] = (int)c->valuedouble;
        }
        dt_error why;
        if (!ok) rc = dt_fail_format(err, "%s: needle_set: not contexts, needles, queries, train and test as integers",
                                     plan_path);
        else if (dt_needle_params_validate(np, &why) != 0)
            rc = dt_fail_format(err, "%s: needle_set: %s", plan_path, why.msg);
    }
    cJSON_Delete(plan);
    return rc;
}

/* The runs' fewest positions (max_position_embeddings), which bound every needle sample. */
static int needle_positions(const dt_cmp_options *o, const dt_config *cfgs) {
    int maxp = cfgs[0].max_position_embeddings;
    for (int v = 1; v < o->n_variants; v++)
        if (cfgs[v].max_position_embeddings < maxp) maxp = cfgs[v].max_position_embeddings;
    return maxp;
}

/* The comparison's needle set: a resumed one's as planned (sized, if planned before sets were sized
 * to the training window, to the models' positions: *longest then says by how far it passes the
 * window), a new one's fitted to the training window. The runs' shortest context bounds it; a
 * planned set that does not fit it (an edited plan) is refused before any training. */
static int needle_params(const dt_cmp_options *o, const dt_config *cfgs, const dt_tok *tok, const char *plan_path,
                         int resuming, dt_needle_params *np, int *legacy, int *longest, dt_error *err) {
    const int maxp = needle_positions(o, cfgs);
    dt_needle_params_default(np);
    np->n_train = o->quick ? 40 : 400;
    np->n_test = o->quick ? 10 : 50;
    np->seed = o->seed;
    *legacy = 0;
    *longest = 0;
    dt_needle_corpus corpus = {0};
    if (dt_needle_corpus_load(&corpus, o->data, err) != 0) return -1;
    int rc = resuming ? needle_params_planned(o, plan_path, maxp, np, legacy, err)
                      : needle_params_fit(o, &corpus, tok, maxp, np, longest, err);
    for (int i = 0; rc == 0 && resuming && i < np->n_contexts; i++) {
        int most = 0;
        if ((rc = dt_needle_most_tokens(np, &corpus, tok, np->contexts[i], &most, err)) == 0 && most > *longest)
            *longest = most;
        if (rc == 0 && most > maxp)
            rc = dt_fail(err, "needle: %s plans %d-byte needle contexts, whose test samples take up to %d %s, more "
                              "than the models' %d positions; restart starts the comparison over with a set that "
                              "fits", plan_path, np->contexts[i], most, tok ? "tokens" : "bytes", maxp);
    }
    dt_needle_corpus_free(&corpus);
    return rc;
}

/* DIR/needle: the needle set np, sized for the model `sized` (NULL: for none). */
static int needle_set(const dt_cmp_options *o, const dt_needle_params *np, const dt_needle_model *sized,
                      const char *dir, dt_error *err) {
    dt_needle_corpus corpus = {0};
    if (dt_needle_corpus_load(&corpus, o->data, err) != 0) return -1;
    int rc = dt_needle_write_dataset_for(np, &corpus, o->data, sized, dir, err);
    dt_needle_corpus_free(&corpus);
    return rc;
}

static int run_dir(char *out, size_t cap, const dt_cmp_options *o, const char *key, int s, dt_error *err) {
    char name[96];
    if (s == 0) snprintf(name, sizeof name, "%s", key);
    else snprintf(name, sizeof name, "%s-seed%d", key, s);
    return dt_pathf(out, cap, err, "%s/%s", o->out, name);
}

/* ---------------------------------------------------------------- resuming */

/* What an earlier call left of jb. Resuming, a run that trained every step is kept with its curve
 * and one with a checkpoint continues; otherwise (a new or restarted comparison) its state is
 * removed, so that a later resume cannot take a run of other options for one of these. */
static int job_state(job *jb, int resuming, dt_error *err) {
    char state[4500], curve[4500];
    if (dt_pathf(curve, sizeof curve, err, "%s/curve.json", jb->dir)) return -1;
    jb->trained = jb->resume = 0;
    jb->n_curve = 0;
    if (!resuming) {
        if (unlink(curve) != 0 && errno != ENOENT && errno != ENOTDIR)
            return dt_fail_io(err, "%s: cannot remove an earlier comparison's run state: %s", curve, strerror(errno));
        /* the checkpoint a kill left staged too: a resume before this run's first one would continue it */
        struct stat sb;
        return stat(jb->dir, &sb) == 0 && S_ISDIR(sb.st_mode) ? dt_train_forget(jb->dir, err) : 0;
    }
    int done = 0;
    if (curve_load(jb, &done, err) != 0) return -1;
    jb->trained = done;
    jb->resume = !done && dt_train_checkpoint(jb->dir, state, sizeof state);
    if (!jb->trained && !jb->resume) jb->n_curve = 0; /* points of a run that saved no checkpoint yet */
    if (jb->resume) { /* its step, for the progress only: dt_train reads and checks the state itself */
        cJSON *j = json_load_file(state, err);
        if (!j) return -1;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step");
        jb->resume_step = cJSON_IsNumber(st) && st->valuedouble > 0 ? st->valueint : 0;
        cJSON_Delete(j);
    }
    return 0;
}

/* Everything that fixes what the runs are (compare.json); a resumed comparison must have the same.
 * The data and the tokenizer by their contents: the paths may be given from another directory. */
static cJSON *plan_json(const dt_cmp_options *o, const char *data_fp, const char *tok_fp) {
    cJSON *j = cJSON_CreateObject(), *variants = cJSON_AddArrayToObject(j, "variants"),
          *sizes = cJSON_AddArrayToObject(j, "sizes"), *tasks = cJSON_AddArrayToObject(j, "tasks");
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed); /* all 64 bits: a double keeps 53 */
    int ok = j && variants && sizes && tasks;
    for (int v = 0; ok && v < o->n_variants; v++)
        ok = cJSON_AddItemToArray(variants, cJSON_CreateString(o->variants[v]));
    for (int i = 0; ok && i < o->n_sizes; i++) ok = cJSON_AddItemToArray(sizes, cJSON_CreateString(o->sizes[i]));
    for (int k = 0; ok && k < DT_N_TASKS; k++)
        if (o->tasks & (1 << k)) ok = cJSON_AddItemToArray(tasks, cJSON_CreateString(dt_task_name((dt_task_kind)k)));
    ok = ok && cJSON_AddStringToObject(j, "preset", o->preset) && cJSON_AddNumberToObject(j, "steps", o->steps) &&
         cJSON_AddNumberToObject(j, "batch", o->batch) && cJSON_AddNumberToObject(j, "seq", o->seq) &&
         cJSON_AddNumberToObject(j, "lr", plan_float_decimal(o->lr)) && cJSON_AddStringToObject(j, "seed", seed) &&
         cJSON_AddNumberToObject(j, "seeds", o->seeds) &&
         cJSON_AddNumberToObject(j, "task_ratio", o->tasks ? o->task_ratio : 0) &&
         cJSON_AddNumberToObject(j, "task_examples", o->tasks ? o->task_examples : 0) &&
         cJSON_AddNumberToObject(j, "curve_points", o->curve_points) && cJSON_AddBoolToObject(j, "needle", o->needle) &&
         cJSON_AddBoolToObject(j, "quick", o->quick) &&
         cJSON_AddStringToObject(j, "data_kind", o->tokens ? "tokens" : "text") &&
         cJSON_AddStringToObject(j, "data_fingerprint", data_fp) &&
         (tok_fp ? cJSON_AddStringToObject(j, "tokenizer_fingerprint", tok_fp)
                 : cJSON_AddNullToObject(j, "tokenizer_fingerprint"));
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* ---------------------------------------------------------------- the run */

static int check(const dt_cmp_options *o, dt_config *cfgs, dt_error *err) {
    if (!o->data && !o->tokens) return dt_fail(err, "data: a training text file (or a token dataset) is required");
    if (o->data && o->tokens) return dt_fail(err, "data and tokens: give one of them");
    if (o->tokens && o->tokenizer)
        return dt_fail(err, "tokenizer: a token dataset brings its own (%s/tokenizer.json)", o->tokens);
    if (o->tokens && o->needle)
        return dt_fail(err, "needle: the needle set is made from text; with a token dataset (%s) give the text and its "
                            "tokenizer instead", o->tokens);
    if (!o->out) return dt_fail(err, "out: a report directory is required");
    if (o->steps < 1 || o->batch < 1 || o->seq < 2) return dt_fail(err, "steps, batch (≥ 1) and seq (≥ 2) are required");
    if (!(o->lr > 0) || !isfinite(o->lr)) return dt_fail(err, "lr %g: must be a positive number", (double)o->lr);
    if (o->seeds < 1 || o->seeds > RP_MAX_SEEDS) return dt_fail(err, "seeds %d: must be in 1..%d", o->seeds, RP_MAX_SEEDS);
    if (o->n_variants < 1 || o->n_variants > RP_MAX_VARIANTS)
        return dt_fail(err, "%d variants: must be in 1..%d", o->n_variants, RP_MAX_VARIANTS);
    if (o->tasks && (o->task_ratio < 0 || o->task_ratio > 1))
        return dt_fail(err, "task ratio %g: must be in [0, 1]", o->task_ratio);
    if (o->tasks && o->task_examples < 1) return dt_fail(err, "task examples %d: must be positive", o->task_examples);
    for (int v = 0; v < o->n_variants; v++) {
        for (int w = 0; w < v; w++)
            if (strcmp(o->variants[v], o->variants[w]) == 0) return dt_fail(err, "variant '%s' is named twice", o->variants[v]);
        if (dt_cmp_variant_config(o->variants[v], o->preset, &cfgs[v], err) != 0) return -1;
        if (o->seq > cfgs[v].max_position_embeddings)
            return dt_fail(err, "seq %d: more than preset %s's max_position_embeddings %d", o->seq, o->preset,
                           cfgs[v].max_position_embeddings);
    }
    for (int i = 0; i < o->n_sizes; i++) {
        dt_config c;
        if (strcmp(o->sizes[i], o->preset) == 0) /* it would be fitted twice */
            return dt_fail(err, "scaling %s: the comparison's own preset is a size of the fit already; name the "
                                "others",
                           o->sizes[i]);
        for (int k = 0; k < i; k++)
            if (strcmp(o->sizes[i], o->sizes[k]) == 0) return dt_fail(err, "scaling %s: named twice", o->sizes[i]);
        if (dt_config_preset(&c, o->sizes[i], DT_ARCH_DIFF, err) != 0) return -1;
        if (o->seq > c.max_position_embeddings)
            return dt_fail(err, "scaling %s: seq %d is more than its max_position_embeddings %d", o->sizes[i], o->seq,
                           c.max_position_embeddings);
    }
    return 0;
}

/* The training text as the models read it, *n_train of it the training part and the rest the
 * held-out tail dt_train validates on: bytes, the text through the tokenizer, or the token
 * dataset's train split followed by its val split. */
static int load_training_tokens(const dt_cmp_options *o, const char *train_path, int **tok, size_t *n, size_t *n_train,
                                dt_error *err) {
    dt_train_options defaults;
    dt_train_defaults(&defaults);
    if (o->tokens) {
        int *train = NULL, *val = NULL;
        size_t nt = 0, nv = 0;
        if (dt_tokens_load(o->tokens, "train", INT32_MAX, &train, &nt, err) != 0) return -1;
        if (dt_tokens_load(o->tokens, "val", INT32_MAX, &val, &nv, err) != 0) {
            free(train);
            return -1;
        }
        int *all = realloc(train, (nt + nv + 1) * sizeof *all);
        if (!all) {
            free(train);
            free(val);
            return dt_fail_oom(err, "%s: out of memory for %zu tokens", o->tokens, nt + nv);
        }
        if (nv) memcpy(all + nt, val, nv * sizeof *all);
        free(val);
        *tok = all;
        *n = nt + nv;
        *n_train = nt;
        return 0;
    }
    dt_vocab v; /* the vocabulary the runs' models get */
    if (dt_vocab_load(&v, o->tokenizer, err) != 0) return -1;
    int rc = dt_vocab_text_tokens(&v, train_path, tok, n, NULL, err);
    dt_vocab_free(&v);
    if (rc != 0) return -1;
    *n_train = dt_train_split(*n, defaults.val_fraction);
    return 0;
}

/* The bytes the n tokens of the held-out text stand for, as the tokenizer at path decodes them
 * (special tokens, a token dataset's document ends, left out): the text itself for a lossless
 * tokenizer (byte-level BPE; a token cut from its character at the tail's start aside), the
 * normalised text for one with a normalizer. */
static int decoded_bytes(const char *path, const int *tok, size_t n, size_t *bytes, dt_error *err) {
    dt_tok *t = NULL;
    if (dt_tok_load(&t, path, err) != 0) return -1;
    char *text = NULL;
    size_t len = 0;
    const int rc = dt_tok_decode(t, tok, n, 1, &text, &len, err);
    dt_tok_free(t);
    free(text);
    if (rc == 0) *bytes = len;
    return rc;
}

/* dt_cmp_run after the checks, with the progress state and the job table allocated. */
static int compare_with(const dt_cmp_options *o, const dt_config *cfgs, const dt_task_symbols *symbols, progress *p, job *jobs,
                        const cJSON *plan, int resuming, const dt_needle_params *np, int needle_legacy,
                        int needle_longest, dt_error *err) {
    const int n_main = o->n_variants * o->seeds;
    int *tok = NULL;
    size_t n = 0;

    /* the training text: the data, plus the needle set's training samples with needle */
    char needle_dir[4200], needle_train[4300], train_txt[4200];
    const char *train_path = o->data ? o->data : o->tokens;
    dt_needle_testset ts = {0};
    size_t needle_tokens = 0; /* the needle samples' tokens at the start of the training text */
    if (o->needle) {
        if (dt_pathf(needle_dir, sizeof needle_dir, err, "%s/needle", o->out) ||
            dt_pathf(needle_train, sizeof needle_train, err, "%s/train.txt", needle_dir) ||
            dt_pathf(train_txt, sizeof train_txt, err, "%s/train.txt", o->out))
            return -1;
        if (needle_legacy)
            report_progress(p, "the needle set of %s/compare.json, planned before needle sets were sized in the "
                               "models' tokens: %d-byte contexts, %d needle%s, %d quer%s (a comparison started "
                               "over fits its set)", o->out, np->contexts[0], np->needles, np->needles == 1 ? "" : "s",
                           np->queries, np->queries == 1 ? "y" : "ies");
        if (needle_longest > o->seq) /* a plan from before sets were sized to the training window */
            report_progress(p, "the needle set of %s/compare.json has test samples of up to %d %s, longer than the "
                               "training window (seq %d): its retrieval scores measure positions the runs never "
                               "trained (a comparison started over fits its set to the window)", o->out,
                           needle_longest, o->tokenizer ? "tokens" : "bytes", o->seq);
        report_progress(p, "writing the needle set into %s", needle_dir);
        /* the samples go first: dt_train holds out the text's tail, which must not be task samples; the
         * filler and the calibration windows below start after them (a few tokens of margin for a
         * merge across the seam). The set is recorded as sized for the runs (the first variant's run
         * standing for them), unless it is an older plan's, sized for none. */
        dt_vocab v;
        int *ntok = NULL;
        if (dt_vocab_load(&v, o->tokenizer, err) != 0) return -1;
        dt_needle_model sized = {.max_position_embeddings = needle_positions(o, cfgs)};
        int vrc = run_dir(sized.path, sizeof sized.path, o, o->variants[0], 0, err) ||
                  dt_vocab_fingerprint(&v, sized.tokenizer, err) ||
                  needle_set(o, np, needle_legacy ? NULL : &sized, needle_dir, err) ||
                  concat_files(needle_train, o->data, train_txt, err) || dt_needle_load_testset(&ts, needle_dir, err);
        if (vrc == 0) vrc = dt_vocab_text_tokens(&v, needle_train, &ntok, &needle_tokens, NULL, err);
        dt_vocab_free(&v);
        free(ntok);
        if (vrc != 0) {
            dt_needle_testset_free(&ts);
            return -1;
        }
        needle_tokens += 8;
        train_path = train_txt;
    }

    /* the held-out tail (dt_train's validation split) for the analyses, and the task filler (the training part) */
    size_t n_train = 0;
    if (load_training_tokens(o, train_path, &tok, &n, &n_train, err) != 0) {
        dt_needle_testset_free(&ts);
        return -1;
    }
    const size_t tail = n - n_train;
    rp_model *runs = calloc((size_t)n_main, sizeof *runs);
    int rc = 0;
    if (!runs) rc = dt_fail_oom(err, "out of memory for %d runs", n_main);
    else if (n_train < needle_tokens + (size_t)o->seq + 1 && needle_tokens == 0)
        rc = dt_fail(err, "%s: %zu training tokens, fewer than seq + 1 = %d", train_path, n_train, o->seq + 1);
    else if (n_train < needle_tokens + (size_t)o->seq + 1)
        rc = dt_fail(err, "%s: %zu training tokens, fewer than the needle set's %zu plus seq + 1 = %d", train_path,
                     n_train, needle_tokens, o->seq + 1);
    else if (tail < (size_t)o->seq + 1)
        rc = dt_fail(err, "%s: the held-out tail is %zu tokens, fewer than seq + 1 = %d", o->tokens ? o->tokens : train_path,
                     tail, o->seq + 1);
    /* the held-out text's bytes: bits per byte compare vocabularies, where a loss per token does not */
    size_t tail_bytes = tail;
    if (rc == 0 && (o->tokenizer || o->tokens))
        rc = decoded_bytes(o->tokenizer ? o->tokenizer : o->tokens, tok + n_train, tail, &tail_bytes, err);
    /* depth's filler: the training part, in the runs' tokens (bytes, or ids of the vocabulary) */
    const int *text = tok + needle_tokens; /* the training part of the text itself */
    const size_t text_n = n_train > needle_tokens ? n_train - needle_tokens : 0;
    const dt_task_mix mix = {.ratio = o->task_ratio, .tasks = o->tasks, .max_pairs = DT_TASK_MIX_PAIRS, .filler = text,
                        .filler_n = text_n, .symbols = symbols};

    /* every variant × seed: train, then analyse */
    int windows = o->quick ? 4 : 8;
    size_t fit = tail > 0 ? (tail - 1) / (size_t)o->seq : 0;
    if ((size_t)windows > fit) windows = (int)fit;
    rp_analysis_options ao = {.tokens = tok + n_train, .n = tail, .seq = o->seq, .windows = windows, .n_bits = 6,
                              .bits = {16, 8, 6, 5, 4, 3}, .needle = o->needle ? &ts : NULL,
                              .allocation_samples = o->quick ? 10 : 50, .tasks = o->tasks,
                              .task_eval = {.train_len = o->seq, .per_cell = o->task_examples, .seed = o->seed ^ 0x7E57ull,
                                            .filler = text, .filler_n = text_n, .symbols = symbols},
                              .calib_tokens = text, .calib_n = text_n, .calib_samples = o->quick ? 16 : 300,
                              /* the reproduction protocol: the same windows of the held-out tail and of the
                               * training part, 8 position bins */
                              .train_tokens = text, .train_n = text_n, .protocol_windows = o->quick ? 4 : 16,
                              .protocol_bins = o->seq < 8 ? o->seq : 8};
    /* the trainings: every variant × seed (job v·seeds + s), then the scaling sizes (DIFF and its
     * baseline, first seed) */
    for (int s = 0; s < o->seeds && rc == 0; s++)
        for (int v = 0; v < o->n_variants && rc == 0; v++) {
            job *jb = &jobs[v * o->seeds + s];
            jb->cfg = cfgs[v];
            jb->seed = o->seed + (uint64_t)s;
            jb->want_curve = 1;
            snprintf(jb->what, sizeof jb->what, "%s run %d/%d", variant_display(o->variants[v]), s + 1, o->seeds);
            rc = run_dir(jb->dir, sizeof jb->dir, o, o->variants[v], s, err);
        }
    for (int i = 0; i < o->n_sizes && rc == 0; i++) {
        char sd[4200], name[96];
        snprintf(name, sizeof name, "scaling-%s", o->sizes[i]);
        if ((rc = dt_pathf(sd, sizeof sd, err, "%s/%s", o->out, name)) != 0 || (rc = dir_ensure(sd, err)) != 0) break;
        for (int k = 0; k < 2 && rc == 0; k++) {
            job *jb = &jobs[n_main + 2 * i + k];
            jb->seed = o->seed;
            snprintf(jb->what, sizeof jb->what, "%s at size %s", dt_arch_label(k ? DT_ARCH_LLAMA : DT_ARCH_DIFF),
                     o->sizes[i]);
            rc = dt_cmp_variant_config(k ? "transformer" : "diff", o->sizes[i], &jb->cfg, err);
            if (rc == 0) rc = dt_pathf(jb->dir, sizeof jb->dir, err, "%s/%s", sd, k ? "transformer" : "diff");
        }
    }
    /* what earlier calls trained; the plan is written once no state of other options is left */
    int kept = 0, continued = 0;
    for (int j = 0; j < p->n_jobs && rc == 0; j++) {
        if ((rc = job_state(&jobs[j], resuming, err)) != 0) break;
        const int done = jobs[j].trained ? o->steps : jobs[j].resume ? jobs[j].resume_step : 0;
        p->job_done[j] = done, p->kept += done;
        kept += jobs[j].trained, continued += jobs[j].resume;
    }
    /* a new or restarted comparison stopped before its report must not leave an earlier comparison's report
     * beside its runs, read as theirs */
    static const char *const reports[] = {"REPORT.md", "report.json"};
    char plan_path[4200], old_report[4200];
    for (int i = 0; i < 2 && rc == 0 && !resuming; i++)
        if ((rc = dt_pathf(old_report, sizeof old_report, err, "%s/%s", o->out, reports[i])) == 0 &&
            unlink(old_report) != 0 && errno != ENOENT)
            rc = dt_fail_io(err, "%s: cannot remove an earlier comparison's report: %s", old_report, strerror(errno));
    if (rc == 0 && !resuming && (rc = dt_pathf(plan_path, sizeof plan_path, err, "%s/compare.json", o->out)) == 0)
        rc = dt_an_write_json(plan_path, (void *)plan, err);
    pool pl = {.o = o, .train_path = train_path, .mix = &mix, .p = p, .jobs = jobs, .n_jobs = p->n_jobs};
    pl.stop = o->stop ? o->stop : &pl.own_stop;
    if (rc == 0 && resuming)
        report_progress(p, "resuming %s: %d of %d trainings done, %d continued from a checkpoint", o->out, kept,
                        p->n_jobs, continued);
    if (rc == 0) {
        report_progress(p, "training %d model(s), %d at a time", p->n_jobs - kept, o->jobs > 1 ? o->jobs : 1);
        rc = run_jobs(&pl, o->jobs, err);
    }
    /* the analyses, one run at a time */
    for (int s = 0; s < o->seeds && rc == 0; s++)
        for (int v = 0; v < o->n_variants && rc == 0; v++) {
            rp_model *m = &runs[v * o->seeds + s];
            const job *jb = &jobs[v * o->seeds + s];
            if (*pl.stop) {
                rc = dt_fail_code(err, DT_ERR_INTERRUPTED, "%s: stopped while analysing; every run is trained, and "
                                                           "the same options resume the comparison", o->out);
                break;
            }
            report_progress(p, "analysing %s", jb->what);
            if ((rc = rp_analyze_model(m, jb->dir, variant_display(o->variants[v]), &ao, err)) != 0) break;
            m->n_curve = jb->n_curve;
            memcpy(m->curve, jb->curve, sizeof m->curve);
            m->bytes_per_token = tail > 0 && tail_bytes > 0 ? (double)tail_bytes / (double)tail : 0;
            pthread_mutex_lock(&p->mu);
            p->other_done += ANALYSIS_STEPS(o);
            pthread_mutex_unlock(&p->mu);
        }

    /* scaling: DIFF and its baseline at the other sizes, first seed, same budget and mix */
    rp_report r = {.command = o->command, .seed = o->seed, .preset = o->preset, .data = o->data ? o->data : o->tokens,
                   .train_text = train_path, .needle_dir = o->needle ? needle_dir : NULL, .steps = o->steps,
                   .batch = o->batch, .seq = o->seq, .heldout_tokens = tail, .heldout_bytes = tail_bytes,
                   .tokenizer = o->tokens ? o->tokens : o->tokenizer, .windows = windows,
                   .needle_context = np->contexts[0], .needle_needles = np->needles, .needle_queries = np->queries,
                   .needle_longest = needle_longest,
                   .tasks = o->tasks, .task_ratio = o->tasks ? o->task_ratio : 0, .task_symbols = symbols,
                   .n_variants = o->n_variants,
                   .n_seeds = o->seeds, .runs = runs, .diff = -1, .base = -1};
    for (int v = 0; v < o->n_variants; v++) {
        r.variant_key[v] = o->variants[v];
        if (strcmp(o->variants[v], "diff") == 0) r.diff = v;
        if (strcmp(o->variants[v], "transformer") == 0) r.base = v;
    }
    if (rc == 0 && o->n_sizes > 0 && (r.diff < 0 || r.base < 0))
        rc = dt_fail(err, "scaling needs the variants diff and transformer");
    /* the loss-against-size points are the diff / transformer pair's: variants without that pair have none
     * (rp_run(&r, -1, 0) read before the runs) */
    r.n_sizes = r.diff >= 0 && r.base >= 0 ? 1 + o->n_sizes : 0;
    r.size_names[0] = o->preset;
    for (int k = 0; k < 2 && rc == 0 && r.n_sizes > 0; k++) {
        r.size_params[0][k] = (double)dt_config_nonembedding_param_count(&rp_run(&r, k ? r.base : r.diff, 0)->cfg);
        r.size_all[0][k] = (double)rp_run(&r, k ? r.base : r.diff, 0)->n_params;
        r.size_loss[0][k] = rp_run(&r, k ? r.base : r.diff, 0)->training.final_val_loss;
    }
    for (int i = 0; i < o->n_sizes && rc == 0; i++) {
        r.size_names[1 + i] = o->sizes[i];
        for (int k = 0; k < 2 && rc == 0; k++) {
            const job *jb = &jobs[n_main + 2 * i + k];
            dt_an_training t;
            /* the trained model's own config: a tokenizer gave it its vocabulary, not the preset */
            char cpath[4300];
            dt_config trained;
            if ((rc = dt_pathf(cpath, sizeof cpath, err, "%s/config.json", jb->dir)) != 0 ||
                (rc = dt_config_load(&trained, cpath, err)) != 0)
                break;
            r.size_params[1 + i][k] = (double)dt_config_nonembedding_param_count(&trained);
            r.size_all[1 + i][k] = (double)dt_config_param_count(&trained);
            if ((rc = dt_an_training_load(jb->dir, &t, err)) == 0) {
                r.size_loss[1 + i][k] = t.final_val_loss;
                dt_an_training_free(&t);
            }
        }
    }
    if (rc == 0) {
        report_progress(p, "writing %s/REPORT.md, report.json and plots", o->out);
        rc = rp_write(&r, o->out, err);
    }
    for (int i = 0; runs && i < n_main; i++) rp_model_free(&runs[i]);
    free(runs);
    free(tok);
    dt_needle_testset_free(&ts);
    return rc;
}

int dt_cmp_run(const dt_cmp_options *o, dt_error *err) {
    dt_config cfgs[RP_MAX_VARIANTS];
    if (check(o, cfgs, err) != 0) return -1;
    if (o->tokens) {
        dt_tokens_summary ts;
        if (dt_tokens_info(o->tokens, &ts, err) != 0) return -1;
    } else {
        int *tok = NULL;
        size_t n = 0;
        if (dt_text_load(o->data, &tok, &n, err) != 0) return -1;
        free(tok);
    }
    /* a real vocabulary: the tokens of the tasks' symbols, before any work (a symbol without one is refused) */
    dt_task_symbols symbols = {0}, *sym = NULL;
    char data_fp[17], tok_fp[17] = "";
    dt_tok *t = NULL; /* kept for the needle set's sizing */
    if (o->tokenizer || o->tokens) {
        if (dt_tok_load(&t, o->tokenizer ? o->tokenizer : o->tokens, err) != 0) return -1;
        int rc = o->tasks ? dt_task_symbols_from_tokenizer(&symbols, t, err) : 0;
        const char *tok_file = dt_tok_path(t);
        if (rc == 0 && o->tokenizer) rc = plan_fingerprint(&tok_file, 1, tok_fp, err);
        if (rc != 0) {
            dt_tok_free(t);
            dt_task_symbols_free(&symbols);
            return -1;
        }
        if (o->tasks) sym = &symbols;
    }
    /* the plan: checked against the one an earlier call left (before anything is written), else written
     * once its runs' old state is gone (compare_with) */
    char a[4200], b[4200], plan_path[4200];
    const char *const data_files[2] = {o->tokens ? a : o->data, b};
    int rc = o->tokens ? dt_pathf(a, sizeof a, err, "%s/dataset.json", o->tokens) ||
                             dt_pathf(b, sizeof b, err, "%s/tokenizer.json", o->tokens)
                       : 0;
    if (rc == 0) rc = plan_fingerprint(data_files, o->tokens ? 2 : 1, data_fp, err);
    if (rc == 0) rc = dt_pathf(plan_path, sizeof plan_path, err, "%s/compare.json", o->out);
    cJSON *plan = rc == 0 ? plan_json(o, data_fp, o->tokenizer ? tok_fp : NULL) : NULL;
    if (rc == 0 && !plan) rc = dt_fail_oom(err, "out of memory for the comparison's plan");
    const int resuming = rc == 0 && !o->restart && access(plan_path, F_OK) == 0;
    if (rc == 0 && resuming) rc = plan_check(plan_path, plan, "comparison", err);
    /* the needle set is not an option but follows from them (and from how they were sized when the
     * comparison was planned): recorded beside them, taken from there on a resume */
    dt_needle_params np = {0};
    int needle_legacy = 0, needle_longest = 0;
    if (rc == 0 && o->needle &&
        (rc = needle_params(o, cfgs, t, plan_path, resuming, &np, &needle_legacy, &needle_longest, err)) == 0) {
        cJSON *ns = needle_set_json(&np);
        if (!ns || !cJSON_AddItemToObject(plan, "needle_set", ns)) {
            cJSON_Delete(ns);
            rc = dt_fail_oom(err, "out of memory for the comparison's plan");
        }
    }
    dt_tok_free(t);
    if (rc == 0) rc = dir_ensure(o->out, err);
    if (rc != 0) {
        cJSON_Delete(plan);
        dt_task_symbols_free(&symbols);
        return -1;
    }

    const int n_main = o->n_variants * o->seeds, n_jobs = n_main + 2 * o->n_sizes;
    progress p = {.o = o, .t0 = monotonic_seconds(), .n_jobs = n_jobs};
    p.total = (double)n_jobs * o->steps + (double)n_main * ANALYSIS_STEPS(o);
    p.job_done = calloc((size_t)n_jobs, sizeof *p.job_done);
    job *jobs = calloc((size_t)n_jobs, sizeof *jobs);
    if (!p.job_done || !jobs || pthread_mutex_init(&p.mu, NULL) != 0)
        rc = dt_fail_oom(err, "out of memory for %d trainings", n_jobs);
    else {
        rc = compare_with(o, cfgs, sym, &p, jobs, plan, resuming, &np, needle_legacy, needle_longest, err);
        pthread_mutex_destroy(&p.mu);
    }
    cJSON_Delete(plan);
    free(p.job_done);
    free(jobs);
    dt_task_symbols_free(&symbols);
    return rc;
}
