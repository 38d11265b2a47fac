#include "gateway/gateway_episode.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "agent/prompt_text.hpp"
#include "agent/tool_response_format.hpp"
#include "env/process_signals.hpp"
#include "gateway/request_error.hpp"

namespace forge {

using nlohmann::json;

namespace {
constexpr size_t kRewriteBytes = 64;   // a history_rewritten signal
constexpr size_t kToolRunBytes = 256;  // a tool run's least record: signals, the result's frame

// The parts of `shown`, the text handed out for `parts` (made valid UTF-8 or
// cut to fit, it may differ): the whole parts it begins with keep their kind,
// the rest is plain.
std::vector<ScaffoldVocabulary::Part> parts_of_shown(const std::string& shown,
                                                     const std::vector<ScaffoldVocabulary::Part>& parts) {
  std::vector<ScaffoldVocabulary::Part> out;
  size_t at = 0;
  for (const auto& p : parts) {
    if (shown.compare(at, p.text.size(), p.text) != 0) break;
    out.push_back(p);
    at += p.text.size();
  }
  if (at < shown.size()) out.push_back({shown.substr(at), false});
  return out;
}

}  // namespace

std::string fit_tool_result(const std::string& text, size_t bytes) {
  static constexpr std::string_view kCut = " [cut: the episode is full]";
  if (text.size() <= bytes) return text;
  size_t n = bytes > kCut.size() ? bytes - kCut.size() : 0;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;  // not inside a character
  return text.substr(0, n) + std::string(kCut);
}

GatewayEpisode::GatewayEpisode(std::unique_ptr<Environment> env, uint64_t task_seed, const ScaffoldStyle& style,
                               const AgentConfig& config, uint64_t episode_id, uint64_t slot)
    : env_(std::move(env)), style_(style), config_(config), slot_(slot) {
  task_ = env_->reset(task_seed, episode_id);
  ideal_ = ideal_cost(*env_, style_, config_.vocab());
  const PromptText prompt = render_prompt(task_, style_, config_.vocab());
  texts_.system = valid_utf8(prompt.system);
  texts_.user = valid_utf8(prompt.user);
  trajectory_.episode_id = episode_id;
  trajectory_.env = task_.domain;
  trajectory_.task_id = task_seed;
  trajectory_.group = static_cast<int32_t>(slot);  // the slot's G episodes share the task: one advantage group
  trajectory_.template_family = style_.name();
  trajectory_.needed_turns = ideal_.turns;
  trajectory_.needed_tokens = ideal_.tokens;
}

json GatewayEpisode::task_json() const {
  json messages = json::array();
  if (!texts_.system.empty()) messages.push_back({{"role", "system"}, {"content", texts_.system}});
  messages.push_back({{"role", "user"}, {"content", texts_.user}});
  json tools = json::array();
  for (const ToolSpec& t : task_.tools) {
    const json input = {{"type", "string"}, {"description", t.params + ", e.g. " + t.example}};
    tools.push_back({{"type", "function"},
                     {"function",
                      {{"name", displayed_tool_name(style_.tools, t.name)},
                       {"description", t.description},
                       {"parameters",
                        {{"type", "object"}, {"properties", {{"input", input}}}, {"required", {"input"}}}}}}});
  }
  return {{"messages", messages}, {"tools", tools}, {"domain", task_.domain}};
}

Tokens GatewayEpisode::render_chat(const json& messages) const {
  return forge::render_chat(messages, style_.chat_template, style_.call, texts_, config_.vocab());
}

size_t GatewayEpisode::call_bytes(size_t prompt_tokens, size_t generated) {
  return 16 + 4 * prompt_tokens + 12 * generated + kRewriteBytes;
}

void GatewayEpisode::check_budget(size_t more, size_t budget) const {
  if (bytes_ + more > budget)
    throw RequestError(409, "invalid_request_error",
                       "episode " + std::to_string(id()) + " is full: its record would pass " +
                           std::to_string(budget) + " bytes, its share of a data-pool slot (pool.slot_mib / " +
                           "train.group); close it");
}

void GatewayEpisode::record(const Tokens& prompt, const GenerationResult& r) {
  FORGE_CHECK(r.logprobs.size() == r.tokens.size() && r.versions.size() == r.tokens.size(),
              "generation result with mismatched token/logprob/version counts");
  // Rewritten history: the prompt extends no earlier call's context + reply
  // and is no earlier call's context (a parallel sample) either. The reply
  // may end without its final stop token, as /completions' text does (an
  // agent that sends prompt + text + more).
  const auto starts_with = [&](const Tokens& b, size_t from, size_t n) {
    return prompt.size() >= from + n && std::equal(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n),
                                                    prompt.begin() + static_cast<std::ptrdiff_t>(from));
  };
  const auto continues = [&](const LlmCall& c) {
    if (!starts_with(c.context, 0, c.context.size())) return false;
    const size_t at = c.context.size(), n = c.generated.size();
    const bool stops = n > 0 && config_.vocab().is_stop(c.generated.back());
    return prompt.size() == at || starts_with(c.generated, at, n) || (stops && starts_with(c.generated, at, n - 1));
  };
  bool extends = trajectory_.calls.empty();
  for (const LlmCall& c : trajectory_.calls) extends = extends || continues(c);
  if (!extends) trajectory_.signals.push_back({calls(), "history_rewritten", 0.0f});
  trajectory_.calls.push_back({prompt, r.tokens, r.logprobs, r.versions});
  generated_ += static_cast<int>(r.tokens.size());
  bytes_ += call_bytes(prompt.size(), r.tokens.size()) - (extends ? kRewriteBytes : 0);
}

