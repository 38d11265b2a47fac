#include "core/log.hpp"

#include <chrono>
#include <cstdio>
#include <mutex>

namespace forge {
namespace {
std::mutex g_mu;
LogLevel g_level = LogLevel::kInfo;
std::string g_prefix;
const auto g_t0 = std::chrono::steady_clock::now();
}  // namespace

void set_log_level(LogLevel level) { g_level = level; }
void set_log_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_prefix = prefix;
}

void log_line(LogLevel level, const std::string& msg) {
  if (level < g_level) return;
  static const char* kTag[] = {"debug", "", "warning", "error"};
  const double t =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - g_t0).count();
  std::lock_guard<std::mutex> lock(g_mu);
  // Built with append, not "[" + std::string&&: GCC 12 warns (-Wrestrict, a
  // false positive) on that at -O2.
  std::string line = std::string("[").append(std::to_string(static_cast<int>(t * 10) / 10)).append(".");
  line += std::to_string(static_cast<int>(t * 10) % 10) + "s";
  if (!g_prefix.empty()) line += " " + g_prefix;
  line += "] ";
  if (*kTag[static_cast<int>(level)]) line += std::string(kTag[static_cast<int>(level)]) + ": ";
  line += msg;
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace forge
