/*
 * test_gguf.c — the GGUF reader and the quantized matmul kernels, on files built here.
 *
 *  1. A small valid GGUF (every metadata type, a string array, F32/F16/BF16/Q8_0/Q4_0/
 *     Q4_1 tensors of random values, custom alignment) parses back exactly; dequantized
 *     rows equal a float64 reference of the block formula.
 *  2. matmul on random quantized weights and activations against float64 dots of the
 *     dequantized weights: exact mode (fp32 activations) to float rounding, int8 mode to
 *     the activation-quantization bound; one vector and a batch; inline and 2 threads;
 *     with each kernel set (AVX-VNNI, AVX2, portable). Activation quantization exactly
 *     equals its formula in each kernel set.
 *  3. Bad input never crashes and never reads out of bounds (the buffer is allocated to
 *     its exact size, so ASan sees any overread): every truncation, lying counts and
 *     lengths, offsets past the end, misalignment, bad alignment, unsupported types,
 *     bad dims, and random byte corruption.
 */
#include "test_util.h"
#include "gguf_buf.h"

#include "model/gguf.h"
#include "model/matmul.h"
#include "pool.h"
#include "util.h"
#include "vmath.h"

/* ================================================================================ */
/* A tiny GGUF writer                                                               */
/* ================================================================================ */

/* (buf, put, put_u32, put_u64, put_str: tests/gguf_buf.h) */
static void pad_to(buf *b, size_t align) {
    while (b->n % align) {
        uint8_t z = 0;
        put(b, &z, 1);
    }
}

#define N_T 6
static const uint32_t t_type[N_T] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16,
                                     GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1};
static const char *const t_name[N_T] = {"w.f32", "w.f16", "w.bf16", "w.q8_0", "w.q4_0", "w.q4_1"};
#define ROWS 5
#define COLS 96

/* One row of cols random values of a type (cols a multiple of 32): appends the bytes
 * and writes the float64 values they stand for. */
static void random_row(uint32_t type, int cols, buf *out, double *x0) {
    for (int b = 0; b < cols / 32; b++) {
        double *x = x0 + b * 32;
        if (type == GGML_TYPE_F32) {
            for (int j = 0; j < 32; j++) {
                float f = (float)tu_normal();
                put(out, &f, 4);
                x[j] = f;
            }
        } else if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) {
            for (int j = 0; j < 32; j++) {
                float f = (float)tu_normal();
                uint16_t h = type == GGML_TYPE_F16 ? locks_f32_to_f16(f) : locks_f32_to_bf16(f);
                put(out, &h, 2);
                x[j] = type == GGML_TYPE_F16 ? locks_f16_to_f32(h) : locks_bf16_to_f32(h);
            }
        } else {
            uint16_t dh = locks_f32_to_f16((float)(0.01 + 0.05 * tu_uniform()));
            double d = locks_f16_to_f32(dh);
            put(out, &dh, 2);
            if (type == GGML_TYPE_Q8_0) {
                for (int j = 0; j < 32; j++) {
                    int8_t q = (int8_t)tu_int(-128, 127);
                    put(out, &q, 1);
                    x[j] = d * q;
                }
                continue;
            }
            double m = 0.0;
            if (type == GGML_TYPE_Q4_1) {
                uint16_t mh = locks_f32_to_f16((float)(-0.3 * tu_uniform()));
                m = locks_f16_to_f32(mh);
                put(out, &mh, 2);
            }
            for (int j = 0; j < 16; j++) {
                int lo = tu_int(0, 15), hi = tu_int(0, 15);
                uint8_t byte = (uint8_t)(lo | hi << 4);
                put(out, &byte, 1);
                if (type == GGML_TYPE_Q4_0) {
                    x[j] = d * (lo - 8);
                    x[j + 16] = d * (hi - 8);
                } else {
                    x[j] = d * lo + m;
                    x[j + 16] = d * hi + m;
                }
            }
        }
    }
}

