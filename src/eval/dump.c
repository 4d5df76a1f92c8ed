/*
 * dump.c — writer and validating reader of the KV dump (format in dump.h).
 *
 * Every multi-byte value goes through explicit little-endian packing, so the file is
 * the same on any host. The reader computes the exact file size from the header (with
 * overflow checks) and compares it with both the recorded and the actual size before
 * it allocates anything; it then reads layer by layer and rejects non-finite data.
 */
#define _POSIX_C_SOURCE 200809L
#include "dump.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static const char dump_magic[8] = {'L', 'O', 'C', 'K', 'S', 'K', 'V', '\0'};
#define DUMP_LAYER_TAG 0x4C594552u

/* ---- little-endian packing ------------------------------------------------------ */

static void put_u32(uint8_t *b, uint32_t x) {
    b[0] = (uint8_t)x;
    b[1] = (uint8_t)(x >> 8);
    b[2] = (uint8_t)(x >> 16);
    b[3] = (uint8_t)(x >> 24);
}

static void put_u64(uint8_t *b, uint64_t x) {
    put_u32(b, (uint32_t)x);
    put_u32(b + 4, (uint32_t)(x >> 32));
}

static uint32_t get_u32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t get_u64(const uint8_t *b) { return (uint64_t)get_u32(b) | (uint64_t)get_u32(b + 4) << 32; }

static uint32_t f32_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

