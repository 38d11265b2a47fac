// The host's compute configuration (backend/host_runtime.hpp), from the CPU
// level, the kernel variant and the BLAS core choice of this wing.
#include "backend/host_runtime.hpp"

#include <sched.h>
#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "backend/cpu/blas_core.hpp"
#include "backend/cpu/cpu_isa.hpp"
#include "backend/cpu/cpu_variants.hpp"
#include "backend/cpu/sgemm_library.hpp"
#include "core/strings.hpp"

namespace forge {

namespace {

int cores_in_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

std::string cpu_kernels_built() {
  std::vector<std::string> names;
  for (const auto& v : cpu_variants()) names.push_back(v.name);
  return join(names, ", ");
}

const HostRuntime& host_runtime() {
  static const HostRuntime r = [] {
    HostRuntime h;
    h.cpu_level = cpu_level_name(detect_cpu_level());
    h.cpu_kernels = selected_cpu_variant().name;
    h.cpu_kernels_built = cpu_kernels_built();
    const SgemmLibrary& lib = sgemm_library();
    h.blas = lib.name;
    h.blas_core = lib.kernels;
    // OpenBLAS's core choice matters where OpenBLAS runs the SGEMM.
    std::vector<std::string> notes;
    if (!lib.note.empty()) notes.push_back(lib.note);
    if (lib.openblas && !blas_core_choice().note.empty()) notes.push_back(blas_core_choice().note);
    h.blas_note = join(notes, "; ");
    h.blas_at_b = lib.at_b;
    if (!lib.at_b.empty()) h.blas_at_b_note = blas_core_choice().note;
    h.cores = cores_in_affinity();
    return h;
  }();
  return r;
}

std::string host_runtime_line() {
  const HostRuntime& h = host_runtime();
  std::string s = "CPU " + h.cpu_level + " (kernels " + h.cpu_kernels + "), BLAS " + h.blas + " core " +
                  h.blas_core;
  if (!h.blas_note.empty()) s += " (" + h.blas_note + ")";
  if (!h.blas_at_b.empty()) {
    s += ", A^T B " + h.blas_at_b + " (at up to " + std::to_string(kAtBMaxThreads) + " threads";
    s += h.blas_at_b_note.empty() ? ")" : "; " + h.blas_at_b_note + ")";
  }
  return s + ", " + std::to_string(h.cores) + (h.cores == 1 ? " core" : " cores");
}

std::vector<std::string> host_runtime_warnings(int threads, int threads_on_node) {
  const HostRuntime& h = host_runtime();
  std::vector<std::string> w;
  const BlasCoreChoice& b = blas_core_choice();
  const SgemmLibrary& lib = sgemm_library();
  if (lib.warn) w.push_back("SGEMM library: " + lib.note);
  // OpenBLAS's core matters where OpenBLAS runs the SGEMM.
  if (lib.openblas && b.slow) {
    w.push_back("BLAS core " + h.blas_core + " is a slow fallback on this " + h.cpu_level + " CPU" +
                (b.note.empty() ? "" : " (" + b.note + ")") + ": SGEMM runs several times below the machine's speed; " +
                slow_blas_core_advice(b, detect_cpu_level()));
  } else if (lib.openblas && b.rejected) {
    w.push_back(b.note);
  }
  if (threads > h.cores)
    w.push_back(std::to_string(threads) + " compute threads on " + std::to_string(h.cores) +
                " cores given to this process: set run.threads (or OMP_NUM_THREADS) to at most " +
                std::to_string(h.cores));
  else if (threads_on_node > h.cores) {
    // At one thread per rank only the placement can change (the main job's
    // 5 ranks on 2 cores take turns by design).
    std::string m = "the ranks on this node run " + std::to_string(threads_on_node) + " compute threads on " +
                    std::to_string(h.cores) + " cores" +
                    (threads > 1 ? ": lower run.threads, or place fewer ranks per node"
                                 : " (one per rank): they take turns on the cores; place fewer ranks per node, "
                                   "or give the job more cores, for each to run at full speed");
    // OpenMP threads that spin at barriers while the ranks share cores wait
    // for threads that are not running: the main job's RL phase at 2
    // threads per rank on 2 cores took 12x as long (docs/performance.md).
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    if (threads > 1 && !(policy && strcasecmp(policy, "passive") == 0))
      m += "; with " + std::to_string(threads) +
           " OpenMP threads per rank on shared cores, spinning threads slow every step many times over: "
           "run.threads=1, or OMP_WAIT_POLICY=PASSIVE in the ranks' environment (mpirun -x OMP_WAIT_POLICY=PASSIVE)";
    w.push_back(m);
  }
  return w;
}

}  // namespace forge
