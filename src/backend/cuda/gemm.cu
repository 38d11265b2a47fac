// See gemm.cuh.
#include "backend/cuda/gemm.cuh"

#include <algorithm>

#include "backend/cuda/bf16.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

void gemm_row_major(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K,
                    float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                    float* C, int ldc) {
  if (M == 0 || N == 0) return;
  // cuBLAS wants leading dimensions of at least 1, also where K = 0 gives
  // the stored rows no length (as the bf16 path below).
  FORGE_CUBLAS_CHECK(cublasSgemm(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, std::max(1, ldb), A,
                                 std::max(1, lda), &beta, C, ldc));
}

void gemm_row_major_bf16(cublasHandle_t handle, cudaStream_t stream, bool trans_a, bool trans_b,
                         int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                         int ldb, float beta, float* C, int ldc, __nv_bfloat16* a_bf16,
                         __nv_bfloat16* b_bf16) {
  if (M == 0 || N == 0) return;
  // Stored shapes (row-major): A is [K, M] or [M, K], B is [N, K] or [K, N].
  const int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  launch_round_to_bf16(A, a_rows, a_cols, lda, a_bf16, a_cols, stream);
  launch_round_to_bf16(B, b_rows, b_cols, ldb, b_bf16, b_cols, stream);
  gemm_row_major_bf16_packed(handle, trans_a, trans_b, M, N, K, alpha, a_bf16, b_bf16, beta, C, ldc);
}

namespace {
void gemm_bf16_packed(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                      const __nv_bfloat16* a_bf16, const __nv_bfloat16* b_bf16, float beta, void* C,
                      cudaDataType_t c_type, int ldc) {
  if (M == 0 || N == 0) return;
  const int a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  FORGE_CUBLAS_CHECK(cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, b_bf16,
                                  CUDA_R_16BF, std::max(1, b_cols), a_bf16, CUDA_R_16BF,
                                  std::max(1, a_cols), &beta, C, c_type, ldc,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}
}  // namespace

void gemm_row_major_bf16_packed(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                                const __nv_bfloat16* a_bf16, const __nv_bfloat16* b_bf16, float beta, float* C,
                                int ldc) {
  gemm_bf16_packed(handle, trans_a, trans_b, M, N, K, alpha, a_bf16, b_bf16, beta, C, CUDA_R_32F, ldc);
}
void gemm_row_major_bf16_packed(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                                const __nv_bfloat16* a_bf16, const __nv_bfloat16* b_bf16, float beta,
                                __nv_bfloat16* C, int ldc) {
  gemm_bf16_packed(handle, trans_a, trans_b, M, N, K, alpha, a_bf16, b_bf16, beta, C, CUDA_R_16BF, ldc);
}

FORGE_CUDA_NAMESPACE_END
