// What the host computes with, for the startup line of every command, the
// benchmarks' JSON and the warnings about known slow paths:
//   cpu_level     the highest x86-64 level the CPU runs (x86-64, -v2, -v3, -v4)
//   cpu_kernels   the variant of forge's CPU kernels in use (backend/cpu is
//                 compiled once per level and the best one the CPU runs is
//                 chosen at start; FORGE_CPU_KERNELS picks another)
//   cpu_kernels_built  the variants this binary has
//   blas          the library that runs the SGEMM and its version (BLIS 0.9.0,
//                 or OpenBLAS 0.3.21; backend/cpu/sgemm_library.hpp)
//   blas_core     the kernel family it selected (BLIS's configuration, e.g.
//                 zen3 or skx, or OpenBLAS's core name)
//   blas_note     what forge did about it: why OpenBLAS where it is not the
//                 first choice; and OpenBLAS picks its kernels from a table of
//                 CPU models, a model newer than its table gets an SSE
//                 fallback, and forge then re-selects the core that matches
//                 the CPU's instruction set and checks it (backend/cpu/blas_core.hpp)
//   blas_at_b     the library and kernels of the weight gradients' layout
//                 (A^T B) where another library runs it ("OpenBLAS 0.3.21 core
//                 SkylakeX" beside BLIS on Intel AVX-512 CPUs, at up to
//                 kAtBMaxThreads compute threads: sgemm_library.hpp); "" otherwise
//   blas_at_b_note  what forge did about that OpenBLAS's core
//   cores         the CPUs this process may run on (its affinity mask)
// Implemented by the CPU backend (backend/cpu/host_runtime.cpp).
#pragma once
#include <string>
#include <vector>

namespace forge {

struct HostRuntime {
  std::string cpu_level;
  std::string cpu_kernels;
  std::string cpu_kernels_built;  // "x86-64, x86-64-v3, x86-64-v4"
  std::string blas;
  std::string blas_core;
  std::string blas_note;
  std::string blas_at_b;
  std::string blas_at_b_note;
  int cores = 1;
};

// Throws InputError for a FORGE_CPU_KERNELS this build or CPU cannot run.
const HostRuntime& host_runtime();

// The kernel variants this binary has, "x86-64, x86-64-v3, x86-64-v4" (no
// selection: safe whatever FORGE_CPU_KERNELS says).
std::string cpu_kernels_built();

// "CPU x86-64-v3 (kernels x86-64-v3), BLAS OpenBLAS 0.3.21 core Zen, 2 cores";
// "..., BLAS BLIS 0.9.0 core skx, A^T B OpenBLAS 0.3.21 core SkylakeX (at up to 2 threads; ...), 2 cores"
std::string host_runtime_line();

// One line per known slow path, each naming what to do: a BLAS core below the
// CPU's instruction set that forge could not or was told not to replace, and
// more compute threads than cores (`threads` this process, `threads_on_node`
// the sum over the ranks sharing its node, 0 when unknown or when another
// rank of the node reports it).
std::vector<std::string> host_runtime_warnings(int threads, int threads_on_node = 0);

}  // namespace forge
