/* internal.h — helpers shared inside the library, not part of the public API. */
#ifndef DT_INTERNAL_H
#define DT_INTERNAL_H
#include "difftrans.h"

/* The largest vocab_size a model may have (dt_config_validate); a token dataset's too. */
#define DT_MAX_VOCAB 4194304
/* error.c: for a check of the caller's kind (dt_config_validate) run on what a file said: its
 * DT_ERR_INVALID becomes DT_ERR_FORMAT, the file being at fault; other codes stay. Returns -1. */
int fail_as_format(dt_error *err);
/* json_parse.c: 1 when text[len] is one JSON value (RFC 8259, after an optional UTF-8 BOM, white
 * space around it) within cJSON's limits, else 0; allocates nothing. cJSON returns NULL for text
 * that is not JSON and for an allocation that failed: after a NULL, valid text means the parser
 * ran out of memory (DT_ERR_NOMEM), invalid text a file that is not JSON (DT_ERR_FORMAT). */
int json_text_valid(const char *text, size_t len);
/* Writes text plus a newline to path through a temporary file and a rename. */
int write_text_atomic(const char *path, const char *text, dt_error *err);
/* dt_atomic_commit in two steps, so that several files can be completed before any is renamed:
 * flush, fsync and close (the temporary file stays), then the rename. */
int atomic_finish(dt_atomic_file *f, dt_error *err);
int atomic_rename(dt_atomic_file *f, dt_error *err);
/* fsync of the directory path's entry is in, so that a rename to path is durable. */
int sync_parent_dir(const char *path, dt_error *err);
/* temporaries.c: path's directory holds (or will) "<name>.tmp.<pid>" temporaries of this process,
 * for dt_remove_temporaries to remove on a signal. Call it before the temporary is made. */
void temp_dir_register(const char *path);

/* safetensors.c: validate entries (names, shapes, dtypes, duplicates) and write a whole file to
 * an open stream; path is for messages. */
int st_check_entries(const char *path, const dt_st_entry *entries, int n, dt_error *err);
#include <stdio.h>
int st_write_stream(FILE *fp, const char *path, const dt_st_entry *entries, int n, dt_error *err);
/* safetensors.c: 0 when path is a regular file; otherwise -1 naming it and what it is (a FIFO, a
 * directory, ...), found with stat so that nothing is opened: opening a FIFO blocks. */
int st_check_regular(const char *path, dt_error *err);
/* shards.c: sorts entries into the order a transformers LlamaForCausalLM / DiffLlamaForCausalLM
 * state_dict lists them (torch's rule: a module's own parameters in registration order, then its
 * child modules in registration order; layers by number), the order save_pretrained shards in.
 * Call it before dt_st_write_dir for a Hugging Face export. See shards.c for unknown names. */
void st_entries_state_dict_order(dt_st_entry *entries, int n);

/* dt_backward that tells `ready` as it goes which gradients are final: after ready(ctx, from), the
 * gradients of every parameter at offset >= from will not change any more in this backward. The
 * layout puts layers in order and the final norm and lm_head last, so `from` only decreases, to
 * 0 at the end. Lets a data-parallel step reduce gradients while the backward still runs. */
typedef void (*dt_grads_ready_fn)(void *ctx, size_t from);
void dt_backward_notify(const dt_model *m, dt_runstate *rs, float *grads, dt_grads_ready_fn ready, void *ctx);

/* config.c: bos_token_id / eos_token_id (an integer or a list) / pad_token_id of a JSON object
 * (config.json, generation_config.json) into s, keys that are absent leaving s as it is; and the
 * reverse. The cJSON types stay opaque here. */
/* tokens.c: copy a tokenizer.json (from: the file or its directory) and the tokenizer_config.json
 * beside it, when there, into dir, so that dir loads with AutoTokenizer.from_pretrained. */
int tokenizer_copy_from(const char *from, const char *dir, dt_error *err);
/* The smallest tokenizer_config.json with which transformers' AutoTokenizer loads tok's
 * tokenizer.json as a fast tokenizer and knows its bos / eos / pad tokens; NULL when out of
 * memory. Free with cJSON_free. */
