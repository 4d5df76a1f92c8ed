/*
 * server.c — `locks serve`: OpenAI's completion endpoints over a continuous batch.
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
 * frees the slot before its next step. A slot keeps the tokens its sequence holds after
 * its job leaves, so a later prompt that begins with them prefills only the rest
 * (per-slot prefix reuse, truncated to the common prefix rounded down to a page).
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
#include "util.h"

/* ================================================================================ */
/* State                                                                            */
/* ================================================================================ */

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

static struct {
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
    slot slots[LOCKS_CTX_MAX_SEQS];
    uint64_t turn, next_id;
    /* metrics (srv.mu) */
    uint64_t m_requests, m_rejected, m_failed, m_cancelled, m_prompt, m_prefilled, m_cached, m_generated, m_steps;
    uint64_t m_drafted, m_accepted; /* speculative rounds (locks.speculate) */
    locks_run_stats stats;
} srv;

static void job_free(job *j) {
    serve_request_free(&j->rq);
    free(j->prompt);
    free(j->text);
    free(j->ev);
    free(j);
}

/* Drops one reference (srv.mu held). */
static void job_unref(job *j) {
    if (--j->refs == 0) job_free(j);
}

/* Appends n bytes to a growing buffer; 0 on OOM (nothing changed). */
static int buf_add(char **b, size_t *len, size_t *cap, const char *s, size_t n) {
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
/* Engine thread                                                                    */
/* ================================================================================ */

/* The slot's job ends (srv.mu held): done with finish or err, the slot freed. */
static void slot_finish(slot *s, const char *finish, const char *err) {
    job *j = s->j;
    if (err) {
        snprintf(j->err, sizeof j->err, "%s", err);
        if (j->cancelled) srv.m_cancelled++;
        else srv.m_failed++;
    } else { /* an unfinished UTF-8 character at the end goes out as it is */
        char tail[4];
        size_t n = locks_detok_flush(&s->dt, tail);
        if (n) buf_add(&j->text, &j->len, &j->cap, tail, n);
        j->finish = finish;
    }
    j->safe = j->len;
    j->done = 1;
    locks_sampler_free(s->smp);
    s->smp = NULL;
    s->pending = -1;
    s->j = NULL;
    job_unref(j);
}

/* Longest suffix of text[0, len) that is a proper prefix of a stop string. */
static size_t stop_holdback(const job *j) {
    size_t hold = 0;
    for (int32_t k = 0; k < j->rq.n_stop; k++) {
        size_t sl = strlen(j->rq.stop[k]);
        for (size_t n = sl - 1; n > hold; n--)
            if (n <= j->len && !memcmp(j->text + j->len - n, j->rq.stop[k], n)) {
                hold = n;
                break;
            }
    }
    return hold;
}

/* A token sampled for slot s (srv.mu held): publish its text, end the job or keep the
 * token to feed at the next step. Returns 1 if the job goes on (s->pending = tok). */
static int slot_emit(slot *s, int32_t tok) {
    job *j = s->j;
    j->n_gen++;
    srv.m_generated++;
    const locks_tokenizer *tk = locks_model_tokenizer(srv.m);
    if (locks_tokenizer_is_eog(tk, tok)) {
        slot_finish(s, "stop", NULL);
        return 0;
    }
    char piece[512];
    size_t n = 0;
    const char *bytes;
    size_t plen;
    if (locks_tokenizer_piece(tk, tok, false, &bytes, &plen) == LOCKS_OK && plen + 4 <= sizeof piece &&
        locks_tokenizer_decode_stream(tk, &s->dt, tok, false, piece, sizeof piece, &n) == LOCKS_OK) {
        size_t from = j->len;
        if (!buf_add(&j->text, &j->len, &j->cap, piece, n)) {
            slot_finish(s, NULL, "out of memory");
            return 0;
        }
        for (int32_t k = 0; k < j->rq.n_stop; k++) { /* a stop string ending in the new bytes */
            size_t sl = strlen(j->rq.stop[k]);
            size_t start = from >= sl ? from - sl + 1 : 0;
            char *hit = j->len >= sl ? memmem(j->text + start, j->len - start, j->rq.stop[k], sl) : NULL;
            if (hit) {
                j->len = (size_t)(hit - j->text);
                j->text[j->len] = '\0';
                s->dt.n_pending = 0; /* what follows the stop string is dropped */
                slot_finish(s, "stop", NULL);
                return 0;
            }
        }
    }
    j->safe = j->len - stop_holdback(j);
    if (j->n_gen >= j->max_tokens || s->n_tokens + 1 > srv.slot_ctx) {
        slot_finish(s, "length", NULL);
        return 0;
    }
    s->pending = tok;
    return 1;
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = 0;
    while (n < na && n < nb && a[n] == b[n]) n++;
    return n;
}

/* Takes queued jobs into free slots (srv.mu held): the free slot whose tokens share the
 * longest prefix with the prompt, else the one unused longest. */
static void admit(void) {
    while (srv.queue_head) {
        job *j = srv.queue_head;
        if (j->cancelled) {
            srv.queue_head = j->next;
            if (!srv.queue_head) srv.queue_tail = NULL;
            srv.n_queued--;
            srv.m_cancelled++;
            job_unref(j);
            continue;
        }
        slot *best = NULL;
        int32_t best_common = -1;
        for (int32_t i = 0; i < srv.p.n_slots; i++) {
            slot *s = &srv.slots[i];
            if (s->j) continue;
            int32_t c = common_prefix(s->tokens, s->n_tokens, j->prompt, j->n_prompt);
            if (c > best_common || (c == best_common && s->last_used < best->last_used)) best = s, best_common = c;
        }
        if (!best) return;
        /* keep whole pages of the common prefix, and at least the last prompt token to run */
        int32_t keep = best_common < j->n_prompt ? best_common : j->n_prompt - 1;
        keep -= keep % LOCKS_PAGE;
        locks_status st = locks_ctx_truncate_seq(srv.ctx, best->seq, keep);
        if (st != LOCKS_OK) { /* cannot keep it: start the sequence empty */
            keep = 0;
            st = locks_ctx_truncate_seq(srv.ctx, best->seq, 0);
        }
        srv.queue_head = j->next;
        if (!srv.queue_head) srv.queue_tail = NULL;
        srv.n_queued--;
        best->j = j;
        best->n_tokens = keep;
        best->pending = -1;
        best->last_used = ++srv.turn;
        memset(&best->dt, 0, sizeof best->dt);
        j->n_cached = keep;
        j->slot = best->seq;
        srv.m_cached += (uint64_t)keep;
        locks_status se = LOCKS_OK;
        best->smp = locks_sampler_init(j->rq.sampling, srv.n_vocab, &se);
        if (st != LOCKS_OK || !best->smp)
            slot_finish(best, NULL, st != LOCKS_OK ? locks_status_str(st) : "cannot create the sampler");
    }
}

static int same_step(const locks_step_params *a, const locks_step_params *b) {
    return a->selector == b->selector && a->budget == b->budget && a->mass == b->mass && a->n_sink == b->n_sink &&
           a->n_recent == b->n_recent && a->scale == b->scale;
}

/* Slot files: a header, the tokens, then K of every layer and V of every layer as the
 * cache stores them (fp16 bits, [n_layers][n][Hkv][d]). A file whose magic, shape,
 * model name or size does not match is refused, never half-loaded. */
#define SLOT_MAGIC "LOCKSLT1"
typedef struct {
    char magic[8];
    uint32_t version, n_layers, n_kv_heads, head_dim, n_vocab, n_tokens;
    char name[128];
} slot_header;

static void op_fail(slot_op *op, int http, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(op->err, sizeof op->err, fmt, ap);
    va_end(ap);
    op->http = http;
}

/* Runs one op on an idle slot (engine thread, srv.mu not held). */
static void op_run(slot_op *op, slot *s) {
    double t0 = locks_now_ms();
    locks_model_info in = locks_model_get_info(srv.m);
    slot_header h = {0}, want = {0};
    memcpy(want.magic, SLOT_MAGIC, 8);
    want.version = 1;
    want.n_layers = (uint32_t)in.n_layers;
    want.n_kv_heads = (uint32_t)in.n_kv_heads;
    want.head_dim = (uint32_t)in.head_dim;
    want.n_vocab = (uint32_t)in.n_vocab;
    memcpy(want.name, in.name, sizeof want.name);
    want.name[sizeof want.name - 1] = '\0';
    op->http = 200;
    FILE *f = NULL;
    uint16_t *k = NULL, *v = NULL;
    int32_t *toks = NULL;
    if (!op->restore) {
        int32_t n = s->n_tokens;
        size_t per = (size_t)n * (size_t)in.n_kv_heads * (size_t)in.head_dim;
        k = malloc(sizeof(uint16_t) * (per * (size_t)in.n_layers + 1));
        v = malloc(sizeof(uint16_t) * (per * (size_t)in.n_layers + 1));
        if (!k || !v) {
            op_fail(op, 500, "out of memory");
            goto out;
        }
        for (int32_t l = 0; l < in.n_layers; l++) {
            locks_status st = locks_ctx_seq_read_kv(srv.ctx, s->seq, l, k + (size_t)l * per, v + (size_t)l * per);
            if (st != LOCKS_OK) {
                op_fail(op, 500, "reading the slot's K/V: %s", locks_status_str(st));
                goto out;
            }
        }
        want.n_tokens = (uint32_t)n;
        char tmp[4300];
        snprintf(tmp, sizeof tmp, "%s.tmp", op->path);
        f = fopen(tmp, "wb");
        int ok = f && fwrite(&want, sizeof want, 1, f) == 1 &&
                 fwrite(s->tokens, sizeof(int32_t), (size_t)n, f) == (size_t)n &&
                 fwrite(k, sizeof(uint16_t), per * (size_t)in.n_layers, f) == per * (size_t)in.n_layers &&
                 fwrite(v, sizeof(uint16_t), per * (size_t)in.n_layers, f) == per * (size_t)in.n_layers;
        if (f && fclose(f) != 0) ok = 0;
        f = NULL;
        if (!ok || rename(tmp, op->path) != 0) {
            remove(tmp);
            op_fail(op, 500, "cannot write %s: %s", op->path, strerror(errno));
            goto out;
        }
        op->n_tokens = n;
        op->bytes = sizeof want + sizeof(int32_t) * (size_t)n + 4 * per * (size_t)in.n_layers;
        goto out;
    }
    f = fopen(op->path, "rb");
    if (!f) {
        op_fail(op, 404, "no slot file %s", strrchr(op->path, '/') + 1);
        goto out;
    }
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, SLOT_MAGIC, 8) != 0 || h.version != 1) {
        op_fail(op, 400, "%s is not a locks slot file", strrchr(op->path, '/') + 1);
        goto out;
    }
    h.name[sizeof h.name - 1] = '\0';
    if (h.n_layers != want.n_layers || h.n_kv_heads != want.n_kv_heads || h.head_dim != want.head_dim ||
        h.n_vocab != want.n_vocab || strcmp(h.name, want.name) != 0) {
        op_fail(op, 400, "the slot file was saved with another model ('%.60s', %u layers)", h.name, h.n_layers);
        goto out;
    }
    if (h.n_tokens > (uint32_t)srv.slot_ctx) {
        op_fail(op, 400, "the slot file holds %u tokens, a slot here %d", h.n_tokens, srv.slot_ctx);
        goto out;
    }
    int32_t n = (int32_t)h.n_tokens;
    size_t per = (size_t)n * h.n_kv_heads * h.head_dim, total = per * h.n_layers;
    long want_size = (long)(sizeof h + sizeof(int32_t) * (size_t)n + 4 * total), size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size != want_size || fseek(f, (long)sizeof h, SEEK_SET) != 0) {
        op_fail(op, 400, "the slot file is %ld bytes, %ld expected (truncated?)", size, want_size);
        goto out;
    }
    toks = malloc(sizeof(int32_t) * ((size_t)n + 1));
    k = malloc(sizeof(uint16_t) * (total + 1));
    v = malloc(sizeof(uint16_t) * (total + 1));
    if (!toks || !k || !v) {
        op_fail(op, 500, "out of memory");
        goto out;
    }
    if (fread(toks, sizeof(int32_t), (size_t)n, f) != (size_t)n || fread(k, sizeof(uint16_t), total, f) != total ||
        fread(v, sizeof(uint16_t), total, f) != total) {
        op_fail(op, 400, "cannot read the slot file");
        goto out;
    }
    for (int32_t i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= in.n_vocab) {
            op_fail(op, 400, "the slot file has a token id %d outside the vocabulary", toks[i]);
            goto out;
        }
    locks_status st = locks_ctx_seq_load_kv(srv.ctx, s->seq, n, k, v);
    if (st != LOCKS_OK) { /* the slot is empty now, or as it was (POOL_FULL) */
        s->n_tokens = locks_ctx_seq_len(srv.ctx, s->seq);
        op_fail(op, 400, "cannot load the slot file: %s", locks_status_str(st));
        goto out;
    }
    memcpy(s->tokens, toks, sizeof(int32_t) * (size_t)n);
    s->n_tokens = n;
    op->n_tokens = n;
    op->bytes = (size_t)want_size;
