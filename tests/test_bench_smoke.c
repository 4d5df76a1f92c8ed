/*
 * test_bench_smoke.c — runs the real `locks bench` binary (built next to this test) at
 * a tiny size with --json, parses every line as a JSON object and checks the keys the
 * contract promises, that `full` is exact (coverage 1, output error 0), that the oracle
 * scores ratio 1, that LOCKS gets a coverage ratio >= 0.98 and an output error within 5%
 * of the oracle's (what it achieves, with margin), that the summary bytes the cache
 * holds per page match the formula (802 at d = 128, r = 8), and that bad options fail
 * with exit code 2. Performance targets live in bench/RESULTS.md, not here.
 */
#include "test_util.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>


/* ---------------------------------------------------------------------------------- */
/* A flat JSON object: string keys; string, number, null or boolean values             */
/* ---------------------------------------------------------------------------------- */

#define MAX_KEYS 64
typedef struct {
    int n;
    char key[MAX_KEYS][48];
    char str[MAX_KEYS][48]; /* string values (empty for others) */
    double num[MAX_KEYS];   /* numbers; NAN for strings and null */
} jobj;

static const char *ws(const char *p) {
    while (isspace((unsigned char)*p)) p++;
    return p;
}

static const char *jstring(const char *p, char *out, size_t cap) {
    if (*p != '"') return NULL;
    p++;
    size_t n = 0;
    while (*p && *p != '"') {
        if (*p == '\\') return NULL; /* the bench never escapes */
        if (n + 1 < cap) out[n++] = *p;
        p++;
    }
    if (*p != '"') return NULL;
    out[n] = 0;
    return p + 1;
}

/* 1 if line is exactly one flat object (then *o is filled), else 0. */
static int jparse(const char *line, jobj *o) {
    memset(o, 0, sizeof *o);
    const char *p = ws(line);
    if (*p++ != '{') return 0;
    p = ws(p);
    if (*p == '}') return *ws(p + 1) == 0;
    for (;;) {
        if (o->n == MAX_KEYS) return 0;
        p = jstring(ws(p), o->key[o->n], sizeof o->key[0]);
        if (!p) return 0;
        p = ws(p);
        if (*p++ != ':') return 0;
        p = ws(p);
        o->num[o->n] = (double)NAN;
        if (*p == '"') {
            p = jstring(p, o->str[o->n], sizeof o->str[0]);
            if (!p) return 0;
        } else if (!strncmp(p, "null", 4)) {
            p += 4;
        } else if (!strncmp(p, "true", 4) || !strncmp(p, "false", 5)) {
            p += *p == 't' ? 4 : 5;
        } else {
            char *end;
            o->num[o->n] = strtod(p, &end);
            if (end == p) return 0;
            p = end;
        }
        o->n++;
        p = ws(p);
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p++ != '}') return 0;
        return *ws(p) == 0;
    }
}

static int jfind(const jobj *o, const char *k) {
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->key[i], k)) return i;
    return -1;
}

static double jnum(const jobj *o, const char *k) {
    int i = jfind(o, k);
    return i < 0 ? (double)NAN : o->num[i];
}

/* ---------------------------------------------------------------------------------- */

static char bin[4096];

/* Runs `locks <args>`, collects stdout lines into objs; returns the exit status. */
static int run(const char *args, jobj *objs, int max, int *n_objs, int *n_bad) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>/dev/null", bin, args);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char line[8192];
    *n_objs = 0;
    *n_bad = 0;
    while (fgets(line, sizeof line, f)) {
        if (*n_objs < max && jparse(line, &objs[*n_objs])) (*n_objs)++;
        else (*n_bad)++;
    }
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *required[] = {"shape",       "context",      "budget",        "selector",
                                 "dense_ms",    "step_ms",      "speedup",       "bytes_dense",
                                 "bytes_step",  "mass_coverage", "oracle_mass_coverage",
                                 "output_rel_err"};

