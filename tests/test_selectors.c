/*
 * test_selectors.c — the reference selectors (quest, rocket, shadow, shadow-lm).
 *
 *  1. Each rule on a small hand-checked case (numbers worked out in the comments).
 *  2. Each score function against a float64 reference on fresh random pages.
 *  3. The shared-basis fit against a float64 Jacobi eigendecomposition (captured energy,
 *     orthonormality).
 *  4. Through the cache (locks_score): every selector's group masses against a float64
 *     reference computed from the cache's fp16 keys (softmax per head, group mean or max).
 *  5. Every selector (full, oracle, locks and the four above) honours the same forced
 *     pages and budget accounting, and reports bytes_meta = its per-page metadata bytes
 *     x full pages x KV heads.
 */
#include "test_util.h"

#include "selectors/refsel.h"
#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE };

/* ---- float64 helpers ----------------------------------------------------------------- */

static float h16(float x) { return locks_f16_to_f32(locks_f32_to_f16(x)); }

/* ---- 1. hand-checked cases ----------------------------------------------------------- */

static void test_hand_checked(void) {
    /* One page of d = 4 whose 16 keys span min m = (-1, 0, 2, -3), max M = (1, 2, 5, -1):
     * key 0 = M, key 1 = m, the rest = the midpoint. */
    const int d = 4;
    float k[P * 4];
    const float m[4] = {-1, 0, 2, -3}, M[4] = {1, 2, 5, -1};
    for (int i = 0; i < P; i++)
        for (int c = 0; c < d; c++) k[i * d + c] = i == 0 ? M[c] : i == 1 ? m[c] : 0.5f * (m[c] + M[c]);
    uint16_t kmin[4], kmax[4];
    locks_minmax_build(d, k, kmin, kmax);
    int mm_ok = 1;
    for (int c = 0; c < d; c++) mm_ok &= locks_f16_to_f32(kmin[c]) == m[c] && locks_f16_to_f32(kmax[c]) == M[c];
    test_cond(mm_ok, "min/max metadata of the hand case");

    /* Quest, q = (2, -1, 0.5, -2): max(2*1, 2*-1) + max(-1*2, -1*0) + max(0.5*5, 0.5*2)
     * + max(-2*-1, -2*-3) = 2 + 0 + 2.5 + 6 = 10.5; times scale 0.5 -> 5.25. */
    const float q1[4] = {2, -1, 0.5f, -2};
    int32_t page0 = 0;
    float s = 0.0f;
    locks_quest_score(d, 1, 1, &page0, kmin, kmax, q1, 0.5f, &s, 1);
    test_cond(fabsf(s - 5.25f) < 1e-6f, "quest hand case: got %.7g want 5.25", (double)s);

    /* RocketKV, G = 2, n_ch = 2: q0 = (1, -3, 0.5, 0), q1 = (-1, 2, 0, 0.25).
     * Channel weights |q0|+|q1| = (2, 5, 0.5, 0.25) -> I = {0, 1}.
     * Head 0: a = 1*M0 + (-3)*m1 = 1 - 0 = 1; ||q_I||/||q|| = 4 / 4.5; s = 1 / sqrt(8/9)
     *         = 1.0606601717798212 (scale 1).
     * Head 1: a = (-1)*m0 + 2*M1 = 1 + 4 = 5; ||q_I||/||q|| = 3 / 3.25;
     *         s = 5 / sqrt(12/13) = 5.2041649986653532. */
    const float q2[8] = {1, -3, 0.5f, 0, -1, 2, 0, 0.25f};
    float s2[2];
    int32_t chan[2];
    locks_rocket_score(d, 2, 1, &page0, kmin, kmax, q2, 1.0f, 2, s2, 1, chan);
    test_cond(chan[0] == 0 && chan[1] == 1, "rocket hand case channels: got %d %d want 0 1",
              (int)chan[0], (int)chan[1]);
    test_cond(fabs((double)s2[0] - 1.0606601717798212) < 1e-6 && fabs((double)s2[1] - 5.2041649986653532) < 1e-6,
              "rocket hand case: got %.8g %.8g want 1.0606602 5.2041650", (double)s2[0], (double)s2[1]);

    /* Shadow score with basis rows e0, e2 (r = 2), page mean (1, 7, -2, 9) -> proj (1, -2);
     * q = (3, 100, 0.5, -100) -> basis q = (3, 0.5): s = 3*1 + 0.5*(-2) = 2. The channels
     * outside the basis (1 and 3) do not matter, however large. */
    const float basis[8] = {1, 0, 0, 0, 0, 0, 1, 0};
    const float mean[4] = {1, 7, -2, 9};
    float proj[2];
    locks_shadow_project(d, 2, basis, mean, proj);
    const float q3[4] = {3, 100, 0.5f, -100};
    locks_shadow_score(d, 2, 1, 1, &page0, proj, basis, q3, 1.0f, &s, 1);
    test_cond(fabsf(s - 2.0f) < 1e-6f, "shadow hand case: got %.7g want 2", (double)s);

    /* Landmark: the page mean of the hand page is (m + M)/2 = (0, 1, 3.5, -2) (keys 0 and 1
     * average to it too); q1 . L = 0 - 1 + 1.75 + 4 = 4.75. */
    float lmean[4];
    locks_page_mean(d, k, lmean);
    uint16_t lm[4];
    for (int c = 0; c < d; c++) lm[c] = locks_f32_to_f16(lmean[c]);
    locks_landmark_score(d, 1, 1, &page0, lm, q1, 1.0f, &s, 1);
    test_cond(fabsf(s - 4.75f) < 1e-6f, "landmark hand case: got %.7g want 4.75", (double)s);
}

