/*
 * test_gpu_serve_seqs.c — what `locks serve` needs of the CUDA backend (issue 22): a decode
 * step over any subset of a context's sequences, in any order (locks_ctx_decode_seqs), the
 * per-sequence truncate and reset, and the all-or-nothing rollback of a failed step with
 * the context marked broken when the rollback itself fails (issue 21). On a random tiny
 * Llama model (tests/tiny_llama.h), and on SmolLM2 with LOCKS_MODEL.
 *
 * 1. Subsets, four contexts of 4 sequences in lockstep under `full` and `locks` (budget
 *    below the context), fed the same greedy tokens: A (GPU, graph) decodes a random subset
 *    in a random order each step; B (GPU, graph) decodes each of those sequences alone (n
 *    = 1); D (GPU, kernel by kernel) the same subset in the reverse order; C (the CPU
 *    backend, fp32 activations as in test_gpu_model) the same subset. A, B and D must
 *    agree bit for bit (the engine's products pad to 8 rows and its step always runs every
 *    row, idle ones reading another row's sequence, so no row's arithmetic depends on
 *    which rows decode); C's top-1 must agree with A's (tiny: >= 0.90; SmolLM2: >= 0.98
 *    full as test_gpu_model, >= 0.90 locks at budget 64, whose few pages turn on near
 *    ties; test_gpu_model checks LOCKS fidelity at 256).
 *    Halfway, sequence 1 is truncated back into its decoded part and redecoded with the
 *    tokens it had: the logits must be the ones it had there; sequence 2 is reset
 *    (truncated to 0) and prefilled again with another prompt. Only named sequences move.
 * 2. Rollback (tiny model): a step whose second sequence's forced pages exceed the budget
 *    fails in the device engine after every named sequence took its slot (LOCKS_ERR_BUDGET);
 *    the slots are given back and the next good step equals a reference step bit for bit.
 *    Then the same failing step with the n-th fallible operation failing (util.h's fault
 *    injection), for every n it makes: each outcome is either "as before" (lengths and the
 *    next step's logits equal the reference) or, where the failure hit the rollback's own
 *    truncation, a broken context (every call refused until locks_ctx_reset, after which a
 *    fresh prefill gives the reference again). Both outcomes must occur.
 * 3. Bad input moves nothing: a repeated or out-of-range sequence, n outside 1..n_seqs, a
 *    bad token id, a full sequence (POOL_FULL); locks_ctx_decode and locks_generate on
 *    sequence 0 of a 2-sequence GPU context work (sequence 1 does not move), generate's
 *    greedy tokens those of one-sequence steps. On the device (2026-12-02) this failed
 *    until the sampler's tickets stopped depending on the launch's row count: a
 *    prefill's one-row sample after a two-row decode read row 1's partials as its ticket
 *    and never wrote its token (model_ops.cu, lg_sample_launch).
 * LOCKS_TEST_GPU_AS_CPU=1 runs the "GPU" contexts on the CPU backend: a check of this
 * test's bookkeeping on a machine without a GPU.
 */
#include "test_util.h"
#include "test_model_util.h"
#include "tiny_llama.h"

#include "locks_model.h"
#include "util.h"

enum { NS = 4, STEPS = 24, NCTX = 512 };

static const tiny_shape SHAPE = {2, 256, 4, 2, 64, 512, 300};
static locks_backend g_backend = LOCKS_BACKEND_CUDA;

static locks_ctx_params params(locks_backend be, locks_selector sel, int32_t n_seqs, int32_t n_ctx, int graph) {
    locks_ctx_params p = locks_ctx_default_params();
    p.backend = be;
    p.n_ctx = n_ctx;
    p.n_seqs = n_seqs;
    p.n_threads = 4;
    p.cuda_graph = graph;
    p.step.selector = sel;
    p.step.budget = sel == LOCKS_SEL_FULL ? n_ctx : 64;
    return p;
}

