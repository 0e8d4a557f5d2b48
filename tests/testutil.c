#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "difftrans.h"

const char *tu_tmpdir(void) {
    static char dir[1024];
    if (!dir[0]) {
        const char *env = getenv("DT_TEST_TMP");
        snprintf(dir, sizeof dir, "%s", env && *env ? env : "/tmp/difftrans_test");
        char cmd[1100];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        if (system(cmd) != 0) abort();
    }
    return dir;
}

void tu_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tu_tmpdir(), name); }

void tu_fill_normal(float *x, size_t n, float std, uint64_t *rng) {
    for (size_t i = 0; i < n; i++) x[i] = std * dt_rng_normal(rng);
}

float *fnew(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    return p;
}

float *frand(size_t n, float std, uint64_t *rng) {
    float *p = fnew(n);
    tu_fill_normal(p, n, std, rng);
    return p;
}

float *fnan(size_t n) {
    float *p = fnew(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

float *fcopy(const float *x, size_t n) {
    float *p = fnew(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

void tu_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) abort();
}

char *tu_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tu_read_file: cannot open %s\n", path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) abort();
    buf[size] = '\0';
    fclose(f);
    if (n) *n = (size_t)size;
    return buf;
}

int tu_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The comparisons return +inf when either side is NaN (or an infinity differs), so a kernel that
 * produces NaN can never pass a tolerance check; fmaxf would silently skip the NaN. */
float tu_max_abs_diff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        if (a[i] == b[i]) continue; /* equal infinities agree */
        if (isinf(a[i]) || isinf(b[i])) return INFINITY;
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

float tu_max_rel_diff(const float *a, const float *b, size_t n, float floor) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        if (a[i] == b[i]) continue;
        if (isinf(a[i]) || isinf(b[i])) return INFINITY;
        float scale = fabsf(a[i]) > fabsf(b[i]) ? fabsf(a[i]) : fabsf(b[i]);
        if (scale < floor) scale = floor;
        float d = fabsf(a[i] - b[i]) / scale;
        if (!(d <= m)) m = d;
    }
    return m;
}

/* ---------------------------------------------------------------- whole-model checks */

static void tu_random_tokens(int *t, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int)(dt_rng_next(&seed) % (uint64_t)V);
}

static double tu_loss(dt_model *m, dt_runstate *rs, const int *tok, const int *tgt, int B, int T) {
    float loss = NAN;
    dt_error err;
    if (dt_forward(m, rs, tok, tgt, B, T, &loss, &err) != 0) return NAN;
    return loss;
}

int tu_model_gradient_check(dt_model *m, dt_attention_kernel kernel, int probes, char *msg, size_t n) {
    enum { B = 2, T = 6 };
    const int V = m->cfg.vocab_size;
    int tok[B * T], tgt[B * T];
    tu_random_tokens(tok, B * T, V, 9);
    tu_random_tokens(tgt, B * T, V, 10);
    tgt[3] = -1; /* an ignored position */
    dt_error err;
    dt_runstate *rs = dt_runstate_create_with(m, B, T, &(dt_run_options){.kernel = kernel}, &err);
    float *g = calloc(m->n_params, sizeof(float));
    int rc = 0;
    if (!rs || !g) {
        snprintf(msg, n, "setup failed: %s", rs ? "out of memory" : err.msg);
        rc = -1;
    } else {
        tu_loss(m, rs, tok, tgt, B, T);
        dt_backward(m, rs, g);
    }
    uint64_t rng = 77;
    for (int i = 0; i < m->n_tensors && rc == 0; i++) {
        const dt_tensor *t = &m->tensors[i];
        for (int probe = 0; probe < probes && rc == 0; probe++) {
            size_t j = t->offset + (size_t)(dt_rng_next(&rng) % t->numel);
            const float eps = 1e-2f, saved = m->params[j];
            m->params[j] = saved + eps;
            double lp = tu_loss(m, rs, tok, tgt, B, T);
            m->params[j] = saved - eps;
            double lm = tu_loss(m, rs, tok, tgt, B, T);
            m->params[j] = saved;
            double fd = (lp - lm) / (2.0 * eps);
            if (!(fabs(fd - g[j]) <= 2e-3 + 5e-2 * fabs(fd))) {
                snprintf(msg, n, "%s[%zu]: backward %g vs finite difference %g", t->name, j - t->offset, (double)g[j],
                         fd);
                rc = -1;
            }
        }
    }
    free(g);
    dt_runstate_free(rs);
    return rc;
}