out:
    if (f) fclose(f);
    free(k);
    free(v);
    free(toks);
    op->ms = locks_now_ms() - t0;
}

/* Runs the waiting slot ops (srv.mu held on entry and exit). */
static void run_ops(void) {
    while (srv.ops) {
        slot_op *op = srv.ops;
        srv.ops = op->next;
        slot *s = &srv.slots[op->slot];
        if (s->j) {
            op_fail(op, 409, "slot %d is answering a request; try again when it is idle", op->slot);
        } else {
            s->last_used = ++srv.turn;
            pthread_mutex_unlock(&srv.mu);
            op_run(op, s);
            pthread_mutex_lock(&srv.mu);
        }
        op->done = 1;
        pthread_cond_broadcast(&srv.out);
    }
}

static void *engine_main(void *arg) {
    (void)arg;
    float *logits = malloc(sizeof(float) * (size_t)srv.n_vocab * (size_t)srv.p.n_slots);
    pthread_mutex_lock(&srv.mu);
    while (logits) {
        for (int32_t i = 0; i < srv.p.n_slots; i++) /* a client gone: its slot is free now */
            if (srv.slots[i].j && srv.slots[i].j->cancelled) slot_finish(&srv.slots[i], NULL, "cancelled");
        if (srv.stopping) break;
        run_ops();
        admit();
        int busy = 0;
        for (int32_t i = 0; i < srv.p.n_slots; i++) busy += srv.slots[i].j != NULL;
        if (!busy) {
            if (!srv.ops) pthread_cond_wait(&srv.wake, &srv.mu);
            continue;
        }
        pthread_mutex_unlock(&srv.mu);

        /* one prefill chunk of every slot still reading its prompt */
        for (int32_t i = 0; i < srv.p.n_slots; i++) {
            slot *s = &srv.slots[i];
            if (!s->j || s->pending >= 0 || s->n_tokens >= s->j->n_prompt) continue;
            job *j = s->j;
            int32_t chunk = j->n_prompt - s->n_tokens;
            if (chunk > srv.p.n_batch) chunk = srv.p.n_batch;
            int last = s->n_tokens + chunk == j->n_prompt;
            locks_status st = locks_ctx_prefill_seq(srv.ctx, s->seq, j->prompt + s->n_tokens, chunk, last ? logits : NULL);
            pthread_mutex_lock(&srv.mu);
            if (st != LOCKS_OK) {
                char msg[160];
                snprintf(msg, sizeof msg, "prefill failed: %s", locks_status_str(st));
                slot_finish(s, NULL, msg);
            } else {
                memcpy(s->tokens + s->n_tokens, j->prompt + s->n_tokens, sizeof(int32_t) * (size_t)chunk);
                s->n_tokens += chunk;
                srv.m_prefilled += (uint64_t)chunk;
                if (last) slot_emit(s, locks_sampler_sample(s->smp, logits));
            }
            pthread_mutex_unlock(&srv.mu);
        }

        /* a speculative round for each generating slot that asks for one (locks.speculate):
         * sparse drafts, one dense verify pass, the accepted tokens are already fed */
        uint32_t todo = 0;
        for (int32_t i = 0; i < srv.p.n_slots; i++) {
            slot *s = &srv.slots[i];
            if (!s->j || s->pending < 0) continue;
            int32_t k = s->j->rq.speculate;
            if (k > srv.slot_ctx - s->n_tokens - 1) k = srv.slot_ctx - s->n_tokens - 1;
            if (k > s->j->max_tokens - s->j->n_gen - 1) k = s->j->max_tokens - s->j->n_gen - 1;
            if (k < 1) {
                todo |= 1u << i; /* a plain decode step below */
                continue;
            }
            int32_t out[64 + 1], n_out = 0;
            if (k > 64) k = 64;
            locks_status st = locks_speculate_round(srv.ctx, s->seq, s->pending, k, &s->j->rq.step, s->smp, out, &n_out);
            pthread_mutex_lock(&srv.mu);
            if (st != LOCKS_OK) {
                char msg[160];
                snprintf(msg, sizeof msg, "speculative round failed: %s", locks_status_str(st));
                slot_finish(s, NULL, msg);
            } else {
                srv.m_drafted += (uint64_t)k;
                srv.m_steps += (uint64_t)k; /* its draft steps (the verify pass is a prefill) */
                srv.m_accepted += (uint64_t)(n_out - 1);
                s->tokens[s->n_tokens++] = s->pending; /* t0, fed by the round */
                s->pending = -1;
                for (int32_t t = 0; t < n_out; t++) {
                    if (!slot_emit(s, out[t])) {
                        /* an accepted draft ended it: the cache holds it, drop it */
                        if (t < n_out - 1 && locks_ctx_truncate_seq(srv.ctx, s->seq, s->n_tokens) != LOCKS_OK) {
                            s->n_tokens = 0; /* cannot happen (shorter is always possible); start empty */
                            locks_ctx_truncate_seq(srv.ctx, s->seq, 0);
                        }
                        break;
                    }
                    if (t < n_out - 1) { /* accepted: already fed */
                        s->tokens[s->n_tokens++] = out[t];
                        s->pending = -1;
                    }
                }
            }
            pthread_mutex_unlock(&srv.mu);
        }

        /* one decode step for the other generating slots, a group per step parameters */
        while (todo) {
            int32_t seqs[LOCKS_CTX_MAX_SEQS], toks[LOCKS_CTX_MAX_SEQS], idx[LOCKS_CTX_MAX_SEQS], n = 0;
            locks_step_params step = {0};
            for (int32_t i = 0; i < srv.p.n_slots; i++) {
                if (!(todo >> i & 1u)) continue;
                slot *s = &srv.slots[i];
                locks_step_params mine = s->j->rq.step;
                if (s->j->rq.speculate > 0) mine.selector = LOCKS_SEL_FULL; /* speculation's output is dense's */
                if (!n) step = mine;
                if (!same_step(&step, &mine)) continue;
                todo &= ~(1u << i);
                seqs[n] = s->seq, toks[n] = s->pending, idx[n] = i, n++;
            }
            locks_status st = locks_ctx_set_step(srv.ctx, step);
            if (st == LOCKS_OK) st = locks_ctx_decode_seqs(srv.ctx, seqs, n, toks, logits);
            pthread_mutex_lock(&srv.mu);
            srv.m_steps++;
            for (int32_t k = 0; k < n; k++) {
                slot *s = &srv.slots[idx[k]];
                if (st != LOCKS_OK) {
                    char msg[160];
                    snprintf(msg, sizeof msg, "decode failed: %s", locks_status_str(st));
                    slot_finish(s, NULL, msg);
                    continue;
                }
                s->tokens[s->n_tokens++] = s->pending;
                s->pending = -1;
                slot_emit(s, locks_sampler_sample(s->smp, logits + (size_t)k * (size_t)srv.n_vocab));
            }
            pthread_mutex_unlock(&srv.mu);
        }
        pthread_mutex_lock(&srv.mu);
        srv.stats = locks_ctx_stats(srv.ctx);
        pthread_cond_broadcast(&srv.out);
    }
    /* stopping: every job still held ends with an error */
    for (int32_t i = 0; i < srv.p.n_slots; i++)
        if (srv.slots[i].j) slot_finish(&srv.slots[i], NULL, "the server is shutting down");
    while (srv.queue_head) {
        job *j = srv.queue_head;
        srv.queue_head = j->next;
        snprintf(j->err, sizeof j->err, "the server is shutting down");
        j->done = 1;
        job_unref(j);
    }
    srv.queue_tail = NULL;
    srv.n_queued = 0;
    for (slot_op *op = srv.ops; op; op = op->next) {
        op_fail(op, 503, "the server is shutting down");
        op->done = 1;
    }
    srv.ops = NULL;
    pthread_cond_broadcast(&srv.out);
    pthread_mutex_unlock(&srv.mu);
    free(logits);
    return NULL;
}

