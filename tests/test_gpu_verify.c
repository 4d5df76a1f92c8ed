/*
 * test_gpu_verify.c — speculative decoding on the GPU (label gpu; parts 2-3 need the
 * model too: LOCKS_MODEL or scripts/fetch-model.sh, else they are skipped with a note).
 *
 * 1. The verify attention (verify.cu: attend.cu's rows mode) against a float64 causal
 *    softmax over the stored (rounded) keys and values, on fresh random data: several
 *    (hq, hkv, d) with G up to 16 and d 64 / 128 / 256, contexts with partial pages,
 *    n = 1, 3, 8 queries (one or more row tiles), fp16 and bf16 pools, a second sequence
 *    first so the block table is not the identity; and row r BIT FOR BIT (memcmp) equal to
 *    the dense decode attention (lg_op_attend_decode: qprep + the decode kernel) of that
 *    row's query at length pos + r + 1, for two split sizes (max_list = the pages, and an
 *    engine's larger max_ctx), contexts whose rows cross page and split ends.
 * 2. SmolLM2 on the GPU: the verify pass (locks_ctx_prefill_all) against dense decode
 *    steps over the same tokens: logits equal (max |difference| 0; test_gpu_verify_exact
 *    checks the same with memcmp, K/V too, on tiny random models and SmolLM2).
 * 3. SmolLM2 on the GPU, greedy: locks_speculate (LOCKS drafts through the decode graph,
 *    the GPU verify) gives token for token what locks_generate gives under `full` on the
 *    GPU, for 4 prompts of 1.1K-3.9K tokens of this repository's docs and code, K 1, 2, 4,
 *    7, 9 (10 verify rows: products in 8-row pieces) and budgets 64, 256, and leaves the
 *    context the same length; some draft must be rejected; the
 *    acceptance rate is printed. Then a sampled run (temperature 0.8) completes, and the
 *    bad-K errors leave the context as it was.
 */
#include "test_util.h"
#include "test_model_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "cuda/locks_cuda.h"
#include "model/cuda/model_cuda.h"
#include "locks_model.h"
#include "util.h"

static void *dup_to_device(const void *h, size_t bytes) {
    void *d = locks_cuda_malloc(bytes);
    SETUP(d);
    CHECK(locks_cuda_memcpy_h2d(d, h, bytes));
    return d;
}

static double round_kv(float x, locks_dtype t) {
    return t == LOCKS_DTYPE_BF16 ? locks_bf16_to_f32(locks_f32_to_bf16(x)) : locks_f16_to_f32(locks_f32_to_f16(x));
}

/* ---- 1. the kernel ------------------------------------------------------------------- */

