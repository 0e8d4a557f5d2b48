/* skinny_avx512.c — the few-row matrix product for AVX-512, from skinny_body.h. */
#include "layers/skinny_body.h"
