// Why a failed agent episode failed: one cause per episode, read from what
// the episode recorded (its process signals, its tool errors and retries,
// how it ended and the ideal solution's length), the first that applies:
//
//   abandoned          ended without a result the run could judge: its
//                      opening over the context budget, an engine error, a
//                      verifier that could not run, a deadline (listed last:
//                      it is not the policy's doing; never trained on)
//   malformed          a generation parsed as neither a call nor an answer, or
//                      named a tool the task does not offer (format)
//   bad_args           a tool rejected its arguments: a lookup of an entity
//                      or relation that does not exist (often a miscopied
//                      name), a calc expression that is not "a op b", a code
//                      edit or read of something that is not there
//   off_path           a valid call that did not advance the task: an
//                      operation not in the expression (a miscopied number),
//                      a find whose tag matches nothing, a relation off the
//                      question's path, a repeated call, a call over the
//                      budget; in code, any call besides the reference
//                      steps (exploring, a shell command, a different fix)
//   unrecovered_error  a tool error or timeout that the identical call did
//                      not retry successfully right after (the evaluation's
//                      "recovered"; a run of failed calls counts as retries
//                      of the first), the task's calls left unfinished, with
//                      none of the above
//   no_answer          a budget (turns, tokens, context) ended the episode
//                      before an answer, with none of the above
//   stopped_short      answered after fewer useful calls than the task needs
//   wrong_answer       made every call the task needs, answered wrongly (in
//                      code: a hidden case fails)
//
// Of the policy's causes (all but abandoned), in calc and search the first
// three are the policy's writing of a call
// (what it copies from the task or a tool message), the next three its
// decisions (retry, stop, answer), the last its reading of the final tool
// result. `forge eval` reports the share of episodes in each (they sum to
// 1 - success).
#pragma once
#include <array>
#include <optional>

#include "episode/trajectory.hpp"

namespace forge {

enum class FailureMode {
  kMalformed, kBadArgs, kOffPath, kUnrecoveredError, kNoAnswer, kStoppedShort, kWrongAnswer, kAbandoned
};
inline constexpr int kFailureModes = static_cast<int>(FailureMode::kAbandoned) + 1;
inline constexpr std::array<FailureMode, kFailureModes> kAllFailureModes = {
    FailureMode::kMalformed,  FailureMode::kBadArgs,      FailureMode::kOffPath,    FailureMode::kUnrecoveredError,
    FailureMode::kNoAnswer,   FailureMode::kStoppedShort, FailureMode::kWrongAnswer, FailureMode::kAbandoned};
static_assert(kAllFailureModes.back() == FailureMode::kAbandoned, "kAllFailureModes lists every mode in order");

// "malformed", "bad_args", ... (the names above; JSON keys of `forge eval`).
const char* to_string(FailureMode m);

// The cause of a failed episode; nullopt for a successful one.
std::optional<FailureMode> classify_failure(const Trajectory& t);

}  // namespace forge
