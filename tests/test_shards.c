/* test_shards.c — sharded checkpoints (model.safetensors.index.json) written and read back bit for
 * bit, shards assigned as huggingface_hub assigns them and the index written as save_pretrained
 * writes it, the state-dict order of a Llama / DiffLlama model, stale files of an earlier layout
 * removed, F16/BF16 storage, FIFOs refused, and every way an index can lie. */
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
#include "internal.h"
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

/* An empty directory of that name in the test's scratch space: what an earlier run left there
 * (the FIFOs of test_fifos, which a save now refuses to replace) is removed first. */
static void dir_path(char *out, size_t n, const char *name) {
    tu_path(out, n, name);
    DIR *d = opendir(out);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", out, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
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

/* Whatever order the model's tensors are given in, huggingface_hub's split leaves every shard
 * either a single tensor larger than the limit or at most the limit in all; returns the number of
 * shards, checking that the file names count them. */
static int check_shard_sizes(const char *dir, uint64_t limit) {
    dt_st_set set;
    dt_error err = {0};
    if (dt_st_set_open(&set, dir, &err) != 0) fail_msg("%s", err.msg);
    assert_true(set.sharded);
    for (int f = 0; f < set.n_files; f++) {
        const dt_safetensors *st = &set.files[f];
        char want[64];
        snprintf(want, sizeof want, "-of-%05d.safetensors", set.n_files);
        assert_non_null(strstr(st->path, want));
        if (!(st->data_size <= limit || st->n == 1)) fail_msg("%s: %zu bytes in %d tensors", st->path, st->data_size, st->n);
    }
    int n = set.n_files;
    dt_st_set_close(&set);
    return n;
}

/* The shard file (its name within dir) that holds `tensor`. */
static void shard_holding(const char *dir, const char *tensor, char *out, size_t n) {
    dt_st_set set;
    dt_error err = {0};
    if (dt_st_set_open(&set, dir, &err) != 0) fail_msg("%s", err.msg);
    const dt_safetensors *file = NULL;
    if (!dt_st_set_find(&set, tensor, &file)) fail_msg("%s: no tensor %s", dir, tensor);
    snprintf(out, n, "%s", strrchr(file->path, '/') + 1);
    dt_st_set_close(&set);
}

static void test_sharded_round_trip(void **state) {
    (void)state;
    dt_model m, r;
    tiny_model(&m);
    char dir[1200], path[1300];
    dir_path(dir, sizeof dir, "sharded");
    const uint64_t limit = 20000; /* the embedding (100 × 64 × 4 bytes) alone is larger */
    save(&m, dir, DT_F32, limit);
    int want = check_shard_sizes(dir, limit);
    assert_true(want > 3);
    char name[64];
    snprintf(name, sizeof name, "-of-%05d.safetensors", want);
    assert_int_equal(count_files(dir, name), want);
    file_in(path, sizeof path, dir, "model.safetensors");
    assert_false(tu_file_exists(path));
    file_in(path, sizeof path, dir, "model.safetensors.index.json");
    char *index = tu_read_file(path, NULL);
    char meta[200];
    snprintf(meta, sizeof meta, "{\n  \"metadata\": {\n    \"total_parameters\": %zu,\n    \"total_size\": %zu\n  },\n",
             m.n_params, 4 * m.n_params);
    assert_memory_equal(index, meta, strlen(meta));
    /* the embedding comes first in every order and is larger than the limit: shard 1 alone */
    assert_non_null(strstr(index, "\n    \"model.embed_tokens.weight\": \"model-00001-of-"));
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
    int fewer = check_shard_sizes(dir, 4 * limit);
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
    dt_model_free(&m);
    return check_shard_sizes(dir, 20000);
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
    dt_error err = {0};
    assert_int_equal(dt_model_load(&m, dir, &err), -1);
    if (!strstr(err.msg, part1) || (part2 && !strstr(err.msg, part2)))
        fail_msg("expected '%s' and '%s' in: %s", part1, part2 ? part2 : "", err.msg);
}

#define NORM0 "model.layers.0.input_layernorm.weight"
#define EMBED "model.embed_tokens.weight"

/* The index line of a tensor, as save_pretrained writes it (neither is the last entry). */
static void index_line(char *out, size_t n, const char *tensor, const char *shard) {
    snprintf(out, n, "    \"%s\": \"%s\",\n", tensor, shard);
}

static void test_index_lies(void **state) {
    (void)state;
    char dir[1200], index[1300], path[1300], shard_a[64], shard_b[64], line[512], moved[1200];
    fresh_shards("lie_unlisted", dir, sizeof dir);
    /* shard_a: the embedding's (alone: it is larger than the limit); shard_b: layer 0's norm's */
    shard_holding(dir, EMBED, shard_a, sizeof shard_a);
    shard_holding(dir, NORM0, shard_b, sizeof shard_b);
    assert_string_not_equal(shard_a, shard_b);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");

    /* a tensor of a shard that the index does not list */
    index_line(line, sizeof line, NORM0, shard_b);
    replace_in_file(index, line, "");
    expect_load_fails(dir, "holds tensor '" NORM0 "'", "does not list");
    /* ... or the only tensor of a shard the index never names */
    fresh_shards("lie_unlisted_shard", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    index_line(line, sizeof line, EMBED, shard_a);
    replace_in_file(index, line, "");
    expect_load_fails(dir, "model.safetensors.index.json: missing tensor '" EMBED "'", NULL);

    /* the index puts a tensor in the wrong shard */
    fresh_shards("lie_wrong_shard", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    index_line(line, sizeof line, NORM0, shard_b);
    index_line(moved, sizeof moved, NORM0, shard_a);
    replace_in_file(index, line, moved);
    char want[300];
    snprintf(want, sizeof want, "puts tensor '" NORM0 "' in %s", shard_a);
    char want2[300];
    snprintf(want2, sizeof want2, "but it is in %s", shard_b);
    expect_load_fails(dir, want, want2);

    /* the index names a tensor that no shard holds */
    fresh_shards("lie_ghost", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    index_line(line, sizeof line, EMBED, shard_a);
    snprintf(moved, sizeof moved, "    \"ghost.weight\": \"%s\",\n%s", shard_b, line);
    replace_in_file(index, line, moved);
    snprintf(want, sizeof want, "puts tensor 'ghost.weight' in %s", shard_b);
    expect_load_fails(dir, want, "does not hold it");

    /* a tensor in two shards: the norm's shard rewritten to hold the embedding too */
    fresh_shards("lie_two_shards", dir, sizeof dir);
    file_in(path, sizeof path, dir, shard_b);
    float one[100 * 64] = {0};
    dt_st_entry e[2] = {{.name = EMBED, .ndim = 2, .shape = {100, 64}, .data = one},
                        {.name = NORM0, .ndim = 1, .shape = {64}, .data = one}};
    dt_error err = {0};
    assert_int_equal(dt_st_write(path, e, 2, &err), 0);
    expect_load_fails(dir, "tensor '" EMBED "' is in two shards", shard_a);

    /* a shard that is not there */
    fresh_shards("lie_missing_shard", dir, sizeof dir);
    file_in(path, sizeof path, dir, shard_b);
    assert_int_equal(unlink(path), 0);
    expect_load_fails(dir, shard_b, "a shard named by");

    /* shard names must stay inside the model directory */
    fresh_shards("lie_escape", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    index_line(line, sizeof line, EMBED, shard_a);
    snprintf(moved, sizeof moved, "    \"%s\": \"../%s\",\n", EMBED, shard_a);
    replace_in_file(index, line, moved);
    expect_load_fails(dir, "which is not a file name in the model directory", NULL);

    /* the same tensor listed twice */
    fresh_shards("lie_twice", dir, sizeof dir);
    file_in(index, sizeof index, dir, "model.safetensors.index.json");
    index_line(line, sizeof line, EMBED, shard_a);
    snprintf(moved, sizeof moved, "%s%s", line, line);
    replace_in_file(index, line, moved);
    expect_load_fails(dir, "lists tensor '" EMBED "' twice", NULL);

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

/* ---------------------------------------------------------------- only regular files */

/* A FIFO as the index, as a shard the index names, or as model.safetensors is refused at once,
 * naming it: opened for reading it would block until a writer came. The alarm turns a regression
 * into a failure (SIGALRM ends the test) instead of a hang. */
static void test_fifos(void **state) {
    (void)state;
    char dir[1200], path[1300], shard[64];
    alarm(60);
    fresh_shards("fifo_index", dir, sizeof dir);
    file_in(path, sizeof path, dir, "model.safetensors.index.json");
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    dt_st_set set;
    dt_error err = {0};
    assert_int_equal(dt_st_set_open(&set, dir, &err), -1);
    if (!strstr(err.msg, path) || !strstr(err.msg, "not a regular file (a FIFO)")) fail_msg("%s", err.msg);
    expect_load_fails(dir, "model.safetensors.index.json: not a regular file (a FIFO)", NULL);

    fresh_shards("fifo_shard", dir, sizeof dir);
    shard_holding(dir, NORM0, shard, sizeof shard);
    file_in(path, sizeof path, dir, shard);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(dt_st_set_open(&set, dir, &err), -1);
    if (!strstr(err.msg, path) || !strstr(err.msg, "not a regular file (a FIFO)") ||
        !strstr(err.msg, "a shard named by"))
        fail_msg("%s", err.msg);

    dir_path(dir, sizeof dir, "fifo_single");
    file_in(path, sizeof path, dir, "model.safetensors");
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(dt_st_set_open(&set, dir, &err), -1);
    if (!strstr(err.msg, "model.safetensors: not a regular file (a FIFO)")) fail_msg("%s", err.msg);
    alarm(0);
}

/* ---------------------------------------------------------------- huggingface_hub's split */

/* An F32 / BF16 / F16 entry of `bytes` bytes over a shared buffer. */
static dt_st_entry sized(const char *name, dt_dtype dtype, int64_t bytes, const float *data) {
    int64_t width = dtype == DT_F32 ? 4 : 2;
    return (dt_st_entry){.name = name, .ndim = 1, .shape = {bytes / width}, .data = data, .dtype = dtype};
}

/* The tensor names of one file, in the file's order. */
static void expect_file(const char *dir, const char *file, const char *const *names, int n) {
    char path[1300];
    file_in(path, sizeof path, dir, file);
    dt_safetensors st;
    dt_error err = {0};
    if (dt_st_open(&st, path, &err) != 0) fail_msg("%s", err.msg);
    if (st.n != n) fail_msg("%s: %d tensors, want %d", file, st.n, n);
    for (int i = 0; i < n; i++)
        if (strcmp(st.tensors[i].name, names[i]) != 0)
            fail_msg("%s: tensor %d is %s, want %s", file, i, st.tensors[i].name, names[i]);
    dt_st_close(&st);
}

/* Limit 100 bytes; in the order given: z.a 40, y.b 40, x.C 400, w.d 40, v.e 30, u.F 200, t.g 10.
 * Followed by hand through split_state_dict_into_shards_factory: z.a and y.b fill the current
 * shard (80); x.C is larger than the limit, so it becomes shard 1 at once and the current shard
 * keeps filling; w.d would make it 120, so {z.a, y.b} is closed as shard 2 and w.d starts the
 * next; v.e makes it 70; u.F is larger than the limit: shard 3; t.g makes 80; the end closes
 * {w.d, v.e, t.g} as shard 4. (The earlier rule, an oversized tensor closing the current shard,
 * gave five shards: [z.a y.b] [x.C] [w.d v.e] [u.F] [t.g].) Inside a file the tensors are laid out
 * by dtype, F32 first, then by name. */
static void test_hub_split(void **state) {
    (void)state;
    static float buf[128];
    dt_st_entry e[] = {
        sized("z.a", DT_F32, 40, buf), sized("y.b", DT_F32, 40, buf),  sized("x.C", DT_F32, 400, buf),
        sized("w.d", DT_F32, 40, buf), sized("v.e", DT_BF16, 30, buf), sized("u.F", DT_F32, 200, buf),
        sized("t.g", DT_F16, 10, buf),
    };
    for (int i = 0; i < 128; i++) buf[i] = (float)i;
    char dir[1200], path[1300];
    dir_path(dir, sizeof dir, "hub_split");
    dt_error err = {0};
    if (dt_st_write_dir(dir, e, 7, 100, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(count_files(dir, "-of-00004.safetensors"), 4);
    const char *s1[] = {"x.C"}, *s2[] = {"y.b", "z.a"}, *s3[] = {"u.F"}, *s4[] = {"w.d", "v.e", "t.g"};
    expect_file(dir, "model-00001-of-00004.safetensors", s1, 1);
    expect_file(dir, "model-00002-of-00004.safetensors", s2, 2);
    expect_file(dir, "model-00003-of-00004.safetensors", s3, 1);
    expect_file(dir, "model-00004-of-00004.safetensors", s4, 3);
    /* json.dumps(index, indent=2, sort_keys=True) + "\n"; 200 elements, 760 bytes */
    const char *want =
        "{\n"
        "  \"metadata\": {\n"
        "    \"total_parameters\": 200,\n"
        "    \"total_size\": 760\n"
        "  },\n"
        "  \"weight_map\": {\n"
        "    \"t.g\": \"model-00004-of-00004.safetensors\",\n"
        "    \"u.F\": \"model-00003-of-00004.safetensors\",\n"
        "    \"v.e\": \"model-00004-of-00004.safetensors\",\n"
        "    \"w.d\": \"model-00004-of-00004.safetensors\",\n"
        "    \"x.C\": \"model-00001-of-00004.safetensors\",\n"
        "    \"y.b\": \"model-00002-of-00004.safetensors\",\n"
        "    \"z.a\": \"model-00002-of-00004.safetensors\"\n"
        "  }\n"
        "}\n";
    file_in(path, sizeof path, dir, "model.safetensors.index.json");
    char *index = tu_read_file(path, NULL);
    assert_string_equal(index, want);
    free(index);
    /* and it reads back */
    dt_st_set set;
    if (dt_st_set_open(&set, dir, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(set.n, 7);
    const dt_safetensors *file;
    const dt_st_tensor *t = dt_st_set_find(&set, "u.F", &file);
    assert_non_null(t);
    float back[50];
    dt_st_read_f32(file, t, back);
    assert_memory_equal(back, buf, sizeof back);
    dt_st_set_close(&set);

    /* a tensor exactly at the limit is not larger than it: it closes the current shard */
    dt_st_entry f[] = {sized("p", DT_F32, 8, buf), sized("q", DT_F32, 100, buf), sized("r", DT_F32, 4, buf)};
    dir_path(dir, sizeof dir, "hub_split_limit");
    if (dt_st_write_dir(dir, f, 3, 100, &err) != 0) fail_msg("%s", err.msg);
    const char *l1[] = {"p"}, *l2[] = {"q"}, *l3[] = {"r"};
    expect_file(dir, "model-00001-of-00003.safetensors", l1, 1);
    expect_file(dir, "model-00002-of-00003.safetensors", l2, 1);
    expect_file(dir, "model-00003-of-00003.safetensors", l3, 1);
    /* every tensor larger than the limit but one: still shards, numbered as met */
    dt_st_entry g[] = {sized("big1", DT_F32, 200, buf), sized("s1", DT_F32, 4, buf), sized("big2", DT_F32, 200, buf),
                       sized("s2", DT_F32, 4, buf)};
    dir_path(dir, sizeof dir, "hub_split_big");
    if (dt_st_write_dir(dir, g, 4, 100, &err) != 0) fail_msg("%s", err.msg);
    const char *b1[] = {"big1"}, *b2[] = {"big2"}, *b3[] = {"s1", "s2"};
    expect_file(dir, "model-00001-of-00003.safetensors", b1, 1);
    expect_file(dir, "model-00002-of-00003.safetensors", b2, 1);
    expect_file(dir, "model-00003-of-00003.safetensors", b3, 2);
    /* everything within the limit: one model.safetensors, no index */
    dir_path(dir, sizeof dir, "hub_split_one");
    if (dt_st_write_dir(dir, f, 3, 112, &err) != 0) fail_msg("%s", err.msg);
    file_in(path, sizeof path, dir, "model.safetensors");
    assert_true(tu_file_exists(path));
    assert_int_equal(count_files(dir, "-of-"), 0);
    assert_int_equal(count_files(dir, ".index.json"), 0);
}

/* ---------------------------------------------------------------- state-dict order */

/* What torch's state_dict lists for one DiffLlamaDecoderLayer (own parameters of a module before
 * its children: DiffLlamaAttention's lambdas before q_proj), with ours (subln, lambda_proj) after
 * o_proj, and an unknown parameter of the attention and an unknown child of the layer where
 * st_entries_state_dict_order documents them. */
static const char *const LAYER_ORDER[] = {
    "self_attn.lambda_q1", "self_attn.lambda_k1", "self_attn.lambda_q2", "self_attn.lambda_k2",
    "self_attn.zz_unknown", /* an unknown own parameter: after the known ones, before the children */
    "self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "self_attn.subln.weight", "self_attn.lambda_proj.weight",
    "self_attn.extra.weight",   /* an unknown child: after the known ones */
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight",
    "post_attention_layernorm.weight", "adapter.weight",
};
enum { PER_LAYER = sizeof LAYER_ORDER / sizeof LAYER_ORDER[0], LAYERS = 12 };

static void test_state_dict_order(void **state) {
    (void)state;
    static char names[3 + PER_LAYER * LAYERS + 3][96];
    int n = 0;
    snprintf(names[n++], 96, "extra_top");                 /* an own parameter of the root: first */
    snprintf(names[n++], 96, "model.embed_tokens.weight");
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < PER_LAYER; k++) snprintf(names[n++], 96, "model.layers.%d.%s", l, LAYER_ORDER[k]);
    snprintf(names[n++], 96, "model.norm.weight");
    snprintf(names[n++], 96, "lm_head.weight");
    snprintf(names[n++], 96, "zz_head.weight");            /* an unknown child of the root: last */
    dt_st_entry want[sizeof names / sizeof names[0]], e[sizeof names / sizeof names[0]];
    for (int i = 0; i < n; i++) want[i] = (dt_st_entry){.name = names[i], .ndim = 0};
    /* from two scrambles: name order (layer 10 before layer 2) and reversed */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) e[i] = want[pass ? n - 1 - i : i];
        if (pass == 0)
            for (int i = 1; i < n; i++)
                for (int j = i; j > 0 && strcmp(e[j - 1].name, e[j].name) > 0; j--) {
                    dt_st_entry t = e[j];
                    e[j] = e[j - 1];
                    e[j - 1] = t;
                }
        assert_string_equal(e[pass ? 0 : 1].name, pass ? "zz_head.weight" : "lm_head.weight");
        st_entries_state_dict_order(e, n);
        for (int i = 0; i < n; i++)
            if (strcmp(e[i].name, want[i].name) != 0) fail_msg("position %d: %s, want %s", i, e[i].name, want[i].name);
    }
    st_entries_state_dict_order(NULL, 0); /* nothing to sort */
}

/* Through dt_st_write_dir: a one-layer DiffLlama given in difftrans's layout order (norms first in
 * a layer, λ after o_proj) and put into state-dict order first. Limit 250 bytes; sizes: embedding
 * and lm_head 400, each λ 16, q/k/v/o 100, gate/up/down 300, norms 8. By hand, as
 * huggingface_hub splits: embedding (larger) shard 1; the λs and q_proj fill 164, k_proj would
 * make 264, so they close as shard 2; k_proj and v_proj 200, o_proj would make 300: shard 3;
 * o_proj starts the next; gate, up, down are larger: shards 4, 5, 6; the two layer norms and the
 * final norm join o_proj (124); lm_head is larger: shard 7; the end closes o_proj's as shard 8.
 * In layout order the same split would put the layer norms elsewhere. */
static void test_state_dict_shards(void **state) {
    (void)state;
    static float buf[100];
    const char *p = "model.layers.0.";
    char nm[16][96];
    const char *const layout[16] = {"model.embed_tokens.weight", "input_layernorm.weight", "self_attn.q_proj.weight",
                                    "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                    "self_attn.lambda_q1", "self_attn.lambda_k1", "self_attn.lambda_q2",
                                    "self_attn.lambda_k2", "post_attention_layernorm.weight", "mlp.gate_proj.weight",
                                    "mlp.up_proj.weight", "mlp.down_proj.weight", "model.norm.weight",
                                    "lm_head.weight"};
    const int64_t bytes[16] = {400, 8, 100, 100, 100, 100, 16, 16, 16, 16, 8, 300, 300, 300, 8, 400};
    dt_st_entry e[16];
    for (int i = 0; i < 16; i++) {
        int top = i == 0 || i >= 14;
        snprintf(nm[i], sizeof nm[i], "%s%s", top ? "" : p, layout[i]);
        e[i] = sized(nm[i], DT_F32, bytes[i], buf);
    }
    st_entries_state_dict_order(e, 16);
    char dir[1200];
    dir_path(dir, sizeof dir, "state_dict_shards");
    dt_error err = {0};
    if (dt_st_write_dir(dir, e, 16, 250, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(count_files(dir, "-of-00008.safetensors"), 8);
    const char *s1[] = {"model.embed_tokens.weight"};
    const char *s2[] = {"model.layers.0.self_attn.lambda_k1", "model.layers.0.self_attn.lambda_k2",
                        "model.layers.0.self_attn.lambda_q1", "model.layers.0.self_attn.lambda_q2",
                        "model.layers.0.self_attn.q_proj.weight"};
    const char *s3[] = {"model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"};
    const char *s4[] = {"model.layers.0.mlp.gate_proj.weight"}, *s5[] = {"model.layers.0.mlp.up_proj.weight"};
    const char *s6[] = {"model.layers.0.mlp.down_proj.weight"}, *s7[] = {"lm_head.weight"};
    const char *s8[] = {"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
                        "model.layers.0.self_attn.o_proj.weight", "model.norm.weight"};
    expect_file(dir, "model-00001-of-00008.safetensors", s1, 1);
    expect_file(dir, "model-00002-of-00008.safetensors", s2, 5);
    expect_file(dir, "model-00003-of-00008.safetensors", s3, 2);
    expect_file(dir, "model-00004-of-00008.safetensors", s4, 1);
    expect_file(dir, "model-00005-of-00008.safetensors", s5, 1);
    expect_file(dir, "model-00006-of-00008.safetensors", s6, 1);
    expect_file(dir, "model-00007-of-00008.safetensors", s7, 1);
    expect_file(dir, "model-00008-of-00008.safetensors", s8, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sharded_round_trip),
        cmocka_unit_test(test_narrow_dtypes),
        cmocka_unit_test(test_index_lies),
        cmocka_unit_test(test_fifos),
        cmocka_unit_test(test_hub_split),
        cmocka_unit_test(test_state_dict_order),
        cmocka_unit_test(test_state_dict_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
