/* gguf_model.c — llama-architecture models as GGUF files (README "GGUF"): dt_model_save_gguf
 * writes what llama.cpp's convert_hf_to_gguf.py writes for a LlamaForCausalLM (general.architecture
 * "llama", its hyper-parameters, the tensor names blk.N.attn_q ..., the tokenizer as
 * tokenizer.ggml.*: a byte-level BPE as "gpt2", a SentencePiece-style one as "llama" with
 * gguf_spm.c), and gguf_model_load reads such files, ours and llama.cpp's own, back into a
 * dt_model.
 *
 * Two things differ between the engines and are translated here, both ways:
 *   - RoPE pairs. HF and difftrans rotate channels (i, i + hd/2) of a head, llama.cpp's llama
 *     architecture adjacent channels (2i, 2i + 1). The rows of q_proj and k_proj are reordered
 *     within each head so that both compute the same scores (hf_row below).
 *   - Quantised layers. difftrans's Q8_0 / Q4_0 blocks are ggml's byte for byte: they are written
 *     and read as they are (rows reordered for q / k), so both engines multiply the same integers.
 * Embeddings and norms stay F32, as difftrans keeps them; the LM head is quantised only when the
 * model's is. */
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
#include "io/gguf.h"
#include "model/gguf_model.h"
#include "model/gguf_spm.h"
#include "model/model_quant.h"
#include "tokenizer/tok.h"

/* Llama 3's pre-tokenization regex (tokenizer.json's Split pattern; llama.cpp's "llama-bpe"). */
static const char LLAMA3_REGEX[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                   "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char *const LINEAR_NAMES[LIN_PER_LAYER] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                                        "ffn_gate", "ffn_up", "ffn_down"};

/* The HF row of GGUF row r of q_proj / k_proj (heads of hd rows): GGUF row 2i + j of a head is HF
 * row i + j·hd/2, what convert_hf_to_gguf.py's permute does. */
static int hf_row(int r, int hd) {
    const int h = r / hd, k = r % hd;
    return h * hd + (k % 2) * (hd / 2) + k / 2;
}

static const float *float_linear(const dt_model *m, int layer, int which) {
    if (layer == m->cfg.num_hidden_layers) return m->w.lm_head;
    const dt_layer_weights *w = &m->w.layers[layer];
    const float *const p[LIN_PER_LAYER] = {w->q_proj, w->k_proj, w->v_proj, w->o_proj,
                                           w->gate_proj, w->up_proj, w->down_proj};
    return p[which];
}

/* ---------------------------------------------------------------- a set of strings */

int tokset_init(tokset *h, int64_t n) {
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap *= 2;
    h->mask = cap - 1;
    h->slot = malloc(cap * sizeof *h->slot);
    if (!h->slot) return -1;
    for (size_t k = 0; k < cap; k++) h->slot[k].id = -1;
    return 0;
}

uint64_t tokset_hash(const char *s, size_t len) {
    uint64_t h = 0, pw = 1;
    for (size_t i = 0; i < len; i++, pw *= TOKSET_MUL) h += (unsigned char)s[i] * pw;
    return h;
}

/* The polynomial hash's low bits depend on the bytes' low bits alone: the slot comes from all of
 * its bits, and the length (splitmix64's finaliser). */
static size_t slot_of(const tokset *h, uint64_t hash, size_t len) {
    uint64_t z = hash ^ ((uint64_t)len * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (size_t)(z ^ (z >> 31)) & h->mask;
}

int64_t tokset_add(tokset *h, const gguf_str *v, int64_t i) {
    const uint64_t hash = tokset_hash(v[i].p, v[i].len);
    const int64_t j = tokset_find_hashed(h, v, v[i].p, v[i].len, hash);
    if (j >= 0) return j;
    size_t k = slot_of(h, hash, v[i].len);
    while (h->slot[k].id >= 0) k = (k + 1) & h->mask;
    h->slot[k].id = i;
    h->slot[k].hash = hash;
    return -1;
}

int64_t tokset_find_hashed(const tokset *h, const gguf_str *v, const char *s, size_t len, uint64_t hash) {
    for (size_t k = slot_of(h, hash, len); h->slot[k].id >= 0; k = (k + 1) & h->mask) {
        const gguf_str *o = &v[h->slot[k].id];
        if (h->slot[k].hash == hash && o->len == len && memcmp(o->p, s, len) == 0) return h->slot[k].id;
    }
    return -1;
}

int64_t tokset_find(const tokset *h, const gguf_str *v, const char *s, size_t len) {
    return tokset_find_hashed(h, v, s, len, tokset_hash(s, len));
}

/* ---------------------------------------------------------------- llama.cpp's end of generation */

/* The texts of the tokens llama.cpp ends generation at whatever the eos / eot / eom keys say
 * (llama-vocab.cpp, special_eog_ids, as of ggml-org/llama.cpp de3ff81). */
static const char *const EOG_TEXT[] = {
    "<|eot_id|>", "<|im_end|>",       "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>",    "<|eom_id|>", "<EOT>",    "_<EOT>",    "[EOT]",
    "[EOS]",         "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
};
#define N_EOG ((int)(sizeof EOG_TEXT / sizeof EOG_TEXT[0]))

typedef const char *(*token_fn)(void *ctx, uint64_t i, size_t *len);

/* The index of the string in EOG_TEXT, or -1. */
static int eog_index(const char *s, size_t len) {
    for (int k = 0; k < N_EOG; k++)
        if (strlen(EOG_TEXT[k]) == len && memcmp(EOG_TEXT[k], s, len) == 0) return k;
    return -1;
}

/* has[k]: whether one of the n tokens is EOG_TEXT[k]. */
static void eog_scan(token_fn at, void *ctx, int64_t n, unsigned char has[N_EOG]) {
    memset(has, 0, N_EOG);
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *t = at(ctx, (uint64_t)i, &len);
        const int k = eog_index(t, len);
        if (k >= 0) has[k] = 1;
    }
}

/* llama.cpp's fill-in-the-middle pad, repository and file-separator tokens end generation too: the
 * ids their keys give, else a token of one of these texts (llama-vocab.cpp, as EOG_TEXT). */
static const char *const FIM_KEY[3] = {"tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                                       "tokenizer.ggml.fim_sep_token_id"};
#define FIM_TEXTS 9 /* the most texts of one kind, and the NULL after them */
static const char *const FIM_TEXT[3][FIM_TEXTS] = {
    {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
    {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
    {"<|file_sep|>", NULL},
};

/* llama.cpp's fill-in-the-middle prefix, suffix and middle tokens end nothing, but found by their
 * text (no key gives them: the newer key, else the older one) they become control tokens. */
static const char *const FIM_INFILL_KEY[3][2] = {
    {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
    {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
    {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
};
static const char *const FIM_INFILL_TEXT[3][FIM_TEXTS] = {
    {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
     "<|prefix|>", NULL},
    {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
     "<|suffix|>", NULL},
    {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
     "<|middle|>", NULL},
};

/* For each fim[k] still -1 (no key), the lowest id of a token of one of FIM_TEXT[k]'s texts, if any
 * (llama.cpp takes whichever its hash map gives first: the same but in a vocabulary holding two of
 * a kind's texts). */
static void fim_by_text(token_fn at, void *ctx, int64_t n, const char *const texts[3][FIM_TEXTS], int fim[3]) {
    int found[3] = {-1, -1, -1};
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *t = at(ctx, (uint64_t)i, &len);
        for (int k = 0; k < 3; k++)
            for (int j = 0; found[k] < 0 && texts[k][j]; j++)
                if (strlen(texts[k][j]) == len && memcmp(texts[k][j], t, len) == 0) found[k] = (int)i;
    }
    for (int k = 0; k < 3; k++)
        if (fim[k] < 0) fim[k] = found[k];
}

/* Whether llama.cpp ends generation at a token of text s in a vocabulary holding the texts has:
 * one of EOG_TEXT, less the two it takes out again, "<|end|>" beside "<|return|>" and "<|call|>"
 * (or "<|calls|>" and "<|flush|>"), and "</s>" beside "<|tool_response>". */
static int eog_by_text(const char *s, size_t len, const unsigned char has[N_EOG]) {
    const int k = eog_index(s, len);
#define HAS(t) has[eog_index(t, strlen(t))]
    if (k < 0) return 0;
    if (!strcmp(EOG_TEXT[k], "<|end|>") &&
        ((HAS("<|return|>") && HAS("<|call|>")) || (HAS("<|calls|>") && HAS("<|flush|>"))))
        return 0;
    if (!strcmp(EOG_TEXT[k], "</s>") && HAS("<|tool_response>")) return 0;
#undef HAS
    return 1;
}

/* ================================================================ export */

/* ---------------------------------------------------------------- the tokenizer */

typedef struct {
    gguf_str *tok;               /* [n] token strings */
    int32_t *type;               /* [n] */
    int64_t n;
    char *arena;                 /* the strings made here ("[PAD7]", byte characters, "a b" merges) */
    size_t arena_len, arena_cap;
    size_t *pad_off;             /* [n] arena offset of a made token string, or SIZE_MAX */
    size_t *merge_off, *merge_len;
    int64_t n_merges;
    const char *pre;
    int spm;                     /* a SentencePiece vocabulary ("llama"), else byte-level BPE ("gpt2") */
    float *score;                /* [n] SentencePiece's token scores */
    int add_space_prefix;        /* SentencePiece: "▁" before the text */
    int add_bos, add_eos;
    int bos, eos, eot, eom, pad, unk;
    int eos_stand_in;            /* eos when it only stands in for "none", else -1 */
    int bos_stand_in;            /* the BOS llama.cpp takes where the model has none, else -1 */
    char *chat_template;
} vocab_out;

static void vocab_out_free(vocab_out *v) {
    free(v->tok);
    free(v->type);
    free(v->arena);
    free(v->pad_off);
    free(v->merge_off);
    free(v->merge_len);
    free(v->score);
    free(v->chat_template);
    memset(v, 0, sizeof *v);
}

/* Appends bytes to the arena; returns their offset, or SIZE_MAX when out of memory. */
static size_t arena_put(vocab_out *v, const char *s, size_t n) {
    if (grow_array(&v->arena, &v->arena_cap, v->arena_len + n + 1, 1, 4096) != 0) return SIZE_MAX;
    const size_t off = v->arena_len;
    memcpy(v->arena + off, s, n);
    v->arena[off + n] = '\0';
    v->arena_len += n + 1;
    return off;
}

static const char *token_at(void *ctx, uint64_t i, size_t *len) {
    const vocab_out *v = ctx;
    *len = v->tok[i].len;
    return v->pad_off[i] != SIZE_MAX ? v->arena + v->pad_off[i] : v->tok[i].p;
}

static const char *merge_at(void *ctx, uint64_t i, size_t *len) {
    const vocab_out *v = ctx;
    *len = v->merge_len[i];
    return v->arena + v->merge_off[i];
}

/* A bool member, dflt when absent (the Rust library's default). */
static int json_bool(const cJSON *o, const char *key, int dflt) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(j) ? cJSON_IsTrue(j) : dflt;
}

static int json_unset(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return !j || cJSON_IsNull(j) || (cJSON_IsString(j) && !*j->valuestring);
}

static const char *json_type(const cJSON *o) {
    const cJSON *t = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "type") : NULL;
    return cJSON_IsString(t) ? t->valuestring : "";
}

/* ByteLevel as a pre-tokenizer: add_prefix_space false (the library's default is true), and its
 * own regex on or off as asked. */
static int is_bytelevel(const cJSON *p, int use_regex) {
    return !strcmp(json_type(p), "ByteLevel") && !json_bool(p, "add_prefix_space", 1) &&
           json_bool(p, "use_regex", 1) == use_regex;
}

/* llama.cpp's name of the pre-tokenizer, or NULL when it has none that splits text the same way. */
static const char *pre_tokenizer_name(const cJSON *pre) {
    if (is_bytelevel(pre, 1)) return "gpt-2";
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    if (strcmp(json_type(pre), "Sequence") != 0 || cJSON_GetArraySize(items) != 2) return NULL;
    const cJSON *split = cJSON_GetArrayItem(items, 0), *bl = cJSON_GetArrayItem(items, 1);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(split, "pattern");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    const cJSON *behavior = cJSON_GetObjectItemCaseSensitive(split, "behavior");
    if (strcmp(json_type(split), "Split") != 0 || !cJSON_IsString(re) || strcmp(re->valuestring, LLAMA3_REGEX) != 0 ||
        !cJSON_IsString(behavior) || strcmp(behavior->valuestring, "Isolated") != 0 || json_bool(split, "invert", 0))
        return NULL;
    return is_bytelevel(bl, 0) ? "llama-bpe" : NULL;
}

static int set_token(vocab_out *v, int64_t id, const char *s, size_t len, int type) {
    const size_t off = arena_put(v, s, len);
    if (off == SIZE_MAX) return -1;
    v->pad_off[id] = off;
    v->tok[id].len = len;
    v->tok[id].p = NULL;
    v->type[id] = type;
    return 0;
}

/* Fills the ids the model's tokenizer leaves without a token as llama.cpp's converter does
 * ("[PAD<id>]", unused). */
static int pad_holes(vocab_out *v) {
    for (int64_t i = 0; i < v->n; i++)
        if (v->type[i] == 0) {
            char name[32];
            const int len = snprintf(name, sizeof name, "[PAD%lld]", (long long)i);
            if (set_token(v, i, name, (size_t)len, TT_UNUSED) != 0) return -1;
        }
    return 0;
}

static int vocab_alloc(vocab_out *v, int64_t n) {
    v->n = n;
    v->tok = calloc((size_t)n, sizeof *v->tok);
    v->type = calloc((size_t)n, sizeof *v->type);
    v->pad_off = malloc((size_t)n * sizeof *v->pad_off);
    if (!v->tok || !v->type || !v->pad_off) return -1;
    for (int64_t i = 0; i < n; i++) v->pad_off[i] = SIZE_MAX;
    v->bos = v->eos = v->eot = v->eom = v->pad = v->unk = v->eos_stand_in = v->bos_stand_in = -1;
    return 0;
}

/* A byte-level model (id = byte value): GPT-2's byte alphabet as 256 tokens with no merges, which
 * llama.cpp's BPE turns into one token per byte whatever the pre-tokenizer cuts. */
static int vocab_bytes(vocab_out *v) {
    for (int b = 0; b < 256 && b < v->n; b++) {
        char ch[4];
        const int len = tk_utf8_encode(tk_byte_to_char[b], ch);
        if (set_token(v, b, ch, (size_t)len, TT_NORMAL) != 0) return -1;
    }
    v->pre = "gpt-2";
    return pad_holes(v);
}

static int refuse_tok(const char *path, dt_error *err, const char *what) {
    return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: the model's tokenizer.json has %s, which llama.cpp's BPE cannot "
                                                 "reproduce",
                        path, what);
}

/* What both of llama.cpp's tokenizers lack: one special token at most before and after the text,
 * and added tokens matched as they are (no stripping of the spaces around them). */
static int check_added_and_post(const dt_tok *tok, const char *engine, const char *path, dt_error *err) {
    if (tok->post.n_prefix > 1 || tok->post.n_suffix > 1)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: the model's tokenizer.json has a post-processor adding more than one token before or "
                            "after the text, which llama.cpp's %s cannot reproduce",
                            path, engine);
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].lstrip || tok->added[i].rstrip || tok->added[i].single_word)
            return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                "%s: the model's tokenizer.json has an added token (%.60s) with lstrip, rstrip or "
                                "single_word, which llama.cpp's %s cannot reproduce",
                                path, tok->added[i].content, engine);
    return 0;
}

