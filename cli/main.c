/* main.c — `difftrans COMMAND ...`: dispatch and the helpers every command shares. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *summary;
} commands[] = {
    {"train", cmd_train, "train a DIFF Transformer or baseline on a text file"},
    {"generate", cmd_generate, "generate text from a checkpoint (KV-cache decoding)"},
    {"forward", cmd_forward, "logits, loss and gradients of a batch, written as safetensors"},
    {"eval", cmd_eval, "loss, perplexity and bits per byte of a checkpoint on a text file"},
    {"init", cmd_init, "write a freshly initialised checkpoint from a preset or config"},
    {"info", cmd_info, "print a checkpoint's config, parameter count and λ per layer"},
    {"export", cmd_export, "rewrite a checkpoint: for Hugging Face (--hf), or as GGUF for llama.cpp (--gguf)"},
    {"bench", cmd_bench, "training, prefill and decode throughput against the machine's peak"},
    {"needle", cmd_needle, "multi-needle retrieval: generate the data set, score a checkpoint on it"},
    {"analyze", cmd_analyze, "the paper's analyses: outliers, quantize, allocation, training, icl, scaling"},
    {"quantize", cmd_quantize, "post-training quantisation: q8_0, q4_0 or w8a8 (calibrated) checkpoints"},
    {"compare", cmd_compare, "train DIFF and its matched baseline, analyse both, write REPORT.md"},
    {"study", cmd_study, "the scaling study: DIFF against its baseline at several sizes and seeds, REPORT.md"},
    {"tokenize", cmd_tokenize, "tokenise text files into a token dataset (shards) for training"},
    {"tokenizer", cmd_tokenizer, "Hugging Face tokenizer.json: encode, decode, info, train a BPE"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server with continuous batching, and a page"},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "difftrans — the Differential Transformer (Ye et al., ICLR 2025) and a matched baseline, in C\n\n"
               "usage: difftrans COMMAND [options]   (difftrans COMMAND --help for each)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\npresets: %s\n", dt_config_preset_names());
    fprintf(f, "\noutputs (--out, --json, OUT_DIR, ...): written under a temporary name and renamed; missing\n"
               "directories on their path are created, like mkdir -p (status 3 when one cannot be)\n");
    fprintf(f, "\nexit status (every command):\n"
               "  0  success\n"
               "  1  bad usage: an unknown option, a bad argument or value\n"
               "  2  a file that is not what it should be: corrupt, truncated, or lying (checkpoint,\n"
               "     config.json, tokenizer.json, token dataset, training state, ...)\n"
               "  3  the system refused: a missing or unreadable file, a failed write or rename, a full disk,\n"
               "     an output directory that cannot be made (a file in its path)\n"
               "  4  out of memory\n"
               "  5  valid but not supported here (a tokenizer component, an HF option, a kernel path)\n"
               "  6  training diverged (a non-finite loss, gradient, λ or validation loss)\n"
               "  7  a data-parallel job ended because a rank stopped responding (MPI_Abort)\n"
               "  9  stopped by a signal before the work was done (`study`, `compare`: the same command resumes it)\n");
}

/* The exit status of the first failure reported with a code (cli_fail, cli_error_code); 0 while
 * there is none, and a failing command then exits 1. The CLI is one command per process. */
static int exit_status;

static int status_of(dt_errcode code) {
    return (code >= DT_ERR_INVALID && code <= DT_ERR_DIVERGED) || code == DT_ERR_INTERRUPTED
               ? (int)code
               : 1;
}

static int record(dt_errcode code) {
    if (!exit_status) exit_status = status_of(code);
    return status_of(code);
}

/* OpenBLAS picks its kernels once, when it is loaded before main(), from the CPU models it knows:
 * Debian 12's (0.3.21) does not know Intel's Sapphire / Emerald Rapids and falls back to SSE3
 * ("Prescott"), whose sgemm ran 4.8x slower than its AVX-512 kernels on an Emerald Rapids Xeon
 * (docs/PERFORMANCE.md). It reads OPENBLAS_CORETYPE only at that load, so the CLI then runs itself
 * again with the variable naming the AVX-512 core. A core the user names is never replaced;
 * BLAS_CORE_MARK says the variable is the CLI's own (for the reports, and against a second run). */
#define BLAS_CORE_MARK "DT_BLAS_CORE_CHOSEN"

