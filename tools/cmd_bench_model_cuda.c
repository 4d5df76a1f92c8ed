/*
 * cmd_bench_model_cuda.c — `locks bench --backend cuda --model llama3-8b|glm4-9b` or
 * `--gguf FILE`: the whole model's decode token on the GPU, dense and LOCKS, and the time
 * to first token of a real prefill.
 *
 * Weights: --model, random bf16 weights of the real shapes made on the device (src/cuda/
 * model_engine.cu); --gguf, the weights of a Llama-architecture GGUF as the GPU engine
 * uploads them (engine_cuda_upload: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K matrices kept
 * quantized, the rest in 16 bits), the host copy freed once they are on the device.
 * Method: per (batch, context) a CUDA cache whose sequences hold context - 1 tokens of
 * random K/V in every layer, bf16 (fp16 for --gguf, the cache engine_cuda_init makes for
 * a loaded model), with every full page summarised, plus the decode token's slot (decode
 * time does not depend on the values; random keys make the masses near-uniform, the
 * top-k's worst case). A token is one replay of the captured
 * graph (all layers, K/V write, summary of a page that fills, the step, the FFN, logits,
 * sampling); times are medians of --trials replays timed with CUDA events, the sequences
 * keeping their length. ms/token is the mean over one page of tokens: 15 mid-page tokens
 * (length N - 8, no summary to build) and the token that fills a page (length N: the
 * graph builds that page's summary in every layer), timed separately. The split: graphs of the products alone (weights) and of the
 * attention alone (RoPE of q and k, K/V write, summary, qprep, step), itself split into
 * its preparation and the step (graphs of each alone); the rest is the difference (norms,
 * SwiGLU, casts, embedding, sampling, launch gaps).
 * Bytes per token: every weight matrix read once (the embedding table: one row per
 * sequence, not counted; a quantized matrix: its file bytes, rows x row bytes; any other:
 * 2 bytes a value) + per sequence and layer, K/V of the attended tokens (d x 2 x 2
 * per token and KV head) + for LOCKS the summaries of the full pages. Byte limit = bytes /
 * 4.49 TB/s (the H200 copy rate measured here; METHOD.md), printed beside it: on an H100
 * (3.35 TB/s by the datasheet) the percentage reads low.
 * Batch: 1..32 sequences (the engine's products run in pieces of 8 rows from 9 on, model_cuda.h).
 * Each sequence has pages of its own; a (batch, context) whose cache does not fit the
 * device is skipped. --shared-prefix: every sequence's block table points at sequence 0's
 * full context pages (each keeps its own last pages for the tokens it decodes), so large
 * batches fit one card; rows and CSV selectors say "shared". The dense attention then
 * reads the same pages B times: the bytes per token are those of distinct pages (the
 * byte limit is the same), but sequences read the same page at about the same time, so
 * some of those reads may hit the L2 (50 MB, small beside a 128K context's layer, yet not
 * nothing): read such a row as at most as slow as distinct pages, not as equal to them.
 * Sizes, distinct pages: Llama-3.1-8B K/V is 128 KiB a token (32 layers x 8 KV heads x 128
 * x 2 x 2 B), 32 GiB a sequence at 256K, so batch 8 at 256K (256 GiB) fits no card: only
 * shared. GLM-4-9B (40 layers x 2 KV heads: 40 KiB a token) is 10 GiB a sequence at 256K
 * (+ 10% summaries and 2 pages of slack: 11.0 GiB): batch 8 = ~88 GiB beside 17.5 GiB of
 * bf16 weights (+ the 3 GiB margin checked below and the step's workspace), which fits the
 * H200's 141 GB but not an H100's 80 GB; batch 16 at 128K is the same ~88 GiB; batch 32 at
 * 128K (~176 GiB) fits neither.
 * TTFT: a prefill of random token ids through the same engine (chunks of 2048: cuBLAS
 * products, causal prefill attention over the paged cache), wall time to the last
 * token's logits.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "locks.h"

#ifndef LOCKS_HAVE_CUDA
int cmd_bench_model_cuda(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "locks bench --backend cuda --model / --gguf: this build has no CUDA backend\n");
    return 2;
}
#else
#include "args.h"
#include "cache.h"
#include "cuda/locks_cuda.h"
#include "locks_model.h"
#include "model/cuda/engine_cuda.h"
#include "model/cuda/model_cuda.h"
#include "model/llama_internal.h"
#include "util.h"

#define MAXL 16
#define HBM_TBS 4.49

typedef struct {
    const char *name;
    lg_shape s;
} mshape;

static const mshape mshapes[] = {
    {"llama3-8b", {128256, 4096, 32, 32, 8, 128, 14336, 128, 500000.f, 1e-5f, LOCKS_DTYPE_BF16, 0, 0, NULL, {0}}},
    {"glm4-9b", {151552, 4096, 40, 32, 2, 128, 13696, 128, 10000.f, 1e-5f, LOCKS_DTYPE_BF16, 0, 0, NULL, {0}}},
};

typedef struct {
    const mshape *m;  /* --model, or NULL */
    const char *gguf; /* --gguf FILE, or NULL */
    /* the model benchmarked (cmd_bench_model_cuda sets them): its name in the table and
     * the CSV (--model's, or the file's basename less .gguf), shape and weight bytes a
     * token reads */
    char name[128];
    lg_shape s;
    double wbytes;
    locks_dtype kv; /* the cache's K/V: bf16 (--model), fp16 (--gguf: the engine's cache of a loaded model) */
    int32_t ctx[MAXL], batch[MAXL], ttft[MAXL];
    int32_t gemv[3];
    int n_ctx, n_batch, n_ttft, n_gemv;
    int32_t budget, trials, spec;
    int shared; /* --shared-prefix: sequences 1 .. B - 1 hold sequence 0's context pages */
    int profile; /* --profile: one LOCKS token at mid-page, then one page-fill token, in profiler ranges */
    const char *csv;
} mopts;

