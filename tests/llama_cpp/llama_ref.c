/* llama_ref.c — llama.cpp as a reference for difftrans's tests and benchmarks, never part of
 * difftrans: the prebuilt libllama / libggml of the npm package @node-llama-cpp/linux-x64
 * (tests/llama_cpp/package.json), compiled against the headers of the same llama.cpp commit by
 * tests/llama_cpp/build.sh. CPU only.
 *
 *   llama_ref info MODEL.gguf                 the CPU variant llama.cpp chose, the model's sizes
 *   llama_ref logits MODEL.gguf --ids F --out O   the logits of every position (--last: the last)
 *   llama_ref tokenize MODEL.gguf --text F    the GGUF vocabulary's ids for a text, on one line
 *                                             (--parse-special: special tokens' texts as those
 *                                             tokens, as llama.cpp's server and CLI take prompts)
 *   llama_ref bench MODEL.gguf                prompt and decode tokens/s, a JSON line
 *   llama_ref quantize IN.gguf OUT.gguf --type q8_0|q4_0|f16   llama_model_quantize, as llama-quantize
 *   llama_ref rewrite IN.gguf OUT.gguf [--qk-layout] [--set-str KEY=VALUE] [--scores id|negate|tie|coarse]
 *                                             a copy made wrong on purpose, for the tests to show
 *                                             that they catch it: each head's q/k rows in the other
 *                                             RoPE layout, a string key changed (tokenizer.ggml.pre),
 *                                             the SentencePiece scores in another order (-id, or
 *                                             the file's reversed), or tied (tie: all -1000, as
 *                                             gguf-py's LlamaHfVocab writes them; coarse: the
 *                                             file's rounded down to a step of 4, so that runs of
 *                                             tokens share a score); or (--vocab-from V.gguf) with
 *                                             V's tokenizer.* keys in place of its own (llama.cpp's
 *                                             vocabulary-only test files on a model)
 *
 * The library is built with every backend as a loadable module (GGML_BACKEND_DL): libggml itself
 * holds no CPU code, and until ggml_backend_load_all_from_path(DIR) has run no model can load.
 * That call dlopens every libggml-cpu-*.so in DIR, asks each its ggml_backend_score() (0 when the
 * CPU lacks an instruction the variant was compiled for, else a sum of bits that grows with the
 * instruction sets: AVX2 above AVX, AVX-512 above AVX2, VNNI above that), and registers the one
 * with the highest score, so the 14 variants cover every x86-64 CPU with its best code. `info`
 * prints every variant's score beside the features of the one registered. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

#ifndef LLAMA_REF_BACKEND_DIR
#define LLAMA_REF_BACKEND_DIR ""
#endif
#ifndef LLAMA_REF_COMMIT
#define LLAMA_REF_COMMIT "unknown"
#endif

#define LOGITS_MAGIC "LRF1" /* then int32 rows, vocab, first position; float32 [rows, vocab] */

typedef struct {
    const char *mode, *pos[2];
    int n_pos;
    const char *ids, *out, *text, *backends, *type, *output_type, *embd_type, *set_str, *set_u32, *scores, *vocab_from;
    int threads, last, add_special, parse_special, verbose, pure, reps, warmup, qk_layout;
    enum llama_flash_attn_type flash;
    int kv; /* -1: llama.cpp's default (F16), else a ggml_type */
    int prompts[8], n_prompts, decode, decode_at;
} opts;

static int g_verbose;
static char g_flash_resolved[32] = "unknown"; /* what flash_attn auto became (from the log) */

