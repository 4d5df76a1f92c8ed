/*
 * test_prop1.c — the paper's Proposition 1 on a constructed cache: a fixed rank-r
 * projection shared by all pages is blind to within-page differences outside its span;
 * a per-page basis is not.
 *
 * Construction (fresh random each run), one layer, one KV head, G query heads:
 *  - A: a random r-dimensional subspace of R^d; E = its orthogonal complement.
 *  - Every page has the same strong component inside A: key i of every page is
 *    A z_i with the same z_i (std 4), centred over the page (sum_i z_i = 0), so all
 *    page centroids have no component in A and the prefill keys' top-r singular
 *    subspace is A (the A energy dwarfs the rest and A-E cross terms vanish).
 *  - Each page j adds a constant offset in E: beta * u_j, u_j a random unit direction of
 *    E, so pages differ only outside A (and within a page keys vary only inside A).
 *    The carrier page j* (not forced) uses u_j* = w instead, with a larger beta.
 *  - Queries: q_h = 3 sqrt(d) w + (a random component inside A), so the carrier's
 *    logits are 3 higher than the other pages' on average.
 * Then the shared-basis selector (`shadow`, basis fitted from the prefill keys) sees
 * projected centroids B mu_j ~= 0 for every page: equal scores, no way to find j*.
 * LOCKS with fp32 summaries reads mu_j* (full dimension): it ranks j* first and
 * selects it at a budget of one free page. The oracle does too (sanity).
 */
#include "test_util.h"

#include "util.h"

enum { P = LOCKS_PAGE };

/* Orthonormalises the n rows of x (n x d) in place (modified Gram-Schmidt, double). */
static void orthonormal_rows(double *x, int n, int d) {
    for (int i = 0; i < n; i++) {
        for (int pass = 0; pass < 2; pass++)
            for (int j = 0; j < i; j++) {
                double dot = 0.0;
                for (int c = 0; c < d; c++) dot += x[i * d + c] * x[j * d + c];
                for (int c = 0; c < d; c++) x[i * d + c] -= dot * x[j * d + c];
            }
        double nn = 0.0;
        for (int c = 0; c < d; c++) nn += x[i * d + c] * x[i * d + c];
        nn = sqrt(nn);
        for (int c = 0; c < d; c++) x[i * d + c] /= nn;
    }
}

/* A unit vector of E = complement of the first r rows of basis (rows r.. span E). */
static void random_in_E(const double *basis, int r, int d, double *out) {
    for (int c = 0; c < d; c++) out[c] = 0.0;
    for (int i = r; i < d; i++) {
        double z = tu_normal();
        for (int c = 0; c < d; c++) out[c] += z * basis[i * d + c];
    }
    double nn = 0.0;
    for (int c = 0; c < d; c++) nn += out[c] * out[c];
    nn = sqrt(nn);
    for (int c = 0; c < d; c++) out[c] /= nn;
}

