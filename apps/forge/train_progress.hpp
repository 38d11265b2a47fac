// The progress line of `forge train`, shared by the synchronous loop and the
// MPI learner: step, reward by component, success, zero-variance groups,
// clip and masked fractions, logprob mismatch, KL, entropy, gradient norm,
// generation rate, tree/linear tokens and the step's wall time.
#pragma once
#include <string>

#include "algo/policy_update.hpp"

namespace forge {

std::string format_train_progress(int step, const PolicyUpdateStats& st, double grad_norm,
                                  double gen_tokens_per_s, double seconds);

}  // namespace forge