/* ---- 2. score functions vs float64 on random pages ------------------------------------ */

static void test_scores_random(void) {
    const int d = 8 * tu_int(2, 16), G = tu_int(1, 4), n_phys = tu_int(3, 40), r = tu_int(1, 12);
    const int n = tu_int(1, n_phys);
    float *k = malloc(sizeof(float) * (size_t)n_phys * P * (size_t)d);
    uint16_t *kmin = malloc(2 * (size_t)n_phys * (size_t)d), *kmax = malloc(2 * (size_t)n_phys * (size_t)d);
    uint16_t *lm = malloc(2 * (size_t)n_phys * (size_t)d);
    float *proj = malloc(sizeof(float) * (size_t)n_phys * (size_t)r);
    float *basis = malloc(sizeof(float) * (size_t)r * (size_t)d);
    float *q = malloc(sizeof(float) * (size_t)G * (size_t)d);
    float *s = malloc(sizeof(float) * (size_t)G * (size_t)(n + 3));
    double *ref = malloc(sizeof(double) * (size_t)G * (size_t)n);
    float *got = malloc(sizeof(float) * (size_t)G * (size_t)n);
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)n);
    SETUP(k && kmin && kmax && lm && proj && basis && q && s && ref && got && pages);
    for (size_t i = 0; i < (size_t)n_phys * P * (size_t)d; i++) k[i] = h16((float)(2.0 * tu_normal()));
    for (int p = 0; p < n_phys; p++) {
        float mean[LOCKS_MAX_HEAD_DIM];
        locks_minmax_build(d, k + (size_t)p * P * d, kmin + (size_t)p * d, kmax + (size_t)p * d);
        locks_page_mean(d, k + (size_t)p * P * d, mean);
        for (int c = 0; c < d; c++) lm[(size_t)p * d + c] = locks_f32_to_f16(mean[c]);
    }
    for (int j = 0; j < n; j++) pages[j] = tu_int(0, n_phys - 1); /* any physical order */
    tu_fill_normal(q, (size_t)G * d, 1.0);
    tu_fill_normal(basis, (size_t)r * d, 0.3);
    tu_fill_normal(proj, (size_t)n_phys * r, 1.0);
    const float scale = 1.0f / sqrtf((float)d);
    const int ld = n + 3;

    /* quest: scale * sum_c max(q M, q m) with min/max taken from the raw keys in double */
    for (int g = 0; g < G; g++)
        for (int j = 0; j < n; j++) {
            const float *kp = k + (size_t)pages[j] * P * d;
            double acc = 0.0;
            for (int c = 0; c < d; c++) {
                double lo = kp[c], hi = kp[c];
                for (int i = 1; i < P; i++) {
                    lo = fmin(lo, (double)kp[i * d + c]);
                    hi = fmax(hi, (double)kp[i * d + c]);
                }
                acc += fmax((double)q[g * d + c] * hi, (double)q[g * d + c] * lo);
            }
            ref[g * n + j] = (double)scale * acc;
        }
    locks_quest_score(d, G, n, pages, kmin, kmax, q, scale, s, ld);
    for (int g = 0; g < G; g++)
        for (int j = 0; j < n; j++) got[g * n + j] = s[g * ld + j];
    tu_close("quest scores", got, ref, (size_t)G * n, 1e-4, 1e-5);

    /* quest's bound really bounds every logit */
    int bound_ok = 1;
    for (int g = 0; g < G; g++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < P; i++) {
                double lg = 0.0;
                for (int c = 0; c < d; c++) lg += (double)q[g * d + c] * (double)k[((size_t)pages[j] * P + i) * d + c];
                bound_ok &= (double)scale * lg <= ref[g * n + j] + 1e-9;
            }
    test_cond(bound_ok, "quest score bounds every logit of its page");

    /* rocket: channels by group |q| in double, approximate logit, temperature */
    const int n_ch = tu_int(1, d);
    double wch[LOCKS_MAX_HEAD_DIM];
    int take[LOCKS_MAX_HEAD_DIM] = {0};
    for (int c = 0; c < d; c++) {
        wch[c] = 0.0;
        for (int g = 0; g < G; g++) wch[c] += fabs((double)q[g * d + c]);
    }
    for (int t = 0; t < n_ch; t++) {
        int best = -1;
        for (int c = 0; c < d; c++)
            if (!take[c] && (best < 0 || wch[c] > wch[best])) best = c;
        take[best] = 1;
    }
    for (int g = 0; g < G; g++) {
        double all = 0.0, part = 0.0;
        for (int c = 0; c < d; c++) {
            all += fabs((double)q[g * d + c]);
            if (take[c]) part += fabs((double)q[g * d + c]);
        }
        for (int j = 0; j < n; j++) {
            const float *kp = k + (size_t)pages[j] * P * d;
            double acc = 0.0;
            for (int c = 0; c < d; c++) {
                if (!take[c]) continue;
                double lo = kp[c], hi = kp[c];
                for (int i = 1; i < P; i++) {
                    lo = fmin(lo, (double)kp[i * d + c]);
                    hi = fmax(hi, (double)kp[i * d + c]);
                }
                acc += q[g * d + c] > 0 ? (double)q[g * d + c] * hi : (double)q[g * d + c] * lo;
            }
            ref[g * n + j] = (double)scale * acc / sqrt(part / all);
        }
    }
    int32_t chan[LOCKS_MAX_HEAD_DIM];
    locks_rocket_score(d, G, n, pages, kmin, kmax, q, scale, n_ch, s, ld, chan);
    int chan_ok = 1;
    for (int t = 0; t < n_ch; t++) chan_ok &= take[chan[t]] && (t == 0 || chan[t] > chan[t - 1]);
    test_cond(chan_ok, "rocket channel set (n_ch %d of d %d)", n_ch, d);
    for (int g = 0; g < G; g++)
        for (int j = 0; j < n; j++) got[g * n + j] = s[g * ld + j];
    tu_close("rocket scores", got, ref, (size_t)G * n, 1e-4, 1e-5);

    /* shadow: scale * (B q) . proj */
    for (int g = 0; g < G; g++)
        for (int j = 0; j < n; j++) {
            double acc = 0.0;
            for (int t = 0; t < r; t++) {
                double bq = 0.0;
                for (int c = 0; c < d; c++) bq += (double)basis[t * d + c] * (double)q[g * d + c];
                acc += bq * (double)proj[(size_t)pages[j] * r + t];
            }
            ref[g * n + j] = (double)scale * acc;
        }
    locks_shadow_score(d, r, G, n, pages, proj, basis, q, scale, s, ld);
    for (int g = 0; g < G; g++)
        for (int j = 0; j < n; j++) got[g * n + j] = s[g * ld + j];
    tu_close("shadow scores", got, ref, (size_t)G * n, 1e-4, 1e-5);

    /* landmark: scale * q . fp16(mean) with the mean in double */
    for (int g = 0; g < G; g++)
        for (int j = 0; j < n; j++) {
            const float *kp = k + (size_t)pages[j] * P * d;
            double acc = 0.0;
            for (int c = 0; c < d; c++) {
                double mu = 0.0;
                for (int i = 0; i < P; i++) mu += (double)kp[i * d + c];
                acc += (double)q[g * d + c] * (double)h16((float)(mu / P));
            }
            ref[g * n + j] = (double)scale * acc;
        }
    locks_landmark_score(d, G, n, pages, lm, q, scale, s, ld);
    for (int g = 0; g < G; g++)
        for (int j = 0; j < n; j++) got[g * n + j] = s[g * ld + j];
    tu_close("landmark scores", got, ref, (size_t)G * n, 1e-3, 1e-4);

    free(k), free(kmin), free(kmax), free(lm), free(proj), free(basis), free(q), free(s), free(ref),
        free(got), free(pages);
}

