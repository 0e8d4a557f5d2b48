/* test_model.c — whole-model properties: parameter parity, KV-cache decoding against the full
 * forward, gradients against finite differences, checkpoint round trips, the differential map,
 * exact resume, and that training actually learns real text. */
#include <math.h>
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "difftrans.h"
#include "testutil.h"

/* A small model of either kind; weights scaled up from the 0.02 init so that attention is far
 * from uniform and every path carries signal. */
static void make_model(dt_model *m, dt_arch arch, int kv_heads, int tied, int subln, uint64_t seed) {
    dt_config c;
    dt_error err;
    assert_int_equal(dt_config_preset(&c, "tiny", arch, &err), 0);
    c.vocab_size = 40;
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = kv_heads;
    c.head_dim = 8;
    c.max_position_embeddings = 64;
    c.tie_word_embeddings = tied;
    c.use_subln_weight = arch == DT_ARCH_DIFF && subln;
    c.lambda_std_dev = 0.3f;
    assert_int_equal(dt_model_create(m, &c, &err), 0);
    dt_model_init_random(m, seed);
    uint64_t rng = seed * 7 + 1;
    for (int i = 0; i < m->n_tensors; i++) {
        const dt_tensor *t = &m->tensors[i];
        float *p = m->params + t->offset;
        for (size_t j = 0; j < t->numel; j++) {
            if (t->decay) p[j] *= 8.0f;                       /* std 0.16 */
            else if (p[j] == 1.0f) p[j] += 0.2f * dt_rng_normal(&rng); /* norm weights around 1 */
        }
    }
}

static void random_tokens(int *t, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int)(dt_rng_next(&seed) % (uint64_t)V);
}

static void test_parameter_parity(void **state) {
    (void)state;
    dt_error err;
    const char *presets[] = {"tiny", "small", "medium", "base"};
    for (int p = 0; p < 4; p++) {
        dt_config dc, bc;
        assert_int_equal(dt_config_preset(&dc, presets[p], DT_ARCH_DIFF, &err), 0);
        bc = dt_config_matched(&dc);
        assert_int_equal(bc.arch, DT_ARCH_LLAMA);
        dt_model d, b;
        assert_int_equal(dt_model_create(&d, &dc, &err), 0);
        assert_int_equal(dt_model_create(&b, &bc, &err), 0);
        /* the only extra parameters are the four λ vectors of every layer */
        assert_int_equal(d.n_params - b.n_params, (size_t)4 * dc.head_dim * dc.num_hidden_layers);
        dt_model_free(&d);
        dt_model_free(&b);
    }
}

static void check_decode_matches_forward(dt_arch arch, int kv, int tied, int subln) {
    dt_model m;
    dt_error err;
    make_model(&m, arch, kv, tied, subln, 11 + kv + tied);
    const int T = 11, V = m.cfg.vocab_size;
    int tokens[11];
    random_tokens(tokens, T, V, 5);
    dt_runstate *rs = dt_runstate_create(&m, 1, T, &err);
    assert_non_null(rs);
    assert_int_equal(dt_forward(&m, rs, tokens, NULL, 1, T, NULL, &err), 0);
    dt_kvcache *kc = dt_kvcache_create(&m, T, &err);
    assert_non_null(kc);
    float logits[64];
    for (int t = 0; t < T; t++) {
        assert_int_equal(dt_decode_step(&m, kc, tokens[t], t, logits, &err), 0);
        float d = tu_max_rel_diff(logits, dt_runstate_logits(rs) + (size_t)t * V, (size_t)V, 1.0f);
        if (d > 2e-5f) fail_msg("arch %d kv %d tied %d subln %d: position %d differs by %g", arch, kv, tied, subln, t, d);
    }
    assert_int_equal(dt_decode_step(&m, kc, tokens[0], T, logits, &err), -1); /* past the cache */
    assert_int_equal(dt_decode_step(&m, kc, tokens[0], -1, logits, &err), -1); /* before it, not "past the end" */
    if (!strstr(err.msg, "position -1 is outside the context 0..10")) fail_msg("%s", err.msg);
    assert_int_equal(dt_decode_step(&m, kc, V, 0, logits, &err), -1);          /* token out of range */
    /* going back rewrites the sequence from there; skipping ahead would attend to positions not fed */
    assert_int_equal(dt_decode_step(&m, kc, tokens[3], 3, logits, &err), 0);
    assert_int_equal(dt_decode_step(&m, kc, tokens[5], 5, logits, &err), -1);
    assert_non_null(strstr(err.msg, "position 5 after the 4 positions fed"));
    dt_kvcache_free(kc);
    kc = dt_kvcache_create(&m, T, &err);
    assert_non_null(kc);
    assert_int_equal(dt_decode_step(&m, kc, tokens[1], 1, logits, &err), -1);
    assert_non_null(strstr(err.msg, "position 1 after the 0 positions fed"));
    dt_kvcache_free(kc);
    dt_runstate_free(rs);
    dt_model_free(&m);
}

