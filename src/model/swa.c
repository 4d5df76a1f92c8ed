/*
 * swa.c — exact sliding-window attention (see swa.h) over the fp16 pages of a CPU
 * cache, read through locks.h's page accessors.
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
    const locks_cache *c;
    int32_t layer, pos, hq, hkv, hd, window, n_pages;
    const int32_t *bt;
    const float *q;
    float scale;
    float *scratch;
    size_t scratch_per_thread;
    float *out;
    int bad; /* a page without host memory */
} swa_job;

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
    for (int32_t i = 0; i < nk; i++) {
        int32_t kp = lo + i;
        const uint16_t *page = locks_cache_k_page(j->c, j->layer, j->bt[kp / LOCKS_PAGE]);
        if (!page) {
            j->bad = 1;
            return;
        }
        locks_f16_to_f32_n(page + ((size_t)h * LOCKS_PAGE + kp % LOCKS_PAGE) * hd, kf, (size_t)hd);
        for (int32_t k = 0; k < g; k++) {
            const float *qk = qg + (size_t)k * hd;
            float s = 0.0f;
            for (int32_t d = 0; d < hd; d++) s += qk[d] * kf[d];
            sc[(size_t)k * nk + i] = s * j->scale;
        }
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
        int32_t kp = lo + i;
        const uint16_t *page = locks_cache_v_page(j->c, j->layer, j->bt[kp / LOCKS_PAGE]);
        if (!page) {
            j->bad = 1;
            return;
        }
        locks_f16_to_f32_n(page + ((size_t)h * LOCKS_PAGE + kp % LOCKS_PAGE) * hd, kf, (size_t)hd);
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

locks_status swa_attend(locks_pool *pool, const locks_cache *c, int32_t layer, int32_t seq, int32_t pos, int32_t n,
                        const float *q, int32_t n_q_heads, float scale, int32_t window, float *scratch, float *out) {
    locks_cache_params cp = locks_cache_get_params(c);
    int32_t n_pages;
    const int32_t *bt = locks_cache_block_table(c, seq, &n_pages);
    if (!bt || pos < 0 || n <= 0 || window <= 0 || layer < 0 || layer >= cp.n_layers ||
        (int64_t)pos + n > locks_cache_seq_len(c, seq) || n_q_heads % cp.n_kv_heads != 0 ||
        n_q_heads / cp.n_kv_heads > 16)
        return LOCKS_ERR_INVALID_ARG;
    swa_job j = {c, layer, pos, n_q_heads, cp.n_kv_heads, cp.head_dim, window, n_pages, bt, q, scale, scratch,
                 swa_scratch_floats(n_q_heads, cp.n_kv_heads, cp.head_dim, window), out, 0};
    int32_t n_tasks = n * cp.n_kv_heads;
    if (pool) locks_pool_run(pool, n_tasks, swa_task, &j);
    else
        for (int32_t t = 0; t < n_tasks; t++) swa_task(&j, t, 0);
    return j.bad ? LOCKS_ERR_UNSUPPORTED : LOCKS_OK;
}
