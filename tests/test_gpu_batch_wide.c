/*
 * test_gpu_batch_wide.c — the GPU decode engine (model_cuda.h) at 16 and 32 sequences:
 * every row's logits are bit for bit its batch-1 decode, on random tiny models of
 * 16-bit weights (F16, BF16) and of quantized ones (Q8_0, Q4_0, Q4_K: every matrix kept
 * quantized, decode products through qgemv.cu), under `full` and `locks` (budget 64, far
 * below the context).
 *
 * Why it can be exact: the products of 9..32 rows run in pieces of 8, each the shape a
 * batch of one runs (cuBLAS, padded to 8 rows; qgemv.cu's rows do not depend on the
 * piece); norms, RoPE, the K/V write, qprep and the sampler are per row. What depends on
 * the batch is the step's work split, sized by sequences x KV heads (attend.cu's splits,
 * score.cu's blocks, mass.cu's blocks): so the test sets the lab switch att_min_pps
 * above any list (one attention split at every batch) and keeps the decode bound at 512
 * tokens (32 pages: one score block and one mass block per segment at any batch on a
 * 132-SM card). It checks that promise of the products, not the step's default split.
 *
 * 1. Together vs alone: an engine of n sequences (n = 16, 32; prompts of 0..440 tokens,
 *    prefilled in chunks of 64) decodes STEPS tokens of all of them per graph replay; the
 *    reference is each sequence alone in an engine of one sequence (the same chunks, the
 *    same fed tokens, the same decode bound): memcmp per row and step.
 * 2. Subsets: a second engine of n sequences, kernel by kernel (no graph), decodes random
 *    subsets in random order (lg_set_rows; the others idle) until each sequence has
 *    decoded SUB tokens: a sequence's k-th token must give the logits of its k-th token in
 *    (1), bit for bit.
 * 3. lg_ctx_init refuses 33 sequences, and more sequences than the cache has slots.
 * --quick: the f16 model, 32 sequences, `locks`, 4 of them checked alone (for
 * compute-sanitizer).
 * Needs a GPU (label gpu): without one it prints "no GPU" and fails, as the other
 * test_gpu_* tests do (excluded from `ctest -LE gpu`).
 */
#include "test_util.h"

#include "cuda/locks_cuda.h"
#include "model/cuda/model_cuda.h"
#include "model/gguf.h"
#include "model/quant.h"
#include "util.h"

enum { STEPS = 24, SUB = 8, MAX_CTX = 512, CHUNK = 64, MAX_PROMPT = 440, NMAX = 32 };

/* The tiny shape: 2 layers, dim 256, 4 query heads and 2 KV heads of 64, FFN 512 (every
 * width a multiple of 256, the K types' block), vocabulary 300. */
static lg_shape tiny_shape(locks_dtype wtype) {
    lg_shape s = {0};
    s.n_vocab = 300;
    s.dim = 256;
    s.n_layers = 2;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.head_dim = 64;
    s.ffn_dim = 512;
    s.n_rot = 64;
    s.rope_theta = 10000.f;
    s.norm_eps = 1e-5f;
    s.wtype = wtype;
    return s;
}

/* ---- quantized weights ------------------------------------------------------------- */

static int32_t block_elems(int32_t type) { return type == GGML_TYPE_Q4_K ? 256 : 32; }

/* A random fp16 scale near `base` (x 0.5 .. 1.5, random sign where `sign`). */
static void put_scale(uint8_t *p, double base, int sign) {
    const double v = base * (0.5 + tu_uniform()) * (sign && (tu_next() & 1) ? -1.0 : 1.0);
    const uint16_t h = locks_f32_to_f16((float)v);
    memcpy(p, &h, 2);
}

/* rows x cols of random valid blocks in the file's layout: random bytes (quants, Q4_K's
 * six-bit scales and mins), then d (and dmin) set so that the weights have a spread of
 * about 1 / sqrt(cols) (Q8_0: d * q, q ~ 74 rms; Q4_0: d * (q - 8), ~4.6; Q4_K: d * sc * q
 * - dmin * m with sc, m up to 63 and q up to 15). */
