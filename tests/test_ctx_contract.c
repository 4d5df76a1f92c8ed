/*
 * test_ctx_contract.c — the engine's API under misuse (issue 21): every refused
 * locks_model_load / locks_ctx_* / locks_generate call says why (locks_last_error names
 * the call, the argument, its value and what is allowed) and leaves the context as it
 * was. On a random tiny Llama model written here (tests/tiny_llama.h; runs in CI).
 *
 * "As it was" is checked by what the context does next: after all the refused calls,
 * its decodes give logits bit for bit equal to those of a fresh context fed the same
 * tokens (the CPU backend runs the same code on the same input; the model's numerics
 * against float64 are test_model_golden's and test_batch's business).
 */
#include "test_util.h"
#include "tiny_llama.h"

#include "locks_model.h"

enum { NCTX = 64 };

static const tiny_shape SHAPE = {2, 256, 4, 2, 64, 512, 300};

/* st is want_st and the last error names call and contains each of want[] */
static void expect(locks_status st, locks_status want_st, const char *call, const char *want) {
    const char *m = locks_last_error();
    test_cond(st == want_st, "%s: got %s, want %s (\"%s\")", call, locks_status_str(st), locks_status_str(want_st), m);
    test_cond(strncmp(m, call, strlen(call)) == 0 && strstr(m, want) != NULL, "%s: message \"%s\" lacks \"%s\"", call,
              m, want);
}

static void test_load(void) {
    locks_status st;
    locks_clear_error();
    locks_model *m = locks_model_load("/nonexistent/locks-test.gguf", &st);
    test_cond(!m, "a missing file loaded");
    expect(st, LOCKS_ERR_IO, "locks_model_load", "cannot open '/nonexistent/locks-test.gguf'");

    const tiny_shape narrow = {1, 128, 4, 2, 32, 256, 50}; /* head_dim 32: the cache takes 64, 128, 256 */
    m = tiny_llama(&narrow, &st);
    test_cond(!m, "head_dim 32 loaded");
    expect(st, LOCKS_ERR_UNSUPPORTED, "locks_model_load", "head_dim 32 is not supported");
}

static void test_init(const locks_model *m) {
    struct {
        const char *what;
        int32_t value;
        const char *want;
    } bad[] = {
        {"n_ctx", 0, "n_ctx 0 (must be 1.."},
        {"n_threads", 0, "n_threads 0 (must be 1..256)"},
        {"n_threads", 1000, "n_threads 1000 (must be 1..256)"},
        {"n_batch", 0, "n_batch 0 (must be 1..4096)"},
        {"n_seqs", LOCKS_CTX_MAX_SEQS + 1, "n_seqs 33 (must be 1..32)"},
        {"swa_rollback", -1, "swa_rollback -1"},
        {"budget", 0, "step.budget 0 (must be >= 1)"},
        {"selector", 99, "step.selector 99"},
        {"rank", 0, "rank 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        locks_ctx_params p = locks_ctx_default_params();
        const char *f = bad[i].what;
        int32_t v = bad[i].value;
        if (!strcmp(f, "n_ctx")) p.n_ctx = v;
        if (!strcmp(f, "n_threads")) p.n_threads = v;
        if (!strcmp(f, "n_batch")) p.n_batch = v;
        if (!strcmp(f, "n_seqs")) p.n_seqs = v;
        if (!strcmp(f, "swa_rollback")) p.swa_rollback = v;
        if (!strcmp(f, "budget")) p.step.budget = v;
        if (!strcmp(f, "selector")) p.step.selector = (locks_selector)v;
        if (!strcmp(f, "rank")) p.rank = v;
        locks_status st;
        locks_ctx *c = locks_ctx_init(m, p, &st);
        test_cond(!c, "%s %d accepted", f, v);
        expect(st, LOCKS_ERR_INVALID_ARG, "locks_ctx_init", bad[i].want);
        locks_ctx_free(c);
    }
    locks_ctx_params p = locks_ctx_default_params();
    p.step.mass = 1.5f;
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, p, &st);
    test_cond(!c, "mass 1.5 accepted");
    expect(st, LOCKS_ERR_INVALID_ARG, "locks_ctx_init", "step.mass 1.5");
    locks_ctx_free(c);
    c = locks_ctx_init(NULL, locks_ctx_default_params(), &st);
    test_cond(!c, "a NULL model accepted");
    expect(st, LOCKS_ERR_INVALID_ARG, "locks_ctx_init", "the model is NULL");
}

