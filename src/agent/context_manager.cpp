#include "agent/context_manager.hpp"

#include <optional>

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
  // The newest turn holds the tool result the agent has not read yet: it is
  // kept whole, or under summarize (where it leaves a note; a failed call
  // leaves none) replaced by its note, which is never erased; where that
  // note does not fit but the whole turn does (a notes message can cost
  // more than a short turn), the whole turn. Compaction fails when neither
  // fits with the opening.
  const bool noted = policy_ == ContextPolicy::kSummarize && !c.turns.empty() && !c.turns.back().note.empty();
  size_t protect = 0;                 // notes at the end that stay
  std::optional<Conversation> whole;  // as it was before the newest turn went to its note
  const auto forget = [&] {
    if (noted && c.turns.size() == 1) {  // keep_turns = 0 too
      whole = c;
      protect = 1;
    }
    forget_oldest_turn(c);
  };
  while (c.turns.size() > static_cast<size_t>(keep_turns_)) forget();
  const size_t kept = keep_turns_ > 0 && !noted ? 1 : 0;
  while (c.turns.size() > kept && over_budget(size(c))) forget();
  while (c.notes.size() > protect && over_budget(size(c))) c.notes.erase(c.notes.begin());
  if (whole && over_budget(size(c))) {
    while (!whole->notes.empty() && over_budget(size(*whole))) whole->notes.erase(whole->notes.begin());
    if (!over_budget(size(*whole))) c = std::move(*whole);
  }
  return !over_budget(size(c));
}

}  // namespace forge
