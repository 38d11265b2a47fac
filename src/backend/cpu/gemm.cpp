// C = alpha op(A) op(B) + beta C: skinny A B^T shapes (a decode step, the head
// on sampling rows) through skinny_gemm.hpp, everything else through the SGEMM
// library forge chose (sgemm_library.hpp: BLIS, else OpenBLAS).
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/sgemm_library.hpp"
#include "backend/cpu/skinny_gemm.hpp"

#include "backend/cpu/variant_begin.hpp"

namespace forge::FORGE_CPU_NS {

void CpuBackend::gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                      const float* A, int lda, const float* B, int ldb, float beta, float* C,
                      int ldc) {
  if (M == 0 || N == 0) return;
  if (!trans_a && trans_b && skinny_gemm_nt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
  cpu_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
            trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
