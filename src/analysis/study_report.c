/* study_report.c — the scaling study's report: REPORT.md, report.json and plots/ from the runs'
 * run.json files (study.c writes them), so that a report can be made again from a finished study
 * directory, whichever ranks or sessions trained its runs.
 *
 * Held-out loss is the unit of every verdict. Per size, DIFF − baseline is paired over seeds (the
 * same seed gives both runs the same data order); the fits, the fraction and the crossing come
 * from dt_scaling_study_fit. Every other variant is compared with the first (DIFF) the same way. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analysis/plots.h"
#include "analysis/study.h"
#include "analysis/textbuf.h"
#include "internal.h"

#define MAX_LAYERS 64

/* What the report uses of one run.json. */
typedef struct {
    int ok;
    double params, nonembedding, tokens;
    double heldout, train;               /* mean loss */
    int n_bins;
    int bin_first[DT_AN_PROTO_MAX_BINS], bin_last[DT_AN_PROTO_MAX_BINS];
    double bin_loss[DT_AN_PROTO_MAX_BINS];
    int n_layers;
    double sink[MAX_LAYERS], rms[MAX_LAYERS], rms_min[MAX_LAYERS], rms_max[MAX_LAYERS];
    double lambda_first[MAX_LAYERS], lambda_last[MAX_LAYERS];
    int has_lambda;
    double spikes, gn_max, gn_std;
    int diverged;  /* its losses are those of an earlier checkpoint: left out of every comparison */
    cJSON *json; /* the whole run.json, for report.json */
} run_summary;

typedef struct {
    const dt_study_options *o;
    const study_run *runs;
    int n;
    run_summary *s; /* [n], in the plan's order */
} report;

static double num(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static int read_array(const cJSON *o, const char *key, double *out, int cap) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key), *x;
    int n = 0;
    cJSON_ArrayForEach(x, a) {
        if (n >= cap) break;
        out[n++] = cJSON_IsNumber(x) ? x->valuedouble : NAN;
    }
    return n;
}

static int load_summary(const study_run *r, run_summary *s, dt_error *err) {
    memset(s, 0, sizeof *s);
    char path[4400];
    if (dt_pathf(path, sizeof path, err, "%s/run.json", r->dir)) return -1;
    cJSON *j = json_load_file(path, err);
    if (!j) return -1;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "heldout"), *t = cJSON_GetObjectItemCaseSensitive(j, "train"),
                *d = cJSON_GetObjectItemCaseSensitive(j, "training");
    s->json = j;
    s->params = num(j, "params");
    s->nonembedding = num(j, "nonembedding_params");
    s->tokens = num(j, "tokens");
    s->heldout = num(h, "loss");
    s->train = num(t, "loss");
    s->diverged = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "diverged"));
    if (!cJSON_IsObject(h) || !cJSON_IsObject(t) || !cJSON_IsObject(d) || !(s->params > 0) ||
        (!s->diverged && !isfinite(s->heldout)))
        return dt_fail_format(err, "%s: not a study run's summary (heldout.loss, train.loss, training, params)", path);
    const cJSON *b;
    cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(h, "bins")) {
        if (s->n_bins >= DT_AN_PROTO_MAX_BINS) break;
        s->bin_first[s->n_bins] = (int)num(b, "first");
        s->bin_last[s->n_bins] = (int)num(b, "last");
        s->bin_loss[s->n_bins++] = num(b, "loss");
    }
    s->n_layers = read_array(h, "sink_mass", s->sink, MAX_LAYERS);
    const cJSON *row;
    int l = 0;
    cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(h, "head_rms")) {
        if (l >= MAX_LAYERS) break;
        int m = 0;
        const cJSON *x;
        double sum = 0, lo = INFINITY, hi = -INFINITY;
        cJSON_ArrayForEach(x, row) {
            double y = cJSON_IsNumber(x) ? x->valuedouble : NAN;
            sum += y, m++;
            if (y < lo) lo = y;
            if (y > hi) hi = y;
        }
        s->rms[l] = m ? sum / m : NAN, s->rms_min[l] = m ? lo : NAN, s->rms_max[l] = m ? hi : NAN;
        l++;
    }
    /* the baseline logs λ = 0 for its layers: it has none */
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "arch");
    s->has_lambda = read_array(d, "lambda_first", s->lambda_first, MAX_LAYERS) > 0 &&
                    !(cJSON_IsString(arch) && strcmp(arch->valuestring, dt_arch_name(DT_ARCH_LLAMA)) == 0);
    read_array(d, "lambda_last", s->lambda_last, MAX_LAYERS);
    s->spikes = num(d, "spikes");
    s->gn_max = num(d, "grad_norm_max");
    s->gn_std = num(d, "grad_norm_std");
    if (s->diverged) {
        s->heldout = s->train = NAN;
        for (int k = 0; k < s->n_bins; k++) s->bin_loss[k] = NAN;
        for (int k = 0; k < s->n_layers; k++) s->sink[k] = s->rms[k] = NAN;
        s->has_lambda = 0;
    }
    s->ok = 1;
    return 0;
}

