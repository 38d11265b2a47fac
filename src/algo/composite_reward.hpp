// The composite reward (docs/environments.md, "Reward components"): a weighted sum of named
// components, each optionally standardized over the batch first,
//
//   R_i = w_o f(outcome_i) + w_p f(process_i) + w_e f(efficiency_i) + w_s safety_i,
//   f = identity ("none") or (x - mean_batch) / (std_batch + 1e-6) ("batch").
//
// The raw components stay in each Trajectory; only R enters the advantages.
#pragma once
#include <string>
#include <vector>

#include "episode/trajectory.hpp"

namespace forge {

struct RewardConfig {
  float outcome_weight = 1.0f;
  float process_weight = 0.1f;
  float efficiency_weight = 0.05f;
  float safety_weight = 0.5f;  // safety is never standardized: 0 must stay 0
  std::string outcome_norm = "none";     // none | batch
  std::string process_norm = "none";
  std::string efficiency_norm = "none";
  void validate() const;  // InputError naming the key
};

std::vector<float> composite_rewards(const RewardConfig& config,
                                     const std::vector<RewardComponents>& components);

}  // namespace forge
