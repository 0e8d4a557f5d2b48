/* test_gguf.c — GGUF files (README "GGUF"): export then load gives the source model's logits
 * (exactly for F32 and for quantised models' own blocks, F16 / BF16 exactly those of the model
 * rounded the same way), the q / k rows in llama.cpp's RoPE order (the scores llama.cpp's RoPE
 * computes from the file are difftrans's, and would not be without the reordering), the metadata
 * llama.cpp reads, the tokenizer both ways, files as llama.cpp's tools write them, the refusals
 * (DIFF, V2, w8a8, other architectures and types), and hostile files: every truncation of a small
 * file, lying counts, offsets, shapes and types. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "base/base.h"
#include "difftrans.h"
#include "io/gguf.h"
#include "model/gguf_model.h"
#include "model/model_quant.h"
#include "spm_reference.h"
#include "testutil.h"

/* ---------------------------------------------------------------- models */

/* A 2-layer llama with GQA (4 query heads, 2 kv heads of width 16) whose sizes are multiples of
 * 32, so that every GGUF type can hold it. */
static void llama_config(dt_config *c, int tied) {
    dt_error err;
    assert_int_equal(dt_config_preset(c, "tiny", DT_ARCH_LLAMA, &err), 0);
    c->hidden_size = 64;
    c->num_attention_heads = 4;
    c->num_key_value_heads = 2;
    c->head_dim = 16;
    c->intermediate_size = 96;
    c->num_hidden_layers = 2;
    c->max_position_embeddings = 64;
    c->tie_word_embeddings = tied;
}

static void make_llama(dt_model *m, int tied, uint64_t seed) {
    dt_config c;
    llama_config(&c, tied);
    dt_error err;
    assert_int_equal(dt_model_create(m, &c, &err), 0);
    dt_model_init_random(m, seed);
    for (size_t i = 0; i < m->n_params; i++) m->params[i] *= 6.0f; /* attention far from uniform */
}

static const int TOKENS[] = {72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100, 33, 10, 3, 250, 0, 17, 99};
#define NT ((int)(sizeof TOKENS / sizeof TOKENS[0]))

/* Logits [NT, V] of the model on TOKENS (malloc'd). */
static float *logits_of(const dt_model *m) {
    dt_error err;
    dt_runstate *rs = dt_runstate_create(m, 1, NT, &err);
    if (!rs) fail_msg("%s", err.msg);
    if (dt_forward(m, rs, TOKENS, NULL, 1, NT, NULL, &err) != 0) fail_msg("%s", err.msg);
    float *out = fcopy(dt_runstate_logits(rs), (size_t)NT * m->cfg.vocab_size);
    dt_runstate_free(rs);
    return out;
}

static void save_gguf(const dt_model *m, const char *name, dt_dtype dtype, char *path, size_t n) {
    tu_path(path, n, name);
    dt_error err;
    if (dt_model_save_gguf(m, path, dtype, &err) != 0) fail_msg("%s", err.msg);
}

static void load_gguf(dt_model *m, const char *path) {
    dt_error err;
    if (dt_model_load(m, path, &err) != 0) fail_msg("%s", err.msg);
}

static void expect_equal_logits(const dt_model *a, const dt_model *b, float tol, const char *what) {
    float *la = logits_of(a), *lb = logits_of(b);
    const float d = tu_max_abs_diff(la, lb, (size_t)NT * a->cfg.vocab_size);
    if (!(d <= tol)) fail_msg("%s: logits differ by %g (allowed %g)", what, (double)d, (double)tol);
    free(la);
    free(lb);
}

static void expect_same_config(const dt_config *a, const dt_config *b) {
    assert_int_equal(a->arch, b->arch);
    assert_int_equal(a->vocab_size, b->vocab_size);
    assert_int_equal(a->hidden_size, b->hidden_size);
    assert_int_equal(a->intermediate_size, b->intermediate_size);
    assert_int_equal(a->num_hidden_layers, b->num_hidden_layers);
    assert_int_equal(a->num_attention_heads, b->num_attention_heads);
    assert_int_equal(a->num_key_value_heads, b->num_key_value_heads);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->max_position_embeddings, b->max_position_embeddings);
    assert_true(a->rms_norm_eps == b->rms_norm_eps);
    assert_true(a->rope_theta == b->rope_theta);
    assert_int_equal(a->tie_word_embeddings, b->tie_word_embeddings);
    assert_int_equal(a->rope_scaling.type, b->rope_scaling.type);
}

/* ---------------------------------------------------------------- round trips */

static void test_round_trip_f32(void **state) {
    (void)state;
    for (int tied = 0; tied < 2; tied++) {
        dt_model m, back;
        char path[600];
        make_llama(&m, tied, 5 + tied);
        save_gguf(&m, tied ? "f32_tied.gguf" : "f32.gguf", DT_F32, path, sizeof path);
        load_gguf(&back, path);
        expect_same_config(&m.cfg, &back.cfg);
        assert_int_equal(back.n_params, m.n_params);
        /* every parameter back bit for bit (q / k rows permuted there and back) */
        assert_memory_equal(back.params, m.params, m.n_params * sizeof(float));
        assert_null(dt_model_tok(&back)); /* byte-level in, byte-level out */
        expect_equal_logits(&m, &back, 0.0f, tied ? "F32 tied" : "F32");
        dt_model_free(&back);
        dt_model_free(&m);
    }
}

static void test_round_trip_f16_bf16(void **state) {
    (void)state;
    const dt_dtype types[] = {DT_F16, DT_BF16};
    for (int k = 0; k < 2; k++) {
        dt_model m, back;
        char path[600];
        make_llama(&m, 0, 9);
        save_gguf(&m, k ? "bf16.gguf" : "f16.gguf", types[k], path, sizeof path);
        load_gguf(&back, path);
        /* the 2-D weights rounded to the type, to nearest even; the norms stay F32 */
        for (int i = 0; i < m.n_tensors; i++) {
            const dt_tensor *t = &m.tensors[i];
            float *p = m.params + t->offset;
            if (t->ndim == 2)
                for (size_t j = 0; j < t->numel; j++) p[j] = k ? bf16_to_float(float_to_bf16(p[j])) : half_to_float(float_to_half(p[j]));
        }
        assert_memory_equal(back.params, m.params, m.n_params * sizeof(float));
        expect_equal_logits(&m, &back, 0.0f, k ? "BF16" : "F16");
        dt_model_free(&back);
        dt_model_free(&m);
    }
}

static void quantise(dt_model *m, dt_quant_scheme s, int lm_head) {
    dt_quant_options o;
    dt_quant_defaults(&o);
    o.scheme = s;
    o.lm_head = lm_head;
    o.quiet = 1;
    dt_error err;
    if (dt_model_quantize(m, &o, &err) != 0) fail_msg("%s", err.msg);
}

static void test_round_trip_quantised(void **state) {
    (void)state;
    const dt_quant_scheme schemes[] = {DT_QUANT_Q8_0, DT_QUANT_Q4_0};
    for (int k = 0; k < 2; k++)
        for (int head = 0; head < 2; head++)
            for (int tied = 0; tied < 2; tied++) {
                dt_model m, back;
                char name[64], path[600];
                make_llama(&m, tied, 20 + k);
                quantise(&m, schemes[k], head);
                snprintf(name, sizeof name, "%s_h%d_t%d.gguf", dt_quant_scheme_name(schemes[k]), head, tied);
                save_gguf(&m, name, DT_F32, path, sizeof path);
                load_gguf(&back, path);
                dt_quant_options qo;
                assert_int_equal(dt_model_quant_scheme(&back, &qo), schemes[k]);
                assert_int_equal(qo.lm_head, head);
                /* the file holds the model's own blocks: the loaded layers are them, byte for byte */
                assert_int_equal(back.quant->n_linear, m.quant->n_linear);
                for (int i = 0; i < m.quant->n_linear; i++) {
                    const qlinear *a = &m.quant->lin[i], *b = &back.quant->lin[i];
                    assert_int_equal(a->fmt, b->fmt);
                    assert_int_equal(a->out, b->out);
                    assert_int_equal(a->in, b->in);
                    const size_t bytes = (size_t)a->out * q_blocks(a->in) * qblock_bytes(a->fmt);
                    void *ab = malloc(bytes), *bb = malloc(bytes);
                    assert_true(ab && bb);
                    qlinear_blocks_copy(a, ab, 0, a->out);
                    qlinear_blocks_copy(b, bb, 0, b->out);
                    assert_memory_equal(ab, bb, bytes);
                    free(ab), free(bb);
                }
                assert_memory_equal(back.w.embed_tokens, m.w.embed_tokens,
                                    (size_t)m.cfg.vocab_size * m.cfg.hidden_size * sizeof(float));
                expect_equal_logits(&m, &back, 0.0f, name);
                dt_model_free(&back);
                dt_model_free(&m);
            }
}

/* ---------------------------------------------------------------- the RoPE layout */

/* q = W x for the rows of one head (hd rows of width C) of a [rows, C] matrix. */
static void head_rows(float *q, const float *w, int head, int hd, int C, const float *x) {
    for (int r = 0; r < hd; r++) {
        double s = 0;
        for (int j = 0; j < C; j++) s += (double)w[(size_t)(head * hd + r) * C + j] * x[j];
        q[r] = (float)s;
    }
}

/* RoPE at position pos: pairs (i, i + hd/2) (HF, difftrans) or (2i, 2i + 1) (llama.cpp's llama,
 * ggml's "normal" mode), angle pos · theta^(−2i / hd) either way. */
static void rope(float *q, int hd, int pos, float theta, int adjacent) {
    for (int i = 0; i < hd / 2; i++) {
        const double a = pos * pow(theta, -2.0 * i / hd), c = cos(a), s = sin(a);
        const int i0 = adjacent ? 2 * i : i, i1 = adjacent ? 2 * i + 1 : i + hd / 2;
        const double x0 = q[i0], x1 = q[i1];
        q[i0] = (float)(x0 * c - x1 * s);
        q[i1] = (float)(x0 * s + x1 * c);
    }
}

/* The score of query head h at position tq on key position tk, from q / k weights [rows, C] with
 * the given RoPE pairing (kv head h / group). */
static double score(const float *wq, const float *wk, const dt_config *c, int h, const float *xq, int tq,
                    const float *xk, int tk, int adjacent) {
    const int hd = c->head_dim, group = c->num_attention_heads / c->num_key_value_heads;
    float q[64], k[64];
    head_rows(q, wq, h, hd, c->hidden_size, xq);
    head_rows(k, wk, h / group, hd, c->hidden_size, xk);
    rope(q, hd, tq, c->rope_theta, adjacent);
    rope(k, hd, tk, c->rope_theta, adjacent);
    double s = 0;
    for (int i = 0; i < hd; i++) s += (double)q[i] * k[i];
    return s;
}

/* Reads a 2-D F32 tensor of a GGUF file as floats [rows, cols]. */
static float *gguf_floats(const gguf_file *f, const char *name, int rows, int cols) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    assert_non_null(t);
    assert_int_equal(t->type, GGML_TYPE_F32);
    assert_int_equal(t->ne[0], cols);
    assert_int_equal(t->ne[1], rows);
    float *v = fnew((size_t)rows * cols);
    for (size_t i = 0; i < (size_t)rows * cols; i++) {
        uint32_t u;
        memcpy(&u, t->data + 4 * i, 4); /* little-endian host (x86-64) */
        v[i] = base_bits_float(u);
    }
    return v;
}

/* The q / k rows the file holds, put through llama.cpp's RoPE (adjacent pairs), give the scores
 * difftrans computes from its own rows with HF's RoPE (halves); the file's rows taken as if they
 * were in HF's order do not, so the check would catch an exporter that forgot the reordering. */
