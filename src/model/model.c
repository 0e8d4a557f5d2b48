/* model.c — the model's parameter layout (the one place it is described), allocation,
 * initialisation, and checkpoint directories (config.json + model.safetensors + tokenizer). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "difftrans.h"
#include "model/gguf_model.h"
#include "model/model_quant.h"
#include "internal.h"
#include "base/base.h"

/* ---------------------------------------------------------------- layout */

typedef struct {
    dt_tensor *t;
    int n;
    size_t cap, offset;
} layout_builder;

static int layout_add(layout_builder *lb, const char *name, int64_t d0, int64_t d1, int decay) {
    if (grow_array(&lb->t, &lb->cap, (size_t)lb->n + 1, sizeof *lb->t, 64) != 0) return -1;
    dt_tensor *t = &lb->t[lb->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    t->offset = lb->offset;
    t->decay = decay;
    lb->offset += t->numel;
    return 0;
}

/* Every parameter of a model, in checkpoint order, with its HF name and shape. */
static int build_layout(const dt_config *c, layout_builder *lb) {
    const int C = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    const int qdim = c->num_attention_heads * hd, kvdim = c->num_key_value_heads * hd;
    /* DIFF V2: o_proj reads the h = H/2 combined heads */
    const int odim = c->arch == DT_ARCH_DIFF_V2 ? qdim / 2 : qdim;
    char name[96];
    int rc = layout_add(lb, "model.embed_tokens.weight", c->vocab_size, C, 1);
    for (int l = 0; l < c->num_hidden_layers && rc == 0; l++) {
#define ADD(suffix, d0, d1, decay)                                                \
    do {                                                                          \
        snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);            \
        if (rc == 0) rc = layout_add(lb, name, d0, d1, decay);                    \
    } while (0)
        ADD("input_layernorm.weight", C, 0, 0);
        ADD("self_attn.q_proj.weight", qdim, C, 1);
        ADD("self_attn.k_proj.weight", kvdim, C, 1);
        ADD("self_attn.v_proj.weight", kvdim, C, 1);
        ADD("self_attn.o_proj.weight", C, odim, 1);
        if (c->arch == DT_ARCH_DIFF) {
            if (!c->fixed_lambda) {
                ADD("self_attn.lambda_q1", hd, 0, 0);
                ADD("self_attn.lambda_k1", hd, 0, 0);
                ADD("self_attn.lambda_q2", hd, 0, 0);
                ADD("self_attn.lambda_k2", hd, 0, 0);
            }
            if (c->use_subln_weight) ADD("self_attn.subln.weight", 2 * hd, 0, 0);
        }
        if (c->arch == DT_ARCH_DIFF_V2 && c->v2_lambda != DT_V2_LAMBDA_NONE)
            ADD("self_attn.lambda_proj.weight", c->num_attention_heads / 2, C, 1);
        ADD("post_attention_layernorm.weight", C, 0, 0);
        ADD("mlp.gate_proj.weight", F, C, 1);
        ADD("mlp.up_proj.weight", F, C, 1);
        ADD("mlp.down_proj.weight", C, F, 1);
#undef ADD
    }
    if (rc == 0) rc = layout_add(lb, "model.norm.weight", C, 0, 0);
    if (rc == 0 && !c->tie_word_embeddings) rc = layout_add(lb, "lm_head.weight", c->vocab_size, C, 1);
    return rc;
}

