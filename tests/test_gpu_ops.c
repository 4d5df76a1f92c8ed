/*
 * test_gpu_ops.c — every CUDA op against the CPU op (the reference), on many shapes
 * and fresh random inputs, by normalised error ||gpu - ref|| / ||ref|| against a
 * per-op tolerance; GPU outputs are poisoned (NaN bytes) before each op so an
 * unwritten element fails. Needs a GPU (ctest label "gpu").
 *
 *   summaries  mu and the rank-r reconstruction C V^T (sign-free: the two backends'
 *              Jacobi may pick opposite eigenvector signs) vs the CPU's; tol 2e-2 / 5e-2
 *              (fp32 summaries: 1e-5 / 1e-2); ranks 1, 3, 4, 8, 12, 15, both precisions
 *   score      group masses vs a float64 evaluation of the GPU's own summaries (tol
 *              5e-3: fp16 queries in the MMA) and vs the CPU's masses (tol 5e-2: the two
 *              summary builds differ by rare int4/int8 rounding flips)
 *   select     the GPU's top-k on the CPU's masses == the CPU's selection, exactly
 *              (exact ties planted; several budgets; budget errors)
 *   attend     on the CPU's selection, vs the CPU's attention: out and lse (fp16 KV,
 *              tol 4e-3); bf16 KV vs a float64 reference on the stored bf16 values
 *   step       full LOCKS step (batch 2) == CPU rule applied to the GPU's own masses,
 *              out vs CPU attention over that selection; dense step vs CPU dense step
 *   graph      captured step replays == step, also after the sequences grew
 *   errors     NaN query -> LOCKS_ERR_NONFINITE with out untouched; budget errors
 *
 * `test_gpu_ops --perf` also times the ops on a 128K-token Llama-shaped layer (µs, GB/s).
 */
#include "test_util.h"

#include "cache.h"
#include "cuda/locks_cuda.h"
#include "util.h"

enum { P = LOCKS_PAGE };

typedef struct {
    int32_t hkv, G, d;
    locks_dtype dtype;
    int32_t len[2]; /* two sequences */
    int32_t rank;   /* 0: 8 */
    int f32;        /* fp32 summaries (LOCKS_SUMMARY_F32) instead of the quantized ones */
} shape;

/* ---- helpers -------------------------------------------------------------------------- */

static void *dmalloc(size_t bytes) {
    void *p = locks_cuda_malloc(bytes);
    if (!p) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}
static void *dupload(const void *h, size_t bytes) {
    void *d = dmalloc(bytes);
    CHECK(locks_cuda_memcpy_h2d(d, h, bytes));
    return d;
}
static void dpoison(void *d, size_t bytes) {
    uint8_t *tmp = malloc(bytes);
    memset(tmp, 0xff, bytes); /* NaN floats, -1 ints */
    CHECK(locks_cuda_memcpy_h2d(d, tmp, bytes));
    free(tmp);
}
static void ddown(void *h, const void *d, size_t bytes) { CHECK(locks_cuda_memcpy_d2h(h, d, bytes)); }
static void dfree(void *p) { locks_cuda_free_ptr(&p); }

/* ||a - b|| / ||b|| in double (NaN if a has NaN: fails every "<= tol"). */
static double nerr_f(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-30);
}
static double nerr_d(const float *a, const double *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

static void first_diffs(const char *what, const float *a, const float *b, size_t n) {
    int shown = 0;
    double maxd = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > maxd || d != d) maxd = d;
        if ((d > 1e-3 * (fabs((double)b[i]) + 1e-3) || d != d) && shown < 4) {
            fprintf(stderr, "  %s[%zu]: gpu %.7g cpu %.7g\n", what, i, (double)a[i], (double)b[i]);
            shown++;
        }
    }
    fprintf(stderr, "  %s: max |diff| %.4g\n", what, maxd);
}

#define CHECK_ERR(what, err, tol, a, b, n)                                                     \
    do {                                                                                       \
        double e_ = (err);                                                                     \
        test_cond(e_ <= (tol), "%s: normalised error %.3g > tol %.3g", what, e_, (double)(tol)); \
        if (!(e_ <= (tol))) first_diffs(what, a, b, n);                                        \
        else printf("  %-34s err %.2e (tol %.0e)\n", what, e_, (double)(tol));                 \
    } while (0)

/* Keys with page-local structure: each page a centroid plus a rank-3 pattern plus
 * noise; a few "needle" pages aligned with direction u get large logits. */
static void make_kv(float *k, float *v, int32_t len, int32_t hkv, int32_t d, const float *u) {
    float basis[3 * LOCKS_MAX_HEAD_DIM], cen[LOCKS_MAX_HEAD_DIM];
    for (int32_t pg = 0; pg * P < len; pg++) {
        for (int32_t h = 0; h < hkv; h++) {
            tu_fill_normal(basis, (size_t)3 * d, 1.0);
            tu_fill_normal(cen, (size_t)d, 0.7);
            const int needle = tu_uniform() < 0.05;
            for (int32_t i = 0; i < P && pg * P + i < len; i++) {
                const double a = tu_normal() * 1.5, b = tu_normal(), c = tu_normal() * 0.7;
                float *kr = k + ((size_t)(pg * P + i) * hkv + h) * d;
                for (int32_t x = 0; x < d; x++)
                    kr[x] = (float)((double)cen[x] + a * (double)basis[x] + b * (double)basis[d + x] + c * (double)basis[2 * d + x] +
                                    0.1 * tu_normal() + (needle ? 2.5 * (double)u[x] : 0.0));
            }
        }
    }
    tu_fill_normal(v, (size_t)len * hkv * d, 1.0);
}

typedef struct {
    shape sh;
    int32_t hq;
    locks_cache *cpu, *gpu;
    int32_t seq[2];
    float *q;   /* [2][hq][d] host */
    float *d_q; /* device copy */
} fixture;

