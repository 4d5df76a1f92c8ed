/*
 * test_select.c — scoring and selection:
 *  - rank 15 + fp32 summaries: the LOCKS page score equals the exact page log-sum-exp
 *    (the oracle's), so the masses agree and LOCKS selects exactly the oracle's pages
 *    (differences allowed only between pages whose oracle masses tie to 1e-5);
 *  - quantized rank-8 summaries still track the oracle (mass coverage ratio);
 *  - top-k against a brute-force sort, ties to the lower index, forced pages (partial,
 *    n_sink leading, n_recent trailing) always selected, budget filled exactly;
 *  - every query head of a GQA group attends its KV head's pages (outputs vs float64).
 */
#include "test_util.h"

#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE };

/* A cache holding one sequence of len tokens; with write = 0 the tokens are only
 * reserved (enough for locks_select, which reads lengths only). */
static locks_cache *make_cache_w(int32_t H, int32_t d, int32_t len, locks_summary_prec prec, int32_t rank,
                                 int32_t *seq, int write) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_kv_heads = H;
    cp.head_dim = d;
    cp.n_pages = len / P + 2;
    cp.max_seqs = 1;
    cp.n_threads = 2;
    cp.summary_prec = prec;
    cp.rank = rank;
    locks_status err;
    locks_cache *c = locks_cache_init(cp, &err);
    CHECK(err);
    CHECK(locks_cache_seq_add(c, seq));
    if (!write) {
        CHECK(locks_cache_append(c, *seq, len));
        return c;
    }
    /* page-local structure: each page a random offset + rank-4 subspace + noise */
    size_t n = (size_t)len * H * d;
    float *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    float *off = malloc(sizeof(float) * (size_t)d * 5);
    tu_fill_normal(v, n, 1.0);
    for (int32_t t = 0; t < len; t++) {
        if (t % P == 0) tu_fill_normal(off, (size_t)d * 5, 0.6);
        for (int32_t h = 0; h < H; h++) {
            double a[4] = {tu_normal(), tu_normal(), tu_normal(), tu_normal()};
            for (int32_t x = 0; x < d; x++) {
                double s = (double)off[x] + 0.1 * tu_normal();
                for (int32_t b = 0; b < 4; b++) s += a[b] * (double)off[(b + 1) * d + x];
                k[((size_t)t * H + h) * d + x] = (float)s;
            }
        }
    }
    CHECK(locks_cache_append(c, *seq, len));
    CHECK(locks_cache_write(c, *seq, 0, 0, len, k, v));
    free(k);
    free(v);
    free(off);
    return c;
}

static locks_cache *make_cache(int32_t H, int32_t d, int32_t len, locks_summary_prec prec, int32_t rank,
                               int32_t *seq) {
    return make_cache_w(H, d, len, prec, rank, seq, 1);
}

