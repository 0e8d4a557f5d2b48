/* data.c — byte-level text data and held-out evaluation. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "difftrans.h"
#include "internal.h"
#include "train/optim.h"

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
    double total = 0;
    scored = 0;
    /* batch by batch, so that a loss that is not finite is refused naming its windows: a mean of nan printed
     * as a result says nothing of where the model broke */
    for (size_t w0 = 0; w0 < windows; w0 += (size_t)B) {
        const size_t end = windows - w0 < (size_t)B ? windows : w0 + (size_t)B;
        double part;
        size_t got;
        if (eval_window_range(m, rs, in, tg, tokens, B, T, w0, end, &part, &got, err) != 0) return -1;
        if (!isfinite(part)) {
            char which[64];
            if (end - w0 == 1) snprintf(which, sizeof which, "window %zu", w0);
            else snprintf(which, sizeof which, "windows %zu..%zu", w0, end - 1);
            return dt_fail_format(err, "the loss of %s (tokens %zu..%zu) is %g: the model's weights overflow float32",
                                  which, w0 * (size_t)T, end * (size_t)T, isnan(part) ? NAN : part);
        }
        total += part;
        scored += got;
    }
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
    /* checked before the caps below: T = 0 would divide by zero, a negative B would pass as huge */
    if (B < 1 || T < 1) return dt_fail(err, "batch %d × sequence %d: both must be positive", B, T);
    if (T > m->cfg.max_position_embeddings) T = m->cfg.max_position_embeddings;
    if ((size_t)T + 1 > n) T = (int)(n - 1);
    size_t windows = (n - 1) / (size_t)T;
    if ((size_t)B > windows) B = (int)windows;
    dt_runstate *rs = dt_runstate_create(m, B, T, err);
    int *in = malloc((size_t)B * T * sizeof(int)), *tg = malloc((size_t)B * T * sizeof(int));
    int rc = -1;
    if (rs && in && tg) rc = eval_windows(m, rs, in, tg, tokens, n, B, T, 0, mean_loss, count, err);
    else if (rs) dt_fail_oom(err, "out of memory");
    dt_runstate_free(rs);
    free(in);
    free(tg);
    return rc;
}

/* ---------------------------------------------------------------- real vocabularies */

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

int train_tokens_load(const char *dir, int vocab, int T, int **tokens, size_t *n, size_t *n_train, dt_error *err) {
    int *train = NULL, *val = NULL;
    size_t nt = 0, nv = 0;
    if (dt_tokens_load(dir, "train", vocab, &train, &nt, err) != 0) return -1;
    if (dt_tokens_load(dir, "val", vocab, &val, &nv, err) != 0) {
        free(train);
        return -1;
    }
    int rc = 0;
    if (nt < (size_t)T + 2) rc = dt_fail(err, "%s: %zu training tokens is too few for seq %d", dir, nt, T);
    else if (nv < (size_t)T + 1)
        rc = dt_fail(err, "%s: %zu validation tokens is too few for seq %d (tokenize with a larger val_fraction)",
                     dir, nv, T);
    int *all = rc == 0 ? realloc(train, (nt + nv) * sizeof *all) : NULL;
    if (rc == 0 && !all) rc = dt_fail_oom(err, "%s: out of memory for %zu tokens", dir, nt + nv);
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