static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("llama_ref: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* llama.cpp narrates every load at INFO level; warnings and errors pass, the rest only with
 * --verbose. The line that says whether flash attention was enabled is remembered. */
static void on_log(enum ggml_log_level level, const char *text, void *ud) {
    static enum ggml_log_level last = GGML_LOG_LEVEL_INFO;
    (void)ud;
    if (level == GGML_LOG_LEVEL_CONT) level = last;
    else last = level;
    if (strstr(text, "Flash Attention enabled")) snprintf(g_flash_resolved, sizeof g_flash_resolved, "enabled");
    else if (strstr(text, "Flash Attention not supported"))
        snprintf(g_flash_resolved, sizeof g_flash_resolved, "disabled");
    if (g_verbose || level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return fail("%s '%s': expected an integer in [%d, %d]", flag, s, lo, hi);
    *out = (int)v;
    return 0;
}

static int parse_ggml_type(const char *flag, const char *s, enum ggml_type *t) {
    static const struct {
        const char *name;
        enum ggml_type t;
    } types[] = {{"f32", GGML_TYPE_F32}, {"f16", GGML_TYPE_F16}, {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(s, types[i].name) == 0) {
            *t = types[i].t;
            return 0;
        }
    return fail("%s '%s': expected f32, f16, q8_0 or q4_0", flag, s);
}

static int parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (o->threads < 1) o->threads = 1;
    o->flash = LLAMA_FLASH_ATTN_TYPE_AUTO;
    o->kv = -1;
    o->reps = 3;
    o->warmup = 1;
    o->decode = 64;
    o->decode_at = 64;
    o->backends = getenv("LLAMA_REF_BACKENDS") ? getenv("LLAMA_REF_BACKENDS") : LLAMA_REF_BACKEND_DIR;
    if (argc < 2) return fail("usage: llama_ref info|logits|tokenize|bench|quantize|rewrite MODEL.gguf [options]");
    o->mode = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (strcmp(a, "--last") == 0) o->last = 1, takes = 0;
        else if (strcmp(a, "--add-special") == 0) o->add_special = 1, takes = 0;
        else if (strcmp(a, "--parse-special") == 0) o->parse_special = 1, takes = 0;
        else if (strcmp(a, "--verbose") == 0) o->verbose = 1, takes = 0;
        else if (strcmp(a, "--pure") == 0) o->pure = 1, takes = 0;
        else if (strcmp(a, "--qk-layout") == 0) o->qk_layout = 1, takes = 0;
        else if (strncmp(a, "--", 2) != 0) {
            if (o->n_pos == 2) return fail("unexpected argument '%s'", a);
            o->pos[o->n_pos++] = a;
            takes = 0;
        } else if (!v) return fail("%s needs a value", a);
        else if (strcmp(a, "--ids") == 0) o->ids = v;
        else if (strcmp(a, "--out") == 0) o->out = v;
        else if (strcmp(a, "--text") == 0) o->text = v;
        else if (strcmp(a, "--backends") == 0) o->backends = v;
        else if (strcmp(a, "--type") == 0) o->type = v;
        else if (strcmp(a, "--output-type") == 0) o->output_type = v;
        else if (strcmp(a, "--embd-type") == 0) o->embd_type = v;
        else if (strcmp(a, "--set-str") == 0) o->set_str = v;
        else if (strcmp(a, "--set-u32") == 0) o->set_u32 = v;
        else if (strcmp(a, "--vocab-from") == 0) o->vocab_from = v;
        else if (strcmp(a, "--scores") == 0) {
            if (strcmp(v, "id") != 0 && strcmp(v, "negate") != 0 && strcmp(v, "tie") != 0 && strcmp(v, "coarse") != 0)
                return fail("--scores '%s': expected id, negate, tie or coarse", v);
            o->scores = v;
        }
        else if (strcmp(a, "--threads") == 0) {
            if (parse_int(a, v, 1, 1024, &o->threads)) return 1;
        } else if (strcmp(a, "--reps") == 0) {
            if (parse_int(a, v, 1, 1000, &o->reps)) return 1;
        } else if (strcmp(a, "--warmup") == 0) {
            if (parse_int(a, v, 0, 1, &o->warmup)) return 1;
        } else if (strcmp(a, "--decode") == 0) {
            if (parse_int(a, v, 0, 1 << 20, &o->decode)) return 1;
        } else if (strcmp(a, "--decode-at") == 0) {
            if (parse_int(a, v, 1, 1 << 20, &o->decode_at)) return 1;
        } else if (strcmp(a, "--prompt") == 0) { /* e.g. 128,1024 */
            char buf[128];
            if (strlen(v) >= sizeof buf) return fail("--prompt '%s': too long", v);
            snprintf(buf, sizeof buf, "%s", v);
            o->n_prompts = 0;
            for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
                if (o->n_prompts == 8) return fail("--prompt '%s': at most 8 lengths", v);
                if (parse_int("--prompt", p, 1, 1 << 20, &o->prompts[o->n_prompts++])) return 1;
            }
        } else if (strcmp(a, "--flash-attn") == 0) {
            if (strcmp(v, "auto") == 0) o->flash = LLAMA_FLASH_ATTN_TYPE_AUTO;
            else if (strcmp(v, "on") == 0) o->flash = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            else if (strcmp(v, "off") == 0) o->flash = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            else return fail("--flash-attn '%s': expected auto, on or off", v);
        } else if (strcmp(a, "--kv") == 0) {
            enum ggml_type t;
            if (strcmp(v, "default") == 0) o->kv = -1;
            else if (parse_ggml_type(a, v, &t)) return 1;
            else if (t != GGML_TYPE_F32 && t != GGML_TYPE_F16) return fail("--kv '%s': expected default, f32 or f16", v);
            else o->kv = (int)t;
        } else return fail("unknown option '%s'", a);
        i += takes;
    }
    g_verbose = o->verbose;
    return 0;
}

/* ------------------------------------------------------------------------- the backend */

static int load_backends(const char *dir) {
    if (!dir || !*dir) return fail("no backend directory: pass --backends DIR (the package's bins/linux-x64)");
    ggml_backend_load_all_from_path(dir);
    if (!ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU))
        return fail("%s: no libggml-cpu-*.so there loads on this CPU (llama.cpp's CPU backend is missing)", dir);
    llama_backend_init();
    return 0;
}

