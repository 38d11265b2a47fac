// The policy loss (Backend::policy_loss; per-token math in
// model/policy_loss_terms.hpp), FP64 throughout, deterministic (no atomics):
//
//   sample kernel, a block of 128 per sample: pass 1 over the sample's tokens
//     gives the mask (block sum of log r for "sequence", of kept tokens for
//     "token"), pass 2 writes coef[t] and block-reduces the sample's sums
//     into partials[s][kPolicyLossSums]
//   total kernel, one block of 256: thread i folds samples i, i + 256, ... in
//     order, then a block reduction -> totals[kPolicyLossSums]
//
// The order of every sum is fixed by the sample layout, so results repeat
// bit for bit. Traffic: lp and mu read twice (the second pass mostly from L2),
// coef written once, 72 bytes of partials per sample.
#pragma once
#include "backend/backend.hpp"
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

// partials and totals hold the fields of PolicyLossSums in declaration order.
constexpr int kPolicyLossSums = 9;
static_assert(sizeof(PolicyLossSums) == kPolicyLossSums * sizeof(double));

// partials: [a.samples * kPolicyLossSums] doubles; totals: kPolicyLossSums doubles.
void launch_policy_loss(const PolicyLossArgs& a, double* partials, double* totals,
                        cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