/* ================================================================================ */
/* HTTP: responses                                                                  */
/* ================================================================================ */

typedef struct {
    char *body;
    size_t len, cap;
    int too_big;
} conn_state;

static enum MHD_Result send_text(struct MHD_Connection *con, unsigned status, const char *type, const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(con, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *con, unsigned status, cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s) return send_text(con, 500, "application/json", "{\"error\":{\"message\":\"out of memory\"}}");
    enum MHD_Result r = send_text(con, status, "application/json", s);
    free(s);
    return r;
}

/* OpenAI's error shape: {"error": {"message", "type", "param", "code"}}. */
static cJSON *error_json(unsigned status, const char *message, const char *param, const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    const char *type = status == 401 ? "authentication_error"
                     : status == 503 ? "unavailable_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param && *param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    return o;
}

static enum MHD_Result send_error(struct MHD_Connection *con, unsigned status, const char *param, const char *code,
                                  const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status != 503 || strcmp(code ? code : "", "loading")) {
        pthread_mutex_lock(&srv.mu);
        srv.m_rejected += status >= 400 && status != 401;
        pthread_mutex_unlock(&srv.mu);
    }
    return send_json(con, status, error_json(status, msg, param, code));
}

static void add_usage(cJSON *o, const job *j) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", j->n_cached);
}

