#include "agent/agent_config.hpp"

#include "core/error.hpp"

namespace forge {

ContextPolicy AgentConfig::policy() const {
  if (context_policy == "drop") return ContextPolicy::kDrop;
  if (context_policy == "summarize") return ContextPolicy::kSummarize;
  throw InputError("agent.context_policy: '" + context_policy + "' is not one of drop, summarize");
}

void add_agent_options(OptionSet& opts, AgentConfig& c) {
  opts.describe_section("agent", "the white-box scaffold: budgets, context management, efficiency");
  opts.add("agent.max_turns", &c.max_turns, "LLM calls per episode at most", in_range(1, 1000));
  opts.add("agent.max_new_tokens", &c.max_new_tokens, "generated tokens per call at most",
           in_range(1, 1 << 20));
  opts.add("agent.max_episode_tokens", &c.max_episode_tokens,
           "generated tokens per episode at most (the token budget)", in_range(1, 1 << 24));
  opts.add("agent.max_context_tokens", &c.max_context_tokens,
           "context budget in tokens; beyond it older turns are dropped or summarized",
           in_range(16, 1 << 24));
  opts.add("agent.context_policy", &c.context_policy,
           "context management when over budget: drop older turns, or summarize them into notes",
           one_of({"drop", "summarize"}));
  opts.add("agent.keep_turns", &c.keep_turns, "most recent turns kept when compacting (0 only with summarize)",
           in_range(0, 1000));
  opts.add("agent.turn_cost", &c.turn_cost, "efficiency penalty per turn beyond the task's need",
           at_least(0));
  opts.add("agent.token_cost", &c.token_cost,
           "efficiency penalty per generated token beyond the ideal solution's", at_least(0));
  opts.add_check([&c] {
    // drop keeps no note of a forgotten turn: keeping none forgets the newest
    // tool result, unread, at every compaction (summarize keeps its note).
    if (c.keep_turns == 0 && c.context_policy == "drop")
      throw InputError("agent.keep_turns = 0 with agent.context_policy = drop: every compaction would drop the "
                       "newest tool result before the agent reads it; keep at least 1 turn, or summarize");
  });
}

}  // namespace forge
