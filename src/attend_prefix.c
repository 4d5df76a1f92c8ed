/*
 * attend_prefix.c — dense decode attention over a prefix of a sequence, for verifying
 * drafted tokens (src/model/speculate.c through the model's verify pass).
 *
 * locks_attend_prefix (locks.h) gives, bit for bit, what locks_decode_step with the `full`
 * selector computes for the same query on a sequence holding only the first len tokens:
 * the same work items (every page 0 .. ceil(len / 16) - 1 of every KV head, the last one
 * with len % 16 tokens when partial) go through the same locks_attend_run (same chunks,
 * same merge). So a pass that writes K/V of several tokens at once and attends each
 * token with this function reproduces token-by-token dense decoding exactly.
 * locks_attend_prefix_n does the same for consecutive queries in one pass over the
 * pages (locks_attend_verify_run, attend.c): the verify pass of speculative decoding.
 */
#include <string.h>

#include "backend.h"
#include "decode.h"
#include "util.h"

/* The checks both calls share: queries of len .. len + n - 1 tokens. */
static locks_status prefix_check(const locks_cache *c, int32_t layer, int32_t seq_id, int32_t len, int32_t n,
                                 const float *q, int32_t n_q_heads, const float *out, const locks_seq **s) {
    if (!q || !out) return locks_fail(LOCKS_ERR_INVALID_ARG, "%s is NULL", !q ? "q" : "out");
    if (n < 1) return locks_fail(LOCKS_ERR_INVALID_ARG, "n %d (must be >= 1)", n);
    locks_status st = locks_check_seq(c, seq_id, s);
    if (st == LOCKS_OK) st = locks_check_layer(c, layer);
    if (st == LOCKS_OK) st = locks_check_heads(c, n_q_heads, 64);
    if (st != LOCKS_OK) return st;
    if (len <= 0 || len > (*s)->len - (n - 1))
        return locks_fail(LOCKS_ERR_INVALID_ARG, "prefix of %d tokens for %d queries (the sequence holds %d)", len, n,
                          (*s)->len);
    if (!c->host_pages) return locks_fail(LOCKS_ERR_UNSUPPORTED, "a %s cache (CPU backend only)", c->be->name);
    return locks_cache_check_written(c, seq_id, layer, len + n - 1);
}

static locks_status attend_prefix(locks_cache *c, int32_t layer, int32_t seq_id, int32_t len, const float *q,
                                  int32_t n_q_heads, float *out) {
    const locks_seq *s;
    locks_status st = prefix_check(c, layer, seq_id, len, 1, q, n_q_heads, out, &s);
    if (st != LOCKS_OK) return st;
    const int32_t H = c->hkv;
    locks_seq prefix = *s;
    prefix.len = len;
    prefix.n_pages = (len + LOCKS_PAGE - 1) / LOCKS_PAGE;
    const int32_t mp = prefix.n_pages;
    size_t bytes = sizeof(locks_seq_work) + ((size_t)H * (size_t)mp + (size_t)H) * sizeof(int32_t) + 64;
    uint8_t *buf = locks_cache_scratch(c, 0, bytes);
    if (!buf) return LOCKS_ERR_OOM;
    locks_seq_work *w = (locks_seq_work *)(void *)buf;
    int32_t *pages = (int32_t *)(void *)(buf + sizeof(locks_seq_work));
    memset(w, 0, sizeof *w);
    w->seq_id = seq_id;
    w->s = &prefix;
    w->q = q;
    w->pages = pages;
    w->n_pages = pages + (size_t)H * mp;
    w->max_pages = mp;
    w->out = out;
    w->dense = 1;
    for (int32_t h = 0; h < H; h++) {
        for (int32_t j = 0; j < mp; j++) pages[(size_t)h * mp + j] = j;
        w->n_pages[h] = mp;
    }
    return locks_attend_run(c, layer, w, 1, n_q_heads, locks_step_scale(c, 0.0f));
}

static locks_status attend_prefix_n(locks_cache *c, int32_t layer, int32_t seq_id, int32_t len, int32_t n,
                                    const float *q, int32_t n_q_heads, float *out) {
    const locks_seq *s;
    locks_status st = prefix_check(c, layer, seq_id, len, n, q, n_q_heads, out, &s);
    if (st != LOCKS_OK) return st;
    if (n == 1) return attend_prefix(c, layer, seq_id, len, q, n_q_heads, out); /* nothing to share */
    return locks_attend_verify_run(c, layer, s, len, n, q, n_q_heads, locks_step_scale(c, 0.0f), out);
}

locks_status locks_attend_prefix(locks_cache *c, int32_t layer, int32_t seq_id, int32_t len,
                                 const float *q, int32_t n_q_heads, float *out) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_attend_prefix: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, attend_prefix(c, layer, seq_id, len, q, n_q_heads, out), "locks_attend_prefix", mark);
}

locks_status locks_attend_prefix_n(locks_cache *c, int32_t layer, int32_t seq_id, int32_t len, int32_t n,
                                   const float *q, int32_t n_q_heads, float *out) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_attend_prefix_n: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, attend_prefix_n(c, layer, seq_id, len, n, q, n_q_heads, out), "locks_attend_prefix_n", mark);
}
