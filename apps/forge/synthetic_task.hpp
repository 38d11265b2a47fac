// The synthetic supervised task of `forge sft`: chat conversations of a few
// turns, each a string-manipulation request ("reverse: lemon" -> "nomel",
// "sort: lemon" -> "elmno") that a small policy learns in minutes on a CPU.
//
// Template: <|bos|> then per turn <|user|> request <|eot|> <|assistant|>
// answer <|eot|>. Each assistant turn is one sample whose context is the whole
// conversation before it (so the turns of a conversation share prefixes and
// merge into one tree), trainable on the answer and its <|eot|>.
#pragma once
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "tree/prefix_tree.hpp"

namespace forge {

struct SyntheticQuery {
  std::string request;  // e.g. "reverse: lemon"
  std::string answer;   // e.g. "nomel"
};

// The words' lengths: kMinWordLetters to kMaxWordLetters letters a-z.
constexpr int kMinWordLetters = 3, kMaxWordLetters = 7;

// task: "reverse", "sort" or "mix" (either, at random).
SyntheticQuery make_query(Rng& rng, const std::string& task);
// Tokens of the longest conversation of `turns` turns (its last sample): a
// packed bin must hold it.
int longest_conversation_tokens(int turns);
// The samples of one conversation of `turns` turns.
std::vector<Sample> make_conversation(Rng& rng, const std::string& task, int turns);
// A single-turn prompt, ending with <|assistant|>, for generation.
std::vector<int32_t> single_turn_prompt(const std::string& request);

}  // namespace forge
