// Row-major GEMM on cuBLAS (column-major): C = alpha op(A) op(B) + beta C is
// computed as C^T = alpha op(B)^T op(A)^T + beta C^T, i.e. cuBLAS with the
// operands swapped.
//   FP32: cublasSgemm, CUBLAS_DEFAULT_MATH (no TF32), so results match the
//     CPU backend to FP32 rounding.
//   bf16: A and B rounded to bf16 (round to nearest even) into packed scratch
//     (a_bf16: M*K, b_bf16: K*N elements), then cublasGemmEx with CUDA_R_16BF
//     inputs, FP32 C and CUBLAS_COMPUTE_32F (tensor cores, FP32 accumulation).
//     C and beta C stay FP32 (but in the bf16-C form below).
//     gemm_row_major_bf16_packed takes operands
//     already rounded and packed (A: M*K, B: K*N elements, rows as stored),
//     so that one rounding can serve two products; its second form writes
//     C as bf16 (CUDA_R_16BF: the FP32 accumulators rounded to nearest
//     even), for a result whose readers take it as bf16.
#pragma once
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

void gemm_row_major(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K,
                    float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                    float* C, int ldc);

void gemm_row_major_bf16(cublasHandle_t handle, cudaStream_t stream, bool trans_a, bool trans_b,
                         int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                         int ldb, float beta, float* C, int ldc, __nv_bfloat16* a_bf16,
                         __nv_bfloat16* b_bf16);

void gemm_row_major_bf16_packed(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                                const __nv_bfloat16* a_bf16, const __nv_bfloat16* b_bf16, float beta, float* C,
                                int ldc);
void gemm_row_major_bf16_packed(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                                const __nv_bfloat16* a_bf16, const __nv_bfloat16* b_bf16, float beta,
                                __nv_bfloat16* C, int ldc);

FORGE_CUDA_NAMESPACE_END