/* the compiled-in features of the CPU variant registered, e.g. "AVX2 AVX512 AVX512_VNNI" */
static void cpu_features(char *buf, size_t cap) {
    buf[0] = 0;
    ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_reg_t reg = dev ? ggml_backend_dev_backend_reg(dev) : NULL;
    ggml_backend_get_features_t get =
        reg ? (ggml_backend_get_features_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features") : NULL;
    size_t n = 0;
    for (struct ggml_backend_feature *f = get ? get(reg) : NULL; f && f->name; f++) {
        if (strcmp(f->value, "1") != 0) continue; /* the others are counts and sizes */
        int w = snprintf(buf + n, cap - n, "%s%s", n ? " " : "", f->name);
        if (w < 0 || (size_t)w >= cap - n) break;
        n += (size_t)w;
    }
}

static struct llama_model *load_model(const char *path, int vocab_only) {
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = vocab_only != 0;
    struct llama_model *m = llama_model_load_from_file(path, mp);
    if (!m) fail("%s: llama.cpp could not load it (its messages above)", path);
    return m;
}

static struct llama_context *make_context(struct llama_model *m, const opts *o, int n_ctx, int n_batch, int n_ubatch) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_batch;
    if (n_ubatch > 0) cp.n_ubatch = (uint32_t)n_ubatch;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->threads;
    cp.flash_attn_type = o->flash;
    if (o->flash != LLAMA_FLASH_ATTN_TYPE_AUTO) /* auto is resolved (and logged) when the context is made */
        snprintf(g_flash_resolved, sizeof g_flash_resolved, "%s", o->flash == LLAMA_FLASH_ATTN_TYPE_ENABLED ? "enabled" : "disabled");
    if (o->kv >= 0) cp.type_k = cp.type_v = (enum ggml_type)o->kv;
    cp.no_perf = true;
    struct llama_context *c = llama_init_from_model(m, cp);
    if (!c) fail("llama.cpp could not create a context of %d positions (its messages above)", n_ctx);
    return c;
}

/* ------------------------------------------------------------------------- token ids */

static int read_ids(const char *path, int n_vocab, int **ids, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) return fail("%s: cannot open: %s", path, strerror(errno));
    int cap = 256, count = 0, *v = malloc((size_t)cap * sizeof *v), rc = 0;
    long x;
    if (!v) rc = fail("out of memory");
    while (rc == 0 && fscanf(f, "%ld", &x) == 1) {
        if (x < 0 || x >= n_vocab) rc = fail("%s: token id %ld is outside the vocabulary [0, %d)", path, x, n_vocab);
        else if (count == cap) {
            int *g = cap < INT_MAX / 2 ? realloc(v, (size_t)cap * 2 * sizeof *v) : NULL;
            if (!g) rc = fail("out of memory");
            else v = g, cap *= 2;
        }
        if (rc == 0) v[count++] = (int)x;
    }
    if (rc == 0 && !feof(f)) rc = fail("%s: not a list of whitespace-separated token ids", path);
    if (rc == 0 && ferror(f)) rc = fail("%s: read error", path);
    if (rc == 0 && count == 0) rc = fail("%s: no token ids", path);
    fclose(f);
    if (rc) free(v);
    else *ids = v, *n = count;
    return rc;
}

/* one sequence (id 0) at positions pos0.., outputs where want(i) */
static void fill_batch(struct llama_batch *b, const int *ids, int n, int pos0, int all_outputs) {
    b->n_tokens = n;
    for (int i = 0; i < n; i++) {
        b->token[i] = ids[i];
        b->pos[i] = pos0 + i;
        b->n_seq_id[i] = 1;
        b->seq_id[i][0] = 0;
        b->logits[i] = (int8_t)(all_outputs || i == n - 1);
    }
}

/* ------------------------------------------------------------------------- modes */

