/* cmd_serve.c — `difftrans serve`: a checkpoint behind an OpenAI-compatible HTTP API, with the
 * serving engine's continuous batching (server/ holds the HTTP side). */
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "server.h"

static void help(void) {
    printf("usage: difftrans serve MODEL_DIR [options]\n\n"
           "Serves a checkpoint (float or quantised; DIFF, DIFF V2 or Transformer) over HTTP with the\n"
           "OpenAI API: POST /v1/completions and /v1/chat/completions (streamed as server-sent events\n"
           "with \"stream\": true), GET /v1/models, /health, /metrics (Prometheus), the attention maps\n"
           "of a prompt at POST /v1/difftrans/attention, and a page at / to try it and look at them.\n"
           "Requests are decoded together: up to --parallel sequences share every step, joining and\n"
           "leaving between steps. Prints one line, 'difftrans serve: listening on http://HOST:PORT\n"
           "(...)', when ready; one line per request on stderr. SIGINT / SIGTERM: no new connections,\n"
           "the requests in flight get --drain-timeout to finish (then they end with a 503\n"
           "shutting_down error, an error event when streamed), exit 0.\n\n"
           "  --host ADDR              address to listen on (a name or a numeric IPv4 / IPv6 address);\n"
           "                           anything but loopback exposes the model to the network [127.0.0.1]\n"
           "  --port N                 TCP port, 0 = any free one (the line printed says which) [8080]\n"
           "  --parallel N             sequences decoded together: KV-cache slots [4]\n"
           "  --ctx T                  tokens per slot, prompt and reply [the model's max_position_embeddings]\n"
           "  --kv-cache TYPE          f32 | f16 | int8: storage of the cached keys and values [f32]\n"
           "  --api-key KEY            require 'Authorization: Bearer KEY' on /v1/* and /metrics\n"
           "                           (/ and /health stay open) [none]\n"
           "  --cors ORIGINS           let pages from these origins call the server from a browser: a\n"
           "                           comma-separated list of scheme://host[:port] (e.g. http://localhost:3000),\n"
           "                           or * for any page; repeatable. Preflights (OPTIONS) are answered and\n"
           "                           replies carry Access-Control-Allow-Origin. Off by default: with it any\n"
           "                           web page open in a browser on this machine could use the model (and\n"
           "                           read its replies); with --api-key a page needs the key as well [none]\n"
           "  --threads N              OpenMP threads of the engine's compute [all cores]\n"
           "  --queue N                requests waiting for a slot before more are refused with 503 [64]\n"
           "  --chat-template NAME     chatml | llama3 | llama2 | mistral for /v1/chat/completions\n"
           "                           [recognised from tokenizer_config.json's chat_template, a GGUF\n"
           "                           model's tokenizer.chat_template; chat is refused when it is none\n"
           "                           of these]\n"
           "  --max-body BYTES         largest request body; more is refused with 413 (a number, or with\n"
           "                           KB/MB/KiB/MiB...) [1 MiB]\n"
           "  --attention-max-tokens N longest prompt /v1/difftrans/attention takes (its reply grows as\n"
           "                           N^2 per head) [256]\n"
           "  --model-name NAME        the model's id in /v1/models and replies [the directory's name]\n"
           "  --max-connections N      open connections at most, each a thread; more are closed as they\n"
           "                           arrive [max(512, 2 x (queue + parallel) + 64)]\n"
           "  --timeout S              seconds a connection may stay silent (idle between requests, or\n"
           "                           sending its request) before it is closed [30]\n"
           "  --drain-timeout S        seconds the requests in flight get to finish after SIGINT /\n"
           "                           SIGTERM [10]\n"
           "  --quiet                  no log lines on stderr\n"
           "  -h, --help               this text\n");
}

static int set_threads(void *ctx) {
    omp_set_num_threads(*(int *)ctx);
    return 0;
}

/* The directory's last component, without trailing slashes. */
static void basename_of(const char *dir, char *out, size_t n) {
    size_t end = strlen(dir);
    while (end > 1 && dir[end - 1] == '/') end--;
    size_t start = end;
    while (start > 0 && dir[start - 1] != '/') start--;
    snprintf(out, n, "%.*s", (int)(end - start), dir + start);
}

