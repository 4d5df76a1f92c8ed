/*
 * test_dump.c — KV dump: round trip (f32 and f16 on disk) against the written data, and
 * rejection of malformed files (truncation, bad magic/version/shape/size, bad layer tag,
 * NaN payload, trailing bytes) with LOCKS_ERR_FORMAT; a missing file gives LOCKS_ERR_IO.
 */
#include "test_util.h"

#include <unistd.h>

#include "eval/dump.h"
#include "util.h"

static double urand(void) { return tu_uniform(); }
static float nrand(void) { return (float)tu_normal(); }

typedef struct {
    locks_dump_shape s;
    int32_t *pos;
    float *k, *v, *q, *q_obs; /* whole-dump arrays, layout as locks_dump */
} src_data;

static void make_src(src_data *x, locks_dtype dt) {
    locks_dump_shape *s = &x->s;
    memset(s, 0, sizeof *s);
    s->n_layers = 1 + (int32_t)(urand() * 3);
    s->n_kv_heads = 1 + (int32_t)(urand() * 3);
    s->n_q_heads = s->n_kv_heads * (1 + (int32_t)(urand() * 3));
    s->head_dim = 8 * (1 + (int32_t)(urand() * 8));
    s->n_ctx = 1 + (int32_t)(urand() * 70);
    s->n_steps = 1 + (int32_t)(urand() * 5);
    s->n_obs = urand() < 0.5 ? 0 : 1 + (int32_t)(urand() * (double)(s->n_ctx < 8 ? s->n_ctx : 8));
    if (s->n_obs > s->n_ctx) s->n_obs = s->n_ctx;
    s->kv_dtype = dt;
    s->scale = 1.0f / sqrtf((float)s->head_dim);
    s->rope_theta = 10000.0f;
    snprintf(s->model, sizeof s->model, "test-model-%d", (int)(urand() * 1000));
    size_t n_tok = (size_t)s->n_ctx + (size_t)s->n_steps;
    size_t nkv = n_tok * (size_t)s->n_kv_heads * (size_t)s->head_dim;
    size_t nq = (size_t)s->n_steps * (size_t)s->n_q_heads * (size_t)s->head_dim;
    size_t L = (size_t)s->n_layers;
    x->pos = locks_alloc(L * n_tok, sizeof *x->pos);
    x->k = locks_alloc(L * nkv, sizeof(float));
    x->v = locks_alloc(L * nkv, sizeof(float));
    x->q = locks_alloc(L * nq, sizeof(float));
    size_t nobs = (size_t)s->n_obs * (size_t)s->n_q_heads * (size_t)s->head_dim;
    x->q_obs = nobs ? locks_alloc(L * nobs, sizeof(float)) : NULL;
    SETUP(x->pos && x->k && x->v && x->q && (!nobs || x->q_obs));
    for (size_t i = 0; i < L * nobs; i++) x->q_obs[i] = 1.5f * nrand();
    for (size_t i = 0; i < L * n_tok; i++) x->pos[i] = (int32_t)(i % n_tok) + (int32_t)(urand() * 3) - 1;
    for (size_t i = 0; i < L * nkv; i++) {
        x->k[i] = 3.0f * nrand();
        x->v[i] = nrand();
    }
    for (size_t i = 0; i < L * nq; i++) x->q[i] = 2.0f * nrand();
}

static void free_src(src_data *x) {
    locks_free(x->pos);
    locks_free(x->k);
    locks_free(x->v);
    locks_free(x->q);
    locks_free(x->q_obs);
}

static locks_status write_src(const char *path, const src_data *x) {
    const locks_dump_shape *s = &x->s;
    size_t n_tok = (size_t)s->n_ctx + (size_t)s->n_steps;
    size_t nkv = n_tok * (size_t)s->n_kv_heads * (size_t)s->head_dim;
    size_t nq = (size_t)s->n_steps * (size_t)s->n_q_heads * (size_t)s->head_dim;
    locks_status st;
    locks_dump_writer *w = locks_dump_writer_open(path, s, &st);
    if (!w) return st;
    for (int32_t l = 0; l < s->n_layers; l++) {
        size_t nobs = (size_t)s->n_obs * (size_t)s->n_q_heads * (size_t)s->head_dim;
        st = locks_dump_write_layer_obs(w, l, x->pos + (size_t)l * n_tok, x->k + (size_t)l * nkv,
                                        x->v + (size_t)l * nkv, x->q + (size_t)l * nq,
                                        x->q_obs ? x->q_obs + (size_t)l * nobs : NULL);
        if (st != LOCKS_OK) {
            locks_dump_writer_close(w);
            return st;
        }
    }
    return locks_dump_writer_close(w);
}

