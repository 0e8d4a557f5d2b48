/* crossentropy.c — mean softmax cross-entropy over the rows that have a target (target < 0 = ignore). */
#include <math.h>
#include <stddef.h>

#include "layers/layers.h"

/* log Σ_v exp(row[v]) without overflow: subtract the row max first */
static double row_logsumexp(const float *row, int V, float *max_out) {
    float mx = row[0];
    for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += exp((double)(row[v] - mx));
    *max_out = mx;
    return (double)mx + log(sum);
}

/* logits[N, V], targets[N] → mean over counted rows of −log softmax(logits)[target] */
float crossentropy_forward(const float *logits, const int *targets, int N, int V, int *count) {
    double total = 0.0;
    int cnt = 0;
#pragma omp parallel for reduction(+ : total, cnt) if ((size_t)N * V >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) {
        if (targets[n] < 0) continue;
        const float *row = logits + (size_t)n * V;
        float mx;
        total += row_logsumexp(row, V, &mx) - (double)row[targets[n]];
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
        float mx;
        double lse = row_logsumexp(row, V, &mx);
        for (int v = 0; v < V; v++) {
            /* p = exp(x − lse), computed from the log-sum-exp so it never overflows */
            float p = (float)exp((double)row[v] - lse);
            drow[v] = (p - (v == tgt ? 1.0f : 0.0f)) * scale;
        }
    }
}
