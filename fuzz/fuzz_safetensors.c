/* fuzz_safetensors.c — model.safetensors from anyone: dt_st_open must refuse or accept every byte
 * string without a memory error, and every tensor it accepts must read back whole. */
#include <stdlib.h>

#include "difftrans.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char path[1024];
    fz_write("model.safetensors", data, n);
    fz_path(path, sizeof path, "model.safetensors");
    dt_safetensors st;
    dt_error err;
    if (dt_st_open(&st, path, &err) != 0) return 0;
    for (int i = 0; i < st.n; i++) {
        const dt_st_tensor *t = &st.tensors[i];
        if (dt_st_find(&st, t->name) != t) abort(); /* names are unique */
        /* the data section bounds numel: at most n/2 floats, so this allocation is the input's size */
        float *x = malloc((t->numel ? t->numel : 1) * sizeof(float));
        if (!x) abort();
        dt_st_read_f32(&st, t, x);
        free(x);
    }
    dt_st_close(&st);
    return 0;
}
