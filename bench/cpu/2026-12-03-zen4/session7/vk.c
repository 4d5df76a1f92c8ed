/* vk.c — scratch (session 7 of 2026-12-03, kept as it ran): the verify's rows kernel
 * (attend_rows_avx512, src/attend.c included) against two software-pipelined versions over
 * a run of pages, one thread: the run kernel (page i + 1 converted during page i's logits,
 * page i - 1's accumulation after page i's softmax) and, with V2 set, the next page
 * converted inside this page's accumulation. Checks the states bit for bit, prints ns a page.
 *   gcc -O3 -Isrc -Iinclude bench/cpu/2026-12-03-zen4/session7/vk.c build/liblocks.a -lm -lpthread -o /tmp/vk
 *   /tmp/vk 64 32 300      # d 64, 32 pages (L2), 300 rounds;  /tmp/vk 64 20000 5: from DRAM */
#include "attend.c"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef PFA
#define PFA 3
#endif

/* One 16-row group over pages kbs/vbs [np] (whole pages), as np calls of attend_rows_avx512,
 * software pipelined: page i+1 converted during page i's logits; page i-1's accumulation
 * after page i's softmax; acc's rescale for page i after that. */
AVX512_TARGET static void attend_rows_run(const uint16_t *const *kbs, const uint16_t *const *vbs, int32_t np,
                                          const float *qT, int32_t lo, int32_t hi, int32_t d, float scale,
                                          attn_state st, float *scr) {
    const size_t pd = (size_t)P * d;
    float *kf[2] = {scr, scr + pd};
    float *vf[3] = {scr + 2 * pd, scr + 3 * pd, scr + 4 * pd};
    float (*w)[P][16] = (float (*)[P][16])(void *)(scr + 5 * pd); /* [2][P][16] */
    const __m512 vs = _mm512_set1_ps(scale);
    if (np <= 0) return;
    f16_to_f32_avx512(kbs[0], kf[0], pd);
    f16_to_f32_avx512(vbs[0], vf[0], pd);
    const size_t quarter = pd / 4; /* d % 16 == 0: pd / 4 a multiple of 16... */
    for (int32_t i = 0; i <= np; i++) {
        int grow = 0;
        float corr[16];
        if (i < np) {
            const float *k = kf[i & 1];
            const uint16_t *nk = i + 1 < np ? kbs[i + 1] : NULL, *nv = i + 1 < np ? vbs[i + 1] : NULL;
            float *nkf = kf[(i + 1) & 1], *nvf = vf[(i + 1) % 3];
            page_prefetch pf = i + PFA < np ? (page_prefetch){(const char *)kbs[i + PFA], (const char *)vbs[i + PFA], pd * 2}
                                            : NO_PREFETCH;
            __m512 lg[P];
            for (int32_t t0 = 0; t0 < P; t0 += 4) {
                prefetch_part(pf, t0, t0 + 4, P);
                if (nk) {
                    const size_t o = (size_t)(t0 / 4) * quarter;
                    f16_to_f32_avx512(nk + o, nkf + o, quarter);
                    f16_to_f32_avx512(nv + o, nvf + o, quarter);
                }
                rows_logits4_avx512(k, t0, qT, d, vs, lg);
            }
            __m512 mx = lg[0];
            for (int t = 1; t < P; t++) mx = _mm512_max_ps(mx, lg[t]);
            float mxs[16], ms[16];
            _mm512_storeu_ps(mxs, mx);
            for (int32_t r = lo; r < hi; r++) {
                corr[r] = 1.0f;
                if (mxs[r] > st.m[r]) {
                    corr[r] = expf(st.m[r] - mxs[r]);
                    st.l[r] *= corr[r];
                    st.m[r] = mxs[r];
                    grow = 1;
                }
            }
            for (int r = 0; r < 16; r++) ms[r] = r >= lo && r < hi ? st.m[r] : 0.0f;
            const __m512 mv = _mm512_loadu_ps(ms);
            __m512 e[P];
            for (int t = 0; t < P; t++) {
                e[t] = exp16(_mm512_sub_ps(lg[t], mv));
                _mm512_store_ps(w[i & 1][t], e[t]);
            }
            for (int t = 0; t < 8; t++) e[t] = _mm512_add_ps(e[t + 8], e[t]);
            for (int t = 0; t < 4; t++) e[t] = _mm512_add_ps(e[t + 4], e[t]);
            const __m512 ls = _mm512_add_ps(_mm512_add_ps(e[0], e[2]), _mm512_add_ps(e[1], e[3]));
            float lss[16];
            _mm512_storeu_ps(lss, ls);
            for (int32_t r = lo; r < hi; r++) st.l[r] += lss[r];
        }
        if (i > 0) { /* page i - 1's accumulation */
            const float *vv = vf[(i - 1) % 3], *ww = &w[(i - 1) & 1][0][0];
            int32_t r0 = lo;
            for (; r0 + 4 <= hi; r0 += 4) accum_heads_avx512(vv, P, ww, 1, 16, r0, d, st.acc, 4, 1);
            switch (hi - r0) {
            case 3: accum_heads_avx512(vv, P, ww, 1, 16, r0, d, st.acc, 3, 1); break;
            case 2: accum_heads_avx512(vv, P, ww, 1, 16, r0, d, st.acc, 2, 1); break;
            case 1: accum_heads_avx512(vv, P, ww, 1, 16, r0, d, st.acc, 1, 1); break;
            default: break;
            }
        }
        if (grow) /* page i's rescale, after page i - 1's sums */
            for (int32_t r = lo; r < hi; r++)
                if (corr[r] != 1.0f || 1) {
                    if (!(corr[r] == 1.0f)) {
                        float *acc = st.acc + (size_t)r * d;
                        for (int32_t x = 0; x < d; x++) acc[x] *= corr[r];
                    }
                }
    }
}