static void fixture_init(fixture *f, shape sh) {
    memset(f, 0, sizeof *f);
    f->sh = sh;
    f->hq = sh.hkv * sh.G;
    locks_cache_params p = locks_cache_default_params();
    p.n_kv_heads = sh.hkv;
    p.head_dim = sh.d;
    p.n_pages = (sh.len[0] + sh.len[1]) / P + 8;
    p.max_seqs = 2;
    p.rank = sh.rank > 0 ? sh.rank : 8;
    p.summary_prec = sh.f32 ? LOCKS_SUMMARY_F32 : LOCKS_SUMMARY_Q;
    p.n_threads = 2;
    locks_status err;
    f->cpu = locks_cache_init(p, &err);
    CHECK(err);
    p.backend = LOCKS_BACKEND_CUDA;
    p.kv_dtype = sh.dtype;
    f->gpu = locks_cache_init(p, &err);
    CHECK(err);
    const int32_t d = sh.d;
    float u[LOCKS_MAX_HEAD_DIM];
    tu_fill_normal(u, (size_t)d, 1.0);
    f->q = malloc(sizeof(float) * 2 * (size_t)f->hq * d);
    for (int s = 0; s < 2; s++) {
        int32_t a, b;
        CHECK(locks_cache_seq_add(f->cpu, &a));
        CHECK(locks_cache_seq_add(f->gpu, &b));
        test_cond(a == b, "same seq ids");
        f->seq[s] = a;
        const int32_t len = sh.len[s];
        CHECK(locks_cache_append(f->cpu, a, len));
        CHECK(locks_cache_append(f->gpu, b, len));
        float *k = malloc(sizeof(float) * (size_t)len * sh.hkv * d);
        float *v = malloc(sizeof(float) * (size_t)len * sh.hkv * d);
        make_kv(k, v, len, sh.hkv, d, u);
        CHECK(locks_cache_write(f->cpu, a, 0, 0, len, k, v));
        float *dk = dupload(k, sizeof(float) * (size_t)len * sh.hkv * d);
        float *dv = dupload(v, sizeof(float) * (size_t)len * sh.hkv * d);
        /* two writes (an odd split) exercise partial-page fills and summary rebuilds */
        const int32_t cut = len / 3 + 5 < len ? len / 3 + 5 : len;
        CHECK(locks_cache_write(f->gpu, b, 0, 0, cut, dk, dv));
        if (cut < len)
            CHECK(locks_cache_write(f->gpu, b, 0, cut, len - cut, dk + (size_t)cut * sh.hkv * d,
                                    dv + (size_t)cut * sh.hkv * d));
        dfree(dk);
        dfree(dv);
        free(k);
        free(v);
        float *qs = f->q + (size_t)s * f->hq * d;
        for (int32_t i = 0; i < f->hq * d; i++) qs[i] = (float)(0.8 * tu_normal() + 0.6 * (double)u[i % d]);
    }
    f->d_q = dupload(f->q, sizeof(float) * 2 * (size_t)f->hq * d);
}

static void fixture_free(fixture *f) {
    locks_cache_free(f->cpu);
    locks_cache_free(f->gpu);
    free(f->q);
    dfree(f->d_q);
}

/* ---- summaries ------------------------------------------------------------------------- */

static void test_summaries(fixture *f) {
    const int32_t d = f->sh.d, r = locks_cache_get_params(f->gpu).rank, H = f->sh.hkv;
    float mu_c[LOCKS_MAX_HEAD_DIM], mu_g[LOCKS_MAX_HEAD_DIM];
    float *b_c = malloc(sizeof(float) * r * d), *b_g = malloc(sizeof(float) * r * d);
    float c_c[P * LOCKS_MAX_RANK], c_g[P * LOCKS_MAX_RANK];
    size_t n_pages = 0;
    for (int s = 0; s < 2; s++) n_pages += (size_t)(f->sh.len[s] / P);
    float *all_mu_c = malloc(sizeof(float) * n_pages * H * d), *all_mu_g = malloc(sizeof(float) * n_pages * H * d);
    float *rec_c = malloc(sizeof(float) * n_pages * H * P * d), *rec_g = malloc(sizeof(float) * n_pages * H * P * d);
    size_t at = 0;
    for (int s = 0; s < 2; s++) {
        int32_t np;
        const int32_t *bt = locks_cache_block_table(f->cpu, f->seq[s], &np);
        for (int32_t lp = 0; lp < f->sh.len[s] / P; lp++)
            for (int32_t h = 0; h < H; h++, at++) {
                CHECK(locks_cache_summary_get(f->cpu, 0, h, bt[lp], mu_c, b_c, c_c));
                CHECK(locks_cache_summary_get(f->gpu, 0, h, bt[lp], mu_g, b_g, c_g));
                memcpy(all_mu_c + at * d, mu_c, sizeof(float) * d);
                memcpy(all_mu_g + at * d, mu_g, sizeof(float) * d);
                for (int32_t i = 0; i < P; i++)
                    for (int32_t x = 0; x < d; x++) {
                        double a = 0, b = 0;
                        for (int32_t k = 0; k < r; k++) {
                            a += (double)c_c[i * r + k] * (double)b_c[k * d + x];
                            b += (double)c_g[i * r + k] * (double)b_g[k * d + x];
                        }
                        rec_c[(at * P + i) * d + x] = (float)a;
                        rec_g[(at * P + i) * d + x] = (float)b;
                    }
            }
    }
    /* bf16 keys differ from the CPU's fp16 keys by ~4e-3 relative: looser bounds there;
     * fp32 summaries of fp16 keys differ only by the two eigensolvers' fp32 rounding */
    const int bf = f->sh.dtype == LOCKS_DTYPE_BF16;
    const double tol_mu = f->sh.f32 ? (bf ? 1e-2 : 1e-5) : (bf ? 3e-2 : 2e-2);
    const double tol_rec = f->sh.f32 ? (bf ? 3e-2 : 1e-2) : (bf ? 8e-2 : 5e-2);
    CHECK_ERR("summary mu", nerr_f(all_mu_g, all_mu_c, at * d), tol_mu, all_mu_g, all_mu_c, at * d);
    CHECK_ERR("summary C V^T", nerr_f(rec_g, rec_c, at * P * d), tol_rec, rec_g, rec_c, at * P * d);
    free(b_c);
    free(b_g);
    free(all_mu_c);
    free(all_mu_g);
    free(rec_c);
    free(rec_g);
}

