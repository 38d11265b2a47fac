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
//          gradient equals the linear one.
// With several learners each runs both passes on its shard of the samples.
// Gradients accumulate in the model; the caller steps the optimizer.
#pragma once
#include <cstdint>
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
};

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
  double entropy_mean = 0;      // mean entropy of the trained rows
  int64_t linear_tokens = 0;    // tokens if every call ran alone
  int64_t tree_tokens = 0;      // tokens actually run per pass
};

PolicyUpdateStats policy_forward_backward(PolicyModel& model, const std::vector<Trajectory>& episodes,
                                          const PolicyUpdateConfig& config);

}  // namespace forge