/* ---- 3. shared-basis fit ----------------------------------------------------------------- */

static void test_shadow_fit(void) {
    const int d = 8 * tu_int(4, 8), r = tu_int(1, 12), N = tu_int(200, 400);
    /* keys with a decaying spectrum (std 6 / (1 + 0.4 i) along random directions) */
    double *K = malloc(sizeof(double) * (size_t)N * d), *gram = calloc((size_t)d * d, sizeof(double));
    double *dir = malloc(sizeof(double) * (size_t)d * d), *w = malloc(sizeof(double) * d),
           *u = malloc(sizeof(double) * (size_t)d * d);
    float *basis = malloc(sizeof(float) * (size_t)r * d);
    SETUP(K && gram && dir && w && u && basis);
    for (int i = 0; i < d * d; i++) dir[i] = tu_normal();
    for (int t = 0; t < N; t++)
        for (int c = 0; c < d; c++) K[(size_t)t * d + c] = 0.0;
    for (int t = 0; t < N; t++)
        for (int i = 0; i < d; i++) {
            double z = 6.0 / (1.0 + 0.4 * i) * tu_normal();
            for (int c = 0; c < d; c++) K[(size_t)t * d + c] += z * dir[i * d + c] / sqrt((double)d);
        }
    for (int t = 0; t < N; t++)
        for (int a = 0; a < d; a++)
            for (int b = 0; b < d; b++) gram[a * d + b] += K[(size_t)t * d + a] * K[(size_t)t * d + b];
    double ev[LOCKS_MAX_RANK];
    CHECK(locks_shadow_fit(d, r, gram, basis, ev));
    tu_ref_eig(d, gram, w, u);
    double top = 0.0, got = 0.0, orth = 0.0;
    for (int i = 0; i < r; i++) top += w[i];
    for (int i = 0; i < r; i++) {
        for (int j = 0; j < r; j++) {
            double dot = 0.0;
            for (int c = 0; c < d; c++) dot += (double)basis[i * d + c] * (double)basis[j * d + c];
            orth = fmax(orth, fabs(dot - (i == j)));
        }
        double e = 0.0; /* b^T gram b */
        for (int a = 0; a < d; a++) {
            double ga = 0.0;
            for (int b = 0; b < d; b++) ga += gram[a * d + b] * (double)basis[i * d + b];
            e += (double)basis[i * d + a] * ga;
        }
        got += e;
    }
    test_cond(orth < 1e-5, "shadow basis orthonormal (max |B B^T - I| %.3g)", orth);
    test_cond(got >= top * (1.0 - 1e-4), "shadow basis captures the top-%d energy: %.9g of %.9g (d %d)", r,
              got, top, d);
    test_cond(fabs(ev[0] - w[0]) <= 1e-6 * w[0], "shadow leading eigenvalue %.9g vs ref %.9g", ev[0], w[0]);
    free(K), free(gram), free(dir), free(w), free(u), free(basis);
}

