/* plots.h — the plots of a comparison report (internal): data files, a gnuplot script and, when
 * gnuplot is on PATH, the PNGs it draws. The only part of the report that runs another program. */
#ifndef DT_PLOTS_H
#define DT_PLOTS_H
#include <stddef.h>

#include "analysis/report.h"

/* Writes out_dir/plots/: NAME.dat, plots.gp and NAME.png for every name of pl_names.
 * Returns 1 when the PNGs were made, 0 when not (note says why: no gnuplot, or it failed; the
 * report mentions it), -1 on a write error (err). */
int pl_write(const rp_report *r, const char *out_dir, char *note, size_t note_n, dt_error *err);
/* The PNG names (without ".png") pl_write makes for this report, in order; returns how many. */
int pl_names(const rp_report *r, const char **names, int cap);
/* gnuplot.c: runs `gnuplot plots.gp` in dir (which writes NAME.png.tmp for each of names) and renames
 * the PNGs into place: 1 when they were made, 0 when not (note says why: no gnuplot, or it failed),
 * -1 on an error (err). */
int pl_run_gnuplot(const char *dir, const char *const *names, int n, char *note, size_t note_n, dt_error *err);
#endif
