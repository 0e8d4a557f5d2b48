/* test_serve.c — the batched step against dt_decode_step, and the serving engine against
 * dt_generate: the same tokens whether a request runs alone or among others, prompt
 * log-probabilities against the full forward, cancellation, a full queue, the stop. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "difftrans.h"
#include "difftrans_serve.h"
#include "testutil.h"
#include "serve/prefill_budget.h"

/* A small random model whose logits are far apart (weights × 4): greedy choices are decided by
 * margins far above float rounding, so "the same tokens" is a fair demand of two summation orders. */
static void make_model(dt_model *m, dt_arch arch, uint64_t seed) {
    dt_config c;
    dt_error err;
    assert_int_equal(dt_config_preset(&c, "tiny", arch, &err), 0);
    c.max_position_embeddings = 96;
    assert_int_equal(dt_model_create(m, &c, &err), 0);
    dt_model_init_random(m, seed);
    for (size_t i = 0; i < m->n_params; i++) m->params[i] *= 4.0f;
    for (int l = 0; l < c.num_hidden_layers; l++) { /* norms back to one, λ vectors as initialised */
        const dt_layer_weights *w = &m->w.layers[l];
        for (int i = 0; i < c.hidden_size; i++) w->input_layernorm[i] = w->post_attention_layernorm[i] = 1.0f;
    }
    for (int i = 0; i < c.hidden_size; i++) m->w.norm[i] = 1.0f;
}

static void random_tokens(int *t, int n, int V, uint64_t *rng) {
    for (int i = 0; i < n; i++) t[i] = (int)(dt_rng_next(rng) % (uint64_t)V);
}

/* Three sequences fed through one dt_batch in mixed steps (prompt chunks of one slot beside
 * single rows of others, a slot reused from position 0 for a new sequence) against each sequence
 * on its own dt_decode_step cache. */
static float batch_vs_decode(const dt_model *m, dt_kv_dtype kv) {
    dt_error err;
    const int V = m->cfg.vocab_size, ctx = 40;
    enum { S = 3, LEN = 20 };
    int seq[S + 1][LEN];
    uint64_t rng = 99;
    for (int s = 0; s <= S; s++) random_tokens(seq[s], LEN, V, &rng);
    /* expected logits of every position of every sequence (seq[S] is the one slot 1 is reused for) */
    float *want = malloc((size_t)(S + 1) * LEN * V * sizeof(float));
    for (int s = 0; s <= S; s++) {
        dt_kvcache *kc = dt_kvcache_create_with(m, ctx, kv, &err);
        assert_non_null(kc);
        for (int p = 0; p < LEN; p++)
            assert_int_equal(dt_decode_step(m, kc, seq[s][p], p, want + ((size_t)s * LEN + p) * V, &err), 0);
        dt_kvcache_free(kc);
    }
    dt_batch *b = dt_batch_create(m, S, ctx, 16, kv, &err);
    assert_non_null(b);
    float *got = malloc((size_t)16 * V * sizeof(float));
    /* steps: {slot, first position, rows, sequence} */
    static const int plan[][4][4] = {
        {{0, 0, 7, 0}, {1, 0, 1, 1}, {-1}},
        {{1, 1, 1, 1}, {2, 0, 9, 2}, {0, 7, 1, 0}, {-1}},
        {{0, 8, 12, 0}, {1, 2, 1, 1}, {2, 9, 1, 2}, {-1}},
        {{2, 10, 10, 2}, {1, 3, 4, 1}, {-1}},
        {{1, 0, 5, 3}, {-1}}, /* slot 1 reused: its old positions beyond 4 are stale and never read */
        {{1, 5, 15, 3}, {-1}},
    };
    float worst = 0;
    for (size_t st = 0; st < sizeof plan / sizeof plan[0]; st++) {
        dt_batch_row rows[16];
        int which[16][2], n = 0;
        for (int g = 0; g < 4 && plan[st][g][0] >= 0; g++)
            for (int i = 0; i < plan[st][g][2]; i++) {
                const int pos = plan[st][g][1] + i, sq = plan[st][g][3];
                rows[n] = (dt_batch_row){.slot = plan[st][g][0], .pos = pos, .token = seq[sq][pos], .want_logits = 1};
                which[n][0] = sq;
                which[n++][1] = pos;
            }
        assert_int_equal(dt_batch_step(m, b, rows, n, got, &err), 0);
        for (int r = 0; r < n; r++) {
            const float d = tu_max_rel_diff(got + (size_t)r * V, want + ((size_t)which[r][0] * LEN + which[r][1]) * V,
                                            (size_t)V, 1.0f);
            if (!(d <= worst)) worst = d; /* NaN propagates */
        }
    }
    dt_batch_free(b);
    free(got);
    free(want);
    return worst;
}

static void test_batch_matches_decode_step(void **state) {
    (void)state;
    const dt_arch archs[] = {DT_ARCH_LLAMA, DT_ARCH_DIFF, DT_ARCH_DIFF_V2};
    const dt_kv_dtype kvs[] = {DT_KV_F32, DT_KV_F16, DT_KV_INT8};
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < 3; k++) {
            dt_model m;
            make_model(&m, archs[a], 7 + a);
            const float d = batch_vs_decode(&m, kvs[k]);
            printf("arch %d kv %d: batched vs decode step max rel diff %.3g\n", a, k, (double)d);
            /* F32: float rounding of the other summation order (1.3e-6 measured). F16 / INT8 round
             * k and v to a coarser grid, where a value that the two orders put on either side of
             * a rounding boundary moves by a whole step of it (1.3e-4 measured) */
            assert_true(d <= (kvs[k] == DT_KV_F32 ? 2e-5f : 2e-3f));
            dt_model_free(&m);
        }
    /* quantised linear layers run batched too */
    const dt_quant_scheme schemes[] = {DT_QUANT_Q8_0, DT_QUANT_Q4_0, DT_QUANT_W8A8};
    for (int q = 0; q < 3; q++) {
        dt_model m;
        dt_error err;
        make_model(&m, DT_ARCH_DIFF, 11);
        dt_quant_options qo;
        dt_quant_defaults(&qo);
        qo.scheme = schemes[q];
        qo.dynamic_activations = schemes[q] == DT_QUANT_W8A8; /* no calibration text here */
        qo.quiet = 1;
        if (dt_model_quantize(&m, &qo, &err) != 0) fail_msg("%s", err.msg);
        const float d = batch_vs_decode(&m, DT_KV_F32);
        printf("%s: batched vs decode step max rel diff %.3g\n", dt_quant_scheme_name(schemes[q]), (double)d);
        assert_true(d <= 2e-5f);
        dt_model_free(&m);
    }
}

