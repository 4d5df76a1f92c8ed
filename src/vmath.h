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
/* g[i] = gelu_tanh(g[i]) * u[i] (GeGLU; GELU's tanh approximation, Gemma's
 * gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))); relative error
 * < 1e-6 of |x u| on the AVX2 path (exp based), tanhf on the portable one. */
void locks_geglu_n(float *g, const float *u, size_t n);
/* g[i] = silu(g[i]) * u[i] (SwiGLU; silu(x) = x / (1 + exp(-x))); relative error < 1e-6
 * of |x u| on the AVX2 path (exp8: for x < -88.3 exp(-x) stays at exp(88.3), for x > 87.3
 * it is 0), expf on the portable one. */
void locks_swiglu_n(float *g, const float *u, size_t n);
/* log sum_i exp(x[i]) for n >= 1 finite values. */
float locks_lse(const float *x, int32_t n);

/* Page mean of k[16][d] in fp32 -> mean[d]. Shadow's centroid and landmark. */
void locks_page_mean(int32_t d, const float *k, float *mean);

/* exp(x) of a vector of floats, the Cephes expf polynomial, written once for every
 * width: BITS 256 (AVX2: vmath.c's exp8) or 512 (AVX-512: vmath.c's exp16 and attend.c's
 * softmax), ROUND that width's round-to-nearest (_mm256_round_ps, _mm512_roundscale_ps).
 * x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so r is exact), exp(r) by a
 * degree-6 polynomial, 2^n through the exponent bits; x is clamped to [-87.3, 88.3]
 * first. The caller zeroes the lanes whose x was below -87.3 (its mask type depends on
 * the width). The same operations in the same order at both widths give the same value
 * in every lane (test_vmath checks it bit for bit). A macro, not a function, because
 * each width's kernels need it inlined under their own target attribute. */
#define LOCKS_EXP_CEPHES(BITS, ROUND, x, out)                                                                        \
    do {                                                                                                             \
        const __m##BITS xc_ = _mm##BITS##_max_ps(_mm##BITS##_min_ps(x, _mm##BITS##_set1_ps(88.3f)),                   \
                                                 _mm##BITS##_set1_ps(-87.3f));                                       \
        const __m##BITS n_ = ROUND(_mm##BITS##_mul_ps(xc_, _mm##BITS##_set1_ps(1.44269504088896341f)),               \
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);                                   \
        __m##BITS r_ = _mm##BITS##_fnmadd_ps(n_, _mm##BITS##_set1_ps(0.693359375f), xc_);                            \
        r_ = _mm##BITS##_fnmadd_ps(n_, _mm##BITS##_set1_ps(-2.12194440e-4f), r_);                                    \
        __m##BITS p_ = _mm##BITS##_set1_ps(1.9875691500e-4f);                                                        \
        p_ = _mm##BITS##_fmadd_ps(p_, r_, _mm##BITS##_set1_ps(1.3981999507e-3f));                                    \
        p_ = _mm##BITS##_fmadd_ps(p_, r_, _mm##BITS##_set1_ps(8.3334519073e-3f));                                    \
        p_ = _mm##BITS##_fmadd_ps(p_, r_, _mm##BITS##_set1_ps(4.1665795894e-2f));                                    \
        p_ = _mm##BITS##_fmadd_ps(p_, r_, _mm##BITS##_set1_ps(1.6666665459e-1f));                                    \
        p_ = _mm##BITS##_fmadd_ps(p_, r_, _mm##BITS##_set1_ps(5.0000001201e-1f));                                    \
        p_ = _mm##BITS##_fmadd_ps(p_, _mm##BITS##_mul_ps(r_, r_), _mm##BITS##_add_ps(r_, _mm##BITS##_set1_ps(1.0f))); \
        const __m##BITS##i e_ = _mm##BITS##_slli_epi32(                                                              \
            _mm##BITS##_add_epi32(_mm##BITS##_cvtps_epi32(n_), _mm##BITS##_set1_epi32(127)), 23);                   \
        (out) = _mm##BITS##_mul_ps(p_, _mm##BITS##_castsi##BITS##_ps(e_));                                          \
    } while (0)

#endif