/* accum_heads_avx512 (F32) with, at each key, nc 16-value conversions of the next page
 * (src fp16 -> dst fp32, advancing *ci over the cn vectors there are). */
AVX512_TARGET static inline __attribute__((always_inline)) void
accum_conv(const float *vb, const float *w, int32_t g0, int32_t d, float *acc, const int HN,
           const uint16_t *src, float *dst, int32_t *ci, int32_t cn, int nc) {
    for (int32_t c0 = 0; c0 < d; c0 += 64) {
        __mmask16 m[4];
        for (int v = 0; v < 4; v++) {
            const int32_t left = d - c0 - 16 * v;
            m[v] = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        }
        __m512 a[4][4];
        for (int i = 0; i < HN; i++)
            for (int v = 0; v < 4; v++) a[i][v] = _mm512_maskz_loadu_ps(m[v], acc + (size_t)(g0 + i) * d + c0 + 16 * v);
        for (int32_t t = 0; t < P; t++) {
            if (src)
                for (int k = 0; k < nc; k++)
                    if (*ci < cn) {
                        _mm512_store_ps(dst + (size_t)*ci * 16, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(src + (size_t)*ci * 16))));
                        (*ci)++;
                    }
            __m512 vv[4];
            for (int v = 0; v < 4; v++) vv[v] = _mm512_maskz_loadu_ps(m[v], vb + (size_t)t * d + c0 + 16 * v);
            for (int i = 0; i < HN; i++) {
                const __m512 wt = _mm512_set1_ps(w[(size_t)(g0 + i) + (size_t)t * 16]);
                for (int v = 0; v < 4; v++) a[i][v] = _mm512_fmadd_ps(wt, vv[v], a[i][v]);
            }
        }
        for (int i = 0; i < HN; i++)
            for (int v = 0; v < 4; v++) _mm512_mask_storeu_ps(acc + (size_t)(g0 + i) * d + c0 + 16 * v, m[v], a[i][v]);
    }
}

/* V2: per page as attend_rows_avx512, the next page's K and V converted inside this page's
 * accumulation (kv16 [2][2 P d]: K then V per buffer). */
