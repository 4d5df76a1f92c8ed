/* args.c — number parsing shared by the subcommands' option parsers (see args.h). */
#include "args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One integer with an optional k/M suffix at s; *end past it. 0 if malformed or outside
 * [lo, hi]. */
static int parse_one(const char *s, char **end, int32_t lo, int32_t hi, int32_t *out) {
    errno = 0;
    long long v = strtoll(s, end, 10);
    if (*end == s || errno) return 0;
    if (v > INT32_MAX || v < -(long long)INT32_MAX) return 0; /* the suffix cannot overflow */
    if (**end == 'k' || **end == 'K') v *= 1024, (*end)++;
    else if (**end == 'm' || **end == 'M') v *= 1024 * 1024, (*end)++;
    if (v < lo || v > hi) return 0;
    *out = (int32_t)v;
    return 1;
}

int args_parse_ints(const char *s, int32_t *out, int max, int32_t lo, int32_t hi) {
    int n = 0;
    while (*s) {
        if (n == max) return 0;
        char *end;
        if (!parse_one(s, &end, lo, hi, &out[n])) return 0;
        n++;
        if (*end == ',') end++;
        else if (*end) return 0;
        s = end;
    }
    return n;
}

int args_parse_int(const char *s, int32_t lo, int32_t hi, int32_t *out) {
    char *end;
    int32_t v;
    if (!parse_one(s, &end, lo, hi, &v) || *end) return 0;
    *out = v;
    return 1;
}

int args_bench_tail(const char *a, const char *v, int *i, const char **csv, void (*usage)(FILE *)) {
    if (!strcmp(a, "--csv") && v) {
        *csv = v;
        (*i)++;
        return 0;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
        usage(stdout);
        return 1;
    }
    usage(stderr);
    return 2;
}

void args_gpu_sweep(int32_t *ctx, int *n_ctx, int32_t *batch, int *n_batch) {
    static const int32_t c[] = {32768, 131072, 262144, 524288, 1048576};
    memcpy(ctx, c, sizeof c);
    *n_ctx = 5;
    batch[0] = 1;
    batch[1] = 8;
    *n_batch = 2;
}
