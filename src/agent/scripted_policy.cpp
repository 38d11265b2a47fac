#include "agent/scripted_policy.hpp"

#include <map>
#include <utility>

#include "core/error.hpp"
#include "core/rng.hpp"


namespace forge {

ScriptedPolicy::ScriptedPolicy(const AgentEpisode& episode) {
  Solution s = episode.env().solve();
  actions_ = std::move(s.calls);
  actions_.push_back({kAnswerTool, s.answer});
}

Tokens ScriptedPolicy::next(const AgentEpisode& episode) {
  const auto last = episode.last_observation();
  const bool retry = cursor_ > 0 && last &&
                     (*last == ObservationKind::kToolError || *last == ObservationKind::kTimeout);
  const ToolCall& action = actions_[retry ? cursor_ - 1 : std::min(cursor_++, actions_.size() - 1)];
  Tokens out = episode.render(action);
  out.push_back(episode.config().vocab().stop_token());
  return out;
}

void run_scripted(AgentEpisode& episode) {
  ScriptedPolicy policy(episode);
  while (!episode.done()) {
    const auto request = episode.next_request();
    GenerationResult r;
    r.id = request->id;
    r.tokens = policy.next(episode);
    r.logprobs.assign(r.tokens.size(), 0.0f);
    r.versions.assign(r.tokens.size(), 0);
    episode.on_generation(r);
  }
}

Trajectory make_demonstration(const EnvConfig& env_config, const AgentConfig& agent_config,
                              uint64_t task_seed, const ScaffoldStyle& style, uint64_t episode_id,
                              bool retry) {
  EnvConfig quiet = env_config;
  quiet.tool_error_rate = 0;
  quiet.timeout_rate = 0;
  const EnvMix mix(quiet);
  AgentEpisode episode(mix.make_for(task_seed), task_seed, style, agent_config, episode_id);
  const size_t calls = episode.env().solve().calls.size();
  // Over the budget, the last calls would be shown refused while the answer
  // is still right: a demonstration of calls that do nothing.
  if (calls + (retry ? 1 : 0) > static_cast<size_t>(env_config.max_tool_calls))
    throw InputError("the solver's demonstration of task " + std::to_string(task_seed) + " needs " +
                     std::to_string(calls) + " tool calls" + (retry ? " and a retry" : "") +
                     ", more than env.max_tool_calls = " + std::to_string(env_config.max_tool_calls) +
                     ": raise it, or lower the tasks' sizes (env.calc_max_ops, env.search_max_hops)");
  if (retry && calls > 0) {
    const uint64_t h = task_seed ^ (episode_id * 0x9E3779B97F4A7C15ull) ^ 0x4E7A1ull;
    const int index = static_cast<int>(counter_uniform(h, 0) * static_cast<double>(calls));
    const double failures = env_config.tool_error_rate + env_config.timeout_rate;
    const bool error = failures <= 0 || counter_uniform(h, 1) * failures < env_config.tool_error_rate;
    episode.fail_call(index, error ? ObservationKind::kToolError : ObservationKind::kTimeout);
  }
  run_scripted(episode);
  Trajectory t = episode.take_trajectory();
  // A demonstration teaches what it shows: one cut short by the agent's
  // budgets would teach stopping short. Only a config makes that happen. (A
  // verdict the verifier could not give, a sandbox run past its deadline,
  // leaves the demonstration as it is: the solver's calls are right.)
  const std::map<std::string, std::pair<const char*, int>> budgets = {
      {"turn_budget", {"agent.max_turns", agent_config.max_turns}},
      {"token_budget", {"agent.max_episode_tokens", agent_config.max_episode_tokens}},
      {"context_budget", {"agent.max_context_tokens", agent_config.max_context_tokens}}};
  if (const auto it = budgets.find(t.end_reason); it != budgets.end()) {
    const std::string budget = std::string(it->second.first) + " = " + std::to_string(it->second.second);
    throw InputError("the solver's demonstration of task " + std::to_string(task_seed) + " (" +
                     std::to_string(calls) + " tool calls" + (retry ? " and a retry" : "") + ") was cut short by " +
                     budget + " (" + t.end_reason + "): raise it, or lower the tasks' sizes (env.calc_max_ops, "
                     "env.search_max_hops)");
  }
  return t;
}

int calls_past_max_new_tokens(const Trajectory& demo, const AgentConfig& agent) {
  const int32_t stop = agent.vocab().stop_token();
  int past = 0;
  for (const LlmCall& c : demo.calls) {
    const size_t written = c.generated.size() - (!c.generated.empty() && c.generated.back() == stop ? 1 : 0);
    past += written > static_cast<size_t>(agent.max_new_tokens);
  }
  return past;
}

}  // namespace forge
