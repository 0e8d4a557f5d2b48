/* difftrans.h — the one public header of libdifftrans.
 *
 * The Differential Transformer (Ye et al., ICLR 2025) and the matching LLaMA-style baseline,
 * with Hugging Face `diffllama` / `llama` checkpoint semantics. See README.md for the model
 * contract and the checkpoint format.
 *
 * Conventions
 *   - Every function that can fail returns 0 on success and -1 on failure, with a message in
 *     the caller's dt_error naming the file or argument and the problem, and a code saying
 *     which kind of failure it is (dt_errcode). The library never exits the process, except
 *     to end a data-parallel job whose ranks stopped responding (MPI_Abort, dt_comm_create).
 *   - No global state: two models (or two training runs) can live in one process.
 *   - Threads: a function taking `const dt_model *` only reads the model, so any number of threads
 *     may run such functions on one model at once, each with its own dt_runstate, dt_kvcache or
 *     dt_batch (those are one thread's at a time). Functions taking `dt_model *` (load, create,
 *     free, init_random, quantize, dequantize, set_tokenizer) need the model to themselves. The
 *     compute runs on the calling thread's OpenMP team (omp_set_num_threads sets its size).
 *   - Output: the library writes nothing to stdout. Long jobs (dt_train, dt_tok_train,
 *     dt_tokenize, calibrating dt_model_quantize) print progress on stderr unless their options'
 *     `quiet` is set, and their *_defaults leave it 0: a program that wants silence sets it.
 *   - A dt_model whose dt_model_load or dt_model_create failed is left zeroed: dt_model_free on
 *     it is harmless, as on a freed one. Outputs a function allocates (*ids, *text, *tokens) are
 *     the caller's to free() on success only.
 *   - Shapes are written [B, T, C] etc.; matrices use PyTorch Linear layout [out, in], row-major.
 */
#ifndef DIFFTRANS_H
#define DIFFTRANS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */

/* What kind of failure an error is: what its caller can do about it, without reading the
 * message. The values are stable (the CLI's exit status is the code, see README.md). */
typedef enum {
    DT_ERR_NONE = 0,        /* no failure */
    DT_ERR_INVALID = 1,     /* an argument, option or value the caller gave is wrong: out of range, an
                             * unknown name, inconsistent with another argument or with the model it
                             * is used on (a token id outside the vocabulary, a sequence longer than
                             * max_position_embeddings). Change the call. */
    DT_ERR_FORMAT = 2,      /* a file is not what it should be: corrupt, truncated, or lying about itself
                             * (a checkpoint, config.json, tokenizer.json, token dataset, training state,
                             * needle or task file). Replace or regenerate the file. */
    DT_ERR_IO = 3,          /* the operating system refused: a file that is missing, unreadable or not a
                             * regular file, a failed write, sync or rename, a full disk; the message
                             * carries the system's reason. Check the path, the permissions, the disk. */
    DT_ERR_NOMEM = 4,       /* an allocation failed. A smaller model, batch, context or input, or more
                             * memory. */
    DT_ERR_UNSUPPORTED = 5, /* valid, but beyond this implementation or this machine: a tokenizer
                             * component, a Hugging Face option or dtype difftrans cannot express, a
                             * kernel path this CPU cannot run. */
    DT_ERR_DIVERGED = 6,    /* training produced a non-finite loss or gradient, or an update made a DIFF
                             * layer's λ or the validation loss non-finite: the inputs are valid, the run
                             * is not (lower the learning rate; the last checkpoint is intact). */
    DT_ERR_BUSY = 8,        /* the work is valid but cannot be taken now (the serving engine's queue is
                             * full): try again later. (7 is the exit status of an MPI abort.) */
    DT_ERR_INTERRUPTED = 9, /* stopped on request (a signal) before the work was done; what was done is
                             * kept, and the same call resumes it (the scaling study). */
} dt_errcode;

/* An error: a message naming the file or argument and the problem, and its code. A function
 * that fails fills both. */
typedef struct {
    char msg[1024];
    dt_errcode code;
} dt_error;

/* printf into err->msg with the code DT_ERR_INVALID (a caller's argument is wrong: the common
 * case of a check in the library); always returns -1 so that `return dt_fail(err, ...)` reads
 * naturally. err may be NULL. */
