/* elementwise_avx512.c — RMSNorm, residual + RMSNorm, RoPE, SwiGLU and AdamW kernels for
 * AVX-512, 16-wide vectors (CMakeLists.txt compiles this file with -mavx512f ...), from elementwise_body.h. */
#include "layers/elementwise_body.h"
