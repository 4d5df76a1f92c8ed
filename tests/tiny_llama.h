/*
 * tiny_llama.h — a random Llama-architecture GGUF for tests that need a whole model but
 * not a real one (test_batch, test_gpu_batch): F32 weights drawn from the test's RNG
 * (tu_normal), F32 norms near 1, a byte-free gpt2 vocabulary of "<i>" tokens (enough for
 * locks_model_load; these tests feed token ids, never text). Written to a temporary file
 * that the caller loads and removes. Also what those tests share: greedy argmax and the
 * context parameters they run the model with.
 */
#ifndef LOCKS_TINY_LLAMA_H
#define LOCKS_TINY_LLAMA_H

#include <unistd.h>

#include "locks_model.h"
#include "test_util.h"
#include "gguf_buf.h"

typedef struct {
    int32_t n_layers, dim, n_heads, n_kv_heads, head_dim, ffn, vocab;
} tiny_shape;

/* The model's tensors in file order: name, ne0 (contiguous), ne1, and the weights'
 * spread (0: a norm, values 1 + 0.1 N(0,1)). pass 0 writes the infos, pass 1 the data. */
static void tiny_tensors(buf *b, const tiny_shape *s, int pass, uint64_t *off) {
    const int32_t q = s->n_heads * s->head_dim, kv = s->n_kv_heads * s->head_dim;
    struct {
        const char *suffix;
        int32_t ne0, ne1;
        float sigma;
    } per_layer[] = {
        {"attn_norm.weight", s->dim, 1, 0.f}, {"attn_q.weight", s->dim, q, 0.25f},
        {"attn_k.weight", s->dim, kv, 0.25f}, {"attn_v.weight", s->dim, kv, 0.15f},
        {"attn_output.weight", q, s->dim, 0.1f}, {"ffn_norm.weight", s->dim, 1, 0.f},
        {"ffn_gate.weight", s->dim, s->ffn, 0.15f}, {"ffn_up.weight", s->dim, s->ffn, 0.15f},
        {"ffn_down.weight", s->ffn, s->dim, 0.1f},
    };
    const int n_per = (int)(sizeof per_layer / sizeof per_layer[0]);
    const int n_all = 3 + s->n_layers * n_per;
    for (int i = 0; i < n_all; i++) {
        char name[96];
        int32_t ne0, ne1;
        float sigma;
        if (i == 0) {
            snprintf(name, sizeof name, "token_embd.weight"), ne0 = s->dim, ne1 = s->vocab, sigma = 1.f;
        } else if (i == 1) {
            snprintf(name, sizeof name, "output_norm.weight"), ne0 = s->dim, ne1 = 1, sigma = 0.f;
        } else if (i == 2) {
            snprintf(name, sizeof name, "output.weight"), ne0 = s->dim, ne1 = s->vocab, sigma = 0.1f;
        } else {
            const int l = (i - 3) / n_per, k = (i - 3) % n_per;
            snprintf(name, sizeof name, "blk.%d.%s", l, per_layer[k].suffix);
            ne0 = per_layer[k].ne0, ne1 = per_layer[k].ne1, sigma = per_layer[k].sigma;
        }
        const size_t n = (size_t)ne0 * (size_t)ne1, bytes = n * 4;
        if (pass == 0) {
            put_str(b, name);
            put_u32(b, ne1 > 1 ? 2 : 1);
            put_u64(b, (uint64_t)ne0);
            if (ne1 > 1) put_u64(b, (uint64_t)ne1);
            put_u32(b, 0); /* F32 */
            put_u64(b, *off);
            *off += (bytes + 31) / 32 * 32;
        } else {
            for (size_t j = 0; j < n; j++) {
                float v = sigma == 0.f ? 1.0f + 0.1f * (float)tu_normal() : sigma * (float)tu_normal();
                put(b, &v, 4);
            }
            static const char zero[32];
            put(b, zero, (32 - bytes % 32) % 32);
        }
    }
}

/* The index of x's largest value (the first of ties): greedy decoding. */
static inline int32_t tiny_argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* A CPU context of n_seqs sequences of up to n_ctx tokens, prefilled 32 at a time:
 * `full` attends everything (budget n_ctx), any other selector a budget of 64, below
 * the context, so that selection matters. */
static inline locks_ctx_params tiny_params(locks_selector sel, int32_t n_seqs, int32_t n_ctx) {
    locks_ctx_params p = locks_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = 32;
    p.n_seqs = n_seqs;
    p.step.selector = sel;
    p.step.budget = sel == LOCKS_SEL_FULL ? n_ctx : 64;
    return p;
}

/* Writes the model to a temporary file and loads it; the file is removed. */
static locks_model *tiny_llama(const tiny_shape *s, locks_status *st) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/locks_tiny_llama_%d.gguf", (int)getpid());
    buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, (uint64_t)(3 + s->n_layers * 9));
    put_u64(&b, 12);
    kv_str(&b, "general.architecture", "llama");
    kv_u32(&b, "llama.embedding_length", (uint32_t)s->dim);
    kv_u32(&b, "llama.block_count", (uint32_t)s->n_layers);
    kv_u32(&b, "llama.attention.head_count", (uint32_t)s->n_heads);
    kv_u32(&b, "llama.attention.head_count_kv", (uint32_t)s->n_kv_heads);
    kv_u32(&b, "llama.attention.key_length", (uint32_t)s->head_dim);
    kv_u32(&b, "llama.feed_forward_length", (uint32_t)s->ffn);
    kv_u32(&b, "llama.context_length", 4096);
    kv_f32(&b, "llama.rope.freq_base", 10000.0f);
    kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_str(&b, "tokenizer.ggml.model", "gpt2");
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, 9);
    put_u32(&b, 8);
    put_u64(&b, (uint64_t)s->vocab);
    for (int32_t i = 0; i < s->vocab; i++) {
        char t[16];
        snprintf(t, sizeof t, "<%d>", (int)i);
        put_str(&b, t);
    }
    uint64_t off = 0;
    tiny_tensors(&b, s, 0, &off);
    static const char zero[32];
    put(&b, zero, (32 - b.n % 32) % 32);
    tiny_tensors(&b, s, 1, &off);
    FILE *f = fopen(path, "wb");
    SETUP(f && fwrite(b.p, 1, b.n, f) == b.n);
    SETUP(fclose(f) == 0);
    free(b.p);
    locks_model *m = locks_model_load(path, st);
    remove(path);
    return m;
}

#endif
