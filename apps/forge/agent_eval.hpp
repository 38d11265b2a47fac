// Evaluation of the policy as an agent: greedy episodes on tasks from a seed
// stream disjoint from training, in training styles or the held-out
// perturbation families; success rate, mean reward components and turns,
// overall and per domain. Used by `forge train` (periodic) and `forge eval`.
#pragma once
#include <map>
#include <string>

#include "agent/agent_config.hpp"
#include "env/env_config.hpp"
#include "env/perturbation.hpp"
#include "model/policy_model.hpp"
#include "model/rollout_engine.hpp"

namespace forge {

struct DomainEval {
  int episodes = 0;
  double success = 0, outcome = 0, process = 0, efficiency = 0, turns = 0;
};

struct AgentEval {
  DomainEval all;
  std::map<std::string, DomainEval> by_domain;
};

AgentEval evaluate_agent(PolicyModel& model, const EnvConfig& env, const AgentConfig& agent,
                         int tasks, uint64_t seed, StyleMode mode);

// Engine limits that fit the agent's budgets for `episodes` concurrent episodes.
EngineConfig engine_for_agent(const AgentConfig& agent, int episodes);

std::string format_eval(const AgentEval& e);

}  // namespace forge
