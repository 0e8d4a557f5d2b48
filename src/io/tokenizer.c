/* tokenizer.c — the byte-level tokenizer's marker file in a checkpoint directory.
 *
 * Token id = byte value (0..255), no special tokens, so there is nothing to load: the file only
 * records which tokenizer a checkpoint was trained with, so that a checkpoint made with some
 * other tokenizer is refused instead of silently producing garbage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "difftrans.h"
#include "internal.h"

#define TOKENIZER_FILE "difftrans_tokenizer.json"
/* The marker is ~150 bytes; refuse to slurp anything much bigger. */
#define TOKENIZER_MAX_BYTES (1u << 20)

static cJSON *tokenizer_json(void) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    int ok = cJSON_AddStringToObject(root, "type", "bytes") != NULL;
    ok = ok && cJSON_AddNumberToObject(root, "version", 1);
    ok = ok && cJSON_AddNumberToObject(root, "vocab", 256);
    ok = ok && cJSON_AddStringToObject(root, "description",
                                       "byte-level: token id = byte value 0..255, no special tokens");
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int dt_tokenizer_save(const char *dir, dt_error *err) {
    char path[4096];
    if (dt_pathf(path, sizeof path, err, "%s/" TOKENIZER_FILE, dir) != 0) return -1;
    cJSON *root = tokenizer_json();
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return dt_fail_oom(err, "%s: out of memory", path);
    int rc = write_text_atomic(path, text, err);
    cJSON_free(text);
    return rc;
}

/* Reads the file (the shared bounded reader) into a NUL-terminated buffer. Returns 1 when it
 * does not exist. */
static int read_marker(const char *path, char **out, size_t *len, dt_error *err) {
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) return 1;
    return read_text_file(path, TOKENIZER_MAX_BYTES, "a tokenizer description", out, len, err);
}

int dt_tokenizer_check(const char *dir, dt_error *err) {
    char path[4096];
    if (dt_pathf(path, sizeof path, err, "%s/" TOKENIZER_FILE, dir) != 0) return -1;
    char *text = NULL;
    size_t len = 0;
    int rc = read_marker(path, &text, &len, err);
    if (rc != 0) return rc < 0 ? -1 : 0; /* absent: byte-level is the default */
    cJSON *root = cJSON_ParseWithLength(text, len);
    const int oom = !root && json_text_valid(text, len);
    free(text);
    if (oom) return dt_fail_oom(err, "%s: out of memory parsing its JSON", path);
    if (!root) return dt_fail_format(err, "%s: not valid JSON", path);
    int is_obj = cJSON_IsObject(root);
    const cJSON *type = is_obj ? cJSON_GetObjectItemCaseSensitive(root, "type") : NULL;
    const cJSON *vocab = is_obj ? cJSON_GetObjectItemCaseSensitive(root, "vocab") : NULL;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "bytes") != 0)
        rc = dt_fail_code(err, DT_ERR_UNSUPPORTED,
                          "%s: unsupported tokenizer (only {\"type\": \"bytes\"} is implemented)", path);
    else if (vocab && !(cJSON_IsNumber(vocab) && vocab->valuedouble == 256))
        rc = dt_fail_format(err, "%s: byte-level tokenizer must have vocab 256", path);
    cJSON_Delete(root);
    return rc;
}
