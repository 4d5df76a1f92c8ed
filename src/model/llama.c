/*
 * llama.c — the Llama-family forward pass over GGUF weights, attending through the
 * LOCKS cache. One forward serves the architectures of the ARCHS table (llama, qwen2,
 * qwen3, gemma3); their differences are switches in it, spelled out below.
 *
 * One transformer block, for a batch of T tokens at positions pos .. pos + T - 1
 * (T = 1 is a decode step, T > 1 a prefill chunk):
 *
 *     h   = x + Wo . attn(rope(Wq . rms(x)), rope(Wk . rms(x)), Wv . rms(x))
 *     out = h + Wdown . (silu(Wgate . rms(h)) * (Wup . rms(h)))
 *
 * with rms(x) = x / sqrt(mean(x^2) + eps) * w. Variants (arch_desc): Q/K/V biases
 * (Qwen2); rms of each head of q and k before RoPE (QK-norm: Qwen3, Gemma 3); RoPE on
 * (x[i], x[i + n_rot/2]) (NeoX: Qwen, Gemma) instead of adjacent pairs; Gemma 3 also
 * scales the embeddings by sqrt(dim), norms each branch's output before the residual
 * add (h = x + rms(Wo . attn), out = h + rms(Wdown . ...)), gates with GELU (tanh) instead
 * of SiLU, and makes five of every six layers local: they attend only the last
 * sliding_window tokens, exactly (swa.c), with their own RoPE base, whatever the
 * selector; the selector and its budget act in the global layers only.
 *
 * K (after RoPE) and V of a global layer go into the cache (which holds only those
 * layers: its layer cache_layer[l]); a prefill chunk attends causally and densely
 * (locks_prefill_attend), a decode step through locks_decode_step with the context's
 * selector and budget. A local layer's K/V go into a ring of its own per sequence
 * (swa.h) that keeps the last swa_cap positions, enough for the window, a prefill chunk
 * and a rollback of max(n_batch, swa_rollback) tokens; no summaries are built for them.
 * The logits are the final rms-normed state times the output matrix (the token
 * embeddings when tied).
 *
 * What always holds: a model holds only tensors whose shapes were checked against the
 * hyper-parameters at load, so the forward pass indexes without further checks. A
 * context's sequence s (0 .. n_seqs - 1, cache sequence seq[s]) holds exactly
 * n_tokens[s] tokens of K/V in every global layer, and in every local layer's ring
 * positions swa_lo[s] .. n_tokens[s] - 1 (swa_lo[s] >= n_tokens[s] - swa_cap); a failed
 * prefill/decode leaves every sequence as it was (the cache is truncated back), and only
 * if that truncation fails is the context broken until locks_ctx_reset.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "cuda/engine_cuda.h"
#include "llama_internal.h"
#include "locks_model.h"
#include "matmul.h"
#include "plan.h"
#include "quant.h"
#include "summary.h"
#include "swa.h"
#include "tokenizer_gguf.h"
#include "util.h"
#include "vmath.h"

/* ================================================================================ */
/* Model                                                                            */
/* ================================================================================ */

/* What sets the supported architectures apart; general.architecture picks the row, and
 * its name prefixes the hyper-parameter keys ("gemma3.embedding_length"). */
typedef struct {
    const char *name;
    int rope_neox;  /* RoPE on (x[i], x[i + n_rot/2]) instead of (x[2i], x[2i+1]) */
    int qkv_bias;   /* attn_{q,k,v}.bias added after the products */
    int qk_norm;    /* attn_{q,k}_norm: rms of each head of q and k, before RoPE */
    int post_norms; /* post_attention_norm, post_ffw_norm on each branch's output */
    int geglu;      /* gate GELU(tanh) (else SiLU) */
    int emb_scale;  /* embeddings times sqrt(dim) */
    int swa;        /* local layers: <arch>.attention.sliding_window, every 6th global */
} arch_desc;

static const arch_desc ARCHS[] = {
    /* name      neox bias qkn post geglu emb swa */
    {"llama",    0,   0,   0,  0,   0,    0,  0},
    {"qwen2",    1,   1,   0,  0,   0,    0,  0},
    {"qwen3",    1,   0,   1,  0,   0,    0,  0},
    {"gemma3",   1,   0,   1,  1,   1,    1,  1},
};
#define GEMMA3_SWA_PERIOD 6   /* layers 5, 11, 17, ... are global (llama.cpp's pattern) */
#define GEMMA3_ROPE_BASE_SWA 10000.0f /* local layers' RoPE base unless the file says */

typedef struct {
    float *attn_norm;     /* (dim,) */
    float *ffn_norm;      /* (dim,) */
    float *q_norm, *k_norm;                /* (head_dim,) QK-norm, or NULL */
    float *post_attn_norm, *post_ffn_norm; /* (dim,) Gemma 3, or NULL */
    float *bq;            /* (n_heads * head_dim,) Qwen2 biases, or NULL */
    float *bk, *bv;       /* (n_kv_heads * head_dim,) */
    int local;            /* sliding-window layer */
    matmul_weight wq;     /* (n_heads * head_dim, dim) */
    matmul_weight wk;     /* (n_kv_heads * head_dim, dim) */
    matmul_weight wv;     /* (n_kv_heads * head_dim, dim) */
    matmul_weight wo;     /* (dim, n_heads * head_dim) */
    matmul_weight w_gate; /* (ffn_dim, dim) */
    matmul_weight w_up;   /* (ffn_dim, dim) */
    matmul_weight w_down; /* (dim, ffn_dim) */
} llama_layer;

struct locks_model {
    gguf *g;
    const arch_desc *arch;
    locks_model_info info;
    int32_t n_rot;          /* rotated dims per head (rope.dimension_count) */
    matmul_weight tok_embd; /* (n_vocab, dim) */
    matmul_weight output;   /* (n_vocab, dim); the embeddings when tied */
    float *output_norm;     /* (dim,) */
    llama_layer *layers;    /* (n_layers,) */
    locks_tokenizer *tok;   /* from the GGUF vocabulary */
};

/* Hyper-parameter "<arch>.<name>" as int32; required unless dflt >= 0 is given. */
static locks_status meta_i32(const gguf *g, const char *arch, const char *name, int32_t dflt, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    locks_status st = gguf_get_i32(g, key, out);
    if (st == LOCKS_ERR_INVALID_ARG && dflt >= 0) {
        *out = dflt;
        return LOCKS_OK;
    }
    if (st != LOCKS_OK)
        return locks_fail(LOCKS_ERR_FORMAT, "key %s is %s", key, st == LOCKS_ERR_INVALID_ARG ? "missing" : "not an integer");
    return LOCKS_OK;
}

/* A 2-D weight (rows, cols) by name, shape-checked. */
static locks_status load_weight(const gguf *g, const char *name, int32_t rows, int32_t cols,
                                matmul_weight *w) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return locks_fail(LOCKS_ERR_FORMAT, "tensor %s is missing", name);
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return locks_fail(LOCKS_ERR_FORMAT, "tensor %s has shape [%lld, %lld, %lld], expected [%d, %d]", name,
                          (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], cols, rows);
    if (matmul_wants_q8(t->type) && cols % GGML_QBLOCK != 0)
        return locks_fail(LOCKS_ERR_FORMAT, "tensor %s (%s): %d columns are not a multiple of %d", name,
                          ggml_type_name(t->type), cols, GGML_QBLOCK);
    size_t bad = 0, n_blocks = (size_t)rows * (size_t)cols / (size_t)(quant_is_ext(t->type) ? quant_block_elems(t->type) : GGML_QBLOCK);
    if (matmul_wants_q8(t->type) && quant_check_scales(t->type, t->data, n_blocks, &bad) != LOCKS_OK)
        return locks_fail(LOCKS_ERR_FORMAT, "tensor %s (%s): block %zu has a non-finite scale", name,
                          ggml_type_name(t->type), bad);
    w->data = t->data;
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = ggml_row_bytes(t->type, cols);
    return LOCKS_OK;
}

/* A 1-D norm weight (n,) dequantized to an owned fp32 array. */
static locks_status load_norm(const gguf *g, const char *name, int32_t n, float **out) {
    matmul_weight w;
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t || t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1 ||
        (matmul_wants_q8(t->type)))
        return locks_fail(LOCKS_ERR_FORMAT, "tensor %s is missing or not a float vector of %d", name, n);
    w = (matmul_weight){t->data, t->type, 1, n, t->nbytes, NULL};
    *out = locks_alloc((size_t)n, sizeof(float));
    if (!*out) return LOCKS_ERR_OOM;
    matmul_row_f32(&w, 0, *out);
    return LOCKS_OK;
}

/* The tokenizer from the GGUF vocabulary (tokenizer_gguf.c). */
static locks_status load_tokenizer(const gguf *g, locks_tokenizer **tok) {
    locks_status st = LOCKS_OK;
    *tok = locks_tokenizer_from_gguf(g, &st);
    return *tok ? LOCKS_OK : st;
}
static void free_tokenizer(locks_tokenizer *tok) { locks_tokenizer_free(tok); }
static int is_eog(const locks_model *m, int32_t tok) {
    return tok == m->info.eos_id || (m->tok && locks_tokenizer_is_eog(m->tok, tok));
}

/* The model from an opened GGUF (taken over: closed with the model, or here on failure). */
/* ---- The loader, in the order it reads the file: architecture, hyper-parameters,
 * token ids, weights, tokenizer. Each failing step says why (locks_fail). ---- */

static locks_status read_arch(const gguf *g, locks_model *m) {
    const char *arch;
    size_t arch_len;
    if (gguf_get_str(g, "general.architecture", &arch, &arch_len) != LOCKS_OK)
        return locks_fail(LOCKS_ERR_FORMAT, "general.architecture is missing");
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (strlen(ARCHS[i].name) == arch_len && memcmp(arch, ARCHS[i].name, arch_len) == 0) m->arch = &ARCHS[i];
    if (!m->arch)
        return locks_fail(LOCKS_ERR_UNSUPPORTED,
                          "general.architecture '%.*s' is not supported (llama, qwen2, qwen3, gemma3)", (int)arch_len,
                          arch);
    snprintf(m->info.arch, sizeof m->info.arch, "%s", m->arch->name);
    return LOCKS_OK;
}

/* The shape (dims, layers, heads), RoPE and norm constants, the sliding window. */
static locks_status read_hparams(const gguf *g, locks_model *m) {
    const char *an = m->arch->name;
    char key[128];
    locks_model_info *in = &m->info;
    locks_status st;
    if ((st = meta_i32(g, an, "embedding_length", -1, &in->dim)) ||
        (st = meta_i32(g, an, "block_count", -1, &in->n_layers)) ||
        (st = meta_i32(g, an, "attention.head_count", -1, &in->n_heads)) ||
        (st = meta_i32(g, an, "attention.head_count_kv", in->n_heads, &in->n_kv_heads)) ||
        (st = meta_i32(g, an, "feed_forward_length", -1, &in->ffn_dim)) ||
        (st = meta_i32(g, an, "context_length", 2048, &in->n_ctx_train)))
        return st;
    if (in->dim <= 0 || in->n_layers <= 0 || in->n_layers > 1024 || in->n_heads <= 0 ||
        in->n_kv_heads <= 0 || in->n_heads % in->n_kv_heads != 0 || in->dim % in->n_heads != 0 ||
        in->ffn_dim <= 0)
        return locks_fail(LOCKS_ERR_FORMAT, "inconsistent hyper-parameters (dim %d, layers %d, heads %d/%d, ffn %d)",
                          in->dim, in->n_layers, in->n_heads, in->n_kv_heads, in->ffn_dim);
    in->head_dim = in->dim / in->n_heads;
    int32_t kl = 0, vl = 0; /* Gemma 3 / Qwen3: heads wider than dim / n_heads */
    if ((st = meta_i32(g, an, "attention.key_length", in->head_dim, &kl)) ||
        (st = meta_i32(g, an, "attention.value_length", kl, &vl)))
        return st;
    if (kl != vl)
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "%s.attention.key_length %d != value_length %d", an, kl, vl);
    in->head_dim = kl;
    if (in->head_dim != 64 && in->head_dim != 128 && in->head_dim != 256)
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "head_dim %d is not supported by the cache (64, 128, 256)",
                          in->head_dim);
    if ((st = meta_i32(g, an, "rope.dimension_count", in->head_dim, &m->n_rot))) return st;
    if (m->n_rot <= 0 || m->n_rot > in->head_dim || m->n_rot % 2 != 0)
        return locks_fail(LOCKS_ERR_FORMAT, "%s.rope.dimension_count %d (must be even, 2..head_dim %d)", an, m->n_rot,
                          in->head_dim);
    in->rope_theta = 10000.0f;
    in->norm_eps = 1e-5f;
    locks_status s1, s2;
    snprintf(key, sizeof key, "%s.rope.freq_base", an);
    s1 = gguf_get_f32(g, key, &in->rope_theta);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", an);
    s2 = gguf_get_f32(g, key, &in->norm_eps);
    if (s1 == LOCKS_ERR_FORMAT || s2 == LOCKS_ERR_FORMAT || !(in->rope_theta > 0.0f) || !(in->norm_eps >= 0.0f))
        return locks_fail(LOCKS_ERR_FORMAT, "bad %s.rope.freq_base or layer_norm_rms_epsilon", an);
    in->rope_theta_swa = in->rope_theta;
    if (m->arch->swa) {
        if ((st = meta_i32(g, an, "attention.sliding_window", -1, &in->swa_window))) return st;
        if (in->swa_window <= 0)
            return locks_fail(LOCKS_ERR_FORMAT, "%s.attention.sliding_window = %d", an, in->swa_window);
        in->swa_period = GEMMA3_SWA_PERIOD;
        in->rope_theta_swa = GEMMA3_ROPE_BASE_SWA;
        snprintf(key, sizeof key, "%s.rope.freq_base_swa", an);
        if (gguf_get_f32(g, key, &in->rope_theta_swa) == LOCKS_ERR_FORMAT || !(in->rope_theta_swa > 0.0f))
            return locks_fail(LOCKS_ERR_FORMAT, "bad %s", key);
    }
    snprintf(key, sizeof key, "%s.rope.scaling.type", an);
    const char *rs;
    size_t rs_len;
    if (gguf_get_str(g, key, &rs, &rs_len) == LOCKS_OK && !(rs_len == 4 && memcmp(rs, "none", 4) == 0))
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "%s '%.*s' is not supported", key, (int)rs_len, rs);
    return LOCKS_OK;
}

