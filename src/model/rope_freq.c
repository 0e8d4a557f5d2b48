/* rope_freq.c — RoPE inverse frequencies from config.json: rope_theta and rope_scaling.
 *
 * Each step is the float32 operation transformers performs (its rope init functions on float32
 * tensors, Python floats entering as float32 scalars), in the same order, so that a scaled
 * checkpoint rotates q and k by the angles it was trained with:
 *   default  inv_freq[i] = 1 / theta^(2i/hd)
 *   linear   inv_freq[i] / factor
 *   llama3   wavelen = 2π/inv_freq (PyTorch's scalar/tensor is reciprocal × scalar);
 *            wavelen > original/low_freq_factor  → inv_freq / factor   (low frequencies)
 *            wavelen < original/high_freq_factor → inv_freq            (high frequencies)
 *            otherwise s = (original/wavelen − low) / (high − low),
 *                      (1 − s)·inv_freq/factor + s·inv_freq            (a smooth ramp)
 */
#include <math.h>

#include "difftrans.h"

static void llama3_scale(const dt_rope_scaling *r, float *inv_freq, int half) {
    const float factor = (float)r->factor, low = (float)r->low_freq_factor;
    const double old_len = (double)r->original_max_position_embeddings;
    /* the two wavelength thresholds and the ramp's width are Python double arithmetic */
    const float low_freq_wavelen = (float)(old_len / r->low_freq_factor);
    const float high_freq_wavelen = (float)(old_len / r->high_freq_factor);
    const float ramp_width = (float)(r->high_freq_factor - r->low_freq_factor);
    const float two_pi = (float)(2.0 * M_PI), old_len_f = (float)old_len;
    for (int i = 0; i < half; i++) {
        const float f = inv_freq[i];
        const float wavelen = (1.0f / f) * two_pi;
        const float kept = wavelen > low_freq_wavelen ? f / factor : f;
        const float s = ((1.0f / wavelen) * old_len_f - low) / ramp_width;
        const float a = (1.0f - s) * kept;
        const float smoothed = a / factor + s * kept;
        const int medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
        inv_freq[i] = medium ? smoothed : kept;
    }
}

void dt_rope_inv_freq(const dt_config *cfg, float *inv_freq) {
    const int hd = cfg->head_dim, half = hd / 2;
    for (int i = 0; i < half; i++) inv_freq[i] = 1.0f / powf(cfg->rope_theta, (float)(2 * i) / (float)hd);
    const dt_rope_scaling *r = &cfg->rope_scaling;
    if (r->type == DT_ROPE_LINEAR) {
        for (int i = 0; i < half; i++) inv_freq[i] /= (float)r->factor;
    } else if (r->type == DT_ROPE_LLAMA3) {
        llama3_scale(r, inv_freq, half);
    }
}
