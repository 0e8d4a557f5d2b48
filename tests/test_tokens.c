/* test_tokens.c — reading token datasets (what `difftrans tokenize` writes) from hand-made
 * manifests and shards: a good one reads back exactly, and lying manifests are refused with a
 * message before anything is allocated for them (cases found while fuzzing the reader, fuzz_tokens);
 * and writing them with validation files given apart (val_inputs): the splits are exactly those files. */
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
    dt_error err = {0};
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
    dt_error err = {0};
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

/* dt_tokens_info on a manifest of the good dataset's splits with `fields` before them: refused
 * with a message naming `key` */
static void expect_info_refuses(const char *name, const char *fields, const char *key) {
    char manifest[1024];
    snprintf(manifest, sizeof manifest, "{\"format\": \"difftrans-tokens\", %s, \"splits\": {\"train\": {\"shards\":"
             " [\"train-00000.tok\"], \"tokens\": 3}, \"val\": {\"shards\": [\"val-00000.tok\"], \"tokens\": 1}}}", fields);
    const char *dir = dataset(name, manifest);
    dt_tokens_summary s;
    dt_error err = {0};
    if (dt_tokens_info(dir, &s, &err) == 0) fail_msg("%s: {%s} accepted", name, fields);
    if (!strstr(err.msg, "dataset.json") || !strstr(err.msg, key))
        fail_msg("%s: message '%s' does not name dataset.json and %s", name, err.msg, key);
}

static void test_manifest_numbers_out_of_range(void **state) {
    (void)state;
    /* every number is checked as a double before it becomes an integer: converting 2^31 to an int,
     * or 1e300 or an infinity (cJSON reads 1e999 as one) to anything, is undefined behaviour (UBSan
     * stops the ASan build's run); a fraction would be truncated silently */
    expect_info_refuses("eos_2p31", "\"vocab_size\": 300, \"eos_id\": 2147483648", "eos_id");
    expect_info_refuses("eos_1e300", "\"vocab_size\": 300, \"eos_id\": 1e300", "eos_id");
    expect_info_refuses("eos_1e999", "\"vocab_size\": 300, \"eos_id\": 1e999", "eos_id");
    expect_info_refuses("eos_-1e999", "\"vocab_size\": 300, \"eos_id\": -1e999", "eos_id");
    expect_info_refuses("eos_frac", "\"vocab_size\": 300, \"eos_id\": 3.5", "eos_id");
    expect_info_refuses("eos_-2", "\"vocab_size\": 300, \"eos_id\": -2", "eos_id");
    expect_info_refuses("eos_vocab", "\"vocab_size\": 300, \"eos_id\": 300", "eos_id");
    expect_info_refuses("eos_string", "\"vocab_size\": 300, \"eos_id\": \"2\"", "eos_id");
    /* a vocabulary no model can have (dt_config_validate's limit, 4194304), even with an eos id inside it */
    expect_info_refuses("vocab_2p31", "\"vocab_size\": 2147483649, \"eos_id\": 2147483648", "vocab_size");
    expect_info_refuses("vocab_limit", "\"vocab_size\": 4194305", "vocab_size");
    expect_info_refuses("vocab_1e999", "\"vocab_size\": 1e999", "vocab_size");
    expect_info_refuses("vocab_frac", "\"vocab_size\": 300.5", "vocab_size");
    expect_info_refuses("vocab_0", "\"vocab_size\": 0", "vocab_size");
    expect_info_refuses("vocab_-1", "\"vocab_size\": -1", "vocab_size");
    expect_info_refuses("vocab_missing", "\"eos_id\": 2", "vocab_size");
    /* counts: whole numbers in [0, 2^53] when present */
    expect_info_refuses("bytes_-5", "\"vocab_size\": 300, \"bytes\": -5", "bytes");
    expect_info_refuses("bytes_1e300", "\"vocab_size\": 300, \"bytes\": 1e300", "bytes");
    expect_info_refuses("bytes_frac", "\"vocab_size\": 300, \"bytes\": 40.25", "bytes");
    dt_tokens_summary s;
    dt_error err = {0};
    const char *dir = dataset("tokens_1e30", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"splits\":"
                                             " {\"train\": {\"shards\": [\"train-00000.tok\"], \"tokens\": 1e30}}}");
    if (dt_tokens_info(dir, &s, &err) == 0 || !strstr(err.msg, "splits.train.tokens"))
        fail_msg("train tokens 1e30: %s", err.msg);
    expect_load_fails(dir, "train", "splits.train.tokens");
    dir = dataset("tokens_-1", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"splits\":"
                               " {\"val\": {\"shards\": [\"val-00000.tok\"], \"tokens\": -1}}}");
    if (dt_tokens_info(dir, &s, &err) == 0 || !strstr(err.msg, "splits.val.tokens"))
        fail_msg("val tokens -1: %s", err.msg);
    expect_load_fails(dir, "val", "splits.val.tokens");
    dir = dataset("tokens_frac", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"splits\":"
                                 " {\"train\": {\"shards\": [\"train-00000.tok\"], \"tokens\": 2.5}}}");
    expect_load_fails(dir, "train", "splits.train.tokens");
    /* the edges are accepted: the largest vocabulary with its last id as eos, eos -1 or null (none),
     * absent counts (unknown: 0) */
    dir = dataset("edges", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 4194304, \"eos_id\": 4194303}");
    if (dt_tokens_info(dir, &s, &err) != 0) fail_msg("edges: %s", err.msg);
    assert_int_equal(s.vocab_size, 4194304);
    assert_int_equal(s.eos_id, 4194303);
    assert_int_equal(s.bytes, 0);
    assert_int_equal(s.tokens[0], 0);
    dir = dataset("eos_none", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"eos_id\": -1, \"bytes\": 0}");
    if (dt_tokens_info(dir, &s, &err) != 0) fail_msg("eos -1: %s", err.msg);
    assert_int_equal(s.eos_id, -1);
    dir = dataset("eos_null", "{\"format\": \"difftrans-tokens\", \"vocab_size\": 300, \"eos_id\": null}");
    if (dt_tokens_info(dir, &s, &err) != 0) fail_msg("eos null: %s", err.msg);
    assert_int_equal(s.eos_id, -1);
}

