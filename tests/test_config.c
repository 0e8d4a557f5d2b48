/* test_config.c — presets, config.json round trips and refusals, λinit, tokenizer marker. */
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

#include "difftrans.h"
#include "testutil.h"

/* ---------------------------------------------------------------- helpers */

static void assert_config_equal(const dt_config *a, const dt_config *b) {
    assert_int_equal(a->arch, b->arch);
    assert_int_equal(a->vocab_size, b->vocab_size);
    assert_int_equal(a->hidden_size, b->hidden_size);
    assert_int_equal(a->intermediate_size, b->intermediate_size);
    assert_int_equal(a->num_hidden_layers, b->num_hidden_layers);
    assert_int_equal(a->num_attention_heads, b->num_attention_heads);
    assert_int_equal(a->num_key_value_heads, b->num_key_value_heads);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->max_position_embeddings, b->max_position_embeddings);
    /* bit-exact floats: save → load must not drift */
    assert_memory_equal(&a->rms_norm_eps, &b->rms_norm_eps, sizeof(float));
    assert_memory_equal(&a->rope_theta, &b->rope_theta, sizeof(float));
    assert_memory_equal(&a->lambda_std_dev, &b->lambda_std_dev, sizeof(float));
    assert_int_equal(a->tie_word_embeddings, b->tie_word_embeddings);
    assert_int_equal(a->use_subln_weight, b->use_subln_weight);
    assert_int_equal(a->rope_scaling.type, b->rope_scaling.type);
    assert_memory_equal(&a->rope_scaling.factor, &b->rope_scaling.factor, sizeof(double));
    assert_memory_equal(&a->rope_scaling.low_freq_factor, &b->rope_scaling.low_freq_factor, sizeof(double));
    assert_memory_equal(&a->rope_scaling.high_freq_factor, &b->rope_scaling.high_freq_factor, sizeof(double));
    assert_int_equal(a->rope_scaling.original_max_position_embeddings,
                     b->rope_scaling.original_max_position_embeddings);
    assert_int_equal(a->special.bos_token_id, b->special.bos_token_id);
    assert_int_equal(a->special.pad_token_id, b->special.pad_token_id);
    assert_int_equal(a->special.n_eos, b->special.n_eos);
    assert_memory_equal(a->special.eos_token_id, b->special.eos_token_id, (size_t)a->special.n_eos * sizeof(int));
}

static int count_tmp_files(void) {
    DIR *d = opendir(tu_tmpdir());
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void load_text(const char *json, dt_config *cfg, int want_rc, const char *problem) {
    char path[1200];
    tu_path(path, sizeof path, "config.json");
    tu_write_file(path, json, strlen(json));
    dt_error err = {0};
    int rc = dt_config_load(cfg, path, &err);
    if (rc != want_rc) fail_msg("load returned %d (want %d) for %s: %s", rc, want_rc, json, err.msg);
    if (want_rc == 0) return;
    if (strncmp(err.msg, path, strlen(path)) != 0) fail_msg("message does not start with the path: %s", err.msg);
    if (!strstr(err.msg, problem)) fail_msg("expected '%s' in: %s (for %s)", problem, err.msg, json);
}

static void expect_load_ok(const char *json, dt_config *cfg) { load_text(json, cfg, 0, NULL); }

static void expect_load_fails(const char *json, const char *problem) {
    dt_config cfg;
    memset(&cfg, 0x5a, sizeof cfg);
    dt_config before = cfg;
    load_text(json, &cfg, -1, problem);
    assert_memory_equal(&cfg, &before, sizeof cfg); /* untouched on failure */
}

/* A diffllama config.json with the six required keys, plus `extra` spliced in. */
static void minimal_json(char *out, size_t n, const char *model_type, const char *extra) {
    snprintf(out, n,
             "{\"model_type\": \"%s\", \"vocab_size\": 256, \"hidden_size\": 64, \"intermediate_size\": 176,"
             " \"num_hidden_layers\": 2, \"num_attention_heads\": 4%s%s}",
             model_type, extra[0] ? ", " : "", extra);
}

static void expect_extra_fails(const char *extra, const char *problem) {
    char json[2048];
    minimal_json(json, sizeof json, "diffllama", extra);
    expect_load_fails(json, problem);
}

/* ---------------------------------------------------------------- presets */

static void test_presets(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int C, L, H, F, P;
    } want[] = {{"tiny", 64, 2, 4, 176, 256},
                {"small", 128, 4, 4, 352, 512},
                {"medium", 256, 4, 8, 704, 1024},
                {"base", 512, 8, 8, 1408, 1024}};
    assert_string_equal(dt_config_preset_names(), "tiny,small,medium,base");
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        for (int arch = 0; arch < 2; arch++) {
            dt_config c;
            dt_error err = {0};
            assert_int_equal(dt_config_preset(&c, want[i].name, (dt_arch)arch, &err), 0);
            assert_int_equal(c.arch, arch);
            assert_int_equal(c.vocab_size, 256);
            assert_int_equal(c.hidden_size, want[i].C);
            assert_int_equal(c.num_hidden_layers, want[i].L);
            assert_int_equal(c.num_attention_heads, want[i].H);
            assert_int_equal(c.num_key_value_heads, want[i].H);
            assert_int_equal(c.intermediate_size, want[i].F);
            assert_int_equal(c.max_position_embeddings, want[i].P);
            assert_int_equal(c.head_dim, want[i].C / want[i].H);
            assert_true(c.rms_norm_eps == 1e-5f);
            assert_true(c.rope_theta == 10000.0f);
            assert_true(c.lambda_std_dev == 0.1f);
            assert_int_equal(c.tie_word_embeddings, 0);
            assert_int_equal(c.use_subln_weight, 0);
            if (dt_config_validate(&c, "preset", &err) != 0) fail_msg("%s", err.msg);
        }
    }
}

