/*
 * test_gpu_arch.c — the layer variants on the GPU engine against the CPU engine: the tiny
 * random qwen2, qwen3 and gemma3 models of tests/arch_models.h (and llama beside them, the
 * layer the engine ran before), fresh fp32 weights per run, written F32 and (gemma3, qwen2)
 * as Q8_0 / Q4_0 matrices. Both engines are teacher-forced over the same tokens, full
 * attention: a prefill chunk of 200, decode steps to 1100, a verify pass of 8 tokens
 * (locks_ctx_prefill_all_seq: the GPU's lg_verify) rolled back, a second prefill chunk of
 * 100, decode steps to 1300. Gemma 3's local layers (window 20) then wrap their rings on
 * both sides (the CPU's at 275 positions, the GPU's at 1043: window - 1 + its 1024-token
 * prefill chunk), so ring slots, the local RoPE base and the window's bounds are all
 * exercised, in the decode graph and in prefill and verify. Then three sequences decode in
 * one batch (locks_ctx_decode_batch, 150 steps after prefills of different lengths)
 * against the CPU's batch.
 *
 * Per position: max |dlogit| relative to the CPU logits' spread (max - min), top-1
 * agreement. The GPU rounds weights and products' inputs to 16 bits (fp16; bf16 for
 * gemma3) where the CPU keeps fp32 (F32 files) or int8 activations (quantized files).
 * What that costs, measured on the CPU here over the same 1300-position schedule (the
 * CPU engine on weights rounded to 16 bits vs the exact ones): fp16 weights mean 1e-4 ..
 * 6e-4, max <= 2.3e-3; bf16 weights mean 7e-4 (gemma3) .. 4.2e-3 (qwen2), max <= 2.3e-2;
 * on the quantized files the CPU's own int8 vs fp32 activations mean 1.2e-3 (gemma3) ..
 * 1.1e-2 (qwen2), max <= 3.6e-2, top-1 >= 0.986 (the GPU's and the CPU's int8 paths
 * round apart by about as much). A wrong variant moves the logits by far more: gemma3's
 * window one key too wide gives mean 1.3e-2, max 4.8e-2 (top-1 unchanged!), a wrong RoPE
 * pairing, base, norm or bias O(1) and the top-1 to chance. Tolerances (set before any
 * device run; the numbers are printed): F32 files mean <= 5e-3, max <= 0.04, top-1 >=
 * 0.97; quantized files mean <= 0.02, max <= 0.08, top-1 >= 0.95 (the F32 runs are the
 * sensitive check of the layer code, which both share).
 *
 * Exit 77 (ctest: skipped) without a CUDA device. LOCKS_TEST_GPU_AS_CPU=1 runs the "GPU"
 * contexts on the CPU backend instead: a check of this test's bookkeeping on a machine
 * without a GPU (every difference must then be 0). LOCKS_TEST_GPU_ARCH_ONLY=TEXT runs only
 * the models whose name ("gemma3 F32", "qwen2 Q8_0/Q4_0", ...) contains TEXT (for
 * compute-sanitizer, which is slow).
 */
#include "test_util.h"

#include "arch_models.h"
#include "locks_model.h"
#include "model/cuda/model_cuda.h"
#include "model/llama_internal.h"

/* [0]: F32 files, [1]: quantized files */
static const double TOL_MEAN[2] = {5e-3, 0.02}, TOL_MAX[2] = {0.04, 0.08}, TOL_TOP1[2] = {0.97, 0.95};

enum { N_CTX = 1400, N_PROMPT = 200, N_MID = 1100, N_VERIFY = 8, N_CHUNK2 = 100, N_END = 1300 };
enum { N_SEQS = 3, N_BATCH_STEPS = 150 };

static int gpu_as_cpu;

typedef struct {
    int32_t n, agree;
    double max_rel, sum_rel;
} cmp_stats;

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* One position: GPU logits g against the CPU's c (VOCAB of each). */
static void cmp(cmp_stats *s, const float *g, const float *c) {
    float lo = c[0], hi = c[0];
    double md = 0.0;
    for (int i = 0; i < VOCAB; i++) {
        lo = c[i] < lo ? c[i] : lo;
        hi = c[i] > hi ? c[i] : hi;
        const double d = fabs((double)g[i] - (double)c[i]);
        if (d > md || d != d) md = d;
    }
    const double rel = md / ((double)hi - (double)lo + 1e-30);
    s->n++;
    s->agree += argmax(g, VOCAB) == argmax(c, VOCAB);
    if (rel > s->max_rel || rel != rel) s->max_rel = rel;
    s->sum_rel += rel;
}