static void usage(FILE *f) {
    fprintf(f, "usage: locks bench --backend cuda --model llama3-8b|glm4-9b | --gguf FILE [--context 32k,128k,...]\n"
               "                   [--batch 1,8] [--budget 2048] [--trials 10] [--ttft 32k,128k | --ttft 0] [--gemv 2,1,0]\n"
               "                   [--csv FILE] [--speculate K] [--profile] [--shared-prefix]\n"
               "  --model NAME: random bf16 weights of that shape, made on the device\n"
               "  --gguf FILE: the weights of a Llama-architecture GGUF as the GPU engine holds them (Q4_0, Q4_1,\n"
               "               Q8_0, Q4_K, Q5_K, Q6_K kept quantized, other types in 16 bits); named by the file\n"
               "  --gemv LIST: the decode products through cuBLAS and the small kernels (0), through gemv.cu (1),\n"
               "               or gemv.cu with programmatic dependent launch (2), one after the other on the same\n"
               "               cache (the lab switch engine_gemv); default: the environment\n"
               "  --speculate K: batch 1: the cost of a LOCKS draft token and of a dense verify of K + 1 tokens,\n"
               "               and the per-token speed of speculation as a function of the acceptance rate\n"
               "  --batch LIST: sequences decoded together, 1..32 each (distinct pages: skipped where the cache\n"
               "               does not fit the device)\n"
               "  --shared-prefix: every sequence's block table points at the same context pages (its own last\n"
               "               pages for the new tokens): the same bytes per token, read from one copy (rows\n"
               "               marked shared; some reads may hit the L2)\n"
               "  --profile: after the timings, one LOCKS mid-page token and then one page-fill token, each alone\n"
               "               between cudaProfilerStart/Stop (for ncu --profile-from-start off)\n");
}