static void test_unknown_preset(void **state) {
    (void)state;
    dt_config c;
    dt_error err = {0};
    assert_int_equal(dt_config_preset(&c, "huge", DT_ARCH_DIFF, &err), -1);
    assert_non_null(strstr(err.msg, "'huge'"));
    assert_non_null(strstr(err.msg, "tiny"));
    assert_int_equal(dt_config_preset(&c, "tiny", (dt_arch)7, &err), -1);
    assert_int_equal(dt_config_preset(&c, NULL, DT_ARCH_DIFF, &err), -1);
}

static void test_matched(void **state) {
    (void)state;
    dt_config d, l;
    dt_error err = {0};
    assert_int_equal(dt_config_preset(&d, "small", DT_ARCH_DIFF, &err), 0);
    d.use_subln_weight = 1;
    l = dt_config_matched(&d);
    assert_int_equal(l.arch, DT_ARCH_LLAMA);
    assert_int_equal(l.use_subln_weight, 0);
    l.use_subln_weight = 1; /* the only difference besides arch */
    l.arch = DT_ARCH_DIFF;
    assert_config_equal(&l, &d);
    dt_config once = dt_config_matched(&d);
    dt_config back = dt_config_matched(&once);
    assert_int_equal(back.arch, DT_ARCH_DIFF);
    assert_int_equal(back.use_subln_weight, 0);
}

/* What export --hf refuses, which export --gguf's refusal must not advise (it pointed DIFF V2 to --hf) */
static void test_hf_unsupported(void **state) {
    (void)state;
    dt_config base, c;
    dt_error err = {0};
    assert_int_equal(dt_config_preset(&base, "tiny", DT_ARCH_DIFF, &err), 0);
    assert_null(dt_config_hf_unsupported(&base));
    c = dt_config_matched(&base);
    assert_null(dt_config_hf_unsupported(&c));
    const char *ablations[][2] = {{"v2", "model_type difftrans_v2 (DIFF V2)"}, {"alibi", "difftrans.position = alibi"},
                                  {"nope", "difftrans.position = none"}, {"softmax1", "difftrans.softmax1"},
                                  {"nonorm", "difftrans.head_norm = false"}};
    for (size_t i = 0; i < sizeof ablations / sizeof *ablations; i++) {
        assert_int_equal(dt_config_ablation(&c, &base, ablations[i][0], &err), 0);
        const char *why = dt_config_hf_unsupported(&c);
        assert_non_null(why);
        assert_string_equal(why, ablations[i][1]);
    }
    assert_int_equal(dt_config_ablation(&c, &base, "fixedlambda", &err), 0);
    assert_null(dt_config_hf_unsupported(&c));
}

static void test_lambda_init(void **state) {
    (void)state;
    assert_float_equal(dt_lambda_init(0), 0.2f, 1e-7);
    assert_true(dt_lambda_init(1) == (float)(0.8 - 0.6 * exp(-0.3)));
    assert_true(dt_lambda_init(5) == (float)(0.8 - 0.6 * exp(-1.5)));
    assert_float_equal(dt_lambda_init(100), 0.8f, 1e-7);
    /* increasing towards 0.8, never past it (float rounding may make the tail flat) */
    for (int l = 1; l < 64; l++) {
        assert_true(dt_lambda_init(l) >= dt_lambda_init(l - 1));
        assert_true(dt_lambda_init(l) <= 0.8f);
    }
    assert_true(dt_lambda_init(3) > dt_lambda_init(2));
}

/* ---------------------------------------------------------------- round trip */

static void round_trip(const dt_config *c) {
    char path[1200];
    tu_path(path, sizeof path, "rt_config.json");
    dt_error err = {0};
    if (dt_config_save(c, path, &err) != 0) fail_msg("%s", err.msg);
    dt_config back;
    if (dt_config_load(&back, path, &err) != 0) fail_msg("%s", err.msg);
    assert_config_equal(c, &back);
    assert_int_equal(count_tmp_files(), 0);
}

