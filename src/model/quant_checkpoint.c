/* quant_checkpoint.c — quantised checkpoint directories (README "Quantisation").
 *
 * config.json is the float model's config plus a "quantization_config" object; model.safetensors
 * holds every float tensor that stays float (embedding, norms, λ vectors, subln, the LM head unless
 * quantised) and, for each quantised linear layer NAME (e.g. model.layers.0.mlp.up_proj):
 *   q8_0  NAME.qblocks U8 [out, ⌈in/32⌉·34]: ggml's Q8_0 blocks (a half scale, 32 int8), as quant.h
 *   q4_0  NAME.qblocks U8 [out, ⌈in/32⌉·18]: ggml's Q4_0 blocks (a half scale, 16 bytes of nibbles)
 *   w8a8  NAME.qweight I8 [out, in], NAME.scales F32 [out], NAME.input_scale F32 [1] (static scales
 *         only), NAME.smooth F32 [in] (smoothing only; the activation is divided by it)
 * Checkpoints written before the blocks were ggml's (q8_0 / q4_0 as NAME.qweight I8 [out, in] or
 * U8 [out, ⌈in/32⌉·16] and NAME.scales F32 [out, ⌈in/32⌉]) still load: their scales are rounded to
 * halves on the way in (a relative change of at most 2^-11 per block), and a scale a half cannot
 * hold is refused with the command that re-quantises from the float model.
 * The loader checks every shape, dtype and value range against config.json before use.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/base.h"
#include "internal.h"
#include "model/model_quant.h"

/* quantization_config.activations: q8_0 / q4_0 take 0 (float_activations) or 3, w8a8 1 or 2. */
static const char *const activation_names[] = {"float32", "int8-static-per-tensor", "int8-dynamic-per-token",
                                               "int8-dynamic-per-block"};
enum { ACT_FLOAT = 0, ACT_STATIC = 1, ACT_DYNAMIC = 2, ACT_BLOCKS = 3, ACT_COUNT = 4 };

/* ---------------------------------------------------------------- config */

/* The keys add_quant_config writes to describe the scheme: read nowhere, but a file whose
 * description contradicts its scheme (4-bit weights in q8_0, blocks of 64) is not what it says
 * it is. Absent keys are fine (older files). */
