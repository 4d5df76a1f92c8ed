/*
 * test_metrics.c — the metrics module against hand-computed cases and against a
 * brute-force float64 softmax written independently here, on fresh random data.
 */
#include "test_util.h"

#include "eval/metrics.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPECT_NEAR(a, b, tol, what)                                                           \
    test_cond(fabs((double)(a) - (double)(b)) <= (tol), "%s: got %.12g want %.12g (diff %.3g)", \
           what, (double)(a), (double)(b), fabs((double)(a) - (double)(b)))

/* ---------------------------------------------------------------------------------- */
/* Hand-computable case                                                                 */
/* ---------------------------------------------------------------------------------- */

/* Two pages, d = 2, scale 1. Page 0 keys (0, x), page 1 keys (ln 3, x) with random x;
 * query head 0 = (1, 0) sees logits 0 | ln 3, head 1 = (-1, 0) sees 0 | -ln 3.
 * Values: page 0 all (1, 0), page 1 all (0, 1).
 *   head 0: p = (16, 48) / 64 = (0.25, 0.75); o_full = (0.25, 0.75)
 *   head 1: p = (16, 16/3) / (64/3) = (0.75, 0.25); o_full = (0.75, 0.25)
 *   group mean mass (0.5, 0.5): both one-page selections cover half the mass. */
static void test_hand(void) {
    enum { N = 32, D = 2 };
    float k[N * D], v[N * D], q[2 * D] = {1.0f, 0.0f, -1.0f, 0.0f};
    for (int t = 0; t < N; t++) {
        k[t * D] = t < 16 ? 0.0f : (float)log(3.0);
        k[t * D + 1] = 0.0f; /* the second coordinate is multiplied by q's zero */
        v[t * D] = t < 16 ? 1.0f : 0.0f;
        v[t * D + 1] = t < 16 ? 0.0f : 1.0f;
    }
    /* float(ln 3) is not ln 3: use the exact probabilities it implies */
    double e = exp((double)(float)log(3.0));
    double p0 = 1.0 / (1.0 + e), p1 = e / (1.0 + e);
    locks_kv_src src = locks_kv_src_arrays(N, 1, D, k, v);
    locks_attn_ref ref;
    locks_status st = locks_attn_ref_compute(&src, q, 2, 1.0f, 1, &ref);
    test_cond(st == LOCKS_OK, "ref: %s", locks_status_str(st));
    if (st != LOCKS_OK) return;
    test_cond(ref.n_pages == 2, "n_pages %d", ref.n_pages);
    EXPECT_NEAR(ref.p[0], p0, 1e-15, "p[h0][0]");
    EXPECT_NEAR(ref.p[1], p1, 1e-15, "p[h0][1]");
    EXPECT_NEAR(ref.p[2], p1, 1e-15, "p[h1][0]");
    EXPECT_NEAR(ref.p[3], p0, 1e-15, "p[h1][1]");
    EXPECT_NEAR(ref.o_full[0], p0, 1e-15, "o_full h0");
    EXPECT_NEAR(ref.o_full[1], p1, 1e-15, "o_full h0");
    EXPECT_NEAR(ref.o_full[2], p1, 1e-15, "o_full h1");
    EXPECT_NEAR(ref.lse[0], log(16.0 + 16.0 * e), 1e-13, "lse h0");

    int32_t pages[2] = {1, -1}, np = 1;
    locks_sel_metrics m;
    st = locks_metrics_eval(&ref, pages, &np, 2, 16, 0, 0, NULL, &m);
    test_cond(st == LOCKS_OK, "eval: %s", locks_status_str(st));
    double nf = sqrt(p0 * p0 + p1 * p1);
    double err0 = sqrt(2.0) * p0 / nf, err1 = sqrt(2.0) * p1 / nf; /* o_S = (0, 1) */
    EXPECT_NEAR(m.mass_coverage, 0.5, 1e-15, "coverage of {1}");
    EXPECT_NEAR(m.oracle_mass_coverage, 0.5, 1e-15, "oracle coverage");
    EXPECT_NEAR(m.coverage_ratio, 1.0, 1e-15, "ratio");
    /* the group masses tie up to rounding, so the oracle may take either page */
    test_cond(m.oracle_recall == 0.0 || m.oracle_recall == 1.0, "recall %g", m.oracle_recall);
    EXPECT_NEAR(m.output_rel_err, 0.5 * (err0 + err1), 1e-14, "rel err");
    EXPECT_NEAR(m.output_rel_err_max, err1, 1e-14, "rel err max");
    EXPECT_NEAR(m.cosine, 0.5 * (p1 / nf + p0 / nf), 1e-14, "cosine");
    EXPECT_NEAR(m.cosine_min, p0 / nf, 1e-14, "cosine min");
    EXPECT_NEAR(m.kernel_rel_err, -1.0, 0.0, "kernel err without out");
    EXPECT_NEAR(m.tokens, 16.0, 0.0, "tokens");

    /* head 0 alone: the oracle takes page 1, coverage p1, recall 1 */
    locks_attn_ref r1;
    st = locks_attn_ref_compute(&src, q, 1, 1.0f, 1, &r1);
    test_cond(st == LOCKS_OK, "ref1");
    if (st == LOCKS_OK) {
        st = locks_metrics_eval(&r1, pages, &np, 2, 16, 0, 0, NULL, &m);
        test_cond(st == LOCKS_OK, "eval1");
        EXPECT_NEAR(m.mass_coverage, p1, 1e-15, "coverage h0");
        EXPECT_NEAR(m.oracle_recall, 1.0, 0.0, "recall h0");
        EXPECT_NEAR(m.output_rel_err, err0, 1e-14, "err h0");
        pages[0] = 0;
        st = locks_metrics_eval(&r1, pages, &np, 2, 16, 0, 0, NULL, &m);
        EXPECT_NEAR(m.mass_coverage, p0, 1e-15, "coverage {0}");
        EXPECT_NEAR(m.coverage_ratio, p0 / p1, 1e-14, "ratio {0}");
        EXPECT_NEAR(m.oracle_recall, 0.0, 0.0, "recall {0}");
        /* both pages: exact */
        int32_t all[2] = {0, 1}, n2 = 2;
        float out[D] = {(float)p0, (float)p1};
        st = locks_metrics_eval(&r1, all, &n2, 2, 32, 0, 0, out, &m);
        EXPECT_NEAR(m.mass_coverage, 1.0, 1e-15, "coverage all");
        EXPECT_NEAR(m.output_rel_err, 0.0, 0.0, "err all");
        EXPECT_NEAR(m.cosine, 1.0, 1e-15, "cos all");
        test_cond(m.kernel_rel_err >= 0.0 && m.kernel_rel_err < 1e-7, "kernel err %g", m.kernel_rel_err);
        locks_attn_ref_free(&r1);
    }
    locks_attn_ref_free(&ref);
}

