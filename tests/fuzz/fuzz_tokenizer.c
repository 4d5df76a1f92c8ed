/*
 * fuzz_tokenizer.c — libFuzzer harness for encode/decode on the real SmolLM2 vocabulary
 * ($LOCKS_MODEL, else ~/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf as
 * scripts/fetch-model.sh leaves it). Each input is encoded with and without special-token
 * parsing; the harness aborts (a finding) if an id is out of range, the count exceeds the
 * bytes, or — when every byte of the input has a token — decode(encode(x)) != x, whole
 * or streamed. Run: scripts/fuzz-gguf.sh SECONDS tokenizer
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks_model.h"
#include "model/gguf.h"
#include "model/tokenizer_gguf.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static locks_tokenizer *tok;
static int has_token[256];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char path[4096];
    const char *env = getenv("LOCKS_MODEL");
    if (env) snprintf(path, sizeof path, "%s", env);
    else snprintf(path, sizeof path, "%s/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf", getenv("HOME"));
    locks_status st;
    gguf *g = gguf_open(path, &st);
    if (g) tok = locks_tokenizer_from_gguf(g, &st);
    gguf_close(g);
    if (!tok) {
        fprintf(stderr, "fuzz_tokenizer: cannot load a tokenizer from %s (%s)\n", path, locks_status_str(st));
        exit(1);
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        has_token[b] = locks_tokenizer_find(tok, &c, 1) >= 0;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size + 1));
    char *out = malloc(size + 1), *stream = malloc(size + 4);
    int lossless = 1;
    for (size_t i = 0; i < size; i++) lossless &= has_token[data[i]];
    for (int special = 0; special < 2; special++) {
        int32_t n = -1;
        if (locks_tokenizer_encode(tok, (const char *)data, size, special, ids, (int32_t)size, &n) != LOCKS_OK) abort();
        if (n < 0 || (size_t)n > size) abort();
        for (int32_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= locks_tokenizer_n_vocab(tok)) abort();
        size_t n_out = 0;
        if (locks_tokenizer_decode(tok, ids, n, true, out, size + 1, &n_out) != LOCKS_OK) abort();
        if (lossless && (n_out != size || memcmp(out, data, size) != 0)) abort();
        locks_detok_state ds = {{0}, 0};
        size_t n_stream = 0;
        char piece[512];
        for (int32_t i = 0; i < n; i++) {
            size_t w = 0;
            if (locks_tokenizer_decode_stream(tok, &ds, ids[i], true, piece, sizeof piece, &w) != LOCKS_OK) abort();
            if (n_stream + w > n_out || memcmp(out + n_stream, piece, w) != 0) abort();
            n_stream += w;
        }
        n_stream += locks_detok_flush(&ds, stream);
        if (n_stream != n_out) abort();
    }
    free(ids);
    free(out);
    free(stream);
    return 0;
}
