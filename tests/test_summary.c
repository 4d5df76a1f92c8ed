/*
 * test_summary.c — eigendecomposition, summary build and quantization round trips.
 *  - locks_eig_sym: A U = U diag(w), U orthonormal, w descending (random symmetric n x n).
 *  - summary build: basis rows orthonormal; ||X - C V^T||_F^2 equals the tail energy
 *    sum_{k >= r} lambda_k; rank 15 reproduces the page to float precision.
 *  - quantization: every element within scale / 2 of its value; 802 bytes at d=128 r=8.
 *  - the AVX-512 Jacobi rounds (n = 16, where the CPU has AVX-512) bit for bit the
 *    portable ones: random, Gram-like, diagonal, tiny-entry and wide-range matrices, and
 *    the summary builds of random pages.
 */
#include "test_util.h"

#include "summary.h"
#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE };

static void test_eig(void) {
    for (int32_t trial = 0; trial < 200; trial++) {
        int32_t n = tu_int(1, 16);
        double a[256], w[16], u[256];
        for (int32_t i = 0; i < n; i++)
            for (int32_t j = 0; j <= i; j++) a[i * n + j] = a[j * n + i] = tu_normal();
        if (trial % 3 == 0) /* Gram-like (PSD, rank deficient) */
            for (int32_t i = 0; i < n; i++)
                for (int32_t j = 0; j < n; j++) a[i * n + j] = (double)((i % 3) + 1) * (double)((j % 3) + 1) * 0.5;
        CHECK(locks_eig_sym(n, a, w, u));
        double anorm = 0.0, max_res = 0.0, max_orth = 0.0;
        for (int32_t i = 0; i < n * n; i++) anorm = fmax(anorm, fabs(a[i]));
        for (int32_t k = 0; k < n; k++) {
            for (int32_t i = 0; i < n; i++) { /* (A u_k - w_k u_k)_i */
                double s = 0.0;
                for (int32_t j = 0; j < n; j++) s += a[i * n + j] * u[j * n + k];
                max_res = fmax(max_res, fabs(s - w[k] * u[i * n + k]));
            }
            for (int32_t l = 0; l < n; l++) {
                double s = 0.0;
                for (int32_t i = 0; i < n; i++) s += u[i * n + k] * u[i * n + l];
                max_orth = fmax(max_orth, fabs(s - (k == l ? 1.0 : 0.0)));
            }
            if (k > 0) test_cond(w[k] <= w[k - 1], "eig n=%d: w[%d]=%g > w[%d]=%g", n, k, w[k], k - 1, w[k - 1]);
        }
        test_cond(max_res <= 1e-12 * (anorm + 1.0), "eig n=%d trial %d: residual %.3g", n, trial, max_res);
        test_cond(max_orth <= 1e-12, "eig n=%d trial %d: orthonormality %.3g", n, trial, max_orth);
    }
    double bad[4] = {1.0, NAN, NAN, 1.0}, w[2], u[4];
    test_cond(locks_eig_sym(2, bad, w, u) == LOCKS_ERR_NONFINITE, "eig NaN must fail");
    test_cond(locks_eig_sym(17, bad, w, u) == LOCKS_ERR_INVALID_ARG, "eig n=17 must fail");
}

/* Random page with local low-rank structure plus noise and an offset. */
static void random_page(float *keys, int32_t d, int32_t true_rank) {
    float basis[8 * LOCKS_MAX_HEAD_DIM], off[LOCKS_MAX_HEAD_DIM];
    tu_fill_normal(basis, (size_t)true_rank * d, 1.0);
    tu_fill_normal(off, (size_t)d, 2.0);
    for (int32_t i = 0; i < P; i++)
        for (int32_t c = 0; c < d; c++) {
            double s = (double)off[c] + 0.05 * tu_normal();
            for (int32_t k = 0; k < true_rank; k++) s += tu_normal() * (double)basis[k * d + c] / (k + 1);
            keys[i * d + c] = (float)s;
        }
}

