// See adamw.cuh.
#include "backend/cuda/adamw.cuh"

#include <cmath>

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kThreads = 256;

__global__ void adamw_kernel(float* __restrict__ param, const float* __restrict__ grad,
                             float* __restrict__ m, float* __restrict__ v, size_t n,
                             const AdamWKernelParams p) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = grad[i] * p.grad_scale;
    const float mi = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    const float vi = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * p.decay - p.step_size * mi / (sqrtf(vi) * p.inv_sqrt_bc2 + p.eps);
  }
}
}  // namespace

void launch_adamw(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWParams& p, cudaStream_t stream) {
  if (!n) return;
  const float bc1 = 1.0f - std::pow(p.beta1, static_cast<float>(p.step));
  const float bc2 = 1.0f - std::pow(p.beta2, static_cast<float>(p.step));
  const AdamWKernelParams k{p.beta1, p.beta2, p.eps, p.grad_scale, 1.0f - p.lr * p.weight_decay,
                            p.lr / bc1, 1.0f / std::sqrt(bc2)};
  FORGE_LAUNCH(adamw_kernel, grid_for(n, kThreads), kThreads, 0, stream, param, grad, m, v, n, k);
}

FORGE_CUDA_NAMESPACE_END
