/*
 * test_gpu_model_ops.c — the GPU forward pass's kernels against float64 references of
 * their CPU twins (llama.c's rmsnorm / rope / SwiGLU / embedding, attend.c's causal
 * prefill attention, sampler.c's chain), on fresh random data; then the decode engine
 * on a small random-weight model: graph replay equals kernel-by-kernel launches bit for
 * bit, and decode (K/V append, summaries, LOCKS or dense step) agrees with prefill.
 * Needs a GPU (label gpu).
 */
#include "test_util.h"

#include "cache.h"
#include "cuda/locks_cuda.h"
#include "cuda/model_cuda.h"
#include "util.h"

static void *dup_to_device(const void *h, size_t bytes) {
    void *d = locks_cuda_malloc(bytes);
    SETUP(d);
    CHECK(locks_cuda_memcpy_h2d(d, h, bytes));
    return d;
}

/* ---- rmsnorm, rope, swiglu, embed -------------------------------------------------- */

static void test_rmsnorm(void) {
    const int32_t dims[] = {576, 4096};
    for (int di = 0; di < 2; di++) {
        const int32_t n = 5, dim = dims[di];
        float *x = malloc(sizeof(float) * n * dim), *w = malloc(sizeof(float) * dim);
        float *got = malloc(sizeof(float) * n * dim);
        uint16_t *g16 = malloc(2 * (size_t)n * dim);
        double *ref = malloc(sizeof(double) * n * dim);
        SETUP(x && w && got && g16 && ref);
        tu_fill_normal(x, (size_t)n * dim, 3.0);
        tu_fill_normal(w, (size_t)dim, 1.0);
        const float eps = 1e-5f;
        for (int32_t t = 0; t < n; t++) {
            double ss = 0;
            for (int32_t i = 0; i < dim; i++) ss += (double)x[t * dim + i] * (double)x[t * dim + i];
            const double r = 1.0 / sqrt(ss / dim + (double)eps);
            for (int32_t i = 0; i < dim; i++) ref[t * dim + i] = (double)x[t * dim + i] * r * (double)w[i];
        }
        float *dx = dup_to_device(x, sizeof(float) * n * dim), *dw = dup_to_device(w, sizeof(float) * dim);
        float *dout = locks_cuda_malloc(sizeof(float) * n * dim);
        CHECK(lg_op_rmsnorm(dx, dw, n, dim, eps, LOCKS_DTYPE_F32, dout));
        CHECK(locks_cuda_memcpy_d2h(got, dout, sizeof(float) * n * dim));
        tu_close("rmsnorm f32", got, ref, (size_t)n * dim, 1e-5, 1e-5);
        CHECK(lg_op_rmsnorm(dx, dw, n, dim, eps, LOCKS_DTYPE_F16, dout));
        CHECK(locks_cuda_memcpy_d2h(g16, dout, 2 * (size_t)n * dim));
        for (int32_t i = 0; i < n * dim; i++) got[i] = locks_f16_to_f32(g16[i]);
        tu_close("rmsnorm f16", got, ref, (size_t)n * dim, 1e-4, 1e-3);
        CHECK(lg_op_rmsnorm(dx, dw, n, dim, eps, LOCKS_DTYPE_BF16, dout));
        CHECK(locks_cuda_memcpy_d2h(g16, dout, 2 * (size_t)n * dim));
        for (int32_t i = 0; i < n * dim; i++) got[i] = locks_bf16_to_f32(g16[i]);
        tu_close("rmsnorm bf16", got, ref, (size_t)n * dim, 1e-3, 8e-3);
        locks_cuda_free_ptr((void **)&dx);
        locks_cuda_free_ptr((void **)&dw);
        locks_cuda_free_ptr((void **)&dout);
        free(x), free(w), free(got), free(g16), free(ref);
    }
}

