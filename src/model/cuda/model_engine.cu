/*
 * model_engine.cu — the Llama forward pass on the GPU: device weights, prefill chunks,
 * and the decode token as one CUDA graph (see model_cuda.h for the contract).
 *
 * One decode token, on the cache's stream, for the engine's n_seqs sequences:
 *   prep     pos[s] = seq_len[s] - 1, the page that token fills (or -1)
 *   embed    x = E[tok]
 *   layer l  xb = rms(x) ; qkv = Wqkv xb ;
 *            attention prep: rope(q, k) + K/V -> cache page slot (one kernel, attn_prep.cu),
 *            summary of a page that filled, qprep (reads q from the qkv rows) ;
 *            step (score, mass, top-k, attend, or dense attend; step.cu's one enqueue
 *            path) -> att ; x += Wo att ; xb = rms(x) ; gu = Wgu xb ;
 *            xb = silu(g) * u ; x += Wdown xb
 * The lab switch engine_fused = 0 (locks_cuda_lab, read at lg_ctx_init) restores the earlier preparation for A/B
 * timing: two RoPE launches, a 2D copy of q, the K/V append, qprep of the copy.
 * The small kernels (norms, the cast, SwiGLU, attention prep) are launched with
 * programmatic dependent launch, so each one's launch overlaps the end of the product
 * before it; embed and the decode prep are one kernel; with the full selector the
 * summary of a page that fills is built on a branch forked from the layer and joined at
 * the token's end (no kernel of a dense token reads summaries). engine_rest = 0
 * restores the earlier launches (A/B timing); the arithmetic is the same bit for bit.
 *   head     xb = rms(x) ; logits = Wout xb ; tok = sample(logits)
 * Nothing in it depends on the host after capture: lengths, block tables, positions and
 * the input token are read from device memory, and the sampled token is the next
 * input. Residual adds are the products' beta = 1.
 *
 * The layer variants (lg_shape.arch, llama.c's ARCHS): after the QKV product one kernel
 * adds the Q/K/V biases and RMS-norms each q and k head (qkv_fix); RoPE pairs (i, i +
 * n_rot/2) for NeoX; GeGLU for SwiGLU; the embeddings times sqrt(dim); with post-norms
 * Wo and Wdown write e->proj and x += rms(proj) w follows (no beta = 1 add). A
 * sliding-window layer (Gemma 3's local ones) skips the cache and the step: RoPE with
 * its own base, K/V into its ring, the window's attention (swa.cu: local_attend); the
 * cache holds the global layers only, engine layer l being cache layer e->cl[l].
 */
#include "model_ops.cuh"

#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cache.h"
}

#define CUBLAS_WS_BYTES ((size_t)32 << 20)
#define MAX_ENGINE_SEQS 32 /* LOCKS_CTX_MAX_SEQS */
/* Products of fewer rows run with GEMM_ROWS rows, and a decode token's or a verify's
 * products of more rows in pieces of GEMM_ROWS (see gemm): one cuBLAS shape for the decode
 * token of any batch and for a speculative verify's K + 1 rows, so a row's sums do not
 * depend on how many rows came with it (the verify is bit for bit the decode). */
#define GEMM_ROWS 8

#define CB_TRY(call)                                                                               \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            locks_log(LOCKS_LOG_ERROR, "cublas: %s failed: status %d (%s:%d)", #call, (int)s_,      \
                      __FILE__, __LINE__);                                                         \
            return LOCKS_ERR_BACKEND;                                                              \
        }                                                                                          \
    } while (0)

/* ================================================================================ */
/* Weights                                                                          */
/* ================================================================================ */

/* A matrix: up to three parts stacked by rows (Wq | Wk | Wv, Wgate | Wup), consecutive parts
 * of one type sharing a segment; a segment is 16-bit (type -1: row-major in wtype) or
 * quantized (a ggml type, lg_qtype_supported: qgemv.cu's device layout of its rows). */
typedef struct {
    void *p;
    int32_t type; /* -1: 16-bit */
    int32_t row0, rows;
} lg_seg;
typedef struct {
    lg_seg seg[3];
    int32_t n_seg, rows, cols;
} lg_mat;

typedef struct {
    float *attn_norm, *ffn_norm; /* (dim,) */
    float *q_norm, *k_norm;      /* (head_dim,) arch.qk_norm, else NULL */
    float *post_attn_norm, *post_ffn_norm; /* (dim,) arch.post_norms, else NULL */
    float *bqkv;                 /* (q_dim + 2 kv_dim,) arch.qkv_bias, else NULL */
    lg_mat wqkv;                 /* (q_dim + 2 kv_dim, dim) */
    lg_mat wo;                   /* (dim, q_dim) */
    lg_mat wgu;                  /* (2 ffn, dim) */
    lg_mat wdown;                /* (dim, ffn) */
} lg_layer;

struct lg_model {
    lg_shape s;
    int32_t *qt;  /* s.qtypes, owned (NULL: none) */
    size_t qmax;  /* 16-bit bytes of the largest quantized segment, dequantized (0: none) */
    void *base;   /* one allocation holding everything */
    size_t bytes;
    void *tok_embd; /* (n_vocab, dim) 16-bit */
    lg_mat output;  /* (n_vocab, dim); its segment is tok_embd when tied and 16-bit */
    float *output_norm;
    lg_layer *layers;
};

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* Next tensor of `bytes` in the single allocation at base (NULL: sizes only). */
static char *take(char *base, size_t *off, size_t bytes) {
    char *p = base ? base + *off : NULL;
    *off += align256(bytes);
    return p;
}

/* The device type of a part: a supported quantized type whose blocks divide cols, else -1. */
static int32_t part_type(const lg_shape *s, int32_t idx, int32_t rows, int32_t cols) {
    if (!s->qtypes) return -1;
    const int32_t t = s->qtypes[idx];
    return lg_qtype_supported(t) && lg_qmat_bytes(t, rows, cols) > 0 ? t : -1;
}

static size_t seg_bytes(int32_t type, int32_t rows, int32_t cols) {
    return type < 0 ? (size_t)rows * cols * 2 : lg_qmat_bytes(type, rows, cols);
}

/* Lays out a matrix of n parts (rows[i], types from qtypes[idx0 + i]) in the allocation;
 * *qmax grows to the 16-bit bytes of its largest quantized segment. */
static void lay_mat(const lg_shape *s, char *b, size_t *off, size_t *qmax, lg_mat *mt, int32_t idx0,
                    const int32_t *rows, int n, int32_t cols) {
    int32_t ty[3];
    for (int i = 0; i < n; i++) ty[i] = part_type(s, idx0 + i, rows[i], cols);
    mt->n_seg = 0;
    mt->rows = 0;
    mt->cols = cols;
    for (int i = 0; i < n;) {
        int j = i + 1;
        int32_t r = rows[i];
        while (j < n && ty[j] == ty[i]) r += rows[j++];
        lg_seg *g = &mt->seg[mt->n_seg++];
        g->type = ty[i];
        g->row0 = mt->rows;
        g->rows = r;
        g->p = take(b, off, seg_bytes(ty[i], r, cols));
        if (ty[i] >= 0 && (size_t)r * cols * 2 > *qmax) *qmax = (size_t)r * cols * 2;
        mt->rows += r;
        i = j;
    }
}

/* Offsets of every tensor in the single allocation (m may be NULL: sizes only). */
static size_t layout(const lg_shape *s, lg_model *m) {
    const int32_t D = s->dim, Q = s->n_heads * s->head_dim, KV = s->n_kv_heads * s->head_dim;
    const int32_t F = s->ffn_dim, V = s->n_vocab;
    char *b = m ? (char *)m->base : NULL;
    size_t off = 0, qmax = 0;
    lg_mat tmp;
    char *p = take(b, &off, (size_t)V * D * 2);
    if (m) m->tok_embd = p;
    lg_mat *mt = m ? &m->output : &tmp;
    if (s->tied && part_type(s, 0, V, D) < 0) { /* the embedding itself */
        mt->n_seg = 1, mt->rows = V, mt->cols = D;
        mt->seg[0] = (lg_seg){p, -1, 0, V};
    } else {
        lay_mat(s, b, &off, &qmax, mt, 0, &V, 1, D);
    }
    p = take(b, &off, (size_t)D * 4);
    if (m) m->output_norm = (float *)p;
    for (int32_t l = 0; l < s->n_layers; l++) {
        lg_layer tl, *L = m ? &m->layers[l] : &tl;
        L->attn_norm = (float *)take(b, &off, (size_t)D * 4);
        L->ffn_norm = (float *)take(b, &off, (size_t)D * 4);
        const lg_arch *a = &s->arch;
        L->q_norm = a->qk_norm ? (float *)take(b, &off, (size_t)s->head_dim * 4) : NULL;
        L->k_norm = a->qk_norm ? (float *)take(b, &off, (size_t)s->head_dim * 4) : NULL;
        L->post_attn_norm = a->post_norms ? (float *)take(b, &off, (size_t)D * 4) : NULL;
        L->post_ffn_norm = a->post_norms ? (float *)take(b, &off, (size_t)D * 4) : NULL;
        L->bqkv = a->qkv_bias ? (float *)take(b, &off, (size_t)(Q + 2 * KV) * 4) : NULL;
        const int32_t qkv[3] = {Q, KV, KV}, gu[2] = {F, F};
        const int32_t i0 = 1 + 7 * l;
        lay_mat(s, b, &off, &qmax, &L->wqkv, i0, qkv, 3, D);
        lay_mat(s, b, &off, &qmax, &L->wo, i0 + 3, &D, 1, Q);
        lay_mat(s, b, &off, &qmax, &L->wgu, i0 + 4, gu, 2, D);
        lay_mat(s, b, &off, &qmax, &L->wdown, i0 + 6, &D, 1, F);
    }
    if (m) m->qmax = qmax;
    return off;
}

extern "C" int lg_layer_local(const lg_shape *s, int32_t l) {
    return s->arch.swa_window > 0 && s->arch.swa_period > 0 && (l + 1) % s->arch.swa_period != 0;
}
extern "C" int32_t lg_n_global(const lg_shape *s) {
    int32_t n = 0;
    for (int32_t l = 0; l < s->n_layers; l++) n += !lg_layer_local(s, l);
    return n;
}
extern "C" int32_t lg_cache_layer(const lg_shape *s, int32_t l) {
    if (l < 0 || l >= s->n_layers || lg_layer_local(s, l)) return -1;
    int32_t n = 0;
    for (int32_t i = 0; i < l; i++) n += !lg_layer_local(s, i);
    return n;
}

/* 1 if the shape's layer is Llama's (no variant of lg_arch). */
static int arch_plain(const lg_arch *a) {
    return !a->rope_neox && !a->qkv_bias && !a->qk_norm && !a->post_norms && !a->geglu && !a->emb_scale &&
           a->swa_window <= 0;
}

static int mat_quantized(const lg_mat *mt) {
    for (int i = 0; i < mt->n_seg; i++)
        if (mt->seg[i].type >= 0) return 1;
    return 0;
}

extern "C" locks_status lg_device_memory(int32_t device, size_t *free_bytes, size_t *total_bytes) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1 || device < 0 || device >= n) {
        locks_log(LOCKS_LOG_ERROR, "cuda: no CUDA device %d (%d found)", device, n);
        return LOCKS_ERR_BACKEND;
    }
    CU_TRY(cudaSetDevice(device));
    CU_TRY(cudaMemGetInfo(free_bytes, total_bytes));
    return LOCKS_OK;
}

extern "C" size_t lg_model_bytes(const lg_shape *s) { return layout(s, NULL); }

extern "C" void lg_model_free(lg_model *m) {
    if (!m) return;
    if (m->base) cudaFree(m->base);
    m->base = NULL;
    locks_free(m->layers);
    locks_free(m->qt);
    locks_free(m);
}

