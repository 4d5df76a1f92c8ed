/*
 * test_arch.c — the layer variants behind the one forward pass (llama.c's ARCHS), on
 * tiny GGUF models this test writes: llama, qwen2 (Q/K/V biases, NeoX RoPE), qwen3
 * (QK-norm, NeoX RoPE, heads wider than dim / n_heads) and gemma3 (QK-norm, post-branch
 * norms, GeGLU, scaled embeddings, sliding-window local layers with their own RoPE base,
 * every 6th layer global). No Qwen GGUF small enough ships in a package here, so the
 * models are random: F32 weights, fresh per run.
 *
 * Reference: a float64 forward pass written here from the models' definitions (it
 * shares no code with the engine), on the same fp32 weights. The engine runs with fp32
 * activations and keeps K/V in fp16, so logits agree to ~1e-3 of their spread; a
 * wrong variant (bias, RoPE pairing, norm, window, base) is off by O(1).
 * Checked: logits of every position (decode path), the prefill path's last logits, and
 * bad input: unknown architecture, missing tensor, missing tokenizer field, a non-finite
 * K-quant scale — each refused with the key or tensor named in the log. The GPU engine's
 * capability list (src/model/cuda/engine_cuda.h) holds all four architectures (their
 * views carry each variant's flags and tensors; tests/test_gpu_arch.c runs them on a
 * device), and refuses for llama a selector, rank, summary precision, callback or weight
 * type outside it, each by name, before any device is touched (so in every build).
 */
#include "test_util.h"
#include "gguf_buf.h"

#include "locks_model.h"
#include "model/cuda/engine_cuda.h"
#include "model/llama_internal.h"
#include "util.h"

#include <unistd.h>

#include "arch_models.h"

/* ================================================================================ */
/* float64 reference                                                                */
/* ================================================================================ */

static void ref_rms(double *x, int n, const float *w, double eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) x[i] = x[i] * r * (double)w[i];
}

/* y (rows) = W (rows, cols) x */
static void ref_lin(const float *W, const double *x, int rows, int cols, double *y) {
    for (int r = 0; r < rows; r++) {
        double s = 0.0;
        for (int c = 0; c < cols; c++) s += (double)W[(size_t)r * cols + c] * x[c];
        y[r] = s;
    }
}

static void ref_rope(double *v, int pos, double base, int neox) {
    for (int i = 0; i < HD / 2; i++) {
        double a = pos * pow(base, -2.0 * i / HD);
        int i0 = neox ? i : 2 * i, i1 = neox ? i + HD / 2 : 2 * i + 1;
        double x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * cos(a) - x1 * sin(a);
        v[i1] = x0 * sin(a) + x1 * cos(a);
    }
}

