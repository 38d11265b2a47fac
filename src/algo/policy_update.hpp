// One learner update from finished episodes (the synchronous trainer and the
// MPI learner both call it):
//
//   R_i  = composite reward of episode i (composite_reward.hpp); abandoned
//          episodes are left out of everything below
//   A_i  = group-relative advantage (advantages.hpp); zero-variance groups are
//          counted and left out of the batch
//   samples = every LLM call of the remaining episodes: context tokens (not
//          trained) + generated tokens (trained), all carrying A_i
//   pass 1: forward over the prefix-tree bins -> current logprobs per
//          (sample, position); coefficients w from the policy loss
//          (policy_loss.hpp, on the model's backend; masks and denominators
//          need the whole batch)
//   pass 2: forward + backward with entry weights sum_refs w, so the tree
//          gradient equals the linear one; pass 1 ran the bins last to
//          first, so bin 0's forward is still held and not run again.
// Between the passes, |log pi_learner - log pi_behaviour| of every generated
// token is split by its staleness s = policy_version - (the oldest version
// its LLM call ran on: the engine may switch weights mid-call, and later
// tokens attend to the earlier ones' cache): at s = 0 both sides ran the
// same weights, so the mean is the
// numerical mismatch between rollout engine and learner (engine_mismatch,
// what the FP32 head is for; with top-k or top-p sampling it also holds the
// log of the kept share, the engine's logprob being over the kept tokens);
// at s >= 1 it is mostly policy drift
// (stale_drift, and its mean per s in drift_by_staleness).
// With several learners each runs both passes on its shard of the samples.
// Gradients accumulate in the model; the caller steps the optimizer.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "algo/composite_reward.hpp"
#include "algo/policy_loss.hpp"
#include "episode/trajectory.hpp"
#include "model/policy_model.hpp"

namespace forge {

struct PolicyUpdateConfig {
  PolicyLossConfig loss;
  RewardConfig reward;
  int32_t max_tokens = 8192;  // tokens per packed bin
  bool merge = true;          // prefix-tree merging (false: each call alone)
  float inv_temperature = 1.0f;  // 1 / sampling temperature of the behaviour policy
  // Data parallelism over learners: this one trains the calls of episodes i
  // with i mod shards == shard. Rewards and advantages use every episode and
  // the loss denominators the whole batch (sum_across_shards), so the sum of
  // the learners' gradients is the gradient of one learner on the batch.
  int shard = 0, shards = 1;
  ShardSum sum_across_shards;
  // The version of the weights being trained (the learner's step); tokens
  // stamped with it have staleness 0.
  int64_t policy_version = 0;
};

// Buckets of drift_by_staleness: bucket s holds staleness s, the last one
// staleness >= kDriftBuckets - 1 (the rollout store's staleness bins).
inline constexpr int kDriftBuckets = 16;

inline std::array<double, kDriftBuckets> nan_buckets() {
  std::array<double, kDriftBuckets> a;
  a.fill(std::numeric_limits<double>::quiet_NaN());
  return a;
}

struct PolicyUpdateStats {
  PolicyLossStats loss;
  int episodes = 0;
  int groups = 0;
  int zero_variance_groups = 0;
  int abandoned = 0;            // episodes left out (Trajectory::abandoned)
  int samples = 0;              // LLM calls trained on
  double reward_mean = 0;
  RewardComponents component_mean;  // raw components, mean over episodes
  double success_rate = 0;
  // Mean entropy over the batch's generated tokens, as linear; NaN without any
  // (every group zero-variance: 0 would read as a collapsed policy).
  double entropy_mean = std::numeric_limits<double>::quiet_NaN();
  int64_t linear_tokens = 0;    // tokens if every call ran alone
  int64_t tree_tokens = 0;      // tokens actually run per pass
  // Mean |log pi_learner - log pi_behaviour| (see above); NaN without tokens.
  double engine_mismatch = std::numeric_limits<double>::quiet_NaN();  // staleness 0
  double stale_drift = std::numeric_limits<double>::quiet_NaN();      // staleness >= 1
  std::array<double, kDriftBuckets> drift_by_staleness = nan_buckets();  // NaN where empty
  std::array<int64_t, kDriftBuckets> tokens_by_staleness{};
};

PolicyUpdateStats policy_forward_backward(PolicyModel& model, const std::vector<Trajectory>& episodes,
                                          const PolicyUpdateConfig& config);

}  // namespace forge
