/*
 * summary_build.c — time of one page summary build (locks_summary_build_f32, d = 64,
 * r = 8: centring, Gram, Jacobi, basis), best of 20 runs over 200 pages of structured
 * random keys, three times; with LOCKS_ISA=portable semantics via argv[1] = "portable".
 * Not part of the build. From the repository root, after `cmake --build build`:
 *   gcc -O2 -Iinclude -Isrc bench/cpu/2026-12-03-zen4/session4/summary_build.c \
 *       build/liblocks.a -lm -lpthread -o /tmp/summary_build
 *   /tmp/summary_build; /tmp/summary_build portable
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "locks.h"
#include "summary.h"
#include "vmath.h"
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
int main(int argc, char **argv) {
    enum { P = 16, d = 64, r = 8, NP = 200 };
    static float k[NP][P * d];
    float mu[d], basis[r * d], coef[P * r];
    if (argc > 1 && !strcmp(argv[1], "portable")) locks_cpu_set_isa(LOCKS_ISA_PORTABLE);
    srand(3);
    for (int p = 0; p < NP; p++)
        for (int i = 0; i < P * d; i++)
            k[p][i] = (rand() / (float)RAND_MAX - 0.5f) * 2 + (float)((i % d) % 5) * 0.3f + 0.5f * sinf(i * 0.37f + p);
    for (int rep = 0; rep < 3; rep++) {
        double best = 1e30;
        for (int it = 0; it < 20; it++) {
            double t0 = now();
            for (int p = 0; p < NP; p++) locks_summary_build_f32(d, r, k[p], mu, basis, coef);
            double t = (now() - t0) / NP;
            if (t < best) best = t;
        }
        printf("summary build d=64 r=8 (%s): %.2f us\n", argc > 1 ? argv[1] : "best ISA", best / 1e3);
    }
    return 0;
}
