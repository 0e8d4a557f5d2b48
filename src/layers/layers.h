/* layers.h — every layer of the model as a plain forward / backward pair (internal).
 *
 * Rules for every function here:
 *   - shapes are in the one-line comment; N is the number of rows (B·T), row-major storage;
 *   - backward functions ACCUMULATE (+=) into their gradient outputs, so that a tensor used
 *     twice (tied embeddings, a residual) sums its gradients; a NULL gradient output is skipped.
 *     Where the model's backward is the first writer of a buffer, the few passes it calls there
 *     can WRITE (=) instead, so that the buffer need not be zeroed first: linear_backward and
 *     the attention backwards on request (GRAD_SET_*, attention_shape.set_grads), swiglu_backward
 *     always (its outputs have no other writer);
 *   - no allocation; loops over rows are OpenMP-parallel; matrix products go through OpenBLAS.
 */
#ifndef DT_LAYERS_H
#define DT_LAYERS_H

#include <stddef.h>

/* Element count below which an elementwise pass runs on the calling thread: waking a thread
 * team costs microseconds, more than a decode step's norm or activation over a few thousand
 * floats (and far more when the cores are shared). */
#define LAYER_PARALLEL_MIN 32768
/* The passes a decoding step runs (norm, RoPE, SwiGLU, DIFF V2's combination; quant/qlinear.c's
 * rounding of activations) branch to a plain loop below it rather than write `parallel if (...)`:
 * a region whose if() is false still builds a team of one in libgomp (a malloc and a free, ~0.3 µs),
 * and a decode step ran ~100 of them. Passes only training runs, on whole batches, keep the if(). */

/* y[N, out] = x[N, in] · W[out, in]ᵀ  (PyTorch Linear layout, no bias) */
/* y[N, out] = x[N, in]·W[out, in]ᵀ: sgemv for one row, linear_rows (kernels.h) up to the kernel
 * path's linear_rows_most rows, sgemm beyond. */
#define LINEAR_SKINNY_BLOCK 32   /* outputs per thread task: 32 weight rows, 32·in floats */
void linear_forward(float *y, const float *x, const float *w, int N, int in, int out);
/* linear_backward's `set`: the outputs it overwrites (=) instead of accumulating into (+=) */
enum { GRAD_ADD = 0, GRAD_SET_DX = 1, GRAD_SET_DW = 2 };
/* dx[N, in] += dy[N, out] · W;  dw[out, in] += dyᵀ · x  (= for the outputs named in `set`) */
void linear_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int N, int in,
                     int out, int set);

/* out[N, C] = table[tokens[n], :] */
void embedding_forward(float *out, const int *tokens, const float *table, int N, int C);
/* dtable[tokens[n], :] += dout[n, :]  (serial over n: rows may repeat) */
void embedding_backward(float *dtable, const float *dout, const int *tokens, int N, int C);

/* out[N, C] = x / sqrt(mean(x²) + eps) · w   (w may be NULL: no weight); rstd[N] saved */
void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
/* sum[N, C] = x + delta, then out = RMSNorm(sum) with rstd[N] saved: a residual add fused
 * with the norm that follows it (sum may alias x) */
void residual_rmsnorm_forward(float *sum, float *out, float *rstd, const float *x, const float *delta,
                              const float *w, int N, int C, float eps);
/* dx[N, C] += ...; dw[C] += ... (dw may be NULL, and must be NULL when w is NULL) */
void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *rstd, const float *w,
                      int N, int C);

/* Rotary position embedding, Llama "rotate_half" convention, in place on x[B, T, nh, hd]:
 * row t has position pos0 + t; the angle of channel pair i is pos·inv_freq[i] in float32 as HF
 * computes it (inv_freq [hd/2] from dt_rope_inv_freq: rope_theta and rope_scaling). sign = +1 applies the rotation (forward); sign = −1 applies its inverse, which is
 * the backward pass (the rotation is orthogonal). */
void rope_apply(float *x, int B, int T, int nh, int hd, int pos0, const float *inv_freq, int sign);
/* The same for positions 0..T−1 from tables cos, sin [T, hd/2] of cos / sin(t·inv_freq[i])
 * (rope_tables); sign −1 takes the negated sines, nsin (the backward). Bit for bit rope_apply. */
void rope_apply_table(float *x, int B, int T, int nh, int hd, const float *cos, const float *sin, int sign);
/* cos, sin [T, hd/2] for positions 0..T−1, in the float steps rope_apply takes */
void rope_tables(float *cos, float *sin, int T, int hd, const float *inv_freq);

