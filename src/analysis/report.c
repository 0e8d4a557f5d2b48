/* report.c — runs every analysis on one trained model (rp_analyze_model) and writes a report's
 * files (rp_write): the rendering is in report_md.c and report_json.c, the plots in plots.c. */
#include "analysis/report.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/plots.h"
#include "analysis/textbuf.h"

/* ---------------------------------------------------------------- collecting */

void rp_model_free(rp_model *m) {
    free(m->lambda);
    dt_an_training_free(&m->training);
    dt_an_outliers_free(&m->outliers);
    dt_needle_results_free(&m->needle);
    dt_an_allocation_free(&m->allocation);
    dt_icl_result_free(&m->icl);
    if (m->n_wq) dt_an_wq_rows_free(m->wq, m->n_wq - 1);
    for (int k = 0; k < DT_N_TASKS; k++) dt_task_result_free(&m->task[k]);
    dt_an_protocol_free(&m->protocol);
    dt_an_protocol_free(&m->protocol_train);
    memset(m, 0, sizeof *m);
}

int rp_analyze_model(rp_model *out, const char *dir, const char *name, const rp_analysis_options *o, dt_error *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    if (dt_pathf(out->dir, sizeof out->dir, err, "%s", dir) != 0) return -1;
    if (o->n_bits < 0 || o->n_bits > RP_MAX_BITS) return dt_fail(err, "report: %d bit widths (at most %d)", o->n_bits, RP_MAX_BITS);
    dt_model m;
    if (dt_model_load(&m, dir, err) != 0) return -1;
    const dt_tok *tok = dt_model_tok(&m); /* NULL: bytes */
    out->cfg = m.cfg;
    out->n_params = m.n_params;
    const int L = m.cfg.num_hidden_layers;
    int rc = o->needle ? dt_model_check_text(&m, err) : 0; /* its needle texts go through the tokenizer */
    if (rc == 0 && m.cfg.arch == DT_ARCH_DIFF) {
        out->lambda = calloc((size_t)L, sizeof *out->lambda);
        if (!out->lambda) rc = dt_fail_oom(err, "%s: out of memory", dir);
        for (int l = 0; l < L && rc == 0; l++) out->lambda[l] = dt_model_lambda(&m, l);
    }
    if (rc == 0) rc = dt_an_training_load(dir, &out->training, err);
    if (rc == 0) rc = dt_an_outliers_run(&m, o->tokens, o->n, o->seq, o->windows, &out->outliers, err);
    if (rc == 0) {
        const dt_an_quant_params qp = {.tokens = o->tokens, .n = o->n, .seq = o->seq, .windows = o->windows,
                                       .n_bits = o->n_bits, .bits = o->bits, .needle = o->needle, .needle_tok = tok,
                                       .max_samples = o->allocation_samples};
        rc = dt_an_quant_run(&m, &qp, out->quant, err);
        if (rc == 0) out->n_quant = o->n_bits + 1;
    }
    if (rc == 0 && o->protocol_bins > 0) {
        /* the same evaluator on both texts: the gap between them is the memorisation signature */
        if (dt_an_protocol_run(&m, o->tokens, o->n, o->seq, o->protocol_windows, o->protocol_bins, &out->protocol,
                               err) != 0)
            rc = dt_fail_prefix(err, "held-out text");
        else if (o->train_tokens && dt_an_protocol_run(&m, o->train_tokens, o->train_n, o->seq, o->protocol_windows,
                                                       o->protocol_bins, &out->protocol_train, err) != 0)
            rc = dt_fail_prefix(err, "training text");
    }
    if (rc == 0 && o->calib_tokens) {
        /* the linear layers quantised (difftrans quantize), scored against F32 on the held-out text;
         * as many calibration windows as the training text holds, up to calib_samples */
        const size_t fit = o->calib_n / (size_t)o->seq, want = (size_t)(o->calib_samples > 0 ? o->calib_samples : 300);
        dt_an_wq_params p = {.eval_tokens = o->tokens, .eval_n = o->n, .seq = o->seq, .windows = o->windows,
                          .calib_tokens = o->calib_tokens, .calib_n = o->calib_n,
                          .calib_samples = (int)(fit < want ? fit : want), .calib_seq = o->seq, .seed = 1,
                          .needle = o->needle, .needle_tok = tok, .max_samples = o->allocation_samples};
        dt_an_wq_scheme schemes[DT_AN_WQ_MAX_SCHEMES];
        int ns = 0;
        if (p.calib_samples < 1) rc = dt_fail(err, "the training text is shorter than one calibration window of %d", o->seq);
        if (rc == 0) rc = dt_an_wq_parse_schemes("q8_0,q4_0,w8a8,w8a8-smooth", 0.5f, schemes, &ns, err);
        if (rc == 0) rc = dt_an_wq_run(&m, &p, schemes, ns, out->wq, err);
        if (rc == 0) out->n_wq = ns + 1;
    }
    if (rc == 0 && o->needle) {
        out->have_needle = 1;
        rc = dt_needle_eval(&m, tok, o->needle, &out->needle, NULL, NULL, err);
        if (rc == 0) rc = dt_an_allocation_run(&m, tok, o->needle, o->allocation_samples, &out->allocation, err);
    }
    if (rc == 0) {
        /* as many demonstrations (up to 8) as the model's context holds */
        dt_icl_params_default(&out->icl_setup);
        while (out->icl_setup.shots > 2 && out->icl_setup.shots * 28 + 26 > m.cfg.max_position_embeddings)
            out->icl_setup.shots -= 2;
        rc = dt_icl_run(&m, tok, &out->icl_setup, &out->icl, err);
    }
    for (int k = 0; k < DT_N_TASKS && rc == 0; k++) {
        if (!(o->tasks & (1 << k))) continue;
        dt_task_eval_options eo = o->task_eval;
        eo.max_len = m.cfg.max_position_embeddings;
        rc = dt_task_evaluate(&m, (dt_task_kind)k, &eo, &out->task[k], err);
        if (rc == 0) out->tasks |= 1 << k;
    }
    dt_model_free(&m);
    if (rc != 0) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        rp_model_free(out);
        return dt_fail_code(err, err->code, "%s (%s): %s", dir, name, msg);
    }
    return 0;
}

/* ---------------------------------------------------------------- writing */

int rp_write(const rp_report *r, const char *out_dir, dt_error *err) {
    char note[4600], path[4200];
    int plots = pl_write(r, out_dir, note, sizeof note, err);
    if (plots < 0) return -1;
    cJSON *root = rp_json(r, plots);
    if (dt_pathf(path, sizeof path, err, "%s/report.json", out_dir) != 0) {
        cJSON_Delete(root);
        return -1;
    }
    if (!root) return dt_fail_oom(err, "%s: out of memory building the JSON", path);
    int rc = dt_an_write_json(path, root, err);
    cJSON_Delete(root);
    if (rc) return -1;
    char *md = rp_markdown(r, plots, note);
    if (!md) return dt_fail_oom(err, "%s/REPORT.md: out of memory building the text", out_dir);
    textbuf b = {.s = md, .n = strlen(md), .cap = strlen(md) + 1};
    rc = dt_pathf(path, sizeof path, err, "%s/REPORT.md", out_dir);
    if (rc == 0) rc = tb_write(path, &b, err);
    free(md);
    return rc;
}
