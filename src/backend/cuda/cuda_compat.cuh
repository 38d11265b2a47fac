// What the kernel sources need from CUDA, in the two modes they compile in:
// nvcc (the forge_cuda library) and the host compiler with
// FORGE_CUDA_EMULATION (cuda_emulation.hpp runs kernels on fibers; the
// tests in tests/emulation build them that way). Kernels use only dynamic
// shared memory (FORGE_SHARED_MEMORY) and are launched through FORGE_LAUNCH,
// so one source serves both modes.
// bf16 is __nv_bfloat16 with __float2bfloat16 (round to nearest even) and
// __bfloat162float in both modes. Also: error checks that throw forge::Error
// with the call and location, and the warp and block reductions the kernels
// share.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_namespace.hpp"
#include "core/error.hpp"

#ifdef FORGE_CUDA_EMULATION
#include "backend/cuda/cuda_emulation.hpp"
#define FORGE_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::forge_emu::launch(::forge_emu::kernel_address(kernel), (grid), (block), (smem), [&] { kernel(__VA_ARGS__); })
#define FORGE_SHARED_MEMORY(T, name) T* name = reinterpret_cast<T*>(::forge_emu::shared_memory())
#else
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define FORGE_LAUNCH(kernel, grid, block, smem, stream, ...)          \
  do {                                                                \
    kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__);       \
    FORGE_CUDA_CHECK(cudaGetLastError());                             \
  } while (0)
#define FORGE_SHARED_MEMORY(T, name)                   \
  extern __shared__ float4 forge_shared_memory_[];     \
  T* name = reinterpret_cast<T*>(forge_shared_memory_)
#endif

#define FORGE_CUDA_CHECK(expr)                                                          \
  do {                                                                                  \
    const cudaError_t forge_err_ = (expr);                                              \
    if (forge_err_ != cudaSuccess)                                                      \
      throw ::forge::Error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                           ": " #expr ": " + cudaGetErrorString(forge_err_));           \
  } while (0)

#define FORGE_CUBLAS_CHECK(expr)                                                        \
  do {                                                                                  \
    const cublasStatus_t forge_st_ = (expr);                                            \
    if (forge_st_ != CUBLAS_STATUS_SUCCESS)                                             \
      throw ::forge::Error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                           ": " #expr ": " + cublasGetStatusString(forge_st_));         \
  } while (0)

FORGE_CUDA_NAMESPACE_BEGIN

constexpr unsigned kFullWarp = 0xffffffffu;

template <class T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFullWarp, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(kFullWarp, x, o));
  return x;
}

// Sum over a 1-D block whose size is a multiple of 32; every thread gets the
// result. scratch: 32 values of shared memory, free for reuse on return.
template <class T>
__device__ __forceinline__ T block_sum(T x, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  x = warp_sum(x);
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : T(0);
  x = warp_sum(x);
  __syncthreads();
  return x;
}

__device__ __forceinline__ float block_max(float x, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  x = warp_max(x);
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < static_cast<int>(blockDim.x >> 5) ? scratch[lane] : -INFINITY;
  x = warp_max(x);
  __syncthreads();
  return x;
}

inline unsigned grid_for(size_t n, unsigned threads, unsigned max_blocks = 4096) {
  const size_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > max_blocks ? max_blocks : b));
}

FORGE_CUDA_NAMESPACE_END
