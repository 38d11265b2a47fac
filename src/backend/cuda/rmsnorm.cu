// See rmsnorm.cuh.
#include "backend/cuda/rmsnorm.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kRowThreads = 128;
constexpr int kColTile = 32, kRowLanes = 8;

__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_fwd_kernel(const float* __restrict__ x, const float* __restrict__ w,
                       float* __restrict__ y, float* __restrict__ rstd, int d, float eps) {
  FORGE_SHARED_MEMORY(float, scratch);
  const size_t row = size_t(blockIdx.x) * d;
  float ss = 0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) ss += x[row + i] * x[row + i];
  ss = block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / d + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int i = threadIdx.x; i < d; i += blockDim.x) y[row + i] = x[row + i] * r * w[i];
}

__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_dx_kernel(const float* __restrict__ x, const float* __restrict__ w,
                      const float* __restrict__ rstd, const float* __restrict__ dy,
                      float* __restrict__ dx, int d) {
  FORGE_SHARED_MEMORY(float, scratch);
  const size_t row = size_t(blockIdx.x) * d;
  float dot = 0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) dot += w[i] * dy[row + i] * x[row + i];
  dot = block_sum(dot, scratch);
  const float r = rstd[blockIdx.x];
  const float c = r * r * r * dot / d;
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    dx[row + i] += r * w[i] * dy[row + i] - c * x[row + i];
}

// blockDim (kColTile, kRowLanes): column blockIdx.x * kColTile + threadIdx.x.
__global__ void __launch_bounds__(kColTile* kRowLanes)
    rmsnorm_dw_kernel(const float* __restrict__ x, const float* __restrict__ rstd,
                      const float* __restrict__ dy, float* __restrict__ dw, int T, int d) {
  FORGE_SHARED_MEMORY(float, part);  // [kRowLanes][kColTile]
  const int col = blockIdx.x * kColTile + threadIdx.x;
  float acc = 0;
  if (col < d)
    for (int t = threadIdx.y; t < T; t += kRowLanes)
      acc += dy[size_t(t) * d + col] * x[size_t(t) * d + col] * rstd[t];
  part[threadIdx.y * kColTile + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < d) {
    float s = 0;
    for (int l = 0; l < kRowLanes; ++l) s += part[l * kColTile + threadIdx.x];
    dw[col] += s;
  }
}
}  // namespace

void launch_rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int T, int d,
                        float eps, cudaStream_t stream) {
  if (T > 0)
    FORGE_LAUNCH(rmsnorm_fwd_kernel, unsigned(T), kRowThreads, 32 * sizeof(float), stream, x, w, y,
                 rstd, d, eps);
}

void launch_rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy,
                        float* dx, float* dw, int T, int d, cudaStream_t stream) {
  if (T <= 0) return;
  FORGE_LAUNCH(rmsnorm_dx_kernel, unsigned(T), kRowThreads, 32 * sizeof(float), stream, x, w, rstd,
               dy, dx, d);
  FORGE_LAUNCH(rmsnorm_dw_kernel, unsigned((d + kColTile - 1) / kColTile), dim3(kColTile, kRowLanes),
               kColTile * kRowLanes * sizeof(float), stream, x, rstd, dy, dw, T, d);
}

FORGE_CUDA_NAMESPACE_END
