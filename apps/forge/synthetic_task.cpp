#include "synthetic_task.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace forge {

SyntheticQuery make_query(Rng& rng, const std::string& task) {
  std::string kind = task;
  if (task == "mix") kind = rng.below(2) ? "reverse" : "sort";
  if (kind != "reverse" && kind != "sort")
    throw InputError("sft.task: '" + task + "' is not one of reverse, sort, mix");
  const int n = kMinWordLetters + static_cast<int>(rng.below(kMaxWordLetters - kMinWordLetters + 1));
  std::string word;
  for (int i = 0; i < n; ++i) word += static_cast<char>('a' + rng.below(26));
  std::string answer = word;
  if (kind == "reverse")
    std::reverse(answer.begin(), answer.end());
  else
    std::sort(answer.begin(), answer.end());
  return {kind + ": " + word, answer};
}

namespace {
void append(std::vector<int32_t>& out, const std::vector<int32_t>& more) {
  out.insert(out.end(), more.begin(), more.end());
}
}  // namespace

int longest_conversation_tokens(int turns) {
  // <|user|> "reverse: " word <|eot|> <|assistant|> answer <|eot|>; "reverse"
  // is the longer kind, the answer as long as the word.
  const int turn = 1 + 9 + kMaxWordLetters + 1 + 1 + kMaxWordLetters + 1;
  return 1 + turns * turn;
}

std::vector<int32_t> single_turn_prompt(const std::string& request) {
  ByteTokenizer tok;
  std::vector<int32_t> p = {kBos, kUser};
  append(p, tok.encode_ordinary(request));
  p.push_back(kEndOfTurn);
  p.push_back(kAssistant);
  return p;
}

std::vector<Sample> make_conversation(Rng& rng, const std::string& task, int turns) {
  ByteTokenizer tok;
  std::vector<Sample> samples;
  std::vector<int32_t> history = {kBos};
  for (int t = 0; t < turns; ++t) {
    const SyntheticQuery q = make_query(rng, task);
    history.push_back(kUser);
    append(history, tok.encode_ordinary(q.request));
    history.push_back(kEndOfTurn);
    history.push_back(kAssistant);
    Sample s;
    s.tokens = history;
    s.trainable.assign(history.size(), 0);
    std::vector<int32_t> answer = tok.encode_ordinary(q.answer);
    answer.push_back(kEndOfTurn);
    for (int32_t a : answer) {
      s.tokens.push_back(a);
      s.trainable.push_back(1);
    }
    history = s.tokens;
    samples.push_back(std::move(s));
  }
  return samples;
}

}  // namespace forge