/* max |a - b| / max(|a|, tiny) against a double reference rounding model */
static double cmp_arrays(const float *ref, const float *got, size_t n, int f16, const char *what) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = (double)ref[i], g = (double)got[i];
        double tol = f16 ? fabs(r) * (1.0 / 2048.0) + 6e-8 : 0.0; /* half: rel. 2^-11 */
        double e = fabs(r - g);
        if (e > tol) {
            fprintf(stderr, "  %s[%zu]: wrote %.9g read %.9g (tol %.3g)\n", what, i, r, g, tol);
            return INFINITY;
        }
        if (e > worst) worst = e;
    }
    return worst;
}

static void test_round_trip(const char *path, locks_dtype dt) {
    src_data x;
    make_src(&x, dt);
    SETUP(write_src(path, &x) == LOCKS_OK);
    locks_dump d;
    locks_status st = locks_dump_load(path, &d);
    test_cond(st == LOCKS_OK, "round trip load (%s): %s", dt == LOCKS_DTYPE_F16 ? "f16" : "f32",
              locks_status_str(st));
    if (st != LOCKS_OK) {
        free_src(&x);
        return;
    }
    const locks_dump_shape *s = &x.s;
    test_cond(memcmp(&d.shape.n_layers, &s->n_layers, 6 * sizeof(int32_t)) == 0 &&
                  d.shape.kv_dtype == s->kv_dtype && d.shape.scale == s->scale &&
                  strcmp(d.shape.model, s->model) == 0,
              "round trip shape (L=%d Hq=%d Hkv=%d d=%d ctx=%d steps=%d)", (int)s->n_layers,
              (int)s->n_q_heads, (int)s->n_kv_heads, (int)s->head_dim, (int)s->n_ctx, (int)s->n_steps);
    size_t n_tok = (size_t)s->n_ctx + (size_t)s->n_steps;
    size_t nkv = n_tok * (size_t)s->n_kv_heads * (size_t)s->head_dim;
    size_t nq = (size_t)s->n_steps * (size_t)s->n_q_heads * (size_t)s->head_dim;
    int f16 = dt == LOCKS_DTYPE_F16;
    int pos_ok = 1;
    for (int32_t l = 0; l < s->n_layers; l++) {
        const int32_t *p = locks_dump_pos(&d, l);
        for (size_t t = 0; t < n_tok; t++) pos_ok &= p[t] == x.pos[(size_t)l * n_tok + t];
        double ek = cmp_arrays(x.k + (size_t)l * nkv, locks_dump_k(&d, l), nkv, f16, "k");
        double ev = cmp_arrays(x.v + (size_t)l * nkv, locks_dump_v(&d, l), nkv, f16, "v");
        double eq = 0.0;
        for (int32_t st_i = 0; st_i < s->n_steps; st_i++) {
            size_t per = (size_t)s->n_q_heads * (size_t)s->head_dim;
            double e = cmp_arrays(x.q + (size_t)l * nq + (size_t)st_i * per, locks_dump_q(&d, l, st_i), per, 0, "q");
            if (e > eq) eq = e;
        }
        size_t nobs = (size_t)s->n_obs * (size_t)s->n_q_heads * (size_t)s->head_dim;
        if (nobs) {
            double e = cmp_arrays(x.q_obs + (size_t)l * nobs, locks_dump_q_obs(&d, l), nobs, 0, "q_obs");
            if (e > eq) eq = e;
        } else {
            test_cond(locks_dump_q_obs(&d, l) == NULL, "no observation window -> NULL");
        }
        test_cond(isfinite(ek) && isfinite(ev) && eq == 0.0, "layer %d data: max err k %.3g v %.3g q %.3g",
                  (int)l, ek, ev, eq);
    }
    test_cond(pos_ok, "positions round trip");
    test_cond(locks_dump_q(&d, 0, s->n_steps) == NULL && locks_dump_k(&d, s->n_layers) == NULL,
              "accessors reject out-of-range indices");
    locks_dump_free(&d);
    free_src(&x);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    SETUP(f);
    fseek(f, 0, SEEK_END);
    long e = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)e + 16);
    SETUP(b && fread(b, 1, (size_t)e, f) == (size_t)e);
    fclose(f);
    *n = (size_t)e;
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    SETUP(f && fwrite(b, 1, n, f) == n);
    fclose(f);
}

