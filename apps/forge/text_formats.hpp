// Small writers for the machine-readable outputs of the CLI: JSON strings and
// numbers (the shortest that read back exactly; non-finite numbers become
// null; invalid UTF-8 becomes U+FFFD) and CSV fields (RFC 4180 quoting).
#pragma once
#include <charconv>
#include <cmath>
#include <concepts>
#include <string>

#include "core/json_escape.hpp"

namespace forge {

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 if there is none.
inline size_t utf8_length(const std::string& s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = at(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  if (n == 0 || i + n > s.size()) return 0;
  if (at(1) < lo || at(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((at(k) >> 6) != 0x2) return 0;
  return n;
}

// A JSON string; bytes that are not valid UTF-8 (a byte-level tokenizer can
// produce them) become U+FFFD.
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_length(s, i);
    if (n == 0) out += "\\ufffd", ++i;
    else if (n > 1) out.append(s, i, n), i += n;
    else append_json_escaped(&out, static_cast<char>(c)), ++i;
  }
  return out + "\"";
}

// The shortest text that reads back as the same double (or float): six
// digits rounded exported logprobs by ~5e-6, a hundred times the
// engine/learner mismatch an analysis looks for.
template <std::floating_point T>
std::string json_number(T v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// A CSV field: UTF-8 text (bytes that are not valid UTF-8, and NUL, which
// CSV readers refuse, become U+FFFD, as in JSON), quoted when needed.
inline std::string csv_field(const std::string& raw) {
  std::string s;
  for (size_t i = 0; i < raw.size();) {
    const size_t n = raw[i] == '\0' ? 0 : utf8_length(raw, i);
    if (n == 0) s += "\xEF\xBF\xBD", ++i;
    else s.append(raw, i, n), i += n;
  }
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace forge
