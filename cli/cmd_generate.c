/* cmd_generate.c — `difftrans generate`: prompt → KV-cache decoding → streamed text or ids. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(void) {
    printf("usage: difftrans generate MODEL_DIR [--prompt TEXT | --prompt-file FILE | --prompt-ids \"3 1 4\"]\n"
           "                          [options]\n\n"
           "Feeds the prompt through the model in batched chunks (its matrix products over many rows at\n"
           "once), then continues it one token at a time through a KV cache and streams the text.\n"
           "Where the model's generation_config.json sets do_sample, temperature, top_k, top_p or\n"
           "min_p, they are the defaults of the flags below, read as transformers' generate reads them\n"
           "(without do_sample true: greedy; with it, top_k 50 unless set); its max_new_tokens is -n's.\n\n"
           "  --prompt TEXT       prompt text, encoded with the model's tokenizer.json (BOS added as\n"
           "                      transformers does), or as bytes for a byte-level model [\"\" → BOS, or\n"
           "                      byte '\\n']; generation stops at an eos_token_id (generation_config.json)\n"
           "  --prompt-file FILE  the prompt text read from FILE (- = stdin) whole, as it is (a trailing\n"
           "                      newline is part of it); it must be valid UTF-8\n"
           "  --prompt-ids IDS    prompt as whitespace-separated token ids instead\n"
           "  -n, --tokens N      tokens to generate [200]\n"
           "  --temperature X     0 = greedy (argmax) [0.8]\n"
           "  --top-k N           sample only among the N most likely tokens, 0 = off [0]\n"
           "  --top-p X           nucleus sampling threshold, 1 = off [0.95]\n"
           "  --min-p X           keep only tokens at least X times as likely as the most likely one\n"
           "                      (after --temperature, before --top-k and --top-p, as vLLM), 0 = off [0]\n"
           "  --seed N            sampling seed [42]\n"
           "  --stop STR          end where the generated text holds STR (valid UTF-8, not printed, as\n"
           "                      OpenAI's stop); up to 4 (--stop A --stop B); while streaming, text that\n"
           "                      could still begin one waits, and is printed when it does not; the text\n"
           "                      of --prompt-ids that end inside a character is the prompt's while the\n"
           "                      completion leaves it as it is (a character it finishes is its own)\n"
           "  --print-ids         print the generated token ids (one line) instead of text\n"
           "  --kv-cache TYPE     f32 | f16 | int8: storage of the cached keys and values (f16 halves the\n"
           "                      memory, int8 about quarters it: one scale per position and kv head);\n"
           "                      its size is printed on stderr [f32]\n"
           "  --threads N         OpenMP threads [all cores]\n"
           "  --timings           print the prompt's time (to the first token) and the generated tokens'\n"
           "                      rate on stderr\n"
           "  --warmup            run the prompt through the model once, untimed and unprinted, before\n"
           "                      the real run: what is timed then leaves out a process's first-use\n"
           "                      costs (thread start-up, OpenBLAS's buffers, first touch of the work\n"
           "                      buffers), as llama.cpp's tools warm up before they time\n");
}

/* Parses "3 1 4" into ids; every id must be an integer in [0, V). */
static int parse_ids(const char *s, int V, int **ids, int *n) {
    size_t cap = strlen(s) / 2 + 1;
    int *out = malloc(cap * sizeof(int)), count = 0;
    if (!out) return cli_error_code("generate", DT_ERR_NOMEM, "out of memory");
    while (*s) {
        while (isspace((unsigned char)*s)) s++;
        if (!*s) break;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || (*end && !isspace((unsigned char)*end))) {
            int len = 0;
            while (s[len] && !isspace((unsigned char)s[len]) && len < 20) len++;
            free(out);
            return cli_error("generate", "--prompt-ids: '%.*s' is not a token id", len, s);
        }
        if (v < 0 || v >= V) {
            free(out);
            return cli_error("generate", "--prompt-ids: token id %ld is out of range [0, %d)", v, V);
        }
        out[count++] = (int)v;
        s = end;
    }
    *ids = out;
    *n = count;
    return 0;
}

/* --prompt-file: all of path's bytes (stdin for "-"), NUL-terminated (the prompt may hold NULs: *len
 * counts them). Prints the error naming the flag and the file and returns its status. */
