// Tools as the environments see them, independent of how a scaffold renders
// or parses them (src/agent/tool_call_format.hpp does that).
//
// A ToolCall names a tool by its canonical name and carries its arguments as
// one string, which the tool parses itself ("17*23", "Kavo,works_at"): a
// format only has to move one string, and "wrong arguments" is the tool's
// own verdict. The pseudo-tool "answer" is reserved for the final answer.
#pragma once
#include <string>

namespace forge {

inline constexpr const char* kAnswerTool = "answer";

struct ToolCall {
  std::string tool;  // canonical name, e.g. "calc"
  std::string args;  // e.g. "17*23"
  bool operator==(const ToolCall&) const = default;
};

// "name(args)": the call in the paren format, as the scaffold's notes name it.
inline std::string paren_form(const ToolCall& call) { return call.tool + "(" + call.args + ")"; }

// A tool an environment offers in a task.
struct ToolSpec {
  std::string name;         // canonical name
  std::string params;       // argument shape shown to the agent, e.g. "a op b"
  std::string description;  // one short sentence
  std::string example;      // example arguments, e.g. "3+4"
};

}  // namespace forge
