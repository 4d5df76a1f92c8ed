/*
 * metrics.c — float64 reference attention and the selection metrics of DESIGN.md §3.
 *
 * The reference reads the sequence one (page, KV head) block at a time, converts it to
 * double once and serves all G query heads of the group from it. Two passes: the keys
 * give every token's logit (kept) and the page log-sum-exps (which give p_hj and the
 * sequence LSE); the values then give the output over a page list, which serves both
 * o_full (every page) and o_S. Work is split
 * over KV heads with pthreads; each KV head is computed by one thread in one fixed
 * order, so results do not depend on the thread count.
 */
#include "metrics.h"

#include "util.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define METRICS_MAX_THREADS 64
#define METRICS_MAX_GROUP 256 /* query heads per KV head */

/* ---------------------------------------------------------------------------------- */
/* Reading pages                                                                        */
/* ---------------------------------------------------------------------------------- */

/* fp16 -> float for all 65536 bit patterns: the cache source converts 2 values per
 * (token, dim) per pass, and a table lookup beats the branchy conversion. */
static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

static void f16_table_init(void) {
    for (uint32_t i = 0; i < 65536u; i++) f16_table[i] = locks_f16_to_f32((uint16_t)i);
}

locks_kv_src locks_kv_src_arrays(int32_t n_tokens, int32_t n_kv_heads, int32_t head_dim,
                                 const float *k, const float *v) {
    locks_kv_src s;
    memset(&s, 0, sizeof s);
    s.n_tokens = n_tokens;
    s.n_kv_heads = n_kv_heads;
    s.head_dim = head_dim;
    s.k = k;
    s.v = v;
    s.seq_id = -1;
    return s;
}

locks_status locks_kv_src_cache(const locks_cache *c, int32_t seq_id, int32_t layer,
                                locks_kv_src *out) {
    if (!c || !out) return LOCKS_ERR_INVALID_ARG;
    locks_cache_params cp = locks_cache_get_params(c);
    if (layer < 0 || layer >= cp.n_layers) return LOCKS_ERR_INVALID_ARG;
    int32_t n = locks_cache_seq_len(c, seq_id);
    if (n < 0) return LOCKS_ERR_NO_SEQ;
    int32_t np = 0;
    const int32_t *bt = locks_cache_block_table(c, seq_id, &np);
    if (n > 0 && (!bt || !locks_cache_k_page(c, layer, bt[0]))) return LOCKS_ERR_UNSUPPORTED;
    memset(out, 0, sizeof *out);
    out->n_tokens = n;
    out->n_kv_heads = cp.n_kv_heads;
    out->head_dim = cp.head_dim;
    out->cache = c;
    out->seq_id = seq_id;
    out->layer = layer;
    return LOCKS_OK;
}

/* Keys of logical page j, KV head h, transposed: kt[d][16] (tokens past the sequence's
 * end are 0), and/or values v[16][d], as doubles (either pointer may be NULL); returns
 * the page's token count (16, or fewer for the partial page). */
static int32_t load_page(const locks_kv_src *s, int32_t h, int32_t j, double *kt, double *v) {
    const int32_t d = s->head_dim, H = s->n_kv_heads;
    int32_t t0 = j * LOCKS_PAGE;
    int32_t len = s->n_tokens - t0;
    if (len > LOCKS_PAGE) len = LOCKS_PAGE;
    if (kt && len < LOCKS_PAGE) memset(kt, 0, sizeof(double) * LOCKS_PAGE * (size_t)d);
    if (s->cache) {
        int32_t np = 0;
        const int32_t *bt = locks_cache_block_table(s->cache, s->seq_id, &np);
        size_t off = (size_t)h * LOCKS_PAGE * (size_t)d;
        if (kt) {
            const uint16_t *kp = locks_cache_k_page(s->cache, s->layer, bt[j]) + off;
            for (int32_t i = 0; i < len; i++)
                for (int32_t c = 0; c < d; c++) kt[c * LOCKS_PAGE + i] = (double)f16_table[kp[i * d + c]];
        }
        if (v) {
            const uint16_t *vp = locks_cache_v_page(s->cache, s->layer, bt[j]) + off;
            for (int32_t i = 0; i < len * d; i++) v[i] = (double)f16_table[vp[i]];
        }
    } else {
        for (int32_t i = 0; i < len; i++) {
            size_t row = ((size_t)(t0 + i) * (size_t)H + (size_t)h) * (size_t)d;
            for (int32_t c = 0; c < d; c++) {
                if (kt) kt[c * LOCKS_PAGE + i] = (double)s->k[row + (size_t)c];
                if (v) v[i * d + c] = (double)s->v[row + (size_t)c];
            }
        }
    }
    return len;
}

