/*
 * test_attend.c — paged attention against a float64 reference on fresh random data:
 *  - K/V stored as fp16 of the input, read back through locks_cache_k_page/v_page;
 *  - locks_attend over random page lists (partial page included or not) per KV head,
 *    output and log-sum-exp, every query head of the group;
 *  - locks_decode_step with budget >= context is exactly the `full` selector and
 *    matches dense float64 attention; its selection is every page;
 *  - locks_attend_prefix_n (speculation's verify pass) bit for bit locks_attend_prefix of
 *    each query, across page boundaries and chunk-size changes;
 *  - locks_prefill_attend (causal) over a chunk of positions; and chunks that start
 *    mid-page, span more than one query tile and end in a partial tile, G in {1, 3, 4},
 *    d in {64, 128};
 *  - G in {1, 3, 4, 6, 8} x d in {64, 128, 72} for page lists, dense decode and verify
 *    (every head-group width of the AVX2 kernels: 4 + 2, a last group of 1, 2, 3);
 * each on every kernel set (portable, AVX2, AVX-512: locks_cpu_set_isa).
 */
#include "test_util.h"

#include "util.h"
#include "vmath.h"

enum { P = LOCKS_PAGE };

/* every kernel set, widest first (capped to what the CPU has) */
static const locks_isa isas[3] = {LOCKS_ISA_AVX512, LOCKS_ISA_AVX2, LOCKS_ISA_PORTABLE};

/* Forces kernel set isa: 1, or 0 (said so) when this CPU lacks it. */
static int use_isa(locks_isa isa) {
    if (locks_cpu_set_isa(isa) == 0) return 1;
    printf("  (no %s kernels on this CPU: skipped)\n", locks_isa_name(isa));
    return 0;
}

/* The perf modes: LOCKS_ISA=<set> times that set alone (-1: every set). */
static int perf_only(void) {
    const char *e = getenv("LOCKS_ISA");
    locks_isa isa;
    return e && locks_isa_parse(e, &isa) == 0 ? (int)isa : -1;
}

typedef struct {
    int32_t H, G, d, len;
    locks_cache *c;
    int32_t seq;
    double *K, *V; /* [len][H][d] fp16-rounded values as stored */
} fixture;

/* A cache with one sequence of len tokens written in random-sized chunks. */
static fixture make_fixture(int32_t H, int32_t G, int32_t d, int32_t len, int32_t threads,
                            locks_summary_prec prec, int32_t rank) {
    fixture f = {H, G, d, len, NULL, -1, NULL, NULL};
    locks_cache_params cp = locks_cache_default_params();
    cp.n_kv_heads = H;
    cp.head_dim = d;
    cp.n_pages = len / P + 4;
    cp.max_seqs = 2;
    cp.n_threads = threads;
    cp.summary_prec = prec;
    cp.rank = rank;
    locks_status err;
    f.c = locks_cache_init(cp, &err);
    CHECK(err);
    CHECK(locks_cache_seq_add(f.c, &f.seq));
    size_t n = (size_t)len * H * d;
    float *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    f.K = malloc(n * sizeof(double));
    f.V = malloc(n * sizeof(double));
    tu_fill_normal(k, n, 1.0);
    tu_fill_normal(v, n, 1.0);
    for (size_t i = 0; i < n; i++) { /* a per-channel offset makes attention peaky */
        k[i] += (float)((i % (size_t)d) % 5) * 0.3f;
        f.K[i] = (double)locks_f16_to_f32(locks_f32_to_f16(k[i]));
        f.V[i] = (double)locks_f16_to_f32(locks_f32_to_f16(v[i]));
    }
    int32_t pos = 0;
    while (pos < len) {
        int32_t m = tu_int(1, 40);
        if (m > len - pos) m = len - pos;
        CHECK(locks_cache_append(f.c, f.seq, m));
        CHECK(locks_cache_write(f.c, f.seq, 0, pos, m, k + (size_t)pos * H * d, v + (size_t)pos * H * d));
        pos += m;
    }
    free(k);
    free(v);
    return f;
}

static void free_fixture(fixture *f) {
    locks_cache_free(f->c);
    free(f->K);
    free(f->V);
}

