/*
 * selector.c — dispatch from locks_selector to the selector functions (see selector.h).
 * One switch per question; a selector that has no answer for one falls to the default.
 */
#include "selector.h"

#include <stdint.h>

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

/* The slots selector s reads, as a bitmask of 1 << LOCKS_META_*. */
static uint32_t meta_needed(locks_selector s) {
    switch (s) {
    case LOCKS_SEL_QUEST: return 1u << LOCKS_META_MINMAX;
    case LOCKS_SEL_ROCKET: return (1u << LOCKS_META_MINMAX) | (1u << LOCKS_META_SNAPKV);
    case LOCKS_SEL_SHADOW:
    case LOCKS_SEL_SHADOW_LM: return 1u << LOCKS_META_SHADOW;
    default: return 0; /* full, oracle, locks: the pages and summaries every cache holds */
    }
}

int locks_selector_served(const locks_cache *c, locks_selector s) {
    const uint32_t need = meta_needed(s);
    for (int32_t slot = 0; slot < LOCKS_META_SLOTS; slot++)
        if ((need >> slot & 1u) && !locks_cache_meta(c, slot)) return 0;
    return 1;
}

locks_status locks_selector_cache_attach(locks_cache *c, uint32_t set) {
    uint32_t slots = 0;
    for (int32_t s = 0; s < LOCKS_SEL_COUNT; s++)
        if (set & LOCKS_SEL_BIT(s)) slots |= meta_needed((locks_selector)s);
    locks_status st = LOCKS_OK;
    if (slots >> LOCKS_META_MINMAX & 1u)
        st = locks_cache_meta_add(c, LOCKS_META_MINMAX, locks_sel_minmax_bytes(c),
                                  locks_sel_minmax_page_filled, NULL);
    if (st == LOCKS_OK && (slots >> LOCKS_META_SNAPKV & 1u)) {
        st = locks_cache_meta_add(c, LOCKS_META_SNAPKV, locks_sel_rocket_bytes(c),
                                  locks_sel_rocket_page_filled, NULL);
        if (st == LOCKS_OK) locks_sel_rocket_start(c);
    }
    if (st == LOCKS_OK && (slots >> LOCKS_META_SHADOW & 1u)) {
        st = locks_cache_meta_add(c, LOCKS_META_SHADOW, locks_sel_shadow_bytes(c),
                                  locks_sel_shadow_page_filled, locks_sel_shadow_seq_truncated);
        if (st == LOCKS_OK) locks_sel_shadow_start(c);
    }
    return st;
}