void dt_weights_view(const dt_model *m, float *buf, dt_weights *w, dt_layer_weights *layers) {
    const dt_config *c = &m->cfg;
    const dt_tensor *t = m->tensors;
    memset(layers, 0, (size_t)c->num_hidden_layers * sizeof *layers);
    w->layers = layers;
    w->embed_tokens = buf + (t++)->offset;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        dt_layer_weights *lw = &layers[l];
        lw->input_layernorm = buf + (t++)->offset;
        lw->q_proj = buf + (t++)->offset;
        lw->k_proj = buf + (t++)->offset;
        lw->v_proj = buf + (t++)->offset;
        lw->o_proj = buf + (t++)->offset;
        if (c->arch == DT_ARCH_DIFF) {
            if (!c->fixed_lambda) {
                lw->lambda_q1 = buf + (t++)->offset;
                lw->lambda_k1 = buf + (t++)->offset;
                lw->lambda_q2 = buf + (t++)->offset;
                lw->lambda_k2 = buf + (t++)->offset;
            }
            if (c->use_subln_weight) lw->subln = buf + (t++)->offset;
        }
        if (c->arch == DT_ARCH_DIFF_V2 && c->v2_lambda != DT_V2_LAMBDA_NONE) lw->lambda_proj = buf + (t++)->offset;
        lw->post_attention_layernorm = buf + (t++)->offset;
        lw->gate_proj = buf + (t++)->offset;
        lw->up_proj = buf + (t++)->offset;
        lw->down_proj = buf + (t++)->offset;
    }
    w->norm = buf + (t++)->offset;
    w->lm_head = c->tie_word_embeddings ? w->embed_tokens : buf + (t++)->offset;
}

size_t dt_config_param_count(const dt_config *cfg) {
    dt_error err;
    layout_builder lb = {0};
    if (dt_config_validate(cfg, "config", &err) != 0 || build_layout(cfg, &lb) != 0) {
        free(lb.t);
        return 0;
    }
    free(lb.t);
    return lb.offset;
}

size_t dt_config_nonembedding_param_count(const dt_config *cfg) {
    const size_t n = dt_config_param_count(cfg), emb = (size_t)cfg->vocab_size * cfg->hidden_size;
    if (n == 0) return 0;
    return n - emb - (cfg->tie_word_embeddings ? 0 : emb);
}

/* The tensor table of cfg (names, shapes, offsets) without the parameters themselves. */
static int model_layout(dt_model *m, const dt_config *cfg, dt_error *err) {
    memset(m, 0, sizeof *m);
    if (dt_config_validate(cfg, "config", err) != 0) return -1;
    m->cfg = *cfg;
    layout_builder lb = {0};
    if (build_layout(cfg, &lb) != 0) {
        free(lb.t);
        return dt_fail_oom(err, "out of memory building the model layout");
    }
    m->tensors = lb.t;
    m->n_tensors = lb.n;
    m->n_params = lb.offset;
    return 0;
}

/* Zeroed parameters for a model whose layout is built; frees the model on failure. */
static int model_alloc(dt_model *m, dt_error *err) {
    const dt_config *cfg = &m->cfg;
    m->params = calloc_aligned(m->n_params, sizeof(float));
    m->w.layers = calloc((size_t)cfg->num_hidden_layers, sizeof(dt_layer_weights));
    m->rope_inv_freq = malloc((size_t)(cfg->head_dim / 2 + 1) * sizeof(float));
    if (!m->params || !m->w.layers || !m->rope_inv_freq) {
        size_t n = m->n_params;
        dt_model_free(m);
        return dt_fail_oom(err, "out of memory allocating %zu parameters (%.1f MB)", n, (double)n * 4 / 1e6);
    }
    dt_weights_view(m, m->params, &m->w, m->w.layers);
    dt_rope_inv_freq(cfg, m->rope_inv_freq);
    return 0;
}

int dt_model_create(dt_model *m, const dt_config *cfg, dt_error *err) {
    if (model_layout(m, cfg, err) != 0) return -1;
    return model_alloc(m, err);
}

void dt_model_free(dt_model *m) {
    model_quant_free(m);
    vocab_free(&m->vocab);
    free(m->generation_config);
    free(m->tensors);
    free(m->params);
    free(m->w.layers);
    free(m->rope_inv_freq);
    memset(m, 0, sizeof *m);
}

