/* test_analyze.c — the analyses of src/analysis/analyze.c on hand-built cases with known answers:
 * |x| statistics with a planted outlier, the outlier run against its own per-layer maxima,
 * attention-logit quantisation (16 bits ≈ unquantised, 2 bits not), the allocation of hand-written
 * attention rows (baseline and a DIFF row with negative weights) and of a real run (row sums 1 and
 * 1 − λ), teacher-forced needle exact match against greedy decoding, and λ / spike statistics of a
 * synthetic metrics.jsonl. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>

#include "difftrans_analysis.h"
#include "difftrans.h"
#include "testutil.h"

/* ---------------------------------------------------------------- helpers */

static void tiny_model(dt_model *m, dt_arch arch, uint64_t seed) {
    dt_config cfg;
    dt_error err;
    assert_int_equal(dt_config_preset(&cfg, "tiny", arch, &err), 0);
    assert_int_equal(dt_model_create(m, &cfg, &err), 0);
    dt_model_init_random(m, seed);
}

/* Scales v_proj, o_proj and the output head: the attention output matters for the loss. */
static void amplify(dt_model *m, float factor) {
    const dt_config *c = &m->cfg;
    size_t nv = (size_t)c->num_key_value_heads * c->head_dim * c->hidden_size;
    size_t no = (size_t)c->num_attention_heads * c->head_dim * c->hidden_size;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        for (size_t i = 0; i < nv; i++) m->w.layers[l].v_proj[i] *= factor;
        for (size_t i = 0; i < no; i++) m->w.layers[l].o_proj[i] *= factor;
    }
    for (size_t i = 0; i < (size_t)c->vocab_size * c->hidden_size; i++) m->w.lm_head[i] *= factor;
}

/* Scales q_proj and k_proj of every layer: the attention logits grow by factor². */
static void sharpen(dt_model *m, float factor) {
    const dt_config *c = &m->cfg;
    size_t nq = (size_t)c->num_attention_heads * c->head_dim * c->hidden_size;
    size_t nk = (size_t)c->num_key_value_heads * c->head_dim * c->hidden_size;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        for (size_t i = 0; i < nq; i++) m->w.layers[l].q_proj[i] *= factor;
        for (size_t i = 0; i < nk; i++) m->w.layers[l].k_proj[i] *= factor;
    }
}

static int *text_tokens(size_t *n) {
    static const char *s = "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. ";
    size_t len = strlen(s), N = 600;
    int *t = malloc(N * sizeof *t);
    assert_non_null(t);
    for (size_t i = 0; i < N; i++) t[i] = (unsigned char)s[i % len];
    *n = N;
    return t;
}

static void make_testset_n(dt_needle_testset *ts, int n, int needles, int queries) {
    static char corpus_text[4000];
    for (int i = 0; i < (int)sizeof corpus_text; i++) corpus_text[i] = "Some filler words. More of them\n"[i % 32];
    dt_needle_corpus c;
    dt_error err;
    assert_int_equal(dt_needle_corpus_from_bytes(&c, corpus_text, sizeof corpus_text, "corpus", &err), 0);
    dt_needle_params p;
    dt_needle_params_default(&p);
    p.needles = needles;
    p.queries = queries;
    memset(ts, 0, sizeof *ts);
    snprintf(ts->path, sizeof ts->path, "handmade");
    ts->samples = calloc((size_t)n, sizeof *ts->samples);
    assert_non_null(ts->samples);
    for (int i = 0; i < n; i++) {
        if (dt_needle_generate_sample(&p, 120, i / (double)(n > 1 ? n - 1 : 1), 1000 + i, &c, &ts->samples[i], &err) != 0)
            fail_msg("%s", err.msg);
        ts->samples[i].id = i;
    }
    ts->n = n;
    dt_needle_corpus_free(&c);
}

static void make_testset(dt_needle_testset *ts, int n) { make_testset_n(ts, n, 2, 2); }

/* ---------------------------------------------------------------- |x| statistics */

