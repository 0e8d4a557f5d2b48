/* flash_attention_avx512.c — the fused attention kernels for AVX-512 (16-wide vectors, 32
 * registers), from flash_attention_body.h (CMakeLists.txt compiles this file with -mavx512f ...). */
#include "layers/flash_attention_body.h"
