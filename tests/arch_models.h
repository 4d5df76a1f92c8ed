/*
 * arch_models.h — the tiny random models of tests/test_arch.c, shared with
 * tests/test_gpu_arch.c: one per layer variant of llama.c's ARCHS table (llama, qwen2,
 * qwen3, gemma3), fp32 weights drawn fresh per run (the test's seed), written as a GGUF in
 * memory: F32 throughout, or (quant = 1) the attention matrices as Q8_0 and the FFN's as
 * Q4_0, quantized here (round to nearest, as llama.cpp's reference quantizers), the
 * embeddings and the vectors F32. Shapes: dim 64, 2 query heads and 1 KV head of 64 (q_dim
 * 128 != dim: heads wider than dim / n_heads), FFN 256, vocabulary 48; gemma3 has 6 layers
 * (5 local with a window of 20, the 6th global), the others 2.
 */
#ifndef LOCKS_TEST_ARCH_MODELS_H
#define LOCKS_TEST_ARCH_MODELS_H

#include <math.h>
#include <stdio.h>

#include "gguf_buf.h"
#include "model/quant.h"
#include "test_util.h"
#include "util.h"

/* ================================================================================ */
/* Tiny GGUF writer                                                                 */
/* ================================================================================ */

/* (buf, put, kv_*: tests/gguf_buf.h) */

#define MAX_T 128
typedef struct {
    char name[64];
    int64_t ne0, ne1;
    uint32_t type;
    const void *data;
    size_t nbytes;
} wtensor;

/* ================================================================================ */
/* Tiny model                                                                       */
/* ================================================================================ */

enum { DIM = 64, HQ = 2, HKV = 1, HD = 64, FFN = 256, VOCAB = 48, WINDOW = 20 };

typedef struct {
    const char *arch;
    int n_layers, bias, qk_norm, post_norms, geglu, emb_scale, swa, neox;
} variant;

static const variant VARIANTS[] = {
    {"llama", 2, 0, 0, 0, 0, 0, 0, 0},
    {"qwen2", 2, 1, 0, 0, 0, 0, 0, 1},
    {"qwen3", 2, 0, 1, 0, 0, 0, 0, 1},
    {"gemma3", 6, 0, 1, 1, 1, 1, 1, 1},
};

typedef struct {
    float *emb, *out_norm;
    float *attn_norm[6], *ffn_norm[6], *wq[6], *wk[6], *wv[6], *wo[6], *wg[6], *wu[6], *wd[6];
    float *bq[6], *bk[6], *bv[6], *qn[6], *kn[6], *pan[6], *pfn[6];
} weights;