/* The special token ids and the model's name (all optional). */
static void read_token_info(const gguf *g, locks_model_info *in) {
    in->bos_id = in->eos_id = -1;
    uint32_t u;
    if (gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &u) == LOCKS_OK && u <= INT32_MAX) in->bos_id = (int32_t)u;
    if (gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &u) == LOCKS_OK && u <= INT32_MAX) in->eos_id = (int32_t)u;
    int b = 0;
    in->add_bos = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == LOCKS_OK ? b : 0;
    const char *name;
    size_t name_len;
    if (gguf_get_str(g, "general.name", &name, &name_len) == LOCKS_OK) {
        if (name_len >= sizeof in->name) name_len = sizeof in->name - 1;
        memcpy(in->name, name, name_len);
        in->name[name_len] = '\0';
    }
}

/* A layer's seven matrices, for what is done to each alike (repack, free). */
static void layer_mats(llama_layer *L, matmul_weight *out[7]) {
    matmul_weight *const all[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    memcpy(out, all, sizeof all);
}

/* w repacked for the AVX-512 kernels where matmul_pack does (Q4_1, Q8_0 up to 64 MB),
 * and then the file's pages of it dropped (held twice otherwise). -1: out of memory. */
static int pack_weight(const gguf *g, matmul_weight *w) {
    if (matmul_pack(w) != 0) return -1;
    if (w->packed) gguf_release(g, w->data, (size_t)w->rows * w->row_bytes);
    return 0;
}

/* Layer l's projections, norms and (by architecture) QK-norms, post-norms, biases. */
static locks_status load_layer(const gguf *g, locks_model *m, int32_t l) {
    const locks_model_info *in = &m->info;
    const int32_t dim = in->dim, q_dim = in->n_heads * in->head_dim, kv_dim = in->n_kv_heads * in->head_dim;
    llama_layer *L = &m->layers[l];
    locks_status st;
    char nm[96];
#define W(field, suffix, rows, cols)                                      \
    snprintf(nm, sizeof nm, "blk.%d." suffix ".weight", (int)l);          \
    if ((st = load_weight(g, nm, rows, cols, &L->field)) != LOCKS_OK) return st
    W(wq, "attn_q", q_dim, dim);
    W(wk, "attn_k", kv_dim, dim);
    W(wv, "attn_v", kv_dim, dim);
    W(wo, "attn_output", dim, q_dim);
    W(w_gate, "ffn_gate", in->ffn_dim, dim);
    W(w_up, "ffn_up", in->ffn_dim, dim);
    W(w_down, "ffn_down", dim, in->ffn_dim);
#undef W
    matmul_weight *mats[7];
    layer_mats(L, mats);
    for (int i = 0; i < 7; i++)
        if (pack_weight(g, mats[i]) != 0) return locks_fail(LOCKS_ERR_OOM, "layer %d: no memory to repack its weights", (int)l);
#define V(field, suffix, n)                                               \
    snprintf(nm, sizeof nm, "blk.%d." suffix, (int)l);                    \
    if ((st = load_norm(g, nm, n, &L->field)) != LOCKS_OK) return st
    V(attn_norm, "attn_norm.weight", dim);
    V(ffn_norm, "ffn_norm.weight", dim);
    if (m->arch->qk_norm) {
        V(q_norm, "attn_q_norm.weight", in->head_dim);
        V(k_norm, "attn_k_norm.weight", in->head_dim);
    }
    if (m->arch->post_norms) {
        V(post_attn_norm, "post_attention_norm.weight", dim);
        V(post_ffn_norm, "post_ffw_norm.weight", dim);
    }
    if (m->arch->qkv_bias) {
        V(bq, "attn_q.bias", q_dim);
        V(bk, "attn_k.bias", kv_dim);
        V(bv, "attn_v.bias", kv_dim);
    }
#undef V
    L->local = in->swa_window > 0 && (l + 1) % in->swa_period != 0;
    return LOCKS_OK;
}

/* The embeddings (which give n_vocab), the output head (tied when absent), every layer. */
static locks_status load_weights(const gguf *g, locks_model *m) {
    locks_model_info *in = &m->info;
    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    if (!te || te->ne[0] != in->dim || te->ne[1] <= 0 || te->ne[1] > INT32_MAX)
        return locks_fail(LOCKS_ERR_FORMAT, "token_embd.weight is missing or not [dim %d, n_vocab]", in->dim);
    in->n_vocab = (int32_t)te->ne[1];
    locks_status st;
    if ((st = load_weight(g, "token_embd.weight", in->n_vocab, in->dim, &m->tok_embd))) return st;
    if (gguf_find_tensor(g, "output.weight")) {
        if ((st = load_weight(g, "output.weight", in->n_vocab, in->dim, &m->output))) return st;
    } else {
        m->output = m->tok_embd; /* tied embeddings */
    }
    if ((st = load_norm(g, "output_norm.weight", in->dim, &m->output_norm))) return st;
    /* the output matrix repacked for the AVX-512 kernels where matmul_pack does (Q8_0 up
     * to 64 MB: SmolLM2's, not Gemma 3's 178 MB); its file pages go (tied embeddings
     * read their rows from the copy) */
    if (pack_weight(g, &m->output) != 0) return locks_fail(LOCKS_ERR_OOM, "no memory to repack the output matrix");
    if (m->output.data == m->tok_embd.data) m->tok_embd.packed = m->output.packed; /* tied: rows from the copy
                                                                                 * (freed with the output's) */
    m->layers = locks_alloc((size_t)in->n_layers, sizeof *m->layers);
    if (!m->layers) return LOCKS_ERR_OOM;
    for (int32_t l = 0; l < in->n_layers; l++)
        if ((st = load_layer(g, m, l)) != LOCKS_OK) return st;
    return LOCKS_OK;
}

static locks_model *model_from_gguf(gguf *gg, locks_status *err) {
    const uint32_t mark = locks_error_mark();
    locks_status st = LOCKS_ERR_OOM;
    locks_model *m = locks_alloc(1, sizeof *m);
    if (!m) {
        gguf_close(gg);
        goto fail;
    }
    matmul_init_tables();
    m->g = gg;
    if ((st = read_arch(gg, m)) != LOCKS_OK || (st = read_hparams(gg, m)) != LOCKS_OK) goto fail;
    read_token_info(gg, &m->info);
    if ((st = load_weights(gg, m)) != LOCKS_OK || (st = load_tokenizer(gg, &m->tok)) != LOCKS_OK) goto fail;
    if (err) *err = LOCKS_OK;
    return m;
fail:
    if (locks_error_mark() != mark) /* a step said why: the reason goes to the log as well */
        locks_log(LOCKS_LOG_ERROR, "model: %s", locks_last_error());
    locks_model_free(m);
    if (err) *err = st;
    return NULL;
}

locks_model *locks_model_load(const char *path, locks_status *err) {
    const uint32_t mark = locks_error_mark();
    locks_status st = LOCKS_OK;
    gguf *g = gguf_open(path, &st);
    locks_model *m = g ? model_from_gguf(g, &st) : NULL;
    if (err) *err = locks_fail_call(st, "locks_model_load", mark);
    return m;
}

locks_model *llama_model_load_buffer(const void *buf, size_t size, locks_status *err) {
    locks_status st = LOCKS_OK;
    gguf *g = gguf_open_buffer(buf, size, &st);
    if (!g) {
        if (err) *err = st;
        return NULL;
    }
    return model_from_gguf(g, err);
}

void locks_model_free(locks_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int32_t l = 0; l < m->info.n_layers; l++) {
            llama_layer *L = &m->layers[l];
            locks_free(L->attn_norm);
            locks_free(L->ffn_norm);
            locks_free(L->q_norm);
            locks_free(L->k_norm);
            locks_free(L->post_attn_norm);
            locks_free(L->post_ffn_norm);
            locks_free(L->bq);
            locks_free(L->bk);
            locks_free(L->bv);
            matmul_weight *mats[7];
            layer_mats(L, mats);
            for (int i = 0; i < 7; i++) matmul_pack_free(mats[i]);
        }
        locks_free(m->layers);
    }
    locks_free(m->output_norm);
    matmul_pack_free(&m->output);
    free_tokenizer(m->tok);
    gguf_close(m->g);
    locks_free(m);
}

locks_model_info locks_model_get_info(const locks_model *m) { return m->info; }

const matmul_weight *llama_model_weight(const locks_model *m, int32_t layer, llama_weight_kind k) {
    if (k == LLAMA_W_TOK_EMBD) return &m->tok_embd;
    if (k == LLAMA_W_OUTPUT) return &m->output;
    if (layer < 0 || layer >= m->info.n_layers) return NULL;
    const llama_layer *L = &m->layers[layer];
    switch (k) {
    case LLAMA_W_Q: return &L->wq;
    case LLAMA_W_K: return &L->wk;
    case LLAMA_W_V: return &L->wv;
    case LLAMA_W_O: return &L->wo;
    case LLAMA_W_GATE: return &L->w_gate;
    case LLAMA_W_UP: return &L->w_up;
    case LLAMA_W_DOWN: return &L->w_down;
    default: return NULL;
    }
}
const float *llama_model_norm(const locks_model *m, int32_t layer, int which) {
    if (which == 2) return m->output_norm;
    if (layer < 0 || layer >= m->info.n_layers) return NULL;
    const llama_layer *L = &m->layers[layer];
    switch (which) {
    case 0: return L->attn_norm;
    case 1: return L->ffn_norm;
    case 3: return L->q_norm;
    case 4: return L->k_norm;
    case 5: return L->post_attn_norm;
    case 6: return L->post_ffn_norm;
    case 7: return L->bq;
    case 8: return L->bk;
    case 9: return L->bv;
    default: return NULL;
    }
}
int32_t llama_model_n_rot(const locks_model *m) { return m->n_rot; }
int llama_model_tied(const locks_model *m) { return m->output.data == m->tok_embd.data; }

/* The GPU engine's view of m (engine_cuda.h): pointers into m, layers[] filled
 * (n_layers entries, the caller's). */
engine_cuda_model llama_gpu_view(const locks_model *m, engine_cuda_layer *layers) {
    for (int32_t l = 0; l < m->info.n_layers; l++) {
        const llama_layer *L = &m->layers[l];
        layers[l] = (engine_cuda_layer){&L->wq,          &L->wk,         &L->wv,       &L->wo,
                                        &L->w_gate,      &L->w_up,       &L->w_down,   L->attn_norm,
                                        L->ffn_norm,     L->q_norm,      L->k_norm,    L->post_attn_norm,
                                        L->post_ffn_norm, L->bq,         L->bk,        L->bv};
    }
    return (engine_cuda_model){m->info,         m->n_rot, llama_model_tied(m), &m->tok_embd, &m->output,
                               m->output_norm,  layers,   m->arch->rope_neox,  m->arch->geglu, m->arch->emb_scale};
}

