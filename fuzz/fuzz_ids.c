/* fuzz_ids.c — the token-id files of `difftrans forward --input` (dt_ids_read): any bytes are
 * refused or give a rectangular matrix of ids in [0, vocab). */
#include <stdlib.h>

#include "difftrans.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char path[1024];
    fz_write("ids.txt", data, n);
    fz_path(path, sizeof path, "ids.txt");
    int *ids, rows, cols;
    dt_error err;
    const int vocab = 300;
    if (dt_ids_read(path, vocab, &ids, &rows, &cols, &err) != 0) return 0;
    if (rows <= 0 || cols <= 0) abort();
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        if (ids[i] < 0 || ids[i] >= vocab) abort();
    free(ids);
    return 0;
}
