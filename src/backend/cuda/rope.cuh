// Rotary position embedding, the CPU convention: pairs (2i, 2i+1) of each of
// n_heads heads (head h at x + t * ld + h * head_dim) rotate by
// angle pos[t] * inv_freq[i]; inverse rotates back (the backward).
// The angle and its sine and cosine are computed in FP64 (sinpi/cospi of
// angle/pi), from the caller's FP64 inverse frequencies (copied into the
// launch parameters), then rounded to FP32: the CPU backend's values, at any
// position.
// One thread per (token, pair): one sincos serves all heads of the row.
// In place, or (y16, for a GEMM or the bf16 attention, which round their
// inputs anyway) into packed bf16 rows of ld: the rotated heads and the
// row's other columns, x unchanged (one pass instead of rotating in place
// and rounding after: 6 bytes a value instead of 8 + 6 for the rotated ones).
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

constexpr int kRopeMaxPairs = 128;  // head_dim <= 256

struct RopeParams {
  const float* x = nullptr;
  float* x_out = nullptr;  // in place: x; null when writing y16
  const int32_t* pos = nullptr;
  int T = 0, n_heads = 0, head_dim = 0, ld = 0;
  bool inverse = false;
  __nv_bfloat16* y16 = nullptr;  // rotated x and its other columns, in bf16
  double inv_freq[kRopeMaxPairs];
};

// In place on x. Throws forge::Error for head_dim > 2 * kRopeMaxPairs or odd.
void launch_rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
                 const double* inv_freq, bool inverse, cudaStream_t stream);
// x left as it is; y16 gets the rotated heads and the row's other columns.
void launch_rope_bf16(const float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
                      const double* inv_freq, bool inverse, __nv_bfloat16* y16, cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
