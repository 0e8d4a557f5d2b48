/* cmd_needle.c — `difftrans needle`: the paper's multi-needle retrieval task.
 * `generate` writes a data set from a corpus, `eval` scores a checkpoint on its test set. The
 * task itself lives in src/analysis/: needle_generate.c (format, placement), needle_io.c (files),
 * needle_score.c (scoring). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "difftrans_analysis.h"
#include "cli.h"

static void help(void) {
    printf("usage: difftrans needle generate --corpus FILE.txt --out DIR [options]\n"
           "       difftrans needle eval MODEL_DIR --data DIR [options]\n\n"
           "Multi-needle retrieval (as in the paper). The data set is text, placed by bytes; `eval` reads it as the\n"
           "model does (bytes, or through the model's tokenizer.json). Each sample is a context of\n"
           "exactly --context bytes of corpus filler with N needle sentences hidden in it,\n"
           "    The magic number of KEY is VALUE.\n"
           "followed by one question per queried needle, each with its answer:\n"
           "    CONTEXT\n"
           "    \\nQuestion: What is the magic number of KEY1?\\nAnswer: VALUE1\n"
           "    \\nQuestion: What is the magic number of KEY2?\\nAnswer: VALUE2   (R questions; the text ends here)\n"
           "KEYs: random lowercase words of 4-8 letters, VALUEs: 5-digit numbers, both distinct within a sample.\n"
           "Depth d: the first queried needle's sentence starts as near to byte d*(context - its length) as the\n"
           "filler's line and sentence starts allow (d = 0: it opens the context, d = 1: it closes it); the others\n"
           "go to uniformly random line or sentence starts. A needle takes its sentence and one separator byte\n"
           "('\\n' at a line start, ' ' otherwise): at most %d bytes, so a context must hold N * %d bytes.\n"
           "The corpus loses NUL and CR bytes; other control bytes and malformed UTF-8 become spaces.\n\n"
           "Files in DIR: train.txt (samples, each followed by \"\\n\\n\"; for `difftrans train --data`),\n"
           "test.jsonl (one object per sample: text, byte offsets of every needle sentence and value, of every\n"
           "question and of every expected answer) and needle.json (parameters, seeds, generator version, and\n"
           "the model the set was sized for: path, max_position_embeddings, tokenizer fingerprint).\n\n"
           "difftrans needle generate --help and difftrans needle eval --help list the options.\n",
           DT_NEEDLE_UNIT_MAX, DT_NEEDLE_UNIT_MAX);
}

static void help_generate(void) {
    printf("usage: difftrans needle generate --corpus FILE.txt --out DIR [options]\n\n"
           "Writes DIR/train.txt, DIR/test.jsonl and DIR/needle.json (see difftrans needle --help for the format).\n"
           "Deterministic: the same arguments and corpus (and --model's tokenizer and context) give byte-identical\n"
           "files.\n\n"
           "  --corpus FILE     filler text (required)\n"
           "  --out DIR         output directory, created if missing (required)\n"
           "  --model MODEL     size the set for this model: without --context, the longest context at which\n"
           "                    every test sample fits its max_position_embeddings in its tokens (through its\n"
           "                    tokenizer, or bytes), after the longest that fits half of them; without\n"
           "                    --needles, fewer needles where 6 do not fit; a --context given is checked;\n"
           "                    a note says when the samples pass the training window (seq) its\n"
           "                    train_state.json records\n"
           "  --context LIST    context lengths in bytes, comma-separated [512,1024; with --model: fitted]\n"
           "  --needles N       needles per sample [6]\n"
           "  --queries R       needles asked per sample, R <= N; the first is the one at the depth [2]\n"
           "  --depths LIST     depths in [0, 1] of the first queried needle [0,0.25,0.5,0.75,1]\n"
           "  --train N         training samples [1000]\n"
           "  --test N          test samples [100]\n"
           "  --seed S          [42]; train and test samples draw from two different streams of it\n\n"
           "Sample i of a set gets context LIST[(i / #depths) %% #contexts] and depth DEPTHS[i %% #depths]\n"
           "(round-robin over the cells). The default contexts suit a byte-level model of 1024 positions or more;\n"
           "`needle eval` refuses a sample longer than its model's context in tokens, so give --model for others.\n"
           "needle.json records --model (its path, max_position_embeddings and tokenizer fingerprint).\n");
}

static void help_eval(void) {
    printf("usage: difftrans needle eval MODEL_DIR --data DIR [--json OUT.json] [--threads N]\n\n"
           "For every test sample and question, feeds the sample's text up to the end of \"Answer: \" (earlier\n"
           "questions with their true answers) through the model's KV cache and decodes the answer's length in\n"
           "bytes greedily (argmax). A query is correct when every byte matches. Prints accuracy per (context\n"
           "length, depth) cell and overall; first-query is the accuracy of the question at the cell's depth.\n"
           "A model with a tokenizer.json reads the text through it: the prompt is the tokens that end before\n"
           "the answer, and the answer the tokens that overlap it (\" 12345\" when the space joins the value);\n"
           "the greedy tokens must be exactly those (so they decode to the answer text).\n"
           "A set sized for a model of another tokenizer or context (`needle generate --model`, needle.json) is\n"
           "scored with a warning: its text reads the same, but its contexts are not the longest this one holds.\n\n"
           "  --data PATH       a directory from `needle generate` or its test.jsonl (required)\n"
           "  --json OUT.json   also write the cells and every answer as JSON\n"
           "  --threads N       OpenMP threads [all cores]\n"
           "  --quiet           no progress on stderr\n");
}

/* Splits "a,b,c" and parses each item with parse_item; an empty item is an error. */
static int parse_list(const char *cmd, const char *name, const char *s, int max, void *out,
                      int (*parse_item)(const char *cmd, const char *name, const char *item, void *out, int i), int *n) {
    int count = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0) return -(cli_error(cmd, "%s '%s': empty item in the list", name, s) != 0);
        if (count == max) return -(cli_error(cmd, "%s '%s': more than %d items", name, s, max) != 0);
        char item[64];
        if (len >= sizeof item) return -(cli_error(cmd, "%s '%s': item '%.*s' is too long", name, s, (int)len, p) != 0);
        memcpy(item, p, len);
        item[len] = '\0';
        if (parse_item(cmd, name, item, out, count) != 0) return -1;
        count++;
        if (!comma) break;
        p = comma + 1;
    }
    *n = count;
    return 0;
}

