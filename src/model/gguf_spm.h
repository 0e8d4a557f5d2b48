/* gguf_spm.h — llama.cpp's SentencePiece vocabularies (tokenizer.ggml.model "llama") and the BPE
 * tokenizer.json that gives the same ids, both ways (gguf_spm.c; README "GGUF"). Internal to
 * gguf_model.c, which writes and reads the rest of the file.
 *
 * llama.cpp's SentencePiece tokenizer (llm_tokenizer_spm, llama-vocab.cpp) starts from the
 * characters of the text and joins, again and again, the two neighbouring pieces whose
 * concatenation is the token of the highest score (the leftmost pair among equal scores); pieces
 * that end as no token become their bytes' <0xNN> tokens. A BPE does the same with merges ranked
 * by the merged token's score, one merge for each way of cutting a token into two tokens (what
 * Hugging Face's converters write for Llama 2). */
#ifndef DT_GGUF_SPM_H
#define DT_GGUF_SPM_H
#include <stdint.h>

#include <cjson/cJSON.h>

#include "difftrans.h"
#include "io/gguf.h"
#include "tokenizer/tok.h"

/* llama.cpp's token types (tokenizer.ggml.token_type). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* A set of strings: open addressing over indices into an array of views (gguf_model.c). Keyed by
 * a polynomial hash, sum of s[i]·TOKSET_MUL^i (mod 2^64), which the hashes of a string's prefixes
 * give for its suffixes in O(1): the cuts of a token are looked up without hashing each piece. */
typedef struct {
    struct {
        int64_t id;              /* -1: empty */
        uint64_t hash;
    } *slot;
    size_t mask;
} tokset;

#define TOKSET_MUL 0x100000001B3ull /* odd, so invertible mod 2^64 */

int tokset_init(tokset *h, int64_t n);
uint64_t tokset_hash(const char *s, size_t len);
/* Adds v[i]; returns the index already holding the same bytes, or -1. */
int64_t tokset_add(tokset *h, const gguf_str *v, int64_t i);
/* The index of the string s[0..len) in v, or -1. */
int64_t tokset_find(const tokset *h, const gguf_str *v, const char *s, size_t len);
/* The same, hash = tokset_hash(s, len). */
int64_t tokset_find_hashed(const tokset *h, const gguf_str *v, const char *s, size_t len, uint64_t hash);

/* 1 when s[0..len) is a byte token "<0xNN>" (upper-case hex, as llama.cpp and the BPE's
 * byte_fallback spell them), its byte in *byte. */
int spm_byte_token(const char *s, size_t len, int *byte);

/* ---------------------------------------------------------------- writing */

/* Whether the model's tokenizer.json is meant as a SentencePiece BPE (byte_fallback, or no
 * byte-level pre-tokenizer): the export writes it as "llama" then, or refuses it. */
int spm_export_wanted(const dt_tok *tok, const cJSON *root);
/* The tokenizer.json's form, which must be llama.cpp's: byte_fallback with every <0xNN> token in
 * the model's vocabulary, the normalizer Prepend "▁" + Replace " " → "▁" (*add_space_prefix 1)
 * or the Replace alone (0), no pre-tokenizer, the decoder Replace "▁" → " ", ByteFallback, Fuse
 * (and Strip " " when the normalizer prepends), added tokens matched in the raw text. A refusal
 * names path (the file being written) and what differs. */
int spm_export_form(const dt_tok *tok, const cJSON *root, const char *path, int *add_space_prefix, dt_error *err);
/* The scores (score[n]) under which llama.cpp's SentencePiece joins the pieces of any text as
 * the model's BPE merges them, for the n tokens the file holds (tok[i]: the model's vocabulary,
 * its added tokens, the ids left without a token; distinct). A merge-made token scores by the
 * rank of its merges (they must be consecutive; tied ranks give tied scores); a cut of a token
 * into two pieces that no merge joins must be one llama.cpp can never meet, or the vocabulary is
 * refused by name. */
int spm_export_scores(const tk_bpe *bpe, const gguf_str *tok, int64_t n, float *score, const char *path,
                      dt_error *err);

/* ---------------------------------------------------------------- reading */

/* A "llama" vocabulary of n tokens (type[n] checked by the caller, or NULL: all normal): its
 * scores (score[n], from tokenizer.ggml.scores, one finite F32 or I32 a token), every <0xNN> byte
 * token present, and the merges that make a BPE of the used tokens (all but type unused) give
 * llama.cpp's ids: pairs[2k], pairs[2k + 1] the left and right ids of merge k, in rank order,
 * ranks[k] its rank (0, 1, ...: merges of equal scores tie, the leftmost pair first, as
 * model.difftrans_merge_ranks says); *pairs and *ranks malloc'd. What no BPE can reproduce is
 * refused, naming the file. */
int spm_read(const gguf_file *f, const gguf_str *tok, const int32_t *type, int64_t n, float *score, int32_t **pairs,
             uint32_t **ranks, int64_t *n_pairs, dt_error *err);
#endif
