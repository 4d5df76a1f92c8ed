/*
 * test_gpu_cp.c — the context-parallel step through the NCCL communicator: R processes
 * (R = $LOCKS_CP_RANKS, default 1; rank r on GPU r; NCCL needs a distinct GPU per rank),
 * forked before any CUDA call, the NCCL unique id handed from rank 0 to the others through
 * pipes. Every rank builds the same random sequence (the RNG state is inherited), holds its
 * locks_cp_partition shard, and checks the NCCL step against locks_decode_step on a single
 * cache holding the whole sequence: selection (equal; random keys leave no ties) and output (1e-6 abs +
 * 1e-5 rel) for the locks and oracle selectors and a dense step. Label gpu: not run in CI.
 */
#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

enum { P = LOCKS_PAGE };

static int run_rank(int32_t R, int32_t rank, const uint8_t *id) {
    const int32_t H = 2, G = 4, Hq = H * G, d = 128, len = 97 * P + 7, max_pages = (len + P - 1) / P;
    const size_t n = (size_t)len * H * d;
    float *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    tu_fill_normal(k, n, 1.0);
    tu_fill_normal(v, n, 1.0);
    for (int32_t t = 0; t < len; t++) /* a few pages that stand out */
        if ((t / P) % 13 == 5)
            for (size_t i = 0; i < (size_t)H * d; i++) k[(size_t)t * H * d + i] *= 2.0f;
    locks_cache_params cp = locks_cache_default_params();
    cp.n_kv_heads = H;
    cp.head_dim = d;
    cp.n_pages = max_pages + 2;
    cp.n_threads = 2;
    locks_status err;
    locks_cache *whole = locks_cache_init(cp, &err), *part = locks_cache_init(cp, &err);
    CHECK(err);
    int32_t s1, s2 = -1, t0, nt;
    CHECK(locks_cache_seq_add(whole, &s1));
    CHECK(locks_cache_append(whole, s1, len));
    CHECK(locks_cache_write(whole, s1, 0, 0, len, k, v));
    locks_cp_partition(len, R, rank, &t0, &nt);
    if (nt > 0) {
        CHECK(locks_cache_seq_add(part, &s2));
        CHECK(locks_cache_append(part, s2, nt));
        CHECK(locks_cache_write(part, s2, 0, 0, nt, k + (size_t)t0 * H * d, v + (size_t)t0 * H * d));
    }
    locks_cp_comm_params pp = {LOCKS_CP_NCCL, R, rank, NULL, id, rank};
    locks_cp_comm *comm = locks_cp_comm_init(pp, &err);
    CHECK(err);
    locks_cp_shard sh = {part, s2, t0 / P, len};
    float *q = malloc(sizeof(float) * Hq * d), *o1 = malloc(sizeof(float) * Hq * d), *o2 = malloc(sizeof(float) * Hq * d);
    int32_t *pg1 = malloc(sizeof(int32_t) * H * max_pages), *pg2 = malloc(sizeof(int32_t) * H * max_pages), n1[8], n2[8];
    double *ref = malloc(sizeof(double) * Hq * d);
    const locks_selector sels[3] = {LOCKS_SEL_LOCKS, LOCKS_SEL_ORACLE, LOCKS_SEL_LOCKS};
    for (int c = 0; c < 3; c++) {
        tu_fill_normal(q, (size_t)Hq * d, 1.0);
        locks_step_params p = locks_step_default_params();
        p.selector = sels[c];
        p.budget = c == 2 ? len : 20 * P;
        locks_selection a = {pg1, n1, max_pages}, b = {pg2, n2, max_pages};
        CHECK(locks_decode_step(whole, 0, &s1, 1, q, Hq, &p, o1, &a, NULL));
        locks_cp_stats st;
        CHECK(locks_cp_decode_step(comm, &sh, 0, q, Hq, &p, o2, &b, &st));
        int same = 1;
        for (int32_t h = 0; h < H; h++) {
            same &= n1[h] == n2[h];
            for (int32_t i = 0; same && i < n1[h]; i++) same &= pg1[h * max_pages + i] == pg2[h * max_pages + i];
        }
        test_cond(same, "rank %d/%d, %s budget %d: selection differs from the single cache", rank, R,
                  locks_selector_name(p.selector), p.budget);
        for (int32_t i = 0; i < Hq * d; i++) ref[i] = (double)o1[i];
        if (same) tu_close("NCCL step output vs single cache", o2, ref, (size_t)Hq * d, 1e-6, 1e-5);
        printf("rank %d/%d %s budget %d: %d collectives, %llu bytes sent, %.3f ms in collectives\n", rank, R,
               locks_selector_name(p.selector), p.budget, st.n_collectives, (unsigned long long)st.bytes_sent,
               st.comm_ms);
    }
    locks_cp_comm_free(comm);
    locks_cache_free(whole);
    locks_cache_free(part);
    free(k), free(v), free(q), free(o1), free(o2), free(pg1), free(pg2), free(ref);
    return test_report("test_gpu_cp");
}

int main(void) {
    tu_seed("test_gpu_cp");
    const char *env = getenv("LOCKS_CP_RANKS");
    const int32_t R = env ? atoi(env) : 1;
    if (R < 1 || R > 16) {
        fprintf(stderr, "LOCKS_CP_RANKS must be 1..16\n");
        return 1;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    int fds[16][2];
    for (int32_t r = 1; r < R; r++)
        if (pipe(fds[r]) != 0) return 1;
    pid_t pid[16];
    for (int32_t r = 0; r < R; r++) {
        pid[r] = fork();
        if (pid[r] < 0) return 1;
        if (pid[r] == 0) {
            uint8_t id[LOCKS_CP_NCCL_ID_BYTES];
            if (r == 0) {
                CHECK(locks_cp_nccl_unique_id(id));
                for (int32_t o = 1; o < R; o++)
                    if (write(fds[o][1], id, sizeof id) != (ssize_t)sizeof id) _exit(1);
            } else if (read(fds[r][0], id, sizeof id) != (ssize_t)sizeof id) {
                _exit(1);
            }
            fflush(stdout);
            _exit(run_rank(R, r, id));
        }
    }
    int bad = 0;
    for (int32_t r = 0; r < R; r++) {
        int status = 0;
        waitpid(pid[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "test_gpu_cp: rank %d failed (status %d)\n", r, status);
            bad = 1;
        }
    }
    printf("test_gpu_cp: %d ranks %s\n", R, bad ? "FAILED" : "passed");
    return bad;
}
