// The white-box agent loop of one episode as a state machine, so that many
// episodes can run concurrently against one batched engine (run_episodes.hpp)
// or, later, over MPI:
//
//   while (!ep.done()) {
//     if (auto req = ep.next_request()) submit(*req);   // at most one in flight
//     ... ep.on_generation(result);                      // when it comes back
//   }
//   Trajectory t = ep.take_trajectory();
//
// next_request(): the context tokens (context_manager.hpp) as the prompt,
// sampling from config with max_new_tokens = min(agent.max_new_tokens, the
// episode's remaining token budget), stop token <|eot|>, seed
// hash(sampling.seed, episode id, turn), session "episode-<id>" so the engine
// reuses the cached prefix.
//
// on_generation(): records the LlmCall (the exact context, the generated
// tokens, behaviour logprobs, versions), then parses the action in the
// episode's call format:
//   answer      -> outcome = env.verify(answer); the episode ends ("answer")
//   tool call   -> the displayed name maps back to the canonical tool (a name
//                  the task does not show is an unknown-tool error), env.step
//   garbage     -> a malformed_call error observation
// The observation's signals are recorded (turn = the call's index), tool
// errors/timeouts and recoveries counted, and the turn appended:
// generated + assistant_end + tool message(observation in the response
// format) + assistant_start. The episode ends at agent.max_turns calls
// ("turn_budget") or agent.max_episode_tokens generated ("token_budget");
// otherwise, over agent.max_context_tokens, context management compacts
// (signal context_compacted), and if even that cannot fit ("context_budget").
// An engine error ends it as abandoned ("engine_error: ..."), and so does an
// answer the verifier could not judge ("verifier_error: ...": its sandbox did
// not start), so that a correct answer is never trained on as a failure.
//
// Rewards (raw, src/algo weighs them): outcome = verifier score (0 without
// an answer); process = sum of signal values; efficiency =
// -(turn_cost * max(0, turns - needed_turns)
//   + token_cost * max(0, generated tokens - needed_tokens)),
// needed_* from the reference solution rendered in this episode's format.
#pragma once
#include <memory>
#include <optional>

#include "agent/agent_config.hpp"
#include "agent/context_manager.hpp"
#include "agent/tool_call_format.hpp"
#include "env/env_mix.hpp"
#include "env/perturbation.hpp"
#include "episode/trajectory.hpp"
#include "model/rollout_engine.hpp"

namespace forge {

class AgentEpisode {
 public:
  // Resets env with task_seed, its noise stream with episode_id (members of
  // a group differ in which calls fail). An opening over the context budget
  // ends the episode at once, abandoned ("context_budget": out of its
  // group's advantages).
  AgentEpisode(std::unique_ptr<Environment> env, uint64_t task_seed, const ScaffoldStyle& style,
               const AgentConfig& config, uint64_t episode_id, int32_t group = 0);

  // The next generation request, or nothing when done or one is in flight.
  std::optional<GenerationRequest> next_request();
  void on_generation(const GenerationResult& result);
  bool done() const { return done_; }
  // Ends a running episode as abandoned (its environment rank's deadline):
  // recorded, never trained on. A generation still in flight for it is the
  // caller's to discard.
  void abandon(const std::string& reason);
  // The finished record (Error before done(); once only).
  Trajectory take_trajectory();

  const Task& task() const { return task_; }
  const ScaffoldStyle& style() const { return style_; }
  const Environment& env() const { return *env_; }
  // Tool call `index` of this episode fails as `kind` (a demonstration of a
  // retry; see Environment::fail_at).
  void fail_call(int index, ObservationKind kind) { env_->fail_at(index, kind); }
  const AgentConfig& config() const { return config_; }
  const Tokens& context() const { return context_; }
  // Kind of the last observation (nothing before the first tool call).
  std::optional<ObservationKind> last_observation() const { return last_observation_; }
  // An action (canonical tool name, or kAnswerTool) in this episode's call
  // format with its displayed tool name, without <|eot|>.
  Tokens render(const ToolCall& canonical) const;

 private:
  void finish(const std::string& reason);
  Observation act(const ParsedAction& action);

  std::unique_ptr<Environment> env_;
  Task task_;
  ScaffoldStyle style_;
  AgentConfig config_;
  ChatTemplate template_;
  ContextManager manager_;
  Conversation conversation_;
  Tokens context_;
  Trajectory trajectory_;
  std::optional<ObservationKind> last_observation_;
  int generated_ = 0;
  bool pending_ = false;
  bool done_ = false;
  bool taken_ = false;
};

// The reference solution's cost in a scaffold style: LLM calls (its tool
// calls + the answer) and generated tokens (each action plus <|eot|>).
struct IdealCost {
  int32_t turns = 0, tokens = 0;
};
IdealCost ideal_cost(const Environment& env, const ScaffoldStyle& style,
                     const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());

// An action (canonical tool name, or kAnswerTool) rendered in a style's call
// format with its displayed tool name, without the stop token.
Tokens render_in_style(const ScaffoldStyle& style, const ToolCall& canonical,
                       const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());

// The efficiency component: -(turn_cost * turns beyond the need +
// token_cost * generated tokens beyond the need).
float efficiency_reward(const AgentConfig& config, int turns, const IdealCost& ideal, int generated);

// The scaffold style of episode `episode_id` of task `task_seed` in `mode`.
ScaffoldStyle episode_style(const PerturbationSampler& sampler, uint64_t task_seed, uint64_t episode_id,
                            StyleMode mode);

// An episode of the task `task_seed`: the domain from the mix, the scaffold
// style drawn from (task_seed, episode_id) in `mode`.
AgentEpisode make_episode(const EnvMix& mix, const PerturbationSampler& sampler,
                          const AgentConfig& config, uint64_t task_seed, uint64_t episode_id,
                          StyleMode mode, int32_t group = 0);

}  // namespace forge