static void test_build(void) {
    const int32_t dims[3] = {64, 128, 256};
    for (int32_t trial = 0; trial < 60; trial++) {
        int32_t d = dims[trial % 3], r = tu_int(1, 15);
        float k[P * 256], mu[256], basis[15 * 256], coef[P * 15];
        random_page(k, d, tu_int(1, 8));
        CHECK(locks_summary_build_f32(d, r, k, mu, basis, coef));
        /* reference Gram eigenvalues in double */
        double m[256], X[P * 256], G[P * P], w[P], u[P * P];
        for (int32_t c = 0; c < d; c++) {
            double s = 0.0;
            for (int32_t i = 0; i < P; i++) s += (double)k[i * d + c];
            m[c] = s / P;
        }
        for (int32_t i = 0; i < P; i++)
            for (int32_t c = 0; c < d; c++) X[i * d + c] = (double)k[i * d + c] - m[c];
        for (int32_t i = 0; i < P; i++)
            for (int32_t j = 0; j < P; j++) {
                double s = 0.0;
                for (int32_t c = 0; c < d; c++) s += X[i * d + c] * X[j * d + c];
                G[i * P + j] = s;
            }
        CHECK(locks_eig_sym(P, G, w, u));
        double tail = 0.0, total = 0.0;
        for (int32_t i = 0; i < P; i++) total += fmax(w[i], 0.0);
        for (int32_t i = r; i < P; i++) tail += fmax(w[i], 0.0);
        double err = 0.0, max_orth = 0.0, max_mu = 0.0;
        for (int32_t i = 0; i < P; i++)
            for (int32_t c = 0; c < d; c++) {
                double s = (double)mu[c];
                for (int32_t kk = 0; kk < r; kk++) s += (double)coef[i * r + kk] * (double)basis[kk * d + c];
                err += ((double)k[i * d + c] - s) * ((double)k[i * d + c] - s);
            }
        for (int32_t c = 0; c < d; c++) max_mu = fmax(max_mu, fabs((double)mu[c] - m[c]));
        for (int32_t a = 0; a < r; a++)
            for (int32_t b = 0; b < r; b++) {
                double s = 0.0, na = 0.0, nb = 0.0;
                for (int32_t c = 0; c < d; c++) {
                    s += (double)basis[a * d + c] * (double)basis[b * d + c];
                    na += (double)basis[a * d + c] * (double)basis[a * d + c];
                    nb += (double)basis[b * d + c] * (double)basis[b * d + c];
                }
                if (na == 0.0 || nb == 0.0) continue; /* null direction */
                max_orth = fmax(max_orth, fabs(s - (a == b ? 1.0 : 0.0)));
            }
        test_cond(max_mu <= 1e-5 * (1.0 + fabs(m[0])), "mu off by %.3g", max_mu);
        test_cond(max_orth <= 1e-5, "d=%d r=%d basis not orthonormal: %.3g", d, r, max_orth);
        /* ||X - C V^T||^2 == tail energy, up to float rounding of the stored summary */
        test_cond(fabs(err - tail) <= 1e-5 * total + 1e-9, "d=%d r=%d: reconstruction %.9g != tail %.9g (total %.3g)",
                  d, r, err, tail, total);
    }
}

