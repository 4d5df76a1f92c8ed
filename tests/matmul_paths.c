/*
 * matmul_paths.c — every weight type's product on one forced kernel path, against a
 * float64 reference. `test_matmul_paths ISA [model]`, ISA one of portable, avx2, avx512
 * (locks_cpu_set_isa); ctest runs each path as its own entry (test_matmul_paths_ISA)
 * and exits 77 (skipped) when this CPU lacks it.
 *
 *  - random weights of every type (random bytes, finite random fp16 scales, so random
 *    six-bit K-quant scales and mins), column counts whose block count leaves every
 *    remainder of the kernels' 8-block chunks, 37 rows (tails of the 4-row tiles and the
 *    32-row tasks), batches of 1..9 tokens (tails of the 4-token tiles) and 37 (the
 *    AVX-512 prefill path), inline and on a pool of 2; matmul_n (several products as
 *    one pool job) bit for bit as matmul;
 *  - exactness across batch sizes: n = 1..9, 37, 64 and 130 tokens in one product give
 *    each token's outputs bit for bit as that token alone (the verify pass of
 *    speculative decoding must reproduce dense decoding), every type, random weights
 *    and (with `model`) the first and last rows of the models' tensors;
 *  - avx512: the prefill path (rows decoded once per group of token tiles) bit for bit
 *    as the per-4-token tiles, every block type, 8 to 130 tokens, ragged row ranges,
 *    random weights and (with `model`) Gemma 3's tensors;
 *  - avx512: Q4_1 and Q8_0 repacked by 16 rows (matmul_pack) through all of the above
 *    (float64, matmul_n, across batch sizes; rows in part groups), matmul_row_exact bit
 *    for bit as matmul, and SmolLM2's Q4_1 and Q8_0 tensors so;
 *  - with `model`: the first and last rows of a tensor of every type in the two GGUFs
 *    (SmolLM2 Q4_1 / Q8_0, Gemma 3 Q5_0 / Q8_0 / Q4_K / Q6_K), and the whole output
 *    matrix of each (Gemma's 262,144 rows: the one-row-at-a-time streaming path).
 * The reference multiplies the dequantized weights (matmul_row_f32, checked against the
 * gguf package in test_quant) with the activations the kernel sees: the int8 blocks
 * dequantized (d_x q_x) for block types, fp32 x for float types. The kernels' integer
 * sums are exact, so the only error is fp32 rounding: |y - ref| <= 2e-6 sum |w_j x_j|.
 */
#include "test_util.h"
#include "test_model_util.h"

#include "model/gguf.h"
#include "model/matmul.h"
#include "model/quant.h"
#include "pool.h"
#include "util.h"
#include "vmath.h"

#define TMAX 37

static const ggml_type TYPES[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                  GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
                                  GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16};
#define N_TYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

static int is_kquant(ggml_type t) { return t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K; }

static void set_f16(uint8_t *p, float v) {
    uint16_t h = locks_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* rows x cols random weights: random bytes, then finite scales where the type has them. */
static uint8_t *random_weight(ggml_type type, int32_t rows, int32_t cols) {
    size_t rb = ggml_row_bytes(type, cols), n = (size_t)rows * rb;
    uint8_t *w = malloc(n);
    SETUP(w);
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)tu_next();
    if (type == GGML_TYPE_F32) {
        for (size_t i = 0; i < n / 4; i++) {
            float v = (float)tu_normal();
            memcpy(w + 4 * i, &v, 4);
        }
        return w;
    }
    if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) {
        for (size_t i = 0; i < n / 2; i++) {
            float v = (float)tu_normal();
            uint16_t h;
            if (type == GGML_TYPE_F16) {
                h = locks_f32_to_f16(v);
            } else {
                uint32_t u;
                memcpy(&u, &v, 4);
                h = (uint16_t)(u >> 16);
            }
            memcpy(w + 2 * i, &h, 2);
        }
        return w;
    }
    size_t bb = quant_is_ext(type) ? quant_block_bytes(type) : type == GGML_TYPE_Q8_0 ? 34 : type == GGML_TYPE_Q4_0 ? 18 : 20;
    for (size_t b = 0; b < n / bb; b++) {
        uint8_t *blk = w + b * bb;
        float d = (float)(0.002 + 0.05 * tu_uniform()) * (tu_next() & 1 ? 1.0f : -1.0f);
        float m = (float)(0.05 * tu_uniform()) - 0.025f;
        if (type == GGML_TYPE_Q6_K) {
            set_f16(blk + 208, d);
            continue;
        }
        set_f16(blk, d);
        if (type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1 || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K)
            set_f16(blk + 2, type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K ? fabsf(m) : m);
    }
    return w;
}