static void test_rope(void) {
    const int32_t n = 7, heads = 5, hd = 64, stride = heads * hd + 24, n_rot = 64;
    float *x = malloc(sizeof(float) * n * stride), *got = malloc(sizeof(float) * n * stride);
    double *ref = malloc(sizeof(double) * n * stride);
    float inv[32];
    int32_t pos[7];
    SETUP(x && got && ref);
    tu_fill_normal(x, (size_t)n * stride, 1.0);
    for (int32_t i = 0; i < n_rot / 2; i++) inv[i] = (float)pow(500000.0, -2.0 * i / n_rot);
    for (int32_t t = 0; t < n; t++) pos[t] = tu_int(0, 1 << 20);
    for (int32_t i = 0; i < n * stride; i++) ref[i] = x[i];
    for (int32_t t = 0; t < n; t++)
        for (int32_t h = 0; h < heads; h++)
            for (int32_t i = 0; i < n_rot / 2; i++) {
                const double a = (double)pos[t] * (double)inv[i];
                const float c = (float)cos(a), s = (float)sin(a); /* as llama.c's rope */
                const size_t o = (size_t)t * stride + (size_t)h * hd + 2 * i;
                ref[o] = (double)x[o] * (double)c - (double)x[o + 1] * (double)s;
                ref[o + 1] = (double)x[o] * (double)s + (double)x[o + 1] * (double)c;
            }
    float *dx = dup_to_device(x, sizeof(float) * n * stride), *dinv = dup_to_device(inv, sizeof inv);
    int32_t *dpos = dup_to_device(pos, sizeof pos);
    CHECK(lg_op_rope(dx, n, stride, heads, hd, n_rot, dinv, dpos));
    CHECK(locks_cuda_memcpy_d2h(got, dx, sizeof(float) * n * stride));
    tu_close("rope", got, ref, (size_t)n * stride, 2e-6, 2e-6);
    locks_cuda_free_ptr((void **)&dx);
    locks_cuda_free_ptr((void **)&dinv);
    locks_cuda_free_ptr((void **)&dpos);
    free(x), free(got), free(ref);
}

static void test_swiglu_embed(void) {
    const int32_t n = 3, ffn = 1536;
    float *gu = malloc(sizeof(float) * n * 2 * ffn), *got = malloc(sizeof(float) * n * ffn);
    double *ref = malloc(sizeof(double) * n * ffn);
    SETUP(gu && got && ref);
    tu_fill_normal(gu, (size_t)n * 2 * ffn, 4.0);
    for (int32_t t = 0; t < n; t++)
        for (int32_t j = 0; j < ffn; j++) {
            const double g = gu[t * 2 * ffn + j], u = gu[t * 2 * ffn + ffn + j];
            ref[t * ffn + j] = g / (1.0 + exp(-g)) * u;
        }
    float *dgu = dup_to_device(gu, sizeof(float) * n * 2 * ffn), *dout = locks_cuda_malloc(sizeof(float) * n * ffn);
    CHECK(lg_op_swiglu(dgu, n, ffn, LOCKS_DTYPE_F32, dout));
    CHECK(locks_cuda_memcpy_d2h(got, dout, sizeof(float) * n * ffn));
    tu_close("swiglu", got, ref, (size_t)n * ffn, 1e-6, 1e-5);

    /* embedding gather: exact */
    const int32_t V = 1000, D = 96, nt = 6;
    uint16_t *e = malloc(2 * (size_t)V * D);
    float *x = malloc(sizeof(float) * nt * D);
    double *xr = malloc(sizeof(double) * nt * D);
    int32_t tok[6];
    SETUP(e && x && xr);
    for (int32_t i = 0; i < V * D; i++) e[i] = locks_f32_to_f16((float)tu_normal());
    for (int32_t t = 0; t < nt; t++) tok[t] = tu_int(0, V - 1);
    for (int32_t t = 0; t < nt; t++)
        for (int32_t i = 0; i < D; i++) xr[t * D + i] = locks_f16_to_f32(e[(size_t)tok[t] * D + i]);
    void *de = dup_to_device(e, 2 * (size_t)V * D);
    int32_t *dtok = dup_to_device(tok, sizeof tok);
    float *dx = locks_cuda_malloc(sizeof(float) * nt * D);
    CHECK(lg_op_embed(de, LOCKS_DTYPE_F16, dtok, nt, D, dx));
    CHECK(locks_cuda_memcpy_d2h(x, dx, sizeof(float) * nt * D));
    tu_close("embed", x, xr, (size_t)nt * D, 0.0, 0.0);
    locks_cuda_free_ptr((void **)&dgu);
    locks_cuda_free_ptr((void **)&dout);
    locks_cuda_free_ptr(&de);
    locks_cuda_free_ptr((void **)&dtok);
    locks_cuda_free_ptr((void **)&dx);
    free(gu), free(got), free(ref), free(e), free(x), free(xr);
}

/* ---- prefill attention --------------------------------------------------------------- */

