/* test_faults.c — SQLite-style fault injection: the n-th allocation, or the n-th write, made by
 * the library fails, for every n that a call makes, and each time the call must fail with a
 * message and the code of what failed (DT_ERR_NOMEM, DT_ERR_IO), free everything it allocated,
 * and leave the files on disk as they were.
 *
 * How: this program is linked with -Wl,--wrap for the allocation and write functions (see
 * tests/CMakeLists.txt), so every call the library makes to malloc, fwrite, ... comes here first.
 * The hook is explicitly armed and per thread (_Thread_local): it exists only in this test
 * program, and the library itself keeps no state for it (two models in one process are unaffected).
 * Allocations by cJSON go through the same counter (cJSON_InitHooks). Under `make check-asan`,
 * LeakSanitizer also checks that nothing leaks; the live-allocation count below checks it in
 * every build. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <execinfo.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "difftrans.h"
#include "testutil.h"
#include "tokenizer/tok.h"

/* ---------------------------------------------------------------- the hook */

typedef enum { FAULT_ALLOC, FAULT_WRITE } fault_kind;
static _Thread_local struct {
    int armed;
    fault_kind kind;
    long target;      /* the target-th counted call of `kind` fails */
    long seen[2];     /* counted calls since arming */
    int fired;
    long live;        /* allocations minus frees since arming */
} hook;

static void fault_arm(fault_kind kind, long target) {
    memset(&hook, 0, sizeof hook);
    hook.armed = 1;
    hook.kind = kind;
    hook.target = target;
}
static void fault_disarm(void) { hook.armed = 0; }

/* 1 when this call must fail */
static int fault_hit(fault_kind kind) {
    if (!hook.armed) return 0;
    if (++hook.seen[kind] == hook.target && hook.kind == kind) {
        hook.fired = 1;
        if (getenv("DT_FAULT_TRACE")) { /* where the injected failure happens */
            void *frames[12];
            hook.armed = 0;
            backtrace_symbols_fd(frames, backtrace(frames, 12), 2);
            hook.armed = 1;
        }
        return 1;
    }
    return 0;
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void __real_free(void *p);
size_t __real_fwrite(const void *p, size_t s, size_t n, FILE *f);
int __real_fputs(const char *s, FILE *f);
int __real_fputc(int c, FILE *f);
int __real_fflush(FILE *f);
int __real_fsync(int fd);
int __real_rename(const char *a, const char *b);
int __real_link(const char *a, const char *b);
FILE *__real_fopen(const char *path, const char *mode);

static void *counted(void *p) {
    if (p && hook.armed) hook.live++;
    return p;
}
void *__wrap_malloc(size_t n) { return fault_hit(FAULT_ALLOC) ? NULL : counted(__real_malloc(n)); }
void *__wrap_calloc(size_t k, size_t n) { return fault_hit(FAULT_ALLOC) ? NULL : counted(__real_calloc(k, n)); }
void *__wrap_aligned_alloc(size_t a, size_t n) {
    return fault_hit(FAULT_ALLOC) ? NULL : counted(__real_aligned_alloc(a, n));
}
void *__wrap_realloc(void *p, size_t n) {
    if (fault_hit(FAULT_ALLOC)) return NULL;
    void *q = __real_realloc(p, n);
    if (!p) counted(q);
    return q;
}
void __wrap_free(void *p) {
    if (p && hook.armed) hook.live--;
    __real_free(p);
}
static int write_fails(void) {
    if (!fault_hit(FAULT_WRITE)) return 0;
    errno = ENOSPC;
    return 1;
}
/* A stream whose write failed has its error indicator set, as a real failure leaves it
 * (glibc's _IO_ERR_SEEN), so that ferror() sees it. */
static int stream_fails(FILE *f) {
    if (!write_fails()) return 0;
#ifdef __GLIBC__
    f->_flags |= 0x20;
#endif
    return 1;
}
size_t __wrap_fwrite(const void *p, size_t s, size_t n, FILE *f) { return stream_fails(f) ? 0 : __real_fwrite(p, s, n, f); }
int __wrap_fputs(const char *s, FILE *f) { return stream_fails(f) ? EOF : __real_fputs(s, f); }
int __wrap_fputc(int c, FILE *f) { return stream_fails(f) ? EOF : __real_fputc(c, f); }
int __wrap_fflush(FILE *f) { return f && stream_fails(f) ? EOF : __real_fflush(f); }
int __wrap_fsync(int fd) { return write_fails() ? -1 : __real_fsync(fd); }
int __wrap_rename(const char *a, const char *b) { return write_fails() ? -1 : __real_rename(a, b); }
int __wrap_link(const char *a, const char *b) { return write_fails() ? -1 : __real_link(a, b); }
/* opening a file for writing is where a full directory or a quota shows first */
FILE *__wrap_fopen(const char *path, const char *mode) {
    if (strpbrk(mode, "wa") && write_fails()) return NULL;
    return __real_fopen(path, mode);
}
int __wrap_fprintf(FILE *f, const char *fmt, ...) {
    if (f != stderr && f != stdout && stream_fails(f)) return -1;
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf(f, fmt, ap);
    va_end(ap);
    return r;
}

/* ---------------------------------------------------------------- helpers */

/* Every file of a directory, names and contents, as one string (to compare before / after). */
static char *snapshot(const char *dir) {
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    assert_true(n >= 0);
    size_t cap = 1 << 16, len = 0;
    char *s = __real_malloc(cap);
    for (int i = 0; i < n; i++) {
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && strcmp(names[i]->d_name, "metrics.jsonl") != 0) {
            size_t fn;
            char *data = tu_read_file(path, &fn);
            size_t need = len + strlen(path) + fn + 8;
            if (need > cap) s = __real_realloc(s, cap = 2 * need);
            len += (size_t)sprintf(s + len, "%s\n", names[i]->d_name);
            memcpy(s + len, data, fn);
            len += fn;
            free(data);
        } else if (strstr(names[i]->d_name, ".tmp.")) {
            fail_msg("a temporary file was left behind: %s", path);
        }
        free(names[i]);
    }
    free(names);
    s[len] = '\0';
    return s;
}