/* logits[T][VOCAB] of tokens[T]. */
static void ref_forward(const variant *v, const weights *w, const int32_t *tok, int T, double *logits) {
    double *x = malloc(sizeof(double) * T * DIM), *K = malloc(sizeof(double) * T * HKV * HD);
    double *V = malloc(sizeof(double) * T * HKV * HD), *Q = malloc(sizeof(double) * T * HQ * HD);
    double h[DIM], o[HQ * HD], f1[FFN], f2[FFN], pr[DIM], sc[512];
    SETUP(x && K && V && Q && T <= 512);
    const double eps = 1e-6;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < DIM; i++) x[t * DIM + i] = (double)w->emb[(size_t)tok[t] * DIM + i] * (v->emb_scale ? sqrt((double)DIM) : 1.0);
    for (int l = 0; l < v->n_layers; l++) {
        int local = v->swa && (l + 1) % 6 != 0;
        double base = v->swa ? (local ? 10000.0 : 1e6) : 10000.0;
        for (int t = 0; t < T; t++) {
            memcpy(h, x + t * DIM, sizeof h);
            ref_rms(h, DIM, w->attn_norm[l], eps);
            ref_lin(w->wq[l], h, HQ * HD, DIM, Q + t * HQ * HD);
            ref_lin(w->wk[l], h, HKV * HD, DIM, K + t * HKV * HD);
            ref_lin(w->wv[l], h, HKV * HD, DIM, V + t * HKV * HD);
            for (int i = 0; v->bias && i < HQ * HD; i++) Q[t * HQ * HD + i] += (double)w->bq[l][i];
            for (int i = 0; v->bias && i < HKV * HD; i++) {
                K[t * HKV * HD + i] += (double)w->bk[l][i];
                V[t * HKV * HD + i] += (double)w->bv[l][i];
            }
            for (int hh = 0; hh < HQ; hh++) {
                if (v->qk_norm) ref_rms(Q + (t * HQ + hh) * HD, HD, w->qn[l], eps);
                ref_rope(Q + (t * HQ + hh) * HD, t, base, v->neox);
            }
            for (int hh = 0; hh < HKV; hh++) {
                if (v->qk_norm) ref_rms(K + (t * HKV + hh) * HD, HD, w->kn[l], eps);
                ref_rope(K + (t * HKV + hh) * HD, t, base, v->neox);
            }
        }
        for (int t = 0; t < T; t++) {
            int lo = local && t - WINDOW + 1 > 0 ? t - WINDOW + 1 : 0;
            for (int hh = 0; hh < HQ; hh++) {
                const double *q = Q + (t * HQ + hh) * HD;
                int kh = hh / (HQ / HKV);
                double mx = -INFINITY, sum = 0.0;
                for (int j = lo; j <= t; j++) {
                    double s = 0.0;
                    for (int d = 0; d < HD; d++) s += q[d] * K[(j * HKV + kh) * HD + d];
                    sc[j] = s / sqrt((double)HD);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = lo; j <= t; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int d = 0; d < HD; d++) {
                    double a = 0.0;
                    for (int j = lo; j <= t; j++) a += sc[j] * V[(j * HKV + kh) * HD + d];
                    o[hh * HD + d] = a / sum;
                }
            }
            ref_lin(w->wo[l], o, DIM, HQ * HD, pr);
            if (v->post_norms) ref_rms(pr, DIM, w->pan[l], eps);
            for (int i = 0; i < DIM; i++) x[t * DIM + i] += pr[i];
            memcpy(h, x + t * DIM, sizeof h);
            ref_rms(h, DIM, w->ffn_norm[l], eps);
            ref_lin(w->wg[l], h, FFN, DIM, f1);
            ref_lin(w->wu[l], h, FFN, DIM, f2);
            for (int i = 0; i < FFN; i++) {
                double g = f1[i];
                double act = v->geglu ? 0.5 * g * (1.0 + tanh(0.7978845608028654 /* sqrt(2 / pi) */ * (g + 0.044715 * g * g * g)))
                                      : g / (1.0 + exp(-g));
                f1[i] = act * f2[i];
            }
            ref_lin(w->wd[l], f1, DIM, FFN, pr);
            if (v->post_norms) ref_rms(pr, DIM, w->pfn[l], eps);
            for (int i = 0; i < DIM; i++) x[t * DIM + i] += pr[i];
        }
    }
    for (int t = 0; t < T; t++) {
        memcpy(h, x + t * DIM, sizeof h);
        ref_rms(h, DIM, w->out_norm, eps);
        ref_lin(w->emb, h, VOCAB, DIM, logits + (size_t)t * VOCAB);
    }
    free(x);
    free(K);
    free(V);
    free(Q);
}

/* ================================================================================ */
/* Tests                                                                            */
/* ================================================================================ */

static char last_error[512];
static void capture_log(locks_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == LOCKS_LOG_ERROR && !last_error[0]) snprintf(last_error, sizeof last_error, "%s", msg);
}

static locks_model *load_buf(const buf *b, const char *tag, locks_status *st) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/locks_test_arch_%d_%s.gguf", (int)getpid(), tag);
    FILE *f = fopen(path, "wb");
    SETUP(f && fwrite(b->p, 1, b->n, f) == b->n);
    fclose(f);
    last_error[0] = '\0';
    locks_model *m = locks_model_load(path, st);
    remove(path);
    return m;
}

