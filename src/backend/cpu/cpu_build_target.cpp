// The start-up check of cpu_build_target.hpp. Compiled for x86-64 whatever
// the build's -march (src/CMakeLists.txt), since it runs before anything
// knows the CPU can run the rest.
#include "backend/cpu/cpu_build_target.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace forge {

bool cpu_supports_feature(const char* name, bool* known) {
  __builtin_cpu_init();
  *known = true;
  // __builtin_cpu_supports takes a literal: one line per name.
#define FORGE_FEATURE(literal) \
  if (std::strcmp(name, literal) == 0) return __builtin_cpu_supports(literal) != 0;
  FORGE_FEATURE("sse3")
  FORGE_FEATURE("ssse3")
  FORGE_FEATURE("sse4.1")
  FORGE_FEATURE("sse4.2")
  FORGE_FEATURE("popcnt")
  FORGE_FEATURE("avx")
  FORGE_FEATURE("avx2")
  FORGE_FEATURE("fma")
  FORGE_FEATURE("f16c")
  FORGE_FEATURE("bmi")
  FORGE_FEATURE("bmi2")
  FORGE_FEATURE("lzcnt")
  FORGE_FEATURE("movbe")
  FORGE_FEATURE("avx512f")
  FORGE_FEATURE("avx512bw")
  FORGE_FEATURE("avx512cd")
  FORGE_FEATURE("avx512dq")
  FORGE_FEATURE("avx512vl")
  FORGE_FEATURE("avx512vnni")
  FORGE_FEATURE("avx512bf16")
  FORGE_FEATURE("avx512fp16")
  FORGE_FEATURE("avx512vbmi")
  FORGE_FEATURE("avx512vbmi2")
  FORGE_FEATURE("avx512bitalg")
  FORGE_FEATURE("avx512vpopcntdq")
  FORGE_FEATURE("avx512ifma")
  FORGE_FEATURE("avxvnni")
  FORGE_FEATURE("gfni")
  FORGE_FEATURE("vaes")
  FORGE_FEATURE("vpclmulqdq")
  FORGE_FEATURE("amx-tile")
  FORGE_FEATURE("amx-bf16")
  FORGE_FEATURE("amx-int8")
  FORGE_FEATURE("fma4")
  FORGE_FEATURE("xop")
  FORGE_FEATURE("sse4a")
  FORGE_FEATURE("tbm")
  FORGE_FEATURE("avx512er")
  FORGE_FEATURE("avx512pf")
  FORGE_FEATURE("avx5124vnniw")
  FORGE_FEATURE("avx5124fmaps")
  FORGE_FEATURE("avx512vp2intersect")
  FORGE_FEATURE("sha")
  FORGE_FEATURE("aes")
  FORGE_FEATURE("pclmul")
  FORGE_FEATURE("adx")
  FORGE_FEATURE("rdrnd")
  FORGE_FEATURE("rdseed")
  FORGE_FEATURE("prfchw")
#undef FORGE_FEATURE
  *known = false;
  return false;
}

int cpu_lacks_features(const char* const* features, const char** missing, int cap) {
  int n = 0;
  for (const char* const* f = features; *f; ++f) {
    bool known = false;
    if (cpu_supports_feature(*f, &known)) continue;
    if (n < cap) missing[n] = *f;
    ++n;
  }
  return n;
}

void format_build_target_refusal(const char* march, const char* const* missing, int n, char* buf,
                                 unsigned long size) {
  int used = std::snprintf(buf, size, "this binary was compiled for -march=%s (FORGE_NATIVE=ON) and this CPU lacks",
                           march);
  for (int i = 0; i < n && used >= 0 && static_cast<unsigned long>(used) < size; ++i)
    used += std::snprintf(buf + used, size - used, "%s %s", i ? "," : "", missing[i]);
  if (used >= 0 && static_cast<unsigned long>(used) < size)
    std::snprintf(buf + used, size - used,
                  ": rebuild it on this machine (-DFORGE_NATIVE_ARCH=native), for this CPU's "
                  "-march, or without -DFORGE_NATIVE (the default build picks its kernels at run time)");
}

void exit_if_cpu_lacks(const char* const* features, const char* march) {
  const char* missing[64];
  const int n = cpu_lacks_features(features, missing, 64);
  if (n == 0) return;
  char text[1024];
  format_build_target_refusal(march, missing, n < 64 ? n : 64, text, sizeof text);
  std::fprintf(stderr, "%s: error: %s\n", program_invocation_short_name, text);
  std::_Exit(2);
}

namespace {

// Before every other constructor of this binary (101: the first priority
// not reserved for the implementation).
__attribute__((constructor(101))) void refuse_a_cpu_without_the_build_features() {
  exit_if_cpu_lacks(kBuildCpuFeatures, kBuildMarch);
}

}  // namespace

}  // namespace forge
