// Configuration of the white-box scaffold: budgets, context management and
// the efficiency penalty. add_agent_options() registers the [agent] section
// (keys agent.*). Sampling (temperature, top_p, top_k, seed) comes from the
// [sample] section: the command copies it into `sampling`; the scaffold sets
// max_new_tokens, the stop token and a per-call seed itself.
#pragma once
#include <memory>
#include <string>

#include "agent/scaffold_vocabulary.hpp"
#include "core/config.hpp"
#include "model/sampling.hpp"

namespace forge {

enum class ContextPolicy { kDrop, kSummarize };

struct AgentConfig {
  int max_turns = 8;             // LLM calls per episode
  int max_new_tokens = 40;       // generated tokens per call
  int max_episode_tokens = 240;  // generated tokens per episode
  int max_context_tokens = 448;  // context budget; beyond it, context management acts
  std::string context_policy = "summarize";  // drop | summarize
  int keep_turns = 2;            // most recent turns kept when compacting
  float turn_cost = 0.05f;       // efficiency penalty per turn beyond the task's need
  float token_cost = 0.002f;     // efficiency penalty per generated token beyond the ideal
  SamplingParams sampling;
  // The policy's vocabulary (set by the command from its model); null: the
  // built-in policy's byte vocabulary.
  std::shared_ptr<const ScaffoldVocabulary> vocabulary;

  ContextPolicy policy() const;  // context_policy parsed (InputError if unknown)
  const ScaffoldVocabulary& vocab() const { return vocabulary ? *vocabulary : ScaffoldVocabulary::builtin(); }
};

void add_agent_options(OptionSet& opts, AgentConfig& config);

}  // namespace forge