/* y = W x on the current path for the n tokens of x, checked against float64. */
static void check_product(const char *what, const matmul_weight *w, const float *x, int32_t n, locks_pool *pool) {
    int32_t R = w->rows, C = w->cols, nb = C / GGML_QBLOCK;
    int q8 = matmul_wants_q8(w->type);
    matmul_q8 *xq = q8 ? malloc(sizeof(matmul_q8) * (size_t)n * nb) : NULL;
    double *xr = malloc(sizeof(double) * (size_t)n * C);
    float *row = malloc(sizeof(float) * C), *y = malloc(sizeof(float) * (size_t)n * R);
    double *ref = malloc(sizeof(double) * (size_t)n * R), *mag = malloc(sizeof(double) * (size_t)n * R);
    SETUP(xr && row && y && ref && mag && (xq || !q8));
    if (q8) {
        matmul_quantize(x, n, C, xq);
        for (int32_t t = 0; t < n; t++)
            for (int32_t c = 0; c < C; c++) {
                const matmul_q8 *b = &xq[(size_t)t * nb + c / 32];
                xr[(size_t)t * C + c] = (double)b->d * b->q[c % 32];
            }
    } else {
        for (size_t i = 0; i < (size_t)n * C; i++) xr[i] = x[i];
    }
    for (int32_t r = 0; r < R; r++) {
        matmul_row_f32(w, r, row);
        for (int32_t t = 0; t < n; t++) {
            double s = 0.0, sa = 0.0;
            for (int32_t c = 0; c < C; c++) {
                double p = (double)row[c] * xr[(size_t)t * C + c];
                s += p;
                sa += fabs(p);
            }
            ref[(size_t)t * R + r] = s;
            mag[(size_t)t * R + r] = sa;
        }
    }
    for (size_t i = 0; i < (size_t)n * R; i++) y[i] = NAN;
    matmul_act a = {x, xq, n, C};
    matmul(pool, w, &a, y, R);
    size_t bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < (size_t)n * R; i++) {
        double err = fabs((double)y[i] - ref[i]) / (mag[i] + 1e-30);
        if (!(err <= 2e-6)) {
            if (bad < 3)
                fprintf(stderr, "  %s: y[%zu] (token %zu, row %zu) = %.9g, want %.9g (sum|wx| %.3g)\n", what, i,
                        i / (size_t)R, i % (size_t)R, (double)y[i], ref[i], mag[i]);
            bad++;
        }
        if (err > worst || err != err) worst = err;
    }
    test_cond(bad == 0, "%s: %zu of %zu outputs off (worst error %.3g of sum |w x|)", what, bad, (size_t)n * R,
              worst);
    free(xq);
    free(xr);
    free(row);
    free(y);
    free(ref);
    free(mag);
}

/* matmul_n of 5 weights (37, 20 and 3 rows of w, so the task lists of different
 * products meet; 5 > 4 makes two jobs) gives each product bit for bit as matmul. */
