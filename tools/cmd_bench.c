/*
 * cmd_bench.c — `locks bench`: per-step time, bytes and fidelity of dense vs sparse
 * decode on the synthetic workload (src/eval/synth.h), side by side in one run.
 *
 * For every (shape, context) the cache (one layer, batch sequences) is filled once;
 * then for every budget, each decode step draws fresh queries, computes the float64
 * reference attention (src/eval/metrics.h) and runs every selector through
 * locks_decode_step on the same queries, interleaved so that machine load hits all
 * selectors alike. The dense baseline is the `full` selector through the same call
 * (always measured, printed when asked for). Times are host wall time of the whole
 * call; the first --warmup steps are not recorded; medians over the recorded steps.
 * Fidelity is the mean over recorded steps and sequences.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>

#include "args.h"
#include "cmds.h"
#include "locks.h"
#include "eval/metrics.h"
#include "eval/synth.h"
#include "util.h"

#define MAX_LIST 16

typedef struct {
    const char *name;
    int32_t hq, hkv, d;
} bench_shape;

static const bench_shape shapes[] = {
    {"llama3-8b", 32, 8, 128},
    {"smollm2", 9, 3, 64},
    {"glm4-9b", 32, 2, 128},
};

typedef struct {
    const bench_shape *shape[MAX_LIST];
    int n_shapes;
    int32_t context[MAX_LIST];
    int n_context;
    int32_t budget[MAX_LIST];
    int n_budget;
    locks_selector sel[LOCKS_SEL_COUNT];
    int n_sel;
    int32_t batch, steps, warmup, threads, rank, n_sink, n_recent;
    locks_summary_prec prec;
    uint64_t seed;
    int json, fidelity, membw;
    double host_gbps; /* measured with --membw, else 0 */
    locks_backend backend;
} bench_opts;

/* What one selector did over the recorded steps of one configuration. */
typedef struct {
    double *ms, *score_ms, *select_ms, *attend_ms; /* [steps] */
    uint64_t bytes_meta, bytes_kv, bytes_dense;    /* sums over recorded steps */
    double cov, ocov, ratio, ratio_min, recall, err, err_max, cos, kerr, tokens;
    locks_carrier_count carrier; /* needle pages: the oracle's vs this selector's */
    int n_fid;
} sel_result;

static void usage(FILE *f) {
    fprintf(f,
            "usage: locks bench [options]\n"
            "\n"
            "Decode-step time, bytes read and fidelity of the dense path and the sparse\n"
            "selectors on a synthetic workload with page-local low-rank keys, attention\n"
            "sinks and needle pages (one layer; see src/eval/synth.h). Lists are comma-separated;\n"
            "sizes take a k suffix (x1024).\n"
            "\n"
            "  --shape S[,S]      llama3-8b (32q/8kv, d=128), smollm2 (9q/3kv, d=64),\n"
            "                     glm4-9b (32q/2kv, d=128)             [llama3-8b]\n"
            "  --context N[,N]    tokens per sequence                  [32768]\n"
            "  --budget N[,N]     tokens attended per (sequence, KV head) [2048]\n"
            "  --batch N          sequences decoded together           [1]\n"
            "  --steps N          recorded decode steps (median taken) [8]\n"
            "  --warmup N         unrecorded steps first               [2]\n"
            "  --threads N        worker threads                       [nproc]\n"
            "  --rank R           summary rank 1..15                   [8]\n"
            "  --summary q|f32    summary precision                    [q]\n"
            "  --sink N, --recent N  forced leading / trailing pages   [1, 1]\n"
            "  --selector L       selectors to report                  [full,oracle,locks]\n"
            "  --seed N           workload seed                        [1]\n"
            "  --no-fidelity      skip the float64 reference (timing only)\n"
            "  --membw            first measure the host's read bandwidth (the roofline\n"
            "                     for the GB/s column) with the same thread count\n"
            "  --json             one JSON object per (configuration, selector) on stdout\n"
            "  --backend cpu|cuda                                      [cpu]\n"
            "  --help\n");
}

