/* study.h — the scaling study's runs (internal): the plan study.c trains and measures, and the
 * report study_report.c writes from the runs' run.json files. */
#ifndef DT_STUDY_H
#define DT_STUDY_H
#include <stddef.h>
#include <stdint.h>

#include "difftrans_analysis.h"

/* One run of the study: a size × variant × seed. */
typedef struct {
    int size, variant, seed_index; /* indices into the options' sizes and variants; seed = seed + seed_index */
    dt_config cfg;
    uint64_t seed;
    int steps;                     /* the size's token budget in steps of batch × seq */
    size_t params, nonembedding;
    double cost;                   /* training FLOPs, for the order of the runs and the progress */
    char dir[4300];                /* out/runs/SIZE-VARIANT-sK */
} study_run;

/* Every run of the study in order (size-major, then variant, then seed). vocab: vocab_size and
 * special ids of the token dataset. *runs is malloc'd. */
int study_plan(const dt_study_options *o, const dt_config *vocab, study_run **runs, int *n_runs, dt_error *err);

/* Rank 0, after its own runs: waits until every run's run.json is there (other ranks write them
 * into the shared directory), checking *stop every second; 0, or -1 when stopped. */
int study_wait_for_runs(const study_run *runs, int n, volatile int *stop, const dt_study_options *o, dt_error *err);
/* Reads every run.json and writes o->out/REPORT.md, report.json and plots/. */
int study_report_write(const dt_study_options *o, const study_run *runs, int n, dt_error *err);
#endif