/* ---- score ----------------------------------------------------------------------------- */

/* float64 group masses of one sequence from a cache's (dequantized) summaries. */
static void ref_mass(locks_cache *c, int32_t seq, const float *q, int32_t hq, double *mass) {
    const locks_cache_params p = locks_cache_get_params(c);
    const int32_t d = p.head_dim, r = p.rank, H = p.n_kv_heads, G = hq / H;
    int32_t np;
    const int32_t *bt = locks_cache_block_table(c, seq, &np);
    const int32_t n_full = locks_cache_seq_len(c, seq) / P;
    const double scale = 1.0 / sqrt((double)d);
    float mu[LOCKS_MAX_HEAD_DIM], coef[P * LOCKS_MAX_RANK];
    float *basis = malloc(sizeof(float) * r * d);
    double *s = malloc(sizeof(double) * (size_t)G * n_full);
    for (int32_t h = 0; h < H; h++) {
        for (int32_t j = 0; j < n_full; j++) {
            CHECK(locks_cache_summary_get(c, 0, h, bt[j], mu, basis, coef));
            for (int32_t g = 0; g < G; g++) {
                const float *qh = q + (size_t)(h * G + g) * d;
                double qm = 0, b[LOCKS_MAX_RANK];
                for (int32_t x = 0; x < d; x++) qm += (double)qh[x] * (double)mu[x];
                for (int32_t k = 0; k < r; k++) {
                    b[k] = 0;
                    for (int32_t x = 0; x < d; x++) b[k] += (double)qh[x] * (double)basis[k * d + x];
                }
                double z[P], m = -INFINITY;
                for (int32_t i = 0; i < P; i++) {
                    z[i] = qm;
                    for (int32_t k = 0; k < r; k++) z[i] += b[k] * (double)coef[i * r + k];
                    z[i] *= scale;
                    if (z[i] > m) m = z[i];
                }
                double sum = 0;
                for (int32_t i = 0; i < P; i++) sum += exp(z[i] - m);
                s[(size_t)g * n_full + j] = m + log(sum);
            }
        }
        for (int32_t j = 0; j < n_full; j++) mass[(size_t)h * n_full + j] = 0;
        for (int32_t g = 0; g < G; g++) {
            double m = -INFINITY, z = 0;
            for (int32_t j = 0; j < n_full; j++) m = fmax(m, s[(size_t)g * n_full + j]);
            for (int32_t j = 0; j < n_full; j++) z += exp(s[(size_t)g * n_full + j] - m);
            for (int32_t j = 0; j < n_full; j++) mass[(size_t)h * n_full + j] += exp(s[(size_t)g * n_full + j] - m - log(z)) / G;
        }
    }
    free(basis);
    free(s);
}

static void test_score(fixture *f) {
    const int32_t H = f->sh.hkv, d = f->sh.d;
    locks_step_params p = locks_step_default_params();
    for (int s = 0; s < 2; s++) {
        const int32_t n_full = f->sh.len[s] / P;
        const size_t n = (size_t)H * n_full;
        float *m_c = malloc(sizeof(float) * n), *m_g = malloc(sizeof(float) * n);
        double *m_r = malloc(sizeof(double) * n);
        float *d_m = dmalloc(sizeof(float) * n);
        dpoison(d_m, sizeof(float) * n);
        const float *q = f->q + (size_t)s * f->hq * d;
        CHECK(locks_score(f->cpu, 0, f->seq[s], q, f->hq, &p, m_c));
        CHECK(locks_score(f->gpu, 0, f->seq[s], f->d_q + (size_t)s * f->hq * d, f->hq, &p, d_m));
        ddown(m_g, d_m, sizeof(float) * n);
        ref_mass(f->gpu, f->seq[s], q, f->hq, m_r);
        float *m_rf = malloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) m_rf[i] = (float)m_r[i];
        CHECK_ERR("score mass vs own summaries f64", nerr_d(m_g, m_r, n), 5e-3, m_g, m_rf, n);
        CHECK_ERR("score mass vs CPU", nerr_f(m_g, m_c, n), f->sh.dtype == LOCKS_DTYPE_BF16 ? 1e-1 : 5e-2, m_g, m_c, n);
        free(m_c);
        free(m_g);
        free(m_r);
        free(m_rf);
        dfree(d_m);
    }
}

/* ---- select ----------------------------------------------------------------------------- */

/* Mass-target selections that cut below the budget's, over every shape: checked once in
 * main, since one random shape may have masses spread so that no target cuts. */
static int g_mass_cuts;

