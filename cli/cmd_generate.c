/* cmd_generate.c — `difftrans generate`: prompt → KV-cache decoding → streamed text or ids. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(void) {
    printf("usage: difftrans generate MODEL_DIR [--prompt TEXT | --prompt-ids \"3 1 4\"] [options]\n\n"
           "Continues a prompt one token at a time through a KV cache and streams the text.\n\n"
           "  --prompt TEXT       prompt text (byte-level tokens) [\"\" → starts from byte '\\n']\n"
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
    int *ids = NULL, n_prompt = 0, rc = 0;
    if (prompt_ids) {
        if (parse_ids(prompt_ids, V, &ids, &n_prompt) != 0) {
            dt_model_free(&m);
            return 1;
        }
    } else {
        const char *text = prompt && *prompt ? prompt : "\n";
        n_prompt = (int)strlen(text);
        ids = malloc((size_t)n_prompt * sizeof(int));
        for (int i = 0; ids && i < n_prompt; i++) ids[i] = (unsigned char)text[i];
        for (int i = 0; ids && i < n_prompt; i++)
            if (ids[i] >= V) {
                free(ids);
                dt_model_free(&m);
                return cli_error(cmd, "--prompt: byte %d at offset %d is outside the model's vocabulary of %d", ids[i],
                                 i, V);
            }
    }
    const int total = n_prompt + n_gen;
    float *logits = malloc((size_t)V * sizeof(float));
    dt_prob_index *scratch = malloc((size_t)V * sizeof *scratch);
    dt_kvcache *kc = NULL;
    if (!ids || !logits || !scratch) rc = cli_error(cmd, "out of memory");
    else if (n_prompt == 0) rc = cli_error(cmd, "--prompt-ids: no token ids given");
    else if (total > m.cfg.max_position_embeddings)
        rc = cli_error(cmd, "prompt (%d tokens) + -n %d exceeds max_position_embeddings %d", n_prompt, n_gen,
                       m.cfg.max_position_embeddings);
    else if (!(kc = dt_kvcache_create_with(&m, total, kv_dtype, &err))) rc = cli_error(cmd, "%s", err.msg);
    if (kc && kv_dtype != DT_KV_F32)
        fprintf(stderr, "KV cache: %d positions, %.2f MB (%s; f32 would take %.2f MB)\n", total,
                dt_kvcache_bytes(kc) / 1e6, kv_dtype == DT_KV_F16 ? "f16" : "int8",
                2.0 * m.cfg.num_hidden_layers * total * m.cfg.num_key_value_heads * m.cfg.head_dim * 4 / 1e6);

    if (rc == 0 && !print_ids && !prompt_ids) fwrite(prompt ? prompt : "", 1, prompt ? strlen(prompt) : 0, stdout);
    uint64_t rng = seed;
    int token = ids ? ids[0] : 0;
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
        if (print_ids) printf("%s%d", pos + 1 == n_prompt ? "" : " ", token);
        else if (prompt_ids && token > 255) printf("<%d>", token);
        else putchar(token < 256 ? token : '?');
        fflush(stdout);
    }
    if (rc == 0) putchar('\n');
    dt_kvcache_free(kc);
    free(ids);
    free(logits);
    free(scratch);
    dt_model_free(&m);
    return rc;
}
