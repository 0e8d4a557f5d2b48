/* qlinear.c — one quantised linear layer: creation from float weights or from blocks, and
 * y = x·Wᵀ.
 *
 * Q8_0 / Q4_0 with 8-bit activations (QACT_INT8, the default): every row of x is rounded to 8-bit
 * blocks once, then each thread takes a contiguous run of W's rows and multiplies them with all
 * rows of x through the integer block products (the weights are read once for the whole batch,
 * front to back). With float activations (QACT_FLOAT): one row (decoding) through the
 * matrix-vector kernels, which widen the weights in registers; a few rows (a batch of streams; up
 * to the kernel path's linear_rows_most) dequantise small panels of W per thread and multiply
 * them with linear_rows; many rows (prefill, evaluation) dequantise PANEL rows of W at a time into
 * float scratch and multiply with sgemm (the dequantisation paid once per panel for all rows).
 * W8A8 quantises the rows of x to int8 and runs the integer matrix product.
 */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "layers/kernels.h"
#include "quant/quant.h"

#define PANEL 128
/* A few rows of x with float activations: each thread dequantises SKINNY_PANEL rows of W at a
 * time into its own float panel, which stays in the cache while linear_rows multiplies every row
 * of x by it: the weights are read once for all rows. */
#define SKINNY_PANEL 16
/* Rows of W per task of the integer products (and of the float ones for one row of x): with one
 * row of x (decoding) long runs, which the static schedule hands out as one contiguous stretch per
 * thread; with many, shorter ones so the rows of x a task reads stay in the cache. */
#define INT8_ROWS_ONE 64
#define INT8_ROWS_MANY 8
#define ACT_CHUNK_BYTES 32768

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* The 8-bit activation blocks of N rows at the start of scratch. */
static qact act_in(void *scratch, int N, int in) {
    const int nb = q_blocks(in);
    char *p = scratch;
    const size_t lanes = (size_t)N * qact_pairs(nb) * 16;
    qact a = {(int8_t *)p, NULL, NULL, NULL, NULL, nb};
    p += align64((size_t)N * nb * QK);
    a.de = (float *)p; /* 64-byte aligned, as off: the kernels load them a vector at a time */
    a.off = (int32_t *)(a.de + lanes);
    a.d = (float *)(a.off + lanes);
    a.sum = (int32_t *)(a.d + (size_t)N * nb);
    return a;
}

/* Row n of a, as blocks of one row. */
static qact act_row(const qact *a, int n) {
    const size_t at = (size_t)n * a->nb;
    const size_t lanes = (size_t)n * qact_pairs(a->nb) * 16;
    return (qact){a->q + at * QK, a->d + at, a->de + lanes, a->off + lanes, a->sum + at, a->nb};
}

size_t qlinear_scratch_bytes(int N, int in, int out) {
    (void)out;
    const size_t nb = (size_t)q_blocks(in);
    size_t panel = (size_t)PANEL * in * sizeof(float);
    size_t skinny = (size_t)omp_get_max_threads() * SKINNY_PANEL * in * sizeof(float);
    size_t acts = align64((size_t)N * in) + (size_t)N * sizeof(float);
    size_t blocks = align64((size_t)N * nb * QK) + (size_t)N * (2 * nb + 2 * qact_pairs((int)nb) * 16) * sizeof(float);
    if (skinny > panel) panel = skinny;
    if (blocks > acts) acts = blocks;
    return panel > acts ? panel : acts;
}

size_t qlinear_shape_bytes(qformat fmt, int out, int in, int smooth) {
    const size_t nb = (size_t)q_blocks(in);
    switch (fmt) {
    case QFMT_F32: return (size_t)out * in * sizeof(float);
    case QFMT_Q8_0:
    case QFMT_Q4_0: return (size_t)out * nb * qblock_bytes(fmt);
    case QFMT_W8A8: return (size_t)out * (in + sizeof(float)) + (smooth ? (size_t)in * sizeof(float) : 0);
    }
    return 0;
}

