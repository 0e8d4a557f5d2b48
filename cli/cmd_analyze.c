/* cmd_analyze.c — `difftrans analyze KIND ...`: the paper's analyses of trained checkpoints and
 * runs, printed as tables (one row per model) and optionally written as JSON. The computations
 * and their exact definitions live in src/analysis/analyze.c; this file only parses and prints. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "difftrans_analysis.h"
#include "cli.h"

/* the width of the tables' first column: the longest model or run path given (28 at least) */
static int name_w = 28;

#define MAX_BITS 16

static void help(void) {
    printf(
        "usage: difftrans analyze KIND ARGS... [options]\n\n"
        "The paper's analyses, one table row per model (give the DIFF model and its baseline together to see them\n"
        "side by side); --json OUT also writes the numbers (atomically).\n\n"
        "  analyze outliers MODEL_DIR... --data FILE.txt [--seq 256] [--batches 4]\n"
        "      Outliers: top-1, top-10 (10th largest) and median of |attention logits| (the scaled scores\n"
        "      q.k/sqrt(hd), without ALiBi's position bias; causal entries, all layers and query heads) and of\n"
        "      |hidden states| (the residual stream entering every layer and the final norm), over --batches\n"
        "      consecutive windows of --seq tokens (bytes for a byte-level model) from the start of the file.\n"
        "      The JSON adds per-layer maxima.\n"
        "  analyze quantize MODEL_DIR... --data FILE.txt [--bits 16,8,6,4] [--per-row] [--needle DIR]\n"
        "      Quantisation: loss (mean next-token cross-entropy, nats) and next-token accuracy with the attention\n"
        "      logits fake-quantised (symmetric, absmax scale per head map, or per query row with --per-row)\n"
        "      to each bit width, plus the unquantised row (bits none; a quantised checkpoint's weights stay\n"
        "      as they are in every row); windows as for outliers (--seq + 1 tokens each).\n"
        "      --needle DIR adds exact-match needle accuracy (teacher-forced: every answer byte must be the\n"
        "      argmax given the true earlier bytes — the same verdict as greedy decoding).\n"
        "  analyze quantize MODEL_DIR... --data FILE.txt --schemes q8_0,q4_0,w8a8,... [--calib FILE]\n"
        "                   [--calib-samples 300] [--smooth 0.5] [--lm-head] [--needle DIR]\n"
        "      Post-training quantisation of the linear layers (see difftrans quantize --help): per scheme\n"
        "      (q8_0, q4_0, w8a8, w8a8-dynamic, w8a8-smooth, w8a8-dynamic-smooth) the held-out loss (the last\n"
        "      tenth of --data) and its increase over F32, the mean KL divergence of the next-token distribution\n"
        "      from F32's, top-1 agreement with F32, accuracy, needle accuracy, weight MB read per decoded\n"
        "      token, and for calibrated w8a8 the activation outliers each quantised layer sees (per-channel\n"
        "      absmax: largest, and largest / median) before and after smoothing. Calibration: --calib-samples\n"
        "      windows of --seq from --calib FILE, or from the first nine tenths of --data.\n"
        "  analyze allocation MODEL_DIR... --needle DIR [--max-samples N]\n"
        "      Allocation: attention of the position predicting the first answer byte (the space of \"Answer: \")\n"
        "      on the needle's value bytes in the context vs. the rest of the context, per layer, averaged over\n"
        "      heads, queries and samples. DIFF uses D = A_i - lambda*A_(i+H/2) per differential head, DIFF V2\n"
        "      D = A_2j - lambda_t*A_(2j+1) per output head with the row's own lambda. answer\n"
        "      share = sum(D over span) / sum(|D| over context); noise share = sum(|D| over context outside the\n"
        "      span) / sum(|D| over context). Raw sums are in the JSON. A model with a tokenizer.json reads the\n"
        "      sample through it: the row is the prompt's last token, the span the tokens overlapping the value.\n"
        "  analyze training RUN_DIR...\n"
        "      From metrics.jsonl: lambda per layer (first, last, min, max; for DIFF V2, whose lambda is per\n"
        "      token and head, the mean over the logging step's last forward), gradient norm mean/std/max and\n"
        "      spikes (grad_norm > mean + 3 std, or > 3x the median, of the preceding <= 50 steps; needs 10 earlier\n"
        "      steps), final train and validation loss.\n"
        "  analyze icl MODEL_DIR... [--shots 8] [--permutations 6] [--queries 32] [--seed 1]\n"
        "      Order robustness: in-context classification and its sensitivity to the order of the examples. A\n"
        "      synthetic task (words whose first letter is a-m are \"red\", n-z \"blue\"): --shots balanced\n"
        "      demonstrations \"Input: WORD\\nLabel: LABEL\\n\\n\", then a query; the answer is the label whose\n"
        "      tokens have the higher log-probability in all (a sum, not a mean: a model that has not learnt\n"
        "      the task prefers the label of fewer tokens, 3-byte \"red\" to \"blue\", and scores 0.5 in every\n"
        "      order; a tie is \"red\"). The same demonstrations in --permutations orders, each scored on\n"
        "      the same --queries: accuracy per order, mean, std, min, max and spread (max − min) (chance is\n"
        "      0.5). With a tokenizer.json the label's score is that of the tokens after those prompt+\"red\"\n"
        "      and prompt+\"blue\" share.\n"
        "  analyze scaling RUN_DIR...\n"
        "      The paper's \"~65%% of the parameters for the same loss\": give `difftrans train` runs of both\n"
        "      kinds (DIFF and Transformer, each one model: the same ablations at every size) at several sizes\n"
        "      with one token budget; fits log(final val loss) = a + b*log(N) per kind, N the run's\n"
        "      non-embedding parameters (all but the token embedding and LM head, as `difftrans study` and\n"
        "      `compare --scaling` count them), and reports the DIFF size whose fitted loss equals the\n"
        "      baseline's at its largest size (the mean over its runs of that size), as a fraction of that N\n"
        "      (below 1: DIFF needs fewer). A run's budget (\"tokens\": steps to its last validation loss ×\n"
        "      batch × grad_accum × seq, from its train_state.json) is in the table; runs of several budgets\n"
        "      are fitted, and a line names them with their budgets.\n\n"
        "options:\n"
        "  --data FILE.txt   text (outliers, quantize)\n"
        "  --seq N           window length in tokens (bytes for a byte-level model) [256, at most the model's\n"
        "                    context]\n"
        "  --batches N       windows (one forward each) [4]\n"
        "  --bits LIST       bit widths in 2..24, comma-separated [16,8,6,4]\n"
        "  --per-row         quantisation scale per query row instead of per head map\n"
        "  --needle DIR      a `difftrans needle generate` directory or its test.jsonl\n"
        "  --max-samples N   use the first N test samples [all]\n"
        "  --json OUT        write the results as JSON\n"
        "  --threads N       OpenMP threads [all cores]\n");
}

