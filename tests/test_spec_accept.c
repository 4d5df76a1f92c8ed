/*
 * test_spec_accept.c — the acceptance step of speculative sampling (locks_spec_accept,
 * src/model/speculate.c) on fresh random distributions, no model: with d drawn from q and
 * the step's output taken as the token, the output frequencies over many draws match p
 * (chi-square at the 1e-4 level over cells expecting >= 20, and the largest frequency
 * error within 5 standard errors among tokens expecting >= 20 draws), for p and q that differ a lot, a little, have disjoint
 * supports, and are equal (then every draft is accepted). The statistic for q instead of
 * p is checked to be far above the bound, so the test can tell a wrong step apart.
 */
#include "test_util.h"

#include "model/speculate.h"

enum { V = 40, N = 200000 };

static void random_dist(float *x, double zero_frac, double peak) {
    double s = 0.0;
    for (int i = 0; i < V; i++) {
        x[i] = tu_uniform() < zero_frac ? 0.0f : (float)pow(tu_uniform(), peak);
        s += (double)x[i];
    }
    if (s == 0.0) x[tu_int(0, V - 1)] = 1.0f, s = 1.0;
    for (int i = 0; i < V; i++) x[i] = (float)((double)x[i] / s);
}

/* chi-square of counts against probabilities (cells pooled to expect >= 20) */
static double chi2(const int64_t *cnt, const float *prob, int *dof) {
    double stat = 0.0, o = 0.0, e = 0.0;
    int cells = 0;
    for (int i = 0; i < V; i++) {
        o += (double)cnt[i];
        e += (double)prob[i] * N;
        if (e >= 20.0 || i == V - 1) {
            if (e > 0.0) stat += (o - e) * (o - e) / e, cells++;
            else if (o > 0.0) stat += 1e9; /* a token of probability 0 came out */
            o = e = 0.0;
        }
    }
    *dof = cells > 1 ? cells - 1 : 1;
    return stat;
}

static double crit(int k) { /* 0.9999 quantile, Wilson-Hilferty */
    double h = 2.0 / (9.0 * k);
    return k * pow(1.0 - h + 3.719016 * sqrt(h), 3.0);
}

static void run_case(const char *name, const float *p, const float *q, locks_sampler *s) {
    int64_t cnt[V] = {0}, acc = 0;
    float pw[V];
    for (int t = 0; t < N; t++) {
        int32_t d = locks_sampler_draw(s, q);
        memcpy(pw, p, sizeof pw);
        int ok;
        int32_t x = locks_spec_accept(s, pw, q, d, V, &ok);
        SETUP(x >= 0 && x < V);
        cnt[x]++;
        acc += ok;
    }
    int dof, dof_q;
    double x2 = chi2(cnt, p, &dof), x2q = chi2(cnt, q, &dof_q);
    double worst = 0.0;
    int wi = 0;
    for (int i = 0; i < V; i++) {
        if ((double)p[i] * N < 20.0) continue; /* rare tokens: the pooled chi-square covers them */
        double f = (double)cnt[i] / N, se = sqrt((double)p[i] * (1.0 - (double)p[i]) / N);
        if (fabs(f - (double)p[i]) / se > worst) worst = fabs(f - (double)p[i]) / se, wi = i;
    }
    if (worst >= 5.0)
        printf("  token %d: %lld of %d, p %.3g q %.3g\n", wi, (long long)cnt[wi], N, (double)p[wi], (double)q[wi]);
    double expect_acc = 0.0; /* P(accept) = sum min(p, q) */
    for (int i = 0; i < V; i++) expect_acc += (double)(p[i] < q[i] ? p[i] : q[i]);
    printf("%-10s chi2 vs p %.1f (dof %d, bound %.1f), vs q %.1f; worst error %.2f se; accepted %.4f (expect %.4f)\n",
           name, x2, dof, crit(dof), x2q, worst, (double)acc / N, expect_acc);
    test_cond(x2 < crit(dof), "%s: output frequencies differ from p (chi2 %.1f > %.1f)", name, x2, crit(dof));
    test_cond(worst < 5.0, "%s: a token's frequency is %.1f standard errors off p", name, worst);
    test_cond(fabs((double)acc / N - expect_acc) < 5.0 * sqrt(fmax(0.0, expect_acc * (1 - expect_acc)) / N) + 1e-5,
              "%s: acceptance rate %.4f, expected %.4f", name, (double)acc / N, expect_acc);
}

int main(void) {
    uint64_t seed = tu_seed("test_spec_accept");
    locks_sampler_params sp = locks_sampler_default_params();
    sp.seed = seed;
    locks_status st;
    locks_sampler *s = locks_sampler_init(sp, V, &st);
    SETUP(s);
    float p[V], q[V];
    /* far apart */
    random_dist(p, 0.3, 3.0);
    random_dist(q, 0.3, 3.0);
    run_case("far", p, q, s);
    /* close: q a perturbation of p */
    random_dist(p, 0.0, 2.0);
    double z = 0.0;
    for (int i = 0; i < V; i++) q[i] = p[i] * (float)(0.8 + 0.4 * tu_uniform()), z += (double)q[i];
    for (int i = 0; i < V; i++) q[i] = (float)((double)q[i] / z);
    run_case("close", p, q, s);
    /* disjoint supports: every draft rejected */
    memset(p, 0, sizeof p);
    memset(q, 0, sizeof q);
    for (int i = 0; i < V; i++) (i % 2 ? p : q)[i] = 1.0f / (V / 2);
    run_case("disjoint", p, q, s);
    /* equal: every draft accepted */
    random_dist(p, 0.2, 2.0);
    memcpy(q, p, sizeof q);
    run_case("equal", p, q, s);
    /* the statistic has power: frequencies of q, judged against a far p, fail the bound */
    random_dist(p, 0.3, 3.0);
    random_dist(q, 0.3, 3.0);
    int64_t cnt[V] = {0};
    for (int t = 0; t < N; t++) cnt[locks_sampler_draw(s, q)]++;
    int dof;
    double x2 = chi2(cnt, p, &dof);
    test_cond(x2 > 10.0 * crit(dof), "the chi-square cannot tell q from p (%.1f vs bound %.1f)", x2, crit(dof));
    locks_sampler_free(s);
    return test_report("test_spec_accept");
}
