/*
 * test_gpu_arch_ops.c — the GPU kernels of the layer variants (qwen2, qwen3, gemma3: lg_arch
 * in src/model/cuda/model_cuda.h) one by one against float64 references of their CPU twins
 * in llama.c / vmath.c / swa.c, on fresh random data: RoPE on NeoX pairs (and on adjacent
 * pairs with n_rot < head_dim), the scaled embedding gather, GeGLU, the QKV product's bias
 * and per-head QK-norm, the post-branch norm + residual add, and the sliding-window ring:
 * K/V stored chunk by chunk at positions that wrap the ring, each row attending exactly
 * its window (an idle row, position -1, gets zeros). When tests/test_gpu_arch.c (the
 * whole engine against the CPU engine) fails, this one says which kernel.
 *
 * Exit 77 (ctest: skipped) without a CUDA device.
 */
#include "test_util.h"

#include "cuda/locks_cuda.h"
#include "model/cuda/model_cuda.h"
#include "util.h"

static void *dup_to_device(const void *h, size_t bytes) {
    void *d = locks_cuda_malloc(bytes);
    SETUP(d);
    CHECK(locks_cuda_memcpy_h2d(d, h, bytes));
    return d;
}

/* ---- RoPE ------------------------------------------------------------------------------ */

static void test_rope(int neox, int32_t hd, int32_t n_rot) {
    const int32_t n = 6, heads = 5, stride = heads * hd + 24;
    float *x = malloc(sizeof(float) * n * stride), *got = malloc(sizeof(float) * n * stride);
    double *ref = malloc(sizeof(double) * n * stride);
    float inv[128];
    int32_t pos[6];
    SETUP(x && got && ref && n_rot / 2 <= 128);
    tu_fill_normal(x, (size_t)n * stride, 1.0);
    for (int32_t i = 0; i < n_rot / 2; i++) inv[i] = (float)pow(1e6, -2.0 * i / n_rot);
    for (int32_t t = 0; t < n; t++) pos[t] = tu_int(0, 1 << 15);
    for (int32_t i = 0; i < n * stride; i++) ref[i] = x[i];
    for (int32_t t = 0; t < n; t++)
        for (int32_t h = 0; h < heads; h++)
            for (int32_t i = 0; i < n_rot / 2; i++) {
                const double a = (double)pos[t] * (double)inv[i];
                const float c = (float)cos(a), s = (float)sin(a); /* as llama.c's rope */
                const size_t o = (size_t)t * stride + (size_t)h * hd + (size_t)(neox ? i : 2 * i);
                const size_t o1 = o + (size_t)(neox ? n_rot / 2 : 1);
                ref[o] = (double)x[o] * (double)c - (double)x[o1] * (double)s;
                ref[o1] = (double)x[o] * (double)s + (double)x[o1] * (double)c;
            }
    float *dx = dup_to_device(x, sizeof(float) * n * stride), *dinv = dup_to_device(inv, sizeof inv);
    int32_t *dpos = dup_to_device(pos, sizeof pos);
    CHECK(lg_op_rope(dx, n, stride, heads, hd, n_rot, dinv, dpos, neox));
    CHECK(locks_cuda_memcpy_d2h(got, dx, sizeof(float) * n * stride));
    char what[64];
    snprintf(what, sizeof what, "rope %s d %d n_rot %d", neox ? "neox" : "adjacent", hd, n_rot);
    tu_close(what, got, ref, (size_t)n * stride, 2e-6, 2e-6);
    locks_cuda_free_ptr((void **)&dx);
    locks_cuda_free_ptr((void **)&dinv);
    locks_cuda_free_ptr((void **)&dpos);
    free(x), free(got), free(ref);
}

/* ---- the scaled embedding, GeGLU ---------------------------------------------------------- */