/* h[N, F] = silu(gate) · up */
void swiglu_forward(float *h, const float *gate, const float *up, int N, int F);
/* dgate[N, F] = dh·up·silu'(gate), dup[N, F] = dh·silu(gate): written, not accumulated (either
 * may be NULL) */
void swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate, const float *up, int N, int F);

/* Mean softmax cross-entropy over rows whose target is >= 0 (target −1 = ignore).
 * logits[N, V]; returns the mean (0 when no row counts); *count gets the number of rows. */
float crossentropy_forward(const float *logits, const int *targets, int N, int V, int *count);
/* dlogits[N, V] = (softmax(logits) − onehot(target)) · dloss / count, 0 for ignored rows
 * (written, not accumulated: dlogits may alias logits). */
void crossentropy_backward(float *dlogits, const float *logits, const int *targets, int N, int V, int count,
                           float dloss);

/* ---- attention (attention.c): the simple reference kernel that materialises the maps ---- */

typedef struct {
    int B, T, H, KV, hd;         /* q [B, T, H, hd]; k, v [B, T, KV, hd]; query head i reads kv head i/(H/KV) */
    int diff;                    /* 0: softmax attention; 1: differential attention */
    float lambda;                /* DIFF: λ of this layer */
    float lambda_init;           /* DIFF: λinit of this layer, the (1 − λinit) output scale */
    float eps;                   /* DIFF: RMSNorm eps of the per-head norm */
    const float *subln;          /* DIFF: [2·hd] norm weight or NULL */
    /* Ablations (both kernels): */
    const float *alibi;          /* [H] ALiBi slope m_i of every query head, or NULL: score(t, s) −= m_i·(t − s) */
    int softmax1;                /* softmax with +1 in the denominator: a virtual key of score 0 and value 0 */
    int no_norm;                 /* DIFF: out_j = (1 − λinit)·u_j, no per-head RMSNorm (rstd is set to 1) */
    /* Reference kernel only, for the analyses: */
    int logit_bits;              /* > 0: fake-quantise the scaled scores to this many bits before the
                                    softmax (symmetric, absmax scale); the backward treats it as identity */
    int logit_per_row;           /* the absmax is taken per query row (1) or per head map (0) */
    float *logits;               /* optional [B, H, T, T]: receives the scaled causal scores q·kᵀ·scale */
    /* Backward: write dq, dk, dv (=) instead of adding into them (+=), so that the caller need
     * not zero them; dλ and dsubln are still added into. */
    int set_grads;
    /* Fused kernels, DIFF: take the online-softmax path (which saves o12) at every T, not only
     * above the row-block path's limit (flash_attention.c); for tests and measurements. */
    int diff_online;
    /* Fused kernels only, for profiling: when set, *busy += the seconds each thread spent in its
     * tasks, summed over threads (threads × wall − that is time threads waited). */
    double *busy;
} attention_shape;

/* out [B, T, H·hd]:
 *   baseline: head i → softmax(q_i k_iᵀ/√hd + causal) v_i, heads concatenated;
 *   DIFF: differential head j < H/2 → (1 − λinit)·RMSNorm((A_j − λ A_{j+H/2}) [v_{j/g}, v_{(j+H/2)/g}]) · subln.
 * Saves into the caller's buffers:
 *   att [B, H, T, T]: softmax probabilities (upper triangle zero);
 *   DIFF only: pre [B, T, H/2, 2·hd] the pre-norm head outputs, rstd [B, T, H/2]. */
void attention_forward(float *out, float *att, float *pre, float *rstd, const float *q, const float *k,
                       const float *v, const attention_shape *s);
/* dq [B, T, H, hd], dk, dv [B, T, KV, hd] accumulated (written with s->set_grads); DIFF: *dlambda += d(loss)/dλ and
 * dsubln[2·hd] += (may be NULL). scratch: [B, H, T, T] floats. dout is not modified. */
void attention_backward(float *dq, float *dk, float *dv, float *dlambda, float *dsubln, const float *dout,
                        const float *att, const float *pre, const float *rstd, const float *q, const float *k,
                        const float *v, float *scratch, const attention_shape *s);


/* ALiBi slopes of Press et al. for n heads: 2^(−8k/n), k = 1..n, for n a power of two; otherwise
 * those of the power of two p below n, then every other slope of 2p. out[n]. */