static void test_quant(void) {
    const int32_t dims[3] = {64, 128, 256};
    for (int32_t trial = 0; trial < 60; trial++) {
        int32_t d = dims[trial % 3], r = tu_int(1, 15);
        float k[P * 256], mu[256], basis[15 * 256], coef[P * 15];
        float mu2[256], basis2[15 * 256], coef2[P * 15];
        random_page(k, d, tu_int(1, 8));
        CHECK(locks_summary_build_f32(d, r, k, mu, basis, coef));
        int8_t mu_q[256], c_q[P * 15];
        uint8_t v_q[15 * 128];
        uint16_t mu_s, v_s[15], c_s[15];
        locks_qsummary q = {mu_q, &mu_s, v_q, v_s, c_q, c_s};
        locks_summary_quantize(d, r, mu, basis, coef, q);
        locks_summary_dequantize(d, r, q, mu2, basis2, coef2);
        size_t bad = 0;
        double maxr = 0.0;
        float s = locks_f16_to_f32(mu_s);
        float amax = 0.0f;
        for (int32_t c = 0; c < d; c++) amax = fmaxf(amax, fabsf(mu[c]));
        test_cond(s >= amax / 127.0f && s <= amax / 127.0f * 1.001f, "mu scale %g for amax %g", (double)s, (double)amax);
        for (int32_t c = 0; c < d; c++) {
            double e = fabs((double)mu[c] - (double)mu2[c]);
            maxr = fmax(maxr, e / (double)s);
            if (e > 0.5 * (double)s * (1 + 1e-6)) bad++;
        }
        for (int32_t kk = 0; kk < r; kk++) {
            s = locks_f16_to_f32(v_s[kk]);
            for (int32_t c = 0; c < d; c++) {
                double e = fabs((double)basis[kk * d + c] - (double)basis2[kk * d + c]);
                if (e > 0.5 * (double)s * (1 + 1e-6)) bad++;
                int32_t nib = locks_int4_get(v_q + kk * (d / 2), c);
                if (nib < -7 || nib > 7) bad++;
            }
            s = locks_f16_to_f32(c_s[kk]);
            for (int32_t i = 0; i < P; i++) {
                double e = fabs((double)coef[i * r + kk] - (double)coef2[i * r + kk]);
                if (e > 0.5 * (double)s * (1 + 1e-6)) bad++;
                if (c_q[i * r + kk] < -127) bad++;
            }
        }
        test_cond(bad == 0, "d=%d r=%d: %zu quantized values outside scale/2 (mu max err/scale %.3g)", d, r, bad, maxr);
    }
    test_cond(locks_summary_bytes(128, 8, LOCKS_SUMMARY_Q) == 802, "802 bytes at d=128 r=8, got %zu",
              locks_summary_bytes(128, 8, LOCKS_SUMMARY_Q));
    test_cond(locks_summary_bytes(128, 8, LOCKS_SUMMARY_F32) == 4 * (128 + 8 * 128 + 16 * 8), "f32 bytes");
    /* int4 packing: low nibble first, two's complement */
    uint8_t row[2] = {0x9f, 0x71}; /* elements: -1, -7, 1, 7 */
    test_cond(locks_int4_get(row, 0) == -1 && locks_int4_get(row, 1) == -7 && locks_int4_get(row, 2) == 1 &&
                  locks_int4_get(row, 3) == 7,
              "int4 nibble order/sign");
}

/* Every head_dim from 1 to 40 (the Gram loop once assumed a multiple of 4 and got
 * 0.39 relative error at d = 2 with an OK status): 16 centred keys span at most 15
 * directions, so rank min(d, 15) must reconstruct the page exactly, in float64 terms. */
static void test_any_head_dim(void) {
    for (int32_t d = 1; d <= 40; d++) {
        const int32_t r = d < LOCKS_MAX_RANK ? d : LOCKS_MAX_RANK;
        float k[LOCKS_PAGE * 40], mu[40], basis[LOCKS_MAX_RANK * 40], coef[LOCKS_PAGE * LOCKS_MAX_RANK];
        tu_fill_normal(k, (size_t)LOCKS_PAGE * d, 1.0);
        locks_status st = locks_summary_build_f32(d, r, k, mu, basis, coef);
        test_cond(st == LOCKS_OK, "build at d = %d: %s", d, locks_status_str(st));
        if (st != LOCKS_OK) continue;
        double num = 0.0, den = 0.0;
        for (int32_t i = 0; i < LOCKS_PAGE; i++)
            for (int32_t c = 0; c < d; c++) {
                double x = (double)mu[c];
                for (int32_t j = 0; j < r; j++) x += (double)coef[i * r + j] * (double)basis[j * d + c];
                num += (x - (double)k[i * d + c]) * (x - (double)k[i * d + c]);
                den += (double)k[i * d + c] * (double)k[i * d + c];
            }
        double rel = sqrt(num / den);
        test_cond(rel <= 1e-5, "rank %d reconstructs a page at d = %d exactly: relative error %.3g", r, d, rel);
    }
    /* the quantized layout packs basis rows in pairs: it has no size at odd d */
    test_cond(locks_summary_bytes(7, 4, LOCKS_SUMMARY_Q) == 0 && locks_summary_bytes(7, 4, LOCKS_SUMMARY_F32) > 0,
              "summary bytes at odd d: Q 0, F32 > 0");
    float k1[LOCKS_PAGE], mu1, b1, c1[LOCKS_PAGE];
    tu_fill_normal(k1, LOCKS_PAGE, 1.0);
    test_cond(locks_summary_build_f32(0, 1, k1, &mu1, &b1, c1) == LOCKS_ERR_INVALID_ARG, "d = 0 rejected");
    test_cond(locks_summary_build_f32(LOCKS_MAX_HEAD_DIM + 1, 1, k1, &mu1, &b1, c1) == LOCKS_ERR_INVALID_ARG,
              "d > LOCKS_MAX_HEAD_DIM rejected");
}

