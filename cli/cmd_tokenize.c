/* cmd_tokenize.c — `difftrans tokenize`: text files → a token dataset (memory-mappable shards). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void help(void) {
    printf("usage: difftrans tokenize --tokenizer PATH --data FILE... [--val FILE...] --out DATASET [options]\n\n"
           "Tokenises text files once into a dataset directory for `train --tokens DATASET`: shards of\n"
           "uint16 ids (uint32 when the vocabulary has more than 65536 tokens) with a 64-byte header\n"
           "(magic DTTOKENS, version, width, count, vocabulary), dataset.json and a copy of the\n"
           "tokenizer. Documents are held out whole for validation (a fraction of them, or the files\n"
           "given to --val); files of any size are streamed.\n"
           "See README \"Token datasets\".\n\n"
           "  --tokenizer PATH       tokenizer.json, or a directory holding one\n"
           "  --data FILE...         UTF-8 text files (several after one --data, or --data repeated)\n"
           "  --out DATASET          output directory (created; written whole under a temporary name,\n"
           "                         then renamed)\n"
           "  --force                replace the dataset an --out holds (whole: no shard of it stays)\n"
           "  --documents MODE       what a document is: paragraph (text up to a blank line), line,\n"
           "                         or file [paragraph]\n"
           "  --val FILE...          UTF-8 text files that are the validation split, whole: no document\n"
           "                         of --data is held out (instead of --val-fraction)\n"
           "  --val-fraction X       fraction of documents held out, spread evenly; 0 = none [0.01]\n"
           "  --no-eos               do not append the tokenizer's EOS token after each document\n"
           "  --shard-tokens N       tokens per shard [134217728]\n"
           "  --block-size SIZE      bytes read at a time, and about the longest piece of a document\n"
           "                         encoded at once (cut only where the ids stay those of the whole\n"
           "                         document; never for Llama 2-style tokenizers) [4MiB]\n"
           "  --threads N            encoding threads [all cores]\n"
           "  --quiet                no progress line\n");
}

int cmd_tokenize(int argc, char **argv) {
    static const struct option opts[] = {
        {"tokenizer", required_argument, 0, 't'}, {"data", required_argument, 0, 'd'},
        {"out", required_argument, 0, 'o'},       {"documents", required_argument, 0, 'D'},
        {"val-fraction", required_argument, 0, 'v'}, {"no-eos", no_argument, 0, 'E'},
        {"shard-tokens", required_argument, 0, 's'}, {"threads", required_argument, 0, 'j'},
        {"quiet", no_argument, 0, 'q'},           {"help", no_argument, 0, 'h'},
        {"block-size", required_argument, 0, 'B'}, {"val", required_argument, 0, 'V'},
        {"force", no_argument, 0, 'F'},           {0, 0, 0, 0},
    };
    const char *cmd = "tokenize";
    dt_tokenize_options o;
    dt_tokenize_defaults(&o);
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    const char **val_inputs = calloc((size_t)argc + 1, sizeof *val_inputs);
    if (!inputs || !val_inputs) {
        free(inputs);
        free(val_inputs);
        return cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    }
    int n_inputs = 0, n_val = 0, threads = 0, rc = 0, fraction_given = 0, force = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while (rc == 0 && (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 't': o.tokenizer_path = optarg; break;
        case 'd':
            inputs[n_inputs++] = optarg;
            /* the files after --data up to the next option */
            while (optind < argc && argv[optind][0] != '-') inputs[n_inputs++] = argv[optind++];
            break;
        case 'V':
            val_inputs[n_val++] = optarg;
            while (optind < argc && argv[optind][0] != '-') val_inputs[n_val++] = argv[optind++];
            break;
        case 'o': o.out_dir = optarg; break;
        case 'D':
            if (!strcmp(optarg, "paragraph")) o.doc_split = DT_DOC_PARAGRAPH;
            else if (!strcmp(optarg, "line")) o.doc_split = DT_DOC_LINE;
            else if (!strcmp(optarg, "file")) o.doc_split = DT_DOC_FILE;
            else rc = cli_error(cmd, "--documents '%s': expected paragraph, line or file", optarg);
            break;
        case 'v':
            rc = parse_float(cmd, "--val-fraction", optarg, 0, 0.9, &o.val_fraction) ? 1 : 0;
            fraction_given = 1;
            break;
        case 'E': o.append_eos = 0; break;
        case 's': {
            uint64_t v;
            rc = parse_u64(cmd, "--shard-tokens", optarg, &v) ? 1 : 0;
            if (rc == 0 && v == 0) rc = cli_error(cmd, "--shard-tokens 0: must be positive");
            o.shard_tokens = v;
            break;
        }
        case 'j': rc = parse_int(cmd, "--threads", optarg, 1, 1024, &threads) ? 1 : 0; break;
        case 'q': o.quiet = 1; break;
        case 'F': force = 1; break;
        case 'B': rc = cli_parse_size(cmd, "--block-size", optarg, &o.block_bytes) ? 1 : 0; break;
        case 'h':
            help();
            free(inputs);
            free(val_inputs);
            return 0;
        default: rc = cli_bad_option(cmd, argc, argv);
        }
    }
    if (rc == 0 && optind < argc) rc = cli_error(cmd, "unexpected argument '%s' (see difftrans tokenize --help)", argv[optind]);
    if (rc == 0 && !o.tokenizer_path) rc = cli_error(cmd, "--tokenizer PATH is required");
    if (rc == 0 && n_inputs == 0) rc = cli_error(cmd, "--data FILE... is required");
    if (rc == 0 && !o.out_dir) rc = cli_error(cmd, "--out DATASET is required");
    if (rc == 0 && n_val > 0 && fraction_given && o.val_fraction > 0)
        rc = cli_error(cmd, "--val and --val-fraction %g: the validation split is either the --val files or a "
                            "fraction of the --data documents, not both", (double)o.val_fraction);
    /* a dataset is hours of work on a large corpus, and a training run's --resume checks its
     * tokens: replacing one takes --force, as a checkpoint does for train and init */
    char manifest[4200];
    if (rc == 0 && snprintf(manifest, sizeof manifest, "%s/dataset.json", o.out_dir) < (int)sizeof manifest &&
        access(manifest, F_OK) == 0) {
        if (!force)
            rc = cli_error(cmd, "--out %s: already holds a token dataset (%s); choose a new directory, or give --force "
                                "to replace it", o.out_dir, manifest);
        else if (!o.quiet)
            fprintf(stderr, "difftrans %s: replacing the dataset in %s\n", cmd, o.out_dir);
    }
    if (rc != 0) {
        free(inputs);
        free(val_inputs);
        return rc;
    }
    if (n_val > 0) o.val_fraction = 0; /* the --val files are the whole validation split */
    cli_set_threads(threads);
    o.inputs = inputs;
    o.n_inputs = n_inputs;
    o.val_inputs = val_inputs;
    o.n_val_inputs = n_val;
    dt_tokenize_stats st;
    dt_error err;
    static const cli_flag flags[] = {{"val_fraction", "--val-fraction"}, {"doc_split", "--documents"},
                                     {"shard_tokens", "--shard-tokens"}, {"block_bytes", "--block-size"}};
    if (dt_tokenize(&o, &st, &err) != 0) rc = cli_fail_flags(cmd, &err, flags, (int)(sizeof flags / sizeof flags[0]));
    free(inputs);
    free(val_inputs);
    if (rc != 0) return rc;
    uint64_t total = st.tokens[0] + st.tokens[1];
    printf("wrote %s: %llu tokens (%llu train in %d shard%s, %llu validation in %d) from %llu documents, "
           "%llu bytes | %.3f bytes per token | %s ids, vocabulary %d\n",
           o.out_dir, (unsigned long long)total, (unsigned long long)st.tokens[0], st.shards[0],
           st.shards[0] == 1 ? "" : "s", (unsigned long long)st.tokens[1], st.shards[1],
           (unsigned long long)(st.documents[0] + st.documents[1]), (unsigned long long)st.bytes,
           total ? (double)st.bytes / (double)total : 0.0, st.width == 2 ? "uint16" : "uint32", st.vocab_size);
    return 0;
}
