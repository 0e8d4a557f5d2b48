/* simd.h — the float vector type the dispatched kernels are written in, sized by the instruction
 * set the including file is compiled for (internal).
 *
 * A kernel body written once with these helpers is compiled three times (see kernels.h):
 *   *_avx512.c (-mavx512f ...): VW = 16 floats, 32 vector registers, FMA;
 *   *_avx2.c   (-mavx2 -mfma):  VW = 8, 16 registers, FMA;
 *   the plain .c file (baseline x86-64, SSE2): VW = 4, 16 registers, a·b + c rounded twice.
 * DT_KSFX(name) appends the path's suffix (_avx512, _avx2, _portable) so that the three copies
 * of a body link side by side. GCC's vector extension does the arithmetic; intrinsics only where
 * it has no operator (fused multiply-add, max, sqrt). Loads and stores are unaligned (memcpy).
 */
#ifndef DT_SIMD_H
#define DT_SIMD_H

#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define VW 16
#define DT_KSFX(name) name##_avx512
#elif defined(__AVX2__) && defined(__FMA__)
#define VW 8
#define DT_KSFX(name) name##_avx2
#else
#define VW 4
#define DT_KSFX(name) name##_portable
#endif

typedef float vf __attribute__((vector_size(4 * VW)));
typedef int32_t vi __attribute__((vector_size(4 * VW)));
typedef uint32_t vu __attribute__((vector_size(4 * VW)));

