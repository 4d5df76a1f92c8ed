/*
 * engine_cuda.c — llama.c's context on the GPU (see engine_cuda.h): checks a model and
 * its parameters against the engine's capability list, loads the weights of the view
 * llama.c gives into a device model (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K matrices as they are,
 * laid out for qgemv.cu; other block types dequantized row by row on the host),
 * creates the CUDA cache and the device engine, and runs prefill chunks and decode tokens
 * through them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_cuda.h"
#include "plan.h"
#include "util.h"

/* ---- The capability list ------------------------------------------------------------ */

/* The device engine runs the layers of llama.c's ARCHS table: Llama's, and its variants as
 * the view's flags and tensors say: Q/K/V biases (qwen2), QK-norm (qwen3, gemma3), NeoX
 * RoPE (qwen2, qwen3, gemma3), post-branch norms, GeGLU, scaled embeddings and the
 * sliding-window local layers (gemma3). Matrices of Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K stay quantized on the device
 * (qgemv.cu); the other types the loader reads, and the token embedding, are dequantized
 * row by row on the host (matmul_row_f32) to the device's 16-bit type. The step runs the full and
 * LOCKS selectors over quantized summaries (the CUDA backend's layout). */
static const char *const caps_archs[] = {"llama", "qwen2", "qwen3", "gemma3"};
static const ggml_type caps_types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0,
                                       GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
                                       GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
static const locks_selector caps_selectors[] = {LOCKS_SEL_FULL, LOCKS_SEL_LOCKS};
#define N_OF(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))
static const engine_cuda_caps caps = {
    caps_archs, N_OF(caps_archs), caps_types, N_OF(caps_types), caps_selectors, N_OF(caps_selectors),
    8 /* LOCKS_CUDA_MAX_RANK */, 0,
};

const engine_cuda_caps *engine_cuda_capabilities(void) { return &caps; }

static int type_listed(ggml_type t) {
    for (int32_t i = 0; i < caps.n_weight_types; i++)
        if (caps.weight_types[i] == t) return 1;
    return 0;
}

/* Every matrix of the view, named for the message. */
static locks_status check_weight(const matmul_weight *w, const char *name, int32_t layer) {
    if (!w) return locks_fail(LOCKS_ERR_INVALID_ARG, "engine_cuda_check: layer %d has no %s", layer, name);
    if (type_listed(w->type)) return LOCKS_OK;
    locks_log(LOCKS_LOG_ERROR, "model: the GPU engine does not upload %s weights (%s, layer %d); use the CPU backend",
              ggml_type_name(w->type), name, layer);
    return locks_fail(LOCKS_ERR_UNSUPPORTED,
                      "engine_cuda_check: weight type %s (%s, layer %d) is not in the GPU engine's list; use the "
                      "CPU backend",
                      ggml_type_name(w->type), name, layer);
}