static int mode_info(const opts *o) {
    DIR *d = opendir(o->backends);
    if (!d) return fail("%s: cannot open: %s", o->backends, strerror(errno));
    printf("llama.cpp commit %s, %s\n", LLAMA_REF_COMMIT, llama_print_system_info());
    /* each variant's score, as ggml_backend_load_best computes it: the highest is the one loaded */
    char best[256] = "none";
    int best_score = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "libggml-cpu-", 12) != 0 || len < 4 || strcmp(e->d_name + len - 3, ".so") != 0) continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", o->backends, e->d_name) >= (int)sizeof path) continue;
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        int (*score)(void) = h ? (int (*)(void))(uintptr_t)dlsym(h, "ggml_backend_score") : NULL;
        const int sc = score ? score() : -1;
        printf("variant %-32s score %d\n", e->d_name, sc);
        if (sc > best_score) best_score = sc, snprintf(best, sizeof best, "%s", e->d_name);
        if (h) dlclose(h);
    }
    closedir(d);
    char feats[512];
    cpu_features(feats, sizeof feats);
    printf("registered CPU backend: %s (the highest score), compiled for %s\n", best, feats);
    if (o->n_pos < 1) return 0;
    struct llama_model *m = load_model(o->pos[0], 0);
    if (!m) return 1;
    char desc[256];
    llama_model_desc(m, desc, sizeof desc);
    printf("%s: %s, %llu parameters, n_embd %d, n_layer %d, n_head %d, n_head_kv %d, n_vocab %d, n_ctx_train %d\n",
           o->pos[0], desc, (unsigned long long)llama_model_n_params(m), llama_model_n_embd(m), llama_model_n_layer(m),
           llama_model_n_head(m), llama_model_n_head_kv(m), llama_vocab_n_tokens(llama_model_get_vocab(m)),
           llama_model_n_ctx_train(m));
    /* the special tokens as llama.cpp resolved them (its defaults fill what the file leaves out)
     * and the ids that end a generation */
    const struct llama_vocab *v = llama_model_get_vocab(m);
    printf("vocabulary: bos %d, eos %d, add_bos %d, add_eos %d, end-of-generation ids:", llama_vocab_bos(v),
           llama_vocab_eos(v), llama_vocab_get_add_bos(v), llama_vocab_get_add_eos(v));
    for (int t = 0, n = 0, V = llama_vocab_n_tokens(v); t < V && n < 16; t++)
        if (llama_vocab_is_eog(v, t)) printf(" %d '%s'", t, llama_vocab_get_text(v, t)), n++;
    printf("\n");
    llama_model_free(m);
    return 0;
}

static int write_logits(const char *path, int rows, int vocab, int first, struct llama_context *c, int n_out) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return fail("%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return fail("%s: cannot create: %s", tmp, strerror(errno));
    int32_t head[3] = {rows, vocab, first};
    int rc = fwrite(LOGITS_MAGIC, 1, 4, f) == 4 && fwrite(head, sizeof head, 1, f) == 1 ? 0 : -1;
    for (int r = 0; rc == 0 && r < rows; r++) {
        const float *l = llama_get_logits_ith(c, n_out - rows + r);
        if (!l) rc = fail("llama.cpp returned no logits for output %d", n_out - rows + r);
        else if (fwrite(l, sizeof *l, (size_t)vocab, f) != (size_t)vocab) rc = -1;
    }
    if (fclose(f) != 0 && rc == 0) rc = -1;
    if (rc == -1) rc = fail("%s: write failed: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0) rc = fail("%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (rc) remove(tmp);
    return rc;
}

static int mode_logits(const opts *o) {
    if (o->n_pos != 1 || !o->ids || !o->out) return fail("usage: llama_ref logits MODEL.gguf --ids IDS.txt --out OUT.bin [--last]");
    struct llama_model *m = load_model(o->pos[0], 0);
    if (!m) return 1;
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(m));
    int *ids = NULL, n = 0, rc = read_ids(o->ids, V, &ids, &n);
    struct llama_context *c = NULL;
    struct llama_batch b = {0};
    /* the whole sequence in one ubatch: one pass, every position's logits */
    if (rc == 0 && !(c = make_context(m, o, n, n, n))) rc = 1;
    if (rc == 0) {
        b = llama_batch_init(n, 0, 1);
        if (!b.token) rc = fail("out of memory");
    }
    if (rc == 0) {
        fill_batch(&b, ids, n, 0, !o->last);
        int r = llama_decode(c, b);
        if (r != 0) rc = fail("llama_decode of %d tokens failed: %d", n, r);
    }
    if (rc == 0) rc = write_logits(o->out, o->last ? 1 : n, V, o->last ? n - 1 : 0, c, o->last ? 1 : n);
    if (b.token) llama_batch_free(b);
    if (c) llama_free(c);
    llama_model_free(m);
    free(ids);
    if (rc == 0) fprintf(stderr, "llama_ref: flash attention %s\n", g_flash_resolved);
    return rc;
}

