/* cmd_quantize.c — `difftrans quantize MODEL OUT --scheme SCHEME`: post-training quantisation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static void quantize_help(void) {
    printf("usage: difftrans quantize MODEL_DIR OUT_DIR --scheme q8_0|q4_0|w8a8\n"
           "                          [--calib FILE --calib-samples N --seq T --seed N]\n"
           "                          [--dynamic] [--smooth ALPHA] [--float-activations] [--lm-head]\n"
           "                          [--threads N]\n\n"
           "Writes a quantised copy of a float checkpoint to the new directory OUT_DIR (built under a\n"
           "temporary name and renamed, so a failure leaves nothing). Linear layers (q, k, v, o, gate,\n"
           "up, down) are quantised; embeddings, norms, λ vectors and the LM head stay float32.\n"
           "  q8_0   8-bit weights, blocks of 32 with one half-precision scale each (ggml's Q8_0);\n"
           "         activations rounded to 8-bit blocks of 32 per token for integer dot products\n"
           "  q4_0   4-bit weights, the same blocks (ggml's Q4_0); activations as for q8_0\n"
           "  w8a8   8-bit weights per output channel and 8-bit activations: static per-tensor input\n"
           "         scales calibrated on --calib text (default), or per token at run time (--dynamic)\n"
           "options:\n"
           "  --calib FILE        calibration text, a text file (a token dataset directory is refused;\n"
           "                      needed by w8a8 unless --dynamic without --smooth; refused, as are\n"
           "                      --calib-samples, --seq and --seed, where nothing is calibrated)\n"
           "  --calib-samples N   windows drawn without overlap from FILE [300]; refused when FILE is\n"
           "                      too short for N windows of T tokens\n"
           "  --seq T             tokens per calibration window [128, at most the model's context]\n"
           "  --seed N            which windows are drawn [1]; a fixed seed gives the same result\n"
           "  --smooth ALPHA      w8a8: SmoothQuant scale migration of strength ALPHA in [0, 1]\n"
           "  --dynamic           w8a8: per-token activation scales instead of static ones\n"
           "  --float-activations q8_0, q4_0: keep activations float (w8a16): no rounding of the\n"
           "                      activations, slower decoding; for measuring the weights' error alone\n"
           "  --lm-head           also quantise the LM head\n");
}

int cmd_quantize(int argc, char **argv) {
    static const struct option opts[] = {
        {"scheme", required_argument, 0, 'S'},  {"calib", required_argument, 0, 'c'},
        {"calib-samples", required_argument, 0, 'n'}, {"seq", required_argument, 0, 't'},
        {"seed", required_argument, 0, 's'},    {"smooth", required_argument, 0, 'a'},
        {"dynamic", no_argument, 0, 'd'},       {"lm-head", no_argument, 0, 'l'},
        {"threads", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
        {"float-activations", no_argument, 0, 'f'},
        {0, 0, 0, 0},
    };
    const char *cmd = "quantize", *scheme = NULL;
    dt_quant_options o;
    dt_quant_defaults(&o);
    int threads = 0, seq_given = 0, samples_given = 0, seed_given = 0;
    dt_error err;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'S': scheme = optarg; break;
        case 'c': o.calib_path = optarg; break;
        case 'n':
            bad = parse_int(cmd, "--calib-samples", optarg, 1, 1 << 24, &o.calib_samples);
            samples_given = 1;
            break;
        case 't': bad = parse_int(cmd, "--seq", optarg, 1, 1 << 20, &o.calib_seq), seq_given = 1; break;
        case 's': bad = parse_u64(cmd, "--seed", optarg, &o.seed), seed_given = 1; break;
        case 'a': bad = parse_float(cmd, "--smooth", optarg, 0, 1, &o.smooth_alpha); break;
        case 'd': o.dynamic_activations = 1; break;
        case 'l': o.lm_head = 1; break;
        case 'f': o.float_activations = 1; break;
        case 'j': bad = parse_int(cmd, "--threads", optarg, 1, 1024, &threads); break;
        case 'h': quantize_help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind != argc - 2) return cli_error(cmd, "expected MODEL_DIR OUT_DIR (see difftrans quantize --help)");
    if (!scheme) return cli_error(cmd, "--scheme is required: q8_0, q4_0 or w8a8");
    if (dt_quant_scheme_parse(scheme, &o.scheme, &err) != 0)
        return cli_error_code(cmd, err.code, "--scheme: %s", err.msg);
    if (o.scheme != DT_QUANT_W8A8 && (o.dynamic_activations || o.smooth_alpha >= 0))
        return cli_error(cmd, "%s applies to w8a8 only (%s rounds activations per block)",
                         !o.dynamic_activations ? "--smooth"
                         : o.smooth_alpha >= 0  ? "--dynamic and --smooth"
                                                : "--dynamic",
                         scheme);
    if (o.scheme == DT_QUANT_W8A8 && o.float_activations)
        return cli_error(cmd, "--float-activations applies to q8_0 and q4_0 (w8a8 multiplies int8 activations)");
    const int calibrated = o.scheme == DT_QUANT_W8A8 && (!o.dynamic_activations || o.smooth_alpha >= 0);
    if (calibrated && !o.calib_path)
        return cli_error(cmd, "w8a8 %s needs --calib FILE (text to measure activation ranges on)",
                         o.dynamic_activations ? "with --smooth" : "with static activation scales");
    /* they were dropped without a word: a q8_0 model "calibrated" on the user's text was not */
    if (!calibrated && (o.calib_path || samples_given || seq_given || seed_given)) {
        char given[64] = "";
        const char *names[] = {"--calib", "--calib-samples", "--seq", "--seed"};
        const int on[] = {o.calib_path != NULL, samples_given, seq_given, seed_given};
        for (int i = 0; i < 4; i++)
            if (on[i]) {
                const size_t used = strlen(given);
                snprintf(given + used, sizeof given - used, "%s%s", used ? ", " : "", names[i]);
            }
        const int w8a8 = o.scheme == DT_QUANT_W8A8;
        return cli_error(cmd, "%s: %s takes no calibration (%s); calibration is for w8a8 with static scales or "
                              "--smooth",
                         given, w8a8 ? "w8a8 --dynamic" : scheme,
                         w8a8 ? "its activation scales come from each token at run time"
                              : "its scales come from the weights and, at run time, the activations");
    }
    cli_set_threads(threads);
    const char *in = argv[optind], *out = argv[optind + 1];
    /* the writer refuses it too, but only after loading and calibrating (minutes for a large model) */
    struct stat sb;
    if (stat(out, &sb) == 0)
        return cli_error(cmd, "%s already exists: a quantised checkpoint is written to a new directory", out);
    dt_model m;
    if (dt_model_load(&m, in, &err) != 0) return cli_fail(cmd, &err);
    int rc = 0;
    if (dt_model_quant_scheme(&m, NULL) != DT_QUANT_NONE)
        rc = cli_error(cmd, "%s is already quantised: quantise the float model it was made from", in);
    if (rc == 0 && !seq_given && o.calib_seq > m.cfg.max_position_embeddings) o.calib_seq = m.cfg.max_position_embeddings;
    const size_t before = dt_model_decode_bytes(&m);
    static const cli_flag flags[] = {{"calib_seq", "--seq"}, {"calib_samples", "--calib-samples"},
                                     {"calib_path", "--calib"}, {"smooth_alpha", "--smooth"}};
    if (rc == 0 && dt_model_quantize(&m, &o, &err) != 0) rc = cli_fail_flags(cmd, &err, flags, 4);
    if (rc == 0 && dt_model_save(&m, out, 0, &err) != 0) rc = cli_fail(cmd, &err);
    if (rc == 0) {
        char per_token[32], per_token_f32[32];
        cli_format_bytes((double)dt_model_decode_bytes(&m), per_token, sizeof per_token);
        cli_format_bytes((double)before, per_token_f32, sizeof per_token_f32);
        printf("wrote %s: %s, weights read per decoded token %s (float32: %s, %.2fx smaller)\n", out, scheme, per_token,
               per_token_f32, (double)before / dt_model_decode_bytes(&m));
    }
    dt_model_free(&m);
    return rc;
}