/* Reference attention of query q (float) for KV head h over a page list. */
static double ref_pages(const fixture *f, const float *q, int32_t h, const int32_t *pages, int32_t n,
                        double scale, double *out) {
    const int32_t d = f->d;
    double *K = malloc(sizeof(double) * (size_t)n * P * d), *V = malloc(sizeof(double) * (size_t)n * P * d);
    double qd[256];
    for (int32_t c = 0; c < d; c++) qd[c] = (double)q[c];
    int32_t nt = 0;
    for (int32_t i = 0; i < n; i++)
        for (int32_t t = pages[i] * P; t < pages[i] * P + P && t < f->len; t++, nt++) {
            memcpy(K + (size_t)nt * d, f->K + ((size_t)t * f->H + h) * d, sizeof(double) * (size_t)d);
            memcpy(V + (size_t)nt * d, f->V + ((size_t)t * f->H + h) * d, sizeof(double) * (size_t)d);
        }
    double lse = tu_ref_attention(qd, K, V, nt, d, scale, out);
    free(K);
    free(V);
    return lse;
}

static void test_storage(const fixture *f) {
    int32_t np;
    const int32_t *bt = locks_cache_block_table(f->c, f->seq, &np);
    test_cond(bt && np == (f->len + P - 1) / P, "block table pages %d", np);
    size_t bad = 0;
    for (int32_t t = 0; t < f->len; t++)
        for (int32_t h = 0; h < f->H; h++) {
            const uint16_t *kp = locks_cache_k_page(f->c, 0, bt[t / P]);
            const uint16_t *vp = locks_cache_v_page(f->c, 0, bt[t / P]);
            for (int32_t c = 0; c < f->d; c++) {
                size_t o = ((size_t)h * P + (size_t)(t % P)) * f->d + c;
                if ((double)locks_f16_to_f32(kp[o]) != f->K[((size_t)t * f->H + h) * f->d + c]) bad++;
                if ((double)locks_f16_to_f32(vp[o]) != f->V[((size_t)t * f->H + h) * f->d + c]) bad++;
            }
        }
    test_cond(bad == 0, "%zu stored K/V values differ from fp16(input)", bad);
}

static void test_page_lists(const fixture *f) {
    const int32_t H = f->H, G = f->G, d = f->d, Hq = H * G, np = (f->len + P - 1) / P;
    float *q = malloc(sizeof(float) * (size_t)Hq * d), *out = malloc(sizeof(float) * (size_t)Hq * d);
    float lse[64];
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)H * np), n_pages[16];
    double ref[256];
    for (int32_t trial = 0; trial < 4; trial++) {
        tu_fill_normal(q, (size_t)Hq * d, 1.0);
        for (int32_t h = 0; h < H; h++) {
            n_pages[h] = 0;
            for (int32_t j = 0; j < np; j++)
                if (tu_uniform() < 0.4 || j == np - 1) pages[h * np + n_pages[h]++] = j;
        }
        CHECK(locks_attend(f->c, 0, f->seq, q, Hq, 0.0f, pages, n_pages, np, out, lse));
        for (int32_t hq = 0; hq < Hq; hq++) {
            int32_t h = hq / G;
            double rl = ref_pages(f, q + (size_t)hq * d, h, pages + h * np, n_pages[h], 1.0 / sqrt(d), ref);
            tu_close("attend out", out + (size_t)hq * d, ref, (size_t)d, 2e-5, 1e-4);
            tu_close("attend lse", lse + hq, &rl, 1, 1e-4, 1e-5);
        }
    }
    free(q);
    free(out);
    free(pages);
}

