/* test_quant.c — quantised formats and kernels: round-trip error bounds of each format, every
 * kernel path the CPU runs against the plain reference on odd shapes, quantised models (decode
 * against the full forward, checkpoint round trip, calibration determinism, loss on real text
 * within a stated tolerance of F32) and the library's refusals. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/base.h"
#include "difftrans.h"
#include "layers/layers.h"
#include "model/model_quant.h"
#include "testutil.h"

static float absmax_of(const float *x, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* Weights with a few planted outliers, so that block scales differ a lot from block to block. */
static float *weights(int out, int in, uint64_t *rng) {
    float *w = frand((size_t)out * in, 0.5f, rng);
    for (int i = 0; i < out * in; i += 37) w[i] *= 20.0f;
    return w;
}

/* ---------------------------------------------------------------- formats */

/* The worst error of a weight: half a step of the float scale d, plus what rounding d to a half
 * moved the value (|d − d_h| · |q|, at most 2^-11 · d · |q|). */
static float q_bound(float d, float d_half, int q) { return (0.5f * fabsf(d) + fabsf(d - d_half) * (float)abs(q)) * 1.0001f + 1e-12f; }

static void test_round_trip_bounds(void **state) {
    (void)state;
    uint64_t rng = 11;
    const int sizes[] = {1, 5, 31, 32, 33, 64, 100, 257};
    for (int s = 0; s < 8; s++) {
        const int in = sizes[s], nb = q_blocks(in);
        float *w = weights(1, in, &rng), *back = fnan((size_t)in);
        block_q8_0 b8[16];
        block_q4_0 b4[16];
        q8_0_quantize_row(b8, w, in);
        q8_0_dequantize_row(back, b8, in);
        for (int j = 0; j < in; j++) {
            const int b = j / QK, n = in - b * QK < QK ? in - b * QK : QK;
            const float d = absmax_of(w + b * QK, n) / 127.0f;
            if (!(fabsf(w[j] - back[j]) <= q_bound(d, half_to_float(b8[b].d), b8[b].qs[j % QK])))
                fail_msg("q8_0 in %d: element %d is %g, back %g", in, j, (double)w[j], (double)back[j]);
        }
        /* q4_0: the largest-magnitude value maps to −8 (exactly, but for the half's rounding of d);
         * the rest within half a step, except its opposite extreme, which clamps to +7 and is off
         * by at most one step */
        q4_0_quantize_row(b4, w, in);
        q4_0_dequantize_row(back, b4, in);
        for (int b = 0; b < nb; b++) {
            const int j0 = b * QK, n = in - j0 < QK ? in - j0 : QK;
            const float dh = half_to_float(b4[b].d), step = absmax_of(w + j0, n) / 8.0f;
            for (int j = j0; j < j0 + n; j++) {
                const float e = fabsf(w[j] - back[j]);
                const int clamped = back[j] == 7 * dh;
                assert_true(e <= (clamped ? step : 0.5f * step) * 1.0001f + 8 * fabsf(step - fabsf(dh)) + 1e-12f);
            }
            assert_true(fabsf(dh) * 8 >= absmax_of(w + j0, n) * 0.999f);
        }
        /* the padding of a short last block decodes to zero and the nibbles hold q + 8 */
        if (in % QK) {
            assert_int_equal(b4[nb - 1].qs[QK / 2 - 1] >> 4, 8);
            assert_int_equal(b8[nb - 1].qs[QK - 1], 0);
        }
        /* w8a8 row: half a step of absmax / 127; smoothing divides first */
        int8_t q8[300];
        float scale = i8_quantize_row(q8, w, in, NULL);
        assert_float_equal(scale, absmax_of(w, in) / 127.0f, 1e-9);
        for (int j = 0; j < in; j++) {
            back[j] = scale * q8[j];
            assert_true(q8[j] >= -127);
        }
        assert_true(tu_max_abs_diff(w, back, (size_t)in) <= 0.5f * scale * (1 + 1e-5f) + 1e-12f);
        free(w);
        free(back);
    }
    /* all zero, inf and NaN never reach an undefined conversion */
    float z[40] = {0};
    block_q8_0 zb[2];
    q8_0_quantize_row(zb, z, 40);
    assert_true(zb[0].d == 0 && zb[0].qs[3] == 0);
    int8_t q[40];
    z[1] = INFINITY;
    z[2] = NAN;
    i8_quantize_row_scaled(q, z, 40, 0.5f, NULL);
    assert_int_equal(q[1], 127);
}

/* The bytes are ggml's: a little-endian half, then the values; Q4_0 rounds halves up (trunc(v +
 * 8.5), ggml's rule: roundf would give −8 for −7.5) and packs element j with j + 16. */
static void test_block_bytes_are_ggml(void **state) {
    (void)state;
    float w[QK];
    for (int j = 0; j < QK; j++) w[j] = (float)(j - 16);
    block_q4_0 b4;
    q4_0_quantize_row(&b4, w, QK);
    unsigned char bytes[18];
    memcpy(bytes, &b4, sizeof bytes);
    assert_int_equal(bytes[0] | bytes[1] << 8, 0x4000); /* d = −16 / −8 = 2.0 */
    assert_int_equal(bytes[2], 0x80);                     /* element 0: −8 → 0; element 16: 0 → 8 */
    assert_int_equal(bytes[3] & 0x0F, 1);                 /* element 1: −15 / 2 = −7.5 → −7 */
    assert_int_equal(bytes[17] >> 4, 15);                 /* element 31: 15 / 2 = 7.5 → 7 (clamped) */
    block_q8_0 b8;
    q8_0_quantize_row(&b8, w, QK);
    unsigned char b8bytes[34];
    memcpy(b8bytes, &b8, sizeof b8bytes);
    assert_int_equal(b8bytes[0] | b8bytes[1] << 8, float_to_half(16.0f / 127.0f));
    assert_int_equal((int8_t)b8bytes[2], -127);            /* −16 · 127 / 16 */
    assert_int_equal((int8_t)b8bytes[2 + 17], (int)roundf(1.0f * (127.0f / 16.0f)));
    assert_int_equal((int8_t)b8bytes[2 + 31], (int)roundf(15.0f * (1.0f / (16.0f / 127.0f))));
    assert_int_equal(qblock_bytes(QFMT_Q8_0), 34);
    assert_int_equal(qblock_bytes(QFMT_Q4_0), 18);
}

/* ---------------------------------------------------------------- kernels */

typedef struct {
    int out, in, N;
} shape;