/* Section 1 on one model. text: token ids the prompts are cut from (>= 400). */
static void check_subsets(const locks_model *m, locks_selector sel, const int32_t *text, double min_top1,
                          const char *name) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    const int32_t plen[NS] = {230, 37, 0, 96}, replen = 61; /* sequence 2's prompt after its reset */
    enum { A, B, D, C, NC };
    locks_ctx *c[NC];
    locks_status st;
    for (int k = 0; k < NC; k++) {
        locks_ctx_params p = params(k == C ? LOCKS_BACKEND_CPU : g_backend, sel, NS, NCTX, k != D);
        p.f32_act = k == C; /* the CPU's float reference mode, as test_gpu_model's */
        c[k] = locks_ctx_init(m, p, &st);
        test_cond(c[k] != NULL, "%s: context %d: %s", name, k, locks_status_str(st));
        if (!c[k]) return;
    }
    float *out[NC], *one = malloc(sizeof(float) * (size_t)V);
    for (int k = 0; k < NC; k++) SETUP(out[k] = malloc(sizeof(float) * (size_t)NS * V));
    /* sequence 1's fed tokens and logits by position, for its redecode after the truncation */
    float *hist = malloc(sizeof(float) * (size_t)NCTX * V);
    int32_t *fed1 = malloc(sizeof(int32_t) * NCTX);
    SETUP(one && hist && fed1);
    int32_t next[NS], len[NS];
    for (int s = 0; s < NS; s++) {
        const int32_t *pr = text + 50 * s;
        for (int k = 0; k < NC; k++)
            if (plen[s]) CHECK(locks_ctx_prefill_seq(c[k], s, pr, plen[s], out[k]));
        next[s] = plen[s] ? tiny_argmax(out[A], V) : 11;
        len[s] = plen[s];
    }
    int same_b = 1, same_d = 1, moved_ok = 1, same_redo = 1, agree = 0, total = 0, decoded = 0;
    for (int t = 0; t < STEPS; t++) {
        int32_t seqs[NS], toks[NS], rev_s[NS], rev_t[NS], n = 0;
        for (int s = 0; s < NS; s++) /* a random subset ... */
            if (tu_int(0, 2) > 0) seqs[n++] = s;
        if (!n) seqs[n++] = tu_int(0, NS - 1);
        for (int i = n - 1; i > 0; i--) { /* ... in a random order */
            int j = tu_int(0, i), x = seqs[i];
            seqs[i] = seqs[j], seqs[j] = x;
        }
        for (int i = 0; i < n; i++) {
            toks[i] = next[seqs[i]];
            rev_s[n - 1 - i] = seqs[i], rev_t[n - 1 - i] = toks[i];
        }
        CHECK(locks_ctx_decode_seqs(c[A], seqs, n, toks, out[A]));
        for (int i = 0; i < n; i++) {
            CHECK(locks_ctx_decode_seqs(c[B], &seqs[i], 1, &toks[i], one));
            same_b &= !memcmp(one, out[A] + (size_t)i * V, sizeof(float) * (size_t)V);
        }
        CHECK(locks_ctx_decode_seqs(c[D], rev_s, n, rev_t, out[D]));
        CHECK(locks_ctx_decode_seqs(c[C], seqs, n, toks, out[C]));
        for (int i = 0; i < n; i++) {
            const float *a = out[A] + (size_t)i * V;
            same_d &= !memcmp(a, out[D] + (size_t)(n - 1 - i) * V, sizeof(float) * (size_t)V);
            agree += tiny_argmax(a, V) == tiny_argmax(out[C] + (size_t)i * V, V);
            total++;
            if (seqs[i] == 1) {
                fed1[len[1]] = toks[i];
                memcpy(hist + (size_t)len[1] * V, a, sizeof(float) * (size_t)V);
            }
            len[seqs[i]]++;
            next[seqs[i]] = tiny_argmax(a, V);
        }
        decoded += n;
        for (int s = 0; s < NS; s++)
            for (int k = 0; k < NC; k++) moved_ok &= locks_ctx_seq_len(c[k], s) == len[s];
        if (t == STEPS / 2) {
            /* sequence 1 back into its decoded part, then its old tokens again */
            const int32_t keep = len[1] - 5 > plen[1] ? len[1] - 5 : plen[1];
            for (int k = 0; k < NC; k++) CHECK(locks_ctx_truncate_seq(c[k], 1, keep));
            for (int32_t p = keep; p < len[1]; p++) {
                const int32_t s1 = 1;
                for (int k = 0; k < NC; k++) CHECK(locks_ctx_decode_seqs(c[k], &s1, 1, &fed1[p], out[k]));
                same_redo &= !memcmp(out[A], hist + (size_t)p * V, sizeof(float) * (size_t)V);
                same_b &= !memcmp(out[A], out[B], sizeof(float) * (size_t)V);
                decoded++;
            }
            /* sequence 2 reset and given another prompt */
            for (int k = 0; k < NC; k++) {
                CHECK(locks_ctx_truncate_seq(c[k], 2, 0));
                moved_ok &= locks_ctx_seq_len(c[k], 2) == 0 && locks_ctx_seq_len(c[k], 0) == len[0];
                CHECK(locks_ctx_prefill_seq(c[k], 2, text + 300, replen, out[k]));
            }
            same_b &= !memcmp(out[A], out[B], sizeof(float) * (size_t)V);
            len[2] = replen;
            next[2] = tiny_argmax(out[A], V);
        }
    }
    const double top1 = (double)agree / total;
    test_cond(same_b, "%s %s: a subset's rows differ from the sequences decoded alone", name, locks_selector_name(sel));
    test_cond(same_d, "%s %s: the reversed subset (kernel by kernel) differs from the subset (graph)", name,
              locks_selector_name(sel));
    test_cond(same_redo, "%s %s: sequence 1 redecoded after its truncation differs from its first decode", name,
              locks_selector_name(sel));
    test_cond(moved_ok, "%s %s: a sequence not named moved (or lengths differ between contexts)", name,
              locks_selector_name(sel));
    test_cond(top1 >= min_top1, "%s %s: top-1 agreement with the CPU backend %.4f < %.2f", name,
              locks_selector_name(sel), top1, min_top1);
    test_cond(locks_ctx_stats(c[A]).n_decode == decoded, "%s: stats count %d decode tokens, expected %d", name,
              locks_ctx_stats(c[A]).n_decode, decoded);
    printf("  %s %s: %d steps of random subsets (%d rows): == alone, == reversed kernel by kernel: %s; truncate + "
           "redecode: %s; top-1 vs CPU %.4f\n",
           name, locks_selector_name(sel), STEPS, total, same_b && same_d ? "bit for bit" : "DIFFER",
           same_redo ? "same logits" : "DIFFER", top1);
    for (int k = 0; k < NC; k++) {
        locks_ctx_free(c[k]);
        free(out[k]);
    }
    free(one);
    free(hist);
    free(fed1);
}

