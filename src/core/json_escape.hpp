// The inside of a JSON string (RFC 8259, section 7): '"' and '\' escaped by a
// backslash; newline, tab and carriage return as \n \t \r; every other
// control character (U+0000 to U+001F) and DEL as \u00XX. Other bytes pass
// as they are: what invalid UTF-8 becomes is the caller's choice.
#pragma once
#include <cstdio>
#include <string>
#include <string_view>

namespace forge {

inline void append_json_escaped(std::string* out, char ch) {
  const unsigned char c = static_cast<unsigned char>(ch);
  if (c == '"' || c == '\\') *out += {'\\', ch};
  else if (c == '\n') *out += "\\n";
  else if (c == '\t') *out += "\\t";
  else if (c == '\r') *out += "\\r";
  else if (c < 0x20 || c == 0x7F) {
    char u[8];
    std::snprintf(u, sizeof u, "\\u%04x", static_cast<unsigned>(c));
    *out += u;
  } else *out += ch;
}

inline std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) append_json_escaped(&out, c);
  return out;
}

}  // namespace forge
