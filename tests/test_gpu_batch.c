/*
 * test_gpu_batch.c — the CUDA backend's several sequences and its bad input, on a random
 * tiny Llama model written here (tests/tiny_llama.h; no real model to carry).
 *
 * 1. Together vs alone: a context of 4 sequences (prompts of 300, 45, 16 and 0 tokens)
 *    decodes 40 tokens of each in one pass per token (locks_ctx_decode_batch: one graph
 *    replay for all), under `full` and `locks` (budget 64, far below the context); the
 *    reference is each sequence alone in its own GPU context fed the same tokens. The
 *    products then run with 4 columns instead of 1 (cuBLAS may pick other kernels, so the
 *    sums round differently): top-1 agreement >= 0.98 and max |dlogit| <= 0.05 (logits
 *    spread ~1.5). Also: graph replay == kernel by kernel for the batch, bit for bit.
 * 1b. 32 sequences (LOCKS_CTX_MAX_SEQS) through the public API: a batch of all, and the
 *    same tokens in two halves through locks_ctx_decode_seqs, bit for bit.
 * 2. Bad input: an n_ctx whose KV cache cannot fit the device (and 8 sequences of a
 *    context that fits once but not 8 times) fails with LOCKS_ERR_OOM, the log names the
 *    GiB, and device free memory is as before (nothing half-made; 3 rounds); a context
 *    made right after works; a sequence filled to n_ctx makes the batch POOL_FULL with
 *    nothing moved; locks_ctx_decode on 2 sequences decodes sequence 0 alone.
 */
#include "test_util.h"
#include "tiny_llama.h"

#include "model/cuda/model_cuda.h"
#include "locks_model.h"

enum { NS = 4, STEPS = 40, NCTX = 1024 };

static const tiny_shape SHAPE = {2, 256, 4, 2, 64, 512, 300};

static char last_log[1024];
static void on_log(locks_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == LOCKS_LOG_ERROR) snprintf(last_log, sizeof last_log, "%s", msg);
}

static locks_ctx_params params(locks_selector sel, int32_t n_seqs, int graph) {
    locks_ctx_params p = locks_ctx_default_params();
    p.backend = LOCKS_BACKEND_CUDA;
    p.n_ctx = NCTX;
    p.n_seqs = n_seqs;
    p.cuda_graph = graph;
    p.step.selector = sel;
    p.step.budget = sel == LOCKS_SEL_FULL ? NCTX : 64;
    return p;
}

static void check_together(const locks_model *m, locks_selector sel) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    const int32_t plen[NS] = {300, 45, 16, 0};
    int32_t *prompt[NS];
    for (int s = 0; s < NS; s++) {
        prompt[s] = malloc(sizeof(int32_t) * (size_t)(plen[s] + 1));
        SETUP(prompt[s]);
        for (int32_t i = 0; i < plen[s]; i++) prompt[s][i] = tu_int(0, V - 1);
    }
    const size_t all_n = (size_t)NS * STEPS * V;
    float *all[2], *ref = malloc(sizeof(float) * all_n), *lg = malloc(sizeof(float) * (size_t)NS * V);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)NS * (STEPS + 1));
    SETUP(ref && lg && toks);
    locks_status st;
    for (int graph = 1; graph >= 0; graph--) { /* graph first: its tokens feed both */
        all[graph] = malloc(sizeof(float) * all_n);
        SETUP(all[graph]);
        locks_ctx *c = locks_ctx_init(m, params(sel, NS, graph), &st);
        test_cond(c != NULL, "GPU context of %d sequences: %s", NS, locks_status_str(st));
        if (!c) return;
        for (int s = 0; s < NS; s++) {
            if (plen[s]) CHECK(locks_ctx_prefill_seq(c, s, prompt[s], plen[s], lg + (size_t)s * V));
            if (graph) toks[s] = plen[s] ? tiny_argmax(lg + (size_t)s * V, V) : 7;
        }
        for (int t = 0; t < STEPS; t++) {
            CHECK(locks_ctx_decode_batch(c, toks + (size_t)t * NS, all[graph] + (size_t)t * NS * V));
            if (graph)
                for (int s = 0; s < NS; s++)
                    toks[(size_t)(t + 1) * NS + s] = tiny_argmax(all[graph] + ((size_t)t * NS + s) * V, V);
        }
        if (graph) {
            locks_run_stats rs = locks_ctx_stats(c);
            test_cond(rs.n_decode == NS * STEPS, "stats: %d decode tokens", rs.n_decode);
            if (sel == LOCKS_SEL_LOCKS) test_cond(rs.bytes_kv < rs.bytes_dense, "locks: no selection in the stats");
        }
        locks_ctx_free(c);
    }
    test_cond(memcmp(all[0], all[1], sizeof(float) * all_n) == 0, "%s: batch graph replay != kernel by kernel",
              locks_selector_name(sel));
    for (int s = 0; s < NS; s++) {
        locks_ctx *a = locks_ctx_init(m, params(sel, 1, 1), &st);
        SETUP(a);
        if (plen[s]) CHECK(locks_ctx_prefill(a, prompt[s], plen[s], NULL));
        for (int t = 0; t < STEPS; t++) CHECK(locks_ctx_decode(a, toks[(size_t)t * NS + s], ref + ((size_t)t * NS + s) * V));
        locks_ctx_free(a);
    }
    double maxd = 0.0;
    int agree = 0;
    for (size_t r = 0; r < (size_t)NS * STEPS; r++) {
        for (int32_t i = 0; i < V; i++) {
            double d = fabs((double)all[1][r * V + i] - (double)ref[r * V + i]);
            if (isnan(d)) d = HUGE_VAL;
            if (d > maxd) maxd = d;
        }
        agree += tiny_argmax(all[1] + r * V, V) == tiny_argmax(ref + r * V, V);
    }
    const double top1 = (double)agree / (NS * STEPS);
    test_cond(top1 >= 0.98 && maxd <= 0.05, "%s: together vs alone: top-1 %.4f (>= 0.98), max |dlogit| %.4g (<= 0.05)",
              locks_selector_name(sel), top1, maxd);
    printf("  %s: %d sequences x %d steps together vs alone: top-1 %.4f, max |dlogit| %.4g; graph == eager\n",
           locks_selector_name(sel), NS, STEPS, top1, maxd);
    free(all[0]);
    free(all[1]);
    free(ref);
    free(lg);
    free(toks);
    for (int s = 0; s < NS; s++) free(prompt[s]);
}

