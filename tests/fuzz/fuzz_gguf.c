/*
 * fuzz_gguf.c — libFuzzer harness for the GGUF reader (src/model/gguf.c) and the
 * tokenizer built from a GGUF vocabulary. Any input must either be refused with a
 * status or give an index whose every accessor stays inside the buffer (libFuzzer hands
 * us an exact-size heap copy, so ASan sees any read past it). Build and run with
 * scripts/fuzz-gguf.sh; seeds and regressions live in tests/fuzz/corpus/.
 */
#include <stddef.h>
#include <stdint.h>

#include "gguf_walk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    locks_status st;
    gguf *g = gguf_open_buffer(data, size, &st);
    if (!g) return 0;
    static volatile uint64_t sink;
    sink += gguf_walk(g, NULL);
    gguf_close(g);
    return 0;
}
