/* test_tasks.c — the synthetic tasks of difftrans_analysis.h: each generator's format (read back independently
 * from the tokens), determinism from the seed, refusals; the scorer on rigged logits (a model that
 * copies the right value scores 1, random digits near 0.1, random labels near 0.5), the batched
 * scorer against one forward per example on a real model, and the training mix (targets only at
 * answers, deterministic from the data stream). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <math.h>

#include "difftrans_analysis.h"
#include "difftrans.h"
#include "testutil.h"

static dt_task_example ex, ex2;

/* the value after key k in the context part of a recall example (before ';'), -1 if absent */
static int recall_value_of(const dt_task_example *e, int key) {
    for (int t = 0; t + 1 < e->length && e->tokens[t] != ';'; t++)
        if (e->tokens[t] == key && (t == 0 || e->tokens[t - 1] == ' ')) return e->tokens[t + 1];
    return -1;
}

static void test_recall_format(void **state) {
    (void)state;
    dt_error err;
    for (int seed = 1; seed <= 50; seed++) {
        int pairs = 1 + seed % 8, q = 1 + seed % pairs, len = 64 + seed;
        assert_int_equal(dt_task_recall(NULL, (uint64_t)seed, len, pairs, q, -1, &ex, &err), 0);
        assert_int_equal(ex.length, len);
        assert_int_equal(ex.kind, DT_TASK_RECALL);
        assert_int_equal(ex.n_queries, q);
        int semis = 0, keys = 0;
        for (int t = 0; t < len; t++) {
            int c = ex.tokens[t];
            assert_false(c >= 'a' && c <= 'z'); /* keys are symbols, distractors uppercase */
            semis += c == ';';
            if (c && strchr(DT_TASK_KEY_SYMBOLS, c) && semis == 0) keys++;
        }
        assert_int_equal(semis, 1);
        assert_int_equal(keys, pairs); /* every key once in the context */
        for (int j = 0; j < q; j++) {
            const dt_task_query *qq = &ex.q[j];
            assert_true(qq->pos + 1 < len);
            assert_int_equal(ex.tokens[qq->pos + 1], qq->answer);
            assert_true(qq->answer >= '0' && qq->answer <= '9');
            assert_int_equal(qq->n_candidates, 0);
            assert_int_equal(recall_value_of(&ex, ex.tokens[qq->pos]), qq->answer);
            for (int k = 0; k < j; k++) assert_int_not_equal(ex.tokens[ex.q[k].pos], ex.tokens[qq->pos]);
        }
    }
    /* more queries than pairs: every pair once first, then repeats, each answered by its pair */
    for (int seed = 1; seed <= 20; seed++) {
        int pairs = 1 + seed % 5, q = pairs + 3 + seed % 7;
        assert_int_equal(dt_task_recall(NULL, (uint64_t)seed, 200, pairs, q, -1, &ex, &err), 0);
        assert_int_equal(ex.n_queries, q);
        int asked[256] = {0};
        for (int j = 0; j < q; j++) {
            int key = ex.tokens[ex.q[j].pos];
            if (j < pairs) assert_int_equal(asked[key], 0);
            asked[key]++;
            assert_int_equal(recall_value_of(&ex, key), ex.q[j].answer);
            assert_int_equal(ex.tokens[ex.q[j].pos + 1], ex.q[j].answer);
        }
    }
    /* exact distractor count: the length follows */
    assert_int_equal(dt_task_recall(NULL, 3, 0, 4, 4, 5, &ex, &err), 0);
    assert_int_equal(ex.length, 3 * (4 + 5 + 4) + 1);
    /* refusals */
    assert_int_equal(dt_task_recall(NULL, 1, 20, 4, 4, -1, &ex, &err), -1);
    assert_non_null(strstr(err.msg, "recall"));
    assert_int_equal(dt_task_recall(NULL, 1, 4000, 4, DT_TASK_MAX_QUERIES + 1, -1, &ex, &err), -1);
    assert_int_equal(dt_task_recall(NULL, 1, 100, DT_TASK_MAX_PAIRS + 1, 1, -1, &ex, &err), -1);
}

