/*
 * test_serve_seqs.c — what `locks serve` needs of the engine: a decode step over any
 * subset of a context's sequences (locks_ctx_decode_seqs) and a per-sequence truncate
 * (locks_ctx_truncate_seq), on the CPU backend with a random tiny Llama model
 * (tests/tiny_llama.h; runs in CI and under ASan).
 *
 * Reference: each sequence alone in its own context. Random subsets in random order,
 * step after step (sequences joining late and leaving early, as requests do), must give
 * each sequence the logits it gets alone, bit for bit, under `full` and under `locks`
 * with a budget below the context; sequences not named do not move. A sequence
 * truncated back and decoded again equals the reference truncated the same way. Bad
 * input (a repeated or out-of-range sequence, n outside 1..n_seqs, a bad token id, a
 * full sequence) moves nothing; a budget error in the second named sequence rolls the
 * first back. Speculative rounds on one sequence (locks_speculate_round, greedy) give
 * dense greedy decoding's tokens and leave the others alone. A sequence's K/V read out
 * and loaded into another context decodes on bit for bit as the original. Shared
 * prefix pages (locks_ctx_seq_share) give a prefill's logits bit for bit.
 */
#include "test_util.h"
#include "tiny_llama.h"

#include "locks_model.h"

enum { NS = 4, STEPS = 20, NCTX = 384 };

static const tiny_shape SHAPE = {2, 256, 4, 2, 64, 512, 300};

typedef struct {
    int32_t toks[NCTX]; /* what the sequence was fed */
    int32_t n;
    float last[300];    /* its logits after the last step */
} seq_log;

/* Random subsets step after step; every sequence's tokens and logits logged, then
 * replayed alone. Halfway, sequence 1 drops up to 9 of its decoded tokens. */
static void check_subsets(const locks_model *m, locks_selector sel) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    const int32_t plen[NS] = {120, 33, 0, 70};
    static seq_log lg[NS];
    memset(lg, 0, sizeof lg);
    float *out = malloc(sizeof(float) * (size_t)NS * V), *ref = malloc(sizeof(float) * (size_t)V);
    /* the logits of every (sequence, position) decoded together: [NS][NCTX][V] */
    float *all = calloc((size_t)NS * NCTX * V, sizeof(float));
    SETUP(out && ref && all && V <= 300);
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, tiny_params(sel, NS, NCTX), &st);
    SETUP(c);
    for (int s = 0; s < NS; s++) {
        for (int32_t i = 0; i < plen[s]; i++) lg[s].toks[i] = tu_int(0, V - 1);
        if (plen[s]) CHECK(locks_ctx_prefill_seq(c, s, lg[s].toks, plen[s], lg[s].last));
        else for (int32_t i = 0; i < V; i++) lg[s].last[i] = (float)tu_int(0, 1000);
        lg[s].n = plen[s];
    }
    int moved_ok = 1, steps_run = 0;
    for (int t = 0; t < STEPS; t++) {
        int32_t seqs[NS], toks[NS], n = 0;
        for (int s = 0; s < NS; s++) /* a random subset ... */
            if (tu_int(0, 2) > 0) seqs[n++] = s;
        if (!n) seqs[n++] = tu_int(0, NS - 1);
        for (int i = n - 1; i > 0; i--) { /* ... in a random order */
            int k = tu_int(0, i), x = seqs[i];
            seqs[i] = seqs[k], seqs[k] = x;
        }
        for (int i = 0; i < n; i++) toks[i] = tiny_argmax(lg[seqs[i]].last, V);
        int32_t before[NS];
        for (int s = 0; s < NS; s++) before[s] = locks_ctx_seq_len(c, s);
        CHECK(locks_ctx_decode_seqs(c, seqs, n, toks, out));
        steps_run += n;
        for (int i = 0; i < n; i++) {
            seq_log *q = &lg[seqs[i]];
            q->toks[q->n] = toks[i];
            memcpy(all + ((size_t)seqs[i] * NCTX + (size_t)q->n) * V, out + (size_t)i * V, sizeof(float) * (size_t)V);
            memcpy(q->last, out + (size_t)i * V, sizeof(float) * (size_t)V);
            q->n++;
        }
        for (int s = 0; s < NS; s++) moved_ok &= locks_ctx_seq_len(c, s) == lg[s].n && lg[s].n - before[s] <= 1;
        if (t == STEPS / 2) { /* a request leaves, the next reuses the first tokens */
            int32_t keep = lg[1].n - 9 < plen[1] ? plen[1] : lg[1].n - 9; /* into the decoded part */
            CHECK(locks_ctx_truncate_seq(c, 1, keep));
            lg[1].n = keep;
            for (int32_t i = 0; i < V; i++) lg[1].last[i] = (float)tu_int(0, 1000);
            moved_ok &= locks_ctx_seq_len(c, 1) == keep && locks_ctx_seq_len(c, 0) == lg[0].n;
        }
    }
    test_cond(moved_ok, "%s: only the named sequences moved, one token each", locks_selector_name(sel));
    test_cond(locks_ctx_stats(c).n_decode == steps_run, "%s: stats count %d decode tokens, expected %d",
              locks_selector_name(sel), locks_ctx_stats(c).n_decode, steps_run);
    locks_ctx_free(c);

    /* alone: prefill the prompt, then decode what the sequence was fed; compare every
     * position logged (sequence 1's positions after the truncation were overwritten) */
    double maxd = 0.0;
    int same = 1, compared = 0;
    for (int s = 0; s < NS; s++) {
        locks_ctx *a = locks_ctx_init(m, tiny_params(sel, 1, NCTX), &st);
        SETUP(a);
        if (plen[s]) CHECK(locks_ctx_prefill(a, lg[s].toks, plen[s], NULL));
        for (int32_t i = plen[s]; i < lg[s].n; i++) {
            CHECK(locks_ctx_decode(a, lg[s].toks[i], ref));
            const float *got = all + ((size_t)s * NCTX + (size_t)i) * V;
            for (int32_t k = 0; k < V; k++) {
                double d = fabs((double)got[k] - (double)ref[k]);
                if (d > maxd) maxd = d;
            }
            same &= memcmp(got, ref, sizeof(float) * (size_t)V) == 0;
            compared++;
        }
        locks_ctx_free(a);
    }
    test_cond(same && compared > NS, "%s: subsets decoded together differ from alone (max |dlogit| %.3g, %d positions)",
              locks_selector_name(sel), maxd, compared);
    printf("  %s: %d sequences, %d random subset steps, %d positions vs alone: max |dlogit| %.3g\n",
           locks_selector_name(sel), NS, STEPS, compared, maxd);
    free(out);
    free(ref);
    free(all);
}

