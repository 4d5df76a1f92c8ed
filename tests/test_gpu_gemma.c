/*
 * test_gpu_gemma.c — Gemma 3 270M on the GPU against the CPU engine, teacher-forced as
 * test_gpu_model.c does for SmolLM2: the same 2304 tokens of this repository's docs go
 * through both, a 1024-token prefill then 1280 decode steps, with full attention and
 * with LOCKS at budget 256 (the selector acts in the 3 global layers; the 15 local layers
 * read their 512-token window, from device rings on the GPU), and a fifth context, the
 * CPU with fp32 activations, as the reference both are measured against.
 *
 * Gemma 3 on the GPU runs with BF16 as the 16-bit type (engine_cuda.c: its activations
 * outgrow fp16), its Q4_K / Q5_K / Q6_K / Q8_0 matrices quantized (qgemv.cu: the decode
 * products quantize their inputs to int8 as the CPU does), the prefill products on the
 * matrices dequantized to bf16. Printed: top-1 agreement, max |dlogit| and mean
 * KL(CPU || GPU) of full attention GPU vs CPU; both against the fp32 reference; LOCKS GPU
 * vs CPU; each backend's LOCKS against its own full attention. Checked: the GPU as close to
 * the fp32 reference as the CPU's int8 path (top-1 within 0.01, KL <= 1.5x + 0.002), LOCKS
 * against full on the GPU as on the CPU (top-1 within 0.02, KL <= 1.5x + 0.002), full
 * attention's top-1 agreement GPU vs CPU >= FULL_TOP1; then the decode graph against the
 * same kernels launched one by one, bit for bit (the ring kernels inside the captured
 * graph).
 * FULL_TOP1 was issue 38's target, 0.99, when this test was written; the first device run
 * (H100, 2026-12-08 01:27 UTC device clock) measured 0.9594 GPU vs CPU int8, with the GPU
 * closer to the fp32 reference than the CPU's own int8 path (top-1 0.9719 vs 0.9633, mean
 * KL 0.00124 vs 0.00224): both paths quantize each product's input to int8 but round the
 * input apart (the GPU after a bf16 rounding), so each lies ~0.03 from fp32 and they cannot
 * agree with each other to 0.99. The target stays missed (the value is printed); the check
 * is now the bound a wrong layer would break (a wrong norm, window or RoPE base moves the
 * top-1 to a fraction, test_gpu_arch), as test_gpu_model's FULL_TOP1.
 *
 * The model: $LOCKS_MODEL_GEMMA, else $LOCKS_GEMMA3_MODEL, else
 * ~/.cache/locks/gemma-3-270m-q4_k_m.gguf (nothing is fetched). Exit 77 (ctest: skipped)
 * without a CUDA device or without the model. LOCKS_TEST_GPU_GEMMA_DECODE=N: N decode
 * steps instead of 1280. LOCKS_ENGINE_WTYPE=f16 (or bf16): the GPU's 16-bit type forced
 * (the lab switch engine_wtype; an A/B of the bf16 choice). LOCKS_TEST_GPU_AS_CPU=1: the
 * "GPU" contexts on the CPU (this test's bookkeeping, no device needed).
 */
#include "test_util.h"
#include "test_model_util.h"

#include <unistd.h>

#include "cuda/locks_cuda.h"
#include "locks_model.h"
#include "model/cuda/model_cuda.h"

#define N_PROMPT 1024
#define N_TOTAL 2304

#define FULL_TOP1 0.94 /* issue 38 asked 0.99: missed, see above */
#define REF_TOP1_GAP 0.01
#define REF_KL_RATIO 1.5
#define REF_KL_ABS 0.002
#define FID_TOP1_GAP 0.02
#define FID_KL_RATIO 1.5
#define FID_KL_ABS 0.002

static int gpu_as_cpu;

/* The model's path into path[cap]; 0: none found. */
static int find_gemma(char *path, size_t cap) {
    const char *envs[] = {"LOCKS_MODEL_GEMMA", "LOCKS_GEMMA3_MODEL"};
    for (int i = 0; i < 2; i++) {
        const char *e = getenv(envs[i]);
        if (e && *e) {
            snprintf(path, cap, "%s", e);
            return access(path, R_OK) == 0;
        }
    }
    const char *home = getenv("HOME");
    snprintf(path, cap, "%s/.cache/locks/gemma-3-270m-q4_k_m.gguf", home ? home : ".");
    return access(path, R_OK) == 0;
}

