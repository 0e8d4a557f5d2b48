/* test_ablations.c — the model variants (position encoding, softmax1, DIFF without the per-head
 * norm, fixed λ, DIFF V2 and the V2 write-up's ablations of it, the matched baselines with 1.5× the
 * heads or twice the head width) at model level: their config keys and the ablation names,
 * parameter counts, KV-cache decoding and the batched step against the full forward, gradients
 * against finite differences, the fused kernel against the reference one, checkpoints (float and
 * quantised) and the Hugging Face export, and that each variant computes what it says. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "difftrans.h"
#include "difftrans_analysis.h"
#include "layers/layers.h"
#include "testutil.h"

/* Every variant the tests run: a base architecture and ablation names applied in order, comma-
 * separated ("" for none). */
typedef struct {
    dt_arch arch;
    const char *ablation;
} variant;

static const variant VARIANTS[] = {
    {DT_ARCH_LLAMA, "alibi"},     {DT_ARCH_LLAMA, "nope"},    {DT_ARCH_LLAMA, "softmax1"},
    {DT_ARCH_DIFF, "alibi"},      {DT_ARCH_DIFF, "nope"},     {DT_ARCH_DIFF, "softmax1"},
    {DT_ARCH_DIFF, "nonorm"},     {DT_ARCH_DIFF, "fixedlambda"}, {DT_ARCH_DIFF, "v2"},
    {DT_ARCH_DIFF_V2, ""},        {DT_ARCH_DIFF_V2, "alibi"}, {DT_ARCH_DIFF_V2, "softmax1"},
    {DT_ARCH_DIFF_V2, "nope"},
    {DT_ARCH_DIFF_V2, "v2-crossgroup"}, {DT_ARCH_DIFF_V2, "v2-nolambda"}, {DT_ARCH_DIFF_V2, "v2-nosigmoid"},
    {DT_ARCH_DIFF_V2, "v2-crossgroup,alibi"}, {DT_ARCH_DIFF_V2, "v2-crossgroup,v2-nolambda"},
    {DT_ARCH_DIFF, "v2-nosigmoid"},
    {DT_ARCH_DIFF, "transformer"},    {DT_ARCH_DIFF, "transformer-1.5h"}, {DT_ARCH_DIFF, "transformer-2hd"},
    {DT_ARCH_DIFF, "transformer-2hd,alibi"},
};
#define N_VARIANTS ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

/* The small test model of test_model.c (4 query heads of width 8, or 8 for V2 from a preset of 4
 * heads) with the variant applied, weights scaled up so that attention is far from uniform. */
static void make_variant(dt_model *m, const variant *v, int kv_heads, uint64_t seed) {
    dt_config c;
    dt_error err;
    assert_int_equal(dt_config_preset(&c, "tiny", v->arch == DT_ARCH_DIFF_V2 ? DT_ARCH_DIFF : v->arch, &err), 0);
    c.vocab_size = 40;
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = kv_heads;
    c.head_dim = 8;
    c.max_position_embeddings = 64;
    c.lambda_std_dev = 0.3f;
    if (v->arch == DT_ARCH_DIFF_V2 && dt_config_ablation(&c, &c, "v2", &err) != 0) fail_msg("%s", err.msg);
    char names[128];
    snprintf(names, sizeof names, "%s", v->ablation);
    for (char *save = NULL, *tok = strtok_r(names, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (dt_config_ablation(&c, &c, tok, &err) != 0) fail_msg("%s: %s", tok, err.msg);
    if (dt_model_create(m, &c, &err) != 0) fail_msg("%s", err.msg);
    dt_model_init_random(m, seed);
    uint64_t rng = seed * 7 + 1;
    for (int i = 0; i < m->n_tensors; i++) {
        const dt_tensor *t = &m->tensors[i];
        float *p = m->params + t->offset;
        for (size_t j = 0; j < t->numel; j++) {
            if (t->decay) p[j] *= 8.0f;
            else if (p[j] == 1.0f) p[j] += 0.2f * dt_rng_normal(&rng);
        }
    }
}

static const char *label(const dt_model *m) {
    static char buf[96];
    dt_config_describe(&m->cfg, buf, sizeof buf);
    return buf;
}

static void random_tokens(int *t, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int)(dt_rng_next(&seed) % (uint64_t)V);
}

/* ---------------------------------------------------------------- names and configs */

static void test_ablation_names(void **state) {
    (void)state;
    dt_config base, v;
    dt_error err;
    assert_int_equal(dt_config_preset(&base, "small", DT_ARCH_DIFF, &err), 0);
    assert_int_equal(dt_config_ablation(&v, &base, "alibi", &err), 0);
    assert_int_equal(v.position, DT_POS_ALIBI);
    assert_int_equal(dt_config_ablation(&v, &base, "nope", &err), 0);
    assert_int_equal(v.position, DT_POS_NONE);
    assert_int_equal(dt_config_ablation(&v, &v, "rope", &err), 0);
    assert_int_equal(v.position, DT_POS_ROPE);
    assert_int_equal(dt_config_ablation(&v, &base, "softmax1", &err), 0);
    assert_int_equal(v.softmax1, 1);
    assert_int_equal(dt_config_ablation(&v, &base, "nonorm", &err), 0);
    assert_int_equal(v.no_head_norm, 1);
    assert_int_equal(dt_config_ablation(&v, &base, "fixedlambda", &err), 0);
    assert_int_equal(v.fixed_lambda, 1);
    /* V2 of the small preset: h = 4 output heads (the matched Transformer's), 8 query heads */
    assert_int_equal(dt_config_ablation(&v, &base, "v2", &err), 0);
    assert_int_equal(v.arch, DT_ARCH_DIFF_V2);
    assert_int_equal(v.num_attention_heads, 8);
    assert_int_equal(v.head_dim, base.head_dim);
    dt_config p;
    assert_int_equal(dt_config_preset(&p, "small", DT_ARCH_DIFF_V2, &err), 0);
    assert_memory_equal(&p, &v, sizeof p);
    dt_config mb = dt_config_matched(&v);
    assert_int_equal(mb.arch, DT_ARCH_LLAMA);
    assert_int_equal(mb.num_attention_heads, 4);
    /* every listed name is accepted by a DIFF base */
    char names[512];
    snprintf(names, sizeof names, "%s", dt_ablation_names());
    for (char *tok = strtok(names, ","); tok; tok = strtok(NULL, ","))
        if (dt_config_ablation(&v, &base, tok, &err) != 0) fail_msg("%s: %s", tok, err.msg);
    /* refusals name the problem */
    dt_config llama = dt_config_matched(&base);
    assert_int_equal(dt_config_ablation(&v, &llama, "nonorm", &err), -1);
    assert_non_null(strstr(err.msg, "nonorm"));
    assert_non_null(strstr(err.msg, "llama"));
    assert_int_equal(dt_config_ablation(&v, &llama, "fixedlambda", &err), -1);
    assert_int_equal(dt_config_ablation(&v, &base, "alibj", &err), -1);
    assert_non_null(strstr(err.msg, "alibj"));
    assert_int_equal(dt_config_ablation(&v, &base, NULL, &err), -1);
    char d[96];
    assert_int_equal(dt_config_ablation(&v, &base, "alibi", &err), 0);
    assert_int_equal(dt_config_ablation(&v, &v, "nonorm", &err), 0);
    dt_config_describe(&v, d, sizeof d);
    assert_string_equal(d, "diffllama+alibi+nonorm");
}

static void test_validation(void **state) {
    (void)state;
    dt_config c;
    dt_error err;
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_LLAMA, &err), 0);
    c.no_head_norm = 1;
    assert_int_equal(dt_config_validate(&c, "x", &err), -1);
    assert_non_null(strstr(err.msg, "head_norm"));
    c.no_head_norm = 0;
    c.fixed_lambda = 1;
    assert_int_equal(dt_config_validate(&c, "x", &err), -1);
    assert_non_null(strstr(err.msg, "fixed_lambda"));
    c.fixed_lambda = 0;
    c.position = (dt_position)7;
    assert_int_equal(dt_config_validate(&c, "x", &err), -1);
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &err), 0);
    c.no_head_norm = 1;
    c.use_subln_weight = 1;
    assert_int_equal(dt_config_validate(&c, "x", &err), -1);
    assert_non_null(strstr(err.msg, "subln"));
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_DIFF_V2, &err), 0);
    c.num_attention_heads = 5;
    c.num_key_value_heads = 5;
    assert_int_equal(dt_config_validate(&c, "x", &err), -1);
    assert_non_null(strstr(err.msg, "even"));
}