static locks_ctx *ctx(const locks_model *m, int32_t n_seqs) {
    locks_ctx_params p = locks_ctx_default_params();
    p.n_ctx = NCTX;
    p.n_batch = 16;
    p.n_seqs = n_seqs;
    p.step.budget = 32;
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, p, &st);
    SETUP(c);
    return c;
}

/* Every refused call on c (prompt of 20 tokens already in); c must be as it was after. */
static void refuse_all(const locks_model *m, locks_ctx *c, const int32_t *prompt) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)V * NCTX);
    int32_t toks[NCTX];
    SETUP(lg);
    for (int i = 0; i < NCTX; i++) toks[i] = prompt[i % 20];
    const int32_t len = locks_ctx_len(c);

    int32_t t_bad[3] = {1, 2, V};
    expect(locks_ctx_prefill(c, t_bad, 3, lg), LOCKS_ERR_INVALID_ARG, "locks_ctx_prefill",
           "token 300 at index 2 (the vocabulary is 0..299)");
    expect(locks_ctx_prefill(c, toks, -1, lg), LOCKS_ERR_INVALID_ARG, "locks_ctx_prefill", "n -1");
    expect(locks_ctx_prefill(c, NULL, 4, lg), LOCKS_ERR_INVALID_ARG, "locks_ctx_prefill", "tokens NULL");
    expect(locks_ctx_prefill(c, toks, NCTX - len + 1, lg), LOCKS_ERR_POOL_FULL, "locks_ctx_prefill",
           "sequence 0 holds 20 tokens: 45 more exceed n_ctx 64");
    expect(locks_ctx_prefill_seq(c, 3, toks, 2, lg), LOCKS_ERR_INVALID_ARG, "locks_ctx_prefill_seq",
           "seq 3 (the context has sequences 0..0)");
    expect(locks_ctx_prefill_all(c, toks, 2, NULL), LOCKS_ERR_INVALID_ARG, "locks_ctx_prefill_all", "logits is NULL");
    expect(locks_ctx_decode(c, -5, lg), LOCKS_ERR_INVALID_ARG, "locks_ctx_decode", "token -5 at index 0");
    expect(locks_ctx_decode(c, 1, NULL), LOCKS_ERR_INVALID_ARG, "locks_ctx_decode", "logits is NULL");
    expect(locks_ctx_decode(NULL, 1, lg), LOCKS_ERR_INVALID_ARG, "locks_ctx_decode", "the context is NULL");
    expect(locks_ctx_decode_batch(c, NULL, lg), LOCKS_ERR_INVALID_ARG, "locks_ctx_decode_batch", "tokens is NULL");
    int32_t seqs[2] = {0, 0};
    expect(locks_ctx_decode_seqs(c, seqs, 2, toks, lg), LOCKS_ERR_INVALID_ARG, "locks_ctx_decode_seqs",
           "n 2 (must be 1..1");
    seqs[0] = 1;
    expect(locks_ctx_decode_seqs(c, seqs, 1, toks, lg), LOCKS_ERR_INVALID_ARG, "locks_ctx_decode_seqs", "seq 1");
    expect(locks_ctx_truncate(c, len + 1), LOCKS_ERR_INVALID_ARG, "locks_ctx_truncate",
           "n 21 (sequence 0 holds 20 tokens: 0..20)");
    expect(locks_ctx_truncate_seq(c, -1, 0), LOCKS_ERR_INVALID_ARG, "locks_ctx_truncate_seq", "seq -1");
    locks_step_params sp = locks_ctx_get_params(c).step;
    sp.budget = -3;
    expect(locks_ctx_set_step(c, sp), LOCKS_ERR_INVALID_ARG, "locks_ctx_set_step", "step.budget -3");
    sp = locks_ctx_get_params(c).step;
    sp.selector = LOCKS_SEL_QUEST;
    expect(locks_ctx_set_step(c, sp), LOCKS_ERR_NO_META, "locks_ctx_set_step", "step.selector quest");
    expect(locks_ctx_set_sparse_layer(c, 7), LOCKS_ERR_INVALID_ARG, "locks_ctx_set_sparse_layer",
           "layer 7 (must be -1 for none, or 0..1)");
    const size_t kv = (size_t)NCTX * (size_t)SHAPE.n_kv_heads * (size_t)SHAPE.head_dim * (size_t)SHAPE.n_layers;
    uint16_t *k = calloc(kv, sizeof(uint16_t)), *v = calloc(kv, sizeof(uint16_t));
    SETUP(k && v);
    expect(locks_ctx_seq_read_kv(c, 0, 2, k, v), LOCKS_ERR_INVALID_ARG, "locks_ctx_seq_read_kv",
           "layer 2 (the model has layers 0..1)");
    expect(locks_ctx_seq_load_kv(c, 0, NCTX + 1, k, v), LOCKS_ERR_POOL_FULL, "locks_ctx_seq_load_kv",
           "n 65 exceeds n_ctx 64");
    expect(locks_ctx_seq_load(c, 0, NCTX + 1, k, v, NULL), LOCKS_ERR_POOL_FULL, "locks_ctx_seq_load",
           "n 65 exceeds n_ctx 64");
    expect(locks_ctx_seq_read_summaries(c, 0, 2, k), LOCKS_ERR_INVALID_ARG, "locks_ctx_seq_read_summaries",
           "layer 2 (the model has layers 0..1)");
    k[3] = 0x7e00; /* a NaN key, checked before the sequence changes */
    expect(locks_ctx_seq_load(c, 0, 20, k, v, NULL), LOCKS_ERR_NONFINITE, "locks_ctx_seq_load", "key of layer 0, token 0");
    locks_status st;
    locks_sampler *s = locks_sampler_init(locks_sampler_default_params(), V, &st);
    SETUP(s);
    int32_t n_out = -1;
    expect(locks_generate(c, toks, 0, 4, s, NULL, NULL, NULL, &n_out), LOCKS_ERR_INVALID_ARG, "locks_generate",
           "n_prompt 0");
    expect(locks_generate(c, toks, 2, -1, s, NULL, NULL, NULL, &n_out), LOCKS_ERR_INVALID_ARG, "locks_generate",
           "n_predict -1 (must be >= 0)");
    expect(locks_generate(c, toks, 2, 4, NULL, NULL, NULL, NULL, &n_out), LOCKS_ERR_INVALID_ARG, "locks_generate",
           "the sampler is NULL");
    test_cond(n_out == 0, "a refused generate says %d tokens out", n_out);
    /* a failure inside a nested call names both */
    expect(locks_generate(c, toks, NCTX, 4, s, NULL, NULL, NULL, &n_out), LOCKS_ERR_POOL_FULL, "locks_generate",
           "locks_ctx_prefill: sequence 0 holds 20 tokens");
    locks_sampler_free(s);
    test_cond(locks_ctx_len(c) == len, "refused calls moved the context from %d to %d tokens", len, locks_ctx_len(c));
    free(k);
    free(v);
    free(lg);
}

