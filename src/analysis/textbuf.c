/* textbuf.c — see textbuf.h. */
#include "analysis/textbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "base/base.h"

void tb_printf(textbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && (size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        if (grow_array(&b->s, &b->cap, b->n + (size_t)k + 1, 1, 4096) != 0) {
            b->oom = 1;
            return;
        }
    }
}

int tb_write(const char *path, const textbuf *b, dt_error *err) {
    if (b->oom) return dt_fail_oom(err, "%s: out of memory building the text", path);
    return write_file_atomic(path, b->s, b->n, err);
}
