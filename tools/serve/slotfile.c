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
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include <xxhash.h>

#include "serve_internal.h"
#include "util.h"

/* Slot files (host byte order; a file whose magic, version, model, shape or size does
 * not match is refused, never half-loaded):
 *
 *   header   slot_header: magic "LOCKSLT1", version 2, the model's shape and name, the
 *            token count n, the summary shape (rank, precision, bytes per (page, KV
 *            head), layers with summaries) and a checksum
 *   tokens   int32 [n]
 *   K        fp16 [n_layers][n][n_kv_heads][head_dim]   (locks_ctx_seq_read_kv)
 *   V        fp16 [n_layers][n][n_kv_heads][head_dim]
 *   sums     [n_sum_layers][n / 16][n_kv_heads][sum_bytes] (locks_ctx_seq_read_summaries,
 *            the layers with summaries in model order)
 *
 * checksum: XXH3-64 (libxxhash, seed 0) of the whole file with the checksum field read
 * as 0, so a flipped or torn byte anywhere is refused rather than loaded. Restore reads the file in one
 * fread and hands the K/V and the summaries to locks_ctx_seq_load as they lie in it:
 * nothing is converted or rebuilt. A file whose summary shape differs from this
 * server's cache (another --rank) still restores: its K/V are valid for the model, so
 * the summaries are rebuilt from the keys (the answer says "summaries": "rebuilt").
 * Version 1 files (the first 160 bytes of this header; tokens, K and V; no summaries,
 * no checksum) restore the same way. */
#define SLOT_MAGIC "LOCKSLT1"
#define SLOT_V1_HEADER 160 /* version 1's header: up to and including name */
typedef struct {
    char magic[8];
    uint32_t version, n_layers, n_kv_heads, head_dim, n_vocab, n_tokens;
    char name[128];
    uint32_t rank, summary_prec, sum_bytes, n_sum_layers; /* version 2 on */
    uint64_t checksum;
} slot_header;
_Static_assert(offsetof(slot_header, rank) == SLOT_V1_HEADER && sizeof(slot_header) == 184, "slot_header layout");

/* The checksum of a whole file image (its header's checksum field taken as 0). */
static uint64_t file_hash(unsigned char *img, size_t n) {
    uint64_t saved;
    memcpy(&saved, img + offsetof(slot_header, checksum), 8);
    memset(img + offsetof(slot_header, checksum), 0, 8);
    const uint64_t h = (uint64_t)XXH3_64bits(img, n);
    memcpy(img + offsetof(slot_header, checksum), &saved, 8);
    return h;
}

/* A file image's buffer: 2 MB aligned and marked for transparent huge pages when it is
 * large, so reading 200 MB into it takes a hundred page faults rather than fifty
 * thousand (freed with free). */
static void *image_alloc(size_t n) {
    const size_t huge = (size_t)2 << 20;
    if (n < huge) return malloc(n ? n : 1);
    void *p = aligned_alloc(huge, (n + huge - 1) & ~(huge - 1));
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, (n + huge - 1) & ~(huge - 1), MADV_HUGEPAGE); /* a hint */
#endif
    return p;
}

void op_fail(slot_op *op, int http, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(op->err, sizeof op->err, fmt, ap);
    va_end(ap);
    op->http = http;
}

/* The header this server writes, n_tokens 0. */
static slot_header my_header(void) {
    const locks_model_info in = locks_model_get_info(srv.m);
    const locks_ctx_params cp = locks_ctx_get_params(srv.ctx);
    slot_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, SLOT_MAGIC, 8);
    h.version = 2;
    h.n_layers = (uint32_t)in.n_layers;
    h.n_kv_heads = (uint32_t)in.n_kv_heads;
    h.head_dim = (uint32_t)in.head_dim;
    h.n_vocab = (uint32_t)in.n_vocab;
    memcpy(h.name, in.name, sizeof h.name);
    h.name[sizeof h.name - 1] = '\0';
    h.rank = (uint32_t)cp.rank;
    h.summary_prec = (uint32_t)cp.summary_prec;
    h.sum_bytes = (uint32_t)locks_ctx_summary_bytes(srv.ctx);
    for (int32_t l = 0; l < in.n_layers; l++) h.n_sum_layers += locks_ctx_cache_layer(srv.ctx, l) >= 0;
    return h;
}

/* Byte sizes of a file's sections, from its header (its fields bounded by the caller). */
typedef struct {
    size_t tokens, kv, sums, total; /* kv: K alone (V the same) */
} slot_sizes;

static slot_sizes sizes_of(const slot_header *h) {
    slot_sizes z;
    const size_t n = h->n_tokens, hdr = h->version == 1 ? SLOT_V1_HEADER : sizeof *h;
    z.tokens = sizeof(int32_t) * n;
    z.kv = sizeof(uint16_t) * (size_t)h->n_layers * n * h->n_kv_heads * h->head_dim;
    z.sums = h->version == 1 ? 0 : (size_t)h->n_sum_layers * (n / LOCKS_PAGE) * h->n_kv_heads * h->sum_bytes;
    z.total = hdr + z.tokens + 2 * z.kv + z.sums;
    return z;
}

