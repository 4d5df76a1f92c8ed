/*
 * gguf.c — GGUF reader: map the file, walk the header with a bounds-checked cursor,
 * index the metadata and the tensors. See gguf.h for the format.
 *
 * Every read goes through the cursor (cur_*), which checks the bytes remaining before
 * touching them; counts read from the file are checked against the bytes left before
 * anything is allocated for them, so a lying header cannot make us allocate more than
 * the file could describe. Once open succeeds, the index holds only ranges inside the
 * mapping and the accessors trust it.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" */
#define GGUF_DEFAULT_ALIGN 32u
#define GGUF_MAX_ARRAY_DEPTH 4

/* One metadata pair: the key and where its value starts, all inside the mapping. */
typedef struct {
    const char *key;
    size_t key_len;
    gguf_val_type type;
    const uint8_t *val; /* scalar bytes, string (u64 len + bytes) or array header */
    /* arrays only */
    gguf_val_type elem_type;
    uint64_t n;
    const uint8_t *elems;
} gguf_kv;

struct gguf {
    const uint8_t *base;
    size_t size;
    int mapped; /* 1: base came from mmap and is ours to unmap */
    uint32_t version;
    int64_t n_kv;
    gguf_kv *kv;
    int64_t n_tensors;
    gguf_tensor *tensors;
    size_t data_offset;
};

/* ================================================================================ */
/* Bounds-checked cursor                                                            */
/* ================================================================================ */

typedef struct {
    const uint8_t *p;
    size_t left;
    int bad; /* set on the first read past the end; later reads return zeros */
} cursor;

static const uint8_t *cur_take(cursor *c, size_t n) {
    if (c->bad || n > c->left) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *p = c->p;
    c->p += n;
    c->left -= n;
    return p;
}

static uint32_t cur_u32(cursor *c) {
    const uint8_t *p = cur_take(c, 4);
    uint32_t v = 0;
    if (p) memcpy(&v, p, 4);
    return v;
}

static uint64_t cur_u64(cursor *c) {
    const uint8_t *p = cur_take(c, 8);
    uint64_t v = 0;
    if (p) memcpy(&v, p, 8);
    return v;
}

/* A string: u64 length then bytes, the length checked against what is left. */
static const char *cur_str(cursor *c, size_t *len) {
    uint64_t n = cur_u64(c);
    if (c->bad || n > c->left) {
        c->bad = 1;
        *len = 0;
        return NULL;
    }
    *len = (size_t)n;
    return (const char *)cur_take(c, (size_t)n);
}

static size_t val_size(gguf_val_type t) {
    switch (t) {
    case GGUF_VAL_U8: case GGUF_VAL_I8: case GGUF_VAL_BOOL: return 1;
    case GGUF_VAL_U16: case GGUF_VAL_I16: return 2;
    case GGUF_VAL_U32: case GGUF_VAL_I32: case GGUF_VAL_F32: return 4;
    case GGUF_VAL_U64: case GGUF_VAL_I64: case GGUF_VAL_F64: return 8;
    default: return 0; /* string, array: variable */
    }
}

/* Skips one value of type t (arrays recursively, at most GGUF_MAX_ARRAY_DEPTH deep). */
static int cur_skip_value(cursor *c, uint32_t t, int depth) {
    if (t >= GGUF_VAL_COUNT) return 0;
    if (t == GGUF_VAL_STRING) {
        size_t len;
        cur_str(c, &len);
        return !c->bad;
    }
    if (t != GGUF_VAL_ARRAY) return cur_take(c, val_size((gguf_val_type)t)) != NULL;
    if (depth >= GGUF_MAX_ARRAY_DEPTH) return 0;
    uint32_t et = cur_u32(c);
    uint64_t n = cur_u64(c);
    if (c->bad || et >= GGUF_VAL_COUNT) return 0;
    size_t es = val_size((gguf_val_type)et);
    if (es) {
        if (n > c->left / es) return 0;
        return cur_take(c, (size_t)n * es) != NULL;
    }
    /* strings take >= 8 bytes each, arrays >= 12: a count beyond left / 8 is a lie */
    if (n > c->left / 8) return 0;
    for (uint64_t i = 0; i < n; i++)
        if (!cur_skip_value(c, et, depth + 1)) return 0;
    return 1;
}

