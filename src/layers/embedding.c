/* embedding.c — token embedding lookup: a row gather forward, a row scatter-add backward. */
#include <string.h>

#include "layers/layers.h"

/* out[N, C] = table[tokens[n], :]  (tokens are validated by the caller) */
void embedding_forward(float *out, const int *tokens, const float *table, int N, int C) {
#pragma omp parallel for if ((size_t)N * C >= LAYER_PARALLEL_MIN)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * C, table + (size_t)tokens[n] * C, (size_t)C * sizeof(float));
}

/* dtable[V, C] += scatter of dout[N, C] by token id */
void embedding_backward(float *dtable, const float *dout, const int *tokens, int N, int C) {
    /* serial over n: the same token may appear in many rows, and parallel rows would race on
     * its table row. The inner loop over C is contiguous and vectorises. */
    for (int n = 0; n < N; n++) {
        float *d = dtable + (size_t)tokens[n] * C;
        const float *g = dout + (size_t)n * C;
        for (int c = 0; c < C; c++) d[c] += g[c];
    }
}