/* A prompt chunk's consecutive rows share each read of the cache (runs of up to 4 rows of one slot
 * in one attention task): ten rows of two interleaved sequences in one step give the same logits,
 * bit for bit, as the same rows in steps of two (other runs, other shares of the cache; every
 * step ≥ 2 rows so that the linear layers take one path), for every architecture and an F32 and
 * an F16 cache. */
static void test_batch_chunking_same_bits(void **state) {
    (void)state;
    const dt_arch archs[] = {DT_ARCH_LLAMA, DT_ARCH_DIFF, DT_ARCH_DIFF_V2};
    const dt_kv_dtype kvs[] = {DT_KV_F32, DT_KV_F16};
    enum { N = 10 };
    /* slot 0 at positions 0..6, slot 1 at 0..2, interleaved as a step could hold them */
    const int slot[N] = {0, 0, 0, 1, 1, 0, 0, 0, 0, 1}, pos[N] = {0, 1, 2, 0, 1, 3, 4, 5, 6, 2};
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < 2; k++) {
            dt_model m;
            dt_error err;
            dt_config c;
            /* heads of 64: several vectors per dot and the kernels' four-vector passes (tiny's are 16) */
            assert_int_equal(dt_config_preset(&c, "tiny", archs[a], &err), 0);
            c.hidden_size = 128;
            c.intermediate_size = 352;
            c.num_attention_heads = c.num_key_value_heads = 4;
            c.head_dim = 64;
            if (dt_model_create(&m, &c, &err) != 0) fail_msg("%s", err.msg);
            dt_model_init_random(&m, 21 + (uint64_t)a);
            const int V = m.cfg.vocab_size;
            uint64_t rng = 5;
            dt_batch_row rows[N];
            for (int r = 0; r < N; r++)
                rows[r] = (dt_batch_row){.slot = slot[r], .pos = pos[r],
                                         .token = (int)(dt_rng_next(&rng) % (uint64_t)V), .want_logits = 1};
            float *whole = malloc((size_t)N * V * sizeof(float)), *pairs = malloc((size_t)N * V * sizeof(float));
            dt_batch *b1 = dt_batch_create(&m, 2, 16, N, kvs[k], &err), *b2 = dt_batch_create(&m, 2, 16, N, kvs[k], &err);
            assert_non_null(b1);
            assert_non_null(b2);
            assert_int_equal(dt_batch_step(&m, b1, rows, N, whole, &err), 0);
            for (int r = 0; r < N; r += 2)
                assert_int_equal(dt_batch_step(&m, b2, rows + r, 2, pairs + (size_t)r * V, &err), 0);
            for (int r = 0; r < N; r++)
                if (memcmp(whole + (size_t)r * V, pairs + (size_t)r * V, (size_t)V * sizeof(float)) != 0)
                    fail_msg("arch %d kv %d: row %d (slot %d, position %d): logits differ between one step and steps of two",
                             a, k, r, slot[r], pos[r]);
            dt_batch_free(b1);
            dt_batch_free(b2);
            free(whole);
            free(pairs);
            dt_model_free(&m);
        }
}

static void test_batch_refusals(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_DIFF, 3);
    dt_batch *b = dt_batch_create(&m, 2, 8, 4, DT_KV_F32, &err);
    assert_non_null(b);
    float logits[4 * 256];
    const dt_batch_row gap[] = {{0, 0, 1, 1}, {0, 2, 1, 1}};
    assert_int_equal(dt_batch_step(&m, b, gap, 2, logits, &err), -1);
    assert_non_null(strstr(err.msg, "consecutive"));
    const dt_batch_row slot[] = {{2, 0, 1, 1}};
    assert_int_equal(dt_batch_step(&m, b, slot, 1, logits, &err), -1);
    assert_non_null(strstr(err.msg, "slot 2"));
    const dt_batch_row tok[] = {{0, 0, 256, 1}};
    assert_int_equal(dt_batch_step(&m, b, tok, 1, logits, &err), -1);
    assert_non_null(strstr(err.msg, "token id 256"));
    const dt_batch_row pos[] = {{0, 8, 1, 1}};
    assert_int_equal(dt_batch_step(&m, b, pos, 1, logits, &err), -1);
    assert_non_null(strstr(err.msg, "position 8"));
    const dt_batch_row before[] = {{0, -1, 1, 1}};
    assert_int_equal(dt_batch_step(&m, b, before, 1, logits, &err), -1);
    if (!strstr(err.msg, "position -1 is outside the context 0..7")) fail_msg("%s", err.msg);
    const dt_batch_row many[5] = {{0, 0, 1, 0}};
    assert_int_equal(dt_batch_step(&m, b, many, 5, logits, &err), -1);
    assert_non_null(strstr(err.msg, "5 rows"));
    /* a slot goes on from the positions it was fed, across steps as within one: a skip would attend
     * to positions never fed (zeros, or a sequence the slot held before) */
    const dt_batch_row two[] = {{1, 0, 1, 0}, {1, 1, 2, 1}}, skip[] = {{1, 3, 3, 1}}, unfed[] = {{0, 1, 1, 1}};
    assert_int_equal(dt_batch_step(&m, b, two, 2, logits, &err), 0);
    assert_int_equal(dt_batch_step(&m, b, skip, 1, logits, &err), -1);
    assert_non_null(strstr(err.msg, "slot 1 at position 3 after the 2 positions it was fed"));
    assert_int_equal(dt_batch_step(&m, b, unfed, 1, logits, &err), -1);
    assert_non_null(strstr(err.msg, "slot 0 at position 1 after the 0 positions"));
    const dt_batch_row next[] = {{1, 2, 3, 1}}, back[] = {{1, 1, 5, 1}}, again[] = {{1, 3, 3, 1}};
    assert_int_equal(dt_batch_step(&m, b, next, 1, logits, &err), 0);
    assert_int_equal(dt_batch_step(&m, b, back, 1, logits, &err), 0); /* rewrites from position 1 */
    assert_int_equal(dt_batch_step(&m, b, again, 1, logits, &err), -1); /* position 2 is the old sequence's */
    assert_non_null(strstr(err.msg, "after the 2 positions"));
    dt_batch_free(b);
    assert_null(dt_batch_create(&m, 0, 8, 4, DT_KV_F32, &err));
    assert_null(dt_batch_create(&m, 1, 97, 4, DT_KV_F32, &err)); /* past max_position_embeddings */
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- the engine */

typedef struct {
    int tokens[128], n_tokens;
    dt_event done;
    int n_prompt_events;
    dt_event prompt_events[128];
} collected;

