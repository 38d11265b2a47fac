// The tokenizer interface: text to token ids and back. Text is encoded once,
// where it enters (a prompt, an observation); from then on forge keeps
// tokens and never re-encodes a history (token-in/token-out).
//
// Two implementations: ByteTokenizer (bytes plus a few named specials, the
// small built-in policy's) and BpeTokenizer (byte-level BPE as GPT-2,
// Llama 3, Qwen2 and SmolLM2 use it, loaded with a pretrained model).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace forge {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int32_t vocab_size() const = 0;
  // Text to ids; special-token text (e.g. "<|im_end|>") becomes its id
  // where the tokenizer has added tokens.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Text to ids where special-token text stays text (for untrusted text);
  // an added token that is not special still becomes its id.
  virtual std::vector<int32_t> encode_ordinary(std::string_view text) const = 0;
  // Text cut at the special tokens written in it: (id, "") for a special
  // token (any added token), (-1, text) for the text between (in order).
  // encode(text) is the added tokens with encode_ordinary of each piece.
  virtual std::vector<std::pair<int32_t, std::string>> split_special(std::string_view text) const = 0;
  // Ids to text (bytes; may end inside a UTF-8 sequence when the ids do).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // One token as text for display (specials by name).
  virtual std::string token_text(int32_t id) const = 0;
  // Id of a special token by its text (e.g. "<|im_end|>"); -1 if none.
  virtual int32_t special_id(std::string_view text) const = 0;
  virtual bool is_special(int32_t id) const = 0;
};

}  // namespace forge
