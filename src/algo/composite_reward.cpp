#include "algo/composite_reward.hpp"

#include <cmath>

#include "core/error.hpp"

namespace forge {

void RewardConfig::validate() const {
  for (const auto& [key, v] : {std::pair<const char*, const std::string*>{"reward.outcome_norm", &outcome_norm},
                               {"reward.process_norm", &process_norm},
                               {"reward.efficiency_norm", &efficiency_norm}})
    if (*v != "none" && *v != "batch")
      throw InputError(std::string(key) + ": '" + *v + "' is not one of none, batch");
}

namespace {
std::vector<double> normalized(const std::vector<double>& x, const std::string& how) {
  if (how == "none" || x.empty()) return x;
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (double v : x) var += (v - mean) * (v - mean);
  const double std = std::sqrt(var / static_cast<double>(x.size()));
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = (x[i] - mean) / (std + 1e-6);
  return out;
}
}  // namespace

std::vector<float> composite_rewards(const RewardConfig& c,
                                     const std::vector<RewardComponents>& components) {
  c.validate();
  std::vector<double> o, p, e;
  for (const auto& rc : components) {
    o.push_back(rc.outcome);
    p.push_back(rc.process);
    e.push_back(rc.efficiency);
  }
  const auto on = normalized(o, c.outcome_norm), pn = normalized(p, c.process_norm),
             en = normalized(e, c.efficiency_norm);
  std::vector<float> r(components.size());
  for (size_t i = 0; i < r.size(); ++i)
    r[i] = static_cast<float>(c.outcome_weight * on[i] + c.process_weight * pn[i] +
                              c.efficiency_weight * en[i] + c.safety_weight * components[i].safety);
  return r;
}

}  // namespace forge
