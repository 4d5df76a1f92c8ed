/*
 * test_quant.c — the Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K weight types (src/model/quant.c).
 *
 *  1. Dequantization, block by block, against the PyPI `gguf` package's numpy
 *     dequantizer on random blocks (tests/data/quant_ref.bin, made by
 *     scripts/gen_quant_fixture.py), through quant_dequant_block and matmul_row_f32.
 *  2. Products against float64 on fresh random weights and activations: fp32 activations
 *     (exact mode), int8 activations (error bounded by the activation rounding), the
 *     SIMD kernels against the portable loops (same integer sums: only fp32 rounding),
 *     one vector and batches of every remainder mod 4, inline and on a pool.
 *  3. Scale checks: a NaN / Inf fp16 scale in any block is found, with its index.
 */
#include "test_util.h"

#include "model/gguf.h"
#include "model/matmul.h"
#include "pool.h"
#include "model/quant.h"
#include "util.h"

static const ggml_type TYPES[] = {GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
#define N_TYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

/* ================================================================================ */
/* 1. against the gguf package                                                      */
/* ================================================================================ */

static void test_fixture(void) {
    FILE *f = fopen("tests/data/quant_ref.bin", "rb");
    SETUP(f);
    int seen[N_TYPES] = {0};
    uint32_t hdr[4];
    while (fread(hdr, 4, 4, f) == 4) {
        ggml_type type = (ggml_type)hdr[0];
        uint32_t n = hdr[1], bb = hdr[2], be = hdr[3];
        test_cond(quant_is_ext(type) && quant_block_bytes(type) == bb && (uint32_t)quant_block_elems(type) == be,
                  "fixture type %u: layout %u B / %u elements", hdr[0], bb, be);
        if (!quant_is_ext(type)) break;
        for (int i = 0; i < N_TYPES; i++) seen[i] |= TYPES[i] == type;
        uint8_t *blocks = malloc((size_t)n * bb);
        float *ref = malloc(sizeof(float) * n * be);
        double *refd = malloc(sizeof(double) * n * be);
        float *got = malloc(sizeof(float) * n * be);
        SETUP(blocks && ref && refd && got);
        SETUP(fread(blocks, bb, n, f) == n && fread(ref, sizeof(float) * be, n, f) == n);
        for (size_t i = 0; i < (size_t)n * be; i++) refd[i] = ref[i];
        for (uint32_t b = 0; b < n; b++) quant_dequant_block(type, blocks + (size_t)b * bb, got + (size_t)b * be);
        char what[64];
        snprintf(what, sizeof what, "%s dequant vs gguf (%u blocks)", ggml_type_name(type), n);
        tu_close(what, got, refd, (size_t)n * be, 1e-6, 1e-6);
        /* the same blocks as the rows of a weight (4 blocks per row) through matmul_row_f32 */
        matmul_weight w = {blocks, type, (int32_t)(n / 4), (int32_t)(4 * be), ggml_row_bytes(type, 4 * be), NULL};
        for (int32_t r = 0; r < w.rows; r++) matmul_row_f32(&w, r, got + (size_t)r * w.cols);
        snprintf(what, sizeof what, "%s matmul_row_f32 vs gguf", ggml_type_name(type));
        tu_close(what, got, refd, (size_t)w.rows * w.cols, 1e-6, 1e-6);
        free(blocks);
        free(ref);
        free(refd);
        free(got);
    }
    fclose(f);
    for (int i = 0; i < N_TYPES; i++) test_cond(seen[i], "fixture has %s", ggml_type_name(TYPES[i]));
}

/* ================================================================================ */
/* 2. products vs float64                                                           */
/* ================================================================================ */

static void set_f16(uint8_t *p, float v) {
    uint16_t h = locks_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* rows x cols random weights of an ext type: random bytes, finite random scales. */
static uint8_t *random_weight(ggml_type type, int32_t rows, int32_t cols) {
    size_t bb = quant_block_bytes(type), nb = (size_t)rows * cols / quant_block_elems(type);
    uint8_t *w = malloc(nb * bb);
    SETUP(w);
    for (size_t i = 0; i < nb * bb; i++) w[i] = (uint8_t)tu_next();
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = w + b * bb;
        float d = (float)(0.002 + 0.05 * tu_uniform()) * (tu_next() & 1 ? 1.0f : -1.0f);
        float m = (float)(0.05 * tu_uniform());
        if (type == GGML_TYPE_Q6_K) {
            set_f16(blk + 208, d);
        } else {
            set_f16(blk, d);
            if (type != GGML_TYPE_Q5_0) set_f16(blk + 2, type == GGML_TYPE_Q5_1 ? m - 0.025f : m);
        }
    }
    return w;
}

static void test_products(locks_pool *pool) {
    enum { R = 70, TMAX = 9 };
    const int32_t cols_of[2] = {256, 768};
    const int32_t ns[] = {1, 2, 3, 4, 5, 9};
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int ci = 0; ci < 2; ci++) {
            ggml_type type = TYPES[ti];
            int32_t C = cols_of[ci];
            uint8_t *wd = random_weight(type, R, C);
            matmul_weight w = {wd, type, R, C, ggml_row_bytes(type, C), NULL};
            double *wref = malloc(sizeof(double) * R * C);
            float *row = malloc(sizeof(float) * C);
            float *x = malloc(sizeof(float) * TMAX * C);
            double *yref = malloc(sizeof(double) * TMAX * R);
            float *y = malloc(sizeof(float) * TMAX * R), *yc = malloc(sizeof(float) * TMAX * R);
            double *ycd = malloc(sizeof(double) * TMAX * R);
            matmul_q8 *xq = malloc(sizeof(matmul_q8) * TMAX * (C / 32));
            SETUP(wref && row && x && yref && y && yc && ycd && xq);
            for (int32_t r = 0; r < R; r++) {
                matmul_row_f32(&w, r, row);
                for (int32_t c = 0; c < C; c++) wref[(size_t)r * C + c] = row[c];
            }
            tu_fill_normal(x, (size_t)TMAX * C, 1.0);
            x[5] = -7.5f; /* an outlier, as real activations have */
            double amax_dot = 0.0;
            for (int t = 0; t < TMAX; t++)
                for (int32_t r = 0; r < R; r++) {
                    double s = 0.0, sa = 0.0;
                    for (int32_t c = 0; c < C; c++) {
                        double p = wref[(size_t)r * C + c] * (double)x[(size_t)t * C + c];
                        s += p;
                        sa += fabs(p);
                    }
                    yref[t * R + r] = s;
                    if (sa > amax_dot) amax_dot = sa;
                }
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                int32_t n = ns[k];
                char what[112];
                /* fp32 activations: only fp32 rounding */
                matmul_act a = {x, NULL, n, C};
                memset(y, 0, sizeof(float) * TMAX * R);
                matmul(pool, &w, &a, y, R);
                snprintf(what, sizeof what, "%s C=%d n=%d fp32-act %s", ggml_type_name(type), C, n, pool ? "pool" : "inline");
                tu_close(what, y, yref, (size_t)n * R, 1e-5 * amax_dot, 0.0);
                /* int8 activations: each x off by <= amax/254 per block */
                matmul_quantize(x, n, C, xq);
                a.xq = xq;
                memset(y, 0, sizeof(float) * TMAX * R);
                matmul(pool, &w, &a, y, R);
                snprintf(what, sizeof what, "%s C=%d n=%d int8-act %s", ggml_type_name(type), C, n, pool ? "pool" : "inline");
                tu_close(what, y, yref, (size_t)n * R, 0.02 * amax_dot, 0.0);
                /* the dispatched kernel (SIMD where the CPU has it) vs the portable loops */
                memset(yc, 0, sizeof(float) * TMAX * R);
                quant_rows_c(&w, &a, yc, R, 0, R);
                for (size_t i = 0; i < (size_t)n * R; i++) ycd[i] = yc[i];
                snprintf(what, sizeof what, "%s C=%d n=%d kernel vs portable", ggml_type_name(type), C, n);
                tu_close(what, y, ycd, (size_t)n * R, 1e-5 * amax_dot, 0.0);
            }
            free(wd);
            free(wref);
            free(row);
            free(x);
            free(yref);
            free(y);
            free(yc);
            free(ycd);
            free(xq);
        }
}