static void test_kvcache_equals_forward(void **state) {
    (void)state;
    check_decode_matches_forward(DT_ARCH_LLAMA, 4, 0, 0);
    check_decode_matches_forward(DT_ARCH_LLAMA, 2, 1, 0);
    check_decode_matches_forward(DT_ARCH_DIFF, 4, 0, 0);
    check_decode_matches_forward(DT_ARCH_DIFF, 2, 1, 1);
    check_decode_matches_forward(DT_ARCH_DIFF, 1, 0, 1);
}

static void check_model_gradients(dt_arch arch, int kv, int tied, int subln) {
    dt_model m;
    make_model(&m, arch, kv, tied, subln, 3);
    char msg[512];
    if (tu_model_gradient_check(&m, DT_ATTENTION_FUSED, 4, msg, sizeof msg) != 0) fail_msg("arch %d: %s", arch, msg);
    dt_model_free(&m);
}

static void test_model_gradients(void **state) {
    (void)state;
    check_model_gradients(DT_ARCH_LLAMA, 2, 0, 0);
    check_model_gradients(DT_ARCH_LLAMA, 4, 1, 0);
    check_model_gradients(DT_ARCH_DIFF, 2, 0, 1);
    check_model_gradients(DT_ARCH_DIFF, 4, 1, 0);
}

/* The fused attention kernel (the default) against the reference one, through the whole model:
 * logits, loss and every gradient. */
static void check_fused_matches_reference(dt_arch arch, int kv, int tied, int subln, int T) {
    dt_model m;
    make_model(&m, arch, kv, tied, subln, 17);
    char msg[512];
    if (tu_fused_matches_reference(&m, 2, T, msg, sizeof msg) != 0) fail_msg("arch %d: %s", arch, msg);
    dt_model_free(&m);
}

static void test_fused_attention_matches_reference(void **state) {
    (void)state;
    check_fused_matches_reference(DT_ARCH_LLAMA, 2, 0, 0, 1);
    check_fused_matches_reference(DT_ARCH_LLAMA, 4, 1, 0, 37);
    check_fused_matches_reference(DT_ARCH_DIFF, 2, 0, 1, 37);
    check_fused_matches_reference(DT_ARCH_DIFF, 1, 1, 0, 64);
    check_fused_matches_reference(DT_ARCH_DIFF, 4, 0, 1, 2);
}

/* The chunked LM head + cross-entropy of training against the whole-logits path: same loss and
 * gradients, with more rows than one chunk (chunks of 256: a partial last chunk), and with the
 * default chunk, which holds all rows here (the backward reuses the forward's logits). */
