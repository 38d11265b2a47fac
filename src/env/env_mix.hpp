// The domain mix: a registry of environment factories with weights. A task
// seed picks its domain: u = counter_uniform(seed, salt) falls into the
// domain whose cumulative weight share covers it, so a seed always maps to
// the same domain and, through Environment::reset(seed), the same task.
//
//   EnvMix mix(config);                       // calc, search, code; weights from config
//   mix.add("maze", 0.5, [](const EnvConfig& c) { return std::make_unique<MazeEnv>(c); });
//   auto env = mix.make_for(seed);            // a fresh environment of the drawn domain
//   Task task = env->reset(seed);
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "env/environment.hpp"

namespace forge {

using EnvFactory = std::function<std::unique_ptr<Environment>(const EnvConfig&)>;

class EnvMix {
 public:
  // Registers calc (env.calc_weight), search (env.search_weight) and code
  // (env.code_weight).
  explicit EnvMix(const EnvConfig& config);

  // Adds a domain; InputError for a duplicate name or a weight that is
  // negative or not finite.
  void add(const std::string& name, double weight, EnvFactory factory);
  // The domain of a task seed (InputError if every weight is 0).
  const std::string& pick(uint64_t task_seed) const;
  // A fresh environment of a named domain (InputError for an unknown one).
  std::unique_ptr<Environment> make(const std::string& domain) const;
  std::unique_ptr<Environment> make_for(uint64_t task_seed) const { return make(pick(task_seed)); }

  std::vector<std::string> domains() const;
  const EnvConfig& config() const { return config_; }

 private:
  struct Domain {
    std::string name;
    double weight;
    EnvFactory factory;
  };
  EnvConfig config_;
  std::vector<Domain> domains_;
};

}  // namespace forge
