/* test_errors.c — every failure carries a code (dt_errcode, issue 17): the error functions
 * themselves, and a representative refusal of each kind from the library — a missing file (IO), a
 * truncated safetensors file and a lying config.json (FORMAT, where the same values given by the
 * caller are INVALID), an option we do not implement (UNSUPPORTED), an allocation that cannot be
 * made (NOMEM, under an address-space cap), a training run that diverges (DIVERGED); and
 * json_text_valid, which tells a JSON file that cJSON refused for memory from one that is not JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <cjson/cJSON.h>

#include "difftrans.h"
#include "internal.h"
#include "testutil.h"

/* A failure (rc -1) with this code and a message containing want. */
static void expect_err(int rc, const dt_error *err, dt_errcode code, const char *want) {
    if (rc != -1) fail_msg("expected a failure (%s), got rc %d", dt_errcode_name(code), rc);
    if (err->code != code)
        fail_msg("expected code %s, got %s (%d): %s", dt_errcode_name(code), dt_errcode_name(err->code), (int)err->code,
                 err->msg);
    if (want && !strstr(err->msg, want)) fail_msg("expected \"%s\" in: %s", want, err->msg);
}

/* A dt_error that no call has touched yet: a stale code must not pass for the expected one. */
static dt_error fresh(void) {
    dt_error e;
    memset(&e, 0, sizeof e);
    e.code = (dt_errcode)99;
    return e;
}

static void write_text(const char *path, const char *text) { tu_write_file(path, text, strlen(text)); }