static void test_embed_geglu(void) {
    /* x = float(E[tok]) * sqrtf(dim): one float product, as llama.c's, so exact */
    const int32_t V = 900, D = 640, nt = 5;
    const float scale = sqrtf((float)D);
    uint16_t *e = malloc(2 * (size_t)V * D);
    float *x = malloc(sizeof(float) * nt * D);
    double *xr = malloc(sizeof(double) * nt * D);
    int32_t tok[5];
    SETUP(e && x && xr);
    for (int32_t i = 0; i < V * D; i++) e[i] = locks_f32_to_bf16((float)(0.05 * tu_normal()));
    for (int32_t t = 0; t < nt; t++) tok[t] = tu_int(0, V - 1);
    for (int32_t t = 0; t < nt; t++)
        for (int32_t i = 0; i < D; i++) xr[t * D + i] = (float)(locks_bf16_to_f32(e[(size_t)tok[t] * D + i]) * scale);
    void *de = dup_to_device(e, 2 * (size_t)V * D);
    int32_t *dtok = dup_to_device(tok, sizeof tok);
    float *dx = locks_cuda_malloc(sizeof(float) * nt * D);
    CHECK(lg_op_embed_scaled(de, LOCKS_DTYPE_BF16, dtok, nt, D, scale, dx));
    CHECK(locks_cuda_memcpy_d2h(x, dx, sizeof(float) * nt * D));
    tu_close("embed x sqrt(dim)", x, xr, (size_t)nt * D, 0.0, 0.0);
    locks_cuda_free_ptr(&de);
    locks_cuda_free_ptr((void **)&dtok);
    locks_cuda_free_ptr((void **)&dx);
    free(e), free(x), free(xr);

    /* GeGLU against 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))) u in float64, also
     * where exp(-2 y) saturates (|g| up to ~40) */
    const int32_t n = 3, ffn = 2048;
    float *gu = malloc(sizeof(float) * n * 2 * ffn), *got = malloc(sizeof(float) * n * ffn);
    double *ref = malloc(sizeof(double) * n * ffn);
    SETUP(gu && got && ref);
    tu_fill_normal(gu, (size_t)n * 2 * ffn, 4.0);
    for (int32_t i = 0; i < 16; i++) gu[i] = (float)(i % 2 ? 40.0 : -40.0) * (float)(i + 1) / 16.f;
    for (int32_t t = 0; t < n; t++)
        for (int32_t j = 0; j < ffn; j++) {
            const double g = gu[t * 2 * ffn + j], u = gu[t * 2 * ffn + ffn + j];
            ref[t * ffn + j] = 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
        }
    float *dgu = dup_to_device(gu, sizeof(float) * n * 2 * ffn), *dout = locks_cuda_malloc(sizeof(float) * n * ffn);
    CHECK(lg_op_geglu(dgu, n, ffn, LOCKS_DTYPE_F32, dout));
    CHECK(locks_cuda_memcpy_d2h(got, dout, sizeof(float) * n * ffn));
    tu_close("geglu", got, ref, (size_t)n * ffn, 1e-5, 1e-5);
    locks_cuda_free_ptr((void **)&dgu);
    locks_cuda_free_ptr((void **)&dout);
    free(gu), free(got), free(ref);
}

/* ---- the QKV product's bias and QK-norm; the post-norm + residual add ------------------------ */

static void test_qkv_fix(int bias, int norm) {
    const int32_t n = 5, hq = 4, hkv = 2, d = 128, heads = hq + 2 * hkv, stride = heads * d + 8;
    const float eps = 1e-6f;
    float *x = malloc(sizeof(float) * n * stride), *got = malloc(sizeof(float) * n * stride);
    float *b = malloc(sizeof(float) * heads * d), *qn = malloc(sizeof(float) * d), *kn = malloc(sizeof(float) * d);
    double *ref = malloc(sizeof(double) * n * stride);
    SETUP(x && got && b && qn && kn && ref);
    tu_fill_normal(x, (size_t)n * stride, 2.0);
    tu_fill_normal(b, (size_t)heads * d, 0.5);
    for (int32_t i = 0; i < d; i++) qn[i] = (float)(1.0 + 0.3 * tu_normal()), kn[i] = (float)(1.0 + 0.3 * tu_normal());
    for (int32_t i = 0; i < n * stride; i++) ref[i] = x[i];
    for (int32_t t = 0; t < n; t++)
        for (int32_t j = 0; j < heads; j++) {
            double *h = ref + (size_t)t * stride + (size_t)j * d;
            for (int32_t i = 0; bias && i < d; i++) h[i] = (double)(float)(h[i] + (double)b[j * d + i]);
            if (!norm || j >= hq + hkv) continue;
            const float *w = j < hq ? qn : kn;
            double ss = 0.0;
            for (int32_t i = 0; i < d; i++) ss += h[i] * h[i];
            const double r = 1.0 / sqrt(ss / d + (double)eps);
            for (int32_t i = 0; i < d; i++) h[i] = h[i] * r * (double)w[i];
        }
    float *dx = dup_to_device(x, sizeof(float) * n * stride), *db = dup_to_device(b, sizeof(float) * heads * d);
    float *dqn = dup_to_device(qn, sizeof(float) * d), *dkn = dup_to_device(kn, sizeof(float) * d);
    CHECK(lg_op_qkv_fix(dx, n, stride, hq, hkv, d, bias ? db : NULL, norm ? dqn : NULL, norm ? dkn : NULL, eps));
    CHECK(locks_cuda_memcpy_d2h(got, dx, sizeof(float) * n * stride));
    char what[64];
    snprintf(what, sizeof what, "qkv_fix bias %d qk-norm %d", bias, norm);
    tu_close(what, got, ref, (size_t)n * stride, 1e-5, 1e-5);
    locks_cuda_free_ptr((void **)&dx);
    locks_cuda_free_ptr((void **)&db);
    locks_cuda_free_ptr((void **)&dqn);
    locks_cuda_free_ptr((void **)&dkn);
    free(x), free(got), free(b), free(qn), free(kn), free(ref);
}

