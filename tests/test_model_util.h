/*
 * test_model_util.h — what the tests on the real model (label "model") share: finding
 * the model file and tokenizing a file of this repository. Header-only like test_util.h (one executable per tests/test_*.c).
 * popen() needs _POSIX_C_SOURCE before the first system header: include this after
 * test_util.h (which defines it), or define it first.
 */
#ifndef LOCKS_TEST_MODEL_UTIL_H
#define LOCKS_TEST_MODEL_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locks_model.h"

/* The first max bytes of the file at path, NUL-terminated (malloc'd; NULL when it cannot
 * be read): a real text for a prompt. */
static inline char *tu_read_text(const char *path, size_t max) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max, f) : 0;
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

/* The index of x's largest value (the first of ties): greedy decoding. */
static inline int32_t tu_argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The model's path into path[cap]: $LOCKS_MODEL, else the path scripts/fetch-model.sh
 * prints (it fetches on first use; run from the source root, as ctest does). Returns 0
 * if there is none (the fetch failed or printed nothing). */
static inline int tu_find_model(char *path, size_t cap) {
    const char *env = getenv("LOCKS_MODEL");
    if (env && *env) {
        snprintf(path, cap, "%s", env);
        return 1;
    }
    FILE *p = popen("scripts/fetch-model.sh", "r");
    if (!p) return 0;
    int ok = fgets(path, (int)cap, p) != NULL;
    if (pclose(p) != 0) ok = 0;
    if (ok) path[strcspn(path, "\r\n")] = '\0';
    return ok && path[0];
}

/* Gemma 3 270M's path: $LOCKS_GEMMA3_MODEL, else what `scripts/fetch-model.sh
 * gemma3-270m` prints (fetched on first use). Returns 0 if there is none. */
static inline int tu_find_gemma3(char *path, size_t cap) {
    const char *env = getenv("LOCKS_GEMMA3_MODEL");
    if (env && *env) {
        snprintf(path, cap, "%s", env);
        return 1;
    }
    FILE *p = popen("scripts/fetch-model.sh gemma3-270m", "r");
    if (!p) return 0;
    int ok = fgets(path, (int)cap, p) != NULL;
    if (pclose(p) != 0) ok = 0;
    if (ok) path[strcspn(path, "\r\n")] = '\0';
    return ok && path[0];
}

/* The SmolLM2 model (tu_find_model; its path into path[cap]), loaded. Exits 1 with a line
 * naming `test` and the reason when there is no model or it does not load: every model
 * test needs it. */
static inline locks_model *tu_load_model(const char *test, char *path, size_t cap) {
    if (!tu_find_model(path, cap)) {
        fprintf(stderr, "%s: no model (set LOCKS_MODEL or run scripts/fetch-model.sh)\n", test);
        exit(1);
    }
    locks_status st;
    locks_model *m = locks_model_load(path, &st);
    if (!m) {
        fprintf(stderr, "%s: cannot load %s: %s (%s)\n", test, path, locks_status_str(st), locks_last_error());
        exit(1);
    }
    return m;
}

#ifdef LOCKS_TEST_UTIL_H /* SETUP and CHECK: the tests that include test_util.h first */
/* The first `want` token ids of the file at path (from the source root, as ctest runs),
 * special-token text not parsed; *n = want. SETUP fails when the file is missing or
 * shorter. */
static inline int32_t *tu_file_tokens(const locks_model *m, const char *path, int32_t want, int32_t *n) {
    FILE *f = fopen(path, "rb");
    SETUP(f);
    size_t cap = 1 << 20;
    char *text = malloc(cap);
    SETUP(text);
    size_t len = fread(text, 1, cap - 1, f);
    fclose(f);
    text[len] = '\0';
    int32_t *ids = malloc(sizeof(int32_t) * (len + 1));
    SETUP(ids);
    CHECK(locks_tokenizer_encode(locks_model_tokenizer(m), text, len, false, ids, (int32_t)len + 1, n));
    free(text);
    SETUP(*n >= want);
    *n = want;
    return ids;
}

/* ---- logits of two engines, position by position (test_gpu_model, test_gpu_gemma) ---- */

typedef struct {
    int32_t n, agree;   /* positions, of which top-1 agreed */
    double maxd, sumd;  /* the largest and the sum of the per-position max |dlogit| */
    double *per_pos;    /* per-position max |dlogit| (n of them), or NULL */
} tu_logit_stats;

