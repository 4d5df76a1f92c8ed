/*
 * test_gpu_verify_exact.c — the GPU verify pass of speculative decoding is bit for bit the
 * GPU dense decode (label gpu). From one state, K + 1 = 1 .. 8 tokens go through (a) K + 1
 * sequential dense decode tokens (locks_ctx_decode, the engine's decode graph) and (b) one
 * verify (locks_ctx_prefill_all, lg_verify); every row's logits and the K/V each writes into
 * the cache (every layer, every KV head) must be equal byte for byte (memcmp), not close.
 * Positions cross page boundaries and attention split boundaries. Models: random tiny Llamas
 * (tests/tiny_llama.h) with G = 1, 2, 4 query heads per KV head and d = 64 / 128 (one and
 * two rows tiles of the rows-mode attention), and SmolLM2 (G = 3) when LOCKS_MODEL is set.
 * Only the public API and the cache's K/V read-back: the same file builds against the code
 * before the exact verify, where it fails (cuBLAS over n rows vs 1, a split attention).
 */
#include "test_util.h"
#include "test_model_util.h"
#include "tiny_llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "cuda/locks_cuda.h"
#include "model/cuda/model_cuda.h"
#include "locks_model.h"

enum { NV_MAX = 8 };

static locks_ctx *gpu_ctx(const locks_model *m, int32_t n_ctx) {
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.backend = LOCKS_BACKEND_CUDA;
    cp.step.selector = LOCKS_SEL_FULL;
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    if (!c) fprintf(stderr, "GPU context: %s\n", locks_status_str(st));
    SETUP(c);
    return c;
}

/* K and V of positions [p0, p0 + nv) of every layer and KV head: [layer][pos][head][d] each. */
static void read_kv(locks_ctx *ctx, int32_t p0, int32_t nv, uint16_t *k_out, uint16_t *v_out) {
    locks_cache *c = locks_ctx_cache(ctx);
    const locks_cache_params cp = locks_cache_get_params(c);
    const int32_t hkv = cp.n_kv_heads, d = cp.head_dim;
    int32_t np = 0;
    const int32_t *bt = locks_cache_block_table(c, locks_ctx_seq(ctx), &np);
    SETUP(bt);
    const size_t page = (size_t)hkv * 16 * d;
    uint16_t *k = malloc(page * 2), *v = malloc(page * 2);
    SETUP(k && v);
    for (int32_t l = 0; l < cp.n_layers; l++)
        for (int32_t p = p0; p < p0 + nv; p++) {
            SETUP(p / 16 < np);
            CHECK(locks_cuda_kv_page_get(c->cuda, l, bt[p / 16], k, v));
            for (int32_t h = 0; h < hkv; h++) {
                const size_t src = ((size_t)h * 16 + p % 16) * d;
                const size_t dst = (((size_t)l * nv + (p - p0)) * hkv + h) * d;
                memcpy(k_out + dst, k + src, (size_t)d * 2);
                memcpy(v_out + dst, v + src, (size_t)d * 2);
            }
        }
    free(k);
    free(v);
}

/* One state (the first p0 tokens), nv tokens both ways; returns the rows that differ. */
static int compare_at(locks_ctx *c, const char *name, const int32_t *tok, int32_t p0, int32_t nv, int32_t V,
                      int32_t n_layers, int32_t kv_dim, int *kv_bad) {
    float *dec = malloc(sizeof(float) * (size_t)nv * V), *ver = malloc(sizeof(float) * (size_t)nv * V);
    const size_t kvn = (size_t)n_layers * nv * kv_dim;
    uint16_t *kd = malloc(kvn * 2), *vd = malloc(kvn * 2), *kv_ = malloc(kvn * 2), *vv = malloc(kvn * 2);
    SETUP(dec && ver && kd && vd && kv_ && vv);
    CHECK(locks_ctx_reset(c));
    CHECK(locks_ctx_prefill(c, tok, p0, NULL));
    for (int32_t i = 0; i < nv; i++) CHECK(locks_ctx_decode(c, tok[p0 + i], dec + (size_t)i * V));
    read_kv(c, p0, nv, kd, vd);
    CHECK(locks_ctx_truncate(c, p0));
    CHECK(locks_ctx_prefill_all(c, tok + p0, nv, ver));
    test_cond(locks_ctx_len(c) == p0 + nv, "%s: context %d after the verify, want %d", name, locks_ctx_len(c),
              p0 + nv);
    read_kv(c, p0, nv, kv_, vv);
    int bad_rows = 0;
    for (int32_t i = 0; i < nv; i++) {
        const float *a = dec + (size_t)i * V, *b = ver + (size_t)i * V;
        if (memcmp(a, b, sizeof(float) * (size_t)V) == 0) continue;
        int32_t n_off = 0;
        double mx = 0.0;
        for (int32_t j = 0; j < V; j++)
            if (memcmp(&a[j], &b[j], sizeof(float)) != 0) {
                n_off++;
                const double dd = (double)a[j] - (double)b[j];
                if ((dd < 0 ? -dd : dd) > mx) mx = dd < 0 ? -dd : dd;
            }
        if (bad_rows++ < 2)
            printf("  %s p0 %d nv %d row %d: %d of %d logits differ (max %.3g)\n", name, p0, nv, i, n_off, V, mx);
    }
    *kv_bad = memcmp(kd, kv_, kvn * 2) != 0 || memcmp(vd, vv, kvn * 2) != 0;
    test_cond(bad_rows == 0, "%s p0 %d, %d tokens: verify logits differ from dense decode in %d rows (memcmp)", name,
              p0, nv, bad_rows);
    test_cond(!*kv_bad, "%s p0 %d, %d tokens: the verify's K/V differ from dense decode's (memcmp)", name, p0, nv);
    free(dec), free(ver), free(kd), free(vd), free(kv_), free(vv);
    return bad_rows;
}

