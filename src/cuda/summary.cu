/*
 * summary.cu — summary build on the GPU: summary2_kernel, two pages per warp, Jacobi in
 * registers (its comment below has the scheme; bench/RESULTS.md, issue 12 summary build
 * (summ12), has its timings against the shared-memory kernel it replaced).
 *
 * Per (page, KV head): load the page's 16 keys, centre them (mu), form the 16x16 Gram
 * matrix X X^T, diagonalise it with parallel cyclic Jacobi (8 disjoint rotations per
 * round, 15 rounds per sweep, until the off-diagonal norm is below 1e-5 of the total,
 * at most 8 sweeps), take the top-r eigenpairs (sigma = sqrt(lambda), c_ik = sigma u_ik,
 * v_k = X^T u_k / sigma, zero when sigma is ~0: sigma <= 1e-6 sigma_0, as summary.c), fix
 * each basis vector's sign (largest-magnitude component positive: the CPU leaves
 * Jacobi's arbitrary sign, so tests compare sign-free quantities) and quantize as the CPU
 * does: mu int8 / one fp16 scale, V int4 [-7, 7] / one fp16 scale per vector, C int8 /
 * one fp16 scale per column, scales rounded up to fp16, values divided by the fp16 scale,
 * rounded to nearest even; or, for fp32 summaries, store mu, the sign-fixed basis and the
 * coefficients unquantized. RS (8 or 16) rank slots per summary, slots >= rank zero.
 * fp32 arithmetic: the int4/int8 quantization error is orders above the Jacobi error.
 */

#include "common.cuh"

#define JACOBI_MAX_SWEEPS 8

/* fp16 scale for magnitudes <= amax mapped to [-qmax, qmax], rounded up like the CPU
 * (summary.c) so |x / scale| <= qmax; zero for amax == 0. */
static __device__ __forceinline__ __half scale_f16(float amax, float qmax) {
    const float s = amax / qmax;
    if (!(s > 0.f)) return __float2half_rn(0.f);
    const __half h = __float2half_ru(s);
    return __hisinf(h) ? __ushort_as_half(0x7bff) : h;
}

static __device__ __forceinline__ float q_round(float x, float lim) {
    return fminf(fmaxf(rintf(x), -lim), lim);
}

/* Output arrays of one layer (base page 0 of KV head 0); q: quantized (mu_q .. coef_s
 * set), else fp32 (mu_f, basis_f, coef_f set). */
struct summary_out {
    int8_t *mu_q;
    __half *mu_s;
    uint8_t *basis_q;
    __half *basis_s;
    int8_t *coef_q;
    __half *coef_s;
    float *mu_f, *basis_f, *coef_f;
};

/* ------------------------------------------------------------------------------------
 * The kernel.
 * Two pages per warp, one per half-warp of 16 lanes. Lane i of a half keeps row i of the
 * Gram matrix and row i of U in registers, stored relative to i: b[r] = A[i][i ^ r],
 * ub[r] = U[i][i ^ r]. A sweep is 15 rounds m = 1..15 of the 8 disjoint pairs
 * {i, i ^ m} (each pair {a, b} meets once a sweep, in round a ^ b). With that ordering
 * and storage every register index and every shuffle mask is a compile-time constant:
 * the lanes of pair {i, i ^ m} both compute its rotation (from A[i][i], A[i^m][i^m] and
 * the lower lane's A[p][q]: bit-identical on both), the column rotations of A and U
 * take the other pairs' (c, s) by shfl_xor(., r), the row rotation takes the partner's
 * row by shfl_xor(., m). The diagonal is set by its closed form (as summary.c), the
 * rotated pair element to zero. A converged page of the warp stops rotating (same
 * criterion as above: off-diagonal norm <= 1e-5 of the total, at most 8 sweeps).
 * Keys and the Gram matrix go through shared memory (a 4 x 4 tile of A per lane);
 * the basis, its sign fix and the quantization are spread over the 16 lanes by dims. */
#define SUMM2_WARPS 2

