/* attention.c — the reference attention kernel: causal softmax attention and differential
 * attention, materialising the [T, T] maps so that they can be inspected and so that the fused
 * kernel has something obviously correct to be tested against.
 *
 * Layout: q [B, T, H, hd], k and v [B, T, KV, hd]; head i of batch b is the strided [T, hd]
 * matrix at q + b·T·H·hd + i·hd with leading dimension H·hd, so every product below is one
 * cblas_sgemm on the original tensors, with no per-head copies. Query head i reads kv head
 * i / (H/KV) (grouped-query attention).
 *
 * DIFF: H query heads form Hd = H/2 differential heads; head j < Hd subtracts map j + Hd:
 *   D_j = A_j − λ·A_{j+Hd},  V_j = [v_{kv(j)}, v_{kv(j+Hd)}]  (2·hd wide),
 *   u_j = D_j·V_j,  out_j = (1 − λinit)·RMSNorm(u_j)·subln.
 *
 * sgemm is called inside OpenMP loops: the OpenMP build of OpenBLAS sees it is inside a parallel
 * region and runs each small product on the calling thread.
 */
#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <string.h>
#include <stddef.h>

#include "layers/layers.h"

/* 1/√hd as Python's hd**-0.5 rounds it to float */
static float attn_scale(int hd) { return (float)(1.0 / sqrt((double)hd)); }

/* Symmetric fake quantisation of x[0..n) to `bits` bits with step absmax / (2^(bits−1) − 1). */
static void fake_quantize(float *x, int n, float absmax, int bits) {
    if (absmax <= 0.0f) return;
    const float levels = (float)((1 << (bits - 1)) - 1), step = absmax / levels, inv = levels / absmax;
    for (int i = 0; i < n; i++) x[i] = rintf(x[i] * inv) * step;
}

/* For the attention-logit quantisation analysis: the causal scores of one map, fake-quantised to
 * s->logit_bits bits with an absmax scale per query row or per head map (s->logit_per_row). */
static void quantize_scores(float *a, int T, const attention_shape *s) {
    float map_max = 0.0f;
    for (int t = 0; t < T; t++)
        for (int c = 0; c <= t; c++) map_max = fmaxf(map_max, fabsf(a[(size_t)t * T + c]));
    for (int t = 0; t < T; t++) {
        float *row = a + (size_t)t * T, m = map_max;
        if (s->logit_per_row) {
            m = 0.0f;
            for (int c = 0; c <= t; c++) m = fmaxf(m, fabsf(row[c]));
        }
        fake_quantize(row, t + 1, m, s->logit_bits);
    }
}

/* att_bi[T, T] = causal softmax(q_i·k_gᵀ·scale − slope·(t − c)) of query head i; q_i, k_g are
 * strided [T, hd] heads. The upper triangle is written as exact zeros: the saved map is the real
 * probability matrix, and the backward products can then run over the full square. With
 * s->logits the scaled scores q·kᵀ·scale are copied to `logits`, before ALiBi's bias (a fixed
 * function of the distance, not an activation: the outlier statistics would count it) and before
 * s->logit_bits' quantisation. With s->softmax1 the row is normalised by 1 + Σ exp: a virtual key
 * of score 0. */
static void causal_softmax_scores(float *a, float *logits, int i, const float *qi, int ldq, const float *kg, int ldk,
                                  int T, int hd, float scale, const attention_shape *s) {
    const float slope = s->alibi ? s->alibi[i] : 0.0f;
    /* scores without the scale, which is applied below as HF does: (q·kᵀ)·scale */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, qi, ldq, kg, ldk, 0.0f, a, T);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < T; c++) {
            const float scaled = c <= t ? a[(size_t)t * T + c] * scale : 0.0f;
            if (logits) logits[(size_t)t * T + c] = scaled;
            if (c <= t) a[(size_t)t * T + c] = scaled - slope * (float)(t - c);
        }
    if (s->logit_bits > 0) quantize_scores(a, T, s);
    for (int t = 0; t < T; t++) {
        float *row = a + (size_t)t * T;
        float mx = s->softmax1 ? 0.0f : -INFINITY;
        for (int c = 0; c <= t; c++) mx = row[c] > mx ? row[c] : mx;
        float sum = s->softmax1 ? expf(-mx) : 0.0f;
        for (int c = 0; c <= t; c++) {
            row[c] = expf(row[c] - mx);
            sum += row[c];
        }
        for (int c = 0; c <= t; c++) row[c] /= sum;
        for (int c = t + 1; c < T; c++) row[c] = 0.0f;
    }
}

