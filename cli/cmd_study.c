/* cmd_study.c — `difftrans study`: option parsing, signals and progress over dt_study_run
 * (src/analysis/study.c), which trains every run of a scaling study, measures it and writes the report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "difftrans_analysis.h"
#include "cli.h"

#define DEFAULT_COMM_TIMEOUT 120.0

static volatile int stop_requested; /* SIGINT/SIGTERM: every run saves its checkpoint and the study stops */

static void help(void) {
    dt_study_options d;
    dt_study_options_default(&d);
    char sizes[128] = "";
    for (int i = 0; i < d.n_sizes; i++)
        snprintf(sizes + strlen(sizes), sizeof sizes - strlen(sizes), "%s%s", i ? "," : "", d.sizes[i].name);
    printf("usage: difftrans study --tokens DATASET --out STUDY_DIR [options]\n\n"
           "The paper's scaling claim on your data: trains DIFF and its parameter-matched Transformer (and any\n"
           "other --variants) at several sizes x --seeds seeds, with the same number of training tokens per\n"
           "non-embedding parameter at every size, measures every run on the dataset's held-out split (and on\n"
           "its training split, for the gap), and writes STUDY_DIR/REPORT.md, report.json and plots/: per size\n"
           "the paired DIFF - Transformer held-out loss with its 95%% interval, the power-law fits of loss on\n"
           "non-embedding parameters (as `compare --scaling` and `analyze scaling` fit them) and the fraction of\n"
           "the Transformer's parameters DIFF needs for the same loss with bootstrap intervals, where\n"
           "the curves cross, and the reproduction protocol (training vs held-out loss, loss by position, loss\n"
           "spikes and gradient norms, lambda over training, attention-sink mass, head-context RMS).\n\n"
           "A study resumes: run the same command again after Ctrl-C, a kill or a reboot, and it continues from\n"
           "the runs that finished and the checkpoint of each unfinished one (saved every tenth of a run).\n"
           "scripts/study-corpus.sh builds the default corpus, tokenizer and DATASET from Debian packages.\n\n"
           "options:\n"
           "  --tokens DATASET       a `difftrans tokenize` dataset: train split trains, val split is held out\n"
           "  --out DIR              the study directory (created, or resumed when it holds this study)\n"
           "  --sizes LIST           2 to 8 model sizes, smallest first [%s]: %s\n"
           "  --variants LIST        2 to 8 models at every size; the first two are fitted against each\n"
           "                         other [diff,transformer]; names: %s\n"
           "  --seeds K              runs per size and variant (seed S + k for run k) [%d]\n"
           "  --seed S               [%llu]\n"
           "  --tokens-per-param X   training tokens per non-embedding parameter of the size's DIFF model [%g]\n"
           "  --batch B              sequences per step [%d]\n"
           "  --seq T                tokens per sequence (the context) [%d]\n"
           "  --lr LR                peak learning rate of every run [%g]\n"
           "  --eval-windows N       windows of T tokens per measured loss [%d]\n"
           "  --bins N               held-out loss by position: bins [%d]\n"
           "  --resamples N          bootstrap resamples [%d]\n"
           "  --jobs N               runs at once, sharing --threads [%d]\n"
           "  --threads N            OpenMP threads in all [all cores]\n"
           "  --comm-timeout S       under mpirun: a rank that stops responding ends the job after S seconds [%g]\n"
           "  --quiet                no progress lines\n\n"
           "Under mpirun -np N the runs are spread over the ranks (largest first, to the least loaded rank); the\n"
           "study directory must be on a file system every rank sees, and rank 0 writes the report when every\n"
           "run is measured. Exit status 9: stopped by a signal (the same command resumes).\n",
           sizes, dt_study_size_names(), dt_cmp_variant_names(), d.seeds, (unsigned long long)d.seed,
           d.tokens_per_param, d.batch, d.seq, (double)d.lr, d.eval_windows, d.n_bins, d.resamples, d.jobs,
           DEFAULT_COMM_TIMEOUT);
}

typedef struct {
    int tty;
} progress_state;

static void print_progress(void *ctx, double done, double eta_s, const char *msg) {
    progress_state *ps = ctx;
    char eta[32];
    cli_format_eta(eta_s, eta, sizeof eta);
    fprintf(stderr, "%sstudy: %3.0f%% | ETA %s | %s%s", ps->tty ? "\r\033[K" : "", 100 * done, eta, msg,
            ps->tty ? "" : "\n");
}

/* The library's fields and the flags that set them, for its messages. */
static const cli_flag FLAGS[] = {
    {"tokens", "--tokens"},   {"out", "--out"},           {"n_sizes", "--sizes"},
    {"sizes", "--sizes"},     {"n_variants", "--variants"}, {"variants", "--variants"},
    {"seeds", "--seeds"},     {"tokens_per_param", "--tokens-per-param"}, {"batch", "--batch"},
    {"seq", "--seq"},         {"lr", "--lr"},             {"eval_windows", "--eval-windows"},
    {"n_bins", "--bins"},     {"resamples", "--resamples"},
};

