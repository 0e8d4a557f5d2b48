/* tasks_eval.c — scoring the synthetic tasks (difftrans_analysis.h), their evaluation grids, and the training mix. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "difftrans_analysis.h"

/* ---------------------------------------------------------------- scoring */

#define SCORE_BATCH 8

static int answer_of(const float *logits, int V, const dt_task_query *q) {
    if (q->n_candidates > 0) {
        int best = q->candidates[0];
        for (int i = 1; i < q->n_candidates; i++)
            if (logits[q->candidates[i]] > logits[best]) best = q->candidates[i];
        return best;
    }
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    return best;
}

dt_task_score dt_task_score_logits(const dt_task_example *ex, const float *logits, int V) {
    dt_task_score s = {0, ex->n_queries};
    for (int j = 0; j < ex->n_queries; j++)
        s.correct += answer_of(logits + (size_t)ex->q[j].pos * V, V, &ex->q[j]) == ex->q[j].answer;
    return s;
}

int dt_task_score_examples(const dt_model *m, const dt_task_example *ex, int n, dt_task_score *scores, dt_error *err) {
    const int V = m->cfg.vocab_size;
    int max_len = 0;
    for (int i = 0; i < n; i++) {
        if (ex[i].length > m->cfg.max_position_embeddings)
            return dt_fail(err, "%s example %d: %d tokens, more than the model's context %d", dt_task_name(ex[i].kind), i,
                           ex[i].length, m->cfg.max_position_embeddings);
        if (ex[i].length > max_len) max_len = ex[i].length;
        for (int t = 0; t < ex[i].length; t++)
            if (ex[i].tokens[t] < 0 || ex[i].tokens[t] >= V)
                return dt_fail(err, "%s example %d: token %d outside the vocabulary of %d", dt_task_name(ex[i].kind), i,
                               ex[i].tokens[t], V);
    }
    if (n == 0) return 0;
    dt_runstate *rs = dt_runstate_create(m, SCORE_BATCH, max_len, err);
    int *in = malloc((size_t)SCORE_BATCH * max_len * sizeof *in);
    if (!rs || !in) {
        dt_runstate_free(rs);
        free(in);
        return rs ? dt_fail_oom(err, "out of memory scoring %d examples", n) : -1;
    }
    int rc = 0;
    /* consecutive examples of one length go through one forward */
    for (int i = 0; i < n && rc == 0;) {
        const int T = ex[i].length;
        int b = 0;
        while (i + b < n && b < SCORE_BATCH && ex[i + b].length == T) {
            memcpy(in + (size_t)b * T, ex[i + b].tokens, (size_t)T * sizeof *in);
            b++;
        }
        rc = dt_forward(m, rs, in, NULL, b, T, NULL, err);
        const float *logits = dt_runstate_logits(rs);
        for (int k = 0; k < b && rc == 0; k++) scores[i + k] = dt_task_score_logits(&ex[i + k], logits + (size_t)k * T * V, V);
        i += b;
    }
    dt_runstate_free(rs);
    free(in);
    return rc;
}

/* ---------------------------------------------------------------- evaluation grids */

void dt_task_result_free(dt_task_result *r) {
    free(r->example_accuracy);
    free(r->example_total);
    memset(r, 0, sizeof *r);
}

/* The mean of per-example fractions weights an example of 2 queries as much as one of 8: its
 * difference was not the difference of the accuracies the report prints beside it. */
