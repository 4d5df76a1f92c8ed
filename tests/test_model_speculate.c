/*
 * test_model_speculate.c — locks_speculate on the real model (label "model").
 *
 * 1. Greedy: on a needle prompt, prose and code (short, to keep CI cheap; the long ones
 *    are in scripts/spec-bench.sh), for draft lengths K 1 and 4 and budgets 48 and 128
 *    (each text both K and both budgets, every pair on some text), the output
 *    is token for token that of locks_generate under `full`, and the context ends with
 *    the same length. The drafts must be rejected sometimes for this to test anything:
 *    the test checks that some round rejected a draft.
 * 2. Sampling: the token at generated positions 2 and 3 over many seeds, dense decoding
 *    vs speculative decoding with a deliberately poor draft (budget 48): a two-sample
 *    chi-square test (p < 1e-4 fails) says whether their frequencies differ. As a power
 *    check, the draft alone (locks_generate with the sparse selector) must differ from
 *    dense at one of those positions by total variation more than speculation does.
 * 3. Bad input (K < 1, K >= n_ctx, a `full` draft, a bad mass) is refused and changes
 *    nothing; a round whose draft fails (budget below the forced pages) returns the error
 *    with the context exactly as before that round: dense decoding continued from it gives
 *    what a fresh context gives.
 *
 * 4. The drafts' page replay (llama_ctx_draft_mode: a round's first draft step selects the
 *    pages, the later ones attend those again): replayed at the recorded position, a step
 *    gives the recorded step's logits bit for bit (a sparse budget, whose logits differ
 *    from dense ones); replayed at the next position, where a new page begins, it
 *    attends that page too: with a budget covering the context, the logits of a plain
 *    step there, bit for bit.
 *
 * Each run starts from one prefilled prefix (truncated back between runs) and passes the
 * prompt's last token as the 1-token prompt, so a run costs only its decode steps.
 */
#include "test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "locks.h"
#include "locks_model.h"
#include "test_model_util.h"
#include "model/llama_internal.h"
#include "model/quant.h"
#include "util.h"

/* A needle in filler: "The pass key is N. Remember it." inside repeated sentences. */
static char *needle_text(void) {
    const char *fill = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
    size_t cap = 8192;
    char *t = malloc(cap);
    SETUP(t);
    t[0] = '\0';
    for (int i = 0; i < 14; i++) {
        strcat(t, fill);
        if (i == 6) strcat(t, "The pass key is 71432. Remember it. 71432 is the pass key. ");
    }
    strcat(t, "What is the pass key? The pass key is");
    return t;
}

static int32_t *tokenize(const locks_model *m, const char *text, int32_t max, int32_t *n) {
    const locks_tokenizer *tk = locks_model_tokenizer(m);
    size_t len = strlen(text);
    int32_t *ids = malloc(sizeof(int32_t) * (len + 2));
    SETUP(ids);
    int32_t cnt = 0;
    SETUP(locks_tokenizer_encode(tk, text, len, false, ids, (int32_t)len + 1, &cnt) == LOCKS_OK);
    *n = cnt < max ? cnt : max;
    return ids;
}

static locks_ctx *new_ctx(const locks_model *m, int32_t n_ctx) {
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 2;
    cp.step.selector = LOCKS_SEL_FULL;
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    SETUP(c);
    return c;
}

static locks_sampler *new_sampler(const locks_model *m, float temp, uint64_t seed) {
    locks_sampler_params sp = locks_sampler_default_params();
    sp.temp = temp;
    sp.top_k = 6;
    sp.top_p = 1.0f;
    sp.seed = seed;
    locks_status st;
    locks_sampler *s = locks_sampler_init(sp, locks_model_get_info(m).n_vocab, &st);
    SETUP(s);
    return s;
}

/* ---- 1. greedy ---- */
/* which: the text's index; its two runs are (K 1, budget[which % 2]) and (K 4, the other
 * budget), so over the three texts every (K, budget) pair runs and every text sees both
 * K and both budgets (half the runs of the full cross product, CI being 2 cores). */
