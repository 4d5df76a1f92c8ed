/*
 * test_gpu_model.c — SmolLM2-135M on the GPU against the CPU engine, teacher-forced: the
 * same 2304 tokens of this repository's docs go through both, a 1024-token prefill then
 * 1280 decode steps, with full attention and with LOCKS at budget 256, five contexts in
 * lockstep. The GPU keeps SmolLM2's Q4_1 matrices quantized and its decode products
 * quantize their inputs to int8 (qgemv.cu), as the CPU engine does by default, so the GPU
 * is compared with that CPU arithmetic; a fifth context, the CPU with fp32 activations,
 * is the reference both are measured against (the GPU must be as close to it as the
 * CPU's own int8 path). Per position: top-1 agreement and
 * |logit difference| GPU vs CPU, and each backend's LOCKS against its own full attention
 * (top-1 agreement, KL), against the tolerances below. Then the GPU decode through its CUDA graph against the
 * same kernels launched one by one: bit-identical logits. Needs a GPU and the model
 * (LOCKS_MODEL or scripts/fetch-model.sh).
 */
#include "test_util.h"
#include "test_model_util.h"

#include <unistd.h>

#include "locks_model.h"

#define N_PROMPT 1024
#define N_TOTAL 2304

/* Tolerances (logits of SmolLM2 span about +-30). The reference is the CPU with fp32
 * activations. Against it the GPU's top-1 agreement is at most REF_TOP1_GAP below the CPU
 * int8 path's and its mean KL(reference || GPU) at most REF_KL_RATIO x the CPU's +
 * REF_KL_ABS: the GPU is as close to fp32 as the CPU's own default arithmetic. Its own
 * bounds, REF_TOP1 and REF_MAXD, catch a gross error (a wrong block or scale moves logits
 * by tens). GPU vs CPU int8 directly: both quantize each product's input to int8, but the
 * GPU rounds the input to fp16 first and its prefill products run in fp16 (the matrix
 * dequantized, cuBLAS), so the two int8 paths round apart and differ from each other as
 * much as each differs from fp32 (H100 run of 2026-12-07 23:50 UTC: vs fp32, CPU int8 top-1
 * 0.9680, max |dlogit| 1.45, mean KL 0.00279; GPU 0.9742, 1.39, 0.00233; GPU vs CPU int8
 * 0.9672, 1.50): FULL_TOP1 and FULL_MAXD bound that loosely. */
#define REF_TOP1 0.95
#define REF_MAXD 2.5
#define REF_TOP1_GAP 0.01
#define REF_KL_RATIO 1.5
#define REF_KL_ABS 0.002
#define FULL_TOP1 0.95
#define FULL_MAXD 2.5
/* LOCKS. Where two pages' estimated masses are near-equal the GPU (int8 query parts, fp16
 * keys) and the CPU (fp32) may select different pages; such a position's logits move by a
 * few units (max |dlogit| 2.55, 1.77 and 3.60 in three device runs of 2026-12-01), so the
 * maximum over all positions measures how close the nearest tie came, not a bug. Nor do
 * the two backends' LOCKS runs stay close elsewhere: a different page at one position
 * changes that position's hidden states and so the K/V every later position reads, and the
 * runs drift apart (device run of 2026-12-01 17:14 UTC: median of the per-position max
 * |dlogit| 0.31, mean 0.36, 99th percentile 1.10, max 3.62, against full attention's mean
 * 0.03; a median check at 0.10, set before that run on the premise that the runs stay
 * close, failed there and is gone). What a bug in the GPU's sparse path would move, and
 * what is checked:
 *  - top-1 agreement GPU vs CPU, both LOCKS, >= 0.93 (that run, both in fp16 then: 0.984;
 *    with int8 inputs on both, H100 run of 2026-12-07: 0.9493, as the full attention's
 *    two int8 paths above round apart);
 *  - fidelity against each backend's own full attention (the same teacher-forced
 *    positions): the GPU's LOCKS top-1 agreement with the GPU's full attention within 0.02
 *    of the CPU's LOCKS with the CPU's full attention, and its mean KL(full || LOCKS) at
 *    most 1.5x the CPU's + 0.002 nats: the GPU selects as well as the CPU does (that run:
 *    top-1 0.8923 vs 0.8915, KL 0.03796 vs 0.03777). A wrong page, a wrong V row or a
 *    broken merge makes LOCKS worse than the CPU's at every position. The ops themselves,
 *    on the same inputs and the same selection, are compared in test_gpu_ops and
 *    test_gpu_model_ops.
 * The median, the 99th percentile and the maximum are printed. */