/* Odd block counts (the AVX-512 kernels pair blocks), short last blocks, and batches past a tile. */
static const shape shapes[] = {{1, 1, 1},  {1, 32, 1},  {3, 33, 2},   {5, 31, 3},    {7, 100, 5},
                               {4, 64, 4}, {9, 65, 7},  {17, 257, 9}, {64, 1024, 1}, {33, 130, 13},
                               {7, 100, 1}, {9, 257, 1},  {5, 600, 1}, {6, 96, 6}};

/* |y − reference| within rel of Σ|terms| (the reference sums in double). */
static void assert_close_to_reference(const float *y, const float *ref, const float *mag, int n, float rel,
                                      const char *what, const char *path, const shape *s) {
    for (int i = 0; i < n; i++) {
        const float tol = rel * mag[i] + 1e-30f;
        if (!(fabsf(y[i] - ref[i]) <= tol))
            fail_msg("%s on path %s, shape out %d in %d N %d: element %d is %g, reference %g (tolerance %g)", what,
                     path, s->out, s->in, s->N, i, (double)y[i], (double)ref[i], (double)tol);
    }
}

/* 8-bit activation blocks of N rows of in values (owned: free with act_free). */
static qact act_new(int N, int in) {
    const int nb = q_blocks(in);
    qact a = {malloc((size_t)N * nb * QK), fnan((size_t)N * nb), fnan((size_t)N * qact_pairs(nb) * 16),
              malloc((size_t)N * qact_pairs(nb) * 16 * sizeof(int32_t)), malloc((size_t)N * nb * sizeof(int32_t)), nb};
    assert_non_null(a.q);
    return a;
}
static void act_free(qact *a) { free(a->q), free(a->d), free(a->de), free(a->off), free(a->sum); }

/* Σ |d_w · d_x · q_w · q_x| per output: the scale of the float rounding in a dot product. */
static void dot_magnitude(float *mag, const void *w, qformat fmt, int rows, const qact *x, int N, int in) {
    float *deq = fnew((size_t)rows * in), *xa = fnew((size_t)N * in);
    for (int r = 0; r < rows; r++) {
        if (fmt == QFMT_Q8_0) q8_0_dequantize_row(deq + (size_t)r * in, (const block_q8_0 *)w + (size_t)r * x->nb, in);
        else q4_0_dequantize_row(deq + (size_t)r * in, (const block_q4_0 *)w + (size_t)r * x->nb, in);
    }
    for (int i = 0; i < rows * in; i++) deq[i] = fabsf(deq[i]);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < in; j++) {
            const size_t b = (size_t)n * x->nb + j / QK;
            xa[(size_t)n * in + j] = fabsf(x->d[b] * x->q[b * QK + j % QK]);
        }
    linear_forward(mag, xa, deq, N, in, rows);
    for (int i = 0; i < N * rows; i++) mag[i] += 1e-20f;
    free(deq), free(xa);
}

/* The 16-row interleaved layout (qpack.c) of the same blocks: it unpacks to them bit for bit; its
 * definition (qpack_dot_reference, float sums) is within the dot products' bound of the double
 * reference; the set's packed kernel, where it has one, gives the definition's bits, whatever the
 * groups it is handed and the rows of x beside a row; and nothing is written past `out` (ldy is
 * wider here, with its gaps watched). */
static void check_packed(const qkernels *k, qformat fmt, const void *blocks, const qact *a, const float *ref,
                         const float *mag, const shape *s) {
    const int nb = q_blocks(s->in), out = s->out, N = s->N, groups = (int)qpack_groups(out);
    const size_t ldy = (size_t)out + 5, block_bytes = (size_t)nb * qblock_bytes(fmt) * out;
    void *packed = aligned_alloc(64, qpack_bytes(fmt, out, s->in)), *back = malloc(block_bytes);
    assert_non_null(packed);
    qpack_pack(packed, fmt, blocks, out, s->in);
    qpack_unpack(back, fmt, packed, 0, out, s->in);
    assert_memory_equal(back, blocks, block_bytes);
    float *def = fnan((size_t)N * ldy), *y = fnan((size_t)N * ldy), *alone = fnan(ldy), *dense = fnan((size_t)N * out);
    for (size_t i = 0; i < (size_t)N * ldy; i++) def[i] = y[i] = -7.0f; /* the gaps must keep it */
    qpack_dot_reference(def, ldy, fmt, packed, 0, groups, out, a, N);
    for (int n = 0; n < N; n++) {
        memcpy(dense + (size_t)n * out, def + (size_t)n * ldy, (size_t)out * sizeof(float));
        for (size_t j = (size_t)out; j < ldy; j++) assert_true(def[(size_t)n * ldy + j] == -7.0f);
    }
    assert_close_to_reference(dense, ref, mag, N * out, 1e-5f, "qpack_dot_reference", "definition", s);
    if (k->packed_dot) {
        /* one group at a time, then all at once */
        for (int g = 0; g < groups; g++) k->packed_dot(y, ldy, fmt, packed, g, 1, out, a, N);
        if (memcmp(y, def, (size_t)N * ldy * sizeof(float)) != 0)
            fail_msg("packed_dot on path %s, shape out %d in %d N %d: differs from qpack_dot_reference", k->name, out,
                     s->in, N);
        for (size_t i = 0; i < (size_t)N * ldy; i++) y[i] = -7.0f;
        k->packed_dot(y, ldy, fmt, packed, 0, groups, out, a, N);
        assert_memory_equal(y, def, (size_t)N * ldy * sizeof(float));
        for (int n = 0; n < N; n++) {
            const qact row = {a->q + (size_t)n * nb * QK, a->d + (size_t)n * nb, NULL, NULL, a->sum + (size_t)n * nb, nb};
            for (size_t j = 0; j < ldy; j++) alone[j] = -7.0f;
            k->packed_dot(alone, ldy, fmt, packed, 0, groups, out, &row, 1);
            assert_memory_equal(alone, def + (size_t)n * ldy, ldy * sizeof(float));
        }
    }
    free(packed), free(back), free(def), free(y), free(alone), free(dense);
}

/* Every set of kernels this CPU runs (portable, AVX2, AVX-512 with and without VNNI) against the
 * double-precision definitions: the integer products exactly summed, so the bound is float
 * rounding of the per-block scaling and the sum over blocks, 1e-5 of Σ|terms|. And a row's result
 * does not depend on the batch it came in (bit for bit), nor on the rows of W beside it. */