dt_stats_interval dt_task_paired_diff_ci(const dt_task_result *a, const dt_task_result *b) {
    dt_stats_interval r = {0, NAN, NAN, NAN, NAN};
    const int n = a->n_examples;
    if (n < 1 || n != b->n_examples || a->total < 1 || a->total != b->total || !a->example_accuracy ||
        !b->example_accuracy || !a->example_total || !b->example_total)
        return r;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (a->example_total[i] != b->example_total[i]) return r;
        const double k = a->example_total[i];
        if (k > 0) sum += (a->example_accuracy[i] - b->example_accuracy[i]) * k;
    }
    const double scale = (double)n / a->total;
    r.n = n;
    r.mean = sum / a->total;
    if (n < 2) return r;
    double ss = 0;
    for (int i = 0; i < n; i++) {
        const double k = a->example_total[i];
        const double u = k > 0 ? (a->example_accuracy[i] - b->example_accuracy[i]) * k * scale : 0;
        ss += (u - r.mean) * (u - r.mean);
    }
    r.half = dt_stats_t975(n - 1) * sqrt(ss / (n - 1) / n);
    r.lo = r.mean - r.half;
    r.hi = r.mean + r.half;
    return r;
}

static uint64_t mix64(uint64_t a, uint64_t b) {
    uint64_t s = a ^ (b * 0x9E3779B97F4A7C15ull);
    return dt_rng_next(&s);
}

static const double depths[] = {0, 0.25, 0.5, 0.75, 1};
enum { ICL_SHOTS = 8, ICL_QUERIES = 4, ICL_ORDERS = 6, DEPTH_NEEDLES = 4 };

/* The grid's cells (kind, length, pairs, depth, order), without scores. */
static int grid(dt_task_kind kind, const dt_task_eval_options *o, dt_task_cell *cells) {
    int n = 0, lengths[3] = {o->train_len / 2, o->train_len, 2 * o->train_len}, n_len = 0;
    for (int i = 0; i < 3; i++)
        if (lengths[i] <= o->max_len && lengths[i] <= DT_TASK_MAX_LEN && lengths[i] >= 16) lengths[n_len++] = lengths[i];
    if (kind == DT_TASK_RECALL) {
        const int ks[3] = {2, 4, 8};
        for (int l = 0; l < n_len; l++)
            for (int k = 0; k < 3; k++) {
                int q = ks[k] < 4 ? ks[k] : 4;
                if (3 * (ks[k] + q) + 1 <= lengths[l])
                    cells[n++] = (dt_task_cell){.kind = kind, .length = lengths[l], .pairs = ks[k]};
            }
    } else if (kind == DT_TASK_DEPTH) {
        for (int l = 0; l < n_len; l++)
            for (int d = 0; d < 5 && lengths[l] >= 4 * 3 * DEPTH_NEEDLES + 4; d++)
                cells[n++] = (dt_task_cell){.kind = kind, .length = lengths[l], .pairs = DEPTH_NEEDLES, .depth = depths[d]};
    } else {
        int shots = ICL_SHOTS;
        while (shots > 2 && 4 * (shots + ICL_QUERIES) > o->max_len) shots -= 2;
        for (int r = 0; r < ICL_ORDERS; r++)
            cells[n++] = (dt_task_cell){.kind = kind, .length = 4 * (shots + ICL_QUERIES), .pairs = shots, .order = r};
    }
    return n;
}

static int make_example(const dt_task_cell *c, const dt_task_eval_options *o, int index, dt_task_example *ex, dt_error *err) {
    /* icl: the same prompt (seed) in every order; other tasks: a fresh example per cell */
    uint64_t cell_id = c->kind == DT_TASK_ICL ? 0 : (uint64_t)c->length * 131 + (uint64_t)c->pairs * 7 + (uint64_t)(c->depth * 4);
    uint64_t seed = mix64(mix64(o->seed, (uint64_t)c->kind * 1000003u + cell_id), (uint64_t)index);
    switch (c->kind) {
    case DT_TASK_RECALL: return dt_task_recall(o->symbols, seed, c->length, c->pairs, c->pairs < 4 ? c->pairs : 4, -1, ex, err);
    case DT_TASK_DEPTH:
        return dt_task_depth(o->symbols, seed, c->length, c->depth, DEPTH_NEEDLES, 1, o->filler, o->filler_n, ex, err);
    default: return dt_task_icl(o->symbols, seed, c->pairs, ICL_QUERIES, c->order, ex, err);
    }
}

