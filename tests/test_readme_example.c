/*
 * test_readme_example.c — the README's API example, compiled and run so it cannot rot.
 * The code between the README markers below must match README.md's block byte for
 * byte (checked here: ctest runs in the source directory). The test runs it on fresh
 * random K/V: with budget >= context it must equal float64 dense attention over the
 * fp16-rounded K/V; with a small budget it must be finite and differ from dense.
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
    double diff = 0;
    int finite = 1;
    for (int i = 0; i < HQ * D; i++) {
        finite &= isfinite(out2[i]) != 0;
        diff = fmax(diff, fabs((double)out2[i] - ref.o_full[i]));
    }
    test_cond(finite && diff > 1e-4, "budget 512: finite %d, max diff to dense %g", finite, diff);
    locks_attn_ref_free(&ref);
    free(k), free(v), free(q), free(out), free(out2);
    return test_report("test_readme_example");
}
