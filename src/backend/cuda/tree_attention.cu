// See tree_attention.cuh for the math and the tiling.
#include "backend/cuda/tree_attention.cuh"

#include "backend/cuda/bf16.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr int kRows = kAttnTile / kAttnWarps;  // rows (or keys) per warp
constexpr int kChunks = kMaxHeadDim / 32;      // head-dim registers per lane
constexpr unsigned kThreads = 32 * kAttnWarps;
static_assert(kAttnTile == 32, "lanes index the rows of a tile");

__global__ void tile_bounds_kernel(const int32_t* __restrict__ subtree_end, int T,
                                   int32_t* __restrict__ max_end, int32_t* __restrict__ min_end) {
  const int tile = blockIdx.x * blockDim.x + threadIdx.x;
  if (tile * kAttnTile >= T) return;
  const int j0 = tile * kAttnTile, j1 = min(T, j0 + kAttnTile);
  int32_t mx = 0, mn = T;
  for (int j = j0; j < j1; ++j) {
    mx = max(mx, subtree_end[j]);
    mn = min(mn, subtree_end[j]);
  }
  max_end[tile] = mx;
  min_end[tile] = mn;
}

__device__ __forceinline__ void load_tile(float* dst, const float* src, int ld, int r0, int T, int D,
                                          float mul) {
  for (int e = threadIdx.x; e < kAttnTile * D; e += blockDim.x) {
    const int i = e / D, d = e - i * D;
    dst[i * (D + 1) + d] = r0 + i < T ? src[size_t(r0 + i) * ld + d] * mul : 0.0f;
  }
}

__global__ void __launch_bounds__(kThreads) tree_attention_fwd_kernel(const TreeAttentionParams p) {
  FORGE_SHARED_MEMORY(float, smem);
  const int D = p.head_dim, Dp = D + 1, HD = p.n_heads * D;
  float* Qs = smem;                   // [tile][Dp], pre-scaled
  float* Ks = Qs + kAttnTile * Dp;    // [tile][Dp]
  float* Vs = Ks + kAttnTile * Dp;    // [tile][Dp]
  float* Ps = Vs + kAttnTile * Dp;    // [warps][tile]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.y, kvh = h / (p.n_heads / p.n_kv_heads);
  const int q0 = blockIdx.x * kAttnTile, q1 = min(p.T, q0 + kAttnTile);
  const int row0 = warp * kRows;  // first row of this warp within the tile
  float* pw = Ps + warp * kAttnTile;

  load_tile(Qs, p.q + h * D, p.ld_qkv, q0, p.T, D, p.scale);
  float m[kRows], l[kRows], o[kRows][kChunks];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) o[r][c] = 0.0f;
  }

  const int last = (q1 - 1) / kAttnTile;
  for (int kt = seen_key_tile_from(p, 0, last, q0); kt <= last; kt = seen_key_tile_from(p, kt + 1, last, q0)) {
    const int k0 = kt * kAttnTile, nk = min(p.T, k0 + kAttnTile) - k0;
    const bool full = tile_all_visible(p, kt, q0, q1);
    __syncthreads();  // the previous tile's K and V are no longer read
    load_tile(Ks, p.k + kvh * D, p.ld_qkv, k0, p.T, D, 1.0f);
    load_tile(Vs, p.v + kvh * D, p.ld_qkv, k0, p.T, D, 1.0f);
    __syncthreads();

    float s[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) s[r] = 0.0f;
    for (int d = 0; d < D; ++d) {
      const float kd = Ks[lane * Dp + d];
#pragma unroll
      for (int r = 0; r < kRows; ++r) s[r] += Qs[(row0 + r) * Dp + d] * kd;
    }
    const int j = k0 + lane;
    const int se = lane < nk ? p.subtree_end[j] : 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = q0 + row0 + r;
      const bool vis = i < q1 && (full || (lane < nk && j <= i && i < se));
      const float sv = vis ? s[r] : -INFINITY;
      const float mx = fmaxf(m[r], warp_max(sv));
      const float mref = mx == -INFINITY ? 0.0f : mx;  // a row that saw nothing yet
      const float pv = expf(sv - mref);
      const float corr = expf(m[r] - mref);
      l[r] = l[r] * corr + warp_sum(pv);
      m[r] = mx;
      pw[lane] = pv;
      __syncwarp();
#pragma unroll
      for (int c = 0; c < kChunks; ++c) o[r][c] *= corr;
      for (int jj = 0; jj < nk; ++jj) {
        const float pj = pw[jj];
#pragma unroll
        for (int c = 0; c < kChunks; ++c)
          if (lane + 32 * c < D) o[r][c] += pj * Vs[jj * Dp + lane + 32 * c];
      }
      __syncwarp();
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = q0 + row0 + r;
    if (i >= q1) continue;
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      if (lane + 32 * c < D) p.out[size_t(i) * HD + h * D + lane + 32 * c] = o[r][c] * inv;
    if (lane == 0) p.lse[size_t(h) * p.T + i] = m[r] + logf(l[r]);
  }
}

