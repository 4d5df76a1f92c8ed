/*
 * locks — command-line front end: run a model, run the demo, benchmark, evaluate, serve.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "locks.h"
#include "vmath.h"
#ifdef LOCKS_HAVE_CUDA
#include "cuda/locks_cuda.h"
#endif

const char *tool_why(int status) {
    static _Thread_local char buf[768];
    const char *why = locks_last_error();
    if (why[0])
        snprintf(buf, sizeof buf, "%s (%s)", locks_status_str((locks_status)status), why);
    else
        snprintf(buf, sizeof buf, "%s", locks_status_str((locks_status)status));
    return buf;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: locks <command> [options]\n"
            "\n"
            "commands:\n"
            "  run     generate text with a GGUF model through the LOCKS cache\n"
            "  demo    needle-in-a-haystack demo: full attention vs LOCKS\n"
            "  bench   per-step time, bytes and fidelity of dense vs sparse decode\n"
            "  bench-matmul  a model's matrix products on each kernel path (portable, avx2, avx512)\n"
            "  eval    replay decode steps through every selector over a budget sweep\n"
            "  serve   OpenAI-compatible HTTP server with continuous batching\n"
            "\n"
            "`locks <command> --help` lists a command's options.\n");
}

#ifdef LOCKS_HAVE_CUDA
/* The CUDA lab switches (src/cuda/locks_cuda.h, for A/B timing in dev/cuda/ and scripts/)
 * from the environment, the one place they are read: "0" turns a path off, a number sets a
 * size; unset leaves the library's default. */
static void cuda_lab_from_env(void) {
    locks_cuda_lab lab = locks_cuda_lab_default();
    const char *e;
    if ((e = getenv("LOCKS_CUDA_PDL")) && e[0] == '0') lab.pdl = 0;
    if ((e = getenv("LOCKS_CUDA_SCORE_I8G16")) && e[0] == '0') lab.score_i8_g16 = 0;
    if ((e = getenv("LOCKS_CUDA_ATT_MIN_PPS"))) lab.att_min_pps = atoi(e);
    if ((e = getenv("LOCKS_CUDA_TOPK_MB_MIN"))) lab.topk_mb_min = atoi(e);
    if ((e = getenv("LOCKS_CUDA_MASS_PPB"))) lab.mass_ppb = atoi(e);
    if ((e = getenv("LOCKS_CUDA_GEMV")) && (e[0] == '1' || e[0] == '2')) lab.engine_gemv = e[0] - '0';
    if ((e = getenv("LOCKS_ENGINE_FUSED")) && e[0] == '0') lab.engine_fused = 0;
    if ((e = getenv("LOCKS_ENGINE_PAD")) && e[0] == '0') lab.engine_pad = 0;
    if ((e = getenv("LOCKS_ENGINE_REST")) && e[0] == '0') lab.engine_rest = 0;
    if ((e = getenv("LOCKS_ENGINE_QWEIGHTS")) && e[0] == '0') lab.engine_qweights = 0;
    if ((e = getenv("LOCKS_ENGINE_WTYPE")) && (!strcmp(e, "f16") || !strcmp(e, "bf16")))
        lab.engine_wtype = !strcmp(e, "f16") ? LOCKS_DTYPE_F16 : LOCKS_DTYPE_BF16;
    locks_cuda_set_lab(&lab);
}
#endif

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    /* LOCKS_ISA=portable|avx2|avx512 forces one kernel path (for comparisons) */
    const char *isa_env = getenv("LOCKS_ISA");
    if (isa_env && *isa_env) {
        locks_isa isa;
        if (locks_isa_parse(isa_env, &isa) != 0 || locks_cpu_set_isa(isa) != 0) {
            fprintf(stderr, "locks: LOCKS_ISA=%s: not a kernel set this CPU has (portable, avx2, avx512, best)\n",
                    isa_env);
            return 2;
        }
    }
#ifdef LOCKS_HAVE_CUDA
    cuda_lab_from_env();
#endif
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo")) return cmd_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) {
        for (int i = 2; i < argc; i++) /* context-parallel runs: tools/cmd_bench_cp.c */
            if (!strcmp(argv[i], "--ranks")) return cmd_bench_cp(argc - 1, argv + 1);
        return cmd_bench(argc - 1, argv + 1);
    }
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench-matmul")) return cmd_bench_matmul(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    fprintf(stderr, "locks: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