/* One position: logits a against b (V of each). */
static inline void tu_logit_cmp(tu_logit_stats *s, const float *a, const float *b, int32_t V) {
    double md = 0;
    for (int32_t i = 0; i < V; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d > md || d != d) md = d;
    }
    if (s->per_pos) s->per_pos[s->n] = md;
    s->n++;
    s->agree += tu_argmax(a, V) == tu_argmax(b, V);
    if (md > s->maxd || md != md) s->maxd = md;
    s->sumd += md;
}

/* KL(p || q) of the softmaxes of logits p and q, in float64. */
static inline double tu_kl_logits(const float *p, const float *q, int32_t V) {
    double mp = p[0], mq = q[0];
    for (int32_t i = 1; i < V; i++) {
        if ((double)p[i] > mp) mp = p[i];
        if ((double)q[i] > mq) mq = q[i];
    }
    double zp = 0, zq = 0;
    for (int32_t i = 0; i < V; i++) zp += exp((double)p[i] - mp), zq += exp((double)q[i] - mq);
    const double lzp = mp + log(zp), lzq = mq + log(zq);
    double kl = 0;
    for (int32_t i = 0; i < V; i++) {
        const double lp = (double)p[i] - lzp;
        kl += exp(lp) * (lp - ((double)q[i] - lzq));
    }
    return kl;
}