static void test_dense(const fixture *f) {
    const int32_t H = f->H, G = f->G, d = f->d, Hq = H * G, np = (f->len + P - 1) / P;
    float *q = malloc(sizeof(float) * (size_t)Hq * d);
    float *o1 = malloc(sizeof(float) * (size_t)Hq * d), *o2 = malloc(sizeof(float) * (size_t)Hq * d);
    int32_t *pages = malloc(sizeof(int32_t) * (size_t)H * np), n_pages[16], all[4096];
    tu_fill_normal(q, (size_t)Hq * d, 1.0);
    locks_step_params p = locks_step_default_params();
    p.budget = f->len + tu_int(0, 100);
    locks_selection sel = {pages, n_pages, np};
    locks_step_stats stats;
    CHECK(locks_decode_step(f->c, 0, &f->seq, 1, q, Hq, &p, o1, &sel, &stats));
    for (int32_t h = 0; h < H; h++) {
        test_cond(n_pages[h] == np, "budget >= context: head %d got %d of %d pages", h, n_pages[h], np);
        for (int32_t j = 0; j < n_pages[h]; j++) test_cond(pages[h * np + j] == j, "dense page order");
    }
    p.selector = LOCKS_SEL_FULL;
    CHECK(locks_decode_step(f->c, 0, &f->seq, 1, q, Hq, &p, o2, NULL, NULL));
    test_cond(memcmp(o1, o2, sizeof(float) * (size_t)Hq * d) == 0, "budget >= context must equal `full` bit for bit");
    for (int32_t j = 0; j < np; j++) all[j] = j;
    double ref[256];
    for (int32_t hq = 0; hq < Hq; hq++) {
        ref_pages(f, q + (size_t)hq * d, hq / G, all, np, 1.0 / sqrt(d), ref);
        tu_close("dense out", o1 + (size_t)hq * d, ref, (size_t)d, 2e-5, 1e-4);
    }
    uint64_t dense = 4ull * d * (uint64_t)f->len * H;
    test_cond(stats.bytes_dense == dense && stats.bytes_kv == dense, "dense bytes %llu %llu want %llu",
              (unsigned long long)stats.bytes_dense, (unsigned long long)stats.bytes_kv, (unsigned long long)dense);
    free(q);
    free(o1);
    free(o2);
    free(pages);
}

/* locks_attend_prefix_n (the verify pass) == locks_attend_prefix of each query, bit for
 * bit, for random (len, n), and len ranges where the chunk size of locks_attend_run
 * changes between the queries (threads 2: at H * pages = 144, 160, ...). */
static void test_prefix_n(const fixture *f, int32_t trials) {
    const int32_t H = f->H, G = f->G, d = f->d, Hq = H * G, nmax = 20;
    float *q = malloc(sizeof(float) * (size_t)nmax * Hq * d);
    float *o1 = malloc(sizeof(float) * (size_t)nmax * Hq * d), *o2 = malloc(sizeof(float) * (size_t)nmax * Hq * d);
    int bad = 0, crossed = 0, crossed_chunk = 0;
    for (int32_t t = 0; t < trials; t++) {
        int32_t n = tu_int(1, nmax < f->len ? nmax : f->len);
        int32_t len0 = tu_int(1, f->len - n + 1);
        if (t % 3 == 0 && n > 1) { /* a chunk-size change (threads 2) inside the range, if the sequence has one */
            int32_t np = tu_int(2, f->len / P + 1);
            while (np <= f->len / P && !(H * np >= 144 && (H * np) / 16 != (H * (np - 1)) / 16)) np++;
            const int32_t at = (np - 1) * P + 1 - tu_int(1, n - 1); /* lengths (np - 1) * P and + 1 inside */
            if (np <= f->len / P && at >= 1 && at + n - 1 <= f->len) {
                len0 = at;
                crossed_chunk++;
            }
        }
        tu_fill_normal(q, (size_t)n * Hq * d, 1.0);
        memset(o1, 0xff, sizeof(float) * (size_t)n * Hq * d);
        CHECK(locks_attend_prefix_n(f->c, 0, f->seq, len0, n, q, Hq, o1));
        for (int32_t i = 0; i < n; i++)
            CHECK(locks_attend_prefix(f->c, 0, f->seq, len0 + i, q + (size_t)i * Hq * d, Hq, o2 + (size_t)i * Hq * d));
        if (memcmp(o1, o2, sizeof(float) * (size_t)n * Hq * d) != 0) {
            bad++;
            fprintf(stderr, "  prefix_n len %d n %d differs from prefix\n", len0, n);
        }
        crossed += n > 1 && (len0 - 1) / P != (len0 + n - 2) / P;
    }
    test_cond(bad == 0, "locks_attend_prefix_n == locks_attend_prefix bit for bit (%d of %d differ)", bad, trials);
    test_cond(crossed > 0 || f->len < 2 * P, "some ranges cross a page boundary");
    test_cond(crossed_chunk > 0 || f->len < 16 * 144 / H, "some ranges cross a chunk-size change");
    /* bad input */
    test_cond(locks_attend_prefix_n(f->c, 0, f->seq, f->len, 2, q, Hq, o1) == LOCKS_ERR_INVALID_ARG, "past the end");
    test_cond(locks_attend_prefix_n(f->c, 0, f->seq, 0, 1, q, Hq, o1) == LOCKS_ERR_INVALID_ARG, "len 0");
    test_cond(locks_attend_prefix_n(f->c, 0, f->seq, 1, 0, q, Hq, o1) == LOCKS_ERR_INVALID_ARG, "n 0");
    free(q);
    free(o1);
    free(o2);
}

