/* quant.h — quantised weight formats and their kernels (internal; README "Quantisation").
 *
 * Formats of one linear layer's weight W [out, in] (PyTorch layout, row-major):
 *   Q8_0  blocks of QK = 32 consecutive weights of a row share one scale d = absmax / 127, stored
 *         as an IEEE half; q = round(w / d) ∈ [−127, 127]. A block is ggml's block_q8_0 byte for
 *         byte (34 bytes: d, then the 32 int8), so a GGUF Q8_0 tensor is these blocks as they are.
 *   Q4_0  the same blocks with d = (the value of largest magnitude) / −8 and q = clamp(round(w / d),
 *         −8, 7), stored as q + 8 in nibbles: byte j holds element j (low nibble) and j + 16 (high);
 *         ggml's block_q4_0 (18 bytes). Rows have ⌈in / 32⌉ blocks, a short last block padded
 *         with q = 0 (ggml itself needs in % 32 = 0).
 *   W8A8  one float scale per output row, d = absmax / 127, int8 [out, in]; the input x is
 *         quantised to int8 too, with a static per-tensor scale calibrated on sample text or a
 *         dynamic scale per row (token), and optionally divided first by a per-input-channel
 *         smoothing factor s (SmoothQuant: W's columns were multiplied by s when it was quantised).
 *
 * Q8_0 and Q4_0 layers multiply in one of two ways (qlinear.act):
 *   QACT_INT8   each row of x is rounded once to 8-bit blocks of its own (qact: a float scale per
 *               32 values, as ggml's Q8_0 but with the scale kept in float) and every block pair
 *               is an integer dot product (VNNI, AVX-VNNI, AVX-512 BW, AVX2 maddubs, or C); the
 *               scales are applied once per block. Where the kernels gain by it (VNNI and
 *               AVX-VNNI: Q8_0 and Q4_0; AVX2: Q4_0, and Q8_0 on Intel CPUs:
 *               qkernels_packed_formats) the layer is repacked 16 rows at a time (qlinear_pack,
 *               qpack.c) so that one product covers 16 (AVX2: 8) outputs. The default: decoding reads the
 *               weights once and converts nothing to float, so it runs at the speed of memory.
 *   QACT_FLOAT  x stays float and the weights are widened to float (w8a16): more exact (no
 *               rounding of the activations, an error of at most half a step per activation
 *               otherwise), slower to decode on CPUs where the widening is the bottleneck.
 * The integer products accumulate exactly (int32) and apply the scales once per block or row.
 */
#ifndef DT_QUANT_H
#define DT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/cpu.h"
#include "difftrans.h"

#define QK 32

typedef enum { QFMT_F32 = 0, QFMT_Q8_0 = 1, QFMT_Q4_0 = 2, QFMT_W8A8 = 3 } qformat;
typedef enum { QACT_INT8 = 0, QACT_FLOAT = 1 } qact_mode;

typedef struct {
    uint16_t d;                  /* IEEE half */
    int8_t qs[QK];
} block_q8_0;

typedef struct {
    uint16_t d;                  /* IEEE half */
    uint8_t qs[QK / 2];          /* element j in the low nibble of byte j, j + 16 in the high one */
} block_q4_0;

_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 must be ggml's 34 bytes");
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 must be ggml's 18 bytes");

static inline int q_blocks(int in) { return (in + QK - 1) / QK; }
/* Bytes of one block of a Q8_0 or Q4_0 layer (0 for the other formats). */
static inline size_t qblock_bytes(qformat fmt) {
    return fmt == QFMT_Q8_0 ? sizeof(block_q8_0) : fmt == QFMT_Q4_0 ? sizeof(block_q4_0) : 0;
}

/* The widest input a quantised layer takes: (x + 128)·w summed over a row must fit an int32 on the
 * VNNI path, 255 · 127 · 65536 < 2^31. The quantiser refuses wider layers and so does the loader. */
#define QLINEAR_MAX_IN 65536

