/*
 * cmd_bench_cuda.c — `locks bench --backend cuda`: per-step device time of one layer's
 * decode on the GPU: this library's dense flash-decoding, the LOCKS step (one CUDA
 * graph: score -> group mass -> top-k -> sparse attention) with its phase breakdown,
 * bytes read per step and achieved bandwidth; plus the summary build rate of a
 * prefill. torch's cuDNN SDPA on the same shapes is timed by bench/sdpa_baseline.py
 * and joined by bench/gpu_table.py (scripts/gpu-check.sh runs all three).
 *
 * Method: one cache per shape, sized for the largest (batch x context); its pool is
 * filled with random bf16 K/V once and every page summarised once (page content does
 * not depend on which sequence holds it), then each (context, batch) configuration
 * only creates its sequences (contiguous physical pages). Every timed launch starts
 * with the L2 cache flushed (a real model runs the other layers in between); times are
 * medians over --trials launches timed with CUDA events. Random keys make the masses
 * near-uniform: the worst case for the radix top-k (it cannot stop early).
 *
 * Bytes per step, per (sequence, KV head):
 *   dense: K + V of every token             = ctx * d * 2 * 2
 *   LOCKS: summaries of the full pages      = n_full * 802 (d=128, r=8; as stored:
 *                                             locks_cuda_summary_stored_bytes_of)
 *          + score/mass/top-k traffic       = n_full * (4 + 8 G + 4 + 12)  (block table,
 *            per-head scores written and read, mass written, mass read by <= 3 passes)
 *          + K + V of the attended tokens   = <= budget * d * 2 * 2
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "locks.h"

#ifndef LOCKS_HAVE_CUDA
int cmd_bench_cuda(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--model") || !strcmp(argv[i], "--gguf")) return cmd_bench_model_cuda(argc, argv);
    fprintf(stderr, "locks bench --backend cuda: this build has no CUDA backend\n");
    return 2;
}
#else
#include "args.h"
#include "cache.h"
#include "cuda/locks_cuda.h"
#include "util.h"

#define MAXL 16

typedef struct {
    const char *name;
    int32_t hq, hkv, d;
} gshape;

static const gshape gshapes[] = {{"llama3-8b", 32, 8, 128}, {"glm4-9b", 32, 2, 128}, {"smollm2", 9, 3, 64}};

typedef struct {
    const gshape *shape[MAXL];
    int n_shapes;
    int32_t ctx[MAXL], batch[MAXL];
    int n_ctx, n_batch;
    int32_t budget, trials, prefill, rank;
    locks_summary_prec prec;
    const char *csv;
} gopts;

static void usage(FILE *f) {
    fprintf(f, "usage: locks bench --backend cuda [--shape llama3-8b,glm4-9b] [--context 32k,128k,...]\n"
               "                   [--batch 1,8] [--budget 2048] [--trials 15] [--prefill 128k] [--csv FILE]\n"
               "                   [--rank 8] [--summary q|f32]\n"
               "       locks bench --backend cuda --model llama3-8b|glm4-9b | --gguf FILE ...  (the whole model; --help)\n");
}

static int parse(int argc, char **argv, gopts *o) {
    memset(o, 0, sizeof *o);
    o->shape[0] = &gshapes[0];
    o->shape[1] = &gshapes[1];
    o->n_shapes = 2;
    args_gpu_sweep(o->ctx, &o->n_ctx, o->batch, &o->n_batch);
    o->budget = 2048;
    o->trials = 15;
    o->prefill = 131072;
    o->rank = 8;
    o->prec = LOCKS_SUMMARY_Q;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--backend")) {
            i++;
        } else if (!strcmp(a, "--shape") && v) {
            o->n_shapes = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok && o->n_shapes < MAXL; tok = strtok(NULL, ",")) {
                size_t k = 0;
                for (; k < sizeof gshapes / sizeof gshapes[0]; k++)
                    if (!strcmp(tok, gshapes[k].name)) break;
                if (k == sizeof gshapes / sizeof gshapes[0]) {
                    fprintf(stderr, "unknown shape %s\n", tok);
                    return 2;
                }
                o->shape[o->n_shapes++] = &gshapes[k];
            }
            i++;
        } else if (!strcmp(a, "--context") && v) {
            if ((o->n_ctx = args_parse_ints(v, o->ctx, MAXL, 1, INT32_MAX)) < 1) return 2;
            i++;
        } else if (!strcmp(a, "--batch") && v) {
            if ((o->n_batch = args_parse_ints(v, o->batch, MAXL, 1, INT32_MAX)) < 1) return 2;
            i++;
        } else if (!strcmp(a, "--budget") && v) {
            o->budget = atoi(v);
            i++;
        } else if (!strcmp(a, "--trials") && v) {
            o->trials = atoi(v);
            i++;
        } else if (!strcmp(a, "--prefill") && v) {
            if (!args_parse_int(v, 1, INT32_MAX, &o->prefill)) return 2;
            i++;
        } else if (!strcmp(a, "--rank") && v) {
            if (!args_parse_int(v, 1, LOCKS_MAX_RANK, &o->rank)) return 2;
            i++;
        } else if (!strcmp(a, "--summary") && v) {
            if (!strcmp(v, "q")) o->prec = LOCKS_SUMMARY_Q;
            else if (!strcmp(v, "f32")) o->prec = LOCKS_SUMMARY_F32;
            else {
                fprintf(stderr, "locks bench: --summary takes q or f32\n");
                return 2;
            }
            i++;
        } else {
            const int r = args_bench_tail(a, v, &i, &o->csv, usage);
            if (r) return r;
        }
    }
    if (o->budget <= 0 || o->trials < 3 || o->trials > 64) return 2;
    return 0;
}

typedef struct {
    locks_cache *c;
    int32_t *seqs;
    int32_t n;
    float *d_q, *d_out;
    int32_t hq;
    locks_cuda_graph *g;
    int32_t *d_pages;
    int32_t n_pages;
} targ;

static locks_status run_dense(void *a) {
    targ *t = a;
    return locks_cuda_attend_dense(t->c->cuda, 0, t->seqs, t->n, t->d_q, t->hq, 0.f, t->d_out);
}
static locks_status run_graph(void *a) {
    targ *t = a;
    return locks_cuda_graph_replay(t->g, 0);
}
static locks_status run_build(void *a) {
    targ *t = a;
    return locks_cuda_summary_build(t->c->cuda, 0, t->d_pages, t->n_pages);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int bench_shape(const gopts *o, const gshape *sh, FILE *csv) {
    int rc = 0;
    int32_t max_tok = 0, max_b = 0;
    for (int i = 0; i < o->n_ctx; i++) max_tok = o->ctx[i] > max_tok ? o->ctx[i] : max_tok;
    for (int i = 0; i < o->n_batch; i++) max_b = o->batch[i] > max_b ? o->batch[i] : max_b;
    const int32_t G = sh->hq / sh->hkv, d = sh->d;
    locks_cache_params cp = locks_cache_default_params();
    cp.backend = LOCKS_BACKEND_CUDA;
    cp.kv_dtype = LOCKS_DTYPE_BF16;
    cp.n_kv_heads = sh->hkv;
    cp.head_dim = d;
    cp.rank = o->rank;
    cp.summary_prec = o->prec;
    cp.max_seqs = max_b;
    cp.n_pages = (int32_t)((int64_t)max_b * (max_tok / LOCKS_PAGE) + max_b);
    locks_status err;
    locks_cache *c = locks_cache_init(cp, &err);
    targ t;
    memset(&t, 0, sizeof t);
    int32_t *all = NULL;
    float *hq_buf = NULL;
    if (!c) {
        fprintf(stderr, "locks bench: cache init (%d pages): %s\n", cp.n_pages, tool_why(err));
        return 1;
    }
    t.c = c;
    t.hq = sh->hq;
    TRY(locks_cuda_fill_random(c->cuda, 0, 0x10c5, 2.0f));
    /* summarise the whole pool; time a prefill-sized build first */
    all = malloc(sizeof(int32_t) * (size_t)cp.n_pages);
    for (int32_t i = 0; i < cp.n_pages; i++) all[i] = i;
    t.d_pages = locks_cuda_malloc(sizeof(int32_t) * (size_t)cp.n_pages);
    if (!t.d_pages) TRY(LOCKS_ERR_OOM);
    TRY(locks_cuda_memcpy_h2d(t.d_pages, all, sizeof(int32_t) * (size_t)cp.n_pages));
    t.n_pages = o->prefill / LOCKS_PAGE < cp.n_pages ? o->prefill / LOCKS_PAGE : cp.n_pages;
    double build_ms;
    TRY(locks_cuda_time_cold(c->cuda, run_build, &t, 5, &build_ms));
    printf("%s: summary build, %d-token prefill (%d pages x %d KV heads): %.3f ms, %.1f M page-heads/s\n",
           sh->name, t.n_pages * LOCKS_PAGE, t.n_pages, sh->hkv, build_ms, t.n_pages * (double)sh->hkv / build_ms / 1e3);
    if (csv)
        fprintf(csv, "build,%s,%d,%d,0,%.6f,0,0,0,0,0,0,0,0\n", sh->name, t.n_pages * LOCKS_PAGE, sh->hkv, build_ms);
    t.n_pages = cp.n_pages;
    TRY(run_build(&t));
    TRY(locks_cuda_sync(c->cuda));

    hq_buf = malloc(sizeof(float) * (size_t)max_b * sh->hq * d);
    uint64_t st = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < (size_t)max_b * sh->hq * d; i++) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        hq_buf[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 1.7f;
    }
    t.d_q = locks_cuda_malloc(sizeof(float) * (size_t)max_b * sh->hq * d);
    t.d_out = locks_cuda_malloc(sizeof(float) * (size_t)max_b * sh->hq * d);
    if (!t.d_q || !t.d_out) TRY(LOCKS_ERR_OOM);
    TRY(locks_cuda_memcpy_h2d(t.d_q, hq_buf, sizeof(float) * (size_t)max_b * sh->hq * d));
    /* what the device stores and the score kernel reads: rank slots padded to 8 or 16 */
    const size_t sum_b = locks_cuda_summary_stored_bytes_of(d, o->rank, o->prec);
    if (o->rank != 8 || o->prec != LOCKS_SUMMARY_Q)
        printf("%s: summaries rank %d, %s\n", sh->name, o->rank, o->prec == LOCKS_SUMMARY_F32 ? "fp32" : "quantized");

    for (int bi = 0; bi < o->n_batch; bi++)
        for (int ci = 0; ci < o->n_ctx; ci++) {
            const int32_t B = o->batch[bi], ctx = o->ctx[ci];
            int32_t seqs[MAXL * 4];
            for (int32_t s = 0; s < B; s++) {
                TRY(locks_cache_seq_add(c, &seqs[s]));
                TRY(locks_cache_append(c, seqs[s], ctx));
            }
            t.seqs = seqs;
            t.n = B;
            locks_step_params p = locks_step_default_params();
            p.budget = o->budget;
            double dense_ms, locks_ms;
            TRY(locks_cuda_time_cold(c->cuda, run_dense, &t, o->trials, &dense_ms));
            t.g = locks_cuda_graph_capture(c->cuda, 0, seqs, B, t.d_q, sh->hq, &p, ctx, t.d_out, &err);
            TRY(err);
            TRY(locks_cuda_time_cold(c->cuda, run_graph, &t, o->trials, &locks_ms));
            locks_cuda_graph_free(&t.g);
            /* phase breakdown: the same kernels launched one phase at a time */
            double ph[3][64];
            locks_step_stats ss;
            for (int r = 0; r < o->trials; r++) {
                TRY(locks_cuda_flush_l2(c->cuda));
                TRY(locks_decode_step(c, 0, seqs, B, t.d_q, sh->hq, &p, t.d_out, NULL, &ss));
                ph[0][r] = ss.score_ms;
                ph[1][r] = ss.select_ms;
                ph[2][r] = ss.attend_ms;
            }
            for (int k = 0; k < 3; k++) qsort(ph[k], (size_t)o->trials, sizeof(double), cmp_d);
            const double score_ms = ph[0][o->trials / 2], topk_ms = ph[1][o->trials / 2],
                         att_ms = ph[2][o->trials / 2];
            const double n_full = (double)(ctx / LOCKS_PAGE) * B * sh->hkv;
            const double dense_bytes = (double)ctx * B * sh->hkv * d * 4.0;
            const double meta = n_full * (double)sum_b, aux = n_full * (20.0 + 8.0 * G);
            const double kv = (double)ss.bytes_kv;
            const double locks_bytes = meta + aux + kv;
            printf("%-9s ctx %7d batch %d | dense %8.3f ms %5.2f TB/s | LOCKS %7.3f ms (%5.1fx dense) "
                   "score %.3f topk %.3f attend %.3f ms | %7.1f MB/step, scan %.2f TB/s\n",
                   sh->name, ctx, B, dense_ms, dense_bytes / dense_ms / 1e9, locks_ms, dense_ms / locks_ms, score_ms,
                   topk_ms, att_ms, locks_bytes / 1e6, (meta + aux) / score_ms / 1e9);
            fflush(stdout);
            if (csv)
                fprintf(csv, "step,%s,%d,%d,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.0f,%.0f,%.0f,%.0f\n", sh->name, ctx, B,
                        o->budget, dense_ms, locks_ms, score_ms, topk_ms, att_ms, dense_bytes, meta, aux, kv);
            for (int32_t s = 0; s < B; s++) TRY(locks_cache_seq_remove(c, seqs[s]));
        }
done:
    locks_cuda_graph_free(&t.g);
    locks_cuda_free_ptr((void **)&t.d_pages);
    locks_cuda_free_ptr((void **)&t.d_q);
    locks_cuda_free_ptr((void **)&t.d_out);
    free(all);
    free(hq_buf);
    locks_cache_free(c);
    return rc;
}

int cmd_bench_cuda(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--model") || !strcmp(argv[i], "--gguf")) return cmd_bench_model_cuda(argc, argv);
    gopts o;
    int rc = parse(argc, argv, &o);
    if (rc == 1) return 0;
    if (rc) return rc;
    FILE *csv = NULL;
    if (o.csv) {
        csv = fopen(o.csv, "w");
        if (!csv) {
            fprintf(stderr, "locks bench: cannot write %s\n", o.csv);
            return 1;
        }
        fprintf(csv, "kind,shape,ctx,batch,budget,dense_ms,locks_ms,score_ms,topk_ms,attend_ms,dense_bytes,"
                     "meta_bytes,aux_bytes,kv_bytes\n");
    }
    for (int i = 0; i < o.n_shapes && rc == 0; i++) rc = bench_shape(&o, o.shape[i], csv);
    if (csv) fclose(csv);
    return rc;
}
#endif
