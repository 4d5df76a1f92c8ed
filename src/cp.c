/*
 * cp.c — context-parallel decode step: one sequence's pages sharded across ranks in
 * contiguous whole-page ranges, each rank a locks_cache of its own (locks.h, "Context
 * parallelism"; the design and exactness argument are in docs/CONTEXT_PARALLEL.md).
 *
 * One step, on every rank, mirrors locks_decode_step phase by phase:
 *   1. check  — local checks (shape, shard, budget against the *global* length), then
 *               all-gather #1 of a header: status, shard extent, and per query head the
 *               local (max, sum exp(s - max)) of the selector scores. Any bad status or
 *               shards that do not tile the sequence: every rank returns the same error.
 *   2. mass   — Z_h combined from the pairs in rank order (all ranks bit-identical);
 *               masses m_hj = mean_g exp(s_gj - M_g) / S_g exactly as score.c does,
 *               only the sum S_g is combined across ranks.
 *   3. top-k  — per KV head the rank's k best non-forced pages (k = the global free
 *               slots, so the union of the local top-k holds the global top-k), as the
 *               64-bit keys select.c ranks by (mass, then lower logical index): all-gather
 *               #2, then every rank takes the top k of the R * k keys.
 *   4. attend — each rank attends its selected pages (+ forced, + the partial page if it
 *               holds it) with the CPU attention, keeping the per-head lse; all-gather #3
 *               of (o, lse) and the rank's status, merged by log-sum-exp in rank order
 *               (double accumulation).
 * Dense steps (full selector, budget >= length) and steps with no free slot (k = 0)
 * skip the scores and gather #2. Every collective has a size all ranks know in advance,
 * all scratch is allocated before the first one, and a rank that fails after it still
 * takes part in the rest: every rank returns the same status and none is left waiting.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "cp.h"
#include "decode.h"
#include "plan.h"
#include "selector.h"
#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE };

/* ---------------------------------------------------------------------------------- */
/* Communicator                                                                        */
/* ---------------------------------------------------------------------------------- */

struct locks_cp_group {
    int32_t n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t waiting;
    uint64_t generation;
    const void **src; /* [n]: each rank's send buffer during an all-gather */
};

locks_cp_group *locks_cp_group_init(int32_t n_ranks, locks_status *err) {
    locks_status st = LOCKS_ERR_INVALID_ARG;
    locks_cp_group *g = NULL;
    if (n_ranks < 1) goto fail;
    st = LOCKS_ERR_OOM;
    g = locks_alloc(1, sizeof *g);
    if (!g) goto fail;
    g->src = locks_alloc((size_t)n_ranks, sizeof *g->src);
    if (!g->src) goto fail;
    g->n = n_ranks;
    if (pthread_mutex_init(&g->mu, NULL) != 0) goto fail;
    if (pthread_cond_init(&g->cv, NULL) != 0) {
        pthread_mutex_destroy(&g->mu);
        goto fail;
    }
    if (err) *err = LOCKS_OK;
    return g;
fail:
    if (g) locks_free(g->src);
    locks_free(g);
    if (err) *err = st;
    return NULL;
}

void locks_cp_group_free(locks_cp_group *g) {
    if (!g) return;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    locks_free(g->src);
    locks_free(g);
}