static double lse_add(double a, double b) {
    if (a == -(double)INFINITY) return b;
    if (b == -(double)INFINITY) return a;
    double m = a > b ? a : b;
    return m + log(exp(a - m) + exp(b - m));
}

/* ---------------------------------------------------------------------------------- */
/* Reference                                                                            */
/* ---------------------------------------------------------------------------------- */

/* Scaled logits of one page for one query head: l[16] from kt[d][16]. The 16 token
 * sums are independent, so the loop vectorises across tokens while each sum keeps its
 * sequential order over the d channels (the result does not depend on the SIMD width). */
static void page_logits(const double *q, const double *kt, int32_t d, double scale, double *l) {
    double acc[LOCKS_PAGE] = {0};
    for (int32_t c = 0; c < d; c++) {
        const double qc = q[c], *kc = kt + (size_t)c * LOCKS_PAGE;
        for (int32_t i = 0; i < LOCKS_PAGE; i++) acc[i] += qc * kc[i];
    }
    for (int32_t i = 0; i < LOCKS_PAGE; i++) l[i] = scale * acc[i];
}

/* Pass 1 for KV head h: the logits and page LSEs of its G query heads. */
static void ref_logits(locks_attn_ref *r, int32_t h, double *kt) {
    const int32_t d = r->head_dim, G = r->n_q_heads / r->n_kv_heads;
    double l[LOCKS_PAGE];
    for (int32_t j = 0; j < r->n_pages; j++) {
        int32_t len = load_page(&r->src, h, j, kt, NULL);
        for (int32_t g = 0; g < G; g++) {
            int32_t qh = h * G + g;
            page_logits(r->q + (size_t)qh * (size_t)d, kt, d, r->scale, l);
            double m = l[0];
            for (int32_t i = 1; i < len; i++) m = l[i] > m ? l[i] : m;
            double sum = 0.0;
            for (int32_t i = 0; i < len; i++) sum += exp(l[i] - m);
            r->page_lse[(size_t)qh * (size_t)r->n_pages + (size_t)j] = m + log(sum);
            memcpy(r->logit + (size_t)qh * (size_t)r->n_tokens + (size_t)j * LOCKS_PAGE, l,
                   sizeof(double) * (size_t)len);
        }
    }
}

/* o[G][d] over the page list of KV head h, normalised over those pages only, from the
 * stored logits and the values (visited in list order). */
static void ref_restricted(const locks_attn_ref *r, int32_t h, const int32_t *pages, int32_t n,
                           double *o, double *v) {
    const int32_t d = r->head_dim, G = r->n_q_heads / r->n_kv_heads;
    double lse_s[METRICS_MAX_GROUP];
    for (int32_t g = 0; g < G; g++) {
        const double *pl = r->page_lse + (size_t)(h * G + g) * (size_t)r->n_pages;
        double a = -(double)INFINITY;
        for (int32_t i = 0; i < n; i++) a = lse_add(a, pl[pages[i]]);
        lse_s[g] = a;
    }
    memset(o, 0, sizeof(double) * (size_t)G * (size_t)d);
    for (int32_t i = 0; i < n; i++) {
        int32_t len = load_page(&r->src, h, pages[i], NULL, v);
        for (int32_t g = 0; g < G; g++) {
            int32_t qh = h * G + g;
            const double *l = r->logit + (size_t)qh * (size_t)r->n_tokens + (size_t)pages[i] * LOCKS_PAGE;
            double *og = o + (size_t)g * (size_t)d;
            for (int32_t t = 0; t < len; t++) {
                double w = exp(l[t] - lse_s[g]);
                for (int32_t c = 0; c < d; c++) og[c] += w * v[t * d + c];
            }
        }
    }
}

typedef struct {
    locks_attn_ref *ref;
    int32_t h0, h1; /* KV heads [h0, h1) */
    int32_t *all;   /* [n_pages] 0..n_pages-1 */
    locks_status st;
} ref_job;

