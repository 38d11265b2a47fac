#include "agent/tool_response_format.hpp"

#include "agent/tool_call_format.hpp"

namespace forge {

std::string render_observation(const ScaffoldStyle& style, const Observation& o, const ToolCall& written,
                               const ScaffoldVocabulary& vocab) {
  const std::string text = o.names_call ? o.text + ": " + action_markup(style.call, written, vocab) : o.text;
  switch (style.response) {
    case ResponseFormat::kPlain:
      return text;
    case ResponseFormat::kTagged:
      return o.is_error() ? text : "result: " + text;
    case ResponseFormat::kJson: {
      std::string body = text;
      if (o.is_error() && body.starts_with("error: ")) body = body.substr(7);
      std::string escaped;
      for (char c : body) {
        if (c == '"' || c == '\\') escaped += '\\';
        escaped += c;
      }
      return std::string("{\"") + (o.is_error() ? "error" : "result") + "\":\"" + escaped + "\"}";
    }
  }
  return text;
}

}  // namespace forge
