/*
 * test_cp.c — context-parallel decode (src/cp.c) with simulated ranks: R threads of this
 * process, each with its own cache holding a contiguous shard of the same sequence, the
 * LOCAL communicator between them. On fresh random data, for R = 1..4:
 *  - the selection (logical pages per KV head) equals locks_decode_step's on one cache
 *    holding the whole sequence, except between pages whose group masses tie to ~1e-6
 *    (the normaliser is summed in another order);
 *  - the output equals the single cache's to fp32 rounding of the merge, and a float64
 *    attention over the stored fp16 K/V of the selected pages;
 *  - every rank gets bit-identical outputs and selections;
 *  - with exact ties (pages copying 3 key templates, spread over all ranks) the selection
 *    is exactly the single cache's (lower logical index wins, no tolerance);
 *  for the locks (quantized summaries), oracle and quest selectors and dense steps
 *  (budget >= context, and the full selector). Edge cases: fewer pages than ranks (a rank
 *  with nothing), an empty rank in the middle, a partial page on the last rank or none,
 *  shards that do not tile the sequence, a budget below the forced pages, a NaN query on one
 *  rank, ranks given different budgets or queries (every rank returns the same error, none
 *  hangs).
 */
#include "test_util.h"

#include <pthread.h>

#include "util.h"

enum { P = LOCKS_PAGE, MAX_R = 4 };

typedef struct {
    int32_t H, G, d, len;
    float *k, *v; /* [len][H][d] */
} seq_data;

static locks_cache *new_cache(const seq_data *x, int32_t n_tok, int32_t threads) {
    locks_cache_params cp = locks_cache_default_params();
    cp.selectors = LOCKS_SEL_ALL; /* the tests step every selector: keep all their metadata */
    cp.n_kv_heads = x->H;
    cp.head_dim = x->d;
    cp.n_pages = n_tok / P + 2;
    cp.max_seqs = 2;
    cp.n_threads = threads;
    locks_status err;
    locks_cache *c = locks_cache_init(cp, &err);
    CHECK(err);
    return c;
}

/* Writes tokens [t0, t0 + n) of x as a sequence of c; returns its id. */
static int32_t load(locks_cache *c, const seq_data *x, int32_t t0, int32_t n) {
    int32_t seq;
    CHECK(locks_cache_seq_add(c, &seq));
    CHECK(locks_cache_append(c, seq, n));
    const size_t off = (size_t)t0 * x->H * x->d;
    CHECK(locks_cache_write(c, seq, 0, 0, n, x->k + off, x->v + off));
    return seq;
}

/* Page-structured keys (a random offset + a rank-4 subspace per page), so that the
 * attention mass is concentrated on few pages and the ranking means something. */
static seq_data make_data(int32_t H, int32_t G, int32_t d, int32_t len) {
    seq_data x = {H, G, d, len, NULL, NULL};
    const size_t n = (size_t)len * H * d;
    x.k = malloc(n * sizeof(float));
    x.v = malloc(n * sizeof(float));
    float *off = malloc(sizeof(float) * (size_t)d * 5);
    tu_fill_normal(x.v, n, 1.0);
    for (int32_t t = 0; t < len; t++) {
        if (t % P == 0) tu_fill_normal(off, (size_t)d * 5, 0.6);
        for (int32_t h = 0; h < H; h++) {
            double a[4] = {tu_normal(), tu_normal(), tu_normal(), tu_normal()};
            for (int32_t c = 0; c < d; c++) {
                double s = (double)off[c] + 0.1 * tu_normal();
                for (int32_t b = 0; b < 4; b++) s += a[b] * (double)off[(b + 1) * d + c];
                x.k[((size_t)t * H + h) * d + c] = (float)s;
            }
        }
    }
    free(off);
    return x;
}

/* ---- simulated ranks ---- */

typedef struct {
    locks_cp_comm *comm;
    locks_cp_shard shard;
    const float *q;
    int32_t hq;
    locks_step_params p;
    float *out;
    locks_selection sel;
    locks_status st;
    locks_cp_stats stats;
} rank_job;