/* path: n paragraphs "<word> document k ..." separated by blank lines */
static void write_documents(const char *path, const char *word, int n) {
    size_t cap = (size_t)n * 96 + 1, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (int k = 0; k < n; k++)
        len += (size_t)snprintf(text + len, cap - len, "%s document %d says %s things.\nIt ends here.\n\n", word, k,
                                k % 2 ? "odd" : "even");
    tu_write_file(path, text, len);
    free(text);
}

/* dt_tokenize of the inputs (and validation files) into dir; the stats into *st */
static int tokenize_files(const char *tok, const char *const *in, int n_in, const char *const *val, int n_val,
                          float val_fraction, const char *dir, dt_tokenize_stats *st, dt_error *err) {
    dt_tokenize_options o;
    dt_tokenize_defaults(&o);
    o.tokenizer_path = tok;
    o.inputs = in;
    o.n_inputs = n_in;
    o.val_inputs = val;
    o.n_val_inputs = n_val;
    o.val_fraction = val_fraction;
    o.out_dir = dir;
    o.quiet = 1;
    return dt_tokenize(&o, st, err);
}

static void load_split(const char *dir, const char *split, int **ids, size_t *n) {
    dt_error err = {0};
    if (dt_tokens_load(dir, split, 4096, ids, n, &err) != 0) fail_msg("%s %s: %s", dir, split, err.msg);
}

static void expect_same_ids(const int *a, size_t na, const int *b, size_t nb, const char *what) {
    if (na != nb) fail_msg("%s: %zu tokens, expected %zu", what, na, nb);
    for (size_t i = 0; i < na; i++)
        if (a[i] != b[i]) fail_msg("%s: token %zu is %d, expected %d", what, i, a[i], b[i]);
}

