/*
 * test_model_util.h — what the tests on the real model (label "model") share: finding
 * the model file. Header-only like test_util.h (one executable per tests/test_*.c).
 * popen() needs _POSIX_C_SOURCE before the first system header: include this after
 * test_util.h (which defines it), or define it first.
 */
#ifndef LOCKS_TEST_MODEL_UTIL_H
#define LOCKS_TEST_MODEL_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model's path into path[cap]: $LOCKS_MODEL, else the path scripts/fetch-model.sh
 * prints (it fetches on first use; run from the source root, as ctest does). Returns 0
 * if there is none (the fetch failed or printed nothing). */
static inline int tu_find_model(char *path, size_t cap) {
    const char *env = getenv("LOCKS_MODEL");
    if (env && *env) {
        snprintf(path, cap, "%s", env);
        return 1;
    }
    FILE *p = popen("scripts/fetch-model.sh", "r");
    if (!p) return 0;
    int ok = fgets(path, (int)cap, p) != NULL;
    if (pclose(p) != 0) ok = 0;
    if (ok) path[strcspn(path, "\r\n")] = '\0';
    return ok && path[0];
}

/* Gemma 3 270M's path: $LOCKS_GEMMA3_MODEL, else what `scripts/fetch-model.sh
 * gemma3-270m` prints (fetched on first use). Returns 0 if there is none. */
static inline int tu_find_gemma3(char *path, size_t cap) {
    const char *env = getenv("LOCKS_GEMMA3_MODEL");
    if (env && *env) {
        snprintf(path, cap, "%s", env);
        return 1;
    }
    FILE *p = popen("scripts/fetch-model.sh gemma3-270m", "r");
    if (!p) return 0;
    int ok = fgets(path, (int)cap, p) != NULL;
    if (pclose(p) != 0) ok = 0;
    if (ok) path[strcspn(path, "\r\n")] = '\0';
    return ok && path[0];
}

#endif
