// What a learner step reports, in the synchronous loop and on the MPI
// learner alike: the progress line of `forge train` (step, reward by
// component, success, zero-variance groups, clip and masked fractions,
// logprob mismatch, KL, entropy, gradient norm, generation rate, tree/linear
// tokens and the step's wall time) and its row of rollouts.h5 steps/*.
#pragma once
#include <cstdint>
#include <string>

#include "algo/policy_update.hpp"
#include "io_hdf5/rollout_store.hpp"

namespace forge {

std::string format_train_progress(int step, const PolicyUpdateStats& st, double grad_norm,
                                  double gen_tokens_per_s, double seconds);

StepMetrics step_metrics(int64_t step, const PolicyUpdateStats& stats, double tokens_per_s,
                         double step_seconds);

}  // namespace forge