static void *rank_main(void *arg) {
    rank_job *j = arg;
    j->st = locks_cp_decode_step(j->comm, &j->shard, 0, j->q, j->hq, &j->p, j->out, &j->sel, &j->stats);
    return NULL;
}

typedef struct {
    int32_t R;
    locks_cp_group *group;
    locks_cache *cache[MAX_R];
    locks_cp_comm *comm[MAX_R];
    rank_job job[MAX_R];
    float *out[MAX_R];
    int32_t *pages[MAX_R], *n_pages[MAX_R];
} cp_world;

/* R ranks; rank r holds the tokens [tok0[r], tok0[r] + n_tok[r]) (NULL: the default
 * partition). */
static void world_init(cp_world *w, const seq_data *x, int32_t R, const int32_t *tok0, const int32_t *n_tok) {
    memset(w, 0, sizeof *w);
    w->R = R;
    locks_status err;
    w->group = locks_cp_group_init(R, &err);
    CHECK(err);
    const int32_t max_pages = (x->len + P - 1) / P;
    for (int32_t r = 0; r < R; r++) {
        int32_t t0, n;
        if (tok0) {
            t0 = tok0[r];
            n = n_tok[r];
        } else {
            locks_cp_partition(x->len, R, r, &t0, &n);
        }
        w->cache[r] = new_cache(x, n > 0 ? n : P, 1);
        locks_cp_comm_params cp = {LOCKS_CP_LOCAL, R, r, w->group, NULL, 0};
        w->comm[r] = locks_cp_comm_init(cp, &err);
        CHECK(err);
        rank_job *j = &w->job[r];
        j->comm = w->comm[r];
        j->shard.cache = w->cache[r];
        j->shard.seq_id = n > 0 ? load(w->cache[r], x, t0, n) : -1;
        j->shard.page0 = t0 / P;
        j->shard.global_len = x->len;
        w->out[r] = malloc(sizeof(float) * (size_t)x->H * x->G * x->d);
        w->pages[r] = malloc(sizeof(int32_t) * (size_t)x->H * max_pages);
        w->n_pages[r] = malloc(sizeof(int32_t) * (size_t)x->H);
        j->out = w->out[r];
        j->sel = (locks_selection){w->pages[r], w->n_pages[r], max_pages};
        j->hq = x->H * x->G;
    }
}

static void world_free(cp_world *w) {
    for (int32_t r = 0; r < w->R; r++) {
        locks_cp_comm_free(w->comm[r]);
        locks_cache_free(w->cache[r]);
        free(w->out[r]);
        free(w->pages[r]);
        free(w->n_pages[r]);
    }
    locks_cp_group_free(w->group);
}

