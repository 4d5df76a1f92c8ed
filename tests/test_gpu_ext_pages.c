/*
 * test_gpu_ext_pages.c — caller-owned KV pages on the CUDA backend (fp16 and bf16, HND
 * and NHD, device page memory): the same selections and outputs as an owned CUDA
 * cache holding the same values, float64 attention over the selected tokens, clear
 * errors on misuse (ext_pages_common.h).
 */
#include "ext_pages_common.h"

int main(void) {
    tu_seed("test_gpu_ext_pages");
    const locks_dtype dts[2] = {LOCKS_DTYPE_F16, LOCKS_DTYPE_BF16};
    const locks_kv_layout los[2] = {LOCKS_LAYOUT_HND, LOCKS_LAYOUT_NHD};
    for (int rep = 0; rep < 2; rep++)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                ext_case x = {1, dts[a], los[b], rep};
                run_ext_case(&x);
            }
    return test_report("test_gpu_ext_pages");
}
