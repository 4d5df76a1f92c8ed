/*
 * sampler.c — next-token choice from logits: greedy, or temperature + top-k + top-p.
 *
 * Order of operations (llama.cpp's default chain): top-k on the logits, softmax at
 * temperature T, keep the smallest prefix (by probability) whose mass reaches top_p,
 * renormalise, draw one token with the sampler's RNG. temp <= 0 is argmax (lowest id on
 * ties) and touches no RNG. The RNG is xorshift64* seeded from the params, so a seed
 * reproduces a run.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "locks_model.h"
#include "llama_internal.h"
#include "util.h"
#include "vmath.h"

typedef struct {
    float logit;
    int32_t id;
} cand;

struct locks_sampler {
    locks_sampler_params p;
    int32_t n_vocab;
    uint64_t rng;
    cand *c;     /* [n_vocab] candidates */
    float *prob; /* [n_vocab] */
};

locks_sampler_params locks_sampler_default_params(void) {
    locks_sampler_params p = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 42};
    return p;
}

locks_sampler *locks_sampler_init(locks_sampler_params p, int32_t n_vocab, locks_status *err) {
    if (n_vocab <= 0 || !isfinite(p.temp) || !isfinite(p.top_p)) {
        if (err) *err = LOCKS_ERR_INVALID_ARG;
        return NULL;
    }
    locks_sampler *s = locks_alloc(1, sizeof *s);
    if (!s) goto fail;
    s->p = p;
    s->n_vocab = n_vocab;
    /* splitmix the seed so that nearby seeds give unrelated streams; never zero */
    uint64_t z = p.seed + UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    s->rng = (z ^ (z >> 31)) | 1u;
    s->c = locks_alloc((size_t)n_vocab, sizeof *s->c);
    s->prob = locks_alloc((size_t)n_vocab, sizeof *s->prob);
    if (!s->c || !s->prob) goto fail;
    if (err) *err = LOCKS_OK;
    return s;
fail:
    locks_sampler_free(s);
    if (err) *err = LOCKS_ERR_OOM;
    return NULL;
}

void locks_sampler_free(locks_sampler *s) {
    if (!s) return;
    locks_free(s->c);
    locks_free(s->prob);
    locks_free(s);
}

/* Uniform in [0, 1). */
static float rng_uniform(locks_sampler *s) {
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    uint64_t r = s->rng * UINT64_C(0x2545F4914F6CDD1D);
    return (float)(r >> 40) / 16777216.0f;
}

static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int32_t argmax_scalar(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* argmax_scalar 16 lanes at a time: each lane keeps its largest value and the first
 * index that reached it (strict >, as the scalar loop), then the lanes' best value and,
 * among the lanes holding it, the smallest index: the scalar loop's answer. A NaN
 * anywhere (which the scalar loop skips, or keeps at index 0) sends it to that loop.
 * -1 when n < 16. */
__attribute__((target("avx512f"))) static int32_t argmax_avx512(const float *x, int32_t n) {
    if (n < 16) return -1;
    __m512 best = _mm512_loadu_ps(x);
    __m512i at = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __mmask16 nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
    __m512i idx = at;
    const __m512i step = _mm512_set1_epi32(16);
    int32_t i = 16;
    for (; i + 16 <= n; i += 16) {
        idx = _mm512_add_epi32(idx, step);
        const __m512 v = _mm512_loadu_ps(x + i);
        nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        const __mmask16 gt = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, gt, v);
        at = _mm512_mask_mov_epi32(at, gt, idx);
    }
    if (nan) return -1;
    float bv[16];
    int32_t bi[16];
    _mm512_storeu_ps(bv, best);
    _mm512_storeu_si512(bi, at);
    int32_t b = 0;
    for (int32_t l = 1; l < 16; l++)
        if (bv[l] > bv[b] || (bv[l] == bv[b] && bi[l] < bi[b])) b = l;
    int32_t r = bi[b];
    for (; i < n; i++) { /* the tail, in order after every lane's indices */
        if (x[i] != x[i]) return -1;
        if (x[i] > x[r]) r = i;
    }
    return r;
}
#endif

/* The index of the largest logit, the lowest of ties. */
static int32_t argmax(const float *logits, int32_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (locks_have_avx512()) {
        const int32_t r = argmax_avx512(logits, n);
        if (r >= 0) return r;
    }
#endif
    return argmax_scalar(logits, n);
}

/* The candidates after temperature, top-k and top-p: s->c[0..k) by descending logit with
 * unnormalised probabilities s->prob[0..k) summing to *sum; returns k. temp > 0. */
static int32_t candidates(locks_sampler *s, const float *logits, double *sum_out) {
    int32_t n = s->n_vocab;
    /* top-k: a partial selection would be faster; a full sort of 50K floats is ~3 ms,
     * small next to a forward pass, and keeps the order exact and deterministic. */
    for (int32_t i = 0; i < n; i++) s->c[i] = (cand){logits[i], i};
    qsort(s->c, (size_t)n, sizeof *s->c, by_logit_desc);
    int32_t k = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;

    /* softmax at temperature over the k candidates */
    float mx = s->c[0].logit;
    double sum = 0.0;
    for (int32_t i = 0; i < k; i++) {
        s->prob[i] = expf((s->c[i].logit - mx) / s->p.temp);
        sum += (double)s->prob[i];
    }
    /* top-p: smallest prefix whose mass reaches top_p */
    if (s->p.top_p < 1.0f) {
        double cum = 0.0;
        int32_t keep = k;
        for (int32_t i = 0; i < k; i++) {
            cum += (double)s->prob[i] / sum;
            if (cum >= (double)s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        k = keep;
        sum = 0.0;
        for (int32_t i = 0; i < k; i++) sum += (double)s->prob[i];
    }
    *sum_out = sum;
    return k;
}

int32_t locks_sampler_sample(locks_sampler *s, const float *logits) {
    if (s->p.temp <= 0.0f) return argmax(logits, s->n_vocab);
    double sum;
    int32_t k = candidates(s, logits, &sum);
    double r = (double)rng_uniform(s) * sum;
    double cum = 0.0;
    for (int32_t i = 0; i < k; i++) {
        cum += (double)s->prob[i];
        if (r < cum) return s->c[i].id;
    }
    return s->c[k - 1].id;
}

void locks_sampler_probs(locks_sampler *s, const float *logits, float *probs) {
    memset(probs, 0, sizeof(float) * (size_t)s->n_vocab);
    if (s->p.temp <= 0.0f) {
        probs[argmax(logits, s->n_vocab)] = 1.0f;
        return;
    }
    double sum;
    int32_t k = candidates(s, logits, &sum);
    for (int32_t i = 0; i < k; i++) probs[s->c[i].id] = (float)((double)s->prob[i] / sum);
}

int32_t locks_sampler_draw(locks_sampler *s, const float *probs) {
    double sum = 0.0;
    int32_t last = -1;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (probs[i] > 0.0f) {
            sum += (double)probs[i];
            last = i;
        }
    if (last < 0) return -1;
    double r = (double)rng_uniform(s) * sum, cum = 0.0;
    for (int32_t i = 0; i < last; i++) {
        cum += (double)probs[i];
        if (probs[i] > 0.0f && r < cum) return i;
    }
    return last;
}

float locks_sampler_uniform(locks_sampler *s) { return rng_uniform(s); }

locks_sampler_params locks_sampler_get_params(const locks_sampler *s) { return s->p; }