typedef struct {
    const char *data, *needle, *json;
    int seq, batches, per_row, max_samples, threads;
    dt_icl_params icl;
    int given_icl;
    int n_bits, bits[MAX_BITS];
    int given_data, given_seq, given_batches, given_bits, given_per_row, given_needle, given_max;
    cli_wquant_options wq;       /* --schemes: weight / activation quantisation */
    int given_wq;
} options;

static int parse_bits(const char *cmd, const char *s, options *o) {
    const char *p = s;
    o->n_bits = 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item) return -(cli_error(cmd, "--bits '%s': empty or overlong item", s) != 0);
        if (o->n_bits == MAX_BITS) return -(cli_error(cmd, "--bits '%s': more than %d widths", s, MAX_BITS) != 0);
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse_int(cmd, "--bits", item, 2, 24, &o->bits[o->n_bits]) != 0) return -1;
        o->n_bits++;
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

static const char *arch_name(int arch) { return dt_arch_label((dt_arch)arch); }

static int write_json(const char *cmd, const char *path, cJSON *o) {
    dt_error err;
    if (!o) return cli_error_code(cmd, DT_ERR_NOMEM, "%s: out of memory building the JSON", path);
    if (dt_an_write_json(path, o, &err) != 0) return cli_fail(cmd, &err);
    return 0;
}

/* One model's (or run's) object in arr: {key: dir, "arch": ...}, the analysis adds the rest. */
static cJSON *json_entry(cJSON *arr, const char *key, const char *dir, int arch) {
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddItemToArray(arr, e)) {
        cJSON_Delete(e);
        return NULL;
    }
    cJSON_AddStringToObject(e, key, dir);
    cJSON_AddStringToObject(e, "arch", arch_name(arch));
    return e;
}

/* Loads every model and, when toks is given, its tokenizer (NULL for a byte-level model) — the
 * needle and in-context tasks are text read through it; on failure frees what it loaded. */
static int load_models(const char *cmd, char **dirs, int n, dt_model *models, const dt_tok **toks, int seq_needed, int *seq) {
    dt_error err;
    for (int i = 0; i < n; i++) {
        if (dt_model_load(&models[i], dirs[i], &err) != 0) {
            for (int j = 0; j < i; j++) dt_model_free(&models[j]);
            return -(cli_fail(cmd, &err) != 0);
        }
        if (toks && dt_model_check_text(&models[i], &err) != 0) {
            for (int j = 0; j <= i; j++) dt_model_free(&models[j]);
            return -(cli_fail(cmd, &err) != 0);
        }
        if (toks) toks[i] = dt_model_tok(&models[i]);
        if (seq_needed && *seq > models[i].cfg.max_position_embeddings) {
            cli_error(cmd, "--seq %d: more than %s's max_position_embeddings %d", *seq, dirs[i],
                      models[i].cfg.max_position_embeddings);
            for (int j = 0; j <= i; j++) dt_model_free(&models[j]);
            return -1;
        }
    }
    return 0;
}

/* dt_models_text reads the models (their vocabularies) and the text: the flag goes with a
 * message about the text only */
static int models_text_failed(const char *cmd, const options *op, const dt_error *err) {
    const int about_data = op->data && strstr(err->msg, op->data) != NULL;
    return cli_error_code(cmd, err->code, "%s%s", about_data ? "--data: " : "", err->msg);
}

static int run_outliers(const char *cmd, char **dirs, int n, const options *op) {
    int *tok = NULL;
    size_t ntok = 0;
    dt_error err;
    if (dt_models_text((const char *const *)dirs, n, op->data, &tok, &ntok, &err) != 0)
        return models_text_failed(cmd, op, &err);
    if (ntok < (size_t)op->seq) {
        free(tok);
        return cli_error(cmd, "--data %s: %zu tokens, fewer than --seq %d", op->data, ntok, op->seq);
    }
    dt_model *models = calloc((size_t)n, sizeof *models);
    dt_an_outliers *res = calloc((size_t)n, sizeof *res);
    int seq = op->seq, rc = 0, done = 0;
    if (!models || !res)
        rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    else if (load_models(cmd, dirs, n, models, NULL, 1, &seq) != 0)
        rc = 1;
    else {
        for (; done < n; done++)
            if (dt_an_outliers_run(&models[done], tok, ntok, seq, op->batches, &res[done], &err) != 0) {
                rc = cli_error_code(cmd, err.code, "%s: %s", dirs[done], err.msg);
                break;
            }
        if (rc == 0) {
            printf("analyze outliers: %s, %d window(s) of %d tokens\n", op->data, res[0].windows, seq);
            printf("%-*s %-11s | %12s %12s %10s | %12s %12s %10s\n", name_w, "model", "arch", "logit top1",
                   "logit top10", "median", "hidden top1", "hidden top10", "median");
            for (int i = 0; i < n; i++)
                printf("%-*s %-11s | %12.4g %12.4g %10.4g | %12.4g %12.4g %10.4g\n", name_w, dirs[i],
                       arch_name(models[i].cfg.arch), res[i].logits.top1, res[i].logits.top10, res[i].logits.median,
                       res[i].hidden.top1, res[i].hidden.top10, res[i].hidden.median);
            if (op->json) {
                cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "models");
                cJSON_AddStringToObject(root, "analysis", "outliers");
                cJSON_AddStringToObject(root, "data", op->data);
                cJSON_AddNumberToObject(root, "seq", seq);
                cJSON_AddNumberToObject(root, "windows", res[0].windows);
                int ok = arr != NULL;
                for (int i = 0; ok && i < n; i++)
                    ok = dt_an_outliers_add_json(json_entry(arr, "model", dirs[i], models[i].cfg.arch), &res[i]) == 0;
                rc = write_json(cmd, op->json, ok ? root : NULL);
                cJSON_Delete(root);
            }
        }
        for (int i = 0; i < n; i++) dt_model_free(&models[i]);
    }
    for (int i = 0; i < n && res; i++) dt_an_outliers_free(&res[i]);
    free(res);
    free(models);
    free(tok);
    return rc;
}

