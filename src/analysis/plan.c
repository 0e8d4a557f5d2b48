/* plan.c — the plan files of resumable commands; see plan.h. */
#include "analysis/plan.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

double plan_float_decimal(float f) {
    char buf[32];
    for (int digits = 1; digits < 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

int plan_check(const char *path, const cJSON *want, const char *what, dt_error *err) {
    cJSON *have = json_load_file(path, err);
    if (!have) return -1;
    int rc = 0;
    for (const cJSON *w = want->child; w && rc == 0; w = w->next) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(have, w->string);
        const int same_float = h && !strcmp(w->string, "lr") && cJSON_IsNumber(h) &&
                               (float)h->valuedouble == (float)w->valuedouble;
        if (!same_float && (!h || !cJSON_Compare(w, h, 1))) {
            char *a = cJSON_PrintUnformatted(w), *b = h ? cJSON_PrintUnformatted(h) : NULL;
            rc = dt_fail(err, "%s: the %s there was planned with %s %s, not %s: resume it with the options it was "
                              "made with, or choose another output directory",
                         path, what, w->string, b ? b : "(none)", a ? a : "?");
            cJSON_free(a);
            cJSON_free(b);
        }
    }
    cJSON_Delete(have);
    return rc;
}

int plan_fingerprint(const char *const *paths, int n, char out[17], dt_error *err) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int f = 0; f < n; f++) {
        FILE *fp = open_regular_file(paths[f], err); /* streamed: a training text may be large */
        if (!fp) return -1;
        unsigned char buf[65536];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, fp)) > 0)
            for (size_t i = 0; i < got; i++) h = (h ^ buf[i]) * 0x100000001b3ull;
        const int bad = ferror(fp), saved = errno;
        fclose(fp);
        if (bad) return dt_fail_io(err, "%s: read failed: %s", paths[f], strerror(saved));
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    return 0;
}
