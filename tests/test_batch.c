/*
 * test_batch.c — several sequences in one context (locks_ctx_params.n_seqs,
 * locks_ctx_prefill_seq, locks_ctx_decode_batch) on the CPU backend, on a random tiny
 * Llama model written here (tests/tiny_llama.h; no real model needed, so it runs in CI).
 *
 * Reference: each sequence alone in its own context (n_seqs = 1, locks_ctx_prefill +
 * locks_ctx_decode). Decoding the sequences together must give the same logits bit for
 * bit (the CPU backend runs them one after the other through the same code), under
 * `full` and under `locks` with a budget far below the context (so selection matters),
 * for sequences of different lengths, one of them starting empty.
 * The most sequences a context holds (LOCKS_CTX_MAX_SEQS = 32): batches of all of them,
 * then one locks_ctx_decode_seqs step of all in reverse order, against each alone.
 * Bad input: n_seqs outside 1..32, a bad sequence index, a bad token id or a full
 * sequence in a batch (nothing moves), a budget error in the second sequence after the
 * first decoded (the first is truncated back, later batches equal the reference), clone
 * of a multi-sequence context; and the CUDA backend in this build: not built in
 * (LOCKS_ERR_UNSUPPORTED), no GPU (LOCKS_ERR_BACKEND), or a context that decodes.
 */
#include "test_util.h"
#include "tiny_llama.h"

#include "locks_model.h"

enum { NS = 3, STEPS = 24, NCTX = 512 };

static const tiny_shape SHAPE = {2, 256, 4, 2, 64, 512, 300};

/* Prompts of different lengths (sequence 2 empty), STEPS batched decode steps with each
 * sequence fed its own argmax, against the sequences decoded alone. */
static void check_together(const locks_model *m, locks_selector sel) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    const int32_t plen[NS] = {150, 37, 0};
    int32_t *prompt[NS];
    for (int s = 0; s < NS; s++) {
        prompt[s] = malloc(sizeof(int32_t) * (size_t)(plen[s] + 1));
        SETUP(prompt[s]);
        for (int32_t i = 0; i < plen[s]; i++) prompt[s][i] = tu_int(0, V - 1);
    }
    float *lg = malloc(sizeof(float) * (size_t)NS * V), *ref = malloc(sizeof(float) * (size_t)V);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)NS * (STEPS + 1));
    float *all_ref = malloc(sizeof(float) * (size_t)NS * STEPS * V);
    SETUP(lg && ref && toks && all_ref);

    /* together */
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, tiny_params(sel, NS, NCTX), &st);
    SETUP(c);
    for (int s = 0; s < NS; s++) {
        if (plen[s]) CHECK(locks_ctx_prefill_seq(c, s, prompt[s], plen[s], lg + (size_t)s * V));
        toks[s] = plen[s] ? tiny_argmax(lg + (size_t)s * V, V) : tu_int(0, V - 1);
    }
    float *all = malloc(sizeof(float) * (size_t)NS * STEPS * V);
    SETUP(all);
    for (int t = 0; t < STEPS; t++) {
        CHECK(locks_ctx_decode_batch(c, toks + (size_t)t * NS, all + (size_t)t * NS * V));
        for (int s = 0; s < NS; s++) toks[(size_t)(t + 1) * NS + s] = tiny_argmax(all + ((size_t)t * NS + s) * V, V);
    }
    int lens_ok = 1;
    for (int s = 0; s < NS; s++) lens_ok &= locks_ctx_seq_len(c, s) == plen[s] + STEPS;
    test_cond(lens_ok && locks_ctx_len(c) == plen[0] + STEPS, "%s: sequence lengths after the batch",
              locks_selector_name(sel));
    locks_run_stats rs = locks_ctx_stats(c);
    test_cond(rs.n_decode == NS * STEPS, "%s: stats count %d decode tokens, expected %d", locks_selector_name(sel),
              rs.n_decode, NS * STEPS);
    if (sel == LOCKS_SEL_LOCKS)
        test_cond(rs.bytes_kv < rs.bytes_dense, "locks: the batch read %llu of %llu dense KV bytes (no selection?)",
                  (unsigned long long)rs.bytes_kv, (unsigned long long)rs.bytes_dense);
    locks_ctx_free(c);

    /* alone, fed the same tokens */
    for (int s = 0; s < NS; s++) {
        locks_ctx *a = locks_ctx_init(m, tiny_params(sel, 1, NCTX), &st);
        SETUP(a);
        if (plen[s]) CHECK(locks_ctx_prefill(a, prompt[s], plen[s], ref));
        for (int t = 0; t < STEPS; t++) {
            CHECK(locks_ctx_decode(a, toks[(size_t)t * NS + s], ref));
            memcpy(all_ref + ((size_t)t * NS + s) * V, ref, sizeof(float) * (size_t)V);
        }
        locks_ctx_free(a);
    }
    double maxd = 0.0;
    for (size_t i = 0; i < (size_t)NS * STEPS * V; i++) {
        double d = fabs((double)all[i] - (double)all_ref[i]);
        if (d > maxd) maxd = d;
    }
    test_cond(memcmp(all, all_ref, sizeof(float) * (size_t)NS * STEPS * V) == 0,
              "%s: %d sequences decoded together differ from alone (max |dlogit| %.3g)", locks_selector_name(sel), NS,
              maxd);
    printf("  %s: %d sequences (prompts 150/37/0) x %d steps, together vs alone: max |dlogit| %.3g\n",
           locks_selector_name(sel), NS, STEPS, maxd);
    free(all);
    free(all_ref);
    free(toks);
    free(ref);
    free(lg);
    for (int s = 0; s < NS; s++) free(prompt[s]);
}