int32_t locks_model_default_path(char *buf, size_t size) {
    const char *dir = getenv("LOCKS_MODEL_DIR");
    const char *home = getenv("HOME");
    int n;
    if (dir && *dir) n = snprintf(buf, size, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else n = snprintf(buf, size, "%s/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : ".");
    return n;
}

const locks_tokenizer *locks_model_tokenizer(const locks_model *m) { return m->tok; }

/* ================================================================================ */
/* Context                                                                          */
/* ================================================================================ */

struct locks_ctx {
    const locks_model *m;
    locks_ctx_params p;
    locks_cache *cache;
    int32_t n_seqs;                     /* p.n_seqs */
    int32_t seq[LOCKS_CTX_MAX_SEQS];    /* the cache sequence of each of the context's sequences */
    int32_t n_tokens[LOCKS_CTX_MAX_SEQS]; /* and its length */
    locks_pool *pool; /* worker threads, shared with the cache and with clones (one reference) */
    int broken;
    locks_run_stats stats;
    /* activations for up to n_batch tokens */
    float *x;       /* (B, dim) residual stream */
    float *xb;      /* (B, dim) normed input of a matmul */
    float *q;       /* (B, n_heads * head_dim) */
    float *k, *v;   /* (B, n_kv_heads * head_dim) */
    float *att;     /* (B, n_heads * head_dim) attention output */
    float *hb, *hb2; /* (B, ffn_dim) */
    float *proj;    /* (B, dim) output of Wo / Wdown */
    matmul_q8 *xq;  /* (B, max(dim, q_dim, ffn_dim) / 32) quantized activations */
    float *inv_freq; /* (n_rot / 2,) RoPE frequencies theta^(-2i / n_rot) */
    float *inv_freq_swa; /* (n_rot / 2,) the same with the local layers' base */
    float *swa_scratch;  /* (swa_scratch_floats) local attention, or NULL */
    locks_selection sel; /* the decode step's pages, kept only for p.on_step */
    int draft_mode;        /* LLAMA_DRAFT_* (llama_ctx_draft_mode) */
    int32_t draft_max;     /* page slots per (layer, KV head) below */
    int32_t *draft_pages;  /* (n_layers, Hkv, draft_max) the recorded selection, or NULL */
    int32_t *draft_n;      /* (n_layers, Hkv) */
    int draft_argmax;      /* greedy drafts: the 4-bit head below (llama_ctx_draft_argmax) */
    matmul_weight head4;   /* the output matrix as Q4_0, built on first use (data NULL before);
                            * its rows permuted: the first head4_live are the drafts' vocabulary */
    int32_t *head4_id;     /* (rows) head4 row -> token id */
    int32_t *head4_row;    /* (rows) token id -> head4 row */
    int32_t head4_live;    /* rows a draft scores (llama_ctx_draft_vocab_add) */
    uint8_t *seen;         /* (n_vocab) 1: the token was fed to the context (any sequence), or NULL */
    int32_t sparse_layer; /* -1: decode steps use p.step at every layer; else at this one
                           * only, dense (`full`) at the others (locks_ctx_set_sparse_layer) */

    engine_cuda *gpu;    /* the device engine when p.backend is CUDA (engine_cuda.c), else NULL */

    /* sliding-window (local) layers: K/V in rings (swa.h), not in the cache */
    int32_t *cache_layer; /* (n_layers,) a global layer's cache layer, a local one's ring index */
    int32_t n_local;      /* local layers */
    int32_t swa_cap;      /* ring slots: min(n_ctx, window - 1 + max(n_batch, swa_rollback)) */
    uint16_t *swa_kv;     /* (n_seqs, n_local, 2 (K, V), swa_cap, Hkv, d) fp16 */
    int32_t swa_lo[LOCKS_CTX_MAX_SEQS]; /* the rings hold positions swa_lo .. n_tokens - 1 */
};

/* The ring of local layer l (a local layer's index into the model) of sequence s. */
static swa_ring ctx_ring(const locks_ctx *c, int32_t s, int32_t l) {
    const locks_model_info *in = &c->m->info;
    size_t half = (size_t)c->swa_cap * (size_t)in->n_kv_heads * (size_t)in->head_dim;
    uint16_t *k = c->swa_kv + ((size_t)s * (size_t)c->n_local + (size_t)c->cache_layer[l]) * 2 * half;
    return (swa_ring){k, k + half, c->swa_cap, in->n_kv_heads, in->head_dim};
}

locks_ctx_params locks_ctx_default_params(void) {
    locks_ctx_params p = {
        .n_ctx = 4096,
        .n_threads = 1,
        .n_batch = 64,
        .rank = 8,
        .summary_prec = LOCKS_SUMMARY_Q,
        .step = locks_step_default_params(),
        .selectors = 0,
        .f32_act = 0,
        .progress = NULL,
        .progress_user = NULL,
        .on_query = NULL,
        .on_query_user = NULL,
        .backend = LOCKS_BACKEND_CPU,
        .cuda_graph = 1,
        .n_seqs = 1,
        .swa_rollback = 256,
    };
    return p;
}

/* ---- The public entries' argument checks ----
 * Each check that fails says why in locks_last_error (locks_fail: which argument, its
 * value, what is allowed); the public entry takes locks_error_mark() first and returns
 * through locks_fail_call, which puts the entry's name in front. */

/* The decode step's parameters, checked where they are given (init, set_step) rather
 * than at the first decode. */
static locks_status step_check(const locks_step_params *s) {
    const locks_status bad = LOCKS_ERR_INVALID_ARG;
    if (s->budget <= 0) return locks_fail(bad, "step.budget %d (must be >= 1)", s->budget);
    if (s->n_sink < 0) return locks_fail(bad, "step.n_sink %d (must be >= 0)", s->n_sink);
    if (s->n_recent < 0) return locks_fail(bad, "step.n_recent %d (must be >= 0)", s->n_recent);
    if ((int)s->selector < 0 || s->selector >= LOCKS_SEL_COUNT)
        return locks_fail(bad, "step.selector %d (must be 0..%d)", (int)s->selector, LOCKS_SEL_COUNT - 1);
    if (!(s->scale == 0.0f || (isfinite(s->scale) && s->scale > 0.0f)))
        return locks_fail(bad, "step.scale %g (must be finite and > 0, or 0 for 1/sqrt(head_dim))", (double)s->scale);
    if (!(s->mass == 0.0f || (s->mass > 0.0f && s->mass < 1.0f)))
        return locks_fail(bad, "step.mass %g (must be in (0, 1), or 0 for none)", (double)s->mass);
    return LOCKS_OK;
}

static locks_status ctx_check(const locks_ctx *c) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "the context is NULL");
    if (c->broken)
        return locks_fail(LOCKS_ERR_INVALID_ARG,
                          "the context is broken: the rollback of an earlier failed call failed (locks_ctx_reset "
                          "clears it)");
    return LOCKS_OK;
}

static locks_status seq_check(const locks_ctx *c, int32_t seq) {
    if (seq < 0 || seq >= c->n_seqs)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "seq %d (the context has sequences 0..%d)", seq, c->n_seqs - 1);
    return LOCKS_OK;
}

/* tokens[i] for i < n are token ids of the model's vocabulary */
static locks_status tokens_check(const locks_ctx *c, const int32_t *tokens, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->m->info.n_vocab)
            return locks_fail(LOCKS_ERR_INVALID_ARG, "token %d at index %d (the vocabulary is 0..%d)", tokens[i], i,
                              c->m->info.n_vocab - 1);
    return LOCKS_OK;
}

/* n more tokens fit sequence seq */
static locks_status room_check(const locks_ctx *c, int32_t seq, int32_t n) {
    if (n > c->p.n_ctx - c->n_tokens[seq])
        return locks_fail(LOCKS_ERR_POOL_FULL, "sequence %d holds %d tokens: %d more exceed n_ctx %d", seq,
                          c->n_tokens[seq], n, c->p.n_ctx);
    return LOCKS_OK;
}

static locks_status params_check(const locks_model *m, const locks_ctx_params *p) {
    const locks_status bad = LOCKS_ERR_INVALID_ARG;
    if (!m) return locks_fail(bad, "the model is NULL");
    if (p->n_ctx <= 0 || p->n_ctx > INT32_MAX / LOCKS_CTX_MAX_SEQS - LOCKS_PAGE)
        return locks_fail(bad, "n_ctx %d (must be 1..%d)", p->n_ctx, INT32_MAX / LOCKS_CTX_MAX_SEQS - LOCKS_PAGE);
    if (p->n_threads <= 0 || p->n_threads > 256) return locks_fail(bad, "n_threads %d (must be 1..256)", p->n_threads);
    if (p->n_batch <= 0 || p->n_batch > 4096) return locks_fail(bad, "n_batch %d (must be 1..4096)", p->n_batch);
    if (p->n_seqs < 1 || p->n_seqs > LOCKS_CTX_MAX_SEQS)
        return locks_fail(bad, "n_seqs %d (must be 1..%d)", p->n_seqs, LOCKS_CTX_MAX_SEQS);
    if (p->swa_rollback < 0) return locks_fail(bad, "swa_rollback %d (must be >= 0)", p->swa_rollback);
    return step_check(&p->step);
}

/* A context on the worker threads of `pool` (NULL: it starts its own, p.n_threads). */
static locks_ctx *ctx_init(const locks_model *m, locks_ctx_params p, locks_pool *pool, locks_status *err) {
    locks_status st = LOCKS_OK;
    locks_ctx *c = NULL;
    if ((st = params_check(m, &p)) != LOCKS_OK) goto fail;
    const locks_model_info *in = &m->info;
    c = locks_alloc(1, sizeof *c);
    if (!c) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    c->m = m;
    c->p = p;
    c->n_seqs = p.n_seqs;
    for (int32_t s = 0; s < LOCKS_CTX_MAX_SEQS; s++) c->seq[s] = -1;
    c->sparse_layer = -1;

    /* the cache holds the global layers; each local one gets a ring per sequence */
    c->cache_layer = locks_alloc((size_t)in->n_layers, sizeof(int32_t));
    if (!c->cache_layer) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    int32_t n_global = 0;
    for (int32_t l = 0; l < in->n_layers; l++)
        c->cache_layer[l] = m->layers[l].local ? c->n_local++ : n_global++;
    if (c->n_local > 0 && p.backend == LOCKS_BACKEND_CUDA) {
        /* the rings are the engine's, on the device (swa.cu); the host keeps only their
         * bookkeeping (swa_lo), with the engine's ring size */
        c->swa_cap = engine_cuda_swa_cap(in, &p);
    } else if (c->n_local > 0) {
        int64_t keep = p.swa_rollback > p.n_batch ? p.swa_rollback : p.n_batch;
        int64_t cap = (int64_t)in->swa_window - 1 + keep;
        c->swa_cap = (int32_t)(cap < p.n_ctx ? cap : p.n_ctx);
        c->swa_kv = locks_alloc((size_t)p.n_seqs * (size_t)c->n_local,
                                swa_ring_bytes(c->swa_cap, in->n_kv_heads, in->head_dim));
        if (!c->swa_kv) {
            st = LOCKS_ERR_OOM;
            goto fail;
        }
    }

    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = n_global > 0 ? n_global : 1;
    cp.n_kv_heads = in->n_kv_heads;
    cp.head_dim = in->head_dim;
    cp.n_pages = p.n_seqs * ((p.n_ctx + LOCKS_PAGE - 1) / LOCKS_PAGE);
    cp.max_seqs = p.n_seqs;
    cp.rank = p.rank;
    cp.summary_prec = p.summary_prec;
    if ((int)p.step.selector >= 0 && p.step.selector < LOCKS_SEL_COUNT)
        cp.selectors = p.selectors | LOCKS_SEL_BIT(p.step.selector);
    c->p.selectors = cp.selectors; /* what the cache serves; a clone keeps it */
    /* one set of worker threads for the context, its cache and its clones: the matmuls
     * and the cache's jobs run on it, so a worker still spinning after one job picks up
     * the next, and a clone adds no threads */
    c->pool = pool ? locks_pool_retain(pool) : locks_pool_init(p.n_threads);
    if (!c->pool) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    cp.n_threads = locks_pool_threads(c->pool);
    cp.pool = c->pool;
    if (p.backend == LOCKS_BACKEND_CUDA) { /* weights, cache and engine on the GPU */
        engine_cuda_layer *gl = locks_alloc((size_t)in->n_layers, sizeof *gl);
        if (!gl) {
            st = LOCKS_ERR_OOM;
            goto fail;
        }
        const engine_cuda_model gm = llama_gpu_view(m, gl);
        c->gpu = engine_cuda_init(&gm, &p, &c->cache, &st);
        locks_free(gl);
        if (!c->gpu) goto fail;
    } else {
        c->cache = locks_cache_init(cp, &st);
    }
    if (!c->cache) goto fail;
    for (int32_t s = 0; s < c->n_seqs; s++)
        if ((st = locks_cache_seq_add(c->cache, &c->seq[s])) != LOCKS_OK) goto fail;

    size_t B = (size_t)p.n_batch;
    int32_t q_dim = in->n_heads * in->head_dim, kv_dim = in->n_kv_heads * in->head_dim;
    int32_t widest = in->dim > q_dim ? in->dim : q_dim;
    if (in->ffn_dim > widest) widest = in->ffn_dim;
    c->x = locks_alloc(B * (size_t)in->dim, sizeof(float));
    c->xb = locks_alloc(B * (size_t)in->dim, sizeof(float));
    c->proj = locks_alloc(B * (size_t)in->dim, sizeof(float));
    c->q = locks_alloc(B * (size_t)q_dim, sizeof(float));
    c->att = locks_alloc(B * (size_t)q_dim, sizeof(float));
    c->k = locks_alloc(B * (size_t)kv_dim, sizeof(float));
    c->v = locks_alloc(B * (size_t)kv_dim, sizeof(float));
    c->hb = locks_alloc(B * (size_t)in->ffn_dim, sizeof(float));
    c->hb2 = locks_alloc(B * (size_t)in->ffn_dim, sizeof(float));
    c->xq = locks_alloc(B * (size_t)(widest / GGML_QBLOCK + 1), sizeof(matmul_q8));
    c->inv_freq = locks_alloc((size_t)m->n_rot / 2, sizeof(float));
    c->inv_freq_swa = locks_alloc((size_t)m->n_rot / 2, sizeof(float));
    if (in->swa_window > 0) {
        int32_t nthr = locks_pool_threads(c->pool);
        c->swa_scratch = locks_alloc(swa_scratch_floats(in->n_heads, in->n_kv_heads, in->head_dim, nthr, p.n_batch),
                                     sizeof(float));
        if (!c->swa_scratch) {
            st = LOCKS_ERR_OOM;
            goto fail;
        }
    }
    if (!c->x || !c->xb || !c->proj || !c->q || !c->att || !c->k || !c->v || !c->hb || !c->hb2 ||
        !c->xq || !c->inv_freq || !c->inv_freq_swa) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    if (p.on_step) {
        c->sel.max_pages = cp.n_pages;
        c->sel.pages = locks_alloc((size_t)in->n_kv_heads * (size_t)cp.n_pages, sizeof(int32_t));
        c->sel.n_pages = locks_alloc((size_t)in->n_kv_heads, sizeof(int32_t));
        if (!c->sel.pages || !c->sel.n_pages) {
            st = LOCKS_ERR_OOM;
            goto fail;
        }
    }
    for (int32_t i = 0; i < m->n_rot / 2; i++) {
        c->inv_freq[i] = (float)pow((double)in->rope_theta, -2.0 * i / m->n_rot);
        c->inv_freq_swa[i] = (float)pow((double)in->rope_theta_swa, -2.0 * i / m->n_rot);
    }
    if (err) *err = LOCKS_OK;
    return c;
fail:
    locks_ctx_free(c);
    if (err) *err = st;
    return NULL;
}