static void run_case(int d, int r, int G, int n_full) {
    const int len = n_full * P + tu_int(1, P - 1); /* a partial page too */
    const int carrier = tu_int(n_full / 2, n_full - 3);
    double *Q = malloc(sizeof(double) * (size_t)d * d); /* rows 0..r-1: A; r..d-1: E */
    double *z = malloc(sizeof(double) * P * r), *u = malloc(sizeof(double) * d), *w = malloc(sizeof(double) * d);
    float *k = malloc(sizeof(float) * (size_t)len * d), *v = malloc(sizeof(float) * (size_t)len * d);
    float *q = malloc(sizeof(float) * (size_t)G * d);
    SETUP(Q && z && u && w && k && v && q);
    for (int i = 0; i < d * d; i++) Q[i] = tu_normal();
    orthonormal_rows(Q, d, d);
    /* z_i: same for every page, centred over the page */
    for (int i = 0; i < P * r; i++) z[i] = 4.0 * tu_normal();
    for (int a = 0; a < r; a++) {
        double m = 0.0;
        for (int i = 0; i < P; i++) m += z[i * r + a];
        for (int i = 0; i < P; i++) z[i * r + a] -= m / P;
    }
    random_in_E(Q, r, d, w);
    const double beta = 0.5, beta_carrier = 1.0;
    for (int j = 0; j * P < len; j++) {
        if (j == carrier) memcpy(u, w, sizeof(double) * d);
        else random_in_E(Q, r, d, u);
        const double b = j == carrier ? beta_carrier : beta;
        for (int i = 0; i < P && j * P + i < len; i++) {
            for (int c = 0; c < d; c++) {
                double x = b * u[c];
                for (int a = 0; a < r; a++) x += z[i * r + a] * Q[a * d + c];
                k[(size_t)(j * P + i) * d + c] = (float)x;
            }
        }
    }
    tu_fill_normal(v, (size_t)len * d, 1.0);
    for (int g = 0; g < G; g++)
        for (int c = 0; c < d; c++) {
            double x = 3.0 * sqrt((double)d) * w[c];
            for (int a = 0; a < r; a++) x += 0.5 * tu_normal() * Q[a * d + c];
            q[g * d + c] = (float)x;
        }

    locks_cache_params cp = locks_cache_default_params();
    cp.selectors = LOCKS_SEL_ALL; /* every selector is compared: keep all their metadata */
    cp.n_layers = 1;
    cp.n_kv_heads = 1;
    cp.head_dim = d;
    cp.rank = r;
    cp.n_pages = n_full + 2;
    cp.max_seqs = 1;
    cp.summary_prec = LOCKS_SUMMARY_F32;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    SETUP(c);
    int32_t seq;
    CHECK(locks_cache_seq_add(c, &seq));
    CHECK(locks_cache_append(c, seq, len));
    CHECK(locks_cache_write(c, seq, 0, 0, len, k, v));
    CHECK(locks_cache_shadow_fit(c, seq));

    float *mass = malloc(sizeof(float) * (size_t)n_full);
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)(n_full + 1)), np;
    SETUP(mass && pages);
    locks_step_params p = locks_step_default_params();
    p.n_sink = 1;
    p.n_recent = 1;
    p.budget = 3 * P + len % P; /* sink + recent + partial + one free page */

    /* shadow: every page gets the same mass (the scores differ by rounding only) */
    p.selector = LOCKS_SEL_SHADOW;
    CHECK(locks_score(c, 0, seq, q, G, &p, mass));
    double lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < n_full; j++) {
        lo = fmin(lo, (double)mass[j]);
        hi = fmax(hi, (double)mass[j]);
    }
    test_cond((hi - lo) <= 1e-3 * hi, "shadow cannot tell pages apart: mass in [%.6g, %.6g] (uniform %.6g)", lo,
              hi, 1.0 / n_full);
    /* Which of the tied pages shadow then picks is decided by rounding noise (about
     * 1e-7 of the mass), so "shadow misses the carrier" would only hold by chance
     * (1 in n_free). What holds always: the carrier gets no edge over the others. */
    test_cond((double)mass[carrier] <= lo + 1e-3 * hi,
              "shadow gives the carrier page %d no edge: mass %.6g, lowest %.6g", carrier,
              (double)mass[carrier], lo);

    /* locks (fp32 summaries) and the oracle rank the carrier first */
    const locks_selector winners[] = {LOCKS_SEL_LOCKS, LOCKS_SEL_ORACLE};
    for (int s = 0; s < 2; s++) {
        p.selector = winners[s];
        CHECK(locks_score(c, 0, seq, q, G, &p, mass));
        int best = 0;
        for (int j = 1; j < n_full; j++)
            if (mass[j] > mass[best]) best = j;
        CHECK(locks_select(c, seq, mass, &p, pages, &np, n_full + 1));
        int has = 0;
        for (int i = 0; i < np; i++) has |= pages[i] == carrier;
        test_cond(best == carrier && has, "%s ranks the carrier first (best %d, carrier %d, mass %.4g) and selects it",
                  locks_selector_name(winners[s]), best, carrier, (double)mass[carrier]);
    }

    /* the carrier really holds the attention: its true share, from the float64 keys */
    double tot = 0.0, car = 0.0;
    for (int g = 0; g < G; g++) {
        double mx = -INFINITY, *lg = malloc(sizeof(double) * (size_t)len);
        SETUP(lg);
        for (int t = 0; t < len; t++) {
            double x = 0.0;
            for (int e = 0; e < d; e++) x += (double)q[g * d + e] * (double)locks_f16_to_f32(locks_f32_to_f16(k[(size_t)t * d + e]));
            lg[t] = x / sqrt((double)d);
            mx = fmax(mx, lg[t]);
        }
        double zsum = 0.0, zc = 0.0;
        for (int t = 0; t < len; t++) {
            double e = exp(lg[t] - mx);
            zsum += e;
            if (t / P == carrier) zc += e;
        }
        tot += 1.0;
        car += zc / zsum;
        free(lg);
    }
    test_cond(car / tot > 3.0 / n_full, "carrier holds %.3f of the attention (uniform %.3f)", car / tot,
              1.0 / n_full);
    printf("  d %d r %d G %d pages %d carrier %d: true carrier share %.3f, shadow mass spread %.2g\n", d, r, G,
           n_full, carrier, car / tot, hi - lo);
    locks_cache_free(c);
    free(Q), free(z), free(u), free(w), free(k), free(v), free(q), free(mass), free(pages);
}

int main(void) {
    tu_seed("test_prop1");
    run_case(64, 8, 3, 48);
    run_case(128, tu_int(4, 12), tu_int(1, 4), tu_int(24, 64));
    return test_report("test_prop1");
}