/* The response object (or, streaming, one chunk): text is the whole answer or a delta;
 * finish NULL = not finished. */
static cJSON *completion_json(const job *j, const char *text, size_t n, const char *finish, int chunk, int role) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->rq.chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                    : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", srv.alias);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    if (text || finish || role) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, c);
        cJSON_AddNumberToObject(c, "index", 0);
        char *t = malloc(n + 1);
        if (t) {
            if (n) memcpy(t, text, n);
            t[n] = '\0';
        }
        if (j->rq.chat) {
            cJSON *msg = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
            if (role || !chunk) cJSON_AddStringToObject(msg, "role", "assistant");
            if (text || !chunk) cJSON_AddStringToObject(msg, "content", t ? t : "");
        } else {
            cJSON_AddStringToObject(c, "text", t ? t : "");
        }
        free(t);
        cJSON_AddNullToObject(c, "logprobs");
        if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
        else cJSON_AddNullToObject(c, "finish_reason");
    }
    if (!chunk) {
        add_usage(o, j);
        cJSON *l = cJSON_AddObjectToObject(o, "locks");
        cJSON_AddStringToObject(l, "selector", locks_selector_name(j->rq.step.selector));
        cJSON_AddNumberToObject(l, "budget", j->rq.step.budget);
        cJSON_AddNumberToObject(l, "mass", j->rq.step.mass);
        cJSON_AddNumberToObject(l, "prompt_tokens_cached", j->n_cached);
        cJSON_AddNumberToObject(l, "id_slot", j->slot);
    }
    return o;
}

