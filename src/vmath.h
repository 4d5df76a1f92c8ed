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

/* The kernel sets of the CPU code, narrowest first. A module uses the widest one it has
 * at or below locks_cpu_isa(): the CPU's own (checked once, at first use), capped by
 * locks_cpu_set_isa or, before any call of it, by the environment variable
 * LOCKS_CPU_ISA=portable|avx2|avx512 (another value is ignored). */
typedef enum {
    LOCKS_ISA_PORTABLE = 0, /* plain C */
    LOCKS_ISA_AVX2 = 1,     /* AVX2 + FMA + F16C (and AVX-VNNI where present) */
    LOCKS_ISA_AVX512 = 2    /* on top of those AVX-512 F/BW/VL/DQ */
} locks_isa;
locks_isa locks_cpu_isa(void);
/* Caps the kernel sets at max (tests and benchmarks force each path with it;
 * LOCKS_ISA_AVX512 restores the CPU check). Call with no step running. */
void locks_cpu_set_isa(locks_isa max);
/* "portable", "avx2" or "avx512". */
const char *locks_isa_name(locks_isa isa);

/* 1 when the AVX2/FMA/F16C kernels are in use (cached after the first call). */
int locks_have_avx2(void);
/* 1 when, on top of those, AVX-VNNI (vpdpbusd, VEX) is there and in use. */
int locks_have_avxvnni(void);
/* 1 when the AVX-512 (F/BW/VL/DQ) kernels are in use. */
int locks_have_avx512(void);
/* Tests only: 0 forces the portable kernels, 1 restores the CPU check, 2 keeps AVX2
 * but neither AVX-VNNI nor AVX-512. Call with no step running. */
void locks_simd_enable(int on);
/* 1 if all n values are finite (no NaN, no Inf). */
int locks_all_finite(const float *x, size_t n);
/* dst[i] = half_to_float(src[i]) for i < n. */
void locks_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
/* sum_i a[i] b[i] (fp32, several partial sums). */
float locks_dot(const float *a, const float *b, int32_t n);
/* dst[i] = float_to_half(src[i]) (round to nearest even) for i < n. */
void locks_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
/* x[i] = exp(x[i]) in place (relative error < 4e-7; inputs below -87 give 0). */
void locks_exp_n(float *x, size_t n);
/* x[i] = log(x[i]) in place, x[i] > 0 normal (absolute error < 4e-7 * max(1, |log x|)). */
void locks_log_n(float *x, size_t n);
/* max_i x[i] for n >= 1 values (no NaN). */
float locks_max_n(const float *x, size_t n);
/* x[i] = exp(x[i] - sub) in place (as locks_exp_n); returns sum_i x[i]. */
double locks_exp_sum_n(float *x, size_t n, float sub);
/* log sum_i exp(x[i]) for n >= 1 finite values. */
float locks_lse(const float *x, int32_t n);

#endif