json GatewayEpisode::record_chat(const Tokens& prompt, const GenerationResult& r, std::string* finish_reason) {
  const std::string call_id = "call_" + std::to_string(id()) + "_" + std::to_string(calls());
  json message =
      reply_message(r.tokens, style_.call, call_id, r.finish != FinishReason::kStop, finish_reason, config_.vocab());
  record(prompt, r);
  texts_.replies.push_back({message, prompt, r.tokens});
  return message;
}

void GatewayEpisode::record_completion(const Tokens& prompt, const GenerationResult& r) { record(prompt, r); }

json GatewayEpisode::run_tool(const std::string& name, const std::string& args, size_t budget) {
  // Refused before the environment runs it when the share cannot hold a
  // least record: a refused run must not change the environment.
  check_budget(kToolRunBytes + name.size(), budget);
  Observation obs = bad_call_observation(signal::kUnknownTool, "unknown tool '" + name + "'");
  bool known = false;
  for (const ToolSpec& t : task_.tools)
    if (displayed_tool_name(style_.tools, t.name) == name) obs = env_->step({t.name, args}), known = true;
  if (!known) env_->interrupt_retry();
  std::vector<ScaffoldVocabulary::Part> parts = observation_parts(style_, obs, {name, args}, config_.vocab());
  std::string content = valid_utf8(text_of(parts));
  size_t signal_bytes = 0;
  for (const ProcessSignal& s : obs.signals) signal_bytes += 16 + s.kind.size();
  // A result larger than what is left is cut to fit: the agent is shown, and
  // the record keeps, the same text.
  content = fit_tool_result(content, budget - std::min(budget, bytes_ + signal_bytes));
  bytes_ += content.size() + signal_bytes;
  const int32_t turn = std::max(0, calls() - 1);
  for (ProcessSignal s : obs.signals) {
    s.turn = turn;
    trajectory_.signals.push_back(std::move(s));
  }
  if (obs.kind == ObservationKind::kToolError || obs.kind == ObservationKind::kTimeout) ++trajectory_.tool_errors;
  if (obs.recovered) ++trajectory_.recoveries;
  if (obs.test_run) ++trajectory_.test_runs;
  texts_.tool_contents.push_back({content, parts_of_shown(content, parts)});
  return {{"content", content}, {"kind", to_string(obs.kind)}};
}

json GatewayEpisode::answer(const std::string& text, size_t budget) {
  if (answered_) throw RequestError(409, "invalid_request_error", "episode " + std::to_string(id()) + " already answered");
  if (text.size() > 4096) throw bad_request("the answer has " + std::to_string(text.size()) + " bytes; at most 4096");
  check_budget(text.size(), budget);
  float outcome = 0;
  try {
    outcome = env_->verify(text);
  } catch (const VerifierUnavailable& e) {
    // Not the answer's fault: nothing recorded, the agent may answer again.
    throw RequestError(503, "server_error", std::string(e.what()) + "; retry the answer");
  }
  answered_ = true;
  trajectory_.final_answer = text;
  bytes_ += text.size();
  trajectory_.reward.outcome = outcome;
  trajectory_.success = trajectory_.reward.outcome >= 1.0f;
  return {{"outcome", trajectory_.reward.outcome}, {"success", trajectory_.success}};
}

void GatewayEpisode::post_reward(const json& c) {
  if (!c.is_object()) throw bad_request("the reward must be a JSON object of components");
  // All checked before any is taken: a refused request changes nothing.
  for (const auto& [key, value] : c.items()) {
    if (key != "outcome" && key != "process" && key != "efficiency")
      throw bad_request("unknown reward component '" + key + "' (outcome, process, efficiency)");
    if (!value.is_number() || !std::isfinite(value.get<double>()) || std::fabs(value.get<double>()) > 1e6)
      throw bad_request("reward component '" + key + "' must be a finite number in [-1e6, 1e6]");
  }
  for (const auto& [key, value] : c.items()) {
    const float v = static_cast<float>(value.get<double>());
    (key == "outcome" ? posted_outcome_ : key == "process" ? posted_process_ : posted_efficiency_) = v;
  }
}

Trajectory GatewayEpisode::finish(bool abandoned, const std::string& reason) {
  trajectory_.turns = calls();
  trajectory_.abandoned = abandoned;
  trajectory_.end_reason = reason;
  sum_signal_rewards(trajectory_);  // process, safety and safety_events as for white-box episodes
  RewardComponents& r = trajectory_.reward;
  if (posted_process_) r.process = *posted_process_;
  r.efficiency = posted_efficiency_.value_or(efficiency_reward(config_, trajectory_.turns, ideal_, generated_));
  if (posted_outcome_) {
    r.outcome = *posted_outcome_;
    trajectory_.success = r.outcome >= 1.0f;
  }
  return std::move(trajectory_);
}

}  // namespace forge