static int parse(int argc, char **argv, mopts *o) {
    memset(o, 0, sizeof *o);
    o->m = NULL;
    args_gpu_sweep(o->ctx, &o->n_ctx, o->batch, &o->n_batch);
    o->ttft[0] = 32768;
    o->ttft[1] = 131072;
    o->n_ttft = 2;
    o->budget = 2048;
    o->trials = 10;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--backend") && v) {
            i++;
        } else if (!strcmp(a, "--model") && v) {
            for (size_t k = 0; k < sizeof mshapes / sizeof mshapes[0]; k++)
                if (!strcmp(v, mshapes[k].name)) o->m = &mshapes[k];
            if (!o->m) {
                fprintf(stderr, "locks bench: unknown --model %s (llama3-8b, glm4-9b)\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--gguf") && v) {
            o->gguf = v;
            i++;
        } else if (!strcmp(a, "--context") && v) {
            if ((o->n_ctx = args_parse_ints(v, o->ctx, MAXL, 32, INT32_MAX / 2)) < 1) return 2;
            i++;
        } else if (!strcmp(a, "--batch") && v) {
            if ((o->n_batch = args_parse_ints(v, o->batch, MAXL, 1, LOCKS_CTX_MAX_SEQS)) < 1) return 2;
            i++;
        } else if (!strcmp(a, "--ttft") && v) {
            if (!strcmp(v, "0")) o->n_ttft = 0;
            else if ((o->n_ttft = args_parse_ints(v, o->ttft, MAXL, 16, INT32_MAX / 2)) < 1) return 2;
            i++;
        } else if (!strcmp(a, "--gemv") && v) {
            if ((o->n_gemv = args_parse_ints(v, o->gemv, 3, 0, 2)) < 1) return 2;
            i++;
        } else if (!strcmp(a, "--budget") && v) {
            if (!args_parse_int(v, 16, INT32_MAX, &o->budget)) return 2;
            i++;
        } else if (!strcmp(a, "--trials") && v) {
            if (!args_parse_int(v, 3, 64, &o->trials)) return 2;
            i++;
        } else if (!strcmp(a, "--speculate") && v) {
            if (!args_parse_int(v, 1, 15, &o->spec)) return 2;
            i++;
        } else if (!strcmp(a, "--profile")) {
            o->profile = 1;
        } else if (!strcmp(a, "--shared-prefix")) {
            o->shared = 1;
        } else {
            const int r = args_bench_tail(a, v, &i, &o->csv, usage);
            if (r) return r;
        }
    }
    if (!o->m == !o->gguf) {
        if (o->m) fprintf(stderr, "locks bench: --model or --gguf, not both\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

static double gib(double b) { return b / 1073741824.0; }

/* Weight bytes a token reads, 16-bit matrices (--model): every matrix once, the embedding
 * table not (one row). */
static double weight_bytes(const lg_shape *s) {
    const double D = s->dim, Q = (double)s->n_heads * s->head_dim, KV = (double)s->n_kv_heads * s->head_dim;
    const double F = s->ffn_dim;
    return 2.0 * ((double)s->n_layers * ((Q + 2 * KV) * D + D * Q + 3 * F * D) + (double)s->n_vocab * D);
}

/* Tokens one decode step attends (the selection rule, as step.cu). */
static double attended(int32_t len, int32_t budget, int locks) {
    if (!locks || budget >= len) return len;
    const int32_t n_full = len / 16, part = len % 16, sink = n_full < 1 ? n_full : 1;
    int32_t rs = n_full - 1;
    if (rs < sink) rs = sink;
    const int32_t forced = 16 * (sink + n_full - rs) + part, k = (budget - forced) / 16;
    if (k >= rs - sink) return len;
    return forced + 16.0 * k;
}

static int cmp_ms(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median wall ms of `trials` host calls: a decode token with its logits copied to the
 * host (what locks_speculate's draft step costs), or a verify of n tokens at pos. */
static int time_host(lg_ctx *e, int verify, const int32_t *toks, int32_t n, int32_t pos, float *logits, int trials,
                     double *med) {
    double t[64];
    for (int i = -1; i < trials; i++) { /* i = -1: warm-up (graph capture) */
        const double t0 = locks_now_ms();
        locks_status st = verify ? lg_verify(e, 0, toks, n, pos, logits) : lg_decode(e, 1, NULL, logits);
        if (st != LOCKS_OK) {
            fprintf(stderr, "locks bench: %s: %s\n", verify ? "verify" : "decode", tool_why(st));
            return 1;
        }
        if (i >= 0) t[i] = locks_now_ms() - t0;
    }
    qsort(t, (size_t)trials, sizeof t[0], cmp_ms);
    *med = t[trials / 2];
    return 0;
}

/* --speculate K at one context (batch 1; the sequence holds N tokens, the last being the
 * decode slot): host-timed dense decode, LOCKS draft decode, and verify of K + 1 tokens
 * at positions [N - 1, N + K), each with its logits read back; then the per-token time
 * of speculation for draft acceptance rates a (each draft kept with probability a given
 * the ones before: E tokens per round = (1 - a^(K+1)) / (1 - a)). Random weights: the
 * acceptance of real text comes from `locks run --speculate` on a real model. */
static int bench_speculate(const mopts *o, lg_ctx *e, locks_cache *c, int32_t N, FILE *csv) {
    const lg_shape *s = &o->s;
    const int32_t K = o->spec;
    float *logits = malloc(sizeof(float) * (size_t)(K + 1) * (size_t)s->n_vocab);
    if (!logits) return 1;
    int rc = 0;
    double dense_ms = 0, draft_ms = 0, verify_ms = 0;
    int32_t toks[16];
    for (int32_t i = 0; i <= K; i++) toks[i] = 11 + 7 * i;
    /* the sequence holds N tokens here (bench_decode leaves it at N - 8 for the next
     * engine: brought back to N, and left as it came) */
    const int32_t len_in = locks_cache_seq_len(c, 0);
    if (len_in < 1 || len_in > N || (len_in < N && locks_cache_append(c, 0, N - len_in) != LOCKS_OK)) rc = 1;
    for (int sel = 0; sel < 2 && !rc; sel++) {
        locks_step_params p = locks_step_default_params();
        p.selector = sel ? LOCKS_SEL_LOCKS : LOCKS_SEL_FULL;
        p.budget = sel ? o->budget : N + 16;
        if (lg_set_step(e, &p, (N / 16 + 2) * 16) != LOCKS_OK) rc = 1;
        if (!rc) rc = time_host(e, 0, NULL, 0, 0, logits, o->trials, sel ? &draft_ms : &dense_ms);
    }
    if (!rc && locks_cache_append(c, 0, K) != LOCKS_OK) rc = 1;
    if (!rc) rc = time_host(e, 1, toks, K + 1, N - 1, logits, o->trials, &verify_ms);
    /* exactness at this shape: K + 1 dense decode tokens at positions N - 1 .. N + K - 1
     * (selector full, the same max_ctx) vs the verify of the same tokens, memcmp per row */
    int32_t rows_equal = -1;
    float *dec = rc ? NULL : malloc(sizeof(float) * (size_t)(K + 1) * (size_t)s->n_vocab);
    if (dec) {
        locks_step_params p = locks_step_default_params();
        p.selector = LOCKS_SEL_FULL;
        p.budget = N + 16;
        rc = locks_cache_seq_truncate(c, 0, N) != LOCKS_OK || lg_set_step(e, &p, (N / 16 + 2) * 16) != LOCKS_OK;
        for (int32_t i = 0; i <= K && !rc; i++) {
            if (i > 0 && locks_cache_append(c, 0, 1) != LOCKS_OK) rc = 1;
            if (!rc && (lg_set_tokens(e, &toks[i]) != LOCKS_OK ||
                        lg_decode(e, 1, NULL, dec + (size_t)i * s->n_vocab) != LOCKS_OK))
                rc = 1;
        }
        if (!rc && lg_verify(e, 0, toks, K + 1, N - 1, logits) != LOCKS_OK) rc = 1;
        rows_equal = 0;
        for (int32_t i = 0; i <= K && !rc; i++)
            rows_equal += memcmp(dec + (size_t)i * s->n_vocab, logits + (size_t)i * s->n_vocab,
                                 sizeof(float) * (size_t)s->n_vocab) == 0;
        free(dec);
    }
    if (locks_cache_seq_truncate(c, 0, len_in) != LOCKS_OK) rc = 1;
    if (rc) {
        free(logits);
        return rc;
    }
    printf("%-9s ctx %7d verify == dense decode bit for bit (memcmp of the logits): %d of %d rows\n", o->name, N,
           rows_equal, K + 1);
    printf("%-9s ctx %7d speculate K %d (host-timed, logits read back): dense token %.3f ms, LOCKS draft token %.3f ms"
           " (budget %d), verify of %d tokens %.3f ms (%.2f dense tokens)\n",
           o->name, N, K, dense_ms, draft_ms, o->budget, K + 1, verify_ms, verify_ms / dense_ms);
    printf("  acceptance  tokens/round  ms/token  vs dense\n");
    const double rates[] = {0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0};
    const double round_ms = K * draft_ms + verify_ms;
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        const double a = rates[i];
        double tpr = 0, ak = 1; /* sum_{j=0..K} a^j */
        for (int32_t j = 0; j <= K; j++, ak *= a) tpr += ak;
        printf("  %9.2f  %12.2f  %8.3f  %7.2fx\n", a, tpr, round_ms / tpr, dense_ms * tpr / round_ms);
        if (csv)
            fprintf(csv, "speculate,%s,1,%d,k%d_a%.2f,%d,%.6f,%.6f,%.6f,%.6f,0,0\n", o->name, N, K, a, o->budget,
                    round_ms / tpr, dense_ms, draft_ms, verify_ms);
    }
    /* the acceptance where speculation breaks even and where it reaches 1.5x */
    for (int t = 0; t < 2; t++) {
        const double want = t ? 1.5 : 1.0;
        double lo = 0, hi = 1;
        for (int it = 0; it < 40; it++) {
            const double a = (lo + hi) / 2;
            double tpr = 0, ak = 1;
            for (int32_t j = 0; j <= K; j++, ak *= a) tpr += ak;
            if (dense_ms * tpr / round_ms >= want) hi = a;
            else lo = a;
        }
        if (hi >= 1.0 - 1e-9) printf("  %.1fx dense: not reached even at acceptance 1\n", want);
        else printf("  %.1fx dense from acceptance %.3f\n", want, hi);
    }
    free(logits);
    return 0;
}

/* --shared-prefix: sequence dst (empty) takes the first n pages of sequence 0 (full pages)
 * into its block table, one more holder each, mirrored to the device: what
 * locks_cache_seq_share does on the CPU backend (which refuses a CUDA cache), in cache.h's
 * bookkeeping. The bench never writes those pages again (its decode tokens land past
 * them, and it truncates no sequence into them). */
static locks_status share_prefix(locks_cache *c, int32_t dst, int32_t n) {
    locks_seq *d = &c->seqs[dst];
    const locks_seq *s0 = &c->seqs[0];
    if (!d->active || d->len != 0 || n < 1 || n > s0->len / LOCKS_PAGE) return LOCKS_ERR_INVALID_ARG;
    for (int32_t i = 0; i < n; i++) {
        d->table[i] = s0->table[i];
        c->ref[s0->table[i]]++;
    }
    d->n_pages = n;
    d->len = n * LOCKS_PAGE;
    return locks_cuda_seq_sync(c->cuda, dst, d->table, d->n_pages, d->len);
}

static int bench_decode(const mopts *o, lg_model *m, int32_t B, int32_t N, FILE *csv) {
    int rc = 0;
    const lg_shape *s = &o->s;
    locks_cache *c = NULL;
    lg_ctx *e = NULL;
    int32_t *d_pages = NULL, *all = NULL;
    locks_cache_params cp = locks_cache_default_params();
    cp.backend = LOCKS_BACKEND_CUDA;
    cp.kv_dtype = o->kv;
    cp.n_layers = lg_n_global(s); /* the global layers (a sliding-window model's local ones: the engine's rings) */
    cp.n_kv_heads = s->n_kv_heads;
    cp.head_dim = s->head_dim;
    cp.max_seqs = B;
    const int32_t pages_per_seq = N / 16 + 2;
    /* shared: sequence 0's pages, and each other sequence's own tail: tokens from its shared
     * (N - 9) / 16 pages up to N + 8 at most, 2 pages (+ 1 of slack) */
    const int32_t n_shared = (N - 9) / 16;
    const int shared = o->shared && B > 1 && n_shared > 0; /* batch 1: nothing to share, rows as without */
    cp.n_pages = shared ? pages_per_seq + (B - 1) * 3 : B * pages_per_seq;
    const double kv_b = (double)cp.n_layers * cp.n_pages * s->n_kv_heads *
                        (16.0 * s->head_dim * 4 + (double)locks_cuda_summary_stored_bytes(s->head_dim));
    size_t fr = 0, tot = 0;
    TRY(lg_device_memory(0, &fr, &tot));
    if (kv_b + 3.0 * 1073741824.0 > (double)fr) {
        printf("%s batch %d context %d%s: skipped, the KV cache needs %.1f GiB, %.1f GiB free beside the weights\n",
               o->name, B, N, shared ? " shared" : "", gib(kv_b), gib((double)fr));
        return 0;
    }
    locks_status st;
    c = locks_cache_init(cp, &st);
    if (!c) {
        fprintf(stderr, "locks bench: cache of %d pages: %s\n", cp.n_pages, tool_why(st));
        return 1;
    }
    for (int32_t b = 0; b < B; b++) {
        int32_t id;
        TRY(locks_cache_seq_add(c, &id));
        if (shared && b > 0) {
            TRY(share_prefix(c, id, n_shared));
            if (N - 9 > n_shared * 16) TRY(locks_cache_append(c, id, N - 9 - n_shared * 16));
        } else {
            TRY(locks_cache_append(c, id, N - 9));
        }
    }
    double t0 = locks_now_ms();
    all = malloc(sizeof(int32_t) * (size_t)cp.n_pages);
    if (!all) goto done;
    for (int32_t i = 0; i < cp.n_pages; i++) all[i] = i;
    d_pages = locks_cuda_malloc(sizeof(int32_t) * (size_t)cp.n_pages);
    if (!d_pages) goto done;
    TRY(locks_cuda_memcpy_h2d(d_pages, all, sizeof(int32_t) * (size_t)cp.n_pages));
    for (int32_t l = 0; l < s->n_layers; l++) {
        TRY(locks_cuda_fill_random(c->cuda, l, 0x5eed + (uint64_t)l, 2.0f));
        TRY(locks_cuda_summary_build(c->cuda, l, d_pages, cp.n_pages));
    }
    TRY(locks_cuda_sync(c->cuda));
    const double fill_ms = locks_now_ms() - t0;
    /* the decode token's slot: token N - 8, mid-page (15 of 16 tokens build no summary) */
    for (int32_t b = 0; b < B; b++) TRY(locks_cache_append(c, b, 1));
    for (int gi = 0; gi < (o->n_gemv ? o->n_gemv : 1) && !rc; gi++) {
        static const char *const gtags[] = {" cublas", " gemv", " gemv+pdl"};
        static const char *const ctags[] = {"-cublas", "-gemv", "-gemvpdl"};
        if (o->n_gemv) {
            locks_cuda_lab lab = locks_cuda_get_lab();
            lab.engine_gemv = o->gemv[gi];
            locks_cuda_set_lab(&lab);
        }
        const char *gtag = o->n_gemv ? gtags[o->gemv[gi]] : "", *ctag = o->n_gemv ? ctags[o->gemv[gi]] : "";
        if (gi > 0) /* mid-page again (the last pass left a full page) */
            for (int32_t b = 0; b < B; b++) TRY(locks_cache_append(c, b, 8));
        e = lg_ctx_init(m, c, B, 16, 0, &st);
        if (!e) {
            fprintf(stderr, "locks bench: engine: %s\n", tool_why(st));
            rc = 1;
            goto done;
        }
        int32_t toks[LOCKS_CTX_MAX_SEQS];
        for (int32_t b = 0; b < B; b++) toks[b] = 1 + b;
        TRY(lg_set_tokens(e, toks));
        const lg_sample_params greedy = {0.f, 0, 1.f, 1};
        TRY(lg_set_sampler(e, &greedy));
        const double wb = o->wbytes;
        /* per selector: the parts at a mid-page token; then (all sequences at N tokens) the
         * token that fills a page, whose summary the graph builds in every layer */
        double t_all[2], t_gemm[2], t_attn[2], t_prep[2], t_step[2], t_fill[2], t_fill_prep[2], t_fill_attn[2];
        locks_step_params ps[2];
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1)
                for (int32_t b = 0; b < B; b++) TRY(locks_cache_append(c, b, 8));
            for (int sel = 0; sel < 2; sel++) {
                locks_step_params p = locks_step_default_params();
                p.selector = sel ? LOCKS_SEL_LOCKS : LOCKS_SEL_FULL;
                p.budget = sel ? o->budget : N + 16;
                ps[sel] = p;
                TRY(lg_set_step(e, &p, pages_per_seq * 16));
                if (pass == 1) {
                    TRY(lg_time_decode(e, LG_PART_ALL, o->trials, &t_fill[sel]));
                    TRY(lg_time_decode(e, LG_PART_PREP, o->trials, &t_fill_prep[sel]));
                    TRY(lg_time_decode(e, LG_PART_ATTN, o->trials, &t_fill_attn[sel]));
                    if (sel && o->profile) TRY(lg_profile_decode(e, LG_PART_ALL));
                    continue;
                }
                TRY(lg_time_decode(e, LG_PART_ALL, o->trials, &t_all[sel]));
                TRY(lg_time_decode(e, LG_PART_GEMM, o->trials, &t_gemm[sel]));
                TRY(lg_time_decode(e, LG_PART_ATTN, o->trials, &t_attn[sel]));
                TRY(lg_time_decode(e, LG_PART_PREP, o->trials, &t_prep[sel]));
                TRY(lg_time_decode(e, LG_PART_STEP, o->trials, &t_step[sel]));
                if (sel && o->profile) TRY(lg_profile_decode(e, LG_PART_ALL));
            }
        }
        for (int32_t b = 0; b < B; b++) TRY(locks_cache_seq_truncate(c, b, N - 8)); /* for the next engine */
        for (int sel = 0; sel < 2; sel++) {
            const locks_step_params p = ps[sel];
            const double all_ms = t_all[sel], gemm_ms = t_gemm[sel], attn_ms = t_attn[sel];
            const double avg_ms = (15.0 * all_ms + t_fill[sel]) / 16.0; /* one page of tokens */
            const double att = attended(N, p.budget, sel);
            const double per_tok_head = (double)s->head_dim * 2 * 2;
            double kvb = (double)B * s->n_layers * s->n_kv_heads * att * per_tok_head;
            if (sel) kvb += (double)B * s->n_layers * s->n_kv_heads * (N / 16) * (double)locks_summary_bytes(s->head_dim, 8, LOCKS_SUMMARY_Q);
            const double bytes = wb + kvb, limit_ms = bytes / (HBM_TBS * 1e12) * 1e3;
            printf("%-9s batch %d ctx %7d %-5s%s%s  %7.3f ms/token (%6.1f tok/s)  weights %6.3f  attention %6.3f  rest %6.3f ms"
                   "  | %6.2f GB/token  %.2f TB/s  byte limit %6.3f ms at %.2f TB/s (%.0f%%)\n",
                   o->name, B, N, sel ? "locks" : "dense", gtag, shared ? " shared" : "", avg_ms, B * 1e3 / avg_ms,
                   gemm_ms, attn_ms, all_ms - gemm_ms - attn_ms, bytes / 1e9, bytes / (avg_ms * 1e-3) / 1e12, limit_ms, HBM_TBS,
                   100.0 * limit_ms / avg_ms);
            printf("  mean of one page of tokens: 15 mid-page tokens %.3f ms (split above) + the page-fill token %.3f ms "
                   "(its prep %.4f ms/layer, its attention %.4f ms/layer)\n",
                   all_ms, t_fill[sel], t_fill_prep[sel] / s->n_layers, t_fill_attn[sel] / s->n_layers);
            printf("  attention phases at a mid-page token (graphs of each alone), per layer: prep %.4f ms (RoPE, K/V "
                   "write, summary launch, qprep)  step %.4f ms  (sum %.4f of %.4f together)\n",
                   t_prep[sel] / s->n_layers, t_step[sel] / s->n_layers, (t_prep[sel] + t_step[sel]) / s->n_layers,
                   attn_ms / s->n_layers);
            if (csv)
                fprintf(csv, "decode,%s,%d,%d,%s%s%s,%d,%.6f,%.6f,%.6f,%.6f,%.0f,%.6f,%.6f,%.6f\n", o->name, B, N,
                        sel ? "locks" : "dense", ctag, shared ? "-shared" : "", p.budget, avg_ms, gemm_ms, attn_ms,
                        all_ms - gemm_ms - attn_ms, bytes, limit_ms, all_ms, t_fill[sel]);
            fflush(stdout);
        }
        if (o->spec && B == 1 && !rc) rc = bench_speculate(o, e, c, N, csv);
        lg_ctx_free(e);
        e = NULL;
    }
    printf("  (KV fill + summaries of %d pages x %d layers: %.1f s)\n", cp.n_pages, s->n_layers, fill_ms / 1e3);
done:
    lg_ctx_free(e);
    locks_cuda_free_ptr((void **)&d_pages);
    free(all);
    locks_cache_free(c);
    return rc;
}

static int bench_ttft(const mopts *o, lg_model *m, int32_t T, FILE *csv) {
    int rc = 0;
    const lg_shape *s = &o->s;
    const int32_t chunk = 2048;
    locks_cache *c = NULL;
    lg_ctx *e = NULL;
    int32_t *toks = NULL;
    locks_cache_params cp = locks_cache_default_params();
    cp.backend = LOCKS_BACKEND_CUDA;
    cp.kv_dtype = o->kv;
    cp.n_layers = lg_n_global(s); /* the global layers (a sliding-window model's local ones: the engine's rings) */
    cp.n_kv_heads = s->n_kv_heads;
    cp.head_dim = s->head_dim;
    cp.max_seqs = 1;
    cp.n_pages = T / 16 + 1;
    locks_status st;
    c = locks_cache_init(cp, &st);
    if (!c) {
        fprintf(stderr, "locks bench: ttft cache: %s\n", tool_why(st));
        return 1;
    }
    int32_t id;
    TRY(locks_cache_seq_add(c, &id));
    TRY(locks_cache_append(c, id, T));
    e = lg_ctx_init(m, c, 1, chunk, 0, &st);
    if (!e) {
        rc = 1;
        goto done;
    }
    toks = malloc(sizeof(int32_t) * (size_t)T);
    if (!toks) goto done;
    uint64_t x = 0x1234567;
    for (int32_t i = 0; i < T; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)s->n_vocab);
    }
    const double t0 = locks_now_ms();
    for (int32_t p = 0; p < T; p += chunk) {
        const int32_t n = T - p < chunk ? T - p : chunk;
        TRY(lg_prefill(e, 0, toks + p, n, p, NULL));
    }
    const double ms = locks_now_ms() - t0;
    printf("%-9s TTFT %7d tokens: %.2f s (%.0f tok/s), chunks of %d\n", o->name, T, ms / 1e3, T / (ms / 1e3), chunk);
    if (csv) fprintf(csv, "ttft,%s,1,%d,prefill,0,%.3f,0,0,0,0,0,0,0\n", o->name, T, ms);
    fflush(stdout);
