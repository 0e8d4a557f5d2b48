/* fuzz_spm.c — a SentencePiece ("llama") vocabulary of a GGUF file from anyone, as gguf_spm.c turns
 * it into a BPE tokenizer: the fuzzer's bytes are the vocabulary (and a text), the harness writes
 * the GGUF file around it. dt_model_load must refuse it (a format or unsupported error naming the
 * file) or give a tokenizer whose ids on every text are those of llama.cpp's SentencePiece on the
 * same file: the reference below, written from llama.cpp's description (llm_tokenizer_spm in
 * llama-vocab.cpp) as test_gguf.c's is, joins the two neighbouring pieces that make the token of
 * the best score (the leftmost among equals) until none does, and gives a piece that is no token
 * as its bytes' <0xNN> tokens.
 *
 * Scores may tie (flag bit 2): the reader gives merges of equal scores one rank, which the BPE
 * takes leftmost first, as llama.cpp does (README "GGUF": files of gguf-py's LlamaHfVocab score
 * every token -1000, and Llama 2's own vocabulary has fifteen runs of "▁" at one score).
 *
 * Besides <unk>, <s> and </s>, llama.cpp finds in the raw text the tokens it makes control tokens
 * by their text (llama-vocab.cpp, as the lists below): every token of an end-of-generation text,
 * and of each fill-in-the-middle kind the token of one of its texts (here, where no key names one:
 * the lowest id; llama.cpp takes the one its hash map gives first, the same unless the vocabulary
 * holds two texts of a kind).
 *
 * Input: a first byte of flags (bit 0: tokenizer.ggml.add_space_prefix; bit 1: scores as i32;
 * bit 2: tied scores), then lines: each a token, its first byte its score's coarse part (0..15,
 * 1024 apart; without bit 2 the line's place breaks ties), the rest its text ("_" standing for
 * "▁", and byte 0x7F for "_", which the texts above hold); after a line "==text==" the rest
 * is one more text to encode. Lines that are no token (empty, not UTF-8, holding NUL, a repeat, <0x..>) are left out:
 * the loader's refusal of those is fuzz_gguf's to find. Ids 0..2 are <unk>, <s>, </s>, 3..258 the
 * byte tokens, then the input's tokens (at most MAX_TOKENS). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans.h"
#include "fuzz_util.h"
#include "io/gguf.h"
#include "../tests/spm_reference.h"

#define MAX_TOKENS 300
#define TEXT_SEP "\n==text==\n"
#define SPACE "\xe2\x96\x81"

typedef struct {
    char *s[3 + 256 + MAX_TOKENS];
    size_t len[3 + 256 + MAX_TOKENS];
    float score[3 + 256 + MAX_TOKENS];
    int32_t type[3 + 256 + MAX_TOKENS];
    unsigned char special[3 + 256 + MAX_TOKENS]; /* found in the raw text (mark_special) */
    int n;
} vocab;

static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        const size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || c == 0 || c == 0xC0 || c == 0xC1 || c > 0xF4 || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        const unsigned c1 = k > 1 ? s[i + 1] : 0;
        if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
            (c == 0xF4 && c1 > 0x8F))
            return 0;
        i += k;
    }
    return 1;
}

static int64_t find(const vocab *v, const char *s, size_t len) {
    for (int i = 0; i < v->n; i++)
        if (v->len[i] == len && !memcmp(v->s[i], s, len)) return i;
    return -1;
}

static void add(vocab *v, const char *s, size_t len, float score, int32_t type) {
    v->s[v->n] = malloc(len + 1);
    if (!v->s[v->n]) abort();
    memcpy(v->s[v->n], s, len);
    v->s[v->n][len] = '\0';
    v->len[v->n] = len;
    v->score[v->n] = score;
    v->type[v->n++] = type;
}

