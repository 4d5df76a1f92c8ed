/*
 * test_mass.c — mass-target selection (locks_step_params.mass):
 *  - locks_select against a float64 brute force on fresh random masses (many ties):
 *    forced pages always, then candidates by mass (ties to the lower index) until the
 *    covered mass (forced full pages included) reaches the target, at most what the
 *    budget holds; with a budget >= the length the target still applies (not dense);
 *  - locks_decode_step with a mass target selects what locks_score + locks_select give
 *    and attends exactly those pages (output vs a float64 softmax over them);
 *  - bad targets (1, negative, NaN, > 1) give LOCKS_ERR_INVALID_ARG; 0 is "off".
 */
#include "test_util.h"

#include "util.h"

enum { P = LOCKS_PAGE };

static locks_cache *make_cache(int32_t H, int32_t d, int32_t len, int32_t *seq, int write, float **k_out,
                               float **v_out) {
    locks_cache_params cp = locks_cache_default_params();
    cp.n_kv_heads = H;
    cp.head_dim = d;
    cp.n_pages = len / P + 2;
    cp.max_seqs = 1;
    cp.n_threads = 2;
    locks_status err;
    locks_cache *c = locks_cache_init(cp, &err);
    CHECK(err);
    CHECK(locks_cache_seq_add(c, seq));
    CHECK(locks_cache_append(c, *seq, len));
    if (write) {
        size_t n = (size_t)len * H * d;
        float *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
        SETUP(k && v);
        tu_fill_normal(k, n, 1.0);
        tu_fill_normal(v, n, 1.0);
        /* a few pages get keys aligned with a common direction: peaked masses */
        for (int32_t t = 0; t < len; t++)
            if ((t / P) % 7 == 3)
                for (int32_t x = 0; x < H * d; x++) k[(size_t)t * H * d + x] += 1.5f;
        CHECK(locks_cache_write(c, *seq, 0, 0, len, k, v));
        *k_out = k;
        *v_out = v;
    }
    return c;
}

/* The float64 brute force of one head's selection: want[np]. */
static void brute_force(const float *mass, int32_t len, const locks_step_params *p, uint8_t *want) {
    const int32_t n_full = len / P, np = (len + P - 1) / P;
    memset(want, 0, (size_t)np);
    int32_t forced = 0;
    double covered = 0.0;
    for (int32_t j = 0; j < n_full; j++)
        if (j < p->n_sink || j >= n_full - p->n_recent) {
            want[j] = 1;
            forced++;
            covered += (double)mass[j];
        }
    if (len % P) want[n_full] = 1;
    int32_t k = (p->budget - forced * P - len % P) / P;
    for (int32_t taken = 0; taken < k && covered < (double)p->mass; taken++) {
        int32_t best = -1;
        for (int32_t j = 0; j < n_full; j++)
            if (!want[j] && (best < 0 || mass[j] > mass[best])) best = j;
        if (best < 0) break;
        want[best] = 1;
        covered += (double)mass[best];
    }
}

static int same_selection(const int32_t *pages, int32_t n_pages, const uint8_t *want, int32_t np) {
    int32_t n_want = 0;
    for (int32_t j = 0; j < np; j++) n_want += want[j];
    if (n_pages != n_want) return 0;
    for (int32_t i = 0; i < n_pages; i++)
        if (!want[pages[i]] || (i > 0 && pages[i] <= pages[i - 1])) return 0;
    return 1;
}

