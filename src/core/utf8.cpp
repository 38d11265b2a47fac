#include "core/utf8.hpp"

namespace forge {
namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Appends s as valid UTF-8; keep(c) decides whether a one-byte (ASCII)
// character stays; with `c1`, a C1 control character (U+0080 to U+009F,
// CSI among them) stays too. What does not stay goes through
// replace(out, bytes): bytes of an invalid sequence one at a time, a
// refused character whole.
template <class KeepAscii, class Replace>
std::string sanitize(std::string_view s, KeepAscii keep, bool c1, Replace replace) {
  std::string out;
  out.reserve(s.size());
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = byte(i);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (byte(i + k) & 0xC0) == 0x80;
    if (ok && n == 1) ok = keep(c);
    if (ok && n == 2) ok = c >= 0xC2;  // overlong
    if (ok && n == 2 && !c1 && c == 0xC2 && byte(i + 1) < 0xA0) {
      replace(out, s.substr(i, 2));
      i += 2;
      continue;
    }
    if (ok && n == 3) ok = !(c == 0xE0 && byte(i + 1) < 0xA0) && !(c == 0xED && byte(i + 1) >= 0xA0);
    if (ok && n == 4) ok = !(c == 0xF0 && byte(i + 1) < 0x90) && !(c == 0xF4 && byte(i + 1) >= 0x90) && c <= 0xF4;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      replace(out, s.substr(i, 1));
      ++i;
    }
  }
  return out;
}

void append_replacement(std::string& out, std::string_view) { out += kReplacement; }

bool printable_ascii(unsigned char c) { return c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7F); }

}  // namespace

std::string valid_utf8(std::string_view s) {
  return sanitize(s, [](unsigned char) { return true; }, true, append_replacement);
}

std::string printable_text(std::string_view s) { return sanitize(s, printable_ascii, false, append_replacement); }

std::string escape_controls(std::string_view s) {
  return sanitize(s, printable_ascii, false, [](std::string& out, std::string_view bytes) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (const char c : bytes) {
      const auto u = static_cast<unsigned char>(c);
      out += "\\x";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  });
}

size_t utf8_char_start(std::string_view s, size_t i) {
  for (size_t back = 0; back < 3 && i > 0 && i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
       ++back)
    --i;
  return i;
}

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace forge
