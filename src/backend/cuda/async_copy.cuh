// Asynchronous copies from global to shared memory (sm_80 and later):
//   cp.async.cg.shared.global [dst], [src], 16, n   (16 bytes, L2 only)
//   cp.async.ca.shared.global [dst], [src], 4, n    (4 bytes)
// copy n bytes (0 <= n <= the size; the rest of the destination is
// zero-filled, so n = 0 writes zeros and reads nothing) without passing
// through registers. A thread's copies since its last commit form a group;
// cp_async_wait_all waits for all of the thread's groups, and a
// __syncthreads after it makes every thread's copies visible to the block.
// Under FORGE_CUDA_EMULATION a copy lands at the thread's wait
// (cuda_emulation.hpp), so reading a tile early shows in the tests.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
#ifdef FORGE_CUDA_EMULATION
  forge_emu::cp_async(dst, src, 16, src_bytes);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(src_bytes) : "memory");
#endif
}

__device__ __forceinline__ void cp_async_4(void* dst, const void* src, int src_bytes) {
#ifdef FORGE_CUDA_EMULATION
  forge_emu::cp_async(dst, src, 4, src_bytes);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(addr), "l"(src), "r"(src_bytes) : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#ifndef FORGE_CUDA_EMULATION
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void cp_async_wait_all() {
#ifdef FORGE_CUDA_EMULATION
  forge_emu::cp_async_wait_all();
#else
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

FORGE_CUDA_NAMESPACE_END