static void test_kernels_match_reference(void **state) {
    (void)state;
    uint64_t rng = 5;
    const qkernels *sets[QKERNELS_MAX_SETS];
    const int n_sets = qkernels_all(sets);
    for (int p = 0; p < n_sets; p++) {
        const qkernels *k = sets[p];
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const shape *s = &shapes[si];
            const int nb = q_blocks(s->in);
            float *w = weights(s->out, s->in, &rng), *x = frand((size_t)s->N * s->in, 1.0f, &rng);
            for (int i = 0; i < s->N * s->in; i += 13) x[i] *= 30.0f; /* outliers: block scales differ */
            x[0] = -1000.0f; /* −127 after rounding: the extreme where a saturating product would show */
            float *y = fnan((size_t)s->N * s->out), *ref = fnew((size_t)s->N * s->out), *mag = fnew((size_t)s->N * s->out);
            float *alone = fnan((size_t)s->out), *absx_row = fnew((size_t)s->in);
            block_q8_0 *b8 = malloc((size_t)s->out * nb * sizeof *b8);
            block_q4_0 *b4 = malloc((size_t)s->out * nb * sizeof *b4);
            for (int o = 0; o < s->out; o++) {
                q8_0_quantize_row(b8 + (size_t)o * nb, w + (size_t)o * s->in, s->in);
                q4_0_quantize_row(b4 + (size_t)o * nb, w + (size_t)o * s->in, s->in);
            }
            b8[0].qs[0] = 127; /* the extremes, where a saturating 16-bit product would show */
            b8[0].qs[1] = -127;
            qact a = act_new(s->N, s->in), a_ref = act_new(s->N, s->in);
            k->quantize_act(&a, x, s->N, s->in);
            for (int n = 0; n < s->N; n++) qact_quantize_row(&a_ref, n, x + (size_t)n * s->in, s->in);
            assert_memory_equal(a.q, a_ref.q, (size_t)s->N * nb * QK);
            assert_memory_equal(a.d, a_ref.d, (size_t)s->N * nb * sizeof(float));
            assert_memory_equal(a.de, a_ref.de, (size_t)s->N * qact_pairs(nb) * 16 * sizeof(float));
            assert_memory_equal(a.off, a_ref.off, (size_t)s->N * qact_pairs(nb) * 16 * sizeof(int32_t));
            assert_memory_equal(a.sum, a_ref.sum, (size_t)s->N * nb * sizeof(int32_t));
            assert_int_equal(a.q[0], -127);
            for (int f = 0; f < 2; f++) {
                const qformat fmt = f ? QFMT_Q4_0 : QFMT_Q8_0;
                const char *what = f ? "q4_0_dot" : "q8_0_dot";
                for (int i = 0; i < s->N * s->out; i++) y[i] = NAN;
                if (f) {
                    k->q4_0_dot(y, (size_t)s->out, b4, s->out, &a, s->N);
                    q4_0_dot_reference(ref, (size_t)s->out, b4, s->out, &a, s->N);
                } else {
                    k->q8_0_dot(y, (size_t)s->out, b8, s->out, &a, s->N);
                    q8_0_dot_reference(ref, (size_t)s->out, b8, s->out, &a, s->N);
                }
                dot_magnitude(mag, f ? (const void *)b4 : (const void *)b8, fmt, s->out, &a, s->N, s->in);
                assert_close_to_reference(y, ref, mag, s->N * s->out, 1e-5f, what, k->name, s);
                /* row n alone, one output at a time: the same bits */
                for (int n = 0; n < s->N; n++) {
                    const size_t at = (size_t)n * nb;
                    const size_t lanes = (size_t)n * qact_pairs(nb) * 16;
                    const qact row = {a.q + at * QK, a.d + at, a.de + lanes, a.off + lanes, a.sum + at, nb};
                    for (int o = 0; o < s->out; o++) {
                        if (f) k->q4_0_dot(alone + o, 1, b4 + (size_t)o * nb, 1, &row, 1);
                        else k->q8_0_dot(alone + o, 1, b8 + (size_t)o * nb, 1, &row, 1);
                    }
                    if (memcmp(alone, y + (size_t)n * s->out, (size_t)s->out * sizeof(float)) != 0)
                        fail_msg("%s on path %s, shape out %d in %d N %d: row %d alone differs from its batch", what,
                                 k->name, s->out, s->in, s->N, n);
                }
                check_packed(k, fmt, f ? (const void *)b4 : (const void *)b8, &a, ref, mag, s);
            }
            /* float activations, one row: the products in float against the double definition */
            for (int i = 0; i < s->in; i++) absx_row[i] = fabsf(x[i]);
            for (int f = 0; f < 2; f++) {
                float *deq_abs = fnew((size_t)s->out * s->in);
                for (int o = 0; o < s->out; o++) {
                    if (f) q4_0_dequantize_row(deq_abs + (size_t)o * s->in, b4 + (size_t)o * nb, s->in);
                    else q8_0_dequantize_row(deq_abs + (size_t)o * s->in, b8 + (size_t)o * nb, s->in);
                }
                for (int i = 0; i < s->out * s->in; i++) deq_abs[i] = fabsf(deq_abs[i]);
                linear_forward(mag, absx_row, deq_abs, 1, s->in, s->out);
                for (int o = 0; o < s->out; o++) y[o] = NAN, mag[o] += 1e-20f;
                if (f) {
                    k->q4_0_matvec(y, b4, s->out, x, s->in);
                    q4_0_matvec_reference(ref, b4, s->out, x, s->in);
                } else {
                    k->q8_0_matvec(y, b8, s->out, x, s->in);
                    q8_0_matvec_reference(ref, b8, s->out, x, s->in);
                }
                assert_close_to_reference(y, ref, mag, s->out, 1e-5f, f ? "q4_0_matvec" : "q8_0_matvec", k->name, s);
                free(deq_abs);
            }
            /* dequantising rows (the float-activation products): exactly the formats' own values */
            float *deq = fnan((size_t)s->out * s->in), *deq_ref = fnew((size_t)s->out * s->in);
            for (int o = 0; o < s->out; o++) q4_0_dequantize_row(deq_ref + (size_t)o * s->in, b4 + (size_t)o * nb, s->in);
            k->q4_0_dequantize(deq, b4, s->out, s->in);
            assert_memory_equal(deq, deq_ref, (size_t)s->out * s->in * sizeof(float));
            for (int o = 0; o < s->out; o++) q8_0_dequantize_row(deq_ref + (size_t)o * s->in, b8 + (size_t)o * nb, s->in);
            for (size_t i = 0; i < (size_t)s->out * s->in; i++) deq[i] = NAN;
            k->q8_0_dequantize(deq, b8, s->out, s->in);
            assert_memory_equal(deq, deq_ref, (size_t)s->out * s->in * sizeof(float));
            free(deq), free(deq_ref);
            /* int8 × int8 (W8A8): exact integer sums, so only the final float scaling may round */
            float *ws = fnew((size_t)s->out), *xs = fnew((size_t)s->N);
            int8_t *q8 = malloc((size_t)s->out * s->in), *xq = malloc((size_t)s->N * s->in);
            int32_t *sums = malloc((size_t)s->out * sizeof(int32_t));
            for (int o = 0; o < s->out; o++) ws[o] = i8_quantize_row(q8 + (size_t)o * s->in, w + (size_t)o * s->in, s->in, NULL);
            for (int n = 0; n < s->N; n++) xs[n] = i8_quantize_row(xq + (size_t)n * s->in, x + (size_t)n * s->in, s->in, NULL);
            xq[0] = -127;
            q8[0] = 127;
            if (s->in > 1) {
                xq[1] = -127;
                q8[1] = -127;
            }
            i8_row_sums(sums, q8, s->out, s->in);
            for (int i = 0; i < s->N * s->out; i++) y[i] = NAN;
            k->i8_gemm(y, xq, xs, s->N, q8, ws, sums, s->out, s->in);
            i8_gemm_reference(ref, xq, xs, s->N, q8, ws, s->out, s->in);
            for (int i = 0; i < s->N * s->out; i++) mag[i] = fabsf(ref[i]) + 1e-20f;
            assert_close_to_reference(y, ref, mag, s->N * s->out, 1e-6f, "i8_gemm", k->name, s);
            free(w), free(x), free(y), free(ref), free(mag), free(alone), free(absx_row), free(b8), free(b4);
            free(q8), free(ws), free(xs), free(xq), free(sums);
            act_free(&a), act_free(&a_ref);
        }
    }
    print_message("quantised kernel sets checked: %d (this CPU: %s)\n", n_sets, dt_cpu()->model);
    assert_true(n_sets >= 1);
}