static void test_select_brute(void) {
    const int32_t H = 3, d = 64;
    for (int32_t trial = 0; trial < 40; trial++) {
        int32_t len = tu_int(40, 1500), n_full = len / P, seq, np = (len + P - 1) / P;
        locks_cache *c = make_cache(H, d, len, &seq, 0, NULL, NULL);
        float *mass = malloc(sizeof(float) * H * (n_full + 1));
        int32_t *pages = malloc(sizeof(int32_t) * H * np), n_pages[3];
        uint8_t *want = malloc((size_t)np);
        SETUP(mass && pages && want);
        /* per head: random weights (many ties) normalised to sum 1 over the full pages */
        for (int32_t h = 0; h < H; h++) {
            double s = 0.0;
            for (int32_t j = 0; j < n_full; j++) {
                mass[h * n_full + j] = (float)tu_int(0, 12) * (float)(tu_uniform() < 0.2 ? 10.0 : 1.0);
                s += (double)mass[h * n_full + j];
            }
            for (int32_t j = 0; j < n_full; j++) mass[h * n_full + j] = (float)((double)mass[h * n_full + j] / (s > 0 ? s : 1));
        }
        locks_step_params p = locks_step_default_params();
        p.n_sink = tu_int(0, 2);
        p.n_recent = tu_int(0, 2);
        p.mass = (float)(0.05 + 0.9 * tu_uniform());
        int32_t forced = 0;
        for (int32_t j = 0; j < n_full; j++) forced += j < p.n_sink || j >= n_full - p.n_recent;
        const int32_t forced_tok = forced * P + len % P;
        /* caps below, around and above the length (above: the target alone decides) */
        const int32_t caps[3] = {forced_tok + tu_int(0, len / 2), forced_tok + tu_int(0, 2 * len), len + tu_int(0, 100)};
        for (int ci = 0; ci < 3; ci++) {
            p.budget = caps[ci] > 0 ? caps[ci] : 1;
            CHECK(locks_select(c, seq, mass, &p, pages, n_pages, np));
            for (int32_t h = 0; h < H; h++) {
                brute_force(mass + h * n_full, len, &p, want);
                test_cond(same_selection(pages + h * np, n_pages[h], want, np),
                          "len %d budget %d mass %.3f sink %d recent %d head %d: %d pages, brute force differs", len,
                          p.budget, (double)p.mass, p.n_sink, p.n_recent, h, n_pages[h]);
            }
        }
        /* a target of nearly 1 with an uncapped budget takes every page of positive mass */
        p.mass = 0.999999f;
        p.budget = len;
        CHECK(locks_select(c, seq, mass, &p, pages, n_pages, np));
        for (int32_t h = 0; h < H; h++) {
            brute_force(mass + h * n_full, len, &p, want);
            test_cond(same_selection(pages + h * np, n_pages[h], want, np), "mass ~1 head %d", h);
        }
        free(mass);
        free(pages);
        free(want);
        locks_cache_free(c);
    }
}

/* Decode step with a mass target: its selection is locks_score + locks_select's, its
 * output the float64 softmax attention over exactly those pages. */