static void random_tensor(uint32_t type, buf *out, double *ref) {
    for (int r = 0; r < ROWS; r++) random_row(type, COLS, out, ref + r * COLS);
}

/* The valid test file; ref[N_T][ROWS * COLS] the tensors' values. Offsets of a few
 * fields are returned for targeted corruption. */
typedef struct {
    size_t off_n_tensors, off_n_kv, off_first_key_len, off_arr_count, off_tensor0_ndims,
        off_tensor0_type, off_tensor0_offset, off_align_val, off_tensor0_ne0;
} layout;

static buf build_file(double ref[N_T][ROWS * COLS], layout *lay) {
    const uint32_t align = 64;
    buf b = {0};
    put_u32(&b, 0x46554747u);
    put_u32(&b, 3);
    lay->off_n_tensors = b.n;
    put_u64(&b, N_T);
    lay->off_n_kv = b.n;
    put_u64(&b, 8);
    /* metadata */
    lay->off_first_key_len = b.n;
    put_str(&b, "general.architecture");
    put_u32(&b, GGUF_VAL_STRING);
    put_str(&b, "llama");
    put_str(&b, "general.alignment");
    put_u32(&b, GGUF_VAL_U32);
    lay->off_align_val = b.n;
    put_u32(&b, align);
    put_str(&b, "test.i8");
    put_u32(&b, GGUF_VAL_I8);
    int8_t i8 = -5;
    put(&b, &i8, 1);
    put_str(&b, "test.f32");
    put_u32(&b, GGUF_VAL_F32);
    float f = 0.25f;
    put(&b, &f, 4);
    put_str(&b, "test.u64");
    put_u32(&b, GGUF_VAL_U64);
    put_u64(&b, 123456789u);
    put_str(&b, "test.bool");
    put_u32(&b, GGUF_VAL_BOOL);
    uint8_t one = 1;
    put(&b, &one, 1);
    put_str(&b, "test.strs");
    put_u32(&b, GGUF_VAL_ARRAY);
    put_u32(&b, GGUF_VAL_STRING);
    lay->off_arr_count = b.n;
    put_u64(&b, 3);
    put_str(&b, "alpha");
    put_str(&b, "");
    put_str(&b, "g\xc4\xa0mma");
    put_str(&b, "test.i32s");
    put_u32(&b, GGUF_VAL_ARRAY);
    put_u32(&b, GGUF_VAL_I32);
    put_u64(&b, 4);
    for (int32_t i = 0; i < 4; i++) {
        int32_t v = i * 7 - 3;
        put(&b, &v, 4);
    }
    /* tensor infos; data laid out after, each aligned */
    buf data = {0};
    for (int i = 0; i < N_T; i++) {
        if (i == 0) lay->off_tensor0_ndims = b.n + 8 + strlen(t_name[0]);
        put_str(&b, t_name[i]);
        put_u32(&b, 2);
        if (i == 0) lay->off_tensor0_ne0 = b.n;
        put_u64(&b, COLS);
        put_u64(&b, ROWS);
        if (i == 0) lay->off_tensor0_type = b.n;
        put_u32(&b, t_type[i]);
        pad_to(&data, align);
        if (i == 0) lay->off_tensor0_offset = b.n;
        put_u64(&b, data.n);
        random_tensor(t_type[i], &data, ref[i]);
    }
    pad_to(&b, align);
    put(&b, data.p, data.n);
    free(data.p);
    return b;
}

/* Opens a private exact-size copy (so ASan catches overreads). */
static gguf *open_copy(const uint8_t *p, size_t n, uint8_t **copy, locks_status *st) {
    *copy = malloc(n ? n : 1);
    if (n) memcpy(*copy, p, n);
    return gguf_open_buffer(*copy, n, st);
}

/* ================================================================================ */
/* 1. valid file                                                                    */
/* ================================================================================ */