/* Positions p0: mid-page, the verify's rows crossing a page end, and crossing token 1024 (a
 * page end and, for these contexts' split sizes of 64 tokens, a split end). */
static void check_model(const locks_model *m, const char *name, const int32_t *tok, int32_t n_tok, int32_t n_ctx) {
    const locks_model_info mi = locks_model_get_info(m);
    locks_ctx *c = gpu_ctx(m, n_ctx);
    const int32_t p0s[] = {37, 250, 1017, 1021, 1023, 1500};
    int rows_bad = 0, kv_bad_n = 0, runs = 0;
    for (size_t pi = 0; pi < sizeof p0s / sizeof p0s[0]; pi++)
        for (int32_t nv = 1; nv <= NV_MAX; nv++) {
            if (nv != 1 && nv != 2 && nv != 5 && nv != 8 && !(pi == 3)) continue; /* all nv at 1021 */
            if (p0s[pi] + nv > n_tok) continue;
            int kv_bad = 0;
            rows_bad += compare_at(c, name, tok, p0s[pi], nv, mi.n_vocab, mi.n_layers, mi.n_kv_heads * mi.head_dim,
                                   &kv_bad) != 0;
            kv_bad_n += kv_bad;
            runs++;
        }
    printf("%-28s verify == dense decode (memcmp): logits in %d of %d runs, K/V in %d of %d\n", name, runs - rows_bad,
           runs, runs - kv_bad_n, runs);
    locks_ctx_free(c);
}

int main(void) {
    tu_seed("test_gpu_verify_exact");
    size_t f = 0, t = 0;
    if (lg_device_memory(0, &f, &t) != LOCKS_OK) {
        printf("test_gpu_verify_exact: no GPU\n");
        return 1;
    }
    /* n_layers, dim, n_heads, n_kv_heads, head_dim, ffn, vocab */
    const tiny_shape shapes[] = {{2, 256, 4, 2, 64, 512, 300}, {2, 256, 4, 4, 64, 512, 300},
                                 {3, 1024, 8, 2, 128, 1024, 500}};
    enum { N_TOK = 1600 };
    int32_t *tok = malloc(sizeof(int32_t) * N_TOK);
    SETUP(tok);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const tiny_shape *s = &shapes[si];
        locks_status st;
        locks_model *m = tiny_llama(s, &st);
        test_cond(m != NULL, "tiny model: %s", locks_status_str(st));
        if (!m) continue;
        for (int32_t i = 0; i < N_TOK; i++) tok[i] = tu_int(0, s->vocab - 1);
        char name[64];
        snprintf(name, sizeof name, "tiny G %d d %d", s->n_heads / s->n_kv_heads, s->head_dim);
        check_model(m, name, tok, N_TOK, 2048);
        locks_model_free(m);
    }
    free(tok);
    char path[1024];
    if (!tu_find_model(path, sizeof path)) {
        printf("test_gpu_verify_exact: no model (LOCKS_MODEL): SmolLM2 part skipped\n");
        return test_report("test_gpu_verify_exact");
    }
    locks_status st;
    locks_model *m = locks_model_load(path, &st);
    SETUP(m);
    int32_t n_doc = 0;
    int32_t *doc = tu_file_tokens(m, "README.md", 1600, &n_doc);
    check_model(m, "SmolLM2 README", doc, n_doc, 4096);
    free(doc);
    locks_model_free(m);
    return test_report("test_gpu_verify_exact");
}