/* The five contexts of tu_lockstep_run (test_model_util.h), then the checks. */
static void run_all(const locks_model *m, const int32_t *toks, int32_t n_total) {
    tu_lockstep r;
    tu_lockstep_run(m, toks, N_PROMPT, n_total, N_TOTAL + 16, gpu_as_cpu, &r);
    const int32_t n_pos = r.n_pos, threads = r.threads;
    const tu_logit_stats full = r.full, lk = r.lk, fid_cpu = r.fid_cpu, fid_gpu = r.fid_gpu, ref_cpu = r.ref_cpu,
                         ref_gpu = r.ref_gpu;
    const double kl_cpu = r.kl_cpu, kl_gpu = r.kl_gpu, klr_cpu = r.klr_cpu, klr_gpu = r.klr_gpu, prefill_d = r.prefill_d;
    const double kl_full = r.kl_full;
    const double top1_full = (double)full.agree / n_pos, top1_lk = (double)lk.agree / n_pos;
    const double fa_cpu = (double)fid_cpu.agree / n_pos, fa_gpu = (double)fid_gpu.agree / n_pos;
    const double ra_cpu = (double)ref_cpu.agree / n_pos, ra_gpu = (double)ref_gpu.agree / n_pos;
    const double med = tu_quantile(lk.per_pos, n_pos, 0.5), p99 = tu_quantile(lk.per_pos, n_pos, 0.99);
    printf("  full, GPU vs CPU: %d positions (prefill %d + decode %d): top-1 agreement %.4f (tol >= %.2f), max "
           "|dlogit| %.4f (prefill's last %.4f), mean of per-position max %.4f, mean KL(CPU || GPU) %.5f\n",
           n_pos, N_PROMPT, n_total - N_PROMPT, top1_full, FULL_TOP1, full.maxd, prefill_d, full.sumd / n_pos,
           kl_full);
    printf("  full vs the CPU's fp32 activations: CPU int8 top-1 %.4f, max |dlogit| %.4f, mean KL %.5f; GPU top-1 "
           "%.4f, max |dlogit| %.4f, mean KL %.5f (tol: top-1 within %.2f below the CPU's, KL <= %.1fx + %.3f)\n",
           ra_cpu, ref_cpu.maxd, klr_cpu, ra_gpu, ref_gpu.maxd, klr_gpu, REF_TOP1_GAP, REF_KL_RATIO, REF_KL_ABS);
    printf("  locks @ 256, GPU vs CPU: top-1 agreement %.4f; per-position max |dlogit|: median %.4f, mean %.4f, "
           "99th percentile %.4f, max %.4f (not checked: the runs drift apart, as test_gpu_model says)\n",
           top1_lk, med, lk.sumd / n_pos, p99, lk.maxd);
    printf("  locks @ 256 vs full on the same backend: CPU top-1 %.4f, mean KL %.5f nats; GPU top-1 %.4f, mean KL "
           "%.5f (tol: top-1 within %.2f, KL <= %.1fx + %.3f)\n",
           fa_cpu, kl_cpu, fa_gpu, kl_gpu, FID_TOP1_GAP, FID_KL_RATIO, FID_KL_ABS);
    locks_run_stats gs = locks_ctx_stats(r.c[TU_GPU_LOCKS]), cs = locks_ctx_stats(r.c[TU_CPU_LOCKS]);
    locks_run_stats gf = locks_ctx_stats(r.c[TU_GPU_FULL]), cf = locks_ctx_stats(r.c[TU_CPU_FULL]);
    printf("  decode ms/token: GPU full %.3f, locks %.3f; CPU (%d threads) full %.3f, locks %.3f\n",
           gf.decode_ms / gf.n_decode, gs.decode_ms / gs.n_decode, threads, cf.decode_ms / cf.n_decode,
           cs.decode_ms / cs.n_decode);
    const double t_top1 = gpu_as_cpu ? 1.0 : FULL_TOP1;
    test_cond(top1_full >= t_top1, "full: top-1 agreement GPU vs CPU %.4f < %.2f", top1_full, t_top1);
    test_cond(!gpu_as_cpu || full.maxd == 0.0, "as-CPU run: full max |dlogit| %.4f != 0", full.maxd);
    test_cond(ra_gpu >= ra_cpu - REF_TOP1_GAP, "full vs fp32: GPU top-1 %.4f more than %.2f below the CPU's %.4f",
              ra_gpu, REF_TOP1_GAP, ra_cpu);
    test_cond(klr_gpu <= REF_KL_RATIO * klr_cpu + REF_KL_ABS, "full vs fp32: GPU mean KL %.5f > %.1f x CPU %.5f + %.3f",
              klr_gpu, REF_KL_RATIO, klr_cpu, REF_KL_ABS);
    test_cond(fabs(fa_gpu - fa_cpu) <= FID_TOP1_GAP, "locks vs full: GPU top-1 %.4f vs CPU %.4f (gap > %.2f)", fa_gpu,
              fa_cpu, FID_TOP1_GAP);
    test_cond(kl_gpu <= FID_KL_RATIO * kl_cpu + FID_KL_ABS, "locks vs full: GPU mean KL %.5f > %.1f x CPU %.5f + %.3f",
              kl_gpu, FID_KL_RATIO, kl_cpu, FID_KL_ABS);
    /* the fidelity checks mean something only if LOCKS at 256 differs from full here */
    test_cond(fid_cpu.maxd > 0.01, "locks @ 256 equals full attention on this text (max |dlogit| %.4f)",
              fid_cpu.maxd);
    tu_lockstep_free(&r);
}


