/* alibi.c — ALiBi (Press, Smith & Lewis, "Train Short, Test Long", ICLR 2022): a linear bias
 * −m·(t − s) on the attention score of query t on key s, one slope m per head, in place of RoPE. */
#include <math.h>

#include "layers/layers.h"

/* the geometric sequence 2^(−8k/n), k = 1..n (n a power of two) */
static double pow2_slope(int k, int n) { return pow(2.0, -8.0 * k / n); }

void alibi_slopes(float *out, int n) {
    int p = 1;
    while (2 * p <= n) p *= 2;
    for (int k = 0; k < p; k++) out[k] = (float)pow2_slope(k + 1, p);
    /* the rest interleave between those: the odd-numbered slopes of 2p heads */
    for (int k = 0; k < n - p; k++) out[p + k] = (float)pow2_slope(2 * k + 1, 2 * p);
}

void alibi_query_slopes(float *out, int pairing, int H) {
    if (pairing == HEADS_UNPAIRED) {
        alibi_slopes(out, H);
        return;
    }
    const int h = H / 2;
    alibi_slopes(out, h); /* out[0..h): the output heads' slopes */
    if (pairing == HEADS_PAIR_HALF) {
        for (int j = 0; j < h; j++) out[j + h] = out[j];
    } else {
        for (int j = h - 1; j >= 0; j--) out[2 * j] = out[2 * j + 1] = out[j];
    }
}