/* One quantised linear layer (weights owned by the dt_quant that holds it). */
typedef struct {
    qformat fmt;
    qact_mode act;               /* Q8_0, Q4_0: how x is multiplied (see above) */
    int out, in;
    void *blocks;                /* Q8_0: block_q8_0 [out, nb]; Q4_0: block_q4_0 [out, nb] (NULL once packed) */
    void *packed;                /* Q8_0 / Q4_0 after qlinear_pack: the same weights interleaved 16 rows at a
                                    time (qpack.c), for the kernels that multiply 16 outputs at once */
    int8_t *q8;                  /* W8A8: [out, in] */
    float *scales;               /* W8A8: [out] */
    int32_t *row_sums;           /* W8A8: Σ_j q8[o, j], for the unsigned-times-signed VNNI product */
    float input_scale;           /* W8A8: static per-tensor activation scale; 0 = dynamic per token */
    float *smooth;               /* W8A8: [in] the activation is divided by it (NULL: none) */
} qlinear;

/* N rows of activations rounded to 8-bit blocks (QACT_INT8): row n's block b holds
 * x ≈ d[n·nb + b] · q[(n·nb + b)·32 + j]. d = absmax / 127 of the block (0 for an all-zero
 * block), q = x · (1 / d) rounded to nearest, ties to even (what the vector conversions do),
 * clamped to ±127; a short last block is padded with q = 0. */
typedef struct {
    int8_t *q;                   /* [N, nb · 32] */
    float *d;                    /* [N, nb] */
    float *de;                   /* [N, ⌈nb/2⌉ · 16]: d of blocks 2i, 2i + 1 as [d ×8 | d ×8] (0 past the
                                    last block), the lanes of the AVX-512 kernels' block pairs */
    int32_t *off;                /* [N, ⌈nb/2⌉ · 16]: −8 × the sum of each 4 consecutive q, in the same
                                    lanes: Q4_0's stored nibbles u = q_w + 8 multiply x as unsigned
                                    bytes, and Σ u·x + off is the product, exactly */
    int32_t *sum;                /* [N, nb]: Σ_j q of each block (the packed kernels' offset, qpack.c) */
    int nb;
} qact;

/* ---- formats (formats.c): quantise one row, and back ---- */
void q8_0_quantize_row(block_q8_0 *b, const float *w, int in);
void q8_0_dequantize_row(float *w, const block_q8_0 *b, int in);
void q4_0_quantize_row(block_q4_0 *b, const float *w, int in);
void q4_0_dequantize_row(float *w, const block_q4_0 *b, int in);
/* One row x [in] into the blocks of row n of a (the definition every path's quantize_act meets
 * bit for bit). */
void qact_quantize_row(const qact *a, int n, const float *x, int in);
/* Row n's de, off and sum of blocks b0.. (and the padding block past the last) from its d and q
 * (every quantize_act calls it once they are set; the x86 paths expand the full blocks themselves,
 * qact_expand.h, and call it for the rest). */
void qact_expand_row(const qact *a, int n, int b0);
static inline size_t qact_pairs(int nb) { return (size_t)(nb + 1) / 2; }
/* Scale = absmax(x_j / s_j) / 127 and q = round(x_j / s_j / scale) ∈ [−127, 127] (W8A8 weights and
 * dynamic activations; smooth s may be NULL); returns the scale (0 for an all-zero row). */
float i8_quantize_row(int8_t *q, const float *x, int n, const float *smooth);
/* Static scale: q = clamp(round(x / (scale · s_j)), ±127) with optional smoothing s (NULL: none). */
void i8_quantize_row_scaled(int8_t *q, const float *x, int n, float scale, const float *smooth);
void i8_row_sums(int32_t *sums, const int8_t *q, int out, int in);

/* How far ahead of the weights in use the vector kernels ask for more (every kernel that streams a
 * layer's blocks: row-major or packed, 8-bit or float activations), one request per cache line.
 * The hardware prefetcher alone fell behind: the packed kernels with a batch of rows (8 rows of
 * [2816, 1024] from memory: 0.17 ms without, 0.10 with 4 KiB; 1, 2 and 8 KiB alike, Zen 5), and the
 * row-major ones even for one row (AVX2 Q8_0 decoding from the L3, Emerald Rapids: 16–18 GB/s
 * without, 36–41 with). */
#define QWEIGHTS_AHEAD 4096
static inline __attribute__((always_inline)) void qweights_prefetch(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + QWEIGHTS_AHEAD + o, 0, 3);
}