/* ---------------------------------------------------------------- numbers over seeds */

static const run_summary *at(const report *r, int size, int variant, int seed) {
    return &r->s[(size * r->o->n_variants + variant) * r->o->seeds + seed];
}

typedef double (*measure_fn)(const run_summary *s, int arg);

static double m_heldout(const run_summary *s, int arg) { return (void)arg, s->heldout; }
static double m_train(const run_summary *s, int arg) { return (void)arg, s->train; }
static double m_gap(const run_summary *s, int arg) { return (void)arg, s->heldout - s->train; }
static double m_bin(const run_summary *s, int k) { return k < s->n_bins ? s->bin_loss[k] : NAN; }
static double m_spikes(const run_summary *s, int arg) { return (void)arg, s->spikes; }
static double m_gn_max(const run_summary *s, int arg) { return (void)arg, s->gn_max; }
static double m_gn_std(const run_summary *s, int arg) { return (void)arg, s->gn_std; }
static double m_diverged(const run_summary *s, int arg) { return (void)arg, s->diverged; }
static double m_sink(const run_summary *s, int l) { return l < s->n_layers ? s->sink[l] : NAN; }
static double m_rms(const run_summary *s, int l) { return l < s->n_layers ? s->rms[l] : NAN; }
static double m_lambda_first(const run_summary *s, int l) { return s->has_lambda ? s->lambda_first[l] : NAN; }
static double m_lambda_last(const run_summary *s, int l) { return s->has_lambda ? s->lambda_last[l] : NAN; }

static dt_stats_interval over_seeds(const report *r, int size, int v, measure_fn f, int arg) {
    double x[DT_STUDY_MAX_SEEDS];
    for (int s = 0; s < r->o->seeds; s++) x[s] = f(at(r, size, v, s), arg);
    return dt_stats_mean_ci(x, r->o->seeds);
}

/* variant v − variant w, paired over seeds */
static dt_stats_interval paired(const report *r, int size, int v, int w, measure_fn f, int arg) {
    double a[DT_STUDY_MAX_SEEDS], b[DT_STUDY_MAX_SEEDS];
    for (int s = 0; s < r->o->seeds; s++) a[s] = f(at(r, size, v, s), arg), b[s] = f(at(r, size, w, s), arg);
    return dt_stats_paired_diff_ci(a, b, r->o->seeds);
}

/* "3.412 ± 0.021", "3.412" with one seed, "n/a" */
static const char *fmt_ci(char *buf, size_t n, dt_stats_interval c, const char *f) {
    char m[24], h[24];
    if (c.n == 0 || !isfinite(c.mean)) return snprintf(buf, n, "n/a"), buf;
    snprintf(m, sizeof m, f, c.mean);
    if (!isfinite(c.half)) return snprintf(buf, n, "%s", m), buf;
    char hf[16]; /* the half-width without the mean's sign */
    snprintf(hf, sizeof hf, "%%%s", f[0] == '%' && f[1] == '+' ? f + 2 : f + 1);
    snprintf(h, sizeof h, hf, c.half);
    snprintf(buf, n, "%s ± %s", m, h);
    return buf;
}

static const char *fmt_num(char *buf, size_t n, double v, const char *f) {
    if (!isfinite(v)) snprintf(buf, n, "n/a");
    else snprintf(buf, n, f, v);
    return buf;
}

static const char *fmt_params(char *buf, size_t n, double p) {
    if (!isfinite(p)) snprintf(buf, n, "n/a");
    else if (p >= 1e9) snprintf(buf, n, "%.3gB", p / 1e9);
    else if (p >= 1e6) snprintf(buf, n, "%.3gM", p / 1e6);
    else if (p >= 1e3) snprintf(buf, n, "%.3gK", p / 1e3);
    else if (p >= 1) snprintf(buf, n, "%.0f", p);
    else snprintf(buf, n, "%.3g", p);
    return buf;
}

static const char *verdict_text(const dt_stats_interval *d, const char *a, const char *b, char *buf, size_t n) {
    if (d->n == 0) /* no seed has a measured run of both: a diverged run leaves its pair out */
        return snprintf(buf, n, "not compared: no seed has both runs (diverged)"), buf;
    switch (dt_stats_verdict_of(d, 1)) {
    case DT_STATS_A_BETTER: snprintf(buf, n, "%s lower", a); break;
    case DT_STATS_B_BETTER: snprintf(buf, n, "%s lower", b); break;
    default: snprintf(buf, n, "no difference resolved"); break;
    }
    return buf;
}

