/*
 * test_sampler.c — the sampler against float64 references of its distribution.
 *
 *  - greedy (temp <= 0) is the argmax, lowest id on ties; on every kernel path (the
 *    AVX-512 scan where the CPU has it, portable), over vocabularies of 1 .. 49,155
 *    with ties, -inf, signed zeros and NaNs, against a plain loop;
 *  - temperature only (top_k = 0, top_p = 1): draw frequencies match softmax(logits / T)
 *    computed in float64 (every probability within 5 standard errors, over 100k draws);
 *  - top-k: only the k most likely ids ever come out, in the renormalised proportions;
 *  - top-p: only the smallest prefix with mass >= top_p;
 *  - the same seed reproduces the same stream, another seed does not.
 */
#include "test_util.h"

#include "locks_model.h"
#include "vmath.h"

#define NV 50
#define DRAWS 100000

/* float64 reference: probabilities after top-k and top-p at temperature t */
static void reference(const float *logits, float t, int k, double top_p, double *p) {
    int order[NV];
    for (int i = 0; i < NV; i++) order[i] = i;
    for (int i = 0; i < NV; i++) /* selection sort, descending, lower id first on ties */
        for (int j = i + 1; j < NV; j++)
            if (logits[order[j]] > logits[order[i]] ||
                (logits[order[j]] == logits[order[i]] && order[j] < order[i])) {
                int tmp = order[i];
                order[i] = order[j];
                order[j] = tmp;
            }
    if (k <= 0 || k > NV) k = NV;
    double w[NV], sum = 0.0;
    for (int i = 0; i < k; i++) {
        w[i] = exp(((double)logits[order[i]] - (double)logits[order[0]]) / (double)t);
        sum += w[i];
    }
    int keep = k;
    if (top_p < 1.0) {
        double cum = 0.0;
        for (int i = 0; i < k; i++) {
            cum += w[i] / sum;
            if (cum >= top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double s2 = 0.0;
    for (int i = 0; i < keep; i++) s2 += w[i];
    for (int i = 0; i < NV; i++) p[i] = 0.0;
    for (int i = 0; i < keep; i++) p[order[i]] = w[i] / s2;
}

static void check_distribution(const char *what, const float *logits, locks_sampler_params sp) {
    double p[NV];
    reference(logits, sp.temp, sp.top_k, (double)sp.top_p, p);
    locks_status st;
    locks_sampler *s = locks_sampler_init(sp, NV, &st);
    test_cond(s != NULL, "%s: init %s", what, locks_status_str(st));
    if (!s) return;
    long count[NV] = {0};
    for (int i = 0; i < DRAWS; i++) {
        int32_t id = locks_sampler_sample(s, logits);
        if (id >= 0 && id < NV) count[id]++;
    }
    int bad = 0;
    double worst = 0.0;
    for (int i = 0; i < NV; i++) {
        double f = (double)count[i] / DRAWS;
        if (p[i] == 0.0) {
            if (count[i] != 0 && bad++ < 4) fprintf(stderr, "  %s: id %d drawn %ld times, reference 0\n", what, i, count[i]);
            continue;
        }
        double se = sqrt(p[i] * (1.0 - p[i]) / DRAWS);
        double z = fabs(f - p[i]) / (se > 0 ? se : 1e-12);
        if (z > worst) worst = z;
        if (z > 5.0 && bad++ < 4) fprintf(stderr, "  %s: id %d freq %.5f, reference %.5f (%.1f se)\n", what, i, f, p[i], z);
    }
    test_cond(bad == 0, "%s: %d ids off the float64 distribution (worst %.1f se)", what, bad, worst);
    locks_sampler_free(s);
}

/* The first index of the largest value, NaNs skipped (a NaN at 0 is kept): the
 * definition the sampler's argmax follows, written as plainly as possible. */
static int32_t ref_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void check_greedy_paths(void) {
    const int32_t sizes[] = {1, 15, 16, 17, 31, 32, 33, 100, 49152, 49155};
    int32_t bad = 0, n_cases = 0;
    for (int32_t isa = 0; isa < 2; isa++) {
        if (locks_cpu_set_isa(isa ? LOCKS_ISA_PORTABLE : LOCKS_ISA_AVX512) != 0) continue; /* no AVX-512 */
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int32_t kind = 0; kind < 6; kind++) {
                const int32_t n = sizes[si];
                float *x = malloc(sizeof(float) * (size_t)n);
                SETUP(x);
                for (int32_t i = 0; i < n; i++) x[i] = (float)tu_normal();
                if (kind == 1) /* the maximum several times */
                    for (int32_t t = 0; t < 4; t++) x[tu_int(0, n - 1)] = 9.0f;
                if (kind == 2) /* all -inf but a few (a draft's logits) */
                    for (int32_t i = 0; i < n; i++) x[i] = tu_int(0, 50) ? -INFINITY : (float)tu_normal();
                if (kind == 3) /* signed zeros at the top */
                    for (int32_t i = 0; i < n; i++) x[i] = -fabsf(x[i]) - 1.0f, x[tu_int(0, n - 1)] = tu_int(0, 1) ? 0.0f : -0.0f;
                if (kind == 4) x[tu_int(0, n - 1)] = NAN;
                if (kind == 5) x[0] = NAN;
                locks_sampler_params sp = locks_sampler_default_params();
                sp.temp = 0.0f;
                locks_sampler *g = locks_sampler_init(sp, n, NULL);
                SETUP(g);
                n_cases++;
                if (locks_sampler_sample(g, x) != ref_argmax(x, n)) {
                    if (bad++ < 4) fprintf(stderr, "  greedy: isa %d n %d kind %d\n", isa, n, kind);
                }
                locks_sampler_free(g);
                free(x);
            }
    }
    locks_cpu_set_isa(LOCKS_ISA_BEST);
    test_cond(bad == 0, "greedy on every path = the plain argmax (%d of %d cases differ)", bad, n_cases);
}

int main(void) {
    tu_seed("test_sampler");
    float logits[NV];
    for (int i = 0; i < NV; i++) logits[i] = (float)(2.0 * tu_normal());
    float top = logits[0];
    for (int i = 1; i < NV; i++) top = fmaxf(top, logits[i]);
    logits[17] = logits[3] = top + 1.0f; /* a tie at the top: greedy takes the lower id */

    locks_sampler_params sp = locks_sampler_default_params();
    sp.temp = 0.0f;
    locks_sampler *g = locks_sampler_init(sp, NV, NULL);
    test_cond(g && locks_sampler_sample(g, logits) == 3, "greedy: argmax with ties to the lower id");
    locks_sampler_free(g);
    check_greedy_paths();

    sp = (locks_sampler_params){.temp = 0.7f, .top_k = 0, .top_p = 1.0f, .seed = 11};
    check_distribution("temperature 0.7", logits, sp);
    sp = (locks_sampler_params){.temp = 1.5f, .top_k = 5, .top_p = 1.0f, .seed = 12};
    check_distribution("top-k 5 at T 1.5", logits, sp);
    sp = (locks_sampler_params){.temp = 1.0f, .top_k = 0, .top_p = 0.8f, .seed = 13};
    check_distribution("top-p 0.8", logits, sp);
    sp = (locks_sampler_params){.temp = 1.2f, .top_k = 20, .top_p = 0.9f, .seed = 14};
    check_distribution("top-k 20 + top-p 0.9 at T 1.2", logits, sp);

    /* seeds */
    sp = (locks_sampler_params){.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 99};
    locks_sampler *a = locks_sampler_init(sp, NV, NULL), *b = locks_sampler_init(sp, NV, NULL);
    sp.seed = 100;
    locks_sampler *c = locks_sampler_init(sp, NV, NULL);
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < 200; i++) {
        int32_t x = locks_sampler_sample(a, logits), y = locks_sampler_sample(b, logits),
                z = locks_sampler_sample(c, logits);
        same_ab &= x == y;
        same_ac &= x == z;
    }
    test_cond(same_ab, "same seed, same stream");
    test_cond(!same_ac, "another seed, another stream");
    locks_sampler_free(a);
    locks_sampler_free(b);
    locks_sampler_free(c);

    locks_status st = LOCKS_OK;
    sp.temp = NAN;
    test_cond(locks_sampler_init(sp, NV, &st) == NULL && st == LOCKS_ERR_INVALID_ARG, "NaN temperature refused");
    return test_report("test_sampler");
}
