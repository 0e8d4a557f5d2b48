/* error.c — dt_error: a message and a code (see difftrans.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "difftrans.h"
#include "internal.h"

static int vfail(dt_error *err, dt_errcode code, const char *fmt, va_list ap) {
    if (err) {
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        err->code = code;
    }
    return -1;
}

int dt_fail(dt_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(err, DT_ERR_INVALID, fmt, ap);
    va_end(ap);
    return -1;
}

int dt_fail_code(dt_error *err, dt_errcode code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(err, code, fmt, ap);
    va_end(ap);
    return -1;
}

int dt_fail_format(dt_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(err, DT_ERR_FORMAT, fmt, ap);
    va_end(ap);
    return -1;
}

int dt_fail_io(dt_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(err, DT_ERR_IO, fmt, ap);
    va_end(ap);
    return -1;
}

int dt_fail_oom(dt_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(err, DT_ERR_NOMEM, fmt, ap);
    va_end(ap);
    return -1;
}

int dt_fail_prefix(dt_error *err, const char *fmt, ...) {
    if (!err) return -1;
    char inner[sizeof err->msg], prefix[sizeof err->msg];
    memcpy(inner, err->msg, sizeof inner);
    inner[sizeof inner - 1] = '\0';
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (k < 0) prefix[0] = '\0';
    /* when both do not fit, the prefix gives way first, down to 256 bytes: the callee's problem
     * is the part a reader needs */
    const size_t cap = sizeof err->msg - 1 - 2;
    size_t n = strlen(inner), keep = strlen(prefix);
    const size_t room = n < cap - 256 ? cap - n : 256;
    if (keep > room) keep = room;
    if (keep + n > cap) n = cap - keep;
    memcpy(err->msg, prefix, keep);
    memcpy(err->msg + keep, ": ", 2);
    memcpy(err->msg + keep + 2, inner, n);
    err->msg[keep + 2 + n] = '\0';
    return -1;
}

int fail_as_format(dt_error *err) {
    if (err && err->code == DT_ERR_INVALID) err->code = DT_ERR_FORMAT;
    return -1;
}

const char *dt_errcode_name(dt_errcode code) {
    switch (code) {
    case DT_ERR_NONE: return "none";
    case DT_ERR_INVALID: return "invalid";
    case DT_ERR_FORMAT: return "format";
    case DT_ERR_IO: return "io";
    case DT_ERR_NOMEM: return "nomem";
    case DT_ERR_UNSUPPORTED: return "unsupported";
    case DT_ERR_DIVERGED: return "diverged";
    case DT_ERR_BUSY: return "busy";
    case DT_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown";
}
