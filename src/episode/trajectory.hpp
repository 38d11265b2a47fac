// The record of one agent episode, as the scaffold produces it and the
// learner, the data pool and the rollout store consume it.
//
// Every LLM call is a sample: the exact context tokens the model saw and the
// tokens it generated, with the behaviour logprob and the policy version of
// each generated token. Calls of one episode usually extend each other
// (append-only history); when context management drops or compacts turns
// they do not, and prefix-tree merging simply branches there.
//
// Reward components are kept separately (outcome from the verifier, process
// from per-step signals, efficiency from turns and tokens beyond the task's
// need); src/algo combines them with weights from config.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace forge {

struct LlmCall {
  std::vector<int32_t> context;    // prompt tokens of this call
  std::vector<int32_t> generated;  // sampled tokens
  std::vector<float> logprobs;     // behaviour logprob per generated token
  std::vector<int32_t> versions;   // policy version per generated token
};

// A dense per-step signal from the environment or the scaffold.
struct ProcessSignal {
  int32_t turn = 0;
  std::string kind;   // e.g. "valid_call", "recovered", "malformed_call", "tool_error"
  float value = 0;    // signed contribution to the process reward
};

struct RewardComponents {
  float outcome = 0;     // verifier score in [0, 1]
  float process = 0;     // sum of ProcessSignal values
  float efficiency = 0;  // <= 0: penalty for turns / tokens beyond the task's need
  float safety = 0;      // <= 0: sum of the "unsafe" signals' values
};

struct Trajectory {
  uint64_t episode_id = 0;
  std::string env;        // domain, e.g. "calc", "search"
  uint64_t task_id = 0;   // the task seed; episodes of a group share it
  int32_t group = 0;      // group index for group-relative advantages
  std::string template_family;  // perturbation family of the episode
  std::vector<LlmCall> calls;
  std::vector<ProcessSignal> signals;
  RewardComponents reward;
  bool success = false;
  bool abandoned = false;  // closed without an answer (deadline, client gone)
  int32_t turns = 0;
  int32_t tool_errors = 0;   // injected tool errors/timeouts seen
  int32_t recoveries = 0;    // successful retries after a tool error
  int32_t safety_events = 0; // actions blocked by the sandbox or the safety policy
  int32_t test_runs = 0;     // test-suite runs the agent's tool calls made (code: run_tests)
  std::string final_answer;
  // Why the episode ended: "answer", "turn_budget", "token_budget",
  // "context_budget", "engine_error: <message>" or "verifier_error: <message>".
  std::string end_reason;
  int32_t needed_turns = 0;         // LLM calls of the ideal solution (its tool calls + answer)
  int32_t needed_tokens = 0;        // generated tokens of the ideal solution in this scaffold
  int32_t context_compactions = 0;  // times context management dropped/summarized turns

  // Tool calls of the ideal solution (its LLM calls less the answer).
  int32_t needed_calls() const { return needed_turns - 1; }
  // Oldest policy version among the generated tokens (-1 if none); a token
  // without a version (-1) does not count.
  int32_t oldest_version() const {
    int32_t v = -1;
    for (const auto& c : calls)
      for (int32_t x : c.versions)
        if (x >= 0 && (v < 0 || x < v)) v = x;
    return v;
  }
};

// Oldest policy version among the generated tokens of a group's episodes
// that train (-1 if none): an abandoned episode never trains, so its old
// tokens (a gateway agent that called early, then went idle) must not get
// the group's fresh episodes dropped by the staleness cap.
inline int32_t oldest_version(const std::vector<Trajectory>& group) {
  int32_t v = -1;
  for (const Trajectory& t : group)
    if (const int32_t x = t.oldest_version(); !t.abandoned && x >= 0 && (v < 0 || x < v)) v = x;
  return v;
}

}  // namespace forge
