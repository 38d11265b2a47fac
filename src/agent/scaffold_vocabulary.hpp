// The vocabulary the scaffold speaks with its policy: how its text becomes
// tokens, how a generation stops, and (for a pretrained model) the model's
// native chat format.
//
//   builtin()   the built-in policy: the byte tokenizer; scaffold markup names
//               its special tokens ("<|tool_call|>", "<|eot|>", ...); the
//               stop token is <|eot|>
//   pretrained  the model's BPE tokenizer (its added tokens are its markup,
//               e.g. "<|im_end|>") and its native chat format
//               (tokenizer/chat_format.hpp); the stop token is the format's
//               end of turn, and the model's EOS tokens stop a generation
//               too; call.special writes <tool_call>...</tool_call> as text
//
// Scaffold text is encoded in runs delimited by special tokens, so the
// tokens of a message do not depend on what was rendered before it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/chat_format.hpp"
#include "tokenizer/tokenizer.hpp"

namespace forge {

using Tokens = std::vector<int32_t>;

class ScaffoldVocabulary {
 public:
  static const ScaffoldVocabulary& builtin();
  static std::shared_ptr<const ScaffoldVocabulary> builtin_ptr();
  explicit ScaffoldVocabulary(std::shared_ptr<const ChatFormat> native);
  // A model's vocabulary: its native chat format's, or builtin() without one.
  static std::shared_ptr<const ScaffoldVocabulary> of(std::shared_ptr<const ChatFormat> native);

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatFormat* native() const { return native_.get(); }
  int32_t vocab_size() const { return tokenizer_->vocab_size(); }
  // The token that closes an assistant turn (the scaffold writes it after a
  // generation that ended otherwise), and every token a generation stops at.
  int32_t stop_token() const { return stops_.front(); }
  const std::vector<int32_t>& stop_tokens() const { return stops_; }
  bool is_stop(int32_t id) const;
  bool is_special(int32_t id) const { return tokenizer_->is_special(id); }

  // Markup (text with special tokens written by name) to tokens, and back.
  Tokens encode(const std::string& markup) const;
  std::string decode(const Tokens& tokens) const;
  // Parts of one text: markup (the scaffold's own: special-token names are
  // special tokens) or plain (another's text: special tokens' names stay
  // text; other added tokens become their ids, as encode_ordinary). The text
  // between two special tokens is encoded whole, across parts.
  struct Part {
    std::string text;
    bool markup = true;
  };
  Tokens encode(const std::vector<Part>& parts) const;
  // A prompt given as text, as Hugging Face's tokenizer(text) encodes it:
  // special tokens' text becomes them, and the tokenizer's text prefix
  // (Llama 3's BOS) goes first unless the text already starts with it.
  Tokens encode_prompt(const std::string& text) const;

  // call.special's delimiters, as markup.
  const std::string& tool_call_open() const { return call_open_; }
  const std::string& tool_call_close() const { return call_close_; }

 private:
  ScaffoldVocabulary();  // builtin
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const ChatFormat> native_;
  std::vector<int32_t> stops_;  // the end of turn first
  std::string call_open_, call_close_;
};

}  // namespace forge
