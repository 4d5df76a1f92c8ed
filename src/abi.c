/*
 * abi.c — the sizes and field offsets of the public structs, for bindings that mirror
 * them by hand (python/locks/_capi.py compares its ctypes structs with these at
 * import, so a field added in locks.h and not there stops the import instead of
 * passing garbage).
 */
#include <stddef.h>
#include <string.h>

#include "locks.h"

#define S(T) {#T, NULL, sizeof(T)}
#define F(T, f) {#T, #f, offsetof(T, f)}

static const struct {
    const char *type, *field;
    size_t value;
} abi_table[] = {
    S(locks_cache_params),
    F(locks_cache_params, n_layers),
    F(locks_cache_params, n_kv_heads),
    F(locks_cache_params, head_dim),
    F(locks_cache_params, n_pages),
    F(locks_cache_params, max_seqs),
    F(locks_cache_params, rank),
    F(locks_cache_params, summary_prec),
    F(locks_cache_params, kv_dtype),
    F(locks_cache_params, backend),
    F(locks_cache_params, n_threads),
    F(locks_cache_params, device),
    F(locks_cache_params, selectors),
    F(locks_cache_params, pool),
    S(locks_step_params),
    F(locks_step_params, selector),
    F(locks_step_params, budget),
    F(locks_step_params, n_sink),
    F(locks_step_params, n_recent),
    F(locks_step_params, scale),
    F(locks_step_params, mass),
    S(locks_selection),
    F(locks_selection, pages),
    F(locks_selection, n_pages),
    F(locks_selection, max_pages),
    S(locks_step_stats),
    F(locks_step_stats, bytes_meta),
    F(locks_step_stats, bytes_kv),
    F(locks_step_stats, bytes_dense),
    F(locks_step_stats, score_ms),
    F(locks_step_stats, select_ms),
    F(locks_step_stats, attend_ms),
    S(locks_ext_kv),
    F(locks_ext_kv, layout),
    F(locks_ext_kv, dtype),
    F(locks_ext_kv, k_pages),
    F(locks_ext_kv, v_pages),
    F(locks_ext_kv, page_stride),
};

size_t locks_abi_layout(const char *type, const char *field) {
    if (!type) return (size_t)-1;
    for (size_t i = 0; i < sizeof abi_table / sizeof abi_table[0]; i++) {
        if (strcmp(abi_table[i].type, type) != 0) continue;
        if (!field && !abi_table[i].field) return abi_table[i].value;
        if (field && abi_table[i].field && strcmp(abi_table[i].field, field) == 0) return abi_table[i].value;
    }
    return (size_t)-1;
}

size_t locks_abi_fields(const char *type) {
    size_t n = 0;
    for (size_t i = 0; type && i < sizeof abi_table / sizeof abi_table[0]; i++)
        if (abi_table[i].field && strcmp(abi_table[i].type, type) == 0) n++;
    return n;
}