static int parse_context_item(const char *cmd, const char *name, const char *item, void *out, int i) {
    return parse_int(cmd, name, item, 1, DT_NEEDLE_MAX_CONTEXT, (int *)out + i);
}

/* A depth as a double (parse_float would round it to float and print 0.1 as 0.100000001). */
static int parse_depth_item(const char *cmd, const char *name, const char *item, void *out, int i) {
    char *end;
    errno = 0;
    double v = strtod(item, &end);
    if (errno || end == item || *end || !isfinite(v)) return -(cli_error(cmd, "%s '%s': not a number", name, item) != 0);
    if (v < 0 || v > 1) return -(cli_error(cmd, "%s %g: must be in [0, 1]", name, v) != 0);
    ((double *)out)[i] = v;
    return 0;
}

void cli_needle_fit_hint(dt_error *err, const char *model) {
    if (!strstr(err->msg, "longer than the model's max_position_embeddings")) return;
    const size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, "; `difftrans needle generate --model %s` makes a set that fits it",
             model);
}

static const char *plural(int n, const char *one, const char *many) { return n == 1 ? one : many; }

static void describe_reader(const dt_needle_model *x, char *out, size_t n) {
    if (x->tokenizer[0]) snprintf(out, n, "tokenizer %s, %d positions", x->tokenizer, x->max_position_embeddings);
    else snprintf(out, n, "bytes, %d positions", x->max_position_embeddings);
}

int cli_needle_sized_check(const char *cmd, const char *data, const char *model_dir, const dt_model *m) {
    dt_error err;
    dt_needle_model want, have;
    const int sized = dt_needle_sized_for(data, &want, &err);
    if (sized < 0 || (sized == 1 && dt_needle_model_of(m, model_dir, &have, &err) != 0)) return cli_fail(cmd, &err);
    if (sized == 0 || (strcmp(want.tokenizer, have.tokenizer) == 0 &&
                       want.max_position_embeddings == have.max_position_embeddings))
        return 0;
    char a[64], b[64];
    describe_reader(&want, a, sizeof a);
    describe_reader(&have, b, sizeof b);
    fprintf(stderr, "difftrans %s: warning: %s was sized for %s (%s), not for %s (%s): its contexts are the longest "
            "that fit that model, not this one; `difftrans needle generate --model %s` makes a set sized for it\n",
            cmd, data, want.path, a, have.path, b, have.path);
    return 0;
}