static void expect_format(const char *path, const char *what) {
    locks_dump d;
    locks_status st = locks_dump_load(path, &d);
    test_cond(st == LOCKS_ERR_FORMAT && d.k == NULL, "malformed (%s) -> %s", what, locks_status_str(st));
    if (st == LOCKS_OK) locks_dump_free(&d);
}

static void test_malformed(const char *good, const char *bad) {
    src_data x;
    make_src(&x, urand() < 0.5 ? LOCKS_DTYPE_F16 : LOCKS_DTYPE_F32);
    SETUP(write_src(good, &x) == LOCKS_OK);
    size_t n;
    unsigned char *b = slurp(good, &n);
    unsigned char *m = malloc(n + 16);
    SETUP(m);
    /* truncations at random points, including inside the header */
    for (int i = 0; i < 6; i++) {
        size_t cut = i == 0 ? 7 : i == 1 ? LOCKS_DUMP_HEADER_BYTES - 1 : (size_t)(urand() * (double)(n - 1));
        spit(bad, b, cut);
        expect_format(bad, "truncated");
    }
    memcpy(m, b, n);
    m[n] = 0;
    spit(bad, m, n + 1);
    expect_format(bad, "trailing byte");
    struct {
        size_t off;
        uint32_t val;
        const char *what;
    } pokes[] = {
        {0, 0x4b434f4d, "magic"},
        {8, 2, "version"},
        {12, 64, "header_bytes"},
        {16, 0, "zero layers"},
        {24, (uint32_t)x.s.n_q_heads + 1u, "Hq not a multiple of Hkv"},
        {24, 0x80000001u, "huge Hkv"},
        {28, 4096, "head_dim too large"},
        {32, 0, "zero context"},
        {36, (uint32_t)x.s.n_steps + 1u, "steps disagree with size"},
        {40, 7, "dtype"},
        {44, 0xff800000u, "scale -inf"},
        {52, (uint32_t)x.s.n_obs + 1u, "n_obs disagrees with size"},
        {52, (uint32_t)x.s.n_ctx + 1u, "n_obs > n_ctx"},
        {120, 12345, "file_bytes"},
    };
    for (size_t i = 0; i < sizeof pokes / sizeof pokes[0]; i++) {
        memcpy(m, b, n);
        uint32_t v = pokes[i].val;
        m[pokes[i].off] = (unsigned char)v;
        m[pokes[i].off + 1] = (unsigned char)(v >> 8);
        m[pokes[i].off + 2] = (unsigned char)(v >> 16);
        m[pokes[i].off + 3] = (unsigned char)(v >> 24);
        spit(bad, m, n);
        expect_format(bad, pokes[i].what);
    }
    /* layer tag of layer 0 */
    memcpy(m, b, n);
    m[LOCKS_DUMP_HEADER_BYTES] ^= 1;
    spit(bad, m, n);
    expect_format(bad, "layer tag");
    /* a NaN in the first key of the last layer */
    size_t n_tok = (size_t)x.s.n_ctx + (size_t)x.s.n_steps;
    size_t esz = x.s.kv_dtype == LOCKS_DTYPE_F16 ? 2 : 4;
    size_t lb = 4 + 4 * n_tok + 2 * esz * n_tok * (size_t)x.s.n_kv_heads * (size_t)x.s.head_dim +
                4 * (size_t)(x.s.n_steps + x.s.n_obs) * (size_t)x.s.n_q_heads * (size_t)x.s.head_dim;
    size_t koff = LOCKS_DUMP_HEADER_BYTES + (size_t)(x.s.n_layers - 1) * lb + 4 + 4 * n_tok;
    memcpy(m, b, n);
    if (esz == 2) {
        m[koff] = 0x01;
        m[koff + 1] = 0x7e;
    } else {
        m[koff] = 0x01; m[koff + 1] = 0x00; m[koff + 2] = 0xc0; m[koff + 3] = 0x7f;
    }
    spit(bad, m, n);
    expect_format(bad, "NaN key");
    /* and the unmodified copy still loads (the pokes above are what broke it) */
    spit(bad, b, n);
    locks_dump d;
    test_cond(locks_dump_load(bad, &d) == LOCKS_OK, "unmodified copy loads");
    locks_dump_free(&d);
    locks_status st = locks_dump_load("/nonexistent/dir/x.lkv", &d);
    test_cond(st == LOCKS_ERR_IO, "missing file -> %s", locks_status_str(st));
    free(b);
    free(m);
    free_src(&x);
}