/* ================================================================================ */
/* ggml types                                                                       */
/* ================================================================================ */

const char *ggml_type_name(uint32_t type) {
    static const char *const names[] = {
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS",
        "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64",
        "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0",
    };
    if (type < sizeof names / sizeof names[0]) return names[type];
    return "unknown";
}

static int type_supported(uint32_t t) {
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 ||
           t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 ||
           t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q4_K ||
           t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K;
}

/* Bytes per block and elements per block of a supported type. */
static void type_block(ggml_type t, size_t *bytes, int64_t *elems) {
    switch (t) {
    case GGML_TYPE_F32: *bytes = 4; *elems = 1; return;
    case GGML_TYPE_F16: case GGML_TYPE_BF16: *bytes = 2; *elems = 1; return;
    case GGML_TYPE_Q8_0: *bytes = 34; *elems = GGML_QBLOCK; return;
    case GGML_TYPE_Q4_0: *bytes = 18; *elems = GGML_QBLOCK; return;
    case GGML_TYPE_Q4_1: *bytes = 20; *elems = GGML_QBLOCK; return;
    case GGML_TYPE_Q5_0: *bytes = 22; *elems = GGML_QBLOCK; return;
    case GGML_TYPE_Q5_1: *bytes = 24; *elems = GGML_QBLOCK; return;
    case GGML_TYPE_Q4_K: *bytes = 144; *elems = GGML_QK_K; return;
    case GGML_TYPE_Q5_K: *bytes = 176; *elems = GGML_QK_K; return;
    case GGML_TYPE_Q6_K: *bytes = 210; *elems = GGML_QK_K; return;
    }
    *bytes = 0;
    *elems = 1;
}

size_t ggml_row_bytes(ggml_type type, int64_t ne0) {
    size_t bb;
    int64_t be;
    type_block(type, &bb, &be);
    return (size_t)(ne0 / be) * bb;
}

/* ================================================================================ */
/* Parse                                                                            */
/* ================================================================================ */

static int key_eq(const gguf_kv *kv, const char *key) {
    size_t n = strlen(key);
    return kv->key_len == n && memcmp(kv->key, key, n) == 0;
}

/* Names from the file go into log lines through "%.*s" with this precision: a length
 * above INT_MAX cast to int would turn negative, which printf reads as "no precision"
 * and would run on past the mapping looking for a NUL. */
#define LOG_LEN(n) ((int)((n) < 200 ? (n) : 200))

#define FAIL(code, ...)                                 \
    do {                                                \
        locks_log(LOCKS_LOG_ERROR, "gguf: " __VA_ARGS__); \
        st = locks_fail((code), __VA_ARGS__);           \
        goto fail;                                      \
    } while (0)

