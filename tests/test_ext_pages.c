/*
 * test_ext_pages.c — caller-owned KV pages on the CPU backend (fp16, HND and NHD):
 * the same selections and outputs as an owned cache holding the same values, float64
 * attention over the selected tokens, clear errors on misuse (ext_pages_common.h).
 */
#include "ext_pages_common.h"

int main(void) {
    tu_seed("test_ext_pages");
    for (int rep = 0; rep < 3; rep++) {
        ext_case hnd = {0, LOCKS_DTYPE_F16, LOCKS_LAYOUT_HND, rep == 2}, nhd = {0, LOCKS_DTYPE_F16, LOCKS_LAYOUT_NHD, rep == 1};
        run_ext_case(&hnd);
        run_ext_case(&nhd);
    }
    /* bf16 pages need the CUDA backend; an unknown layout or NULL pages are refused */
    uint16_t page[LOCKS_PAGE * 64];
    const void *ptrs[1] = {page};
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = 1;
    cp.n_kv_heads = 1;
    cp.head_dim = 64;
    cp.n_pages = 1;
    locks_status st;
    locks_ext_kv kv = {LOCKS_LAYOUT_NHD, LOCKS_DTYPE_BF16, ptrs, ptrs, 0};
    test_cond(!locks_cache_init_ext(cp, &kv, &st) && st == LOCKS_ERR_UNSUPPORTED, "bf16 on the CPU: %s",
              locks_status_str(st));
    kv.dtype = LOCKS_DTYPE_F16;
    kv.layout = (locks_kv_layout)7;
    test_cond(!locks_cache_init_ext(cp, &kv, &st) && st == LOCKS_ERR_INVALID_ARG, "layout 7 accepted");
    kv.layout = LOCKS_LAYOUT_HND;
    kv.page_stride = 100; /* < Hkv * 16 * d: pages would overlap */
    test_cond(!locks_cache_init_ext(cp, &kv, &st) && st == LOCKS_ERR_INVALID_ARG, "overlapping pages accepted");
    kv.page_stride = 0;
    const void *nulls[1] = {NULL};
    kv.v_pages = nulls;
    test_cond(!locks_cache_init_ext(cp, &kv, &st) && st == LOCKS_ERR_INVALID_ARG, "NULL V pages accepted");
    return test_report("test_ext_pages");
}
