/*
 * gguf.h — a bounds-checked, memory-mapped reader for GGUF files (versions 2 and 3).
 *
 * ---------------------------------------------------------------------------------
 * The format (ggml's GGUF, little-endian throughout)
 * ---------------------------------------------------------------------------------
 *  header:
 *      uint32  magic        'G' 'G' 'U' 'F'  (0x46554747 read as little-endian)
 *      uint32  version      3 (2 has the same layout; 1 used 32-bit counts: refused)
 *      uint64  n_tensors
 *      uint64  n_kv
 *  n_kv metadata pairs:
 *      string  key          (string = uint64 length + that many bytes, no NUL)
 *      uint32  value_type   0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool (1 byte),
 *                           8 string, 9 array, 10 u64, 11 i64, 12 f64
 *      value                scalar, string, or array = uint32 elem_type, uint64 n, n elems
 *  n_tensors tensor infos:
 *      string  name
 *      uint32  n_dims       1..4
 *      uint64  ne[n_dims]   ne[0] is the contiguous (fastest) dimension
 *      uint32  type         ggml type (below)
 *      uint64  offset       from the start of the data section; a multiple of alignment
 *  padding to `general.alignment` (a u32 key, default 32), then the data section.
 *
 *  ggml types this reader accepts (block = elements sharing one scale):
 *      F32  (0)  4 bytes/element          F16 (1)  IEEE half       BF16 (30) bfloat16
 *      Q8_0 (8)  32-element blocks: fp16 d, int8 q[32]          x = d * q       34 B
 *      Q4_0 (2)  32-element blocks: fp16 d, uint8 qs[16]        x = d * (n - 8) 18 B
 *      Q4_1 (3)  32-element blocks: fp16 d, fp16 m, uint8 qs[16] x = d * n + m  20 B
 *      (Q4 nibbles: qs[j] & 15 is element j, qs[j] >> 4 is element j + 16.)
 *      Q5_0 (6), Q5_1 (7): 32-element blocks of 22 / 24 B; Q4_K (12), Q5_K (13), Q6_K (14):
 *      256-element blocks of 144 / 176 / 210 B (layouts in quant.h).
 *  Any other tensor type makes gguf_open fail with LOCKS_ERR_UNSUPPORTED and a log line
 *  naming the tensor and its type.
 *
 * ---------------------------------------------------------------------------------
 * What always holds after a successful open
 * ---------------------------------------------------------------------------------
 *  Every count, length, offset and size in the file has been checked against the file
 *  size before use: every string, array and tensor lies wholly inside the mapping, so
 *  accessors never read out of bounds. A truncated, corrupted or lying file gives
 *  LOCKS_ERR_FORMAT (and a log line saying what is wrong), never a crash. Strings in
 *  the file are not NUL-terminated: accessors return (pointer, length) pairs.
 */
#ifndef LOCKS_GGUF_H
#define LOCKS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "locks.h"

typedef enum {
    GGUF_VAL_U8 = 0,
    GGUF_VAL_I8 = 1,
    GGUF_VAL_U16 = 2,
    GGUF_VAL_I16 = 3,
    GGUF_VAL_U32 = 4,
    GGUF_VAL_I32 = 5,
    GGUF_VAL_F32 = 6,
    GGUF_VAL_BOOL = 7,
    GGUF_VAL_STRING = 8,
    GGUF_VAL_ARRAY = 9,
    GGUF_VAL_U64 = 10,
    GGUF_VAL_I64 = 11,
    GGUF_VAL_F64 = 12,
    GGUF_VAL_COUNT
} gguf_val_type;

typedef enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_BF16 = 30,
} ggml_type;

#define GGML_QBLOCK 32 /* elements per Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 block */
#define GGML_QK_K 256 /* elements per K-quant block */

/* One tensor as the file describes it; data points into the mapping. */
typedef struct {
    const char *name; /* not NUL-terminated */
    size_t name_len;
    int32_t n_dims;
    int64_t ne[4]; /* unused dims are 1 */
    ggml_type type;
    const void *data;
    size_t nbytes;
} gguf_tensor;

