/* scaling.c — power-law fits of loss against model size (difftrans_analysis.h). */
#include "difftrans_analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

dt_scaling_fit dt_scaling_fit_power_law(const double *params, const double *loss, int n) {
    dt_scaling_fit f = {.n = n, .a = NAN, .b = NAN};
    if (n < 2) return f;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        if (!(params[i] > 0) || !(loss[i] > 0)) return f;
        double x = log(params[i]), y = log(loss[i]);
        sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    double den = n * sxx - sx * sx;
    if (fabs(den) < 1e-12 * (1 + sxx)) return f; /* all runs the same size */
    f.b = (n * sxy - sx * sy) / den;
    f.a = (sy - f.b * sx) / n;
    return f;
}

double dt_scaling_params_for_loss(const dt_scaling_fit *fit, double loss) {
    if (isnan(fit->a) || isnan(fit->b) || fit->b >= 0 || !(loss > 0)) return NAN;
    return exp((log(loss) - fit->a) / fit->b);
}

dt_scaling_comparison dt_scaling_compare(const double *params, const double *loss, const int *is_diff, int n) {
    dt_scaling_comparison c = {.base_params = 0, .base_loss = NAN, .diff_params = NAN, .fraction = NAN};
    double *px = malloc((size_t)(n > 0 ? n : 1) * sizeof *px), *ly = malloc((size_t)(n > 0 ? n : 1) * sizeof *ly);
    for (int k = 0; k < 2; k++) { /* k = 1: DIFF (DT_ARCH_DIFF), 0: the baseline */
        int m = 0;
        for (int i = 0; i < n && px && ly; i++)
            if ((is_diff[i] != 0) == k) px[m] = params[i], ly[m] = loss[i], m++;
        c.fit[k] = px && ly ? dt_scaling_fit_power_law(px, ly, m) : (dt_scaling_fit){.n = 0, .a = NAN, .b = NAN};
    }
    free(px);
    free(ly);
    /* several runs (seeds) at the largest size: their mean, so that the order the runs are given in
     * does not pick one of them */
    double sum = 0;
    for (int i = 0; i < n; i++)
        if (!is_diff[i] && params[i] > c.base_params) c.base_params = params[i];
    for (int i = 0; i < n; i++)
        if (!is_diff[i] && params[i] == c.base_params) sum += loss[i], c.base_runs++;
    if (c.base_runs > 0) c.base_loss = sum / c.base_runs;
    c.diff_params = dt_scaling_params_for_loss(&c.fit[1], c.base_loss);
    c.fraction = c.base_params > 0 ? c.diff_params / c.base_params : NAN;
    return c;
}

/* ---------------------------------------------------------------- the study's intervals
 *
 * Every estimate is computed once on all runs (the value) and again on resamples of the seeds:
 * at every size, n_seeds draws with replacement from the seeds where both kinds finished, the
 * same draws for both kinds (a seed fixes the data order of both runs, so they stay paired).
 * The interval is the 2.5% and 97.5% percentile of the resampled values that are defined. */

/* splitmix64: the resampling stream (deterministic from the caller's seed) */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of v[0, n) (sorted in place), linear between order statistics. */
static double quantile_sorted(double *v, int n, double q) {
    if (n == 0) return NAN;
    double pos = q * (n - 1);
    int i = (int)pos;
    if (i >= n - 1) return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

static dt_estimate estimate_of(double value, double *draws, int n) {
    dt_estimate e = {.value = value, .lo = NAN, .hi = NAN, .n = 0};
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(draws[i])) draws[m++] = draws[i];
    qsort(draws, (size_t)m, sizeof *draws, cmp_double);
    e.n = m;
    e.lo = quantile_sorted(draws, m, 0.025);
    e.hi = quantile_sorted(draws, m, 0.975);
    return e;
}

/* The derived quantities of one pair of fits (kind 0 DIFF, kind 1 the baseline). */
typedef struct {
    dt_scaling_fit fit[2];
    double fraction, crossing;
} study_point;

/* pick[i][s]: the seed used as draw s at size i (the identity for the estimate on all runs). The
 * fraction compares the two fitted curves, the baseline's at target_params with DIFF's: a seed effect
 * that moves both kinds alike moves both fits alike and cancels, where the baseline's raw mean at
 * one size would carry its residual from the fit into the fraction, magnified 1/|b| times. */
static study_point fit_pick(const dt_scaling_runs *r, int pick[][DT_SCALING_MAX_SEEDS], const int *n_pick,
                            double target_params) {
    study_point p;
    double x[DT_SCALING_MAX_SIZES * DT_SCALING_MAX_SEEDS], y[DT_SCALING_MAX_SIZES * DT_SCALING_MAX_SEEDS];
    for (int k = 0; k < 2; k++) {
        int m = 0;
        for (int i = 0; i < r->n_sizes; i++)
            for (int s = 0; s < n_pick[i]; s++) {
                double l = r->loss[k][i][pick[i][s]];
                if (isfinite(l)) x[m] = r->params[k][i], y[m] = l, m++;
            }
        p.fit[k] = dt_scaling_fit_power_law(x, y, m);
    }
    double target_loss = exp(p.fit[1].a + p.fit[1].b * log(target_params));
    p.fraction = dt_scaling_params_for_loss(&p.fit[0], target_loss) / target_params;
    double db = p.fit[0].b - p.fit[1].b;
    p.crossing = isfinite(db) && fabs(db) > 1e-12 ? exp((p.fit[1].a - p.fit[0].a) / db) : NAN;
    return p;
}

