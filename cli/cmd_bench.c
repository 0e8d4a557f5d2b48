/* cmd_bench.c — `difftrans bench`: training, prefill and decoding throughput of a randomly
 * initialised DIFF Transformer, its parameter-matched baseline and/or DIFF V2, set against the
 * machine's sgemm peak and memory read bandwidth measured in the same run. A readable table per
 * model and one JSON line per model on stdout (`grep '^{'`); progress on stderr.
 *
 * Process structure: this process never runs an OpenMP region (libgomp does not survive a fork
 * after one). The sgemm peak is measured once in a forked child; each model runs in its own forked
 * child, whose peak resident memory is that model's, and with decoding a read-bandwidth probe of
 * the model's weight bytes runs in a child just before and just after each model. Results come
 * back through pipes and every line of output is printed here. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans_bench.h"
#include "cli.h"

#define CMD "bench"

static void help(void) {
    dt_bench_sizes s;
    dt_bench_options d;
    dt_bench_sizes_default(&s);
    dt_bench_defaults(&d);
    printf("usage: difftrans bench [options]\n\n"
           "Builds a randomly initialised model of the given sizes and measures, each in a process of its own:\n"
           "  train    tokens/s of full training steps (forward with targets, backward, gradient clipping,\n"
           "           AdamW) on [batch, seq], from the median of --steps timed steps after 1 warm-up step;\n"
           "           achieved GFLOP/s and its fraction of the sgemm peak measured in the same run\n"
           "  prefill  tokens/s of a forward without targets on [batch, seq] (median, same step count)\n"
           "  decode   tokens/s of one stream decoding --decode-tokens greedy tokens with the KV cache after\n"
           "           a 1-token prompt and up to 8 untimed tokens (the same positions: caches warm up);\n"
           "           weight bytes read per token, the bandwidth that implies, and its\n"
           "           fraction of the read bandwidth measured just before and after it\n"
           "  memory   peak resident set size of the process that measured the model\n"
           "Prints the CPU, the kernel path in use and OpenBLAS's core (as `difftrans info --system`;\n"
           "DT_ISA=portable|avx2|avx512 forces a path, OPENBLAS_CORETYPE an OpenBLAS core), a table per model\n"
           "and one JSON line per model (lines starting with '{', with \"cpu\", \"kernels\", \"blas_core\",\n"
           "\"blas_core_forced\" (the user's OPENBLAS_CORETYPE), \"blas_core_chosen\" (difftrans's) and \"loadavg\"\n"
           "(the last minute's as the run started: above 0.5, other work shares the cores and bench warns)).\n\n"
           "model:\n"
           "  --arch A          diff | transformer | v2 | both | all: both is the DIFF model and its\n"
           "                    parameter-matched baseline of the same sizes, all those two and DIFF V2 of the\n"
           "                    same sizes (H query heads of hd combined in pairs into H/2 output heads, so its\n"
           "                    o_proj is [C, H/2·hd], plus a λ projection [H/2, C]) [both]\n"
           "  --d-model N       hidden size C [%d]\n"
           "  --layers N        layers L [%d]\n"
           "  --heads N         query heads H; DIFF uses H/2 differential heads of width 2·head-dim, DIFF V2\n"
           "                    H/2 output heads of width head-dim (H even for both) [%d]\n"
           "  --kv-heads N      key/value heads [= --heads]\n"
           "  --head-dim N      head width hd [d-model / heads]\n"
           "  --ffn N           SwiGLU width F [%d]\n"
           "  --vocab N         vocabulary size V [%d]\n"
           "run:\n"
           "  --batch N         sequences per step B [%d]\n"
           "  --seq N           tokens per sequence T [%d]\n"
           "  --threads N       OpenMP and BLAS threads [all cores]\n"
           "  --steps N         timed training steps and prefill forwards, after 1 warm-up each [%d]\n"
           "  --decode-tokens N timed decode steps [%d]\n"
           "  --prefill / --no-prefill, --no-train, --no-decode   choose measurements [all on]\n"
           "  --seed N          initialisation and token seed [%llu]\n"
           "  --json-only       print only the JSON lines on stdout\n"
           "  --profile         also break a training step down: matrix products by layer and kind, attention\n"
           "                    forward / backward (with the time threads waited in them), norms, RoPE, SwiGLU,\n"
           "                    LM head + loss, optimizer, and the start/stop cost of the parallel regions\n"
           "                    (a table, and \"profile\" in the JSON line); and a decode step: its products\n"
           "                    by kind with the rate each streams its weights at, the attention over the\n"
           "                    cache, the rest (a table, and \"decode_profile\" in the JSON line); DIFF V2's\n"
           "                    λ projection and head combination have no line of their own: in training the\n"
           "                    projection's forward and the combination are timed in attention forward, the\n"
           "                    combination's backward in zeroing gradient buffers and the projection's\n"
           "                    backward in q/k/v backward (the GFLOP/s of those two count its FLOPs); in\n"
           "                    decoding both are in the rest\n"
           "  --quant LIST      also measure quantised copies of each model: f32,q8_0,q4_0,w8a8 (prefill and\n"
           "                    decode only; weight bytes per token from the quantised layers) [f32]\n"
           "  --quant-lm-head   quantise the LM head too (as `quantize --lm-head`; a quantised model's table\n"
           "                    and JSON line say which: \"quant_lm_head\")\n\n"
           "FLOPs of a training step = 6·P_mm·B·T + 3·L·B·H·a·T(T+1)/2, where P_mm counts every Linear\n"
           "weight (q, k, v, o, gate, up, down, lm_head, DIFF V2's λ projection; not the embedding lookup)\n"
           "and a is the forward cost of one causal (query, key) pair per query head: 4·hd (QKᵀ 2·hd +\n"
           "AV 2·hd) for every kind\n"
           "(DIFF's H/2 differential maps each times a 2·hd-wide V cost the same: the model's FLOPs;\n"
           "DIFF V2's H maps each times an hd-wide V, combined in pairs afterwards).\n"
           "Weight bytes per decoded token = 4·(all parameters − the embedding table + one row of C)\n"
           "(quantised: the products' blocks, q8_0 34 and q4_0 18 bytes per 32 weights, w8a8 1 per weight\n"
           "+ 4 per row, and 4 per parameter outside them: norms, λ, DIFF V2's λ projection); the decode\n"
           "bound is read bandwidth\n"
           "÷ those bytes. The sgemm peak (best of 3 on 2048³, or smaller to stay near 1 s) is measured\n"
           "only with training on;\n"
           "the read bandwidth, with decoding, in a process of its own just before and just after each\n"
           "model (its bound is the larger: a shared machine's bandwidth moves between moments seconds\n"
           "apart), each time the larger of a streaming sum and the decoder's own one-row product over\n"
           "a float array as large as the model's weights per token (at least 1 MiB), read again and\n"
           "again as decoding reads its weights, best of 10 each: weights that fit in a large cache are\n"
           "bounded by that cache. A value not measured is null in JSON.\n",
           s.hidden_size, s.num_hidden_layers, s.num_attention_heads, s.intermediate_size, s.vocab_size, d.batch, d.seq,
           d.steps, d.decode_tokens, (unsigned long long)d.seed);
}

/* the config keys a refused benchmark model names, and the flags that set them */
static const cli_flag config_flags[] = {
    {"hidden_size", "--d-model"},         {"num_hidden_layers", "--layers"}, {"num_attention_heads", "--heads"},
    {"num_key_value_heads", "--kv-heads"}, {"head_dim", "--head-dim"},     {"intermediate_size", "--ffn"},
    {"vocab_size", "--vocab"},            {"max_position_embeddings", "--seq, --decode-tokens"},
};

