// Small string helpers shared across the tree.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

namespace forge {

// "a, b, c" for join({a, b, c}, ", "); "" for an empty list.
inline std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// The items of a `sep`-separated list, trimmed of spaces and tabs, empty
// items dropped: "a, b,,c " -> {a, b, c}.
inline std::vector<std::string> split_list(const std::string& s, char sep = ',') {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= s.size()) {
    size_t end = s.find(sep, begin);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(begin, end - begin);
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
    begin = end + 1;
  }
  return out;
}

// v in printf's format `f`, one double conversion whose width is `%*`
// ("%*.3f"), at `width` characters; "-" there for NaN (a metric without
// tokens or episodes to average), as the progress line and forge inspect
// show it.
inline std::string number_or_dash(double v, const char* f, int width = 0) {
  char c[64];
  if (v != v) std::snprintf(c, sizeof c, "%*s", width, "-");
  else std::snprintf(c, sizeof c, f, width, v);
  return c;
}

}  // namespace forge
