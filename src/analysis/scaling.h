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
#endif
