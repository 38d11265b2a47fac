// ContextManager::compact: what each policy keeps when the opening and the
// newest turn alone pass the budget.
#include <gtest/gtest.h>

#include "agent/context_manager.hpp"

namespace forge {
namespace {

// An opening of 10 tokens and three turns of 20; the newest produced "c=3".
Conversation three_turns() {
  Conversation c;
  c.opening = Tokens(10, 'o');
  for (const char* note : {"a=1", "b=2", "c=3"}) c.turns.push_back({Tokens(20, 'x'), note});
  return c;
}

TEST(ContextManager, DropKeepsTheNewestTurnAndFailsWhenItAloneDoesNotFit) {
  const ContextManager m(ContextPolicy::kDrop, /*budget=*/25, /*keep_turns=*/2, TemplateStyle::kSpecial);
  Conversation c = three_turns();
  EXPECT_FALSE(m.compact(c));
  ASSERT_EQ(c.turns.size(), 1u) << "the newest result must not be forgotten unread";
  EXPECT_EQ(c.turns.back().note, "c=3");
}

TEST(ContextManager, DropWithRoomKeepsTheNewestTurnsThatFit) {
  const ContextManager m(ContextPolicy::kDrop, /*budget=*/60, /*keep_turns=*/2, TemplateStyle::kSpecial);
  Conversation c = three_turns();
  EXPECT_TRUE(m.compact(c));
  ASSERT_EQ(c.turns.size(), 2u);
  EXPECT_EQ(c.turns.front().note, "b=2");
  EXPECT_LE(m.assemble(c).size(), 60u);
}

TEST(ContextManager, SummarizeLeavesTheNewestResultAsANote) {
  // The opening, the notes message and assistant_start fit; no turn does.
  const ContextManager m(ContextPolicy::kSummarize, /*budget=*/40, /*keep_turns=*/2, TemplateStyle::kSpecial);
  Conversation c = three_turns();
  EXPECT_TRUE(m.compact(c));
  EXPECT_TRUE(c.turns.empty());
  ASSERT_FALSE(c.notes.empty());
  EXPECT_EQ(c.notes.back(), "c=3") << "notes are forgotten oldest first";
  EXPECT_LE(m.assemble(c).size(), 40u);
}

// A newest note that does not fit with the opening, nor its whole turn:
// the episode ends (the note was erased with the older ones, and the
// agent's next call saw the bare opening, its result lost unseen).
TEST(ContextManager, SummarizeNeverErasesTheNewestResultsNote) {
  for (const int keep : {2, 0}) {
    const ContextManager m(ContextPolicy::kSummarize, /*budget=*/40, keep, TemplateStyle::kSpecial);
    Conversation c = three_turns();
    c.turns.back().note = std::string(58, 'r');
    c.turns.back().tokens = Tokens(40, 'x');
    EXPECT_FALSE(m.compact(c)) << "keep_turns " << keep;
    ASSERT_FALSE(c.notes.empty()) << "keep_turns " << keep;
    EXPECT_EQ(c.notes.back(), std::string(58, 'r')) << "keep_turns " << keep;
  }
}

// A newest note too long for the budget where the whole turn fits: the
// turn stays (a notes message can cost more than a short turn).
TEST(ContextManager, SummarizeKeepsTheWholeNewestTurnWhereOnlyItFits) {
  for (const int keep : {2, 1, 0}) {  // keep_turns = 0 forgets every turn first: the fallback still holds
    const ContextManager m(ContextPolicy::kSummarize, /*budget=*/40, keep, TemplateStyle::kSpecial);
    Conversation c = three_turns();
    c.turns.back().note = std::string(58, 'r');
    EXPECT_TRUE(m.compact(c)) << "keep_turns " << keep;
    ASSERT_EQ(c.turns.size(), 1u) << "keep_turns " << keep;
    EXPECT_EQ(c.turns.back().note, std::string(58, 'r'));
    EXPECT_LE(m.assemble(c).size(), 40u);
  }
}

TEST(ContextManager, SummarizeKeepsANewestTurnWithoutANote) {
  // The newest call failed (no note): forgetting it would hide the failure.
  const ContextManager m(ContextPolicy::kSummarize, /*budget=*/40, /*keep_turns=*/2, TemplateStyle::kSpecial);
  Conversation c = three_turns();
  c.turns.back().note.clear();
  c.turns.back().tokens = Tokens(40, 'x');  // alone with the opening, over the budget
  EXPECT_FALSE(m.compact(c));
  ASSERT_EQ(c.turns.size(), 1u);
  EXPECT_TRUE(c.turns.back().note.empty());
}

TEST(ContextManager, DropWithKeepTurnsZeroMayForgetEveryTurn) {
  const ContextManager m(ContextPolicy::kDrop, /*budget=*/25, /*keep_turns=*/0, TemplateStyle::kSpecial);
  Conversation c = three_turns();
  EXPECT_TRUE(m.compact(c));
  EXPECT_TRUE(c.turns.empty());
}

}  // namespace
}  // namespace forge
