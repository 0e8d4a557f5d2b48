/* wquant.h — quality of post-training weight / activation quantisation (issue 9), DIFF and
 * baseline side by side: held-out loss increase over F32, mean KL divergence of the next-token
 * distribution from F32's, top-1 agreement, needle accuracy, and the activation outlier statistics
 * (per-channel absmax of each quantised layer's input, before and after smoothing). Internal. */
#ifndef DT_WQUANT_H
#define DT_WQUANT_H
#include <stddef.h>

#include "analysis/needle.h"
#include "difftrans.h"

#define AN_WQ_MAX_SCHEMES 8

typedef struct {
    char name[32];               /* "q8_0", "q4_0", "w8a8", "w8a8-dynamic", "w8a8-smooth", "w8a8-dynamic-smooth" */
    dt_quant_options opt;        /* scheme, dynamic_activations, smooth_alpha */
} an_wq_scheme;

/* A comma-separated list of the names above; smoothing uses strength alpha. */
int an_wq_parse_schemes(const char *list, float alpha, an_wq_scheme *out, int *n, dt_error *err);

typedef struct {
    const int *eval_tokens;      /* held-out text: up to `windows` consecutive windows of seq + 1 */
    size_t eval_n;
    int seq, windows;
    const int *calib_tokens;     /* calibration text (w8a8), disjoint from the held-out text */
    size_t calib_n;
    int calib_samples, calib_seq;
    uint64_t seed;
    int lm_head;                 /* quantise the LM head too */
    const needle_testset *needle; /* NULL: no needle accuracy */
    const dt_tok *needle_tok;    /* the model's tokenizer the needle texts are read with; NULL: bytes */
    int max_samples;
} an_wq_params;

/* Activation outliers of one layer type (q, k, v, o, gate, up, down, lm_head) over every layer:
 * the largest per-channel absmax, and the mean over layers of absmax / median channel absmax. */
typedef struct {
    char type[16];
    double absmax, ratio, absmax_smoothed, ratio_smoothed;
} an_wq_outliers;

typedef struct {
    char name[32];               /* "f32" for row 0 */
    double loss, loss_delta, kl, top1_agree, accuracy;
    size_t count;
    int needle_correct, needle_total; /* -1 without a needle set */
    double decode_mb;            /* weights read per decoded token */
    int n_types;                 /* calibrated w8a8 rows: outliers per layer type (else 0) */
    an_wq_outliers types[8];
    int n_stats;                 /* per quantised layer, from the calibration (else 0) */
    dt_quant_act_stat *stats;
} an_wq_row;

/* rows[0] is F32, rows[1 + i] scheme i; the model itself is left unquantised. */
int an_wq_run(const dt_model *m, const an_wq_params *p, const an_wq_scheme *schemes, int n, an_wq_row *rows,
              dt_error *err);
void an_wq_rows_free(an_wq_row *rows, int n);
/* The rows as a cJSON array (NULL when out of memory). */
struct cJSON *an_wq_rows_json(const an_wq_row *rows, int n);
#endif
