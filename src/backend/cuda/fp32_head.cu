// See fp32_head.cuh.
#include "backend/cuda/fp32_head.cuh"

#include <algorithm>

#include "backend/cuda/bf16.cuh"
#include "backend/softmax_moments.hpp"
#include "backend/cuda/gemm.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kThreads = 256;
constexpr size_t kMaxTileFloats = size_t(1) << 24;

// What the per-row kernels need; the tile is [nr, nc] at z with row stride ldz.
struct HeadTileParams {
  const int32_t* row_begin;
  const int32_t* target;
  float* logprob;
  const float* dlogprob;
  float* lse;
  float* entropy;
  double* stats;  // m [R], s [R], t [R]
  float* z;
  int R, ldz, r0, nr, v0, nc;
  float inv_temperature;
  bool first;
};

__global__ void __launch_bounds__(kThreads) head_stats_kernel(const HeadTileParams p) {
  FORGE_SHARED_MEMORY(double, scratch);  // 32 doubles; block_max uses it as floats
  const int row = p.r0 + blockIdx.x;
  const float* z = p.z + size_t(blockIdx.x) * p.ldz;
  // softmax_moments.hpp's (m, s, t); the exponentials in FP32, their sums
  // in FP64.
  float m = -INFINITY;
  double s = 0.0, t = 0.0;
  for (int c = threadIdx.x; c < p.nc; c += blockDim.x) {
    const float x = z[c];
    if (x > m) {
      const double corr = expf(m - x);
      t = rebased_moment(t, s, m, x, corr);
      s = s * corr + 1.0;
      m = x;
    } else {
      const float d = x - m;
      const double e = expf(d);
      s += e;
      t += e * d;
    }
  }
  const float M = block_max(m, reinterpret_cast<float*>(scratch));
  const double f = m == -INFINITY ? 0.0 : double(expf(m - M));
  const double shifted_t = rebased_moment(t, s, m, M, f);
  s = block_sum(s * f, scratch);
  t = block_sum(shifted_t, scratch);
  if (threadIdx.x != 0) return;
  double* sm = p.stats + row;
  double* ss = p.stats + p.R + row;
  double* st = p.stats + 2 * p.R + row;
  if (p.first) {
    *sm = M;
    *ss = s;
    *st = t;
  } else {
    const double mx = fmax(*sm, double(M));
    const double a = exp(*sm - mx), b = exp(double(M) - mx);
    *st = rebased_moment(*st, *ss, *sm, mx, a) + rebased_moment(t, s, M, mx, b);
    *ss = *ss * a + s * b;
    *sm = mx;
  }
  if (p.row_begin)
    for (int e = p.row_begin[row]; e < p.row_begin[row + 1]; ++e) {
      const int tg = p.target[e];
      if (tg >= p.v0 && tg < p.v0 + p.nc) p.logprob[e] = z[tg - p.v0];  // minus lse later
    }
}

__global__ void head_finalize_kernel(const HeadTileParams p) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= p.nr) return;
  const int row = p.r0 + r;
  const double m = p.stats[row], s = p.stats[p.R + row], t = p.stats[2 * p.R + row];
  const float lse = float(m + log(s));
  p.lse[row] = lse;
  if (p.entropy) p.entropy[row] = float(log(s) - t / s);
  if (p.row_begin)
    for (int e = p.row_begin[row]; e < p.row_begin[row + 1]; ++e) p.logprob[e] -= lse;
}

// z (logits tile) -> dz in place.
__global__ void __launch_bounds__(kThreads) head_dz_kernel(const HeadTileParams p) {
  const int row = p.r0 + blockIdx.x;
  float* z = p.z + size_t(blockIdx.x) * p.ldz;
  const int e0 = p.row_begin[row], e1 = p.row_begin[row + 1];
  float G = 0.0f;
  for (int e = e0; e < e1; ++e) G += p.dlogprob[e];
  const float lse = p.lse[row];
  for (int c = threadIdx.x; c < p.nc; c += blockDim.x) {
    float val = -G * expf(z[c] - lse);
    for (int e = e0; e < e1; ++e)
      if (p.target[e] == p.v0 + c) val += p.dlogprob[e];
    z[c] = val * p.inv_temperature;
  }
}

int vocab_chunk(const HeadArgs& a) { return std::max(1, std::min(a.vocab_chunk, a.V)); }

int rows_per_tile(int R, int chunk) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(R, kMaxTileFloats / chunk)));
}

