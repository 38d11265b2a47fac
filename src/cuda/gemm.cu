// See gemm.cuh.
#include "cuda/gemm.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

void gemm_row_major(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K,
                    float alpha, const float* A, int lda, const float* B, int ldb, float beta,
                    float* C, int ldc) {
  if (M == 0 || N == 0) return;
  FORGE_CUBLAS_CHECK(cublasSgemm(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A,
                                 lda, &beta, C, ldc));
}

FORGE_CUDA_NAMESPACE_END
