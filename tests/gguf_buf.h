/*
 * gguf_buf.h — the little-endian GGUF writer the tests share (test_gguf, test_arch and
 * tiny_llama.h): a growing byte buffer, its scalar and string puts, and the key/value
 * records of the types the tests write (u32, f32, string).
 */
#ifndef LOCKS_GGUF_BUF_H
#define LOCKS_GGUF_BUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static inline void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 4096;
        b->p = realloc(b->p, b->cap);
        SETUP(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static inline void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static inline void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static inline void put_str(buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static inline void kv_u32(buf *b, const char *k, uint32_t v) {
    put_str(b, k);
    put_u32(b, 4);
    put_u32(b, v);
}
static inline void kv_f32(buf *b, const char *k, float v) {
    put_str(b, k);
    put_u32(b, 6);
    put(b, &v, 4);
}
static inline void kv_str(buf *b, const char *k, const char *v) {
    put_str(b, k);
    put_u32(b, 8);
    put_str(b, v);
}

#endif
