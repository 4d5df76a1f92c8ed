/*
 * stream.cu — which CUDA stream a device cache issues its work on. By default its own
 * non-blocking stream (created at init); locks_cache_set_stream points it at the
 * caller's (e.g. torch.cuda.current_stream()), so the caller's kernels and the
 * cache's are ordered by the stream itself, with no host wait between them.
 */
#include "common.cuh"

extern "C" locks_status locks_cuda_set_stream(locks_cuda_cache *c, void *stream) {
    if (!c) return LOCKS_ERR_INVALID_ARG;
    cudaStream_t next = stream ? (cudaStream_t)stream : c->own_stream;
    if (next == c->stream) return LOCKS_OK;
    /* work already issued on the old stream comes first: an event, not a host wait */
    CU_TRY(cudaEventRecord(c->ev[7], c->stream));
    CU_TRY(cudaStreamWaitEvent(next, c->ev[7], 0));
    c->stream = next;
    return LOCKS_OK;
}
