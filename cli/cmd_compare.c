/* cmd_compare.c — `difftrans compare`: train a DIFF model and its parameter-matched baseline on the
 * same data, seed and token budget, run every analysis of analyze.h on both and write a report
 * (src/analysis/report.c) next to the paper's figures. This file parses, trains and orchestrates. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "analysis/analyze.h"
#include "analysis/needle.h"
#include "analysis/report.h"
#include "analysis/scaling.h"
#include "cli.h"

static void help(void) {
    printf("usage: difftrans compare --data FILE.txt --out REPORT_DIR [options]\n\n"
           "Trains a DIFF Transformer and its parameter-matched Transformer (same preset sizes, same data, seed\n"
           "and token budget) into REPORT_DIR/diff and REPORT_DIR/transformer, runs every analysis on both\n"
           "(final losses, lambda per layer, activation outliers and attention-logit quantisation on the held-out\n"
           "tail of the training text, gradient-norm statistics; with --needle also multi-needle retrieval and\n"
           "attention allocation) and writes REPORT_DIR/REPORT.md (tables next to the paper's figures, the\n"
           "command line that reproduces it), REPORT_DIR/report.json (all raw numbers) and, when gnuplot is on\n"
           "PATH, PNG plots in REPORT_DIR/plots.\n\n"
           "options:\n"
           "  --data FILE.txt   training text (required); its last 10%% is held out\n"
           "  --out DIR         report directory (created)\n"
           "  --preset NAME     DIFF preset; the baseline is its matched model [small] (%s)\n"
           "  --steps N         training steps per model [1000]\n"
           "  --batch B         sequences per step [16]\n"
           "  --seq T           bytes per sequence, also the analysis window [128]\n"
           "  --seed S          seed of both runs and of the needle set [1337]\n"
           "  --threads N       OpenMP threads [all cores]\n"
           "  --needle          generate a needle set from --data into DIR/needle, append its train.txt to the\n"
           "                    training text (DIR/train.txt) and evaluate retrieval and allocation on its test set\n"
           "  --quick           smoke test: preset tiny, 30 steps, batch 4, seq 64 (explicit options still win)\n"
           "  --scaling LIST    also train both kinds at these presets (comma-separated, e.g. tiny) with the same\n"
           "                    budget into DIR/scaling-PRESET/, fit loss against size per kind and report the\n"
           "                    fraction of the baseline's parameters DIFF needs for its loss (paper: ~65%%)\n"
           "  --quiet           no training progress\n",
           dt_config_preset_names());
}

/* argv joined with spaces; arguments with shell-special characters are single-quoted. */
static void join_command(char **argv, int argc, char *out, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(out, n, "difftrans");
    for (int i = 0; i < argc && k < n; i++) {
        const char *a = argv[i];
        int plain = *a != '\0';
        for (const char *p = a; *p; p++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=,:+@%", *p)) plain = 0;
        if (plain) {
            k += (size_t)snprintf(out + k, n - k, " %s", a);
            continue;
        }
        k += (size_t)snprintf(out + k, n - k, " '");
        for (const char *p = a; *p && k < n; p++)
            k += (size_t)(*p == '\'' ? snprintf(out + k, n - k, "'\\''") : snprintf(out + k, n - k, "%c", *p));
        if (k < n) k += (size_t)snprintf(out + k, n - k, "'");
    }
}

static int make_dir(const char *cmd, const char *what, const char *path) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return cli_error(cmd, "%s %s: cannot create the directory: %s", what, path, strerror(errno));
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return cli_error(cmd, "%s %s: not a directory", what, path);
    return 0;
}

/* DIR/train.txt = the data file followed by the needle set's train.txt, written atomically. */
static int write_train_text(const char *cmd, const char *data, const char *needle_train, const char *out) {
    dt_error err;
    dt_atomic_file f;
    if (dt_atomic_open(&f, out, &err) != 0) return cli_error(cmd, "%s", err.msg);
    const char *src[2] = {data, needle_train};
    for (int i = 0; i < 2; i++) {
        FILE *in = fopen(src[i], "rb");
        if (!in) {
            dt_atomic_abort(&f);
            return cli_error(cmd, "%s: cannot open: %s", src[i], strerror(errno));
        }
        char buf[65536];
        size_t got;
        int bad = 0;
        while ((got = fread(buf, 1, sizeof buf, in)) > 0)
            if (fwrite(buf, 1, got, (FILE *)f.fp) != got) bad = 1;
        if (ferror(in)) bad = 2;
        fclose(in);
        if (bad) {
            dt_atomic_abort(&f);
            return cli_error(cmd, "%s: %s failed", bad == 2 ? src[i] : out, bad == 2 ? "reading" : "writing");
        }
    }
    if (dt_atomic_commit(&f, &err) != 0) return cli_error(cmd, "%s", err.msg);
    return 0;
}

