#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "difftrans.h"

const char *tu_tmpdir(void) {
    static char dir[1024];
    if (!dir[0]) {
        const char *env = getenv("DT_TEST_TMP");
        snprintf(dir, sizeof dir, "%s", env && *env ? env : "/tmp/difftrans_test");
        char cmd[1100];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        if (system(cmd) != 0) abort();
    }
    return dir;
}

void tu_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tu_tmpdir(), name); }

void tu_fill_normal(float *x, size_t n, float std, uint64_t *rng) {
    for (size_t i = 0; i < n; i++) x[i] = std * dt_rng_normal(rng);
}

float *fnew(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (!p) abort();
    return p;
}

float *frand(size_t n, float std, uint64_t *rng) {
    float *p = fnew(n);
    tu_fill_normal(p, n, std, rng);
    return p;
}

float *fnan(size_t n) {
    float *p = fnew(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

float *fcopy(const float *x, size_t n) {
    float *p = fnew(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

void tu_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) abort();
}

char *tu_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "tu_read_file: cannot open %s\n", path);
        abort();
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) abort();
    buf[size] = '\0';
    fclose(f);
    if (n) *n = (size_t)size;
    return buf;
}

int tu_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The comparisons return +inf when either side is NaN (or an infinity differs), so a kernel that
 * produces NaN can never pass a tolerance check; fmaxf would silently skip the NaN. */
float tu_max_abs_diff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        if (a[i] == b[i]) continue; /* equal infinities agree */
        if (isinf(a[i]) || isinf(b[i])) return INFINITY;
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

float tu_max_rel_diff(const float *a, const float *b, size_t n, float floor) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        if (a[i] == b[i]) continue;
        if (isinf(a[i]) || isinf(b[i])) return INFINITY;
        float scale = fabsf(a[i]) > fabsf(b[i]) ? fabsf(a[i]) : fabsf(b[i]);
        if (scale < floor) scale = floor;
        float d = fabsf(a[i] - b[i]) / scale;
        if (!(d <= m)) m = d;
    }
    return m;
}