static void *ref_worker(void *arg) {
    ref_job *jb = arg;
    locks_attn_ref *r = jb->ref;
    const int32_t d = r->head_dim, G = r->n_q_heads / r->n_kv_heads;
    double *k = locks_alloc((size_t)LOCKS_PAGE * (size_t)d, sizeof(double));
    double *v = locks_alloc((size_t)LOCKS_PAGE * (size_t)d, sizeof(double));
    if (!k || !v) {
        jb->st = LOCKS_ERR_OOM;
        goto done;
    }
    for (int32_t h = jb->h0; h < jb->h1; h++) {
        ref_logits(r, h, k);
        for (int32_t g = 0; g < G; g++) {
            int32_t qh = h * G + g;
            const double *pl = r->page_lse + (size_t)qh * (size_t)r->n_pages;
            double a = -(double)INFINITY;
            for (int32_t j = 0; j < r->n_pages; j++) a = lse_add(a, pl[j]);
            r->lse[qh] = a;
            for (int32_t j = 0; j < r->n_pages; j++)
                r->p[(size_t)qh * (size_t)r->n_pages + (size_t)j] = exp(pl[j] - a);
        }
        ref_restricted(r, h, jb->all, r->n_pages, r->o_full + (size_t)h * (size_t)G * (size_t)d, v);
    }
    jb->st = LOCKS_OK;
done:
    locks_free(k);
    locks_free(v);
    return NULL;
}

void locks_attn_ref_free(locks_attn_ref *ref) {
    if (!ref) return;
    locks_free(ref->q);
    locks_free(ref->page_lse);
    locks_free(ref->logit);
    locks_free(ref->lse);
    locks_free(ref->p);
    locks_free(ref->o_full);
    memset(ref, 0, sizeof *ref);
}

locks_status locks_attn_ref_compute(const locks_kv_src *src, const float *q, int32_t n_q_heads,
                                    float scale, int32_t n_threads, locks_attn_ref *ref) {
    if (!ref) return LOCKS_ERR_INVALID_ARG;
    memset(ref, 0, sizeof *ref);
    if (!src || !q || src->n_kv_heads < 1 || src->head_dim < 1 ||
        src->head_dim > LOCKS_MAX_HEAD_DIM || src->n_tokens < 1 || n_q_heads < 1 ||
        n_q_heads % src->n_kv_heads != 0 || n_q_heads / src->n_kv_heads > METRICS_MAX_GROUP ||
        (!src->cache && (!src->k || !src->v)))
        return LOCKS_ERR_INVALID_ARG;
    const int32_t d = src->head_dim;
    for (size_t i = 0; i < (size_t)n_q_heads * (size_t)d; i++)
        if (!isfinite(q[i])) return LOCKS_ERR_NONFINITE;
    if (src->cache) pthread_once(&f16_once, f16_table_init);

    ref->n_q_heads = n_q_heads;
    ref->n_kv_heads = src->n_kv_heads;
    ref->head_dim = d;
    ref->n_tokens = src->n_tokens;
    ref->n_pages = (src->n_tokens + LOCKS_PAGE - 1) / LOCKS_PAGE;
    ref->n_threads = n_threads < 1 ? 1 : n_threads;
    ref->scale = scale > 0.0f ? (double)scale : 1.0 / sqrt((double)d);
    ref->src = *src;
    size_t hp = (size_t)n_q_heads * (size_t)ref->n_pages;
    ref->q = locks_alloc((size_t)n_q_heads * (size_t)d, sizeof(double));
    ref->page_lse = locks_alloc(hp, sizeof(double));
    ref->logit = locks_alloc((size_t)n_q_heads * (size_t)src->n_tokens, sizeof(double));
    ref->lse = locks_alloc((size_t)n_q_heads, sizeof(double));
    ref->p = locks_alloc(hp, sizeof(double));
    ref->o_full = locks_alloc((size_t)n_q_heads * (size_t)d, sizeof(double));
    int32_t *all = locks_alloc((size_t)ref->n_pages, sizeof(int32_t));
    int32_t nt = ref->n_threads < ref->n_kv_heads ? ref->n_threads : ref->n_kv_heads;
    ref_job jobs[METRICS_MAX_THREADS];
    pthread_t tid[METRICS_MAX_THREADS];
    if (nt > METRICS_MAX_THREADS) nt = METRICS_MAX_THREADS;
    locks_status st = LOCKS_ERR_OOM;
    if (!ref->q || !ref->page_lse || !ref->logit || !ref->lse || !ref->p || !ref->o_full || !all) goto fail;
    for (size_t i = 0; i < (size_t)n_q_heads * (size_t)d; i++) ref->q[i] = (double)q[i];
    for (int32_t j = 0; j < ref->n_pages; j++) all[j] = j;

    uint8_t spawned[METRICS_MAX_THREADS] = {0};
    for (int32_t t = 0; t < nt; t++) {
        jobs[t].ref = ref;
        jobs[t].h0 = (int32_t)((int64_t)ref->n_kv_heads * t / nt);
        jobs[t].h1 = (int32_t)((int64_t)ref->n_kv_heads * (t + 1) / nt);
        jobs[t].all = all;
        jobs[t].st = LOCKS_ERR_OOM;
        if (t > 0) spawned[t] = pthread_create(&tid[t], NULL, ref_worker, &jobs[t]) == 0;
    }
    ref_worker(&jobs[0]);
    for (int32_t t = 1; t < nt; t++) {
        if (spawned[t])
            pthread_join(tid[t], NULL);
        else
            ref_worker(&jobs[t]); /* could not spawn: do it here */
    }
    st = LOCKS_OK;
    for (int32_t t = 0; t < nt; t++)
        if (jobs[t].st != LOCKS_OK) st = jobs[t].st;
    if (st != LOCKS_OK) goto fail;
    locks_free(all);
    return LOCKS_OK;
fail:
    locks_free(all);
    locks_attn_ref_free(ref);
    return st;
}