/* ---- kernels, one set per path ----
 *   q8_0_dot / q4_0_dot: y[n·ldy + r] = Σ_b d_w[r, b] · d_x[n, b] · Σ_j q_w · q_x for the `rows`
 *            consecutive rows of W at w and the N rows of x (QACT_INT8). Each output is summed
 *            the same way whatever rows and N are, so a row's result does not depend on the batch
 *            it came in.
 *   quantize_act: rows [0, N) of x [N, in] into a (qact_quantize_row's values exactly);
 *   q8_0_matvec / q4_0_matvec: y[r] = Σ_j w[r, j] · x[j] for `rows` rows of W against one float row
 *            x [in] (QACT_FLOAT decoding: the weights widened in registers, never stored);
 *   i8_gemm: int8 rows xq [N, in] with per-row scales xs [N] against W8A8 → y [N, out] float:
 *            y[n, o] = xs[n] · ws[o] · Σ_j xq[n, j] · wq[o, j]  (x must lie in [−127, 127]);
 *   q8_0_dequantize / q4_0_dequantize: `rows` consecutive rows of a block-quantised W into floats
 *            w [rows, in] (QACT_FLOAT: qlinear.c multiplies those with linear_rows or sgemm): the
 *            values of q8_0_dequantize_row / q4_0_dequantize_row exactly.
 * The AVX2 / AVX-512 versions live in qkernels_avx2.c / qkernels_avx512.c and are called only when
 * the CPU has them; the reference versions (qkernels.c) are the definitions the tests hold them to. */
/* y for the groups [g0, g0 + groups) of 16 rows of a packed W (outputs at 16·g0 …, those past
 * `out` not written) against N rows of x, each output summed as qpack_dot_reference sums it. */
typedef void (*qpacked_dot_fn)(float *y, size_t ldy, qformat fmt, const void *packed, int g0, int groups, int out,
                               const qact *x, int N);

typedef struct {
    void (*q8_0_dot)(float *y, size_t ldy, const block_q8_0 *w, int rows, const qact *x, int N);
    void (*q4_0_dot)(float *y, size_t ldy, const block_q4_0 *w, int rows, const qact *x, int N);
    void (*quantize_act)(const qact *a, const float *x, int N, int in);
    void (*q8_0_matvec)(float *y, const block_q8_0 *w, int rows, const float *x, int in);
    void (*q4_0_matvec)(float *y, const block_q4_0 *w, int rows, const float *x, int in);
    void (*i8_gemm)(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws,
                    const int32_t *row_sums, int out, int in);
    void (*q8_0_dequantize)(float *w, const block_q8_0 *b, int rows, int in);
    void (*q4_0_dequantize)(float *w, const block_q4_0 *b, int rows, int in);
    /* the 16-row interleaved layout (qpack.c), NULL in a set without a kernel for it */
    qpacked_dot_fn packed_dot;
    /* the formats qlinear_pack repacks for it, (1 << QFMT_Q8_0) | (1 << QFMT_Q4_0) or fewer: the
     * ones its packed kernel decodes at least as fast as the row-major one (packed_dot serves
     * both, for a layer packed under another path) */
    unsigned packed_formats;
    const char *name;            /* e.g. "avx512-vnni" */
} qkernels;

/* The formats qlinear_pack repacks for set k on this CPU: k->packed_formats, and on the AVX2 set
 * Q8_0 too when the CPU is an Intel one (qkernels_avx2.c says why). */
unsigned qkernels_packed_formats(const qkernels *k);

/* AVX-512 comes in two sets: with VNNI (vpdpbusd) and without (vpmaddubsw, Skylake-X); both run
 * on a VNNI CPU, so the tests hold each to the reference there. */
extern const qkernels qkernels_portable, qkernels_avx2, qkernels_avx2_vnni, qkernels_avx512, qkernels_avx512_vnni;
/* The AVX-VNNI products (qkernels_avxvnni.c), qkernels_avx2_vnni's packed_dot and i8_gemm. */
void qpacked_dot_avxvnni(float *y, size_t ldy, qformat fmt, const void *packed, int g0, int groups, int out,
                         const qact *x, int N);
void i8_gemm_avxvnni(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws,
                     const int32_t *rs, int out, int in);
/* The set for a path (NULL when the CPU cannot run it; AVX-512: with VNNI when the CPU has it),
 * and the one dt_isa_active() picks. */
const qkernels *qkernels_for(dt_isa isa);
const qkernels *qkernels_active(void);
/* Every set this CPU runs (portable first), for the tests; returns how many (≤ QKERNELS_MAX_SETS). */
#define QKERNELS_MAX_SETS 5
int qkernels_all(const qkernels **sets);