/* The post-processor's special tokens and the unknown token. */
static void vocab_specials(vocab_out *v, const dt_tok *tok) {
    v->add_bos = tok->post.n_prefix == 1;
    v->add_eos = tok->post.n_suffix == 1;
    if (v->add_bos) v->bos = tok->post.prefix[0];
    if (v->add_eos) v->eos = tok->post.suffix[0];
    v->unk = tok->model.unk_id;
}

/* The model's tokenizer.json as llama.cpp's "gpt2" (byte-level BPE) vocabulary. */
static int vocab_bpe(vocab_out *v, const dt_model *m, const cJSON *root, const char *path, dt_error *err) {
    const dt_tok *tok = m->vocab.tok;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *ignore = cJSON_GetObjectItemCaseSensitive(model, "ignore_merges");
    char what[160];
    int rc = 0;
    v->pre = pre_tokenizer_name(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    if (norm && !cJSON_IsNull(norm)) {
        snprintf(what, sizeof what, "a normalizer (%s)", json_type(norm));
        rc = refuse_tok(path, err, what);
    } else if (!v->pre)
        rc = refuse_tok(path, err, "a pre-tokenizer other than GPT-2's ByteLevel regex or Llama 3's Split + ByteLevel "
                                   "(llama.cpp's \"gpt-2\" and \"llama-bpe\")");
    else if (strcmp(json_type(dec), "ByteLevel") != 0)
        rc = refuse_tok(path, err, "a decoder other than ByteLevel");
    else if (tok->model.byte_fallback) rc = refuse_tok(path, err, "byte_fallback");
    else if (!json_unset(model, "continuing_subword_prefix") || !json_unset(model, "end_of_word_suffix"))
        rc = refuse_tok(path, err, "a continuing_subword_prefix or end_of_word_suffix");
    else if (cJSON_IsTrue(ignore) != !strcmp(v->pre, "llama-bpe"))
        rc = refuse_tok(path, err, cJSON_IsTrue(ignore) ? "ignore_merges with GPT-2's pre-tokenizer"
                                                        : "Llama 3's pre-tokenizer without ignore_merges");
    else if (!json_unset(model, "difftrans_merge_ranks"))
        rc = refuse_tok(path, err, "merge ranks of its own (difftrans_merge_ranks), where llama.cpp's BPE ranks the "
                                   "merges by their place in the list");
    if (rc == 0) rc = check_added_and_post(tok, "BPE", path, err);
    /* the ids: the model's vocabulary and added tokens, holes as llama.cpp's converter fills them */
    for (int64_t id = 0; rc == 0 && id < v->n; id++) {
        size_t len = 0;
        const char *s = id < dt_tok_vocab_size(tok) ? dt_tok_id_to_token(tok, (int32_t)id, &len) : NULL;
        if (!s) continue;
        v->tok[id].p = s;
        v->tok[id].len = len;
        const int added = tok->added_of_id[id] >= 0;
        v->type[id] = !added ? TT_NORMAL : dt_tok_is_special(tok, (int32_t)id) ? TT_CONTROL : TT_USER_DEFINED;
    }
    if (rc == 0 && pad_holes(v) != 0) rc = dt_fail_oom(err, "%s: out of memory", path);
    /* merges as "a b" strings, in rank order */
    const int n_merges = cJSON_GetArraySize(merges);
    if (rc == 0 && n_merges > 0) {
        v->merge_off = malloc((size_t)n_merges * sizeof *v->merge_off);
        v->merge_len = malloc((size_t)n_merges * sizeof *v->merge_len);
        if (!v->merge_off || !v->merge_len) rc = dt_fail_oom(err, "%s: out of memory", path);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        if (rc != 0) break;
        const char *a, *b;
        size_t la;
        if (cJSON_IsString(e)) { /* the tokenizer already checked "a b" */
            a = e->valuestring;
            la = (size_t)(strchr(a, ' ') - a);
            b = a + la + 1;
        } else {
            a = e->child->valuestring;
            la = strlen(a);
            b = e->child->next->valuestring;
        }
        /* llama.cpp splits at the first space after the first byte */
        if (memchr(a + (la > 0), ' ', la - (la > 0))) {
            snprintf(what, sizeof what, "a merge whose first token holds a space (merge %lld)", (long long)v->n_merges);
            rc = refuse_tok(path, err, what);
            break;
        }
        const size_t lb = strlen(b);
        char *joined = malloc(la + 1 + lb);
        if (!joined) {
            rc = dt_fail_oom(err, "%s: out of memory", path);
            break;
        }
        memcpy(joined, a, la);
        joined[la] = ' ';
        memcpy(joined + la + 1, b, lb);
        const size_t off = arena_put(v, joined, la + 1 + lb);
        free(joined);
        if (off == SIZE_MAX) {
            rc = dt_fail_oom(err, "%s: out of memory", path);
            break;
        }
        v->merge_off[v->n_merges] = off;
        v->merge_len[v->n_merges++] = la + 1 + lb;
    }
    if (rc == 0) vocab_specials(v, tok);
    return rc;
}

/* The model's tokenizer.json as llama.cpp's "llama" (SentencePiece) vocabulary: the model's tokens
 * by id (<0xNN> bytes, the unknown token, added tokens as control or user-defined ones), scores
 * that make llama.cpp join pieces as the merges do (gguf_spm.c). */
static int vocab_spm(vocab_out *v, const dt_model *m, const cJSON *root, const char *path, dt_error *err) {
    const dt_tok *tok = m->vocab.tok;
    v->spm = 1;
    v->pre = "default";
    int rc = spm_export_form(tok, root, path, &v->add_space_prefix, err);
    if (rc == 0) rc = check_added_and_post(tok, "SentencePiece", path, err);
    for (int64_t id = 0; rc == 0 && id < v->n; id++) {
        size_t len = 0;
        const char *s = id < dt_tok_vocab_size(tok) ? dt_tok_id_to_token(tok, (int32_t)id, &len) : NULL;
        if (!s) continue;
        int byte;
        v->tok[id].p = s;
        v->tok[id].len = len;
        /* llama.cpp finds control and unknown tokens in the raw text (with parse_special): the
         * special added tokens, the unknown one among them */
        const int added = tok->added_of_id[id] >= 0;
        v->type[id] = !added                                 ? (spm_byte_token(s, len, &byte) ? TT_BYTE : TT_NORMAL)
                      : !dt_tok_is_special(tok, (int32_t)id) ? TT_USER_DEFINED
                      : id == tok->model.unk_id              ? TT_UNKNOWN
                                                             : TT_CONTROL;
    }
    if (rc == 0 && pad_holes(v) != 0) rc = dt_fail_oom(err, "%s: out of memory", path);
    if (rc == 0) vocab_specials(v, tok);
    return rc; /* the scores once every token is known to be distinct (spm_scores) */
}

/* The chat template of tokenizer_config.json, when it is one string. */
static int chat_template(vocab_out *v, const dt_vocab *vocab, const char *path, dt_error *err) {
    if (!vocab->tokenizer_config) return 0;
    cJSON *cfg = cJSON_ParseWithLength(vocab->tokenizer_config, vocab->tokenizer_config_len);
    if (!cfg) return 0; /* the model's own file, read when it loaded: only memory can fail here */
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    int rc = 0;
    if (cJSON_IsString(t) && !(v->chat_template = strdup(t->valuestring))) rc = dt_fail_oom(err, "%s: out of memory", path);
    cJSON_Delete(cfg);
    return rc;
}

/* Special ids: the config's (what generation uses) over the tokenizer's. */
static int special_ids(vocab_out *v, const dt_config *c, const char *path, dt_error *err) {
    const dt_special_ids *s = &c->special;
    if (v->add_bos && s->bos_token_id >= 0 && s->bos_token_id != v->bos)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: the tokenizer adds id %d before the text but bos_token_id is %d: llama.cpp adds "
                            "bos_token_id",
                            path, v->bos, s->bos_token_id);
    if (s->bos_token_id >= 0) v->bos = s->bos_token_id;
    /* llama.cpp cannot be told "no BOS" either: without the key a "llama" vocabulary's BOS is id 1,
     * and an id outside the vocabulary is ignored for that default. add_bos_token false keeps it
     * from adding one; the stand-in, said in the file, keeps reading it back from finding one */
    if (v->spm && v->bos < 0 && v->n > 1) v->bos_stand_in = 1;
    if (s->n_eos > 0) {
        if (v->add_eos && s->eos_token_id[0] != v->eos)
            return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                "%s: the tokenizer adds id %d after the text but eos_token_id is %d: llama.cpp adds "
                                "eos_token_id",
                                path, v->eos, s->eos_token_id[0]);
        v->eos = s->eos_token_id[0];
    }
    if (v->eos < 0) {
        /* llama.cpp cannot be told "no EOS": without the key a "gpt2" vocabulary ends generation at id
         * 11 (its default), a frequent token in many BPEs, a "llama" one at id 2. The least likely
         * token to be generated stands in: an id without a token, else the byte 0xFF (which UTF-8
         * text never holds: id 255 of a byte-level model, the token "ÿ" of a byte-level BPE,
         * SentencePiece's <0xFF>), else the pad token, else BOS */
        for (int64_t i = 0; i < v->n && v->eos < 0; i++)
            if (v->type[i] == TT_UNUSED) v->eos = (int)i;
        char ff[8] = "<0xFF>"; /* SentencePiece's byte token */
        const size_t ff_len = v->spm ? 6 : (size_t)tk_utf8_encode(tk_byte_to_char[0xFF], ff);
        for (int64_t i = 0; i < v->n && v->eos < 0; i++) {
            size_t len;
            const char *t = token_at(v, (uint64_t)i, &len);
            if (v->type[i] == (v->spm ? TT_BYTE : TT_NORMAL) && len == ff_len && memcmp(t, ff, len) == 0)
                v->eos = (int)i;
        }
        if (v->eos < 0) v->eos = s->pad_token_id >= 0 ? s->pad_token_id : v->bos;
        v->eos_stand_in = v->eos; /* said in the file, so that reading it back gives "no EOS" again */
    }
    /* eos_token_id[0] is EOS, the next ids EOT and EOM: the only other keys llama.cpp reads. Past
     * three, a token llama.cpp ends generation at by its text needs no key (it stops there anyway,
     * and reading the file finds it again); the keys go to the others, and ids that fit neither
     * are refused */
    unsigned char has[N_EOG];
    int fim[3] = {-1, -1, -1}; /* the export writes no fim keys */
    if (s->n_eos > 3) {
        eog_scan(token_at, v, v->n, has);
        fim_by_text(token_at, v, v->n, FIM_TEXT, fim);
    }
    char unfit[128] = "";
    int n_keyed = 0, n_unfit = 0;
    for (int j = 1; j < s->n_eos; j++) {
        const int id = s->eos_token_id[j];
        size_t len = 0;
        const char *t = id >= 0 && id < v->n && v->type[id] != TT_UNUSED ? token_at(v, (uint64_t)id, &len) : NULL;
        if (s->n_eos > 3 && t && (eog_by_text(t, len, has) || id == fim[0] || id == fim[1] || id == fim[2])) continue;
        if (n_keyed < 2) *(n_keyed++ ? &v->eom : &v->eot) = id;
        else {
            const size_t at = strlen(unfit);
            snprintf(unfit + at, sizeof unfit - at, "%s%d", n_unfit++ ? ", " : "", id);
        }
    }
    if (n_unfit)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: eos_token_id holds %d ids; llama.cpp reads three (tokenizer.ggml.eos_token_id, "
                            "eot_token_id, eom_token_id) and otherwise ends generation only at tokens of known "
                            "end-of-turn or fill-in-the-middle texts (such as <|eot_id|>): id%s %s would not stop "
                            "it",
                            path, s->n_eos, n_unfit > 1 ? "s" : "", unfit);
    if (s->pad_token_id >= 0) v->pad = s->pad_token_id;
    return 0;
}