static void test_chunked_loss_matches_whole(void **state) {
    (void)state;
    for (int variant = 0; variant < 4; variant++) {
        const int tied = variant % 2, chunk_rows = variant < 2 ? 256 : 0;
        dt_model m;
        dt_error err;
        make_model(&m, DT_ARCH_DIFF, 2, tied, 0, 23);
        const int B = 9, T = 61, V = m.cfg.vocab_size, N = B * T; /* 549 rows: 256 + 256 + 37 */
        int *tok = malloc(sizeof(int) * N), *tgt = malloc(sizeof(int) * N);
        random_tokens(tok, N, V, 31);
        random_tokens(tgt, N, V, 32);
        tgt[300] = -1;
        dt_runstate *whole = dt_runstate_create(&m, B, T, &err);
        dt_runstate *chunked = dt_runstate_create_with(
            &m, B, T, &(dt_run_options){.chunked_loss = 1, .loss_chunk_rows = chunk_rows}, &err);
        assert_non_null(chunked);
        assert_null(dt_runstate_logits(chunked));
        float lw, lc;
        assert_int_equal(dt_forward(&m, whole, tok, tgt, B, T, &lw, &err), 0);
        assert_int_equal(dt_forward(&m, chunked, tok, tgt, B, T, &lc, &err), 0);
        assert_float_equal(lc, lw, 1e-6 * fabs(lw));
        float *gw = calloc(m.n_params, sizeof(float)), *gc = calloc(m.n_params, sizeof(float));
        dt_backward(&m, whole, gw);
        dt_backward(&m, chunked, gc);
        float scale = 0;
        for (size_t j = 0; j < m.n_params; j++) scale = fmaxf(scale, fabsf(gw[j]));
        assert_true(tu_max_abs_diff(gw, gc, m.n_params) <= 1e-5f * scale);
        free(gw), free(gc), free(tok), free(tgt);
        dt_runstate_free(whole);
        dt_runstate_free(chunked);
        dt_model_free(&m);
    }
}

static void test_save_load_bit_exact(void **state) {
    (void)state;
    for (int arch = 0; arch < 2; arch++) {
        dt_model m, r;
        dt_error err;
        make_model(&m, (dt_arch)arch, 2, arch, 1, 21);
        char dir[1024];
        tu_path(dir, sizeof dir, arch ? "roundtrip_diff" : "roundtrip_llama");
        assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
        if (dt_model_load(&r, dir, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(r.n_params, m.n_params);
        assert_memory_equal(&r.cfg, &m.cfg, sizeof m.cfg);
        assert_memory_equal(r.params, m.params, m.n_params * sizeof(float));
        dt_model_free(&r);
        dt_model_free(&m);
    }
}

static void test_hf_export_same_logits(void **state) {
    (void)state;
    dt_model m, e;
    dt_error err;
    make_model(&m, DT_ARCH_DIFF, 2, 0, 1, 31);
    char dir[1024];
    tu_path(dir, sizeof dir, "hf_export");
    assert_int_equal(dt_model_save(&m, dir, 1, &err), 0);
    assert_int_equal(dt_model_load(&e, dir, &err), 0);
    assert_int_equal(e.cfg.use_subln_weight, 0);
    assert_null(dt_model_find(&e, "model.layers.0.self_attn.subln.weight"));
    assert_true(tu_logits_max_diff(&m, &e, 9, 4, 1) < 1e-5f);
    dt_model_free(&e);
    dt_model_free(&m);
}

/* The per-layer and per-head views answer "none" (NULL, NaN, -1) for a layer or head outside the
 * model: they read past the model's arrays (dt_model_lambda(m, L) crashed). */
static void test_views_outside_the_model(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_DIFF, 4, 0, 0, 43);
    const int T = 4, L = m.cfg.num_hidden_layers, H = m.cfg.num_attention_heads;
    int tok[4] = {1, 2, 3, 4};
    dt_run_options ro = {.kernel = DT_ATTENTION_REFERENCE, .keep_logits = 1};
    dt_runstate *rs = dt_runstate_create_with(&m, 1, T, &ro, &err);
    assert_non_null(rs);
    assert_int_equal(dt_forward(&m, rs, tok, NULL, 1, T, NULL, &err), 0);
    const int outside[] = {-1, L, 1 << 20};
    for (size_t i = 0; i < sizeof outside / sizeof *outside; i++) {
        const int l = outside[i];
        size_t n = 1;
        int heads = 0;
        assert_null(dt_runstate_attention(rs, l));
        assert_null(dt_runstate_attention_logits(rs, l));
        assert_null(dt_runstate_head_context(rs, l, &heads, NULL));
        assert_null(dt_runstate_token_lambda(rs, l, &n));
        assert_int_equal(n, 0);
        assert_true(isnan(dt_model_lambda(&m, l)));
    }
    assert_non_null(dt_runstate_attention(rs, L - 1));
    assert_non_null(dt_runstate_hidden(rs, L)); /* the final norm's input */
    assert_null(dt_runstate_hidden(rs, L + 1));
    assert_null(dt_runstate_hidden(rs, -1));
    assert_true(isfinite(dt_model_lambda(&m, L - 1)));
    assert_int_equal(dt_config_query_head(&m.cfg, H / 2 - 1, 1), H - 1);
    assert_int_equal(dt_config_query_head(&m.cfg, H / 2, 0), -1);
    assert_int_equal(dt_config_query_head(&m.cfg, -1, 0), -1);
    assert_int_equal(dt_config_query_head(&m.cfg, 0, 2), -1);
    const dt_config base = dt_config_matched(&m.cfg);
    assert_int_equal(dt_config_query_head(&base, H - 1, 1), H - 1); /* which is ignored */
    assert_int_equal(dt_config_query_head(&base, H, 0), -1);
    dt_runstate_free(rs);
    dt_model_free(&m);
}

/* The paper's illustration at model level: each row of A_j − λ·A_{j+H/2} sums to 1 − λ and
 * some weights are negative. */
static void test_differential_map(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_DIFF, 4, 0, 0, 41);
    const int T = 12, H = m.cfg.num_attention_heads;
    int tok[12];
    random_tokens(tok, T, m.cfg.vocab_size, 8);
    dt_runstate *rs = dt_runstate_create_with(&m, 1, T, &(dt_run_options){.kernel = DT_ATTENTION_REFERENCE}, &err);
    assert_int_equal(dt_forward(&m, rs, tok, NULL, 1, T, NULL, &err), 0);
    int negatives = 0;
    for (int l = 0; l < m.cfg.num_hidden_layers; l++) {
        const float *att = dt_runstate_attention(rs, l), lambda = dt_model_lambda(&m, l);
        for (int j = 0; j < H / 2; j++)
            for (int t = 0; t < T; t++) {
                double sum = 0;
                for (int s = 0; s <= t; s++) {
                    double d = att[((size_t)j * T + t) * T + s] - lambda * att[((size_t)(j + H / 2) * T + t) * T + s];
                    sum += d;
                    negatives += d < 0;
                }
                assert_float_equal(sum, 1.0 - lambda, 1e-5);
            }
    }
    assert_true(negatives > 0);
    dt_runstate_free(rs);
    dt_model_free(&m);
}