static void check_bad_input(const locks_model *m) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    locks_status st;
    locks_ctx_params p = tiny_params(LOCKS_SEL_LOCKS, 3, NCTX);
    p.n_ctx = 128;
    locks_ctx *c = locks_ctx_init(m, p, &st);
    SETUP(c);
    int32_t pr[128];
    for (int i = 0; i < 128; i++) pr[i] = tu_int(0, V - 1);
    float *lg = malloc(sizeof(float) * 3 * (size_t)V);
    SETUP(lg);
    CHECK(locks_ctx_prefill_seq(c, 0, pr, 5, NULL));
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 100, NULL));
    CHECK(locks_ctx_prefill_seq(c, 2, pr, 20, NULL));
#define LENS(a, b, d) (locks_ctx_seq_len(c, 0) == (a) && locks_ctx_seq_len(c, 1) == (b) && locks_ctx_seq_len(c, 2) == (d))
    int32_t dup[2] = {2, 2}, oob[2] = {0, 3}, neg[1] = {-1}, ok2[2] = {2, 0}, tk[3] = {7, 9, 11};
    int32_t badtok[2] = {7, V};
    test_cond(locks_ctx_decode_seqs(c, dup, 2, tk, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20), "repeated sequence");
    test_cond(locks_ctx_decode_seqs(c, oob, 2, tk, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20), "sequence 3 of 3");
    test_cond(locks_ctx_decode_seqs(c, neg, 1, tk, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20), "sequence -1");
    test_cond(locks_ctx_decode_seqs(c, ok2, 0, tk, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20), "n = 0");
    test_cond(locks_ctx_decode_seqs(c, ok2, 4, tk, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20), "n = 4 > n_seqs");
    test_cond(locks_ctx_decode_seqs(c, ok2, 2, badtok, lg) == LOCKS_ERR_INVALID_ARG && LENS(5, 100, 20),
              "a bad token id in the second named sequence");
    test_cond(locks_ctx_decode_seqs(c, ok2, 2, tk, NULL) == LOCKS_OK && LENS(6, 100, 21), "logits NULL decodes");

    /* budget 16: fine for sequence 0 (6 tokens: dense), below sequence 1's forced pages */
    locks_step_params sp = p.step;
    sp.budget = 16;
    CHECK(locks_ctx_set_step(c, sp));
    int32_t s01[2] = {0, 1};
    st = locks_ctx_decode_seqs(c, s01, 2, tk, lg);
    test_cond(st == LOCKS_ERR_BUDGET && LENS(6, 100, 21), "budget error in the second named sequence: %s, rolled back",
              locks_status_str(st));
    CHECK(locks_ctx_set_step(c, p.step));

    /* a full sequence 1: POOL_FULL before anything moves */
    CHECK(locks_ctx_prefill_seq(c, 1, pr, 28, NULL));
    int32_t s21[2] = {2, 1};
    st = locks_ctx_decode_seqs(c, s21, 2, tk, lg);
    test_cond(st == LOCKS_ERR_POOL_FULL && LENS(6, 128, 21), "a full sequence: %s, nothing moved", locks_status_str(st));

    test_cond(locks_ctx_truncate_seq(c, 3, 0) == LOCKS_ERR_INVALID_ARG, "truncate_seq of sequence 3");
    test_cond(locks_ctx_truncate_seq(c, 2, 22) == LOCKS_ERR_INVALID_ARG && LENS(6, 128, 21), "truncate_seq past the end");
    test_cond(locks_ctx_truncate_seq(c, 1, 0) == LOCKS_OK && LENS(6, 0, 21), "truncate_seq to 0 empties one sequence");