/* locks_prefill_attend of query tokens [pos, pos + n) against the float64 causal
 * reference: every token sees keys [0, its position]. */
static void test_prefill(const fixture *f, int32_t pos, int32_t n) {
    const int32_t H = f->H, G = f->G, d = f->d, Hq = H * G;
    float *q = malloc(sizeof(float) * (size_t)n * Hq * d), *out = malloc(sizeof(float) * (size_t)n * Hq * d);
    tu_fill_normal(q, (size_t)n * Hq * d, 1.0);
    float scale = 0.07f;
    CHECK(locks_prefill_attend(f->c, 0, f->seq, pos, n, q, Hq, scale, out));
    int32_t all[4096];
    double ref[256];
    for (int32_t j = 0; j < 4096; j++) all[j] = j;
    int before = tu_failures;
    for (int32_t i = 0; i < n && tu_failures == before; i++) {
        fixture g = *f;
        g.len = pos + i + 1; /* causal: tokens [0, pos + i] */
        for (int32_t hq = 0; hq < Hq; hq++) {
            ref_pages(&g, q + ((size_t)i * Hq + hq) * d, hq / G, all, (g.len + P - 1) / P, (double)scale, ref);
            tu_close("prefill out", out + ((size_t)i * Hq + hq) * d, ref, (size_t)d, 2e-5, 1e-4);
        }
    }
    if (tu_failures != before)
        fprintf(stderr, "  prefill H=%d G=%d d=%d pos=%d n=%d kernels %s\n", H, G, d, pos, n, locks_isa_name(locks_cpu_isa()));
    free(q);
    free(out);
}

/* The query-tiled prefill: tiles hold 64 / G tokens, so chunks are drawn longer than a
 * tile with a partial last tile, starting mid-page; then (d = 64) the whole sequence from 0;
 * G in {1, 3, 4}, d in {64, 128}, both kernel sets, two threads. */
static void test_prefill_tiles(void) {
    const int32_t groups[3] = {1, 3, 4}, dims[2] = {64, 128};
    for (int32_t ii = 0; ii < 3; ii++) {
        if (!use_isa(isas[ii])) continue;
        for (int32_t gi = 0; gi < 3; gi++)
            for (int32_t di = 0; di < 2; di++) {
                const int32_t G = groups[gi], T = 64 / G, H = tu_int(1, 3), len = tu_int(2 * T + 16, 2 * T + 60);
                fixture f = make_fixture(H, G, dims[di], len, 2, LOCKS_SUMMARY_Q, 8);
                int32_t n = T + tu_int(1, T - 1 > 1 ? T - 1 : 1); /* > one tile, last one partial */
                if (n % T == 0) n++;
                int32_t pos = tu_int(1, len - n);
                if (pos % P == 0) pos--; /* mid-page start */
                printf("  prefill tiles: H=%d G=%d d=%d len=%d pos=%d n=%d kernels %s\n", H, G, dims[di], len, pos, n,
                       locks_isa_name(locks_cpu_isa()));
                test_prefill(&f, pos, n);
                if (di == 0) test_prefill(&f, 0, len);
                free_fixture(&f);
            }
    }
}

/* Perf mode (LOCKS_ATTEND_PERF=<tokens>, not part of the checks): one layer of
 * SmolLM2-135M's prefill attention (3 KV heads, G = 3, d = 64), the context written
 * in chunks of 64 tokens and each chunk attended as the engine does; prints CPU
 * seconds (best of 3) per kernel set (LOCKS_ISA=<set>: that one alone). */