static inline vf vld(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vst(float *p, vf v) { memcpy(p, &v, sizeof v); }
/* x in every lane. Written as a constructor, which GCC emits as one broadcast (from memory: a
 * load alone), not as (vf){0} + x: x + 0 is not x for x = −0, so that form costs an add and a
 * register-to-vector shuffle per broadcast, which in the attention's micro-kernel took the port
 * the second FMA needs (config A's fused attention on an AVX-512 Intel Xeon: 1.45–1.6× faster
 * without them, 1.2–1.3× on the AVX2 path). */
static inline vf vbc(float x) {
#if VW == 16
    return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#elif VW == 8
    return (vf){x, x, x, x, x, x, x, x};
#else
    return (vf){x, x, x, x};
#endif
}
static inline vi vbci(int32_t x) { return (vi){0} + x; }
/* base, base + 1, ..., base + VW − 1 */
static inline vi viota(int32_t base) {
#if VW == 16
    return vbci(base) + (vi){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#elif VW == 8
    return vbci(base) + (vi){0, 1, 2, 3, 4, 5, 6, 7};
#else
    return vbci(base) + (vi){0, 1, 2, 3};
#endif
}

/* a·b + c: fused on the AVX paths (ISO C mode never contracts a*b + c by itself) */
static inline vf vfma(vf a, vf b, vf c) {
#if VW == 16
    return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif VW == 8
    return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}
/* mask ? a : b, mask lanes all ones or all zeros (the result of a vector comparison) */
static inline vf vsel(vi mask, vf a, vf b) { return (vf)(((vi)a & mask) | ((vi)b & ~mask)); }
/* max(a, b); b when either is NaN, as MAXPS */
static inline vf vmax(vf a, vf b) {
#if VW == 16
    return (vf)_mm512_max_ps((__m512)a, (__m512)b);
#elif VW == 8
    return (vf)_mm256_max_ps((__m256)a, (__m256)b);
#elif defined(__SSE__)
    return (vf)_mm_max_ps((__m128)a, (__m128)b);
#else
    return vsel(a > b, a, b);
#endif
}
/* correctly rounded square root, lane by lane (the same value as sqrtf) */
static inline vf vsqrt(vf a) {
#if VW == 16
    return (vf)_mm512_sqrt_ps((__m512)a);
#elif VW == 8
    return (vf)_mm256_sqrt_ps((__m256)a);
#elif defined(__SSE__)
    return (vf)_mm_sqrt_ps((__m128)a);
#else
    for (int i = 0; i < VW; i++) a[i] = __builtin_sqrtf(a[i]);
    return a;
#endif
}
/* Σ of the lanes, pairwise: the upper half onto the lower, halving down to one lane (whole-vector
 * adds of the halves: lane-by-lane indexing compiled into a store and a scalar add per lane) */
typedef float vf2 __attribute__((vector_size(8)));
typedef float vf4 __attribute__((vector_size(16)));
typedef float vf8 __attribute__((vector_size(32)));
static inline float vsum(vf a) {
#if VW == 16
    const vf8 h8 = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) +
                   __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
    const vf4 h4 = __builtin_shufflevector(h8, h8, 0, 1, 2, 3) + __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
#elif VW == 8
    const vf4 h4 = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
#else
    const vf4 h4 = a;
#endif
    const vf2 h2 = __builtin_shufflevector(h4, h4, 0, 1) + __builtin_shufflevector(h4, h4, 2, 3);
    return h2[0] + h2[1];
}

/* exp(x) lane by lane: Cody–Waite range reduction to |r| ≤ ln2/2, a degree-7 Taylor polynomial
 * and 2^n through the exponent bits. Truncation error ≤ 0.347^8/8! ≈ 5e-9, so the result is
 * within ~1 ulp of expf (tests/test_kernels.c checks 2 ulp on every path); inputs below
 * ln(FLT_MIN), and −inf, give +0 where expf gives a subnormal < 1.2e-38 that no sum here can
 * see. Defined for x ≤ 88; larger x give garbage (callers only feed scores minus their max,
 * or mask such lanes afterwards). No clamping: the exponent arithmetic is unsigned, and the
 * final mask discards the lanes below the range. */
static inline vf vexp(vf x) {
    const vf magic = vbc(12582912.0f); /* 1.5·2^23: adding it rounds to an integer */
    vi keep = x >= vbc(-87.33654475f);
    vf t = vfma(x, vbc(1.44269504088896341f), magic);
    vf n = t - magic;
    vf r = vfma(n, vbc(-0.693359375f), x); /* ln2 high part: n·hi is exact for |n| ≤ 128 */
    r = vfma(n, vbc(2.12194440e-4f), r);    /* − n·ln2 low part */
    vf p = vbc(1.0f / 5040.0f);
    p = vfma(p, r, vbc(1.0f / 720.0f));
    p = vfma(p, r, vbc(1.0f / 120.0f));
    p = vfma(p, r, vbc(1.0f / 24.0f));
    p = vfma(p, r, vbc(1.0f / 6.0f));
    p = vfma(p, r, vbc(0.5f));
    p = vfma(p, r, vbc(1.0f));
    p = vfma(p, r, vbc(1.0f));
    vu e = ((vu)t - 0x4B400000u + 127u) << 23; /* the low bits of t hold n: 2^n as float bits */
    p = p * (vf)e;
    return (vf)((vi)p & keep);
}

/* The first n < VW lanes of p (the rest 0) and back: the tails of rows whose length is not a
 * multiple of VW, computed with the same vector code as the body. */
static inline vf vld_part(const float *p, int n) {
    float buf[VW] = {0};
    memcpy(buf, p, sizeof(float) * (size_t)n);
    return vld(buf);
}
static inline void vst_part(float *p, vf v, int n) {
    float buf[VW];
    vst(buf, v);
    memcpy(p, buf, sizeof(float) * (size_t)n);
}

/* Σ x[i]² over n floats in double (every square exact): the sum RMSNorm takes, VW lanes at a time */
typedef double vdbl __attribute__((vector_size(8 * VW)));
static inline double vsumsq_double(const float *x, int n) {
    vdbl acc = {0};
    int c = 0;
    for (; c + VW <= n; c += VW) {
        vdbl d = __builtin_convertvector(vld(x + c), vdbl);
        acc += d * d;
    }
    double t = 0.0;
    for (int i = 0; i < VW; i++) t += acc[i];
    for (; c < n; c++) t += (double)x[c] * x[c];
    return t;
}

#endif
