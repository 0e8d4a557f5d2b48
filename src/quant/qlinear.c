/* qlinear.c — one quantised linear layer: creation from float weights, and y = x·Wᵀ.
 *
 * Decoding (one row) streams the quantised weights once through the matrix-vector kernels; a
 * batch of a few rows (serving several streams) dequantises small panels of W per thread and
 * multiplies them with linear_rows. Prefill and evaluation (many rows): Q8_0 / Q4_0 dequantise PANEL rows of W at a time into
 * float scratch and multiply with sgemm (the dequantisation is paid once per panel for all rows);
 * W8A8 quantises the rows of x to int8 and runs the integer matrix product.
 */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "layers/kernels.h"
#include "quant/quant.h"

#define PANEL 128
/* A few rows (a batch of decoding streams; up to the kernel path's linear_rows_most): each thread dequantises
 * SKINNY_PANEL rows of W at a time into its own float panel, which stays in the cache while
 * linear_rows multiplies every row of x by it: the weights are read once for all rows. */
#define SKINNY_PANEL 16

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t qlinear_scratch_bytes(int N, int in, int out) {
    (void)out;
    size_t panel = (size_t)PANEL * in * sizeof(float);
    size_t skinny = (size_t)omp_get_max_threads() * SKINNY_PANEL * in * sizeof(float);
    size_t acts = align64((size_t)N * in) + (size_t)N * sizeof(float);
    if (skinny > panel) panel = skinny;
    return panel > acts ? panel : acts;
}

size_t qlinear_weight_bytes(const qlinear *l) {
    const size_t nb = (size_t)q_blocks(l->in);
    switch (l->fmt) {
    case QFMT_F32: return (size_t)l->out * l->in * sizeof(float);
    case QFMT_Q8_0: return (size_t)l->out * (l->in + nb * sizeof(float));
    case QFMT_Q4_0: return (size_t)l->out * nb * (QK / 2 + sizeof(float));
    case QFMT_W8A8: return (size_t)l->out * (l->in + sizeof(float)) + (l->smooth ? (size_t)l->in * sizeof(float) : 0);
    }
    return 0;
}

static void dequantize_rows(const qlinear *l, float *w, int o0, int rows) {
    const int nb = q_blocks(l->in);
#pragma omp parallel for schedule(static) if ((size_t)rows * l->in > 65536)
    for (int r = 0; r < rows; r++) {
        const size_t o = (size_t)o0 + r;
        if (l->fmt == QFMT_Q8_0) q8_0_dequantize_row(w + (size_t)r * l->in, l->q8 + o * l->in, l->scales + o * nb, l->in);
        else q4_0_dequantize_row(w + (size_t)r * l->in, l->q4 + o * nb * (QK / 2), l->scales + o * nb, l->in);
    }
}

static void skinny_forward(const qlinear *l, float *y, const float *x, int N, float *panels) {
    const qkernels *k = qkernels_active();
    const dt_kernels *f = kernels_active();
    const int nb = q_blocks(l->in), in = l->in, threads = omp_get_max_threads();
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < l->out; o0 += SKINNY_PANEL) {
        const int rows = l->out - o0 < SKINNY_PANEL ? l->out - o0 : SKINNY_PANEL;
        const int me = omp_get_thread_num() < threads ? omp_get_thread_num() : 0;
        float *panel = panels + (size_t)me * SKINNY_PANEL * in;
        if (l->fmt == QFMT_Q8_0) k->q8_0_dequantize(panel, l->q8 + (size_t)o0 * in, l->scales + (size_t)o0 * nb, rows, in);
        else k->q4_0_dequantize(panel, l->q4 + (size_t)o0 * nb * (QK / 2), l->scales + (size_t)o0 * nb, rows, in);
        for (int r0 = 0; r0 < N; r0 += LINEAR_ROWS_MAX) {
            const int nr = N - r0 < LINEAR_ROWS_MAX ? N - r0 : LINEAR_ROWS_MAX;
            f->linear_rows(y + (size_t)r0 * l->out + o0, l->out, x + (size_t)r0 * in, nr, panel, in, 0, rows);
        }
    }
}