static void group_barrier(locks_cp_group *g) {
    pthread_mutex_lock(&g->mu);
    const uint64_t gen = g->generation;
    if (++g->waiting == g->n) {
        g->waiting = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->generation) pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

locks_status locks_cp_nccl_unique_id(uint8_t *id) {
    if (!id) return LOCKS_ERR_INVALID_ARG;
#ifdef LOCKS_HAVE_NCCL
    return locks_cp_nccl_get_id(id);
#else
    return LOCKS_ERR_UNSUPPORTED;
#endif
}

locks_cp_comm *locks_cp_comm_init(locks_cp_comm_params p, locks_status *err) {
    locks_status st = LOCKS_ERR_INVALID_ARG;
    locks_cp_comm *c = NULL;
    if (p.n_ranks < 1 || p.rank < 0 || p.rank >= p.n_ranks) goto fail;
    switch (p.backend) {
    case LOCKS_CP_LOCAL:
        if (!p.group || p.group->n != p.n_ranks) goto fail;
        break;
    case LOCKS_CP_NCCL:
        if (!p.nccl_id || p.device < 0) goto fail;
#ifndef LOCKS_HAVE_NCCL
        st = LOCKS_ERR_UNSUPPORTED;
        goto fail;
#endif
        break;
    default:
        goto fail;
    }
    st = LOCKS_ERR_OOM;
    c = locks_alloc(1, sizeof *c);
    if (!c) goto fail;
    c->backend = p.backend;
    c->n_ranks = p.n_ranks;
    c->rank = p.rank;
    c->group = p.group;
#ifdef LOCKS_HAVE_NCCL
    if (p.backend == LOCKS_CP_NCCL) {
        c->nccl = locks_cp_nccl_init(p.nccl_id, p.n_ranks, p.rank, p.device, &st);
        if (!c->nccl) goto fail;
    }
#endif
    if (err) *err = LOCKS_OK;
    return c;
fail:
    locks_free(c);
    if (err) *err = st;
    return NULL;
}

void locks_cp_comm_free(locks_cp_comm *comm) {
    if (!comm) return;
#ifdef LOCKS_HAVE_NCCL
    if (comm->nccl) locks_cp_nccl_free(comm->nccl);
#endif
    locks_free(comm);
}

locks_status locks_cp_allgather(locks_cp_comm *comm, const void *send, void *recv, size_t bytes) {
    switch (comm->backend) {
    case LOCKS_CP_LOCAL: {
        locks_cp_group *g = comm->group;
        g->src[comm->rank] = send;
        group_barrier(g);
        for (int32_t r = 0; r < g->n; r++)
            memcpy((uint8_t *)recv + (size_t)r * bytes, g->src[r], bytes);
        group_barrier(g);
        return LOCKS_OK;
    }
    case LOCKS_CP_NCCL:
#ifdef LOCKS_HAVE_NCCL
        return locks_cp_nccl_allgather(comm->nccl, send, recv, bytes);
#else
        return LOCKS_ERR_UNSUPPORTED;
#endif
    }
    return LOCKS_ERR_INVALID_ARG;
}

void locks_cp_partition(int32_t len, int32_t n_ranks, int32_t rank, int32_t *tok0, int32_t *n_tok) {
    *tok0 = 0;
    *n_tok = 0;
    if (len <= 0 || n_ranks < 1 || rank < 0 || rank >= n_ranks) return;
    const int64_t pages = (len + P - 1) / P;
    const int64_t p0 = pages * rank / n_ranks, p1 = pages * (rank + 1) / n_ranks;
    const int64_t t0 = p0 * P, t1 = p1 * P < len ? p1 * P : len;
    *tok0 = (int32_t)t0;
    *n_tok = (int32_t)(t1 - t0);
}

/* ---------------------------------------------------------------------------------- */
/* The step                                                                            */
/* ---------------------------------------------------------------------------------- */

/* Header of all-gather #1, followed by [Hq][2] doubles: (max, sum exp(s - max)). */
typedef struct {
    int32_t status, page0, n_pages, len;
    /* what must agree on every rank (the collectives' sizes and the result depend on it) */
    int32_t global_len, n_q_heads, selector, budget, n_sink, n_recent;
    int32_t n_kv_heads, head_dim; /* the shards' shape: it sizes gathers #2 and #3 */
    uint32_t scale_bits, q_hash;
} cp_header;

_Static_assert(sizeof(cp_header) % 8 == 0, "the normaliser pairs (doubles) follow the header");

/* FNV-1a over the query's bits: ranks given different queries are a caller bug that
 * would silently mix two steps. */
static uint32_t q_hash(const float *q, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &q[i], 4);
        h = (h ^ b) * 16777619u;
    }
    return h;
}

typedef struct {
    locks_cp_comm *comm;
    locks_cp_stats *st;
} cp_ctx;