#undef LENS
    locks_ctx_free(c);
    free(lg);
}

/* Speculative rounds on sequence 2 of 3 (greedy): the tokens must be greedy decoding
 * under `full` alone, the other sequences must not move, and a round's bad input must
 * leave the sequence as it was. */
static void check_speculate_round(const locks_model *m) {
    const int32_t V = locks_model_get_info(m).n_vocab;
    enum { PLEN = 150, GEN = 40 };
    int32_t pr[PLEN];
    for (int i = 0; i < PLEN; i++) pr[i] = tu_int(0, V - 1);
    float *lg = malloc(sizeof(float) * (size_t)V);
    SETUP(lg);
    locks_status st;
    /* reference: greedy under full, alone */
    int32_t ref[GEN];
    locks_ctx *a = locks_ctx_init(m, tiny_params(LOCKS_SEL_FULL, 1, NCTX), &st);
    SETUP(a);
    CHECK(locks_ctx_prefill(a, pr, PLEN, lg));
    for (int i = 0; i < GEN; i++) {
        ref[i] = tiny_argmax(lg, V);
        if (i + 1 < GEN) CHECK(locks_ctx_decode(a, ref[i], lg));
    }
    locks_ctx_free(a);

    locks_ctx_params p = tiny_params(LOCKS_SEL_LOCKS, 3, NCTX); /* budget 64: drafts differ from dense at times */
    locks_ctx *c = locks_ctx_init(m, p, &st);
    SETUP(c);
    locks_sampler_params sp = locks_sampler_default_params();
    sp.temp = 0.0f;
    locks_sampler *smp = locks_sampler_init(sp, V, &st);
    SETUP(smp);
    CHECK(locks_ctx_prefill_seq(c, 0, pr, 20, NULL));
    CHECK(locks_ctx_prefill_seq(c, 2, pr, PLEN, lg));
    int32_t got[GEN + 8], n_got = 0, out[5], n_out, rounds = 0, accepted = 0;
    got[n_got++] = tiny_argmax(lg, V);
    while (n_got < GEN) {
        int32_t n = locks_ctx_seq_len(c, 2);
        CHECK(locks_speculate_round(c, 2, got[n_got - 1], 4, &p.step, smp, out, &n_out));
        test_cond(n_out >= 1 && n_out <= 5 && locks_ctx_seq_len(c, 2) == n + n_out, "round: %d out, length %d -> %d",
                  n_out, n, locks_ctx_seq_len(c, 2));
        for (int32_t i = 0; i < n_out; i++) got[n_got++] = out[i];
        rounds++;
        accepted += n_out - 1;
    }
    test_cond(!memcmp(got, ref, sizeof(int32_t) * GEN), "speculative rounds (greedy) != dense greedy decoding");
    test_cond(locks_ctx_seq_len(c, 0) == 20 && locks_ctx_seq_len(c, 1) == 0, "other sequences moved");
    test_cond(locks_ctx_get_params(c).step.selector == LOCKS_SEL_LOCKS && locks_ctx_get_params(c).step.budget == 64,
              "the context's step parameters changed");
    printf("  speculate_round: %d tokens in %d rounds of k 4, %d drafts accepted; = dense greedy\n", GEN, rounds,
           accepted);
    int32_t n = locks_ctx_seq_len(c, 2);
    locks_step_params full = p.step;
    full.selector = LOCKS_SEL_FULL;
    test_cond(locks_speculate_round(c, 2, 1, 4, &full, smp, out, &n_out) == LOCKS_ERR_INVALID_ARG &&
                  locks_ctx_seq_len(c, 2) == n, "a FULL draft: INVALID_ARG, nothing moved");
    test_cond(locks_speculate_round(c, 2, V, 4, &p.step, smp, out, &n_out) == LOCKS_ERR_INVALID_ARG &&
                  locks_ctx_seq_len(c, 2) == n, "a bad t0: INVALID_ARG, nothing moved");
    test_cond(locks_speculate_round(c, 3, 1, 4, &p.step, smp, out, &n_out) == LOCKS_ERR_INVALID_ARG, "sequence 3 of 3");
    test_cond(locks_speculate_round(c, 2, 1, NCTX, &p.step, smp, out, &n_out) == LOCKS_ERR_POOL_FULL &&
                  locks_ctx_seq_len(c, 2) == n, "k past the context: POOL_FULL, nothing moved");
    locks_step_params tiny = p.step;
    tiny.budget = 16; /* below the forced pages: the draft fails after nothing was kept */
    test_cond(locks_speculate_round(c, 2, 1, 4, &tiny, smp, out, &n_out) == LOCKS_ERR_BUDGET &&
                  locks_ctx_seq_len(c, 2) == n, "a failing draft: BUDGET, the sequence as it was");
    locks_sampler_free(smp);
    locks_ctx_free(c);
    free(lg);
}