static void test_norm_add(void) {
    const int32_t n = 7, dim = 640;
    const float eps = 1e-6f;
    float *x = malloc(sizeof(float) * n * dim), *y = malloc(sizeof(float) * n * dim), *w = malloc(sizeof(float) * dim);
    float *got = malloc(sizeof(float) * n * dim);
    double *ref = malloc(sizeof(double) * n * dim);
    SETUP(x && y && w && got && ref);
    tu_fill_normal(x, (size_t)n * dim, 30.0);
    tu_fill_normal(y, (size_t)n * dim, 200.0);
    tu_fill_normal(w, (size_t)dim, 2.0);
    for (int32_t t = 0; t < n; t++) {
        double ss = 0.0;
        for (int32_t i = 0; i < dim; i++) ss += (double)y[t * dim + i] * (double)y[t * dim + i];
        const double r = 1.0 / sqrt(ss / dim + (double)eps);
        for (int32_t i = 0; i < dim; i++) ref[t * dim + i] = (double)x[t * dim + i] + (double)y[t * dim + i] * r * (double)w[i];
    }
    float *dx = dup_to_device(x, sizeof(float) * n * dim), *dy = dup_to_device(y, sizeof(float) * n * dim);
    float *dw = dup_to_device(w, sizeof(float) * dim);
    CHECK(lg_op_norm_add(dx, dy, dw, n, dim, eps));
    CHECK(locks_cuda_memcpy_d2h(got, dx, sizeof(float) * n * dim));
    tu_close("norm_add", got, ref, (size_t)n * dim, 1e-5, 1e-5);
    locks_cuda_free_ptr((void **)&dx);
    locks_cuda_free_ptr((void **)&dy);
    locks_cuda_free_ptr((void **)&dw);
    free(x), free(y), free(w), free(got), free(ref);
}

/* ---- the sliding-window ring --------------------------------------------------------------- */

/* P positions in chunks of `chunk` rows (the last shorter), the ring of window - 1 + chunk
 * slots (swa.h's minimum), so it wraps several times; the first chunk also carries an idle
 * row (position -1). Reference: the keys and values of every position rounded to fp16 as
 * the ring stores them, the window's softmax in float64. */