static void test_depth_format(void **state) {
    (void)state;
    dt_error err;
    const char *text = "A filler sentence with an @ sign in it, and more words to read. ";
    static int filler[4000];
    const size_t filler_n = sizeof filler / sizeof *filler;
    for (size_t i = 0; i < filler_n; i++) filler[i] = (unsigned char)text[i % strlen(text)];
    for (int seed = 1; seed <= 40; seed++) {
        double depth = (seed % 5) / 4.0;
        int len = 64 + 8 * seed, needles = 2 + seed % 3, q = 1 + seed % needles;
        assert_int_equal(dt_task_depth(NULL, (uint64_t)seed, len, depth, needles, q, seed % 2 ? filler : NULL, filler_n, &ex, &err), 0);
        assert_int_equal(ex.length, len);
        assert_int_equal(ex.n_queries, q);
        const int context = len - 4 * q;
        int ats = 0, first_at = -1;
        for (int t = 0; t < context; t++)
            if (ex.tokens[t] == '@') {
                ats++;
                if (first_at < 0) first_at = t;
            }
        assert_int_equal(ats, needles); /* the filler's own '@' was replaced */
        /* query 0 asks the needle placed at `depth` of the room */
        int at = (int)(depth * (context - 3) + 0.5);
        assert_int_equal(ex.tokens[at], '@');
        assert_int_equal(ex.tokens[ex.q[0].pos], ex.tokens[at + 1]);
        assert_int_equal(ex.q[0].answer, ex.tokens[at + 2]);
        for (int j = 0; j < q; j++) {
            const dt_task_query *qq = &ex.q[j];
            assert_int_equal(ex.tokens[qq->pos - 2], '\n');
            assert_int_equal(ex.tokens[qq->pos - 1], '@');
            assert_int_equal(ex.tokens[qq->pos + 1], qq->answer);
            /* the answer is the value of the needle with that key */
            int found = 0;
            for (int t = 0; t + 2 < context; t++)
                if (ex.tokens[t] == '@' && ex.tokens[t + 1] == ex.tokens[qq->pos]) found = ex.tokens[t + 2];
            assert_int_equal(found, qq->answer);
        }
    }
    assert_int_equal(dt_task_depth(NULL, 1, 30, 0.5, 4, 1, NULL, 0, &ex, &err), -1);
    assert_int_equal(dt_task_depth(NULL, 1, 100, 1.5, 4, 1, NULL, 0, &ex, &err), -1);
    assert_int_equal(dt_task_depth(NULL, 1, 1000, 0.5, 4, DT_TASK_MAX_QUERIES + 1, NULL, 0, &ex, &err), -1);
    /* more queries than needles: needle 0, the others once, then repeats */
    assert_int_equal(dt_task_depth(NULL, 9, 200, 0.5, 4, 12, NULL, 0, &ex, &err), 0);
    assert_int_equal(ex.n_queries, 12);
    int once[256] = {0};
    for (int j = 1; j < 4; j++) assert_int_equal(once[ex.tokens[ex.q[j].pos]]++, 0);
    assert_int_equal(once[ex.tokens[ex.q[0].pos]], 0);
}

static void test_icl_format(void **state) {
    (void)state;
    dt_error err;
    for (int seed = 1; seed <= 40; seed++) {
        int shots = 2 + 2 * (seed % 6), q = 1 + seed % 6;
        assert_int_equal(dt_task_icl(NULL, (uint64_t)seed, shots, q, 0, &ex, &err), 0);
        assert_int_equal(ex.length, 4 * (shots + q));
        /* each class's label from the demonstrations; both classes appear, with different labels */
        int label[2] = {0, 0}, count[2] = {0, 0}, seen[26] = {0};
        for (int i = 0; i < shots; i++) {
            int x = ex.tokens[4 * i], c = x <= 'm' ? 0 : 1, l = ex.tokens[4 * i + 2];
            assert_int_equal(ex.tokens[4 * i + 1], ':');
            assert_true(l >= 'A' && l <= 'Z');
            if (label[c]) assert_int_equal(label[c], l);
            label[c] = l;
            count[c]++;
            seen[x - 'a'] = 1;
        }
        assert_int_equal(count[0], shots / 2);
        assert_int_equal(count[1], shots / 2);
        assert_int_not_equal(label[0], label[1]);
        for (int j = 0; j < q; j++) {
            const dt_task_query *qq = &ex.q[j];
            int y = ex.tokens[qq->pos - 1];
            assert_int_equal(ex.tokens[qq->pos], ':');
            assert_false(seen[y - 'a']); /* never one of the demonstrations */
            assert_int_equal(qq->answer, label[y <= 'm' ? 0 : 1]);
            assert_int_equal(qq->n_candidates, 2);
            assert_true((qq->candidates[0] == label[0] && qq->candidates[1] == label[1]));
        }
        /* another order: the same demonstrations (as a multiset) and the same queries */
        assert_int_equal(dt_task_icl(NULL, (uint64_t)seed, shots, q, 3, &ex2, &err), 0);
        int a[256] = {0}, b[256] = {0}, moved = 0;
        for (int i = 0; i < shots; i++) {
            a[ex.tokens[4 * i]]++;
            b[ex2.tokens[4 * i]]++;
            moved += ex.tokens[4 * i] != ex2.tokens[4 * i];
        }
        assert_memory_equal(a, b, sizeof a);
        assert_memory_equal(ex.tokens + 4 * shots, ex2.tokens + 4 * shots, (size_t)4 * q * sizeof(int));
        if (shots >= 6) assert_true(moved > 0);
    }
    /* labels are drawn per prompt: many different label pairs over seeds */
    int pairs_seen[26][26] = {{0}}, distinct = 0;
    for (int seed = 1; seed <= 60; seed++) {
        assert_int_equal(dt_task_icl(NULL, (uint64_t)seed, 4, 2, 0, &ex, &err), 0);
        int l0 = ex.q[0].candidates[0] - 'A', l1 = ex.q[0].candidates[1] - 'A';
        if (!pairs_seen[l0][l1]++) distinct++;
    }
    assert_true(distinct > 30);
    assert_int_equal(dt_task_icl(NULL, 1, 3, 2, 0, &ex, &err), -1);
    assert_int_equal(dt_task_icl(NULL, 1, 8, 19, 0, &ex, &err), -1);
}

