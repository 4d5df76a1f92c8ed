/*
 * test_model_share.c — shared prefix pages on the real models (locks_ctx_seq_share),
 * SmolLM2 and Gemma 3 (sliding-window layers: the rings are copied), under `locks`:
 *  - sequence 0 runs a document and a first question and answers it; sequence 1 takes
 *    the document's whole pages from sequence 0 and prefills only a second question;
 *    sequence 2 prefills the document and the second question itself. Sequences 1 and
 *    2 give the same logits, bit for bit, after the prompt and at every greedy step;
 *  - emptying sequence 0 (the pages' other holder) leaves sequence 1 unchanged; a
 *    truncate of sequence 1 inside a shared page and a regrowth equal sequence 2's;
 *  - every page is back in the pool once all three are emptied;
 *  - misuse (an empty source, n past its length or not whole pages, dst == src; on
 *    Gemma 3 a prefix whose window the source's rings no longer hold) is refused with
 *    locks_last_error() set and nothing changed.
 */
#include "test_util.h"

#include "test_model_util.h"

enum { DOC = 600, Q = 40, STEPS = 6, NCTX = 1024 };

/* Greedy steps of seq a and seq b side by side from their logits la, lb: equal logits
 * at every step. */
static void same_steps(locks_ctx *c, int32_t a, int32_t b, float *la, float *lb, int32_t V, int32_t steps,
                       const char *what) {
    for (int32_t t = 0; t < steps; t++) {
        test_cond(memcmp(la, lb, sizeof(float) * (size_t)V) == 0, "%s: logits differ at step %d", what, t);
        const int32_t tok = tu_argmax(lb, V);
        int32_t seqs[2] = {a, b}, toks[2] = {tok, tok};
        float *both = malloc(sizeof(float) * 2 * (size_t)V);
        SETUP(both);
        CHECK(locks_ctx_decode_seqs(c, seqs, 2, toks, both));
        memcpy(la, both, sizeof(float) * (size_t)V);
        memcpy(lb, both + V, sizeof(float) * (size_t)V);
        free(both);
    }
}

static void refused(locks_ctx *c, locks_status got, const char *what, int32_t free_before, int32_t dst, int32_t len) {
    test_cond(got != LOCKS_OK, "%s: accepted", what);
    test_cond(locks_last_error()[0] != '\0', "%s: no locks_last_error()", what);
    test_cond(locks_cache_free_pages(locks_ctx_cache(c)) == free_before, "%s: free pages changed", what);
    test_cond(locks_ctx_seq_len(c, dst) == len, "%s: dst length %d -> %d", what, len, locks_ctx_seq_len(c, dst));
    locks_clear_error();
}

