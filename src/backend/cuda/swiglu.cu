// See swiglu.cuh.
#include "backend/cuda/swiglu.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kThreads = 256;

__global__ void swiglu_fwd_kernel(const float* __restrict__ gu, float* __restrict__ out, int T, int F) {
  const size_t n = size_t(T) * F;
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const size_t t = e / F, i = e - t * F;
    const float g = gu[2 * t * F + i], u = gu[2 * t * F + F + i];
    out[e] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void swiglu_bwd_kernel(const float* __restrict__ gu, const float* __restrict__ dout,
                                  float* __restrict__ dgu, int T, int F) {
  const size_t n = size_t(T) * F;
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const size_t t = e / F, i = e - t * F;
    const float g = gu[2 * t * F + i], u = gu[2 * t * F + F + i], d = dout[e];
    const float sig = 1.0f / (1.0f + expf(-g));
    dgu[2 * t * F + F + i] = d * g * sig;
    dgu[2 * t * F + i] = d * u * sig * (1.0f + g * (1.0f - sig));
  }
}
}  // namespace

void launch_swiglu_fwd(const float* gu, float* out, int T, int F, cudaStream_t stream) {
  const size_t n = size_t(T) * F;
  if (n) FORGE_LAUNCH(swiglu_fwd_kernel, grid_for(n, kThreads), kThreads, 0, stream, gu, out, T, F);
}

void launch_swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F,
                       cudaStream_t stream) {
  const size_t n = size_t(T) * F;
  if (n) FORGE_LAUNCH(swiglu_bwd_kernel, grid_for(n, kThreads), kThreads, 0, stream, gu, dout, dgu, T, F);
}

FORGE_CUDA_NAMESPACE_END
