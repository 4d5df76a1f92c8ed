/*
 * metrics.h — the quality metrics of DESIGN.md §3, defined once, in float64.
 *
 * Every selector is judged against the *true* attention of one decode step: the
 * float64 softmax of each query head over every key of the sequence. From it:
 *
 *   p_hj      true attention probability of logical page j for query head h
 *             (sum over the page's tokens; the partial page included; sum_j p_hj = 1).
 *   M(S)      mass coverage of a selection S of one KV head: sum_{j in S} mean_h p_hj,
 *             the mean over the G query heads of that KV head's group. Reported as the
 *             mean over KV heads.
 *   oracle    the float64 oracle selection: the same forced pages as the library
 *             (partial page, n_sink leading and n_recent trailing full pages, see
 *             locks.h), then the top non-forced pages by mean_h p_hj (ties: lower
 *             index) while the token budget allows. With the forced set fixed and every
 *             full page costing 16 tokens this maximises M(S), so M(S)/M(S_oracle) <= 1.
 *   recall    |S ∩ S_oracle| / |S_oracle| over the non-forced pages, per KV head, then
 *             the mean over KV heads (1 when the oracle has no non-forced page).
 *   output    o_S = exact softmax attention restricted to the tokens of S (float64);
 *             rel_err = ||o_S - o_full|| / ||o_full|| and cosine(o_S, o_full) per query
 *             head; mean (and worst) over query heads.
 *   carrier   over (step, layer, KV head, needle page) where the oracle selects a page
 *             that holds the needle, the share where the method selects it too.
 *
 * The keys and values come from a locks_kv_src: fp32 arrays in the layout
 * locks_cache_write takes, or a sequence of a CPU locks_cache (read back as the fp16
 * the library attends, so the reference sees exactly the library's inputs).
 *
 * Internal to the library and its tools/tests; not installed.
 */
#ifndef LOCKS_METRICS_H
#define LOCKS_METRICS_H

#include "locks.h"

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------ */
/* Source of one sequence's keys and values (one layer)                             */
/* ------------------------------------------------------------------------------ */

typedef struct {
    int32_t n_tokens;   /* sequence length */
    int32_t n_kv_heads; /* Hkv */
    int32_t head_dim;   /* d */
    const float *k;     /* arrays: [n_tokens][Hkv][d] fp32, or NULL when cache is set */
    const float *v;     /* [n_tokens][Hkv][d] fp32 */
    const locks_cache *cache; /* or: a CPU cache, with seq_id and layer */
    int32_t seq_id;
    int32_t layer;
} locks_kv_src;

/* A source over fp32 arrays (not copied: they must outlive the source). */
locks_kv_src locks_kv_src_arrays(int32_t n_tokens, int32_t n_kv_heads, int32_t head_dim,
                                 const float *k, const float *v);

/* A source over one sequence and layer of a CPU cache. LOCKS_ERR_NO_SEQ for an unknown
 * sequence, LOCKS_ERR_UNSUPPORTED when the cache's pages are not host-readable. */
locks_status locks_kv_src_cache(const locks_cache *c, int32_t seq_id, int32_t layer,
                                locks_kv_src *out);

/* ------------------------------------------------------------------------------ */
/* Float64 reference of one decode step of one sequence                             */
/* ------------------------------------------------------------------------------ */

typedef struct {
    int32_t n_q_heads, n_kv_heads, head_dim; /* Hq, Hkv, d */
    int32_t n_tokens;                        /* context length */
    int32_t n_pages;                         /* logical pages, partial one included */
    int32_t n_threads;                       /* used again by locks_metrics_eval */
    double scale;                            /* softmax scale used */
    double *q;        /* [Hq][d] the queries, as doubles */
    double *page_lse; /* [Hq][n_pages] log-sum-exp of the page's scaled logits */
    double *logit;    /* [Hq][n_tokens] scaled logits */
    double *lse;      /* [Hq] log-sum-exp over the whole sequence */
    double *p;        /* [Hq][n_pages] true attention probability per page */
    double *o_full;   /* [Hq][d] dense attention output */
    locks_kv_src src; /* kept to compute restricted outputs */
} locks_attn_ref;

