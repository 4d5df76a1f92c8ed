/*
 * vmath.c — portable and AVX2 versions of the shared numeric kernels (see vmath.h).
 */
#include "vmath.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LOCKS_X86 1
#include <immintrin.h>
#endif

/* -1: not checked yet; bit 0: AVX2/FMA/F16C kernels; bit 1: AVX-VNNI too; bit 2: the
 * AVX-512 kernels (F, BW, VL and VNNI); bit 3: AVX512-BF16 too. */
static atomic_int simd_state = -1;
static atomic_int simd_mask = 15; /* what locks_simd_enable / locks_cpu_set_isa allow */

static int simd_cpu(void) {
    int st = 0;
#ifdef LOCKS_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        st = 1;
        if (__builtin_cpu_supports("avxvnni")) st |= 2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
            st |= 4;
            if (__builtin_cpu_supports("avx512bf16")) st |= 8;
        }
    }
#endif
    return st;
}

static void simd_set_mask(int mask) {
    atomic_store_explicit(&simd_mask, mask, memory_order_relaxed);
    atomic_store_explicit(&simd_state, -1, memory_order_relaxed);
}

void locks_simd_enable(int on) { simd_set_mask(on == 0 ? 0 : on == 2 ? 1 : 15); }

static int simd_get(void) {
    int st = atomic_load_explicit(&simd_state, memory_order_relaxed);
    if (st >= 0) return st;
    st = simd_cpu() & atomic_load_explicit(&simd_mask, memory_order_relaxed);
    atomic_store_explicit(&simd_state, st, memory_order_relaxed);
    return st;
}

int locks_have_avx2(void) { return simd_get() & 1; }
int locks_have_avxvnni(void) { return (simd_get() >> 1) & 1; }
int locks_have_avx512(void) { return (simd_get() >> 2) & 1; }
int locks_have_avx512bf16(void) { return (simd_get() >> 3) & 1; }

int locks_cpu_set_isa(locks_isa isa) {
    static const int mask[] = {0, 3, 15, 15}; /* PORTABLE, AVX2 (with AVX-VNNI), AVX512, BEST */
    if ((int)isa < 0 || (int)isa > LOCKS_ISA_BEST) return -1;
    int cpu = simd_cpu();
    if ((isa == LOCKS_ISA_AVX2 && !(cpu & 1)) || (isa == LOCKS_ISA_AVX512 && !(cpu & 4))) return -1;
    simd_set_mask(mask[isa]);
    return 0;
}

locks_isa locks_cpu_isa(void) {
    int st = simd_get();
    return st & 4 ? LOCKS_ISA_AVX512 : st & 1 ? LOCKS_ISA_AVX2 : LOCKS_ISA_PORTABLE;
}

const char *locks_isa_name(locks_isa isa) {
    switch (isa) {
    case LOCKS_ISA_PORTABLE: return "portable";
    case LOCKS_ISA_AVX2: return "avx2";
    case LOCKS_ISA_AVX512: return "avx512";
    case LOCKS_ISA_BEST: return "best";
    }
    return "?";
}

int locks_isa_parse(const char *s, locks_isa *isa) {
    for (int i = 0; i <= LOCKS_ISA_BEST; i++)
        if (s && !strcmp(s, locks_isa_name((locks_isa)i))) {
            *isa = (locks_isa)i;
            return 0;
        }
    return -1;
}

#ifdef LOCKS_X86
__attribute__((target("avx2,fma,f16c"))) static void f16_to_f32_avx2(const uint16_t *src, float *dst,
                                                                     size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = locks_f16_to_f32(src[i]);
}

__attribute__((target("avx2,fma,f16c"))) static void f32_to_f16_avx2(const float *src, uint16_t *dst,
                                                                     size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = locks_f32_to_f16(src[i]);
}

/* exp(x) for 8 floats (LOCKS_EXP_CEPHES, vmath.h). x < -87.3 gives 0. */
__attribute__((target("avx2,fma"))) static __m256 exp8(__m256 x) {
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    __m256 res;
    LOCKS_EXP_CEPHES(256, _mm256_round_ps, x, res);
    return _mm256_andnot_ps(under, res);
}

/* exp(x) for 16 floats: exp8's operations, 16 lanes wide (so the same values). */
__attribute__((target("avx512f,fma"))) static __m512 exp16(__m512 x) {
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    __m512 res;
    LOCKS_EXP_CEPHES(512, _mm512_roundscale_ps, x, res);
    return _mm512_maskz_mov_ps((__mmask16)~under, res);
}

