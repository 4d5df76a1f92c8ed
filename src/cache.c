/*
 * cache.c — paged KV cache: pool, free list, block tables, fp16 K/V pages, page
 * summaries built when a page fills (see cache.h for what always holds).
 *
 * Everything is allocated in locks_cache_init; appends and writes never allocate, so
 * an append that does not fit fails before touching anything (LOCKS_ERR_POOL_FULL) and
 * a write checks its whole input for NaN/Inf before storing a single value.
 *
 * The core of the library: it includes nothing above it. The public entry points
 * that depend on the backend (init, free, append, remove, truncate, write, summary
 * read-back) live in backend.c and call the host parts here.
 */
#define _POSIX_C_SOURCE 200809L /* pthread_rwlock_t */
#include "cache.h"

#include <math.h>
#include <string.h>

#include "pool.h"
#include "summary.h"
#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE };

locks_cache_params locks_cache_default_params(void) {
    locks_cache_params p;
    memset(&p, 0, sizeof p);
    p.n_layers = 1;
    p.n_kv_heads = 8;
    p.head_dim = 128;
    p.n_pages = 1024;
    p.max_seqs = 8;
    p.rank = 8;
    p.summary_prec = LOCKS_SUMMARY_Q;
    p.kv_dtype = LOCKS_DTYPE_F16;
    p.backend = LOCKS_BACKEND_CPU;
    p.n_threads = 1;
    p.device = 0;
    p.selectors = LOCKS_SEL_BIT(LOCKS_SEL_LOCKS);
    p.pool = NULL;
    return p;
}

/* The parameter checks every backend shares: the pool's shape and the rank. */
static locks_status check_shape(const locks_cache_params *p) {
    const locks_status bad = LOCKS_ERR_INVALID_ARG;
    if (p->n_layers < 1) return locks_fail(bad, "n_layers %d (must be >= 1)", p->n_layers);
    if (p->n_kv_heads < 1) return locks_fail(bad, "n_kv_heads %d (must be >= 1)", p->n_kv_heads);
    if (p->n_pages < 1) return locks_fail(bad, "n_pages %d (must be >= 1)", p->n_pages);
    if (p->max_seqs < 1) return locks_fail(bad, "max_seqs %d (must be >= 1)", p->max_seqs);
    if (p->rank < 1 || p->rank > LOCKS_MAX_RANK)
        return locks_fail(bad, "rank %d (must be 1..%d)", p->rank, LOCKS_MAX_RANK);
    if (p->selectors & ~(uint32_t)LOCKS_SEL_ALL)
        return locks_fail(bad, "selectors 0x%x has bits past LOCKS_SEL_ALL (0x%x)", (unsigned)p->selectors,
                          (unsigned)LOCKS_SEL_ALL);
    return LOCKS_OK;
}

/* The CPU backend's checks on top of check_shape. */
static locks_status check_params(const locks_cache_params *p) {
    const locks_status bad = LOCKS_ERR_INVALID_ARG;
    /* 64, 128, 256 are the documented sizes; any multiple of 8 up to 256 works here */
    if (p->head_dim < 8 || p->head_dim > LOCKS_MAX_HEAD_DIM || p->head_dim % 8 != 0)
        return locks_fail(bad, "head_dim %d (the CPU backend takes multiples of 8 from 8 to %d)", p->head_dim,
                          LOCKS_MAX_HEAD_DIM);
    if (p->summary_prec != LOCKS_SUMMARY_F32 && p->summary_prec != LOCKS_SUMMARY_Q)
        return locks_fail(bad, "summary_prec %d (must be LOCKS_SUMMARY_F32 or LOCKS_SUMMARY_Q)", (int)p->summary_prec);
    if (p->kv_dtype == LOCKS_DTYPE_F32 || p->kv_dtype == LOCKS_DTYPE_BF16)
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "kv_dtype %s on the CPU backend (it stores fp16)",
                          p->kv_dtype == LOCKS_DTYPE_F32 ? "F32" : "BF16");
    if (p->kv_dtype != LOCKS_DTYPE_F16) return locks_fail(bad, "kv_dtype %d is not a locks_dtype", (int)p->kv_dtype);
    if (!p->pool && (p->n_threads < 1 || p->n_threads > 256))
        return locks_fail(bad, "n_threads %d (must be 1..256)", p->n_threads);
    return LOCKS_OK;
}

/* ---- the cache's lock (cache.h) ---- */

/* A token naming the calling thread: the address of a thread-local, never 0. */
static uintptr_t thread_token(void) {
    static _Thread_local char me;
    return (uintptr_t)&me;
}

/* c itself is never const: rw, owner and depth are the lock's state */
void locks_cache_lock(const locks_cache *c) {
    locks_cache *m = (locks_cache *)c;
    const uintptr_t me = thread_token();
    if (__atomic_load_n(&m->owner, __ATOMIC_RELAXED) == me) { /* only this thread stores me there */
        m->depth++;
        return;
    }
    pthread_rwlock_wrlock(m->rw);
    __atomic_store_n(&m->owner, me, __ATOMIC_RELAXED);
    m->depth = 1;
}

void locks_cache_unlock(const locks_cache *c) {
    locks_cache *m = (locks_cache *)c;
    if (--m->depth > 0) return;
    __atomic_store_n(&m->owner, (uintptr_t)0, __ATOMIC_RELAXED);
    pthread_rwlock_unlock(m->rw);
}

void locks_cache_lock_read(const locks_cache *c) {
    locks_cache *m = (locks_cache *)c;
    if (__atomic_load_n(&m->owner, __ATOMIC_RELAXED) == thread_token()) {
        m->depth++; /* inside this thread's own exclusive call */
        return;
    }
    pthread_rwlock_rdlock(m->rw);
}

void locks_cache_unlock_read(const locks_cache *c) {
    locks_cache *m = (locks_cache *)c;
    if (__atomic_load_n(&m->owner, __ATOMIC_RELAXED) == thread_token()) {
        m->depth--;
        return;
    }
    pthread_rwlock_unlock(m->rw);
}

