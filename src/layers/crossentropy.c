/* crossentropy.c — mean softmax cross-entropy over the rows that have a target (target < 0 = ignore).
 *
 * The exponentials go through the kernel path's vector exp (kernels.h; within ~1 ulp of expf) on
 * float arguments x − max ≤ 0 and x − lse; the sums of a row are taken in double. */
#include <math.h>
#include <stddef.h>

#include "layers/kernels.h"
#include "layers/layers.h"

#define XENT_CHUNK 256 /* floats of a row exponentiated at a time (stack buffer) */

/* log Σ_v exp(row[v]) without overflow: subtract the row max first. NaN when the row holds a NaN
 * or +inf (the vector exp gives 0 for NaN, which must not hide a diverged model). */
static double row_logsumexp(const dt_kernels *k, const float *row, int V) {
    float mx = row[0];
    int bad = 0;
    for (int v = 0; v < V; v++) {
        bad |= isnan(row[v]);
        mx = row[v] > mx ? row[v] : mx;
    }
    if (bad || mx == INFINITY) return NAN;
    double sum = 0.0;
    float buf[XENT_CHUNK];
    for (int v0 = 0; v0 < V; v0 += XENT_CHUNK) {
        const int n = V - v0 < XENT_CHUNK ? V - v0 : XENT_CHUNK;
        for (int i = 0; i < n; i++) buf[i] = row[v0 + i] - mx;
        k->exp(buf, buf, n);
        for (int i = 0; i < n; i++) sum += buf[i];
    }
    return (double)mx + log(sum);
}

/* logits[N, V], targets[N] → mean over counted rows of −log softmax(logits)[target] */
float crossentropy_forward(const float *logits, const int *targets, int N, int V, int *count) {
    const dt_kernels *k = kernels_active();
    double total = 0.0;
    int cnt = 0;
#pragma omp parallel for reduction(+ : total, cnt) if ((size_t)N * V >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        if (targets[n] < 0) continue;
        const float *row = logits + (size_t)n * V;
        total += row_logsumexp(k, row, V) - (double)row[targets[n]];
        cnt++;
    }
    if (count) *count = cnt;
    return cnt > 0 ? (float)(total / cnt) : 0.0f;
}

/* dlogits[N, V] = (softmax − onehot) · dloss / count; ignored rows get 0. Written, not
 * accumulated, and element by element after the row's max and sum are known, so dlogits may
 * alias logits (saves a [N, V] buffer for the largest tensor of the model). */
void crossentropy_backward(float *dlogits, const float *logits, const int *targets, int N, int V, int count,
                           float dloss) {
    const dt_kernels *k = kernels_active();
    float scale = count > 0 ? dloss / (float)count : 0.0f;
#pragma omp parallel for if ((size_t)N * V >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * V;
        float *drow = dlogits + (size_t)n * V;
        int tgt = targets[n];
        if (tgt < 0 || count <= 0) {
            for (int v = 0; v < V; v++) drow[v] = 0.0f;
            continue;
        }
        const double lse = row_logsumexp(k, row, V);
        if (isnan(lse)) {
            for (int v = 0; v < V; v++) drow[v] = NAN;
            continue;
        }
        /* p = exp(x − lse), from the log-sum-exp so it never overflows; in place */
        for (int v = 0; v < V; v++) drow[v] = (float)((double)row[v] - lse);
        k->exp(drow, drow, V);
        for (int v = 0; v < V; v++) drow[v] = (drow[v] - (v == tgt ? 1.0f : 0.0f)) * scale;
    }
}