static void report(const char *what, const cmp_stats *s, int quant) {
    const double top1 = (double)s->agree / s->n, mean = s->sum_rel / s->n;
    printf("  %-34s %5d positions: top-1 agreement %.4f, |dlogit| / spread mean %.2e max %.2e\n", what, s->n, top1,
           mean, s->max_rel);
    const double t_top1 = gpu_as_cpu ? 1.0 : TOL_TOP1[quant], t_mean = gpu_as_cpu ? 0.0 : TOL_MEAN[quant],
                 t_max = gpu_as_cpu ? 0.0 : TOL_MAX[quant];
    test_cond(top1 >= t_top1, "%s: top-1 agreement %.4f < %.2f", what, top1, t_top1);
    test_cond(mean <= t_mean, "%s: mean |dlogit| / spread %.3e > %.3f", what, mean, t_mean);
    test_cond(s->max_rel <= t_max, "%s: max |dlogit| / spread %.3e > %.3f", what, s->max_rel, t_max);
}

static locks_ctx *open_ctx(const locks_model *m, int gpu, int32_t n_seqs) {
    locks_ctx_params p = locks_ctx_default_params();
    p.n_ctx = N_CTX;
    p.n_batch = 64;
    p.n_seqs = n_seqs;
    p.step.selector = LOCKS_SEL_FULL;
    p.step.budget = N_CTX;
    p.backend = gpu && !gpu_as_cpu ? LOCKS_BACKEND_CUDA : LOCKS_BACKEND_CPU;
    locks_status st;
    locks_ctx *c = locks_ctx_init(m, p, &st);
    if (!c) fprintf(stderr, "locks_ctx_init (%s): %s (%s)\n", gpu ? "GPU" : "CPU", locks_status_str(st),
                    locks_last_error());
    SETUP(c);
    return c;
}

/* One model through both engines, one sequence: the schedule of the header. */
static void run_one(const locks_model *m, const char *name, int quant) {
    int32_t tok[N_END];
    for (int i = 0; i < N_END; i++) tok[i] = tu_int(0, VOCAB - 1);
    locks_ctx *cpu = open_ctx(m, 0, 1), *gpu = open_ctx(m, 1, 1);
    float *lc = malloc(sizeof(float) * N_VERIFY * VOCAB), *lg = malloc(sizeof(float) * N_VERIFY * VOCAB);
    SETUP(lc && lg);
    cmp_stats pre = {0}, dec = {0}, ver = {0};
    CHECK(locks_ctx_prefill(cpu, tok, N_PROMPT, lc));
    CHECK(locks_ctx_prefill(gpu, tok, N_PROMPT, lg));
    cmp(&pre, lg, lc);
    for (int i = N_PROMPT; i < N_MID; i++) {
        CHECK(locks_ctx_decode(cpu, tok[i], lc));
        CHECK(locks_ctx_decode(gpu, tok[i], lg));
        cmp(&dec, lg, lc);
    }
    /* the verify pass of speculation: every row's logits, then rolled back */
    CHECK(locks_ctx_prefill_all_seq(cpu, 0, tok + N_MID, N_VERIFY, lc));
    CHECK(locks_ctx_prefill_all_seq(gpu, 0, tok + N_MID, N_VERIFY, lg));
    for (int r = 0; r < N_VERIFY; r++) cmp(&ver, lg + (size_t)r * VOCAB, lc + (size_t)r * VOCAB);
    CHECK(locks_ctx_truncate(cpu, N_MID));
    CHECK(locks_ctx_truncate(gpu, N_MID));
    CHECK(locks_ctx_prefill(cpu, tok + N_MID, N_CHUNK2, lc));
    CHECK(locks_ctx_prefill(gpu, tok + N_MID, N_CHUNK2, lg));
    cmp(&pre, lg, lc);
    for (int i = N_MID + N_CHUNK2; i < N_END; i++) {
        CHECK(locks_ctx_decode(cpu, tok[i], lc));
        CHECK(locks_ctx_decode(gpu, tok[i], lg));
        cmp(&dec, lg, lc);
    }
    test_cond(locks_ctx_len(gpu) == N_END && locks_ctx_len(cpu) == N_END, "%s: lengths %d / %d", name,
              locks_ctx_len(gpu), locks_ctx_len(cpu));
    char what[96];
    snprintf(what, sizeof what, "%s prefill (last logits)", name);
    report(what, &pre, quant);
    snprintf(what, sizeof what, "%s decode", name);
    report(what, &dec, quant);
    snprintf(what, sizeof what, "%s verify rows", name);
    report(what, &ver, quant);
    locks_ctx_free(cpu);
    locks_ctx_free(gpu);
    free(lc);
    free(lg);
}

