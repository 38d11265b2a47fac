// Chat templates: how roles and turns become tokens. The scaffold keeps the
// conversation as tokens and appends; only new text (prompts, observations)
// is encoded, once, through the policy's vocabulary (scaffold_vocabulary.hpp;
// texts are markup: special tokens written by name). A context is
//
//   opening(system, user) assistant_start()
//     [generated assistant_end(generated) tool_message(obs) assistant_start()]*
//
// and the model generates after assistant_start() until the vocabulary's
// stop token. With the built-in policy's byte vocabulary:
//
//   template.special       <|bos|><|system|>S<|eot|><|user|>U<|eot|><|assistant|>
//                          ...<|eot|><|tool|>O<|eot|><|assistant|>
//   template.text          <|bos|>System: S\nUser: U\nAssistant: ...<|eot|>\nTool: O\nAssistant:
//                          (role markers as text; "Assistant: " ends with a space)
//   template.tool_as_user  as special, but tool results are user turns "<|user|>tool: O<|eot|>"
//   template.tool_as_system  as special, but tool results are system turns "<|system|>tool: O<|eot|>"
//                          (as scaffolds that report a command's output as a system message)
//
// With a pretrained model (a native chat format), template.special is the
// model's own template (ChatML or Llama 3, exactly as its Jinja source
// renders), template.tool_as_user and template.tool_as_system the same with
// tool results as user or system turns "tool: O", and template.text the role
// markers as text closed by the model's end-of-turn token.
//
// Contents are markup (the scaffold's own texts: special-token names are
// special tokens) unless `markup` is false (an agent's text through the
// gateway: special tokens' names stay text, other added tokens become
// their ids), or parts of each kind (a tool's result:
// agent/tool_response_format.hpp). No system text (nullopt) leaves the
// system message out (a native template may print its default one); an
// empty one is an empty system turn, as a chat template renders a request's
// {"role": "system", "content": ""}.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/scaffold_vocabulary.hpp"
#include "env/perturbation.hpp"

namespace forge {

class ChatTemplate {
 public:
  explicit ChatTemplate(TemplateStyle style, const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin())
      : style_(style), vocab_(vocab) {}

  Tokens opening(const std::optional<std::string>& system, const std::string& user, bool system_markup = true,
                 bool user_markup = true) const;
  Tokens user_message(const std::string& text, bool markup = true) const;
  Tokens tool_message(const std::string& text, bool markup = true) const;
  Tokens tool_message(const std::vector<ScaffoldVocabulary::Part>& parts) const;
  Tokens assistant_start() const;
  // Closes an assistant turn: the stop token unless the generation ended
  // with it, then the template's separator.
  Tokens assistant_end(const Tokens& generated) const;

 private:
  // prefix + content + suffix, the text between special tokens encoded whole.
  Tokens message(const std::string& role, const std::vector<ScaffoldVocabulary::Part>& content) const;
  TemplateStyle style_;
  const ScaffoldVocabulary& vocab_;
};

}  // namespace forge