static void perf_prefill(int32_t len) {
    const int32_t H = 3, G = 3, d = 64, Hq = H * G, chunk = 64;
    const int only = perf_only();
    for (int32_t ii = 0; ii < 3; ii++) {
        if ((only >= 0 && (int)isas[ii] != only) || !use_isa(isas[ii])) continue;
        fixture f = make_fixture(H, G, d, len, 1, LOCKS_SUMMARY_Q, 8);
        float *q = malloc(sizeof(float) * (size_t)chunk * Hq * d), *out = malloc(sizeof(float) * (size_t)chunk * Hq * d);
        tu_fill_normal(q, (size_t)chunk * Hq * d, 1.0);
        double best = 1e30;
        for (int32_t rep = 0; rep < 3; rep++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
            for (int32_t pos = 0; pos < len; pos += chunk) {
                int32_t n = len - pos < chunk ? len - pos : chunk;
                CHECK(locks_prefill_attend(f.c, 0, f.seq, pos, n, q, Hq, 0.0f, out));
            }
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
            double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            best = s < best ? s : best;
        }
        printf("perf: prefill attention, %d tokens (chunks of %d), H=%d G=%d d=%d, kernels %s: %.3f CPU-s per layer\n",
               len, chunk, H, G, d, locks_isa_name(locks_cpu_isa()), best);
        free(q);
        free(out);
        free_fixture(&f);
    }
    locks_cpu_set_isa(LOCKS_ISA_BEST);
}

/* LOCKS_VERIFY_PERF=len: CPU seconds (best of 5, 1 thread, AVX2) of the verify attention
 * of n = 1, 5, 9 queries at a context of len (SmolLM2's H=3 G=3 d=64): n calls of
 * locks_attend_prefix vs one locks_attend_prefix_n, side by side. */
static void perf_verify(int32_t len) {
    const int32_t H = 3, G = 3, d = 64, Hq = H * G;
    fixture f = make_fixture(H, G, d, len, 1, LOCKS_SUMMARY_Q, 8);
    float *q = malloc(sizeof(float) * 9 * Hq * d), *out = malloc(sizeof(float) * 9 * Hq * d);
    tu_fill_normal(q, (size_t)9 * Hq * d, 1.0);
    for (int32_t n = 1; n <= 9; n += 4) {
        double best[2] = {1e30, 1e30};
        for (int32_t rep = 0; rep < 5; rep++)
            for (int32_t way = 0; way < 2; way++) {
                struct timespec t0, t1;
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
                if (way == 0)
                    for (int32_t i = 0; i < n; i++)
                        CHECK(locks_attend_prefix(f.c, 0, f.seq, len - n + 1 + i, q + (size_t)i * Hq * d, Hq,
                                                  out + (size_t)i * Hq * d));
                else
                    CHECK(locks_attend_prefix_n(f.c, 0, f.seq, len - n + 1, n, q, Hq, out));
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
                double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
                best[way] = sec < best[way] ? sec : best[way];
            }
        printf("perf: verify attention, context %d, %d queries: %d x prefix %.3f ms, prefix_n %.3f ms (%.2fx)\n", len,
               n, n, 1e3 * best[0], 1e3 * best[1], best[0] / best[1]);
    }
    free(q);
    free(out);
    free_fixture(&f);
}

/* The GQA ratios and head sizes of common models (G in {1, 3, 4, 6, 8}, d in {64, 128}),
 * every kernel set, a length crossing pages with a partial last one, two threads (so
 * the decode splits into chunks merged by log-sum-exp): page lists, dense decode, verify
 * and a prefill chunk against the float64 reference / the single-query path. */
static void test_gqa_shapes(void) {
    const int32_t groups[5] = {1, 3, 4, 6, 8}, dims[3] = {64, 128, 72 /* a masked tail */};
    for (int32_t ii = 0; ii < 3; ii++) {
        if (!use_isa(isas[ii])) continue;
        for (int32_t gi = 0; gi < 5; gi++)
            for (int32_t di = 0; di < 3; di++) {
                const int32_t H = tu_int(1, 2), len = 16 * tu_int(3, 12) + tu_int(1, 15);
                fixture f = make_fixture(H, groups[gi], dims[di], len, 2, LOCKS_SUMMARY_Q, 8);
                printf("  gqa: H=%d G=%d d=%d len=%d kernels %s\n", H, groups[gi], dims[di], len,
                       locks_isa_name(locks_cpu_isa()));
                test_page_lists(&f);
                test_dense(&f);
                test_prefix_n(&f, 20);
                const int32_t n = tu_int(1, 40);
                test_prefill(&f, tu_int(0, f.len - n), n);
                free_fixture(&f);
            }
    }
    locks_cpu_set_isa(LOCKS_ISA_BEST);
}

