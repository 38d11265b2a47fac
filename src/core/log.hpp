// Progress and diagnostics on stderr, one line each, prefixed with the elapsed
// time and (when set) the process's role and rank, so that interleaved output
// of many ranks stays readable.
#pragma once
#include <string>

namespace forge {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_log_level(LogLevel level);
void set_log_prefix(const std::string& prefix);  // e.g. "learner 0"
void log_line(LogLevel level, const std::string& msg);

inline void log_info(const std::string& msg) { log_line(LogLevel::kInfo, msg); }
inline void log_warn(const std::string& msg) { log_line(LogLevel::kWarn, msg); }
inline void log_error(const std::string& msg) { log_line(LogLevel::kError, msg); }
inline void log_debug(const std::string& msg) { log_line(LogLevel::kDebug, msg); }

}  // namespace forge
