/*
 * cmd_serve.c — `locks serve`: the command line of the OpenAI-compatible server
 * (tools/serve/). Flags follow llama-server's where it has them (-m --host --port -np
 * -c -t -b -n --api-key --alias). Built only with libmicrohttpd and cJSON
 * (LOCKS_HAVE_SERVER); without them the command says so. --backend cuda serves from the
 * GPU engine (every step of the continuous batch one graph replay); what the GPU does not
 * do (slot save/restore) is refused at start.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cmds.h"
#include "locks_model.h"
#ifdef LOCKS_HAVE_SERVER
#include "serve/server.h"
#endif

static void usage(FILE *f) {
    fprintf(f,
            "usage: locks serve [options]\n"
            "\n"
            "An OpenAI-compatible HTTP server: POST /v1/completions, /v1/chat/completions (stream or\n"
            "not), GET /v1/models, /health, /metrics (Prometheus). Requests share the -np slots of one\n"
            "continuous batch; a request may set {\"locks\": {\"selector\", \"budget\", \"mass\"}}.\n"
            "\n"
            "  -m FILE            GGUF model (default: the one scripts/fetch-model.sh fetches)\n"
            "  --host ADDR        numeric address to bind (default 127.0.0.1: this machine only)\n"
            "  --port N           TCP port, 0 = any free one (default 8080)\n"
            "  -np, --parallel N  slots decoded together, 1..%d (default 4)\n"
            "  -c, --ctx-size N   context of all slots together; each gets N / np (default 4096 x np)\n"
            "  -t, --threads N    threads (default 2)\n"
            "  -b, --batch-size N prompt tokens prefilled per slot between two decode steps (default 256)\n"
            "  -n, --n-predict N  most tokens a request may generate, and the default (default: a slot's\n"
            "                     context)\n"
            "  --api-key KEY      require 'Authorization: Bearer KEY' on every endpoint but /health\n"
            "  --alias NAME       the model's name in the API (default: the file's name)\n"
            "  --slot-save-path DIR  POST /slots/{id}?action=save|restore {\"filename\": NAME}: a slot's\n"
            "                     tokens and K/V to DIR/NAME and back (default: off)\n"
            "  --cache-ram MB     memory for kept prefixes: sequences past the slots that keep the whole\n"
            "                     pages of finished prompts (shared, not copied), least recently used\n"
            "                     dropped first; a prompt that begins with kept or running tokens\n"
            "                     prefills only the rest. Each pays for a slot's context; at most %d\n"
            "                     slots + kept in all; 0 = off (default 512)\n"
            "  --max-queue N      requests waiting for a slot before 503 (default 16)\n"
            "  --max-body BYTES   largest request body before 413 (default 4194304)\n"
            "  --selector NAME    default decode selector (default locks); a request may pick full, oracle,\n"
            "                     locks or this one\n"
            "  --budget N         default tokens attended per KV head in decode (default 2048)\n"
            "  --mass P           default mass target, 0 < P < 1 (default off)\n"
            "  --sink N, --recent N  pages always attended at the start / end (default 1, 1)\n"
            "  --rank R           summary rank 1..15 (default 8)\n"
            "  --temp X, --top-k N, --top-p X  default sampling (default 0.8, 40, 0.95)\n"
            "  --backend NAME     cpu (default) or cuda: the GPU engine (llama models; selectors full and\n"
            "                     locks; no --slot-save-path)\n"
            "  -v                 verbose library log\n"
            "  -h, --help         this text\n",
            LOCKS_CTX_MAX_SEQS, LOCKS_CTX_MAX_SEQS);
}

#ifdef LOCKS_HAVE_SERVER
static int parse_float(const char *s, float *out) {
    char *end;
    float v = strtof(s, &end);
    if (end == s || *end) return 0;
    *out = v;
    return 1;
}
#endif

int cmd_serve(int argc, char **argv) {
#ifndef LOCKS_HAVE_SERVER
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            break;
        }
    fprintf(stderr, "locks serve: this build has no server: it needs libmicrohttpd and cJSON "
                    "(apt-get install libmicrohttpd-dev libcjson-dev, then re-run cmake)\n");
    return 1;
#else
    serve_params p = {0};
    p.host = "127.0.0.1";
    p.port = 8080;
    p.n_slots = 4;
    p.n_threads = 2;
    p.n_batch = 256;
    p.max_queue = 16;
    p.cache_ram_mb = 512;
    p.max_body = 4u << 20;
    p.rank = 8;
    p.step = locks_step_default_params();
    p.step.selector = LOCKS_SEL_LOCKS;
    p.sampling = locks_sampler_default_params();
    int32_t n_ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-v")) {
            p.verbose = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "locks serve: %s needs a value (--help lists the options)\n", a);
            return 2;
        }
        int32_t x = 0;
        if (!strcmp(a, "-m")) p.model_path = v;
        else if (!strcmp(a, "--host")) p.host = v;
        else if (!strcmp(a, "--port")) ok = args_parse_int(v, 0, 65535, &x), p.port = x;
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) ok = args_parse_int(v, 1, LOCKS_CTX_MAX_SEQS, &p.n_slots);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) ok = args_parse_int(v, 16, 1 << 26, &n_ctx);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) ok = args_parse_int(v, 1, 256, &p.n_threads);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) ok = args_parse_int(v, 1, 1 << 20, &p.n_batch);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) ok = args_parse_int(v, 1, 1 << 26, &p.n_predict);
        else if (!strcmp(a, "--api-key")) p.api_key = *v ? v : NULL;
        else if (!strcmp(a, "--alias")) p.alias = v;
        else if (!strcmp(a, "--slot-save-path")) p.slot_save_path = v;
        else if (!strcmp(a, "--cache-ram")) ok = args_parse_int(v, 0, 1 << 24, &p.cache_ram_mb);
        else if (!strcmp(a, "--max-queue")) ok = args_parse_int(v, 0, 1 << 20, &p.max_queue);
        else if (!strcmp(a, "--max-body")) ok = args_parse_int(v, 1, 1 << 30, &x), p.max_body = (size_t)x;
        else if (!strcmp(a, "--selector")) ok = locks_selector_parse(v, &p.step.selector) == LOCKS_OK;
        else if (!strcmp(a, "--budget")) ok = args_parse_int(v, 1, INT32_MAX, &p.step.budget);
        else if (!strcmp(a, "--mass")) ok = parse_float(v, &p.step.mass) && p.step.mass > 0.0f && p.step.mass < 1.0f;
        else if (!strcmp(a, "--sink")) ok = args_parse_int(v, 0, 1 << 20, &p.step.n_sink);
        else if (!strcmp(a, "--recent")) ok = args_parse_int(v, 0, 1 << 20, &p.step.n_recent);
        else if (!strcmp(a, "--rank")) ok = args_parse_int(v, 1, LOCKS_MAX_RANK, &p.rank);
        else if (!strcmp(a, "--temp")) ok = parse_float(v, &p.sampling.temp);
        else if (!strcmp(a, "--top-k")) ok = args_parse_int(v, 0, 1 << 30, &p.sampling.top_k);
        else if (!strcmp(a, "--top-p")) ok = parse_float(v, &p.sampling.top_p);
        else if (!strcmp(a, "--backend"))
            ok = (!strcmp(v, "cpu") || !strcmp(v, "cuda")),
            p.backend = !strcmp(v, "cuda") ? LOCKS_BACKEND_CUDA : LOCKS_BACKEND_CPU;
        else {
            fprintf(stderr, "locks serve: unknown option '%s' (--help lists them)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "locks serve: bad value '%s' for %s\n", v, a);
            return 2;
        }
        i++;
    }
    if (p.backend == LOCKS_BACKEND_CUDA && p.slot_save_path) {
        fprintf(stderr, "locks serve: --slot-save-path needs the CPU backend (a slot's K/V is not read back from "
                        "the GPU yet); drop one of --backend cuda and --slot-save-path\n");
        return 2;
    }
    p.n_ctx = n_ctx ? n_ctx : 4096 * p.n_slots;
    if (p.n_ctx / p.n_slots < 16) {
        fprintf(stderr, "locks serve: -c %d leaves %d tokens per slot (-np %d); at least 16\n", p.n_ctx,
                p.n_ctx / p.n_slots, p.n_slots);
        return 2;
    }
    return serve_run(&p);
#endif
}
