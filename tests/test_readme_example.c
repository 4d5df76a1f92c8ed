/*
 * test_readme_example.c — the README's API example, compiled and run so it cannot rot.
 * The code between the README markers below must match README.md's block byte for
 * byte (checked here: ctest runs in the source directory). The test runs it on fresh
 * random K/V: with budget >= context it must equal float64 dense attention over the
 * fp16-rounded K/V; with a small budget it must equal float64 attention over the pages
 * the step selected (the same step run again with a selection table), that selection
 * must fit the budget and hold the forced pages, and the output must differ from dense.
 */
#include "test_util.h"

#include "eval/metrics.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int example(const float *k, const float *v, int32_t n_tokens, const float *q, int32_t budget,
            float *out);

/* README-BEGIN */
#include "locks.h"

/* k, v: [n_tokens][8][128] fp32 (keys after RoPE); q: [32][128]; out: [32][128]. */
int example(const float *k, const float *v, int32_t n_tokens, const float *q,
            int32_t budget, float *out) {
    locks_cache_params cp = locks_cache_default_params(); /* rank 8, int8/int4 summaries */
    cp.n_layers = 1;
    cp.n_kv_heads = 8;
    cp.head_dim = 128;
    cp.n_pages = 4096 / LOCKS_PAGE; /* the pool: room for 4096 tokens */
    cp.n_threads = 2;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    if (!c) return (int)st;
    int32_t seq;
    if ((st = locks_cache_seq_add(c, &seq)) != LOCKS_OK) goto done;
    /* reserve the positions, then write layer 0's K/V; every page this fills gets its
     * summary here, off the decode path */
    if ((st = locks_cache_append(c, seq, n_tokens)) != LOCKS_OK) goto done;
    if ((st = locks_cache_write(c, seq, 0, 0, n_tokens, k, v)) != LOCKS_OK) goto done;
    /* one decode step for 32 query heads (GQA groups of 4): score every page from its
     * summary, keep the best pages within `budget` tokens, attend exactly to them */
    locks_step_params sp = locks_step_default_params(); /* selector LOCKS, 1 sink, 1 recent */
    sp.budget = budget;
    st = locks_decode_step(c, 0, &seq, 1, q, 32, &sp, out, NULL, NULL);
done:
    locks_cache_free(c);
    return (int)st;
}
/* README-END */


/* Text between the markers of a file (the marker lines excluded), malloc'd. */
static char *between(const char *path, const char *begin, const char *end) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *a = strstr(buf, begin), *b = a ? strstr(a, end) : NULL;
    if (!a || !b) return NULL;
    a = strchr(a, '\n');
    if (!a || a > b) return NULL;
    a++;
    while (b > a && b[-1] != '\n') b--; /* drop the end marker's line */
    char *s = malloc((size_t)(b - a) + 1);
    memcpy(s, a, (size_t)(b - a));
    s[b - a] = 0;
    return s;
}

static uint64_t rs;
static double nrand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((double)(rs >> 11) + 0.5) / 9007199254740992.0;
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = (double)(rs >> 11) / 9007199254740992.0;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