static int run_quantize(const char *cmd, char **dirs, int n, const options *op) {
    int *tok = NULL;
    size_t ntok = 0;
    dt_error err;
    if (dt_models_text((const char *const *)dirs, n, op->data, &tok, &ntok, &err) != 0)
        return models_text_failed(cmd, op, &err);
    if (ntok < (size_t)op->seq + 1) {
        free(tok);
        return cli_error(cmd, "--data %s: %zu tokens, fewer than --seq + 1 = %d", op->data, ntok, op->seq + 1);
    }
    dt_needle_testset ts = {0};
    if (op->needle && dt_needle_load_testset(&ts, op->needle, &err) != 0) {
        free(tok);
        return cli_error_code(cmd, err.code, "--needle: %s", err.msg);
    }
    const int R = op->n_bits + 1; /* row 0: unquantised */
    dt_model *models = calloc((size_t)n, sizeof *models);
    dt_an_quant_row *rows = calloc((size_t)n * R, sizeof *rows);
    const dt_tok **toks = calloc((size_t)n, sizeof *toks);
    int seq = op->seq, rc = 0;
    if (!models || !rows || !toks)
        rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    else if (load_models(cmd, dirs, n, models, toks, 1, &seq) != 0)
        rc = 1;
    else {
        for (int i = 0; i < n && rc == 0 && op->needle; i++)
            rc = cli_needle_sized_check(cmd, op->needle, dirs[i], &models[i]);
        for (int i = 0; i < n && rc == 0; i++) {
            const dt_an_quant_params p = {.tokens = tok, .n = ntok, .seq = seq, .windows = op->batches,
                                          .n_bits = op->n_bits, .bits = op->bits, .per_row = op->per_row,
                                          .needle = op->needle ? &ts : NULL, .needle_tok = toks[i],
                                          .max_samples = op->max_samples};
            if (dt_an_quant_run(&models[i], &p, &rows[(size_t)i * R], &err) != 0) {
                cli_needle_fit_hint(&err, dirs[i]);
                rc = cli_error_code(cmd, err.code, "%s: %s", dirs[i], err.msg);
            }
        }
        if (rc == 0) {
            const char *scale = op->per_row ? "per query row" : "per head map";
            printf(
                "analyze quantize: %s, %zu predictions per model; attention logits fake-quantised (symmetric, absmax "
                "scale %s; bits none: not quantised)\n",
                op->data, rows[0].count, scale);
            /* the row of unquantised logits is not a float model's: a quantised checkpoint's weights are its own in
             * every row, and only the logits change */
            for (int i = 0; i < n; i++) {
                const dt_quant_scheme qs = dt_model_quant_scheme(&models[i], NULL);
                if (qs != DT_QUANT_NONE)
                    printf("%s: weights %s in every row, the logits alone quantised\n", dirs[i],
                           dt_quant_scheme_name(qs));
            }
            printf("%-*s %-11s %6s | %10s %10s", name_w, "model", "arch", "bits", "loss", "accuracy");
            if (op->needle) printf(" %12s", "needle acc");
            printf(" | %10s\n", "loss delta");
            for (int i = 0; i < n; i++)
                for (int b = 0; b < R; b++) {
                    const dt_an_quant_row *q = &rows[(size_t)i * R + b];
                    char bits[16];
                    if (q->bits)
                        snprintf(bits, sizeof bits, "%d", q->bits);
                    else
                        snprintf(bits, sizeof bits, "none");
                    printf("%-*s %-11s %6s | %10.5f %10.4f", name_w, dirs[i], arch_name(models[i].cfg.arch), bits,
                           q->loss, q->accuracy);
                    if (op->needle)
                        printf(" %12.3f", q->needle_total > 0 ? (double)q->needle_correct / q->needle_total : 0.0);
                    printf(" | %+10.5f\n", q->loss - rows[(size_t)i * R].loss);
                }
            if (op->json) {
                cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "models");
                cJSON_AddStringToObject(root, "analysis", "quantize");
                cJSON_AddStringToObject(root, "data", op->data);
                cJSON_AddStringToObject(root, "scale", op->per_row ? "per_row" : "per_head_map");
                cJSON_AddNumberToObject(root, "seq", seq);
                if (op->needle) cJSON_AddStringToObject(root, "needle", ts.path);
                int ok = arr != NULL;
                for (int i = 0; ok && i < n; i++) {
                    cJSON *e = json_entry(arr, "model", dirs[i], models[i].cfg.arch);
                    cJSON *ra = dt_an_quant_rows_json(&rows[(size_t)i * R], R);
                    ok = e && ra && cJSON_AddItemToObject(e, "rows", ra);
                    if (!ok) cJSON_Delete(ra);
                }
                rc = write_json(cmd, op->json, ok ? root : NULL);
                cJSON_Delete(root);
            }
        }
        for (int i = 0; i < n; i++) dt_model_free(&models[i]);
    }
    free(toks);
    free(rows);
    free(models);
    free(tok);
    dt_needle_testset_free(&ts);
    return rc;
}

