/*
 * decode.h — the phases of a decode step, shared by the one-sequence entry points
 * (locks_score / locks_select / locks_attend) and the batched locks_decode_step.
 *
 * A step works on an array of locks_seq_work, one per sequence of the batch; each
 * phase runs all sequences' (KV head, page range) tasks on the cache's thread pool.
 */
#ifndef LOCKS_DECODE_H
#define LOCKS_DECODE_H

#include <stdint.h>

#include "cache.h"
#include "locks.h"

typedef struct {
    int32_t seq_id;
    const locks_seq *s;
    const float *q;   /* [Hq][d] */
    float *scores;    /* [Hq][n_full] selector scores (score phase scratch) */
    float *mass;      /* [Hkv][n_full] group masses */
    int32_t *pages;   /* [Hkv][max_pages] selection, ascending logical pages */
    int32_t *n_pages; /* [Hkv] */
    int32_t max_pages;
    float *out;       /* [Hq][d] */
    float *lse;       /* [Hq] or NULL */
    int32_t dense;    /* 1: every page is attended (full selector or budget >= length):
                         the step neither scores nor ranks this sequence */
} locks_seq_work;

/* score.c: selector scores of every (sequence, KV head), then (with_mass) the group
 * masses; w[i].scores and w[i].mass must be set. */
locks_status locks_score_run(locks_cache *c, int32_t layer, locks_seq_work *w, int32_t n_seqs,
                             int32_t n_q_heads, locks_selector sel, float scale, int with_mass);
/* Group masses of (w, KV head h) from its scores (G query heads per KV head). */
void locks_mass_one(locks_seq_work *w, int32_t h, int32_t G, locks_selector sel);

/* select.c: 1 if the step attends every page of a sequence of len tokens (full selector,
 * or a budget that covers it and no mass target): nothing is scored or ranked. */
int locks_step_dense(const locks_step_params *p, int32_t len);
/* select.c: LOCKS_ERR_INVALID_ARG for a mass target outside {0} u (0, 1); LOCKS_ERR_BUDGET if the params' budget cannot hold this sequence's forced
 * pages (or is <= 0); LOCKS_OK otherwise. */
locks_status locks_select_check(const locks_seq *s, const locks_step_params *p);
/* The ranking key of a page: mass bits in the high half, the complement of the logical
 * index j in the low half, so keys are unique, larger mass wins and ties go to the lower
 * index. Every real page's key is > 2^63 (masses are >= 0), so 0 pads. */
uint64_t locks_rank_key(float mass, int32_t j);
/* Reorders key[0..n) so that key[0..k) are the k largest (in any order); 0 < k < n. */
void locks_top_k(uint64_t *key, int32_t n, int32_t k);
/* Selections of every sequence and KV head from their masses (checked budgets); with
 * with_mass, each task first computes its masses from the scores (one pass over the
 * pool instead of two). */
locks_status locks_select_run(locks_cache *c, locks_seq_work *w, int32_t n_seqs,
                              const locks_step_params *p, int32_t n_q_heads, int with_mass);

/* attend.c: logit[g][t] = scale * q_g . k_t for the first nt keys of one fp16 (page,
 * KV head) block and the G heads of q [G][d] (the oracle selector shares it). */
void locks_block_logits(const uint16_t *kb, int32_t nt, const float *q, int32_t G, int32_t d,
                        float scale, float (*logit)[LOCKS_PAGE]);
/* attend.c: exact attention over each sequence's selection (w[i].pages / n_pages). */
locks_status locks_attend_run(locks_cache *c, int32_t layer, locks_seq_work *w, int32_t n_seqs,
                              int32_t n_q_heads, float scale);

/* attend.c: dense decode attention of n consecutive queries q [n][n_q_heads][d] of
 * sequence s, query i over its first len0 + i tokens (len0 >= 1, len0 + n - 1 <= s->len),
 * into out [n][n_q_heads][d]: bit for bit locks_attend_run with every page for each
 * query alone (locks_attend_prefix), each K/V page read once for all its queries. */
locks_status locks_attend_verify_run(locks_cache *c, int32_t layer, const locks_seq *s, int32_t len0, int32_t n,
                                     const float *q, int32_t n_q_heads, float scale, float *out);

/* attend.c: sliding-window attention of R rows q [R][d] (R = tokens * G, token-major:
 * the G heads of one KV head) of the consecutive query positions first .. first + R / G
 * - 1 over fp16 K/V rows addressed by position (key p at k + (p % cap) * ld, v likewise;
 * positions first - window + 1 .. first + R / G - 1 must be there): the row of position p
 * attends keys max(0, p - window + 1) .. p, scale * q . k, in key blocks of 64 aligned to
 * absolute positions, only those with (block index % n_parts) == part. Updates each
 * row's online-softmax state m [R], l [R], acc [R][d] (start: -inf, 0, 0); the caller
 * merges the parts and divides by l. scratch: locks_window_tile_floats(R, d) floats. */
size_t locks_window_tile_floats(int32_t R, int32_t d);
void locks_window_tile(const uint16_t *k, const uint16_t *v, size_t ld, int32_t cap, int32_t d, const float *q,
                       int32_t R, int32_t G, int32_t first, int32_t window, int32_t part, int32_t n_parts,
                       float scale, float *scratch, float *m, float *l, float *acc);

/* The CPU backend's operations (backend.h, named in backend_cpu.c): each runs after the
 * checks of its public call (step.c: locks_decode_step, score.c: locks_score, select.c:
 * locks_select, attend.c: locks_attend), with the same arguments. */
locks_status locks_cpu_decode_step(locks_cache *c, int32_t layer, const int32_t *seq_ids, int32_t n_seqs,
                                   const float *q, int32_t n_q_heads, const locks_step_params *p, float *out,
                                   locks_selection *sel, locks_step_stats *stats);
locks_status locks_cpu_score(locks_cache *c, int32_t layer, int32_t seq_id, const float *q, int32_t n_q_heads,
                             const locks_step_params *p, float *mass);
locks_status locks_cpu_select(const locks_cache *c, int32_t seq_id, const float *mass, const locks_step_params *p,
                              int32_t *pages, int32_t *n_pages, int32_t max_pages);
locks_status locks_cpu_attend(locks_cache *c, int32_t layer, int32_t seq_id, const float *q, int32_t n_q_heads,
                              float scale, const int32_t *pages, const int32_t *n_pages, int32_t max_pages,
                              float *out, float *lse);

#endif
