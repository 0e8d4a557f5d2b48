/* cpu.h — what this CPU can run, detected once, and which kernel path the process uses.
 *
 * The default build targets baseline x86-64; kernels that need AVX2 or AVX-512 live in files
 * named *_avx2.c / *_avx512.c (compiled with those instruction sets, see CMakeLists.txt) and are
 * only called after dt_isa_active() says the CPU has them. DT_ISA=portable|avx2|avx512 in the
 * environment forces a path (for tests and for comparing paths); forcing a path the CPU lacks is
 * refused by dt_isa_check, never silently run. DT_AVXVNNI=0 hides AVX-VNNI, so that the avx2 path
 * runs as on an AVX2 CPU without it. */
#ifndef DT_CPU_H
#define DT_CPU_H

#include "difftrans.h"

typedef enum { DT_ISA_PORTABLE = 0, DT_ISA_AVX2 = 1, DT_ISA_AVX512 = 2 } dt_isa;
#define DT_ISA_COUNT 3

typedef struct {
    int avx2, fma, f16c;                 /* the AVX2 path needs all three */
    int avx512f, avx512bw, avx512vl, avx512dq; /* the AVX-512 path needs all four */
    int avx512vnni, avx512bf16, avxvnni; /* extras that particular kernels may use */
    int intel;                           /* an Intel CPU (where a kernel choice was measured to differ by vendor) */
    char model[64];                      /* the CPU's brand string, e.g. "AMD EPYC 9B14" */
} dt_cpu_info;

/* The features of this CPU (detected on first call; the OS must also save the vector state). */
const dt_cpu_info *dt_cpu(void);
/* The widest path this CPU supports. */
dt_isa dt_isa_best(void);
/* Whether the CPU can run path isa. */
int dt_isa_supported(dt_isa isa);
/* The path in use: DT_ISA from the environment when set and supported, else dt_isa_best().
 * An unsupported or unknown DT_ISA falls back to dt_isa_best(); dt_isa_check reports it. */
dt_isa dt_isa_active(void);
/* 0 when DT_ISA is unset or names a path this CPU runs; else -1 with a message naming DT_ISA. */
int dt_isa_check(dt_error *err);
const char *dt_isa_name(dt_isa isa);
/* Parses "portable" | "avx2" | "avx512"; -1 for anything else. */
int dt_isa_parse(const char *name);

#endif
