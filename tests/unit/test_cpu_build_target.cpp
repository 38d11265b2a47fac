// The start-up refusal of a CPU without an extension the build was compiled
// for (backend/cpu/cpu_build_target.hpp): which extensions this CPU has,
// checked against the kernel's own report (/proc/cpuinfo's flags, a
// different reading of cpuid than __builtin_cpu_supports), and the refusal's
// text for one this CPU lacks. The refusal itself (exit 2 before main) is
// seen only by a FORGE_NATIVE build run on another CPU: docs/performance.md
// records that run.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_build_target.hpp"

namespace forge {
namespace {

// Every name the check knows, with the flag Linux's /proc/cpuinfo gives it.
const std::vector<std::pair<std::string, std::string>>& known_features() {
  static const std::vector<std::pair<std::string, std::string>> list = {
      {"sse3", "pni"},           {"ssse3", "ssse3"},
      {"sse4.1", "sse4_1"},      {"sse4.2", "sse4_2"},
      {"popcnt", "popcnt"},      {"avx", "avx"},
      {"avx2", "avx2"},          {"fma", "fma"},
      {"f16c", "f16c"},          {"bmi", "bmi1"},
      {"bmi2", "bmi2"},          {"lzcnt", "abm"},
      {"movbe", "movbe"},        {"avx512f", "avx512f"},
      {"avx512bw", "avx512bw"},  {"avx512cd", "avx512cd"},
      {"avx512dq", "avx512dq"},  {"avx512vl", "avx512vl"},
      {"avx512vnni", "avx512_vnni"}, {"avx512bf16", "avx512_bf16"},
      {"avx512fp16", "avx512_fp16"}, {"avx512vbmi", "avx512vbmi"},
      {"avx512vbmi2", "avx512_vbmi2"}, {"avx512bitalg", "avx512_bitalg"},
      {"avx512vpopcntdq", "avx512_vpopcntdq"}, {"avx512ifma", "avx512ifma"},
      {"avxvnni", "avx_vnni"},   {"gfni", "gfni"},
      {"vaes", "vaes"},          {"vpclmulqdq", "vpclmulqdq"},
      {"amx-tile", "amx_tile"},  {"amx-bf16", "amx_bf16"},
      {"amx-int8", "amx_int8"},
      {"fma4", "fma4"},
      {"xop", "xop"},
      {"sse4a", "sse4a"},
      {"tbm", "tbm"},
      {"avx512er", "avx512er"},
      {"avx512pf", "avx512pf"},
      {"avx5124vnniw", "avx512_4vnniw"},
      {"avx5124fmaps", "avx512_4fmaps"},
      {"avx512vp2intersect", "avx512_vp2intersect"},
      {"sha", "sha_ni"},
      {"aes", "aes"},
      {"pclmul", "pclmulqdq"},
      {"adx", "adx"},
      {"rdrnd", "rdrand"},
      {"rdseed", "rdseed"},
      {"prfchw", "3dnowprefetch"},
  };
  return list;
}

std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

TEST(CpuBuildTarget, SupportAgreesWithTheKernelsCpuFlags) {
  const auto flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  for (const auto& [name, flag] : known_features()) {
    bool known = false;
    const bool has = cpu_supports_feature(name.c_str(), &known);
    EXPECT_TRUE(known) << name;
    EXPECT_EQ(has, flags.count(flag) == 1) << name << " (cpuinfo flag " << flag << ")";
  }
  bool known = true;
  EXPECT_FALSE(cpu_supports_feature("avx1024", &known));
  EXPECT_FALSE(known);
}

TEST(CpuBuildTarget, TheBuildsExtensionsAreKnownAndThisCpuHasThem) {
  std::set<std::string> names;
  for (const auto& f : known_features()) names.insert(f.first);
  int count = 0;
  for (const char* const* f = kBuildCpuFeatures; *f; ++f, ++count) EXPECT_EQ(names.count(*f), 1u) << *f;
  // The default build compiles everything but the run-time-chosen kernels
  // for x86-64: it needs nothing more.
  if (std::string(kBuildMarch) == "x86-64") {
    EXPECT_EQ(count, 0);
  }
  const char* missing[64];
  EXPECT_EQ(cpu_lacks_features(kBuildCpuFeatures, missing, 64), 0);
}

TEST(CpuBuildTarget, AnExtensionThisCpuLacksIsNamedInTheRefusal) {
  const auto flags = cpuinfo_flags();
  std::vector<const char*> lacking;
  for (const auto& [name, flag] : known_features())
    if (!flags.empty() && flags.count(flag) == 0) lacking.push_back(name.c_str());
  if (lacking.size() < 2) GTEST_SKIP() << "this CPU has all but " << lacking.size() << " of the extensions";
  // Two it lacks among ones it has.
  const char* asked[] = {"sse3", lacking[0], "sse4.1", lacking[1], nullptr};
  const char* missing[4] = {};
  ASSERT_EQ(cpu_lacks_features(asked, missing, 4), 2);
  EXPECT_STREQ(missing[0], lacking[0]);
  EXPECT_STREQ(missing[1], lacking[1]);
  // A cap below the count still counts them all.
  EXPECT_EQ(cpu_lacks_features(asked, missing, 1), 2);

  char text[512];
  format_build_target_refusal("sapphirerapids", missing, 2, text, sizeof text);
  const std::string s = text;
  EXPECT_NE(s.find("-march=sapphirerapids"), std::string::npos) << s;
  EXPECT_NE(s.find(std::string("lacks ") + lacking[0] + ", " + lacking[1] + ":"), std::string::npos) << s;
  EXPECT_NE(s.find("FORGE_NATIVE"), std::string::npos) << s;
  // The start-up check itself: exit 2 naming them, and nothing for a list
  // this CPU has.
  EXPECT_EXIT(exit_if_cpu_lacks(asked, "sapphirerapids"), ::testing::ExitedWithCode(2),
              std::string("error: this binary was compiled for -march=sapphirerapids \\(FORGE_NATIVE=ON\\) and this "
                          "CPU lacks ") + lacking[0] + ", " + lacking[1]);
  const char* present[] = {"sse3", nullptr};
  exit_if_cpu_lacks(present, "x86-64");
  // Cut at the buffer's size, still terminated.
  char small[24];
  format_build_target_refusal("sapphirerapids", missing, 2, small, sizeof small);
  EXPECT_EQ(std::string(small), s.substr(0, sizeof small - 1));
}

}  // namespace
}  // namespace forge