/* ---- 4-5. through the cache ------------------------------------------------------------- */

static const locks_selector all_sel[] = {LOCKS_SEL_FULL,  LOCKS_SEL_ORACLE, LOCKS_SEL_LOCKS,
                                         LOCKS_SEL_QUEST, LOCKS_SEL_ROCKET, LOCKS_SEL_SHADOW,
                                         LOCKS_SEL_SHADOW_LM};
enum { N_SEL = sizeof all_sel / sizeof all_sel[0] };

typedef struct {
    locks_cache *c;
    int32_t seq, L, H, G, d, r, len;
} fixture;

/* Keys = a strong rank-r' component (so the shared basis is well defined) + a per-page
 * topic + noise; values N(0,1). Two sequences: the one tested and a decoy written
 * first, so physical and logical page ids differ. */
static fixture make_fixture(void) {
    fixture f;
    f.L = tu_int(1, 2);
    f.H = tu_int(1, 3);
    f.G = tu_int(1, 4);
    f.d = tu_int(0, 3) ? 64 : 128; /* 128 a quarter of the time: the float64 references are O(d^3) */
    f.r = tu_int(2, 10);
    f.len = tu_int(20, 40) * P + tu_int(0, P - 1);
    locks_cache_params cp = locks_cache_default_params();
    cp.selectors = LOCKS_SEL_ALL; /* every selector is compared: keep all their metadata */
    cp.n_layers = f.L;
    cp.n_kv_heads = f.H;
    cp.head_dim = f.d;
    cp.rank = f.r;
    cp.n_pages = f.len / P + 8;
    cp.max_seqs = 2;
    cp.n_threads = tu_int(1, 2);
    cp.summary_prec = tu_int(0, 1) ? LOCKS_SUMMARY_Q : LOCKS_SUMMARY_F32;
    locks_status st;
    f.c = locks_cache_init(cp, &st);
    SETUP(f.c);
    int32_t decoy;
    CHECK(locks_cache_seq_add(f.c, &decoy));
    CHECK(locks_cache_append(f.c, decoy, 3 * P));
    CHECK(locks_cache_seq_add(f.c, &f.seq));
    CHECK(locks_cache_append(f.c, f.seq, f.len));
    const int d = f.d, H = f.H;
    float *k = malloc(sizeof(float) * (size_t)f.len * H * d), *v = malloc(sizeof(float) * (size_t)f.len * H * d);
    float *dir = malloc(sizeof(float) * (size_t)H * 12 * d), *topic = malloc(sizeof(float) * (size_t)H * d);
    SETUP(k && v && dir && topic);
    for (int l = 0; l < f.L; l++) {
        tu_fill_normal(dir, (size_t)H * 12 * d, 1.0);
        for (int t = 0; t < f.len; t++) {
            if (t % P == 0) tu_fill_normal(topic, (size_t)H * d, 0.8);
            for (int h = 0; h < H; h++) {
                float *kt = k + ((size_t)t * H + h) * d;
                for (int c = 0; c < d; c++) kt[c] = topic[h * d + c] + (float)(0.3 * tu_normal());
                for (int i = 0; i < 12; i++) {
                    float z = (float)(3.0 / (1.0 + 0.15 * i) * tu_normal());
                    for (int c = 0; c < d; c++) kt[c] += z * dir[((size_t)h * 12 + i) * d + c];
                }
            }
        }
        tu_fill_normal(v, (size_t)f.len * H * d, 1.0);
        CHECK(locks_cache_write(f.c, f.seq, l, 0, f.len, k, v));
        float *kd = malloc(sizeof(float) * 3 * P * H * d);
        SETUP(kd);
        tu_fill_normal(kd, (size_t)3 * P * H * d, 1.0);
        CHECK(locks_cache_write(f.c, decoy, l, 0, 3 * P, kd, kd));
        free(kd);
    }
    free(k), free(v), free(dir), free(topic);
    return f;
}

