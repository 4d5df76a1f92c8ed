/*
 * selector.h — the page selectors behind one enum (internal).
 *
 * A selector ranks the *full* pages of a sequence for one KV head. It does so in two
 * parts, each chosen by a switch on locks_selector in selector.c (no vtables):
 *
 *  1. score: per query head g of the group (h = kv_head * G + g) and full logical
 *     page j, a log-domain score s[g][j] (LOCKS and the oracle: the page's log-sum-exp
 *     of scaled logits; Quest: its bound; ...). Called in parallel on disjoint page
 *     ranges [j0, j1) of the same (sequence, KV head) and on different KV heads, so it
 *     must only write s[g * ld + j] for j in its range and must not mutate shared state.
 *  2. group rule: how the G heads combine. The caller turns scores into per-head
 *     softmax-normalised masses m_hj = exp(s_hj - Z_h), Z_h = logsumexp_j s_hj over the
 *     full pages (the partial page is always attended and left out, as locks.h says),
 *     then takes the mean over the group (LOCKS_GROUP_MEAN: locks, oracle, quest,
 *     rocket) or the max (LOCKS_GROUP_MAX: ShadowKV's landmark rule). The result is
 *     what locks_score returns and locks_select ranks.
 *
 * Per-page metadata: locks_selector_page_filled is called once per (layer, physical
 * page, KV head) whenever a write fills (or rewrites a full) page, with the page's
 * keys as stored (fp16 rounded, converted to fp32), after the LOCKS summary of that
 * page is built. Calls for different (layer, page, head) run concurrently on the pool
 * threads; each must write only that slot. Selectors keep their per-cache state in
 * c->sel_meta[selector], allocated by locks_selector_cache_init (at cache init, sizes
 * from c->p) and released by locks_selector_cache_free. For example Quest would store
 * fp16 key min/max per (layer, head, page, channel) there.
 *
 * One-time work that needs the whole sequence (ShadowKV's shared basis from the
 * prefill keys) goes in locks_selector_prepare, called single-threaded once per
 * (layer, sequence) before the parallel scoring of a step or locks_score call.
 *
 * To add a selector: write src/selectors/<name>.c with its score function (and its
 * hooks if it keeps metadata), declare them below, add a case to each switch in
 * selector.c.
 */
#ifndef LOCKS_SELECTOR_H
#define LOCKS_SELECTOR_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "locks.h"

/* What one scoring call sees: one (layer, sequence, KV head). */
typedef struct {
    locks_cache *c;
    int32_t layer;
    int32_t seq_id;
    int32_t kv_head;
    int32_t group;        /* G = n_q_heads / Hkv */
    const int32_t *table; /* the sequence's block table: logical -> physical page */
    int32_t n_full;       /* full (scored) pages: logical 0 .. n_full - 1 */
    const float *q;       /* [G][d]: query heads kv_head * G + g */
    float scale;          /* softmax scale */
} locks_sel_ctx;

typedef enum {
    LOCKS_GROUP_MEAN = 0, /* mean over the group of exp(s_hj - Z_h) */
    LOCKS_GROUP_MAX,      /* max over the group of exp(s_hj - Z_h) */
    LOCKS_GROUP_NONE,     /* no scores: every page gets mass 1 (full) */
} locks_group_rule;

/* ---- dispatch (selector.c) ---- */
/* 1 if this build implements the selector (its score and hooks). */
int locks_selector_available(locks_selector s);
locks_group_rule locks_selector_group_rule(locks_selector s);
/* Metadata bytes the score reads per (full page, KV head): the stats' bytes_meta. */
size_t locks_selector_meta_bytes(locks_selector s, const locks_cache *c);
/* Scores pages [j0, j1): s[g * ld + j]. */
void locks_selector_score(locks_selector s, const locks_sel_ctx *x, int32_t j0, int32_t j1,
                          float *scores, int32_t ld);
locks_status locks_selector_prepare(locks_selector s, locks_cache *c, int32_t layer,
                                    int32_t seq_id);
locks_status locks_selector_cache_init(locks_cache *c);
void locks_selector_cache_free(locks_cache *c);
/* Sequence seq_id is about to shrink to len tokens (0: it is being removed): state a
 * selector keeps per sequence and derived from tokens past len is dropped. */
void locks_selector_seq_truncated(locks_cache *c, int32_t seq_id, int32_t len);
/* k: the page's keys of this KV head, [P][d] fp32 (as stored). */
void locks_selector_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                const float *k);

/* ---- the selectors (src/selectors/<name>.c) ---- */
void locks_sel_oracle_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld);
void locks_sel_locks_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                           int32_t ld);
/* quest.c: fp16 key min/max per (layer, KV head, page), shared with rocket.c. */
locks_status locks_sel_minmax_init(locks_cache *c);
void locks_sel_minmax_free(locks_cache *c);
void locks_sel_minmax_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                  const float *k);
void locks_sel_quest_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                           int32_t ld);
void locks_sel_rocket_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld);
/* rocket.c: SnapKV votes and evictions per (layer, KV head, page). */
locks_status locks_sel_rocket_init(locks_cache *c);
void locks_sel_rocket_free(locks_cache *c);
void locks_sel_rocket_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head);
/* shadow.c: landmarks per page, shared basis per (sequence, layer, KV head). */
locks_status locks_sel_shadow_init(locks_cache *c);
void locks_sel_shadow_free(locks_cache *c);
void locks_sel_shadow_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                  const float *k);
locks_status locks_sel_shadow_prepare(locks_cache *c, int32_t layer, int32_t seq_id);
void locks_sel_shadow_seq_truncated(locks_cache *c, int32_t seq_id, int32_t len);
void locks_sel_shadow_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld);
void locks_sel_shadow_lm_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                               int32_t ld);

#endif