static void test_validation_files(void **state) {
    (void)state;
    char train_txt[1200], val_txt[1200], tok[1200], both[1200], alone_train[1200], alone_val[1200], frac[1200];
    tu_path(train_txt, sizeof train_txt, "vf_train.txt");
    tu_path(val_txt, sizeof val_txt, "vf_val.txt");
    tu_path(tok, sizeof tok, "vf_tok");
    tu_path(both, sizeof both, "vf_both");
    tu_path(alone_train, sizeof alone_train, "vf_alone_train");
    tu_path(alone_val, sizeof alone_val, "vf_alone_val");
    tu_path(frac, sizeof frac, "vf_frac");
    write_documents(train_txt, "alpha", 150);
    write_documents(val_txt, "omega", 7);
    const char *files[2] = {train_txt, val_txt};
    dt_tok_train_options to;
    dt_tok_train_defaults(&to);
    to.files = files;
    to.n_files = 2;
    to.vocab_size = 300;
    to.eos = "<|end|>";
    to.quiet = 1;
    dt_error err = {0};
    if (dt_tok_train(&to, tok, &err) != 0) fail_msg("tokenizer: %s", err.msg);

    dt_tokenize_stats st, st_train, st_val;
    if (tokenize_files(tok, (const char *const[]){train_txt}, 1, (const char *const[]){val_txt}, 1, 0, both, &st, &err) != 0)
        fail_msg("with validation files: %s", err.msg);
    assert_int_equal(st.documents[0], 150);
    assert_int_equal(st.documents[1], 7);
    /* each file alone, all of it training: what the two splits must be, token for token (a
     * validation document that leaked into the training split would make it longer) */
    const char *const *none = NULL;
    if (tokenize_files(tok, (const char *const[]){train_txt}, 1, none, 0, 0, alone_train, &st_train, &err) != 0 ||
        tokenize_files(tok, (const char *const[]){val_txt}, 1, none, 0, 0, alone_val, &st_val, &err) != 0)
        fail_msg("alone: %s", err.msg);
    int *a, *b;
    size_t na, nb;
    load_split(both, "train", &a, &na);
    load_split(alone_train, "train", &b, &nb);
    expect_same_ids(a, na, b, nb, "the training split");
    free(a);
    free(b);
    load_split(both, "val", &a, &na);
    load_split(alone_val, "train", &b, &nb);
    expect_same_ids(a, na, b, nb, "the validation split");
    free(a);
    free(b);
    char manifest[1300];
    snprintf(manifest, sizeof manifest, "%s/dataset.json", both);
    char *text = tu_read_file(manifest, NULL);
    if (!strstr(text, "\"val_files\"") || !strstr(text, "vf_val.txt")) fail_msg("dataset.json does not name the validation file");
    free(text);

    /* held out by fraction instead, the same training file gives up documents of its own: the
     * comparison above could fail */
    if (tokenize_files(tok, (const char *const[]){train_txt}, 1, none, 0, 0.05f, frac, &st, &err) != 0) fail_msg("fraction: %s", err.msg);
    assert_true(st.documents[1] > 0);
    assert_true(st.tokens[0] < st_train.tokens[0]);
    /* both ways at once are refused, naming the conflict */
    if (tokenize_files(tok, (const char *const[]){train_txt}, 1, (const char *const[]){val_txt}, 1, 0.01f, frac, &st, &err) == 0)
        fail_msg("validation files with a val_fraction accepted");
    if (!strstr(err.msg, "exclusive")) fail_msg("message '%s' does not say the two are exclusive", err.msg);
    /* a missing or empty validation file is named */
    char empty[1200];
    tu_path(empty, sizeof empty, "vf_empty.txt");
    tu_write_file(empty, "", 0);
    if (tokenize_files(tok, (const char *const[]){train_txt}, 1, (const char *const[]){empty}, 1, 0, frac, &st, &err) == 0 ||
        !strstr(err.msg, "vf_empty.txt"))
        fail_msg("an empty validation file: '%s'", err.msg);
}

/* Options a library caller left out are refused naming the field (the CLI's flags never reach here). */
static void test_missing_options_named(void **state) {
    (void)state;
    static const char *const in[1] = {"unused.txt"};
    static const struct {
        const char *tok, *out, *field;
        const char *const *inputs;
        int n_inputs;
    } cases[] = {
        {NULL, "o", "tokenizer_path", in, 1},
        {"t", NULL, "out_dir", in, 1},
        {"t", "o", "n_inputs 0", in, 0},
        {"t", "o", "inputs NULL", NULL, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dt_tokenize_stats st;
        dt_error err = {0};
        if (tokenize_files(cases[i].tok, cases[i].inputs, cases[i].n_inputs, NULL, 0, 0, cases[i].out, &st, &err) == 0)
            fail_msg("case %zu accepted", i);
        if (!strstr(err.msg, cases[i].field)) fail_msg("case %zu: '%s' does not name %s", i, err.msg, cases[i].field);
    }
    dt_tokenize_stats st;
    dt_error err = {0};
    if (tokenize_files("t", in, 1, NULL, 2, 0, "o", &st, &err) == 0 || !strstr(err.msg, "n_val_inputs 2"))
        fail_msg("validation count without a list: '%s'", err.msg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_dataset),
        cmocka_unit_test(test_shard_listed_twice),
        cmocka_unit_test(test_count_checked_before_growing),
        cmocka_unit_test(test_manifest_numbers_out_of_range),
        cmocka_unit_test(test_validation_files),
        cmocka_unit_test(test_missing_options_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
