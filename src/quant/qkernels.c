/* qkernels.c — the plain reference kernels (double accumulation, the definitions), the portable
 * C path, and the choice of path at run time. */
#include <stddef.h>

#include "quant/quant.h"

/* ---------------------------------------------------------------- reference */

void q8_0_matvec_reference(float *y, const int8_t *q, const float *scales, const float *x, int out, int in) {
    const int nb = q_blocks(in);
    for (int o = 0; o < out; o++) {
        double acc = 0;
        for (int j = 0; j < in; j++) acc += (double)scales[(size_t)o * nb + j / QK] * q[(size_t)o * in + j] * x[j];
        y[o] = (float)acc;
    }
}

void q4_0_matvec_reference(float *y, const uint8_t *q, const float *scales, const float *x, int out, int in) {
    const int nb = q_blocks(in);
    for (int o = 0; o < out; o++) {
        double acc = 0;
        for (int j = 0; j < in; j++) {
            const int b = j / QK, r = j % QK;
            const uint8_t byte = q[((size_t)o * nb + b) * (QK / 2) + r % (QK / 2)];
            const int v = (r < QK / 2 ? byte & 0x0F : byte >> 4) - 8;
            acc += (double)scales[(size_t)o * nb + b] * v * x[j];
        }
        y[o] = (float)acc;
    }
}

void i8_gemm_reference(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws, int out,
                       int in) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < out; o++) {
            double acc = 0;
            for (int j = 0; j < in; j++) acc += (double)xq[(size_t)n * in + j] * wq[(size_t)o * in + j];
            y[(size_t)n * out + o] = (float)(acc * xs[n] * ws[o]);
        }
}

/* ---------------------------------------------------------------- portable C */

/* Integer sums per block, one float multiply-add per block: the shape of the vector kernels,
 * written so that a compiler for baseline x86-64 (or any CPU) can vectorise the inner loop. */
static void q8_0_matvec_portable(float *y, const int8_t *q, const float *scales, const float *x, int out, int in) {
    const int nb = q_blocks(in);
#pragma omp parallel for schedule(static) if ((size_t)out * in > 262144)
    for (int o = 0; o < out; o++) {
        const int8_t *row = q + (size_t)o * in;
        float acc = 0;
        for (int b = 0; b < nb; b++) {
            const int j0 = b * QK, n = in - j0 < QK ? in - j0 : QK;
            float s = 0;
            for (int j = 0; j < n; j++) s += (float)row[j0 + j] * x[j0 + j];
            acc += s * scales[(size_t)o * nb + b];
        }
        y[o] = acc;
    }
}

static void q4_0_matvec_portable(float *y, const uint8_t *q, const float *scales, const float *x, int out, int in) {
    const int nb = q_blocks(in);
#pragma omp parallel for schedule(static) if ((size_t)out * in > 262144)
    for (int o = 0; o < out; o++) {
        float acc = 0;
        for (int b = 0; b < nb; b++) {
            const uint8_t *qb = q + ((size_t)o * nb + b) * (QK / 2);
            const int j0 = b * QK, n = in - j0 < QK ? in - j0 : QK;
            float s = 0;
            if (n == QK) {
                for (int j = 0; j < QK / 2; j++)
                    s += (float)((qb[j] & 0x0F) - 8) * x[j0 + j] + (float)((qb[j] >> 4) - 8) * x[j0 + j + QK / 2];
            } else {
                for (int j = 0; j < n; j++) {
                    const uint8_t byte = qb[j % (QK / 2)];
                    s += (float)((j < QK / 2 ? byte & 0x0F : byte >> 4) - 8) * x[j0 + j];
                }
            }
            acc += s * scales[(size_t)o * nb + b];
        }
        y[o] = acc;
    }
}

static void i8_gemm_portable(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws,
                             const int32_t *row_sums, int out, int in) {
    (void)row_sums;
#pragma omp parallel for schedule(static) if ((size_t)N * out * in > 262144)
    for (int o = 0; o < out; o++) {
        const int8_t *w = wq + (size_t)o * in;
        for (int n = 0; n < N; n++) {
            const int8_t *x = xq + (size_t)n * in;
            int32_t acc = 0;
            for (int j = 0; j < in; j++) acc += (int32_t)x[j] * w[j];
            y[(size_t)n * out + o] = (float)acc * xs[n] * ws[o];
        }
    }
}

/* Row by row through the format's own definitions (formats.c). */
static void q8_0_dequantize_portable(float *w, const int8_t *q, const float *scales, int rows, int in) {
    const int nb = q_blocks(in);
    for (int r = 0; r < rows; r++)
        q8_0_dequantize_row(w + (size_t)r * in, q + (size_t)r * in, scales + (size_t)r * nb, in);
}

static void q4_0_dequantize_portable(float *w, const uint8_t *q, const float *scales, int rows, int in) {
    const int nb = q_blocks(in);
    for (int r = 0; r < rows; r++)
        q4_0_dequantize_row(w + (size_t)r * in, q + (size_t)r * nb * (QK / 2), scales + (size_t)r * nb, in);
}

const qkernels qkernels_portable = {q8_0_matvec_portable, q4_0_matvec_portable, i8_gemm_portable,
                                    q8_0_dequantize_portable, q4_0_dequantize_portable};

/* ---------------------------------------------------------------- choice */

const qkernels *qkernels_for(dt_isa isa) {
    if (!dt_isa_supported(isa)) return NULL;
    switch (isa) {
    case DT_ISA_AVX512: return &qkernels_avx512;
    case DT_ISA_AVX2: return &qkernels_avx2;
    case DT_ISA_PORTABLE: return &qkernels_portable;
    }
    return &qkernels_portable;
}

const qkernels *qkernels_active(void) { return qkernels_for(dt_isa_active()); }

const char *dt_quant_kernel_path(void) {
    switch (dt_isa_active()) {
    case DT_ISA_AVX512: return dt_cpu()->avx512vnni ? "avx512 (int8: VNNI)" : "avx512 (int8: AVX2)";
    case DT_ISA_AVX2: return "avx2";
    case DT_ISA_PORTABLE: return "portable";
    }
    return "portable";
}