static void test_kernel(int32_t hq, int32_t hkv, int32_t d, int32_t pos, int32_t n, locks_dtype kvt) {
    const int32_t len = pos + n;
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = 2;
    cp.n_kv_heads = hkv;
    cp.head_dim = d;
    cp.n_pages = (len + 15) / 16 * 3 + 8; /* room for the larger max_list of the decode kernel */
    cp.max_seqs = 2;
    cp.kv_dtype = kvt;
    cp.backend = LOCKS_BACKEND_CUDA;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    SETUP(c);
    int32_t other, seq;
    CHECK(locks_cache_seq_add(c, &other));
    CHECK(locks_cache_seq_add(c, &seq));
    CHECK(locks_cache_append(c, other, 37));
    CHECK(locks_cache_append(c, seq, len));
    const size_t kvn = (size_t)len * hkv * d, qn = (size_t)n * hq * d;
    float *k = malloc(sizeof(float) * kvn), *v = malloc(sizeof(float) * kvn), *q = malloc(sizeof(float) * qn);
    float *got = malloc(sizeof(float) * qn), *got_pf = malloc(sizeof(float) * qn);
    double *ref = malloc(sizeof(double) * qn);
    SETUP(k && v && q && got && got_pf && ref);
    tu_fill_normal(k, kvn, 1.5);
    tu_fill_normal(v, kvn, 1.0);
    tu_fill_normal(q, qn, 1.5);
    float *dk = dup_to_device(k, sizeof(float) * kvn), *dv = dup_to_device(v, sizeof(float) * kvn);
    CHECK(locks_cache_write(c, seq, 1, 0, len, dk, dv));
    const int32_t G = hq / hkv;
    const double scale = 1.0 / sqrt((double)d);
    double *K = malloc(sizeof(double) * (size_t)len * d), *V = malloc(sizeof(double) * (size_t)len * d);
    double *qq = malloc(sizeof(double) * d), *o = malloc(sizeof(double) * d);
    SETUP(K && V && qq && o);
    for (int32_t h = 0; h < hq; h++) {
        const int32_t kh = h / G;
        for (int32_t t = 0; t < len; t++)
            for (int32_t i = 0; i < d; i++) {
                K[(size_t)t * d + i] = round_kv(k[((size_t)t * hkv + kh) * d + i], kvt);
                V[(size_t)t * d + i] = round_kv(v[((size_t)t * hkv + kh) * d + i], kvt);
            }
        for (int32_t r = 0; r < n; r++) {
            for (int32_t i = 0; i < d; i++) qq[i] = q[((size_t)r * hq + h) * d + i];
            tu_ref_attention(qq, K, V, pos + r + 1, d, scale, o);
            for (int32_t i = 0; i < d; i++) ref[((size_t)r * hq + h) * d + i] = o[i];
        }
    }
    float *dq = dup_to_device(q, sizeof(float) * qn), *dout = locks_cuda_malloc(sizeof(float) * qn);
    SETUP(dout);
    const int32_t mls[2] = {(len + 15) / 16, (len + 15) / 16 * 3 + 5}; /* split sizes: two engines */
    float *rows2 = malloc(sizeof(float) * qn), *one = malloc(sizeof(float) * (size_t)hq * d);
    SETUP(rows2 && one);
    CHECK(lg_op_verify_attend(c, 1, seq, pos, n, dq, hq, 0.f, 1, mls[1], dout));
    CHECK(locks_cuda_memcpy_d2h(rows2, dout, sizeof(float) * qn));
    CHECK(lg_op_verify_attend(c, 1, seq, pos, n, dq, hq, 0.f, 1, mls[0], dout));
    CHECK(locks_cuda_memcpy_d2h(got, dout, sizeof(float) * qn));
    CHECK(lg_op_prefill_attend(c, 1, seq, pos, n, dq, hq, 0.f, dout));
    CHECK(locks_cuda_memcpy_d2h(got_pf, dout, sizeof(float) * qn));
    char what[128];
    snprintf(what, sizeof what, "verify attend hq %d hkv %d d %d pos %d n %d %s", hq, hkv, d, pos, n,
             kvt == LOCKS_DTYPE_BF16 ? "bf16" : "fp16");
    /* Q and P meet the tensor cores in the kv type: as test_gpu_model_ops' prefill check
     * (bf16 has 3 bits less mantissa) */
    const double tol = kvt == LOCKS_DTYPE_BF16 ? 3e-2 : 6e-3;
    tu_close(what, got, ref, qn, tol, tol);
    /* the prefill kernel on the same input, for scale: both within tolerance of float64 */
    snprintf(what, sizeof what, "  prefill kernel, same input (pos %d n %d)", pos, n);
    tu_close(what, got_pf, ref, qn, tol, tol);
    /* bit for bit the decode attention of each row at its own length (last row first: the
     * sequence is cut back row by row) */
    int n_bad[2] = {0, 0};
    for (int32_t r = n - 1; r >= 0; r--) {
        CHECK(locks_cache_seq_truncate(c, seq, pos + r + 1));
        for (int mi = 0; mi < 2; mi++) {
            CHECK(lg_op_attend_decode(c, 1, seq, dq + (size_t)r * hq * d, hq, 0.f, mls[mi], dout));
            CHECK(locks_cuda_memcpy_d2h(one, dout, sizeof(float) * (size_t)hq * d));
            const float *row = (mi ? rows2 : got) + (size_t)r * hq * d;
            n_bad[mi] += memcmp(one, row, sizeof(float) * (size_t)hq * d) != 0;
        }
    }
    for (int mi = 0; mi < 2; mi++)
        test_cond(n_bad[mi] == 0,
                  "verify attend hq %d hkv %d d %d pos %d n %d, max_list %d: %d rows differ from the decode attention"
                  " (memcmp)",
                  hq, hkv, d, pos, n, mls[mi], n_bad[mi]);
    free(rows2), free(one);
    locks_cuda_free_ptr((void **)&dk);
    locks_cuda_free_ptr((void **)&dv);
    locks_cuda_free_ptr((void **)&dq);
    locks_cuda_free_ptr((void **)&dout);
    free(k), free(v), free(q), free(got), free(got_pf), free(ref), free(K), free(V), free(qq), free(o);
    locks_cache_free(c);
}