static float *rnd(size_t n, double sigma, double mean) {
    float *x = malloc(n * sizeof(float));
    SETUP(x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(mean + sigma * tu_normal());
    return x;
}

static void make_weights(const variant *v, weights *w) {
    memset(w, 0, sizeof *w);
    w->emb = rnd((size_t)VOCAB * DIM, 1.0, 0.0);
    w->out_norm = rnd(DIM, 0.1, 1.0);
    for (int l = 0; l < v->n_layers; l++) {
        w->attn_norm[l] = rnd(DIM, 0.1, 1.0);
        w->ffn_norm[l] = rnd(DIM, 0.1, 1.0);
        w->wq[l] = rnd((size_t)HQ * HD * DIM, 0.25, 0.0);
        w->wk[l] = rnd((size_t)HKV * HD * DIM, 0.25, 0.0);
        w->wv[l] = rnd((size_t)HKV * HD * DIM, 0.15, 0.0);
        w->wo[l] = rnd((size_t)DIM * HQ * HD, 0.1, 0.0);
        w->wg[l] = rnd((size_t)FFN * DIM, 0.15, 0.0);
        w->wu[l] = rnd((size_t)FFN * DIM, 0.15, 0.0);
        w->wd[l] = rnd((size_t)DIM * FFN, 0.1, 0.0);
        if (v->bias) {
            w->bq[l] = rnd((size_t)HQ * HD, 0.5, 0.0);
            w->bk[l] = rnd((size_t)HKV * HD, 0.5, 0.0);
            w->bv[l] = rnd((size_t)HKV * HD, 0.5, 0.0);
        }
        if (v->qk_norm) {
            w->qn[l] = rnd(HD, 0.3, 1.0);
            w->kn[l] = rnd(HD, 0.3, 1.0);
        }
        if (v->post_norms) {
            w->pan[l] = rnd(DIM, 0.1, 1.0);
            w->pfn[l] = rnd(DIM, 0.1, 1.0);
        }
    }
}

static void free_weights(weights *w) {
    float **all = (float **)(void *)w;
    for (size_t i = 0; i < sizeof *w / sizeof(float *); i++) free(all[i]);
}

/* x [rows][cols] as Q8_0 (type 8: per 32 values fp16 d = max|x| / 127 and int8
 * round(x / d)) or Q4_0 (type 2, quant.c's quantizer); malloc'd, *nbytes its size. */
static uint8_t *quantize_rows(const float *x, int64_t rows, int64_t cols, uint32_t type, size_t *nbytes) {
    const size_t blocks = (size_t)rows * (size_t)cols / 32, bb = type == 8 ? 34 : 18;
    uint8_t *q = malloc(blocks * bb);
    SETUP(q && cols % 32 == 0);
    for (int64_t r = 0; r < rows && type == 2; r++)
        quant_q4_0_from_f32(x + (size_t)r * cols, (int32_t)cols, q + (size_t)r * (size_t)(cols / 32) * bb);
    for (size_t k = 0; k < blocks && type == 8; k++) {
        const float *xb = x + 32 * k;
        float amax = 0.f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        const float d = amax / 127.f, id = d > 0.f ? 1.f / d : 0.f;
        const uint16_t dh = locks_f32_to_f16(d);
        memcpy(q + bb * k, &dh, 2);
        for (int i = 0; i < 32; i++) q[bb * k + 2 + i] = (uint8_t)(int8_t)lrintf(xb[i] * id);
    }
    *nbytes = blocks * bb;
    return q;
}

/* What to break in the file. */
typedef enum { BREAK_NONE, BREAK_ARCH, BREAK_TENSOR, BREAK_TOKENS, BREAK_SCALE } breakage;

/* The GGUF of a variant's weights (F32; with BREAK_SCALE, blk.0.ffn_down as Q4_K with a
 * NaN dmin in one block). */
static buf write_model(const variant *v, const weights *w, breakage brk, int quant) {
    wtensor t[MAX_T];
    int nt = 0;
    uint8_t *q4k = NULL, *qbuf[MAX_T] = {0};
#define T2(nm, ptr, c0, c1)                                                         \
    do {                                                                            \
        snprintf(t[nt].name, sizeof t[nt].name, "%s", nm);                          \
        t[nt].ne0 = c0;                                                             \
        t[nt].ne1 = c1;                                                             \
        t[nt].type = 0;                                                             \
        t[nt].data = ptr;                                                           \
        t[nt].nbytes = (size_t)(c0) * (size_t)(c1) * 4;                             \
        nt++;                                                                       \
    } while (0)
    char nm[64];
    T2("token_embd.weight", w->emb, DIM, VOCAB);
    T2("output_norm.weight", w->out_norm, DIM, 1);
    for (int l = 0; l < v->n_layers; l++) {
#define L2(suffix, ptr, c0, c1)                               \
    do {                                                      \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix);      \
        if (ptr) T2(nm, ptr, c0, c1);                         \
    } while (0)
        L2("attn_norm.weight", w->attn_norm[l], DIM, 1);
        L2("ffn_norm.weight", w->ffn_norm[l], DIM, 1);
        const int first = nt; /* the matrices, quantized below with quant */
        L2("attn_q.weight", w->wq[l], DIM, HQ * HD);
        L2("attn_k.weight", w->wk[l], DIM, HKV * HD);
        L2("attn_v.weight", w->wv[l], DIM, HKV * HD);
        L2("attn_output.weight", w->wo[l], HQ * HD, DIM);
        L2("ffn_gate.weight", w->wg[l], DIM, FFN);
        L2("ffn_up.weight", w->wu[l], DIM, FFN);
        if (brk == BREAK_SCALE && l == 0) { /* Q4_K: one 256-element block per row */
            size_t nb = (size_t)DIM * FFN / 256;
            q4k = malloc(nb * 144);
            SETUP(q4k);
            for (size_t i = 0; i < nb * 144; i++) q4k[i] = (uint8_t)tu_next();
            for (size_t k = 0; k < nb; k++) {
                uint16_t d = locks_f32_to_f16(0.01f), dmin = locks_f32_to_f16(0.002f);
                memcpy(q4k + 144 * k, &d, 2);
                memcpy(q4k + 144 * k + 2, &dmin, 2);
            }
            uint16_t nan = 0x7E00; /* dmin of one block */
            memcpy(q4k + 144 * (nb / 2) + 2, &nan, 2);
            t[nt] = (wtensor){"blk.0.ffn_down.weight", FFN, DIM, 12, q4k, nb * 144};
            nt++;
        } else {
            L2("ffn_down.weight", w->wd[l], FFN, DIM);
        }
        for (int i = first; quant && i < nt; i++) { /* Q8_0 attention, Q4_0 FFN */
            if (t[i].type != 0) continue;
            t[i].type = strstr(t[i].name, "ffn_") ? 2 : 8;
            qbuf[i] = quantize_rows(t[i].data, t[i].ne1, t[i].ne0, t[i].type, &t[i].nbytes);
            t[i].data = qbuf[i];
        }
        if (!(brk == BREAK_TENSOR && l == 1)) L2("attn_q.bias", w->bq[l], HQ * HD, 1);
        L2("attn_k.bias", w->bk[l], HKV * HD, 1);
        L2("attn_v.bias", w->bv[l], HKV * HD, 1);
        L2("attn_q_norm.weight", w->qn[l], HD, 1);
        L2("attn_k_norm.weight", w->kn[l], HD, 1);
        L2("post_attention_norm.weight", w->pan[l], DIM, 1);
        L2("post_ffw_norm.weight", w->pfn[l], DIM, 1);
#undef L2
    }
#undef T2
    buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, (uint64_t)nt);
    int n_kv = 0;
    buf kv = {0};
    char key[96];
    const char *a = brk == BREAK_ARCH ? "mamba" : v->arch;
    kv_str(&kv, "general.architecture", a), n_kv++;