static int check_descriptive_keys(const cJSON *qc, dt_quant_scheme scheme, const char *path, dt_error *err) {
    const int w8a8 = scheme == DT_QUANT_W8A8;
    const struct {
        const char *key, *text;
        double number;
    } want[] = {
        {"weight_bits", NULL, scheme == DT_QUANT_Q4_0 ? 4 : 8},
        {"block_size", NULL, w8a8 ? -1 : QK}, /* -1 (and no text): a key the scheme does not have */
        {"weight_granularity", w8a8 ? "per-output-channel" : "block", 0},
        {"block_layout", w8a8 ? NULL : "ggml", w8a8 ? -1 : 0},
        {"modules", "q_proj k_proj v_proj o_proj gate_proj up_proj down_proj", 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(qc, want[i].key);
        if (!v || cJSON_IsNull(v)) continue;
        const int ok = want[i].text         ? cJSON_IsString(v) && strcmp(v->valuestring, want[i].text) == 0
                       : want[i].number < 0 ? 0
                                            : cJSON_IsNumber(v) && v->valuedouble == want[i].number;
        if (ok) continue;
        if (want[i].text)
            return dt_fail_format(err, "%s: quantization_config.%s must be \"%s\" for %s", path, want[i].key,
                                  want[i].text, dt_quant_scheme_name(scheme));
        if (want[i].number < 0)
            return dt_fail_format(err, "%s: quantization_config.%s does not apply to %s", path, want[i].key,
                                  dt_quant_scheme_name(scheme));
        return dt_fail_format(err, "%s: quantization_config.%s must be %g for %s", path, want[i].key, want[i].number,
                              dt_quant_scheme_name(scheme));
    }
    return 0;
}

int quant_config_read(const char *path, dt_quant_options *o, dt_error *err) {
    dt_quant_defaults(o);
    cJSON *root = json_load_file(path, err);
    if (!root) return -1;
    int rc = 0;
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (qc && !cJSON_IsNull(qc)) {
        const cJSON *method = cJSON_GetObjectItemCaseSensitive(qc, "quant_method");
        const cJSON *scheme = cJSON_GetObjectItemCaseSensitive(qc, "scheme");
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(qc, "activations");
        const cJSON *lm = cJSON_GetObjectItemCaseSensitive(qc, "lm_head");
        const cJSON *alpha = cJSON_GetObjectItemCaseSensitive(qc, "smoothquant_alpha");
        if (!cJSON_IsObject(qc)) rc = dt_fail_format(err, "%s: quantization_config must be an object", path);
        else if (!cJSON_IsString(method))
            rc = dt_fail_format(err, "%s: quantization_config.quant_method must be a string", path);
        else if (strcmp(method->valuestring, "difftrans") != 0) /* transformers' other methods: valid, not ours */
            rc = dt_fail_code(err, DT_ERR_UNSUPPORTED,
                              "%s: quantization_config.quant_method '%s' is not supported (only difftrans's own; "
                              "read the float model, and quantize it with difftrans quantize)",
                              path, method->valuestring);
        else if (!cJSON_IsString(scheme))
            rc = dt_fail_format(err, "%s: quantization_config.scheme must be a string", path);
        else if (dt_quant_scheme_parse(scheme->valuestring, &o->scheme, err) != 0) {
            /* the parser's code is for a command-line argument: here the file is at fault */
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            rc = dt_fail_format(err, "%s: quantization_config: %s", path, msg);
        } else if (!cJSON_IsString(act))
            rc = dt_fail_format(err, "%s: quantization_config.activations must be a string", path);
        else if (lm && !cJSON_IsBool(lm))
            rc = dt_fail_format(err, "%s: quantization_config.lm_head must be true or false", path);
        else {
            int a = -1;
            for (int i = 0; i < ACT_COUNT; i++)
                if (strcmp(act->valuestring, activation_names[i]) == 0) a = i;
            const int w8a8 = o->scheme == DT_QUANT_W8A8;
            if (a < 0 || (w8a8 ? a != ACT_STATIC && a != ACT_DYNAMIC : a != ACT_FLOAT && a != ACT_BLOCKS))
                rc = dt_fail_format(err, "%s: quantization_config.activations '%s' does not fit scheme %s (%s)", path,
                                    act->valuestring, scheme->valuestring,
                                    w8a8 ? "int8-static-per-tensor or int8-dynamic-per-token"
                                         : "int8-dynamic-per-block or float32");
            o->dynamic_activations = a == ACT_DYNAMIC;
            o->float_activations = a == ACT_FLOAT;
            o->lm_head = cJSON_IsTrue(lm);
            if (rc == 0 && alpha && !cJSON_IsNull(alpha) &&
                (!cJSON_IsNumber(alpha) || !w8a8 || !(alpha->valuedouble >= 0 && alpha->valuedouble <= 1)))
                rc = dt_fail_format(err, "%s: quantization_config.smoothquant_alpha must be null or, for w8a8, a "
                                         "number in [0, 1]",
                                    path);
            if (cJSON_IsNumber(alpha)) o->smooth_alpha = (float)alpha->valuedouble;
            if (rc == 0) rc = check_descriptive_keys(qc, o->scheme, path, err);
        }
    }
    cJSON_Delete(root);
    return rc;
}

static int add_quant_config(const char *path, const struct dt_quant *q, dt_error *err) {
    cJSON *root = json_load_file(path, err); /* the config.json just written, to add to it */
    if (!root) return -1;
    const dt_quant_options *o = &q->opt;
    const int w8a8 = o->scheme == DT_QUANT_W8A8;
    cJSON *qc = cJSON_AddObjectToObject(root, "quantization_config");
    int ok = qc && cJSON_AddStringToObject(qc, "quant_method", "difftrans") &&
             cJSON_AddStringToObject(qc, "scheme", dt_quant_scheme_name(o->scheme)) &&
             cJSON_AddNumberToObject(qc, "weight_bits", o->scheme == DT_QUANT_Q4_0 ? 4 : 8) &&
             cJSON_AddStringToObject(qc, "weight_granularity", w8a8 ? "per-output-channel" : "block") &&
             (w8a8 || cJSON_AddNumberToObject(qc, "block_size", QK)) &&
             cJSON_AddStringToObject(qc, "activations",
                                     activation_names[w8a8 ? (o->dynamic_activations ? ACT_DYNAMIC : ACT_STATIC)
                                                           : (o->float_activations ? ACT_FLOAT : ACT_BLOCKS)]) &&
             (w8a8 || cJSON_AddStringToObject(qc, "block_layout", "ggml") != NULL) &&
             (o->smooth_alpha >= 0 ? cJSON_AddNumberToObject(qc, "smoothquant_alpha", o->smooth_alpha) != NULL
                                   : cJSON_AddNullToObject(qc, "smoothquant_alpha") != NULL) &&
             cJSON_AddBoolToObject(qc, "lm_head", o->lm_head) &&
             cJSON_AddStringToObject(qc, "modules", "q_proj k_proj v_proj o_proj gate_proj up_proj down_proj") &&
             cJSON_AddStringToObject(qc, "kept_float", o->lm_head ? "embed_tokens norms lambda subln"
                                                                  : "embed_tokens norms lambda subln lm_head");
    if (ok && w8a8 && (!o->dynamic_activations || o->smooth_alpha >= 0)) {
        cJSON *cal = cJSON_AddObjectToObject(qc, "calibration");
        ok = cal && cJSON_AddNumberToObject(cal, "samples", o->calib_samples) &&
             cJSON_AddNumberToObject(cal, "seq", o->calib_seq) && cJSON_AddNumberToObject(cal, "seed", (double)o->seed);
    }
    char *out = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!out) return dt_fail_oom(err, "%s: out of memory", path);
    int rc = write_text_atomic(path, out, err);
    cJSON_free(out);
    return rc;
}

