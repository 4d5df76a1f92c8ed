/*
 * common.cuh — what the CUDA op files share: the device cache object, the step
 * workspace, the error-check macros and a few inline device helpers (fp16/bf16 type
 * traits, int4/int8 -> half2 unpacking, warp reductions, the mma wrappers).
 *
 * MMA fragments (mma.sync m16n8k16 / m16n8k8, row.col, f32 accumulate), lane = 4 g + t:
 *   A (16 x 16): a0 = (row g, k 2t..2t+1), a1 = (row g+8, k 2t..), a2 = (row g, k 2t+8..),
 *                a3 = (row g+8, k 2t+8..)          [m16n8k8: a0, a1 only]
 *   B (16 x 8):  b0 = (k 2t..2t+1, col g), b1 = (k 2t+8..2t+9, col g)   [k8: b0 only]
 *   C (16 x 8):  c0, c1 = (row g, col 2t, 2t+1), c2, c3 = (row g+8, col 2t, 2t+1)
 * A dot product's k order is free, so the kernels permute head dimensions: in k-chunk c
 * (16 wide) lane t's k slots {2t, 2t+1, 2t+8, 2t+9} are the physical dimensions
 * t*d/4 + 4c + {0, 1, 2, 3}. Each lane then reads one contiguous d/4-element stretch
 * of a row (16-byte loads), for queries, keys and summary bases alike.
 */
#ifndef LOCKS_CUDA_COMMON_CUH
#define LOCKS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "locks_cuda.h"
#include "plan.h" /* locks_plan_make: host and device */
#include "util.h"
}

/* Logs a failed runtime call and returns LOCKS_ERR_BACKEND from the enclosing function. */
#define CU_TRY(call)                                                                       \
    do {                                                                                   \
        cudaError_t e_ = locks_fault_hit() ? cudaErrorUnknown : (call); /* util.h */       \
        if (e_ != cudaSuccess) {                                                           \
            locks_log(LOCKS_LOG_ERROR, "cuda: %s failed: %s (%s:%d)", #call,               \
                      cudaGetErrorString(e_), __FILE__, __LINE__);                         \
            return LOCKS_ERR_BACKEND;                                                      \
        }                                                                                  \
    } while (0)

/* After a launch: the launch error, if any. */
#define CU_LAUNCH_CHECK(name) CU_TRY(cudaGetLastError())

/* Waits for the stream after async copies into stack variables; if the wait fails it
 * waits once more, unchecked, so that no copy lands in the stack after the caller
 * returned (cache.cu). */
locks_status sync_stack_copies(cudaStream_t st);

#define LOCKS_TRY(expr)                                                                    \
    do {                                                                                   \
        locks_status s_ = (expr);                                                          \
        if (s_ != LOCKS_OK) return s_;                                                     \
    } while (0)

/* Step workspace: fixed-address buffers reused by every step (graphs point at them).
 * seg = (step sequence s, KV head h) -> s * Hkv + h. */
struct locks_cuda_ws {
    int32_t ready;         /* 1 once status, seq_slots and the kernels' attributes are set */
    int32_t max_segs;      /* n_seqs * Hkv capacity */
    int32_t max_group;     /* G capacity */
    int32_t max_pages;     /* pages per sequence capacity (= pool size) */
    int32_t score_blocks;  /* score blocks per segment (lse partials) */
    int32_t max_splits;    /* attention splits per segment */
    int32_t *seq_slots;    /* [max_seqs] step position -> sequence slot */
    int32_t *status;       /* [1] device flags (bit 0: non-finite query) */
    uint16_t *q_attn;      /* [max_seqs][Hq][d] kv dtype, pre-scaled by scale*log2(e) */
    __half *q_score;       /* [max_seqs][Hq][d] fp16, divided by q_amax */
    float *q_amax;         /* [max_seqs][Hq] */
    int8_t *q_i8;          /* [max_seqs][Hq][4][d] int8 query parts of the score kernel
                              (G <= 8): Q = round(32512 q / q_amax) = 256 hi + lo;
                              [0], [1]: hi, lo of the basis copy (odd dims: Q / 16);
                              [2], [3]: hi, lo of Q (for mu) */
    int32_t *q_isum;       /* [max_seqs][Hq] 8 x sum of the basis copy (odd dims x 16) */
    float *scores;         /* [segs][max_pages][G] page LSE per head (natural log) */
    float2 *lse_part;      /* [segs][score_blocks][G] (max, sum exp) partials */
    float *mass;           /* [segs][max_pages] group mass */
    uint32_t *hist;        /* [segs][LOCKS_CUDA_HIST_STRIDE]: first radix digit histogram
                              (2048 bins), then the taken / candidate counters */
    int32_t *taken;        /* [segs][max_pages] pages above the first digit's bin */
    int32_t *cand_idx;     /* [segs][max_pages] pages in that bin ... */
    uint32_t *cand_key;    /* [segs][max_pages] ... and their mass bits */
    int32_t *sel;          /* [segs][max_pages] selected logical pages, ascending */
    int32_t *sel_n;        /* [segs] */
    float *part_o;         /* [segs][max_splits][G][d] */
    float2 *part_ml;       /* [segs][max_splits][G] (max log2, sum) */
    int32_t hq;            /* n_q_heads the buffers were sized for */
    int32_t nseq;          /* n_seqs capacity */
    int pdl;               /* launch the step's kernels with programmatic dependent launch
                              (locks_cuda_lab.pdl = 0 turns it off, for A/B timing) */
    int score_i8_g16;      /* G 9..16 on the int8 score kernel in two column tiles
                              (locks_cuda_lab.score_i8_g16 = 0: the fp16 kernel) */
    int32_t att_min_pps;   /* fewest pages per attention split (locks_cuda_lab.att_min_pps) */
    int32_t topk_mb_min;   /* pages from which the multi-block top-k is used
                              (locks_cuda_lab.topk_mb_min) */
    int32_t mass_ppb;      /* pages per mass block (locks_cuda_lab.mass_ppb) */
};