static void test_round_trip_presets(void **state) {
    (void)state;
    const char *names[] = {"tiny", "small", "medium", "base"};
    for (int i = 0; i < 4; i++)
        for (int arch = 0; arch < 2; arch++) {
            dt_config c;
            assert_int_equal(dt_config_preset(&c, names[i], (dt_arch)arch, &(dt_error){0}), 0);
            round_trip(&c);
        }
}

static void test_round_trip_odd_values(void **state) {
    (void)state;
    dt_config c;
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &(dt_error){0}), 0);
    c.num_key_value_heads = 2;
    c.head_dim = 24; /* explicit, not hidden / heads */
    c.rms_norm_eps = 1e-6f;
    c.rope_theta = 500000.0f;
    c.lambda_std_dev = 0.0f;
    c.tie_word_embeddings = 1;
    c.use_subln_weight = 1;
    round_trip(&c);
    const float odd[] = {1.0f / 3.0f, 0x1.fffffep-2f, 1.17549435e-38f, 0.1f, 7e-7f, 0.999999940f};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        c.rms_norm_eps = odd[i];
        c.lambda_std_dev = odd[i];
        c.rope_theta = 1.0f / odd[i];
        round_trip(&c);
    }
}

static void test_saved_json(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "saved.json");
    dt_config c;
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &(dt_error){0}), 0);
    dt_error err = {0};
    assert_int_equal(dt_config_save(&c, path, &err), 0);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *must[] = {"\"DiffLlamaForCausalLM\"", "\"model_type\":\t\"diffllama\"", "\"hidden_act\":\t\"silu\"",
                          "\"attention_bias\":\tfalse", "\"torch_dtype\":\t\"float32\"", "\"rms_norm_eps\":\t1e-05",
                          "\"lambda_std_dev\":\t0.1", "\"head_dim\":\t16"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        if (!strstr(text, must[i])) fail_msg("'%s' missing from:\n%s", must[i], text);
    /* no extension in use: a pure HF config, without our "difftrans" section */
    assert_null(strstr(text, "difftrans"));
    c.use_subln_weight = 1;
    assert_int_equal(dt_config_save(&c, path, &err), 0);
    f = fopen(path, "rb");
    assert_non_null(f);
    n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    assert_non_null(strstr(text, "\"difftrans\":\t{\n\t\t\"subln_weight\":\ttrue\n\t}"));
    c = dt_config_matched(&c);
    assert_int_equal(dt_config_save(&c, path, &err), 0);
    f = fopen(path, "rb");
    assert_non_null(f);
    n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    assert_non_null(strstr(text, "\"LlamaForCausalLM\""));
    assert_non_null(strstr(text, "\"model_type\":\t\"llama\""));
}

/* ---------------------------------------------------------------- loading */

static void test_defaults(void **state) {
    (void)state;
    char json[2048];
    dt_config c;
    minimal_json(json, sizeof json, "diffllama", "");
    expect_load_ok(json, &c);
    assert_int_equal(c.arch, DT_ARCH_DIFF);
    assert_int_equal(c.num_key_value_heads, 4);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.max_position_embeddings, 2048);
    assert_true(c.rms_norm_eps == 1e-5f);
    assert_true(c.rope_theta == 10000.0f);
    assert_true(c.lambda_std_dev == 0.1f);
    assert_int_equal(c.tie_word_embeddings, 0);
    assert_int_equal(c.use_subln_weight, 0);

    minimal_json(json, sizeof json, "llama", "");
    expect_load_ok(json, &c);
    assert_int_equal(c.arch, DT_ARCH_LLAMA);
    assert_true(c.rms_norm_eps == 1e-6f);
}

static void test_explicit_values(void **state) {
    (void)state;
    char json[2048];
    dt_config c;
    minimal_json(json, sizeof json, "diffllama",
                 "\"num_key_value_heads\": 2, \"head_dim\": 32, \"max_position_embeddings\": 128,"
                 " \"rms_norm_eps\": 1e-6, \"rope_theta\": 500000.0, \"tie_word_embeddings\": true,"
                 " \"lambda_std_dev\": 0.25, \"difftrans\": {\"subln_weight\": true}");
    expect_load_ok(json, &c);
    assert_int_equal(c.num_key_value_heads, 2);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.max_position_embeddings, 128);
    assert_true(c.rms_norm_eps == 1e-6f);
    assert_true(c.rope_theta == 500000.0f);
    assert_int_equal(c.tie_word_embeddings, 1);
    assert_true(c.lambda_std_dev == 0.25f);
    assert_int_equal(c.use_subln_weight, 1);
}