void attention_forward(float *out, float *att, float *pre, float *rstd, const float *q, const float *k,
                       const float *v, const attention_shape *s) {
    const int B = s->B, T = s->T, H = s->H, KV = s->KV, hd = s->hd;
    const int G = H / KV;              /* query heads per kv head */
    const int ldq = H * hd, ldk = KV * hd;
    const float scale = attn_scale(hd);
    assert(H % KV == 0);

    if (!s->diff) {
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int i = 0; i < H; i++) {
                const float *qi = q + (size_t)b * T * ldq + (size_t)i * hd;
                const float *kg = k + (size_t)b * T * ldk + (size_t)(i / G) * hd;
                const float *vg = v + (size_t)b * T * ldk + (size_t)(i / G) * hd;
                float *a = att + ((size_t)b * H + i) * T * T;
                causal_softmax_scores(a, s->logits ? s->logits + ((size_t)b * H + i) * T * T : NULL, i, qi, ldq, kg,
                                      ldk, T, hd, scale, s);
                /* out_i[T, hd] = A_i[T, T] · v_g[T, hd], written straight into its columns of out */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, a, T, vg, ldk, 0.0f,
                            out + (size_t)b * T * ldq + (size_t)i * hd, ldq);
            }
        }
        return;
    }

    assert(H % 2 == 0);
    const int Hd = H / 2, w2 = 2 * hd; /* differential heads, and their value width */
    const float lambda = s->lambda, alpha = 1.0f - s->lambda_init;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < Hd; j++) {
            float *a1 = att + ((size_t)b * H + j) * T * T;
            float *a2 = att + ((size_t)b * H + j + Hd) * T * T;
            causal_softmax_scores(a1, s->logits ? s->logits + ((size_t)b * H + j) * T * T : NULL, j,
                                  q + (size_t)b * T * ldq + (size_t)j * hd, ldq,
                                  k + (size_t)b * T * ldk + (size_t)(j / G) * hd, ldk, T, hd, scale, s);
            causal_softmax_scores(a2, s->logits ? s->logits + ((size_t)b * H + j + Hd) * T * T : NULL, j + Hd,
                                  q + (size_t)b * T * ldq + (size_t)(j + Hd) * hd, ldq,
                                  k + (size_t)b * T * ldk + (size_t)((j + Hd) / G) * hd, ldk, T, hd, scale, s);
            /* u_j = A_j·V_j − λ·A_{j+Hd}·V_j, one half of V_j (one kv head) at a time. Two products
             * instead of forming D_j keeps the forward free of a [T, T] temporary and matches
             * HF's order (out1 − λ·out2). pre [B, T, Hd, 2hd] has row stride Hd·2hd = H·hd. */
            float *u = pre + (size_t)b * T * ldq + (size_t)j * w2;
            for (int half = 0; half < 2; half++) {
                const float *vg = v + (size_t)b * T * ldk + (size_t)((j + half * Hd) / G) * hd;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, a1, T, vg, ldk, 0.0f,
                            u + half * hd, ldq);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, -lambda, a2, T, vg, ldk, 1.0f,
                            u + half * hd, ldq);
            }
            /* per-head RMSNorm over the 2hd channels, then the fixed (1 − λinit) scale */
            for (int t = 0; t < T; t++) {
                const float *ut = u + (size_t)t * ldq;
                float *ot = out + ((size_t)b * T + t) * ldq + (size_t)j * w2;
                if (s->no_norm) { /* the ablation: the scale alone */
                    rstd[((size_t)b * T + t) * Hd + j] = 1.0f;
                    for (int c = 0; c < w2; c++) ot[c] = alpha * ut[c];
                    continue;
                }
                double ss = 0.0;
                for (int c = 0; c < w2; c++) ss += (double)ut[c] * ut[c];
                float r = 1.0f / sqrtf((float)(ss / w2) + s->eps);
                rstd[((size_t)b * T + t) * Hd + j] = r;
                for (int c = 0; c < w2; c++) {
                    float y = ut[c] * r;
                    if (s->subln) y *= s->subln[c];
                    ot[c] = alpha * y;
                }
            }
        }
    }
}

/* ds[T, T] = mult · P ⊙ (dp − rowsum(dp ⊙ P)): the softmax Jacobian applied to dp, with an
 * optional factor (DIFF's second map receives −λ·dD). Row sums run over the causal part only;
 * P is zero above the diagonal, so ds is too. ds may equal dp (each element is read before it
 * is written, and the row sum is taken first). */
static void softmax_backward(float *ds, const float *dp, const float *p, int T, float mult) {
    for (int t = 0; t < T; t++) {
        const float *pr = p + (size_t)t * T, *dpr = dp + (size_t)t * T;
        float *dsr = ds + (size_t)t * T;
        float dot = 0.0f;
        for (int s = 0; s <= t; s++) dot += dpr[s] * pr[s];
        for (int s = 0; s <= t; s++) dsr[s] = mult * pr[s] * (dpr[s] - dot);
        for (int s = t + 1; s < T; s++) dsr[s] = 0.0f;
    }
}