int dt_scaling_study_fit(const dt_scaling_runs *r, int resamples, uint64_t seed, dt_scaling_study *out,
                         dt_error *err) {
    memset(out, 0, sizeof *out);
    if (r->n_sizes < 2 || r->n_sizes > DT_SCALING_MAX_SIZES)
        return dt_fail(err, "runs: n_sizes %d must be in 2..%d", r->n_sizes, DT_SCALING_MAX_SIZES);
    if (r->n_seeds < 1 || r->n_seeds > DT_SCALING_MAX_SEEDS)
        return dt_fail(err, "runs: n_seeds %d must be in 1..%d", r->n_seeds, DT_SCALING_MAX_SEEDS);
    if (resamples < 0 || resamples > 1000000) return dt_fail(err, "resamples %d must be in 0..1000000", resamples);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < r->n_sizes; i++)
            if (!(r->params[k][i] > 0))
                return dt_fail(err, "runs: params[%d][%d] is %g, not a positive count", k, i, r->params[k][i]);
    out->n_sizes = r->n_sizes;
    out->resamples = resamples;
    out->seed = seed;
    /* the paired seeds of each size, and the per-size differences */
    int pick[DT_SCALING_MAX_SIZES][DT_SCALING_MAX_SEEDS], n_pick[DT_SCALING_MAX_SIZES];
    double target = 0, lo = INFINITY, hi = 0;
    for (int i = 0; i < r->n_sizes; i++) {
        n_pick[i] = 0;
        for (int s = 0; s < r->n_seeds; s++)
            if (isfinite(r->loss[0][i][s]) && isfinite(r->loss[1][i][s])) pick[i][n_pick[i]++] = s;
        out->diff[i] = dt_stats_paired_diff_ci(r->loss[0][i], r->loss[1][i], r->n_seeds);
        if (n_pick[i] > 0 && r->params[1][i] > target) target = r->params[1][i];
        for (int k = 0; k < 2; k++) {
            if (r->params[k][i] < lo) lo = r->params[k][i];
            if (r->params[k][i] > hi) hi = r->params[k][i];
        }
    }
    out->fraction_at = target > 0 ? target : NAN;
    study_point all = fit_pick(r, pick, n_pick, target);
    out->fit[0] = all.fit[0], out->fit[1] = all.fit[1];
    out->crossing_in_range = isfinite(all.crossing) && all.crossing >= lo && all.crossing <= hi;

    double *draws = malloc((size_t)(resamples > 0 ? resamples : 1) * 6 * sizeof *draws);
    if (!draws) return dt_fail_oom(err, "out of memory for %d resamples", resamples);
    double *da = draws, *db = da + resamples, *ta = db + resamples, *tb = ta + resamples, *fr = tb + resamples,
           *cr = fr + resamples;
    uint64_t rng = seed;
    int crossed = 0;
    for (int b = 0; b < resamples; b++) {
        int draw[DT_SCALING_MAX_SIZES][DT_SCALING_MAX_SEEDS];
        for (int i = 0; i < r->n_sizes; i++)
            for (int s = 0; s < n_pick[i]; s++) draw[i][s] = pick[i][next_u64(&rng) % (uint64_t)n_pick[i]];
        study_point p = fit_pick(r, draw, n_pick, target);
        da[b] = p.fit[0].a, db[b] = p.fit[0].b, ta[b] = p.fit[1].a, tb[b] = p.fit[1].b;
        fr[b] = p.fraction;
        cr[b] = isfinite(p.crossing) && p.crossing > 0 ? log(p.crossing) : NAN;
        if (isfinite(p.crossing) && p.crossing >= lo && p.crossing <= hi) crossed++;
    }
    out->a[0] = estimate_of(all.fit[0].a, da, resamples);
    out->b[0] = estimate_of(all.fit[0].b, db, resamples);
    out->a[1] = estimate_of(all.fit[1].a, ta, resamples);
    out->b[1] = estimate_of(all.fit[1].b, tb, resamples);
    out->fraction = estimate_of(all.fraction, fr, resamples);
    dt_estimate lc = estimate_of(isfinite(all.crossing) && all.crossing > 0 ? log(all.crossing) : NAN, cr, resamples);
    out->crossing = (dt_estimate){.value = exp(lc.value), .lo = exp(lc.lo), .hi = exp(lc.hi), .n = lc.n};
    out->crossing_share = resamples > 0 ? (double)crossed / resamples : NAN;
    free(draws);
    return 0;
}