static void check_products_n(const char *what, const matmul_weight *w, const float *x, int32_t n, locks_pool *pool) {
    const int32_t C = w->cols, nb = C / GGML_QBLOCK, rows[5] = {w->rows, 20, 3, w->rows, 20};
    const int q8 = matmul_wants_q8(w->type);
    matmul_q8 *xq = q8 ? malloc(sizeof(matmul_q8) * (size_t)n * nb) : NULL;
    float *y1 = malloc(sizeof(float) * (size_t)n * w->rows), *yn[5];
    matmul_weight ws[5];
    const matmul_weight *wp[5];
    SETUP(y1 && (xq || !q8));
    if (q8) matmul_quantize(x, n, C, xq);
    matmul_act a = {x, xq, n, C};
    for (int i = 0; i < 5; i++) {
        ws[i] = *w;
        ws[i].rows = rows[i];
        wp[i] = &ws[i];
        yn[i] = malloc(sizeof(float) * (size_t)n * rows[i]);
        SETUP(yn[i]);
        for (size_t e = 0; e < (size_t)n * rows[i]; e++) yn[i][e] = NAN;
    }
    matmul_n(pool, wp, 5, &a, yn);
    size_t bad = 0;
    for (int i = 0; i < 5; i++) {
        matmul(pool, &ws[i], &a, y1, rows[i]);
        for (size_t e = 0; e < (size_t)n * rows[i]; e++) bad += memcmp(&y1[e], &yn[i][e], sizeof(float)) != 0;
        free(yn[i]);
    }
    test_cond(bad == 0, "%s: matmul_n differs from matmul in %zu outputs", what, bad);
    free(xq);
    free(y1);
}

/* On the avx512 path, a Q4_1 weight repacked by 16 rows (matmul_pack): 1 and w->packed
 * set (checked: the packed kernels must not be skipped silently), else 0. */
static int pack_for_path(matmul_weight *w, const char *isa) {
    if (strcmp(isa, "avx512") != 0 || (w->type != GGML_TYPE_Q4_1 && w->type != GGML_TYPE_Q8_0)) return 0;
    test_cond(matmul_pack(w) == 0 && w->packed != NULL, "avx512 %s %dx%d: matmul_pack packs it", ggml_type_name(w->type),
              w->rows, w->cols);
    return w->packed != NULL;
}

/* matmul_row_exact (the drafts' head rescoring single rows) gives every row of a
 * product of n tokens bit for bit as matmul does. */
static void check_row_exact(const char *what, const matmul_weight *w, int32_t n, locks_pool *pool) {
    const int32_t C = w->cols, nb = C / GGML_QBLOCK, R = w->rows;
    float *x = malloc(sizeof(float) * (size_t)n * C), *y = malloc(sizeof(float) * (size_t)n * R), one[8];
    matmul_q8 *xq = malloc(sizeof(matmul_q8) * (size_t)n * nb);
    SETUP(x && y && xq && n <= 8);
    tu_fill_normal(x, (size_t)n * C, 1.0);
    matmul_quantize(x, n, C, xq);
    matmul_act a = {x, xq, n, C};
    matmul(pool, w, &a, y, R);
    size_t bad = 0;
    for (int32_t r = 0; r < R; r++) {
        matmul_row_exact(w, &a, r, one, 1);
        for (int32_t t = 0; t < n; t++) bad += memcmp(&one[t], &y[(size_t)t * R + r], sizeof(float)) != 0;
    }
    test_cond(bad == 0, "%s n=%d: matmul_row_exact differs from matmul in %zu of %zu outputs", what, n, bad,
              (size_t)n * R);
    /* and matmul_row_f32 (embeddings) reads the packed copy as the file's rows */
    matmul_weight wf = *w;
    wf.packed = NULL;
    float *r1 = malloc(sizeof(float) * (size_t)C), *r2 = malloc(sizeof(float) * (size_t)C);
    SETUP(r1 && r2);
    size_t bad_row = 0;
    for (int32_t r = 0; r < R; r++) {
        matmul_row_f32(w, r, r1);
        matmul_row_f32(&wf, r, r2);
        bad_row += memcmp(r1, r2, sizeof(float) * (size_t)C) != 0;
    }
    test_cond(bad_row == 0, "%s: matmul_row_f32 from the packed copy differs in %zu of %d rows", what, bad_row, R);
    free(r1);
    free(r2);
    free(x);
    free(y);
    free(xq);
}