/* llama.cpp asserts that no two tokens share a string. */
static int unique_tokens(vocab_out *v, const char *path, dt_error *err) {
    gguf_str *view = malloc((size_t)v->n * sizeof *view);
    tokset h;
    if (!view || tokset_init(&h, v->n) != 0) {
        free(view);
        return dt_fail_oom(err, "%s: out of memory", path);
    }
    int rc = 0;
    for (int64_t i = 0; i < v->n && rc == 0; i++) {
        view[i].p = token_at(v, (uint64_t)i, &view[i].len);
        const int64_t j = tokset_add(&h, view, i);
        if (j >= 0)
            rc = dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: ids %lld and %lld are the same token \"%.*s\": llama.cpp "
                                                       "needs every token distinct",
                              path, (long long)j, (long long)i, (int)(view[i].len > 60 ? 60 : view[i].len), view[i].p);
    }
    free(h.slot);
    free(view);
    return rc;
}

/* A SentencePiece vocabulary's scores, its tokens all known and distinct. */
static int spm_scores(vocab_out *v, const dt_tok *tok, const char *path, dt_error *err) {
    gguf_str *view = malloc((size_t)v->n * sizeof *view);
    v->score = malloc((size_t)v->n * sizeof *v->score);
    int rc = view && v->score ? 0 : dt_fail_oom(err, "%s: out of memory", path);
    for (int64_t i = 0; rc == 0 && i < v->n; i++) view[i].p = token_at(v, (uint64_t)i, &view[i].len);
    if (rc == 0) rc = spm_export_scores(&tok->model, view, v->n, v->score, path, err);
    free(view);
    return rc;
}

static int vocab_export(vocab_out *v, const dt_model *m, const char *path, dt_error *err) {
    memset(v, 0, sizeof *v);
    if (dt_model_check_text(m, err) != 0) return -1; /* a GGUF file carries a vocabulary: none to give it */
    int rc = vocab_alloc(v, m->cfg.vocab_size) != 0 ? dt_fail_oom(err, "%s: out of memory", path) : 0;
    if (rc == 0 && !m->vocab.tok && vocab_bytes(v) != 0) rc = dt_fail_oom(err, "%s: out of memory", path);
    if (rc == 0 && m->vocab.tok) {
        cJSON *root = cJSON_ParseWithLength(m->vocab.tokenizer_json, m->vocab.tokenizer_json_len);
        if (!root) rc = dt_fail_oom(err, "%s: out of memory reading the model's tokenizer.json", path);
        else if (spm_export_wanted(m->vocab.tok, root)) rc = vocab_spm(v, m, root, path, err);
        else rc = vocab_bpe(v, m, root, path, err);
        cJSON_Delete(root);
    }
    if (rc == 0) rc = chat_template(v, &m->vocab, path, err);
    if (rc == 0) rc = special_ids(v, &m->cfg, path, err);
    if (rc == 0) rc = unique_tokens(v, path, err);
    if (rc == 0 && v->spm) rc = spm_scores(v, m->vocab.tok, path, err);
    return rc;
}

static void write_vocab(gguf_writer *w, vocab_out *v) {
    gguf_w_str(w, "tokenizer.ggml.model", v->spm ? "llama" : "gpt2", v->spm ? 5 : 4);
    gguf_w_str(w, "tokenizer.ggml.pre", v->pre, strlen(v->pre));
    gguf_w_str_array(w, "tokenizer.ggml.tokens", (uint64_t)v->n, token_at, v);
    if (v->spm) gguf_w_f32_array(w, "tokenizer.ggml.scores", v->score, (uint64_t)v->n);
    gguf_w_i32_array(w, "tokenizer.ggml.token_type", v->type, (uint64_t)v->n);
    if (!v->spm) gguf_w_str_array(w, "tokenizer.ggml.merges", (uint64_t)v->n_merges, merge_at, v);
    if (v->spm) gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
    static const char *const keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
                                       "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id"};
    const int ids[] = {v->bos, v->eos, v->eot, v->eom, v->pad, v->unk};
    for (int i = 0; i < 6; i++)
        if (ids[i] >= 0) gguf_w_u32(w, keys[i], (uint32_t)ids[i]);
    /* llama.cpp ignores keys it does not know */
    if (v->eos_stand_in >= 0) gguf_w_u32(w, "difftrans.eos_stand_in", (uint32_t)v->eos_stand_in);
    if (v->bos_stand_in >= 0) gguf_w_u32(w, "difftrans.bos_stand_in", (uint32_t)v->bos_stand_in);
    /* always said: llama.cpp's default for "llama-bpe" and SentencePiece is to add BOS */
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    gguf_w_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos);
    if (v->chat_template) gguf_w_str(w, "tokenizer.chat_template", v->chat_template, strlen(v->chat_template));
}

/* ---------------------------------------------------------------- the tensors */

typedef struct {
    char name[GGUF_MAX_NAME];
    int n_dims;
    int64_t ne[2];               /* [in, out]: ggml's order, the fastest dimension first */
    uint32_t type;
    const float *f;              /* float source [out, in], or NULL */
    const qlinear *q;            /* quantised source */
    int permute_hd;              /* > 0: rows reordered for llama.cpp's RoPE (heads of this width) */
} out_tensor;

typedef struct {
    const dt_model *m;
    out_tensor *t;
    int n;
    float *rope_freqs;
} export_ctx;

static void add_tensor(export_ctx *x, const char *name, int64_t rows, int64_t cols, uint32_t type, const float *f,
                       const qlinear *q, int permute_hd) {
    out_tensor *t = &x->t[x->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = rows == 0 ? 1 : 2; /* rows 0: a vector of cols */
    t->ne[0] = cols;
    t->ne[1] = rows;
    t->type = type;
    t->f = f;
    t->q = q;
    t->permute_hd = permute_hd;
}

static int emit_tensor(void *ctx, uint64_t i, gguf_sink *s, dt_error *err) {
    const export_ctx *x = ctx;
    const out_tensor *t = &x->t[i];
    const int64_t cols = t->ne[0], rows = t->n_dims == 2 ? t->ne[1] : 1;
    if (t->q) {
        const size_t row_bytes = (size_t)q_blocks((int)cols) * qblock_bytes(t->q->fmt);
        uint8_t *row = malloc(row_bytes);
        if (!row) return dt_fail_oom(err, "out of memory writing tensor %s", t->name);
        for (int64_t r = 0; r < rows; r++) {
            const int64_t src = t->permute_hd ? hf_row((int)r, t->permute_hd) : r;
            qlinear_blocks_copy(t->q, row, (int)src, 1);
            if (gguf_sink_write(s, row, row_bytes)) break;
        }
        free(row);
        return 0;
    }
    const size_t width = t->type == GGML_TYPE_F32 ? 4 : 2;
    uint8_t *buf = malloc((size_t)cols * width);
    if (!buf) return dt_fail_oom(err, "out of memory writing tensor %s", t->name);
    for (int64_t r = 0; r < rows && !s->failed; r++) {
        const int64_t src = t->permute_hd ? hf_row((int)r, t->permute_hd) : r;
        const float *row = t->f + (size_t)src * (size_t)cols;
        for (int64_t j = 0; j < cols; j++) {
            uint32_t u = t->type == GGML_TYPE_F32   ? base_float_bits(row[j])
                         : t->type == GGML_TYPE_F16 ? float_to_half(row[j])
                                                    : float_to_bf16(row[j]);
            for (size_t b = 0; b < width; b++) buf[(size_t)j * width + b] = (uint8_t)(u >> (8 * b));
        }
        gguf_sink_write(s, buf, (size_t)cols * width);
    }
    free(buf);
    return 0;
}

/* ---------------------------------------------------------------- checks and metadata */

static int check_exportable(const dt_model *m, dt_dtype dtype, const char *path, dt_error *err) {
    const dt_config *c = &m->cfg;
    if (c->arch == DT_ARCH_DIFF)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: a DIFF Transformer (model_type diffllama) has no GGUF form: llama.cpp has no "
                            "differential-attention architecture (the matched Transformer has one; transformers' "
                            "DiffLlama reads the Hugging Face form)",
                            path);
    if (c->arch == DT_ARCH_DIFF_V2)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: a DIFF V2 model (model_type difftrans_v2) has no GGUF form: llama.cpp has no "
                            "architecture with its per-token λ",
                            path);
    const char *other = c->position == DT_POS_ALIBI  ? "ALiBi positions (difftrans.position = alibi)"
                        : c->position == DT_POS_NONE ? "no position encoding (difftrans.position = none)"
                        : c->softmax1                ? "softmax1 attention (difftrans.softmax1)"
                                                     : NULL;
    if (other)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: llama.cpp's llama architecture has no %s", path, other);
    const dt_quant_scheme qs = dt_model_quant_scheme(m, NULL);
    if (qs == DT_QUANT_W8A8)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: a w8a8 model has no GGUF type (ggml has no per-row int8 with int8 activations): export "
                            "the float model it was made from, or quantise it q8_0 / q4_0",
                            path);
    if (dtype != DT_F32 && dtype != DT_F16 && dtype != DT_BF16)
        return dt_fail(err, "%s: GGUF float tensors are F32, F16 or BF16 (dtype %d)", path, (int)dtype);
    if (qs != DT_QUANT_NONE && dtype != DT_F32)
        return dt_fail(err, "%s: a %s model is written with its own blocks and its float tensors F32; %s applies to "
                            "float models",
                       path, dt_quant_scheme_name(qs), dtype == DT_F16 ? "F16" : "BF16");
    for (int i = 0; m->quant && i < m->quant->n_linear; i++) {
        const qlinear *l = &m->quant->lin[i];
        if (l->in % QK != 0) {
            char name[96];
            model_linear_name(name, sizeof name, i / LIN_PER_LAYER, i % LIN_PER_LAYER, c->num_hidden_layers);
            return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                "%s: %s has %d inputs, not a multiple of 32: ggml's %s rows are whole 32-weight "
                                "blocks (llama.cpp refuses the tensor); export f32 / f16, or choose sizes that are "
                                "multiples of 32",
                                path, name, l->in, dt_quant_scheme_name(qs));
        }
    }
    return 0;
}

