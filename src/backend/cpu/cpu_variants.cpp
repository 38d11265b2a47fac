// The variant table, the choice (cpu_variants.hpp) and the registration of
// backend "cpu", with the thread hook that keeps OpenBLAS on the same thread
// count as the OpenMP loops.
#include "backend/cpu/cpu_variants.hpp"

#include <cstdlib>

#include "backend/backend_registry.hpp"
#include "backend/cpu/sgemm_library.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"

namespace forge {

// Each variant's factory (cpu_backend.cpp) and decode GEMM (skinny_gemm.cpp),
// compiled per variant.
#define FORGE_DECLARE_CPU_VARIANT(ns)                                                                     \
  namespace ns {                                                                                          \
  std::unique_ptr<Backend> make_cpu_backend();                                                            \
  bool skinny_gemm_nt(int M, int N, int K, float alpha, const float* A, int lda, const float* W, int ldw, \
                      float beta, float* C, int ldc);                                                     \
  }
#ifdef FORGE_HAS_CPU_x86_64
FORGE_DECLARE_CPU_VARIANT(cpu_x86_64)
#endif
#ifdef FORGE_HAS_CPU_x86_64_v3
FORGE_DECLARE_CPU_VARIANT(cpu_x86_64_v3)
#endif
#ifdef FORGE_HAS_CPU_x86_64_v4
FORGE_DECLARE_CPU_VARIANT(cpu_x86_64_v4)
#endif
#ifdef FORGE_HAS_CPU_native
FORGE_DECLARE_CPU_VARIANT(cpu_native)
#endif
#undef FORGE_DECLARE_CPU_VARIANT

const std::vector<CpuVariant>& cpu_variants() {
  static const std::vector<CpuVariant> variants = [] {
    std::vector<CpuVariant> v;
#ifdef FORGE_HAS_CPU_x86_64
    v.push_back({"x86-64", CpuLevel::kX86_64, cpu_x86_64::make_cpu_backend, cpu_x86_64::skinny_gemm_nt});
#endif
#ifdef FORGE_HAS_CPU_x86_64_v3
    v.push_back({"x86-64-v3", CpuLevel::kV3, cpu_x86_64_v3::make_cpu_backend, cpu_x86_64_v3::skinny_gemm_nt});
#endif
#ifdef FORGE_HAS_CPU_x86_64_v4
    v.push_back({"x86-64-v4", CpuLevel::kV4, cpu_x86_64_v4::make_cpu_backend, cpu_x86_64_v4::skinny_gemm_nt});
#endif
#ifdef FORGE_HAS_CPU_native
    // Built for the build machine (or FORGE_NATIVE_ARCH): a CPU without an
    // extension it was compiled for never gets here, refused at start
    // (cpu_build_target.hpp), so it runs on this CPU whatever its level.
    v.push_back({"native", detect_cpu_level(), cpu_native::make_cpu_backend, cpu_native::skinny_gemm_nt});
#endif
    return v;
  }();
  return variants;
}

namespace {

std::string names(const std::vector<std::string>& list) { return list.empty() ? "none" : join(list, ", "); }

const CpuVariant& find_runnable(const std::string& name, const std::string& asked_by) {
  std::vector<std::string> built;
  for (const auto& v : cpu_variants()) {
    built.push_back(v.name);
    if (v.name != name) continue;
    if (v.level > detect_cpu_level())
      throw InputError(asked_by + "CPU kernels '" + name + "' need " + cpu_level_name(v.level) +
                       "; this CPU is " + cpu_level_name(detect_cpu_level()) +
                       " (it runs: " + names(runnable_cpu_variants()) + ")");
    return v;
  }
  throw InputError(asked_by + "no CPU kernels '" + name + "' in this build (it has: " + names(built) + ")");
}

}  // namespace

std::vector<std::string> runnable_cpu_variants() {
  std::vector<std::string> out;
  for (const auto& v : cpu_variants())
    if (v.level <= detect_cpu_level()) out.push_back(v.name);
  return out;
}

const CpuVariant& selected_cpu_variant() {
  const char* forced = std::getenv("FORGE_CPU_KERNELS");
  if (forced && *forced) return find_runnable(forced, "FORGE_CPU_KERNELS: ");
  const CpuVariant* best = nullptr;
  for (const auto& v : cpu_variants())
    if (v.level <= detect_cpu_level()) best = &v;
  if (!best) throw Error("no CPU kernel variant of this build runs on this CPU");
  return *best;
}

std::unique_ptr<Backend> make_cpu_backend_variant(const std::string& name) {
  return find_runnable(name, "").make();
}

namespace {

std::unique_ptr<Backend> make_selected(Precision precision) {
  if (precision != Precision::kFp32)
    throw InputError("backend 'cpu' computes in FP32 only; precision bf16 needs the cuda backend");
  return selected_cpu_variant().make();
}

void set_blas_threads(int n) { set_sgemm_threads(n); }

[[maybe_unused]] const bool registered = register_backend("cpu", make_selected, set_blas_threads);

}  // namespace

}  // namespace forge