/* Forced pages and the budget, by hand: 36 tokens = 2 full pages + a 4-token partial. */
static void test_forced(void) {
    uint8_t f[3];
    int32_t t = locks_metrics_forced(36, 1, 1, f);
    test_cond(t == 36 && f[0] && f[1] && f[2], "forced(36,1,1): %d %d%d%d", t, f[0], f[1], f[2]);
    t = locks_metrics_forced(36, 0, 0, f);
    test_cond(t == 4 && !f[0] && !f[1] && f[2], "forced(36,0,0): %d %d%d%d", t, f[0], f[1], f[2]);
    t = locks_metrics_forced(36, 1, 0, f);
    test_cond(t == 20 && f[0] && !f[1] && f[2], "forced(36,1,0): %d", t);
    t = locks_metrics_forced(32, 0, 1, f);
    test_cond(t == 16 && !f[0] && f[1], "forced(32,0,1): %d", t);
    t = locks_metrics_forced(5, 3, 3, f);
    test_cond(t == 5 && f[0], "forced(5,3,3): %d", t);

    enum { N = 36, D = 4 };
    float k[N * D], v[N * D], q[D];
    for (int i = 0; i < N * D; i++) {
        k[i] = (float)tu_normal();
        v[i] = (float)tu_normal();
    }
    for (int i = 0; i < D; i++) q[i] = (float)tu_normal();
    locks_kv_src src = locks_kv_src_arrays(N, 1, D, k, v);
    locks_attn_ref ref;
    if (locks_attn_ref_compute(&src, q, 1, 0.0f, 1, &ref) != LOCKS_OK) {
        test_cond(0, "ref");
        return;
    }
    int32_t pages[3], np;
    test_cond(locks_metrics_oracle_select(&ref, 36, 1, 1, pages, &np, 3) == LOCKS_OK && np == 3,
           "budget == forced");
    test_cond(locks_metrics_oracle_select(&ref, 35, 1, 1, pages, &np, 3) == LOCKS_ERR_BUDGET,
           "budget < forced must fail");
    test_cond(locks_metrics_oracle_select(&ref, 0, 0, 0, pages, &np, 3) == LOCKS_ERR_BUDGET,
           "budget 0 must fail");
    test_cond(locks_metrics_oracle_select(&ref, 20, 0, 0, pages, &np, 3) == LOCKS_OK && np == 2 &&
               pages[1] == 2,
           "budget 20, no sink/recent: partial + 1 page (np %d)", np);
    /* the free page is the heavier of pages 0 and 1 */
    int32_t want = ref.p[0] >= ref.p[1] ? 0 : 1;
    test_cond(pages[0] == want, "oracle took page %d, want %d (p %g %g)", pages[0], want, ref.p[0], ref.p[1]);
    test_cond(locks_metrics_oracle_select(&ref, 1000, 0, 0, pages, &np, 3) == LOCKS_OK && np == 3,
           "budget >= context: all pages");
    locks_attn_ref_free(&ref);
}