int dt_fail(dt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with the given code; dt_fail_format, dt_fail_io and dt_fail_oom for the codes
 * DT_ERR_FORMAT, DT_ERR_IO and DT_ERR_NOMEM. */
int dt_fail_code(dt_error *err, dt_errcode code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int dt_fail_format(dt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int dt_fail_io(dt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int dt_fail_oom(dt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Puts "PREFIX: " (printf-formatted) before the message already in err, keeping its code: for a
 * caller that adds where a callee's failure happened ("model.safetensors: " + the callee's
 * problem). Returns -1. */
int dt_fail_prefix(dt_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A short constant name of a code ("invalid", "format", "io", "nomem", "unsupported",
 * "diverged", "busy", "none"; "unknown" for any other value). */
const char *dt_errcode_name(dt_errcode code);

/* ---------------------------------------------------------------- config */

/* DT_ARCH_DIFF_V2 (ours, model_type "difftrans_v2"; Hugging Face cannot load it): DIFF V2 —
 * H = 2h query heads of width hd (GQA over KV heads), each an ordinary causal softmax head a_i;
 * h output heads o_j = a_{2j} − λ_{t,j}·a_{2j+1} with a per-token, per-head
 * λ_{t,j} = sigmoid((W_λ x_t)_j), W_λ [h, C]; no per-head norm, no (1 − λinit); o_proj [C, h·hd]. */
typedef enum { DT_ARCH_LLAMA = 0, DT_ARCH_DIFF = 1, DT_ARCH_DIFF_V2 = 2 } dt_arch;

/* Position encoding (ours: "difftrans": {"position": "rope" | "alibi" | "none"}). ALiBi adds
 * −m·(t − s) to the score of query t on key s; the slopes m follow Press et al. over the model's
 * OUTPUT heads (baseline: H heads; DIFF: H/2 differential heads, both maps of a head sharing its
 * slope; DIFF V2: h heads, both query heads of an output head sharing it). */
typedef enum { DT_POS_ROPE = 0, DT_POS_ALIBI = 1, DT_POS_NONE = 2 } dt_position;

/* config.json "rope_scaling" (HF semantics; the position ids are untouched, only the inverse
 * frequencies change): none, "linear" (inv_freq / factor) or "llama3" (low frequencies divided
 * by factor, high ones kept, a smooth ramp between). The factors stay double, as in Python. */
typedef enum { DT_ROPE_DEFAULT = 0, DT_ROPE_LINEAR = 1, DT_ROPE_LLAMA3 = 2 } dt_rope_type;

typedef struct {
    dt_rope_type type;
    double factor;               /* linear, llama3 */
    double low_freq_factor;      /* llama3 */
    double high_freq_factor;     /* llama3 */
    int original_max_position_embeddings; /* llama3 */
} dt_rope_scaling;

/* Special token ids of a model (config.json, overridden by generation_config.json); −1 = none. */
#define DT_MAX_EOS 8
typedef struct {
    int bos_token_id;
    int pad_token_id;
    int n_eos;                   /* generation stops at any of these */
    int eos_token_id[DT_MAX_EOS];
} dt_special_ids;

/* DIFF V2's pairing of its H = 2h query heads into h output heads; query head i attends to kv
 * head ⌊i / (H/KV)⌋ (GQA: consecutive query heads share a kv head).
 *   DT_V2_PAIRS_GROUP ("v2_pairs": "2j,2j+1", the default, the write-up's DIFF V2): output head j
 *     is a_{2j} − λ·a_{2j+1}, two query heads of one GQA group: the same key and value heads
 *     (whenever H/KV is even, as it is for every V2 made from a DIFF or a preset);
 *   DT_V2_PAIRS_CROSS ("v2_pairs": "j,j+h", the write-up's "wrong implementation" as an ablation):
 *     output head j is a_j − λ·a_{j+h}; query heads j and j + h read kv heads ⌊j/g⌋ and
 *     ⌊(j + h)/g⌋ = ⌊j/g⌋ + KV/2 (g = H/KV, KV even), always two different ones; needs KV ≥ 2. */
typedef enum { DT_V2_PAIRS_GROUP = 0, DT_V2_PAIRS_CROSS = 1 } dt_v2_pairs;

/* DIFF V2's λ from z = W_λ x_t [h]: DT_V2_LAMBDA_SIGMOID ("v2_lambda": "sigmoid", the default)
 * λ = sigmoid(z) ∈ (0, 1); DT_V2_LAMBDA_NONE ("none") λ = 1, o_j = a_{2j} − a_{2j+1}, and no W_λ
 * (no lambda_proj tensor in the checkpoint); DT_V2_LAMBDA_LINEAR ("linear") λ = z, unbounded. */
typedef enum { DT_V2_LAMBDA_SIGMOID = 0, DT_V2_LAMBDA_NONE = 1, DT_V2_LAMBDA_LINEAR = 2 } dt_v2_lambda;

typedef struct {
    dt_arch arch;                /* model_type: "llama" | "diffllama" */
    int vocab_size;
    int hidden_size;             /* C */
    int intermediate_size;       /* F, SwiGLU width */
    int num_hidden_layers;       /* L */
    int num_attention_heads;     /* H: query heads (DIFF: two per differential head) */
    int num_key_value_heads;     /* KV */
    int head_dim;                /* hd */
    int max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    int tie_word_embeddings;
    float lambda_std_dev;        /* init std of the λ vectors (DIFF only) */
    int use_subln_weight;        /* DIFF: learnable per-head norm weight `subln.weight` (ours) */
    dt_rope_scaling rope_scaling;
    dt_special_ids special;
    /* Ablations (ours, under "difftrans" in config.json; 0 everywhere is the paper's model): */
    dt_position position;        /* "position": RoPE (default), ALiBi or none */
    int softmax1;                /* "softmax1": exp(s_i) / (1 + Σ exp(s_j)), may attend to nothing */
    int no_head_norm;            /* DIFF: "head_norm": false — out_j = (1 − λinit)·u_j, no RMSNorm */
    int fixed_lambda;            /* DIFF: "fixed_lambda": true — λ = λinit, no λ vectors */
    /* DIFF V2 ablations of the V2 write-up (ours, under "difftrans"; 0 is DIFF V2 itself): */
    dt_v2_pairs v2_pairs;        /* "v2_pairs": which query heads output head j subtracts */
    dt_v2_lambda v2_lambda;      /* "v2_lambda": how λ_{t,j} comes from z = W_λ x_t */
} dt_config;

/* Fill a config from a named preset ("tiny", "small", ...) for an architecture. A DIFF preset
 * and its baseline share every size: H query heads = H/2 differential heads of width 2·hd, so
 * parameters and FLOPs match (the paper's h = d_model / 2d). Returns -1 for an unknown name. */
int dt_config_preset(dt_config *cfg, const char *name, dt_arch arch, dt_error *err);
/* Comma-separated list of preset names, for --help. */
const char *dt_config_preset_names(void);
/* Check sizes and consistency; refuses absurd values before anything is allocated. */
int dt_config_validate(const dt_config *cfg, const char *where, dt_error *err);
int dt_config_load(dt_config *cfg, const char *path, dt_error *err);
/* No bos, pad or eos token (what presets start with). */
dt_special_ids dt_special_ids_none(void);
/* Written through a temporary name, then renamed; missing directories of path are created first,
 * like `mkdir -p` (README: outputs need no mkdir). */
int dt_config_save(const dt_config *cfg, const char *path, dt_error *err);
/* The parameter-matched model of the other architecture: same sizes, H/2 differential heads
 * ↔ H baseline heads of the same head_dim; DIFF V2 with H = 2h query heads → the baseline with
 * h heads. Ablation options carry over where they apply to the target (position, softmax1). */
dt_config dt_config_matched(const dt_config *cfg);
/* λinit = 0.8 − 0.6·exp(−0.3·l), l counted from 0. */
float dt_lambda_init(int layer);
/* RoPE inverse frequencies inv_freq[head_dim/2] exactly as transformers computes them in float32
 * (rope_theta^(−2i/hd), then the config's rope_scaling). */
void dt_rope_inv_freq(const dt_config *cfg, float *inv_freq);
/* The first of cfg's options that transformers' llama / diffllama cannot express, as `export --hf`
 * names it ("model_type difftrans_v2 (DIFF V2)", "difftrans.position = alibi", ...), or NULL when
 * the model has a Hugging Face form. */
const char *dt_config_hf_unsupported(const dt_config *cfg);
/* Architecture name as in config.json's model_type: "llama", "diffllama", "difftrans_v2". */
const char *dt_arch_name(dt_arch arch);
/* The architecture as tables and reports name it: "Transformer", "DIFF", "DIFF V2". */
const char *dt_arch_label(dt_arch arch);

/* Named ablations, short and stable (for `compare --ablations`, `train --ablation`): "rope",
 * "alibi", "nope" (no position encoding), "softmax1", "nonorm" (DIFF without the per-head norm),
 * "fixedlambda" (DIFF with λ = λinit);
 * "v2" (DIFF V2 with h = the head count of the base's matched Transformer, i.e. 2h query heads of
 * the same head_dim; a V2 base is kept as it is) and the V2 write-up's ablations of it:
 * "v2-crossgroup" (v2_pairs "j,j+h": the two query heads of an output head read different kv
 * heads), "v2-nolambda" (λ = 1, no W_λ), "v2-nosigmoid" (λ = W_λ x, unbounded); on a V2 base they
 * change only their option, so that they combine;
 * matched baselines, from the base's Transformer (dt_config_matched; a llama base itself) with H
 * heads of hd: "transformer" (that one: 2h heads of hd for a DIFF of h differential heads),
 * "transformer-1.5h" (1.5·H heads of hd, the V2 write-up's comparison, whose h is the
 * Transformer's head count: the q/o parameters of DIFF V2; its kv heads kept when they divide the
 * new count, else scaled by 1.5; an odd H is refused), "transformer-2hd" (H/2 heads of 2·hd and
 * KV/2 kv heads: the same attention width and parameters, doubled head dimension).
 * dt_config_ablation writes into *out the variant of `base` the name describes (everything else
 * unchanged); a name that does not apply to the base's architecture (nonorm on a Transformer) is
 * an error naming both. */
const char *dt_ablation_names(void);
int dt_config_ablation(dt_config *out, const dt_config *base, const char *name, dt_error *err);
/* A short description of cfg's architecture and ablations, e.g. "diffllama+alibi+nonorm",
 * "difftrans_v2+crossgroup+nolambda". */
void dt_config_describe(const dt_config *cfg, char *buf, size_t n);
/* The query head that map `which` (0: the first, 1: the subtracted one) of output head j reads:
 * DIFF j + which·H/2; DIFF V2 2j + which, or j + which·H/2 with v2_pairs "j,j+h"; a Transformer's
 * head j is its query head j (which ignored). For analyses that look at a head's two maps. -1 for
 * a j outside the output heads or a `which` other than 0 or 1. */
int dt_config_query_head(const dt_config *cfg, int j, int which);

/* ---------------------------------------------------------------- safetensors */

/* I8 / U8 hold the integer weights of quantised checkpoints (README "Quantisation"). */
typedef enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2, DT_I8 = 3, DT_U8 = 4 } dt_dtype;

#define DT_MAX_DIMS 8

typedef struct {
    char name[256];
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_DIMS];
    size_t numel;
    size_t begin, end;           /* byte offsets into the data section, validated */
} dt_st_tensor;

/* A read-only, validated view of a .safetensors file (mmap'd; never read past its end). */
typedef struct {
    char path[4096];
    const uint8_t *map;
    size_t size;
    const uint8_t *data;         /* start of the data section */
    size_t data_size;
    int n;
    dt_st_tensor *tensors;
} dt_safetensors;

/* Opens a regular file only (a FIFO, directory or device is refused naming it, without blocking)
 * and accepts what the format's reference reads: a UTF-8 header of strict JSON (space padding
 * after it is fine), tensors listed in any order whose bytes cover the data section exactly once
 * (no two overlapping, no hole, no trailing bytes; a zero-size tensor takes none), and a
 * __metadata__ of strings whose "format", as transformers insists, is pt, tf, flax or mlx. A
 * refusal names the file and the tensors involved. */
int dt_st_open(dt_safetensors *st, const char *path, dt_error *err);
void dt_st_close(dt_safetensors *st);
const dt_st_tensor *dt_st_find(const dt_safetensors *st, const char *name);
/* Convert a tensor (F32/F16/BF16; I8/U8 by value) to float32 into out[t->numel]. */
void dt_st_read_f32(const dt_safetensors *st, const dt_st_tensor *t, float *out);
/* The tensor's bytes as stored (little-endian), t->end - t->begin of them. */
const void *dt_st_data(const dt_safetensors *st, const dt_st_tensor *t);

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[DT_MAX_DIMS];
    const float *data;
    /* How the tensor is stored: F32 (0, the default), F16 or BF16 from data (rounded to nearest
     * even, as torch casts); or raw bytes of dtype DT_I8 / DT_U8 instead of data. */
    dt_dtype dtype;
    const void *raw;
} dt_st_entry;

/* Write tensors atomically (temporary file, then rename), each in its entry's dtype, laid out as
 * the safetensors library's serialize lays them out: by dtype (F32, BF16, F16, I8, U8), then by
 * name; __metadata__ {"format": "pt"}. Names must be valid UTF-8. */
int dt_st_write(const char *path, const dt_st_entry *entries, int n, dt_error *err);
/* The same for entries that are all F32 or raw I8 / U8 (refuses F16 / BF16). */
int dt_st_write_f32(const char *path, const dt_st_entry *entries, int n, dt_error *err);
/* Bytes an entry takes in the file. */
size_t dt_st_entry_bytes(const dt_st_entry *e);

/* A checkpoint directory's weights: DIR/model.safetensors, or the shards that
 * DIR/model.safetensors.index.json names (Hugging Face's layout; checked: every listed tensor in
 * the shard named, every tensor of a shard listed, none in two shards, shards inside DIR). */
typedef struct {
    char dir[4096];
    int sharded;                 /* 1 when read through the index */
    int n_files;
    dt_safetensors *files;
    int n;                       /* tensors over all files */
    struct dt_st_ref *refs;      /* sorted by name */
} dt_st_set;

int dt_st_set_open(dt_st_set *s, const char *dir, dt_error *err);
void dt_st_set_close(dt_st_set *s);
/* The tensor called name, and (when file != NULL) the file that holds it; NULL when absent. */
const dt_st_tensor *dt_st_set_find(const dt_st_set *s, const char *name, const dt_safetensors **file);
/* Write entries into DIR as model.safetensors or, when they exceed max_shard_bytes (> 0), as
 * model-00001-of-0000N.safetensors shards plus the index, the way save_pretrained splits them
 * (huggingface_hub's split over the entries in the order given: pass them in state-dict order; a
 * tensor larger than the limit gets a shard of its own while the current one keeps filling) and
 * writes the index ("metadata": {"total_parameters", "total_size"}, json.dumps' layout).
 * Files of an earlier save that the new layout does not use are removed. */
int dt_st_write_dir(const char *dir, const dt_st_entry *entries, int n, uint64_t max_shard_bytes, dt_error *err);

/* ---------------------------------------------------------------- model */

/* What a model's token ids mean: a Hugging Face tokenizer.json, or bytes (id = byte value, no
 * special tokens). The model keeps the tokenizer files' contents as they were loaded, so that every
 * checkpoint written from it (training checkpoints, quantised copies, exports) carries the same
 * vocabulary without reading its source again. Filled by dt_model_load and
 * dt_model_set_tokenizer; dt_model_create starts byte-level. */
typedef struct dt_tok dt_tok;
typedef struct {
    dt_tok *tok;                 /* NULL: byte-level */
    char *tokenizer_json;        /* tokenizer.json as loaded (NULL for byte-level) */
    size_t tokenizer_json_len;
    char *tokenizer_config;      /* tokenizer_config.json as loaded; NULL when there was none (one
                                    naming the special tokens is written) */
    size_t tokenizer_config_len;
    char *ids_only_dir;          /* the checkpoint directory it was read from when that held no
                                    vocabulary file and vocab_size is past 256, so that its ids
                                    cannot be bytes (an HF checkpoint copied without its
                                    tokenizer): the model takes and gives token ids only, and every
                                    text function refuses, naming it; NULL otherwise */
} dt_vocab;

/* One named parameter tensor inside the model's single parameter buffer. */
typedef struct {
    char name[96];               /* HF name, e.g. "model.layers.3.self_attn.q_proj.weight" */
    int ndim;
    int64_t shape[2];
    size_t offset;               /* in floats, into dt_model.params */
    size_t numel;
    int decay;                   /* 1 for matrices (AdamW weight decay applies) */
} dt_tensor;

typedef struct {
    float *input_layernorm;      /* [C] */
    float *q_proj;               /* [H*hd, C] */
    float *k_proj;               /* [KV*hd, C] */
    float *v_proj;               /* [KV*hd, C] */
    float *o_proj;               /* [C, H*hd]; DIFF V2: [C, H/2*hd] */
    float *lambda_q1, *lambda_k1, *lambda_q2, *lambda_k2; /* [hd] each, DIFF without fixed_lambda */
    float *lambda_proj;          /* [H/2, C] W_λ, DIFF V2 only (not with v2_lambda "none") */
    float *subln;                /* [2*hd], DIFF with use_subln_weight only */
    float *post_attention_layernorm; /* [C] */
    float *gate_proj;            /* [F, C] */
    float *up_proj;              /* [F, C] */
    float *down_proj;            /* [C, F] */
} dt_layer_weights;

/* Pointers into one flat float buffer; the same struct describes weights or their gradients. */
typedef struct {
    float *embed_tokens;         /* [V, C] */
    dt_layer_weights *layers;    /* [L] */
    float *norm;                 /* [C] */
    float *lm_head;              /* [V, C]; == embed_tokens when tied */
} dt_weights;

typedef struct {
    dt_config cfg;
    int n_tensors;
    dt_tensor *tensors;          /* the layout: every parameter, in file order */
    size_t n_params;
    float *params;               /* [n_params] */
    dt_weights w;                /* views into params */
    struct dt_quant *quant;      /* NULL: float weights; else the quantised linear layers, which the
                                    forward passes use instead of their float slots in params */
    float *rope_inv_freq;        /* [head_dim/2], from cfg (dt_rope_inv_freq) */
    dt_vocab vocab;              /* what the token ids mean; saved with every checkpoint of the model */
    char *generation_config;     /* generation_config.json as loaded (compact JSON; NULL: none): its
                                    keys other than the token ids of cfg.special (transformers'
                                    sampling defaults, ...) go into every checkpoint of the model */
} dt_model;

/* Parameters of a model of this config, from its layout (nothing is allocated for them);
 * 0 when the config is invalid. */
size_t dt_config_param_count(const dt_config *cfg);
/* Those outside the token embedding and the LM head (counted once when tied): the model size of
 * scaling laws (Kaplan et al. 2020), which every loss-against-size fit here uses. 0 when the config
 * is invalid. */
size_t dt_config_nonembedding_param_count(const dt_config *cfg);
/* Build the layout for cfg and allocate zeroed parameters. */
int dt_model_create(dt_model *m, const dt_config *cfg, dt_error *err);
void dt_model_free(dt_model *m);
/* normal(0, 0.02) matrices, N(0, lambda_std_dev) λ vectors, ones for norm weights. */
void dt_model_init_random(dt_model *m, uint64_t seed);
/* Make `views` point into `buf` (a buffer laid out like m->params), e.g. for gradients. */
void dt_weights_view(const dt_model *m, float *buf, dt_weights *views, dt_layer_weights *layer_views);
const dt_tensor *dt_model_find(const dt_model *m, const char *name);
/* λ of a layer from the current weights (DIFF; λinit with fixed_lambda), 0 for the baseline and
 * for DIFF V2 (whose λ depends on the token); NaN for a layer outside 0..L−1. */
float dt_model_lambda(const dt_model *m, int layer);

/* Checkpoint directory: config.json (+ generation_config.json), the weights (one file or shards;
 * integer tensors for a quantised checkpoint) and the vocabulary: difftrans_tokenizer.json marks a
 * byte-level model (a tokenizer.json beside it is the Hugging Face view of those bytes), else
 * tokenizer.json (+ tokenizer_config.json) is the model's tokenizer, else the model is byte-level.
 * A tokenizer larger than the embedding, or special ids outside it, are refused naming the file.
 * A GGUF file instead of a directory (a name ending in .gguf, or a file beginning with GGUF's magic)
 * is read as README "GGUF" says: llama models, ours or llama.cpp's, F32 / F16 / BF16 / Q8_0 / Q4_0. */
int dt_model_load(dt_model *m, const char *dir, dt_error *err);
/* hf_export: fold subln weights into o_proj columns and write only HF tensors. dir and its missing
 * parents are created, like `mkdir -p`; each file goes through a temporary name. */
int dt_model_save(const dt_model *m, const char *dir, int hf_export, dt_error *err);

typedef struct {
    int hf_export;               /* as above */
    dt_dtype dtype;              /* weights stored as F32 (default), F16 or BF16; config.json's
                                    torch_dtype says which */
    uint64_t max_shard_bytes;    /* 0: one model.safetensors; otherwise shards of at most this many
                                    bytes (a single larger tensor gets a shard of its own) */
} dt_save_options;

/* Checkpoint directory: config.json, generation_config.json, the weights (one file or shards),
 * the model's vocabulary (m->vocab: tokenizer.json + tokenizer_config.json, or the byte-level
 * marker, plus, with hf_export, a tokenizer.json whose ids are the bytes so that AutoTokenizer
 * loads the directory). A quantised model is written as a new directory (quantization_config in
 * config.json, README "Quantisation"), one file with its float tensors F32; hf_export, another dtype
 * and max_shard_bytes refuse it (DT_ERR_UNSUPPORTED). */
int dt_model_save_with(const dt_model *m, const char *dir, const dt_save_options *opt, dt_error *err);
/* A Transformer (llama) model as one GGUF file, llama.cpp's format (README "GGUF"), for llama.cpp
 * and ollama: general.architecture "llama", the config as llama.* keys, llama.cpp's tensor names
 * with the q_proj / k_proj rows reordered for its RoPE, the vocabulary as tokenizer.ggml.*. A float
 * model's 2-D weights are stored as dtype (F32, F16 or BF16; norms F32); a q8_0 / q4_0 model's
 * linear layers as its own blocks (dtype F32; embeddings and norms F32). DIFF, DIFF V2, w8a8 and
 * what else llama.cpp cannot express are refused (DT_ERR_UNSUPPORTED) naming the reason. Written
 * through a temporary name, then renamed. */
int dt_model_save_gguf(const dt_model *m, const char *path, dt_dtype dtype, dt_error *err);

/* ---------------------------------------------------------------- forward / backward */

/* Activations and scratch for batches of up to B sequences of up to T tokens; allocated once. */
typedef struct dt_runstate dt_runstate;

/* The attention kernel a run state uses: the fused FlashAttention-style kernel (the default;
 * memory linear in T) or the simple reference kernel that keeps every softmax map, for analyses
 * that look at the maps and for testing the fused one. */
typedef enum { DT_ATTENTION_FUSED = 0, DT_ATTENTION_REFERENCE = 1 } dt_attention_kernel;

typedef struct {
    dt_attention_kernel kernel;
    /* The analyses below need the reference kernel, which they select by themselves. */
    int keep_logits;             /* keep the scaled attention scores q·kᵀ/√hd [B, H, T, T] */
    int logit_bits;              /* > 0: fake-quantise those scores to this many bits (symmetric,
                                    absmax scale; at least 2) before the softmax; forward-only */
    int logit_per_row;           /* the absmax is taken per query row (1) or per head map (0) */
    /* Training: the LM head and the cross-entropy run over chunks of rows, so the [B·T, V] logits
     * never exist whole (the backward recomputes each chunk; with one chunk it keeps the
     * forward's); dt_runstate_logits gives NULL. Rows per chunk: loss_chunk_rows, or 0 for as many
     * as 8 MiB of logits hold (at least 256). */
    int chunked_loss;
    int loss_chunk_rows;
    /* Called with the input of every linear layer the forward runs (quantisation calibration):
     * which = 0..6 for q, k, v, o, gate, up, down of `layer`; layer = L, which = 0 for lm_head. */
    void (*observe_linear)(void *ctx, int layer, int which, const float *x, int N, int in);
    void *observe_ctx;
} dt_run_options;

/* The most tokens (B·T) one run state holds: rows are indexed as int inside the forward. */
#define DT_MAX_BATCH_TOKENS (1 << 26)

dt_runstate *dt_runstate_create(const dt_model *m, int B, int T, dt_error *err); /* fused, no extras */
dt_runstate *dt_runstate_create_with(const dt_model *m, int B, int T, const dt_run_options *opt, dt_error *err);
void dt_runstate_free(dt_runstate *rs);

/* tokens [B, T]; targets [B, T] or NULL (no loss); target −1 means "ignore this position".
 * Writes logits [B, T, V] into dt_runstate_logits(rs) and returns the mean cross-entropy over
 * the non-ignored positions in *loss (when targets != NULL). */
int dt_forward(const dt_model *m, dt_runstate *rs, const int *tokens, const int *targets, int B, int T,
               float *loss, dt_error *err);
/* Accumulates d(loss)/d(params) into grads (laid out like m->params). Call after dt_forward
 * with targets; it overwrites the logits with their gradient (copy them first if needed). */
void dt_backward(const dt_model *m, dt_runstate *rs, float *grads);
const float *dt_runstate_logits(const dt_runstate *rs); /* NULL with chunked_loss */
/* The per-layer views below are NULL for a layer outside the model (0..L−1; dt_runstate_hidden 0..L). */
/* Attention probabilities of the last forward for a layer: [B, H, T, T] softmax maps (for DIFF
 * query head i < H/2 pairs with i + H/2). NULL unless the run state uses the reference kernel. */
const float *dt_runstate_attention(const dt_runstate *rs, int layer);
/* The scaled attention scores q·kᵀ/√hd of a layer [B, H, T, T], zero above the diagonal: before
 * ALiBi's position bias and logit_bits' quantisation; NULL unless the run state keeps them (keep_logits). */
const float *dt_runstate_attention_logits(const dt_runstate *rs, int layer);
/* DIFF V2: the per-token λ of a layer's last forward, [B, T, h] (λ_{t,j} = sigmoid((W_λ x_t)_j),
 * output head j subtracting query head 2j + 1 from 2j; dt_config_query_head for the ablations;
 * v2_lambda "linear": (W_λ x_t)_j itself, "none": 1), *n = B·T·h values (n may be NULL); NULL
 * for the other architectures. */
const float *dt_runstate_token_lambda(const dt_runstate *rs, int layer, size_t *n);
/* The residual stream entering layer `layer` [B, T, C]; layer L is the input of the final norm. */
const float *dt_runstate_hidden(const dt_runstate *rs, int layer);
/* Each output head's context vector in a layer's last forward, before any per-head norm, [B, T,
 * heads, width] (either kernel; *heads and *width are set when not NULL). DIFF: u_j = (A_j −
 * λ·A_{j+H/2})·V_j, H/2 heads of width 2·hd, before the RMSNorm and the (1 − λinit) scale (with
 * no_head_norm: before that scale); DIFF V2: o_j = a_p − λ_{t,j}·a_q ((p, q) = (2j, 2j + 1), or
 * (j, j + h) with v2_pairs "j,j+h"), H/2 heads of width hd; the Transformer: each softmax head's
 * output, H heads of width hd (neither has a norm). */
const float *dt_runstate_head_context(const dt_runstate *rs, int layer, int *heads, int *width);

/* ---------------------------------------------------------------- generation */

typedef struct dt_kvcache dt_kvcache;

dt_kvcache *dt_kvcache_create(const dt_model *m, int max_tokens, dt_error *err); /* F32 */
/* Storage of the cached keys and values: F32; F16 (half the memory); INT8 (a quarter, plus one
 * float scale per position and kv head: absmax / 127 of that head's row). */
typedef enum { DT_KV_F32 = 0, DT_KV_F16 = 1, DT_KV_INT8 = 2 } dt_kv_dtype;
dt_kvcache *dt_kvcache_create_with(const dt_model *m, int max_tokens, dt_kv_dtype dtype, dt_error *err);
/* Bytes the cached keys and values (and their scales) take. */
size_t dt_kvcache_bytes(const dt_kvcache *c);
void dt_kvcache_free(dt_kvcache *c);
/* Feed one token at position pos (0, 1, 2, ... in order); writes logits [V]. pos may go back to
 * rewrite the sequence from there (0 starts a new one), but not past the positions fed: refused. */
int dt_decode_step(const dt_model *m, dt_kvcache *c, int token, int pos, float *logits, dt_error *err);

/* KV caches for n_slots sequences of up to ctx tokens each and activations for up to max_rows rows
 * per step, allocated once. The building block of the serving engine (difftrans_serve.h) and of dt_generate: a
 * caller that schedules its own batches uses it directly. */
typedef struct dt_batch dt_batch;

typedef struct {
    int slot;                    /* which sequence: 0..n_slots−1 */
    int pos;                     /* its position: rows of one slot in one step are consecutive
                                    positions in increasing order, and its positions 0..pos−1 were
                                    fed in earlier steps or earlier rows of this one (a first row
                                    past the positions its slot was fed is refused) */
    int token;                   /* the token at pos */
    int want_logits;             /* 1: this row's logits [V] are written (next row of `logits`) */
} dt_batch_row;

dt_batch *dt_batch_create(const dt_model *m, int n_slots, int ctx, int max_rows, dt_kv_dtype kv, dt_error *err);
void dt_batch_free(dt_batch *b);
/* Bytes the pool's cached keys and values take (all slots). */
size_t dt_batch_kv_bytes(const dt_batch *b);
/* Runs rows[0..n) (n ≤ max_rows) as one batch: every linear layer once over all rows, each row's
 * attention over its own slot's positions 0..pos. logits gets [n_want, V], one row for each row
 * with want_logits, in order. A slot's cache beyond the positions fed is never read, so a slot is
 * reused by starting again at pos 0. Equal to dt_decode_step row by row (to float rounding: the
 * batched matrix products sum in another order). */
int dt_batch_step(const dt_model *m, dt_batch *b, const dt_batch_row *rows, int n, float *logits, dt_error *err);

typedef struct {
    float temperature;           /* 0 = greedy */
    int top_k;                   /* 0 = off */
    float top_p;                 /* 1 = off */
    float min_p;                 /* 0 = off: keep the tokens whose probability is at least min_p × the top
                                    token's */
} dt_sampler;

typedef struct {
    float p;
    int id;
} dt_prob_index;

/* Pick the next token from logits [V] (modified in place: they become probabilities).
 * temperature 0 → argmax (the first of equal largest; NaN is never chosen); otherwise
 * softmax(logits / T), then min-p, top-k and top-p in vLLM's order: the tokens whose probability
 * is at least min_p × the top token's, of those the top-k, and of those (renormalised, as
 * transformers and vLLM) the smallest set whose probability reaches top_p. min-p comes after the
 * temperature as in vLLM and transformers (llama.cpp's default chain applies the temperature last,
 * so that its min-p sees the untempered probabilities) and before top-p as in vLLM (llama.cpp's
 * chain and transformers apply it after top-p, keeping what both keep of the whole distribution,
 * where vLLM's top-p counts what min-p kept, renormalised); with top-k the order does not matter.
 * scratch holds V entries. */
int dt_sample(float *logits, int V, const dt_sampler *s, uint64_t *rng, dt_prob_index *scratch);

/* Why dt_generate stopped (which reports a failure as its error instead), or a serving engine's
 * request ended: DT_STOP_ERROR is the engine's step failing or giving non-finite logits. */
typedef enum {
    DT_STOP_LENGTH = 0,
    DT_STOP_EOS = 1,
    DT_STOP_CALLBACK = 2,
    DT_STOP_CANCELLED = 3,
    DT_STOP_ERROR = 4
} dt_stop_reason;

typedef struct {
    int max_new_tokens;          /* tokens to generate at most (0: none) [200] */
    dt_sampler sampler;          /* [temperature 0.8, top_k 0, top_p 0.95, min_p 0] */
    uint64_t seed;               /* the sampler's stream [42] */
    dt_kv_dtype kv_cache;        /* storage of the cached keys and values [F32] */
    /* Generation ends at any of these ids (not added to the sequence); n_stop < 0: the model's own
     * (dt_model_stop_ids) [-1]; 0: none; at most DT_MAX_EOS (copied at the call). */
    const int *stop_ids;
    int n_stop;
    /* Called after every sampled token, on the calling thread, with the sequence so far (prompt then
     * generated, the new token last unless it is a stop id, which is_stop says; seq is valid during
     * the call only); a nonzero return ends generation (DT_STOP_CALLBACK, or DT_STOP_EOS on a stop
     * id). */
    int (*on_token)(void *ctx, int token, int is_stop, const int *seq, int n_seq);
    void *ctx;
    volatile int *cancel;        /* when it becomes nonzero (another thread, a signal), generation ends
                                    before the next step */
} dt_generate_options;

typedef struct {
    int n_generated;             /* tokens added after the prompt (a stop id is not counted) */
    dt_stop_reason stop;
    int stop_token;              /* the stop id that ended it (DT_STOP_EOS), else -1 */
    double prefill_s, decode_s;  /* seconds for the prompt, then for the generated tokens */
    size_t kv_cache_bytes;       /* what the run's KV cache took (dt_kvcache_bytes) */
} dt_generate_result;

void dt_generate_defaults(dt_generate_options *o);
/* What the model's generation_config.json asks of generate, as transformers' generate reads it:
 * its max_new_tokens into o->max_new_tokens when it has one; and 1, with o->sampler filled, when it
 * sets any of do_sample, temperature, top_k, top_p, min_p — without do_sample true that is greedy
 * (transformers' default), with it temperature, top_k, top_p and min_p default to transformers' 1,
 * 50, 1 and off; 0, the sampler untouched, when it sets none (or the model has no generation_config.json); -1
 * on a value of the wrong type or range, naming the key. */
int dt_model_generation_defaults(const dt_model *m, dt_generate_options *o, dt_error *err);
/* The model's end-of-sequence ids into ids[DT_MAX_EOS]: generation_config.json's eos_token_id,
 * else its tokenizer's EOS; returns how many (0: none). */
int dt_model_stop_ids(const dt_model *m, int *ids);
/* Continues prompt[n_prompt] (every id checked against the vocabulary; prompt + max_new_tokens must
 * fit max_position_embeddings): the prompt through a KV cache, then sampled tokens into
 * out[max_new_tokens] (may be NULL) until a stop id, max_new_tokens, the callback or *cancel.
 * Deterministic for a given seed. res may be NULL; on a failure part-way it still says what was
 * generated (n_generated tokens in out). The options must come from dt_generate_defaults: a zeroed
 * sampler (top_p 0) is refused. Text for the tokens: dt_model_decode of the whole sequence (a
 * token's text can depend on its neighbours), or, as they come, a dt_model_tok_stream fed the
 * prompt and then each token (what `generate` prints). */
int dt_generate(const dt_model *m, const int *prompt, int n_prompt, const dt_generate_options *o, int *out,
                dt_generate_result *res, dt_error *err);

/* ---------------------------------------------------------------- data, training, evaluation */

/* A matrix of token ids from a text file: one sequence per line of whitespace-separated ids in
 * [0, vocab), every line the same length, blank lines ignored. *ids gets rows × cols ids (free
 * with free()); every problem names the file, the line and the token. */
int dt_ids_read(const char *path, int vocab, int **ids, int *rows, int *cols, dt_error *err);

/* Read a whole text file as byte tokens (dt_vocab_text_tokens with a byte-level vocabulary); an
 * empty or missing file is an error naming it. */
int dt_text_load(const char *path, int **tokens, size_t *n, dt_error *err);

/* Mean next-token cross-entropy over `tokens` in consecutive windows of T+1 tokens (B windows
 * per forward); *count gets the number of predictions scored. B and T must be ≥ 1; T is capped
 * at max_position_embeddings and at n − 1, B at the number of windows (a tail shorter than a
 * window is not scored). bits per byte, as `difftrans eval` prints it: mean_loss / ln 2 divided
 * by the text's bytes per token (dt_model_text_tokens gives the bytes). Weights whose products
 * overflow float32 (a loss that is not finite) fail with DT_ERR_FORMAT naming the windows. */
int dt_eval_tokens(const dt_model *m, const int *tokens, size_t n, int B, int T, double *mean_loss, size_t *count,
                   dt_error *err);

/* ---------------------------------------------------------------- data-parallel jobs */

/* The processes of one training job. Launched by mpirun (Open MPI, or another PMIx/PMI
 * launcher), dt_comm_create joins the MPI job (MPI_Init_thread); otherwise it gives a one-rank
 * communicator that never calls MPI. Every wait for the other ranks is bounded by timeout_s:
 * past it the job ends (MPI_Abort with error code 7, the one way the library ends a process:
 * the collectives already posted cannot be taken back, so no rank could go on) with a message
 * naming the ranks that did not arrive. */
typedef struct dt_comm dt_comm;
int dt_comm_create(dt_comm **out, double timeout_s, dt_error *err);
void dt_comm_free(dt_comm *c);               /* MPI_Finalize when MPI was joined; NULL is fine */
int dt_comm_rank(const dt_comm *c);          /* 0 for NULL */
int dt_comm_size(const dt_comm *c);          /* 1 for NULL */
int dt_comm_local_size(const dt_comm *c);    /* ranks of the job on this machine */
/* OpenMP threads for each rank: the cores the launcher bound it to, or this machine's cores
 * shared among its ranks. */
int dt_comm_default_threads(const dt_comm *c);

typedef struct {
    const char *data_path;       /* text file; the last val_fraction of it is held out */
    const char *tokenizer_path;  /* with data_path: a tokenizer.json (or its directory) to encode it
                                    with; NULL: bytes. The model's vocabulary is the tokenizer's */
    const char *tokens_path;     /* instead of data_path: a token dataset (`difftrans tokenize`),
                                    its train and val splits */
    const char *out_dir;         /* checkpoint directory (created) */
    dt_config cfg;               /* the model to create; with resume it is read from out_dir */
    int steps, batch, seq;
    int grad_accum;              /* micro-batches per step: each forward runs batch / grad_accum rows
                                    (with resume, 0 takes the saved run's) */
    float lr, min_lr_ratio;      /* peak learning rate; cosine decays to lr·min_lr_ratio */
    int warmup;                  /* linear warm-up steps */
    /* Refused before the run, naming the option, outside what a resume reads back: lr positive and
     * finite, min_lr_ratio in [0, 1], weight_decay and grad_clip finite ≥ 0, beta1 ≤ 0.999999 and
     * beta2 ≤ 0.999999999 (≥ 0; the update divides by 1 − beta^t), adam_eps in [1e-30, 1]. */
    float weight_decay, grad_clip, beta1, beta2, adam_eps;
    uint64_t seed;
    int eval_interval, eval_batches, save_interval;
    float val_fraction;
    int resume;                  /* continue from out_dir's checkpoint and optimizer state (see
                                    dt_train_resume_defaults) */
    int stop_at;                 /* > 0: save and stop after this step (at most steps); the schedule still
                                    spans `steps` */
    int quiet;                   /* nothing on stderr (else the run's header line, progress, validation
                                    losses and a summary, from rank 0) */
    volatile int *stop;          /* when *stop becomes nonzero: save a checkpoint and return */
    /* Data parallelism: with a communicator of N ranks every rank runs dt_train with the same
     * options; `batch` is the global batch and rank r computes its rows [r·B/N, (r+1)·B/N) of the
     * batch one process would draw; B must be a multiple of N·grad_accum. Rank 0 alone writes the
     * output directory; resuming reads it on every rank. */
    dt_comm *comm;               /* NULL: one process */
    int zero;                    /* 1: ZeRO-1, AdamW moments sharded over the ranks */
    int no_overlap;              /* 1: reduce gradients after the backward (to measure the overlap) */
    /* Optional: called after each step's batch of text windows is drawn; may rewrite tokens and
     * targets (target −1 = no loss there), which hold rows [row0, row0 + rows) of the step's global
     * batch of B rows × T (this rank's). It must draw from *rng (the run's data stream, saved for
     * resume) exactly as for all B rows, so that every rank stays on one stream. step counts
     * from 0. Validation stays on the text. */
    void (*batch_hook)(void *ctx, int step, int total_steps, int *tokens, int *targets, int row0, int rows, int B,
                       int T, uint64_t *rng);
    void *batch_ctx;
    /* Optional: called with the current model after each validation evaluation (step ≥ 1), on
     * every rank; a nonzero return stops training with that error. */
    int (*eval_hook)(void *ctx, int step, const dt_model *m, dt_error *err);
    void *eval_ctx;
} dt_train_options;

void dt_train_defaults(dt_train_options *o);
/* What continuing a run means: the options of resuming the run in out_dir (set out_dir after
 * this). dt_train reads the model, the data and every option the run fixed from out_dir
 * (config.json, train_state.json), whatever o holds for them; steps and grad_accum are 0 here,
 * which takes the saved run's too. What a resume may change, set after this call: steps (more
 * extends the run on its schedule), grad_accum (the micro-batching of the same batch), stop_at
 * (past the saved step), quiet, stop, comm, zero, no_overlap and the hooks; data_path or
 * tokens_path say where the run's data is now when it moved (train_state.json records its
 * absolute path, its length and a fingerprint of its tokens: other data is refused). */
void dt_train_resume_defaults(dt_train_options *o);
/* Tokens [0, n_train) of a data file of n tokens train; the rest is the validation split. */
size_t dt_train_split(size_t n, float val_fraction);
/* Returns 0 when the run finished or was stopped cleanly (checkpoint saved). o is written: with
 * resume, the options the run fixed (batch, seq, lr and the rest of the schedule, seed, steps and
 * grad_accum when 0) are the saved run's on return; data_path, tokens_path and tokenizer_path are
 * the caller's again. */
int dt_train(dt_train_options *o, dt_error *err);
/* Removes what a resume would read of the training run in dir (train_state.json,
 * optimizer.safetensors, metrics.jsonl and a checkpoint it was still writing when it stopped), so
 * that a model saved there anew is not continued as that run; the model's own files stay for the
 * save to replace. A dir a running dt_train is writing is refused (DT_ERR_IO), nothing removed. */
int dt_train_forget(const char *dir, dt_error *err);
/* 1 when dir holds a training run that dt_train resumes, with state set to the path of the
 * train_state.json it continues from: dir/.next/train_state.json when a kill interrupted the commit of
 * that checkpoint (the resume finishes it; dir may hold no train_state.json yet), else dir's own.
 * 0 when there is none (or the path does not fit in n). */
int dt_train_checkpoint(const char *dir, char *state, size_t n);
/* The training window (seq) of the run in dir as its train_state.json records it: 1 with *seq; 0
 * when dir has no train_state.json (a model saved or exported without its run); -1 (DT_ERR_FORMAT
 * naming the file) when the file records no seq. Positions past it were never trained. */
int dt_train_window(const char *dir, int *seq, dt_error *err);

/* ---------------------------------------------------------------- quantisation */

/* Post-training quantisation of the linear layers (README "Quantisation"). Embeddings, norms,
 * λ vectors and (unless lm_head is set) the LM head stay float32 in every scheme. */
typedef enum { DT_QUANT_NONE = 0, DT_QUANT_Q8_0 = 1, DT_QUANT_Q4_0 = 2, DT_QUANT_W8A8 = 3 } dt_quant_scheme;

typedef struct {
    dt_quant_scheme scheme;
    int dynamic_activations;     /* W8A8: a scale per token at run time instead of calibrated static ones */
    float smooth_alpha;          /* W8A8: SmoothQuant migration strength α ∈ [0, 1]; < 0 = off */
    int lm_head;                 /* also quantise the LM head (float by default) */
    int float_activations;       /* q8_0, q4_0: multiply with the activations in float (w8a16: more exact,
                                    slower) instead of rounding each row to 8-bit blocks for integer dot
                                    products (the default; README "Quantisation" says when to use which) */
    /* Calibration (W8A8 with static scales or smoothing): calib_samples windows of calib_seq
     * tokens, drawn without overlap from calib_tokens (or the text file calib_path) by seed. With
     * calib_tokens, calib_path (may be NULL) only names where they came from in messages. A
     * calib_path that is a directory (a token dataset) is refused (DT_ERR_IO), as is one that
     * cannot be read; the message names calib_path. */
    const char *calib_path;
    const int *calib_tokens;
    size_t calib_n;
    int calib_samples, calib_seq, calib_batch;
    uint64_t seed;
    int quiet;                   /* no progress on stderr */
} dt_quant_options;

void dt_quant_defaults(dt_quant_options *o);  /* 300 samples of 128 tokens, seed 1, α off */
/* "q8_0" | "q4_0" | "w8a8"; -1 with a message naming the scheme otherwise. */
int dt_quant_scheme_parse(const char *name, dt_quant_scheme *out, dt_error *err);
const char *dt_quant_scheme_name(dt_quant_scheme s);
/* Quantise m's linear layers in place (calibrating first when the scheme needs it; calibration
 * text, calib_path, is read through the model's vocabulary, dt_model_text_tokens); the float
 * weights stay in m->params, so dt_model_dequantize returns to the float model. */
int dt_model_quantize(dt_model *m, const dt_quant_options *o, dt_error *err);
/* Back to the float model quantised in this process (0; nothing to do for a float model). A model
 * loaded from a quantised checkpoint has no float weights to return to: refused (-1). */
int dt_model_dequantize(dt_model *m, dt_error *err);
/* The scheme of a model (DT_QUANT_NONE for float) and the options it was quantised with. */
dt_quant_scheme dt_model_quant_scheme(const dt_model *m, dt_quant_options *o);
/* The path the quantised kernels take on this CPU (DT_ISA respected): "avx512 (int8: VNNI)",
 * "avx512 (int8: no VNNI)" on AVX-512 CPUs without it, "avx2" or "portable". */
const char *dt_quant_kernel_path(void);
/* Bytes of weights one decoding step reads (every linear layer, the norms, DIFF's λ vectors and
 * per-head norm, V2's λ projection, the embedding row: every parameter but the rest of the table). */
size_t dt_model_decode_bytes(const dt_model *m);
/* The same for a model of config c quantised with scheme (DT_QUANT_NONE: float), the LM head too
 * when lm_head, before it is made (w8a8 without smoothing's per-column scales). */
size_t dt_config_decode_bytes(const dt_config *c, dt_quant_scheme scheme, int lm_head);

/* Activation statistics of one quantised linear layer's input from the calibration run: the
 * largest and the median per-channel absmax, before and after smoothing. */
typedef struct {
    char name[96];               /* e.g. "model.layers.0.self_attn.q_proj" */
    int in;
    float absmax, median;        /* before smoothing */
    float absmax_smoothed, median_smoothed;
    float input_scale;           /* static scale used (0: dynamic) */
} dt_quant_act_stat;
/* NULL with *n = 0 when the model was not calibrated in this process. */
const dt_quant_act_stat *dt_model_quant_act_stats(const dt_model *m, int *n);

/* ---------------------------------------------------------------- tokenizer */

/* Byte-level: token id = byte value (0..255). Documented in README "Tokenizer". */
int dt_tokenizer_save(const char *dir, dt_error *err);
int dt_tokenizer_check(const char *dir, dt_error *err);

/* How many bytes at the start of s[0..n) are valid UTF-8: n when all are, else the offset of the
 * first byte that does not begin or continue a character (overlong forms, surrogates and code
 * points past U+10FFFF are not valid), as every text the library takes is checked. */
size_t dt_utf8_valid_prefix(const char *s, size_t n);

/* Hugging Face tokenizer.json with a BPE model, encoding and decoding bit-exactly like the Rust
 * `tokenizers` library (normalizers, pre-tokenizers, added tokens, post-processor, decoder; see
 * README "Tokenizers"). Anything outside the supported components is refused by name at load.
 * A loaded dt_tok is read-only: any number of threads may use it, each with its own encoder. */
typedef struct dt_tok_encoder dt_tok_encoder;

/* path: a tokenizer.json, or a directory holding one (its tokenizer_config.json, when there,
 * gives the bos / eos / pad tokens). */
int dt_tok_load(dt_tok **tok, const char *path, dt_error *err);
void dt_tok_free(dt_tok *tok);
/* text[0..len) must be valid UTF-8 (anything else is refused with the byte offset).
 * add_special: run the post-processor (e.g. prepend <s>), as encode(add_special_tokens=True).
 * *ids is malloc'd (the caller frees it). */
int dt_tok_encode(const dt_tok *tok, const char *text, size_t len, int add_special, int32_t **ids, size_t *n_ids,
                  dt_error *err);
/* Per-thread encoding state (regex match data, a cache of recent words) for many encodings:
 * *ids points into the encoder and stays valid until its next call. */
dt_tok_encoder *dt_tok_encoder_new(const dt_tok *tok);   /* NULL when out of memory */
void dt_tok_encoder_free(dt_tok_encoder *e);
int dt_tok_encoder_encode(dt_tok_encoder *e, const char *text, size_t len, int add_special, const int32_t **ids,
                          size_t *n_ids, dt_error *err);
/* Encodes a large text with n_threads threads (pieces between added tokens, and long pieces cut
 * where the pre-tokenizer's regex scan provably gives the same matches, each part pre-tokenized
 * and encoded on its own thread): the ids equal dt_tok_encode's, with less memory for a large
 * text even on one thread. A short text: dt_tok_encode. */
int dt_tok_encode_parallel(const dt_tok *tok, const char *text, size_t len, int add_special, int n_threads,
                           int32_t **ids, size_t *n_ids, dt_error *err);
/* *text is malloc'd and NUL-terminated (*len excludes the NUL). An id that is not a token is an
 * error naming it. skip_special: leave special tokens out. */
int dt_tok_decode(const dt_tok *tok, const int32_t *ids, size_t n, int skip_special, char **text, size_t *len,
                  dt_error *err);
/* Text from ids as they come, one at a time (generated text, streamed): each push gives the bytes
 * that have become final — whole UTF-8 characters that no later id can change — and holds back the
 * rest: a character whose bytes are not all there yet (ByteLevel's bytes, ByteFallback's <0xXX>
 * tokens: a run of those is final once a token that is not one ends it, since a later invalid byte
 * turns the whole run into U+FFFDs), characters a decoder step may still drop at the end (Strip),
 * an end that may still become a match (Replace of a string). The bytes pushes give, followed by
 * dt_tok_stream_flush's, are exactly dt_tok_decode's of the ids (skip_special as given, a U+FFFD
 * for what never completed); after every push, the bytes given so far followed by
 * dt_tok_stream_pending's are dt_tok_decode's of the ids so far. An id that is no token (outside
 * the vocabulary, or one it leaves unused: an embedding padded past the tokenizer) adds no text,
 * as if it were not there. A push costs time in proportion to its token and to what is held back
 * (a few bytes, or a run of <0xXX> tokens), never to the text before it: streaming n tokens is
 * O(n), where decoding the whole sequence after each token is O(n²). A decoder chain that rewrites
 * the joined text with a regex (a Replace with a Regex pattern after Fuse or ByteLevel) or runs
 * ByteFallback or ByteLevel after them (no published tokenizer does) could change all of it at any
 * token: its text comes at the flush, decoded whole.
 * tok NULL: a byte-level model's bytes (ids 0..255; the others add no text), given as they are
 * (dt_model_decode gives them raw, invalid UTF-8 included), held back only while a character's
 * bytes are incomplete.
 * One stream follows one sequence, on one thread at a time; tok is only read (any number of
 * streams and encoders may share it) and must outlive the stream. *text points into the stream,
 * NUL-terminated, and stays valid until its next call; -1 only when out of memory. */
typedef struct dt_tok_stream dt_tok_stream;
dt_tok_stream *dt_tok_stream_new(const dt_tok *tok, int skip_special);   /* NULL when out of memory */
void dt_tok_stream_free(dt_tok_stream *s);
int dt_tok_stream_push(dt_tok_stream *s, int32_t id, const char **text, size_t *len, dt_error *err);
/* The rest as it would decode if the ids ended here (the stream is left as it was). */
int dt_tok_stream_pending(dt_tok_stream *s, const char **text, size_t *len, dt_error *err);
/* The rest, the ids having ended; the stream then starts a new sequence. */
int dt_tok_stream_flush(dt_tok_stream *s, const char **text, size_t *len, dt_error *err);
/* Stop strings, as OpenAI's `stop` (`generate --stop`, the server's `stop`): generation ends where its
 * text contains one of them, the text cut before it (the stop string is not part of it). Bytes are
 * compared as they are: in valid UTF-8 text a valid UTF-8 stop string matches at character
 * boundaries only. Empty strings never match. */
#define DT_MAX_STOP_STRINGS 4    /* as OpenAI's API allows */
/* The byte offset of the first stop string in text[0..n): of the occurrence of any of stops[0..k)
 * that ends first (of those, the one that starts first), where text given a byte at a time would
 * first hold one; -1 when none. */
long dt_stop_find(const char *text, size_t n, const char *const *stops, int k);
/* The longest suffix of text[0..n) that is a proper prefix of one of stops[0..k): text to hold back
 * while what comes next could still complete a stop string there. */
size_t dt_stop_holdback(const char *text, size_t n, const char *const *stops, int k);
/* Text as it becomes final (a dt_tok_stream's bytes) checked for stop strings: each push gives the
 * text that can be shown now — everything pushed so far but a stop string found (and all after it)
 * and, while none is, the end that could still become one (held back: dt_stop_holdback of the text
 * so far). The bytes pushes give, followed by dt_stop_matcher_flush's, are the text pushed cut
 * before the first stop string in it, whatever the pieces it came in; a push that finds one returns
 * 1, and later pushes give nothing. A push costs time in proportion to its text and the stop
 * strings, never to the text before it. The stop strings are copied; *text points into the
 * matcher and stays valid until its next call. */
typedef struct dt_stop_matcher dt_stop_matcher;
/* At most DT_MAX_STOP_STRINGS stops (none: nothing is held back or cut), none NULL. */
int dt_stop_matcher_new(dt_stop_matcher **s, const char *const *stops, int k, dt_error *err);
void dt_stop_matcher_free(dt_stop_matcher *s);
/* 1 when a stop string was found (generation should end), 0 when not, -1 only when out of memory. */
int dt_stop_matcher_push(dt_stop_matcher *s, const char *text, size_t len, const char **out, size_t *out_len,
                         dt_error *err);
/* The text held back, the text having ended (nothing after a stop string). */
void dt_stop_matcher_flush(dt_stop_matcher *s, const char **out, size_t *out_len);
/* 1 once a push found a stop string. */
int dt_stop_matcher_stopped(const dt_stop_matcher *s);
/* The bytes token id adds to a decoded text before the text is made valid UTF-8 (OpenAI's logprobs
 * `bytes`): a ByteFallback token <0xE6> the byte 0xE6, a ByteLevel token its characters' bytes
 * through the byte map (the first byte of a 3-byte character when that is what it holds), any other
 * the token's text as the decoder writes it after other tokens (Metaspace's ▁ a space, Replace and
 * a Strip of each token applied; a Strip of the joined text's first or last characters not). The
 * bytes of a text's tokens one after another are the text's bytes, but where a step changes text
 * across tokens: that Strip, Metaspace's first ▁, a Replace matching across tokens, a ByteFallback
 * run that is not valid UTF-8. *bytes is malloc'd (*len bytes, NUL-terminated); an id that is not a
 * token is an error naming it. */
int dt_tok_token_bytes(const dt_tok *tok, int32_t id, char **bytes, size_t *len, dt_error *err);
int32_t dt_tok_vocab_size(const dt_tok *tok);            /* 1 + the largest id (model and added tokens) */
int32_t dt_tok_token_to_id(const dt_tok *tok, const char *token, size_t len);  /* -1 when absent */
const char *dt_tok_id_to_token(const dt_tok *tok, int32_t id, size_t *len);   /* NULL when absent */
int dt_tok_is_special(const dt_tok *tok, int32_t id);
int32_t dt_tok_bos_id(const dt_tok *tok);                /* -1 when the tokenizer has none */
int32_t dt_tok_eos_id(const dt_tok *tok);
int32_t dt_tok_pad_id(const dt_tok *tok);
const char *dt_tok_path(const dt_tok *tok);              /* the tokenizer.json it was loaded from */

/* Learning a byte-level BPE (`difftrans tokenizer train`): the 256 bytes (id = byte value), the
 * merges, then the special tokens; writes out_dir/tokenizer.json and tokenizer_config.json
 * atomically. pattern "gpt2" (ByteLevel's regex) or "llama3" (Llama-3's Split, ignore_merges).
 * bos (added before the text by the post-processor), eos, pad: special tokens, NULL or "" for none;
 * two of them the same string are one token serving both (GPT-2's <|endoftext|>); a min_frequency
 * below 1 is refused. */
typedef struct {
    const char *const *files;
    int n_files;
    int vocab_size;              /* all tokens: 256 bytes + merges + special tokens */
    const char *pattern;
    const char *bos, *eos, *pad;
    int min_frequency;           /* >= 1: a pair seen fewer times is never merged (the vocabulary stays smaller) */
    int quiet;                   /* no progress on stderr */
} dt_tok_train_options;
void dt_tok_train_defaults(dt_tok_train_options *o);
int dt_tok_train(const dt_tok_train_options *o, const char *out_dir, dt_error *err);

typedef struct {
    int32_t vocab_size, model_vocab, n_merges, n_added, n_special;
    int32_t n_unused;                                    /* ids below vocab_size with no token */
    int byte_fallback, ignore_merges;
    const char *unk_token;                               /* NULL when none */
    const char *normalizer, *pre_tokenizer, *decoder;    /* top-level component types, or "none" */
    int n_prefix, n_suffix;                              /* special ids the post-processor adds */
    int32_t bos_id, eos_id, pad_id;
} dt_tok_summary;
void dt_tok_info(const dt_tok *tok, dt_tok_summary *s);
/* ---------------------------------------------------------------- the machine */

/* The CPU and the kernel path this process uses. The default build runs on any x86-64 CPU; the
 * fused attention, exp and elementwise kernels exist for baseline x86-64 ("portable"), "avx2"
 * and "avx512" (16-wide), and the widest the CPU supports is chosen once at start-up. DT_ISA in
 * the environment forces one: portable | avx2 | avx512. Matrix products are OpenBLAS's, which
 * picks its own kernels for the CPU (blas_core names them when OpenBLAS reports it) unless
 * OPENBLAS_CORETYPE names a core; the library never overrides that choice, it reports it
 * (blas_core_wide is what a program can set before OpenBLAS loads; the CLI does, see README). */
typedef struct {
    char cpu[64];                /* the CPU's brand string ("" when it has none) */
    const char *path;            /* the kernel path in use */
    const char *best;            /* the widest path this CPU supports */
    int avx2, fma, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    int avxvnni;                 /* AVX-VNNI (256-bit vpdpbusd): the avx2 path's int8 products use it */
    const char *blas_core;       /* OpenBLAS's core for this CPU, or "" when unknown */
    const char *blas_core_env;   /* OPENBLAS_CORETYPE when set (it chose the core), else "" */
    int blas_core_narrow;        /* 1: the CPU has AVX-512 but OpenBLAS's core uses no AVX-512 kernels */
    const char *blas_core_wide;  /* OpenBLAS's AVX-512 core for this CPU ("Cooperlake" with AVX-512 BF16,
                                    else "SkylakeX"); "" without AVX-512 F/BW/VL/DQ */
    int threads;                 /* OpenMP threads (omp_get_max_threads) */
} dt_system_info;
void dt_system(dt_system_info *out);
/* 0 when DT_ISA is unset or names a path this CPU runs; else -1 with a message naming DT_ISA
 * (a path the CPU lacks is refused, never silently replaced). */
int dt_system_check(dt_error *err);

/* ---------------------------------------------------------------- real vocabularies */

/* Gives the model the tokenizer at path (a tokenizer.json or a directory holding one, with its
 * tokenizer_config.json when there); NULL makes it byte-level. A vocabulary larger than the
 * embedding (a larger embedding, padded, is fine) or special ids of m->cfg outside it are refused
 * naming the file; the bos / pad / eos ids m->cfg leaves unset become the tokenizer's. The next
 * dt_model_save writes it. */
int dt_model_set_tokenizer(dt_model *m, const char *path, dt_error *err);
/* The model's tokenizer; NULL for a byte-level model (or one of token ids only, below). */
const dt_tok *dt_model_tok(const dt_model *m);
/* 0 when the model reads and writes text (a tokenizer, or bytes); else fails naming the checkpoint
 * that came without its tokenizer (dt_vocab.ids_only_dir) and what to put there. Every text
 * function below refuses so; a caller checks first to refuse before any work. */
int dt_model_check_text(const dt_model *m, dt_error *err);
/* 1 when two vocabularies read text the same way (both bytes, or tokenizer.json files of the same JSON
 * value: whitespace and the order of an object's keys aside, and when neither has a normalizer, the
 * added tokens' "normalized" flags, which then change no text and which GGUF does not keep). */
int dt_vocab_same(const dt_vocab *a, const dt_vocab *b);
/* A tokenizer's identity as dt_vocab_same tells tokenizers apart, for a file to record: 16 hex
 * digits, equal for vocabularies dt_vocab_same finds the same; "" for a byte-level one. A
 * vocabulary of token ids only (no tokenizer) is refused, as dt_model_check_text refuses it. */
int dt_vocab_fingerprint(const dt_vocab *v, char out[17], dt_error *err);
/* Text into the model's ids: encoded by its tokenizer (add_special: the post-processor's BOS etc.,
 * as encode(add_special_tokens=True)), or its bytes, each checked against vocab_size. *ids is
 * malloc'd (free it; it holds at least one id). */
int dt_model_encode(const dt_model *m, const char *text, size_t len, int add_special, int **ids, size_t *n,
                    dt_error *err);
/* A prompt as `generate` and the server read it: dt_model_encode with special tokens; an empty
 * prompt is BOS (refused when the tokenizer has none), or a line break for a byte-level model. */
int dt_model_encode_prompt(const dt_model *m, const char *text, int **ids, size_t *n, dt_error *err);
/* Ids into text (*text malloc'd, NUL-terminated); skip_special leaves special tokens out. An id that
 * is not a token (not a byte, for a byte-level model) is an error naming it. */
int dt_model_decode(const dt_model *m, const int *ids, size_t n, int skip_special, char **text, size_t *len,
                    dt_error *err);
/* A dt_tok_stream of the model's text (its tokenizer's, or its bytes): ids of an embedding padded
 * past the tokenizer add no text. Fails as dt_model_check_text does for a model of token ids only. */
int dt_model_tok_stream(const dt_model *m, int skip_special, dt_tok_stream **s, dt_error *err);
/* A whole text file as the model reads text (no special tokens added): what every command that
 * reads text (eval, calibration, analyses, needle, compare, training) goes through. An empty file
 * is an error naming it; *bytes (may be NULL) gets the file's size. */
int dt_model_text_tokens(const dt_model *m, const char *path, int **tokens, size_t *n, size_t *bytes, dt_error *err);
/* A vocabulary without a model (e.g. the one training will give its model): a tokenizer.json or its
 * directory, or bytes for path NULL; and a text file through it, as dt_model_text_tokens. */
int dt_vocab_load(dt_vocab *v, const char *path, dt_error *err);
void dt_vocab_free(dt_vocab *v);
int dt_vocab_text_tokens(const dt_vocab *v, const char *path, int **tokens, size_t *n, size_t *bytes, dt_error *err);
/* The same for the models in dirs (their vocabularies, read from the directories or GGUF files, must be
 * the same; a mix is refused naming the dirs). */
int dt_models_text(const char *const *dirs, int n, const char *path, int **tokens, size_t *count, dt_error *err);
/* 0 when the models in dirs share one vocabulary (as dt_models_text requires), without reading text:
 * losses per token of models that split text differently are not comparable. */
int dt_models_same_vocab(const char *const *dirs, int n, dt_error *err);

/* ---------------------------------------------------------------- token datasets */

/* Text tokenised once into memory-mappable shards (README "Token datasets"): DIR/dataset.json,
 * DIR/train-00000.tok ..., DIR/val-00000.tok ..., and a copy of the tokenizer. */
typedef enum { DT_DOC_FILE = 0, DT_DOC_LINE = 1, DT_DOC_PARAGRAPH = 2 } dt_doc_split;

typedef struct {
    const char *tokenizer_path;  /* tokenizer.json or a directory holding one */
    const char *const *inputs;   /* UTF-8 text files */
    int n_inputs;
    const char *const *val_inputs; /* text files that are the validation split whole (then
                                    val_fraction must be 0: no document of inputs is held out) */
    int n_val_inputs;
    const char *out_dir;         /* built whole under a temporary name, then renamed: a dataset there is
                                    replaced whole; a directory holding other files is refused */
    float val_fraction;          /* documents held out, spread evenly [0.01]; 0 = none */
    dt_doc_split doc_split;      /* what a document is [paragraph: text up to a blank line] */
    int append_eos;              /* the tokenizer's EOS after each document (when it has one) [1] */
    uint64_t shard_tokens;       /* tokens per shard [2^27] */
    uint64_t block_bytes;        /* read size, and about the longest piece of a document encoded at
                                    once (0: 4 MiB); memory stays a few blocks whatever the input size,
                                    except for a document the tokenizer cannot cut (README "Token
                                    datasets"), which is read whole */
    int quiet;                   /* no progress line on stderr */
} dt_tokenize_options;

typedef struct {
    uint64_t bytes, tokens[2], documents[2]; /* [0] train, [1] validation */
    int shards[2];
    int32_t vocab_size;
    int width;                   /* bytes per stored id: 2 or 4 */
} dt_tokenize_stats;

void dt_tokenize_defaults(dt_tokenize_options *o);
int dt_tokenize(const dt_tokenize_options *o, dt_tokenize_stats *stats, dt_error *err);

typedef struct {
    int64_t vocab_size;          /* every id is below it */
    int eos_id;                  /* −1: none */
    uint64_t bytes, tokens[2];
} dt_tokens_summary;

int dt_tokens_info(const char *dir, dt_tokens_summary *s, dt_error *err);
/* All ids of a split ("train" or "val") into *tokens (malloc'd); every shard is checked (magic,
 * version, width, count against the file size) and every id against vocab_limit, with a message
 * naming the shard. */
int dt_tokens_load(const char *dir, const char *split, int64_t vocab_limit, int **tokens, size_t *n, dt_error *err);

/* ---------------------------------------------------------------- utilities */

uint64_t dt_rng_next(uint64_t *state);      /* splitmix64 */
float dt_rng_uniform(uint64_t *state);      /* [0, 1) */
float dt_rng_normal(uint64_t *state);       /* N(0, 1) */

/* The library's monotonic clock in seconds (timings, progress): never steps with the wall clock. */
double dt_seconds(void);
/* Room for `need` items of item_size bytes in the growable array whose pointer is at items (a
 * T **), holding *cap: nothing when *cap >= need, else realloc to *cap doubled (from `first` when
 * 0) until it holds them. -1 when out of memory or past size_t, the array and *cap untouched. */
int dt_grow(void *items, size_t *cap, size_t need, size_t item_size, size_t first);

/* snprintf of a file path into out[n]; a path that does not fit is an error, never truncated. */
int dt_pathf(char *out, size_t n, dt_error *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Write-to-temp-then-rename helpers: dt_atomic_open gives a FILE* on "<path>.tmp.<pid>", creating
 * path's missing directories first (as `mkdir -p`; what every output of the library does). */
typedef struct {
    char path[4096];
    char tmp[4096 + 32];
    void *fp;                    /* FILE* */
} dt_atomic_file;
int dt_atomic_open(dt_atomic_file *f, const char *path, dt_error *err);
int dt_atomic_commit(dt_atomic_file *f, dt_error *err);  /* fflush, fsync, close, rename, fsync dir */
void dt_atomic_abort(dt_atomic_file *f);                  /* close, unlink temp */
/* Removes what the outputs this process was writing left under their temporary names
 * ("<name>.tmp.<pid>", files and a quantised checkpoint's directory) in the directories it wrote
 * them in, for a process about to end on a signal: async-signal-safe, so a SIGINT / SIGTERM
 * handler may call it (base/temporaries.c). */
void dt_remove_temporaries(void);

#ifdef __cplusplus
}
#endif
#endif
