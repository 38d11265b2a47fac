#include "agent/prompt_text.hpp"

#include "agent/tool_call_format.hpp"

namespace forge {

PromptText render_prompt(const Task& task, const ScaffoldStyle& style, const ScaffoldVocabulary& vocab) {
  std::string defs;
  for (const ToolSpec& t : task.tools) {
    defs += (defs.empty() ? "" : "; ") + displayed_tool_name(style.tools, t.name) + ": " + t.params;
    if (style.tools == ToolsStyle::kLong) defs += " (" + t.description + ")";
  }
  std::string example;
  if (!task.tools.empty())
    example = action_markup(style.call, {displayed_tool_name(style.tools, task.tools[0].name), task.tools[0].example},
                            vocab);
  const std::string answer = action_markup(style.call, {kAnswerTool, "x"}, vocab);

  PromptText p;
  const std::string tools_line = "Tools: " + defs + ". Use: " + example + " " + answer;
  switch (style.system) {
    case SystemStyle::kTerse: p.system = tools_line; break;
    case SystemStyle::kRole: p.system = "You are an agent. Tools: " + defs + ". Call " + example + ", end " + answer; break;
    case SystemStyle::kNone: p.user = tools_line + "\n"; break;
  }
  p.user += task.request;
  return p;
}

}  // namespace forge