struct locks_cuda_cache {
    locks_cache_params p;
    int32_t rank;
    cudaStream_t stream;     /* where the cache's work runs: own_stream or the caller's */
    cudaStream_t own_stream; /* created at init, destroyed at free */
    cudaEvent_t ev[8];
    char device_name[256];
    int n_sm;
    size_t kv_layer_elems;   /* n_pages * Hkv * 16 * d */
    uint16_t *k, *v;         /* [L][n_pages][Hkv][16][d]; NULL over caller-owned pages */
    const uint16_t **ext_k, **ext_v; /* caller-owned pages: [L] device pointers (host array) */
    size_t page_ld, head_ld, tok_ld; /* K/V block strides in elements (HND: Hkv*16*d, 16*d, d) */
    int8_t *mu;              /* [L][Hkv][n_pages][d] */
    __half *mu_scale;        /* [L][Hkv][n_pages] */
    uint8_t *basis;          /* [L][Hkv][n_pages][RS][d/2] */
    __half *basis_scale;     /* [L][Hkv][n_pages][RS] */
    int8_t *coef;            /* [L][Hkv][n_pages][16][RS] */
    __half *coef_scale;      /* [L][Hkv][n_pages][RS] */
    /* LOCKS_SUMMARY_F32 (the arrays above are then NULL): */
    float *mu_f;             /* [L][Hkv][n_pages][d] */
    float *basis_f;          /* [L][Hkv][n_pages][RS][d] */
    float *coef_f;           /* [L][Hkv][n_pages][16][RS] */
    int32_t rslots;          /* RS: rank slots per summary, 8 (rank <= 8) or 16; slots >= rank
                                hold zeros */
    int f32;                 /* summary_prec == LOCKS_SUMMARY_F32 */
    int32_t *seq_len;        /* [max_seqs] (device) */
    int32_t *block_table;    /* [max_seqs][n_pages] (device) */
    int32_t *h_seq_len;      /* host mirror of seq_len */
    int32_t *page_list;      /* [n_pages] scratch for summary builds */
    struct locks_cuda_ws ws;
    const void *slots_owner; /* graph whose batch ws.seq_slots holds, or NULL */
    void *flush_buf;         /* 256 MiB for L2 flushes (benchmarks) */
};

/* Where layer l's K (V) pages start, and their strides, for the kernels. */
struct kv_strides {
    size_t page, head, tok;
};
static inline kv_strides cache_strides(const locks_cuda_cache *c) { return {c->page_ld, c->head_ld, c->tok_ld}; }
static inline const uint16_t *cache_layer_k(const locks_cuda_cache *c, int32_t layer) {
    return c->ext_k ? c->ext_k[layer] : c->k + (size_t)layer * c->kv_layer_elems;
}
static inline const uint16_t *cache_layer_v(const locks_cuda_cache *c, int32_t layer) {
    return c->ext_v ? c->ext_v[layer] : c->v + (size_t)layer * c->kv_layer_elems;
}