/* The fp16 key of (layer, head, token t) of the fixture's sequence, as double. */
static void key_at(const fixture *f, int l, int h, int t, const int32_t *table, double *out) {
    const uint16_t *kp = locks_cache_k_page(f->c, l, table[t / P]) + ((size_t)h * P + t % P) * f->d;
    for (int c = 0; c < f->d; c++) out[c] = (double)locks_f16_to_f32(kp[c]);
}

/* Reference group masses of one selector for (layer, KV head h): mass[n_full]. */
static void ref_mass(const fixture *f, locks_selector sel, int l, int h, const float *q, double scale,
                     double *mass) {
    int32_t n_pages;
    const int32_t *table = locks_cache_block_table(f->c, f->seq, &n_pages);
    const int d = f->d, G = f->G, n_full = f->len / P, r = f->r;
    double *s = malloc(sizeof(double) * (size_t)G * n_full), *key = malloc(sizeof(double) * P * d);
    double *B = NULL;
    SETUP(s && key);
    if (sel == LOCKS_SEL_SHADOW) { /* basis: top-r eigenvectors of K^T K over every token */
        double *gram = calloc((size_t)d * d, sizeof(double)), *w = malloc(sizeof(double) * d),
               *u = malloc(sizeof(double) * (size_t)d * d);
        B = malloc(sizeof(double) * (size_t)r * d);
        SETUP(gram && w && u && B);
        for (int t = 0; t < f->len; t++) {
            key_at(f, l, h, t, table, key);
            for (int a = 0; a < d; a++)
                for (int b = 0; b < d; b++) gram[a * d + b] += key[a] * key[b];
        }
        tu_ref_eig(d, gram, w, u);
        for (int i = 0; i < r; i++)
            for (int c = 0; c < d; c++) B[i * d + c] = u[c * d + i];
        free(gram), free(w), free(u);
    }
    for (int j = 0; j < n_full; j++) {
        for (int i = 0; i < P; i++) key_at(f, l, h, j * P + i, table, key + i * d);
        for (int g = 0; g < G; g++) {
            const float *qg = q + ((size_t)h * G + g) * d;
            double acc = 0.0;
            if (sel == LOCKS_SEL_QUEST || sel == LOCKS_SEL_ROCKET) {
                int take[LOCKS_MAX_HEAD_DIM];
                double all = 0.0, part = 0.0;
                if (sel == LOCKS_SEL_ROCKET) { /* n_ch = r channels by group |q| */
                    double wch[LOCKS_MAX_HEAD_DIM];
                    for (int c = 0; c < d; c++) {
                        take[c] = 0;
                        wch[c] = 0.0;
                        for (int g2 = 0; g2 < G; g2++) wch[c] += fabs((double)q[((size_t)h * G + g2) * d + c]);
                    }
                    for (int t = 0; t < r; t++) {
                        int best = -1;
                        for (int c = 0; c < d; c++)
                            if (!take[c] && (best < 0 || wch[c] > wch[best])) best = c;
                        take[best] = 1;
                    }
                } else {
                    for (int c = 0; c < d; c++) take[c] = 1;
                }
                for (int c = 0; c < d; c++) {
                    all += fabs((double)qg[c]);
                    if (!take[c]) continue;
                    part += fabs((double)qg[c]);
                    double lo = key[c], hi = key[c];
                    for (int i = 1; i < P; i++) {
                        lo = fmin(lo, key[i * d + c]);
                        hi = fmax(hi, key[i * d + c]);
                    }
                    acc += fmax((double)qg[c] * hi, (double)qg[c] * lo);
                }
                s[g * n_full + j] = scale * acc / (sel == LOCKS_SEL_ROCKET ? sqrt(part / all) : 1.0);
            } else if (sel == LOCKS_SEL_SHADOW || sel == LOCKS_SEL_SHADOW_LM) {
                double mu[LOCKS_MAX_HEAD_DIM];
                for (int c = 0; c < d; c++) {
                    mu[c] = 0.0;
                    for (int i = 0; i < P; i++) mu[c] += key[i * d + c];
                    mu[c] /= P;
                }
                if (sel == LOCKS_SEL_SHADOW_LM) {
                    for (int c = 0; c < d; c++) acc += (double)qg[c] * (double)h16((float)mu[c]);
                } else {
                    for (int i = 0; i < r; i++) {
                        double bq = 0.0, bm = 0.0;
                        for (int c = 0; c < d; c++) {
                            bq += B[i * d + c] * (double)qg[c];
                            bm += B[i * d + c] * mu[c];
                        }
                        acc += bq * bm;
                    }
                }
                s[g * n_full + j] = scale * acc;
            } else { /* oracle: exact page log-sum-exp */
                double mx = -INFINITY, lg[P];
                for (int i = 0; i < P; i++) {
                    lg[i] = 0.0;
                    for (int c = 0; c < d; c++) lg[i] += (double)qg[c] * key[i * d + c];
                    lg[i] *= scale;
                    mx = fmax(mx, lg[i]);
                }
                double z = 0.0;
                for (int i = 0; i < P; i++) z += exp(lg[i] - mx);
                s[g * n_full + j] = mx + log(z);
            }
        }
    }
    const int use_max = sel == LOCKS_SEL_SHADOW_LM;
    for (int j = 0; j < n_full; j++) mass[j] = 0.0;
    for (int g = 0; g < G; g++) {
        double mx = -INFINITY, z = 0.0;
        for (int j = 0; j < n_full; j++) mx = fmax(mx, s[g * n_full + j]);
        for (int j = 0; j < n_full; j++) z += exp(s[g * n_full + j] - mx);
        for (int j = 0; j < n_full; j++) {
            double m = exp(s[g * n_full + j] - mx) / z;
            mass[j] = use_max ? fmax(mass[j], m) : mass[j] + m / G;
        }
    }
    free(s), free(key), free(B);
}