int tu_fused_matches_reference(dt_model *m, int B, int T, char *msg, size_t n) {
    const int V = m->cfg.vocab_size;
    int *tok = malloc(sizeof(int) * B * T), *tgt = malloc(sizeof(int) * B * T);
    dt_error err;
    dt_runstate *fused = dt_runstate_create_with(m, B, T, &(dt_run_options){.kernel = DT_ATTENTION_FUSED}, &err);
    dt_runstate *ref = dt_runstate_create_with(m, B, T, &(dt_run_options){.kernel = DT_ATTENTION_REFERENCE}, &err);
    float *gf = calloc(m->n_params, sizeof(float)), *gr = calloc(m->n_params, sizeof(float));
    int rc = 0;
    float lf = NAN, lr = NAN;
    if (!tok || !tgt || !fused || !ref || !gf || !gr) {
        snprintf(msg, n, "setup failed: %s", err.msg);
        rc = -1;
    } else {
        tu_random_tokens(tok, B * T, V, 12);
        tu_random_tokens(tgt, B * T, V, 13);
        if (dt_forward(m, fused, tok, tgt, B, T, &lf, &err) || dt_forward(m, ref, tok, tgt, B, T, &lr, &err)) {
            snprintf(msg, n, "forward failed: %s", err.msg);
            rc = -1;
        }
    }
    if (rc == 0 && dt_runstate_attention(fused, 0) != NULL) {
        snprintf(msg, n, "the fused kernel kept attention maps: the reference kernel ran");
        rc = -1;
    }
    /* The bound is float32 noise, measured: OpenBLAS's SkylakeX sgemm core (what Intel AVX-512 CPUs
     * get) moves the reference kernel's own logits by 1.0e-5 against its Zen core (test_model, DIFF,
     * T 37, portable path), and the fused kernel lies within 5.6e-6 of either; a real error (a
     * mask, a scale, λ) moves them by orders of magnitude more. */
    float d = rc == 0 ? tu_max_rel_diff(dt_runstate_logits(fused), dt_runstate_logits(ref), (size_t)B * T * V, 1.0f) : 0;
    if (rc == 0 && !(d <= 3e-5f && fabsf(lf - lr) <= 3e-5f * fabsf(lr))) {
        snprintf(msg, n, "T %d: fused logits differ from the reference by %g (loss %g vs %g)", T, d, lf, lr);
        rc = -1;
    }
    if (rc == 0) {
        dt_backward(m, fused, gf);
        dt_backward(m, ref, gr);
    }
    /* A tensor whose true gradient is 0 (q and k at T 1, where softmax over one key is constant)
     * gets the rounding of terms that cancel (dP − D): judged against the model's largest gradient */
    float global = 0;
    for (size_t j = 0; rc == 0 && j < m->n_params; j++) global = fmaxf(global, fabsf(gr[j]));
    for (int i = 0; i < m->n_tensors && rc == 0; i++) {
        const dt_tensor *t = &m->tensors[i];
        float scale = 0;
        for (size_t j = 0; j < t->numel; j++) scale = fmaxf(scale, fabsf(gr[t->offset + j]));
        float diff = tu_max_abs_diff(gf + t->offset, gr + t->offset, t->numel);
        if (!(diff <= 1e-4f * scale + 1e-5f * global)) {
            snprintf(msg, n, "T %d: gradient of %s differs by %g (scale %g)", T, t->name, diff, scale);
            rc = -1;
        }
    }
    free(gf), free(gr), free(tok), free(tgt);
    dt_runstate_free(fused);
    dt_runstate_free(ref);
    return rc;
}

float tu_logits_max_diff(const dt_model *a, const dt_model *b, int T, uint64_t seed, int relative) {
    const int V = a->cfg.vocab_size;
    int *tok = malloc(sizeof(int) * T);
    dt_error err;
    dt_runstate *ra = dt_runstate_create(a, 1, T, &err), *rb = dt_runstate_create(b, 1, T, &err);
    float d = INFINITY;
    if (tok && ra && rb && b->cfg.vocab_size == V) {
        tu_random_tokens(tok, T, V, seed);
        if (dt_forward(a, ra, tok, NULL, 1, T, NULL, &err) == 0 && dt_forward(b, rb, tok, NULL, 1, T, NULL, &err) == 0)
            d = relative ? tu_max_rel_diff(dt_runstate_logits(ra), dt_runstate_logits(rb), (size_t)T * V, 1.0f)
                         : tu_max_abs_diff(dt_runstate_logits(ra), dt_runstate_logits(rb), (size_t)T * V);
    }
    free(tok);
    dt_runstate_free(ra);
    dt_runstate_free(rb);
    return d;
}

void tu_tiny_diff_config(dt_config *c) {
    dt_error err;
    if (dt_config_preset(c, "tiny", DT_ARCH_DIFF, &err) != 0) {
        fprintf(stderr, "tu_tiny_diff_config: %s\n", err.msg);
        abort();
    }
    c->hidden_size = 16;
    c->intermediate_size = 32;
    c->num_hidden_layers = 1;
    c->num_attention_heads = 2;
    c->num_key_value_heads = 2;
    c->head_dim = 8;
}

void tu_tiny_train_options(dt_train_options *o, const char *data_path, const char *out, int steps, int seq) {
    dt_train_defaults(o);
    tu_tiny_diff_config(&o->cfg);
    o->data_path = data_path;
    o->out_dir = out;
    o->steps = steps;
    o->batch = 2;
    o->seq = seq;
    o->warmup = 1;
    o->eval_interval = 0;
    o->eval_batches = 1;
    o->save_interval = 0;
    o->quiet = 1;
}

/* GPT-2's printable stand-in for byte b (the ByteLevel alphabet), as UTF-8 into out. */
void tu_bytelevel_char(int b, char out[4]) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    int cp = b;
    if (!printable) {
        int k = 0; /* the k-th non-printable byte maps to 256 + k */
        for (int c = 0; c < b; c++)
            k += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF));
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = '\0';
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = '\0';
    }
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int tu_tokenizer_test_files(const char *sub, char ***names, char *dir_out, size_t dir_n) {
    const char *root = getenv("DT_TOKENIZER_TESTS");
    if (!root) {
        fprintf(stderr, "tu_tokenizer_test_files: DT_TOKENIZER_TESTS is not set (run under ctest)\n");
        abort();
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", root, sub);
    if (dir_out) snprintf(dir_out, dir_n, "%s", dir);
    DIR *d = opendir(dir);
    char **list = calloc(256, sizeof *list);
    if (!d || !list) {
        fprintf(stderr, "tu_tokenizer_test_files: cannot read %s\n", dir);
        abort();
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256)
        if (strstr(e->d_name, ".json")) {
            if (!(list[n++] = strdup(e->d_name))) abort();
        }
    closedir(d);
    qsort(list, (size_t)n, sizeof *list, by_name);
    *names = list;
    return n;
}

void tu_free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}
