// OpenBLAS's kernels, and the fix for its fallback: what runs the CPU
// backend's SGEMM where OpenBLAS does (sgemm_library.hpp: FORGE_SGEMM=openblas,
// or no BLIS installed).
//
// OpenBLAS (Debian's build is DYNAMIC_ARCH) picks a "core" -- a family of
// GEMM kernels and blocking sizes -- when the library loads, from a table of
// CPU models. A CPU newer than the table gets an SSE core (Prescott, Nehalem)
// and SGEMM runs 3-5x below the machine's speed. Once, before main, forge
// compares the selected core with the CPU's x86-64 level (cpu_isa.hpp):
//   rank(core)   1 SSE cores, 2 AVX, 3 AVX2 (Haswell, Zen), 4 AVX-512
//                (SkylakeX, Cooperlake); 0 for a name not in the table
//                (names compared ignoring case, as OpenBLAS does)
//   fallback     0 < rank(core) < rank of the CPU's level (v3 3, v4 4) on a
//                CPU of level v3 or v4
// and replaces a fallback with the core of the CPU's level (v3 Haswell, v4
// SkylakeX) in this process: OPENBLAS_CORETYPE set for the call, OpenBLAS's
// own gotoblas_dynamic_quit/gotoblas_dynamic_init to re-select (before any
// BLAS call), the environment restored. The new core must then pass a
// self-check (SGEMM of odd shapes, NN, NT and TN accumulating, against a double reference, at
// relative error 1e-5); if it fails, the original core is put back and a
// warning says so. An AVX2 core on an AVX-512 CPU is a fallback too, whoever
// chose it: OPENBLAS_CORETYPE=Haswell (a common cluster workaround for the
// SSE fallback) on a Zen 5 (family 0x1A) ran the step layer's GEMMs at 0.56
// of SkylakeX's speed; on a Zen 4 (256-bit AVX-512 units) the two cores
// measured within 1% (docs/performance.md).
//
// FORGE_BLAS_CORETYPE (environment): unset or "auto" does the above; "keep"
// leaves the library's choice (a warning names a fallback); a core name
// (Haswell, SkylakeX, ...) selects that core if the CPU runs its instructions;
// any other value is refused (`rejected`, a startup warning naming the cores
// this CPU runs). `slow` always describes the core in use, whatever the path.
#pragma once
#include <string>

#include "backend/cpu/cpu_isa.hpp"

namespace forge {

struct BlasCoreChoice {
  std::string library;  // "OpenBLAS 0.3.21"
  std::string at_load;  // the core the library selected itself
  std::string core;     // the core in use
  std::string note;     // what forge did, or why it did nothing; "" when nothing was due
  bool slow = false;    // the core in use is a fallback for this CPU
  bool rejected = false;  // FORGE_BLAS_CORETYPE named a core forge would not select
  bool named = false;     // FORGE_BLAS_CORETYPE named a core and forge took it
};

// What to do about a slow core in use (`c.slow`), for the startup warning:
// unset FORGE_BLAS_CORETYPE where the user chose it (a name, "keep", a
// refused name), try another BLAS build where the CPU's core failed the
// self-check, else set OPENBLAS_CORETYPE=<the CPU's core> for the job.
std::string slow_blas_core_advice(const BlasCoreChoice& c, CpuLevel level);

// The choice made before main (correct_blas_core with the CPU's level and
// FORGE_BLAS_CORETYPE).
const BlasCoreChoice& blas_core_choice();

// The steps, for the choice at start and for tests.
int blas_core_rank(const std::string& core);
int blas_core_rank_for(CpuLevel level);     // the highest rank a CPU of this level runs
std::string blas_core_for(CpuLevel level);  // "" below v3: nothing better to pick
std::string blas_core_name();               // the library's current core
bool switch_blas_core(const std::string& core);  // true when `core` is in use afterwards
bool blas_self_check();
// cpu_has_fma4: the CPU runs AMD's FMA4 (the Bulldozer family's cores need it).
BlasCoreChoice correct_blas_core(CpuLevel level, const std::string& policy, bool cpu_has_fma4);

}  // namespace forge