static void test_cache_masses(const fixture *f) {
    const int Hq = f->H * f->G, n_full = f->len / P;
    float *q = malloc(sizeof(float) * (size_t)Hq * f->d), *mass = malloc(sizeof(float) * (size_t)f->H * n_full);
    double *ref = malloc(sizeof(double) * (size_t)f->H * n_full);
    SETUP(q && mass && ref);
    CHECK(locks_cache_shadow_fit(f->c, f->seq));
    const locks_selector sels[] = {LOCKS_SEL_ORACLE, LOCKS_SEL_QUEST, LOCKS_SEL_ROCKET, LOCKS_SEL_SHADOW,
                                   LOCKS_SEL_SHADOW_LM};
    for (int l = 0; l < f->L; l++) {
        tu_fill_normal(q, (size_t)Hq * f->d, 1.5);
        for (size_t i = 0; i < sizeof sels / sizeof sels[0]; i++) {
            /* shadow's float64 reference (a d x d Jacobi per head) is the slow part: layer 0 only */
            if (sels[i] == LOCKS_SEL_SHADOW && l > 0) continue;
            locks_step_params p = locks_step_default_params();
            p.selector = sels[i];
            CHECK(locks_score(f->c, l, f->seq, q, Hq, &p, mass));
            for (int h = 0; h < f->H; h++) ref_mass(f, sels[i], l, h, q, 1.0 / sqrt((double)f->d), ref + (size_t)h * n_full);
            char what[96];
            snprintf(what, sizeof what, "%s masses (layer %d, d %d, G %d, r %d)", locks_selector_name(sels[i]), l,
                     f->d, f->G, f->r);
            /* shadow's basis comes from an iterative fit: a looser tolerance */
            double rtol = sels[i] == LOCKS_SEL_SHADOW ? 2e-3 : 2e-4;
            tu_close(what, mass, ref, (size_t)f->H * n_full, 1e-6, rtol);
        }
    }
    free(q), free(mass), free(ref);
}

