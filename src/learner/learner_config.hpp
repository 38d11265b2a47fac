// The learner's configuration sections, shared by every training command:
//
//   [run]    RunConfig: the run folder, root seed, threads, backend and
//            precision, and the cadence of progress lines, checkpoints and
//            rollout-store flushes
//   [train]  TrainConfig: the RL loop (steps, batch of tasks x group,
//            packing, evaluation cadence, the starting checkpoint)
//
// configs/default.ini and docs/configuration.md list the same keys.
#pragma once
#include <cstdint>
#include <string>

#include "core/config.hpp"

namespace forge {

struct RunConfig {
  std::string dir = "runs/latest";  // output folder of the run
  uint64_t seed = 1234;             // root of every random stream of the run
  int threads = 0;                  // OpenMP threads per rank; 0 = all cores
  std::string backend = "cpu";      // cpu | cuda (backend/backend_registry.hpp)
  std::string precision = "fp32";   // fp32 | bf16 (bf16: cuda only)
  int log_every = 10;               // steps between progress lines
  int checkpoint_every = 0;         // steps between checkpoints; 0 = only at the end
  int keep_checkpoints = 3;         // newest checkpoints kept; 0 = all
  double flush_seconds = 10;        // seconds between flushes of RUN_DIR/rollouts.h5
};

struct TrainConfig {
  int steps = 50;
  int tasks = 8;        // tasks per step
  int group = 4;        // episodes per task (the advantage group)
  int max_tokens = 8192;
  bool merge = true;
  int eval_every = 0;   // 0 = only at the end
  int eval_tasks = 64;
  std::string init;     // checkpoint to start from
};

void add_run_options(OptionSet& opts, RunConfig& run);
void add_train_options(OptionSet& opts, TrainConfig& train);
// InputError unless a training bin (`key` = max_tokens: train.max_tokens,
// sft.max_tokens) holds the longest LLM call an episode can make
// (max_call_tokens: agent.max_context_tokens + agent.max_new_tokens): the
// batch would otherwise be refused only when such a call first comes, after
// its rollouts were spent.
void check_bins_hold_calls(const std::string& key, int max_tokens, int max_call_tokens);

}  // namespace forge