locks_status engine_cuda_check(const engine_cuda_model *m, const locks_ctx_params *p) {
    if (!m || !p) return locks_fail(LOCKS_ERR_INVALID_ARG, "engine_cuda_check: NULL model or parameters");
    int listed = 0;
    for (int32_t i = 0; i < caps.n_archs; i++) listed |= !strcmp(m->info.arch, caps.archs[i]);
    if (!listed) {
        locks_log(LOCKS_LOG_ERROR,
                  "model: the GPU engine runs llama, qwen2, qwen3 and gemma3, not %s (use the CPU backend)",
                  m->info.arch);
        return locks_fail(LOCKS_ERR_UNSUPPORTED,
                          "engine_cuda_check: architecture %s: the GPU engine runs llama, qwen2, qwen3 and gemma3 "
                          "only; use the CPU backend",
                          m->info.arch);
    }
    if (m->info.swa_window > 0 && (m->info.swa_period < 1 || m->info.n_layers < m->info.swa_period)) {
        locks_log(LOCKS_LOG_ERROR, "model: %s: sliding-window layers with no global layer: use the CPU backend",
                  m->info.arch);
        return locks_fail(LOCKS_ERR_UNSUPPORTED,
                          "engine_cuda_check: %s: %d layers, every %d-th global: the GPU engine needs a global layer",
                          m->info.arch, m->info.n_layers, m->info.swa_period);
    }
    listed = 0;
    for (int32_t i = 0; i < caps.n_selectors; i++) listed |= p->step.selector == caps.selectors[i];
    if (!listed) {
        locks_log(LOCKS_LOG_ERROR, "model: selector %s runs on the CPU backend only (the GPU runs full and locks)",
                  locks_selector_name(p->step.selector));
        return locks_fail(LOCKS_ERR_UNSUPPORTED,
                          "engine_cuda_check: selector %s: the GPU engine runs full and locks only; use the CPU "
                          "backend",
                          locks_selector_name(p->step.selector));
    }
    if (p->rank > caps.max_rank || p->summary_prec != LOCKS_SUMMARY_Q) {
        locks_log(LOCKS_LOG_ERROR, "model: the GPU keeps quantized summaries of rank <= %d (asked: rank %d%s)",
                  caps.max_rank, p->rank, p->summary_prec != LOCKS_SUMMARY_Q ? ", fp32" : "");
        return locks_fail(LOCKS_ERR_UNSUPPORTED,
                          "engine_cuda_check: rank %d%s: the GPU engine keeps quantized summaries of rank <= %d",
                          p->rank, p->summary_prec != LOCKS_SUMMARY_Q ? " fp32" : "", caps.max_rank);
    }
    if (!caps.callbacks && (p->on_query || p->on_step)) {
        locks_log(LOCKS_LOG_ERROR, "model: on_query / on_step callbacks need the CPU backend");
        return locks_fail(LOCKS_ERR_UNSUPPORTED,
                          "engine_cuda_check: on_query / on_step callbacks: the GPU engine has none; use the CPU "
                          "backend");
    }
    /* the optional vectors: all layers alike (the device layout has them in every layer or none) */
    for (int32_t l = 0; l < m->info.n_layers; l++) {
        const engine_cuda_layer *a = &m->layers[0], *b = &m->layers[l];
        if (!a->q_norm != !b->q_norm || !a->k_norm != !b->k_norm || !a->post_attn_norm != !b->post_attn_norm ||
            !a->post_ffn_norm != !b->post_ffn_norm || !a->bq != !b->bq || !a->bk != !b->bk || !a->bv != !b->bv ||
            !b->q_norm != !b->k_norm || !b->post_attn_norm != !b->post_ffn_norm || !b->bq != !b->bk ||
            !b->bq != !b->bv)
            return locks_fail(LOCKS_ERR_UNSUPPORTED,
                              "engine_cuda_check: layer %d's QK-norms, post-norms or biases are not layer 0's, or "
                              "come without their pair: the GPU engine needs each in every layer or none",
                              l);
    }
    locks_status st = check_weight(m->tok_embd, "token_embd", 0);
    if (st == LOCKS_OK && !m->tied) st = check_weight(m->output, "output", 0);
    for (int32_t l = 0; l < m->info.n_layers && st == LOCKS_OK; l++) {
        const engine_cuda_layer *L = &m->layers[l];
        const struct {
            const matmul_weight *w;
            const char *name;
        } ws[] = {{L->wq, "attn_q"},        {L->wk, "attn_k"},    {L->wv, "attn_v"},       {L->wo, "attn_output"},
                  {L->w_gate, "ffn_gate"}, {L->w_up, "ffn_up"}, {L->w_down, "ffn_down"}};
        for (int32_t i = 0; i < N_OF(ws) && st == LOCKS_OK; i++) st = check_weight(ws[i].w, ws[i].name, l);
    }
    return st;
}

int32_t engine_cuda_swa_cap(const locks_model_info *in, const locks_ctx_params *p) {
    if (in->swa_window <= 0) return 0;
    const int64_t chunk = p->n_batch > ENGINE_CUDA_MIN_CHUNK ? p->n_batch : ENGINE_CUDA_MIN_CHUNK;
    const int64_t keep = p->swa_rollback > chunk ? p->swa_rollback : chunk;
    const int64_t cap = (int64_t)in->swa_window - 1 + keep;
    return (int32_t)(cap < p->n_ctx ? cap : p->n_ctx);
}

#ifndef LOCKS_HAVE_CUDA

