/* elementwise_portable.c — RMSNorm, residual + RMSNorm, RoPE, SwiGLU and AdamW kernels for
 * baseline x86-64 (SSE2), from elementwise_body.h. */
#include "layers/elementwise_body.h"