static locks_status gather(cp_ctx *x, const void *send, void *recv, size_t bytes) {
    double t0 = locks_now_ms();
    locks_status s = locks_cp_allgather(x->comm, send, recv, bytes);
    x->st->comm_ms += locks_now_ms() - t0;
    x->st->bytes_sent += bytes;
    x->st->n_collectives++;
    return s;
}

static int cp_selector_ok(locks_selector s) {
    return s == LOCKS_SEL_FULL || s == LOCKS_SEL_ORACLE || s == LOCKS_SEL_LOCKS || s == LOCKS_SEL_QUEST;
}

/* Full page j is forced under the step's plan. */
static int is_forced(int32_t j, const locks_plan *pl) { return j < pl->sink || j >= pl->rs; }

/* Local checks; LOCKS_OK or the status this rank reports in the header. */
static locks_status cp_check(const locks_cp_shard *sh, int32_t layer, const float *q, int32_t hq,
                             const locks_step_params *p, const float *out,
                             const locks_selection *sel, const locks_seq **seq) {
    *seq = NULL;
    locks_cache *c = sh->cache;
    if (!c || !q || !p || !out || sh->global_len <= 0 || sh->page0 < 0) return LOCKS_ERR_INVALID_ARG;
    if (!c->host_pages) return LOCKS_ERR_UNSUPPORTED; /* the per-rank step is the CPU one (docs/CONTEXT_PARALLEL.md) */
    const int32_t H = c->hkv;
    if (layer < 0 || layer >= c->p.n_layers || hq < H || hq % H != 0) return LOCKS_ERR_INVALID_ARG;
    if (hq / H > 64) return LOCKS_ERR_UNSUPPORTED;
    if (!locks_selector_available(p->selector) || !locks_scale_ok(p->scale)) return LOCKS_ERR_INVALID_ARG;
    if (!cp_selector_ok(p->selector)) return LOCKS_ERR_UNSUPPORTED;
    if (!locks_selector_served(c, p->selector)) return LOCKS_ERR_NO_META;
    if (p->mass != 0.0f) return LOCKS_ERR_UNSUPPORTED; /* mass targets: single cache only */
    if (sh->seq_id >= 0) {
        const locks_seq *s = locks_cache_seq(c, sh->seq_id);
        if (!s) return LOCKS_ERR_NO_SEQ;
        if (s->len == 0) return LOCKS_ERR_INVALID_ARG;
        const int64_t end = (int64_t)sh->page0 * P + s->len;
        if (end > sh->global_len) return LOCKS_ERR_INVALID_ARG;
        if (end != sh->global_len && s->len % P != 0) return LOCKS_ERR_INVALID_ARG; /* partial not at the tail */
        *seq = s;
    }
    const locks_seq whole = {1, sh->global_len, (sh->global_len + P - 1) / P, NULL};
    locks_status st = locks_select_check(&whole, p);
    if (st != LOCKS_OK) return st;
    if (sel && (!sel->pages || !sel->n_pages || sel->max_pages < whole.n_pages)) return LOCKS_ERR_INVALID_ARG;
    if (!locks_all_finite(q, (size_t)hq * c->d)) return LOCKS_ERR_NONFINITE;
    return LOCKS_OK;
}

/* The gathered headers: first bad status in rank order, else whether the shards tile
 * [0, global pages) with the partial page (if any) at the tail. */
