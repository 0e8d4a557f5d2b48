/* test_layers.c — every layer's forward against a plain double-precision recomputation and every
 * backward against central finite differences of the float forward.
 *
 * Gradient checks use the scalar loss L = Σ out ⊙ R for a fixed random R, so dout = R. Each input
 * or weight element is moved by ±ε and the step actually taken ((x+ε) − (x−ε) after float
 * rounding) is the denominator; L is summed in double. Gradient buffers start from random values
 * and the start is subtracted afterwards, which checks that backward ACCUMULATES. Scratch and
 * output buffers start as NaN, so reading anything not written first would show up. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <omp.h>

#include "difftrans.h"
#include "layers/layers.h"
#include "testutil.h"

/* ------------------------------------------------------------------ helpers */

static int omp_threads_for_test(void) { return omp_get_max_threads(); }

static double dot_d(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* analytic -= start: what backward added on top of the random start */
static void sub_start(float *g, const float *start, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] -= start[i];
}

typedef double (*loss_fn)(void *ctx);

/* Compare analytic[n] with central differences of f over param[n]. Passes when every element has
 * |num − ana| ≤ atol + rtol·max(|num|, |ana|). */
static void check_grad(const char *name, float *param, size_t n, const float *analytic, loss_fn f, void *ctx,
                       float eps, double rtol, double atol) {
    double worst = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float orig = param[i];
        param[i] = orig + eps;
        float xp = param[i];
        double lp = f(ctx);
        param[i] = orig - eps;
        float xm = param[i];
        double lm = f(ctx);
        param[i] = orig;
        double num = (lp - lm) / ((double)xp - (double)xm);
        double ana = analytic[i];
        double err = fabs(num - ana);
        double lim = atol + rtol * fmax(fabs(num), fabs(ana));
        double ratio = err / lim;
        if (ratio > worst) worst = ratio;
        if (!(err <= lim)) {
            if (bad < 5) print_message("  %s[%zu]: analytic %.7g vs numeric %.7g\n", name, i, ana, num);
            bad++;
        }
    }
    print_message("  %-28s %4zu elements, worst error/limit %.3f\n", name, n, worst);
    assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------ linear */

typedef struct {
    float *y, *x, *w, *r;
    int N, in, out;
} linear_ctx;

static double linear_loss(void *p) {
    linear_ctx *c = p;
    linear_forward(c->y, c->x, c->w, c->N, c->in, c->out);
    return dot_d(c->y, c->r, (size_t)c->N * c->out);
}

static void test_linear(void **state) {
    (void)state;
    uint64_t rng = 11;
    linear_ctx c = {.N = 5, .in = 7, .out = 6};
    size_t nx = (size_t)c.N * c.in, nw = (size_t)c.out * c.in, ny = (size_t)c.N * c.out;
    c.x = frand(nx, 1, &rng), c.w = frand(nw, 1, &rng), c.r = frand(ny, 1, &rng), c.y = fnan(ny);

    /* forward = Σ_k x[n,k]·W[o,k] */
    linear_forward(c.y, c.x, c.w, c.N, c.in, c.out);
    for (int n = 0; n < c.N; n++)
        for (int o = 0; o < c.out; o++) {
            double s = 0;
            for (int k = 0; k < c.in; k++) s += (double)c.x[n * c.in + k] * c.w[o * c.in + k];
            assert_true(fabs(s - c.y[n * c.out + o]) < 1e-5);
        }

    float *dx0 = frand(nx, 1, &rng), *dw0 = frand(nw, 1, &rng);
    float *dx = fcopy(dx0, nx), *dw = fcopy(dw0, nw);
    linear_backward(dx, dw, c.r, c.x, c.w, c.N, c.in, c.out, GRAD_ADD);
    sub_start(dx, dx0, nx);
    sub_start(dw, dw0, nw);
    check_grad("linear dx", c.x, nx, dx, linear_loss, &c, 1e-3f, 1e-2, 1e-3);
    check_grad("linear dw", c.w, nw, dw, linear_loss, &c, 1e-3f, 1e-2, 1e-3);

    /* NULL gradient outputs are skipped */
    float *dw2 = fcopy(dw0, nw);
    linear_backward(NULL, dw2, c.r, c.x, c.w, c.N, c.in, c.out, GRAD_ADD);
    sub_start(dw2, dw0, nw);
    assert_true(tu_max_abs_diff(dw2, dw, nw) < 1e-5f);

    /* GRAD_SET_*: the named outputs are written whatever they held (NaN here), the others added */
    float *dx3 = fnan(nx), *dw3 = fcopy(dw0, nw);
    linear_backward(dx3, dw3, c.r, c.x, c.w, c.N, c.in, c.out, GRAD_SET_DX);
    sub_start(dw3, dw0, nw);
    assert_true(tu_max_abs_diff(dx3, dx, nx) < 1e-5f);
    assert_true(tu_max_abs_diff(dw3, dw, nw) < 1e-5f);
    float *dx4 = fcopy(dx0, nx), *dw4 = fnan(nw);
    linear_backward(dx4, dw4, c.r, c.x, c.w, c.N, c.in, c.out, GRAD_SET_DW);
    sub_start(dx4, dx0, nx);
    assert_true(tu_max_abs_diff(dx4, dx, nx) < 1e-5f);
    assert_true(tu_max_abs_diff(dw4, dw, nw) < 1e-5f);

    free(c.x), free(c.w), free(c.r), free(c.y), free(dx0), free(dw0), free(dx), free(dw), free(dw2);
    free(dx3), free(dw3), free(dx4), free(dw4);
}

/* ------------------------------------------------------------------ embedding */

typedef struct {
    float *out, *table, *r;
    const int *tok;
    int N, C;
} emb_ctx;

