/* test_tokens.c — reading token datasets (what `difftrans tokenize` writes) from hand-made
 * manifests and shards: a good one reads back exactly, and lying manifests are refused with a
 * message before anything is allocated for them (cases found while fuzzing the reader, fuzz_tokens). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "difftrans.h"
#include "testutil.h"

/* dir/name: a version-1 shard of uint16 ids (64-byte header, see src/io/tokens.c) */
static void write_shard(const char *dir, const char *name, const uint16_t *ids, uint64_t count, uint32_t vocab) {
    uint8_t buf[64 + 2 * 16] = {0};
    assert_true(count <= 16);
    memcpy(buf, "DTTOKENS", 8);
    buf[8] = 1;
    buf[12] = 2;
    for (int i = 0; i < 8; i++) buf[16 + i] = (uint8_t)(count >> (8 * i));
    for (int i = 0; i < 4; i++) buf[24 + i] = (uint8_t)(vocab >> (8 * i));
    for (uint64_t i = 0; i < count; i++) buf[64 + 2 * i] = (uint8_t)ids[i], buf[65 + 2 * i] = (uint8_t)(ids[i] >> 8);
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tu_write_file(path, buf, 64 + 2 * count);
}

/* a dataset directory (made once per name) with train-00000.tok = {5, 6, 7}, val-00000.tok = {8},
 * and the manifest text given */
static const char *dataset(const char *name, const char *manifest) {
    static char dir[1200];
    tu_path(dir, sizeof dir, name);
    mkdir(dir, 0755);
    write_shard(dir, "train-00000.tok", (const uint16_t[]){5, 6, 7}, 3, 300);
    write_shard(dir, "val-00000.tok", (const uint16_t[]){8}, 1, 300);
    char path[1400];
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    tu_write_file(path, manifest, strlen(manifest));
    return dir;
}

static void expect_load_fails(const char *dir, const char *split, const char *what) {
    int *tokens = (int *)&tokens;
    size_t n = 7;
    dt_error err = {{0}};
    if (dt_tokens_load(dir, split, 300, &tokens, &n, &err) == 0) fail_msg("%s: loaded", dir);
    if (tokens || n) fail_msg("%s: failure left tokens behind", dir);
    if (!strstr(err.msg, what)) fail_msg("%s: message '%s' does not say '%s'", dir, err.msg, what);
}

static void test_good_dataset(void **state) {
    (void)state;
    const char *dir = dataset("good", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"eos_id\": 2,"
                                      " \"bytes\": 40, \"splits\": {\"train\": {\"shards\": [\"train-00000.tok\"],"
                                      " \"tokens\": 3}, \"val\": {\"shards\": [\"val-00000.tok\"], \"tokens\": 1}}}");
    dt_tokens_summary s;
    dt_error err = {{0}};
    if (dt_tokens_info(dir, &s, &err) != 0) fail_msg("info: %s", err.msg);
    assert_int_equal(s.vocab_size, 300);
    assert_int_equal(s.eos_id, 2);
    assert_int_equal(s.bytes, 40);
    assert_int_equal(s.tokens[0], 3);
    assert_int_equal(s.tokens[1], 1);
    int *tokens = NULL;
    size_t n = 0;
    if (dt_tokens_load(dir, "train", 300, &tokens, &n, &err) != 0) fail_msg("load: %s", err.msg);
    assert_int_equal(n, 3);
    assert_int_equal(tokens[0], 5);
    assert_int_equal(tokens[2], 7);
    free(tokens);
    /* the same shards against a smaller model vocabulary: id 7 is outside a vocabulary of 7 */
    if (dt_tokens_load(dir, "train", 7, &tokens, &n, &err) == 0) fail_msg("ids past the vocabulary accepted");
}

static void test_shard_listed_twice(void **state) {
    (void)state;
    /* read twice the split would hold 6 tokens; without a count, memory would grow with each repeat */
    expect_load_fails(dataset("twice", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"splits\": {\"train\":"
                                       " {\"shards\": [\"train-00000.tok\", \"val-00000.tok\", \"train-00000.tok\"]}}}"),
                      "train", "listed twice");
}

static void test_count_checked_before_growing(void **state) {
    (void)state;
    /* the manifest says 2 tokens; the first shard alone holds 3: refused at that shard */
    expect_load_fails(dataset("count", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"splits\": {\"train\":"
                                       " {\"shards\": [\"train-00000.tok\"], \"tokens\": 2}}}"),
                      "train", "past the 2 tokens");
    expect_load_fails(dataset("count_big", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"splits\": {\"train\":"
                                           " {\"shards\": [\"train-00000.tok\"], \"tokens\": 9}}}"),
                      "train", "should hold 9 tokens");
}

static void test_manifest_numbers_out_of_range(void **state) {
    (void)state;
    /* converting 1e300 to an int is undefined behaviour (UBSan stops the ASan build's run) */
    dt_tokens_summary s;
    dt_error err = {{0}};
    const char *dir = dataset("eos", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"eos_id\": 1e300}");
    if (dt_tokens_info(dir, &s, &err) == 0) fail_msg("eos_id 1e300 accepted");
    if (!strstr(err.msg, "eos_id")) fail_msg("message '%s' does not name eos_id", err.msg);
    dir = dataset("eos_vocab", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"eos_id\": 300}");
    if (dt_tokens_info(dir, &s, &err) == 0) fail_msg("eos_id past the vocabulary accepted");
    /* negative or huge counts are not counts: reported as unknown (0) */
    dir = dataset("counts", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"eos_id\": -1, \"bytes\": -5,"
                            " \"splits\": {\"train\": {\"tokens\": 1e30}, \"val\": {\"tokens\": -1}}}");
    if (dt_tokens_info(dir, &s, &err) != 0) fail_msg("info: %s", err.msg);
    assert_int_equal(s.eos_id, -1);
    assert_int_equal(s.bytes, 0);
    assert_int_equal(s.tokens[0], 0);
    assert_int_equal(s.tokens[1], 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_dataset),
        cmocka_unit_test(test_shard_listed_twice),
        cmocka_unit_test(test_count_checked_before_growing),
        cmocka_unit_test(test_manifest_numbers_out_of_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