static void test_writer_contract(const char *path) {
    src_data x;
    make_src(&x, LOCKS_DTYPE_F32);
    locks_status st;
    locks_dump_shape bad = x.s;
    bad.n_kv_heads = bad.n_q_heads + 1; /* Hq < Hkv: never a multiple */
    test_cond(locks_dump_writer_open(path, &bad, &st) == NULL && st == LOCKS_ERR_INVALID_ARG,
              "writer refuses Hq %% Hkv != 0");
    locks_dump_writer *w = locks_dump_writer_open(path, &x.s, &st);
    SETUP(w);
    size_t n_tok = (size_t)x.s.n_ctx + (size_t)x.s.n_steps;
    x.k[n_tok / 2] = NAN;
    if (x.s.n_obs > 0)
        test_cond(locks_dump_write_layer(w, 0, x.pos, x.k, x.v, x.q) == LOCKS_ERR_INVALID_ARG,
                  "write_layer without the observation window the shape promises");
    test_cond(locks_dump_write_layer_obs(w, 0, x.pos, x.k, x.v, x.q, x.q_obs) == LOCKS_ERR_NONFINITE,
              "writer refuses NaN");
    test_cond(locks_dump_write_layer_obs(w, 1, x.pos, x.k, x.v, x.q, x.q_obs) == LOCKS_ERR_INVALID_ARG,
              "writer refuses out-of-order layer");
    st = locks_dump_writer_close(w);
    test_cond(st == LOCKS_ERR_INVALID_ARG, "close after missing layers -> %s", locks_status_str(st));
    locks_dump d;
    test_cond(locks_dump_load(path, &d) == LOCKS_ERR_FORMAT, "incomplete dump is rejected");
    free_src(&x);
}

/* The engine's path: locks_dump_write_cache reads a cache back; the dump must hold
 * exactly the cache's fp16 keys/values in token order, the given positions and queries. */
