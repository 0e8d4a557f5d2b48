/* test_report.c — rp_write on planted results of three runs per model (no training): means with 95%
 * intervals in the tables, the verdict sentence drawn from the paired interval reads the same
 * whichever model wins and names neither when the interval spans zero, missing numbers show as "—"
 * in REPORT.md and null in report.json, the paper figures sit in their columns, needle accuracy per
 * post-training quantisation scheme sits DIFF beside Transformer in both files, and a missing run
 * directory is an error naming the file; the reproduction protocol's section renders every planted
 * number, with n/a (never nan) where a measure does not apply or was not taken. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>
#include <sys/stat.h>

#include "analysis/report.h"
#include "difftrans.h"
#include "testutil.h"

/* A run directory with a two-line metrics.jsonl (what the plots read when gnuplot is there). */
static void fake_model(rp_model *m, const char *name, const char *sub, double val_loss, double logit_top1) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    tu_path(m->dir, sizeof m->dir, sub);
    mkdir(m->dir, 0755);
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", m->dir);
    const char *lines = "{\"step\":1,\"train_loss\":5.0,\"val_loss\":5.1,\"lr\":0.001,\"grad_norm\":1.5,\"lambda\":[0.2]}\n"
                        "{\"step\":2,\"train_loss\":4.0,\"lr\":0.001,\"grad_norm\":1.2,\"lambda\":[0.3]}\n";
    tu_write_file(path, lines, strlen(lines));
    dt_error err;
    assert_int_equal(dt_config_preset(&m->cfg, "tiny", strcmp(name, "DIFF") ? DT_ARCH_LLAMA : DT_ARCH_DIFF, &err), 0);
    m->training.final_train_loss = 4.0;
    m->training.final_val_loss = val_loss;
    m->training.gn_max = 1.5;
    m->outliers.logits.top1 = logit_top1;
    m->outliers.hidden.top1 = 3.0;
    m->n_quant = 2;
    m->quant[0].bits = 0;
    m->quant[0].loss = 2.0;
    m->quant[1].bits = 4;
    m->quant[1].loss = 2.5;
}

enum { SEEDS = 3 };

/* REPORT.md (returned, malloc'd) and report.json of two variants × SEEDS runs into OUT_NAME. */
static char *report_of(rp_model *runs, const char *out_name) {
    char out[4200];
    tu_path(out, sizeof out, out_name);
    mkdir(out, 0755);
    rp_report r = {.command = "difftrans compare --quick", .seed = 5, .preset = "tiny", .data = "x.txt",
                   .train_text = "x.txt", .steps = 2, .batch = 1, .seq = 8, .heldout_tokens = 100, .windows = 1,
                   .n_variants = 2, .n_seeds = SEEDS, .variant_key = {"diff", "transformer"}, .runs = runs,
                   .diff = 0, .base = 1, .n_sizes = 1};
    dt_error err;
    if (rp_write(&r, out, &err) != 0) fail_msg("%s", err.msg);
    char path[4300];
    snprintf(path, sizeof path, "%s/REPORT.md", out);
    return tu_read_file(path, NULL);
}

/* Two variants × SEEDS runs; DIFF's validation losses dval[s], the Transformer's tval[s]. */
static char *write_report(const double *dval, const double *tval, const char *out_name) {
    rp_model runs[2 * SEEDS];
    for (int s = 0; s < SEEDS; s++) {
        char sub[32];
        snprintf(sub, sizeof sub, "%s_d%d", out_name, s);
        fake_model(&runs[s], "DIFF", sub, dval[s], 38.8 + s);
        snprintf(sub, sizeof sub, "%s_t%d", out_name, s);
        fake_model(&runs[SEEDS + s], "Transformer", sub, tval[s], 318.0 + s);
    }
    return report_of(runs, out_name);
}

/* The sentence of the final validation loss: from its first word to the end of the line. */
static char *sentence(char *md, const char *first) {
    char *p = strstr(md, "on the final validation loss:");
    assert_non_null(p);
    while (p > md && p[-1] != '\n') p--;
    char *e = strchr(p, '\n');
    *e = '\0';
    assert_true(strncmp(p, first, strlen(first)) == 0);
    return p;
}

