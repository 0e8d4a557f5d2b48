/* fuzz_util.h — what the libFuzzer harnesses share: a private scratch directory per process and
 * writing the fuzzer's bytes into files there (the parsers under test read files by path). */
#ifndef DT_FUZZ_UTIL_H
#define DT_FUZZ_UTIL_H
#include <stddef.h>
#include <stdint.h>

/* The process's scratch directory (created on first use; aborts if it cannot be). */
const char *fz_dir(void);
/* out = fz_dir()/name */
void fz_path(char *out, size_t n, const char *name);
/* Writes data[0..n) to fz_dir()/name (replacing it); aborts on failure: that is the harness's
 * environment failing, not the code under test. */
void fz_write(const char *name, const uint8_t *data, size_t n);
/* Splits data at its first occurrence of sep (a byte string of sep_n bytes): part 1 before it,
 * part 2 after; without one, everything is part 1 and part 2 is empty. */
void fz_split(const uint8_t *data, size_t n, const char *sep, size_t sep_n, size_t *n1, const uint8_t **p2,
              size_t *n2);
/* Splits data at the first two occurrences of sep into three parts (later parts empty when there
 * are fewer separators) and writes part k into the work directory's file names[k]; len (when not
 * NULL) gets the parts' sizes. */
void fz_write3(const uint8_t *data, size_t n, const char *sep, size_t sep_n, const char *const names[3], size_t *len);
#endif
