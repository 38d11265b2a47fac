// The emulation harness itself: block barriers order shared-memory writes
// and reads, shuffles exchange across lanes (xor, down, broadcast, partial
// last warp), atomics from many blocks, 2-D blocks and grids; bf16 rounds to
// nearest even, and cublasGemmEx on bf16 inputs is SGEMM on their values;
// the tensor-core MMA computes A B + C with the PTX ISA's fragment layouts.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "backend/cuda/cuda_compat.cuh"
#include "backend/cuda/mma.cuh"

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

// One m16n8k16 MMA: each lane gathers its fragments of A (16 x 16, row-major)
// and B (16 x 8, row-major here) as the PTX ISA lists them (row and column of
// element i of each fragment), D starts at C, and each lane writes back its
// four elements of D.
__global__ void mma_once(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C, float* D) {
  const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
  auto bits = [](__nv_bfloat16 x) { return uint32_t(__bfloat16_as_ushort(x)); };
  uint32_t a[4], b[2];
  for (int r = 0; r < 4; ++r) {
    a[r] = 0;
    for (int e = 0; e < 2; ++e) {
      const int i = 2 * r + e;
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      a[r] |= bits(A[row * 16 + col]) << (16 * e);
    }
  }
  for (int r = 0; r < 2; ++r) {
    b[r] = 0;
    for (int e = 0; e < 2; ++e) {
      const int i = 2 * r + e, row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
      b[r] |= bits(B[row * 8 + g]) << (16 * e);
    }
  }
  float d[4];
  for (int i = 0; i < 4; ++i) d[i] = C[(g + (i >= 2 ? 8 : 0)) * 8 + t * 2 + (i & 1)];
  forge::cuda::mma_bf16_m16n8k16(d, a, b);
  for (int i = 0; i < 4; ++i) D[(g + (i >= 2 ? 8 : 0)) * 8 + t * 2 + (i & 1)] = d[i];
}

// ldmatrix x4 on a 16 x 16 bf16 tile in shared memory (row pitch 24): lane l
// gives row l % 16 at column 8 (l / 16); out[l][i] is register i.
__global__ void ldmatrix_once(const uint16_t* tile, uint32_t* out, bool trans) {
  FORGE_SHARED_MEMORY(uint16_t, s);
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < 16 * 24; e += 32) s[e] = tile[e];
  __syncwarp();
  uint32_t r[4];
  const uint16_t* row = s + (lane % 16) * 24 + (lane / 16) * 8;
  if (trans)
    forge::cuda::ldmatrix_x4_trans(r, row);
  else
    forge::cuda::ldmatrix_x4(r, row);
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
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
  std::vector<float> c(4, 1.0f);
  const float alpha = 2, beta = 1;
  ASSERT_EQ(cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &alpha, a16.data(), CUDA_R_16BF, 3,
                         b16.data(), CUDA_R_16BF, 3, &beta, c.data(), CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      float want = 0;
      for (int k = 0; k < 3; ++k) want += __bfloat162float(a16[k * 3 + i]) * b[j * 3 + k];
      EXPECT_EQ(c[j * 2 + i], 1.0f + alpha * want) << i << "," << j;
    }
  EXPECT_EQ(__bfloat162float(a16[0]), 1.0f);
  EXPECT_NE(cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &alpha, a.data(), CUDA_R_32F, 3,
                         b16.data(), CUDA_R_16BF, 3, &beta, c.data(), CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
}

TEST(EmulationHarness, TensorCoreMmaFollowsThePtxLayouts) {
  // Distinct small integers: every product and sum is exact, so any misplaced
  // element changes D.
  std::vector<__nv_bfloat16> A(16 * 16), B(16 * 8);
  std::vector<float> C(16 * 8), D(16 * 8, -1.0f);
  for (int i = 0; i < 16 * 16; ++i) A[i] = __float2bfloat16(float((i * 7) % 23 - 11));
  for (int i = 0; i < 16 * 8; ++i) B[i] = __float2bfloat16(float((i * 5) % 19 - 9));
  for (int i = 0; i < 16 * 8; ++i) C[i] = float(i % 13);
  FORGE_LAUNCH(mma_once, 1, 32, 0, nullptr, A.data(), B.data(), C.data(), D.data());
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      double want = C[r * 8 + c];
      for (int k = 0; k < 16; ++k) want += double(__bfloat162float(A[r * 16 + k])) * __bfloat162float(B[k * 8 + c]);
      EXPECT_EQ(D[r * 8 + c], float(want)) << "D[" << r << "][" << c << "]";
    }
}

// The PTX ISA's ldmatrix: matrix i of the x4 is rows 8 (i % 2) .. + 7 at
// columns 8 (i / 2) .. + 7 (the addresses lanes 8 i .. 8 i + 7 gave); lane l
// receives row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of it (low half
// first), or with .trans rows 2 (l % 4), 2 (l % 4) + 1 at column l / 4.
TEST(EmulationHarness, LdmatrixFollowsThePtxLayout) {
  std::vector<uint16_t> tile(16 * 24);
  for (size_t e = 0; e < tile.size(); ++e) tile[e] = static_cast<uint16_t>(1000 + e);  // distinct
  for (bool trans : {false, true}) {
    std::vector<uint32_t> out(32 * 4);
    FORGE_LAUNCH(ldmatrix_once, 1, 32, 16 * 24 * sizeof(uint16_t), nullptr, tile.data(), out.data(), trans);
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        const int r0 = 8 * (i % 2), c0 = 8 * (i / 2), g = l / 4, t = l % 4;
        auto at = [&](int r, int c) { return uint32_t(tile[(r0 + r) * 24 + c0 + c]); };
        const uint32_t want = trans ? at(2 * t, g) | at(2 * t + 1, g) << 16 : at(g, 2 * t) | at(g, 2 * t + 1) << 16;
        EXPECT_EQ(out[l * 4 + i], want) << (trans ? "trans " : "") << "lane " << l << " register " << i;
      }
  }
}

}  // namespace
