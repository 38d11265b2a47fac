// Evaluation of the policy as an agent: greedy episodes on tasks from a seed
// stream disjoint from training, in training styles or the held-out
// perturbation families; success rate, mean reward components and turns,
// recovery after tool errors, the share of episodes per failure cause
// (failure_mode.hpp) and success by the number of tool calls a task needs,
// overall and per domain. Used by `forge train` (periodic) and `forge eval`.
#pragma once
#include <functional>
#include <csignal>
#include <array>
#include <map>
#include <string>
#include <vector>

#include "agent/agent_config.hpp"
#include "agent/failure_mode.hpp"
#include "env/env_config.hpp"
#include "env/perturbation.hpp"
#include "model/policy_model.hpp"
#include "model/rollout_engine.hpp"

namespace forge {

struct DomainEval {
  int episodes = 0;
  double success = 0, outcome = 0, process = 0, efficiency = 0, turns = 0;
  // Recovery from injected tool errors and timeouts: the fraction of episodes
  // that met one, and among those, the fraction that retried successfully
  // at least once and the fraction that still succeeded.
  double met_error = 0, recovered = 0, success_after_error = 0;
  double malformed = 0;      // malformed tool calls per episode
  double safety_events = 0;  // actions blocked by the sandbox or the safety policy, per episode
  double test_runs = 0;      // test-suite runs per episode (code: run_tests)
  int with_error = 0;    // episodes that met a tool error
  // Share of the episodes that failed for each cause (failure_mode.hpp),
  // indexed by FailureMode; they sum to 1 - success.
  std::array<double, kFailureModes> failures{};
  // Episodes and success rate by the number of tool calls the task needs
  // (the reference solution's): how success falls with the task's length.
  struct ByLength {
    int episodes = 0;
    double success = 0;
  };
  std::map<int, ByLength> by_needed_calls;
};

struct AgentEval {
  DomainEval all;
  std::map<std::string, DomainEval> by_domain;
};

// The figures above over finished episodes (any policy's).
AgentEval summarize_episodes(const std::vector<Trajectory>& episodes);

// `stop` (a SIGTERM flag), when set, ends it between engine steps: *stopped
// is then true and the figures are not the evaluation's. `each_step`, when
// set, is called after every engine step (a watchdog's progress).
AgentEval evaluate_agent(PolicyModel& model, const EnvConfig& env, const AgentConfig& agent,
                         int tasks, uint64_t seed, StyleMode mode, const volatile std::sig_atomic_t* stop = nullptr,
                         bool* stopped = nullptr, const std::function<void()>& each_step = {});

// The evaluation task stream of a run: disjoint from its training stream, and
// the same for `forge sft`, `forge train` and `forge eval` of one run.seed.
inline uint64_t eval_task_seed(uint64_t run_seed) { return run_seed ^ 0xE7A1ull; }

// Both style sets: the training styles, and the held-out families when the
// configuration holds any out.
struct StyleEvals {
  AgentEval seen;
  bool has_heldout = false;
  AgentEval heldout;
  bool stopped = false;  // cut short by `stop`: no figures
};
// `stop`: a SIGTERM flag that ends the evaluation between engine steps (a
// checkpoint waits on it; the evaluation changes nothing a run goes on from).
StyleEvals evaluate_styles(PolicyModel& model, const EnvConfig& env, const AgentConfig& agent,
                           int tasks, uint64_t run_seed, const volatile std::sig_atomic_t* stop = nullptr,
                           const std::function<void()>& each_step = {});
// "<title> (seen styles):" and "<title> (held-out families):" tables.
std::string format_style_evals(const StyleEvals& e, const std::string& title);

// Engine limits that fit the agent's budgets for `episodes` concurrent episodes.
EngineConfig engine_for_agent(const AgentConfig& agent, int episodes);

std::string format_eval(const AgentEval& e);

}  // namespace forge