static void test_unknown_keys_ignored(void **state) {
    (void)state;
    char json[2048];
    dt_config c;
    minimal_json(json, sizeof json, "diffllama",
                 "\"bos_token_id\": 1, \"initializer_range\": 0.02, \"transformers_version\": \"4.48.0\","
                 " \"architectures\": [\"DiffLlamaForCausalLM\"], \"nested\": {\"a\": [1, {\"b\": null}]},"
                 " \"hidden_act\": \"silu\", \"rope_scaling\": null, \"attention_bias\": false,"
                 " \"mlp_bias\": false, \"head_dim\": null, \"difftrans\": {\"position\": \"rope\"}");
    expect_load_ok(json, &c);
    assert_int_equal(c.head_dim, 16);
    /* whitespace around the value is fine */
    char padded[2100];
    snprintf(padded, sizeof padded, "\n  %s\n\n", json);
    expect_load_ok(padded, &c);
}

static void test_not_json(void **state) {
    (void)state;
    expect_load_fails("", "is not valid JSON");
    expect_load_fails("{", "is not valid JSON");
    expect_load_fails("{\"model_type\": \"llama\",\n\"vocab_size\": }", "is not valid JSON (line 2)");
    expect_load_fails("{} {}", "is not valid JSON");
    expect_load_fails("[1, 2]", "not a JSON object");
    expect_load_fails("\"llama\"", "not a JSON object");
}

static void test_missing_keys(void **state) {
    (void)state;
    static const char *keys[] = {"model_type",        "vocab_size",        "hidden_size",
                                 "intermediate_size", "num_hidden_layers", "num_attention_heads"};
    static const char *vals[] = {"\"diffllama\"", "256", "64", "176", "2", "4"};
    for (int skip = 0; skip < 6; skip++) {
        char json[1024] = "{", want[128];
        int first = 1;
        for (int i = 0; i < 6; i++) {
            if (i == skip) continue;
            size_t len = strlen(json);
            snprintf(json + len, sizeof json - len, "%s\"%s\": %s", first ? "" : ", ", keys[i], vals[i]);
            first = 0;
        }
        strcat(json, "}");
        snprintf(want, sizeof want, "config.json: missing required key '%s'", keys[skip]);
        expect_load_fails(json, want);
    }
}

static void test_model_type(void **state) {
    (void)state;
    char json[2048];
    minimal_json(json, sizeof json, "gpt2", "");
    expect_load_fails(json, "model_type 'gpt2' is not supported");
    minimal_json(json, sizeof json, "DiffLlama", "");
    expect_load_fails(json, "'DiffLlama'");
    expect_load_fails("{\"model_type\":5,\"vocab_size\":256,\"hidden_size\":64,\"intermediate_size\":176,"
                      "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
                      "key 'model_type' must be a string");
}

static void test_bad_sizes(void **state) {
    (void)state;
    expect_extra_fails("\"num_key_value_heads\": 0", "num_key_value_heads must be > 0");
    expect_extra_fails("\"num_key_value_heads\": -2", "num_key_value_heads must be > 0");
    expect_extra_fails("\"max_position_embeddings\": 0", "max_position_embeddings must be > 0");
    expect_extra_fails("\"head_dim\": -1", "head_dim must be > 0");
    expect_extra_fails("\"max_position_embeddings\": 2000000", "max_position_embeddings = 2000000 is absurdly large");
    expect_extra_fails("\"head_dim\": 8192", "head_dim = 8192 is absurdly large");
    /* RoPE rotates pairs of channels: an odd head_dim would leave one unrotated */
    expect_extra_fails("\"head_dim\": 15", "head_dim must be even for RoPE (got 15)");
    expect_extra_fails("\"num_key_value_heads\": 2048", "is absurdly large");

    /* required keys with bad values: rebuild the JSON by hand */
    static const struct {
        const char *json, *problem;
    } cases[] = {
        {"{\"model_type\":\"llama\",\"vocab_size\":0,\"hidden_size\":64,\"intermediate_size\":176,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
         "vocab_size must be > 0 (got 0)"},
        {"{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":-64,\"intermediate_size\":176,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
         "hidden_size must be > 0"},
        {"{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":64,\"intermediate_size\":0,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
         "intermediate_size must be > 0"},
        {"{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":64,\"intermediate_size\":176,"
         "\"num_hidden_layers\":-1,\"num_attention_heads\":4}",
         "num_hidden_layers must be > 0"},
        {"{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":64,\"intermediate_size\":176,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":0}",
         "num_attention_heads must be > 0"},
        {"{\"model_type\":\"llama\",\"vocab_size\":10000000,\"hidden_size\":64,\"intermediate_size\":176,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
         "vocab_size = 10000000 is absurdly large"},
        {"{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":100000,\"intermediate_size\":176,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
         "hidden_size = 100000 is absurdly large"},
        {"{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":64,\"intermediate_size\":2000000,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
         "intermediate_size = 2000000 is absurdly large"},
        {"{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":64,\"intermediate_size\":176,"
         "\"num_hidden_layers\":5000,\"num_attention_heads\":4}",
         "num_hidden_layers = 5000 is absurdly large"},
        {"{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":4096,\"intermediate_size\":176,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":2048}",
         "num_attention_heads = 2048 is absurdly large"},
        /* every size within its own limit, but the total is not: 4M·64K embeddings */
        {"{\"model_type\":\"llama\",\"vocab_size\":4000000,\"hidden_size\":8192,\"intermediate_size\":176,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":64}",
         "model too large"},
        {"{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":65536,\"intermediate_size\":1048576,"
         "\"num_hidden_layers\":1024,\"num_attention_heads\":16}",
         "model too large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_load_fails(cases[i].json, cases[i].problem);
}