/* --scaling tiny,medium → names, each a known preset */
static int parse_presets(const char *cmd, const char *list, char names[][32], int *n) {
    const char *p = list;
    *n = 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        dt_config c;
        dt_error err;
        if (len == 0 || len >= 32) return -(cli_error(cmd, "--scaling '%s': empty or overlong preset name", list) != 0);
        if (*n == RP_MAX_SIZES - 1) return -(cli_error(cmd, "--scaling '%s': at most %d presets", list, RP_MAX_SIZES - 1) != 0);
        memcpy(names[*n], p, len);
        names[*n][len] = '\0';
        if (dt_config_preset(&c, names[*n], DT_ARCH_DIFF, &err) != 0) return -(cli_error(cmd, "--scaling: %s", err.msg) != 0);
        (*n)++;
        if (!comma) return 0;
        p = comma + 1;
    }
}

/* Trains the DIFF model and its matched baseline: same data, seed and token budget. */
static int train_pair(const char *cmd, const dt_config *diff_cfg, const char *dirs[2], const char *data, int steps,
                      int batch, int seq, uint64_t seed, int quick, int quiet, float *val_fraction) {
    const dt_config base_cfg = dt_config_matched(diff_cfg);
    const dt_config *cfgs[2] = {diff_cfg, &base_cfg};
    const char *names[2] = {"DIFF", "Transformer"};
    dt_train_options o;
    dt_error err;
    for (int i = 0; i < 2; i++) {
        dt_train_defaults(&o);
        o.data_path = data;
        o.out_dir = dirs[i];
        o.cfg = *cfgs[i];
        o.steps = steps;
        o.batch = batch;
        o.seq = seq;
        o.seed = seed;
        o.warmup = steps / 10 < 50 ? steps / 10 : 50;
        o.eval_interval = steps / 20 > 0 ? steps / 20 : 1;
        o.eval_batches = quick ? 2 : 8;
        o.save_interval = 0;
        o.quiet = quiet;
        if (!quiet) fprintf(stderr, "compare: training %s into %s (%d steps, batch %d, seq %d, seed %llu)\n", names[i],
                            dirs[i], steps, batch, seq, (unsigned long long)seed);
        if (dt_train(&o, &err) != 0) return cli_error(cmd, "training %s: %s", names[i], err.msg);
    }
    *val_fraction = o.val_fraction;
    return 0;
}

/* Parameters of a config (the layout's count; nothing is initialised). */
static double config_params(const dt_config *c) {
    dt_model m;
    dt_error err;
    if (dt_model_create(&m, c, &err) != 0) return NAN;
    double n = (double)m.n_params;
    dt_model_free(&m);
    return n;
}

