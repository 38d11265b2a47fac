// A pretrained model's native chat template, recognized from the Jinja
// source it ships (tokenizer_config.json or GGUF tokenizer.chat_template)
// and rendered in C++ exactly as transformers' apply_chat_template renders
// it, then tokenized (tests/reference checks the tokens on many
// conversations, tool calls included). Two families:
//
//   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n per message, any role
//            ("tool" included), and <|im_start|>assistant\n as the
//            generation prompt. A template that adds a default system
//            message when the first is not one (SmolLM2: "You are a helpful
//            AI assistant named SmolLM, trained by Hugging Face") is
//            recognized with that text.
//   llama3   BOS, then <|start_header_id|>ROLE<|end_header_id|>\n\n
//            TRIM(CONTENT)<|eot_id|> per message, and the assistant header
//            as the generation prompt (Llama 3's template).
//
// Tool calls are text of the assistant's content (<tool_call>{...}</tool_call>
// in forge's scaffold), tool results messages of role "tool". A template of
// neither family is an InputError naming its source: forge never renders a
// conversation in a format other than the model's.
//
// Encoding follows the template's text: the rendered string's runs between
// special tokens are encoded whole, so piecewise rendering (the scaffold
// appends message by message) gives the same tokens as the whole string.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace forge {

struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
};

class ChatFormat {
 public:
  enum class Family { kChatMl, kLlama3 };

  // InputError naming `source` for an unrecognized template, or a family
  // whose special tokens the tokenizer lacks. `end_ids`: the model's other
  // end-of-generation tokens (its EOS; generation_config.json's eos_token_id
  // list), which stop a generation too.
  // `text_prefix`: the ids the model's tokenizer writes before one text
  // (tokenizer(text); Llama 3's BOS), for prompts given as text.
  ChatFormat(const std::string& jinja, std::shared_ptr<const Tokenizer> tokenizer, const std::string& bos_text,
             const std::string& source, const std::vector<int32_t>& end_ids = {},
             std::vector<int32_t> text_prefix = {});

  Family family() const { return family_; }
  const std::string& default_system() const { return default_system_; }
  // The text of a whole conversation, as apply_chat_template(tokenize=False).
  std::string render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  // Its tokens, as apply_chat_template(tokenize=True).
  std::vector<int32_t> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  // Pieces for a scaffold that appends: the text that opens a conversation
  // (BOS, the default system message where the first message is not a
  // system one), one message, the generation prompt, and the text that
  // closes an assistant turn the model ended with end_of_turn().
  std::string begin_text(bool first_is_system) const;
  std::string message_text(const ChatMessage& m) const;  // prefix + content + suffix
  std::string message_prefix(const std::string& role) const;
  std::string message_content(const std::string& content) const;  // as the template writes it (Llama 3 trims)
  std::string message_suffix() const;
  std::string generation_prompt() const;
  std::string assistant_close() const;  // after the end-of-turn token: "\n" (chatml) or ""
  int32_t end_of_turn() const { return end_of_turn_; }  // <|im_end|> or <|eot_id|>: the stop token
  // end_of_turn() first, then the model's other end-of-generation tokens
  // (Llama 3's <|end_of_text|>, Qwen2's <|endoftext|>): a generation ends at any.
  const std::vector<int32_t>& stop_tokens() const { return stop_tokens_; }
  std::vector<int32_t> encode(const std::string& text) const { return tokenizer_->encode(text); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::vector<int32_t>& text_prefix() const { return text_prefix_; }

 private:
  Family family_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::string bos_;
  std::vector<int32_t> text_prefix_;
  std::string default_system_;
  bool has_default_system_ = false;
  int32_t end_of_turn_ = -1;
  std::vector<int32_t> stop_tokens_;
};

}  // namespace forge
