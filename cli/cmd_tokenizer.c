/* cmd_tokenizer.c — `difftrans tokenizer encode|decode|info|train`: Hugging Face tokenizer.json. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

static void tokenizer_help(FILE *f) {
    dt_tok_train_options d;
    dt_tok_train_defaults(&d);
    fprintf(f,
            "usage: difftrans tokenizer encode --tokenizer PATH [--add-special] [--threads N] [--stats] < TEXT\n"
            "       difftrans tokenizer decode --tokenizer PATH [--skip-special] < IDS\n"
            "       difftrans tokenizer info PATH\n"
            "       difftrans tokenizer train --data FILE... --out DIR [--vocab-size N] [--pattern gpt2|llama3]\n"
            "                                 [--bos TOKEN] [--eos TOKEN] [--pad TOKEN] [--min-frequency N]\n\n"
            "PATH is a Hugging Face tokenizer.json (model BPE) or a directory holding one.\n"
            "  encode  reads all of stdin as it is (a trailing newline is part of the text; it must be\n"
            "          valid UTF-8) and prints the ids on one line, separated by spaces. --add-special\n"
            "          runs the post-processor (e.g. prepends <s>), like add_special_tokens=True.\n"
            "          --threads N splits large texts (same ids as one thread); --stats prints load and\n"
            "          encode times as JSON on stderr.\n"
            "  decode  reads whitespace-separated ids from stdin and writes the text, nothing added.\n"
            "          --skip-special leaves special tokens out.\n"
            "  info    vocabulary size, merges, components, added and special tokens.\n"
            "  train   learns a byte-level BPE of --vocab-size tokens [%d] (see difftrans tokenizer\n"
            "          train --help).\n",
            d.vocab_size);
}

static int load(const char *cmd, const char *path, dt_tok **tok) {
    dt_error err;
    if (!path) return cli_error(cmd, "--tokenizer PATH is required (see difftrans tokenizer --help)");
    if (dt_tok_load(tok, path, &err) != 0) return cli_fail(cmd, &err);
    return 0;
}

/* Decimal digits of v (not negative) ending at end; returns where they start. */
static char *format_id(char *end, uint32_t v) {
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

static int write_ids(const int32_t *ids, size_t n) {
    /* one line through a large buffer, one fwrite per buffer: printing is a large part of the
     * time on large files, snprintf per id most of it */
    enum { BUF = 1 << 20, MAX_ID = 12 };
    char *buf = malloc(BUF);
    if (!buf) return -1;
    size_t k = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (k > BUF - MAX_ID) {
            if (fwrite(buf, 1, k, stdout) != k) rc = -1;
            k = 0;
        }
        if (i) buf[k++] = ' ';
        char tmp[MAX_ID], *d = format_id(tmp + MAX_ID, (uint32_t)ids[i]); /* ids are never negative */
        memcpy(buf + k, d, (size_t)(tmp + MAX_ID - d));
        k += (size_t)(tmp + MAX_ID - d);
    }
    buf[k++] = '\n';
    if (rc == 0 && fwrite(buf, 1, k, stdout) != k) rc = -1;
    free(buf);
    return rc == 0 ? fflush(stdout) : -1;
}

static int cmd_encode(int argc, char **argv) {
    static const struct option opts[] = {
        {"tokenizer", required_argument, 0, 't'}, {"add-special", no_argument, 0, 'a'},
        {"threads", required_argument, 0, 'T'},   {"stats", no_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0},
    };
    const char *cmd = "tokenizer encode", *path = NULL;
    int add_special = 0, threads = 1, stats = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 't': path = optarg; break;
        case 'a': add_special = 1; break;
        case 'T':
            if (parse_int(cmd, "--threads", optarg, 1, 1024, &threads)) return 1;
            break;
        case 'S': stats = 1; break;
        case 'h': tokenizer_help(stdout); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
    }
    if (optind < argc) return cli_error(cmd, "unexpected argument '%s'", argv[optind]);
    dt_tok *tok;
    double t0 = dt_seconds();
    if (load(cmd, path, &tok) != 0) return 1;
    double t_load = dt_seconds() - t0;
    char *text;
    size_t len;
    if (cli_read_all(stdin, &text, &len) != 0) {
        dt_tok_free(tok);
        return cli_error_code(cmd, DT_ERR_IO, "stdin: read failed: %s", strerror(errno));
    }
    dt_error err;
    int32_t *ids = NULL;
    size_t n = 0;
    t0 = dt_seconds();
    int rc = dt_tok_encode_parallel(tok, text, len, add_special, threads, &ids, &n, &err);
    double t_enc = dt_seconds() - t0;
    if (rc == 0 && stats)
        fprintf(stderr, "{\"load_s\": %.4f, \"encode_s\": %.4f, \"bytes\": %zu, \"tokens\": %zu, \"threads\": %d, "
                        "\"mb_per_s\": %.2f}\n",
                t_load, t_enc, len, n, threads, t_enc > 0 ? len / t_enc / 1e6 : 0.0);
    if (rc != 0)
        rc =
            !strncmp(err.msg, "text:", 5) ? cli_error_code(cmd, err.code, "stdin%s", err.msg + 4) : cli_fail(cmd, &err);
    else if (write_ids(ids, n) != 0) rc = cli_error(cmd, "stdout: write failed");
    free(ids);
    free(text);
    dt_tok_free(tok);
    return rc;
}

