/* test_shards.c — sharded checkpoints (model.safetensors.index.json) written and read back bit for
 * bit, stale files of an earlier layout removed, F16/BF16 storage, and every way an index can lie. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "difftrans.h"
#include "testutil.h"

static void tiny_model(dt_model *m) {
    dt_config c;
    dt_error err = {0};
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &err), 0);
    c.vocab_size = 100;
    c.special.bos_token_id = 1;
    c.special.n_eos = 2;
    c.special.eos_token_id[0] = 2;
    c.special.eos_token_id[1] = 99;
    if (dt_model_create(m, &c, &err) != 0) fail_msg("%s", err.msg);
    dt_model_init_random(m, 5);
}

static void dir_path(char *out, size_t n, const char *name) {
    tu_path(out, n, name);
    mkdir(out, 0755);
}

static void file_in(char *out, size_t n, const char *dir, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* Files in dir whose names contain `part`. */
static int count_files(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}

static void save(const dt_model *m, const char *dir, dt_dtype dtype, uint64_t max_bytes) {
    dt_save_options o = {.dtype = dtype, .max_shard_bytes = max_bytes};
    dt_error err = {0};
    if (dt_model_save_with(m, dir, &o, &err) != 0) fail_msg("%s", err.msg);
}

/* The number of shards transformers' rule gives: a new shard when the next tensor would take the
 * current one past the limit, unless the current one is empty. */
static int expected_shards(const dt_model *m, uint64_t max_bytes, size_t width) {
    int shards = 0;
    uint64_t used = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        uint64_t b = m->tensors[i].numel * width;
        if (shards == 0 || (used > 0 && used + b > max_bytes)) shards++, used = 0;
        used += b;
    }
    return shards;
}

