/* qkernels.c — the plain reference kernels (double accumulation, the definitions), the portable
 * C path, and the choice of path at run time. */
#include <stddef.h>

#include "base/base.h"
#include "quant/quant.h"

/* ---------------------------------------------------------------- reference */

static inline double q4_value(const block_q4_0 *b, int j) {
    return (double)((j < QK / 2 ? b->qs[j] & 0x0F : b->qs[j - QK / 2] >> 4) - 8);
}

void q8_0_dot_reference(float *y, size_t ldy, const block_q8_0 *w, int rows, const qact *x, int N) {
    const int nb = x->nb;
    for (int n = 0; n < N; n++)
        for (int r = 0; r < rows; r++) {
            double acc = 0;
            for (int b = 0; b < nb; b++) {
                const block_q8_0 *blk = &w[(size_t)r * nb + b];
                const int8_t *q = x->q + ((size_t)n * nb + b) * QK;
                for (int j = 0; j < QK; j++)
                    acc += (double)half_to_float(blk->d) * x->d[(size_t)n * nb + b] * blk->qs[j] * q[j];
            }
            y[(size_t)n * ldy + r] = (float)acc;
        }
}

void q4_0_dot_reference(float *y, size_t ldy, const block_q4_0 *w, int rows, const qact *x, int N) {
    const int nb = x->nb;
    for (int n = 0; n < N; n++)
        for (int r = 0; r < rows; r++) {
            double acc = 0;
            for (int b = 0; b < nb; b++) {
                const block_q4_0 *blk = &w[(size_t)r * nb + b];
                const int8_t *q = x->q + ((size_t)n * nb + b) * QK;
                for (int j = 0; j < QK; j++)
                    acc += (double)half_to_float(blk->d) * x->d[(size_t)n * nb + b] * q4_value(blk, j) * q[j];
            }
            y[(size_t)n * ldy + r] = (float)acc;
        }
}

void q8_0_matvec_reference(float *y, const block_q8_0 *w, int rows, const float *x, int in) {
    const int nb = q_blocks(in);
    for (int r = 0; r < rows; r++) {
        double acc = 0;
        for (int j = 0; j < in; j++) {
            const block_q8_0 *blk = &w[(size_t)r * nb + j / QK];
            acc += (double)half_to_float(blk->d) * blk->qs[j % QK] * x[j];
        }
        y[r] = (float)acc;
    }
}