static void collect(dt_engine_request *q, collected *c) {
    memset(c, 0, sizeof *c);
    dt_event ev;
    for (;;) {
        assert_int_equal(dt_engine_next(q, &ev, 30.0), 1);
        if (ev.type == DT_EVENT_DONE) {
            c->done = ev;
            break;
        }
        if (ev.type == DT_EVENT_PROMPT) c->prompt_events[c->n_prompt_events++] = ev;
        else if (!ev.is_stop) c->tokens[c->n_tokens++] = ev.token;
    }
    assert_int_equal(dt_engine_next(q, &ev, 0), 0); /* nothing after DONE */
}

static void expect_generate(const dt_model *m, const int *prompt, int np, int max_new, float temperature,
                            uint64_t seed, int *out, int *n_out) {
    dt_generate_options o;
    dt_generate_defaults(&o);
    o.max_new_tokens = max_new;
    o.sampler.temperature = temperature;
    o.sampler.top_p = 1.0f;
    o.seed = seed;
    o.n_stop = 0;
    dt_generate_result r;
    dt_error err;
    assert_int_equal(dt_generate(m, prompt, np, &o, out, &r, &err), 0);
    *n_out = r.n_generated;
}

static dt_engine_request_options request(const int *prompt, int np, int max_new, float temperature, uint64_t seed) {
    dt_engine_request_options r;
    dt_engine_request_defaults(&r);
    r.prompt = prompt;
    r.n_prompt = np;
    r.max_new_tokens = max_new;
    r.sampler = (dt_sampler){.temperature = temperature, .top_k = 0, .top_p = 1.0f};
    r.seed = seed;
    r.n_stop = 0;
    return r;
}

/* Ten requests of different lengths on three slots (seven wait in the queue, prompts prefill in
 * chunks beside decoding ones): each gives exactly the tokens dt_generate gives it alone. */
static void test_engine_matches_generate(void **state) {
    (void)state;
    const dt_arch archs[] = {DT_ARCH_DIFF, DT_ARCH_LLAMA, DT_ARCH_DIFF_V2};
    for (int a = 0; a < 3; a++) {
        dt_model m;
        dt_error err;
        make_model(&m, archs[a], 21 + a);
        dt_engine_options eo;
        dt_engine_defaults(&eo);
        eo.n_slots = 3;
        eo.prefill_chunk = 5;
        eo.max_rows = 12;
        dt_engine *e = dt_engine_create(&m, &eo, &err);
        assert_non_null(e);
        enum { N = 10 };
        int prompts[N][40], np[N], max_new[N];
        uint64_t rng = 5 + a;
        dt_engine_request *q[N];
        for (int i = 0; i < N; i++) {
            np[i] = 1 + (int)(dt_rng_next(&rng) % 37);
            max_new[i] = 1 + (int)(dt_rng_next(&rng) % 30);
            random_tokens(prompts[i], np[i], m.cfg.vocab_size, &rng);
            dt_engine_request_options r = request(prompts[i], np[i], max_new[i], i % 3 == 2 ? 0.9f : 0.0f, 100 + i);
            assert_int_equal(dt_engine_submit(e, &r, &q[i], &err), 0);
        }
        for (int i = 0; i < N; i++) {
            collected c;
            collect(q[i], &c);
            int want[64], n_want;
            expect_generate(&m, prompts[i], np[i], max_new[i], i % 3 == 2 ? 0.9f : 0.0f, 100 + i, want, &n_want);
            assert_int_equal(c.done.stop, DT_STOP_LENGTH);
            assert_int_equal(c.done.n_prompt, np[i]);
            assert_int_equal(c.done.n_generated, n_want);
            assert_int_equal(c.n_tokens, n_want);
            assert_memory_equal(c.tokens, want, (size_t)n_want * sizeof(int));
            assert_true(c.done.first_token_s > 0);
            dt_engine_release(q[i]);
        }
        dt_engine_stats s;
        dt_engine_get_stats(e, &s);
        assert_int_equal(s.slots_in_use, 0);
        assert_int_equal(s.queue_depth, 0);
        assert_int_equal((int)s.requests_done, N);
        assert_true(s.steps > 0);
        dt_engine_free(e);
        dt_model_free(&m);
    }
}

/* Prompt log-probabilities (echo) against the log-softmax of the full forward's logits. */
static void test_engine_prompt_logprobs(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_DIFF, 31);
    const int V = m.cfg.vocab_size;
    enum { T = 23 };
    int prompt[T];
    uint64_t rng = 8;
    random_tokens(prompt, T, V, &rng);
    dt_runstate *rs = dt_runstate_create(&m, 1, T, &err);
    assert_non_null(rs);
    assert_int_equal(dt_forward(&m, rs, prompt, NULL, 1, T, NULL, &err), 0);
    const float *logits = dt_runstate_logits(rs);

    dt_engine_options eo;
    dt_engine_defaults(&eo);
    eo.n_slots = 2;
    eo.prefill_chunk = 4;
    dt_engine *e = dt_engine_create(&m, &eo, &err);
    assert_non_null(e);
    dt_engine_request *q, *other;
    dt_engine_request_options r = request(prompt, T, 0, 0.0f, 1); /* max_tokens 0: the prompt alone */
    r.prompt_logprobs = 1;
    r.top_logprobs = 5;
    const int other_prompt[3] = {1, 2, 3};
    dt_engine_request_options ro = request(other_prompt, 3, 40, 0.0f, 1); /* decoding beside it */
    assert_int_equal(dt_engine_submit(e, &ro, &other, &err), 0);
    assert_int_equal(dt_engine_submit(e, &r, &q, &err), 0);
    collected c;
    collect(q, &c);
    assert_int_equal(c.done.stop, DT_STOP_LENGTH);
    assert_int_equal(c.done.n_generated, 0);
    assert_int_equal(c.n_prompt_events, T - 1);
    for (int t = 1; t < T; t++) {
        const dt_event *ev = &c.prompt_events[t - 1];
        const float *row = logits + (size_t)(t - 1) * V;
        double mx = row[0], sum = 0;
        for (int i = 1; i < V; i++) mx = fmax(mx, row[i]);
        for (int i = 0; i < V; i++) sum += exp(row[i] - mx);
        const double lse = mx + log(sum);
        assert_int_equal(ev->position, t);
        assert_int_equal(ev->token, prompt[t]);
        assert_true(fabs(ev->logprob - (row[prompt[t]] - lse)) < 2e-3);
        assert_int_equal(ev->n_top, 5);
        int best = 0;
        for (int i = 1; i < V; i++)
            if (row[i] > row[best]) best = i;
        assert_int_equal(ev->top_ids[0], best);
        for (int k = 0; k < 5; k++) {
            assert_true(fabs(ev->top_logprobs[k] - (row[ev->top_ids[k]] - lse)) < 2e-3);
            if (k) assert_true(ev->top_logprobs[k] <= ev->top_logprobs[k - 1]);
        }
    }
    dt_engine_release(q);
    collect(other, &c);
    assert_int_equal(c.n_tokens, 40);
    dt_engine_release(other);
    dt_runstate_free(rs);
    dt_engine_free(e);
    dt_model_free(&m);
}