static const char *text_file(void) {
    static char path[1024];
    tu_path(path, sizeof path, "text.txt");
    char buf[4000];
    size_t n = 0;
    while (n + 64 < sizeof buf) n += (size_t)snprintf(buf + n, sizeof buf - n, "a small corpus, line %zu. ", n % 89);
    tu_write_file(path, buf, n);
    return path;
}

static void train_opts(dt_train_options *o, const char *out, int steps) {
    tu_tiny_train_options(o, text_file(), out, steps, 8);
    o->save_interval = 1;
}

typedef int (*operation)(void *ctx, dt_error *err);

/* Runs op with the n-th call of `kind` failing, for n = 1, 2, ... until op makes fewer calls
 * than n. Each failing run must return -1 with a message and free all it allocated; `check`
 * (when given) then looks at the files. The walk must have injected at least `min_injected`
 * (> 0) failures: a walk that ends at once, because the wrappers are no longer linked in or the
 * hook no longer fires, would otherwise pass having tested nothing, and a count far below what
 * the operation is known to make means part of it no longer goes through the hook. Returns how
 * many failures were injected. */
static long walk(const char *what, fault_kind kind, operation op, void *ctx, void (*check)(void *ctx),
                 long min_injected) {
    assert_true(min_injected > 0);
    long injected = 0;
    long n;
    for (n = 1;; n++) {
        dt_error err;
        err.msg[0] = '\0';
        fault_arm(kind, n);
        int rc = op(ctx, &err);
        fault_disarm();
        if (!hook.fired) {
            if (rc != 0) fail_msg("%s: fails without an injected fault: %s", what, err.msg);
            break;
        }
        injected++;
        if (rc == 0) {
            /* a failure the call may absorb: only allocations in optional work (none so far) */
            fail_msg("%s: %s #%ld failed but the call reported success", what, kind == FAULT_ALLOC ? "allocation" : "write", n);
        }
        if (!err.msg[0]) fail_msg("%s: %s #%ld failed without a message", what, kind == FAULT_ALLOC ? "allocation" : "write", n);
        /* and its code says what it was: out of memory, or the system refusing a write */
        const dt_errcode want = kind == FAULT_ALLOC ? DT_ERR_NOMEM : DT_ERR_IO;
        if (err.code != want)
            fail_msg("%s: %s #%ld failed with code %s, not %s: %s", what,
                     kind == FAULT_ALLOC ? "allocation" : "write", n, dt_errcode_name(err.code), dt_errcode_name(want),
                     err.msg);
        if (hook.live != 0)
            fail_msg("%s: after %s #%ld failed, %ld allocation(s) were not freed (%s)", what,
                     kind == FAULT_ALLOC ? "allocation" : "write", n, hook.live, err.msg);
        if (check) check(ctx);
    }
    const char *calls = kind == FAULT_ALLOC ? "allocation" : "write";
    print_message("%s: %ld %s failures injected (at least %ld expected)\n", what, injected, calls, min_injected);
    if (injected < min_injected)
        fail_msg("%s: only %ld %s failures were injected, at least %ld expected", what, injected, calls, min_injected);
    return injected;
}

