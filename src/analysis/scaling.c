/* scaling.c — power-law fits of loss against model size (scaling.h). */
#include "analysis/scaling.h"

#include <math.h>

sc_fit sc_fit_power_law(const double *params, const double *loss, int n) {
    sc_fit f = {.n = n, .a = NAN, .b = NAN};
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

double sc_params_for_loss(const sc_fit *fit, double loss) {
    if (isnan(fit->a) || isnan(fit->b) || fit->b >= 0 || !(loss > 0)) return NAN;
    return exp((log(loss) - fit->a) / fit->b);
}
