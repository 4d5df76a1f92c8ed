/*
 * http.c — `locks serve`'s endpoints on libmicrohttpd: OpenAI's completions (plain and
 * server-sent events), models, health, metrics, slots; errors in OpenAI's shape. Runs
 * on the connections' threads: parses, tokenizes, queues jobs for the engine and waits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runutil.h"
#include "serve_internal.h"
#include "util.h"

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
        if (op->restore) cJSON_AddStringToObject(o, "summaries", op->sums_rebuilt ? "rebuilt" : "restored");
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
    int64_t kept_tokens = 0;
    for (int32_t i = 0; i < srv.n_kept; i++) kept_tokens += srv.slots[srv.p.n_slots + i].n_tokens;
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
        {"locks_prompt_tokens_cached_total", "counter", "prompt tokens reused, not prefilled (a slot's own or shared pages)", (double)srv.m_cached},
        {"locks_prompt_tokens_shared_total", "counter", "prompt tokens of those taken as pages shared with another sequence", (double)srv.m_shared},
        {"locks_prefix_cache_kept_total", "counter", "finished prompts whose pages went to a kept prefix", (double)srv.m_kept},
        {"locks_prefix_cache_evictions_total", "counter", "kept prefixes dropped for a newer one (least recently used)", (double)srv.m_evicted},
        {"locks_prefix_cache_entries", "gauge", "kept-prefix sequences --cache-ram pays for", (double)srv.n_kept},
        {"locks_prefix_cache_tokens", "gauge", "tokens the kept prefixes hold", (double)kept_tokens},
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

enum MHD_Result on_request(void *cls, struct MHD_Connection *con, const char *url, const char *method,
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

void on_completed(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)con;
    (void)toe;
    conn_state *cs = *con_cls;
    if (cs) free(cs->body);
    free(cs);
    *con_cls = NULL;
}

