/*
 * backend_cpu.c — the CPU backend's table of operations (backend.h): the reference,
 * built everywhere.
 *
 * The pages, summaries and selector metadata are host memory (cache.c); the operations
 * are the CPU functions of the step's phase files (step.c, score.c, select.c, attend.c),
 * named here. Only what has no better home is defined here: the two halves of a
 * caller-owned page report (keys finite, then the page's summaries built).
 */
#include "backend.h"
#include "decode.h"
#include "selector.h"
#include "util.h"

enum { P = LOCKS_PAGE };

static locks_status cpu_init(locks_cache *c) {
    locks_status st = locks_cache_init_cpu(c);
    if (st == LOCKS_OK) st = locks_selector_cache_attach(c, c->p.selectors);
    if (st == LOCKS_OK) c->host_pages = 1;
    return st;
}

/* fp16 bits: exponent all ones is Inf or NaN */
static int f16_block_finite(const uint16_t *b, size_t ld, size_t d) {
    for (size_t t = 0; t < P; t++)
        for (size_t i = 0; i < d; i++)
            if ((b[t * ld + i] & 0x7c00u) == 0x7c00u) return 0;
    return 1;
}

/* The caller's keys and values of the reported pages must be finite. */
static locks_status cpu_pages_filled_stage(locks_cache *c, int32_t layer, const int32_t *pages, int32_t n) {
    const size_t ld = locks_cache_kv_ld(c), d = (size_t)c->d;
    for (int32_t j = 0; j < n; j++)
        for (int32_t h = 0; h < c->hkv; h++)
            if (!f16_block_finite(locks_cache_kblock(c, layer, pages[j], h), ld, d) ||
                !f16_block_finite(locks_cache_vblock(c, layer, pages[j], h), ld, d))
                return locks_fail(LOCKS_ERR_NONFINITE, "page %d, KV head %d holds NaN or Inf", pages[j], h);
    return LOCKS_OK;
}

/* locks_attend's page lists are host arrays already. */
static locks_status cpu_attend_lists(locks_cache *c, const int32_t *pages, const int32_t *n_pages, int32_t max_pages,
                                     const int32_t **host_pages, const int32_t **host_n_pages) {
    (void)c, (void)max_pages;
    *host_pages = pages;
    *host_n_pages = n_pages;
    return LOCKS_OK;
}

const locks_backend_i locks_backend_cpu = {
    .name = "CPU",
    .init = cpu_init,
    .free = NULL,     /* cache.c frees the host storage */
    .seq_sync = NULL, /* the host's block tables are the backend's */
    .write = locks_cache_write_cpu,
    .summary_get = locks_cache_summary_get_cpu,
    .pages_filled_stage = cpu_pages_filled_stage,
    .pages_filled_commit = locks_cache_build_pages,
    .set_stream = NULL,
    .decode_step = locks_cpu_decode_step,
    .score = locks_cpu_score,
    .select = locks_cpu_select,
    .attend_lists = cpu_attend_lists,
    .attend = locks_cpu_attend,
};