engine_cuda *engine_cuda_init(const engine_cuda_model *m, const locks_ctx_params *p, locks_cache **cache,
                              locks_status *err) {
    *cache = NULL;
    locks_status st = engine_cuda_check(m, p);
    if (st == LOCKS_OK) {
        locks_log(LOCKS_LOG_ERROR, "model: the CUDA backend is not built in (configure with -DLOCKS_CUDA=ON)");
        st = locks_fail(LOCKS_ERR_UNSUPPORTED, "engine_cuda_init: the CUDA backend is not built in (configure with "
                                               "-DLOCKS_CUDA=ON)");
    }
    if (err) *err = st;
    return NULL;
}
void engine_cuda_free(engine_cuda *g) { (void)g; }
lg_model *engine_cuda_upload(const engine_cuda_model *m, locks_status *err) {
    const locks_ctx_params p = locks_ctx_default_params();
    locks_status st = engine_cuda_check(m, &p);
    if (st == LOCKS_OK)
        st = locks_fail(LOCKS_ERR_UNSUPPORTED, "engine_cuda_upload: the CUDA backend is not built in (configure with "
                                               "-DLOCKS_CUDA=ON)");
    if (err) *err = st;
    return NULL;
}
locks_status engine_cuda_forward(engine_cuda *g, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos,
                                 int decode, float *logits, const locks_step_params *step, int32_t n_ctx,
                                 locks_run_stats *stats) {
    (void)g, (void)seq, (void)tokens, (void)n, (void)pos, (void)decode, (void)logits, (void)step, (void)n_ctx,
        (void)stats;
    return LOCKS_ERR_UNSUPPORTED;
}
locks_status engine_cuda_decode_seqs(engine_cuda *g, const int32_t *seqs, int32_t n, const int32_t *tokens,
                                     const int32_t *pos, float *logits, const locks_step_params *step, int32_t n_ctx,
                                     locks_run_stats *stats) {
    (void)g, (void)seqs, (void)n, (void)tokens, (void)pos, (void)logits, (void)step, (void)n_ctx, (void)stats;
    return LOCKS_ERR_UNSUPPORTED;
}
locks_status engine_cuda_verify(engine_cuda *g, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos,
                                float *logits) {
    (void)g, (void)seq, (void)tokens, (void)n, (void)pos, (void)logits;
    return LOCKS_ERR_UNSUPPORTED;
}
locks_status engine_cuda_set_sampler(engine_cuda *g, locks_sampler_params p) {
    (void)g, (void)p;
    return LOCKS_ERR_UNSUPPORTED;
}
locks_status engine_cuda_sample_prefill(engine_cuda *g, int32_t *tok) {
    (void)g, (void)tok;
    return LOCKS_ERR_UNSUPPORTED;
}
int32_t engine_cuda_next(const engine_cuda *g) {
    (void)g;
    return -1;
}

#else
#include "cuda/locks_cuda.h"
#include "model_cuda.h"

_Static_assert(LOCKS_CUDA_MAX_RANK == 8, "the capability list's max_rank is the device's rank slots");

struct engine_cuda {
    lg_model *dm;
    lg_ctx *e;
    int use_graph;
    int32_t n_seqs;
    int32_t next[LOCKS_CTX_MAX_SEQS]; /* tokens the last decode sampled, by row */
    int32_t head_dim, n_kv_heads, rank;
};

void engine_cuda_free(engine_cuda *g) {
    if (!g) return;
    lg_ctx_free(g->e);
    lg_model_free(g->dm);
    locks_free(g);
}

/* Rows [row0, row0 + w->rows) of tensor t from a GGUF weight, converted to the device type. */
static locks_status upload_weight(lg_model *dm, lg_tensor t, int32_t layer, int32_t row0, const matmul_weight *w,
                                  locks_dtype type, float *f32, uint16_t *h16, int32_t batch) {
    for (int32_t r0 = 0; r0 < w->rows; r0 += batch) {
        const int32_t nr = w->rows - r0 < batch ? w->rows - r0 : batch;
        for (int32_t r = 0; r < nr; r++) {
            matmul_row_f32(w, r0 + r, f32);
            uint16_t *o = h16 + (size_t)r * w->cols;
            for (int32_t i = 0; i < w->cols; i++)
                o[i] = type == LOCKS_DTYPE_BF16 ? locks_f32_to_bf16(f32[i]) : locks_f32_to_f16(f32[i]);
        }
        locks_status st = lg_model_upload(dm, t, layer, row0 + r0, nr, h16);
        if (st != LOCKS_OK) return st;
    }
    return LOCKS_OK;
}