static void test_random(locks_pool *pool, const char *isa) {
    /* 32-element types: 8, 9, ..., 15 blocks and 18 (SmolLM2's 576); K-quants 1-3 super-blocks */
    static const int32_t cols_b[] = {256, 288, 320, 352, 384, 416, 448, 480, 576, 32};
    static const int32_t cols_k[] = {256, 512, 768};
    static const int32_t ns[] = {1, 4, 5, 9, 37};
    enum { R = 37 };
    float *x = malloc(sizeof(float) * TMAX * 768);
    SETUP(x);
    for (int ti = 0; ti < N_TYPES; ti++) {
        ggml_type type = TYPES[ti];
        int kq = is_kquant(type);
        int n_cols = kq ? 3 : 10;
        for (int ci = 0; ci < n_cols; ci++) {
            int32_t C = kq ? cols_k[ci] : cols_b[ci];
            uint8_t *wd = random_weight(type, R, C);
            matmul_weight w = {wd, type, R, C, ggml_row_bytes(type, C), NULL};
            for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                tu_fill_normal(x, (size_t)ns[k] * C, 1.0);
                x[3] = 9.0f; /* an outlier, as real activations have */
                char what[96];
                snprintf(what, sizeof what, "%s %s %dx%d n=%d%s", isa, ggml_type_name(type), R, C, ns[k],
                         pool ? " pool" : "");
                check_product(what, &w, x, ns[k], pool);
                check_products_n(what, &w, x, ns[k], pool);
            }
            if (pack_for_path(&w, isa)) { /* the same through the 16-row packed kernel */
                for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
                    tu_fill_normal(x, (size_t)ns[k] * C, 1.0);
                    x[3] = 9.0f;
                    char what[96];
                    snprintf(what, sizeof what, "%s packed %s %dx%d n=%d%s", isa, ggml_type_name(type), R, C, ns[k],
                             pool ? " pool" : "");
                    check_product(what, &w, x, ns[k], pool);
                    check_products_n(what, &w, x, ns[k], pool);
                    if (ns[k] <= 8) check_row_exact(what, &w, ns[k], pool);
                }
                matmul_pack_free(&w);
            }
            free(wd);
        }
    }
    free(x);
}

/* Exactness across batch sizes: the product of n tokens gives every token's outputs
 * bit for bit as the product of that token alone (speculation's verify pass must give
 * dense decoding's logits), n = 1..9, 37, 64, 130, on the current path and pool. */
static void check_tokens_alone(const char *what, const matmul_weight *w, locks_pool *pool) {
    static const int32_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 37, 64, 130};
    enum { NMAX = 130 };
    const int32_t C = w->cols, nb = C / GGML_QBLOCK, R = w->rows;
    const int q8 = matmul_wants_q8(w->type);
    float *x = malloc(sizeof(float) * NMAX * (size_t)C);
    matmul_q8 *xq = q8 ? malloc(sizeof(matmul_q8) * NMAX * (size_t)nb) : NULL;
    float *y1 = malloc(sizeof(float) * NMAX * (size_t)R), *yn = malloc(sizeof(float) * NMAX * (size_t)R);
    SETUP(x && y1 && yn && (xq || !q8));
    tu_fill_normal(x, (size_t)NMAX * C, 1.0);
    x[7] = 8.5f; /* an outlier, as real activations have */
    if (q8) matmul_quantize(x, NMAX, C, xq);
    for (int32_t t = 0; t < NMAX; t++) { /* each token alone */
        matmul_act a = {x + (size_t)t * C, q8 ? xq + (size_t)t * nb : NULL, 1, C};
        matmul(pool, w, &a, y1 + (size_t)t * R, R);
    }
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const int32_t n = ns[k], t0 = NMAX - n; /* the last n tokens: a fresh place for each */
        for (size_t i = 0; i < (size_t)n * R; i++) yn[i] = NAN;
        matmul_act a = {x + (size_t)t0 * C, q8 ? xq + (size_t)t0 * nb : NULL, n, C};
        matmul(pool, w, &a, yn, R);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < (size_t)n * R; i++)
            if (memcmp(&yn[i], &y1[(size_t)t0 * R + i], sizeof(float)) != 0 && bad++ == 0) first = i;
        test_cond(bad == 0, "%s n=%d: %zu of %zu outputs differ from the token alone (first: token %zu row %zu: %.9g vs %.9g)",
                  what, n, bad, (size_t)n * R, first / (size_t)R, first % (size_t)R, (double)yn[first],
                  (double)y1[(size_t)t0 * R + first]);
    }
    free(x);
    free(xq);
    free(y1);
    free(yn);
}