static void test_prefill(int32_t hq, int32_t hkv, int32_t d, int32_t pos, int32_t n) {
    const int32_t len = pos + n;
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = 2;
    cp.n_kv_heads = hkv;
    cp.head_dim = d;
    cp.n_pages = (len + 15) / 16 + 3;
    cp.max_seqs = 2;
    cp.backend = LOCKS_BACKEND_CUDA;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    SETUP(c);
    int32_t other, seq;
    CHECK(locks_cache_seq_add(c, &other)); /* a second sequence first: non-trivial block table */
    CHECK(locks_cache_seq_add(c, &seq));
    CHECK(locks_cache_append(c, other, 20));
    CHECK(locks_cache_append(c, seq, len));
    const size_t kvn = (size_t)len * hkv * d, qn = (size_t)n * hq * d;
    float *k = malloc(sizeof(float) * kvn), *v = malloc(sizeof(float) * kvn), *q = malloc(sizeof(float) * qn);
    float *got = malloc(sizeof(float) * qn);
    double *ref = malloc(sizeof(double) * qn);
    SETUP(k && v && q && got && ref);
    tu_fill_normal(k, kvn, 1.5);
    tu_fill_normal(v, kvn, 1.0);
    tu_fill_normal(q, qn, 1.5);
    float *dk = dup_to_device(k, sizeof(float) * kvn), *dv = dup_to_device(v, sizeof(float) * kvn);
    CHECK(locks_cache_write(c, seq, 1, 0, len, dk, dv));
    /* reference on the stored (fp16-rounded) keys and values, causal, float64 */
    const int32_t G = hq / hkv;
    const double scale = 1.0 / sqrt((double)d);
    double *K = malloc(sizeof(double) * (size_t)len * d), *V = malloc(sizeof(double) * (size_t)len * d);
    double *qq = malloc(sizeof(double) * d), *o = malloc(sizeof(double) * d);
    SETUP(K && V && qq && o);
    for (int32_t h = 0; h < hq; h++) {
        const int32_t kh = h / G;
        for (int32_t t = 0; t < len; t++)
            for (int32_t i = 0; i < d; i++) {
                K[(size_t)t * d + i] = locks_f16_to_f32(locks_f32_to_f16(k[((size_t)t * hkv + kh) * d + i]));
                V[(size_t)t * d + i] = locks_f16_to_f32(locks_f32_to_f16(v[((size_t)t * hkv + kh) * d + i]));
            }
        for (int32_t r = 0; r < n; r++) {
            for (int32_t i = 0; i < d; i++) qq[i] = q[((size_t)r * hq + h) * d + i];
            tu_ref_attention(qq, K, V, pos + r + 1, d, scale, o);
            for (int32_t i = 0; i < d; i++) ref[((size_t)r * hq + h) * d + i] = o[i];
        }
    }
    float *dq = dup_to_device(q, sizeof(float) * qn), *dout = locks_cuda_malloc(sizeof(float) * qn);
    CHECK(lg_op_prefill_attend(c, 1, seq, pos, n, dq, hq, 0.f, dout));
    CHECK(locks_cuda_memcpy_d2h(got, dout, sizeof(float) * qn));
    char what[96];
    snprintf(what, sizeof what, "prefill attend hq %d hkv %d d %d pos %d n %d", hq, hkv, d, pos, n);
    /* Q and P meet the tensor cores in fp16: ~1e-3 relative on O(1) outputs */
    tu_close(what, got, ref, qn, 6e-3, 6e-3);
    locks_cuda_free_ptr((void **)&dk);
    locks_cuda_free_ptr((void **)&dv);
    locks_cuda_free_ptr((void **)&dq);
    locks_cuda_free_ptr((void **)&dout);
    free(k), free(v), free(q), free(got), free(ref), free(K), free(V), free(qq), free(o);
    locks_cache_free(c);
}

/* ---- sampling ------------------------------------------------------------------------ */

typedef struct {
    float x;
    int32_t id;
} cand;
static int by_desc(const void *a, const void *b) {
    const cand *p = a, *q = b;
    if (p->x > q->x) return -1;
    if (p->x < q->x) return 1;
    return p->id < q->id ? -1 : p->id > q->id;
}

/* sampler.c's chain with the device's draw; *near = 1 if r falls within 1e-9 of a boundary
 * (where expf's last ulp may decide). */