size_t qlinear_weight_bytes(const qlinear *l) { return qlinear_shape_bytes(l->fmt, l->out, l->in, l->smooth != NULL); }

static const block_q8_0 *q8_rows(const qlinear *l, int o0) { return (const block_q8_0 *)l->blocks + (size_t)o0 * q_blocks(l->in); }
static const block_q4_0 *q4_rows(const qlinear *l, int o0) { return (const block_q4_0 *)l->blocks + (size_t)o0 * q_blocks(l->in); }

static void dequantize_panel(const qkernels *k, const qlinear *l, float *w, int o0, int rows) {
    if (l->fmt == QFMT_Q8_0) k->q8_0_dequantize(w, q8_rows(l, o0), rows, l->in);
    else k->q4_0_dequantize(w, q4_rows(l, o0), rows, l->in);
}

/* The rows of x [N, in] rounded to 8-bit blocks at the start of scratch. */
static qact quantize_rows(const qkernels *k, void *scratch, const float *x, int N, int in) {
    const qact a = act_in(scratch, N, in);
    if (N < 4 || (size_t)N * in <= 65536) { /* a decode step's row: no region at all (layers.h) */
        k->quantize_act(&a, x, N, in);
        return a;
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const qact row = act_row(&a, n);
        k->quantize_act(&row, x + (size_t)n * in, 1, in);
    }
    return a;
}

/* Many rows of x (prefill) go through a task's rows of W a chunk at a time, so that the chunk of
 * x stays in the L1/L2 cache while the task's few rows of W are read again. */
static int act_chunk(int in) {
    const int chunk = ACT_CHUNK_BYTES / in;
    return chunk < 4 ? 4 : chunk - chunk % 4;
}

/* Groups of 16 rows of a packed W per task: INT8_ROWS_ONE's worth for one row of x, one group for
 * many. */
static int packed_task_groups(int N) { return N == 1 ? INT8_ROWS_ONE / QPACK_ROWS : 1; }

/* The groups [g0, g0 + gs) of a packed layer against all N rows of a. */
static void packed_task(qpacked_dot_fn dot, const qlinear *l, float *y, const qact *a, int N, int g0, int gs) {
    const int chunk = act_chunk(l->in);
    for (int n0 = 0; n0 < N; n0 += chunk) {
        const int nc = N - n0 < chunk ? N - n0 : chunk;
        const qact part = act_row(a, n0);
        dot(y + (size_t)n0 * l->out, (size_t)l->out, l->fmt, l->packed, g0, gs, l->out, &part, nc);
    }
}

/* A set without the kernel (the path changed after packing) takes the definition. */
static qpacked_dot_fn packed_dot_of(const qkernels *k) { return k->packed_dot ? k->packed_dot : qpack_dot_reference; }

static void int8_forward(const qlinear *l, float *y, const float *x, int N, void *scratch) {
    const qkernels *k = qkernels_active();
    const qact a = quantize_rows(k, scratch, x, N, l->in);
    const int chunk = act_chunk(l->in);
    if (l->packed) {
        const qpacked_dot_fn dot = packed_dot_of(k);
        const int groups = (int)qpack_groups(l->out), gstep = packed_task_groups(N);
#pragma omp parallel for schedule(static) if ((size_t)N * l->out * l->in > 262144)
        for (int g0 = 0; g0 < groups; g0 += gstep)
            packed_task(dot, l, y, &a, N, g0, groups - g0 < gstep ? groups - g0 : gstep);
        return;
    }
    const int step = N == 1 ? INT8_ROWS_ONE : INT8_ROWS_MANY;
#pragma omp parallel for schedule(static) if ((size_t)N * l->out * l->in > 262144)
    for (int o0 = 0; o0 < l->out; o0 += step) {
        const int rows = l->out - o0 < step ? l->out - o0 : step;
        for (int n0 = 0; n0 < N; n0 += chunk) {
            const int nc = N - n0 < chunk ? N - n0 : chunk;
            const qact part = act_row(&a, n0);
            float *out = y + (size_t)n0 * l->out + o0;
            if (l->fmt == QFMT_Q8_0) k->q8_0_dot(out, (size_t)l->out, q8_rows(l, o0), rows, &part, nc);
            else k->q4_0_dot(out, (size_t)l->out, q4_rows(l, o0), rows, &part, nc);
        }
    }
}