static void rerun_on_wide_blas_core(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || getenv(BLAS_CORE_MARK)) return;
    dt_system_info si;
    dt_system(&si);
    if (!si.blas_core_narrow || !si.blas_core_wide[0]) return;
    if (setenv("OPENBLAS_CORETYPE", si.blas_core_wide, 1) == 0 && setenv(BLAS_CORE_MARK, si.blas_core_wide, 1) == 0) {
        fflush(NULL);
        execv("/proc/self/exe", argv);
    }
    /* no /proc, or no memory for the environment: run on with OpenBLAS's own core (info says so) */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(BLAS_CORE_MARK);
}

int cli_blas_core_chosen(void) {
    const char *mark = getenv(BLAS_CORE_MARK), *core = getenv("OPENBLAS_CORETYPE");
    return mark && core && strcmp(mark, core) == 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("difftrans 0.1.0\n");
        return 0;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            rerun_on_wide_blas_core(argv);
            /* a forced kernel path the CPU cannot run is an error, before any work */
            dt_error err;
            if (dt_system_check(&err) != 0) return cli_fail(argv[1], &err);
            cli_default_stop_signals();
            /* a command returns nonzero on failure (1 or -1 from its helpers): the status is the
             * code of the failure it reported */
            if (commands[i].run(argc - 1, argv + 1) == 0) return 0;
            return exit_status ? exit_status : 1;
        }
    fprintf(stderr, "difftrans: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 1;
}

void cli_print_system(FILE *f, const char *indent) {
    dt_system_info si;
    dt_system(&si);
    fprintf(f, "%scpu: %s\n", indent, si.cpu[0] ? si.cpu : "(no brand string)");
    fprintf(f, "%skernels: %s (best this CPU supports: %s%s)\n", indent, si.path, si.best,
            getenv("DT_ISA") && *getenv("DT_ISA") ? "; forced by DT_ISA" : "");
    fprintf(f, "%sfeatures: avx2 %s, fma %s, avxvnni %s, avx512f %s, avx512bw %s, avx512vl %s, avx512dq %s, "
               "avx512vnni %s, avx512bf16 %s\n",
            indent, si.avx2 ? "yes" : "no", si.fma ? "yes" : "no", si.avxvnni ? "yes" : "no",
            si.avx512f ? "yes" : "no", si.avx512bw ? "yes" : "no", si.avx512vl ? "yes" : "no",
            si.avx512dq ? "yes" : "no", si.avx512vnni ? "yes" : "no", si.avx512bf16 ? "yes" : "no");
    fprintf(f, "%smatrix products: OpenBLAS, core %s (%s); %d threads\n", indent,
            si.blas_core[0] ? si.blas_core : "unknown",
            cli_blas_core_chosen() ? "chosen by difftrans: OpenBLAS's own choice had no AVX-512 kernels"
            : si.blas_core_env[0]  ? "set by OPENBLAS_CORETYPE"
                                   : "OpenBLAS's choice for this CPU",
            si.threads);
    if (si.blas_core_narrow && cli_blas_core_chosen() && strcasecmp(si.blas_core, si.blas_core_env) != 0)
        fprintf(f, "%snote: OpenBLAS did not take the core difftrans named (OPENBLAS_CORETYPE=%s): this OpenBLAS "
                   "runs no AVX-512 kernels here (see docs/PERFORMANCE.md)\n", indent, si.blas_core_env);
    else if (si.blas_core_narrow && si.blas_core_env[0])
        fprintf(f, "%snote: OPENBLAS_CORETYPE=%s keeps OpenBLAS off its AVX-512 kernels on this AVX-512 CPU; "
                   "unset it to let OpenBLAS (or difftrans) choose (see docs/PERFORMANCE.md)\n", indent,
                si.blas_core_env);
    else if (si.blas_core_narrow)
        fprintf(f, "%snote: this OpenBLAS does not use AVX-512 on this CPU; OPENBLAS_CORETYPE=%s in the "
                   "environment selects its AVX-512 kernels (see docs/PERFORMANCE.md)\n", indent, si.blas_core_wide);
}