int cmd_serve(int argc, char **argv) {
    static const struct option opts[] = {
        {"host", required_argument, 0, 'H'},
        {"port", required_argument, 0, 'p'},
        {"parallel", required_argument, 0, 'P'},
        {"ctx", required_argument, 0, 'c'},
        {"kv-cache", required_argument, 0, 'K'},
        {"api-key", required_argument, 0, 'a'},
        {"threads", required_argument, 0, 'j'},
        {"queue", required_argument, 0, 'q'},
        {"chat-template", required_argument, 0, 't'},
        {"max-body", required_argument, 0, 'b'},
        {"attention-max-tokens", required_argument, 0, 'A'},
        {"model-name", required_argument, 0, 'n'},
        {"max-connections", required_argument, 0, 'C'},
        {"timeout", required_argument, 0, 'T'},
        {"drain-timeout", required_argument, 0, 'D'},
        {"cors", required_argument, 0, 'O'},
        {"quiet", no_argument, 0, 'Q'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "serve";
    srv_options o;
    srv_options_defaults(&o);
    srv_chat_kind forced = SRV_CHAT_NONE;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        uint64_t bytes;
        switch (ch) {
        case 'H': o.host = optarg; break;
        case 'p': bad = parse_int(cmd, "--port", optarg, 0, 65535, &o.port); break;
        case 'P': bad = parse_int(cmd, "--parallel", optarg, 1, 1024, &o.parallel); break;
        case 'c': bad = parse_int(cmd, "--ctx", optarg, 1, 1 << 24, &o.ctx); break;
        case 'K':
            bad = cli_parse_kv_cache(cmd, optarg, &o.kv_cache);
            break;
        case 'a':
            if (!*optarg) bad = cli_error(cmd, "--api-key: an empty key");
            o.api_key = optarg;
            break;
        case 'j': bad = parse_int(cmd, "--threads", optarg, 1, 1024, &o.threads); break;
        case 'q': bad = parse_int(cmd, "--queue", optarg, 1, 1 << 20, &o.queue); break;
        case 't':
            if (srv_chat_parse_name(optarg, &forced) != 0)
                bad = cli_error(cmd, "--chat-template '%s': expected chatml, llama3, llama2 or mistral", optarg);
            o.chat_template = optarg;
            break;
        case 'b':
            if (cli_parse_size(cmd, "--max-body", optarg, &bytes) != 0) bad = 1;
            else if (bytes < 1 || bytes > ((uint64_t)1 << 32))
                bad = cli_error(cmd, "--max-body %s: must be 1 byte to 4 GiB", optarg);
            else o.max_body = (size_t)bytes;
            break;
        case 'A': bad = parse_int(cmd, "--attention-max-tokens", optarg, 1, 4096, &o.attention_max_tokens); break;
        case 'n':
            if (!*optarg || strlen(optarg) >= 255) bad = cli_error(cmd, "--model-name: 1 to 254 bytes");
            o.model_name = optarg;
            break;
        case 'C': bad = parse_int(cmd, "--max-connections", optarg, 1, 65536, &o.max_connections); break;
        case 'T': bad = parse_int(cmd, "--timeout", optarg, 1, 3600, &o.timeout_s); break;
        case 'D': bad = parse_int(cmd, "--drain-timeout", optarg, 0, 3600, &o.drain_s); break;
        case 'O': {
            char why[300];
            if (o.n_cors == SRV_MAX_CORS)
                bad = cli_error(cmd, "--cors: at most %d times (each takes a list)", SRV_MAX_CORS);
            else if (srv_cors_check(optarg, why, sizeof why) != 0) bad = cli_error(cmd, "--cors %s", why);
            else o.cors[o.n_cors++] = optarg;
            break;
        }
        case 'Q': o.quiet = 1; break;
        case 'h': help(); return 0;
        default: return cli_bad_option(cmd, argc, argv);
        }
        if (bad) return 1;
    }
    if (optind != argc - 1) return cli_error(cmd, "expected one MODEL_DIR (see difftrans serve --help)");
    const char *dir = argv[optind];
    cli_set_threads(o.threads);

    static dt_model m; /* lives until the engine is freed */
    dt_error err;
    if (dt_model_load(&m, dir, &err) != 0) return cli_fail(cmd, &err);
    int rc = dt_model_check_text(&m, &err) != 0 ? cli_fail(cmd, &err) : 0; /* every endpoint gives text */
    static srv s;
    memset(&s, 0, sizeof s);
    s.m = &m;
    /* reply ids count on from a random start: two servers started in the same second gave the same ids */
    if (getrandom(&s.next_id, sizeof s.next_id, 0) != (ssize_t)sizeof s.next_id)
        s.next_id = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    s.opt = o;
    s.n_slots = o.parallel;
    s.ctx = o.ctx ? o.ctx : m.cfg.max_position_embeddings;
    if (rc == 0 && s.ctx > m.cfg.max_position_embeddings)
        rc = cli_error(cmd, "--ctx %d: more than the model's max_position_embeddings %d", s.ctx,
                       m.cfg.max_position_embeddings);
    if (o.model_name) snprintf(s.name, sizeof s.name, "%s", o.model_name);
    else basename_of(dir, s.name, sizeof s.name);
    s.chat = o.chat_template ? forced : srv_chat_detect(m.vocab.tokenizer_config, m.vocab.tokenizer_config_len);
    srv_set_vocab_texts(&s);
    srv_set_fingerprint(&s);
    s.metrics = rc == 0 ? srv_metrics_new() : NULL;
    if (rc == 0 && !s.metrics) rc = cli_error_code(cmd, DT_ERR_NOMEM, "out of memory");
    int locked = rc == 0 && pthread_rwlock_init(&s.engine_lock, NULL) == 0;
    if (rc == 0 && !locked) rc = cli_error_code(cmd, DT_ERR_NOMEM, "cannot create a lock");

    /* SIGINT / SIGTERM are taken by the main thread alone (sigwait in srv_serve): blocked here,
     * before the engine's and the daemon's threads exist, so that every thread inherits it */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    if (rc == 0) {
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);
        signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error on that write, not the end */
        dt_engine_options eo;
        dt_engine_defaults(&eo);
        eo.n_slots = s.n_slots;
        eo.ctx = s.ctx;
        eo.kv_cache = o.kv_cache;
        eo.max_queue = o.queue;
        s.engine = dt_engine_create(&m, &eo, &err);
        if (!s.engine) rc = cli_fail(cmd, &err);
    }
    if (rc == 0 && o.threads > 0) dt_engine_exclusive(s.engine, set_threads, &o.threads);
    if (rc == 0) {
        char arch[64];
        const dt_quant_scheme q = dt_model_quant_scheme(&m, NULL);
        snprintf(arch, sizeof arch, "%s%s%s", dt_arch_name(m.cfg.arch), q != DT_QUANT_NONE ? " " : "",
                 q != DT_QUANT_NONE ? dt_quant_scheme_name(q) : "");
        /* a model that is a file is a GGUF one, whose template is a key of the file */
        struct stat st;
        const int gguf = stat(dir, &st) == 0 && S_ISREG(st.st_mode);
        if (!o.quiet && s.chat == SRV_CHAT_NONE)
            fprintf(stderr, "difftrans serve: no chat template recognised in %s's %s: "
                            "/v1/chat/completions is refused (--chat-template NAME chooses one)\n", dir,
                    gguf ? "tokenizer.chat_template" : "tokenizer_config.json");
        /* a template whose markers the vocabulary lacks still works as a text format, but the model
         * reads each marker as many ordinary tokens and a reply ends only at EOS or max_tokens */
        if (!o.quiet && s.chat != SRV_CHAT_NONE && s.chat_end_id < 0)
            fprintf(stderr, "difftrans serve: chat template %s: %s's vocabulary has no token %s, so the template's "
                            "markers are read as plain text and a reply ends only at EOS or max_tokens\n",
                    srv_chat_name(s.chat), dir, srv_chat_end_token(s.chat));
        if (srv_serve(&s, arch, &err) != 0) rc = cli_fail(cmd, &err);
        if (rc != 0) dt_engine_stop(s.engine);
    }
    if (s.engine) dt_engine_free(s.engine);
    if (locked) pthread_rwlock_destroy(&s.engine_lock);
    srv_metrics_free(s.metrics);
    dt_model_free(&m);
    return rc;
}