#define LOCKS_TOP1 0.93
#define FID_TOP1_GAP 0.02
#define FID_KL_RATIO 1.5
#define FID_KL_ABS 0.002

static int32_t *doc_tokens(const locks_model *m, int32_t want, int32_t *n) {
    const char *files[] = {"README.md", "docs/ENGINE.md", "docs/CONTEXT_PARALLEL.md"};
    size_t cap = 1 << 20, len = 0;
    char *text = malloc(cap);
    SETUP(text);
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        FILE *fp = fopen(files[f], "rb");
        if (!fp) continue;
        len += fread(text + len, 1, cap - len - 1, fp);
        fclose(fp);
    }
    text[len] = '\0';
    const locks_tokenizer *tok = locks_model_tokenizer(m);
    int32_t *ids = malloc(sizeof(int32_t) * (len + 1));
    SETUP(ids);
    CHECK(locks_tokenizer_encode(tok, text, len, false, ids, (int32_t)len + 1, n));
    free(text);
    SETUP(*n >= want);
    *n = want;
    return ids;
}

/* The five contexts of tu_lockstep_run (test_model_util.h) over the same teacher-forced
 * tokens, then the tolerances above. */
static void run_all(const locks_model *m, const int32_t *toks, int32_t n_total) {
    /* LOCKS_TEST_GPU_AS_CPU=1 runs the "GPU" contexts on the CPU backend too: a check of
     * this test's own bookkeeping on a machine without a GPU (everything must agree) */
    const char *as_cpu = getenv("LOCKS_TEST_GPU_AS_CPU");
    const int gpu_as_cpu = as_cpu && *as_cpu == '1';
    tu_lockstep r;
    tu_lockstep_run(m, toks, N_PROMPT, n_total, N_TOTAL + 16, gpu_as_cpu, &r);
    const int32_t n_pos = r.n_pos, threads = r.threads;
    const tu_logit_stats full = r.full, lk = r.lk, fid_cpu = r.fid_cpu, fid_gpu = r.fid_gpu, ref_cpu = r.ref_cpu,
                         ref_gpu = r.ref_gpu;
    const double kl_cpu = r.kl_cpu, kl_gpu = r.kl_gpu, klr_cpu = r.klr_cpu, klr_gpu = r.klr_gpu, prefill_d = r.prefill_d;
    const double top1_full = (double)full.agree / n_pos, top1_lk = (double)lk.agree / n_pos;
    const double fa_cpu = (double)fid_cpu.agree / n_pos, fa_gpu = (double)fid_gpu.agree / n_pos;
    const double ra_cpu = (double)ref_cpu.agree / n_pos, ra_gpu = (double)ref_gpu.agree / n_pos;
    const double med = tu_quantile(lk.per_pos, n_pos, 0.5), p99 = tu_quantile(lk.per_pos, n_pos, 0.99);
    printf("  full, GPU vs CPU: %d positions (prefill %d + decode %d): top-1 agreement %.4f (tol >= %.2f), max "
           "|dlogit| %.4f (tol <= %.2f; prefill's last %.4f), mean of per-position max %.4f\n",
           n_pos, N_PROMPT, n_total - N_PROMPT, top1_full, FULL_TOP1, full.maxd, FULL_MAXD, prefill_d,
           full.sumd / n_pos);
    printf("  full vs the CPU's fp32 activations: CPU int8 top-1 %.4f, max |dlogit| %.4f, mean KL %.5f; GPU top-1 "
           "%.4f, max |dlogit| %.4f, mean KL %.5f (tol: top-1 within %.2f below the CPU's, KL <= %.1fx + %.3f)\n",
           ra_cpu, ref_cpu.maxd, klr_cpu, ra_gpu, ref_gpu.maxd, klr_gpu, REF_TOP1_GAP, REF_KL_RATIO, REF_KL_ABS);
    printf("  locks @ 256, GPU vs CPU: top-1 agreement %.4f (tol >= %.2f); per-position max |dlogit|: median %.4f, "
           "mean %.4f, 99th percentile %.4f, max %.4f (not checked: the runs drift apart, see the tolerances)\n",
           top1_lk, LOCKS_TOP1, med, lk.sumd / n_pos, p99, lk.maxd);
    printf("  locks @ 256 vs full on the same backend: CPU top-1 %.4f, mean KL %.5f nats; GPU top-1 %.4f, mean KL "
           "%.5f (tol: top-1 within %.2f, KL <= %.1fx + %.3f)\n",
           fa_cpu, kl_cpu, fa_gpu, kl_gpu, FID_TOP1_GAP, FID_KL_RATIO, FID_KL_ABS);
    locks_run_stats gs = locks_ctx_stats(r.c[TU_GPU_LOCKS]), cs = locks_ctx_stats(r.c[TU_CPU_LOCKS]);
    locks_run_stats gf = locks_ctx_stats(r.c[TU_GPU_FULL]), cf = locks_ctx_stats(r.c[TU_CPU_FULL]);
    printf("  decode ms/token: GPU full %.3f, locks %.3f; CPU (%d threads) full %.3f, locks %.3f\n",
           gf.decode_ms / gf.n_decode, gs.decode_ms / gs.n_decode, threads, cf.decode_ms / cf.n_decode,
           cs.decode_ms / cs.n_decode);
    test_cond(top1_full >= FULL_TOP1, "full: top-1 agreement %.4f < %.2f", top1_full, FULL_TOP1);
    test_cond(full.maxd <= FULL_MAXD, "full: max |dlogit| %.4f > %.2f", full.maxd, FULL_MAXD);
    test_cond(ra_gpu >= REF_TOP1, "full vs fp32: GPU top-1 %.4f < %.2f", ra_gpu, REF_TOP1);
    test_cond(ref_gpu.maxd <= REF_MAXD, "full vs fp32: GPU max |dlogit| %.4f > %.2f", ref_gpu.maxd, REF_MAXD);
    test_cond(ra_gpu >= ra_cpu - REF_TOP1_GAP, "full vs fp32: GPU top-1 %.4f more than %.2f below the CPU's %.4f",
              ra_gpu, REF_TOP1_GAP, ra_cpu);
    test_cond(klr_gpu <= REF_KL_RATIO * klr_cpu + REF_KL_ABS, "full vs fp32: GPU mean KL %.5f > %.1f x CPU %.5f + %.3f",
              klr_gpu, REF_KL_RATIO, klr_cpu, REF_KL_ABS);
    test_cond(top1_lk >= LOCKS_TOP1, "locks: top-1 agreement %.4f < %.2f", top1_lk, LOCKS_TOP1);
    test_cond(fabs(fa_gpu - fa_cpu) <= FID_TOP1_GAP, "locks vs full: GPU top-1 %.4f vs CPU %.4f (gap > %.2f)", fa_gpu,
              fa_cpu, FID_TOP1_GAP);
    test_cond(kl_gpu <= FID_KL_RATIO * kl_cpu + FID_KL_ABS, "locks vs full: GPU mean KL %.5f > %.1f x CPU %.5f + %.3f",
              kl_gpu, FID_KL_RATIO, kl_cpu, FID_KL_ABS);
    /* the fidelity checks mean something only if LOCKS at 256 differs from full here */
    test_cond(fid_cpu.maxd > 0.01, "locks @ 256 equals full attention on this text (max |dlogit| %.4f)",
              fid_cpu.maxd);
    tu_lockstep_free(&r);
}


int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_seed("test_gpu_model");
    char path[4096];
    locks_model *m = tu_load_model("test_gpu_model", path, sizeof path);
    int32_t n;
    int32_t *toks = doc_tokens(m, N_TOTAL, &n);
    /* LOCKS_TEST_GPU_MODEL_DECODE=N: N decode steps instead of 1280 (a quicker look) */
    const char *nd = getenv("LOCKS_TEST_GPU_MODEL_DECODE");
    int32_t n_total = N_TOTAL;
    if (nd && atoi(nd) > 0 && atoi(nd) < N_TOTAL - N_PROMPT) n_total = N_PROMPT + atoi(nd);
    run_all(m, toks, n_total);
    const char *as_cpu = getenv("LOCKS_TEST_GPU_AS_CPU");
    if (!(as_cpu && *as_cpu == '1')) tu_graph_vs_eager(m, toks);
    free(toks);
    locks_model_free(m);
    return test_report("test_gpu_model");
}
