/*
 * test_gpu_plan.c — the capturable decode step (locks.h, "Capturable decode step") over
 * caller-owned device pages. One step of a 2-layer model (set_lens, pages_filled per
 * layer, a sparse and a dense decode per layer) is captured once into a CUDA graph
 * (global capture mode: any host synchronisation or allocation inside would fail the
 * capture) and replayed while the sequence grows a token per replay, crossing page
 * boundaries, so pages are summarised on the device. After every replay:
 *  - outputs and selection equal, bit for bit, the synchronous calls
 *    (seq_set_pages, pages_filled, locks_decode_step) on a second cache over the same
 *    pages;
 *  - the sparse output matches float64 attention over the tokens it selected;
 *  - fp16 pages: the dense output matches the CPU backend over the same values.
 * Then: the host state after locks_step_plan_status (lengths, tables, filled marks)
 * lets the synchronous step follow; the status word reports a NaN query, a length past
 * max_ctx (which is not applied) and a budget the forced pages exceed; misuse gives
 * clear errors. HND and NHD, fp16 and bf16, fresh random data each run. And the cache's
 * lock: plan decode, set_lens, pages_filled, status and a step graph's replay, called on
 * another thread while this one holds the lock, return only after it is released.
 */
#include "test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cache.h" /* locks_cache_enter / leave: the cache's lock, held by the test */
#include "util.h"

enum { P = LOCKS_PAGE, L = 2, HKV = 2, G = 4, HQ = HKV * G, D = 128, STEPS = 40 };

#define CU(x) SETUP((x) == cudaSuccess)

typedef struct {
    locks_dtype dt;
    locks_kv_layout lo;
} plan_case;

static uint16_t to_bits(locks_dtype dt, float x) {
    return dt == LOCKS_DTYPE_BF16 ? locks_f32_to_bf16(x) : locks_f32_to_f16(x);
}
static double from_bits(locks_dtype dt, uint16_t b) {
    return dt == LOCKS_DTYPE_BF16 ? (double)locks_bf16_to_f32(b) : (double)locks_f16_to_f32(b);
}

/* max |got - ref| / max |ref| over n values */
static double rel_err(const float *got, const double *ref, size_t n) {
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (e > md || e != e) md = e;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return mr > 0.0 ? md / mr : md;
}

/* A plan or graph call made on another thread while this one holds the cache's lock must
 * wait for it (locks.h: every call on a cache, plans and graphs included, takes its lock). */
typedef struct {
    int what;
    locks_cache *c;
    locks_step_plan *plan;
    locks_step_graph *graph;
    const float *d_q;
    float *d_out;
    const int32_t *d_len, *d_table;
    int32_t n_pages;
    cudaStream_t st;
    locks_status result;
    atomic_int done;
} lock_job;

static void *lock_call(void *arg) {
    lock_job *j = arg;
    uint32_t bits = 0;
    switch (j->what) {
    case 0: j->result = locks_step_plan_decode(j->plan, 0, j->d_q, j->d_out, j->st); break;
    case 1: j->result = locks_step_plan_set_lens(j->plan, j->d_len, j->d_table, j->n_pages, j->st); break;
    case 2: j->result = locks_step_plan_pages_filled(j->plan, 0, 1, j->st); break;
    case 3: j->result = locks_step_plan_status(j->plan, &bits); break;
    default: j->result = locks_step_graph_replay(j->graph); break;
    }
    if (j->st) cudaStreamSynchronize(j->st);
    atomic_store(&j->done, 1);
    return NULL;
}

static void check_calls_take_lock(lock_job base) {
    static const char *names[5] = {"plan_decode", "plan_set_lens", "plan_pages_filled", "plan_status", "graph_replay"};
    int waited = 1, finished = 1;
    for (int w = 0; w < 5; w++) {
        if (w == 4 && !base.graph) continue;
        lock_job j = base;
        j.what = w;
        atomic_store(&j.done, 0);
        const uint32_t mark = locks_cache_enter(base.c);
        pthread_t th;
        SETUP(pthread_create(&th, NULL, lock_call, &j) == 0);
        const struct timespec wait = {0, 150 * 1000 * 1000};
        nanosleep(&wait, NULL);
        const int early = atomic_load(&j.done);
        locks_cache_leave(base.c, LOCKS_OK, "test", mark);
        pthread_join(th, NULL);
        if (early) printf("  %s returned while another thread held the cache's lock\n", names[w]);
        waited &= !early;
        finished &= atomic_load(&j.done) && j.result == LOCKS_OK;
    }
    test_cond(waited, "a plan / graph call ran while another thread held the cache's lock");
    test_cond(finished, "a plan / graph call failed after the lock was released");
    printf("  plan decode / set_lens / pages_filled / status and graph replay wait for the cache's lock\n");
}