static void test_select(fixture *f) {
    const int32_t H = f->sh.hkv;
    locks_step_params p = locks_step_default_params();
    const int32_t budgets[] = {64, 100, 256, 2048, 1 << 30};
    const float targets[] = {0.f, 0.3f, 0.8f, 0.97f}; /* mass targets (0: off) */
    int n_cut = 0; /* mass-target selections that cut below the budget's */
    for (int s = 0; s < 2; s++) {
        const int32_t len = f->sh.len[s], n_full = len / P, mp = (len + P - 1) / P;
        const size_t n = (size_t)H * n_full;
        float *m = malloc(sizeof(float) * n);
        CHECK(locks_score(f->cpu, 0, f->seq[s], f->q + (size_t)s * f->hq * f->sh.d, f->hq, &p, m));
        /* plant exact ties: copy some masses onto others */
        for (int32_t i = 0; i + 7 < (int32_t)n; i += 7) m[i + 3] = m[i];
        if (n > 10) m[n - 2] = m[n / 2];
        float *d_m = dupload(m, sizeof(float) * n);
        int32_t *pc = malloc(sizeof(int32_t) * H * mp), *nc = malloc(sizeof(int32_t) * H);
        int32_t *pg = malloc(sizeof(int32_t) * H * mp), *ng = malloc(sizeof(int32_t) * H);
        int32_t *d_p = dmalloc(sizeof(int32_t) * H * mp), *d_n = dmalloc(sizeof(int32_t) * H);
        for (size_t bi = 0; bi < sizeof budgets / sizeof budgets[0]; bi++) {
            for (int sink = 0; sink <= 2; sink += 2)
            for (size_t ti = 0; ti < sizeof targets / sizeof targets[0]; ti++) {
                p.budget = budgets[bi];
                p.n_sink = sink;
                p.n_recent = sink == 0 ? 0 : 1;
                p.mass = targets[ti];
                locks_status sc = locks_select(f->cpu, f->seq[s], m, &p, pc, nc, mp);
                dpoison(d_p, sizeof(int32_t) * H * mp);
                dpoison(d_n, sizeof(int32_t) * H);
                locks_status sg = locks_select(f->gpu, f->seq[s], d_m, &p, d_p, d_n, mp);
                test_cond(sc == sg, "select status cpu %s gpu %s", locks_status_str(sc), locks_status_str(sg));
                if (sc != LOCKS_OK || sg != LOCKS_OK) continue;
                for (int variant = 0; variant < 2; variant++) {
                if (variant == 1) { /* the step's multi-block top-k on the same masses */
                    dpoison(d_p, sizeof(int32_t) * H * mp);
                    dpoison(d_n, sizeof(int32_t) * H);
                    CHECK(locks_cuda_select_mb(f->gpu->cuda, f->seq[s], d_m, &p, d_p, d_n, mp));
                }
                ddown(pg, d_p, sizeof(int32_t) * H * mp);
                ddown(ng, d_n, sizeof(int32_t) * H);
                int same = 1;
                for (int32_t h = 0; h < H && same; h++) {
                    if (nc[h] != ng[h]) {
                        fprintf(stderr, "  budget %d head %d: cpu %d pages, gpu %d\n", p.budget, h, nc[h], ng[h]);
                        same = 0;
                        break;
                    }
                    for (int32_t i = 0; i < nc[h]; i++)
                        if (pc[h * mp + i] != pg[h * mp + i]) {
                            fprintf(stderr, "  budget %d head %d pos %d: cpu page %d gpu %d\n", p.budget, h, i,
                                    pc[h * mp + i], pg[h * mp + i]);
                            same = 0;
                            break;
                        }
                }
                test_cond(same, "selection equal (len %d budget %d sink %d mass %.2f, %s top-k)", len, p.budget,
                          sink, (double)p.mass, variant ? "multi-block" : "one-block");
                }
                if (p.mass > 0.f) { /* did the target cut? (the CPU's count without it) */
                    locks_step_params q0 = p;
                    q0.mass = 0.f;
                    int32_t *p0 = malloc(sizeof(int32_t) * H * mp), *n0 = malloc(sizeof(int32_t) * H);
                    if (locks_select(f->cpu, f->seq[s], m, &q0, p0, n0, mp) == LOCKS_OK)
                        for (int32_t h = 0; h < H; h++) n_cut += nc[h] < n0[h];
                    free(p0);
                    free(n0);
                }
            }
        }
        /* a budget below the forced pages fails on both */
        p = locks_step_default_params();
        p.budget = 16;
        p.n_sink = 2;
        p.n_recent = 2;
        test_cond(locks_select(f->gpu, f->seq[s], d_m, &p, d_p, d_n, mp) == LOCKS_ERR_BUDGET, "budget error");
        p.budget = 256;
        p.mass = 1.f;
        test_cond(locks_select(f->gpu, f->seq[s], d_m, &p, d_p, d_n, mp) == LOCKS_ERR_INVALID_ARG, "mass 1 refused");
        p.mass = -0.5f;
        test_cond(locks_select(f->gpu, f->seq[s], d_m, &p, d_p, d_n, mp) == LOCKS_ERR_INVALID_ARG, "mass < 0 refused");
        free(m);
        free(pc);
        free(nc);
        free(pg);
        free(ng);
        dfree(d_m);
        dfree(d_p);
        dfree(d_n);
    }
    g_mass_cuts += n_cut;
    printf("  %-34s exact, %d heads cut by a mass target\n", "select x2 kernels (planted ties)", n_cut);
}

/* ---- attend ----------------------------------------------------------------------------- */