void q4_0_matvec_reference(float *y, const block_q4_0 *w, int rows, const float *x, int in) {
    const int nb = q_blocks(in);
    for (int r = 0; r < rows; r++) {
        double acc = 0;
        for (int j = 0; j < in; j++) {
            const block_q4_0 *blk = &w[(size_t)r * nb + j / QK];
            acc += (double)half_to_float(blk->d) * q4_value(blk, j % QK) * x[j];
        }
        y[r] = (float)acc;
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

/* An integer sum per block, one float multiply-add per block in block order: the arithmetic the
 * vector kernels do per lane, written so that a compiler for baseline x86-64 (or any CPU) can
 * vectorise the inner loop. Q4_0's nibbles become q − 8 before the product: taking 8·Σx off
 * afterwards, in float, would cancel (an outlier in x's block makes both terms large). */
static void q8_0_dot_portable(float *y, size_t ldy, const block_q8_0 *w, int rows, const qact *x, int N) {
    const int nb = x->nb;
    for (int n = 0; n < N; n++)
        for (int r = 0; r < rows; r++) {
            float acc = 0;
            for (int b = 0; b < nb; b++) {
                const block_q8_0 *blk = &w[(size_t)r * nb + b];
                const int8_t *q = x->q + ((size_t)n * nb + b) * QK;
                int32_t s = 0;
                for (int j = 0; j < QK; j++) s += (int32_t)blk->qs[j] * q[j];
                acc += half_to_float(blk->d) * x->d[(size_t)n * nb + b] * (float)s;
            }
            y[(size_t)n * ldy + r] = acc;
        }
}

static void q4_0_dot_portable(float *y, size_t ldy, const block_q4_0 *w, int rows, const qact *x, int N) {
    const int nb = x->nb;
    for (int n = 0; n < N; n++)
        for (int r = 0; r < rows; r++) {
            float acc = 0;
            for (int b = 0; b < nb; b++) {
                const block_q4_0 *blk = &w[(size_t)r * nb + b];
                const int8_t *q = x->q + ((size_t)n * nb + b) * QK;
                int32_t s = 0;
                for (int j = 0; j < QK / 2; j++)
                    s += ((blk->qs[j] & 0x0F) - 8) * (int32_t)q[j] + ((blk->qs[j] >> 4) - 8) * (int32_t)q[j + QK / 2];
                acc += half_to_float(blk->d) * x->d[(size_t)n * nb + b] * (float)s;
            }
            y[(size_t)n * ldy + r] = acc;
        }
}

/* Float activations: the block's products in float, one multiply-add by its scale. */
static void q8_0_matvec_portable(float *y, const block_q8_0 *w, int rows, const float *x, int in) {
    const int nb = q_blocks(in);
    for (int r = 0; r < rows; r++) {
        float acc = 0;
        for (int b = 0; b < nb; b++) {
            const block_q8_0 *blk = &w[(size_t)r * nb + b];
            const int j0 = b * QK, n = in - j0 < QK ? in - j0 : QK;
            float s = 0;
            for (int j = 0; j < n; j++) s += (float)blk->qs[j] * x[j0 + j];
            acc += s * half_to_float(blk->d);
        }
        y[r] = acc;
    }
}

static void q4_0_matvec_portable(float *y, const block_q4_0 *w, int rows, const float *x, int in) {
    const int nb = q_blocks(in);
    for (int r = 0; r < rows; r++) {
        float acc = 0;
        for (int b = 0; b < nb; b++) {
            const block_q4_0 *blk = &w[(size_t)r * nb + b];
            const int j0 = b * QK, n = in - j0 < QK ? in - j0 : QK;
            float s = 0;
            for (int j = 0; j < n; j++) s += (float)((j < QK / 2 ? blk->qs[j] & 0x0F : blk->qs[j - QK / 2] >> 4) - 8) * x[j0 + j];
            acc += s * half_to_float(blk->d);
        }
        y[r] = acc;
    }
}

static void quantize_act_portable(const qact *a, const float *x, int N, int in) {
    for (int n = 0; n < N; n++) qact_quantize_row(a, n, x + (size_t)n * in, in);
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
static void q8_0_dequantize_portable(float *w, const block_q8_0 *b, int rows, int in) {
    const int nb = q_blocks(in);
    for (int r = 0; r < rows; r++) q8_0_dequantize_row(w + (size_t)r * in, b + (size_t)r * nb, in);
}

static void q4_0_dequantize_portable(float *w, const block_q4_0 *b, int rows, int in) {
    const int nb = q_blocks(in);
    for (int r = 0; r < rows; r++) q4_0_dequantize_row(w + (size_t)r * in, b + (size_t)r * nb, in);
}

const qkernels qkernels_portable = {q8_0_dot_portable,        q4_0_dot_portable,        quantize_act_portable,
                                    q8_0_matvec_portable,     q4_0_matvec_portable,     i8_gemm_portable,
                                    q8_0_dequantize_portable, q4_0_dequantize_portable, "portable"};

/* ---------------------------------------------------------------- choice */

const qkernels *qkernels_for(dt_isa isa) {
    if (!dt_isa_supported(isa)) return NULL;
    switch (isa) {
    case DT_ISA_AVX512: return dt_cpu()->avx512vnni ? &qkernels_avx512_vnni : &qkernels_avx512;
    case DT_ISA_AVX2: return &qkernels_avx2;
    case DT_ISA_PORTABLE: return &qkernels_portable;
    }
    return &qkernels_portable;
}

const qkernels *qkernels_active(void) { return qkernels_for(dt_isa_active()); }

int qkernels_all(const qkernels **sets) {
    int n = 0;
    sets[n++] = &qkernels_portable;
    if (dt_isa_supported(DT_ISA_AVX2)) sets[n++] = &qkernels_avx2;
    if (dt_isa_supported(DT_ISA_AVX512)) sets[n++] = &qkernels_avx512;
    if (dt_isa_supported(DT_ISA_AVX512) && dt_cpu()->avx512vnni) sets[n++] = &qkernels_avx512_vnni;
    return n;
}

const char *dt_quant_kernel_path(void) {
    switch (dt_isa_active()) {
    case DT_ISA_AVX512: return dt_cpu()->avx512vnni ? "avx512 (int8: VNNI)" : "avx512 (int8: no VNNI)";
    case DT_ISA_AVX2: return "avx2";
    case DT_ISA_PORTABLE: return "portable";
    }
    return "portable";
}
