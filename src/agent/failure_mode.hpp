// Why a failed agent episode failed: one cause per episode, read from what
// the episode recorded (its process signals, its tool errors and retries,
// how it ended and the ideal solution's length), the first that applies:
//
//   malformed          a generation parsed as neither a call nor an answer, or
//                      named a tool the task does not offer (format)
//   bad_args           a tool rejected its arguments: an entity or relation
//                      that does not exist (often a miscopied name), or an
//                      expression that is not "a op b"
//   off_path           a valid call that did not advance the task: an
//                      operation not in the expression (a miscopied number),
//                      a relation off the question's path, a repeated call,
//                      a call over the budget
//   unrecovered_error  a tool error or timeout that no successful retry
//                      followed, the task's calls left unfinished, with
//                      none of the above
//   no_answer          a budget (turns, tokens, context) or the engine ended
//                      the episode before an answer, with none of the above
//   stopped_short      answered after fewer useful calls than the task needs
//   wrong_answer       made every call the task needs, answered wrongly
//
// The first three are the policy's writing of a call (what it copies from
// the task or a tool message), the next three its decisions (retry, stop,
// answer), the last its reading of the final tool result. `forge eval`
// reports the share of episodes in each (they sum to 1 - success).
#pragma once
#include <array>
#include <optional>

#include "episode/trajectory.hpp"

namespace forge {

enum class FailureMode { kMalformed, kBadArgs, kOffPath, kUnrecoveredError, kNoAnswer, kStoppedShort, kWrongAnswer };
inline constexpr int kFailureModes = 7;
inline constexpr std::array<FailureMode, kFailureModes> kAllFailureModes = {
    FailureMode::kMalformed,  FailureMode::kBadArgs,      FailureMode::kOffPath,    FailureMode::kUnrecoveredError,
    FailureMode::kNoAnswer,   FailureMode::kStoppedShort, FailureMode::kWrongAnswer};

// "malformed", "bad_args", ... (the names above; JSON keys of `forge eval`).
const char* to_string(FailureMode m);

// The cause of a failed episode; nullopt for a successful one.
std::optional<FailureMode> classify_failure(const Trajectory& t);

}  // namespace forge
