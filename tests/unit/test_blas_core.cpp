// OpenBLAS core selection (backend/cpu/blas_core.hpp): the library's fallback
// core forced in this process (Prescott, SSE3), then forge's correction must
// reach the CPU's own core (rank 3 or 4: AVX2 or AVX-512 kernels) and pass the
// SGEMM self-check; "keep" leaves it and marks it slow; a core the CPU cannot
// run or a name OpenBLAS lacks is refused; a library choice that is not a
// fallback is left alone. Each test puts the original core back. The host's
// startup warnings: more threads than cores, and ranks sharing cores with
// spinning OpenMP threads.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/cpu/blas_core.hpp"
#include "backend/cpu/sgemm_library.hpp"
#include "backend/cpu/cpu_isa.hpp"
#include "backend/host_runtime.hpp"
#include "core/scoped_env.hpp"

namespace forge {
namespace {

class BlasCore : public ::testing::Test {
 protected:
  void SetUp() override {
    original_ = blas_core_name();
    if (detect_cpu_level() < CpuLevel::kV3) GTEST_SKIP() << "this CPU has no AVX2: no fallback to correct";
  }
  void TearDown() override { switch_blas_core(original_); }
  std::string original_;
};

TEST_F(BlasCore, ForcedFallbackIsReplacedByTheCpusCore) {
  ASSERT_TRUE(switch_blas_core("Prescott")) << "could not force the fallback core";
  ASSERT_EQ(blas_core_name(), "Prescott");
  const BlasCoreChoice c = correct_blas_core(detect_cpu_level(), "auto", false);
  EXPECT_EQ(c.at_load, "Prescott");
  EXPECT_EQ(c.core, blas_core_for(detect_cpu_level()));
  EXPECT_EQ(blas_core_name(), c.core);
  EXPECT_GE(blas_core_rank(c.core), 3);
  EXPECT_FALSE(c.slow);
  EXPECT_NE(c.note.find("switched from Prescott"), std::string::npos) << c.note;
  EXPECT_TRUE(blas_self_check());
}

TEST_F(BlasCore, KeepLeavesTheFallbackAndMarksItSlow) {
  ASSERT_TRUE(switch_blas_core("Nehalem"));
  const BlasCoreChoice c = correct_blas_core(detect_cpu_level(), "keep", false);
  EXPECT_EQ(c.core, "Nehalem");
  EXPECT_EQ(blas_core_name(), "Nehalem");
  EXPECT_TRUE(c.slow);
  EXPECT_TRUE(blas_self_check()) << "the fallback is slow, not wrong";
}

TEST_F(BlasCore, NamedCoreBeyondTheCpuOrUnknownIsRefused) {
  ASSERT_TRUE(switch_blas_core("Prescott"));
  const BlasCoreChoice beyond = correct_blas_core(CpuLevel::kV3, "SkylakeX", false);
  EXPECT_EQ(blas_core_name(), "Prescott");
  EXPECT_TRUE(beyond.slow);
  EXPECT_NE(beyond.note.find("lacks its instructions"), std::string::npos) << beyond.note;
  const BlasCoreChoice unknown = correct_blas_core(CpuLevel::kV3, "Pentium9", false);
  EXPECT_NE(unknown.note.find("not an OpenBLAS core name"), std::string::npos) << unknown.note;
  EXPECT_TRUE(unknown.rejected);
  EXPECT_NE(unknown.note.find("Haswell"), std::string::npos) << "names the cores this CPU runs: " << unknown.note;
  // OpenBLAS's names ignore case (its own spelling is "Cooperlake").
  const BlasCoreChoice lower = correct_blas_core(CpuLevel::kV3, "haswell", false);
  EXPECT_FALSE(lower.rejected) << lower.note;
  EXPECT_EQ(blas_core_name(), "Haswell");
  EXPECT_EQ(blas_core_rank("COOPERLAKE"), 4);
  const BlasCoreChoice named = correct_blas_core(CpuLevel::kV3, "Sandybridge", false);
  EXPECT_EQ(named.core, "Sandybridge");
  EXPECT_EQ(blas_core_name(), "Sandybridge");
  EXPECT_TRUE(named.slow) << "an AVX core asked for on an AVX2 CPU is still the slow path";
  // The startup advice for a core the user named: unset the variable (its
  // note "switched from ..., self-check passed" read as a failed self-check,
  // "Haswell gave wrong SGEMM results", and a named core already loaded as
  // "could not re-select").
  EXPECT_TRUE(named.named);
  EXPECT_EQ(slow_blas_core_advice(named, CpuLevel::kV3), "unset FORGE_BLAS_CORETYPE (forge then selects Haswell)");
  const BlasCoreChoice again = correct_blas_core(CpuLevel::kV3, "Sandybridge", false);  // already loaded
  EXPECT_EQ(again.note, "");
  EXPECT_EQ(slow_blas_core_advice(again, CpuLevel::kV3), "unset FORGE_BLAS_CORETYPE (forge then selects Haswell)");
  // The Bulldozer family's FMA4 kernels on a CPU without FMA4 (any Intel,
  // Zen 2 on): refused, where it was taken and would die of SIGILL.
  ASSERT_TRUE(switch_blas_core("Haswell"));
  const BlasCoreChoice fma4 = correct_blas_core(CpuLevel::kV3, "Piledriver", false);
  EXPECT_TRUE(fma4.rejected);
  EXPECT_NE(fma4.note.find("lacks its instructions (FMA4)"), std::string::npos) << fma4.note;
  EXPECT_EQ(blas_core_name(), "Haswell");
}

// The advice where forge chose: a core that failed the self-check, one it
// could not switch to.
TEST(BlasCoreAdvice, NamesWhatToDo) {
  BlasCoreChoice c;
  c.slow = true;
  c.note = "SkylakeX failed the SGEMM self-check; kept Haswell";
  EXPECT_NE(slow_blas_core_advice(c, CpuLevel::kV4).find("SkylakeX gave wrong SGEMM results"), std::string::npos);
  c.note = "could not switch to SkylakeX (this OpenBLAS cannot re-select its core)";
  EXPECT_NE(slow_blas_core_advice(c, CpuLevel::kV4).find("set OPENBLAS_CORETYPE=SkylakeX"), std::string::npos);
  c.note = "kept (FORGE_BLAS_CORETYPE=keep)";
  EXPECT_NE(slow_blas_core_advice(c, CpuLevel::kV4).find("unset FORGE_BLAS_CORETYPE"), std::string::npos);
}

TEST_F(BlasCore, LibraryChoiceAtTheCpusLevelIsLeftAlone) {
  ASSERT_TRUE(switch_blas_core("Haswell"));
  const BlasCoreChoice c = correct_blas_core(CpuLevel::kV3, "auto", false);
  EXPECT_EQ(c.core, "Haswell");
  EXPECT_EQ(blas_core_name(), "Haswell");
  EXPECT_TRUE(c.note.empty()) << c.note;
  EXPECT_FALSE(c.slow);
  // Another core of the CPU's level is the library's choice: Cooperlake on
  // an AVX-512 CPU; Zen on an AVX2 one (OpenBLAS cannot switch to a core
  // whose instructions the CPU lacks).
  const bool v4 = detect_cpu_level() >= CpuLevel::kV4;
  const std::string same_level = v4 ? "Cooperlake" : "Zen";
  ASSERT_TRUE(switch_blas_core(same_level));
  const BlasCoreChoice other = correct_blas_core(v4 ? CpuLevel::kV4 : CpuLevel::kV3, "auto", false);
  EXPECT_EQ(other.core, same_level);
  EXPECT_TRUE(other.note.empty()) << other.note;
}

// An AVX2 core on an AVX-512 CPU (OPENBLAS_CORETYPE=Haswell, a common
// cluster setting, on a Zen 5: 0.56 of SkylakeX's speed) is replaced by
// SkylakeX.
TEST_F(BlasCore, Avx2CoreOnAnAvx512CpuIsReplaced) {
  if (detect_cpu_level() < CpuLevel::kV4) GTEST_SKIP() << "this CPU has no AVX-512 to run SkylakeX";
  ASSERT_TRUE(switch_blas_core("Haswell"));
  const BlasCoreChoice c = correct_blas_core(CpuLevel::kV4, "auto", false);
  EXPECT_EQ(c.at_load, "Haswell");
  EXPECT_EQ(c.core, "SkylakeX");
  EXPECT_EQ(blas_core_name(), "SkylakeX");
  EXPECT_FALSE(c.slow);
  EXPECT_NE(c.note.find("switched from Haswell"), std::string::npos) << c.note;
  ASSERT_TRUE(switch_blas_core("Zen"));
  const BlasCoreChoice kept = correct_blas_core(CpuLevel::kV4, "keep", false);
  EXPECT_EQ(kept.core, "Zen");
  EXPECT_TRUE(kept.slow) << "an AVX2 core kept on an AVX-512 CPU is the slow path";
}

TEST(BlasCoreRanks, TableOrdersTheInstructionSets) {
  EXPECT_EQ(blas_core_rank("Prescott"), 1);
  EXPECT_EQ(blas_core_rank("Sandybridge"), 2);
  EXPECT_EQ(blas_core_rank("Zen"), 3);
  EXPECT_EQ(blas_core_rank("SkylakeX"), 4);
  EXPECT_EQ(blas_core_rank("NoSuchCore"), 0);
  EXPECT_EQ(blas_core_for(CpuLevel::kV2), "");
}

TEST(HostRuntime, StartupChoiceIsWhatRuns) {
  // Before main the choice was made; nothing in this process has switched
  // cores since (the fixture tests restore theirs).
  EXPECT_EQ(blas_core_name(), blas_core_choice().core) << "the library runs another core than the one reported";
  // The startup line names the SGEMM library forge runs and its kernels.
  EXPECT_EQ(host_runtime().blas, sgemm_library().name);
  EXPECT_EQ(host_runtime().blas_core, sgemm_library().kernels);
  if (sgemm_library().openblas) {
    EXPECT_EQ(host_runtime().blas_core, blas_core_choice().core);
  }
  EXPECT_FALSE(host_runtime().blas.empty());
  EXPECT_GE(host_runtime().cores, 1);
  const auto warnings = host_runtime_warnings(host_runtime().cores + 1);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings.back().find("run.threads"), std::string::npos) << warnings.back();
  // Ranks sharing cores at one thread each: only the placement can change.
  const auto shared = host_runtime_warnings(1, host_runtime().cores + 3);
  ASSERT_FALSE(shared.empty());
  EXPECT_EQ(shared.back().find("lower run.threads"), std::string::npos) << shared.back();
  EXPECT_NE(shared.back().find("place fewer ranks per node"), std::string::npos) << shared.back();
}

// Ranks that share cores with several OpenMP threads each: the warning names
// the wait policy unless the environment already makes the threads passive.
TEST(HostRuntime, SharedCoresWithSpinningThreadsNameTheWaitPolicy) {
  const int cores = host_runtime().cores;
  if (cores < 2) GTEST_SKIP() << "needs 2 cores for 2 threads per rank";
  auto names_policy = [&](int threads) {
    for (const auto& w : host_runtime_warnings(threads, 2 * cores + 1))
      if (w.find("OMP_WAIT_POLICY=PASSIVE") != std::string::npos) return true;
    return false;
  };
  {
    const ScopedEnv unset("OMP_WAIT_POLICY", nullptr);
    EXPECT_TRUE(names_policy(2));
    EXPECT_FALSE(names_policy(1));  // one thread per rank does not spin
  }
  const ScopedEnv passive("OMP_WAIT_POLICY", "PASSIVE");
  EXPECT_FALSE(names_policy(2));
}

}  // namespace
}  // namespace forge
