/* flash_attention.c — fused causal attention (softmax and differential) with FlashAttention-style
 * online softmax, forward and backward, never forming a [T, T] map.
 *
 * Same results as the reference kernel in attention.c up to float rounding (layers.h has the
 * contract; tests/test_flash_attention.c the comparison). Memory: besides the caller's tensors,
 * only `scratch`, which holds per thread a few BK × BQ and BQ × hd tiles
 * (flash_attention_scratch_floats); nothing depends on T, except the backward's private dK/dV
 * rows when a batch row has fewer ownership groups than threads (see the parallel schemes).
 *
 * Ablations (attention_shape): ALiBi biases a raw score tile in place before its softmax
 * (alibi_tile), so the online softmax and the probabilities of the backward see biased scores
 * with scale 1; softmax1 is a virtual key of score 0 and value 0, present from the start as the
 * initial running max 0 and sum 1 (it enters lse, so the backward needs nothing else: its dP is
 * 0); without the per-head norm the DIFF output is α·u and dU = α·dy.
 *
 * Tiles. Queries are cut into aligned blocks of BQ rows, keys into aligned tiles of BK rows
 * (BK divides BQ; the last block/tile may be short). Query block [q0, q0 + nq) visits the key
 * tiles that start before q0 + nq, in increasing order; only tiles reaching past q0 (the last
 * BQ/BK of them) need the causal mask, every later tile is skipped. Key tile 0 is visible to
 * every query, so after the first tile every running max is finite and a row that a later tile
 * masks completely just gets weight 0 and correction 1.
 * DIFF row-block path (T ≤ DIFF_ROWS_MAX_T = 1024, flash_attention_tiles.h; s->diff_online turns
 * it off). The online softmax cannot combine A1 − λ·A2 before the product with V_j, since each
 * map's normaliser is known only at the end, so the online path multiplies both maps by the
 * 2·hd-wide V_j and saves both results (o12) for the backward: 1.5× the baseline's forward
 * products. The row-block path first computes a query block's scores of BOTH maps against all
 * its keys ([keys, BQ] per map, kept in scratch), takes each map's exact max and sum (hence
 * lse), forms P = A1 − λ·A2 and does ONE product P·V_j (the baseline's work). Its backward has
 * no o12 for δ_m = dU·o_m = rowsum(A_m ⊙ dP): a first pass over the query block's keys computes
 * P1, P2 and dP = dU·V_jᵀ (which the online backward computes anyway), keeps them in [keys, BQ]
 * row blocks and sums the δs (and adds dV, while the maps are in L1); the second pass forms dS1,
 * dS2 from the kept tiles for dQ and dK: no product more than the online backward. Scratch
 * grows by 3·T·BQ floats per thread (1.2 MB at T = 1024); above the limit the online path, whose
 * scratch does not depend on T, runs instead (at T = 2048 the row-block backward was measured
 * 10% slower than the online one, the forward 27% faster).
 * Scores are computed TRANSPOSED, St[key c][query r] = k_c · q_r (row stride BQ), so that
 *   - the softmax statistics of a query (running max, sum, lse, δ) are per COLUMN of St: the
 *     online softmax and the softmax backward vectorise across the queries of a vector, with
 *     no horizontal reductions;
 *   - the query side is transposed once per query block (q, dO or dU) and reused over all its
 *     key tiles, while K and V tiles are only copied row by row (pack_rows: their rows are
 *     strided by KV·hd floats, which maps a tile onto a few L1 sets; packed, they stay in L1),
 *     and the next key tile is prefetched while the current one is computed.
 * Every product is one call of mm(), a register-blocked broadcast-FMA micro-kernel of MR rows ×
 * 2 vectors (6 × 16 on AVX2, 12 × 32 on AVX-512, 6 × 8 with SSE2), C (+)= α·A·B with B row-major
 * and A addressed through two strides, so that A or Aᵀ is read without copying it (a broadcast
 * scalar costs the same from any address). BQ = 96 and BK = 48 are multiples of every path's MR
 * and vector width, so full tiles never take the slower edge code. On one core of an AMD EPYC
 * the AVX2 mm() ran at 75–90 GFLOP/s on these tiles (OpenBLAS sgemm: ~62 on 64³ tiles, ~88 on
 * 512³); on one core of an Intel Xeon (Emerald Rapids) the AVX-512 kernels ran config A's attention at
 * ~76 GFLOP/s, of which mm() ~130 by perf's share of the time (sgemm: ~150 on 2048³) — once its broadcasts
 * were single loads (simd.h's vbc) and A's strides constants (mm's dispatch). On the tiles that
 * straddle the diagonal, mm() also skips the MR-row blocks' masked parts (CZ_* in the body), so the
 * causal half is all that is computed, up to blocks.
 *
 * exp: vexp() of simd.h, a vector exp within ~1 ulp of expf (measured: relative error ≤ 7.6e-8
 * against exact exp over [−87.3, 1]); inputs below ln(FLT_MIN) give 0, where expf gives a
 * subnormal < 1.2e-38 that no sum here can see. The probabilities of the backward are
 * recomputed as exp(s·scale − lse).
 *
 * Kernel paths. The kernels are written once, in flash_attention_body.h, and compiled per
 * instruction set (flash_attention_portable.c, _avx2.c, _avx512.c); the functions below run the
 * path kernels_active() chose (layers/kernels.h). Every path computes the same sums in the same
 * tile order; they differ in rounding only (FMA or not, the order of in-vector reductions).
 *
 * Parallel schemes (OpenMP; each thread uses its own slice of scratch, picked by thread number):
 *   - forward: one task per (b, head, query block) — for DIFF, per (b, differential head, query
 *     block), so that both maps of the head share the pass over K/V. Tasks write disjoint rows
 *     of out / lse / o12 / pre / rstd: nothing is shared. Dynamic schedule, longest tasks (the
 *     last query blocks, which see the most keys) first.
 *   - backward: one task per (b, ownership group). A group is a set of query heads together with
 *     EVERY kv head they read, closed so that no other group touches those kv heads:
 *       baseline: kv head g and its G = H/KV query heads;
 *       DIFF with KV even: kv heads g and g + KV/2 and the differential heads j ∈ [gG, (g+1)G)
 *         (their query heads j and j + H/2 read exactly kv heads g and g + KV/2, and V_j is made
 *         of those two heads);
 *       DIFF with KV odd: everything of batch b (one group).
 *     A task therefore owns dq of its query heads and dk, dv of its kv heads (rows of batch b):
 *     it is their only writer and adds into them in place, with no atomics or locks. Within a
 *     task, a query block's dq is summed over its key tiles in scratch and added to dq once.
 *     With set_grads a task zeroes its own dk, dv rows first and writes dq instead of adding,
 *     so that the model's backward need not zero the three buffers in a pass of its own.
 *     dλ and dsubln are sums over all tasks: each thread adds into its own partial in scratch,
 *     and the partials are added up in thread order after the parallel loop (static schedule:
 *     deterministic for a given thread count). Tasks are all the same size.
 *     With fewer (b, group) tasks than threads (B·groups < threads: B = 1 with few kv heads), each
 *     task's query blocks are split into P = min(threads ÷ tasks, query blocks) parts, dealt out
 *     in rounds of P taken in alternating directions (0..P−1, then P−1..0, ...), which balances
 *     the parts since block qt visits qt + 1 key tiles' worth of keys. A part owns dq of its
 *     query blocks; its dk, dv go into a private zeroed slot of the group's columns
 *     ([2, T, width], after the threads' tiles in scratch), and after the parallel loop the
 *     slots of each group are added into dk, dv row by row in part order (deterministic for a
 *     given thread count). Only then does scratch grow with T: by threads × 2·T·width floats,
 *     allocated when threads > groups (B = 1 would need them).
 * The kernels run on omp_get_max_threads() threads (they must not be called from inside a
 * parallel region), so scratch must be sized for at least that many.
 */