static void write_hparams(gguf_writer *w, const dt_model *m, const char *path, uint32_t file_type) {
    const dt_config *c = &m->cfg;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t name_len = strlen(base);
    if (name_len > 5 && !strcmp(base + name_len - 5, ".gguf")) name_len -= 5;
    gguf_w_str(w, "general.architecture", "llama", 5);
    gguf_w_str(w, "general.type", "model", 5);
    gguf_w_str(w, "general.name", base, name_len);
    gguf_w_u32(w, "general.file_type", file_type);
    gguf_w_u32(w, "general.quantization_version", 2);
    gguf_w_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size);
    gguf_w_u32(w, "llama.context_length", (uint32_t)c->max_position_embeddings);
    gguf_w_u32(w, "llama.embedding_length", (uint32_t)c->hidden_size);
    gguf_w_u32(w, "llama.block_count", (uint32_t)c->num_hidden_layers);
    gguf_w_u32(w, "llama.feed_forward_length", (uint32_t)c->intermediate_size);
    gguf_w_u32(w, "llama.attention.head_count", (uint32_t)c->num_attention_heads);
    gguf_w_u32(w, "llama.attention.head_count_kv", (uint32_t)c->num_key_value_heads);
    gguf_w_u32(w, "llama.attention.key_length", (uint32_t)c->head_dim);
    gguf_w_u32(w, "llama.attention.value_length", (uint32_t)c->head_dim);
    gguf_w_u32(w, "llama.rope.dimension_count", (uint32_t)c->head_dim);
    gguf_w_f32(w, "llama.rope.freq_base", c->rope_theta);
    gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", c->rms_norm_eps);
    if (c->rope_scaling.type == DT_ROPE_LINEAR) {
        gguf_w_str(w, "llama.rope.scaling.type", "linear", 6);
        gguf_w_f32(w, "llama.rope.scaling.factor", (float)c->rope_scaling.factor);
    }
    if (c->rope_scaling.type == DT_ROPE_LLAMA3) {
        /* llama.cpp takes the scaled frequencies from rope_freqs.weight; these say how they were made,
         * so that difftrans reads the same config back */
        const dt_rope_scaling *r = &c->rope_scaling;
        gguf_w_str(w, "difftrans.rope_scaling.type", "llama3", 6);
        gguf_w_f64(w, "difftrans.rope_scaling.factor", r->factor); /* doubles, as config.json holds them */
        gguf_w_f64(w, "difftrans.rope_scaling.low_freq_factor", r->low_freq_factor);
        gguf_w_f64(w, "difftrans.rope_scaling.high_freq_factor", r->high_freq_factor);
        gguf_w_u32(w, "difftrans.rope_scaling.original_max_position_embeddings",
                   (uint32_t)r->original_max_position_embeddings);
    }
}

int dt_model_save_gguf(const dt_model *m, const char *path, dt_dtype dtype, dt_error *err) {
    if (check_exportable(m, dtype, path, err) != 0) return -1;
    const dt_config *c = &m->cfg;
    const int L = c->num_hidden_layers, C = c->hidden_size, hd = c->head_dim;
    const dt_quant_scheme qs = dt_model_quant_scheme(m, NULL);
    const uint32_t qtype = qs == DT_QUANT_Q8_0 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q4_0;
    const uint32_t ftype = dtype == DT_F32 ? GGML_TYPE_F32 : dtype == DT_F16 ? GGML_TYPE_F16 : GGML_TYPE_BF16;
    const uint32_t file_type = qs == DT_QUANT_Q8_0   ? 7
                               : qs == DT_QUANT_Q4_0 ? 2
                               : dtype == DT_F32     ? 0
                               : dtype == DT_F16     ? 1
                                                     : 32;
    vocab_out v;
    if (vocab_export(&v, m, path, err) != 0) {
        vocab_out_free(&v);
        return -1;
    }
    export_ctx x = {.m = m, .t = calloc((size_t)(9 * L + 4), sizeof *x.t)};
    const int llama3 = c->rope_scaling.type == DT_ROPE_LLAMA3;
    if (llama3) x.rope_freqs = malloc((size_t)(hd / 2) * 2 * sizeof(float));
    if (!x.t || (llama3 && !x.rope_freqs)) {
        vocab_out_free(&v);
        free(x.t);
        free(x.rope_freqs);
        return dt_fail_oom(err, "%s: out of memory", path);
    }
    /* the 2-D float tensors take dtype; quantised layers their own blocks; embeddings and norms F32
     * in a quantised model */
    const uint32_t emb_type = qs == DT_QUANT_NONE ? ftype : GGML_TYPE_F32;
    char name[GGUF_MAX_NAME];
    add_tensor(&x, "token_embd.weight", c->vocab_size, C, emb_type, m->w.embed_tokens, NULL, 0);
    for (int l = 0; l < L; l++) {
        const dt_layer_weights *lw = &m->w.layers[l];
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        add_tensor(&x, name, 0, C, GGML_TYPE_F32, lw->input_layernorm, NULL, 0);
        for (int which = 0; which < LIN_PER_LAYER; which++) {
            if (which == LIN_GATE) {
                snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
                add_tensor(&x, name, 0, C, GGML_TYPE_F32, lw->post_attention_layernorm, NULL, 0);
            }
            int out, in;
            model_linear_shape(m, l, which, &out, &in);
            const qlinear *q = model_qlinear(m, l, which);
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, LINEAR_NAMES[which]);
            add_tensor(&x, name, out, in, q ? qtype : ftype, q ? NULL : float_linear(m, l, which), q,
                       which == LIN_Q || which == LIN_K ? hd : 0);
        }
    }
    add_tensor(&x, "output_norm.weight", 0, C, GGML_TYPE_F32, m->w.norm, NULL, 0);
    const qlinear *head = model_qlinear(m, L, 0);
    /* a tied head is token_embd in llama.cpp too, unless the head is quantised and the embedding not */
    if (!c->tie_word_embeddings || head)
        add_tensor(&x, "output.weight", c->vocab_size, C, head ? qtype : emb_type, head ? NULL : m->w.lm_head, head, 0);
    if (llama3) {
        /* llama.cpp divides each frequency by its factor: the unscaled ones over difftrans's */
        dt_config plain = *c;
        plain.rope_scaling.type = DT_ROPE_DEFAULT;
        float *base = x.rope_freqs + hd / 2;
        dt_rope_inv_freq(&plain, base);
        for (int i = 0; i < hd / 2; i++) x.rope_freqs[i] = base[i] / m->rope_inv_freq[i];
        add_tensor(&x, "rope_freqs.weight", 0, hd / 2, GGML_TYPE_F32, x.rope_freqs, NULL, 0);
    }
    gguf_writer w;
    gguf_writer_init(&w, GGUF_DEFAULT_ALIGNMENT);
    write_hparams(&w, m, path, file_type);
    write_vocab(&w, &v);
    int rc = 0;
    for (int i = 0; i < x.n && rc == 0; i++)
        if (gguf_w_tensor(&w, x.t[i].name, x.t[i].n_dims, x.t[i].ne, x.t[i].type) != 0)
            rc = dt_fail(err, "%s: tensor %s [%lld, %lld] is not a whole number of %s blocks", path, x.t[i].name,
                         (long long)x.t[i].ne[1], (long long)x.t[i].ne[0], ggml_type_name(x.t[i].type));
    if (rc == 0) rc = gguf_writer_write(&w, path, emit_tensor, &x, err);
    gguf_writer_free(&w);
    vocab_out_free(&v);
    free(x.t);
    free(x.rope_freqs);
    return rc;
}

/* ================================================================ import */

int gguf_model_path(const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return 0;
    const size_t n = strlen(path);
    if (n >= 5 && strcmp(path + n - 5, ".gguf") == 0) return 1;
    return gguf_has_magic(path);
}

/* ---------------------------------------------------------------- hyper-parameters */

/* A required or optional (dflt >= 0) size from llama.<key>: an integer, or an array of one value
 * per layer when every layer has the same. */
/* llama.KEY as one integer: a per-layer array must hold one value for each of `layers` layers
 * (when known, > 0) and the same value in all. */
static int hparam(const gguf_file *f, const char *key, int64_t dflt, int layers, int *out, dt_error *err) {
    char full[128];
    snprintf(full, sizeof full, "llama.%s", key);
    const gguf_kv *kv = gguf_find_kv(f, full);
    int64_t v = dflt;
    if (kv && gguf_is_int_array(kv)) {
        if (kv->n == 0) return dt_fail_format(err, "%s: %s is an empty array", f->path, full);
        if (layers > 0 && kv->n != (uint64_t)layers)
            return dt_fail_format(err, "%s: %s holds %llu values for %d layers (block_count)", f->path, full,
                                  (unsigned long long)kv->n, layers);
        v = gguf_array_int(kv, 0);
        for (uint64_t i = 1; i < kv->n; i++)
            if (gguf_array_int(kv, i) != v)
                return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                    "%s: %s differs between layers (%lld and %lld): difftrans layers are all alike",
                                    f->path, full, (long long)v, (long long)gguf_array_int(kv, i));
        if (v < 0 || v > INT32_MAX)
            return dt_fail_format(err, "%s: %s = %lld is outside [0, %d]", f->path, full, (long long)v, INT32_MAX);
    } else {
        const int rc = gguf_get_int(f, full, 0, INT32_MAX, &v, err);
        if (rc < 0) return -1;
        if (rc == 1 && dflt < 0) return dt_fail_format(err, "%s: no %s", f->path, full);
        if (rc == 1) v = dflt;
    }
    *out = (int)v;
    return 0;
}

static int read_hparams(const gguf_file *f, dt_config *c, dt_error *err) {
    memset(c, 0, sizeof *c);
    c->arch = DT_ARCH_LLAMA;
    c->special = dt_special_ids_none();
    c->lambda_std_dev = 0.1f;
    gguf_str arch;
    int rc = gguf_get_str(f, "general.architecture", &arch, err);
    if (rc < 0) return -1;
    if (rc == 1) return dt_fail_format(err, "%s: no general.architecture", f->path);
    if (arch.len != 5 || memcmp(arch.p, "llama", 5) != 0)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: general.architecture is '%.*s': difftrans reads llama models (a DIFF Transformer has "
                            "no GGUF architecture: llama.cpp has none)",
                            f->path, (int)(arch.len > 40 ? 40 : arch.len), arch.p);
    int experts = 0, heads_kv = 0, key_len = 0, value_len = 0, rope_dim = 0;
    /* block_count first: the per-layer arrays after it are checked against it */
    if (hparam(f, "block_count", -1, 0, &c->num_hidden_layers, err) ||
        hparam(f, "embedding_length", -1, c->num_hidden_layers, &c->hidden_size, err) ||
        hparam(f, "feed_forward_length", -1, c->num_hidden_layers, &c->intermediate_size, err) ||
        hparam(f, "context_length", -1, c->num_hidden_layers, &c->max_position_embeddings, err) ||
        hparam(f, "attention.head_count", -1, c->num_hidden_layers, &c->num_attention_heads, err) ||
        hparam(f, "expert_count", 0, c->num_hidden_layers, &experts, err))
        return -1;
    if (experts > 0)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: llama.expert_count = %d: a mixture of experts (Mixtral) is "
                                                     "not a difftrans model",
                            f->path, experts);
    if (c->num_attention_heads <= 0 || c->hidden_size % c->num_attention_heads != 0) {
        if (gguf_find_kv(f, "llama.attention.key_length") == NULL)
            return dt_fail_format(err, "%s: llama.embedding_length %d is not a multiple of llama.attention.head_count %d "
                                       "and no llama.attention.key_length says the head width",
                                  f->path, c->hidden_size, c->num_attention_heads);
    }
    const int dflt_hd = c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
    if (hparam(f, "attention.head_count_kv", c->num_attention_heads, c->num_hidden_layers, &heads_kv, err) ||
        hparam(f, "attention.key_length", dflt_hd, c->num_hidden_layers, &key_len, err) ||
        hparam(f, "attention.value_length", key_len, c->num_hidden_layers, &value_len, err) ||
        hparam(f, "rope.dimension_count", key_len, c->num_hidden_layers, &rope_dim, err))
        return -1;
    c->num_key_value_heads = heads_kv;
    c->head_dim = key_len;
    if (value_len != key_len)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: keys of width %d and values of width %d: difftrans heads have "
                                                     "one width",
                            f->path, key_len, value_len);
    if (rope_dim != key_len)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: llama.rope.dimension_count %d of heads of width %d: partial rotary embeddings are not "
                            "a difftrans model",
                            f->path, rope_dim, key_len);
    double v = 10000.0;
    if ((rc = gguf_get_float(f, "llama.rope.freq_base", &v, err)) < 0) return -1;
    c->rope_theta = (float)v;
    if ((rc = gguf_get_float(f, "llama.attention.layer_norm_rms_epsilon", &v, err)) < 0) return -1;
    if (rc == 1) return dt_fail_format(err, "%s: no llama.attention.layer_norm_rms_epsilon", f->path);
    c->rms_norm_eps = (float)v;
    if ((rc = gguf_get_float(f, "llama.attention.scale", &v, err)) < 0) return -1;
    if (rc == 0 && key_len > 0 && fabs(v * sqrt((double)key_len) - 1.0) > 1e-6)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: llama.attention.scale %g: difftrans scales scores by "
                                                     "1/sqrt(head_dim) = %g",
                            f->path, v, 1.0 / sqrt((double)key_len));
    int causal = 1;
    if (gguf_get_bool(f, "llama.attention.causal", &causal, err) < 0) return -1;
    if (!causal) return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: llama.attention.causal is false", f->path);
    /* RoPE scaling: linear (a factor), or llama3 as difftrans writes it (its rope_freqs are checked later) */
    gguf_str st = {"none", 4};
    if ((rc = gguf_get_str(f, "llama.rope.scaling.type", &st, err)) < 0) return -1;
    double factor = 1.0;
    if ((rc = gguf_get_float(f, "llama.rope.scaling.factor", &factor, err)) < 0) return -1;
    if (rc == 1 && (rc = gguf_get_float(f, "llama.rope.scale_linear", &factor, err)) < 0) return -1;
    if (rc == 0 && st.len == 4 && !memcmp(st.p, "none", 4)) st = (gguf_str){"linear", 6}; /* the older key alone */
    if (st.len == 6 && !memcmp(st.p, "linear", 6)) {
        if (!(factor > 0))
            return dt_fail_format(err, "%s: llama.rope.scaling.factor %g must be positive", f->path, factor);
        if (factor != 1.0) {
            c->rope_scaling.type = DT_ROPE_LINEAR;
            c->rope_scaling.factor = factor;
        }
    } else if (!(st.len == 4 && !memcmp(st.p, "none", 4)))
        return dt_fail_code(err, DT_ERR_UNSUPPORTED, "%s: llama.rope.scaling.type '%.*s' is not read (none and linear "
                                                     "are)",
                            f->path, (int)(st.len > 20 ? 20 : st.len), st.p);
    gguf_str d3;
    if ((rc = gguf_get_str(f, "difftrans.rope_scaling.type", &d3, err)) < 0) return -1;
    if (rc == 0) {
        if (d3.len != 6 || memcmp(d3.p, "llama3", 6) != 0)
            return dt_fail_format(err, "%s: difftrans.rope_scaling.type must be 'llama3'", f->path);
        dt_rope_scaling *r = &c->rope_scaling;
        int64_t orig = 0;
        r->type = DT_ROPE_LLAMA3;
        const int r1 = gguf_get_float(f, "difftrans.rope_scaling.factor", &r->factor, err);
        const int r2 = r1 < 0 ? -1 : gguf_get_float(f, "difftrans.rope_scaling.low_freq_factor", &r->low_freq_factor, err);
        const int r3 = r2 < 0 ? -1 : gguf_get_float(f, "difftrans.rope_scaling.high_freq_factor", &r->high_freq_factor, err);
        const int r4 = r3 < 0 ? -1
                              : gguf_get_int(f, "difftrans.rope_scaling.original_max_position_embeddings", 1, INT32_MAX,
                                             &orig, err);
        if (r4 < 0) return -1;
        if (r1 || r2 || r3 || r4)
            return dt_fail_format(err, "%s: difftrans.rope_scaling lacks one of factor, low_freq_factor, "
                                       "high_freq_factor, original_max_position_embeddings",
                                  f->path);
        r->original_max_position_embeddings = (int)orig;
    }
    return 0;
}

