// The policy losses token by token, in FP64: the one statement of the
// per-token math (algo/policy_loss.hpp), shared by the CPU backend
// (cpu/policy_loss.cpp) and the CUDA kernel (cuda/policy_loss.cu).
//
//   log r = lp - mu,  r = exp(log r),  r^ = clip(r, clip_low, clip_high)
//   cispo:    coef = r^ A,  term = r^ A lp            (no gradient through r^;
//             term 0 where coef is or lp is not finite: lp = -inf gives
//             r = 0, and 0 * -inf is NaN; with a lower clip r^ = clip_low,
//             and the term would be infinite while the gradient is not)
//   clipped:  term = min(r A, r^ A),  coef = r A where r A is the minimum, else 0
//   masks:    a token (mask token) or a sample (mask sequence, with
//             r = exp(mean log r)) is kept iff is_low <= r <= is_high
//   NaN r:    never kept under any mask (not in N), coef = term = 0, counted
//             as clipped
#pragma once
#include <math.h>

#include "backend/backend.hpp"
#include "backend/host_device.hpp"

namespace forge {

struct PolicyTokenTerms {
  double log_ratio = 0, ratio = 0, coef = 0, term = 0;
  bool clipped = false;  // r outside [clip_low, clip_high]
};

FORGE_HOST_DEVICE inline double policy_log_ratio(float logprob, float behaviour_logprob) {
  return static_cast<double>(logprob) - behaviour_logprob;
}

// Written as a conjunction so that a NaN ratio (a NaN behaviour or current
// logprob) is never kept.
FORGE_HOST_DEVICE inline bool importance_kept(const PolicyLossArgs& a, double ratio) {
  return ratio >= a.is_low && ratio <= a.is_high;
}

// Whether a token counts in N: under mask "token" its ratio is in
// [is_low, is_high]; under the others it is not NaN (mask "sequence" drops
// a sample with a NaN token whole, its mean being NaN).
FORGE_HOST_DEVICE inline bool token_kept(const PolicyLossArgs& a, double ratio) {
  return a.mask == ImportanceMask::token ? importance_kept(a, ratio) : !isnan(ratio);
}

FORGE_HOST_DEVICE inline PolicyTokenTerms policy_token_terms(const PolicyLossArgs& a, float logprob,
                                                             float behaviour_logprob, float advantage) {
  PolicyTokenTerms t;
  t.log_ratio = policy_log_ratio(logprob, behaviour_logprob);
  t.ratio = exp(t.log_ratio);
  t.clipped = !(t.ratio >= a.clip_low && t.ratio <= a.clip_high);
  // A NaN ratio carries no gradient and adds nothing to the objective (clip
  // would turn it into clip_low; the statistics still show the NaN).
  if (isnan(t.ratio)) return t;
  const double clipped_ratio = fmin(fmax(t.ratio, a.clip_low), a.clip_high);
  const double A = advantage;
  if (a.objective == PolicyObjective::cispo) {
    t.coef = clipped_ratio * A;
    t.term = t.coef == 0 || !isfinite(logprob) ? 0.0 : t.coef * logprob;
  } else {
    const double unclipped_term = t.ratio * A, clipped_term = clipped_ratio * A;
    t.term = fmin(unclipped_term, clipped_term);
    t.coef = unclipped_term <= clipped_term ? unclipped_term : 0.0;
  }
  return t;
}

}  // namespace forge