static void test_verdict_symmetric(void **state) {
    (void)state;
    /* differences -1.0, -1.2, -0.9: the 95% interval (-1.41, -0.65) excludes 0 */
    const double low[SEEDS] = {1.0, 1.1, 0.9}, high[SEEDS] = {2.0, 2.3, 1.8};
    char *a = write_report(low, high, "a"), *b = write_report(high, low, "b");
    assert_non_null(strstr(a, "difftrans compare --quick"));
    assert_non_null(strstr(a, "3 run(s) per model with seeds 5..7"));
    assert_non_null(strstr(a, "| largest attention logit | 38.8 | 318.0 | 39.8 ± 2.484 | 319 ± 2.484 |"));
    char *sa = sentence(a, "DIFF better"), *sb = sentence(b, "Transformer better");
    assert_string_equal(sa, "DIFF better on the final validation loss: 1.0000 ± 0.2484 against 2.0333 ± 0.6252 for "
                            "Transformer (difference -1.0333, 95% CI -1.4128 to -0.6538, over 3 paired runs; lower is "
                            "better).");
    /* the same sentence with the names swapped and the difference's sign turned */
    assert_string_equal(sb, "Transformer better on the final validation loss: 1.0000 ± 0.2484 against 2.0333 ± 0.6252 "
                            "for DIFF (difference 1.0333, 95% CI 0.6538 to 1.4128, over 3 paired runs; lower is "
                            "better).");
    free(a);
    free(b);
    /* an interval across zero: neither is named */
    const double mixed[SEEDS] = {1.0, 2.0, 1.5}, flat[SEEDS] = {1.5, 1.5, 1.5};
    char *c = write_report(mixed, flat, "u");
    sentence(c, "No difference this run can resolve");
    free(c);
}

static void test_missing_values(void **state) {
    (void)state;
    const double none[SEEDS] = {NAN, NAN, NAN}, two[SEEDS] = {2.0, 2.0, 2.0};
    char *a = write_report(none, two, "c");
    assert_non_null(strstr(a, "| final validation loss (nats/byte) | — | — | — | 2.0000 ± 0.0000 |"));
    assert_non_null(strstr(a, "No difference this run can resolve on the final validation loss: a value is missing."));
    free(a);
    char path[4300];
    tu_path(path, sizeof path, "c/report.json");
    char *j = tu_read_file(path, NULL);
    assert_non_null(strstr(j, "\"final_val_loss\":\tnull"));
    free(j);
}

/* Post-training quantisation rows f32, q8_0, w8a8 with the needle set: `correct` of 20 each. */
static void plant_wq(rp_model *m, int f32, int q8, int w8a8) {
    const char *names[] = {"f32", "q8_0", "w8a8"};
    const int correct[] = {f32, q8, w8a8};
    m->n_wq = 3;
    for (int i = 0; i < 3; i++) {
        snprintf(m->wq[i].name, sizeof m->wq[i].name, "%s", names[i]);
        m->wq[i].loss = 2.0 + 0.01 * i;
        m->wq[i].loss_delta = 0.01 * i;
        m->wq[i].top1_agree = 1.0 - 0.01 * i;
        m->wq[i].count = 100;
        m->wq[i].needle_correct = correct[i];
        m->wq[i].needle_total = 20;
    }
}