static locks_status cp_check_tiling(const uint8_t *recv, size_t hdr_bytes, int32_t R, int32_t global_len) {
    cp_header h0;
    memcpy(&h0, recv, sizeof h0);
    for (int32_t r = 0; r < R; r++) {
        cp_header h;
        memcpy(&h, recv + (size_t)r * hdr_bytes, sizeof h);
        if (h.status != LOCKS_OK) return (locks_status)h.status;
    }
    for (int32_t r = 1; r < R; r++) { /* the same step on every rank */
        cp_header h;
        memcpy(&h, recv + (size_t)r * hdr_bytes, sizeof h);
        if (h.global_len != h0.global_len || h.n_q_heads != h0.n_q_heads || h.selector != h0.selector ||
            h.budget != h0.budget || h.n_sink != h0.n_sink || h.n_recent != h0.n_recent ||
            h.n_kv_heads != h0.n_kv_heads || h.head_dim != h0.head_dim || h.scale_bits != h0.scale_bits ||
            h.q_hash != h0.q_hash)
            return LOCKS_ERR_INVALID_ARG;
    }
    const int32_t n_pages = (global_len + P - 1) / P;
    /* walk the pages in order: exactly one rank starts where the previous one ended */
    int32_t next = 0;
    for (int32_t guard = 0; guard < R && next < n_pages; guard++) {
        int32_t owner = -1;
        cp_header o;
        for (int32_t r = 0; r < R; r++) {
            cp_header h;
            memcpy(&h, recv + (size_t)r * hdr_bytes, sizeof h);
            if (h.n_pages > 0 && h.page0 == next) {
                if (owner >= 0) return LOCKS_ERR_INVALID_ARG; /* two ranks claim the same page */
                owner = r;
                o = h;
            }
        }
        if (owner < 0) return LOCKS_ERR_INVALID_ARG; /* a gap */
        next += o.n_pages;
        if (next > n_pages) return LOCKS_ERR_INVALID_ARG;
        if (next == n_pages && (int64_t)o.page0 * P + o.len != global_len) return LOCKS_ERR_INVALID_ARG;
    }
    if (next != n_pages) return LOCKS_ERR_INVALID_ARG;
    int32_t claimed = 0; /* and nobody claims pages outside the walk */
    for (int32_t r = 0; r < R; r++) {
        cp_header h;
        memcpy(&h, recv + (size_t)r * hdr_bytes, sizeof h);
        claimed += h.n_pages;
    }
    return claimed == n_pages ? LOCKS_OK : LOCKS_ERR_INVALID_ARG;
}

/* One decode step's state on this rank: what every rank knows without communicating
 * (the global plan), this rank's shard, and the scratch carved from one allocation. */
typedef struct {
    locks_cache *c;
    const locks_cp_shard *shard;
    const locks_seq *s; /* the shard's sequence, NULL if its checks failed */
    int32_t R, hq, H, d, G;
    int32_t len_g, n_full_g, partial_g, n_pages_g; /* the global sequence */
    locks_plan plan;
    int dense;
    int32_t k;                 /* pages chosen per KV head beyond the forced ones */
    int32_t n_local, n_full_l; /* this rank's pages, and its full ones */
    size_t hdr_bytes, cand_n, part_n, part_pad;
    /* scratch: headers (own + R received), candidate keys (own + R), the global merge,
     * local keys, partials (own + R), scores [hq][n_full_l], masses [H][n_full_l], a row,
     * page lists [H][n_local + 1], their counts [H], the global page flags */
    uint8_t *hdr, *hdr_recv;
    uint64_t *cand, *cand_recv, *all, *keys;
    float *part, *part_recv, *scores, *mass, *row;
    int32_t *pages, *n_pages;
    uint8_t *gflag;
    float scale;
} cp_step;

/* The plan and the scratch sizes (consistent across ranks once the header shows that
 * every rank passed its checks with the same global length). */
static void step_plan(cp_step *t, const locks_cp_comm *comm, const locks_cp_shard *shard, int32_t n_q_heads,
                      const locks_step_params *p, const locks_seq *s) {
    locks_cache *c = shard->cache;
    t->c = c;
    t->shard = shard;
    t->s = s;
    t->R = comm->n_ranks, t->hq = n_q_heads;
    t->H = c->hkv, t->d = c->d, t->G = t->hq / t->H > 0 ? t->hq / t->H : 1;
    t->len_g = shard->global_len > 0 ? shard->global_len : 0;
    t->n_full_g = t->len_g / P, t->partial_g = t->len_g % P, t->n_pages_g = (t->len_g + P - 1) / P;
    t->plan = locks_plan_make(t->len_g, p->budget, p->n_sink, p->n_recent, p->selector == LOCKS_SEL_FULL);
    t->dense = t->plan.dense;
    t->k = t->dense || t->plan.k < 0 ? 0 : t->plan.k;
    t->n_local = s ? s->n_pages : 0, t->n_full_l = s ? s->len / P : 0;
    t->hdr_bytes = sizeof(cp_header) + (size_t)t->hq * 2 * sizeof(double);
    t->cand_n = (size_t)t->H * (size_t)t->k;                /* keys sent per rank */
    t->part_n = (size_t)t->hq * ((size_t)t->d + 1) + 1;     /* (o, lse) + status, floats */
    t->part_pad = (t->part_n + 1) & ~(size_t)1;
}