locks_ctx *locks_ctx_init(const locks_model *m, locks_ctx_params p, locks_status *err) {
    const uint32_t mark = locks_error_mark();
    locks_status st;
    locks_ctx *c = ctx_init(m, p, NULL, &st);
    if (err) *err = locks_fail_call(st, "locks_ctx_init", mark);
    return c;
}

void locks_ctx_free(locks_ctx *c) {
    if (!c) return;
    engine_cuda_free(c->gpu);
    locks_cache_free(c->cache);
    locks_free(c->cache_layer);
    locks_free(c->swa_kv);
    locks_pool_free(c->pool);
    locks_free(c->x);
    locks_free(c->xb);
    locks_free(c->proj);
    locks_free(c->q);
    locks_free(c->att);
    locks_free(c->k);
    locks_free(c->v);
    locks_free(c->hb);
    locks_free(c->hb2);
    locks_free(c->xq);
    locks_free(c->inv_freq);
    locks_free(c->inv_freq_swa);
    locks_free(c->swa_scratch);
    locks_free(c->sel.pages);
    locks_free(c->sel.n_pages);
    locks_free(c->draft_pages);
    locks_free(c->draft_n);
    locks_free((void *)c->head4.data);
    locks_free(c->head4_id);
    locks_free(c->head4_row);
    locks_free(c->seen);
    locks_free(c);
}

static locks_status ctx_reset(locks_ctx *c) {
    locks_status st;
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "the context is NULL");
    for (int32_t s = 0; s < c->n_seqs; s++) { /* removed and re-added in order: same slots */
        if (c->seq[s] >= 0 && (st = locks_cache_seq_remove(c->cache, c->seq[s])) != LOCKS_OK) return st;
        c->seq[s] = -1;
        c->n_tokens[s] = 0;
        c->swa_lo[s] = 0;
    }
    c->broken = 1;
    for (int32_t s = 0; s < c->n_seqs; s++)
        if ((st = locks_cache_seq_add(c->cache, &c->seq[s])) != LOCKS_OK) return st;
    c->broken = 0;
    return LOCKS_OK;
}

locks_status locks_ctx_reset(locks_ctx *c) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(ctx_reset(c), "locks_ctx_reset", mark);
}

int32_t locks_ctx_len(const locks_ctx *c) { return c->n_tokens[0]; }

int32_t locks_ctx_seq_len(const locks_ctx *c, int32_t seq) {
    return c && seq >= 0 && seq < c->n_seqs ? c->n_tokens[seq] : -1;
}

/* Drops every token of sequence s after the first n. The local layers' rings need no
 * change, only the window before n still in them: positions n - window + 1 .. n - 1. */
static locks_status truncate_seq(locks_ctx *c, int32_t s, int32_t n) {
    locks_status st = ctx_check(c);
    if (st != LOCKS_OK) return st;
    if (n < 0 || n > c->n_tokens[s])
        return locks_fail(LOCKS_ERR_INVALID_ARG, "n %d (sequence %d holds %d tokens: 0..%d)", n, s, c->n_tokens[s],
                          c->n_tokens[s]);
    int32_t need = n - c->m->info.swa_window + 1;
    if (c->n_local > 0 && n > 0 && (need > 0 ? need : 0) < c->swa_lo[s]) {
        st = locks_fail(LOCKS_ERR_UNSUPPORTED,
                        "cannot truncate to %d tokens: the sliding-window layers keep positions %d .. %d only "
                        "(window %d; truncate to >= %d or to 0, or raise swa_rollback, now %d)",
                        n, c->swa_lo[s], c->n_tokens[s] - 1, c->m->info.swa_window,
                        c->swa_lo[s] + c->m->info.swa_window - 1, c->p.swa_rollback);
        locks_log(LOCKS_LOG_ERROR, "model: %s", locks_last_error());
        return st;
    }
    st = locks_cache_seq_truncate(c->cache, c->seq[s], n);
    if (st != LOCKS_OK) return st;
    c->n_tokens[s] = n;
    if (n == 0) c->swa_lo[s] = 0;
    return LOCKS_OK;
}

locks_status locks_ctx_truncate(locks_ctx *c, int32_t n) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(truncate_seq(c, 0, n), "locks_ctx_truncate", mark);
}
const locks_model *locks_ctx_model(const locks_ctx *c) { return c->m; }
locks_ctx_params locks_ctx_get_params(const locks_ctx *c) { return c->p; }
locks_cache *locks_ctx_cache(locks_ctx *c) { return c->cache; }
int32_t locks_ctx_cache_layer(const locks_ctx *c, int32_t layer) {
    if (!c || layer < 0 || layer >= c->m->info.n_layers || c->m->layers[layer].local) return -1;
    return c->cache_layer[layer];
}
size_t locks_ctx_swa_bytes(const locks_ctx *c) {
    const locks_model_info *in = &c->m->info;
    return (size_t)c->n_seqs * (size_t)c->n_local * swa_ring_bytes(c->swa_cap, in->n_kv_heads, in->head_dim);
}
int32_t locks_ctx_seq(const locks_ctx *c) { return c->seq[0]; }

locks_status locks_ctx_set_step(locks_ctx *c, locks_step_params step) {
    const uint32_t mark = locks_error_mark();
    locks_status st = c ? step_check(&step) : locks_fail(LOCKS_ERR_INVALID_ARG, "the context is NULL");
    if (st == LOCKS_OK && !locks_cache_serves(c->cache, step.selector))
        st = locks_fail(LOCKS_ERR_NO_META, "step.selector %s: the context's cache keeps no metadata for it (add it to "
                        "locks_ctx_params.selectors at init)", locks_selector_name(step.selector));
    if (st == LOCKS_OK) c->p.step = step;
    return locks_fail_call(st, "locks_ctx_set_step", mark);
}

locks_status locks_ctx_set_sparse_layer(locks_ctx *c, int32_t layer) {
    const uint32_t mark = locks_error_mark();
    locks_status st = c ? LOCKS_OK : locks_fail(LOCKS_ERR_INVALID_ARG, "the context is NULL");
    if (st == LOCKS_OK && (layer < -1 || layer >= c->m->info.n_layers))
        st = locks_fail(LOCKS_ERR_INVALID_ARG, "layer %d (must be -1 for none, or 0..%d)", layer,
                        c->m->info.n_layers - 1);
    if (st == LOCKS_OK) c->sparse_layer = layer;
    return locks_fail_call(st, "locks_ctx_set_sparse_layer", mark);
}

locks_run_stats locks_ctx_stats(const locks_ctx *c) { return c->stats; }
void locks_ctx_stats_reset(locks_ctx *c) { memset(&c->stats, 0, sizeof c->stats); }

static locks_ctx *ctx_clone(const locks_ctx *src, locks_status *err) {
    locks_status st = ctx_check(src);
    float *k = NULL, *v = NULL;
    locks_ctx *c = NULL;
    if (st != LOCKS_OK) goto fail;
    if (src->gpu || src->n_seqs > 1) { /* K/V on the device (the clone copies host pages), or several sequences */
        st = locks_fail(LOCKS_ERR_UNSUPPORTED, "only a CPU context of one sequence is cloned (this one: %s, %d sequences)",
                        src->gpu ? "CUDA" : "CPU", src->n_seqs);
        goto fail;
    }
    c = ctx_init(src->m, src->p, src->pool, &st); /* the parent's threads */
    if (!c) goto fail;
    if (src->seen && (c->seen = locks_alloc((size_t)src->m->info.n_vocab, 1))) /* the tokens met (vocab_note) */
        memcpy(c->seen, src->seen, (size_t)src->m->info.n_vocab);
    int32_t n = src->n_tokens[0];
    c->stats = src->stats;
    if (n == 0) goto done;
    if (c->n_local > 0) { /* same parameters: same ring size */
        memcpy(c->swa_kv, src->swa_kv, locks_ctx_swa_bytes(src));
        c->swa_lo[0] = src->swa_lo[0];
    }
    const locks_model_info *in = &src->m->info;
    int32_t hkv = in->n_kv_heads, hd = in->head_dim;
    k = locks_alloc((size_t)n * hkv * hd, sizeof(float));
    v = locks_alloc((size_t)n * hkv * hd, sizeof(float));
    if (!k || !v) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    if ((st = locks_cache_append(c->cache, c->seq[0], n)) != LOCKS_OK) goto fail;
    int32_t n_pages;
    const int32_t *bt = locks_cache_block_table(src->cache, src->seq[0], &n_pages);
    for (int32_t l = 0; l < locks_cache_get_params(src->cache).n_layers; l++) { /* cache layers */
        /* pages are [Hkv][P][d] fp16; the write wants tokens [n][Hkv][d] fp32 */
        for (int32_t t = 0; t < n; t++) {
            const uint16_t *kp = locks_cache_k_page(src->cache, l, bt[t / LOCKS_PAGE]);
            const uint16_t *vp = locks_cache_v_page(src->cache, l, bt[t / LOCKS_PAGE]);
            if (!kp || !vp) {
                st = LOCKS_ERR_UNSUPPORTED;
                goto fail;
            }
            for (int32_t h = 0; h < hkv; h++)
                for (int32_t i = 0; i < hd; i++) {
                    size_t s = ((size_t)h * LOCKS_PAGE + t % LOCKS_PAGE) * hd + i;
                    size_t o = ((size_t)t * hkv + h) * hd + i;
                    k[o] = locks_f16_to_f32(kp[s]);
                    v[o] = locks_f16_to_f32(vp[s]);
                }
        }
        if ((st = locks_cache_write(c->cache, c->seq[0], l, 0, n, k, v)) != LOCKS_OK) goto fail;
    }
    c->n_tokens[0] = n;
done:
    locks_free(k);
    locks_free(v);
    if (err) *err = LOCKS_OK;
    return c;
fail:
    locks_free(k);
    locks_free(v);
    locks_ctx_free(c);
    if (err) *err = st;
    return NULL;
}

locks_ctx *locks_ctx_clone(const locks_ctx *src, locks_status *err) {
    const uint32_t mark = locks_error_mark();
    locks_status st;
    locks_ctx *c = ctx_clone(src, &st);
    if (err) *err = locks_fail_call(st, "locks_ctx_clone", mark);
    return c;
}

