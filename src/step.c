/*
 * step.c — locks_decode_step: validate everything first (so a failed step writes
 * nothing), then score, select and attend for the whole batch, each phase spread over
 * the pool, and account the bytes each phase reads:
 *   bytes_meta  = selector metadata per scored (full page, KV head); a sequence whose
 *                 budget covers it (or under `full`) is attended densely, unscored,
 *   bytes_kv    = K + V bytes of the attended tokens (every KV head),
 *   bytes_dense = K + V bytes of every token (every KV head).
 * Timing: score_ms = the selector's page scores; select_ms = group masses + top-k
 * (fused, one task per (sequence, KV head)); attend_ms = attention and its merge.
 */
#include <string.h>

#include "backend.h"
#include "decode.h"
#include "plan.h"
#include "selector.h"
#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE };

locks_step_params locks_step_default_params(void) {
    locks_step_params p;
    memset(&p, 0, sizeof p);
    p.selector = LOCKS_SEL_LOCKS;
    p.budget = 2048;
    p.n_sink = 1;
    p.n_recent = 1;
    p.scale = 0.0f;
    return p;
}

static locks_status decode_step(locks_cache *c, int32_t layer, const int32_t *seq_ids, int32_t n_seqs,
                                const float *q, int32_t n_q_heads, const locks_step_params *p, float *out,
                                locks_selection *sel, locks_step_stats *stats) {
    if (!seq_ids || !q || !p || !out)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "%s is NULL", !seq_ids ? "seq_ids" : !q ? "q" : !p ? "p" : "out");
    if (n_seqs < 1) return locks_fail(LOCKS_ERR_INVALID_ARG, "n_seqs %d (must be >= 1)", n_seqs);
    locks_status st0 = locks_check_layer(c, layer);
    if (st0 == LOCKS_OK) st0 = locks_check_heads(c, n_q_heads, 64); /* GQA groups of up to 64 heads */
    if (st0 == LOCKS_OK && !locks_selector_available(p->selector))
        st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "selector %d is not a locks_selector", (int)p->selector);
    if (st0 == LOCKS_OK) st0 = locks_check_scale(p->scale);
    if (st0 != LOCKS_OK) return st0;
    int32_t max_pages = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        const locks_seq *s;
        locks_status st = locks_check_seq(c, seq_ids[i], &s);
        if (st != LOCKS_OK) return st;
        if (s->len == 0)
            return locks_fail(LOCKS_ERR_INVALID_ARG, "sequence %d is empty (append and write a token first)",
                              seq_ids[i]);
        st = locks_select_check(s, p);
        if (st == LOCKS_OK) st = locks_cache_check_written(c, seq_ids[i], layer, s->len);
        if (st != LOCKS_OK) return st;
        if (s->n_pages > max_pages) max_pages = s->n_pages;
    }
    if (sel && (!sel->pages || !sel->n_pages || sel->max_pages < max_pages))
        return locks_fail(LOCKS_ERR_INVALID_ARG, "sel: NULL arrays or max_pages %d below the longest sequence's %d",
                          sel->max_pages, max_pages);
    if (c->ext) {
        locks_status st = locks_ext_step_check(c, layer, seq_ids, n_seqs, p->selector);
        if (st != LOCKS_OK) return st;
    }
    return c->be->decode_step(c, layer, seq_ids, n_seqs, q, n_q_heads, p, out, sel, stats);
}