static int is_bf16(const matmul_weight *w) { return w->type == GGML_TYPE_BF16; }

/* 1 if the device keeps w in its own type (qgemv.cu), as model_engine.cu's layout decides. */
static int kept_quantized(const matmul_weight *w) {
    return locks_cuda_get_lab().engine_qweights && lg_qtype_supported(w->type) &&
           lg_qmat_bytes(w->type, w->rows, w->cols) > 0;
}

/* The device shape of m; qt [LG_QTYPES(n_layers)] receives every matrix's type. */
static lg_shape device_shape(const engine_cuda_model *m, int32_t *qt) {
    const locks_model_info in = m->info;
    lg_shape sh = {0};
    sh.n_vocab = in.n_vocab;
    sh.dim = in.dim;
    sh.n_layers = in.n_layers;
    sh.n_heads = in.n_heads;
    sh.n_kv_heads = in.n_kv_heads;
    sh.head_dim = in.head_dim;
    sh.ffn_dim = in.ffn_dim;
    sh.n_rot = m->n_rot;
    sh.rope_theta = in.rope_theta;
    sh.norm_eps = in.norm_eps;
    sh.tied = m->tied;
    sh.device = 0;
    const engine_cuda_layer *L0 = &m->layers[0];
    sh.arch = (lg_arch){m->rope_neox, L0->bq != NULL, L0->q_norm != NULL, L0->post_attn_norm != NULL, m->geglu,
                        m->emb_scale, in.swa_window, in.swa_period, in.rope_theta_swa};
    /* The 16-bit type of the products' inputs (and of the weights kept in 16 bits): fp16
     * unless the file holds BF16, and BF16 for Gemma 3, whose activations may outgrow
     * fp16: the inputs of Wo and Wdown are not normed (the post-norms act on the products'
     * outputs), and Gemma-family GeGLU outputs are known to pass 65504 in the larger models
     * (llama.cpp and HF run Gemma in bf16 or fp32 for that reason); the residual stream is
     * fp32 here and never rounded. Measured on Gemma 3 270M (the CPU engine instrumented,
     * 1500 tokens of docs/ENGINE.md, 2026-12-08): the largest 16-bit input is 143 (layer 0's
     * GeGLU; the others <= 27), normed inputs <= 31, attention outputs <= 77, so fp16 would
     * hold the 270M with room to spare, but not provably every text or a larger Gemma 3. The
     * cost of bf16: 8 bits of mantissa where fp16 keeps 11, on the Q5_0 matrices (Wq, Wk,
     * Wgate, Wup of the Q4_K_M file, dequantized), the embeddings and every product's input.
     * The lab switch engine_wtype (LOCKS_ENGINE_WTYPE=f16) forces fp16, for the A/B. */
    sh.wtype = is_bf16(L0->wq) || is_bf16(m->tok_embd) || m->emb_scale ? LOCKS_DTYPE_BF16 : LOCKS_DTYPE_F16;
    const int forced = locks_cuda_get_lab().engine_wtype; /* LOCKS_ENGINE_WTYPE (A/B: fp16 on Gemma 3) */
    if (forced == LOCKS_DTYPE_F16 || forced == LOCKS_DTYPE_BF16) sh.wtype = (locks_dtype)forced;
    qt[0] = (int32_t)(m->tied ? m->tok_embd : m->output)->type;
    for (int32_t l = 0; l < in.n_layers; l++) {
        const engine_cuda_layer *L = &m->layers[l];
        const matmul_weight *ws[7] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
        for (int i = 0; i < 7; i++) qt[1 + 7 * l + i] = (int32_t)ws[i]->type;
    }
    sh.qtypes = locks_cuda_get_lab().engine_qweights ? qt : NULL; /* NULL: every matrix 16-bit */
    return sh;
}

/* One matrix part: kept quantized (its file bytes, laid out for the device) or converted. */
static locks_status upload_part(lg_model *dm, lg_tensor t, int32_t layer, int32_t row0, const matmul_weight *w,
                                locks_dtype type, float *f32, uint16_t *h16, int32_t batch) {
    if (kept_quantized(w)) return lg_model_upload_q(dm, t, layer, row0, w->rows, w->data);
    return upload_weight(dm, t, layer, row0, w, type, f32, h16, batch);
}