template <int D> struct __align__(16) summ2_smem {
    float x[16][D + 4]; /* centred keys */
    float mu[D];
    float g[16][20]; /* Gram matrix, then U transposed: g[col][row] (16-byte rows) */
    int order[16];
};

static __device__ __forceinline__ float half_max(float x) {
    for (int o = 8; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
static __device__ __forceinline__ float half_sum(float x) {
    for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

template <int M> static __device__ __forceinline__ void jacobi_round(float (&b)[16], float (&ub)[16], int li, bool active) {
    constexpr int H = M >= 8 ? 8 : M >= 4 ? 4 : M >= 2 ? 2 : 1; /* top bit: p = the lane with it clear */
    const bool isp = (li & H) == 0;
    const float own = b[0];
    const float oth = __shfl_xor_sync(0xffffffffu, own, M);
    const float apq_o = __shfl_xor_sync(0xffffffffu, b[M], M);
    const float apq = isp ? b[M] : apq_o;
    const float app = isp ? own : oth, aqq = isp ? oth : own;
    float c = 1.f, s = 0.f, t = 0.f;
    if (active && fabsf(apq) > 1e-30f) {
        const float theta = (aqq - app) / (2.f * apq);
        t = (theta >= 0.f ? 1.f : -1.f) / (fabsf(theta) + sqrtf(theta * theta + 1.f));
        c = rsqrtf(t * t + 1.f);
        s = t * c;
    }
    const float ss = isp ? s : -s; /* the rotation as seen from this lane's side */
    /* columns: A <- A J, U <- U J; relative pair {r, r ^ M}, r the side with bit H clear,
     * is the absolute pair {i ^ r, i ^ r ^ M} whose parameters lane i ^ r holds */
#pragma unroll
    for (int r = 0; r < 16; r++) {
        if (r & H) continue;
        const float cr = r == 0 ? c : __shfl_xor_sync(0xffffffffu, c, r);
        const float sr = r == 0 ? ss : __shfl_xor_sync(0xffffffffu, ss, r);
        const float xa = b[r], xb = b[r ^ M];
        b[r] = cr * xa - sr * xb;
        b[r ^ M] = cr * xb + sr * xa;
        const float ua = ub[r], ubb = ub[r ^ M];
        ub[r] = cr * ua - sr * ubb;
        ub[r ^ M] = cr * ubb + sr * ua;
    }
    /* rows: A <- J^T A; the partner's A[i^M][i^j] is its b[j ^ M] */
    float pr[16];
#pragma unroll
    for (int j = 0; j < 16; j++) pr[j] = __shfl_xor_sync(0xffffffffu, b[j ^ M], M);
#pragma unroll
    for (int j = 0; j < 16; j++) b[j] = c * b[j] - ss * pr[j];
    b[0] = isp ? app - t * apq : aqq + t * apq;
    if (active) b[M] = 0.f;
}

static __device__ __forceinline__ void jacobi_sweep(float (&b)[16], float (&ub)[16], int li, bool active) {
    jacobi_round<1>(b, ub, li, active);
    jacobi_round<2>(b, ub, li, active);
    jacobi_round<3>(b, ub, li, active);
    jacobi_round<4>(b, ub, li, active);
    jacobi_round<5>(b, ub, li, active);
    jacobi_round<6>(b, ub, li, active);
    jacobi_round<7>(b, ub, li, active);
    jacobi_round<8>(b, ub, li, active);
    jacobi_round<9>(b, ub, li, active);
    jacobi_round<10>(b, ub, li, active);
    jacobi_round<11>(b, ub, li, active);
    jacobi_round<12>(b, ub, li, active);
    jacobi_round<13>(b, ub, li, active);
    jacobi_round<14>(b, ub, li, active);
    jacobi_round<15>(b, ub, li, active);
}

/* The steps of summary2_kernel, each for the calling half-warp's page (lane li of 16);
 * valid: the half has a page (an idle half computes on zeros and stores nothing). */

/* 1. the page's 16 keys -> sm.x (16-byte loads), zeros for an idle half */
template <int D, typename T>
static __device__ __forceinline__ void summ2_load_keys(summ2_smem<D> &sm, const uint16_t *__restrict__ kpool,
                                                       kv_strides ld, int32_t page, int32_t h, int li, bool valid) {
    const T *kp = reinterpret_cast<const T *>(kpool) + (size_t)page * ld.page + (size_t)h * ld.head;
#pragma unroll
    for (int m = 0; m < D / 8; m++) {
        const int i = li + 16 * m, tok = (8 * i) / D, dim = (8 * i) % D;
        float f[8];
        if (valid) {
            uint4 w = *reinterpret_cast<const uint4 *>(kp + (size_t)tok * ld.tok + dim);
            const T *e = reinterpret_cast<const T *>(&w);
#pragma unroll
            for (int z = 0; z < 8; z++) f[z] = kv_traits<T>::to_f(e[z]);
        } else {
#pragma unroll
            for (int z = 0; z < 8; z++) f[z] = 0.f;
        }
        *reinterpret_cast<float4 *>(&sm.x[tok][dim]) = make_float4(f[0], f[1], f[2], f[3]);
        *reinterpret_cast<float4 *>(&sm.x[tok][dim + 4]) = make_float4(f[4], f[5], f[6], f[7]);
    }
}

/* 2. mean -> sm.mu, keys centred in place */
template <int D> static __device__ __forceinline__ void summ2_centre(summ2_smem<D> &sm, int li) {
    constexpr int G = D / 64;
#pragma unroll
    for (int g = 0; g < G; g++) {
        const int d0 = 64 * g + 4 * li;
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const float4 v = *reinterpret_cast<const float4 *>(&sm.x[i][d0]);
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        const float4 mu = make_float4(s.x * (1.f / 16.f), s.y * (1.f / 16.f), s.z * (1.f / 16.f), s.w * (1.f / 16.f));
        *reinterpret_cast<float4 *>(&sm.mu[d0]) = mu;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            float4 v = *reinterpret_cast<const float4 *>(&sm.x[i][d0]);
            v.x -= mu.x, v.y -= mu.y, v.z -= mu.z, v.w -= mu.w;
            *reinterpret_cast<float4 *>(&sm.x[i][d0]) = v;
        }
    }
}

/* 3. Gram matrix -> sm.g: lane (rb, cb) forms A[rb + 4a][cb + 4b]; the mirrored lane
 * forms the transposed entry with the same fmas, so A is exactly symmetric */
template <int D> static __device__ __forceinline__ void summ2_gram(summ2_smem<D> &sm, int li) {
    const int rb = li & 3, cb = li >> 2;
    float acc[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[a][e] = 0.f;
#pragma unroll 4
    for (int dd = 0; dd < D; dd += 4) {
        float4 ra[4], cv[4];
#pragma unroll
        for (int a = 0; a < 4; a++) ra[a] = *reinterpret_cast<const float4 *>(&sm.x[rb + 4 * a][dd]);
#pragma unroll
        for (int e = 0; e < 4; e++) cv[e] = *reinterpret_cast<const float4 *>(&sm.x[cb + 4 * e][dd]);
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float s = acc[a][e];
                s = fmaf(ra[a].x, cv[e].x, s);
                s = fmaf(ra[a].y, cv[e].y, s);
                s = fmaf(ra[a].z, cv[e].z, s);
                s = fmaf(ra[a].w, cv[e].w, s);
                acc[a][e] = s;
            }
    }
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int e = 0; e < 4; e++) sm.g[rb + 4 * a][cb + 4 * e] = acc[a][e];
}

/* 4. Jacobi sweeps until both pages of the warp converge (or JACOBI_MAX_SWEEPS) */
static __device__ __forceinline__ void summ2_jacobi(float (&b)[16], float (&ub)[16], int li) {
    bool active = true;
    for (int sweep = 0; sweep < JACOBI_MAX_SWEEPS; sweep++) {
        float off = 0.f;
#pragma unroll
        for (int r = 1; r < 16; r++) off += b[r] * b[r];
        off = half_sum(off);
        const float tot = half_sum(b[0] * b[0]) + off;
        const bool conv = off <= 1e-10f * tot || tot == 0.f;
        if (__all_sync(0xffffffffu, conv)) return;
        active = !conv;
        jacobi_sweep(b, ub, li, active);
    }
}

/* 5. the eigenvalues' order, descending (ties: lower index first) -> sm.order; U^T -> sm.g */
template <int D>
static __device__ __forceinline__ void summ2_order(summ2_smem<D> &sm, float lam, const float (&ub)[16], int li,
                                                   int hbase) {
    int pos = 0;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float lj = __shfl_sync(0xffffffffu, lam, hbase | j);
        pos += (lj > lam) || (lj == lam && j < li);
    }
    sm.order[pos] = li;
#pragma unroll
    for (int r = 0; r < 16; r++) sm.g[li ^ r][li] = ub[r];
}

