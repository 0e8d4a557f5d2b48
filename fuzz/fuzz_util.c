/* fuzz_util.c — see fuzz_util.h. */
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *fz_dir(void) {
    static char dir[512];
    if (!dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/difftrans-fuzz-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
    }
    return dir;
}

void fz_path(char *out, size_t n, const char *name) {
    if ((size_t)snprintf(out, n, "%s/%s", fz_dir(), name) >= n) abort();
}

void fz_write(const char *name, const uint8_t *data, size_t n) {
    char path[1024];
    fz_path(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

void fz_split(const uint8_t *data, size_t n, const char *sep, size_t sep_n, size_t *n1, const uint8_t **p2,
              size_t *n2) {
    for (size_t i = 0; i + sep_n <= n; i++)
        if (memcmp(data + i, sep, sep_n) == 0) {
            *n1 = i;
            *p2 = data + i + sep_n;
            *n2 = n - i - sep_n;
            return;
        }
    *n1 = n;
    *p2 = data + n;
    *n2 = 0;
}

void fz_write3(const uint8_t *data, size_t n, const char *sep, size_t sep_n, const char *const names[3], size_t *len) {
    const uint8_t *p[3];
    size_t part[3], rest_n;
    p[0] = data;
    fz_split(data, n, sep, sep_n, &part[0], &p[1], &rest_n);
    fz_split(p[1], rest_n, sep, sep_n, &part[1], &p[2], &part[2]);
    for (int k = 0; k < 3; k++) {
        fz_write(names[k], p[k], part[k]);
        if (len) len[k] = part[k];
    }
}
