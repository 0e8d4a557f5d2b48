/* formats.c — quantising weight rows to the formats of quant.h and back, and activation rows to
 * 8-bit blocks. Weights are rounded to nearest, ties away from zero (roundf, as ggml's reference
 * quantiser), so quantisation is deterministic. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "quant/quant.h"

static float absmax(const float *x, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* Clamped in float first, so that inf and NaN (which fmaxf drops) never reach the conversion. */
static int clamp_int(float v, int lo, int hi) { return (int)roundf(fminf(fmaxf(v, (float)lo), (float)hi)); }

/* The scale is stored as a half; the values are rounded with the float scale's inverse, as
 * ggml's quantize_row_q8_0_ref does, so both give the same integers for the same weights. */
void q8_0_quantize_row(block_q8_0 *blocks, const float *w, int in) {
    for (int b = 0; b * QK < in; b++) {
        const int j0 = b * QK, n = in - j0 < QK ? in - j0 : QK;
        const float d = absmax(w + j0, n) / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
        blocks[b].d = float_to_half(d);
        for (int j = 0; j < QK; j++) blocks[b].qs[j] = (int8_t)(j < n ? clamp_int(w[j0 + j] * inv, -127, 127) : 0);
    }
}

void q8_0_dequantize_row(float *w, const block_q8_0 *blocks, int in) {
    for (int j = 0; j < in; j++) w[j] = half_to_float(blocks[j / QK].d) * (float)blocks[j / QK].qs[j % QK];
}

/* The value of largest magnitude maps to −8 (d = that value / −8), so both signs use the 16
 * levels as fully as one shared scale allows; its opposite clamps to +7. The rounding is ggml's:
 * trunc(w / d + 8.5), that is halves round up, so the two give the same nibbles. */
static int q4_level(float v) { return (int)fminf(fmaxf(v + 8.5f, 0.0f), 15.0f) - 8; }

void q4_0_quantize_row(block_q4_0 *blocks, const float *w, int in) {
    for (int b = 0; b * QK < in; b++) {
        const int j0 = b * QK, n = in - j0 < QK ? in - j0 : QK;
        float m = 0;
        for (int j = 0; j < n; j++)
            if (fabsf(w[j0 + j]) > fabsf(m)) m = w[j0 + j];
        const float d = m / -8.0f, inv = d != 0 ? 1.0f / d : 0.0f;
        blocks[b].d = float_to_half(d);
        for (int j = 0; j < QK / 2; j++) {
            const int lo = j < n ? q4_level(w[j0 + j] * inv) : 0;
            const int hi = j + QK / 2 < n ? q4_level(w[j0 + j + QK / 2] * inv) : 0;
            blocks[b].qs[j] = (uint8_t)((lo + 8) | ((hi + 8) << 4));
        }
    }
}

void q4_0_dequantize_row(float *w, const block_q4_0 *blocks, int in) {
    for (int j = 0; j < in; j++) {
        const block_q4_0 *blk = &blocks[j / QK];
        const int r = j % QK;
        const uint8_t byte = blk->qs[r % (QK / 2)];
        w[j] = half_to_float(blk->d) * (float)((r < QK / 2 ? byte & 0x0F : byte >> 4) - 8);
    }
}

/* Nearest, ties to even: lrintf in the default rounding mode, and what cvtps2dq does. The value
 * is clamped first, in float, so a NaN or inf (from a non-finite activation) never reaches the
 * conversion: fmaxf takes −127 over a NaN, as maxps does with −127 as its second operand. */
void qact_quantize_row(const qact *a, int n, const float *x, int in) {
    for (int b = 0; b < a->nb; b++) {
        const int j0 = b * QK, len = in - j0 < QK ? in - j0 : QK;
        int8_t *q = a->q + ((size_t)n * a->nb + b) * QK;
        float m = 0;
        for (int j = 0; j < len; j++) m = fmaxf(m, fabsf(x[j0 + j]));
        const float d = m / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
        for (int j = 0; j < QK; j++) q[j] = (int8_t)(j < len ? lrintf(fminf(fmaxf(x[j0 + j] * inv, -127.0f), 127.0f)) : 0);
        a->d[(size_t)n * a->nb + b] = d;
    }
    qact_expand_row(a, n, 0);
}

void qact_expand_row(const qact *a, int n, int b0) {
    const float *d = a->d + (size_t)n * a->nb;
    const int8_t *q = a->q + (size_t)n * a->nb * QK;
    float *de = a->de + (size_t)n * qact_pairs(a->nb) * 16;
    int32_t *off = a->off + (size_t)n * qact_pairs(a->nb) * 16;
    for (int b = b0; b < a->nb; b++) {
        int32_t s = 0;
        for (int j = 0; j < QK; j++) s += q[(size_t)b * QK + j];
        a->sum[(size_t)n * a->nb + b] = s;
    }
    for (int b = b0; b < 2 * (int)qact_pairs(a->nb); b++)
        for (int k = 0; k < 8; k++) {
            de[b * 8 + k] = b < a->nb ? d[b] : 0.0f;
            const int8_t *g = q + (size_t)b * QK + 4 * k;
            off[b * 8 + k] = b < a->nb ? -8 * (g[0] + g[1] + g[2] + g[3]) : 0;
        }
}

float i8_quantize_row(int8_t *q, const float *x, int n, const float *smooth) {
    float m = 0;
    for (int j = 0; j < n; j++) m = fmaxf(m, fabsf(smooth ? x[j] / smooth[j] : x[j]));
    const float d = m / 127.0f;
    i8_quantize_row_scaled(q, x, n, d, smooth);
    return d;
}

void i8_quantize_row_scaled(int8_t *q, const float *x, int n, float scale, const float *smooth) {
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    if (smooth) {
        for (int j = 0; j < n; j++) q[j] = (int8_t)clamp_int(x[j] / smooth[j] * inv, -127, 127);
    } else {
        for (int j = 0; j < n; j++) q[j] = (int8_t)clamp_int(x[j] * inv, -127, 127);
    }
}

void i8_row_sums(int32_t *sums, const int8_t *q, int out, int in) {
    for (int o = 0; o < out; o++) {
        int32_t s = 0;
        for (int j = 0; j < in; j++) s += q[(size_t)o * in + j];
        sums[o] = s;
    }
}

int qblocks_check(qformat fmt, const void *blocks, size_t n_blocks, char *buf, size_t len) {
    const size_t size = qblock_bytes(fmt);
    for (size_t i = 0; i < n_blocks; i++) {
        const unsigned char *blk = (const unsigned char *)blocks + i * size;
        uint16_t h;
        memcpy(&h, blk, sizeof h);
        if (!isfinite(half_to_float(h))) {
            snprintf(buf, len, "block %zu has a scale that is not finite (half 0x%04x)", i, h);
            return -1;
        }
        if (fmt == QFMT_Q8_0)
            for (int j = 0; j < QK; j++)
                if ((int8_t)blk[2 + j] == -128) {
                    snprintf(buf, len, "block %zu holds −128 (Q8_0 values lie in [−127, 127])", i);
                    return -1;
                }
    }
    return 0;
}