/* LOCKS_CTX_MAX_SEQS sequences (prompts of 0..19 tokens): T batched steps, then one step of
 * every sequence named in reverse order (locks_ctx_decode_seqs), each row bit for bit the
 * same tokens decoded alone (one context of one sequence, reset between them). */
static void check_max_seqs(const locks_model *m, locks_selector sel) {
    enum { N = LOCKS_CTX_MAX_SEQS, T = 3, CTX = 64 };
    const int32_t V = locks_model_get_info(m).n_vocab;
    int32_t prompt[20], toks[(T + 1) * N], rev[N], rev_toks[N];
    for (int i = 0; i < 20; i++) prompt[i] = tu_int(0, V - 1);
    for (int i = 0; i < (T + 1) * N; i++) toks[i] = tu_int(0, V - 1);
    float *all = malloc(sizeof(float) * (size_t)(T + 1) * N * V), *ref = malloc(sizeof(float) * (size_t)V);
    SETUP(all && ref);
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, tiny_params(sel, N, CTX), &st);
    test_cond(c != NULL, "a context of %d sequences: %s", N, locks_status_str(st));
    if (!c) return;
    for (int s = 0; s < N; s++)
        if (s % 20) CHECK(locks_ctx_prefill_seq(c, s, prompt, s % 20, NULL));
    for (int t = 0; t < T; t++) CHECK(locks_ctx_decode_batch(c, toks + t * N, all + (size_t)t * N * V));
    for (int i = 0; i < N; i++) rev[i] = N - 1 - i, rev_toks[i] = toks[T * N + rev[i]];
    float *last = all + (size_t)T * N * V; /* rows in rev's order */
    CHECK(locks_ctx_decode_seqs(c, rev, N, rev_toks, last));
    int lens_ok = 1;
    for (int s = 0; s < N; s++) lens_ok &= locks_ctx_seq_len(c, s) == s % 20 + T + 1;
    test_cond(lens_ok, "%s: %d sequences: lengths after the steps", locks_selector_name(sel), N);
    locks_ctx_free(c);
    locks_ctx *a = locks_ctx_init(m, tiny_params(sel, 1, CTX), &st);
    SETUP(a);
    int same = 1;
    for (int s = 0; s < N; s++) {
        CHECK(locks_ctx_reset(a));
        if (s % 20) CHECK(locks_ctx_prefill(a, prompt, s % 20, NULL));
        for (int t = 0; t <= T; t++) {
            CHECK(locks_ctx_decode(a, toks[t * N + s], ref));
            const float *got = t < T ? all + ((size_t)t * N + s) * V : last + (size_t)(N - 1 - s) * V;
            same &= memcmp(got, ref, sizeof(float) * (size_t)V) == 0;
        }
    }
    locks_ctx_free(a);
    test_cond(same, "%s: %d sequences together (batch and reversed decode_seqs) differ from alone",
              locks_selector_name(sel), N);
    printf("  %s: %d sequences x %d steps + one reversed decode_seqs step == alone: %s\n", locks_selector_name(sel), N,
           T, same ? "bit for bit" : "NO");
    free(all);
    free(ref);
}