/* The docs as tokens: README, docs/ENGINE.md, docs/CONTEXT_PARALLEL.md one after another
 * (the text of test_gpu_model), the first `want` of them. */
static int32_t *doc_tokens(const locks_model *m, int32_t want) {
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
    int32_t *ids = malloc(sizeof(int32_t) * (len + 1)), n = 0;
    SETUP(ids);
    CHECK(locks_tokenizer_encode(locks_model_tokenizer(m), text, len, false, ids, (int32_t)len + 1, &n));
    free(text);
    SETUP(n >= want);
    return ids;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_seed("test_gpu_gemma");
    const char *as_cpu = getenv("LOCKS_TEST_GPU_AS_CPU");
    gpu_as_cpu = as_cpu && *as_cpu == '1';
    size_t free_b = 0, total_b = 0;
    if (!gpu_as_cpu && lg_device_memory(0, &free_b, &total_b) != LOCKS_OK) {
        printf("test_gpu_gemma: no CUDA device: skipped\n");
        return 77;
    }
    const char *wt = getenv("LOCKS_ENGINE_WTYPE");
    if (wt && (!strcmp(wt, "f16") || !strcmp(wt, "bf16"))) {
        locks_cuda_lab lab = locks_cuda_get_lab();
        lab.engine_wtype = !strcmp(wt, "f16") ? LOCKS_DTYPE_F16 : LOCKS_DTYPE_BF16;
        locks_cuda_set_lab(&lab);
        printf("the GPU's 16-bit type forced to %s (LOCKS_ENGINE_WTYPE)\n", wt);
    }
    char path[4096];
    if (!find_gemma(path, sizeof path)) {
        printf("test_gpu_gemma: no Gemma 3 GGUF (%s; set LOCKS_MODEL_GEMMA): skipped\n", path);
        return 77;
    }
    locks_status st;
    locks_model *m = locks_model_load(path, &st);
    if (!m) fprintf(stderr, "test_gpu_gemma: cannot load %s: %s (%s)\n", path, locks_status_str(st), locks_last_error());
    SETUP(m);
    const locks_model_info in = locks_model_get_info(m);
    printf("%s: %s, %d layers (window %d, every %d-th global), dim %d, heads %d/%d of %d, vocab %d\n", path, in.arch,
           in.n_layers, in.swa_window, in.swa_period, in.dim, in.n_heads, in.n_kv_heads, in.head_dim, in.n_vocab);
    SETUP(!strcmp(in.arch, "gemma3"));
    int32_t *toks = doc_tokens(m, N_TOTAL);
    const char *nd = getenv("LOCKS_TEST_GPU_GEMMA_DECODE");
    int32_t n_total = N_TOTAL;
    if (nd && atoi(nd) > 0 && atoi(nd) < N_TOTAL - N_PROMPT) n_total = N_PROMPT + atoi(nd);
    run_all(m, toks, n_total);
    if (!gpu_as_cpu) tu_graph_vs_eager(m, toks);
    free(toks);
    locks_model_free(m);
    return test_report("test_gpu_gemma");
}
