// x86-64 level detection (cpu_isa.hpp).
#include "backend/cpu/cpu_isa.hpp"

#include <cpuid.h>

#include <cstring>

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

CpuIdentity detect_cpu_identity() {
  CpuIdentity id;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return id;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  id.vendor = vendor;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return id;
  const int family = (a >> 8) & 0xF, model = (a >> 4) & 0xF, ext_model = (a >> 16) & 0xF, ext_family = (a >> 20) & 0xFF;
  id.family = family == 15 ? family + ext_family : family;
  id.model = family == 6 || family == 15 ? (ext_model << 4) + model : model;
  return id;
}

}  // namespace forge