int cmd_study(int argc, char **argv) {
    static const struct option opts[] = {
        {"tokens", required_argument, 0, 'D'},       {"out", required_argument, 0, 'o'},
        {"sizes", required_argument, 0, 'S'},        {"variants", required_argument, 0, 'V'},
        {"seeds", required_argument, 0, 'K'},        {"seed", required_argument, 0, 'r'},
        {"tokens-per-param", required_argument, 0, 'P'}, {"batch", required_argument, 0, 'b'},
        {"seq", required_argument, 0, 't'},          {"lr", required_argument, 0, 'l'},
        {"eval-windows", required_argument, 0, 'E'}, {"bins", required_argument, 0, 'B'},
        {"resamples", required_argument, 0, 'R'},    {"jobs", required_argument, 0, 'J'},
        {"threads", required_argument, 0, 'j'},      {"comm-timeout", required_argument, 0, 'C'},
        {"quiet", no_argument, 0, 'q'},              {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "study";
    dt_study_options o;
    dt_study_options_default(&o);
    char variants[DT_STUDY_MAX_VARIANTS][32];
    int threads = 0, quiet = 0, c;
    float tpp = NAN, comm_timeout = (float)DEFAULT_COMM_TIMEOUT;
    dt_error err;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'D': o.tokens = optarg; break;
        case 'o': o.out = optarg; break;
        case 'S':
            if (dt_study_parse_sizes(optarg, o.sizes, &o.n_sizes, &err) != 0) return cli_fail_flags(cmd, &err, FLAGS, (int)(sizeof FLAGS / sizeof *FLAGS));
            break;
        case 'V':
            bad = cli_split_list(cmd, "--variants", optarg, variants, DT_STUDY_MAX_VARIANTS, &o.n_variants);
            for (int i = 0; !bad && i < o.n_variants; i++) o.variants[i] = variants[i];
            break;
        case 'K': bad = parse_int(cmd, "--seeds", optarg, 1, DT_STUDY_MAX_SEEDS, &o.seeds); break;
        case 'r': bad = parse_u64(cmd, "--seed", optarg, &o.seed); break;
        case 'P': bad = parse_float(cmd, "--tokens-per-param", optarg, 1e-6, 1e4, &tpp); break;
        case 'b': bad = parse_int(cmd, "--batch", optarg, 1, 1 << 20, &o.batch); break;
        case 't': bad = parse_int(cmd, "--seq", optarg, 2, 1 << 20, &o.seq); break;
        case 'l': bad = parse_float(cmd, "--lr", optarg, 1e-9, 0.999, &o.lr); break;
        case 'E': bad = parse_int(cmd, "--eval-windows", optarg, 1, 1 << 20, &o.eval_windows); break;
        case 'B': bad = parse_int(cmd, "--bins", optarg, 1, DT_AN_PROTO_MAX_BINS, &o.n_bins); break;
        case 'R': bad = parse_int(cmd, "--resamples", optarg, 100, 1000000, &o.resamples); break;
        case 'J': bad = parse_int(cmd, "--jobs", optarg, 1, 64, &o.jobs); break;
        case 'j': bad = parse_int(cmd, "--threads", optarg, 1, 4096, &threads); break;
        case 'C': bad = parse_float(cmd, "--comm-timeout", optarg, 1, 1e6, &comm_timeout); break;
        case 'q': quiet = 1; break;
        case 'h': help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind < argc) return cli_error(cmd, "unexpected argument '%s' (see difftrans study --help)", argv[optind]);
    if (!o.tokens)
        return cli_error(cmd, "--tokens DATASET is required (a `difftrans tokenize` dataset; scripts/study-corpus.sh "
                              "makes the default one)");
    if (!o.out) return cli_error(cmd, "--out STUDY_DIR is required (see difftrans study --help)");
    char marker[4200], plan[4200];
    snprintf(marker, sizeof marker, "%s/report.json", o.out);
    snprintf(plan, sizeof plan, "%s/study.json", o.out);
    if (access(marker, F_OK) == 0 && access(plan, F_OK) != 0) /* a comparison's report, not a study's */
        return cli_error(cmd, "--out %s: holds a comparison's report (report.json); give the study a directory of "
                              "its own",
                         o.out);
    snprintf(marker, sizeof marker, "%s/config.json", o.out);
    if (access(marker, F_OK) == 0) /* a checkpoint (a training run's, say): the study would grow inside it */
        return cli_error(cmd, "--out %s: holds a model (config.json); give the study a directory of its own", o.out);
    if (!isnan(tpp)) o.tokens_per_param = tpp;
    o.threads = threads;
    char command[8192];
    cli_join_command(argv, argc, command, sizeof command);
    o.command = command;
    progress_state ps = {.tty = isatty(STDERR_FILENO)};
    if (!quiet) {
        o.progress = print_progress;
        o.progress_ctx = &ps;
    }
    cli_set_threads(threads);

    dt_comm *comm = NULL;
    if (dt_comm_create(&comm, comm_timeout, &err) != 0) return cli_fail(cmd, &err);
    o.comm = dt_comm_size(comm) > 1 ? comm : NULL;
    if (!threads && o.comm) o.threads = dt_comm_default_threads(comm);
    if (dt_comm_rank(comm) != 0) o.progress = NULL; /* rank 0 speaks for the job */
    cli_catch_stop_signals(&stop_requested);
    o.stop = &stop_requested;
    int rc = dt_study_run(&o, &err);
    cli_default_stop_signals();
    if (!quiet && ps.tty) fputc('\n', stderr);
    const int rank = dt_comm_rank(comm);
    dt_comm_free(comm);
    if (rc != 0) return cli_fail_flags(cmd, &err, FLAGS, (int)(sizeof FLAGS / sizeof *FLAGS));
    if (rank == 0) printf("study: wrote %s/REPORT.md, %s/report.json and %s/plots\n", o.out, o.out, o.out);
    return 0;
}
