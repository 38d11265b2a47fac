// Context management as a scaffold action. The conversation is kept in parts:
//
//   context = opening [notes message] assistant_start turn_1 ... turn_n
//
// where a turn is "generated, assistant_end, tool message, assistant_start"
// (chat_template.hpp), so appending a turn extends the context. When the
// context passes the budget, compact() rewrites it:
//   - drop:      forget all but the keep_turns most recent turns;
//   - summarize: the same, but each forgotten turn that produced a result
//                leaves a note "calc(17*23)=391" in one user message
//                "notes: <note>; <note>" placed after the opening;
// then, while still over budget, it forgets more turns (oldest first; never
// the newest, whose result the agent has not read, unless summarize keeps
// its note or keep_turns is 0), then the oldest notes. The newest turn's
// note is never erased; where it does not fit but the whole newest turn
// does, the turn stays. The new context no longer extends the previous one:
// the trajectory branches there (prefix-tree merging handles it).
#pragma once
#include <deque>
#include <string>
#include <vector>

#include "agent/agent_config.hpp"
#include "agent/chat_template.hpp"

namespace forge {

struct TurnRecord {
  Tokens tokens;     // generated .. the next assistant_start
  std::string note;  // summary line; empty when the turn produced no result
};

struct Conversation {
  Tokens opening;                  // the template's opening: system, user request
  std::vector<std::string> notes;  // summaries of forgotten turns
  std::deque<TurnRecord> turns;    // turns in the context, oldest first
};

class ContextManager {
 public:
  ContextManager(ContextPolicy policy, int budget, int keep_turns, TemplateStyle style,
                 const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin())
      : policy_(policy), budget_(budget), keep_turns_(keep_turns), template_(style, vocab) {}

  Tokens assemble(const Conversation& c) const;
  bool over_budget(size_t context_tokens) const {
    return context_tokens > static_cast<size_t>(budget_);
  }
  // Compacts c (see above); false when the opening with the newest turn (or
  // its note) alone is over budget: the episode ends (context_budget).
  bool compact(Conversation& c) const;

 private:
  size_t size(const Conversation& c) const { return assemble(c).size(); }
  void forget_oldest_turn(Conversation& c) const;

  ContextPolicy policy_;
  int budget_;
  int keep_turns_;
  ChatTemplate template_;
};

}  // namespace forge