static int mode_tokenize(const opts *o) {
    if (o->n_pos != 1 || !o->text)
        return fail("usage: llama_ref tokenize MODEL.gguf --text FILE [--add-special] [--parse-special]");
    FILE *f = fopen(o->text, "rb");
    if (!f) return fail("%s: cannot open: %s", o->text, strerror(errno));
    char *text = NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && len < INT_MAX / 2 && fseek(f, 0, SEEK_SET) == 0)
        text = malloc((size_t)len + 1);
    int rc = text && fread(text, 1, (size_t)len, f) == (size_t)len ? 0 : fail("%s: cannot read it", o->text);
    fclose(f);
    struct llama_model *m = rc == 0 ? load_model(o->pos[0], 1) : NULL;
    if (rc == 0 && !m) rc = 1;
    int32_t *tok = NULL, n = 0;
    if (rc == 0) {
        const struct llama_vocab *v = llama_model_get_vocab(m);
        int cap = (int)len + 8; /* a byte-level BPE gives at most one token a byte (+ specials) */
        tok = malloc((size_t)cap * sizeof *tok);
        if (!tok) rc = fail("out of memory");
        else if ((n = llama_tokenize(v, text, (int32_t)len, tok, cap, o->add_special != 0, o->parse_special != 0)) < 0)
            rc = fail("%s: llama_tokenize failed (%d)", o->text, n);
    }
    for (int i = 0; rc == 0 && i < n; i++) printf("%s%d", i ? " " : "", tok[i]);
    if (rc == 0) putchar('\n');
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) rc = fail("stdout: write failed");
    free(tok);
    free(text);
    if (m) llama_model_free(m);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double s[1000];
    memcpy(s, v, (size_t)n * sizeof *v);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static int argmax(const float *l, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

/* prompt: the first N ids in one llama_decode (only the last position's logits, as a prompt
 * before generating), from an empty cache. decode: P ids prefilled (not timed), then M steps of
 * one token each, the argmax of the previous logits fed back, at positions P..P+M−1. */
static int run_prompt(struct llama_context *c, struct llama_batch *b, const int *ids, int n, double *s) {
    llama_memory_clear(llama_get_memory(c), true);
    fill_batch(b, ids, n, 0, 0);
    const double t0 = now_s();
    int r = llama_decode(c, *b);
    llama_synchronize(c);
    *s = now_s() - t0;
    return r == 0 ? 0 : fail("llama_decode of a %d-token prompt failed: %d", n, r);
}

static int run_decode(struct llama_context *c, struct llama_batch *b, const int *ids, int at, int steps, int V,
                      double *s) {
    llama_memory_clear(llama_get_memory(c), true);
    fill_batch(b, ids, at, 0, 0);
    int r = llama_decode(c, *b);
    if (r != 0) return fail("llama_decode of the %d tokens before decoding failed: %d", at, r);
    const float *l = llama_get_logits_ith(c, -1);
    int token = l ? argmax(l, V) : 0;
    const double t0 = now_s();
    for (int k = 0; k < steps; k++) {
        fill_batch(b, &token, 1, at + k, 0);
        if ((r = llama_decode(c, *b)) != 0) return fail("llama_decode at position %d failed: %d", at + k, r);
        if (!(l = llama_get_logits_ith(c, -1))) return fail("no logits at position %d", at + k);
        token = argmax(l, V);
    }
    *s = now_s() - t0;
    return 0;
}

static void print_series(const char *key, const double *tps, int n) {
    printf("\"%s\":{\"tokens_per_s\":[", key);
    for (int i = 0; i < n; i++) printf("%s%.6g", i ? "," : "", tps[i]);
    printf("],\"median\":%.6g}", median(tps, n));
}

static int mode_bench(opts *o) {
    if (o->n_pos != 1) return fail("usage: llama_ref bench MODEL.gguf [--prompt 128,1024] [--decode 64 --decode-at 64] [--reps 3] [--ids IDS.txt]");
    if (o->n_prompts == 0) o->prompts[o->n_prompts++] = 128;
    struct llama_model *m = load_model(o->pos[0], 0);
    if (!m) return 1;
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(m));
    int longest = o->decode_at, n_ids = 0, *ids = NULL, rc = 0;
    for (int i = 0; i < o->n_prompts; i++)
        if (o->prompts[i] > longest) longest = o->prompts[i];
    if (o->ids) rc = read_ids(o->ids, V, &ids, &n_ids);
    else if (!(ids = malloc((size_t)longest * sizeof *ids))) rc = fail("out of memory");
    else {
        uint64_t x = 0x9E3779B97F4A7C15u; /* a fixed stream of ids when none are given */
        for (n_ids = 0; n_ids < longest; n_ids++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            ids[n_ids] = (int)((x >> 33) % (uint64_t)V);
        }
    }
    if (rc == 0 && n_ids < longest) rc = fail("%s: %d ids, the longest prompt needs %d", o->ids, n_ids, longest);
    struct llama_context *c = NULL;
    struct llama_batch b = {0};
    /* as llama-bench: n_batch covers the longest prompt, n_ubatch stays llama.cpp's default */
    if (rc == 0 && !(c = make_context(m, o, longest + o->decode + 1, longest, 0))) rc = 1;
    if (rc == 0) {
        b = llama_batch_init(longest, 0, 1);
        if (!b.token) rc = fail("out of memory");
    }
    double *tps = calloc((size_t)(o->n_prompts + 1) * (size_t)o->reps, sizeof *tps), s = 0;
    if (rc == 0 && !tps) rc = fail("out of memory");
    if (rc == 0 && o->warmup) { /* first-use costs (buffers, page faults), as llama-bench's warm-up run */
        rc = run_prompt(c, &b, ids, longest, &s);
        if (rc == 0 && o->decode > 0) rc = run_decode(c, &b, ids, o->decode_at, o->decode < 4 ? o->decode : 4, V, &s);
    }
    for (int r = 0; rc == 0 && r < o->reps; r++) {
        for (int i = 0; rc == 0 && i < o->n_prompts; i++) {
            rc = run_prompt(c, &b, ids, o->prompts[i], &s);
            tps[i * o->reps + r] = o->prompts[i] / s;
        }
        if (rc == 0 && o->decode > 0) {
            rc = run_decode(c, &b, ids, o->decode_at, o->decode, V, &s);
            tps[o->n_prompts * o->reps + r] = o->decode / s;
        }
    }
    if (rc == 0) {
        char feats[512];
        cpu_features(feats, sizeof feats);
        printf("{\"engine\":\"llama.cpp\",\"commit\":\"%s\",\"model\":\"%s\",\"threads\":%d,\"flash_attn\":\"%s\","
               "\"flash_attn_resolved\":\"%s\",\"kv_cache\":\"%s\",\"cpu_backend\":\"%s\",\"reps\":%d,\"prompt\":{",
               LLAMA_REF_COMMIT, o->pos[0], o->threads, llama_flash_attn_type_name(o->flash), g_flash_resolved,
               o->kv < 0 ? "f16 (default)" : ggml_type_name((enum ggml_type)o->kv), feats, o->reps);
        for (int i = 0; i < o->n_prompts; i++) {
            char key[16];
            snprintf(key, sizeof key, "%d", o->prompts[i]);
            if (i) putchar(',');
            print_series(key, tps + (size_t)i * o->reps, o->reps);
        }
        printf("},\"decode_at\":%d,\"decode_tokens\":%d", o->decode_at, o->decode);
        if (o->decode > 0) {
            putchar(',');
            print_series("decode", tps + (size_t)o->n_prompts * o->reps, o->reps);
        }
        printf("}\n");
        if (fflush(stdout) != 0) rc = fail("stdout: write failed");
    }
    free(tps);
    if (b.token) llama_batch_free(b);
    if (c) llama_free(c);
    llama_model_free(m);
    free(ids);
    return rc;
}