/* The analysis hooks: kept attention scores are the maps' logits, and fake quantisation to 16
 * bits changes nothing beyond rounding while 2 bits changes the output. */
static void test_attention_logit_hooks(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_DIFF, 2, 0, 0, 51);
    const int T = 10, H = m.cfg.num_attention_heads, V = m.cfg.vocab_size;
    int tok[10];
    random_tokens(tok, T, V, 3);
    dt_runstate *plain = dt_runstate_create_with(&m, 1, T, &(dt_run_options){.keep_logits = 1}, &err);
    assert_non_null(plain);
    assert_int_equal(dt_forward(&m, plain, tok, NULL, 1, T, NULL, &err), 0);
    const float *att = dt_runstate_attention(plain, 1), *lg = dt_runstate_attention_logits(plain, 1);
    assert_non_null(att);
    assert_non_null(lg);
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++) {
            const float *row = lg + ((size_t)h * T + t) * T, *p = att + ((size_t)h * T + t) * T;
            double z = 0;
            for (int c = 0; c <= t; c++) z += exp(row[c] - row[0]);
            for (int c = 0; c <= t; c++) assert_float_equal(p[c], exp(row[c] - row[0]) / z, 1e-5);
        }
    for (int per_row = 0; per_row < 2; per_row++) {
        dt_run_options q16 = {.logit_bits = 16, .logit_per_row = per_row}, q2 = {.logit_bits = 2, .logit_per_row = per_row};
        dt_runstate *a = dt_runstate_create_with(&m, 1, T, &q16, &err), *b = dt_runstate_create_with(&m, 1, T, &q2, &err);
        assert_int_equal(dt_forward(&m, a, tok, NULL, 1, T, NULL, &err), 0);
        assert_int_equal(dt_forward(&m, b, tok, NULL, 1, T, NULL, &err), 0);
        const float *ref = dt_runstate_logits(plain);
        assert_true(tu_max_rel_diff(dt_runstate_logits(a), ref, (size_t)T * V, 1.0f) < 1e-3f);
        assert_true(tu_max_rel_diff(dt_runstate_logits(b), ref, (size_t)T * V, 1.0f) > 1e-3f);
        dt_runstate_free(a);
        dt_runstate_free(b);
    }
    assert_null(dt_runstate_create_with(&m, 1, T, &(dt_run_options){.logit_bits = 40}, &err));
    assert_non_null(strstr(err.msg, "bits"));
    dt_runstate_free(plain);
    dt_model_free(&m);
}

