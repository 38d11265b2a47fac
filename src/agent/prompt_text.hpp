// The system prompt and the user turn of an episode: the task's tool
// definitions and an example call (both in the episode's tool-definition
// style and call format), and the request. Markup (scaffold_vocabulary.hpp),
// because an example in call.special may hold special tokens.
//
//   tools.short   calc: a op b
//   tools.long    calc: a op b (integers, op is + - or *)
//   tools.alias   math: a op b                         (displayed_tool_name)
//
//   system.terse  "Tools: <defs>. Use: <example> <answer example>"
//   system.role   "You are an agent. Tools: <defs>. Call <example>, end <answer example>"
//   system.none   no system message; the user turn starts with
//                 "Tools: <defs>. Use: <example> <answer example>\n"
//
// Several tools are joined with "; ". The example calls the first tool with
// its example arguments; the answer example is answer "x".
#pragma once
#include "agent/chat_template.hpp"
#include "env/environment.hpp"
#include "env/perturbation.hpp"

namespace forge {

struct PromptText {
  std::string system;  // empty for system.none
  std::string user;
};

PromptText render_prompt(const Task& task, const ScaffoldStyle& style,
                         const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());

}  // namespace forge