/* Rounding activations to 8-bit blocks: every path gives the definition's bits, for ties (2.5 →
 * 2, 3.5 → 4, −0.5 → 0: nearest, ties to even), values that land on ±127, zeros, inf and NaN (no
 * undefined conversion: clamped first), and a short last block padded with zeros. */
static void test_act_quantize_paths(void **state) {
    (void)state;
    enum { IN = 70 };
    float x[IN];
    for (int j = 0; j < IN; j++) x[j] = (float)((j * 37) % 23) - 11.0f;
    x[0] = 127; /* block 0: absmax 127, so d = 1 and x · (1 / d) = x exactly */
    x[1] = 2.5f, x[2] = 3.5f, x[3] = -0.5f, x[4] = -2.5f, x[5] = -127;
    for (int j = 32; j < 64; j++) x[j] = 0; /* block 1 all zero: d = 0 */
    x[64] = INFINITY, x[65] = NAN, x[66] = -1; /* block 2 (short) */
    qact ref = act_new(1, IN);
    qact_quantize_row(&ref, 0, x, IN);
    assert_int_equal(ref.q[1], 2);
    assert_int_equal(ref.q[2], 4);
    assert_int_equal(ref.q[3], 0);
    assert_int_equal(ref.q[4], -2);
    assert_int_equal(ref.q[5], -127);
    assert_true(ref.d[0] == 1.0f && ref.d[1] == 0.0f);
    for (int j = 6; j < QK; j++) assert_int_equal(ref.q[QK * 2 + j], 0); /* padding */
    const qkernels *sets[QKERNELS_MAX_SETS];
    const int n = qkernels_all(sets);
    for (int p = 0; p < n; p++) {
        qact a = act_new(1, IN);
        sets[p]->quantize_act(&a, x, 1, IN);
        if (memcmp(a.q, ref.q, (size_t)ref.nb * QK) != 0 || memcmp(a.d, ref.d, (size_t)ref.nb * 4) != 0 ||
            memcmp(a.de, ref.de, qact_pairs(ref.nb) * 16 * 4) != 0 || memcmp(a.off, ref.off, qact_pairs(ref.nb) * 16 * 4) != 0)
            fail_msg("quantize_act on path %s differs from the definition", sets[p]->name);
        act_free(&a);
    }
    act_free(&ref);
}

/* A saturating int16 product (maddubs with x + 128) would fail here: every pair is 127·127. */
static void test_i8_gemm_extremes(void **state) {
    (void)state;
    enum { IN = 200 };
    int8_t x[IN], w[IN];
    for (int j = 0; j < IN; j++) {
        x[j] = j % 2 ? -127 : 127;
        w[j] = j % 2 ? -127 : 127;
    }
    float one = 1, y, ref;
    int32_t sum;
    i8_row_sums(&sum, w, 1, IN);
    i8_gemm_reference(&ref, x, &one, 1, w, &one, 1, IN);
    assert_float_equal(ref, 127.0 * 127 * IN, 0.5);
    const qkernels *sets[QKERNELS_MAX_SETS];
    const int n_sets = qkernels_all(sets);
    for (int p = 0; p < n_sets; p++) {
        const qkernels *k = sets[p];
        y = NAN;
        k->i8_gemm(&y, x, &one, 1, w, &one, &sum, 1, IN);
        assert_float_equal(y, ref, 0.5);
    }
}

/* The layer, through the active path. With 8-bit activations every batch (one row, a few, many)
 * gives one row's bits; the result is within the activation rounding bound of the float product
 * of the dequantised weights — each activation moves at most half a step, d_x / 2, so an output
 * moves at most Σ_j |w_j| · d_x(j) / 2 — and that bound is not vacuous (the two differ). With
 * float activations (a few rows: dequantised panels and linear_rows; more: panel sgemm) and W8A8
 * (the integer gemm), many rows give what one row at a time gives to float rounding, and equal the
 * float product of the dequantised weights (w8a16) or of the quantised operands (w8a8). */
/* The 16-row layout set up by hand (as qlinear_pack would), so that a CPU without the packed
 * kernel runs it too, through its definition. */
static void pack_by_hand(qlinear *l) {
    l->packed = aligned_alloc(64, qpack_bytes(l->fmt, l->out, l->in));
    assert_non_null(l->packed);
    qpack_pack(l->packed, l->fmt, l->blocks, l->out, l->in);
    free(l->blocks);
    l->blocks = NULL;
}