static void test_heads(void **state) {
    (void)state;
    char json[2048];
    /* odd head count: fine for llama, refused for diffllama */
    const char *odd = "{\"model_type\":\"%s\",\"vocab_size\":256,\"hidden_size\":48,\"intermediate_size\":128,"
                      "\"num_hidden_layers\":2,\"num_attention_heads\":3}";
    dt_config c;
    snprintf(json, sizeof json, odd, "llama");
    expect_load_ok(json, &c);
    assert_int_equal(c.head_dim, 16);
    snprintf(json, sizeof json, odd, "diffllama");
    expect_load_fails(json, "even num_attention_heads (got 3)");
    expect_extra_fails("\"num_key_value_heads\": 3", "heads not divisible by kv heads");
    expect_extra_fails("\"num_key_value_heads\": 8", "heads not divisible by kv heads");
    /* GQA: 4 query heads over 1 or 2 KV heads */
    minimal_json(json, sizeof json, "diffllama", "\"num_key_value_heads\": 1");
    expect_load_ok(json, &c);
    assert_int_equal(c.num_key_value_heads, 1);
    /* head_dim default must divide exactly */
    const char *nodiv = "{\"model_type\":\"diffllama\",\"vocab_size\":256,\"hidden_size\":64,"
                        "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":6%s}";
    snprintf(json, sizeof json, nodiv, "");
    expect_load_fails(json, "hidden_size 64 is not divisible by num_attention_heads 6");
    snprintf(json, sizeof json, nodiv, ", \"head_dim\": 16"); /* explicit head_dim: allowed */
    expect_load_ok(json, &c);
    assert_int_equal(c.head_dim, 16);
}

static void test_wrong_types(void **state) {
    (void)state;
    expect_load_fails("{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":\"64\",\"intermediate_size\":176,"
                      "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
                      "key 'hidden_size' must be a number");
    expect_load_fails("{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":64,\"intermediate_size\":176,"
                      "\"num_hidden_layers\":2.5,\"num_attention_heads\":4}",
                      "key 'num_hidden_layers' must be an integer");
    expect_load_fails("{\"model_type\":\"llama\",\"vocab_size\":3000000000,\"hidden_size\":64,"
                      "\"intermediate_size\":176,\"num_hidden_layers\":2,\"num_attention_heads\":4}",
                      "key 'vocab_size' is out of range");
    expect_load_fails("{\"model_type\":\"llama\",\"vocab_size\":256,\"hidden_size\":64,\"intermediate_size\":176,"
                      "\"num_hidden_layers\":2,\"num_attention_heads\":null}",
                      "missing required key 'num_attention_heads'");
    expect_load_fails("{\"model_type\":null,\"vocab_size\":256,\"hidden_size\":64,\"intermediate_size\":176,"
                      "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
                      "missing required key 'model_type'");
    expect_extra_fails("\"num_key_value_heads\": true", "key 'num_key_value_heads' must be a number");
    expect_extra_fails("\"head_dim\": [16]", "key 'head_dim' must be a number");
    expect_extra_fails("\"max_position_embeddings\": 1e300", "key 'max_position_embeddings' is out of range");
    expect_extra_fails("\"rms_norm_eps\": \"1e-5\"", "key 'rms_norm_eps' must be a number");
    expect_extra_fails("\"rope_theta\": {}", "key 'rope_theta' must be a number");
    expect_extra_fails("\"rope_theta\": 1e300", "key 'rope_theta' is out of float range");
    expect_extra_fails("\"lambda_std_dev\": false", "key 'lambda_std_dev' must be a number");
    expect_extra_fails("\"tie_word_embeddings\": 1", "key 'tie_word_embeddings' must be true or false");
    expect_extra_fails("\"difftrans\": true", "key 'difftrans' must be an object");
    expect_extra_fails("\"difftrans\": {\"subln_weight\": \"yes\"}", "key 'subln_weight' must be true or false");
    /* a misspelt option of ours must not silently give the default model */
    expect_extra_fails("\"difftrans\": {\"fixed_lamda\": true}", "difftrans.fixed_lamda is not an option");
    expect_extra_fails("\"difftrans\": {\"future\": 3}", "difftrans.future is not an option");
    expect_extra_fails("\"hidden_act\": 1", "key 'hidden_act' must be a string");
    expect_extra_fails("\"attention_bias\": \"no\"", "key 'attention_bias' must be true or false");
}