static void test_valid(const buf *b, double ref[N_T][ROWS * COLS]) {
    uint8_t *copy;
    locks_status st;
    gguf *g = open_copy(b->p, b->n, &copy, &st);
    test_cond(g && st == LOCKS_OK, "valid file failed to open: %s", locks_status_str(st));
    if (!g) {
        free(copy);
        return;
    }
    test_cond(gguf_version(g) == 3 && gguf_n_kv(g) == 8 && gguf_n_tensors(g) == N_T, "header counts");
    const char *s;
    size_t len;
    test_cond(gguf_get_str(g, "general.architecture", &s, &len) == LOCKS_OK && len == 5 &&
                  !memcmp(s, "llama", 5), "string value");
    int32_t i32 = 0;
    uint32_t u32 = 0;
    float f = 0;
    int bl = 0;
    test_cond(gguf_get_i32(g, "test.i8", &i32) == LOCKS_OK && i32 == -5, "i8 -> i32: %d", i32);
    test_cond(gguf_get_u32(g, "test.i8", &u32) == LOCKS_ERR_FORMAT, "negative -> u32 refused");
    test_cond(gguf_get_u32(g, "test.u64", &u32) == LOCKS_OK && u32 == 123456789u, "u64 -> u32");
    test_cond(gguf_get_f32(g, "test.f32", &f) == LOCKS_OK && f == 0.25f, "f32");
    test_cond(gguf_get_f32(g, "general.architecture", &f) == LOCKS_ERR_FORMAT, "string is not f32");
    test_cond(gguf_get_bool(g, "test.bool", &bl) == LOCKS_OK && bl == 1, "bool");
    test_cond(gguf_get_u32(g, "test.absent", &u32) == LOCKS_ERR_INVALID_ARG, "absent key");
    char **strs;
    uint32_t *lens;
    uint64_t n;
    test_cond(gguf_get_arr_strs(g, "test.strs", &strs, &lens, &n) == LOCKS_OK && n == 3 &&
                  !strcmp(strs[0], "alpha") && lens[1] == 0 && !strcmp(strs[2], "g\xc4\xa0mma") &&
                  lens[2] == 6, "string array");
    if (n == 3) gguf_strs_free(strs, lens);
    gguf_val_type et;
    const void *data;
    test_cond(gguf_get_arr(g, "test.i32s", &et, &n, &data) == LOCKS_OK && et == GGUF_VAL_I32 && n == 4 &&
                  gguf_arr_i32(et, data, 3) == 18 && gguf_arr_f32(et, data, 0) == -3.0f, "i32 array");
    test_cond(gguf_get_arr_strs(g, "test.i32s", &strs, &lens, &n) == LOCKS_ERR_FORMAT, "i32 array is not strings");

    float row[COLS];
    for (int i = 0; i < N_T; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, t_name[i]);
        test_cond(t && t->type == t_type[i] && t->ne[0] == COLS && t->ne[1] == ROWS && t->n_dims == 2,
                  "tensor %s info", t_name[i]);
        if (!t) continue;
        test_cond(((uintptr_t)((const uint8_t *)t->data - copy)) % 64 == 0, "tensor %s aligned", t_name[i]);
        matmul_weight w = {t->data, t->type, ROWS, COLS, ggml_row_bytes(t->type, COLS), NULL};
        test_cond(w.row_bytes * ROWS == t->nbytes, "tensor %s size", t_name[i]);
        for (int r = 0; r < ROWS; r++) {
            matmul_row_f32(&w, r, row);
            char what[64];
            snprintf(what, sizeof what, "%s row %d", t_name[i], r);
            tu_close(what, row, ref[i] + r * COLS, COLS, 1e-6, 1e-6);
        }
    }
    test_cond(gguf_find_tensor(g, "w.none") == NULL, "absent tensor");
    gguf_close(g);
    free(copy);
}

/* ================================================================================ */
/* 2. matmul vs float64                                                             */
/* ================================================================================ */

