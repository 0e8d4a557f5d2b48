/* test_hardening.c — the review's findings (issue 11), each with the test that would have caught
 * it: B·T overflow, odd head_dim, a config that lies about the model's size, a train state longer
 * than the old fixed buffer, a metrics write that fails, the caller's options pointing at
 * dt_train's stack, path truncation, and the decode sizes (n·hd, the KV cache) computed without
 * overflow; and (issue 17) a FIFO in a checkpoint or dataset directory, which hung the loaders. */
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "difftrans.h"
#include "internal.h"
#include "testutil.h"

static void expect_msg(const dt_error *err, const char *want) {
    if (!strstr(err->msg, want)) fail_msg("expected an error containing \"%s\", got \"%s\"", want, err->msg);
}

/* A text file of a few KB in the scratch directory for training runs. */
static const char *text_file(void) {
    static char path[1024];
    tu_path(path, sizeof path, "text.txt");
    char buf[6000];
    size_t n = 0;
    while (n + 64 < sizeof buf)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "the quick brown fox %zu jumps over the lazy dog. ", n % 97);
    tu_write_file(path, buf, n);
    return path;
}

static void train_opts(dt_train_options *o, const char *out, int steps) {
    tu_tiny_train_options(o, text_file(), out, steps, 16);
}

/* B·T was `int N = B*T` in dt_forward, computed before the size check, and B·T was never capped:
 * 65536 × 65536 wrapped to 0 (UBSan reports it). The run state now caps B·T and dt_forward checks
 * the batch against it before multiplying. */
static void test_batch_tokens_capped(void **state) {
    (void)state;
    dt_config c;
    tu_tiny_diff_config(&c);
    c.max_position_embeddings = 1 << 20;
    dt_model m;
    dt_error err;
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    assert_null(dt_runstate_create(&m, 4096, 1 << 20, &err));
    expect_msg(&err, "4294967296 tokens");
    assert_null(dt_runstate_create(&m, 1 << 14, 1 << 13, &err)); /* 2^27 > DT_MAX_BATCH_TOKENS */
    expect_msg(&err, "limit");
    dt_runstate *rs = dt_runstate_create(&m, 1, 4, &err);
    assert_non_null(rs);
    int tokens[4] = {1, 2, 3, 4};
    assert_int_equal(dt_forward(&m, rs, tokens, NULL, 65536, 65536, NULL, &err), -1);
    expect_msg(&err, "does not fit the run state");
    assert_int_equal(dt_forward(&m, rs, tokens, tokens, 1, 4, NULL, &err), 0);
    dt_runstate_free(rs);
    dt_model_free(&m);
}

/* Decoding multiplied n·hd in int for its threading threshold: the longest context validation
 * accepts (2^20) times the largest head_dim (4096) is 2^32, which wraps int (to 0: no threads).
 * A real run needs ~16 GB of KV cache, so the computation is tested directly, with the KV cache's
 * sizes: what validation accepts fits size_t exactly, and past it the cache is refused with a
 * message before anything is allocated. */