/* A generated token's log-probabilities, and a stop id ending the request. */
static void test_engine_token_logprobs_and_stop(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_LLAMA, 41);
    dt_engine_options eo;
    dt_engine_defaults(&eo);
    dt_engine *e = dt_engine_create(&m, &eo, &err);
    assert_non_null(e);
    const int prompt[4] = {10, 20, 30, 40};
    int want[8], n_want;
    expect_generate(&m, prompt, 4, 8, 0.0f, 1, want, &n_want);
    dt_engine_request_options r = request(prompt, 4, 8, 0.0f, 1);
    r.top_logprobs = 3;
    dt_engine_request *q;
    assert_int_equal(dt_engine_submit(e, &r, &q, &err), 0);
    dt_event ev;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(dt_engine_next(q, &ev, 30.0), 1);
        assert_int_equal(ev.type, DT_EVENT_TOKEN);
        assert_int_equal(ev.token, want[i]);
        assert_int_equal(ev.position, 4 + i);
        assert_int_equal(ev.top_ids[0], want[i]); /* greedy: the best alternative */
        assert_true(ev.logprob <= 0 && fabsf(ev.logprob - ev.top_logprobs[0]) < 1e-6f);
    }
    assert_int_equal(dt_engine_next(q, &ev, 30.0), 1);
    assert_int_equal(ev.type, DT_EVENT_DONE);
    dt_engine_release(q);
    /* the first greedy token that differs from those before it, as a stop id: the ones before,
     * then the stop */
    int at = 1;
    while (at < 7 && (want[at] == want[0] || (at > 1 && want[at] == want[1]))) at++;
    r.stop_ids = &want[at];
    r.n_stop = 1;
    assert_int_equal(dt_engine_submit(e, &r, &q, &err), 0);
    collected c;
    collect(q, &c);
    assert_int_equal(c.done.stop, DT_STOP_EOS);
    assert_int_equal(c.done.stop_token, want[at]);
    int first = 0; /* the stop id's first appearance among the greedy tokens */
    while (want[first] != want[at]) first++;
    assert_int_equal(c.n_tokens, first);
    assert_int_equal(c.done.n_generated, first);
    assert_memory_equal(c.tokens, want, (size_t)first * sizeof(int));
    dt_engine_release(q);
    dt_engine_free(e);
    dt_model_free(&m);
}

/* What test_engine_cancel_busy_stop does between two steps of the engine (dt_engine_exclusive: no
 * step runs meanwhile), so that it cannot race the requests it looks at: on a loaded machine a
 * request of 80 tokens of the tiny model finished between two lines of the test, and the queue the
 * next line expected full had room. Results are checked on the test's thread. */
typedef struct {
    dt_engine *e;
    const dt_engine_request_options *r;
    dt_engine_request *a, *b, *c, *d;
    int running;                 /* the slot was still taken when the job ran */
    int rc_b, rc_c, rc_d;
    dt_error err_c;
    volatile int stopping_seen;  /* phase 2: a submit was refused as the engine shut down */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int ready;                   /* phase 2: the slot is taken, the test may stop the engine */
} paused;

static int slot_taken(dt_engine *e) {
    dt_engine_stats st;
    dt_engine_get_stats(e, &st);
    return st.slots_in_use == 1 && st.queue_depth == 0;
}

/* a runs: b waits for the slot, c finds the queue full, a is cancelled */
static int pause_submit_cancel(void *ctx) {
    paused *p = ctx;
    if (!(p->running = slot_taken(p->e))) return 0;
    dt_error err;
    p->rc_b = dt_engine_submit(p->e, p->r, &p->b, &err);
    p->rc_c = dt_engine_submit(p->e, p->r, &p->c, &p->err_c);
    dt_engine_cancel(p->a);
    return 0;
}

/* b runs, d waits: the test stops the engine while no step runs (a submit is refused for the full queue
 * until the stop, then for the shutdown) */
static int pause_until_stop(void *ctx) {
    paused *p = ctx;
    p->running = slot_taken(p->e);
    dt_error err;
    if (p->running) p->rc_d = dt_engine_submit(p->e, p->r, &p->d, &err);
    pthread_mutex_lock(&p->mu);
    p->ready = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    if (!p->running || p->rc_d != 0) return 0;
    for (int i = 0; i < 100000 && !p->stopping_seen; i++) {
        dt_engine_request *x = NULL;
        if (dt_engine_submit(p->e, p->r, &x, &err) == 0) {
            dt_engine_release(x);
            return 0;
        }
        p->stopping_seen = strstr(err.msg, "shutting down") != NULL;
        if (!p->stopping_seen) usleep(100);
    }
    return 0;
}

static void *exclusive_thread(void *arg) {
    paused *p = arg;
    dt_engine_exclusive(p->e, pause_until_stop, p);
    return NULL;
}

/* Between two steps of the engine: five requests to two free slots and a queue of two */
typedef struct {
    dt_engine *e;
    const dt_engine_request_options *r;
    dt_engine_request *q[5];
    int rc[5];
    dt_error err;
} five_submits;

static int submit_five(void *ctx) {
    five_submits *f = ctx;
    for (int i = 0; i < 5; i++) f->rc[i] = dt_engine_submit(f->e, f->r, &f->q[i], &f->err);
    return 0;
}

/* The first two of four queued requests take the two free slots at the next step: the refusal of a
 * fifth says so (it said "4 requests already wait for one of 2 slots", with room for two of them). */
static void test_engine_busy_counts(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_DIFF, 52);
    dt_engine_options eo;
    dt_engine_defaults(&eo);
    eo.n_slots = 2;
    eo.max_queue = 2;
    eo.ctx = 32;
    dt_engine *e = dt_engine_create(&m, &eo, &err);
    assert_non_null(e);
    const int prompt[2] = {1, 2};
    dt_engine_request_options r = request(prompt, 2, 8, 0.0f, 1);
    five_submits f = {.e = e, .r = &r};
    assert_int_equal(dt_engine_exclusive(e, submit_five, &f), 0);
    for (int i = 0; i < 4; i++) assert_int_equal(f.rc[i], 0);
    assert_int_equal(f.rc[4], -1);
    assert_null(f.q[4]);
    assert_int_equal(f.err.code, DT_ERR_BUSY);
    if (!strstr(f.err.msg, "no slot is free (0 running, 2 about to start) and the queue is full (2 waiting, it "
                           "holds 2)"))
        fail_msg("message: %s", f.err.msg);
    dt_engine_stop(e);
    for (int i = 0; i < 4; i++) dt_engine_release(f.q[i]);
    dt_engine_free(e);
    dt_model_free(&m);
}