static void test_determinism(void **state) {
    (void)state;
    dt_error err;
    for (int k = 0; k < 3; k++) {
        for (int same = 0; same < 2; same++) {
            uint64_t s1 = 77, s2 = same ? 77 : 78;
            if (k == 0) dt_task_recall(NULL, s1, 100, 6, 4, -1, &ex, &err), dt_task_recall(NULL, s2, 100, 6, 4, -1, &ex2, &err);
            if (k == 1) dt_task_depth(NULL, s1, 100, 0.5, 4, 2, NULL, 0, &ex, &err), dt_task_depth(NULL, s2, 100, 0.5, 4, 2, NULL, 0, &ex2, &err);
            if (k == 2) dt_task_icl(NULL, s1, 8, 4, 0, &ex, &err), dt_task_icl(NULL, s2, 8, 4, 0, &ex2, &err);
            int equal = memcmp(ex.tokens, ex2.tokens, (size_t)ex.length * sizeof(int)) == 0;
            assert_int_equal(equal, same);
        }
    }
}

/* ---------------------------------------------------------------- scoring */

enum { V = 256 };
static float logits[DT_TASK_MAX_LEN * 8][V];

/* A rigged "model": at every query position the right answer (copy = 1), a uniformly random digit
 * (mode 1) or a random candidate (mode 2) gets the largest logit. */
static void rig(const dt_task_example *e, int mode, uint64_t *rng) {
    for (int t = 0; t < e->length; t++)
        for (int v = 0; v < V; v++) logits[t][v] = 0.01f * (float)((t * 31 + v * 17) % 7);
    for (int j = 0; j < e->n_queries; j++) {
        const dt_task_query *q = &e->q[j];
        int pick = mode == 0   ? q->answer
                   : mode == 1 ? '0' + (int)(dt_rng_next(rng) % 10)
                               : q->candidates[dt_rng_next(rng) % 2];
        logits[q->pos][pick] = 5;
    }
}

static void test_score_rigged(void **state) {
    (void)state;
    dt_error err;
    uint64_t rng = 5;
    for (int k = 0; k < 3; k++) {
        int correct[3] = {0, 0, 0}, total = 0;
        for (int i = 0; i < 400; i++) {
            if (k == 0) assert_int_equal(dt_task_recall(NULL, (uint64_t)i, 128, 8, 4, -1, &ex, &err), 0);
            if (k == 1) assert_int_equal(dt_task_depth(NULL, (uint64_t)i, 128, (i % 5) / 4.0, 4, 1, NULL, 0, &ex, &err), 0);
            if (k == 2) assert_int_equal(dt_task_icl(NULL, (uint64_t)i, 8, 4, 0, &ex, &err), 0);
            for (int mode = 0; mode < 3; mode++) {
                if (mode == 2 && k != 2) continue;
                if (mode == 1 && k == 2) continue;
                rig(&ex, mode, &rng);
                dt_task_score s = dt_task_score_logits(&ex, &logits[0][0], V);
                assert_int_equal(s.total, ex.n_queries);
                correct[mode] += s.correct;
            }
            total += ex.n_queries;
        }
        double copy = (double)correct[0] / total, rnd = (double)correct[k == 2 ? 2 : 1] / total;
        print_message("%s: copying model %.3f, random model %.3f over %d queries\n", dt_task_name((dt_task_kind)k), copy, rnd, total);
        assert_true(copy == 1.0);
        double chance = k == 2 ? 0.5 : 0.1, sd = sqrt(chance * (1 - chance) / total);
        assert_true(fabs(rnd - chance) < 4 * sd);
    }
}

/* The batched scorer equals scoring each example alone through its own forward. */
static void test_score_batched(void **state) {
    (void)state;
    dt_config cfg;
    dt_error err;
    dt_model m;
    assert_int_equal(dt_config_preset(&cfg, "tiny", DT_ARCH_DIFF, &err), 0);
    assert_int_equal(dt_model_create(&m, &cfg, &err), 0);
    dt_model_init_random(&m, 3);
    /* scale the head so that the argmax varies from position to position */
    for (size_t i = 0; i < (size_t)cfg.vocab_size * cfg.hidden_size; i++) m.w.lm_head[i] *= 20;
    enum { N = 11 };
    static dt_task_example set[N];
    for (int i = 0; i < N; i++) {
        int rc = i < 5 ? dt_task_recall(NULL, (uint64_t)i, 64, 3, 3, -1, &set[i], &err)
                 : i < 9 ? dt_task_depth(NULL, (uint64_t)i, 96, 0.25 * (i - 5), 4, 2, NULL, 0, &set[i], &err)
                         : dt_task_icl(NULL, (uint64_t)i, 8, 4, i, &set[i], &err);
        assert_int_equal(rc, 0);
    }
    dt_task_score batched[N];
    assert_int_equal(dt_task_score_examples(&m, set, N, batched, &err), 0);
    int any_right = 0, any_wrong = 0;
    for (int i = 0; i < N; i++) {
        dt_runstate *rs = dt_runstate_create(&m, 1, set[i].length, &err);
        assert_non_null(rs);
        assert_int_equal(dt_forward(&m, rs, set[i].tokens, NULL, 1, set[i].length, NULL, &err), 0);
        dt_task_score alone = dt_task_score_logits(&set[i], dt_runstate_logits(rs), cfg.vocab_size);
        dt_runstate_free(rs);
        assert_int_equal(alone.correct, batched[i].correct);
        assert_int_equal(alone.total, batched[i].total);
        any_right |= alone.correct > 0;
        any_wrong |= alone.correct < alone.total;
    }
    assert_true(any_wrong);
    (void)any_right;
    /* an example longer than the model's context is refused by name */
    assert_int_equal(dt_task_recall(NULL, 1, cfg.max_position_embeddings + 1, 3, 3, -1, &set[0], &err), 0);
    assert_int_equal(dt_task_score_examples(&m, set, 1, batched, &err), -1);
    assert_non_null(strstr(err.msg, "recall"));
    dt_model_free(&m);
}

