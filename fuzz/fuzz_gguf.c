/* fuzz_gguf.c — a GGUF file from anyone: gguf_open must refuse or accept every byte string without
 * a memory error; everything it accepts must read back whole (every key's value, every string of
 * every array, every tensor's bytes); and dt_model_load on it (the llama model, its tokenizer
 * built from the metadata) must refuse or give a model that runs a forward pass, the sizes it
 * allocated bounded by the file. */
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "fuzz_util.h"
#include "io/gguf.h"

static volatile uint64_t sink; /* keeps the reads of the walk below */

static void walk(const gguf_file *f) {
    dt_error err;
    for (int64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (kv->type == GGUF_TYPE_ARRAY && kv->elem == GGUF_TYPE_STRING) {
            gguf_str *v;
            if (gguf_get_str_array(f, kv, &v, &err) != 0) continue; /* out of memory only */
            for (uint64_t j = 0; j < kv->n; j++) {
                if (v[j].p < (const char *)f->map || v[j].p + v[j].len > (const char *)f->map + f->size) abort();
                if (v[j].len) sink += (unsigned char)v[j].p[v[j].len - 1];
            }
            free(v);
        } else if (gguf_is_int_array(kv)) {
            for (uint64_t j = 0; j < kv->n; j++) sink += (uint64_t)gguf_array_int(kv, j);
        } else if (kv->size) {
            sink += kv->data[kv->size - 1];
        }
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (gguf_find_tensor(f, t->name) != t) abort(); /* names are unique */
        if (t->nbytes) sink += t->data[0] + t->data[t->nbytes - 1];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char path[1024];
    fz_write("model.gguf", data, n);
    fz_path(path, sizeof path, "model.gguf");
    gguf_file f;
    dt_error err;
    if (gguf_open(&f, path, &err) != 0) return 0;
    walk(&f);
    gguf_close(&f);
    dt_model m;
    if (dt_model_load(&m, path, &err) != 0) return 0;
    const int T = m.cfg.max_position_embeddings < 4 ? m.cfg.max_position_embeddings : 4;
    int tokens[4] = {0};
    for (int i = 0; i < T; i++) tokens[i] = i % m.cfg.vocab_size;
    dt_runstate *rs = dt_runstate_create(&m, 1, T, &err);
    if (rs) {
        if (dt_forward(&m, rs, tokens, NULL, 1, T, NULL, &err) != 0) abort();
        dt_runstate_free(rs);
    }
    dt_model_free(&m);
    return 0;
}