static int32_t ref_sample(const float *x, int32_t V, const lg_sample_params *p, float u, cand *c, int *near) {
    *near = 0;
    if (p->temp <= 0.f) {
        int32_t b = 0;
        for (int32_t i = 1; i < V; i++)
            if (x[i] > x[b]) b = i;
        return b;
    }
    for (int32_t i = 0; i < V; i++) c[i] = (cand){x[i], i};
    qsort(c, (size_t)V, sizeof *c, by_desc);
    int32_t k = p->top_k > 0 && p->top_k < LG_MAX_TOPK ? p->top_k : LG_MAX_TOPK;
    if (k > V) k = V;
    const float mx = c[0].x;
    double sum = 0;
    for (int32_t i = 0; i < k; i++) sum += (double)expf((c[i].x - mx) / p->temp);
    if (p->top_p < 1.f) {
        double cum = 0;
        int32_t keep = k;
        for (int32_t i = 0; i < k; i++) {
            cum += (double)expf((c[i].x - mx) / p->temp) / sum;
            if (cum >= (double)p->top_p) {
                keep = i + 1;
                break;
            }
        }
        k = keep;
        sum = 0;
        for (int32_t i = 0; i < k; i++) sum += (double)expf((c[i].x - mx) / p->temp);
    }
    const double r = (double)u * sum;
    double cum = 0;
    for (int32_t i = 0; i < k; i++) {
        cum += (double)expf((c[i].x - mx) / p->temp);
        if (fabs(r - cum) < 1e-9 * sum) *near = 1;
        if (r < cum) return c[i].id;
    }
    return c[k - 1].id;
}

static void test_sample(void) {
    const int32_t rows = 4, Vs[] = {1000, 49152};
    const lg_sample_params ps[] = {{0.f, 0, 1.f, 7}, {0.8f, 40, 0.95f, 11}, {1.3f, 0, 0.9f, 12}, {0.7f, 2000, 1.f, 13}};
    uint64_t *dcnt = locks_cuda_malloc(8);
    SETUP(dcnt);
    const uint64_t zero = 0;
    CHECK(locks_cuda_memcpy_h2d(dcnt, &zero, 8));
    uint64_t counter = 0;
    int mism = 0, total = 0;
    for (int vi = 0; vi < 2; vi++) {
        const int32_t V = Vs[vi];
        float *x = malloc(sizeof(float) * rows * V);
        cand *c = malloc(sizeof(cand) * V);
        SETUP(x && c);
        for (int rep = 0; rep < 6; rep++) {
            tu_fill_normal(x, (size_t)rows * V, 2.0 + rep);
            /* ties at the top: the lowest id must win the argmax */
            x[V / 2] = x[V - 1] = 40.f;
            for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
                float *dx = dup_to_device(x, sizeof(float) * rows * V);
                int32_t *dt = locks_cuda_malloc(sizeof(int32_t) * rows), got[4];
                if (rep % 2) x[V / 2] = x[V - 1] = -40.f; /* and random tops */
                CHECK(locks_cuda_memcpy_h2d(dx, x, sizeof(float) * rows * V));
                CHECK(lg_op_sample(dx, rows, V, &ps[pi], dcnt, dt));
                CHECK(locks_cuda_memcpy_d2h(got, dt, sizeof got));
                for (int32_t r = 0; r < rows; r++) {
                    int near;
                    const float u = lg_sample_uniform(ps[pi].seed, counter, r);
                    const int32_t want = ref_sample(x + (size_t)r * V, V, &ps[pi], u, c, &near);
                    total++;
                    if (got[r] != want) {
                        mism++;
                        test_cond(near, "sample V %d params %zu row %d: got %d want %d", V, pi, r, got[r], want);
                    }
                }
                counter++;
                locks_cuda_free_ptr((void **)&dx);
                locks_cuda_free_ptr((void **)&dt);
            }
        }
        free(x), free(c);
    }
    printf("  sample: %d draws, %d on a rounding boundary\n", total, mism);
    locks_cuda_free_ptr((void **)&dcnt);
}

/* ---- the decode products (gemv.cu): every input mode, n = 1..8, both 16-bit types ---- */

static float round16(float v, locks_dtype t) {
    return t == LOCKS_DTYPE_BF16 ? locks_bf16_to_f32(locks_f32_to_bf16(v)) : locks_f16_to_f32(locks_f32_to_f16(v));
}
static uint16_t to16(float v, locks_dtype t) { return t == LOCKS_DTYPE_BF16 ? locks_f32_to_bf16(v) : locks_f32_to_f16(v); }

