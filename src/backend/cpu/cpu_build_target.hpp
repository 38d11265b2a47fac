// The instruction-set extensions this binary's code was compiled to use, and
// the refusal, at start, of a CPU that lacks one.
//
// The default build compiles everything for x86-64 and only the kernel
// variants for higher levels, chosen at run time (cpu_variants.hpp): it
// needs nothing beyond x86-64. A FORGE_NATIVE build compiles every file with
// -march=FORGE_NATIVE_ARCH, so any function may hold an AVX-512 (or AMX, ...)
// instruction: on a CPU without it the binary would die of SIGILL wherever
// the first one runs. Instead a constructor that runs before any other of
// this binary's (priority 101), compiled for x86-64 itself, checks the
// extensions the compiler was allowed (its predefined macros, recorded in
// cpu_build_target_features.cpp under the build's flags) with cpuid and the
// OS's saved state (__builtin_cpu_supports), and on a missing one prints
// what was compiled for and what is missing and exits with code 2. Checked:
// those GCC emits code for on its own (SSE3 to AVX-512, FMA, FMA4, XOP, BMI,
// ...) and those reached through intrinsics (AES, SHA, AMX, ...); not: a few
// system instructions no forge code uses (CX16, LAHF/SAHF, XSAVE, MOVDIRI).
//
// C types only: an inline or template function instantiated here could be
// swapped by the linker for a copy compiled with -march in another file.
#pragma once

namespace forge {

// The -march the build's code was compiled for ("x86-64" in the default
// build) and the extensions beyond x86-64 it allows, by
// __builtin_cpu_supports name ("avx2", "avx512f", ...), nullptr-terminated.
extern const char* const kBuildMarch;
extern const char* const kBuildCpuFeatures[];

// Whether this CPU (and OS) runs the extension `name`; *known is false for a
// name outside the list this check knows (then the result is false).
bool cpu_supports_feature(const char* name, bool* known);

// The names of `features` (nullptr-terminated) this CPU lacks, up to `cap`
// of them into `missing`; returns how many it lacks.
int cpu_lacks_features(const char* const* features, const char** missing, int cap);

// The start-up check itself: returns when this CPU has every one of
// `features`, else prints the refusal (naming `march` and what it lacks) on
// stderr and exits with code 2.
void exit_if_cpu_lacks(const char* const* features, const char* march);

// The refusal's text for `missing` (n names) under -march `march`, into
// buf (NUL-terminated, cut at size).
void format_build_target_refusal(const char* march, const char* const* missing, int n, char* buf, unsigned long size);

}  // namespace forge
