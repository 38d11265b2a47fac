// Small string helpers shared across the tree.
#pragma once
#include <string>
#include <vector>

namespace forge {

// "a, b, c" for join({a, b, c}, ", "); "" for an empty list.
inline std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

}  // namespace forge