static void test_qlinear_paths_agree(void **state) {
    (void)state;
    for (int ni = 0; ni < 4; ni++) {
        uint64_t rng = 9;
        const int out = 150, in = 70, N = (int[]){3, 11, 40, 130}[ni];
        float *w = weights(out, in, &rng), *x = frand((size_t)N * in, 1.0f, &rng);
        float *smooth = fnew(in);
        for (int j = 0; j < in; j++) smooth[j] = 0.5f + (float)(j % 5);
        void *scratch = malloc(qlinear_scratch_bytes(N, in, out));
        float *many = fnan((size_t)N * out), *one = fnan((size_t)N * out), *deq = fnew((size_t)out * in), *ref = fnew((size_t)N * out);
        float *bound = fnew((size_t)N * out), *absx = fnew((size_t)N * in);
        /* formats 6 and 7: Q8_0 / Q4_0 in the 16-row layout (qlinear_pack's, set up by hand so that
         * a CPU without the packed kernel runs it too, through its definition) */
        const qformat fmts[] = {QFMT_Q8_0, QFMT_Q4_0, QFMT_Q8_0, QFMT_Q4_0, QFMT_W8A8, QFMT_W8A8, QFMT_Q8_0, QFMT_Q4_0};
        float *unpacked = fnan((size_t)N * out);
        for (int f = 0; f < 8; f++) {
            qlinear l;
            dt_error err;
            float range = 0; /* a static scale as calibration would set it: the range of x / s */
            for (int i = 0; i < N * in; i++) range = fmaxf(range, fabsf(x[i] / smooth[i % in]));
            assert_int_equal(qlinear_create(&l, fmts[f], w, out, in, f == 5 ? smooth : NULL, f == 5 ? range / 127 : 0, &err), 0);
            const int float_acts = f == 2 || f == 3;
            if (float_acts) l.act = QACT_FLOAT;
            if (f >= 6) {
                qlinear_forward(&l, unpacked, x, N, scratch);
                pack_by_hand(&l);
            }
            qlinear_forward(&l, many, x, N, scratch);
            for (int n = 0; n < N; n++) qlinear_forward(&l, one + (size_t)n * out, x + (size_t)n * in, 1, scratch);
            if (fmts[f] != QFMT_W8A8 && !float_acts) assert_memory_equal(many, one, (size_t)N * out * sizeof(float));
            else assert_true(tu_max_rel_diff(many, one, (size_t)N * out, 1.0f) < 1e-4f);
            if (fmts[f] != QFMT_W8A8) {
                block_q8_0 row[8]; /* in = 70: 3 blocks */
                for (int o = 0; o < out; o++) {
                    qlinear_blocks_copy(&l, row, o, 1);
                    if (l.fmt == QFMT_Q8_0) q8_0_dequantize_row(deq + (size_t)o * in, row, in);
                    else q4_0_dequantize_row(deq + (size_t)o * in, (const block_q4_0 *)(const void *)row, in);
                }
                linear_forward(ref, x, deq, N, in, out);
                if (float_acts) {
                    assert_true(tu_max_rel_diff(many, ref, (size_t)N * out, 1.0f) < 1e-4f);
                } else {
                    for (int n = 0; n < N; n++)
                        for (int j = 0; j < in; j++) {
                            const float *blk = x + (size_t)n * in + j / QK * QK;
                            const int len = in - j / QK * QK < QK ? in - j / QK * QK : QK;
                            absx[(size_t)n * in + j] = 0.5f * absmax_of(blk, len) / 127.0f;
                        }
                    for (int i = 0; i < out * in; i++) deq[i] = fabsf(deq[i]);
                    linear_forward(bound, absx, deq, N, in, out);
                    float worst = 0, moved = 0;
                    for (int i = 0; i < N * out; i++) {
                        const float e = fabsf(many[i] - ref[i]);
                        if (!(e <= bound[i] * 1.001f + 1e-5f * fabsf(ref[i]) + 1e-6f))
                            fail_msg("format %d N %d: output %d is %g, float activations give %g, bound %g", f, N, i,
                                     (double)many[i], (double)ref[i], (double)bound[i]);
                        worst = fmaxf(worst, e / (bound[i] + 1e-20f));
                        moved = fmaxf(moved, e);
                    }
                    assert_true(moved > 0); /* the rounding of the activations shows */
                    if (f >= 6) { /* the same sums in another order: within float rounding of the row-major path */
                        const float d = tu_max_rel_diff(many, unpacked, (size_t)N * out, 1.0f);
                        if (!(d < 1e-5f)) fail_msg("format %d N %d: packed and row-major differ by %g", f, N, (double)d);
                    }
                    if (ni == 0) print_message("format %d: worst error %.3f of the activation rounding bound\n", f, (double)worst);
                }
            }
            /* and the float product itself, within the format's precision */
            linear_forward(ref, x, w, N, in, out);
            const float tol = fmts[f] == QFMT_Q4_0 ? 0.25f : f == 5 ? 0.1f : 0.05f; /* static: one range for all */
            float err_max = tu_max_abs_diff(many, ref, (size_t)N * out), ref_max = absmax_of(ref, N * out);
            if (!(err_max <= tol * ref_max)) fail_msg("format %d: error %g against float range %g", f, (double)err_max, (double)ref_max);
            qlinear_free(&l);
        }
        free(w), free(x), free(smooth), free(scratch), free(many), free(one), free(deq), free(ref), free(bound), free(absx);
        free(unpacked);
    }
}

/* ---------------------------------------------------------------- models */

static void make_model(dt_model *m, dt_arch arch, uint64_t seed) {
    dt_config c;
    dt_error err;
    assert_int_equal(dt_config_preset(&c, "tiny", arch, &err), 0);
    c.hidden_size = 40; /* not a multiple of the block: short last blocks everywhere */
    c.intermediate_size = 72;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 10;
    c.max_position_embeddings = 64;
    assert_int_equal(dt_model_create(m, &c, &err), 0);
    dt_model_init_random(m, seed);
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].decay)
            for (size_t j = 0; j < m->tensors[i].numel; j++) m->params[m->tensors[i].offset + j] *= 6.0f;
}

static int *text_tokens(size_t n, uint64_t seed) {
    int *t = malloc(n * sizeof(int));
    for (size_t i = 0; i < n; i++) t[i] = (int)(dt_rng_next(&seed) % 256);
    return t;
}

static void quantize(dt_model *m, dt_quant_scheme s, int dynamic, float alpha, const int *tok, size_t n) {
    dt_quant_options o;
    dt_error err;
    dt_quant_defaults(&o);
    o.scheme = s;
    o.dynamic_activations = dynamic;
    o.smooth_alpha = alpha;
    o.calib_tokens = tok;
    o.calib_n = n;
    o.calib_samples = 20;
    o.calib_seq = 16;
    o.quiet = 1;
    if (dt_model_quantize(m, &o, &err) != 0) fail_msg("%s", err.msg);
}

static void logits_of(const dt_model *m, const int *tok, int T, float *out) {
    dt_error err;
    dt_runstate *rs = dt_runstate_create(m, 1, T, &err);
    assert_non_null(rs);
    assert_int_equal(dt_forward(m, rs, tok, NULL, 1, T, NULL, &err), 0);
    memcpy(out, dt_runstate_logits(rs), (size_t)T * m->cfg.vocab_size * sizeof(float));
    dt_runstate_free(rs);
}