typedef struct {
    double sgemm_gflops;
    int sgemm_n;
    double loadavg; /* the last minute's, as the run starts (NAN where unknown) */
} probe_result;

static int run_sgemm_probe(void *arg, void *out, dt_error *err) {
    (void)arg;
    probe_result *p = out;
    fprintf(stderr, "bench: measuring the sgemm peak ...\n");
    p->sgemm_gflops = dt_bench_sgemm_peak(&p->sgemm_n);
    if (!isfinite(p->sgemm_gflops)) return dt_fail_oom(err, "out of memory for the sgemm probe");
    return 0;
}

/* arg: the working set's bytes (const size_t *), the weights one decoding step of the model reads */
static int run_read_probe(void *arg, void *out, dt_error *err) {
    const size_t working_set = *(const size_t *)arg;
    fprintf(stderr, "bench: measuring the read bandwidth of %.1f MB read again and again ...\n", working_set / 1e6);
    if (dt_bench_read_bandwidth(out, working_set) != 0) return dt_fail_oom(err, "out of memory for the read probe");
    return 0;
}

typedef struct {
    const dt_config *cfg;
    const dt_bench_options *opt;
} model_job;

static const char *arch_name(const dt_config *c) { return dt_arch_name(c->arch); }

/* --quant f32,q8_0,...: the schemes in the order given (f32 = DT_QUANT_NONE). */
static int parse_quant_list(const char *s, dt_quant_scheme *out, int *n) {
    char buf[128];
    if (strlen(s) >= sizeof buf) return -(cli_error(CMD, "--quant '%s': too long", s) != 0);
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        dt_error err;
        if (*n == 8) return -(cli_error(CMD, "--quant '%s': more than 8 schemes", s) != 0);
        if (!strcmp(item, "f32")) out[(*n)++] = DT_QUANT_NONE;
        else if (dt_quant_scheme_parse(item, &out[*n], &err) != 0)
            return -(cli_error_code(CMD, err.code, "--quant: %s", err.msg) != 0);
        else (*n)++;
    }
    if (*n == 0) return -(cli_error(CMD, "--quant '%s': no scheme", s) != 0);
    return 0;
}

static void show_progress(void *ctx, const char *phase, int done, int total) {
    if (done < 0) fprintf(stderr, "bench %s: %s warm-up ...\n", (const char *)ctx, phase);
    else fprintf(stderr, "bench %s: %s %d/%d%s\n", (const char *)ctx, phase, done, total, done < total ? " ..." : "");
}

/* ---- the step profile (--profile) */

