// The CPU backend's GEMM against a double-precision loop, on the shapes its
// skinny kernels take (A B^T with 1..kSkinnyMaxRows rows) and just past them
// (BLAS): rows, weight rows and depths that are and are not multiples of the
// tiles (AVX-512: 1-4 rows against 16, 12, 8 or 6 weight rows; 5-8 rows
// against 16; beyond, 8 weight rows x 16 or 32 rows; 16 lanes of k. AVX2,
// from 16 rows: 6 weight rows x 8 or 16 rows), in every kernel variant this
// CPU runs (the x86-64 one is BLAS throughout), leading dimensions wider than
// the matrices, and alpha/beta accumulation. Tolerance:
// |C - C_ref| <= 1e-6 sum_k |alpha A B| + |beta C|, well above FP32 summation
// error over these depths and far below any indexing error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_variants.hpp"
#include "backend/cpu/skinny_gemm.hpp"
#include "core/rng.hpp"

namespace forge {
namespace {

void check_nt(const std::string& variant, int M, int N, int K, float alpha, float beta) {
  Rng rng(static_cast<uint64_t>(M) * 7919 + N * 31 + K);
  const int lda = K + 3, ldb = K + 5, ldc = N + 2;
  std::vector<float> A(static_cast<size_t>(M) * lda), B(static_cast<size_t>(N) * ldb), C(static_cast<size_t>(M) * ldc);
  for (auto& x : A) x = static_cast<float>(rng.normal());
  for (auto& x : B) x = static_cast<float>(rng.normal());
  for (auto& x : C) x = static_cast<float>(rng.normal());
  const std::vector<float> C0 = C;
  const auto cpu = make_cpu_backend_variant(variant);
  cpu->gemm(false, true, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  double worst = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < ldc; ++n) {
      const size_t i = static_cast<size_t>(m) * ldc + n;
      if (n >= N) {  // the padding columns stay untouched
        ASSERT_EQ(C[i], C0[i]) << "wrote outside the matrix at row " << m << " column " << n;
        continue;
      }
      double ref = beta * C0[i], scale = std::fabs(beta * C0[i]);
      for (int k = 0; k < K; ++k) {
        const double t = static_cast<double>(alpha) * A[static_cast<size_t>(m) * lda + k] * B[static_cast<size_t>(n) * ldb + k];
        ref += t;
        scale += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(C[i] - ref) / scale);
    }
  EXPECT_LE(worst, 1e-6) << variant << " M " << M << " N " << N << " K " << K << " alpha " << alpha << " beta " << beta;
}

TEST(CpuGemm, SkinnyRowsMatchDouble) {
  for (const std::string& variant : runnable_cpu_variants()) {
    for (int M : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 23, 24, 25, 31, 32, 33, 64, 100, kSkinnyMaxRows, kSkinnyMaxRows + 1})
      for (int N : {1, 3, 8, 13, 200, 600})
        for (int K : {1, 7, 8, 15, 16, 37, 576}) check_nt(variant, M, N, K, 1.0f, 0.0f);
  }
}

TEST(CpuGemm, SkinnyAccumulatesWithAlphaBeta) {
  for (const std::string& variant : runnable_cpu_variants()) {
    for (int M : {1, 3, 4, 5, 48})
      for (float beta : {1.0f, 0.5f}) check_nt(variant, M, 27, 40, 0.25f, beta);
  }
}

// Which rows each variant's tiles take (skinny_gemm.hpp): 1..128 with
// AVX-512, 16..128 with AVX2, none in the x86-64 variant; the rest is BLAS's.
// A variant that silently fell back to BLAS would pass the cases above.
TEST(CpuGemm, EachVariantTakesTheRowsOfItsTiles) {
  const std::vector<float> A(129 * 8, 1.0f), W(5 * 8, 1.0f);
  std::vector<float> C(129 * 5);
  for (const CpuVariant& v : cpu_variants()) {
    if (v.level > detect_cpu_level()) continue;
    for (int M : {1, 8, 15, 16, 17, 128, 129}) {
      const bool want = M <= kSkinnyMaxRows && (v.level >= CpuLevel::kV4 || (v.level == CpuLevel::kV3 && M >= 16));
      std::fill(C.begin(), C.end(), 0.0f);
      EXPECT_EQ(v.skinny_gemm_nt(M, 5, 8, 1.0f, A.data(), 8, W.data(), 8, 0.0f, C.data(), 5), want)
          << v.name << " M " << M;
      if (want) {
        EXPECT_EQ(C[static_cast<size_t>(M - 1) * 5 + 4], 8.0f) << v.name << " M " << M;
      }
    }
  }
}

}  // namespace
}  // namespace forge
