/* test_needle.c — the multi-needle retrieval task: sample layout (hand-rebuilt), the depth rule,
 * determinism, the data set files and their loader, refusals, and greedy scoring against a
 * brute-force decoder and against a model rigged to answer "77777". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <math.h>
#include <omp.h>

#include "difftrans_analysis.h"
#include "difftrans.h"
#include "testutil.h"

/* ---------------------------------------------------------------- helpers */

/* A corpus of lines "abcdefghi\n": a line start every 10 bytes, no sentence ends. */
static void lines_corpus(dt_needle_corpus *c) {
    char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = "abcdefghi\n"[i % 10];
    dt_error err;
    assert_int_equal(dt_needle_corpus_from_bytes(c, buf, sizeof buf, "lines", &err), 0);
}

static dt_needle_params params(int needles, int queries) {
    dt_needle_params p;
    dt_needle_params_default(&p);
    p.needles = needles;
    p.queries = queries;
    return p;
}

static void expect_error(int rc, const dt_error *err, const char *problem) {
    assert_int_equal(rc, -1);
    if (!strstr(err->msg, problem)) fail_msg("expected '%s' in: %s", problem, err->msg);
}

/* Checks everything a sample promises, independently of dt_needle_sample_check. */
static void check_sample(const dt_needle_sample *s, int context_length, int N, int R) {
    assert_int_equal(s->context_length, context_length);
    assert_int_equal(s->n_needles, N);
    assert_int_equal(s->n_queries, R);
    assert_int_equal((int)strlen(s->text), s->text_length);
    int expect_len = context_length;
    for (int i = 0; i < N; i++) {
        const dt_needle_needle *nd = &s->needles[i];
        const size_t kl = strlen(nd->key);
        assert_true(kl >= 4 && kl <= 8);
        for (size_t k = 0; k < kl; k++) assert_true(nd->key[k] >= 'a' && nd->key[k] <= 'z');
        assert_int_equal(strlen(nd->value), 5);
        assert_true(nd->value[0] >= '1' && nd->value[0] <= '9');
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(nd->key, s->needles[j].key);
            assert_string_not_equal(nd->value, s->needles[j].value);
            assert_true(s->needles[j].offset + s->needles[j].length < nd->offset); /* by offset, no overlap */
        }
        char sentence[128];
        snprintf(sentence, sizeof sentence, "The magic number of %s is %s.", nd->key, nd->value);
        assert_int_equal(nd->length, (int)strlen(sentence));
        assert_true(nd->offset >= 0 && nd->offset + nd->length <= context_length);
        assert_memory_equal(s->text + nd->offset, sentence, (size_t)nd->length);
        assert_int_equal(nd->value_length, 5);
        assert_memory_equal(s->text + nd->value_offset, nd->value, 5);
    }
    int at = context_length;
    for (int r = 0; r < R; r++) {
        const dt_needle_query *q = &s->queries[r];
        const dt_needle_needle *nd = &s->needles[q->needle];
        char question[128];
        int ql = snprintf(question, sizeof question, "\nQuestion: What is the magic number of %s?\nAnswer: ", nd->key);
        assert_memory_equal(s->text + at, question, (size_t)ql);
        assert_int_equal(q->question_offset, at + 1);
        assert_int_equal(q->prompt_end_offset, at + ql);
        assert_memory_equal(s->text + q->prompt_end_offset - 8, "Answer: ", 8);
        assert_int_equal(q->answer_length, 5);
        assert_memory_equal(s->text + q->prompt_end_offset, nd->value, 5);
        for (int j = 0; j < r; j++) assert_int_not_equal(s->queries[j].needle, q->needle);
        at += ql + 5;
        expect_len += ql + 5;
    }
    assert_int_equal(s->text_length, expect_len);
    dt_error err;
    if (dt_needle_sample_check(s, "sample", &err) != 0) fail_msg("%s", err.msg);
}

/* ---------------------------------------------------------------- parameters */

static void test_params(void **state) {
    (void)state;
    dt_needle_params p;
    dt_error err;
    dt_needle_params_default(&p);
    assert_int_equal(dt_needle_params_validate(&p, &err), 0);
    assert_int_equal(p.needles, 6);
    assert_int_equal(p.queries, 2);
    assert_int_equal(p.n_depths, 5);
    assert_true(p.depths[4] == 1.0);

    p = params(2, 3);
    expect_error(dt_needle_params_validate(&p, &err), &err, "queries = 3");
    p = params(0, 0);
    expect_error(dt_needle_params_validate(&p, &err), &err, "needles = 0");
    p = params(6, 2);
    p.depths[1] = -0.1;
    expect_error(dt_needle_params_validate(&p, &err), &err, "depth -0.1");
    p.depths[1] = 1.5;
    expect_error(dt_needle_params_validate(&p, &err), &err, "depth 1.5");
    p.depths[1] = NAN;
    expect_error(dt_needle_params_validate(&p, &err), &err, "must be in [0, 1]");
    p = params(6, 2);
    p.contexts[0] = 6 * DT_NEEDLE_UNIT_MAX - 1;
    expect_error(dt_needle_params_validate(&p, &err), &err, "too small to hold 6 needles");
    p.contexts[0] = 6 * DT_NEEDLE_UNIT_MAX; /* the documented minimum */
    assert_int_equal(dt_needle_params_validate(&p, &err), 0);
    p = params(6, 2);
    p.depths[1] = 0;
    expect_error(dt_needle_params_validate(&p, &err), &err, "listed twice");
    p = params(6, 2);
    p.n_train = p.n_test = 0;
    expect_error(dt_needle_params_validate(&p, &err), &err, "nothing to generate");
    assert_int_equal(DT_NEEDLE_UNIT_MAX, 39); /* "The magic number of " + 8 + " is " + 5 + "." + separator */
}