/* 1 if the peer has closed the connection (EOF on a peek). */
static int peer_gone(MHD_socket fd) {
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void timed_wait(double secs) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)(secs * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&srv.out, &srv.mu, &ts);
}

static void ev_add_json(job *j, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) return;
    buf_add(&j->ev, &j->ev_len, &j->ev_cap, "data: ", 6);
    buf_add(&j->ev, &j->ev_len, &j->ev_cap, s, strlen(s));
    buf_add(&j->ev, &j->ev_len, &j->ev_cap, "\n\n", 2);
    free(s);
}

/* The SSE body: blocks (this connection's own thread) until there is something to send. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    job *j = cls;
    (void)pos;
    if (j->ev_off == j->ev_len) {
        if (j->eos) return MHD_CONTENT_READER_END_OF_STREAM;
        j->ev_off = j->ev_len = 0;
        pthread_mutex_lock(&srv.mu);
        double waited = 0;
        while (j->ev_len == 0) {
            if (j->rq.chat && !j->sent_role) {
                ev_add_json(j, completion_json(j, "", 0, NULL, 1, 1));
                j->sent_role = 1;
            } else if (j->safe > j->sent) {
                ev_add_json(j, completion_json(j, j->text + j->sent, j->safe - j->sent, NULL, 1, 0));
                j->sent = j->safe;
            } else if (j->done) {
                if (j->err[0]) {
                    ev_add_json(j, error_json(500, j->err, NULL, NULL));
                } else {
                    ev_add_json(j, completion_json(j, NULL, 0, j->finish, 1, 0));
                    if (j->rq.include_usage) {
                        cJSON *u = completion_json(j, NULL, 0, NULL, 1, 0);
                        add_usage(u, j);
                        ev_add_json(j, u);
                    }
                }
                buf_add(&j->ev, &j->ev_len, &j->ev_cap, "data: [DONE]\n\n", 14);
                j->eos = 1;
            } else if (srv.stopping || peer_gone(j->fd)) {
                j->cancelled = 1;
                pthread_cond_signal(&srv.wake);
                pthread_mutex_unlock(&srv.mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            } else if (waited >= 5.0) { /* an SSE comment now and then: a closed socket shows on write */
                buf_add(&j->ev, &j->ev_len, &j->ev_cap, ": keep-alive\n\n", 14);
            } else {
                timed_wait(0.25);
                waited += 0.25;
            }
        }
        pthread_mutex_unlock(&srv.mu);
    }
    size_t n = j->ev_len - j->ev_off < max ? j->ev_len - j->ev_off : max;
    memcpy(buf, j->ev + j->ev_off, n);
    j->ev_off += n;
    return (ssize_t)n;
}

/* MHD is done with a streaming response (finished, or the client went away). */
static void sse_free(void *cls) {
    job *j = cls;
    pthread_mutex_lock(&srv.mu);
    if (!j->done) {
        j->cancelled = 1;
        pthread_cond_signal(&srv.wake);
    }
    job_unref(j);
    pthread_mutex_unlock(&srv.mu);
}

/* ================================================================================ */
/* HTTP: endpoints                                                                  */
/* ================================================================================ */

/* The prompt's tokens: the chat template over the messages, or the completion prompt. */
static int32_t *request_tokens(const serve_request *rq, int32_t *n, char *why, size_t why_size) {
    const locks_tokenizer *tk = locks_model_tokenizer(srv.m);
    locks_model_info in = locks_model_get_info(srv.m);
    if (rq->prompt_tokens) {
        for (int32_t i = 0; i < rq->n_prompt_tokens; i++)
            if (rq->prompt_tokens[i] >= in.n_vocab) {
                snprintf(why, why_size, "token id %d is not in the vocabulary (%d tokens)", rq->prompt_tokens[i], in.n_vocab);
                return NULL;
            }
        int32_t *t = malloc(sizeof(int32_t) * (size_t)(rq->n_prompt_tokens + 1));
        if (t) memcpy(t, rq->prompt_tokens, sizeof(int32_t) * (size_t)rq->n_prompt_tokens);
        *n = rq->n_prompt_tokens;
        return t;
    }
    char *text = rq->prompt, *owned = NULL;
    if (rq->chat) {
        /* as `locks run --chat`: Gemma's turns, or ChatML with SmolLM2's system prompt when
         * the conversation does not open with one */
        int add_sys = !srv.gemma && strcmp(rq->msgs[0].role, "system") != 0;
        int32_t nm = rq->n_msgs + add_sys;
        locks_chat_msg *msgs = malloc(sizeof *msgs * (size_t)nm);
        if (!msgs) return NULL;
        if (add_sys) msgs[0] = (locks_chat_msg){"system", LOCKS_SMOLLM2_SYSTEM_PROMPT};
        memcpy(msgs + add_sys, rq->msgs, sizeof *msgs * (size_t)rq->n_msgs);
        size_t need = 0;
        locks_status (*fmt)(const locks_chat_msg *, int32_t, bool, char *, size_t, size_t *) =
            srv.gemma ? locks_gemma_chat_format : locks_chatml_format;
        fmt(msgs, nm, true, NULL, 0, &need);
        owned = malloc(need + 1);
        if (!owned || fmt(msgs, nm, true, owned, need + 1, &need) != LOCKS_OK) {
            free(msgs);
            free(owned);
            return NULL;
        }
        free(msgs);
        text = owned;
    }
    size_t len = strlen(text);
    int bos = !rq->chat && in.add_bos && in.bos_id >= 0;
    int32_t *t = malloc(sizeof(int32_t) * (len + 2));
    int32_t got = 0;
    if (t && locks_tokenizer_encode(tk, text, len, rq->chat, t + bos, (int32_t)len + 1, &got) != LOCKS_OK) {
        free(t);
        t = NULL;
    }
    if (t && bos) t[0] = in.bos_id, got++;
    free(owned);
    *n = got;
    return t;
}

