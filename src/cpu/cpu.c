/* cpu.c — CPU feature detection and the choice of kernel path (see cpu.h).
 *
 * The detected features are immutable once read, so sharing them between models, threads or
 * ranks in one process is safe; pthread_once makes the first read race-free. */
#include "cpu/cpu.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static dt_cpu_info g_cpu;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static void read_brand(char *out, size_t n) {
    unsigned int regs[12], a, b, c, d;
    out[0] = '\0';
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000004u) return;
    for (unsigned int leaf = 0; leaf < 3; leaf++)
        __get_cpuid(0x80000002u + leaf, &regs[4 * leaf], &regs[4 * leaf + 1], &regs[4 * leaf + 2],
                    &regs[4 * leaf + 3]);
    char brand[49];
    memcpy(brand, regs, 48);
    brand[48] = '\0';
    const char *s = brand;
    while (*s == ' ') s++;
    size_t len = strlen(s);
    while (len && s[len - 1] == ' ') len--;
    if (len >= n) len = n - 1;
    memcpy(out, s, len);
    out[len] = '\0';
}

static void detect(void) {
    /* __builtin_cpu_supports also checks that the OS enabled the AVX / AVX-512 register state. */
    __builtin_cpu_init();
    g_cpu.avx2 = __builtin_cpu_supports("avx2") != 0;
    g_cpu.fma = __builtin_cpu_supports("fma") != 0;
    g_cpu.avx512f = __builtin_cpu_supports("avx512f") != 0;
    g_cpu.avx512bw = __builtin_cpu_supports("avx512bw") != 0;
    g_cpu.avx512vl = __builtin_cpu_supports("avx512vl") != 0;
    g_cpu.avx512dq = __builtin_cpu_supports("avx512dq") != 0;
    g_cpu.avx512vnni = __builtin_cpu_supports("avx512vnni") != 0;
    g_cpu.avx512bf16 = __builtin_cpu_supports("avx512bf16") != 0;
    g_cpu.intel = __builtin_cpu_is("intel") != 0;
    /* F16C (CPUID.1:ECX bit 29) is not among the names every GCC accepts; read it directly,
     * and only trust it when AVX itself is usable. */
    unsigned int a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) g_cpu.f16c = (c >> 29) & 1u;
    if (!__builtin_cpu_supports("avx")) g_cpu.f16c = 0;
    /* AVX-VNNI (CPUID.(7,1):EAX bit 4): clang 14 has no __builtin_cpu_supports name for it */
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) g_cpu.avxvnni = ((a >> 4) & 1u) && g_cpu.avx2;
    /* DT_AVXVNNI=0: the avx2 path as on a CPU without AVX-VNNI (to measure it against the other) */
    const char *vnni = getenv("DT_AVXVNNI");
    if (vnni && strcmp(vnni, "0") == 0) g_cpu.avxvnni = 0;
    read_brand(g_cpu.model, sizeof g_cpu.model);
}

const dt_cpu_info *dt_cpu(void) {
    pthread_once(&g_cpu_once, detect);
    return &g_cpu;
}

int dt_isa_supported(dt_isa isa) {
    const dt_cpu_info *c = dt_cpu();
    switch (isa) {
    case DT_ISA_PORTABLE: return 1;
    case DT_ISA_AVX2: return c->avx2 && c->fma && c->f16c;
    case DT_ISA_AVX512:
        return dt_isa_supported(DT_ISA_AVX2) && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
    }
    return 0;
}

dt_isa dt_isa_best(void) {
    if (dt_isa_supported(DT_ISA_AVX512)) return DT_ISA_AVX512;
    if (dt_isa_supported(DT_ISA_AVX2)) return DT_ISA_AVX2;
    return DT_ISA_PORTABLE;
}

const char *dt_isa_name(dt_isa isa) {
    switch (isa) {
    case DT_ISA_PORTABLE: return "portable";
    case DT_ISA_AVX2: return "avx2";
    case DT_ISA_AVX512: return "avx512";
    }
    return "?";
}

int dt_isa_parse(const char *name) {
    for (int i = 0; i < DT_ISA_COUNT; i++)
        if (name && strcmp(name, dt_isa_name((dt_isa)i)) == 0) return i;
    return -1;
}

dt_isa dt_isa_active(void) {
    const char *env = getenv("DT_ISA");
    if (env && *env) {
        int isa = dt_isa_parse(env);
        if (isa >= 0 && dt_isa_supported((dt_isa)isa)) return (dt_isa)isa;
    }
    return dt_isa_best();
}

int dt_isa_check(dt_error *err) {
    const char *env = getenv("DT_ISA");
    if (!env || !*env) return 0;
    int isa = dt_isa_parse(env);
    if (isa < 0) return dt_fail(err, "DT_ISA=%s: unknown kernel path (expected portable, avx2 or avx512)", env);
    if (!dt_isa_supported((dt_isa)isa))
        return dt_fail_code(err, DT_ERR_UNSUPPORTED,
                            "DT_ISA=%s: this CPU (%s) cannot run that path; the best it supports is %s", env,
                            dt_cpu()->model[0] ? dt_cpu()->model : "unknown", dt_isa_name(dt_isa_best()));
    return 0;
}
