/*
 * swa.c — the sliding-window layers' K/V ring and their exact attention (see swa.h).
 *
 * The attention runs on the blocked tile kernel of the global layers' prefill
 * (locks_window_tile, attend.c), reading the ring by position: one task per (tile of
 * consecutive query tokens, KV head, part), where the G query heads of a KV head and T
 * tokens make up R = T * G <= 64 rows that share each K/V block's conversion from fp16.
 * The window's key blocks (64 keys, aligned to absolute positions) are dealt to
 * SWA_PARTS parts by block index, each part keeping its own online-softmax state; the
 * parts are merged at the end. So one decoded token still gives SWA_PARTS tasks (both
 * cores busy), and every token's result is the same whether it is decoded alone or in
 * a prefill / verify batch (the parts and blocks depend on its position only).
 */
#include "swa.h"

#include <math.h>
#include <string.h>

#include "decode.h"
#include "vmath.h"

enum {
    SWA_ROWS = 64, /* rows (token, query head) per tile */
    SWA_PARTS = 2  /* key blocks dealt to this many partial states per row */
};

typedef struct {
    const swa_ring *r;
    int32_t pos, n, hq, hkv, hd, G, T, n_tiles, window;
    const float *q;
    float scale;
    float *parts;  /* (n_tiles * hkv * SWA_PARTS, state_floats) each task's (m, l, acc) */
    float *scratch; /* (n_threads, thread_floats) */
    size_t thread_floats;
    float *out;
} swa_job;

/* One part's state of a tile's rows: m [R], l [R], acc [R][d] (R = T * G). */
static size_t state_floats(int32_t T, int32_t G, int32_t d) { return (size_t)T * G * ((size_t)d + 2); }

static size_t thread_floats(int32_t T, int32_t G, int32_t d) {
    return (size_t)T * G * d + locks_window_tile_floats(T * G, d); /* gathered queries, tile */
}

size_t swa_ring_bytes(int32_t cap, int32_t n_kv_heads, int32_t head_dim) {
    return 2 * (size_t)cap * (size_t)n_kv_heads * (size_t)head_dim * sizeof(uint16_t);
}

locks_status swa_ring_write(swa_ring *r, int32_t pos, int32_t n, const float *k, const float *v) {
    const size_t row = (size_t)r->n_kv_heads * (size_t)r->head_dim;
    if (pos < 0 || n < 0 || n > r->cap) return LOCKS_ERR_INVALID_ARG;
    if (!locks_all_finite(k, (size_t)n * row) || !locks_all_finite(v, (size_t)n * row)) return LOCKS_ERR_NONFINITE;
    for (int32_t t = 0; t < n; t++) {
        size_t slot = (size_t)((pos + t) % r->cap);
        locks_f32_to_f16_n(k + (size_t)t * row, r->k + slot * row, row);
        locks_f32_to_f16_n(v + (size_t)t * row, r->v + slot * row, row);
    }
    return LOCKS_OK;
}

size_t swa_scratch_floats(int32_t n_q_heads, int32_t n_kv_heads, int32_t head_dim, int32_t n_threads,
                          int32_t n_max) {
    const int32_t G = n_q_heads / n_kv_heads, T = SWA_ROWS / G > 0 ? SWA_ROWS / G : 1;
    const size_t tiles = (size_t)(n_max + T - 1) / (size_t)T;
    return tiles * (size_t)n_kv_heads * SWA_PARTS * state_floats(T, G, head_dim) +
           (size_t)(n_threads > 0 ? n_threads : 1) * thread_floats(T, G, head_dim);
}

