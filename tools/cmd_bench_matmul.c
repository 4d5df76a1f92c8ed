/*
 * cmd_bench_matmul.c — `locks bench-matmul`: the matrix products of a GGUF model on each
 * kernel path, side by side in one run.
 *
 *   locks bench-matmul [-m MODEL.gguf] [--threads N] [--tokens T] [--reps R] [--isa LIST]
 *
 * For every distinct (type, shape) of the model's 2-D weights (its first tensor of
 * that kind), y = W x for T tokens of random activations (quantized once per repetition,
 * as the engine does per token), on each path of LIST (comma-separated portable, avx2,
 * avx512; default: every path this CPU has), the paths interleaved repetition by
 * repetition so that machine load hits them alike. Prints the median time per product,
 * the weight bytes per second it implies, and per path the sum over all the model's
 * tensors (each kind times its count): the matrix-product time of one forward pass of T
 * tokens. With avx512, a last column "avx512+pack" runs it on the weights repacked as
 * the engine repacks them at load (matmul_pack: Q4_1; other types as avx512). Times are wall time: take them on a quiet machine.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "locks.h"
#include "model/gguf.h"
#include "model/matmul.h"
#include "pool.h"
#include "util.h"
#include "vmath.h"

#define MAX_KINDS 64

typedef struct {
    const gguf_tensor *t;
    int count;
} weight_kind;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void usage(void) {
    fprintf(stderr, "usage: locks bench-matmul [-m MODEL.gguf] [--threads N] [--tokens T] [--reps R] "
                    "[--isa portable,avx2,avx512]\n");
}

int cmd_bench_matmul(int argc, char **argv) {
    const char *path = NULL, *isa_list = NULL;
    int threads = 2, tokens = 1, reps = 50;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) path = argv[++i];
        else if (!strcmp(a, "--threads") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--tokens") && v) tokens = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && v) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--isa") && v) isa_list = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (threads < 1 || tokens < 1 || reps < 1) {
        usage();
        return 2;
    }
    char defpath[1024];
    if (!path) {
        const char *home = getenv("HOME");
        snprintf(defpath, sizeof defpath, "%s/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : ".");
        path = defpath;
    }
    locks_isa isas[4]; /* the paths; with avx512, a last one: avx512 on the packed weights */
    int n_isa = 0;
    if (isa_list) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", isa_list);
        for (char *s = strtok(buf, ","); s && n_isa < 3; s = strtok(NULL, ",")) {
            if (locks_isa_parse(s, &isas[n_isa]) != 0 || isas[n_isa] == LOCKS_ISA_BEST ||
                locks_cpu_set_isa(isas[n_isa]) != 0) {
                fprintf(stderr, "locks bench-matmul: no '%s' kernels on this CPU (portable, avx2, avx512)\n", s);
                return 2;
            }
            n_isa++;
        }
    } else {
        for (int k = LOCKS_ISA_PORTABLE; k <= LOCKS_ISA_AVX512; k++)
            if (locks_cpu_set_isa((locks_isa)k) == 0) isas[n_isa++] = (locks_isa)k;
    }

    int packed_path = 0; /* isas[n_isa - 1] is avx512 on weights matmul_pack repacks */
    for (int p = 0; p < n_isa; p++)
        if (isas[p] == LOCKS_ISA_AVX512) packed_path = 1;
    if (packed_path) isas[n_isa++] = LOCKS_ISA_AVX512;
    locks_status st;
    gguf *g = gguf_open(path, &st);
    if (!g) {
        fprintf(stderr, "locks bench-matmul: %s: %s\n", path, locks_status_str(st));
        return 1;
    }
    weight_kind kinds[MAX_KINDS];
    int n_kinds = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (t->n_dims != 2 || t->ne[0] % GGML_QBLOCK) continue;
        int k = 0;
        while (k < n_kinds && !(kinds[k].t->type == t->type && kinds[k].t->ne[0] == t->ne[0] &&
                                kinds[k].t->ne[1] == t->ne[1]))
            k++;
        if (k == n_kinds) {
            if (n_kinds == MAX_KINDS) continue;
            kinds[n_kinds++] = (weight_kind){t, 0};
        }
        kinds[k].count++;
    }

    locks_pool *pool = threads > 1 ? locks_pool_init(threads) : NULL;
    matmul_init_tables();
    int32_t max_cols = 0, max_rows = 0;
    for (int k = 0; k < n_kinds; k++) {
        if (kinds[k].t->ne[0] > max_cols) max_cols = (int32_t)kinds[k].t->ne[0];
        if (kinds[k].t->ne[1] > max_rows) max_rows = (int32_t)kinds[k].t->ne[1];
    }
    float *x = malloc(sizeof(float) * (size_t)tokens * max_cols);
    float *y = malloc(sizeof(float) * (size_t)tokens * max_rows);
    matmul_q8 *xq = malloc(sizeof(matmul_q8) * (size_t)tokens * (max_cols / GGML_QBLOCK));
    double *times = malloc(sizeof(double) * (size_t)reps * 4);
    if (!x || !y || !xq || !times || (threads > 1 && !pool)) {
        fprintf(stderr, "locks bench-matmul: out of memory\n");
        gguf_close(g);
        return 1;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < (size_t)tokens * max_cols; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }

    printf("bench-matmul: %s, %d thread%s, %d token%s, median of %d\n", path, threads, threads > 1 ? "s" : "",
           tokens, tokens > 1 ? "s" : "", reps);
    printf("%-6s %7s %7s %5s", "type", "cols", "rows", "count");
    for (int p = 0; p < n_isa; p++)
        printf(" %12s us %6s", packed_path && p == n_isa - 1 ? "avx512+pack" : locks_isa_name(isas[p]), "GB/s");
    printf("\n");
    double total[4] = {0, 0, 0, 0};
    for (int k = 0; k < n_kinds; k++) {
        const gguf_tensor *t = kinds[k].t;
        matmul_weight w = {t->data, t->type, (int32_t)t->ne[1], (int32_t)t->ne[0], ggml_row_bytes(t->type, t->ne[0]), NULL};
        matmul_act a = {x, matmul_wants_q8(t->type) ? xq : NULL, tokens, w.cols};
        matmul_weight wp = w; /* the packed path's: repacked where matmul_pack does */
        if (packed_path) {
            locks_cpu_set_isa(LOCKS_ISA_AVX512);
            if (matmul_pack(&wp) != 0) {
                fprintf(stderr, "locks bench-matmul: out of memory\n");
                return 1;
            }
        }
        for (int r = -2; r < reps; r++) /* two warm-up rounds */
            for (int p = 0; p < n_isa; p++) {
                locks_cpu_set_isa(isas[p]);
                double t0 = locks_now_ms();
                if (a.xq) matmul_quantize(x, tokens, w.cols, xq);
                matmul(pool, packed_path && p == n_isa - 1 ? &wp : &w, &a, y, w.rows);
                if (r >= 0) times[p * reps + r] = locks_now_ms() - t0;
            }
        printf("%-6s %7d %7d %5d", ggml_type_name(t->type), w.cols, w.rows, kinds[k].count);
        for (int p = 0; p < n_isa; p++) {
            qsort(times + p * reps, (size_t)reps, sizeof(double), cmp_double);
            double med = times[p * reps + reps / 2];
            total[p] += med * kinds[k].count;
            printf(" %15.1f %6.1f", med * 1e3, (double)w.row_bytes * w.rows / (med * 1e6));
        }
        printf("\n");
        matmul_pack_free(&wp);
    }
    printf("%-27s", "all products of a pass, ms");
    for (int p = 0; p < n_isa; p++) printf(" %15.3f %6s", total[p], "");
    printf("\n");
    locks_cpu_set_isa(LOCKS_ISA_BEST);
    free(x);
    free(y);
    free(xq);
    free(times);
    locks_pool_free(pool);
    gguf_close(g);
    return 0;
}