/* N_SEQS sequences of different prefill lengths, then one batch decode step of all of them
 * at a time (the GPU: one graph replay of N_SEQS rows, each row its own rings). */
static void run_batch(const locks_model *m, const char *name, int quant) {
    locks_ctx *cpu = open_ctx(m, 0, N_SEQS), *gpu = open_ctx(m, 1, N_SEQS);
    float *lc = malloc(sizeof(float) * N_SEQS * VOCAB), *lg = malloc(sizeof(float) * N_SEQS * VOCAB);
    int32_t tok[N_SEQS], pre[64];
    SETUP(lc && lg);
    cmp_stats st = {0};
    for (int32_t s = 0; s < N_SEQS; s++) {
        const int32_t n = 17 + 21 * s; /* 17, 38, 59: past the window for some */
        for (int32_t i = 0; i < n; i++) pre[i] = tu_int(0, VOCAB - 1);
        CHECK(locks_ctx_prefill_seq(cpu, s, pre, n, lc));
        CHECK(locks_ctx_prefill_seq(gpu, s, pre, n, lg));
        cmp(&st, lg, lc);
    }
    for (int32_t k = 0; k < N_BATCH_STEPS; k++) {
        for (int32_t s = 0; s < N_SEQS; s++) tok[s] = tu_int(0, VOCAB - 1);
        CHECK(locks_ctx_decode_batch(cpu, tok, lc));
        CHECK(locks_ctx_decode_batch(gpu, tok, lg));
        for (int32_t s = 0; s < N_SEQS; s++) cmp(&st, lg + (size_t)s * VOCAB, lc + (size_t)s * VOCAB);
    }
    char what[96];
    snprintf(what, sizeof what, "%s batch of %d sequences", name, N_SEQS);
    report(what, &st, quant);
    locks_ctx_free(cpu);
    locks_ctx_free(gpu);
    free(lc);
    free(lg);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    tu_seed("test_gpu_arch");
    const char *as_cpu = getenv("LOCKS_TEST_GPU_AS_CPU");
    gpu_as_cpu = as_cpu && *as_cpu == '1';
    size_t free_b = 0, total_b = 0;
    if (!gpu_as_cpu && lg_device_memory(0, &free_b, &total_b) != LOCKS_OK) {
        printf("test_gpu_arch: no CUDA device: skipped\n");
        return 77;
    }
    const struct {
        const char *arch;
        int quant;
    } runs[] = {{"llama", 0}, {"qwen2", 0}, {"qwen2", 1}, {"qwen3", 0}, {"gemma3", 0}, {"gemma3", 1}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        const variant *v = NULL;
        for (size_t i = 0; i < sizeof VARIANTS / sizeof VARIANTS[0]; i++)
            if (!strcmp(VARIANTS[i].arch, runs[r].arch)) v = &VARIANTS[i];
        SETUP(v);
        char name[48];
        snprintf(name, sizeof name, "%s %s", v->arch, runs[r].quant ? "Q8_0/Q4_0" : "F32");
        const char *only = getenv("LOCKS_TEST_GPU_ARCH_ONLY");
        if (only && *only && !strstr(name, only)) continue;
        printf("%s\n", name);
        weights w;
        make_weights(v, &w);
        buf b = write_model(v, &w, BREAK_NONE, runs[r].quant);
        locks_status st;
        locks_model *m = llama_model_load_buffer(b.p, b.n, &st);
        if (!m) fprintf(stderr, "%s: load: %s (%s)\n", name, locks_status_str(st), locks_last_error());
        SETUP(m);
        run_one(m, name, runs[r].quant);
        run_batch(m, name, runs[r].quant);
        locks_model_free(m);
        free(b.p);
        free_weights(&w);
    }
    return test_report("test_gpu_arch");
}