/* 6. mu: fp32, or int8 with one fp16 scale */
template <int D>
static __device__ __forceinline__ void summ2_store_mu(const summ2_smem<D> &sm, const summary_out &o, size_t sidx,
                                                      int li, bool valid, bool f32) {
    constexpr int G = D / 64;
    if (f32) {
        if (valid)
#pragma unroll
            for (int g = 0; g < G; g++)
                *reinterpret_cast<float4 *>(o.mu_f + sidx * D + 64 * g + 4 * li) = *reinterpret_cast<const float4 *>(&sm.mu[64 * g + 4 * li]);
    } else {
        float4 mv[G];
        float amax = 0.f;
#pragma unroll
        for (int g = 0; g < G; g++) {
            mv[g] = *reinterpret_cast<const float4 *>(&sm.mu[64 * g + 4 * li]);
            amax = fmaxf(amax, fmaxf(fmaxf(fabsf(mv[g].x), fabsf(mv[g].y)), fmaxf(fabsf(mv[g].z), fabsf(mv[g].w))));
        }
        amax = half_max(amax);
        const __half sh = scale_f16(amax, 127.f);
        const float sc = __half2float(sh);
        const float inv = sc > 0.f ? 1.f / sc : 0.f;
        if (valid) {
#pragma unroll
            for (int g = 0; g < G; g++) {
                const uint32_t w = (uint32_t)(uint8_t)(int8_t)q_round(mv[g].x * inv, 127.f) |
                                   (uint32_t)(uint8_t)(int8_t)q_round(mv[g].y * inv, 127.f) << 8 |
                                   (uint32_t)(uint8_t)(int8_t)q_round(mv[g].z * inv, 127.f) << 16 |
                                   (uint32_t)(uint8_t)(int8_t)q_round(mv[g].w * inv, 127.f) << 24;
                *reinterpret_cast<uint32_t *>(o.mu_q + sidx * D + 64 * g + 4 * li) = w;
            }
            if (li == 0) o.mu_s[sidx] = sh;
        }
    }
}