static size_t step_bytes(const cp_step *t) {
    const size_t R = (size_t)t->R, k = (size_t)t->k, nf = (size_t)t->n_full_l;
    return t->hdr_bytes * (R + 1) + sizeof(uint64_t) * (t->cand_n * (R + 1) + R * k + nf + 1) +
           sizeof(float) * (t->part_pad * (R + 1) + (size_t)(t->hq + t->H + 1) * nf) +
           sizeof(int32_t) * ((size_t)t->H * ((size_t)t->n_local + 1) + (size_t)t->H) + (size_t)t->n_pages_g + 64;
}

static void step_carve(cp_step *t, uint8_t *b) {
    t->hdr = b, t->hdr_recv = b + t->hdr_bytes;
    b += t->hdr_bytes * ((size_t)t->R + 1);
    t->cand = (uint64_t *)(void *)b, t->cand_recv = t->cand + t->cand_n;
    t->all = t->cand_recv + t->cand_n * (size_t)t->R;
    t->keys = t->all + (size_t)t->R * t->k;
    t->part = (float *)(void *)(t->keys + t->n_full_l + 1), t->part_recv = t->part + t->part_pad;
    t->scores = t->part_recv + t->part_pad * (size_t)t->R, t->mass = t->scores + (size_t)t->hq * t->n_full_l;
    t->row = t->mass + (size_t)t->H * t->n_full_l;
    t->pages = (int32_t *)(void *)(t->row + t->n_full_l), t->n_pages = t->pages + (size_t)t->H * (t->n_local + 1);
    t->gflag = (uint8_t *)(t->n_pages + t->H);
}

/* The scratch could not be allocated: announce LOCKS_ERR_OOM in the header round so
 * nobody hangs (the header is tiny). */
static locks_status announce_oom(cp_ctx *x, const cp_step *t) {
    uint8_t *tmp = locks_alloc((size_t)t->R + 1, t->hdr_bytes);
    if (!tmp) return LOCKS_ERR_OOM; /* documented limit: the other ranks would wait */
    cp_header me;
    memset(&me, 0, sizeof me);
    me.status = LOCKS_ERR_OOM;
    memcpy(tmp, &me, sizeof me);
    locks_status gs = gather(x, tmp, tmp + t->hdr_bytes, t->hdr_bytes);
    locks_free(tmp);
    return gs != LOCKS_OK ? gs : LOCKS_ERR_OOM;
}

/* 1. The local page scores and, per query head, their (max, sum exp) into the header's
 * pairs; then the header itself. Returns the local status. */
static locks_status local_scores(cp_step *t, int32_t layer, const float *q, const locks_step_params *p,
                                 locks_status st) {
    double *pairs = (double *)(void *)(t->hdr + sizeof(cp_header));
    for (int32_t h = 0; h < t->hq; h++) {
        pairs[2 * h] = -INFINITY;
        pairs[2 * h + 1] = 0.0;
    }
    if (st == LOCKS_OK && !t->dense && t->k > 0 && t->n_full_l > 0) {
        locks_seq_work w;
        memset(&w, 0, sizeof w);
        w.seq_id = t->shard->seq_id;
        w.s = t->s;
        w.q = q;
        w.scores = t->scores;
        locks_cache_lock(t->c);
        st = locks_score_run(t->c, layer, &w, 1, t->hq, p->selector, t->scale, 0);
        locks_cache_unlock(t->c);
        for (int32_t h = 0; h < t->hq && st == LOCKS_OK; h++) {
            memcpy(t->row, t->scores + (size_t)h * t->n_full_l, sizeof(float) * (size_t)t->n_full_l);
            const float mx = locks_max_n(t->row, (size_t)t->n_full_l);
            pairs[2 * h] = mx;
            pairs[2 * h + 1] = locks_exp_sum_n(t->row, (size_t)t->n_full_l, mx);
        }
    }
    cp_header me;
    memset(&me, 0, sizeof me);
    me.status = st;
    me.page0 = t->shard->page0;
    me.n_pages = t->n_local;
    me.len = t->s ? t->s->len : 0;
    me.global_len = t->shard->global_len;
    me.n_q_heads = t->hq;
    me.selector = p->selector;
    me.budget = p->budget;
    me.n_sink = p->n_sink;
    me.n_recent = p->n_recent;
    me.n_kv_heads = t->H;
    me.head_dim = t->d;
    memcpy(&me.scale_bits, &p->scale, 4);
    me.q_hash = q && st == LOCKS_OK ? q_hash(q, (size_t)t->hq * t->d) : 0;
    memcpy(t->hdr, &me, sizeof me);
    return st;
}