static void test_wquant_needle_side_by_side(void **state) {
    (void)state;
    rp_model runs[2 * SEEDS];
    /* DIFF keeps its needle accuracy under w8a8 (18, 17, 18 of 20), the Transformer loses it (10, 12, 9) */
    const int diff_w8a8[SEEDS] = {18, 17, 18}, base_w8a8[SEEDS] = {10, 12, 9};
    for (int s = 0; s < SEEDS; s++) {
        char sub[32];
        snprintf(sub, sizeof sub, "wq_d%d", s);
        fake_model(&runs[s], "DIFF", sub, 1.0, 38.8);
        plant_wq(&runs[s], 19, 19, diff_w8a8[s]);
        snprintf(sub, sizeof sub, "wq_t%d", s);
        fake_model(&runs[SEEDS + s], "Transformer", sub, 1.0, 318.0);
        plant_wq(&runs[SEEDS + s], 19, 18, base_w8a8[s]);
    }
    char *md = report_of(runs, "wq");
    assert_non_null(strstr(md, "## Post-training quantisation of weights and activations"));
    assert_non_null(strstr(md, "| f32: needle exact match | — | — | 0.950 ± 0.000 | 0.950 ± 0.000 |"));
    assert_non_null(strstr(md, "| q8_0: needle exact match | — | — | 0.950 ± 0.000 | 0.900 ± 0.000 |"));
    assert_non_null(strstr(md, "| w8a8: needle exact match | — | — | 0.883 ± "));
    assert_non_null(strstr(md, "DIFF better on needle exact match with static 8-bit activations (w8a8): 0.883 ± 0.072 against 0.517 ± 0.190"));
    free(md);
    char path[4300];
    tu_path(path, sizeof path, "wq/report.json");
    char *j = tu_read_file(path, NULL);
    assert_non_null(strstr(j, "\"needle_accuracy_w8a8\""));
    assert_non_null(strstr(j, "\"needle_accuracy\":\t0.9"));
    /* the summary's w8a8 entry: DIFF's mean (0.883…) and its verdict against the Transformer */
    const char *e = strstr(j, "\"needle_accuracy_w8a8\"");
    assert_non_null(e);
    assert_non_null(strstr(e, "0.88333"));
    assert_non_null(strstr(e, "\"verdict\":\t\"variant better\""));
    free(j);
    /* without a needle set (needle_total −1) there is no needle table and no summary key */
    for (int i = 0; i < 2 * SEEDS; i++)
        for (int k = 0; k < 3; k++) runs[i].wq[k].needle_total = runs[i].wq[k].needle_correct = -1;
    md = report_of(runs, "wq");
    assert_non_null(strstr(md, "| w8a8: KL from F32 |"));
    assert_null(strstr(md, ": needle exact match |"));
    free(md);
    j = tu_read_file(path, NULL);
    assert_null(strstr(j, "needle_accuracy_"));
    free(j);
}

/* The reproduction protocol of run s: DIFF (2 heads of the tiny preset) or the Transformer (4), with
 * λ at two points of training for DIFF; the arrays are malloc'd (unplant_protocol frees them). */
static double *doubles(int n, const double *v) {
    double *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    memcpy(x, v, (size_t)n * sizeof *x);
    return x;
}

static void plant_protocol(rp_model *m, int diff, int s, int with_train) {
    dt_an_protocol *p = &m->protocol, *t = &m->protocol_train;
    const int heads = diff ? 2 : 4;
    *p = (dt_an_protocol){.n_layers = 2, .n_heads = heads, .seq = 8, .windows = 3, .n_bins = 2, .head_width = 16,
                          .bin_start = {0, 4, 8}};
    p->loss = (diff ? 2.0 : 2.5) + 0.1 * s;
    p->bin_loss[0] = 2.4;
    p->bin_loss[1] = (diff ? 1.8 : 2.6) + 0.1 * s;
    const double nan2[2] = {NAN, NAN};
    p->lambda = doubles(2, diff ? (const double[]){0.2, 0.3} : nan2);
    p->sink_mass = doubles(2, diff ? (const double[]){0.05, 0.1} : (const double[]){0.5, 0.6});
    p->sink_mass_map1 = doubles(2, diff ? (const double[]){0.3, 0.4} : nan2);
    p->sink_mass_map2 = doubles(2, diff ? (const double[]){0.25, 0.3} : nan2);
    p->head_rms = doubles(2 * heads, diff ? (const double[]){0.25, 0.5, 0.5, 0.75} : (const double[]){1, 2, 3, 4, 5, 6, 7, 8});
    if (with_train) {
        *t = *p;
        t->lambda = t->sink_mass = t->sink_mass_map1 = t->sink_mass_map2 = t->head_rms = NULL;
        t->loss = (diff ? 1.0 : 2.3) + 0.1 * s;
        t->bin_loss[0] = 1.0;
        t->bin_loss[1] = (diff ? 1.0 : 2.4) + 0.1 * s;
    }
    if (diff) {
        m->training.n_layers = 2;
        m->training.n_lambda_points = 2;
        m->training.lambda_step[0] = 1;
        m->training.lambda_step[1] = 2;
        m->training.lambda_at = doubles(4, (const double[]){0.2, 0.25, 0.3, 0.35}); /* [point][layer] */
    }
}

