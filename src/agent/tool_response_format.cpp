#include "agent/tool_response_format.hpp"

#include "agent/tool_call_format.hpp"
#include "core/json_escape.hpp"

namespace forge {
using Part = ScaffoldVocabulary::Part;

std::vector<Part> observation_parts(const ScaffoldStyle& style, const Observation& o, const ToolCall& written,
                                    const ScaffoldVocabulary& vocab) {
  std::vector<Part> body = {{o.text, false}};
  if (o.names_call) {
    body.push_back({": ", false});
    for (Part& p : action_parts(style.call, written, vocab)) body.push_back(std::move(p));
  }
  switch (style.response) {
    case ResponseFormat::kPlain:
      return body;
    case ResponseFormat::kTagged:
      if (!o.is_error()) body.insert(body.begin(), {"result: ", false});
      return body;
    case ResponseFormat::kJson: {
      if (o.is_error() && body[0].text.starts_with("error: ")) body[0].text = body[0].text.substr(7);
      std::vector<Part> out = {{std::string("{\"") + (o.is_error() ? "error" : "result") + "\":\"", false}};
      for (const Part& p : body) {
        // A JSON string: quotes, backslashes and control characters (the
        // code domain's multi-line output) escaped.
        out.push_back({json_escape(p.text), p.markup});
      }
      out.push_back({"\"}", false});
      return out;
    }
  }
  return body;
}

std::string text_of(const std::vector<Part>& parts) {
  std::string s;
  for (const Part& p : parts) s += p.text;
  return s;
}

std::string render_observation(const ScaffoldStyle& style, const Observation& o, const ToolCall& written,
                               const ScaffoldVocabulary& vocab) {
  return text_of(observation_parts(style, o, written, vocab));
}

}  // namespace forge