/* 2. Per KV head: the masses of the local full pages (score.c's arithmetic with the
 * global (M, S) of gather #1) and this rank's k best non-forced pages, 0-padded, into
 * cand. */
static void local_candidates(cp_step *t, const locks_step_params *p, locks_status st) {
    const locks_group_rule rule = locks_selector_group_rule(p->selector);
    const int32_t n_full_l = t->n_full_l, G = t->G, k = t->k;
    for (int32_t h = 0; h < t->H; h++) {
        float *m = t->mass + (size_t)h * n_full_l;
        for (int32_t i = 0; i < n_full_l; i++) m[i] = 0.0f;
        for (int32_t g = 0; g < G && n_full_l > 0; g++) {
            const int32_t qh = h * G + g;
            double M = -INFINITY, S = 0.0;
            for (int32_t r = 0; r < t->R; r++) {
                const double *pr = (const double *)(void *)(t->hdr_recv + (size_t)r * t->hdr_bytes + sizeof(cp_header));
                if (pr[2 * qh + 1] > 0.0 && pr[2 * qh] > M) M = pr[2 * qh];
            }
            for (int32_t r = 0; r < t->R; r++) {
                const double *pr = (const double *)(void *)(t->hdr_recv + (size_t)r * t->hdr_bytes + sizeof(cp_header));
                if (pr[2 * qh + 1] > 0.0) S += pr[2 * qh + 1] * exp(pr[2 * qh] - M);
            }
            float *sr = t->scores + (size_t)qh * n_full_l;
            locks_exp_sum_n(sr, (size_t)n_full_l, (float)M);
            const float inv = (float)(1.0 / S) / (rule == LOCKS_GROUP_MAX ? 1.0f : (float)G);
            if (rule == LOCKS_GROUP_MAX) {
                for (int32_t i = 0; i < n_full_l; i++) m[i] = sr[i] * inv > m[i] ? sr[i] * inv : m[i];
            } else {
                for (int32_t i = 0; i < n_full_l; i++) m[i] += sr[i] * inv;
            }
        }
        int32_t n_cand = 0;
        for (int32_t i = 0; i < n_full_l && st == LOCKS_OK; i++) {
            const int32_t j = t->shard->page0 + i;
            if (!is_forced(j, &t->plan)) t->keys[n_cand++] = locks_rank_key(m[i], j);
        }
        const int32_t kl = n_cand < k ? n_cand : k;
        if (kl > 0 && kl < n_cand) locks_top_k(t->keys, n_cand, kl);
        memcpy(t->cand + (size_t)h * k, t->keys, sizeof(uint64_t) * (size_t)kl);
    }
}

/* 3. The selection per KV head from every rank's candidates (gather #2): the local page
 * list to attend (pages, n_pages) and the global one (sel, if given). */
