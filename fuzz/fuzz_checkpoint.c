/* fuzz_checkpoint.c — a checkpoint directory from anyone: config.json and model.safetensors
 * (the input holds both, split at FUZZ_CKPT_SEP), checked against each other by dt_model_load.
 * An accepted model must run a forward pass: the sizes it allocates were bounded by the file. */
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "fuzz_util.h"
#include "fuzz_seps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static int ready;
    dt_error err;
    if (!ready) { /* the byte-level tokenizer file every checkpoint directory holds */
        if (dt_tokenizer_save(fz_dir(), &err) != 0) abort();
        ready = 1;
    }
    size_t n1, n2;
    const uint8_t *p2;
    fz_split(data, n, FUZZ_CKPT_SEP, sizeof FUZZ_CKPT_SEP - 1, &n1, &p2, &n2);
    fz_write("config.json", data, n1);
    fz_write("model.safetensors", p2, n2);
    dt_model m;
    if (dt_model_load(&m, fz_dir(), &err) != 0) return 0;
    const int T = m.cfg.max_position_embeddings < 4 ? m.cfg.max_position_embeddings : 4;
    int tokens[4] = {0}, targets[4] = {0};
    for (int i = 0; i < T; i++) tokens[i] = targets[i] = i % m.cfg.vocab_size;
    dt_runstate *rs = dt_runstate_create(&m, 1, T, &err);
    if (rs) {
        float loss;
        if (dt_forward(&m, rs, tokens, targets, 1, T, &loss, &err) != 0) abort();
        dt_runstate_free(rs);
    }
    dt_model_free(&m);
    return 0;
}