uint32_t locks_cache_enter(const locks_cache *c) {
    locks_cache_lock(c);
    return locks_error_mark();
}

locks_status locks_cache_leave(const locks_cache *c, locks_status st, const char *call, uint32_t mark) {
    locks_fail_call(st, call, mark);
    locks_cache_unlock(c);
    return st;
}

/* The backend-independent part of a cache (see cache.h). */
locks_cache *locks_cache_init_host(const locks_cache_params *params, locks_status *err) {
    locks_status st = check_shape(params);
    locks_cache *c = NULL;
    if (st != LOCKS_OK) goto fail;
    st = LOCKS_ERR_OOM;
    c = locks_alloc(1, sizeof *c);
    if (!c) goto fail;
    pthread_rwlock_t *rw = locks_alloc(1, sizeof *rw);
    pthread_rwlockattr_t attr;
    if (!rw || pthread_rwlockattr_init(&attr) != 0) {
        locks_free(rw);
        goto fail;
    }
#if defined(__GLIBC__) /* a waiting writer goes first, so a stream of reads cannot starve it (no
                          read call nests another, which this kind would deadlock) */
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    const int rc = pthread_rwlock_init(rw, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0) {
        locks_free(rw);
        goto fail;
    }
    c->rw = rw;
    c->p = *params;
    c->d = params->head_dim;
    c->hkv = params->n_kv_heads;
    c->r = params->rank;
    c->block = (size_t)P * (size_t)c->d;
    const size_t NP = (size_t)params->n_pages;
    c->fill = locks_alloc((size_t)params->n_layers * NP, sizeof(uint16_t));
    c->free_list = locks_alloc(NP, sizeof(int32_t));
    c->ref = locks_alloc(NP, sizeof(int32_t));
    c->seqs = locks_alloc((size_t)params->max_seqs, sizeof(locks_seq));
    if (!c->fill || !c->free_list || !c->ref || !c->seqs) goto fail;
    for (int32_t i = 0; i < params->n_pages; i++) c->free_list[i] = params->n_pages - 1 - i;
    c->n_free = params->n_pages;
    for (int32_t s = 0; s < params->max_seqs; s++) {
        c->seqs[s].table = locks_alloc(NP, sizeof(int32_t));
        if (!c->seqs[s].table) goto fail;
    }
    *err = LOCKS_OK;
    return c;
fail:
    locks_cache_release(c);
    *err = st;
    return NULL;
}

/* A summary array of n elements of size bytes, counted into c->sum_bytes. */
static void *sum_alloc(locks_cache *c, size_t n, size_t size) {
    void *p = locks_alloc_huge(n, size);
    if (p) c->sum_bytes += n * size;
    return p;
}

/* The CPU backend's storage (see cache.h). */
locks_status locks_cache_init_cpu(locks_cache *c) {
    const locks_cache_params *params = &c->p;
    locks_status st = check_params(params);
    if (st != LOCKS_OK) return st;
    const size_t L = (size_t)params->n_layers, NP = (size_t)params->n_pages;
    const size_t H = (size_t)c->hkv, d = (size_t)c->d, r = (size_t)c->r;
    const size_t kv_elems = L * NP * H * c->block;
    if (!c->ext) { /* K/V pages of its own (else the caller's) */
        c->k = locks_alloc_huge(kv_elems, sizeof(uint16_t));
        c->v = locks_alloc_huge(kv_elems, sizeof(uint16_t));
        if (!c->k || !c->v) return LOCKS_ERR_OOM;
    }
    const size_t LHN = L * H * NP;
    /* every summary array goes through sum_alloc, which adds its bytes to c->sum_bytes:
     * locks_cache_summary_bytes reports what the pool holds, not a formula */
#define SUM_ALLOC(ptr, n, size) ((ptr) = sum_alloc(c, (n), (size)))
    if (params->summary_prec == LOCKS_SUMMARY_F32) {
        SUM_ALLOC(c->s_mu, LHN * d, sizeof(float));
        SUM_ALLOC(c->s_basis, LHN * r * d, sizeof(float));
        SUM_ALLOC(c->s_coef, LHN * P * r, sizeof(float));
        if (!c->s_mu || !c->s_basis || !c->s_coef) return LOCKS_ERR_OOM;
    } else {
        SUM_ALLOC(c->s_mu_q, LHN * d, 1);
        SUM_ALLOC(c->s_mu_s, LHN, sizeof(uint16_t));
        SUM_ALLOC(c->s_v_q, LHN * r * d / 2, 1);
        SUM_ALLOC(c->s_v_s, LHN * r, sizeof(uint16_t));
        SUM_ALLOC(c->s_c_q, LHN * P * r, 1);
        SUM_ALLOC(c->s_c_s, LHN * r, sizeof(uint16_t));
        if (!c->s_mu_q || !c->s_mu_s || !c->s_v_q || !c->s_v_s || !c->s_c_q || !c->s_c_s)
            return LOCKS_ERR_OOM;
    }
#undef SUM_ALLOC
    /* a shared pool is held by reference (locks_pool_retain), so the caller may drop
     * its own right after creating its caches */
    c->pool = params->pool ? locks_pool_retain(params->pool) : locks_pool_init(params->n_threads);
    if (!c->pool) return LOCKS_ERR_OOM;
    return LOCKS_OK;
}

void locks_cache_release(locks_cache *c) {
    if (!c) return;
    for (int32_t i = 0; i < LOCKS_META_SLOTS; i++) locks_free(c->meta[i].p);
    locks_pool_free(c->pool); /* drops this cache's reference */
    if (c->seqs)
        for (int32_t s = 0; s < c->p.max_seqs; s++) locks_free(c->seqs[s].table);
    locks_free(c->seqs);
    locks_free(c->free_list);
    locks_free(c->ref);
    locks_free(c->k);
    locks_free(c->v);
    locks_free(c->fill);
    locks_free(c->s_mu);
    locks_free(c->s_basis);
    locks_free(c->s_coef);
    locks_free(c->s_mu_q);
    locks_free(c->s_mu_s);
    locks_free(c->s_v_q);
    locks_free(c->s_v_s);
    locks_free(c->s_c_q);
    locks_free(c->s_c_s);
    for (int32_t i = 0; i < 4; i++) locks_free(c->scratch[i].p);
    locks_ext_pages_free(c->ext);
    if (c->rw) pthread_rwlock_destroy(c->rw);
    locks_free(c->rw);
    locks_free(c);
}