static void test_bad_reals(void **state) {
    (void)state;
    expect_extra_fails("\"rms_norm_eps\": 0", "rms_norm_eps must be in (0, 1)");
    expect_extra_fails("\"rms_norm_eps\": -1e-5", "rms_norm_eps must be in (0, 1)");
    expect_extra_fails("\"rms_norm_eps\": 1.5", "rms_norm_eps must be in (0, 1)");
    expect_extra_fails("\"rms_norm_eps\": 1e-60", "rms_norm_eps must be in (0, 1)"); /* underflows to 0 */
    expect_extra_fails("\"rope_theta\": 0", "rope_theta must be finite and > 0");
    expect_extra_fails("\"rope_theta\": -10000", "rope_theta must be finite and > 0");
    expect_extra_fails("\"lambda_std_dev\": -0.1", "lambda_std_dev must be finite and >= 0");
}

static void test_unsupported(void **state) {
    (void)state;
    expect_extra_fails("\"hidden_act\": \"gelu\"", "hidden_act 'gelu' is not supported");
    /* transformers' other name of SiLU is read, not refused */
    char ok_json[2048];
    dt_config c;
    minimal_json(ok_json, sizeof ok_json, "llama", "\"hidden_act\": \"swish\"");
    expect_load_ok(ok_json, &c);
    /* every rope_scaling type but linear and llama3 changes the model in a way we do not implement */
    const char *types[] = {"dynamic", "yarn", "longrope", "ntk", "su", "mrope"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char extra[256], want[128];
        snprintf(extra, sizeof extra, "\"rope_scaling\": {\"rope_type\": \"%s\", \"factor\": 2.0}", types[i]);
        snprintf(want, sizeof want, "rope_scaling type '%s' is not supported (supported: linear, llama3)", types[i]);
        expect_extra_fails(extra, want);
    }
    expect_extra_fails("\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 2.0}",
                       "rope_parameters type 'yarn' is not supported");
    expect_extra_fails("\"attention_bias\": true", "attention_bias = true is not supported");
    expect_extra_fails("\"mlp_bias\": true", "mlp_bias = true is not supported");
    /* RoPE over part of each head (it was read past, rotating whole heads) */
    expect_extra_fails("\"partial_rotary_factor\": 0.5", "partial_rotary_factor 0.5 is not supported");
    expect_extra_fails("\"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.25}",
                       "rope_parameters.partial_rotary_factor 0.25 is not supported");
    expect_extra_fails("\"partial_rotary_factor\": \"half\"", "key 'partial_rotary_factor' must be a finite number");
    minimal_json(ok_json, sizeof ok_json, "llama", "\"partial_rotary_factor\": 1.0");
    expect_load_ok(ok_json, &c);
    char json[2048];
    minimal_json(json, sizeof json, "llama", "\"difftrans\": {\"subln_weight\": true}");
    expect_load_fails(json, "subln_weight only exists for diffllama");
}

/* ---------------------------------------------------------------- rope_scaling, special ids */

static void test_rope_scaling_parse(void **state) {
    (void)state;
    char json[2048];
    dt_config c;
    minimal_json(json, sizeof json, "llama", "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.5}");
    expect_load_ok(json, &c);
    assert_int_equal(c.rope_scaling.type, DT_ROPE_LINEAR);
    assert_true(c.rope_scaling.factor == 2.5);
    minimal_json(json, sizeof json, "llama",
                 "\"max_position_embeddings\": 131072, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0,"
                 " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}");
    expect_load_ok(json, &c);
    assert_int_equal(c.rope_scaling.type, DT_ROPE_LLAMA3);
    assert_true(c.rope_scaling.factor == 8.0 && c.rope_scaling.low_freq_factor == 1.0);
    assert_true(c.rope_scaling.high_freq_factor == 4.0);
    assert_int_equal(c.rope_scaling.original_max_position_embeddings, 8192);
    round_trip(&c);
    /* transformers 5 writes rope_parameters, rope_theta inside */
    minimal_json(json, sizeof json, "llama", "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000.0}");
    expect_load_ok(json, &c);
    assert_int_equal(c.rope_scaling.type, DT_ROPE_DEFAULT);
    assert_true(c.rope_theta == 500000.0f);
    expect_extra_fails("\"rope_scaling\": {\"rope_type\": \"linear\"}", "rope_scaling 'linear' needs 'factor'");
    expect_extra_fails("\"rope_scaling\": {\"factor\": 2.0}", "rope_scaling has no rope_type");
    expect_extra_fails("\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 0}", "factor must be finite and > 0");
    expect_extra_fails("\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": \"2\"}", "'factor' must be a finite");
    expect_extra_fails("\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
                       " \"high_freq_factor\": 4.0}", "'llama3' needs 'original_max_position_embeddings'");
    expect_extra_fails("\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0,"
                       " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}",
                       "0 < low_freq_factor < high_freq_factor");
    expect_extra_fails("\"rope_scaling\": [1]", "key 'rope_scaling' must be an object");
}

