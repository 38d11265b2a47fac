#include "agent/agent_episode.hpp"

#include <algorithm>

#include "agent/prompt_text.hpp"
#include "agent/tool_call_format.hpp"
#include "agent/tool_response_format.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "env/process_signals.hpp"

namespace forge {
namespace {

void append(Tokens& out, const Tokens& more) { out.insert(out.end(), more.begin(), more.end()); }

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0x9E3779B97F4A7C15ull);
  return splitmix64(x);
}

}  // namespace

AgentEpisode::AgentEpisode(std::unique_ptr<Environment> env, uint64_t task_seed,
                           const ScaffoldStyle& style, const AgentConfig& config,
                           uint64_t episode_id, int32_t group)
    : env_(std::move(env)),
      style_(style),
      config_(config),
      template_(style.chat_template, config_.vocab()),
      manager_(config.policy(), config.max_context_tokens, config.keep_turns, style.chat_template, config_.vocab()) {
  FORGE_CHECK(env_ != nullptr, "AgentEpisode needs an environment");
  task_ = env_->reset(task_seed, episode_id);
  const PromptText prompt = render_prompt(task_, style_, config_.vocab());
  conversation_.opening =
      template_.opening(prompt.system.empty() ? std::nullopt : std::optional(prompt.system), prompt.user);
  context_ = manager_.assemble(conversation_);

  trajectory_.episode_id = episode_id;
  trajectory_.env = task_.domain;
  trajectory_.task_id = task_seed;
  trajectory_.group = group;
  trajectory_.template_family = style_.name();
  const IdealCost ideal = ideal_cost(*env_, style_, config_.vocab());
  trajectory_.needed_turns = ideal.turns;
  trajectory_.needed_tokens = ideal.tokens;
  // An opening that does not fit (this member's scaffold style may be
  // longer than its group's others) is abandoned: it made no call, and its
  // 0 reward would move the group's advantages for nothing the policy did.
  if (manager_.over_budget(context_.size())) {
    trajectory_.abandoned = true;
    finish("context_budget");
  }
}

Tokens render_in_style(const ScaffoldStyle& style, const ToolCall& canonical, const ScaffoldVocabulary& vocab) {
  ToolCall shown = canonical;
  if (canonical.tool != kAnswerTool) shown.tool = displayed_tool_name(style.tools, canonical.tool);
  return render_action(style.call, shown, vocab);
}

IdealCost ideal_cost(const Environment& env, const ScaffoldStyle& style, const ScaffoldVocabulary& vocab) {
  const Solution ideal = env.solve();
  IdealCost c;
  c.turns = static_cast<int32_t>(ideal.calls.size()) + 1;
  for (const ToolCall& call : ideal.calls) c.tokens += render_in_style(style, call, vocab).size() + 1;
  c.tokens += render_in_style(style, {kAnswerTool, ideal.answer}, vocab).size() + 1;
  return c;
}

float efficiency_reward(const AgentConfig& config, int turns, const IdealCost& ideal, int generated) {
  return -(config.turn_cost * std::max(0, turns - ideal.turns) +
           config.token_cost * std::max(0, generated - ideal.tokens));
}

Tokens AgentEpisode::render(const ToolCall& canonical) const { return render_in_style(style_, canonical, config_.vocab()); }

std::optional<GenerationRequest> AgentEpisode::next_request() {
  if (done_ || pending_) return std::nullopt;
  pending_ = true;
  GenerationRequest r;
  r.id = trajectory_.episode_id;
  r.prompt = context_;
  r.sampling = config_.sampling;
  r.sampling.max_new_tokens = std::min(config_.max_new_tokens, config_.max_episode_tokens - generated_);
  r.sampling.stop_tokens = config_.vocab().stop_tokens();
  r.sampling.seed = mix_seed(mix_seed(config_.sampling.seed, trajectory_.episode_id),
                             static_cast<uint64_t>(trajectory_.turns));
  r.session = "episode-" + std::to_string(trajectory_.episode_id);
  return r;
}

Observation AgentEpisode::act(const ParsedAction& action) {
  if (action.kind == ParsedAction::Kind::kInvalid) {
    env_->interrupt_retry();
    return bad_call_observation(signal::kMalformedCall, "could not parse a tool call: " + action.error);
  }
  for (const ToolSpec& t : task_.tools)
    if (displayed_tool_name(style_.tools, t.name) == action.call.tool)
      return env_->step({t.name, action.call.args});
  env_->interrupt_retry();
  return bad_call_observation(signal::kUnknownTool, "unknown tool '" + action.call.tool + "'");
}

