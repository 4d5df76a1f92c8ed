/*
 * sampler_greedy.c — what a greedy speculation position cost before and after commit
 * 58cc13b: locks_sampler_probs + locks_sampler_draw (the one-hot route the rejection
 * test took) against locks_sampler_sample (the argmax the round now takes), over
 * SmolLM2's 49,152 logits, best of 200. Not part of the build. From the repository root:
 *   gcc -O2 -Iinclude bench/cpu/2026-12-03-zen4/session4/sampler_greedy.c \
 *       build/liblocks_model.a build/liblocks.a -lm -lpthread -o /tmp/sampler_greedy
 *   /tmp/sampler_greedy
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "locks_model.h"
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
int main(void) {
    const int V = 49152;
    float *lg = malloc(sizeof(float) * V), *pr = malloc(sizeof(float) * V);
    srand(1);
    for (int i = 0; i < V; i++) lg[i] = (float)rand() / RAND_MAX;
    locks_sampler_params sp = locks_sampler_default_params();
    sp.temp = 0;
    locks_status st;
    locks_sampler *s = locks_sampler_init(sp, V, &st);
    volatile int sink = 0;
    double best1 = 1e30, best2 = 1e30;
    for (int r = 0; r < 200; r++) {
        double t0 = now();
        locks_sampler_probs(s, lg, pr);
        sink += locks_sampler_draw(s, pr);
        double t1 = now();
        sink += locks_sampler_sample(s, lg);
        double t2 = now();
        if (t1 - t0 < best1) best1 = t1 - t0;
        if (t2 - t1 < best2) best2 = t2 - t1;
    }
    printf("greedy over %d logits: probs + draw %.1f us, sample (argmax) %.1f us\n", V, best1 / 1e3, best2 / 1e3);
    locks_sampler_free(s);
    free(lg);
    free(pr);
    return 0;
}