static enum MHD_Result do_completion(struct MHD_Connection *con, const conn_state *cs, int chat) {
    serve_request rq;
    serve_error e;
    if (serve_request_parse(cs->body ? cs->body : "", cs->len, chat, srv.p.sampling, srv.p.step, &rq, &e))
        return send_error(con, (unsigned)e.http, e.param, e.code, "%s", e.message);
    enum MHD_Result ret;
    job *j = NULL;
    if (rq.model && strcmp(rq.model, srv.alias) != 0) {
        ret = send_error(con, 400, "model", "model_not_found", "the model '%.100s' is not served here (GET /v1/models: '%s')",
                         rq.model, srv.alias);
        goto out;
    }
    if (rq.speculate > 0 && rq.step.selector == LOCKS_SEL_FULL) {
        ret = send_error(con, 400, "locks.speculate", NULL,
                         "locks.speculate drafts with a sparse selector; the selector 'full' needs no draft");
        goto out;
    }
    if (rq.step.budget < (rq.step.n_sink + rq.step.n_recent + 1) * LOCKS_PAGE) { /* + the page being filled */
        ret = send_error(con, 400, "locks.budget", NULL,
                         "locks.budget %d is below the pages always attended (%d sink, %d recent and the last "
                         "page, of %d tokens each)",
                         rq.step.budget, rq.step.n_sink, rq.step.n_recent, LOCKS_PAGE);
        goto out;
    }
    if (rq.speculate > 64) {
        ret = send_error(con, 400, "locks.speculate", NULL, "locks.speculate is at most 64 tokens a round");
        goto out;
    }
    if (!(srv.served >> rq.step.selector & 1u)) {
        ret = send_error(con, 400, "locks.selector", NULL,
                         "the selector '%s' is not served: start the server with --selector %s",
                         locks_selector_name(rq.step.selector), locks_selector_name(rq.step.selector));
        goto out;
    }
    if (!rq.seed_set) rq.sampling.seed = (uint64_t)time(NULL) ^ ((uint64_t)__atomic_add_fetch(&srv.next_id, 1, __ATOMIC_RELAXED) << 32);
    char why[160] = "cannot tokenize the prompt";
    int32_t n_prompt = 0;
    int32_t *tokens = request_tokens(&rq, &n_prompt, why, sizeof why);
    if (!tokens) {
        ret = send_error(con, 400, chat ? "messages" : "prompt", NULL, "%s", why);
        goto out;
    }
    int32_t cap = srv.p.n_predict > 0 ? srv.p.n_predict : srv.slot_ctx;
    if (n_prompt == 0) {
        free(tokens);
        ret = send_error(con, 400, chat ? "messages" : "prompt", NULL, "the prompt is empty");
        goto out;
    }
    if (n_prompt >= srv.slot_ctx || (rq.max_tokens > 0 && n_prompt + rq.max_tokens > srv.slot_ctx)) {
        free(tokens);
        ret = send_error(con, 400, chat ? "messages" : "prompt", "context_length_exceeded",
                         "this server's context is %d tokens per slot; the prompt has %d and max_tokens asks %d",
                         srv.slot_ctx, n_prompt, rq.max_tokens > 0 ? rq.max_tokens : 1);
        goto out;
    }
    if (rq.max_tokens > cap) {
        free(tokens);
        ret = send_error(con, 400, "max_tokens", NULL, "max_tokens is at most %d here (-n)", cap);
        goto out;
    }
    j = calloc(1, sizeof *j);
    if (!j) {
        free(tokens);
        ret = send_error(con, 500, NULL, NULL, "out of memory");
        goto out;
    }
    j->rq = rq;
    memset(&rq, 0, sizeof rq);
    j->prompt = tokens;
    j->n_prompt = n_prompt;
    j->max_tokens = j->rq.max_tokens > 0 ? j->rq.max_tokens : srv.slot_ctx - n_prompt < cap ? srv.slot_ctx - n_prompt : cap;
    j->created = (long)time(NULL);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : MHD_INVALID_SOCKET;
    j->refs = 2;

