#include "agent/tool_response_format.hpp"

namespace forge {

std::string render_observation(ResponseFormat format, const Observation& o) {
  switch (format) {
    case ResponseFormat::kPlain:
      return o.text;
    case ResponseFormat::kTagged:
      return o.is_error() ? o.text : "result: " + o.text;
    case ResponseFormat::kJson: {
      std::string body = o.text;
      if (o.is_error() && body.starts_with("error: ")) body = body.substr(7);
      std::string escaped;
      for (char c : body) {
        if (c == '"' || c == '\\') escaped += '\\';
        escaped += c;
      }
      return std::string("{\"") + (o.is_error() ? "error" : "result") + "\":\"" + escaped + "\"}";
    }
  }
  return o.text;
}

}  // namespace forge