/* DIFF: columns [c0, c0 + w) of dU_j[T, 2hd] = d(loss)/d(u_j) for batch b, into dst (leading
 * dimension w). With y_c = α·w_c·u_c·r and r = (Σu²/2hd + eps)^(-1/2):
 *   dU_c = α·r·(w_c·dy_c − r²·u_c·m/2hd),  m = Σ_c w_c·dy_c·u_c;
 * without the norm (s->no_norm) y = α·u and dU = α·dy.
 * Built a column block at a time because the contract gives no [T, 2hd] buffer: a block of width
 * w ≤ T fits in one [T, T] slice of scratch. */
static void diff_du_block(float *dst, int b, int j, int c0, int w, const float *dout, const float *pre,
                          const float *rstd, const attention_shape *s) {
    const int T = s->T, hd = s->hd, H = s->H, Hd = H / 2, w2 = 2 * hd, ld = H * hd;
    const float alpha = 1.0f - s->lambda_init;
    for (int t = 0; t < T; t++) {
        const float *ut = pre + ((size_t)b * T + t) * ld + (size_t)j * w2;
        const float *dy = dout + ((size_t)b * T + t) * ld + (size_t)j * w2;
        if (s->no_norm) {
            for (int c = c0; c < c0 + w; c++) dst[(size_t)t * w + (c - c0)] = alpha * dy[c];
            continue;
        }
        float r = rstd[((size_t)b * T + t) * Hd + j];
        float m = 0.0f;
        for (int c = 0; c < w2; c++) m += (s->subln ? s->subln[c] : 1.0f) * dy[c] * ut[c];
        float kk = r * r * m / (float)w2;
        for (int c = c0; c < c0 + w; c++)
            dst[(size_t)t * w + (c - c0)] = alpha * r * ((s->subln ? s->subln[c] : 1.0f) * dy[c] - kk * ut[c]);
    }
}

void attention_backward(float *dq, float *dk, float *dv, float *dlambda, float *dsubln, const float *dout,
                        const float *att, const float *pre, const float *rstd, const float *q, const float *k,
                        const float *v, float *scratch, const attention_shape *s) {
    const int B = s->B, T = s->T, H = s->H, KV = s->KV, hd = s->hd;
    const int G = H / KV;
    const int ldq = H * hd, ldk = KV * hd;
    const float scale = attn_scale(hd);
    assert(H % KV == 0);
    /* Races: the G query heads of one kv head all add into that head's dk and dv, so every loop
     * that writes dk or dv runs in parallel over (b, kv head) and walks its query heads in turn. */
    if (s->set_grads) { /* written, not accumulated: the sums below start from zero */
        if (dq) memset(dq, 0, sizeof(float) * (size_t)B * T * ldq);
        if (dk) memset(dk, 0, sizeof(float) * (size_t)B * T * ldk);
        if (dv) memset(dv, 0, sizeof(float) * (size_t)B * T * ldk);
    }

    if (!s->diff) {
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int g = 0; g < KV; g++) {
                const float *kg = k + (size_t)b * T * ldk + (size_t)g * hd;
                const float *vg = v + (size_t)b * T * ldk + (size_t)g * hd;
                float *dkg = dk ? dk + (size_t)b * T * ldk + (size_t)g * hd : NULL;
                float *dvg = dv ? dv + (size_t)b * T * ldk + (size_t)g * hd : NULL;
                for (int i = g * G; i < (g + 1) * G; i++) {
                    const float *p = att + ((size_t)b * H + i) * T * T;
                    const float *qi = q + (size_t)b * T * ldq + (size_t)i * hd;
                    const float *doi = dout + (size_t)b * T * ldq + (size_t)i * hd;
                    float *ds = scratch + ((size_t)b * H + i) * T * T;
                    /* dP[T, T] = dO_i · v_gᵀ */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, doi, ldq, vg, ldk, 0.0f,
                                ds, T);
                    /* dv_g += Pᵀ · dO_i */
                    if (dvg)
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, doi, ldq, 1.0f,
                                    dvg, ldk);
                    softmax_backward(ds, ds, p, T, 1.0f);
                    /* S = scale·q·kᵀ: dq_i += scale·dS·k_g, dk_g += scale·dSᵀ·q_i */
                    if (dq)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale, ds, T, kg, ldk,
                                    1.0f, dq + (size_t)b * T * ldq + (size_t)i * hd, ldq);
                    if (dkg)
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale, ds, T, qi, ldq, 1.0f,
                                    dkg, ldk);
                }
            }
        }
        return;
    }

    assert(H % 2 == 0);
    const int Hd = H / 2, w2 = 2 * hd;
    const float lambda = s->lambda;
    const int cw = hd < T ? hd : T; /* column block of dU that fits a [T, T] scratch slice */

    /* 1) dv. Query head i is half i / Hd of differential head j = i % Hd, and that half of V_j is
     *    kv head i / G: dv_{i/G} += D_jᵀ·dU_j[:, half] = A_jᵀ·dU − λ·A_{j+Hd}ᵀ·dU. The dU block is
     *    built in scratch slice i, which belongs to exactly one (b, kv head) task. */
    if (dv) {
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int g = 0; g < KV; g++) {
                float *dvg = dv + (size_t)b * T * ldk + (size_t)g * hd;
                for (int i = g * G; i < (g + 1) * G; i++) {
                    int j = i % Hd, half = i / Hd;
                    const float *a1 = att + ((size_t)b * H + j) * T * T;
                    const float *a2 = att + ((size_t)b * H + j + Hd) * T * T;
                    float *tmp = scratch + ((size_t)b * H + i) * T * T;
                    for (int c0 = 0; c0 < hd; c0 += cw) {
                        int w = hd - c0 < cw ? hd - c0 : cw;
                        diff_du_block(tmp, b, j, half * hd + c0, w, dout, pre, rstd, s);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, w, T, 1.0f, a1, T, tmp, w, 1.0f,
                                    dvg + c0, ldk);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, w, T, -lambda, a2, T, tmp, w, 1.0f,
                                    dvg + c0, ldk);
                    }
                }
            }
        }
    }

    /* 2) dD_j = dU_j·V_jᵀ into slice j (dU blocks staged in slice j + Hd), then dλ, then the two
     *    softmax backwards: dA_j = dD, dA_{j+Hd} = −λ·dD. Slices j and j + Hd belong to this task. */
    double dl = 0.0;