static void select_pages(cp_step *t, locks_selection *sel, locks_status st) {
    const int32_t n_local = t->n_local, k = t->k, R = t->R;
    for (int32_t h = 0; h < t->H; h++) {
        int32_t *pl = t->pages + (size_t)h * (n_local + 1), n = 0;
        if (t->dense) {
            for (int32_t i = 0; i < n_local; i++) pl[n++] = i;
        } else {
            memset(t->gflag, 0, (size_t)t->n_pages_g);
            for (int32_t j = 0; j < t->n_full_g; j++) t->gflag[j] = (uint8_t)is_forced(j, &t->plan);
            if (t->partial_g) t->gflag[t->n_full_g] = 1;
            if (k > 0) {
                for (int32_t r = 0; r < R; r++)
                    memcpy(t->all + (size_t)r * k, t->cand_recv + ((size_t)r * t->H + h) * k,
                           sizeof(uint64_t) * (size_t)k);
                if (R > 1) locks_top_k(t->all, R * k, k);
                for (int32_t i = 0; i < k; i++) t->gflag[~(uint32_t)t->all[i]] = 1; /* real keys: see decode.h */
            }
            for (int32_t i = 0; i < n_local; i++)
                if (t->gflag[t->shard->page0 + i]) pl[n++] = i;
        }
        t->n_pages[h] = n;
        if (sel && st == LOCKS_OK) {
            int32_t *sp = sel->pages + (size_t)h * sel->max_pages, ns = 0;
            for (int32_t j = 0; j < t->n_pages_g; j++)
                if (t->dense || t->gflag[j]) sp[ns++] = j;
            sel->n_pages[h] = ns;
        }
    }
}

/* 4. Attention over the local selection into the partials (o [hq][d], lse [hq]). */
static locks_status attend_local(cp_step *t, int32_t layer, const float *q, locks_status st) {
    float *o = t->part, *lse = t->part + (size_t)t->hq * t->d;
    for (int32_t h = 0; h < t->hq; h++) lse[h] = -INFINITY;
    if (st == LOCKS_OK && t->n_local > 0) {
        locks_seq_work w;
        memset(&w, 0, sizeof w);
        w.seq_id = t->shard->seq_id;
        w.s = t->s;
        w.q = q;
        w.pages = t->pages;
        w.n_pages = t->n_pages;
        w.max_pages = t->n_local + 1;
        w.out = o;
        w.lse = lse;
        locks_cache_lock(t->c);
        st = locks_attend_run(t->c, layer, &w, 1, t->hq, t->scale);
        locks_cache_unlock(t->c);
    }
    return st;
}

/* 5. Every rank's partials (gather #3) merged by their lse, in float64: out [hq][d]. */
static void merge_partials(const cp_step *t, float *out) {
    const int32_t hq = t->hq, d = t->d;
    for (int32_t h = 0; h < hq; h++) {
        double M = -INFINITY;
        for (int32_t r = 0; r < t->R; r++) {
            const double l = t->part_recv[(size_t)r * t->part_pad + (size_t)hq * d + h];
            M = l > M ? l : M;
        }
        float *oh = out + (size_t)h * d;
        if (isinf(M)) { /* no page anywhere: zeros, as locks_decode_step */
            memset(oh, 0, sizeof(float) * (size_t)d);
            continue;
        }
        double acc[LOCKS_MAX_HEAD_DIM] = {0}, L = 0.0;
        for (int32_t r = 0; r < t->R; r++) {
            const float *pr = t->part_recv + (size_t)r * t->part_pad;
            const double l = pr[(size_t)hq * d + h];
            if (isinf(l)) continue;
            const double wgt = exp(l - M);
            L += wgt;
            for (int32_t i = 0; i < d; i++) acc[i] += wgt * (double)pr[(size_t)h * d + i];
        }
        for (int32_t i = 0; i < d; i++) oh[i] = (float)(acc[i] / L);
    }
}

/* The bytes this rank read: summaries of its full pages, K/V of the tokens it attended. */
static void count_bytes(const cp_step *t, const locks_step_params *p, locks_cp_stats *cs) {
    const uint64_t tok_bytes = 2u * 2u * (uint64_t)t->d;
    if (t->k > 0)
        cs->bytes_meta = locks_selector_meta_bytes(p->selector, t->c) * (uint64_t)t->n_full_l * (uint64_t)t->H;
    for (int32_t h = 0; h < t->H; h++)
        for (int32_t i = 0; i < t->n_pages[h]; i++) {
            const int32_t nt = t->s->len - t->pages[(size_t)h * (t->n_local + 1) + i] * P;
            cs->bytes_kv += tok_bytes * (uint64_t)(nt < P ? nt : P);
        }
}