/* ---------------------------------------------------------------- tensors */

/* Row r of a tensor into floats (F32, F16, BF16, Q8_0, Q4_0). */
static void decode_row(const gguf_tensor *t, int64_t r, float *out) {
    const int64_t cols = t->ne[0];
    const size_t row_bytes = t->nbytes / (size_t)(t->nelem / (uint64_t)cols);
    const uint8_t *p = t->data + (size_t)r * row_bytes;
    switch (t->type) {
    case GGML_TYPE_F32:
        for (int64_t j = 0; j < cols; j++) {
            const uint32_t u = (uint32_t)p[4 * j] | (uint32_t)p[4 * j + 1] << 8 | (uint32_t)p[4 * j + 2] << 16 |
                               (uint32_t)p[4 * j + 3] << 24;
            out[j] = base_bits_float(u);
        }
        break;
    case GGML_TYPE_F16:
        for (int64_t j = 0; j < cols; j++) out[j] = half_to_float((uint16_t)(p[2 * j] | p[2 * j + 1] << 8));
        break;
    case GGML_TYPE_BF16:
        for (int64_t j = 0; j < cols; j++) out[j] = bf16_to_float((uint16_t)(p[2 * j] | p[2 * j + 1] << 8));
        break;
    case GGML_TYPE_Q8_0:
        for (int64_t b = 0; b < cols / QK; b++, p += sizeof(block_q8_0)) {
            const float d = half_to_float((uint16_t)(p[0] | p[1] << 8));
            for (int j = 0; j < QK; j++) out[b * QK + j] = d * (float)(int8_t)p[2 + j];
        }
        break;
    default: /* Q4_0 */
        for (int64_t b = 0; b < cols / QK; b++, p += sizeof(block_q4_0)) {
            const float d = half_to_float((uint16_t)(p[0] | p[1] << 8));
            for (int j = 0; j < QK / 2; j++) {
                out[b * QK + j] = d * (float)((p[2 + j] & 0x0F) - 8);
                out[b * QK + j + QK / 2] = d * (float)((p[2 + j] >> 4) - 8);
            }
        }
        break;
    }
}

static int readable_type(uint32_t t) {
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0;
}

static int is_quant_type(uint32_t t) { return t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0; }

/* What the file must hold for the config: each tensor's place in the model. */
typedef struct {
    const gguf_tensor *t;
    float *dst;                  /* the model's float slot */
    int rows, cols;              /* 1-D: rows = 1 */
    int layer, which;            /* a linear layer (which = LIN_*, layer L for the head), else -1 */
    int permute_hd;
} in_tensor;

static int expect(const gguf_file *f, in_tensor *it, const char *name, int rows, int cols, int two_d, dt_error *err) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return dt_fail_format(err, "%s: missing tensor '%s'", f->path, name);
    const int ok = two_d ? t->n_dims == 2 && t->ne[0] == cols && t->ne[1] == rows : t->n_dims == 1 && t->ne[0] == cols;
    if (!ok) {
        if (two_d)
            return dt_fail_format(err, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld] (ggml order) where the "
                                       "metadata implies [%d, %d]",
                                  f->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                                  (long long)t->ne[3], cols, rows);
        return dt_fail_format(err, "%s: tensor '%s' has %u dimensions [%lld, %lld, ...] where the metadata implies [%d]",
                              f->path, name, t->n_dims, (long long)t->ne[0], (long long)t->ne[1], cols);
    }
    if (!readable_type(t->type))
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: tensor '%s' is %s: difftrans reads F32, F16, BF16, Q8_0 and Q4_0 tensors (requantise "
                            "with llama.cpp's llama-quantize --pure, or convert from the float model)",
                            f->path, name, ggml_type_name(t->type));
    it->t = t;
    it->rows = two_d ? rows : 1;
    it->cols = cols;
    it->layer = it->which = -1;
    it->permute_hd = 0;
    return 0;
}

typedef struct {
    in_tensor *v;
    int n;
    const gguf_tensor *rope_freqs;
    uint32_t scheme_type;        /* the linear layers' type when quantised, else 0 */
    int head_quant;              /* the LM head's blocks: 1 from output.weight, 2 from token_embd (tied) */
} in_plan;

/* Every tensor of the file has its place, and the layers' types form one difftrans scheme. */
/* The vocabulary size (token_embd's rows) and whether the head is tied (no output.weight), which
 * the metadata does not say; then the config is checked whole, before any size from it is used. */
static int embedding_config(const gguf_file *f, dt_config *c, dt_error *err) {
    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb) return dt_fail_format(err, "%s: missing tensor 'token_embd.weight'", f->path);
    if (emb->n_dims != 2 || emb->ne[0] != c->hidden_size || emb->ne[1] <= 0 || emb->ne[1] > DT_MAX_VOCAB)
        return dt_fail_format(err, "%s: token_embd.weight has shape [%lld, %lld] (ggml order) where [%d, vocab] with 0 < "
                                   "vocab <= %d was expected",
                              f->path, (long long)emb->ne[0], (long long)emb->ne[1], c->hidden_size, DT_MAX_VOCAB);
    c->vocab_size = (int)emb->ne[1];
    c->tie_word_embeddings = gguf_find_tensor(f, "output.weight") == NULL;
    int64_t v = c->vocab_size;
    if (gguf_get_int(f, "llama.vocab_size", 0, INT64_MAX, &v, err) < 0) return -1;
    if (v != c->vocab_size)
        return dt_fail_format(err, "%s: llama.vocab_size %lld but token_embd.weight has %d rows", f->path, (long long)v,
                              c->vocab_size);
    if (dt_config_validate(c, f->path, err) != 0) return fail_as_format(err);
    return 0;
}

/* rope_freqs of a file llama.cpp's converter wrote from a Llama 3.1 / 3.2 config, which it does
 * not describe otherwise: the factor is the largest one, low / high frequency factors 1 and 4, the
 * original context 8192 (or the file's own); accepted when difftrans's llama3 scaling with those
 * gives every factor (to 1e-5), and then c says so. */
static int recognise_llama3(dt_config *c, const gguf_tensor *rf) {
    const int half = c->head_dim / 2;
    if (c->rope_scaling.type != DT_ROPE_DEFAULT || rf->type != GGML_TYPE_F32 || rf->n_dims != 1 || rf->ne[0] != half)
        return -1;
    float *v = malloc((size_t)half * 3 * sizeof(float));
    if (!v) return -1;
    float *base = v + half, *scaled = v + 2 * half, top = 0;
    decode_row(rf, 0, v);
    for (int i = 0; i < half; i++) top = fmaxf(top, v[i]);
    dt_rope_inv_freq(c, base);
    const int originals[] = {8192, c->max_position_embeddings};
    int found = -1;
    for (int k = 0; k < 2 && found < 0 && top > 1.0f; k++) {
        dt_config t = *c;
        t.rope_scaling = (dt_rope_scaling){DT_ROPE_LLAMA3, top, 1.0, 4.0, originals[k]};
        dt_rope_inv_freq(&t, scaled);
        int ok = 1;
        for (int i = 0; i < half && ok; i++) ok = fabsf(v[i] - base[i] / scaled[i]) <= 1e-5f * fabsf(v[i]);
        if (ok) {
            c->rope_scaling = t.rope_scaling;
            found = 0;
        }
    }
    free(v);
    return found;
}

/* Name i of the tensors a llama model of L layers has, in the order plan_tensors takes them. */
static void tensor_name(char *buf, size_t n, int64_t i, int L) {
    static const char *const per_layer[] = {"attn_norm", "ffn_norm", "attn_q", "attn_k", "attn_v",
                                            "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    if (i == 0) snprintf(buf, n, "token_embd.weight");
    else if (i <= 9 * (int64_t)L) snprintf(buf, n, "blk.%lld.%s.weight", (long long)((i - 1) / 9), per_layer[(i - 1) % 9]);
    else if (i == 9 * (int64_t)L + 1) snprintf(buf, n, "output_norm.weight");
    else snprintf(buf, n, "output.weight");
}

static int plan_tensors(const gguf_file *f, dt_config *c, in_plan *p, dt_error *err) {
    const int L = c->num_hidden_layers, C = c->hidden_size, hd = c->head_dim;
    const int qdim = c->num_attention_heads * hd, kvdim = c->num_key_value_heads * hd, F = c->intermediate_size;
    const int tied = c->tie_word_embeddings;
    p->rope_freqs = gguf_find_tensor(f, "rope_freqs.weight");
    if (p->rope_freqs && c->rope_scaling.type != DT_ROPE_LLAMA3 && recognise_llama3(c, p->rope_freqs) != 0)
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: rope_freqs.weight holds per-frequency RoPE factors that are not Llama 3's scaling "
                            "as difftrans knows it (no difftrans.rope_scaling.* keys, and not the factor / 1 / 4 / 8192 "
                            "of Llama 3.1 and 3.2): difftrans's RoPE cannot take arbitrary factors",
                            f->path);
    if (!p->rope_freqs && c->rope_scaling.type == DT_ROPE_LLAMA3)
        return dt_fail_format(err, "%s: difftrans.rope_scaling says llama3 but there is no rope_freqs.weight", f->path);
    const int64_t expected = 9 * (int64_t)L + 2 + !tied + (p->rope_freqs != NULL);
    /* a tensor with no place is named; one missing is, below (the names are distinct) */
    {
        for (int64_t i = 0; i < f->n_tensors; i++) {
            const char *n = f->tensors[i].name;
            int layer = -1, end = 0;
            char part[GGUF_MAX_NAME] = "";
            if (!strcmp(n, "token_embd.weight") || !strcmp(n, "output_norm.weight") || !strcmp(n, "output.weight") ||
                !strcmp(n, "rope_freqs.weight"))
                continue;
            if (sscanf(n, "blk.%d.%63[a-z_].weight%n", &layer, part, &end) == 2 && n[end] == '\0' && layer >= 0 &&
                layer < L) {
                int known = !strcmp(part, "attn_norm") || !strcmp(part, "ffn_norm");
                for (int k = 0; k < LIN_PER_LAYER; k++) known |= !strcmp(part, LINEAR_NAMES[k]);
                if (known) continue;
            }
            return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                "%s: tensor '%s' has no place in a llama model of %d layers (biases, extra norms and "
                                "other architectures' tensors are not read)",
                                f->path, n, L);
        }
    }
    if (expected > f->n_tensors) { /* the first missing one is among the first n_tensors + 1 names */
        char name[GGUF_MAX_NAME];
        for (int64_t i = 0;; i++) {
            tensor_name(name, sizeof name, i, L);
            if (!gguf_find_tensor(f, name)) return dt_fail_format(err, "%s: missing tensor '%s'", f->path, name);
        }
    }
    p->v = calloc((size_t)expected, sizeof *p->v);
    if (!p->v) return dt_fail_oom(err, "%s: out of memory", f->path);
    char name[GGUF_MAX_NAME];
    int rc = expect(f, &p->v[p->n++], "token_embd.weight", c->vocab_size, C, 1, err);
    for (int l = 0; l < L && rc == 0; l++) {
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        rc = expect(f, &p->v[p->n++], name, 1, C, 0, err);
        if (rc == 0) snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        if (rc == 0) rc = expect(f, &p->v[p->n++], name, 1, C, 0, err);
        const int outs[LIN_PER_LAYER] = {qdim, kvdim, kvdim, C, F, F, C}, ins[LIN_PER_LAYER] = {C, C, C, qdim, C, C, F};
        for (int k = 0; k < LIN_PER_LAYER && rc == 0; k++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, LINEAR_NAMES[k]);
            in_tensor *it = &p->v[p->n++];
            rc = expect(f, it, name, outs[k], ins[k], 1, err);
            it->layer = l;
            it->which = k;
            it->permute_hd = k == LIN_Q || k == LIN_K ? hd : 0;
        }
    }
    if (rc == 0) rc = expect(f, &p->v[p->n++], "output_norm.weight", 1, C, 0, err);
    if (rc == 0 && !tied) {
        in_tensor *it = &p->v[p->n++];
        rc = expect(f, it, "output.weight", c->vocab_size, C, 1, err);
        it->layer = L;
        it->which = 0;
    }
    if (rc == 0 && p->rope_freqs && (p->rope_freqs->n_dims != 1 || p->rope_freqs->ne[0] != hd / 2 ||
                                     p->rope_freqs->type != GGML_TYPE_F32))
        rc = dt_fail_format(err, "%s: rope_freqs.weight must be F32 [%d] (head_dim / 2)", f->path, hd / 2);
    if (rc != 0) return -1;
    /* one scheme: every linear layer float, or every one Q8_0, or every one Q4_0 */
    const in_tensor *first = NULL;
    for (int i = 0; i < p->n; i++) {
        const in_tensor *it = &p->v[i];
        if (it->layer < 0 || it->layer == L) continue;
        if (!first) first = it;
        else if (is_quant_type(it->t->type) != is_quant_type(first->t->type) ||
                 (is_quant_type(it->t->type) && it->t->type != first->t->type))
            return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                                "%s: tensors '%s' (%s) and '%s' (%s): difftrans quantises every linear layer of a model "
                                "the same way (all float, all Q8_0 or all Q4_0)",
                                f->path, first->t->name, ggml_type_name(first->t->type), it->t->name,
                                ggml_type_name(it->t->type));
    }
    p->scheme_type = first && is_quant_type(first->t->type) ? first->t->type : 0;
    /* the head: quantised when its blocks are the layers' type, else float (its values dequantised) */
    const gguf_tensor *head = p->v[tied ? 0 : p->n - 1].t; /* token_embd, or output.weight */
    if (p->scheme_type && head->type == p->scheme_type) p->head_quant = tied ? 2 : 1;
    return 0;
}