static void test_matmul(locks_pool *pool) {
    enum { R = 70, C = 256, T = 5 };
    for (int ti = 0; ti < N_T; ti++) {
        uint32_t type = t_type[ti];
        buf wb = {0};
        double *wref = malloc(sizeof(double) * R * C);
        for (int r = 0; r < R; r++) random_row(type, C, &wb, wref + (size_t)r * C);
        matmul_weight w = {wb.p, (ggml_type)type, R, C, ggml_row_bytes((ggml_type)type, C), NULL};
        float *x = malloc(sizeof(float) * T * C);
        tu_fill_normal(x, (size_t)T * C, 1.0);
        x[7] = 9.0f; /* an outlier, as real activations have */
        double *yref = malloc(sizeof(double) * T * R);
        double amax_dot = 0.0;
        for (int t = 0; t < T; t++)
            for (int r = 0; r < R; r++) {
                double s = 0.0, sa = 0.0;
                for (int c = 0; c < C; c++) {
                    s += wref[(size_t)r * C + c] * (double)x[(size_t)t * C + c];
                    sa += fabs(wref[(size_t)r * C + c] * (double)x[(size_t)t * C + c]);
                }
                yref[t * R + r] = s;
                if (sa > amax_dot) amax_dot = sa;
            }
        float *y = malloc(sizeof(float) * T * R);
        matmul_q8 *xq = malloc(sizeof(matmul_q8) * T * (C / 32));
        for (int mode = 0; mode < 2; mode++) {
            for (int n = 1; n <= T; n += T - 1) {
                matmul_act a = {x, NULL, n, C};
                if (mode == 1 && matmul_wants_q8((ggml_type)type)) {
                    matmul_quantize(x, n, C, xq);
                    a.xq = xq;
                }
                memset(y, 0, sizeof(float) * T * R);
                matmul(pool, &w, &a, y, R);
                char what[96];
                snprintf(what, sizeof what, "matmul %s %s n=%d %s", ggml_type_name(type),
                         a.xq ? "int8-act" : "fp32-act", n, pool ? "pool" : "inline");
                /* fp32: rounding of C-term sums; int8 activations: each x off by <= d/2 =
                 * amax/254 per block, bounded by sum |w| * amax / 254 */
                double atol = a.xq ? amax_dot * 0.02 : 1e-5 * amax_dot;
                tu_close(what, y, yref, (size_t)n * R, atol, 0.0);
            }
        }
        free(wb.p);
        free(wref);
        free(x);
        free(yref);
        free(y);
        free(xq);
    }
}

/* ================================================================================ */
/* 3. bad input                                                                     */
/* ================================================================================ */

static locks_status open_status(const buf *b) {
    uint8_t *copy;
    locks_status st;
    gguf *g = open_copy(b->p, b->n, &copy, &st);
    gguf_close(g);
    free(copy);
    return st;
}

static void patch_u64(buf *b, size_t off, uint64_t v) { memcpy(b->p + off, &v, 8); }
static void patch_u32(buf *b, size_t off, uint32_t v) { memcpy(b->p + off, &v, 4); }

static void expect_bad(const buf *good, size_t off, int is64, uint64_t v, locks_status want, const char *what) {
    buf b = {malloc(good->n), good->n, good->n};
    memcpy(b.p, good->p, good->n);
    if (is64) patch_u64(&b, off, v);
    else patch_u32(&b, off, (uint32_t)v);
    locks_status st = open_status(&b);
    test_cond(st == want, "%s: got '%s', want '%s'", what, locks_status_str(st), locks_status_str(want));
    free(b.p);
}

