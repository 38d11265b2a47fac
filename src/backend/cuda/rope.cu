// See rope.cuh.
#include "backend/cuda/rope.cuh"

#include <cmath>

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kThreads = 128;
constexpr double kPi = 3.14159265358979323846;

// The pair (a, b) rotated by the angle of (cs, sn), with explicit fused
// multiply-adds: both outputs below (FP32 and bf16) must round the same
// products alike, whatever nvcc would contract.
__device__ __forceinline__ void rotate(float a, float b, float cs, float sn, float& x, float& y) {
  x = __fmaf_rn(a, cs, -(b * sn));
  y = __fmaf_rn(a, sn, b * cs);
}

__global__ void __launch_bounds__(kThreads) rope_kernel(const RopeParams p) {
  const int half = p.head_dim / 2;
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= p.T * half) return;
  const int t = idx / half, i = idx - t * half;
  // sinpi/cospi of angle/pi: exact argument reduction for any position, where
  // sin/cos of large FP64 arguments take a slow path through local memory.
  const double x = p.pos[t] * p.inv_freq[i] * (1.0 / kPi);
  const double s = sinpi(x), c = cospi(x);
  const float cs = static_cast<float>(c);
  const float sn = p.inverse ? -static_cast<float>(s) : static_cast<float>(s);
  const float* row = p.x + size_t(t) * p.ld + 2 * i;
  if (p.x_out) {
    float* row_out = p.x_out + size_t(t) * p.ld + 2 * i;
    for (int h = 0; h < p.n_heads; ++h) {
      const float* v = row + h * p.head_dim;
      float* o = row_out + h * p.head_dim;
      rotate(v[0], v[1], cs, sn, o[0], o[1]);
    }
    return;
  }
  // Into bf16: the rotated heads, then the row's other columns (pairs 2i,
  // 2i+1 of each head_dim-wide group after them, and the odd ends).
  __nv_bfloat16* out = p.y16 + size_t(t) * p.ld + 2 * i;
  const int rotated = p.n_heads * p.head_dim;
  for (int h = 0; h < p.n_heads; ++h) {
    const float* v = row + h * p.head_dim;
    float x, y;
    rotate(v[0], v[1], cs, sn, x, y);
    out[h * p.head_dim] = __float2bfloat16(x);
    out[h * p.head_dim + 1] = __float2bfloat16(y);
  }
  for (int c = rotated; c + 2 * i < p.ld; c += p.head_dim) {
    out[c] = __float2bfloat16(row[c]);
    if (c + 2 * i + 1 < p.ld) out[c + 1] = __float2bfloat16(row[c + 1]);
  }
}

void launch(const float* x, float* x_out, __nv_bfloat16* y16, const int32_t* pos, int T, int n_heads, int head_dim,
            int ld, const double* inv_freq, bool inverse, cudaStream_t stream) {
  FORGE_CHECK(head_dim % 2 == 0 && head_dim / 2 <= kRopeMaxPairs,
              "CUDA rope supports even head_dim up to " + std::to_string(2 * kRopeMaxPairs) +
                  ", got " + std::to_string(head_dim));
  if (T <= 0) return;
  RopeParams p;
  p.x = x;
  p.x_out = x_out;
  p.pos = pos;
  p.T = T;
  p.n_heads = n_heads;
  p.head_dim = head_dim;
  p.ld = ld;
  p.inverse = inverse;
  p.y16 = y16;
  for (int i = 0; i < head_dim / 2; ++i) p.inv_freq[i] = inv_freq[i];
  const int n = T * (head_dim / 2);
  FORGE_LAUNCH(rope_kernel, unsigned((n + kThreads - 1) / kThreads), kThreads, 0, stream, p);
}
}  // namespace

void launch_rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld, const double* inv_freq,
                 bool inverse, cudaStream_t stream) {
  launch(x, x, nullptr, pos, T, n_heads, head_dim, ld, inv_freq, inverse, stream);
}

void launch_rope_bf16(const float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
                      const double* inv_freq, bool inverse, __nv_bfloat16* y16, cudaStream_t stream) {
  launch(x, nullptr, y16, pos, T, n_heads, head_dim, ld, inv_freq, inverse, stream);
}

FORGE_CUDA_NAMESPACE_END