/* inv_freq against the formulas in double precision (torch's float32 steps agree with these to
 * float rounding; the golden cases check them bit for bit through the whole model). */
static void test_rope_inv_freq(void **state) {
    (void)state;
    dt_config c = {.head_dim = 128, .rope_theta = 500000.0f};
    float got[64];
    double base[64];
    for (int i = 0; i < 64; i++) base[i] = 1.0 / pow(500000.0, 2.0 * i / 128.0);
    dt_rope_inv_freq(&c, got);
    for (int i = 0; i < 64; i++) assert_true(fabs(got[i] - base[i]) <= 1e-6 * base[i]);
    c.rope_scaling = (dt_rope_scaling){.type = DT_ROPE_LINEAR, .factor = 4.0};
    dt_rope_inv_freq(&c, got);
    for (int i = 0; i < 64; i++) assert_true(fabs(got[i] - base[i] / 4) <= 1e-6 * base[i]);
    c.rope_scaling = (dt_rope_scaling){.type = DT_ROPE_LLAMA3, .factor = 8.0, .low_freq_factor = 1.0,
                                       .high_freq_factor = 4.0, .original_max_position_embeddings = 8192};
    dt_rope_inv_freq(&c, got);
    int kept = 0, divided = 0, ramp = 0;
    for (int i = 0; i < 64; i++) {
        double wavelen = 2 * M_PI / base[i], want;
        if (wavelen < 8192.0 / 4) want = base[i], kept++;
        else if (wavelen > 8192.0 / 1) want = base[i] / 8, divided++;
        else {
            double s = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
            want = (1 - s) * base[i] / 8 + s * base[i];
            ramp++;
        }
        if (!(fabs(got[i] - want) <= 2e-6 * want)) fail_msg("inv_freq[%d] = %.9g, want %.9g", i, got[i], want);
    }
    assert_true(kept > 0 && divided > 0 && ramp > 0); /* all three regimes are exercised */
}

static void test_special_ids(void **state) {
    (void)state;
    char json[2048];
    dt_config c;
    minimal_json(json, sizeof json, "llama", "");
    expect_load_ok(json, &c);
    assert_int_equal(c.special.bos_token_id, -1);
    assert_int_equal(c.special.pad_token_id, -1);
    assert_int_equal(c.special.n_eos, 0);
    minimal_json(json, sizeof json, "llama", "\"bos_token_id\": 1, \"eos_token_id\": [2, 7, 255], \"pad_token_id\": -1");
    expect_load_ok(json, &c);
    assert_int_equal(c.special.bos_token_id, 1);
    assert_int_equal(c.special.pad_token_id, -1);
    assert_int_equal(c.special.n_eos, 3);
    assert_int_equal(c.special.eos_token_id[2], 255);
    round_trip(&c);
    minimal_json(json, sizeof json, "llama", "\"eos_token_id\": 5, \"pad_token_id\": 0, \"bos_token_id\": null");
    expect_load_ok(json, &c);
    assert_int_equal(c.special.n_eos, 1);
    assert_int_equal(c.special.eos_token_id[0], 5);
    assert_int_equal(c.special.pad_token_id, 0);
    assert_int_equal(c.special.bos_token_id, -1);
    round_trip(&c);
    expect_extra_fails("\"eos_token_id\": 256", "eos_token_id 256 is outside the vocabulary of 256 tokens");
    expect_extra_fails("\"bos_token_id\": 300", "bos_token_id 300 is outside the vocabulary");
    expect_extra_fails("\"eos_token_id\": [1, \"x\"]", "'eos_token_id' must hold integer token ids");
    expect_extra_fails("\"bos_token_id\": [1]", "'bos_token_id' must be an integer");
    expect_extra_fails("\"eos_token_id\": [1,2,3,4,5,6,7,8,9]", "holds more than 8 ids");
}

static void test_missing_file(void **state) {
    (void)state;
    char path[1200];
    tu_path(path, sizeof path, "nowhere/config.json");
    dt_config c;
    dt_error err = {0};
    assert_int_equal(dt_config_load(&c, path, &err), -1);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "No such file"));
    assert_int_equal(dt_config_load(&c, tu_tmpdir(), &err), -1);
    assert_non_null(strstr(err.msg, "not a regular file"));
}

/* ---------------------------------------------------------------- validate / save failures */

