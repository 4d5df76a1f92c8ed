/*
 * cmd_bench_cp.c — `locks bench --ranks N`: the context-parallel decode step (src/cp.c)
 * on the synthetic workload (src/eval/synth.h) at the Llama-3.1-8B layer shape (32 q / 8 KV
 * heads, d = 128), one layer, batch 1.
 *
 * Two ways to run N ranks:
 *  - one process, N threads, LOCAL communicator (no --cp-rank): the CPU simulation;
 *  - one process per GPU, NCCL communicator: --cp-rank I --nccl-id FILE (rank 0 writes a
 *    fresh ncclUniqueId to FILE, the others wait for it). scripts/cp-bench.sh starts the
 *    N processes. `--backend cuda` selects this mode's device (GPU I for rank I).
 *
 * What runs where (docs/CONTEXT_PARALLEL.md): the per-rank compute (score, select,
 * attend) is the CPU backend on the rank's shard; with NCCL the three all-gathers of a
 * step go through the rank's GPU (host-staged). There is no device-side CP step yet, so
 * step times under NCCL are CPU compute plus GPU collectives, not a GPU step.
 *
 * Every rank holds the contiguous page range locks_cp_partition gives it, filled from
 * the synthetic generator at the global token positions (the same data for any N). Each
 * step draws fresh queries (the same on every rank, from the step number). Printed per
 * context by rank 0: medians over the recorded steps of the step wall time (which, since
 * the step ends in a collective, is the slowest rank's), the phase times, the time in
 * collectives, and per-rank bytes (summaries, K/V, sent to collectives).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cmds.h"
#include "locks.h"
#include "eval/synth.h"
#include "util.h"

#define MAX_CTX 8
#define MAX_RANKS 64

typedef struct {
    int32_t ranks, cp_rank; /* cp_rank -1: LOCAL (all ranks in this process) */
    const char *id_file;
    int32_t context[MAX_CTX];
    int n_context;
    int32_t budget, steps, warmup, threads, hq, hkv, d;
    locks_selector sel;
    locks_backend backend;
    uint64_t seed;
} cp_opts;

static void usage(void) {
    fprintf(stderr,
            "usage: locks bench --ranks N [options]\n"
            "  --ranks N            context-parallel ranks                      (required)\n"
            "  --cp-rank I          this process is rank I (NCCL, one process per GPU)\n"
            "  --nccl-id FILE       NCCL unique id file (rank 0 writes, others read)\n"
            "  --backend cpu|cuda   cuda: NCCL collectives on GPU I (needs --cp-rank)  [cpu]\n"
            "  --context LIST       tokens, k/M suffixes          [1M,2M,4M]\n"
            "  --budget N           token budget                  [2048]\n"
            "  --selector NAME      locks|oracle|quest|full        [locks]\n"
            "  --steps N            recorded steps                [20]\n"
            "  --warmup N           unrecorded first steps        [3]\n"
            "  --threads N          CPU threads per rank          [nproc / ranks in LOCAL mode, nproc]\n"
            "  --seed N             workload seed                 [1]\n");
}

