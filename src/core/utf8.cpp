#include "core/utf8.hpp"

namespace forge {
namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Appends s as valid UTF-8; keep(c) decides whether a one-byte (ASCII)
// character stays; with `c1`, a C1 control character (U+0080 to U+009F,
// CSI among them) stays too, else it becomes one U+FFFD.
template <class KeepAscii>
std::string sanitize(std::string_view s, KeepAscii keep, bool c1) {
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
      out += kReplacement;
      i += 2;
      continue;
    }
    if (ok && n == 3) ok = !(c == 0xE0 && byte(i + 1) < 0xA0) && !(c == 0xED && byte(i + 1) >= 0xA0);
    if (ok && n == 4) ok = !(c == 0xF0 && byte(i + 1) < 0x90) && !(c == 0xF4 && byte(i + 1) >= 0x90) && c <= 0xF4;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

}  // namespace

std::string valid_utf8(std::string_view s) {
  return sanitize(s, [](unsigned char) { return true; }, true);
}

std::string printable_text(std::string_view s) {
  return sanitize(s, [](unsigned char c) { return c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7F); }, false);
}

std::string escape_controls(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7F) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += "\\x";
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    } else {
      out.push_back(c);
    }
  }
  return out;
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
