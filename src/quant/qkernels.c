/* qkernels.c — the plain reference kernels (double accumulation, the definitions), the portable
 * C path, and the choice of path at run time. */
#include <stddef.h>

#include "base/base.h"
#include "quant/quant.h"

/* ---------------------------------------------------------------- reference */

/* Weight j of block b (in row-major block order) of a Q8_0 or Q4_0 layer, and its block's scale. */
static inline double weight(qformat fmt, const void *w, size_t b, int j) {
    if (fmt == QFMT_Q8_0) return ((const block_q8_0 *)w)[b].qs[j];
    const block_q4_0 *blk = (const block_q4_0 *)w + b;
    return (double)((j < QK / 2 ? blk->qs[j] & 0x0F : blk->qs[j - QK / 2] >> 4) - 8);
}

static inline double block_scale(qformat fmt, const void *w, size_t b) {
    return half_to_float(fmt == QFMT_Q8_0 ? ((const block_q8_0 *)w)[b].d : ((const block_q4_0 *)w)[b].d);
}

static void dot_reference(qformat fmt, float *y, size_t ldy, const void *w, int rows, const qact *x, int N) {
    const int nb = x->nb;
    for (int n = 0; n < N; n++)
        for (int r = 0; r < rows; r++) {
            double acc = 0;
            for (int b = 0; b < nb; b++) {
                const size_t wb = (size_t)r * nb + b, xb = (size_t)n * nb + b;
                for (int j = 0; j < QK; j++)
                    acc += block_scale(fmt, w, wb) * x->d[xb] * weight(fmt, w, wb, j) * x->q[xb * QK + j];
            }
            y[(size_t)n * ldy + r] = (float)acc;
        }
}

static void matvec_reference(qformat fmt, float *y, const void *w, int rows, const float *x, int in) {
    const int nb = q_blocks(in);
    for (int r = 0; r < rows; r++) {
        double acc = 0;
        for (int j = 0; j < in; j++) {
            const size_t wb = (size_t)r * nb + j / QK;
            acc += block_scale(fmt, w, wb) * weight(fmt, w, wb, j % QK) * x[j];
        }
        y[r] = (float)acc;
    }
}

