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
  // Candidates in descending logit order (ties by id, for determinism),
  // sorted only as far as needed: the top_k, or for top_p alone a prefix
  // that grows (64, 128, ...) until it holds the nucleus (a whole sort of a
  // 150k vocabulary per token and row cost milliseconds).
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const bool top_k_cuts = p.top_k > 0 && p.top_k < vocab;
  const float mx = *std::max_element(logits, logits + vocab);
  double all = 0;  // the whole vocabulary's mass
  for (int v = 0; v < vocab; ++v) all += std::exp(static_cast<double>(logits[v] - mx));
  thread_local std::vector<int32_t> order;
  thread_local std::vector<double> prob;
  order.resize(vocab);
  std::iota(order.begin(), order.end(), 0);
  int keep = top_k_cuts ? p.top_k : vocab;
  int sorted = top_k_cuts ? keep : std::min(vocab, 64);
  double total = 0;  // the candidates' mass
  for (;;) {
    std::partial_sort(order.begin(), order.begin() + sorted, order.end(), by_logit);
    prob.resize(sorted);
    for (int i = 0; i < sorted; ++i) prob[i] = std::exp(static_cast<double>(logits[order[i]] - mx));
    double top_k_mass = all;
    if (top_k_cuts) {
      top_k_mass = 0;
      for (int i = 0; i < keep; ++i) top_k_mass += prob[i];
    }
    if (p.top_p >= 1.0f) break;
    double cum = 0;
    int n = 0;
    while (n < sorted) {
      cum += prob[n++] / top_k_mass;
      if (cum >= p.top_p) break;
    }
    if (cum >= p.top_p || sorted == keep) {
      keep = n;
      break;
    }
    sorted = std::min(keep, 2 * sorted);
  }
  for (int i = 0; i < keep; ++i) total += prob[i];
  if (log_kept) *log_kept = std::min(0.0, std::log(total / all));
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
