/* report.h — the `difftrans compare` report (internal): every analysis of difftrans_analysis.h on a DIFF model
 * and its parameter-matched baseline, written as REPORT.md (tables next to the paper's figures),
 * report.json (all raw numbers) and, when gnuplot is on PATH, PNG plots made by gnuplot.
 *
 * The analyses themselves live in analyze.c / needle_*.c; this file only collects and writes. Every
 * function that can fail returns 0 or -1 with a message in *err naming the file or argument.
 */
#ifndef DT_REPORT_H
#define DT_REPORT_H
#include <stddef.h>
#include <stdint.h>

#include "difftrans_analysis.h"

#define RP_MAX_BITS 8
#define RP_MAX_SIZES (DT_CMP_MAX_SIZES + 1) /* the main preset and the scaling presets */
#define RP_MAX_VARIANTS DT_CMP_MAX_VARIANTS /* models compared side by side */
#define RP_MAX_SEEDS DT_CMP_MAX_SEEDS       /* runs per variant */
#define RP_MAX_CURVE 64   /* points of a task learning curve */

/* Task accuracy of one run at one training step (NAN for tasks not measured). */
typedef struct {
    int step;
    double accuracy[DT_N_TASKS];
} rp_curve_point;

/* One trained model and everything measured on it. */
typedef struct {
    char name[32];   /* the variant's display name, e.g. "DIFF" or "Transformer" */
    char dir[4096];  /* its run / checkpoint directory */
    dt_config cfg;
    size_t n_params;
    double bytes_per_token;  /* of the held-out text, for bits per byte; 0: unknown */
    double *lambda;  /* [L] λ of the final weights (DIFF), NULL for the baseline */
    dt_an_training training;
    dt_an_outliers outliers;
    int n_quant;     /* rows: unquantised first, then each bit width */
    dt_an_quant_row quant[RP_MAX_BITS + 1];
    int have_needle;
    dt_needle_results needle;
    dt_an_allocation allocation;
    dt_icl_params icl_setup;
    dt_icl_result icl;  /* in-context classification over orders of the examples */
    int tasks;       /* bit mask of the tasks in task[] */
    dt_task_result task[DT_N_TASKS];
    int n_curve;     /* task accuracy during training */
    rp_curve_point curve[RP_MAX_CURVE];
    int n_wq;        /* post-training quantisation rows: F32 first, then each scheme (0: not run) */
    dt_an_wq_row wq[DT_AN_WQ_MAX_SCHEMES + 1];
    /* the reproduction protocol (dt_an_protocol_run; n_bins 0: not run): on the held-out text, and
     * with the same seq, windows and bins on the training text */
    dt_an_protocol protocol, protocol_train;
} rp_model;

typedef struct {
    const int *tokens;   /* held-out text for outliers and quantisation */
    size_t n;
    int seq, windows;    /* windows of seq (+1) bytes */
    int n_bits;
    int bits[RP_MAX_BITS];
    const dt_needle_testset *needle; /* NULL: no needle analyses */
    int allocation_samples;       /* <= 0: all */
    int tasks;                    /* bit mask of dt_task_kind to evaluate */
    dt_task_eval_options task_eval;    /* their evaluation sets (max_len is taken from the model) */
    const int *calib_tokens;      /* post-training quantisation: calibration text (the training part); */
    size_t calib_n;               /* NULL: that analysis is skipped */
    int calib_samples;            /* calibration windows (fewer when the training text has fewer) */
    const int *train_tokens;      /* the training part of the text: the protocol's training-text side; */
    size_t train_n;               /* NULL: only the held-out side is measured */
    int protocol_windows;         /* the reproduction protocol: windows of seq (+1) spread over each text, */
    int protocol_bins;            /* position bins; 0: not run */
} rp_analysis_options;

/* Loads the checkpoint in dir and runs every analysis on it; fills *out (zeroed first). */
int rp_analyze_model(rp_model *out, const char *dir, const char *name, const rp_analysis_options *o, dt_error *err);
void rp_model_free(rp_model *m);

typedef struct {
    const char *command;     /* the command line that reproduces the report */
    uint64_t seed;           /* of the first run of each variant; run s used seed + s */
    const char *preset, *data, *train_text, *needle_dir; /* needle_dir NULL without --needle */
    int steps, batch, seq;
    size_t heldout_tokens;   /* tokens (bytes for byte-level runs) of the held-out tail the analyses used */
    size_t heldout_bytes;    /* the bytes of that text (as its tokenizer decodes it); 0: unknown */
    const char *tokenizer;   /* the runs' tokenizer.json or token dataset; NULL: byte-level runs */
    int windows;
    int needle_context, needle_needles, needle_queries;
    int needle_longest;      /* the most tokens (bytes) of a needle test sample; past seq: never trained */
    int tasks;               /* bit mask of the tasks mixed into training */
    double task_ratio;       /* fraction of steps that were task batches */
    const dt_task_symbols *task_symbols; /* the tasks' symbols as tokens of the runs' vocabulary; NULL: bytes */
    int n_variants, n_seeds;
    const char *variant_key[RP_MAX_VARIANTS]; /* e.g. "diff", "transformer" */
    rp_model *runs;          /* [n_variants × n_seeds], variant-major: runs[v * n_seeds + s] */
    int diff, base;          /* indices of the "diff" and "transformer" variants, -1 when absent */
    int n_sizes;             /* runs per kind for the loss-against-size fit (1: no fit; 0: no diff / transformer
                                pair among the variants); seed 0 only */
    const char *size_names[RP_MAX_SIZES];
    /* [size][0 = DIFF, 1 = Transformer]; size_params: non-embedding (the fit's N, as the study's),
     * size_all: every parameter */
    double size_params[RP_MAX_SIZES][2], size_all[RP_MAX_SIZES][2], size_loss[RP_MAX_SIZES][2];
} rp_report;

static inline const rp_model *rp_run(const rp_report *r, int variant, int seed) {
    return &r->runs[variant * r->n_seeds + seed];
}

/* Writes out_dir/REPORT.md and out_dir/report.json (atomically) and out_dir/plots/ (plots.c:
 * *.dat, plots.gp, and the PNGs when gnuplot is on PATH; a failing gnuplot is noted in REPORT.md,
 * not an error). */
int rp_write(const rp_report *r, const char *out_dir, dt_error *err);

/* report_md.c / report_json.c: the two renderings of one report. plots: 1 when the PNGs exist;
 * plot_note says why not otherwise. */
char *rp_markdown(const rp_report *r, int plots, const char *plot_note); /* malloc'd; NULL: out of memory */
struct cJSON *rp_json(const rp_report *r, int plots);
#endif
