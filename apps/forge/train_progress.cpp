#include "train_progress.hpp"

#include <cstdio>

namespace forge {

std::string format_train_progress(int step, const PolicyUpdateStats& st, double grad_norm,
                                  double gen_tokens_per_s, double seconds) {
  char line[512];
  std::snprintf(line, sizeof line,
                "step %4d  reward %+.3f (outcome %.3f process %+.3f efficiency %+.3f)  success %.2f  "
                "zero-var %d/%d  clip %.3f  masked %.3f  mismatch %.2e  kl %.2e  entropy %.2f  "
                "grad %.2f  gen %.0f tok/s  tree/linear %.2f  %.1f s",
                step, st.reward_mean, st.component_mean.outcome, st.component_mean.process,
                st.component_mean.efficiency, st.success_rate, st.zero_variance_groups, st.groups,
                st.loss.clip_fraction(), st.loss.masked_fraction(), st.loss.logprob_mismatch, st.loss.kl,
                st.entropy_mean, grad_norm, gen_tokens_per_s,
                st.linear_tokens ? double(st.tree_tokens) / st.linear_tokens : 1.0, seconds);
  return line;
}

}  // namespace forge