/* The float tensors into the model (q / k rows back into HF order), every value finite. */
static int read_floats(const gguf_file *f, dt_model *m, const in_plan *p, dt_error *err) {
    const int L = m->cfg.num_hidden_layers;
    for (int i = 0; i < p->n; i++) {
        const in_tensor *it = &p->v[i];
        float *dst;
        if (it->layer >= 0 && it->layer < L && p->scheme_type) continue; /* a quantised layer */
        if (it->layer == L && p->head_quant == 1) continue;
        if (it->layer >= 0 && it->layer < L) dst = (float *)float_linear(m, it->layer, it->which);
        else if (it->layer == L) dst = m->w.lm_head;
        else if (!strcmp(it->t->name, "token_embd.weight")) dst = m->w.embed_tokens;
        else if (!strcmp(it->t->name, "output_norm.weight")) dst = m->w.norm;
        else {
            int layer = 0;
            sscanf(it->t->name, "blk.%d.", &layer);
            dst = strstr(it->t->name, "attn_norm") ? m->w.layers[layer].input_layernorm
                                                   : m->w.layers[layer].post_attention_layernorm;
        }
        for (int r = 0; r < it->rows; r++) {
            const int to = it->permute_hd ? hf_row(r, it->permute_hd) : r;
            float *row = dst + (size_t)to * it->cols;
            decode_row(it->t, r, row);
            for (int j = 0; j < it->cols; j++)
                if (!isfinite(row[j]))
                    return dt_fail_format(err, "%s: tensor '%s' holds a non-finite value (%g) at row %d, column %d",
                                          f->path, it->t->name, (double)row[j], r, j);
        }
    }
    return 0;
}

/* A quantised layer from the file's blocks, rows reordered into HF's for q / k. */
static int quant_layer(const gguf_file *f, qlinear *l, const gguf_tensor *t, int out, int in, int permute_hd,
                       dt_error *err) {
    const qformat fmt = t->type == GGML_TYPE_Q8_0 ? QFMT_Q8_0 : QFMT_Q4_0;
    const size_t row_bytes = (size_t)q_blocks(in) * qblock_bytes(fmt);
    char what[4200];
    snprintf(what, sizeof what, "%s: tensor '%s'", f->path, t->name);
    if (!permute_hd) {
        if (qlinear_from_blocks(l, fmt, out, in, t->data, what, err) != 0) return -1;
        return qlinear_pack(l, err);
    }
    uint8_t *rows = malloc((size_t)out * row_bytes);
    if (!rows) return dt_fail_oom(err, "%s: out of memory", what);
    for (int r = 0; r < out; r++) memcpy(rows + (size_t)hf_row(r, permute_hd) * row_bytes, t->data + (size_t)r * row_bytes, row_bytes);
    int rc = qlinear_from_blocks(l, fmt, out, in, rows, what, err);
    free(rows);
    if (rc == 0) rc = qlinear_pack(l, err);
    return rc;
}

static int read_quant(const gguf_file *f, dt_model *m, const in_plan *p, dt_error *err) {
    if (!p->scheme_type) return 0;
    const int L = m->cfg.num_hidden_layers;
    struct dt_quant *q = calloc(1, sizeof *q);
    const int n_linear = L * LIN_PER_LAYER + (p->head_quant ? 1 : 0);
    if (!q || !(q->lin = calloc((size_t)n_linear, sizeof *q->lin))) {
        free(q);
        return dt_fail_oom(err, "%s: out of memory", f->path);
    }
    dt_quant_defaults(&q->opt);
    q->opt.scheme = p->scheme_type == GGML_TYPE_Q8_0 ? DT_QUANT_Q8_0 : DT_QUANT_Q4_0;
    q->opt.lm_head = p->head_quant != 0;
    q->floats_kept = 0; /* the float slots of the quantised layers stay empty */
    m->quant = q;
    for (int i = 0; i < p->n; i++) {
        const in_tensor *it = &p->v[i];
        if (it->layer < 0 || (it->layer == L && p->head_quant != 1)) continue;
        int out, in;
        model_linear_shape(m, it->layer, it->which, &out, &in);
        const int idx = it->layer * LIN_PER_LAYER + (it->layer == L ? 0 : it->which);
        if (quant_layer(f, &q->lin[idx], it->t, out, in, it->permute_hd, err) != 0) return -1;
        q->n_linear = q->n_linear > idx + 1 ? q->n_linear : idx + 1;
    }
    if (p->head_quant == 2) { /* tied: the head multiplies by token_embd's own blocks */
        const int idx = L * LIN_PER_LAYER;
        if (quant_layer(f, &q->lin[idx], p->v[0].t, m->cfg.vocab_size, m->cfg.hidden_size, 0, err) != 0) return -1;
    }
    q->n_linear = n_linear;
    return 0;
}

/* difftrans's llama3 RoPE must give the frequencies llama.cpp will use from rope_freqs. */
static int check_rope_freqs(const gguf_file *f, const dt_model *m, const in_plan *p, dt_error *err) {
    if (!p->rope_freqs) return 0;
    const int half = m->cfg.head_dim / 2;
    float *ff = malloc((size_t)half * 2 * sizeof(float));
    if (!ff) return dt_fail_oom(err, "%s: out of memory", f->path);
    dt_config plain = m->cfg;
    plain.rope_scaling.type = DT_ROPE_DEFAULT;
    dt_rope_inv_freq(&plain, ff + half);
    decode_row(p->rope_freqs, 0, ff);
    int rc = 0;
    for (int i = 0; i < half && rc == 0; i++) {
        const float want = ff[half + i] / m->rope_inv_freq[i];
        if (!(fabsf(ff[i] - want) <= 1e-5f * fabsf(want)))
            rc = dt_fail_format(err, "%s: rope_freqs.weight[%d] = %g but difftrans.rope_scaling implies %g", f->path, i,
                                (double)ff[i], (double)want);
    }
    free(ff);
    return rc;
}

/* ---------------------------------------------------------------- the tokenizer */

/* A JSON string (the bytes are valid UTF-8, checked by the caller). */
static void json_str(tk_buf *b, int *oom, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    *oom |= tk_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            const char e[2] = {'\\', (char)ch};
            *oom |= tk_buf_put(b, e, 2);
        } else if (ch < 0x20) {
            const char e[6] = {'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]};
            *oom |= tk_buf_put(b, e, 6);
        } else
            *oom |= tk_buf_put(b, s + i, 1);
    }
    *oom |= tk_buf_put(b, "\"", 1);
}

static void json_lit(tk_buf *b, int *oom, const char *s) { *oom |= tk_buf_put(b, s, strlen(s)); }

/* Tokens of the BPE model's vocabulary (the others are added tokens, or ids without a token). */
static int in_model_vocab(int32_t type) { return type != TT_CONTROL && type != TT_USER_DEFINED && type != TT_UNUSED; }

typedef struct {
    gguf_str *tok;
    int64_t n;
    int32_t *type;
    gguf_str *merges;            /* "gpt2": tokenizer.ggml.merges */
    int64_t n_merges;            /* "gpt2": merges; "llama": pairs */
    const char *pre;             /* "gpt-2" or "llama-bpe" ("gpt2") */
    int spm;                     /* "llama": SentencePiece */
    float *score;                /* "llama": [n] */
    int32_t *pairs;              /* "llama": the merges that reproduce it, [n_merges][2] ids (gguf_spm.c) */
    uint32_t *ranks;             /* "llama": [n_merges] their ranks, equal for equal scores */
    int add_space_prefix;        /* "llama" */
    int bos, eos, pad, eot, eom, unk, add_bos, add_eos;
    gguf_str chat;
    int has_chat;
    unsigned char *control;      /* [n] made a control token by its text (read_vocab), whatever its type */
} vocab_in;

/* Whether id is a token of the tokenizer.json made from the vocabulary: the ids llama.cpp does not
 * leave unused (a SentencePiece vocabulary whose unused tokens llama.cpp can give is refused). */
static int in_tokenizer(const vocab_in *v, int64_t id) { return v->type[id] != TT_UNUSED; }

/* An added token of the tokenizer.json: llama.cpp's control and user-defined tokens, and for
 * SentencePiece its unknown token, all of which it finds in the raw text before tokenizing
 * (control and unknown ones with parse_special, as difftrans always does); and the tokens it
 * makes control tokens by their text. A special one (all but the user-defined) is left out of
 * the text decoded without the special tokens, as llama.cpp prints no control token. */
static int is_added(const vocab_in *v, int64_t id) {
    const int32_t type = v->type[id];
    return type == TT_CONTROL || type == TT_USER_DEFINED || (v->spm && type == TT_UNKNOWN) || v->control[id];
}

static int is_special(const vocab_in *v, int64_t id) { return v->type[id] != TT_USER_DEFINED || v->control[id]; }

static void template_item(tk_buf *b, int *oom, const vocab_in *v, int id, int type_id) {
    json_lit(b, oom, "{\"SpecialToken\":{\"id\":");
    json_str(b, oom, v->tok[id].p, v->tok[id].len);
    json_lit(b, oom, type_id ? ",\"type_id\":1}}" : ",\"type_id\":0}}");
}

static void special_entry(tk_buf *b, int *oom, const vocab_in *v, int id) {
    char num[32];
    json_str(b, oom, v->tok[id].p, v->tok[id].len);
    json_lit(b, oom, ":{\"id\":");
    json_str(b, oom, v->tok[id].p, v->tok[id].len);
    snprintf(num, sizeof num, ",\"ids\":[%d],\"tokens\":[", id);
    json_lit(b, oom, num);
    json_str(b, oom, v->tok[id].p, v->tok[id].len);
    json_lit(b, oom, "]}");
}

/* The parts of a SentencePiece tokenizer.json that differ from a byte-level BPE's (as Hugging Face
 * writes Llama 2's): "▁" for the spaces (and before the text when llama.cpp adds it), the <0xNN>
 * tokens of characters outside the vocabulary, and back. */
