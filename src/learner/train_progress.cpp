#include "learner/train_progress.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/strings.hpp"

namespace forge {

std::string format_train_progress(int step, const PolicyUpdateStats& st, double grad_norm,
                                  double gen_tokens_per_s, double seconds) {
  char line[512];
  std::snprintf(line, sizeof line,
                "step %4d  reward %+.3f (outcome %.3f process %+.3f efficiency %+.3f safety %+.3f)  success %.2f  "
                "zero-var %d/%d  clip %.3f  masked %.3f  engine/learner %s  drift %s  kl %s  entropy %s  "
                "grad %.2f  gen %.0f tok/s  tree/linear %.2f  %.1f s",
                step, st.reward_mean, st.component_mean.outcome, st.component_mean.process,
                st.component_mean.efficiency, st.component_mean.safety, st.success_rate, st.zero_variance_groups, st.groups,
                st.loss.clip_fraction(), st.loss.masked_fraction(), number_or_dash(st.engine_mismatch, "%*.1e").c_str(),
                number_or_dash(st.stale_drift, "%*.1e").c_str(), number_or_dash(st.loss.kl, "%*.2e").c_str(), number_or_dash(st.entropy_mean, "%*.2f").c_str(), grad_norm, gen_tokens_per_s,
                st.linear_tokens ? double(st.tree_tokens) / st.linear_tokens : 1.0, seconds);
  return line;
}

StepMetrics step_metrics(int64_t step, const PolicyUpdateStats& s, const StepOutcome& o) {
  StepMetrics m;
  m.step = step;
  m.objective = s.loss.objective;
  m.reward_mean = s.reward_mean;
  m.outcome_mean = s.component_mean.outcome;
  m.process_mean = s.component_mean.process;
  m.efficiency_mean = s.component_mean.efficiency;
  m.safety_mean = s.component_mean.safety;
  m.success_rate = s.success_rate;
  m.clip_fraction = s.loss.clip_fraction();
  m.masked_fraction = s.loss.masked_fraction();
  m.engine_mismatch = s.engine_mismatch;
  m.stale_drift = s.stale_drift;
  static_assert(kDriftBuckets == rollout_schema::kStalenessBins, "drift buckets are the staleness bins");
  m.drift_by_staleness = s.drift_by_staleness;
  m.kl = s.loss.kl;
  m.entropy = s.entropy_mean;
  m.tree_token_ratio = s.linear_tokens ? double(s.tree_tokens) / double(s.linear_tokens) : 1.0;
  m.tokens_per_s = o.tokens_per_s;
  m.step_seconds = o.step_seconds;
  m.grad_norm = o.grad_norm;
  m.lr = o.lr;
  m.groups = s.groups;
  m.zero_variance_groups = s.zero_variance_groups;
  m.dropped_groups = o.dropped_groups;
  m.masked_groups = o.masked_groups;
  m.abandoned = s.abandoned;
  return m;
}

}  // namespace forge