static void test_decode_sizes_checked(void **state) {
    (void)state;
    assert_true(decode_head_work(1 << 20, 4096) == (size_t)1 << 32);
    assert_true(decode_head_work(INT_MAX, INT_MAX) == (size_t)INT_MAX * (size_t)INT_MAX);
    assert_true(decode_head_work(3, 4) == 12);
    dt_config c;
    tu_tiny_diff_config(&c);
    size_t cells, scales, bytes;
    /* the largest validated sizes: L 1024, KV heads 1024, head_dim 4096, 2^20 positions */
    c.num_hidden_layers = 1024, c.num_key_value_heads = 1024, c.head_dim = 4096;
    assert_int_equal(kvcache_size(&c, 1 << 20, DT_KV_INT8, &cells, &scales, &bytes), 0);
    assert_true(cells == (size_t)1 << 52 && scales == (size_t)1 << 40);
    assert_true(bytes == ((size_t)1 << 53) + ((size_t)1 << 43));
    assert_int_equal(kvcache_size(&c, 1 << 20, DT_KV_F32, &cells, &scales, &bytes), 0);
    assert_true(bytes == (size_t)1 << 55);
    /* cells fit (2^61), their F32 bytes (2^64) do not; F16's (2^63) do */
    c.num_hidden_layers = 1 << 9;
    c.head_dim = 1 << 12 << 8;
    c.num_key_value_heads = 1 << 12;
    assert_int_equal(kvcache_size(&c, 1 << 20, DT_KV_F16, &cells, &scales, &bytes), 0);
    assert_true(cells == (size_t)1 << 61 && bytes == (size_t)1 << 63);
    assert_int_equal(kvcache_size(&c, 1 << 20, DT_KV_F32, &cells, &scales, &bytes), -1);
    c.num_hidden_layers = c.num_key_value_heads = c.head_dim = INT_MAX;
    assert_int_equal(kvcache_size(&c, INT_MAX, DT_KV_INT8, &cells, &scales, &bytes), -1);
    /* the cache of a model whose config was altered past validation is refused by name, unallocated */
    dt_model m;
    dt_error err;
    tu_tiny_diff_config(&c);
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    m.cfg.num_hidden_layers = m.cfg.num_key_value_heads = m.cfg.max_position_embeddings = INT_MAX;
    m.cfg.head_dim = INT_MAX - 1;
    assert_null(dt_kvcache_create_with(&m, INT_MAX, DT_KV_F32, &err));
    expect_msg(&err, "KV cache of 2147483647 tokens");
    expect_msg(&err, "does not fit");
    m.cfg = c;
    dt_kvcache *kc = dt_kvcache_create_with(&m, 8, DT_KV_INT8, &err);
    assert_non_null(kc);
    assert_true(kvcache_size(&c, 8, DT_KV_INT8, &cells, &scales, &bytes) == 0 && dt_kvcache_bytes(kc) == bytes);
    dt_kvcache_free(kc);
    dt_model_free(&m);
}

/* RoPE rotates channel pairs: an odd head_dim left a channel unrotated and HF cannot load it. */
static void test_odd_head_dim_refused(void **state) {
    (void)state;
    dt_config c;
    dt_error err;
    tu_tiny_diff_config(&c);
    c.head_dim = 7;
    assert_int_equal(dt_config_validate(&c, "cfg", &err), -1);
    expect_msg(&err, "head_dim must be even");
    dt_model m;
    assert_int_equal(dt_model_create(&m, &c, &err), -1);
    c.head_dim = 6;
    assert_int_equal(dt_config_validate(&c, "cfg", &err), 0);
}

/* A tiny checkpoint whose config.json then claims vocab 4194304 × hidden 400 (13.4 GB of
 * parameters). Loading must compare the tensors with the config before allocating: under a
 * 1 GiB address-space cap the user gets the shape mismatch, not "out of memory". */
