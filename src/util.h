/*
 * util.h — the few helpers every module shares: the one allocation wrapper, logging
 * through the caller's callback, fp16/bf16 conversion, a monotonic clock.
 * Internal to the library and its tools/tests; not installed.
 */
#ifndef LOCKS_UTIL_H
#define LOCKS_UTIL_H

#include "locks.h"

#include <stddef.h>
#include <stdint.h>

/* The one allocation wrapper: 64-byte aligned, zero-filled, NULL on failure or on an
 * overflowing n * size. Free with locks_free (NULL is fine). */
void *locks_alloc(size_t n, size_t size);
void locks_free(void *p);
/* Same for big arrays (the KV pool, summaries): 2 MiB aligned and marked for
 * transparent huge pages before the zero-fill, so scans over them do not miss the TLB
 * on every 4 KiB page. Free with locks_free. */
void *locks_alloc_huge(size_t n, size_t size);

/* printf-style message to the caller's log callback (nothing if none is set). */
void locks_log(locks_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* IEEE binary16 / bfloat16 <-> float (round to nearest even). */
uint16_t locks_f32_to_f16(float f);
float locks_f16_to_f32(uint16_t h);
uint16_t locks_f32_to_bf16(float f);
float locks_bf16_to_f32(uint16_t h);

/* Monotonic wall clock in milliseconds. */
double locks_now_ms(void);

#endif