// D_i = dO_i . O_i, one warp per (token, head); O from p.out_bf16 where
// given, else p.out; dO from p.dout, else (the caller's bf16 dO) from
// p.dout_bf16. bf16 mode with FP32 dO: dO rounded into p.dout_bf16_out in
// the same pass (one read of dO for both).
__global__ void __launch_bounds__(kThreads) attention_delta_kernel(const TreeAttentionParams p) {
  const int w = blockIdx.x * kAttnWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (w >= p.T * p.n_heads) return;
  const int t = w / p.n_heads, h = w - t * p.n_heads, D = p.head_dim;
  const size_t base = size_t(t) * p.n_heads * D + h * D;
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float g = p.dout ? p.dout[base + d] : widen(p.dout_bf16[base + d]);
    s += g * (p.out_bf16 ? widen(p.out_bf16[base + d]) : p.out[base + d]);
    if (p.dout_bf16_out) p.dout_bf16_out[base + d] = __float2bfloat16(g);
  }
  s = warp_sum(s);
  if (lane == 0) p.delta[size_t(h) * p.T + t] = s;
}

__global__ void __launch_bounds__(kThreads) tree_attention_dkdv_kernel(const TreeAttentionParams p) {
  FORGE_SHARED_MEMORY(float, smem);
  const int D = p.head_dim, Dp = D + 1, HD = p.n_heads * D;
  float* Ks = smem;                            // [tile][Dp] this block's keys
  float* Vs = Ks + kAttnTile * Dp;             // [tile][Dp]
  float* Qs = Vs + kAttnTile * Dp;             // [tile][Dp] query tile, pre-scaled
  float* dOs = Qs + kAttnTile * Dp;            // [tile][Dp]
  float* Ps = dOs + kAttnTile * Dp;            // [keys][queries]
  float* dSs = Ps + kAttnTile * kAttnTile;     // [keys][queries]
  float* lse_s = dSs + kAttnTile * kAttnTile;  // [tile]
  float* delta_s = lse_s + kAttnTile;          // [tile]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kt = blockIdx.x, kvh = blockIdx.y, group = p.n_heads / p.n_kv_heads;
  const int k0 = kt * kAttnTile, nk = min(p.T, k0 + kAttnTile) - k0;
  const int key0 = warp * kRows;  // first key of this warp within the tile

  load_tile(Ks, p.k + kvh * D, p.ld_qkv, k0, p.T, D, 1.0f);
  load_tile(Vs, p.v + kvh * D, p.ld_qkv, k0, p.T, D, 1.0f);
  int se[kRows];
  float dk[kRows][kChunks], dv[kRows][kChunks];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    se[r] = key0 + r < nk ? p.subtree_end[k0 + key0 + r] : 0;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) dk[r][c] = dv[r][c] = 0.0f;
  }
  const int q_end = p.tile_max_end[kt];  // queries at or past it see none of these keys

  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int q0 = k0; q0 < q_end; q0 += kAttnTile) {
      const int nq = min(p.T, q0 + kAttnTile) - q0;
      const bool full = tile_all_visible(p, kt, q0, q0 + nq);
      __syncthreads();  // the previous query tile is no longer read
      load_tile(Qs, p.q + h * D, p.ld_qkv, q0, p.T, D, p.scale);
      load_tile(dOs, p.dout + h * D, HD, q0, p.T, D, 1.0f);
      if (threadIdx.x < kAttnTile) {
        const bool in = static_cast<int>(threadIdx.x) < nq;
        lse_s[threadIdx.x] = in ? p.lse[size_t(h) * p.T + q0 + threadIdx.x] : 0.0f;
        delta_s[threadIdx.x] = in ? p.delta[size_t(h) * p.T + q0 + threadIdx.x] : 0.0f;
      }
      __syncthreads();

      // lane = query q0 + lane against the warp's keys
      float s[kRows], dp[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) s[r] = dp[r] = 0.0f;
      for (int d = 0; d < D; ++d) {
        const float qd = Qs[lane * Dp + d], od = dOs[lane * Dp + d];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          s[r] += qd * Ks[(key0 + r) * Dp + d];
          dp[r] += od * Vs[(key0 + r) * Dp + d];
        }
      }
      const int i = q0 + lane;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int j = k0 + key0 + r;
        const bool vis = lane < nq && key0 + r < nk && (full || (j <= i && i < se[r]));
        const float pv = vis ? expf(s[r] - lse_s[lane]) : 0.0f;
        Ps[(key0 + r) * kAttnTile + lane] = pv;
        dSs[(key0 + r) * kAttnTile + lane] = pv * (dp[r] - delta_s[lane]);
      }
      __syncwarp();
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        for (int ii = 0; ii < nq; ++ii) {
          const float pv = Ps[(key0 + r) * kAttnTile + ii];
          const float ds = dSs[(key0 + r) * kAttnTile + ii];
#pragma unroll
          for (int c = 0; c < kChunks; ++c)
            if (lane + 32 * c < D) {
              dv[r][c] += pv * dOs[ii * Dp + lane + 32 * c];
              dk[r][c] += ds * Qs[ii * Dp + lane + 32 * c];
            }
        }
      }
      __syncwarp();
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (key0 + r >= nk) continue;
    const size_t base = size_t(k0 + key0 + r) * p.ld_qkv + kvh * D;
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      if (lane + 32 * c < D) {
        p.dk[base + lane + 32 * c] = dk[r][c];
        p.dv[base + lane + 32 * c] = dv[r][c];
      }
  }
}