/* Plain definitions in double precision, for the tests. */
void q8_0_dot_reference(float *y, size_t ldy, const block_q8_0 *w, int rows, const qact *x, int N);
void q4_0_dot_reference(float *y, size_t ldy, const block_q4_0 *w, int rows, const qact *x, int N);
void q8_0_matvec_reference(float *y, const block_q8_0 *w, int rows, const float *x, int in);
void q4_0_matvec_reference(float *y, const block_q4_0 *w, int rows, const float *x, int in);
void i8_gemm_reference(float *y, const int8_t *xq, const float *xs, int N, const int8_t *wq, const float *ws, int out,
                       int in);

/* ---- the 16-row interleaved layout (qpack.c) ---- */
#define QPACK_ROWS 16
static inline size_t qpack_groups(int out) { return (size_t)(out + QPACK_ROWS - 1) / QPACK_ROWS; }
size_t qpack_scales_bytes(int nb);
size_t qpack_group_bytes(qformat fmt, int in);
size_t qpack_bytes(qformat fmt, int out, int in);
/* blocks [out, nb] (Q8_0 or Q4_0) into dst [qpack_bytes]; and rows [o0, o0 + rows) back into
 * blocks [rows, nb], bit for bit. */
void qpack_pack(void *dst, qformat fmt, const void *blocks, int out, int in);
void qpack_unpack(void *blocks, qformat fmt, const void *packed, int o0, int rows, int in);
/* The definition the packed_dot kernels meet bit for bit (and the path of a set without one). */
void qpack_dot_reference(float *y, size_t ldy, qformat fmt, const void *packed, int g0, int groups, int out,
                         const qact *x, int N);

/* ---- the linear layer (qlinear.c) ----
 * y[N, out] = x[N, in] · Wᵀ through the layer's format; scratch must hold qlinear_scratch_bytes. */
size_t qlinear_scratch_bytes(int N, int in, int out);
void qlinear_forward(const qlinear *l, float *y, const float *x, int N, void *scratch);
/* ys[i][N, out_i] = x · W_iᵀ for layers that read the same x (q, k, v; gate, up): when every one
 * is packed with 8-bit activations, x is rounded once and all their groups of rows share one
 * parallel loop (one fork and join, one long stream through memory per thread); otherwise one
 * qlinear_forward each. The same bits as qlinear_forward layer by layer. */
#define QLINEAR_SHARED_MAX 4
void qlinear_forward_shared(const qlinear *const *ls, float *const *ys, int n_layers, const float *x, int N,
                            void *scratch);
/* Weight bytes read per product (what decoding streams). */
size_t qlinear_weight_bytes(const qlinear *l);
/* The same for a layer of format fmt and shape [out, in] not made yet (smooth: W8A8's smoothing). */
size_t qlinear_shape_bytes(qformat fmt, int out, int in, int smooth);
/* Quantise W [out, in] into a fresh layer of format fmt (W8A8: with smoothing s [in] or NULL,
 * which multiplies W's columns before quantisation, and a static input scale or 0 for dynamic). */
int qlinear_create(qlinear *l, qformat fmt, const float *w, int out, int in, const float *smooth, float input_scale,
                   dt_error *err);
/* A Q8_0 or Q4_0 layer [out, in] from ggml-layout blocks ([out, ⌈in/32⌉], copied), act QACT_INT8.
 * `what` names the blocks' source in messages (a file and tensor). Refuses a scale that is not
 * finite and, for Q8_0, a q of −128 (outside the symmetric range the integer products rely on). */
int qlinear_from_blocks(qlinear *l, qformat fmt, int out, int in, const void *blocks, const char *what, dt_error *err);
/* The first problem in a layer's blocks (what qlinear_from_blocks refuses), as a message in buf;
 * 0 when there is none. */
int qblocks_check(qformat fmt, const void *blocks, size_t n_blocks, char *buf, size_t len);
/* Q8_0 / Q4_0 with 8-bit activations, where the active kernels have a packed product: the blocks
 * into the interleaved layout (blocks freed; the same bytes of memory). Any other layer is left
 * as it is. Call once the layer's act is settled. */
int qlinear_pack(qlinear *l, dt_error *err);
/* Rows [o0, o0 + rows) of a Q8_0 / Q4_0 layer as ggml blocks [rows, nb], whichever way it is stored. */
void qlinear_blocks_copy(const qlinear *l, void *dst, int o0, int rows);
void qlinear_free(qlinear *l);

#endif