/* ================================================================================ */
/* 3. scale checks                                                                  */
/* ================================================================================ */

static void test_scales(void) {
    const ggml_type all[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
                             GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        ggml_type type = all[i];
        int32_t be = quant_is_ext(type) ? quant_block_elems(type) : 32;
        size_t bb = ggml_row_bytes(type, be), nb = 12;
        uint8_t *w = quant_is_ext(type) ? random_weight(type, 1, (int32_t)nb * be) : malloc(nb * bb);
        SETUP(w);
        if (!quant_is_ext(type))
            for (size_t b = 0; b < nb; b++) {
                for (size_t j = 0; j < bb; j++) w[b * bb + j] = (uint8_t)tu_next();
                set_f16(w + b * bb, 0.01f);
                if (type == GGML_TYPE_Q4_1) set_f16(w + b * bb + 2, -0.1f);
            }
        size_t bad = 99;
        test_cond(quant_check_scales(type, w, nb, &bad) == LOCKS_OK, "%s: finite scales pass", ggml_type_name(type));
        /* the last fp16 field of the block's header is d (Q6_K: at the end), dmin or m */
        size_t where = type == GGML_TYPE_Q6_K ? 208 : (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1 ||
                                                     type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K) ? 2 : 0;
        size_t blk = (size_t)tu_int(0, (int32_t)nb - 1);
        uint16_t h = tu_next() & 1 ? 0x7C00 : 0xFE01; /* +Inf or a NaN */
        memcpy(w + blk * bb + where, &h, 2);
        test_cond(quant_check_scales(type, w, nb, &bad) == LOCKS_ERR_FORMAT && bad == blk,
                  "%s: bad scale in block %zu found (got %zu)", ggml_type_name(type), blk, bad);
        free(w);
    }
}

int main(void) {
    tu_seed("test_quant");
    matmul_init_tables();
    test_fixture();
    test_products(NULL);
    locks_pool *pool = locks_pool_init(3);
    SETUP(pool);
    test_products(pool);
    locks_pool_free(pool);
    test_scales();
    return test_report("test_quant");
}