static int parse(int argc, char **argv, cp_opts *o) {
    memset(o, 0, sizeof *o);
    o->cp_rank = -1;
    o->context[0] = 1 << 20, o->context[1] = 2 << 20, o->context[2] = 4 << 20;
    o->n_context = 3;
    o->budget = 2048, o->steps = 20, o->warmup = 3, o->hq = 32, o->hkv = 8, o->d = 128;
    o->sel = LOCKS_SEL_LOCKS;
    o->seed = 1;
    long np = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = v != NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 1;
        } else if (!strcmp(a, "--ranks")) ok = ok && args_parse_int(v, 1, INT32_MAX, &o->ranks) && o->ranks <= MAX_RANKS;
        else if (!strcmp(a, "--cp-rank")) ok = ok && args_parse_int(v, 0, INT32_MAX, &o->cp_rank);
        else if (!strcmp(a, "--nccl-id")) o->id_file = v;
        else if (!strcmp(a, "--backend")) {
            ok = ok && (!strcmp(v, "cpu") || !strcmp(v, "cuda"));
            if (ok) o->backend = strcmp(v, "cuda") ? LOCKS_BACKEND_CPU : LOCKS_BACKEND_CUDA;
        } else if (!strcmp(a, "--context")) ok = ok && (o->n_context = args_parse_ints(v, o->context, MAX_CTX, 1, INT32_MAX)) > 0;
        else if (!strcmp(a, "--budget")) ok = ok && args_parse_int(v, 1, INT32_MAX, &o->budget);
        else if (!strcmp(a, "--steps")) ok = ok && args_parse_int(v, 1, INT32_MAX, &o->steps);
        else if (!strcmp(a, "--warmup")) ok = ok && args_parse_int(v, 0, INT32_MAX, &o->warmup);
        else if (!strcmp(a, "--threads")) ok = ok && args_parse_int(v, 1, INT32_MAX, &o->threads);
        else if (!strcmp(a, "--seed")) ok = ok && args_parse_int(v, 0, INT32_MAX, (int32_t *)&o->seed);
        else if (!strcmp(a, "--selector")) ok = ok && locks_selector_parse(v, &o->sel) == LOCKS_OK;
        else {
            fprintf(stderr, "locks bench --ranks: unknown option %s\n", a);
            usage();
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "locks bench --ranks: bad value for %s\n", a);
            return 2;
        }
        i++;
    }
    if (o->ranks < 1) {
        usage();
        return 2;
    }
    if (o->cp_rank >= o->ranks || (o->cp_rank >= 0 && !o->id_file)) {
        fprintf(stderr, "locks bench --ranks: --cp-rank needs 0 <= I < N and --nccl-id FILE\n");
        return 2;
    }
    if (o->backend == LOCKS_BACKEND_CUDA && o->cp_rank < 0) {
        fprintf(stderr, "locks bench --ranks: --backend cuda runs one process per GPU: "
                        "give --cp-rank and --nccl-id (scripts/cp-bench.sh does)\n");
        return 2;
    }
    if (!o->threads) {
        long t = o->cp_rank < 0 ? np / o->ranks : np;
        o->threads = t > 0 ? (int32_t)t : 1;
    }
    return 0;
}

/* ---- the NCCL id file: rank 0 writes it atomically, the others wait for it ---- */

static int id_exchange(const cp_opts *o, uint8_t *id) {
    if (o->cp_rank == 0) {
        locks_status st = locks_cp_nccl_unique_id(id);
        if (st != LOCKS_OK) {
            fprintf(stderr, "locks bench: NCCL unique id: %s\n", tool_why(st));
            return 1;
        }
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", o->id_file);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(id, 1, LOCKS_CP_NCCL_ID_BYTES, f) != LOCKS_CP_NCCL_ID_BYTES || fclose(f) != 0 ||
            rename(tmp, o->id_file) != 0) {
            fprintf(stderr, "locks bench: cannot write %s\n", o->id_file);
            return 1;
        }
        return 0;
    }
    for (int tries = 0; tries < 1200; tries++) { /* 120 s */
        FILE *f = fopen(o->id_file, "rb");
        if (f) {
            size_t n = fread(id, 1, LOCKS_CP_NCCL_ID_BYTES, f);
            fclose(f);
            if (n == LOCKS_CP_NCCL_ID_BYTES) return 0;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "locks bench: rank %d: no NCCL id in %s after 120 s\n", o->cp_rank, o->id_file);
    return 1;
}

/* ---- one rank ---- */

typedef struct {
    const cp_opts *o;
    int32_t rank, context;
    locks_cp_comm *comm;
    const locks_synth *syn;
    locks_status st;
    double *step_ms;          /* [steps] */
    locks_cp_stats *stats;    /* [steps] */
    double fill_ms;
    int32_t tok0, n_tok;
} rank_run;

