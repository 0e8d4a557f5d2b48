/* cmd_model.c — the checkpoint commands: `init`, `info`, `eval`, `export`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

/* ---------------------------------------------------------------- init */

static void init_help(void) {
    printf("usage: difftrans init --out DIR [--arch diff|transformer|v2] [--preset NAME | --config FILE]\n"
           "                      [--subln] [--ablation LIST] [--seed N] [--dtype f32|bf16|f16]\n"
           "                      [--max-shard-size SIZE] [--force]\n\n"
           "Writes a freshly initialised checkpoint (normal(0, 0.02) matrices, N(0, lambda_std_dev) λ\n"
           "vectors, ones for norm weights) and prints the parameter counts of the DIFF model and its\n"
           "matched Transformer (H/2 differential heads of width 2·hd ↔ H heads of width hd).\n"
           "--dtype and --max-shard-size as for `difftrans export`; --force writes into a DIR that\n"
           "already holds a model (replacing it).\n"
           "presets: %s [small]\n"
           "--ablation: comma-separated model variants applied in order: %s\n",
           dt_config_preset_names(), dt_ablation_names());
}

int cmd_init(int argc, char **argv) {
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'},    {"arch", required_argument, 0, 'a'},
        {"preset", required_argument, 0, 'p'}, {"config", required_argument, 0, 'c'},
        {"subln", no_argument, 0, 'S'},        {"seed", required_argument, 0, 's'},
        {"dtype", required_argument, 0, 'D'},  {"max-shard-size", required_argument, 0, 'M'},
        {"ablation", required_argument, 0, 'X'}, {"force", no_argument, 0, 'F'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    const char *cmd = "init", *out = NULL, *spec = "small", *ablations = NULL, *arch_flag = NULL;
    dt_save_options save = {0};
    dt_arch arch = DT_ARCH_DIFF;
    int subln = 0, force = 0;
    uint64_t seed = 1337;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'a':
            if (cli_parse_arch(cmd, optarg, &arch)) return 1;
            arch_flag = optarg;
            break;
        case 'p':
        case 'c': spec = optarg; break;
        case 'S': subln = 1; break;
        case 'X': ablations = optarg; break;
        case 's':
            if (parse_u64(cmd, "--seed", optarg, &seed)) return 1;
            break;
        case 'D':
            if (cli_parse_dtype(cmd, optarg, &save.dtype)) return 1;
            break;
        case 'M':
            if (cli_parse_size(cmd, "--max-shard-size", optarg, &save.max_shard_bytes)) return 1;
            break;
        case 'F': force = 1; break;
        case 'h': init_help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
    }
    if (optind < argc) return cli_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (!out) return cli_error(cmd, "--out DIR is required (see difftrans init --help)");
    if (cli_check_new_model_dir(cmd, "--out", out, force, "choose a new directory") != 0) return 1;
    dt_config cfg;
    if (cli_config_arch(cmd, spec, arch_flag, arch, &cfg) != 0) return 1;
    if (subln && cfg.arch == DT_ARCH_DIFF) cfg.use_subln_weight = 1;
    if (ablations && cli_apply_ablations(cmd, ablations, &cfg) != 0) return 1;
    dt_model m;
    dt_error err;
    if (dt_model_create(&m, &cfg, &err) != 0) return cli_fail(cmd, &err);
    dt_model_init_random(&m, seed);
    int rc = dt_model_save_with(&m, out, &save, &err) != 0 ? cli_fail(cmd, &err) : 0;
    if (rc == 0) {
        char what[96];
        dt_config_describe(&cfg, what, sizeof what);
        printf("wrote %s (%s, %zu parameters)\n", out, what, m.n_params);
        cli_print_param_counts(&cfg);
    }
    dt_model_free(&m);
    return rc;
}

/* ---------------------------------------------------------------- info */