/* The most sequences a GPU context holds (LOCKS_CTX_MAX_SEQS = 32) through the public API:
 * context A decodes T tokens of all of them per locks_ctx_decode_batch; context B the same
 * tokens in two locks_ctx_decode_seqs calls per step (the first half in reverse order,
 * then the second half): every row bit for bit A's (the engine runs all rows whichever
 * decode, tests/test_gpu_batch_wide.c checks them against batch 1). */
static void check_max_seqs(const locks_model *m, locks_selector sel) {
    enum { N = LOCKS_CTX_MAX_SEQS, T = 6, CTX = 256 };
    const int32_t V = locks_model_get_info(m).n_vocab;
    int32_t prompt[200], toks[T * N], seqs[N], in[N];
    for (int i = 0; i < 200; i++) prompt[i] = tu_int(0, V - 1);
    for (int i = 0; i < T * N; i++) toks[i] = tu_int(0, V - 1);
    float *la = malloc(sizeof(float) * (size_t)T * N * V), *lb = malloc(sizeof(float) * (size_t)N * V);
    SETUP(la && lb);
    locks_status st;
    locks_ctx *a = NULL, *b = NULL;
    locks_ctx_params p = params(sel, N, 1);
    p.n_ctx = CTX;
    a = locks_ctx_init(m, p, &st);
    test_cond(a != NULL, "GPU context of %d sequences: %s", N, locks_status_str(st));
    b = a ? locks_ctx_init(m, p, &st) : NULL;
    if (!a || !b) {
        locks_ctx_free(a);
        free(la), free(lb);
        return;
    }
    for (int s = 0; s < N; s++) {
        const int32_t n = (s * 37) % 200; /* 0 .. 199, sequence 0 empty */
        if (n) CHECK(locks_ctx_prefill_seq(a, s, prompt, n, NULL));
        if (n) CHECK(locks_ctx_prefill_seq(b, s, prompt, n, NULL));
    }
    int same = 1;
    for (int t = 0; t < T; t++) {
        CHECK(locks_ctx_decode_batch(a, toks + t * N, la + (size_t)t * N * V));
        for (int half = 0; half < 2; half++) {
            for (int i = 0; i < N / 2; i++) {
                seqs[i] = half ? N / 2 + i : N / 2 - 1 - i;
                in[i] = toks[t * N + seqs[i]];
            }
            CHECK(locks_ctx_decode_seqs(b, seqs, N / 2, in, lb));
            for (int i = 0; i < N / 2; i++)
                same &= memcmp(lb + (size_t)i * V, la + ((size_t)t * N + seqs[i]) * V, sizeof(float) * (size_t)V) == 0;
        }
    }
    int lens = 1;
    for (int s = 0; s < N; s++)
        lens &= locks_ctx_seq_len(a, s) == (s * 37) % 200 + T && locks_ctx_seq_len(b, s) == locks_ctx_seq_len(a, s);
    test_cond(same && lens, "%s: %d sequences: halves through decode_seqs != the batch (logits %d, lengths %d)",
              locks_selector_name(sel), N, same, lens);
    printf("  %s: %d sequences x %d steps, batch == two decode_seqs halves: %s\n", locks_selector_name(sel), N, T,
           same ? "bit for bit" : "NO");
    locks_ctx_free(a);
    locks_ctx_free(b);
    free(la);
    free(lb);
}

static size_t free_mem(void) {
    size_t f = 0, t = 0;
    CHECK(lg_device_memory(0, &f, &t));
    return f;
}

