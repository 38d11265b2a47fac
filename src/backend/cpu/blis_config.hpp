// BLIS's kernel configuration, and the fix for its fallback: what runs the
// CPU backend's SGEMM where BLIS does (sgemm_library.hpp).
//
// BLIS picks a configuration -- a family of GEMM kernels and blocking sizes --
// once, when it initialises, from cpuid, and BLIS 0.9 knows fewer CPUs than
// it runs on:
//   - on an Intel CPU with AVX-512 it takes its AVX-512 kernels ('skx') only
//     when it can count two FMA units from the brand string (Xeon Platinum,
//     Xeon Gold 61xx/62xx, Core); every other AVX-512 Xeon -- Gold 6430,
//     Xeon 6 6980P, Xeon Max 9480, w9-3495X -- gets 'haswell' (AVX2): half
//     the FMA rate of the server parts since Ice Lake-SP, which have two
//     512-bit FMA units (on an Emerald Rapids host BLIS's skx ran the step
//     layer's GEMMs 1.66x faster than haswell, docs/performance.md);
//   - on AMD it names families 0x15, 0x17 and 0x19 (Bulldozer to Zen 4);
//     any later one -- Zen 5 is family 0x1A -- and any other vendor gets
//     'generic', plain C (on a Zen 5, 16 GFLOP/s against skx's 400-450).
// forge therefore decides the configuration itself and passes it to BLIS
// through BLIS_ARCH_TYPE for the one bli_init call (the environment is
// restored):
//   skx          on an x86-64-v4 CPU other than Skylake-SP (Intel family 6,
//                model 0x55, where BLIS's SKU table tells the one-FMA parts
//                from the two-FMA ones) and AMD family 0x19
//   zen3         on Zen and Zen+ (AMD family 0x17 below model 0x30), where
//                BLIS takes 'zen' (the same AVX2 micro-kernel; its
//                configuration ran a Zen 1's step GEMMs 7-12% slower)
//   haswell      on an x86-64-v3 CPU BLIS 0.9 does not name (AMD beyond
//                family 0x19, other vendors)
//   BLIS's own   otherwise: on Skylake-SP, on Intel without AVX-512
//                (haswell), on Zen 2 (zen2), and on AMD family 0x19 (zen3:
//                on a Zen 4, whose AVX-512 runs on 256-bit units, it
//                measured faster than skx)
// BLIS_ARCH_TYPE set by the user -- a number, or a configuration name (BLIS
// 0.9 reads only numbers: "zen3" would read as 0, which is skx) -- is
//   used         when it names an x86-64 configuration this CPU runs that is
//                not a fallback
//   replaced     when it names a fallback: rank below 3 on an x86-64-v3 or v4
//                CPU (as OPENBLAS_CORETYPE=Prescott is, blas_core.hpp)
//   ignored      with a warning when it is not one of the configurations
//                below, or needs instructions this CPU lacks (BLIS would
//                abort, or stop on an illegal instruction)
// ranks, and the level a configuration needs:
//   generic 0 (x86-64), penryn 1 (v2), sandybridge 2 (v3, for its AVX),
//   haswell zen zen2 zen3 excavator 3 (v3), skx 4 (v4).
// FORGE_BLAS_CORETYPE=keep leaves BLIS's own choice, and a usable
// BLIS_ARCH_TYPE even when it is a fallback (with a warning). forge requests
// configurations only from Debian's build (libblis4-openmp at its path),
// which holds all of the above; BLIS aborts on a configuration it was built
// without, so any other libblis.so.4 (a relocated copy, tools/gpu_bundle.sh)
// decides alone, but for a BLIS_ARCH_TYPE the user set: that one is resolved
// as above (by id or name) and never replaced.
#pragma once
#include <string>
#include <vector>

#include "backend/cpu/cpu_isa.hpp"

namespace forge {

struct BlisConfigRequest {
  std::string config;  // the configuration to ask BLIS for; "" = BLIS's own choice
  int id = -1;         // its index in BLIS's table (BLIS_ARCH_TYPE's value); -1 with ""
  std::string note;    // what forge did with BLIS_ARCH_TYPE; "" when it was not set
  bool warn = false;   // note is a startup warning
};

// The rank of a configuration forge may select (above); -1 for any other name.
int blis_config_rank(const std::string& config);

// Whether a CPU of this level runs the configuration's instructions (false
// for a name forge does not select).
bool blis_config_runs_on(const std::string& config, CpuLevel level);

// The configuration forge asks for on this CPU without BLIS_ARCH_TYPE: "skx",
// "zen3", "haswell" or "" (BLIS's own).
std::string blis_config_for(const CpuIdentity& cpu, CpuLevel level);

// A startup warning when the configuration BLIS runs is slower than this
// CPU's (rank below forge's request; zen where it asks for zen3; or below 3
// on an x86-64-v3/v4 CPU) and
// nobody asked for it (BLIS_ARCH_TYPE unset): a BLIS build forge does not
// request configurations from, FORGE_BLAS_CORETYPE=keep, or a request BLIS
// did not follow. "" otherwise.
std::string blis_slow_config_warning(const CpuIdentity& cpu, CpuLevel level, const std::string& running);

// What forge may do with BLIS's configuration.
enum class BlisPolicy {
  kForgeChooses,  // Debian's build: forge's rule, fallbacks replaced
  kKeep,          // Debian's build with FORGE_BLAS_CORETYPE=keep: BLIS's own, a usable BLIS_ARCH_TYPE kept
  kRelocated,     // another build: as kKeep (it may lack configurations), a kept fallback's note says why
};

// The policy for a BLIS loaded from Debian's path or not, under the
// environment's FORGE_BLAS_CORETYPE (nullptr when unset).
BlisPolicy blis_policy(bool debian_build, const char* forge_blas_coretype);

// The request for BLIS's initialisation. blis_arch_type: the environment's
// BLIS_ARCH_TYPE (nullptr when unset); arch_names: BLIS's configuration names
// by id (bli_arch_string).
BlisConfigRequest request_blis_config(const CpuIdentity& cpu, CpuLevel level, const char* blis_arch_type,
                                      const std::vector<std::string>& arch_names, BlisPolicy policy);

}  // namespace forge
