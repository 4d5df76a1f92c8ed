/*
 * spec_reps.c — scratch A/B harness of this session (not part of the build): what
 * `locks run -f DOC --speculate 4 --budget 256 --compare -n 64` measures, repeated R times
 * from one prefill (the 6,460-token prefill is ~25 s of each `--compare` run), so that a
 * noisy VM gives many side-by-side dense/speculative pairs a minute. Per repetition:
 * dense (`full`) 64 tokens from the prefix, truncate, speculate 64 tokens, truncate;
 * prints each pair and the median ratio. Public API only, so it builds against any
 * commit's libraries:
 *   gcc -O2 -Iinclude bench/cpu/2026-12-02-zen4/spec_reps.c build/liblocks_model.a \
 *       build/liblocks.a -lm -lpthread -o /tmp/spec_reps
 *   /tmp/spec_reps MODEL.gguf DOC.txt [R=8]
 * (the first repetition's speculation builds the drafts' 4-bit head where the library
 * has one: it is listed, and the median is over all R).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "locks.h"
#include "locks_model.h"

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
    const int R = argc > 3 ? atoi(argv[3]) : 8, N = 64;
    locks_status st;
    locks_model *m = locks_model_load(argv[1], &st);
    if (!m) return 1;
    FILE *f = fopen(argv[2], "rb");
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
    cp.swa_rollback = N + 1;
    cp.step = locks_step_default_params();
    cp.step.selector = LOCKS_SEL_LOCKS;
    cp.step.budget = 256;
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    if (!c) return 1;
    locks_sampler_params sp = locks_sampler_default_params();
    sp.temp = 0.0f;
    locks_sampler *s1 = locks_sampler_init(sp, in.n_vocab, NULL), *s2 = locks_sampler_init(sp, in.n_vocab, NULL);
    if (locks_ctx_prefill(c, tok, n - 1, NULL)) return 1;
    locks_step_params dense = cp.step, draft = cp.step;
    dense.selector = LOCKS_SEL_FULL;
    locks_spec_params spp = {4, draft};
    int32_t a[N + 1], b[N + 1], na, nb;
    double ratio[64];
    printf("context %d tokens, %d repetitions of dense %d / speculate 4 @256 %d\n", n, R, N, N);
    for (int r = 0; r < R && r < 64; r++) {
        locks_spec_stats ss;
        if (locks_ctx_set_step(c, dense)) return 1;
        double t0 = now_ms();
        if (locks_generate(c, tok + n - 1, 1, N, s1, NULL, NULL, a, &na)) return 1;
        double t1 = now_ms();
        if (locks_ctx_truncate(c, n - 1)) return 1;
        double t2 = now_ms();
        if (locks_speculate(c, tok + n - 1, 1, N, s2, &spp, NULL, NULL, b, &nb, &ss)) return 1;
        double t3 = now_ms();
        if (locks_ctx_truncate(c, n - 1)) return 1;
        const double d = na / (t1 - t0) * 1e3, sv = nb / (t3 - t2) * 1e3;
        ratio[r] = sv / d;
        printf("rep %d: dense %.2f tok/s, speculate %.2f tok/s: %.3fx; accepted %d of %d; draft %.0f ms, verify %.0f ms; %s\n",
               r, d, sv, ratio[r], ss.n_accepted, ss.n_drafted, ss.draft_ms, ss.verify_ms,
               na == nb && !memcmp(a, b, sizeof(int32_t) * (size_t)na) ? "identical" : "DIFFERENT");
    }
    qsort(ratio, (size_t)R, sizeof(double), cmp);
    printf("median %.3fx (min %.3f, max %.3f)\n", ratio[R / 2], ratio[0], ratio[R - 1]);
    return 0;
}
