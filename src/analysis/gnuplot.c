/* gnuplot.c — running gnuplot on a plots directory (the reports' one outside program). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/plots.h"
#include "analysis/textbuf.h"

int pl_run_gnuplot(const char *dir, const char *const *names, int n, char *note, size_t note_n, dt_error *err) {
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        snprintf(note, note_n, "gnuplot is not on PATH, so no plots were made (install gnuplot, e.g. the Debian "
                               "package gnuplot-nox, and run `gnuplot plots.gp` in %s)", dir);
        return 0;
    }
    /* single-quote the directory for the shell */
    textbuf c = {0};
    tb_printf(&c, "cd '");
    for (const char *p = dir; *p; p++)
        if (*p == '\'')
            tb_printf(&c, "'\\''");
        else
            tb_printf(&c, "%c", *p);
    tb_printf(&c, "' && gnuplot plots.gp >gnuplot.log 2>&1");
    int st = c.oom ? -1 : system(c.s);
    free(c.s);
    if (st != 0) {
        snprintf(note, note_n, "gnuplot failed (status %d); see %s/gnuplot.log", st, dir);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        char tmp[4400], fin[4400];
        if (dt_pathf(tmp, sizeof tmp, err, "%s/%s.png.tmp", dir, names[i]) ||
            dt_pathf(fin, sizeof fin, err, "%s/%s.png", dir, names[i]))
            return -1;
        if (rename(tmp, fin) != 0) {
            snprintf(note, note_n, "gnuplot did not write %s (%s)", tmp, strerror(errno));
            return 0;
        }
    }
    return 1;
}