void q8_0_dot_reference(float *y, size_t ldy, const block_q8_0 *w, int rows, const qact *x, int N) {
    dot_reference(QFMT_Q8_0, y, ldy, w, rows, x, N);
}
void q4_0_dot_reference(float *y, size_t ldy, const block_q4_0 *w, int rows, const qact *x, int N) {
    dot_reference(QFMT_Q4_0, y, ldy, w, rows, x, N);
}
void q8_0_matvec_reference(float *y, const block_q8_0 *w, int rows, const float *x, int in) {
    matvec_reference(QFMT_Q8_0, y, w, rows, x, in);
}
void q4_0_matvec_reference(float *y, const block_q4_0 *w, int rows, const float *x, int in) {
    matvec_reference(QFMT_Q4_0, y, w, rows, x, in);
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

/* The 32 values q of block b of a Q8_0 or Q4_0 layer (Q4_0's nibbles minus 8), and its scale. */
static inline float block_values(qformat fmt, const void *w, size_t b, int8_t v[QK]) {
    if (fmt == QFMT_Q8_0) {
        const block_q8_0 *blk = (const block_q8_0 *)w + b;
        for (int j = 0; j < QK; j++) v[j] = blk->qs[j];
        return half_to_float(blk->d);
    }
    const block_q4_0 *blk = (const block_q4_0 *)w + b;
    for (int j = 0; j < QK / 2; j++) {
        v[j] = (int8_t)((blk->qs[j] & 0x0F) - 8);
        v[j + QK / 2] = (int8_t)((blk->qs[j] >> 4) - 8);
    }
    return half_to_float(blk->d);
}

/* An integer sum per block, one float multiply-add per block in block order: the arithmetic the
 * vector kernels do per lane, written so that a compiler for baseline x86-64 (or any CPU) can
 * vectorise the inner loop. Q4_0's nibbles become q − 8 before the product: taking 8·Σx off
 * afterwards, in float, would cancel (an outlier in x's block makes both terms large). */
static void dot_portable(qformat fmt, float *y, size_t ldy, const void *w, int rows, const qact *x, int N) {
    const int nb = x->nb;
    int8_t v[QK];
    for (int n = 0; n < N; n++)
        for (int r = 0; r < rows; r++) {
            float acc = 0;
            for (int b = 0; b < nb; b++) {
                const float dw = block_values(fmt, w, (size_t)r * nb + b, v);
                const int8_t *q = x->q + ((size_t)n * nb + b) * QK;
                int32_t s = 0;
                for (int j = 0; j < QK; j++) s += (int32_t)v[j] * q[j];
                acc += dw * x->d[(size_t)n * nb + b] * (float)s;
            }
            y[(size_t)n * ldy + r] = acc;
        }
}

/* Float activations: the block's products in float, one multiply-add by its scale. */
static void matvec_portable(qformat fmt, float *y, const void *w, int rows, const float *x, int in) {
    const int nb = q_blocks(in);
    int8_t v[QK];
    for (int r = 0; r < rows; r++) {
        float acc = 0;
        for (int b = 0; b < nb; b++) {
            const float dw = block_values(fmt, w, (size_t)r * nb + b, v);
            const int j0 = b * QK, n = in - j0 < QK ? in - j0 : QK;
            float s = 0;
            for (int j = 0; j < n; j++) s += (float)v[j] * x[j0 + j];
            acc += s * dw;
        }
        y[r] = acc;
    }
}

static void q8_0_dot_portable(float *y, size_t ldy, const block_q8_0 *w, int rows, const qact *x, int N) {
    dot_portable(QFMT_Q8_0, y, ldy, w, rows, x, N);
}
static void q4_0_dot_portable(float *y, size_t ldy, const block_q4_0 *w, int rows, const qact *x, int N) {
    dot_portable(QFMT_Q4_0, y, ldy, w, rows, x, N);
}
static void q8_0_matvec_portable(float *y, const block_q8_0 *w, int rows, const float *x, int in) {
    matvec_portable(QFMT_Q8_0, y, w, rows, x, in);
}
static void q4_0_matvec_portable(float *y, const block_q4_0 *w, int rows, const float *x, int in) {
    matvec_portable(QFMT_Q4_0, y, w, rows, x, in);
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
                                    q8_0_dequantize_portable, q4_0_dequantize_portable, NULL, 0, "portable"};

/* ---------------------------------------------------------------- choice */

const qkernels *qkernels_for(dt_isa isa) {
    if (!dt_isa_supported(isa)) return NULL;
    switch (isa) {
    case DT_ISA_AVX512: return dt_cpu()->avx512vnni ? &qkernels_avx512_vnni : &qkernels_avx512;
    case DT_ISA_AVX2: return dt_cpu()->avxvnni ? &qkernels_avx2_vnni : &qkernels_avx2;
    case DT_ISA_PORTABLE: return &qkernels_portable;
    }
    return &qkernels_portable;
}

unsigned qkernels_packed_formats(const qkernels *k) {
    if (k == &qkernels_avx2 && dt_cpu()->intel) return k->packed_formats | 1u << QFMT_Q8_0;
    return k->packed_formats;
}

const qkernels *qkernels_active(void) { return qkernels_for(dt_isa_active()); }

int qkernels_all(const qkernels **sets) {
    int n = 0;
    sets[n++] = &qkernels_portable;
    if (dt_isa_supported(DT_ISA_AVX2)) sets[n++] = &qkernels_avx2;
    if (dt_isa_supported(DT_ISA_AVX2) && dt_cpu()->avxvnni) sets[n++] = &qkernels_avx2_vnni;
    if (dt_isa_supported(DT_ISA_AVX512)) sets[n++] = &qkernels_avx512;
    if (dt_isa_supported(DT_ISA_AVX512) && dt_cpu()->avx512vnni) sets[n++] = &qkernels_avx512_vnni;
    return n;
}

const char *dt_quant_kernel_path(void) {
    switch (dt_isa_active()) {
    case DT_ISA_AVX512: return dt_cpu()->avx512vnni ? "avx512 (int8: VNNI)" : "avx512 (int8: no VNNI)";
    case DT_ISA_AVX2: return dt_cpu()->avxvnni ? "avx2 (int8: AVX-VNNI)" : "avx2";
    case DT_ISA_PORTABLE: return "portable";
    }
    return "portable";
}