void locks_ext_pages_free(locks_ext_pages *e) {
    if (!e) return;
    locks_free(e->k);
    locks_free(e->v);
    locks_free(e);
}

locks_status locks_cache_meta_add(locks_cache *c, int32_t slot, size_t bytes,
                                  locks_page_fill_hook on_fill, locks_seq_hook on_truncate) {
    if (slot < 0 || slot >= LOCKS_META_SLOTS || c->meta[slot].p) return LOCKS_ERR_INVALID_ARG;
    void *p = locks_alloc(bytes, 1);
    if (!p) return LOCKS_ERR_OOM;
    c->meta[slot] = (locks_meta_block){p, bytes, on_fill, on_truncate};
    return LOCKS_OK;
}

size_t locks_meta_take(size_t *end, size_t n, size_t sz) {
    const size_t at = *end;
    if (at == SIZE_MAX || (sz && n > (SIZE_MAX - 64 - at) / sz)) {
        *end = SIZE_MAX;
        return 0;
    }
    *end = at + ((n * sz + 63) & ~(size_t)63);
    return at;
}

void *locks_cache_meta(const locks_cache *c, int32_t slot) { return c->meta[slot].p; }

locks_cache_params locks_cache_get_params(const locks_cache *c) { return c->p; }

/* ---------------------------------------------------------------------------------- */
/* Internal accessors                                                                  */
/* ---------------------------------------------------------------------------------- */

locks_sum_arrays locks_cache_summaries(const locks_cache *c, int32_t layer, int32_t kv_head) {
    locks_sum_arrays a;
    memset(&a, 0, sizeof a);
    const size_t base = ((size_t)layer * (size_t)c->hkv + (size_t)kv_head) * (size_t)c->p.n_pages;
    const size_t d = (size_t)c->d, r = (size_t)c->r;
    if (c->p.summary_prec == LOCKS_SUMMARY_F32) {
        a.mu = c->s_mu + base * d;
        a.basis = c->s_basis + base * r * d;
        a.coef = c->s_coef + base * P * r;
    } else {
        a.mu_q = c->s_mu_q + base * d;
        a.mu_s = c->s_mu_s + base;
        a.v_q = c->s_v_q + base * r * d / 2;
        a.v_s = c->s_v_s + base * r;
        a.c_q = c->s_c_q + base * P * r;
        a.c_s = c->s_c_s + base * r;
    }
    return a;
}

static size_t block_offset(const locks_cache *c, int32_t layer, int32_t page, int32_t h) {
    return (((size_t)layer * (size_t)c->p.n_pages + (size_t)page) * (size_t)c->hkv + (size_t)h) *
           c->block;
}

const uint16_t *locks_cache_kblock(const locks_cache *c, int32_t layer, int32_t page, int32_t h) {
    if (c->ext) return c->ext->k[layer] + (size_t)page * c->ext->page_ld + (size_t)h * c->ext->head_ld;
    return c->k + block_offset(c, layer, page, h);
}

const uint16_t *locks_cache_vblock(const locks_cache *c, int32_t layer, int32_t page, int32_t h) {
    if (c->ext) return c->ext->v[layer] + (size_t)page * c->ext->page_ld + (size_t)h * c->ext->head_ld;
    return c->v + block_offset(c, layer, page, h);
}

size_t locks_cache_kv_ld(const locks_cache *c) { return c->ext ? c->ext->tok_ld : (size_t)c->d; }

void locks_cache_kv_rows(const locks_cache *c, int32_t layer, int32_t page, int32_t h, uint16_t *tmp_k,
                         uint16_t *tmp_v, const uint16_t **kb, const uint16_t **vb) {
    const uint16_t *k = locks_cache_kblock(c, layer, page, h), *v = locks_cache_vblock(c, layer, page, h);
    const size_t ld = locks_cache_kv_ld(c), d = (size_t)c->d;
    if (ld == d) {
        *kb = k;
        *vb = v;
        return;
    }
    for (size_t t = 0; t < P; t++) {
        memcpy(tmp_k + t * d, k + t * ld, d * sizeof(uint16_t));
        memcpy(tmp_v + t * d, v + t * ld, d * sizeof(uint16_t));
    }
    *kb = tmp_k;
    *vb = tmp_v;
}

const locks_seq *locks_cache_seq(const locks_cache *c, int32_t seq_id) {
    if (!c || seq_id < 0 || seq_id >= c->p.max_seqs || !c->seqs[seq_id].active) return NULL;
    return &c->seqs[seq_id];
}

locks_status locks_check_layer(const locks_cache *c, int32_t layer) {
    if (layer >= 0 && layer < c->p.n_layers) return LOCKS_OK;
    return locks_fail(LOCKS_ERR_INVALID_ARG, "layer %d (the cache has layers 0..%d)", layer, c->p.n_layers - 1);
}

locks_status locks_check_heads(const locks_cache *c, int32_t n_q_heads, int32_t max_group) {
    if (n_q_heads < c->hkv || n_q_heads % c->hkv != 0)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "n_q_heads %d is not a positive multiple of n_kv_heads %d",
                          n_q_heads, c->hkv);
    if (n_q_heads / c->hkv > max_group)
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "GQA group of %d query heads per KV head (at most %d)",
                          n_q_heads / c->hkv, max_group);
    return LOCKS_OK;
}

locks_status locks_check_seq(const locks_cache *c, int32_t seq_id, const locks_seq **s) {
    *s = locks_cache_seq(c, seq_id);
    if (*s) return LOCKS_OK;
    if (seq_id < 0 || seq_id >= c->p.max_seqs)
        return locks_fail(LOCKS_ERR_NO_SEQ, "sequence id %d (the cache has slots 0..%d)", seq_id, c->p.max_seqs - 1);
    return locks_fail(LOCKS_ERR_NO_SEQ, "sequence %d was never added or has been removed", seq_id);
}

