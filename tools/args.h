/* args.h — number parsing and pieces shared by the `locks` subcommands' option parsers. */
#ifndef LOCKS_ARGS_H
#define LOCKS_ARGS_H

#include <stdint.h>
#include <stdio.h>

/* A comma-separated list of integers in [lo, hi], each with an optional binary suffix
 * k/K (x 1024) or m/M (x 1048576): "32768,128k,1M". Writes the values to out[max] and
 * returns how many; 0 if the list is malformed (empty, an empty or non-numeric item, a
 * value out of range, more than max items). A trailing comma is allowed. */
int args_parse_ints(const char *s, int32_t *out, int max, int32_t lo, int32_t hi);

/* One such integer (no comma): 1 and *out set, or 0 if malformed or out of range. */
int args_parse_int(const char *s, int32_t lo, int32_t hi, int32_t *out);

/* The options a GPU bench's parser ends with (cmd_bench_cuda.c, cmd_bench_model_cuda.c):
 * --csv FILE (*csv = FILE, *i advanced past it; returns 0), -h / --help (usage on stdout;
 * returns 1: exit 0), anything else (usage on stderr; returns 2). */
int args_bench_tail(const char *a, const char *v, int *i, const char **csv, void (*usage)(FILE *));

/* The GPU benches' default sweep: contexts 32K, 128K, 256K, 512K, 1M; batches 1 and 8
 * (ctx and batch hold at least 5 and 2). */
void args_gpu_sweep(int32_t *ctx, int *n_ctx, int32_t *batch, int *n_batch);

#endif
