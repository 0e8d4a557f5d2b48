/* cli.h — shared pieces of the difftrans command-line tool: option parsing and printing over the
 * public API alone (difftrans.h, difftrans_analysis.h, difftrans_bench.h; the CLI is built
 * without src/ on its include path). */
#ifndef DT_CLI_H
#define DT_CLI_H
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "difftrans.h"

int cmd_train(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_forward(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_needle(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_study(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* Strict number parsing: the whole string must be a number in range; on failure prints
 * "difftrans CMD: --name 'value': problem" and returns -1. */
int parse_int(const char *cmd, const char *name, const char *s, long lo, long hi, int *out);
int parse_u64(const char *cmd, const char *name, const char *s, uint64_t *out);
int parse_float(const char *cmd, const char *name, const char *s, double lo, double hi, float *out);
/* Exit statuses: 0 success; a failure exits with the code of the first library error reported
 * through cli_fail / cli_error_code (DT_ERR_INVALID 1, FORMAT 2, IO 3, NOMEM 4, UNSUPPORTED 5,
 * DIVERGED 6), or 1 (usage, a bad argument) when none was; 7 is a data-parallel job that
 * MPI_Abort ended (dist/comm.c). README.md "Exit status" and `difftrans --help` say the same. */
/* Prints "difftrans CMD: message" to stderr and returns 1 (the exit status of a bad argument). */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same for a failure of the given kind: the process exits with its status unless an earlier
 * failure set one. Returns that code's status. */
int cli_error_code(const char *cmd, dt_errcode code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prints a library error ("difftrans CMD: err->msg"; nothing for an empty message, which another
 * rank of a data-parallel job reported) and exits with its code, as cli_error_code. */
int cli_fail(const char *cmd, const dt_error *err);
/* A library field and the flag that sets it ({"grad_accum", "--grad-accum"}). */
typedef struct {
    const char *field, *flag;
} cli_flag;
/* cli_fail for a library error that names the library's own fields (batch, num_attention_heads,
 * shots, ...): the flags of the fields the message names as whole words follow it, in the
 * order of flags[0, n) ("... (--batch, --grad-accum)"), so that the user reads what they typed. */
int cli_fail_flags(const char *cmd, const dt_error *err, const cli_flag *flags, int n);
/* A needle set too long for a model (its message says "longer than the model's
 * max_position_embeddings"): adds where to get one that fits (`needle generate --model MODEL`). */
void cli_needle_fit_hint(dt_error *err, const char *model);
/* The model the needle set data was sized for (`needle generate --model`, its needle.json), against
 * m loaded from model_dir: a warning on stderr when m reads text otherwise (another tokenizer, or
 * another number of positions). Such a set is still text m reads, as any --data is, unlike a token
 * dataset's ids: it is scored, its contexts just are not the longest m holds. Returns 0, or the
 * status of a needle.json that cannot be read (printed). */
int cli_needle_sized_check(const char *cmd, const char *data, const char *model_dir, const dt_model *m);
/* argv[0, argc) after "difftrans", joined with spaces, arguments with shell-special characters
 * single-quoted: the command line a report prints so that it can be run again. */
void cli_join_command(char **argv, int argc, char *out, size_t n);
/* "a,b,c" → up to cap names of at most 31 bytes each, none empty; prints the error naming flag and
 * returns -1 otherwise. */
int cli_split_list(const char *cmd, const char *flag, const char *list, char names[][32], int cap, int *n);
/* SIGINT and SIGTERM set *flag (cleared first) instead of ending the process, so that a long job
 * (training, a study) can save its work and return. cli_default_stop_signals installs what every
 * other command gets (main.c runs it first): the outputs' temporaries removed, exit status 9. */
void cli_catch_stop_signals(volatile int *flag);
void cli_default_stop_signals(void);
/* A time left for a progress line: "1h05m", "3m07s", "?" when not known. */
void cli_format_eta(double seconds, char *out, size_t n);
/* A size for people: "12.34 MB", "5.1 KB" below 1 MB, "640 bytes" below 1 KB (decimal units), so
 * that a tiny model's does not read "0.00 MB". */
void cli_format_bytes(double bytes, char *out, size_t n);
/* All of fp's bytes, NUL-terminated (*len without it): 0, or -1 when out of memory or a read failed
 * (ferror(fp) says which). */
int cli_read_all(FILE *fp, char **out, size_t *len);
/* Reports a getopt failure (unknown option, missing value) and returns 1. */
int cli_bad_option(const char *cmd, int argc, char **argv);
/* --arch diff|diffllama|transformer|llama; prints the error and returns -1 otherwise. */
int cli_parse_arch(const char *cmd, const char *s, dt_arch *arch);
/* --ablation a,b,...: applies the named ablations (dt_ablation_names) to cfg in order. */
int cli_apply_ablations(const char *cmd, const char *list, dt_config *cfg);
/* --threads N → OpenMP (and so OpenBLAS) thread count. */
void cli_set_threads(int n);
/* --dtype f32|bf16|f16 (also F32, float32, bfloat16, float16). */
int cli_parse_dtype(const char *cmd, const char *s, dt_dtype *out);
/* --kv-cache f32|f16|int8 (generate, serve). */
int cli_parse_kv_cache(const char *cmd, const char *s, dt_kv_dtype *out);
/* --max-shard-size: bytes, or a number with KB/MB/GB/TB (powers of 1000, as transformers reads
 * "5GB") or KiB/MiB/GiB/TiB (powers of 1024). */
int cli_parse_size(const char *cmd, const char *name, const char *s, uint64_t *out);
/* A directory a command writes a new model into (flag: how the user named it, "--out" or
 * "OUT_DIR"): refused when it is a file, or a directory that already holds a checkpoint
 * (config.json, weights, a training state) unless force, so that a model is never replaced by
 * mistake; what_else says how to go on instead. With force the old run's training state
 * (train_state.json, optimizer.safetensors, metrics.jsonl) is removed, so that no resume
 * continues it on the new weights. Prints the error and returns 1, else 0. */
int cli_check_new_model_dir(const char *cmd, const char *flag, const char *dir, int force, const char *what_else);
/* The name of the file of the model at `model` (a GGUF file, or a file of a checkpoint directory
 * that its loader reads) that `output` already is, in name[n]; NULL when it is none of them. */
const char *cli_model_file_at(const char *model, const char *output, char *name, size_t n);
/* Reads a config: a preset name ("small") or a path to a config.json. */
int cli_config(const char *cmd, const char *spec, dt_arch arch, dt_config *cfg);
/* cli_config, refusing a config.json whose model_type is not arch when --arch was given
 * (arch_flag: its value as typed, NULL when not given); a preset takes arch as always. */
int cli_config_arch(const char *cmd, const char *spec, const char *arch_flag, dt_arch arch, dt_config *cfg);
/* The CPU, the kernel path in use, its features and OpenBLAS's core, one "key: value" per line. */
void cli_print_system(FILE *f, const char *indent);
/* 1 when OPENBLAS_CORETYPE is the CLI's own choice for this CPU (main.c), not the user's */
int cli_blas_core_chosen(void);
/* The parameter counts of a config and of its matched model of the other architecture. */
void cli_print_param_counts(const dt_config *cfg);
/* `analyze quantize --schemes`: quantisation quality per scheme (cli/analyze_wquant.c). */
typedef struct {
    const char *data, *calib, *schemes, *needle, *json;
    float alpha;
    int seq, windows, calib_samples, lm_head, max_samples;
    uint64_t seed;
} cli_wquant_options;
int cli_analyze_wquant(const char *cmd, char **dirs, int n, const cli_wquant_options *o);
#endif