static void test_generate_refusals(void **state) {
    (void)state;
    dt_needle_corpus c;
    lines_corpus(&c);
    dt_needle_sample s;
    dt_error err;
    dt_needle_params p = params(3, 4);
    expect_error(dt_needle_generate_sample(&p, 512, 0.5, 1, &c, &s, &err), &err, "queries = 4");
    assert_null(s.text);
    p = params(3, 2);
    expect_error(dt_needle_generate_sample(&p, 512, 1.01, 1, &c, &s, &err), &err, "depth 1.01");
    expect_error(dt_needle_generate_sample(&p, 512, -0.5, 1, &c, &s, &err), &err, "depth -0.5");
    expect_error(dt_needle_generate_sample(&p, 3 * 39 - 1, 0.5, 1, &c, &s, &err), &err, "context length 116");
    dt_needle_corpus empty = {0};
    expect_error(dt_needle_generate_sample(&p, 512, 0.5, 1, &empty, &s, &err), &err, "corpus is empty");
    assert_null(s.text);
    dt_needle_sample_free(&s);
    dt_needle_corpus_free(&c);
}

/* ---------------------------------------------------------------- corpus */

static void test_corpus(void **state) {
    (void)state;
    dt_needle_corpus c;
    dt_error err;
    expect_error(dt_needle_corpus_from_bytes(&c, "", 0, "empty.txt", &err), &err, "empty.txt: corpus is empty");
    expect_error(dt_needle_corpus_from_bytes(&c, "\0\r\0", 3, "nul.txt", &err), &err, "nul.txt: corpus is empty");
    assert_null(c.bytes);
    /* NUL and CR dropped, controls → ' ', malformed UTF-8 → ' ', well-formed kept */
    const char in[] = "a\0b\r\nc\x01" "d\xff" "e\xc3\xa9" "f\xe2\x82";
    assert_int_equal(dt_needle_corpus_from_bytes(&c, in, sizeof in - 1, "mixed", &err), 0);
    assert_int_equal(c.n, 13);
    assert_memory_equal(c.bytes, "ab\nc d e\xc3\xa9" "f  ", 13);
    assert_true(c.has_newline);
    dt_needle_corpus_free(&c);
    assert_null(c.bytes);

    char path[1200];
    tu_path(path, sizeof path, "no_such_corpus.txt");
    remove(path);
    expect_error(dt_needle_corpus_load(&c, path, &err), &err, "no_such_corpus.txt: cannot open corpus");
    tu_write_file(path, "", 0);
    expect_error(dt_needle_corpus_load(&c, path, &err), &err, "corpus is empty");
    expect_error(dt_needle_corpus_load(&c, tu_tmpdir(), &err), &err, "not a regular file");
    remove(path);
}

/* ---------------------------------------------------------------- one sample */

/* One needle in the lines corpus: the whole text is rebuilt by hand from the rule. */
static void test_hand_built(void **state) {
    (void)state;
    dt_needle_corpus c;
    lines_corpus(&c);
    dt_needle_params p = params(1, 1);
    const double depths[] = {0, 0.25, 0.5, 0.75, 1};
    for (int di = 0; di < 5; di++)
        for (uint64_t seed = 1; seed <= 20; seed++) {
            const int C = 200;
            dt_needle_sample s;
            dt_error err;
            assert_int_equal(dt_needle_generate_sample(&p, C, depths[di], seed, &c, &s, &err), 0);
            check_sample(&s, C, 1, 1);
            const dt_needle_needle *nd = &s.needles[0];
            const int F = C - nd->length - 1;
            /* boundaries of a filler that starts at a line start: multiples of 10, and F; the
             * sentence starts at the boundary, or one byte later at F when the filler ends inside a
             * line (the leading space) */
            const int goal = (int)floor(depths[di] * (C - nd->length) + 0.5);
            int best = -1, best_off = -1;
            for (int b = 0; b <= F; b++) {
                if (b % 10 != 0 && b != F) continue;
                const int off = b + (b == F && F % 10 != 0);
                if (best < 0 || abs(off - goal) < abs(best_off - goal)) best = b, best_off = off;
            }
            char expect[1024];
            int at = 0;
            for (int i = 0; i < best; i++) expect[at++] = "abcdefghi\n"[i % 10];
            const int lead = best == F && F % 10 != 0; /* the filler ends inside a line */
            if (lead) expect[at++] = ' ';
            at += snprintf(expect + at, sizeof expect - (size_t)at, "The magic number of %s is %s.", nd->key, nd->value);
            if (!lead) expect[at++] = '\n'; /* every boundary here is a line start */
            for (int i = best; i < F; i++) expect[at++] = "abcdefghi\n"[i % 10];
            assert_int_equal(at, C);
            at += snprintf(expect + at, sizeof expect - (size_t)at, "\nQuestion: What is the magic number of %s?\nAnswer: %s", nd->key,
                           nd->value);
            assert_int_equal(s.text_length, at);
            assert_memory_equal(s.text, expect, (size_t)at);
            assert_int_equal(nd->offset, best + lead);
            assert_int_equal(nd->offset, best_off);
            if (depths[di] == 0) assert_int_equal(nd->offset, 0);
            if (depths[di] == 1) assert_true(nd->offset + nd->length == C || nd->offset + nd->length == C - 1);
            assert_true(fabs(s.needle_depth - (double)nd->offset / (C - nd->length)) < 1e-6);
            assert_true(s.seed == seed);
            dt_needle_sample_free(&s);
        }
    dt_needle_corpus_free(&c);
}