/* Gemma 3's local layers keep their K/V in a ring of window - 1 + max(n_batch,
 * swa_rollback) positions: with n_batch 8 and swa_rollback 0 that is 27 of the 50, so it
 * wraps. Every result must equal, bit for bit, that of a context whose rings hold the
 * whole history (swa_rollback = n_ctx), and the float64 reference: decode and prefill
 * paths, the verify pass, truncation within the ring's reach (and refusal beyond it,
 * changing nothing), clone, two sequences; the rings' bytes do not grow with n_ctx. */
static void test_swa_ring(const locks_model *m, const int32_t *tok, const int32_t *tok2, int T, const double *ref,
                          const double *ref2, double span) {
    enum { CAP = WINDOW - 1 + 8, N_LOCAL = 5 };
    const double tol = 3e-3 * span;
    const size_t V = VOCAB;
    locks_status st;
    locks_ctx_params cp = locks_ctx_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 8;
    cp.f32_act = 1;
    cp.step.selector = LOCKS_SEL_FULL;
    cp.selectors = LOCKS_SEL_BIT(LOCKS_SEL_LOCKS); /* the drafts' selector below */
    cp.swa_rollback = cp.n_ctx;
    locks_ctx *full = locks_ctx_init(m, cp, &st);
    cp.swa_rollback = 0;
    locks_ctx *c = locks_ctx_init(m, cp, &st);
    cp.n_ctx = 4096;
    locks_ctx *big = locks_ctx_init(m, cp, &st);
    float *want = malloc(sizeof(float) * (size_t)T * V), *got = malloc(sizeof(float) * (size_t)T * V);
    SETUP(full && c && big && want && got);

    /* memory: the cache holds the one global layer (5); the rings 5 x CAP positions */
    const size_t ring_bytes = (size_t)N_LOCAL * 2 * CAP * HKV * HD * sizeof(uint16_t);
    test_cond(locks_ctx_swa_bytes(c) == ring_bytes && locks_ctx_swa_bytes(big) == ring_bytes &&
                  locks_ctx_swa_bytes(full) == (size_t)N_LOCAL * 2 * 128 * HKV * HD * sizeof(uint16_t),
              "ring bytes %zu (n_ctx 128), %zu (n_ctx 4096), %zu (whole history); want %zu", locks_ctx_swa_bytes(c),
              locks_ctx_swa_bytes(big), locks_ctx_swa_bytes(full), ring_bytes);
    test_cond(locks_cache_get_params(locks_ctx_cache(c)).n_layers == 1 && locks_ctx_cache_layer(c, 5) == 0 &&
                  locks_ctx_cache_layer(c, 0) == -1 && locks_ctx_cache_layer(c, 4) == -1 &&
                  locks_ctx_cache_layer(c, 6) == -1,
              "the cache holds the global layer only (%d layers)", locks_cache_get_params(locks_ctx_cache(c)).n_layers);

    /* decode path, every position */
    for (int t = 0; t < T; t++) {
        CHECK(locks_ctx_decode(full, tok[t], want + (size_t)t * V));
        CHECK(locks_ctx_decode(c, tok[t], got + (size_t)t * V));
    }
    test_cond(!memcmp(got, want, sizeof(float) * (size_t)T * V), "ring vs whole history: decode logits differ");
    tu_close("ring: decode logits vs float64", got, ref, (size_t)T * V, tol, 0.0);

    /* truncation: 8 back (n_batch) is within reach, 9 is not */
    last_error[0] = '\0';
    st = locks_ctx_truncate(c, T - 9);
    test_cond(st == LOCKS_ERR_UNSUPPORTED && locks_ctx_len(c) == T && strstr(last_error, "sliding-window"),
              "truncate 9 back past the ring: %s, length %d, log: %s", locks_status_str(st), locks_ctx_len(c),
              last_error);
    CHECK(locks_ctx_truncate(c, T - 8));
    for (int t = T - 8; t < T; t++) CHECK(locks_ctx_decode(c, tok[t], got + (size_t)t * V));
    test_cond(!memcmp(got, want, sizeof(float) * (size_t)T * V), "after truncating 8 back: logits differ");
    /* twice in a row: the second truncation counts from the furthest position run */
    CHECK(locks_ctx_truncate(c, T - 4));
    st = locks_ctx_truncate(c, T - 12);
    test_cond(st == LOCKS_ERR_UNSUPPORTED && locks_ctx_len(c) == T - 4, "truncate 8 back from T - 4: %s",
              locks_status_str(st));
    CHECK(locks_ctx_truncate(c, T - 8));

    /* clone of a wrapped ring: both go on as the whole history does */
    locks_ctx *cl = locks_ctx_clone(c, &st);
    test_cond(cl != NULL, "clone: %s", locks_status_str(st));
    if (cl) {
        for (int t = T - 8; t < T; t++) CHECK(locks_ctx_decode(cl, tok[t], got + (size_t)t * V));
        test_cond(!memcmp(got, want, sizeof(float) * (size_t)T * V), "clone: logits differ");
        locks_ctx_free(cl);
    }

    /* a slot saved (locks_ctx_seq_read_kv: the local layers' positions before the ring
     * read as 0) and loaded into a new context decodes on as the whole history does;
     * below the loaded length it truncates only to 0 */
    {
        const size_t per = (size_t)(T - 8) * HKV * HD;
        uint16_t *ks = malloc(sizeof(uint16_t) * per * 6), *vs = malloc(sizeof(uint16_t) * per * 6);
        SETUP(ks && vs);
        for (int32_t l = 0; l < 6; l++) CHECK(locks_ctx_seq_read_kv(c, 0, l, ks + (size_t)l * per, vs + (size_t)l * per));
        int zeros = 1; /* local layer 0, position 0: overwritten in the ring */
        for (int i = 0; i < HKV * HD; i++) zeros &= ks[i] == 0;
        test_cond(zeros, "read_kv: a local layer's position before the ring reads as 0");
        locks_ctx *ld = locks_ctx_init(m, cp, &st);
        SETUP(ld);
        CHECK(locks_ctx_seq_load_kv(ld, 0, T - 8, ks, vs));
        for (int t = T - 8; t < T; t++) CHECK(locks_ctx_decode(ld, tok[t], got + (size_t)t * V));
        test_cond(!memcmp(got, want, sizeof(float) * (size_t)T * V), "loaded slot: logits differ");
        st = locks_ctx_truncate(ld, T - 9);
        test_cond(st == LOCKS_ERR_UNSUPPORTED && locks_ctx_len(ld) == T, "loaded slot: truncate below it: %s",
                  locks_status_str(st));
        CHECK(locks_ctx_truncate(ld, 0));
        /* with the global layers' summaries (locks_ctx_seq_read_summaries; the local
         * layers have none): the same, and the loaded summaries equal the saved ones */
        const size_t rec = locks_ctx_summary_bytes(c), per_sum = (size_t)((T - 8) / 16) * HKV * rec;
        unsigned char *sums = malloc(per_sum * 6 + 1), *back = malloc(per_sum * 6 + 1);
        SETUP(sums && back);
        int32_t n_global = 0, local_refused = 1;
        for (int32_t l = 0; l < 6; l++) {
            const int32_t gl = locks_ctx_cache_layer(c, l);
            if (gl < 0) {
                local_refused &= locks_ctx_seq_read_summaries(c, 0, l, sums) == LOCKS_ERR_INVALID_ARG;
                continue;
            }
            CHECK(locks_ctx_seq_read_summaries(c, 0, l, sums + (size_t)gl * per_sum));
            n_global++;
        }
        test_cond(local_refused && n_global > 0 && n_global < 6, "read_summaries: %d global layers, local ones refused",
                  n_global);
        CHECK(locks_ctx_seq_load(ld, 0, T - 8, ks, vs, sums));
        for (int32_t l = 0; l < 6; l++) {
            const int32_t gl = locks_ctx_cache_layer(ld, l);
            if (gl >= 0) CHECK(locks_ctx_seq_read_summaries(ld, 0, l, back + (size_t)gl * per_sum));
        }
        test_cond(!memcmp(sums, back, per_sum * (size_t)n_global), "loaded slot: summaries differ from the saved ones");
        for (int t = T - 8; t < T; t++) CHECK(locks_ctx_decode(ld, tok[t], got + (size_t)t * V));
        test_cond(!memcmp(got, want, sizeof(float) * (size_t)T * V), "slot loaded with summaries: logits differ");
        locks_ctx_free(ld);
        free(ks);
        free(vs);
        free(sums);
        free(back);
    }

    /* to 0 always works; prefill (chunks of 8) and the verify pass (every logit) */
    CHECK(locks_ctx_truncate(c, 0));
    CHECK(locks_ctx_prefill(c, tok, T, got));
    CHECK(locks_ctx_reset(full));
    CHECK(locks_ctx_prefill(full, tok, T, want));
    test_cond(!memcmp(got, want, sizeof(float) * V), "ring vs whole history: prefill logits differ");
    tu_close("ring: prefill logits vs float64", got, ref + (size_t)(T - 1) * V, V, tol, 0.0);
    CHECK(locks_ctx_reset(c));
    CHECK(locks_ctx_prefill_all(c, tok, T, got));
    tu_close("ring: verify pass logits vs float64", got, ref, (size_t)T * V, tol, 0.0);

    /* speculation drafts K = 8 (the reach) and gives locks_generate's greedy tokens;
     * K = 9 is refused before anything runs */
    locks_sampler_params smp = locks_sampler_default_params();
    smp.temp = 0.0f;
    locks_sampler *s1 = locks_sampler_init(smp, VOCAB, NULL), *s2 = locks_sampler_init(smp, VOCAB, NULL);
    SETUP(s1 && s2);
    int32_t gen[40], spec[40], n_gen = 0, n_spec = 0;
    CHECK(locks_ctx_reset(c));
    CHECK(locks_generate(c, tok, 10, 40, s1, NULL, NULL, gen, &n_gen));
    CHECK(locks_ctx_reset(c));
    locks_spec_params spp = {9, locks_step_default_params()};
    spp.draft.selector = LOCKS_SEL_LOCKS;
    spp.draft.budget = 3 * LOCKS_PAGE; /* the forced pages: sink, recent, current */
    st = locks_speculate(c, tok, 10, 40, s2, &spp, NULL, NULL, spec, &n_spec, NULL);
    test_cond(st == LOCKS_ERR_UNSUPPORTED && locks_ctx_len(c) == 0, "speculate K = 9 past the ring: %s, length %d",
              locks_status_str(st), locks_ctx_len(c));
    int32_t round_out[10], n_round = 0;
    CHECK(locks_ctx_prefill(c, tok, 10, NULL));
    st = locks_speculate_round(c, 0, tok[10], 9, &spp.draft, s2, round_out, &n_round);
    test_cond(st == LOCKS_ERR_UNSUPPORTED && locks_ctx_len(c) == 10, "speculate_round k = 9 past the ring: %s, length %d",
              locks_status_str(st), locks_ctx_len(c));
    CHECK(locks_ctx_reset(c));
    spp.k = 8;
    CHECK(locks_speculate(c, tok, 10, 40, s2, &spp, NULL, NULL, spec, &n_spec, NULL));
    test_cond(n_spec == n_gen && n_gen == 40 && !memcmp(spec, gen, sizeof(int32_t) * (size_t)n_gen),
              "speculate K = 8: %d tokens, generate %d, same: %d", n_spec, n_gen,
              n_spec == n_gen && !memcmp(spec, gen, sizeof(int32_t) * (size_t)n_gen));
    locks_sampler_free(s1);
    locks_sampler_free(s2);

    /* two sequences, each its own ring */
    locks_ctx_free(big);
    cp.n_ctx = 128;
    cp.n_seqs = 2;
    big = locks_ctx_init(m, cp, &st);
    SETUP(big);
    test_cond(locks_ctx_swa_bytes(big) == 2 * ring_bytes, "two sequences: ring bytes %zu", locks_ctx_swa_bytes(big));
    CHECK(locks_ctx_prefill_seq(big, 0, tok, T - 1, NULL));
    CHECK(locks_ctx_prefill_seq(big, 1, tok2, T - 1, NULL));
    int32_t last[2] = {tok[T - 1], tok2[T - 1]};
    CHECK(locks_ctx_decode_batch(big, last, got));
    tu_close("two sequences: sequence 0 vs float64", got, ref + (size_t)(T - 1) * V, V, tol, 0.0);
    tu_close("two sequences: sequence 1 vs float64", got + V, ref2 + (size_t)(T - 1) * V, V, tol, 0.0);

    locks_ctx_free(big);
    locks_ctx_free(c);
    locks_ctx_free(full);
    free(want);
    free(got);
}