/* ---------------------------------------------------------------------------------- */
/* Random data against a brute-force float64 softmax                                    */
/* ---------------------------------------------------------------------------------- */

/* Softmax of query head qh over the tokens of the listed pages (all if n < 0):
 * o[d], page masses pm[n_pages] (relative to that token set). */
static void brute(const float *k, const float *v, const float *q, int32_t N, int32_t H, int32_t D,
                  int32_t G, int32_t qh, double scale, const uint8_t *in, double *o, double *pm) {
    int32_t h = qh / G;
    double mx = -1e300;
    double *l = malloc(sizeof(double) * (size_t)N);
    for (int32_t t = 0; t < N; t++) {
        double a = 0;
        for (int32_t c = 0; c < D; c++) a += (double)q[qh * D + c] * (double)k[((size_t)t * H + h) * D + c];
        l[t] = a * scale;
        if ((!in || in[t / 16]) && l[t] > mx) mx = l[t];
    }
    double z = 0;
    for (int32_t t = 0; t < N; t++)
        if (!in || in[t / 16]) z += exp(l[t] - mx);
    memset(o, 0, sizeof(double) * (size_t)D);
    if (pm) memset(pm, 0, sizeof(double) * (size_t)((N + 15) / 16));
    for (int32_t t = 0; t < N; t++) {
        if (in && !in[t / 16]) continue;
        double w = exp(l[t] - mx) / z;
        if (pm) pm[t / 16] += w;
        for (int32_t c = 0; c < D; c++) o[c] += w * (double)v[((size_t)t * H + h) * D + c];
    }
    free(l);
}