static void test_abs_stats_planted_outlier(void **state) {
    (void)state;
    float x[100];
    for (int i = 0; i < 100; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * (float)(i + 1); /* |x| = 1..100 */
    x[37] = -5000.0f;                                                             /* replaces 38 */
    dt_an_abs_stats s;
    dt_error err;
    assert_int_equal(dt_an_abs_stats_of(x, 100, &s, &err), 0);
    assert_int_equal(s.count, 100);
    assert_true(s.top1 == 5000.0);
    assert_true(s.top10 == 92.0);   /* 5000, 100, 99, ..., 92 */
    assert_true(s.median == 51.5);  /* sorted: 1..37, 39..100, 5000 → (51 + 52) / 2 */
    assert_true(x[37] == -5000.0f); /* input untouched */

    /* odd count, added in pieces through the accumulator, with many ties */
    dt_an_abs_acc a = {0};
    float ones[50], twos[50], big = -7.0f;
    for (int i = 0; i < 50; i++) ones[i] = (i % 2) ? 1.0f : -1.0f, twos[i] = 2.0f;
    assert_int_equal(dt_an_abs_acc_add(&a, ones, 50, &err), 0);
    assert_int_equal(dt_an_abs_acc_add(&a, &big, 1, &err), 0);
    assert_int_equal(dt_an_abs_acc_add(&a, twos, 50, &err), 0);
    dt_an_abs_acc_stats(&a, &s);
    assert_int_equal(s.count, 101);
    assert_true(s.top1 == 7.0 && s.top10 == 2.0 && s.median == 2.0); /* 50 ones, 50 twos, one 7: middle = 2 */
    dt_an_abs_acc_free(&a);

    /* fewer than 10 values: top10 is the smallest */
    float few[3] = {-3, 1, 2};
    assert_int_equal(dt_an_abs_stats_of(few, 3, &s, &err), 0);
    assert_true(s.top1 == 3.0 && s.top10 == 1.0 && s.median == 2.0);
}

static void test_outliers_run(void **state) {
    (void)state;
    size_t n;
    int *tok = text_tokens(&n);
    for (int arch = 0; arch < 2; arch++) {
        dt_model m;
        tiny_model(&m, (dt_arch)arch, 7);
        sharpen(&m, 3.0f);
        dt_an_outliers o;
        dt_error err;
        assert_int_equal(dt_an_outliers_run(&m, tok, n, 64, 3, &o, &err), 0);
        assert_int_equal(o.windows, 3);
        const int L = m.cfg.num_hidden_layers, H = m.cfg.num_attention_heads, C = m.cfg.hidden_size, T = 64;
        /* the count: causal entries of every map, every residual stream entry */
        assert_int_equal(o.logits.count, (size_t)3 * L * H * T * (T + 1) / 2);
        assert_int_equal(o.hidden.count, (size_t)3 * (L + 1) * T * C);
        double lmax = 0, hmax = 0;
        for (int l = 0; l < L; l++) lmax = fmax(lmax, o.layer_logit_max[l]);
        for (int l = 0; l <= L; l++) hmax = fmax(hmax, o.layer_hidden_max[l]);
        assert_true(o.logits.top1 == lmax && o.hidden.top1 == hmax);
        assert_true(o.logits.top10 <= o.logits.top1 && o.logits.median <= o.logits.top10 && o.logits.median > 0);
        /* recompute window 0's layer-0 maximum directly from the run state */
        dt_run_options opt = {.keep_logits = 1};
        dt_runstate *rs = dt_runstate_create_with(&m, 1, T, &opt, &err);
        assert_non_null(rs);
        double w0 = 0;
        for (int w = 0; w < 3; w++) {
            assert_int_equal(dt_forward(&m, rs, tok + w * T, NULL, 1, T, NULL, &err), 0);
            const float *lg = dt_runstate_attention_logits(rs, 0);
            for (size_t i = 0; i < (size_t)H * T * T; i++) w0 = fmax(w0, fabs(lg[i]));
        }
        assert_true(fabs(w0 - o.layer_logit_max[0]) < 1e-6);
        dt_runstate_free(rs);
        dt_an_outliers_free(&o);
        /* too short a text is refused, naming the problem, and leaves nothing to free */
        assert_int_equal(dt_an_outliers_run(&m, tok, 10, 64, 1, &o, &err), -1);
        assert_non_null(strstr(err.msg, "fewer than seq"));
        assert_null(o.layer_logit_max);
        dt_model_free(&m);
    }
    free(tok);
}

/* ---------------------------------------------------------------- quantisation */

static void test_quantize_loss(void **state) {
    (void)state;
    size_t n;
    int *tok = text_tokens(&n);
    for (int arch = 0; arch < 2; arch++) {
        dt_model m;
        tiny_model(&m, (dt_arch)arch, 11);
        sharpen(&m, 6.0f); /* attention logits of order 10, as in a trained model */
        amplify(&m, 8.0f);
        dt_error err;
        double l0, a0, l16, a16, l2, a2;
        size_t c0, c16, c2;
        dt_run_options o = {0};
        assert_int_equal(dt_an_eval_text(&m, &o, tok, n, 48, 3, &l0, &a0, &c0, &err), 0);
        o.logit_bits = 16;
        assert_int_equal(dt_an_eval_text(&m, &o, tok, n, 48, 3, &l16, &a16, &c16, &err), 0);
        o.logit_bits = 2;
        assert_int_equal(dt_an_eval_text(&m, &o, tok, n, 48, 3, &l2, &a2, &c2, &err), 0);
        assert_int_equal(c0, 3 * 48);
        assert_true(a0 >= 0 && a0 <= 1);
        double r16 = fabs(l16 - l0) / l0, r2 = fabs(l2 - l0) / l0;
        print_message("%s: loss %.5f unquantised, relative change %.2e at 16 bits, %.2e at 2 bits\n",
                      arch == DT_ARCH_DIFF ? "DIFF" : "baseline", l0, r16, r2);
        if (!(r16 < 1e-3)) fail_msg("16 bits changed the loss by %g relative (%g vs %g)", r16, l16, l0);
        if (!(r2 > 1e-3)) fail_msg("2 bits changed the loss by only %g relative (%g vs %g)", r2, l2, l0);
        /* per-row scale runs too and 16 bits stays close */
        o.logit_bits = 16;
        o.logit_per_row = 1;
        assert_int_equal(dt_an_eval_text(&m, &o, tok, n, 48, 3, &l16, &a16, &c16, &err), 0);
        assert_true(fabs(l16 - l0) / l0 < 1e-3);
        dt_model_free(&m);
    }
    free(tok);
}

/* The logit-quantisation table is dt_an_eval_text (and dt_an_needle_exact) at each width: the same
 * numbers, row 0 unquantised; widths outside 2..24 are refused before any work. */
static void test_quant_run_rows(void **state) {
    (void)state;
    size_t n;
    int *tok = text_tokens(&n);
    dt_model m;
    tiny_model(&m, DT_ARCH_DIFF, 11);
    sharpen(&m, 6.0f);
    const int bits[3] = {8, 3, 2};
    dt_an_quant_row rows[4];
    dt_error err;
    for (int per_row = 0; per_row < 2; per_row++) {
        const dt_an_quant_params p = {.tokens = tok, .n = n, .seq = 48, .windows = 2, .n_bits = 3, .bits = bits,
                                      .per_row = per_row};
        if (dt_an_quant_run(&m, &p, rows, &err) != 0) fail_msg("%s", err.msg);
        for (int b = 0; b <= 3; b++) {
            double loss, acc;
            size_t count;
            const dt_run_options o = {.logit_bits = b ? bits[b - 1] : 0, .logit_per_row = per_row};
            assert_int_equal(dt_an_eval_text(&m, &o, tok, n, 48, 2, &loss, &acc, &count, &err), 0);
            assert_int_equal(rows[b].bits, b ? bits[b - 1] : 0);
            assert_true(rows[b].loss == loss);
            assert_true(rows[b].accuracy == acc);
            assert_int_equal(rows[b].count, count);
            assert_int_equal(rows[b].needle_total, -1);
            assert_int_equal(rows[b].needle_correct, -1);
        }
        /* 2 bits move the loss: the rows are not one measurement repeated */
        assert_true(rows[3].loss != rows[0].loss);
    }
    const int bad[2] = {8, 25};
    const dt_an_quant_params q = {.tokens = tok, .n = n, .seq = 48, .windows = 2, .n_bits = 2, .bits = bad};
    assert_int_equal(dt_an_quant_run(&m, &q, rows, &err), -1);
    assert_non_null(strstr(err.msg, "bits 25"));
    /* 1 bit has no level but zero: its loss was NaN (0·∞ in every score), now it is refused */
    const int one[1] = {1};
    const dt_an_quant_params q1 = {.tokens = tok, .n = n, .seq = 48, .windows = 2, .n_bits = 1, .bits = one};
    assert_int_equal(dt_an_quant_run(&m, &q1, rows, &err), -1);
    assert_non_null(strstr(err.msg, "bits 1: must be in 2..24"));
    const dt_run_options o1 = {.logit_bits = 1};
    assert_null(dt_runstate_create_with(&m, 1, 8, &o1, &err));
    assert_non_null(strstr(err.msg, "to 1 bits: must be 0 (off) or 2..24"));
    dt_model_free(&m);
    free(tok);
}

/* The held-out tail is what training holds out (dt_train_split), the calibration text the rest or
 * the other text given; a tail shorter than one window is refused naming seq. */
static void test_wq_split(void **state) {
    (void)state;
    int tok[1000], other[7];
    dt_train_options d;
    dt_train_defaults(&d);
    const size_t split = dt_train_split(1000, d.val_fraction);
    assert_true(split > 0 && split < 1000);
    dt_error err;
    dt_an_wq_params p = {.seq = 64};
    assert_int_equal(dt_an_wq_split(&p, tok, 1000, NULL, 0, &err), 0);
    assert_ptr_equal(p.eval_tokens, tok + split);
    assert_int_equal(p.eval_n, 1000 - split);
    assert_ptr_equal(p.calib_tokens, tok);
    assert_int_equal(p.calib_n, split);
    assert_int_equal(dt_an_wq_split(&p, tok, 1000, other, 7, &err), 0);
    assert_ptr_equal(p.eval_tokens, tok + split);
    assert_ptr_equal(p.calib_tokens, other);
    assert_int_equal(p.calib_n, 7);
    /* exactly one window of seq + 1 fits; one token fewer does not */
    p.seq = (int)(1000 - split) - 1;
    assert_int_equal(dt_an_wq_split(&p, tok, 1000, NULL, 0, &err), 0);
    dt_an_wq_params q = {.seq = p.seq + 1};
    assert_int_equal(dt_an_wq_split(&q, tok, 1000, NULL, 0, &err), -1);
    assert_non_null(strstr(err.msg, "seq + 1"));
    assert_null(q.eval_tokens); /* left alone */
}

/* A model that only looks at the current byte (attention and MLP outputs zeroed): after ' ' it
 * predicts '1', after digit d the digit d + 1 (mod 10), and nothing else matters. */
static void rig_digit_chain(dt_model *m) {
    const dt_config *c = &m->cfg;
    const int C = c->hidden_size;
    memset(m->w.embed_tokens, 0, (size_t)c->vocab_size * C * sizeof(float));
    memset(m->w.lm_head, 0, (size_t)c->vocab_size * C * sizeof(float));
    for (int l = 0; l < c->num_hidden_layers; l++) {
        memset(m->w.layers[l].o_proj, 0, (size_t)C * c->num_attention_heads * c->head_dim * sizeof(float));
        memset(m->w.layers[l].down_proj, 0, (size_t)C * c->intermediate_size * sizeof(float));
    }
    m->w.embed_tokens[(size_t)' ' * C + 0] = 1;
    m->w.lm_head[(size_t)'1' * C + 0] = 10;
    for (int d = 0; d < 10; d++) {
        m->w.embed_tokens[(size_t)('0' + d) * C + 1 + d] = 1;
        m->w.lm_head[(size_t)('0' + (d + 1) % 10) * C + 1 + d] = 10;
    }
}

/* Writes value into both places of a needle's value: its sentence and the answer of its query. */
static void set_value(dt_needle_sample *s, int q, const char *value) {
    dt_needle_needle *nd = &s->needles[s->queries[q].needle];
    int len = (int)strlen(value);
    assert_int_equal(len, nd->value_length);
    memcpy(s->text + nd->value_offset, value, (size_t)len);
    memcpy(s->text + s->queries[q].prompt_end_offset, value, (size_t)len);
    memcpy(nd->value, value, (size_t)len);
}

/* Teacher-forced exact match equals dt_needle_eval's greedy exact match, unquantised, on a model that
 * answers some queries right and others wrong (so the two could disagree in either count). */
static void test_needle_exact_matches_greedy(void **state) {
    (void)state;
    dt_needle_testset ts;
    make_testset(&ts, 3);
    /* "12345" is the rigged model's chain from ' '; "12945" breaks it at the third byte, "92345" at the first */
    const char *values[3][2] = {{"12345", "12945"}, {"12345", "12345"}, {"92345", "12346"}};
    int want = 0;
    for (int i = 0; i < ts.n; i++)
        for (int q = 0; q < ts.samples[i].n_queries; q++) {
            assert_int_equal(ts.samples[i].text[ts.samples[i].queries[q].prompt_end_offset - 1], ' ');
            set_value(&ts.samples[i], q, values[i][q]);
            want += strcmp(values[i][q], "12345") == 0;
        }
    dt_model m;
    dt_config cfg;
    dt_error err;
    for (int arch = 0; arch < 2; arch++) {
        assert_int_equal(dt_config_preset(&cfg, "tiny", (dt_arch)arch, &err), 0);
        cfg.tie_word_embeddings = 0;
        assert_int_equal(dt_model_create(&m, &cfg, &err), 0);
        dt_model_init_random(&m, 5);
        rig_digit_chain(&m);
        dt_needle_results r;
        assert_int_equal(dt_needle_eval(&m, NULL, &ts, &r, NULL, NULL, &err), 0);
        int correct = -1, total = -1;
        dt_run_options o = {0};
        assert_int_equal(dt_an_needle_exact(&m, NULL, &o, &ts, 0, &correct, &total, &err), 0);
        assert_int_equal(total, 6);
        assert_int_equal(r.total, 6);
        assert_int_equal(r.correct, want); /* 3 of 6: the known answer, not just agreement */
        assert_int_equal(correct, want);
        dt_needle_results_free(&r);
        dt_model_free(&m);
    }
    int correct = -1, total = -1;
    dt_run_options o = {0};

    /* a sample longer than the model's context is refused, naming the set */
    tiny_model(&m, DT_ARCH_LLAMA, 5);
    m.cfg.max_position_embeddings = 100;
    assert_int_equal(dt_an_needle_exact(&m, NULL, &o, &ts, 0, &correct, &total, &err), -1);
    assert_non_null(strstr(err.msg, "handmade"));
    assert_non_null(strstr(err.msg, "max_position_embeddings"));
    dt_model_free(&m);
    dt_needle_testset_free(&ts);
}

/* ---------------------------------------------------------------- allocation */

static void test_alloc_row_hand_maps(void **state) {
    (void)state;
    enum { T = 6 };
    float A[T * T] = {0}, A1[T * T] = {0}, A2[T * T] = {0};
    /* baseline row 5; context [0, 4), answer span [1, 3) */
    const float base[T] = {0.1f, 0.3f, 0.2f, 0.1f, 0.2f, 0.1f};
    memcpy(A + 5 * T, base, sizeof base);
    dt_an_alloc_sums s;
    dt_an_alloc_row(A, NULL, 0.0f, T, 5, 4, 1, 2, &s);
    assert_true(fabs(s.span - 0.5) < 1e-6 && fabs(s.context - 0.7) < 1e-6 && fabs(s.row - 1.0) < 1e-6);
    assert_true(fabs(dt_an_alloc_answer_share(&s) - 0.5 / 0.7) < 1e-6);
    assert_true(fabs(dt_an_alloc_noise_share(&s) - 0.2 / 0.7) < 1e-6);

    /* DIFF, λ = 0.5: w = [-0.05, 0.35, 0.05, 0.05 | 0.05, 0.05]; a negative weight outside the span */
    const float r1[T] = {0.1f, 0.4f, 0.2f, 0.1f, 0.1f, 0.1f}, r2[T] = {0.3f, 0.1f, 0.3f, 0.1f, 0.1f, 0.1f};
    memcpy(A1 + 5 * T, r1, sizeof r1);
    memcpy(A2 + 5 * T, r2, sizeof r2);
    dt_an_alloc_row(A1, A2, 0.5f, T, 5, 4, 1, 2, &s);
    assert_true(fabs(s.row - 0.5) < 1e-6); /* 1 − λ */
    assert_true(fabs(s.span - 0.4) < 1e-6 && fabs(s.span_abs - 0.4) < 1e-6);
    assert_true(fabs(s.context - 0.4) < 1e-6 && fabs(s.context_abs - 0.5) < 1e-6);
    assert_true(fabs(dt_an_alloc_answer_share(&s) - 0.8) < 1e-6);
    assert_true(fabs(dt_an_alloc_noise_share(&s) - 0.2) < 1e-6);

    /* DIFF, λ = 0.4: w = [0.16, -0.15, 0.46, 0.01 | 0.06, 0.06]; a negative weight inside the span */
    const float q1[T] = {0.2f, 0.05f, 0.5f, 0.05f, 0.1f, 0.1f}, q2[T] = {0.1f, 0.5f, 0.1f, 0.1f, 0.1f, 0.1f};
    memcpy(A1 + 5 * T, q1, sizeof q1);
    memcpy(A2 + 5 * T, q2, sizeof q2);
    dt_an_alloc_row(A1, A2, 0.4f, T, 5, 4, 1, 2, &s);
    assert_true(fabs(s.row - 0.6) < 1e-6);
    assert_true(fabs(s.span - 0.31) < 1e-6 && fabs(s.span_abs - 0.61) < 1e-6);
    assert_true(fabs(s.context_abs - 0.78) < 1e-6);
    assert_true(fabs(dt_an_alloc_answer_share(&s) - 0.31 / 0.78) < 1e-6);
    assert_true(fabs(dt_an_alloc_noise_share(&s) - 0.17 / 0.78) < 1e-6);
    /* answer + noise < 1 exactly by twice the negative span mass */
    assert_true(fabs(dt_an_alloc_answer_share(&s) + dt_an_alloc_noise_share(&s) - (1 - 2 * 0.15 / 0.78)) < 1e-6);
}

/* DIFF V2: w = A_2j − λ_t·A_2j+1 per output head (it read each query head as a Transformer's). Without
 * λ (v2-nolambda) every row of w sums to 0; with the sigmoid λ to 1 − λ_row, within (0, 1). */
static void test_allocation_v2(void **state) {
    (void)state;
    dt_needle_testset ts;
    make_testset(&ts, 3);
    for (int nolambda = 0; nolambda < 2; nolambda++) {
        dt_config base, cfg;
        dt_model m;
        dt_error err;
        assert_int_equal(dt_config_preset(&base, "tiny", DT_ARCH_DIFF_V2, &err), 0);
        cfg = base;
        if (nolambda) assert_int_equal(dt_config_ablation(&cfg, &base, "v2-nolambda", &err), 0);
        assert_int_equal(dt_model_create(&m, &cfg, &err), 0);
        dt_model_init_random(&m, 5);
        dt_an_allocation a;
        if (dt_an_allocation_run(&m, NULL, &ts, 2, &a, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(a.heads, cfg.num_attention_heads / 2);
        for (int l = 0; l < a.n_layers; l++) {
            if (nolambda && !(fabs(a.row[l]) < 1e-5)) fail_msg("v2-nolambda layer %d: row sum %g, want 0", l, a.row[l]);
            if (!nolambda && !(a.row[l] > 0.05 && a.row[l] < 0.95))
                fail_msg("v2 layer %d: row sum %g, want 1 - sigmoid", l, a.row[l]);
        }
        dt_an_allocation_free(&a);
        dt_model_free(&m);
    }
    dt_needle_testset_free(&ts);
}

/* A real run: row sums are 1 (baseline) and 1 − λ (DIFF) in every layer; shares are consistent. */
static void test_allocation_run(void **state) {
    (void)state;
    dt_needle_testset ts;
    make_testset(&ts, 3);
    for (int arch = 0; arch < 2; arch++) {
        dt_model m;
        tiny_model(&m, (dt_arch)arch, 9);
        dt_an_allocation a;
        dt_error err;
        assert_int_equal(dt_an_allocation_run(&m, NULL, &ts, 2, &a, &err), 0);
        assert_int_equal(a.samples, 2);
        assert_int_equal(a.rows, 4); /* 2 samples × 2 queries */
        assert_int_equal(a.heads, arch == DT_ARCH_DIFF ? m.cfg.num_attention_heads / 2 : m.cfg.num_attention_heads);
        for (int l = 0; l < a.n_layers; l++) {
            double want = arch == DT_ARCH_DIFF ? 1.0 - dt_model_lambda(&m, l) : 1.0;
            if (fabs(a.row[l] - want) > 1e-4) fail_msg("layer %d: row sum %g, want %g", l, a.row[l], want);
            assert_true(a.context_abs[l] <= a.row[l] + 2 * dt_model_lambda(&m, l) + 1e-6);
            assert_true(a.answer_share[l] > -1 && a.answer_share[l] < 1 && a.noise_share[l] >= 0 &&
                        a.noise_share[l] <= 1);
            if (arch == DT_ARCH_LLAMA) assert_true(fabs(a.answer_share[l] + a.noise_share[l] - 1) < 1e-6);
        }
        dt_an_allocation_free(&a);
        dt_model_free(&m);
    }
    dt_needle_testset_free(&ts);
}

/* A model rigged so that the attending query heads put (almost) all their weight on digit bytes:
 * embedding channel 0 is 1 for every byte and channel 1 is 1 for the digits; every query reads
 * channel 0 and every key channel 1 into the lowest-frequency RoPE channel (hd/2 − 1), where the
 * rotation over a few hundred positions is negligible. With one needle per sample the context's
 * only digits are the answer span. Baseline: all heads attend; DIFF: the first map of every
 * differential head attends and the second (query zero) is uniform, so w = A1 − λ/(row + 1). */
static void rig_digit_attention(dt_model *m) {
    const dt_config *c = &m->cfg;
    const int C = c->hidden_size, H = c->num_attention_heads, KV = c->num_key_value_heads, hd = c->head_dim;
    const int attending = c->arch == DT_ARCH_DIFF ? H / 2 : H;
    for (int t = 0; t < c->vocab_size; t++) {
        m->w.embed_tokens[(size_t)t * C + 0] = 1.0f;
        m->w.embed_tokens[(size_t)t * C + 1] = t >= '0' && t <= '9' ? 1.0f : 0.0f;
    }
    for (int l = 0; l < c->num_hidden_layers; l++) {
        dt_layer_weights *w = &m->w.layers[l];
        memset(w->q_proj, 0, (size_t)H * hd * C * sizeof(float));
        memset(w->k_proj, 0, (size_t)KV * hd * C * sizeof(float));
        for (int h = 0; h < attending; h++) w->q_proj[((size_t)h * hd + hd / 2 - 1) * C + 0] = 1.6f;
        for (int g = 0; g < KV; g++) w->k_proj[((size_t)g * hd + hd / 2 - 1) * C + 1] = 1.6f;
    }
}

static void test_allocation_rigged_model(void **state) {
    (void)state;
    dt_needle_testset ts;
    make_testset_n(&ts, 3, 1, 1);
    for (int i = 0; i < ts.n; i++) /* the context holds no digit but the answer's */
        for (int j = 0; j < ts.samples[i].context_length; j++) {
            const dt_needle_needle *nd = &ts.samples[i].needles[0];
            int in_span = j >= nd->value_offset && j < nd->value_offset + nd->value_length;
            assert_int_equal(ts.samples[i].text[j] >= '0' && ts.samples[i].text[j] <= '9', in_span);
        }
    for (int arch = 0; arch < 2; arch++) {
        dt_model m;
        tiny_model(&m, (dt_arch)arch, 21);
        rig_digit_attention(&m);
        dt_an_allocation a;
        dt_error err;
        assert_int_equal(dt_an_allocation_run(&m, NULL, &ts, 0, &a, &err), 0);
        for (int l = 0; l < a.n_layers; l++) {
            double want_answer = 1.0, want_noise = 0.0;
            if (arch == DT_ARCH_DIFF) { /* A1 = 1/5 on each answer byte, A2 uniform over the row */
                double lam = dt_model_lambda(&m, l), sa = 0, sn = 0;
                for (int i = 0; i < ts.n; i++) {
                    const dt_needle_sample *sm = &ts.samples[i];
                    int len = sm->needles[0].value_length, n = sm->queries[0].prompt_end_offset; /* row + 1 */
                    double span = len * (1.0 / len - lam / n), rest = (sm->context_length - len) * fabs(lam / n);
                    sa += span / (fabs(span) + rest) / ts.n;
                    sn += rest / (fabs(span) + rest) / ts.n;
                }
                want_answer = sa;
                want_noise = sn;
            }
            print_message("%s layer %d: answer share %.4f (expected %.4f), noise share %.4f (expected %.4f)\n",
                          arch == DT_ARCH_DIFF ? "DIFF" : "baseline", l, a.answer_share[l], want_answer,
                          a.noise_share[l], want_noise);
            if (fabs(a.answer_share[l] - want_answer) > 0.03 || fabs(a.noise_share[l] - want_noise) > 0.03)
                fail_msg("layer %d: answer %g noise %g, expected %g and %g", l, a.answer_share[l], a.noise_share[l],
                         want_answer, want_noise);
        }
        dt_an_allocation_free(&a);
        dt_model_free(&m);
    }
    dt_needle_testset_free(&ts);
}

/* ---------------------------------------------------------------- the reproduction protocol */

/* the Transformer, DIFF, DIFF V2, and DIFF V2 with v2_pairs "j,j+h" (arch_case 3) */
static const dt_arch all_archs[4] = {DT_ARCH_LLAMA, DT_ARCH_DIFF, DT_ARCH_DIFF_V2, DT_ARCH_DIFF_V2};

static void model_of(dt_model *m, int arch_case, int vocab, dt_position pos) {
    const dt_arch arch = all_archs[arch_case];
    dt_config cfg;
    dt_error err;
    assert_int_equal(dt_config_preset(&cfg, "tiny", arch, &err), 0);
    cfg.vocab_size = vocab;
    cfg.position = pos;
    if (arch_case == 3) cfg.v2_pairs = DT_V2_PAIRS_CROSS;
    if (dt_model_create(m, &cfg, &err) != 0) fail_msg("%s", err.msg);
    dt_model_init_random(m, 11 + (uint64_t)arch);
}

/* The value kv head g of layer l writes at every position (below): different for every head and layer. */
static double rig_value(int l, int g) { return 1.5 + 0.5 * g + 0.2 * l; }
/* DIFF V2: z_j = W_λ·ln1(x) of output head j (times the norm's 1/√(1 + eps)). */
static double rig_z(int j) { return 0.5 * j - 0.5; }

/* Every token the same embedding (all ones) and the attention and MLP outputs cut off (o_proj and
 * down_proj zero), so every layer reads ln1 = ones·r at every position (r = 1/√(1 + eps)); q and k zero:
 * every softmax row uniform, A[t, s] = 1/(t + 1); each value row of kv head g sums to rig_value(l, g),
 * so every position's value of that head is rig_value·r in all hd channels, and any attention row
 * that sums to 1 returns it; the LM head zero: uniform logits, loss ln V everywhere. */
static void rig_uniform(dt_model *m) {
    const dt_config *c = &m->cfg;
    const int C = c->hidden_size, H = c->num_attention_heads, KV = c->num_key_value_heads, hd = c->head_dim;
    const int F = c->intermediate_size, V = c->vocab_size;
    for (size_t i = 0; i < (size_t)V * C; i++) m->w.embed_tokens[i] = 1.0f;
    memset(m->w.lm_head, 0, (size_t)V * C * sizeof(float));
    for (int l = 0; l < c->num_hidden_layers; l++) {
        dt_layer_weights *w = &m->w.layers[l];
        memset(w->q_proj, 0, (size_t)H * hd * C * sizeof(float));
        memset(w->k_proj, 0, (size_t)KV * hd * C * sizeof(float));
        memset(w->o_proj, 0, (size_t)C * H * hd * sizeof(float)); /* V2's is smaller: zeroing H·hd columns covers it */
        memset(w->down_proj, 0, (size_t)C * F * sizeof(float));
        for (int g = 0; g < KV; g++)
            for (int e = 0; e < hd; e++)
                for (int i = 0; i < C; i++) w->v_proj[((size_t)g * hd + e) * C + i] = (float)(rig_value(l, g) / C);
        if (w->lambda_proj)
            for (int j = 0; j < H / 2; j++)
                for (int i = 0; i < C; i++) w->lambda_proj[(size_t)j * C + i] = (float)(rig_z(j) / C);
    }
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static void expect_near(double got, double want, double tol, const char *what, int l) {
    if (!(fabs(got - want) <= tol)) fail_msg("%s, layer %d: %.9g, expected %.9g", what, l, got, want);
}

/* Uniform attention: the sink mass is the mean over t = 1..T−1 of 1/(t + 1) (DIFF: times 1 − λ; V2:
 * times the mean of 1 − λ_j), which counting t = 0 would raise; each head's context RMS is its values'
 * (DIFF: (1 − λ)·√((c_a² + c_b²)/2) before the norm, which after it would be 1 − λinit for every head);
 * uniform logits give ln V in every bin, with a vocabulary beyond the bytes too. */
static void test_protocol_uniform(void **state) {
    (void)state;
    const int T = 24, W = 3;
    for (int a = 0; a < 4; a++)
        for (int big = 0; big < 2; big++) {
            const dt_arch arch = all_archs[a];
            const int V = big ? 1000 : 256;
            dt_model m;
            model_of(&m, a, V, DT_POS_ROPE);
            rig_uniform(&m);
            const dt_config *c = &m.cfg;
            const double r = 1.0 / sqrt(1.0 + (double)c->rms_norm_eps);
            size_t n = 200;
            int *tok = malloc(n * sizeof *tok);
            assert_non_null(tok);
            for (size_t i = 0; i < n; i++) tok[i] = (int)((i * 37 + 5) % (size_t)V);
            dt_an_protocol p;
            dt_error err;
            if (dt_an_protocol_run(&m, tok, n, T, W, 4, &p, &err) != 0) fail_msg("%s", err.msg);
            const int heads = arch == DT_ARCH_LLAMA ? c->num_attention_heads : c->num_attention_heads / 2;
            assert_int_equal(p.n_heads, heads);
            assert_int_equal(p.head_width, arch == DT_ARCH_DIFF ? 2 * c->head_dim : c->head_dim);
            assert_int_equal(p.windows, W);
            assert_int_equal(p.n_layers, c->num_hidden_layers);
            expect_near(p.loss, log((double)V), 1e-5, "loss", -1);
            for (int k = 0; k < 4; k++) {
                assert_int_equal(p.bin_start[k], k * T / 4);
                expect_near(p.bin_loss[k], log((double)V), 1e-5, "bin loss", k);
            }
            assert_int_equal(p.bin_start[4], T);
            double S = 0, S0 = 1.0;
            for (int t = 1; t < T; t++) S += 1.0 / (t + 1) / (T - 1), S0 += 1.0 / (t + 1);
            S0 /= T; /* what including t = 0 would give */
            assert_true(fabs(S - S0) > 0.01);
            const int KV = c->num_key_value_heads, G = c->num_attention_heads / KV;
            for (int l = 0; l < p.n_layers; l++) {
                if (arch == DT_ARCH_LLAMA) {
                    expect_near(p.sink_mass[l], S, 1e-6, "Transformer sink mass", l);
                    assert_true(isnan(p.sink_mass_map1[l]) && isnan(p.sink_mass_map2[l]) && isnan(p.lambda[l]));
                    for (int j = 0; j < heads; j++)
                        expect_near(p.head_rms[l * heads + j], rig_value(l, j / G) * r, 1e-5, "Transformer head RMS", l);
                } else if (arch == DT_ARCH_DIFF) {
                    const double lam = dt_model_lambda(&m, l);
                    expect_near(p.lambda[l], lam, 1e-7, "DIFF λ", l);
                    expect_near(p.sink_mass[l], (1 - lam) * S, 1e-6, "DIFF sink mass", l);
                    expect_near(p.sink_mass_map1[l], S, 1e-6, "DIFF first map's sink mass", l);
                    expect_near(p.sink_mass_map2[l], S, 1e-6, "DIFF second map's sink mass", l);
                    for (int j = 0; j < heads; j++) {
                        const double ca = rig_value(l, j / G), cb = rig_value(l, (j + heads) / G);
                        const double want = fabs(1 - lam) * sqrt((ca * ca + cb * cb) / 2) * r;
                        assert_true(fabs(want - (1 - dt_lambda_init(l))) > 0.3); /* what the RMS after the norm would be */
                        expect_near(p.head_rms[l * heads + j], want, 1e-5, "DIFF head RMS", l);
                    }
                } else {
                    double keep = 0, lam_mean = 0;
                    for (int j = 0; j < heads; j++) {
                        const double lj = sigmoid(rig_z(j) * r);
                        keep += (1 - lj) / heads;
                        lam_mean += lj / heads;
                        /* output head j: query heads 2j and 2j + 1, both on kv head ⌊2j / G⌋; across the
                         * groups j and j + h, on kv heads ⌊j / G⌋ and ⌊(j + h) / G⌋ */
                        const int qa = a == 3 ? j : 2 * j, qb = a == 3 ? j + heads : 2 * j + 1;
                        const double want = fabs(rig_value(l, qa / G) - lj * rig_value(l, qb / G)) * r;
                        expect_near(p.head_rms[l * heads + j], want, 1e-5, "V2 head RMS", l);
                    }
                    expect_near(p.lambda[l], lam_mean, 1e-6, "V2 mean λ", l);
                    expect_near(p.sink_mass[l], keep * S, 1e-6, "V2 sink mass", l);
                    expect_near(p.sink_mass_map1[l], S, 1e-6, "V2 first map's sink mass", l);
                    expect_near(p.sink_mass_map2[l], S, 1e-6, "V2 second map's sink mass", l);
                }
            }
            dt_an_protocol_free(&p);
            free(tok);
            dt_model_free(&m);
        }
}

/* Attention on the window's first token only (no position encoding; token 1 there and at no other
 * position of a window, token 2 elsewhere): every map puts 1 on position 0, so the sink mass is 1
 * (DIFF: 1 − λ; V2 with W_λ zero: 1 − 1/2). Two windows spread over a text of 2·(T + 1) + 5 tokens
 * start at 0 and at T + 6; consecutive windows would start the second at T + 1, on a token 2, and
 * its rows would find token 1 five positions in. With `half`, only query heads 0..H/2−1 look for
 * token 1 and the others stay uniform. */
static void rig_first_token(dt_model *m, int half) {
    rig_uniform(m);
    const dt_config *c = &m->cfg;
    const int C = c->hidden_size, H = c->num_attention_heads, KV = c->num_key_value_heads, hd = c->head_dim;
    const float root = sqrtf((float)C), kappa = 3.0f; /* scores κ²·C/√hd = 144: e^−144 underflows */
    for (int t = 0; t < c->vocab_size; t++)
        for (int i = 0; i < C; i++) m->w.embed_tokens[(size_t)t * C + i] = 0.0f;
    m->w.embed_tokens[1 * C + 0] = root; /* ln1 of token 1: √C on channel 0; of token 2: √C on channel 1 */
    m->w.embed_tokens[2 * C + 1] = root;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        dt_layer_weights *w = &m->w.layers[l];
        for (int i = 0; i < (half ? H / 2 : H); i++)
            w->q_proj[((size_t)i * hd) * C + 0] = w->q_proj[((size_t)i * hd) * C + 1] = kappa;
        for (int g = 0; g < KV; g++) w->k_proj[((size_t)g * hd) * C + 0] = kappa;
        if (w->lambda_proj) memset(w->lambda_proj, 0, (size_t)H / 2 * C * sizeof(float));
    }
}

static void test_protocol_first_token_sink(void **state) {
    (void)state;
    const int T = 20;
    const size_t n = 2 * (T + 1) + 5;
    int tok[2 * (20 + 1) + 5];
    for (size_t i = 0; i < n; i++) tok[i] = i == 0 || i == (size_t)T + 6 ? 1 : 2;
    for (int a = 0; a < 3; a++) {
        dt_model m;
        model_of(&m, a, 256, DT_POS_NONE);
        rig_first_token(&m, 0);
        dt_an_protocol p;
        dt_error err;
        if (dt_an_protocol_run(&m, tok, n, T, 2, 2, &p, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(p.windows, 2);
        for (int l = 0; l < p.n_layers; l++) {
            const double lam = all_archs[a] == DT_ARCH_DIFF ? dt_model_lambda(&m, l) : all_archs[a] == DT_ARCH_DIFF_V2 ? 0.5 : 0;
            expect_near(p.sink_mass[l], 1 - lam, 1e-6, dt_arch_label(all_archs[a]), l);
            if (all_archs[a] != DT_ARCH_LLAMA) {
                expect_near(p.sink_mass_map1[l], 1.0, 1e-6, "first map", l);
                expect_near(p.sink_mass_map2[l], 1.0, 1e-6, "second map", l);
            }
        }
        dt_an_protocol_free(&p);
        /* windows beyond what fits without overlap: as many as fit (2) */
        if (dt_an_protocol_run(&m, tok, n, T, 9, 2, &p, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(p.windows, 2);
        if (all_archs[a] != DT_ARCH_LLAMA) expect_near(p.sink_mass_map1[0], 1.0, 1e-6, "9 windows asked", 0);
        else expect_near(p.sink_mass[0], 1.0, 1e-6, "9 windows asked", 0);
        dt_an_protocol_free(&p);
        dt_model_free(&m);
    }
    /* DIFF V2 with query heads 0..3 of 8 looking for token 1, the others uniform: paired across the
     * groups (j, j + 4) the first maps are all on token 1 and the second all uniform; paired within
     * a group (2j, 2j + 1) both maps would average (1 + S)/2 */
    double S = 0;
    for (int t = 1; t < T; t++) S += 1.0 / (t + 1) / (T - 1);
    for (int a = 2; a < 4; a++) {
        dt_model m;
        model_of(&m, a, 256, DT_POS_NONE);
        rig_first_token(&m, 1);
        dt_an_protocol p;
        dt_error err;
        if (dt_an_protocol_run(&m, tok, n, T, 2, 2, &p, &err) != 0) fail_msg("%s", err.msg);
        const double m1 = a == 3 ? 1.0 : (1 + S) / 2, m2 = a == 3 ? S : (1 + S) / 2;
        for (int l = 0; l < p.n_layers; l++) {
            expect_near(p.sink_mass_map1[l], m1, 1e-6, a == 3 ? "V2 j,j+h first map" : "V2 first map", l);
            expect_near(p.sink_mass_map2[l], m2, 1e-6, a == 3 ? "V2 j,j+h second map" : "V2 second map", l);
            expect_near(p.sink_mass[l], m1 - 0.5 * m2, 1e-6, "V2 head maps", l);
        }
        dt_an_protocol_free(&p);
        dt_model_free(&m);
    }
}

/* Loss by position: tokens 2 and 3 read alike (the same embedding), so every position has the same
 * logits, and the LM head gives token 2 the logit 2·r and every other token 0. The targets of bins 0
 * and 2 are token 2, of bins 1 and 3 token 3: the bins' losses alternate −log p₂, −log p₃; binning by
 * the target's position (one later) or by the wrong boundaries would mix them. */
static void test_protocol_bins(void **state) {
    (void)state;
    const int T = 16, B = 4;
    dt_model m;
    model_of(&m, 1, 256, DT_POS_ROPE);
    rig_uniform(&m);
    const dt_config *c = &m.cfg;
    const int C = c->hidden_size, V = c->vocab_size;
    for (int i = 0; i < C; i++) m.w.lm_head[2 * C + i] = 2.0f / C;
    const double r = 1.0 / sqrt(1.0 + (double)c->rms_norm_eps), z = exp(2 * r) + V - 1;
    const double l2 = -log(exp(2 * r) / z), l3 = log(z);
    int tok[17];
    tok[0] = 3;
    for (int t = 0; t < T; t++) tok[t + 1] = (t / (T / B)) % 2 ? 3 : 2; /* the target of position t */
    dt_an_protocol p;
    dt_error err;
    if (dt_an_protocol_run(&m, tok, 17, T, 1, B, &p, &err) != 0) fail_msg("%s", err.msg);
    for (int k = 0; k < B; k++) expect_near(p.bin_loss[k], k % 2 ? l3 : l2, 1e-5, "bin loss", k);
    expect_near(p.loss, (l2 + l3) / 2, 1e-5, "loss", -1);
    dt_an_protocol_free(&p);
    /* three bins over 16 positions: [0, 5), [5, 10), [10, 16) */
    if (dt_an_protocol_run(&m, tok, 17, T, 1, 3, &p, &err) != 0) fail_msg("%s", err.msg);
    const int starts[4] = {0, 5, 10, 16};
    for (int k = 0; k < 4; k++) assert_int_equal(p.bin_start[k], starts[k]);
    for (int k = 0; k < 3; k++) {
        double want = 0;
        for (int t = starts[k]; t < starts[k + 1]; t++) want += (tok[t + 1] == 2 ? l2 : l3) / (starts[k + 1] - starts[k]);
        expect_near(p.bin_loss[k], want, 1e-5, "bin loss of three", k);
    }
    dt_an_protocol_free(&p);
    dt_model_free(&m);
}

static void test_protocol_refusals(void **state) {
    (void)state;
    dt_model m;
    tiny_model(&m, DT_ARCH_DIFF, 3);
    size_t n;
    int *tok = text_tokens(&n);
    struct {
        int seq, windows, bins;
        size_t n;
        const char *names;
    } bad[] = {{1, 4, 1, n, "seq 1"},           {300, 1, 4, n, "seq 300"},        {16, 0, 4, n, "windows 0"},
               {16, 4, 0, n, "n_bins 0"},       {16, 4, 17, n, "n_bins 17"},      {8, 4, 9, n, "n_bins 9"},
               {16, 4, 4, 16, "n: the text has 16 tokens"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dt_an_protocol p;
        dt_error err = {0};
        assert_int_equal(dt_an_protocol_run(&m, tok, bad[i].n, bad[i].seq, bad[i].windows, bad[i].bins, &p, &err), -1);
        if (!strstr(err.msg, bad[i].names)) fail_msg("case %zu: \"%s\" does not name %s", i, err.msg, bad[i].names);
        assert_int_equal(err.code, DT_ERR_INVALID);
        assert_null(p.sink_mass);
        dt_an_protocol_free(&p);
    }
    /* the edges that are allowed: seq 2, n = seq + 1, bins = seq */
    dt_an_protocol p;
    dt_error err;
    assert_int_equal(dt_an_protocol_run(&m, tok, 3, 2, 5, 2, &p, &err), 0);
    assert_int_equal(p.windows, 1);
    dt_an_protocol_free(&p);
    free(tok);
    dt_model_free(&m);
}

/* dt_runstate_head_context is the same with either kernel (the fused one keeps DIFF's u_j too), and
 * the Transformer's and V2's are what o_proj reads: the attention block's output is o_proj of it. */
static void test_head_context_kernels(void **state) {
    (void)state;
    const int T = 12;
    int tok[12];
    for (int t = 0; t < T; t++) tok[t] = (t * 29 + 3) % 256;
    for (int a = 0; a < 3; a++) {
        dt_model m;
        tiny_model(&m, all_archs[a], 5);
        dt_error err;
        dt_run_options ref = {.kernel = DT_ATTENTION_REFERENCE};
        dt_runstate *rf = dt_runstate_create_with(&m, 1, T, &ref, &err), *fu = dt_runstate_create(&m, 1, T, &err);
        assert_non_null(rf);
        assert_non_null(fu);
        assert_int_equal(dt_forward(&m, rf, tok, NULL, 1, T, NULL, &err), 0);
        assert_int_equal(dt_forward(&m, fu, tok, NULL, 1, T, NULL, &err), 0);
        for (int l = 0; l < m.cfg.num_hidden_layers; l++) {
            int h1, w1, h2, w2;
            const float *x = dt_runstate_head_context(rf, l, &h1, &w1), *y = dt_runstate_head_context(fu, l, &h2, &w2);
            assert_int_equal(h1, h2);
            assert_int_equal(w1, w2);
            const size_t cnt = (size_t)T * h1 * w1;
            double rms = 0;
            for (size_t i = 0; i < cnt; i++) rms += (double)x[i] * x[i] / cnt;
            assert_true(rms > 1e-12); /* not an untouched buffer */
            const float d = tu_max_abs_diff(x, y, cnt);
            if (!(d <= 1e-4f * (float)sqrt(rms) + 1e-6f)) fail_msg("%s layer %d: kernels differ by %g", dt_arch_label(all_archs[a]), l, d);
        }
        dt_runstate_free(rf);
        dt_runstate_free(fu);
        dt_model_free(&m);
    }
}

/* The protocol's JSON: bins with their positions, the softmax maps' sink mass null for the Transformer,
 * head_rms per layer and head. */
static void test_protocol_json(void **state) {
    (void)state;
    double lam[2] = {NAN, NAN}, sink[2] = {0.25, 0.5}, m1[2] = {NAN, NAN}, m2[2] = {NAN, NAN};
    double rms[6] = {1, 2, 3, 4, 5, 6};
    dt_an_protocol p = {.n_layers = 2, .n_heads = 3, .seq = 8, .windows = 2, .n_bins = 2, .head_width = 4, .loss = 1.5,
                        .bin_start = {0, 4, 8}, .bin_loss = {2.0, 1.0}, .lambda = lam, .sink_mass = sink,
                        .sink_mass_map1 = m1, .sink_mass_map2 = m2, .head_rms = rms};
    cJSON *o = cJSON_CreateObject();
    assert_int_equal(dt_an_protocol_add_json(o, &p), 0);
    const cJSON *bins = cJSON_GetObjectItemCaseSensitive(o, "bins");
    assert_int_equal(cJSON_GetArraySize(bins), 2);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(bins, 1), "first")->valueint, 4);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(bins, 1), "last")->valueint, 7);
    assert_true(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(bins, 0), "loss")->valuedouble == 2.0);
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "sink_mass_map1"), 0)));
    assert_true(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "sink_mass"), 1)->valuedouble == 0.5);
    const cJSON *hr = cJSON_GetObjectItemCaseSensitive(o, "head_rms");
    assert_int_equal(cJSON_GetArraySize(hr), 2);
    assert_true(cJSON_GetArrayItem(cJSON_GetArrayItem(hr, 1), 2)->valuedouble == 6.0);
    char *text = cJSON_PrintUnformatted(o);
    assert_null(strstr(text, "nan"));
    free(text);
    cJSON_Delete(o);
}

