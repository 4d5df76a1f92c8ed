/*
 * cmd_demo.c — `locks demo`: until the inference engine lands, a short synthetic
 * benchmark (smollm2 shape, 16K context, budget 256, a few steps): dense vs oracle vs
 * LOCKS, time, bytes and fidelity side by side. Finishes in a few seconds.
 * Extra arguments are passed on to `locks bench` (e.g. --json, --threads 1).
 */
#include <stdio.h>
#include <string.h>

#include "cmds.h"

int cmd_demo(int argc, char **argv) {
    char *args[64] = {"bench",    "--shape", "smollm2", "--context", "16384", "--budget",
                      "256",      "--steps", "4",       "--warmup",  "1"};
    int n = 11;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: locks demo [bench options]\n\n"
                   "Runs `locks bench --shape smollm2 --context 16384 --budget 256 --steps 4\n"
                   "--warmup 1` on the synthetic workload; later options override these.\n");
            return 0;
        }
        if (n == 63) {
            fprintf(stderr, "locks demo: too many arguments\n");
            return 2;
        }
        args[n++] = argv[i];
    }
    args[n] = NULL;
    printf("locks demo: synthetic decode workload (page-local low-rank keys, attention sinks,\n"
           "needle pages); dense attention vs the exact-page oracle vs LOCKS summaries.\n");
    return cmd_bench(n, args);
}
