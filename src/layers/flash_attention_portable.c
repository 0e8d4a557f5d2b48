/* flash_attention_portable.c — the fused attention kernels for baseline x86-64 (SSE2), from
 * flash_attention_body.h. */
#include "layers/flash_attention_body.h"
