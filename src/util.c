/*
 * util.c — allocation, logging, half-precision conversion, clock.
 */
#define _DEFAULT_SOURCE /* madvise */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <time.h>

/* ---- test-only fault injection (util.h) ---- */
static atomic_llong fault_at;    /* the counted operation that fails; 0: off */
static atomic_llong fault_count; /* operations counted since the last arm */
static atomic_int fault_armed;   /* 1 while counting */

void locks_fault_arm(int64_t n) {
    atomic_store(&fault_count, 0);
    atomic_store(&fault_at, n > 0 ? (long long)n : 0);
    atomic_store(&fault_armed, 1);
}

void locks_fault_disarm(void) { atomic_store(&fault_armed, 0); }

int locks_fault_hit(void) {
    if (!atomic_load_explicit(&fault_armed, memory_order_relaxed)) return 0;
    long long k = atomic_fetch_add(&fault_count, 1) + 1;
    return k == atomic_load(&fault_at);
}

int64_t locks_fault_count(void) { return (int64_t)atomic_load(&fault_count); }

void *locks_alloc(size_t n, size_t size) {
    if (locks_fault_hit()) return NULL;
    if (size != 0 && n > SIZE_MAX / size) return NULL;
    size_t bytes = n * size;
    if (bytes == 0) bytes = 1;
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes) return NULL;
    void *p = aligned_alloc(64, rounded);
    if (p) memset(p, 0, rounded);
    return p;
}

void locks_free(void *p) { free(p); }

void *locks_alloc_huge(size_t n, size_t size) {
    const size_t huge = (size_t)2 << 20;
    if (size != 0 && n > SIZE_MAX / size) return NULL;
    size_t bytes = n * size;
    if (bytes < huge) return locks_alloc(n, size);
    if (locks_fault_hit()) return NULL;
    size_t rounded = (bytes + huge - 1) & ~(huge - 1);
    if (rounded < bytes) return NULL;
    void *p = aligned_alloc(huge, rounded);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint: fine if it fails */
#endif
    memset(p, 0, rounded);
    return p;
}

/* The callback lives in status.c; it exposes it through this accessor. */
void locks_log_get(locks_log_fn *fn, void **user);

void locks_log(locks_log_level level, const char *fmt, ...) {
    locks_log_fn fn;
    void *user;
    locks_log_get(&fn, &user);
    if (!fn) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fn(level, buf, user);
}

uint16_t locks_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xffu) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0u));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow -> Inf */
    if (e <= 0) {                                   /* subnormal or zero */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++; /* may carry into exp: fine */
    return (uint16_t)half;
}

size_t locks_f16_first_nonfinite(const void *x, size_t n) {
    /* blocks of 64 values OR-reduced (vectorised) before the exact scan of a bad block */
    const unsigned char *b = x;
    for (size_t i0 = 0; i0 < n; i0 += 64) {
        const size_t m = n - i0 < 64 ? n - i0 : 64;
        uint16_t h[64];
        memcpy(h, b + 2 * i0, 2 * m);
        unsigned bad = 0;
        for (size_t i = 0; i < m; i++) bad |= (h[i] & 0x7c00u) == 0x7c00u;
        if (!bad) continue;
        for (size_t i = 0; i < m; i++)
            if ((h[i] & 0x7c00u) == 0x7c00u) return i0 + i;
    }
    return n;
}

float locks_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else { /* subnormal: normalise */
            int32_t e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 0x1fu) {
        x = sign | 0x7f800000u | (man << 13);
    } else {
        x = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t locks_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float locks_bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

double locks_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