static uint8_t *random_qmatrix(int32_t type, int32_t rows, int32_t cols) {
    const size_t bb = quant_block_bytes((ggml_type)type), nblk = (size_t)rows * (size_t)(cols / block_elems(type));
    uint8_t *w = malloc(nblk * bb);
    SETUP(w);
    for (size_t i = 0; i < nblk * bb; i++) w[i] = (uint8_t)tu_next();
    const double spread = 1.0 / sqrt((double)cols);
    for (size_t i = 0; i < nblk; i++) {
        uint8_t *blk = w + i * bb;
        if (type == GGML_TYPE_Q8_0) put_scale(blk, spread / 74.0, 1);
        else if (type == GGML_TYPE_Q4_0) put_scale(blk, spread / 4.6, 1);
        else { /* Q4_K: d, dmin */
            put_scale(blk, spread / 240.0, 0);
            put_scale(blk + 2, spread / 120.0, 0);
        }
    }
    return w;
}

static void upload_q(lg_model *m, int32_t type, lg_tensor t, int32_t layer, int32_t row0, int32_t rows, int32_t cols) {
    uint8_t *w = random_qmatrix(type, rows, cols);
    CHECK(lg_model_upload_q(m, t, layer, row0, rows, w));
    free(w);
}

/* 16-bit values of a random normal table (rows x cols, spread sigma) uploaded to t. */
static void upload16(lg_model *m, const lg_shape *s, lg_tensor t, int32_t layer, int32_t rows, int32_t cols,
                     double sigma) {
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)rows * (size_t)cols);
    SETUP(h);
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++) {
        const float v = (float)(sigma * tu_normal());
        h[i] = s->wtype == LOCKS_DTYPE_BF16 ? locks_f32_to_bf16(v) : locks_f32_to_f16(v);
    }
    CHECK(lg_model_upload(m, t, layer, 0, rows, h));
    free(h);
}

static void upload_norm(lg_model *m, const lg_shape *s, lg_tensor t, int32_t layer) {
    float *w = malloc(sizeof(float) * (size_t)s->dim);
    SETUP(w);
    for (int32_t i = 0; i < s->dim; i++) w[i] = 1.f + 0.1f * (float)tu_normal();
    CHECK(lg_model_upload(m, t, layer, 0, 1, w));
    free(w);
}

/* A model of the tiny shape: qtype < 0 random 16-bit weights of wtype (made on the
 * device), else every matrix of that ggml type (the embedding 16-bit). */
static lg_model *make_model(locks_dtype wtype, int32_t qtype) {
    lg_shape s = tiny_shape(wtype);
    int32_t qt[LG_QTYPES(2)];
    if (qtype >= 0) {
        for (int i = 0; i < LG_QTYPES(2); i++) qt[i] = qtype;
        s.qtypes = qt;
    }
    locks_status st;
    lg_model *m = lg_model_alloc(&s, &st);
    test_cond(m != NULL, "model (qtype %d): %s", qtype, locks_status_str(st));
    if (!m) return NULL;
    if (qtype < 0) {
        CHECK(lg_model_fill_random(m, tu_next()));
        return m;
    }
    test_cond(lg_model_quantized(m), "qtype %d: the model keeps nothing quantized", qtype);
    const int32_t D = s.dim, Q = s.n_heads * s.head_dim, KV = s.n_kv_heads * s.head_dim, F = s.ffn_dim;
    upload16(m, &s, LG_TOK_EMBD, 0, s.n_vocab, D, 1.0);
    upload_norm(m, &s, LG_OUTPUT_NORM, 0);
    upload_q(m, qtype, LG_OUTPUT, 0, 0, s.n_vocab, D);
    for (int32_t l = 0; l < s.n_layers; l++) {
        upload_norm(m, &s, LG_ATTN_NORM, l);
        upload_norm(m, &s, LG_FFN_NORM, l);
        upload_q(m, qtype, LG_WQKV, l, 0, Q, D);
        upload_q(m, qtype, LG_WQKV, l, Q, KV, D);
        upload_q(m, qtype, LG_WQKV, l, Q + KV, KV, D);
        upload_q(m, qtype, LG_WO, l, 0, D, Q);
        upload_q(m, qtype, LG_WGATE_UP, l, 0, F, D);
        upload_q(m, qtype, LG_WGATE_UP, l, F, F, D);
        upload_q(m, qtype, LG_WDOWN, l, 0, D, F);
    }
    return m;
}

