#include "algo/policy_loss.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace forge {

float PolicyLossConfig::effective_eps_low() const {
  if (eps_low >= 0) return eps_low;
  return algorithm == "cispo" ? 1e9f : 0.2f;
}

float PolicyLossConfig::effective_eps_high() const {
  if (eps_high >= 0) return eps_high;
  return (algorithm == "cispo" || algorithm == "dapo") ? 0.28f : 0.2f;
}

void PolicyLossConfig::validate() const {
  if (algorithm != "cispo" && algorithm != "ppo" && algorithm != "grpo" && algorithm != "dapo")
    throw InputError("loss.algorithm: '" + algorithm + "' is not one of cispo, ppo, grpo, dapo");
  if (is_mask != "none" && is_mask != "token" && is_mask != "sequence")
    throw InputError("loss.is_mask: '" + is_mask + "' is not one of none, token, sequence");
  if (!(is_low > 0 && is_low < 1 && is_high > 1))
    throw InputError("loss.is_low / loss.is_high must satisfy 0 < is_low < 1 < is_high");
}

std::vector<std::vector<float>> policy_coefficients(const PolicyLossConfig& c,
                                                    const std::vector<SampleTokens>& samples,
                                                    PolicyLossStats* stats,
                                                    const ShardSum& sum_across_shards) {
  c.validate();
  const double lo = 1.0 - c.effective_eps_low(), hi = 1.0 + c.effective_eps_high();
  PolicyLossStats st;
  // Masks first: they decide the denominators.
  std::vector<std::vector<uint8_t>> keep(samples.size());
  int64_t kept_samples = 0;
  for (size_t s = 0; s < samples.size(); ++s) {
    const auto& x = samples[s];
    if (x.logprob.size() != x.behaviour_logprob.size())
      throw Error("sample " + std::to_string(s) + ": logprob and behaviour logprob lengths differ");
    const size_t n = x.logprob.size();
    keep[s].assign(n, 1);
    if (c.is_mask == "sequence" && n > 0) {
      double mean_log_ratio = 0;
      for (size_t t = 0; t < n; ++t) mean_log_ratio += x.logprob[t] - x.behaviour_logprob[t];
      const double g = std::exp(mean_log_ratio / static_cast<double>(n));
      if (g < c.is_low || g > c.is_high) keep[s].assign(n, 0);
    } else if (c.is_mask == "token") {
      for (size_t t = 0; t < n; ++t) {
        const double r = std::exp(static_cast<double>(x.logprob[t]) - x.behaviour_logprob[t]);
        if (r < c.is_low || r > c.is_high) keep[s][t] = 0;
      }
    }
    int64_t k = 0;
    for (uint8_t v : keep[s]) k += v;
    st.tokens += static_cast<int64_t>(n);
    st.kept_tokens += k;
    kept_samples += k > 0;
  }
  st.masked_tokens = st.tokens - st.kept_tokens;
  // Denominators of the whole batch when it is split over learners.
  double totals[2] = {static_cast<double>(st.kept_tokens), static_cast<double>(kept_samples)};
  if (sum_across_shards) sum_across_shards(totals, 2);
  const double batch_kept_tokens = totals[0], batch_kept_samples = totals[1];

  const bool sequence_mean = c.algorithm == "grpo";
  std::vector<std::vector<float>> w(samples.size());
  double ratio_sum = 0;
  for (size_t s = 0; s < samples.size(); ++s) {
    const auto& x = samples[s];
    const size_t n = x.logprob.size();
    w[s].assign(n, 0.0f);
    int64_t kept_here = 0;
    for (uint8_t v : keep[s]) kept_here += v;
    for (size_t t = 0; t < n; ++t) {
      const double lr = static_cast<double>(x.logprob[t]) - x.behaviour_logprob[t];
      const double r = std::exp(lr);
      ratio_sum += r;
      st.max_ratio = std::max(st.max_ratio, r);
      st.kl += r - 1.0 - lr;
      st.logprob_mismatch += std::abs(lr);
      const bool clipped = r < lo || r > hi;
      st.clipped_tokens += clipped;
      if (!keep[s][t]) continue;
      const double norm = sequence_mean ? static_cast<double>(kept_here) * batch_kept_samples
                                        : batch_kept_tokens;
      const double A = x.advantage;
      double coef = 0, term = 0;
      if (c.algorithm == "cispo") {
        const double rc = std::clamp(r, lo, hi);
        coef = rc * A;
        term = rc * A * x.logprob[t];
      } else {
        const double unclipped = r * A, clipped_term = std::clamp(r, lo, hi) * A;
        term = std::min(unclipped, clipped_term);
        coef = unclipped <= clipped_term ? r * A : 0.0;  // gradient flows only through r A
      }
      w[s][t] = static_cast<float>(coef / norm);
      st.objective += term / norm;
    }
  }
  if (sum_across_shards) {  // statistics of the whole batch (max_ratio stays this shard's)
    double v[7] = {double(st.tokens), double(st.kept_tokens), double(st.masked_tokens),
                   double(st.clipped_tokens), st.objective, ratio_sum, st.kl};
    double m = st.logprob_mismatch;
    sum_across_shards(v, 7);
    sum_across_shards(&m, 1);
    st.tokens = int64_t(v[0]), st.kept_tokens = int64_t(v[1]), st.masked_tokens = int64_t(v[2]);
    st.clipped_tokens = int64_t(v[3]), st.objective = v[4], ratio_sum = v[5], st.kl = v[6];
    st.logprob_mismatch = m;
  }
  if (st.tokens > 0) {
    st.mean_ratio = ratio_sum / st.tokens;
    st.kl /= st.tokens;
    st.logprob_mismatch /= st.tokens;
  }
  if (stats) *stats = st;
  return w;
}

}  // namespace forge