static locks_status parse(gguf *g) {
    locks_status st = LOCKS_OK;
    cursor c = {g->base, g->size, 0};

    uint32_t magic = cur_u32(&c);
    g->version = cur_u32(&c);
    uint64_t n_tensors = cur_u64(&c);
    uint64_t n_kv = cur_u64(&c);
    if (c.bad) FAIL(LOCKS_ERR_FORMAT, "file too short for a header (%zu bytes)", g->size);
    if (magic != GGUF_MAGIC) FAIL(LOCKS_ERR_FORMAT, "bad magic 0x%08x (not a GGUF file)", magic);
    if (g->version != 2 && g->version != 3)
        FAIL(LOCKS_ERR_FORMAT, "unsupported GGUF version %u (2 or 3 expected)", g->version);
    /* a kv pair takes >= 8 + 4 + 1 bytes, a tensor info >= 8 + 4 + 8 + 4 + 8 */
    if (n_kv > c.left / 13) FAIL(LOCKS_ERR_FORMAT, "n_kv = %llu exceeds the file", (unsigned long long)n_kv);
    if (n_tensors > c.left / 32)
        FAIL(LOCKS_ERR_FORMAT, "n_tensors = %llu exceeds the file", (unsigned long long)n_tensors);

    g->n_kv = (int64_t)n_kv;
    g->kv = locks_alloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    if (!g->kv) FAIL(LOCKS_ERR_OOM, "out of memory for %llu keys", (unsigned long long)n_kv);
    uint32_t align = GGUF_DEFAULT_ALIGN;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        kv->key = cur_str(&c, &kv->key_len);
        uint32_t t = cur_u32(&c);
        if (c.bad) FAIL(LOCKS_ERR_FORMAT, "truncated in metadata key %llu", (unsigned long long)i);
        if (t >= GGUF_VAL_COUNT)
            FAIL(LOCKS_ERR_FORMAT, "key '%.*s': bad value type %u", LOG_LEN(kv->key_len), kv->key, t);
        kv->type = (gguf_val_type)t;
        kv->val = c.p;
        if (t == GGUF_VAL_ARRAY) {
            cursor a = c;
            uint32_t et = cur_u32(&a);
            kv->n = cur_u64(&a);
            kv->elems = a.p;
            if (a.bad || et >= GGUF_VAL_COUNT)
                FAIL(LOCKS_ERR_FORMAT, "key '%.*s': bad array header", LOG_LEN(kv->key_len), kv->key);
            kv->elem_type = (gguf_val_type)et;
        }
        if (!cur_skip_value(&c, t, 0))
            FAIL(LOCKS_ERR_FORMAT, "key '%.*s': value runs past the end of the file or is malformed",
                 LOG_LEN(kv->key_len), kv->key);
        if (key_eq(kv, "general.alignment")) {
            if (t != GGUF_VAL_U32) FAIL(LOCKS_ERR_FORMAT, "general.alignment is not a u32");
            memcpy(&align, kv->val, 4);
            if (align == 0 || (align & (align - 1)) != 0 || align > (1u << 20))
                FAIL(LOCKS_ERR_FORMAT, "general.alignment = %u is not a power of two <= 1 MiB", align);
        }
    }

    g->n_tensors = (int64_t)n_tensors;
    g->tensors = locks_alloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    uint64_t *offs = locks_alloc(n_tensors ? (size_t)n_tensors : 1, sizeof *offs);
    if (!g->tensors || !offs) {
        locks_free(offs);
        FAIL(LOCKS_ERR_OOM, "out of memory for %llu tensors", (unsigned long long)n_tensors);
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        t->name = cur_str(&c, &t->name_len);
        uint32_t nd = cur_u32(&c);
        if (c.bad || nd < 1 || nd > 4) {
            locks_free(offs);
            FAIL(LOCKS_ERR_FORMAT, "tensor %llu: truncated or n_dims = %u not in 1..4",
                 (unsigned long long)i, nd);
        }
        t->n_dims = (int32_t)nd;
        uint64_t nel = 1;
        int overflow = 0;
        for (int d = 0; d < 4; d++) {
            uint64_t ne = d < (int)nd ? cur_u64(&c) : 1;
            if (ne == 0 || ne > (UINT64_C(1) << 40) || nel > (UINT64_C(1) << 62) / ne) overflow = 1;
            else nel *= ne;
            t->ne[d] = (int64_t)ne;
        }
        uint32_t type = cur_u32(&c);
        offs[i] = cur_u64(&c);
        if (c.bad) {
            locks_free(offs);
            FAIL(LOCKS_ERR_FORMAT, "tensor %llu: truncated info", (unsigned long long)i);
        }
        if (overflow) {
            locks_free(offs);
            FAIL(LOCKS_ERR_FORMAT, "tensor '%.*s': zero or absurd dimensions", LOG_LEN(t->name_len), t->name);
        }
        if (!type_supported(type)) {
            locks_free(offs);
            FAIL(LOCKS_ERR_UNSUPPORTED,
                 "tensor '%.*s' has type %s (%u): this reader supports F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K",
                 LOG_LEN(t->name_len), t->name, ggml_type_name(type), type);
        }
        t->type = (ggml_type)type;
        size_t bb;
        int64_t be;
        type_block(t->type, &bb, &be);
        if (t->ne[0] % be != 0) {
            locks_free(offs);
            FAIL(LOCKS_ERR_FORMAT, "tensor '%.*s': ne[0] = %lld is not a multiple of the %s block (%lld)",
                 LOG_LEN(t->name_len), t->name, (long long)t->ne[0], ggml_type_name(type), (long long)be);
        }
        uint64_t nb = nel / (uint64_t)be;
        if (nb > SIZE_MAX / bb) {
            locks_free(offs);
            FAIL(LOCKS_ERR_FORMAT, "tensor '%.*s': size overflows", LOG_LEN(t->name_len), t->name);
        }
        t->nbytes = (size_t)nb * bb;
    }

    /* data section: aligned start, every tensor aligned and inside the file */
    size_t hdr = g->size - c.left;
    size_t data = (hdr + (align - 1)) & ~(size_t)(align - 1);
    if (data < hdr || (data > g->size && n_tensors > 0)) {
        locks_free(offs);
        FAIL(LOCKS_ERR_FORMAT, "data section starts past the end of the file");
    }
    g->data_offset = data;
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t off = offs[i];
        size_t room = g->size - data;
        if (off % align != 0 || off > room || t->nbytes > room - off) {
            locks_free(offs);
            FAIL(LOCKS_ERR_FORMAT, "tensor '%.*s': offset %llu (+%zu bytes) misaligned or past the end of the file",
                 LOG_LEN(t->name_len), t->name, (unsigned long long)off, t->nbytes);
        }
        t->data = g->base + data + off;
    }
    locks_free(offs);
    return LOCKS_OK;