__global__ void __launch_bounds__(kThreads) tree_attention_dq_kernel(const TreeAttentionParams p) {
  FORGE_SHARED_MEMORY(float, smem);
  const int D = p.head_dim, Dp = D + 1, HD = p.n_heads * D;
  float* Qs = smem;                  // [tile][Dp] pre-scaled
  float* dOs = Qs + kAttnTile * Dp;  // [tile][Dp]
  float* Ks = dOs + kAttnTile * Dp;  // [tile][Dp]
  float* Vs = Ks + kAttnTile * Dp;   // [tile][Dp]
  float* dSs = Vs + kAttnTile * Dp;  // [warps][tile]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.y, kvh = h / (p.n_heads / p.n_kv_heads);
  const int q0 = blockIdx.x * kAttnTile, q1 = min(p.T, q0 + kAttnTile);
  const int row0 = warp * kRows;
  float* dsw = dSs + warp * kAttnTile;

  load_tile(Qs, p.q + h * D, p.ld_qkv, q0, p.T, D, p.scale);
  load_tile(dOs, p.dout + h * D, HD, q0, p.T, D, 1.0f);
  float lse[kRows], delta[kRows], dq[kRows][kChunks];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = q0 + row0 + r;
    lse[r] = i < q1 ? p.lse[size_t(h) * p.T + i] : 0.0f;
    delta[r] = i < q1 ? p.delta[size_t(h) * p.T + i] : 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) dq[r][c] = 0.0f;
  }

  const int last = (q1 - 1) / kAttnTile;
  for (int kt = seen_key_tile_from(p, 0, last, q0); kt <= last; kt = seen_key_tile_from(p, kt + 1, last, q0)) {
    const int k0 = kt * kAttnTile, nk = min(p.T, k0 + kAttnTile) - k0;
    const bool full = tile_all_visible(p, kt, q0, q1);
    __syncthreads();
    load_tile(Ks, p.k + kvh * D, p.ld_qkv, k0, p.T, D, 1.0f);
    load_tile(Vs, p.v + kvh * D, p.ld_qkv, k0, p.T, D, 1.0f);
    __syncthreads();

    float s[kRows], dp[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) s[r] = dp[r] = 0.0f;
    for (int d = 0; d < D; ++d) {
      const float kd = Ks[lane * Dp + d], vd = Vs[lane * Dp + d];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        s[r] += Qs[(row0 + r) * Dp + d] * kd;
        dp[r] += dOs[(row0 + r) * Dp + d] * vd;
      }
    }
    const int j = k0 + lane;
    const int se = lane < nk ? p.subtree_end[j] : 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int i = q0 + row0 + r;
      const bool vis = i < q1 && (full || (lane < nk && j <= i && i < se));
      const float pv = vis ? expf(s[r] - lse[r]) : 0.0f;
      dsw[lane] = pv * (dp[r] - delta[r]);
      __syncwarp();
      for (int jj = 0; jj < nk; ++jj) {
        const float ds = dsw[jj];
#pragma unroll
        for (int c = 0; c < kChunks; ++c)
          if (lane + 32 * c < D) dq[r][c] += ds * Ks[jj * Dp + lane + 32 * c];
      }
      __syncwarp();
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int i = q0 + row0 + r;
    if (i >= q1) continue;
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      if (lane + 32 * c < D) p.dq[size_t(i) * p.ld_qkv + h * D + lane + 32 * c] = dq[r][c] * p.scale;
  }
}

