#include "agent/failure_mode.hpp"

#include <string_view>

#include "env/process_signals.hpp"

namespace forge {

const char* to_string(FailureMode m) {
  switch (m) {
    case FailureMode::kMalformed: return "malformed";
    case FailureMode::kBadArgs: return "bad_args";
    case FailureMode::kOffPath: return "off_path";
    case FailureMode::kUnrecoveredError: return "unrecovered_error";
    case FailureMode::kNoAnswer: return "no_answer";
    case FailureMode::kStoppedShort: return "stopped_short";
    case FailureMode::kWrongAnswer: return "wrong_answer";
  }
  return "?";
}

std::optional<FailureMode> classify_failure(const Trajectory& t) {
  if (t.success) return std::nullopt;
  bool malformed = false, bad_args = false, off_path = false;
  bool error_pending = false;  // a tool error or timeout no successful retry followed
  int useful = 0;
  for (const ProcessSignal& s : t.signals) {  // in the order the episode emitted them
    const std::string_view k = s.kind;
    malformed = malformed || k == signal::kMalformedCall || k == signal::kUnknownTool;
    bad_args = bad_args || k == signal::kBadArgs;
    off_path = off_path || k == signal::kValidCall || k == signal::kOverBudget;
    useful += k == signal::kUsefulCall;
    if (k == signal::kToolError) error_pending = true;
    if (k == signal::kRecovered) error_pending = false;
  }
  const int needed_calls = t.needed_calls();
  if (malformed) return FailureMode::kMalformed;
  if (bad_args) return FailureMode::kBadArgs;
  if (off_path) return FailureMode::kOffPath;
  if (error_pending && useful < needed_calls) return FailureMode::kUnrecoveredError;
  if (t.end_reason != "answer") return FailureMode::kNoAnswer;
  if (useful < needed_calls) return FailureMode::kStoppedShort;
  return FailureMode::kWrongAnswer;
}

}  // namespace forge