static void test_tokens_alone(locks_pool *pool, const char *isa) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        ggml_type type = TYPES[ti];
        /* 32-element types: 11 blocks (a 3-block last chunk) and 20 (Gemma 3's 640); K-quants 1 and 3 super-blocks */
        const int32_t cols[2] = {is_kquant(type) ? 256 : 352, is_kquant(type) ? 768 : 640};
        for (int ci = 0; ci < 2; ci++) {
            uint8_t *wd = random_weight(type, 37, cols[ci]);
            matmul_weight w = {wd, type, 37, cols[ci], ggml_row_bytes(type, cols[ci]), NULL};
            char what[96];
            snprintf(what, sizeof what, "%s %s 37x%d%s", isa, ggml_type_name(type), cols[ci], pool ? " pool" : "");
            check_tokens_alone(what, &w, pool);
            if (pack_for_path(&w, isa)) {
                snprintf(what, sizeof what, "%s packed %s 37x%d%s", isa, ggml_type_name(type), cols[ci], pool ? " pool" : "");
                check_tokens_alone(what, &w, pool);
                matmul_pack_free(&w);
            }
            free(wd);
        }
    }
}

/* On the AVX-512 kernels: rows [r0, r1) of W x for each n of ns, by the prefill path
 * (matmul_rows_avx512) and by the 4-token tiles alone, the same bit for bit (and the
 * rows outside [r0, r1) untouched by both). */
static void check_prefill_tiles(const char *what, const matmul_weight *w, int32_t r0, int32_t r1) {
    static const int32_t ns[] = {8, 11, 16, 37, 64, 130};
    const int32_t C = w->cols, nb = C / GGML_QBLOCK, R = w->rows, ldy = R + 3;
    const int32_t nmax = 130;
    float *x = malloc(sizeof(float) * (size_t)nmax * C);
    matmul_q8 *xq = malloc(sizeof(matmul_q8) * (size_t)nmax * nb);
    float *y0 = malloc(sizeof(float) * (size_t)nmax * ldy), *y1 = malloc(sizeof(float) * (size_t)nmax * ldy);
    SETUP(x && xq && y0 && y1);
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const int32_t n = ns[k];
        tu_fill_normal(x, (size_t)n * C, 1.0);
        x[5] = -7.0f;
        matmul_quantize(x, n, C, xq);
        for (size_t i = 0; i < (size_t)n * ldy; i++) y0[i] = y1[i] = NAN;
        matmul_act a = {x, xq, n, C};
        int ok = matmul_rows_avx512_tiles(w, &a, y0, ldy, r0, r1, 0) && matmul_rows_avx512_tiles(w, &a, y1, ldy, r0, r1, 1);
        size_t bad = 0, set = 0;
        for (size_t i = 0; i < (size_t)n * ldy; i++) {
            bad += memcmp(&y0[i], &y1[i], sizeof(float)) != 0;
            set += y1[i] == y1[i];
        }
        test_cond(ok && bad == 0 && set == (size_t)n * (size_t)(r1 - r0),
                  "%s rows [%d, %d) n=%d: prefill path vs 4-token tiles: %zu of %zu outputs differ, %zu set", what, r0,
                  r1, n, bad, (size_t)n * ldy, set);
    }
    free(x);
    free(xq);
    free(y0);
    free(y1);
}