static void test_swa(int32_t hq, int32_t hkv, int32_t d, int32_t window, int32_t chunk, int32_t P) {
    const int32_t cap = window - 1 + chunk, kv_dim = hkv * d, stride = (hq + 2 * hkv) * d, G = hq / hkv;
    const float scale = 1.f / sqrtf((float)d);
    float *all = malloc(sizeof(float) * (size_t)P * stride); /* every position's [q | k | v] row */
    float *rows = malloc(sizeof(float) * (size_t)(chunk + 1) * stride), *got = malloc(sizeof(float) * (size_t)(chunk + 1) * hq * d);
    double *ref = malloc(sizeof(double) * (size_t)(chunk + 1) * hq * d), *sc = malloc(sizeof(double) * (size_t)window);
    int32_t pos[128];
    SETUP(all && rows && got && ref && sc && chunk + 1 <= 128);
    tu_fill_normal(all, (size_t)P * stride, 1.0);
    uint16_t *dring = locks_cuda_malloc(2 * 2 * (size_t)cap * kv_dim);
    float *drows = locks_cuda_malloc(sizeof(float) * (size_t)(chunk + 1) * stride);
    float *dout = locks_cuda_malloc(sizeof(float) * (size_t)(chunk + 1) * hq * d);
    int32_t *dpos = locks_cuda_malloc(sizeof pos);
    SETUP(dring && drows && dout && dpos);
    double worst = 0.0;
    int bad = 0;
    for (int32_t p0 = 0; p0 < P; p0 += chunk) {
        const int32_t n = P - p0 < chunk ? P - p0 : chunk, idle = p0 == 0, m = n + idle;
        for (int32_t t = 0; t < n; t++) {
            memcpy(rows + (size_t)t * stride, all + (size_t)(p0 + t) * stride, sizeof(float) * stride);
            pos[t] = p0 + t;
        }
        if (idle) { /* the idle row: its K/V must not be stored (slot 0's position 0 would be overwritten) */
            tu_fill_normal(rows + (size_t)n * stride, (size_t)stride, 1.0);
            pos[n] = -1;
        }
        CHECK(locks_cuda_memcpy_h2d(drows, rows, sizeof(float) * (size_t)m * stride));
        CHECK(locks_cuda_memcpy_h2d(dpos, pos, sizeof(int32_t) * (size_t)m));
        CHECK(lg_op_swa(dring, cap, hkv, d, drows, stride, hq, dpos, m, window, scale, dout));
        CHECK(locks_cuda_memcpy_d2h(got, dout, sizeof(float) * (size_t)m * hq * d));
        for (int32_t t = 0; t < n; t++) {
            const int32_t p = p0 + t, lo = p - window + 1 > 0 ? p - window + 1 : 0;
            for (int32_t h = 0; h < hq; h++) {
                const float *q = all + (size_t)p * stride + (size_t)h * d;
                const int32_t kh = h / G;
                double mx = -INFINITY, sum = 0.0;
                for (int32_t j = lo; j <= p; j++) {
                    const float *k = all + (size_t)j * stride + (size_t)hq * d + (size_t)kh * d;
                    double s = 0.0;
                    for (int32_t i = 0; i < d; i++) s += (double)q[i] * (double)locks_f16_to_f32(locks_f32_to_f16(k[i]));
                    sc[j - lo] = s * (double)scale;
                    mx = fmax(mx, sc[j - lo]);
                }
                for (int32_t j = lo; j <= p; j++) sum += sc[j - lo] = exp(sc[j - lo] - mx);
                for (int32_t i = 0; i < d; i++) {
                    double a = 0.0;
                    for (int32_t j = lo; j <= p; j++) {
                        const float *v = all + (size_t)j * stride + (size_t)(hq + hkv) * d + (size_t)kh * d;
                        a += sc[j - lo] * (double)locks_f16_to_f32(locks_f32_to_f16(v[i]));
                    }
                    ref[((size_t)t * hq + h) * d + i] = a / sum;
                }
            }
        }
        for (size_t i = 0; i < (size_t)n * hq * d; i++) {
            const double e = fabs((double)got[i] - ref[i]);
            if (e > worst || e != e) worst = e;
            bad += !(e <= 2e-5 + 2e-5 * fabs(ref[i]));
        }
        for (int32_t i = 0; idle && i < hq * d; i++) bad += got[(size_t)n * hq * d + i] != 0.f;
    }
    test_cond(bad == 0, "swa hq %d hkv %d d %d window %d chunk %d, %d positions (ring %d): %d values off, max |d| %.2e",
              hq, hkv, d, window, chunk, P, cap, bad, worst);
    printf("  swa hq %d hkv %d d %3d window %3d chunk %2d: %4d positions through a ring of %3d: max |d| %.2e\n", hq, hkv,
           d, window, chunk, P, cap, worst);
    locks_cuda_free_ptr((void **)&dring);
    locks_cuda_free_ptr((void **)&drows);
    locks_cuda_free_ptr((void **)&dout);
    locks_cuda_free_ptr((void **)&dpos);
    free(all), free(rows), free(got), free(ref), free(sc);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_seed("test_gpu_arch_ops");
    size_t free_b = 0, total_b = 0;
    if (lg_device_memory(0, &free_b, &total_b) != LOCKS_OK) {
        printf("test_gpu_arch_ops: no CUDA device: skipped\n");
        return 77;
    }
    test_rope(1, 64, 64);
    test_rope(1, 256, 256);
    test_rope(1, 128, 64); /* n_rot < head_dim: the dims past n_rot untouched */
    test_rope(0, 128, 64);
    test_embed_geglu();
    for (int k = 0; k < 4; k++) test_qkv_fix(k & 1, k >> 1);
    test_norm_add();
    test_swa(4, 1, 256, 20, 8, 100);   /* Gemma 3 270M's heads, the test models' window */
    test_swa(2, 1, 64, 20, 16, 90);    /* test_arch's shapes */
    test_swa(8, 2, 128, 33, 5, 120);   /* GQA 4 over 2 KV heads, a window not a multiple of the warps */
    test_swa(4, 1, 256, 512, 64, 700); /* Gemma 3 270M's window */
    return test_report("test_gpu_arch_ops");
}