static const char *const part_names[DT_BENCH_PROF_PARTS] = {
    [DT_BENCH_PROF_EMBED] = "embedding", [DT_BENCH_PROF_NORM] = "norms (+ fused residual adds)", [DT_BENCH_PROF_ROPE] = "RoPE",
    [DT_BENCH_PROF_SWIGLU] = "SwiGLU", [DT_BENCH_PROF_ZERO] = "zeroing gradient buffers", [DT_BENCH_PROF_ATTN_FWD] = "attention forward",
    [DT_BENCH_PROF_ATTN_BWD] = "attention backward", [DT_BENCH_PROF_LM_HEAD] = "LM head products", [DT_BENCH_PROF_LOSS] = "loss (cross-entropy)",
    [DT_BENCH_PROF_GRAD_NORM] = "optimizer: gradient norm + clip", [DT_BENCH_PROF_ADAMW] = "optimizer: AdamW",
};
static const char *const mm_names[DT_BENCH_MM_KINDS] = {"q/k/v", "o", "gate/up", "down"};

/* forward FLOPs of one layer's products of a kind (the backward does twice as many) */
static double mm_flops(const dt_config *c, int kind, double rows) {
    const double C = c->hidden_size, F = c->intermediate_size, q = (double)c->num_attention_heads * c->head_dim,
                 kv = (double)c->num_key_value_heads * c->head_dim;
    switch (kind) {
    case DT_BENCH_MM_QKV: return 2 * rows * C * (q + 2 * kv);
    case DT_BENCH_MM_O: return 2 * rows * (c->arch == DT_ARCH_DIFF_V2 ? q / 2 : q) * C; /* V2: h = H/2 heads */
    case DT_BENCH_MM_GATE_UP: return 2 * rows * C * 2 * F;
    default: return 2 * rows * F * C;
    }
}

/* A part's line: ms per step, % of the step and, when flops > 0, GFLOP/s. */
static void profile_line(const char *name, double s_per_step, double step_s, double flops) {
    printf("    %-34s %9.2f ms %6.1f%%", name, 1e3 * s_per_step, 100 * s_per_step / step_s);
    if (flops > 0 && s_per_step > 0) printf("  %8.2f GFLOP/s", flops / s_per_step / 1e9);
    printf("\n");
}

static void print_profile(const dt_config *c, const dt_bench_options *o, const dt_bench_result *r, double sgemm) {
    const dt_bench_profile *p = &r->prof;
    const double n = r->prof_steps, step = r->prof_total_s / n, rows = (double)o->batch * o->seq;
    const int L = c->num_hidden_layers, Lrows = L < DT_BENCH_PROFILE_LAYERS ? L : DT_BENCH_PROFILE_LAYERS;
    const double attn = (double)L * o->batch * c->num_attention_heads * 4.0 * c->head_dim * o->seq * (o->seq + 1.0) / 2;
    /* DIFF V2's λ projection [H/2, C], forward FLOPs of all layers: the forward runs it inside the
     * attention forward's time, the backward beside the q/k/v products */
    const double lam = c->arch == DT_ARCH_DIFF_V2 && c->v2_lambda != DT_V2_LAMBDA_NONE
                           ? 2 * rows * c->hidden_size * (c->num_attention_heads / 2) * (double)L : 0;
    printf("  step profile: mean of %d timed steps, %.2f ms per step, %d threads (sgemm peak %.2f GFLOP/s)\n",
           r->prof_steps, 1e3 * step, r->prof_threads, sgemm);
    double mm_total = 0, accounted = 0;
    for (int l = 0; l < Lrows; l++)
        for (int k = 0; k < DT_BENCH_MM_KINDS; k++) mm_total += p->mm[l][k][0] + p->mm[l][k][1];
    const double layer_flops = mm_flops(c, DT_BENCH_MM_QKV, rows) + mm_flops(c, DT_BENCH_MM_O, rows) +
                               mm_flops(c, DT_BENCH_MM_GATE_UP, rows) + mm_flops(c, DT_BENCH_MM_DOWN, rows);
    profile_line("matrix products (all layers)", mm_total / n, step, 3 * L * layer_flops + 2 * lam);
    accounted += mm_total / n;
    for (int k = 0; k < DT_BENCH_MM_KINDS; k++)
        for (int dir = 0; dir < 2; dir++) {
            double t = 0;
            for (int l = 0; l < Lrows; l++) t += p->mm[l][k][dir];
            char name[64];
            snprintf(name, sizeof name, "  %s %s", mm_names[k], dir ? "backward" : "forward");
            profile_line(name, t / n, step,
                         (dir ? 2 : 1) * L * mm_flops(c, k, rows) + (k == DT_BENCH_MM_QKV && dir ? 2 * lam : 0));
        }
    printf("      per layer, forward + backward ms:");
    for (int l = 0; l < Lrows; l++) {
        double t = 0;
        for (int k = 0; k < DT_BENCH_MM_KINDS; k++) t += p->mm[l][k][0] + p->mm[l][k][1];
        printf(" %d: %.2f%s", l, 1e3 * t / n, l + 1 < Lrows ? "," : "\n");
    }
    for (int part = 0; part < DT_BENCH_PROF_PARTS; part++) {
        double flops = part == DT_BENCH_PROF_ATTN_FWD ? attn + lam : part == DT_BENCH_PROF_ATTN_BWD ? 2 * attn
                       : part == DT_BENCH_PROF_LM_HEAD ? p->lm_head_flops / n : 0;
        profile_line(part_names[part], p->part[part] / n, step, flops);
        accounted += p->part[part] / n;
        if (part == DT_BENCH_PROF_ATTN_FWD || part == DT_BENCH_PROF_ATTN_BWD) {
            const double wait = r->prof_threads * p->part[part] - p->attn_busy[part == DT_BENCH_PROF_ATTN_BWD];
            printf("      threads waiting in it: %.2f ms per step (%.1f%% of %d threads × its time)\n",
                   1e3 * wait / n, 100 * wait / (r->prof_threads * p->part[part]), r->prof_threads);
        }
    }
    profile_line("between the parts", step - accounted, step, 0);
    printf("    parallel regions: %.0f per step × %.1f µs (an empty region, measured) ≈ %.2f ms of thread start/stop\n",
           p->regions / n, r->region_us, p->regions / n * r->region_us / 1e3);
}