fail:
    return st;
}

/* ================================================================================ */
/* Open / close                                                                     */
/* ================================================================================ */

static gguf *open_common(const uint8_t *base, size_t size, int mapped, locks_status *err) {
    gguf *g = locks_alloc(1, sizeof *g);
    if (!g) {
        if (mapped) munmap((void *)(uintptr_t)base, size);
        if (err) *err = LOCKS_ERR_OOM;
        return NULL;
    }
    g->base = base;
    g->size = size;
    g->mapped = mapped;
    locks_status st = parse(g);
    if (st != LOCKS_OK) {
        gguf_close(g);
        if (err) *err = st;
        return NULL;
    }
    if (err) *err = LOCKS_OK;
    return g;
}

gguf *gguf_open_buffer(const void *buf, size_t size, locks_status *err) {
    if (!buf && size) {
        if (err) *err = LOCKS_ERR_INVALID_ARG;
        return NULL;
    }
    static const uint8_t empty[1] = {0};
    return open_common(buf ? buf : empty, size, 0, err);
}

gguf *gguf_open(const char *path, locks_status *err) {
    if (!path) {
        if (err) *err = locks_fail(LOCKS_ERR_INVALID_ARG, "the path is NULL");
        return NULL;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        if (err) *err = locks_fail(LOCKS_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        if (err) *err = locks_fail(LOCKS_ERR_IO, "'%s' is not a regular file", path);
        return NULL;
    }
    size_t size = (size_t)sb.st_size;
    if (size < 24) {
        close(fd);
        if (err) *err = locks_fail(LOCKS_ERR_FORMAT, "'%s' is too short (%zu bytes) to be a GGUF file", path, size);
        return NULL;
    }
    void *base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        if (err) *err = locks_fail(LOCKS_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
        return NULL;
    }
    return open_common(base, size, 1, err);
}

void gguf_close(gguf *g) {
    if (!g) return;
    if (g->mapped) munmap((void *)(uintptr_t)g->base, g->size);
    locks_free(g->kv);
    locks_free(g->tensors);
    locks_free(g);
}

void gguf_release(const gguf *g, const void *p, size_t n) {
    if (!g || !g->mapped || !p) return;
    const uintptr_t base = (uintptr_t)g->base, end_map = base + g->size, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) / page * page, hi = ((uintptr_t)p + n) / page * page;
    if (lo < base || hi > end_map || hi <= lo) return; /* not in the map, or no whole page */
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

uint32_t gguf_version(const gguf *g) { return g->version; }
size_t gguf_file_size(const gguf *g) { return g->size; }

/* ================================================================================ */
/* Metadata accessors                                                               */
/* ================================================================================ */

int64_t gguf_n_kv(const gguf *g) { return g->n_kv; }

int64_t gguf_find_key(const gguf *g, const char *key) {
    for (int64_t i = 0; i < g->n_kv; i++)
        if (key_eq(&g->kv[i], key)) return i;
    return -1;
}

const char *gguf_key(const gguf *g, int64_t i, size_t *len) {
    if (i < 0 || i >= g->n_kv) return NULL;
    *len = g->kv[i].key_len;
    return g->kv[i].key;
}

gguf_val_type gguf_kv_type(const gguf *g, int64_t i) { return g->kv[i].type; }

/* A scalar integer of any width as int64 (0 on success). */
static int scalar_int(const gguf_kv *kv, int64_t *out) {
    const uint8_t *p = kv->val;
    switch (kv->type) {
    case GGUF_VAL_U8: case GGUF_VAL_BOOL: *out = p[0]; return 0;
    case GGUF_VAL_I8: *out = (int8_t)p[0]; return 0;
    case GGUF_VAL_U16: { uint16_t v; memcpy(&v, p, 2); *out = v; return 0; }
    case GGUF_VAL_I16: { int16_t v; memcpy(&v, p, 2); *out = v; return 0; }
    case GGUF_VAL_U32: { uint32_t v; memcpy(&v, p, 4); *out = v; return 0; }
    case GGUF_VAL_I32: { int32_t v; memcpy(&v, p, 4); *out = v; return 0; }
    case GGUF_VAL_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)v;
        return 0;
    }
    case GGUF_VAL_I64: { int64_t v; memcpy(&v, p, 8); *out = v; return 0; }
    default: return -1;
    }
}

