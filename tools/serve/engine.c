/*
 * engine.c — `locks serve`'s engine thread: the only user of the locks_ctx. It admits
 * queued jobs into slots (prefix reuse and shared prefix pages, see server.c), prefills
 * prompts chunk by chunk, runs one batched decode step (or a speculative round) for the
 * generating slots and publishes their text under srv.mu.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_internal.h"

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

/* Before slot s's tokens past `keep` are dropped for a new prompt, its whole pages go to
 * a kept prefix (shared, not copied; srv.mu held): an empty one, else the least
 * recently used one other than `busy` (the source the new prompt shares from), unless
 * some other sequence already holds those tokens. */
static void keep_prefix(const slot *s, int32_t keep, const slot *busy) {
    const int32_t n = locks_ctx_seq_shareable(srv.ctx, s->seq, s->n_tokens);
    if (srv.n_kept == 0 || n <= keep) return;
    slot *h = NULL;
    for (int32_t i = 0; i < srv.p.n_slots + srv.n_kept; i++) {
        slot *o = &srv.slots[i];
        if (o == s) continue;
        if (common_prefix(o->tokens, o->n_tokens, s->tokens, n) >= n) return; /* held already */
        if (i < srv.p.n_slots || o == busy) continue;
        if (!h || (h->n_tokens > 0 && (o->n_tokens == 0 || o->last_used < h->last_used))) h = o;
    }
    if (!h) return;
    const int32_t evicted = h->n_tokens;
    if (locks_ctx_seq_share(srv.ctx, h->seq, s->seq, n) != LOCKS_OK) {
        h->n_tokens = locks_ctx_seq_len(srv.ctx, h->seq); /* unchanged, or emptied */
        return;
    }
    memcpy(h->tokens, s->tokens, sizeof(int32_t) * (size_t)n);
    h->n_tokens = n;
    h->last_used = ++srv.turn;
    srv.m_kept++;
    srv.m_evicted += evicted > 0;
}

/* Takes queued jobs into free slots (srv.mu held): the free slot whose tokens share the
 * longest prefix with the prompt, else the one unused longest; then the most whole
 * pages of the prompt any sequence can share with it (see the top of this file). */
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
        /* another sequence may hold more of the prompt in whole pages it can share */
        slot *src = NULL;
        int32_t shared = keep;
        for (int32_t i = 0; i < srv.p.n_slots + srv.n_kept; i++) {
            slot *o = &srv.slots[i];
            if (o == best) continue;
            int32_t c = common_prefix(o->tokens, o->n_tokens, j->prompt, j->n_prompt - 1);
            int32_t n = c > shared ? locks_ctx_seq_shareable(srv.ctx, o->seq, c) : 0;
            if (n > shared) src = o, shared = n;
        }
        keep_prefix(best, src ? 0 : keep, src);
        locks_status st = LOCKS_ERR_INVALID_ARG;
        if (src && (st = locks_ctx_seq_share(srv.ctx, best->seq, src->seq, shared)) == LOCKS_OK) {
            keep = shared;
            memcpy(best->tokens, src->tokens, sizeof(int32_t) * (size_t)keep);
            src->last_used = ++srv.turn;
            srv.m_shared += (uint64_t)keep;
        } else {
            st = locks_ctx_truncate_seq(srv.ctx, best->seq, keep);
        }
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

void *engine_main(void *arg) {
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