static int run_allocation(const char *cmd, char **dirs, int n, const options *op) {
    dt_error err;
    dt_needle_testset ts = {0};
    if (dt_needle_load_testset(&ts, op->needle, &err) != 0)
        return cli_error_code(cmd, err.code, "--needle: %s", err.msg);
    dt_model *models = calloc((size_t)n, sizeof *models);
    dt_an_allocation *res = calloc((size_t)n, sizeof *res);
    const dt_tok **toks = calloc((size_t)n, sizeof *toks);
    int rc = 0, seq = 0;
    if (!models || !res || !toks)
        rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    else if (load_models(cmd, dirs, n, models, toks, 0, &seq) != 0)
        rc = 1;
    else {
        for (int i = 0; i < n && rc == 0; i++) rc = cli_needle_sized_check(cmd, op->needle, dirs[i], &models[i]);
        for (int i = 0; i < n && rc == 0; i++)
            if (dt_an_allocation_run(&models[i], toks[i], &ts, op->max_samples, &res[i], &err) != 0) {
                cli_needle_fit_hint(&err, dirs[i]);
                rc = cli_error_code(cmd, err.code, "%s: %s", dirs[i], err.msg);
            }
        if (rc == 0) {
            printf("analyze allocation: %s, %d sample(s), %d query row(s) (the position predicting the first answer "
                   "byte or token)\n",
                   ts.path, res[0].samples, res[0].rows);
            printf("answer share = sum(w, answer span) / sum(|w|, context); noise = sum(|w|, context outside span) / "
                   "sum(|w|, context);\nw = A (baseline) or A1 - lambda*A2 (DIFF; DIFF V2: the row's lambda); "
                   "means over layers, heads and queries\n");
            printf("%-*s %-11s %6s | %12s %12s\n", name_w, "model", "arch", "heads", "answer", "noise");
            for (int i = 0; i < n; i++)
                printf("%-*s %-11s %6d | %12.4f %12.4f\n", name_w, dirs[i], arch_name(models[i].cfg.arch), res[i].heads,
                       res[i].mean_answer_share, res[i].mean_noise_share);
            printf("per layer (answer / noise):\n");
            for (int i = 0; i < n; i++) {
                printf("  %-26s", dirs[i]);
                for (int l = 0; l < res[i].n_layers; l++)
                    printf(" L%d %.4f/%.4f", l, res[i].answer_share[l], res[i].noise_share[l]);
                printf("\n");
            }
            if (op->json) {
                cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "models");
                cJSON_AddStringToObject(root, "analysis", "allocation");
                cJSON_AddStringToObject(root, "needle", ts.path);
                cJSON_AddStringToObject(root, "query_position",
                                        "the last token ending at or before prompt_end_offset (for bytes: prompt_end_offset - 1); "
                                        "it predicts the answer's first token");
                cJSON_AddStringToObject(root, "answer_share", "sum(w over answer span) / sum(|w| over context)");
                cJSON_AddStringToObject(root, "noise_share",
                                        "sum(|w| over context outside the span) / sum(|w| over context)");
                int ok = arr != NULL;
                for (int i = 0; ok && i < n; i++) {
                    cJSON *e = json_entry(arr, "model", dirs[i], models[i].cfg.arch);
                    ok = dt_an_allocation_add_json(e, &res[i]) == 0;
                    if (ok && models[i].cfg.arch == DT_ARCH_DIFF) { /* λ of the model, beside its allocation */
                        double lam[256];
                        int nl = res[i].n_layers < 256 ? res[i].n_layers : 256;
                        for (int l = 0; l < nl; l++) lam[l] = dt_model_lambda(&models[i], l);
                        ok = cJSON_AddItemToObject(e, "lambda", cJSON_CreateDoubleArray(lam, nl));
                    }
                }
                rc = write_json(cmd, op->json, ok ? root : NULL);
                cJSON_Delete(root);
            }
        }
        for (int i = 0; i < n; i++) dt_model_free(&models[i]);
    }
    for (int i = 0; i < n && res; i++) dt_an_allocation_free(&res[i]);
    free(toks);
    free(res);
    free(models);
    dt_needle_testset_free(&ts);
    return rc;
}

static void print_num(double v) {
    if (isnan(v))
        printf(" %9s", "-");
    else
        printf(" %9.4f", v);
}

static int run_icl(const char *cmd, char **dirs, int n, const options *op) {
    dt_error err;
    dt_model *models = calloc((size_t)n, sizeof *models);
    dt_icl_result *res = calloc((size_t)n, sizeof *res);
    const dt_tok **toks = calloc((size_t)n, sizeof *toks);
    int rc = 0, seq = 0;
    if (!models || !res || !toks) rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    else if (load_models(cmd, dirs, n, models, toks, 0, &seq) != 0) {
        free(models);
        models = NULL;
        rc = 1;
    }
    int done = 0;
    for (; rc == 0 && done < n; done++) {
        fprintf(stderr, "analyze icl: %s (%d order%s × %d queries)\n", dirs[done], op->icl.permutations,
                op->icl.permutations > 1 ? "s" : "", op->icl.queries);
        if (dt_icl_run(&models[done], toks[done], &op->icl, &res[done], &err) != 0) {
            static const cli_flag icl_flags[] = {
                {"shots", "--shots"}, {"queries", "--queries"}, {"permutations", "--permutations"}};
            dt_fail_prefix(&err, "%s", dirs[done]);
            rc = cli_fail_flags(cmd, &err, icl_flags, 3);
        }
    }
    if (rc == 0) {
        printf("analyze icl: %d shots, %d order%s, %d queries per order, seed %llu (chance 0.5)\n", op->icl.shots,
               op->icl.permutations, op->icl.permutations > 1 ? "s" : "", op->icl.queries,
               (unsigned long long)op->icl.seed);
        printf("%-*s %-11s %8s %8s %8s %8s %8s\n", name_w, "model", "arch", "mean", "std", "min", "max", "spread");
        for (int i = 0; i < n; i++)
            printf("%-*s %-11s %8.4f %8.4f %8.4f %8.4f %8.4f\n", name_w, dirs[i], arch_name(models[i].cfg.arch),
                   res[i].mean, res[i].std, res[i].min, res[i].max, res[i].max - res[i].min);
        if (op->json) {
            cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "models");
            char seed[32];
            snprintf(seed, sizeof seed, "%llu", (unsigned long long)op->icl.seed);
            cJSON_AddStringToObject(root, "analysis", "icl");
            cJSON_AddNumberToObject(root, "shots", op->icl.shots);
            cJSON_AddNumberToObject(root, "permutations", op->icl.permutations);
            cJSON_AddNumberToObject(root, "queries", op->icl.queries);
            cJSON_AddStringToObject(root, "seed", seed);
            int ok = arr != NULL;
            for (int i = 0; ok && i < n; i++)
                ok = dt_icl_result_add_json(json_entry(arr, "model", dirs[i], models[i].cfg.arch), &res[i]) == 0;
            rc = write_json(cmd, op->json, ok ? root : NULL);
            cJSON_Delete(root);
        }
    }
    for (int i = 0; i < done; i++) dt_icl_result_free(&res[i]);
    for (int i = 0; models && i < n; i++) dt_model_free(&models[i]);
    free(toks);
    free(models);
    free(res);
    return rc;
}