done:
    free(toks);
    lg_ctx_free(e);
    locks_cache_free(c);
    return rc;
}

/* Matrix k of the view in lg_shape.qtypes' order: 0 the output matrix, 1 + 7 l + i layer
 * l's Wq, Wk, Wv, Wo, Wgate, Wup, Wdown. */
static const matmul_weight *view_matrix(const engine_cuda_model *v, int32_t k) {
    if (k == 0) return v->output;
    const engine_cuda_layer *L = &v->layers[(k - 1) / 7];
    const matmul_weight *const ws[7] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
    return ws[(k - 1) % 7];
}

/* Weight bytes a token reads, --gguf: each matrix of the view once, its file bytes (rows x
 * row bytes) where the device keeps it quantized (the uploaded shape's qtypes), else 2
 * bytes a value (the engine's 16-bit copy); the output matrix included (also when tied),
 * the embedding table not (one row). *n_quant: how many are kept quantized. */
static double gguf_weight_bytes(const engine_cuda_model *v, const lg_shape *s, int32_t *n_quant) {
    double b = 0;
    *n_quant = 0;
    for (int32_t k = 0; k < LG_QTYPES(v->info.n_layers); k++) {
        const matmul_weight *w = view_matrix(v, k);
        const int q = s->qtypes && lg_qtype_supported(s->qtypes[k]);
        *n_quant += q;
        b += q ? (double)w->rows * (double)w->row_bytes : 2.0 * w->rows * w->cols;
    }
    return b;
}