/* Decoding one token at a time (matrix-vector kernels) gives the full forward's logits (panel
 * sgemm / integer gemm); a saved quantised checkpoint loads back to the same logits. */
/* Layers that read the same x in one parallel loop give each output the bits of one
 * qlinear_forward per layer: the layers' outs (150, 37, 80) split into tasks of 4 groups of 16
 * rows unevenly for one row of x, so a task mapped to the wrong layer or group writes the wrong
 * outputs or leaves some NaN; Q8_0 and Q4_0 mixed; and with one layer not packed (one call per
 * layer instead) the same bits too. */
static void test_qlinear_forward_shared(void **state) {
    (void)state;
    enum { IN = 70 };
    const int outs[3] = {150, 37, 80};
    const qformat fmts[3] = {QFMT_Q8_0, QFMT_Q4_0, QFMT_Q8_0};
    for (int ni = 0; ni < 3; ni++) {
        const int N = (int[]){1, 3, 40}[ni];
        for (int unpacked = 0; unpacked < 2; unpacked++) { /* 1: the second layer row-major */
            uint64_t rng = 21 + (uint64_t)ni;
            qlinear l[3];
            float *each[3], *shared[3];
            float *x = frand((size_t)N * IN, 1.0f, &rng);
            for (int i = 0; i < 3; i++) {
                float *w = weights(outs[i], IN, &rng);
                dt_error err;
                assert_int_equal(qlinear_create(&l[i], fmts[i], w, outs[i], IN, NULL, 0, &err), 0);
                if (!(unpacked && i == 1)) pack_by_hand(&l[i]);
                free(w);
                each[i] = fnan((size_t)N * outs[i]);
                shared[i] = fnan((size_t)N * outs[i]);
            }
            void *scratch = malloc(qlinear_scratch_bytes(N, IN, 150));
            for (int i = 0; i < 3; i++) qlinear_forward(&l[i], each[i], x, N, scratch);
            const qlinear *ls[3] = {&l[0], &l[1], &l[2]};
            qlinear_forward_shared(ls, shared, 3, x, N, scratch);
            for (int i = 0; i < 3; i++) {
                for (size_t j = 0; j < (size_t)N * outs[i]; j++)
                    if (!isfinite(shared[i][j]))
                        fail_msg("N %d, unpacked %d, layer %d: output %zu not written", N, unpacked, i, j);
                assert_memory_equal(shared[i], each[i], (size_t)N * outs[i] * sizeof(float));
                free(each[i]);
                free(shared[i]);
                qlinear_free(&l[i]);
            }
            free(scratch);
            free(x);
        }
    }
}

static void test_quantised_model_decode_and_checkpoint(void **state) {
    (void)state;
    const int T = 9;
    int *calib = text_tokens(2000, 3), tok[9] = {1, 50, 200, 7, 7, 99, 255, 0, 31};
    const struct {
        dt_quant_scheme s;
        int dynamic;
        float alpha;
        int lm_head, float_acts;
    } cases[] = {{DT_QUANT_Q8_0, 0, -1, 0, 0}, {DT_QUANT_Q4_0, 0, -1, 1, 0}, {DT_QUANT_Q8_0, 0, -1, 1, 1},
                 {DT_QUANT_Q4_0, 0, -1, 0, 1}, {DT_QUANT_W8A8, 0, -1, 0, 0}, {DT_QUANT_W8A8, 1, -1, 0, 0},
                 {DT_QUANT_W8A8, 0, 0.5f, 1, 0}, {DT_QUANT_W8A8, 1, 0.8f, 0, 0}};
    for (int arch = 0; arch < 2; arch++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            dt_model m, back;
            dt_error err;
            make_model(&m, arch ? DT_ARCH_DIFF : DT_ARCH_LLAMA, 17 + c);
            dt_quant_options o;
            dt_quant_defaults(&o);
            o.scheme = cases[c].s;
            o.dynamic_activations = cases[c].dynamic;
            o.smooth_alpha = cases[c].alpha;
            o.lm_head = cases[c].lm_head;
            o.float_activations = cases[c].float_acts;
            o.calib_tokens = calib;
            o.calib_n = 2000;
            o.calib_samples = 30;
            o.calib_seq = 16;
            o.quiet = 1;
            const int V = m.cfg.vocab_size;
            float *f32 = fnew((size_t)T * V), *full = fnew((size_t)T * V), *dec = fnan((size_t)T * V), *loaded = fnew((size_t)T * V);
            logits_of(&m, tok, T, f32);
            if (dt_model_quantize(&m, &o, &err) != 0) fail_msg("%s", err.msg);
            logits_of(&m, tok, T, full);
            dt_kvcache *kc = dt_kvcache_create(&m, T, &err);
            for (int t = 0; t < T; t++) assert_int_equal(dt_decode_step(&m, kc, tok[t], t, dec + (size_t)t * V, &err), 0);
            dt_kvcache_free(kc);
            /* static activation scales make decode and forward quantise alike, and per-token or
             * per-block dynamic scales too (one row is one token either way), but the attention
             * sums in another order in the two (fused kernel / cache products), and a float-rounding
             * difference there can move an int8 activation across a rounding boundary: one step,
             * 1/127 of that token's (or block's) range, then reaches the logits (measured: 0.022 of
             * a logit range of 2.8, DIFF, dynamic w8a8). Float activations: float rounding only. */
            const float diff_dec = tu_max_abs_diff(full, dec, (size_t)T * V);
            const float bound = cases[c].float_acts ? 2e-3f : 0.02f * absmax_of(full, T * V);
            if (!(diff_dec < bound))
                fail_msg("case %zu arch %d: decode differs from forward by %g (bound %g)", c, arch, (double)diff_dec, (double)bound);
            /* quantisation changed something (the test could fail) but not everything */
            const float dq = tu_max_abs_diff(full, f32, (size_t)T * V);
            assert_true(dq > 0 && dq < 0.5f * absmax_of(f32, T * V));
            char dir[1024];
            snprintf(dir, sizeof dir, "%s/q_%d_%zu", tu_tmpdir(), arch, c);
            char cmd[1100];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            assert_int_equal(system(cmd), 0);
            if (dt_model_save(&m, dir, 0, &err) != 0) fail_msg("%s", err.msg);
            assert_int_equal(dt_model_save(&m, dir, 0, &err), -1); /* never over an existing directory */
            assert_int_equal(dt_model_save(&m, "/nonexistent/x", 1, &err), -1); /* no HF form */
            assert_non_null(strstr(err.msg, "float model"));
            if (dt_model_load(&back, dir, &err) != 0) fail_msg("%s", err.msg);
            dt_quant_options back_o;
            assert_int_equal(dt_model_quant_scheme(&back, &back_o), cases[c].s);
            assert_int_equal(back_o.float_activations, cases[c].float_acts);
            logits_of(&back, tok, T, loaded);
            assert_memory_equal(full, loaded, (size_t)T * V * sizeof(float));
            /* weight bytes per decoded token shrink */
            dt_model plain;
            make_model(&plain, arch ? DT_ARCH_DIFF : DT_ARCH_LLAMA, 1);
            assert_true(dt_model_decode_bytes(&back) < dt_model_decode_bytes(&plain));
            /* and the count from the config alone (bench's probe size) is the made model's: equal,
             * or with smoothing short by its per-column scales (4 bytes per input of each layer) */
            assert_int_equal(dt_config_decode_bytes(&plain.cfg, DT_QUANT_NONE, 0), dt_model_decode_bytes(&plain));
            const size_t from_cfg = dt_config_decode_bytes(&back.cfg, cases[c].s, cases[c].lm_head);
            const size_t made = dt_model_decode_bytes(&back);
            if (cases[c].alpha < 0) assert_int_equal(from_cfg, made);
            else assert_true(from_cfg < made && made - from_cfg <= (size_t)8 * back.cfg.num_hidden_layers *
                                                                     (back.cfg.hidden_size + back.cfg.intermediate_size) * 4);
            assert_true(dt_config_decode_bytes(&back.cfg, cases[c].s, !cases[c].lm_head) != from_cfg);
            dt_model_free(&plain);
            dt_model_free(&back);
            dt_model_free(&m);
            free(f32), free(full), free(dec), free(loaded);
        }
    free(calib);
}

