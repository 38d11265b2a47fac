// What a learner step reports, in the synchronous loop and on the MPI
// learner alike: the progress line of `forge train` (step, reward by
// component, success, zero-variance groups, clip and masked fractions,
// logprob mismatch, KL, entropy, gradient norm, generation rate, tree/linear
// tokens and the step's wall time) and its row of rollouts.h5 steps/*
// (those, the learning rate, and the groups the staleness cap kept out).
#pragma once
#include <cstdint>
#include <string>

#include "algo/policy_update.hpp"
#include "io_hdf5/rollout_store.hpp"

namespace forge {

std::string format_train_progress(int step, const PolicyUpdateStats& st, double grad_norm,
                                  double gen_tokens_per_s, double seconds);

// What a step's row holds besides its update statistics.
struct StepOutcome {
  double tokens_per_s = 0, step_seconds = 0;
  double grad_norm = 0, lr = 0;  // 0 and 0 when no optimizer step was taken
  int dropped_groups = 0, masked_groups = 0;  // by the staleness cap
};

StepMetrics step_metrics(int64_t step, const PolicyUpdateStats& stats, const StepOutcome& outcome);

}  // namespace forge