/* config.json round trip of every option, and the keys as written */
static void test_config_round_trip(void **state) {
    (void)state;
    for (int i = 0; i < N_VARIANTS; i++) {
        dt_model m;
        make_variant(&m, &VARIANTS[i], 2, 1);
        char path[1200];
        tu_path(path, sizeof path, "config.json");
        dt_error err;
        dt_config back;
        assert_int_equal(dt_config_save(&m.cfg, path, &err), 0);
        if (dt_config_load(&back, path, &err) != 0) fail_msg("%s: %s", label(&m), err.msg);
        assert_memory_equal(&back, &m.cfg, sizeof back);
        char *text = tu_read_file(path, NULL);
        if (m.cfg.position == DT_POS_ALIBI) assert_non_null(strstr(text, "\"position\":\t\"alibi\""));
        if (m.cfg.position == DT_POS_NONE) assert_non_null(strstr(text, "\"position\":\t\"none\""));
        if (m.cfg.arch == DT_ARCH_DIFF_V2) assert_non_null(strstr(text, "\"model_type\":\t\"difftrans_v2\""));
        if (m.cfg.no_head_norm) assert_non_null(strstr(text, "\"head_norm\":\tfalse"));
        free(text);
        dt_model_free(&m);
    }
    /* bad values of our keys are refused with the file and key named */
    static const char *bad[][2] = {
        {"{\"model_type\":\"llama\",\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":2,\"difftrans\":{\"position\":\"sinusoid\"}}",
         "position 'sinusoid'"},
        {"{\"model_type\":\"llama\",\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":2,\"difftrans\":{\"position\":3}}",
         "difftrans.position"},
        {"{\"model_type\":\"llama\",\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":2,\"difftrans\":{\"softmax1\":1}}",
         "softmax1"},
        {"{\"model_type\":\"llama\",\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":2,\"difftrans\":{\"head_norm\":false}}",
         "head_norm"},
        {"{\"model_type\":\"difftrans_v2\",\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":3,\"num_key_value_heads\":1,\"head_dim\":4}",
         "even"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[1200];
        tu_path(path, sizeof path, "bad.json");
        tu_write_file(path, bad[i][0], strlen(bad[i][0]));
        dt_config c;
        dt_error err = {0};
        assert_int_equal(dt_config_load(&c, path, &err), -1);
        if (!strstr(err.msg, path) || !strstr(err.msg, bad[i][1])) fail_msg("expected '%s' in: %s", bad[i][1], err.msg);
    }
}

/* the parameter count covers every variant: it is what dt_model_create allocates */
static void test_parameter_counts(void **state) {
    (void)state;
    for (int i = 0; i < N_VARIANTS; i++) {
        dt_model m;
        make_variant(&m, &VARIANTS[i], 2, 1);
        assert_int_equal(dt_config_param_count(&m.cfg), m.n_params);
        dt_model_free(&m);
    }
    dt_error err;
    dt_config d, v2, fixed;
    assert_int_equal(dt_config_preset(&d, "small", DT_ARCH_DIFF, &err), 0);
    dt_config base = dt_config_matched(&d);
    assert_int_equal(dt_config_ablation(&v2, &d, "v2", &err), 0);
    assert_int_equal(dt_config_ablation(&fixed, &d, "fixedlambda", &err), 0);
    const size_t L = (size_t)d.num_hidden_layers, C = (size_t)d.hidden_size, hd = (size_t)d.head_dim;
    const size_t h = (size_t)base.num_attention_heads;
    /* fixed λ: the DIFF model less its four λ vectors per layer = exactly the baseline's count */
    assert_int_equal(dt_config_param_count(&fixed), dt_config_param_count(&base));
    assert_int_equal(dt_config_param_count(&d) - dt_config_param_count(&fixed), 4 * hd * L);
    /* V2 over its matched baseline: h more query heads and W_λ [h, C] per layer */
    assert_int_equal(dt_config_param_count(&v2) - dt_config_param_count(&base), L * (h * hd * C + h * C));
    dt_config back = dt_config_matched(&v2);
    assert_memory_equal(&back, &base, sizeof back);
}

/* ---------------------------------------------------------------- numerics */

/* dt_decode_step position by position against the full forward's logits */
static void check_decode_model(const dt_model *mp, float tol) {
    const dt_model m = *mp;
    dt_error err;
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
        if (!(d <= tol)) fail_msg("%s kv %d: position %d differs by %g", label(&m), m.cfg.num_key_value_heads, t, d);
    }
    dt_kvcache_free(kc);
    dt_runstate_free(rs);
}

static void check_decode(const variant *v, int kv) {
    dt_model m;
    make_variant(&m, v, kv, 11 + kv);
    check_decode_model(&m, 2e-5f);
    dt_model_free(&m);
}

static void test_decode_equals_forward(void **state) {
    (void)state;
    for (int i = 0; i < N_VARIANTS; i++) {
        check_decode(&VARIANTS[i], 2);
        if (VARIANTS[i].arch == DT_ARCH_DIFF_V2 && !strstr(VARIANTS[i].ablation, "crossgroup"))
            check_decode(&VARIANTS[i], 1);
    }
}

/* every parameter tensor, a few entries each, against central differences, on both kernels */
static void check_gradients(const variant *v, int kv, dt_attention_kernel kernel) {
    dt_model m;
    make_variant(&m, v, kv, 3);
    char msg[512];
    if (tu_model_gradient_check(&m, kernel, 3, msg, sizeof msg) != 0)
        fail_msg("%s (%s kernel): %s", label(&m), kernel == DT_ATTENTION_FUSED ? "fused" : "reference", msg);
    dt_model_free(&m);
}

static void test_gradients(void **state) {
    (void)state;
    for (int i = 0; i < N_VARIANTS; i++) {
        check_gradients(&VARIANTS[i], 2, DT_ATTENTION_REFERENCE);
        check_gradients(&VARIANTS[i], 2, DT_ATTENTION_FUSED);
    }
}

/* the fused kernel against the reference one through the whole model (logits, loss, every
 * gradient), at a length that crosses the fused kernel's tiles */
static void check_fused(const variant *v, int kv, int T) {
    dt_model m;
    make_variant(&m, v, kv, 17);
    char msg[512];
    if (tu_fused_matches_reference(&m, 2, T, msg, sizeof msg) != 0) fail_msg("%s: %s", label(&m), msg);
    dt_model_free(&m);
}

static void test_fused_matches_reference(void **state) {
    (void)state;
    for (int i = 0; i < N_VARIANTS; i++) check_fused(&VARIANTS[i], 2, 37);
}

/* DIFF V2's per-token λ is sigmoid(W_λ x_t) of the attention block's normalised input: it
 * differs between tokens, lies in (0, 1), and follows W_λ */
