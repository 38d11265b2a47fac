#include "env/env_mix.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "env/calc_env.hpp"
#include "env/code_env.hpp"
#include "env/search_env.hpp"

namespace forge {

EnvMix::EnvMix(const EnvConfig& config) : config_(config) {
  add("calc", config.calc_weight,
      [](const EnvConfig& c) { return std::make_unique<CalcEnv>(c); });
  add("search", config.search_weight,
      [](const EnvConfig& c) { return std::make_unique<SearchEnv>(c); });
  add("code", config.code_weight, [](const EnvConfig& c) { return std::make_unique<CodeEnv>(c); });
}

void EnvMix::add(const std::string& name, double weight, EnvFactory factory) {
  for (const auto& d : domains_)
    if (d.name == name) throw InputError("environment '" + name + "' is registered twice");
  if (!(weight >= 0) || !std::isfinite(weight))
    throw InputError("environment '" + name + "': weight must be finite and >= 0");
  domains_.push_back({name, weight, std::move(factory)});
}

const std::string& EnvMix::pick(uint64_t task_seed) const {
  // Shares of the largest weight: weights near DBL_MAX would sum to inf.
  double largest = 0;
  for (const auto& d : domains_) largest = std::max(largest, d.weight);
  if (!(largest > 0)) throw InputError("every environment weight is 0: no domain to draw a task from");
  double total = 0;
  for (const auto& d : domains_) total += d.weight / largest;
  const double u = counter_uniform(task_seed, 0xD0A1Aull) * total;
  double acc = 0;
  for (const auto& d : domains_) {
    acc += d.weight / largest;
    if (u < acc && d.weight > 0) return d.name;
  }
  for (auto it = domains_.rbegin(); it != domains_.rend(); ++it)
    if (it->weight > 0) return it->name;  // u at the rounding edge of the last share
  return domains_.back().name;
}

std::unique_ptr<Environment> EnvMix::make(const std::string& domain) const {
  for (const auto& d : domains_)
    if (d.name == domain) return d.factory(config_);
  std::string known;
  for (const auto& d : domains_) known += (known.empty() ? "" : ", ") + d.name;
  throw InputError("unknown environment '" + domain + "' (known: " + known + ")");
}

std::vector<std::string> EnvMix::domains() const {
  std::vector<std::string> out;
  for (const auto& d : domains_) out.push_back(d.name);
  return out;
}

}  // namespace forge
