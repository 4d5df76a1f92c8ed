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
/* 1 when, on top of those, AVX-VNNI (vpdpbusd, VEX) is there and in use. */
int locks_have_avxvnni(void);
/* 1 when the AVX-512 kernels (F, BW, VL, VNNI: 512-bit vpdpbusd) are in use; and when
 * AVX512-BF16 is there too. */
int locks_have_avx512(void);
int locks_have_avx512bf16(void);
/* Tests only: 0 forces the portable kernels, 1 restores the CPU check, 2 keeps AVX2
 * but neither AVX-VNNI nor AVX-512. Call with no step running. */
void locks_simd_enable(int on);

/* The kernel sets a process may use, for tests and tools that force one path: PORTABLE
 * (plain C), AVX2 (AVX2/FMA/F16C, AVX-VNNI where present), AVX512 (all of the above and
 * the AVX-512 kernels), BEST (whatever the CPU has; the default). */
typedef enum { LOCKS_ISA_PORTABLE = 0, LOCKS_ISA_AVX2 = 1, LOCKS_ISA_AVX512 = 2, LOCKS_ISA_BEST = 3 } locks_isa;
/* Forces isa for every kernel from now on (call with no step running). Returns 0, or -1
 * (nothing changed) when isa is not a locks_isa or this CPU lacks it. */
int locks_cpu_set_isa(locks_isa isa);
/* The widest set in use now (never BEST). */
locks_isa locks_cpu_isa(void);
/* "portable", "avx2", "avx512", "best"; locks_isa_parse is the inverse (0, or -1 for a
 * name it does not know, *isa untouched). */
const char *locks_isa_name(locks_isa isa);
int locks_isa_parse(const char *s, locks_isa *isa);
/* 1 if all n values are finite (no NaN, no Inf). */
int locks_all_finite(const float *x, size_t n);
/* The index of the first value that is NaN or has |x| > lim (Inf included); n if none. */
size_t locks_first_past(const float *x, size_t n, float lim);
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

/* Page mean of k[16][d] in fp32 -> mean[d]. Shadow's centroid and landmark. */
void locks_page_mean(int32_t d, const float *k, float *mean);

#endif