/* Process CPU time (all threads) in ms. */
static double cpu_ms(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0.0;
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ================================================================================ */
/* Forward pass                                                                     */
/* ================================================================================ */

/* out = x / sqrt(mean(x^2) + eps) * w, for each of n vectors of length dim */
static void rmsnorm(float *out, const float *x, const float *w, int32_t n, int32_t dim, float eps) {
    for (int32_t t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * dim;
        float *ot = out + (size_t)t * dim;
        double ss = 0.0;
        for (int32_t i = 0; i < dim; i++) ss += (double)xt[i] * (double)xt[i];
        float r = (float)(1.0 / sqrt(ss / dim + (double)eps));
        for (int32_t i = 0; i < dim; i++) ot[i] = xt[i] * r * w[i];
    }
}

/* Rotates pairs of the first n_rot dims of each head by angle pos * inv_freq[i]: adjacent
 * pairs (v[2i], v[2i+1]) (llama.cpp's "normal" RoPE, which GGUF llama models use), or
 * with neox the pairs (v[i], v[i + n_rot/2]) (Qwen, Gemma). */
static void rope(float *v, int32_t n, int32_t n_heads, int32_t head_dim, int32_t n_rot,
                 const float *inv_freq, int32_t pos0, int neox) {
    int32_t stride = neox ? 1 : 2, other = neox ? n_rot / 2 : 1;
    for (int32_t t = 0; t < n; t++) {
        for (int32_t i = 0; i < n_rot / 2; i++) {
            double a = (double)(pos0 + t) * (double)inv_freq[i];
            float cs = (float)cos(a), sn = (float)sin(a);
            for (int32_t h = 0; h < n_heads; h++) {
                float *p = v + ((size_t)t * n_heads + h) * head_dim + stride * i;
                float x0 = p[0], x1 = p[other];
                p[0] = x0 * cs - x1 * sn;
                p[other] = x0 * sn + x1 * cs;
            }
        }
    }
}

/* v[i] += b[i % len] for n rows of len */
static void add_bias(float *v, const float *b, int32_t n, int32_t len) {
    for (int32_t t = 0; t < n; t++)
        for (int32_t i = 0; i < len; i++) v[(size_t)t * len + i] += b[i];
}

/* Activations x (n, cols) for the next products: quantized once to int8 blocks (used by
 * every block-quantized weight that reads x), unless the context wants fp32. */
static matmul_act prepare(locks_ctx *c, const float *x, int32_t n, int32_t cols) {
    matmul_act a = {x, NULL, n, cols};
    if (!c->p.f32_act && cols % GGML_QBLOCK == 0) {
        matmul_quantize(x, n, cols, c->xq);
        a.xq = c->xq;
    }
    return a;
}

/* y (a->n, w->rows) = W . x */
static void linear(locks_ctx *c, const matmul_weight *w, const matmul_act *a, float *y) {
    matmul(c->pool, w, a, y, w->rows);
}

/* A replayed draft step of one global layer: the pages rec recorded (a decode step of
 * this round's first draft), plus the pages begun since, attended exactly; the bytes
 * read are counted as a step's. */
static locks_status draft_replay(locks_ctx *c, int32_t sq, int32_t cl, locks_selection *rec, int32_t hq,
                                 locks_step_stats *ss) {
    const int32_t hkv = c->m->info.n_kv_heads, d = c->m->info.head_dim;
    const int32_t len = c->n_tokens[sq] + 1, last = (len - 1) / LOCKS_PAGE; /* this token is written */
    const locks_step_params *sp = &c->p.step;
    const locks_plan pl = locks_plan_make(len, sp->budget, sp->n_sink, sp->n_recent, sp->selector == LOCKS_SEL_FULL);
    if (!pl.dense && pl.k < 0) /* fails where a step that selects would (locks_select_check) */
        return locks_fail(LOCKS_ERR_BUDGET, "budget %d is below the forced pages (%d sink, %d recent, partial) of %d tokens",
                          sp->budget, sp->n_sink, sp->n_recent, len);
    memset(ss, 0, sizeof *ss);
    for (int32_t h = 0; h < hkv; h++) {
        int32_t *pg = rec->pages + (size_t)h * rec->max_pages, n = rec->n_pages[h];
        int32_t top = -1; /* the newest recorded page (the top-k lists them in any order) */
        for (int32_t i = 0; i < n; i++) top = pg[i] > top ? pg[i] : top;
        for (int32_t p = top + 1; p <= last && n < rec->max_pages; p++) pg[n++] = p;
        rec->n_pages[h] = n;
        for (int32_t i = 0; i < n; i++) {
            const int32_t nt = len - pg[i] * LOCKS_PAGE;
            ss->bytes_kv += 4u * (uint64_t)d * (uint64_t)(nt < LOCKS_PAGE ? nt : LOCKS_PAGE);
        }
    }
    ss->bytes_dense = 4u * (uint64_t)d * (uint64_t)len * (uint64_t)hkv;
    return locks_attend(c->cache, cl, c->seq[sq], c->q, hq, c->p.step.scale, rec->pages, rec->n_pages,
                        rec->max_pages, c->att, NULL);
}

locks_status llama_ctx_draft_mode(locks_ctx *c, int mode) {
    if (mode != LLAMA_DRAFT_OFF && !c->draft_pages) {
        const int32_t hkv = c->m->info.n_kv_heads, L = c->m->info.n_layers;
        c->draft_max = c->p.n_ctx / LOCKS_PAGE + 2;
        c->draft_pages = locks_alloc((size_t)L * hkv * (size_t)c->draft_max, sizeof(int32_t));
        c->draft_n = locks_alloc((size_t)L * hkv, sizeof(int32_t));
        if (!c->draft_pages || !c->draft_n) {
            locks_free(c->draft_pages);
            locks_free(c->draft_n);
            c->draft_pages = NULL;
            c->draft_n = NULL;
            c->draft_mode = LLAMA_DRAFT_OFF;
            return LOCKS_ERR_OOM;
        }
    }
    c->draft_mode = mode;
    return LOCKS_OK;
}

typedef struct {
    const matmul_weight *src;
    uint8_t *dst;
    size_t rb;
    int32_t rows_per_task;
} head4_job;

/* Rows of task t of the 4-bit copy. */
static void head4_task(void *arg, int32_t t, int32_t thread) {
    (void)thread;
    const head4_job *j = arg;
    const matmul_weight *o = j->src;
    const int32_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task < o->rows ? r0 + j->rows_per_task : o->rows;
    float row[LLAMA_HEAD4_MAX_COLS];
    for (int32_t r = r0; r < r1; r++) {
        if (o->type == GGML_TYPE_Q8_0) {
            quant_q4_0_from_q8_0(o->data + (size_t)r * o->row_bytes, o->cols / GGML_QBLOCK, j->dst + (size_t)r * j->rb);
        } else {
            matmul_row_f32(o, r, row);
            quant_q4_0_from_f32(row, o->cols, j->dst + (size_t)r * j->rb);
        }
    }
}

locks_status llama_ctx_draft_argmax(locks_ctx *c, int on) {
    const matmul_weight *o = &c->m->output;
    /* only where 4 bits read fewer bytes, and the int8-activation kernels apply */
    if (!on || c->gpu || c->p.f32_act || o->cols % GGML_QBLOCK || o->cols > LLAMA_HEAD4_MAX_COLS ||
        o->type == GGML_TYPE_Q4_0 || o->type == GGML_TYPE_Q4_1 || o->type == GGML_TYPE_Q4_K) {
        c->draft_argmax = 0;
        return LOCKS_OK;
    }
    if (!c->head4.data) {
        const size_t rb = (size_t)(o->cols / GGML_QBLOCK) * quant_block_bytes(GGML_TYPE_Q4_0);
        uint8_t *d = locks_alloc((size_t)o->rows, rb);
        int32_t *id = locks_alloc((size_t)o->rows, sizeof(int32_t));
        int32_t *row = locks_alloc((size_t)o->rows, sizeof(int32_t));
        if (!d || !id || !row) {
            locks_free(d);
            locks_free(id);
            locks_free(row);
            c->draft_argmax = 0;
            return LOCKS_ERR_OOM;
        }
        head4_job j = {o, d, rb, 1024};
        locks_pool_run(c->pool, (o->rows + j.rows_per_task - 1) / j.rows_per_task, head4_task, &j);
        for (int32_t r = 0; r < o->rows; r++) id[r] = row[r] = r;
        c->head4 = (matmul_weight){d, GGML_TYPE_Q4_0, o->rows, o->cols, rb, NULL};
        c->head4_id = id;
        c->head4_row = row;
        c->head4_live = LLAMA_DRAFT_VOCAB(o->rows);
        for (int32_t v = 0; c->seen && v < o->rows && v < c->m->info.n_vocab; v++) /* the tokens met so far */
            if (c->seen[v]) llama_ctx_draft_vocab_add(c, &v, 1);
    }
    c->draft_argmax = 1;
    return LOCKS_OK;
}

void llama_ctx_draft_vocab_add(locks_ctx *c, const int32_t *ids, int32_t n) {
    if (!c || !c->head4.data || !ids) return;
    const size_t rb = c->head4.row_bytes;
    uint8_t *d = (uint8_t *)(uintptr_t)c->head4.data, tmp[LLAMA_HEAD4_MAX_COLS / GGML_QBLOCK * 18];
    for (int32_t i = 0; i < n; i++) {
        const int32_t v = ids[i];
        if (v < 0 || v >= c->head4.rows || c->head4_row[v] < c->head4_live) continue;
        /* swap v's row with the first row past the vocabulary, which it then ends */
        const int32_t a = c->head4_row[v], b = c->head4_live++, w = c->head4_id[b];
        memcpy(tmp, d + (size_t)a * rb, rb);
        memcpy(d + (size_t)a * rb, d + (size_t)b * rb, rb);
        memcpy(d + (size_t)b * rb, tmp, rb);
        c->head4_id[a] = w, c->head4_row[w] = a;
        c->head4_id[b] = v, c->head4_row[v] = b;
    }
}

int llama_ctx_draft_vocab_has(const locks_ctx *c, int32_t id) {
    return c && c->head4.data && id >= 0 && id < c->head4.rows && c->head4_row[id] < c->head4_live;
}

/* A greedy draft's logits (a: the last token's normed state): the vocabulary's rows (the
 * first head4_live of the 4-bit copy) scored, the LLAMA_DRAFT_TOP best (ties to the lower
 * id: the same candidates whatever the rows' order) then by the output matrix itself,
 * each alone (the value a full product gives it: every kernel forms a row's sum on its
 * own); the other logits -inf. */
static void draft_logits(locks_ctx *c, const matmul_act *a, float *logits) {
    const matmul_weight *o = &c->m->output;
    matmul_weight h4 = c->head4;
    h4.rows = c->head4_live;
    linear(c, &h4, a, logits); /* logits[j]: the score of token head4_id[j] */
    int32_t top[LLAMA_DRAFT_TOP];
    float val[LLAMA_DRAFT_TOP];
    int32_t k = 0;
    for (int32_t j = 0; j < h4.rows; j++) { /* the best rows, by descending score */
        const float x = logits[j];
        const int32_t r = c->head4_id[j];
        if (k == LLAMA_DRAFT_TOP && !(x > val[k - 1] || (x == val[k - 1] && r < top[k - 1]))) continue;
        int32_t i = k < LLAMA_DRAFT_TOP ? k++ : k - 1;
        for (; i > 0 && (x > val[i - 1] || (x == val[i - 1] && r < top[i - 1])); i--) {
            val[i] = val[i - 1];
            top[i] = top[i - 1];
        }
        val[i] = x;
        top[i] = r;
    }
    for (int32_t r = 0; r < o->rows; r++) logits[r] = -INFINITY;
    for (int32_t i = 0; i < k; i++) matmul_row_exact(o, a, top[i], &logits[top[i]], 1);
}

/* How a pass attends: PREFILL causal dense attention (tiled, locks_prefill_attend);
 * DECODE one token by locks_decode_step with the context's step parameters; VERIFY each
 * token as a dense decode step would (locks_attend_prefix_n: locks_attend_prefix of each,
 * with every K/V page read once for all the tokens), bit for bit. */
enum { FWD_PREFILL = 0, FWD_DECODE = 1, FWD_VERIFY = 2 };

/* Runs tokens [pos, pos + n) of sequence sq (n <= n_batch, already reserved in the cache)
 * through every layer, attending as mode says (DECODE: n == 1). logits (may be NULL):
 * [n_vocab] for the last token, or with all_logits [n][n_vocab] for every token. */
static locks_status forward(locks_ctx *c, int32_t sq, const int32_t *tokens, int32_t n, int mode, float *logits,
                            int all_logits) {
    const int decode = mode == FWD_DECODE;
    const locks_model *m = c->m;
    const locks_model_info *in = &m->info;
    int32_t dim = in->dim, hd = in->head_dim, hq = in->n_heads, hkv = in->n_kv_heads;
    int32_t q_dim = hq * hd, ffn = in->ffn_dim;
    int32_t pos = c->n_tokens[sq];
    float scale = 1.0f / sqrtf((float)hd);
    locks_status st;
    if (c->gpu) { /* the device engine: prefill, decode, and the verify pass of speculation
                   * (every token's logits, dense attention); no per-token logits of a plain
                   * prefill, no single sparse layer (--fidelity is CPU-only for now) */
        if (mode == FWD_VERIFY && all_logits && logits && c->sparse_layer < 0)
            st = engine_cuda_verify(c->gpu, sq, tokens, n, pos, logits);
        else if (mode == FWD_VERIFY || all_logits || c->sparse_layer >= 0)
            return LOCKS_ERR_UNSUPPORTED;
        else
            st = engine_cuda_forward(c->gpu, sq, tokens, n, pos, decode, logits, &c->p.step, c->p.n_ctx, &c->stats);
        /* the device rings overwrote the positions past their swa_cap */
        if (st == LOCKS_OK && c->n_local > 0 && pos + n - c->swa_cap > c->swa_lo[sq]) c->swa_lo[sq] = pos + n - c->swa_cap;
        return st;
    }

    /* x = token embeddings (Gemma: times sqrt(dim)) */
    for (int32_t t = 0; t < n; t++) matmul_row_f32(&m->tok_embd, tokens[t], c->x + (size_t)t * dim);
    if (m->arch->emb_scale) {
        float es = sqrtf((float)dim);
        for (size_t i = 0; i < (size_t)n * dim; i++) c->x[i] *= es;
    }
    int32_t kv_dim = hkv * hd;

    for (int32_t l = 0; l < in->n_layers; l++) {
        const llama_layer *L = &m->layers[l];

        /* ---- attention ---- */
        rmsnorm(c->xb, c->x, L->attn_norm, n, dim, in->norm_eps);
        matmul_act a = prepare(c, c->xb, n, dim);
        { /* q (n, Hq * d), k and v (n, Hkv * d): one pool job */
            const matmul_weight *w3[3] = {&L->wq, &L->wk, &L->wv};
            float *y3[3] = {c->q, c->k, c->v};
            matmul_n(c->pool, w3, 3, &a, y3);
        }
        if (L->bq) {
            add_bias(c->q, L->bq, n, q_dim);
            add_bias(c->k, L->bk, n, kv_dim);
            add_bias(c->v, L->bv, n, kv_dim);
        }
        if (L->q_norm) { /* every head of q and k on its own: (n * H, d) vectors */
            rmsnorm(c->q, c->q, L->q_norm, n * hq, hd, in->norm_eps);
            rmsnorm(c->k, c->k, L->k_norm, n * hkv, hd, in->norm_eps);
        }
        const float *inv_freq = L->local ? c->inv_freq_swa : c->inv_freq;
        rope(c->q, n, hq, hd, m->n_rot, inv_freq, pos, m->arch->rope_neox);
        rope(c->k, n, hkv, hd, m->n_rot, inv_freq, pos, m->arch->rope_neox);
        const int32_t cl = c->cache_layer[l]; /* cache layer, or ring of a local layer */
        if (!L->local && (st = locks_cache_write(c->cache, c->seq[sq], cl, pos, n, c->k, c->v)) != LOCKS_OK) return st;
        if (L->local) {
            /* sliding window: every key of the window, exactly, whatever the selector */
            swa_ring r = ctx_ring(c, sq, l);
            if ((st = swa_ring_write(&r, pos, n, c->k, c->v)) != LOCKS_OK) return st;
            if (pos + n - c->swa_cap > c->swa_lo[sq]) c->swa_lo[sq] = pos + n - c->swa_cap; /* overwritten */
            if (c->p.on_query)
                for (int32_t t = 0; t < n; t++)
                    c->p.on_query(l, pos + t, c->q + (size_t)t * (size_t)q_dim, c->p.on_query_user);
            double t0 = locks_now_ms();
            st = swa_attend(c->pool, &r, pos, n, c->q, hq, scale, in->swa_window, c->swa_scratch, c->att);
            if (st != LOCKS_OK) return st;
            if (decode) { /* dense and sparse decoding both read the window */
                int32_t nk = pos + 1 < in->swa_window ? pos + 1 : in->swa_window;
                uint64_t b = (uint64_t)nk * (uint64_t)kv_dim * 2u * sizeof(uint16_t);
                c->stats.bytes_kv += b;
                c->stats.bytes_dense += b;
                c->stats.attn_ms += locks_now_ms() - t0;
            }
        } else if (decode) {
            if (c->p.on_query) c->p.on_query(l, pos, c->q, c->p.on_query_user);
            locks_step_stats ss;
            double t0 = locks_now_ms();
            locks_selection *sel = c->p.on_step ? &c->sel : NULL;
            locks_step_params dense_step = c->p.step;
            dense_step.selector = LOCKS_SEL_FULL;
            const locks_step_params *sp = c->sparse_layer < 0 || c->sparse_layer == l ? &c->p.step : &dense_step;
            const int draft = c->draft_mode != LLAMA_DRAFT_OFF && !sel && c->sparse_layer < 0;
            locks_selection rec;
            if (draft) { /* this layer's recorded pages (speculation's drafts) */
                rec.max_pages = c->draft_max;
                rec.pages = c->draft_pages + (size_t)l * hkv * c->draft_max;
                rec.n_pages = c->draft_n + (size_t)l * hkv;
                sel = &rec;
            }
            if (draft && c->draft_mode == LLAMA_DRAFT_REPLAY) {
                st = draft_replay(c, sq, cl, &rec, hq, &ss);
            } else {
                st = locks_decode_step(c->cache, cl, &c->seq[sq], 1, c->q, hq, sp, c->att, sel, &ss);
            }
            if (st != LOCKS_OK) return st;
            if (c->p.on_step) c->p.on_step(l, c->q, hq, sel, c->p.on_step_user);
            c->stats.attn_ms += locks_now_ms() - t0;
            c->stats.bytes_meta += ss.bytes_meta;
            c->stats.bytes_kv += ss.bytes_kv;
            c->stats.bytes_dense += ss.bytes_dense;
        } else {
            if (c->p.on_query) /* the prompt's queries too (KV dumps keep the last ones) */
                for (int32_t t = 0; t < n; t++)
                    c->p.on_query(l, pos + t, c->q + (size_t)t * (size_t)q_dim, c->p.on_query_user);
            if (mode == FWD_VERIFY) { /* token t over [0, pos + t], as its decode step */
                st = locks_attend_prefix_n(c->cache, cl, c->seq[sq], pos + 1, n, c->q, hq, c->att);
            } else {
                st = locks_prefill_attend(c->cache, cl, c->seq[sq], pos, n, c->q, hq, scale, c->att);
            }
            if (st != LOCKS_OK) return st;
        }
        a = prepare(c, c->att, n, q_dim);
        linear(c, &L->wo, &a, c->proj); /* (n, dim) */
        if (L->post_attn_norm) rmsnorm(c->proj, c->proj, L->post_attn_norm, n, dim, in->norm_eps);
        for (size_t i = 0; i < (size_t)n * dim; i++) c->x[i] += c->proj[i];

        /* ---- SwiGLU / GeGLU feed-forward ---- */
        rmsnorm(c->xb, c->x, L->ffn_norm, n, dim, in->norm_eps);
        a = prepare(c, c->xb, n, dim);
        { /* gate and up (n, ffn): one pool job */
            const matmul_weight *w2[2] = {&L->w_gate, &L->w_up};
            float *y2[2] = {c->hb, c->hb2};
            matmul_n(c->pool, w2, 2, &a, y2);
        }
        if (m->arch->geglu)
            locks_geglu_n(c->hb, c->hb2, (size_t)n * ffn); /* gelu_tanh(gate) * up (vmath) */
        else
            locks_swiglu_n(c->hb, c->hb2, (size_t)n * ffn); /* silu(gate) * up */
        a = prepare(c, c->hb, n, ffn);
        linear(c, &L->w_down, &a, c->proj); /* (n, dim) */
        if (L->post_ffn_norm) rmsnorm(c->proj, c->proj, L->post_ffn_norm, n, dim, in->norm_eps);
        for (size_t i = 0; i < (size_t)n * dim; i++) c->x[i] += c->proj[i];
    }

    /* logits of the last token (or of all n) = Wout . rms(x) */
    if (logits) {
        const int32_t first = all_logits ? 0 : n - 1;
        rmsnorm(c->xb, c->x + (size_t)first * dim, m->output_norm, n - first, dim, in->norm_eps);
        matmul_act a = prepare(c, c->xb, n - first, dim);
        if (c->draft_argmax && c->draft_mode != LLAMA_DRAFT_OFF && mode == FWD_DECODE && n - first == 1 && a.xq)
            draft_logits(c, &a, logits);
        else
            linear(c, &m->output, &a, logits);
    }
    return LOCKS_OK;
}

/* Notes the tokens fed: the greedy drafts' vocabulary takes every token the context has
 * met (llama_ctx_draft_vocab_add, now if the 4-bit head exists, else when it is built).
 * Without the table (an allocation that failed) the vocabulary is the first ids only. */
static void vocab_note(locks_ctx *c, const int32_t *tokens, int32_t n) {
    const int32_t V = c->m->info.n_vocab;
    if (!c->seen && !(c->seen = locks_alloc((size_t)V, 1))) return;
    for (int32_t i = 0; i < n; i++) {
        const int32_t v = tokens[i];
        if (v < 0 || v >= V || c->seen[v]) continue;
        c->seen[v] = 1;
        llama_ctx_draft_vocab_add(c, &v, 1);
    }
}

/* Reserves n tokens, runs them, keeps the context consistent: POOL_FULL changes nothing;
 * a failure mid-pass (some layers written) truncates the sequence back to its length
 * before the call, and only if that fails too is the context marked broken. */
static locks_status run_tokens(locks_ctx *c, int32_t sq, const int32_t *tokens, int32_t n, int mode, float *logits,
                               int all_logits) {
    locks_status st = tokens_check(c, tokens, n);
    if (st == LOCKS_OK) st = room_check(c, sq, n);
    if (st == LOCKS_OK) st = locks_cache_append(c->cache, c->seq[sq], n);
    if (st != LOCKS_OK) return st;
    st = forward(c, sq, tokens, n, mode, logits, all_logits);
    if (st != LOCKS_OK) {
        locks_log(LOCKS_LOG_ERROR, "model: forward pass failed at position %d: %s", c->n_tokens[sq],
                  locks_status_str(st));
        if (locks_cache_seq_truncate(c->cache, c->seq[sq], c->n_tokens[sq]) != LOCKS_OK) c->broken = 1;
        return st;
    }
    c->n_tokens[sq] += n;
    vocab_note(c, tokens, n);
    return LOCKS_OK;
}

/* Prefill in chunks of n_batch; logits of the last token, or (all_logits) of every one,
 * attending as mode (PREFILL or VERIFY) says. */
static locks_status prefill(locks_ctx *c, int32_t sq, const int32_t *tokens, int32_t n, float *logits,
                            int all_logits, int mode) {
    locks_status st0 = ctx_check(c);
    if (st0 == LOCKS_OK) st0 = seq_check(c, sq);
    if (st0 == LOCKS_OK && (n < 0 || (!tokens && n > 0)))
        st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "n %d with tokens %s (n >= 0 tokens, not NULL when n > 0)", n,
                         tokens ? "given" : "NULL");
    if (st0 == LOCKS_OK) st0 = room_check(c, sq, n);
    if (st0 == LOCKS_OK) st0 = tokens_check(c, tokens, n);
    if (st0 != LOCKS_OK) return st0;
    double t0 = locks_now_ms(), c0 = cpu_ms();
    int32_t n0 = c->n_tokens[sq];
    for (int32_t done = 0; done < n;) {
        int32_t batch = c->gpu && c->p.n_batch < ENGINE_CUDA_MIN_CHUNK ? ENGINE_CUDA_MIN_CHUNK : c->p.n_batch;
        int32_t chunk = n - done < batch ? n - done : batch;
        int last = done + chunk == n;
        float *lg = all_logits ? (logits ? logits + (size_t)done * (size_t)c->m->info.n_vocab : NULL)
                               : (last ? logits : NULL);
        locks_status st = run_tokens(c, sq, tokens + done, chunk, mode, lg, all_logits);
        if (st != LOCKS_OK) { /* all or nothing: drop the chunks already run */
            if (!c->broken && truncate_seq(c, sq, n0) != LOCKS_OK) c->broken = 1;
            return st;
        }
        done += chunk;
        if (c->p.progress) c->p.progress(done, n, c->p.progress_user);
    }
    c->stats.n_prefill += n;
    c->stats.prefill_ms += locks_now_ms() - t0;
    c->stats.prefill_cpu_ms += cpu_ms() - c0;
    return LOCKS_OK;
}

