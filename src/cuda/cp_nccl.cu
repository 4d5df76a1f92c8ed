/*
 * cp_nccl.cu — the NCCL communicator of context parallelism (src/cp.h).
 *
 * One process per GPU; rank 0 makes an ncclUniqueId (locks_cp_nccl_unique_id) and hands
 * it to the others out of band (scripts/cp-bench.sh passes it through a file). The step
 * (src/cp.c) needs one collective, an all-gather of the same byte count from every rank;
 * it computes on the rank's CPU cache shard, so the collective is host-staged:
 *
 *     host send --H2D--> device send --ncclAllGather--> device recv [R][bytes] --D2H--> host
 *
 * on one non-blocking stream of the rank's device, synchronised before returning. The
 * device buffers grow to the largest gather seen (they are tiny: a few KiB to ~17 KiB
 * per rank at the Llama-3.1-8B shape, docs/CONTEXT_PARALLEL.md). A device-side step would
 * pass its device buffers to ncclAllGather directly and drop both copies.
 *
 * NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE is forced to 0 before the first
 * communicator is created (NCCL reads it at initialisation); nothing here creates
 * multicast objects.
 *
 * NCCL is loaded on demand: liblocks does not link it (nccl.h gives the types only).
 * The first call that needs it dlopens $LOCKS_NCCL_LIBRARY, else libnccl.so.2, with
 * RTLD_LOCAL, and takes the five functions used here from that handle. So a process that
 * never uses context parallelism never loads NCCL, and liblocks loaded before another
 * library with its own NCCL (torch) cannot bind that library's NCCL symbols to the
 * system's (issue 21: `undefined symbol: ncclCommResume`). No NCCL found:
 * LOCKS_ERR_UNSUPPORTED, with dlopen's reason in locks_last_error.
 */
#ifdef LOCKS_HAVE_NCCL

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp.h"
extern "C" {
#include "util.h"
}

static_assert(NCCL_UNIQUE_ID_BYTES == LOCKS_CP_NCCL_ID_BYTES, "ncclUniqueId size");

/* ---- NCCL, loaded on first use ---- */

struct nccl_api {
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    const char *(*get_error_string)(ncclResult_t);
};

static nccl_api nccl;
static int nccl_loaded;          /* 1: every entry found */
static char nccl_why[256];       /* why not, for locks_last_error */
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;

template <typename F> static bool nccl_sym(void *h, const char *name, F *fn) {
    *fn = (F)dlsym(h, name);
    if (*fn) return true;
    snprintf(nccl_why, sizeof nccl_why, "NCCL has no %s", name);
    return false;
}

static void nccl_load(void) {
    const char *env = getenv("LOCKS_NCCL_LIBRARY");
    const char *path = env && env[0] ? env : "libnccl.so.2";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(nccl_why, sizeof nccl_why, "cannot load NCCL (%s): %s", path, e ? e : "?");
        return;
    }
    if (nccl_sym(h, "ncclGetUniqueId", &nccl.get_unique_id) && nccl_sym(h, "ncclCommInitRank", &nccl.comm_init_rank) &&
        nccl_sym(h, "ncclCommDestroy", &nccl.comm_destroy) && nccl_sym(h, "ncclAllGather", &nccl.all_gather) &&
        nccl_sym(h, "ncclGetErrorString", &nccl.get_error_string))
        nccl_loaded = 1;
    else
        dlclose(h);
}

/* LOCKS_OK once NCCL is loaded; else LOCKS_ERR_UNSUPPORTED with the reason. */
static locks_status nccl_get(void) {
    pthread_once(&nccl_once, nccl_load);
    if (nccl_loaded) return LOCKS_OK;
    locks_log(LOCKS_LOG_ERROR, "cp: %s", nccl_why);
    return locks_fail(LOCKS_ERR_UNSUPPORTED, "%s (set LOCKS_NCCL_LIBRARY to its path)", nccl_why);
}

struct cp_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    int device, n_ranks;
    unsigned char *d_buf; /* send [bytes] then recv [n_ranks][bytes] */
    size_t d_bytes;
};

static bool cuda_ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return true;
    locks_log(LOCKS_LOG_ERROR, "cp: %s: %s", what, cudaGetErrorString(e));
    return false;
}