/* Runs one step on every rank concurrently. */
static void world_step(cp_world *w, const float *q, const locks_step_params *p) {
    pthread_t th[MAX_R];
    for (int32_t r = 0; r < w->R; r++) {
        w->job[r].q = q;
        w->job[r].p = *p;
        if (pthread_create(&th[r], NULL, rank_main, &w->job[r]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    for (int32_t r = 0; r < w->R; r++) pthread_join(th[r], NULL);
}

/* ---- checks ---- */

/* float64 attention of every query head over the selected pages (stored fp16 K/V). */
static void ref_output(locks_cache *c, int32_t seq, const seq_data *x, const float *q, const int32_t *pages,
                       const int32_t *n_pages, int32_t max_pages, float scale, double *ref) {
    const int32_t H = x->H, G = x->G, d = x->d;
    const int32_t *table = locks_cache_block_table(c, seq, &(int32_t){0});
    double *K = malloc(sizeof(double) * (size_t)max_pages * P * d), *V = malloc(sizeof(double) * (size_t)max_pages * P * d);
    double qd[LOCKS_MAX_HEAD_DIM];
    for (int32_t h = 0; h < H; h++) {
        int32_t n = 0;
        for (int32_t i = 0; i < n_pages[h]; i++) {
            const int32_t lp = pages[(size_t)h * max_pages + i], nt = x->len - lp * P < P ? x->len - lp * P : P;
            const uint16_t *kb = locks_cache_k_page(c, 0, table[lp]) + (size_t)h * P * d;
            const uint16_t *vb = locks_cache_v_page(c, 0, table[lp]) + (size_t)h * P * d;
            for (int32_t t = 0; t < nt; t++, n++)
                for (int32_t e = 0; e < d; e++) {
                    K[(size_t)n * d + e] = (double)locks_f16_to_f32(kb[(size_t)t * d + e]);
                    V[(size_t)n * d + e] = (double)locks_f16_to_f32(vb[(size_t)t * d + e]);
                }
        }
        for (int32_t g = 0; g < G; g++) {
            const int32_t hq = h * G + g;
            for (int32_t e = 0; e < d; e++) qd[e] = (double)q[(size_t)hq * d + e];
            tu_ref_attention(qd, K, V, n, d, (double)scale, ref + (size_t)hq * d);
        }
    }
    free(K);
    free(V);
}

/* Selections equal, or differing only between pages whose masses tie (rel 2e-6). */
static int same_selection(const int32_t *a, const int32_t *na, const int32_t *b, const int32_t *nb, int32_t H,
                          int32_t max_pages, const float *mass, int32_t n_full, int32_t *ties, const char *what) {
    int ok = 1;
    for (int32_t h = 0; h < H; h++) {
        const int32_t *pa = a + (size_t)h * max_pages, *pb = b + (size_t)h * max_pages;
        int equal = na[h] == nb[h];
        for (int32_t i = 0; equal && i < na[h]; i++) equal = pa[i] == pb[i];
        if (equal) continue;
        /* the differing pages must all carry (nearly) the same mass */
        float lo = INFINITY, hi = -INFINITY;
        int32_t ndiff = 0;
        for (int32_t pass = 0; pass < 2; pass++) {
            const int32_t *x = pass ? pb : pa, *y = pass ? pa : pb, nx = pass ? nb[h] : na[h], ny = pass ? na[h] : nb[h];
            for (int32_t i = 0; i < nx; i++) {
                int found = 0;
                for (int32_t k = 0; k < ny && !found; k++) found = y[k] == x[i];
                if (found) continue;
                ndiff++;
                if (x[i] >= n_full) { /* the partial page is never a candidate */
                    lo = -INFINITY;
                    continue;
                }
                const float m = mass[(size_t)h * n_full + x[i]];
                lo = m < lo ? m : lo;
                hi = m > hi ? m : hi;
            }
        }
        const int tie = na[h] == nb[h] && (double)(hi - lo) <= 2e-6 * (double)hi;
        if (tie) {
            (*ties)++;
        } else {
            ok = 0;
            fprintf(stderr, "  %s: KV head %d: %d pages differ (masses %.9g .. %.9g), %d vs %d pages\n", what, h,
                    ndiff, (double)lo, (double)hi, na[h], nb[h]);
        }
    }
    return ok;
}

static int32_t total_ties;
static int strict_ties; /* 1: exact-tie data, the selection must match exactly */

/* One configuration: a sequence, R ranks (partition tok0/n_tok or default), params. */
static void check_config(const seq_data *x, int32_t R, const int32_t *tok0, const int32_t *n_tok,
                         const locks_step_params *p, const char *label) {
    const int32_t H = x->H, Hq = x->H * x->G, d = x->d, max_pages = (x->len + P - 1) / P, n_full = x->len / P;
    char what[160];
    snprintf(what, sizeof what, "%s R=%d sel=%s budget=%d len=%d", label, R, locks_selector_name(p->selector),
             p->budget, x->len);
    /* the single-cache reference */
    locks_cache *c1 = new_cache(x, x->len, 2);
    const int32_t seq = load(c1, x, 0, x->len);
    float *q = malloc(sizeof(float) * (size_t)Hq * d), *out1 = malloc(sizeof(float) * (size_t)Hq * d);
    float *mass = malloc(sizeof(float) * (size_t)H * (n_full + 1));
    int32_t *pages1 = malloc(sizeof(int32_t) * (size_t)H * max_pages), n1[64];
    double *ref = malloc(sizeof(double) * (size_t)Hq * d);
    tu_fill_normal(q, (size_t)Hq * d, 1.5);
    locks_selection sel1 = {pages1, n1, max_pages};
    CHECK(locks_decode_step(c1, 0, &seq, 1, q, Hq, p, out1, &sel1, NULL));
    if (p->selector != LOCKS_SEL_FULL) CHECK(locks_score(c1, 0, seq, q, Hq, p, mass));

    cp_world w;
    world_init(&w, x, R, tok0, n_tok);
    world_step(&w, q, p);
    int ok = 1;
    for (int32_t r = 0; r < R; r++) {
        test_cond(w.job[r].st == LOCKS_OK, "%s: rank %d -> %s", what, r, locks_status_str(w.job[r].st));
        ok &= w.job[r].st == LOCKS_OK;
    }
    if (ok) {
        /* every rank: the same bits */
        for (int32_t r = 1; r < R; r++) {
            test_cond(!memcmp(w.out[r], w.out[0], sizeof(float) * (size_t)Hq * d), "%s: rank %d output differs from rank 0", what, r);
            int same = !memcmp(w.n_pages[r], w.n_pages[0], sizeof(int32_t) * (size_t)H);
            for (int32_t h = 0; same && h < H; h++)
                same = !memcmp(w.pages[r] + (size_t)h * max_pages, w.pages[0] + (size_t)h * max_pages,
                               sizeof(int32_t) * (size_t)w.n_pages[0][h]);
            test_cond(same, "%s: rank %d selection differs from rank 0", what, r);
        }
        int32_t ties = 0;
        const int sel_ok = same_selection(w.pages[0], w.n_pages[0], pages1, n1, H, max_pages, mass, n_full, &ties, what);
        test_cond(sel_ok, "%s: selection differs from the single cache's", what);
        test_cond(!strict_ties || ties == 0, "%s: exact ties broken differently from the single cache (%d heads)", what, ties);
        total_ties += ties;
        /* the output: vs float64 over CP's own selection, vs the single cache when the
         * selections agree */
        const float scale = 1.0f / sqrtf((float)d);
        ref_output(c1, seq, x, q, w.pages[0], w.n_pages[0], max_pages, scale, ref);
        char w2[200];
        snprintf(w2, sizeof w2, "%s out vs f64", what);
        tu_close(w2, w.out[0], ref, (size_t)Hq * d, 2e-5, 2e-4);
        if (ties == 0) {
            for (size_t i = 0; i < (size_t)Hq * d; i++) ref[i] = (double)out1[i];
            snprintf(w2, sizeof w2, "%s out vs single cache", what);
            tu_close(w2, w.out[0], ref, (size_t)Hq * d, 1e-6, 1e-5);
        }
        /* communication accounting: the same collectives on every rank */
        const int dense = p->selector == LOCKS_SEL_FULL || p->budget >= x->len;
        test_cond(w.job[0].stats.n_collectives == (dense ? 2 : 3) || (!dense && w.job[0].stats.n_collectives == 2),
                  "%s: %d collectives", what, w.job[0].stats.n_collectives);
    }
    world_free(&w);
    locks_cache_free(c1);
    free(q);
    free(out1);
    free(mass);
    free(pages1);
    free(ref);
}

/* Every rank must fail alike (and none hang). */
static void check_errors(const seq_data *x) {
    const int32_t tok0[3] = {0, 16 * 3, 16 * 5}, n_tok[3] = {16 * 4, 16 * 2, x->len - 16 * 5}; /* page 3 twice */
    locks_step_params p = locks_step_default_params();
    p.budget = 256;
    cp_world w;
    world_init(&w, x, 3, tok0, n_tok);
    float *q = malloc(sizeof(float) * (size_t)x->H * x->G * x->d);
    tu_fill_normal(q, (size_t)x->H * x->G * x->d, 1.0);
    world_step(&w, q, &p);
    for (int32_t r = 0; r < 3; r++)
        test_cond(w.job[r].st == LOCKS_ERR_INVALID_ARG, "overlapping shards: rank %d -> %s", r,
                  locks_status_str(w.job[r].st));
    world_free(&w);
    world_init(&w, x, 2, NULL, NULL);
    p.n_sink = 4;
    p.n_recent = 4;
    p.budget = 8 * P; /* < 8 forced pages + the partial page */
    world_step(&w, q, &p);
    for (int32_t r = 0; r < 2; r++)
        test_cond(w.job[r].st == LOCKS_ERR_BUDGET, "budget below forced pages: rank %d -> %s", r,
                  locks_status_str(w.job[r].st));
    /* one rank with a NaN query: everyone reports NONFINITE */
    p = locks_step_default_params();
    p.budget = 128;
    float *qbad = malloc(sizeof(float) * (size_t)x->H * x->G * x->d);
    memcpy(qbad, q, sizeof(float) * (size_t)x->H * x->G * x->d);
    qbad[3] = NAN;
    pthread_t th[2];
    w.job[0].q = q;
    w.job[0].p = p;
    w.job[1].q = qbad;
    w.job[1].p = p;
    for (int32_t r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &w.job[r]);
    for (int32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (int32_t r = 0; r < 2; r++)
        test_cond(w.job[r].st == LOCKS_ERR_NONFINITE, "NaN query on rank 1: rank %d -> %s", r,
                  locks_status_str(w.job[r].st));
    /* ranks that disagree on the step (another budget; another query): INVALID_ARG */
    for (int32_t c = 0; c < 2; c++) {
        float *q2 = malloc(sizeof(float) * (size_t)x->H * x->G * x->d);
        memcpy(q2, q, sizeof(float) * (size_t)x->H * x->G * x->d);
        w.job[0].q = q;
        w.job[0].p = p;
        w.job[1].q = q2;
        w.job[1].p = p;
        if (c == 0) w.job[1].p.budget = p.budget + P;
        else q2[x->d + 1] = nextafterf(q2[x->d + 1], INFINITY);
        for (int32_t r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &w.job[r]);
        for (int32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
        for (int32_t r = 0; r < 2; r++)
            test_cond(w.job[r].st == LOCKS_ERR_INVALID_ARG, "ranks given %s: rank %d -> %s",
                      c ? "queries one ulp apart" : "different budgets", r, locks_status_str(w.job[r].st));
        free(q2);
    }
    world_free(&w);
    /* shards of another shape on one rank (KV heads, then head_dim; the same number of
     * query heads and the same query values, so only the shape differs): every rank
     * reports INVALID_ARG from the header round instead of running collectives of
     * different sizes */
    for (int32_t c = 0; c < 2; c++) {
        const int32_t H2 = c == 0 ? 2 * x->H : x->H, G2 = c == 0 ? x->G / 2 : x->G, d2 = c == 0 ? x->d : 2 * x->d;
        seq_data y = make_data(H2, G2, d2, x->len);
        for (int32_t bad = 0; bad < 2; bad++) { /* the odd shard on rank 0, then on rank 1 */
            world_init(&w, x, 2, NULL, NULL);
            int32_t t0, n;
            locks_cp_partition(x->len, 2, bad, &t0, &n);
            locks_cache_free(w.cache[bad]);
            w.cache[bad] = new_cache(&y, n, 1);
            w.job[bad].shard.cache = w.cache[bad];
            w.job[bad].shard.seq_id = load(w.cache[bad], &y, t0, n);
            const int32_t max_pages = (x->len + P - 1) / P;
            free(w.out[bad]);
            free(w.pages[bad]);
            free(w.n_pages[bad]);
            w.out[bad] = malloc(sizeof(float) * (size_t)H2 * G2 * d2);
            w.pages[bad] = malloc(sizeof(int32_t) * (size_t)H2 * max_pages);
            w.n_pages[bad] = malloc(sizeof(int32_t) * (size_t)H2);
            w.job[bad].out = w.out[bad];
            w.job[bad].sel = (locks_selection){w.pages[bad], w.n_pages[bad], max_pages};
            float *qw = malloc(sizeof(float) * (size_t)H2 * G2 * d2);
            for (int32_t i = 0; i < H2 * G2 * d2; i++) qw[i] = q[i % (x->H * x->G * x->d)];
            for (int32_t r = 0; r < 2; r++) {
                w.job[r].q = r == bad ? qw : q;
                w.job[r].p = p;
            }
            for (int32_t r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_main, &w.job[r]);
            for (int32_t r = 0; r < 2; r++) pthread_join(th[r], NULL);
            for (int32_t r = 0; r < 2; r++)
                test_cond(w.job[r].st == LOCKS_ERR_INVALID_ARG, "rank %d with %s %d vs %d: rank %d -> %s", bad,
                          c == 0 ? "KV heads" : "head_dim", c == 0 ? H2 : d2, c == 0 ? x->H : x->d, r,
                          locks_status_str(w.job[r].st));
            free(qw);
            world_free(&w);
        }
        free(y.k);
        free(y.v);
    }
    free(q);
    free(qbad);
}

int main(void) {
    tu_seed("test_cp");
    const int32_t H = 2, G = 4, d = 64;
    for (int32_t trial = 0; trial < 2; trial++) {
        const int32_t len = tu_int(40, 70) * P + (trial == 0 ? tu_int(1, P - 1) : 0); /* partial page or none */
        seq_data x = make_data(H, G, d, len);
        const locks_selector sels[3] = {LOCKS_SEL_LOCKS, LOCKS_SEL_ORACLE, LOCKS_SEL_QUEST};
        for (int32_t R = 1; R <= MAX_R; R++) {
            for (int32_t si = 0; si < 3; si++) {
                locks_step_params p = locks_step_default_params();
                p.selector = sels[si];
                p.budget = tu_int(6, 16) * P;
                p.n_sink = tu_int(0, 2);
                p.n_recent = tu_int(0, 2);
                check_config(&x, R, NULL, NULL, &p, "sparse");
            }
            locks_step_params p = locks_step_default_params();
            p.budget = len + tu_int(0, 50); /* dense by budget */
            check_config(&x, R, NULL, NULL, &p, "dense");
            p.selector = LOCKS_SEL_FULL;
            p.budget = 64;
            check_config(&x, R, NULL, NULL, &p, "full");
        }
        /* an empty rank in the middle; the partial page on the last rank */
        const int32_t pages = (len + P - 1) / P, cut = tu_int(3, pages - 3);
        const int32_t tok0[3] = {0, cut * P, cut * P}, n_tok[3] = {cut * P, 0, len - cut * P};
        locks_step_params p = locks_step_default_params();
        p.budget = 10 * P;
        check_config(&x, 3, tok0, n_tok, &p, "empty middle rank");
        p.selector = LOCKS_SEL_ORACLE;
        check_config(&x, 3, tok0, n_tok, &p, "empty middle rank");
        if (trial == 0) check_errors(&x);
        free(x.k);
        free(x.v);
    }
    /* exact ties: every page's keys copy one of 3 templates (values stay random), so
     * pages on different ranks have bit-identical scores and masses; both paths must break
     * the ties alike (lower logical index), with no tolerance */
    {
        const int32_t len = tu_int(40, 60) * P + 9;
        seq_data x = make_data(H, G, d, len);
        for (int32_t t = 3 * P; t < len; t++)
            memcpy(x.k + (size_t)t * H * d, x.k + (size_t)(t % (3 * P)) * H * d, sizeof(float) * (size_t)H * d);
        strict_ties = 1;
        for (int32_t R = 2; R <= MAX_R; R++) {
            locks_step_params p = locks_step_default_params();
            p.selector = R % 2 ? LOCKS_SEL_ORACLE : LOCKS_SEL_LOCKS;
            p.budget = tu_int(6, 16) * P + 9;
            check_config(&x, R, NULL, NULL, &p, "exact ties");
        }
        strict_ties = 0;
        free(x.k);
        free(x.v);
    }
    /* fewer pages than ranks: 3 pages (2 full + partial) over 4 ranks -> one holds none */
    {
        seq_data x = make_data(H, G, d, 2 * P + 5);
        locks_step_params p = locks_step_default_params();
        p.n_sink = 1;
        p.n_recent = 0;
        p.budget = 16 + 5 + 1; /* sink + partial: the second full page competes for nothing */
        check_config(&x, 4, NULL, NULL, &p, "tiny");
        p.budget = 2 * P + 5 - 1;
        p.n_sink = 0;
        check_config(&x, 4, NULL, NULL, &p, "tiny top-1");
        p.budget = 1000;
        check_config(&x, 4, NULL, NULL, &p, "tiny dense");
        free(x.k);
        free(x.v);
    }
    printf("test_cp: %d selection differences at mass ties (allowed)\n", total_ties);
    return test_report("test_cp");
}
