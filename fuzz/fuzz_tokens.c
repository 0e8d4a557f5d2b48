/* fuzz_tokens.c — a token dataset from anyone (what `difftrans tokenize` writes): dataset.json,
 * then the shards train-00000.tok and val-00000.tok (the input holds all three, split at
 * FUZZ_TOKENS_SEP). dt_tokens_info and dt_tokens_load must refuse it or give ids that are all
 * inside the vocabulary the caller allows, as many as the shards hold. */
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "fuzz_seps.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static const char *const files[3] = {"dataset.json", FUZZ_TOKENS_TRAIN, FUZZ_TOKENS_VAL};
    size_t len[3];
    fz_write3(data, n, FUZZ_TOKENS_SEP, sizeof FUZZ_TOKENS_SEP - 1, files, len);
    dt_tokens_summary s;
    dt_error err;
    int64_t vocab = 300; /* a model's vocabulary: the byte-level one, a little more */
    if (dt_tokens_info(fz_dir(), &s, &err) == 0) {
        if (s.vocab_size < 1 || s.vocab_size > 4294967295LL) abort();
        if (s.vocab_size < (int64_t)1 << 20) vocab = s.vocab_size;
    }
    static const char *const splits[] = {"train", "val", "test"};
    for (int k = 0; k < 3; k++) {
        int *tokens = NULL;
        size_t n_tokens = 0;
        if (dt_tokens_load(fz_dir(), splits[k], vocab, &tokens, &n_tokens, &err) != 0) {
            if (tokens || n_tokens) abort(); /* nothing handed back on failure */
            continue;
        }
        if (n_tokens > (len[1] + len[2]) / 2) abort(); /* no more ids than the shards' bytes can hold */
        for (size_t i = 0; i < n_tokens; i++)
            if (tokens[i] < 0 || tokens[i] >= vocab) abort();
        free(tokens);
    }
    return 0;
}