static double emb_loss(void *p) {
    emb_ctx *c = p;
    embedding_forward(c->out, c->tok, c->table, c->N, c->C);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static void test_embedding(void **state) {
    (void)state;
    uint64_t rng = 12;
    static const int tok[] = {3, 1, 3, 0, 3, 2, 1}; /* 3 three times, 1 twice, 4 never */
    emb_ctx c = {.tok = tok, .N = 7, .C = 5};
    const int V = 5;
    size_t nt = (size_t)V * c.C, no = (size_t)c.N * c.C;
    c.table = frand(nt, 1, &rng), c.r = frand(no, 1, &rng), c.out = fnan(no);

    embedding_forward(c.out, tok, c.table, c.N, c.C);
    for (int n = 0; n < c.N; n++) assert_memory_equal(c.out + n * c.C, c.table + tok[n] * c.C, c.C * sizeof(float));

    float *d0 = frand(nt, 1, &rng), *d = fcopy(d0, nt);
    embedding_backward(d, c.r, tok, c.N, c.C);
    sub_start(d, d0, nt);
    for (int ch = 0; ch < c.C; ch++) assert_true(d[4 * c.C + ch] == 0.0f); /* unused token: untouched */
    check_grad("embedding dtable", c.table, nt, d, emb_loss, &c, 1e-3f, 1e-2, 1e-3);
    free(c.table), free(c.r), free(c.out), free(d0), free(d);
}

/* ------------------------------------------------------------------ rmsnorm */

typedef struct {
    float *out, *rstd, *x, *w, *r;
    int N, C;
    float eps;
} rms_ctx;

static double rms_loss(void *p) {
    rms_ctx *c = p;
    rmsnorm_forward(c->out, c->rstd, c->x, c->w, c->N, c->C, c->eps);
    return dot_d(c->out, c->r, (size_t)c->N * c->C);
}

static void run_rmsnorm(int with_weight) {
    uint64_t rng = 13 + with_weight;
    rms_ctx c = {.N = 4, .C = 16, .eps = 1e-5f};
    size_t nx = (size_t)c.N * c.C;
    c.x = frand(nx, 1, &rng), c.r = frand(nx, 1, &rng), c.out = fnan(nx), c.rstd = fnan(c.N);
    c.w = with_weight ? frand(c.C, 1, &rng) : NULL;
    for (int i = 0; i < c.C; i++) c.x[i] *= 0.01f; /* a small-scale row, where eps matters */

    rms_loss(&c);
    for (int n = 0; n < c.N; n++) {
        double ss = 0;
        for (int i = 0; i < c.C; i++) ss += (double)c.x[n * c.C + i] * c.x[n * c.C + i];
        double r = 1.0 / sqrt(ss / c.C + c.eps);
        assert_true(fabs(r - c.rstd[n]) <= 1e-6 * r);
        for (int i = 0; i < c.C; i++) {
            double y = c.x[n * c.C + i] * r * (c.w ? c.w[i] : 1.0);
            assert_true(fabs(y - c.out[n * c.C + i]) < 1e-5);
        }
    }

    float *dx0 = frand(nx, 1, &rng), *dx = fcopy(dx0, nx);
    float *dw0 = with_weight ? frand(c.C, 1, &rng) : NULL, *dw = with_weight ? fcopy(dw0, c.C) : NULL;
    rmsnorm_backward(dx, dw, c.r, c.x, c.rstd, c.w, c.N, c.C);
    sub_start(dx, dx0, nx);
    check_grad(with_weight ? "rmsnorm dx (weight)" : "rmsnorm dx (no weight)", c.x, nx, dx, rms_loss, &c, 1e-3f,
               1e-2, 1e-3);
    if (with_weight) {
        sub_start(dw, dw0, c.C);
        check_grad("rmsnorm dw", c.w, c.C, dw, rms_loss, &c, 1e-3f, 1e-2, 1e-3);
    }
    free(c.x), free(c.r), free(c.out), free(c.rstd), free(c.w), free(dx0), free(dx), free(dw0), free(dw);
}

static void test_rmsnorm_weight(void **state) {
    (void)state;
    run_rmsnorm(1);
}

static void test_rmsnorm_no_weight(void **state) {
    (void)state;
    run_rmsnorm(0);
}

/* ------------------------------------------------------------------ rope */

typedef struct {
    float *x, *y, *r;
    int B, T, nh, hd, pos0;
    float theta;
    float inv_freq[32];
} rope_ctx;

static double rope_loss(void *p) {
    rope_ctx *c = p;
    size_t n = (size_t)c->B * c->T * c->nh * c->hd;
    memcpy(c->y, c->x, n * sizeof(float));
    rope_apply(c->y, c->B, c->T, c->nh, c->hd, c->pos0, c->inv_freq, 1);
    return dot_d(c->y, c->r, n);
}

/* The fused residual add + norm against the two plain passes it replaces. */
static void test_residual_rmsnorm(void **state) {
    (void)state;
    uint64_t rng = 99;
    const int N = 7, C = 37;
    float *x = frand((size_t)N * C, 1.0f, &rng), *d = frand((size_t)N * C, 1.0f, &rng), *w = frand(C, 1.0f, &rng);
    float *sum = fnan((size_t)N * C), *out = fnan((size_t)N * C), *rstd = fnan(N);
    float *ref_sum = fnew((size_t)N * C), *ref_out = fnan((size_t)N * C), *ref_rstd = fnan(N);
    for (int i = 0; i < N * C; i++) ref_sum[i] = x[i] + d[i];
    rmsnorm_forward(ref_out, ref_rstd, ref_sum, w, N, C, 1e-5f);
    residual_rmsnorm_forward(sum, out, rstd, x, d, w, N, C, 1e-5f);
    assert_memory_equal(sum, ref_sum, sizeof(float) * N * C);
    assert_memory_equal(out, ref_out, sizeof(float) * N * C);
    assert_memory_equal(rstd, ref_rstd, sizeof(float) * N);
    residual_rmsnorm_forward(x, out, rstd, x, d, NULL, N, C, 1e-5f); /* sum aliasing x, no weight */
    assert_memory_equal(x, ref_sum, sizeof(float) * N * C);
    free(x), free(d), free(w), free(sum), free(out), free(rstd), free(ref_sum), free(ref_out), free(ref_rstd);
}

static void test_rope(void **state) {
    (void)state;
    uint64_t rng = 14;
    rope_ctx c = {.B = 2, .T = 5, .nh = 3, .hd = 8, .pos0 = 3, .theta = 10000.0f};
    size_t n = (size_t)c.B * c.T * c.nh * c.hd;
    int half = c.hd / 2;
    dt_config cfg = {.head_dim = c.hd, .rope_theta = c.theta};
    dt_rope_inv_freq(&cfg, c.inv_freq);
    c.x = frand(n, 1, &rng), c.r = frand(n, 1, &rng), c.y = fnan(n);

    /* forward against the rotate_half formula with the angle in double */
    rope_loss(&c);
    for (int b = 0; b < c.B; b++)
        for (int t = 0; t < c.T; t++)
            for (int h = 0; h < c.nh; h++) {
                size_t o = (((size_t)b * c.T + t) * c.nh + h) * c.hd;
                for (int i = 0; i < half; i++) {
                    double ang = (c.pos0 + t) / pow(c.theta, 2.0 * i / c.hd);
                    double x0 = c.x[o + i], x1 = c.x[o + i + half];
                    assert_true(fabs(c.y[o + i] - (x0 * cos(ang) - x1 * sin(ang))) < 1e-5);
                    assert_true(fabs(c.y[o + i + half] - (x1 * cos(ang) + x0 * sin(ang))) < 1e-5);
                }
            }

    /* sign −1 undoes sign +1 */
    float *z = fcopy(c.y, n);
    rope_apply(z, c.B, c.T, c.nh, c.hd, c.pos0, c.inv_freq, -1);
    assert_true(tu_max_abs_diff(z, c.x, n) < 1e-5f);

    /* backward = the inverse rotation of dout (rope is linear, so this must equal FD) */
    float *g = fcopy(c.r, n);
    rope_apply(g, c.B, c.T, c.nh, c.hd, c.pos0, c.inv_freq, -1);
    check_grad("rope dx", c.x, n, g, rope_loss, &c, 1e-3f, 1e-2, 1e-3);

    /* position 0 is the identity, exactly */
    float *p0 = fcopy(c.x, (size_t)c.nh * c.hd);
    rope_apply(p0, 1, 1, c.nh, c.hd, 0, c.inv_freq, 1);
    assert_memory_equal(p0, c.x, (size_t)c.nh * c.hd * sizeof(float));
    free(c.x), free(c.r), free(c.y), free(z), free(g), free(p0);
}

/* ------------------------------------------------------------------ swiglu */

typedef struct {
    float *h, *gate, *up, *r;
    int N, F;
} swiglu_ctx;

static double swiglu_loss(void *p) {
    swiglu_ctx *c = p;
    swiglu_forward(c->h, c->gate, c->up, c->N, c->F);
    return dot_d(c->h, c->r, (size_t)c->N * c->F);
}

static void test_swiglu(void **state) {
    (void)state;
    uint64_t rng = 15;
    swiglu_ctx c = {.N = 3, .F = 10};
    size_t n = (size_t)c.N * c.F;
    c.gate = frand(n, 2, &rng), c.up = frand(n, 1, &rng), c.r = frand(n, 1, &rng), c.h = fnan(n);
    swiglu_loss(&c);
    for (size_t i = 0; i < n; i++) {
        double g = c.gate[i];
        assert_true(fabs(g / (1 + exp(-g)) * c.up[i] - c.h[i]) < 1e-5);
    }
    /* written, not accumulated: whatever the outputs held (NaN here) is overwritten */
    float *dg = fnan(n), *du = fnan(n);
    swiglu_backward(dg, du, c.r, c.gate, c.up, c.N, c.F);
    check_grad("swiglu dgate", c.gate, n, dg, swiglu_loss, &c, 1e-3f, 1e-2, 1e-3);
    check_grad("swiglu dup", c.up, n, du, swiglu_loss, &c, 1e-3f, 1e-2, 1e-3);
    free(c.gate), free(c.up), free(c.r), free(c.h), free(dg), free(du);
}

/* ------------------------------------------------------------------ cross-entropy */

typedef struct {
    float *logits;
    const int *tgt;
    int N, V;
} ce_ctx;

static double ce_loss(void *p) {
    ce_ctx *c = p;
    int cnt;
    return crossentropy_forward(c->logits, c->tgt, c->N, c->V, &cnt);
}

static void test_crossentropy(void **state) {
    (void)state;
    uint64_t rng = 16;
    static const int tgt[] = {2, -1, 0, 6, 2};
    ce_ctx c = {.tgt = tgt, .N = 5, .V = 7};
    size_t n = (size_t)c.N * c.V;
    c.logits = frand(n, 2, &rng);
    c.logits[3 * c.V + 1] = 80.0f; /* a large logit: exp without max subtraction would overflow float */

    int cnt = -5;
    float loss = crossentropy_forward(c.logits, tgt, c.N, c.V, &cnt);
    assert_int_equal(cnt, 4);
    double ref = 0;
    for (int r = 0; r < c.N; r++) {
        if (tgt[r] < 0) continue;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < c.V; v++) mx = fmax(mx, c.logits[r * c.V + v]);
        for (int v = 0; v < c.V; v++) s += exp(c.logits[r * c.V + v] - mx);
        ref += mx + log(s) - c.logits[r * c.V + tgt[r]];
    }
    ref /= 4;
    assert_true(isfinite(loss));
    assert_true(fabs(loss - ref) < 1e-5 * fmax(1, fabs(ref)));

    /* dloss = 1 against FD of the mean loss; the ignored row gets exact zeros */
    float *d = fnan(n);
    crossentropy_backward(d, c.logits, tgt, c.N, c.V, cnt, 1.0f);
    for (int v = 0; v < c.V; v++) assert_true(d[1 * c.V + v] == 0.0f);
    check_grad("crossentropy dlogits", c.logits, n, d, ce_loss, &c, 1e-2f, 1e-2, 1e-3);

    /* dlogits may alias logits; dloss scales */
    float *al = fcopy(c.logits, n);
    crossentropy_backward(al, al, tgt, c.N, c.V, cnt, 0.5f);
    for (size_t i = 0; i < n; i++) assert_true(fabs(al[i] - 0.5f * d[i]) < 1e-6f);

    /* no counted row: loss 0, count 0, gradient 0 */
    static const int none[] = {-1, -1};
    assert_true(crossentropy_forward(c.logits, none, 2, c.V, &cnt) == 0.0f);
    assert_int_equal(cnt, 0);
    crossentropy_backward(d, c.logits, none, 2, c.V, cnt, 1.0f);
    for (int i = 0; i < 2 * c.V; i++) assert_true(d[i] == 0.0f);
    free(c.logits), free(d), free(al);
}