static void swa_task(void *arg, int32_t task, int32_t thread) {
    swa_job *j = arg;
    const int32_t part = task % SWA_PARTS, h = task / SWA_PARTS % j->hkv, tile = task / SWA_PARTS / j->hkv;
    const int32_t G = j->G, d = j->hd, i0 = tile * j->T, tn = j->n - i0 < j->T ? j->n - i0 : j->T, R = tn * G;
    float *m = j->parts + (size_t)task * state_floats(j->T, G, d), *l = m + R, *acc = l + R;
    float *qt = j->scratch + (size_t)thread * j->thread_floats, *tile_scratch = qt + (size_t)j->T * G * d;
    for (int32_t i = 0; i < tn; i++) /* rows i * G + g: token i0 + i, query head h * G + g */
        memcpy(qt + (size_t)i * G * d, j->q + ((size_t)(i0 + i) * j->hq + (size_t)h * G) * d,
               sizeof(float) * (size_t)G * d);
    for (int32_t r = 0; r < R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)R * d);
    const size_t ld = (size_t)j->hkv * d;
    locks_window_tile(j->r->k + (size_t)h * d, j->r->v + (size_t)h * d, ld, j->r->cap, d, qt, R, G, j->pos + i0,
                      j->window, part, SWA_PARTS, j->scale, tile_scratch, m, l, acc);
}

/* out = the parts' states merged: sum_p e^(m_p - M) acc_p / sum_p e^(m_p - M) l_p. */
static void swa_merge(const swa_job *j) {
    const int32_t G = j->G, d = j->hd;
    for (int32_t tile = 0; tile < j->n_tiles; tile++)
        for (int32_t h = 0; h < j->hkv; h++) {
            const int32_t i0 = tile * j->T, tn = j->n - i0 < j->T ? j->n - i0 : j->T, R = tn * G;
            const float *st[SWA_PARTS];
            for (int32_t p = 0; p < SWA_PARTS; p++)
                st[p] = j->parts + ((size_t)(tile * j->hkv + h) * SWA_PARTS + (size_t)p) * state_floats(j->T, G, d);
            for (int32_t r = 0; r < R; r++) {
                float mx = -INFINITY, w[SWA_PARTS], lsum = 0.0f;
                for (int32_t p = 0; p < SWA_PARTS; p++) mx = st[p][r] > mx ? st[p][r] : mx;
                for (int32_t p = 0; p < SWA_PARTS; p++) {
                    w[p] = st[p][r] == -INFINITY ? 0.0f : expf(st[p][r] - mx); /* a part with no key */
                    lsum += w[p] * st[p][R + r];
                }
                const float inv = 1.0f / lsum;
                float *o = j->out + ((size_t)(i0 + r / G) * j->hq + (size_t)h * G + (size_t)(r % G)) * d;
                for (int32_t x = 0; x < d; x++) {
                    float a = 0.0f;
                    for (int32_t p = 0; p < SWA_PARTS; p++) a += w[p] * st[p][2 * (size_t)R + (size_t)r * d + x];
                    o[x] = a * inv;
                }
            }
        }
}

locks_status swa_attend(locks_pool *pool, const swa_ring *r, int32_t pos, int32_t n, const float *q,
                        int32_t n_q_heads, float scale, int32_t window, float *scratch, float *out) {
    if (!r || pos < 0 || n <= 0 || window <= 0 ||
        ((int64_t)window - 1 + n > r->cap && (int64_t)pos + n > r->cap) ||
        n_q_heads % r->n_kv_heads != 0 || n_q_heads / r->n_kv_heads > SWA_ROWS)
        return LOCKS_ERR_INVALID_ARG;
    const int32_t G = n_q_heads / r->n_kv_heads, T = SWA_ROWS / G, n_tiles = (n + T - 1) / T;
    const int32_t n_tasks = n_tiles * r->n_kv_heads * SWA_PARTS;
    swa_job j = {r, pos, n, n_q_heads, r->n_kv_heads, r->head_dim, G, T, n_tiles, window, q, scale, scratch,
                 NULL, thread_floats(T, G, r->head_dim), out};
    j.scratch = scratch + (size_t)n_tasks * state_floats(T, G, r->head_dim); /* after the parts */
    if (pool) locks_pool_run(pool, n_tasks, swa_task, &j);
    else
        for (int32_t t = 0; t < n_tasks; t++) swa_task(&j, t, 0);
    swa_merge(&j);
    return LOCKS_OK;
}