/* The file's matrices by type, "Q4_K 193, Q6_K 33" (the output matrix included). */
static void gguf_type_counts(const engine_cuda_model *v, char *buf, size_t size) {
    int32_t count[64] = {0};
    for (int32_t k = 0; k < LG_QTYPES(v->info.n_layers); k++) {
        const int t = (int)view_matrix(v, k)->type;
        if (t >= 0 && t < 64) count[t]++;
    }
    size_t n = 0;
    buf[0] = 0;
    for (int t = 0; t < 64 && n < size; t++)
        if (count[t])
            n += (size_t)snprintf(buf + n, size - n, "%s%s %d", n ? ", " : "", ggml_type_name((ggml_type)t), count[t]);
}

/* --gguf: the file on the host (locks_model_load), its view (llama_gpu_view) uploaded by
 * the GPU engine (engine_cuda_upload, which refuses what engine_cuda_check refuses), the
 * host model freed; o's name, shape and weight bytes set. NULL after a message. */
static lg_model *load_gguf(mopts *o) {
    const char *base = strrchr(o->gguf, '/');
    base = base ? base + 1 : o->gguf;
    size_t len = strlen(base);
    if (len > 5 && !strcmp(base + len - 5, ".gguf")) len -= 5;
    snprintf(o->name, sizeof o->name, "%.*s", (int)len, base);
    const double t0 = locks_now_ms();
    locks_status st;
    locks_model *hm = locks_model_load(o->gguf, &st);
    if (!hm) {
        fprintf(stderr, "locks bench: cannot load %s: %s\n", o->gguf, tool_why(st));
        return NULL;
    }
    const locks_model_info in = locks_model_get_info(hm);
    engine_cuda_layer *layers = calloc((size_t)in.n_layers, sizeof *layers);
    lg_model *m = NULL;
    if (!layers) {
        fprintf(stderr, "locks bench: out of host memory\n");
        locks_model_free(hm);
        return NULL;
    }
    const engine_cuda_model v = llama_gpu_view(hm, layers);
    const double t1 = locks_now_ms();
    m = engine_cuda_upload(&v, &st);
    if (!m) {
        fprintf(stderr, "locks bench: %s (%s) on the GPU: %s\n", o->gguf, in.arch, tool_why(st));
    } else {
        o->s = lg_model_shape(m);
        int32_t n_quant = 0;
        char types[256];
        o->wbytes = gguf_weight_bytes(&v, &o->s, &n_quant);
        gguf_type_counts(&v, types, sizeof types);
        printf("%s: %s (%s), matrices %s; %d of %d kept quantized on the device, the rest and the embedding %s; "
               "loaded in %.1f s, uploaded in %.1f s\n",
               o->name, o->gguf, in.arch, types, n_quant, LG_QTYPES(in.n_layers),
               o->s.wtype == LOCKS_DTYPE_BF16 ? "bf16" : "fp16", (t1 - t0) / 1e3, (locks_now_ms() - t1) / 1e3);
    }
    free(layers);
    locks_model_free(hm); /* the device copy does not need it */
    return m;
}