/* A full queue refuses with DT_ERR_BUSY; a cancelled request frees its slot for the next; the stop
 * ends whatever still runs; refusals name the counts. */
static void test_engine_cancel_busy_stop(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_DIFF, 51);
    dt_engine_options eo;
    dt_engine_defaults(&eo);
    eo.n_slots = 1;
    eo.max_queue = 1;
    eo.ctx = 90;
    dt_engine *e = dt_engine_create(&m, &eo, &err);
    assert_non_null(e);
    const int prompt[2] = {1, 2};
    dt_engine_request_options r = request(prompt, 2, 80, 0.0f, 1);
    paused p = {.e = e, .r = &r};
    dt_event ev;
    /* a that finished before the pause is tried again */
    for (int tries = 0; !p.running; tries++) {
        assert_true(tries < 50);
        assert_int_equal(dt_engine_submit(e, &r, &p.a, &err), 0);
        assert_int_equal(dt_engine_next(p.a, &ev, 30.0), 1); /* a runs: it has its slot */
        assert_int_equal(dt_engine_exclusive(e, pause_submit_cancel, &p), 0);
        if (!p.running) dt_engine_release(p.a);
    }
    assert_int_equal(p.rc_b, 0); /* b waits */
    assert_int_equal(p.rc_c, -1);
    assert_null(p.c);
    assert_int_equal(p.err_c.code, DT_ERR_BUSY);
    if (!strstr(p.err_c.msg, "no slot is free (1 running) and the queue is full (1 waiting, it holds 1)"))
        fail_msg("message: %s", p.err_c.msg);
    collected got;
    do assert_int_equal(dt_engine_next(p.a, &ev, 30.0), 1);
    while (ev.type != DT_EVENT_DONE);
    assert_int_equal(ev.stop, DT_STOP_CANCELLED);
    assert_true(ev.n_generated < 80);
    dt_engine_release(p.a);
    assert_int_equal(dt_engine_next(p.b, &ev, 30.0), 1); /* b took the slot */
    assert_int_equal(ev.type, DT_EVENT_TOKEN);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cond, NULL);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, exclusive_thread, &p), 0);
    pthread_mutex_lock(&p.mu);
    while (!p.ready) pthread_cond_wait(&p.cond, &p.mu);
    pthread_mutex_unlock(&p.mu);
    dt_engine_stop(e); /* ends b and d; no new requests */
    pthread_join(t, NULL);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cond);
    if (p.running) { /* b had not finished when the job ran: it ran until the stop */
        assert_int_equal(p.rc_d, 0);
        assert_true(p.stopping_seen);
        collect(p.d, &got);
        assert_int_equal(got.done.stop, DT_STOP_CANCELLED);
        assert_int_equal(got.n_tokens, 0);
        dt_engine_release(p.d);
    }
    collect(p.b, &got);
    if (p.running) assert_int_equal(got.done.stop, DT_STOP_CANCELLED);
    assert_int_equal(dt_engine_submit(e, &r, &p.c, &err), -1);
    assert_int_equal(err.code, DT_ERR_BUSY);
    dt_engine_release(p.b);
    dt_engine_free(e);

    /* refusals */
    dt_engine_request *c;
    e = dt_engine_create(&m, &eo, &err);
    assert_non_null(e);
    dt_engine_request_options dflt; /* the defaults submit as they are, once given a prompt */
    dt_engine_request_defaults(&dflt);
    assert_int_equal(dflt.top_logprobs, -1);
    assert_true(dflt.sampler.top_p > 0 && dflt.sampler.top_p <= 1 && dflt.n_stop < 0);
    dflt.prompt = prompt;
    dflt.n_prompt = 2;
    dflt.max_new_tokens = 3;
    assert_int_equal(dt_engine_submit(e, &dflt, &c, &err), 0);
    collected got_default;
    collect(c, &got_default);
    assert_true(got_default.done.stop == DT_STOP_LENGTH || got_default.done.stop == DT_STOP_EOS);
    dt_engine_release(c);
    dt_engine_request_options zeroed = {.prompt = prompt, .n_prompt = 2, .max_new_tokens = 1};
    assert_int_equal(dt_engine_submit(e, &zeroed, &c, &err), -1); /* top_p 0 */
    assert_int_equal(err.code, DT_ERR_INVALID);
    dt_engine_request_options bad = request(prompt, 2, 89, 0.0f, 1);
    assert_int_equal(dt_engine_submit(e, &bad, &c, &err), -1);
    assert_int_equal(err.code, DT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "2 tokens"));
    assert_non_null(strstr(err.msg, "89"));
    assert_non_null(strstr(err.msg, "90"));
    const int oov[2] = {1, 256};
    bad = request(oov, 2, 1, 0.0f, 1);
    assert_int_equal(dt_engine_submit(e, &bad, &c, &err), -1);
    assert_non_null(strstr(err.msg, "256"));
    bad = request(prompt, 2, 1, -1.0f, 1);
    assert_int_equal(dt_engine_submit(e, &bad, &c, &err), -1);
    dt_engine_free(e);
    eo.ctx = 97;
    assert_null(dt_engine_create(&m, &eo, &err));
    dt_model_free(&m);
}

/* An engine of n_slots slots of ctx tokens, max_queue waiting at most. */
static dt_engine *small_engine(const dt_model *m, int n_slots, int max_queue, int ctx) {
    dt_engine_options eo;
    dt_engine_defaults(&eo);
    eo.n_slots = n_slots;
    eo.max_queue = max_queue;
    eo.ctx = ctx;
    dt_error err;
    dt_engine *e = dt_engine_create(m, &eo, &err);
    if (!e) fail_msg("%s", err.msg);
    return e;
}

static int no_job(void *ctx) {
    (void)ctx;
    return 0;
}

/* Requests cancelled while they wait leave the queue at the next step, also behind a live one that
 * still waits for a slot: they no longer count against max_queue. */
