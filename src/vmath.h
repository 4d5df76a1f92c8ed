/*
 * vmath.h — the small numeric kernels the hot loops share: fp16 rows to fp32, dot
 * products, exp and log-sum-exp over arrays. Each has a portable C version and, on
 * x86-64 with GCC/Clang, an AVX2+FMA+F16C version chosen at run time (the build never
 * assumes the host CPU). Results of the two versions agree to float rounding, not bit
 * for bit (the summation order differs).
 */
#ifndef LOCKS_VMATH_H
#define LOCKS_VMATH_H

#include <stddef.h>
#include <stdint.h>

/* 1 when the AVX2/FMA/F16C kernels are in use (cached after the first call). */
int locks_have_avx2(void);
/* dst[i] = half_to_float(src[i]) for i < n. */
void locks_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
/* sum_i a[i] b[i] (fp32, several partial sums). */
float locks_dot(const float *a, const float *b, int32_t n);
/* log sum_i exp(x[i]) for n >= 1 finite values. */
float locks_lse(const float *x, int32_t n);

#endif
