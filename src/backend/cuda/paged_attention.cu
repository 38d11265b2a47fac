// See paged_attention.cuh.
#include "backend/cuda/paged_attention.cuh"

#include <cmath>

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kThreads = 128;
constexpr int kChunks = kPagedMaxHeadDim / kThreads;

__global__ void kv_cache_write_kernel(const KvCacheWriteArgs a) {
  const size_t n = size_t(a.T) * a.row_dim;
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const size_t t = e / a.row_dim, c = e - t * a.row_dim;
    const size_t dst = size_t(a.slot[t]) * a.row_dim + c;
    a.k_cache[dst] = a.k[t * a.ld + c];
    a.v_cache[dst] = a.v[t * a.ld + c];
  }
}

__global__ void __launch_bounds__(kThreads) paged_attention_kernel(const PagedAttentionArgs a, float scale) {
  FORGE_SHARED_MEMORY(float, smem);
  const int D = a.head_dim, bs = a.block_size;
  float* qs = smem;            // [D] pre-scaled
  float* ps = qs + D;          // [kThreads]
  float* scratch = ps + kThreads;  // [32]
  const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  const size_t row = size_t(a.n_kv_heads) * D;
  const int32_t* table = a.block_table + a.table_begin[t];
  const int n = a.position[t] + 1;
  for (int d = tid; d < D; d += kThreads) qs[d] = a.q[size_t(t) * a.ld_q + h * D + d] * scale;
  __syncthreads();
  float m = -INFINITY, l = 0.0f, o[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) o[c] = 0.0f;
  for (int p0 = 0; p0 < n; p0 += kThreads) {
    const int nb = min(int(kThreads), n - p0);
    float s = -INFINITY;
    if (tid < nb) {
      const int pos = p0 + tid;
      const float* k = a.k_cache + (size_t(table[pos / bs]) * bs + pos % bs) * row + kvh * D;
      s = 0.0f;
      for (int d = 0; d < D; ++d) s += qs[d] * k[d];
    }
    const float mx = fmaxf(m, block_max(s, scratch));  // finite: nb >= 1
    const float pv = expf(s - mx), corr = expf(m - mx);
    ps[tid] = pv;
    l = l * corr + block_sum(pv, scratch);  // block_sum's barrier publishes ps
    m = mx;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = tid + c * kThreads;
      if (d >= D) continue;
      float acc = o[c] * corr;
      for (int j = 0; j < nb; ++j) {
        const int pos = p0 + j;
        acc += ps[j] * a.v_cache[(size_t(table[pos / bs]) * bs + pos % bs) * row + kvh * D + d];
      }
      o[c] = acc;
    }
    __syncthreads();  // ps is rewritten by the next chunk
  }
  const float inv = 1.0f / l;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int d = tid + c * kThreads;
    if (d < D) a.out[size_t(t) * a.n_heads * D + h * D + d] = o[c] * inv;
  }
}
}  // namespace

void launch_kv_cache_write(const KvCacheWriteArgs& a, cudaStream_t stream) {
  const size_t n = size_t(a.T) * a.row_dim;
  if (n) FORGE_LAUNCH(kv_cache_write_kernel, grid_for(n, 256), 256u, 0, stream, a);
}

void launch_paged_attention_fwd(const PagedAttentionArgs& a, cudaStream_t stream) {
  FORGE_CHECK(a.head_dim >= 1 && a.head_dim <= kPagedMaxHeadDim,
              "CUDA paged attention supports head_dim up to " + std::to_string(kPagedMaxHeadDim));
  if (a.T <= 0) return;
  const size_t smem = (a.head_dim + kThreads + 32) * sizeof(float);
  FORGE_LAUNCH(paged_attention_kernel, dim3(a.T, a.n_heads), kThreads, smem, stream, a,
               1.0f / std::sqrt(static_cast<float>(a.head_dim)));
}

FORGE_CUDA_NAMESPACE_END