static void test_forced_and_budget(const fixture *f) {
    const int Hq = f->H * f->G, n_full = f->len / P, partial = f->len % P;
    int32_t n_pages_seq;
    locks_cache_block_table(f->c, f->seq, &n_pages_seq);
    const int maxp = n_pages_seq;
    float *q = malloc(sizeof(float) * (size_t)Hq * f->d), *out = malloc(sizeof(float) * (size_t)Hq * f->d);
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)f->H * maxp), *np = malloc(sizeof(int32_t) * f->H);
    float *mass = malloc(sizeof(float) * (size_t)f->H * (n_full + 1));
    SETUP(q && out && pages && np && mass);
    tu_fill_normal(q, (size_t)Hq * f->d, 1.5);
    locks_step_params p = locks_step_default_params();
    p.n_sink = tu_int(0, 2);
    p.n_recent = tu_int(0, 2);
    const int forced_tok = (p.n_sink + p.n_recent) * P + partial;
    p.budget = forced_tok + tu_int(1, n_full / 2) * P + tu_int(0, P - 1);
    int count0 = -1;
    const int layer = tu_int(0, f->L - 1);
    for (int si = 0; si < N_SEL; si++) {
        p.selector = all_sel[si];
        const char *name = locks_selector_name(p.selector);
        CHECK(locks_score(f->c, layer, f->seq, q, Hq, &p, mass));
        CHECK(locks_select(f->c, f->seq, mass, &p, pages, np, maxp));
        for (int h = 0; h < f->H; h++) {
            const int32_t *pg = pages + (size_t)h * maxp;
            int tokens = 0, asc = 1, has[4096] = {0};
            for (int i = 0; i < np[h]; i++) {
                tokens += pg[i] == n_full ? partial : P;
                if (i) asc &= pg[i] > pg[i - 1];
                if (pg[i] >= 0 && pg[i] < 4096) has[pg[i]] = 1;
            }
            int forced_ok = partial ? has[n_full] : 1;
            for (int j = 0; j < p.n_sink; j++) forced_ok &= has[j];
            for (int j = n_full - p.n_recent; j < n_full; j++) forced_ok &= has[j];
            if (p.selector == LOCKS_SEL_FULL) {
                test_cond(np[h] == n_pages_seq && asc, "full selects every page (%d of %d)", (int)np[h],
                          (int)n_pages_seq);
                continue;
            }
            test_cond(forced_ok, "%s: forced pages present (sink %d recent %d partial %d)", name, (int)p.n_sink,
                      (int)p.n_recent, partial);
            test_cond(asc && tokens <= p.budget && tokens > p.budget - P,
                      "%s: %d tokens for budget %d (ascending %d)", name, tokens, (int)p.budget, asc);
            if (count0 < 0) count0 = np[h];
            test_cond(np[h] == count0, "%s: %d pages, other selectors %d", name, (int)np[h], count0);
        }
        /* the step reports bytes_meta = per-page metadata x full pages x KV heads */
        locks_step_stats stats;
        CHECK(locks_decode_step(f->c, layer, &f->seq, 1, q, Hq, &p, out, NULL, &stats));
        size_t per = 0;
        switch (p.selector) {
        case LOCKS_SEL_QUEST: per = 4 * (size_t)f->d; break;
        case LOCKS_SEL_ROCKET: per = 4 * (size_t)f->r; break;
        case LOCKS_SEL_SHADOW: per = 4 * (size_t)f->r; break;
        case LOCKS_SEL_SHADOW_LM: per = 2 * (size_t)f->d; break;
        case LOCKS_SEL_ORACLE: per = 2 * P * (size_t)f->d; break;
        case LOCKS_SEL_LOCKS: per = locks_cache_summary_bytes(f->c); break;
        default: per = 0;
        }
        test_cond(stats.bytes_meta == (uint64_t)per * (uint64_t)n_full * (uint64_t)f->H,
                  "%s: bytes_meta %llu want %zu x %d x %d", name, (unsigned long long)stats.bytes_meta, per, n_full,
                  (int)f->H);
    }
    /* budget below the forced pages fails the same way for every selector */
    p.budget = forced_tok > 0 ? forced_tok - 1 : 0;
    for (int si = 1; si < N_SEL; si++) {
        p.selector = all_sel[si];
        locks_status st = locks_select(f->c, f->seq, mass, &p, pages, np, maxp);
        test_cond(st == LOCKS_ERR_BUDGET, "%s: budget %d below forced %d -> %s", locks_selector_name(p.selector),
                  (int)p.budget, forced_tok, locks_status_str(st));
    }
    free(q), free(out), free(pages), free(np), free(mass);
}

/* SnapKV (rocket's optional prefill eviction) against a float64 reference of the votes:
 * the evicted pages get rocket mass 0, the kept ones keep a positive mass, and keep(0)
 * restores rocket's masses exactly. */
