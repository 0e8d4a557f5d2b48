/* test_tasks.c — the synthetic tasks of tasks.h: each generator's format (read back independently
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

#include <cmocka.h>
#include <math.h>

#include "analysis/tasks.h"
#include "difftrans.h"
#include "testutil.h"

static tk_example ex, ex2;

/* the value after key k in the context part of a recall example (before ';'), -1 if absent */
static int recall_value_of(const tk_example *e, int key) {
    for (int t = 0; t + 1 < e->length && e->tokens[t] != ';'; t++)
        if (e->tokens[t] == key && (t == 0 || e->tokens[t - 1] == ' ')) return e->tokens[t + 1];
    return -1;
}

static void test_recall_format(void **state) {
    (void)state;
    dt_error err;
    for (int seed = 1; seed <= 50; seed++) {
        int pairs = 1 + seed % 8, q = 1 + seed % pairs, len = 64 + seed;
        assert_int_equal(tk_recall((uint64_t)seed, len, pairs, q, -1, &ex, &err), 0);
        assert_int_equal(ex.length, len);
        assert_int_equal(ex.kind, TK_RECALL);
        assert_int_equal(ex.n_queries, q);
        int semis = 0, keys = 0;
        for (int t = 0; t < len; t++) {
            int c = ex.tokens[t];
            assert_false(c >= 'a' && c <= 'z'); /* keys are symbols, distractors uppercase */
            semis += c == ';';
            if (c && strchr(TK_KEY_SYMBOLS, c) && semis == 0) keys++;
        }
        assert_int_equal(semis, 1);
        assert_int_equal(keys, pairs); /* every key once in the context */
        for (int j = 0; j < q; j++) {
            const tk_query *qq = &ex.q[j];
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
        assert_int_equal(tk_recall((uint64_t)seed, 200, pairs, q, -1, &ex, &err), 0);
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
    assert_int_equal(tk_recall(3, 0, 4, 4, 5, &ex, &err), 0);
    assert_int_equal(ex.length, 3 * (4 + 5 + 4) + 1);
    /* refusals */
    assert_int_equal(tk_recall(1, 20, 4, 4, -1, &ex, &err), -1);
    assert_non_null(strstr(err.msg, "recall"));
    assert_int_equal(tk_recall(1, 4000, 4, TK_MAX_QUERIES + 1, -1, &ex, &err), -1);
    assert_int_equal(tk_recall(1, 100, TK_MAX_PAIRS + 1, 1, -1, &ex, &err), -1);
}

static void test_depth_format(void **state) {
    (void)state;
    dt_error err;
    const char *text = "A filler sentence with an @ sign in it, and more words to read. ";
    unsigned char filler[4000];
    for (size_t i = 0; i < sizeof filler; i++) filler[i] = (unsigned char)text[i % strlen(text)];
    for (int seed = 1; seed <= 40; seed++) {
        double depth = (seed % 5) / 4.0;
        int len = 64 + 8 * seed, needles = 2 + seed % 3, q = 1 + seed % needles;
        assert_int_equal(tk_depth((uint64_t)seed, len, depth, needles, q, seed % 2 ? filler : NULL, sizeof filler, &ex, &err), 0);
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
            const tk_query *qq = &ex.q[j];
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
    assert_int_equal(tk_depth(1, 30, 0.5, 4, 1, NULL, 0, &ex, &err), -1);
    assert_int_equal(tk_depth(1, 100, 1.5, 4, 1, NULL, 0, &ex, &err), -1);
    assert_int_equal(tk_depth(1, 1000, 0.5, 4, TK_MAX_QUERIES + 1, NULL, 0, &ex, &err), -1);
    /* more queries than needles: needle 0, the others once, then repeats */
    assert_int_equal(tk_depth(9, 200, 0.5, 4, 12, NULL, 0, &ex, &err), 0);
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
        assert_int_equal(tk_icl((uint64_t)seed, shots, q, 0, &ex, &err), 0);
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
            const tk_query *qq = &ex.q[j];
            int y = ex.tokens[qq->pos - 1];
            assert_int_equal(ex.tokens[qq->pos], ':');
            assert_false(seen[y - 'a']); /* never one of the demonstrations */
            assert_int_equal(qq->answer, label[y <= 'm' ? 0 : 1]);
            assert_int_equal(qq->n_candidates, 2);
            assert_true((qq->candidates[0] == label[0] && qq->candidates[1] == label[1]));
        }
        /* another order: the same demonstrations (as a multiset) and the same queries */
        assert_int_equal(tk_icl((uint64_t)seed, shots, q, 3, &ex2, &err), 0);
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
        assert_int_equal(tk_icl((uint64_t)seed, 4, 2, 0, &ex, &err), 0);
        int l0 = ex.q[0].candidates[0] - 'A', l1 = ex.q[0].candidates[1] - 'A';
        if (!pairs_seen[l0][l1]++) distinct++;
    }
    assert_true(distinct > 30);
    assert_int_equal(tk_icl(1, 3, 2, 0, &ex, &err), -1);
    assert_int_equal(tk_icl(1, 8, 19, 0, &ex, &err), -1);
}

static void test_determinism(void **state) {
    (void)state;
    dt_error err;
    for (int k = 0; k < 3; k++) {
        for (int same = 0; same < 2; same++) {
            uint64_t s1 = 77, s2 = same ? 77 : 78;
            if (k == 0) tk_recall(s1, 100, 6, 4, -1, &ex, &err), tk_recall(s2, 100, 6, 4, -1, &ex2, &err);
            if (k == 1) tk_depth(s1, 100, 0.5, 4, 2, NULL, 0, &ex, &err), tk_depth(s2, 100, 0.5, 4, 2, NULL, 0, &ex2, &err);
            if (k == 2) tk_icl(s1, 8, 4, 0, &ex, &err), tk_icl(s2, 8, 4, 0, &ex2, &err);
            int equal = memcmp(ex.tokens, ex2.tokens, (size_t)ex.length * sizeof(int)) == 0;
            assert_int_equal(equal, same);
        }
    }
}

/* ---------------------------------------------------------------- scoring */

enum { V = 256 };
static float logits[TK_MAX_LEN * 8][V];

/* A rigged "model": at every query position the right answer (copy = 1), a uniformly random digit
 * (mode 1) or a random candidate (mode 2) gets the largest logit. */
static void rig(const tk_example *e, int mode, uint64_t *rng) {
    for (int t = 0; t < e->length; t++)
        for (int v = 0; v < V; v++) logits[t][v] = 0.01f * (float)((t * 31 + v * 17) % 7);
    for (int j = 0; j < e->n_queries; j++) {
        const tk_query *q = &e->q[j];
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
            if (k == 0) assert_int_equal(tk_recall((uint64_t)i, 128, 8, 4, -1, &ex, &err), 0);
            if (k == 1) assert_int_equal(tk_depth((uint64_t)i, 128, (i % 5) / 4.0, 4, 1, NULL, 0, &ex, &err), 0);
            if (k == 2) assert_int_equal(tk_icl((uint64_t)i, 8, 4, 0, &ex, &err), 0);
            for (int mode = 0; mode < 3; mode++) {
                if (mode == 2 && k != 2) continue;
                if (mode == 1 && k == 2) continue;
                rig(&ex, mode, &rng);
                tk_score s = tk_score_logits(&ex, &logits[0][0], V);
                assert_int_equal(s.total, ex.n_queries);
                correct[mode] += s.correct;
            }
            total += ex.n_queries;
        }
        double copy = (double)correct[0] / total, rnd = (double)correct[k == 2 ? 2 : 1] / total;
        print_message("%s: copying model %.3f, random model %.3f over %d queries\n", tk_name((tk_kind)k), copy, rnd, total);
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
    static tk_example set[N];
    for (int i = 0; i < N; i++) {
        int rc = i < 5 ? tk_recall((uint64_t)i, 64, 3, 3, -1, &set[i], &err)
                 : i < 9 ? tk_depth((uint64_t)i, 96, 0.25 * (i - 5), 4, 2, NULL, 0, &set[i], &err)
                         : tk_icl((uint64_t)i, 8, 4, i, &set[i], &err);
        assert_int_equal(rc, 0);
    }
    tk_score batched[N];
    assert_int_equal(tk_score_examples(&m, set, N, batched, &err), 0);
    int any_right = 0, any_wrong = 0;
    for (int i = 0; i < N; i++) {
        dt_runstate *rs = dt_runstate_create(&m, 1, set[i].length, &err);
        assert_non_null(rs);
        assert_int_equal(dt_forward(&m, rs, set[i].tokens, NULL, 1, set[i].length, NULL, &err), 0);
        tk_score alone = tk_score_logits(&set[i], dt_runstate_logits(rs), cfg.vocab_size);
        dt_runstate_free(rs);
        assert_int_equal(alone.correct, batched[i].correct);
        assert_int_equal(alone.total, batched[i].total);
        any_right |= alone.correct > 0;
        any_wrong |= alone.correct < alone.total;
    }
    assert_true(any_wrong);
    (void)any_right;
    /* an example longer than the model's context is refused by name */
    assert_int_equal(tk_recall(1, cfg.max_position_embeddings + 1, 3, 3, -1, &set[0], &err), 0);
    assert_int_equal(tk_score_examples(&m, set, 1, batched, &err), -1);
    assert_non_null(strstr(err.msg, "recall"));
    dt_model_free(&m);
}

/* tk_evaluate: cells as documented, counts add up, the same answer twice. */
static void test_evaluate(void **state) {
    (void)state;
    dt_config cfg;
    dt_error err;
    dt_model m;
    assert_int_equal(dt_config_preset(&cfg, "tiny", DT_ARCH_LLAMA, &err), 0);
    assert_int_equal(dt_model_create(&m, &cfg, &err), 0);
    dt_model_init_random(&m, 9);
    tk_eval_options o = {.train_len = 64, .max_len = cfg.max_position_embeddings, .per_cell = 3, .seed = 4};
    for (int k = 0; k < TK_N_TASKS; k++) {
        tk_result a, b;
        assert_int_equal(tk_evaluate(&m, (tk_kind)k, &o, &a, &err), 0);
        assert_int_equal(tk_evaluate(&m, (tk_kind)k, &o, &b, &err), 0);
        assert_int_equal(a.correct, b.correct);
        int total = 0;
        for (int c = 0; c < a.n_cells; c++) {
            total += a.cells[c].total;
            assert_int_equal(a.cells[c].examples, 3);
            assert_true(a.cells[c].length <= cfg.max_position_embeddings);
        }
        assert_int_equal(total, a.total);
        assert_int_equal(a.n_examples, 3 * a.n_cells);
        int want = k == TK_RECALL ? 8 /* K=8 does not fit 32 tokens */ : k == TK_DEPTH ? 10 : 6;
        assert_int_equal(a.n_cells, want);
        if (k == TK_ICL) assert_false(isnan(a.order_std));
        tk_result_free(&a);
        tk_result_free(&b);
    }
    dt_model_free(&m);
}

/* ---------------------------------------------------------------- the training mix */

static void test_mix(void **state) {
    (void)state;
    enum { B = 6, T = 128 };
    static int tok[B * T], tg[B * T], tok2[B * T], tg2[B * T];
    unsigned char filler[2000];
    for (size_t i = 0; i < sizeof filler; i++) filler[i] = (unsigned char)("some text. "[i % 11]);
    tk_mix mix = {.ratio = 1.0, .tasks = 7, .max_pairs = 16, .filler = filler, .filler_n = sizeof filler};
    for (int step = 0; step < 20; step++) {
        uint64_t r1 = 100 + (uint64_t)step, r2 = r1;
        for (int i = 0; i < B * T; i++) tok[i] = tok2[i] = 'x', tg[i] = tg2[i] = 'y';
        tk_mix_batch(&mix, step, 20, tok, tg, 0, B, B, T, &r1);
        tk_mix_batch(&mix, step, 20, tok2, tg2, 0, B, B, T, &r2);
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
        tk_mix_batch(&mix, step, 20, tok, tg, 0, B, B, T, &r1);
        tk_mix_batch(&mix, step, 20, tok2, tg2, 2, 3, B, T, &r2);
        assert_memory_equal(tok + 2 * T, tok2, (size_t)3 * T * sizeof(int));
        assert_memory_equal(tg + 2 * T, tg2, (size_t)3 * T * sizeof(int));
        assert_true(r1 == r2);
    }
    /* the curriculum: recall without distractors and depth with the least text at first, a full
     * row of distractors / text at the end; recall's queries run to the end of the row */
    mix.tasks = 1 << TK_RECALL | 1 << TK_DEPTH;
    for (int phase = 0; phase < 2; phase++) {
        int step = phase ? 99 : 0, uppercase = 0, text = 0;
        uint64_t r3 = 11;
        tk_mix_batch(&mix, step, 100, tok, tg, 0, B, B, T, &r3);
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
    tk_mix_batch(&mix, 0, 20, tok, tg, 0, B, B, T, &r);
    for (int i = 0; i < B * T; i++) assert_true(tok[i] == 'x' && tg[i] == 'y');
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recall_format), cmocka_unit_test(test_depth_format),
        cmocka_unit_test(test_icl_format),    cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_score_rigged),  cmocka_unit_test(test_score_batched),
        cmocka_unit_test(test_evaluate),      cmocka_unit_test(test_mix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