/* the profile as JSON: ms per step of each part, of each kind of product, and of each layer's products */
static void print_profile_json(const dt_config *c, const dt_bench_result *r) {
    const dt_bench_profile *p = &r->prof;
    const double n = r->prof_steps;
    static const char *const keys[DT_BENCH_PROF_PARTS] = {
        [DT_BENCH_PROF_EMBED] = "embedding", [DT_BENCH_PROF_NORM] = "norms", [DT_BENCH_PROF_ROPE] = "rope", [DT_BENCH_PROF_SWIGLU] = "swiglu",
        [DT_BENCH_PROF_ZERO] = "zeroing", [DT_BENCH_PROF_ATTN_FWD] = "attention_forward", [DT_BENCH_PROF_ATTN_BWD] = "attention_backward",
        [DT_BENCH_PROF_LM_HEAD] = "lm_head", [DT_BENCH_PROF_LOSS] = "loss", [DT_BENCH_PROF_GRAD_NORM] = "grad_norm_clip", [DT_BENCH_PROF_ADAMW] = "adamw",
    };
    static const char *const mm_keys[DT_BENCH_MM_KINDS] = {"qkv", "o", "gate_up", "down"};
    printf(",\"profile\":{\"step_ms\":%.6g,\"threads\":%d", 1e3 * r->prof_total_s / n, r->prof_threads);
    for (int part = 0; part < DT_BENCH_PROF_PARTS; part++) printf(",\"%s_ms\":%.6g", keys[part], 1e3 * p->part[part] / n);
    printf(",\"attention_forward_busy_ms\":%.6g,\"attention_backward_busy_ms\":%.6g", 1e3 * p->attn_busy[0] / n,
           1e3 * p->attn_busy[1] / n);
    const int L = c->num_hidden_layers < DT_BENCH_PROFILE_LAYERS ? c->num_hidden_layers : DT_BENCH_PROFILE_LAYERS;
    for (int k = 0; k < DT_BENCH_MM_KINDS; k++)
        for (int dir = 0; dir < 2; dir++) {
            printf(",\"mm_%s_%s_ms\":[", mm_keys[k], dir ? "backward" : "forward");
            for (int l = 0; l < L; l++) printf("%s%.6g", l ? "," : "", 1e3 * p->mm[l][k][dir] / n);
            printf("]");
        }
    printf(",\"lm_head_flops\":%.0f,\"parallel_regions\":%.6g,\"region_us\":%.6g}", p->lm_head_flops / n,
           p->regions / n, r->region_us);
}

/* ---- the decode step's profile (--profile with decoding) */

static const char *const decode_part_names[DT_BENCH_DEC_PARTS] = {
    [DT_BENCH_DEC_QKV] = "q/k/v products",         [DT_BENCH_DEC_O] = "o products",
    [DT_BENCH_DEC_GATE_UP] = "gate/up products",   [DT_BENCH_DEC_DOWN] = "down products",
    [DT_BENCH_DEC_LM_HEAD] = "LM head product",    [DT_BENCH_DEC_ATTN] = "attention over the cache",
    [DT_BENCH_DEC_OTHER] = "the rest (norms, RoPE, SwiGLU, adds)",
};
static const char *const decode_part_keys[DT_BENCH_DEC_PARTS] = {
    [DT_BENCH_DEC_QKV] = "qkv",   [DT_BENCH_DEC_O] = "o",         [DT_BENCH_DEC_GATE_UP] = "gate_up",
    [DT_BENCH_DEC_DOWN] = "down", [DT_BENCH_DEC_LM_HEAD] = "lm_head", [DT_BENCH_DEC_ATTN] = "attention",
    [DT_BENCH_DEC_OTHER] = "other",
};

/* ms per step and share of each part; the products' rate of weight bytes and its fraction of the
 * read bandwidth measured around the model (bound_gbs), which says whether a product or what lies
 * between them falls short */
