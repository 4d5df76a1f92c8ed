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
 * Per-page metadata: a selector that needs more than the LOCKS summaries keeps it in
 * one of the cache's metadata slots (cache.h's locks_meta_block; the slots are named
 * below). locks_selector_cache_attach, at cache init, asks the cache for the slots
 * that the selectors of the cache's set need, each sized by its selector file
 * (locks_sel_<x>_bytes; arrays are carved from the block by locks_meta_take), and
 * registers the slot's hooks: a page-fill hook, run once per (layer, physical page, KV
 * head) whenever a write fills (or rewrites a full) page, with the page's keys as
 * stored (fp16 rounded, converted to fp32), after the LOCKS summary of that page is
 * built (calls for different (layer, page, head) run concurrently on the pool threads;
 * each must write only that slot); and optionally a hook run when a sequence slot is
 * freed. The cache frees the blocks. A cache made without a selector keeps none of
 * its bytes; asking for it gives LOCKS_ERR_NO_META (locks_selector_served).
 *
 * One-time work that needs the whole sequence (ShadowKV's shared basis from the
 * prefill keys) goes in locks_selector_prepare, called single-threaded once per
 * (layer, sequence) before the parallel scoring of a step or locks_score call.
 *
 * To add a selector: write src/selectors/<name>.c with its score function (and its
 * metadata size and hooks if it keeps any), declare them below, add a case to each
 * switch in selector.c.
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

/* ---- metadata held by the cache (cache.h's slots) ---- */
enum {
    LOCKS_META_MINMAX = 0, /* quest.c: fp16 key min/max per page; Quest, RocketKV */
    LOCKS_META_SNAPKV,     /* rocket.c: SnapKV votes and evictions per page; RocketKV */
    LOCKS_META_SHADOW,     /* shadow.c: landmarks, projections, bases; both ShadowKV rules */
};
/* Adds to a new cache the metadata slots the selectors in `set` (LOCKS_SEL_BIT) need,
 * with their hooks (LOCKS_ERR_OOM; the cache frees what was added). */
locks_status locks_selector_cache_attach(locks_cache *c, uint32_t set);
/* 1 if c holds every slot selector s reads. */
int locks_selector_served(const locks_cache *c, locks_selector s);

/* ---- the selectors (src/selectors/<name>.c) ---- */
void locks_sel_oracle_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld);
void locks_sel_locks_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                           int32_t ld);
/* quest.c: fp16 key min/max per (layer, KV head, page), shared with rocket.c. */
size_t locks_sel_minmax_bytes(const locks_cache *c);
void locks_sel_minmax_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                  const float *k);
void locks_sel_quest_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                           int32_t ld);
void locks_sel_rocket_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld);
/* rocket.c: SnapKV votes and evictions per (layer, KV head, page). */
size_t locks_sel_rocket_bytes(const locks_cache *c);
void locks_sel_rocket_start(locks_cache *c); /* fills the new block's initial votes */
void locks_sel_rocket_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                  const float *k);
/* shadow.c: landmarks per page, shared basis per (sequence, layer, KV head). */
size_t locks_sel_shadow_bytes(const locks_cache *c);
void locks_sel_shadow_start(locks_cache *c); /* sets the new block's first generation */
void locks_sel_shadow_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                  const float *k);
locks_status locks_sel_shadow_prepare(locks_cache *c, int32_t layer, int32_t seq_id);
void locks_sel_shadow_seq_truncated(locks_cache *c, int32_t seq_id, int32_t len);
void locks_sel_shadow_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld);
void locks_sel_shadow_lm_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                               int32_t ld);

#endif