int cmd_bench_model_cuda(int argc, char **argv) {
    mopts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : 2;
    locks_status st;
    size_t fr = 0, tot = 0;
    if (lg_device_memory(0, &fr, &tot) != LOCKS_OK) {
        fprintf(stderr, "locks bench: no CUDA device\n");
        return 1;
    }
    lg_model *m = NULL;
    if (o.gguf) {
        if (!(m = load_gguf(&o))) return 1;
        o.kv = LOCKS_DTYPE_F16;
        const lg_shape *s = &o.s;
        printf("%s: %d layers, dim %d, FFN %d, %d/%d heads of %d, vocab %d; weights %.2f GiB on the device, "
               "%.2f GB read a token; device %.1f GiB free of %.1f before the upload\n",
               o.name, s->n_layers, s->dim, s->ffn_dim, s->n_heads, s->n_kv_heads, s->head_dim, s->n_vocab,
               gib((double)lg_model_bytes(s)), o.wbytes / 1e9, gib((double)fr), gib((double)tot));
    } else {
        snprintf(o.name, sizeof o.name, "%s", o.m->name);
        o.s = o.m->s;
        o.wbytes = weight_bytes(&o.s);
        o.kv = LOCKS_DTYPE_BF16;
        printf("%s: %d layers, dim %d, FFN %d, %d/%d heads of %d, vocab %d; bf16 weights %.2f GiB (random, on the "
               "device); device %.1f GiB free of %.1f\n",
               o.name, o.s.n_layers, o.s.dim, o.s.ffn_dim, o.s.n_heads, o.s.n_kv_heads, o.s.head_dim, o.s.n_vocab,
               gib((double)lg_model_bytes(&o.s)), gib((double)fr), gib((double)tot));
        m = lg_model_alloc(&o.s, &st);
        if (!m) {
            fprintf(stderr, "locks bench: weights: %s\n", tool_why(st));
            return 1;
        }
        if (lg_model_fill_random(m, 0xbeef) != LOCKS_OK) {
            fprintf(stderr, "locks bench: random weights failed\n");
            lg_model_free(m);
            return 1;
        }
    }
    FILE *csv = NULL;
    if (o.csv) {
        if (!(csv = fopen(o.csv, "w"))) {
            fprintf(stderr, "locks bench: cannot write %s\n", o.csv);
            lg_model_free(m);
            return 1;
        }
        fprintf(csv, "kind,model,batch,context,selector,budget,ms,weights_ms,attn_ms,rest_ms,bytes,limit_ms,"
                     "mid_page_ms,fill_ms\n");
    }
    rc = 0;
    for (int bi = 0; bi < o.n_batch && !rc; bi++)
        for (int ci = 0; ci < o.n_ctx && !rc; ci++) rc = bench_decode(&o, m, o.batch[bi], o.ctx[ci], csv);
    for (int ti = 0; ti < o.n_ttft && !rc; ti++) rc = bench_ttft(&o, m, o.ttft[ti], csv);
    if (csv) fclose(csv);
    lg_model_free(m);
    return rc;
}
#endif
