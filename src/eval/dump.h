/*
 * dump.h — the KV dump: a recorded prefill + decode of a real model, replayed offline
 * by `locks eval` through every selector.
 *
 * A dump holds, for every layer, the keys, values and RoPE positions of every token of
 * one sequence, and the query vectors of each decode step. Nothing else is needed to
 * replay what a selector would have picked at each step and to compare it with the
 * exact attention. The engine writes dumps (`locks run --dump-kv FILE`); the reader
 * checks every size against the file before it touches the data.
 *
 * ---------------------------------------------------------------------------------
 * File format, version 1 (all integers and floats little-endian, no padding)
 * ---------------------------------------------------------------------------------
 *  Header, 128 bytes:
 *    off  size  field
 *      0     8  magic        "LOCKSKV\0"
 *      8     4  u32 version  1
 *     12     4  u32 header_bytes  128 (readers skip to this offset: later versions may
 *                            append header fields)
 *     16     4  u32 n_layers     1 .. 4096
 *     20     4  u32 n_q_heads    Hq, a multiple of n_kv_heads, <= 1024
 *     24     4  u32 n_kv_heads   Hkv, 1 .. 1024
 *     28     4  u32 head_dim     d, 1 .. LOCKS_MAX_HEAD_DIM
 *     32     4  u32 n_ctx        prefill tokens, >= 1 (tokens [0, n_ctx))
 *     36     4  u32 n_steps      decode steps, >= 1
 *     40     4  u32 kv_dtype     0 = f32, 1 = f16 (IEEE half) for keys and values
 *     44     4  f32 scale        the model's softmax scale (finite, > 0)
 *     48     4  f32 rope_theta   informative only (0 if unknown)
 *     52     4  u32 n_obs        observation-window queries per layer, 0 .. n_ctx (may
 *                            be 0): the queries of the last n_obs prefill tokens, for
 *                            prefill-time methods such as SnapKV (RocketKV's first stage)
 *     56    64  model name, NUL-padded UTF-8 (informative)
 *    120     8  u64 file_bytes   total size of the file; must match
 *
 *  Then for each layer l = 0 .. n_layers-1, with n_tok = n_ctx + n_steps:
 *      u32 layer_tag  = 0x4C594552 ("LYER" read as a little-endian u32) ^ l
 *      i32 pos[n_tok]                   RoPE position of each token
 *      K   [n_tok][Hkv][d]  kv_dtype    keys as the cache stores them (after RoPE)
 *      V   [n_tok][Hkv][d]  kv_dtype
 *      f32 Q[n_steps][Hq][d]            query of decode step s (after RoPE)
 *      f32 Qobs[n_obs][Hq][d]           query of prefill token n_ctx - n_obs + i
 *
 *  Semantics of decode step s (0-based): the token at index n_ctx + s has been
 *  appended (its K/V written) and its queries Q[s] attend tokens [0, n_ctx + s]
 *  inclusive. Query head h belongs to KV head h / (Hq / Hkv).
 *
 *  Version policy: readers accept exactly the versions they know (1); a change of
 *  meaning bumps the version. New trailing header fields keep header_bytes honest.
 *
 *  The reader returns LOCKS_ERR_FORMAT for a wrong magic, an unknown version, any
 *  field out of range, a size that does not match file_bytes or the actual file
 *  size, a bad layer tag, or a non-finite key, value, query or scale;
 *  LOCKS_ERR_IO when the file cannot be opened or read.
 */
#ifndef LOCKS_DUMP_H
#define LOCKS_DUMP_H

#include "locks.h"

#include <stddef.h>
#include <stdint.h>

#define LOCKS_DUMP_VERSION 1
#define LOCKS_DUMP_HEADER_BYTES 128
#define LOCKS_DUMP_MAX_LAYERS 4096
#define LOCKS_DUMP_MAX_HEADS 1024

typedef struct {
    int32_t n_layers, n_q_heads, n_kv_heads, head_dim;
    int32_t n_ctx;   /* prefill tokens */
    int32_t n_steps; /* decode steps */
    int32_t n_obs;   /* observation-window queries (last prefill tokens), 0 .. n_ctx */
    locks_dtype kv_dtype; /* LOCKS_DTYPE_F32 or LOCKS_DTYPE_F16 on disk */
    float scale;
    float rope_theta;
    char model[64]; /* NUL-terminated within 64 bytes */
} locks_dump_shape;