/* The kept scores are q·kᵀ/√hd, the activations the outlier statistics are about: ALiBi's bias, a fixed
 * −m·(t − c) that reached 64 at 256 positions, is not in them, so an ALiBi model keeps the scores of the same
 * weights without position encoding (RoPE would rotate q and k). */
static void test_attention_logits_without_alibi_bias(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    for (int arch = 0; arch < 2; arch++) {
        make_model(&m, arch ? DT_ARCH_DIFF : DT_ARCH_LLAMA, 2, 0, 0, 52);
        const int T = 12, H = m.cfg.num_attention_heads;
        int tok[12];
        random_tokens(tok, T, m.cfg.vocab_size, 4);
        const float *lg[2];
        dt_runstate *rs[2];
        for (int k = 0; k < 2; k++) {
            m.cfg.position = k ? DT_POS_NONE : DT_POS_ALIBI;
            rs[k] = dt_runstate_create_with(&m, 1, T, &(dt_run_options){.keep_logits = 1}, &err);
            assert_non_null(rs[k]);
            assert_int_equal(dt_forward(&m, rs[k], tok, NULL, 1, T, NULL, &err), 0);
            lg[k] = dt_runstate_attention_logits(rs[k], 0); /* layer 0: both read the same embeddings */
            assert_non_null(lg[k]);
        }
        double worst = 0;
        for (size_t i = 0; i < (size_t)H * T * T; i++) {
            const double d = fabs((double)lg[0][i] - lg[1][i]);
            if (!(d <= worst)) worst = d; /* a NaN sticks, and fails below */
        }
        assert_true(worst < 1e-6);
        dt_runstate_free(rs[0]);
        dt_runstate_free(rs[1]);
        dt_model_free(&m);
    }
}

static void test_forward_rejects_bad_tokens(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_DIFF, 2, 0, 0, 1);
    dt_runstate *rs = dt_runstate_create(&m, 1, 4, &err);
    int bad[4] = {1, 2, 40, 3}, neg[4] = {1, -1, 2, 3};
    assert_int_equal(dt_forward(&m, rs, bad, NULL, 1, 4, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "out of range"));
    assert_int_equal(dt_forward(&m, rs, neg, NULL, 1, 4, NULL, &err), -1);
    assert_int_equal(dt_forward(&m, rs, neg, NULL, 1, 5, NULL, &err), -1); /* larger than the run state */
    assert_null(dt_runstate_create(&m, 1, 65, &err));                       /* past max_position_embeddings */
    assert_non_null(strstr(err.msg, "max_position_embeddings"));
    dt_runstate_free(rs);
    dt_model_free(&m);
}

static const char *real_text(void) { return "/usr/share/common-licenses/GPL-3"; }

static void train_opts(dt_train_options *o, const char *out, int steps) {
    dt_error err;
    dt_train_defaults(o);
    o->data_path = real_text();
    o->out_dir = out;
    assert_int_equal(dt_config_preset(&o->cfg, "tiny", DT_ARCH_DIFF, &err), 0);
    o->steps = steps;
    o->batch = 4;
    o->seq = 32;
    o->warmup = 3;
    o->eval_interval = 5;
    o->eval_batches = 2;
    o->save_interval = 0;
    o->quiet = 1;
}