/* The paired interval over examples is that of the pooled accuracies' difference. Examples of 2, 2 and 8
 * queries; A gets 2/2, 0/2, 4/8 = 6/12 = 0.5, B 0/2, 2/2, 2/8 = 4/12 = 1/3. Terms (cA − cB)·3/12: 0.5,
 * −0.5, 0.5; mean 1/6 = 0.5 − 1/3 (the mean of the per-example differences, 1/3, is not), sd √(1/3),
 * half = 4.303·√(1/3)/√3 = 4.303/3. */
static void test_paired_examples(void **state) {
    (void)state;
    double acc_a[3] = {1, 0, 0.5}, acc_b[3] = {0, 1, 0.25};
    int tot[3] = {2, 2, 8}, other[3] = {2, 2, 4};
    dt_task_result a = {.correct = 6, .total = 12, .accuracy = 0.5, .example_accuracy = acc_a, .example_total = tot,
                        .n_examples = 3};
    dt_task_result b = a;
    b.correct = 4, b.accuracy = 4.0 / 12, b.example_accuracy = acc_b;
    dt_stats_interval d = dt_task_paired_diff_ci(&a, &b);
    assert_int_equal(d.n, 3);
    assert_true(fabs(d.mean - (a.accuracy - b.accuracy)) < 1e-12);
    assert_true(fabs(d.half - 4.303 / 3) < 1e-9);
    assert_true(fabs(d.lo - (1.0 / 6 - 4.303 / 3)) < 1e-9);
    /* the other way round: the same interval, mirrored */
    dt_stats_interval e = dt_task_paired_diff_ci(&b, &a);
    assert_true(fabs(e.mean + d.mean) < 1e-12 && fabs(e.half - d.half) < 1e-12);
    /* examples that differ, or another count of them, are not paired */
    b.example_total = other;
    assert_int_equal(dt_task_paired_diff_ci(&a, &b).n, 0);
    b.example_total = tot;
    b.n_examples = 2;
    dt_stats_interval none = dt_task_paired_diff_ci(&a, &b);
    assert_int_equal(none.n, 0);
    assert_true(isnan(none.mean) && isnan(none.half));
}

