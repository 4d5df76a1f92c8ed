/* server.h — `locks serve`: an OpenAI-compatible HTTP server over one locks_ctx whose
 * sequences are the slots of a continuous batch (tools/serve/server.c). */
#ifndef LOCKS_SERVE_SERVER_H
#define LOCKS_SERVE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "locks_model.h"

typedef struct {
    const char *model_path; /* NULL: the fetched default */
    const char *host;       /* numeric address to bind (default 127.0.0.1) */
    int port;               /* 0: any free port (the chosen one is printed) */
    const char *api_key;    /* NULL: no key asked */
    const char *alias;      /* the model's name in the API; NULL: the file's base name */
    int32_t n_slots;        /* -np: sequences decoded together, 1 .. LOCKS_CTX_MAX_SEQS */
    int32_t n_ctx;          /* -c: context of all slots together (each gets n_ctx / n_slots) */
    int32_t n_threads;
    int32_t n_batch;        /* prompt tokens per prefill chunk between decode steps */
    int32_t n_predict;      /* -n: max_tokens cap and default; 0: a slot's context */
    int32_t max_queue;      /* requests waiting for a slot before 503 */
    size_t max_body;        /* bytes of a request body before 413 */
    int32_t rank;
    int32_t cache_ram_mb;   /* --cache-ram: MB for kept prefixes (server.c); 0: none */
    locks_backend backend;  /* the context's backend (LOCKS_BACKEND_CPU = 0 by default) */
    const char *slot_save_path; /* folder of slot files (POST /slots/{id}?action=save|restore); NULL: off */
    locks_step_params step;        /* the default decode step (the `locks` object's defaults) */
    locks_sampler_params sampling; /* the default sampling */
    int verbose;
} serve_params;

/* Binds, loads the model (GET /health answers 503 meanwhile), serves until SIGINT or
 * SIGTERM. Returns the process exit code (0 after a signal, 1 on a failure to start). */
int serve_run(const serve_params *p);

#endif