/* ------------------------------------------------------------------ attention */

typedef struct {
    attention_shape s;
    float *q, *k, *v, *r;
    float *out, *att, *pre, *rstd;
    float *sub; /* subln weights when used (s.subln points here) */
    float *slopes; /* ALiBi slopes when used (s.alibi points here) */
} attn_ctx;

/* the ablation options of a test case */
typedef struct {
    int alibi, softmax1, no_norm;
} attn_opts;

static size_t nq(const attention_shape *s) { return (size_t)s->B * s->T * s->H * s->hd; }
static size_t nkv(const attention_shape *s) { return (size_t)s->B * s->T * s->KV * s->hd; }
static size_t natt(const attention_shape *s) { return (size_t)s->B * s->H * s->T * s->T; }

static double attn_loss(void *p) {
    attn_ctx *c = p;
    attention_forward(c->out, c->att, c->pre, c->rstd, c->q, c->k, c->v, &c->s);
    return dot_d(c->out, c->r, nq(&c->s));
}

static void attn_init_opts(attn_ctx *c, int B, int T, int H, int KV, int hd, int diff, int subln, float lambda,
                           uint64_t seed, const attn_opts *o) {
    memset(c, 0, sizeof *c);
    c->s = (attention_shape){.B = B, .T = T, .H = H, .KV = KV, .hd = hd, .diff = diff, .lambda = lambda,
                             .lambda_init = 0.35f, .eps = 1e-5f, .softmax1 = o->softmax1, .no_norm = o->no_norm};
    if (o->alibi) { /* a different slope for every query head, so that a wrong head index shows */
        c->slopes = fnew((size_t)H);
        for (int i = 0; i < H; i++) c->slopes[i] = 0.05f + 0.15f * (float)i;
        c->s.alibi = c->slopes;
    }
    uint64_t rng = seed;
    c->q = frand(nq(&c->s), 1, &rng);
    c->k = frand(nkv(&c->s), 1, &rng);
    c->v = frand(nkv(&c->s), 1, &rng);
    c->r = frand(nq(&c->s), 1, &rng);
    c->out = fnan(nq(&c->s));
    c->att = fnan(natt(&c->s));
    c->pre = fnan(nq(&c->s));
    c->rstd = fnan((size_t)B * T * H / 2 + 1);
    if (subln) {
        c->sub = fnew(2 * (size_t)hd);
        for (int i = 0; i < 2 * hd; i++) c->sub[i] = 1.0f + 0.5f * dt_rng_normal(&rng);
        c->s.subln = c->sub;
    }
}

