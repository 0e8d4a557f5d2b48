/* plan.h — what a resumable command (`difftrans study`, `difftrans compare`) keeps of the options
 * that fix its runs, so that a resume with other options is refused before any run is touched
 * (internal; plan.c). */
#ifndef DT_ANALYSIS_PLAN_H
#define DT_ANALYSIS_PLAN_H

#include <stdint.h>

#include "difftrans.h"

struct cJSON;

/* The shortest decimal that reads back as f, as a double: what a person wrote (0.002), not the
 * float widened (0.0020000000949949026). */
double plan_float_decimal(float f);
/* 0 when the plan file path holds every member of want with the same value; -1 (DT_ERR_INVALID)
 * naming the first that differs. `what` names the saved work in the message ("study"). lr is a
 * float: plans that hold it widened (0.0020000000949949026 for 0.002) still match. */
int plan_check(const char *path, const struct cJSON *want, const char *what, dt_error *err);
/* FNV-1a over the bytes of n files, in order, as 16 hex digits: other contents, another
 * fingerprint. */
int plan_fingerprint(const char *const *paths, int n, char out[17], dt_error *err);

#endif
