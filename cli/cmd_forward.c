/* cmd_forward.c — `difftrans forward`: the interop surface. A batch of token ids in, logits,
 * loss and (optionally) every parameter's gradient out, as a safetensors file. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(void) {
    printf("usage: difftrans forward MODEL_DIR --input IDS.txt --output OUT.safetensors [--grads]\n\n"
           "IDS.txt: one sequence per line of whitespace-separated token ids, all lines the same length.\n"
           "OUT holds  logits  F32 [B, T, V]\n"
           "           loss    F32 []  mean cross-entropy of token t+1 given tokens <= t over B×(T−1)\n"
           "and with --grads  grad.<tensor name>  for every parameter of the checkpoint.\n\n"
           "  --threads N   OpenMP threads [all cores]\n");
}

int cmd_forward(int argc, char **argv) {
    static const struct option opts[] = {
        {"input", required_argument, 0, 'i'}, {"output", required_argument, 0, 'o'},
        {"grads", no_argument, 0, 'g'},       {"threads", required_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0},
    };
    const char *cmd = "forward", *input = NULL, *output = NULL;
    int grads = 0, threads = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'i': input = optarg; break;
        case 'o': output = optarg; break;
        case 'g': grads = 1; break;
        case 'j':
            if (parse_int(cmd, "--threads", optarg, 1, 1024, &threads)) return 1;
            break;
        case 'h': help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
    }
    if (optind != argc - 1) return cli_error(cmd, "expected one MODEL_DIR (see difftrans forward --help)");
    if (!input || !output) return cli_error(cmd, "--input IDS.txt and --output OUT.safetensors are required");
    cli_set_threads(threads);

    char name[4200];
    if (cli_model_file_at(argv[optind], output, name, sizeof name))
        return cli_error(cmd, "--output %s: is the model's own %s, which the logits would replace", output, name);
    dt_model m;
    dt_error err;
    if (dt_model_load(&m, argv[optind], &err) != 0) return cli_fail(cmd, &err);
    int *ids = NULL, B = 0, T = 0, rc = 0;
    if (dt_ids_read(input, m.cfg.vocab_size, &ids, &B, &T, &err) != 0) rc = cli_fail(cmd, &err);
    if (rc == 0 && T > m.cfg.max_position_embeddings)
        rc = cli_error(cmd, "%s: sequences of %d tokens exceed max_position_embeddings %d", input, T,
                       m.cfg.max_position_embeddings);
    if (rc == 0 && grads && dt_model_quant_scheme(&m, NULL) != DT_QUANT_NONE)
        rc = cli_error(cmd, "%s is quantised (%s): --grads needs float weights; use the float model it was made from",
                       argv[optind], dt_quant_scheme_name(dt_model_quant_scheme(&m, NULL)));
    if (rc == 0 && grads && T < 2) rc = cli_error(cmd, "%s: --grads needs sequences of at least 2 tokens", input);

    const size_t N = (size_t)B * T, V = (size_t)m.cfg.vocab_size;
    int *targets = NULL;
    float *logits = NULL, *g = NULL, loss = NAN;
    dt_st_entry *entries = NULL;
    dt_runstate *rs = NULL;
    if (rc == 0) {
        targets = malloc(N * sizeof(int));
        logits = malloc(N * V * sizeof(float));
        g = grads ? calloc(m.n_params, sizeof(float)) : NULL;
        entries = calloc((size_t)m.n_tensors + 2, sizeof *entries);
        if (!targets || !logits || (grads && !g) || !entries) rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    }
    if (rc == 0 && !(rs = dt_runstate_create(&m, B, T, &err))) rc = cli_fail(cmd, &err);
    if (rc == 0) {
        for (size_t i = 0; i < N; i++) targets[i] = (i % T) + 1 < (size_t)T ? ids[i + 1] : -1;
        if (dt_forward(&m, rs, ids, targets, B, T, &loss, &err) != 0) rc = cli_fail(cmd, &err);
    }
    if (rc == 0) {
        if (T < 2) loss = NAN; /* no position has a next token */
        memcpy(logits, dt_runstate_logits(rs), N * V * sizeof(float));
        if (grads) dt_backward(&m, rs, g);
        int n = 0;
        entries[n++] = (dt_st_entry){.name = "logits", .ndim = 3, .shape = {B, T, (int64_t)V}, .data = logits};
        entries[n++] = (dt_st_entry){.name = "loss", .ndim = 0, .data = &loss};
        char(*names)[104] = grads ? calloc((size_t)m.n_tensors, sizeof *names) : NULL;
        for (int i = 0; grads && names && i < m.n_tensors; i++) {
            const dt_tensor *t = &m.tensors[i];
            snprintf(names[i], sizeof names[i], "grad.%s", t->name);
            entries[n++] = (dt_st_entry){.name = names[i], .ndim = t->ndim, .shape = {t->shape[0], t->shape[1]},
                                         .data = g + t->offset};
        }
        if (grads && !names) rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
        else if (dt_st_write_f32(output, entries, n, &err) != 0) rc = cli_fail(cmd, &err);
        free(names);
    }
    dt_runstate_free(rs);
    free(entries);
    free(g);
    free(logits);
    free(targets);
    free(ids);
    dt_model_free(&m);
    return rc;
}
