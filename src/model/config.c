/* config.c — model configuration: presets, validation, and Hugging Face config.json I/O.
 *
 * config.json uses the Hugging Face `diffllama` / `llama` keys so that a checkpoint directory
 * loads in transformers unchanged; the only keys of our own live under "difftrans". Loading is
 * strict about what would change the model (types, sizes, unsupported features) and ignores
 * keys that do not (bos_token_id, initializer_range, ...).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "difftrans.h"
#include "internal.h"

/* Upper bounds, checked before anything is allocated from these numbers. */
#define MAX_HIDDEN 65536
#define MAX_INTERMEDIATE 1048576
#define MAX_LAYERS 1024
#define MAX_HEADS 1024
#define MAX_HEAD_DIM 4096
#define MAX_POSITIONS 1048576
#define MAX_PARAMS 4e9

/* ---------------------------------------------------------------- presets */

typedef struct {
    const char *name;
    int hidden, layers, heads, intermediate, max_pos;
} preset;

/* F ≈ 8/3·C rounded up to a multiple of 16 (the LLaMA SwiGLU width). */
static const preset PRESETS[] = {
    {"tiny", 64, 2, 4, 176, 256},
    {"small", 128, 4, 4, 352, 512},
    {"medium", 256, 4, 8, 704, 1024},
    {"base", 512, 8, 8, 1408, 1024},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

const char *dt_config_preset_names(void) { return "tiny,small,medium,base"; }

int dt_config_preset(dt_config *cfg, const char *name, dt_arch arch, dt_error *err) {
    if (arch != DT_ARCH_LLAMA && arch != DT_ARCH_DIFF && arch != DT_ARCH_DIFF_V2)
        return dt_fail(err, "preset: unknown architecture %d", (int)arch);
    if (!name) return dt_fail(err, "preset: no name given (choose from %s)", dt_config_preset_names());
    for (int i = 0; i < N_PRESETS; i++) {
        const preset *p = &PRESETS[i];
        if (strcmp(p->name, name) != 0) continue;
        memset(cfg, 0, sizeof *cfg);
        cfg->arch = arch;
        cfg->vocab_size = 256; /* byte-level tokenizer */
        cfg->hidden_size = p->hidden;
        cfg->intermediate_size = p->intermediate;
        cfg->num_hidden_layers = p->layers;
        cfg->num_attention_heads = p->heads;
        cfg->num_key_value_heads = p->heads;
        cfg->head_dim = p->hidden / p->heads;
        cfg->max_position_embeddings = p->max_pos;
        cfg->rms_norm_eps = 1e-5f;
        cfg->rope_theta = 10000.0f;
        cfg->tie_word_embeddings = 0;
        cfg->lambda_std_dev = 0.1f;
        cfg->use_subln_weight = 0;
        cfg->special = dt_special_ids_none();
        /* DIFF V2 matches the preset's Transformer of `heads` heads: that many output heads, each
         * fed by two query heads of the same width */
        if (arch == DT_ARCH_DIFF_V2) cfg->num_attention_heads = 2 * p->heads;
        return 0;
    }
    return dt_fail(err, "unknown preset '%s' (choose from %s)", name, dt_config_preset_names());
}

dt_config dt_config_matched(const dt_config *cfg) {
    dt_config m = *cfg;
    m.arch = cfg->arch == DT_ARCH_LLAMA ? DT_ARCH_DIFF : DT_ARCH_LLAMA;
    if (cfg->arch == DT_ARCH_DIFF_V2) m.num_attention_heads = cfg->num_attention_heads / 2;
    /* subln.weight is our extension; the matched model is the plain HF one, with the ablations
     * that apply to both kinds (position encoding, softmax1) kept and the DIFF-only ones dropped */
    m.use_subln_weight = 0;
    m.no_head_norm = 0;
    m.fixed_lambda = 0;
    m.v2_pairs = DT_V2_PAIRS_GROUP;
    m.v2_lambda = DT_V2_LAMBDA_SIGMOID;
    return m;
}

const char *dt_arch_name(dt_arch arch) {
    switch (arch) {
    case DT_ARCH_LLAMA: return "llama";
    case DT_ARCH_DIFF: return "diffllama";
    case DT_ARCH_DIFF_V2: return "difftrans_v2";
    }
    return "unknown";
}

const char *dt_arch_label(dt_arch arch) {
    switch (arch) {
    case DT_ARCH_LLAMA: return "Transformer";
    case DT_ARCH_DIFF: return "DIFF";
    case DT_ARCH_DIFF_V2: return "DIFF V2";
    }
    return "unknown";
}

float dt_lambda_init(int layer) { return (float)(0.8 - 0.6 * exp(-0.3 * (double)layer)); }

/* ---------------------------------------------------------------- validation */

static int check_size(const char *where, const char *key, int v, int max, dt_error *err) {
    if (v <= 0) return dt_fail(err, "%s: %s must be > 0 (got %d)", where, key, v);
    if (v > max) return dt_fail(err, "%s: %s = %d is absurdly large (limit %d)", where, key, v, max);
    return 0;
}

static int check_sizes(const dt_config *c, const char *where, dt_error *err) {
    if (check_size(where, "vocab_size", c->vocab_size, DT_MAX_VOCAB, err) ||
        check_size(where, "hidden_size", c->hidden_size, MAX_HIDDEN, err) ||
        check_size(where, "intermediate_size", c->intermediate_size, MAX_INTERMEDIATE, err) ||
        check_size(where, "num_hidden_layers", c->num_hidden_layers, MAX_LAYERS, err) ||
        check_size(where, "num_attention_heads", c->num_attention_heads, MAX_HEADS, err) ||
        check_size(where, "num_key_value_heads", c->num_key_value_heads, MAX_HEADS, err) ||
        check_size(where, "head_dim", c->head_dim, MAX_HEAD_DIM, err) ||
        check_size(where, "max_position_embeddings", c->max_position_embeddings, MAX_POSITIONS, err))
        return -1;
    return 0;
}

static int check_heads(const dt_config *c, const char *where, dt_error *err) {
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return dt_fail(err, "%s: heads not divisible by kv heads (num_attention_heads %d, num_key_value_heads %d)",
                       where, c->num_attention_heads, c->num_key_value_heads);
    /* RoPE rotates channel pairs (i, i + hd/2): an odd head_dim would leave one channel without
     * a position, and Hugging Face cannot build such a model. */
    if (c->head_dim % 2 != 0) return dt_fail(err, "%s: head_dim must be even for RoPE (got %d)", where, c->head_dim);
    /* Query heads pair up into differential heads (DIFF: i with i + H/2; V2: 2j with 2j + 1). */
    if (c->arch != DT_ARCH_LLAMA && c->num_attention_heads % 2 != 0)
        return dt_fail(err, "%s: %s needs an even num_attention_heads (got %d)", where, dt_arch_name(c->arch),
                       c->num_attention_heads);
    return 0;
}

static int check_reals(const dt_config *c, const char *where, dt_error *err) {
    if (!isfinite(c->rms_norm_eps) || !(c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
        return dt_fail(err, "%s: rms_norm_eps must be in (0, 1) (got %g)", where, (double)c->rms_norm_eps);
    if (!isfinite(c->rope_theta) || !(c->rope_theta > 0))
        return dt_fail(err, "%s: rope_theta must be finite and > 0 (got %g)", where, (double)c->rope_theta);
    if (!isfinite(c->lambda_std_dev) || !(c->lambda_std_dev >= 0))
        return dt_fail(err, "%s: lambda_std_dev must be finite and >= 0 (got %g)", where, (double)c->lambda_std_dev);
    return 0;
}

/* The V2 write-up's ablations (dt_v2_pairs, dt_v2_lambda in difftrans.h). */
static int check_v2_options(const dt_config *c, const char *where, dt_error *err) {
    if (c->v2_pairs != DT_V2_PAIRS_GROUP && c->v2_pairs != DT_V2_PAIRS_CROSS)
        return dt_fail(err, "%s: unknown v2_pairs %d", where, (int)c->v2_pairs);
    if (c->v2_lambda != DT_V2_LAMBDA_SIGMOID && c->v2_lambda != DT_V2_LAMBDA_NONE &&
        c->v2_lambda != DT_V2_LAMBDA_LINEAR)
        return dt_fail(err, "%s: unknown v2_lambda %d", where, (int)c->v2_lambda);
    if (c->arch != DT_ARCH_DIFF_V2 && c->v2_pairs != DT_V2_PAIRS_GROUP)
        return dt_fail(err, "%s: v2_pairs only applies to difftrans_v2 (not %s)", where, dt_arch_name(c->arch));
    if (c->arch != DT_ARCH_DIFF_V2 && c->v2_lambda != DT_V2_LAMBDA_SIGMOID)
        return dt_fail(err, "%s: v2_lambda only applies to difftrans_v2 (not %s)", where, dt_arch_name(c->arch));
    /* query heads j and j + h read kv heads ⌊j/g⌋ and ⌊j/g⌋ + KV/2: one kv head would make them
     * the same again, and the variant would be plain V2 in another order */
    if (c->v2_pairs == DT_V2_PAIRS_CROSS && c->num_key_value_heads < 2)
        return dt_fail(err,
                       "%s: v2_pairs \"j,j+h\" (pairs across GQA groups) needs num_key_value_heads >= 2 (got %d): with "
                       "one kv head both query heads of a pair read the same keys and values",
                       where, c->num_key_value_heads);
    return 0;
}

static int check_flags(const dt_config *c, const char *where, dt_error *err) {
    if (c->tie_word_embeddings != 0 && c->tie_word_embeddings != 1)
        return dt_fail(err, "%s: tie_word_embeddings must be 0 or 1 (got %d)", where, c->tie_word_embeddings);
    if (c->use_subln_weight != 0 && c->use_subln_weight != 1)
        return dt_fail(err, "%s: use_subln_weight must be 0 or 1 (got %d)", where, c->use_subln_weight);
    if (c->use_subln_weight && c->arch != DT_ARCH_DIFF)
        return dt_fail(err, "%s: subln_weight only exists for diffllama", where);
    if (c->position != DT_POS_ROPE && c->position != DT_POS_ALIBI && c->position != DT_POS_NONE)
        return dt_fail(err, "%s: unknown position encoding %d", where, (int)c->position);
    if (c->softmax1 != 0 && c->softmax1 != 1)
        return dt_fail(err, "%s: softmax1 must be 0 or 1 (got %d)", where, c->softmax1);
    if (c->no_head_norm != 0 && c->no_head_norm != 1)
        return dt_fail(err, "%s: head_norm must be true or false", where);
    if (c->fixed_lambda != 0 && c->fixed_lambda != 1)
        return dt_fail(err, "%s: fixed_lambda must be 0 or 1 (got %d)", where, c->fixed_lambda);
    /* DIFF V2 has neither a per-head norm nor a per-layer λ: these two are DIFF (V1) ablations */
    if (c->no_head_norm && c->arch != DT_ARCH_DIFF)
        return dt_fail(err, "%s: head_norm = false only applies to diffllama (%s has no per-head norm option)", where,
                       dt_arch_name(c->arch));
    if (c->fixed_lambda && c->arch != DT_ARCH_DIFF)
        return dt_fail(err, "%s: fixed_lambda only applies to diffllama (not %s)", where, dt_arch_name(c->arch));
    if (c->no_head_norm && c->use_subln_weight)
        return dt_fail(err, "%s: subln_weight is the per-head norm's weight: it cannot go with head_norm = false",
                       where);
    return check_v2_options(c, where, err);
}

/* The parameter count of the layout in difftrans.h, in double so it cannot overflow. */
static double param_count(const dt_config *c) {
    double C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size, hd = c->head_dim;
    double H = c->num_attention_heads, KV = c->num_key_value_heads;
    double heads_out = c->arch == DT_ARCH_DIFF_V2 ? H / 2 : H; /* o_proj's input width / hd */
    double layer = 2 * C                 /* the two RMSNorm weights */
                   + H * hd * C          /* q_proj */
                   + heads_out * hd * C  /* o_proj */
                   + KV * hd * C * 2     /* k_proj, v_proj */
                   + 3 * F * C;          /* gate, up, down */
    if (c->arch == DT_ARCH_DIFF) layer += (c->fixed_lambda ? 0 : 4 * hd) + (c->use_subln_weight ? 2 * hd : 0);
    if (c->arch == DT_ARCH_DIFF_V2 && c->v2_lambda != DT_V2_LAMBDA_NONE) layer += H / 2 * C; /* W_λ */
    return V * C * (c->tie_word_embeddings ? 1 : 2) + C + c->num_hidden_layers * layer;
}

static int check_rope_scaling(const dt_config *c, const char *where, dt_error *err) {
    const dt_rope_scaling *r = &c->rope_scaling;
    if (r->type == DT_ROPE_DEFAULT) return 0;
    if (r->type != DT_ROPE_LINEAR && r->type != DT_ROPE_LLAMA3)
        return dt_fail(err, "%s: unknown rope_scaling type %d", where, (int)r->type);
    if (!isfinite(r->factor) || !(r->factor > 0) || !isfinite((float)r->factor))
        return dt_fail(err, "%s: rope_scaling factor must be finite and > 0 (got %g)", where, r->factor);
    if (r->type != DT_ROPE_LLAMA3) return 0;
    if (!isfinite(r->low_freq_factor) || !isfinite(r->high_freq_factor) || !(r->low_freq_factor > 0) ||
        !(r->high_freq_factor > r->low_freq_factor))
        return dt_fail(err, "%s: rope_scaling llama3 needs 0 < low_freq_factor < high_freq_factor (got %g, %g)", where,
                       r->low_freq_factor, r->high_freq_factor);
    if (r->original_max_position_embeddings <= 0 || r->original_max_position_embeddings > MAX_POSITIONS)
        return dt_fail(err, "%s: rope_scaling original_max_position_embeddings must be in 1..%d (got %d)", where,
                       MAX_POSITIONS, r->original_max_position_embeddings);
    return 0;
}

static int check_token_id(const char *where, const char *key, int id, int vocab, dt_error *err) {
    if (id < -1 || id >= vocab)
        return dt_fail(err, "%s: %s %d is outside the vocabulary of %d tokens", where, key, id, vocab);
    return 0;
}

static int check_special(const dt_config *c, const char *where, dt_error *err) {
    const dt_special_ids *s = &c->special;
    if (check_token_id(where, "bos_token_id", s->bos_token_id, c->vocab_size, err) ||
        check_token_id(where, "pad_token_id", s->pad_token_id, c->vocab_size, err))
        return -1;
    if (s->n_eos < 0 || s->n_eos > DT_MAX_EOS)
        return dt_fail(err, "%s: %d eos_token_id values (at most %d)", where, s->n_eos, DT_MAX_EOS);
    for (int i = 0; i < s->n_eos; i++)
        if (s->eos_token_id[i] < 0 || s->eos_token_id[i] >= c->vocab_size)
            return dt_fail(err, "%s: eos_token_id %d is outside the vocabulary of %d tokens", where,
                           s->eos_token_id[i], c->vocab_size);
    return 0;
}

dt_special_ids dt_special_ids_none(void) {
    dt_special_ids s;
    memset(&s, 0, sizeof s);
    s.bos_token_id = -1;
    s.pad_token_id = -1;
    return s;
}

int dt_config_validate(const dt_config *cfg, const char *where, dt_error *err) {
    if (!where) where = "config";
    if (cfg->arch != DT_ARCH_LLAMA && cfg->arch != DT_ARCH_DIFF && cfg->arch != DT_ARCH_DIFF_V2)
        return dt_fail(err, "%s: unknown architecture %d", where, (int)cfg->arch);
    if (check_sizes(cfg, where, err) || check_heads(cfg, where, err) || check_reals(cfg, where, err) ||
        check_flags(cfg, where, err) || check_rope_scaling(cfg, where, err) || check_special(cfg, where, err))
        return -1;
    double n = param_count(cfg);
    if (n > MAX_PARAMS)
        return dt_fail(err, "%s: model too large: %.4g parameters (limit %.0g)", where, n, MAX_PARAMS);
    return 0;
}

/* ---------------------------------------------------------------- reading JSON values */

/* Each getter returns 1 when the key was present and stored, 0 when it is absent (JSON null
 * counts as absent, as transformers writes null for unset options), -1 on a bad value. */

static const cJSON *get_key(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(v) ? NULL : v;
}

static int json_int(const cJSON *obj, const char *key, int *out, const char *path, dt_error *err) {
    const cJSON *v = get_key(obj, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return dt_fail_format(err, "%s: key '%s' must be a number", path, key);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return dt_fail_format(err, "%s: key '%s' must be an integer (got %g)", path, key, d);
    if (d < INT_MIN || d > INT_MAX) return dt_fail_format(err, "%s: key '%s' is out of range (got %g)", path, key, d);
    *out = (int)d;
    return 1;
}

static int json_float(const cJSON *obj, const char *key, float *out, const char *path, dt_error *err) {
    const cJSON *v = get_key(obj, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return dt_fail_format(err, "%s: key '%s' must be a number", path, key);
    float f = (float)v->valuedouble;
    if (!isfinite(f))
        return dt_fail_format(err, "%s: key '%s' is out of float range (got %g)", path, key, v->valuedouble);
    *out = f;
    return 1;
}

static int json_bool(const cJSON *obj, const char *key, int *out, const char *path, dt_error *err) {
    const cJSON *v = get_key(obj, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return dt_fail_format(err, "%s: key '%s' must be true or false", path, key);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 1;
}

static int json_required_int(const cJSON *obj, const char *key, int *out, const char *path, dt_error *err) {
    int rc = json_int(obj, key, out, path, err);
    if (rc == 0) return dt_fail_format(err, "%s: missing required key '%s'", path, key);
    return rc < 0 ? -1 : 0;
}

/* ---------------------------------------------------------------- parsing config.json */

static int parse_arch(const cJSON *root, dt_arch *arch, const char *path, dt_error *err) {
    const cJSON *v = get_key(root, "model_type");
    if (!v) return dt_fail_format(err, "%s: missing required key 'model_type'", path);
    if (!cJSON_IsString(v)) return dt_fail_format(err, "%s: key 'model_type' must be a string", path);
    if (strcmp(v->valuestring, "diffllama") == 0) *arch = DT_ARCH_DIFF;
    else if (strcmp(v->valuestring, "llama") == 0) *arch = DT_ARCH_LLAMA;
    else if (strcmp(v->valuestring, "difftrans_v2") == 0) *arch = DT_ARCH_DIFF_V2;
    else
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: model_type '%s' is not supported (expected diffllama, llama or difftrans_v2)", path,
                            v->valuestring);
    return 0;
}

static int parse_sizes(const cJSON *root, dt_config *c, const char *path, dt_error *err) {
    if (json_required_int(root, "vocab_size", &c->vocab_size, path, err) ||
        json_required_int(root, "hidden_size", &c->hidden_size, path, err) ||
        json_required_int(root, "intermediate_size", &c->intermediate_size, path, err) ||
        json_required_int(root, "num_hidden_layers", &c->num_hidden_layers, path, err) ||
        json_required_int(root, "num_attention_heads", &c->num_attention_heads, path, err))
        return -1;
    c->num_key_value_heads = c->num_attention_heads;
    c->max_position_embeddings = 2048;
    c->head_dim = 0;
    int has_head_dim;
    if (json_int(root, "num_key_value_heads", &c->num_key_value_heads, path, err) < 0 ||
        json_int(root, "max_position_embeddings", &c->max_position_embeddings, path, err) < 0 ||
        (has_head_dim = json_int(root, "head_dim", &c->head_dim, path, err)) < 0)
        return -1;
    /* Without an explicit head_dim, HF uses hidden / heads: refuse a silent truncation. When the
     * head count itself is bad, leave head_dim 0 and let validation report the head count. */
    if (!has_head_dim && c->num_attention_heads > 0) {
        if (c->hidden_size % c->num_attention_heads != 0)
            return dt_fail_format(err, "%s: hidden_size %d is not divisible by num_attention_heads %d (set head_dim)",
                                  path, c->hidden_size, c->num_attention_heads);
        c->head_dim = c->hidden_size / c->num_attention_heads;
    }
    return 0;
}

static int parse_reals(const cJSON *root, dt_config *c, const char *path, dt_error *err) {
    /* HF's DiffLlamaConfig and LlamaConfig differ in their default epsilon. */
    c->rms_norm_eps = c->arch == DT_ARCH_DIFF ? 1e-5f : 1e-6f;
    c->rope_theta = 10000.0f;
    c->lambda_std_dev = 0.1f;
    if (json_float(root, "rms_norm_eps", &c->rms_norm_eps, path, err) < 0 ||
        json_float(root, "rope_theta", &c->rope_theta, path, err) < 0 ||
        json_float(root, "lambda_std_dev", &c->lambda_std_dev, path, err) < 0)
        return -1;
    return 0;
}

static int json_double(const cJSON *obj, const char *key, double *out, const char *path, dt_error *err) {
    const cJSON *v = get_key(obj, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return dt_fail_format(err, "%s: key '%s' must be a finite number", path, key);
    *out = v->valuedouble;
    return 1;
}

/* Options that would change the model in ways we do not implement: refuse, never ignore. */
static int parse_unsupported(const cJSON *root, const char *path, dt_error *err) {
    const cJSON *act = get_key(root, "hidden_act");
    if (act && !cJSON_IsString(act)) return dt_fail_format(err, "%s: key 'hidden_act' must be a string", path);
    /* transformers' ACT2FN maps "swish" to the same SiLU as "silu" */
    if (act && strcmp(act->valuestring, "silu") != 0 && strcmp(act->valuestring, "swish") != 0)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: hidden_act '%s' is not supported (only silu, or swish)",
                            path, act->valuestring);
    /* transformers' RoPE takes it from either place and rotates only that part of each head */
    const char *const partial_from[] = {NULL, "rope_parameters", "rope_scaling"};
    for (int i = 0; i < 3; i++) {
        const cJSON *obj = partial_from[i] ? get_key(root, partial_from[i]) : root;
        double f = 1;
        const int rc = cJSON_IsObject(obj) ? json_double(obj, "partial_rotary_factor", &f, path, err) : 0;
        if (rc < 0) return -1;
        if (f != 1)
            return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                "%s: %s%spartial_rotary_factor %g is not supported (RoPE rotates whole heads here)",
                                path, partial_from[i] ? partial_from[i] : "", partial_from[i] ? "." : "", f);
    }
    static const char *const biases[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        int on = 0;
        if (json_bool(root, biases[i], &on, path, err) < 0) return -1;
        if (on)
            return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: %s = true is not supported (bias-free layers only)", path,
                                biases[i]);
    }
    return 0;
}


/* rope_scaling (transformers ≤ 4.x) or rope_parameters (5.x, which also carries rope_theta):
 * {"rope_type" (or the older "type"): "linear" | "llama3" | "default", "factor", ...}. Every
 * other type changes the model in ways we do not implement, so it is refused by name. */
static int parse_rope_scaling(const cJSON *root, dt_config *c, const char *path, dt_error *err) {
    const char *key = "rope_scaling";
    const cJSON *rs = get_key(root, key);
    if (!rs) rs = get_key(root, key = "rope_parameters");
    memset(&c->rope_scaling, 0, sizeof c->rope_scaling);
    if (!rs) return 0;
    if (!cJSON_IsObject(rs)) return dt_fail_format(err, "%s: key '%s' must be an object", path, key);
    if (!strcmp(key, "rope_parameters")) {
        double theta = 0;
        int has = json_double(rs, "rope_theta", &theta, path, err);
        if (has < 0) return -1;
        if (has) c->rope_theta = (float)theta;
    }
    const cJSON *type = get_key(rs, "rope_type");
    if (!type) type = get_key(rs, "type");
    if (!type) return dt_fail_format(err, "%s: %s has no rope_type", path, key);
    if (!cJSON_IsString(type)) return dt_fail_format(err, "%s: %s.rope_type must be a string", path, key);
    dt_rope_scaling *r = &c->rope_scaling;
    const char *t = type->valuestring;
    if (!strcmp(t, "default")) return 0;
    if (!strcmp(t, "linear")) r->type = DT_ROPE_LINEAR;
    else if (!strcmp(t, "llama3")) r->type = DT_ROPE_LLAMA3;
    else
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: %s type '%s' is not supported (supported: linear, llama3)",
                            path, key, t);
    int rc = json_double(rs, "factor", &r->factor, path, err);
    if (rc == 0) return dt_fail_format(err, "%s: %s '%s' needs 'factor'", path, key, t);
    if (rc < 0 || r->type == DT_ROPE_LINEAR) return rc < 0 ? -1 : 0;
    static const char *const need[] = {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
    double *dst[] = {&r->low_freq_factor, &r->high_freq_factor, NULL};
    for (int i = 0; i < 3; i++) {
        rc = dst[i] ? json_double(rs, need[i], dst[i], path, err)
                    : json_int(rs, need[i], &r->original_max_position_embeddings, path, err);
        if (rc == 0) return dt_fail_format(err, "%s: %s 'llama3' needs '%s'", path, key, need[i]);
        if (rc < 0) return -1;
    }
    return 0;
}

/* A token id key: an integer, or (eos_token_id) a list of them. Negative ids mean "none", as
 * some configs write pad_token_id = -1. Returns 1 when present, 0 when absent, -1 on error. */
static int json_token_ids(const cJSON *obj, const char *key, int *ids, int max, int *n, const char *path,
                          dt_error *err) {
    const cJSON *v = get_key(obj, key);
    *n = 0;
    if (!v) return 0;
    if (cJSON_IsNumber(v)) {
        int id;
        if (json_int(obj, key, &id, path, err) < 0) return -1;
        if (id >= 0) ids[(*n)++] = id;
        return 1;
    }
    if (!cJSON_IsArray(v) || max == 1)
        return dt_fail_format(err, "%s: key '%s' must be an integer%s", path, key,
                              max > 1 ? " or a list of integers" : "");
    const cJSON *item;
    cJSON_ArrayForEach(item, v) {
        double d = cJSON_IsNumber(item) ? item->valuedouble : NAN;
        if (!(d == floor(d) && d >= INT_MIN && d <= INT_MAX))
            return dt_fail_format(err, "%s: key '%s' must hold integer token ids", path, key);
        if (d < 0) continue;
        if (*n == max) return dt_fail_format(err, "%s: key '%s' holds more than %d ids", path, key, max);
        ids[(*n)++] = (int)d;
    }
    return 1;
}

int special_ids_parse(const cJSON *root, dt_special_ids *s, const char *path, dt_error *err) {
    int n, id, rc;
    if ((rc = json_token_ids(root, "bos_token_id", &id, 1, &n, path, err)) < 0) return -1;
    if (rc) s->bos_token_id = n ? id : -1;
    if ((rc = json_token_ids(root, "pad_token_id", &id, 1, &n, path, err)) < 0) return -1;
    if (rc) s->pad_token_id = n ? id : -1;
    int eos[DT_MAX_EOS];
    if ((rc = json_token_ids(root, "eos_token_id", eos, DT_MAX_EOS, &n, path, err)) < 0) return -1;
    if (rc) {
        s->n_eos = n;
        memcpy(s->eos_token_id, eos, (size_t)n * sizeof(int));
    }
    return 0;
}

/* A string key of "difftrans" that names one of n choices: its index, -2 when absent, -1 on a bad
 * value (not a string: a format error; a string not among the choices: unsupported, as for
 * position). */
static int json_choice(const cJSON *ours, const char *key, const char *const *choices, int n, const char *path,
                       dt_error *err) {
    const cJSON *v = get_key(ours, key);
    if (!v) return -2;
    if (!cJSON_IsString(v)) return dt_fail_format(err, "%s: key 'difftrans.%s' must be a string", path, key);
    for (int i = 0; i < n; i++)
        if (strcmp(v->valuestring, choices[i]) == 0) return i;
    char list[128] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "", choices[i]);
    return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: difftrans.%s \"%s\" is not supported (expected %s)", path, key,
                        v->valuestring, list);
}

static int parse_flags(const cJSON *root, dt_config *c, const char *path, dt_error *err) {
    c->tie_word_embeddings = 0;
    c->use_subln_weight = 0;
    if (json_bool(root, "tie_word_embeddings", &c->tie_word_embeddings, path, err) < 0) return -1;
    const cJSON *ours = get_key(root, "difftrans");
    if (!ours) return 0;
    if (!cJSON_IsObject(ours)) return dt_fail_format(err, "%s: key 'difftrans' must be an object", path);
    /* Every key here changes what the model computes, so one this version does not know (a typo,
     * or a variant of a newer version) is refused: running the default model instead would be silent
     * misbehaviour. Keys outside "difftrans" are Hugging Face's and stay ignored. */
    static const char *const known[] = {"subln_weight", "softmax1", "head_norm", "fixed_lambda", "position",
                                        "v2_pairs",     "v2_lambda"};
    for (const cJSON *k = ours->child; k; k = k->next) {
        size_t i = 0;
        while (i < sizeof known / sizeof known[0] && strcmp(k->string, known[i]) != 0) i++;
        if (i == sizeof known / sizeof known[0])
            return dt_fail_format(err,
                                  "%s: difftrans.%s is not an option of this version (known: subln_weight, softmax1, "
                                  "head_norm, fixed_lambda, position, v2_pairs, v2_lambda)",
                                  path, k->string);
    }
    int head_norm = 1;
    if (json_bool(ours, "subln_weight", &c->use_subln_weight, path, err) < 0 ||
        json_bool(ours, "softmax1", &c->softmax1, path, err) < 0 ||
        json_bool(ours, "head_norm", &head_norm, path, err) < 0 ||
        json_bool(ours, "fixed_lambda", &c->fixed_lambda, path, err) < 0)
        return -1;
    c->no_head_norm = !head_norm;
    const cJSON *pos = get_key(ours, "position");
    if (pos) {
        if (!cJSON_IsString(pos)) return dt_fail_format(err, "%s: key 'difftrans.position' must be a string", path);
        if (strcmp(pos->valuestring, "rope") == 0) c->position = DT_POS_ROPE;
        else if (strcmp(pos->valuestring, "alibi") == 0) c->position = DT_POS_ALIBI;
        else if (strcmp(pos->valuestring, "none") == 0) c->position = DT_POS_NONE;
        else
            return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                "%s: difftrans.position '%s' is not supported (expected rope, alibi or none)", path,
                                pos->valuestring);
    }
    static const char *const pairs[] = {"2j,2j+1", "j,j+h"}, *const lambdas[] = {"sigmoid", "none", "linear"};
    int v;
    if ((v = json_choice(ours, "v2_pairs", pairs, 2, path, err)) == -1) return -1;
    if (v >= 0) c->v2_pairs = (dt_v2_pairs)v;
    if ((v = json_choice(ours, "v2_lambda", lambdas, 3, path, err)) == -1) return -1;
    if (v >= 0) c->v2_lambda = (dt_v2_lambda)v;
    return 0;
}