/* float64 attention over listed pages from the GPU's stored K/V (bf16 or fp16 bits). */
static void ref_attend_stored(fixture *f, int s, const int32_t *pages, const int32_t *npg, int32_t mp, double *out,
                              double *lse) {
    const int32_t H = f->sh.hkv, G = f->sh.G, d = f->sh.d, len = f->sh.len[s];
    int32_t np;
    const int32_t *bt = locks_cache_block_table(f->gpu, f->seq[s], &np);
    const size_t blk = (size_t)H * P * d;
    uint16_t *kb = malloc(2 * blk), *vb = malloc(2 * blk);
    for (int32_t h = 0; h < H; h++) {
        double *K = malloc(sizeof(double) * (size_t)npg[h] * P * d), *V = malloc(sizeof(double) * (size_t)npg[h] * P * d);
        int32_t nt = 0;
        for (int32_t i = 0; i < npg[h]; i++) {
            const int32_t lp = pages[h * mp + i];
            CHECK(locks_cuda_kv_page_get(f->gpu->cuda, 0, bt[lp], kb, vb));
            for (int32_t t = 0; t < P && lp * P + t < len; t++, nt++)
                for (int32_t x = 0; x < d; x++) {
                    const size_t o = ((size_t)h * P + t) * d + x;
                    K[(size_t)nt * d + x] = f->sh.dtype == LOCKS_DTYPE_BF16 ? locks_bf16_to_f32(kb[o]) : locks_f16_to_f32(kb[o]);
                    V[(size_t)nt * d + x] = f->sh.dtype == LOCKS_DTYPE_BF16 ? locks_bf16_to_f32(vb[o]) : locks_f16_to_f32(vb[o]);
                }
        }
        for (int32_t g = 0; g < G; g++) {
            double qd[LOCKS_MAX_HEAD_DIM];
            const float *q = f->q + ((size_t)s * f->hq + h * G + g) * d;
            for (int32_t x = 0; x < d; x++) qd[x] = q[x];
            lse[h * G + g] = tu_ref_attention(qd, K, V, nt, d, 1.0 / sqrt((double)d), out + (size_t)(h * G + g) * d);
        }
        free(K);
        free(V);
    }
    free(kb);
    free(vb);
}

static void test_attend(fixture *f) {
    const int32_t H = f->sh.hkv, d = f->sh.d, hq = f->hq;
    const int bf = f->sh.dtype == LOCKS_DTYPE_BF16;
    locks_step_params p = locks_step_default_params();
    const int32_t budgets[] = {128, 1 << 30};
    for (int s = 0; s < 2; s++)
        for (int bi = 0; bi < 2; bi++) {
            const int32_t len = f->sh.len[s], n_full = len / P, mp = (len + P - 1) / P;
            p.budget = budgets[bi];
            float *m = malloc(sizeof(float) * ((size_t)H * n_full + 1));
            const float *q = f->q + (size_t)s * hq * d;
            CHECK(locks_score(f->cpu, 0, f->seq[s], q, hq, &p, m));
            int32_t *pc = malloc(sizeof(int32_t) * H * mp), *nc = malloc(sizeof(int32_t) * H);
            CHECK(locks_select(f->cpu, f->seq[s], m, &p, pc, nc, mp));
            int32_t *d_p = dupload(pc, sizeof(int32_t) * H * mp), *d_n = dupload(nc, sizeof(int32_t) * H);
            float *d_o = dmalloc(sizeof(float) * hq * d), *d_l = dmalloc(sizeof(float) * hq);
            dpoison(d_o, sizeof(float) * hq * d);
            dpoison(d_l, sizeof(float) * hq);
            CHECK(locks_attend(f->gpu, 0, f->seq[s], f->d_q + (size_t)s * hq * d, hq, 0.f, d_p, d_n, mp, d_o, d_l));
            float *og = malloc(sizeof(float) * hq * d), *lg = malloc(sizeof(float) * hq);
            ddown(og, d_o, sizeof(float) * hq * d);
            ddown(lg, d_l, sizeof(float) * hq);
            const char *name_o = bi == 0 ? "attend sparse out" : "attend dense out";
            if (!bf) {
                float *oc = malloc(sizeof(float) * hq * d), *lc = malloc(sizeof(float) * hq);
                CHECK(locks_attend(f->cpu, 0, f->seq[s], q, hq, 0.f, pc, nc, mp, oc, lc));
                CHECK_ERR(name_o, nerr_f(og, oc, (size_t)hq * d), 4e-3, og, oc, (size_t)hq * d);
                CHECK_ERR("attend lse", nerr_f(lg, lc, (size_t)hq), 1e-3, lg, lc, (size_t)hq);
                free(oc);
                free(lc);
            } else {
                double *orf = malloc(sizeof(double) * hq * d), *lrf = malloc(sizeof(double) * hq);
                ref_attend_stored(f, s, pc, nc, mp, orf, lrf);
                float *of = malloc(sizeof(float) * hq * d), *lf = malloc(sizeof(float) * hq);
                for (int32_t i = 0; i < hq * d; i++) of[i] = (float)orf[i];
                for (int32_t i = 0; i < hq; i++) lf[i] = (float)lrf[i];
                CHECK_ERR(bi == 0 ? "attend sparse out (bf16 vs f64)" : "attend dense out (bf16 vs f64)",
                          nerr_d(og, orf, (size_t)hq * d), 1.5e-2, og, of, (size_t)hq * d);
                CHECK_ERR("attend lse (bf16 vs f64)", nerr_d(lg, lrf, (size_t)hq), 5e-3, lg, lf, (size_t)hq);
                free(orf);
                free(lrf);
                free(of);
                free(lf);
            }
            free(m);
            free(pc);
            free(nc);
            free(og);
            free(lg);
            dfree(d_p);
            dfree(d_n);
            dfree(d_o);
            dfree(d_l);
        }
}

/* ---- step + graph ----------------------------------------------------------------------- */

/* The GPU step for both sequences; checks it against the CPU rule applied to the GPU's
 * own masses and the CPU attention over that selection. Returns out in *o_out. */
