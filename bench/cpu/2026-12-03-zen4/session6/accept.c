/*
 * accept.c — acceptance of `--speculate 4` (greedy) under draft variants, from one prefill
 * of DOC (session 6 of 2026-12-03; kept as it ran). Acceptance does not depend on timing,
 * so this runs at any load. Each variant is "selector,sink,recent,budget" (selector as
 * locks_selector: 1 oracle, 2 locks):
 *   gcc -O2 -Iinclude bench/cpu/2026-12-03-zen4/session6/accept.c build/liblocks_model.a \
 *       build/liblocks.a -lm -lpthread -o /tmp/accept
 *   /tmp/accept MODEL.gguf DOC N 2,1,1,256 1,1,1,256 ...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "locks.h"
#include "locks_model.h"
int main(int argc, char **argv) {
    locks_status st;
    locks_model *m = locks_model_load(argv[1], &st);
    FILE *f = fopen(argv[2], "rb");
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    const int N = atoi(argv[3]);
    const locks_model_info in = locks_model_get_info(m);
    int32_t *tok = malloc(sizeof(int32_t) * (len + 2)), n = 0;
    int off = in.add_bos ? 1 : 0;
    if (off) tok[0] = in.bos_id;
    if (locks_tokenizer_encode(locks_model_tokenizer(m), text, len, false, tok + off, (int32_t)len + 1, &n)) return 1;
    n += off;
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = n + N + 64;
    cp.n_threads = 2;
    cp.swa_rollback = 8;
    cp.step = locks_step_default_params();
    cp.step.selector = LOCKS_SEL_LOCKS;
    cp.step.budget = 256;
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    locks_sampler_params sp = locks_sampler_default_params();
    sp.temp = 0.0f;
    locks_sampler *s = locks_sampler_init(sp, in.n_vocab, NULL);
    if (locks_ctx_prefill(c, tok, n - 1, NULL)) return 1;
    int32_t *out = malloc(sizeof(int32_t) * (N + 8)), nout;
    for (int v = 4; v < argc; v++) { /* variant: sink,recent,budget,rank-ignored */
        int sel, sink, recent, budget;
        sscanf(argv[v], "%d,%d,%d,%d", &sel, &sink, &recent, &budget);
        locks_step_params d = cp.step;
        d.selector = (locks_selector)sel; d.n_sink = sink; d.n_recent = recent; d.budget = budget;
        locks_spec_params spp = {4, d};
        locks_spec_stats ss;
        if (locks_speculate(c, tok + n - 1, 1, N, s, &spp, NULL, NULL, out, &nout, &ss)) return 1;
        if (locks_ctx_truncate(c, n - 1)) return 1;
        printf("%s: accepted %d of %d (%.1f%%) in %d rounds; draft %.0f ms verify %.0f ms\n", argv[v], ss.n_accepted,
               ss.n_drafted, 100.0 * ss.n_accepted / ss.n_drafted, ss.n_rounds, ss.draft_ms, ss.verify_ms);
    }
    return 0;
}
