// x86-64 level detection (cpu_isa.hpp).
#include "backend/cpu/cpu_isa.hpp"

namespace forge {

CpuLevel detect_cpu_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return CpuLevel::kV4;
  if (__builtin_cpu_supports("x86-64-v3")) return CpuLevel::kV3;
  if (__builtin_cpu_supports("x86-64-v2")) return CpuLevel::kV2;
  return CpuLevel::kX86_64;
}

std::string cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::kV4: return "x86-64-v4";
    case CpuLevel::kV3: return "x86-64-v3";
    case CpuLevel::kV2: return "x86-64-v2";
    case CpuLevel::kX86_64: break;
  }
  return "x86-64";
}

}  // namespace forge
