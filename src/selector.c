/*
 * selector.c — dispatch from locks_selector to the selector functions (see selector.h).
 * One switch per question; a selector that has no answer for one falls to the default.
 */
#include "selector.h"

#include "summary.h"

locks_group_rule locks_selector_group_rule(locks_selector s) {
    switch (s) {
    case LOCKS_SEL_FULL: return LOCKS_GROUP_NONE;
    case LOCKS_SEL_SHADOW: return LOCKS_GROUP_MAX;
    default: return LOCKS_GROUP_MEAN;
    }
}

size_t locks_selector_meta_bytes(locks_selector s, const locks_cache *c) {
    switch (s) {
    case LOCKS_SEL_ORACLE: return (size_t)LOCKS_PAGE * (size_t)c->d * 2; /* every key, fp16 */
    case LOCKS_SEL_LOCKS: return locks_summary_bytes(c->d, c->r, c->p.summary_prec);
    default: return 0;
    }
}

void locks_selector_score(locks_selector s, const locks_sel_ctx *x, int32_t j0, int32_t j1,
                          float *scores, int32_t ld) {
    switch (s) {
    case LOCKS_SEL_ORACLE: locks_sel_oracle_score(x, j0, j1, scores, ld); break;
    case LOCKS_SEL_LOCKS: locks_sel_locks_score(x, j0, j1, scores, ld); break;
    default: break; /* validated before the step: unreachable */
    }
}

int locks_selector_available(locks_selector s) {
    switch (s) {
    case LOCKS_SEL_FULL:
    case LOCKS_SEL_ORACLE:
    case LOCKS_SEL_LOCKS: return 1;
    default: return 0;
    }
}

locks_status locks_selector_prepare(locks_selector s, locks_cache *c, int32_t layer,
                                    int32_t seq_id) {
    (void)c;
    (void)layer;
    (void)seq_id;
    switch (s) {
    default: return LOCKS_OK;
    }
}

locks_status locks_selector_cache_init(locks_cache *c) {
    (void)c;
    return LOCKS_OK;
}

void locks_selector_cache_free(locks_cache *c) { (void)c; }

void locks_selector_page_filled(locks_cache *c, int32_t layer, int32_t page, int32_t kv_head,
                                const float *k) {
    (void)c;
    (void)layer;
    (void)page;
    (void)kv_head;
    (void)k;
}
