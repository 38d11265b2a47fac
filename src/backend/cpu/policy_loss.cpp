// The policy loss on the CPU (Backend::policy_loss), sample by sample: the
// mask first (it decides the kept count, and so the sequence mean's 1/|o_s|),
// then each token's terms (backend/policy_loss_terms.hpp) and the sums.
#include "backend/cpu/cpu_backend.hpp"
#include "backend/policy_loss_terms.hpp"

#include "backend/cpu/variant_begin.hpp"

namespace forge::FORGE_CPU_NS {

PolicyLossSums CpuBackend::policy_loss(const PolicyLossArgs& a) {
  PolicyLossSums sums;
  for (int s = 0; s < a.samples; ++s) {
    const int32_t begin = a.sample_begin[s], end = a.sample_begin[s + 1], n = end - begin;
    bool keep_sample = true;
    int64_t kept = n;
    if (a.mask == ImportanceMask::sequence && n > 0) {
      double log_ratio_sum = 0;
      for (int32_t t = begin; t < end; ++t)
        log_ratio_sum += policy_log_ratio(a.logprob[t], a.behaviour_logprob[t]);
      keep_sample = importance_kept(a, exp(log_ratio_sum / n));
      kept = keep_sample ? n : 0;
    } else {
      kept = 0;
      for (int32_t t = begin; t < end; ++t)
        kept += token_kept(a, exp(policy_log_ratio(a.logprob[t], a.behaviour_logprob[t])));
    }
    const double divisor =
        a.objective == PolicyObjective::clipped_sequence_mean && kept > 0 ? double(kept) : 1.0;
    const double inv_divisor = 1.0 / divisor;
    for (int32_t t = begin; t < end; ++t) {
      const PolicyTokenTerms x =
          policy_token_terms(a, a.logprob[t], a.behaviour_logprob[t], a.advantage[s]);
      sums.ratio += x.ratio;
      sums.max_ratio = fmax(sums.max_ratio, x.ratio);
      sums.kl += x.ratio - 1.0 - x.log_ratio;
      sums.logprob_mismatch += fabs(x.log_ratio);
      sums.clipped_tokens += x.clipped;
      const bool keep = keep_sample && token_kept(a, x.ratio);
      a.coef[t] = keep ? static_cast<float>(x.coef * inv_divisor) : 0.0f;
      if (keep) sums.objective += x.term * inv_divisor;
    }
    sums.tokens += n;
    sums.kept_tokens += static_cast<double>(kept);
    sums.kept_samples += kept > 0;
  }
  return sums;
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