static void test_bad(const buf *good, const layout *lay) {
    /* every truncation */
    int trunc_bad = 0;
    for (size_t n = 0; n < good->n; n++) {
        buf b = {good->p, n, n};
        locks_status st = open_status(&b);
        if (st != LOCKS_ERR_FORMAT) {
            if (trunc_bad++ < 3) fprintf(stderr, "  truncated to %zu: %s\n", n, locks_status_str(st));
        }
    }
    test_cond(trunc_bad == 0, "%d truncations did not give LOCKS_ERR_FORMAT", trunc_bad);

    expect_bad(good, 0, 0, 0x46554746u, LOCKS_ERR_FORMAT, "bad magic");
    expect_bad(good, 4, 0, 1, LOCKS_ERR_FORMAT, "version 1");
    expect_bad(good, 4, 0, 99, LOCKS_ERR_FORMAT, "version 99");
    expect_bad(good, lay->off_n_kv, 1, UINT64_MAX, LOCKS_ERR_FORMAT, "huge n_kv");
    expect_bad(good, lay->off_n_kv, 1, 9, LOCKS_ERR_FORMAT, "n_kv one too many");
    expect_bad(good, lay->off_n_tensors, 1, UINT64_C(1) << 60, LOCKS_ERR_FORMAT, "huge n_tensors");
    expect_bad(good, lay->off_first_key_len, 1, UINT64_MAX - 3, LOCKS_ERR_FORMAT, "huge key length");
    expect_bad(good, lay->off_first_key_len, 1, good->n, LOCKS_ERR_FORMAT, "key length = file size");
    expect_bad(good, lay->off_arr_count, 1, UINT64_MAX / 2, LOCKS_ERR_FORMAT, "huge array count");
    expect_bad(good, lay->off_arr_count, 1, 1000, LOCKS_ERR_FORMAT, "array count past the end");
    expect_bad(good, lay->off_align_val, 0, 3, LOCKS_ERR_FORMAT, "alignment 3");
    expect_bad(good, lay->off_align_val, 0, 0, LOCKS_ERR_FORMAT, "alignment 0");
    expect_bad(good, lay->off_tensor0_ndims, 0, 5, LOCKS_ERR_FORMAT, "n_dims 5");
    expect_bad(good, lay->off_tensor0_ndims, 0, 0, LOCKS_ERR_FORMAT, "n_dims 0");
    expect_bad(good, lay->off_tensor0_ne0, 1, 0, LOCKS_ERR_FORMAT, "ne0 = 0");
    expect_bad(good, lay->off_tensor0_ne0, 1, UINT64_C(1) << 39, LOCKS_ERR_FORMAT, "ne0 = 2^39 (past the end)");
    expect_bad(good, lay->off_tensor0_ne0, 1, UINT64_MAX, LOCKS_ERR_FORMAT, "ne0 = 2^64 - 1");
    expect_bad(good, lay->off_tensor0_type, 0, 16, LOCKS_ERR_UNSUPPORTED, "IQ2_XXS tensor");
    expect_bad(good, lay->off_tensor0_type, 0, 14, LOCKS_ERR_FORMAT, "Q6_K tensor of a partial 256 block");
    expect_bad(good, lay->off_tensor0_type, 0, 1000, LOCKS_ERR_UNSUPPORTED, "type 1000");
    { /* a Q8_0 tensor of 95 columns: not whole blocks */
        buf b = {malloc(good->n), good->n, good->n};
        memcpy(b.p, good->p, good->n);
        patch_u32(&b, lay->off_tensor0_type, GGML_TYPE_Q8_0);
        patch_u64(&b, lay->off_tensor0_ne0, 95);
        locks_status st = open_status(&b);
        test_cond(st == LOCKS_ERR_FORMAT, "Q8_0 with ne0 = 95: %s", locks_status_str(st));
        free(b.p);
    }
    expect_bad(good, lay->off_tensor0_offset, 1, 32, LOCKS_ERR_FORMAT, "misaligned offset");
    expect_bad(good, lay->off_tensor0_offset, 1, UINT64_MAX - 63, LOCKS_ERR_FORMAT, "offset 2^64 - 64");
    expect_bad(good, lay->off_tensor0_offset, 1, good->n, LOCKS_ERR_FORMAT, "offset past the end");

    /* random corruption: any status, no crash, no overread (ASan) */
    int ok = 0;
    for (int it = 0; it < 3000; it++) {
        buf b = {malloc(good->n), good->n, good->n};
        memcpy(b.p, good->p, good->n);
        int flips = tu_int(1, 4);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)tu_int(0, (int32_t)(lay->off_tensor0_offset + 8)); /* the header */
            b.p[at] = (uint8_t)tu_int(0, 255);
        }
        uint8_t *copy;
        locks_status st;
        gguf *g = open_copy(b.p, b.n, &copy, &st);
        if (g) { /* whatever parsed must be readable end to end */
            ok++;
            for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
                const gguf_tensor *t = gguf_tensor_at(g, i);
                volatile uint8_t sink = 0;
                if (t->nbytes) sink ^= ((const uint8_t *)t->data)[t->nbytes - 1];
                (void)sink;
            }
            for (int64_t i = 0; i < gguf_n_kv(g); i++) {
                size_t len;
                const char *k = gguf_key(g, i, &len);
                if (len) test_cond(k[len - 1] || 1, "key readable");
            }
        }
        gguf_close(g);
        free(copy);
        free(b.p);
    }
    printf("random corruption: %d of 3000 still parsed (all without overreads)\n", ok);
}