static const gguf_kv *find(const gguf *g, const char *key) {
    int64_t i = gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

locks_status gguf_get_u32(const gguf *g, const char *key, uint32_t *out) {
    const gguf_kv *kv = find(g, key);
    if (!kv) return LOCKS_ERR_INVALID_ARG;
    int64_t v;
    if (scalar_int(kv, &v) != 0 || v < 0 || v > (int64_t)UINT32_MAX) return LOCKS_ERR_FORMAT;
    *out = (uint32_t)v;
    return LOCKS_OK;
}

locks_status gguf_get_i32(const gguf *g, const char *key, int32_t *out) {
    const gguf_kv *kv = find(g, key);
    if (!kv) return LOCKS_ERR_INVALID_ARG;
    int64_t v;
    if (scalar_int(kv, &v) != 0 || v < INT32_MIN || v > INT32_MAX) return LOCKS_ERR_FORMAT;
    *out = (int32_t)v;
    return LOCKS_OK;
}

locks_status gguf_get_f32(const gguf *g, const char *key, float *out) {
    const gguf_kv *kv = find(g, key);
    if (!kv) return LOCKS_ERR_INVALID_ARG;
    if (kv->type == GGUF_VAL_F32) {
        memcpy(out, kv->val, 4);
        return LOCKS_OK;
    }
    if (kv->type == GGUF_VAL_F64) {
        double d;
        memcpy(&d, kv->val, 8);
        *out = (float)d;
        return LOCKS_OK;
    }
    return LOCKS_ERR_FORMAT;
}

locks_status gguf_get_bool(const gguf *g, const char *key, int *out) {
    const gguf_kv *kv = find(g, key);
    if (!kv) return LOCKS_ERR_INVALID_ARG;
    int64_t v;
    if (scalar_int(kv, &v) != 0) return LOCKS_ERR_FORMAT;
    *out = v != 0;
    return LOCKS_OK;
}

locks_status gguf_get_str(const gguf *g, const char *key, const char **s, size_t *len) {
    const gguf_kv *kv = find(g, key);
    if (!kv) return LOCKS_ERR_INVALID_ARG;
    if (kv->type != GGUF_VAL_STRING) return LOCKS_ERR_FORMAT;
    uint64_t n;
    memcpy(&n, kv->val, 8);
    *s = (const char *)kv->val + 8;
    *len = (size_t)n;
    return LOCKS_OK;
}

locks_status gguf_get_arr(const gguf *g, const char *key, gguf_val_type *elem_type, uint64_t *n,
                          const void **data) {
    const gguf_kv *kv = find(g, key);
    if (!kv) return LOCKS_ERR_INVALID_ARG;
    if (kv->type != GGUF_VAL_ARRAY) return LOCKS_ERR_FORMAT;
    *elem_type = kv->elem_type;
    *n = kv->n;
    *data = kv->elems;
    return LOCKS_OK;
}

int32_t gguf_arr_i32(gguf_val_type t, const void *data, uint64_t i) {
    const uint8_t *p = (const uint8_t *)data + i * val_size(t);
    gguf_kv kv = {.type = t, .val = p};
    int64_t v = 0;
    if (scalar_int(&kv, &v) != 0) return 0;
    return v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : (int32_t)v;
}

float gguf_arr_f32(gguf_val_type t, const void *data, uint64_t i) {
    const uint8_t *p = (const uint8_t *)data + i * val_size(t);
    if (t == GGUF_VAL_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    if (t == GGUF_VAL_F64) {
        double d;
        memcpy(&d, p, 8);
        return (float)d;
    }
    gguf_kv kv = {.type = t, .val = p};
    int64_t v = 0;
    if (scalar_int(&kv, &v) != 0) return 0.0f;
    return (float)v;
}

locks_status gguf_get_arr_strs(const gguf *g, const char *key, char ***strs, uint32_t **lens,
                               uint64_t *n) {
    const gguf_kv *kv = find(g, key);
    if (!kv) return LOCKS_ERR_INVALID_ARG;
    if (kv->type != GGUF_VAL_ARRAY || kv->elem_type != GGUF_VAL_STRING) return LOCKS_ERR_FORMAT;
    /* The array was walked at open: every string is in bounds. Two passes: sizes, copy. */
    uint64_t count = kv->n;
    size_t total = 0;
    const uint8_t *p = kv->elems;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t len;
        memcpy(&len, p, 8);
        if (len > UINT32_MAX) return LOCKS_ERR_FORMAT;
        total += (size_t)len + 1;
        p += 8 + len;
    }
    /* one block: the pointer array followed by the characters */
    size_t ptr_bytes = (size_t)(count ? count : 1) * sizeof(char *);
    char **out = locks_alloc(ptr_bytes + total, 1);
    uint32_t *ls = locks_alloc(count ? (size_t)count : 1, sizeof *ls);
    if (!out || !ls) {
        locks_free(out);
        locks_free(ls);
        return LOCKS_ERR_OOM;
    }
    char *chars = (char *)out + ptr_bytes;
    p = kv->elems;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t len;
        memcpy(&len, p, 8);
        memcpy(chars, p + 8, (size_t)len);
        chars[len] = '\0';
        out[i] = chars;
        ls[i] = (uint32_t)len;
        chars += len + 1;
        p += 8 + len;
    }
    *strs = out;
    *lens = ls;
    *n = count;
    return LOCKS_OK;
}

void gguf_strs_free(char **strs, uint32_t *lens) {
    locks_free(strs);
    locks_free(lens);
}

/* ================================================================================ */
/* Tensors                                                                          */
/* ================================================================================ */

int64_t gguf_n_tensors(const gguf *g) { return g->n_tensors; }

const gguf_tensor *gguf_tensor_at(const gguf *g, int64_t i) {
    if (i < 0 || i >= g->n_tensors) return NULL;
    return &g->tensors[i];
}

const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name) {
    size_t n = strlen(name);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (t->name_len == n && memcmp(t->name, name, n) == 0) return t;
    }
    return NULL;
}
