// The GEMMs of one decode step, as the CPU backend runs them (its skinny
// kernels for A W^T with few rows, backend/cpu/skinny_gemm.hpp) against
// the SGEMM library's (backend/cpu/sgemm_library.hpp: BLIS or OpenBLAS) on
// the same calls. A step with M sequences multiplies M
// activation rows by every weight matrix once: per layer q|k|v [qkv, d],
// o [d, d], gate|up [2 F, d], down [d, F], then the head [V, d] (left out
// where V > 10000: the FP32 head runs on the sampling rows only). Models:
// the agent policy of the main job (d 128, 3 layers), the reference model
// (d 256, 4 layers) and a SmolLM2-135M-sized stack (d 576, 30 layers, weights
// far beyond the caches). Time per step = the best of `reps` rounds of
// several steps each; GFLOP/s = 2 M (sum of N K) / time.
//
//   bench_decode_gemm [--threads=1] [--reps=3] [--quick]   (--quick: the agent model only)
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend_registry.hpp"
#include "backend/cpu/sgemm_library.hpp"
#include "bench_util.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"

using namespace forge;

namespace {

struct ModelShape {
  const char* name;
  const char* key;
  int d, layers, qkv, ffn, vocab;
};

struct Weight {
  int N, K;
  std::vector<float> w;
};

std::vector<Weight> decode_weights(const ModelShape& m, Rng& rng) {
  std::vector<Weight> ws;
  for (int l = 0; l < m.layers; ++l) {
    ws.push_back({m.qkv, m.d, {}});
    ws.push_back({m.d, m.d, {}});
    ws.push_back({2 * m.ffn, m.d, {}});
    ws.push_back({m.d, m.ffn, {}});
  }
  if (m.vocab <= 10000) ws.push_back({m.vocab, m.d, {}});
  for (Weight& x : ws) {
    x.w.resize(static_cast<size_t>(x.N) * x.K);
    for (float& v : x.w) v = static_cast<float>(rng.normal());
  }
  return ws;
}

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int threads = flags.get("threads", 1), reps = flags.get("reps", 3);
  const bool quick = flags.on("quick");
  flags.finish();
  if (threads < 1 || reps < 1) bench::Flags::usage("--threads and --reps must be at least 1");
  omp_set_num_threads(threads);
  set_sgemm_threads(threads);
  const auto cpu = make_backend("cpu");
  const ModelShape models[] = {{"agent policy (d 128, 3 layers)", "agent", 128, 3, 384, 344, 272},
                               {"reference (d 256, 4 layers)", "reference", 256, 4, 768, 688, 272},
                               {"SmolLM2-135M size (d 576, 30 layers)", "smollm2", 576, 30, 960, 1536, 49152}};
  Rng rng(7);
  std::vector<std::pair<std::string, std::string>> json;
  std::printf("decode-step GEMMs (A W^T, M rows), %d thread(s); time per step, best of %d\n", threads, reps);
  for (const ModelShape& m : models) {
    if (quick && std::string(m.key) != "agent") continue;
    const std::vector<Weight> ws = decode_weights(m, rng);
    double flops_per_row = 0, bytes = 0;
    for (const Weight& x : ws) {
      flops_per_row += 2.0 * x.N * x.K;
      bytes += 4.0 * x.N * x.K;
    }
    std::printf("\n%s, weights %.1f MB\n%4s %14s %14s %10s %10s %8s\n", m.name, bytes / 1e6, "M", "forge us/step",
                "BLAS us", "forge GF/s", "BLAS GF/s", "speedup");
    for (int M : {1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128}) {
      std::vector<float> A(static_cast<size_t>(M) * 4096), C(static_cast<size_t>(M) * 4096);
      for (float& v : A) v = static_cast<float>(rng.normal());
      const double flops = M * flops_per_row;
      const int steps = std::max(2, static_cast<int>(2e8 / flops));
      double best[2] = {1e30, 1e30};
      for (int r = 0; r < reps; ++r)
        for (int which = 0; which < 2; ++which) {
          Stopwatch sw;
          for (int s = 0; s < steps; ++s)
            for (const Weight& x : ws) {
              if (which == 0)
                cpu->gemm(false, true, M, x.N, x.K, 1.0f, A.data(), x.K, x.w.data(), x.K, 0.0f, C.data(), x.N);
              else
                cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, x.N, x.K, 1.0f, A.data(), x.K, x.w.data(),
                          x.K, 0.0f, C.data(), x.N);
            }
          best[which] = std::min(best[which], sw.seconds() / steps);
        }
      std::printf("%4d %14.1f %14.1f %10.1f %10.1f %8.2f\n", M, best[0] * 1e6, best[1] * 1e6, flops / best[0] / 1e9,
                  flops / best[1] / 1e9, best[1] / best[0]);
      const std::string k = std::string(m.key) + "_m" + std::to_string(M);
      json.emplace_back(k + "_forge_us", bench::num(best[0] * 1e6));
      json.emplace_back(k + "_blas_us", bench::num(best[1] * 1e6));
    }
  }
  json.emplace_back("threads", std::to_string(threads));
  bench::print_json(json);
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