static void load_params(const char *dir, dt_model *m) {
    dt_error err;
    if (dt_model_load(m, dir, &err) != 0) fail_msg("%s", err.msg);
}

/* A run resumed from dt_train_resume_defaults ends where the uninterrupted one does: its step count
 * and micro-batching come from the saved run (a resume that kept the defaults' 1000 steps or one
 * micro-batch would end elsewhere). */
static void test_resume_equals_uninterrupted(void **state) {
    (void)state;
    omp_set_num_threads(1);
    char a[1024], b[1024];
    tu_path(a, sizeof a, "run_straight");
    tu_path(b, sizeof b, "run_resumed");
    dt_train_options o;
    dt_error err;
    train_opts(&o, a, 12);
    o.grad_accum = 2;
    if (dt_train(&o, &err) != 0) fail_msg("%s", err.msg);
    train_opts(&o, b, 12);
    o.grad_accum = 2;
    o.stop_at = 7; /* as if interrupted after step 7 */
    if (dt_train(&o, &err) != 0) fail_msg("%s", err.msg);
    dt_train_options r;
    dt_train_resume_defaults(&r);
    assert_int_equal(r.resume, 1);
    r.out_dir = b;
    r.quiet = 1;
    if (dt_train(&r, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(r.steps, 12);
    assert_int_equal(r.grad_accum, 2);
    dt_model ma, mb;
    load_params(a, &ma);
    load_params(b, &mb);
    assert_int_equal(ma.n_params, mb.n_params);
    assert_memory_equal(ma.params, mb.params, ma.n_params * sizeof(float));
    dt_model_free(&ma);
    dt_model_free(&mb);
    omp_set_num_threads(omp_get_num_procs());
}

/* --grad-accum K: K micro-batches of B/K rows average to the gradient of the whole batch, so the
 * run follows the K = 1 run to float rounding. A sum instead of a mean, a micro-batch used twice or
 * a row left out would move the parameters by far more than rounding after 8 steps. */
static void test_grad_accum_matches_whole_batch(void **state) {
    (void)state;
    omp_set_num_threads(1);
    char a[1024], b[1024];
    tu_path(a, sizeof a, "accum1");
    tu_path(b, sizeof b, "accum4");
    dt_train_options o;
    dt_error err;
    train_opts(&o, a, 8);
    o.grad_clip = 0; /* clipping would hide a wrongly scaled gradient */
    if (dt_train(&o, &err) != 0) fail_msg("%s", err.msg);
    train_opts(&o, b, 8);
    o.grad_clip = 0;
    o.grad_accum = 4;
    if (dt_train(&o, &err) != 0) fail_msg("%s", err.msg);
    dt_model ma, mb, m0;
    load_params(a, &ma);
    load_params(b, &mb);
    assert_int_equal(dt_model_create(&m0, &ma.cfg, &err), 0);
    dt_model_init_random(&m0, o.seed);
    double moved = tu_max_abs_diff(ma.params, m0.params, ma.n_params);
    double apart = tu_max_abs_diff(ma.params, mb.params, ma.n_params);
    print_message("after 8 steps: parameters moved up to %.3g; K=1 and K=4 differ by %.3g\n", moved, apart);
    assert_true(moved > 1e-3);
    assert_true(apart < 1e-3 * moved);
    o.grad_accum = 3; /* does not divide --batch 4 */
    assert_int_equal(dt_train(&o, &err), -1);
    assert_non_null(strstr(err.msg, "grad_accum 3"));
    dt_model_free(&ma);
    dt_model_free(&mb);
    dt_model_free(&m0);
    omp_set_num_threads(omp_get_num_procs());
}

/* A run dt_train starts is one it can continue: an option it takes is one train_state.json may
 * hold (a val_fraction of 0.95 trained, then its resume refused the state file as corrupt), and one
 * a resume would refuse is refused before the run, naming the option (a beta1 of 1 trained into
 * "diverged": the bias correction divides by 1 − beta1^t = 0). */
static void test_options_resume_accepts(void **state) {
    (void)state;
    char dir[1024];
    dt_train_options o;
    dt_error err;
    tu_path(dir, sizeof dir, "run_val95");
    train_opts(&o, dir, 2);
    o.val_fraction = 0.95f;
    o.stop_at = 1;
    if (dt_train(&o, &err) != 0) fail_msg("%s", err.msg);
    dt_train_options r;
    dt_train_resume_defaults(&r);
    r.out_dir = dir;
    r.quiet = 1;
    if (dt_train(&r, &err) != 0) fail_msg("%s", err.msg);
    assert_true(r.val_fraction == 0.95f);
#define OPT(name, value) {#name, offsetof(dt_train_options, name), value}
    static const struct {
        const char *name;
        size_t offset;
        float value;
    } bad[] = {OPT(beta1, 1),         OPT(beta2, 1),          OPT(beta1, -0.5f),           OPT(adam_eps, 0),
               OPT(min_lr_ratio, 2),  OPT(grad_clip, INFINITY), OPT(weight_decay, INFINITY)};
#undef OPT
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tu_path(dir, sizeof dir, "run_bad_option");
        train_opts(&o, dir, 2);
        *(float *)((char *)&o + bad[i].offset) = bad[i].value;
        err.code = DT_ERR_NONE;
        assert_int_equal(dt_train(&o, &err), -1);
        assert_int_equal(err.code, DT_ERR_INVALID);
        char want[64];
        snprintf(want, sizeof want, "%s %g:", bad[i].name, (double)bad[i].value);
        if (!strstr(err.msg, want)) fail_msg("%s: expected '%s'", err.msg, want);
    }
}

static void test_training_learns_real_text(void **state) {
    (void)state;
    int *tok;
    size_t n;
    dt_error err;
    if (dt_text_load(real_text(), &tok, &n, &err) != 0) skip();
    double counts[256] = {0}, unigram = 0;
    for (size_t i = 0; i < n; i++) counts[tok[i]]++;
    for (int i = 0; i < 256; i++)
        if (counts[i] > 0) unigram -= counts[i] / n * log(counts[i] / n);
    free(tok);

    char dir[1024];
    tu_path(dir, sizeof dir, "learns");
    dt_train_options o;
    train_opts(&o, dir, 400);
    o.batch = 8;
    o.seq = 64;
    o.lr = 3e-3f;
    o.warmup = 20;
    o.eval_batches = 8;
    if (dt_train(&o, &err) != 0) fail_msg("%s", err.msg);
    dt_model m;
    load_params(dir, &m);
    double val;
    if (dt_text_load(real_text(), &tok, &n, &err) != 0) fail_msg("%s", err.msg);
    size_t start = n - (size_t)(n * o.val_fraction);
    assert_int_equal(dt_eval_tokens(&m, tok + start, n - start, 8, 64, &val, NULL, &err), 0);
    print_message("byte unigram entropy %.3f nats, validation loss after 400 steps %.3f nats\n", unigram, val);
    assert_true(val < 0.8 * unigram);
    free(tok);
    dt_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parameter_parity),
        cmocka_unit_test(test_kvcache_equals_forward),
        cmocka_unit_test(test_model_gradients),
        cmocka_unit_test(test_fused_attention_matches_reference),
        cmocka_unit_test(test_chunked_loss_matches_whole),
        cmocka_unit_test(test_save_load_bit_exact),
        cmocka_unit_test(test_hf_export_same_logits),
        cmocka_unit_test(test_views_outside_the_model),
        cmocka_unit_test(test_differential_map),
        cmocka_unit_test(test_attention_logit_hooks),
        cmocka_unit_test(test_attention_logits_without_alibi_bias),
        cmocka_unit_test(test_forward_rejects_bad_tokens),
        cmocka_unit_test(test_resume_equals_uninterrupted),
        cmocka_unit_test(test_grad_accum_matches_whole_batch),
        cmocka_unit_test(test_options_resume_accepts),
        cmocka_unit_test(test_training_learns_real_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