int main(void) {
    char *mine = between("tests/test_readme_example.c", "/* README-BEGIN */", "/* README-END */");
    char *doc = between("README.md", "<!-- README-EXAMPLE-BEGIN -->", "<!-- README-EXAMPLE-END -->");
    test_cond(mine && doc, "markers not found (run from the source directory)");
    if (doc) { /* the README block is fenced: drop the ```c and ``` lines */
        char *s = strstr(doc, "```c\n"), *e = s ? strstr(s + 5, "```") : NULL;
        test_cond(s && e, "README example block not fenced with ```c");
        if (s && e) {
            *e = 0;
            memmove(doc, s + 5, strlen(s + 5) + 1);
        }
    }
    if (mine && doc) test_cond(!strcmp(mine, doc), "README.md's example differs from the one tested here");
    free(mine);
    free(doc);

    rs = (uint64_t)time(NULL) | 1u;
    printf("test_readme_example: seed %llu\n", (unsigned long long)rs);
    const int32_t N = 1500 + (int32_t)(rs % 97), H = 8, D = 128, HQ = 32;
    size_t n = (size_t)N * H * D;
    float *k = malloc(n * 4), *v = malloc(n * 4), *q = malloc((size_t)HQ * D * 4);
    float *out = malloc((size_t)HQ * D * 4), *out2 = malloc((size_t)HQ * D * 4);
    for (size_t i = 0; i < n; i++) {
        /* page-dependent offsets so attention is not uniform */
        k[i] = (float)(nrand() + ((i / ((size_t)H * D * 16) + i % D) % 7 == 0 ? 1.5 : 0.0));
        v[i] = (float)nrand();
    }
    for (int i = 0; i < HQ * D; i++) q[i] = (float)nrand();

    int st = example(k, v, N, q, N, out);
    test_cond(st == 0, "example (dense budget): %s", locks_status_str((locks_status)st));
    /* float64 dense attention over the fp16 values the cache stores */
    for (size_t i = 0; i < n; i++) {
        k[i] = locks_f16_to_f32(locks_f32_to_f16(k[i]));
        v[i] = locks_f16_to_f32(locks_f32_to_f16(v[i]));
    }
    locks_kv_src src = locks_kv_src_arrays(N, H, D, k, v);
    locks_attn_ref ref;
    test_cond(locks_attn_ref_compute(&src, q, HQ, 0.0f, 2, &ref) == LOCKS_OK, "reference");
    double worst = 0;
    for (int h = 0; h < HQ; h++) {
        double dd = 0, nn = 0;
        for (int c = 0; c < D; c++) {
            double x = (double)out[h * D + c] - ref.o_full[h * D + c];
            dd += x * x;
            nn += ref.o_full[h * D + c] * ref.o_full[h * D + c];
        }
        worst = fmax(worst, sqrt(dd / nn));
    }
    test_cond(worst < 1e-5, "budget >= context: rel err vs float64 dense %g", worst);

    st = example(k, v, N, q, 512, out2);
    test_cond(st == 0, "example (budget 512): %s", locks_status_str((locks_status)st));
    /* the same step again, this time asking for the selection (same cache, same data:
     * the same pages), then float64 attention over exactly those pages */
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = 1, cp.n_kv_heads = H, cp.head_dim = D, cp.n_pages = 4096 / LOCKS_PAGE, cp.n_threads = 2;
    locks_cache *c = locks_cache_init(cp, NULL);
    int32_t seq, max_pages = (N + LOCKS_PAGE - 1) / LOCKS_PAGE;
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)H * max_pages), np[8];
    float *out3 = malloc((size_t)HQ * D * 4);
    CHECK(locks_cache_seq_add(c, &seq));
    CHECK(locks_cache_append(c, seq, N));
    CHECK(locks_cache_write(c, seq, 0, 0, N, k, v));
    locks_step_params sp = locks_step_default_params();
    sp.budget = 512;
    locks_selection sel = {pages, np, max_pages};
    CHECK(locks_decode_step(c, 0, &seq, 1, q, HQ, &sp, out3, &sel, NULL));
    locks_cache_free(c);
    test_cond(!memcmp(out2, out3, sizeof(float) * HQ * D), "the example's output == the step with a selection");
    double *K = malloc(sizeof(double) * (size_t)N * D), *V = malloc(sizeof(double) * (size_t)N * D);
    double qd[128], od[128], worst_sel = 0.0, diff = 0.0;
    int budget_ok = 1, forced_ok = 1;
    for (int h = 0; h < H; h++) {
        int32_t nt = 0;
        for (int i = 0; i < np[h]; i++) {
            const int32_t lp = pages[h * max_pages + i];
            for (int32_t t = lp * LOCKS_PAGE; t < (lp + 1) * LOCKS_PAGE && t < N; t++, nt++)
                for (int c2 = 0; c2 < D; c2++) {
                    K[(size_t)nt * D + c2] = (double)k[((size_t)t * H + h) * D + c2];
                    V[(size_t)nt * D + c2] = (double)v[((size_t)t * H + h) * D + c2];
                }
        }
        budget_ok &= nt <= 512 && nt > 0;
        /* sink page 0, the last full page and the partial page are always there */
        int has0 = 0, has_recent = 0, has_tail = N % LOCKS_PAGE == 0;
        for (int i = 0; i < np[h]; i++) {
            const int32_t lp = pages[h * max_pages + i];
            has0 |= lp == 0;
            has_recent |= lp == N / LOCKS_PAGE - 1;
            has_tail |= lp == N / LOCKS_PAGE;
        }
        forced_ok &= has0 && has_recent && has_tail;
        for (int g = 0; g < HQ / H; g++) {
            const int qh = h * (HQ / H) + g;
            for (int c2 = 0; c2 < D; c2++) qd[c2] = (double)q[qh * D + c2];
            tu_ref_attention(qd, K, V, nt, D, 1.0 / sqrt((double)D), od);
            double dd = 0, nn = 0;
            for (int c2 = 0; c2 < D; c2++) {
                dd += ((double)out2[qh * D + c2] - od[c2]) * ((double)out2[qh * D + c2] - od[c2]);
                nn += od[c2] * od[c2];
                diff = fmax(diff, fabs((double)out2[qh * D + c2] - ref.o_full[qh * D + c2]));
            }
            worst_sel = fmax(worst_sel, sqrt(dd / nn));
        }
    }
    test_cond(budget_ok && forced_ok, "budget 512: the selection fits the budget (%d) and holds the forced pages (%d)",
              budget_ok, forced_ok);
    test_cond(worst_sel < 1e-5, "budget 512: rel err vs float64 attention over the selected pages %g", worst_sel);
    test_cond(diff > 1e-4, "budget 512: the sparse output differs from dense (max diff %g)", diff);
    free(K), free(V), free(pages), free(out3);
    locks_attn_ref_free(&ref);
    free(k), free(v), free(q), free(out), free(out2);
    return test_report("test_readme_example");
}