/* The weights of m into a device model of shape sh (device_shape). */
static lg_model *upload_model(const engine_cuda_model *m, const lg_shape *sh, locks_status *err) {
    locks_status st = LOCKS_OK;
    const locks_model_info in = m->info;
    float *f32 = NULL;
    uint16_t *h16 = NULL;
    lg_model *dm = lg_model_alloc(sh, &st);
    if (!dm) goto fail;
    const int32_t batch = 64, q_dim = in.n_heads * in.head_dim, kv_dim = in.n_kv_heads * in.head_dim;
    int32_t widest = in.dim > in.ffn_dim ? in.dim : in.ffn_dim;
    if (q_dim + 2 * kv_dim > widest) widest = q_dim + 2 * kv_dim; /* the biases bq | bk | bv */
    f32 = locks_alloc((size_t)widest, sizeof(float));
    h16 = locks_alloc((size_t)batch * (size_t)(widest > q_dim ? widest : q_dim), sizeof(uint16_t));
    if (!f32 || !h16) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    if ((st = upload_weight(dm, LG_TOK_EMBD, 0, 0, m->tok_embd, sh->wtype, f32, h16, batch))) goto fail;
    /* the output matrix: its own copy unless it is the 16-bit embedding itself */
    if ((!sh->tied || kept_quantized(m->tok_embd)) &&
        (st = upload_part(dm, LG_OUTPUT, 0, 0, sh->tied ? m->tok_embd : m->output, sh->wtype, f32, h16, batch)))
        goto fail;
    if ((st = lg_model_upload(dm, LG_OUTPUT_NORM, 0, 0, 1, m->output_norm))) goto fail;
    for (int32_t l = 0; l < in.n_layers; l++) {
        const engine_cuda_layer *L = &m->layers[l];
        struct {
            lg_tensor t;
            int32_t row0;
            const matmul_weight *w;
        } parts[] = {{LG_WQKV, 0, L->wq},     {LG_WQKV, q_dim, L->wk},        {LG_WQKV, q_dim + kv_dim, L->wv},
                     {LG_WO, 0, L->wo},       {LG_WGATE_UP, 0, L->w_gate},    {LG_WGATE_UP, in.ffn_dim, L->w_up},
                     {LG_WDOWN, 0, L->w_down}};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
            if ((st = upload_part(dm, parts[i].t, l, parts[i].row0, parts[i].w, sh->wtype, f32, h16, batch)))
                goto fail;
        if ((st = lg_model_upload(dm, LG_ATTN_NORM, l, 0, 1, L->attn_norm)) ||
            (st = lg_model_upload(dm, LG_FFN_NORM, l, 0, 1, L->ffn_norm)))
            goto fail;
        if (sh->arch.qk_norm && ((st = lg_model_upload(dm, LG_Q_NORM, l, 0, 1, L->q_norm)) ||
                                 (st = lg_model_upload(dm, LG_K_NORM, l, 0, 1, L->k_norm))))
            goto fail;
        if (sh->arch.post_norms && ((st = lg_model_upload(dm, LG_POST_ATTN_NORM, l, 0, 1, L->post_attn_norm)) ||
                                    (st = lg_model_upload(dm, LG_POST_FFN_NORM, l, 0, 1, L->post_ffn_norm))))
            goto fail;
        if (sh->arch.qkv_bias) { /* bq | bk | bv, the rows of Wq | Wk | Wv */
            memcpy(f32, L->bq, sizeof(float) * (size_t)q_dim);
            memcpy(f32 + q_dim, L->bk, sizeof(float) * (size_t)kv_dim);
            memcpy(f32 + q_dim + kv_dim, L->bv, sizeof(float) * (size_t)kv_dim);
            if ((st = lg_model_upload(dm, LG_BQKV, l, 0, 1, f32))) goto fail;
        }
    }
    locks_free(f32);
    locks_free(h16);
    if (err) *err = LOCKS_OK;
    return dm;
fail:
    locks_free(f32);
    locks_free(h16);
    lg_model_free(dm);
    if (err) *err = st;
    return NULL;
}