HeadTileParams tile_params(const HeadArgs& a, const HeadWorkspace& ws) {
  HeadTileParams p{};
  p.row_begin = a.row_begin;
  p.target = a.target;
  p.logprob = a.logprob;
  p.lse = a.lse;
  p.entropy = a.entropy;
  p.stats = ws.stats;
  p.R = a.R;
  p.inv_temperature = a.inv_temperature;
  return p;
}

// Logits of rows [r0, r0+nr) and columns [v0, v0+nc) into p.z (row stride p.ldz).
void logits_tile(const HeadArgs& a, const HeadTileParams& p, cublasHandle_t blas) {
  gemm_row_major(blas, false, true, p.nr, p.nc, a.d, a.inv_temperature,
                 a.hidden + size_t(p.r0) * a.d, a.d, a.weight + size_t(p.v0) * a.d, a.d, 0.0f,
                 p.z, p.ldz);
}

// The hidden states the head computes with: the caller's, or (bf16 mode)
// their bf16 rounding in ws.hidden_bf16.
HeadArgs with_head_hidden(const HeadArgs& args, const HeadWorkspace& ws, cudaStream_t stream) {
  HeadArgs a = args;
  if (ws.hidden_bf16) {
    launch_round_to_bf16(args.hidden, args.R, args.d, args.d, ws.hidden_bf16, args.d, stream);
    a.hidden = ws.hidden_bf16;
  }
  return a;
}
}  // namespace

size_t head_tile_floats(int R, int V, int chunk_request) {
  const int chunk = std::max(1, std::min(chunk_request, V));
  return size_t(rows_per_tile(R, chunk)) * chunk;
}

void launch_head_fwd(const HeadArgs& args, const HeadWorkspace& ws, cublasHandle_t blas,
                     cudaStream_t stream) {
  if (args.R <= 0) return;
  const HeadArgs a = with_head_hidden(args, ws, stream);
  const int chunk = vocab_chunk(a), rpt = rows_per_tile(a.R, chunk);
  HeadTileParams p = tile_params(a, ws);
  for (p.r0 = 0; p.r0 < a.R; p.r0 += rpt) {
    p.nr = std::min(rpt, a.R - p.r0);
    for (p.v0 = 0; p.v0 < a.V; p.v0 += chunk) {
      p.nc = std::min(chunk, a.V - p.v0);
      p.first = p.v0 == 0;
      if (a.logits) {
        p.z = a.logits + size_t(p.r0) * a.V + p.v0;
        p.ldz = a.V;
      } else {
        p.z = ws.tile;
        p.ldz = p.nc;
      }
      logits_tile(a, p, blas);
      FORGE_LAUNCH(head_stats_kernel, unsigned(p.nr), kThreads, 32 * sizeof(double), stream, p);
    }
    FORGE_LAUNCH(head_finalize_kernel, unsigned((p.nr + 127) / 128), 128u, 0, stream, p);
  }
}

void launch_head_bwd(const HeadArgs& args, const HeadGrads& g, const HeadWorkspace& ws,
                     cublasHandle_t blas, cudaStream_t stream) {
  if (args.R <= 0) return;
  const HeadArgs a = with_head_hidden(args, ws, stream);
  FORGE_CUDA_CHECK(cudaMemsetAsync(g.dhidden, 0, size_t(a.R) * a.d * sizeof(float), stream));
  const int chunk = vocab_chunk(a), rpt = rows_per_tile(a.R, chunk);
  HeadTileParams p = tile_params(a, ws);
  p.dlogprob = g.dlogprob;
  p.z = ws.tile;
  for (p.r0 = 0; p.r0 < a.R; p.r0 += rpt) {
    p.nr = std::min(rpt, a.R - p.r0);
    for (p.v0 = 0; p.v0 < a.V; p.v0 += chunk) {
      p.nc = p.ldz = std::min(chunk, a.V - p.v0);
      logits_tile(a, p, blas);
      FORGE_LAUNCH(head_dz_kernel, unsigned(p.nr), kThreads, 0, stream, p);
      // dH[rows] += dz W[cols] ;  dW[cols] += dz^T H[rows]
      gemm_row_major(blas, false, false, p.nr, a.d, p.nc, 1.0f, p.z, p.ldz,
                     a.weight + size_t(p.v0) * a.d, a.d, 1.0f, g.dhidden + size_t(p.r0) * a.d, a.d);
      gemm_row_major(blas, true, false, p.nc, a.d, p.nr, 1.0f, p.z, p.ldz,
                     a.hidden + size_t(p.r0) * a.d, a.d, 1.0f, g.dweight + size_t(p.v0) * a.d, a.d);
    }
  }
}

FORGE_CUDA_NAMESPACE_END