int dt_task_evaluate(const dt_model *m, dt_task_kind kind, const dt_task_eval_options *o, dt_task_result *r, dt_error *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->order_std = NAN;
    if (o->per_cell < 1) return dt_fail(err, "%s: %d examples per cell", dt_task_name(kind), o->per_cell);
    r->n_cells = grid(kind, o, r->cells);
    if (r->n_cells == 0)
        return dt_fail(err, "%s: no evaluation cell fits a training length of %d and a context of %d", dt_task_name(kind),
                       o->train_len, o->max_len);
    const int n = r->n_cells * o->per_cell;
    dt_task_example *ex = malloc((size_t)n * sizeof *ex);
    dt_task_score *sc = malloc((size_t)n * sizeof *sc);
    r->example_accuracy = malloc((size_t)n * sizeof *r->example_accuracy);
    r->example_total = malloc((size_t)n * sizeof *r->example_total);
    int rc = ex && sc && r->example_accuracy && r->example_total
                 ? 0
                 : dt_fail_oom(err, "%s: out of memory for %d examples", dt_task_name(kind), n);
    for (int c = 0; c < r->n_cells && rc == 0; c++)
        for (int i = 0; i < o->per_cell && rc == 0; i++) rc = make_example(&r->cells[c], o, i, &ex[c * o->per_cell + i], err);
    if (rc == 0) rc = dt_task_score_examples(m, ex, n, sc, err);
    if (rc == 0) {
        r->n_examples = n;
        double sum = 0, sq = 0;
        for (int c = 0; c < r->n_cells; c++) {
            dt_task_cell *cell = &r->cells[c];
            cell->examples = o->per_cell;
            for (int i = 0; i < o->per_cell; i++) {
                const dt_task_score *s = &sc[c * o->per_cell + i];
                cell->correct += s->correct;
                cell->total += s->total;
                r->example_accuracy[c * o->per_cell + i] = s->total ? (double)s->correct / s->total : NAN;
                r->example_total[c * o->per_cell + i] = s->total;
            }
            cell->accuracy = cell->total ? (double)cell->correct / cell->total : NAN;
            r->correct += cell->correct;
            r->total += cell->total;
            sum += cell->accuracy;
            sq += cell->accuracy * cell->accuracy;
        }
        r->accuracy = r->total ? (double)r->correct / r->total : NAN;
        if (kind == DT_TASK_ICL) {
            double mean = sum / r->n_cells, var = sq / r->n_cells - mean * mean;
            r->order_std = sqrt(var > 0 ? var : 0);
        }
    }
    free(ex);
    free(sc);
    if (rc != 0) dt_task_result_free(r);
    return rc;
}

/* ---------------------------------------------------------------- the training mix */

/* The rows' turn of tasks: recall and depth six times for each icl row (icl is learned in a few
 * hundred steps; the retrieval tasks need every row they get: at half the rows each both are
 * learned within 2000 steps, at a third neither). */
static const int task_weight[DT_N_TASKS] = {6, 6, 1};
#define MAX_TURN 13 /* the weights' sum */

static int enabled(int mask, int *kinds) {
    int n = 0;
    for (int round = 0; round < MAX_TURN; round++)
        for (int k = 0; k < DT_N_TASKS; k++)
            if ((mask & (1 << k)) && task_weight[k] > round) kinds[n++] = k;
    return n;
}

