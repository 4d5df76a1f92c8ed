/* speculate.h — the acceptance step of speculative sampling (speculate.c), exposed for
 * its test (tests/test_spec_accept.c). */
#ifndef LOCKS_SPECULATE_H
#define LOCKS_SPECULATE_H

#include <stdint.h>

#include "locks_model.h"

/* The token that follows a draft d drawn from q[n_vocab], given the target distribution
 * p[n_vocab]: d with probability min(1, p(d) / q(d)) (*accepted = 1), else a draw from
 * max(0, p - q) normalised (*accepted = 0; p is overwritten with that residual). Both
 * draws use the sampler's RNG. q(d) > 0. The result is distributed as p. */
int32_t locks_spec_accept(locks_sampler *s, float *p, const float *q, int32_t d, int32_t n_vocab, int *accepted);

#endif