char *tokenizer_config_text(const dt_tok *tok);
/* tokenizer/train.c: the tokenizer.json and tokenizer_config.json of a byte-level model (ids = the
 * 256 bytes in GPT-2's ByteLevel alphabet, no merges, no special tokens), for AutoTokenizer;
 * -1 when out of memory. Free both with cJSON_free. */
int tokenizer_bytes_json(char **json_text, char **config_text);
/* util.c: creates the directory path and its missing parents, like `mkdir -p`, unless it exists as a
 * directory; -1 (DT_ERR_IO) naming path and the component that could not be made (a file where a
 * directory should be, a permission) otherwise. Every output directory is made through it. */
int dir_ensure(const char *path, dt_error *err);
/* dir_ensure of the directory path names a file in (nothing for a bare name or one in /). */
int dir_ensure_parent(const char *path, dt_error *err);
/* Writes len bytes to path through a temporary file and a rename (nothing half-written). */
int write_file_atomic(const char *path, const void *data, size_t len, dt_error *err);

/* train/data.c: the data of a training run: a token dataset's train split then its val split
 * (*n_train marks the boundary), each long enough for windows of T + 1 tokens, every id checked
 * against vocab; the model's vocabulary and special ids from a tokenizer. */
int train_tokens_load(const char *dir, int vocab, int T, int **tokens, size_t *n, size_t *n_train, dt_error *err);
int train_vocab_from_tokenizer(dt_config *cfg, const char *tokenizer_path, dt_error *err);
/* tokens.c: 0 when dir is a directory (a token dataset is one); else -1 naming it (a text file given
 * as a dataset would otherwise be read first as a tokenizer.json and refused as "not JSON"). */
int tokens_dir_check(const char *dir, dt_error *err);

struct cJSON;
/* A small JSON file (config.json and its kin, at most 16 MiB) that must be one JSON value; NULL
 * with a message naming the file and the line otherwise. Free with cJSON_Delete. */
struct cJSON *json_load_file(const char *path, dt_error *err);
/* generation_config.json: read its token ids into s (1 when the file does not exist, s untouched)
 * and, when keep is not NULL, the whole file as compact JSON into *keep (NULL without a file; free
 * it); write s over the token ids of kept (NULL: none), its other keys (transformers' sampling
 * defaults, transformers_version, ...) as they were. */
int generation_config_load(dt_special_ids *s, char **keep, const char *path, dt_error *err);
int generation_config_save(const dt_special_ids *s, const char *kept, const char *path, dt_error *err);
/* config.json with torch_dtype naming the stored dtype. */
int config_save_dtype(const dt_config *cfg, const char *path, dt_dtype dtype, dt_error *err);
int special_ids_parse(const struct cJSON *root, dt_special_ids *s, const char *path, dt_error *err);
int special_ids_add(struct cJSON *root, const dt_special_ids *s);
/* A whole regular file of at most max_bytes into a NUL-terminated buffer (*len excludes the NUL);
 * `what` names the kind of file in the message for a larger one ("a config"). Free with free(). */
int read_text_file(const char *path, size_t max_bytes, const char *what, char **out, size_t *len, dt_error *err);
/* Opens path for reading only if it is a regular file: opened with O_NONBLOCK, so that a FIFO
 * cannot block the open (waiting for a writer forever), checked with fstat on the opened
 * descriptor (no gap between check and use), then made blocking again. Every reader of a file a
 * user names, or of one in a directory a user names, opens it with these. On failure err says
 * "PATH: cannot open: ..." or "PATH: not a regular file", and errno is that of the failed open
 * (ENOENT: nothing is at path, which some callers accept) or EINVAL for a file that is not a
 * regular one. */
FILE *open_regular_file(const char *path, dt_error *err);
struct stat;
/* The same as a descriptor (close with close()); *sb (when not NULL) gets the file's fstat. */
int open_regular_fd(const char *path, struct stat *sb, dt_error *err);