static void unplant_protocol(rp_model *runs, int n) {
    for (int i = 0; i < n; i++) {
        dt_an_protocol_free(&runs[i].protocol);
        dt_an_protocol_free(&runs[i].protocol_train);
        free(runs[i].training.lambda_at);
        runs[i].training.lambda_at = NULL;
    }
}

/* No "nan" printed where a number is missing: REPORT.md writes n/a (or —), report.json null. */
static void assert_no_nan(const char *text) {
    assert_null(strstr(text, " nan"));
    assert_null(strstr(text, "-nan"));
    assert_null(strstr(text, "|nan"));
}

static void test_protocol_section(void **state) {
    (void)state;
    rp_model runs[2 * SEEDS];
    for (int s = 0; s < SEEDS; s++) {
        char sub[32];
        snprintf(sub, sizeof sub, "pr_d%d", s);
        fake_model(&runs[s], "DIFF", sub, 1.0, 38.8);
        plant_protocol(&runs[s], 1, s, 1);
        snprintf(sub, sizeof sub, "pr_t%d", s);
        fake_model(&runs[SEEDS + s], "Transformer", sub, 1.0, 318.0);
        plant_protocol(&runs[SEEDS + s], 0, s, 1);
    }
    char *md = report_of(runs, "pr");
    assert_non_null(strstr(md, "## Reproduction protocol"));
    assert_non_null(strstr(md, "memorisation signature"));
    assert_non_null(strstr(md, "3 window(s) of 8 bytes spread evenly"));
    assert_non_null(strstr(md, "| training-text loss | — | — | 1.1000 ± 0.2484 | 2.4000 ± 0.2484 |"));
    assert_non_null(strstr(md, "| held-out loss | — | — | 2.1000 ± 0.2484 | 2.6000 ± 0.2484 |"));
    assert_non_null(strstr(md, "| gap (held-out − training) | — | — | 1.0000 ± 0.0000 | 0.2000 ± 0.0000 |"));
    assert_non_null(strstr(md, "DIFF better on the held-out loss of the protocol's windows: 2.1000 ± 0.2484 against "
                               "2.6000 ± 0.2484 for Transformer"));
    assert_non_null(strstr(md, "Transformer better on the held-out − training gap: 0.2000 ± 0.0000 against 1.0000 ± "
                               "0.0000 for DIFF"));
    assert_non_null(strstr(md, "| held-out, positions 4–7 | — | — | 1.9000 ± 0.2484 | 2.7000 ± 0.2484 |"));
    assert_non_null(strstr(md, "| gap, positions 4–7 | — | — | 0.8000 ± 0.0000 | 0.2000 ± 0.0000 |"));
    /* λ over training: DIFF only, layer 0 at steps 1 and 2 */
    assert_non_null(strstr(md, "| layer | λinit | step 1 | step 2 |"));
    assert_non_null(strstr(md, "| 0 | 0.2000 | 0.2000 ± 0.0000 | 0.3000 ± 0.0000 |"));
    /* the Transformer has no softmax map pair: n/a */
    assert_non_null(strstr(md, "| layer 1: head maps | — | — | 0.1000 ± 0.0000 | 0.6000 ± 0.0000 |"));
    assert_non_null(strstr(md, "| layer 0: first softmax map | — | — | 0.3000 ± 0.0000 | n/a |"));
    assert_non_null(strstr(md, "| layer 1: second softmax map | — | — | 0.3000 ± 0.0000 | n/a |"));
    assert_non_null(strstr(md, "| layer 0: mean over heads | — | — | 0.375 ± 0 | 2.5 ± 0 |"));
    assert_non_null(strstr(md, "| layer 1: smallest head | — | — | 0.5 ± 0 | 5 ± 0 |"));
    assert_non_null(strstr(md, "| layer 1: largest head | — | — | 0.75 ± 0 | 8 ± 0 |"));
    assert_non_null(strstr(md, "| loss spikes (gradient-norm spikes) |"));
    assert_no_nan(md);
    free(md);
    char path[4300];
    tu_path(path, sizeof path, "pr/report.json");
    char *j = tu_read_file(path, NULL);
    assert_no_nan(j);
    assert_non_null(strstr(j, "\"protocol_gap\""));
    assert_non_null(strstr(j, "\"sink_mass_map1\":\t[null, null]"));
    assert_non_null(strstr(j, "\"lambda_points\""));
    free(j);

    /* no training-text side: its loss and the gaps are n/a, never nan */
    for (int i = 0; i < 2 * SEEDS; i++) dt_an_protocol_free(&runs[i].protocol_train);
    md = report_of(runs, "pr");
    assert_non_null(strstr(md, "| training-text loss | — | — | n/a | n/a |"));
    assert_non_null(strstr(md, "| gap, positions 0–3 | — | — | n/a | n/a |"));
    assert_non_null(strstr(md, "No difference this run can resolve on the held-out − training gap: a value is missing."));
    assert_no_nan(md);
    free(md);
    j = tu_read_file(path, NULL);
    assert_no_nan(j);
    free(j);
    unplant_protocol(runs, 2 * SEEDS);
}