static void test_v2_token_lambda(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_variant(&m, &(variant){DT_ARCH_DIFF_V2, ""}, 2, 9);
    const int T = 7, h = m.cfg.num_attention_heads / 2;
    int tok[7];
    random_tokens(tok, T, m.cfg.vocab_size, 3);
    dt_runstate *rs = dt_runstate_create(&m, 1, T, &err);
    assert_int_equal(dt_forward(&m, rs, tok, NULL, 1, T, NULL, &err), 0);
    size_t n = 0;
    const float *lam = dt_runstate_token_lambda(rs, 1, &n);
    assert_non_null(lam);
    assert_int_equal(n, (size_t)T * h);
    float lo = 1, hi = 0;
    for (int i = 0; i < T * h; i++) {
        assert_true(lam[i] > 0.0f && lam[i] < 1.0f);
        lo = fminf(lo, lam[i]), hi = fmaxf(hi, lam[i]);
    }
    assert_true(hi - lo > 0.05f);
    /* W_λ = 0 gives λ = 1/2 everywhere */
    memset(m.w.layers[1].lambda_proj, 0, sizeof(float) * (size_t)h * m.cfg.hidden_size);
    assert_int_equal(dt_forward(&m, rs, tok, NULL, 1, T, NULL, &err), 0);
    for (int i = 0; i < T * h; i++) assert_true(lam[i] == 0.5f);
    dt_runstate_free(rs);
    dt_model_free(&m);
    make_variant(&m, &(variant){DT_ARCH_DIFF, ""}, 2, 9);
    rs = dt_runstate_create(&m, 1, T, &err);
    assert_int_equal(dt_forward(&m, rs, tok, NULL, 1, T, NULL, &err), 0);
    assert_null(dt_runstate_token_lambda(rs, 0, &n));
    assert_int_equal(n, 0);
    dt_runstate_free(rs);
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- checkpoints, export */

static void test_save_load(void **state) {
    (void)state;
    for (int i = 0; i < N_VARIANTS; i++) {
        dt_model m, r;
        dt_error err;
        make_variant(&m, &VARIANTS[i], 2, 21);
        char dir[1024];
        tu_path(dir, sizeof dir, "variant");
        assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
        if (dt_model_load(&r, dir, &err) != 0) fail_msg("%s: %s", label(&m), err.msg);
        assert_memory_equal(&r.cfg, &m.cfg, sizeof m.cfg);
        assert_int_equal(r.n_params, m.n_params);
        assert_memory_equal(r.params, m.params, m.n_params * sizeof(float));
        dt_model_free(&r);
        dt_model_free(&m);
    }
}

/* export --hf: refused, naming the option, for what transformers cannot load; fixed λ becomes
 * diffllama with zero λ vectors and keeps the logits */
static void test_hf_export(void **state) {
    (void)state;
    for (int i = 0; i < N_VARIANTS; i++) {
        dt_model m;
        dt_error err;
        make_variant(&m, &VARIANTS[i], 2, 31);
        char dir[1024];
        snprintf(dir, sizeof dir, "hf_%d", i);
        char path[1100];
        tu_path(path, sizeof path, dir);
        int rc = dt_model_save(&m, path, 1, &err);
        const int plain_llama = m.cfg.arch == DT_ARCH_LLAMA && m.cfg.position == DT_POS_ROPE && !m.cfg.softmax1;
        if (!m.cfg.fixed_lambda && !plain_llama) {
            if (rc != -1) fail_msg("%s: exported for HF", label(&m));
            const char *want = m.cfg.arch == DT_ARCH_DIFF_V2        ? "difftrans_v2"
                               : m.cfg.position == DT_POS_ALIBI     ? "alibi"
                               : m.cfg.position == DT_POS_NONE      ? "position = none"
                               : m.cfg.softmax1                     ? "softmax1"
                                                                    : "head_norm";
            if (!strstr(err.msg, want)) fail_msg("%s: expected '%s' in: %s", label(&m), want, err.msg);
            assert_false(tu_file_exists(path));
            dt_model_free(&m);
            continue;
        }
        if (rc != 0) fail_msg("%s: %s", label(&m), err.msg);
        dt_model e;
        assert_int_equal(dt_model_load(&e, path, &err), 0);
        if (plain_llama) { /* the baselines of other head counts and widths: llama with its head_dim */
            assert_memory_equal(&e.cfg, &m.cfg, sizeof e.cfg);
            assert_true(tu_logits_max_diff(&m, &e, 9, 4, 1) < 1e-6f);
            dt_model_free(&e);
            dt_model_free(&m);
            continue;
        }
        assert_int_equal(e.cfg.fixed_lambda, 0);
        assert_non_null(dt_model_find(&e, "model.layers.1.self_attn.lambda_k2"));
        for (int l = 0; l < 2; l++) assert_true(dt_model_lambda(&e, l) == dt_lambda_init(l));
        assert_true(tu_logits_max_diff(&m, &e, 9, 4, 1) < 1e-6f);
        dt_model_free(&e);
        dt_model_free(&m);
    }
}

/* each ablation changes the model's output (no option is silently ignored) */
static void test_options_change_the_model(void **state) {
    (void)state;
    for (int i = 0; i < N_VARIANTS; i++) {
        dt_model m, plain;
        dt_error err;
        make_variant(&m, &VARIANTS[i], 2, 5);
        /* the same weights without the option (fixed λ and V2 change the layout: skip) */
        if (m.cfg.fixed_lambda || VARIANTS[i].ablation[0] == 'v' || VARIANTS[i].ablation[0] == 't' ||
            !VARIANTS[i].ablation[0]) {
            dt_model_free(&m);
            continue;
        }
        dt_config c = m.cfg;
        c.position = DT_POS_ROPE;
        c.softmax1 = 0;
        c.no_head_norm = 0;
        assert_int_equal(dt_model_create(&plain, &c, &err), 0);
        memcpy(plain.params, m.params, m.n_params * sizeof(float));
        float d = tu_logits_max_diff(&m, &plain, 12, 6, 0);
        if (!(d > 1e-3f && isfinite(d))) fail_msg("%s: logits equal those without the option (%g)", label(&m), d);
        dt_model_free(&plain);
        dt_model_free(&m);
    }
}

/* ---------------------------------------------------------------- the V2 ablations, the baselines */

static dt_config small_diff(int kv) {
    dt_config c;
    dt_error err;
    if (dt_config_preset(&c, "small", DT_ARCH_DIFF, &err) != 0) fail_msg("%s", err.msg);
    c.num_key_value_heads = kv;
    return c;
}

static void expect_refused(const dt_config *base, const char *name, const char *want) {
    dt_config v;
    dt_error err = {0};
    if (dt_config_ablation(&v, base, name, &err) != -1) fail_msg("%s accepted", name);
    if (!strstr(err.msg, want)) fail_msg("%s: expected '%s' in: %s", name, want, err.msg);
}

/* the matched baselines' shapes and parameter counts, from a DIFF of h = 2 differential heads of
 * width 2·32 (4 query heads of 32) */
static void test_baseline_variants(void **state) {
    (void)state;
    dt_error err;
    for (int kv = 1; kv <= 4; kv *= 2) {
        const dt_config d = small_diff(kv), t = dt_config_matched(&d);
        dt_config v, v2, t15, t2;
        assert_int_equal(dt_config_ablation(&v, &d, "transformer", &err), 0);
        assert_memory_equal(&v, &t, sizeof v);
        assert_int_equal(dt_config_ablation(&v2, &d, "v2", &err), 0);
        /* 1.5× the Transformer's 4 heads: 6 of 32; kv heads kept where they divide 6 (1, 2), else
         * 1.5× as many (4 → 6) */
        assert_int_equal(dt_config_ablation(&t15, &d, "transformer-1.5h", &err), 0);
        assert_int_equal(t15.arch, DT_ARCH_LLAMA);
        assert_int_equal(t15.num_attention_heads, 6);
        assert_int_equal(t15.head_dim, d.head_dim);
        assert_int_equal(t15.num_key_value_heads, kv == 4 ? 6 : kv);
        const size_t L = (size_t)d.num_hidden_layers, C = (size_t)d.hidden_size, hd = (size_t)d.head_dim;
        const size_t h = (size_t)t.num_attention_heads; /* V2's output heads */
        if (kv != 4) /* the kv heads kept: DIFF V2's parameters less W_λ */
            assert_int_equal(dt_config_param_count(&t15), dt_config_param_count(&v2) - L * h * C);
        else /* MHA: 2 more kv heads of k and v besides */
            assert_int_equal(dt_config_param_count(&t15), dt_config_param_count(&v2) - L * h * C + L * 2 * 2 * hd * C);
        /* half the heads, twice as wide: the Transformer's attention width and parameters */
        if (kv == 1) {
            expect_refused(&d, "transformer-2hd", "even");
            continue;
        }
        assert_int_equal(dt_config_ablation(&t2, &d, "transformer-2hd", &err), 0);
        assert_int_equal(t2.num_attention_heads, 2);
        assert_int_equal(t2.num_key_value_heads, kv / 2);
        assert_int_equal(t2.head_dim, 2 * d.head_dim);
        assert_int_equal(dt_config_param_count(&t2), dt_config_param_count(&t));
        /* a llama base is its own Transformer: the names apply to it directly */
        dt_config again;
        assert_int_equal(dt_config_ablation(&again, &t, "transformer-2hd", &err), 0);
        assert_memory_equal(&again, &t2, sizeof again);
        assert_int_equal(dt_config_ablation(&again, &t, "transformer", &err), 0);
        assert_memory_equal(&again, &t, sizeof again);
        /* a V2 base: its matched Transformer first */
        assert_int_equal(dt_config_ablation(&again, &v2, "transformer-1.5h", &err), 0);
        assert_memory_equal(&again, &t15, sizeof again);
    }
    /* 1.5 × an odd head count is refused */
    dt_config odd;
    assert_int_equal(dt_config_preset(&odd, "small", DT_ARCH_LLAMA, &err), 0);
    odd.num_attention_heads = odd.num_key_value_heads = 5;
    odd.head_dim = 16;
    assert_int_equal(dt_config_validate(&odd, "x", &err), 0);
    expect_refused(&odd, "transformer-1.5h", "1.5 × 5");
    expect_refused(&odd, "transformer-2hd", "even");
}

/* the V2 ablations' configs: names, validation, combinations, descriptions, parameter counts */
static void test_v2_variant_configs(void **state) {
    (void)state;
    dt_error err;
    const dt_config d = small_diff(2);
    dt_config v2, cross, nol, nos, both, back;
    assert_int_equal(dt_config_ablation(&v2, &d, "v2", &err), 0);
    assert_int_equal(dt_config_ablation(&cross, &d, "v2-crossgroup", &err), 0);
    assert_int_equal(dt_config_ablation(&nol, &d, "v2-nolambda", &err), 0);
    assert_int_equal(dt_config_ablation(&nos, &d, "v2-nosigmoid", &err), 0);
    /* each is V2 with one option changed */
    dt_config x = cross;
    x.v2_pairs = DT_V2_PAIRS_GROUP;
    assert_memory_equal(&x, &v2, sizeof x);
    x = nol;
    x.v2_lambda = DT_V2_LAMBDA_SIGMOID;
    assert_memory_equal(&x, &v2, sizeof x);
    assert_int_equal(nos.v2_lambda, DT_V2_LAMBDA_LINEAR);
    assert_int_equal(cross.v2_pairs, DT_V2_PAIRS_CROSS);
    /* on a V2 base they combine, and "v2" keeps them */
    assert_int_equal(dt_config_ablation(&both, &cross, "v2-nolambda", &err), 0);
    assert_int_equal(both.v2_pairs, DT_V2_PAIRS_CROSS);
    assert_int_equal(both.v2_lambda, DT_V2_LAMBDA_NONE);
    assert_int_equal(dt_config_ablation(&x, &both, "v2", &err), 0);
    assert_memory_equal(&x, &both, sizeof x);
    char desc[96];
    dt_config_describe(&both, desc, sizeof desc);
    assert_string_equal(desc, "difftrans_v2+crossgroup+nolambda");
    dt_config_describe(&nos, desc, sizeof desc);
    assert_string_equal(desc, "difftrans_v2+nosigmoid");
    /* the matched Transformer drops them */
    back = dt_config_matched(&both);
    x = dt_config_matched(&v2);
    assert_memory_equal(&back, &x, sizeof back);
    /* W_λ [h, C] per layer is the only parameter difference */
    const size_t L = (size_t)d.num_hidden_layers, C = (size_t)d.hidden_size, h = (size_t)v2.num_attention_heads / 2;
    assert_int_equal(dt_config_param_count(&cross), dt_config_param_count(&v2));
    assert_int_equal(dt_config_param_count(&nos), dt_config_param_count(&v2));
    assert_int_equal(dt_config_param_count(&nol), dt_config_param_count(&v2) - L * h * C);
    /* the query heads each output head reads */
    assert_int_equal(dt_config_query_head(&v2, 3, 0), 6);
    assert_int_equal(dt_config_query_head(&v2, 3, 1), 7);
    assert_int_equal(dt_config_query_head(&cross, 3, 0), 3);
    assert_int_equal(dt_config_query_head(&cross, 3, 1), 3 + (int)h);
    assert_int_equal(dt_config_query_head(&d, 1, 1), 1 + d.num_attention_heads / 2);
    /* refusals: a single kv head cannot be crossed; the options on other architectures */
    const dt_config mqa = small_diff(1);
    expect_refused(&mqa, "v2-crossgroup", "num_key_value_heads");
    assert_int_equal(dt_config_ablation(&x, &mqa, "v2-nolambda", &err), 0);
    x = dt_config_matched(&d);
    x.v2_pairs = DT_V2_PAIRS_CROSS;
    assert_int_equal(dt_config_validate(&x, "x", &err), -1);
    assert_non_null(strstr(err.msg, "v2_pairs"));
    x = d;
    x.v2_lambda = DT_V2_LAMBDA_NONE;
    assert_int_equal(dt_config_validate(&x, "x", &err), -1);
    assert_non_null(strstr(err.msg, "v2_lambda"));
    x = v2;
    x.v2_lambda = (dt_v2_lambda)3;
    assert_int_equal(dt_config_validate(&x, "x", &err), -1);
    assert_non_null(strstr(err.msg, "v2_lambda"));
}

/* config.json: the keys as written and read back, refusals, and a V2 file without them */
static void test_v2_config_keys(void **state) {
    (void)state;
    dt_error err;
    const dt_config d = small_diff(2);
    static const char *const names[] = {"v2", "v2-crossgroup", "v2-nolambda", "v2-nosigmoid"};
    static const char *const keys[] = {NULL, "\"v2_pairs\":\t\"j,j+h\"", "\"v2_lambda\":\t\"none\"",
                                       "\"v2_lambda\":\t\"linear\""};
    char path[1200];
    tu_path(path, sizeof path, "ablations_v2config.json");
    for (int i = 0; i < 4; i++) {
        dt_config c, back;
        assert_int_equal(dt_config_ablation(&c, &d, names[i], &err), 0);
        assert_int_equal(dt_config_save(&c, path, &err), 0);
        assert_int_equal(dt_config_load(&back, path, &err), 0);
        assert_memory_equal(&back, &c, sizeof back);
        char *text = tu_read_file(path, NULL);
        if (keys[i]) assert_non_null(strstr(text, keys[i]));
        else assert_null(strstr(text, "\"difftrans\"")); /* plain V2: no section of ours, as before */
        free(text);
    }
    static const char *const head = "{\"model_type\":\"difftrans_v2\",\"vocab_size\":8,\"hidden_size\":8,"
                                    "\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":4,"
                                    "\"num_key_value_heads\":2,\"head_dim\":4";
    static const char *const cases[][2] = {
        {"}", NULL}, /* a V2 checkpoint of before these options: plain V2 */
        {",\"difftrans\":{\"v2_pairs\":\"2j,2j+1\",\"v2_lambda\":\"sigmoid\"}}", NULL}, /* the defaults spelt out */
        {",\"difftrans\":{\"v2_pairs\":\"j,j+1\"}}", "v2_pairs \"j,j+1\""},
        {",\"difftrans\":{\"v2_lambda\":1}}", "difftrans.v2_lambda"},
        {",\"difftrans\":{\"v2_lambda\":\"tanh\"}}", "\"tanh\""},
        {",\"difftrans\":{\"v2_pair\":\"j,j+h\"}}", "difftrans.v2_pair"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s", head, cases[i][0]);
        tu_write_file(path, text, strlen(text));
        dt_config c;
        err = (dt_error){0};
        const int rc = dt_config_load(&c, path, &err);
        if (!cases[i][1]) {
            if (rc != 0) fail_msg("%s: %s", text, err.msg);
            assert_int_equal(c.v2_pairs, DT_V2_PAIRS_GROUP);
            assert_int_equal(c.v2_lambda, DT_V2_LAMBDA_SIGMOID);
            continue;
        }
        assert_int_equal(rc, -1);
        if (!strstr(err.msg, path) || !strstr(err.msg, cases[i][1]))
            fail_msg("expected '%s' in: %s", cases[i][1], err.msg);
    }
    /* a crossed V2 file with one kv head: the loader's validation refuses it as a bad file */
    char text[512];
    snprintf(text, sizeof text,
             "{\"model_type\":\"difftrans_v2\",\"vocab_size\":8,\"hidden_size\":8,\"intermediate_size\":8,"
             "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":4,"
             "\"difftrans\":{\"v2_pairs\":\"j,j+h\"}}");
    tu_write_file(path, text, strlen(text));
    dt_config c;
    assert_int_equal(dt_config_load(&c, path, &err), -1);
    assert_int_equal(err.code, DT_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "num_key_value_heads"));
}

/* compare's variant names: each table name is its ablation of the DIFF base, on a preset or on
 * the caller's own DIFF config, with the report's display name */
static void test_compare_variants(void **state) {
    (void)state;
    dt_error err;
    dt_config tiny;
    assert_int_equal(dt_config_preset(&tiny, "tiny", DT_ARCH_DIFF, &err), 0);
    static const char *const names[][2] = {
        {"transformer", "Transformer"},     {"transformer-1.5h", "Transformer 1.5h"},
        {"transformer-2hd", "Transformer 2hd"}, {"v2", "DIFF V2"},
        {"v2-crossgroup", "DIFF V2 cross-group"}, {"v2-nolambda", "DIFF V2 no lambda"},
        {"v2-nosigmoid", "DIFF V2 no sigmoid"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        dt_config a, b, want;
        if (dt_cmp_variant_config(names[i][0], "tiny", &a, &err) != 0) fail_msg("%s: %s", names[i][0], err.msg);
        assert_int_equal(dt_config_ablation(&want, &tiny, names[i][0], &err), 0);
        assert_memory_equal(&a, &want, sizeof a);
        assert_string_equal(dt_cmp_variant_display(names[i][0]), names[i][1]);
        /* on a DIFF config of the caller's: another size, the same variant of it */
        dt_config own = tiny;
        own.hidden_size = 96;
        own.num_attention_heads = 8; /* h = 4 differential heads of 2·12 */
        own.num_key_value_heads = 4;
        own.head_dim = 12;
        if (dt_cmp_variant_config_base(names[i][0], &own, &b, &err) != 0) fail_msg("%s: %s", names[i][0], err.msg);
        assert_int_equal(dt_config_ablation(&want, &own, names[i][0], &err), 0);
        assert_memory_equal(&b, &want, sizeof b);
    }
    dt_config a, want;
    assert_int_equal(dt_cmp_variant_config("diff", "tiny", &a, &err), 0);
    assert_memory_equal(&a, &tiny, sizeof a);
    assert_string_equal(dt_cmp_variant_display("diff"), "DIFF");
    assert_string_equal(dt_cmp_variant_display("alibi"), "alibi");
    assert_int_equal(dt_cmp_variant_config("diff-subln", "tiny", &a, &err), 0);
    assert_int_equal(a.use_subln_weight, 1);
    /* BASE+A with any table name as BASE, and chains */
    assert_int_equal(dt_cmp_variant_config("transformer-2hd+alibi", "tiny", &a, &err), 0);
    assert_int_equal(dt_config_ablation(&want, &tiny, "transformer-2hd", &err), 0);
    want.position = DT_POS_ALIBI;
    assert_memory_equal(&a, &want, sizeof a);
    assert_int_equal(dt_cmp_variant_config("v2-crossgroup+nope+softmax1", "tiny", &a, &err), 0);
    assert_int_equal(a.v2_pairs, DT_V2_PAIRS_CROSS);
    assert_int_equal(a.position, DT_POS_NONE);
    assert_int_equal(a.softmax1, 1);
    assert_int_equal(dt_cmp_variant_config("transformer+v2-crossgroup", "tiny", &a, &err), 0);
    assert_int_equal(a.arch, DT_ARCH_DIFF_V2);
    /* refusals name the variant */
    assert_int_equal(dt_cmp_variant_config("bogus", "tiny", &a, &err), -1);
    assert_non_null(strstr(err.msg, "variant 'bogus'"));
    assert_int_equal(dt_cmp_variant_config("bogus+alibi", "tiny", &a, &err), -1);
    assert_non_null(strstr(err.msg, "'bogus'"));
    assert_int_equal(dt_cmp_variant_config("transformer+nonorm", "tiny", &a, &err), -1);
    assert_non_null(strstr(err.msg, "nonorm"));
    const dt_config llama = dt_config_matched(&tiny);
    assert_int_equal(dt_cmp_variant_config_base("diff", &llama, &a, &err), -1);
    assert_non_null(strstr(err.msg, "DIFF"));
    dt_config broken = tiny;
    broken.head_dim = 0;
    assert_int_equal(dt_cmp_variant_config_base("transformer", &broken, &a, &err), -1);
    assert_non_null(strstr(err.msg, "head_dim"));
}

/* The two maps of an output head: plain V2 takes query heads 2j and 2j + 1 (one kv head), the
 * crossed variant j and j + h (kv heads j/g and j/g + KV/2). With both kv heads' k and v rows made
 * equal, the kv head no longer matters, and the crossed model with its q_proj rows moved so that
 * its query head j is plain head 2j and its head j + h plain head 2j + 1 must give plain V2's
 * logits; with distinct kv heads (or the rows not moved) it must not. */
static void move_query_rows(dt_model *dst, const dt_model *src) {
    const int h = src->cfg.num_attention_heads / 2, hd = src->cfg.head_dim, C = src->cfg.hidden_size;
    for (int l = 0; l < src->cfg.num_hidden_layers; l++)
        for (int j = 0; j < h; j++)
            for (int w = 0; w < 2; w++)
                memcpy(dst->w.layers[l].q_proj + (size_t)(j + w * h) * hd * C,
                       src->w.layers[l].q_proj + (size_t)(2 * j + w) * hd * C, sizeof(float) * (size_t)hd * C);
}

static void check_crossgroup_pairs(const char *extra) {
    char names[64];
    snprintf(names, sizeof names, "v2-crossgroup%s", extra);
    dt_model plain, cross;
    dt_error err;
    make_variant(&plain, &(variant){DT_ARCH_DIFF_V2, extra[0] ? extra + 1 : ""}, 2, 41);
    make_variant(&cross, &(variant){DT_ARCH_DIFF_V2, names}, 2, 41);
    assert_int_equal(cross.n_params, plain.n_params);
    memcpy(cross.params, plain.params, plain.n_params * sizeof(float));
    const float same_weights = tu_logits_max_diff(&plain, &cross, 12, 3, 0);
    if (!(same_weights > 1e-3f && isfinite(same_weights)))
        fail_msg("%s: the same weights give plain V2's logits (%g)", names, same_weights);
    move_query_rows(&cross, &plain);
    const float moved = tu_logits_max_diff(&plain, &cross, 12, 3, 0);
    if (!(moved > 1e-3f && isfinite(moved)))
        fail_msg("%s: moved query rows over distinct kv heads give plain V2's logits (%g)", names, moved);
    /* kv head 1 := kv head 0 in both models */
    const int hd = plain.cfg.head_dim, C = plain.cfg.hidden_size;
    for (dt_model *m = &plain; m; m = m == &plain ? &cross : NULL)
        for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
            memcpy(m->w.layers[l].k_proj + (size_t)hd * C, m->w.layers[l].k_proj, sizeof(float) * (size_t)hd * C);
            memcpy(m->w.layers[l].v_proj + (size_t)hd * C, m->w.layers[l].v_proj, sizeof(float) * (size_t)hd * C);
        }
    const float equal = tu_logits_max_diff(&plain, &cross, 12, 3, 1);
    if (!(equal < 2e-5f)) fail_msg("%s: differs from plain V2 with equal kv heads and moved rows by %g", names, equal);
    memcpy(cross.params, plain.params, plain.n_params * sizeof(float)); /* rows not moved */
    const float unmoved = tu_logits_max_diff(&plain, &cross, 12, 3, 0);
    if (!(unmoved > 1e-3f && isfinite(unmoved)))
        fail_msg("%s: the pairing does not matter (%g)", names, unmoved);
    (void)err;
    dt_model_free(&cross);
    dt_model_free(&plain);
}

static void test_crossgroup_pairs(void **state) {
    (void)state;
    check_crossgroup_pairs("");
    check_crossgroup_pairs(",alibi"); /* ALiBi's slopes follow the pairs */
    check_crossgroup_pairs(",v2-nosigmoid");
}

/* λ of the first layer from its definition: z = W_λ·RMSNorm(embedding)·g; sigmoid(z) for V2, z
 * for v2-nosigmoid (the same weights), 1 for v2-nolambda, which has no W_λ at all */
static void test_v2_lambda_modes(void **state) {
    (void)state;
    dt_model sig, lin, none;
    dt_error err;
    make_variant(&sig, &(variant){DT_ARCH_DIFF_V2, ""}, 2, 43);
    make_variant(&lin, &(variant){DT_ARCH_DIFF_V2, "v2-nosigmoid"}, 2, 43);
    make_variant(&none, &(variant){DT_ARCH_DIFF_V2, "v2-nolambda"}, 2, 43);
    const int C = sig.cfg.hidden_size, h = sig.cfg.num_attention_heads / 2, T = 7;
    for (size_t i = 0; i < (size_t)h * C; i++) sig.w.layers[0].lambda_proj[i] *= 4.0f; /* z well outside (0, 1) */
    assert_int_equal(lin.n_params, sig.n_params);
    memcpy(lin.params, sig.params, sig.n_params * sizeof(float));
    int tok[7];
    random_tokens(tok, T, sig.cfg.vocab_size, 8);
    dt_runstate *rs_s = dt_runstate_create(&sig, 1, T, &err), *rs_l = dt_runstate_create(&lin, 1, T, &err);
    dt_runstate *rs_n = dt_runstate_create(&none, 1, T, &err);
    assert_non_null(rs_s), assert_non_null(rs_l), assert_non_null(rs_n);
    assert_int_equal(dt_forward(&sig, rs_s, tok, NULL, 1, T, NULL, &err), 0);
    assert_int_equal(dt_forward(&lin, rs_l, tok, NULL, 1, T, NULL, &err), 0);
    assert_int_equal(dt_forward(&none, rs_n, tok, NULL, 1, T, NULL, &err), 0);
    size_t n;
    const float *ls = dt_runstate_token_lambda(rs_s, 0, &n), *ll = dt_runstate_token_lambda(rs_l, 0, NULL);
    assert_int_equal(n, (size_t)T * h);
    int outside = 0;
    for (int t = 0; t < T; t++) {
        const float *x = sig.w.embed_tokens + (size_t)tok[t] * C, *g = sig.w.layers[0].input_layernorm;
        double ms = 0;
        for (int i = 0; i < C; i++) ms += (double)x[i] * x[i];
        const double r = 1.0 / sqrt(ms / C + sig.cfg.rms_norm_eps);
        for (int j = 0; j < h; j++) {
            double z = 0;
            for (int i = 0; i < C; i++) z += (double)sig.w.layers[0].lambda_proj[(size_t)j * C + i] * x[i] * r * g[i];
            const float got_l = ll[t * h + j], got_s = ls[t * h + j];
            if (!(fabs(got_l - z) < 1e-4 * (1 + fabs(z)))) fail_msg("nosigmoid λ[%d, %d] %g, want %g", t, j, got_l, z);
            const double s = 1.0 / (1.0 + exp(-z));
            if (!(fabs(got_s - s) < 1e-5)) fail_msg("sigmoid λ[%d, %d] %g, want %g", t, j, got_s, s);
            outside += z < 0 || z > 1;
        }
    }
    assert_true(outside > 0); /* unbounded indeed */
    const float *ln = dt_runstate_token_lambda(rs_n, 1, &n);
    assert_int_equal(n, (size_t)T * h);
    for (size_t i = 0; i < n; i++) assert_true(ln[i] == 1.0f);
    /* the λ changes the model: the same weights, other logits */
    const float d = tu_logits_max_diff(&sig, &lin, 9, 2, 0);
    if (!(d > 1e-3f && isfinite(d))) fail_msg("sigmoid and linear λ give the same logits (%g)", d);
    /* no W_λ in the layout, in the file, or among the weights */
    assert_null(dt_model_find(&none, "model.layers.0.self_attn.lambda_proj.weight"));
    assert_non_null(dt_model_find(&sig, "model.layers.0.self_attn.lambda_proj.weight"));
    assert_null(none.w.layers[0].lambda_proj);
    assert_int_equal(none.n_params, sig.n_params - (size_t)sig.cfg.num_hidden_layers * h * C);
    char dir[1024], file[1200];
    tu_path(dir, sizeof dir, "ablations_v2_nolambda");
    assert_int_equal(dt_model_save(&none, dir, 0, &err), 0);
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    dt_safetensors st;
    assert_int_equal(dt_st_open(&st, file, &err), 0);
    assert_int_equal(st.n, none.n_tensors);
    for (int i = 0; i < st.n; i++) assert_null(strstr(st.tensors[i].name, "lambda_proj"));
    dt_st_close(&st);
    /* a V2 checkpoint with W_λ read as v2-nolambda is refused: the tensors contradict the config */
    tu_path(dir, sizeof dir, "ablations_v2_with_lambda");
    assert_int_equal(dt_model_save(&sig, dir, 0, &err), 0);
    snprintf(file, sizeof file, "%s/config.json", dir);
    assert_int_equal(dt_config_save(&none.cfg, file, &err), 0);
    dt_model back;
    assert_int_equal(dt_model_load(&back, dir, &err), -1);
    assert_non_null(strstr(err.msg, "lambda_proj"));
    dt_runstate_free(rs_s), dt_runstate_free(rs_l), dt_runstate_free(rs_n);
    dt_model_free(&sig), dt_model_free(&lin), dt_model_free(&none);
}

/* The combination itself, on made-up query-head outputs: every pairing × λ against its
 * definition, and its backward against central differences */
static double combine_loss(const float *a, const float *z, const float *r, int N, int h, int hd, int pairs, int lam) {
    float out[5 * 3 * 4], l[5 * 3];
    diffv2_combine_forward_with(out, l, z, a, N, h, hd, pairs, lam);
    double s = 0;
    for (int i = 0; i < N * h * hd; i++) s += (double)out[i] * r[i];
    return s;
}

static void test_v2_combine_layer(void **state) {
    (void)state;
    enum { N = 5, h = 3, hd = 4 };
    uint64_t rng = 5;
    float *a = frand(N * 2 * h * hd, 1, &rng), *z = frand(N * h, 2, &rng), *r = frand(N * h * hd, 1, &rng);
    for (int pairs = 0; pairs < 2; pairs++)
        for (int lam = 0; lam < 3; lam++) {
            float *out = fnan(N * h * hd), *l = fnan(N * h);
            diffv2_combine_forward_with(out, l, lam == DIFFV2_LAMBDA_NONE ? NULL : z, a, N, h, hd, pairs, lam);
            for (int n = 0; n < N; n++)
                for (int j = 0; j < h; j++) {
                    const double zz = z[n * h + j];
                    const double want_l = lam == DIFFV2_LAMBDA_NONE ? 1 : lam == DIFFV2_LAMBDA_LINEAR ? zz
                                                                                                    : 1 / (1 + exp(-zz));
                    assert_true(fabs(l[n * h + j] - want_l) < 1e-6);
                    const int p = pairs ? j : 2 * j, q = pairs ? j + h : 2 * j + 1;
                    for (int e = 0; e < hd; e++) {
                        const double want = a[(n * 2 * h + p) * hd + e] - want_l * a[(n * 2 * h + q) * hd + e];
                        if (!(fabs(out[(n * h + j) * hd + e] - want) < 1e-5))
                            fail_msg("pairs %d λ %d: out[%d, %d, %d] %g, want %g", pairs, lam, n, j, e,
                                     out[(n * h + j) * hd + e], want);
                    }
                }
            /* backward: accumulates onto what was there */
            float *da = frand(N * 2 * h * hd, 1, &rng), *dz = frand(N * h, 1, &rng);
            float *da0 = fcopy(da, N * 2 * h * hd), *dz0 = fcopy(dz, N * h);
            diffv2_combine_backward_with(da, lam == DIFFV2_LAMBDA_NONE ? NULL : dz, r, a, l, N, h, hd, pairs, lam);
            const float eps = 1e-2f;
            for (int i = 0; i < N * 2 * h * hd; i++) {
                const float s = a[i];
                a[i] = s + eps;
                const double lp = combine_loss(a, z, r, N, h, hd, pairs, lam);
                a[i] = s - eps;
                const double lm = combine_loss(a, z, r, N, h, hd, pairs, lam);
                a[i] = s;
                const double fd = (lp - lm) / (2 * eps), got = (double)da[i] - da0[i];
                if (!(fabs(fd - got) < 1e-3 + 1e-2 * fabs(fd))) fail_msg("pairs %d λ %d: da[%d] %g vs %g", pairs, lam, i, got, fd);
            }
            for (int i = 0; i < N * h; i++) {
                const float s = z[i];
                z[i] = s + eps;
                const double lp = combine_loss(a, z, r, N, h, hd, pairs, lam);
                z[i] = s - eps;
                const double lm = combine_loss(a, z, r, N, h, hd, pairs, lam);
                z[i] = s;
                const double fd = (lp - lm) / (2 * eps), got = (double)dz[i] - dz0[i];
                if (!(fabs(fd - got) < 1e-3 + 1e-2 * fabs(fd))) fail_msg("pairs %d λ %d: dz[%d] %g vs %g", pairs, lam, i, got, fd);
            }
            free(out), free(l), free(da), free(dz), free(da0), free(dz0);
        }
    free(a), free(z), free(r);
}

/* Variants whose gradients are checked more closely: more entries of every tensor (q_proj and
 * W_λ are where the V2 ablations act; the baselines change every attention shape) */
static const variant CLOSE[] = {
    {DT_ARCH_DIFF_V2, "v2-crossgroup"}, {DT_ARCH_DIFF_V2, "v2-nolambda"}, {DT_ARCH_DIFF_V2, "v2-nosigmoid"},
    {DT_ARCH_DIFF_V2, "v2-crossgroup,alibi"}, {DT_ARCH_DIFF, "transformer-1.5h"}, {DT_ARCH_DIFF, "transformer-2hd"},
};
#define N_CLOSE ((int)(sizeof CLOSE / sizeof CLOSE[0]))

static void test_new_variant_gradients(void **state) {
    (void)state;
    for (int i = 0; i < N_CLOSE; i++)
        for (int k = 0; k < 2; k++) {
            dt_model m;
            make_variant(&m, &CLOSE[i], 2, 57 + i);
            char msg[512];
            const dt_attention_kernel kernel = k ? DT_ATTENTION_FUSED : DT_ATTENTION_REFERENCE;
            if (tu_model_gradient_check(&m, kernel, 12, msg, sizeof msg) != 0)
                fail_msg("%s (%s kernel): %s", label(&m), k ? "fused" : "reference", msg);
            dt_model_free(&m);
        }
}

/* the fused kernel against the reference at the longest context the test model has (several
 * of the fused kernel's tiles, and rows that end inside one), one sequence and three */
static void test_new_variant_fused(void **state) {
    (void)state;
    for (int i = 0; i < N_CLOSE; i++) {
        check_fused(&CLOSE[i], 2, 64);
        dt_model m;
        make_variant(&m, &CLOSE[i], 2, 61);
        char msg[512];
        if (tu_fused_matches_reference(&m, 3, 29, msg, sizeof msg) != 0) fail_msg("%s: %s", label(&m), msg);
        dt_model_free(&m);
    }
}

/* The batched serving step (two slots, prompt chunks and single rows mixed) against the full
 * forward of each sequence; worst relative difference */
static float batch_vs_forward(const dt_model *m) {
    enum { T = 10 };
    const int V = m->cfg.vocab_size;
    dt_error err;
    int seq[2][T];
    random_tokens(seq[0], T, V, 71);
    random_tokens(seq[1], T, V, 72);
    float *want = malloc(sizeof(float) * 2 * T * V), *got = malloc(sizeof(float) * 8 * V);
    dt_runstate *rs = dt_runstate_create(m, 1, T, &err);
    assert_non_null(want), assert_non_null(got), assert_non_null(rs);
    for (int s = 0; s < 2; s++) {
        assert_int_equal(dt_forward(m, rs, seq[s], NULL, 1, T, NULL, &err), 0);
        memcpy(want + (size_t)s * T * V, dt_runstate_logits(rs), sizeof(float) * T * V);
    }
    dt_runstate_free(rs);
    dt_batch *b = dt_batch_create(m, 2, T, 8, DT_KV_F32, &err);
    assert_non_null(b);
    /* steps of {slot, first position, rows} */
    static const int plan[][2][3] = {{{0, 0, 6}, {1, 0, 1}}, {{1, 1, 4}, {0, 6, 1}}, {{0, 7, 3}, {1, 5, 5}}};
    float worst = 0;
    for (int st = 0; st < 3; st++) {
        dt_batch_row rows[8];
        int n = 0;
        for (int g = 0; g < 2; g++)
            for (int i = 0; i < plan[st][g][2]; i++)
                rows[n++] = (dt_batch_row){.slot = plan[st][g][0], .pos = plan[st][g][1] + i,
                                           .token = seq[plan[st][g][0]][plan[st][g][1] + i], .want_logits = 1};
        if (dt_batch_step(m, b, rows, n, got, &err) != 0) fail_msg("%s", err.msg);
        for (int r = 0; r < n; r++) {
            const float d = tu_max_rel_diff(got + (size_t)r * V, want + ((size_t)rows[r].slot * T + rows[r].pos) * V,
                                            (size_t)V, 1.0f);
            if (!(d <= worst)) worst = d; /* NaN propagates */
        }
    }
    dt_batch_free(b);
    free(want), free(got);
    return worst;
}

static void test_new_variant_batch(void **state) {
    (void)state;
    for (int i = 0; i < N_CLOSE; i++) {
        dt_model m;
        make_variant(&m, &CLOSE[i], 2, 63);
        const float d = batch_vs_forward(&m);
        if (!(d < 2e-5f)) fail_msg("%s: the batched step differs from the forward by %g", label(&m), d);
        dt_model_free(&m);
    }
}

/* Quantised V2 ablations: the forward, decoding and the batched step agree on the quantised model,
 * and its checkpoint keeps the variant (and, for v2-nolambda, still has no W_λ) */
static void test_new_variant_quantised(void **state) {
    (void)state;
    static const dt_quant_scheme schemes[] = {DT_QUANT_Q8_0, DT_QUANT_Q4_0};
    for (int i = 0; i < 4; i++) /* the V2 ones of CLOSE */
        for (int s = 0; s < 2; s++) {
            dt_model m, back;
            dt_error err;
            make_variant(&m, &CLOSE[i], 2, 67);
            dt_model f;
            make_variant(&f, &CLOSE[i], 2, 67); /* the float model beside it */
            dt_quant_options o;
            dt_quant_defaults(&o);
            o.scheme = schemes[s];
            o.quiet = 1;
            if (dt_model_quantize(&m, &o, &err) != 0) fail_msg("%s: %s", label(&m), err.msg);
            /* quantised indeed (how far 4 bits move these sharp test weights' logits is test_quant's) */
            const float qf = tu_logits_max_diff(&m, &f, 9, 6, 1);
            if (!(qf > 0 && isfinite(qf)))
                fail_msg("%s %s: quantised logits differ from float by %g", label(&m), dt_quant_scheme_name(schemes[s]),
                         qf);
            check_decode_model(&m, 1e-3f);
            const float d = batch_vs_forward(&m);
            if (!(d < 1e-3f)) fail_msg("%s: quantised batched step differs from the forward by %g", label(&m), d);
            char dir[1024], name[64];
            snprintf(name, sizeof name, "ablations_quantised_%d_%d", i, s);
            tu_path(dir, sizeof dir, name);
            char cmd[1100]; /* a quantised checkpoint is written as a new directory */
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            assert_int_equal(system(cmd), 0);
            assert_int_equal(dt_model_save(&m, dir, 0, &err), 0);
            if (dt_model_load(&back, dir, &err) != 0) fail_msg("%s: %s", label(&m), err.msg);
            assert_memory_equal(&back.cfg, &m.cfg, sizeof m.cfg);
            assert_int_equal(dt_model_quant_scheme(&back, NULL), schemes[s]);
            const float rt = tu_logits_max_diff(&m, &back, 9, 6, 1);
            if (!(rt < 1e-6f)) fail_msg("%s: the quantised checkpoint's logits differ by %g", label(&m), rt);
            if (m.cfg.v2_lambda == DT_V2_LAMBDA_NONE) {
                char file[1200];
                snprintf(file, sizeof file, "%s/model.safetensors", dir);
                dt_safetensors st;
                assert_int_equal(dt_st_open(&st, file, &err), 0);
                for (int t = 0; t < st.n; t++) assert_null(strstr(st.tensors[t].name, "lambda_proj"));
                dt_st_close(&st);
            }
            dt_model_free(&back), dt_model_free(&f), dt_model_free(&m);
        }
}

/* The baselines whose heads do not tile hidden_size: 1.5× the heads (H·hd = 1.5·C) and heads of
 * 2·hd, here up to 128 wide from a base of hd 64 on a width of 32. RoPE rotates hd/2 frequency
 * pairs of each; the fused kernel, decoding and the GGUF file (its key_length says the width) all
 * agree with the reference forward. */
static void test_baseline_head_shapes(void **state) {
    (void)state;
    static const char *const names[] = {"transformer-1.5h", "transformer-2hd"};
    for (int i = 0; i < 2; i++)
        for (int wide = 0; wide < 2; wide++) {
            dt_model m;
            dt_error err;
            make_variant(&m, &(variant){DT_ARCH_DIFF, names[i]}, 2, 73);
            if (wide) { /* the same variant of a DIFF base with heads of 64 */
                dt_config c;
                assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &err), 0);
                c.vocab_size = 40, c.hidden_size = 32, c.intermediate_size = 48, c.num_hidden_layers = 2;
                c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 64, c.max_position_embeddings = 64;
                assert_int_equal(dt_config_ablation(&c, &c, names[i], &err), 0);
                dt_model_free(&m);
                assert_int_equal(dt_model_create(&m, &c, &err), 0);
                dt_model_init_random(&m, 73);
                for (size_t j = 0; j < m.n_params; j++) m.params[j] *= 3.0f; /* sharper maps */
            }
            assert_true(m.cfg.num_attention_heads * m.cfg.head_dim != m.cfg.hidden_size || i == 1);
            check_fused(&(variant){DT_ARCH_DIFF, names[i]}, 2, 37); /* the small one, also in the loops */
            char msg[512];
            if (tu_fused_matches_reference(&m, 2, 37, msg, sizeof msg) != 0) fail_msg("%s: %s", names[i], msg);
            check_decode_model(&m, 2e-5f);
            char name[64], path[1100];
            snprintf(name, sizeof name, "ablations_%s_%d.gguf", names[i], wide);
            tu_path(path, sizeof path, name);
            if (dt_model_save_gguf(&m, path, DT_F32, &err) != 0) fail_msg("%s: %s", names[i], err.msg);
            dt_model g;
            if (dt_model_load(&g, path, &err) != 0) fail_msg("%s: %s", names[i], err.msg);
            assert_int_equal(g.cfg.num_attention_heads, m.cfg.num_attention_heads);
            assert_int_equal(g.cfg.num_key_value_heads, m.cfg.num_key_value_heads);
            assert_int_equal(g.cfg.head_dim, m.cfg.head_dim);
            const float d = tu_logits_max_diff(&m, &g, 9, 7, 1);
            if (!(d < 1e-5f)) fail_msg("%s: GGUF logits differ by %g", names[i], d);
            dt_model_free(&g);
            dt_model_free(&m);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ablation_names),      cmocka_unit_test(test_validation),
        cmocka_unit_test(test_config_round_trip),   cmocka_unit_test(test_parameter_counts),
        cmocka_unit_test(test_decode_equals_forward), cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_fused_matches_reference), cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_hf_export),           cmocka_unit_test(test_v2_token_lambda),
        cmocka_unit_test(test_options_change_the_model), cmocka_unit_test(test_baseline_variants),
        cmocka_unit_test(test_v2_variant_configs),  cmocka_unit_test(test_v2_config_keys),
        cmocka_unit_test(test_compare_variants),    cmocka_unit_test(test_crossgroup_pairs),
        cmocka_unit_test(test_v2_lambda_modes),     cmocka_unit_test(test_v2_combine_layer),
        cmocka_unit_test(test_new_variant_gradients), cmocka_unit_test(test_new_variant_fused),
        cmocka_unit_test(test_new_variant_batch),   cmocka_unit_test(test_new_variant_quantised),
        cmocka_unit_test(test_baseline_head_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
