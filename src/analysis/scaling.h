/* scaling.h — how much model DIFF needs for the baseline's loss (the paper's "~65% of the
 * parameters"): from runs of both kinds at several sizes, a power law loss = exp(a)·N^b per kind
 * (least squares on log loss against log parameters) and the DIFF size whose fitted loss equals
 * the baseline's at its largest run. */
#ifndef DT_SCALING_H
#define DT_SCALING_H
#include <stddef.h>

typedef struct {
    int n;                  /* runs of this kind */
    double a, b;            /* log(loss) = a + b·log(params); NAN when n < 2 or all sizes equal */
} sc_fit;

/* Least-squares fit of log(loss) on log(params) over n points (n >= 2, distinct sizes). */
sc_fit sc_fit_power_law(const double *params, const double *loss, int n);
/* The parameters at which `fit` predicts `loss`; NAN when the fit is missing or flat (b >= 0). */
double sc_params_for_loss(const sc_fit *fit, double loss);

typedef struct {
    sc_fit fit[2];            /* [dt_arch]: fit[DT_ARCH_LLAMA] the baseline's, fit[DT_ARCH_DIFF] DIFF's */
    double base_params;       /* the baseline's largest run */
    double base_loss;         /* its loss (NAN without a baseline run) */
    double diff_params;       /* the DIFF size the DIFF fit gives that loss (NAN when it cannot) */
    double fraction;          /* diff_params / base_params: the paper's ~0.65 */
} sc_comparison;

/* From n runs of either kind (is_diff[i] nonzero for DIFF): the fit per kind and the fraction of
 * the baseline's parameters DIFF needs for the baseline's loss at its largest run. */
sc_comparison sc_compare(const double *params, const double *loss, const int *is_diff, int n);
#endif