/* b: steps, batch, grad_accum, seq */
static double run_tokens(const int *b) { return (double)b[0] * b[1] * b[2] * b[3]; }

static int run_scaling(const char *cmd, char **dirs, int n, const options *op) {
    dt_error err;
    /* params: the fit's size, the non-embedding count (as the study's); all: every parameter, shown beside it */
    double *params = calloc((size_t)n, sizeof(double)), *loss = calloc((size_t)n, sizeof(double));
    double *all = calloc((size_t)n, sizeof(double));
    /* each loss's token budget, the tokens trained before it was measured: steps × batch × grad_accum × seq */
    int(*budget)[4] = calloc((size_t)n, sizeof *budget);
    int *arch = calloc((size_t)n, sizeof(int)), rc = 0;
    char first_diff[128] = "", first_base[128] = ""; /* the variant of each kind's first run */
    const char *first_diff_dir = NULL, *first_base_dir = NULL;
    if (!params || !loss || !all || !budget || !arch) rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    for (int i = 0; rc == 0 && i < n; i++) {
        dt_an_training t;
        char path[4200];
        dt_config c;
        if (dt_pathf(path, sizeof path, &err, "%s/config.json", dirs[i]) != 0 || dt_config_load(&c, path, &err) != 0) {
            rc = cli_fail(cmd, &err);
            break;
        }
        params[i] = (double)dt_config_nonembedding_param_count(&c);
        all[i] = (double)dt_config_param_count(&c);
        arch[i] = c.arch;
        /* two curves, DIFF's and the Transformer's, each through runs of one model at several sizes: a DIFF V2
         * run counted with the Transformer, or an ablation with the paper's model, would bend a curve */
        char what[128];
        dt_config_describe(&c, what, sizeof what);
        if (c.arch != DT_ARCH_DIFF && c.arch != DT_ARCH_LLAMA) {
            rc = cli_error(cmd, "%s: a %s model (%s); the scaling fit takes DIFF (diffllama) and Transformer (llama) "
                                "runs",
                           dirs[i], arch_name(c.arch), what);
            break;
        }
        char *first = c.arch == DT_ARCH_DIFF ? first_diff : first_base;
        const char *first_dir = c.arch == DT_ARCH_DIFF ? first_diff_dir : first_base_dir;
        if (!first[0]) {
            snprintf(first, sizeof first_diff, "%s", what);
            if (c.arch == DT_ARCH_DIFF) first_diff_dir = dirs[i];
            else first_base_dir = dirs[i];
        } else if (strcmp(first, what) != 0) {
            rc = cli_error(cmd, "%s is %s but %s is %s: each kind's fit takes runs of one model (the same ablations) "
                                "at several sizes",
                           dirs[i], what, first_dir, first);
            break;
        }
        if (dt_an_training_load(dirs[i], &t, &err) != 0) {
            rc = cli_fail(cmd, &err);
            break;
        }
        loss[i] = t.final_val_loss;
        if (t.batch > 0) { /* 0: no train_state.json, the budget unknown */
            budget[i][0] = t.final_val_step, budget[i][1] = t.batch;
            budget[i][2] = t.grad_accum, budget[i][3] = t.seq;
        }
        dt_an_training_free(&t);
        if (isnan(loss[i])) rc = cli_error(cmd, "%s: its metrics.jsonl has no validation loss", dirs[i]);
    }
    /* one curve through losses per token of different vocabularies would mean nothing */
    if (rc == 0 && dt_models_same_vocab((const char *const *)dirs, n, &err) != 0) rc = cli_fail(cmd, &err);
    if (rc == 0) {
        int *is_diff = malloc((size_t)n * sizeof *is_diff);
        for (int i = 0; i < n && is_diff; i++) is_diff[i] = arch[i] == DT_ARCH_DIFF;
        const dt_scaling_comparison sc = is_diff ? dt_scaling_compare(params, loss, is_diff, n) : (dt_scaling_comparison){0};
        const dt_scaling_fit *fit = sc.fit;
        const double largest_base = sc.base_params, largest_base_loss = sc.base_loss, need = sc.diff_params;
        const double fraction = is_diff ? sc.fraction : NAN;
        printf("analyze scaling: log(val loss) = a + b*log(N) per kind, N = non-embedding parameters\n");
        printf("%-*s %-11s %14s %12s %10s %12s\n", name_w, "run", "arch", "N (non-emb.)", "all params", "val loss",
               "tokens");
        for (int i = 0; i < n; i++) {
            printf("%-*s %-11s %14.0f %12.0f %10.4f", name_w, dirs[i], arch_name(arch[i]), params[i], all[i], loss[i]);
            if (budget[i][1]) printf(" %12.0f\n", run_tokens(budget[i]));
            else printf(" %12s\n", "?"); /* no train_state.json */
        }
        for (int k = 1; k >= 0; k--)
            if (isnan(fit[k].a) || isnan(fit[k].b))
                printf("fit %-11s %d run(s): none (needs runs at >= 2 sizes)\n", arch_name(k), fit[k].n);
            else
                printf("fit %-11s %d run(s): a %.4f  b %.4f\n", arch_name(k), fit[k].n, fit[k].a, fit[k].b);
        if (isnan(fraction))
            printf("DIFF size for the baseline's loss: not available (needs DIFF runs at >= 2 sizes, with loss falling "
                   "with size, and a baseline run)\n");
        else if (sc.base_runs > 1)
            printf("DIFF size for the baseline's loss at %.0f non-embedding parameters (%.4f, the mean of its %d runs "
                   "there): %.0f = %.2f of the baseline's (paper: ~0.65)\n",
                   largest_base, largest_base_loss, sc.base_runs, need, fraction);
        else
            printf("DIFF size for the baseline's loss at %.0f non-embedding parameters (%.4f): %.0f = %.2f of the "
                   "baseline's (paper: ~0.65)\n",
                   largest_base, largest_base_loss, need, fraction);
        if (!isnan(fraction) && isnan(fit[DT_ARCH_LLAMA].b)) /* one size: no slope to judge */
            printf("but the baseline's runs are of one size: whether its loss falls with size, as the paper's claim "
                   "has it, is not known\n");
        else if (!isnan(fraction) && !(fit[DT_ARCH_LLAMA].b < 0)) /* the paper's claim compares two falling curves */
            printf("but the baseline's loss did not fall with size (b %.4f): there is no scaling curve to compare DIFF "
                   "against, and the fraction says nothing about the paper's claim\n",
                   fit[DT_ARCH_LLAMA].b);
        /* a curve of loss against size holds the budget fixed, as the paper's sizes were trained on one: a run
         * trained on more tokens is lower for that and not its size, which bends the fit. Runs whose budget grows
         * with their size (`difftrans study`'s tokens per parameter) are a curve too, of another question. */
        int budgets_differ = 0, budgets_known = 0;
        for (int i = 0; i < n; i++) {
            budgets_known += budget[i][1] > 0;
            for (int k = 0; k < i; k++)
                if (budget[i][1] && budget[k][1] && run_tokens(budget[i]) != run_tokens(budget[k])) budgets_differ = 1;
        }
        if (budgets_differ) {
            printf("but the runs' token budgets differ (the tokens trained before the loss taken):");
            for (int i = 0; i < n; i++) {
                int seen = 0, more = 0;
                for (int k = 0; k < i && !seen; k++)
                    seen = budget[k][1] && run_tokens(budget[k]) == run_tokens(budget[i]);
                if (seen || !budget[i][1]) continue;
                for (int k = i + 1; k < n; k++) more += budget[k][1] && run_tokens(budget[k]) == run_tokens(budget[i]);
                printf("%s %s", i ? ";" : "", dirs[i]);
                if (more) printf(" and %d other run%s", more, more > 1 ? "s" : "");
                printf(": %.0f (%d step%s × batch %d", run_tokens(budget[i]), budget[i][0], budget[i][0] > 1 ? "s" : "",
                       budget[i][1]);
                if (budget[i][2] > 1) printf(" × grad_accum %d", budget[i][2]);
                printf(" × seq %d)", budget[i][3]);
            }
            printf(". A loss reflects its run's budget as well as its size, and the paper's ~0.65 compares sizes "
                   "trained on one budget\n");
        }
        if (op->json && is_diff) {
            cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "runs");
            cJSON_AddStringToObject(root, "analysis", "scaling");
            if (budgets_differ || budgets_known == n) cJSON_AddBoolToObject(root, "one_token_budget", !budgets_differ);
            else cJSON_AddNullToObject(root, "one_token_budget"); /* a run without train_state.json */
            cJSON_AddStringToObject(root, "size", "nonembedding_params"); /* the fit's N: "params" counts all */
            for (int i = 0; i < n; i++) {
                cJSON *e = json_entry(arr, "run", dirs[i], arch[i]);
                cJSON_AddNumberToObject(e, "params", all[i]);
                cJSON_AddNumberToObject(e, "nonembedding_params", params[i]);
                cJSON_AddNumberToObject(e, "final_val_loss", loss[i]);
                if (budget[i][1]) cJSON_AddNumberToObject(e, "tokens", run_tokens(budget[i]));
                else cJSON_AddNullToObject(e, "tokens");
            }
            for (int k = 0; k < 2; k++) {
                cJSON *f = cJSON_AddObjectToObject(root, k == DT_ARCH_DIFF ? "fit_diff" : "fit_transformer");
                cJSON_AddNumberToObject(f, "runs", fit[k].n);
                if (isnan(fit[k].b)) cJSON_AddNullToObject(f, "a"), cJSON_AddNullToObject(f, "b");
                else cJSON_AddNumberToObject(f, "a", fit[k].a), cJSON_AddNumberToObject(f, "b", fit[k].b);
            }
            if (isnan(fraction)) cJSON_AddNullToObject(root, "diff_params_fraction");
            else cJSON_AddNumberToObject(root, "diff_params_fraction", fraction);
            /* what the fraction is taken at, as the text says it: the baseline's largest size, its loss there
             * (the mean of its runs of that size) and the DIFF size the DIFF fit gives that loss */
            if (sc.base_runs > 0) {
                cJSON_AddNumberToObject(root, "baseline_nonembedding_params", largest_base);
                cJSON_AddNumberToObject(root, "baseline_val_loss", largest_base_loss);
                cJSON_AddNumberToObject(root, "baseline_runs", sc.base_runs);
            } else {
                cJSON_AddNullToObject(root, "baseline_nonembedding_params");
                cJSON_AddNullToObject(root, "baseline_val_loss");
                cJSON_AddNumberToObject(root, "baseline_runs", 0);
            }
            if (isnan(need)) cJSON_AddNullToObject(root, "diff_nonembedding_params");
            else cJSON_AddNumberToObject(root, "diff_nonembedding_params", need);
            rc = write_json(cmd, op->json, root);
            cJSON_Delete(root);
        }
        if (!is_diff) rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
        free(is_diff);
    }
    free(params);
    free(all);
    free(loss);
    free(budget);
    free(arch);
    return rc;
}