static int read_prompt_file(const char *cmd, const char *path, char **text, size_t *len) {
    const int is_stdin = !strcmp(path, "-");
    const char *name = is_stdin ? "stdin" : path;
    FILE *fp = is_stdin ? stdin : fopen(path, "rb");
    if (!fp) return cli_error_code(cmd, DT_ERR_IO, "--prompt-file %s: %s", name, strerror(errno));
    char *buf = NULL;
    size_t n = 0;
    int rc = 0;
    if (cli_read_all(fp, &buf, &n) != 0) /* a directory opens, and its first read fails (EISDIR) */
        rc = ferror(fp) ? cli_error_code(cmd, DT_ERR_IO, "--prompt-file %s: read failed: %s", name, strerror(errno))
                        : cli_error_code(cmd, DT_ERR_NOMEM, "--prompt-file %s: out of memory", name);
    if (!is_stdin) fclose(fp);
    if (rc != 0) return rc;
    const size_t bad = dt_utf8_valid_prefix(buf, n);
    if (bad < n) {
        rc = cli_error_code(cmd, DT_ERR_FORMAT, "--prompt-file %s: not valid UTF-8 (byte 0x%02X at offset %zu)", name,
                            (unsigned char)buf[bad], bad);
        free(buf);
        return rc;
    }
    *text = buf;
    *len = n;
    return 0;
}

/* Streams the generated text through the model's dt_tok_stream, which was fed the prompt first (a
 * token's text can depend on the tokens before it) and prints the text of each token once it is
 * final: a character whose bytes are not all generated yet waits, and the flush at the end prints
 * what is left. A prompt printed as typed is whole already, so the stream's first `skip` bytes after
 * it, the prompt's text it still held back, are not printed again (nor those of a prompt not shown). Ids
 * that are no token (an embedding padded past the tokenizer, a byte-level model's ids past 255)
 * add no text. */
typedef struct {
    dt_tok_stream *ts;
    dt_stop_matcher *stop;       /* --stop's: the completion's text goes through it */
    char *rest;                  /* a decoded prompt's text held back, while what comes is still it */
    size_t n_rest;
    int print_ids;
    int first;                   /* no token printed yet */
    size_t skip;
    dt_error err;
    int failed;
} text_stream;

/* 1 when a stop string ended the text (nothing more is printed), -1 when out of memory. */
static int print_text(text_stream *ts, const char *text, size_t len) {
    const size_t k = len < ts->skip ? len : ts->skip;
    ts->skip -= k;
    text += k;
    len -= k;
    if (ts->n_rest > 0) {
        /* the prompt's rest, where the text still reads as it (whole characters, as the server's
         * completion begins), is printed but is no generated text for a stop string to match in */
        size_t c = 0;
        while (c < len && c < ts->n_rest && text[c] == ts->rest[c]) c++;
        while (c > 0 && ((c < len && (text[c] & 0xC0) == 0x80) || (c < ts->n_rest && (ts->rest[c] & 0xC0) == 0x80)))
            c--;
        fwrite(text, 1, c, stdout);
        text += c;
        len -= c;
        if (len > 0) ts->n_rest = 0; /* the text parted from it: the rest is the completion's */
        else {
            ts->n_rest -= c;
            memmove(ts->rest, ts->rest + c, ts->n_rest);
        }
    }
    int stopped = 0;
    if (ts->stop && (stopped = dt_stop_matcher_push(ts->stop, text, len, &text, &len, &ts->err)) < 0) return -1;
    fwrite(text, 1, len, stdout);
    return stopped;
}

static int on_token(void *ctx, int token, int is_stop, const int *seq, int n_seq) {
    text_stream *ts = ctx;
    if (ts->print_ids) printf("%s%d", ts->first ? "" : " ", token);
    else if (is_stop) return 0;
    else {
        const char *text;
        size_t len;
        if (dt_tok_stream_push(ts->ts, token, &text, &len, &ts->err) != 0) return ts->failed = 1;
        const int stopped = print_text(ts, text, len);
        if (stopped < 0) return ts->failed = 1;
        if (stopped) {
            fflush(stdout);
            return 1; /* the stop string's token is the last */
        }
    }
    ts->first = 0;
    fflush(stdout);
    return 0;
}

