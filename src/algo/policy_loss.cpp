#include "algo/policy_loss.hpp"

#include "backend/device_array.hpp"
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

PolicyLossArgs PolicyLossConfig::backend_args() const {
  validate();
  PolicyLossArgs a;
  a.objective = algorithm == "cispo"  ? PolicyObjective::cispo
                : algorithm == "grpo" ? PolicyObjective::clipped_sequence_mean
                                      : PolicyObjective::clipped_token_mean;
  a.mask = is_mask == "token"      ? ImportanceMask::token
           : is_mask == "sequence" ? ImportanceMask::sequence
                                   : ImportanceMask::none;
  a.clip_low = 1.0 - effective_eps_low();
  a.clip_high = 1.0 + effective_eps_high();
  a.is_low = is_low;
  a.is_high = is_high;
  return a;
}

void PackedPolicyTokens::add(const SampleTokens& s) {
  if (s.logprob.size() != s.behaviour_logprob.size())
    throw Error("sample " + std::to_string(samples()) + ": logprob and behaviour logprob lengths differ");
  advantage.push_back(s.advantage);
  behaviour_logprob.insert(behaviour_logprob.end(), s.behaviour_logprob.begin(), s.behaviour_logprob.end());
  logprob.insert(logprob.end(), s.logprob.begin(), s.logprob.end());
  sample_begin.push_back(static_cast<int32_t>(logprob.size()));
}

std::vector<float> policy_coefficients(Backend& backend, const PolicyLossConfig& c,
                                       const PackedPolicyTokens& batch, PolicyLossStats* stats,
                                       const ShardSum& sum_across_shards) {
  PolicyLossArgs a = c.backend_args();
  DeviceArray<int32_t> sample_begin;
  DeviceArray<float> advantage, behaviour_logprob, logprob, coef(backend, batch.tokens());
  sample_begin.upload(backend, batch.sample_begin);
  advantage.upload(backend, batch.advantage);
  behaviour_logprob.upload(backend, batch.behaviour_logprob);
  logprob.upload(backend, batch.logprob);
  a.samples = batch.samples();
  a.sample_begin = sample_begin.data();
  a.advantage = advantage.data();
  a.behaviour_logprob = behaviour_logprob.data();
  a.logprob = logprob.data();
  a.coef = coef.data();
  PolicyLossSums sums = backend.policy_loss(a);

  // Sums of the whole batch when it is split over learners (max_ratio stays this learner's).
  double v[8] = {sums.tokens, sums.kept_tokens, sums.kept_samples, sums.clipped_tokens,
                 sums.objective, sums.ratio, sums.kl, sums.logprob_mismatch};
  if (sum_across_shards) sum_across_shards(v, 8);
  const double denominator = a.objective == PolicyObjective::clipped_sequence_mean ? v[2] : v[1];
  if (denominator > 0) backend.scale(coef.data(), static_cast<float>(1.0 / denominator), coef.size());
  if (stats) {
    PolicyLossStats& st = *stats;
    st = PolicyLossStats{};
    st.tokens = int64_t(v[0]);
    st.kept_tokens = int64_t(v[1]);
    st.masked_tokens = st.tokens - st.kept_tokens;
    st.clipped_tokens = int64_t(v[3]);
    st.objective = denominator > 0 ? v[4] / denominator : 0.0;
    st.max_ratio = sums.max_ratio;
    if (st.tokens > 0) {
      st.mean_ratio = v[5] / v[0];
      st.kl = v[6] / v[0];
      st.logprob_mismatch = v[7] / v[0];
    }
  }
  return coef.download();
}

std::vector<std::vector<float>> policy_coefficients(Backend& backend, const PolicyLossConfig& c,
                                                    const std::vector<SampleTokens>& samples,
                                                    PolicyLossStats* stats,
                                                    const ShardSum& sum_across_shards) {
  PackedPolicyTokens batch;
  for (const SampleTokens& s : samples) batch.add(s);
  const std::vector<float> flat = policy_coefficients(backend, c, batch, stats, sum_across_shards);
  std::vector<std::vector<float>> w(samples.size());
  for (size_t s = 0; s < samples.size(); ++s)
    w[s].assign(flat.begin() + batch.sample_begin[s], flat.begin() + batch.sample_begin[s + 1]);
  return w;
}

}  // namespace forge