static void attn_init(attn_ctx *c, int B, int T, int H, int KV, int hd, int diff, int subln, float lambda,
                      uint64_t seed) {
    attn_init_opts(c, B, T, H, KV, hd, diff, subln, lambda, seed, &(attn_opts){0});
}

static void attn_free(attn_ctx *c) {
    free(c->q), free(c->k), free(c->v), free(c->r), free(c->out), free(c->att), free(c->pre), free(c->rstd);
    free(c->sub), free(c->slopes);
}

/* The forward written straight from the definition, in double, one output element at a time
 * (for DIFF in HF's form A_j·V_j − λ·A_{j+Hd}·V_j), compared with out, att, pre and rstd. */
static void attn_check_forward(attn_ctx *c) {
    const attention_shape *s = &c->s;
    int B = s->B, T = s->T, H = s->H, KV = s->KV, hd = s->hd, G = H / KV, Hd = H / 2;
    double *A = malloc(sizeof(double) * H * T * T);
    double *u = malloc(sizeof(double) * 2 * hd);
    assert_non_null(A), assert_non_null(u);
#define Q(b, t, i, c_) c->q[(((size_t)(b) * T + (t)) * H + (i)) * hd + (c_)]
#define K(b, t, g, c_) c->k[(((size_t)(b) * T + (t)) * KV + (g)) * hd + (c_)]
#define Vv(b, t, g, c_) c->v[(((size_t)(b) * T + (t)) * KV + (g)) * hd + (c_)]
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < H; i++)
            for (int t = 0; t < T; t++) {
                /* softmax1: a virtual key of score 0 joins the max and the sum */
                double *a = A + ((size_t)i * T + t) * T, mx = s->softmax1 ? 0.0 : -INFINITY, sum = 0;
                for (int u_ = 0; u_ <= t; u_++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += (double)Q(b, t, i, e) * K(b, u_, i / G, e);
                    a[u_] = d / sqrt(hd) - (s->alibi ? (double)s->alibi[i] * (t - u_) : 0.0);
                    mx = fmax(mx, a[u_]);
                }
                if (s->softmax1) sum = exp(-mx);
                for (int u_ = 0; u_ <= t; u_++) sum += (a[u_] = exp(a[u_] - mx));
                for (int u_ = 0; u_ < T; u_++) {
                    a[u_] = u_ <= t ? a[u_] / sum : 0.0;
                    float got = c->att[(((size_t)b * H + i) * T + t) * T + u_];
                    assert_true(fabs(got - a[u_]) < 1e-6);
                }
            }
        for (int t = 0; t < T; t++) {
            const float *o = c->out + ((size_t)b * T + t) * H * hd;
            if (!s->diff) {
                for (int i = 0; i < H; i++)
                    for (int e = 0; e < hd; e++) {
                        double y = 0;
                        for (int u_ = 0; u_ <= t; u_++) y += A[((size_t)i * T + t) * T + u_] * Vv(b, u_, i / G, e);
                        assert_true(fabs(o[i * hd + e] - y) < 1e-5);
                    }
                continue;
            }
            for (int j = 0; j < Hd; j++) {
                double ss = 0;
                for (int e = 0; e < 2 * hd; e++) {
                    int g = e < hd ? j / G : (j + Hd) / G, ee = e % hd;
                    double y1 = 0, y2 = 0;
                    for (int u_ = 0; u_ <= t; u_++) {
                        y1 += A[((size_t)j * T + t) * T + u_] * Vv(b, u_, g, ee);
                        y2 += A[((size_t)(j + Hd) * T + t) * T + u_] * Vv(b, u_, g, ee);
                    }
                    u[e] = y1 - (double)s->lambda * y2;
                    ss += u[e] * u[e];
                    assert_true(fabs(c->pre[(((size_t)b * T + t) * Hd + j) * 2 * hd + e] - u[e]) < 1e-5);
                }
                double r = s->no_norm ? 1.0 : 1.0 / sqrt(ss / (2 * hd) + s->eps);
                assert_true(fabs(c->rstd[((size_t)b * T + t) * Hd + j] - r) <= 1e-5 * r);
                for (int e = 0; e < 2 * hd; e++) {
                    double y = (1.0 - s->lambda_init) * u[e] * r * (s->subln ? s->subln[e] : 1.0);
                    assert_true(fabs(o[j * 2 * hd + e] - y) < 1e-4 * fmax(1, fabs(y)));
                }
            }
        }
    }
