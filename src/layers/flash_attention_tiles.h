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
 * dλ / dsubln partials in front), with room for the 16-float rounding of every buffer, plus the
 * row blocks of the DIFF row-block path (diff_rows_floats). For hd = 64 that is ~105k floats
 * (420 KB) per thread, whatever T and B are, and 3·T·BQ more on the row-block path. */
#define PARTIALS(w2) (16 + (((size_t)(w2) + 15) & ~(size_t)15))

/* DIFF up to this T takes the row-block path (flash_attention.c): a query block's scores of both
 * maps against all its keys are held at once, [T, BQ] floats per map (the backward also holds dP:
 * 3·T·BQ floats, 1.2 MB per thread at T = 1024), so that the forward does one product P·V with
 * P = softmax(S1) − λ·softmax(S2) and needs no o12. */
#ifndef DIFF_ROWS_MAX_T
#define DIFF_ROWS_MAX_T 1024
#endif
static inline int diff_rows(const attention_shape *s) { return s->diff && !s->diff_online && s->T <= DIFF_ROWS_MAX_T; }
static inline size_t diff_rows_floats(const attention_shape *s) {
    return diff_rows(s) ? 3 * (((size_t)s->T * BQ + 15) & ~(size_t)15) : 0;
}

static inline size_t per_thread_floats(const attention_shape *s) {
    size_t hd = (size_t)(s->hd > 0 ? s->hd : 1);
    size_t n = PARTIALS(2 * hd) + 14 * BQ * hd + 4 * (size_t)BK * BQ + 8 * BQ + 32 * 16 + diff_rows_floats(s);
    return (n + 15) & ~(size_t)15;
}

/* The backward's ownership groups per batch row (flash_attention.c): the kv heads with every
 * query head that reads them, closed. */
static inline int bwd_groups(const attention_shape *s) {
    return s->diff ? (s->KV % 2 == 0 ? s->KV / 2 : 1) : s->KV;
}
/* Row width of one group's dK (and dV) columns: baseline one kv head; DIFF with KV even its two
 * kv heads g and g + KV/2; DIFF with KV odd every kv head. */
static inline int bwd_group_width(const attention_shape *s) {
    return s->hd * (s->diff ? (s->KV % 2 == 0 ? 2 : s->KV) : 1);
}
/* Floats of one split task's private dK and dV rows, [2, T, group width] (the backward splits a
 * group's query blocks over threads when B·groups < threads). */
static inline size_t bwd_slot_floats(const attention_shape *s) {
    size_t n = 2 * (size_t)(s->T > 0 ? s->T : 0) * (size_t)bwd_group_width(s);
    return (n + 15) & ~(size_t)15;
}

#endif
