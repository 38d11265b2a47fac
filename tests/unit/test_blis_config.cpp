// BLIS's configuration (backend/cpu/blis_config.hpp): forge asks for skx on
// AVX-512 CPUs BLIS 0.9 gives AVX2 or plain C (Intel beyond Skylake-SP, AMD
// Zen 5), haswell on AVX2 CPUs it does not name, zen3 on Zen and Zen+
// (where BLIS takes zen), leaves Zen 2, Zen 3/4 and Skylake-SP to BLIS, and
// uses, replaces or ignores a BLIS_ARCH_TYPE by the rule; the CPU identity
// read here is cpuid's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/blis_config.hpp"
#include "backend/cpu/sgemm_library.hpp"

namespace forge {
namespace {

using enum BlisPolicy;

// BLIS 0.9.0's table of configurations by id, as bli_arch_string gives it.
const std::vector<std::string> kNames = {"skx",       "knl",         "knc",        "haswell",   "sandybridge",
                                         "penryn",    "zen3",        "zen2",       "zen",       "excavator",
                                         "steamroller", "piledriver", "bulldozer", "armsve",    "a64fx",
                                         "firestorm", "thunderx2",   "cortexa57",  "cortexa53", "cortexa15",
                                         "cortexa9",  "power10",     "power9",     "power7",    "bgq",
                                         "generic"};

const CpuIdentity kEmeraldRapids{"GenuineIntel", 6, 0xCF};  // the node of issue 14 (model 207)
const CpuIdentity kGraniteRapids{"GenuineIntel", 6, 0xAD};
const CpuIdentity kSkylakeSp{"GenuineIntel", 6, 0x55};
const CpuIdentity kZen4{"AuthenticAMD", 0x19, 0x11};
const CpuIdentity kAlderLake{"GenuineIntel", 6, 0x97};
const CpuIdentity kZen5{"AuthenticAMD", 0x1A, 0x02};  // BLIS 0.9's generic
const CpuIdentity kHygon{"HygonGenuine", 0x18, 0x01};  // BLIS 0.9's generic
const CpuIdentity kZen1{"AuthenticAMD", 0x17, 0x01};  // BLIS 0.9's zen

TEST(BlisConfig, SkxOnAvx512BeyondSkylakeSpAndZen4HaswellWhereBlisKnowsNoFamilyElseBlisOwn) {
  for (const CpuIdentity& cpu : {kEmeraldRapids, kGraniteRapids, kZen5, kHygon}) {
    const BlisConfigRequest r = request_blis_config(cpu, CpuLevel::kV4, nullptr, kNames, kForgeChooses);
    EXPECT_EQ(r.config, "skx") << cpu.model;
    EXPECT_EQ(r.id, 0);
    EXPECT_TRUE(r.note.empty()) << r.note;
    EXPECT_FALSE(r.warn);
  }
  // AVX2 on a CPU BLIS 0.9 does not name (it would run generic): haswell.
  for (const CpuIdentity& cpu : {kZen5, kHygon}) {
    const BlisConfigRequest r = request_blis_config(cpu, CpuLevel::kV3, nullptr, kNames, kForgeChooses);
    EXPECT_EQ(r.config, "haswell") << cpu.vendor;
    EXPECT_EQ(r.id, 3);
  }
  // Zen and Zen+ (BLIS's 'zen', slower than its zen3 there); not Zen 2.
  for (const CpuIdentity& cpu :
       {kZen1, CpuIdentity{"AuthenticAMD", 0x17, 0x08}, CpuIdentity{"AuthenticAMD", 0x17, 0x2F}}) {
    const BlisConfigRequest r = request_blis_config(cpu, CpuLevel::kV3, nullptr, kNames, kForgeChooses);
    EXPECT_EQ(r.config, "zen3") << cpu.model;
    EXPECT_EQ(r.id, 6);
  }
  EXPECT_EQ(request_blis_config(kZen5, CpuLevel::kV2, nullptr, kNames, kForgeChooses).config, "")
      << "nothing faster than generic without AVX2";
  // BLIS's own choice: its SKU table on Skylake-SP, zen3 on AMD family 0x19
  // (faster than skx on a Zen 4), haswell on Intel without AVX-512, zen2 on
  // family 0x17 from model 0x30 (Zen 2).
  for (const auto& [cpu, level] :
       {std::pair{kSkylakeSp, CpuLevel::kV4}, std::pair{kZen4, CpuLevel::kV4}, std::pair{kZen4, CpuLevel::kV3},
        std::pair{CpuIdentity{"AuthenticAMD", 0x17, 0x31}, CpuLevel::kV3}, std::pair{kAlderLake, CpuLevel::kV3},
        std::pair{kEmeraldRapids, CpuLevel::kV3}}) {
    const BlisConfigRequest r = request_blis_config(cpu, level, nullptr, kNames, kForgeChooses);
    EXPECT_EQ(r.config, "") << cpu.vendor << " " << cpu.model;
    EXPECT_EQ(r.id, -1);
  }
  // keep: BLIS decides alone; a BLIS without skx is not asked for it.
  EXPECT_EQ(request_blis_config(kEmeraldRapids, CpuLevel::kV4, nullptr, kNames, kKeep).config, "");
  EXPECT_EQ(request_blis_config(kEmeraldRapids, CpuLevel::kV4, nullptr, {"haswell", "generic"}, kForgeChooses).config,
            "");
  EXPECT_EQ(request_blis_config(kEmeraldRapids, CpuLevel::kV4, "", kNames, kForgeChooses).config, "skx")
      << "empty = unset";
  // A table with an unnamed id: BLIS's own choice still sets no id.
  std::vector<std::string> gap = kNames;
  gap[2] = "";
  EXPECT_EQ(request_blis_config(kZen4, CpuLevel::kV4, nullptr, gap, kForgeChooses).id, -1);
}

TEST(BlisConfig, BlisArchTypeUsedByIdOrNameReplacedWhenAFallback) {
  // A usable configuration, by id or by name (BLIS 0.9 would read "zen3" as
  // 0, skx).
  BlisConfigRequest r = request_blis_config(kZen4, CpuLevel::kV4, "zen3", kNames, kForgeChooses);
  EXPECT_EQ(r.config, "zen3");
  EXPECT_EQ(r.id, 6);
  EXPECT_EQ(r.note, "BLIS_ARCH_TYPE=zen3");
  EXPECT_FALSE(r.warn);
  r = request_blis_config(kEmeraldRapids, CpuLevel::kV4, "3", kNames, kForgeChooses);
  EXPECT_EQ(r.config, "haswell") << "rank 3 is not a fallback: the user's choice";
  EXPECT_EQ(r.note, "BLIS_ARCH_TYPE=3 (haswell)");
  EXPECT_EQ(request_blis_config(kZen4, CpuLevel::kV4, "SKX", kNames, kForgeChooses).config, "skx");

  // Fallbacks on a v3/v4 CPU: forge's own request instead.
  for (const char* fallback : {"generic", "25", "penryn", "sandybridge"}) {
    r = request_blis_config(kEmeraldRapids, CpuLevel::kV4, fallback, kNames, kForgeChooses);
    EXPECT_EQ(r.config, "skx") << fallback;
    EXPECT_NE(r.note.find("switched from "), std::string::npos) << r.note;
    EXPECT_NE(r.note.find("set by BLIS_ARCH_TYPE"), std::string::npos) << r.note;
    EXPECT_FALSE(r.warn);
    EXPECT_EQ(request_blis_config(kZen4, CpuLevel::kV4, fallback, kNames, kForgeChooses).config, "") << fallback;
  }
  // ... not on a CPU below v3, and kept (with a warning) under keep.
  EXPECT_EQ(request_blis_config(kZen4, CpuLevel::kV2, "penryn", kNames, kForgeChooses).config, "penryn");
  r = request_blis_config(kZen4, CpuLevel::kV4, "generic", kNames, kKeep);
  EXPECT_EQ(r.config, "generic");
  EXPECT_EQ(r.id, 25);
  EXPECT_TRUE(r.warn);
  EXPECT_NE(r.note.find("kept generic, a slow fallback"), std::string::npos) << r.note;
  // A BLIS other than Debian's build: the user's value is resolved and kept,
  // forge asks for nothing itself, and the note says why a fallback stays.
  r = request_blis_config(kZen4, CpuLevel::kV4, "generic", kNames, kRelocated);
  EXPECT_EQ(r.config, "generic");
  EXPECT_TRUE(r.warn);
  EXPECT_NE(r.note.find("another build"), std::string::npos) << r.note;
  EXPECT_EQ(r.note.find("FORGE_BLAS_CORETYPE"), std::string::npos) << r.note;
  EXPECT_EQ(request_blis_config(kEmeraldRapids, CpuLevel::kV4, nullptr, kNames, kRelocated).config, "");
  EXPECT_EQ(request_blis_config(kEmeraldRapids, CpuLevel::kV4, "haswell", kNames, kRelocated).config, "haswell");
}

TEST(BlisConfig, BlisArchTypeThatWouldAbortOrTrapIsIgnored) {
  struct Case {
    const char* value;
    CpuLevel level;
    const char* why;
  };
  for (const Case& c : {Case{"2", CpuLevel::kV4, "knc is not a configuration forge runs"},
                        Case{"knl", CpuLevel::kV4, "knl is not a configuration forge runs"},
                        Case{"power9", CpuLevel::kV4, "power9 is not a configuration forge runs"},
                        Case{"99", CpuLevel::kV4, "not a configuration id or name"},
                        Case{"zen5", CpuLevel::kV4, "not a configuration id or name"},
                        Case{"skx", CpuLevel::kV3, "skx needs x86-64-v4 instructions"},
                        Case{"haswell", CpuLevel::kV2, "haswell needs x86-64-v3 instructions"}}) {
    const BlisConfigRequest r = request_blis_config(kEmeraldRapids, c.level, c.value, kNames, kForgeChooses);
    EXPECT_TRUE(r.warn) << c.value;
    EXPECT_NE(r.note.find(std::string("BLIS_ARCH_TYPE=") + c.value + " ignored: " + c.why), std::string::npos)
        << r.note;
    EXPECT_EQ(r.config, c.level == CpuLevel::kV4 ? "skx" : "") << c.value;
  }
}

// A BLIS build forge does not configure, running slower kernels than the CPU
// has: a warning naming the fix.
TEST(BlisConfig, SlowConfigurationOfAnotherBuildIsWarned) {
  const std::string w = blis_slow_config_warning(kEmeraldRapids, CpuLevel::kV4, "haswell");
  EXPECT_NE(w.find("BLIS runs its haswell kernels on this x86-64-v4 CPU, where skx's are faster"), std::string::npos)
      << w;
  EXPECT_NE(w.find("BLIS_ARCH_TYPE=skx"), std::string::npos) << w;
  EXPECT_NE(blis_slow_config_warning(kZen5, CpuLevel::kV4, "generic").find("set BLIS_ARCH_TYPE=skx"),
            std::string::npos);
  EXPECT_NE(blis_slow_config_warning(kZen5, CpuLevel::kV4, "zen3").find("set BLIS_ARCH_TYPE=skx"), std::string::npos);
  EXPECT_NE(blis_slow_config_warning(kZen4, CpuLevel::kV4, "generic").find("set BLIS_ARCH_TYPE=haswell"),
            std::string::npos);
  EXPECT_EQ(blis_slow_config_warning(kEmeraldRapids, CpuLevel::kV4, "skx"), "");
  EXPECT_EQ(blis_slow_config_warning(kSkylakeSp, CpuLevel::kV4, "haswell"), "") << "BLIS's SKU table decides there";
  EXPECT_EQ(blis_slow_config_warning(kZen4, CpuLevel::kV4, "zen3"), "");
  // Same rank, measured slower: BLIS's own zen on a Zen 1.
  EXPECT_NE(blis_slow_config_warning(kZen1, CpuLevel::kV3, "zen").find("set BLIS_ARCH_TYPE=zen3"), std::string::npos);
  EXPECT_EQ(blis_slow_config_warning(kZen1, CpuLevel::kV3, "zen3"), "");
  EXPECT_EQ(blis_slow_config_warning(kHygon, CpuLevel::kV3, "zen3"), "") << "same rank, never measured slower";
  EXPECT_EQ(blis_slow_config_warning(kZen4, CpuLevel::kV2, "penryn"), "");
}

TEST(BlisConfig, RanksAndThisCpu) {
  EXPECT_EQ(blis_config_rank("generic"), 0);
  EXPECT_EQ(blis_config_rank("sandybridge"), 2);
  EXPECT_EQ(blis_config_rank("zen3"), 3);
  EXPECT_EQ(blis_config_rank("skx"), 4);
  EXPECT_EQ(blis_config_rank("knl"), -1);
  EXPECT_EQ(blis_config_rank("Haswell"), -1) << "BLIS's names are lower case";
  const CpuIdentity here = detect_cpu_identity();
  EXPECT_TRUE(here.vendor == "GenuineIntel" || here.vendor == "AuthenticAMD") << here.vendor;
  EXPECT_GT(here.family, 0);
  // Where BLIS runs, its configuration is the one forge's rule asks for on
  // this CPU (or BLIS's own), never a fallback on a v3/v4 CPU.
  if (blis_sgemm() && std::getenv("BLIS_ARCH_TYPE") == nullptr) {
    const std::string want = blis_config_for(here, detect_cpu_level());
    if (!want.empty()) {
      EXPECT_EQ(blis_kernels(), want);
    }
    if (detect_cpu_level() >= CpuLevel::kV3) {
      EXPECT_GE(blis_config_rank(blis_kernels()), 3) << blis_kernels();
    }
  }
}

}  // namespace
}  // namespace forge