locks_status locks_ctx_prefill(locks_ctx *c, const int32_t *tokens, int32_t n, float *logits) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(prefill(c, 0, tokens, n, logits, 0, FWD_PREFILL), "locks_ctx_prefill", mark);
}

locks_status locks_ctx_prefill_seq(locks_ctx *c, int32_t seq, const int32_t *tokens, int32_t n, float *logits) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(prefill(c, seq, tokens, n, logits, 0, FWD_PREFILL), "locks_ctx_prefill_seq", mark);
}

static locks_status no_logits(void) {
    return locks_fail(LOCKS_ERR_INVALID_ARG, "logits is NULL (this call returns every token's logits)");
}

locks_status locks_ctx_prefill_all(locks_ctx *c, const int32_t *tokens, int32_t n, float *logits) {
    const uint32_t mark = locks_error_mark();
    locks_status st = logits ? prefill(c, 0, tokens, n, logits, 1, FWD_VERIFY) : no_logits();
    return locks_fail_call(st, "locks_ctx_prefill_all", mark);
}

static locks_status ctx_decode(locks_ctx *c, int32_t token, float *logits) {
    locks_status st0 = ctx_check(c);
    if (st0 == LOCKS_OK && !logits) st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "logits is NULL");
    if (st0 != LOCKS_OK) return st0;
    double t0 = locks_now_ms(), c0 = cpu_ms();
    locks_status st = run_tokens(c, 0, &token, 1, FWD_DECODE, logits, 0);
    if (st != LOCKS_OK) return st;
    c->stats.n_decode += 1;
    c->stats.decode_ms += locks_now_ms() - t0;
    c->stats.decode_cpu_ms += cpu_ms() - c0;
    return LOCKS_OK;
}