/* F16 and INT8 KV caches: the logits stay close to the F32 cache's (and are not identical, so
 * the cache really is stored narrower), in half and about a quarter of the memory. */
static void test_kv_cache_dtypes(void **state) {
    (void)state;
    for (int arch = 0; arch < 2; arch++) {
        dt_model m;
        dt_error err;
        make_model(&m, arch ? DT_ARCH_DIFF : DT_ARCH_LLAMA, 40 + arch);
        const int T = 24, V = m.cfg.vocab_size;
        int tok[24];
        for (int t = 0; t < T; t++) tok[t] = (t * 37 + 11) % V;
        float *ref = fnew((size_t)T * V), *got = fnan((size_t)T * V);
        size_t bytes[3];
        for (int dt = 0; dt < 3; dt++) {
            dt_kvcache *kc = dt_kvcache_create_with(&m, T, (dt_kv_dtype)dt, &err);
            assert_non_null(kc);
            bytes[dt] = dt_kvcache_bytes(kc);
            for (int t = 0; t < T; t++)
                assert_int_equal(dt_decode_step(&m, kc, tok[t], t, (dt ? got : ref) + (size_t)t * V, &err), 0);
            dt_kvcache_free(kc);
            if (dt == 0) continue;
            const float d = tu_max_abs_diff(ref, got, (size_t)T * V), range = absmax_of(ref, T * V);
            print_message("arch %d, KV cache %s: max logit difference %.3g of range %.3g\n", arch, dt == 1 ? "f16" : "int8",
                          (double)d, (double)range);
            assert_true(d > 0 && d < (dt == 1 ? 2e-3f : 5e-2f) * range);
        }
        assert_int_equal(bytes[1] * 2, bytes[0]);
        assert_true(bytes[2] < bytes[1]); /* 1 byte a value + a 4-byte scale per hd values (10 here) */
        assert_null(dt_kvcache_create_with(&m, T, (dt_kv_dtype)7, &err));
        free(ref), free(got);
        dt_model_free(&m);
    }
}

static void test_calibration_deterministic(void **state) {
    (void)state;
    int *calib = text_tokens(4000, 8);
    dt_model a, b, c;
    make_model(&a, DT_ARCH_DIFF, 2);
    make_model(&b, DT_ARCH_DIFF, 2);
    make_model(&c, DT_ARCH_DIFF, 2);
    quantize(&a, DT_QUANT_W8A8, 0, 0.5f, calib, 4000);
    quantize(&b, DT_QUANT_W8A8, 0, 0.5f, calib, 4000);
    dt_quant_options o;
    dt_error err;
    dt_quant_defaults(&o);
    o.scheme = DT_QUANT_W8A8;
    o.smooth_alpha = 0.5f;
    o.calib_tokens = calib;
    o.calib_n = 4000;
    o.calib_samples = 20;
    o.calib_seq = 16;
    o.quiet = 1;
    o.seed = 2; /* other windows: other ranges */
    assert_int_equal(dt_model_quantize(&c, &o, &err), 0);
    int same_all = 1, differs = 0;
    for (int l = 0; l < a.cfg.num_hidden_layers; l++)
        for (int w = 0; w < LIN_PER_LAYER; w++) {
            const qlinear *x = model_qlinear(&a, l, w), *y = model_qlinear(&b, l, w), *z = model_qlinear(&c, l, w);
            same_all &= x->input_scale == y->input_scale && memcmp(x->smooth, y->smooth, (size_t)x->in * 4) == 0 &&
                        memcmp(x->q8, y->q8, (size_t)x->out * x->in) == 0;
            differs |= x->input_scale != z->input_scale;
        }
    assert_true(same_all);
    assert_true(differs);
    int n;
    const dt_quant_act_stat *st = dt_model_quant_act_stats(&a, &n);
    assert_int_equal(n, a.cfg.num_hidden_layers * 7);
    assert_string_equal(st[0].name, "model.layers.0.self_attn.q_proj");
    assert_true(st[0].absmax >= st[0].median && st[0].absmax > 0);
    /* smoothing with α = 0.5 narrows the spread of channel ranges */
    assert_true(st[0].absmax_smoothed / st[0].median_smoothed < st[0].absmax / st[0].median);
    dt_model_free(&a);
    dt_model_free(&b);
    dt_model_free(&c);
    free(calib);
}

