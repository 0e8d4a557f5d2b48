/* textbuf.h — a growing text buffer for the report writers (internal). Out of memory is sticky:
 * later appends do nothing and tb_write fails naming the file. */
#ifndef DT_TEXTBUF_H
#define DT_TEXTBUF_H
#include <stddef.h>

#include "difftrans.h"

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} textbuf;

void tb_printf(textbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes the text to path atomically; does not free it. */
int tb_write(const char *path, const textbuf *b, dt_error *err);
#endif