static void test_snapkv(const fixture *f) {
    const int Hq = f->H * f->G, n_full = f->len / P, d = f->d, G = f->G;
    const int layer = tu_int(0, f->L - 1), n_obs = tu_int(1, f->len / 4 < 32 ? f->len / 4 : 32);
    const int w0 = f->len - n_obs;
    float *q_obs = malloc(sizeof(float) * (size_t)n_obs * Hq * d), *q = malloc(sizeof(float) * (size_t)Hq * d);
    float *before = malloc(sizeof(float) * (size_t)f->H * n_full), *mass = malloc(sizeof(float) * (size_t)f->H * n_full);
    double *vote = malloc(sizeof(double) * (size_t)f->len), *pv = malloc(sizeof(double) * (size_t)n_full);
    double *K = malloc(sizeof(double) * (size_t)f->len * d);
    SETUP(q_obs && q && before && mass && vote && pv && K);
    tu_fill_normal(q_obs, (size_t)n_obs * Hq * d, 1.5);
    tu_fill_normal(q, (size_t)Hq * d, 1.5);
    locks_step_params p = locks_step_default_params();
    p.selector = LOCKS_SEL_ROCKET;
    CHECK(locks_score(f->c, layer, f->seq, q, Hq, &p, before));
    CHECK(locks_cache_snapkv_observe(f->c, f->seq, layer, q_obs, n_obs, Hq, 0.0f));
    int32_t n_pages;
    const int32_t *table = locks_cache_block_table(f->c, f->seq, &n_pages);
    const double scale = 1.0 / sqrt((double)d);
    int n_inf = 0;
    for (int j = 0; j < n_full; j++) n_inf += (j + 1) * P > w0;
    const int keep_pages = n_inf + tu_int(1, n_full - n_inf > 1 ? n_full - n_inf - 1 : 1);
    CHECK(locks_cache_snapkv_keep(f->c, f->seq, layer, keep_pages * P + tu_int(0, P - 1)));
    CHECK(locks_score(f->c, layer, f->seq, q, Hq, &p, mass));
    int bad = 0, n_evicted = 0;
    for (int h = 0; h < f->H; h++) {
        for (int t = 0; t < f->len; t++) key_at(f, layer, h, t, table, K + (size_t)t * d);
        for (int t = 0; t < f->len; t++) vote[t] = 0.0;
        for (int i = 0; i < n_obs; i++)
            for (int g = 0; g < G; g++) {
                const float *qv = q_obs + ((size_t)i * Hq + (size_t)h * G + g) * d;
                double mx = -INFINITY, z = 0.0, lg[4096];
                SETUP(f->len <= 4096);
                for (int t = 0; t <= w0 + i; t++) {
                    lg[t] = 0.0;
                    for (int e = 0; e < d; e++) lg[t] += (double)qv[e] * K[(size_t)t * d + e];
                    lg[t] *= scale;
                    mx = fmax(mx, lg[t]);
                }
                for (int t = 0; t <= w0 + i; t++) z += exp(lg[t] - mx);
                for (int t = 0; t < w0; t++) vote[t] += exp(lg[t] - mx) / z;
            }
        for (int j = 0; j < n_full; j++) {
            if ((j + 1) * P > w0) {
                pv[j] = INFINITY;
                continue;
            }
            pv[j] = 0.0;
            for (int t = j * P; t < (j + 1) * P; t++) {
                double best = 0.0; /* max-pool over 7 tokens, clipped to the prefix */
                for (int u = t - 3; u <= t + 3; u++)
                    if (u >= 0 && u < w0) best = fmax(best, vote[u]);
                pv[j] += best;
            }
        }
        for (int j = 0; j < n_full; j++) {
            int rank = 0; /* pages ahead of j: more votes, or equal votes and lower index */
            for (int i = 0; i < n_full; i++) rank += pv[i] > pv[j] || (pv[i] == pv[j] && i < j);
            int evicted = rank >= keep_pages;
            n_evicted += evicted;
            float m = mass[(size_t)h * n_full + j];
            if (evicted ? m != 0.0f : !(m > 0.0f)) {
                if (bad < 4)
                    fprintf(stderr, "  head %d page %d: vote %.6g rank %d (keep %d) mass %.3g\n", h, j, pv[j], rank,
                            keep_pages, (double)m);
                bad++;
            }
        }
    }
    test_cond(bad == 0 && n_evicted == f->H * (n_full - keep_pages),
              "snapkv: %d pages disagree with the float64 votes; %d evicted, want %d (window %d, keep %d of %d pages)",
              bad, n_evicted, f->H * (n_full - keep_pages), n_obs, keep_pages, n_full);
    CHECK(locks_cache_snapkv_keep(f->c, f->seq, layer, 0));
    CHECK(locks_score(f->c, layer, f->seq, q, Hq, &p, mass));
    test_cond(memcmp(mass, before, sizeof(float) * (size_t)f->H * n_full) == 0, "snapkv keep(0) restores rocket");
    /* quest does not see rocket's eviction */
    CHECK(locks_cache_snapkv_keep(f->c, f->seq, layer, P));
    p.selector = LOCKS_SEL_QUEST;
    CHECK(locks_score(f->c, layer, f->seq, q, Hq, &p, mass));
    int zeros = 0;
    for (int i = 0; i < f->H * n_full; i++) zeros += mass[i] == 0.0f;
    test_cond(zeros == 0, "quest unaffected by rocket's eviction (%d zero masses)", zeros);
    CHECK(locks_cache_snapkv_keep(f->c, f->seq, layer, 0));
    free(q_obs), free(q), free(before), free(mass), free(vote), free(pv), free(K);
}

int main(void) {
    tu_seed("test_selectors");
    test_hand_checked();
    for (int i = 0; i < 4; i++) test_scores_random();
    for (int i = 0; i < 2; i++) test_shadow_fit();
    for (int i = 0; i < 2; i++) {
        fixture f = make_fixture();
        test_cache_masses(&f);
        test_forced_and_budget(&f);
        test_snapkv(&f);
        locks_cache_free(f.c);
    }
    return test_report("test_selectors");
}
