/*
 * test_vmath.c — the shared numeric kernels against libm / the scalar conversions:
 * fp16 -> fp32 for all 65536 halves, fp32 -> fp16 (round to nearest even) on random and
 * edge values, exp and log on random inputs over their used ranges, GeGLU, SwiGLU, dot and lse
 * vs float64, max and exp-sum. Runs the version this machine selects, then the portable one.
 */
#include "test_util.h"

#include "util.h"
#include "vmath.h"

static void run(void) {
    printf("  avx2 kernels: %s\n", locks_have_avx2() ? "yes" : "no");
    enum { N = 65536 };
    static uint16_t h[N], h2[N];
    static float f[N], g[N];
    size_t bad = 0;
    for (int32_t i = 0; i < N; i++) h[i] = (uint16_t)i;
    locks_f16_to_f32_n(h, f, N);
    for (int32_t i = 0; i < N; i++) {
        float want = locks_f16_to_f32(h[i]);
        if (memcmp(&want, &f[i], 4) != 0 && !(isnan(want) && isnan(f[i]))) bad++;
    }
    test_cond(bad == 0, "f16->f32: %zu of 65536 differ", bad);

    for (int32_t i = 0; i < N; i++) {
        double mag = pow(2.0, tu_uniform() * 40.0 - 26.0); /* subnormal .. overflow */
        f[i] = (float)(tu_uniform() < 0.5 ? -mag : mag);
    }
    f[0] = 0.0f, f[1] = -0.0f, f[2] = 65504.0f, f[3] = 65520.0f, f[4] = 1e-8f, f[5] = INFINITY;
    locks_f32_to_f16_n(f, h2, N);
    bad = 0;
    for (int32_t i = 0; i < N; i++)
        if (h2[i] != locks_f32_to_f16(f[i])) {
            if (bad < 3) fprintf(stderr, "  f32->f16(%g): %04x vs %04x\n", (double)f[i], h2[i], locks_f32_to_f16(f[i]));
            bad++;
        }
    test_cond(bad == 0, "f32->f16: %zu of 65536 differ from the scalar RNE", bad);

    static double ref[N];
    for (int32_t i = 0; i < N; i++) {
        f[i] = (float)(-90.0 * tu_uniform() + (i % 7 == 0 ? 5.0 * tu_uniform() : 0.0));
        ref[i] = exp((double)f[i]);
    }
    memcpy(g, f, sizeof f);
    locks_exp_n(g, N - 3); /* odd tail */
    bad = 0;
    for (int32_t i = 0; i < N - 3; i++) {
        double tol = (double)f[i] < -87.0 ? 1.3e-38 : 4e-7 * ref[i];
        if (!(fabs((double)g[i] - ref[i]) <= tol)) {
            if (bad < 4) fprintf(stderr, "  exp(%.9g) = %.9g want %.9g\n", (double)f[i], (double)g[i], ref[i]);
            bad++;
        }
    }
    test_cond(bad == 0, "exp: %zu values beyond 4e-7 relative", bad);

    /* GeGLU: gelu_tanh(x) u against float64 over x in [-12, 12] (Gemma's gate values;
     * both saturations), a few far out, and an odd tail */
    {
        static float u[N];
        for (int32_t i = 0; i < N; i++) {
            f[i] = (float)(24.0 * tu_uniform() - 12.0);
            u[i] = (float)(4.0 * tu_uniform() - 2.0);
        }
        f[0] = 0.0f, f[1] = -60.0f, f[2] = 60.0f, f[3] = 1e-6f, f[4] = -3e4f, f[5] = 3e4f;
        memcpy(g, f, sizeof f);
        locks_geglu_n(g, u, N - 3);
        bad = 0;
        for (int32_t i = 0; i < N - 3; i++) {
            const double x = (double)f[i];
            const double want = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * (double)u[i];
            if (!(fabs((double)g[i] - want) <= 1e-6 * fabs(x * (double)u[i]) + 1e-30)) {
                if (bad < 4) fprintf(stderr, "  geglu(%.9g, %.9g) = %.9g want %.9g\n", x, (double)u[i], (double)g[i], want);
                bad++;
            }
        }
        test_cond(bad == 0, "geglu: %zu values beyond 1e-6 of |x u|", bad);
        test_cond(g[N - 2] == f[N - 2] && g[N - 1] == f[N - 1], "geglu wrote past n");

        /* SwiGLU: silu(x) u against float64 over x in [-20, 20] (SmolLM2's and Qwen's
         * gate values; both saturations), a few far out (exp(-x) clamped or 0), an odd tail */
        for (int32_t i = 0; i < N; i++) {
            f[i] = (float)(40.0 * tu_uniform() - 20.0);
            u[i] = (float)(4.0 * tu_uniform() - 2.0);
        }
        f[0] = 0.0f, f[1] = -95.0f, f[2] = 95.0f, f[3] = 1e-6f, f[4] = -3e4f, f[5] = 3e4f, f[6] = -88.0f;
        memcpy(g, f, sizeof f);
        locks_swiglu_n(g, u, N - 5);
        bad = 0;
        for (int32_t i = 0; i < N - 5; i++) {
            const double x = (double)f[i], want = x / (1.0 + exp(-x)) * (double)u[i];
            /* past x = -88.3 exp(-x) saturates at exp(88.3): |x u| / 2e38, below float's
             * resolution of anything the model adds it to */
            const double tol = x < -88.3 ? fabs(x * (double)u[i]) * 1e-37 : 1e-6 * fabs(x * (double)u[i]) + 1e-30;
            if (!(fabs((double)g[i] - want) <= tol)) {
                if (bad < 4) fprintf(stderr, "  swiglu(%.9g, %.9g) = %.9g want %.9g\n", x, (double)u[i], (double)g[i], want);
                bad++;
            }
        }
        test_cond(bad == 0, "swiglu: %zu values beyond 1e-6 of |x u|", bad);
        test_cond(g[N - 4] == f[N - 4] && g[N - 1] == f[N - 1], "swiglu wrote past n");
    }

    for (int32_t i = 0; i < N; i++) {
        f[i] = (float)pow(2.0, tu_uniform() * 60.0 - 30.0);
        ref[i] = log((double)f[i]);
    }
    memcpy(g, f, sizeof f);
    locks_log_n(g, N - 5);
    bad = 0;
    for (int32_t i = 0; i < N - 5; i++)
        if (!(fabs((double)g[i] - ref[i]) <= 4e-7 * fmax(1.0, fabs(ref[i])))) bad++;
    test_cond(bad == 0, "log: %zu values beyond tolerance", bad);

    for (int32_t trial = 0; trial < 100; trial++) {
        int32_t n = tu_int(1, 300);
        tu_fill_normal(f, (size_t)n, 2.0);
        tu_fill_normal(g, (size_t)n, 2.0);
        double dr = 0.0, m = -INFINITY, l = 0.0, asum = 0.0;
        for (int32_t i = 0; i < n; i++) {
            dr += (double)f[i] * (double)g[i];
            asum += fabs((double)f[i] * (double)g[i]);
            m = fmax(m, (double)f[i]);
        }
        for (int32_t i = 0; i < n; i++) l += exp((double)f[i] - m);
        double lr = m + log(l);
        float d = locks_dot(f, g, n), ls = locks_lse(f, n);
        test_cond(fabs((double)d - dr) <= 1e-6 * asum + 1e-6, "dot n=%d: %g vs %g", n, (double)d, dr);
        test_cond(fabs((double)ls - lr) <= 1e-5 * fmax(1.0, fabs(lr)), "lse n=%d: %g vs %g", n, (double)ls, lr);
        float mx = locks_max_n(f, (size_t)n);
        test_cond((double)mx == m, "max n=%d: %g vs %g", n, (double)mx, m);
        double es = locks_exp_sum_n(f, (size_t)n, mx); /* f[i] <- exp(f[i] - max) */
        test_cond(fabs(es - l) <= 1e-6 * l, "exp_sum n=%d: %.9g vs %.9g", n, es, l);
        double s2 = 0.0;
        for (int32_t i = 0; i < n; i++) s2 += (double)f[i];
        test_cond(fabs(s2 - es) <= 1e-6 * es, "exp_sum stores exp values");
    }

    /* exp_sum: an element's value does not depend on its position (tail or not): the same
     * values at every offset of windows of every length give bit-identical exps (equal
     * page scores must stay equal masses wherever the pages sit: test_cp's exact ties
     * failed for some seeds when the SIMD tail used another exp) */
    {
        enum { W = 40 };
        float base[W], a[W], b[W];
        tu_fill_normal(base, W, 2.0);
        const float sub = 0.75f;
        memcpy(a, base, sizeof a);
        locks_exp_sum_n(a, W, sub);
        int32_t diff = 0;
        for (int32_t off = 0; off < 9; off++)
            for (int32_t len = 1; off + len <= W; len++) {
                memcpy(b, base, sizeof b);
                locks_exp_sum_n(b + off, (size_t)len, sub);
                for (int32_t i = off; i < off + len; i++) diff += memcmp(&a[i], &b[i], sizeof(float)) != 0;
            }
        test_cond(diff == 0, "exp_sum: %d values differ with their position in the array", diff);
    }
}