static void report(const char *cmd, const char *fmt, va_list ap) {
    fprintf(stderr, "difftrans %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(cmd, fmt, ap);
    va_end(ap);
    return 1;
}

int cli_error_code(const char *cmd, dt_errcode code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(cmd, fmt, ap);
    va_end(ap);
    return record(code);
}

int cli_fail(const char *cmd, const dt_error *err) {
    if (err->msg[0]) fprintf(stderr, "difftrans %s: %s\n", cmd, err->msg);
    return record(err->code);
}

/* msg holds w with neither a letter, digit nor '_' on either side. */
static int names_word(const char *msg, const char *w) {
    const size_t n = strlen(w);
    for (const char *p = strstr(msg, w); p; p = strstr(p + 1, w)) {
        const int before = p > msg && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
        const int after = isalnum((unsigned char)p[n]) || p[n] == '_';
        if (!before && !after) return 1;
    }
    return 0;
}

/* All of a stream, byte-exact, NUL-terminated (*len does not count the NUL; the text may hold NULs).
 * -1 when out of memory or a read failed (ferror(fp) then tells which), nothing kept. */
int cli_read_all(FILE *fp, char **out, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    struct stat sb; /* a file: its size at once (the loop below still reads to the end) */
    if (fstat(fileno(fp), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 && (uint64_t)sb.st_size < SIZE_MAX / 2)
        cap = (size_t)sb.st_size + 1;
    char *buf = malloc(cap);
    if (!buf) return -1;
    for (;;) {
        if (dt_grow(&buf, &cap, n + 1, 1, 0) != 0) {
            free(buf);
            return -1;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, fp); /* room for the NUL stays */
        n += got;
        if (got == 0) break;
    }
    if (ferror(fp)) {
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

int cli_fail_flags(const char *cmd, const dt_error *err, const cli_flag *flags, int n) {
    char hint[512] = "";
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (!names_word(err->msg, flags[i].field) || strstr(hint, flags[i].flag)) continue;
        const int w = snprintf(hint + k, sizeof hint - k, "%s%s", k ? ", " : "", flags[i].flag);
        if (w < 0 || (size_t)w >= sizeof hint - k) break;
        k += (size_t)w;
    }
    if (k == 0) return cli_fail(cmd, err);
    fprintf(stderr, "difftrans %s: %s (%s)\n", cmd, err->msg, hint);
    return record(err->code);
}

int cli_bad_option(const char *cmd, int argc, char **argv) {
    const char *opt = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    return cli_error(cmd, "bad option or missing value near '%s' (see difftrans %s --help)", opt, cmd);
}

int parse_int(const char *cmd, const char *name, const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) return -(cli_error(cmd, "%s '%s': not an integer", name, s) != 0);
    if (v < lo || v > hi) return -(cli_error(cmd, "%s %ld: must be in %ld..%ld", name, v, lo, hi) != 0);
    *out = (int)v;
    return 0;
}

int parse_u64(const char *cmd, const char *name, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-')
        return -(cli_error(cmd, "%s '%s': not a non-negative integer", name, s) != 0);
    *out = v;
    return 0;
}

int parse_float(const char *cmd, const char *name, const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -(cli_error(cmd, "%s '%s': not a number", name, s) != 0);
    if (v < lo || v > hi) return -(cli_error(cmd, "%s %g: must be in [%g, %g]", name, v, lo, hi) != 0);
    *out = (float)v;
    return 0;
}

int cli_parse_arch(const char *cmd, const char *s, dt_arch *arch) {
    if (!strcmp(s, "diff") || !strcmp(s, "diffllama")) *arch = DT_ARCH_DIFF;
    else if (!strcmp(s, "transformer") || !strcmp(s, "llama")) *arch = DT_ARCH_LLAMA;
    else if (!strcmp(s, "v2") || !strcmp(s, "diff-v2") || !strcmp(s, "difftrans_v2")) *arch = DT_ARCH_DIFF_V2;
    else return -(cli_error(cmd, "--arch '%s': expected diff, transformer or v2", s) != 0);
    return 0;
}

int cli_apply_ablations(const char *cmd, const char *list, dt_config *cfg) {
    char buf[512];
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
        return -(cli_error(cmd, "--ablation: list too long") != 0);
    for (char *save = NULL, *name = strtok_r(buf, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        dt_error err;
        if (dt_config_ablation(cfg, cfg, name, &err) != 0)
            return -(cli_error_code(cmd, err.code, "--ablation: %s", err.msg) != 0);
    }
    return 0;
}

void cli_set_threads(int n) {
    if (n > 0) omp_set_num_threads(n);
}

int cli_parse_dtype(const char *cmd, const char *s, dt_dtype *out) {
    if (!strcasecmp(s, "f32") || !strcmp(s, "float32")) *out = DT_F32;
    else if (!strcasecmp(s, "bf16") || !strcmp(s, "bfloat16")) *out = DT_BF16;
    else if (!strcasecmp(s, "f16") || !strcmp(s, "float16")) *out = DT_F16;
    else return -(cli_error(cmd, "--dtype '%s': expected f32, bf16 or f16", s) != 0);
    return 0;
}

int cli_parse_kv_cache(const char *cmd, const char *s, dt_kv_dtype *out) {
    if (!strcmp(s, "f32")) *out = DT_KV_F32;
    else if (!strcmp(s, "f16")) *out = DT_KV_F16;
    else if (!strcmp(s, "int8")) *out = DT_KV_INT8;
    else return cli_error(cmd, "--kv-cache '%s': expected f32, f16 or int8", s);
    return 0;
}

int cli_parse_size(const char *cmd, const char *name, const char *s, uint64_t *out) {
    static const struct {
        const char *suffix;
        double scale;
    } units[] = {{"", 1},          {"B", 1},          {"KB", 1e3},         {"MB", 1e6},
                 {"GB", 1e9},      {"TB", 1e12},      {"KIB", 1024.0},     {"MIB", 1048576.0},
                 {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v <= 0 || *s == '-')
        return -(cli_error(cmd, "%s '%s': not a positive size (e.g. 500MB, 2GiB, 1000000)", name, s) != 0);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix) != 0) continue;
        double bytes = floor(v * units[i].scale);
        if (bytes < 1 || bytes > 1e18) return -(cli_error(cmd, "%s '%s': out of range", name, s) != 0);
        *out = (uint64_t)bytes;
        return 0;
    }
    return -(cli_error(cmd, "%s '%s': unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", name, s) != 0);
}

/* An output written there replaced the model: `forward M --output M/model.safetensors` and
 * `export M M/model.safetensors --gguf` destroyed the checkpoint and exited 0. */
const char *cli_model_file_at(const char *model, const char *output, char *name, size_t n) {
    static const char *const files[] = {"config.json", "generation_config.json", "model.safetensors",
                                        "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
                                        "difftrans_tokenizer.json"};
    struct stat out, m;
    if (stat(output, &out) != 0 || stat(model, &m) != 0) return NULL;
    if (!S_ISDIR(m.st_mode)) {
        snprintf(name, n, "%s", model);
        return m.st_dev == out.st_dev && m.st_ino == out.st_ino ? name : NULL;
    }
    DIR *d = opendir(model);
    if (!d) return NULL; /* the loader will say what is wrong */
    const char *hit = NULL;
    for (struct dirent *e; !hit && (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        int ours = len > 18 && !strncmp(e->d_name, "model-", 6) && !strcmp(e->d_name + len - 12, ".safetensors");
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) ours |= !strcmp(e->d_name, files[i]);
        char path[4200];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", model, e->d_name);
        if (ours && stat(path, &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino) {
            snprintf(name, n, "%s", path);
            hit = name;
        }
    }
    closedir(d);
    return hit;
}

int cli_check_new_model_dir(const char *cmd, const char *flag, const char *dir, int force, const char *what_else) {
    static const char *const marks[] = {"config.json", "model.safetensors", "model.safetensors.index.json"};
    struct stat sb;
    if (stat(dir, &sb) != 0) return 0; /* a new directory */
    if (!S_ISDIR(sb.st_mode)) return cli_error(cmd, "%s %s: exists and is not a directory", flag, dir);
    char path[4400];
    /* a run killed inside its first checkpoint's commit has it only in DIR/.next, which --resume finishes */
    int hit = dt_train_checkpoint(dir, path, sizeof path);
    for (size_t i = 0; !hit && i < sizeof marks / sizeof marks[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, marks[i]);
        hit = access(path, F_OK) == 0;
    }
    if (!hit) return 0;
    if (!force)
        return cli_error(cmd, "%s %s: already holds a checkpoint (%s); %s, or give --force to replace it", flag, dir,
                         path, what_else);
    dt_error err;
    if (dt_train_forget(dir, &err) != 0) return cli_fail(cmd, &err);
    fprintf(stderr, "difftrans %s: replacing the checkpoint in %s\n", cmd, dir);
    return 0;
}

/* A spec with a slash or ".json" in it is a config.json; anything else a preset's name. */
static int config_spec_is_file(const char *spec) { return strchr(spec, '/') || strstr(spec, ".json"); }

int cli_config(const char *cmd, const char *spec, dt_arch arch, dt_config *cfg) {
    dt_error err;
    int rc = config_spec_is_file(spec) ? dt_config_load(cfg, spec, &err) : dt_config_preset(cfg, spec, arch, &err);
    if (rc != 0) return -(cli_fail(cmd, &err) != 0);
    return 0;
}

int cli_config_arch(const char *cmd, const char *spec, const char *arch_flag, dt_arch arch, dt_config *cfg) {
    if (cli_config(cmd, spec, arch, cfg) != 0) return -1;
    /* a file's model_type says what the model is; an --arch that says otherwise is a mistake, and
     * taking either one silently would build a model the user did not ask for */
    if (arch_flag && config_spec_is_file(spec) && cfg->arch != arch)
        return -(cli_error(cmd, "--arch %s (model_type \"%s\") disagrees with %s, whose model_type is \"%s\"; drop --arch "
                           "or give a config of that architecture", arch_flag, dt_arch_name(arch), spec,
                           dt_arch_name(cfg->arch)) != 0);
    return 0;
}

void cli_print_param_counts(const dt_config *cfg) {
    dt_config other = dt_config_matched(cfg);
    const dt_config *diff = cfg->arch != DT_ARCH_LLAMA ? cfg : &other;
    const dt_config *base = cfg->arch != DT_ARCH_LLAMA ? &other : cfg;
    size_t nd = dt_config_param_count(diff), nb = dt_config_param_count(base);
    if (diff->arch == DT_ARCH_DIFF_V2)
        printf("parameters: DIFF V2 %zu (%d heads of width %d from %d query heads)", nd, diff->num_attention_heads / 2,
               diff->head_dim, diff->num_attention_heads);
    else
        printf("parameters: DIFF %zu (%d differential heads of width %d)", nd, diff->num_attention_heads / 2,
               2 * diff->head_dim);
    printf(" | matched Transformer %zu (%d heads of width %d) | difference %+lld\n", nb, base->num_attention_heads,
           base->head_dim, (long long)nd - (long long)nb);
}

/* argv joined with spaces; arguments with shell-special characters are single-quoted. */
void cli_join_command(char **argv, int argc, char *out, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(out, n, "difftrans");
    for (int i = 0; i < argc && k < n; i++) {
        const char *a = argv[i];
        int plain = *a != '\0';
        for (const char *p = a; *p; p++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=,:+@%", *p)) plain = 0;
        if (plain) {
            k += (size_t)snprintf(out + k, n - k, " %s", a);
            continue;
        }
        k += (size_t)snprintf(out + k, n - k, " '");
        for (const char *p = a; *p && k < n; p++)
            k += (size_t)(*p == '\'' ? snprintf(out + k, n - k, "'\\''") : snprintf(out + k, n - k, "%c", *p));
        if (k < n) k += (size_t)snprintf(out + k, n - k, "'");
    }
}

/* "a,b,c" → up to cap names of at most 31 bytes each, none empty */
int cli_split_list(const char *cmd, const char *flag, const char *list, char names[][32], int cap, int *n) {
    const char *p = list;
    *n = 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len >= 32) return -(cli_error(cmd, "%s '%s': empty or overlong name", flag, list) != 0);
        if (*n == cap) return -(cli_error(cmd, "%s '%s': at most %d names", flag, list, cap) != 0);
        memcpy(names[*n], p, len);
        names[(*n)++][len] = '\0';
        if (!comma) return 0;
        p = comma + 1;
    }
}

void cli_format_eta(double seconds, char *out, size_t n) {
    if (!isfinite(seconds) || seconds < 0) {
        snprintf(out, n, "?");
        return;
    }
    int s = (int)(seconds + 0.5);
    if (s >= 3600) snprintf(out, n, "%dh%02dm", s / 3600, s / 60 % 60);
    else snprintf(out, n, "%dm%02ds", s / 60, s % 60);
}

void cli_format_bytes(double bytes, char *out, size_t n) {
    if (bytes >= 1e6) snprintf(out, n, "%.2f MB", bytes / 1e6);
    else if (bytes >= 1e3) snprintf(out, n, "%.1f KB", bytes / 1e3);
    else snprintf(out, n, "%.0f bytes", bytes);
}

/* The flag the handler sets: one long-running command per process. */
static volatile int *stop_flag;

static void on_stop_signal(int sig) {
    (void)sig;
    if (stop_flag) *stop_flag = 1;
}

/* Every other command stopped by Ctrl-C or SIGTERM: the temporary files of the writes in progress
 * go (the outputs they would have become were never there), and the status is the README's 9. */
static void on_fatal_stop_signal(int sig) {
    (void)sig;
    dt_remove_temporaries();
    static const char msg[] = "\ndifftrans: stopped by a signal before the work was done\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) _exit(9);
    _exit(9);
}

void cli_catch_stop_signals(volatile int *flag) {
    *flag = 0;
    stop_flag = flag;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void cli_default_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_stop_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    stop_flag = NULL;
}
