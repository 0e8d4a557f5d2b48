/* test_report.c — rp_write on planted results of three runs per model (no training): means with 95%
 * intervals in the tables, the verdict sentence drawn from the paired interval reads the same
 * whichever model wins and names neither when the interval spans zero, missing numbers show as "—"
 * in REPORT.md and null in report.json, the paper figures sit in their columns, and a missing run
 * directory is an error naming the file. */
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
    char out[4200];
    tu_path(out, sizeof out, out_name);
    mkdir(out, 0755);
    rp_report r = {.command = "difftrans compare --quick", .seed = 5, .preset = "tiny", .data = "x.txt",
                   .train_text = "x.txt", .steps = 2, .batch = 1, .seq = 8, .heldout_bytes = 100, .windows = 1,
                   .n_variants = 2, .n_seeds = SEEDS, .variant_key = {"diff", "transformer"}, .runs = runs,
                   .diff = 0, .base = 1, .n_sizes = 1};
    dt_error err;
    if (rp_write(&r, out, &err) != 0) fail_msg("%s", err.msg);
    char path[4300];
    snprintf(path, sizeof path, "%s/REPORT.md", out);
    return tu_read_file(path, NULL);
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
        cmocka_unit_test(test_missing_run_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
