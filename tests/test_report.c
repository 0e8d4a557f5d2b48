/* test_report.c — rp_write on synthetic results (no training): the verdict sentence reads the same
 * whichever model wins, missing numbers show as "—" in REPORT.md and null in report.json, the paper
 * figures sit in their columns, and a missing run directory is an error naming the file. */
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

static char *write_report(double dval, double tval, const char *out_name) {
    rp_model d, t;
    fake_model(&d, "DIFF", "d", dval, 38.8);
    fake_model(&t, "Transformer", "t", tval, 318.0);
    char out[4200];
    tu_path(out, sizeof out, out_name);
    mkdir(out, 0755);
    rp_report r = {.command = "difftrans compare --quick", .seed = 5, .preset = "tiny", .data = "x.txt",
                   .train_text = "x.txt", .steps = 2, .batch = 1, .seq = 8, .heldout_bytes = 100, .windows = 1,
                   .diff = &d, .base = &t};
    dt_error err;
    assert_int_equal(rp_write(&r, out, &err), 0);
    char path[4300];
    snprintf(path, sizeof path, "%s/REPORT.md", out);
    return tu_read_file(path, NULL);
}

static void test_verdict_symmetric(void **state) {
    (void)state;
    char *a = write_report(1.0, 2.0, "a"), *b = write_report(2.0, 1.0, "b");
    assert_non_null(strstr(a, "On our data, DIFF did better on the final validation loss: 1 against 2 for Transformer "
                              "(lower is better)."));
    assert_non_null(strstr(b, "On our data, Transformer did better on the final validation loss: 1 against 2 for DIFF "
                              "(lower is better)."));
    assert_non_null(strstr(a, "difftrans compare --quick"));
    assert_non_null(strstr(a, "seed: 5"));
    assert_non_null(strstr(a, "| largest attention logit | 38.8 | 318.0 | 38.8 | 318 |"));
    free(a);
    free(b);
}

static void test_missing_values(void **state) {
    (void)state;
    char *a = write_report(NAN, 2.0, "c");
    assert_non_null(strstr(a, "| final validation loss (nats/byte) | — | — | — | 2.0000 |"));
    assert_non_null(strstr(a, "could not be compared"));
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