/* matmul_quantize (AVX2 or portable, whichever runs) against the formula: d = amax / 127,
 * q = round-half-even(x / d) computed as x * (1 / d), ds = d * sum q. */
static void test_quantize(void) {
    enum { NB = 40 };
    float x[NB * 32];
    tu_fill_normal(x, NB * 32, 2.0);
    x[5] = 0.5f * 127.0f / 127.0f; /* ties and exact values */
    for (int j = 32; j < 64; j++) x[j] = 0.0f; /* an all-zero block: d = 0, q = 0 */
    x[64] = -300.0f;                          /* an outlier block */
    matmul_q8 q[NB];
    matmul_quantize(x, 2, NB * 16, q); /* 2 rows of 20 blocks: same as 40 blocks */
    int bad = 0;
    for (int b = 0; b < NB; b++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            int32_t r = (int32_t)lrintf(x[b * 32 + j] * id);
            sum += r;
            if (q[b].q[j] != r && bad++ < 4)
                fprintf(stderr, "  block %d[%d]: q %d, want %d\n", b, j, q[b].q[j], r);
        }
        if ((q[b].d != d || q[b].ds != d * (float)sum) && bad++ < 4)
            fprintf(stderr, "  block %d: d %g ds %g, want %g %g\n", b, (double)q[b].d, (double)q[b].ds, (double)d,
                    (double)(d * (float)sum));
    }
    test_cond(bad == 0, "matmul_quantize: %d mismatches", bad);
}

int main(void) {
    tu_seed("test_gguf");
    matmul_init_tables();
    /* every kernel set this CPU has: 1 = best (AVX-VNNI or AVX2), 2 = AVX2 without
     * VNNI, 0 = portable C */
    static const int simd[3] = {1, 2, 0};
    static const char *const simd_name[3] = {"best", "avx2", "portable"};
    for (int i = 0; i < 3; i++) {
        locks_simd_enable(simd[i]);
        printf("kernels: %s (avx2 %d, avx-vnni %d)\n", simd_name[i], locks_have_avx2(), locks_have_avxvnni());
        fflush(stdout);
        test_quantize();
        test_matmul(NULL);
    }
    locks_simd_enable(1);
    static double ref[N_T][ROWS * COLS];
    layout lay = {0};
    buf good = build_file(ref, &lay);
    test_valid(&good, ref);
    locks_pool *pool = locks_pool_init(2);
    test_cond(pool != NULL, "pool");
    if (pool) test_matmul(pool);
    locks_pool_free(pool);
    test_bad(&good, &lay);
    free(good.p);
    return test_report("test_gguf");
}