static bool nccl_ok(ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return true;
    locks_log(LOCKS_LOG_ERROR, "cp: %s: %s", what, nccl.get_error_string(r));
    locks_fail(LOCKS_ERR_BACKEND, "%s: %s", what, nccl.get_error_string(r));
    return false;
}

extern "C" locks_status locks_cp_nccl_get_id(uint8_t *id) {
    locks_status st = nccl_get();
    if (st != LOCKS_OK) return st;
    ncclUniqueId u;
    if (!nccl_ok(nccl.get_unique_id(&u), "ncclGetUniqueId")) return LOCKS_ERR_BACKEND;
    memcpy(id, u.internal, NCCL_UNIQUE_ID_BYTES);
    return LOCKS_OK;
}

extern "C" void *locks_cp_nccl_init(const uint8_t *id, int32_t n_ranks, int32_t rank, int32_t device,
                                    locks_status *err) {
    locks_status st = nccl_get();
    ncclUniqueId u;
    cp_nccl *h = NULL;
    if (st != LOCKS_OK) goto fail;
    st = LOCKS_ERR_OOM;
    h = (cp_nccl *)locks_alloc(1, sizeof(cp_nccl));
    if (!h) goto fail;
    h->device = device;
    h->n_ranks = n_ranks;
    st = LOCKS_ERR_BACKEND;
    if (setenv("NCCL_NVLS_ENABLE", "0", 1) != 0) goto fail; /* before NCCL's first init */
    if (!cuda_ok(cudaSetDevice(device), "cudaSetDevice")) goto fail;
    if (!cuda_ok(cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking), "cudaStreamCreate")) goto fail;
    memcpy(u.internal, id, NCCL_UNIQUE_ID_BYTES);
    if (!nccl_ok(nccl.comm_init_rank(&h->comm, n_ranks, u, rank), "ncclCommInitRank")) {
        h->comm = NULL;
        goto fail;
    }
    if (err) *err = LOCKS_OK;
    return h;
fail:
    if (h) {
        if (h->stream) cudaStreamDestroy(h->stream);
        locks_free(h);
    }
    if (err) *err = st;
    return NULL;
}

extern "C" void locks_cp_nccl_free(void *p) {
    cp_nccl *h = (cp_nccl *)p;
    if (!h) return;
    cudaSetDevice(h->device);
    if (h->comm) nccl.comm_destroy(h->comm); /* a comm exists only if NCCL was loaded */
    if (h->d_buf) cudaFree(h->d_buf);
    h->d_buf = NULL;
    if (h->stream) cudaStreamDestroy(h->stream);
    locks_free(h);
}

extern "C" locks_status locks_cp_nccl_allgather(void *p, const void *send, void *recv, size_t bytes) {
    cp_nccl *h = (cp_nccl *)p;
    if (bytes == 0) return LOCKS_OK;
    if (!cuda_ok(cudaSetDevice(h->device), "cudaSetDevice")) return LOCKS_ERR_BACKEND;
    const size_t need = bytes * ((size_t)h->n_ranks + 1);
    if (need > h->d_bytes) {
        if (h->d_buf) cudaFree(h->d_buf);
        h->d_buf = NULL;
        h->d_bytes = 0;
        if (!cuda_ok(cudaMalloc((void **)&h->d_buf, need), "cudaMalloc")) return LOCKS_ERR_OOM;
        h->d_bytes = need;
    }
    unsigned char *d_send = h->d_buf, *d_recv = h->d_buf + bytes;
    if (!cuda_ok(cudaMemcpyAsync(d_send, send, bytes, cudaMemcpyHostToDevice, h->stream), "H2D")) return LOCKS_ERR_BACKEND;
    if (!nccl_ok(nccl.all_gather(d_send, d_recv, bytes, ncclUint8, h->comm, h->stream), "ncclAllGather"))
        return LOCKS_ERR_BACKEND;
    if (!cuda_ok(cudaMemcpyAsync(recv, d_recv, bytes * (size_t)h->n_ranks, cudaMemcpyDeviceToHost, h->stream), "D2H"))
        return LOCKS_ERR_BACKEND;
    if (!cuda_ok(cudaStreamSynchronize(h->stream), "cudaStreamSynchronize")) return LOCKS_ERR_BACKEND;
    return LOCKS_OK;
}

#endif /* LOCKS_HAVE_NCCL */