static void test_rope_permutation(void **state) {
    (void)state;
    dt_model m;
    char path[600];
    make_llama(&m, 0, 31);
    save_gguf(&m, "rope.gguf", DT_F32, path, sizeof path);
    gguf_file f;
    dt_error err;
    if (gguf_open(&f, path, &err) != 0) fail_msg("%s", err.msg);
    const dt_config *c = &m.cfg;
    const int C = c->hidden_size, qdim = c->num_attention_heads * c->head_dim, kvdim = c->num_key_value_heads * c->head_dim;
    assert_true(c->head_dim >= 4);
    float *fq = gguf_floats(&f, "blk.1.attn_q.weight", qdim, C), *fk = gguf_floats(&f, "blk.1.attn_k.weight", kvdim, C);
    uint64_t rng = 77;
    float *xq = frand((size_t)C, 1.0f, &rng), *xk = frand((size_t)C, 1.0f, &rng);
    double worst = 0, unpermuted = 0, scale = 0;
    for (int h = 0; h < c->num_attention_heads; h++)
        for (int tq = 0; tq < 12; tq += 3)
            for (int tk = 0; tk <= tq; tk += 2) {
                const dt_layer_weights *lw = &m.w.layers[1];
                const double ref = score(lw->q_proj, lw->k_proj, c, h, xq, tq, xk, tk, 0);
                const double ours = score(fq, fk, c, h, xq, tq, xk, tk, 1);
                const double wrong = score(fq, fk, c, h, xq, tq, xk, tk, 0);
                worst = fmax(worst, fabs(ours - ref));
                unpermuted = fmax(unpermuted, fabs(wrong - ref));
                scale = fmax(scale, fabs(ref));
            }
    if (!(worst <= 1e-4 * scale)) fail_msg("llama.cpp's RoPE on the file's rows: scores off by %g of %g", worst, scale);
    if (!(unpermuted > 0.05 * scale))
        fail_msg("the check is blind: rows in HF order give the same scores (%g of %g)", unpermuted, scale);
    free(fq);
    free(fk);
    free(xq);
    free(xk);
    gguf_close(&f);
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- what llama.cpp reads */

static int64_t kv_int(const gguf_file *f, const char *key) {
    int64_t v = -1;
    dt_error err;
    if (gguf_get_int(f, key, INT64_MIN, INT64_MAX, &v, &err) != 0) fail_msg("%s: %s", key, err.msg);
    return v;
}

static void expect_str(const gguf_file *f, const char *key, const char *want) {
    gguf_str s;
    dt_error err;
    if (gguf_get_str(f, key, &s, &err) != 0) fail_msg("%s missing", key);
    if (s.len != strlen(want) || memcmp(s.p, want, s.len) != 0) fail_msg("%s is '%.*s', not '%s'", key, (int)s.len, s.p, want);
}

static void test_metadata(void **state) {
    (void)state;
    dt_model m;
    char path[600];
    make_llama(&m, 1, 3);
    quantise(&m, DT_QUANT_Q8_0, 0);
    save_gguf(&m, "meta.gguf", DT_F32, path, sizeof path);
    gguf_file f;
    dt_error err;
    if (gguf_open(&f, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(f.version, 3);
    assert_int_equal(f.alignment, 32);
    expect_str(&f, "general.architecture", "llama");
    expect_str(&f, "tokenizer.ggml.model", "gpt2");
    expect_str(&f, "tokenizer.ggml.pre", "gpt-2");
    assert_int_equal(kv_int(&f, "general.alignment"), 32);
    assert_int_equal(kv_int(&f, "general.file_type"), 7); /* MOSTLY_Q8_0 */
    assert_int_equal(kv_int(&f, "llama.block_count"), 2);
    assert_int_equal(kv_int(&f, "llama.embedding_length"), 64);
    assert_int_equal(kv_int(&f, "llama.feed_forward_length"), 96);
    assert_int_equal(kv_int(&f, "llama.attention.head_count"), 4);
    assert_int_equal(kv_int(&f, "llama.attention.head_count_kv"), 2);
    assert_int_equal(kv_int(&f, "llama.rope.dimension_count"), 16);
    assert_int_equal(kv_int(&f, "llama.context_length"), 64);
    assert_int_equal(kv_int(&f, "llama.vocab_size"), 256);
    double eps = 0, base = 0;
    assert_int_equal(gguf_get_float(&f, "llama.attention.layer_norm_rms_epsilon", &eps, &err), 0);
    assert_int_equal(gguf_get_float(&f, "llama.rope.freq_base", &base, &err), 0);
    assert_true((float)eps == m.cfg.rms_norm_eps && (float)base == m.cfg.rope_theta);
    const gguf_kv *toks = gguf_find_kv(&f, "tokenizer.ggml.tokens");
    assert_non_null(toks);
    assert_int_equal(toks->n, 256);
    /* tied and the head float: no output tensor (llama.cpp then multiplies by token_embd) */
    assert_null(gguf_find_tensor(&f, "output.weight"));
    assert_int_equal(f.n_tensors, 1 + 9 * 2 + 1);
    /* embeddings and norms F32, the linear layers the model's Q8_0 blocks; every tensor aligned,
     * each right after the one before, padded */
    uint64_t next = 0;
    for (int64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        const int linear = strstr(t->name, "attn_q") || strstr(t->name, "attn_k") || strstr(t->name, "attn_v") ||
                           strstr(t->name, "attn_output") || strstr(t->name, "ffn_gate") || strstr(t->name, "ffn_up") ||
                           strstr(t->name, "ffn_down");
        if (linear != (t->type == GGML_TYPE_Q8_0)) fail_msg("tensor %s has type %s", t->name, ggml_type_name(t->type));
        if (!linear) assert_int_equal(t->type, GGML_TYPE_F32);
        assert_int_equal(t->offset, next);
        next = t->offset + (t->nbytes + 31) / 32 * 32;
    }
    assert_non_null(gguf_find_tensor(&f, "blk.1.ffn_down.weight"));
    assert_non_null(gguf_find_tensor(&f, "output_norm.weight"));
    assert_non_null(gguf_find_tensor(&f, "token_embd.weight"));
    gguf_close(&f);
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- refusals */

static void expect_save_refused(const dt_model *m, dt_dtype dtype, dt_errcode code, const char *problem) {
    char path[600];
    tu_path(path, sizeof path, "refused.gguf");
    remove(path);
    dt_error err = {0};
    assert_int_equal(dt_model_save_gguf(m, path, dtype, &err), -1);
    assert_int_equal(err.code, code);
    if (!strstr(err.msg, problem)) fail_msg("expected '%s' in: %s", problem, err.msg);
    assert_false(tu_file_exists(path));
}

static void test_refusals(void **state) {
    (void)state;
    const dt_arch archs[] = {DT_ARCH_DIFF, DT_ARCH_DIFF_V2};
    const char *why[] = {"llama.cpp has no differential-attention architecture", "llama.cpp has no architecture"};
    for (int k = 0; k < 2; k++) {
        dt_config c;
        dt_model m;
        dt_error err;
        tu_tiny_diff_config(&c);
        dt_config_ablation(&c, &c, k ? "v2" : "rope", &err);
        assert_int_equal(c.arch, archs[k]);
        assert_int_equal(dt_model_create(&m, &c, &err), 0);
        expect_save_refused(&m, DT_F32, DT_ERR_UNSUPPORTED, why[k]);
        dt_model_free(&m);
    }
    dt_model m;
    make_llama(&m, 0, 1);
    expect_save_refused(&m, DT_I8, DT_ERR_INVALID, "F32, F16 or BF16");
    dt_quant_options o;
    dt_quant_defaults(&o);
    o.scheme = DT_QUANT_W8A8;
    o.dynamic_activations = 1;
    o.quiet = 1;
    dt_error err;
    assert_int_equal(dt_model_quantize(&m, &o, &err), 0);
    expect_save_refused(&m, DT_F32, DT_ERR_UNSUPPORTED, "w8a8 model has no GGUF type");
    dt_model_free(&m);
    make_llama(&m, 0, 1);
    quantise(&m, DT_QUANT_Q4_0, 0);
    expect_save_refused(&m, DT_F16, DT_ERR_INVALID, "own blocks");
    dt_model_free(&m);
    /* rows that are not whole 32-weight blocks: ggml cannot hold them */
    dt_config c;
    llama_config(&c, 0);
    c.intermediate_size = 80;
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    dt_model_init_random(&m, 2);
    quantise(&m, DT_QUANT_Q8_0, 0);
    expect_save_refused(&m, DT_F32, DT_ERR_UNSUPPORTED, "mlp.down_proj has 80 inputs, not a multiple of 32");
    dt_model_free(&m);
    /* ALiBi has no llama.cpp form */
    llama_config(&c, 0);
    c.position = DT_POS_ALIBI;
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    expect_save_refused(&m, DT_F32, DT_ERR_UNSUPPORTED, "ALiBi");
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- tokenizers */

static const char *TEXT = "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs 1234567 times.\n"
                          "Another line of text, with words that repeat: the the the fox fox dog. Caf\xc3\xa9 \xf0\x9f\x9a\x80\n";

/* A BPE of 300 tokens learned on TEXT (pattern gpt2 or llama3; bos / eos / pad but for no_bos:
 * no bos, 2: no eos, 3: neither eos nor pad, 299 tokens). */
static void train_tokenizer(const char *dir, const char *pattern, int no_bos) {
    char text_path[600];
    tu_path(text_path, sizeof text_path, "tok_text.txt");
    char text[8192] = "";
    for (int i = 0; i < 20; i++) strcat(text, TEXT);
    tu_write_file(text_path, text, strlen(text));
    dt_tok_train_options o;
    dt_tok_train_defaults(&o);
    const char *files[] = {text_path};
    o.files = files;
    o.n_files = 1;
    o.vocab_size = 300;
    o.min_frequency = 1;
    o.pattern = pattern;
    if (no_bos == 1) o.bos = "";
    if (no_bos >= 2) o.eos = "";
    if (no_bos == 3) {
        o.pad = "";
        o.vocab_size = 299;
    }
    o.quiet = 1;
    dt_error err;
    if (dt_tok_train(&o, dir, &err) != 0) fail_msg("%s", err.msg);
}

static void expect_same_encoding(const dt_model *a, const dt_model *b, int add_special) {
    int *ia, *ib;
    size_t na, nb;
    dt_error err;
    const char *text = "Hello, the fox! 42 dogs \xe2\x80\x94 unseen words: zyxwv\n\n  end";
    if (dt_model_encode(a, text, strlen(text), add_special, &ia, &na, &err) != 0) fail_msg("%s", err.msg);
    if (dt_model_encode(b, text, strlen(text), add_special, &ib, &nb, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(na, nb);
    assert_memory_equal(ia, ib, na * sizeof *ia);
    assert_true(na > 5 && na < strlen(text)); /* merges happened */
    free(ia);
    free(ib);
}

/* The two files hold the same bytes under each of the n keys (a vocabulary written again). */
static void expect_same_values(const char *path1, const char *path2, const char *const *keys, int n) {
    gguf_file f1, f2;
    dt_error err;
    if (gguf_open(&f1, path1, &err) != 0) fail_msg("%s", err.msg);
    if (gguf_open(&f2, path2, &err) != 0) fail_msg("%s", err.msg);
    for (int i = 0; i < n; i++) {
        const gguf_kv *a = gguf_find_kv(&f1, keys[i]), *b = gguf_find_kv(&f2, keys[i]);
        assert_non_null(a);
        assert_non_null(b);
        assert_int_equal(a->size, b->size);
        assert_memory_equal(a->data, b->data, a->size);
    }
    gguf_close(&f1);
    gguf_close(&f2);
}

static void test_bpe_tokenizers(void **state) {
    (void)state;
    const char *patterns[] = {"llama3", "gpt2"}, *pres[] = {"llama-bpe", "gpt-2"};
    for (int k = 0; k < 2; k++) {
        char dir[600], path[600];
        tu_path(dir, sizeof dir, k ? "tok_gpt2" : "tok_llama3");
        train_tokenizer(dir, patterns[k], k); /* gpt2 without a BOS */
        dt_config c;
        llama_config(&c, 0);
        c.vocab_size = 320; /* an embedding larger than the tokenizer: ids 300.. are holes */
        dt_model m, back;
        dt_error err;
        assert_int_equal(dt_model_create(&m, &c, &err), 0);
        dt_model_init_random(&m, 40 + k);
        if (dt_model_set_tokenizer(&m, dir, &err) != 0) fail_msg("%s", err.msg);
        save_gguf(&m, k ? "bpe_gpt2.gguf" : "bpe_llama3.gguf", DT_F32, path, sizeof path);
        gguf_file f;
        if (gguf_open(&f, path, &err) != 0) fail_msg("%s", err.msg);
        expect_str(&f, "tokenizer.ggml.pre", pres[k]);
        int add_bos = -1;
        assert_int_equal(gguf_get_bool(&f, "tokenizer.ggml.add_bos_token", &add_bos, &err), 0);
        assert_int_equal(add_bos, !k);
        assert_int_equal(gguf_find_kv(&f, "tokenizer.ggml.merges")->n, 300 - 256 - (k ? 2 : 3));
        assert_int_equal(gguf_find_kv(&f, "tokenizer.ggml.tokens")->n, 320);
        gguf_close(&f);
        load_gguf(&back, path);
        assert_non_null(dt_model_tok(&back));
        assert_string_equal(dt_tok_path(dt_model_tok(&back)), path);
        assert_int_equal(back.cfg.special.bos_token_id, m.cfg.special.bos_token_id);
        assert_int_equal(back.cfg.special.pad_token_id, m.cfg.special.pad_token_id);
        assert_int_equal(back.cfg.special.n_eos, m.cfg.special.n_eos);
        assert_int_equal(back.cfg.special.eos_token_id[0], m.cfg.special.eos_token_id[0]);
        expect_same_encoding(&m, &back, 0);
        expect_same_encoding(&m, &back, 1);
        expect_equal_logits(&m, &back, 0.0f, patterns[k]);
        /* the special tokens decode, and the file read back writes the same tokens again */
        char again[600];
        save_gguf(&back, "bpe_again.gguf", DT_F32, again, sizeof again);
        const char *keys[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"};
        expect_same_values(path, again, keys, 3);
        dt_model_free(&back);
        dt_model_free(&m);
    }
}

/* A tokenizer llama.cpp's BPE cannot reproduce (a normalizer) is refused by name. */
static void test_tokenizer_refused(void **state) {
    (void)state;
    char dir[600], json_path[700];
    tu_path(dir, sizeof dir, "tok_norm");
    train_tokenizer(dir, "gpt2", 1);
    snprintf(json_path, sizeof json_path, "%s/tokenizer.json", dir);
    size_t n = 0;
    char *json = tu_read_file(json_path, &n);
    const char *from = "\"normalizer\":null";
    char *at = strstr(json, from);
    assert_non_null(at);
    char *edited = malloc(n + 64);
    snprintf(edited, n + 64, "%.*s\"normalizer\":{\"type\":\"NFC\"}%s", (int)(at - json), json, at + strlen(from));
    tu_write_file(json_path, edited, strlen(edited));
    free(json);
    free(edited);
    dt_config c;
    llama_config(&c, 0);
    c.vocab_size = 300;
    dt_model m;
    dt_error err;
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    if (dt_model_set_tokenizer(&m, dir, &err) != 0) fail_msg("%s", err.msg);
    expect_save_refused(&m, DT_F32, DT_ERR_UNSUPPORTED, "a normalizer (NFC)");
    dt_model_free(&m);
    /* merges of one rank (difftrans_merge_ranks all 0): llama.cpp's BPE would rank them by place */
    tu_path(dir, sizeof dir, "tok_ranks");
    train_tokenizer(dir, "gpt2", 1);
    snprintf(json_path, sizeof json_path, "%s/tokenizer.json", dir);
    json = tu_read_file(json_path, &n);
    cJSON *root = cJSON_Parse(json), *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    assert_non_null(model);
    cJSON *ranks = cJSON_AddArrayToObject(model, "difftrans_merge_ranks");
    const int n_merges = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(model, "merges"));
    assert_true(ranks && n_merges > 0);
    for (int k = 0; k < n_merges; k++) cJSON_AddItemToArray(ranks, cJSON_CreateNumber(0));
    edited = cJSON_PrintUnformatted(root);
    assert_non_null(edited);
    tu_write_file(json_path, edited, strlen(edited));
    cJSON_free(edited);
    cJSON_Delete(root);
    free(json);
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    if (dt_model_set_tokenizer(&m, dir, &err) != 0) fail_msg("%s", err.msg);
    expect_save_refused(&m, DT_F32, DT_ERR_UNSUPPORTED, "merge ranks of its own (difftrans_merge_ranks)");
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- hostile files: containers */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void b_put(bytes *b, const void *p, size_t n) {
    if (n == 0) return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void b_u32(bytes *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    b_put(b, x, 4);
}
static void b_u64(bytes *b, uint64_t v) {
    b_u32(b, (uint32_t)v);
    b_u32(b, (uint32_t)(v >> 32));
}
static void b_str(bytes *b, const char *s) {
    b_u64(b, strlen(s));
    b_put(b, s, strlen(s));
}
static void b_head(bytes *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
/* a tensor info: name, dims, type, offset */
static void b_tensor(bytes *b, const char *name, int n_dims, const int64_t *ne, uint32_t type, uint64_t offset) {
    b_str(b, name);
    b_u32(b, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++) b_u64(b, (uint64_t)ne[d]);
    b_u32(b, type);
    b_u64(b, offset);
}
static void b_pad(bytes *b, size_t align, size_t data) {
    while (b->n % align) b_put(b, "", 1);
    for (size_t i = 0; i < data; i++) b_put(b, "", 1);
}

/* gguf_open (and dt_model_load) must refuse the bytes: code FORMAT, a message "PATH: ...problem". */
static void expect_bytes_refused(bytes *b, const char *problem) {
    char path[600];
    tu_path(path, sizeof path, "hostile.gguf");
    tu_write_file(path, b->p, b->n);
    free(b->p);
    memset(b, 0, sizeof *b);
    gguf_file f;
    dt_error err = {0};
    assert_int_equal(gguf_open(&f, path, &err), -1);
    assert_null(f.map);
    assert_int_equal(err.code, DT_ERR_FORMAT);
    if (strncmp(err.msg, path, strlen(path)) != 0) fail_msg("message does not start with the path: %s", err.msg);
    if (!strstr(err.msg, problem)) fail_msg("expected '%s' in: %s", problem, err.msg);
    dt_model m;
    assert_int_equal(dt_model_load(&m, path, &err), -1);
    assert_int_equal(err.code, DT_ERR_FORMAT);
}

static void test_hostile_containers(void **state) {
    (void)state;
    bytes b = {0};
    const int64_t v4[1] = {4}, m33[2] = {33, 1}, big[2] = {INT64_C(1) << 40, INT64_C(1) << 40}, neg[1] = {-5};
    b_put(&b, "GGUX", 4), b_u32(&b, 3), b_u64(&b, 0), b_u64(&b, 0);
    expect_bytes_refused(&b, "not a GGUF file");
    b_put(&b, "G", 1);
    expect_bytes_refused(&b, "not a GGUF file");
    b_head(&b, 1, 0, 0);
    expect_bytes_refused(&b, "version 1");
    b_head(&b, 4, 0, 0);
    expect_bytes_refused(&b, "version 4");
    b_head(&b, 0x03000000u, 0, 0);
    expect_bytes_refused(&b, "big-endian");
    b_head(&b, 3, 0, UINT64_C(1) << 60);
    expect_bytes_refused(&b, "key-value pairs, more than");
    b_head(&b, 3, UINT64_MAX, 0);
    expect_bytes_refused(&b, "tensors, more than");
    b_head(&b, 3, 0, 1), b_u64(&b, UINT64_C(1) << 50), b_pad(&b, 1, 16);
    expect_bytes_refused(&b, "past the end of the file");
    b_head(&b, 3, 0, 1), b_str(&b, ""), b_u32(&b, GGUF_TYPE_UINT32), b_u32(&b, 1);
    expect_bytes_refused(&b, "is empty");
    b_head(&b, 3, 0, 1), b_u64(&b, 3), b_put(&b, "a\0b", 3), b_u32(&b, GGUF_TYPE_UINT8), b_put(&b, "x", 1);
    expect_bytes_refused(&b, "NUL byte");
    b_head(&b, 3, 0, 1), b_str(&b, "k"), b_u32(&b, 13), b_u32(&b, 0);
    expect_bytes_refused(&b, "does not define");
    b_head(&b, 3, 0, 1), b_str(&b, "k"), b_u32(&b, GGUF_TYPE_ARRAY), b_u32(&b, GGUF_TYPE_ARRAY), b_u64(&b, 1);
    expect_bytes_refused(&b, "array of arrays");
    b_head(&b, 3, 0, 1), b_str(&b, "k"), b_u32(&b, GGUF_TYPE_ARRAY), b_u32(&b, GGUF_TYPE_UINT32), b_u64(&b, UINT64_C(1) << 62);
    expect_bytes_refused(&b, "claims 4611686018427387904 values");
    b_head(&b, 3, 0, 1), b_str(&b, "k"), b_u32(&b, GGUF_TYPE_ARRAY), b_u32(&b, GGUF_TYPE_STRING), b_u64(&b, 1000);
    expect_bytes_refused(&b, "claims 1000 strings");
    b_head(&b, 3, 0, 1), b_str(&b, "k"), b_u32(&b, GGUF_TYPE_ARRAY), b_u32(&b, GGUF_TYPE_STRING), b_u64(&b, 2), b_str(&b, "x"),
        b_u64(&b, 99);
    expect_bytes_refused(&b, "past the end of the file");
    b_head(&b, 3, 0, 2), b_str(&b, "k"), b_u32(&b, GGUF_TYPE_UINT8), b_put(&b, "a", 1), b_str(&b, "k"), b_u32(&b, GGUF_TYPE_INT8),
        b_put(&b, "b", 1);
    expect_bytes_refused(&b, "key 'k' appears twice");
    b_head(&b, 3, 0, 1), b_str(&b, "general.alignment"), b_u32(&b, GGUF_TYPE_UINT32), b_u32(&b, 48);
    expect_bytes_refused(&b, "not a power of two");
    b_head(&b, 3, 0, 1), b_str(&b, "general.alignment"), b_u32(&b, GGUF_TYPE_UINT64), b_u64(&b, 32);
    expect_bytes_refused(&b, "must be a u32");
    b_head(&b, 3, 1, 0), b_tensor(&b, "0123456789012345678901234567890123456789012345678901234567890123", 1, v4, 0, 0);
    expect_bytes_refused(&b, "shorter than 64");
    b_head(&b, 3, 1, 0), b_str(&b, "t"), b_u32(&b, 5), b_pad(&b, 1, 40);
    expect_bytes_refused(&b, "at most 4");
    b_head(&b, 3, 1, 0), b_tensor(&b, "t", 1, neg, 0, 0);
    expect_bytes_refused(&b, "negative dimension");
    b_head(&b, 3, 1, 0), b_tensor(&b, "t", 2, big, 0, 0);
    expect_bytes_refused(&b, "more elements than");
    b_head(&b, 3, 1, 0), b_tensor(&b, "t", 1, v4, 4, 0);
    expect_bytes_refused(&b, "which is no ggml type");
    b_head(&b, 3, 1, 0), b_tensor(&b, "t", 2, m33, GGML_TYPE_Q8_0, 0);
    expect_bytes_refused(&b, "not a whole number of its 32-element blocks");
    b_head(&b, 3, 1, 0), b_tensor(&b, "t", 1, v4, 0, 8), b_pad(&b, 32, 64);
    expect_bytes_refused(&b, "not a multiple of the alignment");
    b_head(&b, 3, 1, 0), b_tensor(&b, "t", 1, v4, 0, 32), b_pad(&b, 32, 40);
    expect_bytes_refused(&b, "runs past the end");
    b_head(&b, 3, 1, 0), b_tensor(&b, "t", 1, v4, 0, 0);
    expect_bytes_refused(&b, "truncated: the data section");
    b_head(&b, 3, 2, 0), b_tensor(&b, "t", 1, v4, 0, 0), b_tensor(&b, "u", 1, v4, 0, 0), b_pad(&b, 32, 64);
    expect_bytes_refused(&b, "overlap");
    b_head(&b, 3, 2, 0), b_tensor(&b, "t", 1, v4, 0, 0), b_tensor(&b, "t", 1, v4, 0, 32), b_pad(&b, 32, 64);
    expect_bytes_refused(&b, "tensor 't' appears twice");
    /* and one that is fine: two tensors, aligned, the last one's padding cut off */
    b_head(&b, 3, 2, 1), b_str(&b, "general.alignment"), b_u32(&b, GGUF_TYPE_UINT32), b_u32(&b, 64),
        b_tensor(&b, "t", 1, v4, 0, 64), b_tensor(&b, "u", 1, v4, 0, 0), b_pad(&b, 64, 64 + 16);
    char path[600];
    tu_path(path, sizeof path, "fine.gguf");
    tu_write_file(path, b.p, b.n);
    free(b.p);
    gguf_file f;
    dt_error err;
    if (gguf_open(&f, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(f.alignment, 64);
    assert_int_equal(f.n_tensors, 2);
    assert_int_equal(gguf_find_tensor(&f, "t")->nbytes, 16);
    gguf_close(&f);
}

/* Every proper prefix of a file is refused (format, naming it), except those that only drop the
 * last tensor's padding, which llama.cpp's reader does not need either. */
static void test_truncated_everywhere(void **state) {
    (void)state;
    dt_config c;
    llama_config(&c, 1);
    c.hidden_size = 32, c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 16;
    c.intermediate_size = 32, c.num_hidden_layers = 1, c.vocab_size = 256;
    dt_model m;
    dt_error err;
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    dt_model_init_random(&m, 4);
    char path[600], cut[600];
    save_gguf(&m, "small.gguf", DT_F32, path, sizeof path);
    size_t n = 0;
    char *data = tu_read_file(path, &n);
    gguf_file f;
    if (gguf_open(&f, path, &err) != 0) fail_msg("%s", err.msg);
    size_t end = 0;
    for (int64_t i = 0; i < f.n_tensors; i++) {
        const size_t e = f.data_offset + f.tensors[i].offset + f.tensors[i].nbytes;
        if (e > end) end = e;
    }
    gguf_close(&f);
    tu_path(cut, sizeof cut, "cut.gguf");
    tu_write_file(cut, data, n);
    for (size_t len = n - 1; len + 1 > 0; len--) { /* shortened in place: no rewriting of the bytes */
        if (truncate(cut, (off_t)len) != 0) fail_msg("truncate %s: %s", cut, strerror(errno));
        dt_model back;
        memset(&err, 0, sizeof err);
        const int rc = dt_model_load(&back, cut, &err);
        if (len >= end) {
            if (rc != 0) fail_msg("prefix of %zu bytes (the data ends at %zu): %s", len, end, err.msg);
            dt_model_free(&back);
            continue;
        }
        if (rc == 0) fail_msg("a prefix of %zu of %zu bytes loaded", len, n);
        if (err.code != DT_ERR_FORMAT || strncmp(err.msg, cut, strlen(cut)) != 0)
            fail_msg("prefix of %zu bytes: code %d, %s", len, (int)err.code, err.msg);
    }
    free(data);
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- hostile files: models */

/* A copy of a GGUF file with edits, written with the library's writer. */
typedef struct {
    const char *drop_key;
    const char *str_key, *str_val;   /* a string key set (replaced or added) */
    const char *u32_key;             /* a u32 key set to u32 */
    uint32_t u32;
    const char *arr_key;             /* an integer array key set to arr_n (0: 2) copies of u32 (per-layer values) */
    int arr_n;
    const char *merges;              /* tokenizer.ggml.merges replaced by this one merge */
    const char *drop_tensor;
    const char *extra_tensor;        /* an F32 vector of hidden_size zeros added */
    const char *retype_tensor;       /* its type changed to retype (zeros of that type's size) */
    uint32_t retype;
    const char *nan_tensor;          /* its first F32 value made NaN */
    const char *bool_key;            /* a bool key set to bool_val */
    int bool_val;
    int score_set;                   /* tokenizer.ggml.scores[score_at] = score */
    int64_t score_at;
    float score;
    int scores_i32;                  /* tokenizer.ggml.scores as i32 (the values rounded) */
    int scores_tied;                 /* tokenizer.ggml.scores all -1000 (1, gguf-py's LlamaHfVocab), or rounded
                                        down to a multiple of 4 (2): distinct tokens of equal scores */
    int type_set;                    /* tokenizer.ggml.token_type[type_at] = type */
    int64_t type_at;
    int32_t type;
    const char *tok;                 /* tokenizer.ggml.tokens[tok_at] = tok */
    int64_t tok_at;
} edits;

typedef struct {
    const gguf_file *src;
    const gguf_tensor *from[256];
    size_t nbytes[256];
    const edits *e;
} rewrite_ctx;

static int emit_copy(void *ctx, uint64_t i, gguf_sink *s, dt_error *err) {
    (void)err;
    const rewrite_ctx *x = ctx;
    const gguf_tensor *t = x->from[i];
    uint8_t *buf = calloc(x->nbytes[i] ? x->nbytes[i] : 1, 1);
    assert_non_null(buf);
    if (t && t->nbytes == x->nbytes[i] && !(x->e->retype_tensor && !strcmp(t->name, x->e->retype_tensor)))
        memcpy(buf, t->data, t->nbytes);
    if (t && x->e->nan_tensor && !strcmp(t->name, x->e->nan_tensor)) {
        const float nan = NAN;
        memcpy(buf, &nan, 4);
    }
    gguf_sink_write(s, buf, x->nbytes[i]);
    free(buf);
    return 0;
}

static const char *one_merge(void *ctx, uint64_t i, size_t *len) {
    (void)i;
    *len = strlen(ctx);
    return ctx;
}

static const char *str_at(void *ctx, uint64_t i, size_t *len) {
    const gguf_str *v = ctx;
    *len = v[i].len;
    return v[i].p;
}

/* The tokenizer arrays of kv with one element changed (or the scores as integers). */
static void rewrite_array(gguf_writer *w, const gguf_file *f, const gguf_kv *kv, const char *key, const edits *e) {
    dt_error err;
    if (!strcmp(key, "tokenizer.ggml.tokens")) {
        gguf_str *v;
        if (gguf_get_str_array(f, kv, &v, &err) != 0) fail_msg("%s", err.msg);
        v[e->tok_at] = (gguf_str){e->tok, strlen(e->tok)};
        gguf_w_str_array(w, key, kv->n, str_at, v);
        free(v);
        return;
    }
    float *fv = malloc(kv->n * sizeof *fv);
    int32_t *iv = malloc(kv->n * sizeof *iv);
    assert_true(fv && iv);
    for (uint64_t i = 0; i < kv->n; i++) {
        fv[i] = kv->elem == GGUF_TYPE_FLOAT32 ? gguf_array_f32(kv, i) : (float)gguf_array_int(kv, i);
        iv[i] = (int32_t)fv[i];
    }
    if (!strcmp(key, "tokenizer.ggml.token_type")) {
        iv[e->type_at] = e->type;
        gguf_w_i32_array(w, key, iv, kv->n);
    } else if (e->scores_i32)
        gguf_w_i32_array(w, key, iv, kv->n);
    else if (e->scores_tied) {
        for (uint64_t i = 0; i < kv->n; i++) fv[i] = e->scores_tied == 1 ? -1000.0f : 4.0f * floorf(fv[i] / 4.0f);
        gguf_w_f32_array(w, key, fv, kv->n);
    } else {
        fv[e->score_at] = e->score;
        gguf_w_f32_array(w, key, fv, kv->n);
    }
    free(fv);
    free(iv);
}

static void rewrite(const char *in, const char *out, const edits *e) {
    gguf_file f;
    dt_error err;
    if (gguf_open(&f, in, &err) != 0) fail_msg("%s", err.msg);
    gguf_writer w;
    gguf_writer_init(&w, 32);
    for (int64_t i = 0; i < f.n_kv; i++) {
        const gguf_kv *kv = &f.kv[i];
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.p);
        if (!strcmp(key, "general.alignment") || (e->drop_key && !strcmp(key, e->drop_key)) ||
            (e->str_key && !strcmp(key, e->str_key)) || (e->u32_key && !strcmp(key, e->u32_key)) ||
            (e->arr_key && !strcmp(key, e->arr_key)) || (e->merges && !strcmp(key, "tokenizer.ggml.merges")) ||
            (e->bool_key && !strcmp(key, e->bool_key)))
            continue;
        if ((e->tok && !strcmp(key, "tokenizer.ggml.tokens")) ||
            (e->type_set && !strcmp(key, "tokenizer.ggml.token_type")) ||
            ((e->score_set || e->scores_i32 || e->scores_tied) && !strcmp(key, "tokenizer.ggml.scores")))
            rewrite_array(&w, &f, kv, key, e);
        else
            gguf_w_kv_copy(&w, kv);
    }
    if (e->bool_key) gguf_w_bool(&w, e->bool_key, e->bool_val);
    if (e->str_key) gguf_w_str(&w, e->str_key, e->str_val, strlen(e->str_val));
    if (e->u32_key) gguf_w_u32(&w, e->u32_key, e->u32);
    if (e->arr_key) {
        const int32_t v[3] = {(int32_t)e->u32, (int32_t)e->u32, (int32_t)e->u32};
        gguf_w_i32_array(&w, e->arr_key, v, e->arr_n ? e->arr_n : 2);
    }
    if (e->merges) gguf_w_str_array(&w, "tokenizer.ggml.merges", 1, one_merge, (void *)e->merges);
    rewrite_ctx x = {.src = &f, .e = e};
    int n = 0;
    for (int64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        if (e->drop_tensor && !strcmp(t->name, e->drop_tensor)) continue;
        const uint32_t type = e->retype_tensor && !strcmp(t->name, e->retype_tensor) ? e->retype : t->type;
        assert_int_equal(gguf_w_tensor(&w, t->name, (int)t->n_dims, t->ne, type), 0);
        int64_t block;
        size_t bs;
        ggml_type_size(type, &block, &bs);
        x.from[n] = t;
        x.nbytes[n++] = (size_t)(t->nelem / (uint64_t)block) * bs;
    }
    if (e->extra_tensor) {
        const gguf_tensor *norm = gguf_find_tensor(&f, "output_norm.weight");
        assert_int_equal(gguf_w_tensor(&w, e->extra_tensor, 1, norm->ne, GGML_TYPE_F32), 0);
        x.from[n] = NULL;
        x.nbytes[n++] = norm->nbytes;
    }
    if (gguf_writer_write(&w, out, emit_copy, &x, &err) != 0) fail_msg("%s", err.msg);
    gguf_writer_free(&w);
    gguf_close(&f);
}

static void expect_load_refused(const char *base, const edits *e, dt_errcode code, const char *problem) {
    char path[600];
    tu_path(path, sizeof path, "edited.gguf");
    rewrite(base, path, e);
    dt_model m;
    dt_error err = {0};
    if (dt_model_load(&m, path, &err) == 0) fail_msg("loaded, where '%s' was expected", problem);
    if (err.code != code) fail_msg("code %d (expected %d): %s", (int)err.code, (int)code, err.msg);
    if (strncmp(err.msg, path, strlen(path)) != 0) fail_msg("message does not start with the path: %s", err.msg);
    if (!strstr(err.msg, problem)) fail_msg("expected '%s' in: %s", problem, err.msg);
}

static void test_hostile_models(void **state) {
    (void)state;
    dt_model m;
    char base[600];
    make_llama(&m, 0, 12);
    save_gguf(&m, "base.gguf", DT_F32, base, sizeof base);
    const dt_errcode F = DT_ERR_FORMAT, U = DT_ERR_UNSUPPORTED;
    expect_load_refused(base, &(edits){.drop_key = "general.architecture"}, F, "no general.architecture");
    expect_load_refused(base, &(edits){.str_key = "general.architecture", .str_val = "diffllama"}, U,
                        "difftrans reads llama models");
    expect_load_refused(base, &(edits){.str_key = "general.architecture", .str_val = "qwen2"}, U, "'qwen2'");
    expect_load_refused(base, &(edits){.drop_key = "llama.attention.layer_norm_rms_epsilon"}, F,
                        "no llama.attention.layer_norm_rms_epsilon");
    expect_load_refused(base, &(edits){.str_key = "llama.block_count", .str_val = "2"}, F, "an integer was expected");
    expect_load_refused(base, &(edits){.u32_key = "llama.block_count", .u32 = 5}, F,
                        "missing tensor 'blk.2.attn_norm.weight'");
    expect_load_refused(base, &(edits){.u32_key = "llama.feed_forward_length", .u32 = 128}, F, "has shape");
    expect_load_refused(base, &(edits){.u32_key = "llama.embedding_length", .u32 = 1u << 30}, F,
                        "token_embd.weight has shape");
    expect_load_refused(base, &(edits){.u32_key = "llama.attention.head_count", .u32 = 8}, F, "attn_q.weight' has shape");
    expect_load_refused(base, &(edits){.u32_key = "llama.vocab_size", .u32 = 300}, F, "llama.vocab_size 300");
    expect_load_refused(base, &(edits){.u32_key = "llama.context_length", .u32 = 0}, F, "max_position_embeddings");
    expect_load_refused(base, &(edits){.u32_key = "llama.expert_count", .u32 = 8}, U, "mixture of experts");
    expect_load_refused(base, &(edits){.u32_key = "llama.rope.dimension_count", .u32 = 8}, U, "partial rotary");
    expect_load_refused(base, &(edits){.arr_key = "llama.feed_forward_length", .u32 = 7}, F, "has shape");
    /* a per-layer array of another length than block_count (2 here) */
    expect_load_refused(base, &(edits){.arr_key = "llama.feed_forward_length", .u32 = 96, .arr_n = 1}, F,
                        "llama.feed_forward_length holds 1 values for 2 layers");
    expect_load_refused(base, &(edits){.arr_key = "llama.feed_forward_length", .u32 = 96, .arr_n = 3}, F,
                        "llama.feed_forward_length holds 3 values for 2 layers");
    expect_load_refused(base, &(edits){.str_key = "llama.rope.scaling.type", .str_val = "yarn"}, U, "'yarn'");
    expect_load_refused(base, &(edits){.u32_key = "tokenizer.ggml.bos_token_id", .u32 = 9999}, F,
                        "tokenizer.ggml.bos_token_id = 9999 is outside");
    /* a byte-level BPE relabelled SentencePiece: no scores */
    expect_load_refused(base, &(edits){.str_key = "tokenizer.ggml.model", .str_val = "llama"}, U,
                        "no tokenizer.ggml.scores");
    expect_load_refused(base, &(edits){.drop_key = "tokenizer.ggml.tokens"}, F, "no tokenizer.ggml.tokens");
    expect_load_refused(base, &(edits){.drop_key = "tokenizer.ggml.merges"}, F, "no tokenizer.ggml.merges");
    expect_load_refused(base, &(edits){.merges = "x y"}, F, "merges[0] \"x y\" is not two tokens");
    expect_load_refused(base, &(edits){.str_key = "tokenizer.ggml.pre", .str_val = "qwen2", .merges = "x y"}, U,
                        "tokenizer.ggml.pre 'qwen2'");
    expect_load_refused(base, &(edits){.drop_tensor = "blk.1.ffn_up.weight"}, F, "missing tensor 'blk.1.ffn_up.weight'");
    expect_load_refused(base, &(edits){.drop_tensor = "token_embd.weight"}, F, "missing tensor 'token_embd.weight'");
    expect_load_refused(base, &(edits){.extra_tensor = "blk.0.attn_q.bias"}, U, "'blk.0.attn_q.bias' has no place");
    expect_load_refused(base, &(edits){.extra_tensor = "rope_freqs.weight"}, U, "per-frequency RoPE factors");
    expect_load_refused(base, &(edits){.retype_tensor = "blk.0.ffn_down.weight", .retype = 3}, U, "is Q4_1");
    expect_load_refused(base, &(edits){.retype_tensor = "blk.1.attn_v.weight", .retype = GGML_TYPE_Q8_0}, U,
                        "the same way");
    expect_load_refused(base, &(edits){.nan_tensor = "blk.0.attn_norm.weight"}, F, "non-finite value");
    /* Q8_0 blocks holding −128, which the integer kernels cannot take */
    dt_model_free(&m);
}

/* RoPE scaling: linear as llama.rope.scaling.*, llama3 as rope_freqs (what llama.cpp multiplies
 * by) plus the parameters that made it, read back into the same config. */
static void test_rope_scaling(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        dt_config c;
        llama_config(&c, 0);
        dt_rope_scaling *r = &c.rope_scaling;
        if (k == 0) {
            r->type = DT_ROPE_LINEAR;
            r->factor = 2.5;
        } else {
            r->type = DT_ROPE_LLAMA3;
            r->factor = 8;
            r->low_freq_factor = 1.1; /* not a float: the file keeps the config's doubles */
            r->high_freq_factor = 4;
            r->original_max_position_embeddings = 32; /* short enough that every band is in use */
        }
        dt_model m, back;
        dt_error err;
        assert_int_equal(dt_model_create(&m, &c, &err), 0);
        dt_model_init_random(&m, 50 + k);
        for (size_t i = 0; i < m.n_params; i++) m.params[i] *= 6.0f;
        char path[600];
        save_gguf(&m, k ? "llama3.gguf" : "linear.gguf", DT_F32, path, sizeof path);
        gguf_file f;
        assert_int_equal(gguf_open(&f, path, &err), 0);
        const gguf_tensor *ff = gguf_find_tensor(&f, "rope_freqs.weight");
        if (k == 0) {
            assert_null(ff);
            expect_str(&f, "llama.rope.scaling.type", "linear");
        } else {
            /* llama.cpp divides each frequency by its factor: 1 at high frequencies, 8 at low ones */
            assert_non_null(ff);
            assert_int_equal(ff->ne[0], c.head_dim / 2);
            float first, last;
            memcpy(&first, ff->data, 4);
            memcpy(&last, ff->data + ff->nbytes - 4, 4);
            assert_true(first == 1.0f && fabsf(last - 8.0f) < 1e-4f);
        }
        gguf_close(&f);
        load_gguf(&back, path);
        expect_same_config(&m.cfg, &back.cfg);
        assert_true(back.cfg.rope_scaling.factor == r->factor);
        if (k) {
            assert_int_equal(back.cfg.rope_scaling.original_max_position_embeddings, 32);
            assert_true(back.cfg.rope_scaling.low_freq_factor == 1.1);
        }
        expect_equal_logits(&m, &back, 0.0f, k ? "llama3 RoPE" : "linear RoPE");
        dt_model_free(&back);
        if (k == 1) {
            /* without the parameters (a file from llama.cpp's converter) these factors are no Llama 3.x
             * scaling difftrans recognises: refused */
            expect_load_refused(path, &(edits){.drop_key = "difftrans.rope_scaling.type"}, DT_ERR_UNSUPPORTED,
                                "not Llama 3's scaling");
            /* Llama 3.1's own parameters are recognised from the factors alone */
            r->original_max_position_embeddings = 8192;
            r->low_freq_factor = 1;
            dt_model m31;
            assert_int_equal(dt_model_create(&m31, &c, &err), 0);
            memcpy(m31.params, m.params, m.n_params * sizeof(float));
            save_gguf(&m31, "llama31.gguf", DT_F32, path, sizeof path);
            char plain[600];
            tu_path(plain, sizeof plain, "llama31_plain.gguf");
            rewrite(path, plain, &(edits){.drop_key = "difftrans.rope_scaling.type"});
            load_gguf(&back, plain);
            assert_int_equal(back.cfg.rope_scaling.type, DT_ROPE_LLAMA3);
            assert_int_equal(back.cfg.rope_scaling.original_max_position_embeddings, 8192);
            expect_equal_logits(&m31, &back, 0.0f, "Llama 3.1 RoPE from rope_freqs alone");
            dt_model_free(&back);
            dt_model_free(&m31);
        }
        dt_model_free(&m);
    }
}

/* ---------------------------------------------------------------- files as llama.cpp writes them */

static void expect_loads_same(const char *base_path, const dt_model *m, const edits *e, const char *what) {
    char path[600];
    tu_path(path, sizeof path, "variant.gguf");
    rewrite(base_path, path, e);
    dt_model back;
    load_gguf(&back, path);
    expect_equal_logits(m, &back, 0.0f, what);
    dt_model_free(&back);
}

static void test_llama_cpp_variants(void **state) {
    (void)state;
    dt_model m;
    char base[600];
    make_llama(&m, 0, 14);
    save_gguf(&m, "variants.gguf", DT_F32, base, sizeof base);
    /* keys llama.cpp's converter leaves out when the defaults hold (head_dim = hidden / heads) */
    expect_loads_same(base, &m, &(edits){.drop_key = "llama.attention.key_length"}, "no key_length");
    expect_loads_same(base, &m, &(edits){.drop_key = "llama.rope.dimension_count"}, "no rope.dimension_count");
    expect_loads_same(base, &m, &(edits){.drop_key = "llama.vocab_size"}, "no vocab_size");
    expect_loads_same(base, &m, &(edits){.drop_key = "tokenizer.ggml.token_type"}, "no token_type");
    /* per-layer sizes as an array (what some converters write) */
    expect_loads_same(base, &m, &(edits){.arr_key = "llama.feed_forward_length", .u32 = 96}, "ffn array");
    /* F32 norms written as F16 / BF16 are read too (here the values are not exactly halves: not compared) */
    /* a GGUF under another name: recognised by its magic */
    char plain[600];
    tu_path(plain, sizeof plain, "model.bin");
    size_t n = 0;
    char *data = tu_read_file(base, &n);
    tu_write_file(plain, data, n);
    free(data);
    dt_model back;
    load_gguf(&back, plain);
    expect_equal_logits(&m, &back, 0.0f, "by magic");
    dt_model_free(&back);
    /* a name ending in .gguf that is not one */
    tu_path(plain, sizeof plain, "not.gguf");
    tu_write_file(plain, "{\"model_type\": \"llama\"}", 23);
    dt_error err;
    assert_int_equal(dt_model_load(&back, plain, &err), -1);
    assert_int_equal(err.code, DT_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "not a GGUF file"));
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- special ids */

/* What a GGUF file read back becomes: a checkpoint that loads, with the special ids it had. */
static void expect_checkpoint_loads(const dt_model *m, const char *name) {
    char dir[600];
    tu_path(dir, sizeof dir, name);
    dt_error err;
    if (dt_model_save(m, dir, 0, &err) != 0) fail_msg("%s", err.msg);
    dt_model again;
    if (dt_model_load(&again, dir, &err) != 0) fail_msg("%s: the checkpoint does not load: %s", name, err.msg);
    assert_int_equal(again.cfg.special.bos_token_id, m->cfg.special.bos_token_id);
    assert_int_equal(again.cfg.special.pad_token_id, m->cfg.special.pad_token_id);
    assert_int_equal(again.cfg.special.n_eos, m->cfg.special.n_eos);
    dt_model_free(&again);
}

/* A model without EOS: llama.cpp would end generation at its default id 11 (',' in GPT-2's BPE), so
 * an id the model hardly generates stands in: a hole of the embedding, else the byte 0xFF (the token
 * "\u00ff" of a byte-level BPE, id 255 of a byte-level model), else the pad token, else BOS. The file
 * says which id stands in, and reading it back gives a model without EOS again, whose checkpoint
 * loads (the hole is no token of its tokenizer.json). */
static void expect_stand_in(dt_model *m, int want, const char *what) {
    char path[600];
    save_gguf(m, "no_eos.gguf", DT_F32, path, sizeof path);
    gguf_file f;
    dt_error err;
    assert_int_equal(gguf_open(&f, path, &err), 0);
    const int64_t eos = kv_int(&f, "tokenizer.ggml.eos_token_id");
    if (eos != want) fail_msg("%s: eos_token_id %lld, not %d", what, (long long)eos, want);
    assert_int_equal(kv_int(&f, "difftrans.eos_stand_in"), eos);
    gguf_close(&f);
    dt_model back;
    load_gguf(&back, path);
    assert_int_equal(back.cfg.special.n_eos, 0);
    assert_int_equal(back.cfg.special.bos_token_id, m->cfg.special.bos_token_id);
    assert_int_equal(back.cfg.special.pad_token_id, m->cfg.special.pad_token_id);
    expect_checkpoint_loads(&back, "no_eos_ckpt");
    dt_model_free(&back);
}

/* A byte-level BPE without the token of the byte 0xFF: bytes 0..254 as ids 0..254, then "<s>" (and
 * "<pad>" when pad), no merges. */
static void tokenizer_without_ff(const char *dir, int pad) {
    char *json = malloc(16384), ch[4], path[700];
    assert_non_null(json);
    size_t n = (size_t)sprintf(json, "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":255,\"content\":\"<s>\","
                                     "\"special\":true}%s],\"normalizer\":null,\"pre_tokenizer\":{\"type\":"
                                     "\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},\"post_processor\":"
                                     "null,\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                                     "\"vocab\":{",
                               pad ? ",{\"id\":256,\"content\":\"<pad>\",\"special\":true}" : "");
    for (int b = 0; b < 255; b++) {
        tu_bytelevel_char(b, ch);
        n += (size_t)sprintf(json + n, "%s\"%s%s\":%d", b ? "," : "", *ch == '"' || *ch == '\\' ? "\\" : "", ch, b);
    }
    n += (size_t)sprintf(json + n, "},\"merges\":[]}}");
    assert_int_equal(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    tu_write_file(path, json, n);
    free(json);
}

static void test_no_eos(void **state) {
    (void)state;
    char dir[600];
    dt_error err;
    for (int pad = 1; pad >= 0; pad--) {
        tu_path(dir, sizeof dir, pad ? "tok_no_eos" : "tok_bos_only");
        train_tokenizer(dir, "llama3", pad ? 2 : 3);
        for (int holes = 0; holes < 2; holes++) {
            dt_config c;
            llama_config(&c, 0);
            c.vocab_size = holes ? 320 : pad ? 300 : 299;
            dt_model m, back;
            assert_int_equal(dt_model_create(&m, &c, &err), 0);
            if (dt_model_set_tokenizer(&m, dir, &err) != 0) fail_msg("%s", err.msg);
            assert_int_equal(m.cfg.special.n_eos, 0);
            const int bos = m.cfg.special.bos_token_id, pad_id = m.cfg.special.pad_token_id;
            assert_true(bos >= 256 && bos < 300);
            assert_true(pad ? pad_id > bos && pad_id < 300 : pad_id == -1);
            const int ff = dt_tok_token_to_id(dt_model_tok(&m), "\xc3\xbf", 2);
            assert_true(ff >= 0 && ff < 256);
            expect_stand_in(&m, holes ? (pad ? 300 : 299) : ff, "a trained BPE");
            if (holes && pad) {
                /* a file without the key (llama.cpp's, or an older export) naming unused rows as its
                 * special ids: not kept, so that its checkpoint loads */
                char path[600], edited[600];
                save_gguf(&m, "no_eos.gguf", DT_F32, path, sizeof path);
                tu_path(edited, sizeof edited, "unused_specials.gguf");
                rewrite(path, edited, &(edits){.drop_key = "difftrans.eos_stand_in"});
                load_gguf(&back, edited);
                assert_int_equal(back.cfg.special.n_eos, 0);
                expect_checkpoint_loads(&back, "unused_eos_ckpt");
                dt_model_free(&back);
                rewrite(path, edited, &(edits){.u32_key = "tokenizer.ggml.bos_token_id", .u32 = 310});
                load_gguf(&back, edited);
                assert_int_equal(back.cfg.special.bos_token_id, -1);
                assert_int_equal(back.cfg.special.n_eos, 0);
                expect_checkpoint_loads(&back, "unused_bos_ckpt");
                dt_model_free(&back);
            }
            dt_model_free(&m);
        }
        /* no token of the byte 0xFF: the pad token, else BOS */
        tu_path(dir, sizeof dir, pad ? "tok_no_ff_pad" : "tok_no_ff");
        tokenizer_without_ff(dir, pad);
        dt_config c;
        llama_config(&c, 0);
        c.vocab_size = 256 + pad;
        dt_model m;
        assert_int_equal(dt_model_create(&m, &c, &err), 0);
        if (dt_model_set_tokenizer(&m, dir, &err) != 0) fail_msg("%s", err.msg);
        m.cfg.special.bos_token_id = 255;
        if (pad) m.cfg.special.pad_token_id = 256;
        expect_stand_in(&m, pad ? 256 : 255, pad ? "no 0xFF: the pad token" : "no 0xFF, no pad: BOS");
        dt_model_free(&m);
    }
    /* a byte-level model: the byte 0xFF (id 11 would be the byte 0x0B, a vertical tab) */
    dt_model m;
    make_llama(&m, 0, 4);
    expect_stand_in(&m, 255, "a byte-level model");
    dt_model_free(&m);
}

/* llama.cpp ends generation at tokens of known end-of-turn texts whatever the eos / eot / eom keys
 * say (Llama 3's "<|eot_id|>" beside its EOS "<|end_of_text|>") and whatever their type, and at
 * fill-in-the-middle pad tokens ("[PAD]" among them), and makes these and the fill-in-the-middle
 * prefix / suffix / middle tokens control tokens: reading a file, difftrans does both too (as
 * tests/llama_cpp/run.sh checks against llama.cpp itself). Writing a file, stop ids past the three
 * keys are kept when they are such tokens, else refused. */
static void test_eog_by_text(void **state) {
    (void)state;
    char dir[600], json_path[700], path[600];
    tu_path(dir, sizeof dir, "tok_eot");
    train_tokenizer(dir, "llama3", 0);
    snprintf(json_path, sizeof json_path, "%s/tokenizer.json", dir);
    size_t n = 0;
    char *json = tu_read_file(json_path, &n);
    char *at = strstr(json, "],\"normalizer\"");
    assert_non_null(at);
    const char *more = ",{\"id\":300,\"content\":\"<|eot_id|>\",\"special\":true},"
                       "{\"id\":301,\"content\":\"<|im_end|>\",\"special\":false},"
                       "{\"id\":302,\"content\":\"[PAD]\",\"special\":true},"
                       "{\"id\":303,\"content\":\"<|im_start|>\",\"special\":true},"
                       "{\"id\":304,\"content\":\"<|fim_prefix|>\",\"special\":false},"
                       "{\"id\":305,\"content\":\"<MID>\",\"special\":false},"
                       "{\"id\":306,\"content\":\"<FIM>\",\"special\":false}";
    char *edited = malloc(n + strlen(more) + 1);
    assert_non_null(edited);
    sprintf(edited, "%.*s%s%s", (int)(at - json), json, more, at);
    tu_write_file(json_path, edited, strlen(edited));
    free(json);
    free(edited);
    dt_config c;
    llama_config(&c, 0);
    c.vocab_size = 307;
    dt_model m, back;
    dt_error err;
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    if (dt_model_set_tokenizer(&m, dir, &err) != 0) fail_msg("%s", err.msg);
    const int eos = m.cfg.special.eos_token_id[0];
    assert_int_equal(m.cfg.special.n_eos, 1);
    assert_int_equal(dt_tok_token_to_id(dt_model_tok(&m), "<|end_of_text|>", 15), eos);
    save_gguf(&m, "eot.gguf", DT_F32, path, sizeof path);
    load_gguf(&back, path);
    /* "<|im_end|>" though no control token, "[PAD]" as the fill-in-the-middle pad; not "<|im_start|>" */
    const int stops[] = {eos, 300, 301, 302};
    assert_int_equal(back.cfg.special.n_eos, 4);
    assert_memory_equal(back.cfg.special.eos_token_id, stops, sizeof stops);
    /* the fill-in-the-middle prefix and middle end nothing, but are control tokens as in llama.cpp:
     * special (as "<|im_end|>" is); a user-defined token of another text stays what it was */
    const dt_tok *tok = dt_model_tok(&back);
    assert_true(dt_tok_is_special(tok, 301) && dt_tok_is_special(tok, 304) && dt_tok_is_special(tok, 305));
    assert_false(dt_tok_is_special(tok, 306));
    expect_checkpoint_loads(&back, "eot_ckpt");
    dt_model_free(&back);
    /* more stop ids than the three keys: those llama.cpp finds by their text need none */
    const int four[] = {eos, 300, 5, 6};
    memcpy(m.cfg.special.eos_token_id, four, sizeof four);
    m.cfg.special.n_eos = 4;
    save_gguf(&m, "eot4.gguf", DT_F32, path, sizeof path);
    gguf_file f;
    assert_int_equal(gguf_open(&f, path, &err), 0);
    assert_int_equal(kv_int(&f, "tokenizer.ggml.eos_token_id"), eos);
    assert_int_equal(kv_int(&f, "tokenizer.ggml.eot_token_id"), 5);
    assert_int_equal(kv_int(&f, "tokenizer.ggml.eom_token_id"), 6);
    gguf_close(&f);
    load_gguf(&back, path);
    const int want[] = {eos, 5, 6, 300, 301, 302};
    assert_int_equal(back.cfg.special.n_eos, 6);
    assert_memory_equal(back.cfg.special.eos_token_id, want, sizeof want);
    dt_model_free(&back);
    /* the others do not fit: refused, naming them ("<|im_start|>" ends nothing in llama.cpp) */
    const int six[] = {eos, 301, 302, 5, 303, 7};
    memcpy(m.cfg.special.eos_token_id, six, sizeof six);
    m.cfg.special.n_eos = 6;
    expect_save_refused(&m, DT_F32, DT_ERR_UNSUPPORTED, "eos_token_id holds 6 ids");
    expect_save_refused(&m, DT_F32, DT_ERR_UNSUPPORTED, "id 7 would not stop it");
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- SentencePiece vocabularies */

/* llama.cpp's SentencePiece tokenizer (llama-vocab.cpp, llm_tokenizer_spm and its caller) on the
 * vocabulary of a GGUF file, written here from that description as the reference difftrans's BPE
 * is compared with: special tokens (control, user-defined, unknown) found in the raw text (the
 * longest at the leftmost place; llama.cpp takes them longest first, the same on these texts);
 * each other part with a space before it (add_space_prefix: the start and the text after a
 * special token), spaces as "▁", its characters joined two at a time, the pair making the token
 * of the best score first (the leftmost among equals); a piece that ends as no token given as
 * its bytes' <0xNN> tokens; BOS and EOS around when asked. `negate`: the scores in reverse order
 * (what a wrong conversion would give). A token of text "<|im_end|>" is special whatever its type
 * (llama.cpp makes the tokens of its end-of-turn texts control tokens). */
typedef struct {
    gguf_file f;
    gguf_str *tok;
    int64_t n;
    const gguf_kv *scores, *types;
    int add_space_prefix, add_bos, add_eos, bos, eos, negate;
} spm_ref;

static void spm_ref_open(spm_ref *r, const char *path) {
    dt_error err;
    memset(r, 0, sizeof *r);
    if (gguf_open(&r->f, path, &err) != 0) fail_msg("%s", err.msg);
    expect_str(&r->f, "tokenizer.ggml.model", "llama");
    const gguf_kv *tk = gguf_find_kv(&r->f, "tokenizer.ggml.tokens");
    assert_non_null(tk);
    assert_int_equal(gguf_get_str_array(&r->f, tk, &r->tok, &err), 0);
    r->n = (int64_t)tk->n;
    r->scores = gguf_find_kv(&r->f, "tokenizer.ggml.scores");
    r->types = gguf_find_kv(&r->f, "tokenizer.ggml.token_type");
    assert_true(r->scores && r->scores->elem == GGUF_TYPE_FLOAT32 && r->scores->n == tk->n);
    assert_true(r->types && r->types->n == tk->n);
    r->add_space_prefix = r->add_bos = 1;
    gguf_get_bool(&r->f, "tokenizer.ggml.add_space_prefix", &r->add_space_prefix, &err);
    gguf_get_bool(&r->f, "tokenizer.ggml.add_bos_token", &r->add_bos, &err);
    gguf_get_bool(&r->f, "tokenizer.ggml.add_eos_token", &r->add_eos, &err);
    /* llama.cpp's default BOS where the file names none */
    r->bos = gguf_find_kv(&r->f, "tokenizer.ggml.bos_token_id") ? (int)kv_int(&r->f, "tokenizer.ggml.bos_token_id") : 1;
    r->eos = (int)kv_int(&r->f, "tokenizer.ggml.eos_token_id");
}

static void spm_ref_close(spm_ref *r) {
    free(r->tok);
    gguf_close(&r->f);
}

static int64_t spm_ref_find(const spm_ref *r, const char *s, size_t len) {
    for (int64_t i = 0; i < r->n; i++)
        if (r->tok[i].len == len && !memcmp(r->tok[i].p, s, len)) return i;
    return -1;
}

static float spm_ref_score(const spm_ref *r, int64_t id) {
    const float v = gguf_array_f32(r->scores, (uint64_t)id);
    return r->negate ? -v : v;
}

static void ids_push(int **ids, size_t *n, int id) {
    *ids = realloc(*ids, (*n + 1) * sizeof **ids);
    assert_non_null(*ids);
    (*ids)[(*n)++] = id;
}

static int64_t ref_find(const void *r, const char *s, size_t len) { return spm_ref_find(r, s, len); }

static float ref_score(const void *r, int64_t id) { return spm_ref_score(r, id); }

typedef struct {
    const spm_ref *r;
    int **ids;
    size_t *n_ids;
} ids_out;

/* A piece's token, or its bytes' <0xNN> tokens when it is none */
static void push_piece(void *out, int64_t id, const char *p, size_t len) {
    ids_out *o = out;
    if (id >= 0) ids_push(o->ids, o->n_ids, (int)id);
    for (size_t b = 0; id < 0 && b < len; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned char)p[b]);
        const int64_t byte = spm_ref_find(o->r, name, 6);
        assert_true(byte >= 0);
        ids_push(o->ids, o->n_ids, (int)byte);
    }
}

/* One part of the text between special tokens. */
static void spm_ref_part(const spm_ref *r, const char *text, size_t len, int **ids, size_t *n_ids) {
    char *s = malloc(3 * len + 4);
    size_t n = 0;
    assert_non_null(s);
    for (size_t i = 0; i < len + (size_t)r->add_space_prefix; i++) {
        const char c = i < (size_t)r->add_space_prefix ? ' ' : text[i - (size_t)r->add_space_prefix];
        if (c == ' ') memcpy(s + n, "\xe2\x96\x81", 3), n += 3;
        else s[n++] = c;
    }
    const spm_ref_vocab rv = {r, ref_find, ref_score};
    ids_out o = {r, ids, n_ids};
    assert_int_equal(spm_ref_pieces(&rv, s, n, push_piece, &o), 0);
    free(s);
}

static void spm_ref_encode(const spm_ref *r, const char *text, int add_special, int **ids, size_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    if (add_special && r->add_bos) ids_push(ids, n_ids, r->bos);
    const size_t len = strlen(text);
    size_t from = 0;
    for (size_t i = 0; i <= len; i++) {
        int64_t hit = -1;
        for (int64_t t = 0; i < len && t < r->n; t++) {
            const int64_t type = gguf_array_int(r->types, (uint64_t)t);
            const int control = r->tok[t].len == 10 && !memcmp(r->tok[t].p, "<|im_end|>", 10);
            if ((type == 2 || type == 3 || type == 4 || control) && r->tok[t].len <= len - i &&
                !memcmp(text + i, r->tok[t].p, r->tok[t].len) && (hit < 0 || r->tok[t].len > r->tok[hit].len))
                hit = t;
        }
        if (hit < 0 && i < len) continue;
        if (i > from) spm_ref_part(r, text + from, i - from, ids, n_ids);
        if (hit >= 0) ids_push(ids, n_ids, (int)hit);
        from = i + (hit >= 0 ? r->tok[hit].len : 0);
        if (hit >= 0) i = from - 1;
    }
    if (add_special && r->add_eos) ids_push(ids, n_ids, r->eos);
}

/* What the comparisons encode: accents, CJK, emoji (bytes: the vocabulary has neither), runs of
 * spaces and newlines, a tab, leading spaces, the special tokens' texts. */
static const char *const SPM_TEXTS[] = {
    "The tokenizer, the token and the tokens: caf\xc3\xa9, na\xc3\xafve, cr\xc3\xa8me br\xc3\xbbl\xc3\xa9" "e.\n\n"
    "  Two  spaces,   three;\tand a tab.\n\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82\xf0\x9f\x9a\x80 end  \n"
    "<s>inside</s> and <unk> x</s>\n   leading spaces on a line\n",
    "   three leading spaces",
    "<s> after a special token",
    "a reply<|im_end|>\nthe next",
    "the",
    "",
};
#define N_SPM_TEXTS ((int)(sizeof SPM_TEXTS / sizeof SPM_TEXTS[0]))

/* difftrans's ids on the texts (with and without the special tokens) are llama.cpp's SentencePiece
 * ids on the file; with the scores reversed they are not (the comparison sees a wrong order), unless
 * all_tied (reversed, they tie as before). */
static void expect_spm_agrees_tied(const dt_model *m, const char *gguf_path, int all_tied) {
    spm_ref r;
    spm_ref_open(&r, gguf_path);
    for (int negate = 0; negate < 2 - all_tied; negate++) {
        r.negate = negate;
        int differ = 0;
        for (int k = 0; k < N_SPM_TEXTS; k++)
            for (int add_special = 0; add_special < 2; add_special++) {
                int *a, *b;
                size_t na, nb;
                dt_error err;
                if (dt_model_encode(m, SPM_TEXTS[k], strlen(SPM_TEXTS[k]), add_special, &a, &na, &err) != 0)
                    fail_msg("%s", err.msg);
                spm_ref_encode(&r, SPM_TEXTS[k], add_special, &b, &nb);
                const int same = na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
                if (!negate && !same) {
                    char msg[4096];
                    size_t at = (size_t)snprintf(msg, sizeof msg, "text %d (add_special %d): difftrans", k,
                                                 add_special);
                    for (size_t i = 0; i < na && at < 2000; i++)
                        at += (size_t)snprintf(msg + at, sizeof msg - at, " %d", a[i]);
                    at += (size_t)snprintf(msg + at, sizeof msg - at, "; llama.cpp's SentencePiece");
                    for (size_t i = 0; i < nb && at < 4000; i++)
                        at += (size_t)snprintf(msg + at, sizeof msg - at, " %d", b[i]);
                    fail_msg("%s", msg);
                }
                if (k == 0 && !negate) assert_true(na > 20 && 4 * na < 3 * strlen(SPM_TEXTS[0])); /* merges happened */
                differ += !same;
                free(a);
                free(b);
            }
        /* the comparison sees a wrong order of the scores */
        if (negate) assert_true(differ > 0);
    }
    spm_ref_close(&r);
}

static void expect_spm_agrees(const dt_model *m, const char *gguf_path) { expect_spm_agrees_tied(m, gguf_path, 0); }

/* A folder holding tokenizer.json = the fixture llama2_like.json (a Llama 2-style SentencePiece
 * BPE: byte_fallback, Prepend + Replace "▁", 250 merges) with each (from, to) replaced once. */
static void spm_tokenizer(const char *name, char *dir, size_t n, const char *const *edit, int n_edit) {
    const char *root = getenv("DT_TOKENIZER_TESTS");
    if (!root) fail_msg("DT_TOKENIZER_TESTS is not set (run under ctest)");
    char path[1200];
    snprintf(path, sizeof path, "%s/fixtures/llama2_like.json", root);
    size_t len = 0;
    char *json = tu_read_file(path, &len);
    for (int i = 0; i < n_edit; i++) {
        const char *from = edit[2 * i], *to = edit[2 * i + 1];
        char *at = strstr(json, from);
        if (!at) fail_msg("llama2_like.json has no '%s'", from);
        char *edited = malloc(len + strlen(to) + 1);
        assert_non_null(edited);
        len = (size_t)sprintf(edited, "%.*s%s%s", (int)(at - json), json, to, at + strlen(from));
        free(json);
        json = edited;
    }
    tu_path(dir, n, name);
    assert_int_equal(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    tu_write_file(path, json, len);
    free(json);
}

/* A model of 600 ids (8 past the tokenizer's 592) with that tokenizer. */
static void spm_model(dt_model *m, const char *dir) {
    dt_config c;
    llama_config(&c, 0);
    c.vocab_size = 600;
    dt_error err;
    assert_int_equal(dt_model_create(m, &c, &err), 0);
    dt_model_init_random(m, 60);
    if (dt_model_set_tokenizer(m, dir, &err) != 0) fail_msg("%s", err.msg);
    m->cfg.special.bos_token_id = 1; /* Llama 2's config.json */
    m->cfg.special.eos_token_id[0] = 2;
    m->cfg.special.n_eos = 1;
}

/* A Llama 2-style tokenizer.json written as a "llama" vocabulary: llama.cpp's SentencePiece on the
 * file gives difftrans's ids, and so does the file read back; the same tokens, scores and types
 * written again; the keys llama.cpp's converter may leave out taken at its defaults. */
static void test_spm_round_trip(void **state) {
    (void)state;
    char dir[600], path[600], again[600];
    spm_tokenizer("tok_spm", dir, sizeof dir, NULL, 0);
    dt_model m, back, back2;
    dt_error err;
    spm_model(&m, dir);
    save_gguf(&m, "spm.gguf", DT_F32, path, sizeof path);
    gguf_file f;
    assert_int_equal(gguf_open(&f, path, &err), 0);
    expect_str(&f, "tokenizer.ggml.model", "llama");
    assert_null(gguf_find_kv(&f, "tokenizer.ggml.merges"));
    const gguf_kv *types = gguf_find_kv(&f, "tokenizer.ggml.token_type");
    assert_int_equal(gguf_find_kv(&f, "tokenizer.ggml.scores")->n, 600);
    assert_int_equal(gguf_array_int(types, 0), 2);   /* <unk> */
    assert_int_equal(gguf_array_int(types, 1), 3);   /* <s> */
    assert_int_equal(gguf_array_int(types, 13), 6);  /* <0x0A> */
    assert_int_equal(gguf_array_int(types, 300), 1); /* a character */
    assert_int_equal(gguf_array_int(types, 599), 5); /* a hole */
    int prefix = 0;
    assert_int_equal(gguf_get_bool(&f, "tokenizer.ggml.add_space_prefix", &prefix, &err), 0);
    assert_int_equal(prefix, 1);
    assert_int_equal(kv_int(&f, "tokenizer.ggml.unknown_token_id"), 0);
    gguf_close(&f);
    expect_spm_agrees(&m, path);
    load_gguf(&back, path);
    expect_spm_agrees(&back, path);
    for (int add_special = 0; add_special < 2; add_special++) expect_same_encoding(&m, &back, add_special);
    assert_int_equal(back.cfg.special.bos_token_id, 1);
    assert_int_equal(back.cfg.special.eos_token_id[0], 2);
    expect_equal_logits(&m, &back, 0.0f, "SentencePiece vocabulary");
    /* decoding: bytes back together, "▁" as spaces, the space the normalizer added dropped */
    const char *plain = "  Two  spaces, caf\xc3\xa9 \xf0\x9f\x99\x82 end\n";
    int *ids;
    size_t n;
    char *text;
    size_t len;
    if (dt_model_encode(&back, plain, strlen(plain), 0, &ids, &n, &err) != 0) fail_msg("%s", err.msg);
    if (dt_tok_decode(dt_model_tok(&back), ids, n, 0, &text, &len, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(len, strlen(plain));
    assert_memory_equal(text, plain, len);
    free(ids);
    free(text);
    /* GGUF → GGUF: the same vocabulary */
    save_gguf(&back, "spm_again.gguf", DT_F32, again, sizeof again);
    const char *keys[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"};
    expect_same_values(path, again, keys, 3);
    expect_checkpoint_loads(&back, "spm_ckpt");
    dt_model_free(&back);
    /* llama.cpp's defaults where the keys are absent (SentencePiece: BOS 1 added, EOS 2, a "▁"
     * before the text), integer scores as llama.cpp also reads them */
    static const char *const dropped[] = {"tokenizer.ggml.add_space_prefix", "tokenizer.ggml.add_bos_token",
                                          "tokenizer.ggml.bos_token_id",      "tokenizer.ggml.eos_token_id",
                                          "tokenizer.ggml.unknown_token_id",  "tokenizer.ggml.pre"};
    char edited[600];
    tu_path(edited, sizeof edited, "spm_edited.gguf");
    for (int k = 0; k < 7; k++) {
        rewrite(path, edited, k < 6 ? &(edits){.drop_key = dropped[k]} : &(edits){.scores_i32 = 1});
        load_gguf(&back2, edited);
        for (int add_special = 0; add_special < 2; add_special++) expect_same_encoding(&m, &back2, add_special);
        assert_int_equal(back2.cfg.special.bos_token_id, 1);
        dt_model_free(&back2);
    }
    /* without the "▁" before the text: other ids, llama.cpp's */
    rewrite(path, edited, &(edits){.bool_key = "tokenizer.ggml.add_space_prefix", .bool_val = 0});
    load_gguf(&back2, edited);
    expect_spm_agrees(&back2, edited);
    int *a, *b;
    size_t na, nb;
    assert_int_equal(dt_model_encode(&m, "Hello", 5, 0, &a, &na, &err), 0);
    assert_int_equal(dt_model_encode(&back2, "Hello", 5, 0, &b, &nb, &err), 0);
    assert_true(na != nb || memcmp(a, b, na * sizeof *a) != 0);
    free(a);
    free(b);
    dt_model_free(&back2);
    dt_model_free(&m);
}

/* A normal token of an end-of-turn text, "<|im_end|>" (in place of 591 "▁main(argv):"): llama.cpp
 * makes it a control token, found in a prompt as one token, left out of the text it prints; a
 * stop id. difftrans reading the file makes it an added special token. */
static void test_spm_eot_text(void **state) {
    (void)state;
    char dir[600], base[600], path[600];
    spm_tokenizer("tok_spm_eot", dir, sizeof dir, NULL, 0);
    dt_model m, back;
    spm_model(&m, dir);
    save_gguf(&m, "spm_eot_base.gguf", DT_F32, base, sizeof base);
    tu_path(path, sizeof path, "spm_eot.gguf");
    rewrite(base, path, &(edits){.tok = "<|im_end|>", .tok_at = 591});
    load_gguf(&back, path);
    int stop = 0;
    for (int k = 0; k < back.cfg.special.n_eos; k++) stop |= back.cfg.special.eos_token_id[k] == 591;
    assert_true(stop);
    expect_spm_agrees(&back, path);
    int *ids;
    size_t n;
    char *text;
    size_t len;
    dt_error err;
    const char *in = "a reply<|im_end|>";
    if (dt_model_encode(&back, in, strlen(in), 0, &ids, &n, &err) != 0) fail_msg("%s", err.msg);
    assert_true(n > 1);
    assert_int_equal(ids[n - 1], 591);
    for (int skip = 0; skip < 2; skip++) {
        if (dt_tok_decode(dt_model_tok(&back), ids, n, skip, &text, &len, &err) != 0) fail_msg("%s", err.msg);
        const char *want = skip ? "a reply" : in;
        if (len != strlen(want) || memcmp(text, want, len) != 0)
            fail_msg("decoded '%.*s', not '%s'", (int)len, text, want);
        free(text);
    }
    free(ids);
    /* written again, a control token */
    save_gguf(&back, "spm_eot_again.gguf", DT_F32, path, sizeof path);
    gguf_file f;
    assert_int_equal(gguf_open(&f, path, &err), 0);
    assert_int_equal(gguf_array_int(gguf_find_kv(&f, "tokenizer.ggml.token_type"), 591), 3);
    gguf_close(&f);
    dt_model_free(&back);
    dt_model_free(&m);
}

/* A SentencePiece model without BOS (none in its config, none added by its tokenizer): llama.cpp
 * takes id 1 as BOS where the file names none, and cannot be told otherwise; the file says
 * add_bos_token false (llama.cpp adds nothing) and difftrans.bos_stand_in 1, so that reading it back
 * gives no BOS again, as does writing that again. llama.cpp's own files without the key keep BOS 1. */
static void test_spm_no_bos(void **state) {
    (void)state;
    const char *root = getenv("DT_TOKENIZER_TESTS");
    if (!root) fail_msg("DT_TOKENIZER_TESTS is not set (run under ctest)");
    char fixture[1200], dir[600], path[600], again[600], edited[600];
    snprintf(fixture, sizeof fixture, "%s/fixtures/llama2_like.json", root);
    size_t len;
    char *json = tu_read_file(fixture, &len);
    char *from = strstr(json, "\"post_processor\":"), *to = strstr(json, ",\"decoder\":");
    assert_true(from && to && from < to);
    *to = 0;
    const char *edit[2] = {from, "\"post_processor\":null"};
    spm_tokenizer("tok_spm_no_bos", dir, sizeof dir, edit, 1);
    free(json);
    dt_model m, back, back2;
    spm_model(&m, dir);
    m.cfg.special.bos_token_id = -1;
    save_gguf(&m, "spm_no_bos.gguf", DT_F32, path, sizeof path);
    gguf_file f;
    dt_error err;
    int add_bos = 1;
    assert_int_equal(gguf_open(&f, path, &err), 0);
    assert_null(gguf_find_kv(&f, "tokenizer.ggml.bos_token_id"));
    assert_int_equal(gguf_get_bool(&f, "tokenizer.ggml.add_bos_token", &add_bos, &err), 0);
    assert_int_equal(add_bos, 0);
    assert_int_equal(kv_int(&f, "difftrans.bos_stand_in"), 1);
    gguf_close(&f);
    load_gguf(&back, path);
    assert_int_equal(back.cfg.special.bos_token_id, -1);
    assert_int_equal(back.cfg.special.eos_token_id[0], 2);
    for (int add_special = 0; add_special < 2; add_special++) expect_same_encoding(&m, &back, add_special);
    expect_spm_agrees(&back, path);
    expect_checkpoint_loads(&back, "spm_no_bos_ckpt");
    save_gguf(&back, "spm_no_bos_again.gguf", DT_F32, again, sizeof again);
    const char *keys[] = {"tokenizer.ggml.add_bos_token", "difftrans.bos_stand_in", "tokenizer.ggml.tokens"};
    expect_same_values(path, again, keys, 3);
    dt_model_free(&back);
    /* without the key, llama.cpp's BOS (not added: add_bos_token false) */
    tu_path(edited, sizeof edited, "spm_no_bos_edited.gguf");
    rewrite(path, edited, &(edits){.drop_key = "difftrans.bos_stand_in"});
    load_gguf(&back2, edited);
    assert_int_equal(back2.cfg.special.bos_token_id, 1);
    dt_model_free(&back2);
    /* a BOS the file names is kept */
    rewrite(path, edited, &(edits){.u32_key = "tokenizer.ggml.bos_token_id", .u32 = 1});
    load_gguf(&back2, edited);
    assert_int_equal(back2.cfg.special.bos_token_id, 1);
    dt_model_free(&back2);
    dt_model_free(&m);
}

/* The encodings of the texts by the model's tokenizer with its tokenizer.json's merge ranks
 * dropped (as a plain Hugging Face tokenizer reads it, ties in the merges' order): how many of
 * them differ from the model's own. */
static int differ_without_ranks(const dt_model *m) {
    const char *json = m->vocab.tokenizer_json;
    const char *at = strstr(json, ",\"difftrans_merge_ranks\":[");
    assert_non_null(at);
    char dir[600], path[700];
    tu_path(dir, sizeof dir, "tok_plain");
    assert_int_equal(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char *plain = malloc((size_t)(at - json) + 3);
    assert_non_null(plain);
    const int len = sprintf(plain, "%.*s}}", (int)(at - json), json);
    tu_write_file(path, plain, (size_t)len);
    free(plain);
    dt_tok *tok;
    dt_error err;
    if (dt_tok_load(&tok, path, &err) != 0) fail_msg("%s", err.msg);
    int differ = 0;
    for (int k = 0; k < N_SPM_TEXTS; k++) {
        int *a;
        int32_t *b;
        size_t na, nb;
        if (dt_model_encode(m, SPM_TEXTS[k], strlen(SPM_TEXTS[k]), 0, &a, &na, &err) != 0) fail_msg("%s", err.msg);
        if (dt_tok_encode(tok, SPM_TEXTS[k], strlen(SPM_TEXTS[k]), 0, &b, &nb, &err) != 0) fail_msg("%s", err.msg);
        differ += na != nb || (na && memcmp(a, b, na * sizeof *a) != 0);
        free(a);
        free(b);
    }
    dt_tok_free(tok);
    return differ;
}

/* Distinct tokens of equal scores (gguf-py's LlamaHfVocab gives every token -1000): llama.cpp
 * joins the leftmost of the tied pairs first, and so does difftrans reading the file (its
 * tokenizer.json's merges ranked alike: difftrans_merge_ranks), where the merges' order alone
 * (ties by id) gives other ids; written again as GGUF, the ties are kept. */
static void test_spm_tied_scores(void **state) {
    (void)state;
    char dir[600], base[600], tied[600], again[600];
    spm_tokenizer("tok_spm_tied", dir, sizeof dir, NULL, 0);
    dt_model m, back, back2;
    spm_model(&m, dir);
    save_gguf(&m, "spm_tied_base.gguf", DT_F32, base, sizeof base);
    tu_path(tied, sizeof tied, "spm_tied.gguf");
    for (int mode = 1; mode <= 2; mode++) {
        rewrite(base, tied, &(edits){.scores_tied = mode});
        load_gguf(&back, tied);
        expect_spm_agrees_tied(&back, tied, mode == 1);
        assert_true(differ_without_ranks(&back) > 0);
        save_gguf(&back, "spm_tied_again.gguf", DT_F32, again, sizeof again);
        expect_spm_agrees_tied(&back, again, mode == 1);
        load_gguf(&back2, again);
        for (int add_special = 0; add_special < 2; add_special++) expect_same_encoding(&back, &back2, add_special);
        dt_model_free(&back2);
        expect_checkpoint_loads(&back, "spm_tied_ckpt");
        dt_model_free(&back);
    }
    dt_model_free(&m);
}

/* ",\"difftrans_merge_ranks\":[...]" for the fixture's 250 merges (n of them) with one extra after
 * merge 6: rank k for merge k up to `upto`, then k - 1 (a tie at upto), `first` in place of 0. */
static void ranks_field(char *buf, size_t cap, int n, int upto, int first) {
    size_t at = (size_t)snprintf(buf, cap, "]],\"difftrans_merge_ranks\":[");
    for (int k = 0; k < n && at < cap; k++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%d", k ? "," : "", k == 0 ? first : k <= upto ? k : k - 1);
    assert_true(at + 4 < cap);
    strcpy(buf + at, "]}}");
}

/* model.difftrans_merge_ranks that are no ranks are refused by name; ranks that tie two tokens
 * where one of them also has a merge of another rank cannot be scores (llama.cpp scores all the
 * ways of making a token alike): the export refuses them, and writes a tie within a token. */
static void test_spm_merge_ranks_refused(void **state) {
    (void)state;
    static char buf[4096];
    static const struct {
        int n, upto, first;
        const char *head; /* in place of the ranks' first three, 0, 0, 1 */
        const char *problem;
    } bad[] = {
        {1, 0, 0, NULL, "model.difftrans_merge_ranks must be an array of 250 ranks, one per merge"},
        {250, 249, 1, NULL, "model.difftrans_merge_ranks[0] is not 0"},
        {250, 0, 0, "0,2,1", "model.difftrans_merge_ranks[1] is not the rank before it or the next integer"},
        {250, 0, 0, "0,0.5,1", "model.difftrans_merge_ranks[1] is not the rank before it"},
        {250, 0, 0, "0,1e20,1", "model.difftrans_merge_ranks[1] is not the rank before it"},
        {250, 0, 0, "0,\"1\",1", "model.difftrans_merge_ranks[1] is not the rank before it"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char dir[600], path[700], *edited = NULL;
        ranks_field(buf, sizeof buf, bad[k].n, bad[k].upto, bad[k].first);
        if (bad[k].head) {
            char *at = strstr(buf, "[0,0,1,");
            assert_non_null(at);
            edited = malloc(strlen(buf) + 16);
            assert_non_null(edited);
            sprintf(edited, "%.*s[%s%s", (int)(at - buf), buf, bad[k].head, at + 6);
        }
        const char *edit[2] = {"]]}}", edited ? edited : buf};
        spm_tokenizer("tok_ranks_bad", dir, sizeof dir, edit, 1);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        dt_tok *tok;
        dt_error err = {0};
        assert_int_equal(dt_tok_load(&tok, path, &err), -1);
        assert_int_equal(err.code, DT_ERR_FORMAT);
        if (strncmp(err.msg, path, strlen(path)) != 0 || !strstr(err.msg, bad[k].problem))
            fail_msg("expected '%s: ... %s' in: %s", path, bad[k].problem, err.msg);
        free(edited);
    }
    /* "▁th" made by "▁t" + "h" (merge 6) and by "▁" + "th" (merge 7): of one rank, the export
     * scores them alike; of two, while "en" (merge 8) ties with the second, it cannot */
    for (int mixed = 0; mixed < 2; mixed++) {
        char dir[600], path[600];
        ranks_field(buf, sizeof buf, 251, mixed ? 7 : 6, 0);
        const char *edit[4] = {"[\"\xe2\x96\x81t\",\"h\"],", "[\"\xe2\x96\x81t\",\"h\"],[\"\xe2\x96\x81\",\"th\"],",
                               "]]}}", buf};
        spm_tokenizer("tok_ranks_mixed", dir, sizeof dir, edit, 2);
        dt_model m;
        spm_model(&m, dir);
        if (mixed)
            expect_save_refused(&m, DT_F32, DT_ERR_UNSUPPORTED,
                                "make token 348 \"\xe2\x96\x81th\" (rank 6) and token 349 \"en\" (rank 7) are "
                                "linked by tied ranks");
        else {
            save_gguf(&m, "spm_ranks.gguf", DT_F32, path, sizeof path);
            expect_spm_agrees(&m, path);
        }
        dt_model_free(&m);
    }
}

/* What llama.cpp's SentencePiece cannot reproduce is refused, by name: the tokenizer.json's form,
 * a token the BPE never makes from two pieces llama.cpp would join, merges of a token far apart,
 * a merge of byte tokens. */
static void test_spm_export_refused(void **state) {
    (void)state;
    static const struct {
        const char *from, *to, *problem;
    } cases[] = {
        {"\"pre_tokenizer\":null",
         "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\xe2\x96\x81\",\"prepend_scheme\":\"first\","
         "\"split\":false}",
         "a Metaspace pre-tokenizer"},
        {"\"byte_fallback\":true", "\"byte_fallback\":false", "byte_fallback off"},
        {"\"prepend\":\"\xe2\x96\x81\"", "\"prepend\":\"_\"", "a normalizer other than"},
        {",{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}", "", "a decoder other than"},
        {"\"content\":\"</s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false",
         "\"content\":\"</s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":true",
         "an added token (</s>) found in the normalised text"},
        {"\"vocab\":{", "\"vocab\":{\"\xe2\x96\x81th\xe2\x96\x81t\":592,",
         "token 592 \"\xe2\x96\x81th\xe2\x96\x81t\" is \"\xe2\x96\x81th\" + \"\xe2\x96\x81t\", which no merge"},
        {"]]}}", "],[\"\xe2\x96\x81\",\"th\"]]}}", "are not consecutive"},
        {"]]}}", "],[\"<0x41>\",\"a\"]]}}", "joins a byte token"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char dir[600];
        const char *edit[4] = {cases[k].from, cases[k].to, "\"vocab\":{", "\"vocab\":{\"<0x41>a\":593,"};
        spm_tokenizer("tok_spm_refused", dir, sizeof dir, edit, k == 7 ? 2 : 1);
        dt_model m;
        spm_model(&m, dir);
        expect_save_refused(&m, DT_F32, DT_ERR_UNSUPPORTED, cases[k].problem);
        dt_model_free(&m);
    }
}

/* A "llama" vocabulary that is not llama.cpp's, or that no BPE reproduces: refused, naming the file. */
static void test_spm_hostile(void **state) {
    (void)state;
    char dir[600], base[600];
    spm_tokenizer("tok_spm_hostile", dir, sizeof dir, NULL, 0);
    dt_model m;
    spm_model(&m, dir);
    save_gguf(&m, "spm_base.gguf", DT_F32, base, sizeof base);
    const dt_errcode F = DT_ERR_FORMAT, U = DT_ERR_UNSUPPORTED;
    expect_load_refused(base, &(edits){.drop_key = "tokenizer.ggml.scores"}, U, "no tokenizer.ggml.scores");
    expect_load_refused(base, &(edits){.arr_key = "tokenizer.ggml.scores", .u32 = 1}, F,
                        "tokenizer.ggml.scores must be 600 f32 (or i32) values, one per token; it holds 2 i32");
    expect_load_refused(base, &(edits){.str_key = "tokenizer.ggml.scores", .str_val = "1"}, F,
                        "it holds 1 string");
    expect_load_refused(base, &(edits){.score_set = 1, .score_at = 400, .score = NAN}, F,
                        "tokenizer.ggml.scores[400] is nan");
    const edits no_byte = {.tok = "<0x4l>", .tok_at = 3 + 0x41, .type_set = 1, .type_at = 3 + 0x41, .type = 1};
    expect_load_refused(base, &no_byte, F, "no byte token <0x41>");
    expect_load_refused(base, &(edits){.type_set = 1, .type_at = 300, .type = 7}, F,
                        "tokenizer.ggml.token_type[300] = 7 is none of llama.cpp's types");
    expect_load_refused(base, &(edits){.type_set = 1, .type_at = 300, .type = 0}, F, "token_type[300] = 0");
    expect_load_refused(base, &(edits){.type_set = 1, .type_at = 300, .type = 6}, F, "is of type byte but not <0xNN>");
    /* an unused token llama.cpp can give (a character here): the BPE, without it, cannot */
    expect_load_refused(base, &(edits){.type_set = 1, .type_at = 300, .type = 5}, U, "is of type unused, yet");
    /* llama.cpp joins "▁" and "€" (no token) into this token; a BPE takes the "€" as bytes */
    expect_load_refused(base, &(edits){.tok = "\xe2\x96\x81\xe2\x82\xac", .tok_at = 595}, U,
                        "joins \"\xe2\x82\xac\", which is no token");
    expect_load_refused(base, &(edits){.tok = "<0x41>a", .tok_at = 595}, U, "joins a byte token");
    expect_load_refused(base, &(edits){.str_key = "tokenizer.ggml.model", .str_val = "bert"}, U,
                        "reads byte-level BPE ('gpt2') and SentencePiece ('llama')");
    expect_load_refused(base, &(edits){.u32_key = "tokenizer.ggml.bos_token_id", .u32 = 600}, F,
                        "tokenizer.ggml.bos_token_id = 600 is outside");
    dt_model_free(&m);
}

/* A "llama" vocabulary with one token of 600 KB (200000 "▁"): each of its cuts was looked up by
 * hashing both pieces (and counting their characters), O(L²) for a token of L bytes, so loading
 * the file took minutes, and so did writing it back. The two together take well under a second now;
 * the bound leaves room for a loaded machine and the sanitizers. */
static void test_spm_long_token(void **state) {
    (void)state;
    char dir[600], base[600], path[600], again[600];
    spm_tokenizer("tok_spm_long", dir, sizeof dir, NULL, 0);
    dt_model m, back;
    spm_model(&m, dir);
    save_gguf(&m, "spm_long_base.gguf", DT_F32, base, sizeof base);
    const size_t n = 200000;
    char *tok = malloc(3 * n + 1);
    assert_non_null(tok);
    for (size_t i = 0; i < n; i++) memcpy(tok + 3 * i, "\xe2\x96\x81", 3);
    tok[3 * n] = '\0';
    tu_path(path, sizeof path, "spm_long.gguf");
    /* a normal token (an unused one would not be written back) */
    rewrite(base, path, &(edits){.tok = tok, .tok_at = 595, .type_set = 1, .type_at = 595, .type = 1});
    const double t0 = dt_seconds();
    load_gguf(&back, path);
    save_gguf(&back, "spm_long_again.gguf", DT_F32, again, sizeof again);
    const double took = dt_seconds() - t0;
    if (!(took < 30)) fail_msg("loading and saving a vocabulary with a 600 KB token took %.1f s", took);
    const char *keys[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"};
    expect_same_values(path, again, keys, 3);
    free(tok);
    dt_model_free(&back);
    dt_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_f32),       cmocka_unit_test(test_round_trip_f16_bf16),
        cmocka_unit_test(test_round_trip_quantised), cmocka_unit_test(test_rope_permutation),
        cmocka_unit_test(test_metadata),             cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_hostile_containers),   cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_hostile_models),       cmocka_unit_test(test_llama_cpp_variants),
        cmocka_unit_test(test_bpe_tokenizers),       cmocka_unit_test(test_tokenizer_refused),
        cmocka_unit_test(test_rope_scaling),         cmocka_unit_test(test_no_eos),
        cmocka_unit_test(test_eog_by_text),          cmocka_unit_test(test_spm_round_trip),
        cmocka_unit_test(test_spm_export_refused),   cmocka_unit_test(test_spm_hostile),
        cmocka_unit_test(test_spm_tied_scores),      cmocka_unit_test(test_spm_merge_ranks_refused),
        cmocka_unit_test(test_spm_eot_text),         cmocka_unit_test(test_spm_no_bos),
        cmocka_unit_test(test_spm_long_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
