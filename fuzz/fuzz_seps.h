/* fuzz_seps.h — how a fuzz input that stands for several files is split (the seed script writes
 * the same separators; see fuzz/make_seeds.sh). */
#ifndef DT_FUZZ_SEPS_H
#define DT_FUZZ_SEPS_H
#define FUZZ_CKPT_SEP "\n==model.safetensors==\n"
/* sharded weights: model.safetensors.index.json, then the two shards it may name */
#define FUZZ_SHARD_SEP "\n==shard==\n"
#define FUZZ_SHARD_1 "model-00001-of-00002.safetensors"
#define FUZZ_SHARD_2 "model-00002-of-00002.safetensors"
/* a tokenizer directory: tokenizer.json, then tokenizer_config.json */
#define FUZZ_TOKCFG_SEP "\n==tokenizer_config.json==\n"
/* a token dataset: dataset.json, then the shards it may name */
#define FUZZ_TOKENS_SEP "\n==tok==\n"
#define FUZZ_TOKENS_TRAIN "train-00000.tok"
#define FUZZ_TOKENS_VAL "val-00000.tok"
#endif
