/*
 * synth.c — the synthetic workload of synth.h.
 *
 * All randomness comes from splitmix64 streams keyed by (seed, head, page, purpose);
 * Gaussians by Box-Muller in double for queries and per-head directions, a 4-term
 * Irwin-Hall approximation for the bulk per-page draws. Generation works page by page: a request for a
 * token range generates each overlapping (page, head) block whole and copies the
 * tokens asked for, so chunking never changes the result.
 */
#include "synth.h"

#include "util.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#define SYNTH_PI 3.14159265358979323846

/* ---------------------------------------------------------------------------------- */
/* Random streams                                                                       */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    uint64_t state;
    double spare;
    int has_spare;
} rng_t;

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Stream for (seed, a, b, purpose): distinct keys give unrelated streams. */
static rng_t rng_stream(uint64_t seed, uint64_t a, uint64_t b, uint64_t purpose) {
    rng_t r;
    uint64_t x = mix64(seed + 0x9e3779b97f4a7c15ull);
    x = mix64(x ^ (a + 0x632be59bd9b4e019ull));
    x = mix64(x ^ (b + 0x8cb92ba72f3d8dd7ull));
    x = mix64(x ^ (purpose + 0xd1b54a32d192ed03ull));
    r.state = x;
    r.spare = 0.0;
    r.has_spare = 0;
    return r;
}

static uint64_t rng_u64(rng_t *r) {
    r->state += 0x9e3779b97f4a7c15ull;
    return mix64(r->state);
}