static void block_forward(const qlinear *l, float *y, const float *x, int N, void *scratch) {
    const qkernels *k = qkernels_active();
    if (N == 1) {
        if (l->fmt == QFMT_Q8_0) k->q8_0_matvec(y, l->q8, l->scales, x, l->out, l->in);
        else k->q4_0_matvec(y, l->q4, l->scales, x, l->out, l->in);
        return;
    }
    if (N <= kernels_active()->linear_rows_most) {
        skinny_forward(l, y, x, N, scratch);
        return;
    }
    float *panel = scratch;
    for (int o0 = 0; o0 < l->out; o0 += PANEL) {
        const int rows = l->out - o0 < PANEL ? l->out - o0 : PANEL;
        dequantize_rows(l, panel, o0, rows);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, rows, l->in, 1.0f, x, l->in, panel, l->in, 0.0f,
                    y + o0, l->out);
    }
}

static void w8a8_forward(const qlinear *l, float *y, const float *x, int N, void *scratch) {
    int8_t *xq = scratch;
    float *xs = (float *)((char *)scratch + align64((size_t)N * l->in));
#pragma omp parallel for schedule(static) if ((size_t)N * l->in > 65536)
    for (int n = 0; n < N; n++) {
        const float *row = x + (size_t)n * l->in;
        int8_t *q = xq + (size_t)n * l->in;
        if (l->input_scale > 0) {
            i8_quantize_row_scaled(q, row, l->in, l->input_scale, l->smooth);
            xs[n] = l->input_scale;
        } else {
            xs[n] = i8_quantize_row(q, row, l->in, l->smooth);
        }
    }
    qkernels_active()->i8_gemm(y, xq, xs, N, l->q8, l->scales, l->row_sums, l->out, l->in);
}

void qlinear_forward(const qlinear *l, float *y, const float *x, int N, void *scratch) {
    if (l->fmt == QFMT_W8A8) w8a8_forward(l, y, x, N, scratch);
    else block_forward(l, y, x, N, scratch);
}

int qlinear_create(qlinear *l, qformat fmt, const float *w, int out, int in, const float *smooth, float input_scale,
                   dt_error *err) {
    memset(l, 0, sizeof *l);
    if (fmt == QFMT_F32) return dt_fail(err, "qlinear_create: format must be a quantised one");
    if (out <= 0 || in <= 0 || in > QLINEAR_MAX_IN)
        return dt_fail(err, "weight [%d, %d]: quantised layers need 0 < in ≤ %d", out, in, QLINEAR_MAX_IN);
    l->fmt = fmt;
    l->out = out;
    l->in = in;
    l->input_scale = input_scale;
    const int nb = q_blocks(in);
    int ok = 1;
    if (fmt == QFMT_Q4_0) {
        l->q4 = malloc((size_t)out * nb * (QK / 2));
        l->scales = malloc((size_t)out * nb * sizeof(float));
        ok = l->q4 && l->scales;
        for (int o = 0; ok && o < out; o++)
            q4_0_quantize_row(l->q4 + (size_t)o * nb * (QK / 2), l->scales + (size_t)o * nb, w + (size_t)o * in, in);
    } else if (fmt == QFMT_Q8_0) {
        l->q8 = malloc((size_t)out * in);
        l->scales = malloc((size_t)out * nb * sizeof(float));
        ok = l->q8 && l->scales;
        for (int o = 0; ok && o < out; o++)
            q8_0_quantize_row(l->q8 + (size_t)o * in, l->scales + (size_t)o * nb, w + (size_t)o * in, in);
    } else {
        l->q8 = malloc((size_t)out * in);
        l->scales = malloc((size_t)out * sizeof(float));
        l->row_sums = malloc((size_t)out * sizeof(int32_t));
        float *ws = malloc((size_t)in * sizeof(float));
        if (smooth) l->smooth = malloc((size_t)in * sizeof(float));
        ok = l->q8 && l->scales && l->row_sums && ws && (!smooth || l->smooth);
        if (ok && smooth) memcpy(l->smooth, smooth, (size_t)in * sizeof(float));
        /* W' = W · diag(s): the smoothing moves range from the activations into the weights */
        for (int o = 0; ok && o < out; o++) {
            const float *row = w + (size_t)o * in;
            for (int j = 0; j < in; j++) ws[j] = smooth ? row[j] * smooth[j] : row[j];
            l->scales[o] = i8_quantize_row(l->q8 + (size_t)o * in, ws, in, NULL);
        }
        if (ok) i8_row_sums(l->row_sums, l->q8, out, in);
        free(ws);
    }
    if (!ok) {
        qlinear_free(l);
        return dt_fail_oom(err, "out of memory quantising a [%d, %d] weight", out, in);
    }
    return 0;
}

void qlinear_free(qlinear *l) {
    free(l->q8);
    free(l->q4);
    free(l->scales);
    free(l->row_sums);
    free(l->smooth);
    memset(l, 0, sizeof *l);
}
