/*
 * test_model_util.h — what the tests on the real model (label "model") share: finding
 * the model file and tokenizing a file of this repository. Header-only like test_util.h (one executable per tests/test_*.c).
 * popen() needs _POSIX_C_SOURCE before the first system header: include this after
 * test_util.h (which defines it), or define it first.
 */
#ifndef LOCKS_TEST_MODEL_UTIL_H
#define LOCKS_TEST_MODEL_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks_model.h"

/* The first max bytes of the file at path, NUL-terminated (malloc'd; NULL when it cannot
 * be read): a real text for a prompt. */
static inline char *tu_read_text(const char *path, size_t max) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max, f) : 0;
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

/* The index of x's largest value (the first of ties): greedy decoding. */
static inline int32_t tu_argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

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

/* The SmolLM2 model (tu_find_model; its path into path[cap]), loaded. Exits 1 with a line
 * naming `test` and the reason when there is no model or it does not load: every model
 * test needs it. */
static inline locks_model *tu_load_model(const char *test, char *path, size_t cap) {
    if (!tu_find_model(path, cap)) {
        fprintf(stderr, "%s: no model (set LOCKS_MODEL or run scripts/fetch-model.sh)\n", test);
        exit(1);
    }
    locks_status st;
    locks_model *m = locks_model_load(path, &st);
    if (!m) {
        fprintf(stderr, "%s: cannot load %s: %s (%s)\n", test, path, locks_status_str(st), locks_last_error());
        exit(1);
    }
    return m;
}

#ifdef LOCKS_TEST_UTIL_H /* SETUP and CHECK: the tests that include test_util.h first */
/* The first `want` token ids of the file at path (from the source root, as ctest runs),
 * special-token text not parsed; *n = want. SETUP fails when the file is missing or
 * shorter. */
static inline int32_t *tu_file_tokens(const locks_model *m, const char *path, int32_t want, int32_t *n) {
    FILE *f = fopen(path, "rb");
    SETUP(f);
    size_t cap = 1 << 20;
    char *text = malloc(cap);
    SETUP(text);
    size_t len = fread(text, 1, cap - 1, f);
    fclose(f);
    text[len] = '\0';
    int32_t *ids = malloc(sizeof(int32_t) * (len + 1));
    SETUP(ids);
    CHECK(locks_tokenizer_encode(locks_model_tokenizer(m), text, len, false, ids, (int32_t)len + 1, n));
    free(text);
    SETUP(*n >= want);
    *n = want;
    return ids;
}
#endif

#endif