static int parse_opts(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->shape[0] = &shapes[0];
    o->n_shapes = 1;
    o->context[0] = 32768;
    o->n_context = 1;
    o->budget[0] = 2048;
    o->n_budget = 1;
    o->sel[0] = LOCKS_SEL_FULL, o->sel[1] = LOCKS_SEL_ORACLE, o->sel[2] = LOCKS_SEL_LOCKS;
    o->n_sel = 3;
    o->batch = 1, o->steps = 8, o->warmup = 2, o->rank = 8, o->n_sink = 1, o->n_recent = 1;
    long np = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = np > 0 ? (int32_t)np : 1;
    o->prec = LOCKS_SUMMARY_Q;
    o->seed = 1;
    o->fidelity = 1;
    o->backend = LOCKS_BACKEND_CPU;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE                                                         \
    do {                                                                   \
        if (!v) {                                                          \
            fprintf(stderr, "locks bench: %s needs a value\n", a);         \
            return 2;                                                      \
        }                                                                  \
        i++;                                                               \
    } while (0)
#define INT_OPT(field, lo)                                                           \
    do {                                                                             \
        NEED_VALUE;                                                                  \
        if (!args_parse_int(v, (lo), INT32_MAX, &o->field)) {                        \
            fprintf(stderr, "locks bench: bad value '%s' for %s\n", v, a);           \
            return 2;                                                                \
        }                                                                            \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--shape")) {
            NEED_VALUE;
            o->n_shapes = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                const bench_shape *sh = NULL;
                for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
                    if (!strcmp(t, shapes[k].name)) sh = &shapes[k];
                if (!sh || o->n_shapes == MAX_LIST) {
                    fprintf(stderr, "locks bench: unknown shape '%s' (llama3-8b, smollm2, glm4-9b)\n", t);
                    return 2;
                }
                o->shape[o->n_shapes++] = sh;
            }
        } else if (!strcmp(a, "--context") || !strcmp(a, "--budget")) {
            NEED_VALUE;
            int is_ctx = !strcmp(a, "--context");
            int n = args_parse_ints(v, is_ctx ? o->context : o->budget, MAX_LIST, 1, INT32_MAX);
            if (!n) {
                fprintf(stderr, "locks bench: bad list '%s' for %s\n", v, a);
                return 2;
            }
            *(is_ctx ? &o->n_context : &o->n_budget) = n;
        } else if (!strcmp(a, "--selector")) {
            NEED_VALUE;
            o->n_sel = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                locks_selector s;
                if (locks_selector_parse(t, &s) != LOCKS_OK || o->n_sel == LOCKS_SEL_COUNT) {
                    fprintf(stderr, "locks bench: unknown selector '%s'\n", t);
                    return 2;
                }
                o->sel[o->n_sel++] = s;
            }
        } else if (!strcmp(a, "--summary")) {
            NEED_VALUE;
            if (!strcmp(v, "q")) o->prec = LOCKS_SUMMARY_Q;
            else if (!strcmp(v, "f32")) o->prec = LOCKS_SUMMARY_F32;
            else {
                fprintf(stderr, "locks bench: --summary takes q or f32\n");
                return 2;
            }
        } else if (!strcmp(a, "--backend")) {
            NEED_VALUE;
            if (!strcmp(v, "cpu")) o->backend = LOCKS_BACKEND_CPU;
            else if (!strcmp(v, "cuda")) o->backend = LOCKS_BACKEND_CUDA;
            else {
                fprintf(stderr, "locks bench: --backend takes cpu or cuda\n");
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            NEED_VALUE;
            char *end;
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            if (*end || errno) {
                fprintf(stderr, "locks bench: bad seed '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--batch")) {
            INT_OPT(batch, 1);
        } else if (!strcmp(a, "--steps")) {
            INT_OPT(steps, 1);
        } else if (!strcmp(a, "--warmup")) {
            INT_OPT(warmup, 0);
        } else if (!strcmp(a, "--threads")) {
            INT_OPT(threads, 1);
        } else if (!strcmp(a, "--rank")) {
            INT_OPT(rank, 1);
        } else if (!strcmp(a, "--sink")) {
            INT_OPT(n_sink, 0);
        } else if (!strcmp(a, "--recent")) {
            INT_OPT(n_recent, 0);
        } else if (!strcmp(a, "--no-fidelity")) {
            o->fidelity = 0;
        } else if (!strcmp(a, "--membw")) {
            o->membw = 1;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else {
            fprintf(stderr, "locks bench: unknown option '%s' (see --help)\n", a);
            return 2;
        }
#undef INT_OPT
#undef NEED_VALUE
    }
    if (o->rank > LOCKS_MAX_RANK) {
        fprintf(stderr, "locks bench: --rank must be 1..%d\n", LOCKS_MAX_RANK);
        return 2;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double min_of(const double *x, int n) {
    double m = x[0];
    for (int i = 1; i < n; i++) m = x[i] < m ? x[i] : m;
    return m;
}

static double median(const double *x, int n) {
    double *t = malloc(sizeof(double) * (size_t)n);
    if (!t) return (double)NAN;
    memcpy(t, x, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

/* Summary bytes per (page, KV head) the method's format implies (docs/DESIGN.md §1). */
static size_t analytic_summary_bytes(int32_t d, int32_t r, locks_summary_prec prec) {
    if (prec == LOCKS_SUMMARY_F32) return 4u * (size_t)(d + r * d + LOCKS_PAGE * r);
    return (size_t)d + 2u + (size_t)(r * d + 1) / 2u + 2u * (size_t)r + (size_t)(LOCKS_PAGE * r) +
           2u * (size_t)r;
}

/* ---------------------------------------------------------------------------------- */
/* Host read bandwidth (--membw)                                                        */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_job;

static void *bw_worker(void *arg) {
    bw_job *j = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) s0 += j->p[i], s1 += j->p[i + 1], s2 += j->p[i + 2], s3 += j->p[i + 3];
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* Best of 5 passes summing a 512 MiB buffer with n threads, in GB/s. */
static double measure_read_gbps(int32_t n_threads) {
    const size_t bytes = (size_t)512 << 20, n = bytes / 8;
    uint64_t *buf = locks_alloc(n, 8);
    if (!buf) return 0.0;
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;
    if (n_threads > 64) n_threads = 64;
    double best = 0.0;
    uint64_t sink = 0;
    for (int rep = 0; rep < 5; rep++) {
        bw_job jobs[64];
        pthread_t tid[64];
        int ok[64] = {0};
        double t0 = locks_now_ms();
        for (int32_t t = 0; t < n_threads; t++) {
            size_t a = n / (size_t)n_threads * (size_t)t, b = t == n_threads - 1 ? n : n / (size_t)n_threads * (size_t)(t + 1);
            jobs[t] = (bw_job){buf + a, b - a, 0};
            if (t > 0) ok[t] = pthread_create(&tid[t], NULL, bw_worker, &jobs[t]) == 0;
        }
        bw_worker(&jobs[0]);
        for (int32_t t = 1; t < n_threads; t++) {
            if (ok[t]) pthread_join(tid[t], NULL);
            else bw_worker(&jobs[t]);
        }
        double ms = locks_now_ms() - t0;
        for (int32_t t = 0; t < n_threads; t++) sink += jobs[t].sum;
        double gbps = (double)bytes / (ms * 1e-3) / 1e9;
        if (gbps > best) best = gbps;
    }
    locks_free(buf);
    if (sink == 42) fprintf(stderr, " "); /* keep the sums live */
    return best;
}

/* ---------------------------------------------------------------------------------- */
/* One (shape, context): fill, then every budget                                       */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    const bench_opts *o;
    const bench_shape *sh;
    int32_t ctx;
    locks_cache *cache;
    int32_t *seq;          /* [batch] */
    locks_synth **synth;   /* [batch] */
    locks_kv_src *src;     /* [batch] */
    float **host_k, **host_v; /* fallback reference inputs when the cache is not host-readable */
    double fill_s;
    double load1; /* 1-minute load average before the timed steps (-1: unknown) */
} bench_ctx;

/* 1-minute load average from /proc/loadavg, -1 where there is none. */
static double load_average(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double l = -1.0;
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1.0;
        fclose(f);
    }
    return l;
}

static int report_error(const char *what, locks_status st) {
    fprintf(stderr, "locks bench: %s: %s\n", what, tool_why(st));
    return 1;
}

static void print_header(const bench_ctx *b, int32_t budget, size_t sb, size_t sba) {
    const bench_opts *o = b->o;
    printf("\nshape %s (%d q / %d kv heads, d=%d)  context %d  budget %d  batch %d  steps %d (median; "
           "%d warm-up)  threads %d  load %.2f\n",
           b->sh->name, b->sh->hq, b->sh->hkv, b->sh->d, b->ctx, budget, o->batch, o->steps, o->warmup,
           o->threads, b->load1);
    printf("summary %s rank %d: %zu B per (page, head), analytic %zu B (%+.2f%%); fill %.1f s; seed %llu\n",
           o->prec == LOCKS_SUMMARY_Q ? "q (int8/int4/int8)" : "f32", o->rank, sb, sba,
           100.0 * ((double)sb - (double)sba) / (double)sba, b->fill_s, (unsigned long long)o->seed);
    if (o->host_gbps > 0.0)
        printf("host read bandwidth (--membw, %d threads): %.2f GB/s\n", o->threads, o->host_gbps);
    printf("%-8s %9s %8s %8s %8s %8s %9s %9s %9s %7s | %8s %8s %6s %6s %6s %8s %7s %8s\n", "selector",
           "step_ms", "score", "select", "attend", "speedup", "meta_MB", "kv_MB", "dense_MB", "GB/s",
           "coverage", "oracle", "ratio", "recall", "needle", "rel_err", "cosine", "kern_err");
}

static void print_row(const bench_ctx *b, int32_t budget, locks_selector s, const sel_result *r,
                      double dense_ms, double dense_min, size_t sb, size_t sba) {
    const bench_opts *o = b->o;
    int n = o->steps;
    double ms = median(r->ms, n), sc = median(r->score_ms, n), se = median(r->select_ms, n),
           at = median(r->attend_ms, n);
    double meta = (double)r->bytes_meta / n, kv = (double)r->bytes_kv / n, dense = (double)r->bytes_dense / n;
    double gbps = (meta + kv) / (ms * 1e-3) / 1e9;
    double f = r->n_fid ? 1.0 / r->n_fid : (double)NAN;
    if (o->json) {
        printf("{\"shape\":\"%s\",\"hq\":%d,\"hkv\":%d,\"head_dim\":%d,\"context\":%d,\"budget\":%d,"
               "\"batch\":%d,\"steps\":%d,\"warmup\":%d,\"threads\":%d,\"rank\":%d,\"summary\":\"%s\","
               "\"backend\":\"%s\",\"seed\":%llu,\"load1\":%.3g,\"selector\":\"%s\",",
               b->sh->name, b->sh->hq, b->sh->hkv, b->sh->d, b->ctx, budget, o->batch, o->steps, o->warmup,
               o->threads, o->rank, o->prec == LOCKS_SUMMARY_Q ? "q" : "f32",
               o->backend == LOCKS_BACKEND_CPU ? "cpu" : "cuda", (unsigned long long)o->seed, b->load1,
               locks_selector_name(s));
        printf("\"dense_ms\":%.6g,\"step_ms\":%.6g,\"score_ms\":%.6g,\"select_ms\":%.6g,\"attend_ms\":%.6g,"
               "\"speedup\":%.6g,\"bytes_meta\":%.0f,\"bytes_kv\":%.0f,\"bytes_dense\":%.0f,"
               "\"bytes_step\":%.0f,\"gbps\":%.6g,\"summary_bytes\":%zu,\"summary_bytes_analytic\":%zu,",
               dense_ms, ms, sc, se, at, dense_ms / ms, meta, kv, dense, meta + kv, gbps, sb, sba);
        if (o->host_gbps > 0.0) printf("\"host_read_gbps\":%.6g,", o->host_gbps);
        printf("\"step_ms_min\":%.6g,\"dense_ms_min\":%.6g,", min_of(r->ms, n), dense_min);
        if (r->n_fid)
            printf("\"mass_coverage\":%.8g,\"oracle_mass_coverage\":%.8g,\"coverage_ratio\":%.8g,"
                   "\"coverage_ratio_min\":%.8g,\"oracle_recall\":%.8g,\"carrier_recall\":%.8g,"
                   "\"output_rel_err\":%.8g,"
                   "\"output_rel_err_max\":%.8g,\"cosine\":%.8g,\"kernel_rel_err\":%.6g,\"tokens\":%.6g,"
                   "\"fidelity_samples\":%d}\n",
                   r->cov * f, r->ocov * f, r->ratio * f, r->ratio_min, r->recall * f,
                   locks_metrics_carrier_recall(&r->carrier), r->err * f, r->err_max,
                   r->cos * f, r->kerr, r->tokens * f, r->n_fid);
        else
            printf("\"mass_coverage\":null,\"oracle_mass_coverage\":null,\"output_rel_err\":null}\n");
        return;
    }
    printf("%-8s %9.3f %8.3f %8.3f %8.3f %7.2fx %9.2f %9.2f %9.2f %7.2f | ", locks_selector_name(s), ms, sc, se,
           at, dense_ms / ms, meta / 1e6, kv / 1e6, dense / 1e6, gbps);
    if (r->n_fid)
        printf("%8.4f %8.4f %6.4f %6.3f %6.3f %8.2e %7.4f %8.1e\n", r->cov * f, r->ocov * f, r->ratio * f,
               r->recall * f, locks_metrics_carrier_recall(&r->carrier), r->err * f, r->cos * f, r->kerr);
    else
        printf("%8s %8s %6s %6s %6s %8s %7s %8s\n", "-", "-", "-", "-", "-", "-", "-", "-");
}

static int run_budget(bench_ctx *b, int32_t budget) {
    const bench_opts *o = b->o;
    const int32_t B = o->batch, Hq = b->sh->hq, H = b->sh->hkv, d = b->sh->d;
    const int32_t max_pages = (b->ctx + LOCKS_PAGE - 1) / LOCKS_PAGE;
    /* the selectors run: the requested ones, plus full for the dense baseline */
    locks_selector run[LOCKS_SEL_COUNT + 1];
    int n_run = 0, full_at = -1;
    for (int i = 0; i < o->n_sel; i++) {
        if (o->sel[i] == LOCKS_SEL_FULL) full_at = n_run;
        run[n_run++] = o->sel[i];
    }
    if (full_at < 0) full_at = n_run, run[n_run++] = LOCKS_SEL_FULL;

    int rc = 1;
    sel_result *res = calloc((size_t)n_run, sizeof *res);
    float *q = locks_alloc((size_t)B * Hq * d, sizeof(float));
    float *out = locks_alloc((size_t)B * Hq * d, sizeof(float));
    int32_t *pages = locks_alloc((size_t)B * H * max_pages, sizeof(int32_t));
    int32_t *npg = locks_alloc((size_t)B * H, sizeof(int32_t));
    locks_attn_ref *ref = calloc((size_t)B, sizeof *ref);
    int32_t *opages = locks_alloc((size_t)B * H * max_pages, sizeof(int32_t)); /* float64 oracle */
    int32_t *onpg = locks_alloc((size_t)B * H, sizeof(int32_t));
    if (!res || !q || !out || !pages || !npg || !ref || !opages || !onpg) {
        fprintf(stderr, "locks bench: out of memory\n");
        goto done;
    }
    for (int i = 0; i < n_run; i++) {
        res[i].ms = calloc((size_t)o->steps * 4, sizeof(double));
        if (!res[i].ms) goto done;
        res[i].score_ms = res[i].ms + o->steps;
        res[i].select_ms = res[i].ms + 2 * o->steps;
        res[i].attend_ms = res[i].ms + 3 * o->steps;
        res[i].ratio_min = (double)INFINITY;
    }
    locks_step_params sp = locks_step_default_params();
    sp.budget = budget;
    sp.n_sink = o->n_sink;
    sp.n_recent = o->n_recent;
    locks_selection sel = {pages, npg, max_pages};
    b->load1 = load_average();

    for (int step = 0; step < o->warmup + o->steps; step++) {
        int rec = step >= o->warmup, k = step - o->warmup;
        for (int32_t s = 0; s < B; s++) locks_synth_query(b->synth[s], step, q + (size_t)s * Hq * d);
        if (rec && o->fidelity) {
            for (int32_t s = 0; s < B; s++) {
                locks_status st = locks_attn_ref_compute(&b->src[s], q + (size_t)s * Hq * d, Hq, 0.0f,
                                                         o->threads, &ref[s]);
                if (st == LOCKS_OK)
                    st = locks_metrics_oracle_select(&ref[s], budget, o->n_sink, o->n_recent,
                                                     opages + (size_t)s * H * max_pages, onpg + (size_t)s * H,
                                                     max_pages);
                if (st != LOCKS_OK) {
                    report_error("reference attention", st);
                    goto done;
                }
            }
        }
        for (int i = 0; i < n_run; i++) {
            sp.selector = run[i];
            locks_step_stats stats;
            double t0 = locks_now_ms();
            locks_status st = locks_decode_step(b->cache, 0, b->seq, B, q, Hq, &sp, out, &sel, &stats);
            double t1 = locks_now_ms();
            if (st != LOCKS_OK) {
                fprintf(stderr, "locks bench: decode step (%s, budget %d): %s\n", locks_selector_name(run[i]),
                        budget, tool_why(st));
                goto done;
            }
            if (!rec) continue;
            sel_result *r = &res[i];
            r->ms[k] = t1 - t0;
            r->score_ms[k] = stats.score_ms;
            r->select_ms[k] = stats.select_ms;
            r->attend_ms[k] = stats.attend_ms;
            r->bytes_meta += stats.bytes_meta;
            r->bytes_kv += stats.bytes_kv;
            r->bytes_dense += stats.bytes_dense;
            if (!o->fidelity) continue;
            for (int32_t s = 0; s < B; s++) {
                locks_sel_metrics m;
                /* full ignores the budget: judge it against the dense oracle */
                int32_t eb = run[i] == LOCKS_SEL_FULL ? b->ctx : budget;
                st = locks_metrics_eval(&ref[s], pages + (size_t)s * H * max_pages, npg + (size_t)s * H,
                                        max_pages, eb, o->n_sink, o->n_recent, out + (size_t)s * Hq * d, &m);
                if (st != LOCKS_OK) {
                    report_error("metrics", st);
                    goto done;
                }
                r->cov += m.mass_coverage;
                r->ocov += m.oracle_mass_coverage;
                r->ratio += m.coverage_ratio;
                r->ratio_min = fmin(r->ratio_min, m.coverage_ratio);
                r->recall += m.oracle_recall;
                r->err += m.output_rel_err;
                r->err_max = fmax(r->err_max, m.output_rel_err_max);
                r->cos += m.cosine;
                r->kerr = fmax(r->kerr, m.kernel_rel_err);
                r->tokens += m.tokens;
                r->n_fid++;
                int32_t n_needles;
                const int32_t *needles = locks_synth_needles(b->synth[s], &n_needles);
                locks_metrics_carrier_add(&r->carrier, H, opages + (size_t)s * H * max_pages, onpg + (size_t)s * H,
                                          pages + (size_t)s * H * max_pages, npg + (size_t)s * H, max_pages,
                                          needles, n_needles);
            }
        }
        for (int32_t s = 0; s < B; s++) locks_attn_ref_free(&ref[s]);
    }

    size_t sb = locks_cache_summary_bytes(b->cache), sba = analytic_summary_bytes(d, o->rank, o->prec);
    double dense_ms = median(res[full_at].ms, o->steps);
    if (!o->json) print_header(b, budget, sb, sba);
    double dense_min = min_of(res[full_at].ms, o->steps);
    for (int i = 0; i < o->n_sel; i++) print_row(b, budget, run[i], &res[i], dense_ms, dense_min, sb, sba);
    fflush(stdout);
    rc = 0;
done:
    if (res)
        for (int i = 0; i < n_run; i++) free(res[i].ms);
    free(res);
    if (ref)
        for (int32_t s = 0; s < B; s++) locks_attn_ref_free(&ref[s]);
    free(ref);
    locks_free(q);
    locks_free(out);
    locks_free(pages);
    locks_free(npg);
    locks_free(opages);
    locks_free(onpg);
    return rc;
}

/* Reference inputs on the host when the cache is not host-readable (CUDA): the same
 * synthetic K/V, rounded through fp16 as the cache stores them. */
static locks_status host_copy(bench_ctx *b, int32_t s) {
    const int32_t H = b->sh->hkv, d = b->sh->d;
    size_t n = (size_t)b->ctx * H * d;
    b->host_k[s] = locks_alloc(n, sizeof(float));
    b->host_v[s] = locks_alloc(n, sizeof(float));
    if (!b->host_k[s] || !b->host_v[s]) return LOCKS_ERR_OOM;
    locks_status st = locks_synth_kv(b->synth[s], 0, b->ctx, b->host_k[s], b->host_v[s]);
    if (st != LOCKS_OK) return st;
    for (size_t i = 0; i < n; i++) {
        b->host_k[s][i] = locks_f16_to_f32(locks_f32_to_f16(b->host_k[s][i]));
        b->host_v[s][i] = locks_f16_to_f32(locks_f32_to_f16(b->host_v[s][i]));
    }
    b->src[s] = locks_kv_src_arrays(b->ctx, H, d, b->host_k[s], b->host_v[s]);
    return LOCKS_OK;
}

static int run_context(const bench_opts *o, const bench_shape *sh, int32_t ctx) {
    bench_ctx b;
    memset(&b, 0, sizeof b);
    b.o = o;
    b.sh = sh;
    b.ctx = ctx;
    const int32_t B = o->batch;
    int rc = 1;
    locks_status st;
    b.seq = calloc((size_t)B, sizeof *b.seq);
    b.synth = calloc((size_t)B, sizeof *b.synth);
    b.src = calloc((size_t)B, sizeof *b.src);
    b.host_k = calloc((size_t)B, sizeof *b.host_k);
    b.host_v = calloc((size_t)B, sizeof *b.host_v);
    if (!b.seq || !b.synth || !b.src || !b.host_k || !b.host_v) goto done;

    locks_cache_params cp = locks_cache_default_params();
    cp.selectors = LOCKS_SEL_ALL; /* every selector is compared: keep all their metadata */
    cp.n_layers = 1;
    cp.n_kv_heads = sh->hkv;
    cp.head_dim = sh->d;
    cp.n_pages = B * ((ctx + LOCKS_PAGE - 1) / LOCKS_PAGE);
    cp.max_seqs = B;
    cp.rank = o->rank;
    cp.summary_prec = o->prec;
    cp.backend = o->backend;
    cp.n_threads = o->threads;
    b.cache = locks_cache_init(cp, &st);
    if (!b.cache) {
        if (st == LOCKS_ERR_UNSUPPORTED && o->backend == LOCKS_BACKEND_CUDA)
            fprintf(stderr, "locks bench: the CUDA backend is not available in this build yet\n");
        rc = report_error("cache init", st);
        goto done;
    }
    double t0 = locks_now_ms();
    for (int32_t s = 0; s < B; s++) {
        locks_synth_params p = locks_synth_default_params(sh->hkv, sh->hq, sh->d, ctx,
                                                          o->seed + 1000003ull * (uint64_t)s);
        b.synth[s] = locks_synth_init(p, &st);
        if (!b.synth[s]) {
            rc = report_error("synthetic workload", st);
            goto done;
        }
        if ((st = locks_cache_seq_add(b.cache, &b.seq[s])) != LOCKS_OK ||
            (st = locks_synth_fill(b.synth[s], b.cache, b.seq[s], 0, o->threads)) != LOCKS_OK) {
            rc = report_error("filling the cache", st);
            goto done;
        }
        if (o->fidelity) {
            st = locks_kv_src_cache(b.cache, b.seq[s], 0, &b.src[s]);
            if (st == LOCKS_ERR_UNSUPPORTED) st = host_copy(&b, s);
            if (st != LOCKS_OK) {
                rc = report_error("reference inputs", st);
                goto done;
            }
        }
    }
    b.fill_s = (locks_now_ms() - t0) / 1e3;
    if (!o->json)
        fprintf(stderr, "locks bench: %s context %d x %d filled in %.1f s\n", sh->name, ctx, B, b.fill_s);
    for (int i = 0; i < o->n_budget; i++)
        if ((rc = run_budget(&b, o->budget[i])) != 0) goto done;
    rc = 0;
done:
    for (int32_t s = 0; b.synth && s < B; s++) locks_synth_free(b.synth[s]);
    for (int32_t s = 0; b.host_k && s < B; s++) locks_free(b.host_k[s]), locks_free(b.host_v[s]);
    locks_cache_free(b.cache);
    free(b.seq);
    free(b.synth);
    free(b.src);
    free(b.host_k);
    free(b.host_v);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++) /* the GPU benchmark has its own driver */
        if (!strcmp(argv[i], "--backend") && !strcmp(argv[i + 1], "cuda")) return cmd_bench_cuda(argc, argv);
    bench_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc == 1) return 0; /* --help */
    if (rc) return rc;
    if (o.backend == LOCKS_BACKEND_CUDA) {
#ifndef LOCKS_HAVE_CUDA
        fprintf(stderr, "locks bench: --backend cuda: this build has no CUDA backend "
                        "(configure with -DLOCKS_CUDA=ON on a machine with nvcc)\n");
        return 2;
#endif
    }
    if (o.membw) o.host_gbps = measure_read_gbps(o.threads);
    for (int i = 0; i < o.n_shapes; i++)
        for (int j = 0; j < o.n_context; j++)
            if ((rc = run_context(&o, o.shape[i], o.context[j])) != 0) return rc;
    return 0;
}