/* 7a. rank slot k >= rank: a zero basis vector */
template <int D, int RS>
static __device__ __forceinline__ void summ2_zero_slot(const summary_out &o, size_t sidx, int k, int li, bool valid,
                                                       bool f32) {
    constexpr int G = D / 64;
    if (valid) {
        if (f32) {
#pragma unroll
            for (int g = 0; g < G; g++)
                *reinterpret_cast<float4 *>(o.basis_f + (sidx * RS + k) * D + 64 * g + 4 * li) = make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
#pragma unroll
            for (int g = 0; g < G; g++) *reinterpret_cast<uint16_t *>(o.basis_q + (sidx * RS + k) * (D / 2) + 32 * g + 2 * li) = 0;
            if (li == 0) o.basis_s[sidx * RS + k] = __float2half_rn(0.f);
        }
    }
}

/* 7b. rank slot k < rank: basis vector v_k = X^T u_k / sigma with its sign fixed, stored
 * fp32 or int4 with one fp16 scale; returns lane li's coefficient c_(li) k (0 for a null
 * direction) */
template <int D, int RS>
static __device__ __forceinline__ float summ2_basis_slot(const summ2_smem<D> &sm, const summary_out &o, size_t sidx,
                                                         int k, float lam, float sig0, int li, int hbase, bool valid,
                                                         bool f32) {
    constexpr int G = D / 64;
    const int col = sm.order[k];
    const float lk = fmaxf(__shfl_sync(0xffffffffu, lam, hbase | col), 0.f);
    const float sig = sqrtf(lk);
    const bool null_dir = !(sig > 1e-6f * sig0) || sig == 0.f;
    float u[16];
#pragma unroll
    for (int i = 0; i < 16; i += 4) {
        const float4 w = *reinterpret_cast<const float4 *>(&sm.g[col][i]);
        u[i] = w.x, u[i + 1] = w.y, u[i + 2] = w.z, u[i + 3] = w.w;
    }
    float v[4 * G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const float4 xv = *reinterpret_cast<const float4 *>(&sm.x[i][64 * g + 4 * li]);
            s.x += xv.x * u[i], s.y += xv.y * u[i], s.z += xv.z * u[i], s.w += xv.w * u[i];
        }
        v[4 * g] = null_dir ? 0.f : s.x / sig;
        v[4 * g + 1] = null_dir ? 0.f : s.y / sig;
        v[4 * g + 2] = null_dir ? 0.f : s.z / sig;
        v[4 * g + 3] = null_dir ? 0.f : s.w / sig;
    }
    /* sign: largest-magnitude component positive (lowest index on ties) */
    float best = -1.f, bval = 0.f;
    int bidx = 1 << 30;
