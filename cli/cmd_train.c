/* cmd_train.c — `difftrans train`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define DEFAULT_COMM_TIMEOUT 120.0

static volatile int stop_requested; /* set by SIGINT/SIGTERM; the loop saves and returns */

static void help(void) {
    dt_train_options d;
    dt_train_defaults(&d);
    printf("usage: difftrans train (--data FILE.txt [--tokenizer PATH] | --tokens DATASET) --out DIR [options]\n\n"
           "Trains a language model and writes a checkpoint directory. --data: a text file, as bytes or\n"
           "encoded with --tokenizer (a tokenizer.json or its directory), the last --val-fraction held\n"
           "out; --tokens: a dataset made by `difftrans tokenize` (its train and val splits). With a\n"
           "tokenizer the model's vocab_size and bos/eos/pad ids are the tokenizer's (overriding the\n"
           "preset or --config), and every checkpoint holds tokenizer.json and tokenizer_config.json.\n\n"
           "model:\n"
           "  --arch diff|transformer|v2  DIFF Transformer (diffllama), baseline (llama) or DIFF V2 [diff]\n"
           "  --preset NAME             size preset: %s [small]\n"
           "  --config FILE             a config.json instead of a preset (its model_type wins)\n"
           "  --subln                   learnable per-head norm weight (subln.weight) for DIFF\n"
           "  --ablation LIST           model variants, comma-separated, applied in order: %s\n"
           "training:\n"
           "  --steps N                 optimizer steps [%d]\n"
           "  --batch N                 sequences per step [%d]\n"
           "  --grad-accum K            micro-batches per step, each of batch/K sequences [1]\n"
           "  --seq N                   tokens per sequence [%d]\n"
           "  --lr X                    peak learning rate [%g]\n"
           "  --min-lr-ratio X          cosine decay floor as a fraction of --lr [%g]\n"
           "  --warmup N                linear warm-up steps [%d]\n"
           "  --weight-decay X          AdamW decoupled decay on matrices only [%g]\n"
           "  --grad-clip X             clip the global gradient norm, 0 = off [%g]\n"
           "  --seed N                  initialisation and data-order seed [%llu]\n"
           "  --threads N               OpenMP threads [all cores]\n"
           "evaluation and checkpoints:\n"
           "  --val-fraction X          held-out fraction of --data [%g] (--tokens: the dataset's val split)\n"
           "  --eval-interval N         validate every N steps and after the first and last, 0 = after\n"
           "                            those two only [%d]\n"
           "  --eval-batches N          validation batches per evaluation [%d]\n"
           "  --save-interval N         checkpoint every N steps, 0 = only at the end [%d]\n"
           "  --resume                  continue the run in --out (same data, optimizer state, RNG);\n"
           "                            --steps may extend it, --grad-accum split its batch otherwise;\n"
           "                            other options come from the saved run (--data: where the same\n"
           "                            data is now)\n"
           "  --stop-at N               save and stop after step N (at most --steps), keeping the\n"
           "                            schedule of --steps\n"
           "  --force                   train a new model in an --out that holds one (replacing it)\n"
           "  --quiet                   no progress output\n"
           "data parallel (under mpirun -np N; N = 1 without mpirun):\n"
           "  --zero 0|1                1: ZeRO-1, each rank keeps the AdamW moments of 1/N of the\n"
           "                            parameters [0]\n"
           "  --no-overlap              reduce gradients after the backward instead of during it\n"
           "  --comm-timeout S          a rank that stops responding ends the job after S seconds [%g]\n\n"
           "Ctrl-C saves a checkpoint and exits; --resume continues exactly where it stopped.\n"
           "Writes DIR/metrics.jsonl: step, train/val loss, lr, grad norm, tokens/s, λ per layer.\n\n"
           "mpirun -np N difftrans train ... trains one model on N ranks. --batch is the global batch\n"
           "(a multiple of N × --grad-accum); rank r computes rows [r·B/N, (r+1)·B/N) of the batch one\n"
           "process would draw, so the run follows the one-process run to float rounding. Rank 0\n"
           "writes DIR; every rank reads it on --resume, which works with any N dividing the run's\n"
           "--batch (give --grad-accum where N × the saved one does not divide it). Threads per rank:\n"
           "--threads, else OMP_NUM_THREADS, else the cores the rank is bound to (or its machine's\n"
           "cores / its ranks there). Ranks started with a different program, options or data are\n"
           "refused at start-up.\n"
           "Faults: a rank that dies ends the job at once (mpirun reports it and stops the others);\n"
           "a rank that hangs ends it within --comm-timeout S seconds (rank 0 names the ranks that did\n"
           "not arrive; the others give up after 1.5·S + 2 s). The last checkpoint stays intact.\n"
           "Ctrl-C to mpirun reaches the ranks late (after --mca odls_base_sigkill_timeout S, 1 s, with\n"
           "SIGKILL S later) and mpirun exits 1; SIGINT or SIGTERM to one rank stops every rank at once.\n",
           dt_config_preset_names(), dt_ablation_names(), d.steps, d.batch, d.seq, (double)d.lr, (double)d.min_lr_ratio, d.warmup,
           (double)d.weight_decay, (double)d.grad_clip, (unsigned long long)d.seed, (double)d.val_fraction,
           d.eval_interval, d.eval_batches, d.save_interval, DEFAULT_COMM_TIMEOUT);
}

