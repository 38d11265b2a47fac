#include "agent/prompt_text.hpp"

#include "agent/tool_call_format.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace forge {
namespace {

void append(Tokens& out, const Tokens& more) { out.insert(out.end(), more.begin(), more.end()); }
void append(Tokens& out, const std::string& s) { append(out, ByteTokenizer().encode(s)); }

}  // namespace

PromptText render_prompt(const Task& task, const ScaffoldStyle& style) {
  std::string defs;
  for (const ToolSpec& t : task.tools) {
    defs += (defs.empty() ? "" : "; ") + displayed_tool_name(style.tools, t.name) + ": " + t.params;
    if (style.tools == ToolsStyle::kLong) defs += " (" + t.description + ")";
  }
  Tokens example;
  if (!task.tools.empty())
    example = render_action(style.call, {displayed_tool_name(style.tools, task.tools[0].name),
                                         task.tools[0].example});
  const Tokens answer = render_action(style.call, {kAnswerTool, "x"});

  PromptText p;
  Tokens tools_line;
  append(tools_line, "Tools: " + defs + ". Use: ");
  append(tools_line, example);
  append(tools_line, " ");
  append(tools_line, answer);
  switch (style.system) {
    case SystemStyle::kTerse:
      p.system = tools_line;
      break;
    case SystemStyle::kRole:
      append(p.system, "You are an agent. Tools: " + defs + ". Call ");
      append(p.system, example);
      append(p.system, ", end ");
      append(p.system, answer);
      break;
    case SystemStyle::kNone:
      p.user = tools_line;
      p.user.push_back('\n');
      break;
  }
  append(p.user, task.request);
  return p;
}

}  // namespace forge