#pragma unroll
    for (int z = 0; z < 4 * G; z++) {
        const int dim = 64 * (z >> 2) + 4 * li + (z & 3);
        const float a = fabsf(v[z]);
        if (a > best || (a == best && dim < bidx)) best = a, bidx = dim, bval = v[z];
    }
    for (int off = 8; off > 0; off >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, off);
        const int oi = __shfl_xor_sync(0xffffffffu, bidx, off);
        const float ov = __shfl_xor_sync(0xffffffffu, bval, off);
        if (ob > best || (ob == best && oi < bidx)) best = ob, bidx = oi, bval = ov;
    }
    const float sgn = bval < 0.f ? -1.f : 1.f;
    const float cval = null_dir ? 0.f : sgn * sig * sm.g[col][li];
    if (f32) {
        if (valid)
#pragma unroll
            for (int g = 0; g < G; g++)
                *reinterpret_cast<float4 *>(o.basis_f + (sidx * RS + k) * D + 64 * g + 4 * li) =
                    make_float4(sgn * v[4 * g], sgn * v[4 * g + 1], sgn * v[4 * g + 2], sgn * v[4 * g + 3]);
        return cval;
    }
    float amax = 0.f;
#pragma unroll
    for (int z = 0; z < 4 * G; z++) {
        v[z] *= sgn;
        amax = fmaxf(amax, fabsf(v[z]));
    }
    amax = half_max(amax);
    const __half sh = scale_f16(amax, 7.f);
    const float sc = __half2float(sh);
    const float inv = sc > 0.f ? 1.f / sc : 0.f;
    if (valid) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            uint32_t w = 0;
#pragma unroll
            for (int e = 0; e < 4; e++) w |= ((uint32_t)(int)q_round(v[4 * g + e] * inv, 7.f) & 0xFu) << (4 * e);
            *reinterpret_cast<uint16_t *>(o.basis_q + (sidx * RS + k) * (D / 2) + 32 * g + 2 * li) = (uint16_t)w;
        }
        if (li == 0) o.basis_s[sidx * RS + k] = sh;
    }
    return cval;
}