/* Section 2. */
static const int32_t RB_LEN[3] = {5, 100, 20};

static void rb_fill(locks_ctx *c, const int32_t *pr) {
    for (int s = 0; s < 3; s++) CHECK(locks_ctx_prefill_seq(c, s, pr, RB_LEN[s], NULL));
}

/* The context's lengths and its cache's (the context's sequences are the cache's 0 .. 2)
 * as rb_fill made them: a rollback that failed silently leaves the cache longer. */
static int rb_lens_ok(locks_ctx *c) {
    for (int s = 0; s < 3; s++)
        if (locks_ctx_seq_len(c, s) != RB_LEN[s] || locks_cache_seq_len(locks_ctx_cache(c), s) != RB_LEN[s]) return 0;
    return 1;
}

/* The good step (all three, budget 64) from the state rb_fill makes; back to that state after. */
static int rb_step_equals(locks_ctx *c, const locks_step_params *good, const float *ref, float *lg, int32_t V) {
    static const int32_t all[3] = {0, 1, 2}, tk[3] = {7, 9, 11};
    CHECK(locks_ctx_set_step(c, *good));
    CHECK(locks_ctx_decode_seqs(c, all, 3, tk, lg));
    for (int s = 0; s < 3; s++) CHECK(locks_ctx_truncate_seq(c, s, RB_LEN[s]));
    return !ref || !memcmp(ref, lg, sizeof(float) * 3 * (size_t)V);
}

