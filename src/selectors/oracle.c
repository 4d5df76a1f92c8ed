/*
 * oracle.c — the "read every key" reference selector: the exact log-sum-exp of each
 * page's scaled logits, from the stored fp16 keys. LOCKS at rank 15 with fp32
 * summaries reproduces these scores (to float rounding).
 */
#include "selector.h"
#include "vmath.h"

void locks_sel_oracle_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld) {
    enum { P = LOCKS_PAGE };
    const int32_t d = x->c->d;
    float k[P * LOCKS_MAX_HEAD_DIM], logit[P];
    for (int32_t j = j0; j < j1; j++) {
        locks_f16_to_f32_n(locks_cache_kblock(x->c, x->layer, x->table[j], x->kv_head), k,
                           (size_t)P * d);
        for (int32_t g = 0; g < x->group; g++) {
            const float *q = x->q + (size_t)g * d;
            for (int32_t i = 0; i < P; i++) logit[i] = x->scale * locks_dot(q, k + (size_t)i * d, d);
            scores[(size_t)g * ld + j] = locks_lse(logit, P);
        }
    }
}