/* One matrix of each kind for the path comparison: 0 normal, 1 Gram of random low-rank
 * keys (PSD, rank deficient), 2 diagonal (every rotation skipped), 3 normal with some
 * entries 1e-300 and exact zeros (skips mixed with rotations), 4 entries over 1e-150 ..
 * 1e150 (huge theta: t -> 0), 5 all equal (rank 1), 6 the block of indices 0, 1, 14,
 * 15 scaled by 1e-250 (the first round pairs them, (0, 15) and (1, 14): their diagonal
 * products underflow and the absolute skip threshold decides). */
static void kind_matrix(int32_t kind, double *a) {
    enum { N = 16 };
    for (int32_t i = 0; i < N; i++)
        for (int32_t j = 0; j <= i; j++) {
            double x = tu_normal();
            if (kind == 2 && i != j) x = 0.0;
            if (kind == 3 && tu_int(0, 3) == 0) x = i == j ? x : (tu_int(0, 1) ? 1e-300 : 0.0);
            if (kind == 4) x *= pow(10.0, tu_int(-150, 150));
            if (kind == 5) x = 0.75;
            if (kind == 6 && (i < 2 || i > 13) && (j < 2 || j > 13)) x *= 1e-250;
            a[i * N + j] = a[j * N + i] = x;
        }
    if (kind == 1) {
        float keys[P * 64];
        random_page(keys, 64, tu_int(1, 4));
        for (int32_t i = 0; i < N; i++)
            for (int32_t j = 0; j < N; j++) {
                double s = 0.0;
                for (int32_t c = 0; c < 64; c++) s += (double)keys[i * 64 + c] * (double)keys[j * 64 + c];
                a[i * N + j] = s;
            }
    }
}

/* The eigendecomposition and the summary build on AVX-512 == portable, bit for bit. */
static void test_eig_paths(void) {
    if (locks_cpu_set_isa(LOCKS_ISA_AVX512) != 0) {
        printf("  eig paths: no AVX-512 on this CPU, skipped\n");
        return;
    }
    int32_t bad = 0, trials = 0;
    for (int32_t trial = 0; trial < 300; trial++) {
        double a[256], w[2][16], u[2][256];
        kind_matrix(trial % 7, a);
        locks_status st[2];
        for (int32_t path = 0; path < 2; path++) {
            locks_cpu_set_isa(path ? LOCKS_ISA_PORTABLE : LOCKS_ISA_AVX512);
            st[path] = locks_eig_sym(16, a, w[path], u[path]);
        }
        trials++;
        if (st[0] != st[1] || memcmp(w[0], w[1], sizeof w[0]) || memcmp(u[0], u[1], sizeof u[0])) {
            if (bad++ < 4) fprintf(stderr, "  eig paths differ: trial %d kind %d\n", trial, trial % 7);
        }
    }
    test_cond(bad == 0, "locks_eig_sym n=16: AVX-512 == portable bit for bit (%d of %d differ)", bad, trials);
    bad = 0;
    for (int32_t trial = 0; trial < 60; trial++) {
        const int32_t d = trial % 2 ? 64 : 128, r = tu_int(1, 15);
        float k[P * 128], mu[2][128], basis[2][15 * 128], coef[2][P * 15];
        random_page(k, d, tu_int(1, 8));
        for (int32_t path = 0; path < 2; path++) {
            locks_cpu_set_isa(path ? LOCKS_ISA_PORTABLE : LOCKS_ISA_AVX512);
            CHECK(locks_summary_build_f32(d, r, k, mu[path], basis[path], coef[path]));
        }
        if (memcmp(mu[0], mu[1], sizeof(float) * (size_t)d) || memcmp(basis[0], basis[1], sizeof(float) * (size_t)(r * d)) ||
            memcmp(coef[0], coef[1], sizeof(float) * (size_t)(P * r)))
            bad++;
    }
    test_cond(bad == 0, "summary build: AVX-512 == portable bit for bit (%d of 60 pages differ)", bad);
    locks_cpu_set_isa(LOCKS_ISA_BEST);
}

int main(void) {
    tu_seed("test_summary");
    test_eig();
    test_build();
    test_quant();
    test_any_head_dim();
    test_eig_paths();
    return test_report("test_summary");
}