extern "C" lg_model *lg_model_alloc(const lg_shape *s, locks_status *err) {
    locks_status st = LOCKS_OK;
    lg_model *m = NULL;
    size_t free_b = 0, total_b = 0;
    int n_dev = 0;
    if (!s || s->n_vocab < 1 || s->dim < 1 || s->n_layers < 1 || s->n_heads < 1 || s->n_kv_heads < 1 ||
        s->n_heads % s->n_kv_heads != 0 || s->ffn_dim < 1 || s->n_rot < 2 || s->n_rot > s->head_dim ||
        (s->wtype != LOCKS_DTYPE_F16 && s->wtype != LOCKS_DTYPE_BF16) ||
        (s->arch.swa_window > 0 && (s->arch.swa_period < 1 || !(s->arch.rope_theta_swa > 0.f) || lg_n_global(s) < 1))) {
        st = LOCKS_ERR_INVALID_ARG;
        goto fail;
    }
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1 || s->device < 0 || s->device >= n_dev) {
        locks_log(LOCKS_LOG_ERROR, "cuda: no CUDA device %d (%d found)", s->device, n_dev);
        st = LOCKS_ERR_BACKEND;
        goto fail;
    }
    if (cudaSetDevice(s->device) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        st = LOCKS_ERR_BACKEND;
        goto fail;
    }
    m = (lg_model *)locks_alloc(1, sizeof *m);
    if (!m) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    m->s = *s;
    if (s->qtypes) {
        m->qt = (int32_t *)locks_alloc((size_t)LG_QTYPES(s->n_layers), sizeof(int32_t));
        if (!m->qt) {
            st = LOCKS_ERR_OOM;
            goto fail;
        }
        memcpy(m->qt, s->qtypes, sizeof(int32_t) * (size_t)LG_QTYPES(s->n_layers));
        m->s.qtypes = m->qt;
    }
    m->bytes = layout(&m->s, NULL);
    if (m->bytes > free_b) {
        locks_log(LOCKS_LOG_ERROR, "cuda: the weights need %.2f GiB, the device has %.2f GiB free of %.2f",
                  m->bytes / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0);
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    m->layers = (lg_layer *)locks_alloc((size_t)s->n_layers, sizeof *m->layers);
    if (!m->layers) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    if (cudaMalloc(&m->base, m->bytes) != cudaSuccess) {
        m->base = NULL;
        locks_log(LOCKS_LOG_ERROR, "cuda: cudaMalloc of %zu bytes for the weights failed", m->bytes);
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    layout(&m->s, m);
    if (err) *err = LOCKS_OK;
    return m;
fail:
    lg_model_free(m);
    if (err) *err = st;
    return NULL;
}

extern "C" lg_shape lg_model_shape(const lg_model *m) { return m->s; }

extern "C" int lg_model_quantized(const lg_model *m) { return m && m->qmax > 0; }

/* The matrix of a tensor (NULL for norms and the embedding). */
static lg_mat *tensor_mat(lg_model *m, lg_tensor t, int32_t layer) {
    if (t == LG_OUTPUT) return &m->output;
    if (layer < 0 || layer >= m->s.n_layers) return NULL;
    lg_layer *L = &m->layers[layer];
    switch (t) {
    case LG_WQKV: return &L->wqkv;
    case LG_WO: return &L->wo;
    case LG_WGATE_UP: return &L->wgu;
    case LG_WDOWN: return &L->wdown;
    default: return NULL;
    }
}

/* The segment of mt holding rows [row0, row0 + n) (NULL: none holds all of them). */
static lg_seg *find_seg(lg_mat *mt, int32_t row0, int32_t n) {
    for (int i = 0; i < mt->n_seg; i++) {
        lg_seg *g = &mt->seg[i];
        if (row0 >= g->row0 && row0 + n <= g->row0 + g->rows) return g;
    }
    return NULL;
}

extern "C" locks_status lg_model_upload(lg_model *m, lg_tensor t, int32_t layer, int32_t row0, int32_t n_rows,
                                        const void *src) {
    if (!m || !src || row0 < 0 || n_rows < 0) return LOCKS_ERR_INVALID_ARG;
    const lg_shape *s = &m->s;
    float *f = NULL;
    size_t len = (size_t)s->dim; /* floats of an fp32 vector */
    const int vec = t == LG_OUTPUT_NORM || t == LG_ATTN_NORM || t == LG_FFN_NORM || t == LG_Q_NORM ||
                    t == LG_K_NORM || t == LG_POST_ATTN_NORM || t == LG_POST_FFN_NORM || t == LG_BQKV;
    if (t == LG_OUTPUT_NORM) {
        f = m->output_norm;
    } else if (vec && layer >= 0 && layer < s->n_layers) {
        lg_layer *L = &m->layers[layer];
        switch (t) {
        case LG_ATTN_NORM: f = L->attn_norm; break;
        case LG_FFN_NORM: f = L->ffn_norm; break;
        case LG_Q_NORM: f = L->q_norm, len = (size_t)s->head_dim; break;
        case LG_K_NORM: f = L->k_norm, len = (size_t)s->head_dim; break;
        case LG_POST_ATTN_NORM: f = L->post_attn_norm; break;
        case LG_POST_FFN_NORM: f = L->post_ffn_norm; break;
        default: f = L->bqkv, len = (size_t)(s->n_heads + 2 * s->n_kv_heads) * s->head_dim; break;
        }
    }
    if (vec) {
        if (!f || row0 != 0 || n_rows != 1) return LOCKS_ERR_INVALID_ARG;
        CU_TRY(cudaMemcpy(f, src, len * 4, cudaMemcpyHostToDevice));
        return LOCKS_OK;
    }
    char *p;
    int32_t cols;
    if (t == LG_TOK_EMBD) {
        if (row0 + n_rows > s->n_vocab) return LOCKS_ERR_INVALID_ARG;
        p = (char *)m->tok_embd + (size_t)row0 * s->dim * 2;
        cols = s->dim;
    } else {
        lg_mat *mt = tensor_mat(m, t, layer);
        if (!mt || (t == LG_OUTPUT && s->tied && mt->seg[0].p == m->tok_embd)) return LOCKS_ERR_INVALID_ARG;
        lg_seg *g = find_seg(mt, row0, n_rows);
        if (!g || g->type >= 0) return LOCKS_ERR_INVALID_ARG;
        cols = mt->cols;
        p = (char *)g->p + (size_t)(row0 - g->row0) * cols * 2;
    }
    CU_TRY(cudaMemcpy(p, src, (size_t)n_rows * cols * 2, cudaMemcpyHostToDevice));
    return LOCKS_OK;
}

extern "C" locks_status lg_model_upload_q(lg_model *m, lg_tensor t, int32_t layer, int32_t row0, int32_t n_rows,
                                          const void *src) {
    if (!m || !src || row0 < 0 || n_rows < 1) return LOCKS_ERR_INVALID_ARG;
    lg_mat *mt = tensor_mat(m, t, layer);
    lg_seg *g = mt ? find_seg(mt, row0, n_rows) : NULL;
    if (!g || g->type < 0) return LOCKS_ERR_INVALID_ARG;
    /* pack the part alone, then place its blocks and its split scales (if the type has
     * them) at the part's rows of the segment's two regions */
    const size_t part = lg_qmat_bytes(g->type, n_rows, mt->cols);
    void *h = locks_alloc(part, 1);
    if (!h) return LOCKS_ERR_OOM;
    lg_qmat_pack(g->type, src, n_rows, mt->cols, h);
    const size_t blk_row = lg_qrow_block_bytes(g->type, mt->cols), d_row = lg_qrow_d_bytes(g->type, mt->cols);
    const size_t off = (size_t)(row0 - g->row0);
    locks_status st = LOCKS_OK;
    if (cudaMemcpy((char *)g->p + off * blk_row, h, (size_t)n_rows * blk_row, cudaMemcpyHostToDevice) != cudaSuccess)
        st = LOCKS_ERR_BACKEND;
    if (st == LOCKS_OK && d_row) {
        const size_t hd = align256((size_t)n_rows * blk_row), gd = align256((size_t)g->rows * blk_row);
        if (cudaMemcpy((char *)g->p + gd + off * d_row, (char *)h + hd, (size_t)n_rows * d_row,
                       cudaMemcpyHostToDevice) != cudaSuccess)
            st = LOCKS_ERR_BACKEND;
    }
    locks_free(h);
    if (st != LOCKS_OK) locks_log(LOCKS_LOG_ERROR, "cuda: the upload of a quantized part failed");
    return st;
}

extern "C" locks_status lg_model_fill_random(lg_model *m, uint64_t seed) {
    if (!m) return LOCKS_ERR_INVALID_ARG;
    if (m->qmax) return LOCKS_ERR_UNSUPPORTED; /* random weights are 16-bit */
    const lg_shape *s = &m->s;
    uint64_t k = seed;
    for (int32_t l = -1; l < s->n_layers; l++) {
        if (l < 0) {
            const float a = 1.f / sqrtf((float)s->dim);
            LOCKS_TRY(lg_fill16_launch(m->tok_embd, (size_t)s->n_vocab * s->dim, s->wtype, ++k, a, 0));
            if (!s->tied)
                LOCKS_TRY(lg_fill16_launch(m->output.seg[0].p, (size_t)s->n_vocab * s->dim, s->wtype, ++k, a, 0));
            LOCKS_TRY(lg_fill_f32_launch(m->output_norm, (size_t)s->dim, 1.f, 0));
            continue;
        }
        lg_layer *L = &m->layers[l];
        const lg_mat *mats[] = {&L->wqkv, &L->wo, &L->wgu, &L->wdown};
        for (int w = 0; w < 4; w++)
            LOCKS_TRY(lg_fill16_launch(mats[w]->seg[0].p, (size_t)mats[w]->rows * mats[w]->cols, s->wtype, ++k,
                                       1.f / sqrtf((float)mats[w]->cols), 0));
        LOCKS_TRY(lg_fill_f32_launch(L->attn_norm, (size_t)s->dim, 1.f, 0));
        LOCKS_TRY(lg_fill_f32_launch(L->ffn_norm, (size_t)s->dim, 1.f, 0));
        float *ones[] = {L->q_norm, L->k_norm, L->post_attn_norm, L->post_ffn_norm};
        const size_t n1[] = {(size_t)s->head_dim, (size_t)s->head_dim, (size_t)s->dim, (size_t)s->dim};
        for (int i = 0; i < 4; i++)
            if (ones[i]) LOCKS_TRY(lg_fill_f32_launch(ones[i], n1[i], 1.f, 0));
        if (L->bqkv) LOCKS_TRY(lg_fill_f32_launch(L->bqkv, (size_t)L->wqkv.rows, 0.f, 0));
    }
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}

/* ================================================================================ */
/* Engine                                                                           */
/* ================================================================================ */

struct lg_ctx {
    lg_model *m;
    locks_cache *cache;
    locks_cuda_cache *cc;
    cudaStream_t st; /* the cache's stream */
    cublasHandle_t blas;
    void *blas_ws;
    int32_t n_seqs, max_chunk, rows; /* rows = max(max_chunk, n_seqs) */
    int32_t q_dim, kv_dim, qkv_dim, widest;
    float *x;       /* (rows, dim) residual stream */
    void *xb;       /* (rows, widest) 16-bit input of the next product */
    float *qkv;     /* (rows, qkv_dim) */
    float *q;       /* (rows, q_dim) contiguous queries */
    float *kbuf, *vbuf; /* (rows, kv_dim) prefill K / V for locks_cache_write */
    float *att;     /* (rows, q_dim) */
    float *gu;      /* (rows, 2 ffn) */
    float *logits;  /* (n_seqs, n_vocab) */
    int8_t *xq;     /* quantized weights: (LG_GEMV_MAX_N, widest) int8 input of a product */
    float *xds;     /* (LG_GEMV_MAX_N, widest / 32) x {d, d sum(q)} */
    void *wscr;     /* quantized weights, prefill: the widest segment dequantized to 16-bit */
    float *ss;      /* decode products: partial sums of squares of x's rows (gemv.cu) */
    int32_t ss_nblk; /* partials the last residual write left (enqueue time) */
    int gemv;       /* decode products: 0 cuBLAS + the small kernels, 1 gemv.cu, 2 gemv.cu with
                     * programmatic dependent launch (lab switch engine_gemv, see lg_ctx_init) */
    int gemv_now;   /* set while enqueuing a decode token that uses gemv.cu */
    uint64_t *samp_ws; /* the greedy sampler's partial maxima and tickets */
    int32_t *tok;   /* (n_seqs,) decode input tokens */
    int32_t *row_slot; /* (n_seqs,) decode row -> cache slot, -1 for an idle row (own_slots uploads) */
    int32_t h_rows[MAX_ENGINE_SEQS]; /* host: the slots of rows 0 .. n_rows - 1 (lg_set_rows) */
    int32_t n_rows;  /* rows that decode a sequence; the others idle */
    int rows_dirty;  /* h_rows changed since the last upload */
    int32_t *ptok;  /* (max_chunk,) prefill tokens */
    int32_t *pos;   /* (rows,) positions */
    int32_t *build; /* (n_seqs,) pages to summarise */
    float *inv_freq; /* (n_rot / 2,) */
    lg_sample_params *samp;
    uint64_t *counter;
    int32_t *h_pos; /* host staging (max_chunk,) */
    locks_step_params step;
    int32_t max_ctx;
    int step_set;
    int prep_fused; /* decode attention prep in one kernel (engine_fused = 0: the old launches) */
    int rest;       /* the small kernels (norms, cast, SwiGLU, attention prep) with programmatic
                     * dependent launch, the embedding and decode prep in one kernel, and a dense
                     * token's summary builds on a forked branch (engine_rest = 0: the
                     * earlier launches, for A/B timing; see lg_ctx_init) */
    cudaStream_t side;           /* the forked branch of a decode token (summary builds) */
    cudaEvent_t ev_fork, ev_join;
    int forked;                  /* enqueue time: work is pending on side */
    cudaGraphExec_t graph[LG_PART_ALL + 1]; /* per parts mask */
    int32_t gemm_rows; /* GEMM_ROWS, or 1 with engine_pad = 0 (A/B timing: no padding, no pieces; the verify
                        * is then exact only where cuBLAS happens to be row invariant) */
    int gemm_chunked;  /* set while enqueuing a verify or a decode token: products of more rows in
                        * GEMM_ROWS-row pieces (a decode of 9..32 sequences reads the weights once a
                        * piece: the price of batch invariance, see gemm16) */
    /* lg_verify's buffers, made on its first call */
    float *v_logits;   /* (v_rows rounded up to GEMM_ROWS, n_vocab) */
    void *v_ws;        /* lg_verify_ws_bytes */
    size_t v_ws_bytes;
    int32_t *v_build;  /* (max_chunk / 16 + 2,) pages the verify fills */
    int32_t v_rows;
    cudaEvent_t ev0, ev1;
    /* architecture variants (lg_shape.arch) */
    int32_t *cl;       /* host (n_layers,): a global layer's cache layer, a local one's ring index */
    int32_t n_local;   /* sliding-window layers */
    float *proj;       /* (rows, dim) a branch's output before its post-norm (arch.post_norms) */
    float *inv_freq_swa; /* (n_rot / 2,) the local layers' RoPE frequencies */
    lg_swa_rings rings;  /* (n_seqs, n_local) rings of swa_cap positions (swa.cu), base NULL: none */
    float emb_scale;     /* sqrtf(dim) (arch.emb_scale) or 1 */
};

extern "C" void lg_ctx_free(lg_ctx *e) {
    if (!e) return;
    if (e->st) cudaStreamSynchronize(e->st);
    for (int i = 0; i <= LG_PART_ALL; i++)
        if (e->graph[i]) cudaGraphExecDestroy(e->graph[i]);
    if (e->blas) cublasDestroy(e->blas);
    void *bufs[] = {e->xq,      e->xds,     e->wscr, e->blas_ws,  e->x,    e->xb,  e->qkv,   e->q,
                    e->kbuf,    e->vbuf,    e->att,  e->gu,       e->logits, e->ss, e->samp_ws, e->tok,
                    e->row_slot, e->ptok,   e->pos,  e->build,    e->inv_freq, e->samp, e->counter,
                    e->v_logits, e->v_ws,   e->v_build, e->proj, e->inv_freq_swa, e->rings.base};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) cudaFree(bufs[i]);
    if (e->ev0) cudaEventDestroy(e->ev0);
    if (e->ev1) cudaEventDestroy(e->ev1);
    if (e->ev_fork) cudaEventDestroy(e->ev_fork);
    if (e->ev_join) cudaEventDestroy(e->ev_join);
    if (e->side) cudaStreamDestroy(e->side);
    locks_free(e->h_pos);
    locks_free(e->cl);
    locks_free(e);
}

