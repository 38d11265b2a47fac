// The environment interface: a seeded simulation with tools and a verifier.
//
//   Task task = env.reset(seed, noise);  // a user request, its tools, its needs
//   Observation o = env.step(call);     // one tool call -> result or error text
//   float score = env.verify(answer);   // outcome in [0, 1]
//   Solution s = env.solve();           // the reference solver (noise-free plan)
//
// step() is the same protocol for every domain and never throws on a bad
// call; in this order:
//   1. over budget: the call is the (max_tool_calls+1)-th or later  -> kBadCall
//   2. unknown tool: not among task.tools                           -> kBadCall
//   3. noise: u = counter_uniform(hash(seed, noise), step index);
//      u < error_rate gives "error: <reason>", u < error_rate + timeout_rate
//      "timeout" (kToolError / kTimeout); with env.error_names_call the
//      observation is marked names_call and the scaffold shows the call as
//      the agent wrote it after the text (tool_response_format.hpp: the
//      environment does not know the displayed tool names or the call
//      format); the tool does not run. `noise` is
//      the episode's stream (its id), so the members of one group, same task,
//      differ in which calls fail. fail_at(k, kind) makes call k fail with
//      that kind whatever u is (a solver demonstration of a retry).
//   4. the domain's tool: wrong arguments -> kBadCall "error: <why>",
//      otherwise kOk with the result text.
// Signals (process_signals.hpp): bad calls are negative; an ok call is
// useful_call the first time it advances the task, else valid_call; an ok
// call the domain flags unsafe (safety_policy.hpp) also carries "unsafe". An ok
// call identical to the call that just failed by noise is a recovery
// (Observation::recovered); its signal "recovered" is paid only when the
// retry is also useful, so the signal cannot be farmed: a detour call that
// fails and is repeated earns nothing, and a task has at most steps_needed
// useful calls. All randomness derives from the task seed, the noise stream
// and the step index, so they and a call sequence give the same
// observations every time.
//
// A domain implements generate(), call_tool(), score() and solve().
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "env/env_config.hpp"
#include "env/tool_call.hpp"
#include "episode/trajectory.hpp"

namespace forge {

// The verifier could not judge the answer for a reason that is not the
// answer's (the code domain's sandbox did not start): the episode is
// abandoned, not scored 0, so that a correct answer is never trained on as a
// failure.
class VerifierUnavailable : public Error {
 public:
  using Error::Error;
};

struct Task {
  uint64_t seed = 0;
  std::string domain;             // e.g. "calc"
  std::string request;            // the user's request text
  std::vector<ToolSpec> tools;    // tools offered (besides the final answer)
  int steps_needed = 0;           // tool calls an ideal agent makes
};

enum class ObservationKind { kOk, kToolError, kTimeout, kBadCall };
const char* to_string(ObservationKind k);

struct Observation {
  ObservationKind kind = ObservationKind::kOk;
  std::string text;                    // result, "error: ...", "timeout"
  bool names_call = false;             // env.error_names_call: shown with the failed call
  std::vector<ProcessSignal> signals;  // turn is left 0: the scaffold sets it
  bool recovered = false;              // an identical retry that succeeded
  bool test_run = false;               // the call ran the task's tests
  bool is_error() const { return kind != ObservationKind::kOk; }
};

// The reference solution: the ideal tool calls in order, then the answer.
struct Solution {
  std::vector<ToolCall> calls;
  std::string answer;
};

// Observation for a bad call (malformed, unknown tool, bad arguments, over
// budget): "error: <message>" and one negative signal of `kind`.
Observation bad_call_observation(const char* kind, const std::string& message);

class Environment {
 public:
  explicit Environment(const EnvConfig& config) : config_(config) {}
  virtual ~Environment() = default;

  virtual std::string name() const = 0;
  // True when tool calls (or verify) run programs and may take seconds: the
  // caller runs them off its loop (agent/episode_actions.hpp).
  virtual bool slow_tools() const { return false; }
  // noise: the stream of injected tool failures (agent episodes pass their
  // episode id).
  Task reset(uint64_t seed, uint64_t noise = 0);
  // Call `index` (0-based, this episode) fails as `kind` (kToolError or
  // kTimeout) whatever the draw; cleared by reset(). Demonstrates a retry.
  void fail_at(int index, ObservationKind kind);
  Observation step(const ToolCall& call);
  // An action the scaffold refused before step() (malformed output, a tool
  // the task does not show) came between: the next call is no retry of a
  // failed one (`recovered` is an identical call right after the failure).
  void interrupt_retry() { last_failed_.reset(); }
  float verify(std::string_view answer) const;  // 0 before reset(); VerifierUnavailable (see above)
  virtual Solution solve() const = 0;

  const Task& task() const { return task_; }
  int tool_calls() const { return step_; }

 protected:
  struct ToolResult {
    bool ok = false;      // false: wrong arguments, text says why
    std::string text;
    bool useful = false;  // advanced the task (first time only)
    std::string unsafe = "";  // non-empty: the safety rule broken (an "unsafe" signal)
    bool test_run = false;    // the call ran the task's tests (counted per episode)
  };
  virtual Task generate(uint64_t seed) = 0;  // also resets the domain's state
  virtual ToolResult call_tool(const ToolCall& call) = 0;
  virtual float score(std::string_view answer) const = 0;

  const EnvConfig& config() const { return config_; }

 private:
  EnvConfig config_;
  Task task_;
  bool ready_ = false;
  int step_ = 0;
  uint64_t noise_seed_ = 0;
  struct ForcedFailure {
    int index = -1;
    ObservationKind kind = ObservationKind::kToolError;
  } forced_;
  std::optional<ToolCall> last_failed_;  // the call that just failed by noise
};

// Trims ASCII whitespace at both ends.
std::string_view trim(std::string_view s);

}  // namespace forge
