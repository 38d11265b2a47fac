// Byte-level tokenizer of the small built-in policy: ids 0..255 are bytes;
// ids from 256 are named special tokens for its chat templates (written
// "<|assistant|>" etc.). encode_ordinary() maps bytes only (for text a user
// or a tool wrote); encode() turns special-token text into its id, as the
// Tokenizer contract says (the gateway's text prompts, as a BPE model's).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace forge {

enum SpecialToken : int32_t {
  kPad = 256,
  kBos = 257,
  kSystem = 258,     // role markers open a message
  kUser = 259,
  kAssistant = 260,
  kTool = 261,       // a tool response
  kToolCallOpen = 262,
  kToolCallClose = 263,
  kEndOfTurn = 264,  // closes a message; stops generation
  kFirstReserved = 265,
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kVocabSize = 272;  // 256 bytes + specials, padded to 16

  int32_t vocab_size() const override { return kVocabSize; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode_ordinary(std::string_view text) const override;
  std::vector<std::pair<int32_t, std::string>> split_special(std::string_view text) const override;
  // Bytes as text; special tokens as their names, e.g. "<|assistant|>".
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string token_text(int32_t id) const override;
  // "assistant" or "<|assistant|>"; -1 if none.
  int32_t special_id(std::string_view name) const override;
  bool is_special(int32_t id) const override { return id >= 256; }
};

}  // namespace forge