static void test_write_cache(const char *path) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = tu_int(1, 3);
    cp.n_kv_heads = tu_int(1, 3);
    cp.head_dim = 8 * tu_int(1, 8);
    cp.rank = 4;
    cp.max_seqs = 2;
    const int32_t n_ctx = tu_int(1, 60), n_steps = tu_int(1, 20), n_tok = n_ctx + n_steps;
    cp.n_pages = n_tok / 16 + 8;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    SETUP(c);
    int32_t decoy, seq;
    CHECK(locks_cache_seq_add(c, &decoy));
    CHECK(locks_cache_append(c, decoy, 20)); /* physical != logical pages */
    CHECK(locks_cache_seq_add(c, &seq));
    CHECK(locks_cache_append(c, seq, n_tok));
    const size_t row = (size_t)cp.n_kv_heads * (size_t)cp.head_dim;
    float *k = malloc(sizeof(float) * (size_t)n_tok * row * (size_t)cp.n_layers);
    float *v = malloc(sizeof(float) * (size_t)n_tok * row * (size_t)cp.n_layers);
    const int32_t hq = cp.n_kv_heads * tu_int(1, 3);
    const size_t nq = (size_t)n_steps * (size_t)hq * (size_t)cp.head_dim;
    float *q = malloc(sizeof(float) * nq * (size_t)cp.n_layers);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_tok);
    SETUP(k && v && q && pos);
    tu_fill_normal(k, (size_t)n_tok * row * (size_t)cp.n_layers, 2.0);
    tu_fill_normal(v, (size_t)n_tok * row * (size_t)cp.n_layers, 1.0);
    tu_fill_normal(q, nq * (size_t)cp.n_layers, 1.0);
    for (int32_t t = 0; t < n_tok; t++) pos[t] = 3 * t + 1;
    for (int32_t l = 0; l < cp.n_layers; l++)
        CHECK(locks_cache_write(c, seq, l, 0, n_tok, k + (size_t)l * n_tok * row, v + (size_t)l * n_tok * row));
    locks_dump_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.n_layers = cp.n_layers;
    sh.n_q_heads = hq;
    sh.n_kv_heads = cp.n_kv_heads;
    sh.head_dim = cp.head_dim;
    sh.n_ctx = n_ctx;
    sh.n_steps = n_steps;
    sh.kv_dtype = LOCKS_DTYPE_F16;
    sh.scale = 0.125f;
    snprintf(sh.model, sizeof sh.model, "cache-test");
    CHECK(locks_dump_write_cache(path, &sh, c, seq, pos, q));
    locks_dump d;
    st = locks_dump_load(path, &d);
    test_cond(st == LOCKS_OK, "write_cache dump loads: %s", locks_status_str(st));
    if (st == LOCKS_OK) {
        size_t bad = 0;
        for (int32_t l = 0; l < cp.n_layers; l++) {
            const float *dk = locks_dump_k(&d, l), *dv = locks_dump_v(&d, l);
            for (size_t i = 0; i < (size_t)n_tok * row; i++) {
                float rk = locks_f16_to_f32(locks_f32_to_f16(k[(size_t)l * n_tok * row + i]));
                float rv = locks_f16_to_f32(locks_f32_to_f16(v[(size_t)l * n_tok * row + i]));
                if (dk[i] != rk || dv[i] != rv) {
                    if (bad < 3)
                        fprintf(stderr, "  layer %d elem %zu: k %.9g want %.9g, v %.9g want %.9g\n", (int)l, i,
                                (double)dk[i], (double)rk, (double)dv[i], (double)rv);
                    bad++;
                }
            }
            for (int32_t t = 0; t < n_tok; t++) bad += locks_dump_pos(&d, l)[t] != pos[t];
            for (int32_t s2 = 0; s2 < n_steps; s2++)
                bad += memcmp(locks_dump_q(&d, l, s2), q + (size_t)l * nq + (size_t)s2 * hq * cp.head_dim,
                              sizeof(float) * (size_t)hq * (size_t)cp.head_dim) != 0;
        }
        test_cond(bad == 0, "write_cache dump equals the cache's fp16 K/V, positions, queries (%zu bad)", bad);
        locks_dump_free(&d);
    }
    sh.n_steps = n_steps + 1; /* the cache does not hold that many tokens */
    test_cond(locks_dump_write_cache(path, &sh, c, seq, pos, q) == LOCKS_ERR_INVALID_ARG,
              "write_cache refuses a shape the cache does not hold");
    locks_cache_free(c);
    free(k), free(v), free(q), free(pos);
}

/* locks_dump_write_cache_layers: a subset of the cache's layers (the engine dumps only a
 * model's global layers; its local sliding-window layers never reach a selector). Dump
 * layer i must hold cache layer layers[i]'s fp16 K/V and the i-th query block; bad lists
 * (out of range, not increasing, longer than the cache) are refused. */
