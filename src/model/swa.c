/*
 * swa.c — the sliding-window layers' K/V ring and their exact attention (see swa.h).
 *
 * One task per (token, KV head): the window's keys are converted to fp32 once and
 * scored against every query head of the GQA group (scale q . k), then a stable
 * softmax (max subtracted, sums in float64) weights the values, converted the same way.
 */
#include "swa.h"

#include <math.h>
#include <string.h>

#include "vmath.h"

typedef struct {
    const swa_ring *r;
    int32_t pos, hq, hkv, hd, window;
    const float *q;
    float scale;
    float *scratch;
    size_t scratch_per_thread;
    float *out;
} swa_job;

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

size_t swa_scratch_floats(int32_t n_q_heads, int32_t n_kv_heads, int32_t head_dim, int32_t window) {
    int32_t g = n_q_heads / n_kv_heads;
    return (size_t)g * (size_t)window + 2 * (size_t)head_dim + (size_t)g * (size_t)head_dim;
}

static void swa_task(void *arg, int32_t task, int32_t thread) {
    swa_job *j = arg;
    int32_t t = task / j->hkv, h = task % j->hkv;
    int32_t g = j->hq / j->hkv, hd = j->hd, p = j->pos + t;
    int32_t lo = p - j->window + 1 < 0 ? 0 : p - j->window + 1, nk = p - lo + 1;
    float *sc = j->scratch + (size_t)thread * j->scratch_per_thread; /* (g, nk) scores */
    float *kf = sc + (size_t)g * (size_t)j->window;                   /* (hd,) one key / value */
    float *acc = kf + 2 * (size_t)hd;                                 /* (g, hd) */
    const float *qg = j->q + ((size_t)t * j->hq + (size_t)h * g) * hd;
    const size_t ld = (size_t)j->hkv * hd, cap = (size_t)j->r->cap; /* one position's K or V */
    for (int32_t i = 0; i < nk; i++) {
        size_t slot = (size_t)(lo + i) % cap;
        locks_f16_to_f32_n(j->r->k + slot * ld + (size_t)h * hd, kf, (size_t)hd);
        for (int32_t k = 0; k < g; k++) /* SIMD dot (vmath): a scalar sum here was one chain
                                            * of dependent adds, ~half of Gemma 3's prefill */
            sc[(size_t)k * nk + i] = locks_dot(qg + (size_t)k * hd, kf, hd) * j->scale;
    }
    double inv[16];
    for (int32_t k = 0; k < g; k++) {
        float *row = sc + (size_t)k * nk;
        float mx = row[0];
        for (int32_t i = 1; i < nk; i++) mx = row[i] > mx ? row[i] : mx;
        double sum = 0.0;
        for (int32_t i = 0; i < nk; i++) {
            row[i] = expf(row[i] - mx);
            sum += (double)row[i];
        }
        inv[k] = 1.0 / sum;
    }
    memset(acc, 0, sizeof(float) * (size_t)g * hd);
    for (int32_t i = 0; i < nk; i++) {
        size_t slot = (size_t)(lo + i) % cap;
        locks_f16_to_f32_n(j->r->v + slot * ld + (size_t)h * hd, kf, (size_t)hd);
        for (int32_t k = 0; k < g; k++) {
            float w = sc[(size_t)k * nk + i];
            float *a = acc + (size_t)k * hd;
            for (int32_t d = 0; d < hd; d++) a[d] += w * kf[d];
        }
    }
    for (int32_t k = 0; k < g; k++) {
        float *o = j->out + ((size_t)t * j->hq + (size_t)h * g + k) * hd;
        for (int32_t d = 0; d < hd; d++) o[d] = (float)((double)acc[(size_t)k * hd + d] * inv[k]);
    }
}

locks_status swa_attend(locks_pool *pool, const swa_ring *r, int32_t pos, int32_t n, const float *q,
                        int32_t n_q_heads, float scale, int32_t window, float *scratch, float *out) {
    if (!r || pos < 0 || n <= 0 || window <= 0 ||
        ((int64_t)window - 1 + n > r->cap && (int64_t)pos + n > r->cap) ||
        n_q_heads % r->n_kv_heads != 0 || n_q_heads / r->n_kv_heads > 16)
        return LOCKS_ERR_INVALID_ARG;
    swa_job j = {r, pos, n_q_heads, r->n_kv_heads, r->head_dim, window, q, scale, scratch,
                 swa_scratch_floats(n_q_heads, r->n_kv_heads, r->head_dim, window), out};
    int32_t n_tasks = n * r->n_kv_heads;
    if (pool) locks_pool_run(pool, n_tasks, swa_task, &j);
    else
        for (int32_t t = 0; t < n_tasks; t++) swa_task(&j, t, 0);
    return LOCKS_OK;
}
