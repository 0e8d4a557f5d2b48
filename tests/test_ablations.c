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

static void check_decode(const variant *v, int kv) {
    dt_model m;
    dt_error err;
    make_variant(&m, v, kv, 11 + kv);
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
        if (d > 2e-5f) fail_msg("%s kv %d: position %d differs by %g", label(&m), kv, t, d);
    }
    dt_kvcache_free(kc);
    dt_runstate_free(rs);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ablation_names),      cmocka_unit_test(test_validation),
        cmocka_unit_test(test_config_round_trip),   cmocka_unit_test(test_parameter_counts),
        cmocka_unit_test(test_decode_equals_forward), cmocka_unit_test(test_gradients),
        cmocka_unit_test(test_fused_matches_reference), cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_hf_export),           cmocka_unit_test(test_v2_token_lambda),           cmocka_unit_test(test_options_change_the_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