static void check_step(fixture *f, const locks_step_params *p, const char *tag, float *o_out) {
    const int32_t H = f->sh.hkv, d = f->sh.d, hq = f->hq;
    const int32_t mp = (f->sh.len[0] > f->sh.len[1] ? f->sh.len[0] : f->sh.len[1]) / P + 1;
    const int bf = f->sh.dtype == LOCKS_DTYPE_BF16;
    int32_t *pages = malloc(sizeof(int32_t) * 2 * H * mp), *npg = malloc(sizeof(int32_t) * 2 * H);
    locks_selection sel = {pages, npg, mp};
    float *d_o = dmalloc(sizeof(float) * 2 * hq * d);
    dpoison(d_o, sizeof(float) * 2 * hq * d);
    locks_step_stats st;
    CHECK(locks_decode_step(f->gpu, 0, f->seq, 2, f->d_q, hq, p, d_o, &sel, &st));
    float *og = malloc(sizeof(float) * 2 * hq * d);
    ddown(og, d_o, sizeof(float) * 2 * hq * d);
    int sel_ok = 1;
    double worst = 0;
    for (int s = 0; s < 2; s++) {
        const int32_t len = f->sh.len[s], n_full = len / P;
        float *m = malloc(sizeof(float) * ((size_t)H * n_full + 1));
        if (p->selector == LOCKS_SEL_LOCKS && n_full > 0) {
            float *d_m = dmalloc(sizeof(float) * H * n_full);
            CHECK(locks_score(f->gpu, 0, f->seq[s], f->d_q + (size_t)s * hq * d, hq, p, d_m));
            ddown(m, d_m, sizeof(float) * H * n_full);
            dfree(d_m);
        } else {
            for (int32_t i = 0; i < H * n_full; i++) m[i] = 1.f;
        }
        int32_t *pc = malloc(sizeof(int32_t) * H * mp), *nc = malloc(sizeof(int32_t) * H);
        CHECK(locks_select(f->cpu, f->seq[s], m, p, pc, nc, mp));
        for (int32_t h = 0; h < H; h++) {
            if (nc[h] != npg[s * H + h]) sel_ok = 0;
            for (int32_t i = 0; i < nc[h] && sel_ok; i++)
                if (pc[h * mp + i] != pages[(size_t)(s * H + h) * mp + i]) sel_ok = 0;
        }
        float *oc = malloc(sizeof(float) * hq * d);
        double err;
        if (!bf) {
            CHECK(locks_attend(f->cpu, 0, f->seq[s], f->q + (size_t)s * hq * d, hq, p->scale, pc, nc, mp, oc, NULL));
            err = nerr_f(og + (size_t)s * hq * d, oc, (size_t)hq * d);
        } else {
            double *orf = malloc(sizeof(double) * hq * d), *lrf = malloc(sizeof(double) * hq);
            ref_attend_stored(f, s, pc, nc, mp, orf, lrf);
            for (int32_t i = 0; i < hq * d; i++) oc[i] = (float)orf[i];
            err = nerr_d(og + (size_t)s * hq * d, orf, (size_t)hq * d);
            free(orf);
            free(lrf);
        }
        if (!(err <= worst)) worst = err;
        if (!(err <= (bf ? 1.5e-2 : 4e-3))) first_diffs(tag, og + (size_t)s * hq * d, oc, (size_t)hq * d);
        free(m);
        free(pc);
        free(nc);
        free(oc);
    }
    test_cond(sel_ok, "%s: selection == CPU rule on the GPU's masses", tag);
    test_cond(worst <= (bf ? 1.5e-2 : 4e-3), "%s: out error %.3g", tag, worst);
    test_cond(st.bytes_dense > 0 && st.bytes_kv > 0 && st.bytes_kv <= st.bytes_dense, "%s: stats bytes", tag);
    printf("  %-34s err %.2e, selection %s\n", tag, worst, sel_ok ? "equal" : "DIFFERENT");
    if (o_out) memcpy(o_out, og, sizeof(float) * 2 * hq * d);
    free(pages);
    free(npg);
    free(og);
    dfree(d_o);
}