locks_status locks_ctx_decode(locks_ctx *c, int32_t token, float *logits) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(ctx_decode(c, token, logits), "locks_ctx_decode", mark);
}

/* One decode token of each of the n sequences seqs on the device, in one pass (their
 * tokens and room checked by the caller): each takes its slot, then the engine runs; if
 * anything fails every slot taken is given back, and a give-back that fails leaves the
 * context broken. */
static locks_status decode_gpu(locks_ctx *c, const int32_t *seqs, int32_t n, const int32_t *tokens, float *logits) {
    locks_status st = LOCKS_OK;
    int32_t pos[LOCKS_CTX_MAX_SEQS] = {0};
    for (int32_t i = 0; i < n && st == LOCKS_OK; i++) {
        pos[i] = c->n_tokens[seqs[i]];
        if ((st = locks_cache_append(c->cache, c->seq[seqs[i]], 1)) != LOCKS_OK)
            for (int32_t r = 0; r < i; r++)
                if (locks_cache_seq_truncate(c->cache, c->seq[seqs[r]], c->n_tokens[seqs[r]]) != LOCKS_OK) c->broken = 1;
    }
    if (st != LOCKS_OK) return st;
    st = engine_cuda_decode_seqs(c->gpu, seqs, n, tokens, pos, logits, &c->p.step, c->p.n_ctx, &c->stats);
    for (int32_t i = 0; i < n; i++) {
        if (st == LOCKS_OK) {
            c->n_tokens[seqs[i]] += 1;
            const int32_t lo = c->n_tokens[seqs[i]] - c->swa_cap; /* the device rings' oldest position */
            if (c->n_local > 0 && lo > c->swa_lo[seqs[i]]) c->swa_lo[seqs[i]] = lo;
        } else if (locks_cache_seq_truncate(c->cache, c->seq[seqs[i]], c->n_tokens[seqs[i]]) != LOCKS_OK) c->broken = 1;
    }
    return st;
}

static locks_status decode_batch(locks_ctx *c, const int32_t *tokens, float *logits) {
    locks_status st0 = ctx_check(c);
    if (st0 == LOCKS_OK && !tokens) st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "tokens is NULL");
    if (st0 != LOCKS_OK) return st0;
    const int32_t ns = c->n_seqs, V = c->m->info.n_vocab;
    for (int32_t s = 0; s < ns; s++) /* everything checked before any sequence moves */
        if ((st0 = tokens_check(c, tokens + s, 1)) != LOCKS_OK || (st0 = room_check(c, s, 1)) != LOCKS_OK)
            return st0;
    double t0 = locks_now_ms(), c0 = cpu_ms();
    locks_status st = LOCKS_OK;
    if (c->gpu) { /* one token of every sequence in one pass */
        int32_t all[LOCKS_CTX_MAX_SEQS];
        for (int32_t s = 0; s < ns; s++) all[s] = s;
        st = decode_gpu(c, all, ns, tokens, logits);
    } else { /* the sequences one after the other; all or nothing */
        for (int32_t s = 0; s < ns && st == LOCKS_OK; s++) {
            float *lg = logits ? logits + (size_t)s * (size_t)V : NULL;
            st = run_tokens(c, s, &tokens[s], 1, FWD_DECODE, lg, 0);
            if (st != LOCKS_OK)
                for (int32_t r = 0; r < s; r++)
                    if (truncate_seq(c, r, c->n_tokens[r] - 1) != LOCKS_OK) c->broken = 1;
        }
    }
    if (st != LOCKS_OK) return st;
    c->stats.n_decode += ns;
    c->stats.decode_ms += locks_now_ms() - t0;
    c->stats.decode_cpu_ms += cpu_ms() - c0;
    return LOCKS_OK;
}

locks_status locks_ctx_decode_batch(locks_ctx *c, const int32_t *tokens, float *logits) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(decode_batch(c, tokens, logits), "locks_ctx_decode_batch", mark);
}

/* ================================================================================ */
/* Generate                                                                         */
/* ================================================================================ */

/* locks_generate on the GPU: the device samples (engine_cuda.c); per token the host
 * reads back only the sampled id. */
static locks_status generate_gpu(locks_ctx *c, const int32_t *prompt, int32_t n_prompt, int32_t n_predict,
                                 locks_sampler *s, locks_token_fn on_token, void *user, int32_t *out,
                                 int32_t *n_out) {
    locks_status st = engine_cuda_set_sampler(c->gpu, locks_sampler_get_params(s));
    if (st == LOCKS_OK) st = locks_ctx_prefill(c, prompt, n_prompt, NULL);
    int32_t tok = -1, produced = 0;
    if (st == LOCKS_OK && n_predict > 0) st = engine_cuda_sample_prefill(c->gpu, &tok);
    while (st == LOCKS_OK && produced < n_predict) {
        if (out) out[produced] = tok;
        produced++;
        int stop = on_token ? on_token(tok, user) : 0;
        if (stop || is_eog(c->m, tok) || produced == n_predict) break;
        if (c->n_tokens[0] >= c->p.n_ctx) break; /* context full: stop, not an error */
        double t0 = locks_now_ms(), c0 = cpu_ms();
        st = run_tokens(c, 0, &tok, 1, FWD_DECODE, NULL, 0);
        if (st != LOCKS_OK) break;
        c->stats.n_decode += 1;
        c->stats.decode_ms += locks_now_ms() - t0;
        c->stats.decode_cpu_ms += cpu_ms() - c0;
        tok = engine_cuda_next(c->gpu);
    }
    if (n_out) *n_out = produced;
    return st;
}

static locks_status generate(locks_ctx *c, const int32_t *prompt, int32_t n_prompt, int32_t n_predict,
                             locks_sampler *s, locks_token_fn on_token, void *user, int32_t *out, int32_t *n_out) {
    if (n_out) *n_out = 0;
    locks_status st0 = ctx_check(c);
    if (st0 == LOCKS_OK && !s) st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "the sampler is NULL");
    if (st0 == LOCKS_OK && (n_prompt <= 0 || !prompt))
        st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "n_prompt %d with prompt %s (a prompt of >= 1 tokens is needed)",
                         n_prompt, prompt ? "given" : "NULL");
    if (st0 == LOCKS_OK && n_predict < 0)
        st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "n_predict %d (must be >= 0)", n_predict);
    if (st0 != LOCKS_OK) return st0;
    if (c->gpu) return generate_gpu(c, prompt, n_prompt, n_predict, s, on_token, user, out, n_out);
    float *logits = locks_alloc((size_t)c->m->info.n_vocab, sizeof(float));
    if (!logits) return LOCKS_ERR_OOM;
    locks_status st = locks_ctx_prefill(c, prompt, n_prompt, logits);
    int32_t produced = 0;
    while (st == LOCKS_OK && produced < n_predict) {
        int32_t tok = locks_sampler_sample(s, logits);
        if (out) out[produced] = tok;
        produced++;
        int stop = on_token ? on_token(tok, user) : 0;
        if (stop || is_eog(c->m, tok) || produced == n_predict) break;
        if (c->n_tokens[0] >= c->p.n_ctx) break; /* context full: stop, not an error */
        st = locks_ctx_decode(c, tok, logits);
    }
    if (n_out) *n_out = produced;
    locks_free(logits);
    return st;
}

locks_status locks_generate(locks_ctx *c, const int32_t *prompt, int32_t n_prompt,
                            int32_t n_predict, locks_sampler *s, locks_token_fn on_token,
                            void *user, int32_t *out, int32_t *n_out) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(generate(c, prompt, n_prompt, n_predict, s, on_token, user, out, n_out), "locks_generate",
                           mark);
}

/* ================================================================================ */
/* Serving: a step over any subset of the sequences                                 */
/* ================================================================================ */

/* For a server's continuous batching: requests join and leave between steps, so a step
 * decodes the sequences that are generating now, not all of them. Same checks and the
 * same all-or-nothing rule as locks_ctx_decode_batch. */
static locks_status decode_seqs(locks_ctx *c, const int32_t *seqs, int32_t n, const int32_t *tokens, float *logits) {
    locks_status st0 = ctx_check(c);
    if (st0 == LOCKS_OK && (!seqs || !tokens))
        st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "%s is NULL", !seqs ? "seqs" : "tokens");
    if (st0 == LOCKS_OK && (n < 1 || n > c->n_seqs))
        st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "n %d (must be 1..%d, the context's sequences)", n, c->n_seqs);
    if (st0 != LOCKS_OK) return st0;
    const int32_t V = c->m->info.n_vocab;
    _Static_assert(LOCKS_CTX_MAX_SEQS <= 64, "seen is a 64-bit mask of the sequences");
    uint64_t seen = 0;
    for (int32_t i = 0; i < n; i++) { /* everything checked before any sequence moves */
        int32_t s = seqs[i];
        if ((st0 = seq_check(c, s)) != LOCKS_OK) return st0;
        if (seen >> s & 1u) return locks_fail(LOCKS_ERR_INVALID_ARG, "seqs[%d] = %d appears twice", i, s);
        seen |= (uint64_t)1 << s;
        if ((st0 = tokens_check(c, tokens + i, 1)) != LOCKS_OK || (st0 = room_check(c, s, 1)) != LOCKS_OK) return st0;
    }
    double t0 = locks_now_ms(), c0 = cpu_ms();
    locks_status st = LOCKS_OK;
    if (c->gpu) { /* one pass; the sequences not named idle */
        st = decode_gpu(c, seqs, n, tokens, logits);
    } else {
        for (int32_t i = 0; i < n && st == LOCKS_OK; i++) {
            st = run_tokens(c, seqs[i], &tokens[i], 1, FWD_DECODE, logits ? logits + (size_t)i * (size_t)V : NULL, 0);
            if (st != LOCKS_OK)
                for (int32_t r = 0; r < i; r++)
                    if (truncate_seq(c, seqs[r], c->n_tokens[seqs[r]] - 1) != LOCKS_OK) c->broken = 1;
        }
    }
    if (st != LOCKS_OK) return st;
    c->stats.n_decode += n;
    c->stats.decode_ms += locks_now_ms() - t0;
    c->stats.decode_cpu_ms += cpu_ms() - c0;
    return LOCKS_OK;
}

locks_status locks_ctx_decode_seqs(locks_ctx *c, const int32_t *seqs, int32_t n, const int32_t *tokens, float *logits) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(decode_seqs(c, seqs, n, tokens, logits), "locks_ctx_decode_seqs", mark);
}

locks_status locks_ctx_truncate_seq(locks_ctx *c, int32_t seq, int32_t n) {
    const uint32_t mark = locks_error_mark();
    locks_status st = ctx_check(c);
    if (st == LOCKS_OK) st = seq_check(c, seq);
    if (st == LOCKS_OK) st = truncate_seq(c, seq, n);
    return locks_fail_call(st, "locks_ctx_truncate_seq", mark);
}

/* ---- Shared prefix pages ---- */

/* The first n tokens of sequence src can be shared when n is a whole number of pages
 * within its length and, on a model with sliding-window layers, src's rings still hold
 * the window before n (positions n - window + 1 .. n - 1): dst's rings start as copies. */
static int share_ok(const locks_ctx *c, int32_t src, int32_t n) {
    if (n <= 0 || n % LOCKS_PAGE || n > c->n_tokens[src]) return 0;
    const int32_t need = n - c->m->info.swa_window + 1;
    return c->n_local == 0 || (need > 0 ? need : 0) >= c->swa_lo[src];
}

int32_t locks_ctx_seq_shareable(const locks_ctx *c, int32_t src, int32_t max_n) {
    int32_t n = max_n;
    if (!c || c->broken || c->gpu || src < 0 || src >= c->n_seqs) return 0;
    if (n > c->n_tokens[src]) n = c->n_tokens[src];
    n -= n % LOCKS_PAGE;
    return share_ok(c, src, n) ? n : 0;
}

