#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace forge {

int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, double uniform01) {
  if (p.temperature <= 0.0f)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  // Candidates in descending logit order (ties by id, for determinism).
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int keep = vocab;
  if (p.top_k > 0 && p.top_k < vocab) {
    keep = p.top_k;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  } else {
    std::sort(order.begin(), order.end(), by_logit);
  }
  const float mx = logits[order[0]];
  std::vector<double> prob(keep);
  double total = 0;
  for (int i = 0; i < keep; ++i) total += prob[i] = std::exp(static_cast<double>(logits[order[i]] - mx));
  if (p.top_p < 1.0f) {
    double cum = 0;
    int n = 0;
    while (n < keep) {
      cum += prob[n++] / total;
      if (cum >= p.top_p) break;
    }
    keep = n;
    total = 0;
    for (int i = 0; i < keep; ++i) total += prob[i];
  }
  double u = uniform01 * total;
  for (int i = 0; i < keep; ++i) {
    u -= prob[i];
    if (u < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace forge
