// The CPU kernel variants and the choice among them. backend/cpu's kernel
// files are compiled once per x86-64 level -- x86-64 (SSE2, the baseline any
// x86-64 CPU runs), x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512) -- or once
// for the build machine ("native", FORGE_NATIVE=ON); see variant_begin.hpp.
// Before the first "cpu" backend is made, the variant is chosen:
//   FORGE_CPU_KERNELS=<name>   that variant (InputError when this build lacks
//                              it or the CPU cannot run it)
//   otherwise                  the highest level the CPU runs
// and registered as backend "cpu" (backend_registry.hpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cpu/cpu_isa.hpp"

namespace forge {

struct CpuVariant {
  std::string name;  // "x86-64", "x86-64-v3", "x86-64-v4", "native"
  CpuLevel level;    // the level its code needs
  std::unique_ptr<Backend> (*make)();
  // Its decode GEMM (skinny_gemm.hpp): false where it leaves the shape to
  // BLAS. Here so that tests can tell which rows each variant's tiles take.
  bool (*skinny_gemm_nt)(int M, int N, int K, float alpha, const float* A, int lda, const float* W, int ldw,
                         float beta, float* C, int ldc);
};

// The variants built into this binary, lowest level first.
const std::vector<CpuVariant>& cpu_variants();

// Names of the variants this CPU can run.
std::vector<std::string> runnable_cpu_variants();

// The variant "cpu" uses (see above); InputError for a bad FORGE_CPU_KERNELS.
const CpuVariant& selected_cpu_variant();

// A backend of the named variant (tests run each one against the reference);
// InputError when the build lacks it or the CPU cannot run it.
std::unique_ptr<Backend> make_cpu_backend_variant(const std::string& name);

}  // namespace forge