static void print_decode_profile(const dt_bench_result *r, double bound_gbs) {
    const dt_bench_decode_profile *p = &r->decode_prof;
    const double n = r->decode_prof_steps, step = r->decode_prof_total_s / n;
    printf("  decode step profile: mean of %d timed steps, %.3f ms per step\n", r->decode_prof_steps, 1e3 * step);
    double accounted = 0, mm_s = 0, mm_bytes = 0;
    for (int part = 0; part < DT_BENCH_DEC_PARTS; part++) {
        const double t = p->part[part] / n;
        accounted += t;
        printf("    %-38s %8.3f ms %6.1f%%", decode_part_names[part], 1e3 * t, 100 * t / step);
        if (p->bytes[part] > 0 && t > 0) {
            mm_s += t, mm_bytes += p->bytes[part];
            const double gbs = p->bytes[part] / t / 1e9;
            printf("  %7.2f GB/s", gbs);
            if (isfinite(bound_gbs)) printf(" (%.0f%% of the bound)", 100 * gbs / bound_gbs);
        }
        printf("\n");
    }
    const double between = step - accounted;
    printf("    %-38s %8.3f ms %6.1f%%\n", "between the parts", 1e3 * between, 100 * between / step);
    if (mm_s > 0)
        printf("    all products: %.2f GB/s of weights%s", mm_bytes / mm_s / 1e9, isfinite(bound_gbs) ? "" : "\n");
    if (mm_s > 0 && isfinite(bound_gbs))
        printf(" (%.0f%% of the bound %.2f GB/s); the step %.0f%% of its time in them\n",
               100 * mm_bytes / mm_s / 1e9 / bound_gbs, bound_gbs, 100 * mm_s / step);
}

static void print_decode_profile_json(const dt_bench_result *r) {
    const dt_bench_decode_profile *p = &r->decode_prof;
    const double n = r->decode_prof_steps;
    printf(",\"decode_profile\":{\"step_ms\":%.6g", 1e3 * r->decode_prof_total_s / n);
    for (int part = 0; part < DT_BENCH_DEC_PARTS; part++) {
        printf(",\"%s_ms\":%.6g", decode_part_keys[part], 1e3 * p->part[part] / n);
        if (p->bytes[part] > 0) printf(",\"%s_bytes\":%.6g", decode_part_keys[part], p->bytes[part]);
    }
    printf("}");
}

static int run_model(void *arg, void *out, dt_error *err) {
    const model_job *j = arg;
    return dt_bench_model(j->cfg, j->opt, out, err);
}

/* A JSON number, or null for a measurement that did not run. */
static void json_num(const char *key, double v, int last) {
    if (isfinite(v)) printf("\"%s\":%.9g%s", key, v, last ? "}\n" : ",");
    else printf("\"%s\":null%s", key, last ? "}\n" : ",");
}

/* a JSON string of printable ASCII (a CPU brand string): quotes and backslashes escaped, the rest dropped */
static void json_str(const char *key, const char *v) {
    printf("\"%s\":\"", key);
    for (const char *c = v; *c; c++) {
        if (*c == '"' || *c == '\\') putchar('\\');
        if (*c >= 32 && *c < 127) putchar(*c);
    }
    printf("\"");
}

static void print_json(const dt_config *c, const dt_bench_options *o, int threads, const dt_bench_result *r,
                       const probe_result *p, const dt_bench_bandwidth *bw, double peak_fraction, double decode_gbs,
                       double bound_fraction) {
    dt_system_info si;
    dt_system(&si);
    printf("{\"arch\":\"%s\",\"d_model\":%d,\"layers\":%d,\"heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,\"ffn\":%d,"
           "\"vocab\":%d,\"batch\":%d,\"seq\":%d,\"threads\":%d,\"params\":%zu,\"steps\":%d,\"decode_tokens\":%d,",
           arch_name(c), c->hidden_size, c->num_hidden_layers, c->num_attention_heads, c->num_key_value_heads,
           c->head_dim, c->intermediate_size, c->vocab_size, o->batch, o->seq, threads, r->params, o->steps,
           o->decode_tokens);
    json_num("train_tokens_per_s", r->train_tokens_per_s, 0);
    json_num("train_step_ms", r->train_step_ms, 0);
    json_num("prefill_tokens_per_s", r->prefill_tokens_per_s, 0);
    json_num("decode_tokens_per_s", r->decode_tokens_per_s, 0);
    json_num("train_gflops", r->train_gflops, 0);
    json_num("train_flops_per_step", isfinite(r->train_gflops) ? r->train_flops_per_step : NAN, 0);
    json_num("sgemm_peak_gflops", p->sgemm_gflops, 0);
    json_num("sgemm_n", isfinite(p->sgemm_gflops) ? p->sgemm_n : NAN, 0);
    json_num("peak_fraction", peak_fraction, 0);
    json_num("peak_rss_mb", r->peak_rss_mb, 0);
    json_num("decode_weight_bytes_per_token", r->decode_weight_bytes_per_token, 0);
    json_num("read_bandwidth_gbs", bw->bound_gbs, 0);
    json_num("read_bandwidth_sum_gbs", bw->sum_gbs, 0);
    json_num("read_bandwidth_decoder_gbs", bw->decoder_gbs, 0);
    json_num("read_bandwidth_bytes", isfinite(bw->bound_gbs) ? (double)bw->bytes : NAN, 0);
    json_num("decode_bandwidth_gbs", decode_gbs, 0);
    json_num("decode_bound_fraction", bound_fraction, 0);
    json_num("loadavg", p->loadavg, 0);
    json_str("cpu", si.cpu);
    printf(",");
    json_str("kernels", si.path);
    printf(",");
    json_str("blas_core", si.blas_core);
    const int chosen = cli_blas_core_chosen(); /* the CLI's own OPENBLAS_CORETYPE is not the user's */
    printf(",\"blas_core_forced\":%s,\"blas_core_chosen\":%s,", si.blas_core_env[0] && !chosen ? "true" : "false",
           chosen ? "true" : "false");
    json_str("quant", o->quant ? dt_quant_scheme_name(o->quant) : "f32");
    if (o->quant != DT_QUANT_NONE) {
        printf(",\"quant_lm_head\":%s,", o->quant_lm_head ? "true" : "false");
        json_str("quant_kernels", dt_quant_kernel_path());
    }
    if (o->profile && r->prof_steps > 0) print_profile_json(c, r);
    if (o->profile && r->decode_prof_steps > 0) print_decode_profile_json(r);
    printf("}\n");
}

