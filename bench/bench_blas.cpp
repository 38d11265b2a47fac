// SGEMM as forge runs it against the best SGEMM any installed BLAS reaches on
// this machine: every OpenBLAS core this CPU can run (switched in process,
// backend/cpu/blas_core.hpp) and BLIS when its library is installed (loaded
// with its own symbols first, RTLD_DEEPBIND), in the configuration forge
// chose (blis_config.hpp) and in each other of skx, zen3 and haswell the CPU
// runs. BLIS fixes its configuration once per process, so those rows come from
// child processes of this binary (BLIS_ARCH_TYPE=<name> bench_blas
// --blis-child: BLIS alone, one round, a "blis_row" line). Workloads: 2048^3 (A B); the
// reference model's FFN projection (8 x 512 tokens x 256 times 1376 x 256
// transposed, A B^T); and the 12 GEMMs of one layer of bench_train_step's
// step (forward A W^T, input gradients dY W, weight gradients dY^T X added to
// the gradient, beta 1), whose figure is their FLOPs over the sum of their
// times; and those 4 weight gradients alone ("step dW", the A^T B layout that
// forge gives OpenBLAS beside BLIS on Intel AVX-512 CPUs: sgemm_library.hpp).
// forge's row is the library it runs, or, where it splits the layouts, a row
// of its own through the backend's dispatch (cpu_sgemm; above kAtBMaxThreads
// threads that dispatch keeps A^T B in BLIS, and the row says so).
// Measurements are interleaved over `rounds` rounds; each figure is the
// median over rounds of the median of `reps` calls (per GEMM).
//
//   bench_blas [--rounds=3] [--reps=5] [--threads=0 (all)]
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/blas_core.hpp"
#include "backend/cpu/blis_config.hpp"
#include "backend/cpu/cpu_isa.hpp"
#include "backend/cpu/sgemm_library.hpp"
#include "bench_util.hpp"

using namespace forge;