/* ---- engines ------------------------------------------------------------------------ */

typedef struct {
    locks_cache *c;
    lg_ctx *e;
} eng;

static eng eng_make(lg_model *m, int32_t n_seqs, const locks_step_params *step) {
    const lg_shape s = lg_model_shape(m);
    locks_cache_params cp = locks_cache_default_params();
    cp.backend = LOCKS_BACKEND_CUDA;
    cp.n_layers = s.n_layers;
    cp.n_kv_heads = s.n_kv_heads;
    cp.head_dim = s.head_dim;
    cp.max_seqs = n_seqs;
    cp.n_pages = n_seqs * (MAX_CTX / 16);
    locks_status st;
    eng g;
    g.c = locks_cache_init(cp, &st);
    SETUP(g.c);
    for (int32_t i = 0; i < n_seqs; i++) {
        int32_t id;
        CHECK(locks_cache_seq_add(g.c, &id));
        SETUP(id == i);
    }
    g.e = lg_ctx_init(m, g.c, n_seqs, CHUNK, 0, &st);
    test_cond(g.e != NULL, "engine of %d sequences: %s", n_seqs, locks_status_str(st));
    SETUP(g.e);
    CHECK(lg_set_step(g.e, step, MAX_CTX)); /* the same decode bound at every batch */
    const lg_sample_params greedy = {0.f, 0, 1.f, 1};
    CHECK(lg_set_sampler(g.e, &greedy));
    return g;
}

static void eng_free(eng *g) {
    lg_ctx_free(g->e);
    locks_cache_free(g->c);
}