locks_status locks_check_scale(float scale) {
    if (scale == 0.0f || (scale > 0.0f && isfinite(scale))) return LOCKS_OK;
    return locks_fail(LOCKS_ERR_INVALID_ARG, "scale %g (must be 0 for 1/sqrt(head_dim), or positive and finite)",
                      (double)scale);
}

float locks_step_scale(const locks_cache *c, float scale) {
    return scale > 0.0f ? scale : 1.0f / sqrtf((float)c->d);
}

int locks_scale_ok(float scale) { return scale == 0.0f || (isfinite(scale) && scale > 0.0f); }

locks_status locks_ext_step_check(const locks_cache *c, int32_t layer, const int32_t *seq_ids, int32_t n_seqs,
                                  locks_selector sel) {
    if (locks_cache_kv_ld(c) != (size_t)c->d && sel != LOCKS_SEL_FULL && sel != LOCKS_SEL_LOCKS &&
        sel != LOCKS_SEL_QUEST)
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "selector %s reads keys as contiguous 16 x d blocks: HND pages only",
                          locks_selector_name(sel)); /* reads keys as contiguous 16 x d blocks */
    const uint16_t *fill = c->fill + (size_t)layer * c->p.n_pages;
    for (int32_t i = 0; i < n_seqs; i++) {
        const locks_seq *s = locks_cache_seq(c, seq_ids[i]);
        if (!s) return LOCKS_ERR_NO_SEQ;
        for (int32_t j = 0; j < s->len / P; j++)
            if (fill[s->table[j]] != 0xffffu) /* full page not reported */
                return locks_fail(LOCKS_ERR_INVALID_ARG,
                                  "sequence %d: logical page %d (physical %d) is full but not reported filled in layer %d",
                                  seq_ids[i], j, s->table[j], layer);
    }
    return LOCKS_OK;
}

void *locks_cache_scratch(locks_cache *c, int32_t i, size_t bytes) {
    locks_scratch *s = &c->scratch[i];
    if (s->bytes >= bytes && s->p) return s->p;
    size_t nb = bytes + bytes / 2 + 64;
    void *np = locks_alloc(nb, 1);
    if (!np) return NULL;
    if (s->p) memcpy(np, s->p, s->bytes);
    locks_free(s->p);
    s->p = np;
    s->bytes = nb;
    return np;
}

/* ---------------------------------------------------------------------------------- */
/* Sequences                                                                           */
/* ---------------------------------------------------------------------------------- */

locks_status locks_cache_seq_add(locks_cache *c, int32_t *seq_id) {
    if (!c || !seq_id) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_seq_add: NULL %s", c ? "seq_id" : "cache");
    const uint32_t mark = locks_cache_enter(c);
    for (int32_t s = 0; s < c->p.max_seqs; s++) {
        if (!c->seqs[s].active) {
            c->seqs[s].active = 1;
            c->seqs[s].len = 0;
            c->seqs[s].n_pages = 0;
            *seq_id = s;
            return locks_cache_leave(c, LOCKS_OK, "locks_cache_seq_add", mark);
        }
    }
    locks_fail(LOCKS_ERR_INVALID_ARG, "all %d sequence slots are taken (max_seqs)", c->p.max_seqs);
    return locks_cache_leave(c, LOCKS_ERR_INVALID_ARG, "locks_cache_seq_add", mark);
}

void locks_cache_seq_hooks(locks_cache *c, int32_t seq_id, int32_t len) {
    for (int32_t i = 0; i < LOCKS_META_SLOTS; i++)
        if (c->meta[i].p && c->meta[i].on_truncate) c->meta[i].on_truncate(c, seq_id, len);
}

/* A block table drops page: the page goes back to the free list when that was its last
 * holder, and then forgets its slots in every layer: it has no summary
 * (locks_cache_summary_get) and nothing to attend until it is written again. */
static void page_free(locks_cache *c, int32_t page) {
    if (--c->ref[page] > 0) return; /* another sequence still holds it (shared) */
    for (int32_t l = 0; l < c->p.n_layers; l++) c->fill[(size_t)l * c->p.n_pages + page] = 0;
    c->free_list[c->n_free++] = page;
}

void locks_cache_host_remove(locks_cache *c, int32_t seq_id) {
    locks_seq *s = &c->seqs[seq_id];
    /* push back in reverse so the next sequence gets them in the same order (a
     * caller-owned cache has no free list: the pages are the caller's) */
    for (int32_t i = s->n_pages - 1; i >= 0 && !c->ext; i--) page_free(c, s->table[i]);
    locks_cache_seq_hooks(c, seq_id, 0);
    s->active = 0;
    s->len = 0;
    s->n_pages = 0;
}

/* The page a truncate to len leaves partial, if another sequence shares it (it then
 * needs a copy of its own); else -1. */
static int32_t truncate_shared_page(const locks_cache *c, const locks_seq *s, int32_t len) {
    if (c->ext || len % P == 0) return -1;
    const int32_t page = s->table[len / P];
    return c->ref[page] > 1 ? page : -1;
}

locks_status locks_cache_host_truncate_check(const locks_cache *c, int32_t seq_id, int32_t len) {
    const locks_seq *s = &c->seqs[seq_id];
    if (truncate_shared_page(c, s, len) < 0) return LOCKS_OK;
    int32_t freed = 0; /* the pages past the new end that go back to the pool */
    for (int32_t i = len / P + 1; i < s->n_pages; i++) freed += c->ref[s->table[i]] == 1;
    if (c->n_free + freed > 0) return LOCKS_OK;
    return locks_fail(LOCKS_ERR_POOL_FULL,
                      "truncating sequence %d to %d tokens ends inside page %d, which another sequence shares: "
                      "its own copy needs a free page and the pool has none",
                      seq_id, len, s->table[len / P]);
}