static void print_table(const dt_config *c, const dt_bench_options *o, int threads, const dt_bench_result *r,
                        const probe_result *p, const dt_bench_bandwidth *bw, double peak_fraction, double decode_gbs,
                        double bound_fraction) {
    const int H = c->num_attention_heads, hd = c->head_dim, B = o->batch, T = o->seq, L = c->num_hidden_layers;
    const int diff = c->arch == DT_ARCH_DIFF, v2 = c->arch == DT_ARCH_DIFF_V2;
    printf("\n%s%s%s%s: d_model %d, %d layers, ", arch_name(c), o->quant ? " " : "",
           o->quant ? dt_quant_scheme_name(o->quant) : "",
           !o->quant ? "" : o->quant_lm_head ? " (LM head quantised too)" : " (LM head float)", c->hidden_size, L);
    if (diff) printf("%d query heads = %d differential heads of width %d", H, H / 2, 2 * hd);
    else if (v2) printf("%d query heads = %d output heads of width %d", H, H / 2, hd);
    else printf("%d heads of width %d", H, hd);
    printf(", %d kv heads, head_dim %d, ffn %d, vocab %d: %zu parameters\n", c->num_key_value_heads, hd,
           c->intermediate_size, c->vocab_size, r->params);
    if (o->train || o->prefill) printf("  batch %d × seq %d, %d threads\n", B, T, threads);
    else printf("  %d threads\n", threads);
    if (isfinite(r->train_tokens_per_s)) {
        const double mm = dt_bench_matmul_params(c), linear = 6 * mm * B * T;
        printf("  train    %12.1f tokens/s   median step %.2f ms over %d steps\n", r->train_tokens_per_s,
               r->train_step_ms, o->steps);
        printf("           %12.3f GFLOP/s = %.1f%% of the sgemm peak %.2f GFLOP/s (%d³)\n", r->train_gflops,
               100 * peak_fraction, p->sgemm_gflops, p->sgemm_n);
        printf("           FLOPs/step %.4g = 6·P_mm·B·T = 6·%.0f·%d (%.4g) + attention 3·L·B·H·%d·hd·T(T+1)/2 "
               "= 3·%d·%d·%d·%d·%.0f (%.4g)\n",
               r->train_flops_per_step, mm, B * T, linear, 4, L, B, H, 4 * hd,
               (double)T * (T + 1) / 2, r->train_flops_per_step - linear);
    }
    if (isfinite(r->prefill_tokens_per_s))
        printf("  prefill  %12.1f tokens/s   median forward %.2f ms\n", r->prefill_tokens_per_s,
               1e3 * B * T / r->prefill_tokens_per_s);
    if (isfinite(r->decode_tokens_per_s)) {
        printf("  decode   %12.1f tokens/s   %.2f ms/token, one stream, %d tokens\n", r->decode_tokens_per_s,
               1e3 / r->decode_tokens_per_s, o->decode_tokens);
        printf("           %.3f MB of weights/token → %.3f GB/s = %.1f%% of the read bandwidth bound "
               "(%.2f GB/s ÷ weights = %.1f tokens/s)\n",
               r->decode_weight_bytes_per_token / 1e6, decode_gbs, 100 * bound_fraction, bw->bound_gbs,
               bw->bound_gbs * 1e9 / r->decode_weight_bytes_per_token);
        printf("           bound: the read bandwidth just before or after this model (the larger; %.1f MiB, "
               "best of 10): streaming sum %.2f, decoder's product %.2f GB/s\n",
               (double)bw->bytes / (1 << 20), bw->sum_gbs, bw->decoder_gbs);
    }
    printf("  peak RSS %12.1f MB\n", r->peak_rss_mb);
}

