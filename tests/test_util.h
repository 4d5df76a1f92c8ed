/* test_util.h — the tests' tiny helper: test_cond records a check (printing the message
 * when it fails), test_report prints the tally and returns the exit code, TEST_CHECK
 * aborts the test on a setup failure. */
#ifndef LOCKS_TEST_UTIL_H
#define LOCKS_TEST_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int test_n_run, test_n_failed;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void test_cond(int ok, const char *fmt, ...) {
    test_n_run++;
    if (ok) return;
    test_n_failed++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static int test_report(const char *name) {
    printf("%s: %d checks, %d failed\n", name, test_n_run, test_n_failed);
    return test_n_failed ? 1 : 0;
}

#define TEST_CHECK(x)                                                              \
    do {                                                                           \
        if (!(x)) {                                                                \
            fprintf(stderr, "%s:%d: setup check failed: %s\n", __FILE__, __LINE__, #x); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

#endif