    pthread_mutex_lock(&srv.mu);
    if (srv.stopping) {
        pthread_mutex_unlock(&srv.mu);
        job_free(j);
        return send_error(con, 503, NULL, NULL, "the server is shutting down");
    }
    if (srv.n_queued >= srv.p.max_queue) {
        pthread_mutex_unlock(&srv.mu);
        job_free(j);
        return send_error(con, 503, NULL, "queue_full", "the server is busy: %d requests wait already (--max-queue)",
                          srv.p.max_queue);
    }
    snprintf(j->id, sizeof j->id, "%s-%llu", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)__atomic_add_fetch(&srv.next_id, 1, __ATOMIC_RELAXED));
    if (srv.queue_tail) srv.queue_tail->next = j;
    else srv.queue_head = j;
    srv.queue_tail = j;
    srv.n_queued++;
    srv.m_requests++;
    srv.m_prompt += (uint64_t)n_prompt;
    pthread_cond_signal(&srv.wake);

    if (j->rq.stream) {
        pthread_mutex_unlock(&srv.mu);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, j, sse_free);
        if (!r) {
            sse_free(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        ret = MHD_queue_response(con, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    while (!j->done) {
        timed_wait(0.25);
        if (!j->done && peer_gone(j->fd)) { /* the client gave up: so do we */
            j->cancelled = 1;
            pthread_cond_signal(&srv.wake);
            job_unref(j);
            pthread_mutex_unlock(&srv.mu);
            return MHD_NO;
        }
    }
    pthread_mutex_unlock(&srv.mu);
    if (j->err[0]) ret = send_error(con, 500, NULL, NULL, "%s", j->err);
    else ret = send_json(con, 200, completion_json(j, j->text ? j->text : "", j->len, j->finish, 0, 0));
    pthread_mutex_lock(&srv.mu);
    job_unref(j);
    pthread_mutex_unlock(&srv.mu);
    return ret;
out:
    serve_request_free(&rq);
    return ret;
}

/* POST /slots/{id}?action=save|restore, body {"filename": NAME}: NAME is a plain file
 * name inside --slot-save-path (letters, digits, '.', '_', '-'; not starting with '.'). */
static enum MHD_Result do_slot(struct MHD_Connection *con, const char *url, const conn_state *cs) {
    if (!srv.p.slot_save_path)
        return send_error(con, 400, NULL, NULL, "slot save/restore is off: start the server with --slot-save-path DIR");
    char *end;
    long id = strtol(url + 7, &end, 10);
    if (end == url + 7 || *end || id < 0 || id >= srv.p.n_slots)
        return send_error(con, 400, NULL, NULL, "no slot '%.40s' (0 .. %d)", url + 7, srv.p.n_slots - 1);
    const char *action = MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "action");
    if (!action || (strcmp(action, "save") && strcmp(action, "restore")))
        return send_error(con, 400, "action", NULL, "?action= must be save or restore");
    cJSON *body = cJSON_ParseWithLength(cs->body ? cs->body : "", cs->len);
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(body, "filename");
    const char *name = cJSON_IsString(fn) ? fn->valuestring : NULL;
    size_t nl = name ? strlen(name) : 0;
    int ok = name && nl > 0 && nl <= 200 && name[0] != '.';
    for (size_t i = 0; ok && i < nl; i++)
        ok = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
             (name[i] >= '0' && name[i] <= '9') || name[i] == '.' || name[i] == '_' || name[i] == '-';
    if (!ok) {
        cJSON_Delete(body);
        return send_error(con, 400, "filename", NULL,
                          "'filename' must be a plain file name (letters, digits, '.', '_', '-', not starting "
                          "with '.') inside --slot-save-path");
    }
    slot_op *op = calloc(1, sizeof *op);
    if (!op) {
        cJSON_Delete(body);
        return send_error(con, 500, NULL, NULL, "out of memory");
    }
    op->restore = !strcmp(action, "restore");
    op->slot = (int32_t)id;
    snprintf(op->path, sizeof op->path, "%s/%s", srv.p.slot_save_path, name);
    pthread_mutex_lock(&srv.mu);
    op->next = srv.ops; /* order does not matter between slots; one op per request */
    srv.ops = op;
    pthread_cond_signal(&srv.wake);
    while (!op->done) timed_wait(0.25);
    pthread_mutex_unlock(&srv.mu);
    enum MHD_Result ret;
    if (op->http != 200) {
        ret = send_error(con, (unsigned)op->http, op->http == 400 || op->http == 404 ? "filename" : NULL, NULL, "%s", op->err);
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id_slot", (double)id);
        cJSON_AddStringToObject(o, "filename", name);
        cJSON_AddNumberToObject(o, op->restore ? "n_restored" : "n_saved", op->n_tokens);
        cJSON_AddNumberToObject(o, op->restore ? "n_read" : "n_written", (double)op->bytes);
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(o, "timings"), op->restore ? "restore_ms" : "save_ms", op->ms);
        ret = send_json(con, 200, o);
    }
    cJSON_Delete(body);
    free(op);
    return ret;
}

static enum MHD_Result do_models(struct MHD_Connection *con) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    cJSON_AddStringToObject(m, "id", srv.alias);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "locks");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx_slot", srv.slot_ctx);
    cJSON_AddNumberToObject(meta, "n_slots", srv.p.n_slots);
    return send_json(con, 200, o);
}

static enum MHD_Result do_metrics(struct MHD_Connection *con) {
    char *b = NULL;
    size_t len = 0, cap = 0;
    char line[256];
    pthread_mutex_lock(&srv.mu);
    locks_run_stats s = srv.stats;
    int32_t busy = 0;
    for (int32_t i = 0; i < srv.p.n_slots; i++) busy += srv.slots[i].j != NULL;
    struct {
        const char *name, *type, *help;
        double v;
    } rows[] = {
        {"locks_requests_total", "counter", "completion requests queued", (double)srv.m_requests},
        {"locks_requests_rejected_total", "counter", "requests answered with a 4xx/5xx before queueing", (double)srv.m_rejected},
        {"locks_requests_failed_total", "counter", "queued requests that failed", (double)srv.m_failed},
        {"locks_requests_cancelled_total", "counter", "requests whose client went away first", (double)srv.m_cancelled},
        {"locks_prompt_tokens_total", "counter", "prompt tokens of queued requests", (double)srv.m_prompt},
        {"locks_prompt_tokens_prefilled_total", "counter", "prompt tokens run through prefill", (double)srv.m_prefilled},
        {"locks_prompt_tokens_cached_total", "counter", "prompt tokens reused from a slot's cache", (double)srv.m_cached},
        {"locks_tokens_generated_total", "counter", "tokens sampled", (double)srv.m_generated},
        {"locks_decode_steps_total", "counter", "decode steps (a batched step or a speculative draft step)", (double)srv.m_steps},
        {"locks_spec_drafted_total", "counter", "tokens drafted by speculative rounds", (double)srv.m_drafted},
        {"locks_spec_accepted_total", "counter", "drafted tokens dense verification kept", (double)srv.m_accepted},
        {"locks_prefill_tokens_per_second", "gauge", "prefill tokens per second of prefill time so far",
         s.prefill_ms > 0 ? s.n_prefill / (s.prefill_ms / 1e3) : 0.0},
        {"locks_decode_tokens_per_second", "gauge", "decode tokens per second of decode time so far",
         s.decode_ms > 0 ? s.n_decode / (s.decode_ms / 1e3) : 0.0},
        {"locks_queue_depth", "gauge", "requests waiting for a slot", (double)srv.n_queued},
        {"locks_slots_busy", "gauge", "slots holding a request", (double)busy},
        {"locks_slots_total", "gauge", "slots (-np)", (double)srv.p.n_slots},
        {"locks_kv_bytes_read_total", "counter", "K/V bytes read by decode attention", (double)s.bytes_kv},
        {"locks_meta_bytes_read_total", "counter", "selector metadata bytes read by decode attention", (double)s.bytes_meta},
        {"locks_kv_bytes_dense_total", "counter", "K/V bytes dense attention would have read", (double)s.bytes_dense},
        {"locks_kv_bytes_read_per_token", "gauge", "K/V and metadata bytes read per decoded token",
         s.n_decode ? (double)(s.bytes_kv + s.bytes_meta) / s.n_decode : 0.0},
        {"locks_kv_bytes_read_per_step", "gauge", "K/V and metadata bytes read per batched decode step (all its slots)",
         srv.m_steps ? (double)(s.bytes_kv + s.bytes_meta) / (double)srv.m_steps : 0.0},
        {"locks_pages_attended_ratio", "gauge", "pages attended / pages dense attention reads (K/V bytes ratio)",
         s.bytes_dense ? (double)s.bytes_kv / (double)s.bytes_dense : 0.0},
    };
    pthread_mutex_unlock(&srv.mu);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int n = snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", rows[i].name, rows[i].help,
                         rows[i].name, rows[i].type, rows[i].name, rows[i].v);
        if (n > 0 && !buf_add(&b, &len, &cap, line, (size_t)n)) break;
    }
    enum MHD_Result r = send_text(con, 200, "text/plain; version=0.0.4", b ? b : "");
    free(b);
    return r;
}