#define SPM_MARK "\"\xe2\x96\x81\"" /* "▁" as a JSON string */
#define SPM_REPLACE "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":" SPM_MARK "}"
static const char SPM_NORMALIZER[] =
    "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":" SPM_MARK "}," SPM_REPLACE "]}";
static const char SPM_NORMALIZER_NO_PREFIX[] = SPM_REPLACE;
static const char SPM_DECODER[] = "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
                                  SPM_MARK "},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}";
static const char SPM_DECODER_STRIP[] = ",{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}";

/* tokenizer.json for the vocabulary (the format the Rust library writes). */
static int tokenizer_json(const vocab_in *v, tk_buf *b) {
    int oom = 0;
    char num[48];
    json_lit(b, &oom, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[");
    int first = 1;
    for (int64_t i = 0; i < v->n; i++) {
        if (!is_added(v, i)) continue;
        snprintf(num, sizeof num, "%s{\"id\":%lld,\"content\":", first ? "" : ",", (long long)i);
        json_lit(b, &oom, num);
        json_str(b, &oom, v->tok[i].p, v->tok[i].len);
        json_lit(b, &oom, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":");
        json_lit(b, &oom, is_special(v, i) ? "true}" : "false}");
        first = 0;
    }
    json_lit(b, &oom, "],\"normalizer\":");
    json_lit(b, &oom, !v->spm ? "null" : v->add_space_prefix ? SPM_NORMALIZER : SPM_NORMALIZER_NO_PREFIX);
    json_lit(b, &oom, ",\"pre_tokenizer\":");
    if (v->spm) json_lit(b, &oom, "null");
    else if (!strcmp(v->pre, "gpt-2"))
        json_lit(b, &oom, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                          "\"use_regex\":true}");
    else {
        json_lit(b, &oom, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":");
        json_str(b, &oom, LLAMA3_REGEX, strlen(LLAMA3_REGEX));
        json_lit(b, &oom, "},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":"
                          "false,\"trim_offsets\":true,\"use_regex\":false}]}");
    }
    json_lit(b, &oom, ",\"post_processor\":");
    if (v->add_bos || v->add_eos) {
        json_lit(b, &oom, "{\"type\":\"TemplateProcessing\",\"single\":[");
        /* single, then pair: A then B between the same specials, B's of type 1 (as HF's Llama 3
         * tokenizer and `tokenizer train` write it) */
        for (int k = 0; k < 2; k++) {
            if (k) json_lit(b, &oom, "],\"pair\":[");
            for (int s = 0; s < 1 + k; s++) {
                if (s) json_lit(b, &oom, ",");
                if (v->add_bos) template_item(b, &oom, v, v->bos, s), json_lit(b, &oom, ",");
                json_lit(b, &oom, s ? "{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}" : "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}");
                if (v->add_eos) json_lit(b, &oom, ","), template_item(b, &oom, v, v->eos, s);
            }
        }
        json_lit(b, &oom, "],\"special_tokens\":{");
        if (v->add_bos) special_entry(b, &oom, v, v->bos);
        if (v->add_eos && !(v->add_bos && v->bos == v->eos)) {
            if (v->add_bos) json_lit(b, &oom, ",");
            special_entry(b, &oom, v, v->eos);
        }
        json_lit(b, &oom, "}}");
    } else
        json_lit(b, &oom, "null");
    json_lit(b, &oom, ",\"decoder\":");
    if (v->spm) {
        json_lit(b, &oom, SPM_DECODER);
        if (v->add_space_prefix) json_lit(b, &oom, SPM_DECODER_STRIP);
        json_lit(b, &oom, "]}");
    } else
        json_lit(b, &oom, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                          "\"use_regex\":true}");
    json_lit(b, &oom, ",\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":");
    if (v->spm && v->unk >= 0 && in_tokenizer(v, v->unk)) json_str(b, &oom, v->tok[v->unk].p, v->tok[v->unk].len);
    else json_lit(b, &oom, "null");
    json_lit(b, &oom, ",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":");
    json_lit(b, &oom, v->spm ? "true,\"byte_fallback\":true" : "false,\"byte_fallback\":false");
    json_lit(b, &oom, ",\"ignore_merges\":");
    json_lit(b, &oom, !v->spm && !strcmp(v->pre, "llama-bpe") ? "true" : "false");
    json_lit(b, &oom, ",\"vocab\":{");
    /* a SentencePiece token of any type can be made by joining pieces: all the used ones are the
     * model's */
    first = 1;
    for (int64_t i = 0; i < v->n; i++) {
        if (v->spm ? v->type[i] == TT_UNUSED : !in_model_vocab(v->type[i])) continue;
        if (!first) json_lit(b, &oom, ",");
        json_str(b, &oom, v->tok[i].p, v->tok[i].len);
        snprintf(num, sizeof num, ":%lld", (long long)i);
        json_lit(b, &oom, num);
        first = 0;
    }
    json_lit(b, &oom, "},\"merges\":[");
    for (int64_t i = 0; i < v->n_merges; i++) {
        const gguf_str *l, *r;
        gguf_str ls, rs;
        if (v->spm) {
            l = &v->tok[v->pairs[2 * i]];
            r = &v->tok[v->pairs[2 * i + 1]];
        } else {
            const char *s = v->merges[i].p, *sp = memchr(s + 1, ' ', v->merges[i].len - 1);
            ls = (gguf_str){s, (size_t)(sp - s)};
            rs = (gguf_str){sp + 1, v->merges[i].len - ls.len - 1};
            l = &ls;
            r = &rs;
        }
        json_lit(b, &oom, i ? ",[" : "[");
        json_str(b, &oom, l->p, l->len);
        json_lit(b, &oom, ",");
        json_str(b, &oom, r->p, r->len);
        json_lit(b, &oom, "]");
    }
    json_lit(b, &oom, "]");
    /* merges of equal scores tied, as llama.cpp ties them (bpe.c, parse_ranks); left out when no
     * two tie, which a plain list says as well */
    if (v->spm && v->n_merges > 0 && v->ranks[v->n_merges - 1] + 1 < (uint64_t)v->n_merges) {
        json_lit(b, &oom, ",\"difftrans_merge_ranks\":[");
        for (int64_t i = 0; i < v->n_merges; i++) {
            snprintf(num, sizeof num, "%s%u", i ? "," : "", v->ranks[i]);
            json_lit(b, &oom, num);
        }
        json_lit(b, &oom, "]");
    }
    json_lit(b, &oom, "}}");
    return oom ? -1 : 0;
}

/* tokenizer_config.json: the special tokens by name, and the chat template. */
static char *tokenizer_config(const vocab_in *v) {
    cJSON *root = cJSON_CreateObject();
    /* a byte-level BPE decodes to its bytes: transformers' older default (true) would drop the
     * spaces before punctuation */
    int ok = root && cJSON_AddStringToObject(root, "tokenizer_class", "PreTrainedTokenizerFast") &&
             cJSON_AddFalseToObject(root, "clean_up_tokenization_spaces");
    static const char *const keys[] = {"bos_token", "eos_token", "pad_token"};
    const int ids[] = {v->bos, v->eos, v->pad};
    for (int i = 0; i < 3 && ok; i++) {
        if (ids[i] < 0) continue;
        char *s = strndup(v->tok[ids[i]].p, v->tok[ids[i]].len);
        ok = s && cJSON_AddStringToObject(root, keys[i], s);
        free(s);
    }
    if (ok && v->has_chat) {
        char *s = strndup(v->chat.p, v->chat.len);
        ok = s && cJSON_AddStringToObject(root, "chat_template", s);
        free(s);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    return text;
}

/* A special id of the tokenizer metadata: absent (-1) or a token. */
static int token_id(const gguf_file *f, const char *key, int64_t n, int *out, dt_error *err) {
    int64_t v;
    const int rc = gguf_get_int(f, key, 0, n - 1, &v, err);
    *out = rc == 0 ? (int)v : -1;
    return rc < 0 ? -1 : 0;
}

/* The vocabulary through a tokenizer.json of our own making, loaded as the model's: written into a
 * private temporary directory, loaded, removed; the tokenizer then names the GGUF file as its
 * source. */
static int load_vocab(const gguf_file *f, const vocab_in *v, int vocab_size, dt_vocab *out, dt_error *err) {
    tk_buf json = {0};
    char *cfg = tokenizer_config(v);
    if (!cfg || tokenizer_json(v, &json) != 0 || tk_buf_put(&json, "", 1) != 0) {
        cJSON_free(cfg);
        tk_buf_free(&json);
        return dt_fail_oom(err, "%s: out of memory building its tokenizer", f->path);
    }
    const char *tmp = getenv("TMPDIR");
    char dir[4096], jpath[4200], cpath[4200];
    int rc = dt_pathf(dir, sizeof dir, err, "%s/difftrans-gguf-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (rc == 0 && !mkdtemp(dir)) rc = dt_fail_io(err, "%s: cannot create a temporary directory: %s", dir, strerror(errno));
    const int made = rc == 0;
    if (rc == 0) rc = dt_pathf(jpath, sizeof jpath, err, "%s/tokenizer.json", dir);
    if (rc == 0) rc = dt_pathf(cpath, sizeof cpath, err, "%s/tokenizer_config.json", dir);
    if (rc == 0) rc = write_file_atomic(jpath, json.p, json.n - 1, err);
    if (rc == 0) rc = write_text_atomic(cpath, cfg, err);
    if (rc == 0 && vocab_load_tokenizer(out, jpath, vocab_size, err) != 0) {
        dt_fail_prefix(err, "%s: its tokenizer", f->path);
        rc = fail_as_format(err);
    }
    if (rc == 0) snprintf(out->tok->path, sizeof out->tok->path, "%s", f->path);
    if (made) {
        unlink(jpath);
        unlink(cpath);
        rmdir(dir);
    }
    cJSON_free(cfg);
    tk_buf_free(&json);
    return rc;
}

/* Ids 0..255 (or all ids, when fewer) are GPT-2's byte alphabet in byte order, nothing merges,
 * nothing else is a token and nothing is added: exactly difftrans's byte-level vocabulary (whose
 * embedding may have fewer rows than 256 bytes). */
static int is_bytes(const vocab_in *v) {
    if (v->spm || v->n_merges || v->add_bos || v->add_eos) return 0;
    for (int64_t i = 0; i < v->n; i++) {
        if (i >= 256) {
            if (v->type[i] != TT_UNUSED) return 0;
            continue;
        }
        char ch[4];
        const int len = tk_utf8_encode(tk_byte_to_char[i], ch);
        if (v->type[i] != TT_NORMAL || v->tok[i].len != (size_t)len || memcmp(v->tok[i].p, ch, (size_t)len) != 0)
            return 0;
    }
    return 1;
}

static const char *token_in_at(void *ctx, uint64_t i, size_t *len) {
    const vocab_in *v = ctx;
    *len = v->tok[i].len;
    return v->tok[i].p;
}

/* Appends a stop id (none: -1) unless it is there already or the list is full. */
static void add_stop(dt_special_ids *s, int id) {
    int dup = id < 0 || s->n_eos == DT_MAX_EOS;
    for (int j = 0; j < s->n_eos; j++) dup |= s->eos_token_id[j] == id;
    if (!dup) s->eos_token_id[s->n_eos++] = id;
}

/* A special id of the tokenizer metadata, llama.cpp's default (-1: none) when absent. */
static int token_id_or(const gguf_file *f, const char *key, int64_t n, int dflt, int *out, dt_error *err) {
    if (token_id(f, key, n, out, err) != 0) return -1;
    if (*out < 0 && dflt < n) *out = dflt;
    return 0;
}

/* tokenizer.ggml.merges of a "gpt2" vocabulary: each two tokens whose concatenation is one too;
 * and its pre-tokenizer. */
static int read_bpe_merges(const gguf_file *f, vocab_in *v, const tokset *h, dt_error *err) {
    gguf_str pre = {"", 0};
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre, err) < 0) return -1;
    if (pre.len == 5 && !memcmp(pre.p, "gpt-2", 5)) v->pre = "gpt-2";
    else if ((pre.len == 9 && !memcmp(pre.p, "llama-bpe", 9)) || (pre.len == 6 && !memcmp(pre.p, "llama3", 6)) ||
             (pre.len == 8 && !memcmp(pre.p, "llama-v3", 8)))
        v->pre = "llama-bpe";
    else if (v->n_merges == 0) v->pre = "gpt-2"; /* bytes alone: every pre-tokenizer gives the same ids */
    else
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: tokenizer.ggml.pre '%.*s': difftrans reproduces llama.cpp's 'gpt-2' and 'llama-bpe' "
                            "pre-tokenizers only",
                            f->path, (int)(pre.len > 30 ? 30 : pre.len), pre.p);
    for (int64_t i = 0; i < v->n_merges; i++) {
        const gguf_str *s = &v->merges[i];
        const char *sp = s->len > 1 ? memchr(s->p + 1, ' ', s->len - 1) : NULL;
        int ok = sp != NULL && sp + 1 < s->p + s->len;
        if (ok) {
            const size_t la = (size_t)(sp - s->p), lb = s->len - la - 1;
            const int64_t a = tokset_find(h, v->tok, s->p, la), b = tokset_find(h, v->tok, sp + 1, lb);
            char *joined = malloc(la + lb + 1);
            if (!joined) return dt_fail_oom(err, "%s: out of memory", f->path);
            memcpy(joined, s->p, la);
            memcpy(joined + la, sp + 1, lb);
            const int64_t j = tokset_find(h, v->tok, joined, la + lb);
            free(joined);
            ok = a >= 0 && b >= 0 && j >= 0 && in_model_vocab(v->type[a]) && in_model_vocab(v->type[b]) &&
                 in_model_vocab(v->type[j]);
        }
        if (!ok)
            return dt_fail_format(err, "%s: tokenizer.ggml.merges[%lld] \"%.*s\" is not two tokens whose concatenation "
                                       "is a token",
                                  f->path, (long long)i, (int)(s->len > 60 ? 60 : s->len), s->p);
    }
    return 0;
}

static int read_vocab(const gguf_file *f, dt_config *c, dt_vocab *out, dt_error *err) {
    memset(out, 0, sizeof *out);
    gguf_str model;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (rc < 0) return -1;
    if (rc == 1) return dt_fail_format(err, "%s: no tokenizer.ggml.model (llama.cpp needs one too)", f->path);
    vocab_in v = {0};
    v.spm = model.len == 5 && memcmp(model.p, "llama", 5) == 0;
    if (!v.spm && (model.len != 4 || memcmp(model.p, "gpt2", 4) != 0))
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "%s: tokenizer.ggml.model '%.*s': difftrans reads byte-level BPE ('gpt2') and "
                            "SentencePiece ('llama') vocabularies; the others have no tokenizer.json form here",
                            f->path, (int)(model.len > 20 ? 20 : model.len), model.p);
    const gguf_kv *tk = gguf_find_kv(f, "tokenizer.ggml.tokens"), *mk = gguf_find_kv(f, "tokenizer.ggml.merges");
    const gguf_kv *tt = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (!tk) return dt_fail_format(err, "%s: no tokenizer.ggml.tokens", f->path);
    if (!mk && !v.spm) return dt_fail_format(err, "%s: no tokenizer.ggml.merges (llama.cpp's BPE needs them)", f->path);
    if (gguf_get_str_array(f, tk, &v.tok, err) != 0) return -1;
    v.n = (int64_t)tk->n;
    if (v.n != c->vocab_size) {
        free(v.tok);
        return dt_fail_format(err, "%s: %lld tokens but token_embd.weight has %d rows", f->path, (long long)v.n,
                              c->vocab_size);
    }
    if (!v.spm && gguf_get_str_array(f, mk, &v.merges, err) != 0) {
        free(v.tok);
        return -1;
    }
    v.n_merges = v.spm ? 0 : (int64_t)mk->n;
    v.type = malloc((size_t)v.n * sizeof *v.type);
    v.control = calloc((size_t)v.n, 1);
    if (v.spm) v.score = malloc((size_t)v.n * sizeof *v.score);
    tokset h = {0};
    if (!v.type || !v.control || (v.spm && !v.score) || tokset_init(&h, v.n) != 0)
        rc = dt_fail_oom(err, "%s: out of memory", f->path);
    else
        rc = 0;
    if (rc == 0 && tt && (!gguf_is_int_array(tt) || tt->n != (uint64_t)v.n))
        rc = dt_fail_format(err, "%s: tokenizer.ggml.token_type must be %lld integers, one per token", f->path,
                            (long long)v.n);
    for (int64_t i = 0; rc == 0 && i < v.n; i++) {
        const int64_t t = tt ? gguf_array_int(tt, (uint64_t)i) : TT_NORMAL;
        v.type[i] = t >= TT_NORMAL && t <= TT_BYTE ? (int32_t)t : TT_NORMAL;
        if (v.spm && v.type[i] != t) /* a type decides how llama.cpp treats the token: all of them matter */
            rc = dt_fail_format(err, "%s: tokenizer.ggml.token_type[%lld] = %lld is none of llama.cpp's types (1 "
                                     "normal to 6 byte)",
                                f->path, (long long)i, (long long)t);
        else if (v.tok[i].len == 0 || memchr(v.tok[i].p, 0, v.tok[i].len) ||
                 tk_utf8_check(v.tok[i].p, v.tok[i].len) != v.tok[i].len)
            rc = dt_fail_format(err, "%s: token %lld is empty, or not valid UTF-8 without NUL bytes", f->path, (long long)i);
        else if (tokset_add(&h, v.tok, i) >= 0)
            rc = dt_fail_format(err, "%s: token %lld \"%.*s\" appears twice in tokenizer.ggml.tokens", f->path,
                                (long long)i, (int)(v.tok[i].len > 60 ? 60 : v.tok[i].len), v.tok[i].p);
    }
    if (rc == 0 && !v.spm) rc = read_bpe_merges(f, &v, &h, err);
    if (rc == 0 && v.spm)
        rc = spm_read(f, v.tok, tt ? v.type : NULL, v.n, v.score, &v.pairs, &v.ranks, &v.n_merges, err);
    free(h.slot);
    /* llama.cpp's defaults: SentencePiece's ids 1, 2 and 0 for BOS, EOS and the unknown token */
    if (rc == 0 && (token_id_or(f, "tokenizer.ggml.bos_token_id", v.n, v.spm ? 1 : -1, &v.bos, err) ||
                    token_id_or(f, "tokenizer.ggml.eos_token_id", v.n, v.spm ? 2 : -1, &v.eos, err) ||
                    (v.spm && token_id_or(f, "tokenizer.ggml.unknown_token_id", v.n, 0, &v.unk, err)) ||
                    token_id(f, "tokenizer.ggml.eot_token_id", v.n, &v.eot, err) ||
                    token_id(f, "tokenizer.ggml.eom_token_id", v.n, &v.eom, err) ||
                    token_id(f, "tokenizer.ggml.padding_token_id", v.n, &v.pad, err)))
        rc = -1;
    /* and BOS added by Llama 3's pre-tokenizer and SentencePiece, a "▁" before the text by the
     * latter, unless the file says otherwise */
    v.add_bos = v.spm || !strcmp(v.pre ? v.pre : "", "llama-bpe");
    v.add_space_prefix = 1;
    if (rc == 0 && (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &v.add_bos, err) < 0 ||
                    gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &v.add_eos, err) < 0 ||
                    (v.spm && gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &v.add_space_prefix, err) < 0)))
        rc = -1;
    /* EOS as difftrans's export writes it for a model without one (special_ids): none; and BOS,
     * llama.cpp's default where the file names none */
    int stand_in = -1, bos_stand_in = -1, bos_key = -1;
    if (rc == 0 && (token_id(f, "difftrans.eos_stand_in", v.n, &stand_in, err) != 0 ||
                    token_id(f, "difftrans.bos_stand_in", v.n, &bos_stand_in, err) != 0 ||
                    token_id(f, "tokenizer.ggml.bos_token_id", v.n, &bos_key, err) != 0))
        rc = -1;
    if (stand_in >= 0 && v.eos == stand_in) v.eos = -1;
    if (bos_stand_in >= 0 && bos_key < 0 && v.bos == bos_stand_in) v.bos = -1;
    /* a special id on an unused row (llama.cpp's files may have them too) is no token of the
     * tokenizer.json made from the file: the config would name an id that its vocabulary lacks, and
     * the checkpoint written from it would not load. A byte-level model has no tokenizer.json: any
     * id of its embedding can be a special one. */
    if (rc == 0 && !is_bytes(&v)) {
        int *const special[] = {&v.bos, &v.eos, &v.eot, &v.eom, &v.pad};
        for (int k = 0; k < 5; k++)
            if (*special[k] >= 0 && !in_tokenizer(&v, *special[k])) *special[k] = -1;
    }
    if (v.bos < 0) v.add_bos = 0;
    if (v.eos < 0) v.add_eos = 0;
    if (rc == 0) {
        const int r = gguf_get_str(f, "tokenizer.chat_template", &v.chat, err);
        if (r < 0) rc = -1;
        v.has_chat = r == 0;
        if (v.has_chat && (memchr(v.chat.p, 0, v.chat.len) || tk_utf8_check(v.chat.p, v.chat.len) != v.chat.len))
            rc = dt_fail_format(err, "%s: tokenizer.chat_template is not valid UTF-8 without NUL bytes", f->path);
    }
    if (rc == 0) {
        dt_special_ids *s = &c->special;
        s->bos_token_id = v.bos;
        s->pad_token_id = v.pad;
        const int eos[3] = {v.eos, v.eot, v.eom};
        for (int k = 0; k < 3; k++) add_stop(s, eos[k]);
        /* llama.cpp also ends generation at tokens of known end-of-turn texts (Llama 3's "<|eot_id|>"
         * beside its EOS "<|end_of_text|>"), whatever their type, and at the fill-in-the-middle pad,
         * repository and file-separator tokens: stop ids here too. Ids on unused rows are no token
         * of the tokenizer.json made from the file (special ids on them are dropped above); those
         * past DT_MAX_EOS stop ids are left out. It makes all of those found by their text control
         * tokens (even the "<|end|>" and "</s>" it ends nothing at), and the fill-in-the-middle
         * prefix, suffix and middle ones: found in a prompt as special tokens, never printed; added
         * special tokens of the tokenizer.json (is_added). */
        unsigned char has[N_EOG];
        eog_scan(token_in_at, &v, v.n, has);
        for (int64_t i = 0; i < v.n; i++) {
            if (!in_tokenizer(&v, i)) continue;
            if (eog_by_text(v.tok[i].p, v.tok[i].len, has)) add_stop(s, (int)i);
            v.control[i] = eog_index(v.tok[i].p, v.tok[i].len) >= 0;
        }
        int fim[3], by_key[3];
        for (int k = 0; k < 3 && rc == 0; k++)
            if (token_id(f, FIM_KEY[k], v.n, &fim[k], err) != 0) rc = -1;
            else by_key[k] = fim[k] >= 0;
        if (rc == 0) fim_by_text(token_in_at, &v, v.n, FIM_TEXT, fim);
        for (int k = 0; k < 3 && rc == 0; k++)
            if (fim[k] >= 0 && in_tokenizer(&v, fim[k])) {
                add_stop(s, fim[k]);
                v.control[fim[k]] |= !by_key[k];
            }
        int infill[3] = {-1, -1, -1};
        for (int k = 0; k < 3 && rc == 0; k++)
            for (int j = 0; j < 2 && rc == 0 && infill[k] < 0; j++)
                if (token_id(f, FIM_INFILL_KEY[k][j], v.n, &infill[k], err) != 0) rc = -1;
        int by_text[3] = {-1, -1, -1};
        if (rc == 0) fim_by_text(token_in_at, &v, v.n, FIM_INFILL_TEXT, by_text);
        for (int k = 0; k < 3 && rc == 0; k++)
            if (infill[k] < 0 && by_text[k] >= 0 && in_tokenizer(&v, by_text[k])) v.control[by_text[k]] = 1;
        if (!is_bytes(&v)) rc = load_vocab(f, &v, c->vocab_size, out, err);
    }
    free(v.tok);
    free(v.merges);
    free(v.type);
    free(v.score);
    free(v.pairs);
    free(v.ranks);
    free(v.control);
    return rc;
}

