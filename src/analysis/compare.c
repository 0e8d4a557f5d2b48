/* compare.c — `difftrans compare` as a library call; see compare.h.
 *
 * Layout of the report directory:
 *   needle/             the long-form needle set (with needle only) and train.txt = data + its train.txt
 *   VARIANT/            the first run of each variant (seed 0)
 *   VARIANT-seedS/      run S ≥ 1 of each variant
 *   scaling-PRESET/     diff/ and transformer/ at the other --scaling sizes (first seed)
 *   REPORT.md, report.json, plots/
 */
#include "analysis/compare.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "analysis/needle.h"
#include "analysis/tasks.h"
#include "analysis/textbuf.h"

void cmp_options_default(cmp_options *o, int quick) {
    memset(o, 0, sizeof *o);
    o->preset = "tiny";
    o->steps = quick ? 60 : 2000;
    o->batch = quick ? 8 : 16;
    o->seq = quick ? 64 : 128;
    o->lr = 3e-3f;
    o->seed = 1337;
    o->seeds = quick ? 2 : 3;
    o->n_variants = 2;
    o->variants[0] = "diff";
    o->variants[1] = "transformer";
    o->tasks = (1 << TK_RECALL) | (1 << TK_DEPTH) | (1 << TK_ICL);
    o->task_ratio = 0.75;
    o->task_examples = quick ? 4 : 32;
    o->curve_points = quick ? 3 : 10;
    o->quick = quick;
}

/* ---------------------------------------------------------------- variants */

typedef struct {
    const char *key, *display;
    int arch; /* DT_ARCH_DIFF: the preset; DT_ARCH_LLAMA: its matched baseline */
    void (*modify)(dt_config *c);
} variant;

static void with_subln(dt_config *c) { c->use_subln_weight = 1; }

static const variant variants[] = {
    {"diff", "DIFF", DT_ARCH_DIFF, NULL},
    {"transformer", "Transformer", DT_ARCH_LLAMA, NULL},
    {"diff-subln", "DIFF+subln", DT_ARCH_DIFF, with_subln},
};
#define N_VARIANTS ((int)(sizeof variants / sizeof *variants))

static const variant *find_variant(const char *name) {
    for (int i = 0; i < N_VARIANTS; i++)
        if (strcmp(variants[i].key, name) == 0) return &variants[i];
    return NULL;
}

const char *cmp_variant_names(void) { return "diff, transformer, diff-subln"; }

int cmp_variant_config(const char *name, const char *preset, dt_config *out, dt_error *err) {
    const variant *v = find_variant(name);
    if (!v) return dt_fail(err, "variant '%s': unknown (known: %s)", name, cmp_variant_names());
    dt_config c;
    if (dt_config_preset(&c, preset, DT_ARCH_DIFF, err) != 0) return -1;
    *out = v->arch == DT_ARCH_DIFF ? c : dt_config_matched(&c);
    if (v->modify) v->modify(out);
    return dt_config_validate(out, name, err);
}

/* ---------------------------------------------------------------- progress */

typedef struct {
    const cmp_options *o;
    double done, total, t0;
    char msg[4608];
} progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void report_progress(progress *p) {
    if (!p->o->progress) return;
    double el = now_s() - p->t0;
    double eta = p->done > 0 ? el / p->done * (p->total - p->done) : NAN;
    p->o->progress(p->o->progress_ctx, p->done, p->total, eta, p->msg);
}

/* An analysis pass over one run costs about this many training steps of time (measured roughly on
 * the small presets; only the ETA depends on it). */
#define ANALYSIS_STEPS(o) ((o)->quick ? 20.0 : 150.0)

/* ---------------------------------------------------------------- training one run */

typedef struct {
    progress *p;
    rp_model *model;       /* where the curve goes */
    tk_eval_options eval;  /* a smaller evaluation set than the final one */
    int tasks, steps, every, last_step;
    double base_done;      /* progress before this run */
} run_ctx;

static int on_eval(void *ctx, int step, const dt_model *m, dt_error *err) {
    run_ctx *rc = ctx;
    rc->p->done = rc->base_done + step;
    report_progress(rc->p);
    if (!rc->tasks || (step % rc->every != 0 && step != rc->steps) || rc->model->n_curve >= RP_MAX_CURVE) return 0;
    rp_curve_point *pt = &rc->model->curve[rc->model->n_curve];
    pt->step = step;
    tk_eval_options eo = rc->eval;
    eo.max_len = m->cfg.max_position_embeddings;
    for (int k = 0; k < TK_N_TASKS; k++) {
        pt->accuracy[k] = NAN;
        if (!(rc->tasks & (1 << k))) continue;
        tk_result r;
        if (tk_evaluate(m, (tk_kind)k, &eo, &r, err) != 0) return -1;
        pt->accuracy[k] = r.accuracy;
        tk_result_free(&r);
    }
    rc->model->n_curve++;
    return 0;
}

