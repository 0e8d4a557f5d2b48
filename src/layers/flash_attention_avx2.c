/* flash_attention_avx2.c — the fused attention kernels for AVX2 + FMA, from
 * flash_attention_body.h (CMakeLists.txt compiles this file with -mavx2 -mfma). */
#include "layers/flash_attention_body.h"