int cmd_info(int argc, char **argv) {
    static const struct option opts[] = {
        {"system", no_argument, 0, 'S'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *cmd = "info";
    int system = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'S': system = 1; break;
        case 'h':
            printf("usage: difftrans info MODEL_DIR\n       difftrans info --system\n\n"
                   "Prints the config, the parameter count and λ of every layer; with --system, the CPU, the\n"
                   "kernel path in use (portable | avx2 | avx512, the widest the CPU supports unless DT_ISA=...\n"
                   "forces one), the CPU's vector features and OpenBLAS's core. It takes no other option.\n");
            return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
    }
    if (system && optind < argc)
        return cli_error(cmd, "--system describes this machine and takes no MODEL_DIR (got '%s')", argv[optind]);
    if (system) {
        cli_print_system(stdout, "");
        return 0;
    }
    if (optind == argc) return cli_error(cmd, "expected one MODEL_DIR or --system (see difftrans info --help)");
    if (optind < argc - 1)
        return cli_error(cmd, "unexpected argument '%s': info takes one MODEL_DIR (see difftrans info --help)",
                         argv[optind + 1]);
    const char *dir = argv[optind];
    dt_model m;
    dt_error err;
    if (dt_model_load(&m, dir, &err) != 0) return cli_fail(cmd, &err);
    const dt_tok *tok = dt_model_tok(&m); /* NULL: byte-level */
    const dt_config *c = &m.cfg;
    printf("model:      %s\n", dir);
    static const char *const kinds[] = {"llama (Transformer)", "diffllama (DIFF Transformer)",
                                        "difftrans_v2 (DIFF Transformer V2)"};
    char what[96];
    dt_config_describe(c, what, sizeof what);
    printf("model_type: %s\n", kinds[c->arch]);
    printf("variant:    %s\n", what);
    printf("vocab %d | hidden %d | intermediate %d | layers %d | heads %d (kv %d) | head_dim %d\n", c->vocab_size,
           c->hidden_size, c->intermediate_size, c->num_hidden_layers, c->num_attention_heads,
           c->num_key_value_heads, c->head_dim);
    printf("max_position_embeddings %d | rms_norm_eps %g | rope_theta %g | tied embeddings %s\n",
           c->max_position_embeddings, (double)c->rms_norm_eps, (double)c->rope_theta,
           c->tie_word_embeddings ? "yes" : "no");
    const dt_rope_scaling *rs = &c->rope_scaling;
    if (rs->type == DT_ROPE_LINEAR) printf("rope_scaling linear | factor %g\n", rs->factor);
    if (rs->type == DT_ROPE_LLAMA3)
        printf("rope_scaling llama3 | factor %g | low_freq_factor %g | high_freq_factor %g | original context %d\n",
               rs->factor, rs->low_freq_factor, rs->high_freq_factor, rs->original_max_position_embeddings);
    if (tok) printf("tokenizer:  %s (%d tokens; the embedding has %d rows)\n", dt_tok_path(tok),
                    (int)dt_tok_vocab_size(tok), c->vocab_size);
    else if (m.vocab.ids_only_dir)
        printf("tokenizer:  none (token ids only: neither tokenizer.json nor the byte-level marker)\n");
    else printf("tokenizer:  byte-level (token id = byte)\n");
    printf("special tokens: bos %d | pad %d | eos", c->special.bos_token_id, c->special.pad_token_id);
    for (int i = 0; i < c->special.n_eos; i++) printf(" %d", c->special.eos_token_id[i]);
    printf("%s\n", c->special.n_eos ? "" : " none");
    printf("parameters: %zu in %d tensors\n", m.n_params, m.n_tensors);
    dt_quant_options qo;
    const dt_quant_scheme qs = dt_model_quant_scheme(&m, &qo);
    if (qs != DT_QUANT_NONE) {
        char per_token[32];
        cli_format_bytes((double)dt_model_decode_bytes(&m), per_token, sizeof per_token);
        printf("quantised: %s%s%s%s | weights read per decoded token %s\n", dt_quant_scheme_name(qs),
               qs == DT_QUANT_W8A8 ? (qo.dynamic_activations ? ", dynamic per-token activations" : ", static activation scales")
               : qo.float_activations ? ", float activations"
                                      : ", activations in int8 blocks of 32",
               qs == DT_QUANT_W8A8 && qo.smooth_alpha >= 0 ? ", smoothed" : "", qo.lm_head ? ", LM head too" : "",
               per_token);
    }
    if (c->arch == DT_ARCH_DIFF_V2) {
        static const char *const lambdas[] = {"a per-token λ = sigmoid(W_λ x)", "λ = 1 (no W_λ)",
                                              "a per-token λ = W_λ x (no sigmoid)"};
        printf("output heads: %d of width %d, each from query heads %s with %s\n", c->num_attention_heads / 2,
               c->head_dim, c->v2_pairs == DT_V2_PAIRS_CROSS ? "j, j+h (across kv groups)" : "2j, 2j+1",
               (unsigned)c->v2_lambda < 3 ? lambdas[c->v2_lambda] : "?");
    }
    if (c->arch == DT_ARCH_DIFF) {
        printf("differential heads: %d of width %d | lambda_std_dev %g | subln weight %s\n", c->num_attention_heads / 2,
               2 * c->head_dim, (double)c->lambda_std_dev, c->use_subln_weight ? "yes" : "no");
        printf("layer  lambda    lambda_init\n");
        for (int l = 0; l < c->num_hidden_layers; l++)
            printf("%5d  %8.5f  %8.5f\n", l, (double)dt_model_lambda(&m, l), (double)dt_lambda_init(l));
    }
    cli_print_param_counts(c);
    dt_model_free(&m);
    return 0;
}

/* ---------------------------------------------------------------- eval */

int cmd_eval(int argc, char **argv) {
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'},    {"tokens", required_argument, 0, 'k'},
        {"seq", required_argument, 0, 't'},     {"batch", required_argument, 0, 'b'},
        {"threads", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "eval", *data = NULL, *dataset = NULL;
    int seq = 256, batch = 8, threads = 0, seq_given = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'd': data = optarg; break;
        case 'k': dataset = optarg; break;
        case 't':
            bad = parse_int(cmd, "--seq", optarg, 1, 1 << 20, &seq);
            seq_given = 1;
            break;
        case 'b': bad = parse_int(cmd, "--batch", optarg, 1, 4096, &batch); break;
        case 'j': bad = parse_int(cmd, "--threads", optarg, 1, 1024, &threads); break;
        case 'h':
            printf("usage: difftrans eval MODEL_DIR (--data FILE.txt | --tokens DATASET) [--seq N] [--batch N]\n"
                   "                      [--threads N]\n\n"
                   "Mean next-token cross-entropy in consecutive windows of --seq tokens (capped at\n"
                   "max_position_embeddings, which a note on stderr says, and at the data's length) [256],\n"
                   "--batch windows at a time [8].\n"
                   "--data: the whole file, encoded with the model's tokenizer.json (bytes for a byte-level\n"
                   "model); --tokens: the validation split of a token dataset made with the model's tokenizer.\n"
                   "Prints the loss per token, perplexity, and bits per byte: the loss of the scored tokens\n"
                   "in bits over the bytes of text they stand for (the data's bytes per token times the\n"
                   "tokens scored; for --tokens the split's text as the tokenizer decodes it, special\n"
                   "tokens left out, as compare counts it), which compares models with different tokenizers.\n");
            return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind != argc - 1) return cli_error(cmd, "expected one MODEL_DIR (see difftrans eval --help)");
    if (!data == !dataset) return cli_error(cmd, "give --data FILE or --tokens DATASET (see difftrans eval --help)");
    cli_set_threads(threads);
    dt_model m;
    dt_error err;
    if (dt_model_load(&m, argv[optind], &err) != 0) return cli_fail(cmd, &err);
    int *tokens = NULL, rc = 0;
    size_t n = 0, scored = 0;
    double loss = 0, bytes_per_token = 1;
    if (dataset) {
        dt_tokens_summary ts;
        if (dt_tokens_info(dataset, &ts, &err) != 0 || dt_tokens_load(dataset, "val", m.cfg.vocab_size, &tokens, &n, &err) != 0)
            rc = cli_fail(cmd, &err);
        else bytes_per_token = (double)ts.bytes / (double)(ts.tokens[0] + ts.tokens[1]);
        /* ids mean text only through the tokenizer that made them: another one's ids within the embedding would
         * be scored as other tokens. A model of token ids only has no tokenizer to hold them against. */
        if (rc == 0 && !m.vocab.ids_only_dir) {
            dt_vocab dv;
            if (dt_vocab_load(&dv, dataset, &err) != 0) rc = cli_fail(cmd, &err);
            else {
                if (!dt_vocab_same(&dv, &m.vocab))
                    rc = cli_error(cmd, "--tokens %s: its ids are another tokenizer's than %s's (%s): tokenize the "
                                        "text with the model's tokenizer, or give --data",
                                   dataset, argv[optind],
                                   m.vocab.tok ? "their tokenizer.json files differ" : "the model is byte-level");
                dt_vocab_free(&dv);
            }
        }
        /* the split's own bytes, as compare counts them: the whole dataset's ratio (its end-of-document
         * tokens among the tokens) gave another bits per byte for the same held-out tokens */
        if (rc == 0 && n > 0 && !m.vocab.ids_only_dir) {
            char *text = NULL;
            size_t len = 0;
            if (dt_model_decode(&m, tokens, n, 1, &text, &len, &err) != 0) rc = cli_fail(cmd, &err);
            else if (len > 0) bytes_per_token = (double)len / (double)n;
            free(text);
        }
    } else {
        size_t bytes = 0;
        if (dt_model_text_tokens(&m, data, &tokens, &n, &bytes, &err) != 0) rc = cli_fail(cmd, &err);
        else bytes_per_token = n ? (double)bytes / (double)n : 1;
    }
    const char *what = dataset ? dataset : data;
    if (rc == 0 && n < 2) rc = cli_error(cmd, "%s: too short to evaluate (%zu token%s)", what, n, n == 1 ? "" : "s");
    /* a --seq past the model's positions was cut without a word (the default's cap is --help's) */
    if (rc == 0 && seq_given && seq > m.cfg.max_position_embeddings) {
        const int used = (size_t)m.cfg.max_position_embeddings + 1 > n ? (int)(n - 1) : m.cfg.max_position_embeddings;
        fprintf(stderr, "eval: --seq %d is more than %s's max_position_embeddings %d: windows of %d tokens%s\n", seq,
                argv[optind], m.cfg.max_position_embeddings, used,
                used < m.cfg.max_position_embeddings ? " (the data's length)" : "");
    }
    if (rc == 0 && dt_eval_tokens(&m, tokens, n, batch, seq, &loss, &scored, &err) != 0)
        rc = cli_error_code(cmd, err.code, "%s on %s: %s", argv[optind], what, err.msg);
    if (rc == 0)
        printf("%s on %s: loss %.4f per token | perplexity %.3f | %.4f bits per byte | %zu tokens scored "
               "(%.3f bytes per token)\n",
               argv[optind], what, loss, exp(loss), loss / M_LN2 / bytes_per_token, scored, bytes_per_token);
    free(tokens);
    dt_model_free(&m);
    return rc;
}

/* ---------------------------------------------------------------- export */

static void export_help(void) {
    printf("usage: difftrans export MODEL OUT_DIR [--hf] [--dtype f32|bf16|f16] [--max-shard-size SIZE] [--force]\n"
           "       difftrans export MODEL OUT.gguf --gguf [--type f32|f16|bf16|q8_0|q4_0] [--lm-head] [--force]\n\n"
           "Rewrites a checkpoint. With --hf the result is what plain Hugging Face\n"
           "transformers (DiffLlamaForCausalLM / LlamaForCausalLM) loads and reproduces exactly:\n"
           "learnable per-head norm weights are folded into o_proj's columns and no tensor or\n"
           "config key of our own is written. A quantised model is copied as it is (one file, its\n"
           "float tensors F32): --hf, --dtype and --max-shard-size are for float models.\n\n"
           "  --dtype D             store the weights as f32 [default], bf16 or f16 (rounded to\n"
           "                        nearest even, as torch casts); config.json's torch_dtype says which\n"
           "  --max-shard-size S    split the weights into model-0000K-of-0000N.safetensors shards of\n"
           "                        at most S (500MB, 2GiB, bytes) with model.safetensors.index.json,\n"
           "                        as transformers' save_pretrained does [one file]\n"
           "  --force               write into an OUT_DIR that already holds a model (replacing it)\n\n"
           "With --gguf, OUT is one GGUF file (llama.cpp's format) for llama.cpp, ollama and difftrans\n"
           "itself (every command that takes a model reads it): general.architecture \"llama\", the\n"
           "config as llama.* keys, the tensors under llama.cpp's names with the q_proj / k_proj rows\n"
           "reordered for its RoPE (adjacent channel pairs), and the vocabulary as tokenizer.ggml.*: a\n"
           "byte-level BPE tokenizer.json as \"gpt2\" with the \"gpt-2\" or \"llama-bpe\" pre-tokenizer; a\n"
           "SentencePiece-style BPE (Llama 2's tokenizer.json form: byte_fallback with the 256 <0xNN>\n"
           "tokens, the normalizer Prepend \"▁\" + Replace \" \" → \"▁\", no pre-tokenizer) as \"llama\"\n"
           "(SentencePiece: its tokens, their types and scores from the merges' ranks, refused naming\n"
           "the token where llama.cpp would cut text otherwise); a byte-level model as the 256 byte\n"
           "tokens. Other tokenizers are refused. Transformer (llama) models only: llama.cpp has no\n"
           "architecture for DIFF or DIFF V2, and no GGUF type holds w8a8.\n\n"
           "  --type T              f32, f16 or bf16: the 2-D weights in that type (norms F32)\n"
           "                        [f32 for a float model]; q8_0 or q4_0: the linear layers as ggml's\n"
           "                        blocks (a float model is quantised first; a quantised model keeps\n"
           "                        its own blocks, byte for byte, so --type must be its scheme or be\n"
           "                        left out), embeddings and norms F32. Quantised rows must be whole\n"
           "                        32-weight blocks: hidden and intermediate sizes multiples of 32\n"
           "  --lm-head             with q8_0 / q4_0 on a float model: quantise the LM head too [float;\n"
           "                        a quantised model's head is written as it is]\n"
           "  --force               replace an OUT that exists and is not a GGUF file (an existing GGUF\n"
           "                        file is replaced without it)\n");
}

/* --type of --gguf: a float type or a block scheme. */
static int parse_gguf_type(const char *cmd, const char *s, dt_dtype *dtype, dt_quant_scheme *scheme) {
    *scheme = DT_QUANT_NONE;
    *dtype = DT_F32;
    if (!strcmp(s, "q8_0")) *scheme = DT_QUANT_Q8_0;
    else if (!strcmp(s, "q4_0")) *scheme = DT_QUANT_Q4_0;
    else if (!strcmp(s, "f32") || !strcmp(s, "f16") || !strcmp(s, "bf16")) return cli_parse_dtype(cmd, s, dtype);
    else return cli_error(cmd, "--type '%s': expected f32, f16, bf16, q8_0 or q4_0", s);
    return 0;
}

/* 1 when path is a regular file that does not begin with the GGUF magic. */
static int file_not_gguf(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    const size_t got = f ? fread(magic, 1, sizeof magic, f) : 0;
    if (f) fclose(f);
    return got != sizeof magic || memcmp(magic, "GGUF", sizeof magic) != 0;
}

/* The model as a GGUF file: quantised first when a float model is asked for as q8_0 / q4_0. */
static int export_gguf(const char *cmd, const char *in, const char *out, const char *type, int lm_head, int force) {
    dt_dtype dtype = DT_F32;
    dt_quant_scheme want = DT_QUANT_NONE;
    if (type && parse_gguf_type(cmd, type, &dtype, &want)) return 1;
    /* a GGUF file rewritten in place (another --type) is what the user asked for; a checkpoint's
     * own file replaced by a GGUF file is the checkpoint lost */
    struct stat in_st;
    char name[4200];
    if (stat(in, &in_st) == 0 && S_ISDIR(in_st.st_mode) && cli_model_file_at(in, out, name, sizeof name))
        return cli_error(cmd, "%s: is the model's own %s, which the GGUF file would replace", out, name);
    /* a GGUF file is replaced like any build output; another file under that name (a checkpoint's
     * model.safetensors, its config.json) was lost without a word */
    if (!force && file_not_gguf(out))
        return cli_error(cmd, "%s: exists and is not a GGUF file: choose another name, or give --force to replace it",
                         out);
    dt_model m;
    dt_error err;
    if (dt_model_load(&m, in, &err) != 0) return cli_fail(cmd, &err);
    const dt_quant_scheme has = dt_model_quant_scheme(&m, NULL);
    int rc = 0;
    const char *no_hf = dt_config_hf_unsupported(&m.cfg);
    if (m.cfg.arch != DT_ARCH_LLAMA && no_hf) /* --hf would be refused too: DIFF V2, the ablations */
        rc = cli_error_code(cmd, DT_ERR_UNSUPPORTED,
                            "%s is a %s model: GGUF has no form for it (llama.cpp has no differential-attention "
                            "architecture), nor has Hugging Face (transformers has no equivalent of %s); train the "
                            "matched Transformer (--arch transformer) for llama.cpp",
                            in, dt_arch_name(m.cfg.arch), no_hf);
    else if (m.cfg.arch != DT_ARCH_LLAMA)
        rc = cli_error_code(cmd, DT_ERR_UNSUPPORTED,
                            "%s is a %s model: GGUF has no form for it (llama.cpp has no differential-attention "
                            "architecture); %s, or train the matched Transformer (--arch transformer) for llama.cpp",
                            in, dt_arch_name(m.cfg.arch),
                            has == DT_QUANT_NONE ? "export it with --hf for transformers"
                                                 : "its float model exports with --hf for transformers");
    else if (has != DT_QUANT_NONE && type && want != has)
        rc = cli_error(cmd, "%s is quantised as %s: it is written with its own blocks (--type %s, or leave --type out); "
                            "export the float model it was made from for another type",
                       in, dt_quant_scheme_name(has), dt_quant_scheme_name(has));
    else if (lm_head && (has != DT_QUANT_NONE || want == DT_QUANT_NONE))
        rc = cli_error(cmd, "--lm-head: only with --type q8_0 / q4_0 on a float model (a quantised model's head is "
                            "written as it is)");
    else if (has == DT_QUANT_NONE && want != DT_QUANT_NONE) {
        dt_quant_options qo;
        dt_quant_defaults(&qo);
        qo.scheme = want;
        qo.lm_head = lm_head;
        qo.quiet = 1;
        if (dt_model_quantize(&m, &qo, &err) != 0) rc = cli_fail(cmd, &err);
    }
    if (rc == 0 && dt_model_save_gguf(&m, out, dtype, &err) != 0) rc = cli_fail(cmd, &err);
    if (rc == 0) {
        /* the head as written: a quantised model's own, or the one --lm-head just quantised */
        dt_quant_options q;
        const dt_quant_scheme s = dt_model_quant_scheme(&m, &q);
        printf("wrote %s (GGUF, %s%s)\n", out,
               s != DT_QUANT_NONE ? dt_quant_scheme_name(s) : dtype == DT_F16 ? "f16" : dtype == DT_BF16 ? "bf16" : "f32",
               s != DT_QUANT_NONE && q.lm_head ? ", LM head quantised" : "");
    }
    dt_model_free(&m);
    return rc;
}

int cmd_export(int argc, char **argv) {
    static const struct option opts[] = {{"hf", no_argument, 0, 'f'},
                                         {"dtype", required_argument, 0, 'D'},
                                         {"max-shard-size", required_argument, 0, 'M'},
                                         {"gguf", no_argument, 0, 'g'},
                                         {"type", required_argument, 0, 'T'},
                                         {"lm-head", no_argument, 0, 'L'},
                                         {"force", no_argument, 0, 'F'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *cmd = "export", *type = NULL, *dir_flag = NULL, *gguf_flag = NULL;
    dt_save_options save = {0};
    int gguf = 0, lm_head = 0, force = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'f': save.hf_export = 1, dir_flag = "--hf"; break;
        case 'D':
            if (cli_parse_dtype(cmd, optarg, &save.dtype)) return 1;
            dir_flag = "--dtype";
            break;
        case 'M':
            if (cli_parse_size(cmd, "--max-shard-size", optarg, &save.max_shard_bytes)) return 1;
            dir_flag = "--max-shard-size";
            break;
        case 'g': gguf = 1; break;
        case 'T': type = optarg, gguf_flag = "--type"; break;
        case 'L': lm_head = 1, gguf_flag = "--lm-head"; break;
        case 'F': force = 1; break;
        case 'h': export_help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
    }
    if (optind != argc - 2)
        return cli_error(cmd, "expected MODEL and %s (see difftrans export --help)", gguf ? "OUT.gguf" : "OUT_DIR");
    if (gguf && dir_flag) return cli_error(cmd, "%s is for checkpoint directories, not --gguf (see --type)", dir_flag);
    if (!gguf && gguf_flag) return cli_error(cmd, "%s goes with --gguf", gguf_flag);
    if (gguf) return export_gguf(cmd, argv[optind], argv[optind + 1], type, lm_head, force);
    const char *out = argv[optind + 1];
    const size_t out_len = strlen(out);
    if (out_len > 5 && strcmp(out + out_len - 5, ".gguf") == 0)
        return cli_error(cmd, "%s: a .gguf name for a checkpoint directory; add --gguf to write a GGUF file", out);
    /* a model rewritten in place (another dtype, other shards) is what the user asked for */
    struct stat in_st, out_st;
    const int in_place = stat(argv[optind], &in_st) == 0 && stat(out, &out_st) == 0 && in_st.st_dev == out_st.st_dev &&
                         in_st.st_ino == out_st.st_ino;
    if (!in_place && cli_check_new_model_dir(cmd, "OUT_DIR", out, force, "choose a new directory") != 0) return 1;
    dt_model m;
    dt_error err;
    if (dt_model_load(&m, argv[optind], &err) != 0) return cli_fail(cmd, &err);
    int rc = 0; /* the vocabulary goes with the model */
    const dt_quant_scheme scheme = dt_model_quant_scheme(&m, NULL);
    if (save.hf_export && scheme != DT_QUANT_NONE) /* named here: the library's message names OUT_DIR */
        rc = cli_error_code(cmd, DT_ERR_UNSUPPORTED,
                            "%s: a quantised model (%s) has no Hugging Face form here: export --hf the float model "
                            "it was made from",
                            argv[optind], dt_quant_scheme_name(scheme));
    else if (dt_model_save_with(&m, argv[optind + 1], &save, &err) != 0) {
        static const cli_flag flags[] = {{"dtype", "--dtype"}, {"max_shard_bytes", "--max-shard-size"}};
        rc = cli_fail_flags(cmd, &err, flags, (int)(sizeof flags / sizeof flags[0]));
    }
    if (rc == 0) printf("wrote %s%s\n", argv[optind + 1], save.hf_export ? " (Hugging Face layout)" : "");
    dt_model_free(&m);
    return rc;
}
