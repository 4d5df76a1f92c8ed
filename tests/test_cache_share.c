/*
 * test_cache_share.c — shared prefix pages (locks_cache_seq_share) on the CPU backend,
 * on fresh random K/V:
 *  - a sequence B that shares the first pages of A and appends its own tokens attends
 *    (dense) as float64 attention over A's first tokens followed by B's (fp16-rounded),
 *    and its decode step under `locks` (a budget below its length) equals, bit for bit,
 *    a sequence C given the same tokens by writing them (same summaries, same metadata);
 *  - reference counts: a shared page is held twice, the pool's free pages count each
 *    page once, and pages go back to the pool only when their last holder drops them;
 *  - a write into a shared page is refused; a truncate of B inside a shared page gives
 *    B its own copy (A unchanged, A's page held once again), or POOL_FULL with nothing
 *    changed when no page is free; removing A leaves B's output unchanged;
 *  - misuse (an empty or removed source, beyond its full pages, a page not written in
 *    every layer, a non-empty destination, dst == src, a caller-owned cache) returns a
 *    status with locks_last_error() set and changes nothing.
 */
#include "test_util.h"

#include "util.h"

enum { P = LOCKS_PAGE, H = 2, G = 2, HQ = H * G, D = 64, L = 2, NA = 5 * P + 7, NB = 21, NPOOL = 24 };

static locks_cache *new_cache(int32_t n_pages) {
    locks_cache_params cp = locks_cache_default_params();
    cp.selectors = LOCKS_SEL_ALL;
    cp.n_layers = L;
    cp.n_kv_heads = H;
    cp.head_dim = D;
    cp.n_pages = n_pages;
    cp.max_seqs = 4;
    cp.n_threads = 2;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    CHECK(st);
    return c;
}

/* Appends n tokens to seq and writes k, v ([L][n][H][D]) in every layer. */
static void add_tokens(locks_cache *c, int32_t seq, int32_t n, const float *k, const float *v) {
    const int32_t pos = locks_cache_seq_len(c, seq);
    CHECK(locks_cache_append(c, seq, n));
    for (int32_t l = 0; l < L; l++)
        CHECK(locks_cache_write(c, seq, l, pos, n, k + (size_t)l * n * H * D, v + (size_t)l * n * H * D));
}

/* The decode step of every layer for seq: out [L][HQ][D]. */
static locks_status step(locks_cache *c, int32_t seq, const float *q, locks_selector sel, float *out) {
    locks_step_params sp = locks_step_default_params();
    sp.selector = sel;
    sp.budget = 3 * P;
    for (int32_t l = 0; l < L; l++) {
        locks_status st = locks_decode_step(c, l, &seq, 1, q + (size_t)l * HQ * D, HQ, &sp, out + (size_t)l * HQ * D,
                                            NULL, NULL);
        if (st != LOCKS_OK) return st;
    }
    return LOCKS_OK;
}

/* Float64 dense attention of q ([L][HQ][D]) over the logical tokens: the first n_a of
 * ka/va ([L][NA][H][D]) then the n_b of kb/vb ([L][NB][H][D]), rounded to fp16. */
static void reference(const float *q, const float *ka, const float *va, int32_t n_a, const float *kb, const float *vb,
                      int32_t n_b, double *out) {
    const int32_t n = n_a + n_b;
    double *K = malloc(sizeof(double) * (size_t)n * D), *V = malloc(sizeof(double) * (size_t)n * D), qd[D];
    SETUP(K && V);
    for (int32_t l = 0; l < L; l++)
        for (int32_t hq = 0; hq < HQ; hq++) {
            const int32_t h = hq / G;
            for (int32_t t = 0; t < n; t++)
                for (int32_t i = 0; i < D; i++) {
                    const float kx = t < n_a ? ka[(((size_t)l * NA + t) * H + h) * D + i]
                                             : kb[(((size_t)l * NB + t - n_a) * H + h) * D + i];
                    const float vx = t < n_a ? va[(((size_t)l * NA + t) * H + h) * D + i]
                                             : vb[(((size_t)l * NB + t - n_a) * H + h) * D + i];
                    K[(size_t)t * D + i] = locks_f16_to_f32(locks_f32_to_f16(kx));
                    V[(size_t)t * D + i] = locks_f16_to_f32(locks_f32_to_f16(vx));
                }
            for (int32_t i = 0; i < D; i++) qd[i] = q[((size_t)l * HQ + hq) * D + i];
            tu_ref_attention(qd, K, V, n, D, 1.0 / sqrt((double)D), out + ((size_t)l * HQ + hq) * D);
        }
    free(K);
    free(V);
}