int cmd_compare(int argc, char **argv) {
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'},  {"out", required_argument, 0, 'o'},
        {"preset", required_argument, 0, 'p'}, {"steps", required_argument, 0, 's'},
        {"batch", required_argument, 0, 'b'}, {"seq", required_argument, 0, 't'},
        {"seed", required_argument, 0, 'r'},  {"threads", required_argument, 0, 'j'},
        {"needle", no_argument, 0, 'n'},      {"quick", no_argument, 0, 'Q'},
        {"scaling", required_argument, 0, 'S'},
        {"quiet", no_argument, 0, 'q'},       {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "compare", *data = NULL, *out = NULL, *preset = NULL;
    int steps = 0, batch = 0, seq = 0, threads = 0, use_needle = 0, quick = 0, quiet = 0, n_sizes = 0;
    char sizes[RP_MAX_SIZES - 1][32];
    uint64_t seed = 1337;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'd': data = optarg; break;
        case 'o': out = optarg; break;
        case 'p': preset = optarg; break;
        case 's': bad = parse_int(cmd, "--steps", optarg, 1, 100000000, &steps); break;
        case 'b': bad = parse_int(cmd, "--batch", optarg, 1, 4096, &batch); break;
        case 't': bad = parse_int(cmd, "--seq", optarg, 2, 1 << 20, &seq); break;
        case 'r': bad = parse_u64(cmd, "--seed", optarg, &seed); break;
        case 'j': bad = parse_int(cmd, "--threads", optarg, 1, 1024, &threads); break;
        case 'n': use_needle = 1; break;
        case 'S':
            if (parse_presets(cmd, optarg, sizes, &n_sizes) != 0) return 1;
            break;
        case 'Q': quick = 1; break;
        case 'q': quiet = 1; break;
        case 'h': help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind < argc) return cli_error(cmd, "unexpected argument '%s' (see difftrans compare --help)", argv[optind]);
    if (!data) return cli_error(cmd, "--data FILE.txt is required (see difftrans compare --help)");
    if (!out) return cli_error(cmd, "--out REPORT_DIR is required (see difftrans compare --help)");
    if (!preset) preset = quick ? "tiny" : "small";
    if (!steps) steps = quick ? 30 : 1000;
    if (!batch) batch = quick ? 4 : 16;
    if (!seq) seq = quick ? 64 : 128;
    cli_set_threads(threads);

    dt_error err;
    dt_config dcfg;
    if (dt_config_preset(&dcfg, preset, DT_ARCH_DIFF, &err) != 0) return cli_error(cmd, "--preset: %s", err.msg);
    if (seq > dcfg.max_position_embeddings)
        return cli_error(cmd, "--seq %d: more than preset %s's max_position_embeddings %d", seq, preset,
                         dcfg.max_position_embeddings);
    for (int i = 0; i < n_sizes; i++) {
        dt_config c;
        dt_config_preset(&c, sizes[i], DT_ARCH_DIFF, &err);
        if (seq > c.max_position_embeddings)
            return cli_error(cmd, "--scaling %s: --seq %d is more than its max_position_embeddings %d", sizes[i], seq,
                             c.max_position_embeddings);
    }
    {
        int *tok = NULL;
        size_t n = 0;
        if (dt_text_load(data, &tok, &n, &err) != 0) return cli_error(cmd, "--data: %s", err.msg);
        free(tok);
    }
    if (make_dir(cmd, "--out", out) != 0) return 1;

    char command[8192];
    join_command(argv, argc, command, sizeof command);

    char dir_diff[4200], dir_base[4200], train_txt[4200], needle_dir[4200], needle_train[4300];
    snprintf(dir_diff, sizeof dir_diff, "%s/diff", out);
    snprintf(dir_base, sizeof dir_base, "%s/transformer", out);
    snprintf(needle_dir, sizeof needle_dir, "%s/needle", out);
    const char *train_path = data;
    needle_testset ts = {0};
    needle_params np;
    needle_params_default(&np);
    if (use_needle) {
        /* Samples (context + questions with answers) must fit the model's context. */
        int maxp = dcfg.max_position_embeddings;
        int ctx = maxp * 5 / 8;
        if (ctx > 4096) ctx = 4096;
        int needles = ctx / NEEDLE_UNIT_MAX;
        if (needles > 6) needles = 6;
        int queries = (maxp - ctx) / 64;
        if (queries > 2) queries = 2;
        if (queries > needles) queries = needles;
        if (needles < 1 || queries < 1)
            return cli_error(cmd, "--needle: preset %s's context (%d bytes) is too short for a needle set", preset, maxp);
        np.n_contexts = 1;
        np.contexts[0] = ctx;
        np.needles = needles;
        np.queries = queries;
        np.n_train = quick ? 40 : 400;
        np.n_test = quick ? 10 : 50;
        np.seed = seed;
        if (needle_params_validate(&np, &err) != 0) return cli_error(cmd, "--needle: %s", err.msg);
        needle_corpus corpus = {0};
        if (needle_corpus_load(&corpus, data, &err) != 0) return cli_error(cmd, "--needle: %s", err.msg);
        int rc = needle_write_dataset(&np, &corpus, data, needle_dir, &err);
        needle_corpus_free(&corpus);
        if (rc != 0) return cli_error(cmd, "--needle: %s", err.msg);
        if (!quiet) fprintf(stderr, "compare: needle set written to %s (context %d, %d needles, %d queries)\n",
                            needle_dir, ctx, needles, queries);
        snprintf(needle_train, sizeof needle_train, "%s/train.txt", needle_dir);
        snprintf(train_txt, sizeof train_txt, "%s/train.txt", out);
        if (write_train_text(cmd, data, needle_train, train_txt) != 0) return 1;
        train_path = train_txt;
        if (needle_load_testset(&ts, needle_dir, &err) != 0) return cli_error(cmd, "--needle: %s", err.msg);
        for (int i = 0; i < ts.n; i++)
            if (ts.samples[i].text_length > maxp) {
                cli_error(cmd, "--needle: %s sample %d is %d bytes, more than the model's context %d", ts.path, i,
                          ts.samples[i].text_length, maxp);
                needle_testset_free(&ts);
                return 1;
            }
    }

    /* Two runs: same data, seed and token budget. */
    const char *dirs[2] = {dir_diff, dir_base}, *names[2] = {"DIFF", "Transformer"};
    float val_fraction = 0.1f;
    if (train_pair(cmd, &dcfg, dirs, train_path, steps, batch, seq, seed, quick, quiet, &val_fraction) != 0) {
        needle_testset_free(&ts);
        return 1;
    }
    /* --scaling: the same pair at other sizes, for the loss-against-size fit */
    for (int i = 0; i < n_sizes; i++) {
        dt_config c;
        char sd[2][4300];
        const char *sdirs[2] = {sd[0], sd[1]};
        dt_config_preset(&c, sizes[i], DT_ARCH_DIFF, &err);
        snprintf(sd[0], sizeof sd[0], "%s/scaling-%s", out, sizes[i]);
        if (make_dir(cmd, "--out", sd[0]) != 0) {
            needle_testset_free(&ts);
            return 1;
        }
        snprintf(sd[0], sizeof sd[0], "%s/scaling-%s/diff", out, sizes[i]);
        snprintf(sd[1], sizeof sd[1], "%s/scaling-%s/transformer", out, sizes[i]);
        if (train_pair(cmd, &c, sdirs, train_path, steps, batch, seq, seed, quick, quiet, &val_fraction) != 0) {
            needle_testset_free(&ts);
            return 1;
        }
    }

    /* The held-out tail: dt_train's validation split of the same text. */
    int *tok = NULL;
    size_t n = 0;
    if (dt_text_load(train_path, &tok, &n, &err) != 0) {
        needle_testset_free(&ts);
        return cli_error(cmd, "%s", err.msg);
    }
    size_t n_train = n - (size_t)((double)n * val_fraction);
    size_t tail = n - n_train;
    if (tail < (size_t)seq + 1) {
        free(tok);
        needle_testset_free(&ts);
        return cli_error(cmd, "%s: the held-out tail is %zu bytes, fewer than --seq + 1 = %d", train_path, tail,
                         seq + 1);
    }
    int windows = quick ? 4 : 8;
    size_t fit = (tail - 1) / (size_t)seq;
    if ((size_t)windows > fit) windows = (int)fit;
    rp_analysis_options ao = {.tokens = tok + n_train, .n = tail, .seq = seq, .windows = windows, .n_bits = 6,
                              .bits = {16, 8, 6, 5, 4, 3}, .needle = use_needle ? &ts : NULL,
                              .allocation_samples = quick ? 10 : 50, .quiet = quiet};
    rp_model res[2];
    memset(res, 0, sizeof res);
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++)
        if (rp_analyze_model(&res[i], dirs[i], names[i], &ao, &err) != 0) rc = cli_error(cmd, "%s", err.msg);
    if (rc == 0) {
        rp_report r = {.command = command, .seed = seed, .preset = preset, .data = data, .train_text = train_path,
                       .needle_dir = use_needle ? needle_dir : NULL, .steps = steps, .batch = batch, .seq = seq,
                       .heldout_bytes = tail, .windows = windows, .needle_context = np.contexts[0],
                       .needle_needles = np.needles, .needle_queries = np.queries, .diff = &res[0],
                       .base = &res[1]};
        /* sizes for the fit: the main pair, then each --scaling pair */
        r.n_sizes = 1 + n_sizes;
        r.size_names[0] = preset;
        for (int k = 0; k < 2; k++) {
            r.size_params[0][k] = (double)res[k].n_params;
            r.size_loss[0][k] = res[k].training.final_val_loss;
        }
        for (int i = 0; i < n_sizes && rc == 0; i++) {
            dt_config c;
            dt_config_preset(&c, sizes[i], DT_ARCH_DIFF, &err);
            const dt_config bc = dt_config_matched(&c);
            r.size_names[1 + i] = sizes[i];
            for (int k = 0; k < 2 && rc == 0; k++) {
                char d[4400];
                an_training t;
                snprintf(d, sizeof d, "%s/scaling-%s/%s", out, sizes[i], k ? "transformer" : "diff");
                r.size_params[1 + i][k] = config_params(k ? &bc : &c);
                if (an_training_load(d, &t, &err) != 0) rc = cli_error(cmd, "%s", err.msg);
                else {
                    r.size_loss[1 + i][k] = t.final_val_loss;
                    an_training_free(&t);
                }
            }
        }
        if (rc != 0) {
        } else if (rp_write(&r, out, &err) != 0)
            rc = cli_error(cmd, "%s", err.msg);
        else
            printf("compare: wrote %s/REPORT.md and %s/report.json\n", out, out);
    }
    for (int i = 0; i < 2; i++) rp_model_free(&res[i]);
    free(tok);
    needle_testset_free(&ts);
    return rc;
}