/* A sequence's K/V read out (locks_ctx_seq_read_kv) and loaded into another context's
 * sequence (locks_ctx_seq_load_kv): decoding there must go on bit for bit as in the
 * original, under `locks` (summaries rebuilt from the keys: the same selections). */
static void check_kv_roundtrip(const locks_model *m) {
    const locks_model_info in = locks_model_get_info(m);
    const int32_t V = in.n_vocab, PLEN = 173;
    const size_t per = (size_t)PLEN * (size_t)in.n_kv_heads * (size_t)in.head_dim;
    int32_t pr[173];
    for (int i = 0; i < PLEN; i++) pr[i] = tu_int(0, V - 1);
    uint16_t *k = malloc(sizeof(uint16_t) * per * (size_t)in.n_layers);
    uint16_t *v = malloc(sizeof(uint16_t) * per * (size_t)in.n_layers);
    float *a_lg = malloc(sizeof(float) * (size_t)V), *b_lg = malloc(sizeof(float) * (size_t)V);
    SETUP(k && v && a_lg && b_lg);
    locks_status st;
    locks_ctx *a = locks_ctx_init(m, tiny_params(LOCKS_SEL_LOCKS, 2, NCTX), &st), *b = locks_ctx_init(m, tiny_params(LOCKS_SEL_LOCKS, 3, NCTX), &st);
    SETUP(a && b);
    CHECK(locks_ctx_prefill_seq(a, 1, pr, PLEN, NULL));
    for (int32_t l = 0; l < in.n_layers; l++)
        CHECK(locks_ctx_seq_read_kv(a, 1, l, k + (size_t)l * per, v + (size_t)l * per));
    CHECK(locks_ctx_prefill_seq(b, 2, pr, 40, NULL)); /* replaced by the load */
    CHECK(locks_ctx_prefill_seq(b, 0, pr, 9, NULL));
    CHECK(locks_ctx_seq_load_kv(b, 2, PLEN, k, v));
    test_cond(locks_ctx_seq_len(b, 2) == PLEN && locks_ctx_seq_len(b, 0) == 9, "load: lengths");
    int same = 1;
    int32_t tok = tu_int(0, V - 1), sa = 1, sb = 2;
    for (int t = 0; t < 12; t++) {
        CHECK(locks_ctx_decode_seqs(a, &sa, 1, &tok, a_lg));
        CHECK(locks_ctx_decode_seqs(b, &sb, 1, &tok, b_lg));
        same &= memcmp(a_lg, b_lg, sizeof(float) * (size_t)V) == 0;
        tok = tiny_argmax(a_lg, V);
    }
    test_cond(same, "decoding after a K/V load differs from the original sequence");
    test_cond(locks_ctx_seq_load_kv(b, 2, NCTX + 1, k, v) == LOCKS_ERR_POOL_FULL && locks_ctx_seq_len(b, 2) == PLEN + 12,
              "a load past n_ctx: POOL_FULL, the sequence as it was");
    test_cond(locks_ctx_seq_read_kv(a, 2, 0, k, v) == LOCKS_ERR_INVALID_ARG &&
                  locks_ctx_seq_read_kv(a, 0, in.n_layers, k, v) == LOCKS_ERR_INVALID_ARG,
              "read_kv of a bad sequence or layer");
    k[5] = 0x7c00; /* +inf */
    test_cond(locks_ctx_seq_load_kv(b, 2, PLEN, k, v) == LOCKS_ERR_NONFINITE && locks_ctx_seq_len(b, 2) == PLEN + 12 &&
                  locks_ctx_seq_len(b, 0) == 9,
              "non-finite K: NONFINITE, every sequence as it was");
    k[5] = 0;
    v[per * (size_t)in.n_layers - 1] = 0xfe00; /* a NaN in the last layer's last value */
    test_cond(locks_ctx_seq_load_kv(b, 2, PLEN, k, v) == LOCKS_ERR_NONFINITE && locks_ctx_seq_len(b, 2) == PLEN + 12,
              "non-finite V in the last layer: NONFINITE, the sequence as it was");
    CHECK(locks_ctx_truncate_seq(b, 2, 0));
    CHECK(locks_ctx_prefill_seq(b, 2, pr, 5, NULL)); /* and usable again */
    locks_ctx_free(a);
    locks_ctx_free(b);
    free(k);
    free(v);
    free(a_lg);
    free(b_lg);
}

