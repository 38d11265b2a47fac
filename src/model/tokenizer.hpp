// Byte-level tokenizer: ids 0..255 are bytes; ids from 256 are named special
// tokens for the chat template. Text is encoded once, where it enters (a
// prompt, an observation); from then on forge keeps tokens, never re-encoding
// a history (token-in/token-out).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

class Tokenizer {
 public:
  static constexpr int32_t kVocabSize = 272;  // 256 bytes + specials, padded to 16

  std::vector<int32_t> encode(std::string_view text) const;
  // Bytes as text; special tokens as their names, e.g. "<|assistant|>".
  std::string decode(const std::vector<int32_t>& tokens) const;
  std::string token_name(int32_t id) const;
  static bool is_special(int32_t id) { return id >= 256; }
  // Id of a special token by name ("assistant" or "<|assistant|>"); -1 if none.
  int32_t special_id(std::string_view name) const;
};

}  // namespace forge