static void test_engine_cancelled_leave_queue(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_LLAMA, 57);
    dt_engine *e = small_engine(&m, 1, 3, 96);
    const int prompt[2] = {1, 2};
    dt_engine_request_options r = request(prompt, 2, 90, 0.0f, 1);
    dt_engine_request *a, *b, *c, *d, *x;
    assert_int_equal(dt_engine_submit(e, &r, &a, &err), 0);
    dt_event ev;
    assert_int_equal(dt_engine_next(a, &ev, 30.0), 1); /* a holds the one slot */
    assert_int_equal(dt_engine_submit(e, &r, &b, &err), 0);
    assert_int_equal(dt_engine_submit(e, &r, &c, &err), 0);
    assert_int_equal(dt_engine_submit(e, &r, &d, &err), 0);
    assert_int_equal(dt_engine_submit(e, &r, &x, &err), -1); /* three wait: full */
    dt_engine_cancel(c);
    dt_engine_cancel(d);
    /* two jobs: the second runs after a whole pass of the engine's loop, admission included */
    assert_int_equal(dt_engine_exclusive(e, no_job, NULL), 0);
    assert_int_equal(dt_engine_exclusive(e, no_job, NULL), 0);
    dt_engine_stats st;
    dt_engine_get_stats(e, &st);
    assert_int_equal(st.requests_done, 0); /* a still runs: b still waits in front of c and d */
    assert_int_equal(st.queue_depth, 1);
    assert_int_equal(st.requests_cancelled, 2);
    assert_int_equal(dt_engine_submit(e, &r, &x, &err), 0); /* room again */
    dt_engine_release(x);
    dt_engine_release(d);
    dt_engine_release(c);
    dt_engine_release(b);
    dt_engine_release(a);
    dt_engine_free(e);
    dt_model_free(&m);
}

/* A model whose logits are not finite (an embedding row of NaN: weights that overflowed) ends the
 * request with DT_STOP_ERROR and the message naming the logit, rather than sampling noise or
 * reporting null log-probabilities; the engine goes on serving once the model is sound. */
static void test_engine_nonfinite_logits(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_LLAMA, 61);
    const int C = m.cfg.hidden_size;
    float *row = m.w.embed_tokens + (size_t)7 * C;
    const float kept = row[3];
    row[3] = NAN;
    dt_engine *e = small_engine(&m, 2, 64, 64);
    const int prompt[3] = {1, 7, 2};
    dt_engine_request_options r = request(prompt, 3, 5, 0.8f, 1);
    r.top_logprobs = 2;
    dt_engine_request *q;
    assert_int_equal(dt_engine_submit(e, &r, &q, &err), 0);
    collected got;
    collect(q, &got);
    assert_int_equal(got.done.stop, DT_STOP_ERROR);
    assert_int_equal(got.n_tokens, 0);
    assert_non_null(got.done.error);
    assert_non_null(strstr(got.done.error, "at position 2 is nan: the model's weights overflow float32"));
    dt_engine_release(q);
    dt_engine_stats st;
    dt_engine_get_stats(e, &st);
    assert_int_equal(st.requests_failed, 1);
    assert_int_equal(st.requests_done, 0);
    row[3] = kept; /* the engine reads the weights at each step */
    assert_int_equal(dt_engine_submit(e, &r, &q, &err), 0);
    collect(q, &got);
    assert_int_equal(got.done.stop, DT_STOP_LENGTH);
    assert_int_equal(got.n_tokens, 5);
    assert_null(got.done.error);
    dt_engine_release(q);
    dt_engine_free(e);
    dt_model_free(&m);
}

/* Released without reading: the engine ends it and frees it (the leak check of the sanitizer
 * build holds this); exclusive jobs run on the engine thread between steps. */
static int job(void *ctx) {
    *(pthread_t *)ctx = pthread_self();
    return 42;
}

static void test_engine_release_and_exclusive(void **state) {
    (void)state;
    dt_model m;
    dt_error err;
    make_model(&m, DT_ARCH_DIFF_V2, 61);
    dt_engine_options eo;
    dt_engine_defaults(&eo);
    eo.n_slots = 2;
    dt_engine *e = dt_engine_create(&m, &eo, &err);
    assert_non_null(e);
    const int prompt[3] = {5, 6, 7};
    dt_engine_request_options r = request(prompt, 3, 50, 0.5f, 3);
    for (int i = 0; i < 6; i++) {
        dt_engine_request *q;
        assert_int_equal(dt_engine_submit(e, &r, &q, &err), 0);
        if (i % 2) usleep(2000);
        dt_engine_release(q);
    }
    pthread_t where = pthread_self(), me = pthread_self();
    assert_int_equal(dt_engine_exclusive(e, job, &where), 42);
    assert_false(pthread_equal(where, me));
    for (int tries = 0; tries < 3000; tries++) {
        dt_engine_stats s;
        dt_engine_get_stats(e, &s);
        if (s.slots_in_use == 0 && s.queue_depth == 0) break;
        usleep(1000);
    }
    dt_engine_stats s;
    dt_engine_get_stats(e, &s);
    assert_int_equal(s.slots_in_use, 0);
    assert_int_equal(s.queue_depth, 0);
    dt_engine_free(e);
    dt_model_free(&m);
}

/* Greedy is the first largest logit wherever it is (NaN never chosen, ties to the lower id); top-k
 * and top-p keep only the tokens they should and every kept token is drawn. */
static void test_sample_greedy_and_truncation(void **state) {
    (void)state;
    enum { V = 1000 };
    float logits[V], work[V];
    dt_prob_index scratch[V];
    uint64_t rng = 7;
    for (int i = 0; i < V; i++) logits[i] = (float)((i * 7919) % 997) / 100.0f - 5.0f; /* below 4.97 */
    const dt_sampler greedy = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
    logits[700] = 6.0f; /* the largest, and a later tie */
    logits[900] = 6.0f;
    memcpy(work, logits, sizeof work);
    assert_int_equal(dt_sample(work, V, &greedy, &rng, scratch), 700);
    logits[0] = NAN; /* a NaN first, where the running largest starts, and one past the maximum */
    logits[701] = NAN;
    memcpy(work, logits, sizeof work);
    assert_int_equal(dt_sample(work, V, &greedy, &rng, scratch), 700);
    logits[999] = 7.0f; /* the very last one */
    memcpy(work, logits, sizeof work);
    assert_int_equal(dt_sample(work, V, &greedy, &rng, scratch), 999);
    logits[0] = logits[701] = 0.0f;

    /* top-k 3 at a high temperature: only 999, 700 and 900, each of them drawn */
    const dt_sampler top3 = {.temperature = 4.0f, .top_k = 3, .top_p = 1.0f};
    int seen[V] = {0};
    for (int t = 0; t < 300; t++) {
        memcpy(work, logits, sizeof work);
        seen[dt_sample(work, V, &top3, &rng, scratch)]++;
    }
    assert_int_equal(seen[999] + seen[700] + seen[900], 300);
    assert_true(seen[999] > 0 && seen[700] > 0 && seen[900] > 0);
    /* a nucleus smaller than the largest token's probability: that token alone */
    const dt_sampler nucleus = {.temperature = 1.0f, .top_k = 0, .top_p = 0.01f};
    for (int t = 0; t < 20; t++) {
        memcpy(work, logits, sizeof work);
        assert_int_equal(dt_sample(work, V, &nucleus, &rng, scratch), 999);
    }
}

