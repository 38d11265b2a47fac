// Policy-gradient losses as per-token coefficients on log pi_theta.
//
// For a batch of samples (LLM calls) s with generated tokens t, advantage A_s,
// behaviour logprob mu_{s,t} and current logprob lp_{s,t}, r = exp(lp - mu):
//
//   cispo  J = 1/N sum sg(r^) A lp,             r^ = clip(r, 1 - eps_low, 1 + eps_high)
//   ppo    J = 1/N sum min(r A, clip(r) A)       (token mean)
//   dapo   ppo with eps_low 0.2, eps_high 0.28   (token mean)
//   grpo   J = 1/S sum_s 1/|o_s| sum_t min(r A, clip(r) A)   (sequence mean)
//
// N = generated tokens of the batch left after masking, S = samples left.
// For every algorithm the learner leaves zero-variance groups (A = 0) out of
// the batch before this (algo/policy_update.hpp), so they are not in N or S
// either, as DAPO's dynamic sampling does.
// The gradient of every J is sum w_{s,t} grad lp_{s,t} with
//   cispo: w = sg(r^) A / N   (no gradient through r; clipped tokens keep one)
//   ppo/dapo/grpo: w = r A / norm where the unclipped term is the minimum, else 0.
// The learner trains L = -sum w lp on the tree (src/algo/token_loss.hpp).
//
// Masked importance sampling against train/inference mismatch: "token" drops
// tokens whose r leaves [is_low, is_high]; "sequence" drops samples whose
// geometric-mean ratio exp(mean_t (lp - mu)) leaves it. Dropped tokens leave
// both the numerator and the denominator N.
//
// Computed by Backend::policy_loss (per-token math in
// backend/policy_loss_terms.hpp; a kernel on CUDA) in two phases: the backend
// gives the coefficients times the batch denominator and the sums, the
// learners add the sums, then the coefficients are scaled by 1 / N (1 / S).
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace forge {

struct PolicyLossConfig {
  std::string algorithm = "cispo";  // cispo | ppo | grpo | dapo
  float eps_low = -1;   // < 0: the algorithm's default (cispo: no lower clip; ppo, grpo, dapo: 0.2)
  float eps_high = -1;  // < 0: the algorithm's default (cispo 0.28, ppo/grpo 0.2, dapo 0.28)
  std::string is_mask = "none";  // none | token | sequence
  float is_low = 0.5f, is_high = 2.0f;
  bool adv_std_norm = true;  // divide group advantages by the reward std (false: Dr. GRPO)

  float effective_eps_low() const;
  float effective_eps_high() const;
  void validate() const;  // InputError naming the key
  // The backend's loss parameters (objective, clip range, mask).
  PolicyLossArgs backend_args() const;
};

// One sample's generated tokens.
struct SampleTokens {
  float advantage = 0;
  std::vector<float> behaviour_logprob;  // mu per generated token
  std::vector<float> logprob;            // current lp per generated token
};

struct PolicyLossStats {
  double objective = 0;       // J (to maximize)
  int64_t tokens = 0;         // generated tokens in
  int64_t kept_tokens = 0;    // N after masking
  int64_t masked_tokens = 0;
  int64_t clipped_tokens = 0; // r outside the clip range
  // Means over the generated tokens in; NaN when there were none (a step of
  // zero-variance groups only: 0 read as exactly on-policy).
  double mean_ratio = std::nan(""), max_ratio = 0;
  double kl = std::nan("");                // mean of r - 1 - log r (k3 estimate of KL(mu || pi))
  double logprob_mismatch = std::nan("");  // mean |lp - mu|
  double clip_fraction() const { return tokens ? double(clipped_tokens) / tokens : 0; }
  double masked_fraction() const { return tokens ? double(masked_tokens) / tokens : 0; }
};

// A batch's generated tokens packed flat (the layout of PolicyLossArgs):
// sample s owns tokens [sample_begin[s], sample_begin[s + 1]).
struct PackedPolicyTokens {
  std::vector<int32_t> sample_begin{0};
  std::vector<float> advantage;          // [samples]
  std::vector<float> behaviour_logprob;  // [tokens]
  std::vector<float> logprob;            // [tokens]
  int samples() const { return static_cast<int>(advantage.size()); }
  size_t tokens() const { return logprob.size(); }
  void add(const SampleTokens& s);  // Error when its lengths differ
};

// Sums values[0, n) over every learner of a data-parallel batch, in place
// (an MPI_Allreduce); empty for one learner.
using ShardSum = std::function<void(double* values, int n)>;

// Coefficients w[s][t] (the gradient of J with respect to lp[s][t]). When the
// batch is split over learners, sum_across_shards makes the denominators
// (and the statistics) those of the whole batch, so that the learners'
// gradients add up to the one-learner gradient (max_ratio stays this
// learner's). On the given backend, w flat as batch.logprob.
std::vector<float> policy_coefficients(Backend& backend, const PolicyLossConfig& config,
                                       const PackedPolicyTokens& batch, PolicyLossStats* stats,
                                       const ShardSum& sum_across_shards = {});
// The same with w per sample.
std::vector<std::vector<float>> policy_coefficients(Backend& backend, const PolicyLossConfig& config,
                                                    const std::vector<SampleTokens>& samples,
                                                    PolicyLossStats* stats,
                                                    const ShardSum& sum_across_shards = {});

}  // namespace forge
