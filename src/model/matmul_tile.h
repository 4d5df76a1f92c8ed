/*
 * matmul_tile.h — what the SIMD tile kernels (matmul_avx2.c, matmul_avx512.c) share and
 * need no vector instructions for: the activation block scales of a group of tokens.
 */
#ifndef LOCKS_MATMUL_TILE_H
#define LOCKS_MATMUL_TILE_H

#include <stdint.h>

#include "matmul.h"

/* act_scales' floats per array: 2,048 activation blocks (65,536 columns) for 8 tokens. */
#define MATMUL_AS_FLOATS 16384

/* Per token: the block scales d_x and d_x sum(q_x) as arrays (slot k at k nbp, nbp = nb
 * rounded up to 8, zero past nb), for the 8-wide loads of a chunk. */
typedef struct {
    float d[MATMUL_AS_FLOATS] __attribute__((aligned(64)));
    float ds[MATMUL_AS_FLOATS] __attribute__((aligned(64)));
    int32_t nbp;
} act_scales;

/* Slots k0 .. k0 + nt - 1 from tokens x[0 .. nt - 1] of nb blocks each. */
static inline void act_scales_fill(act_scales *s, int k0, const matmul_q8 *const *x, int nt, int32_t nb) {
    const int32_t nbp = (nb + 7) & ~7;
    s->nbp = nbp;
    for (int kk = 0; kk < nt; kk++) {
        float *d = s->d + (size_t)(k0 + kk) * nbp, *ds = s->ds + (size_t)(k0 + kk) * nbp;
        for (int32_t b = 0; b < nb; b++) {
            d[b] = x[kk][b].d;
            ds[b] = x[kk][b].ds;
        }
        for (int32_t b = nb; b < nbp; b++) d[b] = ds[b] = 0.0f;
    }
}

#endif
