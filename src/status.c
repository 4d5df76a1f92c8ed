/*
 * status.c — status names, the log callback, selector names, the last-error message.
 *
 * The library never prints: every message goes through the callback the caller set
 * with locks_set_log (silent by default). Why a call failed is kept per thread
 * (locks_last_error): a status says what kind of failure, the message says which
 * argument and which value.
 */
#include "util.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const char *const status_names[LOCKS_STATUS_COUNT] = {
    [LOCKS_OK] = "ok",
    [LOCKS_ERR_INVALID_ARG] = "invalid argument",
    [LOCKS_ERR_OOM] = "out of memory",
    [LOCKS_ERR_POOL_FULL] = "page pool exhausted",
    [LOCKS_ERR_NONFINITE] = "NaN or Inf in input",
    [LOCKS_ERR_BUDGET] = "token budget too small (<= 0 or below the forced pages)",
    [LOCKS_ERR_NO_SEQ] = "unknown sequence",
    [LOCKS_ERR_UNSUPPORTED] = "unsupported by this build or backend",
    [LOCKS_ERR_IO] = "I/O error",
    [LOCKS_ERR_FORMAT] = "malformed file",
    [LOCKS_ERR_BACKEND] = "CUDA runtime error",
    [LOCKS_ERR_NO_META] = "the cache keeps no metadata for this selector (locks_cache_params.selectors)",
};

const char *locks_status_str(locks_status s) {
    if ((int)s < 0 || s >= LOCKS_STATUS_COUNT) return "unknown status";
    return status_names[s];
}

static const char *const selector_names[LOCKS_SEL_COUNT] = {
    [LOCKS_SEL_FULL] = "full",   [LOCKS_SEL_ORACLE] = "oracle", [LOCKS_SEL_LOCKS] = "locks",
    [LOCKS_SEL_QUEST] = "quest", [LOCKS_SEL_SHADOW] = "shadow", [LOCKS_SEL_ROCKET] = "rocket",
    [LOCKS_SEL_SHADOW_LM] = "shadow-lm",
};

const char *locks_selector_name(locks_selector s) {
    if ((int)s < 0 || s >= LOCKS_SEL_COUNT) return NULL;
    return selector_names[s];
}

locks_status locks_selector_parse(const char *name, locks_selector *out) {
    if (!name || !out) return LOCKS_ERR_INVALID_ARG;
    for (int i = 0; i < LOCKS_SEL_COUNT; i++) {
        if (strcmp(name, selector_names[i]) == 0) {
            *out = (locks_selector)i;
            return LOCKS_OK;
        }
    }
    return LOCKS_ERR_INVALID_ARG;
}

static locks_log_fn log_fn;
static void *log_user;

void locks_set_log(locks_log_fn fn, void *user) {
    log_fn = fn;
    log_user = user;
}

void locks_log_get(locks_log_fn *fn, void **user);
void locks_log_get(locks_log_fn *fn, void **user) {
    *fn = log_fn;
    *user = log_user;
}

/* ---- last error (locks.h "Status, logging") ---- */

static _Thread_local char last_error[512];
static _Thread_local uint32_t error_gen; /* messages set on this thread so far */

const char *locks_last_error(void) { return last_error; }

void locks_clear_error(void) { last_error[0] = '\0'; }

uint32_t locks_error_mark(void) { return error_gen; }

locks_status locks_fail(locks_status st, const char *fmt, ...) {
    error_gen++;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

locks_status locks_fail_call(locks_status st, const char *call, uint32_t mark) {
    if (st == LOCKS_OK) return st;
    char msg[sizeof last_error + 128];
    error_gen++;
    if (error_gen - 1 == mark) /* the failing path said nothing: the status is the message */
        snprintf(msg, sizeof msg, "%s: %s", call, locks_status_str(st));
    else if (strncmp(last_error, call, strlen(call)) != 0)
        snprintf(msg, sizeof msg, "%s: %s", call, last_error);
    else
        return st; /* already names this call (a nested call of the same name) */
    size_t n = strlen(msg);
    if (n >= sizeof last_error) n = sizeof last_error - 1;
    memcpy(last_error, msg, n);
    last_error[n] = '\0';
    return st;
}
