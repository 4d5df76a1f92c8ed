/*
 * test_model_gemma3.c — Gemma 3 270M (label "model": needs the fetched model,
 * `scripts/fetch-model.sh gemma3-270m`, or $LOCKS_GEMMA3_MODEL).
 *
 *  1. Tokenizer (SentencePiece BPE with byte fallback): ids of 230 texts against the
 *     sentencepiece package's BPE built from the same GGUF vocabulary
 *     (tests/data/gemma3_tokenizer_ref.h, scripts/tokenizer_reference_spm.py): unicode,
 *     CJK, emoji, white space runs, code, literal special-token text, random strings;
 *     decode(encode(x)) == x on those and on random byte strings; <end_of_turn> ends a
 *     generation; the chat template.
 *  2. Every quantized tensor of the file dequantized by quant.c / matmul.c against the
 *     gguf package's dequantizer (tests/data/gemma3_tensor_ref.h: per-tensor float64 sum,
 *     sum of squares and sampled values, scripts/gemma3_tensor_reference.py).
 *  3. Logits against the float64 numpy forward pass (scripts/logits_reference.py, in
 *     tests/data/gemma3_logits_ref.h): top-1 and max |dlogit| over the top ids, with a
 *     prompt longer than the 512-token sliding window so local and global layers differ;
 *     decode = prefill; every selector decodes at budget 256 (pages selected in the 3
 *     global layers only; the local layers read their window whatever the selector).
 *  4. The local layers' K/V rings: a ring that wraps within the prompt gives the logits of
 *     one holding the whole history bit for bit (prefill, and decode after truncation);
 *     truncation past it is refused; ring bytes independent of n_ctx, 3 cache layers.
 */
#include "test_util.h"
#include "test_model_util.h"

#include "locks_model.h"
#include "model/gguf.h"
#include "model/matmul.h"
#include "model/tokenizer_gguf.h"
#include "util.h"

#include "data/gemma3_logits_ref.h"
#include "data/gemma3_tensor_ref.h"
#include "data/gemma3_tokenizer_ref.h"

/* ================================================================================ */
/* 1. tokenizer                                                                     */
/* ================================================================================ */

