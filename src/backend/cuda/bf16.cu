// See bf16.cuh.
#include "backend/cuda/bf16.cuh"

#include <type_traits>

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kThreads = 256;

template <class Out>
__global__ void __launch_bounds__(kThreads)
    round_to_bf16_kernel(const float* __restrict__ src, int rows, int cols, int ld_src,
                         Out* __restrict__ dst, int ld_dst) {
  const size_t n = size_t(rows) * cols;
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += size_t(gridDim.x) * blockDim.x) {
    const size_t r = e / cols, c = e - r * cols;
    const __nv_bfloat16 x = __float2bfloat16(src[r * ld_src + c]);
    if constexpr (std::is_same_v<Out, float>)
      dst[r * ld_dst + c] = __bfloat162float(x);
    else
      dst[r * ld_dst + c] = x;
  }
}

__global__ void __launch_bounds__(kThreads)
    pack_bf16_kernel(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst, size_t n) {
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x)
    dst[e] = __float2bfloat16(src[e]);
}

__global__ void __launch_bounds__(kThreads)
    unpack_bf16_kernel(const __nv_bfloat16* __restrict__ src, float* __restrict__ dst, size_t n) {
  for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x)
    dst[e] = __bfloat162float(src[e]);
}

template <class Out>
void launch(const float* src, int rows, int cols, int ld_src, Out* dst, int ld_dst,
            cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  FORGE_LAUNCH(round_to_bf16_kernel<Out>, grid_for(size_t(rows) * cols, kThreads), kThreads, 0,
               stream, src, rows, cols, ld_src, dst, ld_dst);
}
}  // namespace

void launch_round_to_bf16(const float* src, int rows, int cols, int ld_src, __nv_bfloat16* dst,
                          int ld_dst, cudaStream_t stream) {
  launch(src, rows, cols, ld_src, dst, ld_dst, stream);
}
void launch_round_to_bf16(const float* src, int rows, int cols, int ld_src, float* dst, int ld_dst,
                          cudaStream_t stream) {
  launch(src, rows, cols, ld_src, dst, ld_dst, stream);
}

void launch_pack_bf16(const float* src, __nv_bfloat16* dst, size_t n, cudaStream_t stream) {
  if (n) FORGE_LAUNCH(pack_bf16_kernel, grid_for(n, kThreads), kThreads, 0, stream, src, dst, n);
}
void launch_unpack_bf16(const __nv_bfloat16* src, float* dst, size_t n, cudaStream_t stream) {
  if (n) FORGE_LAUNCH(unpack_bf16_kernel, grid_for(n, kThreads), kThreads, 0, stream, src, dst, n);
}

FORGE_CUDA_NAMESPACE_END