static void test_prefill_random(void) {
    static const ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                      GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        ggml_type type = types[ti];
        /* 32-element types: 18 blocks (a 2-block last chunk) and 11 (3); K-quants 1 and 3 super-blocks */
        const int32_t cols[2] = {is_kquant(type) ? 256 : 576, is_kquant(type) ? 768 : 352};
        for (int ci = 0; ci < 2; ci++) {
            uint8_t *wd = random_weight(type, 23, cols[ci]);
            matmul_weight w = {wd, type, 23, cols[ci], ggml_row_bytes(type, cols[ci]), NULL};
            char what[64];
            snprintf(what, sizeof what, "avx512 %s 23x%d", ggml_type_name(type), cols[ci]);
            check_prefill_tiles(what, &w, 0, 23);
            check_prefill_tiles(what, &w, 2, 17);
            free(wd);
        }
    }
}

/* Rows [first, first + rows) of the named tensor as a weight. */
static int model_weight(const gguf *g, const char *name, int64_t first, int32_t rows, matmul_weight *w) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    if (!t) return 0;
    size_t rb = ggml_row_bytes(t->type, t->ne[0]);
    if (first < 0) first += t->ne[1];
    *w = (matmul_weight){(const uint8_t *)t->data + (size_t)first * rb, t->type, rows, (int32_t)t->ne[0], rb, NULL};
    return 1;
}