static void print_ids(const char *what, const int32_t *ids, int32_t n) {
    fprintf(stderr, "  %s (%d):", what, n);
    for (int32_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static int round_trip(const locks_tokenizer *t, const char *s, size_t n, int32_t *ids, char *buf) {
    int32_t n_ids = -1;
    size_t n_out = 0;
    if (locks_tokenizer_encode(t, s, n, false, ids, (int32_t)n + 1, &n_ids) != LOCKS_OK) return 0;
    if (locks_tokenizer_decode(t, ids, n_ids, true, buf, n + 1, &n_out) != LOCKS_OK) return 0;
    return n_out == n && memcmp(buf, s, n) == 0;
}

static void test_tokenizer(const locks_tokenizer *t) {
    int32_t ids[4096];
    char buf[8192];
    int bad = 0;
    for (int k = 0; k < GEMMA3_TOK_N_CASES; k++) {
        const gemma3_tok_case *c = &gemma3_tok_cases[k];
        size_t len = strlen(c->text);
        int32_t n = -1;
        locks_status st = locks_tokenizer_encode(t, c->text, len, false, ids, 4096, &n);
        int same = st == LOCKS_OK && n == c->n && (n == 0 || memcmp(ids, c->ids, sizeof(int32_t) * (size_t)n) == 0);
        test_cond(same, "case %d: ids differ from sentencepiece", k);
        if (!same && bad++ < 5) {
            fprintf(stderr, "  text: \"%s\"\n", c->text);
            print_ids("ours", ids, n);
            print_ids("sentencepiece", c->ids, c->n);
        }
        /* a U+2581 in the text encodes as a space (as in sentencepiece): no round trip */
        if (!strstr(c->text, "\xe2\x96\x81"))
            test_cond(round_trip(t, c->text, len, ids, buf), "case %d: decode(encode(x)) != x", k);
    }
    /* random byte strings (invalid UTF-8 included): byte fallback makes every one round-trip */
    for (int k = 0; k < 200; k++) {
        char s[64];
        size_t n = (size_t)tu_int(1, 63);
        for (size_t i = 0; i < n; i++) {
            s[i] = (char)tu_int(1, 255);
        }
        test_cond(round_trip(t, s, n, ids, buf), "random bytes %d: decode(encode(x)) != x", k);
    }
    int32_t eot = locks_tokenizer_find(t, "<end_of_turn>", 13);
    test_cond(eot == 106 && locks_tokenizer_is_eog(t, eot) && locks_tokenizer_is_eog(t, 1),
              "<end_of_turn> (%d) and <eos> end a generation", eot);
    int32_t n = -1;
    const char *turn = "<start_of_turn>user\nHi<end_of_turn>\n";
    test_cond(locks_tokenizer_encode(t, turn, strlen(turn), true, ids, 64, &n) == LOCKS_OK && n >= 5 &&
                  ids[0] == 105 && ids[n - 2] == 106, "chat turn: <start_of_turn> 105 ... <end_of_turn> 106");
    locks_chat_msg msgs[3] = {{"system", "Be brief. "}, {"user", "  Hi there\n"}, {"assistant", "Hello."}};
    char chat[256];
    size_t cn = 0;
    const char *want = "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n<start_of_turn>model\n"
                       "Hello.<end_of_turn>\n<start_of_turn>model\n";
    test_cond(locks_gemma_chat_format(msgs, 3, true, chat, sizeof chat, &cn) == LOCKS_OK && cn == strlen(want) &&
                  !strcmp(chat, want), "Gemma chat template: got \"%s\"", chat);
    test_cond(locks_tokenizer_encode(t, chat, cn, true, ids, 64, &n) == LOCKS_OK && ids[0] == 2 && ids[1] == 105,
              "chat text encodes to <bos> <start_of_turn> ...");
}

/* ================================================================================ */
/* 2. tensors                                                                       */
/* ================================================================================ */

static void test_tensors(const gguf *g) {
    int types_seen = 0;
    for (int i = 0; i < GEMMA3_N_TENSOR_REFS; i++) {
        const tensor_ref *r = &gemma3_tensor_refs[i];
        const gguf_tensor *t = gguf_find_tensor(g, r->name);
        test_cond(t && !strcmp(ggml_type_name(t->type), r->type) && t->ne[0] == r->cols &&
                      t->ne[1] * t->ne[2] * t->ne[3] == r->rows, "tensor %s: type and shape", r->name);
        if (!t) continue;
        types_seen |= 1 << (t->type & 31);
        matmul_weight w = {t->data, t->type, r->rows, r->cols, ggml_row_bytes(t->type, r->cols), NULL};
        float *row = malloc(sizeof(float) * (size_t)r->cols);
        SETUP(row);
        double sum = 0.0, sumsq = 0.0;
        for (int32_t k = 0; k < r->rows; k++) {
            matmul_row_f32(&w, k, row);
            for (int32_t j = 0; j < r->cols; j++) {
                sum += (double)row[j];
                sumsq += (double)row[j] * (double)row[j];
            }
        }
        /* the same fp32 values summed in another order */
        test_cond(fabs(sum - r->sum) <= 1e-9 * sumsq + 1e-9 && fabs(sumsq - r->sumsq) <= 1e-9 * r->sumsq,
                  "tensor %s (%s): sum %.9g vs %.9g, sum of squares %.12g vs %.12g", r->name, r->type, sum, r->sum,
                  sumsq, r->sumsq);
        for (int k = 0; k < 8; k++) {
            matmul_row_f32(&w, r->r[k], row);
            test_cond(fabs((double)row[r->c[k]] - r->v[k]) <= 1e-6 * fabs(r->v[k]) + 1e-9, "tensor %s [%d][%d] = %.9g, want %.9g",
                      r->name, r->r[k], r->c[k], (double)row[r->c[k]], r->v[k]);
        }
        free(row);
    }
    test_cond((types_seen & (1 << GGML_TYPE_Q5_0)) && (types_seen & (1 << GGML_TYPE_Q4_K)) &&
                  (types_seen & (1 << GGML_TYPE_Q6_K)) && (types_seen & (1 << GGML_TYPE_Q8_0)),
              "the file's Q5_0, Q4_K, Q6_K and Q8_0 tensors were all checked");
}

/* ================================================================================ */
/* 3. logits                                                                        */
/* ================================================================================ */

static int32_t step_layers; /* on_step calls (global layers only) */
static void count_step(int32_t layer, const float *q, int32_t n_q_heads, const locks_selection *sel, void *user) {
    (void)q;
    (void)n_q_heads;
    (void)sel;
    const locks_model_info *in = user;
    test_cond((layer + 1) % in->swa_period == 0, "on_step only in global layers (got layer %d)", layer);
    step_layers++;
}

/* The local layers' K/V in rings of 511 + 64 = 575 positions (n_batch 64, swa_rollback 0),
 * which wrap within the prompt: the prefill's logits and those of the last 40 tokens
 * decoded again equal, bit for bit, those of the context holding the whole history
 * (want_prefill, want_decode); truncating further back than the ring holds is refused
 * and changes nothing; the cache holds the 3 global layers, and the rings' bytes do not
 * depend on n_ctx. */
static void test_ring(const locks_model *m, const locks_ctx_params *full, const float *want_prefill,
                      const float *want_decode, int32_t n) {
    locks_model_info in = locks_model_get_info(m);
    locks_ctx_params cp = *full;
    cp.on_step = NULL;
    cp.swa_rollback = 0;
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    cp.n_ctx = 32768;
    locks_ctx *big = locks_ctx_init(m, cp, &st);
    float *lg = malloc(sizeof(float) * (size_t)in.n_vocab);
    SETUP(c && big && lg);
    const size_t cap = (size_t)in.swa_window - 1 + (size_t)cp.n_batch;
    const size_t want_bytes = 15 * 2 * cap * (size_t)in.n_kv_heads * (size_t)in.head_dim * sizeof(uint16_t);
    printf("gemma3 local layers: ring of %zu positions, %.2f MB at n_ctx %d and %d; cache: %d layers\n", cap,
           (double)locks_ctx_swa_bytes(c) / 1e6, full->n_ctx, cp.n_ctx,
           locks_cache_get_params(locks_ctx_cache(c)).n_layers);
    test_cond(locks_ctx_swa_bytes(c) == want_bytes && locks_ctx_swa_bytes(big) == want_bytes,
              "ring bytes %zu (n_ctx %d), %zu (n_ctx %d), want %zu", locks_ctx_swa_bytes(c), full->n_ctx,
              locks_ctx_swa_bytes(big), cp.n_ctx, want_bytes);
    test_cond(locks_cache_get_params(locks_ctx_cache(c)).n_layers == 3 &&
                  locks_cache_get_params(locks_ctx_cache(big)).n_layers == 3,
              "the cache holds the 3 global layers");
    locks_ctx_free(big);
    SETUP((size_t)n > cap);
    CHECK(locks_ctx_prefill(c, ref_prompt, n, lg));
    test_cond(!memcmp(lg, want_prefill, sizeof(float) * (size_t)in.n_vocab),
              "ring vs whole history: prefill logits differ");
    st = locks_ctx_truncate(c, n - 65);
    test_cond(st == LOCKS_ERR_UNSUPPORTED && locks_ctx_len(c) == n, "truncate 65 back: %s, length %d",
              locks_status_str(st), locks_ctx_len(c));
    CHECK(locks_ctx_truncate(c, n - 40));
    for (int32_t t = n - 40; t < n; t++) CHECK(locks_ctx_decode(c, ref_prompt[t], lg));
    test_cond(!memcmp(lg, want_decode, sizeof(float) * (size_t)in.n_vocab),
              "ring vs whole history: decode logits differ");
    locks_ctx_free(c);
    free(lg);
}

static void test_logits(const char *path) {
    locks_status st;
    locks_model *m = locks_model_load(path, &st);
    test_cond(m != NULL, "load: %s", locks_status_str(st));
    if (!m) return;
    locks_model_info in = locks_model_get_info(m);
    test_cond(!strcmp(in.arch, "gemma3") && in.n_layers == 18 && in.head_dim == 256 && in.n_heads == 4 &&
                  in.n_kv_heads == 1 && in.swa_window == 512 && in.swa_period == 6 && in.rope_theta == 1e6f &&
                  in.rope_theta_swa == 1e4f && in.n_vocab == 262144 && in.n_ctx_train == 32768,
              "hyper-parameters");
    const int32_t n = (int32_t)(sizeof ref_prompt / sizeof ref_prompt[0]);
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = 1024;
    cp.n_threads = 2;
    cp.step.selector = LOCKS_SEL_FULL;
    cp.on_step = count_step;
    cp.on_step_user = &in;
    cp.selectors = LOCKS_SEL_ALL; /* the loop below switches through every selector */
    cp.swa_rollback = cp.n_ctx;   /* the local layers' rings hold the whole history */
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    SETUP(c);
    float *lg = malloc(sizeof(float) * (size_t)in.n_vocab), *lg2 = malloc(sizeof(float) * (size_t)in.n_vocab);
    SETUP(lg && lg2);
    /* prefill of a prompt longer than the window: local layers differ from global ones */
    SETUP(n > 600);
    CHECK(locks_ctx_prefill(c, ref_prompt, n, lg));
    /* logits relative to the top-1's (a shift of all logits changes no probability; the
     * int8 activations move Gemma's logits by such shifts at some positions) */
    double maxd = 0.0;
    for (int k = 1; k < REF_TOPK; k++)
        maxd = fmax(maxd, fabs((double)(lg[ref_top_ids[k]] - lg[ref_top_ids[0]]) - (ref_top_logits[k] - ref_top_logits[0])));
    printf("gemma3 prefill of %d tokens: top-1 %d (float64 reference %d), max |d(logit - top-1 logit)| over the "
           "reference top-%d %.4f, top-1 logit %.3f (reference %.3f)\n",
           n, tu_argmax(lg, in.n_vocab), ref_top_ids[0], REF_TOPK, maxd, (double)lg[ref_top_ids[0]], ref_top_logits[0]);
    test_cond(tu_argmax(lg, in.n_vocab) == ref_top_ids[0], "top-1 %d, float64 reference %d", tu_argmax(lg, in.n_vocab),
              ref_top_ids[0]);
    test_cond(maxd < 0.75, "max |d(logit - top-1 logit)| over the reference top-%d = %.4f", REF_TOPK, maxd);
    /* decode path = prefill path: the last 40 tokens decoded one by one; the selection
     * runs in the 3 global layers only */
    CHECK(locks_ctx_truncate(c, n - 40));
    step_layers = 0;
    for (int32_t t = n - 40; t < n; t++) CHECK(locks_ctx_decode(c, ref_prompt[t], lg2));
    test_cond(step_layers == 40 * 3, "on_step calls %d, want 40 x 3 global layers", step_layers);
    double dd = 0.0;
    for (int32_t i = 0; i < in.n_vocab; i++) dd = fmax(dd, fabs((double)lg[i] - (double)lg2[i]));
    printf("gemma3 decode vs prefill: max |dlogit| %.4f\n", dd);
    test_cond(dd < 1.0 && tu_argmax(lg2, in.n_vocab) == tu_argmax(lg, in.n_vocab), "decode vs prefill: max |dlogit| %.4f", dd);
    test_ring(m, &cp, lg, lg2, n);

    /* every selector decodes past the window with a budget below the context */
    for (int sel = 0; sel < LOCKS_SEL_COUNT; sel++) {
        locks_step_params sp = cp.step;
        sp.selector = (locks_selector)sel;
        sp.budget = 256;
        CHECK(locks_ctx_set_step(c, sp));
        CHECK(locks_ctx_truncate(c, n - 4));
        locks_ctx_stats_reset(c);
        for (int32_t t = n - 4; t < n; t++) {
            st = locks_ctx_decode(c, ref_prompt[t], lg2);
            test_cond(st == LOCKS_OK, "selector %s decode: %s", locks_selector_name((locks_selector)sel),
                      locks_status_str(st));
        }
        int finite = 1;
        for (int32_t i = 0; i < in.n_vocab; i++) finite &= isfinite(lg2[i]) != 0;
        locks_run_stats rs = locks_ctx_stats(c);
        test_cond(finite, "selector %s: finite logits", locks_selector_name((locks_selector)sel));
        test_cond(rs.bytes_kv <= rs.bytes_dense && rs.bytes_dense > 0 && (sel == LOCKS_SEL_FULL || rs.bytes_kv < rs.bytes_dense),
                  "selector %s: K/V bytes %llu of dense %llu", locks_selector_name((locks_selector)sel),
                  (unsigned long long)rs.bytes_kv, (unsigned long long)rs.bytes_dense);
        printf("gemma3 selector %-9s budget 256 at %d tokens: top-1 %d, K/V bytes %.1f%% of dense\n",
               locks_selector_name((locks_selector)sel), n, tu_argmax(lg2, in.n_vocab),
               100.0 * (double)rs.bytes_kv / (double)rs.bytes_dense);
    }
    locks_ctx_free(c);
    free(lg);
    free(lg2);
    locks_model_free(m);
}

int main(void) {
    tu_seed("test_model_gemma3");
    char path[4096];
    if (!tu_find_gemma3(path, sizeof path)) {
        fprintf(stderr, "test_model_gemma3: no model (set LOCKS_GEMMA3_MODEL or run scripts/fetch-model.sh gemma3-270m)\n");
        return 1;
    }
    locks_status st;
    gguf *g = gguf_open(path, &st);
    SETUP(g);
    locks_tokenizer *t = locks_tokenizer_from_gguf(g, &st);
    test_cond(t != NULL, "tokenizer from the GGUF: %s", locks_status_str(st));
    if (t) test_tokenizer(t);
    locks_tokenizer_free(t);
    test_tensors(g);
    gguf_close(g);
    test_logits(path);
    return test_report("test_model_gemma3");
}