static void test_decode_step(void) {
    const int32_t H = 2, G = 3, Hq = H * G, d = 64;
    for (int32_t trial = 0; trial < 6; trial++) {
        const int32_t len = tu_int(300, 900), np = (len + P - 1) / P, n_full = len / P;
        int32_t seq;
        float *k, *v;
        locks_cache *c = make_cache(H, d, len, &seq, 1, &k, &v);
        float *q = malloc(sizeof(float) * Hq * d), *out = malloc(sizeof(float) * Hq * d);
        float *mass = malloc(sizeof(float) * H * (n_full + 1));
        int32_t *pages = malloc(sizeof(int32_t) * H * np), *ref_pages = malloc(sizeof(int32_t) * H * np);
        int32_t n_pages[2], ref_n[2];
        SETUP(q && out && mass && pages && ref_pages);
        tu_fill_normal(q, (size_t)Hq * d, 1.0);
        for (int32_t x = 0; x < Hq * d; x++) q[x] += 0.5f; /* leans towards the aligned pages */
        locks_step_params p = locks_step_default_params();
        p.mass = trial % 2 ? 0.5f : 0.9f;
        p.budget = trial < 3 ? 4 * len : 256; /* uncapped, then capped */
        locks_selection sel = {pages, n_pages, np};
        CHECK(locks_decode_step(c, 0, &seq, 1, q, Hq, &p, out, &sel, NULL));
        CHECK(locks_score(c, 0, seq, q, Hq, &p, mass));
        CHECK(locks_select(c, seq, mass, &p, ref_pages, ref_n, np));
        int ok = 1, fewer = 0;
        for (int32_t h = 0; h < H; h++) {
            ok &= n_pages[h] == ref_n[h] && !memcmp(pages + h * np, ref_pages + h * np, sizeof(int32_t) * (size_t)ref_n[h]);
            fewer |= n_pages[h] < np;
        }
        test_cond(ok, "len %d mass %.2f budget %d: decode step selection differs from score + select", len,
                  (double)p.mass, p.budget);
        if (trial < 3) test_cond(fewer, "len %d mass %.2f uncapped: every page selected (not sparse)", len, (double)p.mass);
        /* float64 attention over the selected pages, with the stored (fp16) keys/values */
        double *ref = malloc(sizeof(double) * Hq * d);
        SETUP(ref);
        const double scale = 1.0 / sqrt((double)d);
        for (int32_t hq = 0; hq < Hq; hq++) {
            const int32_t h = hq / G;
            double mx = -INFINITY, l = 0.0;
            double *acc = ref + (size_t)hq * d;
            for (int32_t x = 0; x < d; x++) acc[x] = 0.0;
            for (int pass = 0; pass < 2; pass++)
                for (int32_t i = 0; i < n_pages[h]; i++) {
                    const int32_t lp = pages[h * np + i];
                    for (int32_t t = lp * P; t < len && t < lp * P + P; t++) {
                        const float *kt = k + ((size_t)t * H + h) * d, *vt = v + ((size_t)t * H + h) * d;
                        double s = 0.0;
                        for (int32_t x = 0; x < d; x++)
                            s += (double)locks_f16_to_f32(locks_f32_to_f16(kt[x])) * (double)q[hq * d + x];
                        s *= scale;
                        if (pass == 0) {
                            mx = s > mx ? s : mx;
                            continue;
                        }
                        const double w = exp(s - mx);
                        l += w;
                        for (int32_t x = 0; x < d; x++) acc[x] += w * (double)locks_f16_to_f32(locks_f32_to_f16(vt[x]));
                    }
                }
            for (int32_t x = 0; x < d; x++) acc[x] /= l;
        }
        tu_close("mass-target decode output", out, ref, (size_t)Hq * d, 2e-4, 2e-4);
        free(ref);
        free(q);
        free(out);
        free(mass);
        free(pages);
        free(ref_pages);
        free(k);
        free(v);
        locks_cache_free(c);
    }
}

static void test_bad_targets(void) {
    const int32_t H = 2, len = 200, np = (len + P - 1) / P;
    int32_t seq, pages[2 * 13], n_pages[2];
    float mass[2 * 12];
    for (int32_t i = 0; i < 24; i++) mass[i] = 1.0f / 12.0f;
    locks_cache *c = make_cache(H, 64, len, &seq, 0, NULL, NULL);
    const float bad[] = {1.0f, -0.25f, 1.5f, NAN, INFINITY};
    locks_step_params p = locks_step_default_params();
    p.budget = 128;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p.mass = bad[i];
        test_cond(locks_select(c, seq, mass, &p, pages, n_pages, np) == LOCKS_ERR_INVALID_ARG,
                  "mass %g accepted", (double)bad[i]);
    }
    p.mass = 0.0f; /* off: the fixed budget */
    CHECK(locks_select(c, seq, mass, &p, pages, n_pages, np));
    test_cond(n_pages[0] == 7 + 1, "mass 0 with budget 128 of 200: %d pages, want 8 (7 full + partial)", n_pages[0]);
    locks_cache_free(c);
}

int main(void) {
    tu_seed("test_mass");
    test_select_brute();
    test_decode_step();
    test_bad_targets();
    return test_report("test_mass");
}
