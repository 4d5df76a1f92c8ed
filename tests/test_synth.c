/*
 * test_synth.c — the synthetic workload is reproducible from its seed and has the
 * structure synth.h states: pages low rank, the whole key matrix not, GQA heads
 * correlated, needles carrying the top page masses, sinks a large share.
 * Structure is checked with float64 statistics computed here (eigenvalues by the Jacobi
 * reference in test_util.h) and with the metrics module's reference attention.
 */
#include "test_util.h"

#include "eval/metrics.h"
#include "eval/synth.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* Share of the centred energy of page j, head h in its top r directions. */
static double page_energy_top(const float *k, int H, int D, int j, int h, int r) {
    double mu[256] = {0}, x[16 * 256], g[256], w[16];
    for (int i = 0; i < 16; i++)
        for (int c = 0; c < D; c++) mu[c] += (double)k[((size_t)(j * 16 + i) * H + h) * D + c] / 16;
    for (int i = 0; i < 16; i++)
        for (int c = 0; c < D; c++) x[i * D + c] = (double)k[((size_t)(j * 16 + i) * H + h) * D + c] - mu[c];
    for (int a = 0; a < 16; a++)
        for (int b = 0; b < 16; b++) {
            double s = 0;
            for (int c = 0; c < D; c++) s += x[a * D + c] * x[b * D + c];
            g[a * 16 + b] = s;
        }
    tu_ref_eig(16, g, w, NULL);
    double tot = 0, top = 0;
    for (int i = 0; i < 16; i++) {
        tot += w[i];
        if (i < r) top += w[i];
    }
    return top / tot;
}

static void test_reproducible(void) {
    const int H = 2, Hq = 4, D = 64, N = 16 * 40 + 7;
    uint64_t seed = (uint64_t)time(NULL);
    locks_synth_params p = locks_synth_default_params(H, Hq, D, N, seed);
    locks_status err;
    locks_synth *a = locks_synth_init(p, &err), *b = locks_synth_init(p, &err);
    p.seed = seed + 1;
    locks_synth *c = locks_synth_init(p, &err);
    test_cond(a && b && c, "init: %s", locks_status_str(err));
    if (!a || !b || !c) return;
    size_t n = (size_t)N * H * D;
    float *k1 = malloc(n * 4), *v1 = malloc(n * 4), *k2 = malloc(n * 4), *v2 = malloc(n * 4);
    test_cond(locks_synth_kv(a, 0, N, k1, v1) == LOCKS_OK, "kv a");
    /* another instance, odd chunks that cut pages */
    for (int pos = 0; pos < N;) {
        int m = 1 + (pos * 7 + 5) % 37;
        if (m > N - pos) m = N - pos;
        test_cond(locks_synth_kv(b, pos, m, k2 + (size_t)pos * H * D, v2 + (size_t)pos * H * D) == LOCKS_OK,
               "kv b chunk");
        pos += m;
    }
    test_cond(memcmp(k1, k2, n * 4) == 0 && memcmp(v1, v2, n * 4) == 0,
           "same seed, other chunking: different K/V");
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(k1[i]) || !isfinite(v1[i]);
    test_cond(bad == 0, "%d non-finite values", bad);
    locks_synth_kv(c, 0, N, k2, v2);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += k1[i] == k2[i];
    test_cond(same < n / 100, "another seed gives %zu of %zu equal keys", same, n);
    float q1[4 * 64], q2[4 * 64];
    locks_synth_query(a, 3, q1);
    locks_synth_query(b, 3, q2);
    test_cond(memcmp(q1, q2, sizeof q1) == 0, "queries not reproducible");
    locks_synth_query(a, 4, q2);
    test_cond(memcmp(q1, q2, sizeof q1) != 0, "steps 3 and 4 give the same queries");
    test_cond(locks_synth_kv(a, N - 3, 4, k1, v1) == LOCKS_ERR_INVALID_ARG, "range past context accepted");
    free(k1), free(v1), free(k2), free(v2);
    locks_synth_free(a), locks_synth_free(b), locks_synth_free(c);
}

