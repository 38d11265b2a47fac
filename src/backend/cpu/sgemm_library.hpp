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
// The weight gradients' layout, C += A^T B (dW += dY^T X: a small M x N over
// the step's thousands of tokens), goes to OpenBLAS where
// weight_gradients_in_openblas says so: on Intel AVX-512 CPUs, where BLIS runs
// its skx kernels by forge's rule, OpenBLAS's SkylakeX core ran the four
// weight-gradient GEMMs of bench_train_step's layer 13-30% faster than BLIS on
// an Emerald Rapids (2 threads, interleaved; the other layouts level), and
// in the step the linear backward went from 0.83-0.95 (median 0.85) to
// 0.86-1.05 (median 1.00) of the forward GEMMs' rate, 9 profiled runs each
// (docs/performance.md, "Emerald Rapids, 2 cores: the weight gradients in
// OpenBLAS"); at one thread the two were level (OpenBLAS 1-12% ahead). Only
// with OpenBLAS on a core that is not a fallback (blas_core.hpp) and passing
// the self-check below, and only while the SGEMM runs on at most
// kAtBMaxThreads threads (at_b_split_applies):
// on 16 threads of that CPU OpenBLAS ran the whole layer at 0.77 of BLIS's
// rate (2026-11-26), the weight gradients alone unmeasured, so there BLIS
// keeps them until a measurement says otherwise (bench_blas, `step dW`).
//
// FORGE_SGEMM (environment):
//   auto (default, or unset)  BLIS when it loads and passes the check (A^T B by the rules above), else OpenBLAS
//   blis                      BLIS for every layout, with a warning when BLIS is not there
//   openblas                  OpenBLAS
//   anything else             auto, with a warning naming the accepted values
// Results are deterministic for a given library, kernels and thread count;
// they differ in the last bits between the two libraries.
#pragma once
#include <cblas.h>
#include <omp.h>

#include <string>

#include "backend/cpu/cpu_isa.hpp"

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
  // The weight gradients' layout (A^T B) where OpenBLAS runs it beside BLIS:
  // "OpenBLAS 0.3.21 core SkylakeX"; "" when `sgemm` runs every layout.
  std::string at_b;
  SgemmFn sgemm_at_b = nullptr;  // == sgemm unless at_b is set
};

// The rule: Intel CPUs where forge runs BLIS's skx kernels (blis_config.hpp:
// x86-64-v4 but Skylake-SP). Measured only there; elsewhere BLIS keeps every
// layout.
bool weight_gradients_in_openblas(const CpuIdentity& cpu, CpuLevel level);

// The most compute threads (set_compute_threads, OpenMP's count) at which
// sgemm_at_b runs the weight gradients: measured at 1 and 2.
constexpr int kAtBMaxThreads = 2;

// Whether A^T B goes to sgemm_at_b at the current compute thread count.
inline bool at_b_split_applies() { return omp_get_max_threads() <= kAtBMaxThreads; }

// BLIS's cblas_sgemm, or nullptr when its library does not load. Loaded once;
// its thread count follows set_sgemm_threads.
SgemmFn blis_sgemm();
std::string blis_library_name();  // "BLIS 0.9.0"; "" when not loaded
std::string blis_kernels();       // the configuration BLIS picked for this CPU

// The choice for a FORGE_SGEMM value (the steps, for the startup choice and
// tests); "" means auto.
SgemmLibrary choose_sgemm_library(const std::string& policy);

// The choice from FORGE_SGEMM, made at its first use (the commands' startup
// line through host_runtime(), else the first SGEMM) and kept.
const SgemmLibrary& sgemm_library();

// C = alpha op(A) op(B) + beta C through the chosen library (CBLAS arguments;
// A^T B through sgemm_at_b at up to kAtBMaxThreads threads).
inline void cpu_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                      const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  const SgemmLibrary& lib = sgemm_library();
  const bool at_b = ta == CblasTrans && tb == CblasNoTrans && at_b_split_applies();
  const SgemmFn f = at_b ? lib.sgemm_at_b : lib.sgemm;
  f(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Whether f computes SGEMM right: odd shapes in the layouts the backend uses
// (A B, A B^T, and C += A^T B; beta 0 must overwrite a C of NaN) against sums
// in double, relative error 1e-5 of the sum of |terms|.
bool sgemm_self_check(SgemmFn f);

// Threads of both libraries' SGEMM (OpenBLAS's and BLIS's own settings).
void set_sgemm_threads(int n);

}  // namespace forge
