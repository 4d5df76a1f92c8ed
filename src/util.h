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

/* Sets this thread's last-error message (locks_last_error; printf format, no call
 * name: the public entry adds it) and returns st, so that an error return reads
 *     return locks_fail(LOCKS_ERR_INVALID_ARG, "head_dim %d is not a multiple of 8", d);
 * A public entry takes mark = locks_error_mark() first and returns through
 * locks_fail_call(st, "locks_x", mark): st unchanged; on an error, the message set since
 * the mark prefixed with the call's name, or the status' name when none was set (so an
 * older call's message never passes for this one's). Successful calls leave it alone:
 * a rollback after a failure does not erase the failure's reason. */
locks_status locks_fail(locks_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
uint32_t locks_error_mark(void);
locks_status locks_fail_call(locks_status st, const char *call, uint32_t mark);

/* IEEE binary16 / bfloat16 <-> float (round to nearest even). */
uint16_t locks_f32_to_f16(float f);
float locks_f16_to_f32(uint16_t h);
/* The index of the first NaN or Inf among n fp16 values (x may be unaligned: read
 * bytewise), n if there is none. */
size_t locks_f16_first_nonfinite(const void *x, size_t n);
uint16_t locks_f32_to_bf16(float f);
float locks_bf16_to_f32(uint16_t h);

/* Monotonic wall clock in milliseconds. */
double locks_now_ms(void);

/* Test-only fault injection. locks_fault_arm(n) makes the n-th fallible operation from
 * now on fail (n >= 1; n = 0 only counts; locks_fault_disarm() stops counting): every locks_alloc / locks_alloc_huge and every CUDA
 * runtime call of the backend (CU_TRY, cudaMalloc) counts one. The failed operation is
 * not performed: an allocation returns NULL, a CUDA call reports an error without
 * being made. locks_fault_hit() is what those operations call: it counts one and says
 * whether this one must fail. locks_fault_count() says how many were counted since the
 * last locks_fault_arm (so a test can find out how many a call makes, then fail each
 * one in turn). Off (one relaxed atomic load) unless a test arms it. */
void locks_fault_arm(int64_t n);
void locks_fault_disarm(void);
int locks_fault_hit(void);
int64_t locks_fault_count(void);

#endif
