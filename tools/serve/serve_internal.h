/*
 * serve_internal.h — what the parts of `locks serve` share (tools/serve/): the jobs,
 * the slots, the server's one state (srv, guarded by srv.mu as server.c says) and the
 * calls one part makes into another. server.c starts and stops; engine.c is the engine
 * thread (admission, prefix reuse, batching); slotfile.c saves and restores slots;
 * http.c answers the endpoints.
 */
#ifndef LOCKS_SERVE_INTERNAL_H
#define LOCKS_SERVE_INTERNAL_H

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdint.h>

#include "locks_model.h"
#include "request.h"
#include "server.h"

typedef struct job job;
struct job {
    serve_request rq;
    int32_t *prompt; /* the tokens to run */
    int32_t n_prompt, max_tokens;
    char id[40];
    long created;
    MHD_socket fd; /* the client's socket, to notice a disconnect while waiting */
    job *next;     /* in the queue */
    /* shared with the engine (srv.mu) */
    int refs, cancelled, done;
    const char *finish; /* "stop" | "length" once done without error */
    char err[200];      /* non-empty: failed after admission */
    char *text;         /* generated text (stop sequences cut) */
    size_t len, cap, safe; /* text[0, safe) can be sent (the rest may begin a stop string) */
    int32_t n_gen, n_cached, slot;
    /* the connection's (streaming) */
    size_t sent;
    int sent_role, eos;
    char *ev; /* formatted events not yet handed to MHD */
    size_t ev_len, ev_off, ev_cap;
};

/* A slot save or restore (POST /slots/{id}?action=...), run by the engine thread. */
typedef struct slot_op slot_op;
struct slot_op {
    int restore;
    int32_t slot;
    char path[4200];
    int done, http; /* http: 200 or the error's status */
    char err[240];
    int32_t n_tokens;
    size_t bytes;
    int sums_rebuilt; /* restore: the file's summaries did not fit this cache: rebuilt */
    double ms;
    slot_op *next;
};

typedef struct {
    int32_t seq;
    int32_t *tokens; /* [n_ctx]: what the sequence holds now */
    int32_t n_tokens;
    job *j;          /* NULL: free */
    int32_t pending; /* sampled, to feed at the next step; -1: none */
    locks_sampler *smp;
    locks_detok_state dt;
    uint64_t last_used;
} slot;

typedef struct {
    serve_params p;
    const char *alias;
    int32_t slot_ctx; /* context of one slot */
    locks_model *m;
    locks_ctx *ctx;
    int32_t n_vocab;
    int gemma; /* chat template: Gemma's turns, else ChatML */
    uint32_t served; /* selectors the cache serves */
    volatile int ready, stopping;
    pthread_t engine;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* the engine: a job queued or cancelled, or stop */
    pthread_cond_t out;  /* connections: output published */
    job *queue_head, *queue_tail;
    slot_op *ops; /* slot saves and restores waiting for the engine */
    int32_t n_queued;
    slot slots[LOCKS_CTX_MAX_SEQS]; /* [0, n_slots): the slots; then n_kept kept prefixes (j NULL) */
    int32_t n_kept;
    size_t kept_bytes_each; /* what one kept prefix can hold: a slot's pages and rings */
    uint64_t turn, next_id;
    /* metrics (srv.mu) */
    uint64_t m_requests, m_rejected, m_failed, m_cancelled, m_prompt, m_prefilled, m_cached, m_generated, m_steps;
    uint64_t m_shared, m_kept, m_evicted; /* prefix cache: tokens shared in, prefixes kept, evicted */
    uint64_t m_drafted, m_accepted; /* speculative rounds (locks.speculate) */
    locks_run_stats stats;
} serve_state;

extern serve_state srv; /* server.c */

/* server.c */
void job_free(job *j);
/* Drops one reference (srv.mu held). */
void job_unref(job *j);
/* Appends n bytes to a growing buffer; 0 on OOM (nothing changed). */
int buf_add(char **b, size_t *len, size_t *cap, const char *s, size_t n);

/* engine.c: the engine thread's loop */
void *engine_main(void *arg);

/* slotfile.c */
void op_fail(slot_op *op, int http, const char *fmt, ...);
/* Runs the waiting slot ops (srv.mu held on entry and exit). */
void run_ops(void);

/* http.c: libmicrohttpd's callbacks */
enum MHD_Result on_request(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                           const char *version, const char *upload, size_t *upload_size, void **con_cls);
void on_completed(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode toe);

#endif
