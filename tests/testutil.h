/* testutil.h — small helpers shared by the cmocka tests. */
#ifndef DT_TESTUTIL_H
#define DT_TESTUTIL_H
#include <stddef.h>
#include <stdint.h>

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
/* The whole file, NUL-terminated (free with free()); *n gets its length when n is not NULL.
 * Aborts when the file cannot be read. */
char *tu_read_file(const char *path, size_t *n);
int tu_file_exists(const char *path);
/* max over i of |a−b|; +inf when any element of either side is NaN */
float tu_max_abs_diff(const float *a, const float *b, size_t n);
/* max over i of |a−b| / max(|a|, |b|, floor); +inf when any element of either side is NaN */
float tu_max_rel_diff(const float *a, const float *b, size_t n, float floor);
#endif
