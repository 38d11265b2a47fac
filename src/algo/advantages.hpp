// Group-relative advantages (GRPO/CISPO style). Episodes of one task form a
// group of G; each episode's advantage is its reward standardized within the
// group:  A_i = (R_i - mean_g R) / (std_g R + eps), std the population std;
// or, without the division (Dr. GRPO), A_i = R_i - mean_g R, so that a group
// whose rewards differ only by small process or efficiency terms gets small
// advantages instead of unit-scale ones.
// A group whose rewards are all equal (std <= zero_std) carries no signal: its
// advantages are 0 and it is counted (DAPO's dynamic sampling drops it).
#pragma once
#include <cstdint>
#include <vector>

namespace forge {

struct AdvantageResult {
  std::vector<float> advantage;  // per episode, in input order
  int groups = 0;
  int zero_variance_groups = 0;
  std::vector<uint8_t> in_zero_variance_group;  // per episode
};

// group[i] names episode i's group (any integer ids).
AdvantageResult group_advantages(const std::vector<float>& reward, const std::vector<int32_t>& group,
                                 bool divide_by_std = true, float eps = 1e-6f, float zero_std = 1e-6f);

}  // namespace forge