static void test_kernel_errors(void) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = 1;
    cp.n_kv_heads = 2;
    cp.head_dim = 64;
    cp.n_pages = 8;
    cp.backend = LOCKS_BACKEND_CUDA;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    SETUP(c);
    int32_t seq;
    CHECK(locks_cache_seq_add(c, &seq));
    CHECK(locks_cache_append(c, seq, 40));
    float *dq = locks_cuda_malloc(sizeof(float) * 40 * 34 * 64), *dout = locks_cuda_malloc(sizeof(float) * 40 * 34 * 64);
    SETUP(dq && dout);
    st = lg_op_verify_attend(c, 0, seq, 31, 9, dq, 8, 0.f, 1, 8, dout); /* 9 rows x G 4: fine */
    test_cond(st == LOCKS_OK, "9 rows of G 4: %s", locks_status_str(st));
    st = lg_op_verify_attend(c, 0, seq, 31, 9, dq, 34, 0.f, 1, 8, dout); /* G 17 > one MMA tile */
    test_cond(st == LOCKS_ERR_INVALID_ARG, "G 17: %s", locks_status_str(st));
    st = lg_op_verify_attend(c, 0, seq, 35, 6, dq, 8, 0.f, 1, 8, dout); /* past the length */
    test_cond(st == LOCKS_ERR_INVALID_ARG, "past the length: %s", locks_status_str(st));
    st = lg_op_verify_attend(c, 0, seq, 31, 9, dq, 8, 0.f, 1, 2, dout); /* 40 tokens > 2 pages of max_list */
    test_cond(st == LOCKS_ERR_INVALID_ARG, "max_list short of the length: %s", locks_status_str(st));
    locks_cuda_free_ptr((void **)&dq);
    locks_cuda_free_ptr((void **)&dout);
    locks_cache_free(c);
}

/* ---- 2-3. SmolLM2 ------------------------------------------------------------------- */

static locks_ctx *gpu_ctx(const locks_model *m, int32_t n_ctx) {
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.backend = LOCKS_BACKEND_CUDA;
    cp.step.selector = LOCKS_SEL_FULL;
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    if (!c) fprintf(stderr, "GPU context: %s\n", locks_status_str(st));
    SETUP(c);
    return c;
}

