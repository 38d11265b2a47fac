// Workloads several benchmarks share: agent-like samples (a shared prompt
// per episode, then turns whose context is the history so far: the shape
// tree merging is for) and their tree bin, the visible pairs of a tree
// mask, and the SGEMM rate of this host (the library the CPU backend runs,
// backend/cpu/sgemm_library.hpp; 2048^3, the threads it runs with), the
// yardstick of the CPU figures.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/sgemm_library.hpp"
#include "bench_util.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "tree/packed_batch.hpp"
#include "tree/prefix_tree.hpp"

namespace forge::bench {

// `episodes` episodes of `turns` turns: turn t's sample is the history (not
// trained) plus `gen` generated tokens (trained); the history then grows by
// those and `obs` observation tokens. Tokens are random bytes.
inline std::vector<Sample> agent_samples(Rng& rng, int episodes, int turns, int prompt, int gen, int obs) {
  std::vector<int32_t> p(prompt);
  for (auto& t : p) t = static_cast<int32_t>(rng.below(256));
  std::vector<Sample> out;
  for (int e = 0; e < episodes; ++e) {
    std::vector<int32_t> history = p;
    for (int t = 0; t < turns; ++t) {
      Sample s;
      s.tokens = history;
      s.trainable.assign(history.size(), 0);
      for (int i = 0; i < gen; ++i) {
        s.tokens.push_back(static_cast<int32_t>(rng.below(256)));
        s.trainable.push_back(1);
      }
      history = s.tokens;
      for (int i = 0; i < obs; ++i) history.push_back(static_cast<int32_t>(rng.below(256)));
      out.push_back(std::move(s));
    }
  }
  return out;
}

// The first tree bin of at most max_tokens tokens that the agent samples
// pack into (4 episodes of 8 turns: a 512-token prompt, 64 generated and 32
// observation tokens per turn); a bin too small for the longest sample is
// a usage error naming the flag that set it.
inline PackedBin agent_tree_bin(Rng& rng, int max_tokens, const std::string& flag) {
  try {
    return pack_forest(build_prefix_forest(agent_samples(rng, 4, 8, 512, 64, 32), true), max_tokens)[0];
  } catch (const InputError& e) {
    Flags::usage(flag + "=" + std::to_string(max_tokens) + ": " + e.what());
  }
}

// Visible (query, key) pairs of a tree mask: key j is seen by queries j .. se[j]-1.
inline double visible_pairs(const std::vector<int32_t>& se) {
  double pairs = 0;
  for (size_t j = 0; j < se.size(); ++j) pairs += se[j] - static_cast<double>(j);
  return pairs;
}

// SGEMM 2048^3 as the CPU backend runs it, GFLOP/s (median of 5 after one warm-up).
inline double sgemm_peak_gflops() {
  const int n = 2048;
  std::vector<float> A(static_cast<size_t>(n) * n, 0.5f), B(A), C(A);
  const double s = median_seconds(1, 5, [&] {
    cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
  });
  return 2.0 * n * n * n / s / 1e9;
}

}  // namespace forge::bench
