/* data.c — byte-level text data and held-out evaluation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "difftrans.h"
#include "train/optim.h"

int dt_text_load(const char *path, int **tokens, size_t *n, dt_error *err) {
    *tokens = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return dt_fail(err, "%s: cannot open data file: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return dt_fail(err, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size == 0) {
        fclose(f);
        return dt_fail(err, "%s: data file is empty", path);
    }
    unsigned char *bytes = malloc(size);
    int *ids = malloc(size * sizeof(int));
    if (!bytes || !ids || fread(bytes, 1, size, f) != size) {
        int saved = errno;
        free(bytes);
        free(ids);
        fclose(f);
        return dt_fail(err, "%s: cannot read %zu bytes: %s", path, size, bytes ? strerror(saved) : "out of memory");
    }
    fclose(f);
    for (size_t i = 0; i < size; i++) ids[i] = bytes[i]; /* byte-level tokenizer: id = byte */
    free(bytes);
    *tokens = ids;
    *n = size;
    return 0;
}

int eval_window_range(const dt_model *m, dt_runstate *rs, int *in, int *tg, const int *tokens, int B, int T,
                      size_t first, size_t end, double *loss_sum, size_t *scored, dt_error *err) {
    *loss_sum = 0;
    *scored = 0;
    for (size_t w0 = first; w0 < end; w0 += (size_t)B) {
        int b = (int)((end - w0) < (size_t)B ? end - w0 : (size_t)B);
        for (int i = 0; i < b; i++) {
            const int *src = tokens + (w0 + (size_t)i) * T;
            memcpy(in + (size_t)i * T, src, (size_t)T * sizeof(int));
            memcpy(tg + (size_t)i * T, src + 1, (size_t)T * sizeof(int));
        }
        float loss;
        if (dt_forward(m, rs, in, tg, b, T, &loss, err) != 0) return -1;
        *loss_sum += (double)loss * b * T;
        *scored += (size_t)b * T;
    }
    return 0;
}

int eval_windows(const dt_model *m, dt_runstate *rs, int *in, int *tg, const int *tokens, size_t n, int B, int T,
                 size_t max_windows, double *mean_loss, size_t *count, dt_error *err) {
    size_t windows = eval_window_count(n, T, max_windows), scored;
    if (windows == 0) return dt_fail(err, "evaluation needs at least %d tokens, got %zu", T + 1, n);
    double total;
    if (eval_window_range(m, rs, in, tg, tokens, B, T, 0, windows, &total, &scored, err) != 0) return -1;
    *mean_loss = total / (double)scored;
    if (count) *count = scored;
    return 0;
}

size_t eval_window_count(size_t n, int T, size_t max_windows) {
    size_t windows = n > 0 ? (n - 1) / (size_t)T : 0; /* window w predicts tokens w·T+1 .. w·T+T */
    return max_windows && windows > max_windows ? max_windows : windows;
}

int dt_eval_tokens(const dt_model *m, const int *tokens, size_t n, int B, int T, double *mean_loss, size_t *count,
                   dt_error *err) {
    if (n < 2) return dt_fail(err, "evaluation needs at least 2 tokens, got %zu", n);
    if (T > m->cfg.max_position_embeddings) T = m->cfg.max_position_embeddings;
    if ((size_t)T + 1 > n) T = (int)(n - 1);
    size_t windows = (n - 1) / (size_t)T;
    if ((size_t)B > windows) B = (int)windows;
    dt_runstate *rs = dt_runstate_create(m, B, T, err);
    int *in = malloc((size_t)B * T * sizeof(int)), *tg = malloc((size_t)B * T * sizeof(int));
    int rc = -1;
    if (rs && in && tg) rc = eval_windows(m, rs, in, tg, tokens, n, B, T, 0, mean_loss, count, err);
    else if (rs) dt_fail(err, "out of memory");
    dt_runstate_free(rs);
    free(in);
    free(tg);
    return rc;
}