static void test_rank15_exact(void) {
    const int32_t H = 2, G = 4, Hq = H * G, d = 64, len = tu_int(500, 900), n_full = len / P;
    int32_t seq;
    locks_cache *c = make_cache(H, d, len, LOCKS_SUMMARY_F32, 15, &seq);
    float *q = malloc(sizeof(float) * Hq * d);
    float *m_locks = malloc(sizeof(float) * H * n_full), *m_oracle = malloc(sizeof(float) * H * n_full);
    double *m_ref = malloc(sizeof(double) * H * n_full);
    for (int32_t trial = 0; trial < 3; trial++) {
        tu_fill_normal(q, (size_t)Hq * d, 1.5);
        locks_step_params p = locks_step_default_params();
        CHECK(locks_score(c, 0, seq, q, Hq, &p, m_locks));
        p.selector = LOCKS_SEL_ORACLE;
        CHECK(locks_score(c, 0, seq, q, Hq, &p, m_oracle));
        /* float64 reference masses from the stored keys */
        int32_t np;
        const int32_t *bt = locks_cache_block_table(c, seq, &np);
        for (int32_t i = 0; i < H * n_full; i++) m_ref[i] = 0.0;
        for (int32_t hq = 0; hq < Hq; hq++) {
            int32_t h = hq / G;
            double *s = malloc(sizeof(double) * n_full), mx = -INFINITY, z = 0.0;
            for (int32_t j = 0; j < n_full; j++) {
                const uint16_t *kp = locks_cache_k_page(c, 0, bt[j]) + (size_t)h * P * d;
                double lg[P], m = -INFINITY, l = 0.0;
                for (int32_t t = 0; t < P; t++) {
                    double a = 0.0;
                    for (int32_t x = 0; x < d; x++) a += (double)q[hq * d + x] * (double)locks_f16_to_f32(kp[t * d + x]);
                    lg[t] = a / sqrt(d);
                    m = fmax(m, lg[t]);
                }
                for (int32_t t = 0; t < P; t++) l += exp(lg[t] - m);
                s[j] = m + log(l);
                mx = fmax(mx, s[j]);
            }
            for (int32_t j = 0; j < n_full; j++) z += exp(s[j] - mx);
            for (int32_t j = 0; j < n_full; j++) m_ref[h * n_full + j] += exp(s[j] - mx - log(z)) / G;
            free(s);
        }
        tu_close("oracle mass", m_oracle, m_ref, (size_t)H * n_full, 1e-7, 1e-4);
        tu_close("locks r15 f32 mass", m_locks, m_ref, (size_t)H * n_full, 1e-7, 1e-4);
        /* selections */
        int32_t budget = P * tu_int(4, n_full / 2);
        int32_t *pl = malloc(sizeof(int32_t) * H * (n_full + 1)), *po = malloc(sizeof(int32_t) * H * (n_full + 1));
        int32_t nl[8], no[8];
        p.budget = budget;
        p.selector = LOCKS_SEL_LOCKS;
        CHECK(locks_select(c, seq, m_locks, &p, pl, nl, n_full + 1));
        p.selector = LOCKS_SEL_ORACLE;
        CHECK(locks_select(c, seq, m_oracle, &p, po, no, n_full + 1));
        for (int32_t h = 0; h < H; h++) {
            test_cond(nl[h] == no[h], "selection sizes %d vs %d", nl[h], no[h]);
            int32_t diff = 0, tie = 0;
            uint8_t *in_l = calloc((size_t)n_full + 1, 1), *in_o = calloc((size_t)n_full + 1, 1);
            for (int32_t i = 0; i < nl[h]; i++) in_l[pl[h * (n_full + 1) + i]] = 1;
            for (int32_t i = 0; i < no[h]; i++) in_o[po[h * (n_full + 1) + i]] = 1;
            double lo_in = INFINITY, hi_out = 0.0; /* oracle masses: weakest selected, strongest left out */
            for (int32_t j = 0; j < n_full; j++) {
                if (in_l[j] != in_o[j]) diff++;
                if (j == 0 || j == n_full - 1) continue;
                if (in_o[j]) lo_in = fmin(lo_in, m_ref[h * n_full + j]);
                else hi_out = fmax(hi_out, m_ref[h * n_full + j]);
            }
            if (lo_in - hi_out < 1e-5 * lo_in) tie = 1;
            test_cond(diff == 0 || tie, "head %d: locks r15 selects %d pages differently from the oracle", h, diff);
            free(in_l);
            free(in_o);
        }
        free(pl);
        free(po);
    }
    free(q);
    free(m_locks);
    free(m_oracle);
    free(m_ref);
    locks_cache_free(c);
}