static int authorized(struct MHD_Connection *con) {
    if (!srv.p.api_key) return 1;
    const char *h = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return 0;
    const char *k = h + 7, *want = srv.p.api_key;
    size_t nk = strlen(k), nw = strlen(want);
    unsigned diff = (unsigned)(nk != nw);
    for (size_t i = 0; i < nw; i++) diff |= (unsigned)(want[i] ^ (i < nk ? k[i] : 0)); /* no early exit */
    return diff == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)cls;
    (void)version;
    conn_state *cs = *con_cls;
    int post = !strcmp(method, "POST");
    if (!cs) {
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        const char *cl = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Length");
        if (post && cl && strtoull(cl, NULL, 10) > srv.p.max_body) {
            cs->too_big = 1;
            return send_error(con, 413, NULL, "request_too_large", "the request body is over %zu bytes", srv.p.max_body);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cs->too_big && cs->len + *upload_size > srv.p.max_body) cs->too_big = 1;
        if (!cs->too_big && !buf_add(&cs->body, &cs->len, &cs->cap, upload, *upload_size)) cs->too_big = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->too_big) return send_error(con, 413, NULL, "request_too_large", "the request body is over %zu bytes", srv.p.max_body);

    const char *path = !strncmp(url, "/v1/", 4) ? url + 3 : url;
    if (!strcmp(url, "/health")) {
        if (!srv.ready) return send_error(con, 503, NULL, "loading", "loading the model");
        return send_text(con, 200, "application/json", "{\"status\":\"ok\"}");
    }
    if (!authorized(con)) return send_error(con, 401, NULL, "invalid_api_key", "a valid API key is needed (Authorization: Bearer KEY)");
    if (!srv.ready) return send_error(con, 503, NULL, "loading", "loading the model");
    int completions = !strcmp(path, "/completions"), chat = !strcmp(path, "/chat/completions");
    int models = !strcmp(path, "/models"), metrics = !strcmp(url, "/metrics");
    if (completions || chat) {
        if (!post) return send_error(con, 405, NULL, NULL, "%s takes POST", url);
        return do_completion(con, cs, chat);
    }
    if (!strncmp(url, "/slots/", 7)) {
        if (!post) return send_error(con, 405, NULL, NULL, "%s takes POST", url);
        return do_slot(con, url, cs);
    }
    if (models || metrics) {
        if (strcmp(method, "GET")) return send_error(con, 405, NULL, NULL, "%s takes GET", url);
        return models ? do_models(con) : do_metrics(con);
    }
    return send_error(con, 404, NULL, NULL, "no endpoint %.100s %.200s", method, url);
}

static void on_completed(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)con;
    (void)toe;
    conn_state *cs = *con_cls;
    if (cs) free(cs->body);
    free(cs);
    *con_cls = NULL;
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
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "locks serve: listening on http://%s%s%s:%u\n", ai->ai_family == AF_INET6 ? "[" : "", p->host,
            ai->ai_family == AF_INET6 ? "]" : "", di ? di->port : (unsigned)p->port);

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
    srv.ctx = locks_ctx_init(srv.m, cp, &st);
    if (!srv.ctx) {
        fprintf(stderr, "locks serve: cannot create the context (%d slots of %d tokens): %s\n", p->n_slots, srv.slot_ctx,
                locks_status_str(st));
        goto done;
    }
    for (int s = 0; s < LOCKS_SEL_COUNT; s++)
        if (locks_cache_serves(locks_ctx_cache(srv.ctx), (locks_selector)s)) srv.served |= 1u << s;
    for (int32_t i = 0; i < p->n_slots; i++) {
        srv.slots[i].seq = i;
        srv.slots[i].pending = -1;
        if (!(srv.slots[i].tokens = malloc(sizeof(int32_t) * (size_t)srv.slot_ctx))) goto done;
    }
    if (pthread_create(&srv.engine, NULL, engine_main, NULL) != 0) {
        fprintf(stderr, "locks serve: cannot start the engine thread\n");
        goto done;
    }
    srv.ready = 1;
    fprintf(stderr, "locks serve: ready: model '%s', %d slots of %d tokens, selector %s, budget %d%s\n", srv.alias,
            p->n_slots, srv.slot_ctx, locks_selector_name(p->step.selector), p->step.budget,
            p->api_key ? ", API key required" : "");
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
