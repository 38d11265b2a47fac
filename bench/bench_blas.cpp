// SGEMM as forge runs it against the best SGEMM any installed BLAS reaches on
// this machine: every OpenBLAS core this CPU can run (switched in process,
// backend/cpu/blas_core.hpp) and BLIS when its library is installed (loaded
// with its own symbols first, RTLD_DEEPBIND). Shapes: 2048^3 (A B) and the
// reference model's FFN projection (8 x 512 tokens x 256 times 1376 x 256
// transposed, A B^T). Measurements are interleaved over `rounds` rounds; each
// figure is the median over rounds of the median of `reps` calls.
//
//   bench_blas [--rounds=3] [--reps=5] [--threads=0 (all)]
#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/blas_core.hpp"
#include "backend/cpu/cpu_isa.hpp"
#include "bench_util.hpp"

using namespace forge;

namespace {

using SgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, int, int, int, float, const float*,
                         int, const float*, int, float, float*, int);

struct Shape {
  const char* name;
  int M, N, K;
  bool trans_b;
};

double gflops(SgemmFn f, const Shape& s, int reps) {
  std::vector<float> A(static_cast<size_t>(s.M) * s.K, 0.5f), B(static_cast<size_t>(s.K) * s.N, 0.25f),
      C(static_cast<size_t>(s.M) * s.N);
  const double secs = bench::median_seconds(1, reps, [&] {
    f(CblasRowMajor, CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.0f, A.data(),
      s.K, B.data(), s.trans_b ? s.K : s.N, 0.0f, C.data(), s.N);
  });
  return 2.0 * s.M * s.N * s.K / secs / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int rounds = flags.get("rounds", 3), reps = flags.get("reps", 5), threads = flags.get("threads", 0);
  flags.finish();
  if (rounds < 1 || reps < 1) bench::Flags::usage("--rounds and --reps must be at least 1");
  if (threads > 0) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
  }
  const std::string forge_core = blas_core_name();
  // Candidates: forge's core first, then every other core the CPU runs.
  std::vector<std::string> cores = {forge_core};
  const int cpu_rank = blas_core_rank_for(detect_cpu_level());
  for (const char* c : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "Sandybridge", "Nehalem", "Prescott"})
    if (c != forge_core && blas_core_rank(c) <= cpu_rank) cores.push_back(c);
  SgemmFn blis = nullptr;
  for (const char* path : {"/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", "libblis.so.4"})
    if (void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)) {
      blis = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
      // BLIS reads BLIS_NUM_THREADS, not OpenMP's setting: give it the same threads.
      using SetThreads = void (*)(long);
      if (auto set = reinterpret_cast<SetThreads>(dlsym(h, "bli_thread_set_num_threads")))
        set(omp_get_max_threads());
      if (blis) break;
    }
  const Shape shapes[] = {{"2048^3 NN", 2048, 2048, 2048, false}, {"ffn 4096x1376x256 NT", 4096, 1376, 256, true}};
  std::vector<std::string> names;
  for (const auto& c : cores) names.push_back("OpenBLAS " + c + (c == forge_core ? " (forge)" : ""));
  if (blis) names.push_back("BLIS");
  std::vector<std::vector<std::vector<double>>> r(names.size(), std::vector<std::vector<double>>(2));
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < cores.size(); ++i) {
      // forge's own core is measured as loaded (a library that cannot switch still has it).
      if (i > 0 && !switch_blas_core(cores[i])) continue;
      for (int s = 0; s < 2; ++s) r[i][s].push_back(gflops(cblas_sgemm, shapes[s], reps));
    }
    switch_blas_core(forge_core);
    if (blis)
      for (int s = 0; s < 2; ++s) r[cores.size()][s].push_back(gflops(blis, shapes[s], reps));
  }
  std::printf("bench_blas: SGEMM GFLOP/s, %d threads, median of %d rounds\n", omp_get_max_threads(), rounds);
  std::printf("%-30s %14s %22s\n", "BLAS", shapes[0].name, shapes[1].name);
  double best[2] = {0, 0};
  std::string best_name[2];
  double forge_g[2] = {0, 0};
  for (size_t i = 0; i < names.size(); ++i) {
    if (r[i][0].empty()) continue;
    const double g0 = bench::median(r[i][0]), g1 = bench::median(r[i][1]);
    std::printf("%-30s %14.1f %22.1f\n", names[i].c_str(), g0, g1);
    const double g[2] = {g0, g1};
    for (int s = 0; s < 2; ++s) {
      if (g[s] > best[s]) best[s] = g[s], best_name[s] = names[i];
      if (i == 0) forge_g[s] = g[s];
    }
  }
  std::printf("%-30s %14.2f %22.2f\n", "forge / best", forge_g[0] / best[0], forge_g[1] / best[1]);
  bench::print_json({{"forge_sgemm_gflops", bench::num(forge_g[0])},
                     {"best_sgemm_gflops", bench::num(best[0])},
                     {"best_sgemm", "\"" + best_name[0] + "\""},
                     {"fraction_of_best", bench::num(forge_g[0] / best[0])},
                     {"forge_ffn_gflops", bench::num(forge_g[1])},
                     {"best_ffn_gflops", bench::num(best[1])},
                     {"ffn_fraction_of_best", bench::num(forge_g[1] / best[1])},
                     {"blis_installed", blis ? "true" : "false"},
                     {"threads", bench::num(omp_get_max_threads())}});
  return 0;
}