/* top-k then top-p: top-p counts the probabilities of the top-k tokens renormalised (transformers'
 * TopPLogitsWarper softmaxes what TopKLogitsWarper left; vLLM's apply_top_k_top_p likewise). */
static void test_sample_top_k_then_top_p(void **state) {
    (void)state;
    const float probs[5] = {0.05f, 0.5f, 0.1f, 0.2f, 0.15f};
    float logits[5], work[5];
    dt_prob_index scratch[5];
    for (int i = 0; i < 5; i++) logits[i] = logf(probs[i]);
    uint64_t rng = 3;
    /* the top 3 renormalised are 0.59, 0.24, 0.18: top-p 0.8 keeps two (of the whole vocabulary's
     * probabilities, 0.5 + 0.2 fell short and kept three) */
    const dt_sampler s = {.temperature = 1, .top_k = 3, .top_p = 0.8f};
    for (int t = 0; t < 50; t++) {
        memcpy(work, logits, sizeof work);
        const int id = dt_sample(work, 5, &s, &rng, scratch);
        assert_true(id == 1 || id == 3);
        assert_true(fabsf(work[1] - 0.5f / 0.7f) < 1e-5f && fabsf(work[3] - 0.2f / 0.7f) < 1e-5f);
        assert_true(work[0] == 0 && work[2] == 0 && work[4] == 0);
    }
}

/* The probabilities dt_sample draws from, worked out the plain way in double precision: softmax of
 * logits / T; the tokens at least min_p times as likely as the most likely; of those the top_k; of
 * those, renormalised, the fewest (most likely first) whose probability reaches top_p. */
static void reference_probs(const float *logits, int V, double T, int top_k, double top_p, double min_p, double *p) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) mx = fmax(mx, logits[i]);
    for (int i = 0; i < V; i++) sum += p[i] = exp((logits[i] - mx) / T);
    double top = 0;
    for (int i = 0; i < V; i++) top = fmax(top, p[i] / sum);
    int order[64];
    int n = 0;
    for (int i = 0; i < V; i++)
        if (p[i] / sum >= min_p * top) order[n++] = i;
    for (int a = 0; a < n; a++) /* most likely first, the lower id first among equals */
        for (int b = a + 1; b < n; b++)
            if (p[order[b]] > p[order[a]] || (p[order[b]] == p[order[a]] && order[b] < order[a])) {
                const int t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
    if (top_k > 0 && top_k < n) n = top_k;
    double kept = 0;
    for (int i = 0; i < n; i++) kept += p[order[i]];
    if (top_p < 1) {
        double cum = 0;
        for (int i = 0; i < n; i++) {
            cum += p[order[i]] / kept;
            if (cum >= top_p) {
                n = i + 1;
                break;
            }
        }
    }
    kept = 0;
    for (int i = 0; i < n; i++) kept += p[order[i]];
    double q[64] = {0};
    for (int i = 0; i < n; i++) q[order[i]] = p[order[i]] / kept;
    for (int i = 0; i < V; i++) p[i] = q[i];
}

/* dt_sample's probabilities (what it leaves in logits) against reference_probs, and every draw
 * from the tokens it keeps. Returns how many tokens it kept. */
static int check_against_reference(const float *logits, int V, const dt_sampler *s, uint64_t *rng) {
    float work[64];
    dt_prob_index scratch[64];
    double want[64];
    reference_probs(logits, V, s->temperature, s->top_k, s->top_p, s->min_p, want);
    int kept = 0;
    for (int t = 0; t < 50; t++) {
        memcpy(work, logits, (size_t)V * sizeof *work);
        const int id = dt_sample(work, V, s, rng, scratch);
        assert_true(id >= 0 && id < V && want[id] > 0);
        kept = 0;
        for (int i = 0; i < V; i++) {
            assert_true(fabs(work[i] - want[i]) <= 1e-5); /* fails on NaN */
            assert_true((work[i] > 0) == (want[i] > 0));
            kept += want[i] > 0;
        }
    }
    return kept;
}

/* min-p: the tokens at least min_p times as likely as the most likely, after the temperature and
 * before top-k and top-p (vLLM's order), on distributions where min-p keeps another set than top-p
 * and where the orders disagree; random ones against the reference. */
static void test_sample_min_p(void **state) {
    (void)state;
    const double probs[5] = {0.5, 0.2, 0.15, 0.1, 0.05};
    float logits[5];
    for (int i = 0; i < 5; i++) logits[i] = (float)log(probs[(i + 2) % 5]); /* the top token is not id 0 */
    uint64_t rng = 11;
    /* min-p 0.25: 0.5, 0.2 and 0.15 (at least 0.125); top-p 0.9 alone keeps 0.1 too */
    const dt_sampler min_p = {.temperature = 1, .top_k = 0, .top_p = 1, .min_p = 0.25f};
    assert_int_equal(check_against_reference(logits, 5, &min_p, &rng), 3);
    const dt_sampler top_p = {.temperature = 1, .top_k = 0, .top_p = 0.9f};
    assert_int_equal(check_against_reference(logits, 5, &top_p, &rng), 4);
    /* both: top-p 0.8 over min-p's three renormalised (0.59, 0.24, 0.18) keeps two, where top-p
     * over the whole distribution then min-p (llama.cpp's and transformers' order) keeps three */
    const dt_sampler both = {.temperature = 1, .top_k = 0, .top_p = 0.8f, .min_p = 0.25f};
    assert_int_equal(check_against_reference(logits, 5, &both, &rng), 2);
    /* after the temperature: at T 2 min-p 0.5 keeps three (ratios √0.4, √0.3), at T 1 the top alone */
    const dt_sampler hot = {.temperature = 2, .top_k = 0, .top_p = 1, .min_p = 0.5f};
    assert_int_equal(check_against_reference(logits, 5, &hot, &rng), 3);
    const dt_sampler cool = {.temperature = 1, .top_k = 0, .top_p = 1, .min_p = 0.5f};
    assert_int_equal(check_against_reference(logits, 5, &cool, &rng), 1);
    /* with top-k: the fewer of the two */
    const dt_sampler k2 = {.temperature = 1, .top_k = 2, .top_p = 1, .min_p = 0.25f};
    assert_int_equal(check_against_reference(logits, 5, &k2, &rng), 2);
    const dt_sampler k4 = {.temperature = 1, .top_k = 4, .top_p = 1, .min_p = 0.25f};
    assert_int_equal(check_against_reference(logits, 5, &k4, &rng), 3);
    /* min-p 1: the most likely alone, as greedy */
    const dt_sampler one = {.temperature = 1, .top_k = 0, .top_p = 1, .min_p = 1};
    assert_int_equal(check_against_reference(logits, 5, &one, &rng), 1);
    /* random distributions and settings */
    uint64_t r = 0x9E3779B97F4A7C15ULL;
    for (int trial = 0; trial < 300; trial++) {
        float l[48];
        for (int i = 0; i < 48; i++) l[i] = (float)((dt_rng_uniform(&r) - 0.5) * 8);
        const dt_sampler s = {.temperature = 0.3f + 2 * dt_rng_uniform(&r),
                              .top_k = trial % 3 ? 0 : 1 + (int)(dt_rng_uniform(&r) * 20),
                              .top_p = trial % 2 ? 1.0f : 0.2f + 0.8f * dt_rng_uniform(&r),
                              .min_p = trial % 5 ? dt_rng_uniform(&r) * 0.6f : 0.0f};
        check_against_reference(l, 48, &s, &rng);
    }
}

