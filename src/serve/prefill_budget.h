/* serve/prefill_budget.h — how many prompt rows a serving step may carry beside the decoding
 * rows, so that a long prompt arriving mid-stream neither stalls the others nor waits for them.
 *
 * A prompt row's cost is not one number: a row deep into a prompt attends over more positions,
 * and the first prompt row beside the decoding ones costs several later ones (the product
 * kernels take rows in groups, and the slot's cached keys and values are read once for a chunk
 * however many rows it has). So the budget is not computed from a cost per row: it is steered on
 * the measured time of each step, grown while steps stay within PREFILL_SHARE of a decode-only
 * step and cut when one does not. The reference, a decode-only step's time, is the median of the
 * latest few of as many decoding rows: a median, so that a stall of the host (another thread
 * taking a core for some milliseconds) does not move it. */
#ifndef DT_SERVE_PREFILL_BUDGET_H
#define DT_SERVE_PREFILL_BUDGET_H
#include <stdint.h>

/* The time prompt rows may add to a step, as a share of a decode-only step: such a step stays
 * within 1.6 decode steps, and under 1.75 while the budget grows (by at most a quarter). */
#define PREFILL_SHARE 0.6
/* Decode-only steps whose median is the reference. */
#define DECODE_HISTORY 5

typedef struct {
    double seconds;              /* the median of the latest DECODE_HISTORY (0: none yet) */
    double history[DECODE_HISTORY]; /* the latest, as a ring */
    int seen;
    uint64_t at_step;            /* the step of the latest */
} decode_reference;

void decode_reference_add(decode_reference *r, double seconds, uint64_t step);

typedef struct {
    double rows;                 /* prompt rows the next step may carry */
    int max_rows;
} prefill_budget;

void prefill_budget_init(prefill_budget *b, int max_rows);
/* The budget for the next step: at least 1, so a prompt always moves on. */
int prefill_budget_rows(const prefill_budget *b);
/* A step ran prompt_rows (≥ 1) prompt rows beside decoding ones whose decode-only step takes
 * decode_s, in step_s. */
void prefill_budget_observe(prefill_budget *b, int prompt_rows, double decode_s, double step_s);

#endif
