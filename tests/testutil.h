/* testutil.h — small helpers shared by the cmocka tests. */
#ifndef DT_TESTUTIL_H
#define DT_TESTUTIL_H
#include <stddef.h>
#include <stdint.h>

#include "difftrans.h"

/* 1 in a build under AddressSanitizer (whose shadow memory defeats tests that cap the address space). */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* A per-test scratch directory (from $DT_TEST_TMP, created if needed). */
const char *tu_tmpdir(void);
/* out = tmpdir/name */
void tu_path(char *out, size_t n, const char *name);
void tu_fill_normal(float *x, size_t n, float std, uint64_t *rng);
/* Float buffers for tests (abort when out of memory; free with free()): uninitialised, normal
 * random, all NaN (so that a kernel reading what it should not shows up), or a copy. */
float *fnew(size_t n);
float *frand(size_t n, float std, uint64_t *rng);
float *fnan(size_t n);
float *fcopy(const float *x, size_t n);
void tu_write_file(const char *path, const void *data, size_t n);
/* GPT-2's printable stand-in for byte b (the ByteLevel alphabet), as UTF-8 into out: how a
 * byte-level tokenizer.json spells the byte. */
void tu_bytelevel_char(int b, char out[4]);
/* The whole file, NUL-terminated (free with free()); *n gets its length when n is not NULL.
 * Aborts when the file cannot be read. */
char *tu_read_file(const char *path, size_t *n);
int tu_file_exists(const char *path);
/* The names of the *.json files in folder `sub` of the tokenizer test data (DT_TOKENIZER_TESTS,
 * set by ctest), sorted, at most 256; *dir_out (when not NULL) gets that folder's path. Free with
 * tu_free_names. Aborts when the variable is unset or the folder cannot be read. */
int tu_tokenizer_test_files(const char *sub, char ***names, char *dir_out, size_t dir_n);
void tu_free_names(char **names, int n);
/* A one-layer DIFF model of width 16 (2 heads of 8), small enough to walk every allocation and
 * write of a training run; aborts if the preset is missing. */
void tu_tiny_diff_config(dt_config *c);
/* Training options for that model: `steps` steps of batch 2 × seq on data_path into out, one
 * warm-up step, no evaluation, no periodic checkpoint, quiet. */
void tu_tiny_train_options(dt_train_options *o, const char *data_path, const char *out, int steps, int seq);

/* max over i of |a−b|; +inf when any element of either side is NaN */
float tu_max_abs_diff(const float *a, const float *b, size_t n);
/* max over i of |a−b| / max(|a|, |b|, floor); +inf when any element of either side is NaN */
float tu_max_rel_diff(const float *a, const float *b, size_t n, float floor);

/* Whole-model checks shared by the model tests; each returns 0, or −1 with what failed in msg. */
/* A few entries of every parameter tensor: the backward on `kernel` against central finite
 * differences of the loss (B = 2, T = 6 random tokens, one ignored target). */
int tu_model_gradient_check(dt_model *m, dt_attention_kernel kernel, int probes, char *msg, size_t n);
/* The fused attention kernel against the reference one through the whole model: logits, loss and
 * every gradient, on B × T random tokens. */
int tu_fused_matches_reference(dt_model *m, int B, int T, char *msg, size_t n);
/* The logits of two models on the same T random tokens: max relative (floor 1) or absolute
 * difference; +inf when either forward fails. */
float tu_logits_max_diff(const dt_model *a, const dt_model *b, int T, uint64_t seed, int relative);
#endif
