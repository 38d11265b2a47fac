// C = alpha op(A) op(B) + beta C through CBLAS (OpenBLAS, OpenMP build).
#include <cblas.h>

#include "backend/cpu/cpu_backend.hpp"

namespace forge {

void CpuBackend::gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                      const float* A, int lda, const float* B, int ldb, float beta, float* C,
                      int ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
              ldc);
}

}  // namespace forge
