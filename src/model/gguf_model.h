/* gguf_model.h — a llama-architecture model as a GGUF file (gguf_model.c; README "GGUF"). Writing
 * is the public dt_model_save_gguf; reading is reached through dt_model_load. */
#ifndef DT_GGUF_MODEL_H
#define DT_GGUF_MODEL_H
#include "difftrans.h"

/* 1 when dt_model_load should read path as a GGUF file: not a directory, and a name ending in
 * ".gguf" or a regular file that begins with the GGUF magic. */
int gguf_model_path(const char *path);
/* The model in a GGUF file: llama.cpp's llama architecture (tensors F32, F16, BF16, Q8_0 or Q4_0;
 * q_proj / k_proj rows put back into HF's RoPE order), its tokenizer (tokenizer.ggml.model "gpt2"
 * with a pre-tokenizer difftrans can express, or "llama", SentencePiece: gguf_spm.h) as the model's
 * vocabulary. Everything the file says is checked; a refusal names the file and the problem. */
int gguf_model_load(dt_model *m, const char *path, dt_error *err);
#endif