static void test_greedy(const locks_model *m, const char *name, const char *text, int which) {
    int32_t n = 0;
    int32_t *tok = tokenize(m, text, 420, &n);
    SETUP(n > 100);
    enum { N_PRED = 20 };
    locks_ctx *c = new_ctx(m, 1024);
    SETUP(locks_ctx_prefill(c, tok, n - 1, NULL) == LOCKS_OK);
    int32_t ref[N_PRED], got[N_PRED], n_ref = 0, n_got = 0;
    locks_sampler *s = new_sampler(m, 0.0f, 1);
    SETUP(locks_generate(c, tok + n - 1, 1, N_PRED, s, NULL, NULL, ref, &n_ref) == LOCKS_OK);
    const int32_t len_ref = locks_ctx_len(c);
    const int32_t ks[2] = {1, 4}, budgets[2] = {48, 128};
    int rejected = 0;
    for (int ki = 0; ki < 2; ki++) {
        const int bi = (which + ki) % 2;
        SETUP(locks_ctx_truncate(c, n - 1) == LOCKS_OK);
        locks_spec_params sp = {ks[ki], locks_step_default_params()};
        sp.draft.selector = LOCKS_SEL_LOCKS;
        sp.draft.budget = budgets[bi];
        locks_spec_stats ss;
        locks_status st = locks_speculate(c, tok + n - 1, 1, N_PRED, s, &sp, NULL, NULL, got, &n_got, &ss);
        test_cond(st == LOCKS_OK, "%s K %d budget %d: %s", name, ks[ki], budgets[bi], locks_status_str(st));
        int same = n_got == n_ref && !memcmp(got, ref, sizeof(int32_t) * (size_t)n_ref);
        int first = 0;
        while (first < n_got && first < n_ref && got[first] == ref[first]) first++;
        test_cond(same, "%s K %d budget %d: %d tokens vs dense %d, first difference at %d", name, ks[ki], budgets[bi],
              n_got, n_ref, first);
        test_cond(locks_ctx_len(c) == len_ref, "%s K %d budget %d: context %d tokens, dense %d", name, ks[ki],
              budgets[bi], locks_ctx_len(c), len_ref);
        test_cond(ss.n_accepted <= ss.n_drafted && ss.n_rounds > 0, "%s: stats %d/%d in %d rounds", name, ss.n_accepted,
              ss.n_drafted, ss.n_rounds);
        rejected |= ss.n_accepted < ss.n_drafted;
        printf("%-6s K %d budget %3d: accepted %2d of %2d drafts in %2d rounds\n", name, ks[ki], budgets[bi],
               ss.n_accepted, ss.n_drafted, ss.n_rounds);
    }
    test_cond(rejected, "%s: no draft was ever rejected: the greedy comparison tested nothing", name);
    locks_sampler_free(s);
    locks_ctx_free(c);
    free(tok);
}

/* ---- 2. sampling ---- */
enum { N_TRIALS = 160, N_POS = 3, N_TOP = 64 };

/* Token ids seen at generated position pos over trials: counts in a small table. */
typedef struct {
    int32_t id[N_TOP];
    int32_t cnt[3][N_TOP]; /* dense, speculative, draft alone */
    int32_t n;
    int32_t other[3];
} freq;

static void freq_add(freq *f, int which, int32_t id) {
    for (int32_t i = 0; i < f->n; i++)
        if (f->id[i] == id) {
            f->cnt[which][i]++;
            return;
        }
    if (f->n < N_TOP) {
        f->id[f->n] = id;
        f->cnt[which][f->n++] = 1;
        return;
    }
    f->other[which]++;
}

/* Two-sample chi-square of rows a and b (equal totals), cells pooled until each expects
 * >= 10; returns the statistic and the degrees of freedom. */
static double chi2(const freq *f, int a, int b, int *dof) {
    double stat = 0.0, pa = 0, pb = 0;
    int cells = 0;
    for (int32_t i = 0; i <= f->n; i++) {
        pa += i < f->n ? f->cnt[a][i] : f->other[a];
        pb += i < f->n ? f->cnt[b][i] : f->other[b];
        if (pa + pb >= 20 || i == f->n) {
            if (pa + pb > 0) {
                double e = (pa + pb) / 2.0;
                stat += (pa - e) * (pa - e) / e + (pb - e) * (pb - e) / e;
                cells++;
            }
            pa = pb = 0;
        }
    }
    *dof = cells > 1 ? cells - 1 : 1;
    return stat;
}