static void test_write_cache_layers(const char *path) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_layers = tu_int(3, 7);
    cp.n_kv_heads = tu_int(1, 2);
    cp.head_dim = 8 * tu_int(1, 4);
    cp.rank = 4;
    const int32_t n_ctx = tu_int(17, 70), n_steps = tu_int(1, 5), n_tok = n_ctx + n_steps;
    cp.n_pages = n_tok / 16 + 4;
    locks_status st;
    locks_cache *c = locks_cache_init(cp, &st);
    SETUP(c);
    int32_t seq;
    CHECK(locks_cache_seq_add(c, &seq));
    CHECK(locks_cache_append(c, seq, n_tok));
    const size_t row = (size_t)cp.n_kv_heads * (size_t)cp.head_dim, per_layer = (size_t)n_tok * row;
    float *k = malloc(sizeof(float) * per_layer * (size_t)cp.n_layers);
    float *v = malloc(sizeof(float) * per_layer * (size_t)cp.n_layers);
    const int32_t hq = cp.n_kv_heads * 2;
    const size_t nq = (size_t)n_steps * (size_t)hq * (size_t)cp.head_dim;
    float *q = malloc(sizeof(float) * nq * (size_t)cp.n_layers);
    SETUP(k && v && q);
    tu_fill_normal(k, per_layer * (size_t)cp.n_layers, 2.0);
    tu_fill_normal(v, per_layer * (size_t)cp.n_layers, 1.0);
    tu_fill_normal(q, nq * (size_t)cp.n_layers, 1.0);
    for (int32_t l = 0; l < cp.n_layers; l++)
        CHECK(locks_cache_write(c, seq, l, 0, n_tok, k + (size_t)l * per_layer, v + (size_t)l * per_layer));
    /* every third layer from 2, as Gemma 3's global layers are every sixth from 5; at least the last */
    int32_t layers[8], n_sub = 0;
    for (int32_t l = 2; l < cp.n_layers; l += 3) layers[n_sub++] = l;
    if (n_sub == 0) layers[n_sub++] = cp.n_layers - 1;
    locks_dump_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.n_layers = n_sub;
    sh.n_q_heads = hq;
    sh.n_kv_heads = cp.n_kv_heads;
    sh.head_dim = cp.head_dim;
    sh.n_ctx = n_ctx;
    sh.n_steps = n_steps;
    sh.kv_dtype = LOCKS_DTYPE_F16;
    sh.scale = 0.125f;
    snprintf(sh.model, sizeof sh.model, "cache-layers-test");
    CHECK(locks_dump_write_cache_layers(path, &sh, c, seq, NULL, q, NULL, layers));
    locks_dump d;
    st = locks_dump_load(path, &d);
    test_cond(st == LOCKS_OK && d.shape.n_layers == n_sub, "write_cache_layers dump loads with %d layers: %s", n_sub,
              locks_status_str(st));
    if (st == LOCKS_OK) {
        size_t bad = 0;
        for (int32_t i = 0; i < n_sub; i++) {
            const float *dk = locks_dump_k(&d, i), *dv = locks_dump_v(&d, i);
            const size_t off = (size_t)layers[i] * per_layer;
            for (size_t j = 0; j < per_layer; j++)
                bad += dk[j] != locks_f16_to_f32(locks_f32_to_f16(k[off + j])) ||
                       dv[j] != locks_f16_to_f32(locks_f32_to_f16(v[off + j]));
            bad += memcmp(locks_dump_q(&d, i, 0), q + (size_t)i * nq, sizeof(float) * nq) != 0;
        }
        test_cond(bad == 0, "dump layer i holds cache layer layers[i] (%zu bad)", bad);
        locks_dump_free(&d);
    }
    int32_t rev[2] = {layers[n_sub - 1], 0}, out[1] = {cp.n_layers};
    sh.n_layers = 2;
    test_cond(layers[n_sub - 1] > 0 && locks_dump_write_cache_layers(path, &sh, c, seq, NULL, q, NULL, rev) ==
                                           LOCKS_ERR_INVALID_ARG,
              "write_cache_layers refuses a list that is not increasing");
    sh.n_layers = 1;
    test_cond(locks_dump_write_cache_layers(path, &sh, c, seq, NULL, q, NULL, out) == LOCKS_ERR_INVALID_ARG,
              "write_cache_layers refuses a layer past the cache's");
    locks_cache_free(c);
    free(k), free(v), free(q);
}

int main(void) {
    tu_seed("test_dump");
    char good[64], bad[64];
    snprintf(good, sizeof good, "/tmp/locks_test_dump_%d.a", (int)getpid());
    snprintf(bad, sizeof bad, "/tmp/locks_test_dump_%d.b", (int)getpid());
    for (int i = 0; i < 3; i++) {
        test_round_trip(good, LOCKS_DTYPE_F32);
        test_round_trip(good, LOCKS_DTYPE_F16);
    }
    test_malformed(good, bad);
    test_writer_contract(good);
    test_write_cache(good);
    for (int i = 0; i < 3; i++) test_write_cache_layers(good);
    remove(good);
    remove(bad);
    return test_report("test_dump");
}
