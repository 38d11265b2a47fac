#include "agent/context_manager.hpp"

namespace forge {

Tokens ContextManager::assemble(const Conversation& c) const {
  Tokens out = c.opening;
  if (!c.notes.empty()) {
    std::string text = "notes: ";
    for (size_t i = 0; i < c.notes.size(); ++i) text += (i ? "; " : "") + c.notes[i];
    const Tokens m = template_.user_message(text, /*markup=*/false);  // the calls' own text
    out.insert(out.end(), m.begin(), m.end());
  }
  const Tokens start = template_.assistant_start();
  out.insert(out.end(), start.begin(), start.end());
  for (const auto& t : c.turns) out.insert(out.end(), t.tokens.begin(), t.tokens.end());
  return out;
}

void ContextManager::forget_oldest_turn(Conversation& c) const {
  if (policy_ == ContextPolicy::kSummarize && !c.turns.front().note.empty())
    c.notes.push_back(c.turns.front().note);
  c.turns.pop_front();
}

bool ContextManager::compact(Conversation& c) const {
  while (c.turns.size() > static_cast<size_t>(keep_turns_)) forget_oldest_turn(c);
  // The newest turn holds the tool result the agent has not read yet:
  // forgetting it would lose it unseen unless summarize keeps its note (a
  // failed call leaves none), so it is kept, and compaction fails when the
  // opening and that turn alone pass the budget.
  const bool noted = policy_ == ContextPolicy::kSummarize && !c.turns.empty() && !c.turns.back().note.empty();
  const size_t kept = keep_turns_ > 0 && !noted ? 1 : 0;
  while (c.turns.size() > kept && over_budget(size(c))) forget_oldest_turn(c);
  while (!c.notes.empty() && over_budget(size(c))) c.notes.erase(c.notes.begin());
  return !over_budget(size(c));
}

}  // namespace forge