namespace {

struct Gemm {
  int M, N, K;
  bool trans_a, trans_b;
  float beta;
};

struct Workload {
  const char* name;
  std::vector<Gemm> gemms;
};

// FLOPs of the workload over the sum of its GEMMs' median times.
double gflops(SgemmFn f, const Workload& w, int reps) {
  double flops = 0, secs = 0;
  for (const Gemm& g : w.gemms) {
    std::vector<float> A(static_cast<size_t>(g.M) * g.K, 0.5f), B(static_cast<size_t>(g.K) * g.N, 0.25f),
        C(static_cast<size_t>(g.M) * g.N, 0.0f);
    secs += bench::median_seconds(1, reps, [&] {
      f(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, g.M, g.N, g.K,
        1.0f, A.data(), g.trans_a ? g.M : g.K, B.data(), g.trans_b ? g.K : g.N, g.beta, C.data(), g.N);
    });
    flops += 2.0 * g.M * g.N * g.K;
  }
  return flops / secs / 1e9;
}

// One layer of bench_train_step's reference model (d 256, 8 heads of 32, FFN
// 688, 8 x 512 tokens): q|k|v, o, gate|up and down, each forward, input
// gradient and weight gradient.
Workload train_step_layer() {
  const int T = 4096;
  const int out_in[4][2] = {{768, 256}, {256, 256}, {1376, 256}, {256, 688}};
  Workload w{"train step layer", {}};
  for (const auto& l : out_in) {
    const int out = l[0], in = l[1];
    w.gemms.push_back({T, out, in, false, true, 0.0f});  // Y = X W^T
    w.gemms.push_back({T, in, out, false, false, 0.0f});  // dX = dY W
    w.gemms.push_back({out, in, T, true, false, 1.0f});   // dW += dY^T X
  }
  return w;
}

// The layer's weight gradients alone (dW += dY^T X).
Workload weight_gradients(const Workload& layer) {
  Workload w{"step dW", {}};
  for (const Gemm& g : layer.gemms)
    if (g.trans_a) w.gemms.push_back(g);
  return w;
}

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int rounds = flags.get("rounds", 3), reps = flags.get("reps", 5), threads = flags.get("threads", 0);
  const bool blis_child = flags.on("blis-child", true);
  flags.finish();
  if (rounds < 1 || reps < 1) bench::Flags::usage("--rounds and --reps must be at least 1");
  if (threads < 0) bench::Flags::usage("--threads must be >= 0 (0: all cores)");
  if (threads > 0) {
    omp_set_num_threads(threads);
    set_sgemm_threads(threads);
  }
  const Workload loads[] = {{"2048^3 NN", {{2048, 2048, 2048, false, false, 0.0f}}},
                            {"ffn 4096x1376x256 NT", {{4096, 1376, 256, false, true, 0.0f}}},
                            train_step_layer(), weight_gradients(train_step_layer())};
  constexpr int kLoads = 4;
  const SgemmFn blis = blis_sgemm();  // loaded and given forge's threads by sgemm_library.cpp
  if (blis_child) {
    if (!blis) return 1;
    std::printf("blis_row %s", blis_kernels().c_str());
    for (const Workload& w : loads) std::printf(" %.6g", gflops(blis, w, reps));
    std::printf("\n");
    return 0;
  }
  // BLIS in the configurations forge might choose, other than this process's.
  std::vector<std::string> other_configs;
  if (blis)
    for (const char* c : {"skx", "zen3", "haswell"})
      if (c != blis_kernels() && blis_config_runs_on(c, detect_cpu_level())) other_configs.push_back(c);
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) other_configs.clear();
  const std::string forge_core = blas_core_name();
  // Candidates: forge's core first, then every other core the CPU runs.
  std::vector<std::string> cores = {forge_core};
  const int cpu_rank = blas_core_rank_for(detect_cpu_level());
  for (const char* c : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "Sandybridge", "Nehalem", "Prescott"})
    if (c != forge_core && blas_core_rank(c) <= cpu_rank) cores.push_back(c);
  // forge's row: the library the CPU backend runs (sgemm_library.hpp), or its
  // own row where the weight gradients run in OpenBLAS beside BLIS.
  const bool forge_runs_blis = !sgemm_library().openblas;
  const bool forge_splits = !sgemm_library().at_b.empty();
  std::vector<std::string> names;
  for (const auto& c : cores)
    names.push_back("OpenBLAS " + c + (c == forge_core && !forge_runs_blis ? " (forge)" : ""));
  // BLIS's rows follow the OpenBLAS ones: this process's configuration, then the others.
  std::vector<std::string> blis_rows;
  if (blis) {
    names.push_back(blis_library_name() + " " + blis_kernels() + (forge_runs_blis && !forge_splits ? " (forge)" : ""));
    blis_rows.push_back(blis_kernels());
  }
  for (const auto& c : other_configs) {
    names.push_back(blis_library_name() + " " + c);
    blis_rows.push_back(c);
  }
  const size_t split_row = names.size();
  if (forge_splits)
    names.push_back(at_b_split_applies()
                        ? "forge: " + blis_kernels() + ", A^T B " + forge_core
                        : "forge: " + blis_kernels() + " for all at " + std::to_string(omp_get_max_threads()) +
                              " threads");
  const size_t forge_row = forge_splits ? split_row : forge_runs_blis ? cores.size() : 0;
  std::vector<std::vector<std::vector<double>>> r(names.size(), std::vector<std::vector<double>>(kLoads));
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < cores.size(); ++i) {
      // forge's own core is measured as loaded (a library that cannot switch still has it).
      if (i > 0 && !switch_blas_core(cores[i])) continue;
      for (int s = 0; s < kLoads; ++s) r[i][s].push_back(gflops(cblas_sgemm, loads[s], reps));
    }
    switch_blas_core(forge_core);
    if (blis)
      for (int s = 0; s < kLoads; ++s) r[cores.size()][s].push_back(gflops(blis, loads[s], reps));
    for (size_t c = 0; c < other_configs.size(); ++c) {
      const std::string cmd = "BLIS_ARCH_TYPE=" + other_configs[c] + " '" + self + "' --blis-child --reps=" +
                              std::to_string(reps) + " --threads=" + std::to_string(omp_get_max_threads());
      for (const std::string& line : bench::command_lines(cmd)) {
        std::istringstream in(line);
        std::string tag, kernels;
        double g[kLoads];
        // A row counts only when BLIS ran the configuration asked for.
        if (in >> tag >> kernels >> g[0] >> g[1] >> g[2] >> g[3] && tag == "blis_row" && kernels == other_configs[c])
          for (int s = 0; s < kLoads; ++s) r[cores.size() + 1 + c][s].push_back(g[s]);
      }
    }
    if (forge_splits)
      for (int s = 0; s < kLoads; ++s) r[split_row][s].push_back(gflops(cpu_sgemm, loads[s], reps));
  }
  std::printf("bench_blas: SGEMM GFLOP/s, %d threads, median of %d rounds\n", omp_get_max_threads(), rounds);
  std::printf("%-38s %10s %22s %18s %9s\n", "BLAS", loads[0].name, loads[1].name, loads[2].name, loads[3].name);
  double best[kLoads] = {0, 0, 0, 0}, forge_g[kLoads] = {0, 0, 0, 0};
  std::string best_name[kLoads];
  for (size_t i = 0; i < names.size(); ++i) {
    if (r[i][0].empty()) continue;
    double g[kLoads];
    for (int s = 0; s < kLoads; ++s) {
      g[s] = bench::median(r[i][s]);
      if (g[s] > best[s]) best[s] = g[s], best_name[s] = names[i];
      if (i == forge_row) forge_g[s] = g[s];
    }
    std::printf("%-38s %10.1f %22.1f %18.1f %9.1f\n", names[i].c_str(), g[0], g[1], g[2], g[3]);
  }
  // BLIS's step-layer figure per configuration, forge's first.
  std::string blis_configs;
  for (size_t b = 0; b < blis_rows.size(); ++b)
    if (!r[cores.size() + b][2].empty())
      blis_configs += std::string(blis_configs.empty() ? "" : ", ") + "\"" + blis_rows[b] +
                      "\": " + bench::num(bench::median(r[cores.size() + b][2]));
  std::printf("%-38s %10.2f %22.2f %18.2f %9.2f\n", "forge / best", forge_g[0] / best[0], forge_g[1] / best[1],
              forge_g[2] / best[2], forge_g[3] / best[3]);
  bench::print_json({{"forge_sgemm_gflops", bench::num(forge_g[0])},
                     {"best_sgemm_gflops", bench::num(best[0])},
                     {"best_sgemm", "\"" + best_name[0] + "\""},
                     {"fraction_of_best", bench::num(forge_g[0] / best[0])},
                     {"forge_ffn_gflops", bench::num(forge_g[1])},
                     {"best_ffn_gflops", bench::num(best[1])},
                     {"ffn_fraction_of_best", bench::num(forge_g[1] / best[1])},
                     {"forge_step_layer_gflops", bench::num(forge_g[2])},
                     {"best_step_layer_gflops", bench::num(best[2])},
                     {"best_step_layer", "\"" + best_name[2] + "\""},
                     {"step_layer_fraction_of_best", bench::num(forge_g[2] / best[2])},
                     {"forge_step_dw_gflops", bench::num(forge_g[3])},
                     {"best_step_dw_gflops", bench::num(best[3])},
                     {"best_step_dw", "\"" + best_name[3] + "\""},
                     {"step_dw_fraction_of_best", bench::num(forge_g[3] / best[3])},
                     {"blis_installed", blis ? "true" : "false"},
                     {"blis_step_layer_gflops", "{" + blis_configs + "}"},
                     {"threads", bench::num(omp_get_max_threads())}});
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