/* ---------------------------------------------------------------- training dynamics */

static void test_spikes_and_lambda(void **state) {
    (void)state;
    /* flat series: no spikes */
    double g[120];
    int flags[120];
    for (int i = 0; i < 120; i++) g[i] = 1.0;
    assert_int_equal(dt_an_spikes(g, 120, flags), 0);

    char path[4096];
    tu_path(path, sizeof path, "metrics.jsonl");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 100; i++) {
        double gn = 1.0 + 0.05 * sin(0.7 * i);
        if (i == 5) gn = 20.0;            /* too early to judge (fewer than 10 earlier steps) */
        if (i == 40 || i == 80) gn = 5.0; /* planted spikes */
        double l0 = 0.2 + 0.001 * i, l1 = 0.5 - 0.002 * i;
        if (i == 30) l0 = -0.3; /* λ minimum of layer 0 */
        if (i == 60) l1 = 0.9;  /* λ maximum of layer 1 */
        fprintf(f, "{\"step\":%d,\"train_loss\":%.6f", i + 1, 5.0 - 0.01 * i);
        if (i % 25 == 24) fprintf(f, ",\"val_loss\":%.6f", 6.0 - 0.01 * i);
        fprintf(f, ",\"lr\":0.001,\"grad_norm\":%.6f,\"tokens_per_s\":1.0,\"elapsed_s\":1.0,\"lambda\":[%.6f,%.6f]}\n",
                gn, l0, l1);
    }
    fclose(f);
    dt_an_training t;
    dt_error err;
    assert_int_equal(dt_an_training_load(path, &t, &err), 0);
    assert_int_equal(t.n_steps, 100);
    assert_int_equal(t.first_step, 1);
    assert_int_equal(t.last_step, 100);
    assert_int_equal(t.spikes, 2);
    assert_int_equal(t.spike_steps[0], 41);
    assert_int_equal(t.spike_steps[1], 81);
    assert_int_equal(t.n_layers, 2);
    assert_true(fabs(t.lambda_first[0] - 0.2) < 1e-9 && fabs(t.lambda_first[1] - 0.5) < 1e-9);
    assert_true(fabs(t.lambda_last[0] - 0.299) < 1e-9 && fabs(t.lambda_last[1] - 0.302) < 1e-9);
    assert_true(fabs(t.lambda_min[0] + 0.3) < 1e-9 && fabs(t.lambda_max[0] - 0.299) < 1e-9);
    assert_true(fabs(t.lambda_min[1] - 0.302) < 1e-9 && fabs(t.lambda_max[1] - 0.9) < 1e-9);
    /* λ at lines round(k·99/4) = 0, 25, 50, 74, 99 (steps 1, 26, 51, 75, 100) */
    const int want_steps[5] = {1, 26, 51, 75, 100};
    assert_int_equal(t.n_lambda_points, 5);
    for (int k = 0; k < 5; k++) {
        const int i = want_steps[k] - 1;
        assert_int_equal(t.lambda_step[k], want_steps[k]);
        assert_true(fabs(t.lambda_at[k * 2 + 0] - (0.2 + 0.001 * i)) < 1e-9);
        assert_true(fabs(t.lambda_at[k * 2 + 1] - (0.5 - 0.002 * i)) < 1e-9);
    }
    assert_true(fabs(t.final_train_loss - 4.01) < 1e-9);
    assert_true(fabs(t.final_val_loss - 5.01) < 1e-9);
    assert_int_equal(t.final_val_step, 100);
    assert_true(t.gn_max == 20.0);
    double mean = 0;
    for (int i = 0; i < 100; i++) {
        double gn = i == 5 ? 20.0 : (i == 40 || i == 80) ? 5.0 : 1.0 + 0.05 * sin(0.7 * i);
        mean += gn / 100;
    }
    assert_true(fabs(t.gn_mean - mean) < 1e-5);
    dt_an_training_free(&t);

    /* a broken line is refused, naming the file and line */
    f = fopen(path, "a");
    fprintf(f, "{\"step\": 101, \"oops\": 1}\n");
    fclose(f);
    assert_int_equal(dt_an_training_load(path, &t, &err), -1);
    assert_non_null(strstr(err.msg, "metrics.jsonl:101"));
    /* a missing run */
    tu_path(path, sizeof path, "no_such_run");
    assert_int_equal(dt_an_training_load(path, &t, &err), -1);
    assert_non_null(strstr(err.msg, "no_such_run"));
}

