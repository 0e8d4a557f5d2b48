/* qpack.c — the interleaved layout of Q8_0 / Q4_0 weights for the integer kernels that multiply
 * 16 output rows at once (AVX2: 8, each half of a group), and its plain reference product.
 *
 * Why: the row-major blocks give one output per vector, so every 64 multiply-adds of a batch row
 * pay the block's conversion to float and its scaling (7 operations per 64 products). With 16
 * rows of W interleaved, one vpdpbusd multiplies 4 bytes of x (broadcast) by 4 bytes of each of
 * 16 rows: a block of one x row against 16 outputs is 8 of them (512 products), converted and
 * scaled once for all 16 lanes.
 *
 * The layout (QPACK_ROWS = 16 rows of W per group, nb = ⌈in/32⌉ blocks per row): group g holds rows
 * 16g … 16g + 15 (lanes 0–15; lanes past `out` are rows of zeros with scale 0), as
 *   the half scales  uint16 [nb, 16]                     (padded to a multiple of 64 bytes), then
 *   the values       Q8_0: [nb, 8, 16, 4] bytes: element 4k + i of block b of lane r at
 *                          (b·8 + k)·64 + 4r + i, stored as q + 128 (unsigned: vpdpbusd's first side);
 *                    Q4_0: [nb, 4, 16, 4] bytes: byte (b·4 + k)·64 + 4r + i is byte 4k + i of the
 *                          ggml block (elements 4k + i in the low nibble, 16 + 4k + i in the high),
 *                          the nibbles u = q + 8 as they are.
 * Both stay unsigned, so the products of x (signed) are Σ (q + c)·x = Σ q·x + c·Σ x, and c·Σ x
 * (c = 128 or 8) is taken off with the block sums of x (qact.sum), exactly, in integers.
 * Scales and values are those of the blocks bit for bit: qpack_unpack gives the blocks back. */
#include <math.h>
#include <string.h>

#include "base/base.h"
#include "quant/quant.h"

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static int value_vectors(qformat fmt) { return fmt == QFMT_Q8_0 ? 8 : 4; }

size_t qpack_scales_bytes(int nb) { return round64((size_t)nb * QPACK_ROWS * sizeof(uint16_t)); }

size_t qpack_group_bytes(qformat fmt, int in) {
    const int nb = q_blocks(in);
    return qpack_scales_bytes(nb) + (size_t)nb * value_vectors(fmt) * 64;
}

size_t qpack_bytes(qformat fmt, int out, int in) { return qpack_groups(out) * qpack_group_bytes(fmt, in); }

void qpack_pack(void *dst, qformat fmt, const void *blocks, int out, int in) {
    const int nb = q_blocks(in), groups = (int)qpack_groups(out), vecs = value_vectors(fmt);
    const size_t block_bytes = qblock_bytes(fmt), group_bytes = qpack_group_bytes(fmt, in);
    for (int g = 0; g < groups; g++) {
        uint8_t *grp = (uint8_t *)dst + (size_t)g * group_bytes;
        uint16_t *scales = (uint16_t *)grp;
        uint8_t *values = grp + qpack_scales_bytes(nb);
        memset(grp, 0, qpack_scales_bytes(nb));
        for (int lane = 0; lane < QPACK_ROWS; lane++) {
            const int o = g * QPACK_ROWS + lane;
            for (int b = 0; b < nb; b++) {
                uint8_t *v = values + (size_t)b * vecs * 64 + 4 * lane;
                if (o >= out) { /* a row of zeros: q = 0, scale 0 */
                    for (int k = 0; k < vecs; k++) memset(v + 64 * k, fmt == QFMT_Q8_0 ? 0x80 : 0x88, 4);
                    continue;
                }
                const uint8_t *blk = (const uint8_t *)blocks + ((size_t)o * nb + b) * block_bytes;
                memcpy(&scales[(size_t)b * QPACK_ROWS + lane], blk, sizeof(uint16_t));
                for (int k = 0; k < vecs; k++)
                    for (int i = 0; i < 4; i++) {
                        const uint8_t q = blk[2 + 4 * k + i];
                        v[64 * k + i] = fmt == QFMT_Q8_0 ? (uint8_t)(q ^ 0x80) : q;
                    }
            }
        }
    }
}

void qpack_unpack(void *blocks, qformat fmt, const void *packed, int o0, int rows, int in) {
    const int nb = q_blocks(in), vecs = value_vectors(fmt);
    const size_t block_bytes = qblock_bytes(fmt), group_bytes = qpack_group_bytes(fmt, in);
    for (int r = 0; r < rows; r++) {
        const int o = o0 + r, lane = o % QPACK_ROWS;
        const uint8_t *grp = (const uint8_t *)packed + (size_t)(o / QPACK_ROWS) * group_bytes;
        const uint8_t *values = grp + qpack_scales_bytes(nb);
        for (int b = 0; b < nb; b++) {
            uint8_t *blk = (uint8_t *)blocks + ((size_t)r * nb + b) * block_bytes;
            memcpy(blk, grp + ((size_t)b * QPACK_ROWS + lane) * sizeof(uint16_t), sizeof(uint16_t));
            const uint8_t *v = values + (size_t)b * vecs * 64 + 4 * lane;
            for (int k = 0; k < vecs; k++)
                for (int i = 0; i < 4; i++)
                    blk[2 + 4 * k + i] = fmt == QFMT_Q8_0 ? (uint8_t)(v[64 * k + i] ^ 0x80) : v[64 * k + i];
        }
    }
}

/* The value of element j of block b of lane r, as stored (unsigned). */
static inline int stored_value(qformat fmt, const uint8_t *values, int b, int r, int j) {
    if (fmt == QFMT_Q8_0) return values[((size_t)b * 8 + j / 4) * 64 + 4 * r + j % 4];
    const int low = j < QK / 2, e = low ? j : j - QK / 2;
    const uint8_t byte = values[((size_t)b * 4 + e / 4) * 64 + 4 * r + e % 4];
    return low ? byte & 0x0F : byte >> 4;
}

/* What the vector kernels compute, in the same order: per output and block, the integer sum of
 * the stored values times x, less c·Σx, converted to float and scaled by d_w·d_x, added into one
 * float sum in block order (a fused multiply-add, as the vectors do it). */
void qpack_dot_reference(float *y, size_t ldy, qformat fmt, const void *packed, int g0, int groups, int out,
                         const qact *x, int N) {
    const int nb = x->nb, bias = fmt == QFMT_Q8_0 ? 128 : 8;
    const size_t group_bytes = qpack_group_bytes(fmt, nb * QK);
    for (int g = g0; g < g0 + groups; g++) {
        const uint8_t *grp = (const uint8_t *)packed + (size_t)g * group_bytes;
        const uint16_t *scales = (const uint16_t *)grp;
        const uint8_t *values = grp + qpack_scales_bytes(nb);
        for (int r = 0; r < QPACK_ROWS && g * QPACK_ROWS + r < out; r++)
            for (int n = 0; n < N; n++) {
                float acc = 0;
                for (int b = 0; b < nb; b++) {
                    const int8_t *q = x->q + ((size_t)n * nb + b) * QK;
                    int32_t s = -bias * x->sum[(size_t)n * nb + b];
                    for (int j = 0; j < QK; j++) s += stored_value(fmt, values, b, r, j) * q[j];
                    const float scale = half_to_float(scales[(size_t)b * QPACK_ROWS + r]) * x->d[(size_t)n * nb + b];
                    acc = fmaf((float)s, scale, acc);
                }
                y[(size_t)n * ldy + g * QPACK_ROWS + r] = acc;
            }
    }
}
