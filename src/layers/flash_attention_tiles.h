/* flash_attention_tiles.h — the tile sizes of the fused attention kernels and the size of one
 * thread's scratch, shared by every kernel path and by flash_attention_scratch_floats (internal). */
#ifndef DT_FLASH_ATTENTION_TILES_H
#define DT_FLASH_ATTENTION_TILES_H
#include <stddef.h>

#include "layers/layers.h"

#ifndef BQ
#define BQ 96 /* query block (rows); a multiple of every path's vector width and micro-kernel rows, and of BK */
#endif
#ifndef BK
#define BK 48 /* key tile (rows) */
#endif
#if BQ % 16 != 0 || BQ % 12 != 0 || BQ % BK != 0
#error "BQ must be a multiple of 16, of 12 and of BK"
#endif

/* Floats of one thread's slice: the largest of the four kernels' layouts (the DIFF backward:
 * at most fourteen BQ × hd tiles, four BK × BQ tiles, four statistics vectors of BQ, and the
 * dλ / dsubln partials in front), with room for the 16-float rounding of every buffer. For hd = 64
 * that is ~105k floats (420 KB) per thread, whatever T and B are. */
#define PARTIALS(w2) (16 + (((size_t)(w2) + 15) & ~(size_t)15))
static inline size_t per_thread_floats(const attention_shape *s) {
    size_t hd = (size_t)(s->hd > 0 ? s->hd : 1);
    size_t n = PARTIALS(2 * hd) + 14 * BQ * hd + 4 * (size_t)BK * BQ + 8 * BQ + 32 * 16;
    return (n + 15) & ~(size_t)15;
}

#endif
