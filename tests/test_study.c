/* test_study.c — the scaling study's plan: sizes, parameter counts, the same token budget per
 * parameter at every size and for every variant of a size. (Training, resume and MPI: cli_study.sh;
 * the intervals: test_scaling.c.) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis/study.h"
#include "difftrans_analysis.h"

static void test_sizes(void **state) {
    (void)state;
    dt_study_size s[DT_STUDY_MAX_SIZES];
    int n = 0;
    dt_error err;
    assert_int_equal(dt_study_parse_sizes("s1,s4,80x3", s, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(s[0].name, "s1");
    assert_int_equal(s[1].hidden, 128);
    assert_int_equal(s[1].layers, 4);
    assert_int_equal(s[2].hidden, 80);
    assert_int_equal(s[2].layers, 3);
    assert_int_equal(s[2].heads, 4);
    assert_int_equal(s[2].intermediate, 224); /* 8/3 · 80 = 213.3, up to a multiple of 16 */
    const char *bad[] = {"s1,,s2", "s1,s1", "huge", "81x2", "80x0", "80x2x", ""};
    const char *why[] = {"empty", "twice", "unknown", "multiple of 8", "layers", "unknown", "none"};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(dt_study_parse_sizes(bad[i], s, &n, &err), -1);
        if (!strstr(err.msg, why[i])) fail_msg("'%s': '%s' does not say '%s'", bad[i], err.msg, why[i]);
    }
}

/* Non-embedding parameters, counted by hand for the Transformer at s1 (C 48, 2 layers, F 128):
 * per layer q, k, v, o (4·C²), gate, up, down (3·C·F) and two norms (2·C), then the final norm. */
static void test_nonembedding(void **state) {
    (void)state;
    dt_study_options o;
    dt_study_options_default(&o);
    dt_config vocab;
    memset(&vocab, 0, sizeof vocab);
    vocab.vocab_size = 1000;
    vocab.special = dt_special_ids_none();
    o.tokens = "unused", o.out = "/tmp/study-plan";
    study_run *runs = NULL;
    int n = 0;
    dt_error err;
    assert_int_equal(study_plan(&o, &vocab, &runs, &n, &err), 0);
    assert_int_equal(n, 4 * 2 * 3);
    const study_run *base = &runs[0 * 3 + 3]; /* s1, transformer, seed 0 */
    assert_int_equal(base->cfg.arch, DT_ARCH_LLAMA);
    const size_t C = 48, F = 128;
    assert_int_equal(base->nonembedding, 2 * (4 * C * C + 3 * C * F + 2 * C) + C);
    assert_int_equal(base->params, base->nonembedding + 2 * 1000 * C); /* untied embedding and LM head */
    /* the library's count, which analyze scaling and compare --scaling fit too; a tied head is one matrix */
    assert_int_equal(dt_config_nonembedding_param_count(&base->cfg), base->nonembedding);
    dt_config tied = base->cfg;
    tied.tie_word_embeddings = 1;
    assert_int_equal(dt_config_param_count(&tied), base->nonembedding + 1000 * C);
    assert_int_equal(dt_config_nonembedding_param_count(&tied), base->nonembedding);
    tied.hidden_size = 0; /* invalid: 0, as dt_config_param_count */
    assert_int_equal(dt_config_nonembedding_param_count(&tied), 0);
    free(runs);
}

static void test_plan_budget(void **state) {
    (void)state;
    dt_study_options o;
    dt_study_options_default(&o);
    o.tokens = "unused", o.out = "/tmp/study-plan";
    o.n_variants = 3;
    o.variants[2] = "transformer-1.5h";
    o.tokens_per_param = 7;
    dt_config vocab;
    memset(&vocab, 0, sizeof vocab);
    vocab.vocab_size = 512;
    vocab.special = dt_special_ids_none();
    study_run *runs = NULL;
    int n = 0;
    dt_error err;
    assert_int_equal(study_plan(&o, &vocab, &runs, &n, &err), 0);
    assert_int_equal(n, 4 * 3 * 3);
    const double per_step = (double)o.batch * o.seq;
    for (int i = 0; i < n; i++) {
        const study_run *r = &runs[i], *diff = &runs[(r->size * 3 + 0) * 3];
        /* the size's DIFF model sets the budget; every variant and seed of the size gets its steps */
        assert_int_equal(r->steps, diff->steps);
        assert_true(fabs(r->steps * per_step - 7.0 * diff->nonembedding) <= per_step / 2);
        assert_int_equal(r->seed, o.seed + (uint64_t)r->seed_index);
        assert_int_equal(r->cfg.vocab_size, 512);
        assert_int_equal(r->cfg.max_position_embeddings, o.seq);
        char want[128];
        snprintf(want, sizeof want, "/tmp/study-plan/runs/%s-%s-s%d", o.sizes[r->size].name, o.variants[r->variant],
                 r->seed_index);
        assert_string_equal(r->dir, want);
    }
    /* larger sizes: more parameters and more steps */
    for (int i = 1; i < 4; i++) assert_true(runs[i * 9].steps > runs[(i - 1) * 9].steps);
    /* transformer-1.5h: 1.5× the baseline's heads of the same width (DIFF V2's parameters), so more of them */
    assert_int_equal(runs[1 * 3].cfg.num_attention_heads, 4);
    assert_int_equal(runs[2 * 3].cfg.num_attention_heads, 6);
    assert_true(runs[2 * 3].nonembedding > runs[1 * 3].nonembedding);
    free(runs);
    /* an unknown variant is refused by name */
    o.variants[2] = "nonsense";
    assert_int_equal(study_plan(&o, &vocab, &runs, &n, &err), -1);
    assert_non_null(strstr(err.msg, "nonsense"));
    assert_null(runs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_nonembedding),
        cmocka_unit_test(test_plan_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
