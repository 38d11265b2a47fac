#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.hpp"

namespace forge {
namespace {

// An upper bound on the top-p nucleus's size, in O(V): the tokens binned by
// their logit's distance below the max (kBins bins down to the min), the
// bins' masses summed from the top until they reach top_p of the whole;
// the tokens of those bins and of the next (slack for the sums' rounding).
int nucleus_bound(const float* logits, const std::vector<double>& e, int vocab, float mx, double all,
                  double top_p) {
  constexpr int kBins = 1024;
  float mn = mx;  // the smallest finite logit: a -inf one (a masked token, mass 0) goes to the last bin
  for (int v = 0; v < vocab; ++v)
    if (std::isfinite(logits[v])) mn = std::min(mn, logits[v]);
  const double scale = mx > mn ? kBins / static_cast<double>(mx - mn) : 0.0;
  thread_local std::vector<double> mass;
  thread_local std::vector<int> count;
  mass.assign(kBins, 0.0);
  count.assign(kBins, 0);
  for (int v = 0; v < vocab; ++v) {
    const double d = static_cast<double>(mx - logits[v]) * scale;
    const int b = d < kBins - 1 ? static_cast<int>(d) : kBins - 1;
    mass[b] += e[v];
    ++count[b];
  }
  double cum = 0;
  int k = 0;
  for (int b = 0; b < kBins; ++b) {
    cum += mass[b];
    k += count[b];
    if (cum >= top_p * all) return b + 1 < kBins ? k + count[b + 1] : k;
  }
  return vocab;
}

}  // namespace

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
  // sorted only as far as needed: the top_k; for top_p alone a prefix of 64
  // (a peaked row's nucleus), else the nucleus_bound() tokens (selected in
  // O(V), then sorted), else the whole vocabulary. A whole sort of a 150k
  // vocabulary per token and row cost tens of milliseconds; so did growing a
  // partial_sort's prefix to a nucleus of tens of thousands.
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const bool top_k_cuts = p.top_k > 0 && p.top_k < vocab;
  const float mx = *std::max_element(logits, logits + vocab);
  thread_local std::vector<double> e;  // exp(logit - max) per token
  e.resize(vocab);
  double all = 0;  // the whole vocabulary's mass
  for (int v = 0; v < vocab; ++v) all += e[v] = std::exp(static_cast<double>(logits[v] - mx));
  thread_local std::vector<int32_t> order;
  thread_local std::vector<double> prob;
  order.resize(vocab);
  std::iota(order.begin(), order.end(), 0);
  int keep = top_k_cuts ? p.top_k : vocab;
  int sorted = top_k_cuts ? keep : std::min(vocab, 64);
  std::partial_sort(order.begin(), order.begin() + sorted, order.end(), by_logit);
  double total = 0;  // the candidates' mass
  // The mass the nucleus must reach. top_p is a 32-bit float (0.3 is held as
  // 0.30000001): a sum within kTopPSlack of it reaches it, so that ten tied
  // tokens at top_p 0.3 keep three, not four.
  const double nucleus = static_cast<double>(p.top_p) - kTopPSlack;
  for (int attempt = 0;; ++attempt) {
    prob.resize(sorted);
    for (int i = 0; i < sorted; ++i) prob[i] = e[order[i]];
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
      if (cum >= nucleus) break;
    }
    if (cum >= nucleus || sorted == keep) {
      keep = n;
      break;
    }
    // The prefix did not hold the nucleus: the bound's tokens, or (should
    // rounding leave it short) every token, sorted.
    sorted = attempt == 0 ? std::max(sorted + 1, std::min(keep, nucleus_bound(logits, e, vocab, mx, all, nucleus)))
                          : keep;
    if (sorted < vocab) std::nth_element(order.begin(), order.begin() + sorted, order.end(), by_logit);
    std::sort(order.begin(), order.begin() + sorted, by_logit);
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