/* --model: the contexts in the model's tokens. A context given is checked; else the longest contexts
 * that fit (and, unless the user chose them, as many of the 6 needles as fit, queries at most those). */
static int size_for_model(const char *cmd, const char *model_dir, dt_needle_params *p, const dt_needle_corpus *corpus,
                          int context_given, int needles_given, int queries_given, dt_needle_model *sized) {
    dt_error err;
    dt_model m;
    if (dt_model_load(&m, model_dir, &err) != 0) return cli_fail(cmd, &err);
    if (dt_model_check_text(&m, &err) != 0 || dt_needle_model_of(&m, model_dir, sized, &err) != 0) {
        dt_model_free(&m);
        return cli_fail(cmd, &err);
    }
    const dt_tok *tok = dt_model_tok(&m);
    const int T = m.cfg.max_position_embeddings;
    const char *unit = tok ? "tokens" : "bytes";
    int rc = 0, most[DT_NEEDLE_MAX_LIST];
    if (context_given) {
        for (int i = 0; rc == 0 && i < p->n_contexts; i++) {
            if (dt_needle_most_tokens(p, corpus, tok, p->contexts[i], &most[i], &err) != 0) rc = cli_fail(cmd, &err);
            else if (most[i] > T)
                rc = cli_error(cmd, "--context %d: a test sample of that context is %d %s as %s reads it, more than "
                               "its max_position_embeddings %d (leave --context out to fit it)", p->contexts[i],
                               most[i], unit, model_dir, T);
        }
    } else {
        const int needles0 = p->needles;
        int n;
        while ((n = dt_needle_fit_contexts(p, corpus, tok, T, most, &err)) == 0) {
            if (needles_given || p->needles == 1 || (queries_given && p->needles == p->queries)) break;
            p->needles--;
            if (p->queries > p->needles) p->queries = p->needles;
        }
        if (n < 0) rc = cli_fail(cmd, &err);
        else if (n == 0) {
            const int shortest = p->needles * DT_NEEDLE_UNIT_MAX;
            int t = 0;
            if (dt_needle_most_tokens(p, corpus, tok, shortest, &t, &err) != 0) rc = cli_fail(cmd, &err);
            else
                rc = cli_error(cmd, "%s holds %d positions: a test sample of %d %s and %d %s (context %d bytes, "
                               "the least that holds them) is %d %s; give fewer --needles or --queries",
                               model_dir, T, p->needles, plural(p->needles, "needle", "needles"), p->queries,
                               plural(p->queries, "query", "queries"), shortest, t, unit);
        } else if (p->needles != needles0)
            printf("%d %s and %d %s per sample, the most whose samples fit %s's %d positions\n", p->needles,
                   plural(p->needles, "needle", "needles"), p->queries, plural(p->queries, "query", "queries"),
                   model_dir, T);
    }
    if (rc == 0) {
        printf("contexts for %s (max_position_embeddings %d, read as %s):", model_dir, T,
               tok ? "its tokenizer's tokens" : "bytes");
        for (int i = 0; i < p->n_contexts; i++)
            printf("%s %d bytes (test samples of at most %d %s)", i ? "," : "", p->contexts[i], most[i], unit);
        printf("\n");
    }
    /* a run trained on shorter windows never trained the positions past them: said, not refused (a model
     * extended or meant to be probed past its window is the user's call) */
    int window = 0, longest = 0;
    const int has_window = rc == 0 ? dt_train_window(model_dir, &window, &err) : 0;
    if (has_window < 0) rc = cli_fail(cmd, &err);
    for (int i = 0; has_window == 1 && i < p->n_contexts; i++)
        if (most[i] > longest) longest = most[i];
    if (has_window == 1 && longest > window)
        printf("note: %s was trained on windows of %d %s (its train_state.json seq); test samples of up to %d %s "
               "reach positions past them that it never trained, so its scores there measure extrapolation\n",
               model_dir, window, unit, longest, unit);
    dt_model_free(&m);
    return rc;
}