static int run_training(const char *cmd, char **dirs, int n, const options *op) {
    dt_error err;
    dt_an_training *res = calloc((size_t)n, sizeof *res);
    int rc = 0, done = 0;
    if (!res) return cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    for (; done < n; done++)
        if (dt_an_training_load(dirs[done], &res[done], &err) != 0) {
            rc = cli_fail(cmd, &err);
            break;
        }
    if (rc == 0) {
        printf("analyze training: spikes = grad_norm > mean + 3 std or > 3x median of the preceding <= %d steps (after "
               "%d)\n",
               DT_AN_SPIKE_WINDOW, DT_AN_SPIKE_MIN_HISTORY);
        printf("%-*s %-11s %6s %9s %9s | %9s %9s %9s %6s\n", name_w, "run", "arch", "steps", "train", "val", "gn mean",
               "gn std", "gn max", "spikes");
        for (int i = 0; i < n; i++) {
            const dt_an_training *t = &res[i];
            printf("%-*s %-11s %6d", name_w, dirs[i], arch_name(t->arch), t->n_steps);
            print_num(t->final_train_loss);
            print_num(t->final_val_loss);
            printf(" | %9.4g %9.4g %9.4g %6d\n", t->gn_mean, t->gn_std, t->gn_max, t->spikes);
        }
        printf("lambda per layer: first -> last [min, max]\n");
        int any_v2 = 0;
        for (int i = 0; i < n; i++) any_v2 |= res[i].arch == DT_ARCH_DIFF_V2;
        /* V2's λ is no parameter but a value per token and head, which the log can only hold as a mean */
        if (any_v2)
            printf("  (DIFF V2: λ_t is per token and head; each logged value is its mean over the tokens and heads "
                   "of the step's last forward, a validation batch on evaluation steps)\n");
        for (int i = 0; i < n; i++) {
            const dt_an_training *t = &res[i];
            printf("  %-26s", dirs[i]);
            if (t->arch == DT_ARCH_LLAMA)
                printf(" (baseline: no lambda)");
            else if (t->arch == DT_ARCH_DIFF_V2)
                printf(" (mean λ_t)");
            if (t->arch != DT_ARCH_LLAMA)
                for (int l = 0; l < t->n_layers; l++)
                    printf(" L%d %.4f -> %.4f [%.4f, %.4f]", l, t->lambda_first[l], t->lambda_last[l], t->lambda_min[l],
                           t->lambda_max[l]);
            printf("\n");
        }
        if (op->json) {
            cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "runs");
            cJSON_AddStringToObject(root, "analysis", "training");
            cJSON_AddStringToObject(
                root, "spike_rule",
                "grad_norm > mean + 3*std or > 3*median of the preceding <= 50 steps; >= 10 earlier steps");
            int ok = arr != NULL;
            for (int i = 0; ok && i < n; i++) {
                cJSON *e = json_entry(arr, "run", dirs[i], res[i].arch);
                ok = e && cJSON_AddStringToObject(e, "metrics", res[i].path) && dt_an_training_add_json(e, &res[i]) == 0;
                /* λ of a V2 run is the mean of the per-token λ over the logging step's last forward */
                if (ok && res[i].arch == DT_ARCH_DIFF_V2)
                    ok = cJSON_AddStringToObject(e, "lambda_is", "mean over the tokens and heads of the last forward")
                         != NULL;
            }
            rc = write_json(cmd, op->json, ok ? root : NULL);
            cJSON_Delete(root);
        }
    }
    for (int i = 0; i < n; i++) dt_an_training_free(&res[i]);
    free(res);
    return rc;
}

