// The CPU kernel variants (backend/cpu/cpu_variants.hpp): every backend case
// of tests/emulation/backend_cases.hpp run by the x86-64-v3 and x86-64-v4
// kernels against the build's baseline variant (x86-64: SSE2 only), at the
// cases' FP32 tolerance (1e-5 relative); a variant this CPU cannot run skips
// with the reason. Paged attention again at the head dims and block sizes
// whose paths the shared case does not reach. Then the choice: the highest
// level the CPU runs, and
// FORGE_CPU_KERNELS picking another or naming one that cannot run (a clear
// InputError).
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cpu/cpu_isa.hpp"
#include "backend/cpu/cpu_variants.hpp"
#include "core/error.hpp"
#include "core/scoped_env.hpp"

#define FORGE_BACKEND_CASES_REFERENCE() ::forge::make_cpu_backend_variant(::forge::cpu_variants().front().name)
#include "emulation/backend_cases.hpp"

namespace forge {
namespace {

// The named variant's backend, or nullptr with the reason (not built, not
// runnable here, or the baseline itself).
template <const char* name>
Backend* variant_backend(std::string* why) {
  static std::string reason;
  static const std::unique_ptr<Backend> backend = []() -> std::unique_ptr<Backend> {
    if (cpu_variants().front().name == name) {
      reason = std::string(name) + " is the reference";
      return nullptr;
    }
    try {
      return make_cpu_backend_variant(name);
    } catch (const InputError& e) {
      reason = e.what();
      return nullptr;
    }
  }();
  *why = reason;
  return backend.get();
}

constexpr char kV3[] = "x86-64-v3";
constexpr char kV4[] = "x86-64-v4";

FORGE_BACKEND_CASES(CpuKernelsV3, variant_backend<kV3>)
FORGE_BACKEND_CASES(CpuKernelsV4, variant_backend<kV4>)

// Paged attention on each variant against the baseline (itself checked
// against a double-precision softmax: RolloutEngine.PagedAttentionMatchesNaiveSoftmax)
// where the shared case (D 24 in blocks of 4) reaches no compiled head dim
// and no whole eight-position group: D 16, 32, 64, 128 (one and two register
// panels, 4 and 2 sets of accumulators) and 24 (any multiple of 8), blocks
// of whole and partial groups.
TEST(CpuVariants, PagedAttentionHeadDimsMatchTheBaseline) {
  const std::string base = cpu_variants().front().name;
  const auto reference = make_cpu_backend_variant(base);
  int compared = 0;
  for (const std::string& name : runnable_cpu_variants()) {
    if (name == base) continue;
    const auto variant = make_cpu_backend_variant(name);
    ++compared;
    for (int D : {16, 24, 32, 64, 128})
      for (int bs : {8, 12, 16}) {
        SCOPED_TRACE(name + " D " + std::to_string(D) + " block " + std::to_string(bs));
        namespace bc = backend_cases;
        const bc::PagedCase c = bc::paged_case({1, 9, 150, 300}, D, bs);
        bc::expect_close(bc::run_paged(*variant, c, c.max_len).out, bc::run_paged(*reference, c, c.max_len).out,
                         "paged attention");
      }
  }
  if (compared == 0) GTEST_SKIP() << "no variant above the baseline " << base << " runs on this CPU";
}

TEST(CpuVariants, TheHighestLevelThisCpuRunsIsChosen) {
  const auto runnable = runnable_cpu_variants();
  ASSERT_FALSE(runnable.empty());
  EXPECT_EQ(selected_cpu_variant().name, runnable.back());
  // The same choice made from the build's list and the CPU's level directly.
  const CpuVariant* best = nullptr;
  for (const auto& v : cpu_variants())
    if (v.level <= detect_cpu_level() && (!best || v.level >= best->level)) best = &v;
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(selected_cpu_variant().name, best->name);
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
}

TEST(CpuVariants, EnvironmentPicksAnotherVariant) {
  const std::string base = cpu_variants().front().name;
  const ScopedEnv env("FORGE_CPU_KERNELS", base.c_str());
  EXPECT_EQ(selected_cpu_variant().name, base);
}

TEST(CpuVariants, UnknownOrUnrunnableVariantIsAnInputError) {
  {
    const ScopedEnv env("FORGE_CPU_KERNELS", "pentium");
    try {
      selected_cpu_variant();
      FAIL() << "no error for FORGE_CPU_KERNELS=pentium";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("no CPU kernels 'pentium'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(cpu_variants().front().name), std::string::npos) << e.what();
    }
  }
  for (const auto& v : cpu_variants()) {
    if (v.level > detect_cpu_level()) {
      EXPECT_THROW(make_cpu_backend_variant(v.name), InputError) << v.name;
    }
  }
}

}  // namespace
}  // namespace forge