static void check_rollback(const locks_model *m) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    locks_status st;
    locks_ctx_params p = params(g_backend, LOCKS_SEL_LOCKS, 3, 128, 1);
    locks_ctx *c = locks_ctx_init(m, p, &st);
    SETUP(c);
    int32_t pr[128];
    for (int i = 0; i < 128; i++) pr[i] = tu_int(0, V - 1);
    float *ref = malloc(sizeof(float) * 3 * (size_t)V), *lg = malloc(sizeof(float) * 3 * (size_t)V);
    SETUP(ref && lg);
    rb_fill(c, pr);
    rb_step_equals(c, &p.step, NULL, ref, V);
    test_cond(rb_lens_ok(c), "rollback: truncating the reference step back");
    test_cond(rb_step_equals(c, &p.step, ref, lg, V), "rollback: the good step twice gives different logits");
    /* budget 16: sequence 0 (5 tokens) decodes densely, sequence 1's forced pages do not fit */
    locks_step_params bad = p.step;
    bad.budget = 16;
    const int32_t s01[2] = {0, 1}, tk[2] = {7, 9};
    CHECK(locks_ctx_set_step(c, bad));
    st = locks_ctx_decode_seqs(c, s01, 2, tk, lg);
    test_cond(st == LOCKS_ERR_BUDGET && rb_lens_ok(c), "a budget error in the second named sequence: %s, lengths %d %d",
              locks_status_str(st), locks_ctx_seq_len(c, 0), locks_ctx_seq_len(c, 1));
    test_cond(rb_step_equals(c, &p.step, ref, lg, V), "the step after a failed step differs from the reference");
    /* the failing step again, with its n-th fallible operation failing */
    CHECK(locks_ctx_set_step(c, bad));
    locks_fault_arm(0);
    st = locks_ctx_decode_seqs(c, s01, 2, tk, lg);
    const int64_t n_ops = locks_fault_count();
    locks_fault_disarm();
    test_cond(st == LOCKS_ERR_BUDGET && rb_lens_ok(c), "the counted failing step");
    int n_clean = 0, n_broken = 0, ok = 1;
    for (int64_t k = 1; k <= n_ops; k++) {
        CHECK(locks_ctx_set_step(c, bad));
        locks_fault_arm(k);
        st = locks_ctx_decode_seqs(c, s01, 2, tk, lg);
        locks_fault_disarm();
        ok &= st != LOCKS_OK;
        if (locks_ctx_prefill_seq(c, 0, pr, 0, NULL) == LOCKS_ERR_INVALID_ARG) { /* broken: refused until reset */
            n_broken++;
            const int32_t s2 = 2, t2 = 5;
            ok &= locks_ctx_decode_seqs(c, &s2, 1, &t2, lg) == LOCKS_ERR_INVALID_ARG;
            ok &= locks_ctx_truncate_seq(c, 2, 3) == LOCKS_ERR_INVALID_ARG;
            CHECK(locks_ctx_reset(c));
            rb_fill(c, pr);
        } else {
            n_clean++;
            ok &= rb_lens_ok(c);
        }
        const int same = rb_step_equals(c, &p.step, ref, lg, V);
        if (!same) printf("  fault at operation %lld of %lld: the next step differs (%s)\n", (long long)k,
                          (long long)n_ops, locks_status_str(st));
        ok &= same && rb_lens_ok(c);
    }
    test_cond(ok, "rollback under faults: a failed step changed the context without marking it broken");
    if (g_backend == LOCKS_BACKEND_CUDA) { /* the CPU's step fails before any fallible operation */
        test_cond(n_clean > 0, "no fault left the context as before");
        test_cond(n_broken > 0, "no fault hit the rollback's truncation (the broken-context path is not tested)");
    }
    printf("  rollback: a budget error after the slots were taken, then a fault at each of its %lld operations: %d "
           "left the context as before, %d broke it (refused until reset); the next step == reference: %s\n",
           (long long)n_ops, n_clean, n_broken, ok ? "always" : "NO");
    locks_ctx_free(c);
    free(ref);
    free(lg);
}