/* 8. coefficients: fp32, or int8 with a per-column fp16 scale over the 16 tokens */
template <int RS>
static __device__ __forceinline__ void summ2_store_coef(const summary_out &o, size_t sidx, const float (&cvals)[RS],
                                                        int li, bool valid, bool f32) {
    if (f32) {
        if (valid) {
            float4 *crow = reinterpret_cast<float4 *>(o.coef_f + (sidx * 16 + li) * RS);
#pragma unroll
            for (int k = 0; k < RS; k += 4) crow[k / 4] = make_float4(cvals[k], cvals[k + 1], cvals[k + 2], cvals[k + 3]);
        }
        return;
    }
    /* coefficients: per-column scale over the 16 tokens */
    int8_t cq[RS];
#pragma unroll
    for (int k = 0; k < RS; k++) {
        const float amax = half_max(fabsf(cvals[k]));
        const __half sh = scale_f16(amax, 127.f);
        const float sc = __half2float(sh);
        const float inv = sc > 0.f ? 1.f / sc : 0.f;
        cq[k] = (int8_t)q_round(cvals[k] * inv, 127.f);
        if (valid && li == 0) o.coef_s[sidx * RS + k] = sh;
    }
    if (valid) {
        uint32_t w[RS / 4];
#pragma unroll
        for (int q = 0; q < RS / 4; q++) {
            w[q] = 0;
#pragma unroll
            for (int k = 0; k < 4; k++) w[q] |= (uint32_t)(uint8_t)cq[4 * q + k] << (8 * k);
        }
        uint2 *crow = reinterpret_cast<uint2 *>(o.coef_q + (sidx * 16 + li) * RS);
#pragma unroll
        for (int q = 0; q < RS / 8; q++) crow[q] = make_uint2(w[2 * q], w[2 * q + 1]);
    }
}

template <int D, typename T, int RS>
static __global__ void __launch_bounds__(SUMM2_WARPS * 32)
summary2_kernel(const uint16_t *__restrict__ kpool, kv_strides ld, const int32_t *__restrict__ pages, int32_t n,
                int32_t hkv, int32_t n_pages_pool, int32_t rank, summary_out o) {
    const bool f32 = o.mu_f != nullptr;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int lane = threadIdx.x & 31, li = lane & 15, hbase = lane & 16;
    summ2_smem<D> &sm = reinterpret_cast<summ2_smem<D> *>(smem_raw)[(threadIdx.x >> 4)];
    const int64_t item = ((int64_t)blockIdx.x * SUMM2_WARPS + (threadIdx.x >> 5)) * 2 + (lane >> 4);
    bool valid = item < (int64_t)n * hkv;
    int32_t page = valid ? pages[item / hkv] : 0;
    if (page < 0) valid = false; /* a decode graph's "no page filled" */
    if (!__any_sync(0xffffffffu, valid)) return;
    if (!valid) page = 0;
    const int32_t h = valid ? (int32_t)(item % hkv) : 0;

    summ2_load_keys<D, T>(sm, kpool, ld, page, h, li, valid);
    __syncwarp();
    summ2_centre<D>(sm, li);
    __syncwarp();
    summ2_gram<D>(sm, li);
    __syncwarp();
    float b[16], ub[16];
#pragma unroll
    for (int r = 0; r < 16; r++) {
        b[r] = sm.g[li][li ^ r];
        ub[r] = r == 0 ? 1.f : 0.f;
    }
    __syncwarp();
    summ2_jacobi(b, ub, li);
    const float lam = b[0];
    summ2_order<D>(sm, lam, ub, li, hbase);
    const float sig0 = sqrtf(fmaxf(half_max(lam), 0.f));
    __syncwarp();

    const size_t sidx = (size_t)h * n_pages_pool + page; /* within this layer */
    summ2_store_mu<D>(sm, o, sidx, li, valid, f32);
    float cvals[RS]; /* lane li: c_(li) k */
#pragma unroll(RS)
    for (int k = 0; k < RS; k++) {
        cvals[k] = 0.f;
        if (k >= rank) summ2_zero_slot<D, RS>(o, sidx, k, li, valid, f32);
        else cvals[k] = summ2_basis_slot<D, RS>(sm, o, sidx, k, lam, sig0, li, hbase, valid, f32);
    }
    summ2_store_coef<RS>(o, sidx, cvals, li, valid, f32);
}

