/* cmd_compare.c — `difftrans compare`: option parsing and progress printing over dt_cmp_run
 * (src/analysis/compare.c), which trains the variants, runs the analyses and writes the report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "difftrans_analysis.h"
#include "cli.h"

static volatile int stop_requested; /* SIGINT/SIGTERM: every training saves its checkpoint and compare stops */

/* The fields of the comparison's plan (compare.json) and the flags that set them, for a refused resume. */
static const cli_flag PLAN_FLAGS[] = {
    {"preset", "--preset"},     {"steps", "--steps"},         {"batch", "--batch"},
    {"seq", "--seq"},           {"lr", "--lr"},               {"seed", "--seed"},
    {"seeds", "--seeds"},       {"variants", "--ablations"},  {"tasks", "--tasks"},
    {"task_ratio", "--task-ratio"}, {"task_examples", "--quick"}, {"curve_points", "--quick"},
    {"needle", "--needle"},     {"quick", "--quick"},         {"sizes", "--scaling"},
    {"data_kind", "--data/--tokens"}, {"data_fingerprint", "--data/--tokens"},
    {"tokenizer_fingerprint", "--tokenizer"},
};

static void help(void) {
    dt_cmp_options d, q;
    dt_cmp_options_default(&d, 0);
    dt_cmp_options_default(&q, 1);
    printf("usage: difftrans compare --data FILE.txt --out REPORT_DIR [options]\n\n"
           "Trains a DIFF Transformer and its parameter-matched Transformer (same preset sizes, data, seeds and\n"
           "token budget) --seeds times each, with synthetic tasks mixed into training (multi-query associative\n"
           "recall, retrieval at depth, in-context classification with labels permuted per prompt), runs every\n"
           "analysis on every run (task accuracy and learning curves, final losses, lambda, activation outliers,\n"
           "attention-logit quantisation, in-context order sensitivity, gradient norms; with --needle also\n"
           "long-form multi-needle retrieval and attention allocation) and writes REPORT_DIR/REPORT.md (means with\n"
           "95%% confidence intervals next to the paper's figures, verdicts drawn from the intervals, the command\n"
           "line that reproduces it), REPORT_DIR/report.json (every number of every run) and, when gnuplot is on\n"
           "PATH, PNG plots in REPORT_DIR/plots.\n\n"
           "A comparison resumes: stopped by Ctrl-C or SIGTERM (exit status 9: every training saves a checkpoint),\n"
           "killed or rebooted, the same command continues it, keeping the runs that finished and continuing each\n"
           "other one from its checkpoint (saved every tenth of its steps); the analyses and the report are made\n"
           "again. REPORT_DIR/compare.json records the options that fix the runs (and the data's and tokenizer's\n"
           "contents): other options are refused, naming the first that differs; --force starts over.\n\n"
           "options:\n"
           "  --data FILE.txt    training text (or --tokens); its last 10%% is held out\n"
           "  --tokenizer PATH   read --data through this tokenizer.json (or its directory): every run is a BPE\n"
           "                     model of its vocabulary, the analyses and --needle read text through it, and\n"
           "                     each symbol of the synthetic tasks is one token of it\n"
           "  --tokens DATASET   instead of --data: a `difftrans tokenize` dataset (train split trains, val split\n"
           "                     is the held-out text; tasks as with --tokenizer); no --needle\n"
           "  --out DIR          report directory (created)\n"
           "  --preset NAME      DIFF preset; the baseline is its matched model [%s] (%s)\n"
           "  --steps N          training steps per run [%d]\n"
           "  --batch B          sequences per step [%d]\n"
           "  --seq T            tokens (bytes) per sequence, also the analysis window and the tasks'\n"
           "                     training length [%d]\n"
           "  --lr LR            peak learning rate [%g]\n"
           "  --seed S           seed of the first run of each model; run k uses S + k [%llu]\n"
           "  --seeds K          runs per model (different initialisation and data order) [%d]\n"
           "  --tasks LIST|none  tasks mixed into training and scored: recall,depth,icl [all]\n"
           "  --task-ratio R     fraction of training steps that are task batches [%g]\n"
           "  --ablations LIST   train these variants side by side instead of the pair (%s);\n"
           "                     the report has one table per measure with every variant and its parameters\n"
           "  --needle           also a long-form needle set from --data (DIR/needle) in training and evaluation,\n"
           "                     its context the longest whose samples fit the training window (--seq) in the\n"
           "                     runs' tokens; a --seq too short for one needle and its question is refused,\n"
           "                     naming the --seq that holds one (as bytes, --quick's %d are too few)\n"
           "  --scaling LIST     also train DIFF and Transformer at these presets (first seed) and fit loss\n"
           "                     against size (the fraction of the baseline's parameters DIFF needs; paper ~65%%;\n"
           "                     size: non-embedding parameters, as `study` and `analyze scaling` count it)\n"
           "  --quick            smoke test: %d steps, batch %d, seq %d, %d seeds, %d examples per cell\n"
           "  --threads N        OpenMP threads of each training and of the analyses [all cores]\n"
           "  --jobs N           trainings at once, each on one thread; 1: one at a time on --threads\n"
           "                     threads [%d]\n"
           "  --quiet            no progress lines\n"
           "  --force            start over in an --out that holds an earlier comparison: every run is trained\n"
           "                     again, whatever options it was made with (its report is removed first)\n",
           d.preset, dt_config_preset_names(), d.steps, d.batch, d.seq, (double)d.lr, (unsigned long long)d.seed,
           d.seeds, d.task_ratio, dt_cmp_variant_names(), q.seq, q.steps, q.batch, q.seq, q.seeds, q.task_examples,
           d.jobs);
}

