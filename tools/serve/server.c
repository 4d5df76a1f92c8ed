/*
 * server.c — `locks serve`: OpenAI's completion endpoints over a continuous batch. This
 * file holds the state and starts and stops the server; engine.c is the engine thread,
 * http.c the endpoints, slotfile.c slot save / restore (serve_internal.h: what they share).
 *
 * Threads. libmicrohttpd runs one thread per connection; those threads parse, tokenize
 * and queue requests (jobs), then wait for their job's output (non-streaming) or hand
 * it out as server-sent events (streaming). One engine thread owns the locks_ctx: its
 * sequences are the slots. Each turn of its loop it admits queued jobs into free slots,
 * prefills one chunk (n_batch tokens) of every slot still reading its prompt, then runs
 * one decode step for all the slots that are generating (locks_ctx_decode_seqs, grouped
 * by decode-step parameters), samples, and publishes the text. So a long prompt is read
 * chunk by chunk between the other slots' steps, and requests join and leave the batch
 * between steps.
 *
 * What always holds: one mutex (srv.mu) guards the queue, every job's shared fields and
 * the metrics; only the engine thread touches the context and the slots. A job has two
 * references, the connection's and the engine's (queued or in a slot); whoever drops the
 * last frees it. A connection that goes away marks its job cancelled and the engine
 * frees the slot before its next step.
 *
 * Prefix reuse. A slot keeps the tokens its sequence holds after its job leaves, and
 * the context has, past the slots, up to LOCKS_CTX_MAX_SEQS - n_slots "kept prefix"
 * sequences (as many as --cache-ram pays for). A new prompt goes to the free slot whose
 * tokens share the longest prefix with it (truncated to that prefix, rounded down to a
 * page); if another sequence — a busy slot, an idle one, a kept prefix — shares more
 * whole pages with it, the slot takes those pages from it instead
 * (locks_ctx_seq_share: the same physical pages, reference counted, nothing prefilled
 * again). Before a slot's tokens are dropped for a new prompt, its whole pages go to a
 * kept prefix (shared, not copied), evicting the least recently used one, unless some
 * sequence already holds them. Either way only the rest of the prompt is prefilled.
 */
#define _GNU_SOURCE
#include "server.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "request.h"
#include "runutil.h"
#include "serve_internal.h"
#include "util.h"

/* ================================================================================ */
/* State                                                                            */
/* ================================================================================ */

serve_state srv;

void job_free(job *j) {
    serve_request_free(&j->rq);
    free(j->prompt);
    free(j->text);
    free(j->ev);
    free(j);
}

/* Drops one reference (srv.mu held). */
void job_unref(job *j) {
    if (--j->refs == 0) job_free(j);
}

/* Appends n bytes to a growing buffer; 0 on OOM (nothing changed). */
int buf_add(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = (*cap ? *cap * 2 : 256);
        while (nc < *len + n + 1) nc *= 2;
        char *nb = realloc(*b, nc);
        if (!nb) return 0;
        *b = nb;
        *cap = nc;
    }
    memcpy(*b + *len, s, n);
    *len += n;
    (*b)[*len] = '\0';
    return 1;
}

/* ================================================================================ */
/* Start and stop                                                                   */
/* ================================================================================ */