int cmd_analyze(int argc, char **argv) {
    if (argc < 2)
        return cli_error("analyze",
                         "expected a kind: outliers, quantize, allocation, training, icl or scaling (see difftrans analyze --help)");
    const char *kind = argv[1];
    if (!strcmp(kind, "--help") || !strcmp(kind, "-h") || !strcmp(kind, "help")) {
        help();
        return 0;
    }
    char cmd[64];
    snprintf(cmd, sizeof cmd, "analyze %.40s", kind);
    int k = !strcmp(kind, "outliers")     ? 0
            : !strcmp(kind, "quantize")   ? 1
            : !strcmp(kind, "allocation") ? 2
            : !strcmp(kind, "training")   ? 3
            : !strcmp(kind, "icl")        ? 4
            : !strcmp(kind, "scaling")    ? 5
                                          : -1;
    if (k < 0)
        return cli_error("analyze", "unknown kind '%s' (expected outliers, quantize, allocation, training, icl or scaling)",
                         kind);
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'},
        {"seq", required_argument, 0, 's'},
        {"batches", required_argument, 0, 'b'},
        {"bits", required_argument, 0, 'B'},
        {"per-row", no_argument, 0, 'r'},
        {"needle", required_argument, 0, 'n'},
        {"max-samples", required_argument, 0, 'm'},
        {"json", required_argument, 0, 'J'},
        {"threads", required_argument, 0, 'j'},
        {"shots", required_argument, 0, 'S'},
        {"permutations", required_argument, 0, 'P'},
        {"queries", required_argument, 0, 'Q'},
        {"seed", required_argument, 0, 'e'},
        {"schemes", required_argument, 0, 'W'},
        {"calib", required_argument, 0, 'C'},
        {"calib-samples", required_argument, 0, 'N'},
        {"smooth", required_argument, 0, 'A'},
        {"lm-head", no_argument, 0, 'L'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    options op = {.seq = 256, .batches = 4, .n_bits = 4, .bits = {16, 8, 6, 4}};
    op.wq = (cli_wquant_options){.alpha = 0.5f, .calib_samples = 300, .seed = 1};
    dt_icl_params_default(&op.icl);
    argc--;
    argv++;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'd':
            op.data = optarg;
            op.given_data = 1;
            break;
        case 's':
            bad = parse_int(cmd, "--seq", optarg, 1, 1 << 20, &op.seq);
            op.given_seq = 1;
            break;
        case 'b':
            bad = parse_int(cmd, "--batches", optarg, 1, 1 << 20, &op.batches);
            op.given_batches = 1;
            break;
        case 'B':
            bad = parse_bits(cmd, optarg, &op);
            op.given_bits = 1;
            break;
        case 'r':
            op.per_row = 1;
            op.given_per_row = 1;
            break;
        case 'n':
            op.needle = optarg;
            op.given_needle = 1;
            break;
        case 'm':
            bad = parse_int(cmd, "--max-samples", optarg, 1, DT_NEEDLE_MAX_SAMPLES, &op.max_samples);
            op.given_max = 1;
            break;
        case 'J': op.json = optarg; break;
        case 'j': bad = parse_int(cmd, "--threads", optarg, 1, 1024, &op.threads); break;
        case 'S': bad = parse_int(cmd, "--shots", optarg, 2, 256, &op.icl.shots), op.given_icl = 1; break;
        case 'P': bad = parse_int(cmd, "--permutations", optarg, 1, 1000, &op.icl.permutations), op.given_icl = 1; break;
        case 'Q': bad = parse_int(cmd, "--queries", optarg, 2, 100000, &op.icl.queries), op.given_icl = 1; break;
        case 'e': bad = parse_u64(cmd, "--seed", optarg, &op.icl.seed), op.given_icl = 1; break;
        case 'W': op.wq.schemes = optarg; break;
        case 'C': op.wq.calib = optarg, op.given_wq = 1; break;
        case 'N': bad = parse_int(cmd, "--calib-samples", optarg, 1, 1 << 24, &op.wq.calib_samples), op.given_wq = 1; break;
        case 'A': bad = parse_float(cmd, "--smooth", optarg, 0, 1, &op.wq.alpha), op.given_wq = 1; break;
        case 'L': op.wq.lm_head = 1, op.given_wq = 1; break;
        case 'h': help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    int n = argc - optind;
    char **dirs = argv + optind;
    if (n < 1)
        return cli_error(cmd, "expected at least one %s (see difftrans analyze --help)",
                         k == 3 || k == 5 ? "RUN_DIR" : "MODEL_DIR");
    /* options that do not apply to this kind are refused rather than ignored */
    const struct {
        int given;
        const char *name;
        int ok[6];
    } applies[] = {
        {op.given_data, "--data", {1, 1, 0, 0, 0, 0}},
        {op.given_seq, "--seq", {1, 1, 0, 0, 0, 0}},
        {op.given_batches, "--batches", {1, 1, 0, 0, 0, 0}},
        {op.given_bits, "--bits", {0, 1, 0, 0, 0, 0}},
        {op.given_per_row, "--per-row", {0, 1, 0, 0, 0, 0}},
        {op.given_needle, "--needle", {0, 1, 1, 0, 0, 0}},
        {op.given_max, "--max-samples", {0, 1, 1, 0, 0, 0}},
        {op.given_icl, "--shots/--permutations/--queries/--seed", {0, 0, 0, 0, 1, 0}},
    };
    for (size_t i = 0; i < sizeof applies / sizeof applies[0]; i++)
        if (applies[i].given && !applies[i].ok[k])
            return cli_error(cmd, "%s does not apply to analyze %s", applies[i].name, kind);
    if ((k == 0 || k == 1) && !op.data) return cli_error(cmd, "--data FILE.txt is required");
    if (k == 2 && !op.needle)
        return cli_error(cmd, "--needle DIR is required (a `difftrans needle generate` directory)");
    if (op.given_max && k == 1 && !op.needle) return cli_error(cmd, "--max-samples needs --needle DIR");
    if (k == 1 && !op.wq.schemes && op.given_wq)
        return cli_error(cmd, "--calib, --calib-samples, --smooth and --lm-head need --schemes");
    if (k == 1 && op.wq.schemes && (op.given_bits || op.given_per_row))
        return cli_error(cmd, "--bits / --per-row quantise attention logits; --schemes quantises weights: one at a time");
    if (op.wq.schemes && k != 1) return cli_error(cmd, "--schemes does not apply to analyze %s", kind);
    for (int i = 0; i < n; i++)
        if ((int)strlen(dirs[i]) > name_w) name_w = strlen(dirs[i]) < 200 ? (int)strlen(dirs[i]) : 200;
    /* training and scaling read what `difftrans train` leaves in its --out (config.json,
     * metrics.jsonl): a model file (a GGUF one, say) failed on a path inside it, "Not a directory" */
    for (int i = 0; (k == 3 || k == 5) && i < n; i++) {
        struct stat st;
        if (stat(dirs[i], &st) == 0 && !S_ISDIR(st.st_mode))
            return cli_error(cmd, "%s: is a file; analyze %s reads training run directories (a `difftrans train` "
                                  "--out, with its metrics.jsonl)",
                             dirs[i], kind);
    }
    cli_set_threads(op.threads);
    switch (k) {
    case 0: return run_outliers(cmd, dirs, n, &op);
    case 1:
        if (op.wq.schemes) {
            op.wq.data = op.data, op.wq.needle = op.needle, op.wq.json = op.json;
            op.wq.seq = op.seq, op.wq.windows = op.batches, op.wq.max_samples = op.max_samples;
            return cli_analyze_wquant(cmd, dirs, n, &op.wq);
        }
        return run_quantize(cmd, dirs, n, &op);
    case 2: return run_allocation(cmd, dirs, n, &op);
    case 3: return run_training(cmd, dirs, n, &op);
    case 4: return run_icl(cmd, dirs, n, &op);
    default: return run_scaling(cmd, dirs, n, &op);
    }
}