/* Sequence seq of g takes the prompt (len tokens), prefilled in chunks of CHUNK. */
static void prefill(eng *g, int32_t seq, const int32_t *prompt, int32_t len) {
    if (!len) return;
    CHECK(locks_cache_append(g->c, seq, len));
    for (int32_t p = 0; p < len; p += CHUNK)
        CHECK(lg_prefill(g->e, seq, prompt + p, len - p < CHUNK ? len - p : CHUNK, p, NULL));
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The largest difference of two rows of logits (for the failure message). */
static double max_diff(const float *a, const float *b, int32_t n) {
    double d = 0;
    for (int32_t i = 0; i < n; i++) {
        double x = fabs((double)a[i] - (double)b[i]);
        if (isnan(x)) x = HUGE_VAL;
        if (x > d) d = x;
    }
    return d;
}

static void check_batch(lg_model *m, const char *name, int32_t n, locks_selector sel, int32_t n_alone) {
    const lg_shape s = lg_model_shape(m);
    const int32_t V = s.n_vocab;
    locks_step_params sp = locks_step_default_params();
    sp.selector = sel;
    sp.budget = sel == LOCKS_SEL_FULL ? MAX_CTX : 64;
    int32_t plen[NMAX], *prompt[NMAX];
    for (int32_t q = 0; q < n; q++) {
        plen[q] = q % 7 == 3 ? 0 : tu_int(1, MAX_PROMPT); /* some empty: their first token is a decode */
        prompt[q] = malloc(sizeof(int32_t) * (size_t)(plen[q] + 1));
        SETUP(prompt[q]);
        for (int32_t i = 0; i < plen[q]; i++) prompt[q][i] = tu_int(0, V - 1);
    }
    const size_t row = (size_t)V, step_n = (size_t)n * row;
    float *all = malloc(sizeof(float) * STEPS * step_n), *lg = malloc(sizeof(float) * step_n);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(STEPS + 1) * (size_t)n);
    SETUP(all && lg && toks);

    /* 1. together: greedy tokens from the batch's own logits */
    eng w = eng_make(m, n, &sp);
    for (int32_t q = 0; q < n; q++) {
        prefill(&w, q, prompt[q], plen[q]);
        toks[q] = tu_int(0, V - 1);
    }
    int finite = 1;
    for (int32_t t = 0; t < STEPS; t++) {
        for (int32_t q = 0; q < n; q++) CHECK(locks_cache_append(w.c, q, 1));
        CHECK(lg_set_tokens(w.e, toks + (size_t)t * n));
        CHECK(lg_decode(w.e, 1, NULL, all + (size_t)t * step_n));
        for (int32_t q = 0; q < n; q++) {
            const float *x = all + (size_t)t * step_n + (size_t)q * row;
            for (int32_t i = 0; i < V; i++) finite &= isfinite(x[i]) != 0;
            toks[(size_t)(t + 1) * n + q] = argmax(x, V);
        }
    }
    eng_free(&w);
    test_cond(finite, "%s %d x %s: non-finite logits (the random weights' scale)", name, n, locks_selector_name(sel));

    /* alone: one engine of one sequence, emptied between the sequences */
    eng a = eng_make(m, 1, &sp);
    int32_t bad_rows = 0, first_q = -1, first_t = -1;
    double first_d = 0;
    for (int32_t q = 0; q < n_alone; q++) {
        CHECK(locks_cache_seq_truncate(a.c, 0, 0));
        prefill(&a, 0, prompt[q], plen[q]);
        for (int32_t t = 0; t < STEPS; t++) {
            CHECK(locks_cache_append(a.c, 0, 1));
            CHECK(lg_set_tokens(a.e, toks + (size_t)t * n + q));
            CHECK(lg_decode(a.e, 1, NULL, lg));
            const float *x = all + (size_t)t * step_n + (size_t)q * row;
            if (memcmp(x, lg, sizeof(float) * row) != 0) {
                if (!bad_rows++) first_q = q, first_t = t, first_d = max_diff(x, lg, V);
            }
        }
    }
    eng_free(&a);
    test_cond(bad_rows == 0,
              "%s: %d sequences x %s: %d of %d rows differ from batch 1 (first: sequence %d step %d, max |d| %.3g)", name,
              n, locks_selector_name(sel), bad_rows, n_alone * STEPS, first_q, first_t, first_d);

    /* 2. subsets, kernel by kernel: sequence q's k-th token is toks[k][q] */
    eng b = eng_make(m, n, &sp);
    for (int32_t q = 0; q < n; q++) prefill(&b, q, prompt[q], plen[q]);
    int32_t done[NMAX] = {0}, rows[NMAX], in[NMAX], n_left = n, n_steps = 0, sub_bad = 0;
    while (n_left > 0) {
        int32_t k = 0;
        for (int32_t q = 0; q < n; q++)
            if (done[q] < SUB && (tu_next() & 1)) rows[k++] = q;
        if (!k) continue;
        for (int32_t i = k - 1; i > 0; i--) { /* random order */
            const int32_t j = tu_int(0, i), x = rows[i];
            rows[i] = rows[j], rows[j] = x;
        }
        for (int32_t i = 0; i < k; i++) {
            CHECK(locks_cache_append(b.c, rows[i], 1));
            in[i] = toks[(size_t)done[rows[i]] * n + rows[i]];
        }
        CHECK(lg_set_rows(b.e, rows, k));
        CHECK(lg_set_tokens(b.e, in));
        CHECK(lg_decode(b.e, 0, NULL, lg));
        for (int32_t i = 0; i < k; i++) {
            const int32_t q = rows[i];
            sub_bad += memcmp(lg + (size_t)i * row, all + (size_t)done[q] * step_n + (size_t)q * row,
                              sizeof(float) * row) != 0;
            if (++done[q] == SUB) n_left--;
        }
        n_steps++;
    }
    eng_free(&b);
    test_cond(sub_bad == 0, "%s: %d sequences x %s: %d of %d subset rows differ from the full batch", name, n,
              locks_selector_name(sel), sub_bad, n * SUB);
    printf("  %-5s %2d sequences x %-5s: %d x %d rows == batch 1 %s; %d subset steps (kernel by kernel) == full batch "
           "%s\n",
           name, n, locks_selector_name(sel), n_alone, STEPS, bad_rows ? "NO" : "bit for bit", n_steps,
           sub_bad ? "NO" : "bit for bit");
    fflush(stdout);
    for (int32_t q = 0; q < n; q++) free(prompt[q]);
    free(all);
    free(lg);
    free(toks);
}

