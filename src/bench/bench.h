/* bench.h — internal pieces of the throughput measurements (the API is public:
 * difftrans_bench.h). */
#ifndef DT_BENCH_H
#define DT_BENCH_H

#include "difftrans_bench.h"

/* CLOCK_MONOTONIC in seconds. */
double bench_now(void);
#endif