static void test_fail_functions(void **state) {
    (void)state;
    dt_error e = fresh();
    assert_int_equal(dt_fail(&e, "a %d", 1), -1);
    assert_int_equal(e.code, DT_ERR_INVALID);
    assert_string_equal(e.msg, "a 1");
    assert_int_equal(dt_fail_format(&e, "b"), -1);
    assert_int_equal(e.code, DT_ERR_FORMAT);
    assert_int_equal(dt_fail_io(&e, "c"), -1);
    assert_int_equal(e.code, DT_ERR_IO);
    assert_int_equal(dt_fail_oom(&e, "d"), -1);
    assert_int_equal(e.code, DT_ERR_NOMEM);
    assert_int_equal(dt_fail_code(&e, DT_ERR_UNSUPPORTED, "e %s", "x"), -1);
    assert_int_equal(e.code, DT_ERR_UNSUPPORTED);
    assert_string_equal(e.msg, "e x");
    /* no dt_error to fill is allowed */
    assert_int_equal(dt_fail(NULL, "x"), -1);
    assert_int_equal(dt_fail_oom(NULL, "x"), -1);
    assert_int_equal(dt_fail_prefix(NULL, "x"), -1);

    /* the prefix goes before the callee's message, and the callee's code stays */
    dt_fail_io(&e, "cannot open: No such file or directory");
    assert_int_equal(dt_fail_prefix(&e, "%s (%d)", "model.safetensors", 3), -1);
    assert_int_equal(e.code, DT_ERR_IO);
    assert_string_equal(e.msg, "model.safetensors (3): cannot open: No such file or directory");
    /* when both do not fit, the prefix gives way and the callee's problem survives whole */
    char inner[700], prefix[900];
    memset(inner, 'i', sizeof inner - 1);
    inner[sizeof inner - 1] = '\0';
    memset(prefix, 'p', sizeof prefix - 1);
    prefix[sizeof prefix - 1] = '\0';
    dt_fail_format(&e, "%s", inner);
    dt_fail_prefix(&e, "%s", prefix);
    assert_int_equal(e.code, DT_ERR_FORMAT);
    assert_int_equal(strlen(e.msg), sizeof e.msg - 1);
    assert_non_null(strstr(e.msg, inner));
    assert_int_equal(e.msg[0], 'p');
    /* an inner message that fills the buffer keeps 256 bytes of prefix, the rest of it cut */
    char full[sizeof e.msg];
    memset(full, 'f', sizeof full - 1);
    full[sizeof full - 1] = '\0';
    dt_fail_oom(&e, "%s", full);
    dt_fail_prefix(&e, "where");
    assert_int_equal(e.code, DT_ERR_NOMEM);
    assert_int_equal(strncmp(e.msg, "where: fff", 10), 0);
    assert_int_equal(strlen(e.msg), sizeof e.msg - 1);

    const struct {
        dt_errcode code;
        const char *name;
    } names[] = {{DT_ERR_NONE, "none"},         {DT_ERR_INVALID, "invalid"},         {DT_ERR_FORMAT, "format"},
                 {DT_ERR_IO, "io"},             {DT_ERR_NOMEM, "nomem"},             {DT_ERR_UNSUPPORTED, "unsupported"},
                 {DT_ERR_DIVERGED, "diverged"}, {DT_ERR_BUSY, "busy"},                {DT_ERR_INTERRUPTED, "interrupted"},
                 {(dt_errcode)12345, "unknown"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        assert_string_equal(dt_errcode_name(names[i].code), names[i].name);
    /* the values are the CLI's exit statuses (README.md): they must not move */
    assert_int_equal(DT_ERR_INVALID, 1);
    assert_int_equal(DT_ERR_FORMAT, 2);
    assert_int_equal(DT_ERR_IO, 3);
    assert_int_equal(DT_ERR_NOMEM, 4);
    assert_int_equal(DT_ERR_UNSUPPORTED, 5);
    assert_int_equal(DT_ERR_DIVERGED, 6);
    assert_int_equal(DT_ERR_BUSY, 8);
    assert_int_equal(DT_ERR_INTERRUPTED, 9);
}

/* A tiny model saved to tmp/name; its directory in dir. */
static void save_tiny(const char *name, char *dir, size_t n) {
    tu_path(dir, n, name);
    dt_config c;
    tu_tiny_diff_config(&c);
    dt_model m;
    dt_error err = fresh();
    if (dt_model_create(&m, &c, &err) != 0) fail_msg("%s", err.msg);
    dt_model_init_random(&m, 1);
    if (dt_model_save(&m, dir, 0, &err) != 0) fail_msg("%s", err.msg);
    dt_model_free(&m);
}

static void test_missing_file_is_io(void **state) {
    (void)state;
    char dir[1024], path[1200];
    tu_path(dir, sizeof dir, "no_such_dir");
    snprintf(path, sizeof path, "%s/config.json", dir);
    dt_config c;
    dt_model m;
    dt_safetensors st;
    dt_error err = fresh();
    expect_err(dt_config_load(&c, path, &err), &err, DT_ERR_IO, "config.json");
    err = fresh();
    expect_err(dt_model_load(&m, dir, &err), &err, DT_ERR_IO, "no_such_dir");
    err = fresh();
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    expect_err(dt_st_open(&st, path, &err), &err, DT_ERR_IO, "model.safetensors");
    int *tokens = NULL;
    size_t n = 0;
    err = fresh();
    expect_err(dt_text_load(path, &tokens, &n, &err), &err, DT_ERR_IO, "model.safetensors");
    /* a checkpoint directory without its config.json */
    save_tiny("no_config", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(unlink(path), 0);
    err = fresh();
    expect_err(dt_model_load(&m, dir, &err), &err, DT_ERR_IO, "config.json");
    /* writing where the directory cannot be made (a missing one is, as for every output): a file in its path */
    float x[4] = {1, 2, 3, 4};
    dt_st_entry e = {.name = "x", .ndim = 1, .shape = {4}, .dtype = DT_F32, .data = x};
    snprintf(path, sizeof path, "%s/model.safetensors/out.safetensors", dir);
    err = fresh();
    expect_err(dt_st_write(path, &e, 1, &err), &err, DT_ERR_IO, "out.safetensors");
}

static void test_truncated_safetensors_is_format(void **state) {
    (void)state;
    char path[1024];
    tu_path(path, sizeof path, "whole.safetensors");
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = (float)i;
    dt_st_entry e = {.name = "x", .ndim = 2, .shape = {8, 8}, .dtype = DT_F32, .data = x};
    dt_error err = fresh();
    if (dt_st_write(path, &e, 1, &err) != 0) fail_msg("%s", err.msg);
    size_t n;
    char *bytes = tu_read_file(path, &n);
    dt_safetensors st;
    if (dt_st_open(&st, path, &err) != 0) fail_msg("the whole file: %s", err.msg);
    dt_st_close(&st);
    /* cut in the tensor data, in the header, and inside the 8-byte header length */
    const size_t cuts[] = {n - 1, n / 2 > 8 ? 12 : n / 2, 4};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        tu_path(path, sizeof path, "cut.safetensors");
        tu_write_file(path, bytes, cuts[i]);
        err = fresh();
        expect_err(dt_st_open(&st, path, &err), &err, DT_ERR_FORMAT, "cut.safetensors");
    }
    free(bytes);
}

/* The same bad value is the file's fault when config.json says it and the caller's when the
 * caller's dt_config does: FORMAT and INVALID, from one validator. */
static void test_lying_config_is_format(void **state) {
    (void)state;
    char path[1024];
    tu_path(path, sizeof path, "lying_config.json");
    write_text(path, "{\"model_type\": \"llama\", \"vocab_size\": 256, \"hidden_size\": 64, \"intermediate_size\": 128,"
                     " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 3}");
    dt_config c;
    dt_error err = fresh();
    expect_err(dt_config_load(&c, path, &err), &err, DT_ERR_FORMAT, "lying_config.json");
    expect_err(-1, &err, DT_ERR_FORMAT, "kv heads");

    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_LLAMA, &err), 0);
    c.num_attention_heads = 4;
    c.num_key_value_heads = 3;
    err = fresh();
    expect_err(dt_config_validate(&c, "the caller's config", &err), &err, DT_ERR_INVALID, "kv heads");
    dt_model m;
    err = fresh();
    expect_err(dt_model_create(&m, &c, &err), &err, DT_ERR_INVALID, "kv heads");

    /* a value of the wrong type */
    write_text(path, "{\"model_type\": \"llama\", \"vocab_size\": \"many\", \"hidden_size\": 64}");
    err = fresh();
    expect_err(dt_config_load(&c, path, &err), &err, DT_ERR_FORMAT, "vocab_size");

    /* a checkpoint whose config.json lies about the tensors beside it */
    char dir[1024], cfg[1200];
    save_tiny("lying_checkpoint", dir, sizeof dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    dt_config tiny;
    tu_tiny_diff_config(&tiny);
    char *text = tu_read_file(cfg, NULL);
    const char *key = "\"intermediate_size\":";
    char *at = strstr(text, key);
    if (!at) fail_msg("%s has no %s: %s", cfg, key, text);
    char *num = at + strlen(key);
    while (*num == ' ' || *num == '\t') num++;
    char *end = num;
    while (*end >= '0' && *end <= '9') end++;
    assert_int_equal(atoi(num), tiny.intermediate_size);
    char out[8192];
    snprintf(out, sizeof out, "%.*s%d%s", (int)(num - text), text, 2 * tiny.intermediate_size, end);
    free(text);
    write_text(cfg, out);
    err = fresh();
    expect_err(dt_model_load(&m, dir, &err), &err, DT_ERR_FORMAT, "config.json implies");

    /* a generation_config.json whose eos id is outside the vocabulary: the checkpoint disagrees
     * with itself (the validator's check, turned into FORMAT by the loader) */
    save_tiny("lying_generation_config", dir, sizeof dir);
    snprintf(cfg, sizeof cfg, "%s/generation_config.json", dir);
    write_text(cfg, "{\"eos_token_id\": 100000}");
    err = fresh();
    expect_err(dt_model_load(&m, dir, &err), &err, DT_ERR_FORMAT, "100000");
}

/* The tiny model's checkpoint DIR/model.safetensors rewritten with one tensor more (name, shape
 * [n]) and, when int8 names one, that tensor stored as I8. */
static void rewrite_tensors(const char *dir, const char *extra, int n, const char *int8) {
    dt_model m;
    dt_error err = fresh();
    if (dt_model_load(&m, dir, &err) != 0) fail_msg("%s", err.msg);
    dt_st_entry *e = calloc((size_t)m.n_tensors + 1, sizeof *e);
    float *ones = calloc((size_t)n + 1, sizeof *ones);
    int8_t *codes = calloc(1u << 20, 1);
    assert_non_null(e);
    assert_non_null(ones);
    assert_non_null(codes);
    for (int i = 0; i < n; i++) ones[i] = 1.0f;
    for (int i = 0; i < m.n_tensors; i++) {
        const dt_tensor *t = &m.tensors[i];
        e[i] = (dt_st_entry){.name = t->name, .ndim = t->ndim, .shape = {t->shape[0], t->shape[1]},
                             .data = m.params + t->offset};
        if (int8 && strcmp(t->name, int8) == 0) {
            assert_true(t->numel <= (1u << 20));
            e[i].dtype = DT_I8;
            e[i].raw = codes;
        }
    }
    int k = m.n_tensors;
    if (extra) e[k++] = (dt_st_entry){.name = extra, .ndim = 1, .shape = {n}, .data = ones};
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (dt_st_write(path, e, k, &err) != 0) fail_msg("%s", err.msg);
    free(e);
    free(ones);
    free(codes);
    dt_model_free(&m);
}

/* A tensor the model would not read is refused naming it and the config.json key that leaves it
 * unused (it was dropped without a word: a checkpoint with biases ran without them); HF's
 * recomputed RoPE buffer is the one exception. An integer tensor where a float parameter goes is
 * refused (it was read as its integer codes). */
static void test_unused_tensor_is_format(void **state) {
    (void)state;
    char dir[1024];
    dt_config c;
    tu_tiny_diff_config(&c);
    const int C = c.hidden_size, hd = c.head_dim;
    static const struct {
        const char *name, *want;
    } cases[] = {
        {"model.layers.0.self_attn.q_proj.bias", "'model.layers.0.self_attn.q_proj.bias' is a bias, and config.json's "
                                                 "attention_bias is false"},
        {"model.layers.0.mlp.down_proj.bias", "config.json's mlp_bias is false"},
        {"model.layers.9.input_layernorm.weight", "'model.layers.9.input_layernorm.weight' is of a layer past "
                                                  "config.json's num_hidden_layers"},
        {"model.extra.weight", "'model.extra.weight' is not a parameter of the model config.json describes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        save_tiny("unused_tensor", dir, sizeof dir);
        rewrite_tensors(dir, cases[i].name, C, NULL);
        dt_model m;
        dt_error err = fresh();
        expect_err(dt_model_load(&m, dir, &err), &err, DT_ERR_FORMAT, cases[i].want);
        expect_err(-1, &err, DT_ERR_FORMAT, "unused_tensor/model.safetensors: tensor ");
    }
    /* the same λ vector under model_type llama */
    save_tiny("unused_lambda", dir, sizeof dir);
    rewrite_tensors(dir, NULL, 0, NULL);
    char cfg[1200];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    char *text = tu_read_file(cfg, NULL), *at = strstr(text, "\"diffllama\"");
    assert_non_null(at);
    char out[8192];
    snprintf(out, sizeof out, "%.*s\"llama\"%s", (int)(at - text), text, at + strlen("\"diffllama\""));
    free(text);
    write_text(cfg, out);
    dt_model m;
    dt_error err = fresh();
    expect_err(dt_model_load(&m, dir, &err), &err, DT_ERR_FORMAT,
               "self_attn.lambda_k1' is a DiffLlama λ vector, and config.json's model_type is not diffllama");

    save_tiny("inv_freq", dir, sizeof dir);
    rewrite_tensors(dir, "model.layers.0.self_attn.rotary_emb.inv_freq", hd / 2, NULL);
    err = fresh();
    if (dt_model_load(&m, dir, &err) != 0) fail_msg("transformers' inv_freq buffer refused: %s", err.msg);
    dt_model_free(&m);

    save_tiny("int8_weight", dir, sizeof dir);
    rewrite_tensors(dir, NULL, 0, "model.layers.0.self_attn.q_proj.weight");
    err = fresh();
    expect_err(dt_model_load(&m, dir, &err), &err, DT_ERR_FORMAT,
               "tensor 'model.layers.0.self_attn.q_proj.weight' is I8, not a float (F32, F16, BF16)");
}

static void test_unsupported(void **state) {
    (void)state;
    char path[1024];
    tu_path(path, sizeof path, "gelu_config.json");
    write_text(path, "{\"model_type\": \"llama\", \"vocab_size\": 256, \"hidden_size\": 64, \"intermediate_size\": 128,"
                     " \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"hidden_act\": \"gelu\"}");
    dt_config c;
    dt_error err = fresh();
    expect_err(dt_config_load(&c, path, &err), &err, DT_ERR_UNSUPPORTED, "gelu");
    write_text(path, "{\"model_type\": \"mistral\", \"vocab_size\": 256}");
    err = fresh();
    expect_err(dt_config_load(&c, path, &err), &err, DT_ERR_UNSUPPORTED, "mistral");

    /* a checkpoint quantised by another of transformers' methods is a valid one we cannot read */
    char dir[1024], cfg[1200];
    save_tiny("bitsandbytes", dir, sizeof dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    char *text = tu_read_file(cfg, NULL), *brace = strrchr(text, '}');
    assert_non_null(brace);
    char out[8192];
    snprintf(out, sizeof out, "%.*s, \"quantization_config\": {\"quant_method\": \"bitsandbytes\", "
             "\"load_in_8bit\": true}}", (int)(brace - text), text);
    free(text);
    write_text(cfg, out);
    dt_model m;
    err = fresh();
    expect_err(dt_model_load(&m, dir, &err), &err, DT_ERR_UNSUPPORTED,
               "bitsandbytes/config.json: quantization_config.quant_method 'bitsandbytes' is not supported");
}

static void test_invalid_argument(void **state) {
    (void)state;
    dt_config c;
    dt_error err = fresh();
    expect_err(dt_config_preset(&c, "no-such-preset", DT_ARCH_DIFF, &err), &err, DT_ERR_INVALID, "no-such-preset");
    tu_tiny_diff_config(&c);
    dt_model m;
    if (dt_model_create(&m, &c, &err) != 0) fail_msg("%s", err.msg);
    dt_model_init_random(&m, 2);
    dt_runstate *rs = dt_runstate_create(&m, 1, 4, &err);
    if (!rs) fail_msg("%s", err.msg);
    const int tokens[4] = {1, 2, c.vocab_size, 3};
    float loss;
    err = fresh();
    expect_err(dt_forward(&m, rs, tokens, NULL, 1, 4, &loss, &err), &err, DT_ERR_INVALID, "out of range");
    /* a window of 0 tokens once divided by zero; a negative batch passed as "all the windows" */
    const int text[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const int batch_window[][2] = {{1, 0}, {0, 4}, {-1, 4}, {2, -5}};
    for (int i = 0; i < 4; i++) {
        double mean;
        size_t scored;
        err = fresh();
        expect_err(dt_eval_tokens(&m, text, 9, batch_window[i][0], batch_window[i][1], &mean, &scored, &err), &err,
                   DT_ERR_INVALID, "must be positive");
    }
    dt_runstate_free(rs);
    dt_model_free(&m);
    dt_comm *comm = NULL;
    err = fresh();
    expect_err(dt_comm_create(&comm, 0, &err), &err, DT_ERR_INVALID, "timeout");
    assert_null(comm);
}

/* A model of 2 × 10^6 × 256 parameters (2 GB of floats) under a 1 GiB address-space cap. */
static void test_out_of_memory(void **state) {
    (void)state;
    dt_config c;
    dt_error err = fresh();
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_LLAMA, &err), 0);
    c.vocab_size = 1000000;
    c.hidden_size = 256;
    c.head_dim = 256 / c.num_attention_heads;
    c.tie_word_embeddings = 0;
    if (dt_config_validate(&c, "big", &err) != 0) fail_msg("%s", err.msg);
    if (UNDER_ASAN) {
        /* ASan reserves terabytes of shadow address space: no address-space cap is possible */
        print_message("skipping the 1 GiB address-space cap under AddressSanitizer\n");
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit lim = {1ul << 30, 1ul << 30};
        setrlimit(RLIMIT_AS, &lim);
        dt_model m;
        int rc = dt_model_create(&m, &c, &err);
        /* 0: NOMEM as expected; 2: it succeeded; 3: another code */
        if (rc == 0) _exit(2);
        if (err.code != DT_ERR_NOMEM || !strstr(err.msg, "out of memory")) {
            fprintf(stderr, "code %s: %s\n", dt_errcode_name(err.code), err.msg);
            _exit(3);
        }
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* A tiny DIFF model whose LM head overflows float32: every logit is ±inf or NaN. */
static void overflowing_model(dt_model *m) {
    dt_config c;
    tu_tiny_diff_config(&c);
    dt_error err = fresh();
    assert_int_equal(dt_model_create(m, &c, &err), 0);
    dt_model_init_random(m, 7);
    const size_t head = (size_t)c.vocab_size * c.hidden_size;
    for (size_t i = 0; i < head; i++) m->w.lm_head[i] = i % 2 ? 3e38f : -3e38f;
}

/* Weights that overflow float32 (finite, but their products are not): generate refuses to sample
 * from inf / NaN logits, naming the logit and the position, instead of printing noise. */
static void test_generate_nonfinite_logits(void **state) {
    (void)state;
    dt_model m;
    overflowing_model(&m);
    dt_error err = fresh();
    dt_generate_options o;
    dt_generate_defaults(&o);
    o.max_new_tokens = 2;
    const int prompt[3] = {1, 2, 3};
    int out[2];
    dt_generate_result r;
    expect_err(dt_generate(&m, prompt, 3, &o, out, &r, &err), &err, DT_ERR_FORMAT, "at position 2 is");
    assert_non_null(strstr(err.msg, "overflow float32"));
    dt_model_free(&m);
}

/* The same weights under eval: a loss that is not finite is refused naming the windows, where the mean came back
 * as nan with success (`difftrans eval` printed "loss nan" and exited 0). */
static void test_eval_nonfinite_loss(void **state) {
    (void)state;
    dt_model m;
    overflowing_model(&m);
    dt_error err = fresh();
    const int text[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    double mean = 0;
    size_t scored = 0;
    expect_err(dt_eval_tokens(&m, text, 9, 1, 4, &mean, &scored, &err), &err, DT_ERR_FORMAT,
               "the loss of window 0 (tokens 0..4) is");
    assert_non_null(strstr(err.msg, "overflow float32"));
    err = fresh();
    expect_err(dt_eval_tokens(&m, text, 9, 2, 4, &mean, &scored, &err), &err, DT_ERR_FORMAT, "windows 0..1");
    dt_model_free(&m);
}

/* A small training text at path: enough windows for a few steps of the tiny preset. */
static void write_words(const char *path) {
    char text[4000];
    size_t n = 0;
    while (n + 64 < sizeof text) n += (size_t)snprintf(text + n, sizeof text - n, "a few words, %zu of them. ", n);
    tu_write_file(path, text, n);
}

static void test_diverged(void **state) {
    (void)state;
    char data[1024], out[1024];
    tu_path(data, sizeof data, "diverge.txt");
    write_words(data);
    tu_path(out, sizeof out, "diverge_run");
    dt_train_options o;
    tu_tiny_train_options(&o, data, out, 20, 16);
    o.lr = 1e30f; /* AdamW moves every weight by about lr: the logits overflow at once */
    o.grad_clip = 0;
    dt_error err = fresh();
    expect_err(dt_train(&o, &err), &err, DT_ERR_DIVERGED, "diverged");
}

/* One step of training whose loss and gradient are finite but whose update breaks the model: it diverged
 * at that step, with neither a checkpoint of the broken model nor a metrics line JSON cannot hold. */
static void expect_diverged_after_update(dt_train_options *o, const char *out, const char *why) {
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out); /* a checkpoint of an earlier run would pass for this one's */
    assert_int_equal(system(cmd), 0);
    dt_error err = fresh();
    expect_err(dt_train(o, &err), &err, DT_ERR_DIVERGED, why);
    assert_non_null(strstr(err.msg, "step 1:"));
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    assert_false(tu_file_exists(path));
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    size_t n = 0;
    char *metrics = tu_read_file(path, &n);
    assert_non_null(metrics); /* opened before the first step, and left empty */
    assert_null(strstr(metrics, "inf"));
    assert_null(strstr(metrics, "nan"));
    free(metrics);
}

static void test_diverged_after_update(void **state) {
    (void)state;
    char data[1024], out[1024];
    tu_path(data, sizeof data, "diverge_update.txt");
    write_words(data);
    dt_train_options o;
    /* AdamW's first step moves every λ vector entry by about lr: λq·λk jumps from ~0 to ±lr² × (the signs'
     * sum over head_dim), exp of it overflows and λ is ±inf in some layer (the tiny preset: 2 layers × 2 dot
     * products of 16 entries), with the λ vectors, the step's loss and its gradient all finite */
    tu_path(out, sizeof out, "diverge_lambda");
    tu_tiny_train_options(&o, data, out, 1, 16);
    dt_error perr;
    assert_int_equal(dt_config_preset(&o.cfg, "tiny", DT_ARCH_DIFF, &perr), 0);
    o.lr = 10;
    o.grad_clip = 0;
    expect_diverged_after_update(&o, out, "λ of layer");
    /* a Transformer has no λ: the last step's update is checked by its validation loss (every weight about
     * 1e15 after it: the attention scores overflow; no later step's loss would see them) */
    tu_path(out, sizeof out, "diverge_last_update");
    tu_tiny_train_options(&o, data, out, 1, 16);
    o.cfg = dt_config_matched(&o.cfg);
    o.lr = 1e15f;
    o.grad_clip = 0;
    expect_diverged_after_update(&o, out, "validation loss");
}

static int cjson_accepts(const char *text, size_t len) {
    cJSON *j = cJSON_ParseWithLength(text, len);
    cJSON_Delete(j);
    return j != NULL;
}

/* json_text_valid must never call text valid that cJSON refuses (a bad file would be reported as
 * out of memory); it may be stricter than cJSON, which accepts some text that is not JSON. */
static void test_json_text_valid(void **state) {
    (void)state;
    static const struct {
        const char *text;
        int valid;
    } cases[] = {
        {"{}", 1}, {" [ ] ", 1}, {"\xEF\xBB\xBF{\"a\": 1}", 1}, {"{\"a\": [1, -0.5e+3, true, false, null, \"x\"]}", 1},
        {"\"\\u00e9\\ud83d\\ude00\\n\\\"\"", 1}, {"0", 1}, {"-0", 1}, {"1E9", 1},
        {"", 0}, {"   ", 0}, {"{", 0}, {"[1,]", 0}, {"{\"a\":1,}", 0}, {"{,}", 0}, {"{\"a\" 1}", 0}, {"{1: 2}", 0},
        {"[1] x", 0}, {"[1] [2]", 0}, {"01", 0}, {"1.", 0}, {".5", 0}, {"+1", 0}, {"1e", 0}, {"-", 0}, {"tru", 0},
        {"nulls", 0}, {"\"abc", 0}, {"\"\\x\"", 0}, {"\"\\u12\"", 0}, {"\"\\udc00\"", 0}, {"\"\\ud800\"", 0},
        {"\"\\ud800\\u0041\"", 0}, {"\"a\tb\"", 0}, {"[1,\n2]\n", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *t = cases[i].text;
        const int got = json_text_valid(t, strlen(t));
        if (got != cases[i].valid) fail_msg("json_text_valid(%s) = %d, expected %d", t, got, cases[i].valid);
        if (got && !cjson_accepts(t, strlen(t))) fail_msg("valid, but cJSON refuses: %s", t);
    }
    /* cJSON's limits: 1000 nested containers pass, 1001 do not; numbers of more than 63 bytes,
     * which cJSON 1.7.15 as released refuses (Debian's reads them), are not valid here */
    char deep[2100], num[80];
    for (int depth = 999; depth <= 1001; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        const size_t n = 2 * (size_t)depth;
        assert_int_equal(json_text_valid(deep, n), depth <= 1000);
        assert_int_equal(cjson_accepts(deep, n), depth <= 1000);
    }
    for (int len = 62; len <= 64; len++) { /* in an array: alone, cJSON ignores what follows its 63 bytes */
        num[0] = '[';
        memset(num + 1, '1', (size_t)len);
        num[len + 1] = ']';
        assert_int_equal(json_text_valid(num, (size_t)len + 2), len <= 63);
        if (len <= 63) assert_true(cjson_accepts(num, (size_t)len + 2));
    }
    /* single-byte mutations of a config-like document: whatever json_text_valid accepts, cJSON
     * parses (the direction a wrong answer would turn a bad file into "out of memory") */
    const char *doc = "{\"model_type\": \"llama\", \"vocab\": {\"a\\u0062\": 1, \"\\ud83d\\ude00\": 2},"
                      " \"ids\": [0, -1.5e-3, 7], \"ok\": true, \"none\": null}";
    const size_t n = strlen(doc);
    assert_true(json_text_valid(doc, n));
    assert_true(cjson_accepts(doc, n));
    static const char alphabet[] = "{}[]\":,\\ 0123456789-+.eEtrufalsn\t\nxu";
    char m[256];
    long valid = 0, checked = 0;
    for (size_t at = 0; at < n; at++)
        for (const char *c = alphabet; *c; c++) {
            memcpy(m, doc, n);
            m[at] = *c;
            checked++;
            if (json_text_valid(m, n)) {
                valid++;
                if (!cjson_accepts(m, n)) fail_msg("valid, but cJSON refuses: %.*s", (int)n, m);
            }
        }
    print_message("%ld mutations, %ld of them valid JSON\n", checked, valid);
    assert_true(valid > 0 && valid < checked);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail_functions),
        cmocka_unit_test(test_missing_file_is_io),
        cmocka_unit_test(test_truncated_safetensors_is_format),
        cmocka_unit_test(test_lying_config_is_format),
        cmocka_unit_test(test_unused_tensor_is_format),
        cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_invalid_argument),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_diverged),
        cmocka_unit_test(test_diverged_after_update),
        cmocka_unit_test(test_generate_nonfinite_logits),
        cmocka_unit_test(test_eval_nonfinite_loss),
        cmocka_unit_test(test_json_text_valid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