/* Quantized rank 8: LOCKS's selection must keep most of the oracle's mass. */
static void test_quantized_coverage(void) {
    const int32_t H = 2, G = 4, Hq = H * G, d = 128, len = 1024, n_full = len / P;
    int32_t seq;
    locks_cache *c = make_cache(H, d, len, LOCKS_SUMMARY_Q, 8, &seq);
    float *q = malloc(sizeof(float) * Hq * d);
    float *ml = malloc(sizeof(float) * H * n_full), *mo = malloc(sizeof(float) * H * n_full);
    int32_t pl[2 * 128], po[2 * 128], nl[2], no[2];
    double cov_l = 0.0, cov_o = 0.0;
    for (int32_t trial = 0; trial < 4; trial++) {
        tu_fill_normal(q, (size_t)Hq * d, 1.5);
        locks_step_params p = locks_step_default_params();
        p.budget = 160;
        CHECK(locks_score(c, 0, seq, q, Hq, &p, ml));
        CHECK(locks_select(c, seq, ml, &p, pl, nl, 128));
        p.selector = LOCKS_SEL_ORACLE;
        CHECK(locks_score(c, 0, seq, q, Hq, &p, mo));
        CHECK(locks_select(c, seq, mo, &p, po, no, 128));
        for (int32_t h = 0; h < H; h++) {
            for (int32_t i = 0; i < nl[h]; i++) cov_l += (double)mo[h * n_full + pl[h * 128 + i]];
            for (int32_t i = 0; i < no[h]; i++) cov_o += (double)mo[h * n_full + po[h * 128 + i]];
        }
    }
    printf("  quantized r8 coverage ratio %.4f\n", cov_l / cov_o);
    test_cond(cov_l / cov_o >= 0.9, "quantized LOCKS covers %.3f of the oracle's mass", cov_l / cov_o);
    free(q);
    free(ml);
    free(mo);
    locks_cache_free(c);
}

/* Quantized summaries: LOCKS masses vs float64 from the dequantized summaries
 * (locks_cache_summary_get); simd as locks_simd_enable takes it. The portable kernel works in fp32 on the dequantized
 * values; the AVX2 kernel also rounds each query to int8 (one scale per head), which
 * moves a logit by about scale * |q|_max / 254 * sum |x|: a few percent of a mass. */
static void test_quantized_scores(int simd, int32_t d) {
    const int32_t H = 2, G = tu_int(1, 12), Hq = H * G, r = 8, len = tu_int(300, 700), n_full = len / P;
    int32_t seq;
    locks_simd_enable(simd);
    locks_cache *c = make_cache(H, d, len, LOCKS_SUMMARY_Q, r, &seq);
    float *q = malloc(sizeof(float) * Hq * d), *m = malloc(sizeof(float) * H * n_full);
    double *ref = malloc(sizeof(double) * H * n_full), *s = malloc(sizeof(double) * n_full);
    float mu[256], basis[8 * 256], coef[P * 8];
    tu_fill_normal(q, (size_t)Hq * d, 1.0);
    locks_step_params p = locks_step_default_params();
    CHECK(locks_score(c, 0, seq, q, Hq, &p, m));
    const int32_t *bt = locks_cache_block_table(c, seq, NULL);
    for (int32_t i = 0; i < H * n_full; i++) ref[i] = 0.0;
    for (int32_t hq = 0; hq < Hq; hq++) {
        int32_t h = hq / G;
        double mx = -INFINITY, z = 0.0;
        for (int32_t j = 0; j < n_full; j++) {
            CHECK(locks_cache_summary_get(c, 0, h, bt[j], mu, basis, coef));
            double qm = 0.0, y[8], lg[P], lm = -INFINITY, l = 0.0;
            for (int32_t x = 0; x < d; x++) qm += (double)q[hq * d + x] * (double)mu[x];
            for (int32_t k = 0; k < r; k++) {
                y[k] = 0.0;
                for (int32_t x = 0; x < d; x++) y[k] += (double)q[hq * d + x] * (double)basis[k * d + x];
            }
            for (int32_t i = 0; i < P; i++) {
                double a = qm;
                for (int32_t k = 0; k < r; k++) a += (double)coef[i * r + k] * y[k];
                lg[i] = a / sqrt(d);
                lm = fmax(lm, lg[i]);
            }
            for (int32_t i = 0; i < P; i++) l += exp(lg[i] - lm);
            s[j] = lm + log(l);
            mx = fmax(mx, s[j]);
        }
        for (int32_t j = 0; j < n_full; j++) z += exp(s[j] - mx);
        for (int32_t j = 0; j < n_full; j++) ref[h * n_full + j] += exp(s[j] - mx - log(z)) / G;
    }
    if (simd && locks_have_avx2()) {
        tu_close("locks q8 mass (avx2)", m, ref, (size_t)H * n_full, 1e-5, 0.05);
    } else {
        tu_close("locks q mass (portable)", m, ref, (size_t)H * n_full, 1e-7, 1e-4);
    }
    double worst = 0.0;
    for (int32_t i = 0; i < H * n_full; i++)
        if (ref[i] > 1e-4) worst = fmax(worst, fabs((double)m[i] - ref[i]) / ref[i]);
    printf("  quantized scores (%s, d=%d, G=%d): worst relative mass error %.4f\n",
           locks_have_avxvnni() ? "avx-vnni" : locks_have_avx512() ? "avx512-vnni" : locks_have_avx2() ? "avx2" : "portable",
           d, G, worst);
    free(q);
    free(m);
    free(ref);
    free(s);
    locks_cache_free(c);
    locks_simd_enable(1);
}