static void *rank_main(void *arg) {
    rank_run *r = arg;
    const cp_opts *o = r->o;
    const int32_t P = LOCKS_PAGE;
    locks_cp_partition(r->context, o->ranks, r->rank, &r->tok0, &r->n_tok);
    locks_cache_params cp = locks_cache_default_params();
    cp.selectors = LOCKS_SEL_ALL; /* every selector is compared: keep all their metadata */
    cp.n_layers = 1;
    cp.n_kv_heads = o->hkv;
    cp.head_dim = o->d;
    cp.n_pages = r->n_tok / P + 2;
    cp.max_seqs = 1;
    cp.n_threads = o->threads;
    locks_cache *c = locks_cache_init(cp, &r->st);
    float *q = malloc(sizeof(float) * (size_t)o->hq * o->d), *out = malloc(sizeof(float) * (size_t)o->hq * o->d);
    const size_t chunk = 4096;
    float *k = malloc(sizeof(float) * chunk * o->hkv * o->d), *v = malloc(sizeof(float) * chunk * o->hkv * o->d);
    int32_t seq = -1;
    if (!c || !q || !out || !k || !v) {
        if (r->st == LOCKS_OK) r->st = LOCKS_ERR_OOM;
        goto done; /* the other ranks will wait in their first collective: report and exit */
    }
    double t0 = locks_now_ms();
    if (r->n_tok > 0) {
        if ((r->st = locks_cache_seq_add(c, &seq)) != LOCKS_OK) goto done;
        if ((r->st = locks_cache_append(c, seq, r->n_tok)) != LOCKS_OK) goto done;
        for (int32_t t = 0; t < r->n_tok; t += (int32_t)chunk) {
            const int32_t n = r->n_tok - t < (int32_t)chunk ? r->n_tok - t : (int32_t)chunk;
            if ((r->st = locks_synth_kv(r->syn, r->tok0 + t, n, k, v)) != LOCKS_OK) goto done;
            if ((r->st = locks_cache_write(c, seq, 0, t, n, k, v)) != LOCKS_OK) goto done;
        }
    }
    r->fill_ms = locks_now_ms() - t0;
    locks_cp_shard sh = {c, seq, r->tok0 / P, r->context};
    locks_step_params p = locks_step_default_params();
    p.selector = o->sel;
    p.budget = o->budget;
    for (int32_t s = 0; s < o->warmup + o->steps; s++) {
        if ((r->st = locks_synth_query(r->syn, s, q)) != LOCKS_OK) goto done;
        locks_cp_stats cs;
        double ts = locks_now_ms();
        r->st = locks_cp_decode_step(r->comm, &sh, 0, q, o->hq, &p, out, NULL, &cs);
        double te = locks_now_ms();
        if (r->st != LOCKS_OK) goto done;
        if (s >= o->warmup) {
            r->step_ms[s - o->warmup] = te - ts;
            r->stats[s - o->warmup] = cs;
        }
    }
done:
    locks_cache_free(c);
    free(q);
    free(out);
    free(k);
    free(v);
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_d);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Medians of one rank's recorded steps, printed as one line. */
static void report(const cp_opts *o, const rank_run *r, const char *comm_name) {
    const int n = o->steps;
    double *tmp = malloc(sizeof(double) * (size_t)n * 6);
    double *st = tmp, *sc = tmp + n, *se = tmp + 2 * n, *at = tmp + 3 * n, *cm = tmp + 4 * n;
    for (int i = 0; i < n; i++) {
        st[i] = r->step_ms[i];
        sc[i] = r->stats[i].score_ms;
        se[i] = r->stats[i].select_ms;
        at[i] = r->stats[i].attend_ms;
        cm[i] = r->stats[i].comm_ms;
    }
    const locks_cp_stats *l = &r->stats[n - 1];
    printf("cp ranks=%d rank=%d comm=%s compute=cpu shape=llama3-8b ctx=%d tokens_on_rank=%d budget=%d "
           "selector=%s step_ms=%.3f score_ms=%.3f select_ms=%.3f attend_ms=%.3f comm_ms=%.3f "
           "bytes_meta=%llu bytes_kv=%llu bytes_sent=%llu collectives=%d fill_s=%.1f threads=%d\n",
           o->ranks, r->rank, comm_name, r->context, r->n_tok, o->budget, locks_selector_name(o->sel),
           median(st, n), median(sc, n), median(se, n), median(at, n), median(cm, n),
           (unsigned long long)l->bytes_meta, (unsigned long long)l->bytes_kv, (unsigned long long)l->bytes_sent,
           l->n_collectives, r->fill_ms / 1000.0, o->threads);
    free(tmp);
}