#pragma omp parallel for collapse(2) reduction(+ : dl)
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < Hd; j++) {
            const float *a1 = att + ((size_t)b * H + j) * T * T;
            const float *a2 = att + ((size_t)b * H + j + Hd) * T * T;
            float *dd = scratch + ((size_t)b * H + j) * T * T;
            float *tmp = scratch + ((size_t)b * H + j + Hd) * T * T;
            float beta = 0.0f; /* the first block overwrites, the rest accumulate */
            for (int half = 0; half < 2; half++) {
                const float *vg = v + (size_t)b * T * ldk + (size_t)((j + half * Hd) / G) * hd;
                for (int c0 = 0; c0 < hd; c0 += cw) {
                    int w = hd - c0 < cw ? hd - c0 : cw;
                    diff_du_block(tmp, b, j, half * hd + c0, w, dout, pre, rstd, s);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, w, 1.0f, tmp, w, vg + c0, ldk, beta,
                                dd, T);
                    beta = 1.0f;
                }
            }
            /* u = (A_j − λ·A_{j+Hd})·V, so ∂L/∂λ = −Σ dD ⊙ A_{j+Hd} (A is zero above the diagonal) */
            for (int t = 0; t < T; t++)
                for (int c = 0; c <= t; c++) dl -= (double)dd[(size_t)t * T + c] * a2[(size_t)t * T + c];
            softmax_backward(tmp, dd, a2, T, -lambda); /* reads dD before the next line overwrites it */
            softmax_backward(dd, dd, a1, T, 1.0f);
        }
    }
    if (dlambda) *dlambda += (float)dl;

    /* 3) dq, dk from the score gradients now in scratch slice i of every query head i */
    if (dq || dk) {
#pragma omp parallel for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int g = 0; g < KV; g++) {
                const float *kg = k + (size_t)b * T * ldk + (size_t)g * hd;
                for (int i = g * G; i < (g + 1) * G; i++) {
                    const float *ds = scratch + ((size_t)b * H + i) * T * T;
                    if (dq)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale, ds, T, kg, ldk,
                                    1.0f, dq + (size_t)b * T * ldq + (size_t)i * hd, ldq);
                    if (dk)
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale, ds, T,
                                    q + (size_t)b * T * ldq + (size_t)i * hd, ldq, 1.0f,
                                    dk + (size_t)b * T * ldk + (size_t)g * hd, ldk);
                }
            }
        }
    }

    /* 4) dsubln_c += Σ_{b,t,j} α·dy_c·u_c·r: every head adds into the same 2hd weights, so this
     *    one runs over channels, each thread owning its c */
    if (dsubln && s->subln) {
        const float alpha = 1.0f - s->lambda_init;
#pragma omp parallel for
        for (int c = 0; c < w2; c++) {
            float acc = 0.0f;
            for (size_t n = 0; n < (size_t)B * T; n++)
                for (int j = 0; j < Hd; j++)
                    acc += dout[n * ldq + (size_t)j * w2 + c] * pre[n * ldq + (size_t)j * w2 + c] * rstd[n * Hd + j];
            dsubln[c] += alpha * acc;
        }
    }
}