static void test_random(int32_t H, int32_t G, int32_t D, int32_t N) {
    const int32_t Hq = H * G, NP = (N + 15) / 16;
    float *k = malloc(sizeof(float) * (size_t)N * H * D), *v = malloc(sizeof(float) * (size_t)N * H * D);
    float *q = malloc(sizeof(float) * (size_t)Hq * D);
    /* page-dependent key offsets make page masses differ a lot */
    for (int32_t t = 0; t < N; t++)
        for (int32_t h = 0; h < H; h++)
            for (int32_t c = 0; c < D; c++) {
                size_t i = ((size_t)t * H + h) * D + c;
                k[i] = (float)(1.5 * tu_normal() + ((t / 16 + c) % 5 == 0 ? 2.0 : 0.0));
                v[i] = (float)tu_normal();
            }
    for (int32_t i = 0; i < Hq * D; i++) q[i] = (float)tu_normal();
    double scale = 1.0 / sqrt((double)D);
    locks_kv_src src = locks_kv_src_arrays(N, H, D, k, v);
    locks_attn_ref ref, ref3;
    if (locks_attn_ref_compute(&src, q, Hq, 0.0f, 1, &ref) != LOCKS_OK ||
        locks_attn_ref_compute(&src, q, Hq, 0.0f, 3, &ref3) != LOCKS_OK) {
        test_cond(0, "ref compute failed");
        return;
    }
    test_cond(memcmp(ref.p, ref3.p, sizeof(double) * (size_t)Hq * NP) == 0 &&
               memcmp(ref.o_full, ref3.o_full, sizeof(double) * (size_t)Hq * D) == 0,
           "results depend on the thread count");

    double *o = malloc(sizeof(double) * D), *pm = malloc(sizeof(double) * NP);
    double max_dp = 0, max_do = 0;
    for (int32_t qh = 0; qh < Hq; qh++) {
        brute(k, v, q, N, H, D, G, qh, scale, NULL, o, pm);
        double sp = 0;
        for (int32_t j = 0; j < NP; j++) {
            max_dp = fmax(max_dp, fabs(pm[j] - ref.p[qh * NP + j]));
            sp += ref.p[qh * NP + j];
        }
        EXPECT_NEAR(sp, 1.0, 1e-12, "sum_j p_hj");
        for (int32_t c = 0; c < D; c++) max_do = fmax(max_do, fabs(o[c] - ref.o_full[qh * D + c]));
    }
    test_cond(max_dp < 1e-13, "p vs brute force: max diff %g", max_dp);
    test_cond(max_do < 1e-12, "o_full vs brute force: max diff %g", max_do);

    /* random selections (random size, forced pages included) vs brute force */
    const int32_t n_sink = 1, n_recent = 1;
    uint8_t *forced = malloc((size_t)NP), *in = malloc((size_t)NP);
    int32_t ftok = locks_metrics_forced(N, n_sink, n_recent, forced);
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)H * NP), *np = malloc(sizeof(int32_t) * (size_t)H);
    int32_t *op = malloc(sizeof(int32_t) * (size_t)H * NP), *onp = malloc(sizeof(int32_t) * (size_t)H);
    float *out = malloc(sizeof(float) * (size_t)Hq * D);
    for (int trial = 0; trial < 20; trial++) {
        int32_t n_free = 1 + (int32_t)(tu_uniform() * (NP - 3)); /* same count for every head */
        int32_t budget = ftok + 16 * n_free;
        double cov = 0, rec = 0, err = 0, cs = 0;
        for (int32_t h = 0; h < H; h++) {
            memcpy(in, forced, (size_t)NP);
            int32_t got = 0;
            while (got < n_free) {
                int32_t j = (int32_t)(tu_uniform() * NP);
                if (!in[j]) in[j] = 1, got++;
            }
            np[h] = 0;
            for (int32_t j = NP - 1; j >= 0; j--) /* descending: order must not matter */
                if (in[j]) pages[h * NP + np[h]++] = j;
            /* brute-force oracle for this head: forced + top n_free by group-mean p */
            double *gm = calloc((size_t)NP, sizeof(double));
            for (int32_t g = 0; g < G; g++)
                for (int32_t j = 0; j < NP; j++) gm[j] += ref.p[(h * G + g) * NP + j] / G;
            uint8_t *oin = malloc((size_t)NP);
            memcpy(oin, forced, (size_t)NP);
            for (int32_t r = 0; r < n_free; r++) {
                int32_t best = -1;
                for (int32_t j = 0; j < NP; j++)
                    if (!oin[j] && (best < 0 || gm[j] > gm[best])) best = j;
                oin[best] = 1;
            }
            double c1 = 0, c2 = 0;
            int32_t hit = 0;
            for (int32_t j = 0; j < NP; j++) {
                if (in[j]) c1 += gm[j];
                if (oin[j]) c2 += gm[j];
                if (oin[j] && !forced[j] && in[j]) hit++;
            }
            cov += c1 / H;
            rec += (double)hit / n_free / H;
            test_cond(c1 <= c2 + 1e-15, "a random selection beat the oracle: %g > %g", c1, c2);
            for (int32_t g = 0; g < G; g++) {
                int32_t qh = h * G + g;
                double of[256];
                brute(k, v, q, N, H, D, G, qh, scale, in, o, NULL);
                brute(k, v, q, N, H, D, G, qh, scale, NULL, of, NULL);
                double dd = 0, nn = 0, dot = 0, na = 0;
                for (int32_t c = 0; c < D; c++) {
                    dd += (o[c] - of[c]) * (o[c] - of[c]);
                    nn += of[c] * of[c];
                    na += o[c] * o[c];
                    dot += o[c] * of[c];
                    out[qh * D + c] = (float)o[c];
                }
                err += sqrt(dd / nn) / Hq;
                cs += dot / sqrt(nn * na) / Hq;
            }
            free(gm);
            free(oin);
        }
        locks_sel_metrics m;
        locks_status st = locks_metrics_eval(&ref, pages, np, NP, budget, n_sink, n_recent, out, &m);
        test_cond(st == LOCKS_OK, "eval: %s", locks_status_str(st));
        EXPECT_NEAR(m.mass_coverage, cov, 1e-13, "coverage");
        EXPECT_NEAR(m.oracle_recall, rec, 1e-13, "recall");
        EXPECT_NEAR(m.output_rel_err, err, 1e-11, "output rel err");
        EXPECT_NEAR(m.cosine, cs, 1e-12, "cosine");
        test_cond(m.coverage_ratio <= 1.0 + 1e-13 && m.coverage_ratio > 0.0, "ratio %g", m.coverage_ratio);
        test_cond(m.kernel_rel_err >= 0.0 && m.kernel_rel_err < 1e-6, "kernel err (fp32 of o_S) %g",
               m.kernel_rel_err);
        /* the oracle's own selection scores ratio 1 and recall 1 */
        st = locks_metrics_oracle_select(&ref, budget, n_sink, n_recent, op, onp, NP);
        test_cond(st == LOCKS_OK, "oracle select");
        st = locks_metrics_eval(&ref, op, onp, NP, budget, n_sink, n_recent, NULL, &m);
        EXPECT_NEAR(m.coverage_ratio, 1.0, 1e-15, "oracle ratio");
        EXPECT_NEAR(m.oracle_recall, 1.0, 0.0, "oracle recall");
        for (int32_t h = 0; h < H; h++) {
            int32_t ntok = 0;
            for (int32_t i = 0; i < onp[h]; i++) {
                int32_t j = op[h * NP + i];
                ntok += j == NP - 1 && N % 16 ? N % 16 : 16;
                test_cond(i == 0 || op[h * NP + i - 1] < j, "oracle pages not ascending");
            }
            test_cond(ntok <= budget && ntok > budget - 16, "oracle tokens %d, budget %d", ntok, budget);
        }
        /* a corrupted output shows up in kernel_rel_err */
        out[3] += 0.5f;
        locks_metrics_eval(&ref, pages, np, NP, budget, n_sink, n_recent, out, &m);
        test_cond(m.kernel_rel_err > 1e-3, "perturbed out not detected: %g", m.kernel_rel_err);
    }
    /* invalid selections */
    locks_sel_metrics m;
    np[0] = 1;
    pages[0] = NP;
    test_cond(locks_metrics_eval(&ref, pages, np, NP, N, 1, 1, NULL, &m) == LOCKS_ERR_INVALID_ARG,
           "page out of range accepted");
    np[0] = 2;
    pages[0] = pages[1] = 0;
    test_cond(locks_metrics_eval(&ref, pages, np, NP, N, 1, 1, NULL, &m) == LOCKS_ERR_INVALID_ARG,
           "duplicate page accepted");
    q[5] = NAN;
    locks_attn_ref bad;
    test_cond(locks_attn_ref_compute(&src, q, Hq, 0.0f, 1, &bad) == LOCKS_ERR_NONFINITE,
           "NaN query accepted");
    locks_attn_ref_free(&bad);

    locks_attn_ref_free(&ref);
    locks_attn_ref_free(&ref3);
    free(k), free(v), free(q), free(o), free(pm), free(forced), free(in);
    free(pages), free(np), free(op), free(onp), free(out);
}

