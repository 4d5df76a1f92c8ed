/*
 * gemm_rows_check.cu — is a cuBLAS product row batch invariant? For the GPU engine's
 * decode product shapes (Llama-3.1-8B and SmolLM2-135M, bf16 weights, fp32 output, the
 * engine's cublasGemmEx call), the same input row placed as row 0 of products of M = 1 .. 8
 * rows (other rows random) and as row r of an M = 8 product: prints whether each output
 * row equals M = 8's bit for bit, and the time per product of M = 1 and M = 8.
 * Build: nvcc -O2 -arch=sm_90 dev/cuda/gemm_rows_check.cu -lcublas -o gemm_rows_check
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __global__ void fill(__nv_bfloat16 *p, size_t n, uint64_t seed, float a) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        p[i] = __float2bfloat16(a * ((float)(z >> 40) / 16777216.f * 2.f - 1.f));
    }
}

int main(void) {
    const struct { const char *name; int rows, cols; } shapes[] = {
        {"llama wqkv", 6144, 4096}, {"llama wo", 4096, 4096}, {"llama wgu", 28672, 4096},
        {"llama wdown", 4096, 14336}, {"llama logits", 128256, 4096}, {"smol wqkv", 960, 576},
        {"smol wo", 576, 576}, {"smol wgu", 3072, 576}, {"smol wdown", 576, 1536}, {"smol logits", 49152, 576}};
    cublasHandle_t h;
    cublasCreate(&h);
    void *ws;
    cudaMalloc(&ws, 32 << 20);
    cublasSetWorkspace(h, ws, 32 << 20);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int all_equal = 1;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int R = shapes[si].rows, C = shapes[si].cols;
        __nv_bfloat16 *w, *x;
        float *y;
        cudaMalloc(&w, (size_t)R * C * 2);
        cudaMalloc(&x, (size_t)16 * C * 2);
        cudaMalloc(&y, (size_t)8 * R * 4);
        fill<<<1024, 256>>>(w, (size_t)R * C, 7 + si, 0.03f);
        fill<<<64, 256>>>(x, (size_t)16 * C, 99 + si, 1.f);
        float *ref = (float *)malloc((size_t)R * 4), *got = (float *)malloc((size_t)R * 4);
        const float one = 1.f, zero = 0.f;
        /* the row under test: x row 8; M = 8 product of rows 8..15 -> its row 0 */
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, R, 8, C, &one, w, CUDA_R_16BF, C, x + (size_t)8 * C, CUDA_R_16BF, C,
                     &zero, y, CUDA_R_32F, R, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(ref, y, (size_t)R * 4, cudaMemcpyDeviceToHost);
        printf("%-13s %6d x %5d: row 0 of M =", shapes[si].name, R, C);
        for (int M = 1; M <= 8; M++) {
            cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, R, M, C, &one, w, CUDA_R_16BF, C, x + (size_t)8 * C, CUDA_R_16BF,
                         C, &zero, y, CUDA_R_32F, R, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            cudaMemcpy(got, y, (size_t)R * 4, cudaMemcpyDeviceToHost);
            const int eq = memcmp(got, ref, (size_t)R * 4) == 0;
            all_equal &= eq || M == 8;
            printf(" %d:%s", M, eq ? "=" : "DIFF");
        }
        /* the same row as row r of an M = 8 product (x rows 8 - r .. 15 - r) */
        printf(" | as row r of M = 8:");
        for (int r = 1; r < 8; r++) {
            cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, R, 8, C, &one, w, CUDA_R_16BF, C, x + (size_t)(8 - r) * C,
                         CUDA_R_16BF, C, &zero, y, CUDA_R_32F, R, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            cudaMemcpy(got, y + (size_t)r * R, (size_t)R * 4, cudaMemcpyDeviceToHost);
            printf(" %d:%s", r, memcmp(got, ref, (size_t)R * 4) == 0 ? "=" : "DIFF");
        }
        float ms[2];
        for (int k = 0; k < 2; k++) {
            const int M = k ? 8 : 1;
            for (int it = 0; it < 3; it++)
                cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, R, M, C, &one, w, CUDA_R_16BF, C, x, CUDA_R_16BF, C, &zero,
                             y, CUDA_R_32F, R, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            cudaEventRecord(e0);
            for (int it = 0; it < 20; it++)
                cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, R, M, C, &one, w, CUDA_R_16BF, C, x, CUDA_R_16BF, C, &zero,
                             y, CUDA_R_32F, R, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms[k], e0, e1);
        }
        printf(" | us M=1 %.1f M=8 %.1f\n", 1000 * ms[0] / 20, 1000 * ms[1] / 20);
        free(ref), free(got);
        cudaFree(w), cudaFree(x), cudaFree(y);
    }
    printf("row 0 of M = 1..7 equal to M = 8 for every shape: %s\n", all_equal ? "yes" : "no");
    return 0;
}