static int parse_config(const cJSON *root, dt_config *c, const char *path, dt_error *err) {
    if (!cJSON_IsObject(root)) return dt_fail_format(err, "%s: top level is not a JSON object", path);
    memset(c, 0, sizeof *c);
    c->special = dt_special_ids_none();
    if (parse_arch(root, &c->arch, path, err) || parse_sizes(root, c, path, err) || parse_reals(root, c, path, err) ||
        parse_unsupported(root, path, err) || parse_rope_scaling(root, c, path, err) ||
        parse_flags(root, c, path, err) || special_ids_parse(root, &c->special, path, err))
        return -1;
    return 0;
}

int dt_config_load(dt_config *cfg, const char *path, dt_error *err) {
    cJSON *root = json_load_file(path, err);
    if (!root) return -1;
    dt_config c;
    int rc = parse_config(root, &c, path, err);
    cJSON_Delete(root);
    if (rc != 0) return -1;
    if (dt_config_validate(&c, path, err) != 0) return fail_as_format(err);
    *cfg = c;
    return 0;
}

int generation_config_load(dt_special_ids *s, char **keep, const char *path, dt_error *err) {
    if (keep) *keep = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) return 1;
    cJSON *root = json_load_file(path, err);
    if (!root) return -1;
    dt_special_ids ids = *s;
    int rc = cJSON_IsObject(root) ? special_ids_parse(root, &ids, path, err)
                                  : dt_fail_format(err, "%s: top level is not a JSON object", path);
    char *text = rc == 0 && keep ? cJSON_PrintUnformatted(root) : NULL;
    if (rc == 0 && keep && !text) rc = dt_fail_oom(err, "%s: out of memory", path);
    cJSON_Delete(root);
    if (rc != 0) return rc;
    *s = ids;
    if (keep) { /* cJSON's allocation: the model frees its copy with free(); malloc, not strdup, whose
                   allocation is libc's own and escapes the fault tests' count (a free more than they saw) */
        const size_t n = strlen(text) + 1;
        if ((*keep = malloc(n))) memcpy(*keep, text, n);
        cJSON_free(text);
        if (!*keep) return dt_fail_oom(err, "%s: out of memory", path);
    }
    return 0;
}