#define LOCKS_CUDA_HIST_STRIDE 2056 /* 2048 bins + counters, per segment */

/* Summary arrays of one (layer, KV head), base page 0. */
struct summary_view {
    const int8_t *mu;
    const __half *mu_scale;
    const uint8_t *basis;
    const __half *basis_scale;
    const int8_t *coef;
    const __half *coef_scale;
};

static inline size_t summary_index(const locks_cuda_cache *c, int32_t layer, int32_t h) {
    return ((size_t)layer * (size_t)c->p.n_kv_heads + (size_t)h) * (size_t)c->p.n_pages;
}

/* Workspace sizing (step.cu): grows the buffers to hold n_seqs x n_q_heads; never
 * shrinks (captured graphs keep pointing at them). */
locks_status locks_cuda_ws_reserve(locks_cuda_cache *c, int32_t n_seqs, int32_t n_q_heads);
/* attend.cu's rows mode (see attend_kernel), for the GPU model engine's verify
 * (src/model/cuda/verify.cu): q_attn [rows][hq][d] as qprep writes them, row r at length
 * len0 + r; d_slot: the block-table row; d_ident: 0 .. rows - 1; d_lens: len0 + r;
 * part_*: rows x hkv x locks_cuda_attend_rows_splits(c, n_seqs, max_list) x G partials. */
int32_t locks_cuda_attend_rows_splits(const locks_cuda_cache *c, int32_t n_seqs, int32_t max_list);
locks_status locks_cuda_attend_rows_launch(locks_cuda_cache *c, int32_t layer, int32_t n_seqs, int32_t max_list,
                                           int32_t hq, const uint16_t *q_attn, int32_t rows, int32_t len0,
                                           const int32_t *d_slot, const int32_t *d_ident, const int32_t *d_lens,
                                           float *part_o, float2 *part_ml, float *out, cudaStream_t st);
/* The batch the step kernels read (ws.seq_slots, step position -> slot), for callers
 * outside the backend (the GPU model engine): uploads ids[0 .. n) after the stream drains,
 * unless owner is not NULL, its list is the one held already and changed is 0 (an owner
 * that changed its list passes 1); owner (an engine or a graph; NULL for a one-off batch)
 * is remembered. Widest selection a workspace row holds. */
locks_status locks_cuda_use_slots(locks_cuda_cache *c, const int32_t *ids, int32_t n, const void *owner, int changed);
int32_t locks_cuda_ws_max_pages(const locks_cuda_cache *c);

/* Launch wrappers shared by the step and the piece-wise entries (each defined in the
 * op's own file). seg count = n_seqs * Hkv; seq_slots maps step position -> slot. */
/* qprep: query (s, head) at d_q + s * seq_stride + head * d (seq_stride = hq * d when the
 * queries are contiguous; the GPU engine passes its [q | k | v] rows). */
locks_status locks_cuda_qprep_launch(locks_cuda_cache *c, const float *d_q, int32_t seq_stride,
                                     int32_t n_seqs, int32_t hq, float scale, cudaStream_t st);
/* The step after qprep for the batch whose slots are uploaded (step.cu), one path for
 * locks_cuda_decode_step, the step graph and the GPU engine: LOCKS (score -> mass -> top-k
 * -> attend + merge) or, for p->selector == LOCKS_SEL_FULL, dense attention over every
 * page (dense_sel: first write the selection "every page" into ws.sel for read-back).
 * timed: events ev[1..4] around the phases (not inside a capture). */
locks_status locks_cuda_step_enqueue(locks_cuda_cache *c, int32_t layer, int32_t n_seqs, int32_t hq,
                                     const locks_step_params *p, float scale, int32_t max_pages,
                                     int32_t max_list, float *d_out, int dense_sel, int timed);
locks_status locks_cuda_score_launch(locks_cuda_cache *c, int32_t layer, int32_t n_seqs,
                                     int32_t hq, float scale, int32_t nblk, cudaStream_t st);
locks_status locks_cuda_mass_launch(locks_cuda_cache *c, int32_t n_seqs, int32_t hq,
                                    const locks_step_params *p, int32_t nblk, int32_t max_pages,
                                    int with_hist, cudaStream_t st);
locks_status locks_cuda_topk_launch(locks_cuda_cache *c, int32_t n_seqs,
                                    const locks_step_params *p, const float *mass,
                                    int32_t mass_stride, int32_t *out, int32_t *out_n,
                                    int32_t out_stride, int use_hist, cudaStream_t st);
