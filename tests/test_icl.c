/* test_icl.c — the in-context classification task: prompts as documented, balanced and
 * deterministic, permutations that only reorder, and the summary statistics. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "difftrans_analysis.h"
#include "testutil.h"

/* Splits a prompt into its demonstration blocks (sorted) and checks each one's format and label. */
static int demo_blocks(const char *prompt, char blocks[][64], int max, int *reds) {
    int n = 0;
    const char *p = prompt;
    *reds = 0;
    while (!strncmp(p, "Input: ", 7)) {
        const char *end = strstr(p, "\n\n");
        if (!end) break; /* the query: no blank line after it */
        assert_true(n < max && end - p < 63);
        memset(blocks[n], 0, sizeof blocks[n]);
        memcpy(blocks[n], p, (size_t)(end - p));
        blocks[n][end - p] = '\0';
        char word[16], label[16];
        assert_int_equal(sscanf(blocks[n], "Input: %15[a-z]\nLabel: %15[a-z]", word, label), 2);
        assert_string_equal(label, dt_icl_label_name(dt_icl_label_of(word)));
        *reds += dt_icl_label_of(word) == 0;
        n++;
        p = end + 2;
    }
    /* what is left is the query */
    char word[16];
    assert_int_equal(sscanf(p, "Input: %15[a-z]\nLabel: ", word), 1);
    assert_true(strlen(p) >= 16 && !strcmp(p + strlen(p) - 8, "\nLabel: "));
    qsort(blocks, (size_t)n, sizeof blocks[0], (int (*)(const void *, const void *))strcmp);
    return n;
}

static void test_prompts(void **state) {
    (void)state;
    dt_icl_params p;
    dt_icl_params_default(&p);
    char a[2048], b[2048], blocks_a[64][64], blocks_b[64][64];
    int la, lb, reds;
    assert_string_equal(dt_icl_label_name(dt_icl_label_of("apple")), "red");
    assert_string_equal(dt_icl_label_name(dt_icl_label_of("zebra")), "blue");
    int differs = 0;
    for (int perm = 0; perm < p.permutations; perm++) {
        int n = dt_icl_prompt(&p, perm, 3, a, sizeof a, &la);
        assert_true(n > 0 && n == (int)strlen(a));
        assert_int_equal(demo_blocks(a, blocks_a, 64, &reds), p.shots);
        assert_int_equal(reds, p.shots / 2); /* balanced demonstrations */
        int nb = dt_icl_prompt(&p, 0, 3, b, sizeof b, &lb);
        assert_int_equal(nb, (int)strlen(b));
        assert_int_equal(la, lb);                   /* the same query in every order */
        assert_int_equal(demo_blocks(b, blocks_b, 64, &reds), p.shots);
        assert_memory_equal(blocks_a, blocks_b, sizeof blocks_a[0] * p.shots); /* only reordered */
        differs += strcmp(a, b) != 0;
        assert_int_equal(dt_icl_prompt(&p, perm, 3, b, sizeof b, &lb), n); /* deterministic */
        assert_string_equal(a, b);
    }
    assert_true(differs > 0);
    int labels[2] = {0, 0};
    for (int q = 0; q < p.queries; q++) {
        dt_icl_prompt(&p, 0, q, a, sizeof a, &la);
        labels[la]++;
    }
    assert_int_equal(labels[0], labels[1]); /* balanced queries: chance is 0.5 */
    assert_int_equal(dt_icl_prompt(&p, 0, 0, a, 40, &la), -1); /* too small a buffer */
}

/* The query word of a prompt: what follows its last "Input: ". */
static void query_word(const char *prompt, char word[16]) {
    const char *last = NULL;
    for (const char *p = strstr(prompt, "Input: "); p; p = strstr(p + 1, "Input: ")) last = p;
    assert_non_null(last);
    assert_int_equal(sscanf(last, "Input: %15[a-z]", word), 1);
}

/* Consecutive seeds draw unrelated words. The item streams began at seed·φ, splitmix's own step, so
 * seed s + 1 drew seed s's numbers shifted by one and its words were the same letters ("mrqxila",
 * "eqxilat", "dxila" for seeds 1, 2, 3): --seed gave no new examples. */
static void test_seeds_independent(void **state) {
    (void)state;
    dt_icl_params p;
    dt_icl_params_default(&p);
    char a[2048], b[2048], wa[16], wb[16];
    int la, lb, related = 0, total = 0;
    for (uint64_t s = 1; s <= 4; s++)
        for (int q = 0; q < p.queries; q++) {
            p.seed = s;
            assert_true(dt_icl_prompt(&p, 0, q, a, sizeof a, &la) > 0);
            p.seed = s + 1;
            assert_true(dt_icl_prompt(&p, 0, q, b, sizeof b, &lb) > 0);
            query_word(a, wa);
            query_word(b, wb);
            /* draws shifted by one: b's letters from its second on were a's from its third on */
            if (strlen(wa) >= 4 && strlen(wb) >= 3) {
                related += !strncmp(wb + 1, wa + 2, 2);
                total++;
            }
        }
    assert_true(total > 32);
    assert_true(related * 10 < total);
}

static void test_summary(void **state) {
    (void)state;
    const double acc[3] = {0.5, 0.75, 1.0};
    double mean, std, lo, hi;
    dt_icl_summarize(acc, 3, &mean, &std, &lo, &hi);
    assert_float_equal(mean, 0.75, 1e-12);
    assert_float_equal(std, sqrt(0.125 / 3), 1e-12);
    assert_float_equal(lo, 0.5, 0);
    assert_float_equal(hi, 1.0, 0);
}

static void test_run_on_a_model(void **state) {
    (void)state;
    dt_config c;
    dt_error err;
    dt_model m;
    assert_int_equal(dt_config_preset(&c, "tiny", DT_ARCH_DIFF, &err), 0);
    assert_int_equal(dt_model_create(&m, &c, &err), 0);
    dt_model_init_random(&m, 5);
    for (size_t i = 0; i < m.n_params; i++) m.params[i] *= 20.0f; /* an opinionated random model */
    dt_icl_params p = {.shots = 4, .permutations = 3, .queries = 6, .seed = 9};
    dt_icl_result r1, r2;
    assert_int_equal(dt_icl_run(&m, NULL, &p, &r1, &err), 0);
    assert_int_equal(dt_icl_run(&m, NULL, &p, &r2, &err), 0);
    assert_int_equal(r1.permutations, 3);
    for (int i = 0; i < 3; i++) {
        assert_true(r1.accuracy[i] >= 0 && r1.accuracy[i] <= 1);
        assert_float_equal(r1.accuracy[i] * 6, round(r1.accuracy[i] * 6), 1e-9);
        assert_float_equal(r1.accuracy[i], r2.accuracy[i], 0); /* deterministic */
    }
    dt_icl_result_free(&r1);
    dt_icl_result_free(&r2);
    p.shots = 3;
    assert_int_equal(dt_icl_run(&m, NULL, &p, &r1, &err), -1);
    assert_non_null(strstr(err.msg, "shots"));
    p.shots = 64; /* prompts past the tiny preset's 256 positions */
    assert_int_equal(dt_icl_run(&m, NULL, &p, &r1, &err), -1);
    assert_non_null(strstr(err.msg, "max_position_embeddings"));
    dt_model_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompts),
        cmocka_unit_test(test_seeds_independent),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_run_on_a_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