/* REPORT.md of planted runs and a loss-against-size fit over two sizes with losses loss[size][0 = DIFF,
 * 1 = Transformer]. */
static char *report_with_sizes(const double loss[2][2], const char *out_name) {
    const double dval[SEEDS] = {2.0, 2.1, 1.9}, tval[SEEDS] = {2.2, 2.0, 2.1};
    rp_model runs[2 * SEEDS];
    for (int s = 0; s < SEEDS; s++) {
        char sub[48];
        snprintf(sub, sizeof sub, "%s_d%d", out_name, s);
        fake_model(&runs[s], "DIFF", sub, dval[s], 38.8);
        snprintf(sub, sizeof sub, "%s_t%d", out_name, s);
        fake_model(&runs[SEEDS + s], "Transformer", sub, tval[s], 318.0);
    }
    char out[4200];
    tu_path(out, sizeof out, out_name);
    mkdir(out, 0755);
    rp_report r = {.command = "difftrans compare --quick --scaling small", .seed = 5, .preset = "tiny", .data = "x.txt",
                   .train_text = "x.txt", .steps = 2, .batch = 1, .seq = 8, .heldout_tokens = 100, .windows = 1,
                   .n_variants = 2, .n_seeds = SEEDS, .variant_key = {"diff", "transformer"}, .runs = runs,
                   .diff = 0, .base = 1, .n_sizes = 2, .size_names = {"tiny", "small"},
                   .size_params = {{231872, 231744}, {1066624, 1066112}},
                   .size_loss = {{loss[0][0], loss[0][1]}, {loss[1][0], loss[1][1]}}};
    dt_error err;
    if (rp_write(&r, out, &err) != 0) fail_msg("%s", err.msg);
    char path[4300];
    snprintf(path, sizeof path, "%s/REPORT.md", out);
    return tu_read_file(path, NULL);
}

/* The paper's ~65% compares two curves that fall with size: a Transformer whose larger model was no better gives a
 * fraction (the DIFF curve reaches its loss) that says nothing about the claim, and the report says so instead of
 * "DIFF needs fewer parameters". */
static void test_scaling_baseline_not_falling(void **state) {
    (void)state;
    const double falling[2][2] = {{5.8, 5.6}, {5.5, 5.4}}, rising[2][2] = {{5.84, 5.63}, {5.70, 5.84}};
    char *a = report_with_sizes(falling, "sz_falling"), *b = report_with_sizes(rising, "sz_rising");
    assert_non_null(strstr(a, "read it as a point estimate"));
    assert_null(strstr(a, "did not fall with size"));
    assert_non_null(strstr(b, "| fitted exponent b | — | — | -0.0159 | 0.0240 |"));
    assert_non_null(strstr(b, "The Transformer's loss did not fall with size (b = 0.0240): at this budget its larger "
                              "model was no better, so there is no scaling curve to compare DIFF against"));
    assert_null(strstr(b, "read it as a point estimate"));
    free(a);
    free(b);
}

