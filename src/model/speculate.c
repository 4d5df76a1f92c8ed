/*
 * speculate.c — exact output at sparse speed: LOCKS drafts, dense verification
 * (locks_speculate, locks_model.h).
 *
 * A round, with the context holding n tokens and t0 the next token (sampled, not fed):
 *
 *   draft    feed t0, d1, ..., d_{k-1} by sparse decode steps; d_i is drawn from the
 *            draft distribution q_{i-1} (the sampler's transform of the sparse logits)
 *   rewind   truncate the context back to n (the sparse K/V of the drafts are dropped)
 *   verify   one dense pass over [t0, d1, ..., dk] (batched matmuls, each token attending
 *            as a dense decode step: locks_ctx_prefill_all) -> dense distributions
 *            p_0 .. p_k (p_i follows the i-th fed token)
 *   accept   d_{i+1} with probability min(1, p_i(d) / q_i(d)); at the first rejection
 *            the next token is drawn from max(0, p_i - q_i) normalised; if all k are
 *            accepted, from p_k (the bonus token)
 *   keep     truncate the context to n + 1 + accepted: t0 and the accepted drafts,
 *            with dense K/V; the drawn token is the next round's t0.
 *
 * Each output token is then distributed as dense attention's (Leviathan et al. 2023,
 * Chen et al. 2023: P(x) = q(x) min(1, p/q) + (1 - sum_y min(p, q)) (p - q)+ / Z = p(x)).
 * Greedy is the special case of one-hot p and q: a draft is kept iff it is the dense
 * argmax, and a rejection yields the dense argmax.
 *
 * What always holds: between rounds the context holds exactly the tokens locks_generate
 * would have fed, with K/V from dense (prefill) attention; a failed round is rewound
 * to n before returning.
 */
#include <string.h>

#include "speculate.h"

#include "llama_internal.h"
#include "locks_model.h"
#include "util.h"

static int is_eog(const locks_model *m, int32_t tok) {
    locks_model_info in = locks_model_get_info(m);
    return tok == in.eos_id || locks_tokenizer_is_eog(locks_model_tokenizer(m), tok);
}

int32_t locks_spec_accept(locks_sampler *s, float *p, const float *q, int32_t d, int32_t n_vocab, int *accepted) {
    /* accept with probability min(1, p(d) / q(d)); q(d) > 0 since d was drawn from q */
    if (p[d] >= q[d] || (double)locks_sampler_uniform(s) * (double)q[d] < (double)p[d]) {
        *accepted = 1;
        return d;
    }
    *accepted = 0;
    double z = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float r = p[i] - q[i];
        p[i] = r > 0.0f ? r : 0.0f;
        z += (double)p[i];
    }
    /* z == 0 would mean p <= q everywhere, i.e. p == q, where d is always accepted */
    int32_t t = z > 0.0 ? locks_sampler_draw(s, p) : d;
    return t;
}

/* The token after draft step i: drawn from the draft distribution q_i (the sampler's
 * transform of the sparse logits), which it keeps for the acceptance test; greedy: the
 * argmax, the token that one-hot q_i would give, without filling q_i. */
static int32_t draft_token(locks_sampler *s, const float *logits, float *qi, int greedy) {
    if (greedy) return locks_sampler_sample(s, logits);
    locks_sampler_probs(s, logits, qi);
    return locks_sampler_draw(s, qi);
}

/* The acceptance of a verified round: p [k + 1][n_vocab] the dense logits after t0 and
 * each draft (turned into distributions in place unless greedy), q [k][n_vocab] the
 * draft distributions, fed [k + 1] t0 and the drafts. Returns the next token (the
 * replacement at the first rejection, else the bonus) and the drafts accepted in *acc.
 * Greedy: a draft is kept iff it is the dense argmax, and the next token is that argmax
 * (what one-hot p and q give in locks_spec_accept, without the vocabulary-long passes). */
static int32_t accept_round(locks_sampler *s, float *p, const float *q, const int32_t *fed, int32_t k,
                            int32_t n_vocab, float *logits, int greedy, int32_t *acc) {
    int32_t a = 0, next = -1;
    for (; a <= k; a++) {
        float *pa = p + (size_t)a * n_vocab;
        if (greedy) {
            next = locks_sampler_sample(s, pa);
            if (a == k || next != fed[a + 1]) break;
            continue;
        }
        memcpy(logits, pa, sizeof(float) * (size_t)n_vocab);
        locks_sampler_probs(s, logits, pa);
        if (a == k) { /* every draft accepted: the bonus token */
            next = locks_sampler_draw(s, pa);
            break;
        }
        int ok;
        next = locks_spec_accept(s, pa, q + (size_t)a * n_vocab, fed[a + 1], n_vocab, &ok);
        if (!ok) break;
    }
    *acc = a;
    return next;
}

/* A round drops up to k tokens again: sliding-window layers keep their K/V only for
 * max(n_batch, swa_rollback) tokens back (locks_ctx_truncate), unless they keep all. */