/* The CPU backend's step (backend_cpu.c), after decode_step's checks. */
locks_status locks_cpu_decode_step(locks_cache *c, int32_t layer, const int32_t *seq_ids, int32_t n_seqs,
                                   const float *q, int32_t n_q_heads, const locks_step_params *p, float *out,
                                   locks_selection *sel, locks_step_stats *stats) {
    const int32_t H = c->hkv, d = c->d;
    int32_t max_pages = 0;
    size_t n_scores = 0, n_mass = 0;
    for (int32_t i = 0; i < n_seqs; i++) {
        const locks_seq *s = locks_cache_seq(c, seq_ids[i]);
        if (s->n_pages > max_pages) max_pages = s->n_pages;
        n_scores += (size_t)n_q_heads * (size_t)(s->len / P);
        n_mass += (size_t)H * (size_t)(s->len / P);
    }
    if (!locks_selector_served(c, p->selector))
        return locks_fail(LOCKS_ERR_NO_META, "selector %s: the cache keeps no metadata for it (params.selectors)",
                          locks_selector_name(p->selector));
    if (!locks_all_finite(q, (size_t)n_seqs * n_q_heads * d))
        return locks_fail(LOCKS_ERR_NONFINITE, "the query holds NaN or Inf");

    /* scratch 0: work items, scores, masses and the selection (copied to the caller's
     * sel only once attention succeeded: a failed step writes nothing) */
    const int32_t mp = max_pages;
    size_t n_sel = (size_t)n_seqs * H * ((size_t)mp + 1);
    size_t bytes = (size_t)n_seqs * sizeof(locks_seq_work) + (n_scores + n_mass) * sizeof(float) +
                   n_sel * sizeof(int32_t) + 64;
    uint8_t *buf = locks_cache_scratch(c, 0, bytes);
    if (!buf) return LOCKS_ERR_OOM;
    locks_seq_work *w = (locks_seq_work *)(void *)buf;
    float *fbuf = (float *)(void *)(buf + (size_t)n_seqs * sizeof(locks_seq_work));
    int32_t *ibuf = (int32_t *)(void *)(fbuf + n_scores + n_mass);
    float *scores = fbuf, *mass = fbuf + n_scores;
    for (int32_t i = 0; i < n_seqs; i++) {
        const locks_seq *s = locks_cache_seq(c, seq_ids[i]);
        const int32_t n_full = s->len / P;
        memset(&w[i], 0, sizeof w[i]);
        w[i].seq_id = seq_ids[i];
        w[i].s = s;
        w[i].q = q + (size_t)i * n_q_heads * d;
        w[i].scores = scores;
        w[i].mass = mass;
        scores += (size_t)n_q_heads * n_full;
        mass += (size_t)H * n_full;
        w[i].pages = ibuf + (size_t)i * H * mp;
        w[i].n_pages = ibuf + (size_t)n_seqs * H * mp + (size_t)i * H;
        w[i].max_pages = mp;
        w[i].out = out + (size_t)i * n_q_heads * d;
        w[i].dense = locks_step_dense(p, s->len);
    }
    const float scale = locks_step_scale(c, p->scale);
    double t0 = locks_now_ms();
    locks_status st = locks_score_run(c, layer, w, n_seqs, n_q_heads, p->selector, scale, 0);
    if (st != LOCKS_OK) return st;
    double t1 = locks_now_ms();
    st = locks_select_run(c, w, n_seqs, p, n_q_heads, 1); /* masses + top-k, one pass */
    if (st != LOCKS_OK) return st;
    double t2 = locks_now_ms();
    st = locks_attend_run(c, layer, w, n_seqs, n_q_heads, scale);
    if (st != LOCKS_OK) return st;
    double t3 = locks_now_ms();
    for (int32_t i = 0; sel && i < n_seqs; i++)
        for (int32_t h = 0; h < H; h++) {
            const int32_t n = w[i].n_pages[h];
            sel->n_pages[(size_t)i * H + h] = n;
            memcpy(sel->pages + ((size_t)i * H + h) * (size_t)sel->max_pages, w[i].pages + (size_t)h * mp,
                   sizeof(int32_t) * (size_t)n);
        }
    if (stats) {
        memset(stats, 0, sizeof *stats);
        const uint64_t meta = locks_selector_meta_bytes(p->selector, c);
        const uint64_t tok_bytes = 2u * 2u * (uint64_t)d; /* K + V, fp16 */
        for (int32_t i = 0; i < n_seqs; i++) {
            const locks_seq *s = w[i].s;
            if (!w[i].dense) stats->bytes_meta += meta * (uint64_t)(s->len / P) * (uint64_t)H;
            stats->bytes_dense += tok_bytes * (uint64_t)s->len * (uint64_t)H;
            for (int32_t h = 0; h < H; h++)
                for (int32_t k = 0; k < w[i].n_pages[h]; k++) {
                    int32_t lp = w[i].pages[(size_t)h * mp + k], nt = s->len - lp * P;
                    stats->bytes_kv += tok_bytes * (uint64_t)(nt < P ? nt : P);
                }
        }
        stats->score_ms = t1 - t0;
        stats->select_ms = t2 - t1;
        stats->attend_ms = t3 - t2;
    }
    return LOCKS_OK;
}

locks_status locks_decode_step(locks_cache *c, int32_t layer, const int32_t *seq_ids,
                               int32_t n_seqs, const float *q, int32_t n_q_heads,
                               const locks_step_params *p, float *out, locks_selection *sel,
                               locks_step_stats *stats) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_decode_step: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    locks_status st = decode_step(c, layer, seq_ids, n_seqs, q, n_q_heads, p, out, sel, stats);
    return locks_cache_leave(c, st, "locks_decode_step", mark);
}