static int train_run(const cmp_options *o, const dt_config *cfg, const char *dir, uint64_t seed, const char *train_path,
                     const tk_mix *mix, rp_model *curve_into, progress *p, dt_error *err) {
    dt_train_options t;
    dt_train_defaults(&t);
    t.data_path = train_path;
    t.out_dir = dir;
    t.cfg = *cfg;
    t.steps = o->steps;
    t.batch = o->batch;
    t.seq = o->seq;
    t.seed = seed;
    t.lr = o->lr;
    t.warmup = o->steps / 10 < 100 ? o->steps / 10 : 100;
    t.eval_interval = o->steps / 20 > 0 ? o->steps / 20 : 1;
    t.eval_batches = o->quick ? 2 : 8;
    t.save_interval = 0;
    t.quiet = 1;
    if (mix && o->tasks) {
        t.batch_hook = tk_mix_batch;
        t.batch_ctx = (void *)mix;
    }
    run_ctx rc = {.p = p, .model = curve_into, .tasks = mix ? o->tasks : 0, .steps = o->steps, .base_done = p->done};
    int points = o->curve_points > 0 ? o->curve_points : 1;
    /* curve points fall on evaluation steps: every k-th one */
    int k = (20 + points - 1) / points;
    rc.every = t.eval_interval * (k > 0 ? k : 1);
    rc.eval = (tk_eval_options){.train_len = o->seq, .per_cell = o->quick ? 2 : 8, .seed = o->seed ^ 0xC0A1ull,
                                .filler = mix ? mix->filler : NULL, .filler_n = mix ? mix->filler_n : 0};
    t.eval_hook = on_eval;
    t.eval_ctx = &rc;
    if (curve_into) curve_into->n_curve = 0;
    int r = dt_train(&t, err);
    p->done = rc.base_done + o->steps;
    return r;
}

/* ---------------------------------------------------------------- helpers */

static int make_dir(const char *path, dt_error *err) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return dt_fail(err, "%s: cannot create the directory: %s", path, strerror(errno));
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return dt_fail(err, "%s: not a directory", path);
    return 0;
}

/* out = a then b, written atomically */
static int concat_files(const char *a, const char *b, const char *out, dt_error *err) {
    dt_atomic_file f;
    if (dt_atomic_open(&f, out, err) != 0) return -1;
    const char *src[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        FILE *in = fopen(src[i], "rb");
        if (!in) {
            dt_atomic_abort(&f);
            return dt_fail(err, "%s: cannot open: %s", src[i], strerror(errno));
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
            return dt_fail(err, "%s: %s failed", bad == 2 ? src[i] : out, bad == 2 ? "reading" : "writing");
        }
    }
    return dt_atomic_commit(&f, err);
}

/* The long-form needle set sized for the model's context: a context of 5/8 of it (at most 4096
 * bytes), up to 6 needles and 2 queries of 64 bytes each in the rest. */
static int needle_set(const cmp_options *o, const dt_config *c, const char *dir, needle_params *np, dt_error *err) {
    const int maxp = c->max_position_embeddings;
    int ctx = maxp * 5 / 8;
    if (ctx > 4096) ctx = 4096;
    int needles = ctx / NEEDLE_UNIT_MAX;
    if (needles > 6) needles = 6;
    int queries = (maxp - ctx) / 64;
    if (queries > 2) queries = 2;
    if (queries > needles) queries = needles;
    if (needles < 1 || queries < 1)
        return dt_fail(err, "needle: preset %s's context (%d bytes) is too short for a needle set", o->preset, maxp);
    needle_params_default(np);
    np->n_contexts = 1;
    np->contexts[0] = ctx;
    np->needles = needles;
    np->queries = queries;
    np->n_train = o->quick ? 40 : 400;
    np->n_test = o->quick ? 10 : 50;
    np->seed = o->seed;
    if (needle_params_validate(np, err) != 0) return -1;
    needle_corpus corpus = {0};
    if (needle_corpus_load(&corpus, o->data, err) != 0) return -1;
    int rc = needle_write_dataset(np, &corpus, o->data, dir, err);
    needle_corpus_free(&corpus);
    return rc;
}

static int run_dir(char *out, size_t cap, const cmp_options *o, const char *key, int s, dt_error *err) {
    char name[96];
    if (s == 0) snprintf(name, sizeof name, "%s", key);
    else snprintf(name, sizeof name, "%s-seed%d", key, s);
    return tb_path(out, cap, o->out, name, err);
}

/* ---------------------------------------------------------------- the run */