/* The cache source reads back what the library attends: with fp16-exact inputs the
 * reference from the cache equals the reference from the arrays, bit for bit. */
static void test_cache_src(void) {
    const int32_t H = 2, G = 2, D = 64, N = 16 * 7 + 3;
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = 2;
    cp.n_kv_heads = H;
    cp.head_dim = D;
    cp.n_pages = 32;
    cp.max_seqs = 2;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    test_cond(c != NULL, "cache init: %s", locks_status_str(st));
    if (!c) return;
    size_t n = (size_t)N * H * D;
    float *k = malloc(n * 4), *v = malloc(n * 4), q[4 * 64];
    for (size_t i = 0; i < n; i++) {
        k[i] = locks_f16_to_f32(locks_f32_to_f16((float)(2.0 * tu_normal())));
        v[i] = locks_f16_to_f32(locks_f32_to_f16((float)tu_normal()));
    }
    for (int i = 0; i < H * G * D; i++) q[i] = (float)tu_normal();
    int32_t other, seq;
    locks_cache_seq_add(c, &other);
    locks_cache_append(c, other, 33); /* physical pages != logical ones */
    locks_cache_seq_add(c, &seq);
    locks_cache_append(c, seq, N);
    test_cond(locks_cache_write(c, seq, 1, 0, N, k, v) == LOCKS_OK, "write");
    locks_kv_src a = locks_kv_src_arrays(N, H, D, k, v), b;
    test_cond(locks_kv_src_cache(c, seq, 1, &b) == LOCKS_OK && b.n_tokens == N, "cache src");
    test_cond(locks_kv_src_cache(c, 7, 1, &b) == LOCKS_ERR_NO_SEQ, "unknown seq accepted");
    test_cond(locks_kv_src_cache(c, seq, 2, &b) == LOCKS_ERR_INVALID_ARG, "bad layer accepted");
    locks_kv_src_cache(c, seq, 1, &b);
    locks_attn_ref ra, rb;
    if (locks_attn_ref_compute(&a, q, H * G, 0.0f, 1, &ra) == LOCKS_OK &&
        locks_attn_ref_compute(&b, q, H * G, 0.0f, 2, &rb) == LOCKS_OK) {
        test_cond(memcmp(ra.p, rb.p, sizeof(double) * (size_t)H * G * ra.n_pages) == 0 &&
                   memcmp(ra.o_full, rb.o_full, sizeof(double) * (size_t)H * G * D) == 0,
               "cache and array sources disagree");
        /* and the library's dense step matches the float64 reference */
        float out[4 * 64];
        locks_step_params sp = locks_step_default_params();
        sp.selector = LOCKS_SEL_FULL;
        int32_t pages[2 * 8], npg[2];
        locks_selection sel = {pages, npg, 8};
        test_cond(locks_decode_step(c, 1, &seq, 1, q, H * G, &sp, out, &sel, NULL) == LOCKS_OK, "dense step");
        locks_sel_metrics m;
        test_cond(locks_metrics_eval(&rb, pages, npg, 8, N, 1, 1, out, &m) == LOCKS_OK, "eval");
        test_cond(m.mass_coverage > 1.0 - 1e-12 && m.output_rel_err == 0.0 && m.kernel_rel_err < 1e-5,
               "dense step: coverage %g err %g kernel %g", m.mass_coverage, m.output_rel_err, m.kernel_rel_err);
        locks_attn_ref_free(&ra);
        locks_attn_ref_free(&rb);
    } else {
        test_cond(0, "ref compute");
    }
    free(k), free(v);
    locks_cache_free(c);
}