#undef Q
#undef K
#undef Vv
    free(A), free(u);
}

/* forward against the double reference, then dq, dk, dv (and DIFF: dλ, dsubln) against FD */
static void attn_check_opts(int B, int T, int H, int KV, int hd, int diff, int subln, uint64_t seed,
                            const attn_opts *o) {
    attn_ctx c;
    attn_init_opts(&c, B, T, H, KV, hd, diff, subln, 0.6f, seed, o);
    char tag[128];
    snprintf(tag, sizeof tag, "%s B%d T%d H%d KV%d hd%d%s%s%s%s", diff ? "diff" : "base", B, T, H, KV, hd,
             subln ? " subln" : "", o->alibi ? " alibi" : "", o->softmax1 ? " softmax1" : "",
             o->no_norm ? " no-norm" : "");
    print_message("attention %s\n", tag);
    attn_loss(&c);
    attn_check_forward(&c);

    const attention_shape *s = &c.s;
    uint64_t rng = seed ^ 0x5eed;
    float *dq0 = frand(nq(s), 1, &rng), *dk0 = frand(nkv(s), 1, &rng), *dv0 = frand(nkv(s), 1, &rng);
    float *dq = fcopy(dq0, nq(s)), *dk = fcopy(dk0, nkv(s)), *dv = fcopy(dv0, nkv(s));
    float *ds0 = frand(2 * (size_t)hd, 1, &rng), *ds = fcopy(ds0, 2 * (size_t)hd);
    float dl0 = 0.25f, dl = dl0;
    float *scratch = fnan(natt(s));
    float *rcopy = fcopy(c.r, nq(s));
    attention_backward(dq, dk, dv, diff ? &dl : NULL, diff && subln ? ds : NULL, c.r, c.att, c.pre, c.rstd, c.q,
                       c.k, c.v, scratch, s);
    assert_memory_equal(rcopy, c.r, nq(s) * sizeof(float)); /* dout not modified */
    sub_start(dq, dq0, nq(s));
    sub_start(dk, dk0, nkv(s));
    sub_start(dv, dv0, nkv(s));
    check_grad("dq", c.q, nq(s), dq, attn_loss, &c, 1e-3f, 1e-2, 2e-3);
    check_grad("dk", c.k, nkv(s), dk, attn_loss, &c, 1e-3f, 1e-2, 2e-3);
    check_grad("dv", c.v, nkv(s), dv, attn_loss, &c, 1e-3f, 1e-2, 2e-3);
    if (diff) {
        float g = dl - dl0;
        check_grad("dlambda", &c.s.lambda, 1, &g, attn_loss, &c, 1e-3f, 1e-2, 2e-3);
    }
    if (diff && subln) {
        sub_start(ds, ds0, 2 * (size_t)hd);
        check_grad("dsubln", c.sub, 2 * (size_t)hd, ds, attn_loss, &c, 1e-3f, 1e-2, 2e-3);
    }
    /* set_grads: dq, dk, dv written whatever they held (NaN here), the same gradients (the
     * forward again first: the finite differences left perturbed activations) */
    attn_loss(&c);
    attention_shape set = c.s;
    set.set_grads = 1;
    float *dq2 = fnan(nq(s)), *dk2 = fnan(nkv(s)), *dv2 = fnan(nkv(s)), dl2 = 0;
    attention_backward(dq2, dk2, dv2, diff ? &dl2 : NULL, NULL, c.r, c.att, c.pre, c.rstd, c.q, c.k, c.v, scratch,
                       &set);
    assert_true(tu_max_abs_diff(dq2, dq, nq(s)) < 1e-5f);
    assert_true(tu_max_abs_diff(dk2, dk, nkv(s)) < 1e-5f);
    assert_true(tu_max_abs_diff(dv2, dv, nkv(s)) < 1e-5f);
    free(dq2), free(dk2), free(dv2);
    free(dq0), free(dk0), free(dv0), free(dq), free(dk), free(dv), free(ds0), free(ds), free(scratch), free(rcopy);
    attn_free(&c);
}

static void attn_check(int B, int T, int H, int KV, int hd, int diff, int subln, uint64_t seed) {
    attn_check_opts(B, T, H, KV, hd, diff, subln, seed, &(attn_opts){0});
}

/* the ablations in the reference kernel, alone and together, for both kinds */
static void test_attention_ablations(void **state) {
    (void)state;
    for (int diff = 0; diff < 2; diff++) {
        attn_check_opts(2, 7, 4, 2, 8, diff, 0, 61 + diff, &(attn_opts){.alibi = 1});
        attn_check_opts(2, 7, 4, 1, 8, diff, diff, 63 + diff, &(attn_opts){.softmax1 = 1});
        attn_check_opts(2, 6, 4, 2, 8, diff, 0, 65 + diff, &(attn_opts){.alibi = 1, .softmax1 = 1, .no_norm = diff});
    }
    attn_check_opts(2, 7, 4, 2, 8, 1, 0, 67, &(attn_opts){.no_norm = 1});
    attn_check_opts(2, 9, 6, 3, 4, 1, 0, 68, &(attn_opts){.no_norm = 1, .alibi = 1});
}

/* softmax1 can attend to nothing: with every score far below 0 the row's weights vanish, where
 * the softmax would still sum to 1 */
static void test_softmax1_attends_to_nothing(void **state) {
    (void)state;
    attn_ctx c;
    attn_init_opts(&c, 1, 5, 2, 1, 8, 0, 0, 0, 69, &(attn_opts){.softmax1 = 1});
    for (int e = 0; e < 8; e++) c.q[e] = c.q[16 + e] = 0; /* rows 0, 1 of head 0 */
    for (size_t i = 0; i < nkv(&c.s); i++) c.k[i] = 0;
    c.q[0] = 40.0f, c.k[0] = -1.0f; /* query 0 on key 0: score −40/√8 */
    attn_loss(&c);
    assert_true(c.att[0] < 1e-5f);
    /* query 1 sees two scores of 0 and the virtual one: weights 1/3 each */
    assert_true(fabsf(c.att[5] - 1.0f / 3) < 1e-6f && fabsf(c.att[6] - 1.0f / 3) < 1e-6f);
    attn_free(&c);
}