static void check_run(const char *args, int expect_d128) {
    jobj objs[8];
    int n, bad;
    int rc = run(args, objs, 8, &n, &bad);
    test_cond(rc == 0, "`locks %s` exit code %d", args, rc);
    test_cond(n == 3 && bad == 0, "`locks %s`: %d JSON objects, %d unparsable lines (want 3, 0)", args, n, bad);
    double oracle_err = (double)NAN; /* LOCKS is held to the oracle's error below */
    for (int i = 0; i < n; i++)
        if (jfind(&objs[i], "selector") >= 0 && !strcmp(objs[i].str[jfind(&objs[i], "selector")], "oracle"))
            oracle_err = jnum(&objs[i], "output_rel_err");
    for (int i = 0; i < n; i++) {
        const jobj *o = &objs[i];
        for (size_t k = 0; k < sizeof required / sizeof required[0]; k++)
            test_cond(jfind(o, required[k]) >= 0, "object %d lacks key %s", i, required[k]);
        const char *sel = o->str[jfind(o, "selector") >= 0 ? jfind(o, "selector") : 0];
        double cov = jnum(o, "mass_coverage"), ocov = jnum(o, "oracle_mass_coverage");
        double ratio = jnum(o, "coverage_ratio"), err = jnum(o, "output_rel_err");
        double kerr = jnum(o, "kernel_rel_err");
        test_cond(jnum(o, "step_ms") > 0 && jnum(o, "dense_ms") > 0, "%s: times not positive", sel);
        test_cond(jnum(o, "bytes_dense") > 0 && jnum(o, "bytes_step") > 0, "%s: bytes not positive", sel);
        test_cond(kerr >= 0 && kerr < 1e-5, "%s: library output vs float64 o_S: %g", sel, kerr);
        test_cond(jnum(o, "summary_bytes") == jnum(o, "summary_bytes_analytic"), "%s: summary bytes %g vs %g", sel,
               jnum(o, "summary_bytes"), jnum(o, "summary_bytes_analytic"));
        if (expect_d128) test_cond(jnum(o, "summary_bytes") == 802, "d=128 r=8: %g bytes", jnum(o, "summary_bytes"));
        if (!strcmp(sel, "full")) {
            test_cond(cov == 1.0 || fabs(cov - 1.0) < 1e-12, "full: coverage %.15g", cov);
            test_cond(fabs(ratio - 1.0) < 1e-12, "full: ratio %.15g", ratio);
            test_cond(err == 0.0, "full: output_rel_err %g (want exactly 0)", err);
            test_cond(jnum(o, "bytes_step") == jnum(o, "bytes_dense"), "full: bytes_step != bytes_dense");
        } else if (!strcmp(sel, "oracle")) {
            test_cond(fabs(ratio - 1.0) < 1e-9 && fabs(cov - ocov) < 1e-9, "oracle: ratio %.12g", ratio);
        } else if (!strcmp(sel, "locks")) {
            /* What the method achieves on these workloads (seeds 1..11 at both shapes,
             * 2026-12-01): coverage ratio >= 0.998, output error within 0.3% of the
             * oracle's (0.44-0.79: the budget covers 56-72% of the mass). Bounds with
             * margin: ratio >= 0.98, error within 5% of the oracle's + 0.01. */
            test_cond(ratio >= 0.98 && ratio <= 1.0 + 1e-12, "locks: coverage ratio %.12g (want >= 0.98)", ratio);
            test_cond(cov >= 0.5 && cov <= ocov + 1e-9, "locks: coverage %.6g (oracle %.6g)", cov, ocov);
            test_cond(err > 0 && err < 1.0 && fabs(err - oracle_err) <= 0.05 * oracle_err + 0.01,
                      "locks: output_rel_err %g vs the oracle's %g (want within 5%% + 0.01)", err, oracle_err);
            test_cond(jnum(o, "bytes_step") < jnum(o, "bytes_dense"), "locks reads as much as dense");
        } else {
            test_cond(0, "unexpected selector '%s'", sel);
        }
    }
}

int main(int argc, char **argv) {
    (void)argc;
    const char *slash = strrchr(argv[0], '/');
    size_t dir = slash ? (size_t)(slash - argv[0]) + 1 : 0;
    snprintf(bin, sizeof bin, "%.*slocks", (int)dir, argv[0]);

    check_run("bench --shape smollm2 --context 1000 --budget 128 --steps 2 --warmup 1 --threads 2 --json", 0);
    check_run("bench --shape llama3-8b --context 700 --budget 96 --steps 1 --warmup 0 --threads 1 --json "
              "--selector locks,oracle,full --seed 7",
              1);

    jobj objs[2];
    int n, bad;
    test_cond(run("bench --shape nope", objs, 2, &n, &bad) == 2, "unknown shape: exit code not 2");
    test_cond(run("bench --budget 12x", objs, 2, &n, &bad) == 2, "bad budget: exit code not 2");
    test_cond(run("bench --frobnicate", objs, 2, &n, &bad) == 2, "unknown option: exit code not 2");
#ifndef LOCKS_HAVE_CUDA
    test_cond(run("bench --backend cuda --context 64 --steps 1", objs, 2, &n, &bad) == 2,
           "--backend cuda in a CPU-only build: exit code not 2");
#endif
    test_cond(run("bench --help", objs, 2, &n, &bad) == 0, "--help: exit code not 0");
    return test_report("test_bench_smoke");
}