static double tv(const freq *f, int a, int b) {
    double s = fabs((double)f->other[a] - f->other[b]);
    for (int32_t i = 0; i < f->n; i++) s += fabs((double)f->cnt[a][i] - f->cnt[b][i]);
    return s / (2.0 * N_TRIALS);
}

/* chi-square 0.9999 quantile, Wilson-Hilferty approximation (a strict level: the pooled
 * cells are small and the statistic only approximately chi-square) */
static double chi2_crit(int k) {
    const double z = 3.719016; /* 0.9999 normal quantile */
    double h = 2.0 / (9.0 * k);
    return k * pow(1.0 - h + z * sqrt(h), 3.0);
}

static void test_sampling(const locks_model *m, const char *text) {
    int32_t n = 0;
    int32_t *tok = tokenize(m, text, 400, &n);
    locks_ctx *c = new_ctx(m, 1024);
    SETUP(locks_ctx_prefill(c, tok, n - 1, NULL) == LOCKS_OK);
    static freq f[N_POS];
    memset(f, 0, sizeof f);
    locks_spec_params sp = {2, locks_step_default_params()};
    sp.draft.selector = LOCKS_SEL_LOCKS;
    sp.draft.budget = 48;
    int32_t acc = 0, drafted = 0;
    for (int which = 0; which < 3; which++)
        for (int32_t trial = 0; trial < N_TRIALS; trial++) {
            locks_sampler *s = new_sampler(m, 1.0f, 1000u + (uint64_t)trial + 7919u * (uint64_t)which);
            int32_t out[N_POS], n_out = 0;
            SETUP(locks_ctx_truncate(c, n - 1) == LOCKS_OK);
            locks_status st;
            if (which == 1) {
                locks_spec_stats ss;
                st = locks_speculate(c, tok + n - 1, 1, N_POS, s, &sp, NULL, NULL, out, &n_out, &ss);
                acc += ss.n_accepted, drafted += ss.n_drafted;
            } else {
                locks_step_params p = locks_step_default_params();
                p.selector = which == 0 ? LOCKS_SEL_FULL : LOCKS_SEL_LOCKS;
                p.budget = 48;
                SETUP(locks_ctx_set_step(c, p) == LOCKS_OK);
                st = locks_generate(c, tok + n - 1, 1, N_POS, s, NULL, NULL, out, &n_out);
            }
            SETUP(st == LOCKS_OK && n_out == N_POS);
            for (int32_t pos = 0; pos < N_POS; pos++) freq_add(&f[pos], which, out[pos]);
            locks_sampler_free(s);
        }
    double tv_spec_max = 0.0, tv_draft_max = 0.0;
    for (int32_t pos = 1; pos < N_POS; pos++) {
        int dof;
        double x = chi2(&f[pos], 0, 1, &dof), crit = chi2_crit(dof);
        double tvs = tv(&f[pos], 0, 1), tvd = tv(&f[pos], 0, 2);
        tv_spec_max = tvs > tv_spec_max ? tvs : tv_spec_max;
        tv_draft_max = tvd > tv_draft_max ? tvd : tv_draft_max;
        printf("sampling, generated position %d: chi2 %.1f (dof %d, 0.9999 quantile %.1f); TV dense-spec %.3f,"
               " dense-draft %.3f\n", pos + 1, x, dof, crit, tvs, tvd);
        test_cond(x < crit, "position %d: speculative frequencies differ from dense (chi2 %.1f > %.1f)", pos + 1, x, crit);
    }
    printf("sampling: accepted %d of %d drafts\n", acc, drafted);
    test_cond(acc < drafted, "every draft accepted: rejection sampling not exercised");
    test_cond(tv_draft_max > tv_spec_max, "the draft alone is as close to dense as speculation (TV %.3f vs %.3f):"
          " the test cannot tell them apart", tv_draft_max, tv_spec_max);
    locks_ctx_free(c);
    free(tok);
}