typedef struct gguf gguf;

/* Maps the file read-only and parses its header. Returns NULL and sets *err:
 * LOCKS_ERR_IO (cannot open/map), LOCKS_ERR_FORMAT (malformed), LOCKS_ERR_UNSUPPORTED
 * (a tensor type outside the list above), LOCKS_ERR_OOM. */
gguf *gguf_open(const char *path, locks_status *err);
/* The same over a caller's buffer (not copied: it must outlive the gguf). For tests and
 * fuzzing. */
gguf *gguf_open_buffer(const void *buf, size_t size, locks_status *err);
void gguf_close(gguf *g);
/* Says that bytes [p, p + n) of a mapped file (a tensor copied elsewhere, e.g. repacked)
 * will not be read for a while: the whole pages inside are dropped from memory and read
 * back from the file if touched again. Nothing for gguf_open_buffer's buffers. */
void gguf_release(const gguf *g, const void *p, size_t n);

uint32_t gguf_version(const gguf *g);
size_t gguf_file_size(const gguf *g);

/* ---- metadata ---------------------------------------------------------------- */

int64_t gguf_n_kv(const gguf *g);
/* Index of a key (NUL-terminated), or -1 if absent. */
int64_t gguf_find_key(const gguf *g, const char *key);
const char *gguf_key(const gguf *g, int64_t i, size_t *len);
gguf_val_type gguf_kv_type(const gguf *g, int64_t i);

/* Typed getters by key. Each returns LOCKS_OK and writes *out, LOCKS_ERR_INVALID_ARG
 * if the key is absent, LOCKS_ERR_FORMAT if its type does not convert (integers convert
 * between widths when the value fits; f32 and f64 both read as float). */
locks_status gguf_get_u32(const gguf *g, const char *key, uint32_t *out);
locks_status gguf_get_i32(const gguf *g, const char *key, int32_t *out);
locks_status gguf_get_f32(const gguf *g, const char *key, float *out);
locks_status gguf_get_bool(const gguf *g, const char *key, int *out);
/* String value: pointer into the mapping and its length (not NUL-terminated). */
locks_status gguf_get_str(const gguf *g, const char *key, const char **s, size_t *len);

/* Array value: element type and count. For numeric arrays *data points at the packed
 * little-endian elements (unaligned: read them with memcpy or gguf_arr_i32/f32). */
locks_status gguf_get_arr(const gguf *g, const char *key, gguf_val_type *elem_type,
                          uint64_t *n, const void **data);
/* Element i of a numeric array converted to int32 / float (bounds already checked at
 * open; i must be < n). */
int32_t gguf_arr_i32(gguf_val_type elem_type, const void *data, uint64_t i);
float gguf_arr_f32(gguf_val_type elem_type, const void *data, uint64_t i);
/* A string array copied out as NUL-terminated strings: (*strs)[i] point into one block,
 * (*lens)[i] are their byte lengths (strings holding NUL bytes are kept whole: use the
 * lengths). Free with gguf_strs_free. */
locks_status gguf_get_arr_strs(const gguf *g, const char *key, char ***strs, uint32_t **lens,
                               uint64_t *n);
void gguf_strs_free(char **strs, uint32_t *lens);

/* ---- tensors ------------------------------------------------------------------ */

int64_t gguf_n_tensors(const gguf *g);
const gguf_tensor *gguf_tensor_at(const gguf *g, int64_t i);
/* The tensor of that name (NUL-terminated), or NULL. */
const gguf_tensor *gguf_find_tensor(const gguf *g, const char *name);

/* "F32", "Q4_1", ... for any ggml type id (including unsupported ones), "unknown" else. */
const char *ggml_type_name(uint32_t type);
/* Bytes of one row of ne0 elements of a supported type (ne0 a multiple of the block). */
size_t ggml_row_bytes(ggml_type type, int64_t ne0);

#endif