/* Six needles, two queries, in real text: layout and the depth rule of the first queried needle. */
static void test_many_needles(void **state) {
    (void)state;
    dt_needle_corpus c;
    lines_corpus(&c);
    dt_needle_params p = params(6, 2);
    const double depths[] = {0, 0.3, 0.5, 0.9, 1};
    for (int di = 0; di < 5; di++)
        for (uint64_t seed = 100; seed < 130; seed++) {
            const int C = 512;
            dt_needle_sample s;
            dt_error err;
            assert_int_equal(dt_needle_generate_sample(&p, C, depths[di], seed, &c, &s, &err), 0);
            check_sample(&s, C, 6, 2);
            /* The filler position of every other needle: its offset minus the needles before it
             * (sentence + 1 separator byte each) minus its leading space (the only ' ' in the text
             * of this corpus that precedes a sentence). */
            const int t = s.queries[0].needle;
            const dt_needle_needle *target = &s.needles[t];
            int fp[6], unit[6], needle_bytes = 0;
            for (int i = 0; i < 6; i++) {
                unit[i] = s.needles[i].length + 1;
                fp[i] = s.needles[i].offset - needle_bytes - (s.needles[i].offset > 0 && s.text[s.needles[i].offset - 1] == ' ');
                needle_bytes += unit[i];
            }
            const int F = C - needle_bytes;
            for (int i = 0; i < 6; i++)
                if (i != t) assert_true(fp[i] % 10 == 0 || fp[i] == F); /* at boundaries */
            /* every offset the target's sentence could take, and the one nearest to the goal */
            const int goal = (int)floor(depths[di] * (C - target->length) + 0.5);
            int best = -1;
            for (int b = 0; b <= F; b++) {
                if (b % 10 != 0 && b != F) continue;
                int off = b + (b == F && F % 10 != 0);
                for (int i = 0; i < 6; i++)
                    if (i != t && fp[i] < b) off += unit[i];
                for (int i = 0;; i++) { /* before, between and after the others at b (in offset order) */
                    if (best < 0 || abs(off - goal) < abs(best - goal) || (abs(off - goal) == abs(best - goal) && off < best))
                        best = off;
                    while (i < 6 && (i == t || fp[i] != b)) i++;
                    if (i == 6) break;
                    off += unit[i];
                }
            }
            assert_int_equal(target->offset, best);
            assert_true(fabs(s.needle_depth - (double)target->offset / (C - target->length)) < 1e-6);
            if (depths[di] == 0) assert_int_equal(target->offset, 0);
            if (depths[di] == 1)
                assert_true(target->offset + target->length == C || target->offset + target->length == C - 1);
            /* queries are asked in order after the context, each answer right after "Answer: " */
            assert_true(s.queries[0].prompt_end_offset < s.queries[1].question_offset);
            dt_needle_sample_free(&s);
        }
    dt_needle_corpus_free(&c);
}

/* A corpus with sentences but no newlines: needles go after ". " with a ' ' separator. */
static void test_sentence_boundaries(void **state) {
    (void)state;
    char buf[600];
    for (int i = 0; i < 600; i++) buf[i] = "Lorem ipsum dolor. "[i % 19];
    dt_needle_corpus c;
    dt_error err;
    assert_int_equal(dt_needle_corpus_from_bytes(&c, buf, sizeof buf, "lorem", &err), 0);
    assert_false(c.has_newline);
    dt_needle_params p = params(3, 3);
    for (uint64_t seed = 0; seed < 20; seed++) {
        dt_needle_sample s;
        assert_int_equal(dt_needle_generate_sample(&p, 300, 0.5, seed, &c, &s, &err), 0);
        check_sample(&s, 300, 3, 3);
        for (int i = 0; i < 3; i++) {
            const dt_needle_needle *nd = &s.needles[i];
            /* at offset 0, after ". ", or after another needle's ". " */
            if (nd->offset > 0) assert_true(s.text[nd->offset - 1] == ' ' || s.text[nd->offset - 1] == '\n');
            if (nd->offset >= 2 && s.text[nd->offset - 1] == ' ' && s.text[nd->offset - 2] != '.') {
                /* only at the very end of the filler (which may itself end with a space) */
                assert_true(nd->offset + nd->length >= 299);
            }
        }
        dt_needle_sample_free(&s);
    }
    dt_needle_corpus_free(&c);
}