/* log(x) for 8 positive normal floats: x = m 2^e with m in [sqrt(1/2), sqrt(2)),
 * log(m) by the Cephes logf polynomial. */
__attribute__((target("avx2,fma"))) static __m256 log8(__m256 x) {
    __m256i xi = _mm256_castps_si256(x);
    __m256i ei = _mm256_sub_epi32(_mm256_srli_epi32(xi, 23), _mm256_set1_epi32(127));
    __m256 m = _mm256_castsi256_ps(
        _mm256_or_si256(_mm256_and_si256(xi, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f800000)));
    __m256 e = _mm256_cvtepi32_ps(ei);
    __m256 big = _mm256_cmp_ps(m, _mm256_set1_ps(1.41421356237f), _CMP_GT_OQ);
    m = _mm256_blendv_ps(m, _mm256_mul_ps(m, _mm256_set1_ps(0.5f)), big);
    e = _mm256_add_ps(e, _mm256_and_ps(big, _mm256_set1_ps(1.0f)));
    __m256 f = _mm256_sub_ps(m, _mm256_set1_ps(1.0f));
    __m256 p = _mm256_set1_ps(7.0376836292e-2f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-1.1514610310e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.1676998740e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-1.2420140846e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.4249322787e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-1.6668057665e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.0000714765e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(-2.4999993993e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(3.3333331174e-1f));
    __m256 f2 = _mm256_mul_ps(f, f);
    p = _mm256_mul_ps(_mm256_mul_ps(p, f), f2);
    p = _mm256_fmadd_ps(e, _mm256_set1_ps(-2.12194440e-4f), p);
    p = _mm256_fnmadd_ps(f2, _mm256_set1_ps(0.5f), p);
    __m256 res = _mm256_add_ps(f, p);
    return _mm256_fmadd_ps(e, _mm256_set1_ps(0.693359375f), res);
}

__attribute__((target("avx2,fma"))) static void exp_avx2(float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[8] = {0};
        for (size_t j = i; j < n; j++) t[j - i] = x[j];
        _mm256_storeu_ps(t, exp8(_mm256_loadu_ps(t)));
        for (size_t j = i; j < n; j++) x[j] = t[j - i];
    }
}

