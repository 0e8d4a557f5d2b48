/* data.c — byte-level text data and held-out evaluation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "difftrans.h"
#include "internal.h"
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

/* ---------------------------------------------------------------- real vocabularies */

int dt_model_tokenizer(const dt_model *m, const char *dir, dt_tok **tok, dt_error *err) {
    *tok = NULL;
    char path[4200];
    if ((size_t)snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= sizeof path)
        return dt_fail(err, "%s: path too long", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) return 1; /* a byte-level model */
    if (dt_tok_load(tok, path, err) != 0) return -1;
    int32_t v = dt_tok_vocab_size(*tok);
    if (v > m->cfg.vocab_size) {
        dt_tok_free(*tok);
        *tok = NULL;
        return dt_fail(err, "%s: a vocabulary of %d tokens is larger than the model's embedding (vocab_size %d in "
                            "%s/config.json)", path, (int)v, m->cfg.vocab_size, dir);
    }
    return 0;
}

int dt_text_encode(const dt_tok *tok, const char *path, int **tokens, size_t *n, size_t *bytes, dt_error *err) {
    *tokens = NULL;
    *n = 0;
    int *raw = NULL;
    size_t size = 0;
    if (dt_text_load(path, &raw, &size, err) != 0) return -1; /* one int per byte: reuse its checks */
    char *text = malloc(size + 1);
    if (!text) {
        free(raw);
        return dt_fail(err, "%s: out of memory", path);
    }
    for (size_t i = 0; i < size; i++) text[i] = (char)raw[i];
    free(raw);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    dt_error e;
    int rc = dt_tok_encode(tok, text, size, 0, &ids, &n_ids, &e);
    free(text);
    if (rc != 0) return dt_fail(err, "%s: %s", path, e.msg);
    int *out = malloc((n_ids ? n_ids : 1) * sizeof *out);
    if (!out) {
        free(ids);
        return dt_fail(err, "%s: out of memory for %zu tokens", path, n_ids);
    }
    for (size_t i = 0; i < n_ids; i++) out[i] = ids[i];
    free(ids);
    *tokens = out;
    *n = n_ids;
    if (bytes) *bytes = size;
    return 0;
}

int train_vocab_from_tokenizer(dt_config *cfg, const char *tokenizer_path, dt_error *err) {
    dt_tok *tok;
    if (dt_tok_load(&tok, tokenizer_path, err) != 0) return -1;
    cfg->vocab_size = dt_tok_vocab_size(tok);
    cfg->special = dt_special_ids_none();
    cfg->special.bos_token_id = dt_tok_bos_id(tok);
    cfg->special.pad_token_id = dt_tok_pad_id(tok);
    if (dt_tok_eos_id(tok) >= 0) cfg->special.eos_token_id[cfg->special.n_eos++] = dt_tok_eos_id(tok);
    dt_tok_free(tok);
    return 0;
}

int train_text_load(const char *path, const char *tokenizer_dir, int vocab, int **tokens, size_t *n, dt_error *err) {
    if (!tokenizer_dir) {
        if (dt_text_load(path, tokens, n, err) != 0) return -1;
        for (size_t i = 0; i < *n; i++)
            if ((*tokens)[i] >= vocab)
                return dt_fail(err, "%s: byte %d at offset %zu is outside the model's vocabulary of %d", path,
                               (*tokens)[i], i, vocab);
        return 0;
    }
    dt_tok *tok;
    if (dt_tok_load(&tok, tokenizer_dir, err) != 0) return -1;
    int rc = 0;
    if (dt_tok_vocab_size(tok) > vocab)
        rc = dt_fail(err, "%s: a vocabulary of %d tokens is larger than the model's embedding (%d)", dt_tok_path(tok),
                     (int)dt_tok_vocab_size(tok), vocab);
    if (rc == 0) rc = dt_text_encode(tok, path, tokens, n, NULL, err);
    dt_tok_free(tok);
    return rc;
}

int train_tokens_load(const char *dir, int vocab, int T, int **tokens, size_t *n, size_t *n_train, dt_error *err) {
    int *train = NULL, *val = NULL;
    size_t nt = 0, nv = 0;
    if (dt_tokens_load(dir, "train", vocab, &train, &nt, err) != 0) return -1;
    if (dt_tokens_load(dir, "val", vocab, &val, &nv, err) != 0) {
        free(train);
        return -1;
    }
    int rc = 0;
    if (nt < (size_t)T + 2) rc = dt_fail(err, "%s: %zu training tokens is too few for --seq %d", dir, nt, T);
    else if (nv < (size_t)T + 1)
        rc = dt_fail(err, "%s: %zu validation tokens is too few for --seq %d (tokenize with a larger --val-fraction)",
                     dir, nv, T);
    int *all = rc == 0 ? realloc(train, (nt + nv) * sizeof *all) : NULL;
    if (rc == 0 && !all) rc = dt_fail(err, "%s: out of memory for %zu tokens", dir, nt + nv);
    if (rc != 0) {
        free(train);
        free(val);
        return -1;
    }
    memcpy(all + nt, val, nv * sizeof *all);
    free(val);
    *tokens = all;
    *n = nt + nv;
    *n_train = nt;
    return 0;
}

int dt_model_has_tokenizer(const char *dir) {
    char path[4200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return stat(path, &sb) == 0;
}

/* Published tokenizer.json files are up to tens of MB; the models' copies are compared whole. */
#define MAX_TOKENIZER_BYTES ((size_t)1 << 30)

int dt_models_text(const char *const *dirs, int n, const char *path, int **tokens, size_t *count, dt_error *err) {
    const int first = n > 0 && dt_model_has_tokenizer(dirs[0]);
    char p0[4200], pi[4200];
    size_t n0 = 0, ni = 0;
    char *t0 = NULL;
    if (first) {
        snprintf(p0, sizeof p0, "%s/tokenizer.json", dirs[0]);
        if (read_text_file(p0, MAX_TOKENIZER_BYTES, "a tokenizer.json", &t0, &n0, err) != 0) return -1;
    }
    for (int i = 1; i < n; i++) {
        if (dt_model_has_tokenizer(dirs[i]) != first) {
            free(t0);
            return dt_fail(err, "%s and %s read text differently (one has a tokenizer.json, the other is byte-level)",
                           dirs[0], dirs[i]);
        }
        if (!first) continue;
        snprintf(pi, sizeof pi, "%s/tokenizer.json", dirs[i]);
        char *ti = NULL;
        if (read_text_file(pi, MAX_TOKENIZER_BYTES, "a tokenizer.json", &ti, &ni, err) != 0) {
            free(t0);
            return -1;
        }
        int same = ni == n0 && memcmp(ti, t0, n0) == 0;
        free(ti);
        if (!same) {
            free(t0);
            return dt_fail(err, "%s and %s differ: the models must share one tokenizer", p0, pi);
        }
    }
    free(t0);
    if (!first) return dt_text_load(path, tokens, count, err);
    dt_tok *tok;
    if (dt_tok_load(&tok, p0, err) != 0) return -1;
    int rc = dt_text_encode(tok, path, tokens, count, NULL, err);
    dt_tok_free(tok);
    return rc;
}