locks_status locks_cache_check_unshared(const locks_cache *c, int32_t seq_id, int32_t pos, int32_t n) {
    const locks_seq *s = &c->seqs[seq_id];
    for (int32_t lp = pos / P; n > 0 && lp <= (pos + n - 1) / P && !c->ext; lp++)
        if (c->ref[s->table[lp]] > 1)
            return locks_fail(LOCKS_ERR_INVALID_ARG,
                              "tokens [%d, %d) of sequence %d lie in page %d, which other sequences share "
                              "(locks_cache_seq_share): a shared page is never written",
                              pos, pos + n, seq_id, s->table[lp]);
    return LOCKS_OK;
}

void locks_cache_host_truncate(locks_cache *c, int32_t seq_id, int32_t len) {
    locks_seq *s = &c->seqs[seq_id];
    int32_t keep = (len + P - 1) / P;
    locks_cache_seq_hooks(c, seq_id, len);
    const int32_t shared = truncate_shared_page(c, s, len);
    /* push back in reverse, as seq_remove does */
    for (int32_t i = s->n_pages - 1; i >= keep; i--) page_free(c, s->table[i]);
    if (shared >= 0) {
        /* the new end falls inside a page others share: this sequence gets a copy of it
         * (truncate_check made sure one is free), so that clearing its slots past len
         * below and writing them again later touch this sequence only */
        const int32_t own = c->free_list[--c->n_free];
        c->ref[own] = 1;
        c->ref[shared]--;
        for (int32_t l = 0; l < c->p.n_layers; l++) {
            for (int32_t h = 0; h < c->hkv; h++) {
                memcpy(c->k + block_offset(c, l, own, h), c->k + block_offset(c, l, shared, h),
                       c->block * sizeof(uint16_t));
                memcpy(c->v + block_offset(c, l, own, h), c->v + block_offset(c, l, shared, h),
                       c->block * sizeof(uint16_t));
            }
            c->fill[(size_t)l * c->p.n_pages + own] = c->fill[(size_t)l * c->p.n_pages + shared];
        }
        s->table[keep - 1] = own;
    }
    s->n_pages = keep;
    s->len = len;
    /* The last kept page forgets its slots past len: it is partial again (no selector
     * reads the summary of a page that is not full) until a write fills it, which
     * rebuilds the summary and the selectors' page metadata. */
    if (len % P) {
        uint16_t mask = (uint16_t)((1u << (len % P)) - 1u);
        int32_t page = s->table[keep - 1];
        for (int32_t l = 0; l < c->p.n_layers; l++) c->fill[(size_t)l * c->p.n_pages + page] &= mask;
    }
}

/* Sequence dst (empty) takes src's first n_pages pages into its block table: the same
 * physical pages, one more holder each (cache.h: ref). */
static locks_status seq_share(locks_cache *c, int32_t dst, int32_t src, int32_t n_pages) {
    const locks_seq *sd, *ss;
    locks_status st = locks_check_seq(c, dst, &sd);
    if (st == LOCKS_OK) st = locks_check_seq(c, src, &ss);
    if (st != LOCKS_OK) return st;
    if (!c->host_pages || c->ext) /* host_pages: 0 on the CUDA backend */
        return locks_fail(LOCKS_ERR_UNSUPPORTED, "sharing pages on a %s (the CPU backend's own pages only)",
                          c->ext ? "cache over the caller's pages" : "CUDA cache");
    if (dst == src) return locks_fail(LOCKS_ERR_INVALID_ARG, "dst and src are both sequence %d", dst);
    if (sd->len != 0)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "dst sequence %d holds %d tokens (it must be empty)", dst, sd->len);
    if (n_pages < 1 || n_pages > ss->len / P)
        return locks_fail(LOCKS_ERR_INVALID_ARG, "n_pages %d (sequence %d holds %d tokens: 1..%d full pages)", n_pages,
                          src, ss->len, ss->len / P);
    for (int32_t i = 0; i < n_pages; i++)
        for (int32_t l = 0; l < c->p.n_layers; l++)
            if (c->fill[(size_t)l * c->p.n_pages + ss->table[i]] != 0xffffu)
                return locks_fail(LOCKS_ERR_INVALID_ARG,
                                  "page %d of sequence %d is not written in full in layer %d (only full pages are "
                                  "shared)",
                                  i, src, l);
    locks_seq *d = &c->seqs[dst];
    for (int32_t i = 0; i < n_pages; i++) {
        d->table[i] = ss->table[i];
        c->ref[ss->table[i]]++;
    }
    d->n_pages = n_pages;
    d->len = n_pages * P;
    return LOCKS_OK;
}

locks_status locks_cache_seq_share(locks_cache *c, int32_t dst, int32_t src, int32_t n_pages) {
    if (!c) return locks_fail(LOCKS_ERR_INVALID_ARG, "locks_cache_seq_share: cache is NULL");
    const uint32_t mark = locks_cache_enter(c);
    return locks_cache_leave(c, seq_share(c, dst, src, n_pages), "locks_cache_seq_share", mark);
}

int32_t locks_cache_page_refs(const locks_cache *c, int32_t page) {
    if (!c || page < 0 || page >= c->p.n_pages) return -1;
    locks_cache_lock(c);
    const int32_t n = c->ref[page];
    locks_cache_unlock(c);
    return n;
}

int32_t locks_cache_seq_len(const locks_cache *c, int32_t seq_id) {
    if (!c) return -1;
    locks_cache_lock_read(c);
    const locks_seq *s = locks_cache_seq(c, seq_id);
    int32_t len = s ? s->len : -1;
    locks_cache_unlock_read(c);
    return len;
}

const int32_t *locks_cache_block_table(const locks_cache *c, int32_t seq_id, int32_t *n_pages) {
    if (!c) return NULL;
    locks_cache_lock_read(c);
    const locks_seq *s = locks_cache_seq(c, seq_id);
    if (s && n_pages) *n_pages = s->n_pages;
    locks_cache_unlock_read(c);
    return s ? s->table : NULL;
}

/* An owned cache: its free list. A caller-owned one has none (the pages are the
 * caller's): the pages no sequence's table holds. */