void alibi_slopes(float *out, int n);
/* How query heads pair into output heads (the numbers of dt_arch, for which they are the
 * pairing): HEADS_UNPAIRED (llama), HEADS_PAIR_HALF (j with j + H/2: DIFF, and DIFF V2 with
 * v2_pairs "j,j+h"), HEADS_PAIR_ADJACENT (2j with 2j + 1: DIFF V2). config_head_pairing (internal.h)
 * gives a config's. */
enum { HEADS_UNPAIRED = 0, HEADS_PAIR_HALF = 1, HEADS_PAIR_ADJACENT = 2 };
/* The slope of every query head [H] for a pairing: slopes go to the output heads, and the query
 * heads of an output head share its slope. */
void alibi_query_slopes(float *out, int pairing, int H);

/* ---- diff_v2.c: DIFF V2's combination of its 2h softmax heads into h output heads ---- */

/* lam[N, h] = sigmoid(z) (z, lam may alias); out[N, h·hd]: out_j = a_{2j} − lam_j·a_{2j+1},
 * a [N, 2h·hd] the attention output of the 2h query heads */
void diffv2_combine_forward(float *out, float *lam, const float *z, const float *a, int N, int h, int hd);
/* da[N, 2h·hd] += ..., dz[N, h] += d(loss)/dz (through the sigmoid) */
void diffv2_combine_backward(float *da, float *dz, const float *dout, const float *a, const float *lam, int N, int h,
                             int hd);
/* The same for every variant: `pairs` and `lambda` are the numbers of dt_v2_pairs and dt_v2_lambda
 * (difftrans.h). lam = λ(z): sigmoid(z), 1 (z unread, may be NULL) or z itself; out_j = a_p −
 * lam_j·a_q with (p, q) = (2j, 2j + 1), or (j, j + h) for DIFFV2_PAIRS_CROSS; the backward's dz is
 * through λ(z) (unread with DIFFV2_LAMBDA_NONE, may be NULL then). */
enum { DIFFV2_PAIRS_GROUP = 0, DIFFV2_PAIRS_CROSS = 1 };
enum { DIFFV2_LAMBDA_SIGMOID = 0, DIFFV2_LAMBDA_NONE = 1, DIFFV2_LAMBDA_LINEAR = 2 };
void diffv2_combine_forward_with(float *out, float *lam, const float *z, const float *a, int N, int h, int hd,
                                 int pairs, int lambda);
void diffv2_combine_backward_with(float *da, float *dz, const float *dout, const float *a, const float *lam, int N,
                                  int h, int hd, int pairs, int lambda);

/* ---- flash_attention.c: the fused kernels (FlashAttention-style online softmax, no [T, T]
 * buffers), tested against the reference kernel above ---- */

/* Floats of scratch the fused kernels need for a shape (s->T the longest sequence they will see)
 * when run on at most `threads` OpenMP threads. */
size_t flash_attention_scratch_floats(const attention_shape *s, int threads);

/* Same out / pre / rstd as attention_forward, but instead of the maps it saves per query head
 * and row the log-sum-exp of the scaled scores, lse [B, H, T]; DIFF on the online path also saves
 * the two halves of every differential head, o1 = A_j·V_j and o2 = A_{j+H/2}·V_j, into o12
 * [B, T, H/2, 2, 2·hd] (the backward needs them: rowsum(dA ⊙ A) = dU·o and dλ = −Σ dU·o2). o12
 * is NULL for the baseline, and neither written nor read (it may be NULL) when
 * flash_attention_uses_o12(s) is 0: DIFF on the row-block path (T ≤ 1024, not s->diff_online). */
int flash_attention_uses_o12(const attention_shape *s);
void flash_attention_forward(float *out, float *lse, float *o12, float *pre, float *rstd, const float *q,
                             const float *k, const float *v, float *scratch, const attention_shape *s);
/* Gradients as attention_backward (accumulated into dq, dk, dv — or written, s->set_grads — and
 * into *dlambda, dsubln), recomputing
 * the maps tile by tile from q, k and lse. `out` is the forward output (the baseline needs
 * rowsum(dO ⊙ O)). */
void flash_attention_backward(float *dq, float *dk, float *dv, float *dlambda, float *dsubln, const float *dout,
                              const float *out, const float *lse, const float *o12, const float *pre,
                              const float *rstd, const float *q, const float *k, const float *v, float *scratch,
                              const attention_shape *s);

#endif