static int mode_quantize(const opts *o) {
    if (o->n_pos != 2 || !o->type) return fail("usage: llama_ref quantize IN.gguf OUT.gguf --type q8_0|q4_0|f16 [--pure] [--output-type T] [--embd-type T]");
    enum ggml_type t;
    if (parse_ggml_type("--type", o->type, &t)) return 1;
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.nthread = o->threads;
    qp.ftype = t == GGML_TYPE_Q8_0   ? LLAMA_FTYPE_MOSTLY_Q8_0
               : t == GGML_TYPE_Q4_0 ? LLAMA_FTYPE_MOSTLY_Q4_0
               : t == GGML_TYPE_F16  ? LLAMA_FTYPE_MOSTLY_F16
                                     : LLAMA_FTYPE_ALL_F32;
    qp.pure = o->pure != 0;
    if (o->output_type && parse_ggml_type("--output-type", o->output_type, &qp.output_tensor_type)) return 1;
    if (o->embd_type && parse_ggml_type("--embd-type", o->embd_type, &qp.token_embedding_type)) return 1;
    if (llama_model_quantize(o->pos[0], o->pos[1], &qp) != 0)
        return fail("%s: llama_model_quantize to %s failed (its messages above)", o->pos[0], o->type);
    return 0;
}

/* GGML's RoPE (LLAMA_ROPE_TYPE_NORM) rotates adjacent pairs (2i, 2i+1) of a head, Hugging Face's
 * rotate_half pairs (i, i + hd/2): a converter reorders each head's q and k rows so the two agree.
 * This writes the rows back in the order before that reordering, new row j = old row 2j (j < hd/2)
 * and old row 2(j − hd/2) + 1 after, which is what an exporter that forgot it would have written.
 * Rows are whole blocks of any type, so quantised files are mutated the same way. */
static int permute_heads(struct ggml_tensor *t, int heads, const char *name) {
    const int64_t rows = t->ne[1];
    if (heads <= 0 || rows % heads || (rows / heads) % 2)
        return fail("%s: %lld rows do not split into %d heads of even width", name, (long long)rows, heads);
    const int64_t hd = rows / heads;
    const size_t rb = ggml_row_size(t->type, t->ne[0]);
    char *tmp = malloc((size_t)hd * rb);
    if (!tmp) return fail("out of memory");
    for (int64_t h = 0; h < heads; h++) {
        char *head = (char *)t->data + (size_t)(h * hd) * rb;
        memcpy(tmp, head, (size_t)hd * rb);
        for (int64_t j = 0; j < hd; j++) {
            const int64_t src = j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1;
            memcpy(head + (size_t)j * rb, tmp + (size_t)src * rb, rb);
        }
    }
    free(tmp);
    return 0;
}