static void on_query_stub(int32_t layer, int32_t pos, const float *q, void *user) {
    (void)layer, (void)pos, (void)q, (void)user;
}

/* llama on the GPU engine: each parameter outside the capability list is refused by the
 * list with its name; inside it, the list passes (a build without CUDA then stops at
 * "not built in", one with CUDA runs or fails on the device). A weight of a type not in
 * the list is refused naming the tensor and layer. */
static void test_gpu_list(const locks_model *m) {
    locks_ctx_params base = locks_ctx_default_params();
    base.n_ctx = 128;
    base.backend = LOCKS_BACKEND_CUDA;
    base.step.selector = LOCKS_SEL_FULL;
    for (int k = 0; k < 6; k++) {
        locks_ctx_params p = base;
        const char *named = NULL;
        switch (k) {
        case 0: p.step.selector = LOCKS_SEL_QUEST, named = "selector quest"; break;
        case 1: p.step.selector = LOCKS_SEL_ORACLE, named = "selector oracle"; break;
        case 2: p.rank = 12, named = "rank 12"; break;
        case 3: p.summary_prec = LOCKS_SUMMARY_F32, named = "fp32"; break;
        case 4: p.on_query = on_query_stub, named = "callbacks"; break;
        default: p.step.selector = LOCKS_SEL_LOCKS; break;
        }
        locks_clear_error();
        locks_status st;
        locks_ctx *g = locks_ctx_init(m, p, &st);
        const char *why = locks_last_error();
        if (named)
            test_cond(!g && st == LOCKS_ERR_UNSUPPORTED && strstr(why, "engine_cuda_check") && strstr(why, named),
                      "GPU list refuses %s: %s (%s)", named, locks_status_str(st), why);
        else
            test_cond(!strstr(why, "engine_cuda_check") && (g || st != LOCKS_OK),
                      "llama with locks passes the GPU list: %s (%s)", locks_status_str(st), why);
        locks_ctx_free(g);
    }
    /* the view llama.c hands the engine, with one weight of a type outside the list */
    const locks_model_info in = locks_model_get_info(m);
    engine_cuda_layer *ls = calloc((size_t)in.n_layers, sizeof *ls);
    SETUP(ls);
    for (int32_t l = 0; l < in.n_layers; l++)
        ls[l] = (engine_cuda_layer){llama_model_weight(m, l, LLAMA_W_Q),    llama_model_weight(m, l, LLAMA_W_K),
                                    llama_model_weight(m, l, LLAMA_W_V),    llama_model_weight(m, l, LLAMA_W_O),
                                    llama_model_weight(m, l, LLAMA_W_GATE), llama_model_weight(m, l, LLAMA_W_UP),
                                    llama_model_weight(m, l, LLAMA_W_DOWN), llama_model_norm(m, l, 0),
                                    llama_model_norm(m, l, 1),              llama_model_norm(m, l, 3),
                                    llama_model_norm(m, l, 4),              llama_model_norm(m, l, 5),
                                    llama_model_norm(m, l, 6),              llama_model_norm(m, l, 7),
                                    llama_model_norm(m, l, 8),              llama_model_norm(m, l, 9)};
    engine_cuda_model view = {in,
                              llama_model_n_rot(m),
                              llama_model_tied(m),
                              llama_model_weight(m, 0, LLAMA_W_TOK_EMBD),
                              llama_model_weight(m, 0, LLAMA_W_OUTPUT),
                              llama_model_norm(m, 0, 2),
                              ls,
                              0,
                              0,
                              0};
    /* the tools' accessor (llama_gpu_view, for `locks bench --backend cuda --gguf`) gives
     * the view llama.c hands the engine: the same pointers */
    engine_cuda_layer *lv = calloc((size_t)in.n_layers, sizeof *lv);
    SETUP(lv);
    const engine_cuda_model got = llama_gpu_view(m, lv);
    int same = !strcmp(got.info.arch, in.arch) && got.info.n_layers == in.n_layers && got.n_rot == view.n_rot &&
               got.tied == view.tied && got.tok_embd == view.tok_embd && got.output == view.output &&
               got.output_norm == view.output_norm && got.layers == lv && got.rope_neox == 0 && got.geglu == 0 &&
               got.emb_scale == 0;
    for (int32_t l = 0; l < in.n_layers; l++) same &= !memcmp(&lv[l], &ls[l], sizeof *ls);
    test_cond(same, "llama_gpu_view: the same view as the accessors build");
    free(lv);
    locks_clear_error();
    locks_status st = engine_cuda_check(&view, &base);
    test_cond(st == LOCKS_OK, "GPU list: llama's own weights pass: %s (%s)", locks_status_str(st), locks_last_error());
    const engine_cuda_caps *caps = engine_cuda_capabilities();
    int listed = 0;
    for (int32_t i = 0; i < caps->n_weight_types; i++) listed |= caps->weight_types[i] == ls[1].wv->type;
    test_cond(listed, "GPU list holds the test model's weight type %s", ggml_type_name(ls[1].wv->type));
    matmul_weight odd = *ls[1].wv;
    odd.type = (ggml_type)16; /* IQ2_XXS: no loader or engine path */
    ls[1].wv = &odd;
    locks_clear_error();
    st = engine_cuda_check(&view, &base);
    test_cond(st == LOCKS_ERR_UNSUPPORTED && strstr(locks_last_error(), "attn_v") &&
                  strstr(locks_last_error(), "layer 1"),
              "GPU list refuses an unlisted weight type by tensor: %s (%s)", locks_status_str(st), locks_last_error());
    free(ls);
}

