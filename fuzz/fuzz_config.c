/* fuzz_config.c — config.json from anyone: dt_config_load refuses or accepts, and what it accepts
 * is a valid config that survives a save / load round trip unchanged. */
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    char path[1024], again[1024];
    fz_write("config.json", data, n);
    fz_path(path, sizeof path, "config.json");
    dt_config c, d;
    dt_error err;
    if (dt_config_load(&c, path, &err) != 0) return 0;
    if (dt_config_validate(&c, "fuzz", &err) != 0) abort();
    fz_path(again, sizeof again, "again.json");
    if (dt_config_save(&c, again, &err) != 0) abort();
    if (dt_config_load(&d, again, &err) != 0) abort();
    if (memcmp(&c, &d, sizeof c) != 0) abort();
    return 0;
}