static int reach_ok(const locks_ctx *c, int32_t k) {
    const locks_ctx_params cp = locks_ctx_get_params(c);
    const locks_model_info in = locks_model_get_info(locks_ctx_model(c));
    const int32_t reach = cp.swa_rollback > cp.n_batch ? cp.swa_rollback : cp.n_batch;
    if (in.swa_window == 0 || k <= reach || (int64_t)in.swa_window - 1 + reach >= cp.n_ctx) return 1;
    locks_log(LOCKS_LOG_ERROR, "speculate: k = %d drafts, but the sliding-window layers keep %d tokens back "
              "(max(n_batch, swa_rollback)): raise swa_rollback", k, reach);
    return 0;
}

locks_status locks_speculate(locks_ctx *c, const int32_t *prompt, int32_t n_prompt, int32_t n_predict,
                             locks_sampler *s, const locks_spec_params *sp, locks_token_fn on_token,
                             void *user, int32_t *out, int32_t *n_out, locks_spec_stats *stats) {
    if (n_out) *n_out = 0;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!c || !s || !sp || !prompt || n_prompt <= 0 || n_predict < 0) return LOCKS_ERR_INVALID_ARG;
    const locks_ctx_params cp = locks_ctx_get_params(c);
    const locks_model *m = locks_ctx_model(c);
    const int32_t n_vocab = locks_model_get_info(m).n_vocab;
    const int32_t K = sp->k;
    if (K < 1 || K >= cp.n_ctx || sp->draft.selector == LOCKS_SEL_FULL || sp->draft.budget <= 0 ||
        !(sp->draft.mass == 0.0f || (sp->draft.mass > 0.0f && sp->draft.mass < 1.0f)))
        return LOCKS_ERR_INVALID_ARG;
    if (!reach_ok(c, K)) return LOCKS_ERR_UNSUPPORTED;
    const locks_step_params saved = cp.step;
    locks_status st = locks_ctx_set_step(c, sp->draft);
    if (st != LOCKS_OK) return st;
    /* greedy: a draft needs only its argmax, from the 4-bit head (an OOM keeps the exact one) */
    const int greedy = locks_sampler_get_params(s).temp <= 0.0f;
    if (greedy) (void)llama_ctx_draft_argmax(c, 1);

    /* q: [K][n_vocab] draft distributions (unused when greedy); p: [K + 1][n_vocab] dense
     * logits, then (unless greedy) each row turned into its distribution in place;
     * fed: [K + 1] t0 and the drafts */
    float *q = locks_alloc((size_t)K * (size_t)n_vocab, sizeof(float));
    float *p = locks_alloc((size_t)(K + 1) * (size_t)n_vocab, sizeof(float));
    float *logits = locks_alloc((size_t)n_vocab, sizeof(float));
    int32_t *fed = locks_alloc((size_t)K + 1, sizeof(int32_t));
    int32_t produced = 0;
    if (!q || !p || !logits || !fed) {
        st = LOCKS_ERR_OOM;
        goto done;
    }
    if ((st = locks_ctx_prefill(c, prompt, n_prompt, logits)) != LOCKS_OK) goto done;
    if (n_predict == 0) goto done;

    int32_t t0 = locks_sampler_sample(s, logits);
    for (;;) {
        /* emit t0 (the pending token): it is fed next round unless generation stops */
        if (out) out[produced] = t0;
        produced++;
        int stop = on_token ? on_token(t0, user) : 0;
        if (stop || is_eog(m, t0) || produced == n_predict) break;
        const int32_t n = locks_ctx_len(c);
        if (n >= cp.n_ctx) break; /* context full: stop, not an error */
        /* a round feeds 1 + k tokens and emits up to k + 1 (t0 of the next round last) */
        int32_t k = K;
        if (k > cp.n_ctx - n - 1) k = cp.n_ctx - n - 1;
        if (k > n_predict - produced - 1) k = n_predict - produced - 1;

        /* ---- draft ---- */
        double t_a = locks_now_ms();
        fed[0] = t0;
        for (int32_t i = 0; i < k; i++) {
            st = llama_ctx_draft_mode(c, i == 0 ? LLAMA_DRAFT_RECORD : LLAMA_DRAFT_REPLAY);
            if (st == LOCKS_OK) st = locks_ctx_decode(c, fed[i], logits);
            if (st != LOCKS_OK) break;
            fed[i + 1] = draft_token(s, logits, q + (size_t)i * n_vocab, greedy);
        }
        llama_ctx_draft_mode(c, LLAMA_DRAFT_OFF);
        locks_status rw = locks_ctx_truncate(c, n);
        if (st == LOCKS_OK) st = rw;
        if (st != LOCKS_OK) goto done;

        /* ---- verify: one dense pass over t0 and the drafts ---- */
        double t_b = locks_now_ms();
        if ((st = locks_ctx_prefill_all(c, fed, k + 1, p)) != LOCKS_OK) goto done;
        int32_t acc;
        const int32_t next = accept_round(s, p, q, fed, k, n_vocab, logits, greedy, &acc);
        double t_c = locks_now_ms();
        if (stats) {
            stats->n_rounds++;
            stats->n_drafted += k;
            stats->n_accepted += acc;
            stats->draft_ms += t_b - t_a;
            stats->verify_ms += t_c - t_b;
        }
        /* ---- keep t0 and the accepted drafts; emit the drafts, then `next` as t0 ---- */
        int32_t keep = n + 1 + acc, i = 0;
        for (; i < acc; i++) {
            const int32_t d = fed[i + 1];
            if (out) out[produced] = d;
            produced++;
            int stop_d = on_token ? on_token(d, user) : 0;
            if (stop_d || is_eog(m, d) || produced == n_predict) {
                keep = n + 1 + i; /* d itself is not fed, as locks_generate would not */
                break;
            }
        }
        if ((st = locks_ctx_truncate(c, keep)) != LOCKS_OK) goto done;
        if (i < acc) break;
        t0 = next;
    }
