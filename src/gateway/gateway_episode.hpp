// One black-box episode as the gateway records it.
//
// Opened: a task of forge's environments (slot's task seed) in the
// episode's scaffold style; the agent gets the task's system and user
// messages and its tools as OpenAI function specs (one string parameter,
// "input"). Every chat or completion request becomes an LlmCall: the exact
// prompt tokens, the sampled tokens with behaviour logprob and policy version
// each. A prompt that does not extend the previous call's tokens (the agent
// rewrote history) is recorded as it is, so the episode's calls branch (the
// prefix tree merges what they share) and a "history_rewritten" signal
// (value 0) counts it.
//
// Tools: the agent may run the task's tools through the gateway (forge's
// simulation: observation text in the episode's response format, process
// signals recorded) and submit its answer (the verifier's outcome). Reward
// components: outcome from the answer, process = sum of the signals,
// efficiency from turns and tokens beyond the ideal solution (as white-box
// episodes); any component the agent posts replaces the computed one.
//
// Size: the record travels in one data-pool slot with its group, so an
// episode may use slot_bytes / G of it; bytes() is its encoded size
// (trajectory_codec) plus the tool results it keeps (to recognise them when
// echoed), and calls, tool runs and answers that would pass the budget are
// refused (409: the agent should close the episode); answers over 4 KiB are
// refused (400) too.
//
// Not thread-safe: the gateway service locks around every call.
#pragma once
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <string>

#include "agent/agent_config.hpp"
#include "agent/agent_episode.hpp"
#include "env/environment.hpp"
#include "episode/trajectory.hpp"
#include "gateway/chat_messages.hpp"
#include "model/rollout_engine.hpp"

namespace forge {

class GatewayEpisode {
 public:
  GatewayEpisode(std::unique_ptr<Environment> env, uint64_t task_seed, const ScaffoldStyle& style,
                 const AgentConfig& config, uint64_t episode_id, uint64_t slot);

  uint64_t id() const { return trajectory_.episode_id; }
  uint64_t slot() const { return slot_; }
  const ScaffoldStyle& style() const { return style_; }

  // {"messages": [system?, user], "tools": [...], "domain": ...}
  nlohmann::json task_json() const;
  // Prompt tokens of a chat request (RequestError 400 if malformed).
  Tokens render_chat(const nlohmann::json& messages) const;
  // Records a finished generation of `prompt`; returns the reply message
  // (finish reason through *finish_reason) for chat requests.
  nlohmann::json record_chat(const Tokens& prompt, const GenerationResult& r, std::string* finish_reason);
  void record_completion(const Tokens& prompt, const GenerationResult& r);
  int calls() const { return static_cast<int>(trajectory_.calls.size()); }
  // Encoded size of the record so far (an upper bound) and the tool results
  // kept, bytes.
  size_t bytes() const { return bytes_; }
  // The most a call of `prompt_tokens` adds to bytes(), with `generated`
  // tokens and a history_rewritten signal if it branches.
  static size_t call_bytes(size_t prompt_tokens, size_t generated);
  // RequestError 409 when `more` bytes would pass `budget`.
  void check_budget(size_t more, size_t budget) const;
  const Trajectory& record_so_far() const { return trajectory_; }

  // budget below: the bytes() the episode may reach; past it, RequestError
  // 409 and nothing is recorded.
  // Runs a task tool (displayed name, argument string): {"content", "kind"};
  // 409 before the environment runs it when fewer than 256 bytes plus the
  // name are left, and a result past what is left is cut (fit_tool_result).
  nlohmann::json run_tool(const std::string& name, const std::string& args, size_t budget);
  // Verifies the final answer (once): {"outcome", "success"}.
  nlohmann::json answer(const std::string& text, size_t budget);
  // Agent-posted reward components (any of outcome, process, efficiency).
  void post_reward(const nlohmann::json& components);

  // The record, with its reward; abandoned episodes are not trained on.
  Trajectory finish(bool abandoned, const std::string& reason);

 private:
  void record(const Tokens& prompt, const GenerationResult& r);

  std::unique_ptr<Environment> env_;
  Task task_;
  ScaffoldStyle style_;
  AgentConfig config_;
  uint64_t slot_;
  IdealCost ideal_;
  EpisodeTexts texts_;
  Trajectory trajectory_;
  int generated_ = 0;
  size_t bytes_ = 256;  // the fixed fields and strings of the record
  bool answered_ = false;
  std::optional<float> posted_outcome_, posted_process_, posted_efficiency_;
};

// A tool result cut to at most `bytes` (never inside a UTF-8 character)
// and marked " [cut: the episode is full]"; unchanged when it fits. With
// fewer bytes than the mark, the mark alone.
std::string fit_tool_result(const std::string& text, size_t bytes);

}  // namespace forge
