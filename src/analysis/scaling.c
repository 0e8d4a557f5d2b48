/* scaling.c — power-law fits of loss against model size (difftrans_analysis.h). */
#include "difftrans_analysis.h"

#include <math.h>
#include <stdlib.h>

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
    for (int i = 0; i < n; i++)
        if (!is_diff[i] && params[i] > c.base_params) c.base_params = params[i], c.base_loss = loss[i];
    c.diff_params = dt_scaling_params_for_loss(&c.fit[1], c.base_loss);
    c.fraction = c.base_params > 0 ? c.diff_params / c.base_params : NAN;
    return c;
}