/* A dump in memory (everything converted to fp32). n_tok = n_ctx + n_steps. */
typedef struct {
    locks_dump_shape shape;
    int32_t *pos; /* [n_layers][n_tok] */
    float *k;     /* [n_layers][n_tok][Hkv][d] */
    float *v;     /* [n_layers][n_tok][Hkv][d] */
    float *q;     /* [n_layers][n_steps][Hq][d] */
    float *q_obs; /* [n_layers][n_obs][Hq][d] (NULL when n_obs = 0) */
} locks_dump;

/* Checks a shape (ranges above); LOCKS_ERR_INVALID_ARG if it is not writable. */
locks_status locks_dump_shape_check(const locks_dump_shape *s);

/* Exact file size of a dump of this shape; 0 if it overflows or the shape is invalid. */
uint64_t locks_dump_file_bytes(const locks_dump_shape *s);

/* ---- writing ---------------------------------------------------------------------
 * Streaming writer: open, then write the layers in order 0 .. n_layers-1, then close.
 * close returns LOCKS_ERR_INVALID_ARG (and removes nothing) if a layer is missing;
 * the file is then incomplete and the reader rejects it. */
typedef struct locks_dump_writer locks_dump_writer;

/* Returns NULL and sets *err: LOCKS_ERR_INVALID_ARG (bad shape), LOCKS_ERR_IO, OOM. */
locks_dump_writer *locks_dump_writer_open(const char *path, const locks_dump_shape *shape,
                                          locks_status *err);
/* One layer: pos[n_tok], k/v [n_tok][Hkv][d] fp32, q [n_steps][Hq][d] fp32.
 * LOCKS_ERR_INVALID_ARG if layer is not the next one (or the shape has n_obs > 0: use
 * locks_dump_write_layer_obs), LOCKS_ERR_NONFINITE for NaN/Inf (nothing written),
 * LOCKS_ERR_IO on a failed write. */
locks_status locks_dump_write_layer(locks_dump_writer *w, int32_t layer, const int32_t *pos,
                                    const float *k, const float *v, const float *q);
/* The same with the observation window q_obs [n_obs][Hq][d] (may be NULL iff n_obs = 0). */
locks_status locks_dump_write_layer_obs(locks_dump_writer *w, int32_t layer, const int32_t *pos,
                                        const float *k, const float *v, const float *q,
                                        const float *q_obs);
/* Flushes and closes; always frees w. */
locks_status locks_dump_writer_close(locks_dump_writer *w);

/* Convenience for engines: writes a whole dump of sequence seq_id from a CPU cache that
 * holds exactly n_ctx + n_steps tokens of it (keys/values read back from the cache's
 * fp16 pages, so shape->kv_dtype F16 is lossless). pos: [n_tok] (the same positions
 * for every layer; NULL means 0 .. n_tok-1); q: [n_layers][n_steps][Hq][d].
 * shape->n_kv_heads/head_dim/n_layers must match the cache; shape->n_obs must be 0. */
locks_status locks_dump_write_cache(const char *path, const locks_dump_shape *shape,
                                    const locks_cache *cache, int32_t seq_id,
                                    const int32_t *pos, const float *q);
/* The same with the observation window q_obs [n_layers][n_obs][Hq][d] (may be NULL iff
 * shape->n_obs = 0): the queries of the last n_obs prefill tokens of each layer. */
locks_status locks_dump_write_cache_obs(const char *path, const locks_dump_shape *shape,
                                        const locks_cache *cache, int32_t seq_id,
                                        const int32_t *pos, const float *q, const float *q_obs);

/* The same for a subset of the cache's layers: dump layer i holds cache layer layers[i]
 * (strictly increasing, in range; NULL: every layer, as above), shape->n_layers of them;
 * q and q_obs are indexed by dump layer. For models whose local (sliding-window) layers
 * the selector never acts in: the engine dumps only the global ones. */
locks_status locks_dump_write_cache_layers(const char *path, const locks_dump_shape *shape,
                                           const locks_cache *cache, int32_t seq_id, const int32_t *pos,
                                           const float *q, const float *q_obs, const int32_t *layers);

/* ---- reading --------------------------------------------------------------------- */

/* Reads and validates a whole dump. On error returns the status and leaves *out zeroed. */
locks_status locks_dump_load(const char *path, locks_dump *out);
void locks_dump_free(locks_dump *d);

/* Pointers into a loaded dump for one layer. */
const int32_t *locks_dump_pos(const locks_dump *d, int32_t layer);
const float *locks_dump_k(const locks_dump *d, int32_t layer);
const float *locks_dump_v(const locks_dump *d, int32_t layer);
const float *locks_dump_q(const locks_dump *d, int32_t layer, int32_t step);
/* [n_obs][Hq][d] of one layer, NULL when the dump has no observation window. */
const float *locks_dump_q_obs(const locks_dump *d, int32_t layer);

#endif