/* Feeds the prompt to the stream and prints its text: as typed, or decoded (ids given by number), or
 * not at all (a byte-level model's ids). Decoded, only what the prompt made final is printed: the
 * rest comes with the generated text, which may still change it (a character the prompt's last
 * tokens cut short: printed as its U+FFFD stand-in and skipped by its length, it took bytes of the
 * completed character and of the text after it). Typed or not shown, what the stream holds back of
 * the prompt is the skip. */
static int stream_prompt(text_stream *ts, const int *ids, int n, const char *typed, size_t typed_len,
                         int show_decoded) {
    const int print_decoded = show_decoded && !typed;
    for (int i = 0; i < n; i++) {
        const char *text;
        size_t len;
        if (dt_tok_stream_push(ts->ts, ids[i], &text, &len, &ts->err) != 0) return -1;
        if (print_decoded) fwrite(text, 1, len, stdout);
    }
    if (typed) fwrite(typed, 1, typed_len, stdout);
    ts->skip = 0;
    const char *held;
    size_t n_held;
    if (dt_tok_stream_pending(ts->ts, &held, &n_held, &ts->err) != 0) return -1;
    if (!print_decoded) ts->skip = n_held;
    else if (n_held > 0) {
        if (!(ts->rest = malloc(n_held))) return dt_fail_oom(&ts->err, "generate: out of memory");
        memcpy(ts->rest, held, n_held);
        ts->n_rest = n_held;
    }
    return 0;
}

