/* elementwise_avx2.c — RMSNorm, residual + RMSNorm, RoPE, SwiGLU and AdamW kernels for
 * AVX2 + FMA (CMakeLists.txt compiles this file with -mavx2 -mfma), from elementwise_body.h. */
#include "layers/elementwise_body.h"
