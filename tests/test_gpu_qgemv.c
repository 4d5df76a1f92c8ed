/*
 * test_gpu_qgemv.c — the quantized-weight kernels of qgemv.cu (model_cuda.h, "quantized
 * weights") against the CPU engine: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K matrices of
 * random valid blocks (random bytes, finite random fp16 scales), and with a model at hand
 * the real tensors of SmolLM2 / Gemma 3 270M. For every matrix:
 *
 *  - lg_qmat_pack writes the layout the header states (blocks in row order, the fp16
 *    scales of Q4_0 / Q4_1 / Q8_0 / Q6_K moved to an array after them at a 256-byte
 *    boundary), within lg_qmat_bytes;
 *  - lg_op_q8_quantize of fp32, F16 and BF16 input gives matmul_quantize's int8 blocks
 *    exactly (q bytes, d and d * sum bits), round half to even included (a row of exact
 *    ties);
 *  - lg_op_qgemv on the CPU's int8 activations, n = 1..8, against quant_rows_c / matmul
 *    (the same integer sums, fp32 in another order: max |y - y_cpu| < 2e-5 of the batch
 *    row's scale) and a float64 product of the dequantized weights with the dequantized
 *    activations (L2 error < 1e-5 of the row's scale); every output written (y first NaN),
 *    nothing else (row gaps of ldy > rows, the rows from n on and a tail keep their
 *    poison), beta = 1 adding to a known y;
 *  - each output row the same bits whatever the batch: row t of every n-row product equals
 *    row t of the 8-row one and the 1-row product of that row alone;
 *  - lg_op_qdequant to F16 and BF16: every value the CPU's dequantized fp32 value
 *    (matmul_row_f32, quant_dequant_block for the K types) rounded to 16 bits, exact.
 * Then the size rules (lg_qtype_supported, lg_qmat_bytes) and the refused arguments.
 *
 * The scale of an output is max(|y|, sqrt(sum_c (w_c x_c)^2)) over the row of the batch:
 * fp32 sums in any order err in proportion to the second term, and it keeps a row whose
 * sum cancels by chance (one output row) from failing on rounding alone.
 *
 * Models: $LOCKS_MODEL / $LOCKS_GEMMA3_MODEL, else the files scripts/fetch-model.sh
 * leaves in $LOCKS_MODEL_DIR (default ~/.cache/locks); never fetched here (the GPU
 * machine may have no network): skipped with a note when absent. A seed is printed;
 * LOCKS_TEST_SEED=<n> replays it. Needs a GPU (label gpu).
 */
#include "test_util.h"

#include <unistd.h> /* access */

#include "cuda/locks_cuda.h"
#include "model/cuda/model_cuda.h"
#include "model/gguf.h"
#include "model/matmul.h"
#include "model/quant.h"
#include "util.h"

#define N_MAX LG_GEMV_MAX_N /* activation rows of every test matrix */
#define TAIL 64             /* poisoned floats after a spare row past the last output row */
#define POISON_Y 0x7fc00000u   /* NaN: an output never written stays NaN */
#define POISON_GAP 0x7fc5a5a5u /* another (quiet) NaN: row gaps, rows from n on, the tail */