int serve_run(const serve_params *p) {
    int rc = 1;
    struct MHD_Daemon *d = NULL;
    struct addrinfo *ai = NULL;
    memset(&srv, 0, sizeof srv);
    srv.p = *p;
    srv.slot_ctx = p->n_ctx / p->n_slots;
    pthread_mutex_init(&srv.mu, NULL);
    pthread_cond_init(&srv.wake, NULL);
    pthread_cond_init(&srv.out, NULL);
    ru_log_to_stderr(p->verbose);

    /* signals go to sigwait below, not to MHD's or the engine's threads */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct addrinfo hints = {0};
    hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
    hints.ai_socktype = SOCK_STREAM;
    char port[16];
    snprintf(port, sizeof port, "%d", p->port);
    if (getaddrinfo(p->host, port, &hints, &ai) != 0 || !ai) {
        fprintf(stderr, "locks serve: --host wants a numeric address (127.0.0.1, ::1, 0.0.0.0), not '%s'\n", p->host);
        goto done;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_LIMIT, 256u,
                         MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "locks serve: cannot listen on %s port %d: %s\n", p->host, p->port, strerror(errno));
        goto done;
    }
    /* bound before the model loads, so /health can say 503 meanwhile: the line says so
     * (a model that fails to load ends the server with the loader's error) */
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr,
            "locks serve: listening on http://%s%s%s:%u, loading the model (GET /health answers 503 until "
            "\"ready\" below)\n",
            ai->ai_family == AF_INET6 ? "[" : "", p->host, ai->ai_family == AF_INET6 ? "]" : "",
            di ? di->port : (unsigned)p->port);

    srv.m = ru_load_model(p->model_path);
    if (!srv.m) goto done;
    locks_model_info in = locks_model_get_info(srv.m);
    srv.n_vocab = in.n_vocab;
    const locks_tokenizer *tk = locks_model_tokenizer(srv.m);
    srv.gemma = locks_tokenizer_find(tk, "<start_of_turn>", 15) >= 0;
    if (!srv.gemma && (locks_tokenizer_find(tk, "<|im_start|>", 12) < 0 || locks_tokenizer_find(tk, "<|im_end|>", 10) < 0)) {
        fprintf(stderr, "locks serve: the model's vocabulary has neither Gemma's turns (<start_of_turn>) nor ChatML "
                        "(<|im_start|>, <|im_end|>): no chat template known for it\n");
        goto done;
    }
    if (p->alias) {
        srv.alias = p->alias;
    } else {
        const char *path = p->model_path ? p->model_path : "SmolLM2-135M-Instruct.Q4_1.gguf";
        const char *slash = strrchr(path, '/');
        srv.alias = slash ? slash + 1 : path;
    }
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = srv.slot_ctx;
    cp.n_seqs = p->n_slots;
    cp.n_threads = p->n_threads;
    cp.rank = p->rank;
    cp.step = p->step;
    cp.n_batch = 64;
    cp.backend = p->backend;
    locks_status st;
    /* kept prefixes: each a sequence of a slot's context (pages and sliding-window rings),
     * as many as --cache-ram pays for, measured on a context of one sequence */
    srv.ctx = locks_ctx_init(srv.m, cp, &st);
    if (srv.ctx && p->cache_ram_mb > 0 && cp.backend != LOCKS_BACKEND_CPU) /* locks_ctx_seq_share: CPU only */
        fprintf(stderr, "locks serve: --cache-ram: shared prefix pages are not available on the CUDA backend yet: no "
                        "kept prefixes (each slot reuses its own tokens only)\n");
    else if (srv.ctx && p->cache_ram_mb > 0) {
        const locks_cache *c = locks_ctx_cache(srv.ctx);
        const locks_cache_params kp = locks_cache_get_params(c);
        const size_t page = (size_t)kp.n_layers * (size_t)kp.n_kv_heads *
                            (2 * LOCKS_PAGE * (size_t)kp.head_dim * sizeof(uint16_t) + locks_cache_summary_bytes(c));
        srv.kept_bytes_each = page * (size_t)kp.n_pages / (size_t)p->n_slots + locks_ctx_swa_bytes(srv.ctx) / (size_t)p->n_slots;
        size_t n = ((size_t)p->cache_ram_mb << 20) / srv.kept_bytes_each;
        srv.n_kept = (int32_t)(n < (size_t)(LOCKS_CTX_MAX_SEQS - p->n_slots) ? n : (size_t)(LOCKS_CTX_MAX_SEQS - p->n_slots));
        if (srv.n_kept > 0) {
            locks_ctx_free(srv.ctx);
            cp.n_seqs = p->n_slots + srv.n_kept;
            srv.ctx = locks_ctx_init(srv.m, cp, &st);
        }
    }
    if (!srv.ctx) {
        fprintf(stderr, "locks serve: cannot create the context (%d slots of %d tokens): %s\n", p->n_slots, srv.slot_ctx,
                locks_status_str(st));
        goto done;
    }
    for (int s = 0; s < LOCKS_SEL_COUNT; s++)
        if (locks_cache_serves(locks_ctx_cache(srv.ctx), (locks_selector)s)) srv.served |= 1u << s;
    for (int32_t i = 0; i < p->n_slots + srv.n_kept; i++) {
        srv.slots[i].seq = i;
        srv.slots[i].pending = -1;
        if (!(srv.slots[i].tokens = malloc(sizeof(int32_t) * (size_t)srv.slot_ctx))) goto done;
    }
    if (pthread_create(&srv.engine, NULL, engine_main, NULL) != 0) {
        fprintf(stderr, "locks serve: cannot start the engine thread\n");
        goto done;
    }
    srv.ready = 1;
    fprintf(stderr,
            "locks serve: ready: model '%s', %d slots of %d tokens, %d kept prefixes (--cache-ram %d MB, %.1f MB "
            "each), selector %s, budget %d%s\n",
            srv.alias, p->n_slots, srv.slot_ctx, srv.n_kept, p->cache_ram_mb, (double)srv.kept_bytes_each / 1048576.0,
            locks_selector_name(p->step.selector), p->step.budget, p->api_key ? ", API key required" : "");
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "locks serve: signal %d, stopping\n", sig);
    pthread_mutex_lock(&srv.mu);
    srv.stopping = 1;
    pthread_cond_signal(&srv.wake);
    pthread_mutex_unlock(&srv.mu);
    pthread_join(srv.engine, NULL);
    rc = 0;
done:
    srv.stopping = 1;
    if (d) MHD_stop_daemon(d);
    if (ai) freeaddrinfo(ai);
    for (int32_t i = 0; i < LOCKS_CTX_MAX_SEQS; i++) free(srv.slots[i].tokens);
    locks_ctx_free(srv.ctx);
    locks_model_free(srv.m);
    return rc;
}
