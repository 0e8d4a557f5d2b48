/* stats.h — means with 95% confidence intervals and the verdict a comparison report may draw from
 * them (internal). Intervals use Student's t with n − 1 degrees of freedom (n ≥ 2); NaN values are
 * skipped. A comparison of two models is paired (the same seeds, or the same examples): the
 * interval is that of the mean of the differences a_i − b_i. */
#ifndef DT_STATS_H
#define DT_STATS_H

typedef struct {
    int n;          /* values used (NaN skipped) */
    double mean;    /* NAN when n = 0 */
    double half;    /* 95% half-width; NAN when n < 2 */
    double lo, hi;  /* mean ∓ half (NAN when half is) */
} st_interval;

/* The 0.975 quantile of Student's t with df degrees of freedom (df ≥ 1). */
double st_t975(int df);
st_interval st_mean_ci(const double *x, int n);
/* Paired: the interval of mean(a_i − b_i) over the i where both are numbers. */
st_interval st_paired_diff_ci(const double *a, const double *b, int n);

typedef enum {
    ST_UNRESOLVED = 0, /* "no difference this run can resolve" */
    ST_A_BETTER = 1,
    ST_B_BETTER = 2,
} st_verdict;

/* From the paired difference a − b: A is better when the whole interval lies on A's side
 * (below 0 when lower is better, above 0 otherwise), B likewise; anything else, including a
 * missing interval, is unresolved. */
st_verdict st_verdict_of(const st_interval *diff, int lower_better);
#endif
