/* grow.c — see grow_array in base.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int dt_grow(void *items, size_t *cap, size_t need, size_t item_size, size_t first) {
    return grow_array(items, cap, need, item_size, first);
}

int grow_array_realloc(void *items, size_t *cap, size_t need, size_t item_size, size_t first) {
    size_t n = *cap ? *cap : first ? first : 1;
    while (n < need) n = n > SIZE_MAX / 2 ? need : 2 * n; /* the last doubling that fits, then exactly need */
    if (item_size == 0 || n > SIZE_MAX / item_size) return -1;
    void *old;
    memcpy(&old, items, sizeof old);
    void *p = realloc(old, n * item_size);
    if (!p) return -1;
    memcpy(items, &p, sizeof p);
    *cap = n;
    return 0;
}

void *calloc_aligned(size_t count, size_t item_size) {
    if (item_size && count > (SIZE_MAX - 63) / item_size) return NULL;
    const size_t bytes = (count * item_size + 63) / 64 * 64; /* C11 wants a multiple of the alignment */
    void *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) memset(p, 0, bytes ? bytes : 64);
    return p;
}