static void test_calls(const locks_model *m) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    int32_t prompt[24];
    for (int i = 0; i < 24; i++) prompt[i] = tu_int(0, V - 1);
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    SETUP(a && b);
    locks_ctx *c = ctx(m, 1), *fresh = ctx(m, 1);
    CHECK(locks_ctx_prefill(c, prompt, 20, a));
    refuse_all(m, c, prompt);
    /* the refused calls changed nothing: the same next steps as a context that saw none */
    CHECK(locks_ctx_prefill(fresh, prompt, 20, b));
    for (int i = 20; i < 24; i++) {
        CHECK(locks_ctx_decode(c, prompt[i], a));
        CHECK(locks_ctx_decode(fresh, prompt[i], b));
        test_cond(memcmp(a, b, sizeof(float) * (size_t)V) == 0, "decode %d after the refused calls differs", i);
    }

    /* the clone refuses several sequences */
    locks_ctx *two = ctx(m, 2);
    locks_status st;
    locks_ctx *cl = locks_ctx_clone(two, &st);
    test_cond(!cl, "a clone of two sequences");
    expect(st, LOCKS_ERR_UNSUPPORTED, "locks_ctx_clone", "only a CPU context of one sequence is cloned");
    locks_ctx_free(cl);
    int32_t toks[2] = {1, V + 7};
    expect(locks_ctx_decode_batch(two, toks, NULL), LOCKS_ERR_INVALID_ARG, "locks_ctx_decode_batch",
           "token 307 at index 0");
    int32_t seqs[2] = {1, 1};
    expect(locks_ctx_decode_seqs(two, seqs, 2, prompt, NULL), LOCKS_ERR_INVALID_ARG, "locks_ctx_decode_seqs",
           "seqs[1] = 1 appears twice");
    test_cond(locks_ctx_seq_len(two, 0) == 0 && locks_ctx_seq_len(two, 1) == 0, "refused batch moved a sequence");
    locks_ctx_free(two);
    locks_ctx_free(c);
    locks_ctx_free(fresh);
    free(a);
    free(b);
}

int main(void) {
    tu_seed("test_ctx_contract");
    test_load();
    locks_status st;
    locks_model *m = tiny_llama(&SHAPE, &st);
    SETUP(m);
    test_init(m);
    test_calls(m);
    locks_model_free(m);
    return test_report("test_ctx_contract");
}