static void test_refusals(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    dt_quant_scheme s;
    make_model(&m, DT_ARCH_DIFF, 4);
    assert_int_equal(dt_quant_scheme_parse("q3_k", &s, &err), -1);
    assert_non_null(strstr(err.msg, "q3_k"));
    dt_quant_options o;
    dt_quant_defaults(&o);
    o.scheme = DT_QUANT_W8A8;
    o.quiet = 1;
    assert_int_equal(dt_model_quantize(&m, &o, &err), -1); /* static scales need calibration text */
    assert_non_null(strstr(err.msg, "calib"));
    int *calib = text_tokens(1000, 1);
    o.calib_tokens = calib;
    o.calib_n = 1000;
    o.calib_seq = 16; /* 62 windows, 300 asked for */
    assert_int_equal(dt_model_quantize(&m, &o, &err), -1);
    assert_non_null(strstr(err.msg, "fewer than the 300 samples"));
    o.calib_samples = 62;
    o.smooth_alpha = 1.5f;
    assert_int_equal(dt_model_quantize(&m, &o, &err), -1);
    o.smooth_alpha = 0.5f;
    assert_int_equal(dt_model_quantize(&m, &o, &err), 0); /* exactly enough */
    assert_int_equal(dt_model_quantize(&m, &o, &err), -1); /* twice */
    assert_int_equal(dt_model_dequantize(&m, &err), 0);
    o.scheme = DT_QUANT_Q8_0;
    assert_int_equal(dt_model_quantize(&m, &o, &err), -1); /* smoothing is for w8a8 */
    assert_null(m.quant);
    free(calib);
    dt_model_free(&m);
}

/* A quantised checkpoint whose layer is wider than the integer kernels can sum (a w8a8 down_proj
 * of 65,568 inputs) is refused at load, as the quantiser refuses to write it. */
static void test_too_wide_checkpoint_refused(void **state) {
    (void)state;
    dt_config c;
    dt_error err;
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &err), 0);
    c.vocab_size = 64;
    c.hidden_size = 16;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.num_hidden_layers = 1;
    c.intermediate_size = QLINEAR_MAX_IN + 32;
    dt_model m;
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    dt_quant_options o;
    dt_quant_defaults(&o);
    o.scheme = DT_QUANT_W8A8;
    o.dynamic_activations = 1;
    o.quiet = 1;
    assert_int_equal(dt_model_quantize(&m, &o, &err), -1);
    assert_non_null(strstr(err.msg, "quantised layers need 0 < in"));
    /* written by hand: every layer W8A8 with zero weights and unit scales */
    struct dt_quant *q = calloc(1, sizeof *q);
    q->opt = o;
    q->floats_kept = 1;
    q->n_linear = LIN_PER_LAYER;
    q->lin = calloc(LIN_PER_LAYER, sizeof *q->lin);
    for (int w = 0; w < LIN_PER_LAYER; w++) {
        qlinear *l = &q->lin[w];
        model_linear_shape(&m, 0, w, &l->out, &l->in);
        l->fmt = QFMT_W8A8;
        l->q8 = calloc((size_t)l->out * l->in, 1);
        l->scales = malloc((size_t)l->out * sizeof(float));
        l->row_sums = calloc((size_t)l->out, sizeof(int32_t));
        for (int r = 0; r < l->out; r++) l->scales[r] = 1;
    }
    m.quant = q;
    char dir[512], cmd[600];
    tu_path(dir, sizeof dir, "too_wide");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
    dt_model_free(&m);
    assert_int_equal(dt_model_load(&m, dir, &err), -1);
    assert_non_null(strstr(err.msg, "model.layers.0.mlp.down_proj has 65568 inputs; quantised layers take at most 65536"));
}

/* A model trained on real English text (the GPL-3 every Debian system ships) keeps its held-out
 * loss within a stated tolerance of F32: q8_0 +0.02, w8a8 +0.1, q4_0 +0.3 nats per byte. */
static void test_loss_on_real_text(void **state) {
    (void)state;
    const char *text = "/usr/share/common-licenses/GPL-3";
    int *tok;
    size_t n;
    dt_error err;
    if (dt_text_load(text, &tok, &n, &err) != 0) skip();
    char dir[1024];
    tu_path(dir, sizeof dir, "trained");
    dt_train_options o;
    dt_train_defaults(&o);
    o.data_path = text;
    o.out_dir = dir;
    assert_int_equal(dt_config_preset(&o.cfg, "tiny", DT_ARCH_DIFF, &err), 0);
    o.steps = 300;
    o.batch = 8;
    o.seq = 64;
    o.lr = 3e-3f;
    o.warmup = 10;
    o.eval_interval = 1000;
    o.save_interval = 0;
    o.quiet = 1;
    if (dt_train(&o, &err) != 0) fail_msg("%s", err.msg);
    const size_t split = n - n / 10;
    dt_model m;
    if (dt_model_load(&m, dir, &err) != 0) fail_msg("%s", err.msg);
    double f32, q;
    assert_int_equal(dt_eval_tokens(&m, tok + split, n - split, 8, 64, &f32, NULL, &err), 0);
    const struct {
        dt_quant_scheme s;
        int dynamic;
        float alpha, tol;
    } cases[] = {{DT_QUANT_Q8_0, 0, -1, 0.02f}, {DT_QUANT_Q4_0, 0, -1, 0.3f},   {DT_QUANT_W8A8, 0, -1, 0.1f},
                 {DT_QUANT_W8A8, 1, -1, 0.1f},  {DT_QUANT_W8A8, 0, 0.5f, 0.1f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dt_quant_options qo;
        dt_quant_defaults(&qo);
        qo.scheme = cases[c].s;
        qo.dynamic_activations = cases[c].dynamic;
        qo.smooth_alpha = cases[c].alpha;
        qo.calib_tokens = tok; /* calibrated on the training part, scored on the held-out part */
        qo.calib_n = split;
        qo.calib_samples = 100;
        qo.calib_seq = 64;
        qo.quiet = 1;
        if (dt_model_quantize(&m, &qo, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(dt_eval_tokens(&m, tok + split, n - split, 8, 64, &q, NULL, &err), 0);
        print_message("%s%s%s: held-out loss %.4f (F32 %.4f, +%.4f; tolerance +%.2f)\n", dt_quant_scheme_name(cases[c].s),
                      cases[c].dynamic ? " dynamic" : "", cases[c].alpha >= 0 ? " smoothed" : "", q, f32, q - f32,
                      (double)cases[c].tol);
        assert_true(q - f32 < cases[c].tol);
        assert_true(q != f32);
        assert_int_equal(dt_model_dequantize(&m, &err), 0);
    }
    dt_model_free(&m);
    free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_bounds),
        cmocka_unit_test(test_block_bytes_are_ggml),
        cmocka_unit_test(test_act_quantize_paths),
        cmocka_unit_test(test_kernels_match_reference),
        cmocka_unit_test(test_i8_gemm_extremes),
        cmocka_unit_test(test_qlinear_paths_agree),
        cmocka_unit_test(test_qlinear_forward_shared),
        cmocka_unit_test(test_quantised_model_decode_and_checkpoint),
        cmocka_unit_test(test_kv_cache_dtypes),
        cmocka_unit_test(test_calibration_deterministic),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_too_wide_checkpoint_refused),
        cmocka_unit_test(test_loss_on_real_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