static int needle_generate(int argc, char **argv) {
    static const struct option opts[] = {
        {"corpus", required_argument, 0, 'c'}, {"out", required_argument, 0, 'o'},
        {"context", required_argument, 0, 'C'}, {"needles", required_argument, 0, 'N'},
        {"queries", required_argument, 0, 'R'}, {"depths", required_argument, 0, 'd'},
        {"train", required_argument, 0, 't'},  {"test", required_argument, 0, 'e'},
        {"seed", required_argument, 0, 's'},   {"model", required_argument, 0, 'm'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    const char *cmd = "needle generate", *corpus_path = NULL, *out = NULL, *model_dir = NULL;
    int context_given = 0, needles_given = 0, queries_given = 0;
    dt_needle_params p;
    dt_needle_params_default(&p);
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (ch) {
        case 'c': corpus_path = optarg; break;
        case 'o': out = optarg; break;
        case 'm': model_dir = optarg; break;
        case 'C':
            bad = parse_list(cmd, "--context", optarg, DT_NEEDLE_MAX_LIST, p.contexts, parse_context_item, &p.n_contexts);
            context_given = 1;
            break;
        case 'N':
            bad = parse_int(cmd, "--needles", optarg, 1, DT_NEEDLE_MAX_NEEDLES, &p.needles);
            needles_given = 1;
            break;
        case 'R':
            bad = parse_int(cmd, "--queries", optarg, 1, DT_NEEDLE_MAX_NEEDLES, &p.queries);
            queries_given = 1;
            break;
        case 'd': bad = parse_list(cmd, "--depths", optarg, DT_NEEDLE_MAX_LIST, p.depths, parse_depth_item, &p.n_depths); break;
        case 't': bad = parse_int(cmd, "--train", optarg, 0, DT_NEEDLE_MAX_SAMPLES, &p.n_train); break;
        case 'e': bad = parse_int(cmd, "--test", optarg, 0, DT_NEEDLE_MAX_SAMPLES, &p.n_test); break;
        case 's': bad = parse_u64(cmd, "--seed", optarg, &p.seed); break;
        case 'h': help_generate(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind != argc) return cli_error(cmd, "unexpected argument '%s' (see difftrans needle generate --help)", argv[optind]);
    if (!corpus_path || !out) return cli_error(cmd, "--corpus FILE and --out DIR are required");
    dt_error err;
    /* fitting starts from the fewest needles asked for; the defaults' 6 may not fit */
    if (model_dir && !context_given && queries_given && !needles_given && p.queries > p.needles) p.needles = p.queries;
    static const cli_flag params_flags[] = {
        {"needles", "--needles"}, {"queries", "--queries"}, {"context length", "--context"},
        {"context lengths", "--context"}, {"depth", "--depths"}, {"depths", "--depths"}, {"train", "--train"},
        {"test", "--test"}};
    if (dt_needle_params_validate(&p, &err) != 0) return cli_fail_flags(cmd, &err, params_flags, 8);

    dt_needle_corpus corpus;
    if (dt_needle_corpus_load(&corpus, corpus_path, &err) != 0) return cli_fail(cmd, &err);
    dt_needle_model sized;
    if (model_dir) {
        const int rc = size_for_model(cmd, model_dir, &p, &corpus, context_given, needles_given, queries_given, &sized);
        if (rc != 0) {
            dt_needle_corpus_free(&corpus);
            return rc;
        }
    }
    int rc = dt_needle_write_dataset_for(&p, &corpus, corpus_path, model_dir ? &sized : NULL, out, &err);
    dt_needle_corpus_free(&corpus);
    if (rc != 0) return cli_fail(cmd, &err);
    printf("wrote %s/train.txt (%d %s), %s/test.jsonl (%d %s), %s/needle.json\n", out, p.n_train,
           plural(p.n_train, "sample", "samples"), out, p.n_test, plural(p.n_test, "sample", "samples"), out);
    printf("cells: %d %s x %d %s, %d %s, %d %s per sample, seed %llu\n", p.n_contexts,
           plural(p.n_contexts, "context length", "context lengths"), p.n_depths, plural(p.n_depths, "depth", "depths"),
           p.needles, plural(p.needles, "needle", "needles"), p.queries, plural(p.queries, "query", "queries"),
           (unsigned long long)p.seed);
    return 0;
}

typedef struct {
    int tty;
    int last_tenth;
} progress_state;

static void show_progress(void *ctx, int done, int total, int correct, int scored) {
    progress_state *ps = ctx;
    double acc = scored ? (double)correct / scored : 0.0;
    if (ps->tty) {
        fprintf(stderr, "\rneedle eval: %d/%d samples, accuracy so far %.3f ", done, total, acc);
        if (done == total) fputc('\n', stderr);
    } else {
        int tenth = (int)((long)done * 10 / total);
        if (tenth == ps->last_tenth) return;
        ps->last_tenth = tenth;
        fprintf(stderr, "needle eval: %d/%d samples, accuracy so far %.3f\n", done, total, acc);
    }
    fflush(stderr);
}

static double ratio(int a, int b) { return b ? (double)a / b : 0.0; }

/* tok: the model's tokenizer (the predicted text is the ids decoded); NULL: bytes, printable ASCII shown. */
static cJSON *results_json(const char *model_dir, const dt_tok *tok, const dt_needle_testset *ts, const dt_needle_results *r) {
    cJSON *o = cJSON_CreateObject(), *cells = NULL, *items = NULL;
    int ok = o && cJSON_AddStringToObject(o, "model", model_dir) && cJSON_AddStringToObject(o, "data", ts->path) &&
             cJSON_AddNumberToObject(o, "samples", ts->n) && cJSON_AddNumberToObject(o, "queries", r->total) &&
             cJSON_AddNumberToObject(o, "correct", r->correct) &&
             cJSON_AddNumberToObject(o, "accuracy", ratio(r->correct, r->total)) &&
             (cells = cJSON_AddArrayToObject(o, "cells")) && (items = cJSON_AddArrayToObject(o, "items"));
    for (int i = 0; ok && i < r->n_cells; i++) {
        const dt_needle_cell *c = &r->cells[i];
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddItemToArray(cells, e);
        if (!ok) cJSON_Delete(e);
        ok = ok && cJSON_AddNumberToObject(e, "context_length", c->context_length) &&
             cJSON_AddNumberToObject(e, "depth", c->depth) && cJSON_AddNumberToObject(e, "samples", c->samples) &&
             cJSON_AddNumberToObject(e, "n", c->n) && cJSON_AddNumberToObject(e, "correct", c->correct) &&
             cJSON_AddNumberToObject(e, "accuracy", ratio(c->correct, c->n)) &&
             cJSON_AddNumberToObject(e, "first_query_correct", c->first_correct) &&
             cJSON_AddNumberToObject(e, "first_query_accuracy", ratio(c->first_correct, c->samples));
    }
    for (int i = 0; ok && i < r->n_items; i++) {
        const dt_needle_item *it = &r->items[i];
        const dt_needle_sample *s = &ts->samples[it->sample];
        const dt_needle_needle *nd = &s->needles[s->queries[it->query].needle];
        char bytes[DT_NEEDLE_VALUE_CAP + 1], *decoded = NULL, *shown = bytes;
        size_t n_decoded = 0;
        dt_error err;
        for (int k = 0; k < it->n_predicted; k++)
            bytes[k] = it->predicted[k] >= 32 && it->predicted[k] < 127 ? (char)it->predicted[k] : '?';
        bytes[it->n_predicted] = '\0';
        if (tok) {
            int32_t ids32[DT_NEEDLE_VALUE_CAP];
            for (int k = 0; k < it->n_predicted; k++) ids32[k] = it->predicted[k];
            if (dt_tok_decode(tok, ids32, (size_t)it->n_predicted, 0, &decoded, &n_decoded, &err) != 0) ok = 0;
            shown = decoded;
        }
        cJSON *e = ok ? cJSON_CreateObject() : NULL, *ids = NULL;
        ok = e && cJSON_AddItemToArray(items, e);
        if (!ok) cJSON_Delete(e);
        ok = ok && cJSON_AddNumberToObject(e, "id", (double)s->id) && cJSON_AddNumberToObject(e, "query", it->query) &&
             cJSON_AddNumberToObject(e, "context_length", s->context_length) &&
             cJSON_AddNumberToObject(e, "depth", s->depth) && cJSON_AddStringToObject(e, "key", nd->key) &&
             cJSON_AddStringToObject(e, "expected", nd->value) && cJSON_AddStringToObject(e, "predicted", shown) &&
             (ids = cJSON_CreateIntArray(it->predicted, it->n_predicted)) && cJSON_AddItemToObject(e, "predicted_ids", ids);
        if (!ok && ids && !cJSON_GetObjectItemCaseSensitive(e, "predicted_ids")) cJSON_Delete(ids);
        ok = ok && cJSON_AddBoolToObject(e, "correct", it->correct);
        free(decoded);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int write_json(const char *cmd, const char *path, cJSON *o) {
    char *text = cJSON_Print(o);
    if (!text) return cli_error_code(cmd, DT_ERR_NOMEM, "%s: out of memory", path);
    dt_atomic_file f;
    dt_error err;
    int rc = 0;
    if (dt_atomic_open(&f, path, &err) != 0) rc = cli_fail(cmd, &err);
    else if (fputs(text, f.fp) == EOF || fputc('\n', f.fp) == EOF) {
        rc = cli_error_code(cmd, DT_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        dt_atomic_abort(&f);
    } else if (dt_atomic_commit(&f, &err) != 0) rc = cli_fail(cmd, &err);
    free(text);
    return rc;
}

static int needle_evaluate(int argc, char **argv) {
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'},    {"json", required_argument, 0, 'J'},
        {"threads", required_argument, 0, 'j'}, {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0},
    };
    const char *cmd = "needle eval", *data = NULL, *json = NULL;
    int threads = 0, quiet = 0;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'd': data = optarg; break;
        case 'J': json = optarg; break;
        case 'j':
            if (parse_int(cmd, "--threads", optarg, 1, 1024, &threads)) return 1;
            break;
        case 'q': quiet = 1; break;
        case 'h': help_eval(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
    }
    if (optind != argc - 1) return cli_error(cmd, "expected one MODEL_DIR (see difftrans needle eval --help)");
    if (!data) return cli_error(cmd, "--data DIR is required (a directory from `difftrans needle generate`)");
    const char *model_dir = argv[optind];
    cli_set_threads(threads);

    dt_error err;
    dt_needle_testset ts;
    if (dt_needle_load_testset(&ts, data, &err) != 0) return cli_fail(cmd, &err);
    dt_model m;
    if (dt_model_load(&m, model_dir, &err) != 0) {
        dt_needle_testset_free(&ts);
        return cli_fail(cmd, &err);
    }
    if (dt_model_check_text(&m, &err) != 0) { /* the needle texts go through its tokenizer */
        dt_model_free(&m);
        dt_needle_testset_free(&ts);
        return cli_fail(cmd, &err);
    }
    const int sized_rc = cli_needle_sized_check(cmd, data, model_dir, &m);
    if (sized_rc != 0) {
        dt_model_free(&m);
        dt_needle_testset_free(&ts);
        return sized_rc;
    }
    const dt_tok *tok = dt_model_tok(&m); /* NULL: a byte-level model */
    progress_state ps = {.tty = isatty(2), .last_tenth = 0};
    dt_needle_results r;
    int rc = 0;
    if (dt_needle_eval(&m, tok, &ts, &r, quiet ? NULL : show_progress, &ps, &err) != 0) {
        cli_needle_fit_hint(&err, model_dir);
        rc = cli_fail(cmd, &err);
    }
    if (rc == 0) {
        int n_queries = 0;
        for (int i = 0; i < ts.n; i++) n_queries += ts.samples[i].n_queries;
        printf("needle eval: %s on %s (%d %s, %d %s)\n", model_dir, ts.path, ts.n, plural(ts.n, "sample", "samples"),
               n_queries, plural(n_queries, "query", "queries"));
        printf("%8s %6s %8s %8s %8s %9s %12s\n", "context", "depth", "samples", "queries", "correct", "accuracy",
               "first-query");
        for (int i = 0; i < r.n_cells; i++) {
            const dt_needle_cell *c = &r.cells[i];
            printf("%8d %6.3g %8d %8d %8d %9.3f %12.3f\n", c->context_length, c->depth, c->samples, c->n, c->correct,
                   ratio(c->correct, c->n), ratio(c->first_correct, c->samples));
        }
        printf("%8s %6s %8d %8d %8d %9.3f\n", "overall", "", ts.n, r.total, r.correct, ratio(r.correct, r.total));
        if (json) {
            cJSON *o = results_json(model_dir, tok, &ts, &r);
            if (!o) rc = cli_error_code(cmd, DT_ERR_NOMEM, "%s: out of memory", json);
            else rc = write_json(cmd, json, o);
            cJSON_Delete(o);
        }
        dt_needle_results_free(&r);
    }
    dt_model_free(&m);
    dt_needle_testset_free(&ts);
    return rc;
}

int cmd_needle(int argc, char **argv) {
    if (argc < 2) return cli_error("needle", "expected a subcommand: generate or eval (see difftrans needle --help)");
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        help();
        return 0;
    }
    if (!strcmp(sub, "generate")) return needle_generate(argc - 1, argv + 1);
    if (!strcmp(sub, "eval")) return needle_evaluate(argc - 1, argv + 1);
    return cli_error("needle", "unknown subcommand '%s' (expected generate or eval; see difftrans needle --help)", sub);
}