/* ---------------------------------------------------------------- loading */

/* Each walk's minimum is about three quarters of the failures it injects today (the count beside
 * it, also printed): room for the library to allocate or write a little less, none for a walk
 * that stopped reaching the code under test. */

typedef struct {
    char dir[1024];
    char *before;
    dt_model m;
} ckpt_ctx;

static int op_load(void *p, dt_error *err) {
    ckpt_ctx *c = p;
    dt_model m;
    if (dt_model_load(&m, c->dir, err) != 0) return -1;
    dt_model_free(&m);
    return 0;
}

static void check_same(const char *dir, const char *before) {
    char *now = snapshot(dir);
    if (strcmp(now, before) != 0) fail_msg("%s changed after a failed call", dir);
    __real_free(now);
}

static void check_unchanged(void *p) {
    ckpt_ctx *c = p;
    check_same(c->dir, c->before);
}

static void make_checkpoint(ckpt_ctx *c, const char *name) {
    dt_config cfg;
    dt_error err;
    tu_tiny_diff_config(&cfg);
    tu_path(c->dir, sizeof c->dir, name);
    assert_int_equal(dt_model_create(&c->m, &cfg, &err), 0);
    dt_model_init_random(&c->m, 5);
    assert_int_equal(dt_model_save(&c->m, c->dir, 0, &err), 0);
    c->before = snapshot(c->dir);
}

static void test_load_faults(void **state) {
    (void)state;
    ckpt_ctx c;
    make_checkpoint(&c, "load");
    walk("load", FAULT_ALLOC, op_load, &c, check_unchanged, 300); /* 416 on the tiny model */
    dt_model_free(&c.m);
    __real_free(c.before);
}

/* ---------------------------------------------------------------- saving over a checkpoint */

static int op_save(void *p, dt_error *err) {
    ckpt_ctx *c = p;
    return dt_model_save(&c->m, c->dir, 0, err);
}

static void test_save_faults(void **state) {
    (void)state;
    ckpt_ctx c;
    make_checkpoint(&c, "save");
    /* new weights: a failed save must leave the old ones, a successful one the new ones */
    for (size_t i = 0; i < c.m.n_params; i++) c.m.params[i] *= 0.5f;
    walk("save", FAULT_ALLOC, op_save, &c, check_unchanged, 250); /* 351 */
    /* the walk ended with a successful save: restore the old files for the write walk */
    __real_free(c.before);
    for (size_t i = 0; i < c.m.n_params; i++) c.m.params[i] *= 2.0f;
    dt_error err;
    assert_int_equal(dt_model_save(&c.m, c.dir, 0, &err), 0);
    c.before = snapshot(c.dir);
    for (size_t i = 0; i < c.m.n_params; i++) c.m.params[i] *= 0.5f;
    walk("save", FAULT_WRITE, op_save, &c, check_unchanged, 30); /* 45 */
    dt_model_free(&c.m);
    __real_free(c.before);
}

/* ---------------------------------------------------------------- saving into a new directory */

/* A failed save into a directory it created leaves no directory: a full disk at config.json left
 * one holding model.safetensors alone (a checkpoint that does not load). */
static void check_absent(void *p) {
    const ckpt_ctx *c = p;
    struct stat sb;
    if (stat(c->dir, &sb) == 0) fail_msg("%s was left behind by a failed save", c->dir);
}

static void test_save_new_dir_faults(void **state) {
    (void)state;
    ckpt_ctx c;
    dt_config cfg;
    dt_error err;
    tu_tiny_diff_config(&cfg);
    tu_path(c.dir, sizeof c.dir, "save_new");
    char rm[1200];
    snprintf(rm, sizeof rm, "rm -rf '%s'", c.dir); /* the walk's last, successful save of an earlier run */
    assert_int_equal(system(rm), 0);
    assert_int_equal(dt_model_create(&c.m, &cfg, &err), 0);
    dt_model_init_random(&c.m, 5);
    walk("save into a new directory", FAULT_WRITE, op_save, &c, check_absent, 30); /* 45 */
    dt_model_free(&c.m);
}

/* ---------------------------------------------------------------- a training step */

/* The run directory is restored from `pristine` (a run at step 2) before every attempt. A failed
 * attempt must leave the step-2 files as they were, unless it failed inside the commit of the new
 * checkpoint (DIR/.next/train_state.json exists): then the next resume finishes that commit and
 * the directory holds exactly the new checkpoint. */