#include "layers/flash_attention_tiles.h"
#include "layers/kernels.h"

size_t flash_attention_scratch_floats(const attention_shape *s, int threads) {
    const size_t n = (size_t)(threads > 0 ? threads : 1);
    /* a thread's slice: the largest for any T up to s->T — DIFF's row-block path holds 3·T·BQ
     * floats more, up to its limit, than the online path above it */
    attention_shape widest = *s;
    if (widest.T > DIFF_ROWS_MAX_T) widest.T = DIFF_ROWS_MAX_T;
    /* one private dK/dV slot per thread when a batch row has fewer ownership groups than threads */
    return n * per_thread_floats(&widest) + (threads > bwd_groups(s) ? n * bwd_slot_floats(s) : 0);
}

int flash_attention_uses_o12(const attention_shape *s) { return s->diff && !diff_rows(s); }

void flash_attention_forward(float *out, float *lse, float *o12, float *pre, float *rstd, const float *q,
                             const float *k, const float *v, float *scratch, const attention_shape *s) {
    kernels_active()->attention_forward(out, lse, o12, pre, rstd, q, k, v, scratch, s);
}

void flash_attention_backward(float *dq, float *dk, float *dv, float *dlambda, float *dsubln, const float *dout,
                              const float *out, const float *lse, const float *o12, const float *pre,
                              const float *rstd, const float *q, const float *k, const float *v, float *scratch,
                              const attention_shape *s) {
    kernels_active()->attention_backward(dq, dk, dv, dlambda, dsubln, dout, out, lse, o12, pre, rstd, q, k, v,
                                         scratch, s);
}
