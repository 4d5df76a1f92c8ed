/* parts.c — scratch (session 7 of 2026-12-03, kept as it ran): the verify kernel's parts
 * alone at one thread (src/attend.c included): the FMA rate (registers, broadcasts from
 * memory), the logits of 16 keys x 16 rows at d 64 (as in attend.c; with the tree's partial
 * sums pinned by asm barriers; d a constant or at run time), the accumulation of 15 rows,
 * the K/V conversion.
 *   gcc -O3 -Isrc -Iinclude bench/cpu/2026-12-03-zen4/session7/parts.c build/liblocks.a -lm -lpthread -o /tmp/parts */
#include "attend.c"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
AVX512_TARGET __attribute__((noinline)) static void fma_peak(long n, float *out) {
    __m512 a[12]; for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    const __m512 x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(1e-7f);
    for (long k = 0; k < n; k++) for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], x, y);
    __m512 s = a[0]; for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]); _mm512_storeu_ps(out, s);
}
AVX512_TARGET __attribute__((noinline)) static void fma_bcast(long n, const float *m, float *out) {
    __m512 a[12]; for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    const __m512 x = _mm512_set1_ps(1.0000001f);
    for (long k = 0; k < n; k++) for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(x, _mm512_set1_ps(m[(k * 12 + i) & 255]), a[i]);
    __m512 s = a[0]; for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]); _mm512_storeu_ps(out, s);
}
AVX512_TARGET __attribute__((noinline)) static void logits_only(const float *kf, const float *qT, int d, __m512 *lg) {
    const __m512 vs = _mm512_set1_ps(0.125f);
    for (int t0 = 0; t0 < P; t0 += 4) rows_logits4_avx512(kf, t0, qT, d, vs, lg);
}
AVX512_TARGET __attribute__((noinline)) static void accum_only(const float *vf, const float *w, int d, float *acc) {
    accum_heads_avx512(vf, P, w, 1, 16, 0, d, acc, 4, 1);
    accum_heads_avx512(vf, P, w, 1, 16, 4, d, acc, 4, 1);
    accum_heads_avx512(vf, P, w, 1, 16, 8, d, acc, 4, 1);
    accum_heads_avx512(vf, P, w, 1, 16, 12, d, acc, 3, 1);
}

