/*
 * test_swa.c — the sliding-window layers' attention over their fp16 ring (src/model/swa.c
 * on attend.c's window tiles) against float64, on every kernel path (portable, avx2,
 * avx512 where the CPU has them), inline and on a 2-thread pool:
 * - random K/V written position by position into a ring that wraps several times
 *   (cap = window - 1 + n_max), then n query tokens (1, a few, a batch crossing tiles)
 *   attending their windows, each row against exact float64 softmax attention over the
 *   fp16-rounded keys and values of positions max(0, p - window + 1) .. p;
 * - windows below, at and across the 64-key blocks, GQA groups 1 / 4 / 8, one and two KV
 *   heads, head dims 64, 72 and 256 (Gemma 3's), the first positions (a window not yet
 *   full);
 * - a token decoded alone gives, bit for bit, its row of the batch (speculation's verify
 *   and prefill rely on it), and the pool gives what the inline run gives.
 */
#include "test_util.h"

#include "model/swa.h"
#include "util.h"
#include "vmath.h"

static void one_case(locks_pool *pool, int32_t hkv, int32_t G, int32_t d, int32_t window, int32_t n_max,
                     int32_t pos, int32_t n) {
    const int32_t hq = hkv * G, cap = window - 1 + n_max, row = hkv * d;
    char what[160];
    snprintf(what, sizeof what, "swa hkv %d G %d d %d window %d cap %d pos %d n %d%s", hkv, G, d, window, cap, pos, n,
             pool ? " pool" : "");
    swa_ring r = {NULL, NULL, cap, hkv, d};
    uint16_t *kv = locks_alloc(swa_ring_bytes(cap, hkv, d), 1);
    const int32_t len = pos + n;
    float *k = malloc(sizeof(float) * (size_t)len * row), *v = malloc(sizeof(float) * (size_t)len * row);
    float *q = malloc(sizeof(float) * (size_t)n * hq * d), *out = malloc(sizeof(float) * (size_t)n * hq * d);
    float *one = malloc(sizeof(float) * (size_t)hq * d);
    const int32_t threads = pool ? locks_pool_threads(pool) : 1;
    float *scratch = locks_alloc(swa_scratch_floats(hq, hkv, d, threads, n_max), sizeof(float));
    double *K = malloc(sizeof(double) * (size_t)window * d), *V = malloc(sizeof(double) * (size_t)window * d);
    double *qd = malloc(sizeof(double) * (size_t)d), *ref = malloc(sizeof(double) * (size_t)n * hq * d);
    SETUP(kv && k && v && q && out && one && scratch && K && V && qd && ref);
    r.k = kv;
    r.v = kv + (size_t)cap * row;
    tu_fill_normal(k, (size_t)len * row, 1.0);
    tu_fill_normal(v, (size_t)len * row, 1.0);
    tu_fill_normal(q, (size_t)n * hq * d, 1.0);
    /* the history before pos in chunks of at most n_max (as prefill writes), then the queries' own K/V */
    for (int32_t p = 0; p < pos; p += n_max) {
        const int32_t m = pos - p < n_max ? pos - p : n_max;
        CHECK(swa_ring_write(&r, p, m, k + (size_t)p * row, v + (size_t)p * row));
    }
    CHECK(swa_ring_write(&r, pos, n, k + (size_t)pos * row, v + (size_t)pos * row));
    const float scale = 1.0f / sqrtf((float)d);
    CHECK(swa_attend(pool, &r, pos, n, q, hq, scale, window, scratch, out));

    for (int32_t t = 0; t < n; t++) {
        const int32_t p = pos + t, lo = p - window + 1 > 0 ? p - window + 1 : 0, nk = p - lo + 1;
        for (int32_t h = 0; h < hkv; h++) {
            for (int32_t i = 0; i < nk; i++)
                for (int32_t c = 0; c < d; c++) { /* the fp16-rounded values the ring holds */
                    const size_t at = (size_t)(lo + i) * row + (size_t)h * d + (size_t)c;
                    K[(size_t)i * d + c] = (double)locks_f16_to_f32(locks_f32_to_f16(k[at]));
                    V[(size_t)i * d + c] = (double)locks_f16_to_f32(locks_f32_to_f16(v[at]));
                }
            for (int32_t g = 0; g < G; g++) {
                const size_t o = ((size_t)t * hq + (size_t)h * G + (size_t)g) * d;
                for (int32_t c = 0; c < d; c++) qd[c] = (double)q[o + (size_t)c];
                tu_ref_attention(qd, K, V, nk, d, (double)scale, ref + o);
            }
        }
    }
    tu_close(what, out, ref, (size_t)n * hq * d, 2e-5, 2e-5);

    int32_t differ = 0; /* each token alone: its row of the batch, bit for bit */
    for (int32_t t = 0; t < n; t++) {
        CHECK(swa_attend(pool, &r, pos + t, 1, q + (size_t)t * hq * d, hq, scale, window, scratch, one));
        differ += memcmp(one, out + (size_t)t * hq * d, sizeof(float) * (size_t)hq * d) != 0;
    }
    test_cond(differ == 0, "%s: %d tokens decoded alone differ from their batch rows", what, differ);
    free(k), free(v), free(q), free(out), free(one), free(K), free(V), free(qd), free(ref);
    locks_free(kv), locks_free(scratch);
}

static void run(locks_pool *pool) {
    /* Gemma 3 270M's local layers: 1 KV head, G 4, d 256, window 512, batch 64 */
    one_case(pool, 1, 4, 256, 512, 64, 3 * 575 + 17, 64);
    one_case(pool, 1, 4, 256, 512, 64, 2000, 1);
    one_case(pool, 1, 4, 256, 512, 64, 0, 37);    /* the first positions */
    one_case(pool, 1, 4, 256, 512, 64, 130, 5);   /* a window not yet full */
    for (int trial = 0; trial < 6; trial++) {
        const int32_t hkv = tu_int(1, 2), G = trial % 3 == 0 ? 1 : trial % 3 == 1 ? 4 : 8;
        const int32_t d = trial % 2 ? 72 : 64, window = tu_int(3, 200), n_max = tu_int(1, 40);
        one_case(pool, hkv, G, d, window, n_max, tu_int(0, 900), tu_int(1, n_max));
    }
}

int main(void) {
    tu_seed("test_swa");
    locks_pool *pool = locks_pool_init(2);
    SETUP(pool);
    const locks_isa isas[3] = {LOCKS_ISA_PORTABLE, LOCKS_ISA_AVX2, LOCKS_ISA_AVX512};
    for (int i = 0; i < 3; i++) {
        if (locks_cpu_set_isa(isas[i]) != 0) {
            printf("  %s: not on this CPU, skipped\n", locks_isa_name(isas[i]));
            continue;
        }
        printf("  kernels: %s\n", locks_isa_name(isas[i]));
        run(NULL);
        run(pool);
    }
    locks_cpu_set_isa(LOCKS_ISA_BEST);
    locks_pool_free(pool);
    return test_report("test_swa");
}