static void test_validate_where(void **state) {
    (void)state;
    dt_config c;
    dt_error err = {0};
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &err), 0);
    c.num_attention_heads = 5;
    c.num_key_value_heads = 5;
    assert_int_equal(dt_config_validate(&c, "--preset tiny", &err), -1);
    assert_int_equal(strncmp(err.msg, "--preset tiny: ", 15), 0);
    assert_int_equal(dt_config_validate(&c, NULL, &err), -1); /* NULL where is allowed */
    c.num_attention_heads = c.num_key_value_heads = 4;
    c.rope_theta = NAN;
    assert_int_equal(dt_config_validate(&c, "x", &err), -1);
    c.rope_theta = 10000.0f;
    c.lambda_std_dev = INFINITY;
    assert_int_equal(dt_config_validate(&c, "x", &err), -1);
    c.lambda_std_dev = 0.1f;
    c.arch = (dt_arch)3;
    assert_int_equal(dt_config_validate(&c, "x", &err), -1);
    c.arch = DT_ARCH_DIFF;
    c.tie_word_embeddings = 2;
    assert_int_equal(dt_config_validate(&c, "x", &err), -1);
    c.tie_word_embeddings = 0;
    assert_int_equal(dt_config_validate(&c, "x", &err), 0);
}

static void test_save_failures(void **state) {
    (void)state;
    dt_config c;
    dt_error err = {0};
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &err), 0);
    char path[1200];
    tu_path(path, sizeof path, "missing_dir/config.json"); /* made, as every output's directory */
    remove(path);
    assert_int_equal(dt_config_save(&c, path, &err), 0);
    assert_true(tu_file_exists(path));
    tu_path(path, sizeof path, "missing_dir/config.json/config.json"); /* one that cannot be: a file in the way */
    assert_int_equal(dt_config_save(&c, path, &err), -1);
    assert_non_null(strstr(err.msg, path));
    assert_int_equal(err.code, DT_ERR_IO);
    assert_false(tu_file_exists(path));
    tu_path(path, sizeof path, "invalid_config.json");
    c.hidden_size = 0;
    assert_int_equal(dt_config_save(&c, path, &err), -1);
    assert_int_equal(strncmp(err.msg, path, strlen(path)), 0);
    assert_non_null(strstr(err.msg, "hidden_size"));
    assert_false(tu_file_exists(path));
    assert_int_equal(count_tmp_files(), 0);
}

/* ---------------------------------------------------------------- tokenizer marker */

static void test_tokenizer(void **state) {
    (void)state;
    char dir[1200], file[1300];
    tu_path(dir, sizeof dir, "tok");
    mkdir(dir, 0755);
    snprintf(file, sizeof file, "%s/difftrans_tokenizer.json", dir);
    remove(file);
    dt_error err = {0};
    assert_int_equal(dt_tokenizer_check(dir, &err), 0); /* absent: byte-level default */
    assert_int_equal(dt_tokenizer_save(dir, &err), 0);
    assert_true(tu_file_exists(file));
    assert_int_equal(dt_tokenizer_check(dir, &err), 0);
    FILE *f = fopen(file, "rb");
    assert_non_null(f);
    char text[1024];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    assert_non_null(strstr(text, "\"type\":\t\"bytes\""));
    assert_non_null(strstr(text, "\"vocab\":\t256"));
    assert_non_null(strstr(text, "\"version\":\t1"));

    static const char *bad[] = {"not json", "{\"type\": \"bpe\"}", "[\"bytes\"]", "{\"type\": 1}",
                                "{\"type\": \"bytes\", \"vocab\": 50000}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tu_write_file(file, bad[i], strlen(bad[i]));
        assert_int_equal(dt_tokenizer_check(dir, &err), -1);
        if (strncmp(err.msg, file, strlen(file)) != 0) fail_msg("message does not name the file: %s", err.msg);
    }
    char under[1400]; /* a directory that cannot be made: the file is in its path */
    snprintf(under, sizeof under, "%s/sub", file);
    assert_int_equal(dt_tokenizer_save(under, &err), -1);
    assert_non_null(strstr(err.msg, under));
    assert_int_equal(err.code, DT_ERR_IO);
    assert_int_equal(count_tmp_files(), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),
        cmocka_unit_test(test_rope_scaling_parse),
        cmocka_unit_test(test_rope_inv_freq),
        cmocka_unit_test(test_special_ids),
        cmocka_unit_test(test_unknown_preset),
        cmocka_unit_test(test_matched),
        cmocka_unit_test(test_lambda_init),
        cmocka_unit_test(test_hf_unsupported),
        cmocka_unit_test(test_round_trip_presets),
        cmocka_unit_test(test_round_trip_odd_values),
        cmocka_unit_test(test_saved_json),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_explicit_values),
        cmocka_unit_test(test_unknown_keys_ignored),
        cmocka_unit_test(test_not_json),
        cmocka_unit_test(test_missing_keys),
        cmocka_unit_test(test_model_type),
        cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_heads),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_bad_reals),
        cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_validate_where),
        cmocka_unit_test(test_save_failures),
        cmocka_unit_test(test_tokenizer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