/* The AVX2 and AVX-512 exps are one polynomial (LOCKS_EXP_CEPHES, vmath.h) at two widths:
 * the same value, bit for bit, in every lane, over the range the kernels use, past both
 * clamps and at the edges (attend.c's softmax uses the 512-bit one). The AVX-512 result is
 * also checked against float64. Skipped, and said so, on a CPU without AVX-512. */
static void exp_widths(void) {
    if (locks_cpu_set_isa(LOCKS_ISA_AVX512) != 0) {
        printf("test_vmath: no AVX-512 on this CPU, exp widths not compared\n");
        return;
    }
    enum { M = 1 << 16, TAIL = 5 };
    static float x[M], a[M], b[M];
    for (int32_t i = 0; i < M; i++) x[i] = (float)(-100.0 + 190.0 * tu_uniform());
    const float edge[] = {-87.3f, nextafterf(-87.3f, -INFINITY), nextafterf(-87.3f, INFINITY), 88.3f,
                          nextafterf(88.3f, INFINITY), 0.0f, -0.0f, 1e-30f, -1e-30f, 0.34657359f, -0.34657359f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) x[i * 97] = edge[i];
    memcpy(a, x, sizeof x);
    memcpy(b, x, sizeof x);
    locks_exp_n(a, M - TAIL); /* a masked tail as well */
    test_cond(locks_cpu_set_isa(LOCKS_ISA_AVX2) == 0, "set_isa avx2");
    locks_exp_n(b, M - TAIL);
    locks_cpu_set_isa(LOCKS_ISA_BEST);
    int32_t differ = 0, far = 0;
    for (int32_t i = 0; i < M; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) {
            if (differ < 4) fprintf(stderr, "  exp(%.9g): avx512 %.9g, avx2 %.9g\n", (double)x[i], (double)a[i], (double)b[i]);
            differ++;
        }
    for (int32_t i = 0; i < M - TAIL; i++) { /* float64, where neither clamp acts */
        if (x[i] < -87.0f || x[i] > 88.0f) continue;
        const double ref = exp((double)x[i]);
        if (!(fabs((double)a[i] - ref) <= 4e-7 * ref)) far++;
    }
    test_cond(differ == 0, "exp: %d of %d values differ between the AVX-512 and AVX2 widths", differ, M);
    test_cond(far == 0, "exp (AVX-512): %d values beyond 4e-7 relative of float64", far);
}

int main(void) {
    tu_seed("test_vmath");
    exp_widths();
    run();
    locks_simd_enable(0); /* the portable kernels */
    run();
    locks_simd_enable(1);
    return test_report("test_vmath");
}
