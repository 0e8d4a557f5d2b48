/* base/base.h — the base layer's small utilities, one of each, for every folder of the library:
 * the IEEE half and bfloat16 codecs (here), a monotonic clock (clock.c) and growable arrays
 * (grow.c). Paths are joined with the public dt_pathf (util.c), which refuses a path that does
 * not fit where snprintf would cut it; files are written whole or not at all with dt_atomic_* and
 * write_text_atomic / write_file_atomic (util.c, internal.h).
 *
 * A header of its own rather than more of internal.h: internal.h is what the layers above share
 * with one another (safetensors entries, vocabularies, token datasets), this is the bottom layer
 * alone, which needs nothing but the C library, and a file that includes it says so. */
#ifndef DT_BASE_H
#define DT_BASE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------- half and bfloat16
 *
 * IEEE 754 binary16 and bfloat16 ↔ binary32. Narrowing rounds to nearest, ties to even, with
 * subnormals, as torch's .to(torch.float16 / torch.bfloat16) casts do: |x| ≥ 65520 (halfway past
 * the largest half, 65504, a tie that goes to even) becomes ±inf, as does a bfloat16 past
 * 0x1.FEp127 + half an ulp. Widening is exact.
 *
 * A NaN stays a NaN, always a quiet one, with its sign and the top bits of its payload: what the
 * x86 instructions give (F16C's vcvtps2ph / vcvtph2ps, AVX512-BF16's vcvtneps2bf16). torch has
 * no single answer to copy: c10's scalar casts give sign | 0x7E00 for a half and 0x7FC0, sign
 * dropped, for a bfloat16, its AVX2 vectorised bfloat16 cast 0xFFFF. The codecs live here,
 * inline, because the F16 KV cache widens every cached value at every decoding step. */

static inline uint32_t base_float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float base_bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t float_to_half(float f) {
    const uint32_t u = base_float_bits(f), mag = u & 0x7FFFFFFFu;
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (mag > 0x7F800000u) return sign | 0x7E00u | (uint16_t)((mag >> 13) & 0x3FFu); /* NaN */
    if (mag >= 0x477FF000u) return sign | 0x7C00u; /* ±inf, and what rounds past 65504 */
    const uint32_t e = mag >> 23;
    if (e >= 113) { /* a normal half: the exponent rebased from 127 to 15, 13 bits rounded off */
        const uint32_t r = mag - (112u << 23);
        return sign | (uint16_t)((r + 0xFFFu + ((r >> 13) & 1u)) >> 13); /* a carry moves the exponent up */
    }
    if (e < 102) return sign; /* below 2^-25, half the smallest subnormal half: ±0 */
    /* a subnormal half, in units of 2^-24: the 24-bit significand shifted right by 14..24; a
     * result of 0x400 is the smallest normal half, encoded correctly */
    const uint32_t full = (mag & 0x7FFFFFu) | 0x800000u, shift = 126 - e;
    const uint32_t q = full >> shift, rest = full & ((1u << shift) - 1), tie = 1u << (shift - 1);
    return sign | (uint16_t)(q + (rest > tie || (rest == tie && (q & 1u))));
}

static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0) { /* ±0 or subnormal: mant·2^-24, exact (an integer below 2^10 times a power of two) */
        const float mag = (float)mant * 0x1p-24f;
        return sign ? -mag : mag;
    }
    if (exp == 31) return base_bits_float(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0)); /* inf, NaN */
    return base_bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t float_to_bf16(float f) {
    const uint32_t u = base_float_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); /* cannot wrap: -inf + 0x8000 < 2^32 */
}

/* bfloat16 is the top half of a float */
static inline float bf16_to_float(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    return base_bits_float((u & 0x7FFFFFFFu) > 0x7F800000u ? u | 0x400000u : u);
}

/* ---------------------------------------------------------------- clock.c */

/* CLOCK_MONOTONIC in seconds, for intervals: the origin is arbitrary, and a double resolves
 * better than 4 ns even after a year of uptime. */
double monotonic_seconds(void);

/* ---------------------------------------------------------------- grow.c */

/* Room for at least `need` items in a growable array. items is the address of the array's
 * pointer (T **, NULL while the array is empty), *cap its capacity in items. Nothing happens when
 * *cap >= need; otherwise the array is reallocated to *cap doubled (from `first` when *cap is 0)
 * as often as it takes to hold need items. Returns 0, or -1 when out of memory or when the size
 * does not fit in a size_t, the array and *cap then as they were (the caller says which failure
 * it was). The pointer is read and written with memcpy: a T * has a void *'s representation on
 * every platform the library builds for, and, unlike a cast to void **, memcpy keeps to C's
 * aliasing rules. Inline for the check, which runs at every push. */
int grow_array_realloc(void *items, size_t *cap, size_t need, size_t item_size, size_t first);
static inline int grow_array(void *items, size_t *cap, size_t need, size_t item_size, size_t first) {
    return need <= *cap ? 0 : grow_array_realloc(items, cap, need, item_size, first);
}

/* count items of item_size bytes on a 64-byte boundary (a cache line; one AVX-512 vector), zeroed;
 * free() releases them. NULL when out of memory or when the size does not fit in a size_t. For
 * what the vector kernels stream: a 64-byte load of a row that is not on a line boundary touches
 * two lines. At malloc's 16-byte alignment the few-row float product ran 1.6× slower from the L2
 * cache, and config E's decoding step (weights, activations and KV cache so placed) took 1.11×
 * longer for one row and 1.13× for eight (Zen 5). */
void *calloc_aligned(size_t count, size_t item_size);

#endif
