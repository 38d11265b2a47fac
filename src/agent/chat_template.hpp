// Chat templates: how roles and turns become tokens. The scaffold keeps the
// conversation as tokens and appends; only new text (prompts, observations)
// is encoded, once. A context is
//
//   opening(system, user) assistant_start()
//     [generated assistant_end(generated) tool_message(obs) assistant_start()]*
//
// and the model generates after assistant_start() until <|eot|> (the stop
// token in every template).
//
//   template.special       <|bos|><|system|>S<|eot|><|user|>U<|eot|><|assistant|>
//                          ...<|eot|><|tool|>O<|eot|><|assistant|>
//   template.text          <|bos|>System: S\nUser: U\nAssistant: ...<|eot|>\nTool: O\nAssistant:
//                          (role markers as text; "Assistant: " ends with a space)
//   template.tool_as_user  as special, but tool results are user turns "<|user|>tool: O<|eot|>"
//
// An empty system text leaves the system message out.
#pragma once
#include <cstdint>
#include <vector>

#include "env/perturbation.hpp"

namespace forge {

using Tokens = std::vector<int32_t>;

class ChatTemplate {
 public:
  explicit ChatTemplate(TemplateStyle style) : style_(style) {}

  Tokens opening(const Tokens& system, const Tokens& user) const;
  Tokens user_message(const Tokens& text) const;
  Tokens tool_message(const Tokens& text) const;
  Tokens assistant_start() const;
  // Closes an assistant turn: <|eot|> unless the generation ended with it,
  // then the template's separator.
  Tokens assistant_end(const Tokens& generated) const;

 private:
  TemplateStyle style_;
};

}  // namespace forge
