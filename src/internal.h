/* internal.h — helpers shared inside the library, not part of the public API. */
#ifndef DT_INTERNAL_H
#define DT_INTERNAL_H
#include "difftrans.h"

/* Writes text plus a newline to path through a temporary file and a rename. */
int write_text_atomic(const char *path, const char *text, dt_error *err);
#endif