static void test_structure(void) {
    const int H = 3, G = 3, Hq = H * G, D = 64, N = 16384 + 9; /* smollm2 shape */
    const char *env = getenv("LOCKS_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) * 31u + 7u;
    printf("test_synth: structure seed %llu (LOCKS_TEST_SEED to repeat)\n", (unsigned long long)seed);
    locks_synth_params p = locks_synth_default_params(H, Hq, D, N, seed);
    locks_synth *s = locks_synth_init(p, NULL);
    test_cond(s != NULL, "init");
    if (!s) return;
    size_t n = (size_t)N * H * D;
    float *k = malloc(n * 4), *v = malloc(n * 4);
    locks_synth_kv(s, 0, N, k, v);
    int32_t nn;
    const int32_t *needles = locks_synth_needles(s, &nn);
    test_cond(nn == p.n_needles, "needles %d", nn);
    const int NP = N / 16;

    /* 1. every page is low rank: rank_max directions hold >= 97% of the centred energy
     *    (needle pages: one more direction) */
    double worst = 1, worst_r2 = 0;
    for (int h = 0; h < H; h++)
        for (int j = 1; j < NP; j += 3) {
            int is_needle = 0;
            for (int i = 0; i < nn; i++) is_needle |= needles[i] == j;
            double e = page_energy_top(k, H, D, j, h, p.rank_max + is_needle);
            worst = fmin(worst, e);
            worst_r2 = fmax(worst_r2, page_energy_top(k, H, D, j, h, 2));
        }
    test_cond(worst >= 0.97, "a page keeps only %.4f of its energy in rank %d", worst, p.rank_max);
    test_cond(worst_r2 < 0.97, "pages are rank <= 2 (%.4f): rank range not honoured", worst_r2);

    /* 2. ... but the whole key matrix is not: the top rank_max directions of the keys
     *    of head 0 (centred over all tokens) hold well under half the energy */
    double cov[64 * 64] = {0}, mean[64] = {0}, w[64];
    const int n_used = (N - 16 + 3) / 4; /* every 4th token is plenty */
    for (int t = 16; t < N; t += 4)
        for (int c = 0; c < D; c++) mean[c] += (double)k[((size_t)t * H) * D + c] / n_used;
    for (int t = 16; t < N; t += 4) {
        const float *kt = k + (size_t)t * H * D;
        for (int a = 0; a < D; a++)
            for (int b = 0; b < D; b++) cov[a * D + b] += ((double)kt[a] - mean[a]) * ((double)kt[b] - mean[b]);
    }
    tu_ref_eig(D, cov, w, NULL);
    double tot = 0, top = 0;
    for (int i = 0; i < D; i++) tot += w[i], top += i < p.rank_max ? w[i] : 0;
    test_cond(top / tot < 0.5, "global keys are low rank: top-%d share %.3f", p.rank_max, top / tot);

    /* 3. GQA: query heads of one group are correlated, other groups much less */
    float *q = malloc(sizeof(float) * Hq * D);
    locks_synth_query(s, 0, q);
    double in_g = 0, out_g = 0;
    int n_in = 0, n_out = 0;
    for (int a = 0; a < Hq; a++)
        for (int b = a + 1; b < Hq; b++) {
            double dot = 0, na = 0, nb = 0;
            for (int c = 0; c < D; c++) {
                dot += (double)q[a * D + c] * (double)q[b * D + c];
                na += (double)q[a * D + c] * (double)q[a * D + c];
                nb += (double)q[b * D + c] * (double)q[b * D + c];
            }
            double cs = dot / sqrt(na * nb);
            if (a / G == b / G) in_g += cs, n_in++;
            else out_g += fabs(cs), n_out++;
        }
    in_g /= n_in, out_g /= n_out;
    /* expected: in-group ~ (2 + 0.7) / 3 = 0.9; across groups ~ |N(0, 1/sqrt(d))| */
    test_cond(in_g > 0.8 && out_g < 0.3, "group correlation: mean in-group %.3f, mean |across| %.3f", in_g, out_g);

    /* 4. attention: the needle pages carry the top true group masses (page 0, with the
     *    sinks, aside): at every step, and averaged over steps, each needle page is within
     *    the top 2 n_needles pages of every head (a query can light up a background page
     *    whose centre or subspace it happens to align with, and the fixed sink/needle part
     *    of the queries keeps a few such pages warm), and the needles together outweigh
     *    the n_needles heaviest other pages. Sinks and needles hold large shares. */
    locks_kv_src src = locks_kv_src_arrays(N, H, D, k, v);
    double sink_share = 0, needle_share = 0;
    const int steps = 4, NPa = NP + 1;
    double *gm = malloc(sizeof(double) * (size_t)NPa), *avg = calloc((size_t)H * NPa, sizeof(double));
    for (int st = 0; st < steps; st++) {
        locks_synth_query(s, st, q);
        locks_attn_ref ref;
        if (locks_attn_ref_compute(&src, q, Hq, 0.0f, 2, &ref) != LOCKS_OK) {
            test_cond(0, "ref");
            break;
        }
        for (int h = 0; h < H; h++) {
            for (int j = 0; j < ref.n_pages; j++) {
                gm[j] = 0;
                for (int g = 0; g < G; g++) gm[j] += ref.p[(h * G + g) * ref.n_pages + j] / G;
                avg[h * NPa + j] += gm[j] / steps;
            }
            for (int i = 0; i < nn; i++) {
                int above = 0;
                for (int j = 1; j < ref.n_pages; j++) above += gm[j] > gm[needles[i]];
                test_cond(above < 2 * nn, "step %d head %d: needle page %d has %d pages above it", st, h,
                       needles[i], above);
                needle_share += gm[needles[i]] / (steps * H);
            }
            sink_share += gm[0] / (steps * H);
        }
        locks_attn_ref_free(&ref);
    }
    for (int h = 0; h < H; h++) {
        const double *a = avg + (size_t)h * NPa;
        double needle_sum = 0, other_top = 0;
        uint8_t *used = calloc((size_t)NPa, 1);
        for (int i = 0; i < nn; i++) {
            int above = 0;
            for (int j = 1; j < NPa; j++) above += a[j] > a[needles[i]];
            test_cond(above < 2 * nn, "head %d: mean mass of needle page %d has %d pages above it", h, needles[i],
                      above);
            needle_sum += a[needles[i]];
            used[needles[i]] = 1;
        }
        for (int r = 0; r < nn; r++) { /* the nn heaviest non-needle pages (page 0 aside) */
            int best = -1;
            for (int j = 1; j < NPa; j++)
                if (!used[j] && (best < 0 || a[j] > a[best])) best = j;
            used[best] = 1;
            other_top += a[best];
        }
        test_cond(needle_sum > other_top, "head %d: needles hold %.4g, the %d heaviest other pages %.4g", h,
                  needle_sum, nn, other_top);
        free(used);
    }
    free(avg);
    printf("test_synth: sink page share %.3f (target %.2f + its background), needle share %.3f (target %.2f)\n",
           sink_share, (double)p.sink_share, needle_share, (double)p.needle_share);
    double ss = (double)p.sink_share, ns = (double)p.needle_share;
    test_cond(sink_share > 0.5 * ss && sink_share < 2.0 * ss + 0.05, "sink share %.3f", sink_share);
    test_cond(needle_share > 0.5 * ns && needle_share < 2.0 * ns, "needle share %.3f", needle_share);
    free(k), free(v), free(q), free(gm);
    locks_synth_free(s);
}

static void test_params(void) {
    locks_synth_params p = locks_synth_default_params(2, 3, 64, 100, 1);
    locks_status err = LOCKS_OK;
    test_cond(locks_synth_init(p, &err) == NULL && err == LOCKS_ERR_INVALID_ARG, "Hq not a multiple of Hkv");
    p = locks_synth_default_params(2, 4, 64, 100, 1);
    p.sink_share = 0.6f;
    p.needle_share = 0.5f;
    test_cond(locks_synth_init(p, &err) == NULL, "shares over 1 accepted");
    /* a short context has fewer needle pages, never forced ones */
    p = locks_synth_default_params(1, 1, 64, 16 * 5, 1);
    locks_synth *s = locks_synth_init(p, &err);
    int32_t nn;
    const int32_t *nd = locks_synth_needles(s, &nn);
    test_cond(s && nn == 1 && nd[0] == 2, "5 pages: needles %d (first %d)", nn, nn ? nd[0] : -1);
    locks_synth_free(s);
}

/* locks_synth_fill writes exactly locks_synth_kv's values (as fp16) and summarises full pages. */
static void test_fill(void) {
    const int H = 2, Hq = 6, D = 64, N = 16 * 20 + 5;
    locks_synth_params p = locks_synth_default_params(H, Hq, D, N, 99);
    locks_synth *s = locks_synth_init(p, NULL);
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = 2;
    cp.n_kv_heads = H;
    cp.head_dim = D;
    cp.n_pages = 64;
    cp.max_seqs = 2;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    test_cond(s && c, "init: %s", locks_status_str(st));
    if (!s || !c) return;
    int32_t seq, other;
    locks_cache_seq_add(c, &other);
    locks_cache_append(c, other, 40); /* so physical and logical pages differ */
    locks_cache_seq_add(c, &seq);
    test_cond(locks_synth_fill(s, c, seq, 1, 3) == LOCKS_OK, "fill layer 1");
    test_cond(locks_cache_seq_len(c, seq) == N, "len %d", locks_cache_seq_len(c, seq));
    test_cond(locks_synth_fill(s, c, seq, 0, 1) == LOCKS_OK, "fill layer 0 (no second append)");
    test_cond(locks_cache_seq_len(c, seq) == N, "len after second fill %d", locks_cache_seq_len(c, seq));
    size_t n = (size_t)N * H * D;
    float *k = malloc(n * 4), *v = malloc(n * 4);
    locks_synth_kv(s, 0, N, k, v);
    int32_t np;
    const int32_t *bt = locks_cache_block_table(c, seq, &np);
    size_t bad = 0;
    for (int layer = 0; layer < 2; layer++)
        for (int t = 0; t < N; t++) {
            const uint16_t *kp = locks_cache_k_page(c, layer, bt[t / 16]), *vp = locks_cache_v_page(c, layer, bt[t / 16]);
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++) {
                    size_t ci = ((size_t)h * 16 + (size_t)(t % 16)) * D + d, si = ((size_t)t * H + h) * D + d;
                    bad += kp[ci] != locks_f32_to_f16(k[si]) || vp[ci] != locks_f32_to_f16(v[si]);
                }
        }
    test_cond(bad == 0, "%zu cache values differ from the generator's", bad);
    float mu[64], basis[15 * 64], coef[16 * 15];
    test_cond(locks_cache_summary_get(c, 0, 1, bt[N / 16 - 1], mu, basis, coef) == LOCKS_OK, "last full page summary");
    test_cond(locks_cache_summary_get(c, 0, 1, bt[N / 16], mu, basis, coef) != LOCKS_OK, "partial page has a summary");
    locks_synth_params p2 = locks_synth_default_params(H, Hq, D, N + 1, 99);
    locks_synth *s2 = locks_synth_init(p2, NULL);
    test_cond(locks_synth_fill(s2, c, seq, 0, 1) == LOCKS_ERR_INVALID_ARG, "fill over a different length accepted");
    locks_synth_free(s2);
    free(k), free(v);
    locks_cache_free(c);
    locks_synth_free(s);
}

int main(void) {
    test_fill();
    test_reproducible();
    test_structure();
    test_params();
    return test_report("test_synth");
}
