/* system.c — the public view of the machine (dt_system, dt_system_check in difftrans.h): the
 * CPU's features, the kernel path the process uses (layers/kernels.h) and OpenBLAS's core. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "cpu/cpu.h"
#include "layers/kernels.h"

void dt_system(dt_system_info *out) {
    const dt_cpu_info *c = dt_cpu();
    memset(out, 0, sizeof *out);
    memcpy(out->cpu, c->model, sizeof out->cpu);
    out->cpu[sizeof out->cpu - 1] = '\0';
    out->path = dt_isa_name(kernels_active()->isa);
    out->best = dt_isa_name(dt_isa_best());
    out->avx2 = c->avx2, out->fma = c->fma;
    out->avx512f = c->avx512f, out->avx512bw = c->avx512bw, out->avx512vl = c->avx512vl;
    out->avx512dq = c->avx512dq, out->avx512vnni = c->avx512vnni, out->avx512bf16 = c->avx512bf16;
    const char *core = openblas_get_corename();
    out->blas_core = core ? core : "";
    out->threads = omp_get_max_threads();
}

int dt_system_check(dt_error *err) { return dt_isa_check(err); }
