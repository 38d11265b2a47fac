// The CPU backend's SGEMM library: BLIS loaded beside OpenBLAS, the self-check
// and the choice before main (the rule is in sgemm_library.hpp).
#include "backend/cpu/sgemm_library.hpp"

#include <dlfcn.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "backend/cpu/blas_core.hpp"
#include "backend/cpu/blis_config.hpp"
#include "backend/cpu/cpu_isa.hpp"
#include "core/scoped_env.hpp"
#include "core/strings.hpp"

namespace forge {

namespace {

struct Blis {
  SgemmFn sgemm = nullptr;
  void (*set_threads)(long) = nullptr;
  std::string name, kernels;
  std::string note;   // what forge did with BLIS's configuration (blis_config.hpp)
  bool warn = false;  // note is a startup warning
};

constexpr const char* kDebianBlis = "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4";

// BLIS's configuration names by id, up to "generic" (the last x86 id in
// BLIS 0.9 and 1.x); empty when "generic" is not among the first 64.
std::vector<std::string> arch_names(const char* (*arch_name)(int)) {
  std::vector<std::string> names;
  for (int id = 0; id < 64; ++id) {
    const char* n = arch_name(id);
    names.emplace_back(n ? n : "");
    if (names.back() == "generic") return names;
  }
  return {};
}

// bli_init with BLIS_ARCH_TYPE as forge's request says (BLIS reads it there,
// once), the environment restored afterwards.
void init_blis(void (*init)(), const BlisConfigRequest& request) {
  const std::string id = std::to_string(request.id);
  const ScopedEnv arch("BLIS_ARCH_TYPE", request.id >= 0 ? id.c_str() : nullptr);
  init();
}

const Blis& blis() {
  static const Blis b = [] {
    Blis out;
    // Debian's OpenMP build first (libblis.so.4 alone may be the
    // alternatives' pthreads or serial build).
    for (const char* path : {kDebianBlis, "libblis.so.4"}) {
      void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!h) continue;
      auto sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
      auto set = reinterpret_cast<void (*)(long)>(dlsym(h, "bli_thread_set_num_threads"));
      auto version = reinterpret_cast<const char* (*)()>(dlsym(h, "bli_info_get_version_str"));
      auto init = reinterpret_cast<void (*)()>(dlsym(h, "bli_init"));
      auto arch_id = reinterpret_cast<int (*)()>(dlsym(h, "bli_arch_query_id"));
      auto arch_name = reinterpret_cast<const char* (*)(int)>(dlsym(h, "bli_arch_string"));
      if (!sgemm || !set || !version || !init || !arch_id || !arch_name) {
        dlclose(h);
        continue;
      }
      // The configuration is fixed in bli_init; querying it before would
      // select it without forge's request (and abort on a BLIS_ARCH_TYPE).
      // forge requests configurations only from Debian's build, which holds
      // every x86-64 one (its 'x86_64' family): BLIS aborts on a
      // configuration it was built without, and another build may lack skx.
      // Another build decides alone, but for a BLIS_ARCH_TYPE set by the user:
      // resolved as for Debian's (a name to its id: BLIS 0.9 reads only
      // numbers), never replaced (BlisPolicy::kRelocated).
      const bool every_config = path == std::string(kDebianBlis);
      const char* user_arch = std::getenv("BLIS_ARCH_TYPE");
      const bool user_set = user_arch && *user_arch;
      const std::vector<std::string> names =
          every_config || user_set ? arch_names(arch_name) : std::vector<std::string>{};
      const CpuIdentity cpu = detect_cpu_identity();
      const CpuLevel level = detect_cpu_level();
      BlisConfigRequest request;  // none: BLIS decides alone
      if (names.empty()) {
        init();
      } else {
        request = request_blis_config(cpu, level, user_arch, names,
                                      blis_policy(every_config, std::getenv("FORGE_BLAS_CORETYPE")));
        init_blis(init, request);
      }
      // A BLIS_ARCH_TYPE the user set: what forge did with it. Otherwise,
      // whatever decided, kernels slower than this CPU's are a warning.
      out.note = user_set ? request.note : blis_slow_config_warning(cpu, level, arch_name(arch_id()));
      out.warn = user_set ? request.warn : !out.note.empty();
      out.sgemm = sgemm;
      out.set_threads = set;
      out.name = std::string("BLIS ") + version();
      out.kernels = arch_name(arch_id());
      // BLIS reads BLIS_NUM_THREADS, not OpenMP's setting: give it forge's.
      set(omp_get_max_threads());
      break;
    }
    return out;
  }();
  return b;
}

SgemmLibrary openblas(std::string note, bool warn) {
  const BlasCoreChoice& c = blas_core_choice();
  return {c.library, c.core, std::move(note), warn, true, cblas_sgemm, "", cblas_sgemm};
}

}  // namespace