AVX512_TARGET static void attend_rows_v2(const uint16_t *const *kbs, const uint16_t *const *vbs, int32_t np,
                                         const float *qT, int32_t lo, int32_t hi, int32_t d, float scale,
                                         attn_state st, float *scr) {
    const size_t pd = (size_t)P * d;
    float *kf[2] = {scr, scr + pd}, *vf[2] = {scr + 2 * pd, scr + 3 * pd};
    const __m512 vs = _mm512_set1_ps(scale);
    if (np <= 0) return;
    f16_to_f32_avx512(kbs[0], kf[0], pd);
    f16_to_f32_avx512(vbs[0], vf[0], pd);
    const int32_t cn = (int32_t)(pd / 16); /* vectors per block */
    const int32_t groups = (hi - lo + 3) / 4;
    const int nc = (int)((2 * cn + groups * P - 1) / (groups * P));
    for (int32_t i = 0; i < np; i++) {
        const float *k = kf[i & 1];
        page_prefetch pf = i + PFA < np ? (page_prefetch){(const char *)kbs[i + PFA], (const char *)vbs[i + PFA], pd * 2}
                                        : NO_PREFETCH;
        __m512 lg[P];
        for (int32_t t0 = 0; t0 < P; t0 += 4) {
            prefetch_part(pf, t0, t0 + 4, P);
            rows_logits4_avx512(k, t0, qT, d, vs, lg);
        }
        __m512 mx = lg[0];
        for (int t = 1; t < P; t++) mx = _mm512_max_ps(mx, lg[t]);
        float mxs[16], ms[16];
        _mm512_storeu_ps(mxs, mx);
        for (int32_t r = lo; r < hi; r++) {
            if (mxs[r] > st.m[r]) {
                const float corr = expf(st.m[r] - mxs[r]);
                float *acc = st.acc + (size_t)r * d;
                st.l[r] *= corr;
                for (int32_t x = 0; x < d; x++) acc[x] *= corr;
                st.m[r] = mxs[r];
            }
        }
        for (int r = 0; r < 16; r++) ms[r] = r >= lo && r < hi ? st.m[r] : 0.0f;
        const __m512 mv = _mm512_loadu_ps(ms);
        float w[P][16] __attribute__((aligned(64)));
        __m512 e[P];
        for (int t = 0; t < P; t++) {
            e[t] = exp16(_mm512_sub_ps(lg[t], mv));
            _mm512_store_ps(w[t], e[t]);
        }
        for (int t = 0; t < 8; t++) e[t] = _mm512_add_ps(e[t + 8], e[t]);
        for (int t = 0; t < 4; t++) e[t] = _mm512_add_ps(e[t + 4], e[t]);
        const __m512 ls = _mm512_add_ps(_mm512_add_ps(e[0], e[2]), _mm512_add_ps(e[1], e[3]));
        float lss[16];
        _mm512_storeu_ps(lss, ls);
        for (int32_t r = lo; r < hi; r++) st.l[r] += lss[r];
        /* accumulation, converting page i + 1 on the way: K's vectors then V's */
        const uint16_t *nk = i + 1 < np ? kbs[i + 1] : NULL, *nv = i + 1 < np ? vbs[i + 1] : NULL;
        int32_t ck = 0, cv = 0;
        int32_t r0 = lo, gi = 0;
        const float *vv = vf[i & 1];
        for (; r0 < hi; r0 += 4, gi++) {
            const int hn = hi - r0 < 4 ? hi - r0 : 4;
            const int first_half = gi < (groups + 1) / 2;
            const uint16_t *src = first_half ? nk : nv;
            float *dst = first_half ? kf[(i + 1) & 1] : vf[(i + 1) & 1];
            int32_t *ci = first_half ? &ck : &cv;
            const int ncc = first_half ? (cn + ((groups + 1) / 2) * P - 1) / (((groups + 1) / 2) * P)
                                       : (cn + (groups - (groups + 1) / 2) * P - 1) / ((groups - (groups + 1) / 2) * P);
            switch (hn) {
            case 4: accum_conv(vv, &w[0][0], r0, d, st.acc, 4, src, dst, ci, cn, ncc); break;
            case 3: accum_conv(vv, &w[0][0], r0, d, st.acc, 3, src, dst, ci, cn, ncc); break;
            case 2: accum_conv(vv, &w[0][0], r0, d, st.acc, 2, src, dst, ci, cn, ncc); break;
            default: accum_conv(vv, &w[0][0], r0, d, st.acc, 1, src, dst, ci, cn, ncc); break;
            }
        }
        if (nk) { /* whatever the groups left */
            if (ck < cn) f16_to_f32_avx512(nk + (size_t)ck * 16, kf[(i + 1) & 1] + (size_t)ck * 16, (size_t)(cn - ck) * 16);
            if (cv < cn) f16_to_f32_avx512(nv + (size_t)cv * 16, vf[(i + 1) & 1] + (size_t)cv * 16, (size_t)(cn - cv) * 16);
        }
        (void)nc;
    }
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
__attribute__((target("f16c"))) static uint16_t f2h(float f) { return _cvtss_sh(f, 0); }

int main(int argc, char **argv) {
    const int d = argc > 1 ? atoi(argv[1]) : 64, np = argc > 2 ? atoi(argv[2]) : 32, reps = argc > 3 ? atoi(argv[3]) : 50;
    const int lo = 0, hi = argc > 4 ? atoi(argv[4]) : 15;
    const size_t pd = (size_t)P * d;
    uint16_t *K = aligned_alloc(4096, (size_t)np * pd * 2 + 4096), *V = aligned_alloc(4096, (size_t)np * pd * 2 + 4096);
    srand(7);
    for (size_t i = 0; i < (size_t)np * pd; i++) {
        K[i] = f2h(((rand() / (float)RAND_MAX) - 0.5f) * 4.0f + (float)((i / d) % 7) * 0.2f);
        V[i] = f2h((rand() / (float)RAND_MAX) - 0.5f);
    }
    const uint16_t **kbs = malloc(sizeof(void *) * np), **vbs = malloc(sizeof(void *) * np);
    for (int i = 0; i < np; i++) { kbs[i] = K + (size_t)i * pd; vbs[i] = V + (size_t)i * pd; }
    float *q = malloc(sizeof(float) * 16 * d), *qT = aligned_alloc(64, sizeof(float) * 16 * d);
    for (int i = 0; i < 16 * d; i++) q[i] = ((rand() / (float)RAND_MAX) - 0.5f) * 2.0f;
    rows_transpose(q, hi, 0, d, qT);
    float *s0 = aligned_alloc(64, sizeof(float) * 16 * (d + 2)), *s1 = aligned_alloc(64, sizeof(float) * 16 * (d + 2));
    float *scr = aligned_alloc(64, sizeof(float) * (5 * pd + 2 * P * 16));
    float kf[P * LOCKS_MAX_HEAD_DIM] __attribute__((aligned(64))), vf[P * LOCKS_MAX_HEAD_DIM] __attribute__((aligned(64)));
    const float scale = 1.0f / sqrtf((float)d);
    double *t0s = malloc(sizeof(double) * reps), *t1s = malloc(sizeof(double) * reps);
    int same = 1;
    for (int r = 0; r < reps; r++) {
        attn_state a = {s0 + 16 * d, s0 + 16 * d + 16, s0}, b = {s1 + 16 * d, s1 + 16 * d + 16, s1};
        state_reset(a, 16, d);
        state_reset(b, 16, d);
        double x0 = now();
        for (int i = 0; i < np; i++) {
            page_prefetch pf = i + 2 < np ? (page_prefetch){(const char *)kbs[i + 2], (const char *)vbs[i + 2], pd * 2} : NO_PREFETCH;
            attend_rows_avx512(kbs[i], vbs[i], qT, lo, hi, d, scale, a, kf, vf, pf);
        }
        double x1 = now();
        if (getenv("V2")) attend_rows_v2(kbs, vbs, np, qT, lo, hi, d, scale, b, scr);
        else attend_rows_run(kbs, vbs, np, qT, lo, hi, d, scale, b, scr);
        double x2 = now();
        t0s[r] = (x1 - x0) / np;
        t1s[r] = (x2 - x1) / np;
        if (memcmp(s0, s1, sizeof(float) * (size_t)hi * d) || memcmp(a.m, b.m, 4 * hi) || memcmp(a.l, b.l, 4 * hi)) same = 0;
    }
    qsort(t0s, reps, 8, cmpd);
    qsort(t1s, reps, 8, cmpd);
    printf("d %d pages %d rows %d: rows kernel min %.0f med %.0f ns/page; run kernel min %.0f med %.0f; ratio(med) %.3f; %s\n", d, np, hi,
           t0s[0], t0s[reps / 2], t1s[0], t1s[reps / 2], t0s[reps / 2] / t1s[reps / 2], same ? "bit-identical" : "DIFFERENT");
    return 0;
}
