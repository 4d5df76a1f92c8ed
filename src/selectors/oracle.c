/*
 * oracle.c — the "read every key" reference selector: the exact log-sum-exp of each
 * page's scaled logits, from the stored fp16 keys. LOCKS at rank 15 with fp32
 * summaries reproduces these scores (to float rounding).
 */
#include <math.h>

#include "decode.h"
#include "selector.h"
#include "vmath.h"

void locks_sel_oracle_score(const locks_sel_ctx *x, int32_t j0, int32_t j1, float *scores,
                            int32_t ld) {
    enum { P = LOCKS_PAGE };
    const int32_t d = x->c->d, G = x->group;
    float logit[64][P]; /* G <= 64 */
    for (int32_t j = j0; j < j1; j++) {
        const uint16_t *kb = locks_cache_kblock(x->c, x->layer, x->table[j], x->kv_head);
        locks_block_logits(kb, P, x->q, G, d, x->scale, logit);
        for (int32_t g = 0; g < G; g++) {
            const float mx = locks_max_n(logit[g], P);
            scores[(size_t)g * ld + j] = mx + logf((float)locks_exp_sum_n(logit[g], P, mx));
        }
    }
}