/* LOCKS_DECODE_PERF=len: CPU seconds (best of 7, 1 thread, the kernel sets interleaved
 * round by round) of one dense decode attention (locks_attend_prefix) at a context of
 * len, for SmolLM2-135M's shape (H=3 G=3 d=64) and Gemma 3 270M's (H=1 G=4 d=256);
 * with LOCKS_ISA=<set>, that set alone and 20x longer (for perf's samples). */
static void perf_decode(int32_t len) {
    const int32_t shapes[2][3] = {{3, 3, 64}, {1, 4, 256}};
    const int only = perf_only();
    const int32_t reps = only >= 0 ? 20 : 1;
    for (int32_t si = 0; si < 2; si++) {
        const int32_t H = shapes[si][0], G = shapes[si][1], d = shapes[si][2], Hq = H * G;
        fixture f = make_fixture(H, G, d, len, 1, LOCKS_SUMMARY_Q, 8);
        float *q = malloc(sizeof(float) * (size_t)Hq * d), *out = malloc(sizeof(float) * (size_t)Hq * d);
        tu_fill_normal(q, (size_t)Hq * d, 1.0);
        double best[3] = {1e30, 1e30, 1e30};
        for (int32_t rep = 0; rep < 7 * reps; rep++)
            for (int32_t ii = 0; ii < 3; ii++) {
                if ((only >= 0 && (int)isas[ii] != only) || !use_isa(isas[ii])) continue;
                struct timespec t0, t1;
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
                for (int32_t k = 0; k < 4; k++) CHECK(locks_attend_prefix(f.c, 0, f.seq, len, q, Hq, out));
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
                double sec = ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) / 4;
                best[ii] = sec < best[ii] ? sec : best[ii];
            }
        printf("perf: dense decode attention, context %d, H=%d G=%d d=%d, per layer:", len, H, G, d);
        for (int32_t ii = 0; ii < 3; ii++)
            if (best[ii] < 1e29) printf(" %s %.3f ms", locks_isa_name(isas[ii]), 1e3 * best[ii]);
        printf("\n");
        free(q);
        free(out);
        free_fixture(&f);
    }
    locks_cpu_set_isa(LOCKS_ISA_BEST);
}

int main(void) {
    tu_seed("test_attend");
    const char *dperf = getenv("LOCKS_DECODE_PERF");
    if (dperf && atoi(dperf) > 0) {
        perf_decode(atoi(dperf));
        return 0;
    }
    const char *vperf = getenv("LOCKS_VERIFY_PERF");
    if (vperf && atoi(vperf) > 0) {
        perf_verify(atoi(vperf));
        return 0;
    }
    const char *perf = getenv("LOCKS_ATTEND_PERF");
    if (perf && atoi(perf) > 0) {
        perf_prefill(atoi(perf));
        return 0;
    }
    const int32_t dims[3] = {64, 128, 256};
    for (int32_t trial = 0; trial < 9; trial++) {
        if (!use_isa(isas[trial / 3])) continue; /* AVX-512, AVX2 (where the CPU has them), then portable */
        int32_t H = tu_int(1, 3), G = tu_int(1, 9), d = dims[trial % 3], len = tu_int(40, 400);
        fixture f = make_fixture(H, G, d, len, 1 + trial % 2, trial % 3 == 1 ? LOCKS_SUMMARY_F32 : LOCKS_SUMMARY_Q, 8);
        printf("  H=%d G=%d d=%d len=%d kernels %s\n", H, G, d, len, locks_isa_name(locks_cpu_isa()));
        test_storage(&f);
        test_page_lists(&f);
        test_dense(&f);
        test_prefix_n(&f, 30);
        int32_t n = tu_int(1, 24);
        test_prefill(&f, tu_int(0, f.len - n), n);
        free_fixture(&f);
    }
    test_gqa_shapes();
    test_prefill_tiles();
    for (int32_t ii = 0; ii < 3; ii++) { /* chunk sizes that change within a verify range, G > 64 / n */
        if (!use_isa(isas[ii])) continue;
        fixture f = make_fixture(2, 9, 64, 16 * 200 + 7, 2, LOCKS_SUMMARY_Q, 8);
        printf("  verify: H=2 G=9 d=64 len=%d kernels %s\n", f.len, locks_isa_name(locks_cpu_isa()));
        test_prefix_n(&f, 40); /* 3 kernel sets x 40: the 2 x 60 of before */
        free_fixture(&f);
    }
    locks_cpu_set_isa(LOCKS_ISA_BEST);
    return test_report("test_attend");
}
