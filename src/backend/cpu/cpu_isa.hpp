// The x86-64 micro-architecture levels (the psABI's x86-64, -v2, -v3, -v4):
// v3 adds AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE; v4 adds AVX-512 F, BW, CD,
// DQ, VL. The CPU's level decides which CPU kernel variant runs and which
// OpenBLAS core matches it. Detection by cpuid and the OS's saved state
// (GCC's __builtin_cpu_supports).
#pragma once
#include <string>

namespace forge {

enum class CpuLevel { kX86_64 = 1, kV2 = 2, kV3 = 3, kV4 = 4 };

CpuLevel detect_cpu_level();
std::string cpu_level_name(CpuLevel level);  // "x86-64", "x86-64-v2", ...

// cpuid's vendor string and display family and model (family 6 and 15 add
// the extended model, family 15 the extended family: the SDM's rule).
struct CpuIdentity {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  int family = 0;
  int model = 0;
};

CpuIdentity detect_cpu_identity();

}  // namespace forge