/* comms[n_here]: the ranks this process runs (all of them in LOCAL mode, one with NCCL);
 * made once per process: an NCCL unique id serves one communicator only. */
static int run_context(const cp_opts *o, int32_t context, locks_cp_comm **comms) {
    locks_status err;
    locks_synth_params sp = locks_synth_default_params(o->hkv, o->hq, o->d, context, o->seed);
    locks_synth *syn = locks_synth_init(sp, &err);
    if (!syn) {
        fprintf(stderr, "locks bench: synth: %s\n", tool_why(err));
        return 1;
    }
    const int local = o->cp_rank < 0;
    const int32_t n_here = local ? o->ranks : 1;
    rank_run *runs = calloc((size_t)n_here, sizeof *runs);
    pthread_t th[MAX_RANKS];
    int rc = 0;
    for (int32_t i = 0; i < n_here; i++) {
        rank_run *r = &runs[i];
        r->o = o;
        r->rank = local ? i : o->cp_rank;
        r->context = context;
        r->syn = syn;
        r->step_ms = calloc((size_t)o->steps, sizeof(double));
        r->stats = calloc((size_t)o->steps, sizeof(locks_cp_stats));
        r->comm = comms[i];
    }
    for (int32_t i = 0; i < n_here; i++) pthread_create(&th[i], NULL, rank_main, &runs[i]);
    for (int32_t i = 0; i < n_here; i++) pthread_join(th[i], NULL);
    for (int32_t i = 0; i < n_here; i++) {
        if (runs[i].st != LOCKS_OK) {
            fprintf(stderr, "locks bench: rank %d, context %d: %s\n", runs[i].rank, context,
                    tool_why(runs[i].st));
            rc = 1;
        } else if (runs[i].rank == 0 || !local) {
            report(o, &runs[i], local ? "local" : "nccl");
        }
    }
    fflush(stdout);
    for (int32_t i = 0; i < n_here; i++) {
        free(runs[i].step_ms);
        free(runs[i].stats);
    }
    free(runs);
    locks_synth_free(syn);
    return rc;
}

int cmd_bench_cp(int argc, char **argv) {
    cp_opts o;
    int rc = parse(argc, argv, &o);
    if (rc == 1) return 0;
    if (rc) return rc;
    uint8_t id[LOCKS_CP_NCCL_ID_BYTES];
    locks_cp_group *group = NULL;
    if (o.cp_rank >= 0) {
        /* NVLink multicast stays off (the device README); the library sets it too */
        setenv("NCCL_NVLS_ENABLE", "0", 1);
        if (id_exchange(&o, id)) return 1;
    } else {
        locks_status err;
        group = locks_cp_group_init(o.ranks, &err);
        if (!group) {
            fprintf(stderr, "locks bench: %s\n", tool_why(err));
            return 1;
        }
    }
    const int32_t n_here = o.cp_rank >= 0 ? 1 : o.ranks;
    locks_cp_comm *comms[MAX_RANKS] = {0};
    for (int32_t i = 0; i < n_here && rc == 0; i++) {
        const int32_t rank = o.cp_rank >= 0 ? o.cp_rank : i;
        locks_cp_comm_params cp = {o.cp_rank >= 0 ? LOCKS_CP_NCCL : LOCKS_CP_LOCAL, o.ranks, rank, group,
                                   o.cp_rank >= 0 ? id : NULL, o.cp_rank >= 0 ? o.cp_rank : 0};
        locks_status err;
        comms[i] = locks_cp_comm_init(cp, &err);
        if (!comms[i]) {
            /* NCCL init is collective: the other processes fail or time out too */
            fprintf(stderr, "locks bench: rank %d: communicator: %s\n", rank, tool_why(err));
            rc = 1;
        }
    }
    for (int i = 0; i < o.n_context && rc == 0; i++) rc = run_context(&o, o.context[i], comms);
    for (int32_t i = 0; i < n_here; i++) locks_cp_comm_free(comms[i]);
    locks_cp_group_free(group);
    return rc;
}
