// The emulation harness itself: block barriers order shared-memory writes
// and reads, shuffles exchange across lanes (xor, down, broadcast, partial
// last warp), atomics from many blocks, 2-D blocks and grids.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "cuda/cuda_compat.cuh"

namespace {

// out[block] = sum of in over the block's elements, through shared memory
// and a tree of __syncthreads (every step reads what other threads wrote).
__global__ void tree_sum(const int* in, int* out) {
  FORGE_SHARED_MEMORY(int, s);
  const unsigned t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

__global__ void shuffles(int* xor_out, int* down_out, int* bcast_out) {
  const int v = static_cast<int>(threadIdx.x) * 10;
  xor_out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 5);
  down_out[threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 3);
  bcast_out[threadIdx.x] = __shfl_sync(0xffffffffu, v, 7);
}

__global__ void atomics(float* total, int* count) {
  atomicAdd(total, 0.5f);
  atomicAdd(count, 1);
}

__global__ void index_2d(int* out) {
  const unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
  out[y * gridDim.x * blockDim.x + x] = static_cast<int>(y * 1000 + x);
}

TEST(EmulationHarness, BarriersOrderSharedMemory) {
  const int blocks = 3, threads = 128;
  std::vector<int> in(blocks * threads), out(blocks);
  std::iota(in.begin(), in.end(), 1);
  FORGE_LAUNCH(tree_sum, blocks, threads, threads * sizeof(int), nullptr, in.data(), out.data());
  for (int b = 0; b < blocks; ++b) {
    const int first = b * threads + 1, last = (b + 1) * threads;
    EXPECT_EQ(out[b], (first + last) * threads / 2);
  }
}

TEST(EmulationHarness, WarpShuffles) {
  const int threads = 48;  // one full warp and one of 16 lanes
  std::vector<int> x(threads), d(threads), b(threads);
  FORGE_LAUNCH(shuffles, 1, threads, 0, nullptr, x.data(), d.data(), b.data());
  for (int t = 0; t < threads; ++t) {
    const int warp0 = t / 32 * 32, lane = t % 32, lanes = t < 32 ? 32 : 16;
    const int xs = lane ^ 5;
    EXPECT_EQ(x[t], (xs < lanes ? warp0 + xs : t) * 10) << t;
    EXPECT_EQ(d[t], (lane + 3 < lanes ? t + 3 : t) * 10) << t;
    EXPECT_EQ(b[t], (warp0 + 7) * 10) << t;
  }
}

TEST(EmulationHarness, AtomicsAcrossBlocks) {
  float total = 0;
  int count = 0;
  FORGE_LAUNCH(atomics, 40, 64, 0, nullptr, &total, &count);
  EXPECT_EQ(count, 40 * 64);
  EXPECT_EQ(total, 0.5f * 40 * 64);
}

TEST(EmulationHarness, TwoDimensionalIndices) {
  const dim3 grid(3, 2), block(4, 5);
  std::vector<int> out(3 * 4 * 2 * 5, -1);
  FORGE_LAUNCH(index_2d, grid, block, 0, nullptr, out.data());
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 12; ++x) EXPECT_EQ(out[y * 12 + x], y * 1000 + x);
}

}  // namespace
