/* ids.c — the token-id matrix files that `difftrans forward --input` reads: one sequence per
 * line of whitespace-separated ids, every line the same length, blank lines ignored. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "internal.h"
#include "base/base.h"

/* One line's ids appended to *ids (grown as needed); *count gets how many. */
static int parse_line(const char *path, int lineno, const char *s, int vocab, int **ids, size_t *n, size_t *cap,
                      int *count, dt_error *err) {
    *count = 0;
    for (;;) {
        while (isspace((unsigned char)*s)) s++;
        if (!*s) return 0;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || (*end && !isspace((unsigned char)*end))) {
            int len = 0;
            while (s[len] && !isspace((unsigned char)s[len]) && len < 20) len++;
            return dt_fail_format(err, "%s:%d: '%.*s' is not a token id", path, lineno, len, s);
        }
        if (v < 0 || v >= vocab) return dt_fail(err, "%s:%d: token id %ld is out of range [0, %d)", path, lineno, v, vocab);
        if (*n == *cap) {
            if (*cap > (size_t)DT_MAX_BATCH_TOKENS)
                return dt_fail(err, "%s:%d: more than %d token ids", path, lineno, DT_MAX_BATCH_TOKENS);
            if (grow_array(ids, cap, *n + 1, sizeof **ids, 1024) != 0)
                return dt_fail_oom(err, "%s: out of memory", path);
        }
        (*ids)[(*n)++] = (int)v;
        (*count)++;
        s = end;
    }
}

int dt_ids_read(const char *path, int vocab, int **out, int *rows_out, int *cols_out, dt_error *err) {
    FILE *f = open_regular_file(path, err);
    if (!f) return -1;
    size_t cap = 1024, n = 0, line_cap = 0;
    int *ids = malloc(cap * sizeof(int)), rows = 0, cols = -1, rc = 0, lineno = 0;
    char *line = NULL;
    ssize_t got;
    if (!ids) rc = dt_fail_oom(err, "%s: out of memory", path);
    while (rc == 0 && (got = getline(&line, &line_cap, f)) != -1) {
        lineno++;
        /* the parser stops at a NUL: the rest of the line would be silently dropped */
        if (memchr(line, '\0', (size_t)got)) {
            rc = dt_fail_format(err, "%s:%d: a NUL byte inside the line (not a text file of token ids?)", path, lineno);
            break;
        }
        int count;
        if ((rc = parse_line(path, lineno, line, vocab, &ids, &n, &cap, &count, err)) != 0) break;
        if (count == 0) continue; /* blank lines separate nothing */
        if (cols >= 0 && count != cols)
            rc = dt_fail_format(err, "%s:%d: ragged batch: %d ids, but earlier lines have %d", path, lineno, count,
                                cols);
        cols = count;
        rows++;
    }
    if (rc == 0 && ferror(f)) rc = dt_fail_io(err, "%s: read failed: %s", path, strerror(errno));
    free(line);
    fclose(f);
    if (rc == 0 && rows == 0) rc = dt_fail_format(err, "%s: empty batch: no token ids", path);
    if (rc) {
        free(ids);
        return rc;
    }
    *out = ids;
    *rows_out = rows;
    *cols_out = cols;
    return 0;
}
