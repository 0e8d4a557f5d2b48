/* json.c — the small JSON files of checkpoints and datasets (config.json, generation_config.json,
 * dataset.json, the shard index): read whole through the shared bounded reader, one JSON value. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"

/* The largest config-like file read: real ones are a few KB; a huge one is not a config. */
#define MAX_CONFIG_BYTES (16u << 20)

static int line_of(const char *text, const char *pos) {
    int line = 1;
    for (const char *p = text; p < pos; p++) line += *p == '\n';
    return line;
}

cJSON *json_load_file(const char *path, dt_error *err) {
    char *text = NULL;
    size_t len = 0;
    if (read_text_file(path, MAX_CONFIG_BYTES, "a config", &text, &len, err) != 0) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    const int oom = !root && json_text_valid(text, len);
    /* cJSON stops after the first value; trailing text means the file is not one JSON value */
    if (root && strspn(end, " \t\r\n") != (size_t)(text + len - end)) {
        cJSON_Delete(root);
        root = NULL;
    }
    if (oom) dt_fail_oom(err, "%s: out of memory parsing its JSON", path);
    else if (!root) dt_fail_format(err, "%s is not valid JSON (line %d)", path, end ? line_of(text, end) : 0);
    free(text);
    return root;
}

