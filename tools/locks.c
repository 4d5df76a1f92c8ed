/*
 * locks — command-line front end: run a model, run the demo, benchmark, evaluate, serve.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "locks.h"
#include "vmath.h"

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