void dt_task_mix_batch(void *ctx, int step, int total_steps, int *tokens, int *targets, int row0, int rows, int B, int T,
                  uint64_t *rng) {
    const dt_task_mix *mix = ctx;
    int kinds[MAX_TURN], nk = enabled(mix->tasks, kinds);
    if (nk == 0 || !(dt_rng_uniform(rng) < mix->ratio) || T + 1 > DT_TASK_MAX_LEN) return;
    /* the distractor curriculum: none for `hold` steps, then a rising share of a full row over `ramp` */
    const int hold = mix->curriculum_start > 0 ? mix->curriculum_start : mix->curriculum_start < 0 ? 0 : total_steps / 5;
    const int ramp_default = 2 * total_steps / 5 > 0 ? 2 * total_steps / 5 : 1;
    const int ramp = mix->curriculum_steps > 0 ? mix->curriculum_steps : ramp_default;
    const double progress = step < hold ? 0.0 : step - hold >= ramp ? 1.0 : (double)(step - hold) / ramp;
    const int max_pairs = mix->max_pairs > 0 ? mix->max_pairs : DT_TASK_MIX_PAIRS;
    const int kmax = max_pairs < (T - 2) / 6 ? max_pairs : (T - 2) / 6; /* K pairs and K queries fit */
    dt_task_example *ex = malloc(sizeof *ex);
    if (!ex) return; /* the text batch stays: a missing task batch only weakens the mix */
    dt_error err;
    for (int b = 0; b < B; b++) {
        const dt_task_kind kind = (dt_task_kind)kinds[(b + step) % nk];
        const uint64_t seed = dt_rng_next(rng);
        int rc = -1;
        if (kind == DT_TASK_RECALL && kmax >= 1) {
            /* K pairs, distractors as the curriculum allows, then queries to the end of the row (every
             * pair once, then repeats): an answer every 3 tokens */
            int k = 1 + (int)(dt_rng_next(rng) % (uint64_t)kmax), room = (T - 6 * k) / 3;
            int most = (int)(progress * room), d = most > 0 ? (int)(dt_rng_next(rng) % (uint64_t)(most + 1)) : 0;
            int q = (T - 3 * (k + d)) / 3;
            if (q > DT_TASK_MAX_QUERIES) q = DT_TASK_MAX_QUERIES;
            rc = dt_task_recall(mix->symbols, seed, 0, k, q, d, ex, &err);
        } else if (kind == DT_TASK_DEPTH) {
            /* DEPTH_NEEDLES needles in text, then queries over 3/8 of the row (each needle, then
             * repeats); the text grows with the curriculum from what the needles need to the row */
            int q = 3 * (T + 1) / 32;
            if (q < DEPTH_NEEDLES) q = DEPTH_NEEDLES;
            if (q > DT_TASK_MAX_QUERIES) q = DT_TASK_MAX_QUERIES;
            const int least = 4 * 3 * DEPTH_NEEDLES, most = T + 1 - 4 * q;
            const int context = most > least ? least + (int)(progress * (most - least)) : least;
            rc = dt_task_depth(mix->symbols, seed, context + 4 * q, dt_rng_uniform(rng), DEPTH_NEEDLES, q, mix->filler,
                          mix->filler_n, ex, &err);
        } else if (kind == DT_TASK_ICL) {
            int shots = 8;
            while (shots > 2 && 4 * (shots + 1) > T + 1) shots -= 2;
            int q = (T + 1) / 4 - shots;
            if (q > 26 - shots) q = 26 - shots;
            if (q >= 1) rc = dt_task_icl(mix->symbols, seed, shots, q, 0, ex, &err);
        }
        if (rc != 0 || b < row0 || b >= row0 + rows) continue; /* keeps its text, or is another rank's */
        /* right-align the example in the row of T + 1 tokens; spaces before it carry no loss */
        const int pad = T + 1 - ex->length, space = mix->symbols ? mix->symbols->id[' '] : ' ';
        int *in = tokens + (size_t)(b - row0) * T, *tg = targets + (size_t)(b - row0) * T;
        for (int t = 0; t < T; t++) {
            in[t] = t < pad ? space : ex->tokens[t - pad];
            tg[t] = -1;
        }
        for (int j = 0; j < ex->n_queries; j++) tg[pad + ex->q[j].pos] = ex->q[j].answer;
    }
    free(ex);
}
