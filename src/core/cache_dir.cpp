#include "core/cache_dir.hpp"

#include <cstdlib>

namespace forge {

std::string cache_dir() {
  if (const char* c = std::getenv("FORGE_CACHE"); c && *c) return c;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/forge";
}

std::string expand_cache_path(const std::string& path) {
  const std::string prefix = "$FORGE_CACHE";
  if (path == prefix) return cache_dir();
  if (path.rfind(prefix + "/", 0) == 0) return cache_dir() + path.substr(prefix.size());
  return path;
}

}  // namespace forge
