/* quant.h — quantised weight formats and their kernels (internal; README "Quantisation").
 *
 * Formats of one linear layer's weight W [out, in] (PyTorch layout, row-major):
 *   Q8_0  blocks of QK = 32 consecutive weights of a row share one float scale d = absmax / 127;
 *         q = round(w / d) ∈ [−127, 127] stored as int8 [out, in]; scales [out, nb], nb = ⌈in / 32⌉
 *         (the last block of a row may be short). Activations stay float (w8a16).
 *   Q4_0  the same blocks with d = absmax / 7 and q = clamp(round(w / d), −8, 7), stored as q + 8 in
 *         nibbles: byte j of a block holds element j (low nibble) and j + 16 (high nibble);
 *         [out, nb · 16] bytes, a short last block padded with q = 0. Activations stay float.
 *   W8A8  one scale per output row, d = absmax / 127, int8 [out, in]; the input x is quantised to
 *         int8 too, with a static per-tensor scale calibrated on sample text or a dynamic scale per
 *         row (token), and optionally divided first by a per-input-channel smoothing factor s
 *         (SmoothQuant: W's columns were multiplied by s when it was quantised).
 * The products accumulate integers exactly (int32) and apply the scales once per block or row.
 */
#ifndef DT_QUANT_H
#define DT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/cpu.h"
#include "difftrans.h"

#define QK 32

typedef enum { QFMT_F32 = 0, QFMT_Q8_0 = 1, QFMT_Q4_0 = 2, QFMT_W8A8 = 3 } qformat;

static inline int q_blocks(int in) { return (in + QK - 1) / QK; }

/* The widest input a quantised layer takes: (x + 128)·w summed over a row must fit an int32 on the
 * VNNI path, 255 · 127 · 65536 < 2^31. The quantiser refuses wider layers and so does the loader. */
#define QLINEAR_MAX_IN 65536

/* One quantised linear layer (weights owned by the dt_quant that holds it). */
typedef struct {
    qformat fmt;
    int out, in;
    int8_t *q8;                  /* Q8_0, W8A8: [out, in] */
    uint8_t *q4;                 /* Q4_0: [out, nb·16] */
    float *scales;               /* Q8_0, Q4_0: [out, nb]; W8A8: [out] */
    int32_t *row_sums;           /* W8A8: Σ_j q8[o, j], for the unsigned-times-signed VNNI product */
    float input_scale;           /* W8A8: static per-tensor activation scale; 0 = dynamic per token */
    float *smooth;               /* W8A8: [in] the activation is divided by it (NULL: none) */
} qlinear;

/* ---- formats (formats.c): quantise one row, and back ---- */
void q8_0_quantize_row(int8_t *q, float *scales, const float *w, int in);
void q8_0_dequantize_row(float *w, const int8_t *q, const float *scales, int in);
void q4_0_quantize_row(uint8_t *q, float *scales, const float *w, int in);
void q4_0_dequantize_row(float *w, const uint8_t *q, const float *scales, int in);
/* Scale = absmax(x_j / s_j) / 127 and q = round(x_j / s_j / scale) ∈ [−127, 127] (W8A8 weights and
 * dynamic activations; smooth s may be NULL); returns the scale (0 for an all-zero row). */
float i8_quantize_row(int8_t *q, const float *x, int n, const float *smooth);
/* Static scale: q = clamp(round(x / (scale · s_j)), ±127) with optional smoothing s (NULL: none). */
void i8_quantize_row_scaled(int8_t *q, const float *x, int n, float scale, const float *smooth);
void i8_row_sums(int32_t *sums, const int8_t *q, int out, int in);

/* ---- kernels: y[N, out] = x[N, in] · Wᵀ, one set per path ----
 *   q8_0_matvec / q4_0_matvec: one float row x [in] against a block-quantised W → y [out];
 *   i8_gemm: int8 rows xq [N, in] with per-row scales xs [N] against W8A8 → y [N, out] float:
 *            y[n, o] = xs[n] · ws[o] · Σ_j xq[n, j] · wq[o, j]  (x must lie in [−127, 127]);
 *   q8_0_dequantize / q4_0_dequantize: `rows` consecutive rows of a block-quantised W into floats
 *            w [rows, in] (for a few rows of x, qlinear.c multiplies those with linear_rows): the
 *            values of q8_0_dequantize_row / q4_0_dequantize_row exactly.
 * The AVX2 / AVX-512 versions live in qkernels_avx2.c / qkernels_avx512.c and are called only when
 * the CPU has them; the reference versions (qkernels.c) are the definitions the tests hold them to. */
typedef struct {
    void (*q8_0_matvec)(float *y, const int8_t *q, const float *scales, const float *x, int out, int in);
    void (*q4_0_matvec)(float *y, const uint8_t *q, const float *scales, const float *x, int out, int in);
    void (*i8_gemm)(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws,
                    const int32_t *row_sums, int out, int in);
    void (*q8_0_dequantize)(float *w, const int8_t *q, const float *scales, int rows, int in);
    void (*q4_0_dequantize)(float *w, const uint8_t *q, const float *scales, int rows, int in);
} qkernels;

extern const qkernels qkernels_portable, qkernels_avx2, qkernels_avx512;
/* The set for a path (NULL when the CPU cannot run it), and the one dt_isa_active() picks. */
const qkernels *qkernels_for(dt_isa isa);
const qkernels *qkernels_active(void);

/* Plain definitions in double precision, for the tests. */
void q8_0_matvec_reference(float *y, const int8_t *q, const float *scales, const float *x, int out, int in);
void q4_0_matvec_reference(float *y, const uint8_t *q, const float *scales, const float *x, int out, int in);
void i8_gemm_reference(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws, int out,
                       int in);

/* ---- the linear layer (qlinear.c) ----
 * y[N, out] = x[N, in] · Wᵀ through the layer's format; scratch must hold qlinear_scratch_bytes. */
size_t qlinear_scratch_bytes(int N, int in, int out);
void qlinear_forward(const qlinear *l, float *y, const float *x, int N, void *scratch);
/* Weight bytes read per product (what decoding streams). */
size_t qlinear_weight_bytes(const qlinear *l);
/* Quantise W [out, in] into a fresh layer of format fmt (W8A8: with smoothing s [in] or NULL,
 * which multiplies W's columns before quantisation, and a static input scale or 0 for dynamic). */
int qlinear_create(qlinear *l, qformat fmt, const float *w, int out, int in, const float *smooth, float input_scale,
                   dt_error *err);
void qlinear_free(qlinear *l);

#endif