/* the options dt_train names in its refusals, and the flags that set them */
static const cli_flag train_flags[] = {
    {"steps", "--steps"},           {"batch", "--batch"},             {"grad_accum", "--grad-accum"},
    {"seq", "--seq"},               {"lr", "--lr"},                   {"min_lr_ratio", "--min-lr-ratio"},
    {"warmup", "--warmup"},         {"weight_decay", "--weight-decay"}, {"grad_clip", "--grad-clip"},
    {"val_fraction", "--val-fraction"}, {"eval_interval", "--eval-interval"}, {"eval_batches", "--eval-batches"},
    {"save_interval", "--save-interval"}, {"stop_at", "--stop-at"},   {"out_dir", "--out"},
    {"data_path", "--data"},        {"tokens_path", "--tokens"},      {"tokenizer_path", "--tokenizer"},
    {"resume", "--resume"},
};

int cmd_train(int argc, char **argv) {
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'},      {"out", required_argument, 0, 'o'},
        {"arch", required_argument, 0, 'a'},      {"preset", required_argument, 0, 'p'},
        {"config", required_argument, 0, 'c'},    {"subln", no_argument, 0, 'S'},
        {"ablation", required_argument, 0, 'X'},
        {"steps", required_argument, 0, 's'},     {"batch", required_argument, 0, 'b'},
        {"seq", required_argument, 0, 't'},       {"lr", required_argument, 0, 'l'},
        {"min-lr-ratio", required_argument, 0, 'm'}, {"warmup", required_argument, 0, 'w'},
        {"weight-decay", required_argument, 0, 'W'}, {"grad-clip", required_argument, 0, 'g'},
        {"seed", required_argument, 0, 'r'},      {"threads", required_argument, 0, 'j'},
        {"val-fraction", required_argument, 0, 'v'}, {"eval-interval", required_argument, 0, 'e'},
        {"eval-batches", required_argument, 0, 'E'}, {"save-interval", required_argument, 0, 'i'},
        {"grad-accum", required_argument, 0, 'K'}, {"resume", no_argument, 0, 'R'},
        {"stop-at", required_argument, 0, 'A'},   {"quiet", no_argument, 0, 'q'},
        {"force", no_argument, 0, 'F'},
        {"zero", required_argument, 0, 'Z'},      {"no-overlap", no_argument, 0, 'N'},
        {"comm-timeout", required_argument, 0, 'T'},
        {"tokens", required_argument, 0, 'k'},    {"tokenizer", required_argument, 0, 'z'},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0},
    };
    const char *cmd = "train", *preset = "small", *config_path = NULL, *ablations = NULL;
    const char *arch_flag = NULL; /* --arch as given: a --config file of another model_type is refused */
    dt_arch arch = DT_ARCH_DIFF;
    int threads = 0, subln = 0, force = 0, val_fraction_given = 0;
    char ignored[256] = ""; /* the options a resumed run keeps from its state file, as given */
    float comm_timeout = (float)DEFAULT_COMM_TIMEOUT;
    /* --resume anywhere on the line decides what the other options start from: a new run's
     * defaults or those of continuing the run in --out (the library's; the rest is read there) */
    int resume = 0, ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) resume |= ch == 'R';
    dt_train_options o;
    if (resume) dt_train_resume_defaults(&o);
    else dt_train_defaults(&o);
    optind = 1;
    int longind = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, &longind)) != -1) {
        int bad = 0;
        /* what a resume takes from train_state.json whatever the command line says */
        if (resume && ch != 0 && strchr("apcSXzbtlmwWgrveEi", ch)) {
            const size_t len = strlen(ignored);
            snprintf(ignored + len, sizeof ignored - len, "%s--%s", len ? ", " : "", opts[longind].name);
        }
        switch (ch) {
        case 'd': o.data_path = optarg; break;
        case 'k': o.tokens_path = optarg; break;
        case 'z': o.tokenizer_path = optarg; break;
        case 'o': o.out_dir = optarg; break;
        case 'a':
            if (cli_parse_arch(cmd, optarg, &arch)) return 1;
            arch_flag = optarg;
            break;
        case 'p': preset = optarg; break;
        case 'c': config_path = optarg; break;
        case 'S': subln = 1; break;
        case 'X': ablations = optarg; break;
        case 's': bad = parse_int(cmd, "--steps", optarg, 1, 100000000, &o.steps); break;
        case 'b': bad = parse_int(cmd, "--batch", optarg, 1, 4096, &o.batch); break;
        case 'K': bad = parse_int(cmd, "--grad-accum", optarg, 1, 4096, &o.grad_accum); break;
        case 't': bad = parse_int(cmd, "--seq", optarg, 1, 1 << 20, &o.seq); break;
        case 'l': bad = parse_float(cmd, "--lr", optarg, 1e-12, 10, &o.lr); break;
        case 'm': bad = parse_float(cmd, "--min-lr-ratio", optarg, 0, 1, &o.min_lr_ratio); break;
        case 'w': bad = parse_int(cmd, "--warmup", optarg, 0, 100000000, &o.warmup); break;
        case 'W': bad = parse_float(cmd, "--weight-decay", optarg, 0, 10, &o.weight_decay); break;
        case 'g': bad = parse_float(cmd, "--grad-clip", optarg, 0, 1e9, &o.grad_clip); break;
        case 'r': bad = parse_u64(cmd, "--seed", optarg, &o.seed); break;
        case 'j': bad = parse_int(cmd, "--threads", optarg, 1, 1024, &threads); break;
        case 'v':
            bad = parse_float(cmd, "--val-fraction", optarg, 0.001, 0.9, &o.val_fraction);
            val_fraction_given = 1;
            break;
        case 'e': bad = parse_int(cmd, "--eval-interval", optarg, 0, 100000000, &o.eval_interval); break;
        case 'E': bad = parse_int(cmd, "--eval-batches", optarg, 1, 100000, &o.eval_batches); break;
        case 'i': bad = parse_int(cmd, "--save-interval", optarg, 0, 100000000, &o.save_interval); break;
        case 'R': break; /* read above */
        case 'F': force = 1; break;
        case 'A': bad = parse_int(cmd, "--stop-at", optarg, 1, 100000000, &o.stop_at); break;
        case 'q': o.quiet = 1; break;
        case 'Z': bad = parse_int(cmd, "--zero", optarg, 0, 1, &o.zero); break;
        case 'N': o.no_overlap = 1; break;
        case 'T': bad = parse_float(cmd, "--comm-timeout", optarg, 0.1, 1e6, &comm_timeout); break;
        case 'h': help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind < argc) return cli_error(cmd, "unexpected argument '%s' (see difftrans train --help)", argv[optind]);
    if (!o.out_dir) return cli_error(cmd, "--out DIR is required (see difftrans train --help)");
    if (o.resume && force) return cli_error(cmd, "--force starts a new run; --resume continues the one in --out");
    if (!o.resume && cli_check_new_model_dir(cmd, "--out", o.out_dir, force, "continue its run with --resume") != 0)
        return 1;
    if (!o.resume) {
        if (!o.data_path && !o.tokens_path)
            return cli_error(cmd, "--data FILE or --tokens DATASET is required (see difftrans train --help)");
        /* it was ignored without a word: a dataset's split was made by `tokenize` */
        if (o.tokens_path && val_fraction_given)
            return cli_error(cmd, "--val-fraction: a --tokens dataset holds out its own val split (`difftrans tokenize "
                                  "--val-fraction` sets it)");
        if (cli_config_arch(cmd, config_path ? config_path : preset, arch_flag, arch, &o.cfg) != 0) return 1;
        if (o.cfg.arch == DT_ARCH_DIFF && subln) o.cfg.use_subln_weight = 1;
        if (ablations && cli_apply_ablations(cmd, ablations, &o.cfg) != 0) return 1;
    }
    dt_error err;
    dt_comm *comm = NULL;
    if (dt_comm_create(&comm, comm_timeout, &err) != 0) return cli_fail(cmd, &err);
    if (ignored[0] && dt_comm_rank(comm) == 0) /* rank 0 speaks for a job */
        fprintf(stderr, "difftrans train: ignoring %s: a resumed run keeps the options it was started with "
                        "(%s/train_state.json)\n", ignored, o.out_dir);
    /* in a job, each rank's share of the cores, unless --threads or OMP_NUM_THREADS says otherwise */
    if (threads == 0 && dt_comm_size(comm) > 1 && !getenv("OMP_NUM_THREADS"))
        threads = dt_comm_default_threads(comm);
    cli_set_threads(threads);
    o.comm = comm;

    cli_catch_stop_signals(&stop_requested);
    o.stop = &stop_requested;
    int rc = dt_train(&o, &err);
    const int rank = dt_comm_rank(comm);
    dt_comm_free(comm);
    cli_default_stop_signals();
    /* in a job, rank 0 reports for every rank (the others' message is empty) */
    if (rc != 0) {
        /* a resumed run's batch, seq, lr, ... are the saved run's: a refusal naming one points at
         * train_state.json, not at a flag that was ignored */
        static const char *const saved[] = {"batch", "seq", "lr", "min_lr_ratio", "warmup", "weight_decay",
                                            "grad_clip", "val_fraction", "eval_interval", "eval_batches",
                                            "save_interval", "tokenizer_path"};
        cli_flag flags[sizeof train_flags / sizeof train_flags[0]];
        int n = 0;
        for (size_t i = 0; i < sizeof train_flags / sizeof train_flags[0]; i++) {
            int keep = 1;
            for (size_t k = 0; resume && k < sizeof saved / sizeof saved[0]; k++)
                keep &= strcmp(train_flags[i].field, saved[k]) != 0;
            if (keep) flags[n++] = train_flags[i];
        }
        return cli_fail_flags(cmd, &err, flags, n);
    }
    /* a run that stopped before its last step (the library said where it saved it) */
    if (!o.quiet && rank == 0 && (stop_requested || (o.stop_at > 0 && o.stop_at < o.steps)))
        fprintf(stderr, "continue with: difftrans train --resume --out %s\n", o.out_dir);
    return 0; /* an interrupted run saved its checkpoint: that is a clean exit */
}