int32_t locks_cache_free_pages(const locks_cache *c) {
    if (!c) return 0;
    locks_cache_lock_read(c);
    int32_t n = c->n_free;
    uint8_t *used = c->ext ? locks_alloc((size_t)c->p.n_pages, 1) : NULL;
    if (used) {
        n = 0;
        for (int32_t s = 0; s < c->p.max_seqs; s++)
            for (int32_t i = 0; c->seqs[s].active && i < c->seqs[s].n_pages; i++) used[c->seqs[s].table[i]] = 1;
        for (int32_t p = 0; p < c->p.n_pages; p++) n += !used[p];
        locks_free(used);
    } else if (c->ext) {
        n = 0; /* no memory to count with: claim none free rather than too many */
    }
    locks_cache_unlock_read(c);
    return n;
}

locks_status locks_cache_host_append_stage(locks_cache *c, int32_t seq_id, int32_t n_tokens,
                                           int32_t *n_pages, int32_t *len) {
    if (n_tokens < 0) return locks_fail(LOCKS_ERR_INVALID_ARG, "n_tokens %d (must be >= 0)", n_tokens);
    locks_seq *s = &c->seqs[seq_id];
    int64_t new_len = (int64_t)s->len + n_tokens;
    int64_t need = (new_len + P - 1) / P - s->n_pages;
    if (new_len > (int64_t)c->p.n_pages * P || need > c->n_free)
        return locks_fail(LOCKS_ERR_POOL_FULL, "%d more tokens need %lld more pages; %d of %d are free", n_tokens,
                          (long long)need, c->n_free, c->p.n_pages);
    /* the new pages go into the table past n_pages (slots no one reads) before anything
     * is committed: the top of the free stack, in pop order */
    for (int64_t i = 0; i < need; i++) s->table[s->n_pages + i] = c->free_list[c->n_free - 1 - i];
    *n_pages = s->n_pages + (int32_t)need;
    *len = (int32_t)new_len;
    return LOCKS_OK;
}

void locks_cache_host_append_commit(locks_cache *c, int32_t seq_id, int32_t n_pages, int32_t len) {
    locks_seq *s = &c->seqs[seq_id];
    while (s->n_pages < n_pages) {
        int32_t page = c->free_list[--c->n_free];
        for (int32_t l = 0; l < c->p.n_layers; l++) c->fill[(size_t)l * c->p.n_pages + page] = 0;
        c->ref[page] = 1;
        s->n_pages++;
    }
    s->len = len;
}

/* The CPU backend attends only written tokens: every slot of [0, len) of the sequence
 * must have been written in this layer (its bit set in the page's fill mask). */