/* dt_task_evaluate: cells as documented, counts add up, the same answer twice. */
static void test_evaluate(void **state) {
    (void)state;
    dt_config cfg;
    dt_error err;
    dt_model m;
    assert_int_equal(dt_config_preset(&cfg, "tiny", DT_ARCH_LLAMA, &err), 0);
    assert_int_equal(dt_model_create(&m, &cfg, &err), 0);
    dt_model_init_random(&m, 9);
    dt_task_eval_options o = {.train_len = 64, .max_len = cfg.max_position_embeddings, .per_cell = 3, .seed = 4};
    for (int k = 0; k < DT_N_TASKS; k++) {
        dt_task_result a, b;
        assert_int_equal(dt_task_evaluate(&m, (dt_task_kind)k, &o, &a, &err), 0);
        assert_int_equal(dt_task_evaluate(&m, (dt_task_kind)k, &o, &b, &err), 0);
        assert_int_equal(a.correct, b.correct);
        int total = 0;
        for (int c = 0; c < a.n_cells; c++) {
            total += a.cells[c].total;
            assert_int_equal(a.cells[c].examples, 3);
            assert_true(a.cells[c].length <= cfg.max_position_embeddings);
        }
        assert_int_equal(total, a.total);
        assert_int_equal(a.n_examples, 3 * a.n_cells);
        int want = k == DT_TASK_RECALL ? 8 /* K=8 does not fit 32 tokens */ : k == DT_TASK_DEPTH ? 10 : 6;
        assert_int_equal(a.n_cells, want);
        if (k == DT_TASK_ICL) assert_false(isnan(a.order_std));
        dt_task_result_free(&a);
        dt_task_result_free(&b);
    }
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- the training mix */

static void test_mix(void **state) {
    (void)state;
    enum { B = 6, T = 128 };
    static int tok[B * T], tg[B * T], tok2[B * T], tg2[B * T];
    static int filler[2000];
    const size_t filler_n = sizeof filler / sizeof *filler;
    for (size_t i = 0; i < filler_n; i++) filler[i] = (unsigned char)("some text. "[i % 11]);
    dt_task_mix mix = {.ratio = 1.0, .tasks = 7, .max_pairs = 16, .filler = filler, .filler_n = filler_n};
    for (int step = 0; step < 20; step++) {
        uint64_t r1 = 100 + (uint64_t)step, r2 = r1;
        for (int i = 0; i < B * T; i++) tok[i] = tok2[i] = 'x', tg[i] = tg2[i] = 'y';
        dt_task_mix_batch(&mix, step, 20, tok, tg, 0, B, B, T, &r1);
        dt_task_mix_batch(&mix, step, 20, tok2, tg2, 0, B, B, T, &r2);
        assert_memory_equal(tok, tok2, sizeof tok);
        assert_memory_equal(tg, tg2, sizeof tg);
        assert_true(r1 == r2);
        for (int b = 0; b < B; b++) {
            int answers = 0;
            for (int t = 0; t < T; t++) {
                int target = tg[b * T + t];
                if (target < 0) continue;
                answers++;
                if (t + 1 < T) assert_int_equal(tok[b * T + t + 1], target); /* a target is the next token */
                assert_true((target >= '0' && target <= '9') || (target >= 'A' && target <= 'Z'));
            }
            assert_true(answers >= 1);
        }
    }
    /* a rank's rows: the same rows as in the whole batch, and the same stream afterwards */
    for (int step = 0; step < 5; step++) {
        uint64_t r1 = 7 + (uint64_t)step, r2 = r1;
        dt_task_mix_batch(&mix, step, 20, tok, tg, 0, B, B, T, &r1);
        dt_task_mix_batch(&mix, step, 20, tok2, tg2, 2, 3, B, T, &r2);
        assert_memory_equal(tok + 2 * T, tok2, (size_t)3 * T * sizeof(int));
        assert_memory_equal(tg + 2 * T, tg2, (size_t)3 * T * sizeof(int));
        assert_true(r1 == r2);
    }
    /* the curriculum: recall without distractors and depth with the least text at first, a full
     * row of distractors / text at the end; recall's queries run to the end of the row */
    mix.tasks = 1 << DT_TASK_RECALL | 1 << DT_TASK_DEPTH;
    for (int phase = 0; phase < 2; phase++) {
        int step = phase ? 99 : 0, uppercase = 0, text = 0;
        uint64_t r3 = 11;
        dt_task_mix_batch(&mix, step, 100, tok, tg, 0, B, B, T, &r3);
        for (int b = 0; b < B; b++) {
            const int *row = tok + b * T;
            int answers = 0, semi = -1;
            for (int t = 0; t < T; t++) {
                answers += tg[b * T + t] >= 0;
                if (row[t] == ';' && semi < 0) semi = t;
            }
            if (semi >= 0) { /* recall */
                for (int t = 0; t < semi; t++) uppercase += row[t] >= 'A' && row[t] <= 'Z';
                assert_true(answers >= (T - semi) / 3 - 1);
            } else
                for (int t = 0; t < T; t++) text += row[t] >= 'a' && row[t] <= 'z';
        }
        if (phase == 0) assert_int_equal(uppercase, 0);
        else assert_true(uppercase > 0);
        if (phase == 0) assert_true(text < B / 2 * 4 * 3 * 4);
        else assert_true(text > B / 2 * 40);
    }
    mix.tasks = 7;
    /* ratio 0: the text batch stays */
    mix.ratio = 0;
    uint64_t r = 1;
    for (int i = 0; i < B * T; i++) tok[i] = 'x', tg[i] = 'y';
    dt_task_mix_batch(&mix, 0, 20, tok, tg, 0, B, B, T, &r);
    for (int i = 0; i < B * T; i++) assert_true(tok[i] == 'x' && tg[i] == 'y');
}

/* ---------------------------------------------------------------- real vocabularies */

/* A hand-made tokenizer.json (model BPE) in the test's scratch directory, loaded. vocab: token →
 * id (taken); merges "a b"; normalizer / pre_tokenizer / decoder: JSON or NULL. */
static dt_tok *tokenizer(const char *name, cJSON *vocab, const char *const *merges, int n_merges,
                         const char *normalizer, const char *pre, const char *decoder, int byte_fallback,
                         char *path_out) {
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddArrayToObject(root, "added_tokens");
    const char *parts[3][2] = {{"normalizer", normalizer}, {"pre_tokenizer", pre}, {"decoder", decoder}};
    for (int i = 0; i < 3; i++)
        if (parts[i][1]) cJSON_AddItemToObject(root, parts[i][0], cJSON_Parse(parts[i][1]));
        else cJSON_AddNullToObject(root, parts[i][0]);
    cJSON_AddNullToObject(root, "post_processor");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON *ml = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < n_merges; i++) cJSON_AddItemToArray(ml, cJSON_CreateString(merges[i]));
    cJSON_AddBoolToObject(model, "byte_fallback", byte_fallback);
    if (cJSON_GetObjectItem(vocab, "<unk>")) cJSON_AddStringToObject(model, "unk_token", "<unk>");
    char *text = cJSON_PrintUnformatted(root);
    assert_non_null(text);
    tu_path(path_out, 4096, name);
    tu_write_file(path_out, text, strlen(text));
    free(text);
    cJSON_Delete(root);
    dt_tok *tok = NULL;
    dt_error err;
    if (dt_tok_load(&tok, path_out, &err) != 0) fail_msg("%s", err.msg);
    return tok;
}

/* Byte-level BPE whose ids are not the bytes: byte b is token PERM(b) (no symbol's token is its
 * byte value), with a prefix space added before the text (so "\n" alone encodes to "Ġ\n", merged
 * into one token that is not the newline's) and merges that make "the", " @" and " #" one token. */
