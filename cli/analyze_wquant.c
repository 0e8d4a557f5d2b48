/* analyze_wquant.c — `difftrans analyze quantize MODEL... --schemes LIST`: the quality of
 * post-training weight / activation quantisation per scheme, every model side by side (the
 * computation and its definitions are in src/analysis/wquant.c; this file parses and prints). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans_analysis.h"
#include "cli.h"

static const char *arch_label(const dt_model *m) { return dt_arch_label(m->cfg.arch); }

static void print_rows(const char *dir, const dt_model *m, const dt_an_wq_row *rows, int n, int needle) {
    for (int r = 0; r <= n; r++) {
        const dt_an_wq_row *q = &rows[r];
        printf("%-24s %-11s %-20s | %8.4f %+9.4f %9.5f %8.4f %8.4f", dir, arch_label(m), q->name, q->loss,
               q->loss_delta, q->kl, q->top1_agree, q->accuracy);
        if (needle) printf(" %7.3f", q->needle_total > 0 ? (double)q->needle_correct / q->needle_total : 0.0);
        printf(" | %8.2f\n", q->decode_mb);
    }
}

static void print_outliers(const char *dir, const dt_model *m, const dt_an_wq_row *rows, int n) {
    for (int r = 1; r <= n; r++) {
        const dt_an_wq_row *q = &rows[r];
        for (int t = 0; t < q->n_types; t++) {
            const dt_an_wq_outliers *o = &q->types[t];
            printf("%-24s %-11s %-20s %-10s | %10.4g %10.2f | %10.4g %10.2f\n", dir, arch_label(m), q->name, o->type,
                   o->absmax, o->ratio, o->absmax_smoothed, o->ratio_smoothed);
        }
    }
}

int cli_analyze_wquant(const char *cmd, char **dirs, int n, const cli_wquant_options *o) {
    dt_error err;
    dt_an_wq_scheme schemes[DT_AN_WQ_MAX_SCHEMES];
    int ns = 0;
    if (dt_an_wq_parse_schemes(o->schemes, o->alpha, schemes, &ns, &err) != 0)
        return cli_error_code(cmd, err.code, "--schemes: %s", err.msg);
    int *tok = NULL, *cal = NULL;
    size_t ntok = 0, ncal = 0;
    if (dt_models_text((const char *const *)dirs, n, o->data, &tok, &ntok, &err) != 0)
        return cli_error_code(cmd, err.code, "--data: %s", err.msg);
    if (o->calib && dt_models_text((const char *const *)dirs, n, o->calib, &cal, &ncal, &err) != 0) {
        free(tok);
        return cli_error_code(cmd, err.code, "--calib: %s", err.msg);
    }
    dt_an_wq_params p = {.seq = o->seq, .windows = o->windows, .calib_samples = o->calib_samples, .calib_seq = o->seq,
                         .seed = o->seed, .lm_head = o->lm_head, .max_samples = o->max_samples};
    dt_needle_testset ts = {0};
    int rc = 0;
    /* held out: what `train` holds out of --data; calibration: the rest, or --calib */
    if (dt_an_wq_split(&p, tok, ntok, cal, ncal, &err) != 0) rc = cli_error_code(cmd, err.code, "--data %s: %s", o->data, err.msg);
    char calib_source[4200];
    snprintf(calib_source, sizeof calib_source, o->calib ? "--calib %s" : "the calibration part of --data %s",
             o->calib ? o->calib : o->data);
    p.calib_source = calib_source;
    if (rc == 0 && o->needle) {
        if (dt_needle_load_testset(&ts, o->needle, &err) != 0)
            rc = cli_error_code(cmd, err.code, "--needle: %s", err.msg);
        else p.needle = &ts;
    }
    dt_model *models = calloc((size_t)n, sizeof *models);
    dt_an_wq_row *rows = calloc((size_t)n * (ns + 1), sizeof *rows);
    int loaded = 0;
    if (rc == 0 && (!models || !rows)) rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    for (; rc == 0 && loaded < n; loaded++) {
        if (dt_model_load(&models[loaded], dirs[loaded], &err) != 0) {
            rc = cli_fail(cmd, &err);
            break;
        }
        if (dt_model_quant_scheme(&models[loaded], NULL) != DT_QUANT_NONE)
            rc = cli_error(cmd, "%s is already quantised: give the float model (each scheme is applied to it here)",
                           dirs[loaded]);
        else if (o->seq > models[loaded].cfg.max_position_embeddings)
            rc = cli_error(cmd, "--seq %d: more than %s's max_position_embeddings %d", o->seq, dirs[loaded],
                           models[loaded].cfg.max_position_embeddings);
        else {
            fprintf(stderr, "analyze quantize: %s (%d scheme(s))\n", dirs[loaded], ns);
            p.needle_tok = dt_model_tok(&models[loaded]); /* the needle texts go through the model's tokenizer */
            if (dt_an_wq_run(&models[loaded], &p, schemes, ns, &rows[(size_t)loaded * (ns + 1)], &err) != 0)
                rc = cli_error_code(cmd, err.code, "%s: %s", dirs[loaded], err.msg);
        }
        if (rc != 0) {
            loaded++; /* free this one too */
            break;
        }
    }
    if (rc == 0) {
        printf("analyze quantize: post-training quantisation of the linear layers; held-out: last tenth of %s, "
               "%zu predictions per model; calibration: %d windows of %d from %s\n",
               o->data, rows[0].count, o->calib_samples, o->seq, o->calib ? o->calib : "the rest of --data");
        printf("%-24s %-11s %-20s | %8s %9s %9s %8s %8s", "model", "arch", "scheme", "loss", "Δ loss", "KL", "top1 agr",
               "accuracy");
        if (o->needle) printf(" %7s", "needle");
        printf(" | %8s\n", "MB/token");
        for (int i = 0; i < n; i++) print_rows(dirs[i], &models[i], &rows[(size_t)i * (ns + 1)], ns, o->needle != NULL);
        printf("\nactivation outliers at the inputs of the quantised layers (calibrated w8a8 rows): largest per-channel\n"
               "absmax, and absmax / median channel absmax (mean over layers), before | after smoothing\n");
        printf("%-24s %-11s %-20s %-10s | %10s %10s | %10s %10s\n", "model", "arch", "scheme", "layer", "absmax",
               "max/median", "absmax", "max/median");
        for (int i = 0; i < n; i++) print_outliers(dirs[i], &models[i], &rows[(size_t)i * (ns + 1)], ns);
        if (o->json) {
            cJSON *root = cJSON_CreateObject(), *arr = root ? cJSON_AddArrayToObject(root, "models") : NULL;
            int ok = arr && cJSON_AddStringToObject(root, "analysis", "quantize_weights") &&
                     cJSON_AddStringToObject(root, "data", o->data) && cJSON_AddNumberToObject(root, "seq", o->seq) &&
                     cJSON_AddNumberToObject(root, "calib_samples", o->calib_samples) &&
                     (o->alpha < 0 || cJSON_AddNumberToObject(root, "smooth_alpha", o->alpha));
            for (int i = 0; ok && i < n; i++) {
                cJSON *e = cJSON_CreateObject(), *r = dt_an_wq_rows_json(&rows[(size_t)i * (ns + 1)], ns);
                ok = e && r && cJSON_AddItemToArray(arr, e) && cJSON_AddStringToObject(e, "model", dirs[i]) &&
                     cJSON_AddStringToObject(e, "arch", arch_label(&models[i])) && cJSON_AddItemToObject(e, "schemes", r);
            }
            if (!ok) rc = cli_error_code(cmd, DT_ERR_NOMEM, "%s: out of memory building the JSON", o->json);
            else if (dt_an_write_json(o->json, root, &err) != 0) rc = cli_fail(cmd, &err);
            cJSON_Delete(root);
        }
    }
    for (int i = 0; i < loaded; i++) {
        dt_an_wq_rows_free(&rows[(size_t)i * (ns + 1)], ns);
        dt_model_free(&models[i]);
    }
    free(rows);
    free(models);
    free(tok);
    free(cal);
    dt_needle_testset_free(&ts);
    return rc;
}