const dt_tensor *dt_model_find(const dt_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

static int is_norm_weight(const dt_tensor *t) {
    size_t n = strlen(t->name);
    return !t->decay && n > 7 && strcmp(t->name + n - 7, ".weight") == 0;
}

void dt_model_init_random(dt_model *m, uint64_t seed) {
    uint64_t rng = seed;
    for (int i = 0; i < m->n_tensors; i++) {
        const dt_tensor *t = &m->tensors[i];
        float *p = m->params + t->offset;
        if (t->decay) {
            for (size_t j = 0; j < t->numel; j++) p[j] = 0.02f * dt_rng_normal(&rng);
        } else if (is_norm_weight(t)) {
            for (size_t j = 0; j < t->numel; j++) p[j] = 1.0f;
        } else { /* λ vectors */
            for (size_t j = 0; j < t->numel; j++) p[j] = m->cfg.lambda_std_dev * dt_rng_normal(&rng);
        }
    }
}

float dt_model_lambda(const dt_model *m, int layer) {
    if (layer < 0 || layer >= m->cfg.num_hidden_layers) return NAN;
    if (m->cfg.arch != DT_ARCH_DIFF) return 0.0f;
    if (m->cfg.fixed_lambda) return dt_lambda_init(layer);
    const dt_layer_weights *lw = &m->w.layers[layer];
    float d1 = 0, d2 = 0;
    for (int i = 0; i < m->cfg.head_dim; i++) {
        d1 += lw->lambda_q1[i] * lw->lambda_k1[i];
        d2 += lw->lambda_q2[i] * lw->lambda_k2[i];
    }
    return expf(d1) - expf(d2) + dt_lambda_init(layer);
}

/* ---------------------------------------------------------------- checkpoints */

static int tensor_shape_matches(const dt_st_tensor *st, const dt_tensor *t) {
    if (st->ndim != t->ndim) return 0;
    for (int d = 0; d < t->ndim; d++)
        if (st->shape[d] != t->shape[d]) return 0;
    return 1;
}

static void format_shape(char *out, size_t n, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < ndim && used < n; d++)
        used += (size_t)snprintf(out + used, n - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (used < n) snprintf(out + used, n - used, "]");
}

/* A tensor of the checkpoint against the layout config.json implies. */
static int check_tensor(const dt_st_set *set, const dt_tensor *t, const char *dir, dt_error *err) {
    const dt_safetensors *file = NULL;
    const dt_st_tensor *s = dt_st_set_find(set, t->name, &file);
    if (!s) {
        if (set->sharded)
            return dt_fail_format(err, "%s/model.safetensors.index.json: missing tensor '%s'", dir, t->name);
        return dt_fail_format(err, "%s: missing tensor '%s'", set->files[0].path, t->name);
    }
    if (!tensor_shape_matches(s, t)) {
        char want[64], got[64];
        format_shape(want, sizeof want, t->ndim, t->shape);
        format_shape(got, sizeof got, s->ndim, s->shape);
        return dt_fail_format(err, "%s: tensor '%s' has shape %s but config.json implies %s", file->path, t->name, got,
                              want);
    }
    /* integers in a float slot are another format's codes (bitsandbytes, GPTQ), never the weights */
    if (s->dtype != DT_F32 && s->dtype != DT_F16 && s->dtype != DT_BF16)
        return dt_fail_format(err,
                              "%s: tensor '%s' is %s, not a float (F32, F16, BF16); config.json has no "
                              "quantization_config that would read it",
                              file->path, t->name, s->dtype == DT_I8 ? "I8" : "U8");
    return 0;
}

/* Why config.json leaves a tensor of the checkpoint unused, for its error: biases and λ vectors
 * name the key that would have used them. */
static const char *unused_tensor_reason(const dt_config *c, const char *name) {
    const size_t n = strlen(name);
    if (n > 5 && strcmp(name + n - 5, ".bias") == 0)
        return strstr(name, ".mlp.") ? "a bias, and config.json's mlp_bias is false (bias-free layers only)"
                                     : "a bias, and config.json's attention_bias is false (bias-free layers only)";
    const int lambda = strstr(name, ".self_attn.lambda_") && !strstr(name, ".lambda_proj.");
    if (lambda && c->arch != DT_ARCH_DIFF) return "a DiffLlama λ vector, and config.json's model_type is not diffllama";
    if (lambda && c->fixed_lambda)
        return "a λ vector, and config.json says difftrans.fixed_lambda";
    if (strcmp(name, "lm_head.weight") == 0 && c->tie_word_embeddings)
        return "not of the embedding's shape, and config.json's tie_word_embeddings is true";
    int layer;
    if (sscanf(name, "model.layers.%d.", &layer) == 1 && layer >= c->num_hidden_layers)
        return "of a layer past config.json's num_hidden_layers";
    return "not a parameter of the model config.json describes";
}

/* A tensor of the checkpoint that the model does not read would be dropped without a word, and
 * the model then computes something else than its writer's (a bias, a layer more, a λ under
 * model_type llama; transformers itself only warns). RoPE's inverse frequencies, which older
 * transformers saved, are recomputed from config.json as transformers does; the quantised
 * layers' tensors are checked by their loader. */
static int check_no_unused_tensor(const dt_model *m, const dt_st_set *set, const dt_quant_options *quant,
                                  dt_error *err) {
    for (int f = 0; f < set->n_files; f++)
        for (int i = 0; i < set->files[f].n; i++) {
            const char *name = set->files[f].tensors[i].name;
            const size_t n = strlen(name), k = strlen(".rotary_emb.inv_freq");
            if (dt_model_find(m, name) || (n > k && strcmp(name + n - k, ".rotary_emb.inv_freq") == 0)) continue;
            if (strcmp(name, "lm_head.weight") == 0 && m->cfg.tie_word_embeddings &&
                tensor_shape_matches(&set->files[f].tensors[i], dt_model_find(m, "model.embed_tokens.weight")))
                continue; /* compared with the embedding below */
            int quantised = 0; /* "X.qweight", "X.scales", ... of a replaced "X.weight" */
            const char *dot = strrchr(name, '.');
            for (int t = 0; dot && t < m->n_tensors && !quantised; t++) {
                const char *tn = m->tensors[t].name;
                quantised = quant_replaces_tensor(quant, tn) && strncmp(tn, name, (size_t)(dot - name) + 1) == 0 &&
                            strcmp(tn + (dot - name), ".weight") == 0;
            }
            if (!quantised)
                return dt_fail_format(err, "%s: tensor '%s' is %s", set->files[f].path, name,
                                      unused_tensor_reason(&m->cfg, name));
        }
    return 0;
}

/* Its values (checked by check_tensor) into p, all finite. */
static int read_tensor(const dt_st_set *set, const dt_tensor *t, float *p, dt_error *err) {
    const dt_safetensors *file = NULL;
    const dt_st_tensor *s = dt_st_set_find(set, t->name, &file);
    dt_st_read_f32(file, s, p);
    for (size_t j = 0; j < t->numel; j++)
        if (!isfinite(p[j]))
            return dt_fail_format(err, "%s: tensor '%s' holds a non-finite value (%g) at index %zu", file->path,
                                  t->name, (double)p[j], j);
    return 0;
}

int checkpoint_pending(const char *dir, char *stage, size_t n) {
    char last[4400];
    struct stat sb;
    if (dt_pathf(stage, n, NULL, "%s/%s", dir, CHECKPOINT_STAGE) ||
        dt_pathf(last, sizeof last, NULL, "%s/%s", stage, CHECKPOINT_LAST))
        return 0;
    return stat(last, &sb) == 0;
}

static int load_dir(dt_model *m, const char *dir, dt_error *err);

int dt_model_load(dt_model *m, const char *dir, dt_error *err) {
    memset(m, 0, sizeof *m);
    if (gguf_model_path(dir)) return gguf_model_load(m, dir, err); /* a GGUF file (llama.cpp's format) */
    struct stat sb;
    if (stat(dir, &sb) != 0) return dt_fail_io(err, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return dt_fail_io(err, "%s: not a model directory", dir);
    /* a training run killed inside a checkpoint's commit left DIR part new, part old: the new
     * checkpoint is whole in its stage until the next resume finishes the commit (a reader must not) */
    char stage[4200];
    if (checkpoint_pending(dir, stage, sizeof stage)) {
        if (load_dir(m, stage, err) == 0) return 0;
        /* a running commit that finished meanwhile took the stage away: DIR is whole again */
        if (checkpoint_pending(dir, stage, sizeof stage)) return -1;
    }
    return load_dir(m, dir, err);
}

static int load_dir(dt_model *m, const char *dir, dt_error *err) {
    char path[4200];
    dt_config cfg;
    memset(m, 0, sizeof *m);
    if (dt_pathf(path, sizeof path, err, "%s/config.json", dir) || dt_config_load(&cfg, path, err)) return -1;
    dt_quant_options quant; /* a quantised checkpoint: its linear layers are integer tensors */
    if (quant_config_read(path, &quant, err) != 0) return -1;
    /* generation_config.json's token ids take precedence over config.json's, as in transformers */
    char *gen = NULL; /* the file's other keys, for every save of the model */
    if (dt_pathf(path, sizeof path, err, "%s/generation_config.json", dir) ||
        generation_config_load(&cfg.special, &gen, path, err) < 0)
        return -1;
    if (dt_config_validate(&cfg, path, err) != 0) {
        free(gen);
        return fail_as_format(err);
    }
    dt_vocab vocab; /* read before the weights: a vocabulary that does not fit is refused cheaply */
    if (vocab_load_dir(&vocab, dir, &cfg, err) != 0) {
        free(gen);
        return -1;
    }

    dt_st_set set;
    if (dt_st_set_open(&set, dir, err) != 0) {
        vocab_free(&vocab);
        free(gen);
        return -1;
    }
    /* A checkpoint written by HF without our "difftrans" key may still carry subln weights. */
    if (cfg.arch == DT_ARCH_DIFF && !cfg.use_subln_weight) {
        for (int f = 0; f < set.n_files; f++)
            for (int i = 0; i < set.files[f].n; i++)
                if (strstr(set.files[f].tensors[i].name, ".self_attn.subln.weight")) cfg.use_subln_weight = 1;
    }
    /* A trained W_λ under a config without one (v2_lambda "none") would be dropped unseen */
    if (cfg.arch == DT_ARCH_DIFF_V2 && cfg.v2_lambda == DT_V2_LAMBDA_NONE) {
        for (int f = 0; f < set.n_files; f++)
            for (int i = 0; i < set.files[f].n; i++)
                if (strstr(set.files[f].tensors[i].name, ".self_attn.lambda_proj.")) {
                    const int rc = dt_fail_format(err,
                                                  "%s: tensor '%s' is a W_λ, but config.json says difftrans.v2_lambda "
                                                  "\"none\" (a model without one)",
                                                  set.files[f].path, set.files[f].tensors[i].name);
                    dt_st_set_close(&set);
                    vocab_free(&vocab);
                    free(gen);
                    return rc;
                }
    }
    /* Every tensor is checked against config.json before the parameters are allocated: a config
     * that lies about the sizes gets its real error, not an out-of-memory from its claimed size. */
    if (model_layout(m, &cfg, err) != 0) {
        dt_st_set_close(&set);
        vocab_free(&vocab);
        free(gen);
        return -1;
    }
    m->vocab = vocab; /* dt_model_free frees them from here on */
    m->generation_config = gen;
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        /* the tensors config.json expects first: a config that lies about the sizes is named so */
        if (pass == 1 && (rc = check_no_unused_tensor(m, &set, &quant, err)) != 0) break;
        if (pass == 1 && model_alloc(m, err) != 0) {
            dt_st_set_close(&set);
            return -1;
        }
        for (int i = 0; i < m->n_tensors && rc == 0; i++) {
            const dt_tensor *t = &m->tensors[i];
            if (quant_replaces_tensor(&quant, t->name)) continue; /* its float slot stays zero and untouched */
            rc = pass == 0 ? check_tensor(&set, t, dir, err) : read_tensor(&set, t, m->params + t->offset, err);
        }
    }
    if (rc == 0 && quant.scheme != DT_QUANT_NONE) {
        rc = set.sharded
                 ? dt_fail_format(err, "%s: a quantised checkpoint is read from one model.safetensors, not shards", dir)
                 : quant_load_tensors(m, &set.files[0], &quant, err);
    }
    /* Tied checkpoints sometimes also store lm_head; accept it only if it equals the embedding. */
    if (rc == 0 && cfg.tie_word_embeddings && !quant.lm_head) {
        const dt_safetensors *file = NULL;
        const dt_st_tensor *s = dt_st_set_find(&set, "lm_head.weight", &file);
        if (s && tensor_shape_matches(s, dt_model_find(m, "model.embed_tokens.weight"))) {
            float *tmp = malloc(s->numel * sizeof(float));
            snprintf(path, sizeof path, "%s", file->path);
            if (!tmp) rc = dt_fail_oom(err, "out of memory");
            else {
                dt_st_read_f32(file, s, tmp);
                if (memcmp(tmp, m->w.embed_tokens, s->numel * sizeof(float)) != 0)
                    rc = dt_fail_format(
                        err, "%s: tie_word_embeddings is true but lm_head.weight differs from the embedding", path);
                free(tmp);
            }
        }
    }
    dt_st_set_close(&set);
    if (rc != 0) dt_model_free(m);
    return rc;
}

const char *dt_config_hf_unsupported(const dt_config *c) {
    if (c->arch == DT_ARCH_DIFF_V2) return "model_type difftrans_v2 (DIFF V2)";
    if (c->position == DT_POS_ALIBI) return "difftrans.position = alibi";
    if (c->position == DT_POS_NONE) return "difftrans.position = none";
    if (c->softmax1) return "difftrans.softmax1";
    if (c->no_head_norm) return "difftrans.head_norm = false";
    return NULL;
}

int dt_model_save(const dt_model *m, const char *dir, int hf_export, dt_error *err) {
    dt_save_options opt = {.hf_export = hf_export, .dtype = DT_F32, .max_shard_bytes = 0};
    return dt_model_save_with(m, dir, &opt, err);
}

/* After a failed save into a directory the save created: its files (every one of them the save's)
 * and the directory go, best effort (the save's error is the one to report). A full disk at
 * config.json left a new directory holding model.safetensors alone, which looked like a
 * checkpoint and failed to load. */
static void remove_created_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            char path[4200];
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                dt_pathf(path, sizeof path, NULL, "%s/%s", dir, e->d_name) == 0)
                unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static int save_dir(const dt_model *m, const char *dir, const dt_save_options *opt, dt_error *err);