done:
    llama_ctx_draft_argmax(c, 0);
    if (locks_ctx_set_step(c, saved) != LOCKS_OK && st == LOCKS_OK) st = LOCKS_ERR_INVALID_ARG;
    if (n_out) *n_out = produced;
    locks_free(q);
    locks_free(p);
    locks_free(logits);
    locks_free(fed);
    return st;
}

/* One round of the loop above for one sequence of a several-sequence context, for a
 * server that interleaves rounds with the other sequences' decode steps: the same
 * draft, rewind, verify and accept, without the emitting (the caller emits out[] and
 * truncates if a token among them ends the generation). */
locks_status locks_speculate_round(locks_ctx *c, int32_t seq, int32_t t0, int32_t k, const locks_step_params *draft,
                                   locks_sampler *s, int32_t *out, int32_t *n_out) {
    if (n_out) *n_out = 0;
    if (!c || !s || !draft || !out || !n_out || k < 1 || draft->selector == LOCKS_SEL_FULL) return LOCKS_ERR_INVALID_ARG;
    const locks_ctx_params cp = locks_ctx_get_params(c);
    const int32_t n_vocab = locks_model_get_info(locks_ctx_model(c)).n_vocab;
    const int32_t n = locks_ctx_seq_len(c, seq);
    if (n < 0 || t0 < 0 || t0 >= n_vocab) return LOCKS_ERR_INVALID_ARG;
    if (n + k + 1 > cp.n_ctx) return LOCKS_ERR_POOL_FULL;
    if (!reach_ok(c, k)) return LOCKS_ERR_UNSUPPORTED;
    const locks_step_params saved = cp.step;
    locks_status st = locks_ctx_set_step(c, *draft);
    if (st != LOCKS_OK) return st;
    const int greedy = locks_sampler_get_params(s).temp <= 0.0f;
    if (greedy) (void)llama_ctx_draft_argmax(c, 1); /* as locks_speculate */
    float *q = locks_alloc((size_t)k * (size_t)n_vocab, sizeof(float));
    float *p = locks_alloc((size_t)(k + 1) * (size_t)n_vocab, sizeof(float));
    float *logits = locks_alloc((size_t)n_vocab, sizeof(float));
    int32_t *fed = locks_alloc((size_t)k + 1, sizeof(int32_t));
    if (!q || !p || !logits || !fed) {
        st = LOCKS_ERR_OOM;
        goto done;
    }
    /* draft */
    fed[0] = t0;
    for (int32_t i = 0; i < k && st == LOCKS_OK; i++) {
        st = llama_ctx_draft_mode(c, i == 0 ? LLAMA_DRAFT_RECORD : LLAMA_DRAFT_REPLAY);
        if (st == LOCKS_OK) st = locks_ctx_decode_seqs(c, &seq, 1, &fed[i], logits);
        if (st != LOCKS_OK) break;
        fed[i + 1] = draft_token(s, logits, q + (size_t)i * n_vocab, greedy);
    }
    llama_ctx_draft_mode(c, LLAMA_DRAFT_OFF);
    locks_status rw = locks_ctx_truncate_seq(c, seq, n);
    if (st == LOCKS_OK) st = rw;
    if (st != LOCKS_OK) goto done;
    /* verify: one dense pass over t0 and the drafts */
    if ((st = locks_ctx_prefill_all_seq(c, seq, fed, k + 1, p)) != LOCKS_OK) goto done;
    int32_t acc;
    const int32_t next = accept_round(s, p, q, fed, k, n_vocab, logits, greedy, &acc);
    /* keep t0 and the accepted drafts */
    if ((st = locks_ctx_truncate_seq(c, seq, n + 1 + acc)) != LOCKS_OK) goto done;
    memcpy(out, fed + 1, sizeof(int32_t) * (size_t)acc);
    out[acc] = next;
    *n_out = acc + 1;
done:
    llama_ctx_draft_argmax(c, 0);
    if (st != LOCKS_OK && locks_ctx_seq_len(c, seq) != n) locks_ctx_truncate_seq(c, seq, n);
    if (locks_ctx_set_step(c, saved) != LOCKS_OK && st == LOCKS_OK) st = LOCKS_ERR_INVALID_ARG;
    locks_free(q);
    locks_free(p);
    locks_free(logits);
    locks_free(fed);
    return st;
}
