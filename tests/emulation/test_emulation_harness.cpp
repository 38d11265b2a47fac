// The emulation harness itself: block barriers order shared-memory writes
// and reads, shuffles exchange across lanes (xor, down, broadcast, partial
// last warp), atomics from many blocks, 2-D blocks and grids; bf16 rounds to
// nearest even, and cublasGemmEx on bf16 inputs is SGEMM on their values (a bf16 C rounded);
// the tensor-core MMAs (mma.sync, wgmma) and ldmatrix follow the PTX ISA's fragment layouts;
// cp.async lands at the thread's wait, zero-filled past its source bytes; a
// wgmma operand or accumulator written while its MMA is in flight aborts the
// run, as does a launch a device refuses.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/cuda_compat.cuh"
#include "backend/cuda/fragment_layouts.hpp"
#include "backend/cuda/wgmma.cuh"

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

// Thread t copies 16 bytes (4 ints) from in + 4t, thread t's last int only
// where t is even (12 source bytes where odd); before its wait, it reads
// what the shared memory held; after the wait and a barrier, its
// neighbour's copy.
__global__ void async_copies(const int* in, int* before, int* after) {
  FORGE_SHARED_MEMORY(int, s);
  const int t = static_cast<int>(threadIdx.x);
  for (int i = 0; i < 4; ++i) s[4 * t + i] = -1;
  __syncthreads();
  forge::cuda::cp_async_16(s + 4 * t, in + 4 * t, t % 2 ? 12 : 16);
  forge::cuda::cp_async_commit();
  before[t] = s[4 * t];
  forge::cuda::cp_async_wait_all();
  __syncthreads();
  for (int i = 0; i < 4; ++i) after[4 * t + i] = s[4 * ((t + 1) % 32) + i];
}

TEST(EmulationHarness, AsyncCopiesLandAtTheWait) {
  std::vector<int> in(128), before(32), after(128);
  std::iota(in.begin(), in.end(), 100);
  FORGE_LAUNCH(async_copies, 1, 32, 128 * sizeof(int), nullptr, in.data(), before.data(), after.data());
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(before[t], -1) << "thread " << t << " saw its copy before waiting";
    const int u = (t + 1) % 32;  // the neighbour whose copies thread t reads
    for (int i = 0; i < 4; ++i) EXPECT_EQ(after[4 * t + i], i == 3 && u % 2 ? 0 : in[4 * u + i]) << t << " " << i;
  }
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

__global__ void count_blocks(int* count) {
  if (threadIdx.x == 0) atomicAdd(count, 1);
}

// What a device refuses at launch aborts here too: an empty grid, grid.y
// or grid.z over 65535, dynamic shared memory over 48 KiB without the
// kernel's opt-in (cudaFuncSetAttribute), more than 1024 threads.
TEST(EmulationHarness, LaunchesADeviceRefusesAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int count = 0;
  EXPECT_DEATH(FORGE_LAUNCH(count_blocks, 0u, 32u, 0, nullptr, &count), "empty grid");
  EXPECT_DEATH(FORGE_LAUNCH(count_blocks, dim3(1, 65536), 32u, 0, nullptr, &count), "grid dimension above");
  EXPECT_DEATH(FORGE_LAUNCH(count_blocks, dim3(1, 1, 65536), 32u, 0, nullptr, &count), "grid dimension above");
  EXPECT_DEATH(FORGE_LAUNCH(count_blocks, 1u, 1025u, 0, nullptr, &count), "block size must be 1..1024");
  EXPECT_DEATH(FORGE_LAUNCH(count_blocks, 1u, 32u, 64 * 1024, nullptr, &count), "without cudaFuncSetAttribute");
  FORGE_LAUNCH(count_blocks, dim3(1, 65535), 1u, 0, nullptr, &count);  // at the limits: runs
  FORGE_LAUNCH(count_blocks, 1u, 1024u, 48 * 1024, nullptr, &count);
  EXPECT_EQ(count, 65535 + 1);
  ASSERT_EQ(cudaFuncSetAttribute(count_blocks, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024), cudaSuccess);
  EXPECT_DEATH(FORGE_LAUNCH(count_blocks, 1u, 32u, 64 * 1024 + 16, nullptr, &count), "without cudaFuncSetAttribute");
  FORGE_LAUNCH(count_blocks, 1u, 32u, 64 * 1024, nullptr, &count);  // opted in
  EXPECT_EQ(count, 65535 + 2);
}