static void check_bad_input(const locks_model *m) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    locks_status st;
    locks_ctx_params p = tiny_params(LOCKS_SEL_FULL, 0, NCTX);
    test_cond(!locks_ctx_init(m, p, &st) && st == LOCKS_ERR_INVALID_ARG, "n_seqs 0: %s", locks_status_str(st));
    p.n_seqs = LOCKS_CTX_MAX_SEQS + 1;
    test_cond(!locks_ctx_init(m, p, &st) && st == LOCKS_ERR_INVALID_ARG, "n_seqs %d: %s", p.n_seqs,
              locks_status_str(st));

    p = tiny_params(LOCKS_SEL_LOCKS, 2, NCTX);
    p.n_ctx = 128;
    locks_ctx *c = locks_ctx_init(m, p, &st);
    SETUP(c);
    int32_t pr[100];
    for (int i = 0; i < 100; i++) pr[i] = tu_int(0, V - 1);
    float *lg = malloc(sizeof(float) * 2 * (size_t)V), *ref = malloc(sizeof(float) * 2 * (size_t)V);
    SETUP(lg && ref);
    test_cond(locks_ctx_prefill_seq(c, 2, pr, 4, NULL) == LOCKS_ERR_INVALID_ARG, "prefill_seq of sequence 2 of 2");
    test_cond(locks_ctx_prefill_seq(c, -1, pr, 4, NULL) == LOCKS_ERR_INVALID_ARG, "prefill_seq of sequence -1");
    test_cond(locks_ctx_seq_len(c, 2) == -1 && locks_ctx_seq_len(c, -1) == -1, "seq_len of a bad sequence");
    CHECK(locks_ctx_prefill_seq(c, 0, pr, 5, NULL));
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 100, NULL));
    int32_t bad[2] = {3, V};
    test_cond(locks_ctx_decode_batch(c, bad, lg) == LOCKS_ERR_INVALID_ARG && locks_ctx_seq_len(c, 0) == 5 &&
                  locks_ctx_seq_len(c, 1) == 100,
              "a bad token in sequence 1: INVALID_ARG, nothing moved");
    test_cond(!locks_ctx_clone(c, &st) && st == LOCKS_ERR_UNSUPPORTED, "clone of 2 sequences: %s",
              locks_status_str(st));

    /* budget 16 (one page): fine for sequence 0 (5 tokens, dense), below the forced pages
     * of sequence 1 (100 tokens): sequence 0 decodes first, then is truncated back */
    locks_step_params sp = p.step;
    sp.budget = 16;
    CHECK(locks_ctx_set_step(c, sp));
    int32_t tk[2] = {7, 9};
    st = locks_ctx_decode_batch(c, tk, lg);
    test_cond(st == LOCKS_ERR_BUDGET && locks_ctx_seq_len(c, 0) == 5 && locks_ctx_seq_len(c, 1) == 100,
              "budget error in sequence 1: %s, lengths %d / %d (expected BUDGET, 5 / 100)", locks_status_str(st),
              locks_ctx_seq_len(c, 0), locks_ctx_seq_len(c, 1));
    CHECK(locks_ctx_set_step(c, p.step));
    CHECK(locks_ctx_decode_batch(c, tk, lg));
    locks_ctx *a = locks_ctx_init(m, tiny_params(LOCKS_SEL_LOCKS, 1, NCTX), &st);
    SETUP(a);
    CHECK(locks_ctx_prefill(a, pr, 5, NULL));
    CHECK(locks_ctx_decode(a, 7, ref));
    locks_ctx_reset(a);
    CHECK(locks_ctx_prefill(a, pr, 100, NULL));
    CHECK(locks_ctx_decode(a, 9, ref + V));
    test_cond(memcmp(lg, ref, sizeof(float) * 2 * (size_t)V) == 0, "after the rolled-back batch: != alone");
    locks_ctx_free(a);

    /* sequence 1 full (128 tokens): POOL_FULL before anything moves */
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 128 - locks_ctx_seq_len(c, 1), NULL));
    st = locks_ctx_decode_batch(c, tk, lg);
    test_cond(st == LOCKS_ERR_POOL_FULL && locks_ctx_seq_len(c, 0) == 6 && locks_ctx_seq_len(c, 1) == 128,
              "a full sequence 1: %s, lengths %d / %d", locks_status_str(st), locks_ctx_seq_len(c, 0),
              locks_ctx_seq_len(c, 1));
    CHECK(locks_ctx_reset(c));
    test_cond(locks_ctx_seq_len(c, 0) == 0 && locks_ctx_seq_len(c, 1) == 0, "reset empties every sequence");
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 10, NULL));
    CHECK(locks_ctx_decode_batch(c, tk, NULL));
    test_cond(locks_ctx_seq_len(c, 0) == 1 && locks_ctx_seq_len(c, 1) == 11, "decode after reset (logits NULL)");
    locks_ctx_free(c);
    free(lg);
    free(ref);
}

