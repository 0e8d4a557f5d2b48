/* fuzz_train_state.c — train_state.json from anyone: `train --resume` reads it first and must
 * refuse it, or accept it and go on to the checkpoint (absent here, so the run stops there). */
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    fz_write("train_state.json", data, n);
    dt_train_options o;
    memset(&o, 0, sizeof o);
    o.out_dir = fz_dir();
    o.resume = 1;
    o.quiet = 1;
    dt_error err;
    if (dt_train(&o, &err) == 0) abort(); /* there is no model: it cannot have trained */
    if (o.data_path) abort();             /* never the library's own buffer */
    return 0;
}