#define PIN4(x) __asm__ volatile("" : "+v"((x)[0]), "+v"((x)[1]), "+v"((x)[2]), "+v"((x)[3]))
AVX512_TARGET static inline __attribute__((always_inline)) void
rows_logits4_b(const float *kf, int32_t t0, const float *qT, int32_t d, __m512 vs, __m512 *lg) {
    __m512 a[4], b[4], s20[4], s30[4], s21[4];
    rows_pair_avx512(kf, t0, qT, d, 0, a);
    rows_pair_avx512(kf, t0, qT, d, 4, b);
    for (int k = 0; k < 4; k++) s20[k] = _mm512_add_ps(a[k], b[k]);
    PIN4(s20);
    rows_pair_avx512(kf, t0, qT, d, 2, a);
    rows_pair_avx512(kf, t0, qT, d, 6, b);
    for (int k = 0; k < 4; k++) s30[k] = _mm512_add_ps(s20[k], _mm512_add_ps(a[k], b[k]));
    PIN4(s30);
    rows_pair_avx512(kf, t0, qT, d, 1, a);
    rows_pair_avx512(kf, t0, qT, d, 5, b);
    for (int k = 0; k < 4; k++) s21[k] = _mm512_add_ps(a[k], b[k]);
    PIN4(s21);
    rows_pair_avx512(kf, t0, qT, d, 3, a);
    rows_pair_avx512(kf, t0, qT, d, 7, b);
    for (int k = 0; k < 4; k++)
        lg[t0 + k] = _mm512_mul_ps(_mm512_add_ps(s30[k], _mm512_add_ps(s21[k], _mm512_add_ps(a[k], b[k]))), vs);
}
AVX512_TARGET __attribute__((noinline)) static void logits_b(const float *kf, const float *qT, int d, __m512 *lg) {
    const __m512 vs = _mm512_set1_ps(0.125f);
    for (int t0 = 0; t0 < P; t0 += 4) rows_logits4_b(kf, t0, qT, d, vs, lg);
}
AVX512_TARGET __attribute__((noinline)) static void logits_rt(const float *kf, const float *qT, int d, __m512 *lg) {
    const __m512 vs = _mm512_set1_ps(0.125f);
    for (int t0 = 0; t0 < P; t0 += 4) rows_logits4_avx512(kf, t0, qT, d, vs, lg);
}
AVX512_TARGET __attribute__((noinline)) static void logits_rtb(const float *kf, const float *qT, int d, __m512 *lg) {
    const __m512 vs = _mm512_set1_ps(0.125f);
    for (int t0 = 0; t0 < P; t0 += 4) rows_logits4_b(kf, t0, qT, d, vs, lg);
}
int main(void) {
    float out[16], m[256]; for (int i = 0; i < 256; i++) m[i] = i * 1e-3f;
    long n = 20000000;
    double t0 = now(); fma_peak(n, out); double t1 = now();
    printf("fma reg: %.3f ns per zmm FMA -> %.2f GHz equiv at 1/cycle\n", (t1 - t0) / (n * 12.0), (n * 12.0) / (t1 - t0));
    t0 = now(); fma_bcast(n, m, out); t1 = now();
    printf("fma bcast-mem: %.3f ns per zmm FMA\n", (t1 - t0) / (n * 12.0));
    int d = 64; float *kf = aligned_alloc(64, 4 * P * d), *qT = aligned_alloc(64, 4 * 16 * d), *w = aligned_alloc(64, 4 * P * 16), *acc = aligned_alloc(64, 4 * 16 * d);
    for (int i = 0; i < P * d; i++) kf[i] = (i % 13) * 0.01f; for (int i = 0; i < 16 * d; i++) { qT[i] = (i % 7) * 0.1f; acc[i] = 0; } for (int i = 0; i < P * 16; i++) w[i] = 0.01f;
    __m512 lg[P]; long R = 200000;
    t0 = now(); for (long r = 0; r < R; r++) { logits_only(kf, qT, d, lg); __asm__ volatile("" ::: "memory"); } t1 = now();
    printf("logits 16 keys x 16 rows, d 64 (1024 FMAs): %.0f ns\n", (t1 - t0) / R);
    __m512 lg2[P]; logits_only(kf, qT, d, lg); logits_b(kf, qT, d, lg2); printf("same: %d\n", !memcmp(lg, lg2, sizeof lg));
    t0 = now(); for (long r = 0; r < R; r++) { logits_b(kf, qT, d, lg); __asm__ volatile("" ::: "memory"); } t1 = now();
    printf("logits pinned: %.0f ns\n", (t1 - t0) / R);
    t0 = now(); for (long r = 0; r < R; r++) { logits_only(kf, qT, d, lg); __asm__ volatile("" ::: "memory"); } t1 = now();
    printf("logits again: %.0f ns\n", (t1 - t0) / R);
    { volatile int dv = 64; int dd = dv;
    t0 = now(); for (long r = 0; r < R; r++) { logits_rt(kf, qT, dd, lg); __asm__ volatile("" ::: "memory"); } t1 = now();
    printf("logits runtime d: %.0f ns\n", (t1 - t0) / R);
    t0 = now(); for (long r = 0; r < R; r++) { logits_rtb(kf, qT, dd, lg); __asm__ volatile("" ::: "memory"); } t1 = now();
    printf("logits runtime d pinned: %.0f ns\n", (t1 - t0) / R); }
    t0 = now(); for (long r = 0; r < R; r++) { accum_only(kf, w, d, acc); __asm__ volatile("" ::: "memory"); } t1 = now();
    printf("accum 15 rows (960 FMAs): %.0f ns\n", (t1 - t0) / R);
    uint16_t *kb = aligned_alloc(64, 2 * P * d); for (int i = 0; i < P * d; i++) kb[i] = 0x3c00;
    t0 = now(); for (long r = 0; r < R; r++) { f16_to_f32_avx512(kb, kf, P * d); f16_to_f32_avx512(kb, acc, P * d > 16 * d ? 16 * d : P * d); __asm__ volatile("" ::: "memory"); } t1 = now();
    printf("convert K and V: %.0f ns\n", (t1 - t0) / R);
    return (int)out[0] & 1;
}