typedef struct {
    char dir[1024], pristine[1024];
    char *before;      /* the step-2 files */
    char *after_model; /* model.safetensors of a clean step 3 */
    size_t after_n;
    dt_model after;    /* and the model loaded from it */
} run_ctx;

static void sh(const char *fmt, const char *a, const char *b) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    assert_int_equal(system(cmd), 0);
}

/* dir = a fresh copy of pristine */
static void restore(const run_ctx *c) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", c->dir, c->pristine, c->dir);
    assert_int_equal(system(cmd), 0);
}

static int resume_to(const char *dir, int steps, dt_error *err) {
    dt_train_options o;
    memset(&o, 0, sizeof o);
    o.out_dir = dir;
    o.resume = 1;
    o.quiet = 1;
    o.steps = steps;
    return dt_train(&o, err);
}

static int op_train_step(void *p, dt_error *err) {
    run_ctx *c = p;
    return resume_to(c->dir, 3, err); /* one step past the checkpoint at step 2, then its checkpoint */
}

static void check_run(void *p) {
    run_ctx *c = p;
    char state[1100], model[1100];
    snprintf(state, sizeof state, "%s/.next/train_state.json", c->dir);
    if (!tu_file_exists(state)) {
        check_same(c->dir, c->before);
        char stage[1100];
        snprintf(stage, sizeof stage, "%s/.next", c->dir);
        struct stat sb;
        if (stat(stage, &sb) == 0) fail_msg("%s: a checkpoint stage whose writing failed was left behind", stage);
    } else { /* failed inside the commit: the next resume completes it */
        dt_error err;
        /* until then a reader (info, generate, eval) loads the new checkpoint whole, writing nothing:
         * DIR itself may hold the new model.safetensors beside the old train_state.json, or the reverse */
        char stage[1100];
        snprintf(stage, sizeof stage, "%s/.next", c->dir);
        char *dir_before = snapshot(c->dir), *stage_before = snapshot(stage);
        dt_model r;
        if (dt_model_load(&r, c->dir, &err) != 0) fail_msg("reading %s after a failed commit: %s", c->dir, err.msg);
        if (r.n_params != c->after.n_params || memcmp(r.params, c->after.params, r.n_params * sizeof *r.params) != 0)
            fail_msg("%s: after a failed commit, a reader loads a model that is not the new checkpoint's", c->dir);
        dt_model_free(&r);
        check_same(c->dir, dir_before);
        check_same(stage, stage_before);
        __real_free(dir_before);
        __real_free(stage_before);
        if (resume_to(c->dir, 3, &err) != 0) fail_msg("resume after a failed commit: %s", err.msg);
        snprintf(model, sizeof model, "%s/model.safetensors", c->dir);
        size_t n;
        char *m = tu_read_file(model, &n);
        if (n != c->after_n || memcmp(m, c->after_model, n) != 0)
            fail_msg("%s: after a failed commit and its recovery, the model is not the new checkpoint's", c->dir);
        free(m);
    }
    restore(c);
}

static void run_walk(fault_kind kind, long min_injected) {
    run_ctx c;
    tu_path(c.dir, sizeof c.dir, "run");
    tu_path(c.pristine, sizeof c.pristine, "run_step2");
    dt_train_options o;
    dt_error err;
    sh("rm -rf '%s' '%s'", c.dir, c.pristine);
    train_opts(&o, c.pristine, 2);
    if (dt_train(&o, &err) != 0) fail_msg("%s", err.msg);
    /* the new checkpoint a clean step 3 writes */
    restore(&c);
    if (resume_to(c.dir, 3, &err) != 0) fail_msg("%s", err.msg);
    char model[1100];
    snprintf(model, sizeof model, "%s/model.safetensors", c.dir);
    c.after_model = tu_read_file(model, &c.after_n);
    if (dt_model_load(&c.after, c.dir, &err) != 0) fail_msg("%s", err.msg);
    restore(&c);
    c.before = snapshot(c.dir);
    walk("training step", kind, op_train_step, &c, check_run, min_injected);
    __real_free(c.before);
    free(c.after_model);
    dt_model_free(&c.after);
}

static void test_train_step_alloc_faults(void **state) {
    (void)state;
    run_walk(FAULT_ALLOC, 800); /* 1043 on the tiny model */
}

static void test_train_step_write_faults(void **state) {
    (void)state;
    run_walk(FAULT_WRITE, 60); /* 87 */
}

/* ---------------------------------------------------------------- quantisation */

/* dt_model_quantize on a float model, every allocation of it failing in turn: each failure must
 * leave the model float with nothing of the partial quantisation held. A success goes back to the
 * float model for the next run. The tokens calibrate w8a8 in memory (no file to read). */