locks_status locks_cp_decode_step(locks_cp_comm *comm, const locks_cp_shard *shard, int32_t layer,
                                  const float *q, int32_t n_q_heads, const locks_step_params *p,
                                  float *out, locks_selection *sel, locks_cp_stats *stats) {
    /* What fixes the collectives' sizes must be valid before any communication; a call
     * that fails here returns at once (a programming error: the other ranks would wait). */
    if (!comm || !shard || !shard->cache || !p || n_q_heads < 1 || n_q_heads > 4096)
        return LOCKS_ERR_INVALID_ARG;
    locks_cp_stats cs;
    memset(&cs, 0, sizeof cs);
    cp_ctx x = {comm, &cs};
    locks_cache *c = shard->cache;
    const locks_seq *s = NULL;
    /* the cache's lock around each local part (never across a collective: ranks that
     * are threads may share one cache) */
    locks_cache_lock(c);
    locks_status st = cp_check(shard, layer, q, n_q_heads, p, out, sel, &s);
    locks_cache_unlock(c);

    cp_step t;
    step_plan(&t, comm, shard, n_q_heads, p, s);
    /* All scratch in one allocation made before the first collective, so that after it
     * nothing can fail to allocate and every rank takes part in every later collective. */
    uint8_t *buf = locks_alloc(1, step_bytes(&t));
    if (!buf) return announce_oom(&x, &t);
    step_carve(&t, buf);
    t.scale = locks_step_scale(c, p->scale);

    /* ---- 1. local scores and their (max, sum exp) per query head; gather #1 ---- */
    const double t0 = locks_now_ms();
    st = local_scores(&t, layer, q, p, st);
    cs.score_ms = locks_now_ms() - t0;
    locks_status gs = gather(&x, t.hdr, t.hdr_recv, t.hdr_bytes);
    if (gs == LOCKS_OK) gs = cp_check_tiling(t.hdr_recv, t.hdr_bytes, t.R, t.len_g);
    if (gs != LOCKS_OK) { /* every rank sees the same headers: every rank stops here */
        locks_free(buf);
        return gs;
    }

    /* From here every rank runs the same collectives; a local failure (st) travels in
     * the status slot of gather #3. */
    /* ---- 2-3. masses, local top-k, gather #2, global top-k ---- */
    const double t1 = locks_now_ms();
    double comm_before = cs.comm_ms;
    if (t.k > 0) {
        local_candidates(&t, p, st);
        gs = gather(&x, t.cand, t.cand_recv, t.cand_n * sizeof(uint64_t));
        if (gs != LOCKS_OK) {
            locks_free(buf);
            return gs;
        }
    }
    select_pages(&t, sel, st);
    const double t2 = locks_now_ms();
    cs.select_ms = (t2 - t1) - (cs.comm_ms - comm_before);

    /* ---- 4. attend the local pages; gather #3 of (o, lse, status); merge ---- */
    st = attend_local(&t, layer, q, st);
    t.part[t.part_n - 1] = (float)st;
    const double t3 = locks_now_ms();
    cs.attend_ms = t3 - t2;
    gs = gather(&x, t.part, t.part_recv, t.part_pad * sizeof(float));
    if (gs == LOCKS_OK)
        for (int32_t r = 0; r < t.R && st == LOCKS_OK; r++) /* the first failure in rank order */
            st = (locks_status)(int32_t)t.part_recv[(size_t)r * t.part_pad + t.part_n - 1];
    if (gs == LOCKS_OK && st == LOCKS_OK) merge_partials(&t, out);
    if (stats) {
        if (t.n_local > 0 && st == LOCKS_OK) count_bytes(&t, p, &cs);
        *stats = cs;
    }
    locks_free(buf);
    return gs != LOCKS_OK ? gs : st;
}
