/*
 * synth.h — a seeded synthetic decode workload whose keys look like real ones.
 *
 * i.i.d. Gaussian keys make attention nearly uniform, so no page selector can do well
 * on them and none can be told apart (DESIGN.md §3). This generator builds keys with
 * the structure LOCKS relies on and real models show:
 *
 *  - page-local low rank: page j of KV head h has its own random orthonormal basis
 *    B_j (rank r_j drawn in [rank_min, rank_max]) and centre c_j; its keys are
 *        k_i = mu_h + c_j + sum_k a_ik B_jk + e_i,
 *    mu_h a mean direction shared by every key of the head, a_ik ~ N(0, var_k) with a
 *    geometric spectrum (ratio spectrum_decay), e_i small full-rank noise (energy
 *    noise_frac of the low-rank part). Each page is low rank; the whole key matrix is
 *    not (every page has a different subspace);
 *  - attention sinks: the first n_sink_tokens keys are mu_h + L_sink w_h + noise, w_h a
 *    per-head "sink" direction every query has a unit-logit component along;
 *  - needles: n_needles pages (the same logical pages for every head, spread over the
 *    middle of the context, never forced pages) in which needle_len consecutive tokens
 *    get + L_needle n_h, n_h a per-head "needle" direction every query aligns with
 *    (those tokens keep a quarter of their page's centre and low-rank part);
 *  - values: i.i.d. N(0, 1).
 *
 * Queries of decode step t: q_h = sqrt(d) (w_kv + n_kv) + g_h with g_h = sqrt(c) z +
 * sqrt(1 - c) e_h, z shared by the G heads of a group (c = group_corr), e_h per head,
 * both fresh N(0, I) each step: the heads of a group are correlated, steps differ.
 *
 * Scales are set in logit units (scale = 1/sqrt(d)): page centres spread the background
 * logits by page_logit_std, the in-page low-rank part by token_logit_std. L_sink and
 * L_needle are chosen from the context length so that, in expectation, the sinks hold
 * sink_share and the needles needle_share of each head's attention mass (the rest is
 * spread over the background with a log-normal tail): attention is peaked at every
 * context length, as in trained models.
 *
 * Every (head, page) block is generated from its own counter-based stream
 * (splitmix64 of seed, head, page), so any token range can be generated on its own,
 * in any order or chunking, with identical results on every platform.
 *
 * Internal to the library and its tools/tests; not installed.
 */
#ifndef LOCKS_SYNTH_H
#define LOCKS_SYNTH_H

#include "locks.h"

#include <stdint.h>

typedef struct {
    int32_t n_kv_heads;    /* Hkv */
    int32_t n_q_heads;     /* Hq, a multiple of Hkv */
    int32_t head_dim;      /* d */
    int32_t context;       /* tokens per sequence */
    uint64_t seed;         /* everything derives from it */
    int32_t rank_min;      /* page rank range (default 4..8) */
    int32_t rank_max;
    float spectrum_decay;  /* variance ratio of successive in-page components (0.7) */
    float page_logit_std;  /* logit spread of page centres (1.0) */
    float token_logit_std; /* logit spread within a page (1.0) */
    float noise_frac;      /* full-rank noise energy / low-rank energy (0.01) */
    float mean_norm;       /* |mu_h| / sqrt(d) (1.0) */
    int32_t n_sink_tokens; /* attention-sink tokens at the start (4) */
    float sink_share;      /* expected attention share of the sinks (0.3) */
    int32_t n_needles;     /* needle pages (4); fewer if the context is short */
    int32_t needle_len;    /* needle tokens per needle page, 1..16 (8) */
    float needle_share;    /* expected attention share of all needles (0.3) */
    float group_corr;      /* correlation of the query heads of one group (0.7) */
} locks_synth_params;

typedef struct locks_synth locks_synth;

/* Defaults above for the given shape; context and seed as given. */
locks_synth_params locks_synth_default_params(int32_t n_kv_heads, int32_t n_q_heads,
                                              int32_t head_dim, int32_t context, uint64_t seed);

/* NULL and *err (if err) = LOCKS_ERR_INVALID_ARG on bad parameters, LOCKS_ERR_OOM. */
locks_synth *locks_synth_init(locks_synth_params p, locks_status *err);
void locks_synth_free(locks_synth *s);
locks_synth_params locks_synth_get_params(const locks_synth *s);

/* Keys and values of tokens [pos, pos + n) (0 <= pos, pos + n <= context):
 * k, v: [n][Hkv][d] fp32, the layout locks_cache_write takes. */
locks_status locks_synth_kv(const locks_synth *s, int32_t pos, int32_t n, float *k, float *v);

/* Queries of decode step `step` (any step >= 0): q [Hq][d]. */
locks_status locks_synth_query(const locks_synth *s, int32_t step, float *q);

/* The logical pages holding a needle (ascending); *n gets their count. */
const int32_t *locks_synth_needles(const locks_synth *s, int32_t *n);

/* The logit offsets the generator chose: sink tokens and needle tokens above the
 * background (either pointer may be NULL). */
void locks_synth_logit_offsets(const locks_synth *s, double *sink, double *needle);

/* Fills one layer of a sequence with the whole context: appends context tokens first
 * if the sequence is empty (its length must otherwise already be the context), then
 * writes K/V in chunks, generating each chunk with n_threads threads. */
locks_status locks_synth_fill(const locks_synth *s, locks_cache *c, int32_t seq_id,
                              int32_t layer, int32_t n_threads);

#endif