/* model/model.c: the stage of a training directory's checkpoint (train/checkpoint.h), which the
 * loaders of DIR read too: DIR/.next, complete once train_state.json is in it. checkpoint_pending:
 * 1 when DIR/.next holds a complete checkpoint whose commit has not finished (stage = its path),
 * the checkpoint a reader of DIR loads, whole, and the one the next resume commits. */
#define CHECKPOINT_STAGE ".next"
#define CHECKPOINT_LAST "train_state.json" /* written last, renamed last: it names the step of the others */
int checkpoint_pending(const char *dir, char *stage, size_t n);

/* model/vocab.c: a model's vocabulary. vocab_load_dir reads a checkpoint directory's (see
 * dt_model_load) and checks cfg's special ids against it; vocab_load_tokenizer a tokenizer.json
 * (or its directory) that must fit vocab_size ids; vocab_save writes it into dir (hf_export: a
 * byte-level model also gets a tokenizer.json of its bytes), removing what would contradict it. */
int vocab_load_dir(dt_vocab *v, const char *dir, const dt_config *cfg, dt_error *err);
int vocab_load_tokenizer(dt_vocab *v, const char *path, int vocab_size, dt_error *err);
int vocab_save(const dt_vocab *v, const char *dir, int hf_export, dt_error *err);
void vocab_free(dt_vocab *v);

/* model/decode.c: the KV cache's sizes for max_tokens positions: *cells = L·max_tokens·KV·hd
 * values each of K and V, *scales = L·max_tokens·KV (INT8's per-row scales), *bytes all of them
 * take; -1 when a product does not fit in size_t (checked before anything is allocated). */
int kvcache_size(const dt_config *c, int max_tokens, dt_kv_dtype dtype, size_t *cells, size_t *scales, size_t *bytes);
/* One head's multiply-adds at a decode step over n cached positions, n·hd, in size_t: the
 * largest context (2^20) times the largest head_dim (4096) overflows int. */
size_t decode_head_work(int n, int hd);
/* The attention over a KV cache that dt_decode_step and the batched step (model/batch.c) share:
 * kv_attention_tasks(c) independent tasks per query (an output head each: H query heads, or H/2
 * differential heads for DIFF); kv_attention_task runs one for R ≤ CACHE_ROWS_MAX consecutive
 * queries of one sequence (q + r·ldq [H·hd] at position n0 − 1 + r) over positions 0..n0 − 1 + r
 * of `layer` into out + r·ldo ([H·hd]; DIFF V2: the query heads, combined by the caller), with
 * sc1, sc2 [R, lds] as scratch (lds ≥ n0 − 1 + R), each row the same bits for any R; kv_store
 * puts a position's k and v [KV·hd] into the cache in its storage type; kv_max_tokens is the
 * cache's length; kv_fed the positions 0..kv_fed − 1 a sequence has fed (kv_set_fed after a step). */
int kv_attention_tasks(const dt_config *c);
/* model/generate.c: 0 when logits [V] are all finite; else fails naming the first that is not and
 * the position whose logits they are (weights that overflow float32 give inf / NaN logits, from
 * which any sample is noise). dt_generate and the serving engine check every step's. */
int logits_check_finite(const float *logits, int V, int position, dt_error *err);

/* model/ablation.c: how c's query heads pair into output heads, as layers.h's HEADS_* numbers */
int config_head_pairing(const dt_config *c);
void kv_attention_task(const dt_model *m, const dt_kvcache *kc, int layer, int task, int n0, int R, const float *q,
                       size_t ldq, float *out, size_t ldo, float *sc1, float *sc2, size_t lds);
void kv_store(dt_kvcache *kc, int layer, int pos, int kvdim, int kv_heads, const float *k, const float *v);
int kv_max_tokens(const dt_kvcache *kc);
int kv_fed(const dt_kvcache *kc);
void kv_set_fed(dt_kvcache *kc, int fed);
#endif