/* Selections of one context's decode steps, folded into a hash (on_step). */
typedef struct {
    uint64_t h;
    int32_t hkv;
} sel_hash;

static void hash_step(int32_t layer, const float *q, int32_t n_q_heads, const locks_selection *sel, void *user) {
    (void)q;
    (void)n_q_heads;
    sel_hash *x = user;
    for (int32_t i = 0; i < x->hkv; i++)
        for (int32_t j = 0; j < sel->n_pages[i]; j++)
            x->h = (x->h ^ (uint64_t)(sel->pages[(size_t)i * (size_t)sel->max_pages + (size_t)j] + 1000 * layer + 1)) *
                   0x100000001b3ull;
}

/* The byte to flip (the high byte of the value, where the exponent lies) if a summary
 * record holds a non-finite scale (Q) or float (F32); SIZE_MAX if it holds none. */
static size_t record_nonfinite(int32_t d, int32_t r, locks_summary_prec prec, const unsigned char *rec) {
    if (prec == LOCKS_SUMMARY_F32) {
        for (size_t i = 0; i < (size_t)(d + r * d + 16 * r); i++) {
            float x;
            memcpy(&x, rec + 4 * i, 4);
            if (!isfinite(x)) return 4 * i + 3;
        }
        return SIZE_MAX;
    }
    const size_t D = (size_t)d, R = (size_t)r;
    for (size_t i = 0; i < 1 + 2 * R; i++) { /* mu_s, v_s[r], c_s[r] */
        const size_t off = i == 0 ? D : i <= R ? D + 2 + R * D / 2 + 2 * (i - 1) : D + 2 + R * D / 2 + 2 * R + 16 * R + 2 * (i - 1 - R);
        uint16_t h;
        memcpy(&h, rec + off, 2);
        if ((h & 0x7c00) == 0x7c00) return off + 1;
    }
    return SIZE_MAX;
}

/* Summaries carried with the K/V (locks_ctx_seq_read_summaries / locks_ctx_seq_load): the
 * loaded sequence's stored summaries equal the source's bit for bit (raw records and
 * locks_cache_summary_get), and decoding goes on bit for bit under `locks` at a budget
 * of one chosen page and under `quest` (its min/max built from the loaded keys), the
 * same pages selected at every step. Summaries taken from the wrong pages are copied as
 * given (read back so) and change the selections: the load uses them, it does not build
 * them. Bad input changes nothing; random record bits with finite scales load and decode. */