static void test_determinism(void **state) {
    (void)state;
    dt_needle_corpus c;
    lines_corpus(&c);
    dt_needle_params p = params(4, 2);
    dt_needle_sample a, b, d;
    dt_error err;
    assert_int_equal(dt_needle_generate_sample(&p, 400, 0.25, 12345, &c, &a, &err), 0);
    assert_int_equal(dt_needle_generate_sample(&p, 400, 0.25, 12345, &c, &b, &err), 0);
    assert_int_equal(dt_needle_generate_sample(&p, 400, 0.25, 12346, &c, &d, &err), 0);
    assert_int_equal(a.text_length, b.text_length);
    assert_memory_equal(a.text, b.text, (size_t)a.text_length + 1);
    assert_memory_equal(a.needles, b.needles, sizeof a.needles);
    assert_memory_equal(a.queries, b.queries, sizeof a.queries);
    assert_true(a.text_length != d.text_length || memcmp(a.text, d.text, (size_t)a.text_length) != 0);
    dt_needle_sample_free(&a);
    dt_needle_sample_free(&b);
    dt_needle_sample_free(&d);
    uint64_t tr, te, tr2, te2;
    dt_needle_stream_seeds(7, &tr, &te);
    dt_needle_stream_seeds(7, &tr2, &te2);
    assert_true(tr == tr2 && te == te2 && tr != te);
    dt_needle_corpus_free(&c);
}

/* ---------------------------------------------------------------- files */

static void write_set(const char *name, uint64_t seed, dt_needle_params *p, char *dir, size_t n) {
    dt_needle_corpus c;
    lines_corpus(&c);
    dt_needle_params_default(p);
    p->n_contexts = 2;
    p->contexts[0] = 96;
    p->contexts[1] = 128;
    p->n_depths = 3;
    p->depths[0] = 0;
    p->depths[1] = 0.5;
    p->depths[2] = 1;
    p->needles = 2;
    p->queries = 2;
    p->n_train = 7;
    p->n_test = 12;
    p->seed = seed;
    tu_path(dir, n, name);
    dt_error err;
    if (dt_needle_write_dataset(p, &c, "lines", dir, &err) != 0) fail_msg("%s", err.msg);
    dt_needle_corpus_free(&c);
}

