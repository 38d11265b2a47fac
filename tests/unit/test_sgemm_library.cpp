// The CPU backend's SGEMM library (backend/cpu/sgemm_library.hpp): BLIS where
// it loads, OpenBLAS on request or without it; the weight gradients' A^T B in
// OpenBLAS on Intel AVX-512 CPUs beside BLIS's skx; FORGE_SGEMM's values; the
// self-check that guards the choice fails on wrong SGEMMs; the backend's GEMM
// runs the chosen library for each layout.
#include <gtest/gtest.h>

#include <cblas.h>

#include <cstring>
#include <vector>

#include "backend/backend_registry.hpp"
#include "backend/cpu/blas_core.hpp"
#include "backend/cpu/sgemm_library.hpp"
#include "core/rng.hpp"

namespace forge {
namespace {

TEST(SgemmLibrary, BlisWhereItLoadsOpenBlasOnRequest) {
  const SgemmLibrary def = choose_sgemm_library("");
  if (blis_sgemm()) {
    // tools/setup.sh installs libblis4-openmp: the default on a set-up machine.
    EXPECT_FALSE(def.openblas);
    EXPECT_EQ(def.name.rfind("BLIS ", 0), 0u) << def.name;
    EXPECT_FALSE(def.kernels.empty());
    EXPECT_EQ(def.sgemm, blis_sgemm());
    EXPECT_FALSE(choose_sgemm_library("blis").openblas);
  } else {
    EXPECT_TRUE(def.openblas);
    EXPECT_FALSE(def.warn) << "without BLIS the default is OpenBLAS, silently";
    const SgemmLibrary asked = choose_sgemm_library("blis");
    EXPECT_TRUE(asked.openblas);
    EXPECT_TRUE(asked.warn);
    EXPECT_NE(asked.note.find("not installed"), std::string::npos) << asked.note;
  }
  EXPECT_FALSE(def.warn) << def.note;
  EXPECT_EQ(choose_sgemm_library("auto").sgemm, def.sgemm);
  // A^T B: OpenBLAS beside BLIS's skx where the rule says so (this CPU's
  // identity), the same library as the rest everywhere else and with
  // FORGE_SGEMM=blis.
  const bool split = blis_sgemm() && def.kernels == "skx" &&
                     weight_gradients_in_openblas(detect_cpu_identity(), detect_cpu_level()) &&
                     !blas_core_choice().slow;
  EXPECT_EQ(def.sgemm_at_b, split ? &cblas_sgemm : def.sgemm) << def.at_b;
  EXPECT_EQ(def.at_b.empty(), !split) << def.at_b;
  if (split) {
    EXPECT_EQ(def.at_b, blas_core_choice().library + " core " + blas_core_choice().core);
  }
  const SgemmLibrary only_blis = choose_sgemm_library("blis");
  EXPECT_EQ(only_blis.sgemm_at_b, only_blis.sgemm);
  EXPECT_TRUE(only_blis.at_b.empty()) << only_blis.at_b;

  const SgemmLibrary ob = choose_sgemm_library("openblas");
  EXPECT_TRUE(ob.openblas);
  EXPECT_FALSE(ob.warn);
  EXPECT_EQ(ob.sgemm, &cblas_sgemm);
  EXPECT_EQ(ob.sgemm_at_b, &cblas_sgemm);
  EXPECT_TRUE(ob.at_b.empty());
  EXPECT_EQ(ob.name.rfind("OpenBLAS", 0), 0u) << ob.name;

  const SgemmLibrary bad = choose_sgemm_library("mkl");
  EXPECT_TRUE(bad.warn);
  EXPECT_NE(bad.note.find("FORGE_SGEMM=mkl ignored"), std::string::npos) << bad.note;
  EXPECT_EQ(bad.sgemm, def.sgemm) << "an unknown value falls back to auto";
}

// Where the weight gradients go to OpenBLAS: Intel CPUs that run BLIS's skx
// by forge's rule (blis_config.hpp), nowhere else.
TEST(SgemmLibrary, WeightGradientsInOpenBlasOnIntelAvx512BeyondSkylakeSp) {
  const CpuIdentity emerald_rapids{"GenuineIntel", 6, 0xCF}, granite_rapids{"GenuineIntel", 6, 0xAD},
      skylake_sp{"GenuineIntel", 6, 0x55}, alder_lake{"GenuineIntel", 6, 0x97}, zen4{"AuthenticAMD", 0x19, 0x11},
      zen5{"AuthenticAMD", 0x1A, 0x02};
  EXPECT_TRUE(weight_gradients_in_openblas(emerald_rapids, CpuLevel::kV4));
  EXPECT_TRUE(weight_gradients_in_openblas(granite_rapids, CpuLevel::kV4));
  EXPECT_FALSE(weight_gradients_in_openblas(emerald_rapids, CpuLevel::kV3)) << "AVX-512 disabled: no skx";
  EXPECT_FALSE(weight_gradients_in_openblas(skylake_sp, CpuLevel::kV4));
  EXPECT_FALSE(weight_gradients_in_openblas(alder_lake, CpuLevel::kV3));
  EXPECT_FALSE(weight_gradients_in_openblas(zen4, CpuLevel::kV4));
  EXPECT_FALSE(weight_gradients_in_openblas(zen5, CpuLevel::kV4)) << "skx there too, but not measured";
}

// Wrong SGEMMs the self-check must refuse.
void ignores_beta(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                  const float* A, int lda, const float* B, int ldb, float, float* C, int ldc) {
  cblas_sgemm(o, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
}
void ignores_trans_a(CBLAS_ORDER o, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                     const float* A, int, const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(o, CblasNoTrans, tb, M, N, K, alpha, A, K, B, ldb, beta, C, ldc);
}
void drops_last_k(CBLAS_ORDER o, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                  const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  // A short inner loop: the last k term of every product left out.
  std::vector<float> a(static_cast<size_t>(M) * (K - 1)), b(static_cast<size_t>(K - 1) * N);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k + 1 < K; ++k)
      a[static_cast<size_t>(m) * (K - 1) + k] = ta == CblasTrans ? A[static_cast<size_t>(k) * lda + m]
                                                                  : A[static_cast<size_t>(m) * lda + k];
  for (int k = 0; k + 1 < K; ++k)
    for (int n = 0; n < N; ++n)
      b[static_cast<size_t>(k) * N + n] = tb == CblasTrans ? B[static_cast<size_t>(n) * ldb + k]
                                                            : B[static_cast<size_t>(k) * ldb + n];
  cblas_sgemm(o, CblasNoTrans, CblasNoTrans, M, N, K - 1, alpha, a.data(), K - 1, b.data(), N, beta, C, ldc);
}

TEST(SgemmLibrary, SelfCheckPassesBothLibrariesAndRefusesWrongOnes) {
  EXPECT_TRUE(sgemm_self_check(cblas_sgemm));
  if (blis_sgemm()) {
    EXPECT_TRUE(sgemm_self_check(blis_sgemm()));
  }
  EXPECT_FALSE(sgemm_self_check(ignores_beta));
  EXPECT_FALSE(sgemm_self_check(ignores_trans_a));
  EXPECT_FALSE(sgemm_self_check(drops_last_k));
}

TEST(SgemmLibrary, BackendGemmRunsTheChosenLibrary) {
  // Shapes past the skinny tiles (skinny_gemm.hpp: A B^T up to 128 rows),
  // random values, a long K; A B^T and A^T B: the backend's result is that
  // layout's library's, bit for bit.
  auto cpu = make_backend("cpu");
  Rng rng(11);
  const int M = 203, N = 45, K = 1501;  // K past both libraries' K blocks: their sums round differently
  std::vector<float> A(static_cast<size_t>(M) * K), B(static_cast<size_t>(N) * K), At(A.size());
  for (float& v : A) v = static_cast<float>(rng.normal());
  for (float& v : B) v = static_cast<float>(rng.normal());
  for (float& v : At) v = static_cast<float>(rng.normal());
  // A^T B: sgemm_at_b at up to kAtBMaxThreads compute threads, sgemm above.
  const int threads_before = set_compute_threads(0);
  for (const int threads : {kAtBMaxThreads, kAtBMaxThreads + 1}) {
    set_compute_threads(threads);
    for (const bool trans_a : {false, true}) {
      std::vector<float> via_backend(static_cast<size_t>(M) * N, 1.0f), direct(via_backend);
      // trans_a: C = At^T B' with At read as K x M, B' = B read as K x N.
      const float* a = trans_a ? At.data() : A.data();
      const int lda = trans_a ? M : K, ldb = trans_a ? N : K;
      cpu->gemm(trans_a, !trans_a, M, N, K, 0.5f, a, lda, B.data(), ldb, 1.0f, via_backend.data(), N);
      const SgemmFn lib =
          trans_a && threads <= kAtBMaxThreads ? sgemm_library().sgemm_at_b : sgemm_library().sgemm;
      lib(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_a ? CblasNoTrans : CblasTrans, M, N, K, 0.5f, a,
          lda, B.data(), ldb, 1.0f, direct.data(), N);
      EXPECT_EQ(std::memcmp(via_backend.data(), direct.data(), direct.size() * sizeof(float)), 0)
          << (trans_a ? "A^T B" : "A B^T") << " at " << threads << " threads";
    }
  }
  set_compute_threads(threads_before);
}

}  // namespace
}  // namespace forge
