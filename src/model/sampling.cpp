#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.hpp"

namespace forge {

int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, double uniform01,
                     double* log_kept) {
  if (log_kept) *log_kept = 0;
  if (p.temperature <= 0.0f) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  if ((p.top_k == 0 || p.top_k >= vocab) && p.top_p >= 1.0f) {
    // The whole vocabulary: inverse CDF in token-id order, no sort.
    const float mx = *std::max_element(logits, logits + vocab);
    thread_local std::vector<double> prob;
    prob.resize(vocab);
    double total = 0;
    for (int v = 0; v < vocab; ++v) total += prob[v] = std::exp(static_cast<double>(logits[v] - mx));
    double u = uniform01 * total;
    int last = 0;
    for (int v = 0; v < vocab; ++v) {
      if (prob[v] <= 0) continue;
      last = v;
      u -= prob[v];
      if (u < 0) return v;
    }
    return last;
  }
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  // Candidates in descending logit order (ties by id, for determinism).
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const bool top_k_cuts = p.top_k > 0 && p.top_k < vocab;
  int keep = top_k_cuts ? p.top_k : vocab;
  if (top_k_cuts) {
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  } else {
    std::sort(order.begin(), order.end(), by_logit);
  }
  const float mx = logits[order[0]];
  std::vector<double> prob(keep);
  double total = 0;
  for (int i = 0; i < keep; ++i) total += prob[i] = std::exp(static_cast<double>(logits[order[i]] - mx));
  const double top_k_mass = total;
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
  if (log_kept) {
    double all = top_k_mass;  // the whole vocabulary's mass, for the candidates' share
    if (top_k_cuts) {
      all = 0;
      for (int v = 0; v < vocab; ++v) all += std::exp(static_cast<double>(logits[v] - mx));
    }
    *log_kept = std::min(0.0, std::log(total / all));
  }
  // As above: rounding can leave u >= 0 past the last candidate; the draw
  // is then the last candidate of positive probability, never one of 0.
  double u = uniform01 * total;
  int last = 0;
  for (int i = 0; i < keep; ++i) {
    if (prob[i] <= 0) continue;
    last = i;
    u -= prob[i];
    if (u < 0) return order[i];
  }
  return order[last];
}

void add_sampling_options(OptionSet& opts, SamplingParams& s) {
  opts.describe_section("sample", "token sampling of the rollout engine");
  opts.add("sample.temperature", &s.temperature, "softmax temperature; 0 = greedy",
           satisfies(kTemperaturesAllowed, [](double t) { return temperature_allowed(static_cast<float>(t)); }));
  opts.add("sample.top_p", &s.top_p, "nucleus sampling: smallest token set reaching this mass",
           in_range(0, 1, Interval::kOpenLow));
  opts.add("sample.top_k", &s.top_k, "sample among the k most likely tokens; 0 = all",
           at_least(0));
  opts.add("sample.max_new_tokens", &s.max_new_tokens, "most tokens forge generate writes (agent commands: agent.max_new_tokens per call)",
           in_range(1, 1 << 20));
  opts.add("sample.seed", &s.seed, "seed of the sampler's counter-based random numbers");
}

}  // namespace forge
