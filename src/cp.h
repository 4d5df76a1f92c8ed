/*
 * cp.h — context parallelism (internal): the communicator behind locks_cp_comm and the
 * NCCL hooks that src/cuda/cp_nccl.cu implements.
 *
 * The step needs one collective only: an all-gather of a fixed number of bytes per rank
 * into [n_ranks][bytes], the same on every rank, rank order. The normaliser
 * (per-head (max, sum-exp) pairs), the candidates (64-bit ranking keys) and the partial
 * outputs ((o, lse) per query head) all travel that way; every rank then combines what
 * it received in rank order, so all ranks compute bit-identical results (docs/
 * CONTEXT_PARALLEL.md says why an all-gather and not an all-reduce).
 *
 * Backends are chosen by a switch on locks_cp_backend (no vtable):
 *  - LOCAL: the ranks are threads of one process sharing a locks_cp_group; an
 *    all-gather publishes each rank's send pointer, waits at a barrier, copies, and
 *    waits again (so no rank reuses its send buffer before every rank has read it).
 *  - NCCL: host-staged: host bytes -> device send buffer -> ncclAllGather on the rank's
 *    device -> host (the per-rank compute of this step runs on the CPU cache shard).
 */
#ifndef LOCKS_CP_H
#define LOCKS_CP_H

#include <stddef.h>
#include <stdint.h>

#include "locks.h"

#ifdef __cplusplus
extern "C" {
#endif

struct locks_cp_comm {
    locks_cp_backend backend;
    int32_t n_ranks, rank;
    locks_cp_group *group; /* LOCAL */
    void *nccl;            /* NCCL: the cp_nccl.cu state */
};

/* All-gather: recv[n_ranks][bytes] <- every rank's send[bytes]. Collective. */
locks_status locks_cp_allgather(locks_cp_comm *comm, const void *send, void *recv, size_t bytes);

#ifdef LOCKS_HAVE_NCCL
/* src/cuda/cp_nccl.cu */
locks_status locks_cp_nccl_get_id(uint8_t *id);
void *locks_cp_nccl_init(const uint8_t *id, int32_t n_ranks, int32_t rank, int32_t device,
                         locks_status *err);
void locks_cp_nccl_free(void *h);
locks_status locks_cp_nccl_allgather(void *h, const void *send, void *recv, size_t bytes);
#endif

#ifdef __cplusplus
}
#endif
#endif