/* ---- 3. bad input, failed round ---- */
static void test_errors(const locks_model *m, const char *text) {
    int32_t n = 0;
    int32_t *tok = tokenize(m, text, 300, &n);
    n -= ((n - 4) % 16 + 16) % 16; /* n = 16 j + 4: the drafts fill slots 5, 6, 7, ... of a page */
    locks_ctx *c = new_ctx(m, 512);
    SETUP(locks_ctx_prefill(c, tok, n - 1, NULL) == LOCKS_OK);
    locks_sampler *s = new_sampler(m, 0.0f, 3);
    int32_t out[16], n_out = -1;
    locks_spec_params sp = {4, locks_step_default_params()};
    sp.draft.selector = LOCKS_SEL_LOCKS;
    sp.draft.budget = 64;
    locks_spec_params bad[4] = {sp, sp, sp, sp};
    bad[0].k = 0;
    bad[1].k = 512;
    bad[2].draft.selector = LOCKS_SEL_FULL;
    bad[3].draft.mass = 1.5f;
    for (int i = 0; i < 4; i++) {
        locks_status st = locks_speculate(c, tok + n - 1, 1, 8, s, &bad[i], NULL, NULL, out, &n_out, NULL);
        test_cond(st == LOCKS_ERR_INVALID_ARG, "bad params %d: %s", i, locks_status_str(st));
        test_cond(locks_ctx_len(c) == n - 1 && n_out == 0, "bad params %d changed the context (%d tokens)", i,
              locks_ctx_len(c));
    }
    /* a draft budget that holds the forced pages (sink, recent: 32 tokens) and a partial page
     * of up to 6 tokens: the first round's first two draft steps (partial 5 and 6) run,
     * the third (partial 7) fails with LOCKS_ERR_BUDGET after two sparse tokens were fed */
    locks_spec_params fail = sp;
    fail.draft.budget = 32 + 6;
    locks_status st = locks_speculate(c, tok + n - 1, 1, 8, s, &fail, NULL, NULL, out, &n_out, NULL);
    test_cond(st == LOCKS_ERR_BUDGET, "failing draft: %s", locks_status_str(st));
    test_cond(locks_ctx_len(c) == n && n_out == 1, "after the failed round: %d tokens (want %d), %d out", locks_ctx_len(c),
          n, n_out);
    /* the context is as before the draft: dense decoding from it = from a fresh prefill */
    const int32_t V = locks_model_get_info(m).n_vocab;
    float *l1 = malloc(sizeof(float) * (size_t)V), *l2 = malloc(sizeof(float) * (size_t)V);
    SETUP(l1 && l2);
    SETUP(locks_ctx_decode(c, out[0], l1) == LOCKS_OK);
    locks_ctx *fresh = new_ctx(m, 512);
    SETUP(locks_ctx_prefill(fresh, tok, n - 1, NULL) == LOCKS_OK);
    SETUP(locks_ctx_prefill(fresh, tok + n - 1, 1, NULL) == LOCKS_OK);
    SETUP(locks_ctx_decode(fresh, out[0], l2) == LOCKS_OK);
    test_cond(!memcmp(l1, l2, sizeof(float) * (size_t)V), "logits after the failed round differ from a fresh context's");
    free(l1);
    free(l2);
    locks_ctx_free(fresh);
    locks_sampler_free(s);
    locks_ctx_free(c);
    free(tok);
}

/* ---- 4. draft page replay ---- */
static int same_bits(const float *a, const float *b, int32_t n) { return memcmp(a, b, sizeof(float) * (size_t)n) == 0; }

