/* clock.c — the one clock of the library: timings, progress reports, timeouts. */
#include <time.h>

#include "base/base.h"

double dt_seconds(void) { return monotonic_seconds(); }

double monotonic_seconds(void) {
    struct timespec ts;
    /* CLOCK_MONOTONIC cannot fail with a valid clock id and address; never steps with the wall clock */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
