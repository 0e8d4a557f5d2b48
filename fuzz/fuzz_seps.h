/* fuzz_seps.h — how a fuzz input that stands for several files is split (the seed script writes
 * the same separators; see fuzz/make_seeds.sh). */
#ifndef DT_FUZZ_SEPS_H
#define DT_FUZZ_SEPS_H
#define FUZZ_CKPT_SEP "\n==model.safetensors==\n"
#endif
