/*
 * selector.c — dispatch from locks_selector to the selector functions (see selector.h).
 * One switch per question; a selector that has no answer for one falls to the default.
 */
#include "selector.h"

#include "summary.h"

locks_group_rule locks_selector_group_rule(locks_selector s) {
    switch (s) {
    case LOCKS_SEL_FULL: return LOCKS_GROUP_NONE;
    case LOCKS_SEL_SHADOW_LM: return LOCKS_GROUP_MAX;
    default: return LOCKS_GROUP_MEAN;
    }
}

size_t locks_selector_meta_bytes(locks_selector s, const locks_cache *c) {
    switch (s) {
    case LOCKS_SEL_ORACLE: return (size_t)LOCKS_PAGE * (size_t)c->d * 2; /* every key, fp16 */
    case LOCKS_SEL_LOCKS: return locks_summary_bytes(c->d, c->r, c->p.summary_prec);
    case LOCKS_SEL_QUEST: return 4 * (size_t)c->d;       /* fp16 min + max [d] */
    case LOCKS_SEL_ROCKET: return 4 * (size_t)c->r;      /* fp16 min + max of r channels */
    case LOCKS_SEL_SHADOW: return 4 * (size_t)c->r;      /* fp32 projected centroid [r] */
    case LOCKS_SEL_SHADOW_LM: return 2 * (size_t)c->d;   /* fp16 landmark [d] */
    default: return 0;
    }
}

void locks_selector_score(locks_selector s, const locks_sel_ctx *x, int32_t j0, int32_t j1,
                          float *scores, int32_t ld) {
    switch (s) {
    case LOCKS_SEL_ORACLE: locks_sel_oracle_score(x, j0, j1, scores, ld); break;
    case LOCKS_SEL_LOCKS: locks_sel_locks_score(x, j0, j1, scores, ld); break;
    case LOCKS_SEL_QUEST: locks_sel_quest_score(x, j0, j1, scores, ld); break;
    case LOCKS_SEL_ROCKET: locks_sel_rocket_score(x, j0, j1, scores, ld); break;
    case LOCKS_SEL_SHADOW: locks_sel_shadow_score(x, j0, j1, scores, ld); break;
    case LOCKS_SEL_SHADOW_LM: locks_sel_shadow_lm_score(x, j0, j1, scores, ld); break;
    default: break; /* validated before the step: unreachable */
    }
}

int locks_selector_available(locks_selector s) {
    switch (s) {
    case LOCKS_SEL_FULL:
    case LOCKS_SEL_ORACLE:
    case LOCKS_SEL_LOCKS:
    case LOCKS_SEL_QUEST:
    case LOCKS_SEL_ROCKET:
    case LOCKS_SEL_SHADOW:
    case LOCKS_SEL_SHADOW_LM: return 1;
    default: return 0;
    }
}

locks_status locks_selector_prepare(locks_selector s, locks_cache *c, int32_t layer,
                                    int32_t seq_id) {
    switch (s) {
    case LOCKS_SEL_SHADOW: return locks_sel_shadow_prepare(c, layer, seq_id);
    default: return LOCKS_OK;
    }
}

/* Metadata of every selector is kept for every cache (any selector may be asked for at
 * any step): quest/rocket min/max (1/8 of the K bytes), shadow landmarks (1/16) and
 * projections. */
locks_status locks_selector_cache_init(locks_cache *c) {
    locks_status st = locks_sel_minmax_init(c);
    if (st == LOCKS_OK) st = locks_sel_rocket_init(c);
    if (st == LOCKS_OK) st = locks_sel_shadow_init(c);
    if (st != LOCKS_OK) locks_selector_cache_free(c);
    return st;
}

void locks_selector_cache_free(locks_cache *c) {
    locks_sel_minmax_free(c);
    locks_sel_rocket_free(c);
    locks_sel_shadow_free(c);
}

void locks_selector_seq_truncated(locks_cache *c, int32_t seq_id, int32_t len) {
    locks_sel_shadow_seq_truncated(c, seq_id, len);
}

void locks_selector_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                const float *k) {
    locks_sel_minmax_page_filled(c, layer, page, kv_head, k);
    locks_sel_rocket_page_filled(c, layer, page, kv_head);
    locks_sel_shadow_page_filled(c, layer, page, kv_head, k);
}