static void skinny_forward(const qlinear *l, float *y, const float *x, int N, float *panels) {
    const qkernels *k = qkernels_active();
    const dt_kernels *f = kernels_active();
    const int in = l->in, threads = omp_get_max_threads();
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < l->out; o0 += SKINNY_PANEL) {
        const int rows = l->out - o0 < SKINNY_PANEL ? l->out - o0 : SKINNY_PANEL;
        const int me = omp_get_thread_num() < threads ? omp_get_thread_num() : 0;
        float *panel = panels + (size_t)me * SKINNY_PANEL * in;
        dequantize_panel(k, l, panel, o0, rows);
        for (int r0 = 0; r0 < N; r0 += LINEAR_ROWS_MAX) {
            const int nr = N - r0 < LINEAR_ROWS_MAX ? N - r0 : LINEAR_ROWS_MAX;
            f->linear_rows(y + (size_t)r0 * l->out + o0, l->out, x + (size_t)r0 * in, nr, panel, in, 0, rows);
        }
    }
}

static void float_forward(const qlinear *l, float *y, const float *x, int N, void *scratch) {
    const qkernels *k = qkernels_active();
    if (N == 1) {
#pragma omp parallel for schedule(static) if ((size_t)l->out * l->in > 262144)
        for (int o0 = 0; o0 < l->out; o0 += INT8_ROWS_ONE) {
            const int rows = l->out - o0 < INT8_ROWS_ONE ? l->out - o0 : INT8_ROWS_ONE;
            if (l->fmt == QFMT_Q8_0) k->q8_0_matvec(y + o0, q8_rows(l, o0), rows, x, l->in);
            else k->q4_0_matvec(y + o0, q4_rows(l, o0), rows, x, l->in);
        }
        return;
    }
    if (N <= kernels_active()->linear_rows_most) {
        skinny_forward(l, y, x, N, scratch);
        return;
    }
    float *panel = scratch;
    for (int o0 = 0; o0 < l->out; o0 += PANEL) {
        const int rows = l->out - o0 < PANEL ? l->out - o0 : PANEL;
        /* rows of the panel in parallel: one call per row keeps each thread's rows its own */
#pragma omp parallel for schedule(static) if ((size_t)rows * l->in > 65536)
        for (int r = 0; r < rows; r++) dequantize_panel(k, l, panel + (size_t)r * l->in, o0 + r, 1);
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
    else if (l->act == QACT_FLOAT) float_forward(l, y, x, N, scratch);
    else int8_forward(l, y, x, N, scratch);
}

void qlinear_forward_shared(const qlinear *const *ls, float *const *ys, int n_layers, const float *x, int N,
                            void *scratch) {
    int shared = n_layers >= 1 && n_layers <= QLINEAR_SHARED_MAX;
    for (int i = 0; shared && i < n_layers; i++)
        shared = ls[i]->packed && ls[i]->act == QACT_INT8 && ls[i]->in == ls[0]->in;
    if (!shared) {
        for (int i = 0; i < n_layers; i++) qlinear_forward(ls[i], ys[i], x, N, scratch);
        return;
    }
    const qkernels *k = qkernels_active();
    const qact a = quantize_rows(k, scratch, x, N, ls[0]->in);
    const qpacked_dot_fn dot = packed_dot_of(k);
    const int gstep = packed_task_groups(N);
    /* the layers' tasks one after another: first[i] is layer i's first task */
    int first[QLINEAR_SHARED_MAX + 1] = {0};
    size_t work = 0;
    for (int i = 0; i < n_layers; i++) {
        const int groups = (int)qpack_groups(ls[i]->out);
        first[i + 1] = first[i] + (groups + gstep - 1) / gstep;
        work += (size_t)N * ls[i]->out * ls[i]->in;
    }
#pragma omp parallel for schedule(static) if (work > 262144)
    for (int t = 0; t < first[n_layers]; t++) {
        int i = 0;
        while (t >= first[i + 1]) i++;
        const int groups = (int)qpack_groups(ls[i]->out), g0 = (t - first[i]) * gstep;
        packed_task(dot, ls[i], ys[i], &a, N, g0, groups - g0 < gstep ? groups - g0 : gstep);
    }
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
    if (fmt == QFMT_Q4_0 || fmt == QFMT_Q8_0) {
        const size_t row_bytes = (size_t)nb * qblock_bytes(fmt);
        ok = (l->blocks = malloc((size_t)out * row_bytes)) != NULL;
        for (int o = 0; ok && o < out; o++) {
            void *row = (char *)l->blocks + (size_t)o * row_bytes;
            if (fmt == QFMT_Q8_0) q8_0_quantize_row(row, w + (size_t)o * in, in);
            else q4_0_quantize_row(row, w + (size_t)o * in, in);
        }
        char why[160];
        if (ok && qblocks_check(fmt, l->blocks, (size_t)out * nb, why, sizeof why) != 0) {
            qlinear_free(l);
            return dt_fail(err, "weight [%d, %d]: %s: the weights are not finite, or too large for a half-precision "
                                "block scale (65504 at most)",
                           out, in, why);
        }
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

int qlinear_from_blocks(qlinear *l, qformat fmt, int out, int in, const void *blocks, const char *what,
                        dt_error *err) {
    memset(l, 0, sizeof *l);
    if (fmt != QFMT_Q8_0 && fmt != QFMT_Q4_0) return dt_fail(err, "qlinear_from_blocks: fmt must be Q8_0 or Q4_0");
    if (out <= 0 || in <= 0 || in > QLINEAR_MAX_IN)
        return dt_fail_format(err, "%s: shape [%d, %d]: quantised layers need 0 < in ≤ %d", what, out, in,
                              QLINEAR_MAX_IN);
    const size_t n_blocks = (size_t)out * q_blocks(in);
    char why[160];
    if (qblocks_check(fmt, blocks, n_blocks, why, sizeof why) != 0) return dt_fail_format(err, "%s: %s", what, why);
    if (!(l->blocks = malloc(n_blocks * qblock_bytes(fmt))))
        return dt_fail_oom(err, "%s: out of memory for a [%d, %d] layer", what, out, in);
    memcpy(l->blocks, blocks, n_blocks * qblock_bytes(fmt));
    l->fmt = fmt;
    l->out = out;
    l->in = in;
    return 0;
}

int qlinear_pack(qlinear *l, dt_error *err) {
    const qkernels *k = qkernels_active();
    if ((l->fmt != QFMT_Q8_0 && l->fmt != QFMT_Q4_0) || l->act != QACT_INT8 || !l->blocks || !k->packed_dot ||
        !(qkernels_packed_formats(k) & (1u << l->fmt)))
        return 0;
    const size_t bytes = qpack_bytes(l->fmt, l->out, l->in); /* a multiple of 64 */
    void *packed = aligned_alloc(64, bytes);
    if (!packed) return dt_fail_oom(err, "out of memory packing a [%d, %d] layer", l->out, l->in);
    qpack_pack(packed, l->fmt, l->blocks, l->out, l->in);
    free(l->blocks);
    l->blocks = NULL;
    l->packed = packed;
    return 0;
}

void qlinear_blocks_copy(const qlinear *l, void *dst, int o0, int rows) {
    const size_t row_bytes = (size_t)q_blocks(l->in) * qblock_bytes(l->fmt);
    if (l->packed) qpack_unpack(dst, l->fmt, l->packed, o0, rows, l->in);
    else memcpy(dst, (const char *)l->blocks + (size_t)o0 * row_bytes, (size_t)rows * row_bytes);
}

void qlinear_free(qlinear *l) {
    free(l->blocks);
    free(l->packed);
    free(l->q8);
    free(l->scales);
    free(l->row_sums);
    free(l->smooth);
    memset(l, 0, sizeof *l);
}