static int check(const cmp_options *o, dt_config *cfgs, dt_error *err) {
    if (!o->data) return dt_fail(err, "data: a training text file is required");
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
        if (cmp_variant_config(o->variants[v], o->preset, &cfgs[v], err) != 0) return -1;
        if (o->seq > cfgs[v].max_position_embeddings)
            return dt_fail(err, "seq %d: more than preset %s's max_position_embeddings %d", o->seq, o->preset,
                           cfgs[v].max_position_embeddings);
    }
    for (int i = 0; i < o->n_sizes; i++) {
        dt_config c;
        if (dt_config_preset(&c, o->sizes[i], DT_ARCH_DIFF, err) != 0) return -1;
        if (o->seq > c.max_position_embeddings)
            return dt_fail(err, "scaling %s: seq %d is more than its max_position_embeddings %d", o->sizes[i], o->seq,
                           c.max_position_embeddings);
    }
    return 0;
}

int cmp_run(const cmp_options *o, dt_error *err) {
    dt_config cfgs[RP_MAX_VARIANTS];
    if (check(o, cfgs, err) != 0) return -1;
    int *tok = NULL;
    size_t n = 0;
    if (dt_text_load(o->data, &tok, &n, err) != 0) return -1;
    free(tok);
    tok = NULL;
    if (make_dir(o->out, err) != 0) return -1;

    progress p = {.o = o, .t0 = now_s()};
    const int n_runs = o->n_variants * o->seeds + 2 * o->n_sizes;
    p.total = (double)n_runs * o->steps + (double)o->n_variants * o->seeds * ANALYSIS_STEPS(o);

    /* the training text: the data, plus the needle set's training samples with needle */
    char needle_dir[4200], needle_train[4300], train_txt[4200];
    const char *train_path = o->data;
    needle_testset ts = {0};
    needle_params np = {0};
    if (o->needle) {
        if (tb_path(needle_dir, sizeof needle_dir, o->out, "needle", err) ||
            tb_path(needle_train, sizeof needle_train, needle_dir, "train.txt", err) ||
            tb_path(train_txt, sizeof train_txt, o->out, "train.txt", err))
            return -1;
        snprintf(p.msg, sizeof p.msg, "writing the needle set into %s", needle_dir);
        report_progress(&p);
        dt_config c0;
        if (dt_config_preset(&c0, o->preset, DT_ARCH_DIFF, err) != 0 || needle_set(o, &c0, needle_dir, &np, err) != 0 ||
            concat_files(o->data, needle_train, train_txt, err) != 0 || needle_load_testset(&ts, needle_dir, err) != 0)
            return -1;
        train_path = train_txt;
        for (int i = 0; i < ts.n; i++)
            if (ts.samples[i].text_length > c0.max_position_embeddings) {
                dt_fail(err, "needle: %s sample %d is %d bytes, more than the model's context %d", ts.path, i,
                        ts.samples[i].text_length, c0.max_position_embeddings);
                needle_testset_free(&ts);
                return -1;
            }
    }

    /* the held-out tail (dt_train's validation split) for the analyses, and the task filler (the training part) */
    if (dt_text_load(train_path, &tok, &n, err) != 0) {
        needle_testset_free(&ts);
        return -1;
    }
    dt_train_options defaults;
    dt_train_defaults(&defaults);
    const size_t n_train = dt_train_split(n, defaults.val_fraction), tail = n - n_train;
    unsigned char *filler = malloc(n_train ? n_train : 1);
    rp_model *runs = calloc((size_t)o->n_variants * o->seeds, sizeof *runs);
    int rc = 0;
    if (!filler || !runs) rc = dt_fail(err, "out of memory for %zu bytes of training text", n);
    else if (tail < (size_t)o->seq + 1)
        rc = dt_fail(err, "%s: the held-out tail is %zu bytes, fewer than seq + 1 = %d", train_path, tail, o->seq + 1);
    for (size_t i = 0; rc == 0 && i < n_train; i++) filler[i] = (unsigned char)tok[i];
    const tk_mix mix = {.ratio = o->task_ratio, .tasks = o->tasks, .max_pairs = TK_MAX_PAIRS, .filler = filler,
                        .filler_n = n_train};

    /* every variant × seed: train, then analyse */
    int windows = o->quick ? 4 : 8;
    size_t fit = tail > 0 ? (tail - 1) / (size_t)o->seq : 0;
    if ((size_t)windows > fit) windows = (int)fit;
    rp_analysis_options ao = {.tokens = tok + n_train, .n = tail, .seq = o->seq, .windows = windows, .n_bits = 6,
                              .bits = {16, 8, 6, 5, 4, 3}, .needle = o->needle ? &ts : NULL,
                              .allocation_samples = o->quick ? 10 : 50, .tasks = o->tasks,
                              .task_eval = {.train_len = o->seq, .per_cell = o->task_examples, .seed = o->seed ^ 0x7E57ull,
                                            .filler = filler, .filler_n = n_train}};
    for (int s = 0; s < o->seeds && rc == 0; s++)
        for (int v = 0; v < o->n_variants && rc == 0; v++) {
            const variant *vr = find_variant(o->variants[v]);
            rp_model *m = &runs[v * o->seeds + s];
            char dir[4200];
            if ((rc = run_dir(dir, sizeof dir, o, vr->key, s, err)) != 0) break;
            snprintf(p.msg, sizeof p.msg, "training %s, run %d/%d, into %s", vr->display, s + 1, o->seeds, dir);
            report_progress(&p);
            rp_curve_point curve[RP_MAX_CURVE];
            rp_model tmp = {0};
            if ((rc = train_run(o, &cfgs[v], dir, o->seed + (uint64_t)s, train_path, &mix, &tmp, &p, err)) != 0) break;
            int n_curve = tmp.n_curve;
            memcpy(curve, tmp.curve, sizeof curve);
            snprintf(p.msg, sizeof p.msg, "analysing %s, run %d/%d", vr->display, s + 1, o->seeds);
            report_progress(&p);
            if ((rc = rp_analyze_model(m, dir, vr->display, &ao, err)) != 0) break;
            m->n_curve = n_curve;
            memcpy(m->curve, curve, sizeof curve);
            p.done += ANALYSIS_STEPS(o);
        }

    /* scaling: DIFF and its baseline at the other sizes, first seed, same budget and mix */
    rp_report r = {.command = o->command, .seed = o->seed, .preset = o->preset, .data = o->data,
                   .train_text = train_path, .needle_dir = o->needle ? needle_dir : NULL, .steps = o->steps,
                   .batch = o->batch, .seq = o->seq, .heldout_bytes = tail, .windows = windows,
                   .needle_context = np.contexts[0], .needle_needles = np.needles, .needle_queries = np.queries,
                   .tasks = o->tasks, .task_ratio = o->task_ratio, .n_variants = o->n_variants, .n_seeds = o->seeds,
                   .runs = runs, .diff = -1, .base = -1};
    for (int v = 0; v < o->n_variants; v++) {
        r.variant_key[v] = o->variants[v];
        if (strcmp(o->variants[v], "diff") == 0) r.diff = v;
        if (strcmp(o->variants[v], "transformer") == 0) r.base = v;
    }
    if (rc == 0 && o->n_sizes > 0 && (r.diff < 0 || r.base < 0))
        rc = dt_fail(err, "scaling needs the variants diff and transformer");
    r.n_sizes = 1 + o->n_sizes;
    r.size_names[0] = o->preset;
    for (int k = 0; k < 2 && rc == 0; k++) {
        r.size_params[0][k] = (double)rp_run(&r, k ? r.base : r.diff, 0)->n_params;
        r.size_loss[0][k] = rp_run(&r, k ? r.base : r.diff, 0)->training.final_val_loss;
    }
    for (int i = 0; i < o->n_sizes && rc == 0; i++) {
        char sd[4200];
        dt_config c[2];
        char name[96];
        snprintf(name, sizeof name, "scaling-%s", o->sizes[i]);
        if ((rc = tb_path(sd, sizeof sd, o->out, name, err)) != 0 || (rc = make_dir(sd, err)) != 0) break;
        r.size_names[1 + i] = o->sizes[i];
        for (int k = 0; k < 2 && rc == 0; k++) {
            char d[4300];
            an_training t;
            rc = cmp_variant_config(k ? "transformer" : "diff", o->sizes[i], &c[k], err);
            if (rc == 0) rc = tb_path(d, sizeof d, sd, k ? "transformer" : "diff", err);
            if (rc != 0) break;
            snprintf(p.msg, sizeof p.msg, "training %s at size %s into %s", k ? "Transformer" : "DIFF", o->sizes[i], d);
            report_progress(&p);
            if ((rc = train_run(o, &c[k], d, o->seed, train_path, &mix, NULL, &p, err)) != 0) break;
            r.size_params[1 + i][k] = (double)dt_config_param_count(&c[k]);
            if ((rc = an_training_load(d, &t, err)) == 0) {
                r.size_loss[1 + i][k] = t.final_val_loss;
                an_training_free(&t);
            }
        }
    }
    if (rc == 0) {
        snprintf(p.msg, sizeof p.msg, "writing %s/REPORT.md, report.json and plots", o->out);
        report_progress(&p);
        rc = rp_write(&r, o->out, err);
    }
    for (int i = 0; runs && i < o->n_variants * o->seeds; i++) rp_model_free(&runs[i]);
    free(runs);
    free(filler);
    free(tok);
    needle_testset_free(&ts);
    return rc;
}