/* The one JSON form of each analysis (analyze --json and the compare report): a measure that
 * could not be taken is null, not a number; needle columns only when a needle set was scored. */
static void test_analysis_json(void **state) {
    (void)state;
    dt_an_quant_row rows[2] = {{.bits = 0, .loss = 1.5, .accuracy = 0.25, .count = 100, .needle_total = -1, .needle_correct = -1},
                            {.bits = 4, .loss = NAN, .accuracy = 0.5, .count = 100, .needle_total = 4, .needle_correct = 3}};
    cJSON *a = dt_an_quant_rows_json(rows, 2);
    assert_non_null(a);
    assert_int_equal(cJSON_GetArraySize(a), 2);
    const cJSON *r0 = cJSON_GetArrayItem(a, 0), *r1 = cJSON_GetArrayItem(a, 1);
    assert_null(cJSON_GetObjectItemCaseSensitive(r0, "needle_total"));
    assert_true(cJSON_GetObjectItemCaseSensitive(r0, "loss")->valuedouble == 1.5);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r1, "loss")));
    assert_true(cJSON_GetObjectItemCaseSensitive(r1, "needle_accuracy")->valuedouble == 0.75);
    cJSON_Delete(a);

    double first[2] = {0.1, 0.2}, last[2] = {0.3, 0.4}, mn[2] = {0.1, 0.2}, mx[2] = {0.3, 0.4};
    int spikes[1] = {7};
    dt_an_training t = {.n_steps = 9, .first_step = 1, .last_step = 9, .n_layers = 2, .lambda_first = first,
                     .lambda_last = last, .lambda_min = mn, .lambda_max = mx, .spikes = 1, .spike_steps = spikes,
                     .final_train_loss = 2.0, .final_val_loss = NAN};
    cJSON *o = cJSON_CreateObject();
    assert_int_equal(dt_an_training_add_json(o, &t), 0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "final_val_loss")));
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "steps_logged")->valueint, 9);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "lambda_last")), 2);
    assert_true(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "lambda_last"), 1)->valuedouble == 0.4);
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "spike_steps"), 0)->valueint, 7);
    cJSON_Delete(o);
    /* a baseline run logs no λ: no λ arrays */
    t.n_layers = 0;
    t.lambda_first = t.lambda_last = t.lambda_min = t.lambda_max = NULL;
    o = cJSON_CreateObject();
    assert_int_equal(dt_an_training_add_json(o, &t), 0);
    assert_null(cJSON_GetObjectItemCaseSensitive(o, "lambda_first"));
    cJSON_Delete(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_abs_stats_planted_outlier),
        cmocka_unit_test(test_outliers_run),
        cmocka_unit_test(test_quantize_loss),
        cmocka_unit_test(test_wq_split),
        cmocka_unit_test(test_quant_run_rows),
        cmocka_unit_test(test_needle_exact_matches_greedy),
        cmocka_unit_test(test_alloc_row_hand_maps),
        cmocka_unit_test(test_allocation_run),
        cmocka_unit_test(test_allocation_v2),
        cmocka_unit_test(test_allocation_rigged_model),
        cmocka_unit_test(test_spikes_and_lambda),
        cmocka_unit_test(test_analysis_json),
        cmocka_unit_test(test_protocol_uniform),
        cmocka_unit_test(test_protocol_first_token_sink),
        cmocka_unit_test(test_protocol_bins),
        cmocka_unit_test(test_protocol_refusals),
        cmocka_unit_test(test_head_context_kernels),
        cmocka_unit_test(test_protocol_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