SgemmFn blis_sgemm() { return blis().sgemm; }
std::string blis_library_name() { return blis().name; }
std::string blis_kernels() { return blis().kernels; }

bool weight_gradients_in_openblas(const CpuIdentity& cpu, CpuLevel level) {
  return cpu.vendor == "GenuineIntel" && blis_config_for(cpu, level) == "skx";
}

SgemmLibrary choose_sgemm_library(const std::string& policy) {
  if (policy == "openblas") return openblas("FORGE_SGEMM=openblas", false);
  // What the startup line says about the choice; any of it is also a warning.
  std::vector<std::string> notes;
  if (!policy.empty() && policy != "auto" && policy != "blis")
    notes.push_back("FORGE_SGEMM=" + policy + " ignored (auto, blis or openblas)");
  if (!blis().sgemm) {
    if (policy == "blis" || !notes.empty()) notes.push_back("BLIS is not installed (libblis4-openmp, tools/setup.sh)");
    return openblas(join(notes, "; "), !notes.empty());
  }
  bool warn = !notes.empty() || blis().warn;
  if (!blis().note.empty()) notes.push_back(blis().note);
  if (!sgemm_self_check(blis().sgemm)) {
    notes.push_back(blis().name + " (" + blis().kernels + ") failed the SGEMM self-check");
    return openblas(join(notes, "; "), true);
  }
  SgemmLibrary lib{blis().name, blis().kernels, join(notes, "; "), warn, false, blis().sgemm, "", blis().sgemm};
  // The weight gradients in OpenBLAS (the rule in the header): only beside
  // BLIS's skx kernels, on an OpenBLAS core that is no fallback, checked.
  if (policy != "blis" && blis().kernels == "skx" &&
      weight_gradients_in_openblas(detect_cpu_identity(), detect_cpu_level()) && !blas_core_choice().slow &&
      sgemm_self_check(cblas_sgemm)) {
    lib.at_b = blas_core_choice().library + " core " + blas_core_choice().core;
    lib.sgemm_at_b = cblas_sgemm;
  }
  return lib;
}

const SgemmLibrary& sgemm_library() {
  static const SgemmLibrary lib = [] {
    const char* policy = std::getenv("FORGE_SGEMM");
    return choose_sgemm_library(policy ? policy : "");
  }();
  return lib;
}

void set_sgemm_threads(int n) {
  openblas_set_num_threads(n);
  if (blis().set_threads) blis().set_threads(n);
}

bool sgemm_self_check(SgemmFn f) {
  // Odd shapes (edges of every register and cache block), the three layouts
  // the backend uses (NN, NT, and TN accumulating into C), against sums in
  // double.
  const int shapes[][3] = {{37, 53, 71}, {128, 96, 200}, {5, 257, 33}};
  for (const auto& s : shapes) {
    const int M = s[0], N = s[1], K = s[2];
    std::vector<float> A(static_cast<size_t>(M) * K), B(static_cast<size_t>(K) * N), C(static_cast<size_t>(M) * N);
    for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>((i * 7919) % 17) / 8.0f - 1.0f;
    for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>((i * 104729) % 23) / 11.0f - 1.0f;
    for (const int layout : {0, 1, 2}) {
      // 1: B read as an N x K matrix; 2: A read as a K x M matrix, C += (the
      // same numbers, other layouts).
      const bool trans_a = layout == 2, trans_b = layout == 1;
      const float beta = trans_a ? 1.0f : 0.0f;
      for (size_t i = 0; i < C.size(); ++i) C[i] = trans_a ? static_cast<float>(i % 5) : NAN;
      f(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, 1.0f,
        A.data(), trans_a ? M : K, B.data(), trans_b ? K : N, beta, C.data(), N);
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          double ref = trans_a ? (static_cast<size_t>(m) * N + n) % 5 : 0.0, mag = std::fabs(ref);
          for (int k = 0; k < K; ++k) {
            const double a = trans_a ? A[static_cast<size_t>(k) * M + m] : A[static_cast<size_t>(m) * K + k];
            const double b = trans_b ? B[static_cast<size_t>(n) * K + k] : B[static_cast<size_t>(k) * N + n];
            ref += a * b;
            mag += std::fabs(a * b);
          }
          const float got = C[static_cast<size_t>(m) * N + n];
          if (!(std::fabs(got - ref) <= 1e-5 * (mag + 1.0))) return false;
        }
    }
  }
  return true;
}

}  // namespace forge
