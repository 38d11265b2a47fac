// A scripted policy that plays the environment's reference solution: its
// tool calls in order, then the answer, each rendered in the episode's call
// format (displayed tool names) and closed by <|eot|>. After an injected tool
// error or timeout it retries the same call, so under noise it also
// demonstrates recovery. Used for `forge sft` demonstrations (noise off; a
// configurable share with one forced failure and its retry, sft.retry_share)
// and as the fake policy of the scaffold tests.
#pragma once
#include "agent/agent_episode.hpp"

namespace forge {

class ScriptedPolicy {
 public:
  explicit ScriptedPolicy(const AgentEpisode& episode);
  // The tokens to "generate" at the episode's current state.
  Tokens next(const AgentEpisode& episode);

 private:
  std::vector<ToolCall> actions_;  // calls, then {answer, text}
  size_t cursor_ = 0;
};

// Plays an episode to the end with a ScriptedPolicy (logprobs 0, version 0).
void run_scripted(AgentEpisode& episode);

// A noise-free demonstration of task_seed in `style`, played by the solver.
// With `retry`, one of the solution's tool calls (drawn from the task seed
// and episode id) fails once, as a tool error or a timeout in the
// proportion of env.tool_error_rate to env.timeout_rate, and the solver
// repeats it.
Trajectory make_demonstration(const EnvConfig& env_config, const AgentConfig& agent_config,
                              uint64_t task_seed, const ScaffoldStyle& style, uint64_t episode_id,
                              bool retry = false);

// Calls of a demonstration longer than agent.max_new_tokens lets the policy
// write (its stop token aside: a call cut just before it parses whole).
// Trained in full, such a call comes back cut at the cap in RL, unparseable:
// forge sft counts and reports them (a rare long task must not end a long
// run; raise agent.max_new_tokens when they are frequent).
int calls_past_max_new_tokens(const Trajectory& demo, const AgentConfig& agent);

}  // namespace forge