extern "C" lg_ctx *lg_ctx_init(lg_model *m, locks_cache *cache, int32_t n_seqs, int32_t max_chunk, int32_t swa_cap,
                               locks_status *err) {
    locks_status st = LOCKS_OK;
    lg_ctx *e = NULL;
    if (!m || !cache || !cache->cuda || n_seqs < 1 || n_seqs > MAX_ENGINE_SEQS || n_seqs > cache->p.max_seqs ||
        max_chunk < 1) {
        st = LOCKS_ERR_INVALID_ARG;
        goto fail;
    }
    {
        const lg_shape *s = &m->s;
        const locks_cache_params *cp = &cache->p;
        if (cp->n_layers != lg_n_global(s) || cp->n_kv_heads != s->n_kv_heads || cp->head_dim != s->head_dim) {
            locks_log(LOCKS_LOG_ERROR,
                      "cuda engine: the cache's shape (%d layers, %d KV heads of %d) is not the model's (%d global "
                      "layers, %d KV heads of %d)",
                      cp->n_layers, cp->n_kv_heads, cp->head_dim, lg_n_global(s), s->n_kv_heads, s->head_dim);
            st = LOCKS_ERR_INVALID_ARG;
            goto fail;
        }
        if (s->n_heads / s->n_kv_heads > LOCKS_CUDA_MAX_GROUP) {
            st = LOCKS_ERR_UNSUPPORTED;
            goto fail;
        }
        e = (lg_ctx *)locks_alloc(1, sizeof *e);
        if (!e) {
            st = LOCKS_ERR_OOM;
            goto fail;
        }
        e->m = m;
        e->cache = cache;
        e->cc = cache->cuda;
        e->st = e->cc->stream;
        e->n_seqs = n_seqs;
        e->max_chunk = max_chunk;
        e->rows = max_chunk > n_seqs ? max_chunk : n_seqs;
        e->rows = (e->rows + GEMM_ROWS - 1) / GEMM_ROWS * GEMM_ROWS; /* whole GEMM_ROWS pieces */
        e->q_dim = s->n_heads * s->head_dim;
        e->kv_dim = s->n_kv_heads * s->head_dim;
        e->qkv_dim = e->q_dim + 2 * e->kv_dim;
        e->widest = s->dim > e->q_dim ? s->dim : e->q_dim;
        if (s->ffn_dim > e->widest) e->widest = s->ffn_dim;
        const size_t R = (size_t)e->rows;
#define DA(ptr, bytes)                                                                             \
    do {                                                                                           \
        if (cudaMalloc((void **)&(ptr), (bytes)) != cudaSuccess) {                                 \
            (ptr) = NULL;                                                                          \
            locks_log(LOCKS_LOG_ERROR, "cuda engine: cudaMalloc of %zu bytes failed", (size_t)(bytes)); \
            st = LOCKS_ERR_OOM;                                                                    \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)
        DA(e->x, R * s->dim * 4);
        DA(e->xb, R * e->widest * 2);
        DA(e->qkv, R * e->qkv_dim * 4);
        DA(e->q, R * e->q_dim * 4);
        DA(e->kbuf, R * e->kv_dim * 4);
        DA(e->vbuf, R * e->kv_dim * 4);
        DA(e->att, R * e->q_dim * 4);
        DA(e->gu, R * 2 * s->ffn_dim * 4);
        /* whole GEMM_ROWS pieces: a padded product, or the last piece of a decode of 9..32 rows */
        DA(e->logits, (size_t)((n_seqs + GEMM_ROWS - 1) / GEMM_ROWS * GEMM_ROWS) * s->n_vocab * 4);
        DA(e->tok, (size_t)n_seqs * 4);
        DA(e->row_slot, (size_t)n_seqs * 4);
        DA(e->ptok, (size_t)max_chunk * 4);
        DA(e->pos, R * 4);
        DA(e->build, (size_t)n_seqs * 4);
        DA(e->inv_freq, (size_t)(s->n_rot / 2) * 4);
        DA(e->samp, sizeof(lg_sample_params));
        DA(e->counter, 8);
        DA(e->blas_ws, CUBLAS_WS_BYTES);
        DA(e->ss, (size_t)lg_gemv_blocks(s->dim, 8, n_seqs) * n_seqs * 4); /* the most blocks */
        DA(e->samp_ws, lg_sample_ws_bytes(n_seqs));
        e->cl = (int32_t *)locks_alloc((size_t)s->n_layers, sizeof(int32_t));
        if (!e->cl) {
            st = LOCKS_ERR_OOM;
            goto fail;
        }
        for (int32_t l = 0, ng = 0; l < s->n_layers; l++) e->cl[l] = lg_layer_local(s, l) ? e->n_local++ : ng++;
        e->emb_scale = s->arch.emb_scale ? sqrtf((float)s->dim) : 1.f; /* llama.c's sqrtf((float)dim) */
        if (s->arch.post_norms) DA(e->proj, R * s->dim * 4);
        if (e->n_local > 0) {
            const int32_t cap = swa_cap > 0 ? swa_cap : s->arch.swa_window - 1 + max_chunk;
            e->rings = (lg_swa_rings){NULL, e->n_local, cap, s->n_kv_heads, s->head_dim};
            DA(e->rings.base, (size_t)n_seqs * e->n_local * 2 * (size_t)cap * e->kv_dim * 2);
            DA(e->inv_freq_swa, (size_t)(s->n_rot / 2) * 4);
            if (cudaMemset(e->rings.base, 0, (size_t)n_seqs * e->n_local * 2 * (size_t)cap * e->kv_dim * 2) !=
                cudaSuccess) {
                st = LOCKS_ERR_BACKEND;
                goto fail;
            }
        }
        if (m->qmax) {
            DA(e->xq, (size_t)LG_GEMV_MAX_N * e->widest);
            DA(e->xds, (size_t)LG_GEMV_MAX_N * (e->widest / 32) * 8);
            if (max_chunk > LG_GEMV_MAX_N) DA(e->wscr, m->qmax); /* the largest quantized segment, dequantized */
        }
#undef DA
        {
            /* the decode products: cuBLAS and the small kernels unless engine_gemv = 1
             * (gemv.cu, the norms, casts and SwiGLU folded into the products) or 2 (the same
             * with programmatic dependent launch), where gemv.cu takes the widths. Not the
             * default: on the H200 the fused token was 3% slower at one sequence (its
             * products 5.08 ms vs cuBLAS 4.02 for Llama-3.1-8B, the rest 0.34 vs 1.13 ms)
             * and 3-6x slower at 2-8 (CUDA cores, not tensor cores); bench/RESULTS.md. */
            const int g = locks_cuda_get_lab().engine_gemv;
            const int fits = lg_gemv_supported(s->dim, n_seqs) && lg_gemv_supported(e->q_dim, n_seqs) &&
                             lg_gemv_supported(s->ffn_dim, n_seqs);
            /* gemv.cu reads 16-bit weights, and folds the Llama layer's norms and SwiGLU only */
            e->gemv = fits && !m->qmax && arch_plain(&s->arch) && (g == 1 || g == 2) ? g : 0;
            if ((g == 1 || g == 2) && n_seqs > LG_GEMV_MAX_N)
                locks_log(LOCKS_LOG_WARN, "cuda engine: engine_gemv takes up to %d sequences; %d run the default products",
                          LG_GEMV_MAX_N, n_seqs);
            if (e->gemv && (st = lg_gemv_prepare()) != LOCKS_OK) goto fail;
        }
        e->h_pos = (int32_t *)locks_alloc(R, sizeof(int32_t));
        if (!e->h_pos) {
            st = LOCKS_ERR_OOM;
            goto fail;
        }
        float f[LOCKS_MAX_HEAD_DIM / 2], fs[LOCKS_MAX_HEAD_DIM / 2];
        for (int32_t i = 0; i < s->n_rot / 2; i++) { /* llama.c's inv_freq and inv_freq_swa */
            f[i] = (float)pow((double)s->rope_theta, -2.0 * i / s->n_rot);
            fs[i] = (float)pow((double)s->arch.rope_theta_swa, -2.0 * i / s->n_rot);
        }
        if (e->inv_freq_swa &&
            cudaMemcpy(e->inv_freq_swa, fs, (size_t)(s->n_rot / 2) * 4, cudaMemcpyHostToDevice) != cudaSuccess) {
            st = LOCKS_ERR_BACKEND;
            goto fail;
        }
        lg_sample_params greedy = {0.f, 0, 1.f, 0};
        const uint64_t zero = 0;
        if (cudaMemcpy(e->inv_freq, f, (size_t)(s->n_rot / 2) * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(e->samp, &greedy, sizeof greedy, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(e->counter, &zero, 8, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemset(e->tok, 0, (size_t)n_seqs * 4) != cudaSuccess ||
            cudaMemset(e->samp_ws, 0, lg_sample_ws_bytes(n_seqs)) != cudaSuccess ||
            cudaMemset(e->ss, 0, (size_t)lg_gemv_blocks(s->dim, 8, n_seqs) * n_seqs * 4) != cudaSuccess ||
            cudaEventCreate(&e->ev0) != cudaSuccess || cudaEventCreate(&e->ev1) != cudaSuccess) {
            st = LOCKS_ERR_BACKEND;
            goto fail;
        }
        if (cublasCreate(&e->blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(e->blas, e->st) != CUBLAS_STATUS_SUCCESS ||
            cublasSetWorkspace(e->blas, e->blas_ws, CUBLAS_WS_BYTES) != CUBLAS_STATUS_SUCCESS) {
            locks_log(LOCKS_LOG_ERROR, "cublas: cannot create a handle");
            st = LOCKS_ERR_BACKEND;
            goto fail;
        }
        if ((st = locks_cuda_ws_reserve(e->cc, n_seqs, s->n_heads)) != LOCKS_OK) goto fail;
        /* one summary launch with no page (-1) now, so the kernel's shared-memory limit is
         * raised before any graph capture */
        if (cudaMemset(e->build, 0xff, (size_t)n_seqs * 4) != cudaSuccess) {
            st = LOCKS_ERR_BACKEND;
            goto fail;
        }
        if ((st = locks_cuda_summary_build(e->cc, 0, e->build, n_seqs)) != LOCKS_OK) goto fail;
        e->step = locks_step_default_params();
        e->max_ctx = cache->p.n_pages * LOCKS_PAGE;
        for (int32_t i = 0; i < n_seqs; i++) e->h_rows[i] = i; /* every sequence, in order */
        e->n_rows = n_seqs;
        e->rows_dirty = 1;
        const locks_cuda_lab lab = locks_cuda_get_lab();
        e->prep_fused = lab.engine_fused != 0;
        e->gemm_rows = lab.engine_pad ? GEMM_ROWS : 1;
        e->rest = lab.engine_rest != 0;
        if (cudaStreamCreateWithFlags(&e->side, cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreateWithFlags(&e->ev_fork, cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&e->ev_join, cudaEventDisableTiming) != cudaSuccess) {
            st = LOCKS_ERR_BACKEND;
            goto fail;
        }
    }
    if (err) *err = LOCKS_OK;
    return e;
fail:
    lg_ctx_free(e);
    if (err) *err = st;
    return NULL;
}

/* y (n, rows) = x16 (n, cols) . W^T  + beta * y: column-major y^T = W^T' x^T with W row-major.
 * Batch invariance: cuBLAS picks its kernel (tiles, split of the sum) by shape, so row t of
 * a product of 1 row and of 5 need not agree in the last bit. Products of up to
 * e->gemm_rows rows therefore always run with e->gemm_rows rows (the rows past n compute
 * garbage nobody reads: every buffer holds whole GEMM_ROWS pieces), and in a verify or a
 * decode token (e->gemm_chunked) a longer product runs in pieces of that many rows; a row
 * of a decode token of any batch (1..32) and the same row of a verify then go through the
 * same kernel. Costs little up to 8 rows: the decode products are bound by the weights'
 * bytes (bench/RESULTS.md, exact15). A decode of 9..32 rows reads the weights once a
 * piece (2-4 times); engine_pad = 0 runs it as one product of n rows instead (A/B timing,
 * not batch invariant). */
static locks_status gemm16(lg_ctx *e, const void *w, int32_t rows, int32_t ldy, int32_t cols, const void *x, int32_t n,
                           float *y, float beta) {
    const cudaDataType_t t = e->m->s.wtype == LOCKS_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const float alpha = 1.f;
    const int32_t P = e->gemm_rows;
    if (n > P && (!e->gemm_chunked || P == 1)) { /* (engine_pad = 0: every product as it comes) */
        CB_TRY(cublasGemmEx(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &alpha, w, t, cols, x, t, cols, &beta, y,
                            CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return LOCKS_OK;
    }
    for (int32_t r = 0; r < n; r += P)
        CB_TRY(cublasGemmEx(e->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, P, cols, &alpha, w, t, cols,
                            (const char *)x + (size_t)r * cols * 2, t, cols, &beta, y + (size_t)r * ldy,
                            CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return LOCKS_OK;
}

/* The same product through a matrix of segments (lg_mat). 16-bit segments go to cuBLAS as
 * above. Quantized ones: products of up to LG_GEMV_MAX_N rows, and a verify's pieces of that
 * many (e->gemm_chunked), quantize x16 to int8 once a piece (e->xq, e->xds) and read the
 * blocks (qgemv.cu; a row's sums do not depend on the piece, so the verify is the decode bit
 * for bit); longer products (prefill) dequantize the segment into e->wscr and run cuBLAS. */
static locks_status gemm(lg_ctx *e, const lg_mat *w, int32_t n, float *y, float beta) {
    const int32_t cols = w->cols, ldy = w->rows;
    if (!mat_quantized(w)) return gemm16(e, w->seg[0].p, w->rows, ldy, cols, e->xb, n, y, beta);
    const lg_shape *s = &e->m->s;
    if (n <= LG_GEMV_MAX_N || e->gemm_chunked) {
        for (int32_t r = 0; r < n; r += LG_GEMV_MAX_N) {
            const int32_t nn = n - r < LG_GEMV_MAX_N ? n - r : LG_GEMV_MAX_N;
            const char *x16 = (const char *)e->xb + (size_t)r * cols * 2;
            LOCKS_TRY(lg_q8_quantize_launch(x16, s->wtype, nn, cols, e->xq, e->xds, e->rest, e->st));
            for (int i = 0; i < w->n_seg; i++) {
                const lg_seg *g = &w->seg[i];
                float *yp = y + (size_t)r * ldy + g->row0;
                if (g->type < 0) { /* a 16-bit segment beside quantized ones: cuBLAS on this piece's rows */
                    LOCKS_TRY(gemm16(e, g->p, g->rows, ldy, cols, x16, nn, yp, beta));
                    continue;
                }
                const lg_qmat qm = {g->p, g->type, g->rows, cols};
                LOCKS_TRY(lg_qgemv_launch(&qm, nn, e->xq, e->xds, yp, ldy, beta != 0.f, e->rest, e->st));
            }
        }
        return LOCKS_OK;
    }
    for (int i = 0; i < w->n_seg; i++) {
        const lg_seg *g = &w->seg[i];
        const void *wp = g->p;
        if (g->type >= 0) {
            const lg_qmat qm = {g->p, g->type, g->rows, cols};
            LOCKS_TRY(lg_qdequant_launch(&qm, s->wtype, e->wscr, e->st));
            wp = e->wscr;
        }
        LOCKS_TRY(gemm16(e, wp, g->rows, ldy, cols, e->xb, n, y + g->row0, beta));
    }
    return LOCKS_OK;
}

/* How the engine launches its small kernels (model_ops.cuh's LG_OPS_*). */
static int ops_how(const lg_ctx *e) { return e->rest ? LG_OPS_PDL : LG_OPS_PLAIN; }

/* y (n, rows) = rms(x) . W^T with norm weight nw: one gemv.cu product in a fused decode
 * token (the norm from the partial sums of squares the last residual write left), else
 * the RMSNorm kernel and cuBLAS. */
static locks_status norm_product(lg_ctx *e, const float *nw, const lg_mat *w, int32_t n, float *y, int parts) {
    const lg_shape *s = &e->m->s;
    const int32_t rows = w->rows;
    if (e->gemv_now) {
        if (parts & LG_PART_GEMM)
            LOCKS_TRY(lg_gemv_launch(LG_GEMV_NORM, w->seg[0].p, s->wtype, rows, s->dim, n, e->x, s->dim, nw, e->ss, e->ss_nblk,
                                     s->norm_eps, y, rows, 0, NULL, e->gemv == 2, e->st));
        return LOCKS_OK;
    }
    if (parts & LG_PART_REST)
        LOCKS_TRY(lg_rmsnorm_launch_ex(e->x, nw, n, s->dim, s->norm_eps, s->wtype, e->xb, ops_how(e), e->st));
    if (parts & LG_PART_GEMM) LOCKS_TRY(gemm(e, w, n, y, 0.f));
    return LOCKS_OK;
}

/* x += X . W^T with X = 16-bit(src) (mode LG_GEMV_F32, src (n, cols)) or silu(g) * u of
 * src = gu (LG_GEMV_SWIGLU, cols = ffn; gelu_tanh(g) * u with arch.geglu); with gemv.cu, the
 * product also leaves x's partial sums of squares for the next norm_product. With a
 * post-norm pn (Gemma 3) the product goes to e->proj and x += rms(proj) * pn: no beta = 1
 * add. */
static locks_status residual_product(lg_ctx *e, int mode, const float *src, const lg_mat *w, int32_t n,
                                     const float *pn, int parts) {
    const lg_shape *s = &e->m->s;
    const int32_t cols = w->cols;
    if (pn || s->arch.geglu) { /* not with gemv.cu (lg_ctx_init: the Llama layer only) */
        if (parts & LG_PART_REST) {
            if (mode != LG_GEMV_SWIGLU) LOCKS_TRY(lg_cast_launch_ex(src, (size_t)n * cols, s->wtype, e->xb, ops_how(e), e->st));
            else if (s->arch.geglu) LOCKS_TRY(lg_geglu_launch(src, n, cols, s->wtype, e->xb, e->st));
            else LOCKS_TRY(lg_swiglu_launch_ex(src, n, cols, s->wtype, e->xb, ops_how(e), e->st));
        }
        if (parts & LG_PART_GEMM) LOCKS_TRY(gemm(e, w, n, pn ? e->proj : e->x, pn ? 0.f : 1.f));
        if (pn && (parts & LG_PART_REST)) LOCKS_TRY(lg_norm_add_launch(e->x, e->proj, pn, n, s->dim, s->norm_eps, e->st));
        return LOCKS_OK;
    }
    if (e->gemv_now) {
        if (parts & LG_PART_GEMM)
            LOCKS_TRY(lg_gemv_launch(mode, w->seg[0].p, s->wtype, s->dim, cols, n, src, mode == LG_GEMV_SWIGLU ? 2 * cols : cols,
                                     NULL, NULL, 0, 0.f, e->x, s->dim, 1, e->ss, e->gemv == 2, e->st));
        e->ss_nblk = lg_gemv_blocks(s->dim, cols, n);
        return LOCKS_OK;
    }
    if (parts & LG_PART_REST) {
        if (mode == LG_GEMV_SWIGLU) LOCKS_TRY(lg_swiglu_launch_ex(src, n, cols, s->wtype, e->xb, ops_how(e), e->st));
        else LOCKS_TRY(lg_cast_launch_ex(src, (size_t)n * cols, s->wtype, e->xb, ops_how(e), e->st));
    }
    if (parts & LG_PART_GEMM) LOCKS_TRY(gemm(e, w, n, e->x, 1.f));
    return LOCKS_OK;
}

/* The FFN half of a layer and the Wo product, shared by prefill and decode. att -> x. */
static locks_status layer_tail(lg_ctx *e, const lg_layer *L, int32_t n, int parts) {
    LOCKS_TRY(residual_product(e, LG_GEMV_F32, e->att, &L->wo, n, L->post_attn_norm, parts));
    LOCKS_TRY(norm_product(e, L->ffn_norm, &L->wgu, n, e->gu, parts));
    LOCKS_TRY(residual_product(e, LG_GEMV_SWIGLU, e->gu, &L->wdown, n, L->post_ffn_norm, parts));
    return LOCKS_OK;
}

/* RoPE of q and k at e->pos (separate launches), q copied contiguous into e->q. */
static locks_status rope_copy(lg_ctx *e, int32_t n) {
    const lg_shape *s = &e->m->s;
    const int nx = s->arch.rope_neox;
    LOCKS_TRY(lg_rope_launch(e->qkv, n, e->qkv_dim, s->n_heads, s->head_dim, s->n_rot, e->inv_freq, e->pos, nx, e->st));
    LOCKS_TRY(lg_rope_launch(e->qkv + e->q_dim, n, e->qkv_dim, s->n_kv_heads, s->head_dim, s->n_rot, e->inv_freq,
                             e->pos, nx, e->st));
    CU_TRY(cudaMemcpy2DAsync(e->q, (size_t)e->q_dim * 4, e->qkv, (size_t)e->qkv_dim * 4, (size_t)e->q_dim * 4,
                             (size_t)n, cudaMemcpyDeviceToDevice, e->st));
    return LOCKS_OK;
}

/* xb = rms(x) ; qkv = Wqkv xb ; + bias, QK-norm of each q and k head (Qwen2, Qwen3, Gemma 3;
 * llama.c's order: the bias first) (decode: RoPE and the rest in enqueue_prep). */
static locks_status layer_head(lg_ctx *e, const lg_layer *L, int32_t n, int parts) {
    const lg_shape *s = &e->m->s;
    LOCKS_TRY(norm_product(e, L->attn_norm, &L->wqkv, n, e->qkv, parts));
    if (parts & LG_PART_REST)
        LOCKS_TRY(lg_qkv_fix_launch(e->qkv, n, e->qkv_dim, s->n_heads, s->n_kv_heads, s->head_dim, L->bqkv, L->q_norm,
                                    L->k_norm, s->norm_eps, e->st));
    return LOCKS_OK;
}

/* A sliding-window layer's attention for n rows (li its ring): RoPE of the q and k heads
 * with the local base, K/V into the rings, the window's exact attention -> e->att. Rows:
 * slots NULL: n tokens of sequence seq (a prefill / verify chunk), else the decode rows
 * (slots: e->row_slot). The scale is llama.c's for local layers, 1 / sqrt(head_dim). */
static locks_status local_attend(lg_ctx *e, int32_t li, int32_t n, const int32_t *slots, int32_t seq, int parts) {
    const lg_shape *s = &e->m->s;
    if (parts & LG_PART_PREP) {
        LOCKS_TRY(lg_rope_launch(e->qkv, n, e->qkv_dim, s->n_heads + s->n_kv_heads, s->head_dim, s->n_rot,
                                 e->inv_freq_swa, e->pos, s->arch.rope_neox, e->st));
        LOCKS_TRY(lg_swa_store_launch(&e->rings, li, e->qkv, e->qkv_dim, e->q_dim, e->pos, slots, seq, n, e->st));
    }
    if (parts & LG_PART_STEP)
        LOCKS_TRY(lg_swa_attend_launch(&e->rings, li, e->qkv, e->qkv_dim, s->n_heads, e->pos, slots, seq, n,
                                       s->arch.swa_window, 1.f / sqrtf((float)s->head_dim), e->att, e->q_dim, e->st));
    return LOCKS_OK;
}

/* A chunk of n tokens at pos fits the rings: its window and itself at once (swa.h). */
static locks_status rings_fit(const lg_ctx *e, int32_t pos, int32_t n) {
    if (e->n_local == 0 || (int64_t)e->m->s.arch.swa_window - 1 + n <= e->rings.cap || (int64_t)pos + n <= e->rings.cap)
        return LOCKS_OK;
    locks_log(LOCKS_LOG_ERROR, "cuda engine: %d tokens at %d do not fit the sliding-window rings (%d slots, window %d)",
              n, pos, e->rings.cap, e->m->s.arch.swa_window);
    return LOCKS_ERR_INVALID_ARG;
}

/* ---- prefill ------------------------------------------------------------------------------ */

extern "C" locks_status lg_prefill(lg_ctx *e, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos, float *logits) {
    if (!e || !tokens || n < 1 || n > e->max_chunk || seq < 0 || seq >= e->n_seqs || pos < 0) return LOCKS_ERR_INVALID_ARG;
    const lg_shape *s = &e->m->s;
    const int32_t len = locks_cache_seq_len(e->cache, seq);
    if (len < pos + n) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(rings_fit(e, pos, n));
    for (int32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab) return LOCKS_ERR_INVALID_ARG;
        e->h_pos[i] = pos + i;
    }
    CU_TRY(cudaMemcpyAsync(e->ptok, tokens, (size_t)n * 4, cudaMemcpyHostToDevice, e->st));
    CU_TRY(cudaMemcpyAsync(e->pos, e->h_pos, (size_t)n * 4, cudaMemcpyHostToDevice, e->st));
    CU_TRY(cudaStreamSynchronize(e->st)); /* h_pos is pageable host memory */
    const float scale = 1.f / sqrtf((float)s->head_dim);
    LOCKS_TRY(lg_embed_scaled_launch(e->m->tok_embd, s->wtype, e->ptok, n, s->dim, e->emb_scale, e->x, e->st));
    for (int32_t l = 0; l < s->n_layers; l++) {
        const lg_layer *L = &e->m->layers[l];
        const int32_t cl = e->cl[l];
        LOCKS_TRY(layer_head(e, L, n, LG_PART_ALL));
        if (lg_layer_local(s, l)) { /* the window, from the rings */
            LOCKS_TRY(local_attend(e, cl, n, NULL, seq, LG_PART_ALL));
            LOCKS_TRY(layer_tail(e, L, n, LG_PART_ALL));
            continue;
        }
        LOCKS_TRY(rope_copy(e, n));
        CU_TRY(cudaMemcpy2DAsync(e->kbuf, (size_t)e->kv_dim * 4, e->qkv + e->q_dim, (size_t)e->qkv_dim * 4,
                                 (size_t)e->kv_dim * 4, (size_t)n, cudaMemcpyDeviceToDevice, e->st));
        CU_TRY(cudaMemcpy2DAsync(e->vbuf, (size_t)e->kv_dim * 4, e->qkv + e->q_dim + e->kv_dim, (size_t)e->qkv_dim * 4,
                                 (size_t)e->kv_dim * 4, (size_t)n, cudaMemcpyDeviceToDevice, e->st));
        /* the public write: non-finite check, store, summaries of the pages it fills */
        LOCKS_TRY(locks_cache_write(e->cache, seq, cl, pos, n, e->kbuf, e->vbuf));
        LOCKS_TRY(lg_prefill_attend_launch(e->cc, cl, seq, pos, n, e->q, s->n_heads, scale, e->att, e->st));
        LOCKS_TRY(layer_tail(e, L, n, LG_PART_ALL));
    }
    /* logits of the last token into row seq: a product of exactly one row (padded, it would
     * write the rows of the sequences after seq, which lg_sample_prefill may still read) */
    float *xl = e->x + (size_t)(n - 1) * s->dim;
    LOCKS_TRY(lg_rmsnorm_launch(xl, e->m->output_norm, 1, s->dim, s->norm_eps, s->wtype, e->xb, e->st));
    const int32_t pad = e->gemm_rows;
    e->gemm_rows = 1;
    const locks_status gs = gemm(e, &e->m->output, 1, e->logits + (size_t)seq * s->n_vocab, 0.f);
    e->gemm_rows = pad;
    LOCKS_TRY(gs);
    if (logits)
        CU_TRY(cudaMemcpyAsync(logits, e->logits + (size_t)seq * s->n_vocab, (size_t)s->n_vocab * 4,
                               cudaMemcpyDeviceToHost, e->st));
    CU_TRY(cudaStreamSynchronize(e->st));
    return LOCKS_OK;
}

/* ---- verify ------------------------------------------------------------------------------- */

static locks_status own_slots(lg_ctx *e);

/* The verify pass of speculative decoding (model_cuda.h): the K + 1 rows go through the
 * decode token's code, so row r is bit for bit the dense decode token at position pos + r
 * (tests/test_gpu_verify.c compares them with memcmp): the same products (gemm's GEMM_ROWS
 * rows), norms and casts per row, the decode's attention prep (RoPE + K/V store) and
 * summary build, and the dense decode attention in its rows mode (verify.cu, attend.cu)
 * with the decode graph's split size (max_ctx, n_seqs). Not with engine_gemv (the
 * decode products are then gemv.cu's). One host wait, at the end. */
extern "C" locks_status lg_verify(lg_ctx *e, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos,
                                  float *logits) {
    if (!e || !tokens || !logits || n < 1 || n > e->max_chunk || seq < 0 || seq >= e->n_seqs || pos < 0)
        return LOCKS_ERR_INVALID_ARG;
    const lg_shape *s = &e->m->s;
    locks_cuda_cache *c = e->cc;
    const locks_seq *sq = locks_cache_seq(e->cache, seq);
    if (!sq || sq->len < pos + n || c->ext_k || pos + n > e->max_ctx) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(rings_fit(e, pos, n));
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab) return LOCKS_ERR_INVALID_ARG;
    const int32_t max_pages = (e->max_ctx + 15) / 16; /* the decode graph's dense max_list */
    const size_t ws_bytes = lg_verify_ws_bytes(c, n, s->n_heads, e->n_seqs, max_pages);
    if (!e->v_build) {
        if (cudaMalloc((void **)&e->v_build, (size_t)(e->max_chunk / 16 + 2) * 4) != cudaSuccess) {
            e->v_build = NULL;
            locks_log(LOCKS_LOG_ERROR, "cuda engine: cannot allocate the verify buffers");
            return LOCKS_ERR_OOM;
        }
    }
    if (ws_bytes > e->v_ws_bytes) {
        if (e->v_ws) cudaFree(e->v_ws);
        e->v_ws_bytes = 0;
        if (cudaMalloc(&e->v_ws, ws_bytes) != cudaSuccess) {
            e->v_ws = NULL;
            locks_log(LOCKS_LOG_ERROR, "cuda engine: cannot allocate %zu bytes of verify scratch", ws_bytes);
            return LOCKS_ERR_OOM;
        }
        e->v_ws_bytes = ws_bytes;
    }
    if (n > e->v_rows) {
        if (e->v_logits) cudaFree(e->v_logits);
        e->v_logits = NULL;
        e->v_rows = 0;
        const int32_t r8 = (n + GEMM_ROWS - 1) / GEMM_ROWS * GEMM_ROWS;
        if (cudaMalloc((void **)&e->v_logits, (size_t)r8 * s->n_vocab * 4) != cudaSuccess) {
            e->v_logits = NULL;
            locks_log(LOCKS_LOG_ERROR, "cuda engine: cannot allocate %d rows of verify logits", n);
            return LOCKS_ERR_OOM;
        }
        e->v_rows = n;
    }
    /* pages that become full within [pos, pos + n): their summaries are built per layer */
    if ((pos + n - 1) / 16 - pos / 16 + 1 > 64) return LOCKS_ERR_INVALID_ARG; /* longer: lg_prefill */
    int32_t build[64], n_build = 0;
    for (int32_t lp = pos / 16; lp <= (pos + n - 1) / 16; lp++)
        if (lp * 16 + 15 <= pos + n - 1) build[n_build++] = sq->table[lp];
    LOCKS_TRY(own_slots(e)); /* the block-table rows are the engine's sequences */
    for (int32_t i = 0; i < n; i++) e->h_pos[i] = pos + i;
    CU_TRY(cudaMemcpyAsync(e->ptok, tokens, (size_t)n * 4, cudaMemcpyHostToDevice, e->st));
    CU_TRY(cudaMemcpyAsync(e->pos, e->h_pos, (size_t)n * 4, cudaMemcpyHostToDevice, e->st));
    if (n_build) CU_TRY(cudaMemcpyAsync(e->v_build, build, (size_t)n_build * 4, cudaMemcpyHostToDevice, e->st));
    CU_TRY(cudaStreamSynchronize(e->st)); /* pageable / stack sources */
    const float scale = e->step.scale > 0.f ? e->step.scale : 1.f / sqrtf((float)s->head_dim); /* enqueue_prep's */
    e->gemv_now = 0;
    e->gemm_chunked = 1;
    locks_status st = LOCKS_OK;
    if ((st = lg_embed_scaled_launch(e->m->tok_embd, s->wtype, e->ptok, n, s->dim, e->emb_scale, e->x, e->st)) !=
        LOCKS_OK)
        goto out;
    for (int32_t l = 0; l < s->n_layers; l++) {
        const lg_layer *L = &e->m->layers[l];
        const int32_t cl = e->cl[l];
        if ((st = layer_head(e, L, n, LG_PART_ALL)) != LOCKS_OK) goto out; /* rms, Wqkv (+ bias, QK-norm) */
        if (lg_layer_local(s, l)) { /* the decode's window kernels, the rows of one sequence */
            st = local_attend(e, cl, n, NULL, seq, LG_PART_ALL);
            if (st == LOCKS_OK) st = layer_tail(e, L, n, LG_PART_ALL);
            if (st != LOCKS_OK) goto out;
            continue;
        }
        const float *q = e->qkv;
        int32_t q_stride = e->qkv_dim;
        if (e->prep_fused) { /* enqueue_prep's kernels, the rows of one sequence */
            st = lg_attn_prep_rows_launch(c, cl, e->qkv, e->qkv_dim, s->n_heads, s->n_rot, e->inv_freq, e->pos, n, seq,
                                          s->arch.rope_neox, e->st);
        } else {
            st = rope_copy(e, n);
            if (st == LOCKS_OK) st = lg_verify_kv_launch(c, cl, seq, pos, n, e->qkv, e->qkv_dim, e->q_dim, e->st);
            q = e->q;
            q_stride = e->q_dim;
        }
        if (st == LOCKS_OK && n_build) st = locks_cuda_summary_build(c, cl, e->v_build, n_build);
        if (st == LOCKS_OK)
            st = lg_verify_attend_launch(c, cl, seq, pos, n, q, q_stride, s->n_heads, scale, e->n_seqs, max_pages,
                                         e->v_ws, e->att, e->st);
        if (st == LOCKS_OK) st = layer_tail(e, L, n, LG_PART_ALL);
        if (st != LOCKS_OK) goto out;
    }
    st = norm_product(e, e->m->output_norm, &e->m->output, n, e->v_logits, LG_PART_ALL);
out:
    e->gemm_chunked = 0;
    LOCKS_TRY(st);
    CU_TRY(cudaMemcpyAsync(logits, e->v_logits, (size_t)n * s->n_vocab * 4, cudaMemcpyDeviceToHost, e->st));
    CU_TRY(cudaStreamSynchronize(e->st));
    /* the host's written-slot masks, as lg_decode keeps them (the cache's layers) */
    for (int32_t p = pos; p < pos + n; p++)
        for (int32_t l = 0; l < e->cache->p.n_layers; l++)
            e->cache->fill[(size_t)l * e->cache->p.n_pages + sq->table[p / LOCKS_PAGE]] |=
                (uint16_t)(1u << (p % LOCKS_PAGE));
    return LOCKS_OK;
}

/* ---- decode --------------------------------------------------------------------------------- */

static void drop_graphs(lg_ctx *e) {
    for (int i = 0; i <= LG_PART_ALL; i++)
        if (e->graph[i]) {
            cudaGraphExecDestroy(e->graph[i]);
            e->graph[i] = NULL;
        }
}

extern "C" locks_status lg_set_step(lg_ctx *e, const locks_step_params *p, int32_t max_ctx) {
    if (!e || !p || p->budget <= 0 || p->n_sink < 0 || p->n_recent < 0 || max_ctx < 1 ||
        max_ctx > e->cache->p.n_pages * LOCKS_PAGE)
        return LOCKS_ERR_INVALID_ARG;
    if (p->selector != LOCKS_SEL_FULL && p->selector != LOCKS_SEL_LOCKS) {
        locks_log(LOCKS_LOG_ERROR, "cuda engine: selector %s runs on the CPU only (full and locks on the GPU)",
                  locks_selector_name(p->selector));
        return LOCKS_ERR_UNSUPPORTED;
    }
    if (!e->step_set || memcmp(p, &e->step, sizeof *p) != 0 || max_ctx != e->max_ctx) drop_graphs(e);
    e->step = *p;
    e->max_ctx = max_ctx;
    e->step_set = 1;
    return LOCKS_OK;
}

extern "C" locks_status lg_set_sampler(lg_ctx *e, const lg_sample_params *p) {
    if (!e || !p) return LOCKS_ERR_INVALID_ARG;
    CU_TRY(cudaMemcpyAsync(e->samp, p, sizeof *p, cudaMemcpyHostToDevice, e->st));
    CU_TRY(cudaStreamSynchronize(e->st));
    return LOCKS_OK;
}

extern "C" locks_status lg_set_rows(lg_ctx *e, const int32_t *seqs, int32_t n) {
    if (!e || (seqs && (n < 1 || n > e->n_seqs))) return LOCKS_ERR_INVALID_ARG;
    int32_t r[MAX_ENGINE_SEQS];
    uint64_t seen = 0; /* MAX_ENGINE_SEQS <= 64 bits */
    if (!seqs) n = e->n_seqs;
    for (int32_t i = 0; i < n; i++) {
        r[i] = seqs ? seqs[i] : i;
        if (r[i] < 0 || r[i] >= e->n_seqs || (seen >> r[i] & 1u)) return LOCKS_ERR_INVALID_ARG;
        seen |= (uint64_t)1 << r[i];
    }
    if (n != e->n_rows || memcmp(r, e->h_rows, (size_t)n * 4) != 0) {
        memcpy(e->h_rows, r, (size_t)n * 4);
        e->n_rows = n;
        e->rows_dirty = 1;
    }
    return LOCKS_OK;
}

extern "C" locks_status lg_set_tokens(lg_ctx *e, const int32_t *tokens) {
    if (!e || !tokens) return LOCKS_ERR_INVALID_ARG;
    int32_t t[MAX_ENGINE_SEQS] = {0}; /* an idle row embeds token 0 (its output is never read) */
    for (int32_t i = 0; i < e->n_rows; i++) {
        if (tokens[i] < 0 || tokens[i] >= e->m->s.n_vocab) return LOCKS_ERR_INVALID_ARG;
        t[i] = tokens[i];
    }
    CU_TRY(cudaMemcpyAsync(e->tok, t, (size_t)e->n_seqs * 4, cudaMemcpyHostToDevice, e->st));
    CU_TRY(cudaStreamSynchronize(e->st)); /* t is on the stack */
    return LOCKS_OK;
}

/* Attention prep of one layer's new tokens: RoPE of q and k, K/V into the cache, the
 * summary of a page that fills (skips the -1 entries of e->build), qprep (capturable). The
 * summary launch stays a kernel of its own ahead of qprep: the score kernel reads
 * summaries before its programmatic-launch wait (common.cuh), so the build must have
 * completed by then, which qprep (a plain launch) guarantees. */
static locks_status enqueue_prep(lg_ctx *e, int32_t layer) {
    locks_cuda_cache *c = e->cc;
    const lg_shape *s = &e->m->s;
    const int32_t ns = e->n_seqs;
    const float scale = e->step.scale > 0.f ? e->step.scale : 1.f / sqrtf((float)s->head_dim);
    if (e->prep_fused) {
        LOCKS_TRY(lg_attn_prep_launch_ex(c, layer, e->qkv, e->qkv_dim, s->n_heads, s->n_rot, e->inv_freq, e->pos,
                                         e->row_slot, ns, s->arch.rope_neox, e->rest, e->st));
    } else {
        LOCKS_TRY(rope_copy(e, ns));
        LOCKS_TRY(lg_kv_append_launch(c, layer, e->qkv, e->qkv_dim, e->q_dim, e->pos, e->row_slot, ns, e->st));
    }
    if (e->rest && e->step.selector == LOCKS_SEL_FULL) {
        /* nothing in a dense token reads summaries: the build of a page that fills runs on
         * a branch forked here and joined at the token's end (enqueue_decode), off the
         * layers' critical path; the side stream keeps the layers' builds in order */
        CU_TRY(cudaEventRecord(e->ev_fork, e->st));
        CU_TRY(cudaStreamWaitEvent(e->side, e->ev_fork, 0));
        e->forked = 1;
        LOCKS_TRY(locks_cuda_summary_build_on(c, layer, e->build, ns, e->side));
    } else {
        LOCKS_TRY(locks_cuda_summary_build(c, layer, e->build, ns));
    }
    if (e->prep_fused) return locks_cuda_qprep_launch(c, e->qkv, e->qkv_dim, ns, s->n_heads, scale, e->st);
    return locks_cuda_qprep_launch(c, e->q, e->q_dim, ns, s->n_heads, scale, e->st);
}

/* The step of one layer on the prepared queries -> e->att (capturable), through the path
 * locks_cuda_decode_step takes (step.cu). */
static locks_status enqueue_step(lg_ctx *e, int32_t layer) {
    const int32_t max_pages = (e->max_ctx + 15) / 16;
    const float scale = e->step.scale > 0.f ? e->step.scale : 1.f / sqrtf((float)e->m->s.head_dim);
    int32_t max_list = e->step.budget / 16 + 2;
    if (max_list > max_pages) max_list = max_pages;
    return locks_cuda_step_enqueue(e->cc, layer, e->n_seqs, e->m->s.n_heads, &e->step, scale, max_pages, max_list,
                                   e->att, 0, 0);
}

/* Every kernel of one decode token (the graph's body). */
static locks_status enqueue_decode_body(lg_ctx *e, int parts) {
    const lg_shape *s = &e->m->s;
    const int32_t ns = e->n_seqs;
    locks_cuda_cache *c = e->cc;
    const int one_launch = e->rest && !e->gemv_now && (parts & LG_PART_REST);
    if (one_launch) {
        LOCKS_TRY(lg_embed_prep_launch(e->m->tok_embd, s->wtype, e->tok, s->dim, e->emb_scale, e->x, e->row_slot, c->seq_len,
                                       c->block_table, c->p.n_pages, ns, e->pos, e->build, e->st));
    } else if (parts & (LG_PART_REST | LG_PART_PREP)) {
        LOCKS_TRY(lg_decode_prep_launch(e->row_slot, c->seq_len, c->block_table, c->p.n_pages, ns, e->pos, e->build,
                                        e->st));
    }
    if ((parts & LG_PART_REST) && !one_launch) {
        if (e->gemv_now) {
            LOCKS_TRY(lg_embed_ss_launch(e->m->tok_embd, s->wtype, e->tok, ns, s->dim, e->x, e->ss, e->st));
        } else {
            LOCKS_TRY(lg_embed_scaled_launch(e->m->tok_embd, s->wtype, e->tok, ns, s->dim, e->emb_scale, e->x, e->st));
        }
    }
    e->ss_nblk = 1;
    for (int32_t l = 0; l < s->n_layers; l++) {
        const lg_layer *L = &e->m->layers[l];
        const int32_t cl = e->cl[l];
        LOCKS_TRY(layer_head(e, L, ns, parts));
        if (lg_layer_local(s, l)) { /* the window from the rings, whatever the selector */
            LOCKS_TRY(local_attend(e, cl, ns, e->row_slot, 0, parts));
        } else {
            if (parts & LG_PART_PREP) LOCKS_TRY(enqueue_prep(e, cl));
            if (parts & LG_PART_STEP) LOCKS_TRY(enqueue_step(e, cl));
        }
        LOCKS_TRY(layer_tail(e, L, ns, parts));
    }
    LOCKS_TRY(norm_product(e, e->m->output_norm, &e->m->output, ns, e->logits, parts));
    if (parts & LG_PART_REST)
        LOCKS_TRY(lg_sample_launch(e->logits, ns, s->n_vocab, e->samp, e->counter, e->samp_ws, ns, e->tok, e->st));
    return LOCKS_OK;
}

/* Every kernel of one decode token, through gemv.cu's fused products where they apply. */
static locks_status enqueue_decode(lg_ctx *e, int parts) {
    e->gemv_now = e->gemv;
    e->forked = 0;
    e->gemm_chunked = 1; /* 9..32 rows: pieces of GEMM_ROWS, each a batch-1 token's product (gemm16) */
    locks_status st = enqueue_decode_body(e, parts);
    e->gemm_chunked = 0;
    e->gemv_now = 0;
    if (e->forked) { /* join the summary branch (also after a failure: a capture must end joined) */
        e->forked = 0;
        if (cudaEventRecord(e->ev_join, e->side) != cudaSuccess ||
            cudaStreamWaitEvent(e->st, e->ev_join, 0) != cudaSuccess) {
            locks_log(LOCKS_LOG_ERROR, "cuda engine: cannot join the summary branch");
            if (st == LOCKS_OK) st = LOCKS_ERR_BACKEND;
        }
    }
    return st;
}

/* The host's checks before a token: lengths within max_ctx, forced pages within budget
 * (the rows' sequences; an idle row reads row 0's). */
static locks_status check_lengths(lg_ctx *e) {
    const locks_step_params *p = &e->step;
    for (int32_t r = 0; r < e->n_rows; r++) {
        const int32_t s = e->h_rows[r], len = locks_cache_seq_len(e->cache, s);
        if (len < 1 || len > e->max_ctx) {
            locks_log(LOCKS_LOG_ERROR, "cuda engine: sequence %d has %d tokens, the decode graph takes 1..%d", s, len,
                      e->max_ctx);
            return LOCKS_ERR_INVALID_ARG;
        }
        if (e->n_local > 0 && len > e->rings.cap && e->rings.cap < e->m->s.arch.swa_window) {
            locks_log(LOCKS_LOG_ERROR, "cuda engine: the sliding-window rings (%d slots) hold no window of %d",
                      e->rings.cap, e->m->s.arch.swa_window);
            return LOCKS_ERR_INVALID_ARG;
        }
        if (p->selector == LOCKS_SEL_FULL || p->budget >= len) continue;
        const int32_t n_full = len / 16, part = len % 16;
        const int32_t sink = n_full < p->n_sink ? n_full : p->n_sink;
        int32_t rs = n_full - p->n_recent;
        if (rs < sink) rs = sink;
        if (16 * (sink + n_full - rs) + part > p->budget) return LOCKS_ERR_BUDGET;
    }
    return LOCKS_OK;
}

/* The decode rows' slots on the device: e->row_slot for the prep kernels (-1: idle), and the
 * step's ws.seq_slots, where an idle row reads row 0's sequence. The step thus always runs
 * all n_seqs rows, so its work split (score blocks, attention splits: sized by the rows)
 * and with it every row's arithmetic is the same whichever rows are idle: a sequence
 * decoded in any subset gets the logits it gets in the full batch, bit for bit. */
static locks_status own_slots(lg_ctx *e) {
    int32_t step[MAX_ENGINE_SEQS], rows[MAX_ENGINE_SEQS];
    for (int32_t i = 0; i < e->n_seqs; i++) {
        const int live = i < e->n_rows;
        rows[i] = live ? e->h_rows[i] : -1;
        step[i] = live ? e->h_rows[i] : e->h_rows[0];
    }
    /* a new row set is uploaded whoever owned the slots; the upload drains the stream
     * (e->st is the cache's), so the rows' slots can be copied after it */
    LOCKS_TRY(locks_cuda_use_slots(e->cc, step, e->n_seqs, e, e->rows_dirty));
    if (e->rows_dirty) {
        CU_TRY(cudaMemcpy(e->row_slot, rows, (size_t)e->n_seqs * 4, cudaMemcpyHostToDevice));
        e->rows_dirty = 0;
    }
    return LOCKS_OK;
}

static locks_status capture(lg_ctx *e, int parts) {
    cudaGraph_t g = NULL;
    CU_TRY(cudaStreamBeginCapture(e->st, cudaStreamCaptureModeThreadLocal));
    locks_status st = enqueue_decode(e, parts);
    cudaError_t ce = cudaStreamEndCapture(e->st, &g);
    if (st != LOCKS_OK) {
        if (g) cudaGraphDestroy(g);
        return st;
    }
    CU_TRY(ce);
    cudaError_t ie = cudaGraphInstantiate(&e->graph[parts], g, 0);
    cudaGraphDestroy(g);
    CU_TRY(ie);
    return LOCKS_OK;
}

extern "C" locks_status lg_decode(lg_ctx *e, int use_graph, int32_t *next, float *logits) {
    if (!e) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(check_lengths(e));
    LOCKS_TRY(own_slots(e));
    if (use_graph) {
        if (!e->graph[LG_PART_ALL]) LOCKS_TRY(capture(e, LG_PART_ALL));
        CU_TRY(cudaGraphLaunch(e->graph[LG_PART_ALL], e->st));
    } else {
        LOCKS_TRY(enqueue_decode(e, LG_PART_ALL));
    }
    const lg_shape *s = &e->m->s;
    /* the device wrote slot len - 1 of every layer of every row's sequence: mark it in the
     * host's written-slot masks, so summary reads and later locks_cache_write calls (prefill)
     * see the page's true fill */
    for (int32_t q = 0; q < e->n_rows; q++) {
        const locks_seq *sq = locks_cache_seq(e->cache, e->h_rows[q]);
        const int32_t pos = sq->len - 1;
        for (int32_t l = 0; l < e->cache->p.n_layers; l++)
            e->cache->fill[(size_t)l * e->cache->p.n_pages + sq->table[pos / LOCKS_PAGE]] |=
                (uint16_t)(1u << (pos % LOCKS_PAGE));
    }
    if (next) CU_TRY(cudaMemcpyAsync(next, e->tok, (size_t)e->n_rows * 4, cudaMemcpyDeviceToHost, e->st));
    if (logits)
        CU_TRY(cudaMemcpyAsync(logits, e->logits, (size_t)e->n_rows * s->n_vocab * 4, cudaMemcpyDeviceToHost, e->st));
    CU_TRY(cudaStreamSynchronize(e->st));
    return LOCKS_OK;
}

extern "C" locks_status lg_sample_prefill(lg_ctx *e, int32_t seq, int32_t *tok) {
    if (!e || !tok || seq < 0 || seq >= e->n_seqs) return LOCKS_ERR_INVALID_ARG;
    const int32_t V = e->m->s.n_vocab;
    LOCKS_TRY(lg_sample_launch(e->logits + (size_t)seq * V, 1, V, e->samp, e->counter, e->samp_ws, e->n_seqs, e->tok + seq,
                               e->st));
    CU_TRY(cudaMemcpyAsync(tok, e->tok + seq, 4, cudaMemcpyDeviceToHost, e->st));
    CU_TRY(cudaStreamSynchronize(e->st));
    return LOCKS_OK;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

extern "C" locks_status lg_time_decode(lg_ctx *e, int parts, int trials, double *median_ms) {
    if (!e || parts < 1 || (parts & ~LG_PART_ALL) || trials < 1 || trials > 64 || !median_ms) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(check_lengths(e));
    LOCKS_TRY(own_slots(e));
    if (!e->graph[parts]) LOCKS_TRY(capture(e, parts));
    double t[64];
    CU_TRY(cudaGraphLaunch(e->graph[parts], e->st)); /* warm-up */
    CU_TRY(cudaStreamSynchronize(e->st));
    for (int i = 0; i < trials; i++) {
        CU_TRY(cudaEventRecord(e->ev0, e->st));
        CU_TRY(cudaGraphLaunch(e->graph[parts], e->st));
        CU_TRY(cudaEventRecord(e->ev1, e->st));
        CU_TRY(cudaEventSynchronize(e->ev1));
        float ms = 0.f;
        CU_TRY(cudaEventElapsedTime(&ms, e->ev0, e->ev1));
        t[i] = (double)ms;
    }
    qsort(t, (size_t)trials, sizeof t[0], cmp_d);
    *median_ms = t[trials / 2];
    return LOCKS_OK;
}

extern "C" locks_status lg_profile_decode(lg_ctx *e, int parts) {
    if (!e || parts < 1 || (parts & ~LG_PART_ALL)) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(check_lengths(e));
    LOCKS_TRY(own_slots(e));
    if (!e->graph[parts]) LOCKS_TRY(capture(e, parts));
    CU_TRY(cudaGraphLaunch(e->graph[parts], e->st)); /* warm-up, outside the range */
    CU_TRY(cudaStreamSynchronize(e->st));
    CU_TRY(cudaProfilerStart());
    const cudaError_t le = cudaGraphLaunch(e->graph[parts], e->st);
    const cudaError_t se = cudaStreamSynchronize(e->st);
    CU_TRY(cudaProfilerStop()); /* stopped also when the replay failed */
    CU_TRY(le);
    CU_TRY(se);
    return LOCKS_OK;
}

/* ================================================================================ */
/* Single ops for the tests                                                         */
/* ================================================================================ */

extern "C" locks_status lg_op_rmsnorm(const float *d_x, const float *d_w, int32_t n, int32_t dim, float eps,
                                      locks_dtype out_type, void *d_out) {
    LOCKS_TRY(lg_rmsnorm_launch(d_x, d_w, n, dim, eps, out_type, d_out, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}
extern "C" locks_status lg_op_small(int op, int how, const float *d_x, const float *d_w, int32_t n, int32_t cols,
                                    float eps, locks_dtype out_type, void *d_out) {
    if (op < 0 || op > 2 || how < LG_OPS_PLAIN || how > LG_OPS_PDL || !d_x || !d_out || n < 1 || cols < 1 ||
        (op == 0 && !d_w))
        return LOCKS_ERR_INVALID_ARG;
    const size_t in = (size_t)n * cols * (op == 1 ? 2 : 1);
    float *scratch = NULL;
    cudaStream_t st = NULL;
    CU_TRY(cudaMalloc((void **)&scratch, in * 4));
    locks_status r = LOCKS_OK;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) st = NULL, r = LOCKS_ERR_BACKEND;
    if (r == LOCKS_OK && (cudaMemsetAsync(scratch, 0xff, in * 4, st) != cudaSuccess)) r = LOCKS_ERR_BACKEND;
    if (r == LOCKS_OK) r = lg_cast_launch(d_x, in, LOCKS_DTYPE_F32, scratch, st); /* the producer kernel */
    if (r == LOCKS_OK && op == 0) r = lg_rmsnorm_launch_ex(scratch, d_w, n, cols, eps, out_type, d_out, how, st);
    if (r == LOCKS_OK && op == 1) r = lg_swiglu_launch_ex(scratch, n, cols, out_type, d_out, how, st);
    if (r == LOCKS_OK && op == 2) r = lg_cast_launch_ex(scratch, in, out_type, d_out, how, st);
    if (st && cudaStreamSynchronize(st) != cudaSuccess && r == LOCKS_OK) r = LOCKS_ERR_BACKEND;
    if (st) cudaStreamDestroy(st);
    cudaFree(scratch);
    return r;
}
extern "C" locks_status lg_op_rope(float *d_x, int32_t n, int32_t row_stride, int32_t n_heads, int32_t head_dim,
                                   int32_t n_rot, const float *d_inv_freq, const int32_t *d_pos, int neox) {
    LOCKS_TRY(lg_rope_launch(d_x, n, row_stride, n_heads, head_dim, n_rot, d_inv_freq, d_pos, neox, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}
extern "C" locks_status lg_op_swiglu(const float *d_gu, int32_t n, int32_t ffn, locks_dtype out_type, void *d_out) {
    LOCKS_TRY(lg_swiglu_launch(d_gu, n, ffn, out_type, d_out, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}
extern "C" locks_status lg_op_embed(const void *d_e, locks_dtype etype, const int32_t *d_tok, int32_t n, int32_t dim,
                                    float *d_x) {
    LOCKS_TRY(lg_embed_launch(d_e, etype, d_tok, n, dim, d_x, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}
extern "C" locks_status lg_op_embed_scaled(const void *d_e, locks_dtype etype, const int32_t *d_tok, int32_t n,
                                           int32_t dim, float scale, float *d_x) {
    LOCKS_TRY(lg_embed_scaled_launch(d_e, etype, d_tok, n, dim, scale, d_x, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}
extern "C" locks_status lg_op_geglu(const float *d_gu, int32_t n, int32_t ffn, locks_dtype out_type, void *d_out) {
    LOCKS_TRY(lg_geglu_launch(d_gu, n, ffn, out_type, d_out, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}
extern "C" locks_status lg_op_qkv_fix(float *d_qkv, int32_t n, int32_t row_stride, int32_t hq, int32_t hkv, int32_t d,
                                      const float *d_b, const float *d_qn, const float *d_kn, float eps) {
    if (!d_qkv || n < 1 || hq < 1 || hkv < 1 || d < 1 || row_stride < (hq + 2 * hkv) * d || !d_qn != !d_kn)
        return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(lg_qkv_fix_launch(d_qkv, n, row_stride, hq, hkv, d, d_b, d_qn, d_kn, eps, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}
extern "C" locks_status lg_op_norm_add(float *d_x, const float *d_y, const float *d_w, int32_t n, int32_t dim,
                                       float eps) {
    if (!d_x || !d_y || !d_w || n < 1 || dim < 1) return LOCKS_ERR_INVALID_ARG;
    LOCKS_TRY(lg_norm_add_launch(d_x, d_y, d_w, n, dim, eps, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}
extern "C" locks_status lg_op_swa(uint16_t *d_ring, int32_t cap, int32_t hkv, int32_t d, const float *d_qkv,
                                  int32_t row_stride, int32_t hq, const int32_t *d_pos, int32_t n, int32_t window,
                                  float scale, float *d_out) {
    if (!d_ring || !d_qkv || !d_pos || !d_out || cap < 1 || hkv < 1 || hq < 1 || hq % hkv || n < 1 || window < 1 ||
        row_stride < (hq + 2 * hkv) * d)
        return LOCKS_ERR_INVALID_ARG;
    const lg_swa_rings r = {d_ring, 1, cap, hkv, d};
    LOCKS_TRY(lg_swa_store_launch(&r, 0, d_qkv, row_stride, hq * d, d_pos, NULL, 0, n, 0));
    LOCKS_TRY(lg_swa_attend_launch(&r, 0, d_qkv, row_stride, hq, d_pos, NULL, 0, n, window, scale, d_out, hq * d, 0));
    CU_TRY(cudaDeviceSynchronize());
    return LOCKS_OK;
}
extern "C" locks_status lg_op_attn_prep(locks_cache *c, int32_t layer, float *d_qkv, int32_t n_seqs, int32_t n_heads,
                                        int32_t n_rot, const float *d_inv_freq, const int32_t *d_pos) {
    if (!c || !c->cuda || !d_qkv || !d_inv_freq || !d_pos || layer < 0 || layer >= c->p.n_layers || n_seqs < 1 ||
        n_seqs > c->p.max_seqs || n_heads < 1 || n_rot < 2 || n_rot > c->p.head_dim || n_rot % 2)
        return LOCKS_ERR_INVALID_ARG;
    const int32_t row = (n_heads + 2 * c->p.n_kv_heads) * c->p.head_dim;
    LOCKS_TRY(lg_attn_prep_launch(c->cuda, layer, d_qkv, row, n_heads, n_rot, d_inv_freq, d_pos, n_seqs,
                                  c->cuda->stream));
    CU_TRY(cudaStreamSynchronize(c->cuda->stream));
    return LOCKS_OK;
}
extern "C" locks_status lg_op_prefill_attend(locks_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                             const float *d_q, int32_t n_q_heads, float scale, float *d_out) {
    if (!c || !c->cuda || layer < 0 || layer >= c->p.n_layers || seq < 0 || seq >= c->p.max_seqs || pos < 0 || n < 1 ||
        locks_cache_seq_len(c, seq) < pos + n || n_q_heads % c->p.n_kv_heads != 0)
        return LOCKS_ERR_INVALID_ARG;
    if (scale <= 0.f) scale = 1.f / sqrtf((float)c->p.head_dim);
    LOCKS_TRY(lg_prefill_attend_launch(c->cuda, layer, seq, pos, n, d_q, n_q_heads, scale, d_out, c->cuda->stream));
    CU_TRY(cudaStreamSynchronize(c->cuda->stream));
    return LOCKS_OK;
}
extern "C" locks_status lg_op_verify_attend(locks_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                                            const float *d_q, int32_t n_q_heads, float scale, int32_t n_seqs,
                                            int32_t max_list, float *d_out) {
    if (!c || !c->cuda || c->cuda->ext_k || layer < 0 || layer >= c->p.n_layers || seq < 0 || seq >= c->p.max_seqs ||
        pos < 0 || n < 1 || locks_cache_seq_len(c, seq) < pos + n || n_q_heads % c->p.n_kv_heads != 0 ||
        n_q_heads / c->p.n_kv_heads > 16 || n_seqs < 1 || max_list < (pos + n + 15) / 16)
        return LOCKS_ERR_INVALID_ARG;
    if (scale <= 0.f) scale = 1.f / sqrtf((float)c->p.head_dim);
    void *ws = NULL;
    CU_TRY(cudaMalloc(&ws, lg_verify_ws_bytes(c->cuda, n, n_q_heads, n_seqs, max_list)));
    locks_status st = lg_verify_attend_launch(c->cuda, layer, seq, pos, n, d_q, n_q_heads * c->p.head_dim, n_q_heads,
                                              scale, n_seqs, max_list, ws, d_out, c->cuda->stream);
    if (st == LOCKS_OK && cudaStreamSynchronize(c->cuda->stream) != cudaSuccess) st = LOCKS_ERR_BACKEND;
    cudaFree(ws);
    return st;
}
extern "C" locks_status lg_op_attend_decode(locks_cache *c, int32_t layer, int32_t seq, const float *d_q,
                                            int32_t n_q_heads, float scale, int32_t max_list, float *d_out) {
    if (!c || !c->cuda || layer < 0 || layer >= c->p.n_layers || seq < 0 || seq >= c->p.max_seqs ||
        locks_cache_seq_len(c, seq) < 1 || n_q_heads % c->p.n_kv_heads != 0 ||
        max_list < (locks_cache_seq_len(c, seq) + 15) / 16 || max_list > locks_cuda_ws_max_pages(c->cuda))
        return LOCKS_ERR_INVALID_ARG;
    locks_cuda_cache *cc = c->cuda;
    if (scale <= 0.f) scale = 1.f / sqrtf((float)c->p.head_dim);
    LOCKS_TRY(locks_cuda_ws_reserve(cc, 1, n_q_heads));
    LOCKS_TRY(locks_cuda_use_slots(cc, &seq, 1, NULL, 1));
    LOCKS_TRY(locks_cuda_qprep_launch(cc, d_q, n_q_heads * c->p.head_dim, 1, n_q_heads, scale, cc->stream));
    /* the dense path of locks_cuda_step_enqueue (an engine of one sequence) */
    LOCKS_TRY(locks_cuda_attend_launch(cc, layer, 1, n_q_heads, NULL, NULL, 0, 1, max_list, d_out, NULL, cc->stream));
    CU_TRY(cudaStreamSynchronize(cc->stream));
    return LOCKS_OK;
}
extern "C" locks_status lg_op_sample(const float *d_logits, int32_t n_rows, int32_t n_vocab, const lg_sample_params *p,
                                     uint64_t *d_counter, int32_t *d_tok) {
    lg_sample_params *dp = NULL;
    uint64_t *ws = NULL;
    CU_TRY(cudaMalloc((void **)&dp, sizeof *dp));
    locks_status st = LOCKS_OK;
    if (cudaMalloc((void **)&ws, lg_sample_ws_bytes(n_rows)) != cudaSuccess) {
        ws = NULL;
        st = LOCKS_ERR_OOM;
    }
    if (st == LOCKS_OK && (cudaMemcpy(dp, p, sizeof *p, cudaMemcpyHostToDevice) != cudaSuccess ||
                           cudaMemset(ws, 0, lg_sample_ws_bytes(n_rows)) != cudaSuccess))
        st = LOCKS_ERR_BACKEND;
    if (st == LOCKS_OK) st = lg_sample_launch(d_logits, n_rows, n_vocab, dp, d_counter, ws, n_rows, d_tok, 0);
    if (st == LOCKS_OK && cudaDeviceSynchronize() != cudaSuccess) st = LOCKS_ERR_BACKEND;
    cudaFree(dp);
    if (ws) cudaFree(ws);
    return st;
}