static void test_alibi_slopes(void **state) {
    (void)state;
    float s[12];
    alibi_slopes(s, 8); /* 2^-1 ... 2^-8 */
    for (int k = 0; k < 8; k++) assert_true(s[k] == ldexpf(1.0f, -(k + 1)));
    alibi_slopes(s, 6); /* 4 heads: 2^-2, 2^-4, 2^-6, 2^-8; then 2^-1, 2^-3 from 8 heads */
    static const int want6[] = {2, 4, 6, 8, 1, 3};
    for (int k = 0; k < 6; k++) assert_true(s[k] == ldexpf(1.0f, -want6[k]));
    alibi_slopes(s, 1);
    assert_true(s[0] == ldexpf(1.0f, -8));
    /* the query heads of one output head share its slope */
    alibi_query_slopes(s, DT_ARCH_DIFF, 8); /* 4 differential heads: j and j + 4 */
    for (int j = 0; j < 4; j++) assert_true(s[j] == ldexpf(1.0f, -2 * (j + 1)) && s[j + 4] == s[j]);
    alibi_query_slopes(s, DT_ARCH_DIFF_V2, 12); /* 6 output heads: 2j and 2j + 1 */
    for (int j = 0; j < 6; j++) assert_true(s[2 * j] == ldexpf(1.0f, -want6[j]) && s[2 * j + 1] == s[2 * j]);
    alibi_query_slopes(s, DT_ARCH_LLAMA, 8);
    for (int k = 0; k < 8; k++) assert_true(s[k] == ldexpf(1.0f, -(k + 1)));
}

/* ------------------------------------------------------------------ DIFF V2 */

typedef struct {
    float *a, *z, *out, *lam, *r;
    int N, h, hd;
} combine_ctx;

static double combine_loss(void *p) {
    combine_ctx *c = p;
    diffv2_combine_forward(c->out, c->lam, c->z, c->a, c->N, c->h, c->hd);
    return dot_d(c->out, c->r, (size_t)c->N * c->h * c->hd);
}

static void test_diffv2_combine(void **state) {
    (void)state;
    uint64_t rng = 71;
    combine_ctx c = {.N = 5, .h = 3, .hd = 4};
    const size_t na = (size_t)c.N * 2 * c.h * c.hd, nz = (size_t)c.N * c.h, no = nz * c.hd;
    c.a = frand(na, 1, &rng), c.z = frand(nz, 2, &rng), c.r = frand(no, 1, &rng);
    c.out = fnan(no), c.lam = fnan(nz);
    combine_loss(&c);
    for (int n = 0; n < c.N; n++)
        for (int j = 0; j < c.h; j++) {
            double l = 1.0 / (1.0 + exp(-(double)c.z[n * c.h + j]));
            assert_true(fabs(c.lam[n * c.h + j] - l) < 1e-6);
            for (int e = 0; e < c.hd; e++) {
                double want = c.a[((size_t)n * 2 * c.h + 2 * j) * c.hd + e] - l * c.a[((size_t)n * 2 * c.h + 2 * j + 1) * c.hd + e];
                assert_true(fabs(c.out[((size_t)n * c.h + j) * c.hd + e] - want) < 1e-5);
            }
        }
    float *da0 = frand(na, 1, &rng), *dz0 = frand(nz, 1, &rng), *da = fcopy(da0, na), *dz = fcopy(dz0, nz);
    diffv2_combine_backward(da, dz, c.r, c.a, c.lam, c.N, c.h, c.hd);
    sub_start(da, da0, na);
    sub_start(dz, dz0, nz);
    check_grad("v2 combine da", c.a, na, da, combine_loss, &c, 1e-3f, 1e-2, 2e-3);
    check_grad("v2 combine dz", c.z, nz, dz, combine_loss, &c, 1e-3f, 1e-2, 2e-3);
    free(c.a), free(c.z), free(c.r), free(c.out), free(c.lam), free(da0), free(dz0), free(da), free(dz);
}

/* The whole DIFF V2 attention block from its definition, in double: x [N, C] (the normalised
 * input) → q = x W_qᵀ (2h heads), k, v (KV heads), RoPE, a_i = softmax(q_i k_gᵀ/√hd) v_g with
 * g = ⌊i·KV/(2h)⌋, λ_{t,j} = sigmoid((W_λ x_t)_j), o_j = a_{2j} − λ_{t,j}·a_{2j+1}, y = o W_oᵀ.
 * Against the library's layers composed as the model composes them, with both attention kernels. */