static void test_gemv(void) {
    /* rows not a multiple of a block's rows, cols with a partial last stride of the loop */
    const int32_t rows = 333, cols = 1032;
    const locks_dtype types[] = {LOCKS_DTYPE_F16, LOCKS_DTYPE_BF16};
    const char *mname[] = {"x16", "f32", "norm", "swiglu"};
    const float eps = 1e-5f;
    uint16_t *w16 = malloc(2 * (size_t)rows * cols), *x16 = malloc(2 * (size_t)8 * cols);
    float *wf = malloc(sizeof(float) * rows * cols), *xin = malloc(sizeof(float) * 8 * 2 * cols);
    float *nw = malloc(sizeof(float) * cols), *y0 = malloc(sizeof(float) * 8 * rows), *got = malloc(sizeof(float) * 8 * rows);
    double *xr = malloc(sizeof(double) * 8 * cols), *ref = malloc(sizeof(double) * 8 * rows);
    SETUP(w16 && x16 && wf && xin && nw && y0 && got && xr && ref);
    void *dw = locks_cuda_malloc(2 * (size_t)rows * cols), *dx = locks_cuda_malloc(sizeof(float) * 8 * 2 * cols);
    float *dnw = locks_cuda_malloc(sizeof(float) * cols), *dy = locks_cuda_malloc(sizeof(float) * 8 * rows);
    SETUP(dw && dx && dnw && dy);
    double worst_ss = 0;
    for (int ti = 0; ti < 2; ti++) {
        const locks_dtype wt = types[ti];
        for (int32_t i = 0; i < rows * cols; i++) {
            w16[i] = to16((float)(tu_normal() / sqrt((double)cols)), wt);
            wf[i] = wt == LOCKS_DTYPE_BF16 ? locks_bf16_to_f32(w16[i]) : locks_f16_to_f32(w16[i]);
        }
        CHECK(locks_cuda_memcpy_h2d(dw, w16, 2 * (size_t)rows * cols));
        for (int mode = LG_GEMV_X16; mode <= LG_GEMV_SWIGLU; mode++)
            for (int32_t n = 1; n <= LG_GEMV_MAX_N; n++) {
                const int beta = mode == LG_GEMV_F32 || mode == LG_GEMV_SWIGLU;
                const int32_t xw = mode == LG_GEMV_SWIGLU ? 2 * cols : cols;
                tu_fill_normal(xin, (size_t)n * xw, mode == LG_GEMV_F32 ? 2.0 : 3.0);
                tu_fill_normal(nw, (size_t)cols, 1.0);
                tu_fill_normal(y0, (size_t)n * rows, 1.0);
                for (int32_t t = 0; t < n; t++) {
                    double ss = 0;
                    for (int32_t k = 0; k < cols; k++) ss += (double)xin[t * cols + k] * (double)xin[t * cols + k];
                    const float r = (float)(1.0 / sqrt(ss / cols + (double)eps));
                    for (int32_t k = 0; k < cols; k++) {
                        float v;
                        if (mode == LG_GEMV_X16) {
                            x16[t * cols + k] = to16(xin[t * cols + k], wt);
                            v = round16(xin[t * cols + k], wt);
                        } else if (mode == LG_GEMV_F32) {
                            v = round16(xin[t * cols + k], wt);
                        } else if (mode == LG_GEMV_NORM) {
                            v = round16(xin[t * cols + k] * r * nw[k], wt);
                        } else {
                            const float g = xin[t * xw + k], u = xin[t * xw + cols + k];
                            v = round16(g / (1.f + expf(-g)) * u, wt);
                        }
                        xr[t * cols + k] = v;
                    }
                }
                double amax = 0, ss_ref[8];
                for (int32_t t = 0; t < n; t++) {
                    ss_ref[t] = 0;
                    for (int32_t r = 0; r < rows; r++) {
                        double a = beta ? (double)y0[t * rows + r] : 0.0;
                        for (int32_t k = 0; k < cols; k++) a += (double)wf[(size_t)r * cols + k] * xr[t * cols + k];
                        ref[t * rows + r] = a;
                        ss_ref[t] += a * a;
                        if (fabs(a) > amax) amax = fabs(a);
                    }
                }
                if (mode == LG_GEMV_X16) CHECK(locks_cuda_memcpy_h2d(dx, x16, 2 * (size_t)n * cols));
                else CHECK(locks_cuda_memcpy_h2d(dx, xin, sizeof(float) * n * xw));
                CHECK(locks_cuda_memcpy_h2d(dnw, nw, sizeof(float) * cols));
                CHECK(locks_cuda_memcpy_h2d(dy, y0, sizeof(float) * n * rows));
                float ss[8];
                /* odd n with programmatic dependent launch: a NORM then waits for the kernel that
                 * wrote its sums of squares */
                CHECK(lg_op_gemv(mode, dw, wt, rows, cols, n, dx, dnw, eps, dy, beta, n & 1, ss));
                CHECK(locks_cuda_memcpy_d2h(got, dy, sizeof(float) * n * rows));
                char what[64];
                snprintf(what, sizeof what, "gemv %s %s n %d", wt == LOCKS_DTYPE_BF16 ? "bf16" : "f16", mname[mode], n);
                /* a NORM input may round the other way where r differs in the last bit */
                tu_close(what, got, ref, (size_t)n * rows, 2e-3 * (amax > 1 ? amax : 1), 1e-4);
                for (int32_t t = 0; t < n; t++) {
                    const double rel = fabs((double)ss[t] - ss_ref[t]) / ss_ref[t];
                    if (rel > worst_ss) worst_ss = rel;
                }
            }
    }
    printf("  gemv: 64 products (4 input modes x n 1..8 x f16/bf16), worst rel. error of the row sums of squares %.2e\n",
           worst_ss);
    test_cond(worst_ss < 1e-4, "gemv: partial sums of squares off (worst rel %.3g)", worst_ss);
    locks_cuda_free_ptr(&dw);
    locks_cuda_free_ptr(&dx);
    locks_cuda_free_ptr((void **)&dnw);
    locks_cuda_free_ptr((void **)&dy);
    free(w16), free(x16), free(wf), free(xin), free(nw), free(y0), free(got), free(xr), free(ref);
}

