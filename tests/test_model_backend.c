/*
 * test_model_backend.c — locks_ctx_init with backend = LOCKS_BACKEND_CUDA on any machine
 * (CI has none): a build without CUDA answers LOCKS_ERR_UNSUPPORTED, a machine without a
 * GPU LOCKS_ERR_BACKEND, and requests the GPU engine cannot serve (a CPU-only selector,
 * rank > 8, per-token callbacks) LOCKS_ERR_UNSUPPORTED before touching a device; each
 * failure returns NULL (nothing half-made). With a GPU present the context is made and a
 * decode step runs. Needs the real model (label model).
 */
#include "test_util.h"
#include "test_model_util.h"

#include "locks_model.h"

static void on_q(int32_t layer, int32_t pos, const float *q, void *user) {
    (void)layer, (void)pos, (void)q, (void)user;
}

int main(void) {
    tu_seed("test_model_backend");
    char path[4096];
    locks_model *m = tu_load_model("test_model_backend", path, sizeof path);
    locks_status st;
    locks_ctx_params p = locks_ctx_default_params();
    p.n_ctx = 256;
    p.backend = LOCKS_BACKEND_CUDA;

    locks_ctx *c = locks_ctx_init(m, p, &st);
#ifndef LOCKS_HAVE_CUDA
    test_cond(!c && st == LOCKS_ERR_UNSUPPORTED, "no CUDA in the build: got %s", locks_status_str(st));
#else
    test_cond(c || st == LOCKS_ERR_BACKEND, "CUDA build: a context or LOCKS_ERR_BACKEND (no GPU), got %s",
              locks_status_str(st));
    if (c) { /* a GPU: one prefill and one decode step */
        int32_t toks[20];
        float *lg = malloc(sizeof(float) * (size_t)locks_model_get_info(m).n_vocab);
        SETUP(lg);
        for (int i = 0; i < 20; i++) toks[i] = tu_int(0, 1000);
        CHECK(locks_ctx_prefill(c, toks, 19, lg));
        CHECK(locks_ctx_decode(c, toks[19], lg));
        test_cond(isfinite(lg[0]) && locks_ctx_len(c) == 20, "GPU context: decode gave no logits");
        free(lg);
    }
#endif
    locks_ctx_free(c);

    /* requests the GPU engine does not serve fail before any device work */
    locks_ctx_params q = p;
    q.step.selector = LOCKS_SEL_QUEST;
    c = locks_ctx_init(m, q, &st);
    test_cond(!c && st == LOCKS_ERR_UNSUPPORTED, "quest on the GPU: got %s", locks_status_str(st));
    q = p;
    q.rank = 12;
    c = locks_ctx_init(m, q, &st);
    test_cond(!c && st == LOCKS_ERR_UNSUPPORTED, "rank 12 on the GPU: got %s", locks_status_str(st));
    q = p;
    q.on_query = on_q;
    c = locks_ctx_init(m, q, &st);
    test_cond(!c && st == LOCKS_ERR_UNSUPPORTED, "on_query on the GPU: got %s", locks_status_str(st));
    locks_model_free(m);
    return test_report("test_model_backend");
}