/* One seed: the recall sentence's difference is that of the two accuracies it prints (examples of 2, 2
 * and 8 queries: 6/12 against 4/12), its interval the one over examples weighted by their queries. */
static void test_one_seed_task_verdict(void **state) {
    (void)state;
    double acc_d[3] = {1, 0, 0.5}, acc_t[3] = {0, 1, 0.25};
    int tot[3] = {2, 2, 8};
    rp_model runs[2];
    fake_model(&runs[0], "DIFF", "one_d", 1.0, 38.8);
    fake_model(&runs[1], "Transformer", "one_t", 1.0, 318.0);
    for (int v = 0; v < 2; v++) {
        dt_task_result *t = &runs[v].task[DT_TASK_RECALL];
        runs[v].tasks = 1 << DT_TASK_RECALL;
        *t = (dt_task_result){.kind = DT_TASK_RECALL, .correct = v ? 4 : 6, .total = 12, .accuracy = (v ? 4 : 6) / 12.0,
                              .example_accuracy = v ? acc_t : acc_d, .example_total = tot, .n_examples = 3};
    }
    char out[4200];
    tu_path(out, sizeof out, "one_seed");
    mkdir(out, 0755);
    rp_report r = {.command = "difftrans compare --quick --seeds 1", .seed = 5, .preset = "tiny", .data = "x.txt",
                   .train_text = "x.txt", .steps = 2, .batch = 1, .seq = 8, .heldout_tokens = 100, .windows = 1,
                   .n_variants = 2, .n_seeds = 1, .variant_key = {"diff", "transformer"}, .runs = runs,
                   .diff = 0, .base = 1, .n_sizes = 1, .tasks = 1 << DT_TASK_RECALL, .task_ratio = 0.5};
    dt_error err;
    if (rp_write(&r, out, &err) != 0) fail_msg("%s", err.msg);
    char path[4300];
    snprintf(path, sizeof path, "%s/REPORT.md", out);
    char *md = tu_read_file(path, NULL);
    const char *want = "No difference this run can resolve on recall accuracy: DIFF 0.500, Transformer 0.333 "
                       "(difference 0.167, 95% CI -1.268 to 1.601, over 3 paired examples of one run each; higher "
                       "is better).";
    if (!strstr(md, want)) fail_msg("REPORT.md lacks: %s", want);
    free(md);
    /* report.json's summary takes the same pairs (it gave no interval and no pairs with one run) */
    snprintf(path, sizeof path, "%s/report.json", out);
    char *js = tu_read_file(path, NULL);
    const char *rec = strstr(js, "\"recall_accuracy\"");
    assert_non_null(rec);
    const char *d = strstr(rec, "\"difference_to_transformer\"");
    assert_non_null(d);
    char buf[400];
    snprintf(buf, sizeof buf, "%.*s", (int)sizeof buf - 1, d);
    for (char *q = buf; *q; q++)
        if (*q == '\t' || *q == '\n') *q = ' ';
    if (!strstr(buf, "\"n\": 3,") || !strstr(buf, "\"mean\": 0.16666666666666") ||
        !strstr(buf, "\"ci95_low\": -1.26766666666") || !strstr(buf, "\"paired_over\": \"examples\""))
        fail_msg("report.json's recall difference: %s", buf);
    free(js);
}

static void test_missing_run_dir(void **state) {
    (void)state;
    rp_model m;
    dt_error err;
    char dir[4200];
    tu_path(dir, sizeof dir, "no_such_run");
    rp_analysis_options o = {0};
    assert_int_equal(rp_analyze_model(&m, dir, "DIFF", &o, &err), -1);
    assert_non_null(strstr(err.msg, "no_such_run"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verdict_symmetric),
        cmocka_unit_test(test_missing_values),
        cmocka_unit_test(test_wquant_needle_side_by_side),
        cmocka_unit_test(test_protocol_section),
        cmocka_unit_test(test_scaling_baseline_not_falling),
        cmocka_unit_test(test_one_seed_task_verdict),
        cmocka_unit_test(test_missing_run_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