lg_model *engine_cuda_upload(const engine_cuda_model *m, locks_status *err) {
    const locks_ctx_params p = locks_ctx_default_params();
    locks_status st = engine_cuda_check(m, &p);
    int32_t *qt = NULL;
    lg_model *dm = NULL;
    if (st == LOCKS_OK) {
        qt = locks_alloc((size_t)LG_QTYPES(m->info.n_layers), sizeof(int32_t));
        if (!qt) st = LOCKS_ERR_OOM;
    }
    if (st == LOCKS_OK) {
        const lg_shape sh = device_shape(m, qt);
        dm = upload_model(m, &sh, &st);
    }
    locks_free(qt);
    if (err) *err = st;
    return dm;
}

engine_cuda *engine_cuda_init(const engine_cuda_model *m, const locks_ctx_params *p, locks_cache **cache,
                              locks_status *err) {
    locks_status st = LOCKS_OK;
    engine_cuda *g = NULL;
    int32_t *qt = NULL;
    *cache = NULL;
    const locks_model_info in = m->info;
    if ((st = engine_cuda_check(m, p)) != LOCKS_OK) goto fail;
    qt = locks_alloc((size_t)LG_QTYPES(in.n_layers), sizeof(int32_t));
    if (!qt) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    const lg_shape sh = device_shape(m, qt);

    /* does it fit: weights + K/V pool + summaries (+ ~1 GiB for activations and workspace) */
    const int32_t seq_pages = (p->n_ctx + LOCKS_PAGE - 1) / LOCKS_PAGE, n_seqs = p->n_seqs;
    if ((int64_t)seq_pages * n_seqs > INT32_MAX) {
        locks_log(LOCKS_LOG_ERROR, "model: %d sequences of %d tokens: too many pages for one cache", n_seqs, p->n_ctx);
        st = LOCKS_ERR_INVALID_ARG;
        goto fail;
    }
    const int32_t n_pages = seq_pages * n_seqs, n_global = lg_n_global(&sh);
    const int32_t swa_cap = engine_cuda_swa_cap(&in, p);
    const size_t w_bytes = lg_model_bytes(&sh);
    const size_t kv_bytes = (size_t)n_global * n_pages * in.n_kv_heads *
                                ((size_t)LOCKS_PAGE * in.head_dim * 2 * 2 + locks_cuda_summary_stored_bytes(in.head_dim)) +
                            (size_t)(in.n_layers - n_global) * n_seqs * swa_cap * in.n_kv_heads * in.head_dim * 2 * 2;
    size_t free_b = 0, total_b = 0;
    if ((st = lg_device_memory(0, &free_b, &total_b)) != LOCKS_OK) goto fail;
    if (w_bytes + kv_bytes + ((size_t)1 << 30) > free_b) {
        locks_log(LOCKS_LOG_ERROR,
                  "model: does not fit on the GPU: weights %.2f GiB + KV cache of %d x %d tokens %.2f GiB + ~1 GiB "
                  "work space > %.2f GiB free (of %.2f)",
                  w_bytes / 1073741824.0, n_seqs, p->n_ctx, kv_bytes / 1073741824.0, free_b / 1073741824.0,
                  total_b / 1073741824.0);
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    g = locks_alloc(1, sizeof *g);
    if (!g) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    g->use_graph = p->cuda_graph;
    g->rank = p->rank;
    g->n_seqs = n_seqs;
    for (int32_t s = 0; s < LOCKS_CTX_MAX_SEQS; s++) g->next[s] = -1;
    g->dm = upload_model(m, &sh, &st);
    if (!g->dm) goto fail;

    /* ---- cache and engine ---- */
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = n_global; /* the global layers (the local ones: the engine's rings) */
    cp.n_kv_heads = in.n_kv_heads;
    cp.head_dim = in.head_dim;
    cp.n_pages = n_pages;
    cp.max_seqs = n_seqs;
    cp.rank = p->rank;
    cp.summary_prec = LOCKS_SUMMARY_Q;
    cp.kv_dtype = LOCKS_DTYPE_F16;
    cp.backend = LOCKS_BACKEND_CUDA;
    *cache = locks_cache_init(cp, &st);
    if (!*cache) goto fail;
    const int32_t chunk = p->n_batch > ENGINE_CUDA_MIN_CHUNK ? p->n_batch : ENGINE_CUDA_MIN_CHUNK;
    g->e = lg_ctx_init(g->dm, *cache, n_seqs, chunk, swa_cap, &st);
    if (!g->e) goto fail;
    if ((st = lg_set_step(g->e, &p->step, seq_pages * LOCKS_PAGE))) goto fail;
    locks_free(qt);
    if (err) *err = LOCKS_OK;
    return g;
fail:
    locks_free(qt);
    engine_cuda_free(g);
    locks_cache_free(*cache);
    *cache = NULL;
    if (err) *err = st;
    return NULL;
}

/* Attended tokens of one decode step of a sequence of len tokens (the selection rule). */
/* Tokens one (sequence, KV head) attends at length len: the plan's rule (plan.h, the
 * one the device step follows). With a mass target the device may stop short of the
 * budget and does not report how far it went without a synchronisation per token:
 * this is then the budget's cap, an upper bound (locks_model.h, locks_run_stats). */
static int64_t attended(int32_t len, const locks_step_params *p) {
    const locks_plan pl = locks_plan_make(len, p->budget, p->n_sink, p->n_recent, p->selector == LOCKS_SEL_FULL);
    if (pl.every || pl.k < 0) return len;
    return (int64_t)pl.forced + (int64_t)LOCKS_PAGE * pl.k;
}

locks_status engine_cuda_decode_seqs(engine_cuda *g, const int32_t *seqs, int32_t n, const int32_t *tokens,
                                     const int32_t *pos, float *logits, const locks_step_params *step, int32_t n_ctx,
                                     locks_run_stats *stats) {
    lg_shape sh = lg_model_shape(g->dm);
    locks_status st = lg_set_step(g->e, step, ((n_ctx + LOCKS_PAGE - 1) / LOCKS_PAGE) * LOCKS_PAGE);
    if (st == LOCKS_OK) st = lg_set_rows(g->e, seqs, n);
    if (st == LOCKS_OK) st = lg_set_tokens(g->e, tokens);
    if (st == LOCKS_OK) st = lg_decode(g->e, g->use_graph, g->next, logits);
    if (st != LOCKS_OK) return st;
    /* the global layers through the step; the local ones read their window (llama.c's count) */
    const int32_t n_global = lg_n_global(&sh), n_local = sh.n_layers - n_global;
    const uint64_t head_tok = (uint64_t)sh.head_dim * 2 * 2 * (uint64_t)sh.n_kv_heads;
    const uint64_t tok_bytes = head_tok * (uint64_t)n_global;
    for (int32_t s = 0; s < n; s++) {
        const int32_t len = pos[s] + 1;
        const int32_t win = len < sh.arch.swa_window ? len : sh.arch.swa_window;
        const uint64_t local = (uint64_t)win * head_tok * (uint64_t)n_local;
        if (step->selector == LOCKS_SEL_LOCKS)
            stats->bytes_meta += (uint64_t)(len / LOCKS_PAGE) *
                                 locks_summary_bytes(sh.head_dim, g->rank, LOCKS_SUMMARY_Q) *
                                 (uint64_t)sh.n_kv_heads * (uint64_t)n_global;
        stats->bytes_kv += (uint64_t)attended(len, step) * tok_bytes + local;
        stats->bytes_dense += (uint64_t)len * tok_bytes + local;
    }
    return LOCKS_OK;
}

locks_status engine_cuda_forward(engine_cuda *g, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos,
                                 int decode, float *logits, const locks_step_params *step, int32_t n_ctx,
                                 locks_run_stats *stats) {
    if (!decode) return lg_prefill(g->e, seq, tokens, n, pos, logits);
    return engine_cuda_decode_seqs(g, &seq, 1, tokens, &pos, logits, step, n_ctx, stats); /* that sequence alone */
}

locks_status engine_cuda_verify(engine_cuda *g, int32_t seq, const int32_t *tokens, int32_t n, int32_t pos,
                                float *logits) {
    return lg_verify(g->e, seq, tokens, n, pos, logits);
}

locks_status engine_cuda_set_sampler(engine_cuda *g, locks_sampler_params p) {
    lg_sample_params d = {p.temp, p.top_k, p.top_p, p.seed};
    return lg_set_sampler(g->e, &d);
}
locks_status engine_cuda_sample_prefill(engine_cuda *g, int32_t *tok) { return lg_sample_prefill(g->e, 0, tok); }
int32_t engine_cuda_next(const engine_cuda *g) { return g->next[0]; }

#endif
