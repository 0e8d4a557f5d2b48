/* formats.c — quantising weight rows to the formats of quant.h and back. Scales are float32;
 * rounding is to nearest, ties away from zero (roundf), so quantisation is deterministic. */
#include <math.h>
#include <string.h>

#include "quant/quant.h"

static float absmax(const float *x, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* Clamped in float first, so that inf and NaN (which fmaxf drops) never reach the conversion. */
static int clamp_int(float v, int lo, int hi) { return (int)roundf(fminf(fmaxf(v, (float)lo), (float)hi)); }

void q8_0_quantize_row(int8_t *q, float *scales, const float *w, int in) {
    for (int b = 0; b * QK < in; b++) {
        const int j0 = b * QK, n = in - j0 < QK ? in - j0 : QK;
        const float d = absmax(w + j0, n) / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
        scales[b] = d;
        for (int j = 0; j < n; j++) q[j0 + j] = (int8_t)clamp_int(w[j0 + j] * inv, -127, 127);
    }
}

void q8_0_dequantize_row(float *w, const int8_t *q, const float *scales, int in) {
    for (int j = 0; j < in; j++) w[j] = scales[j / QK] * (float)q[j];
}

/* The value of largest magnitude maps to −8 exactly (d = that value / −8), so both signs use
 * the 16 levels as fully as one shared scale allows; its opposite clamps to +7. */
void q4_0_quantize_row(uint8_t *q, float *scales, const float *w, int in) {
    for (int b = 0; b * QK < in; b++) {
        const int j0 = b * QK, n = in - j0 < QK ? in - j0 : QK;
        float m = 0;
        for (int j = 0; j < n; j++)
            if (fabsf(w[j0 + j]) > fabsf(m)) m = w[j0 + j];
        const float d = m / -8.0f, inv = d != 0 ? 1.0f / d : 0.0f;
        scales[b] = d;
        uint8_t *qb = q + (size_t)b * (QK / 2);
        for (int j = 0; j < QK / 2; j++) {
            const int lo = j < n ? clamp_int(w[j0 + j] * inv, -8, 7) : 0;
            const int hi = j + QK / 2 < n ? clamp_int(w[j0 + j + QK / 2] * inv, -8, 7) : 0;
            qb[j] = (uint8_t)((lo + 8) | ((hi + 8) << 4));
        }
    }
}

void q4_0_dequantize_row(float *w, const uint8_t *q, const float *scales, int in) {
    for (int j = 0; j < in; j++) {
        const int b = j / QK, r = j % QK;
        const uint8_t byte = q[(size_t)b * (QK / 2) + r % (QK / 2)];
        const int v = (r < QK / 2 ? byte & 0x0F : byte >> 4) - 8;
        w[j] = scales[b] * (float)v;
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
