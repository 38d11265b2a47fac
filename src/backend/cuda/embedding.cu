// See embedding.cuh.
#include "backend/cuda/embedding.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kThreads = 256;

__global__ void gather_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ rows,
                                   float* __restrict__ dst, int R, int d) {
  const size_t n = size_t(R) * d;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / d, c = i - r * d;
    dst[i] = src[size_t(rows[r]) * d + c];
  }
}

__global__ void scatter_add_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ rows,
                                        float* __restrict__ dst, int R, int d) {
  const size_t n = size_t(R) * d;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / d, c = i - r * d;
    dst[size_t(rows[r]) * d + c] += src[i];
  }
}

__global__ void embedding_bwd_kernel(const int32_t* __restrict__ tokens, const float* __restrict__ dout,
                                     float* __restrict__ dtable, int T, int d) {
  const size_t n = size_t(T) * d;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t t = i / d, c = i - t * d;
    atomicAdd(dtable + size_t(tokens[t]) * d + c, dout[i]);
  }
}
}  // namespace

void launch_gather_rows(const float* src, const int32_t* rows, float* dst, int R, int d,
                        cudaStream_t stream) {
  const size_t n = size_t(R) * d;
  if (n) FORGE_LAUNCH(gather_rows_kernel, grid_for(n, kThreads), kThreads, 0, stream, src, rows, dst, R, d);
}

void launch_scatter_add_rows(const float* src, const int32_t* rows, float* dst, int R, int d,
                             cudaStream_t stream) {
  const size_t n = size_t(R) * d;
  if (n)
    FORGE_LAUNCH(scatter_add_rows_kernel, grid_for(n, kThreads), kThreads, 0, stream, src, rows, dst, R, d);
}

void launch_embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int T, int d,
                          cudaStream_t stream) {
  const size_t n = size_t(T) * d;
  if (n)
    FORGE_LAUNCH(embedding_bwd_kernel, grid_for(n, kThreads), kThreads, 0, stream, tokens, dout, dtable, T, d);
}

FORGE_CUDA_NAMESPACE_END