static const int32_t QTYPES[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0,
                                 GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
#define N_QTYPES ((int)(sizeof QTYPES / sizeof QTYPES[0]))

static int is_qtype(int32_t type) {
    for (int i = 0; i < N_QTYPES; i++)
        if (QTYPES[i] == type) return 1;
    return 0;
}

static int32_t block_elems(int32_t type) {
    return type == GGML_TYPE_Q4_0 || type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q8_0 ? 32 : 256;
}

/* Offset of the fp16 scales that the device layout moves out of the block (-1: Q4_K and
 * Q5_K keep their blocks whole) and how many bytes move (Q4_1: d and m). */
static int d_offset(int32_t type) { return type == GGML_TYPE_Q6_K ? 208 : block_elems(type) == 32 ? 0 : -1; }
static int d_bytes(int32_t type) { return type == GGML_TYPE_Q4_1 ? 4 : d_offset(type) >= 0 ? 2 : 0; }

static void *dup_to_device(const void *h, size_t bytes) {
    void *d = locks_cuda_malloc(bytes);
    SETUP(d);
    CHECK(locks_cuda_memcpy_h2d(d, h, bytes));
    return d;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- random matrices and activations ------------------------------------------------ */

/* A finite fp16 scale: random sign, magnitude log-uniform in [1e-3, 1e-1]. */
static void set_random_scale(uint8_t *p) {
    const double mag = exp(log(1e-3) + tu_uniform() * log(100.0));
    const uint16_t h = locks_f32_to_f16((float)(tu_next() & 1 ? mag : -mag));
    memcpy(p, &h, 2);
}

/* rows x cols of random valid blocks in the file's layout: random bytes (quants, six-bit
 * scales and mins, Q6_K's int8 sub-scales), then d (and dmin) set. */
static uint8_t *random_matrix(int32_t type, int32_t rows, int32_t cols) {
    const size_t bb = quant_block_bytes((ggml_type)type), nblk = (size_t)rows * (size_t)(cols / block_elems(type));
    uint8_t *w = malloc(nblk * bb);
    SETUP(w);
    for (size_t i = 0; i < nblk * bb; i++) w[i] = (uint8_t)tu_next();
    for (size_t i = 0; i < nblk; i++) {
        uint8_t *blk = w + i * bb;
        if (type == GGML_TYPE_Q6_K) {
            set_random_scale(blk + 208);
        } else {
            set_random_scale(blk);
            if (type != GGML_TYPE_Q4_0 && type != GGML_TYPE_Q8_0) set_random_scale(blk + 2); /* m, dmin */
        }
    }
    return w;
}

/* x [N_MAX][cols] of normal values. varied: each row its own sigma (log-uniform in
 * [0.05, 20], 1% outliers 10x), and the last row exact ties of the int8 rounding in
 * every block: max |x| = 127 * 2^e (so d = 2^e and x / d is exact), the other values
 * (k + 1/2) 2^e, representable in F16 and BF16 too. Else N(0, 1) throughout. */
static void random_acts(float *x, int32_t cols, int varied) {
    for (int32_t t = 0; t < N_MAX; t++) {
        float *xt = x + (size_t)t * cols;
        if (varied && t == N_MAX - 1) {
            for (int32_t b = 0; b < cols / 32; b++) {
                const int e = tu_int(-8, 4), peak = tu_int(0, 31);
                for (int j = 0; j < 32; j++) {
                    const double v = j == peak ? (tu_next() & 1 ? 127.0 : -127.0) : tu_int(-127, 126) + 0.5;
                    xt[32 * b + j] = (float)ldexp(v, e);
                }
            }
            continue;
        }
        const double sigma = varied ? exp(log(0.05) + tu_uniform() * log(400.0)) : 1.0;
        for (int32_t c = 0; c < cols; c++) {
            const double v = sigma * tu_normal();
            xt[c] = (float)(varied && tu_uniform() < 0.01 ? 10.0 * v : v);
        }
    }
}

/* ---- the layout ------------------------------------------------------------------ */

/* The packed bytes against the header's layout, written here from its words: all blocks
 * in row order (Q4_0 / Q4_1 / Q8_0 / Q6_K without their scales: 16 / 16 / 32 / 208
 * bytes), then for those four the scales of every block (d; Q4_1: d, m) in the same
 * order at the next 256-byte boundary. Returns the mismatching bytes (lg_qmat_bytes too
 * small counts as one). */
static size_t check_pack(const char *what, int32_t type, const uint8_t *src, int32_t rows, int32_t cols,
                         const uint8_t *packed, size_t bytes) {
    const size_t bb = quant_block_bytes((ggml_type)type), nblk = (size_t)rows * (size_t)(cols / block_elems(type));
    const int dof = d_offset(type);
    const size_t moved = (size_t)d_bytes(type), keep = bb - moved, body = nblk * keep;
    const size_t dstart = (body + 255) / 256 * 256, need = dof < 0 ? body : dstart + moved * nblk;
    test_cond(bytes >= need, "%s: lg_qmat_bytes %zu < the %zu bytes of the layout", what, bytes, need);
    if (bytes < need) return 1;
    size_t bad = 0;
    for (size_t i = 0; i < nblk; i++) {
        const uint8_t *s = src + i * bb, *p = packed + i * keep;
        /* the block less its scales: Q4_0 / Q4_1 / Q8_0 after them, Q6_K before */
        const uint8_t *body_src = dof == 0 ? s + moved : s;
        for (size_t k = 0; k < keep; k++)
            if (p[k] != body_src[k] && bad++ < 4)
                fprintf(stderr, "  %s: block %zu byte %zu: packed 0x%02x, file 0x%02x\n", what, i, k, p[k],
                        body_src[k]);
        for (size_t k = 0; k < moved; k++) {
            const size_t at = dstart + moved * i + k;
            if (packed[at] != s[(size_t)dof + k] && bad++ < 4)
                fprintf(stderr, "  %s: scale byte %zu of block %zu (at %zu): packed 0x%02x, file 0x%02x\n", what, k,
                        i, at, packed[at], s[(size_t)dof + k]);
        }
    }
    test_cond(bad == 0, "%s: lg_qmat_pack: %zu bytes unlike the header's layout", what, bad);
    return bad;
}

/* ---- activation quantization --------------------------------------------------------- */

/* lg_op_q8_quantize of x [n][cols] given as xtype against matmul_quantize of the values
 * the GPU sees (x, or x rounded to F16 / BF16): q, d and d * sum bit for bit. Returns
 * the mismatches. */
static size_t check_quantize(const char *what, const float *x, int32_t n, int32_t cols, locks_dtype xtype) {
    static const char *const tname[] = {"f32", "f16", "bf16"};
    const int32_t nb = cols / 32;
    const size_t nv = (size_t)n * cols;
    float *xr = calloc(nv, sizeof(float));
    uint16_t *x16 = malloc(2 * nv);
    matmul_q8 *ref = malloc(sizeof(matmul_q8) * (size_t)n * nb);
    int8_t *q = malloc(nv);
    float *ds = malloc(sizeof(float) * 2 * (size_t)n * nb);
    SETUP(xr && x16 && ref && q && ds);
    for (size_t i = 0; i < nv; i++) {
        if (xtype == LOCKS_DTYPE_F32) {
            xr[i] = x[i];
        } else if (xtype == LOCKS_DTYPE_F16) {
            x16[i] = locks_f32_to_f16(x[i]);
            xr[i] = locks_f16_to_f32(x16[i]);
        } else {
            x16[i] = locks_f32_to_bf16(x[i]);
            xr[i] = locks_bf16_to_f32(x16[i]);
        }
    }
    matmul_quantize(xr, n, cols, ref);
    void *dx = dup_to_device(xtype == LOCKS_DTYPE_F32 ? (const void *)xr : (const void *)x16,
                             xtype == LOCKS_DTYPE_F32 ? sizeof(float) * nv : 2 * nv);
    memset(q, 0x5a, nv); /* poison: what the kernel leaves unwritten shows */
    for (size_t i = 0; i < 2 * (size_t)n * nb; i++) memcpy(ds + i, &(uint32_t){POISON_Y}, 4);
    int8_t *dq = dup_to_device(q, nv);
    float *dds = dup_to_device(ds, sizeof(float) * 2 * (size_t)n * nb);
    CHECK(lg_op_q8_quantize(dx, xtype, n, cols, dq, dds));
    CHECK(locks_cuda_memcpy_d2h(q, dq, nv));
    CHECK(locks_cuda_memcpy_d2h(ds, dds, sizeof(float) * 2 * (size_t)n * nb));
    size_t bad_q = 0, by_div = 0, bad_d = 0, bad_ds = 0;
    for (int32_t t = 0; t < n; t++)
        for (int32_t b = 0; b < nb; b++) {
            const matmul_q8 *r = &ref[(size_t)t * nb + b];
            const float gd = ds[2 * ((size_t)t * nb + b)], gds = ds[2 * ((size_t)t * nb + b) + 1];
            if (f32_bits(gd) != f32_bits(r->d) && bad_d++ < 4)
                fprintf(stderr, "  %s %s: row %d block %d: d %.9g, CPU %.9g\n", what, tname[xtype], t, b, (double)gd,
                        (double)r->d);
            if (f32_bits(gds) != f32_bits(r->ds) && bad_ds++ < 4)
                fprintf(stderr, "  %s %s: row %d block %d: d * sum %.9g, CPU %.9g\n", what, tname[xtype], t, b,
                        (double)gds, (double)r->ds);
            for (int j = 0; j < 32; j++) {
                const size_t i = (size_t)t * cols + (size_t)b * 32 + (size_t)j;
                if (q[i] == r->q[j]) continue;
                /* the CPU rounds x * (1 / d); a kernel dividing x / d differs in the last bit
                 * of the quotient, which moves q where it lies near a half */
                const int div = r->d > 0.0f && (int32_t)lrintf(xr[i] / r->d) == q[i];
                by_div += div;
                if (bad_q++ < 4)
                    fprintf(stderr, "  %s %s: row %d col %zu: q %d, CPU %d (x %.9g, d %.9g; x / d rounds to %ld%s)\n",
                            what, tname[xtype], t, (size_t)b * 32 + (size_t)j, q[i], r->q[j], (double)xr[i],
                            (double)r->d, r->d > 0.0f ? lrintf(xr[i] / r->d) : 0L,
                            div ? ": the GPU's" : "");
            }
        }
    test_cond(bad_q == 0, "%s: lg_op_q8_quantize %s: %zu of %zu q unlike matmul_quantize's%s", what, tname[xtype],
              bad_q, nv,
              by_div == bad_q && bad_q ? " (every one as x / d rounds: the CPU multiplies by 1 / d; the header "
                                         "says exactly as the CPU does)"
                                       : "");
    test_cond(bad_d == 0 && bad_ds == 0,
              "%s: lg_op_q8_quantize %s: %zu d and %zu d * sum of %d blocks unlike the CPU's", what, tname[xtype],
              bad_d, bad_ds, n * nb);
    locks_cuda_free_ptr(&dx);
    locks_cuda_free_ptr((void **)&dq);
    locks_cuda_free_ptr((void **)&dds);
    free(xr), free(x16), free(ref), free(q), free(ds);
    return bad_q + bad_d + bad_ds;
}

/* ---- products -------------------------------------------------------------------- */

/* Output rows t < n of y (stride ldy) against ref [n][rows] (+ y0 [n][rows] if given):
 * by_norm 0: the largest |y - ref| of each row t over that row's scale (the largest of
 * |ref| and mag, mag + |y0|); 1: the L2 norm of y_t - ref_t over that of the scales.
 * Non-finite outputs count as infinite error. Returns the worst error. */
static double compare_rows(const char *what, const float *y, int32_t ldy, int32_t n, int32_t rows, const double *ref,
                           const double *mag, const float *y0, double tol, int by_norm) {
    double worst = 0.0;
    int32_t wt = 0, wr = 0;
    for (int32_t t = 0; t < n; t++) {
        double denom = 0.0, num = 0.0, maxd = 0.0;
        int32_t at = 0;
        for (int32_t r = 0; r < rows; r++) {
            const size_t i = (size_t)t * rows + (size_t)r;
            const double want = ref[i] + (y0 ? (double)y0[i] : 0.0);
            const double m = mag[i] + (y0 ? fabs((double)y0[i]) : 0.0);
            const double s = fabs(want) > m ? fabs(want) : m;
            const float got = y[(size_t)t * ldy + (size_t)r];
            const double d = isfinite(got) ? fabs((double)got - want) : (double)INFINITY;
            if (by_norm) {
                denom += s * s;
                num += d * d;
            } else if (s > denom) {
                denom = s;
            }
            if (!(d <= maxd)) maxd = d, at = r;
        }
        const double err = by_norm ? sqrt(num) / sqrt(denom) : maxd / denom;
        if (!(err <= worst)) worst = err, wt = t, wr = at;
    }
    if (!(worst < tol)) {
        const size_t i = (size_t)wt * rows + (size_t)wr;
        fprintf(stderr, "  %s: row %d output %d: got %.9g want %.9g\n", what, wt, wr,
                (double)y[(size_t)wt * ldy + (size_t)wr], ref[i] + (y0 ? (double)y0[i] : 0.0));
    }
    test_cond(worst < tol, "%s: relative error %.3g (tolerance %.0e)", what, worst, tol);
    return worst;
}

/* Floats of the y buffer of a product with row stride ldy: N_MAX rows, a spare one (a
 * kernel writing row n of n shows there) and TAIL more. */
static size_t y_words(int32_t ldy) { return (size_t)(N_MAX + 1) * (size_t)ldy + TAIL; }

/* Words of the poisoned y buffer [y_words(ldy)] that are not outputs of an n-row product
 * and were changed. */
static size_t touched_outside(const float *y, int32_t n, int32_t rows, int32_t ldy) {
    size_t bad = 0;
    for (size_t i = 0; i < y_words(ldy); i++) {
        const int out = i < (size_t)n * (size_t)ldy && (int32_t)(i % (size_t)ldy) < rows;
        uint32_t u;
        memcpy(&u, y + i, 4);
        if (!out && u != POISON_GAP) bad++;
    }
    return bad;
}

/* Fills the host y buffer [y_words(ldy)]: outputs of an n-row product y0 [n][rows] (NULL:
 * NaN), everything else POISON_GAP. */
static void fill_y(float *y, int32_t n, int32_t rows, int32_t ldy, const float *y0) {
    for (size_t i = 0; i < y_words(ldy); i++) {
        const size_t t = i / (size_t)ldy, r = i % (size_t)ldy;
        const int out = t < (size_t)n && (int32_t)r < rows;
        if (out && y0) y[i] = y0[t * (size_t)rows + r];
        else memcpy(y + i, &(uint32_t){out ? POISON_Y : POISON_GAP}, 4);
    }
}

/* y [n][rows] as the CPU engine computes it on the int8 activations xq: quant.c's
 * portable loops for the K types, matmul (its fastest path here) for Q4_0 / Q4_1 / Q8_0. */
static void cpu_product(const matmul_weight *mw, const float *x, const matmul_q8 *xq, int32_t n, float *y) {
    const matmul_act a = {x, xq, n, mw->cols};
    if (quant_is_ext(mw->type)) quant_rows_c(mw, &a, y, mw->rows, 0, mw->rows);
    else matmul(NULL, mw, &a, y, mw->rows);
}

static int same16(uint16_t got, uint16_t want) { return got == want || ((got | want) & 0x7fff) == 0; /* +-0 */ }

typedef struct {
    double err_cpu, err_f64;       /* worst over n = 1..8 and the beta products */
    size_t q8_bad, deq_bad, bits_bad, outside_bad, pack_bad;
} matrix_result;

/* Everything above on one matrix w (rows x cols of type, the file's bytes), activations
 * random_acts(varied). */
static void test_matrix(const char *name, int32_t type, int32_t rows, int32_t cols, const uint8_t *w, int varied) {
    char what[160];
    matrix_result res = {0};
    const int32_t nb = cols / 32;
    const matmul_weight mw = {w, (ggml_type)type, rows, cols, ggml_row_bytes((ggml_type)type, cols), NULL};

    /* layout, upload */
    const size_t bytes = lg_qmat_bytes(type, rows, cols);
    test_cond(bytes > 0, "%s: lg_qmat_bytes(%s, %d, %d) = 0", name, ggml_type_name((uint32_t)type), rows, cols);
    if (!bytes) return;
    uint8_t *packed = malloc(bytes);
    SETUP(packed);
    memset(packed, 0xa5, bytes);
    lg_qmat_pack(type, w, rows, cols, packed);
    res.pack_bad = check_pack(name, type, w, rows, cols, packed, bytes);
    void *dw = dup_to_device(packed, bytes);
    free(packed);
    const lg_qmat qm = {dw, type, rows, cols};

    /* activations: the CPU's int8 blocks, in the device's [n][cols] / [n][nb][2] form */
    float *x = malloc(sizeof(float) * N_MAX * (size_t)cols);
    matmul_q8 *xq = malloc(sizeof(matmul_q8) * N_MAX * (size_t)nb);
    int8_t *q = malloc(N_MAX * (size_t)cols);
    float *ds = malloc(sizeof(float) * 2 * N_MAX * (size_t)nb);
    double *xd = malloc(sizeof(double) * N_MAX * (size_t)cols);
    SETUP(x && xq && q && ds && xd);
    random_acts(x, cols, varied);
    matmul_quantize(x, N_MAX, cols, xq);
    for (int32_t t = 0; t < N_MAX; t++)
        for (int32_t b = 0; b < nb; b++) {
            const matmul_q8 *blk = &xq[(size_t)t * nb + b];
            memcpy(q + (size_t)t * cols + (size_t)b * 32, blk->q, 32);
            ds[2 * ((size_t)t * nb + b)] = blk->d;
            ds[2 * ((size_t)t * nb + b) + 1] = blk->ds;
            for (int j = 0; j < 32; j++) xd[(size_t)t * cols + (size_t)b * 32 + (size_t)j] = (double)blk->d * blk->q[j];
        }
    for (int xt = LOCKS_DTYPE_F32; xt <= LOCKS_DTYPE_BF16; xt++)
        res.q8_bad += check_quantize(name, x, N_MAX, cols, (locks_dtype)xt);
    int8_t *dq = dup_to_device(q, N_MAX * (size_t)cols);
    float *dds = dup_to_device(ds, sizeof(float) * 2 * N_MAX * (size_t)nb);

    /* dequantization on the GPU, both 16-bit types (first all ones: NaN) */
    const size_t nw = (size_t)rows * (size_t)cols;
    uint16_t *h16 = malloc(2 * nw), *hb16 = malloc(2 * nw);
    SETUP(h16 && hb16);
    memset(h16, 0xff, 2 * nw);
    void *dout = dup_to_device(h16, 2 * nw);
    CHECK(lg_op_qdequant(&qm, LOCKS_DTYPE_F16, dout));
    CHECK(locks_cuda_memcpy_d2h(h16, dout, 2 * nw));
    memset(hb16, 0xff, 2 * nw);
    CHECK(locks_cuda_memcpy_h2d(dout, hb16, 2 * nw));
    CHECK(lg_op_qdequant(&qm, LOCKS_DTYPE_BF16, dout));
    CHECK(locks_cuda_memcpy_d2h(hb16, dout, 2 * nw));
    locks_cuda_free_ptr(&dout);

    /* one pass over the rows: the dequantized row against the GPU's 16-bit values, and
     * the float64 product with the dequantized activations (and its scale) */
    double *y64 = malloc(sizeof(double) * N_MAX * (size_t)rows), *mag = malloc(sizeof(double) * N_MAX * (size_t)rows);
    float *wrow = malloc(sizeof(float) * (size_t)cols);
    SETUP(y64 && mag && wrow);
    size_t bad16 = 0, badb16 = 0;
    for (int32_t r = 0; r < rows; r++) {
        matmul_row_f32(&mw, r, wrow);
        for (int32_t c = 0; c < cols; c++) {
            const size_t i = (size_t)r * cols + (size_t)c;
            const uint16_t want16 = locks_f32_to_f16(wrow[c]), wantb = locks_f32_to_bf16(wrow[c]);
            if (!same16(h16[i], want16) && bad16++ < 4)
                fprintf(stderr, "  %s: dequant f16 [%d][%d]: 0x%04x, CPU %.9g -> 0x%04x\n", name, r, c, h16[i],
                        (double)wrow[c], want16);
            if (!same16(hb16[i], wantb) && badb16++ < 4)
                fprintf(stderr, "  %s: dequant bf16 [%d][%d]: 0x%04x, CPU %.9g -> 0x%04x\n", name, r, c, hb16[i],
                        (double)wrow[c], wantb);
        }
        for (int32_t t = 0; t < N_MAX; t++) {
            const double *xt = xd + (size_t)t * cols;
            double s = 0.0, ss = 0.0;
            for (int32_t c = 0; c < cols; c++) {
                const double p = (double)wrow[c] * xt[c];
                s += p;
                ss += p * p;
            }
            y64[(size_t)t * rows + (size_t)r] = s;
            mag[(size_t)t * rows + (size_t)r] = sqrt(ss);
        }
    }
    test_cond(bad16 == 0, "%s: lg_op_qdequant f16: %zu of %zu values unlike the CPU's rounded to f16", name, bad16, nw);
    test_cond(badb16 == 0, "%s: lg_op_qdequant bf16: %zu of %zu values unlike the CPU's rounded to bf16", name, badb16,
              nw);
    res.deq_bad = bad16 + badb16;
    free(h16), free(hb16), free(wrow);

    /* the CPU engine's product of the same int8 activations */
    float *ycpu = malloc(sizeof(float) * N_MAX * (size_t)rows);
    double *ycpu64 = malloc(sizeof(double) * N_MAX * (size_t)rows);
    SETUP(ycpu && ycpu64);
    cpu_product(&mw, x, xq, N_MAX, ycpu);
    for (size_t i = 0; i < (size_t)N_MAX * (size_t)rows; i++) ycpu64[i] = ycpu[i];

    /* n = 1..8 rows, beta 0, ldy = rows for odd n, rows + n + 1 for even n */
    const int32_t ldy_max = rows + N_MAX + 1;
    const size_t ybuf = y_words(ldy_max);
    float *hy = malloc(sizeof(float) * ybuf), *ys[N_MAX + 1] = {NULL};
    SETUP(hy);
    float *dy = locks_cuda_malloc(sizeof(float) * ybuf);
    SETUP(dy);
    for (int32_t n = 1; n <= N_MAX; n++) {
        const int32_t ldy = n % 2 ? rows : rows + n + 1;
        fill_y(hy, n, rows, ldy, NULL);
        CHECK(locks_cuda_memcpy_h2d(dy, hy, sizeof(float) * y_words(ldy)));
        CHECK(lg_op_qgemv(&qm, n, dq, dds, dy, ldy, 0));
        CHECK(locks_cuda_memcpy_d2h(hy, dy, sizeof(float) * y_words(ldy)));
        snprintf(what, sizeof what, "%s: qgemv n %d ldy %d vs CPU", name, n, ldy);
        double e = compare_rows(what, hy, ldy, n, rows, ycpu64, mag, NULL, 2e-5, 0);
        if (e > res.err_cpu) res.err_cpu = e;
        snprintf(what, sizeof what, "%s: qgemv n %d ldy %d vs float64", name, n, ldy);
        e = compare_rows(what, hy, ldy, n, rows, y64, mag, NULL, 1e-5, 1);
        if (e > res.err_f64) res.err_f64 = e;
        const size_t outside = touched_outside(hy, n, rows, ldy);
        test_cond(outside == 0, "%s: qgemv n %d ldy %d wrote %zu floats outside its n x rows outputs", name, n, ldy,
                  outside);
        res.outside_bad += outside;
        ys[n] = malloc(sizeof(float) * (size_t)n * rows);
        SETUP(ys[n]);
        for (int32_t t = 0; t < n; t++)
            memcpy(ys[n] + (size_t)t * rows, hy + (size_t)t * ldy, sizeof(float) * (size_t)rows);
    }

    /* the same bits whatever the batch: row t of every n-row product as of the 8-row one */
    for (int32_t n = 1; n < N_MAX; n++) {
        int32_t first = -1;
        for (int32_t t = 0; t < n && first < 0; t++)
            if (memcmp(ys[n] + (size_t)t * rows, ys[N_MAX] + (size_t)t * rows, sizeof(float) * (size_t)rows))
                first = t;
        test_cond(first < 0, "%s: qgemv row %d of the %d-row product differs from that of the %d-row one", name, first,
                  n, N_MAX);
        res.bits_bad += first >= 0;
    }
    /* ... and as the 1-row product of that row alone (its own buffers) */
    for (int32_t t = 0; t < N_MAX; t++) {
        int8_t *dq1 = dup_to_device(q + (size_t)t * cols, (size_t)cols);
        float *dds1 = dup_to_device(ds + 2 * (size_t)t * nb, sizeof(float) * 2 * (size_t)nb);
        fill_y(hy, 1, rows, rows, NULL);
        CHECK(locks_cuda_memcpy_h2d(dy, hy, sizeof(float) * y_words(rows)));
        CHECK(lg_op_qgemv(&qm, 1, dq1, dds1, dy, rows, 0));
        CHECK(locks_cuda_memcpy_d2h(hy, dy, sizeof(float) * y_words(rows)));
        const int same = !memcmp(hy, ys[N_MAX] + (size_t)t * rows, sizeof(float) * (size_t)rows);
        test_cond(same, "%s: qgemv of activation row %d alone differs from its row of the %d-row product", name, t,
                  N_MAX);
        res.bits_bad += !same;
        const size_t outside = touched_outside(hy, 1, rows, rows);
        test_cond(outside == 0, "%s: qgemv of row %d alone wrote %zu floats outside its outputs", name, t, outside);
        res.outside_bad += outside;
        locks_cuda_free_ptr((void **)&dq1);
        locks_cuda_free_ptr((void **)&dds1);
    }

    /* beta = 1: onto a known y (of the products' size), with and without row gaps */
    float *y0 = malloc(sizeof(float) * N_MAX * (size_t)rows);
    SETUP(y0);
    double rms = 0.0;
    for (size_t i = 0; i < (size_t)N_MAX * (size_t)rows; i++) rms += y64[i] * y64[i];
    rms = sqrt(rms / ((double)N_MAX * rows));
    const int32_t beta_n[2] = {N_MAX, 3}, beta_ldy[2] = {rows + 2, rows};
    for (int k = 0; k < 2; k++) {
        const int32_t n = beta_n[k], ldy = beta_ldy[k];
        tu_fill_normal(y0, (size_t)n * rows, rms > 0.0 ? rms : 1.0);
        fill_y(hy, n, rows, ldy, y0);
        CHECK(locks_cuda_memcpy_h2d(dy, hy, sizeof(float) * y_words(ldy)));
        CHECK(lg_op_qgemv(&qm, n, dq, dds, dy, ldy, 1));
        CHECK(locks_cuda_memcpy_d2h(hy, dy, sizeof(float) * y_words(ldy)));
        snprintf(what, sizeof what, "%s: qgemv beta n %d ldy %d vs CPU", name, n, ldy);
        double e = compare_rows(what, hy, ldy, n, rows, ycpu64, mag, y0, 2e-5, 0);
        if (e > res.err_cpu) res.err_cpu = e;
        snprintf(what, sizeof what, "%s: qgemv beta n %d ldy %d vs float64", name, n, ldy);
        e = compare_rows(what, hy, ldy, n, rows, y64, mag, y0, 1e-5, 1);
        if (e > res.err_f64) res.err_f64 = e;
        const size_t outside = touched_outside(hy, n, rows, ldy);
        test_cond(outside == 0, "%s: qgemv beta n %d ldy %d wrote %zu floats outside its outputs", name, n, ldy,
                  outside);
        res.outside_bad += outside;
    }

    printf("  %-34s %-4s %6d x %5d: worst rel. error vs CPU %.2e, vs float64 %.2e; mismatches: pack %zu, q8 %zu, "
           "dequant %zu, batch bits %zu, writes outside %zu\n",
           name, ggml_type_name((uint32_t)type), rows, cols, res.err_cpu, res.err_f64, res.pack_bad, res.q8_bad,
           res.deq_bad, res.bits_bad, res.outside_bad);

    for (int32_t n = 1; n <= N_MAX; n++) free(ys[n]);
    locks_cuda_free_ptr((void **)&dy);
    locks_cuda_free_ptr((void **)&dq);
    locks_cuda_free_ptr((void **)&dds);
    locks_cuda_free_ptr(&dw);
    free(x), free(xq), free(q), free(ds), free(xd), free(y64), free(mag), free(ycpu), free(ycpu64), free(hy), free(y0);
}

/* ---- random matrices ----------------------------------------------------------------- */

static void test_random(void) {
    static const int32_t rows_list[] = {1, 5, 64, 333};
    static const int32_t cols_list[] = {32, 96, 256, 512, 4096};
    for (int ti = 0; ti < N_QTYPES; ti++)
        for (int ci = 0; ci < 5; ci++)
            for (int ri = 0; ri < 4; ri++) {
                const int32_t type = QTYPES[ti], rows = rows_list[ri], cols = cols_list[ci];
                if (cols % block_elems(type)) continue; /* 32 and 96: Q4_0, Q4_1 and Q8_0 only */
                uint8_t *w = random_matrix(type, rows, cols);
                char name[64];
                snprintf(name, sizeof name, "random %s %dx%d", ggml_type_name((uint32_t)type), rows, cols);
                test_matrix(name, type, rows, cols, w, 1);
                free(w);
            }
}

/* ---- sizes and refused arguments ----------------------------------------------------- */

static void test_sizes(void) {
    for (int32_t type = -1; type <= 40; type++)
        test_cond(!lg_qtype_supported(type) == !is_qtype(type), "lg_qtype_supported(%d %s) = %d", type,
                  ggml_type_name((uint32_t)type), lg_qtype_supported(type));
    static const int32_t cols_ok32[] = {32, 64, 96, 576, 4096}, cols_bad32[] = {1, 16, 48, 100, 4097};
    static const int32_t cols_okk[] = {256, 512, 1024, 4096}, cols_badk[] = {32, 128, 384, 640, 4352 + 32};
    for (int ti = 0; ti < N_QTYPES; ti++) {
        const int32_t type = QTYPES[ti], k = block_elems(type) == 256;
        for (int i = 0; i < (k ? 4 : 5); i++) {
            const int32_t cols = k ? cols_okk[i] : cols_ok32[i];
            test_cond(lg_qmat_bytes(type, 7, cols) > 0, "lg_qmat_bytes(%s, 7, %d) = 0",
                      ggml_type_name((uint32_t)type), cols);
        }
        for (int i = 0; i < 5; i++) {
            const int32_t cols = k ? cols_badk[i] : cols_bad32[i];
            test_cond(lg_qmat_bytes(type, 7, cols) == 0, "lg_qmat_bytes(%s, 7, %d) = %zu (not a multiple of %d)",
                      ggml_type_name((uint32_t)type), cols, lg_qmat_bytes(type, 7, cols), block_elems(type));
        }
    }
    static const int32_t others[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1};
    for (int i = 0; i < 5; i++)
        test_cond(lg_qmat_bytes(others[i], 7, 4096) == 0, "lg_qmat_bytes(%s, 7, 4096) = %zu (type not kept quantized)",
                  ggml_type_name((uint32_t)others[i]), lg_qmat_bytes(others[i], 7, 4096));
}

/* The header's ranges (n 1..LG_GEMV_MAX_N, a supported type, F16 / BF16 out, cols a
 * multiple of 32) refused by the public entries (STYLE.md: an entry checks its inputs).
 * Last, on buffers large enough for what a kernel that did launch would touch. */
static void test_refused(void) {
    const int32_t rows = 16, cols = 256;
    uint8_t *w = random_matrix(GGML_TYPE_Q4_K, rows, cols);
    uint8_t *packed = malloc(lg_qmat_bytes(GGML_TYPE_Q4_K, rows, cols) + 4096);
    SETUP(packed);
    lg_qmat_pack(GGML_TYPE_Q4_K, w, rows, cols, packed);
    void *dw = dup_to_device(packed, lg_qmat_bytes(GGML_TYPE_Q4_K, rows, cols) + 4096);
    void *dbuf = locks_cuda_malloc((size_t)16 * 2 * rows * cols * sizeof(float));
    SETUP(dbuf);
    float *dy = dbuf;
    const int8_t *dq = dbuf;
    const lg_qmat qm = {dw, GGML_TYPE_Q4_K, rows, cols}, q50 = {dw, GGML_TYPE_Q5_0, rows, cols};
    test_cond(lg_op_qgemv(&qm, 0, dq, dy, dy, rows, 0) != LOCKS_OK, "lg_op_qgemv accepts n = 0");
    test_cond(lg_op_qgemv(&qm, LG_GEMV_MAX_N + 1, dq, dy, dy, rows, 0) != LOCKS_OK, "lg_op_qgemv accepts n = %d",
              LG_GEMV_MAX_N + 1);
    test_cond(lg_op_qgemv(&q50, 1, dq, dy, dy, rows, 0) != LOCKS_OK, "lg_op_qgemv accepts a Q5_0 matrix");
    test_cond(lg_op_qdequant(&qm, LOCKS_DTYPE_F32, dbuf) != LOCKS_OK, "lg_op_qdequant accepts out_type F32");
    test_cond(lg_op_q8_quantize(dbuf, LOCKS_DTYPE_F32, 1, 48, dbuf, dy) != LOCKS_OK,
              "lg_op_q8_quantize accepts cols = 48");
    locks_cuda_free_ptr(&dbuf);
    locks_cuda_free_ptr(&dw);
    free(w), free(packed);
}

/* ---- real tensors ---------------------------------------------------------------- */

/* The model at $env, else cache_name in $LOCKS_MODEL_DIR (default ~/.cache/locks) if it
 * is there. 0: none. */
static int find_gguf(const char *env, const char *cache_name, char *path, size_t cap) {
    const char *p = getenv(env);
    if (p && *p) {
        snprintf(path, cap, "%s", p);
        return 1;
    }
    const char *dir = getenv("LOCKS_MODEL_DIR"), *home = getenv("HOME");
    if (dir && *dir) snprintf(path, cap, "%s/%s", dir, cache_name);
    else if (home && *home) snprintf(path, cap, "%s/.cache/locks/%s", home, cache_name);
    else return 0;
    return access(path, R_OK) == 0;
}

/* The first and the last 2-D tensor of every kept type (whose columns fill its blocks)
 * of the file, through test_matrix with normal activations. */
static void test_gguf(const char *label, const char *env, const char *cache_name) {
    char path[4096];
    if (!find_gguf(env, cache_name, path, sizeof path)) {
        printf("  %s: no model (set %s, or scripts/fetch-model.sh's file in ~/.cache/locks): real tensors skipped\n",
               label, env);
        return;
    }
    locks_status st;
    gguf *g = gguf_open(path, &st);
    test_cond(g != NULL, "%s: cannot open %s: %s", label, path, locks_status_str(st));
    if (!g) return;
    printf("  %s: %s\n", label, path);
    int64_t first[N_QTYPES], last[N_QTYPES];
    int64_t odd_cols[N_QTYPES] = {0}, other[64] = {0};
    for (int i = 0; i < N_QTYPES; i++) first[i] = last[i] = -1;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (t->n_dims != 2) continue;
        int k = 0;
        while (k < N_QTYPES && QTYPES[k] != (int32_t)t->type) k++;
        if (k == N_QTYPES) {
            if ((int)t->type >= 0 && (int)t->type < 64) other[t->type]++;
            continue;
        }
        /* lg_qmat_bytes is 0 exactly when the columns do not fill the type's blocks */
        const int fits = t->ne[0] % block_elems(QTYPES[k]) == 0;
        test_cond((lg_qmat_bytes(QTYPES[k], (int32_t)t->ne[1], (int32_t)t->ne[0]) > 0) == fits,
                  "%s: lg_qmat_bytes of %.*s (%s, %lld x %lld) = %zu", label, (int)t->name_len, t->name,
                  ggml_type_name(t->type), (long long)t->ne[1], (long long)t->ne[0],
                  lg_qmat_bytes(QTYPES[k], (int32_t)t->ne[1], (int32_t)t->ne[0]));
        if (!fits) {
            odd_cols[k]++;
            continue;
        }
        if (first[k] < 0) first[k] = i;
        last[k] = i;
    }
    for (int k = 0; k < 64; k++)
        if (other[k])
            printf("    %lld 2-D tensors of %s: not kept quantized, skipped\n", (long long)other[k],
                   ggml_type_name((uint32_t)k));
    for (int k = 0; k < N_QTYPES; k++) {
        if (odd_cols[k])
            printf("    %lld %s tensors with columns not a multiple of %d: skipped\n", (long long)odd_cols[k],
                   ggml_type_name((uint32_t)QTYPES[k]), block_elems(QTYPES[k]));
        const int64_t pick[2] = {first[k], last[k]};
        for (int j = 0; j < 2; j++) {
            if (pick[j] < 0 || (j == 1 && pick[1] == pick[0])) continue;
            const gguf_tensor *t = gguf_tensor_at(g, pick[j]);
            char name[96];
            snprintf(name, sizeof name, "%s %.*s", label, (int)(t->name_len < 60 ? t->name_len : 60), t->name);
            test_matrix(name, QTYPES[k], (int32_t)t->ne[1], (int32_t)t->ne[0], t->data, 0);
        }
    }
    gguf_close(g);
}

/* --perf: the decode products of a Llama-3.1-8B layer and its output matrix in the types a
 * Q4_K_M file gives them (Q4_K; Q6_K for half the layers' Wv and Wdown, and the output),
 * n = 1, 2, 4, 8 input rows, each matrix in enough copies to stream past the L2; mean
 * microseconds of a product and the bytes it reads per microsecond (GB/s). A timing,
 * not a check. */
static void perf(void) {
    static const struct {
        const char *name;
        int32_t type, rows, cols;
    } mats[] = {
        {"Wq|Wk Q4_K", GGML_TYPE_Q4_K, 6144, 4096},      {"Wv Q6_K", GGML_TYPE_Q6_K, 1024, 4096},
        {"Wo Q4_K", GGML_TYPE_Q4_K, 4096, 4096},         {"Wgate|Wup Q4_K", GGML_TYPE_Q4_K, 28672, 4096},
        {"Wdown Q4_K", GGML_TYPE_Q4_K, 4096, 14336},     {"Wdown Q6_K", GGML_TYPE_Q6_K, 4096, 14336},
        {"output Q6_K", GGML_TYPE_Q6_K, 128256, 4096},   {"Wgate|Wup Q8_0", GGML_TYPE_Q8_0, 28672, 4096},
        {"Wgate|Wup Q4_0", GGML_TYPE_Q4_0, 28672, 4096},
    };
    const size_t want = (size_t)512 << 20; /* bytes over all copies: ~10x the L2 */
    for (size_t k = 0; k < sizeof mats / sizeof mats[0]; k++) {
        const int32_t type = mats[k].type, rows = mats[k].rows, cols = mats[k].cols;
        const size_t bytes = lg_qmat_bytes(type, rows, cols), stride = (bytes + 255) & ~(size_t)255;
        const int32_t copies = (int32_t)(want / stride < 1 ? 1 : (want / stride > 64 ? 64 : want / stride));
        uint8_t *w = random_matrix(type, rows, cols);
        uint8_t *packed = malloc(stride);
        SETUP(packed);
        lg_qmat_pack(type, w, rows, cols, packed);
        char *dw = locks_cuda_malloc(stride * (size_t)copies);
        SETUP(dw);
        for (int32_t i = 0; i < copies; i++) CHECK(locks_cuda_memcpy_h2d(dw + (size_t)i * stride, packed, bytes));
        float *x = malloc(sizeof(float) * (size_t)N_MAX * cols);
        matmul_q8 *xq = malloc(sizeof(matmul_q8) * (size_t)N_MAX * (cols / 32));
        int8_t *q = malloc((size_t)N_MAX * cols);
        float *ds = malloc(sizeof(float) * 2 * (size_t)N_MAX * (cols / 32));
        SETUP(x && xq && q && ds);
        random_acts(x, cols, 0);
        matmul_quantize(x, N_MAX, cols, xq);
        for (int32_t i = 0; i < N_MAX * (cols / 32); i++) {
            memcpy(q + (size_t)i * 32, xq[i].q, 32);
            ds[2 * i] = xq[i].d, ds[2 * i + 1] = xq[i].ds;
        }
        int8_t *dq = dup_to_device(q, (size_t)N_MAX * cols);
        float *dds = dup_to_device(ds, sizeof(float) * 2 * (size_t)N_MAX * (cols / 32));
        float *dy = locks_cuda_malloc(sizeof(float) * (size_t)N_MAX * rows);
        SETUP(dy);
        printf("perf %-16s %6d x %5d, %6.1f MB x %2d copies:", mats[k].name, rows, cols, bytes / 1e6, copies);
        const int32_t ns[] = {1, 2, 4, 8};
        for (int i = 0; i < 4; i++) {
            const lg_qmat m = {dw, type, rows, cols};
            float us = 0.f;
            CHECK(lg_op_qgemv_time(&m, copies, stride, ns[i], dq, dds, dy, 20, 1, &us));
            const double t = (double)us;
            printf("  n=%d %8.1f us %6.0f GB/s", ns[i], t, (double)bytes / (t * 1e3));
        }
        printf("\n");
        locks_cuda_free_ptr((void **)&dy);
        locks_cuda_free_ptr((void **)&dq);
        locks_cuda_free_ptr((void **)&dds);
        locks_cuda_free_ptr((void **)&dw);
        free(w), free(packed), free(x), free(xq), free(q), free(ds);
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines survive a timeout kill */
    if (argc > 1 && !strcmp(argv[1], "--perf")) {
        tu_seed("test_gpu_qgemv --perf");
        matmul_init_tables();
        perf();
        return test_report("test_gpu_qgemv --perf");
    }
    tu_seed("test_gpu_qgemv");
    matmul_init_tables();
    test_sizes();
    test_random();
    test_gguf("SmolLM2", "LOCKS_MODEL", "SmolLM2-135M-Instruct.Q4_1.gguf");
    test_gguf("Gemma 3", "LOCKS_GEMMA3_MODEL", "gemma-3-270m-q4_k_m.gguf");
    test_refused();
    return test_report("test_gpu_qgemv");
}