locks_status locks_cuda_attend_launch(locks_cuda_cache *c, int32_t layer, int32_t n_seqs,
                                      int32_t hq, const int32_t *pages, const int32_t *n_pages,
                                      int32_t list_stride, int dense, int32_t max_list,
                                      float *out, float *lse, cudaStream_t st);
locks_status locks_cuda_attend_prepare(locks_cuda_cache *c);
locks_status locks_cuda_score_prepare(locks_cuda_cache *c);
locks_status locks_cuda_topk_mb_prepare(locks_cuda_cache *c);
int locks_cuda_topk_mb_ok(const locks_cuda_cache *c, int32_t max_pages);
int locks_cuda_topk_mb_pays(const locks_cuda_cache *c, int32_t max_pages);
locks_status locks_cuda_topk_mb_launch(locks_cuda_cache *c, int32_t n_seqs, const locks_step_params *p,
                                       int32_t max_pages, cudaStream_t st);
/* The mass target's cut of the top-k selection (masscut.cu); no-ops when p->mass == 0.
 * check: LOCKS_ERR_UNSUPPORTED when a sequence of up to max_pages pages could have more
 * than LOCKS_CUDA_CUT_MAX candidates under p. */
#define LOCKS_CUDA_CUT_MAX 16384
locks_status locks_cuda_mass_cut_check(const locks_step_params *p, int32_t max_pages);
locks_status locks_cuda_mass_cut_prepare(locks_cuda_cache *c);
locks_status locks_cuda_mass_cut_launch(locks_cuda_cache *c, int32_t n_seqs, const locks_step_params *p,
                                        const float *mass, int32_t mass_stride, int32_t max_pages, int32_t *out,
                                        int32_t *out_n, int32_t out_stride, cudaStream_t st);
/* locks_cuda_summary_build on stream st instead of the cache's (the GPU engine builds a
 * filled page's summary on a forked branch of its decode graph when nothing in the
 * token reads it). */
locks_status locks_cuda_summary_build_on(locks_cuda_cache *c, int32_t layer, const int32_t *d_pages, int32_t n,
                                         cudaStream_t st);
/* Score blocks (normaliser partials) per segment for max_pages pages. */
int32_t locks_cuda_score_blocks(const locks_cuda_cache *c, int32_t n_seqs, int32_t hq, int32_t max_pages);

/* ---- device helpers ------------------------------------------------------------- */

template <typename T> struct kv_traits;
template <> struct kv_traits<__half> {
    typedef __half2 T2;
    static __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from_f(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ __half2 pack(float a, float b) { return __floats2half2_rn(a, b); }
};
template <> struct kv_traits<__nv_bfloat16> {
    typedef __nv_bfloat162 T2;
    static __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from_f(float x) { return __float2bfloat16_rn(x); }
    static __device__ __forceinline__ __nv_bfloat162 pack(float a, float b) { return __floats2bfloat162_rn(a, b); }
};

static __device__ __forceinline__ uint32_t h2_as_u32(__half2 h) { return *reinterpret_cast<uint32_t *>(&h); }
static __device__ __forceinline__ uint32_t b2_as_u32(__nv_bfloat162 h) { return *reinterpret_cast<uint32_t *>(&h); }
static __device__ __forceinline__ __half2 u32_as_h2(uint32_t u) { return *reinterpret_cast<__half2 *>(&u); }

/* (a & mask) ^ x in one LOP3 (written out: the compiler splits two immediates into two). */
static __device__ __forceinline__ uint32_t and_xor(uint32_t a, uint32_t mask, uint32_t x) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0x6a;\n" : "=r"(d) : "r"(a), "r"(mask), "r"(x));
    return d;
}

/* Two signed int4 nibbles (two's complement, [-7, 7]) at bit positions s and s+16 of w
 * -> half2 exactly: 0x6400 | (u ^ 8) is 1024 + q + 8. */
static __device__ __forceinline__ uint32_t int4x2_to_h2(uint32_t w, int s) {
    uint32_t x = and_xor(w >> s, 0x000F000Fu, 0x64086408u);
    __half2 h = __hsub2(u32_as_h2(x), __halves2half2(__ushort_as_half(0x6408), __ushort_as_half(0x6408)));
    return h2_as_u32(h);
}
/* All 8 signed nibbles of w as 4 half2, in the order of int4x2_to_h2 with shifts 0, 4,
 * 8, 12; high nibbles are masked in place (1024 + 16 (q + 8)) and fixed with one HFMA2,
 * so only one shift is needed: 9 instructions instead of 11. */
