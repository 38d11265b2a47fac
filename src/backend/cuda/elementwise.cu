// Grid-stride loops of 256 threads; see elementwise.cuh.
#include "backend/cuda/elementwise.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kThreads = 256;

__global__ void fill_kernel(float* x, float value, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

__global__ void add_kernel(float* __restrict__ y, const float* __restrict__ x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void scale_kernel(float* x, float s, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] *= s;
}

// Each block's sum into partial[block]; sum_partials_kernel adds them in
// block order (no atomics: the same bits every run, as the clipping norm
// needs for a reproducible step).
__global__ void __launch_bounds__(kThreads) sum_squares_kernel(const float* __restrict__ x, size_t n,
                                                               double* partial) {
  FORGE_SHARED_MEMORY(double, scratch);
  double acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc += static_cast<double>(x[i]) * x[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kThreads) sum_partials_kernel(const double* __restrict__ partial, unsigned count,
                                                                double* result) {
  FORGE_SHARED_MEMORY(double, scratch);
  double acc = 0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *result = acc;
}
}  // namespace

void launch_fill(float* x, float value, size_t n, cudaStream_t stream) {
  if (n) FORGE_LAUNCH(fill_kernel, grid_for(n, kThreads), kThreads, 0, stream, x, value, n);
}

void launch_add_inplace(float* y, const float* x, size_t n, cudaStream_t stream) {
  if (n) FORGE_LAUNCH(add_kernel, grid_for(n, kThreads), kThreads, 0, stream, y, x, n);
}

void launch_scale(float* x, float s, size_t n, cudaStream_t stream) {
  if (n) FORGE_LAUNCH(scale_kernel, grid_for(n, kThreads), kThreads, 0, stream, x, s, n);
}

void launch_sum_squares(const float* x, size_t n, double* scratch, cudaStream_t stream) {
  if (n == 0) {
    FORGE_CUDA_CHECK(cudaMemsetAsync(scratch, 0, sizeof(double), stream));
    return;
  }
  const unsigned blocks = grid_for(n, kThreads, kSumSquaresBlocks);
  FORGE_LAUNCH(sum_squares_kernel, blocks, kThreads, 32 * sizeof(double), stream, x, n, scratch + 1);
  FORGE_LAUNCH(sum_partials_kernel, 1, kThreads, 32 * sizeof(double), stream, scratch + 1, blocks, scratch);
}

FORGE_CUDA_NAMESPACE_END