/* Line `line` as a token: "_" is "▁", 0x7F "_". */
static void add_line(vocab *v, const uint8_t *p, size_t n, int line, int ties) {
    if (n < 2 || v->n >= 3 + 256 + MAX_TOKENS) return;
    char buf[3 * 256];
    size_t len = 0;
    for (size_t i = 1; i < n && len + 3 <= sizeof buf; i++) {
        if (p[i] == '_') memcpy(buf + len, SPACE, 3), len += 3;
        else buf[len++] = p[i] == 0x7F ? '_' : (char)p[i];
    }
    if (!valid_utf8((const unsigned char *)buf, len) || find(v, buf, len) >= 0 ||
        (len >= 3 && !memcmp(buf, "<0x", 3)))
        return;
    /* an integer above the specials' and byte tokens' (so that i32 scores are the same scores),
     * that no other line has unless ties are asked for */
    add(v, buf, len, (float)((p[0] % 16 - 8) * 1024 - (ties ? 0 : line + 1)), 1);
}

static const char *str_at(void *ctx, uint64_t i, size_t *len) {
    const vocab *v = ctx;
    *len = v->len[i];
    return v->s[i];
}

static int emit(void *ctx, uint64_t i, gguf_sink *s, dt_error *err) {
    (void)err;
    const size_t *nbytes = ctx;
    static const float zeros[64];
    for (size_t left = nbytes[i]; left > 0;) {
        const size_t k = left < sizeof zeros ? left : sizeof zeros;
        if (gguf_sink_write(s, zeros, k) != 0) return -1;
        left -= k;
    }
    return 0;
}