/* The step time of 4 decoding rows and k prompt rows from position P on, as measured for config E
 * q8_0 on 2 threads (ms): a fixed cost for the first prompt row that grows with P (the slot's
 * cache is read once per chunk), and a cost per row that grows with the positions it attends. */
static double simulated_step_ms(int k, int P) {
    const double decode = 8.6;
    return k == 0 ? decode : decode + 1.3 + 0.0022 * P + k * (0.55 + 0.00084 * (P + 0.5 * k));
}

/* The budget keeps every step a long prompt shares with decoding rows within 1.75 decode steps
 * (1.6 plus the growth of a quarter), finishes the prompt in no more steps than the largest chunk
 * within 1.6 would, recovers from a stall of the host (a step at three times the usual every 33),
 * and does not grow while the prompt, not the budget, limits the rows. */
static void test_prefill_budget_steers_on_step_time(void **state) {
    (void)state;
    const double decode = simulated_step_ms(0, 0);
    enum { PROMPT = 1000 };
    int oracle_steps = 0;
    for (int P = 0; P < PROMPT; oracle_steps++) {
        int k = 1;
        while (simulated_step_ms(k + 1, P) <= (1 + PREFILL_SHARE) * decode) k++;
        P += k;
    }
    prefill_budget b;
    prefill_budget_init(&b, 260);
    int steps = 0, stalls = 0;
    double worst = 0;
    for (int P = 0; P < PROMPT; steps++) {
        int k = prefill_budget_rows(&b);
        assert_true(k >= 1 && k <= 260);
        if (k > PROMPT - P) k = PROMPT - P;
        double ms = simulated_step_ms(k, P);
        if (steps % 33 == 32) {
            ms += 2 * decode;
            stalls++;
        } else {
            worst = fmax(worst, ms / decode);
        }
        prefill_budget_observe(&b, k, decode * 1e-3, ms * 1e-3);
        P += k;
    }
    assert_true(stalls > 3);
    assert_true(worst >= 1.5 && worst <= 1.76); /* NaN fails both */
    assert_true(steps <= oracle_steps);
    /* a step that fitted with fewer rows than the budget allowed leaves it as it was */
    prefill_budget_init(&b, 260);
    for (int i = 0; i < 12; i++) prefill_budget_observe(&b, prefill_budget_rows(&b), 0.010, 0.011);
    const int grown = prefill_budget_rows(&b);
    assert_true(grown > 12);
    prefill_budget_observe(&b, 2, 0.010, 0.011);
    assert_int_equal(prefill_budget_rows(&b), grown);
    /* an overlong step cuts it in proportion, never below one row */
    prefill_budget_observe(&b, grown, 0.010, 0.022);
    assert_int_equal(prefill_budget_rows(&b), (int)(grown * 0.006 / 0.012));
    prefill_budget_observe(&b, 1, 0.010, 1.0);
    assert_int_equal(prefill_budget_rows(&b), 1);
    /* no reference (NaN or 0) and no prompt rows: nothing learned */
    prefill_budget_observe(&b, 1, NAN, 0.001);
    prefill_budget_observe(&b, 1, 0.0, 0.001);
    prefill_budget_observe(&b, 0, 0.010, 0.001);
    assert_int_equal(prefill_budget_rows(&b), 1);
    /* the ceiling */
    for (int i = 0; i < 60; i++) prefill_budget_observe(&b, prefill_budget_rows(&b), 0.010, 0.010);
    assert_int_equal(prefill_budget_rows(&b), 260);
}

/* The reference is the median of the latest five decode-only steps: one stall does not move it,
 * and it follows a lasting change once it is most of them. */
static void test_decode_reference_median(void **state) {
    (void)state;
    decode_reference r;
    memset(&r, 0, sizeof r);
    decode_reference_add(&r, 0.010, 1);
    assert_true(r.seconds == 0.010);
    decode_reference_add(&r, 0.012, 2);
    assert_true(fabs(r.seconds - 0.011) < 1e-12);
    decode_reference_add(&r, 0.030, 3); /* a stall */
    assert_true(r.seconds == 0.012);
    decode_reference_add(&r, 0.011, 4);
    decode_reference_add(&r, 0.010, 5);
    assert_true(r.seconds == 0.011);
    assert_int_equal((int)r.at_step, 5);
    for (int i = 0; i < 3; i++) decode_reference_add(&r, 0.020, 6 + (uint64_t)i); /* slower for good */
    assert_true(r.seconds == 0.020);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_greedy_and_truncation),
        cmocka_unit_test(test_sample_top_k_then_top_p),
        cmocka_unit_test(test_sample_min_p),
        cmocka_unit_test(test_batch_matches_decode_step),
        cmocka_unit_test(test_batch_chunking_same_bits),
        cmocka_unit_test(test_batch_refusals),
        cmocka_unit_test(test_engine_matches_generate),
        cmocka_unit_test(test_engine_prompt_logprobs),
        cmocka_unit_test(test_engine_token_logprobs_and_stop),
        cmocka_unit_test(test_engine_cancel_busy_stop),
        cmocka_unit_test(test_engine_busy_counts),
        cmocka_unit_test(test_engine_nonfinite_logits),
        cmocka_unit_test(test_engine_cancelled_leave_queue),
        cmocka_unit_test(test_engine_release_and_exclusive),
        cmocka_unit_test(test_prefill_budget_steers_on_step_time),
        cmocka_unit_test(test_decode_reference_median),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
