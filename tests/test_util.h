/*
 * test_util.h — the tests' tiny toolkit: a seeded RNG (fresh seed per run from the
 * clock, printed; LOCKS_TEST_SEED=<n> replays one), float64 comparison helpers that
 * print the first bad values and the max difference, and test_report() for the exit
 * code. Header-only on purpose: every test is a single .c file (CMake builds one
 * executable per tests/test_*.c), so these are static functions.
 */
#ifndef LOCKS_TEST_UTIL_H
#define LOCKS_TEST_UTIL_H

#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locks.h"

static int tu_failures;
static int tu_checks;
static uint64_t tu_state;

/* Stops the test at once if a library call fails (setup steps, not the checks). */
#define CHECK(call)                                                                            \
    do {                                                                                       \
        locks_status st_ = (call);                                                             \
        if (st_ != LOCKS_OK) {                                                                 \
            fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call,                    \
                    locks_status_str(st_));                                                    \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* Stops the test at once if a setup step that is not a library call fails (an
 * allocation, a file). */
#define SETUP(x)                                                                               \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "%s:%d: setup failed: %s\n", __FILE__, __LINE__, #x);              \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* Records one check; prints the message if it failed. */
#define test_cond(cond, ...)                                                                   \
    do {                                                                                       \
        tu_checks++;                                                                           \
        if (!(cond)) {                                                                         \
            tu_failures++;                                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
        }                                                                                      \
    } while (0)

static inline uint64_t tu_next(void) { /* splitmix64 */
    uint64_t z = (tu_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Seeds from LOCKS_TEST_SEED or the clock; prints the seed. */
static inline uint64_t tu_seed(const char *name) {
    const char *env = getenv("LOCKS_TEST_SEED");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)ts.tv_sec * 1000003u + (uint64_t)ts.tv_nsec;
    tu_state = seed;
    printf("%s: seed %llu (LOCKS_TEST_SEED=%llu to replay)\n", name, (unsigned long long)seed,
           (unsigned long long)seed);
    return seed;
}

/* Uniform in [0, 1). */
static inline double tu_uniform(void) { return (double)(tu_next() >> 11) * (1.0 / 9007199254740992.0); }
/* Integer in [lo, hi]. */
static inline int32_t tu_int(int32_t lo, int32_t hi) {
    return lo + (int32_t)(tu_next() % (uint64_t)(hi - lo + 1));
}
/* Standard normal (Box-Muller). */
static inline double tu_normal(void) {
    double u = tu_uniform(), v = tu_uniform();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}
/* x[i] = sigma * N(0, 1) (never all zeros). */
static inline void tu_fill_normal(float *x, size_t n, double sigma) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(sigma * tu_normal());
}

/* Compares got[n] with ref[n]: |got - ref| <= atol + rtol * |ref| elementwise. Prints
 * the first bad values and the max difference on failure. Returns the max abs diff. */
static inline double tu_close(const char *what, const float *got, const double *ref, size_t n, double atol,
                       double rtol) {
    double maxd = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)got[i] - ref[i]);
        if (!(diff <= atol + rtol * fabs(ref[i]))) {
            if (bad < 4)
                fprintf(stderr, "  %s[%zu]: got %.9g want %.9g (diff %.3g)\n", what, i, (double)got[i],
                        ref[i], diff);
            bad++;
        }
        if (diff > maxd || diff != diff) maxd = diff;
    }
    test_cond(bad == 0, "%s: %zu of %zu values off (max diff %.3g, atol %.3g rtol %.3g)", what, bad,
              n, maxd, atol, rtol);
    return maxd;
}

/* Prints the summary; the process exit code. */
static inline int test_report(const char *name) {
    if (tu_failures) {
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, tu_failures, tu_checks);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, tu_checks);
    return 0;
}

/* Float64 reference of exact softmax attention of one query q[d] over n keys and values
 * K[n][d], V[n][d]: out[d]; returns the log-sum-exp of the scaled logits. */
static inline double tu_ref_attention(const double *q, const double *K, const double *V, int32_t n,
                               int32_t d, double scale, double *out) {
    double m = -INFINITY;
    double *lg = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int32_t t = 0; t < n; t++) {
        double s = 0.0;
        for (int32_t c = 0; c < d; c++) s += q[c] * K[(size_t)t * d + c];
        lg[t] = scale * s;
        if (lg[t] > m) m = lg[t];
    }
    double l = 0.0;
    for (int32_t c = 0; c < d; c++) out[c] = 0.0;
    for (int32_t t = 0; t < n; t++) {
        double w = exp(lg[t] - m);
        l += w;
        for (int32_t c = 0; c < d; c++) out[c] += w * V[(size_t)t * d + c];
    }
    for (int32_t c = 0; c < d; c++) out[c] /= l;
    free(lg);
    return m + log(l);
}

/* Float64 reference eigendecomposition of a symmetric n x n matrix a_in (any n, left
 * unchanged) by cyclic Jacobi: eigenvalues w[n] descending and, if u is not NULL, the
 * eigenvectors as the columns of u (n x n). Independent of the library's locks_eig_sym
 * on purpose: it is what that one is checked against. Stops when the off-diagonal
 * energy is <= 1e-22 of the total (or after 100 sweeps). */
static inline void tu_ref_eig(int n, const double *a_in, double *w, double *u) {
    double *a = malloc(sizeof(double) * (size_t)n * (size_t)n);
    SETUP(a);
    memcpy(a, a_in, sizeof(double) * (size_t)n * (size_t)n);
    if (u)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) u[i * n + j] = i == j;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0.0, tot = 0.0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                tot += a[i * n + j] * a[i * n + j];
                if (i != j) off += a[i * n + j] * a[i * n + j];
            }
        if (off <= 1e-22 * tot) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (fabs(apq) < 1e-300) continue;
                double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    double akp = a[k * n + p], akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    double apk = a[p * n + k], aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for (int k = 0; u && k < n; k++) {
                    double ukp = u[k * n + p], ukq = u[k * n + q];
                    u[k * n + p] = c * ukp - s * ukq;
                    u[k * n + q] = s * ukp + c * ukq;
                }
            }
    }
    for (int i = 0; i < n; i++) w[i] = a[i * n + i];
    for (int i = 0; i < n; i++) { /* selection sort, descending, columns follow */
        int best = i;
        for (int j = i + 1; j < n; j++)
            if (w[j] > w[best]) best = j;
        if (best != i) {
            double t = w[i];
            w[i] = w[best];
            w[best] = t;
            for (int k = 0; u && k < n; k++) {
                t = u[k * n + i];
                u[k * n + i] = u[k * n + best];
                u[k * n + best] = t;
            }
        }
    }
    free(a);
}

#endif