static void check_summaries_roundtrip(const locks_model *m, locks_summary_prec prec) {
    const locks_model_info in = locks_model_get_info(m);
    const int32_t V = in.n_vocab, PLEN = 173, NP = PLEN / LOCKS_PAGE, L = in.n_layers, H = in.n_kv_heads;
    const size_t per = (size_t)PLEN * (size_t)H * (size_t)in.head_dim;
    int32_t pr[173];
    for (int i = 0; i < PLEN; i++) pr[i] = tu_int(0, V - 1);
    locks_ctx_params pa = tiny_params(LOCKS_SEL_LOCKS, 2, NCTX), pb = tiny_params(LOCKS_SEL_LOCKS, 3, NCTX);
    pa.summary_prec = pb.summary_prec = prec;
    pa.selectors = pb.selectors = LOCKS_SEL_BIT(LOCKS_SEL_QUEST);
    sel_hash ha = {0, in.n_kv_heads}, hb = {0, in.n_kv_heads};
    pa.on_step = pb.on_step = hash_step;
    pa.on_step_user = &ha;
    pb.on_step_user = &hb;
    locks_status st;
    locks_ctx *a = locks_ctx_init(m, pa, &st), *b = locks_ctx_init(m, pb, &st);
    SETUP(a && b);
    const size_t rec = locks_ctx_summary_bytes(a), per_sum = (size_t)NP * (size_t)H * rec;
    test_cond(rec == locks_summary_bytes(in.head_dim, 8, prec) && rec == locks_cache_summary_bytes(locks_ctx_cache(a)),
              "summary record bytes %zu", rec);
    uint16_t *k = malloc(sizeof(uint16_t) * per * (size_t)L), *v = malloc(sizeof(uint16_t) * per * (size_t)L);
    unsigned char *sa = malloc(per_sum * (size_t)L), *sb = malloc(per_sum * (size_t)L), *bad = malloc(per_sum * (size_t)L);
    float *a_lg = malloc(sizeof(float) * (size_t)V), *b_lg = malloc(sizeof(float) * (size_t)V);
    SETUP(k && v && sa && sb && bad && a_lg && b_lg);
    CHECK(locks_ctx_prefill_seq(a, 1, pr, PLEN, NULL));
    for (int32_t l = 0; l < L; l++) {
        CHECK(locks_ctx_seq_read_kv(a, 1, l, k + (size_t)l * per, v + (size_t)l * per));
        CHECK(locks_ctx_seq_read_summaries(a, 1, l, sa + (size_t)l * per_sum));
    }
    CHECK(locks_ctx_prefill_seq(b, 2, pr + 3, 90, NULL)); /* replaced by the load: its pages held other summaries */
    CHECK(locks_ctx_prefill_seq(b, 0, pr, 9, NULL));
    CHECK(locks_ctx_seq_load(b, 2, PLEN, k, v, sa));
    test_cond(locks_ctx_seq_len(b, 2) == PLEN && locks_ctx_seq_len(b, 0) == 9, "load with summaries: lengths");
    memset(sb, 0x5a, per_sum * (size_t)L);
    for (int32_t l = 0; l < L; l++) CHECK(locks_ctx_seq_read_summaries(b, 2, l, sb + (size_t)l * per_sum));
    test_cond(memcmp(sa, sb, per_sum * (size_t)L) == 0, "the loaded summaries differ from the source's");
    /* and through the cache's own read-back (dequantized), page by page */
    float mu[2][64], basis[2][8 * 64], coef[2][16 * 8];
    int32_t npa = 0, npb = 0, same_get = 1;
    const int32_t *bta = locks_cache_block_table(locks_ctx_cache(a), 1, &npa);
    const int32_t *btb = locks_cache_block_table(locks_ctx_cache(b), 2, &npb);
    SETUP(bta && btb && npa == npb && in.head_dim <= 64);
    for (int32_t l = 0; l < L; l++)
        for (int32_t h = 0; h < H; h++)
            for (int32_t i = 0; i < NP; i++) {
                CHECK(locks_cache_summary_get(locks_ctx_cache(a), l, h, bta[i], mu[0], basis[0], coef[0]));
                CHECK(locks_cache_summary_get(locks_ctx_cache(b), l, h, btb[i], mu[1], basis[1], coef[1]));
                same_get &= !memcmp(mu[0], mu[1], sizeof mu[0]) && !memcmp(basis[0], basis[1], sizeof basis[0]) &&
                            !memcmp(coef[0], coef[1], sizeof coef[0]);
            }
    test_cond(same_get, "locks_cache_summary_get after the load differs from the source's");
    int same = 1;
    int32_t tok = tu_int(0, V - 1), s1 = 1, s2 = 2;
    for (int t = 0; t < 16; t++) {
        if (t == 8) { /* quest reads the min/max the page hooks built at the load */
            locks_step_params q = locks_ctx_get_params(a).step;
            q.selector = LOCKS_SEL_QUEST;
            CHECK(locks_ctx_set_step(a, q));
            CHECK(locks_ctx_set_step(b, q));
        }
        CHECK(locks_ctx_decode_seqs(a, &s1, 1, &tok, a_lg));
        CHECK(locks_ctx_decode_seqs(b, &s2, 1, &tok, b_lg));
        same &= memcmp(a_lg, b_lg, sizeof(float) * (size_t)V) == 0;
        tok = tiny_argmax(a_lg, V);
    }
    test_cond(same && ha.h == hb.h && ha.h != 0, "decoding after a load with summaries differs from the source (%s)",
              prec == LOCKS_SUMMARY_Q ? "Q" : "F32");
    locks_step_params lk = locks_ctx_get_params(a).step;
    lk.selector = LOCKS_SEL_LOCKS;
    CHECK(locks_ctx_set_step(a, lk));
    CHECK(locks_ctx_set_step(b, lk));
    CHECK(locks_ctx_truncate_seq(a, 1, PLEN));

    /* the wrong pages' summaries (page i gets page NP - 1 - i's) are copied, and used */
    for (int32_t l = 0; l < L; l++)
        for (int32_t i = 0; i < NP; i++)
            memcpy(bad + (size_t)l * per_sum + (size_t)i * H * rec, sa + (size_t)l * per_sum + (size_t)(NP - 1 - i) * H * rec,
                   (size_t)H * rec);
    CHECK(locks_ctx_seq_load(b, 2, PLEN, k, v, bad));
    for (int32_t l = 0; l < L; l++) CHECK(locks_ctx_seq_read_summaries(b, 2, l, sb + (size_t)l * per_sum));
    test_cond(memcmp(bad, sb, per_sum * (size_t)L) == 0, "summaries given to the load are not the ones stored");
    ha.h = hb.h = 0;
    tok = tu_int(0, V - 1);
    for (int t = 0; t < 16; t++) {
        CHECK(locks_ctx_decode_seqs(a, &s1, 1, &tok, a_lg));
        CHECK(locks_ctx_decode_seqs(b, &s2, 1, &tok, b_lg));
        tok = tiny_argmax(a_lg, V);
    }
    test_cond(ha.h != hb.h, "the wrong pages' summaries selected the same pages: the load did not use them");
    /* without summaries (NULL): built from the keys, the same bits on this machine */
    CHECK(locks_ctx_seq_load(b, 2, PLEN, k, v, NULL));
    for (int32_t l = 0; l < L; l++) CHECK(locks_ctx_seq_read_summaries(b, 2, l, sb + (size_t)l * per_sum));
    test_cond(memcmp(sa, sb, per_sum * (size_t)L) == 0, "summaries rebuilt at the load differ from the source's");

    /* bad input changes nothing */
    CHECK(locks_ctx_seq_load(b, 2, PLEN, k, v, sa));
    memcpy(bad, sa, per_sum * (size_t)L);
    const size_t at = (size_t)(L - 1) * per_sum + (size_t)tu_int(0, NP * H - 1) * rec;
    if (prec == LOCKS_SUMMARY_Q) { /* one scale: mu's, a basis vector's or a coefficient column's */
        const size_t d = (size_t)in.head_dim, r = 8, off[3] = {d, d + 2 + r * d / 2 + 2 * (size_t)tu_int(0, 7),
                                                                 d + 2 + r * d / 2 + 2 * r + 16 * r + 2 * (size_t)tu_int(0, 7)};
        const uint16_t nan16 = tu_int(0, 1) ? 0x7c00 : 0xfe01;
        memcpy(bad + at + off[tu_int(0, 2)], &nan16, 2);
    } else {
        const float x = tu_int(0, 1) ? INFINITY : NAN;
        memcpy(bad + at + 4 * (size_t)tu_int(0, (int32_t)(rec / 4) - 1), &x, 4);
    }
    test_cond(locks_ctx_seq_load(b, 2, PLEN, k, v, bad) == LOCKS_ERR_NONFINITE, "a non-finite summary scale: NONFINITE");
    test_cond(locks_ctx_seq_load(b, 2, PLEN, NULL, v, sa) == LOCKS_ERR_INVALID_ARG &&
                  locks_ctx_seq_load(b, 3, PLEN, k, v, sa) == LOCKS_ERR_INVALID_ARG &&
                  locks_ctx_seq_load(b, -1, PLEN, k, v, sa) == LOCKS_ERR_INVALID_ARG &&
                  locks_ctx_seq_load(b, 2, -1, k, v, sa) == LOCKS_ERR_INVALID_ARG &&
                  locks_ctx_seq_load(NULL, 2, PLEN, k, v, sa) == LOCKS_ERR_INVALID_ARG,
              "NULL k, a bad sequence, n < 0, a NULL context: INVALID_ARG");
    test_cond(locks_ctx_seq_read_summaries(b, 3, 0, sb) == LOCKS_ERR_INVALID_ARG &&
                  locks_ctx_seq_read_summaries(b, 2, L, sb) == LOCKS_ERR_INVALID_ARG &&
                  locks_ctx_seq_read_summaries(b, 2, 0, NULL) == LOCKS_ERR_INVALID_ARG &&
                  locks_ctx_seq_read_summaries(NULL, 2, 0, sb) == LOCKS_ERR_INVALID_ARG,
              "read_summaries of a bad sequence or layer, to NULL: INVALID_ARG");
    test_cond(locks_ctx_seq_len(b, 2) == PLEN && locks_ctx_seq_len(b, 0) == 9, "bad loads moved a sequence");
    for (int32_t l = 0; l < L; l++) CHECK(locks_ctx_seq_read_summaries(b, 2, l, sb + (size_t)l * per_sum));
    test_cond(memcmp(sa, sb, per_sum * (size_t)L) == 0, "a refused load changed the stored summaries");
    CHECK(locks_ctx_truncate_seq(a, 1, PLEN));
    same = 1;
    tok = tu_int(0, V - 1);
    for (int t = 0; t < 4; t++) {
        CHECK(locks_ctx_decode_seqs(a, &s1, 1, &tok, a_lg));
        CHECK(locks_ctx_decode_seqs(b, &s2, 1, &tok, b_lg));
        same &= memcmp(a_lg, b_lg, sizeof(float) * (size_t)V) == 0;
        tok = tiny_argmax(a_lg, V);
    }
    test_cond(same, "decoding after refused loads differs from the source");

    /* random bits with finite scales are data: they load, and decoding runs */
    for (size_t i = 0; i < per_sum * (size_t)L; i++) bad[i] = (unsigned char)tu_int(0, 255);
    for (size_t i = 0; i < (size_t)L * NP * H; i++) {
        unsigned char *r0 = bad + i * rec;
        size_t off;
        while ((off = record_nonfinite(in.head_dim, 8, prec, r0)) != SIZE_MAX) r0[off] ^= 0x40;
    }
    CHECK(locks_ctx_seq_load(b, 2, PLEN, k, v, bad));
    for (int t = 0; t < 4; t++) CHECK(locks_ctx_decode_seqs(b, &s2, 1, &tok, b_lg));
    locks_ctx_free(a);
    locks_ctx_free(b);
    free(k);
    free(v);
    free(sa);
    free(sb);
    free(bad);
    free(a_lg);
    free(b_lg);
}