/* Copies A's first n tokens ([L][NA][H][D]) into [L][n][H][D]. */
static void first_tokens(const float *a, int32_t n, float *out) {
    for (int32_t l = 0; l < L; l++)
        memcpy(out + (size_t)l * n * H * D, a + (size_t)l * NA * H * D, sizeof(float) * (size_t)n * H * D);
}

/* A refused call: the status wanted, a message, and the cache as it was. */
static void refused(locks_cache *c, locks_status got, locks_status want, const char *what, int32_t free_before,
                    int32_t dst, int32_t dst_len) {
    test_cond(got == want, "%s: %s, want %s", what, locks_status_str(got), locks_status_str(want));
    test_cond(locks_last_error()[0] != '\0', "%s: no locks_last_error()", what);
    test_cond(locks_cache_free_pages(c) == free_before, "%s: free pages %d -> %d", what, free_before,
              locks_cache_free_pages(c));
    test_cond(locks_cache_seq_len(c, dst) == dst_len, "%s: dst length %d -> %d", what, dst_len,
              locks_cache_seq_len(c, dst));
    locks_clear_error(); /* the next refusal must set its own */
}

int main(void) {
    tu_seed("test_cache_share");
    locks_clear_error();
    const size_t row = (size_t)H * D;
    float *ka = malloc(sizeof(float) * L * NA * row), *va = malloc(sizeof(float) * L * NA * row);
    float *kb = malloc(sizeof(float) * L * NB * row), *vb = malloc(sizeof(float) * L * NB * row);
    float *kc = malloc(sizeof(float) * L * NA * row), *vc = malloc(sizeof(float) * L * NA * row);
    float q[L * HQ * D], outa[L * HQ * D], outb[L * HQ * D], outc[L * HQ * D], tmp[L * HQ * D];
    double ref[L * HQ * D];
    SETUP(ka && va && kb && vb && kc && vc);
    tu_fill_normal(ka, L * NA * row, 1.0);
    tu_fill_normal(va, L * NA * row, 1.0);
    tu_fill_normal(kb, L * NB * row, 1.0);
    tu_fill_normal(vb, L * NB * row, 1.0);
    tu_fill_normal(q, L * HQ * D, 0.5);

    locks_cache *c = new_cache(NPOOL);
    int32_t a, b, cs;
    CHECK(locks_cache_seq_add(c, &a));
    CHECK(locks_cache_seq_add(c, &b));
    CHECK(locks_cache_seq_add(c, &cs));
    add_tokens(c, a, NA, ka, va); /* 6 pages, 5 full */
    CHECK(step(c, a, q, LOCKS_SEL_LOCKS, outa));
    const int32_t NS = 3; /* pages B shares */
    CHECK(locks_cache_seq_share(c, b, a, NS));
    int32_t na = 0, nb = 0;
    const int32_t *ta = locks_cache_block_table(c, a, &na), *tb = locks_cache_block_table(c, b, &nb);
    test_cond(nb == NS && locks_cache_seq_len(c, b) == NS * P, "B holds %d pages, %d tokens", nb,
              locks_cache_seq_len(c, b));
    for (int32_t i = 0; i < NS; i++) {
        test_cond(tb[i] == ta[i], "B's page %d is %d, A's %d", i, tb[i], ta[i]);
        test_cond(locks_cache_page_refs(c, ta[i]) == 2, "A's page %d held %d times", i, locks_cache_page_refs(c, ta[i]));
    }
    test_cond(locks_cache_page_refs(c, ta[NS]) == 1, "A's own page held %d times", locks_cache_page_refs(c, ta[NS]));
    test_cond(locks_cache_free_pages(c) == NPOOL - 6, "free pages %d after sharing (want %d)", locks_cache_free_pages(c),
              NPOOL - 6);

    /* B grows past the shared pages: dense == float64, `locks` == C written the same */
    add_tokens(c, b, NB, kb, vb);
    test_cond(locks_cache_free_pages(c) == NPOOL - 8, "free pages %d after B's 2 pages", locks_cache_free_pages(c));
    CHECK(step(c, b, q, LOCKS_SEL_FULL, outb));
    reference(q, ka, va, NS * P, kb, vb, NB, ref);
    tu_close("B dense vs float64", outb, ref, L * HQ * D, 2e-3, 2e-3);
    first_tokens(ka, NS * P, kc);
    first_tokens(va, NS * P, vc);
    add_tokens(c, cs, NS * P, kc, vc);
    add_tokens(c, cs, NB, kb, vb);
    CHECK(step(c, b, q, LOCKS_SEL_LOCKS, outb));
    CHECK(step(c, cs, q, LOCKS_SEL_LOCKS, outc));
    test_cond(memcmp(outb, outc, sizeof outb) == 0, "B (shared) and C (written) differ under locks");
    CHECK(locks_cache_seq_remove(c, cs));

    /* a shared page is never written, through either holder */
    int32_t fr = locks_cache_free_pages(c);
    refused(c, locks_cache_write(c, b, 0, 40, 1, kb, vb), LOCKS_ERR_INVALID_ARG, "write into B's shared page", fr, b,
            NS * P + NB);
    refused(c, locks_cache_write(c, a, 1, 5, 2, kb, vb), LOCKS_ERR_INVALID_ARG, "write into A's shared page", fr, b,
            NS * P + NB);
    CHECK(step(c, a, q, LOCKS_SEL_LOCKS, tmp));
    test_cond(memcmp(tmp, outa, sizeof tmp) == 0, "A changed by B's sharing and growth");

    /* misuse: nothing changes */
    int32_t e, f;
    CHECK(locks_cache_seq_add(c, &e));
    CHECK(locks_cache_seq_add(c, &f));
    CHECK(locks_cache_seq_remove(c, f));
    locks_clear_error();
    refused(c, locks_cache_seq_share(c, e, a, 6), LOCKS_ERR_INVALID_ARG, "beyond A's full pages", fr, e, 0);
    refused(c, locks_cache_seq_share(c, e, a, 0), LOCKS_ERR_INVALID_ARG, "0 pages", fr, e, 0);
    refused(c, locks_cache_seq_share(c, e, b, 5), LOCKS_ERR_INVALID_ARG, "B's partial page", fr, e, 0);
    refused(c, locks_cache_seq_share(c, b, a, 1), LOCKS_ERR_INVALID_ARG, "into non-empty B", fr, e, 0);
    refused(c, locks_cache_seq_share(c, e, e, 1), LOCKS_ERR_INVALID_ARG, "dst == src", fr, e, 0);
    refused(c, locks_cache_seq_share(c, e, 7, 1), LOCKS_ERR_NO_SEQ, "a foreign source id", fr, e, 0);
    refused(c, locks_cache_seq_share(c, 9, a, 1), LOCKS_ERR_NO_SEQ, "a foreign destination id", fr, e, 0);
    refused(c, locks_cache_seq_share(c, e, f, 1), LOCKS_ERR_NO_SEQ, "a removed source", fr, e, 0);
    CHECK(locks_cache_seq_add(c, &f));
    refused(c, locks_cache_seq_share(c, e, f, 1), LOCKS_ERR_INVALID_ARG, "an empty source", fr, e, 0);
    CHECK(locks_cache_append(c, f, P)); /* a full page written in layer 0 only */
    CHECK(locks_cache_write(c, f, 0, 0, P, kb, vb));
    fr = locks_cache_free_pages(c);
    refused(c, locks_cache_seq_share(c, e, f, 1), LOCKS_ERR_INVALID_ARG, "a page not written in every layer", fr, e, 0);
    CHECK(locks_cache_seq_remove(c, f));
    CHECK(locks_cache_seq_remove(c, e));

    /* truncating B inside a shared page: B's own copy; A unchanged and sole holder */
    CHECK(step(c, b, q, LOCKS_SEL_FULL, outb));
    const int32_t cut = 2 * P + 9;
    fr = locks_cache_free_pages(c);
    CHECK(locks_cache_seq_truncate(c, b, cut));
    tb = locks_cache_block_table(c, b, &nb);
    test_cond(nb == 3 && tb[2] != ta[2] && tb[1] == ta[1], "B's pages after the truncate: %d, page 2 %d (A's %d)", nb,
              tb[2], ta[2]);
    test_cond(locks_cache_page_refs(c, ta[2]) == 1 && locks_cache_page_refs(c, ta[1]) == 2,
              "refs after the truncate: A's page 2 %d (want 1), page 1 %d (want 2)", locks_cache_page_refs(c, ta[2]),
              locks_cache_page_refs(c, ta[1]));
    test_cond(locks_cache_free_pages(c) == fr + 2 - 1, "free pages %d after the truncate (want %d)",
              locks_cache_free_pages(c), fr + 1);
    CHECK(step(c, a, q, LOCKS_SEL_LOCKS, tmp));
    test_cond(memcmp(tmp, outa, sizeof tmp) == 0, "A changed by B's truncate");
    CHECK(step(c, b, q, LOCKS_SEL_FULL, outb));
    reference(q, ka, va, cut, kb, vb, 0, ref);
    tu_close("B truncated into its copy vs float64", outb, ref, L * HQ * D, 2e-3, 2e-3);
    /* B grows again over its copy: it writes its own page only */
    add_tokens(c, b, NB, kb, vb);
    CHECK(step(c, b, q, LOCKS_SEL_FULL, outb));
    reference(q, ka, va, cut, kb, vb, NB, ref);
    tu_close("B regrown vs float64", outb, ref, L * HQ * D, 2e-3, 2e-3);
    CHECK(step(c, a, q, LOCKS_SEL_LOCKS, tmp));
    test_cond(memcmp(tmp, outa, sizeof tmp) == 0, "A changed by B's writes after the truncate");

    /* removing A: B's pages stay (its 2 shared ones now held once), B's output unchanged */
    fr = locks_cache_free_pages(c);
    CHECK(locks_cache_seq_remove(c, a));
    test_cond(locks_cache_free_pages(c) == fr + 4, "free pages %d after removing A (want %d: its 4 unshared)",
              locks_cache_free_pages(c), fr + 4);
    test_cond(locks_cache_page_refs(c, tb[0]) == 1, "B's first page held %d times", locks_cache_page_refs(c, tb[0]));
    CHECK(step(c, b, q, LOCKS_SEL_FULL, tmp));
    test_cond(memcmp(tmp, outb, sizeof tmp) == 0, "B changed by removing A");
    CHECK(locks_cache_seq_remove(c, b));
    test_cond(locks_cache_free_pages(c) == NPOOL, "free pages %d at the end (want %d)", locks_cache_free_pages(c),
              NPOOL);
    locks_cache_free(c);

    /* a truncate inside a shared page with no page free: POOL_FULL, nothing changed */
    c = new_cache(8);
    CHECK(locks_cache_seq_add(c, &a));
    CHECK(locks_cache_seq_add(c, &b));
    CHECK(locks_cache_seq_add(c, &cs));
    first_tokens(ka, 4 * P, kc);
    first_tokens(va, 4 * P, vc);
    add_tokens(c, a, 4 * P, kc, vc);
    CHECK(locks_cache_seq_share(c, b, a, 4));
    add_tokens(c, cs, 4 * P, kc, vc);
    CHECK(step(c, b, q, LOCKS_SEL_FULL, outb));
    test_cond(locks_cache_free_pages(c) == 0, "free pages %d (want 0)", locks_cache_free_pages(c));
    refused(c, locks_cache_seq_truncate(c, b, 3 * P + 5), LOCKS_ERR_POOL_FULL, "truncate into a shared page, pool full",
            0, b, 4 * P);
    CHECK(step(c, b, q, LOCKS_SEL_FULL, tmp));
    test_cond(memcmp(tmp, outb, sizeof tmp) == 0, "B changed by a refused truncate");
    CHECK(locks_cache_seq_truncate(c, b, 3 * P)); /* at a page boundary: no copy needed */
    test_cond(locks_cache_free_pages(c) == 0 && locks_cache_page_refs(c, locks_cache_block_table(c, a, &na)[3]) == 1,
              "truncate at a boundary: free %d, A's last page refs %d", locks_cache_free_pages(c),
              locks_cache_page_refs(c, locks_cache_block_table(c, a, &na)[3]));
    locks_cache_free(c);

    free(ka), free(va), free(kb), free(vb), free(kc), free(vc);
    return test_report("test_cache_share");
}
