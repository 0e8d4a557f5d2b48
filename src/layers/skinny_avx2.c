/* skinny_avx2.c — the few-row matrix product for AVX2 + FMA, from skinny_body.h. */
#include "layers/skinny_body.h"