/* The CUDA backend as this build and machine have it: never half-made. */
static void check_backend(const locks_model *m) {
    locks_ctx_params p = tiny_params(LOCKS_SEL_LOCKS, 2, NCTX);
    p.backend = LOCKS_BACKEND_CUDA;
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, p, &st);
#ifndef LOCKS_HAVE_CUDA
    test_cond(!c && st == LOCKS_ERR_UNSUPPORTED, "CUDA backend not built: expected UNSUPPORTED, got %s",
              locks_status_str(st));
#else
    test_cond(c || st == LOCKS_ERR_BACKEND, "CUDA build: a context or BACKEND (no GPU), got %s", locks_status_str(st));
    if (c) {
        int32_t tk[2] = {1, 2};
        CHECK(locks_ctx_prefill_seq(c, 0, tk, 2, NULL));
        CHECK(locks_ctx_decode_batch(c, tk, NULL));
        test_cond(locks_ctx_seq_len(c, 0) == 3 && locks_ctx_seq_len(c, 1) == 1, "GPU batch decode lengths");
        test_cond(locks_ctx_decode(c, 1, NULL) == LOCKS_ERR_INVALID_ARG, "decode without logits");
    }
#endif
    locks_ctx_free(c);
}

int main(void) {
    tu_seed("test_batch");
    locks_status st;
    locks_model *m = tiny_llama(&SHAPE, &st);
    test_cond(m != NULL, "tiny model: %s", locks_status_str(st));
    if (!m) return test_report("test_batch");
    check_together(m, LOCKS_SEL_FULL);
    check_together(m, LOCKS_SEL_LOCKS);
    check_max_seqs(m, LOCKS_SEL_FULL);
    check_max_seqs(m, LOCKS_SEL_LOCKS);
    check_bad_input(m);
    check_backend(m);
    locks_model_free(m);
    return test_report("test_batch");
}
