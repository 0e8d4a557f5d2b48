/* fuzz_shards.c — sharded weights from anyone: model.safetensors.index.json and two shards (the
 * input holds all three, split at FUZZ_SHARD_SEP). dt_st_set_open must refuse them or give a set
 * in which every tensor is found in its file and reads back whole. */
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "fuzz_seps.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static const char *const files[3] = {"model.safetensors.index.json", FUZZ_SHARD_1, FUZZ_SHARD_2};
    fz_write3(data, n, FUZZ_SHARD_SEP, sizeof FUZZ_SHARD_SEP - 1, files, NULL);
    dt_st_set set;
    dt_error err;
    if (dt_st_set_open(&set, fz_dir(), &err) != 0) return 0;
    for (int f = 0; f < set.n_files; f++)
        for (int i = 0; i < set.files[f].n; i++) {
            const dt_st_tensor *t = &set.files[f].tensors[i];
            const dt_safetensors *file = NULL;
            if (dt_st_set_find(&set, t->name, &file) != t || file != &set.files[f]) abort();
            {
                float *x = malloc((t->numel ? t->numel : 1) * sizeof(float)); /* bounded by the file's size */
                if (!x) abort();
                dt_st_read_f32(file, t, x);
                free(x);
            }
        }
    dt_st_set_close(&set);
    return 0;
}
