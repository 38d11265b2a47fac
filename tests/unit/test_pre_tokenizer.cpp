// The pre-tokenizers' number pieces (tokenizer/pre_tokenizer.hpp): llama3's
// \p{N}{1,3} cuts a run of digits into threes from its start, qwen2's \p{N}
// into single digits, gpt2's ' ?\p{N}+' keeps it whole; on runs long enough
// that a match scanning the whole run each time (quadratic: 22 s for 100k
// digits) would show in the suite's time. Exactness against Hugging Face
// tokenizers on every code point is tests/reference/test_hf_tokenizer.py's.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/pre_tokenizer.hpp"

namespace forge {
namespace {

TEST(PreTokenizer, DigitRunsAreCutFromTheirStart) {
  const size_t n = 200000;
  const std::string text = "x" + std::string(n, '7') + "y";
  for (const auto& [kind, width] : {std::pair{PreTokenizer::kLlama3, size_t{3}}, {PreTokenizer::kQwen2, size_t{1}}}) {
    const auto pieces = pre_tokenize(kind, text);
    ASSERT_EQ(pieces.size(), 2 + (n + width - 1) / width) << to_string(kind);
    EXPECT_EQ(pieces.front(), (std::pair<uint32_t, uint32_t>{0, 1}));
    for (size_t k = 1; k + 1 < pieces.size(); ++k) {
      const uint32_t begin = static_cast<uint32_t>(1 + (k - 1) * width);
      ASSERT_EQ(pieces[k], (std::pair<uint32_t, uint32_t>{begin, static_cast<uint32_t>(std::min(begin + width, 1 + n))}))
          << to_string(kind) << " piece " << k;
    }
    EXPECT_EQ(pieces.back(), (std::pair<uint32_t, uint32_t>{static_cast<uint32_t>(n + 1), static_cast<uint32_t>(n + 2)}));
  }
  const auto whole = pre_tokenize(PreTokenizer::kGpt2, text);
  ASSERT_EQ(whole.size(), 3u);
  EXPECT_EQ(whole[1], (std::pair<uint32_t, uint32_t>{1, static_cast<uint32_t>(n + 1)}));
}

}  // namespace
}  // namespace forge