locks_status locks_attn_ref_restricted(const locks_attn_ref *ref, int32_t kv_head,
                                       const int32_t *pages, int32_t n_pages, double *o) {
    if (!ref || !ref->q || !o || kv_head < 0 || kv_head >= ref->n_kv_heads || n_pages < 0 ||
        (n_pages > 0 && !pages))
        return LOCKS_ERR_INVALID_ARG;
    for (int32_t i = 0; i < n_pages; i++)
        if (pages[i] < 0 || pages[i] >= ref->n_pages) return LOCKS_ERR_INVALID_ARG;
    double *v = locks_alloc((size_t)LOCKS_PAGE * (size_t)ref->head_dim, sizeof(double));
    if (!v) return LOCKS_ERR_OOM;
    ref_restricted(ref, kv_head, pages, n_pages, o, v);
    locks_free(v);
    return LOCKS_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Selections                                                                           */
/* ---------------------------------------------------------------------------------- */

int32_t locks_metrics_forced(int32_t n_tokens, int32_t n_sink, int32_t n_recent, uint8_t *forced) {
    int32_t n_full = n_tokens / LOCKS_PAGE, part = n_tokens % LOCKS_PAGE;
    int32_t n_pages = n_full + (part > 0);
    int32_t tokens = 0;
    for (int32_t j = 0; j < n_pages; j++) {
        int32_t f = (j == n_full) || (j < n_sink) || (j >= n_full - n_recent);
        forced[j] = (uint8_t)f;
        if (f) tokens += j == n_full ? part : LOCKS_PAGE;
    }
    return tokens;
}

typedef struct {
    double m;
    int32_t j;
} ranked_page;

/* Descending mass, then ascending index: a total order, so the top-k is unique. */
static int ranked_cmp(const void *a, const void *b) {
    const ranked_page *x = a, *y = b;
    if (x->m > y->m) return -1;
    if (x->m < y->m) return 1;
    return (x->j > y->j) - (x->j < y->j);
}

/* Group mean of p_hj over the G query heads of KV head h: mass[n_pages]. */
static void group_mass(const locks_attn_ref *r, int32_t h, double *mass) {
    const int32_t G = r->n_q_heads / r->n_kv_heads;
    for (int32_t j = 0; j < r->n_pages; j++) {
        double s = 0.0;
        for (int32_t g = 0; g < G; g++) s += r->p[(size_t)(h * G + g) * (size_t)r->n_pages + (size_t)j];
        mass[j] = s / (double)G;
    }
}

locks_status locks_metrics_oracle_select(const locks_attn_ref *ref, int32_t budget,
                                         int32_t n_sink, int32_t n_recent, int32_t *pages,
                                         int32_t *n_pages, int32_t max_pages) {
    if (!ref || !ref->p || !pages || !n_pages || n_sink < 0 || n_recent < 0 ||
        max_pages < ref->n_pages)
        return LOCKS_ERR_INVALID_ARG;
    if (budget <= 0) return LOCKS_ERR_BUDGET;
    const int32_t np = ref->n_pages;
    uint8_t *forced = locks_alloc((size_t)np, 1);
    uint8_t *take = locks_alloc((size_t)np, 1);
    double *mass = locks_alloc((size_t)np, sizeof(double));
    ranked_page *rk = locks_alloc((size_t)np, sizeof(ranked_page));
    locks_status st = LOCKS_ERR_OOM;
    if (!forced || !take || !mass || !rk) goto done;
    int32_t ftok = locks_metrics_forced(ref->n_tokens, n_sink, n_recent, forced);
    st = LOCKS_ERR_BUDGET;
    if (ftok > budget) goto done;
    int32_t k_free = (budget - ftok) / LOCKS_PAGE;
    for (int32_t h = 0; h < ref->n_kv_heads; h++) {
        group_mass(ref, h, mass);
        int32_t nr = 0;
        for (int32_t j = 0; j < np; j++) {
            take[j] = forced[j];
            if (!forced[j]) rk[nr++] = (ranked_page){mass[j], j};
        }
        qsort(rk, (size_t)nr, sizeof *rk, ranked_cmp);
        for (int32_t i = 0; i < nr && i < k_free; i++) take[rk[i].j] = 1;
        int32_t n = 0;
        for (int32_t j = 0; j < np; j++)
            if (take[j]) pages[(size_t)h * (size_t)max_pages + (size_t)n++] = j;
        n_pages[h] = n;
    }
    st = LOCKS_OK;
done:
    locks_free(forced);
    locks_free(take);
    locks_free(mass);
    locks_free(rk);
    return st;
}

static double norm2(const double *x, int32_t n) {
    double s = 0.0;
    for (int32_t i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s);
}

locks_status locks_metrics_eval(const locks_attn_ref *ref, const int32_t *pages,
                                const int32_t *n_pages, int32_t max_pages, int32_t budget,
                                int32_t n_sink, int32_t n_recent, const float *out,
                                locks_sel_metrics *m) {
    if (!ref || !ref->p || !pages || !n_pages || !m || max_pages < 1) return LOCKS_ERR_INVALID_ARG;
    const int32_t np = ref->n_pages, H = ref->n_kv_heads, d = ref->head_dim;
    const int32_t G = ref->n_q_heads / H;
    for (int32_t h = 0; h < H; h++) {
        if (n_pages[h] < 0 || n_pages[h] > np || n_pages[h] > max_pages) return LOCKS_ERR_INVALID_ARG;
        for (int32_t i = 0; i < n_pages[h]; i++) {
            int32_t j = pages[(size_t)h * (size_t)max_pages + (size_t)i];
            if (j < 0 || j >= np) return LOCKS_ERR_INVALID_ARG;
        }
    }
    int32_t omax = np;
    int32_t *opages = locks_alloc((size_t)H * (size_t)omax, sizeof(int32_t));
    int32_t *on = locks_alloc((size_t)H, sizeof(int32_t));
    uint8_t *forced = locks_alloc((size_t)np, 1);
    uint8_t *in_s = locks_alloc((size_t)np, 1);
    double *mass = locks_alloc((size_t)np, sizeof(double));
    double *os = locks_alloc((size_t)G * (size_t)d, sizeof(double));
    locks_status st = LOCKS_ERR_OOM;
    if (!opages || !on || !forced || !in_s || !mass || !os) goto done;
    st = locks_metrics_oracle_select(ref, budget, n_sink, n_recent, opages, on, omax);
    if (st != LOCKS_OK) goto done;
    locks_metrics_forced(ref->n_tokens, n_sink, n_recent, forced);

    memset(m, 0, sizeof *m);
    m->kernel_rel_err = out ? 0.0 : -1.0;
    m->cosine_min = (double)INFINITY;
    for (int32_t h = 0; h < H; h++) {
        const int32_t *sp = pages + (size_t)h * (size_t)max_pages;
        const int32_t *op = opages + (size_t)h * (size_t)omax;
        group_mass(ref, h, mass);
        memset(in_s, 0, (size_t)np);
        double cov = 0.0, tok = 0.0;
        for (int32_t i = 0; i < n_pages[h]; i++) {
            int32_t j = sp[i];
            if (in_s[j]) { /* duplicate page: not a valid selection */
                st = LOCKS_ERR_INVALID_ARG;
                goto done;
            }
            in_s[j] = 1;
            cov += mass[j];
            int32_t len = ref->n_tokens - j * LOCKS_PAGE;
            tok += len > LOCKS_PAGE ? LOCKS_PAGE : len;
        }
        double ocov = 0.0;
        int32_t o_free = 0, hit = 0;
        for (int32_t i = 0; i < on[h]; i++) {
            int32_t j = op[i];
            ocov += mass[j];
            if (!forced[j]) {
                o_free++;
                hit += in_s[j];
            }
        }
        m->mass_coverage += cov / H;
        m->oracle_mass_coverage += ocov / H;
        m->oracle_recall += (o_free ? (double)hit / o_free : 1.0) / H;
        m->tokens += tok / H;

        /* Outputs: every page selected means o_S is o_full (same routine, same order). */
        const double *ofull = ref->o_full + (size_t)h * (size_t)G * (size_t)d;
        if (n_pages[h] == np) {
            memcpy(os, ofull, sizeof(double) * (size_t)G * (size_t)d);
        } else {
            st = locks_attn_ref_restricted(ref, h, sp, n_pages[h], os);
            if (st != LOCKS_OK) goto done;
        }
        for (int32_t g = 0; g < G; g++) {
            const double *a = os + (size_t)g * (size_t)d, *b = ofull + (size_t)g * (size_t)d;
            double diff = 0.0, dot = 0.0;
            for (int32_t c = 0; c < d; c++) {
                diff += (a[c] - b[c]) * (a[c] - b[c]);
                dot += a[c] * b[c];
            }
            double na = norm2(a, d), nb = norm2(b, d);
            double rel = nb > 0.0 ? sqrt(diff) / nb : sqrt(diff);
            double cs = (na > 0.0 && nb > 0.0) ? dot / (na * nb) : (na == nb ? 1.0 : 0.0);
            m->output_rel_err += rel / ref->n_q_heads;
            m->cosine += cs / ref->n_q_heads;
            if (rel > m->output_rel_err_max) m->output_rel_err_max = rel;
            if (cs < m->cosine_min) m->cosine_min = cs;
            if (out) {
                const float *ko = out + (size_t)(h * G + g) * (size_t)d;
                double kd = 0.0;
                for (int32_t c = 0; c < d; c++) kd += ((double)ko[c] - a[c]) * ((double)ko[c] - a[c]);
                double krel = na > 0.0 ? sqrt(kd) / na : sqrt(kd);
                if (!(krel <= m->kernel_rel_err)) m->kernel_rel_err = krel; /* NaN propagates */
            }
        }
    }
    m->coverage_ratio = m->oracle_mass_coverage > 0.0 ? m->mass_coverage / m->oracle_mass_coverage : 0.0;
    st = LOCKS_OK;
done:
    locks_free(opages);
    locks_free(on);
    locks_free(forced);
    locks_free(in_s);
    locks_free(mass);
    locks_free(os);
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* Carrier recall                                                                       */
/* ---------------------------------------------------------------------------------- */

static int has_page(const int32_t *pages, int32_t n, int32_t j) {
    for (int32_t i = 0; i < n; i++)
        if (pages[i] == j) return 1;
    return 0;
}

void locks_metrics_carrier_add(locks_carrier_count *acc, int32_t n_kv_heads,
                               const int32_t *oracle_pages, const int32_t *oracle_n,
                               const int32_t *method_pages, const int32_t *method_n,
                               int32_t max_pages, const int32_t *needle_pages,
                               int32_t n_needles) {
    if (!acc) return;
    for (int32_t h = 0; h < n_kv_heads; h++) {
        const int32_t *op = oracle_pages + (size_t)h * (size_t)max_pages;
        const int32_t *mp = method_pages + (size_t)h * (size_t)max_pages;
        for (int32_t i = 0; i < n_needles; i++) {
            if (!has_page(op, oracle_n[h], needle_pages[i])) continue;
            acc->n_oracle++;
            acc->n_hit += has_page(mp, method_n[h], needle_pages[i]);
        }
    }
}

double locks_metrics_carrier_recall(const locks_carrier_count *acc) {
    if (!acc || acc->n_oracle == 0) return -1.0;
    return (double)acc->n_hit / (double)acc->n_oracle;
}