int cmd_generate(int argc, char **argv) {
    static const struct option opts[] = {
        {"prompt", required_argument, 0, 'p'},  {"prompt-ids", required_argument, 0, 'P'},
        {"tokens", required_argument, 0, 'n'},  {"temperature", required_argument, 0, 'T'},
        {"top-k", required_argument, 0, 'k'},   {"top-p", required_argument, 0, 'u'},
        {"seed", required_argument, 0, 's'},    {"print-ids", no_argument, 0, 'I'},
        {"threads", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
        {"kv-cache", required_argument, 0, 'K'}, {"timings", no_argument, 0, 'G'},
        {"warmup", no_argument, 0, 'W'},         {"prompt-file", required_argument, 0, 'F'},
        {"stop", required_argument, 0, 'S'},      {"min-p", required_argument, 0, 'm'},
        {0, 0, 0, 0},
    };
    const char *cmd = "generate", *prompt = NULL, *prompt_ids = NULL, *prompt_file = NULL;
    dt_kv_dtype kv_dtype = DT_KV_F32;
    int n_gen = 200, threads = 0, print_ids = 0, timings = 0, warmup = 0;
    int given_n = 0, given_t = 0, given_k = 0, given_p = 0, given_m = 0; /* over generation_config.json's */
    dt_sampler sampler = {.temperature = 0.8f, .top_k = 0, .top_p = 0.95f, .min_p = 0.0f};
    uint64_t seed = 42;
    const char *stops[DT_MAX_STOP_STRINGS];
    int n_stops = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "hn:", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'p': prompt = optarg; break;
        case 'P': prompt_ids = optarg; break;
        case 'F': prompt_file = optarg; break;
        case 'S': {
            const size_t bad_at = dt_utf8_valid_prefix(optarg, strlen(optarg));
            if (!*optarg) bad = cli_error(cmd, "--stop: empty (it would never match)");
            else if (bad_at < strlen(optarg))
                bad = cli_error(cmd, "--stop: not valid UTF-8 (byte 0x%02X at offset %zu)",
                                (unsigned char)optarg[bad_at], bad_at);
            else if (n_stops == DT_MAX_STOP_STRINGS)
                bad = cli_error(cmd, "--stop: at most %d stop strings, as the server's stop", DT_MAX_STOP_STRINGS);
            else stops[n_stops++] = optarg;
            break;
        }
        case 'n': bad = parse_int(cmd, "-n/--tokens", optarg, 0, 1 << 24, &n_gen), given_n = 1; break;
        case 'T': bad = parse_float(cmd, "--temperature", optarg, 0, 100, &sampler.temperature), given_t = 1; break;
        case 'k': bad = parse_int(cmd, "--top-k", optarg, 0, 1 << 24, &sampler.top_k), given_k = 1; break;
        case 'u':
            given_p = 1;
            bad = parse_float(cmd, "--top-p", optarg, -1e30, 1e30, &sampler.top_p);
            if (!bad && !(sampler.top_p > 0 && sampler.top_p <= 1))
                bad = cli_error(cmd, "--top-p %s: must be in (0, 1] (1 = off)", optarg);
            break;
        case 'm': bad = parse_float(cmd, "--min-p", optarg, 0, 1, &sampler.min_p), given_m = 1; break;
        case 's': bad = parse_u64(cmd, "--seed", optarg, &seed); break;
        case 'I': print_ids = 1; break;
        case 'G': timings = 1; break;
        case 'W': warmup = 1; break;
        case 'K':
            bad = cli_parse_kv_cache(cmd, optarg, &kv_dtype);
            break;
        case 'j': bad = parse_int(cmd, "--threads", optarg, 1, 1024, &threads); break;
        case 'h': help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind != argc - 1) return cli_error(cmd, "expected one MODEL_DIR (see difftrans generate --help)");
    if (!!prompt + !!prompt_ids + !!prompt_file > 1)
        return cli_error(cmd, "give one of --prompt, --prompt-file and --prompt-ids, not %s",
                         !prompt_file ? "--prompt and --prompt-ids" : prompt ? "--prompt and --prompt-file"
                                                                             : "--prompt-file and --prompt-ids");
    if (n_stops && print_ids)
        return cli_error(cmd, "--stop looks for text and --print-ids prints ids: give one of them");
    cli_set_threads(threads);
    char *file_text = NULL; /* --prompt-file's, read before the model loads: a bad file costs no load */
    size_t prompt_len = prompt ? strlen(prompt) : 0;
    if (prompt_file) {
        const int frc = read_prompt_file(cmd, prompt_file, &file_text, &prompt_len);
        if (frc != 0) return frc;
        prompt = file_text;
    }

    dt_model m;
    dt_error err;
    if (dt_model_load(&m, argv[optind], &err) != 0) {
        free(file_text);
        return cli_fail(cmd, &err);
    }
    const dt_tok *tok = dt_model_tok(&m); /* NULL for a byte-level model */
    int *ids = NULL, n_prompt = 0, rc = 0;
    size_t n = 0;
    /* the model's generation_config.json sets the defaults of what the flags leave unsaid, as in
     * transformers' generate */
    dt_generate_options defaults = {.max_new_tokens = n_gen, .sampler = sampler};
    const int from_file = dt_model_generation_defaults(&m, &defaults, &err);
    if (from_file < 0) rc = cli_error_code(cmd, err.code, "%s/%s", argv[optind], err.msg);
    if (!given_n) n_gen = defaults.max_new_tokens;
    if (from_file > 0) {
        if (!given_t) sampler.temperature = defaults.sampler.temperature;
        if (!given_k) sampler.top_k = defaults.sampler.top_k;
        if (!given_p) sampler.top_p = defaults.sampler.top_p;
        if (!given_m) sampler.min_p = defaults.sampler.min_p;
        if (sampler.temperature == 0) fprintf(stderr, "sampling: greedy");
        else
            fprintf(stderr, "sampling: temperature %g, top-k %d, top-p %g, min-p %g", (double)sampler.temperature,
                    sampler.top_k, (double)sampler.top_p, (double)sampler.min_p);
        fprintf(stderr, " (generation_config.json's, where no flag says)\n");
    }
    if (rc != 0) /* named above */;
    else if ((!prompt_ids || !print_ids) && dt_model_check_text(&m, &err) != 0) /* before any work */
        rc = cli_error_code(cmd, err.code, "%s (or give --prompt-ids and --print-ids)", err.msg);
    else if (prompt_ids) rc = parse_ids(prompt_ids, m.cfg.vocab_size, &ids, &n_prompt);
    else if ((prompt_len > 0 ? dt_model_encode(&m, prompt, prompt_len, 1, &ids, &n, &err)
                              : dt_model_encode_prompt(&m, "", &ids, &n, &err)) != 0)
        rc = prompt_file ? cli_error_code(cmd, err.code, "--prompt-file %s: %s", prompt_file, err.msg)
                         : cli_error_code(cmd, err.code, "--prompt: %s", err.msg);
    else n_prompt = (int)n;
    if (rc == 0 && n_prompt == 0) rc = cli_error(cmd, "--prompt-ids: no token ids given");
    if (rc == 0 && (long)n_prompt + n_gen > m.cfg.max_position_embeddings)
        rc = cli_error(cmd, "prompt (%d tokens) + -n %d exceeds max_position_embeddings %d", n_prompt, n_gen,
                       m.cfg.max_position_embeddings);
    text_stream ts = {.print_ids = print_ids, .first = 1};
    if (rc == 0 && !print_ids) {
        if (dt_model_tok_stream(&m, 1, &ts.ts, &err) != 0) rc = cli_fail(cmd, &err);
        else if (n_stops && dt_stop_matcher_new(&ts.stop, stops, n_stops, &err) != 0) rc = cli_fail(cmd, &err);
        /* the prompt as typed; ids given by number are shown decoded (a byte-level model's are not) */
        else if (stream_prompt(&ts, ids, n_prompt, prompt, prompt_len, tok != NULL) != 0) rc = cli_fail(cmd, &ts.err);
    }
    dt_generate_options go;
    dt_generate_defaults(&go);
    go.max_new_tokens = n_gen;
    go.sampler = sampler;
    go.seed = seed;
    go.kv_cache = kv_dtype;
    go.on_token = on_token;
    go.ctx = &ts;
    int *out = rc == 0 ? malloc((size_t)(n_gen > 0 ? n_gen : 1) * sizeof *out) : NULL;
    dt_generate_result res;
    if (rc == 0 && !out) rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    if (rc == 0 && warmup) { /* the same prompt, one token, nothing printed */
        dt_generate_options wo = go;
        wo.max_new_tokens = 1;
        wo.on_token = NULL;
        wo.ctx = NULL;
        dt_generate_result wres;
        if (dt_generate(&m, ids, n_prompt, &wo, NULL, &wres, &err) != 0) rc = cli_fail(cmd, &err);
    }
    if (rc == 0 && dt_generate(&m, ids, n_prompt, &go, out, &res, &err) != 0) rc = cli_fail(cmd, &err);
    if (rc == 0 && kv_dtype != DT_KV_F32 && res.kv_cache_bytes > 0) { /* the cache the run used, on stderr */
        char used[32], f32[32];
        cli_format_bytes((double)res.kv_cache_bytes, used, sizeof used);
        cli_format_bytes(2.0 * m.cfg.num_hidden_layers * (n_prompt + n_gen) * m.cfg.num_key_value_heads *
                             m.cfg.head_dim * 4,
                         f32, sizeof f32);
        fprintf(stderr, "KV cache: %d positions, %s (%s; f32 would take %s)\n", n_prompt + n_gen, used,
                kv_dtype == DT_KV_F16 ? "f16" : "int8", f32);
    }
    if (rc == 0 && ts.failed) rc = cli_fail(cmd, &ts.err);
    if (rc == 0 && ts.ts && !(ts.stop && dt_stop_matcher_stopped(ts.stop))) {
        /* the generation has ended: what the stream held back is text, and so is what could have
         * begun a stop string */
        const char *text;
        size_t len;
        int stopped = 0;
        if (dt_tok_stream_flush(ts.ts, &text, &len, &ts.err) != 0 || (stopped = print_text(&ts, text, len)) < 0)
            rc = cli_fail(cmd, &ts.err);
        else if (!stopped && ts.stop) {
            dt_stop_matcher_flush(ts.stop, &text, &len);
            fwrite(text, 1, len, stdout);
        }
    }
    if (rc == 0) putchar('\n');
    fflush(stdout); /* the text first, then what stderr says of it */
    if (rc == 0 && timings && n_gen > 0)
        fprintf(stderr, "timings: prompt %d tokens in %.4f s (%.1f tokens/s; the time to the first token), %d "
                        "generated in %.3f s (%.1f tokens/s)\n",
                n_prompt, res.prefill_s, n_prompt / res.prefill_s, res.n_generated, res.decode_s,
                res.decode_s > 0 ? res.n_generated / res.decode_s : 0.0);
    free(out);
    free(ids);
    free(file_text);
    dt_tok_stream_free(ts.ts);
    dt_stop_matcher_free(ts.stop);
    free(ts.rest);
    dt_model_free(&m);
    return rc;
}
