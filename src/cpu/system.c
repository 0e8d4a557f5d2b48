/* system.c — the public view of the machine (dt_system, dt_system_check in difftrans.h): the
 * CPU's features, the kernel path the process uses (dt_isa_active) and OpenBLAS's core. */
#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpu/cpu.h"

/* OpenBLAS's x86-64 cores with AVX-512 kernels (0.3.21 names; later versions add to the list) */
static int blas_core_has_avx512(const char *core) {
    static const char *const wide[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        if (strcasecmp(core, wide[i]) == 0) return 1;
    return 0;
}

void dt_system(dt_system_info *out) {
    const dt_cpu_info *c = dt_cpu();
    memset(out, 0, sizeof *out);
    memcpy(out->cpu, c->model, sizeof out->cpu);
    out->cpu[sizeof out->cpu - 1] = '\0';
    out->path = dt_isa_name(dt_isa_active()); /* the path every kernel table is chosen by */
    out->best = dt_isa_name(dt_isa_best());
    out->avx2 = c->avx2, out->fma = c->fma;
    out->avx512f = c->avx512f, out->avx512bw = c->avx512bw, out->avx512vl = c->avx512vl;
    out->avx512dq = c->avx512dq, out->avx512vnni = c->avx512vnni, out->avx512bf16 = c->avx512bf16;
    out->avxvnni = c->avxvnni;
    const char *core = openblas_get_corename();
    out->blas_core = core ? core : "";
    /* OpenBLAS read OPENBLAS_CORETYPE when it was loaded, before main(); nothing here changes it */
    const char *env = getenv("OPENBLAS_CORETYPE");
    out->blas_core_env = env ? env : "";
    int wide_cpu = c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
    out->blas_core_narrow = wide_cpu && core && *core && !blas_core_has_avx512(core);
    /* the same kernels for sgemm; Cooperlake adds bf16 products, which it refuses without BF16 */
    out->blas_core_wide = !wide_cpu ? "" : c->avx512bf16 ? "Cooperlake" : "SkylakeX";
    out->threads = omp_get_max_threads();
}

int dt_system_check(dt_error *err) { return dt_isa_check(err); }
