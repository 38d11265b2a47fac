// Row-major GEMM on cuBLAS (column-major): C = alpha op(A) op(B) + beta C is
// computed as C^T = alpha op(B)^T op(A)^T + beta C^T, i.e. cublasSgemm with
// the operands swapped. FP32 inputs and accumulation, CUBLAS_DEFAULT_MATH
// (no TF32), so results match the CPU backend to FP32 rounding. bf16 inputs
// with FP32 accumulation (cublasGemmEx / cuBLASLt) are the next step.
#pragma once
#include "cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

void gemm_row_major(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K,
                    float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                    float* C, int ldc);

FORGE_CUDA_NAMESPACE_END