size_t tile_floats(int D) { return size_t(kAttnTile) * (D + 1); }

void check_shape(const TreeAttentionParams& p) {
  FORGE_CHECK(p.head_dim >= 1 && p.head_dim <= kMaxHeadDim,
              "CUDA tree attention supports head_dim up to " + std::to_string(kMaxHeadDim) +
                  ", got " + std::to_string(p.head_dim));
  FORGE_CHECK(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0,
              "CUDA tree attention: n_heads = " + std::to_string(p.n_heads) + " must be a multiple of n_kv_heads = " +
                  std::to_string(p.n_kv_heads));
}

void launch_tile_bounds(const TreeAttentionParams& p, cudaStream_t stream) {
  const int tiles = attention_tiles(p.T);
  FORGE_LAUNCH(tile_bounds_kernel, unsigned((tiles + 127) / 128), 128u, 0, stream, p.subtree_end,
               p.T, p.tile_max_end, p.tile_min_end);
}

template <class K>
void allow_shared(K kernel, size_t bytes) {
  FORGE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
}

void launch_fwd(const TreeAttentionParams& p, cudaStream_t stream) {
  const size_t smem = (3 * tile_floats(p.head_dim) + kAttnWarps * kAttnTile) * sizeof(float);
  allow_shared(tree_attention_fwd_kernel, smem);
  FORGE_LAUNCH(tree_attention_fwd_kernel, dim3(attention_tiles(p.T), p.n_heads), kThreads,
               smem, stream, p);
}

void launch_delta(const TreeAttentionParams& p, cudaStream_t stream) {
  const unsigned pairs = unsigned(p.T) * p.n_heads;
  FORGE_LAUNCH(attention_delta_kernel, (pairs + kAttnWarps - 1) / kAttnWarps, kThreads, 0, stream, p);
}