/* The fit input: kind 0 = the first variant, 1 = the second, at every size and seed. */
static void fit_input(const report *r, dt_scaling_runs *in) {
    memset(in, 0, sizeof *in);
    in->n_sizes = r->o->n_sizes, in->n_seeds = r->o->seeds;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < r->o->n_sizes; i++) {
            double p = 0;
            int m = 0;
            for (int s = 0; s < r->o->seeds; s++) {
                const run_summary *x = at(r, i, k, s);
                in->loss[k][i][s] = x->ok ? x->heldout : NAN; /* NAN too for a run that diverged */
                if (x->ok) p += x->nonembedding, m++;
            }
            in->params[k][i] = m ? p / m : (double)r->runs[(i * r->o->n_variants + k) * r->o->seeds].nonembedding;
        }
}

/* ---------------------------------------------------------------- REPORT.md */

static const char *display(const report *r, int v) { return dt_cmp_variant_display(r->o->variants[v]); }

static void md_setup(textbuf *b, const report *r) {
    const dt_study_options *o = r->o;
    char p1[32], p2[32], p3[32];
    tb_printf(b, "## Setup\n\n- data: `%s` (its train split trains; every loss here is measured on its val split, "
                 "which no run saw)\n",
              o->tokens);
    tb_printf(b, "- vocabulary: %d tokens; context %d; batch %d sequences; peak learning rate %g (warm-up 5%%, "
                 "cosine decay), the same at every size\n",
              r->runs[0].cfg.vocab_size, o->seq, o->batch, (double)o->lr);
    tb_printf(b, "- budget: %g training tokens per non-embedding parameter of the size's DIFF model, the same "
                 "tokens for every variant of a size; %d seeds (seed %llu + k: initialisation and data order, shared "
                 "by the variants)\n",
              o->tokens_per_param, o->seeds, (unsigned long long)o->seed);
    tb_printf(b, "- measured on %d windows of %d tokens of each split; %d bootstrap resamples\n\n", o->eval_windows,
              o->seq, o->resamples);
    tb_printf(b, "| size | hidden | layers | variant | heads × head dim | non-embedding params | all params | steps | "
                 "tokens |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < o->n_sizes; i++)
        for (int v = 0; v < o->n_variants; v++) {
            const study_run *x = &r->runs[(i * o->n_variants + v) * o->seeds];
            tb_printf(b, "| %s | %d | %d | %s | %d × %d | %s | %s | %d | %s |\n", o->sizes[i].name, x->cfg.hidden_size,
                      x->cfg.num_hidden_layers, display(r, v), x->cfg.num_attention_heads, x->cfg.head_dim,
                      fmt_params(p1, sizeof p1, (double)x->nonembedding), fmt_params(p2, sizeof p2, (double)x->params),
                      x->steps, fmt_params(p3, sizeof p3, (double)x->steps * o->batch * o->seq));
        }
    tb_printf(b, "\n");
}

static void md_headline(textbuf *b, const report *r, const dt_scaling_study *st) {
    const dt_study_options *o = r->o;
    const char *A = display(r, 0), *B = display(r, 1);
    int a_better = 0, b_better = 0, unpaired = 0;
    for (int i = 0; i < o->n_sizes; i++) {
        dt_stats_verdict v = dt_stats_verdict_of(&st->diff[i], 1);
        a_better += v == DT_STATS_A_BETTER, b_better += v == DT_STATS_B_BETTER;
        unpaired += st->diff[i].n == 0;
    }
    char lo[32], hi[32], f[32], c[32];
    const double smallest = r->runs[0].nonembedding,
                 largest = r->runs[((o->n_sizes - 1) * o->n_variants) * o->seeds].nonembedding;
    tb_printf(b, "## What it found\n\n");
    if (o->seeds < 3) /* the resampling has one or two values a size to draw from */
        tb_printf(b, "**With %d seed%s a size, no interval below can be trusted**: the bootstrap draws from %s, so "
                     "an interval is a point or as wide as the two seeds are apart, and a fraction or crossing "
                     "\"resolved\" at this many seeds says nothing. Run it again with `--seeds 3` or more, in a new "
                     "directory.\n\n",
                  o->seeds, o->seeds == 1 ? "" : "s", o->seeds == 1 ? "one value" : "two values");
    tb_printf(b, "%d sizes from %s to %s non-embedding parameters, %d seed%s each. Of the %d sizes, %s's held-out "
                 "loss was lower than the %s's at %d, higher at %d, and the difference was not resolved at %d (the "
                 "95%% interval of the paired difference over seeds spans zero)",
              o->n_sizes, fmt_params(lo, sizeof lo, smallest), fmt_params(hi, sizeof hi, largest), o->seeds,
              o->seeds == 1 ? "" : "s", o->n_sizes, A, B, a_better, b_better,
              o->n_sizes - a_better - b_better - unpaired);
    if (unpaired)
        tb_printf(b, "; at %d there was nothing to compare: every seed had a run that diverged", unpaired);
    tb_printf(b, ". ");
    if (isfinite(st->fraction.value)) {
        tb_printf(b, "From the power-law fits, %s reaches the %s's loss at %s parameters with %s of them (95%% "
                     "interval %s–%s; the paper: about 65%%). ",
                  A, B, fmt_params(f, sizeof f, st->fraction_at), fmt_num(c, sizeof c, 100 * st->fraction.value, "%.0f%%"),
                  fmt_num(lo, sizeof lo, 100 * st->fraction.lo, "%.0f%%"),
                  fmt_num(hi, sizeof hi, 100 * st->fraction.hi, "%.0f%%"));
        if (!(st->b[1].value < 0)) /* the paper's claim compares two falling curves */
            tb_printf(b, "But the %s's fitted loss does not fall with size (slope %.4f): at this budget its larger "
                         "models were no better, so that fraction compares %s with no scaling curve and says nothing "
                         "about the paper's claim either way. ",
                      B, st->b[1].value, A);
    } else if (!isfinite(st->b[0].value) || !isfinite(st->b[1].value)) /* dt_scaling_fit_power_law's NAN */
        tb_printf(b, "The fits give no fraction of the parameters: a fit needs two sizes with measured runs of "
                     "both kinds (a diverged run leaves its seed's pair out). ");
    else
        tb_printf(b, "The fits give no fraction of the parameters (a fit that does not fall with size). ");
    if (!isfinite(st->crossing.value))
        tb_printf(b, "The fits give no crossing. ");
    else if (st->crossing_in_range)
        tb_printf(b, "The two fitted curves cross at %s parameters, inside the sizes trained (%.0f%% of the "
                     "resamples cross inside them). ",
                  fmt_params(c, sizeof c, st->crossing.value), 100 * st->crossing_share);
    else
        tb_printf(b, "The fitted curves do not cross between the smallest and the largest size (%.0f%% of the "
                     "resamples do). ",
                  100 * st->crossing_share);
    tb_printf(b, "These models are %.0f to %.0f times smaller than the paper's smallest scaling run (830M "
                 "parameters; its curves span 830M–13.1B, and 6.8B DIFF ≈ 11B Transformer is its headline), "
                 "so this tells what holds at this scale, not whether the paper's numbers do at its.\n\n",
              830e6 / largest, 830e6 / smallest);
}

static void md_sizes(textbuf *b, const report *r, const dt_scaling_study *st) {
    const dt_study_options *o = r->o;
    const char *A = display(r, 0), *B = display(r, 1);
    char x1[64], x2[64], x3[64], v[96], lo[32], hi[32];
    tb_printf(b, "## Held-out loss by size\n\nMean over seeds ± the 95%% half-width (nats per token); the "
                 "difference is paired by seed.\n\n| size | %s | %s | %s − %s (95%% CI) | verdict |\n"
                 "| --- | --- | --- | --- | --- |\n",
              A, B, A, B);
    for (int i = 0; i < o->n_sizes; i++) {
        const dt_stats_interval *d = &st->diff[i];
        tb_printf(b, "| %s | %s | %s | %s [%s, %s] | %s |\n", o->sizes[i].name,
                  fmt_ci(x1, sizeof x1, over_seeds(r, i, 0, m_heldout, 0), "%.4f"),
                  fmt_ci(x2, sizeof x2, over_seeds(r, i, 1, m_heldout, 0), "%.4f"),
                  fmt_num(x3, sizeof x3, d->mean, "%+.4f"), fmt_num(lo, sizeof lo, d->lo, "%+.4f"),
                  fmt_num(hi, sizeof hi, d->hi, "%+.4f"), verdict_text(d, A, B, v, sizeof v));
    }
    tb_printf(b, "\n## Loss against size\n\nLeast squares of log(loss) on log(non-embedding parameters) over "
                 "every run of a kind: loss = e^a · N^b. Intervals: 2.5%% and 97.5%% percentiles of %d resamples "
                 "of the seeds (the same seeds for both kinds at each size).\n\n"
                 "| kind | a | b (the slope) |\n| --- | --- | --- |\n",
              st->resamples);
    for (int k = 0; k < 2; k++)
        tb_printf(b, "| %s | %s [%s, %s] | %s [%s, %s] |\n", display(r, k), fmt_num(x1, sizeof x1, st->a[k].value, "%.4f"),
                  fmt_num(lo, sizeof lo, st->a[k].lo, "%.4f"), fmt_num(hi, sizeof hi, st->a[k].hi, "%.4f"),
                  fmt_num(x2, sizeof x2, st->b[k].value, "%.4f"), fmt_num(x3, sizeof x3, st->b[k].lo, "%.4f"),
                  fmt_num(v, sizeof v, st->b[k].hi, "%.4f"));
    tb_printf(b, "\n- parameters %s needs for the %s's fitted loss at %s: %s of them, 95%% interval [%s, %s] "
                 "(defined in %d of %d resamples)\n",
              A, B, fmt_params(x1, sizeof x1, st->fraction_at), fmt_num(x2, sizeof x2, st->fraction.value, "%.3f"),
              fmt_num(lo, sizeof lo, st->fraction.lo, "%.3f"), fmt_num(hi, sizeof hi, st->fraction.hi, "%.3f"),
              st->fraction.n, st->resamples);
    tb_printf(b, "- where the fits cross: %s parameters, 95%% interval [%s, %s]; %s the sizes trained; %.0f%% of "
                 "the resamples cross inside them\n\n",
              fmt_params(x1, sizeof x1, st->crossing.value), fmt_params(lo, sizeof lo, st->crossing.lo),
              fmt_params(hi, sizeof hi, st->crossing.hi), st->crossing_in_range ? "inside" : "outside",
              100 * st->crossing_share);
}

static void md_variants(textbuf *b, const report *r) {
    const dt_study_options *o = r->o;
    if (o->n_variants <= 2) return;
    char x1[64], x2[64], lo[32], hi[32], v[96];
    tb_printf(b, "## Every variant against %s\n\nHeld-out loss; the difference to %s is paired by seed.\n\n"
                 "| size | variant | held-out loss | − %s (95%% CI) | verdict |\n| --- | --- | --- | --- | --- |\n",
              display(r, 0), display(r, 0), display(r, 0));
    for (int i = 0; i < o->n_sizes; i++)
        for (int w = 1; w < o->n_variants; w++) {
            dt_stats_interval d = paired(r, i, w, 0, m_heldout, 0);
            tb_printf(b, "| %s | %s | %s | %s [%s, %s] | %s |\n", o->sizes[i].name, display(r, w),
                      fmt_ci(x1, sizeof x1, over_seeds(r, i, w, m_heldout, 0), "%.4f"),
                      fmt_num(x2, sizeof x2, d.mean, "%+.4f"), fmt_num(lo, sizeof lo, d.lo, "%+.4f"),
                      fmt_num(hi, sizeof hi, d.hi, "%+.4f"), verdict_text(&d, display(r, w), display(r, 0), v, sizeof v));
        }
    tb_printf(b, "\n");
}

static void md_protocol(textbuf *b, const report *r) {
    const dt_study_options *o = r->o;
    const int big = o->n_sizes - 1;
    char x1[64], x2[64], x3[64], x4[64];
    tb_printf(b, "## The protocol\n\nWhat the published small-scale reproductions lacked. A lower training "
                 "loss with a higher held-out loss, and a gap that grows late in the context, is the signature of "
                 "memorisation, not of better modelling; loss spikes and the spread of the gradient norm say how "
                 "stable training was; λ shows whether the second map is used or collapses to nothing; the sink "
                 "mass is the attention the heads park on the first token (the noise DIFF claims to cancel); the "
                 "RMS of a head's context before its norm is the V2 write-up's argument for dropping the norm.\n\n");
    tb_printf(b, "### Training and held-out loss\n\n| size | variant | training | held-out | gap (held-out − "
                 "training) |\n| --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < o->n_sizes; i++)
        for (int v = 0; v < o->n_variants; v++)
            tb_printf(b, "| %s | %s | %s | %s | %s |\n", o->sizes[i].name, display(r, v),
                      fmt_ci(x1, sizeof x1, over_seeds(r, i, v, m_train, 0), "%.4f"),
                      fmt_ci(x2, sizeof x2, over_seeds(r, i, v, m_heldout, 0), "%.4f"),
                      fmt_ci(x3, sizeof x3, over_seeds(r, i, v, m_gap, 0), "%+.4f"));
    const run_summary *s0 = at(r, big, 0, 0);
    tb_printf(b, "\n### Held-out loss by position in the context (%s)\n\n| positions |", o->sizes[big].name);
    for (int v = 0; v < o->n_variants; v++) tb_printf(b, " %s |", display(r, v));
    tb_printf(b, " %s − %s (95%% CI) |\n| --- |", display(r, 0), display(r, 1));
    for (int v = 0; v <= o->n_variants; v++) tb_printf(b, " --- |");
    tb_printf(b, "\n");
    for (int k = 0; k < s0->n_bins; k++) {
        tb_printf(b, "| %d–%d |", s0->bin_first[k], s0->bin_last[k]);
        for (int v = 0; v < o->n_variants; v++) tb_printf(b, " %s |", fmt_ci(x1, sizeof x1, over_seeds(r, big, v, m_bin, k), "%.4f"));
        dt_stats_interval d = paired(r, big, 0, 1, m_bin, k);
        tb_printf(b, " %s [%s, %s] |\n", fmt_num(x1, sizeof x1, d.mean, "%+.4f"), fmt_num(x2, sizeof x2, d.lo, "%+.4f"),
                  fmt_num(x3, sizeof x3, d.hi, "%+.4f"));
    }
    tb_printf(b, "\n### Training stability\n\nSpikes: steps whose gradient norm exceeds mean + 3·std or 3× the "
                 "median of the %d steps before (dt_an_spikes). A run that diverged (a non-finite loss or "
                 "gradient) is left out of every loss above.\n\n| size | variant | diverged | spikes per run | "
                 "gradient-norm max | gradient-norm std |\n| --- | --- | --- | --- | --- | --- |\n",
              DT_AN_SPIKE_WINDOW);
    for (int i = 0; i < o->n_sizes; i++)
        for (int v = 0; v < o->n_variants; v++) {
            int diverged = 0;
            for (int s = 0; s < o->seeds; s++) diverged += at(r, i, v, s)->diverged;
            tb_printf(b, "| %s | %s | %d of %d | %s | %s | %s |\n", o->sizes[i].name, display(r, v), diverged, o->seeds,
                      fmt_ci(x1, sizeof x1, over_seeds(r, i, v, m_spikes, 0), "%.1f"),
                      fmt_ci(x2, sizeof x2, over_seeds(r, i, v, m_gn_max, 0), "%.3f"),
                      fmt_ci(x3, sizeof x3, over_seeds(r, i, v, m_gn_std, 0), "%.3f"));
        }
    tb_printf(b, "\n### Per layer (%s): λ over training, attention-sink mass, head-context RMS\n\n"
                 "λ at the first logged step → the last (variants with a λ per layer); sink mass on the window's first "
                 "token; RMS of a head's context before its norm (mean over heads).\n\n| variant | layer | λ first → "
                 "last | sink mass | head-context RMS |\n| --- | --- | --- | --- | --- |\n",
              o->sizes[big].name);
    for (int v = 0; v < o->n_variants; v++)
        for (int l = 0; l < at(r, big, v, 0)->n_layers; l++) {
            dt_stats_interval lf = over_seeds(r, big, v, m_lambda_first, l), ll = over_seeds(r, big, v, m_lambda_last, l);
            if (isfinite(lf.mean))
                snprintf(x4, sizeof x4, "%.3f → %s", lf.mean, fmt_ci(x1, sizeof x1, ll, "%.3f"));
            else
                snprintf(x4, sizeof x4, "—");
            tb_printf(b, "| %s | %d | %s | %s | %s |\n", display(r, v), l, x4,
                      fmt_ci(x2, sizeof x2, over_seeds(r, big, v, m_sink, l), "%.3f"),
                      fmt_ci(x3, sizeof x3, over_seeds(r, big, v, m_rms, l), "%.3f"));
        }
    tb_printf(b, "\n");
}

static char *markdown(const report *r, const dt_scaling_study *st, int plots, const char *plot_note) {
    textbuf b = {0};
    tb_printf(&b, "# Scaling study: %s against %s on real text\n\nMade with:\n\n    %s\n\n", display(r, 0),
              display(r, 1), r->o->command ? r->o->command : "(the library call dt_study_run)");
    md_headline(&b, r, st);
    md_sizes(&b, r, st);
    md_variants(&b, r);
    md_protocol(&b, r);
    md_setup(&b, r);
    if (plots)
        tb_printf(&b, "## Plots\n\n![held-out loss against size](plots/loss.png)\n\n![held-out loss by "
                      "position](plots/position.png)\n\n");
    else
        tb_printf(&b, "## Plots\n\nNo plots: %s. The data files are in plots/.\n\n", plot_note);
    tb_printf(&b, "Every number of every run is in report.json and in runs/*/run.json.\n");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---------------------------------------------------------------- report.json */

static cJSON *interval_json(dt_stats_interval c) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const double v[4] = {c.mean, c.half, c.lo, c.hi};
    const char *k[4] = {"mean", "half", "lo", "hi"};
    for (int i = 0; i < 4; i++)
        if (!(isfinite(v[i]) ? cJSON_AddNumberToObject(o, k[i], v[i]) : cJSON_AddNullToObject(o, k[i]))) {
            cJSON_Delete(o);
            return NULL;
        }
    if (!cJSON_AddNumberToObject(o, "n", c.n)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *estimate_json(dt_estimate e) {
    dt_stats_interval c = {.n = e.n, .mean = e.value, .half = NAN, .lo = e.lo, .hi = e.hi};
    return interval_json(c);
}

static int add(cJSON *o, const char *key, cJSON *item) {
    if (!item) return 0;
    if (!cJSON_AddItemToObject(o, key, item)) {
        cJSON_Delete(item);
        return 0;
    }
    return 1;
}

static cJSON *report_json(const report *r, const dt_scaling_study *st, cJSON *plan) {
    const dt_study_options *o = r->o;
    cJSON *j = cJSON_CreateObject();
    if (!j) {
        cJSON_Delete(plan);
        return NULL;
    }
    int ok = add(j, "plan", plan) && (!o->command || cJSON_AddStringToObject(j, "command", o->command));
    cJSON *fit = ok ? cJSON_AddObjectToObject(j, "fit") : NULL;
    ok = fit && cJSON_AddStringToObject(fit, "kind_0", o->variants[0]) &&
         cJSON_AddStringToObject(fit, "kind_1", o->variants[1]) && add(fit, "a_0", estimate_json(st->a[0])) &&
         add(fit, "b_0", estimate_json(st->b[0])) && add(fit, "a_1", estimate_json(st->a[1])) &&
         add(fit, "b_1", estimate_json(st->b[1])) && cJSON_AddNumberToObject(fit, "fraction_at", st->fraction_at) &&
         add(fit, "fraction", estimate_json(st->fraction)) && add(fit, "crossing", estimate_json(st->crossing)) &&
         cJSON_AddBoolToObject(fit, "crossing_in_range", st->crossing_in_range) &&
         cJSON_AddNumberToObject(fit, "crossing_share", st->crossing_share) &&
         cJSON_AddNumberToObject(fit, "resamples", st->resamples);
    cJSON *sizes = ok ? cJSON_AddArrayToObject(j, "sizes") : NULL;
    ok = sizes != NULL;
    for (int i = 0; ok && i < o->n_sizes; i++) {
        cJSON *s = cJSON_CreateObject();
        ok = s && cJSON_AddItemToArray(sizes, s) && cJSON_AddStringToObject(s, "name", o->sizes[i].name) &&
             add(s, "difference", interval_json(st->diff[i]));
        cJSON *vs = ok ? cJSON_AddArrayToObject(s, "variants") : NULL;
        ok = vs != NULL;
        for (int v = 0; ok && v < o->n_variants; v++) {
            cJSON *x = cJSON_CreateObject();
            ok = x && cJSON_AddItemToArray(vs, x) && cJSON_AddStringToObject(x, "variant", o->variants[v]) &&
                 add(x, "heldout", interval_json(over_seeds(r, i, v, m_heldout, 0))) &&
                 add(x, "train", interval_json(over_seeds(r, i, v, m_train, 0))) &&
                 add(x, "gap", interval_json(over_seeds(r, i, v, m_gap, 0))) &&
                 add(x, "minus_first", interval_json(paired(r, i, v, 0, m_heldout, 0))) &&
                 add(x, "spikes", interval_json(over_seeds(r, i, v, m_spikes, 0))) &&
                 add(x, "diverged", interval_json(over_seeds(r, i, v, m_diverged, 0))) &&
                 add(x, "grad_norm_max", interval_json(over_seeds(r, i, v, m_gn_max, 0)));
        }
    }
    cJSON *runs = ok ? cJSON_AddArrayToObject(j, "runs") : NULL;
    ok = runs != NULL;
    for (int i = 0; ok && i < r->n; i++) {
        cJSON *copy = cJSON_Duplicate(r->s[i].json, 1);
        ok = copy && cJSON_AddItemToArray(runs, copy);
        if (!ok) cJSON_Delete(copy);
    }
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* ---------------------------------------------------------------- plots */

static int write_text(const char *dir, const char *name, const textbuf *b, dt_error *err) {
    char path[4400];
    if (dt_pathf(path, sizeof path, err, "%s/%s", dir, name)) return -1;
    return tb_write(path, b, err);
}

/* plots/loss.dat (kind params loss per run), position.dat (bin centre, mean loss per variant), plots.gp;
 * the PNGs when gnuplot runs. 1 with PNGs, 0 without (note says why), -1 on a write error. */
static int write_plots(const report *r, const dt_scaling_study *st, char *note, size_t note_n, dt_error *err) {
    const dt_study_options *o = r->o;
    char dir[4200];
    if (dt_pathf(dir, sizeof dir, err, "%s/plots", o->out)) return -1;
    if (dir_ensure(dir, err) != 0) return -1;
    textbuf loss = {0}, pos = {0}, gp = {0};
    tb_printf(&loss, "# variant non-embedding-params heldout-loss (one line per run)\n");
    for (int v = 0; v < o->n_variants; v++) {
        tb_printf(&loss, "# %s\n", o->variants[v]);
        for (int i = 0; i < o->n_sizes; i++)
            for (int s = 0; s < o->seeds; s++) {
                const run_summary *x = at(r, i, v, s);
                if (isfinite(x->heldout)) tb_printf(&loss, "%d %.6g %.6g\n", v, x->nonembedding, x->heldout);
            }
        tb_printf(&loss, "\n\n");
    }
    const int big = o->n_sizes - 1;
    tb_printf(&pos, "# bin-centre then the mean held-out loss of each variant at %s\n", o->sizes[big].name);
    const run_summary *s0 = at(r, big, 0, 0);
    for (int k = 0; k < s0->n_bins; k++) {
        tb_printf(&pos, "%.1f", 0.5 * (s0->bin_first[k] + s0->bin_last[k]));
        for (int v = 0; v < o->n_variants; v++) tb_printf(&pos, " %.6g", over_seeds(r, big, v, m_bin, k).mean);
        tb_printf(&pos, "\n");
    }
    tb_printf(&gp, "set terminal pngcairo size 900,600\nset key top right\nset grid\n"
                   "set output 'loss.png.tmp'\nset logscale xy\nset xlabel 'non-embedding parameters'\n"
                   "set ylabel 'held-out loss (nats/token)'\nset title 'Held-out loss against size (fits: loss = e^a N^b)'\n");
    /* a fit that does not exist (too few sizes measured) is not drawn: gnuplot stops at "nan" */
    for (int k = 0; k < 2; k++)
        if (isfinite(st->fit[k].a) && isfinite(st->fit[k].b))
            tb_printf(&gp, "f%d(x) = exp(%.9g + %.9g * log(x))\n", k, st->fit[k].a, st->fit[k].b);
    tb_printf(&gp, "plot ");
    for (int v = 0; v < o->n_variants; v++)
        tb_printf(&gp, "%s'loss.dat' index %d using 2:3 with points pt %d lc %d title '%s'", v ? ", " : "", v, 7 - v,
                  v + 1, display(r, v));
    for (int k = 0; k < 2; k++)
        if (isfinite(st->fit[k].a) && isfinite(st->fit[k].b))
            tb_printf(&gp, ", f%d(x) with lines lc %d title '%s fit'", k, k + 1, display(r, k));
    tb_printf(&gp, "\n");
    tb_printf(&gp, "set output 'position.png.tmp'\nunset logscale\nset xlabel 'position in the context'\n"
                   "set title 'Held-out loss by position (%s)'\nplot ",
              o->sizes[big].name);
    for (int v = 0; v < o->n_variants; v++)
        tb_printf(&gp, "%s'position.dat' using 1:%d with linespoints lc %d title '%s'", v ? ", " : "", v + 2, v + 1,
                  display(r, v));
    tb_printf(&gp, "\n");
    int rc = write_text(dir, "loss.dat", &loss, err) || write_text(dir, "position.dat", &pos, err) ||
                     write_text(dir, "plots.gp", &gp, err)
                 ? -1
                 : 0;
    free(loss.s), free(pos.s), free(gp.s);
    if (rc != 0) return -1;
    const char *names[2] = {"loss", "position"};
    return pl_run_gnuplot(dir, names, 2, note, note_n, err);
}

/* ---------------------------------------------------------------- waiting and writing */

int study_wait_for_runs(const study_run *runs, int n, volatile int *stop, const dt_study_options *o, dt_error *err) {
    int reported = -1;
    for (;;) {
        int missing = 0;
        const char *first = NULL;
        for (int i = 0; i < n; i++) {
            char path[4400];
            snprintf(path, sizeof path, "%s/run.json", runs[i].dir);
            if (access(path, F_OK) != 0) {
                if (!first) first = runs[i].dir;
                missing++;
            }
        }
        if (missing == 0) return 0;
        if (*stop) return dt_fail_code(err, DT_ERR_INTERRUPTED, "%s: stopped while %d run(s) of other ranks were "
                                                                "unfinished; the same command resumes the study",
                                       o->out, missing);
        if (missing != reported && o->progress) {
            char msg[4600];
            snprintf(msg, sizeof msg, "waiting for %d run(s) of other ranks (%s, ...)", missing, first);
            o->progress(o->progress_ctx, 1.0 - (double)missing / n, NAN, msg);
            reported = missing;
        }
        sleep(1);
    }
}

int study_report_write(const dt_study_options *o, const study_run *runs, int n, dt_error *err) {
    report r = {.o = o, .runs = runs, .n = n, .s = calloc((size_t)n, sizeof(run_summary))};
    if (!r.s) return dt_fail_oom(err, "out of memory for %d run summaries", n);
    int rc = 0;
    cJSON *plan = NULL, *j = NULL;
    char *md = NULL;
    for (int i = 0; i < n && rc == 0; i++) rc = load_summary(&runs[i], &r.s[i], err);
    dt_scaling_runs in;
    dt_scaling_study st;
    if (rc == 0) {
        fit_input(&r, &in);
        rc = dt_scaling_study_fit(&in, o->resamples, o->seed ^ 0xB007ull, &st, err);
    }
    char path[4200], note[512] = "";
    int plots = 0;
    if (rc == 0) plots = write_plots(&r, &st, note, sizeof note, err);
    if (plots < 0) rc = -1;
    if (rc == 0 && dt_pathf(path, sizeof path, err, "%s/study.json", o->out) == 0) plan = json_load_file(path, err);
    if (rc == 0 && !plan) rc = -1;
    if (rc == 0) {
        j = report_json(&r, &st, plan);
        plan = NULL;
        md = j ? markdown(&r, &st, plots, note) : NULL;
        if (!j || !md) rc = dt_fail_oom(err, "out of memory for the report");
    }
    if (rc == 0 && dt_pathf(path, sizeof path, err, "%s/report.json", o->out) == 0) rc = dt_an_write_json(path, j, err);
    else if (rc == 0) rc = -1;
    if (rc == 0 && dt_pathf(path, sizeof path, err, "%s/REPORT.md", o->out) == 0) {
        textbuf b = {.s = md, .n = strlen(md), .cap = strlen(md) + 1};
        rc = tb_write(path, &b, err);
    } else if (rc == 0) {
        rc = -1;
    }
    free(md);
    cJSON_Delete(j);
    for (int i = 0; i < n; i++) cJSON_Delete(r.s[i].json);
    free(r.s);
    return rc;
}