locks_status locks_cache_check_written(const locks_cache *c, int32_t seq_id, int32_t layer, int32_t len) {
    if (c->ext || !c->host_pages) return LOCKS_OK; /* the caller's pages / the device's own checks */
    const locks_seq *s = &c->seqs[seq_id];
    const uint16_t *fill = c->fill + (size_t)layer * c->p.n_pages;
    for (int32_t i = 0; i * P < len; i++) {
        const int32_t n = len - i * P < P ? len - i * P : P;
        const uint16_t want = (uint16_t)((1u << n) - 1u), have = fill[s->table[i]];
        if ((have & want) != want) {
            int32_t t = 0;
            while (have & (1u << t)) t++;
            return locks_fail(LOCKS_ERR_INVALID_ARG,
                              "sequence %d, layer %d: token %d is reserved but was never written (write every layer "
                              "of the appended tokens before attending them)",
                              seq_id, layer, i * P + t);
        }
    }
    return LOCKS_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Writes and summary builds                                                           */
/* ---------------------------------------------------------------------------------- */

/* Builds the summary of (layer, physical page, KV head) from the stored fp16 keys and
 * runs the selectors' page hooks. */
static void build_page_head(locks_cache *c, int32_t layer, int32_t page, int32_t h) {
    const int32_t d = c->d, r = c->r;
    float k[P * LOCKS_MAX_HEAD_DIM];
    float mu[LOCKS_MAX_HEAD_DIM], basis[LOCKS_MAX_RANK * LOCKS_MAX_HEAD_DIM], coef[P * LOCKS_MAX_RANK];
    const uint16_t *kb = locks_cache_kblock(c, layer, page, h);
    const size_t ld = locks_cache_kv_ld(c); /* d, or the caller's row stride */
    for (size_t t = 0; t < P; t++) locks_f16_to_f32_n(kb + t * ld, k + t * (size_t)d, (size_t)d);
    /* keys are finite (checked on write), so the build cannot fail */
    (void)locks_summary_build_f32(d, r, k, mu, basis, coef);
    locks_sum_arrays a = locks_cache_summaries(c, layer, h);
    const size_t pg = (size_t)page;
    if (c->p.summary_prec == LOCKS_SUMMARY_F32) {
        memcpy(a.mu + pg * d, mu, sizeof(float) * (size_t)d);
        memcpy(a.basis + pg * r * d, basis, sizeof(float) * (size_t)(r * d));
        memcpy(a.coef + pg * P * r, coef, sizeof(float) * (size_t)(P * r));
    } else {
        locks_qsummary q = {a.mu_q + pg * d, a.mu_s + pg, a.v_q + pg * r * d / 2, a.v_s + pg * r,
                            a.c_q + pg * P * r, a.c_s + pg * r};
        locks_summary_quantize(d, r, mu, basis, coef, q);
    }
    for (int32_t i = 0; i < LOCKS_META_SLOTS; i++)
        if (c->meta[i].p && c->meta[i].on_fill) c->meta[i].on_fill(c, layer, page, h, k);
}

typedef struct {
    locks_cache *c;
    int32_t layer;
    const int32_t *pages; /* physical pages to build */
} build_job;

static void build_task(void *arg, int32_t t, int32_t thread) {
    (void)thread;
    build_job *j = arg;
    build_page_head(j->c, j->layer, j->pages[t / j->c->hkv], t % j->c->hkv);
}

locks_status locks_cache_write_cpu(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos,
                                   int32_t n, const float *k, const float *v) {
    const locks_seq *s = &c->seqs[seq_id];
    const int32_t d = c->d, H = c->hkv;
    const size_t row = (size_t)H * d;
    /* fp16 holds |x| <= 65504: past that a value would be stored as Inf, so it is
     * refused like one (nothing stored) */
    const size_t nk = locks_first_past(k, (size_t)n * row, 65504.0f), nv = locks_first_past(v, (size_t)n * row, 65504.0f);
    if (nk < (size_t)n * row || nv < (size_t)n * row) {
        const int is_k = nk < (size_t)n * row;
        const size_t i = is_k ? nk : nv;
        const float x = (is_k ? k : v)[i];
        return locks_fail(LOCKS_ERR_NONFINITE, "%s of token %d, KV head %d, channel %d is %g (%s)", is_k ? "key" : "value",
                          pos + (int32_t)(i / row), (int32_t)(i % row) / d, (int32_t)(i % (size_t)d), (double)x,
                          isfinite(x) ? "past the fp16 range, |x| <= 65504" : "not finite");
    }
    for (int32_t t = 0; t < n; t++) {
        int32_t tok = pos + t, page = s->table[tok / P], slot = tok % P;
        for (int32_t h = 0; h < H; h++) {
            size_t off = block_offset(c, layer, page, h) + (size_t)slot * d;
            const float *ks = k + (size_t)t * row + (size_t)h * d;
            const float *vs = v + (size_t)t * row + (size_t)h * d;
            locks_f32_to_f16_n(ks, c->k + off, (size_t)d);
            locks_f32_to_f16_n(vs, c->v + off, (size_t)d);
        }
        c->fill[(size_t)layer * c->p.n_pages + page] |= (uint16_t)(1u << slot);
    }
    /* the full pages this write touched get (re)built summaries, 64 pages per pool job
     * (no allocation: a write never fails after storing) */
    const int32_t first = pos / P, last = (pos + n - 1) / P;
    int32_t pages[64];
    for (int32_t lp0 = first; lp0 <= last; lp0 += 64) {
        int32_t n_build = 0;
        for (int32_t lp = lp0; lp <= last && lp < lp0 + 64; lp++) {
            int32_t page = s->table[lp];
            if (c->fill[(size_t)layer * c->p.n_pages + page] == 0xffffu) pages[n_build++] = page;
        }
        build_job job = {c, layer, pages};
        locks_pool_run(c->pool, n_build * H, build_task, &job);
    }
    return LOCKS_OK;
}

void locks_cache_build_pages(locks_cache *c, int32_t layer, const int32_t *pages, int32_t n) {
    build_job job = {c, layer, pages};
    locks_pool_run(c->pool, n * c->hkv, build_task, &job);
}

/* ---------------------------------------------------------------------------------- */
/* Stored summaries out and in, fp16 writes (slot save / restore)                      */
/* ---------------------------------------------------------------------------------- */

/* The arrays of one (layer, physical page, KV head) summary in record order (locks_core.h:
 * locks_cache_read_summaries): Q mu_q, mu_s, v_q, v_s, c_q, c_s; F32 mu, basis, coef. */
typedef struct {
    unsigned char *p;
    size_t bytes;
} sum_part;

static int32_t record_parts(const locks_cache *c, int32_t layer, int32_t page, int32_t h, sum_part part[6]) {
    const locks_sum_arrays a = locks_cache_summaries(c, layer, h);
    const size_t pg = (size_t)page, d = (size_t)c->d, r = (size_t)c->r;
    if (c->p.summary_prec == LOCKS_SUMMARY_F32) {
        part[0] = (sum_part){(unsigned char *)(a.mu + pg * d), sizeof(float) * d};
        part[1] = (sum_part){(unsigned char *)(a.basis + pg * r * d), sizeof(float) * r * d};
        part[2] = (sum_part){(unsigned char *)(a.coef + pg * P * r), sizeof(float) * P * r};
        return 3;
    }
    part[0] = (sum_part){(unsigned char *)(a.mu_q + pg * d), d};
    part[1] = (sum_part){(unsigned char *)(a.mu_s + pg), sizeof(uint16_t)};
    part[2] = (sum_part){a.v_q + pg * r * d / 2, r * d / 2};
    part[3] = (sum_part){(unsigned char *)(a.v_s + pg * r), sizeof(uint16_t) * r};
    part[4] = (sum_part){(unsigned char *)(a.c_q + pg * P * r), P * r};
    part[5] = (sum_part){(unsigned char *)(a.c_s + pg * r), sizeof(uint16_t) * r};
    return 6;
}

void locks_cache_summary_pack(const locks_cache *c, int32_t layer, int32_t page, int32_t h, void *dst) {
    sum_part part[6];
    unsigned char *o = dst;
    for (int32_t i = 0, n = record_parts(c, layer, page, h, part); i < n; o += part[i].bytes, i++)
        memcpy(o, part[i].p, part[i].bytes);
}

static void summary_unpack(locks_cache *c, int32_t layer, int32_t page, int32_t h, const unsigned char *src) {
    sum_part part[6];
    for (int32_t i = 0, n = record_parts(c, layer, page, h, part); i < n; src += part[i].bytes, i++)
        memcpy(part[i].p, src, part[i].bytes);
}

typedef struct {
    locks_cache *c;
    const locks_seq *s;
    int32_t layer, pos, n;
    const uint16_t *k, *v;     /* [n][Hkv][d] */
    const unsigned char *sums; /* [pages covered][Hkv][rec] or NULL */
    size_t rec;
    int run_hooks;
} write16_job;

/* Logical page pos / P + t of a write16_job: its slots in [pos, pos + n) stored, then,
 * if the page is full, its summaries copied from the job's (a page the write covers
 * whole) or built (a page partly written before), and the selectors' page hooks run. */
static void write16_task(void *arg, int32_t t, int32_t thread) {
    (void)thread;
    const write16_job *j = arg;
    locks_cache *c = j->c;
    const int32_t lp = j->pos / P + t, page = j->s->table[lp], H = c->hkv, d = c->d;
    const int32_t t0 = lp * P > j->pos ? lp * P : j->pos, t1 = lp * P + P < j->pos + j->n ? lp * P + P : j->pos + j->n;
    const size_t row = (size_t)H * (size_t)d;
    uint16_t *fill = c->fill + (size_t)j->layer * c->p.n_pages + page;
    for (int32_t tok = t0; tok < t1; tok++) {
        for (int32_t h = 0; h < H; h++) {
            const size_t off = block_offset(c, j->layer, page, h) + (size_t)(tok % P) * (size_t)d;
            const size_t src = (size_t)(tok - j->pos) * row + (size_t)h * (size_t)d;
            memcpy(c->k + off, j->k + src, sizeof(uint16_t) * (size_t)d);
            memcpy(c->v + off, j->v + src, sizeof(uint16_t) * (size_t)d);
        }
        *fill |= (uint16_t)(1u << (tok % P));
    }
    if (*fill != 0xffffu) return;
    if (!j->sums || t0 != lp * P || t1 != lp * P + P) {
        for (int32_t h = 0; h < H; h++) build_page_head(c, j->layer, page, h);
        return;
    }
    for (int32_t h = 0; h < H; h++) {
        summary_unpack(c, j->layer, page, h, j->sums + ((size_t)t * (size_t)H + (size_t)h) * j->rec);
        if (!j->run_hooks) continue;
        float k[P * LOCKS_MAX_HEAD_DIM]; /* the hooks take the page's keys as fp32 */
        const uint16_t *kb = locks_cache_kblock(c, j->layer, page, h);
        locks_f16_to_f32_n(kb, k, (size_t)P * (size_t)d);
        for (int32_t i = 0; i < LOCKS_META_SLOTS; i++)
            if (c->meta[i].p && c->meta[i].on_fill) c->meta[i].on_fill(c, j->layer, page, h, k);
    }
}

locks_status locks_cache_write_f16_cpu(locks_cache *c, int32_t seq_id, int32_t layer, int32_t pos, int32_t n,
                                       const uint16_t *k, const uint16_t *v, const void *sums) {
    const int32_t H = c->hkv, d = c->d;
    const size_t vals = (size_t)n * (size_t)H * (size_t)d;
    const size_t nk = locks_f16_first_nonfinite(k, vals), nv = locks_f16_first_nonfinite(v, vals);
    if (nk < vals || nv < vals) {
        const size_t i = nk < vals ? nk : nv, row = (size_t)H * (size_t)d;
        return locks_fail(LOCKS_ERR_NONFINITE, "%s of token %d, KV head %d, channel %d is not finite (fp16 bits 0x%04x)",
                          nk < vals ? "key" : "value", pos + (int32_t)(i / row), (int32_t)(i % row) / d,
                          (int32_t)(i % (size_t)d), (unsigned)(nk < vals ? k : v)[i]);
    }
    const size_t rec = locks_summary_bytes(d, c->r, c->p.summary_prec);
    const int32_t covered = (pos + n) / P - pos / P; /* pages [pos, pos + n) holds whole (pos % P == 0) */
    for (int32_t i = 0; sums && i < covered * H; i++) {
        const size_t bad = locks_summary_record_bad(d, c->r, c->p.summary_prec, (const unsigned char *)sums + (size_t)i * rec);
        if (bad != SIZE_MAX)
            return locks_fail(LOCKS_ERR_NONFINITE,
                              "the summary of page %d (of the written tokens), KV head %d has a non-finite scale "
                              "or value (byte %zu of its %zu)",
                              i / H, i % H, bad, rec);
    }
    int run_hooks = 0;
    for (int32_t i = 0; i < LOCKS_META_SLOTS; i++) run_hooks |= c->meta[i].p && c->meta[i].on_fill;
    write16_job job = {c, &c->seqs[seq_id], layer, pos, n, k, v, sums, rec, run_hooks};
    if (n > 0) locks_pool_run(c->pool, (pos + n - 1) / P - pos / P + 1, write16_task, &job);
    return LOCKS_OK;
}

const uint16_t *locks_cache_k_page(const locks_cache *c, int32_t layer, int32_t page) {
    if (!c || !c->k || layer < 0 || layer >= c->p.n_layers || page < 0 || page >= c->p.n_pages) return NULL;
    return locks_cache_kblock(c, layer, page, 0);
}

const uint16_t *locks_cache_v_page(const locks_cache *c, int32_t layer, int32_t page) {
    if (!c || !c->v || layer < 0 || layer >= c->p.n_layers || page < 0 || page >= c->p.n_pages) return NULL;
    return locks_cache_vblock(c, layer, page, 0);
}

locks_status locks_cache_summary_get_cpu(const locks_cache *c, int32_t layer, int32_t kv_head,
                                         int32_t page, float *mu, float *basis, float *coef) {
    const int32_t d = c->d, r = c->r;
    const size_t pg = (size_t)page;
    locks_sum_arrays a = locks_cache_summaries(c, layer, kv_head);
    if (c->p.summary_prec == LOCKS_SUMMARY_F32) {
        memcpy(mu, a.mu + pg * d, sizeof(float) * (size_t)d);
        memcpy(basis, a.basis + pg * r * d, sizeof(float) * (size_t)(r * d));
        memcpy(coef, a.coef + pg * P * r, sizeof(float) * (size_t)(P * r));
    } else {
        locks_qsummary q = {a.mu_q + pg * d, a.mu_s + pg, a.v_q + pg * r * d / 2, a.v_s + pg * r,
                            a.c_q + pg * P * r, a.c_s + pg * r};
        locks_summary_dequantize(d, r, q, mu, basis, coef);
    }
    return LOCKS_OK;
}

locks_pool *locks_cache_pool(const locks_cache *c) { return c ? c->pool : NULL; }

size_t locks_cache_summary_bytes(const locks_cache *c) {
    if (!c) return 0;
    if (!c->host_pages) return locks_summary_bytes(c->d, c->r, c->p.summary_prec); /* the host holds none */
    const size_t n = (size_t)c->p.n_layers * (size_t)c->hkv * (size_t)c->p.n_pages;
    return c->sum_bytes / n;
}
