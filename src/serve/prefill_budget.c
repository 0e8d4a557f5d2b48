/* serve/prefill_budget.c — the serving engine's prefill budget (prefill_budget.h says why it is
 * steered on step times). */
#include "prefill_budget.h"

#include <math.h>
#include <string.h>

void decode_reference_add(decode_reference *r, double seconds, uint64_t step) {
    r->history[r->seen % DECODE_HISTORY] = seconds;
    r->seen++;
    r->at_step = step;
    const int k = r->seen < DECODE_HISTORY ? r->seen : DECODE_HISTORY;
    double sorted[DECODE_HISTORY];
    memcpy(sorted, r->history, (size_t)k * sizeof *sorted);
    for (int i = 1; i < k; i++) /* insertion sort of at most DECODE_HISTORY */
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            const double t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    r->seconds = k % 2 ? sorted[k / 2] : 0.5 * (sorted[k / 2 - 1] + sorted[k / 2]);
}

void prefill_budget_init(prefill_budget *b, int max_rows) {
    b->rows = 1;
    b->max_rows = max_rows;
}

int prefill_budget_rows(const prefill_budget *b) {
    return b->rows >= 1 ? (int)b->rows : 1;
}

void prefill_budget_observe(prefill_budget *b, int prompt_rows, double decode_s, double step_s) {
    if (prompt_rows < 1 || !(decode_s > 0)) return;
    const double allowed = PREFILL_SHARE * decode_s, added = step_s - decode_s;
    if (added > allowed) /* cut to what would have fitted had the cost been proportional to rows */
        b->rows = fmax(1.0, prompt_rows * allowed / added);
    else if (prompt_rows >= prefill_budget_rows(b)) /* it fitted, and the budget was the limit */
        b->rows = fmin(fmax(b->rows + 1, 1.25 * b->rows), b->max_rows);
}
