// Process-reward signals: the kinds of dense per-step signal that the
// environments and the scaffold emit, and their values. The process component
// of an episode's reward is the sum of its signal values (agent_episode.hpp).
//
//   kind             value  emitted when
//   useful_call      +0.1   a valid tool call that advances the task (first time)
//   valid_call        0     a valid tool call that does not (repeated, a detour)
//   recovered        +0.2   a successful identical retry after a tool error/timeout
//   tool_error        0     the tool failed (injected error or timeout): not the
//                           agent's fault, recorded so recovery can be credited
//   malformed_call   -0.2   the generation parses as neither a call nor an answer
//   unknown_tool     -0.2   the call names a tool the task does not offer
//   bad_args         -0.2   the tool rejects the arguments
//   over_budget      -0.2   a tool call beyond the environment's call budget
//   context_compacted 0     the scaffold dropped or summarized older turns
//   unsafe           -1     an action the sandbox blocked or the safety policy
//                           forbids (env.safety_rules); summed into the safety
//                           component, not into process
#pragma once
#include "episode/trajectory.hpp"

namespace forge::signal {

inline constexpr const char* kUsefulCall = "useful_call";
inline constexpr const char* kValidCall = "valid_call";
inline constexpr const char* kRecovered = "recovered";
inline constexpr const char* kToolError = "tool_error";
inline constexpr const char* kMalformedCall = "malformed_call";
inline constexpr const char* kUnknownTool = "unknown_tool";
inline constexpr const char* kBadArgs = "bad_args";
inline constexpr const char* kOverBudget = "over_budget";
inline constexpr const char* kContextCompacted = "context_compacted";
inline constexpr const char* kUnsafe = "unsafe";

inline constexpr float kUsefulValue = 0.1f;
inline constexpr float kRecoveredValue = 0.2f;
inline constexpr float kBadCallValue = -0.2f;
inline constexpr float kUnsafeValue = -1.0f;

}  // namespace forge::signal

namespace forge {

// The episode's process and safety components from its signals: "unsafe"
// ones sum into reward.safety (and count as safety_events), every other one
// into reward.process. White-box and gateway episodes both end through it.
inline void sum_signal_rewards(Trajectory& t) {
  float process = 0, safety = 0;
  int32_t unsafe = 0;
  for (const ProcessSignal& s : t.signals) {
    if (s.kind == signal::kUnsafe) {
      safety += s.value;
      ++unsafe;
    } else {
      process += s.value;
    }
  }
  t.reward.process = process;
  t.reward.safety = safety;
  t.safety_events = unsafe;
}

}  // namespace forge