static void write_gguf(const vocab *v, int add_space_prefix, int scores_i32, const char *path) {
    gguf_writer w;
    gguf_writer_init(&w, 32);
    gguf_w_str(&w, "general.architecture", "llama", 5);
    gguf_w_u32(&w, "llama.context_length", 16);
    gguf_w_u32(&w, "llama.embedding_length", 16);
    gguf_w_u32(&w, "llama.block_count", 1);
    gguf_w_u32(&w, "llama.feed_forward_length", 32);
    gguf_w_u32(&w, "llama.attention.head_count", 1);
    gguf_w_u32(&w, "llama.attention.head_count_kv", 1);
    gguf_w_f32(&w, "llama.rope.freq_base", 10000.0f);
    gguf_w_f32(&w, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_w_str(&w, "tokenizer.ggml.model", "llama", 5);
    gguf_w_str_array(&w, "tokenizer.ggml.tokens", (uint64_t)v->n, str_at, (void *)v);
    int32_t iscore[3 + 256 + MAX_TOKENS];
    for (int i = 0; i < v->n; i++) iscore[i] = (int32_t)v->score[i];
    if (scores_i32) gguf_w_i32_array(&w, "tokenizer.ggml.scores", iscore, (uint64_t)v->n);
    else gguf_w_f32_array(&w, "tokenizer.ggml.scores", v->score, (uint64_t)v->n);
    gguf_w_i32_array(&w, "tokenizer.ggml.token_type", v->type, (uint64_t)v->n);
    gguf_w_bool(&w, "tokenizer.ggml.add_space_prefix", add_space_prefix);
    gguf_w_u32(&w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_u32(&w, "tokenizer.ggml.eos_token_id", 2);
    gguf_w_u32(&w, "tokenizer.ggml.unknown_token_id", 0);
    static const struct {
        const char *name;
        int n_dims;
        int64_t ne0, ne1;
    } t[] = {
        {"token_embd.weight", 2, 16, -1},       {"blk.0.attn_norm.weight", 1, 16, 1},
        {"blk.0.attn_q.weight", 2, 16, 16},     {"blk.0.attn_k.weight", 2, 16, 16},
        {"blk.0.attn_v.weight", 2, 16, 16},     {"blk.0.attn_output.weight", 2, 16, 16},
        {"blk.0.ffn_norm.weight", 1, 16, 1},    {"blk.0.ffn_gate.weight", 2, 16, 32},
        {"blk.0.ffn_up.weight", 2, 16, 32},     {"blk.0.ffn_down.weight", 2, 32, 16},
        {"output_norm.weight", 1, 16, 1},
    };
    size_t nbytes[sizeof t / sizeof t[0]];
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        const int64_t ne[2] = {t[i].ne0, t[i].ne1 < 0 ? v->n : t[i].ne1};
        if (gguf_w_tensor(&w, t[i].name, t[i].n_dims, ne, GGML_TYPE_F32) != 0) abort();
        nbytes[i] = (size_t)(ne[0] * (t[i].n_dims > 1 ? ne[1] : 1)) * sizeof(float);
    }
    dt_error err;
    if (gguf_writer_write(&w, path, emit, nbytes, &err) != 0) {
        fprintf(stderr, "fuzz_spm: %s\n", err.msg);
        abort(); /* the harness's own file */
    }
    gguf_writer_free(&w);
}

/* ---------------------------------------------------------------- the reference */

typedef struct {
    int *v;
    size_t n;
} ids;

static void push(ids *o, int id) {
    int *p = realloc(o->v, (o->n + 1) * sizeof *p);
    if (!p) abort();
    p[o->n++] = id;
    o->v = p;
}

static int64_t vocab_find(const void *ctx, const char *s, size_t len) { return find(ctx, s, len); }

static float vocab_score(const void *ctx, int64_t id) { return ((const vocab *)ctx)->score[id]; }

/* A piece's token, or its bytes' (ids 3 + byte) when it is none */
static void push_piece(void *out, int64_t id, const char *p, size_t len) {
    if (id >= 0) push(out, (int)id);
    for (size_t b = 0; id < 0 && b < len; b++) push(out, 3 + (unsigned char)p[b]);
}

/* A text without special tokens, with "▁" for its spaces (and one before it when asked). */
static void ref_part(const vocab *v, const char *text, size_t len, int space_prefix, ids *out) {
    char *s = malloc(3 * len + 4);
    size_t n = 0;
    if (!s) abort();
    if (space_prefix) memcpy(s, SPACE, 3), n = 3;
    for (size_t i = 0; i < len; i++)
        if (text[i] == ' ') memcpy(s + n, SPACE, 3), n += 3;
        else s[n++] = text[i];
    const spm_ref_vocab rv = {v, vocab_find, vocab_score};
    if (spm_ref_pieces(&rv, s, n, push_piece, out) != 0) abort();
    free(s);
}

/* llama.cpp's end-of-generation texts, and its fill-in-the-middle ones by kind (prefix, suffix,
 * middle, pad, repository, file separator), as its vocabulary loader lists them. */
#define FW_BAR "\xef\xbd\x9c" /* "｜", DeepSeek's */
static const char *const EOG[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<" FW_BAR "end" SPACE "of" SPACE "sentence" FW_BAR ">", "[e~[",
};
static const char *const FIM[6][9] = {
    {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<" FW_BAR "fim" SPACE "begin" FW_BAR ">", "<PRE>",
     SPACE "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL},
    {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<" FW_BAR "fim" SPACE "hole" FW_BAR ">", "<SUF>", SPACE "<SUF>",
     "<|code_suffix|>", "<|suffix|>", NULL},
    {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<" FW_BAR "fim" SPACE "end" FW_BAR ">", "<MID>", SPACE "<MID>",
     "<|code_middle|>", "<|middle|>", NULL},
    {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
    {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
    {"<|file_sep|>", NULL},
};

static int is_text(const vocab *v, int id, const char *t) {
    return v->len[id] == strlen(t) && !memcmp(v->s[id], t, v->len[id]);
}

static void mark_special(vocab *v) {
    for (int i = 0; i < v->n; i++) {
        v->special[i] = v->type[i] == 2 || v->type[i] == 3; /* unknown, control */
        for (size_t k = 0; k < sizeof EOG / sizeof EOG[0]; k++) v->special[i] |= is_text(v, i, EOG[k]);
    }
    for (int k = 0; k < 6; k++) {
        int found = 0;
        for (int i = 0; i < v->n && !found; i++)
            for (int j = 0; !found && FIM[k][j]; j++)
                if (is_text(v, i, FIM[k][j])) found = v->special[i] = 1;
    }
}

/* The special tokens (mark_special) found in the raw text, leftmost, the longest there; a "▁"
 * before the text and after each special token when add_space_prefix. */
static void ref_encode(const vocab *v, const char *text, size_t len, int space_prefix, ids *out) {
    size_t from = 0;
    for (size_t i = 0; i <= len; i++) {
        int hit = -1;
        for (int t = 0; i < len && t < v->n; t++)
            if (v->special[t] && v->len[t] <= len - i && !memcmp(text + i, v->s[t], v->len[t]) &&
                (hit < 0 || v->len[t] > v->len[hit]))
                hit = t;
        if (hit < 0 && i < len) continue;
        if (i > from) ref_part(v, text + from, i - from, space_prefix, out);
        if (hit >= 0) push(out, hit);
        from = i + (hit >= 0 ? v->len[hit] : 0);
        if (hit >= 0) i = from - 1;
    }
}

static const char *const texts[] = {
    "Hello world, the tokens: caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82",
    "  two  spaces,\ta tab\nand a line",
    "aaaaaaaa abababab abcabcabc the the the",
    "x</s> y<s>z",
    "",
};

static void compare(const dt_model *m, const vocab *v, const char *text, size_t len, int space_prefix) {
    int *got;
    size_t n_got;
    dt_error err;
    if (dt_model_encode(m, text, len, 0, &got, &n_got, &err) != 0) {
        fprintf(stderr, "fuzz_spm: encode: %s\n", err.msg);
        abort();
    }
    ids want = {0};
    ref_encode(v, text, len, space_prefix, &want);
    if (n_got != want.n || (n_got && memcmp(got, want.v, n_got * sizeof *got))) {
        fprintf(stderr, "fuzz_spm: \"%.*s\": difftrans", (int)len, text);
        for (size_t i = 0; i < n_got; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, "; llama.cpp's SentencePiece");
        for (size_t i = 0; i < want.n; i++) fprintf(stderr, " %d", want.v[i]);
        fprintf(stderr, "\n");
        abort();
    }
    free(got);
    free(want.v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n < 1) return 0;
    const int space_prefix = data[0] & 1, scores_i32 = (data[0] >> 1) & 1, ties = (data[0] >> 2) & 1;
    size_t n1, n2;
    const uint8_t *text;
    fz_split(data + 1, n - 1, TEXT_SEP, sizeof TEXT_SEP - 1, &n1, &text, &n2);
    vocab v = {.n = 0};
    /* distinct scores here too: joined from the input's tokens they are merges like any other */
    add(&v, "<unk>", 5, -20000, 2);
    add(&v, "<s>", 3, -20001, 3);
    add(&v, "</s>", 4, -20002, 3);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        add(&v, name, 6, (float)(-20003 - b), 6);
    }
    for (size_t i = 0, start = 0, line = 0; i <= n1; i++)
        if (i == n1 || data[1 + i] == '\n') {
            add_line(&v, data + 1 + start, i - start, (int)line++, ties);
            start = i + 1;
        }
    mark_special(&v);
    char path[1024];
    fz_path(path, sizeof path, "spm.gguf");
    write_gguf(&v, space_prefix, scores_i32, path);
    dt_model m;
    dt_error err;
    if (dt_model_load(&m, path, &err) != 0) {
        const int named = strncmp(err.msg, path, strlen(path)) == 0;
        if ((err.code != DT_ERR_FORMAT && err.code != DT_ERR_UNSUPPORTED) || !named) {
            fprintf(stderr, "fuzz_spm: refused with code %d: %s\n", (int)err.code, err.msg);
            abort();
        }
    } else {
        for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++)
            compare(&m, &v, texts[k], strlen(texts[k]), space_prefix);
        /* the input's text, cut at a NUL (dt_model_encode takes text) and kept whole characters */
        size_t len = 0;
        while (len < n2 && text[len]) len++;
        if (valid_utf8(text, len)) compare(&m, &v, (const char *)text, len, space_prefix);
        dt_model_free(&m);
    }
    for (int i = 0; i < v.n; i++) free(v.s[i]);
    return 0;
}
