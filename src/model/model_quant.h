/* model_quant.h — a model's linear layers, float or quantised (internal to src/model/ and the
 * layers above it). The formats and kernels themselves are in quant/quant.h, which knows nothing
 * of dt_model. */
#ifndef DT_MODEL_QUANT_H
#define DT_MODEL_QUANT_H

#include "quant/quant.h"

/* ---- the model's linear layers (quantize.c) ---- */

/* Which linear layer of a transformer layer; LIN_LM_HEAD with layer = L. */
enum { LIN_Q = 0, LIN_K, LIN_V, LIN_O, LIN_GATE, LIN_UP, LIN_DOWN, LIN_PER_LAYER, LIN_LM_HEAD = 0 };

struct dt_quant {
    dt_quant_options opt;        /* calib_path / calib_tokens cleared: they are not owned */
    int n_linear;                /* L · 7, + 1 when the LM head is quantised */
    qlinear *lin;                /* [n_linear], index layer · 7 + which; the LM head last */
    dt_quant_act_stat *stats;    /* [n_linear] after a calibration in this process, else NULL */
    int floats_kept;             /* 1: quantised in this process, m->params still holds the float
                                    weights (dt_model_dequantize returns to them); 0: loaded from a
                                    quantised checkpoint, the float slots of quantised layers are empty */
};

/* Frees the quantised layers (the model's float slots stay as they are). */
void model_quant_free(dt_model *m);

/* The shape [out, in] of a linear layer (which = LIN_*; layer L is the LM head). */
void model_linear_shape(const dt_model *m, int layer, int which, int *out, int *in);
void config_linear_shape(const dt_config *c, int layer, int which, int *out, int *in);
/* The HF name without ".weight", e.g. "model.layers.3.mlp.up_proj" or "lm_head". */
void model_linear_name(char *buf, size_t n, int layer, int which, int n_layers);
/* The quantised layer, or NULL when that layer is float. */
const qlinear *model_qlinear(const dt_model *m, int layer, int which);
/* y[N, out] = x[N, in] · Wᵀ for a float or quantised layer: the one call every forward pass uses.
 * scratch: model_linear_scratch_bytes(m, N) bytes (unused by float layers). */
void model_linear(const dt_model *m, int layer, int which, float *y, const float *x, int N, void *scratch);
/* The n layers which[0..n) of one layer that read the same x (q, k, v; gate, up) into ys[i]: one
 * rounding of x and one parallel loop when they are all quantised (qlinear_forward_shared), else
 * model_linear each. The same bits either way. */
void model_linear_shared(const dt_model *m, int layer, const int *which, float *const *ys, int n, const float *x, int N,
                         void *scratch);
size_t model_linear_scratch_bytes(const dt_model *m, int N);

/* ---- quantised checkpoints (quant_checkpoint.c) ---- */

/* Reads config.json's quantization_config into o (scheme DT_QUANT_NONE when absent). */
int quant_config_read(const char *config_path, dt_quant_options *o, dt_error *err);
/* Whether the float tensor `name` is replaced by a quantised layer under o. */
int quant_replaces_tensor(const dt_quant_options *o, const char *name);
/* Builds m->quant from the integer tensors of st (after the float tensors were loaded). */
int quant_load_tensors(dt_model *m, const dt_safetensors *st, const dt_quant_options *o, dt_error *err);
/* Writes a quantised model as a new directory (built under a temporary name, then renamed). */
int quant_save(const dt_model *m, const char *dir, dt_error *err);

#endif