template <int D, typename T, int RS>
static locks_status summary_launch_t(locks_cuda_cache *c, int32_t layer, const int32_t *d_pages,
                                     int32_t n, cudaStream_t st) {
    const int32_t hkv = c->p.n_kv_heads;
    const int64_t items = (int64_t)n * hkv;
    const size_t base = summary_index(c, layer, 0);
    summary_out o = {};
    if (c->f32) {
        o.mu_f = c->mu_f + base * D;
        o.basis_f = c->basis_f + base * RS * D;
        o.coef_f = c->coef_f + base * 16 * RS;
    } else {
        o.mu_q = c->mu + base * D;
        o.mu_s = c->mu_scale + base;
        o.basis_q = c->basis + base * RS * (D / 2);
        o.basis_s = c->basis_scale + base * RS;
        o.coef_q = c->coef + base * 16 * RS;
        o.coef_s = c->coef_scale + base * RS;
    }
    const size_t smem2 = sizeof(summ2_smem<D>) * 2 * SUMM2_WARPS;
    const unsigned blocks2 = (unsigned)((items + 2 * SUMM2_WARPS - 1) / (2 * SUMM2_WARPS));
    static bool smem2_set = false;
    if (!smem2_set) {
        CU_TRY(cudaFuncSetAttribute(summary2_kernel<D, T, RS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem2));
        smem2_set = true;
    }
    summary2_kernel<D, T, RS><<<blocks2, SUMM2_WARPS * 32, smem2, st>>>(
        cache_layer_k(c, layer), cache_strides(c), d_pages, n, hkv, c->p.n_pages, c->rank, o);
    CU_LAUNCH_CHECK(summary2_kernel);
    return LOCKS_OK;
}

template <int D, typename T>
static locks_status summary_launch_rs(locks_cuda_cache *c, int32_t layer, const int32_t *d_pages, int32_t n,
                                      cudaStream_t st) {
    return c->rslots == LOCKS_CUDA_MAX_RANK ? summary_launch_t<D, T, LOCKS_CUDA_MAX_RANK>(c, layer, d_pages, n, st)
                                            : summary_launch_t<D, T, LOCKS_CUDA_RANK_SLOTS>(c, layer, d_pages, n, st);
}

static locks_status summary_launch(locks_cuda_cache *c, int32_t layer, const int32_t *d_pages,
                                   int32_t n, cudaStream_t st) {
    const bool bf = c->p.kv_dtype == LOCKS_DTYPE_BF16;
    switch (c->p.head_dim) {
    case 64: return bf ? summary_launch_rs<64, __nv_bfloat16>(c, layer, d_pages, n, st) : summary_launch_rs<64, __half>(c, layer, d_pages, n, st);
    case 128: return bf ? summary_launch_rs<128, __nv_bfloat16>(c, layer, d_pages, n, st) : summary_launch_rs<128, __half>(c, layer, d_pages, n, st);
    case 256: return bf ? summary_launch_rs<256, __nv_bfloat16>(c, layer, d_pages, n, st) : summary_launch_rs<256, __half>(c, layer, d_pages, n, st);
    default: return LOCKS_ERR_UNSUPPORTED;
    }
}

extern "C" locks_status locks_cuda_summary_build(locks_cuda_cache *c, int32_t layer,
                                                 const int32_t *d_pages, int32_t n) {
    if (!c || !d_pages || layer < 0 || layer >= c->p.n_layers || n < 0) return LOCKS_ERR_INVALID_ARG;
    if (n == 0) return LOCKS_OK;
    return summary_launch(c, layer, d_pages, n, c->stream);
}

locks_status locks_cuda_summary_build_on(locks_cuda_cache *c, int32_t layer, const int32_t *d_pages, int32_t n,
                                         cudaStream_t st) {
    if (!c || !d_pages || layer < 0 || layer >= c->p.n_layers || n < 0) return LOCKS_ERR_INVALID_ARG;
    if (n == 0) return LOCKS_OK;
    return summary_launch(c, layer, d_pages, n, st);
}
