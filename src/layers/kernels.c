/* kernels.c — the per-path kernel tables and the choice of the one in use (see kernels.h).
 *
 * The choice is made once (pthread_once) from dt_isa_active(), so that a process never mixes
 * paths; the tables themselves are constant. */
#include "layers/kernels.h"

#include <pthread.h>

#define DT_KERNEL_TABLE(sfx, isa_value)                                                                  \
    {                                                                                                    \
        .isa = isa_value, .exp = flash_attention_exp_##sfx, .rmsnorm_row = rmsnorm_row_##sfx,           \
        .residual_rmsnorm_row = residual_rmsnorm_row_##sfx, .rmsnorm_backward_row = rmsnorm_backward_row_##sfx, \
        .rmsnorm_dw_row = rmsnorm_dw_row_##sfx, .swiglu_forward = swiglu_forward_##sfx,                 \
        .swiglu_backward = swiglu_backward_##sfx, .rope_span = rope_span_##sfx, .adamw = adamw_##sfx, .sumsq = sumsq_##sfx,    \
        .stream_sum = stream_sum_##sfx,                                                                  \
        .linear_rows = linear_rows_##sfx, .linear_rows_most = LINEAR_ROWS_MOST_##sfx, \
        .cache_dots = cache_dots_##sfx, .cache_axpy = cache_axpy_##sfx,                                                           \
        .attention_forward = flash_attention_forward_##sfx,                                              \
        .attention_backward = flash_attention_backward_##sfx,                                            \
    }

static const dt_kernels tables[DT_ISA_COUNT] = {
    [DT_ISA_PORTABLE] = DT_KERNEL_TABLE(portable, DT_ISA_PORTABLE),
    [DT_ISA_AVX2] = DT_KERNEL_TABLE(avx2, DT_ISA_AVX2),
    [DT_ISA_AVX512] = DT_KERNEL_TABLE(avx512, DT_ISA_AVX512),
};

const dt_kernels *kernels_for(dt_isa isa) {
    if ((int)isa < 0 || (int)isa >= DT_ISA_COUNT || !dt_isa_supported(isa)) return NULL;
    return &tables[isa];
}

static const dt_kernels *active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void choose(void) { active = &tables[dt_isa_active()]; }

const dt_kernels *kernels_active(void) {
    pthread_once(&active_once, choose);
    return active;
}
