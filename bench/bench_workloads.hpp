// Workloads several benchmarks share: agent-like samples (a shared prompt
// per episode, then turns whose context is the history so far: the shape
// tree merging is for) and the SGEMM rate of this host (OpenBLAS, 2048^3,
// the threads it runs with), the yardstick of the CPU figures.
#pragma once
#include <cblas.h>

#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "core/rng.hpp"
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

// OpenBLAS SGEMM 2048^3, GFLOP/s (median of 5 after one warm-up).
inline double sgemm_peak_gflops() {
  const int n = 2048;
  std::vector<float> A(static_cast<size_t>(n) * n, 0.5f), B(A), C(A);
  const double s = median_seconds(1, 5, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f,
                C.data(), n);
  });
  return 2.0 * n * n * n / s / 1e9;
}

}  // namespace forge::bench