/* Computes the reference for queries q [Hq][d] (Hq a multiple of Hkv; head h belongs
 * to KV head h / G). scale <= 0 means 1/sqrt(d). n_threads >= 1 splits the work over
 * KV heads. On error *ref is left empty (safe to free). */
locks_status locks_attn_ref_compute(const locks_kv_src *src, const float *q, int32_t n_q_heads,
                                    float scale, int32_t n_threads, locks_attn_ref *ref);
void locks_attn_ref_free(locks_attn_ref *ref);

/* Exact float64 attention of each query head of KV head kv over the given logical
 * pages only (pages need not be sorted; no duplicates): o[G][d]. */
locks_status locks_attn_ref_restricted(const locks_attn_ref *ref, int32_t kv_head,
                                       const int32_t *pages, int32_t n_pages, double *o);

/* ------------------------------------------------------------------------------ */
/* Selections and their metrics                                                     */
/* ------------------------------------------------------------------------------ */

/* Forced pages of a sequence as locks.h defines them, written to forced[n_pages]
 * (1 = forced) for the logical pages; returns the number of forced tokens. */
int32_t locks_metrics_forced(int32_t n_tokens, int32_t n_sink, int32_t n_recent, uint8_t *forced);

/* The float64 oracle selection (see the top of this file) in the locks_selection layout
 * for one sequence: pages[Hkv][max_pages] ascending, n_pages[Hkv]. LOCKS_ERR_BUDGET
 * when budget <= 0 or the forced tokens exceed it; max_pages >= ref->n_pages. */
locks_status locks_metrics_oracle_select(const locks_attn_ref *ref, int32_t budget,
                                         int32_t n_sink, int32_t n_recent, int32_t *pages,
                                         int32_t *n_pages, int32_t max_pages);

typedef struct {
    double mass_coverage;        /* M(S), mean over KV heads */
    double oracle_mass_coverage; /* M(S_oracle), mean over KV heads */
    double coverage_ratio;       /* mass_coverage / oracle_mass_coverage */
    double oracle_recall;        /* mean over KV heads, non-forced pages only */
    double output_rel_err;       /* mean over query heads of ||o_S - o_full|| / ||o_full|| */
    double output_rel_err_max;   /* worst query head */
    double cosine;               /* mean over query heads of cos(o_S, o_full) */
    double cosine_min;           /* worst query head */
    double kernel_rel_err;       /* max over heads of ||out - o_S|| / ||o_S|| (the library's
                                    arithmetic error), or -1 when out was not given */
    double tokens;               /* attended tokens per KV head, mean over KV heads */
} locks_sel_metrics;

/* Metrics of one sequence's selection pages[Hkv][max_pages] / n_pages[Hkv] (logical
 * page indices, e.g. one sequence's rows of a locks_selection). budget, n_sink and
 * n_recent define the oracle compared against. out (may be NULL): the library's output
 * for this sequence, [Hq][d] fp32, compared with the float64 o_S. */
locks_status locks_metrics_eval(const locks_attn_ref *ref, const int32_t *pages,
                                const int32_t *n_pages, int32_t max_pages, int32_t budget,
                                int32_t n_sink, int32_t n_recent, const float *out,
                                locks_sel_metrics *m);

/* Carrier recall accumulator (needle tasks). */
typedef struct {
    int64_t n_oracle; /* (KV head, needle page) pairs the oracle selected */
    int64_t n_hit;    /* ... that the method selected too */
} locks_carrier_count;

/* Adds one step of one layer: selections in the locks_selection layout of one sequence
 * (oracle and method, [Hkv][max_pages] with counts [Hkv]), needle_pages[n_needles] the
 * logical pages that hold the needle. */
void locks_metrics_carrier_add(locks_carrier_count *acc, int32_t n_kv_heads,
                               const int32_t *oracle_pages, const int32_t *oracle_n,
                               const int32_t *method_pages, const int32_t *method_n,
                               int32_t max_pages, const int32_t *needle_pages,
                               int32_t n_needles);
/* n_hit / n_oracle, or -1 when the oracle never selected a needle page. */
double locks_metrics_carrier_recall(const locks_carrier_count *acc);

#endif