static void test_carrier(void) {
    /* 2 KV heads, max_pages 4. Needles at pages 5 and 9. Head 0: oracle {1,5,9}, method
     * {5,7}; head 1: oracle {2,9}, method {9}. Oracle picks 3 needle pairs, method hits
     * 2 of them. */
    int32_t op[8] = {1, 5, 9, 0, 2, 9, 0, 0}, on[2] = {3, 2};
    int32_t mp[8] = {5, 7, 0, 0, 9, 0, 0, 0}, mn[2] = {2, 1};
    int32_t needles[2] = {5, 9};
    locks_carrier_count acc = {0, 0};
    test_cond(locks_metrics_carrier_recall(&acc) == -1.0, "empty recall");
    locks_metrics_carrier_add(&acc, 2, op, on, mp, mn, 4, needles, 2);
    test_cond(acc.n_oracle == 3 && acc.n_hit == 2, "carrier %lld/%lld", (long long)acc.n_hit,
           (long long)acc.n_oracle);
    EXPECT_NEAR(locks_metrics_carrier_recall(&acc), 2.0 / 3.0, 1e-15, "carrier recall");
}

int main(void) {
    tu_seed("test_metrics");
    test_hand();
    test_forced();
    test_random(2, 3, 32, 16 * 13 + 5);
    test_random(1, 1, 64, 16 * 9);
    test_random(3, 4, 16, 16 * 20 + 1);
    test_cache_src();
    test_carrier();
    return test_report("test_metrics");
}