static void test_draft_replay(const locks_model *m, const char *text) {
    const int32_t n_vocab = locks_model_get_info(m).n_vocab, n0 = 16 * 12 - 1; /* position n0 + 1 starts a page */
    int32_t n = 0;
    int32_t *tok = tokenize(m, text, 420, &n);
    SETUP(n > n0 + 2);
    locks_ctx *c = new_ctx(m, 512);
    float *la = malloc(sizeof(float) * (size_t)n_vocab), *lb = malloc(sizeof(float) * (size_t)n_vocab);
    float *lr = malloc(sizeof(float) * (size_t)n_vocab);
    SETUP(la && lb && lr);
    CHECK(locks_ctx_prefill(c, tok, n0, la));
    locks_step_params sp = locks_step_default_params();
    sp.budget = 48; /* the sink, the recent page and one more */
    CHECK(locks_ctx_set_step(c, sp));
    CHECK(llama_ctx_draft_mode(c, LLAMA_DRAFT_RECORD));
    CHECK(locks_ctx_decode(c, tok[n0], la));
    CHECK(locks_ctx_truncate(c, n0));
    CHECK(llama_ctx_draft_mode(c, LLAMA_DRAFT_REPLAY));
    CHECK(locks_ctx_decode(c, tok[n0], lb));
    CHECK(llama_ctx_draft_mode(c, LLAMA_DRAFT_OFF));
    CHECK(locks_ctx_truncate(c, n0));
    sp.selector = LOCKS_SEL_FULL;
    CHECK(locks_ctx_set_step(c, sp));
    CHECK(locks_ctx_decode(c, tok[n0], lr));
    test_cond(!same_bits(la, lr, n_vocab), "draft replay: budget 48's logits differ from dense ones");
    test_cond(same_bits(la, lb, n_vocab), "draft replay at the recorded position: the recorded step's logits");
    /* a budget covering the context: record at n0, replay at n0 + 1 (a new page) */
    CHECK(locks_ctx_truncate(c, n0));
    sp.selector = LOCKS_SEL_LOCKS;
    sp.budget = 2048;
    CHECK(locks_ctx_set_step(c, sp));
    CHECK(llama_ctx_draft_mode(c, LLAMA_DRAFT_RECORD));
    CHECK(locks_ctx_decode(c, tok[n0], la));
    CHECK(llama_ctx_draft_mode(c, LLAMA_DRAFT_REPLAY));
    CHECK(locks_ctx_decode(c, tok[n0 + 1], lb));
    CHECK(llama_ctx_draft_mode(c, LLAMA_DRAFT_OFF));
    CHECK(locks_ctx_truncate(c, n0));
    CHECK(locks_ctx_decode(c, tok[n0], la));
    CHECK(locks_ctx_decode(c, tok[n0 + 1], lr));
    test_cond(same_bits(lb, lr, n_vocab), "draft replay past a page boundary attends the new page (= a plain step)");
    free(la);
    free(lb);
    free(lr);
    free(tok);
    locks_ctx_free(c);
}

/* The drafts' 4-bit head (llama_ctx_draft_argmax). The Q4_0 copy: quant_q4_0_from_q8_0
 * bit for bit quant_q4_0_from_f32 of the dequantized rows, each value within half a step
 * of the original (float64; a step past 7.5, clamped to 7), on the model's output rows
 * and on random Q8_0 blocks. The
 * draft steps: LLAMA_DRAFT_TOP finite logits, each bit for bit the exact head's, and the
 * token (argmax) the exact head's at every step of a greedy continuation. */
