/*
 * vmath.c — portable and AVX2 versions of the shared numeric kernels (see vmath.h).
 */
#include "vmath.h"

#include <math.h>

#include "util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LOCKS_X86 1
#include <immintrin.h>
#endif

int locks_have_avx2(void) {
#ifdef LOCKS_X86
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                 __builtin_cpu_supports("f16c");
    }
    return cached;
#else
    return 0;
#endif
}

#ifdef LOCKS_X86
__attribute__((target("avx2,fma,f16c"))) static void f16_to_f32_avx2(const uint16_t *src, float *dst,
                                                                     size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = locks_f16_to_f32(src[i]);
}

__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int32_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}
#endif

void locks_f16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
#ifdef LOCKS_X86
    if (locks_have_avx2()) {
        f16_to_f32_avx2(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = locks_f16_to_f32(src[i]);
}

float locks_dot(const float *a, const float *b, int32_t n) {
#ifdef LOCKS_X86
    if (locks_have_avx2()) return dot_avx2(a, b, n);
#endif
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int32_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int32_t j = 0; j < 4; j++) s[j] += a[i + j] * b[i + j];
    for (; i < n; i++) s[0] += a[i] * b[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

float locks_lse(const float *x, int32_t n) {
    float m = x[0];
    for (int32_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    float s = 0.0f;
    for (int32_t i = 0; i < n; i++) s += expf(x[i] - m);
    return m + logf(s);
}
