/* cmd_generate.c — `difftrans generate`: prompt → KV-cache decoding → streamed text or ids. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(void) {
    printf("usage: difftrans generate MODEL_DIR [--prompt TEXT | --prompt-ids \"3 1 4\"] [options]\n\n"
           "Continues a prompt one token at a time through a KV cache and streams the text.\n\n"
           "  --prompt TEXT       prompt text, encoded with the model's tokenizer.json (BOS added as\n"
           "                      transformers does), or as bytes for a byte-level model [\"\" → BOS, or\n"
           "                      byte '\\n']; generation stops at an eos_token_id (generation_config.json)\n"
           "  --prompt-ids IDS    prompt as whitespace-separated token ids instead\n"
           "  -n, --tokens N      tokens to generate [200]\n"
           "  --temperature X     0 = greedy (argmax) [0.8]\n"
           "  --top-k N           sample only among the N most likely tokens, 0 = off [0]\n"
           "  --top-p X           nucleus sampling threshold, 1 = off [0.95]\n"
           "  --seed N            sampling seed [42]\n"
           "  --print-ids         print the generated token ids (one line) instead of text\n"
           "  --kv-cache TYPE     f32 | f16 | int8: storage of the cached keys and values (f16 halves the\n"
           "                      memory, int8 about quarters it: one scale per position and kv head);\n"
           "                      its size is printed on stderr [f32]\n"
           "  --threads N         OpenMP threads [all cores]\n");
}

/* Parses "3 1 4" into ids; every id must be an integer in [0, V). */
static int parse_ids(const char *s, int V, int **ids, int *n) {
    size_t cap = strlen(s) / 2 + 1;
    int *out = malloc(cap * sizeof(int)), count = 0;
    if (!out) return cli_error("generate", "out of memory");
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

/* Text through the model's tokenizer, with its special tokens (BOS) as transformers adds them. */
static int encode_prompt(const char *cmd, const dt_tok *tok, const char *text, int **ids, int *n) {
    int32_t *t = NULL;
    size_t nt = 0;
    dt_error err;
    if (dt_tok_encode(tok, text, strlen(text), 1, &t, &nt, &err) != 0)
        return cli_error(cmd, "--prompt: %s", err.msg);
    if (nt == 0 && dt_tok_bos_id(tok) >= 0) { /* an empty prompt starts from BOS */
        free(t);
        t = malloc(sizeof *t);
        if (t) t[0] = dt_tok_bos_id(tok), nt = 1;
    }
    if (nt == 0) {
        free(t);
        return cli_error(cmd, "--prompt: empty, and the tokenizer has no BOS token to start from");
    }
    *ids = malloc(nt * sizeof **ids);
    if (!*ids) {
        free(t);
        return cli_error(cmd, "out of memory");
    }
    for (size_t i = 0; i < nt; i++) (*ids)[i] = t[i];
    *n = (int)nt;
    free(t);
    return 0;
}

/* Streams decoded text: after every token the whole sequence is decoded again (a token's text
 * can depend on its neighbours) and what is new is printed, holding back a trailing U+FFFD, the
 * mark of a character whose bytes are not all generated yet. */
typedef struct {
    const dt_tok *tok;
    size_t base;                 /* length of the decoded prompt */
    size_t printed;              /* of the decoded text, bytes shown */
} text_stream;

static int decode_all(const char *cmd, const text_stream *ts, const int32_t *ids, int n, char **text, size_t *len) {
    dt_error err;
    if (dt_tok_decode(ts->tok, ids, (size_t)n, 1, text, len, &err) != 0) return cli_error(cmd, "%s", err.msg);
    return 0;
}

static int stream_start(const char *cmd, text_stream *ts, const int32_t *ids, int n, const char *prompt) {
    char *text;
    size_t len;
    if (decode_all(cmd, ts, ids, n, &text, &len) != 0) return 1;
    /* the prompt as typed; ids given by number are shown decoded */
    if (prompt) fwrite(prompt, 1, strlen(prompt), stdout);
    else fwrite(text, 1, len, stdout);
    ts->base = ts->printed = len;
    free(text);
    return 0;
}

static int stream_more(const char *cmd, text_stream *ts, const int32_t *ids, int n, int final) {
    char *text;
    size_t len;
    if (decode_all(cmd, ts, ids, n, &text, &len) != 0) return 1;
    size_t end = len;
    while (!final && end >= ts->printed + 3 && memcmp(text + end - 3, "\xEF\xBF\xBD", 3) == 0) end -= 3;
    if (end > ts->printed) {
        fwrite(text + ts->printed, 1, end - ts->printed, stdout);
        ts->printed = end;
    }
    free(text);
    return 0;
}

int cmd_generate(int argc, char **argv) {
    static const struct option opts[] = {
        {"prompt", required_argument, 0, 'p'},  {"prompt-ids", required_argument, 0, 'P'},
        {"tokens", required_argument, 0, 'n'},  {"temperature", required_argument, 0, 'T'},
        {"top-k", required_argument, 0, 'k'},   {"top-p", required_argument, 0, 'u'},
        {"seed", required_argument, 0, 's'},    {"print-ids", no_argument, 0, 'I'},
        {"threads", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
        {"kv-cache", required_argument, 0, 'K'}, {0, 0, 0, 0},
    };
    const char *cmd = "generate", *prompt = NULL, *prompt_ids = NULL;
    dt_kv_dtype kv_dtype = DT_KV_F32;
    int n_gen = 200, threads = 0, print_ids = 0;
    dt_sampler sampler = {.temperature = 0.8f, .top_k = 0, .top_p = 0.95f};
    uint64_t seed = 42;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "hn:", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'p': prompt = optarg; break;
        case 'P': prompt_ids = optarg; break;
        case 'n': bad = parse_int(cmd, "--tokens", optarg, 0, 1 << 24, &n_gen); break;
        case 'T': bad = parse_float(cmd, "--temperature", optarg, 0, 100, &sampler.temperature); break;
        case 'k': bad = parse_int(cmd, "--top-k", optarg, 0, 1 << 24, &sampler.top_k); break;
        case 'u': bad = parse_float(cmd, "--top-p", optarg, 0, 1, &sampler.top_p); break;
        case 's': bad = parse_u64(cmd, "--seed", optarg, &seed); break;
        case 'I': print_ids = 1; break;
        case 'K':
            if (!strcmp(optarg, "f32")) kv_dtype = DT_KV_F32;
            else if (!strcmp(optarg, "f16")) kv_dtype = DT_KV_F16;
            else if (!strcmp(optarg, "int8")) kv_dtype = DT_KV_INT8;
            else bad = cli_error(cmd, "--kv-cache '%s': expected f32, f16 or int8", optarg);
            break;
        case 'j': bad = parse_int(cmd, "--threads", optarg, 1, 1024, &threads); break;
        case 'h': help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind != argc - 1) return cli_error(cmd, "expected one MODEL_DIR (see difftrans generate --help)");
    if (prompt && prompt_ids) return cli_error(cmd, "give --prompt or --prompt-ids, not both");
    cli_set_threads(threads);

    dt_model m;
    dt_error err;
    if (dt_model_load(&m, argv[optind], &err) != 0) return cli_error(cmd, "%s", err.msg);
    const int V = m.cfg.vocab_size;
    dt_tok *tok = NULL; /* the model's tokenizer.json; NULL for a byte-level model */
    if (dt_model_tokenizer(&m, argv[optind], &tok, &err) < 0) {
        dt_model_free(&m);
        return cli_error(cmd, "%s", err.msg);
    }
    int *ids = NULL, n_prompt = 0, rc = 0;
    if (prompt_ids) {
        rc = parse_ids(prompt_ids, V, &ids, &n_prompt);
    } else if (tok) {
        rc = encode_prompt(cmd, tok, prompt ? prompt : "", &ids, &n_prompt);
    } else {
        const char *text = prompt && *prompt ? prompt : "\n";
        n_prompt = (int)strlen(text);
        ids = malloc((size_t)n_prompt * sizeof(int));
        for (int i = 0; ids && i < n_prompt; i++) ids[i] = (unsigned char)text[i];
        for (int i = 0; ids && i < n_prompt && rc == 0; i++)
            if (ids[i] >= V)
                rc = cli_error(cmd, "--prompt: byte %d at offset %d is outside the model's vocabulary of %d", ids[i], i,
                               V);
    }
    if (rc != 0) {
        free(ids);
        dt_tok_free(tok);
        dt_model_free(&m);
        return 1;
    }
    const int total = n_prompt + n_gen;
    float *logits = malloc((size_t)V * sizeof(float));
    dt_prob_index *scratch = malloc((size_t)V * sizeof *scratch);
    int32_t *all = malloc((size_t)(total > 0 ? total : 1) * sizeof *all); /* prompt and generated ids */
    dt_kvcache *kc = NULL;
    if (!ids || !logits || !scratch || !all) rc = cli_error(cmd, "out of memory");
    else if (n_prompt == 0) rc = cli_error(cmd, "--prompt-ids: no token ids given");
    else if (total > m.cfg.max_position_embeddings)
        rc = cli_error(cmd, "prompt (%d tokens) + -n %d exceeds max_position_embeddings %d", n_prompt, n_gen,
                       m.cfg.max_position_embeddings);
    else if (!(kc = dt_kvcache_create_with(&m, total, kv_dtype, &err))) rc = cli_error(cmd, "%s", err.msg);
    if (kc && kv_dtype != DT_KV_F32)
        fprintf(stderr, "KV cache: %d positions, %.2f MB (%s; f32 would take %.2f MB)\n", total,
                dt_kvcache_bytes(kc) / 1e6, kv_dtype == DT_KV_F16 ? "f16" : "int8",
                2.0 * m.cfg.num_hidden_layers * total * m.cfg.num_key_value_heads * m.cfg.head_dim * 4 / 1e6);

    /* the end-of-sequence ids: generation_config.json's, else the tokenizer's */
    dt_special_ids stop = m.cfg.special;
    if (stop.n_eos == 0 && tok && dt_tok_eos_id(tok) >= 0) stop.eos_token_id[stop.n_eos++] = dt_tok_eos_id(tok);
    text_stream ts = {.tok = tok};
    for (int i = 0; rc == 0 && i < n_prompt; i++) all[i] = ids[i];
    if (rc == 0 && !print_ids && tok) rc = stream_start(cmd, &ts, all, n_prompt, prompt_ids ? NULL : prompt);
    else if (rc == 0 && !print_ids && !prompt_ids) fwrite(prompt ? prompt : "", 1, prompt ? strlen(prompt) : 0, stdout);
    uint64_t rng = seed;
    int token = ids ? ids[0] : 0, n_all = n_prompt;
    for (int pos = 0; rc == 0 && pos < total - 1; pos++) {
        if (dt_decode_step(&m, kc, token, pos, logits, &err) != 0) {
            rc = cli_error(cmd, "%s", err.msg);
            break;
        }
        if (pos + 1 < n_prompt) {
            token = ids[pos + 1];
            continue;
        }
        token = dt_sample(logits, V, &sampler, &rng, scratch);
        int is_eos = 0;
        for (int e = 0; e < stop.n_eos; e++) is_eos |= token == stop.eos_token_id[e];
        if (print_ids) printf("%s%d", pos + 1 == n_prompt ? "" : " ", token);
        if (is_eos) break;
        all[n_all++] = token;
        if (print_ids) {
        } else if (tok) {
            rc = stream_more(cmd, &ts, all, n_all, 0);
        } else if (prompt_ids && token > 255) printf("<%d>", token);
        else putchar(token < 256 ? token : '?');
        fflush(stdout);
    }
    if (rc == 0 && tok && !print_ids) rc = stream_more(cmd, &ts, all, n_all, 1);
    if (rc == 0) putchar('\n');
    dt_kvcache_free(kc);
    free(ids);
    free(all);
    free(logits);
    free(scratch);
    dt_tok_free(tok);
    dt_model_free(&m);
    return rc;
}
