/*
 * simd_avx2.h — the AVX2 helpers that matmul.c's and quant.c's kernels share: the target
 * attributes, a horizontal sum, and the u8 x s8 byte dot product (maddubs + madd, or
 * AVX-VNNI's vpdpbusd). static inline and always inlined, so each kernel compiles them
 * under its own target; include only on x86 with GCC or clang (after <immintrin.h>).
 */
#ifndef LOCKS_SIMD_AVX2_H
#define LOCKS_SIMD_AVX2_H

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

AVX2_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* sum of u8 w[j] * s8 x[j] over 32 bytes, as 8 int32 lanes (lane i: bytes 4i .. 4i + 3).
 * vnni is a constant after inlining; vpdpbusd goes through inline assembly ({vex}: the
 * AVX-VNNI encoding) so that one body serves both instruction sets. maddubs saturates
 * only past 32767 per pair: callers keep |w| * 128 * 2 below it. */
AVX2_INLINE __m256i dot_u8s8(__m256i w, __m256i x, const int vnni) {
    if (vnni) {
        __m256i p = _mm256_setzero_si256();
        __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(p) : "x"(w), "x"(x));
        return p;
    }
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

#endif