static void op_save(slot_op *op, slot *s) {
    slot_header h = my_header();
    h.n_tokens = (uint32_t)s->n_tokens;
    const slot_sizes z = sizes_of(&h);
    const int32_t n = s->n_tokens, L = (int32_t)h.n_layers;
    const size_t per = z.kv / (size_t)L, per_sum = z.sums / (h.n_sum_layers ? h.n_sum_layers : 1);
    unsigned char *img = image_alloc(z.total);
    if (!img) {
        op_fail(op, 500, "out of memory");
        return;
    }
    memcpy(img, &h, sizeof h);
    memcpy(img + sizeof h, s->tokens, z.tokens);
    unsigned char *k = img + sizeof h + z.tokens, *v = k + z.kv, *sums = v + z.kv;
    for (int32_t l = 0; l < L; l++) {
        locks_status st = locks_ctx_seq_read_kv(srv.ctx, s->seq, l, (uint16_t *)(void *)(k + (size_t)l * per),
                                                (uint16_t *)(void *)(v + (size_t)l * per));
        const int32_t cl = locks_ctx_cache_layer(srv.ctx, l);
        if (st == LOCKS_OK && cl >= 0) st = locks_ctx_seq_read_summaries(srv.ctx, s->seq, l, sums + (size_t)cl * per_sum);
        if (st != LOCKS_OK) {
            op_fail(op, 500, "reading the slot's K/V: %s (%s)", locks_status_str(st), locks_last_error());
            free(img);
            return;
        }
    }
    h.checksum = file_hash(img, z.total);
    memcpy(img + offsetof(slot_header, checksum), &h.checksum, 8);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", op->path);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(img, 1, z.total, f) == z.total;
    if (f && fclose(f) != 0) ok = 0;
    free(img);
    if (!ok || rename(tmp, op->path) != 0) {
        op_fail(op, 500, "cannot write %s: %s", strrchr(op->path, '/') + 1, strerror(errno));
        remove(tmp);
        return;
    }
    op->n_tokens = n;
    op->bytes = z.total;
}

static void op_restore(slot_op *op, slot *s) {
    const char *name = strrchr(op->path, '/') + 1;
    const slot_header want = my_header();
    slot_header h;
    memset(&h, 0, sizeof h);
    unsigned char *img = NULL;
    struct stat sb;
    FILE *f = fopen(op->path, "rb");
    if (!f) {
        op_fail(op, 404, "no slot file %s", name);
        return;
    }
    if (fread(&h, SLOT_V1_HEADER, 1, f) != 1 || memcmp(h.magic, SLOT_MAGIC, 8) != 0 ||
        (h.version != 1 && h.version != 2) ||
        (h.version == 2 && fread((char *)&h + SLOT_V1_HEADER, sizeof h - SLOT_V1_HEADER, 1, f) != 1)) {
        op_fail(op, 400, "%s is not a locks slot file (or a newer version of one)", name);
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
    /* bounds that keep the sizes from overflowing, whatever the header says */
    if (h.version == 2 && (h.n_sum_layers > h.n_layers || h.sum_bytes > (1u << 20))) {
        op_fail(op, 400, "the slot file's summary shape (%u layers of %u bytes) is not one of a locks cache",
                h.n_sum_layers, h.sum_bytes);
        goto out;
    }
    const slot_sizes z = sizes_of(&h);
    if (fstat(fileno(f), &sb) != 0 || (uint64_t)sb.st_size != (uint64_t)z.total) {
        op_fail(op, 400, "the slot file is %lld bytes, %zu expected (truncated?)", (long long)sb.st_size, z.total);
        goto out;
    }
    img = image_alloc(z.total);
    if (!img) {
        op_fail(op, 500, "out of memory");
        goto out;
    }
    if (fseek(f, 0, SEEK_SET) != 0 || fread(img, 1, z.total, f) != z.total) {
        op_fail(op, 400, "cannot read the slot file (changed while reading?)");
        goto out;
    }
    if (h.version == 2 && file_hash(img, z.total) != h.checksum) {
        op_fail(op, 400, "the slot file's checksum does not match its contents (corrupted)");
        goto out;
    }
    const int32_t n = (int32_t)h.n_tokens;
    const size_t hdr = h.version == 1 ? SLOT_V1_HEADER : sizeof h;
    int32_t *toks = (int32_t *)(void *)(img + hdr);
    for (int32_t i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= (int32_t)want.n_vocab) {
            op_fail(op, 400, "the slot file has a token id %d outside the vocabulary", toks[i]);
            goto out;
        }
    const uint16_t *k = (const uint16_t *)(const void *)(img + hdr + z.tokens), *v = k + z.kv / sizeof(uint16_t);
    const int same_shape = h.version == 2 && h.rank == want.rank && h.summary_prec == want.summary_prec &&
                           h.sum_bytes == want.sum_bytes && h.n_sum_layers == want.n_sum_layers;
    const void *sums = same_shape ? (const void *)(img + hdr + z.tokens + 2 * z.kv) : NULL;
    locks_status st = locks_ctx_seq_load(srv.ctx, s->seq, n, k, v, sums);
    if (st != LOCKS_OK) { /* the slot as it was (bad data), or empty */
        s->n_tokens = locks_ctx_seq_len(srv.ctx, s->seq);
        op_fail(op, 400, "cannot load the slot file: %s (%s)", locks_status_str(st), locks_last_error());
        goto out;
    }
    memcpy(s->tokens, toks, sizeof(int32_t) * (size_t)n);
    s->n_tokens = n;
    op->n_tokens = n;
    op->bytes = z.total;
    op->sums_rebuilt = sums == NULL;
out:
    fclose(f);
    free(img);
}

/* Runs one op on an idle slot (engine thread, srv.mu not held). */
static void op_run(slot_op *op, slot *s) {
    double t0 = locks_now_ms();
    op->http = 200;
    if (op->restore) op_restore(op, s);
    else op_save(op, s);
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