/* Section 3. */
static void check_bad_input(const locks_model *m) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, params(g_backend, LOCKS_SEL_LOCKS, 3, 128, 1), &st);
    SETUP(c);
    int32_t pr[128];
    for (int i = 0; i < 128; i++) pr[i] = tu_int(0, V - 1);
    float *lg = malloc(sizeof(float) * 3 * (size_t)V);
    SETUP(lg);
    CHECK(locks_ctx_prefill_seq(c, 0, pr, 5, NULL));
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 100, NULL));
    CHECK(locks_ctx_prefill_seq(c, 2, pr, 20, NULL));
#define LENS(a, b, d) (locks_ctx_seq_len(c, 0) == (a) && locks_ctx_seq_len(c, 1) == (b) && locks_ctx_seq_len(c, 2) == (d))
    int32_t dup[2] = {2, 2}, oob[2] = {0, 3}, neg[1] = {-1}, ok2[2] = {2, 0}, tk[3] = {7, 9, 11}, badtok[2] = {7, V};
    test_cond(locks_ctx_decode_seqs(c, dup, 2, tk, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20), "repeated sequence");
    test_cond(locks_ctx_decode_seqs(c, oob, 2, tk, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20), "sequence 3 of 3");
    test_cond(locks_ctx_decode_seqs(c, neg, 1, tk, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20), "sequence -1");
    test_cond(locks_ctx_decode_seqs(c, ok2, 0, tk, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20), "n = 0");
    test_cond(locks_ctx_decode_seqs(c, ok2, 4, tk, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20), "n = 4 > n_seqs");
    test_cond(locks_ctx_decode_seqs(c, ok2, 2, badtok, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20),
              "a bad token id in the second named sequence");
    test_cond(locks_ctx_decode_seqs(c, ok2, 2, tk, NULL) == LOCKS_OK && LENS(6, 100, 21), "logits NULL decodes");
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 28, NULL)); /* sequence 1 full */
    int32_t s21[2] = {2, 1};
    st = locks_ctx_decode_seqs(c, s21, 2, tk, lg);
    test_cond(st == LOCKS_ERR_POOL_FULL && LENS(6, 128, 21), "a full sequence: %s, nothing moved", locks_status_str(st));
    test_cond(locks_ctx_truncate_seq(c, 3, 0) == LOCKS_ERR_INVALID_ARG, "truncate_seq of sequence 3");
    test_cond(locks_ctx_truncate_seq(c, 2, 22) == LOCKS_ERR_INVALID_ARG && LENS(6, 128, 21), "truncate_seq past the end");
    test_cond(locks_ctx_truncate_seq(c, 1, 0) == LOCKS_OK && LENS(6, 0, 21), "truncate_seq to 0 empties one sequence");