static void test_draft_argmax(const locks_model *m, const char *text) {
    const matmul_weight *o = llama_model_weight(m, 0, LLAMA_W_OUTPUT);
    const int32_t nb = o->cols / GGML_QBLOCK, n_vocab = locks_model_get_info(m).n_vocab;
    SETUP(o->type == GGML_TYPE_Q8_0 && o->cols <= 4096);
    uint8_t *a4 = malloc((size_t)nb * 18), *b4 = malloc((size_t)nb * 18), *rnd = malloc((size_t)nb * 34);
    float *row = malloc(sizeof(float) * (size_t)o->cols);
    SETUP(a4 && b4 && rnd && row);
    int bad_same = 0, bad_err = 0;
    for (int32_t k = 0; k < 96; k++) {
        const uint8_t *src = o->data + (size_t)(k < 48 ? k : o->rows - 96 + k) * o->row_bytes;
        if (k >= 64) { /* random blocks: scales of either sign (or zero), values over the whole int8 range */
            for (int32_t b = 0; b < nb; b++) {
                const int32_t sc = tu_int(0, 7) ? tu_int(1, 1000) * (tu_int(0, 1) ? 1 : -1) : 0;
                const uint16_t h = locks_f32_to_f16((float)sc * 1e-4f);
                memcpy(rnd + (size_t)b * 34, &h, 2);
                const int32_t lim = tu_int(1, 127);
                for (int j = 0; j < 32; j++) rnd[(size_t)b * 34 + 2 + j] = (uint8_t)(int8_t)tu_int(-lim, lim);
            }
            src = rnd;
        }
        const matmul_weight w1 = {src, GGML_TYPE_Q8_0, 1, o->cols, o->row_bytes, NULL};
        matmul_row_f32(&w1, 0, row);
        quant_q4_0_from_f32(row, o->cols, a4);
        quant_q4_0_from_q8_0(src, nb, b4);
        bad_same += memcmp(a4, b4, (size_t)nb * 18) != 0;
        for (int32_t b = 0; b < nb; b++) {
            uint16_t h;
            memcpy(&h, a4 + (size_t)b * 18, 2);
            const double d = (double)locks_f16_to_f32(h);
            for (int j = 0; j < 32; j++) {
                const uint8_t byte = a4[(size_t)b * 18 + 2 + j % 16];
                const int q = (j < 16 ? byte & 15 : byte >> 4) - 8;
                /* half a step (a whole one above 7.5 steps, where 8 clamps to 7), plus the fp16
                 * rounding of d over up to 8 steps */
                const double x = (double)row[b * 32 + j], steps = d != 0.0 ? x / d : 0.0;
                if (fabs(x - d * q) > (steps > 7.5 ? 1.0 : 0.5) * fabs(d) * (1.0 + 1e-2) + 1e-12) bad_err++;
            }
        }
    }
    test_cond(bad_same == 0, "draft head: the Q8_0 -> Q4_0 copy is quant_q4_0_from_f32 of the dequantized row (%d rows differ)",
              bad_same);
    test_cond(bad_err == 0, "draft head: every 4-bit value within half a step of the original (%d are not)", bad_err);
    free(a4);
    free(b4);
    free(rnd);
    free(row);

    int32_t n = 0;
    int32_t *tok = tokenize(m, text, 300, &n);
    SETUP(n > 200);
    locks_ctx *c = new_ctx(m, 512);
    float *le = malloc(sizeof(float) * (size_t)n_vocab), *l4 = malloc(sizeof(float) * (size_t)n_vocab);
    SETUP(le && l4);
    const int32_t n0 = 180;
    CHECK(locks_ctx_prefill(c, tok, n0, le));
    locks_step_params sp = locks_step_default_params();
    sp.budget = 64;
    CHECK(locks_ctx_set_step(c, sp));
    int32_t t = tok[n0], steps = 24, agree = 0, bad_bits = 0, bad_count = 0, in_vocab = 0;
    for (int32_t i = 0; i < steps; i++) {
        const int32_t len = locks_ctx_len(c);
        CHECK(llama_ctx_draft_mode(c, LLAMA_DRAFT_RECORD));
        CHECK(locks_ctx_decode(c, t, le)); /* the exact head */
        CHECK(locks_ctx_truncate(c, len));
        CHECK(llama_ctx_draft_argmax(c, 1));
        CHECK(locks_ctx_decode(c, t, l4));
        CHECK(llama_ctx_draft_argmax(c, 0));
        CHECK(llama_ctx_draft_mode(c, LLAMA_DRAFT_OFF));
        int32_t finite = 0, best_e = 0, best_4 = 0;
        for (int32_t v = 0; v < n_vocab; v++) {
            if (isfinite(l4[v])) {
                finite++;
                bad_bits += memcmp(&l4[v], &le[v], sizeof(float)) != 0;
            }
            best_e = le[v] > le[best_e] ? v : best_e;
            best_4 = l4[v] > l4[best_4] ? v : best_4;
        }
        bad_count += finite != LLAMA_DRAFT_TOP;
        in_vocab += llama_ctx_draft_vocab_has(c, best_e);
        agree += best_e == best_4 && llama_ctx_draft_vocab_has(c, best_e);
        t = best_e; /* the greedy continuation */
    }
    test_cond(bad_count == 0, "draft head: %d finite logits a step (%d steps had another count)", LLAMA_DRAFT_TOP, bad_count);
    test_cond(bad_bits == 0, "draft head: the candidates' logits are the exact head's bit for bit (%d differ)", bad_bits);
    test_cond(agree == in_vocab && in_vocab >= steps - 2,
              "draft head: the draft token is the exact head's wherever the drafts' vocabulary has it (%d of %d steps; %d in it)",
              agree, steps, in_vocab);
    printf("draft head: %d of %d draft tokens the exact head's (%d in the drafts' vocabulary)\n", agree, steps, in_vocab);
    free(le);
    free(l4);
    free(tok);
    locks_ctx_free(c);
}