#define K(name, val)                                  \
    do {                                              \
        snprintf(key, sizeof key, "%s.%s", a, name);  \
        kv_u32(&kv, key, val), n_kv++;                \
    } while (0)
    K("embedding_length", DIM);
    K("block_count", (uint32_t)v->n_layers);
    K("attention.head_count", HQ);
    K("attention.head_count_kv", HKV);
    K("attention.key_length", HD);
    K("attention.value_length", HD);
    K("feed_forward_length", FFN);
    K("context_length", 256);
    if (v->swa) K("attention.sliding_window", WINDOW);
#undef K
    snprintf(key, sizeof key, "%s.rope.freq_base", a);
    kv_f32(&kv, key, v->swa ? 1e6f : 10000.0f), n_kv++;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
    kv_f32(&kv, key, 1e-6f), n_kv++;
    kv_str(&kv, "tokenizer.ggml.model", "gpt2"), n_kv++;
    if (brk != BREAK_TOKENS) {
        put_str(&kv, "tokenizer.ggml.tokens");
        put_u32(&kv, 9);
        put_u32(&kv, 8);
        put_u64(&kv, VOCAB);
        for (int i = 0; i < VOCAB; i++) {
            char s[8];
            snprintf(s, sizeof s, "%c", 'A' + i);
            put_str(&kv, s);
        }
        n_kv++;
    }
    put_u64(&b, (uint64_t)n_kv);
    put(&b, kv.p, kv.n);
    free(kv.p);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        put_str(&b, t[i].name);
        int nd = t[i].ne1 > 1 ? 2 : 1;
        put_u32(&b, (uint32_t)nd);
        put_u64(&b, (uint64_t)t[i].ne0);
        if (nd == 2) put_u64(&b, (uint64_t)t[i].ne1);
        put_u32(&b, t[i].type);
        put_u64(&b, off);
        off += (t[i].nbytes + 31) / 32 * 32;
    }
    while (b.n % 32) put(&b, "", 1);
    for (int i = 0; i < nt; i++) {
        put(&b, t[i].data, t[i].nbytes);
        while (b.n % 32) put(&b, "", 1);
    }
    free(q4k);
    for (int i = 0; i < nt; i++) free(qbuf[i]);
    return b;
}

#endif