int generation_config_save(const dt_special_ids *s, const char *kept, const char *path, dt_error *err) {
    cJSON *root = kept ? cJSON_Parse(kept) : cJSON_CreateObject(), *ids = cJSON_CreateObject();
    int ok = cJSON_IsObject(root) && ids && special_ids_add(ids, s) == 0;
    /* the ids in place (transformers writes the keys sorted), the other keys as they came */
    while (ok && ids->child) {
        cJSON *item = cJSON_DetachItemViaPointer(ids, ids->child);
        char key[16]; /* cJSON frees the item's own name before it copies the one given */
        snprintf(key, sizeof key, "%s", item->string);
        if (!cJSON_HasObjectItem(root, key)) {
            if (!(ok = cJSON_AddItemToObject(root, key, item))) cJSON_Delete(item);
        } else if (!(ok = cJSON_ReplaceItemInObjectCaseSensitive(root, key, item))) {
            cJSON_Delete(item);
        } else {
            /* cJSON puts the item in even when copying its name ran out of memory: a nameless key
             * (written as "") in root, which frees it */
            ok = item->string != NULL;
        }
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    cJSON_Delete(ids);
    if (!text) return dt_fail_oom(err, "%s: out of memory", path);
    int rc = write_text_atomic(path, text, err);
    cJSON_free(text);
    return rc;
}

int dt_model_generation_defaults(const dt_model *m, dt_generate_options *o, dt_error *err) {
    if (!m->generation_config) return 0;
    cJSON *root = cJSON_Parse(m->generation_config);
    if (!root) return dt_fail_oom(err, "generation_config.json: out of memory");
    const char *path = "generation_config.json";
    static const char *const keys[] = {"do_sample", "temperature", "top_k", "top_p", "min_p"};
    int sets = 0, sample = 0, top_k = 50, n_new = 0, has_new = 0, rc = 0;
    double temperature = 1, top_p = 1, min_p = 0;
    for (int i = 0; i < 5; i++) sets |= get_key(root, keys[i]) != NULL;
    if (json_bool(root, "do_sample", &sample, path, err) < 0 ||
        json_double(root, "temperature", &temperature, path, err) < 0 ||
        json_int(root, "top_k", &top_k, path, err) < 0 || json_double(root, "top_p", &top_p, path, err) < 0 ||
        json_double(root, "min_p", &min_p, path, err) < 0 ||
        (has_new = json_int(root, "max_new_tokens", &n_new, path, err)) < 0)
        rc = -1;
    else if (n_new < 0) rc = dt_fail_format(err, "%s: max_new_tokens %d is negative", path, n_new);
    else if (!(temperature >= 0 && temperature <= 100) || top_k < 0 || !(top_p > 0 && top_p <= 1) ||
             !(min_p >= 0 && min_p <= 1))
        rc = dt_fail_format(err,
                            "%s: sampling out of range (temperature %g in [0, 100], top_k %d >= 0, top_p %g in (0, 1], "
                            "min_p %g in [0, 1])",
                            path, temperature, top_k, top_p, min_p);
    cJSON_Delete(root);
    if (rc != 0) return -1;
    if (has_new) o->max_new_tokens = n_new;
    if (!sets) return 0;
    o->sampler = (dt_sampler){.temperature = sample ? (float)temperature : 0.0f,
                              .top_k = top_k,
                              .top_p = (float)top_p,
                              .min_p = (float)min_p};
    return 1;
}

/* ---------------------------------------------------------------- writing config.json */

/* The shortest decimal that reads back as the same float through the loader's path
 * (strtod, then a cast to float): 1e-5f is written "1e-05", not "9.99999974737875e-06". */
static double float_for_json(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f; /* exact; cJSON prints doubles with round-trip precision */
}

/* A double that reads back bit for bit and stays a JSON float ("2.0", not "2"): transformers
 * checks that rope_scaling factors are Python floats. */
static cJSON *add_raw_double(cJSON *obj, const char *key, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    for (int prec = 1; prec < 17; prec++) { /* the shortest form that reads back exactly */
        char shorter[40];
        snprintf(shorter, sizeof shorter, "%.*g", prec, v);
        if (strtod(shorter, NULL) == v) {
            memcpy(buf, shorter, sizeof buf);
            break;
        }
    }
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", sizeof buf - strlen(buf) - 1);
    return cJSON_AddRawToObject(obj, key, buf);
}

static int add_rope_scaling(cJSON *root, const dt_rope_scaling *r) {
    if (r->type == DT_ROPE_DEFAULT) return 0;
    cJSON *rs = cJSON_AddObjectToObject(root, "rope_scaling");
    int ok = rs && cJSON_AddStringToObject(rs, "rope_type", r->type == DT_ROPE_LLAMA3 ? "llama3" : "linear");
    ok = ok && add_raw_double(rs, "factor", r->factor);
    if (ok && r->type == DT_ROPE_LLAMA3) {
        ok = add_raw_double(rs, "low_freq_factor", r->low_freq_factor) &&
             add_raw_double(rs, "high_freq_factor", r->high_freq_factor) &&
             cJSON_AddNumberToObject(rs, "original_max_position_embeddings", r->original_max_position_embeddings);
    }
    return ok ? 0 : -1;
}

/* bos/eos/pad as transformers writes them: an integer, a list for several eos ids, null for none. */
int special_ids_add(cJSON *root, const dt_special_ids *s) {
    int ok = s->bos_token_id >= 0 ? cJSON_AddNumberToObject(root, "bos_token_id", s->bos_token_id) != NULL
                                  : cJSON_AddNullToObject(root, "bos_token_id") != NULL;
    if (ok && s->n_eos == 1) ok = cJSON_AddNumberToObject(root, "eos_token_id", s->eos_token_id[0]) != NULL;
    else if (ok && s->n_eos > 1) {
        cJSON *list = cJSON_CreateIntArray(s->eos_token_id, s->n_eos);
        ok = list && cJSON_AddItemToObject(root, "eos_token_id", list);
        if (!ok) cJSON_Delete(list);
    } else if (ok) ok = cJSON_AddNullToObject(root, "eos_token_id") != NULL;
    if (ok) ok = s->pad_token_id >= 0 ? cJSON_AddNumberToObject(root, "pad_token_id", s->pad_token_id) != NULL
                                      : cJSON_AddNullToObject(root, "pad_token_id") != NULL;
    return ok ? 0 : -1;
}

static cJSON *config_to_json(const dt_config *c, dt_dtype dtype) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    static const char *const class_names[] = {"LlamaForCausalLM", "DiffLlamaForCausalLM", "DiffTransV2ForCausalLM"};
    cJSON *archs = cJSON_AddArrayToObject(root, "architectures");
    int ok = archs && cJSON_AddItemToArray(archs, cJSON_CreateString(class_names[c->arch]));
    ok = ok && cJSON_AddStringToObject(root, "model_type", dt_arch_name(c->arch));
    ok = ok && cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
    ok = ok && cJSON_AddNumberToObject(root, "hidden_size", c->hidden_size);
    ok = ok && cJSON_AddNumberToObject(root, "intermediate_size", c->intermediate_size);
    ok = ok && cJSON_AddNumberToObject(root, "num_hidden_layers", c->num_hidden_layers);
    ok = ok && cJSON_AddNumberToObject(root, "num_attention_heads", c->num_attention_heads);
    ok = ok && cJSON_AddNumberToObject(root, "num_key_value_heads", c->num_key_value_heads);
    ok = ok && cJSON_AddNumberToObject(root, "head_dim", c->head_dim);
    ok = ok && cJSON_AddNumberToObject(root, "max_position_embeddings", c->max_position_embeddings);
    ok = ok && cJSON_AddNumberToObject(root, "rms_norm_eps", float_for_json(c->rms_norm_eps));
    ok = ok && cJSON_AddNumberToObject(root, "rope_theta", float_for_json(c->rope_theta));
    ok = ok && cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tie_word_embeddings);
    ok = ok && cJSON_AddStringToObject(root, "hidden_act", "silu");
    ok = ok && cJSON_AddBoolToObject(root, "attention_bias", 0);
    ok = ok && cJSON_AddBoolToObject(root, "mlp_bias", 0);
    const char *torch_dtype = dtype == DT_BF16 ? "bfloat16" : dtype == DT_F16 ? "float16" : "float32";
    ok = ok && cJSON_AddStringToObject(root, "torch_dtype", torch_dtype);
    ok = ok && cJSON_AddNumberToObject(root, "lambda_std_dev", float_for_json(c->lambda_std_dev));
    ok = ok && add_rope_scaling(root, &c->rope_scaling) == 0;
    ok = ok && special_ids_add(root, &c->special) == 0;
    /* Our own section only when one of our extensions is in use, so that a plain model (and an
     * HF export, which folds subln away) is a pure Hugging Face config; absent means the default
     * (the paper's model). */
    if (ok && (c->use_subln_weight || c->position != DT_POS_ROPE || c->softmax1 || c->no_head_norm || c->fixed_lambda ||
               c->v2_pairs != DT_V2_PAIRS_GROUP || c->v2_lambda != DT_V2_LAMBDA_SIGMOID)) {
        static const char *const positions[] = {"rope", "alibi", "none"};
        cJSON *ours = cJSON_AddObjectToObject(root, "difftrans");
        ok = ours != NULL;
        if (ok && c->use_subln_weight) ok = cJSON_AddBoolToObject(ours, "subln_weight", 1) != NULL;
        if (ok && c->position != DT_POS_ROPE) ok = cJSON_AddStringToObject(ours, "position", positions[c->position]) != NULL;
        if (ok && c->softmax1) ok = cJSON_AddBoolToObject(ours, "softmax1", 1) != NULL;
        if (ok && c->no_head_norm) ok = cJSON_AddBoolToObject(ours, "head_norm", 0) != NULL;
        if (ok && c->fixed_lambda) ok = cJSON_AddBoolToObject(ours, "fixed_lambda", 1) != NULL;
        /* the mapping itself as the value: output head j subtracts query head j + h from query head j */
        if (ok && c->v2_pairs == DT_V2_PAIRS_CROSS) ok = cJSON_AddStringToObject(ours, "v2_pairs", "j,j+h") != NULL;
        if (ok && c->v2_lambda != DT_V2_LAMBDA_SIGMOID)
            ok = cJSON_AddStringToObject(ours, "v2_lambda", c->v2_lambda == DT_V2_LAMBDA_NONE ? "none" : "linear") !=
                 NULL;
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int dt_config_save(const dt_config *cfg, const char *path, dt_error *err) {
    return config_save_dtype(cfg, path, DT_F32, err);
}

int config_save_dtype(const dt_config *cfg, const char *path, dt_dtype dtype, dt_error *err) {
    /* never write a config that the loader would refuse */
    if (dt_config_validate(cfg, path, err) != 0) return -1;
    cJSON *root = config_to_json(cfg, dtype);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return dt_fail_oom(err, "%s: out of memory building config.json", path);
    int rc = write_text_atomic(path, text, err);
    cJSON_free(text);
    return rc;
}
