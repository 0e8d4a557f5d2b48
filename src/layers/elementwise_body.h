/* elementwise_body.h — the memory-bound kernels (RMSNorm, the fused residual add + RMSNorm, RoPE,
 * SwiGLU, AdamW) written once in the vector type of simd.h and compiled once per kernel path by
 * elementwise_portable.c, elementwise_avx2.c and elementwise_avx512.c (internal; kernels.h has
 * the contracts, elementwise_ref.c the plain definitions the tests hold these against).
 *
 * Each keeps the reference's order of float operations and never fuses a multiply with an add
 * that the reference rounds separately, so results differ from the reference only where a sum
 * is reordered (the sums of RMSNorm and its backward) or where the vector exp replaces expf
 * (SwiGLU, within ~1 ulp); AdamW and RoPE give the same bits as the reference. Row tails shorter
 * than a vector take the same vector code on a zero-padded copy.
 */
#include <math.h>
#include <stddef.h>

#include "layers/kernels.h"
#include "layers/simd.h"

float DT_KSFX(rmsnorm_row)(float *restrict out, const float *restrict x, const float *restrict w, int C, float eps) {
    const float r = 1.0f / sqrtf((float)(vsumsq_double(x, C) / C) + eps);
    const vf vr = vbc(r);
    int c = 0;
    for (; c + VW <= C; c += VW) vst(out + c, w ? (vld(x + c) * vr) * vld(w + c) : vld(x + c) * vr);
    if (c < C) {
        const int n = C - c;
        vst_part(out + c, w ? (vld_part(x + c, n) * vr) * vld_part(w + c, n) : vld_part(x + c, n) * vr, n);
    }
    return r;
}

float DT_KSFX(residual_rmsnorm_row)(float *sum, float *out, const float *x, const float *delta, const float *w,
                                    int C, float eps) {
    int c = 0;
    for (; c + VW <= C; c += VW) vst(sum + c, vld(x + c) + vld(delta + c));
    for (; c < C; c++) sum[c] = x[c] + delta[c];
    return DT_KSFX(rmsnorm_row)(out, sum, w, C, eps);
}

void DT_KSFX(rmsnorm_backward_row)(float *restrict dx, const float *restrict dy, const float *restrict x, float r,
                                   const float *restrict w, int C) {
    /* m = Σ w·dy·x: how much the row's scale moves the loss */
    vf vm = {0};
    int c = 0;
    for (; c + VW <= C; c += VW) vm += (w ? vld(w + c) * vld(dy + c) : vld(dy + c)) * vld(x + c);
    float m = vsum(vm);
    for (; c < C; c++) m += (w ? w[c] : 1.0f) * dy[c] * x[c];
    const float k = r * r * r * m / (float)C;
    const vf vr = vbc(r), vk = vbc(k);
    for (c = 0; c + VW <= C; c += VW)
        vst(dx + c, vld(dx + c) + ((w ? vr * vld(w + c) : vr) * vld(dy + c) - vk * vld(x + c)));
    for (; c < C; c++) dx[c] += r * (w ? w[c] : 1.0f) * dy[c] - k * x[c];
}

void DT_KSFX(rmsnorm_dw_row)(float *restrict dw, const float *restrict dy, const float *restrict x, float r, int n) {
    const vf vr = vbc(r);
    int c = 0;
    for (; c + VW <= n; c += VW) vst(dw + c, vld(dw + c) + vld(dy + c) * vld(x + c) * vr);
    for (; c < n; c++) dw[c] += dy[c] * x[c] * r;
}

/* exp(−g) for SwiGLU: −g is clamped to 88 (exp(88) ≈ 1.7e38 is still finite), where the vector
 * exp stops being defined; g/(1 + e^88) is then −0 up to a subnormal, as with expf's +inf. */
static inline vf exp_neg(vf g) {
    vf a = -g;
    return vexp(vsel(a > vbc(88.0f), vbc(88.0f), a));
}

void DT_KSFX(swiglu_forward)(float *restrict h, const float *restrict gate, const float *restrict up, size_t n) {
    const vf one = vbc(1.0f);
    size_t i = 0;
    /* g / (1 + e^−g), the form PyTorch's CPU kernel evaluates */
    for (; i + VW <= n; i += VW) {
        const vf g = vld(gate + i);
        vst(h + i, (g / (one + exp_neg(g))) * vld(up + i));
    }
    if (i < n) {
        const int r = (int)(n - i);
        const vf g = vld_part(gate + i, r);
        vst_part(h + i, (g / (one + exp_neg(g))) * vld_part(up + i, r), r);
    }
}

/* dgate = dh·up·s·(1 + g·(1 − s)), dup = dh·g·s with s = sigmoid(g), on VW lanes */
static inline void swiglu_backward_vec(vf *dgate, vf *dup, vf dh, vf g, vf up) {
    const vf one = vbc(1.0f), s = one / (one + exp_neg(g));
    *dgate = dh * up * s * (one + g * (one - s));
    *dup = dh * g * s;
}

void DT_KSFX(swiglu_backward)(float *restrict dgate, float *restrict dup, const float *restrict dh,
                              const float *restrict gate, const float *restrict up, size_t n) {
    size_t i = 0;
    vf dg, du;
    for (; i + VW <= n; i += VW) {
        swiglu_backward_vec(&dg, &du, vld(dh + i), vld(gate + i), vld(up + i));
        if (dgate) vst(dgate + i, dg);
        if (dup) vst(dup + i, du);
    }
    if (i < n) {
        const int r = (int)(n - i);
        swiglu_backward_vec(&dg, &du, vld_part(dh + i, r), vld_part(gate + i, r), vld_part(up + i, r));
        if (dgate) vst_part(dgate + i, dg, r);
        if (dup) vst_part(dup + i, du, r);
    }
}