locks_status locks_ctx_seq_share(locks_ctx *c, int32_t dst, int32_t src, int32_t n) {
    if (!c || c->broken || dst < 0 || dst >= c->n_seqs || src < 0 || src >= c->n_seqs || dst == src)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_ctx_seq_share: dst %d, src %d (the context has 0..%d, distinct)",
                          dst, src, c ? c->n_seqs - 1 : -1);
    if (c->gpu) return locks_fail(LOCKS_ERR_UNSUPPORTED, "locks_ctx_seq_share: shared pages on the CUDA backend");
    if (!share_ok(c, src, n))
        return locks_fail(LOCKS_ERR_INVALID_ARG,
                          "locks_ctx_seq_share: %d tokens of sequence %d (it holds %d; a multiple of %d%s; "
                          "locks_ctx_seq_shareable says how many can be)",
                          n, src, c->n_tokens[src], LOCKS_PAGE,
                          c->n_local ? ", with the sliding-window layers' last window before it still kept" : "");
    locks_status st = truncate_seq(c, dst, 0);
    if (st == LOCKS_OK) st = locks_cache_seq_share(c->cache, c->seq[dst], c->seq[src], n / LOCKS_PAGE);
    if (st != LOCKS_OK) return st;
    if (c->n_local > 0) { /* same ring size: slot p % cap holds position p in both */
        const locks_model_info *in = &c->m->info;
        const size_t ring = (size_t)c->n_local * swa_ring_bytes(c->swa_cap, in->n_kv_heads, in->head_dim);
        memcpy((char *)c->swa_kv + (size_t)dst * ring, (const char *)c->swa_kv + (size_t)src * ring, ring);
        c->swa_lo[dst] = c->swa_lo[src];
    }
    c->n_tokens[dst] = n;
    return LOCKS_OK;
}

locks_status locks_ctx_prefill_all_seq(locks_ctx *c, int32_t seq, const int32_t *tokens, int32_t n, float *logits) {
    const uint32_t mark = locks_error_mark();
    locks_status st = logits ? prefill(c, seq, tokens, n, logits, 1, FWD_VERIFY) : no_logits();
    return locks_fail_call(st, "locks_ctx_prefill_all_seq", mark);
}

/* ---- A sequence's K/V out and back in (slot save / restore) ---- */

/* K/V copies are host-side: a context on the GPU keeps them on the device. */
static locks_status kv_on_host(const locks_ctx *c) {
    return c->gpu ? locks_fail(LOCKS_ERR_UNSUPPORTED, "the K/V of a CUDA context stay on the device") : LOCKS_OK;
}

static locks_status seq_read_kv(const locks_ctx *c, int32_t seq, int32_t layer, uint16_t *k, uint16_t *v) {
    locks_status st0 = ctx_check(c);
    if (st0 == LOCKS_OK) st0 = seq_check(c, seq);
    if (st0 == LOCKS_OK && (layer < 0 || layer >= c->m->info.n_layers))
        st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "layer %d (the model has layers 0..%d)", layer, c->m->info.n_layers - 1);
    if (st0 == LOCKS_OK && (!k || !v)) st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "%s is NULL", !k ? "k" : "v");
    if (st0 == LOCKS_OK) st0 = kv_on_host(c);
    if (st0 != LOCKS_OK) return st0;
    const int32_t hkv = c->m->info.n_kv_heads, d = c->m->info.head_dim, n = c->n_tokens[seq];
    if (c->m->layers[layer].local) { /* the ring's positions swa_lo .. n - 1; 0 before */
        const swa_ring r = ctx_ring(c, seq, layer);
        const size_t row = (size_t)hkv * (size_t)d;
        for (int32_t t = 0; t < n; t++) {
            size_t slot = (size_t)(t % r.cap);
            if (t < c->swa_lo[seq]) {
                memset(k + (size_t)t * row, 0, sizeof(uint16_t) * row);
                memset(v + (size_t)t * row, 0, sizeof(uint16_t) * row);
            } else {
                memcpy(k + (size_t)t * row, r.k + slot * row, sizeof(uint16_t) * row);
                memcpy(v + (size_t)t * row, r.v + slot * row, sizeof(uint16_t) * row);
            }
        }
        return LOCKS_OK;
    }
    const int32_t cl = c->cache_layer[layer];
    int32_t n_pages = 0;
    const int32_t *bt = locks_cache_block_table(c->cache, c->seq[seq], &n_pages);
    if (!bt && n > 0) return LOCKS_ERR_INVALID_ARG;
    for (int32_t t = 0; t < n; t++) { /* page [Hkv][P][d] -> [t][Hkv][d] */
        const uint16_t *kp = locks_cache_k_page(c->cache, cl, bt[t / LOCKS_PAGE]);
        const uint16_t *vp = locks_cache_v_page(c->cache, cl, bt[t / LOCKS_PAGE]);
        if (!kp || !vp) return LOCKS_ERR_UNSUPPORTED;
        for (int32_t h = 0; h < hkv; h++) {
            size_t src = ((size_t)h * LOCKS_PAGE + (size_t)(t % LOCKS_PAGE)) * (size_t)d;
            size_t dst = ((size_t)t * hkv + (size_t)h) * (size_t)d;
            memcpy(k + dst, kp + src, sizeof(uint16_t) * (size_t)d);
            memcpy(v + dst, vp + src, sizeof(uint16_t) * (size_t)d);
        }
    }
    return LOCKS_OK;
}

locks_status locks_ctx_seq_read_kv(const locks_ctx *c, int32_t seq, int32_t layer, uint16_t *k, uint16_t *v) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(seq_read_kv(c, seq, layer, k, v), "locks_ctx_seq_read_kv", mark);
}

size_t locks_ctx_summary_bytes(const locks_ctx *c) {
    return c ? locks_summary_bytes(c->m->info.head_dim, c->p.rank, c->p.summary_prec) : 0;
}

static locks_status seq_read_summaries(const locks_ctx *c, int32_t seq, int32_t layer, void *dst) {
    locks_status st = ctx_check(c);
    if (st == LOCKS_OK) st = seq_check(c, seq);
    if (st == LOCKS_OK && (layer < 0 || layer >= c->m->info.n_layers))
        st = locks_fail(LOCKS_ERR_INVALID_ARG, "layer %d (the model has layers 0..%d)", layer, c->m->info.n_layers - 1);
    if (st == LOCKS_OK && c->m->layers[layer].local)
        st = locks_fail(LOCKS_ERR_INVALID_ARG, "layer %d is a sliding-window layer: it has no summaries", layer);
    if (st == LOCKS_OK) st = kv_on_host(c);
    if (st != LOCKS_OK) return st;
    return locks_cache_read_summaries(c->cache, c->seq[seq], c->cache_layer[layer], dst);
}

locks_status locks_ctx_seq_read_summaries(const locks_ctx *c, int32_t seq, int32_t layer, void *dst) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(seq_read_summaries(c, seq, layer, dst), "locks_ctx_seq_read_summaries", mark);
}

/* Every input of a load checked before the sequence changes: the K/V fp16 bits of every
 * layer finite, and each summary record's scales (locks_cache_write_f16 checks the same
 * again per layer, which is then known to pass). */
static locks_status load_check(const locks_ctx *c, int32_t n, const uint16_t *k, const uint16_t *v,
                               const void *sums) {
    const locks_model_info *in = &c->m->info;
    const size_t row = (size_t)in->n_kv_heads * (size_t)in->head_dim, all = (size_t)in->n_layers * (size_t)n * row;
    const size_t nk = locks_f16_first_nonfinite(k, all), nv = locks_f16_first_nonfinite(v, all);
    if (nk < all || nv < all) {
        const size_t i = nk < all ? nk : nv, per = (size_t)n * row;
        return locks_fail(LOCKS_ERR_NONFINITE, "%s of layer %d, token %d, KV head %d is not finite (fp16 bits 0x%04x)",
                          nk < all ? "key" : "value", (int32_t)(i / per), (int32_t)(i % per / row),
                          (int32_t)(i % row / (size_t)in->head_dim), (unsigned)(nk < all ? k : v)[i]);
    }
    if (!sums) return LOCKS_OK;
    const int32_t n_global = in->n_layers - c->n_local;
    const size_t rec = locks_ctx_summary_bytes(c), n_rec = (size_t)n_global * (size_t)(n / LOCKS_PAGE) * (size_t)in->n_kv_heads;
    for (size_t i = 0; i < n_rec; i++) {
        const size_t bad = locks_summary_record_bad(in->head_dim, c->p.rank, c->p.summary_prec,
                                                    (const unsigned char *)sums + i * rec);
        if (bad == SIZE_MAX) continue;
        const size_t per_layer = (size_t)(n / LOCKS_PAGE) * (size_t)in->n_kv_heads;
        return locks_fail(LOCKS_ERR_NONFINITE,
                          "the summary of cache layer %d, page %d, KV head %d has a non-finite %s (byte %zu of %zu)",
                          (int32_t)(i / per_layer), (int32_t)(i % per_layer) / in->n_kv_heads,
                          (int32_t)(i % (size_t)in->n_kv_heads),
                          c->p.summary_prec == LOCKS_SUMMARY_Q ? "scale" : "value", bad, rec);
    }
    return LOCKS_OK;
}

static locks_status seq_load(locks_ctx *c, int32_t seq, int32_t n, const uint16_t *k, const uint16_t *v,
                             const void *sums) {
    locks_status st0 = ctx_check(c);
    if (st0 == LOCKS_OK) st0 = seq_check(c, seq);
    if (st0 == LOCKS_OK && (n < 0 || (n > 0 && (!k || !v))))
        st0 = locks_fail(LOCKS_ERR_INVALID_ARG, "n %d with k, v %s (n >= 0; k and v not NULL when n > 0)", n,
                         k && v ? "given" : "NULL");
    if (st0 == LOCKS_OK) st0 = kv_on_host(c);
    if (st0 == LOCKS_OK && n > c->p.n_ctx)
        st0 = locks_fail(LOCKS_ERR_POOL_FULL, "n %d exceeds n_ctx %d", n, c->p.n_ctx);
    if (st0 == LOCKS_OK) st0 = load_check(c, n, k, v, sums);
    if (st0 != LOCKS_OK) return st0;
    const int32_t L = c->m->info.n_layers, hkv = c->m->info.n_kv_heads, d = c->m->info.head_dim;
    const size_t per_layer = (size_t)n * (size_t)hkv * (size_t)d;
    const size_t sum_layer = (size_t)(n / LOCKS_PAGE) * (size_t)hkv * locks_ctx_summary_bytes(c);
    locks_status st = truncate_seq(c, seq, 0);
    if (st == LOCKS_OK && n > 0) st = locks_cache_append(c->cache, c->seq[seq], n);
    for (int32_t l = 0; l < L && st == LOCKS_OK && n > 0; l++) {
        const uint16_t *kl = k + (size_t)l * per_layer, *vl = v + (size_t)l * per_layer;
        const int32_t cl = c->cache_layer[l];
        if (c->m->layers[l].local) { /* the last positions the ring holds, fp16 as given */
            const swa_ring r = ctx_ring(c, seq, l);
            const size_t row = (size_t)hkv * (size_t)d;
            for (int32_t t = n < r.cap ? 0 : n - r.cap; t < n; t++) {
                memcpy(r.k + (size_t)(t % r.cap) * row, kl + (size_t)t * row, sizeof(uint16_t) * row);
                memcpy(r.v + (size_t)(t % r.cap) * row, vl + (size_t)t * row, sizeof(uint16_t) * row);
            }
        } else {
            st = locks_cache_write_f16(c->cache, c->seq[seq], cl, 0, n, kl, vl,
                                       sums ? (const char *)sums + (size_t)cl * sum_layer : NULL);
        }
    }
    /* the saved positions before a ring's last ones may have been zeros (not kept where
     * they were read): only the window before n is known good, so no truncation below n
     * (but to 0) after a load */
    const int32_t lo = n - c->m->info.swa_window + 1;
    if (st == LOCKS_OK) {
        c->n_tokens[seq] = n;
        c->swa_lo[seq] = lo > 0 ? lo : 0;
    } else if (locks_cache_seq_truncate(c->cache, c->seq[seq], 0) == LOCKS_OK) {
        c->n_tokens[seq] = 0;
        c->swa_lo[seq] = 0;
    } else {
        c->broken = 1;
    }
    return st;
}

locks_status locks_ctx_seq_load(locks_ctx *c, int32_t seq, int32_t n, const uint16_t *k, const uint16_t *v,
                                const void *sums) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(seq_load(c, seq, n, k, v, sums), "locks_ctx_seq_load", mark);
}

locks_status locks_ctx_seq_load_kv(locks_ctx *c, int32_t seq, int32_t n, const uint16_t *k, const uint16_t *v) {
    const uint32_t mark = locks_error_mark();
    return locks_fail_call(seq_load(c, seq, n, k, v, NULL), "locks_ctx_seq_load_kv", mark);
}