static int get_u32(const struct gguf_context *g, const char *arch, const char *suffix, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t k = gguf_find_key(g, key);
    if (k < 0) return -1;
    enum gguf_type ty = gguf_get_kv_type(g, k);
    if (ty == GGUF_TYPE_UINT32) *out = (int)gguf_get_val_u32(g, k);
    else if (ty == GGUF_TYPE_INT32) *out = gguf_get_val_i32(g, k);
    else return -1;
    return 0;
}

/* Removes the keys of g that start (keep 0) or do not start (keep 1) with "tokenizer.". */
static void remove_keys(struct gguf_context *g, int keep) {
    for (int64_t k = gguf_get_n_kv(g) - 1; k >= 0; k--) {
        char key[256];
        snprintf(key, sizeof key, "%s", gguf_get_key(g, k));
        if ((strncmp(key, "tokenizer.", 10) == 0) != keep) gguf_remove_key(g, key);
    }
}

/* out's tokenizer.* keys replaced by those of the file from. */
static int graft_vocab(struct gguf_context *out, const char *from) {
    struct gguf_init_params ip = {.no_alloc = true, .ctx = NULL};
    struct gguf_context *v = gguf_init_from_file(from, ip), *keys = v ? gguf_init_empty() : NULL;
    if (!v) return fail("%s: not a GGUF file gguf_init_from_file reads", from);
    if (!keys) {
        gguf_free(v);
        return fail("out of memory");
    }
    gguf_set_kv(keys, v);
    remove_keys(keys, 1);
    remove_keys(out, 0);
    gguf_set_kv(out, keys);
    gguf_free(keys);
    gguf_free(v);
    return 0;
}

/* tokenizer.ggml.scores (F32) in another order: -id (a SentencePiece vocabulary converted in id
 * order: its merges ranked by id) or the file's negated (the worst merges first); or tied: all
 * -1000 (tie) or the file's rounded down to a multiple of 4 (coarse). */
static int rewrite_scores(struct gguf_context *out, const char *path, const char *how) {
    const int64_t k = gguf_find_key(out, "tokenizer.ggml.scores");
    if (k < 0 || gguf_get_kv_type(out, k) != GGUF_TYPE_ARRAY || gguf_get_arr_type(out, k) != GGUF_TYPE_FLOAT32)
        return fail("%s: no F32 array tokenizer.ggml.scores", path);
    const size_t n = gguf_get_arr_n(out, k);
    const float *old = gguf_get_arr_data(out, k);
    float *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return fail("out of memory");
    for (size_t i = 0; i < n; i++)
        v[i] = !strcmp(how, "id")       ? -(float)i
               : !strcmp(how, "negate") ? -old[i]
               : !strcmp(how, "tie")    ? -1000.0f
                                        : 4.0f * floorf(old[i] / 4.0f);
    gguf_set_arr_data(out, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v, n);
    free(v);
    return 0;
}