#define PERM(b) (((b) * 37 + 11) % 256)
static dt_tok *bytelevel_permuted(char *path) {
    static const char *const merges[] = {"Ġ Ċ", "t h", "th e", "Ġ @", "Ġ #"};
    static const char *const joined[] = {"ĠĊ", "th", "the", "Ġ@", "Ġ#"};
    cJSON *vocab = cJSON_CreateObject();
    for (int b = 0; b < 256; b++) {
        char c[4];
        tu_bytelevel_char(b, c);
        cJSON_AddNumberToObject(vocab, c, PERM(b));
    }
    for (int i = 0; i < 5; i++) cJSON_AddNumberToObject(vocab, joined[i], 256 + i);
    const char *bl = "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true}";
    return tokenizer("bytelevel_permuted.json", vocab, merges, 5, NULL, bl, bl, 0, path);
}

/* That tokenizer and its symbols (asserted to load). */
static dt_tok *permuted_symbols(dt_task_symbols *s, char *path) {
    dt_error err;
    dt_tok *tok = bytelevel_permuted(path);
    if (dt_task_symbols_from_tokenizer(s, tok, &err) != 0) fail_msg("%s", err.msg);
    return tok;
}

/* Each symbol's token: on the permuted byte-level BPE the token of its byte ('\n' too, although
 * its encoding alone merges with the prefix space into one token that is not it); on a
 * Llama-2-style BPE with byte fallback the letter's own token, else <0xNN> ('A' is not in its
 * vocabulary), and ▁ for the space; a vocabulary without '@' is refused naming it and the file. */
static void test_symbols(void **state) {
    (void)state;
    dt_error err;
    dt_task_symbols s;
    char path[4096];
    dt_tok *tok = permuted_symbols(&s, path);
    for (const char *p = DT_TASK_SYMBOLS; *p; p++) assert_int_equal(s.id[(int)*p], PERM((unsigned char)*p));
    assert_int_equal(s.id[127], -1); /* DEL is no symbol */
    assert_int_equal(s.vocab, 261);
    /* the filler's excluded tokens: '@', the key symbols, NUL, and the merged " @" and " #" */
    for (int b = 0; b < 256; b++)
        assert_int_equal(s.no_filler[PERM(b)], b == 0 || b == '@' || strchr(DT_TASK_KEY_SYMBOLS, b) != NULL);
    for (int i = 0; i < 5; i++) assert_int_equal(s.no_filler[256 + i], i >= 3);
    dt_task_symbols_free(&s);
    dt_tok_free(tok);

    /* Llama-2 style: <unk>, the 256 <0xNN>, ▁, the lowercase letters and the digits */
    cJSON *vocab = cJSON_CreateObject();
    cJSON_AddNumberToObject(vocab, "<unk>", 0);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        cJSON_AddNumberToObject(vocab, name, 1 + b);
    }
    cJSON_AddNumberToObject(vocab, "\xE2\x96\x81", 257);
    for (int c = 0; c < 26; c++) cJSON_AddNumberToObject(vocab, (char[]){(char)('a' + c), 0}, 258 + c);
    for (int c = 0; c < 10; c++) cJSON_AddNumberToObject(vocab, (char[]){(char)('0' + c), 0}, 284 + c);
    tok = tokenizer("llama2_style.json", vocab, NULL, 0,
                    "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xE2\x96\x81\"},"
                    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xE2\x96\x81\"}]}",
                    NULL,
                    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xE2\x96\x81\"},"
                    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\","
                    "\"content\":\" \",\"start\":1,\"stop\":0}]}",
                    1, path);
    assert_int_equal(dt_task_symbols_from_tokenizer(&s, tok, &err), 0);
    for (const char *p = DT_TASK_SYMBOLS; *p; p++) {
        const int c = (unsigned char)*p;
        const int want = c == ' ' ? 257 : c >= 'a' && c <= 'z' ? 258 + c - 'a' : c >= '0' && c <= '9' ? 284 + c - '0' : 1 + c;
        assert_int_equal(s.id[c], want);
    }
    dt_task_symbols_free(&s);
    dt_tok_free(tok);

    /* no '@' in the vocabulary, no byte fallback: refused, naming the symbol and the file */
    vocab = cJSON_CreateObject();
    cJSON_AddNumberToObject(vocab, "<unk>", 0);
    int id = 1;
    for (const char *p = DT_TASK_SYMBOLS; *p; p++)
        if (*p != '@') cJSON_AddNumberToObject(vocab, (char[]){*p, 0}, id++);
    tok = tokenizer("no_at.json", vocab, NULL, 0, NULL, NULL, "{\"type\":\"Fuse\"}", 0, path);
    assert_int_equal(dt_task_symbols_from_tokenizer(&s, tok, &err), -1);
    print_message("refused: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "'@'"));
    assert_non_null(strstr(err.msg, path));
    assert_null(s.no_filler);
    dt_tok_free(tok);
}