static void test_step_graph(fixture *f) {
    const int32_t d = f->sh.d, hq = f->hq, H = f->sh.hkv;
    locks_step_params p = locks_step_default_params();
    p.budget = 160;
    float *o_step = malloc(sizeof(float) * 2 * hq * d), *o_graph = malloc(sizeof(float) * 2 * hq * d);
    p.budget = 512;
    check_step(f, &p, "step LOCKS budget 512", NULL);
    p.n_sink = 0;
    p.n_recent = 0;
    p.budget = 96;
    check_step(f, &p, "step LOCKS budget 96, no sink/recent", NULL);
    p = locks_step_default_params();
    p.budget = 160;
    check_step(f, &p, "step LOCKS budget 160", o_step);
    p.selector = LOCKS_SEL_FULL;
    check_step(f, &p, "step FULL (dense)", NULL);
    p.selector = LOCKS_SEL_LOCKS;
    {   /* mass targets: the step's cut == the CPU rule on the GPU's masses; graph == step */
        locks_step_params pm = p;
        pm.mass = 0.9f;
        check_step(f, &pm, "step LOCKS budget 160 mass 0.9", NULL);
        pm.budget = 1 << 30;
        pm.mass = 0.6f;
        float *o_m = malloc(sizeof(float) * 2 * hq * d), *o_mg = malloc(sizeof(float) * 2 * hq * d);
        check_step(f, &pm, "step LOCKS mass 0.6, no cap", o_m);
        float *d_om = dmalloc(sizeof(float) * 2 * hq * d);
        dpoison(d_om, sizeof(float) * 2 * hq * d);
        locks_status gerr;
        locks_step_graph *gm = locks_step_graph_capture(f->gpu, 0, f->seq, 2, f->d_q, hq, &pm,
                                                        f->sh.len[0] + f->sh.len[1], d_om, &gerr);
        CHECK(gerr);
        CHECK(locks_step_graph_replay(gm));
        ddown(o_mg, d_om, sizeof(float) * 2 * hq * d);
        const double em = nerr_f(o_mg, o_m, (size_t)2 * hq * d);
        test_cond(em <= 1e-6, "mass graph replay == step (err %.3g)", em);
        locks_step_graph_free(gm);
        dfree(d_om);
        free(o_m);
        free(o_mg);
    }

    /* the graph */
    float *d_out = dmalloc(sizeof(float) * 2 * hq * d);
    dpoison(d_out, sizeof(float) * 2 * hq * d);
    locks_status err;
    const int32_t max_ctx = f->sh.len[0] + f->sh.len[1] + 64;
    locks_step_graph *g = locks_step_graph_capture(f->gpu, 0, f->seq, 2, f->d_q, hq, &p, max_ctx, d_out, &err);
    CHECK(err);
    CHECK(locks_step_graph_replay(g));
    ddown(o_graph, d_out, sizeof(float) * 2 * hq * d);
    double e = nerr_f(o_graph, o_step, (size_t)2 * hq * d);
    test_cond(e <= 1e-6, "graph replay == step (err %.3g)", e);
    printf("  %-34s err %.2e\n", "graph replay vs step", e);
    /* grow both sequences by 21 tokens (new full page + partial), new queries */
    for (int s = 0; s < 2; s++) {
        const int32_t n = 21, pos = f->sh.len[s];
        float *k = malloc(sizeof(float) * n * H * d), *v = malloc(sizeof(float) * n * H * d);
        tu_fill_normal(k, (size_t)n * H * d, 1.0);
        tu_fill_normal(v, (size_t)n * H * d, 1.0);
        CHECK(locks_cache_append(f->cpu, f->seq[s], n));
        CHECK(locks_cache_append(f->gpu, f->seq[s], n));
        CHECK(locks_cache_write(f->cpu, f->seq[s], 0, pos, n, k, v));
        float *dk = dupload(k, sizeof(float) * n * H * d), *dv = dupload(v, sizeof(float) * n * H * d);
        CHECK(locks_cache_write(f->gpu, f->seq[s], 0, pos, n, dk, dv));
        dfree(dk);
        dfree(dv);
        free(k);
        free(v);
        f->sh.len[s] += n;
    }
    tu_fill_normal(f->q, (size_t)2 * hq * d, 1.0);
    CHECK(locks_cuda_memcpy_h2d(f->d_q, f->q, sizeof(float) * 2 * hq * d));
    dpoison(d_out, sizeof(float) * 2 * hq * d);
    CHECK(locks_step_graph_replay(g));
    ddown(o_graph, d_out, sizeof(float) * 2 * hq * d);
    check_step(f, &p, "step after growth", o_step);
    e = nerr_f(o_graph, o_step, (size_t)2 * hq * d);
    test_cond(e <= 1e-6, "graph replay after growth == step (err %.3g)", e);
    printf("  %-34s err %.2e\n", "graph replay after growth", e);
    locks_step_graph_free(g);

    /* NaN query: error, out untouched */
    float *q2 = malloc(sizeof(float) * 2 * hq * d);
    memcpy(q2, f->q, sizeof(float) * 2 * hq * d);
    q2[hq * d + 3] = NAN;
    float *d_q2 = dupload(q2, sizeof(float) * 2 * hq * d);
    dpoison(d_out, sizeof(float) * 2 * hq * d);
    test_cond(locks_decode_step(f->gpu, 0, f->seq, 2, d_q2, hq, &p, d_out, NULL, NULL) == LOCKS_ERR_NONFINITE,
              "NaN query -> NONFINITE");
    uint32_t *raw = malloc(sizeof(float) * 2 * hq * d);
    ddown(raw, d_out, sizeof(float) * 2 * hq * d);
    int untouched = 1;
    for (int32_t i = 0; i < 2 * hq * d; i++) untouched &= raw[i] == 0xffffffffu;
    test_cond(untouched, "NaN query leaves out untouched");
    p.budget = 8; /* below the forced pages */
    test_cond(locks_decode_step(f->gpu, 0, f->seq, 2, f->d_q, hq, &p, d_out, NULL, NULL) == LOCKS_ERR_BUDGET,
              "budget error");
    free(raw);
    free(q2);
    dfree(d_q2);
    dfree(d_out);
    free(o_step);
    free(o_graph);
}

/* ---- perf mode --------------------------------------------------------------------------- */

typedef struct {
    locks_cache *c;
    int32_t *seqs;
    int32_t n_seqs;
    float *d_q, *d_out;
    int32_t hq;
    locks_step_params p;
} perf_arg;

static locks_status perf_dense(void *a) {
    perf_arg *x = a;
    return locks_cuda_attend_dense(x->c->cuda, 0, x->seqs, x->n_seqs, x->d_q, x->hq, 0.f, x->d_out);
}

