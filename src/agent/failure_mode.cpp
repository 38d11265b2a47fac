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
    case FailureMode::kAbandoned: return "abandoned";
  }
  return "?";
}

namespace {

// The signal that opens each call's record (the environment's observation):
// whatever else a call records (recovered, unsafe) follows its opening one.
bool opens_call(std::string_view k) {
  return k == signal::kUsefulCall || k == signal::kValidCall || k == signal::kToolError ||
         k == signal::kMalformedCall || k == signal::kUnknownTool || k == signal::kBadArgs ||
         k == signal::kOverBudget;
}

}  // namespace

std::optional<FailureMode> classify_failure(const Trajectory& t) {
  if (t.success) return std::nullopt;
  if (t.abandoned) return FailureMode::kAbandoned;
  bool malformed = false, bad_args = false, off_path = false;
  // Each tool error or timeout must be closed by the next call recovering
  // (its identical retry succeeding); a run of failed calls counts as retries
  // of the first. `open`: the last call failed; `retrying`: the call after a
  // failure, closed by its "recovered"; `unrecovered`: one was not closed.
  bool open = false, retrying = false, unrecovered = false;
  int useful = 0;
  for (const ProcessSignal& s : t.signals) {  // in the order the episode emitted them
    const std::string_view k = s.kind;
    malformed = malformed || k == signal::kMalformedCall || k == signal::kUnknownTool;
    bad_args = bad_args || k == signal::kBadArgs;
    off_path = off_path || k == signal::kValidCall || k == signal::kOverBudget;
    useful += k == signal::kUsefulCall;
    if (opens_call(k)) {
      unrecovered = unrecovered || retrying;
      retrying = open && k != signal::kToolError;
      open = k == signal::kToolError;
    }
    if (k == signal::kRecovered) retrying = false;
  }
  unrecovered = unrecovered || open || retrying;
  const int needed_calls = t.needed_calls();
  if (malformed) return FailureMode::kMalformed;
  if (bad_args) return FailureMode::kBadArgs;
  if (off_path) return FailureMode::kOffPath;
  if (unrecovered && useful < needed_calls) return FailureMode::kUnrecoveredError;
  if (t.end_reason != "answer") return FailureMode::kNoAnswer;
  if (useful < needed_calls) return FailureMode::kStoppedShort;
  return FailureMode::kWrongAnswer;
}

}  // namespace forge
