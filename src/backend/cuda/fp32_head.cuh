// FP32 LM head on the GPU (docs/architecture.md, "FP32 head"), the math of
// model/backend.hpp: z = (H W^T) * inv_temperature, lse, logprob of targets,
// entropy = lse - sum p z; backward of L = sum_e g_e logprob_e:
//   dz_rv = inv_temperature * (sum_{e in r, target_e = v} g_e - G_r p_rv),
//   G_r = sum_{e in r} g_e;  dH = dz W ;  dW += dz^T H.
//
// Chunked over the vocabulary (vocab_chunk columns) and over rows (at most
// 2^24 logits per tile): per tile, cuBLAS writes the logits tile (into the
// caller's logits when asked for, else into scratch), then
//   stats kernel, block per row: each thread keeps an online (max m,
//     s = sum e^{z-m}, t = sum e^{z-m} (z - m)) over its columns, s and t in
//     FP64; the block merges them and folds the tile into the row's running
//     (m, s, t) (FP64); the row's target logits that fall in the tile are
//     picked up.
//   finalize kernel, thread per row: lse = m + log s, entropy = log s - t / s
//     (no cancellation at the size of lse, and s = 1 + a peaked row's tail
//     of 1e-7 keeps its digits, which FP32 rounded away),
//     logprob_e = z_target - lse.
// Backward recomputes the tile, turns it into dz in place (block per row),
// and issues the two GEMMs. [R, V] is never stored unless logits are asked
// for. Traffic per tile: the logits tile is written by the GEMM and read once
// by the stats kernel (twice more in backward); the GEMM epilogue fusion that
// would avoid this round trip is future work.
//
// bf16 mode (ws.hidden_bf16 set): H is first rounded to bf16 values (kept in
// FP32 storage) and every GEMM above uses the rounded H; W, the logits, the
// statistics, dz, dH and dW stay FP32 (FP32 accumulation throughout).
#pragma once
#include <cstddef>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

// Scratch for the head: 3 * R floats of row statistics and the logits tile.
struct HeadWorkspace {
  double* stats = nullptr;       // [3 * R]: m, s, t
  float* tile = nullptr;         // [head_tile_floats(R, V, chunk)]
  float* hidden_bf16 = nullptr;  // bf16 mode: [R * d], H rounded; null: FP32
};

size_t head_tile_floats(int R, int V, int vocab_chunk);

void launch_head_fwd(const HeadArgs& a, const HeadWorkspace& ws, cublasHandle_t blas,
                     cudaStream_t stream);
void launch_head_bwd(const HeadArgs& a, const HeadGrads& g, const HeadWorkspace& ws,
                     cublasHandle_t blas, cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