int quant_replaces_tensor(const dt_quant_options *o, const char *name) {
    if (o->scheme == DT_QUANT_NONE) return 0;
    if (strcmp(name, "lm_head.weight") == 0) return o->lm_head;
    if (strncmp(name, "model.layers.", 13) != 0) return 0;
    static const char *const suffixes[] = {".q_proj.weight", ".k_proj.weight", ".v_proj.weight", ".o_proj.weight",
                                           ".gate_proj.weight", ".up_proj.weight", ".down_proj.weight"};
    const size_t n = strlen(name);
    for (int i = 0; i < 7; i++) {
        const size_t k = strlen(suffixes[i]);
        if (n > k && strcmp(name + n - k, suffixes[i]) == 0) return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- loading */

static int find_tensor(const dt_safetensors *st, const char *base, const char *suffix, dt_dtype dtype, int ndim,
                       int64_t d0, int64_t d1, const dt_st_tensor **out, dt_error *err) {
    char name[160];
    snprintf(name, sizeof name, "%s.%s", base, suffix);
    const dt_st_tensor *t = dt_st_find(st, name);
    if (!t) return dt_fail_format(err, "%s: missing tensor '%s' of the quantised checkpoint", st->path, name);
    static const char *const dn[] = {"F32", "F16", "BF16", "I8", "U8"};
    if (t->dtype != dtype)
        return dt_fail_format(err, "%s: tensor '%s' is %s, expected %s", st->path, name, dn[t->dtype], dn[dtype]);
    int ok = t->ndim == ndim && t->shape[0] == d0 && (ndim < 2 || t->shape[1] == d1);
    if (!ok) {
        char got[96] = "[";
        for (int d = 0; d < t->ndim && d < 4; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        if (ndim == 2)
            return dt_fail_format(err,
                                  "%s: tensor '%s' has shape %s] but config.json and the scheme imply [%lld, %lld]",
                                  st->path, name, got, (long long)d0, (long long)d1);
        return dt_fail_format(err, "%s: tensor '%s' has shape %s] but config.json and the scheme imply [%lld]",
                              st->path, name, got, (long long)d0);
    }
    *out = t;
    return 0;
}

/* Copies a float tensor, refusing non-finite values and, by sign: 1 non-positive ones, 0 negative
 * ones, −1 none (q4_0 scales carry the sign of their block's extreme). */
static int copy_floats(float *dst, const dt_safetensors *st, const dt_st_tensor *t, int sign, dt_error *err) {
    static const char *const rule[] = {"finite", "finite and non-negative", "finite and positive"};
    dt_st_read_f32(st, t, dst);
    for (size_t i = 0; i < t->numel; i++)
        if (!isfinite(dst[i]) || (sign > 0 && !(dst[i] > 0)) || (sign == 0 && dst[i] < 0))
            return dt_fail_format(err, "%s: tensor '%s' holds an invalid scale %g at index %zu (scales must be %s)",
                                  st->path, t->name, (double)dst[i], i, rule[sign + 1]);
    return 0;
}

/* A q8_0 / q4_0 layer of a checkpoint written before the blocks were ggml's: int8 values (or
 * nibbles) and float scales in two tensors, repacked into blocks with the scales as halves. */
static int load_old_blocks(qlinear *l, const dt_safetensors *st, const char *base, qformat fmt, int out, int in,
                           dt_error *err) {
    const int nb = q_blocks(in);
    const dt_st_tensor *qw, *sc;
    if (fmt == QFMT_Q4_0) {
        if (find_tensor(st, base, "qweight", DT_U8, 2, out, (int64_t)nb * (QK / 2), &qw, err)) return -1;
    } else if (find_tensor(st, base, "qweight", DT_I8, 2, out, in, &qw, err)) return -1;
    if (find_tensor(st, base, "scales", DT_F32, 2, out, nb, &sc, err)) return -1;
    float *scales = malloc(sc->numel * sizeof(float));
    void *blocks = malloc((size_t)out * nb * qblock_bytes(fmt));
    int rc = scales && blocks ? 0 : dt_fail_oom(err, "out of memory loading %s", base);
    if (rc == 0) rc = copy_floats(scales, st, sc, fmt == QFMT_Q4_0 ? -1 : 0, err);
    const uint8_t *q = dt_st_data(st, qw);
    for (size_t i = 0; rc == 0 && i < (size_t)out * nb; i++) {
        const uint16_t d = float_to_half(scales[i]);
        if (!isfinite(half_to_float(d))) {
            rc = dt_fail_format(err,
                                "%s: tensor '%s.scales' holds %g at index %zu, past the range of the half-precision "
                                "scales quantised layers now keep; re-quantise the float model: difftrans quantize "
                                "FLOAT_MODEL OUT --scheme %s",
                                st->path, base, (double)scales[i], i, fmt == QFMT_Q8_0 ? "q8_0" : "q4_0");
            break;
        }
        const size_t o = i / nb, b = i % nb;
        if (fmt == QFMT_Q4_0) {
            block_q4_0 *blk = (block_q4_0 *)blocks + i;
            blk->d = d;
            memcpy(blk->qs, q + i * (QK / 2), QK / 2);
        } else {
            block_q8_0 *blk = (block_q8_0 *)blocks + i;
            const size_t j0 = b * QK, n = (size_t)in - j0 < QK ? (size_t)in - j0 : QK;
            blk->d = d;
            memset(blk->qs, 0, QK);
            memcpy(blk->qs, q + o * (size_t)in + j0, n);
        }
    }
    char what[4400];
    snprintf(what, sizeof what, "%s: tensor '%s.qweight'", st->path, base);
    if (rc == 0) rc = qlinear_from_blocks(l, fmt, out, in, blocks, what, err);
    if (rc == 0) l->act = QACT_FLOAT; /* as these checkpoints were multiplied when they were written */
    free(scales);
    free(blocks);
    return rc;
}

static int load_blocks(qlinear *l, const dt_safetensors *st, const char *base, qformat fmt, int out, int in,
                       const dt_quant_options *o, dt_error *err) {
    char name[160];
    snprintf(name, sizeof name, "%s.qblocks", base);
    if (!dt_st_find(st, name)) {
        snprintf(name, sizeof name, "%s.qweight", base);
        if (dt_st_find(st, name)) return load_old_blocks(l, st, base, fmt, out, in, err);
    }
    const dt_st_tensor *qb;
    if (find_tensor(st, base, "qblocks", DT_U8, 2, out, (int64_t)q_blocks(in) * (int64_t)qblock_bytes(fmt), &qb, err))
        return -1;
    char what[4400];
    snprintf(what, sizeof what, "%s: tensor '%s'", st->path, name);
    if (qlinear_from_blocks(l, fmt, out, in, dt_st_data(st, qb), what, err) != 0) return -1;
    l->act = o->float_activations ? QACT_FLOAT : QACT_INT8;
    return qlinear_pack(l, err);
}

static int load_linear(qlinear *l, const dt_safetensors *st, const char *base, qformat fmt, int out, int in,
                       const dt_quant_options *o, dt_error *err) {
    memset(l, 0, sizeof *l);
    if (in > QLINEAR_MAX_IN) /* the integer products would overflow: what the quantiser refuses */
        return dt_fail_format(err, "%s: %s has %d inputs; quantised layers take at most %d (config.json's sizes)",
                              st->path, base, in, QLINEAR_MAX_IN);
    char name[160];
    snprintf(name, sizeof name, "%s.weight", base);
    if (dt_st_find(st, name))
        return dt_fail_format(err, "%s: holds '%s' beside its quantised form: a quantised checkpoint keeps one of them",
                              st->path, name);
    if (fmt != QFMT_W8A8) return load_blocks(l, st, base, fmt, out, in, o, err);
    l->fmt = fmt;
    l->out = out;
    l->in = in;
    const dt_st_tensor *qw, *sc, *is = NULL, *sm = NULL;
    if (find_tensor(st, base, "qweight", DT_I8, 2, out, in, &qw, err)) return -1;
    if (find_tensor(st, base, "scales", DT_F32, 1, out, 0, &sc, err)) return -1;
    if (!o->dynamic_activations && find_tensor(st, base, "input_scale", DT_F32, 1, 1, 0, &is, err)) return -1;
    /* smoothing applies to every layer or none, as quantization_config.smoothquant_alpha says */
    snprintf(name, sizeof name, "%s.smooth", base);
    if (!dt_st_find(st, name) != !(o->smooth_alpha >= 0))
        return dt_fail_format(err, "%s: tensor '%s' is %s, but quantization_config.smoothquant_alpha is %s", st->path,
                              name, o->smooth_alpha >= 0 ? "missing" : "there", o->smooth_alpha >= 0 ? "set" : "null");
    if (o->smooth_alpha >= 0 && find_tensor(st, base, "smooth", DT_F32, 1, in, 0, &sm, err)) return -1;
    const size_t qbytes = qw->end - qw->begin;
    l->q8 = malloc(qbytes);
    l->scales = malloc(sc->numel * sizeof(float));
    if (sm) l->smooth = malloc((size_t)in * sizeof(float));
    l->row_sums = malloc((size_t)out * sizeof(int32_t));
    if (!l->q8 || !l->scales || (sm && !l->smooth) || !l->row_sums) return dt_fail_oom(err, "out of memory loading %s", base);
    memcpy(l->q8, dt_st_data(st, qw), qbytes);
    for (size_t i = 0; i < qbytes; i++) /* −128 is outside the symmetric range the integer kernels rely on */
        if (l->q8[i] == -128)
            return dt_fail_format(err,
                                  "%s: tensor '%s.qweight' holds −128 at index %zu (int8 weights lie in [−127, 127])",
                                  st->path, base, i);
    if (copy_floats(l->scales, st, sc, 0, err)) return -1;
    if (sm && copy_floats(l->smooth, st, sm, 1, err)) return -1;
    if (is) {
        if (copy_floats(&l->input_scale, st, is, 1, err)) return -1;
    }
    i8_row_sums(l->row_sums, l->q8, out, in);
    return 0;
}

int quant_load_tensors(dt_model *m, const dt_safetensors *st, const dt_quant_options *o, dt_error *err) {
    const int L = m->cfg.num_hidden_layers;
    struct dt_quant *q = calloc(1, sizeof *q);
    const int n_linear = L * LIN_PER_LAYER + (o->lm_head ? 1 : 0);
    if (!q || !(q->lin = calloc((size_t)n_linear, sizeof *q->lin))) {
        free(q);
        return dt_fail_oom(err, "out of memory");
    }
    q->opt = *o;
    m->quant = q;
    const qformat fmt = o->scheme == DT_QUANT_Q8_0 ? QFMT_Q8_0 : o->scheme == DT_QUANT_Q4_0 ? QFMT_Q4_0 : QFMT_W8A8;
    for (int i = 0; i < n_linear; i++) {
        const int layer = i / LIN_PER_LAYER, which = i % LIN_PER_LAYER;
        int out, in;
        char base[96];
        model_linear_shape(m, layer, which, &out, &in);
        model_linear_name(base, sizeof base, layer, which, L);
        q->n_linear = i + 1; /* so that model_quant_free frees this one on failure */
        if (load_linear(&q->lin[i], st, base, fmt, out, in, o, err) != 0) {
            model_quant_free(m);
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- saving */

static void remove_tree(const char *dir) {
    static const char *const files[] = {"model.safetensors", "config.json", "generation_config.json",
                                        "difftrans_tokenizer.json", "tokenizer.json", "tokenizer_config.json"};
    char path[4200];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        if (dt_pathf(path, sizeof path, NULL, "%s/%s", dir, files[i]) == 0) unlink(path);
    }
    rmdir(dir);
}

typedef struct {
    dt_st_entry *e;
    int n;
    char (*names)[160];
} entry_list;

static dt_st_entry *add_entry(entry_list *el, const char *base, const char *suffix, int ndim, int64_t d0, int64_t d1) {
    dt_st_entry *e = &el->e[el->n];
    memset(e, 0, sizeof *e);
    if (suffix) snprintf(el->names[el->n], sizeof el->names[0], "%s.%s", base, suffix);
    else snprintf(el->names[el->n], sizeof el->names[0], "%s", base);
    e->name = el->names[el->n];
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
    el->n++;
    return e;
}

static int write_tensors(const dt_model *m, const char *path, dt_error *err) {
    const struct dt_quant *q = m->quant;
    const int cap = m->n_tensors + 4 * q->n_linear;
    entry_list el = {calloc((size_t)cap, sizeof *el.e), 0, calloc((size_t)cap, sizeof *el.names)};
    /* the file holds ggml blocks: packed layers are unpacked into copies for the write */
    void **copies = calloc((size_t)q->n_linear + 1, sizeof *copies);
    if (!el.e || !el.names || !copies) {
        free(el.e);
        free(el.names);
        free(copies);
        return dt_fail_oom(err, "out of memory");
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const dt_tensor *t = &m->tensors[i];
        if (quant_replaces_tensor(&q->opt, t->name)) continue;
        if (m->cfg.arch == DT_ARCH_DIFF && !m->cfg.use_subln_weight && strstr(t->name, ".subln.weight")) continue;
        add_entry(&el, t->name, NULL, t->ndim, t->shape[0], t->shape[1])->data = m->params + t->offset;
    }
    int rc = 0;
    for (int i = 0; i < q->n_linear; i++) {
        const qlinear *l = &q->lin[i];
        char base[96];
        model_linear_name(base, sizeof base, i / LIN_PER_LAYER, i % LIN_PER_LAYER, m->cfg.num_hidden_layers);
        dt_st_entry *e;
        if (l->fmt == QFMT_W8A8) {
            e = add_entry(&el, base, "qweight", 2, l->out, l->in);
            e->dtype = DT_I8;
            e->raw = l->q8;
            add_entry(&el, base, "scales", 1, l->out, 0)->data = l->scales;
            if (l->input_scale > 0) add_entry(&el, base, "input_scale", 1, 1, 0)->data = &l->input_scale;
            if (l->smooth) add_entry(&el, base, "smooth", 1, l->in, 0)->data = l->smooth;
        } else {
            e = add_entry(&el, base, "qblocks", 2, l->out, (int64_t)q_blocks(l->in) * (int64_t)qblock_bytes(l->fmt));
            e->dtype = DT_U8;
            e->raw = l->blocks;
            if (l->packed) {
                const size_t bytes = (size_t)l->out * q_blocks(l->in) * qblock_bytes(l->fmt);
                if (!(copies[i] = malloc(bytes))) {
                    rc = dt_fail_oom(err, "%s: out of memory unpacking %s for the file", path, base);
                    break;
                }
                qlinear_blocks_copy(l, copies[i], 0, l->out);
                e->raw = copies[i];
            }
        }
    }
    if (rc == 0) rc = dt_st_write_f32(path, el.e, el.n, err);
    for (int i = 0; i < q->n_linear; i++) free(copies[i]);
    free(copies);
    free(el.e);
    free(el.names);
    return rc;
}

int quant_save(const dt_model *m, const char *out_dir, dt_error *err) {
    /* "OUT/" names the directory OUT: its temporary name "OUT/.tmp.<pid>" would lie inside the
     * directory that does not exist yet, and the signal handler would watch OUT for it */
    char dir[4096];
    if (dt_pathf(dir, sizeof dir, err, "%s", out_dir) != 0) return -1;
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--) dir[n - 1] = '\0';
    struct stat sb;
    if (stat(dir, &sb) == 0)
        return dt_fail(err, "%s already exists: a quantised checkpoint is written to a new directory", dir);
    char tmp[4096], path[4200];
    if (dt_pathf(tmp, sizeof tmp, err, "%s.tmp.%ld", dir, (long)getpid()) != 0) return -1;
    if (dir_ensure_parent(dir, err) != 0) return -1; /* OUT's parents, as for any output */
    temp_dir_register(dir); /* dir.tmp.<pid> goes, with its files, if a signal ends the process */
    /* named as the caller named it: the temporary name is ours */
    if (mkdir(tmp, 0755) != 0) return dt_fail_io(err, "%s: cannot create directory: %s", dir, strerror(errno));
    int rc = dt_pathf(path, sizeof path, err, "%s/model.safetensors", tmp);
    if (rc == 0) rc = write_tensors(m, path, err);
    if (rc == 0) rc = dt_pathf(path, sizeof path, err, "%s/config.json", tmp);
    if (rc == 0) rc = dt_config_save(&m->cfg, path, err);
    if (rc == 0) rc = add_quant_config(path, m->quant, err);
    if (rc == 0) rc = dt_pathf(path, sizeof path, err, "%s/generation_config.json", tmp);
    if (rc == 0) rc = generation_config_save(&m->cfg.special, m->generation_config, path, err);
    if (rc == 0) rc = vocab_save(&m->vocab, tmp, 0, err); /* the vocabulary the float model was trained with */
    if (rc == 0 && rename(tmp, dir) != 0)
        rc = dt_fail_io(err, "%s: cannot rename %s into place: %s", dir, tmp, strerror(errno));
    if (rc != 0) remove_tree(tmp);
    return rc;
}