static float bits_f32(uint32_t x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* ---- shape ------------------------------------------------------------------------ */

locks_status locks_dump_shape_check(const locks_dump_shape *s) {
    if (!s) return LOCKS_ERR_INVALID_ARG;
    if (s->n_layers < 1 || s->n_layers > LOCKS_DUMP_MAX_LAYERS) return LOCKS_ERR_INVALID_ARG;
    if (s->n_kv_heads < 1 || s->n_kv_heads > LOCKS_DUMP_MAX_HEADS) return LOCKS_ERR_INVALID_ARG;
    if (s->n_q_heads < 1 || s->n_q_heads > LOCKS_DUMP_MAX_HEADS) return LOCKS_ERR_INVALID_ARG;
    if (s->n_q_heads % s->n_kv_heads != 0) return LOCKS_ERR_INVALID_ARG;
    if (s->head_dim < 1 || s->head_dim > LOCKS_MAX_HEAD_DIM) return LOCKS_ERR_INVALID_ARG;
    if (s->n_ctx < 1 || s->n_steps < 1) return LOCKS_ERR_INVALID_ARG;
    if (s->n_obs < 0 || s->n_obs > s->n_ctx) return LOCKS_ERR_INVALID_ARG;
    if ((int64_t)s->n_ctx + s->n_steps > INT32_MAX) return LOCKS_ERR_INVALID_ARG;
    if (s->kv_dtype != LOCKS_DTYPE_F32 && s->kv_dtype != LOCKS_DTYPE_F16) return LOCKS_ERR_INVALID_ARG;
    if (!isfinite(s->scale) || !(s->scale > 0.0f)) return LOCKS_ERR_INVALID_ARG;
    if (!isfinite(s->rope_theta)) return LOCKS_ERR_INVALID_ARG;
    return LOCKS_OK;
}

/* Bytes of one layer's record; 0 on overflow. */
static uint64_t layer_bytes(const locks_dump_shape *s) {
    uint64_t n_tok = (uint64_t)s->n_ctx + (uint64_t)s->n_steps;
    uint64_t esz = s->kv_dtype == LOCKS_DTYPE_F16 ? 2 : 4;
    /* every factor is < 2^32 and the products below stay < 2^63 for valid shapes */
    uint64_t kv = n_tok * (uint64_t)s->n_kv_heads * (uint64_t)s->head_dim; /* < 2^31*2^10*2^8 */
    uint64_t qn = ((uint64_t)s->n_steps + (uint64_t)s->n_obs) * (uint64_t)s->n_q_heads * (uint64_t)s->head_dim;
    return 4 + 4 * n_tok + 2 * esz * kv + 4 * qn;
}

uint64_t locks_dump_file_bytes(const locks_dump_shape *s) {
    if (locks_dump_shape_check(s) != LOCKS_OK) return 0;
    uint64_t lb = layer_bytes(s);
    if (lb > (UINT64_MAX - LOCKS_DUMP_HEADER_BYTES) / (uint64_t)s->n_layers) return 0;
    return LOCKS_DUMP_HEADER_BYTES + lb * (uint64_t)s->n_layers;
}

/* ---- writer ---------------------------------------------------------------------- */

struct locks_dump_writer {
    FILE *f;
    locks_dump_shape shape;
    int32_t next_layer;
    uint8_t *buf; /* staging for packed little-endian data */
    size_t buf_cap;
    int failed;
};

static locks_status w_bytes(locks_dump_writer *w, const void *p, size_t n) {
    if (fwrite(p, 1, n, w->f) != n) {
        w->failed = 1;
        return LOCKS_ERR_IO;
    }
    return LOCKS_OK;
}

locks_dump_writer *locks_dump_writer_open(const char *path, const locks_dump_shape *shape,
                                          locks_status *err) {
    locks_status st = LOCKS_OK;
    locks_dump_writer *w = NULL;
    uint64_t total = 0;
    if (!path || locks_dump_shape_check(shape) != LOCKS_OK) {
        st = LOCKS_ERR_INVALID_ARG;
        goto fail;
    }
    total = locks_dump_file_bytes(shape);
    if (total == 0) {
        st = LOCKS_ERR_INVALID_ARG;
        goto fail;
    }
    w = locks_alloc(1, sizeof *w);
    if (!w) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    w->shape = *shape;
    w->shape.model[sizeof w->shape.model - 1] = '\0';
    w->buf_cap = (size_t)1 << 16;
    w->buf = locks_alloc(w->buf_cap, 1);
    if (!w->buf) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    w->f = fopen(path, "wb");
    if (!w->f) {
        locks_log(LOCKS_LOG_ERROR, "dump: cannot create %s", path);
        st = LOCKS_ERR_IO;
        goto fail;
    }
    uint8_t h[LOCKS_DUMP_HEADER_BYTES];
    memset(h, 0, sizeof h);
    memcpy(h, dump_magic, 8);
    put_u32(h + 8, LOCKS_DUMP_VERSION);
    put_u32(h + 12, LOCKS_DUMP_HEADER_BYTES);
    put_u32(h + 16, (uint32_t)shape->n_layers);
    put_u32(h + 20, (uint32_t)shape->n_q_heads);
    put_u32(h + 24, (uint32_t)shape->n_kv_heads);
    put_u32(h + 28, (uint32_t)shape->head_dim);
    put_u32(h + 32, (uint32_t)shape->n_ctx);
    put_u32(h + 36, (uint32_t)shape->n_steps);
    put_u32(h + 40, shape->kv_dtype == LOCKS_DTYPE_F16 ? 1u : 0u);
    put_u32(h + 44, f32_bits(shape->scale));
    put_u32(h + 48, f32_bits(shape->rope_theta));
    put_u32(h + 52, (uint32_t)shape->n_obs);
    memcpy(h + 56, w->shape.model, 64);
    put_u64(h + 120, total);
    st = w_bytes(w, h, sizeof h);
    if (st != LOCKS_OK) goto fail;
    return w;
fail:
    if (w) {
        if (w->f) fclose(w->f);
        locks_free(w->buf);
        locks_free(w);
    }
    if (err) *err = st;
    return NULL;
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Packs n floats as f32 or f16 through the staging buffer. */
static locks_status w_floats(locks_dump_writer *w, const float *x, size_t n, int as_f16) {
    size_t esz = as_f16 ? 2 : 4;
    size_t per = w->buf_cap / esz;
    for (size_t i0 = 0; i0 < n; i0 += per) {
        size_t m = n - i0 < per ? n - i0 : per;
        for (size_t i = 0; i < m; i++) {
            if (as_f16) {
                uint16_t hb = locks_f32_to_f16(x[i0 + i]);
                w->buf[2 * i] = (uint8_t)hb;
                w->buf[2 * i + 1] = (uint8_t)(hb >> 8);
            } else {
                put_u32(w->buf + 4 * i, f32_bits(x[i0 + i]));
            }
        }
        locks_status st = w_bytes(w, w->buf, m * esz);
        if (st != LOCKS_OK) return st;
    }
    return LOCKS_OK;
}

locks_status locks_dump_write_layer(locks_dump_writer *w, int32_t layer, const int32_t *pos,
                                    const float *k, const float *v, const float *q) {
    return locks_dump_write_layer_obs(w, layer, pos, k, v, q, NULL);
}

locks_status locks_dump_write_layer_obs(locks_dump_writer *w, int32_t layer, const int32_t *pos,
                                        const float *k, const float *v, const float *q,
                                        const float *q_obs) {
    if (!w || !pos || !k || !v || !q || w->failed) return LOCKS_ERR_INVALID_ARG;
    const locks_dump_shape *s = &w->shape;
    if ((s->n_obs > 0) != (q_obs != NULL)) return LOCKS_ERR_INVALID_ARG;
    const size_t nobs = (size_t)s->n_obs * (size_t)s->n_q_heads * (size_t)s->head_dim;
    if (layer != w->next_layer || layer >= s->n_layers) return LOCKS_ERR_INVALID_ARG;
    size_t n_tok = (size_t)s->n_ctx + (size_t)s->n_steps;
    size_t nkv = n_tok * (size_t)s->n_kv_heads * (size_t)s->head_dim;
    size_t nq = (size_t)s->n_steps * (size_t)s->n_q_heads * (size_t)s->head_dim;
    if (!all_finite(k, nkv) || !all_finite(v, nkv) || !all_finite(q, nq) || (q_obs && !all_finite(q_obs, nobs)))
        return LOCKS_ERR_NONFINITE;
    if (s->kv_dtype == LOCKS_DTYPE_F16) {
        /* keys/values that overflow fp16 would be stored as Inf: refuse them */
        for (size_t i = 0; i < nkv; i++)
            if (fabsf(k[i]) > 65504.0f || fabsf(v[i]) > 65504.0f) return LOCKS_ERR_NONFINITE;
    }
    uint8_t tag[4];
    put_u32(tag, DUMP_LAYER_TAG ^ (uint32_t)layer);
    locks_status st = w_bytes(w, tag, 4);
    for (size_t i0 = 0; st == LOCKS_OK && i0 < n_tok; i0 += w->buf_cap / 4) {
        size_t m = n_tok - i0 < w->buf_cap / 4 ? n_tok - i0 : w->buf_cap / 4;
        for (size_t i = 0; i < m; i++) put_u32(w->buf + 4 * i, (uint32_t)pos[i0 + i]);
        st = w_bytes(w, w->buf, 4 * m);
    }
    int f16 = s->kv_dtype == LOCKS_DTYPE_F16;
    if (st == LOCKS_OK) st = w_floats(w, k, nkv, f16);
    if (st == LOCKS_OK) st = w_floats(w, v, nkv, f16);
    if (st == LOCKS_OK) st = w_floats(w, q, nq, 0);
    if (st == LOCKS_OK && q_obs) st = w_floats(w, q_obs, nobs, 0);
    if (st != LOCKS_OK) return st;
    w->next_layer++;
    return LOCKS_OK;
}

locks_status locks_dump_writer_close(locks_dump_writer *w) {
    if (!w) return LOCKS_ERR_INVALID_ARG;
    locks_status st = LOCKS_OK;
    if (w->failed) st = LOCKS_ERR_IO;
    if (fclose(w->f) != 0 && st == LOCKS_OK) st = LOCKS_ERR_IO;
    if (st == LOCKS_OK && w->next_layer != w->shape.n_layers) {
        locks_log(LOCKS_LOG_ERROR, "dump: closed after %d of %d layers", (int)w->next_layer,
                  (int)w->shape.n_layers);
        st = LOCKS_ERR_INVALID_ARG;
    }
    locks_free(w->buf);
    locks_free(w);
    return st;
}

locks_status locks_dump_write_cache(const char *path, const locks_dump_shape *shape,
                                    const locks_cache *cache, int32_t seq_id,
                                    const int32_t *pos, const float *q) {
    return locks_dump_write_cache_obs(path, shape, cache, seq_id, pos, q, NULL);
}

locks_status locks_dump_write_cache_obs(const char *path, const locks_dump_shape *shape,
                                        const locks_cache *cache, int32_t seq_id,
                                        const int32_t *pos, const float *q, const float *q_obs) {
    return locks_dump_write_cache_layers(path, shape, cache, seq_id, pos, q, q_obs, NULL);
}

locks_status locks_dump_write_cache_layers(const char *path, const locks_dump_shape *shape,
                                           const locks_cache *cache, int32_t seq_id, const int32_t *pos,
                                           const float *q, const float *q_obs, const int32_t *layers) {
    if (!path || !shape || !cache || !q || (shape->n_obs > 0) != (q_obs != NULL)) return LOCKS_ERR_INVALID_ARG;
    locks_status st = locks_dump_shape_check(shape);
    if (st != LOCKS_OK) return st;
    locks_cache_params cp = locks_cache_get_params(cache);
    if ((layers ? shape->n_layers > cp.n_layers : cp.n_layers != shape->n_layers) ||
        cp.n_kv_heads != shape->n_kv_heads || cp.head_dim != shape->head_dim)
        return LOCKS_ERR_INVALID_ARG;
    for (int32_t i = 0; layers && i < shape->n_layers; i++)
        if (layers[i] < 0 || layers[i] >= cp.n_layers || (i > 0 && layers[i] <= layers[i - 1]))
            return LOCKS_ERR_INVALID_ARG;
    const int32_t n_tok = shape->n_ctx + shape->n_steps;
    if (locks_cache_seq_len(cache, seq_id) != n_tok) return LOCKS_ERR_INVALID_ARG;
    int32_t n_pages = 0;
    const int32_t *bt = locks_cache_block_table(cache, seq_id, &n_pages);
    if (!bt) return LOCKS_ERR_NO_SEQ;
    const int32_t hkv = shape->n_kv_heads, d = shape->head_dim;
    const size_t nkv = (size_t)n_tok * (size_t)hkv * (size_t)d;
    const size_t nq = (size_t)shape->n_steps * (size_t)shape->n_q_heads * (size_t)d;
    float *k = locks_alloc(nkv, sizeof *k);
    float *v = locks_alloc(nkv, sizeof *v);
    int32_t *p = locks_alloc((size_t)n_tok, sizeof *p);
    locks_dump_writer *w = NULL;
    if (!k || !v || !p) {
        st = LOCKS_ERR_OOM;
        goto done;
    }
    for (int32_t t = 0; t < n_tok; t++) p[t] = pos ? pos[t] : t;
    w = locks_dump_writer_open(path, shape, &st);
    if (!w) goto done;
    for (int32_t l = 0; l < shape->n_layers; l++) {
        const int32_t cl = layers ? layers[l] : l; /* the cache's layer of dump layer l */
        /* cache block [Hkv][P][d] per physical page -> dump rows [t][Hkv][d] */
        for (int32_t t = 0; t < n_tok; t++) {
            const uint16_t *kp = locks_cache_k_page(cache, cl, bt[t / LOCKS_PAGE]);
            const uint16_t *vp = locks_cache_v_page(cache, cl, bt[t / LOCKS_PAGE]);
            if (!kp || !vp) {
                st = LOCKS_ERR_UNSUPPORTED;
                goto done;
            }
            for (int32_t h = 0; h < hkv; h++) {
                size_t src = ((size_t)h * LOCKS_PAGE + (size_t)(t % LOCKS_PAGE)) * (size_t)d;
                size_t dst = ((size_t)t * (size_t)hkv + (size_t)h) * (size_t)d;
                for (int32_t c = 0; c < d; c++) {
                    k[dst + (size_t)c] = locks_f16_to_f32(kp[src + (size_t)c]);
                    v[dst + (size_t)c] = locks_f16_to_f32(vp[src + (size_t)c]);
                }
            }
        }
        const size_t nobs = (size_t)shape->n_obs * (size_t)shape->n_q_heads * (size_t)d;
        st = locks_dump_write_layer_obs(w, l, p, k, v, q + (size_t)l * nq, q_obs ? q_obs + (size_t)l * nobs : NULL);
        if (st != LOCKS_OK) goto done;
    }
done:
    if (w) {
        locks_status cst = locks_dump_writer_close(w);
        if (st == LOCKS_OK) st = cst;
    }
    locks_free(k);
    locks_free(v);
    locks_free(p);
    return st;
}

/* ---- reader ---------------------------------------------------------------------- */

static locks_status r_bytes(FILE *f, void *p, size_t n) {
    return fread(p, 1, n, f) == n ? LOCKS_OK : LOCKS_ERR_FORMAT; /* short read: truncated */
}

/* Reads n floats stored as f32 or f16 into x; FORMAT on a short read or non-finite. */
static locks_status r_floats(FILE *f, float *x, size_t n, int as_f16, uint8_t *buf, size_t cap) {
    size_t esz = as_f16 ? 2 : 4;
    size_t per = cap / esz;
    for (size_t i0 = 0; i0 < n; i0 += per) {
        size_t m = n - i0 < per ? n - i0 : per;
        if (r_bytes(f, buf, m * esz) != LOCKS_OK) return LOCKS_ERR_FORMAT;
        for (size_t i = 0; i < m; i++) {
            float y = as_f16 ? locks_f16_to_f32((uint16_t)(buf[2 * i] | buf[2 * i + 1] << 8))
                             : bits_f32(get_u32(buf + 4 * i));
            if (!isfinite(y)) return LOCKS_ERR_FORMAT;
            x[i0 + i] = y;
        }
    }
    return LOCKS_OK;
}

void locks_dump_free(locks_dump *d) {
    if (!d) return;
    locks_free(d->pos);
    locks_free(d->k);
    locks_free(d->v);
    locks_free(d->q);
    locks_free(d->q_obs);
    memset(d, 0, sizeof *d);
}

locks_status locks_dump_load(const char *path, locks_dump *out) {
    if (!path || !out) return LOCKS_ERR_INVALID_ARG;
    memset(out, 0, sizeof *out);
    locks_status st = LOCKS_OK;
    locks_dump d;
    memset(&d, 0, sizeof d);
    uint8_t *buf = NULL;
    const size_t cap = (size_t)1 << 16;
    FILE *f = fopen(path, "rb");
    if (!f) {
        locks_log(LOCKS_LOG_ERROR, "dump: cannot open %s", path);
        return LOCKS_ERR_IO;
    }
    uint8_t h[LOCKS_DUMP_HEADER_BYTES];
    if (fread(h, 1, sizeof h, f) != sizeof h || memcmp(h, dump_magic, 8) != 0) {
        st = LOCKS_ERR_FORMAT;
        goto fail;
    }
    if (get_u32(h + 8) != LOCKS_DUMP_VERSION || get_u32(h + 12) != LOCKS_DUMP_HEADER_BYTES) {
        st = LOCKS_ERR_FORMAT;
        goto fail;
    }
    /* every u32 count must fit a positive int32 before the shape check sees it */
    for (int off = 16; off <= 36; off += 4) {
        if (get_u32(h + off) > (uint32_t)INT32_MAX) {
            st = LOCKS_ERR_FORMAT;
            goto fail;
        }
    }
    locks_dump_shape *s = &d.shape;
    s->n_layers = (int32_t)get_u32(h + 16);
    s->n_q_heads = (int32_t)get_u32(h + 20);
    s->n_kv_heads = (int32_t)get_u32(h + 24);
    s->head_dim = (int32_t)get_u32(h + 28);
    s->n_ctx = (int32_t)get_u32(h + 32);
    s->n_steps = (int32_t)get_u32(h + 36);
    uint32_t dt = get_u32(h + 40);
    s->n_obs = (int32_t)get_u32(h + 52);
    if (dt > 1 || get_u32(h + 52) > (uint32_t)INT32_MAX) {
        st = LOCKS_ERR_FORMAT;
        goto fail;
    }
    s->kv_dtype = dt == 1 ? LOCKS_DTYPE_F16 : LOCKS_DTYPE_F32;
    s->scale = bits_f32(get_u32(h + 44));
    s->rope_theta = bits_f32(get_u32(h + 48));
    memcpy(s->model, h + 56, 64);
    s->model[63] = '\0';
    uint64_t total = locks_dump_file_bytes(s);
    if (total == 0 || get_u64(h + 120) != total) {
        st = LOCKS_ERR_FORMAT;
        goto fail;
    }
    /* the file on disk must be exactly that long (catches truncation before allocating) */
    if (fseek(f, 0, SEEK_END) != 0) {
        st = LOCKS_ERR_IO;
        goto fail;
    }
    long end = ftell(f);
    if (end < 0 || (uint64_t)end != total) {
        st = LOCKS_ERR_FORMAT;
        goto fail;
    }
    if (fseek(f, LOCKS_DUMP_HEADER_BYTES, SEEK_SET) != 0) {
        st = LOCKS_ERR_IO;
        goto fail;
    }
    const size_t L = (size_t)s->n_layers;
    const size_t n_tok = (size_t)s->n_ctx + (size_t)s->n_steps;
    const size_t nkv = n_tok * (size_t)s->n_kv_heads * (size_t)s->head_dim;
    const size_t nq = (size_t)s->n_steps * (size_t)s->n_q_heads * (size_t)s->head_dim;
    d.pos = locks_alloc(L * n_tok, sizeof *d.pos);
    d.k = locks_alloc(L * nkv, sizeof *d.k);
    d.v = locks_alloc(L * nkv, sizeof *d.v);
    d.q = locks_alloc(L * nq, sizeof *d.q);
    const size_t nobs = (size_t)s->n_obs * (size_t)s->n_q_heads * (size_t)s->head_dim;
    if (nobs) d.q_obs = locks_alloc(L * nobs, sizeof *d.q_obs);
    buf = locks_alloc(cap, 1);
    if (!d.pos || !d.k || !d.v || !d.q || (nobs && !d.q_obs) || !buf) {
        st = LOCKS_ERR_OOM;
        goto fail;
    }
    const int f16 = s->kv_dtype == LOCKS_DTYPE_F16;
    for (size_t l = 0; l < L; l++) {
        uint8_t tag[4];
        if (r_bytes(f, tag, 4) != LOCKS_OK || get_u32(tag) != (DUMP_LAYER_TAG ^ (uint32_t)l)) {
            st = LOCKS_ERR_FORMAT;
            goto fail;
        }
        int32_t *pos = d.pos + l * n_tok;
        for (size_t i0 = 0; i0 < n_tok; i0 += cap / 4) {
            size_t m = n_tok - i0 < cap / 4 ? n_tok - i0 : cap / 4;
            if (r_bytes(f, buf, 4 * m) != LOCKS_OK) {
                st = LOCKS_ERR_FORMAT;
                goto fail;
            }
            for (size_t i = 0; i < m; i++) pos[i0 + i] = (int32_t)get_u32(buf + 4 * i);
        }
        st = r_floats(f, d.k + l * nkv, nkv, f16, buf, cap);
        if (st == LOCKS_OK) st = r_floats(f, d.v + l * nkv, nkv, f16, buf, cap);
        if (st == LOCKS_OK) st = r_floats(f, d.q + l * nq, nq, 0, buf, cap);
        if (st == LOCKS_OK && nobs) st = r_floats(f, d.q_obs + l * nobs, nobs, 0, buf, cap);
        if (st != LOCKS_OK) goto fail;
    }
    fclose(f);
    locks_free(buf);
    *out = d;
    return LOCKS_OK;
fail:
    if (st == LOCKS_ERR_FORMAT) locks_log(LOCKS_LOG_ERROR, "dump: %s is malformed", path);
    fclose(f);
    locks_free(buf);
    locks_dump_free(&d);
    return st;
}

const int32_t *locks_dump_pos(const locks_dump *d, int32_t layer) {
    if (!d || !d->pos || layer < 0 || layer >= d->shape.n_layers) return NULL;
    return d->pos + (size_t)layer * ((size_t)d->shape.n_ctx + (size_t)d->shape.n_steps);
}

const float *locks_dump_k(const locks_dump *d, int32_t layer) {
    if (!d || !d->k || layer < 0 || layer >= d->shape.n_layers) return NULL;
    size_t n_tok = (size_t)d->shape.n_ctx + (size_t)d->shape.n_steps;
    return d->k + (size_t)layer * n_tok * (size_t)d->shape.n_kv_heads * (size_t)d->shape.head_dim;
}

const float *locks_dump_v(const locks_dump *d, int32_t layer) {
    if (!d || !d->v || layer < 0 || layer >= d->shape.n_layers) return NULL;
    size_t n_tok = (size_t)d->shape.n_ctx + (size_t)d->shape.n_steps;
    return d->v + (size_t)layer * n_tok * (size_t)d->shape.n_kv_heads * (size_t)d->shape.head_dim;
}

const float *locks_dump_q(const locks_dump *d, int32_t layer, int32_t step) {
    if (!d || !d->q || layer < 0 || layer >= d->shape.n_layers || step < 0 ||
        step >= d->shape.n_steps)
        return NULL;
    size_t per = (size_t)d->shape.n_q_heads * (size_t)d->shape.head_dim;
    return d->q + ((size_t)layer * (size_t)d->shape.n_steps + (size_t)step) * per;
}

const float *locks_dump_q_obs(const locks_dump *d, int32_t layer) {
    if (!d || !d->q_obs || layer < 0 || layer >= d->shape.n_layers) return NULL;
    return d->q_obs + (size_t)layer * (size_t)d->shape.n_obs * (size_t)d->shape.n_q_heads * (size_t)d->shape.head_dim;
}