static locks_sampler *sampler(const locks_model *m, float temp, uint64_t seed) {
    locks_sampler_params sp = locks_sampler_default_params();
    sp.temp = temp;
    sp.top_k = 40;
    sp.top_p = 1.0f;
    sp.seed = seed;
    locks_status st;
    locks_sampler *s = locks_sampler_init(sp, locks_model_get_info(m).n_vocab, &st);
    SETUP(s);
    return s;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* 2: verify logits vs dense decode steps over the same K + 1 tokens. */
static void test_verify_vs_decode(const locks_model *m, const int32_t *tok, int32_t n) {
    enum { NV = 8, ROUNDS = 6 };
    const int32_t V = locks_model_get_info(m).n_vocab;
    locks_ctx *c = gpu_ctx(m, n + 64);
    float *dec = malloc(sizeof(float) * (size_t)NV * V), *ver = malloc(sizeof(float) * (size_t)NV * V);
    SETUP(dec && ver);
    double maxd = 0.0;
    int top1 = 0, total = 0, near = 0;
    for (int32_t r = 0; r < ROUNDS; r++) {
        const int32_t p0 = n - 1 - NV * (ROUNDS - r); /* different positions, partial pages */
        CHECK(locks_ctx_reset(c));
        CHECK(locks_ctx_prefill(c, tok, p0, NULL));
        for (int32_t i = 0; i < NV; i++) CHECK(locks_ctx_decode(c, tok[p0 + i], dec + (size_t)i * V));
        CHECK(locks_ctx_truncate(c, p0));
        const int32_t nv = 1 + r % NV; /* 1 .. 6 tokens */
        CHECK(locks_ctx_prefill_all(c, tok + p0, nv, ver));
        test_cond(locks_ctx_len(c) == p0 + nv, "verify: context %d, want %d", locks_ctx_len(c), p0 + nv);
        for (int32_t i = 0; i < nv; i++) {
            const float *a = dec + (size_t)i * V, *b = ver + (size_t)i * V;
            for (int32_t j = 0; j < V; j++) {
                const double dd = fabs((double)a[j] - (double)b[j]);
                if (dd > maxd) maxd = dd;
            }
            const int32_t ia = argmax(a, V), ib = argmax(b, V);
            top1 += ia == ib;
            /* a different top-1 is a near tie if dense decode itself puts the two within 0.05 */
            near += ia != ib && (double)a[ia] - (double)a[ib] < 0.05;
            total++;
        }
    }
    printf("verify vs dense decode: top-1 equal at %d of %d positions (%d near ties), max |logit difference| %.4g\n",
           top1, total, near, maxd);
    test_cond(top1 + near == total, "verify top-1 differs from dense decode at %d of %d positions (not ties)",
              total - top1 - near, total);
    /* the verify runs the decode's arithmetic row by row: not close, equal */
    test_cond(maxd == 0.0, "verify logits differ from dense decode by %.4g", maxd);
    free(dec);
    free(ver);
    locks_ctx_free(c);
}

/* 3: greedy speculation == greedy dense generation, both on the GPU. */
static void test_greedy(const locks_model *m, const char *name, const int32_t *tok, int32_t n, int *rejected,
                        int64_t *acc, int64_t *drafted) {
    enum { N_PRED = 96 };
    locks_ctx *c = gpu_ctx(m, n + N_PRED + 32);
    CHECK(locks_ctx_prefill(c, tok, n - 1, NULL));
    int32_t ref[N_PRED], got[N_PRED], n_ref = 0, n_got = 0;
    locks_sampler *s = sampler(m, 0.0f, 1);
    CHECK(locks_generate(c, tok + n - 1, 1, N_PRED, s, NULL, NULL, ref, &n_ref));
    const int32_t len_ref = locks_ctx_len(c);
    /* K 9: 10 verify rows, products in two pieces of 8 rows and more than one row tile */
    const int32_t ks[5] = {1, 2, 4, 7, 9}, budgets[2] = {64, 256};
    for (int ki = 0; ki < 5; ki++)
        for (int bi = 0; bi < 2; bi++) {
            CHECK(locks_ctx_truncate(c, n - 1));
            locks_spec_params sp = {ks[ki], locks_step_default_params()};
            sp.draft.selector = LOCKS_SEL_LOCKS;
            sp.draft.budget = budgets[bi];
            locks_spec_stats ss;
            locks_status st = locks_speculate(c, tok + n - 1, 1, N_PRED, s, &sp, NULL, NULL, got, &n_got, &ss);
            test_cond(st == LOCKS_OK, "%s K %d budget %d: %s", name, ks[ki], budgets[bi], locks_status_str(st));
            int first = 0;
            while (first < n_got && first < n_ref && got[first] == ref[first]) first++;
            test_cond(n_got == n_ref && first == n_ref, "%s K %d budget %d: %d tokens vs dense %d, first difference at %d",
                      name, ks[ki], budgets[bi], n_got, n_ref, first);
            test_cond(locks_ctx_len(c) == len_ref, "%s K %d budget %d: context %d tokens, dense %d", name, ks[ki],
                      budgets[bi], locks_ctx_len(c), len_ref);
            *rejected |= ss.n_accepted < ss.n_drafted;
            *acc += ss.n_accepted;
            *drafted += ss.n_drafted;
            printf("%-8s ctx %4d K %d budget %3d: accepted %3d of %3d drafts (%.0f%%) in %2d rounds; draft %.1f ms,"
                   " verify %.1f ms\n",
                   name, n, ks[ki], budgets[bi], ss.n_accepted, ss.n_drafted,
                   ss.n_drafted ? 100.0 * ss.n_accepted / ss.n_drafted : 0.0, ss.n_rounds, ss.draft_ms, ss.verify_ms);
        }
    locks_sampler_free(s);
    locks_ctx_free(c);
}

static void test_sampled_and_errors(const locks_model *m, const int32_t *tok, int32_t n) {
    locks_ctx *c = gpu_ctx(m, n + 128);
    CHECK(locks_ctx_prefill(c, tok, n - 1, NULL));
    locks_sampler *s = sampler(m, 0.8f, 7);
    locks_spec_params sp = {4, locks_step_default_params()};
    sp.draft.selector = LOCKS_SEL_LOCKS;
    sp.draft.budget = 64;
    int32_t out[64], n_out = 0;
    locks_spec_stats ss;
    locks_status st = locks_speculate(c, tok + n - 1, 1, 64, s, &sp, NULL, NULL, out, &n_out, &ss);
    test_cond(st == LOCKS_OK && n_out == 64, "sampled: %s, %d tokens", locks_status_str(st), n_out);
    test_cond(locks_ctx_len(c) == n - 1 + 64, "sampled: context %d, want %d", locks_ctx_len(c), n - 1 + 64);
    printf("sampled (temp 0.8, K 4, budget 64): accepted %d of %d drafts\n", ss.n_accepted, ss.n_drafted);
    CHECK(locks_ctx_truncate(c, n - 1));
    locks_spec_params bad = sp;
    bad.k = 0;
    st = locks_speculate(c, tok + n - 1, 1, 8, s, &bad, NULL, NULL, out, &n_out, NULL);
    test_cond(st == LOCKS_ERR_INVALID_ARG && locks_ctx_len(c) == n - 1, "K 0: %s, context %d", locks_status_str(st),
              locks_ctx_len(c));
    locks_sampler_free(s);
    locks_ctx_free(c);
}

int main(void) {
    /* (hq, hkv, d): G 3, 4, 1, 4, 16, 4 at d 256; contexts: the 8 rows of 1017 cross token
     * 1024 (a page end and, at 4 pages per split, a split end) */
    const int32_t shapes[][3] = {{9, 3, 64}, {32, 8, 128}, {8, 8, 128}, {4, 1, 64}, {16, 1, 128}, {8, 2, 256}};
    const int32_t ctxs[] = {5, 300, 1017, 4093, 20011};
    for (int si = 0; si < 6; si++) {
        for (int ci = 0; ci < 5; ci++) {
            const int32_t ns[3] = {1, 3, 8};
            for (int ni = 0; ni < 3; ni++)
                test_kernel(shapes[si][0], shapes[si][1], shapes[si][2], ctxs[ci], ns[ni],
                            (si + ci + ni) % 2 ? LOCKS_DTYPE_BF16 : LOCKS_DTYPE_F16);
        }
    }
    test_kernel_errors();

    char path[1024];
    if (!tu_find_model(path, sizeof path)) {
        printf("test_gpu_verify: no model (LOCKS_MODEL): SmolLM2 parts skipped\n");
        return test_report("test_gpu_verify");
    }
    locks_status st;
    locks_model *m = locks_model_load(path, &st);
    SETUP(m);
    int32_t n_doc = 0, n_code = 0, n_eng = 0, n_cp = 0;
    int32_t *doc = tu_file_tokens(m, "README.md", 3000, &n_doc);
    int32_t *code = tu_file_tokens(m, "src/attend.c", 2000, &n_code);
    int32_t *eng = tu_file_tokens(m, "docs/ENGINE.md", 1100, &n_eng);
    int32_t *cpd = tu_file_tokens(m, "docs/CONTEXT_PARALLEL.md", 3900, &n_cp);
    test_verify_vs_decode(m, doc, 1500);
    int rejected = 0;
    int64_t acc = 0, drafted = 0;
    test_greedy(m, "readme", doc, n_doc, &rejected, &acc, &drafted);
    test_greedy(m, "code", code, n_code, &rejected, &acc, &drafted);
    test_greedy(m, "engine", eng, n_eng, &rejected, &acc, &drafted);
    test_greedy(m, "cp-doc", cpd, n_cp, &rejected, &acc, &drafted);
    printf("greedy, all runs: accepted %lld of %lld drafts (%.1f%%)\n", (long long)acc, (long long)drafted,
           drafted ? 100.0 * (double)acc / (double)drafted : 0.0);
    test_cond(rejected, "no draft was ever rejected: the greedy comparison tested nothing");
    test_sampled_and_errors(m, eng, n_eng);
    free(doc);
    free(code);
    free(eng);
    free(cpd);
    locks_model_free(m);
    return test_report("test_gpu_verify");
}
