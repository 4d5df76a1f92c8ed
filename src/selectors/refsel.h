/*
 * refsel.h — the reference selectors' page metadata and per-head page scores
 * (Quest, ShadowKV-style, RocketKV-style), as plain array functions.
 *
 * Each score function writes, for the G query heads of one KV group and n pages, a
 * log-domain score s[g * ld + j] (j < n): the group's mass of page j is then formed by the selector
 * switch (softmax over the scored pages per head, then the group aggregation rule named
 * beside each function: mean or max), so the budget accounting and forced pages are the
 * shared ones of locks_select. Page metadata is stored structure-of-arrays per
 * (layer, KV head): page p's record is at base + p * record_size, p the *physical*
 * page id, so a scan streams one contiguous array; pages[] lists the physical ids of
 * the pages to score in logical order.
 *
 * Bytes read per step (bytes_meta), per (sequence, KV head, scored page), counted like
 * locks counts its summaries (what the score pass must read from memory):
 *   quest          4 d        fp16 min[d] + max[d]
 *   rocket         4 n_ch     fp16 min and max of the n_ch selected channels only
 *   shadow (basis) 4 r        fp32 projected centroid [r]; plus 4 r d per (layer, KV
 *                             head) per step for the shared basis
 *   shadow (lm)    2 d        fp16 landmark (page mean) [d]
 */
#ifndef LOCKS_REFSEL_H
#define LOCKS_REFSEL_H

#include <stddef.h>
#include <stdint.h>

#include "locks.h"

/* ---- metadata built when a page fills (the page-fill hook) -------------------------- */

/* Per-channel min and max of one page's 16 keys k[16][d] (fp32 values of the stored fp16
 * keys) -> kmin[d], kmax[d] as fp16 bits (exact: they are fp16 values). Quest, rocket. */
void locks_minmax_build(int32_t d, const float *k, uint16_t *kmin, uint16_t *kmax);

/* ---- Quest ----------------------------------------------------------------------------
 * s[g][j] = scale * sum_c max(q_c M_c, q_c m_c): an upper bound of the page's largest
 * logit. Group rule: mean of per-head softmax (Quest is MHA-only). */
void locks_quest_score(int32_t d, int32_t G, int32_t n, const int32_t *pages,
                       const uint16_t *kmin, const uint16_t *kmax, const float *q, float scale,
                       float *s, int32_t ld);

/* ---- RocketKV-style (decode stage, hybrid sparse attention) ---------------------------
 * I = the n_ch channels with the largest sum_g |q_gc| (ties: lower channel). Per head g:
 * approximate logit a_gj = sum_{c in I} q_gc * (q_gc > 0 ? M_jc : m_jc), temperature
 * T_g = sqrt(sum_{c in I} |q_gc| / sum_c |q_gc|), s[g][j] = scale * a_gj / T_g
 * (= a / sqrt(d * ||q_I||_1 / ||q||_1) at scale = 1/sqrt(d)). Group rule: mean.
 * chan (may be NULL) receives I[n_ch] in ascending order. 1 <= n_ch <= d. */
void locks_rocket_score(int32_t d, int32_t G, int32_t n, const int32_t *pages,
                        const uint16_t *kmin, const uint16_t *kmax, const float *q, float scale,
                        int32_t n_ch, float *s, int32_t ld, int32_t *chan);

/* ---- ShadowKV-style shared basis ------------------------------------------------------
 * fit: the top-r eigenvectors of gram (d x d, symmetric PSD, e.g. K^T K of the prefill
 * keys: their top-r right singular vectors) -> basis[r][d] (orthonormal rows), by
 * subspace iteration on a 16-dimensional block with Rayleigh-Ritz (locks_eig_sym).
 * 1 <= r <= LOCKS_MAX_RANK, r < d. evals (may be NULL) receives the r Ritz values. */
locks_status locks_shadow_fit(int32_t d, int32_t r, const double *gram, float *basis,
                              double *evals);

/* proj[r] = basis[r][d] x[d]. */
void locks_shadow_project(int32_t d, int32_t r, const float *basis, const float *x, float *proj);

/* s[g][j] = scale * (basis q_g) . proj_j: the page centroid's logit in the shared
 * rank-r subspace (proj records are r floats per physical page). Group rule: mean. */
void locks_shadow_score(int32_t d, int32_t r, int32_t G, int32_t n, const int32_t *pages,
                        const float *proj, const float *basis, const float *q, float scale,
                        float *s, int32_t ld);

/* ShadowKV's own landmark rule: s[g][j] = scale * q_g . L_j, L_j the page mean stored as
 * fp16 (d per physical page). Group rule: max. */
void locks_landmark_score(int32_t d, int32_t G, int32_t n, const int32_t *pages,
                          const uint16_t *lm, const float *q, float scale, float *s,
                          int32_t ld);

/* ---- cache glue (the selector.h hooks these files implement) ------------------------ */

#include "cache.h"

/* quest.c's metadata, shared by rocket: the cache's LOCKS_META_MINMAX block. */
typedef struct {
    uint16_t *kmin, *kmax; /* [L][Hkv][n_pages][d] fp16 */
} locks_minmax_meta;

/* The arrays of c's min/max block (c must hold it: locks_selector_served). */
locks_minmax_meta locks_sel_minmax(const locks_cache *c);

/* Element offset of (layer, KV head)'s [n_pages][d] min/max arrays. */
size_t locks_minmax_offset(const locks_cache *c, int32_t layer, int32_t kv_head);

#endif