/* The greedy drafts' vocabulary (llama_ctx_draft_vocab_add). A context's is the first
 * LLAMA_DRAFT_VOCAB ids and the tokens it was fed (a clone's, its parent's), then every
 * token decoded; adding ids (again, or out of range: no-ops) grows it by exactly the new
 * ones; a draft's candidates lie in it. Two clones of one prefill whose
 * vocabularies hold every id, added in ascending and in a random order (the 4-bit rows
 * permuted differently), give the same draft logits bit for bit at every step of a greedy
 * continuation, each the exact head's argmax. */
static void test_draft_vocab(const locks_model *m, const char *text) {
    const int32_t n_vocab = locks_model_get_info(m).n_vocab, v0 = LLAMA_DRAFT_VOCAB(n_vocab);
    SETUP(llama_model_weight(m, 0, LLAMA_W_OUTPUT)->type == GGML_TYPE_Q8_0 && v0 + 8 < n_vocab - 1);
    int32_t n = 0;
    int32_t *tok = tokenize(m, text, 300, &n);
    SETUP(n > 200);
    locks_ctx *a = new_ctx(m, 512);
    const int32_t n0 = 180;
    CHECK(locks_ctx_prefill(a, tok, n0, NULL));
    locks_step_params sp = locks_step_default_params();
    sp.budget = 64;
    CHECK(locks_ctx_set_step(a, sp));
    locks_status st;
    locks_ctx *b = locks_ctx_clone(a, &st), *c = locks_ctx_clone(a, &st);
    SETUP(b && c);
    test_cond(!llama_ctx_draft_vocab_has(a, 0), "draft vocabulary: none before the 4-bit head exists");
    CHECK(llama_ctx_draft_argmax(a, 1));
    CHECK(llama_ctx_draft_argmax(b, 1));
    CHECK(llama_ctx_draft_argmax(c, 1));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_vocab);
    SETUP(ids);
    int32_t bad = 0, fed = 0; /* fed: ids past v0 among the prefill's tokens */
    uint8_t *met = calloc((size_t)n_vocab + 64, 1);
    SETUP(met);
    for (int32_t i = 0; i < n0; i++) fed += tok[i] >= v0 && !met[tok[i]], met[tok[i]] = 1;
    for (int32_t v = 0; v < n_vocab; v++) bad += llama_ctx_draft_vocab_has(c, v) != (v < v0 || met[v]);
    test_cond(bad == 0 && fed > 0, "draft vocabulary: ids 0 .. %d and the %d later ids of the prompt (%d ids say otherwise)",
              v0 - 1, fed, bad);
    int32_t ext[] = {n_vocab - 1, v0, n_vocab - 1, 5, -3, n_vocab, v0 + 7}, n_new = 0;
    const int32_t cand[3] = {n_vocab - 1, v0, v0 + 7}; /* ext's ids past v0 (v0 + 7 < n_vocab - 1) */
    for (int32_t j = 0; j < 3; j++) n_new += !met[cand[j]];
    llama_ctx_draft_vocab_add(c, ext, 7);
    int32_t has = 0;
    for (int32_t v = 0; v < n_vocab; v++) has += llama_ctx_draft_vocab_has(c, v);
    test_cond(has == v0 + fed + n_new && llama_ctx_draft_vocab_has(c, n_vocab - 1) && llama_ctx_draft_vocab_has(c, v0 + 7),
              "draft vocabulary: grows by the new ids only (%d ids, want %d)", has, v0 + fed + n_new);
    int32_t fresh = n_vocab - 2; /* a token not met yet, decoded: in the vocabulary after */
    while (fresh > v0 && met[fresh]) fresh--;
    const int32_t len_c = locks_ctx_len(c);
    test_cond(!llama_ctx_draft_vocab_has(c, fresh), "draft vocabulary: %d not in it before it is fed", fresh);
    float *lf = malloc(sizeof(float) * (size_t)n_vocab);
    SETUP(lf);
    CHECK(locks_ctx_decode(c, fresh, lf));
    CHECK(locks_ctx_truncate(c, len_c));
    free(lf);
    test_cond(llama_ctx_draft_vocab_has(c, fresh), "draft vocabulary: a decoded token joins it");
    free(met);
    for (int32_t v = 0; v < n_vocab; v++) ids[v] = v;
    llama_ctx_draft_vocab_add(a, ids + v0, n_vocab - v0);
    for (int32_t v = n_vocab - 1; v > 0; v--) { /* a random order */
        const int32_t j = tu_int(0, v), x = ids[v];
        ids[v] = ids[j], ids[j] = x;
    }
    llama_ctx_draft_vocab_add(b, ids, n_vocab);
    has = 0;
    for (int32_t v = 0; v < n_vocab; v++) has += llama_ctx_draft_vocab_has(a, v) + llama_ctx_draft_vocab_has(b, v);
    test_cond(has == 2 * n_vocab, "draft vocabulary: every id added, in either order (%d of %d)", has, 2 * n_vocab);
    float *le = malloc(sizeof(float) * (size_t)n_vocab), *la = malloc(sizeof(float) * (size_t)n_vocab),
          *lb = malloc(sizeof(float) * (size_t)n_vocab), *lc = malloc(sizeof(float) * (size_t)n_vocab),
          *lx = malloc(sizeof(float) * (size_t)n_vocab);
    SETUP(le && la && lb && lc && lx);
    int32_t t = tok[n0], steps = 12, same = 0, agree = 0, outside = 0;
    locks_ctx *cs[3] = {a, b, c};
    float *ls[3] = {la, lb, lc};
    for (int32_t i = 0; i < steps; i++) {
        const int32_t len = locks_ctx_len(a);
        for (int k = 0; k < 3; k++) {
            CHECK(llama_ctx_draft_mode(cs[k], LLAMA_DRAFT_RECORD));
            CHECK(locks_ctx_decode(cs[k], t, ls[k]));
            CHECK(locks_ctx_truncate(cs[k], len));
        }
        CHECK(llama_ctx_draft_argmax(a, 0));
        CHECK(locks_ctx_decode(a, t, le)); /* the exact head */
        CHECK(llama_ctx_draft_argmax(a, 1));
        for (int k = 0; k < 3; k++) {
            CHECK(llama_ctx_draft_mode(cs[k], LLAMA_DRAFT_OFF));
            if (k) CHECK(locks_ctx_decode(cs[k], t, lx)); /* every context one token on */
        }
        same += !memcmp(la, lb, sizeof(float) * (size_t)n_vocab);
        int32_t best_e = 0, best_a = 0;
        for (int32_t v = 0; v < n_vocab; v++) {
            best_e = le[v] > le[best_e] ? v : best_e;
            best_a = la[v] > la[best_a] ? v : best_a;
            outside += isfinite(lc[v]) && !llama_ctx_draft_vocab_has(c, v);
        }
        agree += best_a == best_e;
        t = best_e;
    }
    test_cond(same == steps, "draft vocabulary: the same draft logits whatever the rows' order (%d of %d steps)", same, steps);
    test_cond(agree == steps, "draft vocabulary: every id in it: the draft token is the exact head's (%d of %d)", agree, steps);
    test_cond(outside == 0, "draft vocabulary: %d candidates outside it", outside);
    free(le);
    free(la);
    free(lb);
    free(lc);
    free(lx);
    free(ids);
    free(tok);
    locks_ctx_free(a);
    locks_ctx_free(b);
    locks_ctx_free(c);
}

int main(void) {
    char path[1024];
    locks_model *m = tu_load_model("test_model_speculate", path, sizeof path);
    char *needle = needle_text();
    char *prose = tu_read_text("/usr/share/common-licenses/GPL-3", 6000);
    /* a fixed text (the first 6,000 bytes of an earlier src/attend.c): reading a source
     * file that changes made the test depend on its edits */
    char *code = tu_read_text("tests/data/speculate_code.txt", 6000);
    SETUP(prose && code);
    test_greedy(m, "needle", needle, 0);
    test_greedy(m, "prose", prose, 1);
    test_greedy(m, "code", code, 2);
    test_sampling(m, prose);
    test_errors(m, code);
    test_draft_replay(m, prose);
    test_draft_argmax(m, prose);
    test_draft_vocab(m, prose);
    free(needle);
    free(prose);
    free(code);
    locks_model_free(m);
    return test_report("test_model_speculate");
}