/* Shared prefix pages (locks_ctx_seq_share): sequence 1 takes sequence 0's first whole
 * pages and prefills the rest of another prompt with that prefix; sequence 2 prefills
 * that prompt itself. Same logits, bit for bit, after the prompt and at every greedy
 * step, also after sequence 0 (the pages' other holder) is emptied; misuse refused. */
static void check_share(const locks_model *m) {
    const int32_t V = locks_model_get_info(m).n_vocab, N0 = 100, N2 = 130;
    int32_t p1[100], p2[130];
    for (int32_t i = 0; i < N0; i++) p1[i] = tu_int(0, V - 1);
    memcpy(p2, p1, sizeof(int32_t) * 96);
    for (int32_t i = 96; i < N2; i++) p2[i] = tu_int(0, V - 1);
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, tiny_params(LOCKS_SEL_LOCKS, 3, NCTX), &st);
    SETUP(c);
    const int32_t all = locks_cache_free_pages(locks_ctx_cache(c));
    float *la = malloc(sizeof(float) * 2 * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    SETUP(la && lb);
    test_cond(locks_ctx_seq_share(c, 1, 0, 16) != LOCKS_OK, "shared from an empty sequence");
    CHECK(locks_ctx_prefill_seq(c, 0, p1, N0, NULL));
    const int32_t n = locks_ctx_seq_shareable(c, 0, N0);
    test_cond(n == 96, "shareable %d of 100 (want 96)", n);
    locks_clear_error();
    test_cond(locks_ctx_seq_share(c, 1, 0, 95) == LOCKS_ERR_INVALID_ARG && locks_last_error()[0],
              "95 tokens (not whole pages) accepted or no message");
    test_cond(locks_ctx_seq_share(c, 0, 0, 16) == LOCKS_ERR_INVALID_ARG, "dst == src accepted");
    test_cond(locks_ctx_seq_share(c, 1, 0, 112) == LOCKS_ERR_INVALID_ARG, "past the source's length accepted");
    test_cond(locks_ctx_seq_len(c, 1) == 0, "a refused share changed sequence 1");
    CHECK(locks_ctx_seq_share(c, 1, 0, n));
    CHECK(locks_ctx_prefill_seq(c, 1, p2 + n, N2 - n, lb));
    CHECK(locks_ctx_prefill_seq(c, 2, p2, N2, la));
    test_cond(!memcmp(la, lb, sizeof(float) * (size_t)V), "logits after the prompt: shared != prefilled");
    for (int32_t t = 0; t < 8; t++) {
        if (t == 4) CHECK(locks_ctx_truncate_seq(c, 0, 0)); /* the other holder goes */
        int32_t seqs[2] = {1, 2}, tok = tiny_argmax(la, V), toks[2] = {tok, tok};
        CHECK(locks_ctx_decode_seqs(c, seqs, 2, toks, la));
        test_cond(!memcmp(la, la + V, sizeof(float) * (size_t)V), "step %d: shared != prefilled", t);
    }
    CHECK(locks_ctx_truncate_seq(c, 1, 0));
    CHECK(locks_ctx_truncate_seq(c, 2, 0));
    test_cond(locks_cache_free_pages(locks_ctx_cache(c)) == all, "pages free at the end: %d of %d",
              locks_cache_free_pages(locks_ctx_cache(c)), all);
    free(la);
    free(lb);
    locks_ctx_free(c);
}

int main(void) {
    tu_seed("test_serve_seqs");
    locks_status st;
    locks_model *m = tiny_llama(&SHAPE, &st);
    test_cond(m != NULL, "tiny model: %s", locks_status_str(st));
    if (!m) return test_report("test_serve_seqs");
    check_subsets(m, LOCKS_SEL_FULL);
    check_subsets(m, LOCKS_SEL_LOCKS);
    check_bad_input(m);
    check_speculate_round(m);
    check_kv_roundtrip(m);
    check_summaries_roundtrip(m, LOCKS_SUMMARY_Q);
    check_summaries_roundtrip(m, LOCKS_SUMMARY_F32);
    check_share(m);
    locks_model_free(m);
    return test_report("test_serve_seqs");
}