static void perf(void) {
    const int32_t ctx = 131072, H = 8, hq = 32, d = 128;
    locks_cache_params cp = locks_cache_default_params();
    cp.backend = LOCKS_BACKEND_CUDA;
    cp.kv_dtype = LOCKS_DTYPE_BF16;
    cp.n_kv_heads = H;
    cp.n_pages = ctx / P + 4;
    cp.max_seqs = 1;
    locks_status err;
    locks_cache *c = locks_cache_init(cp, &err);
    CHECK(err);
    int32_t s;
    CHECK(locks_cache_seq_add(c, &s));
    CHECK(locks_cache_append(c, s, ctx));
    CHECK(locks_cuda_fill_random(c->cuda, 0, 7, 2.f));
    int32_t np;
    const int32_t *bt = locks_cache_block_table(c, s, &np);
    int32_t *d_pages = dupload(bt, sizeof(int32_t) * np);
    CHECK(locks_cuda_sync(c->cuda));
    double t0 = locks_now_ms();
    CHECK(locks_cuda_summary_build(c->cuda, 0, d_pages, np));
    CHECK(locks_cuda_sync(c->cuda));
    double build_ms = locks_now_ms() - t0;
    printf("perf: summary build %d pages x %d heads: %.1f us (%.0f Mpage-heads/s)\n", np, H, build_ms * 1e3,
           np * H / build_ms / 1e3);
    float *q = malloc(sizeof(float) * hq * d);
    tu_fill_normal(q, (size_t)hq * d, 1.0);
    perf_arg a = {c, &s, 1, dupload(q, sizeof(float) * hq * d), dmalloc(sizeof(float) * hq * d), hq,
                  locks_step_default_params()};
    double ms;
    CHECK(locks_cuda_time(c->cuda, perf_dense, &a, 20, 5, &ms));
    double bytes = (double)ctx * H * d * 2 * 2;
    printf("perf: dense attend %d tokens: %.1f us, %.2f TB/s\n", ctx, ms * 1e3, bytes / ms / 1e9);
    locks_cuda_graph *g = locks_cuda_graph_capture(c->cuda, 0, &s, 1, a.d_q, hq, &a.p, ctx, a.d_out, &err);
    CHECK(err);
    CHECK(locks_cuda_graph_replay(g, 1));
    double t1 = locks_now_ms();
    for (int i = 0; i < 50; i++) CHECK(locks_cuda_graph_replay(g, 0));
    CHECK(locks_cuda_sync(c->cuda));
    double step_ms = (locks_now_ms() - t1) / 50;
    double sbytes = (double)(ctx / P) * H * (double)locks_summary_bytes(d, 8, LOCKS_SUMMARY_Q) +
                    2048.0 * H * d * 2 * 2;
    printf("perf: LOCKS step (graph) %d tokens budget 2048: %.1f us, %.2f TB/s effective, %.1fx dense\n", ctx,
           step_ms * 1e3, sbytes / step_ms / 1e9, ms / step_ms);
    locks_cuda_graph_free(&g);
    dfree(a.d_q);
    dfree(a.d_out);
    dfree(d_pages);
    free(q);
    locks_cache_free(c);
}

int main(int argc, char **argv) {
    tu_seed("test_gpu_ops");
    const shape shapes[] = {
        {2, 4, 128, LOCKS_DTYPE_F16, {16 * 37 + 5, 16 * 90}, 8, 0},  /* Llama-like group, partial page */
        {1, 16, 128, LOCKS_DTYPE_F16, {16 * 64, 16 * 20 + 9}, 8, 0}, /* GLM-like group of 16 */
        {2, 1, 64, LOCKS_DTYPE_F16, {16 * 20 + 15, 16 * 3}, 8, 0},   /* MHA, d = 64 */
        {1, 8, 256, LOCKS_DTYPE_F16, {16 * 9 + 1, 16 * 30}, 8, 0},   /* d = 256 */
        {2, 2, 128, LOCKS_DTYPE_F16, {16 * 600 + 7, 16 * 5}, 8, 0},  /* a longer context */
        {2, 4, 128, LOCKS_DTYPE_BF16, {16 * 50 + 3, 16 * 41}, 8, 0}, /* bf16 KV */
        {1, 16, 64, LOCKS_DTYPE_BF16, {16 * 33, 16 * 7 + 2}, 8, 0},  /* bf16, d = 64, G = 16 */
        {2, 12, 128, LOCKS_DTYPE_BF16, {16 * 45 + 7, 16 * 70}, 8, 0}, /* G = 12: the int8 score kernel's
                                                                   second column tile half full */
        {1, 16, 256, LOCKS_DTYPE_F16, {16 * 25 + 3, 16 * 12}, 8, 0},  /* d = 256, G = 16 (two tiles) */
        /* ranks != 8 and fp32 summaries (issue 12): ranks 1..8 quantized run the tensor-core
         * kernels with zero slots, 9..15 and fp32 the plain kernel */
        {2, 4, 128, LOCKS_DTYPE_F16, {16 * 40 + 3, 16 * 22}, 1, 0},
        {1, 16, 128, LOCKS_DTYPE_BF16, {16 * 31 + 9, 16 * 18}, 4, 0},
        {2, 4, 128, LOCKS_DTYPE_F16, {16 * 37 + 5, 16 * 50}, 15, 0},
        {1, 16, 64, LOCKS_DTYPE_F16, {16 * 28, 16 * 9 + 4}, 15, 0},
        {2, 4, 128, LOCKS_DTYPE_F16, {16 * 44 + 1, 16 * 26}, 8, 1},
        {1, 16, 256, LOCKS_DTYPE_F16, {16 * 21 + 2, 16 * 13}, 15, 1},
        {2, 2, 128, LOCKS_DTYPE_BF16, {16 * 35 + 11, 16 * 19}, 3, 1},
        {2, 1, 64, LOCKS_DTYPE_F16, {16 * 17 + 6, 16 * 8}, 12, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape sh = shapes[i];
        printf("shape Hkv=%d G=%d d=%d %s len=(%d, %d) rank %d %s summaries\n", sh.hkv, sh.G, sh.d,
               sh.dtype == LOCKS_DTYPE_BF16 ? "bf16" : "fp16", sh.len[0], sh.len[1], sh.rank > 0 ? sh.rank : 8,
               sh.f32 ? "fp32" : "quantized");
        fixture f;
        fixture_init(&f, sh);
        test_summaries(&f);
        test_score(&f);
        test_select(&f);
        test_attend(&f);
        test_step_graph(&f);
        fixture_free(&f);
    }
    /* the comparison with targets is live: some selections were cut below the budget */
    test_cond(g_mass_cuts > 0, "mass targets cut some selections (%d over every shape)", g_mass_cuts);
    if (argc > 1 && strcmp(argv[1], "--perf") == 0) perf();
    return test_report("test_gpu_ops");
}
