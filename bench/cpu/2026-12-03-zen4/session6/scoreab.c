/* scratch: interleaved A/B of locks_score from two builds' liblocks.so (dlopen, RTLD_LOCAL) */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "locks.h"
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec * 1e-6; }
static unsigned long long rs = 88172645463325252ULL;
static double rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (double)(rs >> 11) / 9007199254740992.0; }
static float nrm(void) { double u = rnd() + 1e-12, v = rnd(); return (float)(sqrt(-2 * log(u)) * cos(6.283185307 * v)); }
typedef struct {
    locks_cache_params (*defp)(void);
    locks_cache *(*init)(locks_cache_params, locks_status *);
    locks_status (*seq_add)(locks_cache *, int32_t *);
    locks_status (*append)(locks_cache *, int32_t, int32_t);
    locks_status (*write)(locks_cache *, int32_t, int32_t, int32_t, int32_t, const float *, const float *);
    locks_step_params (*stepp)(void);
    locks_status (*score)(locks_cache *, int32_t, int32_t, const float *, int32_t, const locks_step_params *, float *);
    locks_cache *c; int32_t seq;
} lib;
static void load(lib *L, const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); exit(1); }
    *(void **)&L->defp = dlsym(h, "locks_cache_default_params");
    *(void **)&L->init = dlsym(h, "locks_cache_init");
    *(void **)&L->seq_add = dlsym(h, "locks_cache_seq_add");
    *(void **)&L->append = dlsym(h, "locks_cache_append");
    *(void **)&L->write = dlsym(h, "locks_cache_write");
    *(void **)&L->stepp = dlsym(h, "locks_step_default_params");
    *(void **)&L->score = dlsym(h, "locks_score");
    if (getenv("ISA")) { int (*set)(int); *(void **)&set = dlsym(h, "locks_cpu_set_isa"); if (set(atoi(getenv("ISA")))) exit(3); }
}
int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
    int H = atoi(argv[3]), G = atoi(argv[4]), d = atoi(argv[5]), len = atoi(argv[6]), rounds = atoi(argv[7]), threads = argc > 8 ? atoi(argv[8]) : 1;
    lib L[2];
    load(&L[0], argv[1]);
    load(&L[1], argv[2]);
    float *k = malloc(sizeof(float) * (size_t)len * H * d), *v = malloc(sizeof(float) * (size_t)len * H * d);
    for (size_t i = 0; i < (size_t)len * H * d; i++) { k[i] = nrm(); v[i] = nrm(); }
    float *q = malloc(sizeof(float) * H * G * d);
    float *m[2] = {malloc(sizeof(float) * H * (len / 16 + 1)), malloc(sizeof(float) * H * (len / 16 + 1))};
    for (int i = 0; i < H * G * d; i++) q[i] = nrm();
    for (int b = 0; b < 2; b++) {
        locks_cache_params cp = L[b].defp();
        cp.n_layers = 1; cp.n_kv_heads = H; cp.head_dim = d; cp.rank = 8; cp.n_pages = len / 16 + 4; cp.max_seqs = 1; cp.n_threads = threads;
        locks_status st;
        L[b].c = L[b].init(cp, &st);
        if (!L[b].c || L[b].seq_add(L[b].c, &L[b].seq) || L[b].append(L[b].c, L[b].seq, len) || L[b].write(L[b].c, L[b].seq, 0, 0, len, k, v)) return 1;
    }
    double *t[2] = {malloc(sizeof(double) * rounds), malloc(sizeof(double) * rounds)};
    for (int r = 0; r < rounds; r++)
        for (int b = 0; b < 2; b++) {
            locks_step_params p = L[b].stepp();
            double best = 1e9;
            for (int i = 0; i < 20; i++) {
                double t0 = now_ms();
                if (L[b].score(L[b].c, 0, L[b].seq, q, H * G, &p, m[b])) return 1;
                double e = now_ms() - t0;
                best = e < best ? e : best;
            }
            t[b][r] = best;
        }
    int same = !memcmp(m[0], m[1], sizeof(float) * H * (len / 16));
    double ratio[4096];
    for (int r = 0; r < rounds; r++) ratio[r] = t[0][r] / t[1][r];
    qsort(ratio, rounds, sizeof(double), cmpd);
    qsort(t[0], rounds, sizeof(double), cmpd);
    qsort(t[1], rounds, sizeof(double), cmpd);
    printf("H %d G %d d %d len %d threads %d: A median %.3f ms, B median %.3f ms; A/B per round: median %.3fx (min %.3f, max %.3f); masses %s\n",
           H, G, d, len, threads, t[0][rounds / 2], t[1][rounds / 2], ratio[rounds / 2], ratio[0], ratio[rounds - 1], same ? "bit-identical" : "DIFFER");
    return 0;
}
