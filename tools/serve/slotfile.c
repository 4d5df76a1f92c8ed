/*
 * slotfile.c — slot save / restore (POST /slots/{id}?action=save|restore), run by the
 * engine thread on an idle slot: the file format and its checks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_internal.h"
#include "util.h"

/* Slot files: a header, the tokens, then K of every layer and V of every layer as the
 * cache stores them (fp16 bits, [n_layers][n][Hkv][d]). A file whose magic, shape,
 * model name or size does not match is refused, never half-loaded. */
#define SLOT_MAGIC "LOCKSLT1"
typedef struct {
    char magic[8];
    uint32_t version, n_layers, n_kv_heads, head_dim, n_vocab, n_tokens;
    char name[128];
} slot_header;

void op_fail(slot_op *op, int http, const char *fmt, ...) {
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
void run_ops(void) {
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