#undef LENS
    locks_ctx_free(c);

    /* locks_ctx_decode and locks_generate act on sequence 0 of a 2-sequence context: the
     * same logits and tokens as decode_seqs of sequence 0, sequence 1 untouched */
    c = locks_ctx_init(m, params(g_backend, LOCKS_SEL_LOCKS, 2, 128, 1), &st);
    locks_ctx *r = locks_ctx_init(m, params(g_backend, LOCKS_SEL_LOCKS, 2, 128, 1), &st);
    SETUP(c && r);
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 9, NULL));
    CHECK(locks_ctx_prefill_seq(r, 1, pr, 9, NULL));
    CHECK(locks_ctx_prefill(c, pr, 40, NULL));
    CHECK(locks_ctx_prefill(r, pr, 40, NULL));
    const int32_t s0 = 0, t0 = 13;
    float *lr = malloc(sizeof(float) * (size_t)V);
    SETUP(lr);
    st = locks_ctx_decode(c, t0, lg);
    CHECK(locks_ctx_decode_seqs(r, &s0, 1, &t0, lr));
    test_cond(st == LOCKS_OK && !memcmp(lg, lr, sizeof(float) * (size_t)V) && locks_ctx_seq_len(c, 1) == 9,
              "locks_ctx_decode on sequence 0 of 2: %s", locks_status_str(st));
    locks_sampler_params sp = locks_sampler_default_params();
    sp.temp = 0.0f;
    locks_sampler *smp = locks_sampler_init(sp, V, &st);
    SETUP(smp);
    CHECK(locks_ctx_reset(c));
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 9, NULL));
    int32_t gen[8], n_gen = 0;
    st = locks_generate(c, pr, 30, 8, smp, NULL, NULL, gen, &n_gen);
    int gen_ok = st == LOCKS_OK && n_gen == 8 && locks_ctx_seq_len(c, 1) == 9 && locks_ctx_len(c) == 37;
    CHECK(locks_ctx_reset(r));
    CHECK(locks_ctx_prefill(r, pr, 30, lr));
    for (int i = 0; i < n_gen && gen_ok; i++) { /* greedy: each token the argmax of the one-sequence step */
        gen_ok &= gen[i] == tiny_argmax(lr, V);
        if (i + 1 < n_gen) CHECK(locks_ctx_decode_seqs(r, &s0, 1, &gen[i], lr));
    }
    test_cond(gen_ok, "locks_generate on sequence 0 of 2: %s, %d tokens", locks_status_str(st), n_gen);
    locks_sampler_free(smp);
    locks_ctx_free(c);
    locks_ctx_free(r);
    free(lg);
    free(lr);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_seed("test_gpu_serve_seqs");
    const char *as_cpu = getenv("LOCKS_TEST_GPU_AS_CPU");
    if (as_cpu && *as_cpu == '1') {
        g_backend = LOCKS_BACKEND_CPU;
        printf("test_gpu_serve_seqs: LOCKS_TEST_GPU_AS_CPU=1: the GPU contexts run on the CPU backend\n");
    }
    locks_status st;
    locks_model *m = tiny_llama(&SHAPE, &st);
    test_cond(m != NULL, "tiny model: %s", locks_status_str(st));
    if (!m) return test_report("test_gpu_serve_seqs");
    int32_t text[512];
    for (int i = 0; i < 512; i++) text[i] = tu_int(0, SHAPE.vocab - 1);
    check_subsets(m, LOCKS_SEL_FULL, text, 0.90, "tiny");
    check_subsets(m, LOCKS_SEL_LOCKS, text, 0.90, "tiny");
    check_rollback(m);
    check_bad_input(m);
    locks_model_free(m);

    char path[4096];
    if (getenv("LOCKS_MODEL") && tu_find_model(path, sizeof path)) {
        locks_model *sm = locks_model_load(path, &st);
        SETUP(sm);
        const char *readme = "README.md";
        FILE *fp = fopen(readme, "rb");
        SETUP(fp);
        static char text_buf[1 << 16];
        const size_t len = fread(text_buf, 1, sizeof text_buf - 1, fp);
        fclose(fp);
        int32_t *ids = malloc(sizeof(int32_t) * (len + 1)), n = 0;
        SETUP(ids);
        CHECK(locks_tokenizer_encode(locks_model_tokenizer(sm), text_buf, len, false, ids, (int32_t)len + 1, &n));
        SETUP(n >= 400);
        check_subsets(sm, LOCKS_SEL_FULL, ids, 0.98, "SmolLM2");
        check_subsets(sm, LOCKS_SEL_LOCKS, ids, 0.90, "SmolLM2"); /* budget 64: few pages, near ties */
        free(ids);
        locks_model_free(sm);
    } else {
        printf("test_gpu_serve_seqs: no LOCKS_MODEL: the SmolLM2 part skipped\n");
    }
    return test_report("test_gpu_serve_seqs");
}
