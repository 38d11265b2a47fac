// The CPU backend's tree attention, forward and backward, against the SGEMM
// rate of the same threads (what the train step's GEMMs reach). GFLOP/s
// counts 4 D flops per visible (query, key) pair and head in the forward and
// 10 D in the backward (S recomputed, dP, dV, dK, dQ), as bench_cuda_kernels
// does. Shapes: the train step of bench_train_step (8 causal sequences of 512
// in one bin, 8 heads of 32), a causal chain at head dimension 64 and 128,
// and a tree bin of agent-like samples (shared prompt, turns). Times are
// medians of --reps runs; the JSON line gives the train-step shape's
// forward and backward GFLOP/s and their fraction of SGEMM.
//
//   bench_cpu_attention [--reps=7] [--tokens=2048]
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend_registry.hpp"
#include "bench_util.hpp"
#include "bench_workloads.hpp"
#include "core/rng.hpp"
#include "tree/packed_batch.hpp"
#include "tree/prefix_tree.hpp"

using namespace forge;

namespace {

struct Result {
  double fwd_gflops, bwd_gflops;
};

// Times forward and backward on one bin (subtree_end se) and prints a row.
Result run(Backend& B, Rng& rng, const std::string& name, const std::vector<int32_t>& se, int H, int Hkv, int D,
           int reps) {
  const int T = static_cast<int>(se.size()), ld = (H + 2 * Hkv) * D;
  const double pairs = bench::visible_pairs(se);
  std::vector<float> qkv(static_cast<size_t>(T) * ld), out(static_cast<size_t>(T) * H * D);
  std::vector<float> lse(static_cast<size_t>(H) * T), dout(out.size()), dqkv(qkv.size());
  for (auto& x : qkv) x = static_cast<float>(rng.normal());
  for (auto& x : dout) x = static_cast<float>(rng.normal());
  const TreeAttentionArgs a =
      fused_tree_attention_args(T, H, Hkv, D, qkv.data(), (H + 2 * Hkv) * D, se.data(), out.data(), lse.data());
  const TreeAttentionGrads g = fused_tree_attention_grads(H, Hkv, D, dout.data(), dqkv.data());
  const double fwd = bench::median_seconds(1, reps, [&] { B.tree_attention_fwd(a); });
  const double bwd = bench::median_seconds(1, reps, [&] { B.tree_attention_bwd(a, g); });
  const Result r{4.0 * D * H * pairs / fwd / 1e9, 10.0 * D * H * pairs / bwd / 1e9};
  std::printf("%-34s %6d %4d %4d %10.2f %10.1f %10.2f %10.1f\n", name.c_str(), T, H, D, fwd * 1e3, r.fwd_gflops,
              bwd * 1e3, r.bwd_gflops);
  return r;
}

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int reps = flags.get("reps", 7), T = flags.get("tokens", 2048);
  flags.finish();
  if (reps <= 0 || T <= 0)
    bench::Flags::usage("need reps > 0 and tokens > 0; got reps " + std::to_string(reps) + ", tokens " +
                        std::to_string(T));
  const std::unique_ptr<Backend> B = make_backend("cpu");
  Rng rng(7), bin_rng(11);
  const PackedBin bin = bench::agent_tree_bin(bin_rng, T, "--tokens");  // a bad --tokens fails before any output
  const int threads = omp_get_max_threads();

  std::printf("%-34s %6s %4s %4s %10s %10s %10s %10s\n", "shape", "T", "H", "D", "fwd ms", "fwd GF/s", "bwd ms",
              "bwd GF/s");
  // The train step's bin: 8 causal sequences of 512.
  std::vector<int32_t> steps(8 * 512);
  for (int j = 0; j < 8 * 512; ++j) steps[j] = (j / 512 + 1) * 512;
  const Result step = run(*B, rng, "train step (8 x 512 causal)", steps, 8, 8, 32, reps);
  const std::vector<int32_t> chain(T, T);
  run(*B, rng, "causal chain", chain, 8, 8, 64, reps);
  run(*B, rng, "causal chain, GQA 8/2", chain, 8, 2, 128, reps);
  run(*B, rng, "tree bin (agent samples)", bin.subtree_end, 8, 8, 64, reps);
  const double peak = bench::sgemm_peak_gflops();
  std::printf("%-34s %10.1f GFLOP/s (2048^3, %d threads)\n", "SGEMM", peak, threads);
  std::printf("train-step shape: forward %.2f, backward %.2f of SGEMM\n", step.fwd_gflops / peak,
              step.bwd_gflops / peak);
  bench::print_json({{"fwd_gflops", bench::num(step.fwd_gflops)},
                     {"bwd_gflops", bench::num(step.bwd_gflops)},
                     {"sgemm_peak_gflops", bench::num(peak)},
                     {"fwd_of_sgemm", bench::num(step.fwd_gflops / peak)},
                     {"bwd_of_sgemm", bench::num(step.bwd_gflops / peak)},
                     {"threads", bench::num(threads)}});
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