static __device__ __forceinline__ void int4x8_to_h2x4(uint32_t w, uint32_t *o) {
    const __half2 lo_off = __halves2half2(__ushort_as_half(0x6408), __ushort_as_half(0x6408)); /* 1032 */
    const __half2 sixteenth = __halves2half2(__ushort_as_half(0x2c00), __ushort_as_half(0x2c00)); /* 1/16 */
    const __half2 hi_off = __halves2half2(__ushort_as_half(0xd480), __ushort_as_half(0xd480));   /* -72 */
    const uint32_t w8 = w >> 8;
    o[0] = h2_as_u32(__hsub2(u32_as_h2(and_xor(w, 0x000F000Fu, 0x64086408u)), lo_off));
    o[1] = h2_as_u32(__hfma2(u32_as_h2(and_xor(w, 0x00F000F0u, 0x64806480u)), sixteenth, hi_off));
    o[2] = h2_as_u32(__hsub2(u32_as_h2(and_xor(w8, 0x000F000Fu, 0x64086408u)), lo_off));
    o[3] = h2_as_u32(__hfma2(u32_as_h2(and_xor(w8, 0x00F000F0u, 0x64806480u)), sixteenth, hi_off));
}

/* 2^x with the bare MUFU instruction (flushes denormal results to zero; 2^-inf = 0). */
static __device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* log2(x) with the bare MUFU instruction (denormal inputs flush to zero). */
static __device__ __forceinline__ float fast_log2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Two int8 at byte positions s/8 and s/8+2 of w -> half2: 0x6400 | (u ^ 0x80) = 1024+q+128. */
static __device__ __forceinline__ uint32_t int8x2_to_h2(uint32_t w, int s) {
    uint32_t x = and_xor(w >> s, 0x00FF00FFu, 0x64806480u);
    __half2 h = __hsub2(u32_as_h2(x), __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480)));
    return h2_as_u32(h);
}

static __device__ __forceinline__ void mma16816_f16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ void mma16816_bf16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ void mma1688_f16(float *d, uint32_t a0, uint32_t a1, uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}
template <typename T> struct mma_op;
template <> struct mma_op<__half> {
    static __device__ __forceinline__ void run(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) { mma16816_f16(d, a, b0, b1); }
};
template <> struct mma_op<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) { mma16816_bf16(d, a, b0, b1); }
};

/* 8x8 b16 transpose across the warp: lane (g, t) gives row g cols 2t..2t+1, gets
 * row g of the transpose. */
static __device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

static __device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
static __device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

static __device__ __forceinline__ void cp_async16(void *smem, const void *g) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g));
}
static __device__ __forceinline__ void cp_async4(void *smem, const void *g) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(a), "l"(g));
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* ---- programmatic dependent launch (PDL) ---------------------------------------------
 * The step's kernels after the first (qprep) are launched with the programmatic
 * stream serialization attribute (launch_k below), so kernel N may start while kernel
 * N-1 is still running. The rules every such kernel keeps:
 *   - before pdl_wait() it reads only what no kernel of the step writes (sequence
 *     tables, block tables, summaries, K/V) or what kernel N-2 and earlier wrote;
 *   - it writes nothing before pdl_wait();
 *   - it calls pdl_trigger() (which lets kernel N+1 start) only after pdl_wait();
 *   - what kernel N-1 wrote is not read through a `const T *__restrict__` parameter: that
 *     promises the data is invariant while the kernel runs, and ptxas then issues such
 *     loads (LDG.CONSTANT) wherever it likes, also before the wait (seen on sm_90, nvcc
 *     13.0: attend_kernel's dense query loads ahead of griddepcontrol.wait).
 * pdl_wait() returns once kernel N-1 has completed with its writes visible; since N-1
 * triggered only after its own wait, kernel N-2 had completed before N started. Both
 * instructions are no-ops in a kernel launched without the attribute. */
static __device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
static __device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

/* Launches kern<<<grid, block, smem, st>>>(args...), with the PDL attribute if pdl. */
template <typename... KArgs, typename... Args>
static inline cudaError_t launch_k(int pdl, void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t st, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kern, ((KArgs)args)...);
}

/* Online log-sum-exp pair (m, s): value = m + log(s). */
static __device__ __forceinline__ float2 lse_combine(float2 a, float2 b) {
    float m = fmaxf(a.x, b.x);
    if (m == -INFINITY) return make_float2(-INFINITY, 0.f);
    return make_float2(m, a.y * __expf(a.x - m) + b.y * __expf(b.x - m));
}

#endif /* LOCKS_CUDA_COMMON_CUH */
