// The library that runs the CPU backend's SGEMM (every C = alpha op(A) op(B) +
// beta C of backend/cpu beyond the skinny decode tiles): BLIS where it is
// installed, else OpenBLAS.
//
// Why BLIS first (docs/performance.md, "The SGEMM library"): inside
// bench_train_step's step on a Zen 4 (--profile, against OpenBLAS 0.3.21's
// own core there) BLIS 0.9 took 4-10% off the GEMMs' time and 4-7% off the
// step, and 150 agent SFT steps ran in 9.4 s against 10.4 (medians); its
// kernels follow the instruction set (a CPU newer than a table of models
// still gets AVX2 code; AVX-512 on Intel by forge's rule, blis_config.hpp),
// where OpenBLAS picks from a table of models (blas_core.hpp, which still
// fixes OpenBLAS's core where OpenBLAS runs).
//
// BLIS is Debian's OpenMP build (libblis4-openmp: the same libgomp thread pool
// as forge's kernels), loaded with dlopen(RTLD_LOCAL | RTLD_DEEPBIND) so that
// its CBLAS symbols, which have OpenBLAS's names, bind to BLIS inside BLIS and
// stay out of the global scope. It runs only after sgemm_self_check (below)
// passes with it.
//
// FORGE_SGEMM (environment):
//   auto (default, or unset)  BLIS when it loads and passes the check, else OpenBLAS
//   blis                      the same, with a warning when BLIS is not there
//   openblas                  OpenBLAS
//   anything else             auto, with a warning naming the accepted values
// Results are deterministic for a given library, kernels and thread count;
// they differ in the last bits between the two libraries.
#pragma once
#include <cblas.h>

#include <string>

namespace forge {

using SgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, float, const float*, int,
                         const float*, int, float, float*, int);

struct SgemmLibrary {
  std::string name;     // "BLIS 0.9.0" or "OpenBLAS 0.3.21"
  std::string kernels;  // BLIS's configuration ("zen3", "skx", "haswell"; blis_config.hpp) or OpenBLAS's core
  std::string note;     // why this library, when it is not the default's first choice; "" otherwise
  bool warn = false;    // note is a startup warning (FORGE_SGEMM asked for what could not be had)
  bool openblas = false;  // OpenBLAS runs the SGEMM (its core choice applies: blas_core.hpp)
  SgemmFn sgemm = nullptr;
};

// BLIS's cblas_sgemm, or nullptr when its library does not load. Loaded once;
// its thread count follows set_sgemm_threads.
SgemmFn blis_sgemm();
std::string blis_library_name();  // "BLIS 0.9.0"; "" when not loaded
std::string blis_kernels();       // the configuration BLIS picked for this CPU

// The choice for a FORGE_SGEMM value (the steps, for the startup choice and
// tests); "" means auto.
SgemmLibrary choose_sgemm_library(const std::string& policy);

// The choice made before main from FORGE_SGEMM.
const SgemmLibrary& sgemm_library();

// C = alpha op(A) op(B) + beta C through the chosen library (CBLAS arguments).
inline void cpu_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                      const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  sgemm_library().sgemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Whether f computes SGEMM right: odd shapes in the layouts the backend uses
// (A B, A B^T, and C += A^T B; beta 0 must overwrite a C of NaN) against sums
// in double, relative error 1e-5 of the sum of |terms|.
bool sgemm_self_check(SgemmFn f);

// Threads of both libraries' SGEMM (OpenBLAS's and BLIS's own settings).
void set_sgemm_threads(int n);

}  // namespace forge
