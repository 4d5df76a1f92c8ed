/*
 * ab_vocab.c — the greedy drafts' vocabulary (llama_ctx_draft_vocab_add) against the whole
 * vocabulary, in one process from one prefill (session 7 of 2026-12-03; kept as it ran).
 * Context A drafts from its default vocabulary (the first LLAMA_DRAFT_VOCAB ids plus the
 * tokens met), B, a clone of A after the prefill, from every id. Per repetition: dense
 * (`full`) N tokens on A, speculate 4 @256 N tokens on A, then on B, each from the prefix;
 * the draft and verify times and the speeds of each, and whether all three outputs agree.
 *   gcc -O2 -Iinclude -Isrc bench/cpu/2026-12-03-zen4/session7/ab_vocab.c build/liblocks_model.a \
 *       build/liblocks.a -lm -lpthread -o /tmp/ab_vocab
 *   /tmp/ab_vocab MODEL.gguf DOC.txt [R=8] [N=128]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locks.h"
#include "locks_model.h"
#include "model/llama_internal.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const int R = argc > 3 ? atoi(argv[3]) : 8, N = argc > 4 ? atoi(argv[4]) : 128;
    locks_status st;
    locks_model *m = locks_model_load(argv[1], &st);
    FILE *f = m ? fopen(argv[2], "rb") : NULL;
    if (!f) return 1;
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    const locks_model_info in = locks_model_get_info(m);
    int32_t *tok = malloc(sizeof(int32_t) * (len + 2)), n = 0;
    int off = in.add_bos ? 1 : 0;
    if (off) tok[0] = in.bos_id;
    if (locks_tokenizer_encode(locks_model_tokenizer(m), text, len, false, tok + off, (int32_t)len + 1, &n)) return 1;
    n += off;
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = n + N + 64;
    cp.n_threads = 2;
    cp.step = locks_step_default_params();
    cp.step.selector = LOCKS_SEL_LOCKS;
    cp.step.budget = 256;
    locks_ctx *A = locks_ctx_init(m, cp, &st);
    if (!A || locks_ctx_prefill(A, tok, n - 1, NULL)) return 1;
    locks_ctx *B = locks_ctx_clone(A, &st);
    if (!B || llama_ctx_draft_argmax(B, 1)) return 1;
    int32_t *all = malloc(sizeof(int32_t) * (size_t)in.n_vocab);
    for (int32_t i = 0; i < in.n_vocab; i++) all[i] = i;
    llama_ctx_draft_vocab_add(B, all, in.n_vocab);
    llama_ctx_draft_argmax(B, 0);
    locks_sampler_params sp = locks_sampler_default_params();
    sp.temp = 0.0f;
    locks_sampler *s = locks_sampler_init(sp, in.n_vocab, NULL);
    locks_step_params dense = cp.step;
    dense.selector = LOCKS_SEL_FULL;
    locks_spec_params spp = {4, cp.step};
    int32_t *a = malloc(sizeof(int32_t) * (N + 1)), *b = malloc(sizeof(int32_t) * (N + 1)), *e = malloc(sizeof(int32_t) * (N + 1));
    int32_t na, nb, ne;
    double ra[64], rb[64], dd[64];
    printf("context %d tokens, %d repetitions of dense %d / speculate 4 @256 %d with the drafts' vocabulary (A) and every id (B)\n",
           n, R, N, N);
    for (int r = 0; r < R && r < 64; r++) {
        locks_spec_stats sa, sb;
        if (locks_ctx_set_step(A, dense)) return 1;
        double t0 = now_ms();
        if (locks_generate(A, tok + n - 1, 1, N, s, NULL, NULL, e, &ne) || locks_ctx_truncate(A, n - 1)) return 1;
        double t1 = now_ms();
        if (locks_speculate(A, tok + n - 1, 1, N, s, &spp, NULL, NULL, a, &na, &sa)) return 1;
        double t2 = now_ms();
        if (locks_ctx_truncate(A, n - 1)) return 1;
        double t3 = now_ms();
        if (locks_speculate(B, tok + n - 1, 1, N, s, &spp, NULL, NULL, b, &nb, &sb)) return 1;
        double t4 = now_ms();
        if (locks_ctx_truncate(B, n - 1)) return 1;
        const double de = ne / (t1 - t0) * 1e3, va = na / (t2 - t1) * 1e3, vb = nb / (t4 - t3) * 1e3;
        ra[r] = va / de, rb[r] = vb / de, dd[r] = sb.draft_ms / sa.draft_ms;
        printf("rep %d: dense %.2f tok/s; A %.2f tok/s (%.3fx; %d of %d accepted; draft %.0f ms, verify %.0f ms); "
               "B %.2f tok/s (%.3fx; %d of %d; draft %.0f ms, verify %.0f ms); %s\n",
               r, de, va, ra[r], sa.n_accepted, sa.n_drafted, sa.draft_ms, sa.verify_ms, vb, rb[r], sb.n_accepted,
               sb.n_drafted, sb.draft_ms, sb.verify_ms,
               na == ne && nb == ne && !memcmp(a, e, sizeof(int32_t) * (size_t)ne) && !memcmp(b, e, sizeof(int32_t) * (size_t)ne)
                   ? "identical" : "DIFFERENT");
        fflush(stdout);
    }
    qsort(ra, (size_t)R, sizeof(double), cmp);
    qsort(rb, (size_t)R, sizeof(double), cmp);
    qsort(dd, (size_t)R, sizeof(double), cmp);
    printf("median speculate / dense: A %.3fx, B %.3fx; median draft time B / A %.3f\n", ra[R / 2], rb[R / 2], dd[R / 2]);
    return 0;
}
