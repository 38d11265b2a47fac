#include "algo/advantages.hpp"

#include <cmath>
#include <map>

#include "core/error.hpp"

namespace forge {

AdvantageResult group_advantages(const std::vector<float>& reward, const std::vector<int32_t>& group,
                                 bool divide_by_std, float eps, float zero_std) {
  if (reward.size() != group.size())
    throw Error("group_advantages: " + std::to_string(reward.size()) + " rewards but " +
                std::to_string(group.size()) + " group ids");
  std::map<int32_t, std::vector<size_t>> members;
  for (size_t i = 0; i < group.size(); ++i) members[group[i]].push_back(i);
  AdvantageResult out;
  out.advantage.assign(reward.size(), 0.0f);
  out.in_zero_variance_group.assign(reward.size(), 0);
  out.groups = static_cast<int>(members.size());
  for (const auto& [id, idx] : members) {
    double mean = 0;
    for (size_t i : idx) mean += reward[i];
    mean /= static_cast<double>(idx.size());
    double var = 0;
    for (size_t i : idx) var += (reward[i] - mean) * (reward[i] - mean);
    const double std = std::sqrt(var / static_cast<double>(idx.size()));
    if (std <= zero_std) {
      ++out.zero_variance_groups;
      for (size_t i : idx) out.in_zero_variance_group[i] = 1;
      continue;
    }
    const double scale = divide_by_std ? 1.0 / (std + eps) : 1.0;
    for (size_t i : idx) out.advantage[i] = static_cast<float>((reward[i] - mean) * scale);
  }
  return out;
}

}  // namespace forge
