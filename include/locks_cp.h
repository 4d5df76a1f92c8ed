/*
 * locks_cp.h — context parallelism: one sequence's pages sharded across ranks
 * (part of the public API; locks.h includes it).
 */
#ifndef LOCKS_API_CP_H
#define LOCKS_API_CP_H

#include "locks_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ */
/* Context parallelism: one sequence's pages sharded across ranks (src/cp.c)        */
/* ------------------------------------------------------------------------------ */
/* Each rank (one process per GPU with NCCL, or one thread per rank in one process with
 * LOCAL) holds a contiguous range of the sequence's logical pages in its own cache, as
 * an ordinary sequence of that cache: global pages [page0, page0 + n) are its local
 * pages 0 .. n - 1; only the rank holding the global tail may end in a partial page.
 * locks_cp_decode_step, called by every rank with the same query and params, gives
 * every rank the same result as locks_decode_step on one cache holding the whole
 * sequence: the same selection (exact ties go to the lower logical index as there; only
 * masses within ~1 float ulp of each other could rank differently, the normaliser being
 * summed in another order) and the same output to fp32 rounding.
 * docs/CONTEXT_PARALLEL.md has the algorithm, the exactness argument and the bytes. */

typedef enum {
    LOCKS_CP_LOCAL = 0, /* ranks are threads of this process (tests, CPU) */
    LOCKS_CP_NCCL,      /* one process per GPU, NCCL collectives (builds with NCCL only) */
} locks_cp_backend;

#define LOCKS_CP_NCCL_ID_BYTES 128 /* size of an ncclUniqueId */

typedef struct locks_cp_group locks_cp_group; /* LOCAL: what the in-process ranks share */
typedef struct locks_cp_comm locks_cp_comm;   /* one rank's end of the communicator */

/* LOCAL: a group of n_ranks in-process ranks (n_ranks >= 1). Free it after every rank
 * has freed its comm. Returns NULL and sets *err on failure. */
locks_cp_group *locks_cp_group_init(int32_t n_ranks, locks_status *err);
void locks_cp_group_free(locks_cp_group *g);

/* NCCL: writes a fresh unique id (LOCKS_CP_NCCL_ID_BYTES bytes) for rank 0 to share
 * with the others; LOCKS_ERR_UNSUPPORTED in a build without NCCL. */
locks_status locks_cp_nccl_unique_id(uint8_t *id);

typedef struct {
    locks_cp_backend backend;
    int32_t n_ranks;       /* >= 1 */
    int32_t rank;          /* 0 .. n_ranks - 1 */
    locks_cp_group *group; /* LOCAL */
    const uint8_t *nccl_id; /* NCCL: the same LOCKS_CP_NCCL_ID_BYTES bytes on every rank */
    int32_t device;        /* NCCL: this rank's CUDA device */
} locks_cp_comm_params;

/* Joins the communicator. NCCL: blocks until all n_ranks have joined (collective).
 * LOCAL: call from any thread; a rank's steps must then run on its own thread, all ranks
 * concurrently. Returns NULL and sets *err (LOCKS_ERR_UNSUPPORTED: no NCCL in this build;
 * LOCKS_ERR_BACKEND: NCCL/CUDA failed). */
locks_cp_comm *locks_cp_comm_init(locks_cp_comm_params p, locks_status *err);
void locks_cp_comm_free(locks_cp_comm *comm);

/* The default split: rank r of n_ranks holds the tokens [*tok0, *tok0 + *n_tok) of a
 * sequence of len tokens: contiguous, whole pages, pages balanced to within one (the
 * last rank holds the partial page, if any; a rank may hold nothing when there are
 * fewer pages than ranks). Tokens decoded later go to the tail rank. */
void locks_cp_partition(int32_t len, int32_t n_ranks, int32_t rank, int32_t *tok0, int32_t *n_tok);

/* This rank's shard of one sequence. */
typedef struct {
    locks_cache *cache;  /* CPU backend only (a CUDA cache: LOCKS_ERR_UNSUPPORTED); required
                            (its shape), even with no page here */
    int32_t seq_id;      /* the shard's sequence in cache; -1: no page on this rank */
    int32_t page0;       /* global logical index of its first page */
    int32_t global_len;  /* tokens of the whole sequence (the same on every rank) */
} locks_cp_shard;

/* What one rank's step did. bytes_sent: what this rank put into the collectives
 * (each all-gather delivers n_ranks times that to every rank). */
typedef struct {
    uint64_t bytes_meta, bytes_kv; /* as locks_step_stats, this rank's pages only */
    uint64_t bytes_sent;
    int32_t n_collectives;
    double score_ms, select_ms, attend_ms, comm_ms; /* comm_ms: inside collectives
                                                       (includes waiting for other ranks) */
} locks_cp_stats;

/* One decode step of one layer for one sharded sequence; collective: every rank calls it
 * with the same q [n_q_heads][d], params and global_len. Every rank gets the merged output
 * out [n_q_heads][d] and (sel != NULL) the global selection in logical page indices
 * (batch of 1: sel->pages[Hkv][max_pages], max_pages >= the sequence's pages). Selectors:
 * full, oracle, locks, quest (page-local scores); others LOCKS_ERR_UNSUPPORTED. The shards
 * must tile the sequence (checked collectively: a bad shard on any rank makes every rank
 * return LOCKS_ERR_INVALID_ARG); every rank returns the same status. Exceptions, which
 * return at once without communicating (the other ranks would wait): NULL comm, shard,
 * shard->cache or p, n_q_heads outside 1..4096, and no memory even for the header
 * round's few hundred bytes. */
locks_status locks_cp_decode_step(locks_cp_comm *comm, const locks_cp_shard *shard, int32_t layer,
                                  const float *q, int32_t n_q_heads, const locks_step_params *p,
                                  float *out, locks_selection *sel, locks_cp_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* LOCKS_API_CP_H */