static void check_diffv2_block(int B, int T, int C, int h, int KV, int hd, uint64_t seed) {
    const int H = 2 * h, N = B * T;
    uint64_t rng = seed;
    float *x = frand((size_t)N * C, 1, &rng), *wq = frand((size_t)H * hd * C, 0.3f, &rng);
    float *wk = frand((size_t)KV * hd * C, 0.3f, &rng), *wv = frand((size_t)KV * hd * C, 0.3f, &rng);
    float *wl = frand((size_t)h * C, 0.5f, &rng), *wo = frand((size_t)C * h * hd, 0.3f, &rng);
    /* double definition */
    double *y = calloc((size_t)N * C, sizeof(double));
    double *q = malloc(sizeof(double) * N * H * hd), *k = malloc(sizeof(double) * N * KV * hd);
    double *v = malloc(sizeof(double) * N * KV * hd), *a = malloc(sizeof(double) * N * H * hd);
    assert_non_null(y), assert_non_null(q), assert_non_null(k), assert_non_null(v), assert_non_null(a);
    for (int n = 0; n < N; n++) {
        for (int o = 0; o < H * hd; o++) {
            double acc = 0;
            for (int c = 0; c < C; c++) acc += (double)wq[(size_t)o * C + c] * x[(size_t)n * C + c];
            q[(size_t)n * H * hd + o] = acc;
        }
        for (int o = 0; o < KV * hd; o++) {
            double ak = 0, av = 0;
            for (int c = 0; c < C; c++) {
                ak += (double)wk[(size_t)o * C + c] * x[(size_t)n * C + c];
                av += (double)wv[(size_t)o * C + c] * x[(size_t)n * C + c];
            }
            k[(size_t)n * KV * hd + o] = ak, v[(size_t)n * KV * hd + o] = av;
        }
        /* RoPE, rotate_half convention, position t = n mod T */
        const int t = n % T;
        for (int which = 0; which < 2; which++) {
            double *base = which ? k + (size_t)n * KV * hd : q + (size_t)n * H * hd;
            for (int hh = 0; hh < (which ? KV : H); hh++)
                for (int i = 0; i < hd / 2; i++) {
                    double ang = t * pow(10000.0, -2.0 * i / hd), c0 = cos(ang), s0 = sin(ang);
                    double *p = base + (size_t)hh * hd, x0 = p[i], x1 = p[i + hd / 2];
                    p[i] = x0 * c0 - x1 * s0, p[i + hd / 2] = x1 * c0 + x0 * s0;
                }
        }
    }
    double *sc = malloc(sizeof(double) * T);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < H; i++)
            for (int t = 0; t < T; t++) {
                const int g = i * KV / H;
                const double *qi = q + ((size_t)(b * T + t) * H + i) * hd;
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    const double *ku = k + ((size_t)(b * T + u) * KV + g) * hd;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += qi[e] * ku[e];
                    sc[u] = d / sqrt(hd);
                    mx = fmax(mx, sc[u]);
                }
                for (int u = 0; u <= t; u++) sum += (sc[u] = exp(sc[u] - mx));
                for (int e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++) acc += sc[u] / sum * v[((size_t)(b * T + u) * KV + g) * hd + e];
                    a[((size_t)(b * T + t) * H + i) * hd + e] = acc;
                }
            }
    for (int n = 0; n < N; n++) {
        double *o = malloc(sizeof(double) * h * hd);
        for (int j = 0; j < h; j++) {
            double zl = 0;
            for (int c = 0; c < C; c++) zl += (double)wl[(size_t)j * C + c] * x[(size_t)n * C + c];
            double lam = 1.0 / (1.0 + exp(-zl));
            for (int e = 0; e < hd; e++)
                o[j * hd + e] = a[((size_t)n * H + 2 * j) * hd + e] - lam * a[((size_t)n * H + 2 * j + 1) * hd + e];
        }
        for (int c = 0; c < C; c++)
            for (int e = 0; e < h * hd; e++) y[(size_t)n * C + c] += (double)wo[(size_t)c * h * hd + e] * o[e];
        free(o);
    }
    /* the library's layers, with each kernel */
    attention_shape s = {.B = B, .T = T, .H = H, .KV = KV, .hd = hd};
    float *fq = fnew((size_t)N * H * hd), *fk = fnew((size_t)N * KV * hd), *fv = fnew((size_t)N * KV * hd);
    float *fa = fnan((size_t)N * H * hd), *att = fnan((size_t)B * H * T * T), *lse = fnan((size_t)B * H * T);
    float *lam = fnan((size_t)N * h), *fo = fnan((size_t)N * h * hd), *fy = fnan((size_t)N * C);
    float *scratch = fnan(flash_attention_scratch_floats(&s, omp_threads_for_test()));
    linear_forward(fq, x, wq, N, C, H * hd);
    linear_forward(fk, x, wk, N, C, KV * hd);
    linear_forward(fv, x, wv, N, C, KV * hd);
    float inv_freq[64];
    dt_config rc;
    dt_error err;
    assert_int_equal(dt_config_preset(&rc, "tiny", DT_ARCH_LLAMA, &err), 0);
    rc.head_dim = hd; /* default RoPE, θ = 10000 */
    dt_rope_inv_freq(&rc, inv_freq);
    rope_apply(fq, B, T, H, hd, 0, inv_freq, +1);
    rope_apply(fk, B, T, KV, hd, 0, inv_freq, +1);
    for (int fused = 0; fused < 2; fused++) {
        if (fused) flash_attention_forward(fa, lse, NULL, NULL, NULL, fq, fk, fv, scratch, &s);
        else attention_forward(fa, att, NULL, NULL, fq, fk, fv, &s);
        linear_forward(lam, x, wl, N, C, h);
        diffv2_combine_forward(fo, lam, lam, fa, N, h, hd);
        linear_forward(fy, fo, wo, N, h * hd, C);
        double worst = 0, scale = 0;
        for (size_t i = 0; i < (size_t)N * C; i++) {
            scale = fmax(scale, fabs(y[i]));
            worst = fmax(worst, isnan(fy[i]) ? INFINITY : fabs(fy[i] - y[i]));
        }
        print_message("  V2 block B%d T%d h%d KV%d hd%d (%s kernel): max |error| %.3g of max |y| %.3g\n", B, T, h, KV, hd,
                      fused ? "fused" : "reference", worst, scale);
        assert_true(worst <= 2e-5 * fmax(scale, 1.0));
    }
    free(x), free(wq), free(wk), free(wv), free(wl), free(wo), free(y), free(q), free(k), free(v), free(a), free(sc);
    free(fq), free(fk), free(fv), free(fa), free(att), free(lse), free(lam), free(fo), free(fy), free(scratch);
}

static void test_diffv2_block(void **state) {
    (void)state;
    check_diffv2_block(2, 7, 12, 2, 2, 8, 81); /* query heads 0,1 → kv 0; 2,3 → kv 1 */
    check_diffv2_block(1, 13, 10, 3, 3, 4, 82); /* KV = h: each output head's pair shares one kv head */
    check_diffv2_block(2, 5, 12, 2, 1, 8, 83);  /* one kv head for all */
}

static void test_attention_baseline(void **state) {
    (void)state;
    attn_check(2, 5, 4, 2, 8, 0, 0, 21);
    attn_check(2, 7, 4, 1, 8, 0, 0, 22);
    attn_check(2, 9, 4, 4, 4, 0, 0, 23);
}