void launch_bwd(const TreeAttentionParams& p, cudaStream_t stream) {
  const size_t dkdv_smem =
      (4 * tile_floats(p.head_dim) + 2 * kAttnTile * kAttnTile + 2 * kAttnTile) * sizeof(float);
  allow_shared(tree_attention_dkdv_kernel, dkdv_smem);
  FORGE_LAUNCH(tree_attention_dkdv_kernel, dim3(attention_tiles(p.T), p.n_kv_heads), kThreads,
               dkdv_smem, stream, p);
  const size_t dq_smem = (4 * tile_floats(p.head_dim) + kAttnWarps * kAttnTile) * sizeof(float);
  allow_shared(tree_attention_dq_kernel, dq_smem);
  FORGE_LAUNCH(tree_attention_dq_kernel, dim3(attention_tiles(p.T), p.n_heads), kThreads,
               dq_smem, stream, p);
}

// p.qkv_bf16 as Q, K and V, packed [T][q | k | v].
Bf16Qkv bf16_view(const TreeAttentionParams& p) {
  const int qd = p.n_heads * p.head_dim, kvd = p.n_kv_heads * p.head_dim;
  return {p.qkv_bf16, p.qkv_bf16 + qd, p.qkv_bf16 + qd + kvd, qd + 2 * kvd};
}
// Rounds the Q, K and V columns into p.qkv_bf16.
Bf16Qkv bf16_inputs(const TreeAttentionParams& p, cudaStream_t stream) {
  const int qd = p.n_heads * p.head_dim, kvd = p.n_kv_heads * p.head_dim, ld = qd + 2 * kvd;
  const Bf16Qkv in = bf16_view(p);
  launch_round_to_bf16(p.q, p.T, qd, p.ld_qkv, p.qkv_bf16, ld, stream);
  launch_round_to_bf16(p.k, p.T, kvd, p.ld_qkv, p.qkv_bf16 + qd, ld, stream);
  launch_round_to_bf16(p.v, p.T, kvd, p.ld_qkv, p.qkv_bf16 + qd + kvd, ld, stream);
  return in;
}
}  // namespace

void launch_tree_attention_fwd(const TreeAttentionParams& p, cudaStream_t stream) {
  check_shape(p);
  if (p.T <= 0) return;
  launch_tile_bounds(p, stream);
  if (p.qkv_bf16) {
    launch_tree_attention_fwd_tc(p, p.qkv_bf16_given ? bf16_view(p) : bf16_inputs(p, stream), stream);
  } else if (p.tf32x3) {
    launch_tree_attention_fwd_3xtf32(p, stream);
  } else {
    launch_fwd(p, stream);
  }
}

void launch_tree_attention_bwd(const TreeAttentionParams& p, cudaStream_t stream) {
  check_shape(p);
  if (p.T <= 0) return;
  launch_tile_bounds(p, stream);
  FORGE_CHECK(!p.qkv_bf16 || p.dout_bf16, "bf16 tree attention backward needs dO as bf16 (dout_bf16)");
  FORGE_CHECK(p.dout || (p.qkv_bf16 && p.dout_bf16 && !p.dout_bf16_out),
              "tree attention backward needs dO (dout, or dout_bf16 given with bf16 q|k|v)");
  FORGE_CHECK(p.out_bf16 || p.out, "tree attention backward needs the forward's output (out or out_bf16)");
  launch_delta(p, stream);  // and dO rounded into p.dout_bf16_out in bf16 mode with FP32 dO
  if (p.qkv_bf16) {
    launch_tree_attention_bwd_tc(p, p.qkv_bf16_kept ? bf16_view(p) : bf16_inputs(p, stream), stream);
  } else if (p.tf32x3) {
    launch_tree_attention_bwd_3xtf32(p, stream);
  } else {
    launch_bwd(p, stream);
  }
}

FORGE_CUDA_NAMESPACE_END