void DT_KSFX(rope_span)(float *row, int nh, int hd, int i0, int n, const float *cos, const float *sin) {
    const int half = hd / 2;
    for (int h = 0; h < nh; h++) {
        float *p0 = row + (size_t)h * hd + i0, *p1 = p0 + half;
        int i = 0;
        for (; i + VW <= n; i += VW) {
            const vf x0 = vld(p0 + i), x1 = vld(p1 + i), c = vld(cos + i), s = vld(sin + i);
            /* x·cos + rotate_half(x)·sin, with rotate_half(x) = [−x₂, x₁] */
            vst(p0 + i, x0 * c - x1 * s);
            vst(p1 + i, x1 * c + x0 * s);
        }
        for (; i < n; i++) {
            const float x0 = p0[i], x1 = p1[i];
            p0[i] = x0 * cos[i] - x1 * sin[i];
            p1[i] = x1 * cos[i] + x0 * sin[i];
        }
    }
}

/* one AdamW update on VW parameters; dm: all ones on the lanes that get weight decay */
/* Σ x² (square) or Σ x of n floats: four vector accumulators (an FMA's latency hidden) over
 * blocks of SUMSQ_BLOCK floats, each block's float sum then added in double: a float partial
 * sums at most SUMSQ_BLOCK / (4·VW) terms, so its rounding stays ~2^-24 times that count. ahead:
 * bytes ahead to ask for the data (0: none). Inlined with constant arguments, each caller gets
 * its own loop. */
#define SUMSQ_BLOCK 1024
static inline __attribute__((always_inline)) double blocked_sum(const float *restrict x, size_t n, int square,
                                                                int ahead) {
    double total = 0.0;
    size_t i = 0;
    while (i < n) {
        const size_t end = n - i > SUMSQ_BLOCK ? i + SUMSQ_BLOCK : n;
        vf a0 = vbc(0.0f), a1 = a0, a2 = a0, a3 = a0;
        for (; i + 4 * VW <= end; i += 4 * VW) {
            /* a prefetch never faults, so past the end of x is harmless */
            if (ahead)
                for (int line = 0; line < 4 * VW * (int)sizeof(float); line += 64)
                    __builtin_prefetch((const char *)(x + i) + ahead + line);
            const vf x0 = vld(x + i), x1 = vld(x + i + VW), x2 = vld(x + i + 2 * VW), x3 = vld(x + i + 3 * VW);
            a0 = square ? vfma(x0, x0, a0) : a0 + x0;
            a1 = square ? vfma(x1, x1, a1) : a1 + x1;
            a2 = square ? vfma(x2, x2, a2) : a2 + x2;
            a3 = square ? vfma(x3, x3, a3) : a3 + x3;
        }
        for (; i + VW <= end; i += VW) a0 = square ? vfma(vld(x + i), vld(x + i), a0) : a0 + vld(x + i);
        float t = vsum((a0 + a1) + (a2 + a3));
        for (; i < end; i++) t += square ? x[i] * x[i] : x[i];
        total += (double)t;
    }
    return total;
}

double DT_KSFX(sumsq)(const float *restrict x, size_t n) { return blocked_sum(x, n, 1, 0); }

/* The probe's read (kernels.h): without the prefetch a 199 MB buffer read 47.8 GB/s on an Emerald
 * Rapids Xeon, with it 51.8 (1 to 16 KiB ahead alike, 64 KiB less), where the quantised decoder,
 * which asks 4 KiB ahead, streamed more than the probe without; baseline x86-64 loads reached 22. */
#define STREAM_AHEAD_BYTES 4096
double DT_KSFX(stream_sum)(const float *restrict x, size_t n) { return blocked_sum(x, n, 0, STREAM_AHEAD_BYTES); }

static inline void adamw_vec(float *p, const float *g, float *m, float *v, vi dm, const adamw_coeffs *k) {
    const vf b1 = vbc(k->beta1), b2 = vbc(k->beta2), one = vbc(1.0f), gv = vld(g);
    const vf mv = b1 * vld(m) + (one - b1) * gv;
    const vf vv = b2 * vld(v) + (one - b2) * gv * gv;
    vst(m, mv);
    vst(v, vv);
    vf update = (mv / vbc(k->bc1)) / (vsqrt(vv / vbc(k->bc2)) + vbc(k->eps));
    update = vsel(dm, update + vbc(k->weight_decay) * vld(p), update); /* decoupled weight decay */
    vst(p, vld(p) - vbc(k->lr) * update);
}

void DT_KSFX(adamw)(float *p, const float *g, float *m, float *v, const unsigned char *decay, size_t n,
                    const adamw_coeffs *k) {
    size_t i = 0;
    for (; i + VW <= n; i += VW) {
        vi dm;
        for (int j = 0; j < VW; j++) dm[j] = decay[i + j] ? -1 : 0;
        adamw_vec(p + i, g + i, m + i, v + i, dm, k);
    }
    if (i < n) {
        /* the tail through padded copies, with the same vector code */
        float pp[VW] = {0}, gg[VW] = {0}, mm[VW] = {0}, vv[VW] = {0};
        vi dm = {0};
        const size_t r = n - i;
        memcpy(pp, p + i, r * sizeof(float));
        memcpy(gg, g + i, r * sizeof(float));
        memcpy(mm, m + i, r * sizeof(float));
        memcpy(vv, v + i, r * sizeof(float));
        for (size_t j = 0; j < r; j++) dm[j] = decay[i + j] ? -1 : 0;
        adamw_vec(pp, gg, mm, vv, dm, k);
        memcpy(p + i, pp, r * sizeof(float));
        memcpy(m + i, mm, r * sizeof(float));
        memcpy(v + i, vv, r * sizeof(float));
    }
}