static void check_limits(lg_model *m) {
    const lg_shape s = lg_model_shape(m);
    locks_cache_params cp = locks_cache_default_params();
    cp.backend = LOCKS_BACKEND_CUDA;
    cp.n_layers = s.n_layers;
    cp.n_kv_heads = s.n_kv_heads;
    cp.head_dim = s.head_dim;
    cp.max_seqs = 33;
    cp.n_pages = 64;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    SETUP(c);
    lg_ctx *e = lg_ctx_init(m, c, 33, CHUNK, 0, &st);
    test_cond(!e && st == LOCKS_ERR_INVALID_ARG, "lg_ctx_init of 33 sequences: %s", locks_status_str(st));
    lg_ctx_free(e);
    locks_cache_free(c);
    cp.max_seqs = 16;
    c = locks_cache_init(cp, &st);
    SETUP(c);
    e = lg_ctx_init(m, c, 17, CHUNK, 0, &st);
    test_cond(!e && st == LOCKS_ERR_INVALID_ARG, "lg_ctx_init of 17 sequences on a cache of 16: %s",
              locks_status_str(st));
    lg_ctx_free(e);
    locks_cache_free(c);
}

int main(int argc, char **argv) {
    const int quick = argc > 1 && !strcmp(argv[1], "--quick");
    tu_seed("test_gpu_batch_wide");
    size_t f = 0, t = 0;
    if (lg_device_memory(0, &f, &t) != LOCKS_OK) {
        printf("test_gpu_batch_wide: no GPU\n");
        return 1;
    }
    /* one attention split at every batch (see the top); read when a cache's workspace is
     * first reserved, so before any engine */
    locks_cuda_lab lab = locks_cuda_lab_default();
    lab.att_min_pps = 1 << 20;
    locks_cuda_set_lab(&lab);
    static const struct {
        const char *name;
        locks_dtype wtype;
        int32_t qtype;
    } models[] = {
        {"f16", LOCKS_DTYPE_F16, -1},       {"bf16", LOCKS_DTYPE_BF16, -1},     {"q8_0", LOCKS_DTYPE_F16, GGML_TYPE_Q8_0},
        {"q4_0", LOCKS_DTYPE_F16, GGML_TYPE_Q4_0}, {"q4_k", LOCKS_DTYPE_BF16, GGML_TYPE_Q4_K},
    };
    for (size_t i = 0; i < (quick ? 1 : sizeof models / sizeof models[0]); i++) {
        lg_model *m = make_model(models[i].wtype, models[i].qtype);
        if (!m) continue;
        if (i == 0) check_limits(m);
        for (int32_t n = quick ? NMAX : 16; n <= NMAX; n *= 2) {
            if (!quick) check_batch(m, models[i].name, n, LOCKS_SEL_FULL, n);
            check_batch(m, models[i].name, n, LOCKS_SEL_LOCKS, quick ? 4 : n);
        }
        lg_model_free(m);
    }
    locks_cuda_set_lab(NULL);
    return test_report("test_gpu_batch_wide");
}