static void check_bad_input(const locks_model *m) {
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, params(LOCKS_SEL_LOCKS, 1, 1), &st); /* the CUDA context exists now */
    SETUP(c);
    locks_ctx_free(c);
    const size_t before = free_mem();
    const double free_gib = before / 1073741824.0;
    /* the tiny model's K/V: 2 layers x 2 heads x 64 x 2 x 2 B = 1 KiB per token (+ summaries) */
    const int32_t too_big = (int32_t)(free_gib * 1.25 * 1048576.0); /* tokens of ~1.25 x free */
    const int32_t fits_once = too_big / 4;
    for (int round = 0; round < 3; round++) {
        /* 4 sequences of a quarter each: one sequence of too_big tokens would pass n_ctx's
         * bound (INT32_MAX / LOCKS_CTX_MAX_SEQS) on a card of more than ~50 GiB and be
         * refused as an invalid argument before any memory is counted */
        locks_ctx_params p = params(LOCKS_SEL_LOCKS, 1, 1);
        p.n_ctx = too_big / 4;
        p.n_seqs = 4;
        last_log[0] = '\0';
        c = locks_ctx_init(m, p, &st);
        test_cond(!c && st == LOCKS_ERR_OOM, "4 x n_ctx %d (KV ~1.25 x free): expected OOM, got %s", too_big / 4,
                  locks_status_str(st));
        test_cond(strstr(last_log, "does not fit") && strstr(last_log, "GiB"), "OOM log names the numbers: '%s'",
                  last_log);
        if (round == 0) printf("  4 x %d: %s\n", too_big / 4, last_log);
        locks_ctx_free(c);
        p.n_ctx = fits_once;
        p.n_seqs = 8;
        last_log[0] = '\0';
        c = locks_ctx_init(m, p, &st);
        test_cond(!c && st == LOCKS_ERR_OOM && strstr(last_log, "8 x"), "8 x %d tokens: expected OOM naming 8 x, got %s '%s'",
                  fits_once, locks_status_str(st), last_log);
        if (round == 0) printf("  8 x %d: %s\n", fits_once, last_log);
        locks_ctx_free(c);
        const size_t after = free_mem();
        const double leak = ((double)before - (double)after) / 1048576.0;
        test_cond(leak < 2.5, "round %d: device free memory %.1f MiB lower after the failed inits", round, leak);
    }
    /* a normal context right after, decoding, and a full sequence */
    locks_ctx_params p = params(LOCKS_SEL_LOCKS, 2, 1);
    p.n_ctx = 64;
    c = locks_ctx_init(m, p, &st);
    test_cond(c != NULL, "a context after the failed ones: %s", locks_status_str(st));
    if (!c) return;
    int32_t pr[64];
    for (int i = 0; i < 64; i++) pr[i] = tu_int(0, SHAPE.vocab - 1);
    CHECK(locks_ctx_prefill_seq(c, 0, pr, 10, NULL));
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 64, NULL));
    int32_t tk[2] = {1, 2};
    st = locks_ctx_decode_batch(c, tk, NULL);
    test_cond(st == LOCKS_ERR_POOL_FULL && locks_ctx_seq_len(c, 0) == 10 && locks_ctx_seq_len(c, 1) == 64,
              "full sequence 1: %s, lengths %d / %d", locks_status_str(st), locks_ctx_seq_len(c, 0),
              locks_ctx_seq_len(c, 1));
    test_cond(locks_ctx_prefill_seq(c, 1, pr, 1, NULL) == LOCKS_ERR_POOL_FULL, "prefill past n_ctx");
    float *lg = malloc(sizeof(float) * (size_t)SHAPE.vocab);
    SETUP(lg);
    /* sequence 0 alone (test_gpu_serve_seqs compares its logits), sequence 1 does not move */
    test_cond(locks_ctx_decode(c, 1, lg) == LOCKS_OK && locks_ctx_seq_len(c, 0) == 11 && locks_ctx_seq_len(c, 1) == 64,
              "locks_ctx_decode on sequence 0 of 2 GPU sequences");
    CHECK(locks_ctx_truncate(c, 10)); /* sequence 0 */
    CHECK(locks_ctx_reset(c));
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 20, NULL));
    CHECK(locks_ctx_decode_batch(c, tk, NULL));
    test_cond(locks_ctx_seq_len(c, 0) == 1 && locks_ctx_seq_len(c, 1) == 21, "batch after reset");
    free(lg);
    locks_ctx_free(c);
}

int main(void) {
    tu_seed("test_gpu_batch");
    locks_set_log(on_log, NULL);
    size_t f = 0, t = 0;
    if (lg_device_memory(0, &f, &t) != LOCKS_OK) {
        printf("test_gpu_batch: no GPU\n");
        return 1;
    }
    locks_status st;
    locks_model *m = tiny_llama(&SHAPE, &st);
    test_cond(m != NULL, "tiny model: %s", locks_status_str(st));
    if (!m) return test_report("test_gpu_batch");
    check_together(m, LOCKS_SEL_FULL);
    check_together(m, LOCKS_SEL_LOCKS);
    check_max_seqs(m, LOCKS_SEL_FULL);
    check_max_seqs(m, LOCKS_SEL_LOCKS);
    check_bad_input(m);
    locks_model_free(m);
    return test_report("test_gpu_batch");
}