/* The token ids of a text (no special tokens). */
static size_t encode(const dt_tok *tok, const char *text, int *out, size_t cap) {
    int32_t *ids = NULL;
    size_t n = 0;
    dt_error err;
    if (dt_tok_encode(tok, text, strlen(text), 0, &ids, &n, &err) != 0) fail_msg("%s", err.msg);
    assert_true(n <= cap);
    for (size_t i = 0; i < n; i++) out[i] = ids[i];
    free(ids);
    return n;
}

/* The text a row of tokens decodes to (NUL-terminated; free it). */
static char *decode(const dt_tok *tok, const int *t, int n) {
    int32_t ids[DT_TASK_MAX_LEN];
    for (int i = 0; i < n; i++) ids[i] = t[i];
    char *text = NULL;
    size_t len = 0;
    dt_error err;
    if (dt_tok_decode(tok, ids, (size_t)n, 0, &text, &len, &err) != 0) fail_msg("%s", err.msg);
    return text;
}

/* On a BPE vocabulary a task example is the byte example spelled in tokens: the same seed gives a
 * row of ids below the vocabulary that decodes to the byte row's text, the queries at the same
 * positions, answers and candidates the tokens of the byte answers. Depth's filler is the text's
 * own tokens (merged "the" kept), without a token holding '@' or a key (" @", " #" merged). */
static void test_symbols_rows(void **state) {
    (void)state;
    dt_error err;
    dt_task_symbols s;
    char path[4096];
    dt_tok *tok = permuted_symbols(&s, path);
    for (int seed = 1; seed <= 30; seed++)
        for (int k = 0; k < 3; k++) {
            int rc1 = k == 0 ? dt_task_recall(NULL, (uint64_t)seed, 60 + seed, 1 + seed % 8, 1 + seed % 5, -1, &ex, &err)
                      : k == 1 ? dt_task_depth(NULL, (uint64_t)seed, 80 + seed, (seed % 5) / 4.0, 2 + seed % 3, 1 + seed % 2,
                                          NULL, 0, &ex, &err)
                               : dt_task_icl(NULL, (uint64_t)seed, 2 + 2 * (seed % 6), 1 + seed % 4, seed % 3, &ex, &err);
            int rc2 = k == 0 ? dt_task_recall(&s, (uint64_t)seed, 60 + seed, 1 + seed % 8, 1 + seed % 5, -1, &ex2, &err)
                      : k == 1 ? dt_task_depth(&s, (uint64_t)seed, 80 + seed, (seed % 5) / 4.0, 2 + seed % 3, 1 + seed % 2,
                                          NULL, 0, &ex2, &err)
                               : dt_task_icl(&s, (uint64_t)seed, 2 + 2 * (seed % 6), 1 + seed % 4, seed % 3, &ex2, &err);
            assert_int_equal(rc1, 0);
            assert_int_equal(rc2, 0);
            assert_int_equal(ex2.length, ex.length);
            char bytes[DT_TASK_MAX_LEN + 1];
            for (int t = 0; t < ex.length; t++) {
                bytes[t] = (char)ex.tokens[t];
                assert_true(ex2.tokens[t] >= 0 && ex2.tokens[t] < s.vocab);
                assert_int_equal(ex2.tokens[t], PERM(ex.tokens[t]));
            }
            bytes[ex.length] = '\0';
            char *text = decode(tok, ex2.tokens, ex2.length);
            assert_string_equal(text, bytes);
            free(text);
            assert_int_equal(ex2.n_queries, ex.n_queries);
            for (int j = 0; j < ex.n_queries; j++) {
                const dt_task_query *a = &ex.q[j], *b = &ex2.q[j];
                assert_int_equal(b->pos, a->pos);
                assert_int_equal(b->answer, PERM(a->answer));
                assert_int_equal(ex2.tokens[b->pos + 1], b->answer);
                assert_int_equal(b->n_candidates, a->n_candidates);
                for (int c = 0; c < b->n_candidates; c++) assert_int_equal(b->candidates[c], PERM(a->candidates[c]));
            }
        }
    /* depth in the training text's tokens */
    static int filler[4096];
    const size_t n = encode(tok, "the cat sat on the mat, mail @home #tags; the end.\nthe dog ran off. ", filler, 4096);
    size_t reps = n;
    while (reps + n <= 4096 && reps < 1200) memcpy(filler + reps, filler, n * sizeof *filler), reps += n;
    int merged_the = 0;
    for (int seed = 1; seed <= 20; seed++) {
        assert_int_equal(dt_task_depth(&s, (uint64_t)seed, 200, 0.5, 4, 2, filler, reps, &ex2, &err), 0);
        const int context = 200 - 4 * 2;
        int ats = 0;
        for (int t = 0; t < context; t++) {
            const int id = ex2.tokens[t];
            assert_true(id >= 0 && id < s.vocab);
            ats += id == s.id['@'];
            merged_the += id == 258;
            if (!s.no_filler[id]) continue;
            /* an excluded token only as a needle's '@' or key */
            assert_true(id == s.id['@'] || (t > 0 && ex2.tokens[t - 1] == s.id['@']));
        }
        assert_int_equal(ats, 4);
        for (int j = 0; j < 2; j++) assert_int_equal(ex2.tokens[ex2.q[j].pos + 1], ex2.q[j].answer);
    }
    assert_true(merged_the > 20);
    dt_task_symbols_free(&s);
    dt_tok_free(tok);
}