static void test_sharded_round_trip(void **state) {
    (void)state;
    dt_model m, r;
    tiny_model(&m);
    char dir[1200], path[1300];
    dir_path(dir, sizeof dir, "sharded");
    const uint64_t limit = 20000; /* the embedding (100 × 64 × 4 bytes) alone is larger */
    save(&m, dir, DT_F32, limit);
    int want = expected_shards(&m, limit, 4);
    assert_true(want > 3);
    char name[64];
    snprintf(name, sizeof name, "-of-%05d.safetensors", want);
    assert_int_equal(count_files(dir, name), want);
    file_in(path, sizeof path, dir, "model.safetensors");
    assert_false(tu_file_exists(path));
    file_in(path, sizeof path, dir, "model.safetensors.index.json");
    char *index = tu_read_file(path, NULL);
    assert_non_null(strstr(index, "\"weight_map\""));
    assert_non_null(strstr(index, "\"model.embed_tokens.weight\":\t\"model-00001-of-"));
    free(index);
    assert_int_equal(count_files(dir, ".tmp."), 0);

    dt_error err = {0};
    if (dt_model_load(&r, dir, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(r.n_params, m.n_params);
    assert_memory_equal(r.params, m.params, m.n_params * sizeof(float));
    assert_int_equal(r.cfg.special.n_eos, 2);
    assert_int_equal(r.cfg.special.eos_token_id[1], 99);
    assert_int_equal(r.cfg.special.bos_token_id, 1);

    /* fewer shards, then one file: nothing of the earlier layout is left to confuse a reader */
    save(&r, dir, DT_F32, 4 * limit);
    int fewer = expected_shards(&m, 4 * limit, 4);
    assert_true(fewer > 1 && fewer < want);
    assert_int_equal(count_files(dir, "-of-"), fewer);
    save(&r, dir, DT_F32, 0);
    assert_int_equal(count_files(dir, "-of-"), 0);
    assert_int_equal(count_files(dir, ".index.json"), 0);
    dt_model_free(&r);
    if (dt_model_load(&r, dir, &err) != 0) fail_msg("%s", err.msg);
    assert_memory_equal(r.params, m.params, m.n_params * sizeof(float));
    dt_model_free(&r);
    dt_model_free(&m);
}

static void test_narrow_dtypes(void **state) {
    (void)state;
    dt_model m, r, r2;
    tiny_model(&m);
    char dir[1200], path[1300];
    dir_path(dir, sizeof dir, "narrow");
    const dt_dtype types[] = {DT_BF16, DT_F16};
    const char *names[] = {"bfloat16", "float16"};
    const float tol[] = {0x1p-8f, 0x1p-11f};
    for (int k = 0; k < 2; k++) {
        save(&m, dir, types[k], 30000);
        file_in(path, sizeof path, dir, "config.json");
        char *cfg = tu_read_file(path, NULL);
        assert_non_null(strstr(cfg, names[k]));
        free(cfg);
        dt_error err = {0};
        if (dt_model_load(&r, dir, &err) != 0) fail_msg("%s", err.msg);
        /* rounded to nearest: within half a unit in the last place, and not a copy */
        assert_true(tu_max_rel_diff(r.params, m.params, m.n_params, 1e-3f) <= tol[k]);
        assert_true(memcmp(r.params, m.params, m.n_params * sizeof(float)) != 0);
        /* stored values are fixed points of the rounding */
        save(&r, dir, types[k], 0);
        if (dt_model_load(&r2, dir, &err) != 0) fail_msg("%s", err.msg);
        assert_memory_equal(r2.params, r.params, r.n_params * sizeof(float));
        dt_model_free(&r);
        dt_model_free(&r2);
    }
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- lying indexes */

/* A fresh sharded copy of the tiny model in dir; returns the number of shards. */
static int fresh_shards(const char *name, char *dir, size_t n) {
    dt_model m;
    tiny_model(&m);
    dir_path(dir, n, name);
    save(&m, dir, DT_F32, 20000);
    int shards = expected_shards(&m, 20000, 4);
    dt_model_free(&m);
    return shards;
}

static void replace_in_file(const char *path, const char *old, const char *new) {
    char *text = tu_read_file(path, NULL);
    char *at = strstr(text, old);
    if (!at) fail_msg("'%s' not in %s", old, path);
    size_t len = strlen(text) + strlen(new) + 1;
    char *out = malloc(len);
    assert_non_null(out);
    snprintf(out, len, "%.*s%s%s", (int)(at - text), text, new, at + strlen(old));
    tu_write_file(path, out, strlen(out));
    free(text);
    free(out);
}

static void expect_load_fails(const char *dir, const char *part1, const char *part2) {
    dt_model m;
    dt_error err = {{0}};
    assert_int_equal(dt_model_load(&m, dir, &err), -1);
    if (!strstr(err.msg, part1) || (part2 && !strstr(err.msg, part2)))
        fail_msg("expected '%s' and '%s' in: %s", part1, part2 ? part2 : "", err.msg);
}

static void test_index_lies(void **state) {
    (void)state;
    char dir[1200], index[1300], path[1300], shard_a[64], shard_b[64];
    int n = fresh_shards("lie_unlisted", dir, sizeof dir);
    snprintf(shard_a, sizeof shard_a, "model-00001-of-%05d.safetensors", n);
    snprintf(shard_b, sizeof shard_b, "model-00002-of-%05d.safetensors", n);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");

    /* a tensor of a shard that the index does not list */
    char line[512];
    snprintf(line, sizeof line, "\t\t\"model.layers.0.input_layernorm.weight\":\t\"%s\",\n", shard_b);
    replace_in_file(index, line, "");
    expect_load_fails(dir, "holds tensor 'model.layers.0.input_layernorm.weight'", "does not list");
    /* ... or the only tensor of a shard the index never names */
    fresh_shards("lie_unlisted_shard", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    snprintf(line, sizeof line, "\t\t\"model.embed_tokens.weight\":\t\"%s\",\n", shard_a);
    replace_in_file(index, line, "");
    expect_load_fails(dir, "model.safetensors.index.json: missing tensor 'model.embed_tokens.weight'", NULL);

    /* the index puts a tensor in the wrong shard */
    fresh_shards("lie_wrong_shard", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    snprintf(line, sizeof line, "\"model.layers.0.input_layernorm.weight\":\t\"%s\"", shard_b);
    char moved[1200];
    snprintf(moved, sizeof moved, "\"model.layers.0.input_layernorm.weight\":\t\"%s\"", shard_a);
    replace_in_file(index, line, moved);
    expect_load_fails(dir, "puts tensor 'model.layers.0.input_layernorm.weight' in model-00001",
                      "but it is in model-00002");
    snprintf(line, sizeof line, "\"model.embed_tokens.weight\":\t\"%s\"", shard_a);

    /* the index names a tensor that no shard holds */
    fresh_shards("lie_ghost", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    snprintf(moved, sizeof moved, "\"ghost.weight\":\t\"%s\",\n\t\t%s", shard_b, line);
    replace_in_file(index, line, moved);
    expect_load_fails(dir, "puts tensor 'ghost.weight' in model-00002", "does not hold it");

    /* a tensor in two shards */
    fresh_shards("lie_two_shards", dir, sizeof dir);
    file_in(path, sizeof path, dir, shard_b);
    float one[64] = {0};
    dt_st_entry e[2] = {{.name = "model.embed_tokens.weight", .ndim = 1, .shape = {64}, .data = one},
                        {.name = "model.layers.0.input_layernorm.weight", .ndim = 1, .shape = {64}, .data = one}};
    dt_error err = {{0}};
    dt_safetensors st;
    assert_int_equal(dt_st_open(&st, path, &err), 0);
    int second_has_norm = dt_st_find(&st, "model.layers.0.input_layernorm.weight") != NULL;
    dt_st_close(&st);
    assert_true(second_has_norm); /* shard 2 starts with layer 0's norm (the embedding filled shard 1) */
    assert_int_equal(dt_st_write(path, e, 2, &err), 0);
    expect_load_fails(dir, "tensor 'model.embed_tokens.weight' is in two shards", shard_a);

    /* a shard that is not there */
    fresh_shards("lie_missing_shard", dir, sizeof dir);
    file_in(path, sizeof path, dir, shard_b);
    assert_int_equal(unlink(path), 0);
    expect_load_fails(dir, shard_b, "a shard named by");

    /* shard names must stay inside the model directory */
    fresh_shards("lie_escape", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    snprintf(moved, sizeof moved, "\"model.embed_tokens.weight\":\t\"../%s\"", shard_a);
    replace_in_file(index, line, moved);
    expect_load_fails(dir, "which is not a file name in the model directory", NULL);

    /* the same tensor listed twice */
    fresh_shards("lie_twice", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    snprintf(moved, sizeof moved, "%s,\n\t\t%s", line, line);
    replace_in_file(index, line, moved);
    expect_load_fails(dir, "lists tensor 'model.embed_tokens.weight' twice", NULL);

    /* not JSON, no weight_map, no weights at all */
    fresh_shards("lie_not_json", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    tu_write_file(index, "{\"weight_map\": ", 15);
    expect_load_fails(dir, "model.safetensors.index.json is not valid JSON", NULL);
    tu_write_file(index, "{\"metadata\": {}}", 16);
    expect_load_fails(dir, "no \"weight_map\" object", NULL);
    assert_int_equal(unlink(index), 0);
    expect_load_fails(dir, "/model.safetensors: not found, and no model.safetensors.index.json beside it", NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sharded_round_trip),
        cmocka_unit_test(test_narrow_dtypes),
        cmocka_unit_test(test_index_lies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
