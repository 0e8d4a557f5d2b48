/* skinny_portable.c — the few-row matrix product for baseline x86-64 (SSE2), from skinny_body.h. */
#include "layers/skinny_body.h"