int dt_model_save_with(const dt_model *m, const char *dir, const dt_save_options *opt, dt_error *err) {
    if (m->quant) return save_dir(m, dir, opt, err); /* a new directory, written whole or not at all */
    struct stat sb;
    const int is_new = stat(dir, &sb) != 0 && errno == ENOENT;
    const int rc = save_dir(m, dir, opt, err);
    if (rc != 0 && is_new && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_created_dir(dir);
    return rc;
}

static int save_dir(const dt_model *m, const char *dir, const dt_save_options *opt, dt_error *err) {
    const int hf_export = opt->hf_export;
    if (opt->dtype != DT_F32 && opt->dtype != DT_F16 && opt->dtype != DT_BF16)
        return dt_fail(err, "%s: cannot store weights as dtype %d", dir, (int)opt->dtype);
    char path[4200];
    if (m->quant && hf_export)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: a quantised model (%s) cannot be written in the Hugging Face form: write the "
                            "float model it was made from",
                            dir, dt_quant_scheme_name(m->quant->opt.scheme));
    /* the quantised layout has one file and F32 float tensors: either option was dropped without a word */
    if (m->quant && (opt->dtype != DT_F32 || opt->max_shard_bytes))
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: a quantised model (%s) is written as one model.safetensors with its float tensors "
                            "in F32: %s applies to float models (write the float model it was made from)",
                            dir, dt_quant_scheme_name(m->quant->opt.scheme),
                            opt->dtype != DT_F32 ? "dtype" : "max_shard_bytes");
    if (m->quant) return quant_save(m, dir, err);
    const char *unsupported = hf_export ? dt_config_hf_unsupported(&m->cfg) : NULL;
    if (unsupported)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: cannot export for Hugging Face: transformers has no equivalent of %s", dir,
                            unsupported);
    if (dir_ensure(dir, err) != 0) return -1;
    dt_config cfg = m->cfg;
    const float *params = m->params;
    float *folded = NULL;
    if (hf_export && cfg.arch == DT_ARCH_DIFF && cfg.use_subln_weight) {
        /* HF DiffLlama's per-head norm has no weight: o = W_o (s ⊙ u) = (W_o diag(s)) u, so fold
         * subln into o_proj's columns, repeated for every differential head. */
        folded = malloc(m->n_params * sizeof(float));
        if (!folded) return dt_fail_oom(err, "out of memory");
        memcpy(folded, params, m->n_params * sizeof(float));
        const int C = cfg.hidden_size, width = cfg.num_attention_heads * cfg.head_dim, w2 = 2 * cfg.head_dim;
        for (int l = 0; l < cfg.num_hidden_layers; l++) {
            const dt_layer_weights *lw = &m->w.layers[l];
            float *o = folded + (lw->o_proj - m->params);
            for (int r = 0; r < C; r++)
                for (int col = 0; col < width; col++) o[(size_t)r * width + col] *= lw->subln[col % w2];
        }
        params = folded;
        cfg.use_subln_weight = 0;
    }
    /* fixed λ = λinit is diffllama with λ vectors of zeros: exp(0) − exp(0) + λinit */
    const int zero_lambdas = hf_export && cfg.arch == DT_ARCH_DIFF && cfg.fixed_lambda;
    const int n_extra = zero_lambdas ? 4 * cfg.num_hidden_layers : 0;
    dt_st_entry *entries = calloc((size_t)m->n_tensors + n_extra, sizeof *entries);
    char(*extra_names)[96] = n_extra ? calloc((size_t)n_extra, sizeof *extra_names) : NULL;
    float *zeros = n_extra ? calloc((size_t)cfg.head_dim, sizeof(float)) : NULL;
    if (!entries || (n_extra && (!extra_names || !zeros))) {
        free(entries);
        free(extra_names);
        free(zeros);
        free(folded);
        return dt_fail_oom(err, "out of memory");
    }
    int n = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const dt_tensor *t = &m->tensors[i];
        if (cfg.arch == DT_ARCH_DIFF && !cfg.use_subln_weight && strstr(t->name, ".subln.weight")) continue;
        entries[n].name = t->name;
        entries[n].ndim = t->ndim;
        entries[n].shape[0] = t->shape[0];
        entries[n].shape[1] = t->shape[1];
        entries[n].data = params + t->offset;
        entries[n].dtype = opt->dtype;
        n++;
    }
    for (int i = 0; i < n_extra; i++) {
        static const char *const which[] = {"q1", "k1", "q2", "k2"};
        snprintf(extra_names[i], sizeof extra_names[i], "model.layers.%d.self_attn.lambda_%s", i / 4, which[i % 4]);
        entries[n] = (dt_st_entry){.name = extra_names[i], .ndim = 1, .shape = {cfg.head_dim}, .data = zeros, .dtype = opt->dtype};
        n++;
    }
    if (zero_lambdas) cfg.fixed_lambda = 0;
    /* save_pretrained shards the state dict in its order: the same tensors go to the same shards */
    if (hf_export) st_entries_state_dict_order(entries, n);
    int rc = dt_st_write_dir(dir, entries, n, opt->max_shard_bytes, err);
    if (rc == 0) rc = dt_pathf(path, sizeof path, err, "%s/config.json", dir);
    if (rc == 0) rc = config_save_dtype(&cfg, path, opt->dtype, err);
    if (rc == 0) rc = dt_pathf(path, sizeof path, err, "%s/generation_config.json", dir);
    if (rc == 0) rc = generation_config_save(&cfg.special, m->generation_config, path, err);
    if (rc == 0) rc = vocab_save(&m->vocab, dir, hf_export, err);
    free(entries);
    free(extra_names);
    free(zeros);
    free(folded);
    return rc;
}