static void test_load_checks_before_allocating(void **state) {
    (void)state;
    char dir[1024], cfg[1100];
    tu_path(dir, sizeof dir, "liar");
    dt_config c;
    tu_tiny_diff_config(&c);
    dt_model m;
    dt_error err;
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    dt_model_init_random(&m, 1);
    assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
    dt_model_free(&m);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    const char *liar = "{\"model_type\":\"llama\",\"vocab_size\":4194304,\"hidden_size\":400,"
                       "\"intermediate_size\":16,\"num_hidden_layers\":1,\"num_attention_heads\":4}";
    tu_write_file(cfg, liar, strlen(liar));
    if (UNDER_ASAN) {
        /* ASan reserves terabytes of shadow address space: no address-space cap is possible */
        print_message("skipping the 1 GiB address-space cap under AddressSanitizer; checking the message only\n");
        assert_int_equal(dt_model_load(&m, dir, &err), -1);
        expect_msg(&err, "model.embed_tokens.weight' has shape [256, 16] but config.json implies [4194304, 400]");
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit lim = {1ul << 30, 1ul << 30};
        setrlimit(RLIMIT_AS, &lim);
        dt_model mm;
        int rc = dt_model_load(&mm, dir, &err);
        _exit(rc == -1 && strstr(err.msg, "has shape [256, 16] but config.json implies [4194304, 400]") ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* The train state used to be read into a 64 KB stack buffer without ferror: a longer file came
 * out as "not valid JSON". It must say that it is too large. */
static void test_train_state_too_large(void **state) {
    (void)state;
    char dir[1024], path[1100];
    tu_path(dir, sizeof dir, "state_large");
    dt_train_options o;
    dt_error err;
    train_opts(&o, dir, 2);
    if (dt_train(&o, &err) != 0) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, "%s/train_state.json", dir);
    size_t n;
    char *text = tu_read_file(path, &n);
    size_t pad = 100000, big_n = n + pad + 16;
    char *big = malloc(big_n);
    assert_non_null(big);
    char *close = strrchr(text, '}');
    assert_non_null(close);
    size_t head = (size_t)(close - text);
    memcpy(big, text, head);
    size_t k = head;
    k += (size_t)snprintf(big + k, big_n - k, ",\"pad\":\"");
    memset(big + k, 'x', pad);
    k += pad;
    k += (size_t)snprintf(big + k, big_n - k, "\"}");
    tu_write_file(path, big, k);
    free(big);
    free(text);
    dt_train_options r;
    memset(&r, 0, sizeof r);
    r.out_dir = dir;
    r.resume = 1;
    r.quiet = 1;
    assert_int_equal(dt_train(&r, &err), -1);
    expect_msg(&err, "train_state.json: ");
    expect_msg(&err, "too large for a training state");
}

/* dt_train used to store a pointer to its own stack buffer (the data path read from the train
 * state) in the caller's options. */
static void test_resume_leaves_caller_options_clean(void **state) {
    (void)state;
    char dir[1024];
    tu_path(dir, sizeof dir, "state_ptr");
    dt_train_options o;
    dt_error err;
    train_opts(&o, dir, 2);
    if (dt_train(&o, &err) != 0) fail_msg("%s", err.msg);
    dt_train_options r;
    memset(&r, 0, sizeof r);
    r.out_dir = dir;
    r.resume = 1;
    r.quiet = 1;
    r.steps = 3;
    if (dt_train(&r, &err) != 0) fail_msg("%s", err.msg);
    assert_null(r.data_path);
    assert_int_equal(r.steps, 3);
}

/* Metrics writes and their fclose were unchecked: a full disk lost metrics silently. A 2 KB file
 * size limit stands in for the full disk (EFBIG instead of ENOSPC). */
static void test_metrics_write_failure_reported(void **state) {
    (void)state;
    char dir[1024];
    tu_path(dir, sizeof dir, "metrics_full");
    dt_train_options o;
    dt_error err;
    train_opts(&o, dir, 40);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 2048;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = dt_train(&o, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    assert_int_equal(rc, -1);
    expect_msg(&err, "metrics.jsonl: write failed");
}

/* Built paths that do not fit are errors, never silently shortened names. */
static void test_path_truncation_refused(void **state) {
    (void)state;
    char out[32];
    dt_error err;
    assert_int_equal(dt_pathf(out, sizeof out, &err, "%s/%s", "dir", "file.json"), 0);
    assert_string_equal(out, "dir/file.json");
    assert_int_equal(dt_pathf(out, sizeof out, &err, "%s/%s", "a-directory-name-of-some-length", "x"), -1);
    expect_msg(&err, "path too long");
    char full[31 + 1];
    memset(full, 'a', 31);
    full[31] = '\0';
    assert_int_equal(dt_pathf(out, sizeof out, &err, "%s", full), 0); /* exactly fits */
}

/* ---------------------------------------------------------------- FIFOs */

/* A FIFO where a loader expects a file: opening it for reading blocked until a writer came, so
 * `difftrans info` on such a directory hung forever. Each loader must refuse it at once, naming
 * it; alarm() turns a hang back into a failure (SIGALRM ends the test program). */
typedef int (*fifo_loader)(const char *path, dt_error *err);

static int load_model_dir(const char *dir, dt_error *err) {
    dt_model m;
    if (dt_model_load(&m, dir, err) != 0) return -1;
    dt_model_free(&m);
    return 0;
}
static int load_tokenizer(const char *path, dt_error *err) {
    dt_tok *tok;
    if (dt_tok_load(&tok, path, err) != 0) return -1;
    dt_tok_free(tok);
    return 0;
}
static int load_dataset_info(const char *dir, dt_error *err) {
    dt_tokens_summary s;
    return dt_tokens_info(dir, &s, err);
}
static int load_dataset_train(const char *dir, dt_error *err) {
    int *tokens = NULL;
    size_t n = 0;
    int rc = dt_tokens_load(dir, "train", 1 << 20, &tokens, &n, err);
    free(tokens);
    return rc;
}
static int load_text(const char *path, dt_error *err) {
    int *tokens = NULL;
    size_t n = 0;
    int rc = dt_text_load(path, &tokens, &n, err);
    free(tokens);
    return rc;
}
static int load_ids(const char *path, dt_error *err) {
    int *ids = NULL, rows, cols;
    int rc = dt_ids_read(path, 256, &ids, &rows, &cols, err);
    free(ids);
    return rc;
}
static int load_config(const char *path, dt_error *err) {
    dt_config c;
    return dt_config_load(&c, path, err);
}

/* A copy of dir `good` as `name` with its file `file` replaced by a FIFO; `load` on the copy (on
 * the FIFO itself when on_file) must fail within 10 s with a message naming the file. */
static void expect_fifo_refused(const char *good, const char *name, const char *file, fifo_loader load, int on_file,
                                const char *what) {
    char dir[1024], fifo[1200], cmd[3000];
    tu_path(dir, sizeof dir, name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -a '%s' '%s'", dir, good, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(fifo, sizeof fifo, "%s/%s", dir, file);
    unlink(fifo);
    if (mkfifo(fifo, 0644) != 0) fail_msg("mkfifo %s failed", fifo);
    dt_error err = {0};
    alarm(10);
    int rc = load(on_file ? fifo : dir, &err);
    alarm(0);
    if (rc == 0) fail_msg("%s: %s loaded with a FIFO as %s", name, what, file);
    if (!strstr(err.msg, fifo) || !strstr(err.msg, "not a regular file"))
        fail_msg("%s: %s: message \"%s\" does not say that %s is not a regular file", name, what, err.msg, fifo);
    if (err.code != DT_ERR_IO) fail_msg("%s: %s: error code %d, not DT_ERR_IO", name, what, (int)err.code);
}

static void test_fifo_refused(void **state) {
    (void)state;
    dt_error err;
    char tok_dir[1024], bpe[1024], bytes[1024], data[1024], files[1024];
    /* a byte-level checkpoint, a BPE one (tokenizer.json, tokenizer_config.json) and its token dataset */
    tu_path(tok_dir, sizeof tok_dir, "fifo_tok");
    tu_path(bpe, sizeof bpe, "fifo_bpe");
    tu_path(bytes, sizeof bytes, "fifo_bytes");
    tu_path(data, sizeof data, "fifo_data");
    tu_path(files, sizeof files, "fifo_files");
    const char *text = text_file();
    dt_tok_train_options to;
    dt_tok_train_defaults(&to);
    to.files = &text;
    to.n_files = 1;
    to.vocab_size = 280;
    to.eos = "<|end|>";
    to.quiet = 1;
    if (dt_tok_train(&to, tok_dir, &err) != 0) fail_msg("%s", err.msg);
    dt_config cfg;
    tu_tiny_diff_config(&cfg);
    cfg.vocab_size = 320;
    dt_model m;
    assert_int_equal(dt_model_create(&m, &cfg, &err), 0);
    dt_model_init_random(&m, 3);
    if (dt_model_save(&m, bytes, 0, &err) != 0) fail_msg("%s", err.msg);
    if (dt_model_set_tokenizer(&m, tok_dir, &err) != 0 || dt_model_save(&m, bpe, 0, &err) != 0) fail_msg("%s", err.msg);
    dt_model_free(&m);
    dt_tokenize_options ko;
    dt_tokenize_defaults(&ko);
    ko.tokenizer_path = tok_dir;
    ko.inputs = &text;
    ko.n_inputs = 1;
    ko.out_dir = data;
    ko.val_fraction = 0;
    ko.quiet = 1;
    dt_tokenize_stats st;
    if (dt_tokenize(&ko, &st, &err) != 0) fail_msg("%s", err.msg);
    /* the good ones load */
    if (load_model_dir(bpe, &err) != 0 || load_model_dir(bytes, &err) != 0 || load_dataset_train(data, &err) != 0)
        fail_msg("%s", err.msg);
    char marker[1200];
    snprintf(marker, sizeof marker, "%s/difftrans_tokenizer.json", bytes);
    assert_true(tu_file_exists(marker));

    expect_fifo_refused(bpe, "fifo_config", "config.json", load_model_dir, 0, "dt_model_load");
    expect_fifo_refused(bpe, "fifo_config_file", "config.json", load_config, 1, "dt_config_load");
    expect_fifo_refused(bpe, "fifo_generation", "generation_config.json", load_model_dir, 0, "dt_model_load");
    expect_fifo_refused(bpe, "fifo_tokenizer", "tokenizer.json", load_model_dir, 0, "dt_model_load");
    expect_fifo_refused(bpe, "fifo_tokenizer_dir", "tokenizer.json", load_tokenizer, 0, "dt_tok_load");
    expect_fifo_refused(bpe, "fifo_tokenizer_config", "tokenizer_config.json", load_model_dir, 0, "dt_model_load");
    expect_fifo_refused(bpe, "fifo_tokenizer_config_tok", "tokenizer_config.json", load_tokenizer, 0, "dt_tok_load");
    expect_fifo_refused(bytes, "fifo_marker", "difftrans_tokenizer.json", load_model_dir, 0, "dt_model_load");
    expect_fifo_refused(data, "fifo_dataset", "dataset.json", load_dataset_info, 0, "dt_tokens_info");
    expect_fifo_refused(data, "fifo_dataset_load", "dataset.json", load_dataset_train, 0, "dt_tokens_load");
    expect_fifo_refused(data, "fifo_shard", "train-00000.tok", load_dataset_train, 0, "dt_tokens_load");
    /* files a user names: a text corpus, an ids file */
    mkdir(files, 0755);
    expect_fifo_refused(files, "fifo_text", "corpus.txt", load_text, 1, "dt_text_load");
    expect_fifo_refused(files, "fifo_ids", "ids.txt", load_ids, 1, "dt_ids_read");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_tokens_capped),
        cmocka_unit_test(test_decode_sizes_checked),
        cmocka_unit_test(test_odd_head_dim_refused),
        cmocka_unit_test(test_load_checks_before_allocating),
        cmocka_unit_test(test_train_state_too_large),
        cmocka_unit_test(test_resume_leaves_caller_options_clean),
        cmocka_unit_test(test_metrics_write_failure_reported),
        cmocka_unit_test(test_path_truncation_refused),
        cmocka_unit_test(test_fifo_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
