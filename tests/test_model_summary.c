/*
 * test_model_summary.c — page summaries of real keys (label "model"): SmolLM2 (head dim
 * 64) and Gemma 3 (256, its global layers), a prose prompt prefilled, every full page of
 * every KV head of every layer with summaries:
 *  - the summary build on the AVX-512 kernels (its Jacobi rounds vectorised) equals the
 *    portable build bit for bit (centroid, basis, coefficients), where the CPU has
 *    AVX-512;
 *  - the basis rows the build gives are orthonormal (float64 dot products within 1e-5),
 *    and quantizing the build gives the record the context stored for that page
 *    (locks_ctx_seq_read_summaries): the cache builds with the same function.
 */
#include "test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks.h"
#include "locks_model.h"
#include "summary.h"
#include "test_model_util.h"
#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE, N_TOK = 200 };

static void check_model(const char *path, const char *name, const char *text) {
    locks_status st;
    locks_model *m = locks_model_load(path, &st);
    SETUP(m);
    const locks_model_info in = locks_model_get_info(m);
    const int32_t H = in.n_kv_heads, d = in.head_dim, r = 8;
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_threads = 2;
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    SETUP(c);
    const locks_tokenizer *tk = locks_model_tokenizer(m);
    const size_t len = strlen(text);
    int32_t *ids = malloc(sizeof(int32_t) * (len + 2)), n = 0;
    SETUP(ids);
    SETUP(locks_tokenizer_encode(tk, text, len, false, ids, (int32_t)len + 1, &n) == LOCKS_OK && n >= N_TOK);
    CHECK(locks_ctx_prefill(c, ids, N_TOK, NULL));
    const int32_t pages = N_TOK / P;
    const size_t rec_bytes = locks_ctx_summary_bytes(c);
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)N_TOK * H * d), *v = malloc(sizeof(uint16_t) * (size_t)N_TOK * H * d);
    unsigned char *recs = malloc((size_t)pages * H * rec_bytes), *mine = malloc(rec_bytes);
    float *keys = malloc(sizeof(float) * P * (size_t)d), *mu[2], *basis[2], *coef[2];
    for (int32_t i = 0; i < 2; i++) {
        mu[i] = malloc(sizeof(float) * (size_t)d);
        basis[i] = malloc(sizeof(float) * (size_t)r * d);
        coef[i] = malloc(sizeof(float) * P * r);
        SETUP(mu[i] && basis[i] && coef[i]);
    }
    SETUP(k && v && recs && mine && keys);
    const int have512 = locks_cpu_set_isa(LOCKS_ISA_AVX512) == 0;
    int32_t n_pages = 0, differ = 0, not_orth = 0, not_stored = 0;
    for (int32_t l = 0; l < in.n_layers; l++) {
        if (locks_ctx_cache_layer(c, l) < 0) continue; /* a sliding-window layer: no summaries */
        CHECK(locks_ctx_seq_read_kv(c, 0, l, k, v));
        CHECK(locks_ctx_seq_read_summaries(c, 0, l, recs));
        for (int32_t p = 0; p < pages; p++)
            for (int32_t h = 0; h < H; h++) {
                for (int32_t t = 0; t < P; t++)
                    for (int32_t ch = 0; ch < d; ch++)
                        keys[t * d + ch] = locks_f16_to_f32(k[((size_t)(p * P + t) * H + h) * d + ch]);
                for (int32_t pass = 0; pass < 2; pass++) {
                    if (have512) locks_cpu_set_isa(pass ? LOCKS_ISA_PORTABLE : LOCKS_ISA_AVX512);
                    CHECK(locks_summary_build_f32(d, r, keys, mu[pass], basis[pass], coef[pass]));
                }
                locks_cpu_set_isa(LOCKS_ISA_BEST);
                n_pages++;
                if (memcmp(mu[0], mu[1], sizeof(float) * (size_t)d) ||
                    memcmp(basis[0], basis[1], sizeof(float) * (size_t)r * d) ||
                    memcmp(coef[0], coef[1], sizeof(float) * P * r))
                    differ++;
                double worst = 0.0;
                for (int32_t a = 0; a < r; a++)
                    for (int32_t b = 0; b < r; b++) {
                        double s = 0.0, na = 0.0;
                        for (int32_t ch = 0; ch < d; ch++) {
                            s += (double)basis[0][a * d + ch] * (double)basis[0][b * d + ch];
                            na += (double)basis[0][a * d + ch] * (double)basis[0][a * d + ch];
                        }
                        if (na == 0.0) continue; /* a null direction (rank below r) */
                        worst = fmax(worst, fabs(s - (a == b ? 1.0 : 0.0)));
                    }
                not_orth += worst > 1e-5;
                /* the record: centroid int8 + scale, basis int4 + scales, coefficients int8 + scales */
                unsigned char *q = mine;
                locks_qsummary qs = {(int8_t *)q, (uint16_t *)(void *)(q + d), q + d + 2,
                                     (uint16_t *)(void *)(q + d + 2 + (size_t)r * d / 2),
                                     (int8_t *)(q + d + 2 + (size_t)r * d / 2 + 2 * r),
                                     (uint16_t *)(void *)(q + d + 2 + (size_t)r * d / 2 + 2 * r + P * r)};
                locks_summary_quantize(d, r, mu[0], basis[0], coef[0], qs);
                not_stored += memcmp(mine, recs + ((size_t)p * H + h) * rec_bytes, rec_bytes) != 0;
            }
    }
    printf("  %s: %d real pages (layers with summaries x %d KV heads x %d pages), AVX-512 %s\n", name, n_pages, H,
           pages, have512 ? "compared" : "absent (portable only)");
    test_cond(n_pages > 0, "%s: some pages", name);
    test_cond(differ == 0, "%s: summary build AVX-512 == portable bit for bit (%d of %d pages differ)", name, differ,
              n_pages);
    test_cond(not_orth == 0, "%s: basis orthonormal within 1e-5 (%d of %d pages not)", name, not_orth, n_pages);
    test_cond(not_stored == 0, "%s: the quantized build is the stored record (%d of %d pages differ)", name,
              not_stored, n_pages);
    for (int32_t i = 0; i < 2; i++) {
        free(mu[i]);
        free(basis[i]);
        free(coef[i]);
    }
    free(keys);
    free(mine);
    free(recs);
    free(k);
    free(v);
    free(ids);
    locks_ctx_free(c);
    locks_model_free(m);
}

int main(void) {
    tu_seed("test_model_summary");
    char path[4096];
    char *text = tu_read_text("/usr/share/common-licenses/GPL-3", 4000);
    SETUP(text);
    if (!tu_find_model(path, sizeof path)) {
        fprintf(stderr, "test_model_summary: no model (set LOCKS_MODEL or run scripts/fetch-model.sh)\n");
        return 1;
    }
    check_model(path, "SmolLM2", text);
    if (!tu_find_gemma3(path, sizeof path)) {
        fprintf(stderr, "test_model_summary: no Gemma 3 model (scripts/fetch-model.sh gemma3-270m)\n");
        return 1;
    }
    check_model(path, "Gemma 3", text);
    free(text);
    return test_report("test_model_summary");
}