static void test_attention_diff(void **state) {
    (void)state;
    attn_check(2, 5, 4, 2, 8, 1, 0, 31);
    attn_check(2, 5, 4, 2, 8, 1, 1, 32);
    attn_check(2, 7, 4, 1, 8, 1, 0, 33);
    attn_check(2, 7, 4, 1, 8, 1, 1, 34);
    /* odd KV: differential head j's two halves come from kv heads that are not a fixed offset apart */
    attn_check(2, 7, 6, 3, 8, 1, 1, 35);
    /* T > hd: the dU column blocks are whole halves */
    attn_check(2, 9, 4, 2, 4, 1, 1, 36);
}

/* every causal row of a softmax map sums to 1 and the upper triangle is exactly zero */
static void test_attention_causal_rows(void **state) {
    (void)state;
    attn_ctx c;
    attn_init(&c, 2, 7, 4, 2, 8, 0, 0, 0, 41);
    attn_loss(&c);
    for (int bi = 0; bi < 2 * 4; bi++)
        for (int t = 0; t < 7; t++) {
            const float *row = c.att + ((size_t)bi * 7 + t) * 7;
            double sum = 0;
            for (int u = 0; u <= t; u++) {
                assert_true(row[u] > 0.0f);
                sum += row[u];
            }
            assert_true(fabs(sum - 1.0) < 1e-6);
            for (int u = t + 1; u < 7; u++) assert_true(row[u] == 0.0f);
        }
    attn_free(&c);
}

/* The paper's illustration: 6 tokens, head size 8, λ = 0.8, random q/k. D = A_1 − λ·A_2 has rows
 * summing to 1 − λ = 0.2 and negative weights, which no softmax map can have. */
static void test_diff_map(void **state) {
    (void)state;
    const int T = 6;
    attn_ctx c;
    attn_init(&c, 1, T, 2, 1, 8, 1, 0, 0.8f, 42);
    attn_loss(&c);
    int neg = 0;
    for (int t = 0; t < T; t++) {
        double sum = 0;
        for (int u = 0; u <= t; u++) {
            double d = (double)c.att[t * T + u] - 0.8 * c.att[T * T + t * T + u];
            sum += d;
            neg += d < 0;
        }
        assert_true(fabs(sum - 0.2) < 1e-6);
    }
    print_message("  differential map: %d of %d causal weights negative\n", neg, T * (T + 1) / 2);
    assert_true(neg > 0);
    attn_free(&c);
}

/* T = 1: each map is the single weight 1, so the baseline returns v and DIFF returns
 * (1 − λinit)·RMSNorm((1 − λ)·V_j)·subln; nothing flows back into q or k */
static void test_attention_t1(void **state) {
    (void)state;
    for (int diff = 0; diff < 2; diff++) {
        attn_ctx c;
        attn_init(&c, 2, 1, 4, 2, 8, diff, diff, 0.6f, 43 + diff);
        attn_loss(&c);
        attn_check_forward(&c);
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 4; i++)
                for (int e = 0; e < 8 && !diff; e++)
                    assert_true(c.out[(b * 4 + i) * 8 + e] == c.v[(b * 2 + i / 2) * 8 + e]);
        float *dq = calloc(nq(&c.s), sizeof(float)), *dk = calloc(nkv(&c.s), sizeof(float));
        float *dv = calloc(nkv(&c.s), sizeof(float)), *scratch = fnan(natt(&c.s)), dl = 0;
        float ds[16] = {0};
        attention_backward(dq, dk, dv, &dl, ds, c.r, c.att, c.pre, c.rstd, c.q, c.k, c.v, scratch, &c.s);
        for (size_t i = 0; i < nq(&c.s); i++) assert_true(dq[i] == 0.0f);
        for (size_t i = 0; i < nkv(&c.s); i++) assert_true(dk[i] == 0.0f);
        check_grad("T=1 dv", c.v, nkv(&c.s), dv, attn_loss, &c, 1e-3f, 1e-2, 2e-3);
        if (diff) {
            check_grad("T=1 dlambda", &c.s.lambda, 1, &dl, attn_loss, &c, 1e-3f, 1e-2, 2e-3);
            check_grad("T=1 dsubln", c.sub, 16, ds, attn_loss, &c, 1e-3f, 1e-2, 2e-3);
        }
        free(dq), free(dk), free(dv), free(scratch);
        attn_free(&c);
    }
}

/* The few-row paths split W between threads (one range each up to LINEAR_ROWS_MAX rows, one row
 * too on the vector paths, tasks of LINEAR_SKINNY_BLOCK beyond): with 1, 2 and 3 threads and
 * outputs that no split divides evenly, every output is written (y starts as NaN) and is the
 * product. */
static void test_linear_few_rows_threads(void **state) {
    (void)state;
    uint64_t rng = 29;
    const int in = 70, out = 103;
    static const int rows[] = {1, 2, 3, 8, 9, 13};
    float *x = frand((size_t)13 * in, 1, &rng), *w = frand((size_t)out * in, 1, &rng);
    const int saved = omp_get_max_threads();
    static const int threads[] = {1, 2, 3};
    for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
        omp_set_num_threads(threads[ti]);
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            const int N = rows[ri];
            float *y = fnan((size_t)N * out);
            linear_forward(y, x, w, N, in, out);
            for (int n = 0; n < N; n++)
                for (int o = 0; o < out; o++) {
                    double s = 0, mag = 0;
                    for (int k = 0; k < in; k++) {
                        s += (double)x[n * in + k] * w[o * in + k];
                        mag += fabs((double)x[n * in + k] * w[o * in + k]);
                    }
                    const double got = y[(size_t)n * out + o];
                    if (!(fabs(got - s) <= 1e-6 * mag))
                        fail_msg("linear_forward %d rows, %d threads: y[%d, %d] = %g, want %g", N, threads[ti], n, o,
                                 got, s);
                }
            free(y);
        }
    }
    omp_set_num_threads(saved);
    free(x), free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_linear_few_rows_threads),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_rmsnorm_weight),
        cmocka_unit_test(test_rmsnorm_no_weight),
        cmocka_unit_test(test_residual_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_attention_baseline),
        cmocka_unit_test(test_attention_diff),
        cmocka_unit_test(test_attention_causal_rows),
        cmocka_unit_test(test_diff_map),
        cmocka_unit_test(test_attention_t1),
        cmocka_unit_test(test_attention_ablations),
        cmocka_unit_test(test_softmax1_attends_to_nothing),
        cmocka_unit_test(test_alibi_slopes),
        cmocka_unit_test(test_diffv2_combine),
        cmocka_unit_test(test_diffv2_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
