/*
 * gguf_walk.h — reads everything an open GGUF offers through the reader's accessors:
 * every key with every typed getter, every array element, every string array copied
 * out, the first and last byte of every tensor, and the tokenizer built from it.
 * Shared by the libFuzzer harness (fuzz_gguf.c) and the corpus test
 * (test_gguf_corpus.c); header-only because each is a single-file program.
 * Returns a checksum so that the reads cannot be optimised away, and the tokenizer's
 * status through *tok_st (LOCKS_ERR_INVALID_ARG when the file has no tokenizer keys).
 */
#ifndef LOCKS_GGUF_WALK_H
#define LOCKS_GGUF_WALK_H

#include <string.h>

#include "locks_model.h"
#include "model/gguf.h"
#include "model/tokenizer_gguf.h"

static uint64_t gguf_walk_bytes(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = (const uint8_t *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t gguf_walk(const gguf *g, locks_status *tok_st) {
    uint64_t h = gguf_version(g) + gguf_file_size(g);
    char key[256];
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        size_t len = 0;
        const char *k = gguf_key(g, i, &len);
        h = gguf_walk_bytes(h, k, len);
        h += (uint64_t)gguf_kv_type(g, i);
        if (len >= sizeof key || memchr(k, 0, len)) continue; /* not addressable by name */
        memcpy(key, k, len);
        key[len] = '\0';
        uint32_t u;
        int32_t s32;
        float f;
        int b;
        const char *str;
        size_t sl;
        if (gguf_get_u32(g, key, &u) == LOCKS_OK) h += u;
        if (gguf_get_i32(g, key, &s32) == LOCKS_OK) h += (uint64_t)s32;
        if (gguf_get_f32(g, key, &f) == LOCKS_OK) h += (uint64_t)(f == f);
        if (gguf_get_bool(g, key, &b) == LOCKS_OK) h += (uint64_t)b;
        if (gguf_get_str(g, key, &str, &sl) == LOCKS_OK) h = gguf_walk_bytes(h, str, sl);
        gguf_val_type et;
        uint64_t n;
        const void *data;
        if (gguf_get_arr(g, key, &et, &n, &data) == LOCKS_OK) {
            if (et != GGUF_VAL_STRING && et != GGUF_VAL_ARRAY) {
                for (uint64_t j = 0; j < n && j < (1u << 16); j++)
                    h += (uint64_t)gguf_arr_i32(et, data, j) + (uint64_t)(gguf_arr_f32(et, data, j) > 0.0f);
            }
            char **strs;
            uint32_t *lens;
            uint64_t ns;
            if (gguf_get_arr_strs(g, key, &strs, &lens, &ns) == LOCKS_OK) {
                for (uint64_t j = 0; j < ns; j++) h = gguf_walk_bytes(h, strs[j], lens[j] + 1u);
                gguf_strs_free(strs, lens);
            }
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        h = gguf_walk_bytes(h, t->name, t->name_len);
        h += (uint64_t)t->ne[0] + (uint64_t)t->ne[3] + (uint64_t)t->type + ggml_row_bytes(t->type, t->ne[0]);
        if (t->nbytes > 0) {
            h += ((const uint8_t *)t->data)[0];
            h += ((const uint8_t *)t->data)[t->nbytes - 1];
        }
        if (t->name_len < sizeof key && !memchr(t->name, 0, t->name_len)) {
            memcpy(key, t->name, t->name_len);
            key[t->name_len] = '\0';
            h += gguf_find_tensor(g, key) != NULL;
        }
    }
    locks_status st = LOCKS_ERR_INVALID_ARG;
    if (gguf_find_key(g, "tokenizer.ggml.model") >= 0 || gguf_find_key(g, "tokenizer.ggml.tokens") >= 0) {
        locks_tokenizer *tok = locks_tokenizer_from_gguf(g, &st);
        if (tok) {
            static const char text[] = "<|im_start|>user\nab abc 12!\xff\xc3<|im_end|>";
            int32_t ids[64], n_ids = 0;
            char out[256];
            size_t n_out = 0;
            if (locks_tokenizer_encode(tok, text, sizeof text - 1, true, ids, 64, &n_ids) == LOCKS_OK &&
                locks_tokenizer_decode(tok, ids, n_ids, true, out, sizeof out, &n_out) == LOCKS_OK)
                h = gguf_walk_bytes(h, out, n_out);
            locks_tokenizer_free(tok);
        }
    }
    if (tok_st) *tok_st = st;
    return h;
}

#endif