static void test_model(locks_pool *pool, const char *isa) {
    static const char *const smol[] = {"blk.0.attn_q.weight", "blk.3.ffn_down.weight", "token_embd.weight"};
    static const char *const gemma[] = {"blk.0.attn_q.weight",   "blk.0.attn_v.weight",  "blk.1.attn_v.weight",
                                        "blk.0.ffn_down.weight", "blk.1.ffn_down.weight", "blk.2.attn_output.weight",
                                        "token_embd.weight"};
    char path[1024];
    float *x = malloc(sizeof(float) * 20 * 2048);
    SETUP(x);
    for (int mi = 0; mi < 2; mi++) {
        int ok = mi == 0 ? tu_find_model(path, sizeof path) : tu_find_gemma3(path, sizeof path);
        SETUP(ok);
        locks_status st;
        gguf *g = gguf_open(path, &st);
        SETUP(g);
        const char *const *names = mi == 0 ? smol : gemma;
        int n_names = mi == 0 ? 3 : 7;
        int seen[64] = {0};
        for (int i = 0; i < n_names; i++)
            for (int end = 0; end < 2; end++) { /* the first 36 rows, and the last 36 */
                matmul_weight w;
                SETUP(model_weight(g, names[i], end ? -36 : 0, 36, &w));
                seen[w.type & 63] = 1;
                if (!strcmp(isa, "avx512") && matmul_wants_q8(w.type)) {
                    char what[128];
                    snprintf(what, sizeof what, "avx512 %s %s (%s) rows %s", mi ? "gemma3" : "smollm2", names[i],
                             ggml_type_name(w.type), end ? "last" : "first");
                    check_prefill_tiles(what, &w, 0, 35);
                }
                {
                    char what[128];
                    snprintf(what, sizeof what, "%s %s %s (%s) rows %s", isa, mi ? "gemma3" : "smollm2", names[i],
                             ggml_type_name(w.type), end ? "last" : "first");
                    check_tokens_alone(what, &w, pool);
                }
                for (int32_t n = 1; n <= 20; n += n == 1 ? 3 : 16) {
                    tu_fill_normal(x, (size_t)n * w.cols, 1.0);
                    char what[128];
                    snprintf(what, sizeof what, "%s %s %s (%s) rows %s n=%d", isa, mi ? "gemma3" : "smollm2", names[i],
                             ggml_type_name(w.type), end ? "last" : "first", n);
                    check_product(what, &w, x, n, pool);
                }
                if (pack_for_path(&w, isa)) { /* as the engine runs SmolLM2's layers here */
                    char what[128];
                    snprintf(what, sizeof what, "avx512 packed smollm2 %s (%s) rows %s", names[i],
                             ggml_type_name(w.type), end ? "last" : "first");
                    check_tokens_alone(what, &w, pool);
                    for (int32_t n = 1; n <= 20; n += n == 1 ? 4 : 15) {
                        tu_fill_normal(x, (size_t)n * w.cols, 1.0);
                        snprintf(what, sizeof what, "avx512 packed smollm2 %s (%s) rows %s n=%d", names[i],
                                 ggml_type_name(w.type), end ? "last" : "first", n);
                        check_product(what, &w, x, n, pool);
                    }
                    check_row_exact(what, &w, 1, pool);
                    check_row_exact(what, &w, 5, pool);
                    matmul_pack_free(&w);
                }
            }
        { /* the whole output matrix, one token: the kernels' path for weights too large for the cache */
            const gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
            SETUP(t);
            matmul_weight w;
            SETUP(model_weight(g, "token_embd.weight", 0, (int32_t)t->ne[1], &w));
            tu_fill_normal(x, (size_t)w.cols, 1.0);
            char what[128];
            snprintf(what, sizeof what, "%s %s token_embd.weight (%s) all %d rows n=1", isa, mi ? "gemma3" : "smollm2",
                     ggml_type_name(w.type), w.rows);
            check_product(what, &w, x, 1, pool);
        }
        if (mi == 0) { /* gguf_release (the engine's after repacking): the pages go, the bytes read back the same */
            const gguf_tensor *t = gguf_find_tensor(g, "blk.3.ffn_down.weight");
            SETUP(t);
            uint8_t *keep = malloc(t->nbytes);
            SETUP(keep);
            memcpy(keep, t->data, t->nbytes);
            gguf_release(g, t->data, t->nbytes);
            test_cond(memcmp(keep, t->data, t->nbytes) == 0, "smollm2 blk.3.ffn_down.weight: %zu bytes the same after gguf_release",
                      (size_t)t->nbytes);
            /* and on the same file read into a buffer (gguf_open_buffer): nothing is dropped */
            FILE *f = fopen(path, "rb");
            SETUP(f);
            const size_t size = gguf_file_size(g);
            uint8_t *fb = malloc(size);
            SETUP(fb && fread(fb, 1, size, f) == size);
            fclose(f);
            gguf *gb = gguf_open_buffer(fb, size, &st);
            SETUP(gb);
            const gguf_tensor *tb = gguf_find_tensor(gb, "blk.3.ffn_down.weight");
            SETUP(tb);
            gguf_release(gb, tb->data, tb->nbytes);
            test_cond(memcmp(keep, tb->data, tb->nbytes) == 0, "smollm2 in a buffer: gguf_release keeps its bytes");
            gguf_close(gb);
            free(fb);
            free(keep);
        }
        if (mi == 0) test_cond(seen[GGML_TYPE_Q4_1] && seen[GGML_TYPE_Q8_0], "SmolLM2 tensors: Q4_1 and Q8_0 seen");
        else
            test_cond(seen[GGML_TYPE_Q5_0] && seen[GGML_TYPE_Q8_0] && seen[GGML_TYPE_Q4_K] && seen[GGML_TYPE_Q6_K],
                      "Gemma 3 tensors: Q5_0, Q8_0, Q4_K and Q6_K seen");
        gguf_close(g);
    }
    free(x);
}

int main(int argc, char **argv) {
    locks_isa isa;
    if (argc < 2 || locks_isa_parse(argv[1], &isa) != 0 || isa == LOCKS_ISA_BEST) {
        fprintf(stderr, "usage: test_matmul_paths portable|avx2|avx512 [model]\n");
        return 2;
    }
    if (locks_cpu_set_isa(isa) != 0) {
        printf("test_matmul_paths: this CPU has no %s kernels: skipped\n", argv[1]);
        return 77;
    }
    tu_seed("test_matmul_paths");
    matmul_init_tables();
    test_cond(locks_cpu_isa() == isa, "path in use: %s, asked for %s", locks_isa_name(locks_cpu_isa()), argv[1]);
    locks_pool *pool = locks_pool_init(2);
    SETUP(pool);
    if (argc > 2 && !strcmp(argv[2], "model")) {
        test_model(pool, argv[1]);
    } else {
        test_random(NULL, argv[1]);
        test_random(pool, argv[1]);
        test_tokens_alone(NULL, argv[1]);
        test_tokens_alone(pool, argv[1]);
        if (isa == LOCKS_ISA_AVX512) test_prefill_random();
    }
    locks_pool_free(pool);
    return test_report("test_matmul_paths");
}