__attribute__((target("avx512f,fma"))) static void exp_avx512(float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(x + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

__attribute__((target("avx2,fma"))) static void log_avx2(float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, log8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) x[i] = logf(x[i]);
}

__attribute__((target("avx2"))) static float max_avx2(const float *x, size_t n) {
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
    }
    m0 = _mm256_max_ps(m0, m1);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    float m = _mm_cvtss_f32(h);
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

__attribute__((target("avx2,fma"))) static double exp_sum_avx2(float *x, size_t n, float sub) {
    const __m256 vs = _mm256_set1_ps(sub);
    __m256 acc = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float t[8];
    _mm256_storeu_ps(t, acc);
    double s = 0.0;
    for (int j = 0; j < 8; j++) s += (double)t[j];
    if (i < n) {
        /* the tail through the same exp8 (padded with sub, whose lanes are dropped): an
         * element's value must not depend on where it sits in x (equal scores stay equal
         * masses wherever the pages are, e.g. on different context-parallel ranks) */
        const size_t nt = n - i;
        for (size_t j = 0; j < 8; j++) t[j] = j < nt ? x[i + j] : sub;
        _mm256_storeu_ps(t, exp8(_mm256_sub_ps(_mm256_loadu_ps(t), vs)));
        for (size_t j = 0; j < nt; j++) {
            x[i + j] = t[j];
            s += (double)t[j];
        }
    }
    return s;
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

int locks_all_finite(const float *x, size_t n) {
    float acc = 0.0f; /* x * 0 is NaN iff x is NaN or Inf; vectorises, no branch */
    for (size_t i = 0; i < n; i++) acc += x[i] * 0.0f;
    return acc == 0.0f;
}

size_t locks_first_past(const float *x, size_t n, float lim) {
    int ok = 1; /* a branch-free pass that vectorises; the index only on failure */
    for (size_t i = 0; i < n; i++) ok &= fabsf(x[i]) <= lim; /* false for NaN */
    if (ok) return n;
    size_t i = 0;
    while (i < n && fabsf(x[i]) <= lim) i++;
    return i;
}

void locks_f16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
#ifdef LOCKS_X86
    if (locks_have_avx2()) {
        f16_to_f32_avx2(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = locks_f16_to_f32(src[i]);
}

void locks_f32_to_f16_n(const float *src, uint16_t *dst, size_t n) {
#ifdef LOCKS_X86
    if (locks_have_avx2()) {
        f32_to_f16_avx2(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) dst[i] = locks_f32_to_f16(src[i]);
}

void locks_exp_n(float *x, size_t n) {
#ifdef LOCKS_X86
    if (locks_have_avx512()) {
        exp_avx512(x, n);
        return;
    }
    if (locks_have_avx2()) {
        exp_avx2(x, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) x[i] = expf(x[i]);
}

void locks_log_n(float *x, size_t n) {
#ifdef LOCKS_X86
    if (locks_have_avx2()) {
        log_avx2(x, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) x[i] = logf(x[i]);
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

float locks_max_n(const float *x, size_t n) {
#ifdef LOCKS_X86
    if (locks_have_avx2()) return max_avx2(x, n);
#endif
    float m = x[0];
    for (size_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

double locks_exp_sum_n(float *x, size_t n, float sub) {
#ifdef LOCKS_X86
    if (locks_have_avx2()) return exp_sum_avx2(x, n, sub);
#endif
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - sub);
        s += (double)x[i];
    }
    return s;
}

#ifdef LOCKS_X86
/* gelu_tanh(x) = 0.5 x (1 + tanh(y)) = x / (1 + exp(-2 y)), y = sqrt(2 / pi) (x + 0.044715
 * x^3), through exp8: exp(-2 y) past 88.3 saturates (x / 2e38, the limit 0 to float
 * precision), below -87.3 it is 0 (x). The tail goes through the same vector code, so an
 * element's value does not depend on where it sits. */
__attribute__((target("avx2,fma"))) static __m256 geglu8(__m256 x, __m256 u) {
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 y = _mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f),
                                   _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(y));
    return _mm256_mul_ps(_mm256_div_ps(x, den), u);
}

/* silu(x) u = x / (1 + exp(-x)) u through exp8 (exp(-x) saturates and vanishes as above). */
__attribute__((target("avx2,fma"))) static __m256 swiglu8(__m256 x, __m256 u) {
    const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), x)));
    return _mm256_mul_ps(_mm256_div_ps(x, den), u);
}

/* NAME(g, u, n): g[i] = F8(g[i], u[i]) for i < n, 8 at a time, the tail through F8 too. */
#define GATED_AVX2(NAME, F8)                                                                                     \
    __attribute__((target("avx2,fma"))) static void NAME(float *g, const float *u, size_t n) {                 \
        size_t i = 0;                                                                                            \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(g + i, F8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i))); \
        if (i < n) {                                                                                             \
            float a[8] = {0}, b[8] = {0};                                                                        \
            for (size_t j = i; j < n; j++) a[j - i] = g[j], b[j - i] = u[j];                                     \
            _mm256_storeu_ps(a, F8(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));                                     \
            for (size_t j = i; j < n; j++) g[j] = a[j - i];                                                      \
        }                                                                                                        \
    }
GATED_AVX2(geglu_avx2, geglu8)
GATED_AVX2(swiglu_avx2, swiglu8)
#endif

void locks_swiglu_n(float *g, const float *u, size_t n) {
#ifdef LOCKS_X86
    if (locks_have_avx2()) {
        swiglu_avx2(g, u, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void locks_geglu_n(float *g, const float *u, size_t n) {
#ifdef LOCKS_X86
    if (locks_have_avx2()) {
        geglu_avx2(g, u, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) {
        const float x = g[i];
        g[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * u[i];
    }
}

float locks_lse(const float *x, int32_t n) {
    float m = x[0];
    for (int32_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    float s = 0.0f;
    for (int32_t i = 0; i < n; i++) s += expf(x[i] - m);
    return m + logf(s);
}

void locks_page_mean(int32_t d, const float *k, float *mean) {
    for (int32_t c = 0; c < d; c++) {
        float acc = 0.0f;
        for (int32_t i = 0; i < LOCKS_PAGE; i++) acc += k[(size_t)i * (size_t)d + (size_t)c];
        mean[c] = acc * (1.0f / (float)LOCKS_PAGE);
    }
}