static void check_model(const char *path, const char *name) {
    locks_status st;
    locks_model *m = locks_model_load(path, &st);
    SETUP(m);
    const int32_t V = locks_model_get_info(m).n_vocab;
    int32_t n_doc;
    int32_t *doc = tu_file_tokens(m, "README.md", DOC + 2 * Q, &n_doc);
    /* prompts: the document then a question (two different ones, from later in the file) */
    int32_t p1[DOC + Q], p2[DOC + Q];
    memcpy(p1, doc, sizeof(int32_t) * DOC);
    memcpy(p2, doc, sizeof(int32_t) * DOC);
    memcpy(p1 + DOC, doc + DOC, sizeof(int32_t) * Q);
    memcpy(p2 + DOC, doc + DOC + Q, sizeof(int32_t) * Q);
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = NCTX;
    cp.n_seqs = 3;
    cp.n_threads = 2;
    cp.swa_rollback = 64; /* rings of window - 1 + 64 positions: the refusal below */
    cp.step.selector = LOCKS_SEL_LOCKS;
    cp.step.budget = 256;
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    SETUP(c);
    const int32_t all_pages = locks_cache_free_pages(locks_ctx_cache(c));
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    SETUP(la && lb);

    locks_clear_error();
    refused(c, locks_ctx_seq_share(c, 1, 0, 16), "sharing from an empty sequence", all_pages, 1, 0);
    CHECK(locks_ctx_prefill_seq(c, 0, p1, DOC + Q, la));
    for (int32_t t = 0; t < STEPS; t++) { /* sequence 0 answers its question */
        const int32_t tok = tu_argmax(la, V), s0 = 0;
        CHECK(locks_ctx_decode_seqs(c, &s0, 1, &tok, la));
    }
    const int32_t n = locks_ctx_seq_shareable(c, 0, DOC);
    test_cond(n == DOC - DOC % LOCKS_PAGE, "%s: shareable %d of the %d-token document", name, n, DOC);
    int32_t fr = locks_cache_free_pages(locks_ctx_cache(c));
    refused(c, locks_ctx_seq_share(c, 1, 0, n + 3), "not whole pages", fr, 1, 0);
    refused(c, locks_ctx_seq_share(c, 1, 0, NCTX), "past the source's length", fr, 1, 0);
    refused(c, locks_ctx_seq_share(c, 0, 0, 16), "dst == src", fr, 1, 0);
    if (locks_ctx_cache_layer(c, 0) < 0 || locks_ctx_swa_bytes(c) > 0) { /* sliding-window layers */
        test_cond(locks_ctx_seq_shareable(c, 0, 16) == 0, "%s: 16 tokens shareable though the rings moved on", name);
        refused(c, locks_ctx_seq_share(c, 1, 0, 16), "a window the rings no longer hold", fr, 1, 0);
    }

    CHECK(locks_ctx_seq_share(c, 1, 0, n));
    test_cond(locks_cache_free_pages(locks_ctx_cache(c)) == fr, "%s: sharing took pages (%d -> %d)", name, fr,
              locks_cache_free_pages(locks_ctx_cache(c)));
    CHECK(locks_ctx_prefill_seq(c, 1, p2 + n, DOC + Q - n, lb));
    CHECK(locks_ctx_prefill_seq(c, 2, p2, DOC + Q, la));
    test_cond(memcmp(la, lb, sizeof(float) * (size_t)V) == 0, "%s: logits after the prompt differ (shared vs prefilled)",
              name);
    same_steps(c, 2, 1, la, lb, V, STEPS, name);

    /* the other holder emptied: sequence 1 unchanged */
    CHECK(locks_ctx_truncate_seq(c, 0, 0));
    same_steps(c, 2, 1, la, lb, V, 2, "after emptying sequence 0");
    /* a truncate inside a shared page (sequence 1's own copy) then regrowth */
    CHECK(locks_ctx_prefill_seq(c, 0, p1, DOC, NULL));
    CHECK(locks_ctx_truncate_seq(c, 1, 0));
    CHECK(locks_ctx_seq_share(c, 1, 0, n));
    const int32_t cut = n - 5;
    CHECK(locks_ctx_truncate_seq(c, 1, cut));
    CHECK(locks_ctx_truncate_seq(c, 2, cut));
    CHECK(locks_ctx_prefill_seq(c, 1, p2 + cut, DOC + Q - cut, lb));
    CHECK(locks_ctx_prefill_seq(c, 2, p2 + cut, DOC + Q - cut, la));
    same_steps(c, 2, 1, la, lb, V, 2, "truncated inside a shared page");
    CHECK(locks_ctx_prefill_seq(c, 0, p1 + DOC, Q, lb)); /* the source goes on as if alone */
    for (int32_t s = 0; s < 3; s++) CHECK(locks_ctx_truncate_seq(c, s, 0));
    test_cond(locks_cache_free_pages(locks_ctx_cache(c)) == all_pages, "%s: %d of %d pages free at the end", name,
              locks_cache_free_pages(locks_ctx_cache(c)), all_pages);
    printf("%s: shared %d of %d prompt tokens\n", name, n, DOC + Q);
    free(la);
    free(lb);
    free(doc);
    locks_ctx_free(c);
    locks_model_free(m);
}

int main(void) {
    tu_seed("test_model_share");
    char path[4096];
    if (!tu_find_model(path, sizeof path)) {
        fprintf(stderr, "test_model_share: no model (set LOCKS_MODEL or run scripts/fetch-model.sh)\n");
        return 1;
    }
    check_model(path, "SmolLM2");
    if (!tu_find_gemma3(path, sizeof path)) {
        fprintf(stderr, "test_model_share: no Gemma 3 model (scripts/fetch-model.sh gemma3-270m)\n");
        return 1;
    }
    check_model(path, "Gemma 3");
    return test_report("test_model_share");
}