/* locks_select vs a brute-force sort on crafted masses with ties. */
static void test_topk_forced(void) {
    const int32_t H = 3, d = 64;
    for (int32_t trial = 0; trial < 30; trial++) {
        int32_t len = tu_int(17, 1200), n_full = len / P, seq, np = (len + P - 1) / P;
        locks_cache *c = make_cache_w(H, d, len, LOCKS_SUMMARY_Q, 8, &seq, 0);
        float *mass = malloc(sizeof(float) * H * (n_full + 1));
        for (int32_t i = 0; i < H * n_full; i++) mass[i] = (float)tu_int(0, 20) / 20.0f; /* many ties */
        locks_step_params p = locks_step_default_params();
        p.n_sink = tu_int(0, 3);
        p.n_recent = tu_int(0, 3);
        int32_t forced = 0;
        for (int32_t j = 0; j < n_full; j++) forced += j < p.n_sink || j >= n_full - p.n_recent;
        int32_t forced_tok = forced * P + len % P;
        p.budget = forced_tok + tu_int(0, len);
        if (p.budget <= 0) p.budget = 1;
        int32_t *pages = malloc(sizeof(int32_t) * H * np), n_pages[3];
        CHECK(locks_select(c, seq, mass, &p, pages, n_pages, np));
        for (int32_t h = 0; h < H; h++) {
            uint8_t *want = calloc((size_t)np, 1);
            if (p.budget >= len) {
                for (int32_t j = 0; j < np; j++) want[j] = 1;
            } else {
                for (int32_t j = 0; j < n_full; j++) want[j] = j < p.n_sink || j >= n_full - p.n_recent;
                if (len % P) want[n_full] = 1;
                int32_t k = (p.budget - forced_tok) / P;
                for (int32_t taken = 0; taken < k; taken++) { /* brute force: best remaining, lowest index */
                    int32_t best = -1;
                    for (int32_t j = 0; j < n_full; j++)
                        if (!want[j] && (best < 0 || mass[h * n_full + j] > mass[h * n_full + best])) best = j;
                    if (best < 0) break;
                    want[best] = 1;
                }
            }
            int32_t n_want = 0, ok = 1;
            for (int32_t j = 0; j < np; j++) n_want += want[j];
            ok = n_pages[h] == n_want;
            for (int32_t i = 0; ok && i < n_pages[h]; i++) {
                ok = want[pages[h * np + i]] && (i == 0 || pages[h * np + i] > pages[h * np + i - 1]);
            }
            test_cond(ok, "len %d budget %d sink %d recent %d head %d: selection differs from brute force (%d vs %d)",
                      len, p.budget, p.n_sink, p.n_recent, h, n_pages[h], n_want);
            free(want);
        }
        p.budget = forced_tok - 1;
        if (p.budget > 0 && p.budget < len)
            test_cond(locks_select(c, seq, mass, &p, pages, n_pages, np) == LOCKS_ERR_BUDGET, "budget below forced");
        free(mass);
        free(pages);
        locks_cache_free(c);
    }
}