/* ---------------------------------------------------------------- loading */

int gguf_model_load(dt_model *m, const char *path, dt_error *err) {
    memset(m, 0, sizeof *m);
    gguf_file f;
    if (gguf_open(&f, path, err) != 0) return -1;
    dt_config cfg;
    in_plan plan = {0};
    dt_vocab vocab = {0};
    int rc = read_hparams(&f, &cfg, err);
    if (rc == 0) rc = embedding_config(&f, &cfg, err);
    if (rc == 0) rc = plan_tensors(&f, &cfg, &plan, err);
    if (rc == 0) rc = read_vocab(&f, &cfg, &vocab, err);
    /* every tensor was found where the config puts it, with its shape: the parameters the config
     * claims are in the file, so allocating them is bounded by its size */
    if (rc == 0 && dt_model_create(m, &cfg, err) != 0) rc = -1;
    if (rc == 0) {
        m->vocab = vocab; /* dt_model_free frees it from here on */
        memset(&vocab, 0, sizeof vocab);
        rc = read_floats(&f, m, &plan, err);
    }
    if (rc == 0) rc = read_quant(&f, m, &plan, err);
    if (rc == 0) rc = check_rope_freqs(&f, m, &plan, err);
    if (rc != 0) dt_model_free(m);
    vocab_free(&vocab);
    free(plan.v);
    gguf_close(&f);
    return rc;
}