static int mode_rewrite(const opts *o) {
    if (o->n_pos != 2 || (!o->qk_layout && !o->set_str && !o->set_u32 && !o->scores && !o->vocab_from))
        return fail("usage: llama_ref rewrite IN.gguf OUT.gguf [--qk-layout] [--set-str KEY=VALUE] [--set-u32 KEY=N] "
                    "[--scores id|negate|tie|coarse] [--vocab-from V.gguf]");
    const char *eq = o->set_str ? strchr(o->set_str, '=') : NULL;
    if (o->set_str && (!eq || eq == o->set_str)) return fail("--set-str '%s': expected KEY=VALUE", o->set_str);
    /* --set-u32 adds the key (or sets it): e.g. a token id key the file does not have */
    const char *eq_u = o->set_u32 ? strchr(o->set_u32, '=') : NULL;
    char *end_u = NULL;
    const unsigned long val_u = eq_u ? strtoul(eq_u + 1, &end_u, 10) : 0;
    if (o->set_u32 && (!eq_u || eq_u == o->set_u32 || end_u == eq_u + 1 || *end_u || val_u > 0xFFFFFFFFul))
        return fail("--set-u32 '%s': expected KEY=N", o->set_u32);
    struct ggml_context *data = NULL;
    struct gguf_init_params ip = {.no_alloc = false, .ctx = &data};
    struct gguf_context *g = gguf_init_from_file(o->pos[0], ip), *out = NULL;
    if (!g) return fail("%s: not a GGUF file gguf_init_from_file reads", o->pos[0]);
    int rc = 0, n_head = 0, n_head_kv = 0, done = 0;
    int64_t ka = gguf_find_key(g, "general.architecture");
    const char *arch = ka >= 0 && gguf_get_kv_type(g, ka) == GGUF_TYPE_STRING ? gguf_get_val_str(g, ka) : NULL;
    if (!arch) rc = fail("%s: no general.architecture", o->pos[0]);
    else if (get_u32(g, arch, "attention.head_count", &n_head) != 0) rc = fail("%s: no %s.attention.head_count", o->pos[0], arch);
    else if (get_u32(g, arch, "attention.head_count_kv", &n_head_kv) != 0) n_head_kv = n_head;
    /* the same metadata, and the tensors in the same order from the loaded data (a copy the writer
     * reads through the tensors' data pointers, as llama.cpp's gguf-split builds its output) */
    if (rc == 0 && !(out = gguf_init_empty())) rc = fail("out of memory");
    if (rc == 0) gguf_set_kv(out, g);
    if (rc == 0 && eq) {
        char key[256];
        if ((size_t)(eq - o->set_str) >= sizeof key) rc = fail("--set-str: key too long");
        else {
            snprintf(key, sizeof key, "%.*s", (int)(eq - o->set_str), o->set_str);
            int64_t k = gguf_find_key(out, key);
            if (k < 0 || gguf_get_kv_type(out, k) != GGUF_TYPE_STRING) rc = fail("%s: no string key %s", o->pos[0], key);
            else gguf_set_val_str(out, key, eq + 1);
        }
    }
    if (rc == 0 && eq_u) {
        char key[256];
        if ((size_t)(eq_u - o->set_u32) >= sizeof key) rc = fail("--set-u32: key too long");
        else {
            snprintf(key, sizeof key, "%.*s", (int)(eq_u - o->set_u32), o->set_u32);
            gguf_set_val_u32(out, key, (uint32_t)val_u);
        }
    }
    if (rc == 0 && o->vocab_from) rc = graft_vocab(out, o->vocab_from);
    if (rc == 0 && o->scores) rc = rewrite_scores(out, o->pos[0], o->scores);
    for (int64_t i = 0; rc == 0 && i < gguf_get_n_tensors(g); i++) {
        const char *name = gguf_get_tensor_name(g, i);
        struct ggml_tensor *t = ggml_get_tensor(data, name);
        if (!t) {
            rc = fail("%s: tensor %s has no data", o->pos[0], name);
            break;
        }
        const char *dot = strchr(name, '.') ? strchr(strchr(name, '.') + 1, '.') : NULL;
        const int blk = o->qk_layout && strncmp(name, "blk.", 4) == 0 && dot;
        if (blk && strcmp(dot, ".attn_q.weight") == 0) rc = permute_heads(t, n_head, name), done++;
        else if (blk && strcmp(dot, ".attn_k.weight") == 0) rc = permute_heads(t, n_head_kv, name), done++;
        if (rc == 0) gguf_add_tensor(out, t);
    }
    if (rc == 0 && o->qk_layout && done == 0) rc = fail("%s: no blk.N.attn_q.weight / attn_k.weight tensors", o->pos[0]);
    char tmp[PATH_MAX];
    if (rc == 0 && snprintf(tmp, sizeof tmp, "%s.tmp", o->pos[1]) >= (int)sizeof tmp) rc = fail("%s: path too long", o->pos[1]);
    if (rc == 0 && !gguf_write_to_file(out, tmp, false)) rc = fail("%s: gguf_write_to_file failed", tmp);
    if (rc == 0 && rename(tmp, o->pos[1]) != 0) rc = fail("%s: cannot rename to %s: %s", tmp, o->pos[1], strerror(errno));
    if (rc == 0) fprintf(stderr, "llama_ref: %s written, %d q/k tensors reordered%s%s%s%s%s%s%s%s\n", o->pos[1], done,
                         eq ? ", " : "", eq ? o->set_str : "", eq_u ? ", " : "", eq_u ? o->set_u32 : "",
                         o->scores ? ", scores " : "", o->scores ? o->scores : "",
                         o->vocab_from ? ", the vocabulary of " : "", o->vocab_from ? o->vocab_from : "");
    if (out) gguf_free(out);
    gguf_free(g);
    if (data) ggml_free(data);
    return rc;
}

int main(int argc, char **argv) {
    opts o;
    if (parse_args(argc, argv, &o) != 0) return 2;
    llama_log_set(on_log, NULL); /* ggml's messages too */
    if (strcmp(o.mode, "rewrite") == 0) return mode_rewrite(&o); /* gguf alone, no backend */
    if (load_backends(o.backends) != 0) return 1;
    int rc;
    if (strcmp(o.mode, "info") == 0) rc = mode_info(&o);
    else if (strcmp(o.mode, "logits") == 0) rc = mode_logits(&o);
    else if (strcmp(o.mode, "tokenize") == 0) rc = mode_tokenize(&o);
    else if (strcmp(o.mode, "bench") == 0) rc = mode_bench(&o);
    else if (strcmp(o.mode, "quantize") == 0) rc = mode_quantize(&o);
    else rc = fail("unknown mode '%s': info, logits, tokenize, bench, quantize or rewrite", o.mode);
    llama_backend_free();
    return rc;
}
