/*
 * spec_floor.c — what exact speculation can give on this machine at best: the floors of a
 * dense decode step and of a speculative round of SmolLM2-135M Q4_1 at 6,460 tokens, from
 * this machine's measured read bandwidth and fp32 FMA rate (session 6 of 2026-12-03; the
 * floors assume perfect kernels, so the ratio printed is an upper bound for the method on
 * this machine, not a prediction):
 *   gcc -O2 -march=native -pthread bench/cpu/2026-12-03-zen4/session6/spec_floor.c -o /tmp/spec_floor
 *   /tmp/spec_floor [threads=2] [tokens per round=4.0]
 * Dense step: weights (66.4 MB Q4_1 blocks + the 30.1 MB Q8_0 head) and the K/V of 6,460
 * tokens (30 layers x 3 KV heads x 64 x fp16 K and V: 148.8 MB) read once, or its attention
 * arithmetic, whichever is longer. Draft step (LOCKS at budget 256): the weights with the
 * 4-bit head (15.9 MB), a quarter of one scoring (17.5 MB of summaries; drafts 2-4 replay
 * the first's pages) and 256 tokens of K/V per KV head. Verify of 5 tokens: the weights
 * once (the 5-token products' VNNI arithmetic is below the read time at these rates) plus
 * the attention arithmetic of 5 queries x 9 heads over 6,460 keys (q.k and p.v: 2 x 64
 * FMAs a key) at the FMA peak, with no exps or conversions counted.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

#define BUF ((size_t)1 << 29) /* 512 MB: far past the caches */
static char *buf;
static int T;
static volatile double sink_d[64]; /* read by nothing: volatile keeps the loops */

static void *rd(void *a) {
    long i = (long)a;
    size_t n = BUF / T, o = n * i;
    __m512i acc = _mm512_setzero_si512();
    for (size_t k = o; k < o + n; k += 64) acc = _mm512_xor_si512(acc, _mm512_load_si512(buf + k));
    sink_d[i] = (double)_mm512_reduce_add_epi64(acc);
    return NULL;
}

#define FMA_ITERS 20000000L
static void *fma_loop(void *a) { /* 10 independent chains in registers: past the FMA latency */
    long i = (long)a;
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 x0 = _mm512_set1_ps(1.0f + i), x1 = _mm512_set1_ps(2.0f), x2 = _mm512_set1_ps(3.0f), x3 = _mm512_set1_ps(4.0f),
           x4 = _mm512_set1_ps(5.0f), x5 = _mm512_set1_ps(6.0f), x6 = _mm512_set1_ps(7.0f), x7 = _mm512_set1_ps(8.0f),
           x8 = _mm512_set1_ps(9.0f), x9 = _mm512_set1_ps(10.0f);
    for (long it = 0; it < FMA_ITERS; it++) {
        x0 = _mm512_fmadd_ps(x0, m, c); x1 = _mm512_fmadd_ps(x1, m, c); x2 = _mm512_fmadd_ps(x2, m, c);
        x3 = _mm512_fmadd_ps(x3, m, c); x4 = _mm512_fmadd_ps(x4, m, c); x5 = _mm512_fmadd_ps(x5, m, c);
        x6 = _mm512_fmadd_ps(x6, m, c); x7 = _mm512_fmadd_ps(x7, m, c); x8 = _mm512_fmadd_ps(x8, m, c);
        x9 = _mm512_fmadd_ps(x9, m, c);
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x0, x1), _mm512_add_ps(x2, x3)),
                             _mm512_add_ps(_mm512_add_ps(x4, x5), _mm512_add_ps(_mm512_add_ps(x6, x7), _mm512_add_ps(x8, x9))));
    sink_d[i] = _mm512_reduce_add_ps(s);
    return NULL;
}

static double run(void *(*f)(void *)) {
    pthread_t th[64];
    double t0 = now();
    for (long i = 0; i < T; i++) pthread_create(&th[i], NULL, f, (void *)i);
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    return now() - t0;
}

int main(int argc, char **argv) {
    T = argc > 1 ? atoi(argv[1]) : 2;
    const double R = argc > 2 ? atof(argv[2]) : 4.0; /* tokens a round: accepted drafts + 1 */
    buf = aligned_alloc(64, BUF);
    memset(buf, 1, BUF);
    double bw = 0, fl = 0;
    for (int r = 0; r < 5; r++) { double s = run(rd), b = BUF / s / 1e9; if (getenv("DBG")) printf("read %.4f s\n", s); bw = b > bw ? b : bw; }
    for (int r = 0; r < 3; r++) { double f = 10.0 * 16 * FMA_ITERS * T / run(fma_loop) / 1e9; fl = f > fl ? f : fl; }
    const double W = 66.4e6, head8 = 30.1e6, head4 = 15.9e6, L = 30, HKV = 3, HQ = 9, D = 64, N = 6460;
    const double kv_tok = L * HKV * D * 2 * 2, kv = kv_tok * N, summ = 17.5e6;
    const double macs_q = L * HQ * N * 2 * D; /* one query token's attention multiply-adds */
    const double dense_rd = (W + head8 + kv) / (bw * 1e9), dense_fma = macs_q / (fl * 1e9);
    const double dense = dense_rd > dense_fma ? dense_rd : dense_fma;
    const double draft = (W + head4 + summ / 4 + 256 * kv_tok) / (bw * 1e9);
    const double verify = (W + head8) / (bw * 1e9) + 5 * macs_q / (fl * 1e9);
    const double round = 4 * draft + verify;
    printf("threads %d: read bandwidth %.1f GB/s, fp32 FMA %.1f GMAC/s (best of 5 / 3)\n", T, bw, fl);
    printf("dense step floor %.2f ms (reads %.2f, attention arithmetic %.2f)\n", dense * 1e3, dense_rd * 1e3, dense_fma * 1e3);
    printf("draft step floor %.2f ms; verify of 5 floor %.2f ms (weights %.2f + attention %.2f); round of 4 drafts %.2f ms\n",
           draft * 1e3, verify * 1e3, (W + head8) / (bw * 1e9) * 1e3, 5 * macs_q / (fl * 1e9) * 1e3, round * 1e3);
    for (double r = 3.0; r <= 5.0; r += 0.5)
        printf("  %.1f tokens a round: speculation / dense at the floors %.2fx%s\n", r, r * dense / round, r == R ? "  <- the measured -n 64 rounds" : "");
    return 0;
}