/* Whitespace-separated decimal ids; anything else is an error naming the offending word. */
static int parse_ids(const char *cmd, const char *s, size_t len, int32_t **out, size_t *n_out) {
    size_t cap = 1024, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    size_t i = 0;
    while (i < len) {
        while (i < len && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) i++;
        if (i == len) break;
        size_t j = i;
        long long v = 0;
        int ok = 1;
        while (j < len && !(s[j] == ' ' || s[j] == '\n' || s[j] == '\t' || s[j] == '\r')) {
            if (s[j] < '0' || s[j] > '9' || v > 2147483647LL) ok = 0;
            else v = v * 10 + (s[j] - '0');
            j++;
        }
        if (!ok || v > 2147483647LL) {
            free(ids);
            return cli_error(cmd, "stdin: '%.*s' is not a token id (non-negative integer)", (int)(j - i > 40 ? 40 : j - i),
                             s + i);
        }
        if (dt_grow(&ids, &cap, n + 1, sizeof *ids, 0) != 0) {
            free(ids);
            return cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
        }
        ids[n++] = (int32_t)v;
        i = j;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

static int cmd_decode(int argc, char **argv) {
    static const struct option opts[] = {
        {"tokenizer", required_argument, 0, 't'},
        {"skip-special", no_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "tokenizer decode", *path = NULL;
    int skip = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 't': path = optarg; break;
        case 's': skip = 1; break;
        case 'h': tokenizer_help(stdout); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
    }
    if (optind < argc) return cli_error(cmd, "unexpected argument '%s'", argv[optind]);
    dt_tok *tok;
    if (load(cmd, path, &tok) != 0) return 1;
    char *in;
    size_t len;
    if (cli_read_all(stdin, &in, &len) != 0) {
        dt_tok_free(tok);
        return cli_error_code(cmd, DT_ERR_IO, "stdin: read failed: %s", strerror(errno));
    }
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = parse_ids(cmd, in, len, &ids, &n);
    free(in);
    char *text = NULL;
    size_t tlen = 0;
    dt_error err;
    if (rc == 0 && dt_tok_decode(tok, ids, n, skip, &text, &tlen, &err) != 0) rc = cli_fail(cmd, &err);
    if (rc == 0 && (fwrite(text, 1, tlen, stdout) != tlen || fflush(stdout) != 0))
        rc = cli_error(cmd, "stdout: write failed");
    free(text);
    free(ids);
    dt_tok_free(tok);
    return rc;
}

static int cmd_tok_info(int argc, char **argv) {
    const char *cmd = "tokenizer info";
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        tokenizer_help(stdout);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') return cli_error(cmd, "expected one PATH (see difftrans tokenizer --help)");
    dt_tok *tok;
    if (load(cmd, argv[1], &tok) != 0) return 1;
    dt_tok_summary s;
    dt_tok_info(tok, &s);
    printf("tokenizer      %s\n", dt_tok_path(tok));
    printf("model          BPE: %d tokens, %d merges%s%s%s%s\n", s.model_vocab, s.n_merges,
           s.byte_fallback ? ", byte_fallback" : "", s.ignore_merges ? ", ignore_merges" : "",
           s.unk_token ? ", unk " : "", s.unk_token ? s.unk_token : "");
    printf("vocab size     %d (with %d added tokens, %d special", s.vocab_size, s.n_added, s.n_special);
    if (s.n_unused) printf("; %d ids below it unused", s.n_unused);
    printf(")\n");
    printf("normalizer     %s\npre-tokenizer  %s\ndecoder        %s\n", s.normalizer, s.pre_tokenizer, s.decoder);
    printf("post-processor %d special id(s) before, %d after the text\n", s.n_prefix, s.n_suffix);
    const char *names[] = {"bos", "eos", "pad"};
    int32_t ids[] = {s.bos_id, s.eos_id, s.pad_id};
    for (int i = 0; i < 3; i++) {
        size_t l = 0;
        const char *t = ids[i] >= 0 ? dt_tok_id_to_token(tok, ids[i], &l) : NULL;
        if (t) printf("%-14s %d %.*s\n", names[i], ids[i], (int)l, t);
        else printf("%-14s none\n", names[i]);
    }
    int shown = 0;
    for (int32_t id = 0; id < s.vocab_size && shown < 12; id++) {
        if (!dt_tok_is_special(tok, id)) continue;
        size_t l;
        const char *t = dt_tok_id_to_token(tok, id, &l);
        printf("%s %d %.*s\n", shown ? "              " : "special        ", id, (int)l, t);
        shown++;
    }
    if (s.n_special > shown) printf("               ... %d more\n", s.n_special - shown);
    dt_tok_free(tok);
    return 0;
}

static void train_help(void) {
    dt_tok_train_options d;
    dt_tok_train_defaults(&d);
    printf("usage: difftrans tokenizer train --data FILE... --out DIR [--vocab-size N]\n"
           "                                 [--pattern gpt2|llama3] [--bos TOKEN] [--eos TOKEN] [--pad TOKEN]\n"
           "                                 [--min-frequency N] [--quiet]\n\n"
           "Learns a byte-level BPE on the UTF-8 text files (several after one --data, or --data\n"
           "repeated) and writes DIR/tokenizer.json and DIR/tokenizer_config.json (Hugging Face: the\n"
           "Rust tokenizers library and AutoTokenizer load them).\n"
           "  --vocab-size N     all tokens: 256 bytes + merges + special tokens [%d]\n"
           "  --pattern P        pre-tokenization: gpt2 (GPT-2's regex) or llama3 (Llama-3's, digits in\n"
           "                     groups of 3, ignore_merges) [%s]\n"
           "  --bos/--eos/--pad  special tokens ('' for none); bos goes before the text where special\n"
           "                     tokens are added (`tokenizer encode --add-special`, generate's prompts)\n"
           "                     [%s %s %s]; one string in two roles is one token serving both\n"
           "  --min-frequency N  pairs seen fewer times are not merged [%d]\n"
           "Progress (merges done, ETA) goes to stderr unless --quiet.\n",
           d.vocab_size, d.pattern, d.bos, d.eos, d.pad, d.min_frequency);
}

static int cmd_train_tok(int argc, char **argv) {
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'},  {"vocab-size", required_argument, 0, 'v'},
        {"out", required_argument, 0, 'o'},   {"pattern", required_argument, 0, 'p'},
        {"bos", required_argument, 0, 'b'},   {"eos", required_argument, 0, 'e'},
        {"pad", required_argument, 0, 'P'},   {"min-frequency", required_argument, 0, 'm'},
        {"quiet", no_argument, 0, 'q'},       {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "tokenizer train", *out = NULL;
    dt_tok_train_options o;
    dt_tok_train_defaults(&o);
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    if (!files) return cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    optind = 1;
    opterr = 0;
    int ch, rc = 0;
    while (rc == 0 && (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'd':
            files[o.n_files++] = optarg;
            /* the files after --data up to the next option, as `difftrans tokenize` takes them */
            while (optind < argc && argv[optind][0] != '-') files[o.n_files++] = argv[optind++];
            break;
        case 'v': rc = parse_int(cmd, "--vocab-size", optarg, 1, 1 << 30, &o.vocab_size) ? 1 : 0; break;
        case 'o': out = optarg; break;
        case 'p': o.pattern = optarg; break;
        case 'b': o.bos = optarg; break;
        case 'e': o.eos = optarg; break;
        case 'P': o.pad = optarg; break;
        case 'm': rc = parse_int(cmd, "--min-frequency", optarg, 1, 1 << 30, &o.min_frequency) ? 1 : 0; break;
        case 'q': o.quiet = 1; break;
        case 'h': train_help(); free(files); return 0;
        default: rc = cli_bad_option(cmd, argc, argv);
        }
    }
    if (rc == 0 && optind < argc) rc = cli_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (rc == 0 && o.n_files == 0) rc = cli_error(cmd, "--data FILE is required (see --help)");
    if (rc == 0 && !out) rc = cli_error(cmd, "--out DIR is required (see --help)");
    struct stat sb;
    if (rc == 0 && stat(out, &sb) == 0 && !S_ISDIR(sb.st_mode))
        rc = cli_error(cmd, "--out %s: exists and is not a directory", out);
    if (rc == 0 && strcmp(o.pattern, "gpt2") && strcmp(o.pattern, "llama3"))
        rc = cli_error(cmd, "--pattern '%s': expected gpt2 or llama3", o.pattern);
    o.files = files;
    dt_error err;
    static const cli_flag flags[] = {{"vocab_size", "--vocab-size"}, {"pattern", "--pattern"}, {"n_files", "--data"},
                                     {"bos", "--bos"}, {"eos", "--eos"}, {"pad", "--pad"},
                                     {"min_frequency", "--min-frequency"}};
    if (rc == 0 && dt_tok_train(&o, out, &err) != 0) rc = cli_fail_flags(cmd, &err, flags, 7);
    free(files);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc < 2) {
        tokenizer_help(stderr);
        return 1;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        tokenizer_help(stdout);
        return 0;
    }
    if (!strcmp(sub, "encode")) return cmd_encode(argc - 1, argv + 1);
    if (!strcmp(sub, "decode")) return cmd_decode(argc - 1, argv + 1);
    if (!strcmp(sub, "info")) return cmd_tok_info(argc - 1, argv + 1);
    if (!strcmp(sub, "train")) return cmd_train_tok(argc - 1, argv + 1);
    return cli_error("tokenizer", "unknown subcommand '%s' (encode, decode, info, train; see --help)", sub);
}
