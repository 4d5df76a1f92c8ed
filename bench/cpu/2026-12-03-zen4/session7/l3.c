/* l3.c — scratch (session 7 of 2026-12-03, kept as it ran): one thread reads a buffer of
 * argv[1] MB over and over, plainly and with prefetchnta past the first argv[2] MB: does
 * this VM's L3 keep a part of a stream across passes?
 *   gcc -O2 bench/cpu/2026-12-03-zen4/session7/l3.c -o /tmp/l3; /tmp/l3 71 20; /tmp/l3 24 0; /tmp/l3 8 0 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec * 1e-6; }
__attribute__((target("avx2"))) static long pass(const char *b, size_t n, size_t sticky, int nta) {
    __m256i acc = _mm256_setzero_si256();
    for (size_t o = 0; o < n; o += 64) {
        if (nta && o >= sticky && o + 1024 < n) _mm_prefetch(b + o + 1024, _MM_HINT_NTA);
        acc = _mm256_add_epi64(acc, _mm256_load_si256((const __m256i *)(b + o)));
        acc = _mm256_add_epi64(acc, _mm256_load_si256((const __m256i *)(b + o + 32)));
    }
    long r[4]; _mm256_storeu_si256((__m256i *)r, acc); return r[0] + r[1] + r[2] + r[3];
}
int main(int argc, char **argv) {
    size_t n = (size_t)(argc > 1 ? atoi(argv[1]) : 71) << 20, sticky = (size_t)(argc > 2 ? atoi(argv[2]) : 20) << 20;
    char *b = aligned_alloc(1 << 21, n); memset(b, 1, n);
    long s = 0;
    for (int mode = 0; mode < 2; mode++) {
        double best = 1e9, tot = 0;
        for (int r = 0; r < 12; r++) { double t0 = now(); s += pass(b, n, sticky, mode); double t = now() - t0; if (r >= 2) { tot += t; if (t < best) best = t; } }
        printf("%s: %.2f ms per pass (min %.2f): %.1f GB/s\n", mode ? "NTA past the first part" : "plain", tot / 10, best, n / (tot / 10) / 1e6);
    }
    return (int)(s & 1);
}