static void test_variant(const variant *v) {
    weights w;
    make_weights(v, &w);
    buf b = write_model(v, &w, BREAK_NONE, 0);
    locks_status st;
    locks_model *m = load_buf(&b, v->arch, &st);
    test_cond(m != NULL, "%s: load: %s (%s)", v->arch, locks_status_str(st), last_error);
    if (m) {
        locks_model_info in = locks_model_get_info(m);
        test_cond(!strcmp(in.arch, v->arch) && in.head_dim == HD && in.n_heads == HQ &&
                      in.swa_window == (v->swa ? WINDOW : 0), "%s: info", v->arch);
        enum { T = 50 };
        int32_t tok[T];
        for (int t = 0; t < T; t++) tok[t] = tu_int(0, VOCAB - 1);
        double *ref = malloc(sizeof(double) * T * VOCAB);
        float *got = malloc(sizeof(float) * T * VOCAB);
        SETUP(ref && got);
        ref_forward(v, &w, tok, T, ref);
        double span = 0.0;
        for (int i = 0; i < T * VOCAB; i++) span = fmax(span, fabs(ref[i]));
        locks_ctx_params cp = locks_ctx_default_params();
        cp.n_ctx = 128;
        cp.n_batch = 16; /* prefill in chunks that cross the window */
        cp.f32_act = 1;
        cp.step.selector = LOCKS_SEL_FULL;
        /* the GPU engine's list holds all four architectures: none is refused by it (a
         * build without CUDA then stops at "not built in", one with CUDA runs or fails on
         * the device; tests/test_gpu_arch.c runs them); the view llama.c hands the engine
         * carries each variant's flags and tensors */
        cp.backend = LOCKS_BACKEND_CUDA;
        locks_clear_error();
        locks_ctx *g = locks_ctx_init(m, cp, &st);
        test_cond(!strstr(locks_last_error(), "engine_cuda_check") && (g || st != LOCKS_OK),
                  "%s passes the GPU list: %s (%s)", v->arch, locks_status_str(st), locks_last_error());
        locks_ctx_free(g);
        {
            engine_cuda_layer *lv = calloc((size_t)in.n_layers, sizeof *lv);
            SETUP(lv);
            const engine_cuda_model gm = llama_gpu_view(m, lv);
            locks_clear_error();
            st = engine_cuda_check(&gm, &cp);
            test_cond(st == LOCKS_OK, "%s: engine_cuda_check of llama_gpu_view: %s (%s)", v->arch,
                      locks_status_str(st), locks_last_error());
            test_cond(gm.rope_neox == v->neox && gm.geglu == v->geglu && gm.emb_scale == v->emb_scale &&
                          !lv[0].bq == !v->bias && !lv[0].bk == !v->bias && !lv[0].bv == !v->bias &&
                          !lv[0].q_norm == !v->qk_norm && !lv[0].k_norm == !v->qk_norm &&
                          !lv[0].post_attn_norm == !v->post_norms && !lv[0].post_ffn_norm == !v->post_norms,
                      "%s: llama_gpu_view carries the variant's flags and tensors", v->arch);
            if (v->qk_norm) { /* a layer without its QK-norms: the engine's layout has them in all or none */
                lv[1].q_norm = lv[1].k_norm = NULL;
                locks_clear_error();
                st = engine_cuda_check(&gm, &cp);
                test_cond(st == LOCKS_ERR_UNSUPPORTED && strstr(locks_last_error(), "layer 1"),
                          "%s: a layer without QK-norms refused: %s (%s)", v->arch, locks_status_str(st),
                          locks_last_error());
            }
            free(lv);
        }
        if (!strcmp(v->arch, "llama")) test_gpu_list(m);
        cp.backend = LOCKS_BACKEND_CPU;
        locks_ctx *c = locks_ctx_init(m, cp, &st);
        SETUP(c);
        /* decode path: every position's logits */
        for (int t = 0; t < T; t++) CHECK(locks_ctx_decode(c, tok[t], got + (size_t)t * VOCAB));
        char what[96];
        snprintf(what, sizeof what, "%s: decode logits, %d positions vs float64", v->arch, T);
        double e = tu_close(what, got, ref, (size_t)T * VOCAB, 3e-3 * span, 0.0);
        printf("%-6s decode: max |dlogit| %.2e (logits up to %.2f)\n", v->arch, e, span);
        /* prefill path (chunks of 16): last position */
        CHECK(locks_ctx_reset(c));
        CHECK(locks_ctx_prefill(c, tok, T, got));
        snprintf(what, sizeof what, "%s: prefill logits vs float64", v->arch);
        tu_close(what, got, ref + (size_t)(T - 1) * VOCAB, VOCAB, 3e-3 * span, 0.0);
        locks_ctx_free(c);
        if (v->swa) {
            int32_t tok2[T];
            for (int t = 0; t < T; t++) tok2[t] = tu_int(0, VOCAB - 1);
            double *ref2 = malloc(sizeof(double) * T * VOCAB);
            SETUP(ref2);
            ref_forward(v, &w, tok2, T, ref2);
            test_swa_ring(m, tok, tok2, T, ref, ref2, span);
            free(ref2);
        }
        free(ref);
        free(got);
        locks_model_free(m);
    }
    free(b.p);

    /* bad input: each refused, the culprit named in the log */
    struct {
        breakage brk;
        locks_status want;
        const char *named;
    } bad[] = {
        {BREAK_ARCH, LOCKS_ERR_UNSUPPORTED, "mamba"},
        {BREAK_TOKENS, LOCKS_ERR_FORMAT, "tokenizer.ggml.tokens"},
        {BREAK_SCALE, LOCKS_ERR_FORMAT, "blk.0.ffn_down.weight"},
        {BREAK_TENSOR, LOCKS_ERR_FORMAT, "blk.1.attn_q.bias"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i].brk == BREAK_TENSOR && !v->bias) continue;
        b = write_model(v, &w, bad[i].brk, 0);
        m = load_buf(&b, v->arch, &st);
        test_cond(!m && st == bad[i].want && strstr(last_error, bad[i].named),
                  "%s: broken file refused (%s) naming %s; log: %s", v->arch, locks_status_str(st), bad[i].named,
                  last_error);
        locks_model_free(m);
        free(b.p);
    }
    free_weights(&w);
}

int main(void) {
    tu_seed("test_arch");
    locks_set_log(capture_log, NULL);
    for (size_t i = 0; i < sizeof VARIANTS / sizeof VARIANTS[0]; i++) test_variant(&VARIANTS[i]);
    return test_report("test_arch");
}