void AgentEpisode::on_generation(const GenerationResult& result) {
  FORGE_CHECK(pending_ && !done_, "AgentEpisode::on_generation without a request in flight");
  pending_ = false;
  if (result.finish == FinishReason::kError) {
    trajectory_.abandoned = true;
    finish("engine_error: " + result.error);
    return;
  }
  FORGE_CHECK(result.logprobs.size() == result.tokens.size() &&
                  result.versions.size() == result.tokens.size(),
              "generation result with mismatched token/logprob/version counts");
  trajectory_.calls.push_back({context_, result.tokens, result.logprobs, result.versions});
  const int32_t turn = trajectory_.turns++;
  generated_ += static_cast<int>(result.tokens.size());

  const ParsedAction action = parse_action(style_.call, result.tokens, config_.vocab());
  // Cut by the episode's own token budget (next_request capped it below
  // agent.max_new_tokens): the policy could not finish its action, which is
  // the budget's end, not a malformed call to penalize.
  if (action.kind == ParsedAction::Kind::kInvalid && result.finish == FinishReason::kLength &&
      static_cast<int>(result.tokens.size()) < config_.max_new_tokens && generated_ >= config_.max_episode_tokens)
    return finish("token_budget");
  if (action.kind == ParsedAction::Kind::kAnswer) {
    trajectory_.final_answer = action.answer;
    try {
      trajectory_.reward.outcome = env_->verify(action.answer);
    } catch (const VerifierUnavailable& e) {
      trajectory_.abandoned = true;
      finish(std::string("verifier_error: ") + e.what());
      return;
    }
    trajectory_.success = trajectory_.reward.outcome >= 1.0f;
    finish("answer");
    return;
  }

  const Observation obs = act(action);
  last_observation_ = obs.kind;
  for (ProcessSignal s : obs.signals) {
    s.turn = turn;
    trajectory_.signals.push_back(std::move(s));
  }
  if (obs.kind == ObservationKind::kToolError || obs.kind == ObservationKind::kTimeout)
    ++trajectory_.tool_errors;
  if (obs.recovered) ++trajectory_.recoveries;
  if (obs.test_run) ++trajectory_.test_runs;

  TurnRecord record;
  record.tokens = result.tokens;
  append(record.tokens, template_.assistant_end(result.tokens));
  append(record.tokens, template_.tool_message(observation_parts(style_, obs, action.call, config_.vocab())));
  append(record.tokens, template_.assistant_start());
  if (obs.kind == ObservationKind::kOk) record.note = paren_form(action.call) + "=" + obs.text;
  append(context_, record.tokens);
  conversation_.turns.push_back(std::move(record));

  if (trajectory_.turns >= config_.max_turns) return finish("turn_budget");
  if (generated_ >= config_.max_episode_tokens) return finish("token_budget");
  if (manager_.over_budget(context_.size())) {
    ++trajectory_.context_compactions;
    trajectory_.signals.push_back({turn, signal::kContextCompacted, 0.0f});
    const bool fits = manager_.compact(conversation_);
    context_ = manager_.assemble(conversation_);
    if (!fits) finish("context_budget");
  }
}

void AgentEpisode::finish(const std::string& reason) {
  done_ = true;
  trajectory_.end_reason = reason;
  sum_signal_rewards(trajectory_);
  trajectory_.reward.efficiency = efficiency_reward(
      config_, trajectory_.turns, {trajectory_.needed_turns, trajectory_.needed_tokens}, generated_);
}

void AgentEpisode::abandon(const std::string& reason) {
  FORGE_CHECK(!done_, "AgentEpisode::abandon of a finished episode");
  pending_ = false;
  trajectory_.abandoned = true;
  finish(reason);
}

Trajectory AgentEpisode::take_trajectory() {
  FORGE_CHECK(done_, "AgentEpisode::take_trajectory before the episode is done");
  FORGE_CHECK(!taken_, "AgentEpisode::take_trajectory called twice");
  taken_ = true;
  return std::move(trajectory_);
}

ScaffoldStyle episode_style(const PerturbationSampler& sampler, uint64_t task_seed, uint64_t episode_id,
                            StyleMode mode) {
  return sampler.draw(mix_seed(task_seed, episode_id), mode);
}

AgentEpisode make_episode(const EnvMix& mix, const PerturbationSampler& sampler,
                          const AgentConfig& config, uint64_t task_seed, uint64_t episode_id,
                          StyleMode mode, int32_t group) {
  return AgentEpisode(mix.make_for(task_seed), task_seed, episode_style(sampler, task_seed, episode_id, mode),
                      config, episode_id, group);
}

}  // namespace forge