TEST(EmulationHarness, TwoDimensionalIndices) {
  const dim3 grid(3, 2), block(4, 5);
  std::vector<int> out(3 * 4 * 2 * 5, -1);
  FORGE_LAUNCH(index_2d, grid, block, 0, nullptr, out.data());
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 12; ++x) EXPECT_EQ(out[y * 12 + x], y * 1000 + x);
}

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(EmulationHarness, Bf16RoundsToNearestEven) {
  auto rt = [](float x) { return __bfloat162float(__float2bfloat16(x)); };
  const float ulp = 1.0f / 128;                           // bf16 spacing in [1, 2)
  EXPECT_EQ(rt(1.0f + ulp / 2), 1.0f);                    // tie: to the even neighbour
  EXPECT_EQ(rt(1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);      // tie: to the even neighbour
  EXPECT_EQ(rt(1.0f + ulp / 2 + ulp / 4096), 1.0f + ulp); // above the tie: up
  EXPECT_EQ(rt(-1.0f - ulp / 4), -1.0f);
  EXPECT_EQ(rt(bits_to_float(0x7f7fffffu)), INFINITY);     // FLT_MAX rounds past bf16's max
  EXPECT_TRUE(std::isnan(rt(NAN)));
  EXPECT_EQ(rt(3.0f), 3.0f);                              // representable: unchanged
}

TEST(EmulationHarness, GemmExOnBf16Inputs) {
  // Column-major 2x3 times 3x2 with lda = 3 (one padding row).
  // a[0] is not a bf16 value: the product uses its rounding, 1.
  const std::vector<float> a{1.0f + 1.0f / 512, 2, 0, 3, -1, 0, 0.5f, 4, 0}, b{1, 2, 3, -1, 0, 1};
  std::vector<__nv_bfloat16> a16, b16;
  for (float x : a) a16.push_back(__float2bfloat16(x));
  for (float x : b) b16.push_back(__float2bfloat16(x));
  const float alpha = 2, beta = 1;
  // C (column-major 2x2, ld 2) of c_type = alpha A B + beta C, from the bf16 inputs.
  const auto gemm_ex = [&](void* c, cudaDataType_t c_type) {
    return cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &alpha, a16.data(), CUDA_R_16BF, 3, b16.data(),
                        CUDA_R_16BF, 3, &beta, c, c_type, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  const auto product = [&](int i, int j) {  // (A B)[i][j] on the rounded A
    float sum = 0;
    for (int k = 0; k < 3; ++k) sum += __bfloat162float(a16[k * 3 + i]) * b[j * 3 + k];
    return sum;
  };
  std::vector<float> c(4, 1.0f);
  ASSERT_EQ(gemm_ex(c.data(), CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(c[j * 2 + i], 1.0f + alpha * product(i, j)) << i << "," << j;
  EXPECT_EQ(__bfloat162float(a16[0]), 1.0f);
  // bf16 C: beta C read as its bf16 values, the FP32 result rounded to nearest even.
  std::vector<__nv_bfloat16> c16;
  for (float x : {1.0f, 1.0f / 3, -2.5f, 1e-3f}) c16.push_back(__float2bfloat16(x));
  const std::vector<__nv_bfloat16> c16_in = c16;
  ASSERT_EQ(gemm_ex(c16.data(), CUDA_R_16BF), CUBLAS_STATUS_SUCCESS);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      EXPECT_EQ(c16[j * 2 + i].bits,
                __float2bfloat16(__bfloat162float(c16_in[j * 2 + i]) + alpha * product(i, j)).bits)
          << "bf16 C " << i << "," << j;
  EXPECT_NE(cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &alpha, a.data(), CUDA_R_32F, 3,
                         b16.data(), CUDA_R_16BF, 3, &beta, c.data(), CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
}

// The emulated mma.sync and ldmatrix (plain and .trans) against the PTX
// ISA's layouts (backend/cuda/fragment_layouts.hpp; the same check runs on a
// GPU in tests/unit/test_cuda_device.cpp).
TEST(EmulationHarness, FragmentLayoutsFollowThePtxIsa) { EXPECT_EQ(forge::cuda::check_fragment_layouts(), ""); }

// The warpgroup MMA's emulation reads its operands by the PTX ISA's
// no-swizzle descriptors and fragment layouts (the probe on a GPU:
// CudaDevice.WgmmaLayoutsFollowThePtxIsa).
TEST(EmulationHarness, WgmmaLayoutsFollowThePtxIsa) { EXPECT_EQ(forge::cuda::check_wgmma_layouts(), ""); }

// A wgmma's product lands in the accumulators at the wait, not before: a
// kernel that reads them early reads the old values (and fails its tests).
__global__ void wgmma_lands_at_the_wait(float* before, float* after) {
  FORGE_SHARED_MEMORY(uint16_t, s);
  const int r = static_cast<int>(threadIdx.x);
  for (int e = r; e < 64 * 16 + 16 * 16; e += 128) s[e] = 0x3f80;  // bf16 1.0: A and B all ones
  __syncthreads();
  float d[8];
  for (float& x : d) x = 7.0f;
  forge::cuda::wgmma_fence();
  // A 64 x 16 and B 16 x 16 K-major, dense: LBO 128 bytes, SBO 256
  forge::cuda::wgmma_ss<16, 0, 0>(d, forge::cuda::wgmma_desc(s, 128, 256),
                                        forge::cuda::wgmma_desc(s + 64 * 16, 128, 256), true);
  forge::cuda::wgmma_commit();
  before[r] = d[0];
  forge::cuda::wgmma_wait<0>(d);
  after[r] = d[0];
}

TEST(EmulationHarness, WgmmaLandsAtTheWait) {
  std::vector<float> before(128), after(128);
  FORGE_LAUNCH(wgmma_lands_at_the_wait, 1, 128, (64 * 16 + 16 * 16) * 2, nullptr, before.data(), after.data());
  for (int r = 0; r < 128; ++r) {
    EXPECT_EQ(before[r], 7.0f) << "thread " << r << " saw the product before waiting";
    EXPECT_EQ(after[r], 7.0f + 16.0f) << "thread " << r;
  }
}

// A wgmma's shared-memory operands may not change between its issue and its
// wait (the device reads them any time in between): thread 0 writes one
// element of A (how = 1: a store) or copies 16 bytes over B by cp.async
// (how = 2), then waits for the MMA, then (2) for the copy. The store
// fails the MMA; the copy lands only at its wait by default, after the MMA,
// so it fails only with early_copies (copies land as issued), the device's
// other extreme.
__global__ void wgmma_operand_written_in_flight(const uint16_t* twos, int how, float* out) {
  FORGE_SHARED_MEMORY(uint16_t, s);
  const int r = static_cast<int>(threadIdx.x);
  for (int e = r; e < 64 * 16 + 16 * 16; e += 128) s[e] = 0x3f80;  // bf16 1.0: A and B all ones
  __syncthreads();
  float d[8] = {};
  forge::cuda::wgmma_fence();
  forge::cuda::wgmma_ss<16, 0, 0>(d, forge::cuda::wgmma_desc(s, 128, 256),
                                        forge::cuda::wgmma_desc(s + 64 * 16, 128, 256), false);
  forge::cuda::wgmma_commit();
  if (r == 0 && how == 1) s[0] = 0x4000;  // bf16 2.0
  if (r == 0 && how == 2) forge::cuda::cp_async_16(s + 64 * 16, twos, 16);
  forge::cuda::cp_async_commit();
  forge::cuda::wgmma_wait<0>(d);
  forge::cuda::cp_async_wait_all();
  out[r] = d[0];
}

TEST(EmulationHarness, WgmmaOperandWrittenInFlightFails) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<uint16_t> twos(8, 0x4000);
  std::vector<float> out(128);
  const auto run = [&](int how) {
    FORGE_LAUNCH(wgmma_operand_written_in_flight, 1, 128, (64 * 16 + 16 * 16) * 2, nullptr, twos.data(), how,
                 out.data());
  };
  run(0);
  for (int r = 0; r < 128; ++r) ASSERT_EQ(out[r], 16.0f) << "thread " << r;
  EXPECT_DEATH(run(1), "shared-memory A operand written while its MMA was in flight");
  run(2);  // the copy lands at its wait, after the MMA's
  for (int r = 0; r < 128; ++r) ASSERT_EQ(out[r], 16.0f) << "thread " << r;
  EXPECT_DEATH(
      {
        forge_emu::early_copies() = true;
        run(2);
      },
      "shared-memory B operand written while its MMA was in flight");  // (set in the child only)
}

// A wgmma's accumulators are the MMA's from issue to wait: thread 0 writes
// one (how = 1) between them, which fails. Two MMAs chained on the same
// accumulators in two groups, waited for one group at a time, are the
// ISA's allowed reuse and pass (how = 0: d = 2 x 16).
__global__ void wgmma_accumulator_written_in_flight(int how, float* out) {
  FORGE_SHARED_MEMORY(uint16_t, s);
  const int r = static_cast<int>(threadIdx.x);
  for (int e = r; e < 64 * 16 + 16 * 16; e += 128) s[e] = 0x3f80;  // bf16 1.0: A and B all ones
  __syncthreads();
  float d[8] = {};
  const uint64_t a = forge::cuda::wgmma_desc(s, 128, 256), b = forge::cuda::wgmma_desc(s + 64 * 16, 128, 256);
  forge::cuda::wgmma_fence();
  forge::cuda::wgmma_ss<16, 0, 0>(d, a, b, false);
  forge::cuda::wgmma_commit();
  forge::cuda::wgmma_ss<16, 0, 0>(d, a, b, true);
  forge::cuda::wgmma_commit();
  forge::cuda::wgmma_wait<1>(d);
  if (r == 0 && how == 1) d[0] = 5.0f;  // the second MMA is still in flight
  forge::cuda::wgmma_wait<0>(d);
  out[r] = d[0];
}

TEST(EmulationHarness, WgmmaAccumulatorWrittenInFlightFails) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> out(128);
  const auto run = [&](int how) {
    FORGE_LAUNCH(wgmma_accumulator_written_in_flight, 1, 128, (64 * 16 + 16 * 16) * 2, nullptr, how, out.data());
  };
  run(0);
  for (int r = 0; r < 128; ++r) ASSERT_EQ(out[r], 32.0f) << "thread " << r;
  EXPECT_DEATH(run(1), "accumulator register written while its MMA was in flight");
}

}  // namespace