static const plan_case CASES[4] = {{LOCKS_DTYPE_F16, LOCKS_LAYOUT_NHD},
                                   {LOCKS_DTYPE_F16, LOCKS_LAYOUT_HND},
                                   {LOCKS_DTYPE_BF16, LOCKS_LAYOUT_NHD},
                                   {LOCKS_DTYPE_BF16, LOCKS_LAYOUT_HND}};

static void run_case(const plan_case *x) {
    const int32_t len0 = tu_int(150, 400); /* any length: partial pages included */
    const int32_t max_ctx = len0 + STEPS + tu_int(0, 40);
    const int32_t seq_pages = (max_ctx + P - 1) / P, n_pages = seq_pages + tu_int(2, 9);
    const size_t blk = (size_t)HKV * P * D, pool = (size_t)n_pages * blk;
    printf("case %s %s: len %d -> %d, max_ctx %d, pool %d pages\n", x->dt == LOCKS_DTYPE_BF16 ? "bf16" : "fp16",
           x->lo == LOCKS_LAYOUT_NHD ? "NHD" : "HND", len0, len0 + STEPS, max_ctx, n_pages);

    /* the caller's block table: a random permutation of the pool */
    int32_t *table = malloc((size_t)n_pages * 4);
    SETUP(table);
    for (int32_t i = 0; i < n_pages; i++) table[i] = i;
    for (int32_t i = n_pages - 1; i > 0; i--) {
        int32_t j = tu_int(0, i), t = table[i];
        table[i] = table[j];
        table[j] = t;
    }
    /* K/V of every token up to max_ctx, as stored (dtype bits), in the caller's layout;
     * kd/vd: the same values as doubles [L][token][HKV][D] for the references */
    uint16_t *hk[L], *hv[L];
    double *kd = malloc(sizeof(double) * L * (size_t)max_ctx * HKV * D);
    double *vd = malloc(sizeof(double) * L * (size_t)max_ctx * HKV * D);
    void *dk[L], *dv[L];
    SETUP(kd && vd);
    for (int l = 0; l < L; l++) {
        hk[l] = calloc(pool, 2);
        hv[l] = calloc(pool, 2);
        SETUP(hk[l] && hv[l]);
        for (size_t i = 0; i < pool; i++) { /* slots past the context hold junk, never read */
            hk[l][i] = to_bits(x->dt, (float)tu_normal());
            hv[l][i] = to_bits(x->dt, (float)tu_normal());
        }
        for (int32_t t = 0; t < max_ctx; t++)
            for (int h = 0; h < HKV; h++) {
                const size_t page = (size_t)table[t / P], s = (size_t)(t % P);
                const size_t off = page * blk + (x->lo == LOCKS_LAYOUT_NHD ? (s * HKV + (size_t)h) * D
                                                                            : ((size_t)h * P + s) * D);
                for (int c = 0; c < D; c++) {
                    const size_t r = (((size_t)l * max_ctx + (size_t)t) * HKV + (size_t)h) * D + (size_t)c;
                    kd[r] = from_bits(x->dt, hk[l][off + (size_t)c]);
                    vd[r] = from_bits(x->dt, hv[l][off + (size_t)c]);
                }
            }
        CU(cudaMalloc(&dk[l], pool * 2));
        CU(cudaMalloc(&dv[l], pool * 2));
        CU(cudaMemcpy(dk[l], hk[l], pool * 2, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dv[l], hv[l], pool * 2, cudaMemcpyHostToDevice));
    }

    /* A: driven by the plan; B: the same pages through the synchronous calls; C: the
     * CPU backend over host copies (fp16 only: the CPU kernels read fp16) */
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = L;
    cp.n_kv_heads = HKV;
    cp.head_dim = D;
    cp.n_pages = n_pages;
    cp.max_seqs = 2;
    cp.backend = LOCKS_BACKEND_CUDA;
    locks_ext_kv ext = {x->lo, x->dt, (const void *const *)dk, (const void *const *)dv, 0};
    locks_ext_kv ext_h = {x->lo, x->dt, (const void *const *)hk, (const void *const *)hv, 0};
    locks_status err;
    locks_cache *A = locks_cache_init_ext(cp, &ext, &err);
    locks_cache *B = locks_cache_init_ext(cp, &ext, &err);
    SETUP(A && B);
    locks_cache *C = NULL;
    if (x->dt == LOCKS_DTYPE_F16) {
        locks_cache_params cc = cp;
        cc.backend = LOCKS_BACKEND_CPU;
        C = locks_cache_init_ext(cc, &ext_h, &err);
        SETUP(C);
    }
    locks_cache *all[3] = {A, B, C};
    int32_t sid[3];
    for (int i = 0; i < 3; i++) {
        if (!all[i]) continue;
        CHECK(locks_cache_seq_add(all[i], &sid[i]));
        CHECK(locks_cache_seq_set_pages(all[i], sid[i], table, (len0 + P - 1) / P, len0));
        for (int l = 0; l < L; l++) CHECK(locks_cache_pages_filled(all[i], l, table, len0 / P));
    }

    locks_step_params ps = locks_step_default_params(), pd = ps;
    ps.budget = 16 * tu_int(6, 10);
    pd.budget = 16 * n_pages; /* >= any context: every page (the dense answer) */
    /* misuse at set-up */
    test_cond(!locks_step_plan_init(A, &sid[0], 1, HQ, &ps, 16 * n_pages + 1, &err) && err == LOCKS_ERR_INVALID_ARG,
              "max_ctx past the pool: %s", locks_status_str(err));
    test_cond(!locks_step_plan_init(A, &sid[0], 1, HQ + 1, &ps, max_ctx, &err) && err == LOCKS_ERR_INVALID_ARG,
              "heads not a multiple of Hkv: %s", locks_status_str(err));
    {
        locks_step_params pq = ps;
        pq.selector = LOCKS_SEL_QUEST;
        test_cond(!locks_step_plan_init(A, &sid[0], 1, HQ, &pq, max_ctx, &err) && err == LOCKS_ERR_UNSUPPORTED,
                  "quest plan: %s", locks_status_str(err));
        int32_t bad = 1;
        test_cond(!locks_step_plan_init(A, &bad, 1, HQ, &ps, max_ctx, &err) && err == LOCKS_ERR_NO_SEQ,
                  "unknown sequence: %s", locks_status_str(err));
    }
    if (C)
        test_cond(!locks_step_plan_init(C, &sid[2], 1, HQ, &ps, max_ctx, &err) && err == LOCKS_ERR_UNSUPPORTED,
                  "CPU plan: %s", locks_status_str(err));
    locks_step_plan *sp = locks_step_plan_init(A, &sid[0], 1, HQ, &ps, max_ctx, &err);
    locks_step_plan *dp = locks_step_plan_init(A, &sid[0], 1, HQ, &pd, max_ctx, &err);
    SETUP(sp && dp);

    /* the step's fixed device buffers */
    int32_t *d_len, *d_table;
    float *d_q[L], *d_os[L], *d_od[L], *d_ob;
    const size_t qn = (size_t)HQ * D;
    CU(cudaMalloc((void **)&d_len, 4));
    CU(cudaMalloc((void **)&d_table, (size_t)seq_pages * 4));
    CU(cudaMemcpy(d_table, table, (size_t)seq_pages * 4, cudaMemcpyHostToDevice));
    CU(cudaMalloc((void **)&d_ob, qn * 4));
    for (int l = 0; l < L; l++) {
        CU(cudaMalloc((void **)&d_q[l], qn * 4));
        CU(cudaMalloc((void **)&d_os[l], qn * 4));
        CU(cudaMalloc((void **)&d_od[l], qn * 4));
    }
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CU(cudaDeviceSynchronize());

    /* capture */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    locks_status cs = locks_step_plan_set_lens(sp, d_len, d_table, seq_pages, st);
    for (int l = 0; l < L && cs == LOCKS_OK; l++) cs = locks_step_plan_pages_filled(sp, l, 1, st);
    for (int l = 0; l < L && cs == LOCKS_OK; l++) {
        cs = locks_step_plan_decode(dp, l, d_q[l], d_od[l], st);
        if (cs == LOCKS_OK) cs = locks_step_plan_decode(sp, l, d_q[l], d_os[l], st);
    }
    cudaError_t ce = cudaStreamEndCapture(st, &graph);
    test_cond(cs == LOCKS_OK && ce == cudaSuccess, "capture: %s, %s", locks_status_str(cs), cudaGetErrorString(ce));
    SETUP(cs == LOCKS_OK && ce == cudaSuccess);
    CU(cudaGraphInstantiate(&exec, graph, 0));

    float *q = malloc(qn * 4), *os = malloc(qn * 4), *od = malloc(qn * 4), *ob = malloc(qn * 4);
    double *qd = malloc(qn * 8), *ref = malloc(qn * 8);
    double *kt = malloc(sizeof(double) * (size_t)max_ctx * D), *vt = malloc(sizeof(double) * (size_t)max_ctx * D);
    const int32_t maxp = seq_pages;
    int32_t *sel_p = malloc((size_t)HKV * maxp * 4), *sel_n = malloc(HKV * 4);
    int32_t *gsel_p = malloc((size_t)HKV * maxp * 4), gsel_n[HKV];
    SETUP(q && os && od && ob && qd && ref && kt && vt && sel_p && sel_n && gsel_p);
    locks_selection sel = {sel_p, sel_n, maxp};
    int same_out = 1, same_sel = 1, filled = 0;
    double worst_ref = 0.0, worst_cpu = 0.0;
    for (int32_t step = 1; step <= STEPS; step++) {
        const int32_t len = len0 + step;
        float qs[L][HQ * D];
        for (int l = 0; l < L; l++) {
            tu_fill_normal(qs[l], qn, 1.0);
            CU(cudaMemcpy(d_q[l], qs[l], qn * 4, cudaMemcpyHostToDevice));
        }
        CU(cudaMemcpy(d_len, &len, 4, cudaMemcpyHostToDevice));
        CU(cudaGraphLaunch(exec, st));
        CU(cudaStreamSynchronize(st));
        /* the graph's selection (the last decode: sparse, layer L-1) before B's calls */
        const int32_t *dsp, *dsn;
        int32_t stride;
        CHECK(locks_step_plan_selection(sp, &dsp, &dsn, &stride));
        CU(cudaMemcpy2D(gsel_p, (size_t)maxp * 4, dsp, (size_t)stride * 4, (size_t)maxp * 4, HKV,
                        cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(gsel_n, dsn, HKV * 4, cudaMemcpyDeviceToHost));
        /* the synchronous calls on B (and C) */
        for (int i = 1; i < 3; i++) {
            if (!all[i]) continue;
            CHECK(locks_cache_seq_set_pages(all[i], sid[i], table, (len + P - 1) / P, len));
            if (len % P == 0)
                for (int l = 0; l < L; l++) CHECK(locks_cache_pages_filled(all[i], l, &table[len / P - 1], 1));
        }
        filled += len % P == 0;
        for (int l = 0; l < L; l++) {
            CU(cudaMemcpy(os, d_os[l], qn * 4, cudaMemcpyDeviceToHost));
            CU(cudaMemcpy(od, d_od[l], qn * 4, cudaMemcpyDeviceToHost));
            CHECK(locks_decode_step(B, l, &sid[1], 1, d_q[l], HQ, &ps, d_ob, &sel, NULL));
            CU(cudaMemcpy(ob, d_ob, qn * 4, cudaMemcpyDeviceToHost));
            if (memcmp(os, ob, qn * 4) != 0) {
                if (same_out) fprintf(stderr, "  step %d layer %d: sparse out differs (%g vs %g)\n", step, l,
                                      (double)os[0], (double)ob[0]);
                same_out = 0;
            }
            if (l == L - 1)
                for (int h = 0; h < HKV; h++)
                    if (gsel_n[h] != sel_n[h] || memcmp(gsel_p + h * maxp, sel_p + h * maxp, (size_t)sel_n[h] * 4)) {
                        if (same_sel) fprintf(stderr, "  step %d head %d: selection differs\n", step, h);
                        same_sel = 0;
                    }
            CHECK(locks_decode_step(B, l, &sid[1], 1, d_q[l], HQ, &pd, d_ob, NULL, NULL));
            CU(cudaMemcpy(ob, d_ob, qn * 4, cudaMemcpyDeviceToHost));
            if (memcmp(od, ob, qn * 4) != 0) {
                if (same_out) fprintf(stderr, "  step %d layer %d: dense out differs\n", step, l);
                same_out = 0;
            }
            /* float64: sparse output over its selection (B's, equal to the graph's where checked) */
            for (size_t i = 0; i < qn; i++) qd[i] = qs[l][i];
            for (int h = 0; h < HQ; h++) {
                const int kh = h / G;
                int32_t n = 0;
                for (int32_t i = 0; i < sel_n[kh]; i++)
                    for (int32_t t = sel_p[kh * maxp + i] * P; t < sel_p[kh * maxp + i] * P + P && t < len; t++) {
                        const size_t r = (((size_t)l * max_ctx + (size_t)t) * HKV + (size_t)kh) * D;
                        memcpy(kt + (size_t)n * D, kd + r, D * sizeof(double));
                        memcpy(vt + (size_t)n * D, vd + r, D * sizeof(double));
                        n++;
                    }
                tu_ref_attention(qd + (size_t)h * D, kt, vt, n, D, 1.0 / sqrt((double)D), ref + (size_t)h * D);
            }
            double e = rel_err(os, ref, qn);
            if (e > worst_ref) worst_ref = e;
            if (C) { /* the dense output against the CPU backend */
                float oc[HQ * D];
                CHECK(locks_decode_step(C, l, &sid[2], 1, qs[l], HQ, &pd, oc, NULL, NULL));
                for (size_t i = 0; i < qn; i++) ref[i] = oc[i];
                e = rel_err(od, ref, qn);
                if (e > worst_cpu) worst_cpu = e;
            }
        }
    }
    const double tol = x->dt == LOCKS_DTYPE_BF16 ? 2e-2 : 5e-3;
    test_cond(filled >= 2, "the run crossed %d page boundaries", filled);
    test_cond(same_out, "graph outputs bit-identical to the synchronous calls");
    test_cond(same_sel, "graph selection identical to the synchronous calls");
    test_cond(worst_ref <= tol, "sparse output vs float64 over its selection: rel err %.3g > %.3g", worst_ref, tol);
    if (C) test_cond(worst_cpu <= 5e-3, "dense output vs the CPU backend: rel err %.3g", worst_cpu);
    if (C)
        printf("  %d replays: bit-identical %d/%d, vs float64 %.2e, vs CPU %.2e\n", STEPS, same_out, same_sel,
               worst_ref, worst_cpu);
    else
        printf("  %d replays: bit-identical %d/%d, vs float64 %.2e (bf16: no CPU backend)\n", STEPS, same_out,
               same_sel, worst_ref);

    /* the host catches up: lengths, tables, filled marks; then the synchronous step */
    uint32_t bits = 99;
    CHECK(locks_step_plan_status(sp, &bits));
    test_cond(bits == 0, "status after clean replays: %u", bits);
    test_cond(locks_cache_seq_len(A, sid[0]) == len0 + STEPS, "host length %d after status, want %d",
              locks_cache_seq_len(A, sid[0]), len0 + STEPS);
    {
        locks_status s1 = locks_decode_step(A, L - 1, &sid[0], 1, d_q[L - 1], HQ, &ps, d_os[0], NULL, NULL);
        CHECK(locks_decode_step(B, L - 1, &sid[1], 1, d_q[L - 1], HQ, &ps, d_ob, NULL, NULL));
        CU(cudaMemcpy(os, d_os[0], qn * 4, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(ob, d_ob, qn * 4, cudaMemcpyDeviceToHost));
        test_cond(s1 == LOCKS_OK && memcmp(os, ob, qn * 4) == 0, "synchronous step after status: %s, same %d",
                  locks_status_str(s1), memcmp(os, ob, qn * 4) == 0);
    }

    /* device errors: a NaN query; a length past max_ctx (not applied) */
    const int32_t cur = len0 + STEPS;
    CU(cudaMemcpy(d_len, &cur, 4, cudaMemcpyHostToDevice));
    q[0] = NAN;
    for (size_t i = 1; i < qn; i++) q[i] = 0.5f;
    CU(cudaMemcpy(d_q[0], q, qn * 4, cudaMemcpyHostToDevice));
    CU(cudaGraphLaunch(exec, st));
    CHECK(locks_step_plan_status(sp, &bits));
    test_cond(bits & LOCKS_DEV_NONFINITE, "NaN query: status %u", bits);
    CHECK(locks_step_plan_status(dp, &bits));
    test_cond(bits & LOCKS_DEV_NONFINITE, "NaN query, dense plan: status %u", bits);
    q[0] = 0.5f;
    CU(cudaMemcpy(d_q[0], q, qn * 4, cudaMemcpyHostToDevice));
    const int32_t too_long = max_ctx + 1;
    CU(cudaMemcpy(d_len, &too_long, 4, cudaMemcpyHostToDevice));
    CU(cudaGraphLaunch(exec, st));
    CHECK(locks_step_plan_status(sp, &bits));
    test_cond(bits == LOCKS_DEV_BAD_LEN, "length past max_ctx: status %u", bits);
    test_cond(locks_cache_seq_len(A, sid[0]) == cur, "length past max_ctx not applied: %d",
              locks_cache_seq_len(A, sid[0]));
    /* a budget the forced pages exceed, enqueued without a graph */
    {
        locks_step_params pb = ps;
        pb.budget = 20;
        locks_step_plan *bp = locks_step_plan_init(A, &sid[0], 1, HQ, &pb, max_ctx, &err);
        SETUP(bp);
        CHECK(locks_step_plan_decode(bp, 0, d_q[0], d_os[0], st));
        CHECK(locks_step_plan_status(bp, &bits));
        test_cond(bits == LOCKS_DEV_BUDGET, "forced pages over the budget: status %u", bits);
        locks_step_plan_free(bp);
    }
    test_cond(locks_step_plan_decode(sp, L, d_q[0], d_os[0], st) == LOCKS_ERR_INVALID_ARG, "layer out of range");
    test_cond(locks_step_plan_pages_filled(sp, 0, 65, st) == LOCKS_ERR_INVALID_ARG, "n_new past 64");
    {   /* an owned cache has no device set_lens / pages_filled */
        locks_cache *O = locks_cache_init(cp, &err);
        SETUP(O);
        int32_t so;
        CHECK(locks_cache_seq_add(O, &so));
        locks_step_plan *op = locks_step_plan_init(O, &so, 1, HQ, &ps, 64, &err);
        SETUP(op);
        test_cond(locks_step_plan_set_lens(op, d_len, NULL, 0, st) == LOCKS_ERR_UNSUPPORTED, "owned: set_lens");
        test_cond(locks_step_plan_pages_filled(op, 0, 1, st) == LOCKS_ERR_UNSUPPORTED, "owned: pages_filled");
        locks_step_plan_free(op);
        locks_cache_free(O);
    }

    if (x == &CASES[0]) { /* the lock: on A, whose plan sp was captured above */
        float *d_qg;
        CU(cudaMalloc((void **)&d_qg, qn * 4));
        CU(cudaMemcpy(d_qg, d_q[0], qn * 4, cudaMemcpyDeviceToDevice));
        locks_step_graph *g = locks_step_graph_capture(A, 0, &sid[0], 1, d_qg, HQ, &ps, max_ctx, d_ob, &err);
        test_cond(g != NULL, "graph capture on A: %s", locks_status_str(err));
        lock_job base = {0, A, sp, g, d_q[0], d_os[0], d_len, d_table, seq_pages, st, LOCKS_OK, 0};
        check_calls_take_lock(base);
        locks_step_graph_free(g);
        CU(cudaFree(d_qg));
    }

    CU(cudaGraphExecDestroy(exec));
    CU(cudaGraphDestroy(graph));
    locks_step_plan_free(sp);
    locks_step_plan_free(dp);
    for (int i = 0; i < 3; i++) locks_cache_free(all[i]);
    CU(cudaStreamDestroy(st));
    for (int l = 0; l < L; l++) {
        CU(cudaFree(d_q[l]));
        CU(cudaFree(d_os[l]));
        CU(cudaFree(d_od[l]));
        CU(cudaFree(dk[l]));
        CU(cudaFree(dv[l]));
        free(hk[l]);
        free(hv[l]);
    }
    CU(cudaFree(d_len));
    CU(cudaFree(d_table));
    CU(cudaFree(d_ob));
    free(table), free(kd), free(vd), free(q), free(os), free(od), free(ob), free(qd), free(ref), free(kt), free(vt);
    free(sel_p), free(sel_n), free(gsel_p);
}

int main(void) {
    tu_seed("test_gpu_plan");
    for (int i = 0; i < 4; i++) run_case(&CASES[i]);
    return test_report("test_gpu_plan");
}
