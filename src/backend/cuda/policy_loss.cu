// Policy loss kernels; see policy_loss.cuh.
#include "backend/cuda/policy_loss.cuh"
#include "backend/policy_loss_terms.hpp"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kSampleThreads = 128;
constexpr unsigned kTotalThreads = 256;
constexpr int kMaxRatio = kPolicyLossSums - 1;  // the one field reduced by max

__device__ __forceinline__ double block_max_f64(double x, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmax(x, __shfl_xor_sync(kFullWarp, x, o));
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : 0.0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmax(x, __shfl_xor_sync(kFullWarp, x, o));
  __syncthreads();
  return x;
}

__global__ void __launch_bounds__(kSampleThreads)
    policy_loss_sample_kernel(const PolicyLossArgs a, double* __restrict__ partials) {
  FORGE_SHARED_MEMORY(double, scratch);
  const int s = blockIdx.x;
  const int begin = a.sample_begin[s], end = a.sample_begin[s + 1], n = end - begin;
  const float advantage = a.advantage[s];
  bool keep_sample = true;
  double kept = n;
  if (a.mask == ImportanceMask::sequence) {
    double log_ratio_sum = 0;
    for (int t = begin + threadIdx.x; t < end; t += blockDim.x)
      log_ratio_sum += policy_log_ratio(a.logprob[t], a.behaviour_logprob[t]);
    log_ratio_sum = block_sum(log_ratio_sum, scratch);
    keep_sample = n == 0 || importance_kept(a, exp(log_ratio_sum / n));
    kept = keep_sample ? n : 0;
  } else {
    double k = 0;
    for (int t = begin + threadIdx.x; t < end; t += blockDim.x)
      k += token_kept(a, exp(policy_log_ratio(a.logprob[t], a.behaviour_logprob[t])));
    kept = block_sum(k, scratch);
  }
  const double divisor =
      a.objective == PolicyObjective::clipped_sequence_mean && kept > 0 ? kept : 1.0;
  const double inv_divisor = 1.0 / divisor;  // once: an FP64 division is a call that spills
  double clipped = 0, objective = 0, ratio = 0, kl = 0, mismatch = 0, max_ratio = 0;
  for (int t = begin + threadIdx.x; t < end; t += blockDim.x) {
    const PolicyTokenTerms x = policy_token_terms(a, a.logprob[t], a.behaviour_logprob[t], advantage);
    ratio += x.ratio;
    max_ratio = fmax(max_ratio, x.ratio);
    kl += x.ratio - 1.0 - x.log_ratio;
    mismatch += fabs(x.log_ratio);
    clipped += x.clipped;
    const bool keep = keep_sample && token_kept(a, x.ratio);
    a.coef[t] = keep ? static_cast<float>(x.coef * inv_divisor) : 0.0f;
    if (keep) objective += x.term * inv_divisor;
  }
  clipped = block_sum(clipped, scratch);
  objective = block_sum(objective, scratch);
  ratio = block_sum(ratio, scratch);
  kl = block_sum(kl, scratch);
  mismatch = block_sum(mismatch, scratch);
  max_ratio = block_max_f64(max_ratio, scratch);
  if (threadIdx.x == 0) {
    double* out = partials + static_cast<size_t>(s) * kPolicyLossSums;
    out[0] = n;
    out[1] = kept;
    out[2] = kept > 0;
    out[3] = clipped;
    out[4] = objective;
    out[5] = ratio;
    out[6] = kl;
    out[7] = mismatch;
    out[kMaxRatio] = max_ratio;
  }
}

__global__ void __launch_bounds__(kTotalThreads)
    policy_loss_total_kernel(const double* __restrict__ partials, int samples, double* __restrict__ totals) {
  FORGE_SHARED_MEMORY(double, scratch);
  for (int k = 0; k < kPolicyLossSums; ++k) {
    double x = 0;  // also the identity of max: ratios are positive
    for (int s = threadIdx.x; s < samples; s += blockDim.x) {
      const double v = partials[static_cast<size_t>(s) * kPolicyLossSums + k];
      x = k == kMaxRatio ? fmax(x, v) : x + v;
    }
    x = k == kMaxRatio ? block_max_f64(x, scratch) : block_sum(x, scratch);
    if (threadIdx.x == 0) totals[k] = x;
  }
}
}  // namespace

void launch_policy_loss(const PolicyLossArgs& a, double* partials, double* totals,
                        cudaStream_t stream) {
  if (a.samples == 0) {
    FORGE_CUDA_CHECK(cudaMemsetAsync(totals, 0, kPolicyLossSums * sizeof(double), stream));
    return;
  }
  FORGE_LAUNCH(policy_loss_sample_kernel, static_cast<unsigned>(a.samples), kSampleThreads,
               32 * sizeof(double), stream, a, partials);
  FORGE_LAUNCH(policy_loss_total_kernel, 1, kTotalThreads, 32 * sizeof(double), stream,
               partials, a.samples, totals);
}

FORGE_CUDA_NAMESPACE_END