static void test_dataset_files(void **state) {
    (void)state;
    char d1[1200], d2[1200], d3[1200], path[1300];
    dt_needle_params p;
    write_set("set1", 9, &p, d1, sizeof d1);
    write_set("set2", 9, &p, d2, sizeof d2);
    write_set("set3", 10, &p, d3, sizeof d3);
    const char *files[] = {"train.txt", "test.jsonl", "needle.json"};
    for (int f = 0; f < 3; f++) {
        size_t n1, n2, n3;
        snprintf(path, sizeof path, "%s/%s", d1, files[f]);
        char *a = tu_read_file(path, &n1);
        snprintf(path, sizeof path, "%s/%s", d2, files[f]);
        char *b = tu_read_file(path, &n2);
        snprintf(path, sizeof path, "%s/%s", d3, files[f]);
        char *x = tu_read_file(path, &n3);
        assert_int_equal(n1, n2);
        assert_memory_equal(a, b, n1); /* same seed: byte-identical */
        assert_true(n1 != n3 || memcmp(a, x, n1) != 0);
        free(a);
        free(b);
        free(x);
    }

    /* the loader gives back every sample, each rebuilt exactly from its recorded seed */
    dt_needle_testset ts;
    dt_error err;
    if (dt_needle_load_testset(&ts, d1, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(ts.n, 12);
    dt_needle_corpus c;
    lines_corpus(&c);
    uint64_t tr, te;
    dt_needle_stream_seeds(9, &tr, &te);
    for (int i = 0; i < ts.n; i++) {
        const dt_needle_sample *s = &ts.samples[i];
        int context_length;
        double depth;
        dt_needle_cell_of(&p, i, &context_length, &depth);
        assert_int_equal(s->id, i);
        assert_int_equal(s->line, i + 1);
        assert_int_equal(s->context_length, context_length);
        assert_true(s->depth == depth);
        assert_true(s->seed == dt_rng_next(&te));
        dt_needle_sample g;
        assert_int_equal(dt_needle_generate_sample(&p, context_length, depth, s->seed, &c, &g, &err), 0);
        assert_string_equal(g.text, s->text);
        assert_memory_equal(g.needles, s->needles, sizeof g.needles);
        assert_memory_equal(g.queries, s->queries, sizeof g.queries);
        assert_true(fabs(g.needle_depth - s->needle_depth) < 1e-9);
        check_sample(s, context_length, 2, 2);
        dt_needle_sample_free(&g);
    }
    /* cells round-robin: 12 samples over 2 × 3 cells */
    assert_int_equal(ts.samples[0].context_length, 96);
    assert_int_equal(ts.samples[3].context_length, 128);
    assert_true(ts.samples[4].depth == 0.5);
    dt_needle_testset_free(&ts);

    /* train.txt: the train stream's samples, each followed by "\n\n" */
    size_t n;
    snprintf(path, sizeof path, "%s/train.txt", d1);
    char *train = tu_read_file(path, &n);
    size_t at = 0;
    for (int i = 0; i < 7; i++) {
        int context_length;
        double depth;
        dt_needle_cell_of(&p, i, &context_length, &depth);
        dt_needle_sample g;
        assert_int_equal(dt_needle_generate_sample(&p, context_length, depth, dt_rng_next(&tr), &c, &g, &err), 0);
        assert_true(at + (size_t)g.text_length + 2 <= n);
        assert_memory_equal(train + at, g.text, (size_t)g.text_length);
        assert_memory_equal(train + at + g.text_length, "\n\n", 2);
        at += (size_t)g.text_length + 2;
        dt_needle_sample_free(&g);
    }
    assert_int_equal(at, n);
    free(train);
    dt_needle_corpus_free(&c);

    snprintf(path, sizeof path, "%s/needle.json", d1);
    char *meta = tu_read_file(path, &n);
    assert_non_null(strstr(meta, "\"version\":\t1"));
    assert_non_null(strstr(meta, "\"seed\":\t\"9\""));
    free(meta);
}

/* Writes `lines` as a test.jsonl and expects the loader to fail with `problem`. */
static void expect_load_error(const char *content, const char *problem) {
    char path[1200];
    tu_path(path, sizeof path, "bad.jsonl");
    tu_write_file(path, content, strlen(content));
    dt_needle_testset ts;
    dt_error err;
    int rc = dt_needle_load_testset(&ts, path, &err);
    if (rc != -1) fail_msg("loaded '%.80s...' without error", content);
    if (!strstr(err.msg, "bad.jsonl") || !strstr(err.msg, problem)) fail_msg("expected '%s' in: %s", problem, err.msg);
    assert_null(ts.samples);
}

static char *replace(const char *s, const char *from, const char *to) {
    const char *at = strstr(s, from);
    if (!at) fail_msg("'%s' not in the line", from);
    char *out = malloc(strlen(s) + strlen(to) + 1);
    assert_non_null(out);
    sprintf(out, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
    return out;
}

static void test_load_errors(void **state) {
    (void)state;
    dt_needle_corpus c;
    lines_corpus(&c);
    dt_needle_params p = params(2, 2);
    dt_needle_sample s;
    dt_error err;
    assert_int_equal(dt_needle_generate_sample(&p, 100, 0.5, 3, &c, &s, &err), 0);
    char *line = dt_needle_sample_to_json(&s);
    assert_non_null(line);
    char good[8192];
    snprintf(good, sizeof good, "%s\n", line);

    char path[1200];
    tu_path(path, sizeof path, "good.jsonl");
    char two[16384];
    snprintf(two, sizeof two, "%s\n%s", good, good); /* a blank line in between is fine */
    tu_write_file(path, two, strlen(two));
    dt_needle_testset ts;
    if (dt_needle_load_testset(&ts, path, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(ts.n, 2);
    assert_int_equal(ts.samples[1].line, 3);
    dt_needle_testset_free(&ts);

    expect_load_error("", "no samples");
    expect_load_error("{\"id\": 0,\n", ":1: not valid JSON");
    expect_load_error("[1, 2]\n", ":1: expected a JSON object");
    char buf[16384];
    snprintf(buf, sizeof buf, "%s{oops\n", good);
    expect_load_error(buf, ":2: not valid JSON");

    char value_off[64], needle_off[64];
    snprintf(value_off, sizeof value_off, "\"value_offset\":%d", s.needles[0].value_offset);
    snprintf(needle_off, sizeof needle_off, "\"offset\":%d", s.needles[0].offset);
    struct {
        const char *from, *to, *problem;
    } cases[] = {
        {"\"context_length\":100", "\"context_length\":\"100\"", "'context_length' must be a number"},
        {"\"context_length\":100", "\"contextlength\":100", "missing key 'context_length'"},
        {"\"depth\":0.5", "\"depth\":1.5", "'depth' must be a number in [0, 1]"},
        {"\"seed\":\"", "\"seed\":\"x", "'seed' must be a decimal string"},
        {value_off, "\"value_offset\":1", "needles[0]: value span"},
        {needle_off, "\"offset\":-1", "needles[0]: key 'offset' = -1"},
        {"\"answer_length\":5", "\"answer_length\":4", "queries[0]: the answer at"},
        {"\"needle\":", "\"needle\":7,\"x\":", "queries[0]: key 'needle' = 7"},
        {"\"text\":\"", "\"text\":\"X", "text_length says"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *bad = replace(good, cases[i].from, cases[i].to);
        expect_load_error(bad, cases[i].problem);
        free(bad);
    }
    /* a tampered needle sentence: same length, other key letter inside the text */
    char *bad = replace(good, "The magic number of ", "The magic Number of ");
    expect_load_error(bad, "is not \"The magic number of");
    free(bad);

    tu_path(path, sizeof path, "missing.jsonl");
    remove(path);
    expect_error(dt_needle_load_testset(&ts, path, &err), &err, "missing.jsonl: cannot open test set");
    free(line);
    dt_needle_sample_free(&s);
    dt_needle_corpus_free(&c);
}

/* ---------------------------------------------------------------- evaluation */

static void make_testset(dt_needle_testset *ts, const dt_needle_corpus *c, int n, int context, int needles, int queries) {
    memset(ts, 0, sizeof *ts);
    snprintf(ts->path, sizeof ts->path, "memory.jsonl");
    ts->samples = calloc((size_t)n, sizeof *ts->samples);
    assert_non_null(ts->samples);
    dt_needle_params p = params(needles, queries);
    for (int i = 0; i < n; i++) {
        dt_error err;
        assert_int_equal(dt_needle_generate_sample(&p, context, 0.25 * (i % 5), 1000 + (uint64_t)i, c, &ts->samples[i], &err), 0);
        ts->samples[i].id = i;
        ts->samples[i].line = i + 1;
        ts->n++;
    }
}

/* Plain greedy decoding from an empty cache for every query: what dt_needle_eval must reproduce. */
static void brute_force(const dt_model *m, const dt_needle_sample *s, int q, int *out) {
    dt_error err;
    const int V = m->cfg.vocab_size, pe = s->queries[q].prompt_end_offset, len = s->queries[q].answer_length;
    dt_kvcache *kc = dt_kvcache_create(m, pe + len, &err);
    assert_non_null(kc);
    float *logits = malloc((size_t)V * sizeof(float));
    assert_non_null(logits);
    for (int t = 0; t < pe; t++) assert_int_equal(dt_decode_step(m, kc, (unsigned char)s->text[t], t, logits, &err), 0);
    for (int k = 0; k < len; k++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        out[k] = best;
        if (k + 1 < len) assert_int_equal(dt_decode_step(m, kc, best, pe + k, logits, &err), 0);
    }
    free(logits);
    dt_kvcache_free(kc);
}

static void test_eval_matches_greedy(void **state) {
    (void)state;
    dt_needle_corpus c;
    lines_corpus(&c);
    for (int arch = 0; arch < 2; arch++) {
        dt_config cfg;
        dt_model m;
        dt_error err;
        assert_int_equal(dt_config_preset(&cfg, "tiny", arch ? DT_ARCH_DIFF : DT_ARCH_LLAMA, &err), 0);
        assert_int_equal(dt_model_create(&m, &cfg, &err), 0);
        dt_model_init_random(&m, 77);
        dt_needle_testset ts;
        make_testset(&ts, &c, 3, 80, 2, 2);
        dt_needle_results r;
        if (dt_needle_eval(&m, NULL, &ts, &r, NULL, NULL, &err) != 0) fail_msg("%s", err.msg);
        assert_int_equal(r.n_items, 6);
        assert_int_equal(r.total, 6);
        for (int i = 0; i < r.n_items; i++) {
            const dt_needle_item *it = &r.items[i];
            int want[DT_NEEDLE_VALUE_CAP];
            brute_force(&m, &ts.samples[it->sample], it->query, want);
            assert_int_equal(it->n_predicted, 5);
            assert_memory_equal(it->predicted, want, 5 * sizeof(int));
        }
        dt_needle_results_free(&r);
        dt_needle_testset_free(&ts);
        dt_model_free(&m);
    }
    dt_needle_corpus_free(&c);
}

/* A model whose every prediction is '7': embeddings carry a constant channel, the layers add
 * nothing (zero o_proj/down_proj), the final norm keeps only that channel, and row '7' of the
 * output matrix is twice the others. */
static void rig_sevens(dt_model *m) {
    const dt_config *cfg = &m->cfg;
    const int C = cfg->hidden_size, V = cfg->vocab_size;
    memset(m->params, 0, m->n_params * sizeof(float));
    for (int v = 0; v < V; v++) {
        m->w.embed_tokens[(size_t)v * C] = v == '7' ? 2.0f : 1.0f;
        m->w.lm_head[(size_t)v * C] = v == '7' ? 2.0f : 1.0f;
    }
    m->w.norm[0] = 1.0f;
}

static void set_value(dt_needle_sample *s, int needle, const char *value) {
    dt_needle_needle *nd = &s->needles[needle];
    memcpy(s->text + nd->value_offset, value, 5);
    snprintf(nd->value, sizeof nd->value, "%s", value);
    for (int r = 0; r < s->n_queries; r++)
        if (s->queries[r].needle == needle) memcpy(s->text + s->queries[r].prompt_end_offset, value, 5);
}

static void test_eval_counts(void **state) {
    (void)state;
    dt_needle_corpus c;
    lines_corpus(&c);
    dt_config cfg;
    dt_model m;
    dt_error err;
    assert_int_equal(dt_config_preset(&cfg, "tiny", DT_ARCH_LLAMA, &err), 0);
    assert_int_equal(dt_model_create(&m, &cfg, &err), 0);
    rig_sevens(&m);
    dt_needle_testset ts;
    make_testset(&ts, &c, 5, 80, 2, 2); /* depths 0, .25, .5, .75, 1 */
    /* sample 0: both answers 77777; sample 1: the first; sample 2: the second; others: none */
    set_value(&ts.samples[0], 0, "77777");
    set_value(&ts.samples[0], 1, "77777"); /* distinctness is the generator's rule, not the scorer's */
    set_value(&ts.samples[1], ts.samples[1].queries[0].needle, "77777");
    set_value(&ts.samples[2], ts.samples[2].queries[1].needle, "77777");
    set_value(&ts.samples[3], ts.samples[3].queries[0].needle, "77778");
    dt_needle_results r;
    if (dt_needle_eval(&m, NULL, &ts, &r, NULL, NULL, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(r.total, 10);
    assert_int_equal(r.correct, 4);
    assert_int_equal(r.n_cells, 5);
    const int want_correct[5] = {2, 1, 1, 0, 0}, want_first[5] = {1, 1, 0, 0, 0};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(r.cells[i].context_length, 80);
        assert_true(r.cells[i].depth == 0.25 * i); /* sorted by depth */
        assert_int_equal(r.cells[i].samples, 1);
        assert_int_equal(r.cells[i].n, 2);
        assert_int_equal(r.cells[i].correct, want_correct[i]);
        assert_int_equal(r.cells[i].first_correct, want_first[i]);
    }
    for (int k = 0; k < 5; k++) assert_int_equal(r.items[6].predicted[k], '7');
    assert_false(r.items[6].correct); /* 77778 */
    dt_needle_results_free(&r);

    /* a sample longer than max_position_embeddings is refused, naming the file and the sample */
    m.cfg.max_position_embeddings = ts.samples[3].text_length - 1;
    expect_error(dt_needle_eval(&m, NULL, &ts, &r, NULL, NULL, &err), &err, "memory.jsonl: sample");
    assert_non_null(strstr(err.msg, "max_position_embeddings"));
    assert_null(r.cells);
    dt_needle_testset_free(&ts);
    dt_model_free(&m);
    dt_needle_corpus_free(&c);
}

/* English-like filler: words of a small list in sentences and lines, from a fixed generator. */
static void words_corpus(dt_needle_corpus *c, const char *file) {
    static const char *const words[] = {"the", "river", "runs", "under", "an", "old", "stone", "bridge", "and",
                                        "people", "walk", "there", "every", "morning", "with", "their", "dogs"};
    char *buf = malloc(20000);
    assert_non_null(buf);
    size_t n = 0;
    uint64_t r = 7;
    while (n < 19900) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        const char *w = words[(r >> 33) % 17];
        n += (size_t)sprintf(buf + n, "%s%s", w, (r >> 20) % 11 == 0 ? ".\n" : (r >> 20) % 7 == 0 ? ". " : " ");
    }
    tu_write_file(file, buf, n);
    dt_error err;
    assert_int_equal(dt_needle_corpus_from_bytes(c, buf, n, "words", &err), 0);
    free(buf);
}

/* Contexts sized for a model. Bytes: a sample is its context plus its questions, so the fit is exact.
 * A trained BPE: the set written at the fitted contexts passes dt_needle_eval on a model of exactly
 * that many positions, where the default contexts are refused, and one byte more would not fit. */
static void test_fit_contexts(void **state) {
    (void)state;
    dt_needle_corpus c;
    char corpus_path[4096], tok_dir[4096], set_dir[4096];
    tu_path(corpus_path, sizeof corpus_path, "fit_words.txt");
    tu_path(tok_dir, sizeof tok_dir, "fit_tok");
    tu_path(set_dir, sizeof set_dir, "fit_set");
    words_corpus(&c, corpus_path);
    dt_error err;
    dt_needle_params p;
    dt_needle_params_default(&p);
    p.n_train = 0;
    p.n_test = 20;
    const int shortest = p.needles * DT_NEEDLE_UNIT_MAX;
    int questions, most[2], t;
    assert_int_equal(dt_needle_most_tokens(&p, &c, NULL, shortest, &t, &err), 0);
    questions = t - shortest;
    assert_true(questions >= 2 * 54 && questions <= 2 * 62);
    assert_int_equal(dt_needle_fit_contexts(&p, &c, NULL, 800, most, &err), 2);
    assert_int_equal(p.contexts[0], 400 - questions);
    assert_int_equal(p.contexts[1], 800 - questions);
    assert_int_equal(most[0], 400);
    assert_int_equal(most[1], 800);
    /* half of 500 cannot hold 6 needles: one context */
    assert_int_equal(dt_needle_fit_contexts(&p, &c, NULL, 500, most, &err), 1);
    assert_int_equal(p.contexts[0], 500 - questions);
    /* nothing fits: 0, p as it was */
    const dt_needle_params before = p;
    assert_int_equal(dt_needle_fit_contexts(&p, &c, NULL, shortest + questions - 1, most, &err), 0);
    assert_memory_equal(&p, &before, sizeof p);
    expect_error(dt_needle_fit_contexts(&p, &c, NULL, 0, most, &err), &err, "max_tokens");

    dt_tok_train_options o;
    dt_tok_train_defaults(&o);
    const char *files[1] = {corpus_path};
    o.files = files;
    o.n_files = 1;
    o.vocab_size = 300;
    o.quiet = 1;
    if (dt_tok_train(&o, tok_dir, &err) != 0) fail_msg("%s", err.msg);
    dt_config cfg;
    dt_model m;
    assert_int_equal(dt_config_preset(&cfg, "tiny", DT_ARCH_DIFF, &err), 0);
    cfg.vocab_size = 300;
    assert_int_equal(dt_model_create(&m, &cfg, &err), 0);
    if (dt_model_set_tokenizer(&m, tok_dir, &err) != 0) fail_msg("%s", err.msg);
    const dt_tok *tok = dt_model_tok(&m);
    const int T = m.cfg.max_position_embeddings;
    dt_needle_testset ts;
    dt_needle_results r;
    dt_needle_params_default(&p);
    p.needles = 3;
    p.n_train = 0;
    p.n_test = 20;
    assert_int_equal(dt_needle_write_dataset(&p, &c, corpus_path, set_dir, &err), 0);
    assert_int_equal(dt_needle_load_testset(&ts, set_dir, &err), 0);
    expect_error(dt_needle_eval(&m, tok, &ts, &r, NULL, NULL, &err), &err, "max_position_embeddings");
    dt_needle_testset_free(&ts);

    const int n = dt_needle_fit_contexts(&p, &c, tok, T, most, &err);
    if (n < 0) fail_msg("%s", err.msg);
    assert_true(n >= 1);
    assert_true(most[n - 1] <= T && most[n - 1] > T - 16);
    assert_true(p.contexts[n - 1] > T - questions); /* tokens were counted, not bytes */
    assert_int_equal(dt_needle_most_tokens(&p, &c, tok, p.contexts[n - 1] + 1, &t, &err), 0);
    assert_true(t > T);
    /* needle.json records the model it was sized for: its tokenizer, as the model's vocabulary is told apart */
    dt_needle_model sized, back;
    assert_int_equal(dt_needle_model_of(&m, "fit_model", &sized, &err), 0);
    assert_string_equal(sized.path, "fit_model");
    assert_int_equal(sized.max_position_embeddings, T);
    char fp[17];
    assert_int_equal(dt_vocab_fingerprint(&m.vocab, fp, &err), 0);
    assert_string_equal(sized.tokenizer, fp);
    assert_int_equal(strlen(fp), 16);
    assert_int_equal(dt_needle_write_dataset_for(&p, &c, corpus_path, &sized, set_dir, &err), 0);
    char jsonl[4200];
    snprintf(jsonl, sizeof jsonl, "%s/test.jsonl", set_dir);
    const char *const where[2] = {set_dir, jsonl}; /* the set's directory, or its test.jsonl */
    for (int i = 0; i < 2; i++) {
        if (dt_needle_sized_for(where[i], &back, &err) != 1) fail_msg("%s: %s", where[i], err.msg);
        assert_string_equal(back.path, "fit_model");
        assert_int_equal(back.max_position_embeddings, T);
        assert_string_equal(back.tokenizer, fp);
    }
    dt_model bytes_model;
    assert_int_equal(dt_config_preset(&cfg, "tiny", DT_ARCH_DIFF, &err), 0);
    assert_int_equal(dt_model_create(&bytes_model, &cfg, &err), 0);
    assert_int_equal(dt_needle_model_of(&bytes_model, "bytes_model", &sized, &err), 0);
    assert_string_equal(sized.tokenizer, "");
    dt_model_free(&bytes_model);
    assert_int_equal(dt_needle_load_testset(&ts, set_dir, &err), 0);
    if (dt_needle_eval(&m, tok, &ts, &r, NULL, NULL, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(r.total, 40);
    int longest = 0;
    for (int i = 0; i < ts.n; i++) {
        int32_t *ids = NULL;
        size_t k = 0;
        const dt_needle_sample *sm = &ts.samples[i];
        assert_int_equal(dt_tok_encode(tok, sm->text, (size_t)sm->text_length, 0, &ids, &k, &err), 0);
        free(ids);
        if ((int)k > longest) longest = (int)k;
    }
    assert_int_equal(longest, most[n - 1]);
    dt_needle_results_free(&r);
    dt_needle_testset_free(&ts);
    dt_model_free(&m);
    dt_needle_corpus_free(&c);
}

/* A set sized for no model, or from before needle.json recorded one, records none; a test.jsonl with no
 * needle.json beside it neither; a needle.json whose model is not what the writer writes is refused. */
static void test_sized_for(void **state) {
    (void)state;
    char d[1200], path[1300];
    dt_needle_params p;
    write_set("sized_none", 3, &p, d, sizeof d);
    dt_needle_model got;
    dt_error err;
    assert_int_equal(dt_needle_sized_for(d, &got, &err), 0);
    snprintf(path, sizeof path, "%s/needle.json", d);
    size_t n;
    char *json = tu_read_file(path, &n);
    assert_non_null(strstr(json, "\"model\":\tnull"));
    const char *const old = "{\n\t\"generator\":\t\"difftrans needle\",\n";
    assert_int_equal(strncmp(json, old, strlen(old)), 0);
    free(json);
    tu_write_file(path, old, strlen(old) - 2); /* no model, and not even JSON */
    expect_error(dt_needle_sized_for(d, &got, &err), &err, "needle.json");
    const char *bad = "{\"model\": {\"path\": \"m\", \"max_position_embeddings\": 0, "
                      "\"tokenizer_fingerprint\": null}}";
    tu_write_file(path, bad, strlen(bad));
    expect_error(dt_needle_sized_for(d, &got, &err), &err, "needle.json: model: not a path, max_position_embeddings");
    const char *before = "{\"generator\": \"difftrans needle\", \"version\": 1}";
    tu_write_file(path, before, strlen(before));
    assert_int_equal(dt_needle_sized_for(d, &got, &err), 0);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof path, "%s/test.jsonl", d);
    assert_int_equal(dt_needle_sized_for(path, &got, &err), 0);
}

int main(void) {
    /* Decoding tiny models token by token: waking a second thread for every small product costs
     * far more than it saves (seconds instead of a fraction of one on a busy machine). */
    omp_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_generate_refusals),
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_hand_built),
        cmocka_unit_test(test_many_needles),
        cmocka_unit_test(test_sentence_boundaries),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_dataset_files),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_eval_matches_greedy),
        cmocka_unit_test(test_eval_counts),
        cmocka_unit_test(test_fit_contexts),
        cmocka_unit_test(test_sized_for),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