/* Answers are scored as token ids: a model that puts the most weight on the answer's token scores
 * 1, one that puts it on the answer's byte value (another token in this vocabulary) scores 0. The
 * training mix on the vocabulary: recall and icl rows are the byte rows spelled in tokens (the
 * pads before the example too, the targets at the same places); with depth's filler in tokens,
 * ids below the vocabulary, targets the next token and always a digit's or an uppercase letter's. */
static void test_symbols_scoring(void **state) {
    (void)state;
    dt_error err;
    dt_task_symbols s;
    char path[4096];
    dt_tok *tok = permuted_symbols(&s, path);
    const int Vt = s.vocab;
    float *lg = fnew((size_t)DT_TASK_MAX_LEN * Vt);
    for (int k = 0; k < 3; k++) {
        int right = 0, bytewise = 0, total = 0;
        for (int i = 0; i < 40; i++) {
            int rc = k == 0 ? dt_task_recall(&s, (uint64_t)i, 128, 4, 4, -1, &ex, &err)
                     : k == 1 ? dt_task_depth(&s, (uint64_t)i, 128, (i % 5) / 4.0, 4, 2, NULL, 0, &ex, &err)
                              : dt_task_icl(&s, (uint64_t)i, 8, 4, 0, &ex, &err);
            assert_int_equal(rc, 0);
            for (int mode = 0; mode < 2; mode++) {
                for (size_t x = 0; x < (size_t)ex.length * Vt; x++) lg[x] = 0.01f * (float)(x % 7);
                for (int j = 0; j < ex.n_queries; j++) {
                    const dt_task_query *q = &ex.q[j];
                    int byte = -1; /* the answer's character */
                    for (int c = 0; c < 128; c++)
                        if (s.id[c] == q->answer) byte = c;
                    assert_true(byte >= 0);
                    lg[(size_t)q->pos * Vt + (mode == 0 ? q->answer : byte)] = 5;
                    if (mode == 1 && q->n_candidates) /* between the candidates: the other label */
                        lg[(size_t)q->pos * Vt + (q->candidates[0] == q->answer ? q->candidates[1] : q->candidates[0])] = 4;
                }
                dt_task_score sc = dt_task_score_logits(&ex, lg, Vt);
                *(mode == 0 ? &right : &bytewise) += sc.correct;
            }
            total += ex.n_queries;
        }
        assert_int_equal(right, total);
        assert_int_equal(bytewise, 0);
    }
    free(lg);

    enum { B = 6, T = 96 };
    static int tok_rows[B * T], tg[B * T], byte_rows[B * T], byte_tg[B * T], filler[2000];
    dt_task_mix bytes = {.ratio = 1.0, .tasks = 1 << DT_TASK_RECALL | 1 << DT_TASK_ICL}, spelled = bytes;
    spelled.symbols = &s;
    for (int step = 0; step < 12; step++) {
        uint64_t r1 = 3 + (uint64_t)step, r2 = r1;
        dt_task_mix_batch(&bytes, step, 12, byte_rows, byte_tg, 0, B, B, T, &r1);
        dt_task_mix_batch(&spelled, step, 12, tok_rows, tg, 0, B, B, T, &r2);
        assert_true(r1 == r2);
        for (int i = 0; i < B * T; i++) {
            assert_int_equal(tok_rows[i], PERM(byte_rows[i]));
            assert_int_equal(tg[i], byte_tg[i] < 0 ? -1 : PERM(byte_tg[i]));
        }
    }
    const size_t n = encode(tok, "the cat sat on the mat. ", filler, 2000);
    size_t reps = n;
    while (reps + n <= 2000) memcpy(filler + reps, filler, n * sizeof *filler), reps += n;
    dt_task_mix mix = {.ratio = 1.0, .tasks = 7, .filler = filler, .filler_n = reps, .symbols = &s};
    int answer_ok[512] = {0};
    for (int c = '0'; c <= '9'; c++) answer_ok[s.id[c]] = 1;
    for (int c = 'A'; c <= 'Z'; c++) answer_ok[s.id[c]] = 1;
    for (int step = 0; step < 12; step++) {
        uint64_t rng = 3 + (uint64_t)step;
        dt_task_mix_batch(&mix, step, 12, tok_rows, tg, 0, B, B, T, &rng);
        for (int b = 0; b < B; b++) {
            int answers = 0;
            for (int t = 0; t < T; t++) {
                assert_true(tok_rows[b * T + t] >= 0 && tok_rows[b * T + t] < Vt);
                const int target = tg[b * T + t];
                if (target < 0) continue;
                answers++;
                assert_true(target < Vt && answer_ok[target]);
                if (t + 1 < T) assert_int_equal(tok_rows[b * T + t + 1], target);
            }
            assert_true(answers >= 1);
        }
    }
    dt_task_symbols_free(&s);
    dt_tok_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recall_format), cmocka_unit_test(test_depth_format),
        cmocka_unit_test(test_icl_format),    cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_score_rigged),  cmocka_unit_test(test_score_batched),
        cmocka_unit_test(test_evaluate),      cmocka_unit_test(test_mix),
        cmocka_unit_test(test_symbols),       cmocka_unit_test(test_symbols_rows),
        cmocka_unit_test(test_symbols_scoring), cmocka_unit_test(test_paired_examples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