/* Each query head attends exactly its KV head's selected pages. */
static void test_gqa(void) {
    const int32_t H = 2, G = 4, Hq = H * G, d = 64, len = 600, np = (len + P - 1) / P;
    int32_t seq;
    locks_cache *c = make_cache(H, d, len, LOCKS_SUMMARY_Q, 8, &seq);
    float q[8 * 64], out[8 * 64];
    tu_fill_normal(q, (size_t)Hq * d, 1.5);
    for (int32_t g = 1; g < G; g++) /* heads of a group differ a lot */
        for (int32_t x = 0; x < d; x++) q[g * d + x] = -q[x] + 0.1f * (float)g;
    locks_step_params p = locks_step_default_params();
    p.budget = 96;
    int32_t pages[2 * 64], n_pages[2];
    locks_selection sel = {pages, n_pages, 64};
    CHECK(locks_decode_step(c, 0, &seq, 1, q, Hq, &p, out, &sel, NULL));
    const int32_t *bt = locks_cache_block_table(c, seq, NULL);
    (void)np;
    for (int32_t hq = 0; hq < Hq; hq++) {
        int32_t h = hq / G, nt = 0;
        double K[64 * P * 64], V[64 * P * 64], qd[64], ref[64];
        for (int32_t x = 0; x < d; x++) qd[x] = (double)q[hq * d + x];
        for (int32_t i = 0; i < n_pages[h]; i++) {
            int32_t lp = pages[h * 64 + i];
            const uint16_t *kp = locks_cache_k_page(c, 0, bt[lp]), *vp = locks_cache_v_page(c, 0, bt[lp]);
            for (int32_t t = 0; t < P && lp * P + t < len; t++, nt++)
                for (int32_t x = 0; x < d; x++) {
                    K[nt * d + x] = (double)locks_f16_to_f32(kp[(h * P + t) * d + x]);
                    V[nt * d + x] = (double)locks_f16_to_f32(vp[(h * P + t) * d + x]);
                }
        }
        tu_ref_attention(qd, K, V, nt, d, 1.0 / sqrt(d), ref);
        tu_close("gqa out", out + hq * d, ref, (size_t)d, 2e-5, 1e-4);
    }
    locks_cache_free(c);
}

/* The vpdpbusd kernels form the same integer sums as the AVX2 one (maddubs + madd cannot
 * saturate on these ranges), so the same masses, bit for bit (equal trivially on a CPU
 * with neither VNNI). */
static void test_vnni_same(int32_t d) {
    const int32_t H = 2, G = tu_int(1, 12), Hq = H * G, len = tu_int(300, 700), n_full = len / P;
    int32_t seq;
    locks_cache *c = make_cache(H, d, len, LOCKS_SUMMARY_Q, 8, &seq);
    float *q = malloc(sizeof(float) * Hq * d), *a = malloc(sizeof(float) * H * n_full), *b = malloc(sizeof(float) * H * n_full);
    SETUP(q && a && b);
    tu_fill_normal(q, (size_t)Hq * d, 1.0);
    locks_step_params p = locks_step_default_params();
    locks_simd_enable(1);
    CHECK(locks_score(c, 0, seq, q, Hq, &p, a));
    locks_simd_enable(2);
    CHECK(locks_score(c, 0, seq, q, Hq, &p, b));
    locks_simd_enable(1);
    test_cond(!memcmp(a, b, sizeof(float) * (size_t)H * n_full), "d %d: the vpdpbusd kernel's masses differ from the AVX2 kernel's", d);
    free(q);
    free(a);
    free(b);
    locks_cache_free(c);
}

int main(void) {
    tu_seed("test_select");
    test_rank15_exact();  /* AVX2 fp32-summary kernel where the CPU has it */
    locks_simd_enable(0); /* then the portable loop */
    test_rank15_exact();
    locks_simd_enable(1);
    test_quantized_coverage();
    for (int32_t d = 64; d <= 256; d *= 2) {
        test_quantized_scores(1, d); /* vpdpbusd (AVX-VNNI, else AVX512-VNNI) where the CPU has it */
        test_quantized_scores(2, d); /* AVX2 kernel */
        test_quantized_scores(0, d); /* portable */
        test_vnni_same(d);
    }
    test_topk_forced();
    test_gqa();
    return test_report("test_select");
}