int cmd_bench(int argc, char **argv) {
    enum { O_ARCH = 256, O_DMODEL, O_LAYERS, O_HEADS, O_KV, O_HD, O_FFN, O_VOCAB, O_BATCH, O_SEQ, O_THREADS,
           O_STEPS, O_DECODE, O_PREFILL, O_NOPREFILL, O_NOTRAIN, O_NODECODE, O_JSON, O_SEED, O_PROFILE, O_QUANT, O_QLM };
    static const struct option opts[] = {
        {"arch", required_argument, 0, O_ARCH},
        {"d-model", required_argument, 0, O_DMODEL},
        {"layers", required_argument, 0, O_LAYERS},
        {"heads", required_argument, 0, O_HEADS},
        {"kv-heads", required_argument, 0, O_KV},
        {"head-dim", required_argument, 0, O_HD},
        {"ffn", required_argument, 0, O_FFN},
        {"vocab", required_argument, 0, O_VOCAB},
        {"batch", required_argument, 0, O_BATCH},
        {"seq", required_argument, 0, O_SEQ},
        {"threads", required_argument, 0, O_THREADS},
        {"steps", required_argument, 0, O_STEPS},
        {"decode-tokens", required_argument, 0, O_DECODE},
        {"prefill", no_argument, 0, O_PREFILL},
        {"no-prefill", no_argument, 0, O_NOPREFILL},
        {"no-train", no_argument, 0, O_NOTRAIN},
        {"no-decode", no_argument, 0, O_NODECODE},
        {"json-only", no_argument, 0, O_JSON},
        {"seed", required_argument, 0, O_SEED},
        {"profile", no_argument, 0, O_PROFILE},
        {"quant", required_argument, 0, O_QUANT},
        {"quant-lm-head", no_argument, 0, O_QLM},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int which = -1; /* -1 both, -2 all, else a dt_arch */
    int threads = 0, json_only = 0, n_schemes = 1;
    dt_quant_scheme schemes[8] = {DT_QUANT_NONE};
    dt_bench_sizes sz;
    dt_bench_sizes_default(&sz);
    dt_bench_options o;
    dt_bench_defaults(&o);
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case O_ARCH:
            if (!strcmp(optarg, "both")) {
                which = -1;
            } else if (!strcmp(optarg, "all")) {
                which = -2;
            } else {
                dt_arch a;
                if (!strcmp(optarg, "diff") || !strcmp(optarg, "diffllama") || !strcmp(optarg, "transformer") ||
                    !strcmp(optarg, "llama") || !strcmp(optarg, "v2") || !strcmp(optarg, "diff-v2") ||
                    !strcmp(optarg, "difftrans_v2"))
                    bad = cli_parse_arch(CMD, optarg, &a);
                else
                    bad = -(cli_error(CMD, "--arch '%s': expected diff, transformer, v2, both or all", optarg) != 0);
                if (!bad) which = (int)a;
            }
            break;
        case O_DMODEL: bad = parse_int(CMD, "--d-model", optarg, 1, 65536, &sz.hidden_size); break;
        case O_LAYERS: bad = parse_int(CMD, "--layers", optarg, 1, 1024, &sz.num_hidden_layers); break;
        case O_HEADS: bad = parse_int(CMD, "--heads", optarg, 1, 1024, &sz.num_attention_heads); break;
        case O_KV: bad = parse_int(CMD, "--kv-heads", optarg, 1, 1024, &sz.num_key_value_heads); break;
        case O_HD: bad = parse_int(CMD, "--head-dim", optarg, 1, 4096, &sz.head_dim); break;
        case O_FFN: bad = parse_int(CMD, "--ffn", optarg, 1, 1048576, &sz.intermediate_size); break;
        case O_VOCAB: bad = parse_int(CMD, "--vocab", optarg, 1, 4194304, &sz.vocab_size); break;
        case O_BATCH: bad = parse_int(CMD, "--batch", optarg, 1, 65536, &o.batch); break;
        case O_SEQ: bad = parse_int(CMD, "--seq", optarg, 1, 1048576, &o.seq); break;
        case O_THREADS: bad = parse_int(CMD, "--threads", optarg, 1, 1024, &threads); break;
        case O_STEPS: bad = parse_int(CMD, "--steps", optarg, 1, 1000000, &o.steps); break;
        case O_DECODE: bad = parse_int(CMD, "--decode-tokens", optarg, 1, 1048575, &o.decode_tokens); break;
        case O_PREFILL: o.prefill = 1; break;
        case O_NOPREFILL: o.prefill = 0; break;
        case O_NOTRAIN: o.train = 0; break;
        case O_NODECODE: o.decode = 0; break;
        case O_JSON: json_only = 1; break;
        case O_SEED: bad = parse_u64(CMD, "--seed", optarg, &o.seed); break;
        case O_PROFILE: o.profile = 1; break;
        case O_QUANT: bad = parse_quant_list(optarg, schemes, &n_schemes); break;
        case O_QLM: o.quant_lm_head = 1; break;
        case 'h': help(); return 0;
        default: return cli_bad_option(CMD, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind < argc) return cli_error(CMD, "unexpected argument '%s' (see difftrans bench --help)", argv[optind]);
    /* quantised copies are not trained: without f32 in --quant nothing is, and no sgemm peak is due */
    int f32 = 0, quantised = 0;
    for (int i = 0; i < n_schemes; i++) {
        f32 |= schemes[i] == DT_QUANT_NONE;
        quantised |= schemes[i] != DT_QUANT_NONE;
    }
    if (!f32) o.train = 0;
    if (quantised && !o.prefill && !o.decode)
        return cli_error(CMD, "--quant: a quantised copy is measured prefilling and decoding, which --no-prefill and "
                              "--no-decode leave out");
    if (o.profile && !o.train && !o.decode)
        return cli_error(CMD, "--profile breaks down training and decode steps: it needs one of them on%s",
                         f32 ? "" : " (--quant without f32 trains nothing)");
    if (!o.train && !o.prefill && !o.decode)
        return cli_error(CMD, "--no-train, --no-prefill and --no-decode leave nothing to measure");

    dt_error err;
    dt_config cfgs[3];
    int n_models = 1;
    if (dt_bench_config(which < 0 ? DT_ARCH_DIFF : (dt_arch)which, &sz, &o, &cfgs[0], &err) != 0)
        return cli_fail_flags(CMD, &err, config_flags, (int)(sizeof config_flags / sizeof config_flags[0]));
    if (which < 0) cfgs[n_models++] = dt_config_matched(&cfgs[0]); /* both: the DIFF model and its baseline */
    /* all: V2 of the same sizes, H query heads as DIFF (its matched baseline would have H/2 heads) */
    if (which == -2 && dt_bench_config(DT_ARCH_DIFF_V2, &sz, &o, &cfgs[n_models++], &err) != 0)
        return cli_fail_flags(CMD, &err, config_flags, (int)(sizeof config_flags / sizeof config_flags[0]));

    /* Sets the OpenMP ICV only (no threads start here); the children inherit it. */
    cli_set_threads(threads);
    const int n_threads = omp_get_max_threads();

    probe_result p = {.sgemm_gflops = NAN};
    if (o.train && dt_bench_isolated(run_sgemm_probe, NULL, &p, sizeof p, NULL, &err) != 0)
        return cli_fail(CMD, &err);
    if (getloadavg(&p.loadavg, 1) != 1) p.loadavg = NAN;
    /* other work on the cores: threads spinning while they wait hold the core the other one needs
     * (a 2-thread decoding step ran 10× slower beside one busy process) */
    if (p.loadavg > 0.5)
        fprintf(stderr,
                "bench: the load average is %.2f: other processes are using the cores, so these numbers "
                "will be low and noisy (docs/PERFORMANCE.md, \"Comparing fairly on a shared machine\")\n",
                p.loadavg);
    /* the read bandwidth just before and just after each model, of a buffer of the size of its
     * decoding's weights (the same cache levels serve both): a model's bound is the larger of the
     * two (on a shared machine the bandwidth moved by half between moments seconds apart: Zen 5, 35
     * and 53 GB/s, and decoding measured against a probe from another moment came out at 120% of
     * it); one model's read after is the next one's before when their weights are as large */
    const dt_bench_bandwidth no_read = {.bound_gbs = NAN, .sum_gbs = NAN, .decoder_gbs = NAN};
    dt_bench_bandwidth read_before = no_read;
    size_t read_before_set = 0;
    if (!json_only) {
        cli_print_system(stdout, "");
        printf("machine: %d threads | load average %.2f", n_threads, p.loadavg);
        if (o.train) printf(" | sgemm %d³ best of 3: %.2f GFLOP/s", p.sgemm_n, p.sgemm_gflops);
        printf("\n");
    }

    int rc = 0;
    if (!json_only && (n_schemes > 1 || schemes[0] != DT_QUANT_NONE))
        printf("quantised kernels: %s\n", dt_quant_kernel_path());
    for (int k = 0; k < n_models * n_schemes; k++) {
        const int i = k / n_schemes;
        const dt_config *c = &cfgs[i];
        o.quant = schemes[k % n_schemes];
        dt_bench_options mo = o;
        mo.progress = show_progress;
        mo.progress_ctx = (void *)arch_name(c);
        model_job job = {c, &mo};
        dt_bench_result r;
        double rss = NAN;
        size_t working_set = dt_config_decode_bytes(c, o.quant, o.quant_lm_head);
        if (o.decode && read_before_set != working_set) {
            read_before_set = working_set;
            if (dt_bench_isolated(run_read_probe, &working_set, &read_before, sizeof read_before, NULL, &err) != 0)
                return cli_fail(CMD, &err);
        }
        if (dt_bench_isolated(run_model, &job, &r, sizeof r, &rss, &err) != 0) {
            rc = cli_error_code(CMD, err.code, "%s: %s", arch_name(c), err.msg);
            continue;
        }
        r.peak_rss_mb = rss;
        dt_bench_bandwidth read_after = no_read;
        if (o.decode &&
            dt_bench_isolated(run_read_probe, &working_set, &read_after, sizeof read_after, NULL, &err) != 0)
            return cli_fail(CMD, &err);
        const dt_bench_bandwidth bw = read_after.bound_gbs > read_before.bound_gbs ? read_after : read_before;
        read_before = read_after;
        const double peak_fraction = r.train_gflops / p.sgemm_gflops;
        const double decode_gbs = r.decode_weight_bytes_per_token * r.decode_tokens_per_s / 1e9;
        const double bound_fraction = decode_gbs / bw.bound_gbs; /* = tokens/s ÷ (bandwidth ÷ bytes per token) */
        if (!json_only) print_table(c, &o, n_threads, &r, &p, &bw, peak_fraction, decode_gbs, bound_fraction);
        if (!json_only && o.profile && r.prof_steps > 0) print_profile(c, &o, &r, p.sgemm_gflops);
        if (!json_only && o.profile && r.decode_prof_steps > 0) print_decode_profile(&r, bw.bound_gbs);
        print_json(c, &o, n_threads, &r, &p, &bw, peak_fraction, decode_gbs, bound_fraction);
        fflush(stdout);
    }
    return rc;
}