/* ---- the decode engine on a small random model ------------------------------------------- */

typedef struct {
    locks_cache *c;
    lg_ctx *e;
} eng;

static eng eng_make(lg_model *m, const lg_shape *s, int32_t n_ctx, const locks_step_params *step) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = s->n_layers;
    cp.n_kv_heads = s->n_kv_heads;
    cp.head_dim = s->head_dim;
    cp.n_pages = (n_ctx + 15) / 16;
    cp.max_seqs = 1;
    cp.backend = LOCKS_BACKEND_CUDA;
    locks_status st;
    eng g;
    g.c = locks_cache_init(cp, &st);
    SETUP(g.c);
    int32_t seq;
    CHECK(locks_cache_seq_add(g.c, &seq));
    SETUP(seq == 0);
    g.e = lg_ctx_init(m, g.c, 1, 256, &st);
    SETUP(g.e);
    CHECK(lg_set_step(g.e, step, cp.n_pages * 16));
    return g;
}

static void test_engine(void) {
    lg_shape s = {0};
    s.n_vocab = 777;
    s.dim = 256;
    s.n_layers = 3;
    s.n_heads = 8;
    s.n_kv_heads = 2;
    s.head_dim = 64;
    s.ffn_dim = 640;
    s.n_rot = 64;
    s.rope_theta = 10000.f;
    s.norm_eps = 1e-5f;
    s.wtype = LOCKS_DTYPE_F16;
    locks_status st;
    lg_model *m = lg_model_alloc(&s, &st);
    SETUP(m);
    CHECK(lg_model_fill_random(m, tu_next()));
    const int32_t n_prompt = 300, n_dec = 60, n_ctx = 512;
    int32_t toks[360];
    for (int32_t i = 0; i < n_prompt + n_dec; i++) toks[i] = tu_int(0, s.n_vocab - 1);
    float *la = malloc(sizeof(float) * s.n_vocab), *lb = malloc(sizeof(float) * s.n_vocab);
    float *lp = malloc(sizeof(float) * s.n_vocab);
    double *ref = malloc(sizeof(double) * s.n_vocab);
    SETUP(la && lb && lp && ref);

    /* graph replay == kernel by kernel, LOCKS at a budget that selects, through page fills */
    locks_step_params sp = locks_step_default_params();
    sp.selector = LOCKS_SEL_LOCKS;
    sp.budget = 96;
    eng a = eng_make(m, &s, n_ctx, &sp), b = eng_make(m, &s, n_ctx, &sp);
    const lg_sample_params greedy = {0.f, 0, 1.f, 1};
    CHECK(lg_set_sampler(a.e, &greedy));
    CHECK(lg_set_sampler(b.e, &greedy));
    CHECK(locks_cache_append(a.c, 0, n_prompt));
    CHECK(locks_cache_append(b.c, 0, n_prompt));
    CHECK(lg_prefill(a.e, 0, toks, 256, 0, NULL));
    CHECK(lg_prefill(a.e, 0, toks + 256, n_prompt - 256, 256, la));
    CHECK(lg_prefill(b.e, 0, toks, 256, 0, NULL));
    CHECK(lg_prefill(b.e, 0, toks + 256, n_prompt - 256, 256, lb));
    test_cond(memcmp(la, lb, sizeof(float) * s.n_vocab) == 0, "engine: two prefills of one prompt differ");
    int same = 1, same_tok = 1;
    for (int32_t i = 0; i < n_dec; i++) {
        int32_t na, nb;
        CHECK(locks_cache_append(a.c, 0, 1));
        CHECK(locks_cache_append(b.c, 0, 1));
        CHECK(lg_set_tokens(a.e, &toks[n_prompt + i]));
        CHECK(lg_set_tokens(b.e, &toks[n_prompt + i]));
        CHECK(lg_decode(a.e, 1, &na, la));
        CHECK(lg_decode(b.e, 0, &nb, lb));
        same &= memcmp(la, lb, sizeof(float) * s.n_vocab) == 0;
        same_tok &= na == nb;
    }
    test_cond(same && same_tok, "engine: graph replay differs from the uncaptured launches (logits %d, tokens %d)",
              same, same_tok);

    /* sampling in the loop: the sampled token is the next input on the device; graph and
     * uncaptured draw the same tokens (same counter), all in range */
    const lg_sample_params hot = {0.9f, 50, 0.9f, 1234};
    CHECK(lg_set_sampler(a.e, &hot));
    CHECK(lg_set_sampler(b.e, &hot));
    int32_t seq_a[8], seq_b[8], in_range = 1;
    for (int32_t i = 0; i < 8; i++) {
        CHECK(locks_cache_append(a.c, 0, 1));
        CHECK(locks_cache_append(b.c, 0, 1));
        CHECK(lg_decode(a.e, 1, &seq_a[i], NULL));
        CHECK(lg_decode(b.e, 0, &seq_b[i], NULL));
        in_range &= seq_a[i] >= 0 && seq_a[i] < s.n_vocab;
    }
    test_cond(in_range && memcmp(seq_a, seq_b, sizeof seq_a) == 0, "engine: sampled continuations differ or out of range");

    /* summaries of the pages the graph filled while decoding, against the CPU build from
     * the keys the graph stored (sign-free: the reconstruction mu + C V^T) */
    {
        const int32_t d = s.head_dim, hkv = s.n_kv_heads, r = 8;
        int32_t n_pages;
        const int32_t *bt = locks_cache_block_table(a.c, 0, &n_pages);
        uint16_t *k16 = malloc(2 * (size_t)hkv * 16 * d);
        float *kf = malloc(sizeof(float) * 16 * d), *mu = malloc(sizeof(float) * d), *ba = malloc(sizeof(float) * r * d);
        float *co = malloc(sizeof(float) * 16 * r), *mu2 = malloc(sizeof(float) * d), *ba2 = malloc(sizeof(float) * r * d);
        float *co2 = malloc(sizeof(float) * 16 * r);
        SETUP(bt && k16 && kf && mu && ba && co && mu2 && ba2 && co2);
        double worst = 0, worst_mu = 0;
        int checked = 0;
        for (int32_t pg = n_prompt / 16; pg < (n_prompt + n_dec + 8) / 16; pg++)
            for (int32_t l = 0; l < s.n_layers; l++) {
                CHECK(locks_cuda_kv_page_get(a.c->cuda, l, bt[pg], k16, NULL));
                for (int32_t h = 0; h < hkv; h++) {
                    for (int32_t i = 0; i < 16 * d; i++) kf[i] = locks_f16_to_f32(k16[(size_t)h * 16 * d + i]);
                    CHECK(locks_cache_summary_get(a.c, l, h, bt[pg], mu, ba, co));
                    CHECK(locks_summary_build_f32(d, r, kf, mu2, ba2, co2));
                    double num = 0, den = 0, mn = 0, md = 0;
                    for (int32_t t = 0; t < 16; t++)
                        for (int32_t i = 0; i < d; i++) {
                            double x1 = mu[i], x2 = mu2[i];
                            for (int32_t j = 0; j < r; j++) {
                                x1 += (double)co[t * r + j] * (double)ba[j * d + i];
                                x2 += (double)co2[t * r + j] * (double)ba2[j * d + i];
                            }
                            num += (x1 - x2) * (x1 - x2);
                            den += ((double)kf[t * d + i] - (double)mu2[i]) * ((double)kf[t * d + i] - (double)mu2[i]);
                        }
                    for (int32_t i = 0; i < d; i++) {
                        mn += ((double)mu[i] - (double)mu2[i]) * ((double)mu[i] - (double)mu2[i]);
                        md += (double)mu2[i] * (double)mu2[i];
                    }
                    const double rel = sqrt(num / den), rel_mu = sqrt(mn / md);
                    if (rel > worst) worst = rel;
                    if (rel_mu > worst_mu) worst_mu = rel_mu;
                    checked++;
                }
            }
        printf("  engine: %d decode-filled page summaries vs CPU build: worst reconstruction diff %.3f, mu %.4f\n",
               checked, worst, worst_mu);
        test_cond(checked > 0 && worst < 0.25 && worst_mu < 0.05,
                  "engine: summaries of decode-filled pages off (reconstruction %.3f, mu %.4f)", worst, worst_mu);
        free(k16), free(kf), free(mu), free(ba), free(co), free(mu2), free(ba2), free(co2);
    }

    /* decode (dense) vs prefill of the same tokens: K/V append, positions, summaries */
    locks_step_params fp = locks_step_default_params();
    fp.selector = LOCKS_SEL_FULL;
    eng d = eng_make(m, &s, n_ctx, &fp), p = eng_make(m, &s, n_ctx, &fp);
    const int32_t n_all = n_prompt + 20;
    CHECK(locks_cache_append(p.c, 0, n_all));
    CHECK(lg_prefill(p.e, 0, toks, 256, 0, NULL));
    CHECK(lg_prefill(p.e, 0, toks + 256, n_all - 256, 256, lp));
    CHECK(locks_cache_append(d.c, 0, 250));
    CHECK(lg_prefill(d.e, 0, toks, 250, 0, NULL));
    for (int32_t i = 250; i < n_all; i++) {
        CHECK(locks_cache_append(d.c, 0, 1));
        CHECK(lg_set_tokens(d.e, &toks[i]));
        CHECK(lg_decode(d.e, 1, NULL, la));
    }
    double amax = 0;
    for (int32_t i = 0; i < s.n_vocab; i++) {
        ref[i] = lp[i];
        if (fabs(lp[i]) > amax) amax = fabs(lp[i]);
    }
    tu_close("engine: decode vs prefill logits", la, ref, (size_t)s.n_vocab, 2e-2 * (amax > 1 ? amax : 1), 2e-2);

    lg_ctx_free(a.e), lg_ctx_free(b.e), lg_ctx_free(d.e), lg_ctx_free(p.e);
    locks_cache_free(a.c), locks_cache_free(b.c), locks_cache_free(d.c), locks_cache_free(p.c);
    lg_model_free(m);
    free(la), free(lb), free(lp), free(ref);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines survive a timeout kill */
    tu_seed("test_gpu_model_ops");
    test_rmsnorm();
    test_rope();
    test_swiglu_embed();
    const int32_t shapes[][3] = {{9, 3, 64}, {32, 8, 128}, {8, 2, 256}, {32, 2, 128}};
    const int32_t cases[][2] = {{0, 1}, {0, 77}, {37, 50}, {300, 130}};
    for (int si = 0; si < 4; si++)
        for (int ci = 0; ci < 4; ci++) test_prefill(shapes[si][0], shapes[si][1], shapes[si][2], cases[ci][0], cases[ci][1]);
    test_sample();
    test_gemv();
    /* the engine with its decode products through cuBLAS and the small kernels (default),
     * through gemv.cu, and through gemv.cu with programmatic dependent launch */
    const char *paths[] = {"0", "1", "2"};
    for (int i = 0; i < 3; i++) {
        setenv("LOCKS_CUDA_GEMV", paths[i], 1);
        printf("  engine, LOCKS_CUDA_GEMV=%s\n", paths[i]);
        test_engine();
    }
    return test_report("test_gpu_model_ops");
}
