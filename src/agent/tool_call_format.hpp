// Tool-call formats: how the model writes an action, and parsing its
// generated tokens back (robust: garbage gives an error description, never
// an exception). An action is a tool call or the final answer, which is the
// pseudo-tool "answer" in every format:
//
//   call.paren    calc(17*23)                          answer(428)
//   call.json     {"tool":"calc","args":"17*23"}       {"answer":"428"}
//   call.xml      <calc>17*23</calc>                   <answer>428</answer>
//   call.special  <|tool_call|>calc 17*23<|/tool_call|> <|tool_call|>answer 428<|/tool_call|>
//                 (a pretrained model: <tool_call>calc 17*23</tool_call> as text)
//
// Tool names are identifiers ([A-Za-z_][A-Za-z0-9_]*, at most 32 bytes).
// JSON strings are escaped as JSON's (core/json_escape.hpp: " \ and control
// characters; every JSON escape is read: \/ \b \f \n \r \t and \uXXXX,
// surrogate pairs joined, a lone surrogate or a raw control character
// invalid); JSON values
// may also be bare numbers (JSON's grammar: "-", "1e" or "01" are invalid). XML bodies escape & < > as &amp; &lt; &gt;.
// Surrounding whitespace is ignored, and one trailing stop token (<|eot|>,
// or the model's end of turn) is stripped; any other special token makes the
// action invalid. Actions are rendered as markup and encoded through the
// policy's vocabulary (scaffold_vocabulary.hpp); generated tokens are decoded
// through it.
// Paren args run from the first '(' to the last ')' and may hold
// parentheses, but a ')' closing the call's '(' (or past it) followed by
// `name(`, whitespace or ; , . between, is a second action in one turn,
// invalid as JSON's text after its '}' is (so is an args text holding a
// stray ')' then such a call: `print(")")` then a line `f(1)`).
// parse(render(c)) == c for every call whose name is an identifier and
// whose args have no surrounding whitespace (paren: and no such second call;
// special with a pretrained model's vocabulary, whose delimiters are text
// such as <tool_call>: and args that do not spell a delimiter, which reads
// as a second action).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "agent/scaffold_vocabulary.hpp"
#include "env/perturbation.hpp"
#include "env/tool_call.hpp"

namespace forge {

struct ParsedAction {
  enum class Kind { kCall, kAnswer, kInvalid };
  Kind kind = Kind::kInvalid;
  ToolCall call;       // kCall (tool as written, i.e. the displayed name)
  std::string answer;  // kAnswer
  std::string error;   // kInvalid: what was wrong
};

// An action as markup, as parts, and as tokens, without the closing stop
// token. A call whose tool is kAnswerTool renders the final answer with
// call.args as its text. In the parts and tokens, only call.special's
// delimiters are markup: the tool name, its arguments and an answer are the
// agent's text, so a special token's name in them stays text.
std::string action_markup(CallFormat format, const ToolCall& call,
                          const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());
std::vector<ScaffoldVocabulary::Part> action_parts(CallFormat format, const ToolCall& call,
                                                   const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());
std::vector<int32_t> render_action(CallFormat format, const ToolCall& call,
                                   const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());
ParsedAction parse_action(CallFormat format, const std::vector<int32_t>& generated,
                          const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());

}  // namespace forge