typedef struct {
    int tty;
} progress_state;

static void print_progress(void *ctx, double done, double total, double eta_s, const char *msg) {
    progress_state *ps = ctx;
    char eta[32];
    cli_format_eta(eta_s, eta, sizeof eta);
    fprintf(stderr, "%scompare: %3.0f%% | ETA %s | %s%s", ps->tty ? "\r\033[K" : "", total > 0 ? 100 * done / total : 0,
            eta, msg, ps->tty ? "" : "\n");
}

int cmd_compare(int argc, char **argv) {
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'},       {"out", required_argument, 0, 'o'},
        {"preset", required_argument, 0, 'p'},     {"steps", required_argument, 0, 's'},
        {"batch", required_argument, 0, 'b'},      {"seq", required_argument, 0, 't'},
        {"seed", required_argument, 0, 'r'},       {"seeds", required_argument, 0, 'K'},
        {"threads", required_argument, 0, 'j'},    {"needle", no_argument, 0, 'n'},
        {"quick", no_argument, 0, 'Q'},            {"scaling", required_argument, 0, 'S'},
        {"ablations", required_argument, 0, 'A'},  {"tasks", required_argument, 0, 'T'},
        {"task-ratio", required_argument, 0, 'R'}, {"lr", required_argument, 0, 'l'},
        {"quiet", no_argument, 0, 'q'},            {"help", no_argument, 0, 'h'},
        {"force", no_argument, 0, 'F'},
        {"jobs", required_argument, 0, 'J'},       {"tokenizer", required_argument, 0, 'z'},
        {"tokens", required_argument, 0, 'D'},
        {0, 0, 0, 0},
    };
    const char *cmd = "compare", *preset = NULL, *data = NULL, *out = NULL, *tasks = NULL, *tokenizer = NULL,
               *tokens = NULL;
    int steps = 0, batch = 0, seq = 0, seeds = 0, threads = 0, needle = 0, quick = 0, quiet = 0, n_sizes = 0;
    int force = 0;
    int n_variants = 0, jobs = 0;
    float ratio = NAN, lr = NAN;
    char sizes[DT_CMP_MAX_SIZES][32], variants[DT_CMP_MAX_VARIANTS][32];
    uint64_t seed = 0;
    int have_seed = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'd': data = optarg; break;
        case 'z': tokenizer = optarg; break;
        case 'D': tokens = optarg; break;
        case 'o': out = optarg; break;
        case 'p': preset = optarg; break;
        case 's': bad = parse_int(cmd, "--steps", optarg, 1, 100000000, &steps); break;
        case 'b': bad = parse_int(cmd, "--batch", optarg, 1, 4096, &batch); break;
        case 't': bad = parse_int(cmd, "--seq", optarg, 2, 1 << 20, &seq); break;
        case 'r': bad = parse_u64(cmd, "--seed", optarg, &seed), have_seed = 1; break;
        case 'K': bad = parse_int(cmd, "--seeds", optarg, 1, DT_CMP_MAX_SEEDS, &seeds); break;
        case 'j': bad = parse_int(cmd, "--threads", optarg, 1, 1024, &threads); break;
        case 'n': needle = 1; break;
        case 'S': bad = cli_split_list(cmd, "--scaling", optarg, sizes, DT_CMP_MAX_SIZES, &n_sizes); break;
        case 'A': bad = cli_split_list(cmd, "--ablations", optarg, variants, DT_CMP_MAX_VARIANTS, &n_variants); break;
        case 'T': tasks = optarg; break;
        case 'R': bad = parse_float(cmd, "--task-ratio", optarg, 0, 1, &ratio); break;
        case 'l': bad = parse_float(cmd, "--lr", optarg, 1e-12, 10, &lr); break;
        case 'J': bad = parse_int(cmd, "--jobs", optarg, 1, 64, &jobs); break;
        case 'Q': quick = 1; break;
        case 'q': quiet = 1; break;
        case 'F': force = 1; break;
        case 'h': help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind < argc) return cli_error(cmd, "unexpected argument '%s' (see difftrans compare --help)", argv[optind]);
    if (!data && !tokens)
        return cli_error(cmd, "--data FILE.txt (or --tokens DATASET) is required (see difftrans compare --help)");
    if (data && tokens) return cli_error(cmd, "--data and --tokens: give one of them");
    if (tokenizer && tokens)
        return cli_error(cmd, "--tokenizer: the token dataset %s brings its own tokenizer.json", tokens);
    if (needle && tokens)
        return cli_error(cmd, "--needle: the needle set is made from text; give --data FILE.txt --tokenizer PATH "
                              "instead of --tokens");
    if (!out) return cli_error(cmd, "--out REPORT_DIR is required (see difftrans compare --help)");
    /* another command's report, or an earlier comparison's runs, are not overwritten by mistake */
    char marker[4200];
    snprintf(marker, sizeof marker, "%s/study.json", out);
    if (access(marker, F_OK) == 0)
        return cli_error(cmd, "--out %s: holds a study (study.json); give the comparison a directory of its own", out);
    snprintf(marker, sizeof marker, "%s/config.json", out);
    if (access(marker, F_OK) == 0) /* a checkpoint (a training run's, say): the runs would grow inside it */
        return cli_error(cmd, "--out %s: holds a model (config.json); give the comparison a directory of its own",
                         out);
    /* one with a plan (compare.json) resumes; a report without one is a comparison from before resuming */
    char plan[4200];
    snprintf(plan, sizeof plan, "%s/compare.json", out);
    snprintf(marker, sizeof marker, "%s/report.json", out);
    if (!force && access(plan, F_OK) != 0 && access(marker, F_OK) == 0)
        return cli_error(cmd, "--out %s: holds an earlier comparison (report.json) and its runs; choose a new "
                              "directory, or give --force to train and write them again",
                         out);

    dt_cmp_options o;
    dt_cmp_options_default(&o, quick);
    o.data = data;
    o.tokenizer = tokenizer;
    o.tokens = tokens;
    o.out = out;
    if (preset) o.preset = preset;
    if (steps) o.steps = steps;
    if (batch) o.batch = batch;
    if (seq) o.seq = seq;
    if (seeds) o.seeds = seeds;
    if (jobs) o.jobs = jobs;
    if (have_seed) o.seed = seed;
    if (!isnan(ratio)) o.task_ratio = ratio;
    if (!isnan(lr)) o.lr = lr;
    o.needle = needle;
    if (tasks) {
        o.tasks = 0;
        if (strcmp(tasks, "none") != 0) {
            char names[DT_N_TASKS][32];
            int n = 0;
            if (cli_split_list(cmd, "--tasks", tasks, names, DT_N_TASKS, &n) != 0) return 1;
            for (int i = 0; i < n; i++) {
                int k = dt_task_kind_parse(names[i]);
                if (k < 0) return cli_error(cmd, "--tasks: unknown task '%s' (recall, depth, icl or none)", names[i]);
                o.tasks |= 1 << k;
            }
        }
    }
    if (o.tasks == 0 && !isnan(ratio))
        return cli_error(cmd, "--task-ratio %g: no task is mixed into training (--tasks none)", ratio);
    if (n_variants) {
        o.n_variants = n_variants;
        for (int i = 0; i < n_variants; i++) o.variants[i] = variants[i];
    }
    o.n_sizes = n_sizes;
    memcpy(o.sizes, sizes, sizeof sizes);
    o.restart = force;
    char command[8192];
    cli_join_command(argv, argc, command, sizeof command);
    o.command = command;
    progress_state ps = {.tty = isatty(STDERR_FILENO)};
    if (!quiet) {
        o.progress = print_progress;
        o.progress_ctx = &ps;
    }
    cli_set_threads(threads);

    dt_error err;
    cli_catch_stop_signals(&stop_requested);
    o.stop = &stop_requested;
    int rc = dt_cmp_run(&o, &err);
    cli_default_stop_signals();
    if (!quiet && ps.tty) fputc('\n', stderr);
    if (rc != 0 && strstr(err.msg, "compare.json: the comparison there was planned with")) {
        const size_t n = strlen(err.msg);
        snprintf(err.msg + n, sizeof err.msg - n, ", or give --force to start it over");
        return cli_fail_flags(cmd, &err, PLAN_FLAGS, (int)(sizeof PLAN_FLAGS / sizeof *PLAN_FLAGS));
    }
    static const cli_flag needle_flags[] = {{"seq", "--seq"}, {"needle", "--needle"}};
    if (rc != 0 && strncmp(err.msg, "needle: seq ", 12) == 0) return cli_fail_flags(cmd, &err, needle_flags, 2);
    static const cli_flag restart_flag[] = {{"restart", "--force"}};
    if (rc != 0) return cli_fail_flags(cmd, &err, restart_flag, 1);
    printf("compare: wrote %s/REPORT.md and %s/report.json\n", out, out);
    return 0;
}