static inline int tu_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of v[n] (sorts v). */
static inline double tu_quantile(double *v, int32_t n, double q) {
    qsort(v, (size_t)n, sizeof *v, tu_cmp_double);
    int32_t i = (int32_t)(q * (n - 1) + 0.5);
    return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

/* ---- five contexts in lockstep (test_gpu_model, test_gpu_gemma) ----
 * The same teacher-forced tokens through the CPU and the GPU, each with full attention and
 * with LOCKS at budget 256 (the CPU with int8 inputs to its products, its default), and
 * the CPU's full attention with fp32 activations: a prefill of n_prompt tokens, then one
 * decode step a token to n_total. gpu_as_cpu: the "GPU" contexts on the CPU backend (the
 * tests' bookkeeping without a device). */
enum { TU_CPU_FULL, TU_GPU_FULL, TU_CPU_LOCKS, TU_GPU_LOCKS, TU_CPU_F32, TU_N_CTX };
typedef struct {
    locks_ctx *c[TU_N_CTX]; /* kept for their run stats (tu_lockstep_free) */
    int32_t n_pos, threads;
    /* per position: full GPU vs CPU; LOCKS GPU vs CPU (lk.per_pos set); each backend's
     * LOCKS vs its full; each backend's full vs the fp32 reference */
    tu_logit_stats full, lk, fid_cpu, fid_gpu, ref_cpu, ref_gpu;
    /* means over the positions: KL(CPU full || GPU full), KL(full || LOCKS) per backend,
     * KL(fp32 || full) per backend */
    double kl_full, kl_cpu, kl_gpu, klr_cpu, klr_gpu;
    double prefill_d; /* full.maxd at the prefill's last token */
} tu_lockstep;

static inline void tu_lockstep_run(const locks_model *m, const int32_t *toks, int32_t n_prompt, int32_t n_total,
                                   int32_t n_ctx, int gpu_as_cpu, tu_lockstep *r) {
    memset(r, 0, sizeof *r);
    const int32_t V = locks_model_get_info(m).n_vocab;
    r->n_pos = n_total - n_prompt + 1;
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    r->threads = nproc > 16 ? 16 : (nproc < 1 ? 1 : (int32_t)nproc);
    float *lg[TU_N_CTX];
    for (int k = 0; k < TU_N_CTX; k++) {
        locks_ctx_params p = locks_ctx_default_params();
        p.n_ctx = n_ctx;
        p.step = locks_step_default_params();
        if (k == TU_CPU_FULL || k == TU_GPU_FULL || k == TU_CPU_F32) {
            p.step.selector = LOCKS_SEL_FULL;
            p.step.budget = n_ctx;
        } else {
            p.step.selector = LOCKS_SEL_LOCKS;
            p.step.budget = 256;
        }
        p.n_threads = r->threads;
        p.f32_act = k == TU_CPU_F32;
        if ((k == TU_GPU_FULL || k == TU_GPU_LOCKS) && !gpu_as_cpu) p.backend = LOCKS_BACKEND_CUDA;
        locks_status st;
        r->c[k] = locks_ctx_init(m, p, &st);
        if (!r->c[k]) fprintf(stderr, "context %d: %s (%s)\n", k, locks_status_str(st), locks_last_error());
        SETUP(r->c[k]);
        lg[k] = malloc(sizeof(float) * V);
        SETUP(lg[k]);
    }
    r->lk.per_pos = malloc(sizeof(double) * r->n_pos);
    SETUP(r->lk.per_pos);
    for (int32_t i = n_prompt - 1; i < n_total; i++) {
        for (int k = 0; k < TU_N_CTX; k++) {
            if (i == n_prompt - 1)
                CHECK(locks_ctx_prefill(r->c[k], toks, n_prompt, lg[k]));
            else
                CHECK(locks_ctx_decode(r->c[k], toks[i], lg[k]));
        }
        tu_logit_cmp(&r->full, lg[TU_GPU_FULL], lg[TU_CPU_FULL], V);
        tu_logit_cmp(&r->lk, lg[TU_GPU_LOCKS], lg[TU_CPU_LOCKS], V);
        tu_logit_cmp(&r->fid_cpu, lg[TU_CPU_LOCKS], lg[TU_CPU_FULL], V);
        tu_logit_cmp(&r->fid_gpu, lg[TU_GPU_LOCKS], lg[TU_GPU_FULL], V);
        r->kl_full += tu_kl_logits(lg[TU_CPU_FULL], lg[TU_GPU_FULL], V);
        r->kl_cpu += tu_kl_logits(lg[TU_CPU_FULL], lg[TU_CPU_LOCKS], V);
        r->kl_gpu += tu_kl_logits(lg[TU_GPU_FULL], lg[TU_GPU_LOCKS], V);
        tu_logit_cmp(&r->ref_cpu, lg[TU_CPU_FULL], lg[TU_CPU_F32], V);
        tu_logit_cmp(&r->ref_gpu, lg[TU_GPU_FULL], lg[TU_CPU_F32], V);
        r->klr_cpu += tu_kl_logits(lg[TU_CPU_F32], lg[TU_CPU_FULL], V);
        r->klr_gpu += tu_kl_logits(lg[TU_CPU_F32], lg[TU_GPU_FULL], V);
        if (i == n_prompt - 1) r->prefill_d = r->full.maxd;
    }
    SETUP(r->full.n == r->n_pos && r->lk.n == r->n_pos);
    r->kl_full /= r->n_pos, r->kl_cpu /= r->n_pos, r->kl_gpu /= r->n_pos;
    r->klr_cpu /= r->n_pos, r->klr_gpu /= r->n_pos;
    for (int k = 0; k < TU_N_CTX; k++) free(lg[k]);
}

static inline void tu_lockstep_free(tu_lockstep *r) {
    for (int k = 0; k < TU_N_CTX; k++) locks_ctx_free(r->c[k]);
    free(r->lk.per_pos);
}

/* The GPU decode graph against the same kernels launched one by one (a context with
 * cuda_graph = 0): a 1000-token prefill of toks, then 150 decode steps, LOCKS @ 256;
 * bit-identical logits (test_gpu_model, test_gpu_gemma: for Gemma 3 past the window, so
 * the rings' kernels run with a full window inside the captured graph). */
static inline void tu_graph_vs_eager(const locks_model *m, const int32_t *toks) {
    const locks_model_info in = locks_model_get_info(m);
    locks_ctx_params p = locks_ctx_default_params();
    p.n_ctx = 1200;
    p.backend = LOCKS_BACKEND_CUDA;
    p.step.selector = LOCKS_SEL_LOCKS;
    p.step.budget = 256;
    locks_status st;
    locks_ctx *g = locks_ctx_init(m, p, &st);
    p.cuda_graph = 0;
    locks_ctx *e = locks_ctx_init(m, p, &st);
    SETUP(g && e);
    float *lg = malloc(sizeof(float) * in.n_vocab), *le = malloc(sizeof(float) * in.n_vocab);
    SETUP(lg && le);
    CHECK(locks_ctx_prefill(g, toks, 1000, lg));
    CHECK(locks_ctx_prefill(e, toks, 1000, le));
    int32_t same = memcmp(lg, le, sizeof(float) * in.n_vocab) == 0, steps = 0;
    for (int32_t i = 1000; i < 1150; i++, steps++) {
        CHECK(locks_ctx_decode(g, toks[i], lg));
        CHECK(locks_ctx_decode(e, toks[i], le));
        same &= memcmp(lg, le, sizeof(float) * in.n_vocab) == 0;
    }
    printf("  graph replay vs kernel-by-kernel: %d decode steps (LOCKS @ 256), logits %s\n", steps,
           same ? "bit-identical" : "DIFFER");
    test_cond(same, "graph replay logits differ from the uncaptured launches");
    locks_ctx_free(g);
    locks_ctx_free(e);
    free(lg), free(le);
}
#endif

#endif