typedef struct {
    dt_model m;
    dt_quant_options o;
    int tokens[256];
} quant_ctx;

static int op_quantize(void *p, dt_error *err) {
    quant_ctx *c = p;
    if (dt_model_quantize(&c->m, &c->o, err) != 0) {
        if (dt_model_quant_scheme(&c->m, NULL) != DT_QUANT_NONE) fail_msg("a failed quantize left the model quantised");
        return -1;
    }
    dt_error e2;
    return dt_model_dequantize(&c->m, &e2);
}

static void test_quantize_faults(void **state) {
    (void)state;
    quant_ctx c;
    dt_config cfg;
    dt_error err;
    tu_tiny_diff_config(&cfg);
    assert_int_equal(dt_model_create(&c.m, &cfg, &err), 0);
    dt_model_init_random(&c.m, 5);
    for (int i = 0; i < 256; i++) c.tokens[i] = (i * 37) % cfg.vocab_size;
    static const struct {
        dt_quant_scheme scheme;
        int smooth, min_injected;
    } runs[] = {{DT_QUANT_Q8_0, 0, 10}, {DT_QUANT_Q4_0, 0, 10}, {DT_QUANT_W8A8, 1, 40}}; /* 21 (portable 13), 21, 63 */
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        dt_quant_defaults(&c.o);
        c.o.scheme = runs[r].scheme;
        c.o.lm_head = 1;
        c.o.quiet = 1;
        c.o.smooth_alpha = runs[r].smooth ? 0.5f : -1.0f;
        c.o.calib_tokens = c.tokens;
        c.o.calib_n = 256;
        c.o.calib_samples = 4;
        c.o.calib_seq = 16;
        walk(dt_quant_scheme_name(c.o.scheme), FAULT_ALLOC, op_quantize, &c, NULL, runs[r].min_injected);
    }
    dt_model_free(&c.m);
}

/* ---------------------------------------------------------------- the parallel tokenizer encoder */

/* On one thread (the hook counts the calling thread's allocations), with chunks of 16 bytes: every
 * step of the units pipeline (segments, normalised parts, chunks, runs, units, ids) meets a
 * failure somewhere in the walk. */
typedef struct {
    dt_tok *tok;
    const char *text;
} tok_ctx;

static int op_encode(void *p, dt_error *err) {
    tok_ctx *c = p;
    tk_par par = {16, 0};
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tk_encode_parallel(c->tok, c->text, strlen(c->text), 1, 1, &par, &ids, &n, err);
    if (rc != 0 && ids) fail_msg("a failed encode left its ids");
    free(ids);
    return rc;
}

static void test_tokenizer_encode_faults(void **state) {
    (void)state;
    const char *dir = getenv("DT_TOKENIZER_TESTS");
    if (!dir) fail_msg("DT_TOKENIZER_TESTS is not set (run under ctest)");
    /* a regex stage (Split, Isolated) with added tokens; NFKC + Lowercase with normalised ones
     * (on ASCII text: utf8proc allocates with the real malloc, which the hook cannot count) */
    static const char *const fixtures[] = {"llama3_like.json", "metaspace_first.json"};
    static const long min_injected[] = {40, 50}; /* 51 and 63 */
    static const char *const texts[] = {
        "Hello <|begin_of_text|>world, it's 2025!\n\n   spaces   [Day] and <Mask>\tcaf\xc3\xa9 e\xcc\x81 "
        "\xe4\xbd\xa0\xe5\xa5\xbd <|eot_id|><s>1234567 the end.   ",
        "Hello World, IT'S 2025!\n\n   spaces   [Day] and <Mask>\tDay [day] <s>1234567 THE end.   "};
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/fixtures/%s", dir, fixtures[i]);
        tok_ctx c = {NULL, texts[i]};
        dt_error err;
        if (dt_tok_load(&c.tok, path, &err) != 0) fail_msg("%s", err.msg);
        walk(fixtures[i], FAULT_ALLOC, op_encode, &c, NULL, min_injected[i]);
        dt_tok_free(c.tok);
    }
}

static void *hook_malloc(size_t n) { return __wrap_malloc(n); }
static void hook_free(void *p) { __wrap_free(p); }

int main(void) {
    cJSON_Hooks h = {hook_malloc, hook_free};
    cJSON_InitHooks(&h);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_faults),
        cmocka_unit_test(test_tokenizer_encode_faults),
        cmocka_unit_test(test_save_faults),
        cmocka_unit_test(test_save_new_dir_faults),
        cmocka_unit_test(test_train_step_alloc_faults),
        cmocka_unit_test(test_train_step_write_faults),
        cmocka_unit_test(test_quantize_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