/* Uniform in (0, 1): 53 random bits, never 0. */
static double rng_unif(rng_t *r) { return ((double)(rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* Approximately standard normal, fast: the sum of four 16-bit uniforms from one draw
 * (Irwin-Hall), centred and scaled to unit variance; bounded by +-3.46. Used for the
 * bulk per-page draws (bases, centres, coefficients, noise, values), several times
 * cheaper than Box-Muller. */
static double rng_fast_normal(rng_t *r) {
    uint64_t x = rng_u64(r);
    double s = (double)(x & 0xffffu) + (double)((x >> 16) & 0xffffu) + (double)((x >> 32) & 0xffffu) +
               (double)(x >> 48);
    return (s * (1.0 / 65536.0) - 2.0 + 2.0 / 65536.0) * 1.7320508075688772;
}

static double rng_normal(rng_t *r) {
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1 = rng_unif(r), u2 = rng_unif(r);
    double rad = sqrt(-2.0 * log(u1));
    r->spare = rad * sin(2.0 * SYNTH_PI * u2);
    r->has_spare = 1;
    return rad * cos(2.0 * SYNTH_PI * u2);
}

/* ---------------------------------------------------------------------------------- */
/* State                                                                                */
/* ---------------------------------------------------------------------------------- */

struct locks_synth {
    locks_synth_params p;
    double qn2;          /* expected |q|^2 / d: unit sink and needle parts + random part */
    double l_sink;       /* sink-token logit above the background */
    double l_needle;     /* needle-token logit above its background */
    double *dirs;        /* [Hkv][3][d]: mean, sink, needle directions (orthonormal) */
    int32_t n_needles;
    int32_t *needles;    /* [n_needles] logical pages */
    int32_t *needle_off; /* [n_needles] first needle token in the page */
};

locks_synth_params locks_synth_default_params(int32_t n_kv_heads, int32_t n_q_heads,
                                              int32_t head_dim, int32_t context, uint64_t seed) {
    locks_synth_params p;
    memset(&p, 0, sizeof p);
    p.n_kv_heads = n_kv_heads;
    p.n_q_heads = n_q_heads;
    p.head_dim = head_dim;
    p.context = context;
    p.seed = seed;
    p.rank_min = 4;
    p.rank_max = 8;
    p.spectrum_decay = 0.7f;
    p.page_logit_std = 1.0f;
    p.token_logit_std = 1.0f;
    p.noise_frac = 0.01f;
    p.mean_norm = 1.0f;
    p.n_sink_tokens = 4;
    p.sink_share = 0.3f;
    p.n_needles = 4;
    p.needle_len = 8;
    p.needle_share = 0.3f;
    p.group_corr = 0.7f;
    return p;
}

/* Fills v[n][d] with orthonormal rows from Gaussian draws (Gram-Schmidt, twice for
 * stability). n < d always here. */
static void random_orthonormal(rng_t *r, int32_t n, int32_t d, double *v, int fast) {
    for (int32_t a = 0; a < n; a++) {
        double *x = v + (size_t)a * (size_t)d;
        for (int32_t c = 0; c < d; c++) x[c] = fast ? rng_fast_normal(r) : rng_normal(r);
        for (int pass = 0; pass < 2; pass++) {
            for (int32_t b = 0; b < a; b++) {
                const double *y = v + (size_t)b * (size_t)d;
                double dot = 0.0;
                for (int32_t c = 0; c < d; c++) dot += x[c] * y[c];
                for (int32_t c = 0; c < d; c++) x[c] -= dot * y[c];
            }
        }
        double nn = 0.0;
        for (int32_t c = 0; c < d; c++) nn += x[c] * x[c];
        nn = 1.0 / sqrt(nn);
        for (int32_t c = 0; c < d; c++) x[c] *= nn;
    }
}

locks_synth *locks_synth_init(locks_synth_params p, locks_status *err) {
    locks_status st = LOCKS_ERR_INVALID_ARG;
    locks_synth *s = NULL;
    double bg_share = 1.0 - (double)p.sink_share - (double)p.needle_share;
    if (p.n_kv_heads < 1 || p.n_q_heads < 1 || p.n_q_heads % p.n_kv_heads != 0 ||
        p.head_dim < 8 || p.head_dim > LOCKS_MAX_HEAD_DIM || p.context < 1 || p.rank_min < 1 ||
        p.rank_max < p.rank_min || p.rank_max > LOCKS_MAX_RANK || !(p.spectrum_decay > 0.0f) ||
        !(p.page_logit_std >= 0.0f) || !(p.token_logit_std > 0.0f) || !(p.noise_frac >= 0.0f) ||
        !(p.mean_norm >= 0.0f) || p.n_sink_tokens < 0 || p.n_sink_tokens > LOCKS_PAGE ||
        !(p.sink_share > 0.0f) || p.n_needles < 0 || p.needle_len < 1 ||
        p.needle_len > LOCKS_PAGE || !(p.needle_share > 0.0f) || !(bg_share > 0.0) ||
        !(p.group_corr >= 0.0f && p.group_corr <= 1.0f))
        goto fail;
    st = LOCKS_ERR_OOM;
    s = locks_alloc(1, sizeof *s);
    if (!s) goto fail;
    s->p = p;
    const int32_t d = p.head_dim;
    s->qn2 = 3.0; /* sink part 1 + needle part 1 + random part 1, per coordinate */

    /* Logit offsets from the target shares: the background's N_bg logits have variance
     * var_bg, so its mass is about N_bg exp(var_bg / 2) (log-normal mean). */
    double var_bg = (double)p.page_logit_std * (double)p.page_logit_std +
                    (double)p.token_logit_std * (double)p.token_logit_std *
                        (1.0 + (double)p.noise_frac);
    double n_bg = (double)p.context - (double)p.n_sink_tokens;
    if (n_bg < 1.0) n_bg = 1.0;
    double log_bg = log(n_bg) + 0.5 * var_bg;
    s->l_sink = p.n_sink_tokens > 0
                    ? log_bg + log((double)p.sink_share / bg_share) - log((double)p.n_sink_tokens)
                    : 0.0;

    /* Needle pages: one per equal segment of [2, n_full - 2), away from the forced
     * sink page 0 and the most recent pages. */
    int32_t n_full = p.context / LOCKS_PAGE;
    int32_t lo = 2, hi = n_full - 2;
    int32_t nn = hi - lo < p.n_needles ? (hi > lo ? hi - lo : 0) : p.n_needles;
    s->n_needles = nn;
    s->needles = locks_alloc((size_t)(nn > 0 ? nn : 1), sizeof(int32_t));
    s->needle_off = locks_alloc((size_t)(nn > 0 ? nn : 1), sizeof(int32_t));
    s->dirs = locks_alloc((size_t)p.n_kv_heads * 3u * (size_t)d, sizeof(double));
    if (!s->needles || !s->needle_off || !s->dirs) goto fail;
    rng_t r = rng_stream(p.seed, UINT64_MAX, UINT64_MAX, 7);
    for (int32_t i = 0; i < nn; i++) {
        int32_t a = lo + (int32_t)((int64_t)(hi - lo) * i / nn);
        int32_t b = lo + (int32_t)((int64_t)(hi - lo) * (i + 1) / nn);
        s->needles[i] = a + (int32_t)(rng_u64(&r) % (uint64_t)(b - a));
        s->needle_off[i] = (int32_t)(rng_u64(&r) % (uint64_t)(LOCKS_PAGE - p.needle_len + 1));
    }
    /* needle tokens carry a quarter of the background structure: variance var_bg/16 */
    s->l_needle = nn > 0 ? log(n_bg / ((double)nn * p.needle_len)) +
                               log((double)p.needle_share / bg_share) + 0.5 * var_bg -
                               0.5 * var_bg / 16.0
                         : 0.0;
    for (int32_t h = 0; h < p.n_kv_heads; h++) {
        rng_t rh = rng_stream(p.seed, (uint64_t)h, UINT64_MAX, 1);
        random_orthonormal(&rh, 3, d, s->dirs + (size_t)h * 3u * (size_t)d, 0);
    }
    return s;
fail:
    if (err) *err = st;
    locks_synth_free(s);
    return NULL;
}

void locks_synth_free(locks_synth *s) {
    if (!s) return;
    locks_free(s->dirs);
    locks_free(s->needles);
    locks_free(s->needle_off);
    locks_free(s);
}

locks_synth_params locks_synth_get_params(const locks_synth *s) { return s->p; }

const int32_t *locks_synth_needles(const locks_synth *s, int32_t *n) {
    if (n) *n = s ? s->n_needles : 0;
    return s ? s->needles : NULL;
}

void locks_synth_logit_offsets(const locks_synth *s, double *sink, double *needle) {
    if (sink) *sink = s->l_sink;
    if (needle) *needle = s->l_needle;
}

/* ---------------------------------------------------------------------------------- */
/* Generation                                                                           */
/* ---------------------------------------------------------------------------------- */

/* One (page, head) block: k[16][d], v[16][d]; scratch holds rank_max x d + d doubles. */
static void gen_block(const locks_synth *s, int32_t h, int32_t j, double *k, double *v,
                      double *scratch) {
    const locks_synth_params *p = &s->p;
    const int32_t d = p->head_dim;
    const double *mu = s->dirs + (size_t)h * 3u * (size_t)d;
    const double *w = mu + d, *nd = mu + 2 * d;
    const double unit = 1.0 / sqrt(s->qn2); /* key coordinate std giving logit std 1 */
    rng_t r = rng_stream(p->seed, (uint64_t)h, (uint64_t)j, 2);

    int32_t rank = p->rank_min + (int32_t)(rng_u64(&r) % (uint64_t)(p->rank_max - p->rank_min + 1));
    double *basis = scratch, *centre = scratch + (size_t)p->rank_max * (size_t)d;
    random_orthonormal(&r, rank, d, basis, 1);
    for (int32_t c = 0; c < d; c++) centre[c] = rng_fast_normal(&r) * (double)p->page_logit_std * unit;
    /* Component variances: geometric, summing to token_logit_std^2 d / qn2. */
    double sd[LOCKS_MAX_RANK], tot = 0.0;
    for (int32_t a = 0; a < rank; a++) tot += pow((double)p->spectrum_decay, a);
    for (int32_t a = 0; a < rank; a++)
        sd[a] = sqrt(pow((double)p->spectrum_decay, a) / tot * (double)d / s->qn2) *
                (double)p->token_logit_std;
    double noise_sd = sqrt((double)p->noise_frac) * (double)p->token_logit_std * unit;
    double mnorm = (double)p->mean_norm * sqrt((double)d);

    int32_t needle = -1;
    for (int32_t i = 0; i < s->n_needles; i++)
        if (s->needles[i] == j) needle = i;

    for (int32_t i = 0; i < LOCKS_PAGE; i++) {
        double *ki = k + (size_t)i * (size_t)d;
        for (int32_t c = 0; c < d; c++) ki[c] = mnorm * mu[c] + rng_fast_normal(&r) * noise_sd;
        if (j == 0 && i < p->n_sink_tokens) {
            for (int32_t c = 0; c < d; c++) ki[c] += s->l_sink * w[c];
            continue;
        }
        /* needle tokens keep a quarter of the page's own structure: still in its affine
         * subspace (plus the needle direction), but with a steadier logit */
        int is_needle = needle >= 0 && i >= s->needle_off[needle] &&
                        i < s->needle_off[needle] + p->needle_len;
        double f = is_needle ? 0.25 : 1.0;
        for (int32_t c = 0; c < d; c++) ki[c] += f * centre[c];
        for (int32_t a = 0; a < rank; a++) {
            double coef = f * rng_fast_normal(&r) * sd[a];
            const double *b = basis + (size_t)a * (size_t)d;
            for (int32_t c = 0; c < d; c++) ki[c] += coef * b[c];
        }
        if (is_needle)
            for (int32_t c = 0; c < d; c++) ki[c] += s->l_needle * nd[c];
    }
    rng_t rv = rng_stream(p->seed, (uint64_t)h, (uint64_t)j, 3);
    for (int32_t i = 0; i < LOCKS_PAGE * d; i++) v[i] = rng_fast_normal(&rv);
}

/* Tokens [pos, pos + n) from the pages [j0, j1) of that range. */
static locks_status gen_range(const locks_synth *s, int32_t pos, int32_t n, int32_t j0, int32_t j1,
                              float *k, float *v) {
    const int32_t d = s->p.head_dim, H = s->p.n_kv_heads;
    double *kb = locks_alloc((size_t)LOCKS_PAGE * (size_t)d, sizeof(double));
    double *vb = locks_alloc((size_t)LOCKS_PAGE * (size_t)d, sizeof(double));
    double *scratch = locks_alloc((size_t)(s->p.rank_max + 1) * (size_t)d, sizeof(double));
    locks_status st = LOCKS_ERR_OOM;
    if (!kb || !vb || !scratch) goto done;
    for (int32_t j = j0; j < j1; j++) {
        for (int32_t h = 0; h < H; h++) {
            gen_block(s, h, j, kb, vb, scratch);
            for (int32_t i = 0; i < LOCKS_PAGE; i++) {
                int32_t t = j * LOCKS_PAGE + i;
                if (t < pos || t >= pos + n) continue;
                size_t o = ((size_t)(t - pos) * (size_t)H + (size_t)h) * (size_t)d;
                for (int32_t c = 0; c < d; c++) {
                    k[o + (size_t)c] = (float)kb[i * d + c];
                    v[o + (size_t)c] = (float)vb[i * d + c];
                }
            }
        }
    }
    st = LOCKS_OK;
done:
    locks_free(kb);
    locks_free(vb);
    locks_free(scratch);
    return st;
}

locks_status locks_synth_kv(const locks_synth *s, int32_t pos, int32_t n, float *k, float *v) {
    if (!s || !k || !v || pos < 0 || n < 0 || n > s->p.context - pos) return LOCKS_ERR_INVALID_ARG;
    if (n == 0) return LOCKS_OK;
    return gen_range(s, pos, n, pos / LOCKS_PAGE, (pos + n - 1) / LOCKS_PAGE + 1, k, v);
}

locks_status locks_synth_query(const locks_synth *s, int32_t step, float *q) {
    if (!s || !q || step < 0) return LOCKS_ERR_INVALID_ARG;
    const locks_synth_params *p = &s->p;
    const int32_t d = p->head_dim, G = p->n_q_heads / p->n_kv_heads;
    const double c = (double)p->group_corr, sq = sqrt((double)d);
    for (int32_t h = 0; h < p->n_kv_heads; h++) {
        const double *w = s->dirs + ((size_t)h * 3u + 1u) * (size_t)d, *nd = w + d;
        rng_t rz = rng_stream(p->seed, (uint64_t)h, (uint64_t)step, 4);
        for (int32_t g = 0; g < G; g++) {
            rng_t re = rng_stream(p->seed, (uint64_t)(h * G + g), (uint64_t)step, 5);
            rng_t rzg = rz; /* the same z for every head of the group */
            float *qh = q + (size_t)(h * G + g) * (size_t)d;
            for (int32_t i = 0; i < d; i++) {
                double z = rng_normal(&rzg), e = rng_normal(&re);
                qh[i] = (float)(sq * (w[i] + nd[i]) + sqrt(c) * z + sqrt(1.0 - c) * e);
            }
        }
    }
    return LOCKS_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Filling a cache                                                                      */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    const locks_synth *s;
    int32_t pos, n, j0, j1;
    float *k, *v; /* the whole chunk's buffers ([n][Hkv][d], starting at token pos) */
    locks_status st;
} fill_job;

static void *fill_worker(void *arg) {
    fill_job *f = arg;
    int32_t d = f->s->p.head_dim, H = f->s->p.n_kv_heads;
    /* this worker's pages cover tokens [t0, t1) of the chunk */
    int32_t t0 = f->j0 * LOCKS_PAGE, t1 = f->j1 * LOCKS_PAGE;
    if (t0 < f->pos) t0 = f->pos;
    if (t1 > f->pos + f->n) t1 = f->pos + f->n;
    size_t off = (size_t)(t0 - f->pos) * (size_t)H * (size_t)d;
    f->st = t1 > t0 ? gen_range(f->s, t0, t1 - t0, f->j0, f->j1, f->k + off, f->v + off) : LOCKS_OK;
    return NULL;
}

#define FILL_CHUNK 4096 /* tokens per locks_cache_write */
#define FILL_MAX_THREADS 64

locks_status locks_synth_fill(const locks_synth *s, locks_cache *c, int32_t seq_id,
                              int32_t layer, int32_t n_threads) {
    if (!s || !c) return LOCKS_ERR_INVALID_ARG;
    locks_cache_params cp = locks_cache_get_params(c);
    const int32_t d = s->p.head_dim, H = s->p.n_kv_heads, ctx = s->p.context;
    if (cp.n_kv_heads != H || cp.head_dim != d) return LOCKS_ERR_INVALID_ARG;
    int32_t len = locks_cache_seq_len(c, seq_id);
    if (len < 0) return LOCKS_ERR_NO_SEQ;
    locks_status st;
    if (len == 0) {
        st = locks_cache_append(c, seq_id, ctx);
        if (st != LOCKS_OK) return st;
    } else if (len != ctx) {
        return LOCKS_ERR_INVALID_ARG;
    }
    if (n_threads < 1) n_threads = 1;
    if (n_threads > FILL_MAX_THREADS) n_threads = FILL_MAX_THREADS;
    float *k = locks_alloc((size_t)FILL_CHUNK * (size_t)H * (size_t)d, sizeof(float));
    float *v = locks_alloc((size_t)FILL_CHUNK * (size_t)H * (size_t)d, sizeof(float));
    st = LOCKS_ERR_OOM;
    if (!k || !v) goto done;
    for (int32_t pos = 0; pos < ctx; pos += FILL_CHUNK) {
        int32_t n = ctx - pos < FILL_CHUNK ? ctx - pos : FILL_CHUNK;
        int32_t j0 = pos / LOCKS_PAGE, j1 = (pos + n - 1) / LOCKS_PAGE + 1;
        int32_t nt = n_threads < j1 - j0 ? n_threads : j1 - j0;
        fill_job jobs[FILL_MAX_THREADS];
        pthread_t tid[FILL_MAX_THREADS];
        uint8_t spawned[FILL_MAX_THREADS] = {0};
        for (int32_t t = 0; t < nt; t++) {
            jobs[t] = (fill_job){s, pos, n, j0 + (int32_t)((int64_t)(j1 - j0) * t / nt),
                                 j0 + (int32_t)((int64_t)(j1 - j0) * (t + 1) / nt), k, v, LOCKS_ERR_OOM};
            if (t > 0) spawned[t] = pthread_create(&tid[t], NULL, fill_worker, &jobs[t]) == 0;
        }
        fill_worker(&jobs[0]);
        for (int32_t t = 1; t < nt; t++) {
            if (spawned[t])
                pthread_join(tid[t], NULL);
            else
                fill_worker(&jobs[t]);
        }
        for (int32_t t = 0; t < nt; t++)
            if (jobs[t].st != LOCKS_OK) {
                st = jobs[t].st;
                goto done;
            }
        st = locks_cache_write(c, seq_id, layer, pos, n, k, v);
        if (st != LOCKS_OK) goto done;
    }
    st = LOCKS_OK;
done:
    locks_free(k);
    locks_free(v);
    return st;
}
