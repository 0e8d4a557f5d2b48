/* test_checkpoint.c — a training checkpoint replaces the previous one as a whole: a stage that
 * a killed process left incomplete is discarded (the previous files stay), a complete one is
 * committed by recovery, even when the commit itself was interrupted half-way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "testutil.h"
#include "train/checkpoint.h"

static void put(const char *dir, const char *name, const char *text) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tu_write_file(path, text, strlen(text));
}

static void assert_file(const char *dir, const char *name, const char *text) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *got = tu_read_file(path, NULL);
    assert_string_equal(got, text);
    free(got);
}

/* DIR with the checkpoint of step 1 */
static void step1(char *dir, size_t n, const char *name) {
    tu_path(dir, n, name);
    mkdir(tu_tmpdir(), 0755);
    mkdir(dir, 0755);
    put(dir, "model.safetensors", "model 1");
    put(dir, "optimizer.safetensors", "optimizer 1");
    put(dir, "train_state.json", "state 1");
}

static void test_commit_replaces_all(void **state) {
    (void)state;
    char dir[1024], stage[1400];
    dt_error err;
    step1(dir, sizeof dir, "commit");
    assert_int_equal(checkpoint_stage(dir, stage, sizeof stage, &err), 0);
    put(stage, "model.safetensors", "model 2");
    put(stage, "optimizer.safetensors", "optimizer 2");
    put(stage, "train_state.json", "state 2");
    assert_int_equal(checkpoint_commit(dir, &err), 0);
    assert_file(dir, "model.safetensors", "model 2");
    assert_file(dir, "optimizer.safetensors", "optimizer 2");
    assert_file(dir, "train_state.json", "state 2");
    assert_false(tu_file_exists(stage));
}

static void test_incomplete_stage_is_discarded(void **state) {
    (void)state;
    char dir[1024], stage[1400];
    dt_error err;
    step1(dir, sizeof dir, "incomplete");
    /* killed while writing: the model is staged, the train state is not */
    assert_int_equal(checkpoint_stage(dir, stage, sizeof stage, &err), 0);
    put(stage, "model.safetensors", "model 2");
    put(stage, "optimizer.safetensors.tmp.123", "half");
    assert_int_equal(checkpoint_recover(dir, &err), 0);
    assert_file(dir, "model.safetensors", "model 1");
    assert_file(dir, "optimizer.safetensors", "optimizer 1");
    assert_file(dir, "train_state.json", "state 1");
    assert_false(tu_file_exists(stage));
}

static void test_interrupted_commit_is_finished(void **state) {
    (void)state;
    char dir[1024], stage[1400], from[2048], to[2048];
    dt_error err;
    step1(dir, sizeof dir, "interrupted");
    assert_int_equal(checkpoint_stage(dir, stage, sizeof stage, &err), 0);
    put(stage, "model.safetensors", "model 2");
    put(stage, "optimizer.safetensors", "optimizer 2");
    put(stage, "train_state.json", "state 2");
    /* killed after the first rename of the commit */
    snprintf(from, sizeof from, "%s/model.safetensors", stage);
    snprintf(to, sizeof to, "%s/model.safetensors", dir);
    assert_int_equal(rename(from, to), 0);
    assert_int_equal(checkpoint_recover(dir, &err), 0);
    assert_file(dir, "model.safetensors", "model 2");
    assert_file(dir, "optimizer.safetensors", "optimizer 2");
    assert_file(dir, "train_state.json", "state 2");
    assert_false(tu_file_exists(stage));
    /* nothing to recover: a no-op */
    assert_int_equal(checkpoint_recover(dir, &err), 0);
    assert_file(dir, "train_state.json", "state 2");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_replaces_all),
        cmocka_unit_test(test_incomplete_stage_is_discarded),
        cmocka_unit_test(test_interrupted_commit_is_finished),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
