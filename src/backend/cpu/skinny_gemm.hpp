// Skinny GEMM on the CPU: a few rows of activations against weight rows,
//   C[m][n] = alpha sum_k A[m][k] W[n][k] + beta C[m][n],  M <= kSkinnyMaxRows,
// the shape of every forward GEMM of a decode step and of the LM head on its
// sampling rows. OpenBLAS packs all of W on every such call, and packing the
// weights, not multiplying them, is then most of the time; these kernels read
// W once, in place:
//   M <= 4    dot products: M activation rows against 16 (M = 1) or 24 / M
//             weight rows at once, 16 lanes of k per FMA, then one
//             transposing lane-sum tree per 16 outputs; W streams once
//   M 5..8    A transposed once into A^T [K][8]; per k, A^T[k][0:8] *
//             broadcast(W[n][k]) for 16 weight rows in 8-lane registers
//   M > 8     A transposed once into A^T [K][M] (M padded to 16); a tile of 8
//             weight rows x 32 activation rows accumulates, per k,
//             A^T[k][m0:m0+32] * broadcast(W[n][k]) into 16 AVX-512 registers
// (bench_decode_gemm: per decode step of the agent policy, M 2..8, 1.2-1.3x
// OpenBLAS, where the earlier 16-row padding of every M > 1 ran 0.5-0.9x.)
// Those are the AVX-512 tiles (x86-64-v4 variant, or native on an AVX-512
// machine). With AVX2 (x86-64-v3, or native on an AVX2 machine: 8 lanes, 16
// registers) only M >= 16 is taken, in tiles of 6 weight rows x 16
// activation rows (M padded to 8): with fewer rows BLIS's AVX2
// configuration measured as fast or faster (docs/performance.md, "A Zen 1").
// Every output element is summed by one thread in a fixed order, so the result does
// not depend on the thread count. skinny_gemm_nt returns false (and computes
// nothing) in the x86-64 variant, under 16 rows with AVX2, or where the shape
// is not skinny, and the caller uses BLAS.
#pragma once
#include "backend/cpu/cpu_backend.hpp"  // FORGE_CPU_NS

namespace forge::FORGE_CPU_NS {

constexpr int kSkinnyMaxRows = 128;

bool skinny_gemm_nt(int M, int N, int K, float alpha, const float* A, int lda, const float* W, int ldw,
                    float beta, float* C, int ldc);

}  // namespace forge::FORGE_CPU_NS

#ifdef FORGE_CPU_BASELINE_ALIAS
namespace forge {
using FORGE_CPU_NS::kSkinnyMaxRows;
using FORGE_CPU_NS::skinny_gemm_nt;
}
#endif
